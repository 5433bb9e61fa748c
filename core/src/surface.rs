//! The filter's decision on one LLM request: which function tools go upstream.
//!
//! Every path ends here, including every fault, so the bound is enforced in one
//! place: whatever control answered (or failed to answer), the decision never
//! keeps more function tools than the phase budget, and never the full registry
//! unless the registry already fits the budget.

use crate::config::OnOutage;
use crate::format::ParsedRequest;
use crate::wire::{Reason, ResolveResponse, Source, SurfacedTool};
use crate::Phase;

/// Why control's answer could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// The callout could not be dispatched (no such cluster, host refused).
    Dispatch,
    /// Control answered with a non-200 status (includes Envoy's synthetic
    /// 503 for an unreachable socket and 504 for a timeout).
    Status(u16),
    /// Control's 200 body was not a valid answer.
    Garbage,
}

impl Outage {
    /// A short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Outage::Dispatch => "dispatch-failed",
            Outage::Status(503) => "unavailable",
            Outage::Status(504) => "timeout",
            Outage::Status(_) => "error-status",
            Outage::Garbage => "bad-answer",
        }
    }
}

/// What the filter does with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Forward the request with these function tools (indexes into
    /// [`ParsedRequest::tools`]) and this audit trail.
    Forward {
        /// Indexes of kept function tools.
        keep: Vec<usize>,
        /// The kept tools with their activation reasons, in surfacing order.
        surfaced: Vec<SurfacedTool>,
        /// Where the set came from.
        source: Source,
        /// True when control's list exceeded the budget and was cut.
        clamped: bool,
    },
    /// Answer locally with a 503: nothing is known and policy says reject.
    Reject,
}

/// Decides the function tools to forward.
///
/// - `answer`: control's answer, or why there is none.
/// - `prior`: the session's last audited set (names), used when control is out.
/// - `on_outage`: what to do when control is out and nothing is known.
pub fn decide(
    req: &ParsedRequest<'_>,
    phase: Phase,
    answer: Result<&ResolveResponse, Outage>,
    prior: &[String],
    on_outage: OnOutage,
) -> Decision {
    let max = phase.budget().max;
    let mut surfaced: Vec<SurfacedTool> = Vec::with_capacity(max);
    let mut keep: Vec<usize> = Vec::with_capacity(max);
    let mut push = |name: &str, reason: Reason, surfaced: &mut Vec<SurfacedTool>| {
        if keep.len() >= max {
            return false;
        }
        match req.tools.iter().position(|t| t.name == name) {
            Some(i) if !keep.contains(&i) => {
                keep.push(i);
                surfaced.push(SurfacedTool { name: name.to_owned(), reason });
                true
            }
            _ => false,
        }
    };

    // A forced function is always visible, whatever else happens (within the
    // budget: a client may list the whole registry as "allowed").
    for forced in &req.forced {
        push(forced, Reason::ToolChoice, &mut surfaced);
    }

    let (source, clamped) = match answer {
        Ok(answer) => {
            let mut offered = 0usize;
            for tool in &answer.tools {
                if req.tools.iter().any(|t| t.name == tool.name) {
                    offered += 1;
                }
                push(&tool.name, tool.reason, &mut surfaced);
            }
            (answer.source, offered > max)
        }
        Err(_) => {
            for name in prior {
                push(name, Reason::PriorSet, &mut surfaced);
            }
            if surfaced.is_empty() && on_outage == OnOutage::Reject {
                return Decision::Reject;
            }
            (Source::FilterFallback, false)
        }
    };
    Decision::Forward { keep, surfaced, source, clamped }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format;

    fn body(n: usize, choice: Option<&str>) -> Vec<u8> {
        let tools: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"type":"function","function":{{"name":"t{i}"}}}}"#))
            .collect();
        let choice = choice
            .map(|c| format!(r#","tool_choice":{{"type":"function","function":{{"name":"{c}"}}}}"#))
            .unwrap_or_default();
        format!(r#"{{"tools":[{}]{choice}}}"#, tools.join(",")).into_bytes()
    }

    fn answer(names: &[&str]) -> ResolveResponse {
        ResolveResponse {
            tools: names.iter().map(|n| SurfacedTool { name: (*n).into(), reason: Reason::Rag }).collect(),
            source: Source::Retrieval,
        }
    }

    fn kept(d: &Decision) -> usize {
        match d {
            Decision::Forward { keep, .. } => keep.len(),
            Decision::Reject => 0,
        }
    }

    #[test]
    fn an_over_budget_answer_is_clamped() {
        let b = body(108, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let names: Vec<String> = (0..108).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for phase in Phase::ALL {
            let d = decide(&req, phase, Ok(&answer(&refs)), &[], OnOutage::Reject);
            assert_eq!(kept(&d), phase.budget().max, "{phase}");
            assert!(matches!(d, Decision::Forward { clamped: true, .. }));
        }
    }

    #[test]
    fn tool_choice_is_kept_first_even_when_control_omits_it() {
        let b = body(20, Some("t19"));
        let req = format::parse("/", &b).unwrap().unwrap();
        let d = decide(&req, Phase::ToolInput, Ok(&answer(&["t1"])), &[], OnOutage::Reject);
        let Decision::Forward { keep, surfaced, .. } = d else { panic!("rejected") };
        assert_eq!(keep, vec![19]);
        assert_eq!(surfaced[0].reason, Reason::ToolChoice);
    }

    #[test]
    fn outage_uses_the_prior_set_within_budget() {
        let b = body(108, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let prior: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
        let d = decide(&req, Phase::AgentCall, Err(Outage::Status(503)), &prior, OnOutage::Reject);
        let Decision::Forward { keep, source, .. } = d else { panic!("rejected") };
        assert_eq!(keep.len(), 8);
        assert_eq!(source, Source::FilterFallback);
    }

    #[test]
    fn outage_with_nothing_known_follows_policy() {
        let b = body(108, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        assert_eq!(decide(&req, Phase::Planner, Err(Outage::Garbage), &[], OnOutage::Reject), Decision::Reject);
        let d = decide(&req, Phase::Planner, Err(Outage::Dispatch), &[], OnOutage::Strip);
        assert_eq!(kept(&d), 0);
        assert!(matches!(d, Decision::Forward { .. }));
    }

    #[test]
    fn unknown_and_duplicate_names_from_control_are_ignored() {
        let b = body(5, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let d = decide(&req, Phase::Planner, Ok(&answer(&["x", "t1", "t1", "t2"])), &[], OnOutage::Reject);
        assert_eq!(kept(&d), 2);
    }
}
