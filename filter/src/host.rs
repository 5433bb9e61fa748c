//! Non-panicking host calls, as the filter uses them.
//!
//! Every failure is logged with the host's status and turned into a value; the
//! filter's decisions never depend on a host call succeeding except where the
//! caller checks the result.

use crate::abi;
use keyhole_core::config::Control;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, Status, StreamType};
use std::time::Duration;

/// A request header's value; absent, non-UTF-8 or unreadable values are `None`.
pub fn request_header(name: &str) -> Option<String> {
    header(MapType::HttpRequestHeaders, name)
}

/// A response header's value.
pub fn response_header(name: &str) -> Option<String> {
    header(MapType::HttpResponseHeaders, name)
}

/// A header of the control callout's response.
pub fn call_response_header(name: &str) -> Option<String> {
    header(MapType::HttpCallResponseHeaders, name)
}

fn header(map: MapType, name: &str) -> Option<String> {
    match abi::get_header(map, name) {
        Ok(Some(bytes)) => String::from_utf8(bytes).ok(),
        Ok(None) => None,
        Err(status) => {
            log::warn!("keyhole.host op=get_header map={map:?} header={name} status={}", status.0);
            None
        }
    }
}

/// Removes a request header (effective in the request-headers callback).
pub fn remove_request_header(name: &str) {
    if let Err(status) = abi::remove_header(MapType::HttpRequestHeaders, name) {
        log::warn!("keyhole.host op=remove_request_header header={name} status={}", status.0);
    }
}

/// Sets (or, with `None`, removes) a request header. Effective while the
/// request headers are still held by this filter: in the request-headers
/// callback, or later while that callback's `Pause` holds them. Returns false
/// when the host refused.
pub fn set_request_header(name: &str, value: Option<&str>) -> bool {
    let result = match value {
        Some(v) => abi::replace_header(MapType::HttpRequestHeaders, name, v),
        None => abi::remove_header(MapType::HttpRequestHeaders, name),
    };
    match result {
        Ok(()) => true,
        Err(status) => {
            log::warn!("keyhole.host op=set_request_header header={name} status={}", status.0);
            false
        }
    }
}

/// Every response header (pseudo-headers included); `None` when the host refuses.
pub fn response_headers() -> Option<Vec<(String, String)>> {
    match abi::get_header_pairs(MapType::HttpResponseHeaders) {
        Ok(pairs) => Some(pairs),
        Err(status) => {
            log::warn!("keyhole.host op=get_header_pairs map=response status={}", status.0);
            None
        }
    }
}

/// Sets (or, with `None`, removes) a response header. Returns false when the
/// host refused (e.g. the headers have already left).
pub fn set_response_header(name: &str, value: Option<&str>) -> bool {
    let result = match value {
        Some(v) => abi::replace_header(MapType::HttpResponseHeaders, name, v),
        None => abi::remove_header(MapType::HttpResponseHeaders, name),
    };
    match result {
        Ok(()) => true,
        Err(status) => {
            log::warn!("keyhole.host op=set_response_header header={name} status={}", status.0);
            false
        }
    }
}

/// Bytes `[0, size)` of a buffer; `None` when the host refuses.
pub fn buffer(kind: BufferType, size: usize) -> Option<Vec<u8>> {
    match abi::get_buffer(kind, 0, size) {
        Ok(bytes) => Some(bytes),
        Err(status) => {
            log::warn!("keyhole.host op=get_buffer kind={kind:?} status={}", status.0);
            None
        }
    }
}

/// Replaces bytes `[0, old_size)` of a buffer with `value`.
pub fn replace_buffer(kind: BufferType, old_size: usize, value: &[u8]) -> Result<(), abi::HostStatus> {
    abi::set_buffer(kind, 0, old_size, value)
}

/// Answers the client locally with a JSON body; the request goes no further.
pub fn send_json(status: u16, body: &[u8], extra: &[(&str, &str)]) {
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(extra);
    if let Err(e) = abi::send_local_response(u32::from(status), &headers, body) {
        log::error!("keyhole.host op=send_local_response status={}", e.0);
    }
}

/// Resumes a paused request.
pub fn resume_request() {
    if let Err(status) = abi::continue_stream(StreamType::HttpRequest) {
        log::error!("keyhole.host op=resume_request status={}", status.0);
    }
}

/// Resumes a paused response.
pub fn resume_response() {
    if let Err(status) = abi::continue_stream(StreamType::HttpResponse) {
        log::error!("keyhole.host op=resume_response status={}", status.0);
    }
}

/// Dispatches a POST with a JSON body to control and returns the call token.
///
/// Envoy may answer a call to a dead cluster synchronously, running
/// `on_http_call_response` inside this call. `dispatching` is true for exactly
/// that span, so the response callback knows not to resume a stream that the
/// calling callback is still deciding about (its return value does that).
pub fn dispatch_to_control(
    control: &Control,
    path: &str,
    body: &[u8],
    dispatching: &mut bool,
) -> Result<u32, Status> {
    let headers = vec![
        (":method", "POST"),
        (":path", path),
        (":authority", control.authority.as_str()),
        ("content-type", "application/json"),
    ];
    *dispatching = true;
    let result = hostcalls::dispatch_http_call(
        &control.cluster,
        headers,
        Some(body),
        vec![],
        Duration::from_millis(control.timeout_ms),
    );
    *dispatching = false;
    result
}

/// Adds `offset` to a counter; failures are ignored (metrics never decide).
pub fn count(metric: Option<u32>, offset: i64) {
    if let Some(id) = metric {
        let _ = abi::increment_metric(id, offset);
    }
}
