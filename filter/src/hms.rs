//! The id-alias stream context on the HMS listener.
//!
//! Requests: aliases in the path, the query and the body are decoded by control
//! (`POST /v1/alias/decode`) and replaced with the real ids in the form each
//! place expects ([`RequestScan`]). An alias this session did not issue (or a
//! sentinel) is answered locally with a 404 naming it; nothing reaches HMS.
//!
//! Responses: every raw id in the body (JSON or text, however many chunks) and
//! in the headers (`Location`, `Link`, …) is replaced by its alias
//! ([`ResponseScan`], encoded by control at `POST /v1/alias/encode`, persisted
//! before control answers). An id that cannot be aliased (control down, store
//! down, conflicting members, a body that is not what it claims) replaces the
//! response with a 502 JSON error: a raw id is never passed on.
//!
//! A request or response without the session header fails closed (400).
//!
//! # How this works in Envoy 1.40 (measured with the end-to-end tests)
//! - A bodiless request (`end_of_stream` in the request-headers callback) with
//!   aliases pauses in that callback; the decode answer sets `:path` and
//!   resumes it. This works: the headers are still held by this filter.
//! - A request with a body must not pause in the request-headers callback:
//!   Envoy then never calls this filter's body callback and the stream hangs
//!   until the idle timeout. So the headers go on (without `content-length`;
//!   `envoy.filters.http.buffer` after this filter sets the new one), the body
//!   is held until its end, and path and body are decoded in one callout. The
//!   headers can no longer be changed from here, so when the path holds an
//!   alias the request-headers callback sets `x-keyhole-hold: closed` on the
//!   request, and the request hold filter after this one (Lua) takes the new
//!   `:path` from a verdict line prepended to the body ([`crate::hold`]).
//! - Response headers cannot be changed from a body callback (`BadArgument`),
//!   and pausing them stops this filter's body callbacks: responses with a
//!   body use the response hold (closed variant): the hold filter before this
//!   one keeps the headers until the verdict line arrives with the body. A
//!   bodiless response whose headers carry ids pauses in the response-headers
//!   callback instead and has its headers set from the encode answer.
//! - A callout to a dead cluster may be answered inside `dispatch_http_call`;
//!   then the callback's return value, not a resume, moves the stream on.
//! - A local reply while the response headers are held (or paused) reaches
//!   the client in place of the upstream response.

use crate::hold::{self, HeaderEdit, Verdict};
use crate::host;
use crate::metrics::{Metrics, Refused, Withheld};
use keyhole_core::alias::{
    BodyKind, DecodeRequest, DecodeResponse, EncodeRequest, EncodeResponse, KnownAlias, PartId,
    RequestError, RequestScan, ResponseScan, Taxonomy,
};
use keyhole_core::config::HmsConfig;
use keyhole_core::reply::{self, ErrorKind, LocalReply};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType};
use std::rc::Rc;

/// Response headers that are never scanned: they carry no ids and the hold
/// filter (or Envoy) sets them.
const UNSCANNED: [&str; 3] = ["content-length", "content-type", hold::HOLD_HEADER];

/// The taxonomy of this worker. Built once and leaked: scans borrow it across
/// callouts, and a VM never drops its worker state anyway.
fn taxonomy() -> &'static Taxonomy {
    thread_local! {
        static TAXONOMY: &'static Taxonomy = Box::leak(Box::new(Taxonomy::default()));
    }
    TAXONOMY.with(|t| *t)
}

/// A response being aliased: the scan and everything needed to apply it.
struct ResponseJob {
    scan: ResponseScan<'static>,
    /// The complete body and its part (`None` for an empty body).
    body: Vec<u8>,
    body_part: Option<PartId>,
    /// Scanned headers: name, original value, part.
    headers: Vec<(String, String, PartId)>,
    /// False for a bodiless response (headers paused, no hold).
    held: bool,
}

/// Where a stream is in its life.
enum State {
    /// Request headers not seen yet.
    Start,
    /// Buffering the request body. `path_held`: the path holds aliases and the
    /// request hold filter waits for a verdict carrying the new `:path`.
    ReadingRequest { path_held: bool },
    /// Waiting for the decode answer to call `token` (`None` while dispatching).
    Decoding {
        token: Option<u32>,
        scan: RequestScan,
        body: Option<Vec<u8>>,
        path_held: bool,
    },
    /// The request went upstream; its response will be aliased.
    Forwarded,
    /// Buffering the response body (headers held by the hold filter).
    ReadingResponse {
        headers: Vec<(String, String)>,
        kind: BodyKind,
    },
    /// Waiting for the encode answer to call `token`.
    Encoding {
        token: Option<u32>,
        job: Box<ResponseJob>,
    },
    /// Answered locally, or the response is done.
    Done,
}

/// One HMS stream.
pub struct HmsStream {
    context_id: u32,
    config: Rc<HmsConfig>,
    metrics: Metrics,
    session: String,
    /// The request's `:path` as the client sent it.
    path: String,
    /// The request's body kind.
    request_kind: BodyKind,
    state: State,
    /// True once this filter answered the request itself: that answer passes.
    answered_locally: bool,
    /// True while a callback that dispatches runs: an answer that arrives
    /// inside the dispatch must not resume the stream (the callback's return
    /// value does).
    in_callback: bool,
}

/// How a callout ended.
enum Answer<T> {
    Ok(T),
    /// Control's status (or Envoy's synthetic 503/504), or 0 for garbage.
    Failed(u16),
}

fn read_answer<T: serde::de::DeserializeOwned>(body_size: usize) -> Answer<T> {
    // An unreachable or slow control still lands here, with Envoy's synthetic
    // 503/504: always check the status.
    let status = host::call_response_header(":status")
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(0);
    if status != 200 {
        return Answer::Failed(status);
    }
    match host::buffer(BufferType::HttpCallResponseBody, body_size)
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        Some(v) => Answer::Ok(v),
        None => Answer::Failed(0),
    }
}

fn body_kind(content_type: Option<&str>) -> BodyKind {
    match content_type {
        Some(ct) if ct.to_ascii_lowercase().contains("json") => BodyKind::Json,
        _ => BodyKind::Text,
    }
}

impl HmsStream {
    /// A stream context sharing the worker's configuration.
    pub fn new(context_id: u32, config: Rc<HmsConfig>, metrics: Metrics) -> Self {
        HmsStream {
            context_id,
            config,
            metrics,
            session: String::new(),
            path: String::new(),
            request_kind: BodyKind::Text,
            state: State::Start,
            answered_locally: false,
            in_callback: false,
        }
    }

    /// Answers locally (the request goes no further) and counts it.
    fn reject(&mut self, reply: LocalReply) -> Action {
        log::warn!(
            "keyhole.alias-reject context={} session={} status={}",
            self.context_id,
            self.session,
            reply.status
        );
        host::count(self.metrics.hms.refused(Refused::of_status(reply.status)), 1);
        host::send_json(reply.status, &reply.body, &[]);
        self.answered_locally = true;
        self.state = State::Done;
        Action::Pause
    }

    // === requests ===

    /// Scans the request and either lets it go (no alias), refuses it, or asks
    /// control to decode. Returns the callback's action.
    fn decode(&mut self, body: Option<Vec<u8>>, path_held: bool) -> Action {
        let tax = taxonomy();
        let scan = match RequestScan::new(
            tax,
            &self.path,
            body.as_deref().map(|b| (b, self.request_kind)),
        ) {
            Ok(scan) => scan,
            Err(e) => return self.reject(reply::error(ErrorKind::InvalidRequest, &e.to_string())),
        };
        if scan.aliases().is_empty() {
            self.state = State::Forwarded;
            return Action::Continue;
        }
        if let Some(alias) = scan.sentinel(tax) {
            let err = RequestError::Sentinel {
                alias: alias.to_owned(),
            };
            return self.reject(reply::error(ErrorKind::UnknownAlias, &err.to_string()));
        }
        let question = DecodeRequest {
            session: self.session.clone(),
            aliases: scan.aliases().to_vec(),
        };
        let Ok(payload) = serde_json::to_vec(&question) else {
            return self.reject(reply::internal("the decode request could not be built"));
        };
        self.state = State::Decoding {
            token: None,
            scan,
            body,
            path_held,
        };
        let dispatched = host::dispatch_to_control(&self.config.control, "/v1/alias/decode", &payload, &mut self.in_callback);
        match (dispatched, &mut self.state) {
            (Ok(id), State::Decoding { token, .. }) => {
                *token = Some(id);
                Action::Pause
            }
            // Answered inside the dispatch: the request was rewritten already.
            (Ok(_), State::Forwarded) => Action::Continue,
            (Ok(_), _) => Action::Pause,
            (Err(status), _) => {
                log::warn!(
                    "keyhole.alias-dispatch context={} status={status:?}",
                    self.context_id
                );
                self.reject(reply::error(
                    ErrorKind::Unavailable,
                    "keyhole cannot decode aliases right now (control unreachable); retry later",
                ))
            }
        }
    }

    /// Applies control's decode answer. Returns `Continue` when the request
    /// may go on, `Pause` when it was answered locally.
    fn on_decoded(&mut self, answer: Answer<DecodeResponse>) -> Action {
        let State::Decoding {
            scan,
            body,
            path_held,
            ..
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            return Action::Pause;
        };
        let (decoded, epoch) = match answer {
            Answer::Ok(d) => (d.ids, d.epoch),
            Answer::Failed(status) => {
                log::warn!(
                    "keyhole.alias-decode context={} control_status={status}",
                    self.context_id
                );
                return self.reject(reply::error(
                    ErrorKind::Unavailable,
                    &format!("keyhole cannot decode aliases right now (control answered {status}); retry later"),
                ));
            }
        };
        let (path, new_body) = match scan.rewrite(taxonomy(), &self.path, body.as_deref(), &decoded)
        {
            Ok(rewritten) => rewritten,
            Err(e @ (RequestError::UnknownAlias { .. } | RequestError::Sentinel { .. })) => {
                let e = e.with_current_epoch(taxonomy(), epoch.as_deref());
                return self.reject(reply::error(ErrorKind::UnknownAlias, &e.to_string()));
            }
            Err(e) => {
                return self.reject(reply::internal(&format!(
                    "the request could not be rewritten: {e}"
                )))
            }
        };
        let old_len = body.as_deref().map_or(0, <[u8]>::len);
        if path_held {
            // The headers have left this filter: the request hold filter after
            // it sets `:path` from the verdict line.
            let verdict = Verdict::keep(vec![HeaderEdit::Set(":path".into(), path)]);
            let framed = match verdict.frame(new_body.as_deref().unwrap_or_default()) {
                Ok(framed) => framed,
                Err(e) => {
                    return self.reject(reply::internal(&format!(
                        "the request path could not be rewritten: {e}"
                    )))
                }
            };
            if let Err(status) = host::replace_buffer(BufferType::HttpRequestBody, old_len, &framed)
            {
                log::error!("keyhole.host op=set_request_body status={}", status.0);
                return self.reject(reply::internal("the request body could not be rewritten"));
            }
        } else {
            // Either bodiless (the headers are still paused here) or the path
            // holds no alias (it is unchanged).
            if path != self.path && !host::set_request_header(":path", Some(&path)) {
                return self.reject(reply::internal("the request path could not be rewritten"));
            }
            if let Some(new) = new_body {
                // A body with aliases in it only (the path had none). The
                // buffer filter after this one sets the new length.
                if let Err(status) =
                    host::replace_buffer(BufferType::HttpRequestBody, old_len, &new)
                {
                    log::error!("keyhole.host op=set_request_body status={}", status.0);
                    return self.reject(reply::internal("the request body could not be rewritten"));
                }
            }
        }
        host::count(self.metrics.hms.aliases_decoded, decoded.len() as i64);
        log::info!(
            "keyhole.alias-decode context={} session={} aliases={}",
            self.context_id,
            self.session,
            decoded.len()
        );
        self.state = State::Forwarded;
        Action::Continue
    }

    // === responses ===

    /// Scans a complete response and asks control to encode its ids.
    fn encode(
        &mut self,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        kind: BodyKind,
        held: bool,
    ) -> Action {
        let tax = taxonomy();
        let held_body = held.then_some(body.len());
        let mut scan = ResponseScan::new(tax);
        let body_part = if body.is_empty() {
            None
        } else {
            match scan.add(&body, kind, tax.kind_for_path(&self.path)) {
                Ok(part) => Some(part),
                Err(e) => return self.withhold(Withheld::Unreadable, held_body, &headers, &e.to_string()),
            }
        };
        let mut scanned = Vec::with_capacity(headers.len());
        for (name, value) in &headers {
            match scan.add(value.as_bytes(), BodyKind::Text, None) {
                Ok(part) => scanned.push((name.clone(), value.clone(), part)),
                Err(e) => return self.withhold(Withheld::Unreadable, held_body, &headers, &e.to_string()),
            }
        }
        let job = Box::new(ResponseJob {
            scan,
            body,
            body_part,
            headers: scanned,
            held,
        });
        // A body with no structured id may still mention an id the session
        // learned from an earlier body (prose, text/plain, a URL): control
        // answers with the session's known ids, so it is asked whenever there
        // is a body. Only an empty body with no id skips the callout.
        if job.scan.is_empty() && job.body.is_empty() {
            return self.apply(*job, &[], &[]);
        }
        let question = EncodeRequest {
            session: self.session.clone(),
            ids: job.scan.ids().to_vec(),
        };
        let Ok(payload) = serde_json::to_vec(&question) else {
            return self.withhold(Withheld::Control, held_body, &headers, "the encode request could not be built");
        };
        self.state = State::Encoding { token: None, job };
        let dispatched = host::dispatch_to_control(&self.config.control, "/v1/alias/encode", &payload, &mut self.in_callback);
        match (dispatched, &mut self.state) {
            (Ok(id), State::Encoding { token, .. }) => {
                *token = Some(id);
                Action::Pause
            }
            (Ok(_), State::Done) => Action::Continue,
            (Ok(_), _) => Action::Pause,
            (Err(status), _) => {
                log::warn!(
                    "keyhole.alias-dispatch context={} status={status:?}",
                    self.context_id
                );
                self.withhold(Withheld::Control, held_body, &headers, "control unreachable")
            }
        }
    }

    /// Applies control's encode answer.
    fn on_encoded(&mut self, answer: Answer<EncodeResponse>) -> Action {
        let State::Encoding { job, .. } = std::mem::replace(&mut self.state, State::Done) else {
            return Action::Pause;
        };
        match answer {
            Answer::Ok(e) => self.apply(*job, &e.aliases, &e.known),
            Answer::Failed(status) => {
                let (why, reason) = match status {
                    409 => (Withheld::Conflict, "conflicting ids for one record".to_owned()),
                    503 => (Withheld::Store, "alias store unavailable".to_owned()),
                    0 => (Withheld::Control, "control answered garbage".to_owned()),
                    s => (Withheld::Control, format!("control answered {s}")),
                };
                let headers: Vec<(String, String)> =
                    job.headers.into_iter().map(|(n, v, _)| (n, v)).collect();
                self.withhold(why, job.held.then_some(job.body.len()), &headers, &reason)
            }
        }
    }

    /// Rewrites body and headers with `aliases` (parallel to the scan's ids)
    /// and `known` (the session's ids from earlier bodies, with their
    /// aliases), and hands the response on.
    fn apply(&mut self, job: ResponseJob, aliases: &[String], known: &[KnownAlias]) -> Action {
        let original: Vec<(String, String)> = job
            .headers
            .iter()
            .map(|(n, v, _)| (n.clone(), v.clone()))
            .collect();
        let rewriter = match job.scan.rewriter(aliases, known) {
            Ok(r) => r,
            Err(e) => {
                return self.withhold(
                    Withheld::Unreadable,
                    job.held.then_some(job.body.len()),
                    &original,
                    &e.to_string(),
                )
            }
        };
        let body = match job.body_part {
            Some(part) => match rewriter.rewrite(part, &job.body) {
                Ok(out) => out,
                Err(e) => {
                    return self.withhold(
                        Withheld::Unreadable,
                        job.held.then_some(job.body.len()),
                        &original,
                        &e.to_string(),
                    )
                }
            },
            None => Vec::new(),
        };
        let mut edits = Vec::new();
        for (name, value, part) in &job.headers {
            match rewriter.rewrite(*part, value.as_bytes()) {
                Ok(out) if out == value.as_bytes() => {}
                Ok(out) => match String::from_utf8(out) {
                    Ok(new) => edits.push(HeaderEdit::Set(name.clone(), new)),
                    Err(_) => {
                        return self.withhold(
                            Withheld::Unreadable,
                            job.held.then_some(job.body.len()),
                            &original,
                            "a header could not be rewritten",
                        )
                    }
                },
                Err(e) => {
                    return self.withhold(
                        Withheld::Unreadable,
                        job.held.then_some(job.body.len()),
                        &original,
                        &e.to_string(),
                    )
                }
            }
        }
        log::info!(
            "keyhole.alias-encode context={} session={} ids={} headers_rewritten={} bytes_in={} bytes_out={}",
            self.context_id,
            self.session,
            aliases.len(),
            edits.len(),
            job.body.len(),
            body.len()
        );
        self.state = State::Done;
        let aliased = !aliases.is_empty() || !edits.is_empty() || body != job.body;
        if !job.held {
            for edit in &edits {
                let ok = match edit {
                    HeaderEdit::Set(name, value) => host::set_response_header(name, Some(value)),
                    HeaderEdit::Remove(name) => host::set_response_header(name, None),
                };
                if !ok {
                    return self.withhold(Withheld::Host, None, &original, "a header could not be rewritten");
                }
            }
            if aliased {
                host::count(self.metrics.hms.responses_aliased, 1);
            }
            return Action::Continue;
        }
        let framed = match Verdict::keep(edits).frame(&body) {
            Ok(framed) => framed,
            Err(e) => return self.withhold(Withheld::Unreadable, Some(job.body.len()), &original, &e.to_string()),
        };
        let action = self.replace_held_body(job.body.len(), &framed, false);
        if aliased && matches!(action, Action::Continue) {
            host::count(self.metrics.hms.responses_aliased, 1);
        }
        action
    }

    /// Replaces the response with a 502 JSON error, removing every scanned
    /// header that may hold an id. `held_body` is the length of the held body
    /// (`None` for a bodiless response, whose headers are paused here).
    /// `reason` must not quote the response.
    fn withhold(
        &mut self,
        why: Withheld,
        held_body: Option<usize>,
        headers: &[(String, String)],
        reason: &str,
    ) -> Action {
        log::warn!(
            "keyhole.alias-withheld context={} session={} why={} reason={reason:?}",
            self.context_id,
            self.session,
            why.as_str()
        );
        host::count(self.metrics.hms.withheld(why), 1);
        self.state = State::Done;
        let reply = reply::unaliasable(reason);
        let removals: Vec<HeaderEdit> = headers
            .iter()
            .filter(|(n, _)| !hold::KEPT_ON_WITHHOLD.contains(&n.as_str()))
            .map(|(n, _)| HeaderEdit::Remove(n.clone()))
            .collect();
        if let Some(old_len) = held_body {
            let verdict = Verdict {
                status: reply.status,
                names: Vec::new(),
                edits: removals,
            };
            return match verdict.frame(&reply.body) {
                Ok(framed) => self.replace_held_body(old_len, &framed, true),
                Err(_) => self.refuse_response(&reply),
            };
        }
        // Bodiless: the headers are still paused in this filter.
        for edit in &removals {
            if let HeaderEdit::Remove(name) = edit {
                host::set_response_header(name, None);
            }
        }
        self.refuse_response(&reply)
    }

    /// Puts the verdict-framed body in place of the held body; on failure the
    /// response is refused and never resumed (and counted as withheld unless
    /// `withheld` says it was already).
    fn replace_held_body(&mut self, old_len: usize, framed: &[u8], withheld: bool) -> Action {
        match host::replace_buffer(BufferType::HttpResponseBody, old_len, framed) {
            Ok(()) => Action::Continue,
            Err(status) => {
                log::error!("keyhole.host op=set_response_body status={}", status.0);
                if !withheld {
                    host::count(self.metrics.hms.withheld(Withheld::Host), 1);
                }
                self.refuse_response(&reply::unaliasable(
                    "the response body could not be rewritten",
                ))
            }
        }
    }

    /// Last resort: a local 502 while the response headers have not left
    /// Envoy (held or paused). The stream is never resumed afterwards, so the
    /// upstream response cannot follow.
    fn refuse_response(&mut self, reply: &LocalReply) -> Action {
        host::send_json(reply.status, &reply.body, &[]);
        self.state = State::Done;
        Action::Pause
    }
}

impl Context for HmsStream {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let ours = match &self.state {
            State::Decoding { token, .. } | State::Encoding { token, .. } => {
                token.is_none() || *token == Some(token_id)
            }
            _ => false,
        };
        if !ours {
            return;
        }
        let (action, request) = match self.state {
            State::Decoding { .. } => (self.on_decoded(read_answer(body_size)), true),
            _ => (self.on_encoded(read_answer(body_size)), false),
        };
        if matches!(action, Action::Continue) && !self.in_callback {
            if request {
                host::resume_request();
            } else {
                host::resume_response();
            }
        }
    }
}

impl HttpContext for HmsStream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        // Only keyhole asks the request hold filter for a verdict.
        if host::request_header(hold::HOLD_HEADER).is_some() {
            host::set_request_header(hold::HOLD_HEADER, None);
        }
        let Some(session) =
            host::request_header(&self.config.session_header).filter(|s| !s.trim().is_empty())
        else {
            let message = format!(
                "keyhole needs the session header {} on every HMS request",
                self.config.session_header
            );
            return self.reject(reply::error(ErrorKind::InvalidRequest, &message));
        };
        self.session = session;
        self.path = host::request_header(":path").unwrap_or_default();
        self.request_kind = body_kind(host::request_header("content-type").as_deref());
        // Responses must come back readable: an encoded body cannot be scanned
        // and would be withheld.
        host::set_request_header("accept-encoding", None);
        if end_of_stream {
            // Measured: pausing a bodiless request here and setting `:path` from
            // the decode answer works.
            return self.decode(None, false);
        }
        if let Some(len) =
            host::request_header("content-length").and_then(|v| v.trim().parse::<usize>().ok())
        {
            if len > self.config.max_body_bytes {
                return self.reject(reply::body_too_large(self.config.max_body_bytes));
            }
        }
        // Measured: pausing here when a body follows hangs the stream (the body
        // callbacks never come). Continue, and decode path and body together
        // once the body is complete; the buffer filter after this one sets the
        // new length, and the request hold filter the new path.
        host::remove_request_header("content-length");
        let tax = taxonomy();
        let path_held = match RequestScan::new(tax, &self.path, None) {
            Ok(scan) if scan.aliases().is_empty() => false,
            Ok(scan) => {
                if let Some(alias) = scan.sentinel(tax) {
                    let err = RequestError::Sentinel {
                        alias: alias.to_owned(),
                    };
                    return self.reject(reply::error(ErrorKind::UnknownAlias, &err.to_string()));
                }
                if !host::set_request_header(hold::HOLD_HEADER, Some(hold::HOLD_CLOSED)) {
                    return self.reject(reply::internal("the request could not be held"));
                }
                true
            }
            Err(e) => return self.reject(reply::error(ErrorKind::InvalidRequest, &e.to_string())),
        };
        self.state = State::ReadingRequest { path_held };
        Action::Continue
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let path_held = match self.state {
            State::ReadingRequest { path_held } => path_held,
            State::Forwarded => return Action::Continue,
            _ => return Action::Pause,
        };
        if body_size > self.config.max_body_bytes {
            return self.reject(reply::body_too_large(self.config.max_body_bytes));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let Some(body) = host::buffer(BufferType::HttpRequestBody, body_size) else {
            return self.reject(reply::internal("the request body could not be read"));
        };
        self.decode(if body.is_empty() { None } else { Some(body) }, path_held)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        // Only keyhole sets the hold header; an upstream must not forge it.
        if host::response_header(hold::HOLD_HEADER).is_some() {
            host::set_response_header(hold::HOLD_HEADER, None);
        }
        // Every response but keyhole's own answers is aliased, including the
        // ones Envoy makes up (an upstream that cannot be reached).
        if self.answered_locally
            || matches!(
                self.state,
                State::ReadingResponse { .. } | State::Encoding { .. }
            )
        {
            return Action::Continue;
        }
        let Some(all) = host::response_headers() else {
            return self.withhold(Withheld::Host, None, &[], "the response headers could not be read");
        };
        let kind = body_kind(
            all.iter()
                .find(|(n, _)| n == "content-type")
                .map(|(_, v)| v.as_str()),
        );
        let headers: Vec<(String, String)> = all
            .into_iter()
            .filter(|(n, _)| !n.starts_with(':') && !UNSCANNED.contains(&n.as_str()))
            .collect();
        if end_of_stream {
            return self.encode(headers, Vec::new(), kind, false);
        }
        if !host::set_response_header(hold::HOLD_HEADER, Some(hold::HOLD_CLOSED)) {
            host::count(self.metrics.hms.withheld(Withheld::Host), 1);
            return self.refuse_response(&reply::unaliasable("the response could not be held"));
        }
        self.state = State::ReadingResponse { headers, kind };
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        match self.state {
            State::ReadingResponse { .. } => {}
            State::Encoding { .. } => return Action::Pause,
            _ => return Action::Continue,
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let State::ReadingResponse { headers, kind } =
            std::mem::replace(&mut self.state, State::Done)
        else {
            return Action::Pause;
        };
        let Some(body) = host::buffer(BufferType::HttpResponseBody, body_size) else {
            return self.withhold(
                Withheld::Host,
                Some(body_size),
                &headers,
                "the response body could not be read",
            );
        };
        if headers
            .iter()
            .any(|(n, v)| n == "content-encoding" && !v.trim().eq_ignore_ascii_case("identity"))
        {
            return self.withhold(
                Withheld::Unreadable,
                Some(body.len()),
                &headers,
                "encoded response bodies cannot be read",
            );
        }
        self.encode(headers, body, kind, true)
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        // The body ends without an end-of-stream body callback: it was never
        // decoded, so it must not go on.
        if matches!(self.state, State::ReadingRequest { .. }) {
            return self.reject(reply::error(
                ErrorKind::InvalidRequest,
                "keyhole does not forward HMS requests with trailers",
            ));
        }
        Action::Continue
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        // Likewise: the buffered body was never scanned.
        if matches!(self.state, State::ReadingResponse { .. }) {
            host::count(self.metrics.hms.withheld(Withheld::Trailers), 1);
            return self.refuse_response(&reply::unaliasable(
                "responses with trailers cannot be aliased",
            ));
        }
        Action::Continue
    }
}
