//! Per-session memory: the last audited set (what the fallback and the
//! recovery phase build on) and a bounded audit trail of every answer.
//!
//! Entries hold tool names, reasons, the source, floor signal names and
//! timings — never the turn's text, ids or arguments.

use keyhole_core::rank::floors::FiredFloor;
use keyhole_core::rank::pipeline::Resolution;
use keyhole_core::wire::{ResolveRequest, Source, SurfacedTool};
use keyhole_core::Phase;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

/// How the turn's cosines were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retrieval {
    /// Embedding + vector search, fused with the lexical score.
    Hybrid,
    /// Lexical only: the registry's vectors were not ready yet, or the
    /// turn's deadline passed first.
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
}

impl AuditEntry {
    /// The entry for one resolution.
    /// `tools_in`: the registry's size (a request by digest carries no tools).
    pub fn new(req: &ResolveRequest, tools_in: usize, res: &Resolution, retrieval: Retrieval, timings: Timings) -> AuditEntry {
        AuditEntry {
            at_ms: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            phase: req.phase,
            source: res.source,
            retrieval,
            tools_in,
            tools: res.to_response().tools,
            floors: res.trace.floors.clone(),
            domains: res.trace.domains.clone(),
            timings,
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
        Sessions { by_name: HashMap::new(), max_sessions: max_sessions.max(1), audit_len: audit_len.max(1), tick: 0 }
    }

    /// The session's last audited set (empty for an unknown session).
    pub(crate) fn prior(&self, session: &str) -> Vec<String> {
        self.by_name.get(session).map(|s| s.prior.clone()).unwrap_or_default()
    }

    /// Appends an entry; a retrieval (never a fallback) replaces the audited set.
    pub(crate) fn record(&mut self, session: &str, res: &Resolution, entry: AuditEntry) {
        self.tick += 1;
        if !self.by_name.contains_key(session) && self.by_name.len() >= self.max_sessions {
            let oldest = self.by_name.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.by_name.remove(&k);
            }
        }
        let s = self
            .by_name
            .entry(session.to_owned())
            .or_insert_with(|| Session { prior: Vec::new(), trail: VecDeque::new(), used: 0 });
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
        self.by_name.get(session).map(|s| s.trail.iter().cloned().collect())
    }
}
