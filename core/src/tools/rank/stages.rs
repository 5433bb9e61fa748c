//! The settings of the pipeline's stages after fusion: the threshold, domain
//! scoping, semantic-group dedup, the workflow boost and the confidence
//! budget. [`super::config::RankSettings`] holds them beside the other
//! stages' settings; [`super::pipeline`] runs them.

use super::floors::SignalSettings;
use super::Candidate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Threshold, domain scoping, dedup and workflow boost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PipelineSettings {
    /// Fused scores below this are dropped (after the phase minimum is met),
    /// except, on a turn with cosines, the best tools the vector search
    /// returned, twice the phase maximum of them (24 in a planner turn):
    /// there the confidence budget sizes the set. So the threshold cuts the
    /// tools with lexical evidence alone and every hit of a lexical-only turn
    /// (whose scores lie below it: the phase minimum). Measured on every
    /// dev set with `keyhole eval`: cutting searched tools as well changed
    /// no tune part's full-gold recall or recall@10 (0.1–0.2 tools fewer)
    /// and lost one field check turn (`eval/RESULTS.md`, ablation).
    pub threshold: f32,
    /// Domain scoping.
    pub domain: DomainSettings,
    /// Semantic-group dedup.
    pub dedup: DedupSettings,
    /// Workflow boost.
    pub workflow: WorkflowSettings,
    /// The confidence budget.
    pub budget: BudgetSettings,
}

/// The confidence budget: how many ranked hits a turn keeps inside the phase
/// budget. When the best hit stands clear of the rest few tools are within
/// the margin and the turn shows the phase minimum plus
/// [`BudgetSettings::beyond_minimum`]; when the scores are flat many are and
/// it shows up to the phase maximum.
///
/// Applies only to turns with cosines: lexical-only scores (indexing, a
/// passed deadline) are on another scale, and those turns keep every hit
/// above the threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BudgetSettings {
    /// Hits whose fused score is at least the best hit's minus this are kept
    /// (at least the phase minimum, at most its maximum); `None` keeps every
    /// hit above the threshold (up to the maximum).
    ///
    /// The default, 0.075, is the median of the margins `keyhole eval --mode
    /// fitted` picks on the tune parts of the six dev sets (catalog 0,
    /// Seal-Tools 0.065, BFCL 0.075, StableToolBench 0.080, MetaTool 0.085,
    /// API-Bank no cut; each the fewest tools within two points of that set's
    /// uncut full-gold recall, 5-fold cross-validated; `eval/RESULTS.md`),
    /// rounded down to the fitting grid. The catalog's own fit (0) is not the
    /// default: it cut every other set to the phase minimum and cost them 5 to
    /// 16 points of full-gold recall, a rule that helps one set only. A
    /// registry fits its own with `keyhole eval --mode fitted` (the
    /// fused-score scale follows the registry's texts).
    pub margin: Option<f32>,
    /// Hits kept beyond the phase minimum whatever the margin says (when
    /// there are that many; the phase maximum still bounds the set): the
    /// fewest hits a turn with a margin shows is the phase minimum plus this.
    ///
    /// The default, 2 (8 hits in a planner turn, whose minimum is 6), is
    /// chosen with [`Self::embedder_top`] on the tune parts with `keyhole
    /// eval`: the tool a turn of unseen phrasing needs is often ranked 7th to
    /// 9th under a clear top hit, and neither how weak the best score is nor
    /// how the mass of the top scores spreads told those turns apart (a
    /// margin that widens with a weak best score, and a top-p over the
    /// softmaxed fused scores, kept fewer tools only by losing them). With
    /// the embedder's best two kept as well, 2 keeps or raises every tune
    /// part's full-gold recall of 3 with fewer tools but Seal-Tools' (one
    /// query of 328 lost): field 0.972 at 9.57 against 0.965 at 9.97 with 3
    /// and none kept; catalog 0.987 at 9.43 against 9.94; API-Bank 0.928 at
    /// 8.65 against 0.864 at 9.10; 1 gives field 0.965 at 8.97
    /// (`eval/RESULTS.md`). Recall first: a tool missing
    /// fails the turn, an extra tool costs about 0.8 KB of request.
    pub beyond_minimum: usize,
    /// The embedder's best tools kept whatever the fusion and the margin
    /// say: the `embedderTop` tools of highest cosine similarity join the
    /// kept hits, after them, when they were ranked at all (past the
    /// threshold, not scored out by a penalty) but fell beyond the cut. The
    /// two signals disagree most on turns of unseen phrasing (a German turn
    /// whose words meet other tools' keywords while the embedder ranks the
    /// consent tool high); fusion alone buries the embedder's pick. A tool
    /// of a floor-only domain is never kept this way, and the phase maximum
    /// still bounds the set. Default 2 (see [`Self::beyond_minimum`]).
    pub embedder_top: usize,
}

/// Domain scoping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DomainSettings {
    /// Whether domain scoping runs.
    pub enabled: bool,
    /// How many best-ranked tools with a scoped domain define the turn's domains.
    pub anchor_top: usize,
    /// Subtracted from the fused score of an off-domain tool.
    pub penalty: f32,
    /// Domains that are never penalised and never anchor.
    pub generic_domains: Vec<String>,
    /// Domains that are in scope only when a floor pinning one of their tools
    /// fired (they never anchor by ranking alone).
    pub floor_only_domains: Vec<String>,
    /// Subtracted from a tool of a floor-only domain that is out of scope: a
    /// literature search surfaced on "search for the patient" is worse than an
    /// ordinary off-domain tool. At the default fusion weights 0.3 is the most
    /// the lexical term can add, so lexical evidence alone never lifts such a
    /// tool back.
    pub floor_only_penalty: f32,
    /// Domain of a category, for tools whose overlay entry has no domain.
    /// Categories missing here are generic.
    pub category_domains: BTreeMap<String, String>,
}

/// Semantic-group dedup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DedupSettings {
    /// Whether dedup runs. Off by default: it never changed full-gold
    /// recall on any dev set's part, and it lowered recall@10 on the field
    /// set's check part (0.958 without it, 0.953 with it), on the catalog's
    /// tune part (0.918, 0.911) and on both tune parts in lexical mode
    /// (field 0.917, 0.910; catalog 0.918, 0.911); it raised only the field
    /// tune part's hybrid recall@10 (0.951, 0.955). The public sets have no
    /// semantic groups (`eval/RESULTS.md`).
    pub enabled: bool,
    /// How many reads and how many writes of one group keep their place.
    pub per_axis: usize,
    /// Subtracted from further siblings; `None` drops them.
    pub sibling_penalty: Option<f32>,
}

/// Workflow boost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WorkflowSettings {
    /// Categories of composite workflow tools.
    pub categories: Vec<String>,
    /// Added to their fused score on execute or composite turns.
    pub boost: f32,
    /// Signals of an execute (write/intake) intent, on the folded turn.
    pub execute_signals: Vec<SignalSettings>,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            threshold: 0.80,
            domain: DomainSettings::default(),
            dedup: DedupSettings::default(),
            workflow: WorkflowSettings::default(),
            budget: BudgetSettings::default(),
        }
    }
}

impl Default for BudgetSettings {
    fn default() -> Self {
        BudgetSettings {
            margin: Some(0.075),
            beyond_minimum: 2,
            embedder_top: 2,
        }
    }
}

impl BudgetSettings {
    /// How many of `hits` (best first) a turn keeps: those within the margin
    /// of the best, never fewer than `min` plus [`Self::beyond_minimum`]
    /// (when there are that many).
    pub fn keep(&self, hits: &[Candidate], min: usize) -> usize {
        let (Some(margin), Some(best)) = (self.margin, hits.first()) else {
            return hits.len();
        };
        let within = hits
            .iter()
            .take_while(|c| c.score >= best.score - margin)
            .count();
        within
            .max(min.saturating_add(self.beyond_minimum))
            .min(hits.len())
    }
}

impl Default for DomainSettings {
    fn default() -> Self {
        DomainSettings {
            enabled: true,
            anchor_top: 3,
            penalty: 0.03,
            generic_domains: vec!["generic".into(), "ui".into()],
            floor_only_domains: vec!["research".into()],
            floor_only_penalty: 0.3,
            category_domains: BTreeMap::new(),
        }
    }
}

impl Default for DedupSettings {
    fn default() -> Self {
        DedupSettings {
            enabled: false,
            per_axis: 1,
            sibling_penalty: Some(0.01),
        }
    }
}

impl Default for WorkflowSettings {
    fn default() -> Self {
        let s = |name: &str, pattern: &str| SignalSettings {
            name: name.into(),
            pattern: pattern.into(),
        };
        WorkflowSettings {
            categories: vec!["workflows".into()],
            boost: 0.02,
            execute_signals: vec![
                s(
                    "execute-en",
                    r"\b(book|schedule|create|register|admit|discharge|record|prescribe|order|start|open|write|send|add|update|cancel|transfer)\b",
                ),
                s(
                    "execute-de",
                    r"\b(buchen|anlegen|aufnehmen|entlassen|eintragen|verordnen|anfordern|ausstellen|erfassen|dokumentieren|verlegen|schicken)\b",
                ),
                s(
                    "execute-fr",
                    r"\b(prendre|creer|enregistrer|admettre|prescrire|inscrire|envoyer|rediger|ouvrir|annuler|decaler)\b",
                ),
            ],
        }
    }
}
