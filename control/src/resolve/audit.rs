//! Per-session memory: the last audited set (what the fallback and the
//! recovery phase build on) and a bounded audit trail of every answer.
//!
//! Entries hold tool names, reasons, the source, floor signal names and
//! timings — never the turn's text or ids. One exception, by design: the
//! query of the model's tool-search call ([`SearchAudit`]), which is why a
//! tool outside retrieval's answer was shown (cut to 256 characters; raw ids
//! in it were replaced by aliases on the LLM listener before it left).

use keyhole_core::proto::calls::CalledTool;
use keyhole_core::proto::tools::{ResolveRequest, Source, SurfacedTool};
use keyhole_core::tools::rank::floors::FiredFloor;
use keyhole_core::tools::rank::pipeline::Resolution;
use keyhole_core::tools::recovery;
use keyhole_core::Phase;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

/// How the turn's cosines were obtained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retrieval {
    /// Embedding + vector search, fused with the lexical score.
    Hybrid,
    /// Lexical only: the registry's vectors were not ready yet, or the
    /// turn's deadline passed first.
    #[default]
    Lexical,
    /// Embedder or store failed or timed out: the bounded fallback.
    Outage,
}

/// Where the time of one answer went, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timings {
    /// Embedding the turn.
    pub embed_us: u64,
    /// Vector search.
    pub search_us: u64,
    /// The engine.
    pub rank_us: u64,
    /// The whole resolve.
    pub total_us: u64,
}

/// One answer, as kept in the session's trail.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// The turn's number, unique in this control ([`Sessions::record`]
    /// assigns it; the filter names it in `POST /v1/calls`).
    pub turn: u64,
    /// The listener runs `enforce: shadow`: this set was only measured, the
    /// model saw the whole registry.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The turn's phase.
    pub phase: Phase,
    /// Retrieval or control fallback.
    pub source: Source,
    /// How the cosines were obtained.
    pub retrieval: Retrieval,
    /// Function tools the request carried.
    pub tools_in: usize,
    /// The surfaced tools with their reasons, in order.
    pub tools: Vec<SurfacedTool>,
    /// Floors that fired, with their signal names.
    pub floors: Vec<FiredFloor>,
    /// The turn's domains (domain scoping).
    pub domains: Vec<String>,
    /// Clauses of a turn of several asks, each retrieved on its own as well
    /// (0: the turn was retrieved whole).
    #[serde(skip_serializing_if = "is_zero")]
    pub clauses: usize,
    /// Timings.
    pub timings: Timings,
    /// The model's tool search on this turn, when it made one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchAudit>,
    /// Tools that took the off-domain penalty (the ranking's trace).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub off_domain: Vec<String>,
    /// Tools demoted or dropped by dedup (the ranking's trace).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deduped: Vec<String>,
    /// Tools at or above the threshold before the later stages; kept to
    /// say why a called tool was missing, never shown.
    #[serde(skip)]
    pub ranked: Vec<String>,
    /// Bytes of the request as sent and as forwarded (or, in shadow, as it
    /// would have been), from the filter's `POST /v1/calls`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Bytes>,
    /// The answer's tool calls, judged (from `POST /v1/calls`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallAudit>,
}

/// Bytes of one turn's request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bytes {
    /// As the client sent it.
    #[serde(rename = "in")]
    pub bytes_in: u64,
    /// As keyhole forwarded it (or would have).
    #[serde(rename = "out")]
    pub bytes_out: u64,
}

/// One tool the answer called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallAudit {
    /// The function name as the model wrote it.
    pub tool: String,
    /// It was on the surface (a hit).
    pub covered: bool,
    /// Why a missed tool was not on the surface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed: Option<MissReason>,
}

/// Why a tool the model called was not in the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissReason {
    /// The model called the tool-search control tool: it said itself that
    /// what it needed was not there.
    ToolSearch,
    /// The set was a fallback (control or filter), not a ranking.
    Fallback,
    /// It was not ranked: it scored below the threshold and was not among
    /// the best tools the vector search returned (or is not in the registry).
    BelowThreshold,
    /// It ranked above the threshold but the phase budget cut it.
    Budget,
    /// Domain scoping penalised it (the turn's domains are others).
    OtherDomain,
    /// Dedup demoted it behind a sibling of its semantic group.
    Deduped,
    /// Control surfaced it, and the filter left it out (the phase rules,
    /// a clamp).
    Filter,
}

impl MissReason {
    /// Why `tool`, called on the turn of `entry`, was not surfaced.
    pub fn of(tool: &str, entry: &AuditEntry) -> MissReason {
        let has = |names: &[String]| names.iter().any(|n| n == tool);
        if tool == recovery::TOOL_NAME {
            MissReason::ToolSearch
        } else if entry.tools.iter().any(|t| t.name == tool) {
            MissReason::Filter
        } else if !matches!(entry.source, Source::Retrieval | Source::Lexical) {
            MissReason::Fallback
        } else if has(&entry.deduped) {
            MissReason::Deduped
        } else if has(&entry.off_domain) {
            MissReason::OtherDomain
        } else if has(&entry.ranked) {
            MissReason::Budget
        } else {
            MissReason::BelowThreshold
        }
    }
}

/// A tool search (the model's call of the tool-search control tool), as the
/// audit trail keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchAudit {
    /// The query as control searched with it (at most 256 characters).
    pub query: String,
    /// What the search found, best first (function names).
    pub found: Vec<String>,
    /// Of those, the ones surfaced on this turn (reason `recovery`); a found
    /// tool already surfaced for another reason (`tool-choice`), or left out
    /// by the phase rules, is not.
    pub surfaced: Vec<String>,
    /// How the search ranked: hybrid, or lexical.
    pub retrieval: Retrieval,
}

impl SearchAudit {
    /// The audit of a search for `query` that found `found`, after it was
    /// composed into `res`.
    pub(crate) fn new(query: String, found: &super::Found, res: &Resolution) -> SearchAudit {
        let found_names: Vec<String> = found.hits.iter().map(|c| c.name.clone()).collect();
        let surfaced = res
            .candidates
            .iter()
            .filter(|c| c.reason == keyhole_core::proto::tools::Reason::Recovery)
            .map(|c| c.name.clone())
            .collect();
        SearchAudit {
            query,
            found: found_names,
            surfaced,
            retrieval: found.retrieval,
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl AuditEntry {
    /// The entry for one resolution.
    /// `tools_in`: the registry's size (a request by digest carries no tools).
    pub fn new(
        req: &ResolveRequest,
        tools_in: usize,
        res: &Resolution,
        retrieval: Retrieval,
        timings: Timings,
    ) -> AuditEntry {
        AuditEntry {
            turn: 0,
            shadow: req.shadow,
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            phase: req.phase,
            source: res.source,
            retrieval,
            tools_in,
            tools: res.to_response().tools,
            floors: res.trace.floors.clone(),
            domains: res.trace.domains.clone(),
            clauses: res.trace.clauses,
            timings,
            search: None,
            off_domain: res.trace.off_domain.clone(),
            deduped: res.trace.deduped.clone(),
            ranked: res.trace.ranked.clone(),
            bytes: None,
            calls: Vec::new(),
        }
    }
}

/// One session's entries, as `GET /v1/audit` lists them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionTrail {
    /// The session's name.
    pub session: String,
    /// Its entries in the window, oldest first.
    pub entries: Vec<AuditEntry>,
}

struct Session {
    prior: Vec<String>,
    trail: VecDeque<AuditEntry>,
    used: u64,
}

/// Every session's memory, bounded in sessions and in entries per session.
pub(crate) struct Sessions {
    by_name: HashMap<String, Session>,
    max_sessions: usize,
    audit_len: usize,
    tick: u64,
}

impl Sessions {
    pub(crate) fn new(max_sessions: usize, audit_len: usize) -> Sessions {
        Sessions {
            by_name: HashMap::new(),
            max_sessions: max_sessions.max(1),
            audit_len: audit_len.max(1),
            tick: 0,
        }
    }

    /// The session's last audited set (empty for an unknown session).
    pub(crate) fn prior(&self, session: &str) -> Vec<String> {
        self.by_name
            .get(session)
            .map(|s| s.prior.clone())
            .unwrap_or_default()
    }

    /// Appends an entry, numbering its turn; a retrieval (never a fallback)
    /// replaces the audited set. Returns the turn's number. A shadow turn
    /// never replaces the audited set: the model did not see it.
    pub(crate) fn record(&mut self, session: &str, res: &Resolution, mut entry: AuditEntry) -> u64 {
        self.tick += 1;
        entry.turn = self.tick;
        if !self.by_name.contains_key(session) && self.by_name.len() >= self.max_sessions {
            let oldest = self
                .by_name
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.by_name.remove(&k);
            }
        }
        let s = self
            .by_name
            .entry(session.to_owned())
            .or_insert_with(|| Session {
                prior: Vec::new(),
                trail: VecDeque::new(),
                used: 0,
            });
        s.used = self.tick;
        if matches!(res.source, Source::Retrieval | Source::Lexical) && !entry.shadow {
            s.prior = res.candidates.iter().map(|c| c.name.clone()).collect();
        }
        if s.trail.len() >= self.audit_len {
            s.trail.pop_front();
        }
        s.trail.push_back(entry);
        self.tick
    }

    /// Attaches an answer's judged `calls` and body sizes to the session's
    /// entry of `turn`, each miss with its reason. `None` when that entry is
    /// gone (evicted) or never was.
    pub(crate) fn record_calls(
        &mut self,
        session: &str,
        turn: u64,
        calls: &[CalledTool],
        bytes: Bytes,
    ) -> Option<Vec<CallAudit>> {
        let entry = self
            .by_name
            .get_mut(session)?
            .trail
            .iter_mut()
            .find(|e| e.turn == turn)?;
        entry.calls = calls
            .iter()
            .map(|c| CallAudit {
                tool: c.name.clone(),
                covered: c.covered,
                missed: (!c.covered).then(|| MissReason::of(&c.name, entry)),
            })
            .collect();
        entry.bytes = Some(bytes);
        Some(entry.calls.clone())
    }

    /// Every session's entries from `since_ms` (inclusive) to `until_ms`
    /// (exclusive), sessions by name.
    pub(crate) fn window(&self, since_ms: u64, until_ms: u64) -> Vec<SessionTrail> {
        let mut out: Vec<SessionTrail> = self
            .by_name
            .iter()
            .map(|(name, s)| SessionTrail {
                session: name.clone(),
                entries: s
                    .trail
                    .iter()
                    .filter(|e| (since_ms..until_ms).contains(&e.at_ms))
                    .cloned()
                    .collect(),
            })
            .filter(|t| !t.entries.is_empty())
            .collect();
        out.sort_by(|a, b| a.session.cmp(&b.session));
        out
    }

    /// The session's trail, oldest first.
    pub(crate) fn trail(&self, session: &str) -> Option<Vec<AuditEntry>> {
        self.by_name
            .get(session)
            .map(|s| s.trail.iter().cloned().collect())
    }
}
