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
//!
//! The tool-search control tool ([`crate::tools::recovery`]) is added here too
//! ([`finish_with`]): in one place of the budget kept for it, so what leaves
//! holds at most the budget's tool definitions with it counted.

use crate::config::OnOutage;
use crate::proto::reply::{self, ErrorKind, LocalReply};
use crate::proto::tools::{
    Reason, ResolveRequest, ResolveResponse, Source, SurfacedTool, ToolSearch, UnknownRegistry,
    UNKNOWN_REGISTRY_STATUS,
};
use crate::tools::detect;
use crate::tools::format::{self, BuiltinTools, ParsedRequest};
use crate::tools::phase::{Offer, Rules};
use crate::tools::recovery;
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
        /// The tool-search control tool goes out with the kept tools.
        search_tool: bool,
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
    /// allows, as the independent detector ([`crate::tools::detect`]) counts them.
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

impl Read<'_> {
    /// The same outcome, owning the request's strings
    /// ([`ParsedRequest::into_owned`]).
    pub fn into_owned(self) -> Read<'static> {
        match self {
            Read::Pass => Read::Pass,
            Read::Resolve(parsed) => Read::Resolve(parsed.into_owned()),
            Read::Refuse(refusal, reply) => Read::Refuse(refusal, reply),
        }
    }
}

/// Reads a complete request body arriving at `path` in `phase`; tools
/// arrays read before are recalled from `memo` ([`format::Memo`]).
///
/// Headroom, not refusal: what the body holds besides the function tools
/// keyhole chooses from (the detector's count of the body without them, and
/// the places of MCP servers the provider reads itself) takes places of the
/// budget; the set is chosen in the places left ([`finish_with`]). Only a
/// body whose rest alone is over the budget is refused.
pub fn read<'a>(
    path: &str,
    body: &'a [u8],
    phase: Phase,
    builtins: &BuiltinTools,
    memo: &mut format::Memo,
) -> Read<'a> {
    match format::parse_memo(path, body, builtins, memo) {
        Ok(Some(parsed)) if !parsed.tools.is_empty() => with_rest(parsed, body, phase),
        Ok(parsed) => match seal_with(body, phase, parsed.map_or(0, |p| p.sourced)) {
            Ok(()) => Read::Pass,
            Err((refusal, reply)) => Read::Refuse(refusal, reply),
        },
        Err(e) if e.is_unknown_format() => {
            Read::Refuse(Refusal::UnknownFormat, reply::invalid_request(&e))
        }
        Err(e) => Read::Refuse(Refusal::Unreadable, reply::invalid_request(&e)),
    }
}

/// `parsed`, read from `body`, with the rest of the body counted: to be
/// resolved, or refused when the rest alone is over the budget.
fn with_rest<'a>(mut parsed: ParsedRequest<'a>, body: &[u8], phase: Phase) -> Read<'a> {
    match rest_of(&parsed, body) {
        Ok(rest) => {
            parsed.rest = Some(rest);
            let taken = rest.saturating_add(parsed.sourced);
            let budget = phase.budget().max;
            if taken > budget {
                return Read::Refuse(
                    Refusal::OverBudget {
                        found: taken,
                        budget,
                    },
                    reply::too_many_tools(taken, budget, phase),
                );
            }
            Read::Resolve(parsed)
        }
        Err(refused) => Read::Refuse(refused.0, refused.1),
    }
}

/// [`read`] of `body`, which a rewrite made of the body `sent` was read
/// from by replacing the strings `edits` lists (the prompt's ids by their
/// aliases), without reading it again: `sent` moved onto it
/// ([`ParsedRequest::moved`]), its turn and tool-search query passed through
/// `alias` (the same texts as the rewrite of the body has them), and the rest
/// of `body` counted again, as [`read`] counts it, unless every edit is
/// [`crate::json::StringEdit::neutral`] (the count as sent holds). `None` when the edits or
/// `alias` leave no valid move: then `read` the body.
pub fn read_moved(
    sent: ParsedRequest<'static>,
    body: &[u8],
    edits: &[crate::json::StringEdit],
    phase: Phase,
    alias: &dyn Fn(&str) -> Option<String>,
) -> Option<Read<'static>> {
    let mut moved = sent.moved(edits)?;
    moved.turn = alias(&moved.turn)?;
    if let Some(query) = moved.search_call.as_mut().and_then(|c| c.query.as_mut()) {
        *query = alias(query)?;
    }
    Some(with_rest(moved, body, phase))
}

/// The detector's count of `body` without any of `req`'s function tools.
fn rest_of(req: &ParsedRequest<'_>, body: &[u8]) -> Result<usize, (Refusal, LocalReply)> {
    if let Some(rest) = req.rest {
        return Ok(rest);
    }
    detect::count_tool_shaped(&req.rewrite(body, &[])).map_err(unreadable)
}

fn unreadable(e: detect::DetectError) -> (Refusal, LocalReply) {
    (
        Refusal::Unreadable,
        reply::error(
            ErrorKind::InvalidRequest,
            &format!("keyhole cannot read this request: {e}"),
        ),
    )
}

/// The last word before a body leaves: the independent detector counts tool
/// definitions in `body`, whatever format it was read as; more than the
/// phase's budget, or a body it cannot read, is refused.
pub fn seal(body: &[u8], phase: Phase) -> Result<(), (Refusal, LocalReply)> {
    seal_with(body, phase, 0)
}

/// [`seal`], with `sourced` places taken by tools the provider loads itself
/// ([`ParsedRequest::sourced`]).
fn seal_with(body: &[u8], phase: Phase, sourced: usize) -> Result<(), (Refusal, LocalReply)> {
    let budget = phase.budget().max;
    match detect::count_tool_shaped(body) {
        Ok(found) if found.saturating_add(sourced) <= budget => Ok(()),
        Ok(found) => {
            let found = found.saturating_add(sourced);
            Err((
                Refusal::OverBudget { found, budget },
                reply::too_many_tools(found, budget, phase),
            ))
        }
        Err(e) => Err(unreadable(e)),
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
        /// The body carries the tool-search control tool ([`crate::tools::recovery`]).
        search_tool: bool,
    },
    /// Answer locally with `reply`.
    Refuse(Refusal, LocalReply),
}

/// Whether the filter adds the tool-search control tool ([`crate::tools::recovery`])
/// to `req` in `phase`: the setting is on, the phase chooses tools
/// ([`Phase::offers_tool_search`]), and the agent's registry has no tool of
/// that name (its own tool of that name is the agent's to execute: then
/// keyhole neither adds one nor reads calls of it as searches).
pub fn offers_search_tool(req: &ParsedRequest<'_>, phase: Phase, enabled: bool) -> bool {
    enabled && phase.offers_tool_search() && !req.carries(recovery::TOOL_NAME)
}

/// [`finish_with`] without the tool-search control tool.
pub fn finish(
    req: &ParsedRequest<'_>,
    body: &[u8],
    phase: Phase,
    answer: Result<&ResolveResponse, Outage>,
    prior: &[SurfacedTool],
    on_outage: OnOutage,
) -> Finished {
    finish_with(req, body, phase, answer, prior, on_outage, false)
}

/// Decides ([`decide_with`]), rewrites and seals one request: the whole of
/// the filter's work after control answered (or failed to). `search_tool`:
/// add the tool-search control tool ([`offers_search_tool`]); it takes one
/// place of the phase budget, and the sealed body holds at most the budget's
/// tool definitions, the control tool counted.
pub fn finish_with(
    req: &ParsedRequest<'_>,
    body: &[u8],
    phase: Phase,
    answer: Result<&ResolveResponse, Outage>,
    prior: &[SurfacedTool],
    on_outage: OnOutage,
    search_tool: bool,
) -> Finished {
    let taken = match rest_of(req, body) {
        Ok(rest) => rest.saturating_add(req.sourced),
        Err((refusal, reply)) => return Finished::Refuse(refusal, reply),
    };
    // The control tool only where a place is left for it.
    let search_tool = search_tool && taken < phase.budget().max;
    match decide_in(req, phase, answer, prior, on_outage, search_tool, taken) {
        Decision::Reject => Finished::Refuse(Refusal::Unavailable, reply::unavailable()),
        // The places the rest of the body takes pushed out a tool the
        // request forces, which the budget alone would have kept: forwarding
        // without it would change what the client asked the model to call.
        Decision::Forward { ref surfaced, .. }
            if forced_kept(surfaced) < forced_fitting(req, phase) =>
        {
            let found = taken.saturating_add(forced_fitting(req, phase));
            let budget = phase.budget().max;
            Finished::Refuse(
                Refusal::OverBudget { found, budget },
                reply::too_many_tools(found, budget, phase),
            )
        }
        Decision::Forward {
            mut keep,
            mut surfaced,
            source,
            mut clamped,
            search_tool,
        } => loop {
            let rewritten = if search_tool {
                req.rewrite_with_search_tool(body, &keep)
            } else {
                req.rewrite(body, &keep)
            };
            match seal_with(&rewritten, phase, req.sourced) {
                Ok(()) => {
                    return Finished::Forward {
                        body: rewritten,
                        keep,
                        surfaced,
                        source,
                        clamped,
                        search_tool,
                    }
                }
                // A kept tool can count as more than one (its schema holds
                // an object with a name and a description): the last chosen
                // tool that is not forced gives its place, until the body
                // fits. A forced one never does.
                Err(refused) => match surfaced
                    .iter()
                    .rposition(|t| t.reason != Reason::ToolChoice)
                {
                    Some(last) if last < keep.len() => {
                        keep.remove(last);
                        surfaced.remove(last);
                        clamped = true;
                    }
                    _ => return Finished::Refuse(refused.0, refused.1),
                },
            }
        },
    }
}

/// How many tools of `surfaced` are there because the request forces them.
fn forced_kept(surfaced: &[SurfacedTool]) -> usize {
    surfaced
        .iter()
        .filter(|t| t.reason == Reason::ToolChoice)
        .count()
}

/// How many forced tools the phase's budget alone keeps: those the request
/// carries, at most the budget.
fn forced_fitting(req: &ParsedRequest<'_>, phase: Phase) -> usize {
    req.forced
        .iter()
        .filter(|name| req.carries(name))
        .count()
        .min(phase.budget().max)
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
/// [`RECOVERY_NEW_TOOLS`](crate::tools::phase::RECOVERY_NEW_TOOLS) tools outside the prior set, when this worker knows
/// the session's prior set.
pub fn decide(
    req: &ParsedRequest<'_>,
    phase: Phase,
    answer: Result<&ResolveResponse, Outage>,
    prior: &[SurfacedTool],
    on_outage: OnOutage,
) -> Decision {
    decide_with(req, phase, answer, prior, on_outage, false)
}

/// [`decide`], adding the tool-search control tool when `search_tool`: one
/// place of the budget is kept for it ([`Rules::reserving`]), so at most
/// `phase.budget().max - 1` registry tools are kept. It is not added to a
/// request stripped of every function tool (control out, nothing known,
/// `on_outage: strip`): such a request goes out with no function tool.
pub fn decide_with(
    req: &ParsedRequest<'_>,
    phase: Phase,
    answer: Result<&ResolveResponse, Outage>,
    prior: &[SurfacedTool],
    on_outage: OnOutage,
    search_tool: bool,
) -> Decision {
    decide_in(
        req,
        phase,
        answer,
        prior,
        on_outage,
        search_tool,
        req.rest.unwrap_or(0).saturating_add(req.sourced),
    )
}

/// [`decide_with`], with `taken` places of the budget taken by what the body
/// holds besides the function tools keyhole chooses from.
fn decide_in(
    req: &ParsedRequest<'_>,
    phase: Phase,
    answer: Result<&ResolveResponse, Outage>,
    prior: &[SurfacedTool],
    on_outage: OnOutage,
    search_tool: bool,
    taken: usize,
) -> Decision {
    let reserved = usize::from(search_tool).saturating_add(taken);
    let max = phase.registry_budget(reserved);
    let rules = Rules::reserving(phase, reserved);
    let mut set = Set {
        req,
        prior,
        rules,
        keep: Vec::with_capacity(max),
        surfaced: Vec::with_capacity(max),
    };

    // A forced function is always visible, whatever else happens (within the
    // budget: a client may list the whole registry as "allowed").
    let metadata = |name: &str| {
        let offered = answer.ok().into_iter().flat_map(|a| a.tools.iter());
        offered
            .chain(prior)
            .find(|t| t.name == name)
            .is_none_or(|t| t.mutating)
    };
    for forced in &req.forced {
        set.offer(SurfacedTool {
            name: forced.clone(),
            reason: Reason::ToolChoice,
            mutating: metadata(forced),
        });
    }

    let (source, clamped) = match answer {
        Ok(answer) => {
            let offered = answer
                .tools
                .iter()
                .filter(|t| req.tools.iter().any(|r| r.name == t.name))
                .count();
            for tool in &answer.tools {
                set.offer(tool.clone());
            }
            (answer.source, offered > max)
        }
        Err(_) => {
            for tool in prior {
                set.offer(SurfacedTool {
                    reason: Reason::PriorSet,
                    ..tool.clone()
                });
            }
            if set.keep.is_empty() && on_outage == OnOutage::Reject {
                return Decision::Reject;
            }
            if set.keep.is_empty() {
                // Stripped: no function tool at all, the control tool included.
                return Decision::Forward {
                    keep: Vec::new(),
                    surfaced: Vec::new(),
                    source: Source::FilterFallback,
                    clamped: false,
                    search_tool: false,
                };
            }
            (Source::FilterFallback, false)
        }
    };
    Decision::Forward {
        keep: set.keep,
        surfaced: set.surfaced,
        source,
        clamped,
        search_tool,
    }
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
            outside_prior: !self.prior.is_empty()
                && !self.prior.iter().any(|p| p.name == tool.name),
        };
        if self.rules.admit(offer) {
            self.keep.push(i);
            self.surfaced.push(tool);
        }
    }
}

/// The question for control about `req`: by registry digest only, or
/// (`with_registry`, when control did not know the digest) with every tool
/// descriptor as well. Without the tool-search control tool
/// ([`question_with`]).
pub fn question(
    req: &ParsedRequest<'_>,
    session: Option<&str>,
    phase: Phase,
    with_registry: bool,
) -> ResolveRequest {
    question_with(req, session, phase, with_registry, false)
}

/// [`question`]; `search_tool`: the filter adds the tool-search control tool
/// ([`offers_search_tool`]), so the question says so, with the query of the
/// model's latest call of it in this user turn when there is one
/// ([`ParsedRequest::search_call`]).
pub fn question_with(
    req: &ParsedRequest<'_>,
    session: Option<&str>,
    phase: Phase,
    with_registry: bool,
    search_tool: bool,
) -> ResolveRequest {
    let tool_search = search_tool.then(|| ToolSearch {
        query: req.search_call.as_ref().and_then(|c| c.query.clone()),
    });
    ResolveRequest {
        session: session.map(str::to_owned),
        phase,
        turn: req.turn.clone(),
        tools: if with_registry {
            req.descriptors()
        } else {
            Vec::new()
        },
        registry: Some(req.registry_digest()),
        forced: req.forced.clone(),
        tool_search,
        shadow: false,
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
                Some(UnknownRegistry {
                    unknown_registry: true,
                }) => Reply::SendRegistry,
                _ => Reply::Outage(Outage::Status(status)),
            }
        }
        _ => Reply::Outage(Outage::Status(status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::format;
    use crate::tools::phase::RECOVERY_NEW_TOOLS;

    #[test]
    fn an_unknown_registry_is_sent_once() {
        let unknown = br#"{"unknown_registry":true}"#;
        assert_eq!(reply(409, Some(unknown), false), Reply::SendRegistry);
        assert_eq!(
            reply(409, Some(unknown), true),
            Reply::Outage(Outage::Status(409))
        );
        assert_eq!(
            reply(409, Some(b"{}"), false),
            Reply::Outage(Outage::Status(409))
        );
        assert_eq!(reply(409, None, false), Reply::Outage(Outage::Status(409)));
        assert_eq!(
            reply(200, Some(b"nope"), false),
            Reply::Outage(Outage::Garbage)
        );
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
        assert_eq!(
            short.registry.as_deref(),
            Some(crate::proto::tools::descriptors_digest(&full.tools).as_str())
        );
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
            tools: names
                .iter()
                .map(|n| SurfacedTool {
                    name: (*n).into(),
                    reason: Reason::Rag,
                    mutating: false,
                })
                .collect(),
            source: Source::Retrieval,
            turn: None,
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
        let d = decide(
            &req,
            Phase::ToolInput,
            Ok(&answer(&["t1"])),
            &[],
            OnOutage::Reject,
        );
        let Decision::Forward { keep, surfaced, .. } = d else {
            panic!("rejected")
        };
        assert_eq!(keep, vec![19]);
        assert_eq!(surfaced[0].reason, Reason::ToolChoice);
    }

    #[test]
    fn outage_uses_the_prior_set_within_budget() {
        let b = body(108, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let prior: Vec<SurfacedTool> = (0..40)
            .map(|i| SurfacedTool::new(format!("t{i}"), Reason::Rag))
            .collect();
        let d = decide(
            &req,
            Phase::AgentCall,
            Err(Outage::Status(503)),
            &prior,
            OnOutage::Reject,
        );
        let Decision::Forward { keep, source, .. } = d else {
            panic!("rejected")
        };
        assert_eq!(keep.len(), 8);
        assert_eq!(source, Source::FilterFallback);
    }

    #[test]
    fn outage_with_nothing_known_follows_policy() {
        let b = body(108, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        assert_eq!(
            decide(
                &req,
                Phase::Planner,
                Err(Outage::Garbage),
                &[],
                OnOutage::Reject
            ),
            Decision::Reject
        );
        let d = decide(
            &req,
            Phase::Planner,
            Err(Outage::Dispatch),
            &[],
            OnOutage::Strip,
        );
        assert_eq!(kept(&d), 0);
        assert!(matches!(d, Decision::Forward { .. }));
    }

    #[test]
    fn unknown_and_duplicate_names_from_control_are_ignored() {
        let b = body(5, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let d = decide(
            &req,
            Phase::Planner,
            Ok(&answer(&["x", "t1", "t1", "t2"])),
            &[],
            OnOutage::Reject,
        );
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
        let Decision::Forward { keep, .. } = d else {
            panic!("rejected")
        };
        // The forced tool (no metadata: mutating) is kept; t1 and t3 are not.
        assert_eq!(keep, vec![19, 0, 2]);
        // The same rule holds for the prior set on an outage.
        let prior = vec![
            SurfacedTool::new("t5", Reason::Rag),
            SurfacedTool {
                mutating: false,
                ..SurfacedTool::new("t6", Reason::Rag)
            },
        ];
        let d = decide(
            &req,
            Phase::Formatter,
            Err(Outage::Garbage),
            &prior,
            OnOutage::Reject,
        );
        let Decision::Forward { keep, .. } = d else {
            panic!("rejected")
        };
        assert_eq!(keep, vec![19, 6]);
    }

    #[test]
    fn the_control_tool_takes_one_place_of_the_budget_and_the_seal_still_holds() {
        let b = body(108, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let names: Vec<String> = (0..108).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for phase in Phase::ALL {
            let search = offers_search_tool(&req, phase, true);
            assert_eq!(search, phase.offers_tool_search(), "{phase}");
            let finished = finish_with(
                &req,
                &b,
                phase,
                Ok(&answer(&refs)),
                &[],
                OnOutage::Reject,
                search,
            );
            let Finished::Forward {
                body: out,
                keep,
                search_tool,
                clamped,
                ..
            } = finished
            else {
                panic!("{phase}: refused")
            };
            assert_eq!(search_tool, search);
            assert_eq!(
                keep.len(),
                phase.budget().max - usize::from(search),
                "{phase}"
            );
            assert!(clamped);
            // The body that leaves: at most the budget, the control tool counted.
            assert_eq!(
                detect::count_tool_shaped(&out).unwrap(),
                phase.budget().max,
                "{phase}"
            );
            let names = format::parse("/", &out).unwrap().unwrap();
            assert_eq!(names.carries(recovery::TOOL_NAME), search, "{phase}");
        }
        // Off: no place is kept and no tool added.
        assert!(!offers_search_tool(&req, Phase::Planner, false));
        let d = decide_with(
            &req,
            Phase::Planner,
            Ok(&answer(&refs)),
            &[],
            OnOutage::Reject,
            false,
        );
        assert_eq!(kept(&d), 12);
    }

    #[test]
    fn an_agent_tool_of_the_same_name_turns_the_control_tool_off() {
        let b = br#"{"messages":[],"tools":[{"type":"function","function":{"name":"keyhole_tool_search"}}]}"#;
        let req = format::parse("/", b).unwrap().unwrap();
        assert!(!offers_search_tool(&req, Phase::Planner, true));
    }

    #[test]
    fn a_stripped_request_carries_no_control_tool() {
        let b = body(20, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let d = decide_with(
            &req,
            Phase::Planner,
            Err(Outage::Garbage),
            &[],
            OnOutage::Strip,
            true,
        );
        assert!(
            matches!(d, Decision::Forward { search_tool: false, ref keep, .. } if keep.is_empty())
        );
        // With a prior set, the fallback keeps the place for it.
        let prior: Vec<SurfacedTool> = (0..20)
            .map(|i| SurfacedTool::new(format!("t{i}"), Reason::Rag))
            .collect();
        let d = decide_with(
            &req,
            Phase::Planner,
            Err(Outage::Garbage),
            &prior,
            OnOutage::Strip,
            true,
        );
        assert!(
            matches!(d, Decision::Forward { search_tool: true, ref keep, .. } if keep.len() == 11)
        );
    }

    #[test]
    fn the_question_carries_the_models_query_only_with_the_control_tool() {
        let b = br#"{"messages":[{"role":"user","content":"bmi please"},{"role":"assistant","tool_calls":[{"function":{"name":"keyhole_tool_search","arguments":"{\"query\":\"body mass index\"}"}}]}],"tools":[{"type":"function","function":{"name":"a"}}]}"#;
        let req = format::parse("/", b).unwrap().unwrap();
        let q = question_with(&req, Some("s"), Phase::Planner, false, true);
        assert_eq!(
            q.tool_search,
            Some(ToolSearch {
                query: Some("body mass index".into())
            })
        );
        assert_eq!(q.turn, "bmi please");
        assert_eq!(
            question_with(&req, Some("s"), Phase::Planner, false, false).tool_search,
            None
        );
        assert_eq!(
            question(&req, Some("s"), Phase::Planner, false).tool_search,
            None
        );
        let three = body(3, None);
        let plain = format::parse("/", &three).unwrap().unwrap();
        assert_eq!(
            question_with(&plain, None, Phase::Planner, false, true).tool_search,
            Some(ToolSearch { query: None })
        );
    }

    proptest::proptest! {
        /// Whatever control answers (or fails to), with the control tool
        /// offered: the sealed body holds at most the phase budget of tool
        /// definitions, the control tool among them exactly when it was
        /// offered and something was kept, and at most `max - 1` registry tools.
        #[test]
        fn the_control_tool_never_widens_what_leaves(
            n in 1usize..40,
            answered in proptest::collection::vec(0usize..45, 0..30),
            prior in proptest::collection::vec(0usize..45, 0..15),
            phase in 0usize..5,
            outage in proptest::prelude::any::<bool>(),
            strip in proptest::prelude::any::<bool>(),
        ) {
            let phase = Phase::ALL[phase];
            let b = body(n, None);
            let req = format::parse("/", &b).unwrap().unwrap();
            let names: Vec<String> = answered.iter().map(|i| format!("t{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let control = answer(&refs);
            let answer = if outage { Err(Outage::Garbage) } else { Ok(&control) };
            let prior: Vec<SurfacedTool> = prior.iter().map(|i| SurfacedTool::new(format!("t{i}"), Reason::Rag)).collect();
            let on_outage = if strip { OnOutage::Strip } else { OnOutage::Reject };
            let offered = offers_search_tool(&req, phase, true);
            match finish_with(&req, &b, phase, answer, &prior, on_outage, offered) {
                Finished::Forward { body: out, keep, search_tool, .. } => {
                    let found = detect::count_tool_shaped(&out).unwrap();
                    proptest::prop_assert!(found <= phase.budget().max);
                    proptest::prop_assert_eq!(found, keep.len() + usize::from(search_tool));
                    proptest::prop_assert!(keep.len() <= phase.registry_budget(usize::from(offered)));
                    let carried = format::parse("/", &out).unwrap().is_some_and(|r| r.carries(recovery::TOOL_NAME));
                    proptest::prop_assert_eq!(carried, search_tool);
                    proptest::prop_assert!(!search_tool || offered);
                }
                Finished::Refuse(refusal, _) => proptest::prop_assert_eq!(refusal, Refusal::Unavailable),
            }
        }
    }

    #[test]
    fn recovery_adds_at_most_three_tools_to_a_known_prior_set() {
        let b = body(30, None);
        let req = format::parse("/", &b).unwrap().unwrap();
        let prior: Vec<SurfacedTool> = (0..4)
            .map(|i| SurfacedTool::new(format!("t{i}"), Reason::Rag))
            .collect();
        let names: Vec<String> = (0..30).rev().map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let d = decide(
            &req,
            Phase::Recovery,
            Ok(&answer(&refs)),
            &prior,
            OnOutage::Reject,
        );
        let Decision::Forward { keep, .. } = d else {
            panic!("rejected")
        };
        let new = keep.iter().filter(|&&i| i >= 4).count();
        assert_eq!(new, RECOVERY_NEW_TOOLS);
        assert_eq!(keep.len(), 4 + RECOVERY_NEW_TOOLS);
    }
}
