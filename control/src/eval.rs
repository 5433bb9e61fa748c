//! Retrieval evaluation over labelled queries (`keyhole eval`).
//!
//! Every query goes through the same path a request takes: the registry is
//! indexed into the vector store, the query is embedded and searched, and the
//! engine resolves the planner-phase candidate set. Three modes:
//! - `hybrid`: the engine with cosine hits (what control serves);
//! - `lexical`: the engine without cosines (what control serves while a new
//!   registry is being indexed);
//! - `cosine`: plain cosine ranking, the top 12 surfaced (a baseline);
//! - `rrf`: reciprocal-rank fusion (k = 60) of the cosine ranking and a plain
//!   BM25 ranking (k1 = 1.2, b = 0.75) over each tool's embedding text, the
//!   top 12 surfaced (a baseline, on the same embeddings).
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
use crate::index::{Search, IndexError};
use crate::load::{LoadError, LoadedRegistry};
use crate::resolve::Resolver;
use keyhole_core::format;
use keyhole_core::rank::pipeline::{search, Turn};
use keyhole_core::Phase;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::path::Path;

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
}

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

impl Part {
    /// The part a query id falls in (fixed: a hash of the id, see the module doc).
    pub fn of(id: &str) -> Part {
        let digest = Sha256::new_with_prefix(b"keyhole-split-v1\0").chain_update(id.as_bytes()).finalize();
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
    text.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_lowercase)
}

impl Bm25 {
    fn new(docs: impl Iterator<Item = (String, String)>) -> Bm25 {
        let mut out = Bm25 { docs: Vec::new(), df: HashMap::new(), avg_len: 0.0 };
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
                        Some(idf * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * len / self.avg_len.max(1e-9))))
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
    /// The request body could not be rewritten.
    #[error("the registry's request body is unreadable: {0}")]
    Request(String),
}

/// Reads a queries file (JSON lines). With `sample`, keeps an evenly spaced
/// deterministic subset of about that many queries (every ⌈n/sample⌉-th line).
pub fn load_queries(path: &Path, sample: Option<usize>) -> Result<Vec<Query>, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io { path: path.to_owned(), source })?;
    let text = String::from_utf8_lossy(&bytes);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
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
    fn add(&mut self, q: &Query, surfaced: &[String], ranked: &[String], k: usize, bytes_after: usize) {
        let gold: HashSet<&str> = q.gold.iter().map(String::as_str).collect();
        let shown: HashSet<&str> = surfaced.iter().map(String::as_str).collect();
        self.n += 1;
        self.full += usize::from(gold.iter().all(|g| shown.contains(g)));
        if !gold.is_empty() {
            let in_k = ranked.iter().take(k).filter(|t| gold.contains(t.as_str())).count();
            self.recall += in_k as f64 / gold.len() as f64;
        }
        if let Some(rank) = ranked.iter().take(100).position(|t| gold.contains(t.as_str())) {
            self.mrr += 1.0 / (rank + 1) as f64;
        }
        let dcg: f64 = ranked
            .iter()
            .take(10)
            .enumerate()
            .filter(|(_, t)| gold.contains(t.as_str()))
            .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
            .sum();
        let ideal: f64 = (0..gold.len().min(10)).map(|i| 1.0 / ((i + 2) as f64).log2()).sum();
        if ideal > 0.0 {
            self.ndcg += dcg / ideal;
        }
        self.surfaced += surfaced.len();
        if !q.forbidden.is_empty() {
            self.with_forbidden += 1;
            self.forbidden_hit += usize::from(q.forbidden.iter().any(|f| shown.contains(f.as_str())));
        }
        self.bytes_after += bytes_after;
    }

    fn metrics(&self, dataset: &str, mode: Mode, part: Part, tools: usize, k: usize, bytes_before: usize) -> Metrics {
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
}

/// Runs the evaluation of `queries` against `registry`, one [`Metrics`] per mode.
///
/// Indexes the registry (incrementally: a second run embeds nothing new),
/// embeds every query once, and resolves each in every mode. Fails when the
/// embedder or the store fails.
pub async fn evaluate(
    resolver: &Resolver,
    registry: &LoadedRegistry,
    queries: &[Query],
    options: &EvalOptions,
) -> Result<Vec<Metrics>, EvalError> {
    let (prepared, report) = resolver.prepare(&registry.tools).await?;
    tracing::info!(dataset = %options.dataset, tools = report.tools, upserted = report.upserted, "registry indexed");
    let reg = prepared.registry();
    let config = resolver.rank_config();
    let needs_cosine = options.modes.iter().any(|m| *m != Mode::Lexical);
    let vectors = if needs_cosine {
        let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
        resolver.indexer().embedder().embed(Side::Query, &texts).await?
    } else {
        Vec::new()
    };
    let parsed = format::parse("/v1/chat/completions", &registry.request)
        .map_err(|e| EvalError::Request(e.to_string()))?
        .ok_or_else(|| EvalError::Request("no tools".into()))?;
    let bytes_before = registry.request.len();
    let id_of = |name: &str| reg.by_name(name).map_or_else(|| name.to_owned(), |t| t.id.clone());
    let bytes_after = |names: &[String]| {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        parsed.rewrite(&registry.request, &parsed.select(&refs, usize::MAX)).len()
    };
    let depth = options.k.max(100);
    let bm25 = options
        .modes
        .contains(&Mode::Rrf)
        .then(|| Bm25::new(reg.tools().iter().filter(|t| t.is_business()).map(|t| (t.name.clone(), t.embedding_text()))));
    // Per mode: all, tune, check.
    let mut totals: Vec<[Totals; 3]> = options.modes.iter().map(|_| Default::default()).collect();
    for (i, q) in queries.iter().enumerate() {
        let hits: Vec<(String, f32)> = match vectors.get(i) {
            Some(v) => match resolver.indexer().search(v, reg.len().max(1)).await? {
                Search::Hits(h) => h.into_iter().map(|h| (h.name, h.score)).collect(),
                Search::Missing => Vec::new(),
            },
            None => Vec::new(),
        };
        let part = Part::of(&q.id);
        for (mode, total) in options.modes.iter().zip(totals.iter_mut()) {
            let (surfaced, ranked): (Vec<String>, Vec<String>) = match mode {
                Mode::Rrf => {
                    let max = Phase::Planner.budget().max;
                    let cos: Vec<String> = hits.iter().map(|(n, _)| n.clone()).collect();
                    let lex = bm25.as_ref().map(|b| b.rank(&q.query)).unwrap_or_default();
                    let ranked: Vec<String> = rrf(&[&cos, &lex], 60.0).into_iter().take(depth).collect();
                    (ranked.iter().take(max).cloned().collect(), ranked)
                }
                Mode::Cosine => {
                    let max = Phase::Planner.budget().max;
                    let ranked: Vec<String> = hits.iter().take(depth).map(|(n, _)| n.clone()).collect();
                    (ranked.iter().take(max).cloned().collect(), ranked)
                }
                Mode::Hybrid | Mode::Lexical => {
                    let cosine: &[(String, f32)] = if *mode == Mode::Hybrid { &hits } else { &[] };
                    let turn = Turn { text: &q.query, phase: Phase::Planner, prior: &[], tool_choice: None, cosine: Some(cosine) };
                    let res = resolver.rank(&prepared, &turn);
                    let surfaced = res.candidates.into_iter().map(|c| c.name).collect();
                    let ranked = search(reg, config, &q.query, cosine, depth).into_iter().map(|c| c.name).collect();
                    (surfaced, ranked)
                }
            };
            let after = bytes_after(&surfaced);
            let surfaced: Vec<String> = surfaced.iter().map(|n| id_of(n)).collect();
            let ranked: Vec<String> = ranked.iter().map(|n| id_of(n)).collect();
            let [all, tune, check] = total;
            all.add(q, &surfaced, &ranked, options.k, after);
            match part {
                Part::Check => check.add(q, &surfaced, &ranked, options.k, after),
                _ => tune.add(q, &surfaced, &ranked, options.k, after),
            }
        }
    }
    let business = reg.tools().iter().filter(|t| t.is_business()).count();
    Ok(options
        .modes
        .iter()
        .zip(&totals)
        .flat_map(|(mode, [all, tune, check])| {
            [(Part::All, all), (Part::Tune, tune), (Part::Check, check)]
                .map(|(part, t)| t.metrics(&options.dataset, *mode, part, business, options.k, bytes_before))
        })
        .collect())
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
    std::fs::write(&tmp, serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?)?;
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
        t.add(&q(&["a", "b"], &[]), &ids(&["x", "a", "b"]), &ids(&["x", "a", "y", "b"]), 2, 100);
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
        let check = (0..2000).filter(|i| Part::of(&format!("q{i}")) == Part::Check).count();
        assert!((600..800).contains(&check), "{check} of 2000");
        assert_eq!(Part::of("q1"), Part::of("q1"));
    }

    #[test]
    fn rrf_fuses_ranks_and_bm25_prefers_rare_matching_terms() {
        let a = ids(&["x", "y", "z"]);
        let b = ids(&["y", "w"]);
        assert_eq!(rrf(&[&a, &b], 60.0), ["y", "x", "w", "z"]);
        let bm = Bm25::new(
            [("lab", "order lab test panel"), ("note", "write a clinical note"), ("bill", "create invoice for the visit")]
                .into_iter()
                .map(|(n, t)| (n.to_owned(), t.to_owned())),
        );
        assert_eq!(bm.rank("order a lipid panel"), ["lab", "note"], "\"a\" matches the note");
    }

    #[test]
    fn sampling_is_even_and_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        let lines: String = (0..10).map(|i| format!("{{\"id\":\"q{i}\",\"query\":\"t\",\"gold\":[\"a\"]}}\n")).collect();
        std::fs::write(&path, lines).unwrap();
        let ids: Vec<String> = load_queries(&path, Some(4)).unwrap().into_iter().map(|q| q.id).collect();
        assert_eq!(ids, ["q0", "q3", "q6", "q9"]);
        assert_eq!(load_queries(&path, None).unwrap().len(), 10);
    }
}
