//! Host calls as the filter uses them: each returns a `Result`, and a refusal
//! is logged here once (`keyhole.host op=… status=…`) and handed to the caller,
//! which decides what it means (failing closed wherever a decision depends on
//! the call). Every call goes through [`crate::abi`].

use crate::abi::{self, HostStatus};
use proxy_wasm::types::{BufferType, MapType, StreamType};
use std::time::Duration;

/// A host call that Envoy refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the host refused {op} (status {status})")]
pub struct HostError {
    /// The call, as logged (`get_header`, `set_buffer`, …).
    pub op: &'static str,
    /// The host's status.
    pub status: u32,
}

/// Logs a refusal of `op` on `target` and turns it into a [`HostError`].
fn refused(op: &'static str, target: impl std::fmt::Debug, status: HostStatus) -> HostError {
    log::warn!("keyhole.host op={op} target={target:?} status={}", status.0);
    HostError {
        op,
        status: status.0,
    }
}

/// A request header's value; `Ok(None)` when absent or not UTF-8.
pub fn request_header(name: &str) -> Result<Option<String>, HostError> {
    header(MapType::HttpRequestHeaders, name)
}

/// A response header's value; `Ok(None)` when absent or not UTF-8.
pub fn response_header(name: &str) -> Result<Option<String>, HostError> {
    header(MapType::HttpResponseHeaders, name)
}

/// A header of a callout's answer; `Ok(None)` when absent or not UTF-8.
pub fn call_response_header(name: &str) -> Result<Option<String>, HostError> {
    header(MapType::HttpCallResponseHeaders, name)
}

fn header(map: MapType, name: &str) -> Result<Option<String>, HostError> {
    match abi::get_header(map, name) {
        Ok(value) => Ok(value.and_then(|bytes| String::from_utf8(bytes).ok())),
        Err(status) => Err(refused("get_header", (map, name), status)),
    }
}

/// Sets (or, with `None`, removes) a request header. Effective while the
/// request headers are still held by this filter: in the request-headers
/// callback, or later while that callback's `Pause` holds them.
pub fn set_request_header(name: &str, value: Option<&str>) -> Result<(), HostError> {
    set_header(MapType::HttpRequestHeaders, name, value)
}

/// Sets (or, with `None`, removes) a response header. Refused once the
/// headers have left this filter (e.g. from a body callback).
pub fn set_response_header(name: &str, value: Option<&str>) -> Result<(), HostError> {
    set_header(MapType::HttpResponseHeaders, name, value)
}

/// Sets (or, with `None`, removes) a header of `map`: every value it had is
/// replaced. See [`set_request_header`] and [`set_response_header`] for when
/// the host takes it.
pub fn set_header(map: MapType, name: &str, value: Option<&str>) -> Result<(), HostError> {
    set_header_bytes(map, name, value.map(str::as_bytes))
}

/// [`set_header`] with a value as bytes (not UTF-8, say Latin-1).
pub fn set_header_bytes(map: MapType, name: &str, value: Option<&[u8]>) -> Result<(), HostError> {
    let result = match value {
        Some(v) => abi::replace_header(map, name, v),
        None => abi::remove_header(map, name),
    };
    result.map_err(|status| refused("set_header", (map, name), status))
}

/// Adds one more value to a header of `map`, after the values it has (a
/// repeated header). Taken when [`set_header`] would be.
pub fn add_header(map: MapType, name: &str, value: &str) -> Result<(), HostError> {
    add_header_bytes(map, name, value.as_bytes())
}

/// [`add_header`] with a value as bytes.
pub fn add_header_bytes(map: MapType, name: &str, value: &[u8]) -> Result<(), HostError> {
    abi::add_header(map, name, value).map_err(|status| refused("add_header", (map, name), status))
}

/// Every request header (pseudo-headers included), in order.
pub fn request_headers() -> Result<Vec<(String, String)>, HostError> {
    abi::get_header_pairs(MapType::HttpRequestHeaders)
        .map_err(|status| refused("get_header_pairs", MapType::HttpRequestHeaders, status))
}

/// Every response header (pseudo-headers included), in order, values as
/// bytes.
pub fn response_headers_raw() -> Result<Vec<(String, Vec<u8>)>, HostError> {
    abi::get_header_pairs_raw(MapType::HttpResponseHeaders)
        .map_err(|status| refused("get_header_pairs", MapType::HttpResponseHeaders, status))
}

/// Every response header (pseudo-headers included), in order.
pub fn response_headers() -> Result<Vec<(String, String)>, HostError> {
    abi::get_header_pairs(MapType::HttpResponseHeaders)
        .map_err(|status| refused("get_header_pairs", MapType::HttpResponseHeaders, status))
}

/// Bytes `[0, size)` of a buffer; empty when there is none.
pub fn buffer(kind: BufferType, size: usize) -> Result<Vec<u8>, HostError> {
    abi::get_buffer(kind, 0, size).map_err(|status| refused("get_buffer", kind, status))
}

/// Replaces bytes `[0, old_size)` of a buffer with `value`.
pub fn replace_buffer(kind: BufferType, old_size: usize, value: &[u8]) -> Result<(), HostError> {
    abi::set_buffer(kind, 0, old_size, value).map_err(|status| refused("set_buffer", kind, status))
}

/// Answers the client locally with a JSON body; the stream goes no further.
pub fn send_json(status: u16, body: &[u8], extra: &[(&str, &str)]) -> Result<(), HostError> {
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(extra);
    abi::send_local_response(u32::from(status), &headers, body)
        .map_err(|e| refused("send_local_response", status, e))
}

/// Resumes a paused request or response.
pub fn resume(stream: StreamType) -> Result<(), HostError> {
    abi::continue_stream(stream).map_err(|status| refused("continue_stream", stream, status))
}

/// Dispatches an HTTP call to `cluster` and returns its token.
pub fn dispatch(
    cluster: &str,
    headers: Vec<(&str, &str)>,
    body: &[u8],
    timeout: Duration,
) -> Result<u32, HostError> {
    abi::dispatch_http_call(cluster, headers, body, timeout)
        .map_err(|status| refused("dispatch_http_call", cluster, status))
}
