//! Retrieval evaluation over labelled queries (`keyhole eval`).
//!
//! Every query goes through the same path a request takes: the registry is
//! indexed into the vector store, the query is embedded and searched, and the
//! engine resolves the planner-phase candidate set. The modes:
//! - `hybrid`: the engine with cosine hits (what control serves);
//! - `lexical`: the engine without cosines (what control serves while a new
//!   registry is being indexed);
//! - `cosine`: plain cosine ranking, the top 12 surfaced (a baseline);
//! - `rrf`: reciprocal-rank fusion (k = 60) of the cosine ranking and a plain
//!   BM25 ranking (k1 = 1.2, b = 0.75) over each tool's embedding text, the
//!   top 12 surfaced (a baseline, on the same embeddings);
//! - `clauses`: the engine with multi-intent turns split into clauses, each
//!   clause embedded and retrieved on its own
//!   ([`resolve_clauses`](keyhole_core::tools::rank::pipeline::resolve_clauses));
//! - `fitted`, `fitted-clauses`: `hybrid` and `clauses` with the confidence
//!   budget's margin fitted on this dataset's tune part (see below);
//! - `ablation`: `hybrid` with each stage after fusion switched in turn
//!   ([`ABLATIONS`]: `no-threshold`, `no-domain`, `with-dedup` — the one stage
//!   off by default, switched on —, `no-workflow`, `no-budget`, `no-floors`,
//!   `no-patient-floor`, `no-embedder-top`, `no-clauses`), each reported as
//!   its own mode beside `hybrid` and `rrf`, on the same embeddings.
//!
//! # Fitting the confidence budget
//! The margin of `pipeline.budget` (hits within it of the best are kept) is
//! chosen from a fixed grid ([`MARGIN_GRID`]: no cut, then 0 to 0.15 in steps
//! of 0.005) on the tune part only. The rule: the smallest margin whose
//! full-gold recall is at least the recall without a cut minus
//! [`FIT_TOLERANCE`] (0.02) — the fewest tools that give up at most two points
//! of full-gold recall. Its out-of-sample behaviour is estimated by
//! [`FIT_FOLDS`]-fold cross-validation over the tune part (folds by a fixed
//! hash of the query id: the margin is fitted on four folds and measured on
//! the fifth); the margin reported and applied to the check part is the one
//! the rule picks on the whole tune part.
//!
//! # Tune and check parts
//! Every query falls in a fixed part by its id: `check` when the first two
//! bytes of `sha256("keyhole-split-v1\0" + id)`, read big-endian, modulo 100
//! are below [`CHECK_PERCENT`] (35), else `tune`. Figures are reported for
//! `all`, `tune` and `check`. Rules, weights and thresholds are fitted on the
//! tune part only; check-part misses are never looked at while tuning.
//!
//! Figures per mode: full-gold recall within the surfaced set, recall@k,
//! MRR, nDCG@10 (binary relevance), mean surfaced count, forbidden tools
//! surfaced, and the request bytes before and after the rewrite.

use crate::embed::Side;
use crate::index::sync::SyncError;
use crate::index::{IndexError, Search};
use crate::load::{LoadError, LoadedRegistry};
use crate::resolve::{offer_tool_search, Resolver};
use keyhole_core::alias::reading::{ranking_text_of_raw, ReadingError};
use keyhole_core::alias::Taxonomy;
use keyhole_core::tools::format;
use keyhole_core::tools::rank::clauses::interleave;
use keyhole_core::tools::rank::config::{RankConfig, RankSettings};
use keyhole_core::tools::rank::pipeline::{per_subtask, resolve_clauses, search, Clause, Turn};
use keyhole_core::Phase;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Which ranking an evaluation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The engine with cosine hits.
    Hybrid,
    /// Plain cosine ranking, top 12 surfaced.
    Cosine,
    /// The engine without cosines.
    Lexical,
    /// Reciprocal-rank fusion of cosine and BM25 (k = 60), top 12 surfaced.
    Rrf,
    /// The engine with each clause of a multi-intent turn retrieved as well.
    Clauses,
    /// `hybrid` with the confidence margin fitted on the tune part.
    Fitted,
    /// `clauses` with the confidence margin fitted on the tune part.
    FittedClauses,
    /// Every ablation mode below, in turn (expanded before the run).
    Ablation,
    /// `hybrid` without the score threshold.
    #[serde(rename = "no-threshold")]
    NoThreshold,
    /// `hybrid` without domain scoping.
    #[serde(rename = "no-domain")]
    NoDomain,
    /// `hybrid` with semantic-group dedup, which is off by default.
    #[serde(rename = "with-dedup")]
    WithDedup,
    /// `hybrid` without the workflow boost.
    #[serde(rename = "no-workflow")]
    NoWorkflow,
    /// `hybrid` without the confidence budget (no margin: every hit above the
    /// threshold, up to the phase maximum).
    #[serde(rename = "no-budget")]
    NoBudget,
    /// `hybrid` without the prompt-conditioned floors (multi-entity, research).
    #[serde(rename = "no-floors")]
    NoFloors,
    /// `hybrid` without the patient-resolve floor.
    #[serde(rename = "no-patient-floor")]
    NoPatientFloor,
    /// `hybrid` without the embedder's best tools kept past the budget's cut.
    #[serde(rename = "no-embedder-top")]
    NoEmbedderTop,
    /// `hybrid` without clause retrieval (multi-intent turns retrieved whole).
    #[serde(rename = "no-clauses")]
    NoClauses,
}

/// The modes [`Mode::Ablation`] stands for: each post-fusion stage switched
/// in turn (off, or on for the one off by default).
pub const ABLATIONS: [Mode; 9] = [
    Mode::NoThreshold,
    Mode::NoDomain,
    Mode::WithDedup,
    Mode::NoWorkflow,
    Mode::NoBudget,
    Mode::NoFloors,
    Mode::NoPatientFloor,
    Mode::NoEmbedderTop,
    Mode::NoClauses,
];

impl Mode {
    /// Whether the mode retrieves clauses.
    fn clauses(self) -> bool {
        matches!(self, Mode::Clauses | Mode::FittedClauses)
    }

    /// Whether the mode fits the confidence margin.
    fn fitted(self) -> bool {
        matches!(self, Mode::Fitted | Mode::FittedClauses)
    }

    /// `modes` with [`Mode::Ablation`] replaced by [`ABLATIONS`], each mode once,
    /// in order.
    pub fn expand(modes: &[Mode]) -> Vec<Mode> {
        let mut out: Vec<Mode> = Vec::new();
        for &m in modes {
            let each: &[Mode] = if m == Mode::Ablation {
                &ABLATIONS
            } else {
                std::slice::from_ref(&m)
            };
            for &m in each {
                if !out.contains(&m) {
                    out.push(m);
                }
            }
        }
        out
    }

    /// The engine's settings for this mode: `base` with one stage switched
    /// for an ablation mode, `None` for every other mode.
    pub fn ablated(self, base: &RankSettings) -> Option<RankSettings> {
        let mut s = base.clone();
        match self {
            // Far below any fused score: nothing is dropped.
            Mode::NoThreshold => s.pipeline.threshold = -1.0e6,
            Mode::NoDomain => s.pipeline.domain.enabled = false,
            Mode::WithDedup => s.pipeline.dedup.enabled = true,
            Mode::NoWorkflow => s.pipeline.workflow.boost = 0.0,
            Mode::NoBudget => s.pipeline.budget.margin = None,
            Mode::NoFloors => {
                s.floors.multi_entity.phases.clear();
                s.floors.research.phases.clear();
            }
            Mode::NoPatientFloor => s.floors.patient_resolve.phases.clear(),
            Mode::NoEmbedderTop => s.pipeline.budget.embedder_top = 0,
            Mode::NoClauses => s.clauses.enabled = false,
            _ => return None,
        }
        Some(s)
    }
}

/// Folds of the cross-validation that estimates the fitted margin.
pub const FIT_FOLDS: u8 = 5;

/// Full-gold recall the fitted margin may give up against no cut.
pub const FIT_TOLERANCE: f64 = 0.02;

/// The margins the fit chooses from: `None` (no cut), then 0 to 0.15 by 0.005.
pub const MARGIN_GRID: [Option<f32>; 32] = {
    let mut grid = [None; 32];
    let mut i = 1;
    while i < 32 {
        grid[i] = Some((i - 1) as f32 / 200.0);
        i += 1;
    }
    grid
};

/// Share of queries (percent) in the check part.
pub const CHECK_PERCENT: u16 = 35;

/// Which part of a dev set a figure covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// Every query.
    All,
    /// The tuning part (about 65 %).
    Tune,
    /// The check part (about 35 %): never tuned on.
    Check,
}

/// A query's cross-validation fold within the tune part (a fixed hash of its id).
fn fold_of(id: &str) -> u8 {
    let digest = Sha256::new_with_prefix(b"keyhole-fold-v1\0")
        .chain_update(id.as_bytes())
        .finalize();
    digest[0] % FIT_FOLDS
}

impl Part {
    /// The part a query id falls in (fixed: a hash of the id, see the module doc).
    pub fn of(id: &str) -> Part {
        let digest = Sha256::new_with_prefix(b"keyhole-split-v1\0")
            .chain_update(id.as_bytes())
            .finalize();
        let bucket = u16::from_be_bytes([digest[0], digest[1]]) % 100;
        if bucket < CHECK_PERCENT {
            Part::Check
        } else {
            Part::Tune
        }
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::All => "all",
            Part::Tune => "tune",
            Part::Check => "check",
        }
    }
}

/// Plain Okapi BM25 (k1 = 1.2, b = 0.75) over lower-cased alphanumeric
/// tokens of each tool's text: the textbook lexical baseline, independent of
/// the engine's own lexical score.
struct Bm25 {
    docs: Vec<(String, HashMap<String, f64>, f64)>,
    df: HashMap<String, f64>,
    avg_len: f64,
}

fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

impl Bm25 {
    fn new(docs: impl Iterator<Item = (String, String)>) -> Bm25 {
        let mut out = Bm25 {
            docs: Vec::new(),
            df: HashMap::new(),
            avg_len: 0.0,
        };
        for (name, text) in docs {
            let mut tf: HashMap<String, f64> = HashMap::new();
            let mut len = 0.0;
            for t in tokens(&text) {
                *tf.entry(t).or_default() += 1.0;
                len += 1.0;
            }
            for t in tf.keys() {
                *out.df.entry(t.clone()).or_default() += 1.0;
            }
            out.docs.push((name, tf, len));
        }
        out.avg_len = out.docs.iter().map(|d| d.2).sum::<f64>() / out.docs.len().max(1) as f64;
        out
    }

    /// Tool names by BM25 score, best first (ties by name); only scoring tools.
    fn rank(&self, query: &str) -> Vec<String> {
        let (k1, b) = (1.2, 0.75);
        let n = self.docs.len() as f64;
        let terms: HashSet<String> = tokens(query).collect();
        let mut scored: Vec<(f64, &str)> = self
            .docs
            .iter()
            .filter_map(|(name, tf, len)| {
                let score: f64 = terms
                    .iter()
                    .filter_map(|t| {
                        let f = *tf.get(t)?;
                        let df = self.df.get(t).copied().unwrap_or(0.0);
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        Some(
                            idf * f * (k1 + 1.0)
                                / (f + k1 * (1.0 - b + b * len / self.avg_len.max(1e-9))),
                        )
                    })
                    .sum();
                (score > 0.0).then_some((score, name.as_str()))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        scored.into_iter().map(|(_, n)| n.to_owned()).collect()
    }
}

/// Reciprocal-rank fusion of rankings (`k` = 60 by convention), best first, ties by name.
fn rrf(rankings: &[&[String]], k: f64) -> Vec<String> {
    let mut score: HashMap<&str, f64> = HashMap::new();
    for ranking in rankings {
        for (i, name) in ranking.iter().enumerate() {
            *score.entry(name.as_str()).or_default() += 1.0 / (k + (i + 1) as f64);
        }
    }
    let mut all: Vec<(&str, f64)> = score.into_iter().collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    all.into_iter().map(|(n, _)| n.to_owned()).collect()
}

/// One labelled query.
#[derive(Debug, Clone, Deserialize)]
pub struct Query {
    /// Query id.
    pub id: String,
    /// The user turn.
    pub query: String,
    /// Tool ids that must be surfaced.
    pub gold: Vec<String>,
    /// Tool ids that must not be surfaced.
    #[serde(default)]
    pub forbidden: Vec<String>,
}

/// Why an evaluation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The queries file could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Indexing the registry failed.
    #[error("indexing the registry")]
    Sync(#[from] SyncError),
    /// Embedding the queries failed.
    #[error("embedding the queries")]
    Embed(#[from] crate::embed::EmbedError),
    /// The vector search failed.
    #[error("searching the index")]
    Index(#[from] IndexError),
    /// The settings of a fitted or clause mode (a grid margin, clauses on)
    /// are not valid ranking settings.
    #[error("the ranking settings of a fitted or clause mode")]
    Grid(#[from] keyhole_core::tools::rank::config::RankConfigError),
    /// The request body could not be rewritten.
    #[error("the registry's request body is unreadable: {0}")]
    Request(String),
    /// A query's raw ids could not be read as the live path reads them.
    #[error("query {id}: its ids could not be aliased")]
    Reading {
        /// The query's id.
        id: String,
        /// Why.
        #[source]
        source: ReadingError,
    },
}

/// Reads a queries file (JSON lines). With `sample`, keeps an evenly spaced
/// deterministic subset of about that many queries (every ⌈n/sample⌉-th line).
pub fn load_queries(path: &Path, sample: Option<usize>) -> Result<Vec<Query>, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let q: Query = serde_json::from_str(line).map_err(|e| LoadError::Json {
            path: path.to_owned(),
            line: i + 1,
            problem: e.to_string(),
        })?;
        out.push(q);
    }
    if let Some(n) = sample.filter(|&n| n > 0 && n < out.len()) {
        let step = out.len().div_ceil(n);
        out = out.into_iter().step_by(step).collect();
    }
    Ok(out)
}

/// The figures of one mode on one dataset.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    /// Dataset name.
    pub dataset: String,
    /// The mode.
    pub mode: Mode,
    /// Which queries: all, the tune part or the check part.
    pub part: Part,
    /// Business tools in the registry.
    pub tools: usize,
    /// Queries evaluated.
    pub queries: usize,
    /// The `k` of recall@k.
    pub k: usize,
    /// Share of queries whose every gold tool is surfaced.
    pub full_gold_recall: f64,
    /// Mean share of gold tools in the top k.
    pub recall_at_k: f64,
    /// Mean reciprocal rank of the first gold tool (top 100).
    pub mrr: f64,
    /// Mean nDCG@10 (binary relevance).
    pub ndcg_at_10: f64,
    /// Mean number of surfaced tools.
    pub mean_surfaced: f64,
    /// Queries that list forbidden tools.
    pub queries_with_forbidden: usize,
    /// Of those, queries where a forbidden tool was surfaced.
    pub forbidden_surfaced: usize,
    /// Request bytes with every tool.
    pub request_bytes_before: usize,
    /// Mean request bytes after the rewrite to the surfaced set.
    pub request_bytes_after: f64,
    /// The confidence budget's margin the engine ran with (`None`: no cut,
    /// or a baseline).
    pub budget_margin: Option<f32>,
    /// How a fitted mode's margin was chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<Fit>,
}

/// The fit of the confidence margin on a dataset's tune part.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fit {
    /// Cross-validation folds.
    pub folds: u8,
    /// Full-gold recall the margin may give up against no cut.
    pub tolerance: f64,
    /// The margin picked on each fold's complement, by fold.
    pub fold_margins: Vec<Option<f32>>,
    /// Out-of-fold full-gold recall over the tune part.
    pub cv_full_gold_recall: f64,
    /// Out-of-fold mean surfaced count over the tune part.
    pub cv_mean_surfaced: f64,
    /// Tune-part full-gold recall without a cut.
    pub tune_recall_uncut: f64,
}

/// One query's outcome at one margin of the grid.
#[derive(Debug, Clone, Copy, Default)]
struct Outcome {
    full: bool,
    surfaced: usize,
}

/// The fitting rule on a set of queries (each row: outcomes over
/// [`MARGIN_GRID`]): the first margin whose full-gold recall is within
/// `tolerance` of the uncut recall; the grid index.
fn fit_margin(rows: &[&[Outcome]], tolerance: f64) -> usize {
    let n = rows.len().max(1) as f64;
    let recall = |g: usize| {
        rows.iter()
            .filter(|r| r.get(g).is_some_and(|o| o.full))
            .count() as f64
            / n
    };
    let uncut = recall(0);
    (1..MARGIN_GRID.len())
        .find(|&g| recall(g) >= uncut - tolerance - 1e-9)
        .unwrap_or(0)
}

/// Fits the margin on the tune queries (`(fold, outcomes)`): the chosen
/// grid index on the whole tune part and the cross-validated estimate.
fn fit(tune: &[(u8, &[Outcome])]) -> (usize, Fit) {
    let mut fold_margins = Vec::new();
    let (mut full, mut shown, mut n) = (0usize, 0usize, 0usize);
    for f in 0..FIT_FOLDS {
        let train: Vec<&[Outcome]> = tune
            .iter()
            .filter(|(k, _)| *k != f)
            .map(|(_, o)| *o)
            .collect();
        let g = fit_margin(&train, FIT_TOLERANCE);
        fold_margins.push(MARGIN_GRID.get(g).copied().flatten());
        for (_, o) in tune.iter().filter(|(k, _)| *k == f) {
            let o = o.get(g).copied().unwrap_or_default();
            full += usize::from(o.full);
            shown += o.surfaced;
            n += 1;
        }
    }
    let all: Vec<&[Outcome]> = tune.iter().map(|(_, o)| *o).collect();
    let uncut = all
        .iter()
        .filter(|r| r.first().is_some_and(|o| o.full))
        .count() as f64
        / all.len().max(1) as f64;
    let g = fit_margin(&all, FIT_TOLERANCE);
    let n = n.max(1) as f64;
    let fit = Fit {
        folds: FIT_FOLDS,
        tolerance: FIT_TOLERANCE,
        fold_margins,
        cv_full_gold_recall: full as f64 / n,
        cv_mean_surfaced: shown as f64 / n,
        tune_recall_uncut: uncut,
    };
    (g, fit)
}

#[derive(Default)]
struct Totals {
    n: usize,
    full: usize,
    recall: f64,
    mrr: f64,
    ndcg: f64,
    surfaced: usize,
    with_forbidden: usize,
    forbidden_hit: usize,
    bytes_after: usize,
}

impl Totals {
    /// Adds one query's outcome: `surfaced` and `ranked` are tool ids.
    fn add(
        &mut self,
        q: &Query,
        surfaced: &[String],
        ranked: &[String],
        k: usize,
        bytes_after: usize,
    ) {
        let gold: HashSet<&str> = q.gold.iter().map(String::as_str).collect();
        let shown: HashSet<&str> = surfaced.iter().map(String::as_str).collect();
        self.n += 1;
        self.full += usize::from(gold.iter().all(|g| shown.contains(g)));
        if !gold.is_empty() {
            let in_k = ranked
                .iter()
                .take(k)
                .filter(|t| gold.contains(t.as_str()))
                .count();
            self.recall += in_k as f64 / gold.len() as f64;
        }
        if let Some(rank) = ranked
            .iter()
            .take(100)
            .position(|t| gold.contains(t.as_str()))
        {
            self.mrr += 1.0 / (rank + 1) as f64;
        }
        let dcg: f64 = ranked
            .iter()
            .take(10)
            .enumerate()
            .filter(|(_, t)| gold.contains(t.as_str()))
            .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
            .sum();
        let ideal: f64 = (0..gold.len().min(10))
            .map(|i| 1.0 / ((i + 2) as f64).log2())
            .sum();
        if ideal > 0.0 {
            self.ndcg += dcg / ideal;
        }
        self.surfaced += surfaced.len();
        if !q.forbidden.is_empty() {
            self.with_forbidden += 1;
            self.forbidden_hit +=
                usize::from(q.forbidden.iter().any(|f| shown.contains(f.as_str())));
        }
        self.bytes_after += bytes_after;
    }

    fn metrics(
        &self,
        dataset: &str,
        mode: Mode,
        part: Part,
        tools: usize,
        k: usize,
        bytes_before: usize,
    ) -> Metrics {
        let n = self.n.max(1) as f64;
        Metrics {
            dataset: dataset.to_owned(),
            mode,
            part,
            tools,
            queries: self.n,
            k,
            full_gold_recall: self.full as f64 / n,
            recall_at_k: self.recall / n,
            mrr: self.mrr / n,
            ndcg_at_10: self.ndcg / n,
            mean_surfaced: self.surfaced as f64 / n,
            queries_with_forbidden: self.with_forbidden,
            forbidden_surfaced: self.forbidden_hit,
            request_bytes_before: bytes_before,
            request_bytes_after: self.bytes_after as f64 / n,
            budget_margin: None,
            fit: None,
        }
    }
}

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Dataset name for the report.
    pub dataset: String,
    /// The `k` of recall@k.
    pub k: usize,
    /// Modes to run, side by side on the same embeddings.
    pub modes: Vec<Mode>,
    /// The alias taxonomy a turn's raw ids are read with: each query is
    /// ranked as control ranks it live, its ids aliased and every alias read
    /// as its kind ([`ranking_text_of_raw`]).
    pub taxonomy: Arc<Taxonomy>,
}

/// A tune-part query whose surfaced set missed a gold tool, in the first mode
/// evaluated: what to read while tuning. Check-part misses are never listed (their
/// figures are read, their turns are not).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Miss {
    /// Query id.
    pub id: String,
    /// The user turn.
    pub query: String,
    /// Each gold tool not surfaced, with its 1-based place in the ranking
    /// before the budget's cut (`None`: not in the top 100).
    pub missing: Vec<(String, Option<usize>)>,
    /// How many tools were surfaced.
    pub surfaced: usize,
}

/// What [`evaluate`] found: figures per mode and part, and the tune part's
/// misses in the first mode of [`EvalOptions::modes`].
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// One entry per mode and part.
    pub metrics: Vec<Metrics>,
    /// The tune part's misses in the first mode, in query order (a fitted
    /// mode's at the first margin of the grid).
    pub tune_misses: Vec<Miss>,
}

/// One query's result in one mode: surfaced and ranked tool ids, request bytes.
struct Answer {
    surfaced: Vec<String>,
    ranked: Vec<String>,
    bytes_after: usize,
}

/// Runs the evaluation of `queries` against `registry`, one [`Metrics`] per
/// mode and part, and the tune part's misses in the first mode.
///
/// Indexes the registry (incrementally: a second run embeds nothing new),
/// embeds every query once (and, for the clause modes, every clause of a
/// multi-clause query), and resolves each in every mode. Fitted modes resolve
/// each query at every margin of [`MARGIN_GRID`], fit on the tune part and
/// report every part at the fitted margin. Fails when the embedder or the
/// store fails.
pub async fn evaluate(
    resolver: &Resolver,
    registry: &LoadedRegistry,
    queries: &[Query],
    options: &EvalOptions,
) -> Result<Evaluation, EvalError> {
    // Live traffic is never ranked with raw ids: control ranks the turn
    // aliased, each alias read as its kind. So is every query here.
    let read: Vec<Query> = queries
        .iter()
        .map(|q| {
            let query = ranking_text_of_raw(&options.taxonomy, &q.query).map_err(|source| {
                EvalError::Reading {
                    id: q.id.clone(),
                    source,
                }
            })?;
            Ok(Query { query, ..q.clone() })
        })
        .collect::<Result<_, EvalError>>()?;
    let queries = read.as_slice();
    let (prepared, report) = resolver.prepare(&registry.tools).await?;
    tracing::info!(dataset = %options.dataset, tools = report.tools, upserted = report.upserted, "registry indexed");
    let reg = prepared.registry();
    let config = resolver.rank_config();
    let modes = Mode::expand(&options.modes);
    // Per mode: the engine with one stage off (ablation modes), else `None`.
    let ablated: Vec<Option<RankConfig>> = modes
        .iter()
        .map(|m| m.ablated(config.settings()).map(RankConfig::try_new))
        .map(Option::transpose)
        .collect::<Result<_, _>>()?;
    let needs_cosine = modes.iter().any(|m| *m != Mode::Lexical);
    let embedder = resolver.indexer().embedder();
    let vectors = if needs_cosine {
        let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
        embedder.embed(Side::Query, &texts).await?
    } else {
        Vec::new()
    };
    // Clauses of multi-clause queries, embedded in one go.
    let clause_texts: Vec<Vec<&str>> =
        if config.settings().clauses.enabled || modes.iter().any(|m| m.clauses()) {
            queries
                .iter()
                .map(|q| config.settings().clauses.split(&q.query))
                .map(|c| if c.len() >= 2 { c } else { Vec::new() })
                .collect()
        } else {
            vec![Vec::new(); queries.len()]
        };
    let flat: Vec<&str> = clause_texts.iter().flatten().copied().collect();
    let mut clause_vectors = embedder.embed(Side::Query, &flat).await?.into_iter();
    let multi = clause_texts.iter().filter(|c| !c.is_empty()).count();
    tracing::info!(
        queries = queries.len(),
        multi_clause = multi,
        clauses = flat.len(),
        "queries embedded"
    );

    let parsed = format::parse("/v1/chat/completions", &registry.request)
        .map_err(|e| EvalError::Request(e.to_string()))?
        .ok_or_else(|| EvalError::Request("no tools".into()))?;
    let bytes_before = registry.request.len();
    let id_of = |name: &str| {
        reg.by_name(name)
            .map_or_else(|| name.to_owned(), |t| t.id.clone())
    };
    let bytes_after = |names: &[String]| {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        parsed
            .rewrite(&registry.request, &parsed.select(&refs, usize::MAX))
            .len()
    };
    let depth = options.k.max(100);
    let bm25 = modes.contains(&Mode::Rrf).then(|| {
        Bm25::new(
            reg.tools()
                .iter()
                .filter(|t| t.is_business())
                .map(|t| (t.name.clone(), t.embedding_text())),
        )
    });
    // The clause modes run with clause retrieval on, whatever the settings say.
    let with_clauses = {
        let mut s = config.settings().clone();
        s.clauses.enabled = true;
        RankConfig::try_new(s)?
    };
    // The engine at every margin of the grid (fitted modes only).
    let grid = |base: &RankConfig| -> Result<Vec<RankConfig>, EvalError> {
        MARGIN_GRID
            .iter()
            .map(|&margin| {
                let mut s = base.settings().clone();
                s.pipeline.budget.margin = margin;
                RankConfig::try_new(s).map_err(EvalError::from)
            })
            .collect()
    };
    let grid_plain = if modes.contains(&Mode::Fitted) {
        grid(config)?
    } else {
        Vec::new()
    };
    let grid_clauses = if modes.contains(&Mode::FittedClauses) {
        grid(&with_clauses)?
    } else {
        Vec::new()
    };

    // Per mode: the answer of each query (fitted modes: one per grid margin).
    let mut answers: Vec<Vec<Vec<Answer>>> = modes
        .iter()
        .map(|_| Vec::with_capacity(queries.len()))
        .collect();
    for (i, q) in queries.iter().enumerate() {
        let hits: Vec<(String, f32)> = match vectors.get(i) {
            Some(v) => search_all(resolver, v, reg.len()).await?,
            None => Vec::new(),
        };
        let mut clause_hits: Vec<Vec<(String, f32)>> = Vec::new();
        for _ in clause_texts.get(i).into_iter().flatten() {
            let v = clause_vectors
                .next()
                .ok_or_else(|| EvalError::Request("a clause vector went missing".into()))?;
            clause_hits.push(search_all(resolver, &v, reg.len()).await?);
        }
        let clauses: Vec<Clause<'_>> = clause_texts
            .get(i)
            .into_iter()
            .flatten()
            .zip(&clause_hits)
            .map(|(text, cosine)| Clause { text, cosine })
            .collect();
        let answer = |surfaced: Vec<String>, ranked: &[String]| Answer {
            bytes_after: bytes_after(&surfaced),
            surfaced: surfaced.iter().map(|n| id_of(n)).collect(),
            ranked: ranked.iter().map(|n| id_of(n)).collect(),
        };
        for ((mode, out), ablated) in modes.iter().zip(answers.iter_mut()).zip(&ablated) {
            let max = Phase::Planner.budget().max;
            let per_query = match mode {
                Mode::Rrf => {
                    let cos: Vec<String> = hits.iter().map(|(n, _)| n.clone()).collect();
                    let lex = bm25.as_ref().map(|b| b.rank(&q.query)).unwrap_or_default();
                    let ranked: Vec<String> =
                        rrf(&[&cos, &lex], 60.0).into_iter().take(depth).collect();
                    vec![answer(ranked.iter().take(max).cloned().collect(), &ranked)]
                }
                Mode::Cosine => {
                    let ranked: Vec<String> =
                        hits.iter().take(depth).map(|(n, _)| n.clone()).collect();
                    vec![answer(ranked.iter().take(max).cloned().collect(), &ranked)]
                }
                Mode::Hybrid
                | Mode::Lexical
                | Mode::Clauses
                | Mode::Fitted
                | Mode::FittedClauses
                | Mode::Ablation
                | Mode::NoThreshold
                | Mode::NoDomain
                | Mode::WithDedup
                | Mode::NoWorkflow
                | Mode::NoBudget
                | Mode::NoFloors
                | Mode::NoPatientFloor
                | Mode::NoEmbedderTop
                | Mode::NoClauses => {
                    let cosine: &[(String, f32)] = if *mode == Mode::Lexical { &[] } else { &hits };
                    let base = match ablated {
                        Some(a) => a,
                        None if mode.clauses() => &with_clauses,
                        None => config,
                    };
                    // As served: clauses are retrieved when the settings say
                    // so, and only with vectors.
                    let clauses: &[Clause<'_>] =
                        if *mode != Mode::Lexical && base.settings().clauses.enabled {
                            &clauses
                        } else {
                            &[]
                        };
                    let turn = Turn {
                        text: &q.query,
                        phase: Phase::Planner,
                        prior: &[],
                        tool_choice: None,
                        cosine: Some(cosine),
                    };
                    let mut ranked = search(reg, base, &q.query, cosine, depth);
                    if clauses.len() >= 2 {
                        let each = clauses
                            .iter()
                            .map(|c| per_subtask(reg, base, c.text, c.cosine))
                            .collect();
                        ranked = interleave(ranked, each, base.settings().clauses.per_clause_k);
                        ranked.truncate(depth);
                    }
                    let ranked: Vec<String> = ranked.into_iter().map(|c| c.name).collect();
                    let resolve_with = |cfg: &RankConfig| {
                        let mut res = resolve_clauses(reg, cfg, &turn, clauses);
                        // As served: the filter's control tool goes out with
                        // the set (`tool_search`, on by default) and takes one
                        // of the phase's places, so control composes the set
                        // for one place less.
                        offer_tool_search(&mut res, reg, Phase::Planner, &[], &[]);
                        answer(
                            res.candidates.into_iter().map(|c| c.name).collect(),
                            &ranked,
                        )
                    };
                    match mode {
                        Mode::Fitted => grid_plain.iter().map(resolve_with).collect(),
                        Mode::FittedClauses => grid_clauses.iter().map(resolve_with).collect(),
                        _ => vec![resolve_with(base)],
                    }
                }
            };
            out.push(per_query);
        }
    }

    let tune_misses = answers
        .first()
        .map(|answers| tune_misses(queries, answers))
        .unwrap_or_default();
    let business = reg.tools().iter().filter(|t| t.is_business()).count();
    let mut metrics = Vec::new();
    for ((mode, answers), ablated) in modes.iter().zip(&answers).zip(&ablated) {
        // The grid index each query is reported at, and the fit.
        let (at, fit_report, margin) = if mode.fitted() {
            let outcomes: Vec<Vec<Outcome>> = queries
                .iter()
                .zip(answers)
                .map(|(q, per_margin)| {
                    per_margin
                        .iter()
                        .map(|a| Outcome {
                            full: full_gold(q, &a.surfaced),
                            surfaced: a.surfaced.len(),
                        })
                        .collect()
                })
                .collect();
            let tune: Vec<(u8, &[Outcome])> = queries
                .iter()
                .zip(&outcomes)
                .filter(|(q, _)| Part::of(&q.id) == Part::Tune)
                .map(|(q, o)| (fold_of(&q.id), o.as_slice()))
                .collect();
            let (g, report) = fit(&tune);
            for (margin, at) in MARGIN_GRID.iter().zip(0..) {
                let n = tune.len().max(1) as f64;
                let full = tune
                    .iter()
                    .filter(|(_, o)| o.get(at).is_some_and(|o| o.full))
                    .count() as f64
                    / n;
                let shown = tune
                    .iter()
                    .filter_map(|(_, o)| o.get(at))
                    .map(|o| o.surfaced)
                    .sum::<usize>() as f64
                    / n;
                tracing::debug!(
                    ?mode,
                    ?margin,
                    full_gold_recall = full,
                    mean_surfaced = shown,
                    "tune part"
                );
            }
            let margin = MARGIN_GRID.get(g).copied().flatten();
            tracing::info!(dataset = %options.dataset, ?mode, ?margin, fold_margins = ?report.fold_margins, cv_full_gold_recall = report.cv_full_gold_recall, cv_mean_surfaced = report.cv_mean_surfaced, "confidence margin fitted on the tune part");
            (g, Some(report), margin)
        } else {
            // The margin applies to turns with cosines: not to baselines, not to lexical.
            let engine = matches!(mode, Mode::Hybrid | Mode::Clauses) || ablated.is_some();
            (
                0,
                None,
                if engine {
                    ablated
                        .as_ref()
                        .unwrap_or(config)
                        .settings()
                        .pipeline
                        .budget
                        .margin
                } else {
                    None
                },
            )
        };
        let mut totals: [Totals; 3] = Default::default();
        for (q, per_margin) in queries.iter().zip(answers) {
            let Some(a) = per_margin.get(at) else {
                continue;
            };
            let [all, tune, check] = &mut totals;
            let part = if Part::of(&q.id) == Part::Check {
                check
            } else {
                tune
            };
            for t in [all, part] {
                t.add(q, &a.surfaced, &a.ranked, options.k, a.bytes_after);
            }
        }
        let [all, tune, check] = &totals;
        for (part, t) in [(Part::All, all), (Part::Tune, tune), (Part::Check, check)] {
            let mut m = t.metrics(
                &options.dataset,
                *mode,
                part,
                business,
                options.k,
                bytes_before,
            );
            m.budget_margin = margin;
            m.fit = fit_report.clone();
            metrics.push(m);
        }
    }
    Ok(Evaluation {
        metrics,
        tune_misses,
    })
}

/// The tune-part queries of one mode's answers whose surfaced set misses a
/// gold tool.
fn tune_misses(queries: &[Query], answers: &[Vec<Answer>]) -> Vec<Miss> {
    queries
        .iter()
        .zip(answers)
        .filter(|(q, _)| Part::of(&q.id) == Part::Tune)
        .filter_map(|(q, per_margin)| {
            let a = per_margin.first()?;
            let missing: Vec<(String, Option<usize>)> = q
                .gold
                .iter()
                .filter(|g| !a.surfaced.contains(g))
                .map(|g| {
                    (
                        g.clone(),
                        a.ranked.iter().position(|r| r == g).map(|i| i + 1),
                    )
                })
                .collect();
            (!missing.is_empty()).then(|| Miss {
                id: q.id.clone(),
                query: q.query.clone(),
                missing,
                surfaced: a.surfaced.len(),
            })
        })
        .collect()
}

/// The cosine of `vector` to every tool of the indexed registry, best first.
async fn search_all(
    resolver: &Resolver,
    vector: &[f32],
    tools: usize,
) -> Result<Vec<(String, f32)>, EvalError> {
    Ok(
        match resolver.indexer().search(vector, tools.max(1)).await? {
            Search::Hits(h) => h.into_iter().map(|h| (h.name, h.score)).collect(),
            Search::Missing => Vec::new(),
        },
    )
}

/// Whether every gold tool of `q` is in `surfaced`.
fn full_gold(q: &Query, surfaced: &[String]) -> bool {
    q.gold.iter().all(|g| surfaced.contains(g))
}

/// Merges one dataset's figures into a JSON results file (an array of
/// [`Metrics`]): the dataset's previous figures are replaced, others kept.
/// Written through a temporary file and a rename.
pub fn merge_json(path: &Path, dataset: &str, metrics: &[Metrics]) -> std::io::Result<()> {
    let mut all: Vec<serde_json::Value> = match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    all.retain(|v| v.get("dataset").and_then(|d| d.as_str()) != Some(dataset));
    for m in metrics {
        all.push(serde_json::to_value(m).map_err(std::io::Error::other)?);
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(gold: &[&str], forbidden: &[&str]) -> Query {
        Query {
            id: "q".into(),
            query: String::new(),
            gold: gold.iter().map(|s| s.to_string()).collect(),
            forbidden: forbidden.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn metrics_follow_their_definitions() {
        let mut t = Totals::default();
        // Both gold tools surfaced; ranked 2nd and 4th.
        t.add(
            &q(&["a", "b"], &[]),
            &ids(&["x", "a", "b"]),
            &ids(&["x", "a", "y", "b"]),
            2,
            100,
        );
        // Gold missing from the surfaced set and the ranking; a forbidden tool shown.
        t.add(&q(&["c"], &["x"]), &ids(&["x"]), &ids(&["x", "y"]), 2, 50);
        let m = t.metrics("d", Mode::Hybrid, Part::All, 5, 2, 1000);
        assert_eq!(m.full_gold_recall, 0.5);
        assert_eq!(m.recall_at_k, 0.25, "(1/2 + 0) / 2");
        assert_eq!(m.mrr, 0.25, "(1/2 + 0) / 2");
        let dcg = 1.0 / 3f64.log2() + 1.0 / 5f64.log2();
        let ideal = 1.0 + 1.0 / 3f64.log2();
        assert!((m.ndcg_at_10 - dcg / ideal / 2.0).abs() < 1e-12);
        assert_eq!(m.mean_surfaced, 2.0);
        assert_eq!((m.queries_with_forbidden, m.forbidden_surfaced), (1, 1));
        assert_eq!(m.request_bytes_after, 75.0);
    }

    #[test]
    fn the_split_is_a_fixed_hash_of_the_id_with_about_35_percent_check() {
        let check = (0..2000)
            .filter(|i| Part::of(&format!("q{i}")) == Part::Check)
            .count();
        assert!((600..800).contains(&check), "{check} of 2000");
        assert_eq!(Part::of("q1"), Part::of("q1"));
    }

    #[test]
    fn rrf_fuses_ranks_and_bm25_prefers_rare_matching_terms() {
        let a = ids(&["x", "y", "z"]);
        let b = ids(&["y", "w"]);
        assert_eq!(rrf(&[&a, &b], 60.0), ["y", "x", "w", "z"]);
        let bm = Bm25::new(
            [
                ("lab", "order lab test panel"),
                ("note", "write a clinical note"),
                ("bill", "create invoice for the visit"),
            ]
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t.to_owned())),
        );
        assert_eq!(
            bm.rank("order a lipid panel"),
            ["lab", "note"],
            "\"a\" matches the note"
        );
    }

    #[test]
    fn the_fit_takes_the_first_margin_within_the_tolerance() {
        let o = |full: bool, surfaced: usize| Outcome { full, surfaced };
        // Uncut: both full; the 1st margin loses one of two, the 2nd loses none.
        let a = vec![o(true, 12), o(false, 6), o(true, 7)];
        let b = vec![o(true, 12), o(true, 6), o(true, 7)];
        assert_eq!(fit_margin(&[&a, &b], 0.02), 2);
        assert_eq!(fit_margin(&[&a, &b], 0.5), 1);
        let tune: Vec<(u8, &[Outcome])> = (0..10)
            .map(|i| {
                (
                    i % FIT_FOLDS,
                    if i < 5 { a.as_slice() } else { b.as_slice() },
                )
            })
            .collect();
        let (g, f) = fit(&tune);
        assert_eq!(g, 2);
        assert_eq!(f.fold_margins.len(), usize::from(FIT_FOLDS));
        assert_eq!(f.cv_full_gold_recall, 1.0);
        assert_eq!(f.cv_mean_surfaced, 7.0);
        assert_eq!(MARGIN_GRID[0], None);
        assert_eq!(MARGIN_GRID[2], Some(0.005));
    }

    #[test]
    fn ablation_stands_for_each_stage_once_and_switches_only_it_off() {
        assert_eq!(
            Mode::expand(&[Mode::Hybrid, Mode::Ablation, Mode::NoBudget, Mode::Rrf]),
            [vec![Mode::Hybrid], ABLATIONS.to_vec(), vec![Mode::Rrf]].concat()
        );
        let base = RankSettings::default();
        assert_eq!(Mode::Hybrid.ablated(&base), None);
        assert_eq!(Mode::Rrf.ablated(&base), None);
        for m in ABLATIONS {
            let s = m.ablated(&base).expect("an ablation mode");
            assert_ne!(s, base, "{m:?} changes the settings");
            assert_eq!(s.lexical, base.lexical, "{m:?} leaves the lexical stage");
            assert_eq!(s.fusion, base.fusion, "{m:?} leaves fusion");
            RankConfig::try_new(s).expect("valid settings");
        }
    }

    /// The catalog with its overlay, ranked by a bag-of-words embedder.
    async fn catalog_eval(
        queries: &[Query],
        modes: &[Mode],
        margin: Option<f32>,
        threshold: f32,
    ) -> Evaluation {
        use crate::index::{Indexer, MemoryStore};
        use crate::resolve::ResolverSettings;
        use std::sync::Arc;
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/catalog/tools.json");
        let mut loaded =
            crate::load::load_registry(&path, &Default::default()).expect("the catalog");
        let fake = crate::test_util::FakeEmbedder::start(64).await;
        let mut settings = RankSettings::default();
        if let Some(names) = loaded.names.take() {
            settings.names = names;
        }
        settings.pipeline.budget.margin = margin;
        settings.pipeline.threshold = threshold;
        let indexer = Indexer::try_new(
            fake.client(),
            Arc::new(MemoryStore::in_memory()),
            "eval-ablation",
        )
        .unwrap();
        let resolver = Resolver::new(
            Arc::new(indexer),
            Arc::new(RankConfig::try_new(settings).unwrap()),
            loaded.overlay.take().map(Arc::new),
            ResolverSettings::default(),
        );
        let options = EvalOptions {
            dataset: "catalog".into(),
            k: 10,
            modes: modes.to_vec(),
            taxonomy: Arc::default(),
        };
        evaluate(&resolver, &loaded, queries, &options)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_ablation_reports_every_stage_switched_off_on_the_same_queries() {
        let turn = |id: &str, query: &str, gold: &[&str]| Query {
            id: id.into(),
            query: query.into(),
            gold: ids(gold),
            forbidden: Vec::new(),
        };
        let queries = [
            turn(
                "named",
                "Frau Renate Kühn hat eine neue Handynummer",
                &["patient.search.smart"],
            ),
            turn("labs", "show the latest lab results", &["lab.results.list"]),
        ];
        // Margin 0: the budget keeps the phase minimum; threshold 0: every
        // scored tool passes it, so switching the budget off shows the maximum.
        let m = catalog_eval(
            &queries,
            &[Mode::Hybrid, Mode::Ablation, Mode::Rrf],
            Some(0.0),
            0.0,
        )
        .await
        .metrics;
        let all = |mode: Mode| {
            m.iter()
                .find(|r| r.mode == mode && r.part == Part::All)
                .unwrap_or_else(|| panic!("{mode:?} reported"))
        };
        let modes: Vec<Mode> = m
            .iter()
            .filter(|r| r.part == Part::All)
            .map(|r| r.mode)
            .collect();
        assert_eq!(
            modes,
            Mode::expand(&[Mode::Hybrid, Mode::Ablation, Mode::Rrf])
        );
        assert_eq!(m.len(), 3 * modes.len(), "all, tune and check per mode");
        let (hybrid, no_budget) = (all(Mode::Hybrid), all(Mode::NoBudget));
        assert_eq!(hybrid.budget_margin, Some(0.0));
        assert_eq!(no_budget.budget_margin, None);
        assert_eq!(all(Mode::WithDedup).budget_margin, Some(0.0));
        assert!(
            no_budget.mean_surfaced > hybrid.mean_surfaced,
            "{} vs {}",
            no_budget.mean_surfaced,
            hybrid.mean_surfaced
        );
        // The named patient's resolver comes from the patient-resolve floor.
        let named = &queries[..1];
        let m = catalog_eval(
            named,
            &[Mode::Hybrid, Mode::NoPatientFloor],
            Some(0.0),
            RankSettings::default().pipeline.threshold,
        )
        .await
        .metrics;
        let full = |mode: Mode| {
            m.iter()
                .find(|r| r.mode == mode && r.part == Part::All)
                .map(|r| r.full_gold_recall)
        };
        assert_eq!(full(Mode::Hybrid), Some(1.0));
        assert_eq!(full(Mode::NoPatientFloor), Some(0.0));
    }

    #[tokio::test]
    async fn misses_are_listed_for_the_tune_part_only_with_the_gold_tools_place() {
        // The first ids of each part under the fixed split.
        let id_in = |part: Part| {
            (0..)
                .map(|i| format!("q{i}"))
                .find(|id| Part::of(id) == part)
                .unwrap()
        };
        let (tune, check) = (id_in(Part::Tune), id_in(Part::Check));
        let turn = |id: &str, gold: &[&str]| Query {
            id: id.into(),
            query: "show the latest lab results".into(),
            gold: ids(gold),
            forbidden: Vec::new(),
        };
        let queries = [
            turn(&tune, &["lab.results.list", "no.such.tool"]),
            turn(&check, &["no.such.tool"]),
            turn(&format!("{tune}-hit"), &["lab.results.list"]),
        ];
        let threshold = RankSettings::default().pipeline.threshold;
        let e = catalog_eval(&queries, &[Mode::Hybrid], Some(0.0), threshold).await;
        let listed: Vec<&str> = e.tune_misses.iter().map(|m| m.id.as_str()).collect();
        assert!(
            !listed.contains(&check.as_str()),
            "a check-part miss is never listed: {listed:?}"
        );
        let miss = e
            .tune_misses
            .iter()
            .find(|m| m.id == tune)
            .expect("the tune-part miss is listed");
        assert_eq!(miss.missing, [("no.such.tool".to_owned(), None)]);
        assert!(miss.surfaced > 0);
        // The first mode's misses: plain RRF surfaces 12 and misses the same tool.
        let e = catalog_eval(&queries, &[Mode::Rrf, Mode::Hybrid], Some(0.0), threshold).await;
        let miss = e.tune_misses.iter().find(|m| m.id == tune).unwrap();
        assert_eq!(miss.surfaced, 12, "the first mode's (rrf) set");
    }

    #[test]
    fn sampling_is_even_and_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        let lines: String = (0..10)
            .map(|i| format!("{{\"id\":\"q{i}\",\"query\":\"t\",\"gold\":[\"a\"]}}\n"))
            .collect();
        std::fs::write(&path, lines).unwrap();
        let ids: Vec<String> = load_queries(&path, Some(4))
            .unwrap()
            .into_iter()
            .map(|q| q.id)
            .collect();
        assert_eq!(ids, ["q0", "q3", "q6", "q9"]);
        assert_eq!(load_queries(&path, None).unwrap().len(), 10);
    }
}
