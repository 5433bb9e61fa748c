//! The filter's decision on one LLM request: which function tools go upstream.
//!
//! The filter is a shell around three calls: [`read`] a complete body, ask
//! control, [`finish`] with its answer (or its failure). Every body that
//! leaves has passed [`seal`], the independent detector.
//!
//! Every path ends here, including every fault, so the bound is enforced in one
//! place: whatever control answered (or failed to answer), the decision never
//! keeps more function tools than the phase budget, and never the full registry
//! unless the registry already fits the budget.

use crate::config::OnOutage;
use crate::detect;
use crate::format::{self, BuiltinTools, ParsedRequest};
use crate::reply::{self, ErrorKind, LocalReply};
use crate::phase::{Offer, Rules};
use crate::wire::{
    registry_digest, Reason, ResolveRequest, ResolveResponse, Source, SurfacedTool, UnknownRegistry, UNKNOWN_REGISTRY_STATUS,
};
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

/// Why a request is answered locally instead of forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The body cannot be read.
    Unreadable,
    /// The body carries tools, but in no format keyhole knows.
    UnknownFormat,
    /// The body about to leave holds more tool definitions than the phase
    /// allows, as the independent detector ([`crate::detect`]) counts them.
    OverBudget {
        /// Tool definitions found.
        found: usize,
        /// The phase's budget.
        budget: usize,
    },
    /// Control gave no usable answer, nothing is known, and policy says reject.
    Unavailable,
}

impl Refusal {
    /// A short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Unreadable => "unreadable",
            Refusal::UnknownFormat => "unknown-format",
            Refusal::OverBudget { .. } => "over-budget",
            Refusal::Unavailable => "unavailable",
        }
    }
}

/// What to do with a complete request body before control is asked.
#[derive(Debug)]
pub enum Read<'a> {
    /// No function tool to choose from: the body leaves unchanged (the
    /// detector has passed it).
    Pass,
    /// Function tools to choose from: ask control, then [`finish`].
    Resolve(ParsedRequest<'a>),
    /// Answer locally with `reply`.
    Refuse(Refusal, LocalReply),
}

/// Reads a complete request body arriving at `path` in `phase`.
pub fn read<'a>(path: &str, body: &'a [u8], phase: Phase, builtins: &BuiltinTools) -> Read<'a> {
    match format::parse_with(path, body, builtins) {
        Ok(Some(parsed)) if !parsed.tools.is_empty() => Read::Resolve(parsed),
        Ok(_) => match seal(body, phase) {
            Ok(()) => Read::Pass,
            Err((refusal, reply)) => Read::Refuse(refusal, reply),
        },
        Err(e) if e.is_unknown_format() => Read::Refuse(Refusal::UnknownFormat, reply::invalid_request(&e)),
        Err(e) => Read::Refuse(Refusal::Unreadable, reply::invalid_request(&e)),
    }
}

/// The last word before a body leaves: the independent detector counts tool
/// definitions in `body`, whatever format it was read as; more than the
/// phase's budget, or a body it cannot read, is refused.
pub fn seal(body: &[u8], phase: Phase) -> Result<(), (Refusal, LocalReply)> {
    let budget = phase.budget().max;
    match detect::count_tool_shaped(body) {
        Ok(found) if found <= budget => Ok(()),
        Ok(found) => Err((Refusal::OverBudget { found, budget }, reply::too_many_tools(found, budget, phase))),
        Err(e) => Err((
            Refusal::Unreadable,
            reply::error(ErrorKind::InvalidRequest, &format!("keyhole cannot read this request: {e}")),
        )),
    }
}

/// The request that leaves, decided and sealed.
#[derive(Debug)]
pub enum Finished {
    /// Forward `body` (the rewrite), with the decision that made it.
    Forward {
        /// The rewritten body; it passed [`seal`].
        body: Vec<u8>,
        /// Indexes of kept function tools.
        keep: Vec<usize>,
        /// The kept tools with their activation reasons.
        surfaced: Vec<SurfacedTool>,
        /// Where the set came from.
        source: Source,
        /// True when control's list exceeded the budget and was cut.
        clamped: bool,
    },
    /// Answer locally with `reply`.
    Refuse(Refusal, LocalReply),
}

/// Decides ([`decide`]), rewrites and seals one request: the whole of the
/// filter's work after control answered (or failed to).
pub fn finish(
    req: &ParsedRequest<'_>,
    body: &[u8],
    phase: Phase,
    answer: Result<&ResolveResponse, Outage>,
    prior: &[SurfacedTool],
    on_outage: OnOutage,
) -> Finished {
    match decide(req, phase, answer, prior, on_outage) {
        Decision::Reject => Finished::Refuse(Refusal::Unavailable, reply::unavailable()),
        Decision::Forward { keep, surfaced, source, clamped } => {
            let rewritten = req.rewrite(body, &keep);
            match seal(&rewritten, phase) {
                Ok(()) => Finished::Forward { body: rewritten, keep, surfaced, source, clamped },
                Err((refusal, reply)) => Finished::Refuse(refusal, reply),
            }
        }
    }
}

/// Decides the function tools to forward.
///
/// - `answer`: control's answer, or why there is none.
/// - `prior`: the session's last audited set, used when control is out and
///   to bound a recovery turn.
/// - `on_outage`: what to do when control is out and nothing is known.
///
/// The phase's rules ([`Rules`], the same ones control composed its answer
/// with) are checked again here, whatever control answered: at most
/// `phase.budget().max` tools; formatter: no tool that may change a record
/// (as control's metadata says; a tool it says nothing of counts as
/// mutating), except one the request forces; recovery: at most
/// [`RECOVERY_NEW_TOOLS`](crate::phase::RECOVERY_NEW_TOOLS) tools outside the prior set, when this worker knows
/// the session's prior set.
pub fn decide(
    req: &ParsedRequest<'_>,
    phase: Phase,
    answer: Result<&ResolveResponse, Outage>,
    prior: &[SurfacedTool],
    on_outage: OnOutage,
) -> Decision {
    let max = phase.budget().max;
    let mut set = Set { req, prior, rules: Rules::new(phase), keep: Vec::with_capacity(max), surfaced: Vec::with_capacity(max) };

    // A forced function is always visible, whatever else happens (within the
    // budget: a client may list the whole registry as "allowed").
    let metadata = |name: &str| {
        let offered = answer.ok().into_iter().flat_map(|a| a.tools.iter());
        offered.chain(prior).find(|t| t.name == name).map_or(true, |t| t.mutating)
    };
    for forced in &req.forced {
        set.offer(SurfacedTool { name: forced.clone(), reason: Reason::ToolChoice, mutating: metadata(forced) });
    }

    let (source, clamped) = match answer {
        Ok(answer) => {
            let offered = answer.tools.iter().filter(|t| req.tools.iter().any(|r| r.name == t.name)).count();
            for tool in &answer.tools {
                set.offer(tool.clone());
            }
            (answer.source, offered > max)
        }
        Err(_) => {
            for tool in prior {
                set.offer(SurfacedTool { reason: Reason::PriorSet, ..tool.clone() });
            }
            if set.keep.is_empty() && on_outage == OnOutage::Reject {
                return Decision::Reject;
            }
            (Source::FilterFallback, false)
        }
    };
    Decision::Forward { keep: set.keep, surfaced: set.surfaced, source, clamped }
}

/// The set being composed under the phase's rules.
struct Set<'r, 'a> {
    req: &'r ParsedRequest<'a>,
    prior: &'r [SurfacedTool],
    rules: Rules,
    keep: Vec<usize>,
    surfaced: Vec<SurfacedTool>,
}

impl Set<'_, '_> {
    /// Keeps `tool` if the request carries it and the phase's rules allow it.
    /// Outside the prior set means outside a prior set this worker knows.
    fn offer(&mut self, tool: SurfacedTool) {
        let Some(i) = self.req.tools.iter().position(|t| t.name == tool.name) else {
            return;
        };
        if self.keep.contains(&i) {
            return;
        }
        let offer = Offer {
            mutating: tool.mutating,
            forced: tool.reason == Reason::ToolChoice,
            outside_prior: !self.prior.is_empty() && !self.prior.iter().any(|p| p.name == tool.name),
        };
        if self.rules.admit(offer) {
            self.keep.push(i);
            self.surfaced.push(tool);
        }
    }
}

/// The question for control about `req`: by registry digest only, or
/// (`with_registry`, when control did not know the digest) with every tool
/// descriptor as well.
pub fn question(req: &ParsedRequest<'_>, session: Option<&str>, phase: Phase, with_registry: bool) -> ResolveRequest {
    ResolveRequest {
        session: session.map(str::to_owned),
        phase,
        turn: req.turn.clone(),
        tools: if with_registry { req.descriptors() } else { Vec::new() },
        registry: Some(registry_digest(req.tools.iter().map(|t| (t.name.as_ref(), t.description.as_ref())))),
        forced: req.forced.clone(),
    }
}

/// What control's reply to a `/v1/resolve` call means for the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An answer to [`finish`] with.
    Answer(ResolveResponse),
    /// Control does not know the registry's digest: ask once more with the
    /// descriptors ([`question`] with `with_registry`).
    SendRegistry,
    /// No usable answer: [`finish`] with this outage.
    Outage(Outage),
}

/// Reads control's reply (`status`, and the body when there is one).
/// `registry_sent`: the question already carried the descriptors, so an
/// unknown-registry reply is an outage rather than a reason to ask again (the
/// filter asks at most twice per request).
pub fn reply(status: u16, body: Option<&[u8]>, registry_sent: bool) -> Reply {
    match status {
        200 => match body.and_then(|b| serde_json::from_slice::<ResolveResponse>(b).ok()) {
            Some(answer) => Reply::Answer(answer),
            None => Reply::Outage(Outage::Garbage),
        },
        UNKNOWN_REGISTRY_STATUS if !registry_sent => {
            match body.and_then(|b| serde_json::from_slice::<UnknownRegistry>(b).ok()) {
                Some(UnknownRegistry { unknown_registry: true }) => Reply::SendRegistry,
                _ => Reply::Outage(Outage::Status(status)),
            }
        }
        _ => Reply::Outage(Outage::Status(status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format;
    use crate::phase::RECOVERY_NEW_TOOLS;

    #[test]
    fn an_unknown_registry_is_sent_once() {
        let unknown = br#"{"unknown_registry":true}"#;
        assert_eq!(reply(409, Some(unknown), false), Reply::SendRegistry);
        assert_eq!(reply(409, Some(unknown), true), Reply::Outage(Outage::Status(409)));
        assert_eq!(reply(409, Some(b"{}"), false), Reply::Outage(Outage::Status(409)));
        assert_eq!(reply(409, None, false), Reply::Outage(Outage::Status(409)));
        assert_eq!(reply(200, Some(b"nope"), false), Reply::Outage(Outage::Garbage));
        assert_eq!(reply(503, None, false), Reply::Outage(Outage::Status(503)));
        let ok = br#"{"tools":[{"name":"t1","reason":"rag"}]}"#;
        assert!(matches!(reply(200, Some(ok), true), Reply::Answer(a) if a.tools.len() == 1));
    }

    #[test]
    fn the_question_names_the_registry_by_digest() {
        let b = body(5, Some("t2"));
        let req = format::parse("/", &b).unwrap().unwrap();
        let short = question(&req, Some("s"), Phase::Planner, false);
        let full = question(&req, Some("s"), Phase::Planner, true);
        assert!(short.tools.is_empty());
        assert_eq!(full.tools.len(), 5);
        assert_eq!(short.registry, full.registry);
        assert_eq!(short.registry.as_deref(), Some(crate::wire::descriptors_digest(&full.tools).as_str()));
        assert_eq!(short.forced, vec!["t2".to_owned()]);
    }

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
            tools: names.iter().map(|n| SurfacedTool { name: (*n).into(), reason: Reason::Rag, mutating: false }).collect(),
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
        let prior: Vec<SurfacedTool> = (0..40).map(|i| SurfacedTool::new(format!("t{i}"), Reason::Rag)).collect();
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

    #[test]
    fn formatter_never_keeps_a_mutating_tool_whatever_control_says() {
        let b = body(20, Some("t19"));
        let req = format::parse("/", &b).unwrap().unwrap();
        let mut answer = answer(&["t0", "t1", "t2", "t3"]);
        answer.tools[1].mutating = true;
        answer.tools[3].mutating = true;
        let d = decide(&req, Phase::Formatter, Ok(&answer), &[], OnOutage::Reject);
        let Decision::Forward { keep, .. } = d else { panic!("rejected") };
        // The forced tool (no metadata: mutating) is kept; t1 and t3 are not.
        assert_eq!(keep, vec![19, 0, 2]);
        // The same rule holds for the prior set on an outage.
        let prior = vec![SurfacedTool::new("t5", Reason::Rag), SurfacedTool { mutating: false, ..SurfacedTool::new("t6", Reason::Rag) }];
        let d = decide(&req, Phase::Formatter, Err(Outage::Garbage), &prior, OnOutage::Reject);
        let Decision::Forward { keep, .. } = d else { panic!("rejected") };
        assert_eq!(keep, vec![19, 6]);
    }

    #[test]
    fn recovery_adds_at_most_three_tools_to_a_known_prior_set() {
        let b = body(30, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let prior: Vec<SurfacedTool> = (0..4).map(|i| SurfacedTool::new(format!("t{i}"), Reason::Rag)).collect();
        let names: Vec<String> = (0..30).rev().map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let d = decide(&req, Phase::Recovery, Ok(&answer(&refs)), &prior, OnOutage::Reject);
        let Decision::Forward { keep, .. } = d else { panic!("rejected") };
        let new = keep.iter().filter(|&&i| i >= 4).count();
        assert_eq!(new, RECOVERY_NEW_TOOLS);
        assert_eq!(keep.len(), 4 + RECOVERY_NEW_TOOLS);
    }
}
