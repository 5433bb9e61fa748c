//! The bounded candidate-set policy: one pure function that every path —
//! successful retrieval, empty retrieval, embedder or store outage — goes
//! through, and that can never return more than the phase budget.
//!
//! The only tools in scope are the union of the request's `tool_choice`, the
//! floors, the retrieval hits (if any) and the session's prior audited set;
//! nothing else — in particular never "the whole registry" — can come out.
//! Outage (`hits: None`) and empty success (`hits: Some(&[])`) take the same
//! path; the distinction only matters to the caller's logs.

use super::Candidate;
use crate::proto::tools::Reason;
use crate::tools::phase::{Offer, Rules};
use crate::Phase;
use std::collections::BTreeSet;

/// Everything [`bounded`] may choose from.
#[derive(Debug, Clone, Copy)]
pub struct SetInputs<'a> {
    /// The turn's phase; its budget bounds the answer.
    pub phase: Phase,
    /// Function names the request carries: nothing else may be surfaced.
    pub registry: &'a BTreeSet<String>,
    /// Names the formatter phase must not see (writes, deletes, unknown ops).
    pub mutating: &'a BTreeSet<String>,
    /// A function the request forces; always kept when the request carries it.
    pub tool_choice: Option<&'a str>,
    /// Always-include tools, in priority order, with their reasons.
    pub floors: &'a [Candidate],
    /// Retrieval hits, best first (`None` on outage).
    pub hits: Option<&'a [Candidate]>,
    /// The session's last audited set, best first.
    pub prior: &'a [String],
}

/// Composes the candidate set: `tool_choice`, then floors, then — depending on
/// the phase and on whether retrieval produced anything — the prior set and the
/// hits, deduplicated, restricted to the registry and cut to the budget.
///
/// - Planner, agent-call, formatter with hits: floors ∪ hits.
/// - Any phase without hits (outage or empty): floors ∪ prior set.
/// - Recovery: prior set first, then at most [`RECOVERY_NEW_TOOLS`](crate::tools::phase::RECOVERY_NEW_TOOLS) tools not
///   in it (floors, then hits).
/// - Formatter: no mutating tool, except a forced `tool_choice`.
/// - Tool-input: exactly one tool: the forced one, else the best of the rest.
///
/// Never fails; the length of the answer never exceeds `phase.budget().max`.
pub fn bounded(inputs: &SetInputs<'_>) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::with_capacity(inputs.phase.budget().max);
    let mut rules = Rules::new(inputs.phase);
    let prior: BTreeSet<&str> = inputs.prior.iter().map(String::as_str).collect();
    let recovery = inputs.phase == Phase::Recovery;

    let mut offer = |c: Candidate, forced: bool, out: &mut Vec<Candidate>| {
        if !inputs.registry.contains(&c.name) || out.iter().any(|o| o.name == c.name) {
            return;
        }
        let offer = Offer {
            mutating: inputs.mutating.contains(&c.name),
            forced,
            outside_prior: c.reason != Reason::PriorSet && !prior.contains(c.name.as_str()),
        };
        if rules.admit(offer) {
            out.push(c);
        }
    };

    if let Some(name) = inputs.tool_choice {
        offer(
            Candidate {
                name: name.to_owned(),
                reason: Reason::ToolChoice,
                score: 0.0,
            },
            true,
            &mut out,
        );
    }
    let prior_candidates = || {
        inputs.prior.iter().map(|n| Candidate {
            name: n.clone(),
            reason: Reason::PriorSet,
            score: 0.0,
        })
    };
    let hits = inputs.hits.unwrap_or(&[]);
    if recovery {
        for c in prior_candidates() {
            offer(c, false, &mut out);
        }
    }
    for c in inputs.floors {
        offer(c.clone(), false, &mut out);
    }
    for c in hits {
        offer(c.clone(), false, &mut out);
    }
    if hits.is_empty() && !recovery {
        for c in prior_candidates() {
            offer(c, false, &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests;
