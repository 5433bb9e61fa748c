//! The id-alias stream context on the HMS listener: the model never sees a raw
//! id. The context holds what both directions share and hands each callback to
//! its half:
//!
//! - [`request`]: aliases in the path, the query, the headers (all but a
//!   short safe list: credentials, trace ids, the session header) and the body
//!   are decoded by control (`POST /v1/alias/decode`) and replaced with the
//!   real ids in the form each place expects. An alias this session did not
//!   issue (or a sentinel) is answered locally with a 404 naming it; nothing
//!   reaches HMS. Raw-id-shaped values are counted and, by default
//!   (`raw_ids: refuse`), refused with a 400 naming their places.
//! - [`response`]: every raw id in the body (JSON or text) and in every header
//!   but a safe few (`content-length`, `server`,
//!   `x-envoy-upstream-service-time`, the hold header: see
//!   `keyhole_core::proto::withhold::UNSCANNED_RESPONSE_HEADERS`; `content-type` and `date` are scanned) is replaced
//!   by its alias (encoded by control at `POST /v1/alias/encode`, persisted
//!   before control answers). A repeated header (`Link` twice) stays repeated:
//!   it is set to all its values again (`HeaderEdit::set_all`). An id that
//!   cannot be aliased (control down, store down, conflicting members, a body
//!   that is not what it claims) replaces the response with a 502 JSON error:
//!   a raw id is never passed on.
//!
//! A request without the session header fails closed (400).
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
//!   then the callback's return value, not a resume, moves the stream on
//!   ([`crate::callout`]).
//! - A local reply while the response headers are held (or paused) reaches
//!   the client in place of the upstream response.

mod request;
mod response;

use crate::hold::{self, HeaderEdit, Verdict, VerdictError};
use crate::host::{self, HostError};
use crate::metrics::Metrics;
use keyhole_core::alias::{BodyKind, Taxonomy};
use keyhole_core::config::{Enforce, HmsConfig};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use request::Request;
use response::Response;
use std::rc::Rc;

/// The taxonomy of the listener's configuration (the file control loads
/// too; control refuses alias requests that name another one).
fn taxonomy(config: &HmsConfig) -> &'static Taxonomy {
    crate::taxonomy::leaked(&config.taxonomy)
}

/// One HMS stream.
pub struct HmsStream {
    stream: Stream,
    request: Request,
    response: Response,
}

/// What both halves of a stream read: set up by the request half.
struct Stream {
    /// The host's id of this stream (in logs).
    context_id: u32,
    config: Rc<HmsConfig>,
    metrics: Metrics,
    /// The session header's value (set once the request headers are read).
    session: String,
    /// The request's `:path` as the client sent it.
    path: String,
}

impl HmsStream {
    /// A stream context sharing the worker's configuration.
    pub fn new(context_id: u32, config: Rc<HmsConfig>, metrics: Metrics) -> Self {
        HmsStream {
            stream: Stream {
                context_id,
                config,
                metrics,
                session: String::new(),
                path: String::new(),
            },
            request: Request::default(),
            response: Response::default(),
        }
    }
}

/// A body's kind by its `content-type` (core checks it against the bytes).
fn body_kind(content_type: Option<&str>) -> BodyKind {
    BodyKind::from_content_type(content_type)
}

/// Which half a rewrite is for.
#[derive(Debug, Clone, Copy)]
enum Side {
    Request,
    Response,
}

/// How a message's headers take their edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Headers {
    /// They went on to a hold filter, which applies the verdict line put ahead
    /// of the body.
    Held,
    /// Edited here: they are paused in this filter (a bodiless message), or
    /// need no edit (a request whose path holds no alias).
    Direct,
}

/// Why a rewrite could not be handed on.
#[derive(Debug, thiserror::Error)]
enum HandOnError {
    /// The edits do not fit a verdict line.
    #[error("the verdict could not be written: {0}")]
    Verdict(#[source] VerdictError),
    /// The host refused a header edit.
    #[error("a header could not be rewritten: {0}")]
    Header(#[source] HostError),
    /// The host refused the body replacement.
    #[error("the body could not be rewritten: {0}")]
    Body(#[source] HostError),
}

/// Hands a rewrite on: `verdict.edits` for the headers, and `body` in place of
/// the first `old_len` bytes of the buffered body (`None`: no new body).
///
/// With [`Headers::Held`] the edits travel in a verdict line ahead of the body
/// (an empty one when `body` is `None`), and the verdict's status with them.
/// With [`Headers::Direct`] every edit is made here (all are tried; the first
/// refusal is returned) and the status is the caller's to act on.
fn hand_on(
    side: Side,
    headers: Headers,
    verdict: &Verdict,
    old_len: usize,
    body: Option<&[u8]>,
) -> Result<(), HandOnError> {
    let buffer = match side {
        Side::Request => BufferType::HttpRequestBody,
        Side::Response => BufferType::HttpResponseBody,
    };
    if headers == Headers::Held {
        let framed = verdict
            .frame(body.unwrap_or_default())
            .map_err(HandOnError::Verdict)?;
        return host::replace_buffer(buffer, old_len, &framed).map_err(HandOnError::Body);
    }
    let map = match side {
        Side::Request => MapType::HttpRequestHeaders,
        Side::Response => MapType::HttpResponseHeaders,
    };
    let mut refused = Ok(());
    for edit in &verdict.edits {
        let done = match edit {
            HeaderEdit::Set(name, value) => host::set_header(map, name, Some(value)),
            HeaderEdit::Remove(name) => host::set_header(map, name, None),
            HeaderEdit::Add(name, value) => host::add_header(map, name, value),
            HeaderEdit::SetBytes(name, value) => host::set_header_bytes(map, name, Some(value)),
            HeaderEdit::AddBytes(name, value) => host::add_header_bytes(map, name, value),
        };
        if let Err(e) = done {
            // The first refusal is the one reported.
            refused = refused.and(Err(HandOnError::Header(e)));
        }
    }
    refused?;
    match body {
        Some(body) => host::replace_buffer(buffer, old_len, body).map_err(HandOnError::Body),
        None => Ok(()),
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
        // Each half claims only the answer to its own callout.
        self.request
            .on_call_response(&self.stream, token_id, body_size);
        self.response
            .on_call_response(&self.stream, token_id, body_size);
    }
}

impl HmsStream {
    /// `enforce: shadow`: nothing is decoded, refused or rewritten; the
    /// response is only scanned and counted ([`Response::on_body`]).
    fn shadow(&self) -> bool {
        self.stream.config.enforce == Enforce::Shadow
    }
}

impl HttpContext for HmsStream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        if self.shadow() {
            // The path names the response's primary kind; nothing else is read.
            if let Ok(Some(path)) = host::request_header(":path") {
                self.stream.path = path;
            }
            let _ = host::set_request_header(hold::HOLD_HEADER, None);
            return Action::Continue;
        }
        self.request.on_headers(&mut self.stream, end_of_stream)
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if self.shadow() {
            return Action::Continue;
        }
        self.request.on_body(&self.stream, body_size, end_of_stream)
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        if self.shadow() {
            return Action::Continue;
        }
        self.request.on_trailers(&self.stream)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        // Only keyhole sets the hold header; an upstream must not forge it.
        // (Envoy does not refuse header writes in this callback; a refusal is
        // logged.)
        let _ = host::set_response_header(hold::HOLD_HEADER, None);
        // Every response but keyhole's own answers is aliased, including the
        // ones Envoy makes up (an upstream that cannot be reached).
        if self.request.answered_locally() {
            return Action::Continue;
        }
        self.response.on_headers(&self.stream, end_of_stream)
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.response
            .on_body(&self.stream, body_size, end_of_stream)
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        self.response.on_trailers(&self.stream)
    }
}
