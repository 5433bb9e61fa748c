//! The tool-surface stream context on the LLM listener.
//!
//! Request path: headers (copy session and phase) → body buffered to its end
//! (end of stream, or request trailers) → raw ids aliased (below) → read by
//! core → `POST /v1/resolve`
//! to control, naming the registry by digest (when control answers that it
//! does not know the digest, once more with the descriptors) → core's bounded decision → body rewritten → the independent
//! detector counts tool definitions in what is about to leave → resumed, or
//! refused. Every method that carries a body is read: a provider may honour
//! a PUT, or `X-HTTP-Method-Override`, as a POST. `envoy.filters.http.buffer` sits after
//! this filter so the upstream gets a correct `content-length`: request headers
//! have already left this filter when the body is rewritten.
//!
//! Response path: the audit header is added to the response (request headers
//! can no longer be changed once the body is being processed).
//!
//! # Ids (`aliases: on`, the default)
//! The model never holds a raw id, whichever path brought it: before anything
//! else, every raw id in the body outside the tool definitions is replaced by
//! its session alias ([`keyhole_core::alias::PromptScan`]; the session is the
//! HMS listener's, by the same header). The scan's ids go to control
//! with the turn read from the body as sent, in one round trip
//! (`POST /v2/turn`, [`keyhole_core::proto::turn`]; `"prompt": true`, so an
//! alias this session issued, which the model wrote back, stays as it is);
//! control persists new aliases, aliases the turn and the tool-search query
//! with them (so retrieval never sees a raw id either), ranks, and answers the
//! aliases, the session's earlier ids (replaced wherever they stand) and the
//! set together. The filter splices the aliases in, reads the aliased body
//! again (the tools are the same bytes, recalled from the memo) and applies
//! the set to it. A body with nothing to decide (no tools), or refused, goes
//! as `POST /v1/alias/encode` alone, then is decided on the aliased body. A
//! control without the route (404) or of another version is counted
//! (`keyhole.llm.turn_v1_fallback`), logged with both versions
//! (`keyhole.turn-version`) and remembered by the worker, whose turns then go
//! as the two `/v1` calls, `/v1/alias/encode` then `/v1/resolve`. An id that
//! cannot be aliased (no session header, control or its store down, a
//! conflict, an unreadable body, a rewrite that would leave one) refuses the
//! request: it is never forwarded raw. A body without a session header and
//! without ids passes as is. Answers are not rewritten. Each turn's count of
//! replaced ids is counted (`keyhole.llm.ids_aliased`), logged
//! (`keyhole.prompt-aliases`) and put on the answer ([`ALIASED_HEADER`]).
//!
//! # The tool-search control tool (`tool_search: on`, the default)
//! Core decides ([`keyhole_core::tools::recovery`], [`surface::offers_search_tool`]):
//! in phases that choose tools, the forwarded set is one registry tool
//! shorter and ends with `keyhole_tool_search`; the question to control
//! carries `tool_search` (with the model's query when the history shows it
//! called the tool in this user turn). On the answer, a call of the control
//! tool is on the surface the model was shown: it is never flagged off-surface
//! nor blocked. The agent sees a call of a tool it does not have, which
//! keyhole announces: [`TOOL_SEARCH_HEADER`] is `offered` on every answer to
//! a request that carried the control tool, and `called` on a (non-streamed)
//! answer that calls it. The agent answers it as it answers any unknown tool
//! (an error result), or drops it; keyhole reads the call from the next
//! request either way and never needs its result.
//!
//! # Shadow (`enforce: shadow`) and recall
//! On a shadow listener the request goes upstream byte-identical: no alias,
//! no tool removed, no control tool added, no header. The body is still read
//! and control asked (`"shadow": true`, audited as such) for the set it would
//! have surfaced; a refusal or an outage forwards it unchanged, counted
//! (`keyhole.shadow.*`). On both modes the answer's calls are judged against
//! the set ([`keyhole_core::tools::recall`]), counted (`keyhole.calls_covered`,
//! `keyhole.calls_missed`) and posted to control (`POST /v1/calls`) from the
//! root context, so that a stream ending never cancels it; a shadow answer
//! carries [`SHADOW_HEADER`] (non-streamed answers). See `shadow.rs`.

use crate::callout::{self, Callout, Sent};
use crate::hold::{Verdict, HOLD_HEADER, HOLD_OPEN};
use crate::host::{self, HostError};
use crate::metrics::{count, Metrics};
use keyhole_core::alias::prompt::{alias_text, Refusal as AliasRefusal, Rewritten};
use keyhole_core::alias::{EncodeRequest, EncodeResponse, PromptScan};
use keyhole_core::config::{LlmConfig, OffSurface, SearchTool};
use keyhole_core::proto::alias::WithTaxonomy;
use keyhole_core::proto::alias::{ErrorBody, ErrorCode, KnownAlias};
use keyhole_core::proto::hold::HeaderEdit;
use keyhole_core::proto::reply::{self, ErrorKind, LocalReply};
use keyhole_core::proto::tools::{Reason, ResolveResponse, Source, SurfacedTool};
use keyhole_core::proto::turn::{TurnRequest, TurnResolve, TurnResponse, TURN_PATH, TURN_VERSION};
use keyhole_core::tools::admission::{self, ScanLimits, StreamScanner};
use keyhole_core::tools::format::{Format, Memo, ParsedRequest};
use keyhole_core::tools::prior::PriorSets;
use keyhole_core::tools::surface::{self, Finished, Outage, Read, Refusal, Reply};
use keyhole_core::tools::{recall, recovery};
use keyhole_core::Phase;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, StreamType};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

mod shadow;
pub use shadow::{send_pending, CALLS_TICK, SHADOW_HEADER};

/// Response header listing the surfaced tools as `name=reason` pairs.
pub const AUDIT_HEADER: &str = "x-keyhole-tools";
/// Response header naming where the set came from.
pub const SOURCE_HEADER: &str = "x-keyhole-source";
/// Response header listing tools the answer called but the model was not shown.
pub const OFF_SURFACE_HEADER: &str = "x-keyhole-off-surface";
/// Response header with the number of raw id occurrences replaced by aliases
/// in the request (present when the request was aliased; never an id).
pub const ALIASED_HEADER: &str = "x-keyhole-ids-aliased";
/// Response header saying the request carried the tool-search control tool
/// (`offered`) and the answer calls it (`called`, non-streamed answers).
pub const TOOL_SEARCH_HEADER: &str = "x-keyhole-tool-search";

/// Where a stream is in its life.
enum State {
    /// Not ours to touch (no body, or a body without tools that passed the
    /// detector): everything passes.
    Passthrough,
    /// Buffering the request body.
    Reading,
    /// Waiting for control's encode answer: the body as read and its scan.
    Aliasing {
        body: Vec<u8>,
        scan: Box<PromptScan<'static>>,
    },
    /// Waiting for control's `/v2/turn` answer (aliases and set together):
    /// the body as read, its scan, and the body read as sent (applied as it
    /// is when the aliases change no byte, else moved past their edits).
    Turning {
        body: Vec<u8>,
        scan: Box<PromptScan<'static>>,
        sent: Box<SentRead>,
    },
    /// Waiting for control's answer. The request is kept as read, with the
    /// body its spans refer to. `registry_sent`: the question carried the
    /// descriptors (the second ask).
    Resolving {
        body: Vec<u8>,
        parsed: ParsedRequest<'static>,
        registry_sent: bool,
    },
    /// The request was decided; the response is checked against `surfaced`
    /// (and the control tool, when `search_tool`).
    Decided {
        surfaced: Vec<SurfacedTool>,
        source: Source,
        format: Format,
        search_tool: bool,
    },
    /// Reading a non-streaming answer whole, to check its tool calls.
    CheckingAnswer {
        surfaced: Vec<SurfacedTool>,
        format: Format,
        search_tool: bool,
    },
    /// Passing a streamed answer through, checking tool calls as they appear
    /// (`called`: every name so far, once).
    CheckingStream {
        surfaced: Vec<SurfacedTool>,
        scanner: StreamScanner,
        search_tool: bool,
        called: Vec<String>,
    },
    /// Answered locally.
    Answered,
}

/// A body read as sent, before its aliases were known, kept for
/// [`State::Turning`]: the read of the body forwarded when the aliases
/// change nothing, else moved past their edits
/// ([`surface::read_moved`]); the body is not read a second time.
struct SentRead {
    parsed: ParsedRequest<'static>,
    /// The read recalled the registry from the memo (counted when used).
    recalled: bool,
}

/// What the LLM stream contexts of one worker share.
pub struct Shared {
    /// Last audited set per session (bounded).
    pub prior: RefCell<PriorSets<SurfacedTool>>,
    /// The tools arrays read last: an agent's registry is read once.
    pub memo: RefCell<Memo>,
    /// Control answered that it does not speak `/v2/turn` (404, or another
    /// version): this worker's turns go the two `/v1` calls from then on.
    pub control_v1: Cell<bool>,
    /// `POST /v1/calls` bodies waiting for the root context to send them
    /// (bounded; see [`shadow::MAX_PENDING_CALLS`]).
    pub calls: RefCell<VecDeque<Vec<u8>>>,
}

/// The response headers only keyhole writes.
const OWN_HEADERS: [&str; 7] = [
    HOLD_HEADER,
    SHADOW_HEADER,
    OFF_SURFACE_HEADER,
    AUDIT_HEADER,
    SOURCE_HEADER,
    ALIASED_HEADER,
    TOOL_SEARCH_HEADER,
];

/// One LLM stream.
pub struct LlmStream {
    context_id: u32,
    config: Rc<LlmConfig>,
    metrics: Metrics,
    shared: Rc<Shared>,
    session: Option<String>,
    phase: Phase,
    /// The request's `:path` (format detection).
    path: String,
    state: State,
    /// The resolve callout.
    callout: Callout,
    /// Bytes of request body buffered so far (the trailers callback has no
    /// size of its own).
    body_size: usize,
    /// Raw id occurrences replaced in the request (`None`: not aliased).
    ids_aliased: Option<usize>,
    /// The turn's number in control's audit trail, from its answer.
    turn: Option<u64>,
    /// Bytes of the body as read, and as forwarded (or, in shadow, as it
    /// would have been forwarded).
    bytes: (usize, usize),
}

impl LlmStream {
    /// A stream context sharing the worker's configuration and session memory.
    pub fn new(
        context_id: u32,
        config: Rc<LlmConfig>,
        metrics: Metrics,
        shared: Rc<Shared>,
    ) -> Self {
        LlmStream {
            context_id,
            config,
            metrics,
            shared,
            session: None,
            phase: Phase::default(),
            path: String::new(),
            state: State::Passthrough,
            callout: Callout::default(),
            body_size: 0,
            ids_aliased: None,
            turn: None,
            bytes: (0, 0),
        }
    }

    /// Answers locally with a JSON error and counts it.
    fn reject(&mut self, reply: LocalReply) -> Action {
        log::warn!(
            "keyhole.reject context={} status={}",
            self.context_id,
            reply.status
        );
        count(self.metrics.rejected, 1);
        // Refused, the stream stays paused until Envoy times it out: still closed.
        let _ = host::send_json(reply.status, &reply.body, &[]);
        self.state = State::Answered;
        Action::Pause
    }

    /// Refuses the request for `refusal`: counted, logged with the reason.
    fn refuse(&mut self, refusal: Refusal, reply: LocalReply) -> Action {
        if self.shadow() {
            return self.shadow_pass(refusal.as_str());
        }
        if let Refusal::OverBudget { found, budget } = refusal {
            count(self.metrics.over_budget, 1);
            log::warn!(
                "keyhole.refused context={} reason={} phase={} tool_shaped={found} budget={budget}",
                self.context_id,
                refusal.as_str(),
                self.phase
            );
        } else {
            log::warn!(
                "keyhole.refused context={} reason={} phase={}",
                self.context_id,
                refusal.as_str(),
                self.phase
            );
        }
        self.reject(reply)
    }

    /// Reads the complete body, has its ids aliased, asks control, and
    /// pauses; or decides at once.
    fn on_complete_body(&mut self, size: usize) -> Action {
        let body = if size == 0 {
            Ok(Vec::new())
        } else {
            host::buffer(BufferType::HttpRequestBody, size)
        };
        let Ok(body) = body else {
            if self.aliasing() {
                return self.refuse_alias(AliasRefusal::Host, 0);
            }
            return self.reject(reply::internal("the request body could not be read"));
        };
        if self.aliasing() && !body.is_empty() {
            return self.alias(body);
        }
        self.surface(body)
    }

    /// Scans `body` for raw ids and asks control to encode them; passes a
    /// body without session and without ids on to [`Self::surface`].
    fn alias(&mut self, body: Vec<u8>) -> Action {
        let tax = crate::taxonomy::leaked(&self.config.taxonomy);
        // The memo is only ever borrowed for the length of one call; a busy
        // one (never expected) only means the tools are passed over the slow way.
        let scanned = match self.shared.memo.try_borrow() {
            Ok(memo) => PromptScan::new_skipping(tax, &body, &|rest| memo.known_array(rest)),
            Err(_) => PromptScan::new(tax, &body),
        };
        let scan = match scanned {
            Ok(scan) => scan,
            Err(_) => return self.refuse_alias(AliasRefusal::Unreadable, 0),
        };
        // With a session, control is always asked: the session's earlier ids
        // (a clinic slug learned on HMS) are replaced in prompts too.
        let Some(session) = self.session.clone() else {
            if scan.ids().is_empty() {
                return self.surface(body);
            }
            return self.refuse_alias(AliasRefusal::NoSession, scan.ids().len());
        };
        if self.shared.control_v1.get() {
            return self.encode(body, scan, session);
        }
        // The turn is read from the body as sent, and control aliases it
        // (and its query) itself: ids and set in one round trip. A body
        // with nothing to decide, or refused, is aliased as before.
        let (question, sent) = match self.read(&body, false) {
            (Read::Resolve(parsed), recalled) => {
                let search_tool = self.search_tool(&parsed);
                let question =
                    surface::question_with(&parsed, Some(&session), self.phase, false, search_tool);
                let parsed = parsed.into_owned();
                (question, SentRead { parsed, recalled })
            }
            (Read::Pass | Read::Refuse(..), _) => return self.encode(body, scan, session),
        };
        let question = TurnRequest {
            version: TURN_VERSION,
            taxonomy: Some(tax.digest().to_owned()),
            encode: EncodeRequest {
                session,
                ids: scan.ids().to_vec(),
                prompt: true,
            },
            resolve: question,
        };
        let ids = scan.ids().len();
        let Ok(payload) = serde_json::to_vec(&question) else {
            return self.refuse_alias(AliasRefusal::Control, ids);
        };
        self.state = State::Turning {
            body,
            scan: Box::new(scan),
            sent: Box::new(sent),
        };
        match self.send(TURN_PATH, &payload) {
            Ok(Sent::Waiting) => Action::Pause,
            Ok(Sent::Answered(action)) => action,
            Err(_) => self.refuse_alias(AliasRefusal::Control, ids),
        }
    }

    /// Asks control to encode the scan's ids (`POST /v1/alias/encode`), and
    /// pauses; the tool surface is decided on the aliased body.
    fn encode(&mut self, body: Vec<u8>, scan: PromptScan<'static>, session: String) -> Action {
        let tax = crate::taxonomy::leaked(&self.config.taxonomy);
        let question = WithTaxonomy::new(
            EncodeRequest {
                session,
                ids: scan.ids().to_vec(),
                prompt: true,
            },
            tax,
        );
        let Ok(payload) = serde_json::to_vec(&question) else {
            return self.refuse_alias(AliasRefusal::Control, scan.ids().len());
        };
        let ids = scan.ids().len();
        self.state = State::Aliasing {
            body,
            scan: Box::new(scan),
        };
        match self.send("/v1/alias/encode", &payload) {
            Ok(Sent::Waiting) => Action::Pause,
            Ok(Sent::Answered(action)) => action,
            Err(_) => self.refuse_alias(AliasRefusal::Control, ids),
        }
    }

    /// Sends one callout to control, counted.
    fn send(&mut self, path: &str, payload: &[u8]) -> Result<Sent, HostError> {
        count(self.metrics.llm.callouts, 1);
        self.callout.send(&self.config.control, path, payload)
    }

    /// Applies control's `/v2/turn` answer: the aliases are spliced in
    /// (verified), the aliased body is read, and the set applied. An older
    /// control (404) or another version is noted, and the turn goes the two
    /// `/v1` calls.
    fn on_turn(
        &mut self,
        body: Vec<u8>,
        scan: Box<PromptScan<'static>>,
        sent: SentRead,
        status: u16,
        answer: Option<Vec<u8>>,
    ) -> Action {
        let ids = scan.ids().len();
        let mismatch = status == 400
            && answer
                .as_deref()
                .and_then(|a| serde_json::from_slice::<ErrorBody>(a).ok())
                .is_some_and(|e| e.error.code == ErrorCode::VersionMismatch);
        if status == 404 || mismatch {
            return self.turn_v1(body, *scan, if mismatch { "other" } else { "1" });
        }
        if status != 200 {
            return self.refuse_alias(AliasRefusal::of_answer(status, answer.as_deref()), ids);
        }
        let Some(Ok(turn)) = answer
            .as_deref()
            .map(serde_json::from_slice::<TurnResponse>)
        else {
            return self.refuse_alias(AliasRefusal::Control, ids);
        };
        if turn.version != TURN_VERSION {
            let theirs = turn.version.to_string();
            return self.turn_v1(body, *scan, &theirs);
        }
        let rewritten = match self.splice_aliases(&body, &scan, &turn.aliases, &turn.known) {
            Ok(rewritten) => rewritten,
            Err(action) => return action,
        };
        let (rewritten, parsed) = match rewritten.body {
            // The aliases changed no byte: the body as sent is read already.
            None => {
                if sent.recalled {
                    count(self.metrics.registry_recalled, 1);
                }
                (body, sent.parsed)
            }
            Some(out) => {
                // The read as sent, moved past the replaced strings, unless
                // they touch what it holds; else the aliased body is read.
                let tax = crate::taxonomy::leaked(&self.config.taxonomy);
                let alias =
                    |text: &str| alias_text(tax, text, scan.ids(), &turn.aliases, &turn.known).ok();
                let read = match surface::read_moved(
                    sent.parsed,
                    &out,
                    &rewritten.edits,
                    self.phase,
                    &alias,
                ) {
                    Some(read) => {
                        if sent.recalled {
                            count(self.metrics.registry_recalled, 1);
                        }
                        read
                    }
                    None => self.read(&out, true).0.into_owned(),
                };
                match read {
                    Read::Pass => {
                        self.state = State::Passthrough;
                        return Action::Continue;
                    }
                    Read::Resolve(parsed) => (out, parsed),
                    Read::Refuse(refusal, reply) => return self.refuse(refusal, reply),
                }
            }
        };
        match turn.resolve {
            TurnResolve::Answer(answer) => self.apply(&parsed, &rewritten, Ok(&answer)),
            TurnResolve::Failed { status } => {
                self.apply(&parsed, &rewritten, Err(Outage::Status(status)))
            }
            TurnResolve::UnknownRegistry => {
                log::info!(
                    "keyhole.registry-unknown context={} tools={}",
                    self.context_id,
                    parsed.tools.len()
                );
                self.ask(rewritten, parsed, true)
            }
        }
    }

    /// Control does not speak this filter's `/v2/turn` (`theirs`: its
    /// version, `1` for a control without the route): counted, logged with
    /// both versions, remembered for the worker, and the turn is sent as the
    /// two `/v1` calls.
    fn turn_v1(&mut self, body: Vec<u8>, scan: PromptScan<'static>, theirs: &str) -> Action {
        count(self.metrics.llm.turn_v1_fallback, 1);
        log::warn!(
            "keyhole.turn-version context={} filter_version={TURN_VERSION} control_version={theirs} fallback=v1",
            self.context_id
        );
        self.shared.control_v1.set(true);
        let Some(session) = self.session.clone() else {
            return self.refuse_alias(AliasRefusal::NoSession, scan.ids().len());
        };
        self.encode(body, scan, session)
    }

    /// Applies control's encode answer (`status`, `answer` its body): the
    /// rewritten body replaces the buffered one, and the tool surface is
    /// decided on it.
    fn on_encoded(
        &mut self,
        body: Vec<u8>,
        scan: &PromptScan<'_>,
        status: u16,
        answer: Option<Vec<u8>>,
    ) -> Action {
        let ids = scan.ids().len();
        if status != 200 {
            return self.refuse_alias(AliasRefusal::of_answer(status, answer.as_deref()), ids);
        }
        let Some(Ok(encoded)) = answer
            .as_deref()
            .map(serde_json::from_slice::<EncodeResponse>)
        else {
            return self.refuse_alias(AliasRefusal::Control, ids);
        };
        match self.splice_aliases(&body, scan, &encoded.aliases, &encoded.known) {
            Ok(rewritten) => self.surface(rewritten.body.unwrap_or(body)),
            Err(action) => action,
        }
    }

    /// Splices `aliases` (parallel to the scan's ids) and the session's
    /// `known` ids into `body`, verified by reading the result again, and
    /// replaces the buffered body with it. [`Rewritten::body`] `None`: no
    /// byte changed (the buffered body stays). `Err`: the request was refused.
    fn splice_aliases(
        &mut self,
        body: &[u8],
        scan: &PromptScan<'_>,
        aliases: &[String],
        known: &[KnownAlias],
    ) -> Result<Rewritten, Action> {
        let ids = scan.ids().len();
        let rewritten = match scan.rewrite_counted(body, aliases, known) {
            Ok(rewritten) => rewritten,
            Err(e) => {
                log::warn!(
                    "keyhole.prompt-alias-error context={} error={:?}",
                    self.context_id,
                    e.reason()
                );
                return Err(self.refuse_alias(AliasRefusal::Rewrite, ids));
            }
        };
        if let Some(out) = &rewritten.body {
            if host::replace_buffer(BufferType::HttpRequestBody, body.len(), out).is_err() {
                return Err(self.refuse_alias(AliasRefusal::Host, ids));
            }
        }
        count(self.metrics.llm.ids_aliased, rewritten.ids as i64);
        if rewritten.ids > 0 {
            count(self.metrics.llm.requests_aliased, 1);
        }
        log::info!(
            "keyhole.prompt-aliases context={} session={} ids={} distinct={} known={} bytes_in={} bytes_out={}",
            self.context_id,
            self.session.as_deref().unwrap_or("-"),
            rewritten.ids,
            ids,
            known.len(),
            body.len(),
            rewritten.body.as_ref().map_or(body.len(), Vec::len)
        );
        self.ids_aliased = Some(rewritten.ids);
        Ok(rewritten)
    }

    /// Refuses a request whose ids cannot be aliased: counted by reason,
    /// logged (never an id), answered with the reason's reply.
    fn refuse_alias(&mut self, refusal: AliasRefusal, ids: usize) -> Action {
        count(self.metrics.llm.refused(refusal), 1);
        log::warn!(
            "keyhole.prompt-alias-refused context={} session={} reason={} ids={ids}",
            self.context_id,
            self.session.as_deref().unwrap_or("-"),
            refusal.as_str()
        );
        self.reject(refusal.reply(&self.config.session_header))
    }

    /// Reads `body` (aliased, or as sent), asks control for its tools, and
    /// pauses; or decides at once.
    fn surface(&mut self, body: Vec<u8>) -> Action {
        let read = self.read(&body, true).0;
        let parsed = match read {
            Read::Pass => {
                self.state = State::Passthrough;
                return Action::Continue;
            }
            Read::Resolve(parsed) => parsed,
            Read::Refuse(refusal, reply) => return self.refuse(refusal, reply),
        };
        let parsed = parsed.into_owned();
        self.ask(body, parsed, false)
    }

    /// Reads `body` with the worker's memo (`counted`: a recalled registry
    /// is counted). Also says whether the registry was recalled.
    fn read<'b>(&self, body: &'b [u8], counted: bool) -> (Read<'b>, bool) {
        let (read, recalled) = match self.shared.memo.try_borrow_mut() {
            Ok(mut memo) => {
                let before = memo.hits();
                let read = surface::read(
                    &self.path,
                    body,
                    self.phase,
                    &self.config.builtin_tools,
                    &mut memo,
                );
                (read, memo.hits() > before)
            }
            // Busy (never expected): read without remembering.
            Err(_) => (
                surface::read(
                    &self.path,
                    body,
                    self.phase,
                    &self.config.builtin_tools,
                    &mut Memo::new(),
                ),
                false,
            ),
        };
        if recalled && counted {
            count(self.metrics.registry_recalled, 1);
        }
        (read, recalled)
    }

    /// Asks control about `parsed` by its registry digest (`with_registry`:
    /// with the descriptors as well) and waits; or decides at once when the
    /// call cannot be dispatched or is answered synchronously.
    fn ask(
        &mut self,
        body: Vec<u8>,
        parsed: ParsedRequest<'static>,
        with_registry: bool,
    ) -> Action {
        let search_tool = self.search_tool(&parsed);
        let mut question = surface::question_with(
            &parsed,
            self.session.as_deref(),
            self.phase,
            with_registry,
            search_tool,
        );
        question.shadow = self.shadow();
        let Ok(payload) = serde_json::to_vec(&question) else {
            return self.apply(&parsed, &body, Err(Outage::Dispatch));
        };
        self.state = State::Resolving {
            body,
            parsed,
            registry_sent: with_registry,
        };
        match self.send("/v1/resolve", &payload) {
            Ok(Sent::Waiting) => Action::Pause,
            Ok(Sent::Answered(action)) => action,
            Err(_) => match std::mem::replace(&mut self.state, State::Answered) {
                State::Resolving { body, parsed, .. } => {
                    self.apply(&parsed, &body, Err(Outage::Dispatch))
                }
                other => {
                    self.state = other;
                    Action::Pause
                }
            },
        }
    }

    /// Whether the control tool goes out with `parsed` (core decides).
    fn search_tool(&self, parsed: &ParsedRequest<'_>) -> bool {
        surface::offers_search_tool(
            parsed,
            self.phase,
            self.config.tool_search == SearchTool::On && !self.shadow(),
        )
    }

    /// Applies core's decision to the buffered body. Returns `Continue` when the
    /// request may go on, `Pause` when it was answered locally.
    fn apply(
        &mut self,
        parsed: &ParsedRequest<'_>,
        body: &[u8],
        answer: Result<&ResolveResponse, Outage>,
    ) -> Action {
        self.turn = answer.ok().and_then(|a| a.turn);
        if self.shadow() {
            return self.shadow_apply(parsed, body, answer);
        }
        let prior: Vec<SurfacedTool> = match &self.session {
            Some(s) => self.shared.prior.borrow().get(s).to_vec(),
            None => Vec::new(),
        };
        if let Err(outage) = answer {
            count(self.metrics.fallback, 1);
            log::warn!(
                "keyhole.fallback context={} reason={} prior={} on_outage={:?}",
                self.context_id,
                outage.as_str(),
                prior.len(),
                self.config.on_outage
            );
        }
        let offered = self.search_tool(parsed);
        let finished = surface::finish_with(
            parsed,
            body,
            self.phase,
            answer,
            &prior,
            self.config.on_outage,
            offered,
        );
        let (rewritten, keep, surfaced, source, clamped, search_tool) = match finished {
            Finished::Refuse(refusal, reply) => return self.refuse(refusal, reply),
            Finished::Forward {
                body,
                keep,
                surfaced,
                source,
                clamped,
                search_tool,
            } => (body, keep, surfaced, source, clamped, search_tool),
        };
        self.bytes = (body.len(), rewritten.len());
        if host::replace_buffer(BufferType::HttpRequestBody, body.len(), &rewritten).is_err() {
            return self.reject(reply::internal("the request body could not be rewritten"));
        }
        if clamped {
            count(self.metrics.clamped, 1);
        }
        count(self.metrics.requests, 1);
        count(self.metrics.tools_in, parsed.tools.len() as i64);
        count(self.metrics.tools_out, keep.len() as i64);
        if matches!(source, Source::Retrieval | Source::Lexical) {
            if let Some(session) = &self.session {
                self.shared
                    .prior
                    .borrow_mut()
                    .remember(session, surfaced.iter().cloned());
            }
        }
        // The query never goes into the log (model-written text): only whether there was one.
        let tool_search = match (
            search_tool,
            parsed.search_call.as_ref().and_then(|c| c.query.as_ref()),
        ) {
            (false, _) => "off",
            (true, None) => "offered",
            (true, Some(_)) => "query",
        };
        let recovered = surfaced
            .iter()
            .filter(|t| t.reason == Reason::Recovery)
            .count();
        log::info!(
            "keyhole.candidate-set session={} phase={} source={} format={} tools_in={} tools_out={} bytes_in={} bytes_out={} clamped={} ids_aliased={} tool_search={} recovered={}",
            self.session.as_deref().unwrap_or("-"),
            self.phase,
            source.as_str(),
            parsed.format.as_str(),
            parsed.tools.len(),
            keep.len(),
            body.len(),
            rewritten.len(),
            clamped,
            self.ids_aliased.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            tool_search,
            recovered
        );
        self.state = State::Decided {
            surfaced,
            source,
            format: parsed.format,
            search_tool,
        };
        Action::Continue
    }

    /// The request-headers callback of a request with a body: copies session,
    /// phase and path, and gets the body ready to be read. Fails when the host
    /// refuses to read a header (the caller refuses the request).
    fn read_request_headers(&mut self) -> Result<Action, HostError> {
        if let Some(len) =
            host::request_header("content-length")?.and_then(|v| v.trim().parse::<usize>().ok())
        {
            if len > self.config.max_body_bytes {
                return Ok(self.reject(reply::body_too_large(self.config.max_body_bytes)));
            }
        }
        self.path = host::request_header(":path")?.unwrap_or_default();
        self.session = host::request_header(&self.config.session_header)?.filter(|s| !s.is_empty());
        if let Some(value) = host::request_header(&self.config.phase_header)? {
            match value.parse::<Phase>() {
                Ok(phase) => self.phase = phase,
                Err(e) => {
                    return Ok(self.reject(reply::error(ErrorKind::InvalidRequest, &e.to_string())))
                }
            }
        }
        // The body may be rewritten after the headers have gone on; the buffer
        // filter after this one sets the new length once the body is complete
        // (and replaces a length that could not be removed here).
        let _ = host::set_request_header("content-length", None);
        self.state = State::Reading;
        // Pausing in the header callback would hang the stream: continue, and
        // hold the body instead.
        Ok(Action::Continue)
    }

    /// Logs a call of the tool-search control tool in an answer (never its query).
    fn note_search_call(&self) {
        log::info!(
            "keyhole.tool-search-called session={} phase={}",
            self.session.as_deref().unwrap_or("-"),
            self.phase
        );
    }

    /// Counts and logs tool calls outside the surfaced set.
    fn note_off_surface(&self, names: &[String]) {
        count(self.metrics.off_surface_calls, names.len() as i64);
        log::warn!(
            "keyhole.off-surface session={} tools={}",
            self.session.as_deref().unwrap_or("-"),
            names.join(",")
        );
    }
}

/// Tool names as the model wrote them, made fit for a header: at most 16
/// names of at most 64 visible ASCII characters (others become `?`).
fn header_safe(names: &[String]) -> Vec<String> {
    names
        .iter()
        .take(16)
        .map(|n| {
            n.chars()
                .take(64)
                .map(|c| {
                    if c.is_ascii_graphic() && c != ',' {
                        c
                    } else {
                        '?'
                    }
                })
                .collect()
        })
        .collect()
}

/// The names of a surfaced set.
fn names(surfaced: &[SurfacedTool]) -> Vec<&str> {
    surfaced.iter().map(|t| t.name.as_str()).collect()
}

/// Splits the calls an answer made outside `surfaced` into the control tool
/// (the model was shown it when `search_tool`: true when it was called) and
/// the calls that are really off the surface.
fn split_search_call(mut off: Vec<String>, search_tool: bool) -> (bool, Vec<String>) {
    if !search_tool {
        return (false, off);
    }
    let before = off.len();
    off.retain(|n| n != recovery::TOOL_NAME);
    (off.len() != before, off)
}

/// `name=reason,name=reason`.
fn audit_value(surfaced: &[SurfacedTool]) -> String {
    let pairs: Vec<String> = surfaced
        .iter()
        .map(|t| format!("{}={}", t.name, t.reason.as_str()))
        .collect();
    pairs.join(",")
}

impl Context for LlmStream {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        if !self.callout.claim(token_id) {
            return;
        }
        let (body, parsed, registry_sent) =
            match std::mem::replace(&mut self.state, State::Answered) {
                State::Resolving {
                    body,
                    parsed,
                    registry_sent,
                } => (body, parsed, registry_sent),
                State::Aliasing { body, scan } => {
                    let action =
                        self.on_encoded(body, &scan, callout::status(), callout::body(body_size));
                    self.callout.settle(action, StreamType::HttpRequest);
                    return;
                }
                State::Turning { body, scan, sent } => {
                    let action = self.on_turn(
                        body,
                        scan,
                        *sent,
                        callout::status(),
                        callout::body(body_size),
                    );
                    self.callout.settle(action, StreamType::HttpRequest);
                    return;
                }
                other => {
                    self.state = other;
                    return;
                }
            };
        let action = match surface::reply(
            callout::status(),
            callout::body(body_size).as_deref(),
            registry_sent,
        ) {
            Reply::Answer(answer) => self.apply(&parsed, &body, Ok(&answer)),
            Reply::Outage(outage) => self.apply(&parsed, &body, Err(outage)),
            Reply::SendRegistry => {
                log::info!(
                    "keyhole.registry-unknown context={} tools={}",
                    self.context_id,
                    parsed.tools.len()
                );
                self.ask(body, parsed, true)
            }
        };
        self.callout.settle(action, StreamType::HttpRequest);
    }
}

impl HttpContext for LlmStream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        // No body: nothing that could carry a tool. Any method with a body is
        // read, whatever it is called.
        if end_of_stream {
            return Action::Continue;
        }
        match self.read_request_headers() {
            Ok(action) => action,
            Err(_) => self.reject(reply::internal("the request headers could not be read")),
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        match self.state {
            State::Reading => {}
            State::Aliasing { .. }
            | State::Turning { .. }
            | State::Resolving { .. }
            | State::Answered => return Action::Pause,
            _ => return Action::Continue,
        }
        if body_size > self.config.max_body_bytes {
            return self.reject(reply::body_too_large(self.config.max_body_bytes));
        }
        self.body_size = body_size;
        if !end_of_stream {
            return Action::Pause;
        }
        self.on_complete_body(body_size)
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        // Trailers end the body (HTTP/2, chunked HTTP/1.1): the body callback
        // never saw `end_of_stream`, and the buffered body is still ours to
        // read and rewrite here. Without this, Envoy would forward it unread.
        match self.state {
            State::Reading => self.on_complete_body(self.body_size),
            State::Aliasing { .. }
            | State::Turning { .. }
            | State::Resolving { .. }
            | State::Answered => Action::Pause,
            _ => Action::Continue,
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        // Only keyhole sets these; an upstream must not forge them. The
        // answer's header names are read in one host call and only those
        // present removed (most answers, a GET's too, carry none); when they
        // cannot be read, every one is removed. (Envoy does not refuse header
        // writes in this callback.)
        let present = host::response_headers();
        for name in OWN_HEADERS {
            let forged = match &present {
                Ok(headers) => headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)),
                Err(_) => true,
            };
            if forged {
                let _ = host::set_response_header(name, None);
            }
        }
        if let Some(n) = self.ids_aliased {
            let _ = host::set_response_header(ALIASED_HEADER, Some(&n.to_string()));
        }
        let State::Decided {
            surfaced,
            source,
            format,
            search_tool,
        } = std::mem::replace(&mut self.state, State::Answered)
        else {
            return Action::Continue;
        };
        // The audit headers inform; a refused one is logged, and the answer is
        // still checked. A shadow answer carries only its verdict.
        if !self.shadow() {
            let _ = host::set_response_header(AUDIT_HEADER, Some(&audit_value(&surfaced)));
            let _ = host::set_response_header(SOURCE_HEADER, Some(source.as_str()));
        }
        if search_tool {
            let _ = host::set_response_header(TOOL_SEARCH_HEADER, Some("offered"));
        }
        if end_of_stream {
            self.judge_calls(&[], &surfaced);
            return Action::Continue;
        }
        // An unreadable content type counts as an unknown one: not checked.
        let content_type = host::response_header("content-type")
            .ok()
            .flatten()
            .unwrap_or_default();
        if content_type.starts_with("text/event-stream") {
            // Streams pass in real time; calls are checked as they appear and
            // can only be counted (the headers are already gone).
            self.state = State::CheckingStream {
                surfaced,
                scanner: StreamScanner::new(format, ScanLimits::default()),
                search_tool,
                called: Vec::new(),
            };
            return Action::Continue;
        }
        if !content_type.contains("json") {
            self.judge_calls(&[], &surfaced);
            return Action::Continue;
        }
        // The verdict goes into a header (flag) or replaces the answer (block),
        // so the headers must wait for the body. Pausing here would stop this
        // filter's body callbacks too; the hold filter after us keeps the
        // headers instead.
        let _ = host::set_response_header(HOLD_HEADER, Some(HOLD_OPEN));
        self.state = State::CheckingAnswer {
            surfaced,
            format,
            search_tool,
        };
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        match &mut self.state {
            State::CheckingStream {
                surfaced,
                scanner,
                search_tool,
                called,
            } => {
                // An unreadable chunk is passed on unscanned (it cannot be held).
                let chunk =
                    host::buffer(BufferType::HttpResponseBody, body_size).unwrap_or_default();
                let mut fresh = scanner.feed(&chunk);
                if end_of_stream {
                    fresh.extend(scanner.finish());
                    let stats = scanner.stats();
                    let skipped = stats.oversized + stats.unreadable;
                    if skipped > 0 {
                        count(self.metrics.stream_events_skipped, skipped as i64);
                        log::warn!(
                            "keyhole.stream-skipped context={} oversized={} unreadable={}",
                            self.context_id,
                            stats.oversized,
                            stats.unreadable
                        );
                    }
                }
                recall::merge(called, fresh.clone());
                let off: Vec<String> = fresh
                    .into_iter()
                    .filter(|n| !admission::is_surfaced(n, &names(surfaced)))
                    .collect();
                let (searched, off) = split_search_call(off, *search_tool);
                // The stream's last chunk judges every call it made, once.
                let ended =
                    end_of_stream.then(|| (std::mem::take(called), std::mem::take(surfaced)));
                if searched {
                    self.note_search_call();
                }
                if !off.is_empty() && !self.shadow() {
                    self.note_off_surface(&off);
                }
                if let Some((called, surfaced)) = ended {
                    self.judge_calls(&called, &surfaced);
                }
                Action::Continue
            }
            State::CheckingAnswer {
                surfaced,
                format,
                search_tool,
            } => {
                if !end_of_stream {
                    return Action::Pause;
                }
                let Ok(body) = host::buffer(BufferType::HttpResponseBody, body_size) else {
                    return Action::Continue;
                };
                let called = admission::tool_calls(*format, &body).unwrap_or_default();
                let off: Vec<String> = called
                    .iter()
                    .filter(|n| !admission::is_surfaced(n, &names(surfaced)))
                    .cloned()
                    .collect();
                let (searched, off) = split_search_call(off, *search_tool);
                let surfaced = std::mem::take(surfaced);
                if searched {
                    self.note_search_call();
                }
                let judged = self.judge_calls(&called, &surfaced);
                if self.shadow() {
                    return self.shadow_verdict(&body, &judged);
                }
                if !off.is_empty() {
                    self.note_off_surface(&off);
                }
                let (status, replacement) = match (off.is_empty(), self.config.off_surface) {
                    (true, _) | (false, OffSurface::Flag) => (0, None),
                    (false, OffSurface::Block) => {
                        let reply = reply::off_surface_tool_call(&off);
                        (reply.status, Some(reply.body))
                    }
                };
                // The verdict travels to the hold filter in the body's first line.
                let edits = if searched && replacement.is_none() {
                    vec![HeaderEdit::Set(
                        TOOL_SEARCH_HEADER.to_owned(),
                        "called".to_owned(),
                    )]
                } else {
                    Vec::new()
                };
                let verdict = Verdict {
                    status,
                    names: header_safe(&off),
                    edits,
                };
                let framed = match verdict.frame(replacement.as_deref().unwrap_or(&body)) {
                    Ok(framed) => framed,
                    Err(e) => {
                        // Tool names that cannot travel in a header: withhold the answer.
                        log::error!("keyhole.verdict error={e}");
                        let reply = reply::internal("the answer's verdict could not be written");
                        Verdict {
                            status: reply.status,
                            names: Vec::new(),
                            edits: Vec::new(),
                        }
                        .frame(&reply.body)
                        .unwrap_or_default()
                    }
                };
                // A refused replacement leaves the answer without a verdict
                // line: the open hold passes it on unchanged, unflagged.
                let _ = host::replace_buffer(BufferType::HttpResponseBody, body.len(), &framed);
                Action::Continue
            }
            _ => Action::Continue,
        }
    }
}
