//! Per-session memory: the last audited set (what the fallback and the
//! recovery phase build on) and a bounded audit trail of every answer.
//!
//! Entries hold tool names, reasons, the source, floor signal names and
//! timings — never the turn's text or ids. One exception, by design: the
//! query of the model's tool-search call ([`SearchAudit`]), which is why a
//! tool outside retrieval's answer was shown (cut to 256 characters; raw ids
//! in it were replaced by aliases on the LLM listener before it left).

use keyhole_core::proto::tools::{ResolveRequest, Source, SurfacedTool};
use keyhole_core::tools::rank::floors::FiredFloor;
use keyhole_core::tools::rank::pipeline::Resolution;
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
    /// Timings.
    pub timings: Timings,
    /// The model's tool search on this turn, when it made one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchAudit>,
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
            timings,
            search: None,
        }
    }
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

    /// Appends an entry; a retrieval (never a fallback) replaces the audited set.
    pub(crate) fn record(&mut self, session: &str, res: &Resolution, entry: AuditEntry) {
        self.tick += 1;
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
        if matches!(res.source, Source::Retrieval | Source::Lexical) {
            s.prior = res.candidates.iter().map(|c| c.name.clone()).collect();
        }
        if s.trail.len() >= self.audit_len {
            s.trail.pop_front();
        }
        s.trail.push_back(entry);
    }

    /// The session's trail, oldest first.
    pub(crate) fn trail(&self, session: &str) -> Option<Vec<AuditEntry>> {
        self.by_name
            .get(session)
            .map(|s| s.trail.iter().cloned().collect())
    }
}
