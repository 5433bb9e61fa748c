//! The per-turn resolution: floors, fused ranking and its post-processing
//! stages, the bounded composition and the structural patient-resolve floor.
//!
//! Stages, in order (each one recorded in the [`Trace`]):
//!
//! 1. prompt-conditioned floors (multi-entity, research) fire on the folded turn;
//! 2. every business tool gets its fused score ([`FusionSettings::fuse`]);
//! 3. score threshold (the phase minimum is still filled when possible);
//! 4. domain scoping: the non-generic domains of the best-ranked tools (and of
//!    fired floors) are the turn's domains; tools of other domains take a
//!    penalty; tools without a domain, or in a generic domain, never do;
//! 5. semantic-group dedup (off by default): the best read and the best
//!    write of one group keep their place, further siblings are demoted (or
//!    dropped);
//! 6. workflow boost on execute or composite turns;
//! 7. the confidence budget: the hits within `budget.margin` of the best one
//!    are kept, at least the phase minimum (see [`BudgetSettings`]);
//! 8. [`bounded`] composition under the phase budget (tool_choice, floors,
//!    hits, prior set);
//! 9. the patient-resolve floor, then [`bounded`] again.
//!
//! [`FusionSettings::fuse`]: super::fuse::FusionSettings::fuse

use super::clauses::interleave;
use super::config::RankConfig;
use super::floors::{person, FiredFloor};
use super::lexical::LexicalScore;
use super::outage::{bounded, SetInputs};
use super::registry::Registry;
use super::tokenize::{acronyms, fold};
use super::Candidate;
use crate::proto::tools::{Reason, ResolveResponse, Source, SurfacedTool};
use crate::Phase;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One turn to resolve.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    /// The latest user turn's text (never logged, never traced).
    pub text: &'a str,
    /// The agent phase.
    pub phase: Phase,
    /// The session's last audited set (function names, best first).
    pub prior: &'a [String],
    /// A function the request's `tool_choice` names.
    pub tool_choice: Option<&'a str>,
    /// Cosine similarity of the turn to each tool, by function name, as the
    /// vector search returned them (any order; tools missing get no cosine
    /// term). `None` means retrieval failed: the bounded fallback answers.
    pub cosine: Option<&'a [(String, f32)]>,
}

/// The patient-resolve floor's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatientResolveTrace {
    /// A surfaced tool that needs a patient id, or [`NAMED_PERSON`] when
    /// the turn names a person and no surfaced tool needs one.
    pub needed_by: String,
    /// The resolver prepended.
    pub added: String,
}

/// [`PatientResolveTrace::needed_by`] when the turn itself names a person.
pub const NAMED_PERSON: &str = "turn:named-person";

/// What each stage did on one turn: names, counts and signal names only —
/// never the turn's text.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Trace {
    /// Floors that fired, with their signal names.
    pub floors: Vec<FiredFloor>,
    /// Whether an execute intent was detected.
    pub execute_intent: bool,
    /// Whether the turn counts as composite (multi-entity signals).
    pub composite_intent: bool,
    /// Business tools scored.
    pub scored: usize,
    /// Tools at or above the threshold.
    pub above_threshold: usize,
    /// The turn's domains (domain scoping).
    pub domains: Vec<String>,
    /// Tools that took the off-domain penalty.
    pub off_domain: Vec<String>,
    /// Tools demoted or dropped by semantic-group dedup.
    pub deduped: Vec<String>,
    /// Tools boosted as workflows.
    pub boosted: Vec<String>,
    /// The patient-resolve floor, when it fired.
    pub patient_resolve: Option<PatientResolveTrace>,
    /// A `tool_choice` named a function the request does not carry.
    pub tool_choice_unknown: bool,
    /// The phase budget's ceiling.
    pub budget_max: usize,
    /// Ranked hits the confidence budget kept (`None`: it did not run).
    pub confident: Option<usize>,
    /// Clauses retrieved on their own (0: the turn was retrieved whole).
    pub clauses: usize,
    /// The tools at or above the threshold (or filling the phase minimum),
    /// best first, before domain scoping, dedup and the budget: a tool here
    /// and not in the set was cut by a later stage, a registry tool not here
    /// scored below the threshold. Kept for the audit's miss reasons.
    #[serde(skip)]
    pub ranked: Vec<String>,
}

/// The answer for one turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolution {
    /// The tools the model may see, in order, each with its reason.
    pub candidates: Vec<Candidate>,
    /// Whether this came from retrieval or from the bounded fallback.
    pub source: Source,
    /// What each stage did.
    pub trace: Trace,
    /// The candidates that may change a record (the filter enforces the
    /// formatter phase's rule with this).
    #[serde(skip)]
    pub mutating: BTreeSet<String>,
}

impl Resolution {
    /// The wire answer for the filter.
    pub fn to_response(&self) -> ResolveResponse {
        let tool = |c: &Candidate| SurfacedTool {
            name: c.name.clone(),
            reason: c.reason,
            mutating: self.mutating.contains(&c.name),
        };
        ResolveResponse {
            tools: self.candidates.iter().map(tool).collect(),
            source: self.source,
            turn: None,
        }
    }
}

/// Which stages a ranking runs.
#[derive(Debug, Clone, Copy)]
struct Stages {
    threshold: f32,
    min_fill: usize,
    /// At least this many of the tools the vector search returned are
    /// ranked, whatever the threshold says.
    searched_fill: usize,
    scoped: bool,
    limit: usize,
    reason: Reason,
    /// Whether the trace names the tools each stage touched (`ranked`,
    /// `off_domain`, `deduped`, `boosted`): a search whose trace is
    /// dropped (a clause's, the tool search's) clones no names for it.
    named: bool,
}

/// One clause of a multi-intent turn with its own cosines (see
/// [`ClauseSettings::split`](super::clauses::ClauseSettings::split)).
#[derive(Debug, Clone, Copy)]
pub struct Clause<'a> {
    /// The clause's text (a slice of the turn).
    pub text: &'a str,
    /// Cosine similarity of the clause to each tool, as for [`Turn::cosine`].
    pub cosine: &'a [(String, f32)],
}

/// Resolves one turn's candidate set. Never fails; the answer never exceeds
/// the phase budget.
pub fn resolve(registry: &Registry, config: &RankConfig, turn: &Turn<'_>) -> Resolution {
    resolve_clauses(registry, config, turn, &[])
}

/// [`resolve`] for a turn split into clauses: when there are two or more and
/// clause retrieval is enabled, each clause's best `clauses.perClauseK` hits
/// ([`per_subtask`]) join the turn's hits in turns
/// ([`interleave`](super::clauses::interleave)), under the same budget.
/// With fewer than two clauses, or on outage, it is [`resolve`].
pub fn resolve_clauses(
    registry: &Registry,
    config: &RankConfig,
    turn: &Turn<'_>,
    clauses: &[Clause<'_>],
) -> Resolution {
    if turn.text.trim().is_empty() {
        return without_text(registry, turn);
    }
    let folded = fold(turn.text);
    let floors_cfg = config.floors();
    let mut trace = Trace {
        budget_max: turn.phase.budget().max,
        ..Trace::default()
    };
    let acronyms: Vec<String> = acronyms(turn.text).collect();
    trace.floors = floors_cfg.prompt_floors(&folded, turn.phase, |id| {
        registry.named_by_acronym(id, &acronyms)
    });
    trace.execute_intent = !config.execute_signals().matches(&folded).is_empty();
    trace.composite_intent = floors_cfg.multi_entity.fires(&folded);
    trace.tool_choice_unknown = turn
        .tool_choice
        .is_some_and(|n| !registry.names().contains(n));

    let scores = fused_scores(registry, config, turn.text, turn.cosine.unwrap_or(&[]));
    trace.scored = scores.business;
    let floor_candidates = floor_candidates(registry, &scores, &trace.floors);
    let hits = turn.cosine.map(|_| {
        let stages = Stages {
            threshold: config.settings().pipeline.threshold,
            min_fill: turn.phase.budget().min,
            // The confidence budget sizes a turn with cosines; the threshold
            // does not cut the searched tools it chooses from. Twice the phase
            // maximum bounds the work: a tool ranked below that would have to
            // pass more tools than the set holds by the stages' penalties.
            searched_fill: turn.phase.budget().max.saturating_mul(2),
            scoped: true,
            limit: usize::MAX,
            reason: Reason::Rag,
            named: true,
        };
        let mut ranked = rank(
            registry,
            config,
            &scores,
            &floor_candidates,
            stages,
            &mut trace,
        );
        if turn.cosine.is_some_and(|c| !c.is_empty()) {
            let keep = config
                .settings()
                .pipeline
                .budget
                .keep(&ranked, turn.phase.budget().min);
            if config.settings().pipeline.budget.margin.is_some() {
                trace.confident = Some(keep);
            }
            // Nothing past the cut: the embedder's best need no guard.
            if ranked.len() > keep {
                let guarded = embedder_top(registry, config, turn.cosine.unwrap_or(&[]));
                let mut place = 0;
                ranked.retain(|c| {
                    place += 1;
                    place <= keep || guarded.contains(&c.name.as_str())
                });
            }
        }
        let c = &config.settings().clauses;
        if c.enabled && clauses.len() >= 2 {
            let each = clauses
                .iter()
                .map(|cl| per_subtask(registry, config, cl.text, cl.cosine))
                .collect();
            ranked = interleave(ranked, each, c.per_clause_k);
            trace.clauses = clauses.len();
        }
        ranked
    });
    let source = if turn.cosine.is_some() {
        Source::Retrieval
    } else {
        Source::ControlFallback
    };
    let inputs = SetInputs {
        phase: turn.phase,
        registry: registry.names(),
        mutating: registry.mutating(),
        tool_choice: turn.tool_choice,
        floors: &floor_candidates,
        hits: hits.as_deref(),
        prior: turn.prior,
    };
    let mut candidates = bounded(&inputs);

    // Structural patient-resolve floor: after the set is known.
    let pr = &floors_cfg.patient_resolve;
    if pr.phases.contains(&turn.phase) {
        let tool = |c: &Candidate| registry.by_name(&c.name);
        let surfaced = || candidates.iter().filter_map(tool);
        // A tool that needs a patient id is served by any resolver; a person
        // named in the turn by the one that takes a name (`prepend`): the
        // others take an identifier.
        let needed_by = if surfaced().any(|t| pr.is_resolver(&t.id)) {
            None
        } else {
            surfaced()
                .find(|t| t.meta.as_ref().is_some_and(|m| pr.needs_patient(m)))
                .map(|t| t.name.clone())
        }
        .or_else(|| {
            let named = pr.on_named_person && person::names_a_person(turn.text);
            (named && !surfaced().any(|t| t.id == pr.prepend)).then(|| NAMED_PERSON.to_owned())
        });
        if let Some(needed_by) = needed_by {
            if let Some(resolver) =
                floor_candidate(registry, &scores, &pr.prepend, Reason::FloorPatientResolve)
            {
                let mut with_resolver = Vec::with_capacity(floor_candidates.len() + 1);
                with_resolver.push(resolver.clone());
                with_resolver.extend(floor_candidates.iter().cloned());
                candidates = bounded(&SetInputs {
                    floors: &with_resolver,
                    ..inputs
                });
                if candidates.iter().any(|c| c.name == resolver.name) {
                    trace.patient_resolve = Some(PatientResolveTrace {
                        needed_by,
                        added: resolver.name,
                    });
                }
            }
        }
    }
    let mutating = candidates
        .iter()
        .filter(|c| registry.mutating().contains(&c.name))
        .map(|c| c.name.clone())
        .collect();
    Resolution {
        candidates,
        source,
        trace,
        mutating,
    }
}

/// The names of the `pipeline.budget.embedderTop` business tools of
/// highest cosine similarity, best first, leaving out floor-only domains
/// (those enter by their floors alone). Ties break by name; a name listed
/// twice counts once, at its highest similarity. One pass over the hits,
/// keeping the few best: nothing is sorted or allocated per hit.
fn embedder_top<'a>(
    registry: &Registry,
    config: &RankConfig,
    cosine: &'a [(String, f32)],
) -> Vec<&'a str> {
    let settings = config.settings();
    let n = settings.pipeline.budget.embedder_top;
    let floor_only = &settings.pipeline.domain.floor_only_domains;
    let eligible = |name: &str| {
        registry.by_name(name).is_some_and(|t| {
            t.is_business()
                && !t
                    .domain
                    .as_deref()
                    .is_some_and(|d| floor_only.iter().any(|f| f == d))
        })
    };
    // `a` ranks before `b`: higher similarity, then the lesser name.
    let before =
        |a: (&str, f32), b: (&str, f32)| a.1.total_cmp(&b.1).then_with(|| b.0.cmp(a.0)).is_gt();
    let mut top: Vec<(&str, f32)> = Vec::with_capacity(n + 1);
    for (name, c) in cosine {
        let hit = (name.as_str(), *c);
        if n == 0
            || !c.is_finite()
            || (top.len() == n && !top.last().is_some_and(|&l| before(hit, l)))
        {
            continue;
        }
        if let Some(at) = top.iter().position(|t| t.0 == hit.0) {
            if top.get(at).is_some_and(|&t| !before(hit, t)) {
                continue;
            }
            top.remove(at);
        } else if !eligible(hit.0) {
            continue;
        }
        let at = top
            .iter()
            .position(|&t| before(hit, t))
            .unwrap_or(top.len());
        top.insert(at, hit);
        top.truncate(n);
    }
    top.into_iter().map(|(name, _)| name).collect()
}

/// A turn with no text to rank (a tool result only, an image, an empty user
/// message): nothing says which tools it needs, so it keeps what the session
/// was shown last — the prior set, reason `prior-set` — and with none, the
/// phase minimum of tools that change nothing, in registry order, reason
/// `no-turn`. Never a set that changes records by default. A forced tool is
/// kept as always; the phase rules and budget hold.
fn without_text(registry: &Registry, turn: &Turn<'_>) -> Resolution {
    let candidate = |name: &str, reason| Candidate {
        name: name.to_owned(),
        reason,
        score: 0.0,
    };
    let floors: Vec<Candidate> = if turn.prior.is_empty() {
        let read_only = registry.tools().iter().filter(|t| !t.mutates());
        read_only
            .take(turn.phase.budget().min)
            .map(|t| candidate(&t.name, Reason::NoTurn))
            .collect()
    } else {
        Vec::new()
    };
    let inputs = SetInputs {
        phase: turn.phase,
        registry: registry.names(),
        mutating: registry.mutating(),
        tool_choice: turn.tool_choice,
        floors: &floors,
        hits: Some(&[]),
        prior: turn.prior,
    };
    let candidates = bounded(&inputs);
    let mutating = candidates
        .iter()
        .filter(|c| registry.mutating().contains(&c.name))
        .map(|c| c.name.clone())
        .collect();
    let trace = Trace {
        budget_max: turn.phase.budget().max,
        ..Trace::default()
    };
    Resolution {
        candidates,
        source: Source::NoTurn,
        trace,
        mutating,
    }
}

/// The discovery search ("is there a tool for X?"): the ranking pipeline —
/// fusion, domain scoping, dedup, workflow boost — without floors, threshold
/// or budget, cut to `k`.
pub fn search(
    registry: &Registry,
    config: &RankConfig,
    text: &str,
    cosine: &[(String, f32)],
    k: usize,
) -> Vec<Candidate> {
    let folded = fold(text);
    let acronyms: Vec<String> = acronyms(text).collect();
    let mut trace = Trace {
        floors: config
            .floors()
            .prompt_floors(&folded, Phase::Planner, |id| {
                registry.named_by_acronym(id, &acronyms)
            }),
        execute_intent: !config.execute_signals().matches(&folded).is_empty(),
        composite_intent: config.floors().multi_entity.fires(&folded),
        ..Trace::default()
    };
    let scores = fused_scores(registry, config, text, cosine);
    // Floors are not added, but the domains they open stay in scope.
    let floors = floor_candidates(registry, &scores, &trace.floors);
    let stages = Stages {
        threshold: f32::NEG_INFINITY,
        min_fill: 0,
        searched_fill: 0,
        scoped: true,
        limit: k,
        reason: Reason::Rag,
        named: false,
    };
    rank(registry, config, &scores, &floors, stages, &mut trace)
}

/// The per-subtask match: [`search`] on one subtask's (clause's) text, cut at
/// the threshold (keeping at least one) and capped at `clauses.perClauseK`
/// because a subtask needs a tight matched set, not the planner budget.
pub fn per_subtask(
    registry: &Registry,
    config: &RankConfig,
    text: &str,
    cosine: &[(String, f32)],
) -> Vec<Candidate> {
    let mut hits = search(
        registry,
        config,
        text,
        cosine,
        config.settings().clauses.per_clause_k.max(1),
    );
    let threshold = config.settings().pipeline.threshold;
    // Keep the best one even below the threshold: a subtask always gets a tool.
    let keep = hits
        .iter()
        .skip(1)
        .take_while(|c| c.score >= threshold)
        .count()
        + 1;
    hits.truncate(keep);
    hits
}

/// One business tool's scores.
#[derive(Debug, Clone, Copy)]
struct ToolScore {
    index: usize,
    fused: f32,
    coverage: f32,
    /// Whether the vector search returned the tool (it has a cosine).
    searched: bool,
}

/// The fused scores of a registry's business tools for one turn. Only tools
/// with evidence (a cosine hit or a lexical match) are scored one by one;
/// every other business tool has the same `implicit` score and no coverage,
/// and they rank among themselves by id. Ranking reads what it needs from
/// this without ever sorting the whole registry.
#[derive(Debug, Clone)]
struct Scores {
    /// Tools with evidence, by registry index ascending.
    scored: Vec<ToolScore>,
    /// The fused score of a business tool without evidence.
    implicit: f32,
    /// Number of business tools.
    business: usize,
}

impl Scores {
    /// A business tool's fused score (`implicit` when it had no evidence).
    fn fused(&self, index: usize) -> f32 {
        match self.scored.binary_search_by_key(&index, |s| s.index) {
            Ok(at) => self.scored.get(at).map_or(self.implicit, |s| s.fused),
            Err(_) => self.implicit,
        }
    }

    /// Business tools without evidence, in ranking order (id, then index).
    fn implicit_in_order<'a>(
        &'a self,
        registry: &'a Registry,
    ) -> impl Iterator<Item = ToolScore> + 'a {
        registry
            .business_by_id()
            .iter()
            .copied()
            .filter(|&index| {
                self.scored
                    .binary_search_by_key(&index, |s| s.index)
                    .is_err()
            })
            .map(|index| ToolScore {
                index,
                fused: self.implicit,
                coverage: 0.0,
                searched: false,
            })
    }
}

/// Fused scores of the business tools: those the vector search returned or
/// whose text matches a query term one by one, the rest implicitly.
fn fused_scores(
    registry: &Registry,
    config: &RankConfig,
    text: &str,
    cosine: &[(String, f32)],
) -> Scores {
    // A name listed twice keeps its highest score: no dependence on order.
    let mut cos: Vec<(usize, f32)> = cosine
        .iter()
        .filter_map(|(name, c)| registry.index_of_name(name).map(|i| (i, *c)))
        .collect();
    cos.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    cos.dedup_by_key(|c| c.0);
    let lexical = registry.lexical();
    let query = lexical.query(text);
    let lex = lexical.matches(&query);
    let s = config.settings();
    let business = |i: usize| registry.tool(i).is_some_and(|t| t.is_business());
    let fuse = |index: usize, cosine: Option<f32>, lex: LexicalScore| ToolScore {
        index,
        fused: s.fusion.fuse(cosine, lex, &s.lexical),
        coverage: lex.coverage,
        searched: cosine.is_some(),
    };
    // Merge the two lists, both by index ascending.
    let mut scored = Vec::with_capacity(cos.len() + lex.len());
    let (mut c, mut l) = (cos.iter().peekable(), lex.iter().peekable());
    loop {
        let next = match (c.peek(), l.peek()) {
            (Some(&&(ci, cv)), Some(&&(li, lv))) if ci == li => {
                c.next();
                l.next();
                fuse(ci, Some(cv), lv)
            }
            (Some(&&(ci, cv)), Some(&&(li, _))) if ci < li => {
                c.next();
                fuse(ci, Some(cv), LexicalScore::default())
            }
            (_, Some(&&(li, lv))) => {
                l.next();
                fuse(li, None, lv)
            }
            (Some(&&(ci, cv)), None) => {
                c.next();
                fuse(ci, Some(cv), LexicalScore::default())
            }
            (None, None) => break,
        };
        if business(next.index) {
            scored.push(next);
        }
    }
    Scores {
        scored,
        implicit: s.fusion.fuse(None, LexicalScore::default(), &s.lexical),
        business: registry.business_by_id().len(),
    }
}

fn floor_candidate(
    registry: &Registry,
    scores: &Scores,
    id: &str,
    reason: Reason,
) -> Option<Candidate> {
    let tool = registry.by_id(id).filter(|t| t.is_business())?;
    let index = registry.index_of_name(&tool.name)?;
    let score = scores.fused(index);
    Some(Candidate {
        name: tool.name.clone(),
        reason,
        score,
    })
}

/// The tools of fired floors, in floor order, each once.
fn floor_candidates(registry: &Registry, scores: &Scores, fired: &[FiredFloor]) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    let all = fired
        .iter()
        .flat_map(|f| f.tools.iter().map(move |id| (id, f.reason)));
    for c in all.filter_map(|(id, reason)| floor_candidate(registry, scores, id, reason)) {
        if !out.iter().any(|o| o.name == c.name) {
            out.push(c);
        }
    }
    out
}

/// The `m` best business tools, in ranking order: what sorting every
/// business tool and keeping the first `m` gives (ties beyond the ranking
/// order keep registry order, as a stable sort of the registry would), without
/// sorting the whole registry.
fn best(registry: &Registry, scores: &Scores, m: usize) -> Vec<ToolScore> {
    let order = |a: &ToolScore, b: &ToolScore| by_score_then_id(registry, a, b);
    // The m-th best score bounds the m best (found on bare floats, which
    // compare cheaply); only tools at or above it are ordered in full.
    let mut top: Vec<ToolScore> = match m
        .checked_sub(1)
        .filter(|&last| last + 1 < scores.scored.len())
    {
        Some(last) => {
            let mut fused: Vec<f32> = scores.scored.iter().map(|s| s.fused).collect();
            let (_, &mut bound, _) = fused.select_nth_unstable_by(last, |a, b| b.total_cmp(a));
            scores
                .scored
                .iter()
                .filter(|s| s.fused.total_cmp(&bound).is_ge())
                .copied()
                .collect()
        }
        None if m == 0 => Vec::new(),
        None => scores.scored.clone(),
    };
    if m < top.len() {
        top.select_nth_unstable_by(m, order);
        top.truncate(m);
    }
    top.sort_unstable_by(order);
    // Tools without evidence all score `implicit`: they enter only where that
    // score ranks (checked before walking them).
    let room = top.len() < m;
    let outranked = top
        .last()
        .is_some_and(|last| last.fused.total_cmp(&scores.implicit).is_gt());
    if scores.business == scores.scored.len() || (!room && outranked) {
        return top;
    }
    let mut merged = Vec::with_capacity(m.min(scores.business));
    let mut rest = scores.implicit_in_order(registry).peekable();
    let mut top = top.into_iter().peekable();
    while merged.len() < m {
        let next = match (top.peek(), rest.peek()) {
            (Some(a), Some(b)) if order(a, b).is_le() => top.next(),
            (_, Some(_)) => rest.next(),
            (Some(_), None) => top.next(),
            (None, None) => None,
        };
        let Some(next) = next else { break };
        merged.push(next);
    }
    merged
}

/// The ranking order: [`compare`](super::fuse::compare)'s (score, then
/// coverage, best first, then id), ties on id by index. A total order on
/// distinct tools, so an unstable sort gives the one answer; ids compare by
/// the registry's precomputed order.
fn by_score_then_id(registry: &Registry, a: &ToolScore, b: &ToolScore) -> std::cmp::Ordering {
    b.fused
        .total_cmp(&a.fused)
        .then(b.coverage.total_cmp(&a.coverage))
        .then_with(|| registry.id_order(a.index).cmp(&registry.id_order(b.index)))
}

/// Stages 3–6 over precomputed scores; returns candidates best first.
fn rank(
    registry: &Registry,
    config: &RankConfig,
    scores: &Scores,
    floors: &[Candidate],
    stages: Stages,
    trace: &mut Trace,
) -> Vec<Candidate> {
    let p = &config.settings().pipeline;
    let sort = |v: &mut Vec<ToolScore>| v.sort_unstable_by(|a, b| by_score_then_id(registry, a, b));
    // 3. Threshold, keeping the phase minimum when there is anything to keep.
    let implicit = scores.business - scores.scored.len();
    // Tools over the threshold and tools the vector search returned, in one pass.
    let (over, searched) = scores.scored.iter().fold((0, 0), |(over, searched), s| {
        (
            over + usize::from(s.fused >= stages.threshold),
            searched + usize::from(s.searched),
        )
    });
    let above = over
        + if scores.implicit >= stages.threshold {
            implicit
        } else {
            0
        };
    trace.above_threshold = above;
    let mut ranked = best(
        registry,
        scores,
        above
            .max(stages.min_fill)
            .max(searched.min(stages.searched_fill)),
    );
    let named = |i: usize| {
        stages
            .named
            .then(|| registry.tool(i).map(|t| t.name.clone()))
            .flatten()
    };
    trace.ranked = ranked.iter().filter_map(|s| named(s.index)).collect();

    if stages.scoped {
        // 4. Domain scoping.
        if p.domain.enabled {
            let d = &p.domain;
            let scoped = |dom: &str| !d.generic_domains.iter().any(|g| g == dom);
            let domain_of = |i: usize| registry.tool(i).and_then(|t| t.domain.as_deref());
            let floor_only = |dom: &str| d.floor_only_domains.iter().any(|f| f == dom);
            let mut domains: BTreeSet<String> = ranked
                .iter()
                .filter_map(|s| domain_of(s.index))
                .filter(|dom| scoped(dom) && !floor_only(dom))
                .take(d.anchor_top)
                .map(str::to_owned)
                .collect();
            domains.extend(
                floors
                    .iter()
                    .filter_map(|c| registry.by_name(&c.name))
                    .filter_map(|t| t.domain.clone()),
            );
            for s in ranked.iter_mut() {
                let Some(dom) =
                    domain_of(s.index).filter(|dom| scoped(dom) && !domains.contains(*dom))
                else {
                    continue;
                };
                s.fused -= if floor_only(dom) {
                    d.floor_only_penalty
                } else {
                    d.penalty
                };
                trace.off_domain.extend(named(s.index));
            }
            trace.domains = domains.into_iter().collect();
            sort(&mut ranked);
        }
        // 5. Semantic-group dedup: best read and best write of a group keep their place.
        if p.dedup.enabled {
            let mut seen: BTreeMap<(&str, bool), usize> = BTreeMap::new();
            let mut kept = Vec::with_capacity(ranked.len());
            for mut s in ranked {
                let key = registry
                    .tool(s.index)
                    .and_then(|t| t.meta.as_ref())
                    .and_then(|m| m.semantic_group.as_deref().map(|g| (g, m.mutates())));
                let Some(key) = key else {
                    kept.push(s);
                    continue;
                };
                let n = seen.entry(key).or_default();
                *n += 1;
                if *n <= p.dedup.per_axis {
                    kept.push(s);
                    continue;
                }
                trace.deduped.extend(named(s.index));
                if let Some(penalty) = p.dedup.sibling_penalty {
                    s.fused -= penalty;
                    kept.push(s);
                }
            }
            ranked = kept;
            sort(&mut ranked);
        }
        // 6. Workflow boost on execute or composite turns.
        if trace.execute_intent || trace.composite_intent {
            for s in ranked.iter_mut() {
                let Some(t) = registry.tool(s.index) else {
                    continue;
                };
                let is_workflow = t
                    .meta
                    .as_ref()
                    .and_then(|m| m.category.as_ref())
                    .is_some_and(|c| p.workflow.categories.contains(c));
                if is_workflow {
                    s.fused += p.workflow.boost;
                    trace.boosted.extend(named(s.index));
                }
            }
            sort(&mut ranked);
        }
        // A tool whose penalties outweigh all its evidence is no candidate.
        ranked.retain(|s| s.fused > 0.0);
    }
    ranked
        .into_iter()
        .take(stages.limit)
        .filter_map(|s| {
            registry.tool(s.index).map(|t| Candidate {
                name: t.name.clone(),
                reason: stages.reason,
                score: s.fused,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
