//! The request half of an HMS stream: aliases become real ids before HMS sees
//! the request.
//!
//! Headers (session, path and the scanned headers copied; aliases in path or
//! headers close the request hold) → body held to its end → one decode
//! callout for path, headers and body → rewritten (directly, or through the
//! request hold filter's verdict line) → resumed. Anything that cannot be
//! decoded is answered locally with a 4xx or 5xx JSON error, and nothing
//! reaches HMS.
//!
//! Every request header is scanned except [`UNSCANNED`] (and pseudo-headers:
//! `:path` is read on its own, `:authority` (HTTP/1's `Host`) is scanned for
//! raw ids only and never rewritten, `:method` and `:scheme` hold no ids). A
//! repeated header stays repeated when one of its values changes.
//!
//! Raw-id-shaped values (UUIDs, FHIR ids with a configured prefix, whole or
//! glued to other text; numbers after a kind in the path or after a FHIR
//! resource type) anywhere scanned, the authority included, are counted
//! (`keyhole.hms_raw_ids`) and logged by place (`keyhole.raw-ids`, counts
//! only, never a value); the `raw_ids` setting then refuses the request (400
//! naming the places, the default: the model never holds a raw id, so one in
//! a request went around keyhole) or passes it.

use super::{body_kind, hand_on, taxonomy, HandOnError, Headers, Side, Stream};
use crate::callout::{self, Answer, Callout, Sent};
use crate::hold::{self, HeaderEdit, Verdict};
use crate::host::{self, HostError};
use crate::metrics::{count, Refused};
use keyhole_core::alias::request::body::{self as request_body, BodyView};
use keyhole_core::alias::{
    BodyKind, DecodeRequest, DecodeResponse, RawIdCount, RequestError, RequestScan,
};
use keyhole_core::config::RawIds;
use keyhole_core::proto::alias::{ErrorCode, WithTaxonomy};
use keyhole_core::proto::reply::{self, ErrorKind, LocalReply};
use proxy_wasm::types::{Action, BufferType, StreamType};

/// Request headers that are never scanned (besides pseudo-headers, the
/// session header and the hold header): credentials pass through untouched
/// (`authorization`, `proxy-authorization`, `cookie`); `content-length` is a
/// number (removed here, set again by the buffer filter); keyhole removes
/// `accept-encoding`, `range` and `if-range`; the rest are opaque keys made by the client or Envoy,
/// never record ids, that are often UUID-shaped (Envoy's `x-request-id`, trace
/// context, idempotency keys).
pub(super) const UNSCANNED: [&str; 17] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "content-length",
    "accept-encoding",
    "range",
    "if-range",
    "x-request-id",
    "x-client-trace-id",
    "traceparent",
    "tracestate",
    "b3",
    "x-b3-traceid",
    "x-b3-spanid",
    "x-b3-parentspanid",
    "x-b3-sampled",
    "idempotency-key",
];

/// The request half of one HMS stream.
#[derive(Default)]
pub(super) struct Request {
    state: State,
    /// The decode callout.
    callout: Callout,
    /// The scanned headers as the client sent them, in order.
    headers: Vec<(String, String)>,
    /// `:authority` (HTTP/1's `Host`), scanned for raw ids only.
    authority: String,
    /// `content-type` and `content-encoding`: how the body is read.
    content_type: Option<String>,
    content_encoding: Option<String>,
}

/// Where the request is.
#[derive(Default)]
enum State {
    /// Headers not seen yet.
    #[default]
    Start,
    /// Buffering the body. `headers` is [`Headers::Held`] when the path holds
    /// aliases and the request hold filter waits for a verdict carrying the
    /// new `:path`.
    Reading { headers: Headers, kind: BodyKind },
    /// Waiting for control's decode answer. `as_is`: the body's bytes were
    /// scanned (and are rewritten); otherwise only texts keyhole decoded from
    /// it were, which held no alias, and the body goes on unchanged.
    Decoding {
        scan: Box<RequestScan>,
        body: Option<Vec<u8>>,
        as_is: bool,
        headers: Headers,
    },
    /// Gone upstream, decoded or with nothing to decode.
    Forwarded,
    /// Answered locally: nothing reached HMS.
    Refused,
}

impl Request {
    /// True once this filter answered the request itself: that answer passes
    /// unaliased (it holds no id).
    pub(super) fn answered_locally(&self) -> bool {
        matches!(self.state, State::Refused)
    }

    /// Copies session and path; decodes a bodiless request at once, or gets a
    /// body ready to be held.
    pub(super) fn on_headers(&mut self, s: &mut Stream, end_of_stream: bool) -> Action {
        // Only keyhole asks the request hold filter for a verdict. (Envoy does
        // not refuse header writes in this callback; a refusal is logged.)
        let _ = host::set_request_header(hold::HOLD_HEADER, None);
        match self.read_headers(s, end_of_stream) {
            Ok(action) => action,
            Err(_) => self.reject(s, reply::internal("the request headers could not be read")),
        }
    }

    /// [`Request::on_headers`]; fails when the host refuses to read a header.
    fn read_headers(&mut self, s: &mut Stream, end_of_stream: bool) -> Result<Action, HostError> {
        let Some(session) =
            host::request_header(&s.config.session_header)?.filter(|v| !v.trim().is_empty())
        else {
            let message = format!(
                "keyhole needs the session header {} on every HMS request",
                s.config.session_header
            );
            return Ok(self.reject(s, reply::error(ErrorKind::InvalidRequest, &message)));
        };
        s.session = session;
        s.path = host::request_header(":path")?.unwrap_or_default();
        self.authority = host::request_header(":authority")?.unwrap_or_default();
        self.content_type = host::request_header("content-type")?;
        self.content_encoding = host::request_header("content-encoding")?;
        let kind = body_kind(self.content_type.as_deref());
        self.headers = host::request_headers()?
            .into_iter()
            .filter(|(name, _)| {
                !name.starts_with(':')
                    && !UNSCANNED.contains(&name.as_str())
                    && *name != s.config.session_header
                    && name != hold::HOLD_HEADER
            })
            .collect();
        // Responses must come back readable: an encoded body cannot be scanned
        // and would be withheld (which is also what a refusal here leads to).
        let _ = host::set_request_header("accept-encoding", None);
        // And whole: a `206 Partial Content` carries part of a body, which the
        // last word cannot judge (two answers could each carry half of a
        // UUID). HMS answers the whole body instead, and it is read whole.
        let _ = host::set_request_header("range", None);
        let _ = host::set_request_header("if-range", None);
        if end_of_stream {
            // Measured: pausing a bodiless request here and setting `:path` from
            // the decode answer works.
            return Ok(self.decode(s, None, kind, Headers::Direct));
        }
        if let Some(len) =
            host::request_header("content-length")?.and_then(|v| v.trim().parse::<usize>().ok())
        {
            if len > s.config.max_body_bytes {
                return Ok(self.reject(s, reply::body_too_large(s.config.max_body_bytes)));
            }
        }
        // Measured: pausing here when a body follows hangs the stream (the body
        // callbacks never come). Continue, and decode path and body together
        // once the body is complete; the buffer filter after this one sets the
        // new length (and replaces one that could not be removed here), and the
        // request hold filter the new path.
        let _ = host::set_request_header("content-length", None);
        let tax = taxonomy(&s.config);
        let scan = RequestScan::new(tax, &s.path, None).map(|mut scan| {
            scan.scan_headers(tax, &self.headers);
            scan
        });
        let headers = match scan {
            Ok(scan) if scan.aliases().is_empty() => Headers::Direct,
            Ok(scan) => {
                if let Some(alias) = scan.sentinel(tax) {
                    return Ok(self.reject(s, sentinel(alias)));
                }
                if host::set_request_header(hold::HOLD_HEADER, Some(hold::HOLD_CLOSED)).is_err() {
                    return Ok(self.reject(s, reply::internal("the request could not be held")));
                }
                Headers::Held
            }
            Err(e) => {
                return Ok(self.reject(s, reply::error(ErrorKind::InvalidRequest, &e.to_string())))
            }
        };
        self.state = State::Reading { headers, kind };
        Ok(Action::Continue)
    }

    /// Holds the body to its end, then decodes.
    pub(super) fn on_body(&mut self, s: &Stream, body_size: usize, end_of_stream: bool) -> Action {
        let (headers, kind) = match self.state {
            State::Reading { headers, kind } => (headers, kind),
            State::Forwarded => return Action::Continue,
            _ => return Action::Pause,
        };
        if body_size > s.config.max_body_bytes {
            return self.reject(s, reply::body_too_large(s.config.max_body_bytes));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let Ok(body) = host::buffer(BufferType::HttpRequestBody, body_size) else {
            return self.reject(s, reply::internal("the request body could not be read"));
        };
        self.decode(
            s,
            if body.is_empty() { None } else { Some(body) },
            kind,
            headers,
        )
    }

    /// Trailers end the body without an end-of-stream body callback: it was
    /// never decoded, so it must not go on.
    pub(super) fn on_trailers(&mut self, s: &Stream) -> Action {
        if matches!(self.state, State::Reading { .. }) {
            return self.reject(
                s,
                reply::error(
                    ErrorKind::InvalidRequest,
                    "keyhole does not forward HMS requests with trailers",
                ),
            );
        }
        Action::Continue
    }

    /// Handles the decode answer when `token` is the decode callout's.
    pub(super) fn on_call_response(&mut self, s: &Stream, token: u32, body_size: usize) {
        if !self.callout.claim(token) {
            return;
        }
        let action = self.on_decoded(s, callout::answer(body_size));
        self.callout.settle(action, StreamType::HttpRequest);
    }

    /// Scans the request and either lets it go (no alias), refuses it, or asks
    /// control to decode. Returns the callback's action.
    fn decode(
        &mut self,
        s: &Stream,
        body: Option<Vec<u8>>,
        kind: BodyKind,
        headers: Headers,
    ) -> Action {
        let tax = taxonomy(&s.config);
        // A body whose text its bytes do not show (a content coding, UTF-16,
        // multipart parts under a transfer encoding) is read decoded, or
        // refused: never forwarded unread.
        let view = match body.as_deref() {
            Some(b) => {
                match request_body::view(
                    self.content_type.as_deref(),
                    self.content_encoding.as_deref(),
                    b,
                    s.config.max_body_bytes,
                ) {
                    Ok(view) => view,
                    Err(e) => {
                        let message = format!("keyhole reads every HMS request body before it forwards it, and cannot read this one: {e}");
                        return self.reject(s, reply::error(ErrorKind::InvalidRequest, &message));
                    }
                }
            }
            None => BodyView {
                as_is: true,
                hidden: Vec::new(),
            },
        };
        let scanned = if view.as_is {
            body.as_deref().map(|b| (b, kind))
        } else {
            None
        };
        let mut scan = match RequestScan::new(tax, &s.path, scanned) {
            Ok(scan) => scan,
            Err(e) => {
                return self.reject(s, reply::error(ErrorKind::InvalidRequest, &e.to_string()))
            }
        };
        scan.scan_headers(tax, &self.headers);
        scan.scan_authority(tax, &self.authority);
        let mut hidden_alias = None;
        for text in &view.hidden {
            let found = scan.scan_hidden(tax, text);
            hidden_alias = hidden_alias.or(found);
        }
        let raw = scan.raw_ids();
        if raw.total() > 0 {
            count(s.metrics.hms.raw_ids, raw.total() as i64);
            log::warn!(
                "keyhole.raw-ids context={} session={} policy={} total={} path={} query={} headers={} body={}",
                s.context_id,
                s.session,
                s.config.raw_ids.as_str(),
                raw.total(),
                raw.path,
                raw.query,
                raw.headers,
                raw.body
            );
            if s.config.raw_ids == RawIds::Refuse {
                return self.reject(s, raw_ids_refused(&raw));
            }
        }
        if let Some(alias) = hidden_alias {
            let message = format!(
                "alias {alias:?} is in a part of the request body keyhole decoded to read it (a content-encoding, UTF-16, or a multipart part's transfer encoding) and does not encode again; send that body plain"
            );
            return self.reject(s, reply::error(ErrorKind::InvalidRequest, &message));
        }
        if scan.aliases().is_empty() {
            self.state = State::Forwarded;
            return Action::Continue;
        }
        if let Some(alias) = scan.sentinel(tax) {
            return self.reject(s, sentinel(alias));
        }
        let question = WithTaxonomy::new(
            DecodeRequest {
                session: s.session.clone(),
                aliases: scan.aliases().to_vec(),
            },
            taxonomy(&s.config),
        );
        let Ok(payload) = serde_json::to_vec(&question) else {
            return self.reject(s, reply::internal("the decode request could not be built"));
        };
        self.state = State::Decoding {
            scan: Box::new(scan),
            body,
            as_is: view.as_is,
            headers,
        };
        count(s.metrics.hms.request_callouts, 1);
        match self
            .callout
            .send(&s.config.control, "/v1/alias/decode", &payload)
        {
            Ok(Sent::Waiting) => Action::Pause,
            Ok(Sent::Answered(action)) => action,
            Err(e) => {
                log::warn!(
                    "keyhole.alias-dispatch context={} status={}",
                    s.context_id,
                    e.status
                );
                self.reject(
                    s,
                    reply::error(
                        ErrorKind::Unavailable,
                        "keyhole cannot decode aliases right now (control unreachable); retry later",
                    ),
                )
            }
        }
    }

    /// Applies control's decode answer. Returns `Continue` when the request
    /// may go on, `Pause` when it was answered locally.
    fn on_decoded(&mut self, s: &Stream, answer: Answer<DecodeResponse>) -> Action {
        let (scan, body, as_is, headers) =
            match std::mem::replace(&mut self.state, State::Forwarded) {
                State::Decoding {
                    scan,
                    body,
                    as_is,
                    headers,
                } => (*scan, body, as_is, headers),
                other => {
                    self.state = other;
                    return Action::Pause;
                }
            };
        let (decoded, epoch) = match answer {
            Answer::Ok(d) => (d.ids, d.epoch),
            Answer::Failed(failure) => {
                let status = failure.status;
                log::warn!(
                    "keyhole.alias-decode context={} control_status={status} code={:?}",
                    s.context_id,
                    failure.code
                );
                let message = if failure.code == Some(ErrorCode::TaxonomyMismatch) {
                    "keyhole cannot decode aliases: the filter and control run different taxonomies"
                        .to_owned()
                } else {
                    format!("keyhole cannot decode aliases right now (control answered {status}); retry later")
                };
                return self.reject(s, reply::error(ErrorKind::Unavailable, &message));
            }
        };
        let scanned = if as_is { body.as_deref() } else { None };
        let (path, new_body) = match scan.rewrite(taxonomy(&s.config), &s.path, scanned, &decoded) {
            // A body read decoded held no alias: it goes on as sent.
            Ok((path, rewritten)) => (path, if as_is { rewritten } else { body.clone() }),
            Err(
                e @ (RequestError::UnknownAlias { .. }
                | RequestError::Sentinel { .. }
                | RequestError::WrongKind { .. }),
            ) => {
                let e = e.with_current_epoch(taxonomy(&s.config), epoch.as_deref());
                return self.reject(s, reply::error(ErrorKind::UnknownAlias, &e.to_string()));
            }
            Err(e) => {
                return self.reject(
                    s,
                    reply::internal(&format!("the request could not be rewritten: {e}")),
                )
            }
        };
        let changed = match scan.rewrite_headers(taxonomy(&s.config), &self.headers, &decoded) {
            Ok(changed) => changed,
            Err(
                e @ (RequestError::UnknownAlias { .. }
                | RequestError::Sentinel { .. }
                | RequestError::WrongKind { .. }),
            ) => {
                let e = e.with_current_epoch(taxonomy(&s.config), epoch.as_deref());
                return self.reject(s, reply::error(ErrorKind::UnknownAlias, &e.to_string()));
            }
            Err(e) => {
                return self.reject(
                    s,
                    reply::internal(&format!("the request could not be rewritten: {e}")),
                )
            }
        };
        // Held headers get the new `:path` and header values from the request
        // hold filter after this one; direct ones are paused here (bodiless)
        // or need no edit (no alias in path or headers). The buffer filter
        // sets the body's new length.
        let mut edits = if path == s.path {
            Vec::new()
        } else {
            vec![HeaderEdit::Set(":path".into(), path)]
        };
        edits.extend(header_edits(&self.headers, changed));
        let old_len = body.as_deref().map_or(0, <[u8]>::len);
        match hand_on(
            Side::Request,
            headers,
            &Verdict::keep(edits),
            old_len,
            new_body.as_deref(),
        ) {
            Ok(()) => {}
            Err(HandOnError::Verdict(e)) => {
                return self.reject(
                    s,
                    reply::internal(&format!("the request path could not be rewritten: {e}")),
                )
            }
            Err(HandOnError::Header(_)) => {
                return self.reject(
                    s,
                    reply::internal("the request path could not be rewritten"),
                )
            }
            Err(HandOnError::Body(_)) => {
                return self.reject(
                    s,
                    reply::internal("the request body could not be rewritten"),
                )
            }
        }
        count(s.metrics.hms.aliases_decoded, decoded.len() as i64);
        log::info!(
            "keyhole.alias-decode context={} session={} aliases={}",
            s.context_id,
            s.session,
            decoded.len()
        );
        Action::Continue
    }

    /// Answers locally (the request goes no further) and counts it.
    fn reject(&mut self, s: &Stream, reply: LocalReply) -> Action {
        log::warn!(
            "keyhole.alias-reject context={} session={} status={}",
            s.context_id,
            s.session,
            reply.status
        );
        count(s.metrics.hms.refused(Refused::of_reply(reply.kind)), 1);
        // Refused, the request stays paused until Envoy times it out: nothing
        // reaches HMS either way.
        let _ = host::send_json(reply.status, &reply.body, &[]);
        self.state = State::Refused;
        Action::Pause
    }
}

/// The edits that give every header with a changed value its new values; a
/// repeated header is set to all its values again, so it stays repeated.
/// `changed` holds `(index into headers, new value)`.
fn header_edits(headers: &[(String, String)], changed: Vec<(usize, String)>) -> Vec<HeaderEdit> {
    let mut values: Vec<Option<String>> = vec![None; headers.len()];
    for (i, value) in changed {
        if let Some(slot) = values.get_mut(i) {
            *slot = Some(value);
        }
    }
    let mut edits = Vec::new();
    let mut done: Vec<&str> = Vec::new();
    for (name, _) in headers {
        let name = name.as_str();
        if done.contains(&name) {
            continue;
        }
        done.push(name);
        let same_name = || {
            headers
                .iter()
                .enumerate()
                .filter(move |(_, (n, _))| n == name)
        };
        if !same_name().any(|(j, _)| values.get(j).is_some_and(Option::is_some)) {
            continue;
        }
        let all = same_name()
            .map(|(j, (_, old))| {
                values
                    .get(j)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| old.clone())
            })
            .collect();
        edits.extend(HeaderEdit::set_all(name, all));
    }
    edits
}

/// The 400 for raw ids under `raw_ids: refuse`, naming the places (never a
/// value).
fn raw_ids_refused(raw: &RawIdCount) -> LocalReply {
    let places: Vec<String> = raw
        .places()
        .iter()
        .map(|(place, n)| format!("{n} in the {place}"))
        .collect();
    let message = format!(
        "keyhole refuses raw record ids in HMS requests ({}); send the aliases keyhole handed out (raw_ids: refuse)",
        places.join(", ")
    );
    reply::error(ErrorKind::InvalidRequest, &message)
}

/// The 404 for a sentinel alias (issued past the session's bound: it decodes
/// to nothing).
fn sentinel(alias: &str) -> LocalReply {
    let err = RequestError::Sentinel {
        alias: alias.to_owned(),
    };
    reply::error(ErrorKind::UnknownAlias, &err.to_string())
}
