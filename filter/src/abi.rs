//! Direct bindings to the proxy-wasm ABI: every host call the filter makes,
//! each returning the host's status instead of panicking.
//!
//! The SDK's `hostcalls` turn any status they do not expect into a `panic!`
//! (seen here: Envoy answers `BadArgument` to a response-header write from a
//! body callback), and a panic kills the worker's VM, after which every request
//! on that worker is refused. Here every refusal is a [`HostStatus`] the filter
//! decides on.
//!
//! Log lines go through [`log`] too ([`crate::logger`]): the SDK's logger
//! unwraps the status of every line.
//!
//! One call still goes through the SDK: [`dispatch_http_call`]. The SDK's
//! exported `proxy_on_http_call_response` routes an answer to its context by
//! looking the token up in a table that only the SDK's own dispatch wrapper
//! fills (`register_callout` is private to the SDK), and it `expect`s to find
//! it: a call dispatched through `proxy_http_call` directly would panic the
//! VM on its answer. The wrapper panics only on a status other than `Ok`,
//! `BadArgument` and `InternalFailure`, and Envoy's `httpCall` returns no
//! other (a missing cluster is `BadArgument`, a failed dispatch
//! `InternalFailure`), so that panic arm is unreachable on Envoy.
#![allow(unsafe_code)]

use proxy_wasm::types::{BufferType, LogLevel, MapType, MetricType, Status, StreamType};
use std::ptr::{null, null_mut};
use std::time::Duration;

/// A host status that is not `Ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostStatus(pub u32);

const OK: u32 = 0;
const NOT_FOUND: u32 = 1;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_log(level: LogLevel, message_data: *const u8, message_size: usize) -> u32;
    fn proxy_get_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_add_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(
        map_type: MapType,
        key_data: *const u8,
        key_size: usize,
    ) -> u32;
    fn proxy_get_header_map_pairs(
        map_type: MapType,
        return_map_data: *mut *mut u8,
        return_map_size: *mut usize,
    ) -> u32;
    fn proxy_get_buffer_bytes(
        buffer_type: BufferType,
        start: usize,
        max_size: usize,
        return_buffer_data: *mut *mut u8,
        return_buffer_size: *mut usize,
    ) -> u32;
    fn proxy_set_buffer_bytes(
        buffer_type: BufferType,
        start: usize,
        size: usize,
        buffer_data: *const u8,
        buffer_size: usize,
    ) -> u32;
    fn proxy_send_local_response(
        status_code: u32,
        status_code_details_data: *const u8,
        status_code_details_size: usize,
        body_data: *const u8,
        body_size: usize,
        headers_data: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
    fn proxy_continue_stream(stream_type: StreamType) -> u32;
    fn proxy_define_metric(
        metric_type: MetricType,
        name_data: *const u8,
        name_size: usize,
        return_id: *mut u32,
    ) -> u32;
    fn proxy_increment_metric(metric_id: u32, offset: i64) -> u32;
}

/// Takes ownership of bytes the host allocated through the SDK's exported
/// allocator (`proxy_on_memory_allocate`), as the SDK itself does.
fn owned(data: *mut u8, size: usize) -> Vec<u8> {
    if data.is_null() {
        return Vec::new();
    }
    // SAFETY: the host wrote `size` bytes into a buffer of exactly `size`
    // bytes that it obtained from this module's allocator.
    unsafe { Vec::from_raw_parts(data, size, size) }
}

fn check(status: u32) -> Result<(), HostStatus> {
    if status == OK {
        Ok(())
    } else {
        Err(HostStatus(status))
    }
}

/// Writes one line to Envoy's log.
pub fn log(level: LogLevel, message: &str) -> Result<(), HostStatus> {
    // SAFETY: the pointer and length describe `message`, which outlives the call.
    check(unsafe { proxy_log(level, message.as_ptr(), message.len()) })
}

/// A header's raw value; `Ok(None)` when absent.
pub fn get_header(map: MapType, key: &str) -> Result<Option<Vec<u8>>, HostStatus> {
    let mut data: *mut u8 = null_mut();
    let mut size: usize = 0;
    // SAFETY: pointers are valid for the call; the host fills `data`/`size`.
    let status =
        unsafe { proxy_get_header_map_value(map, key.as_ptr(), key.len(), &mut data, &mut size) };
    match status {
        OK => Ok(Some(owned(data, size))),
        NOT_FOUND => Ok(None),
        other => Err(HostStatus(other)),
    }
}

/// Every header of a map, in order; names and values that are not UTF-8 are
/// read lossily.
pub fn get_header_pairs(map: MapType) -> Result<Vec<(String, String)>, HostStatus> {
    Ok(get_header_pairs_raw(map)?
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
        .collect())
}

/// Every header of a map, in order, values as the host holds them (a
/// Latin-1 byte stays that byte); names read lossily (they are tokens).
pub fn get_header_pairs_raw(map: MapType) -> Result<Vec<(String, Vec<u8>)>, HostStatus> {
    let mut data: *mut u8 = null_mut();
    let mut size: usize = 0;
    // SAFETY: pointers are valid for the call; the host fills `data`/`size`.
    let status = unsafe { proxy_get_header_map_pairs(map, &mut data, &mut size) };
    match status {
        OK => Ok(deserialize_map(&owned(data, size))),
        NOT_FOUND => Ok(Vec::new()),
        other => Err(HostStatus(other)),
    }
}

/// Replaces a header (adds it when absent).
pub fn replace_header(map: MapType, key: &str, value: &[u8]) -> Result<(), HostStatus> {
    // SAFETY: pointers are valid for the call.
    check(unsafe {
        proxy_replace_header_map_value(map, key.as_ptr(), key.len(), value.as_ptr(), value.len())
    })
}

/// Adds a value to a header (after the values it has).
pub fn add_header(map: MapType, key: &str, value: &[u8]) -> Result<(), HostStatus> {
    // SAFETY: pointers are valid for the call.
    check(unsafe {
        proxy_add_header_map_value(map, key.as_ptr(), key.len(), value.as_ptr(), value.len())
    })
}

/// Removes a header.
pub fn remove_header(map: MapType, key: &str) -> Result<(), HostStatus> {
    // SAFETY: pointers are valid for the call.
    check(unsafe { proxy_remove_header_map_value(map, key.as_ptr(), key.len()) })
}

/// Bytes `[start, start + max)` of a buffer; empty when there is none.
pub fn get_buffer(kind: BufferType, start: usize, max: usize) -> Result<Vec<u8>, HostStatus> {
    let mut data: *mut u8 = null_mut();
    let mut size: usize = 0;
    // SAFETY: pointers are valid for the call; the host fills `data`/`size`.
    let status = unsafe { proxy_get_buffer_bytes(kind, start, max, &mut data, &mut size) };
    match status {
        OK => Ok(owned(data, size)),
        NOT_FOUND => Ok(Vec::new()),
        other => Err(HostStatus(other)),
    }
}

/// Replaces bytes `[start, start + size)` of a buffer with `value`.
pub fn set_buffer(
    kind: BufferType,
    start: usize,
    size: usize,
    value: &[u8],
) -> Result<(), HostStatus> {
    // SAFETY: pointers are valid for the call.
    check(unsafe { proxy_set_buffer_bytes(kind, start, size, value.as_ptr(), value.len()) })
}

/// Sends a local response with `headers` and `body`.
pub fn send_local_response(
    status: u32,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(), HostStatus> {
    let map = serialize_map(headers);
    // SAFETY: pointers are valid for the call.
    check(unsafe {
        proxy_send_local_response(
            status,
            null(),
            0,
            body.as_ptr(),
            body.len(),
            map.as_ptr(),
            map.len(),
            -1,
        )
    })
}

/// Resumes a paused request or response.
pub fn continue_stream(stream: StreamType) -> Result<(), HostStatus> {
    // SAFETY: no pointers.
    check(unsafe { proxy_continue_stream(stream) })
}

/// Defines a metric; returns its id.
pub fn define_metric(kind: MetricType, name: &str) -> Result<u32, HostStatus> {
    let mut id: u32 = 0;
    // SAFETY: pointers are valid for the call; the host writes `id`.
    check(unsafe { proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) }).map(|()| id)
}

/// Adds `offset` to a metric.
pub fn increment_metric(id: u32, offset: i64) -> Result<(), HostStatus> {
    // SAFETY: no pointers.
    check(unsafe { proxy_increment_metric(id, offset) })
}

/// Dispatches an HTTP call to `cluster` and returns its token; the answer
/// arrives in `on_http_call_response` (see the module docs for why this is
/// the SDK's wrapper).
pub fn dispatch_http_call(
    cluster: &str,
    headers: Vec<(&str, &str)>,
    body: &[u8],
    timeout: Duration,
) -> Result<u32, HostStatus> {
    proxy_wasm::hostcalls::dispatch_http_call(cluster, headers, Some(body), Vec::new(), timeout)
        .map_err(|status: Status| HostStatus(status as u32))
}

/// The ABI's header-map encoding: pair count, then each key and value length
/// (u32 LE), then each key and value followed by a NUL.
fn serialize_map(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Reads the ABI's header-map encoding (see [`serialize_map`]); a truncated
/// map yields the pairs read before the damage. All offsets are checked: no
/// length the host writes can make this panic or wrap.
fn deserialize_map(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let slice = |at: usize, len: usize| bytes.get(at..at.checked_add(len)?);
    let u32_at = |at: usize| -> Option<usize> {
        let b: [u8; 4] = slice(at, 4)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(b)).ok()
    };
    let Some(count) = u32_at(0) else {
        return Vec::new();
    };
    let mut pairs = Vec::with_capacity(count.min(256));
    let Some(mut at) = count.checked_mul(8).and_then(|sizes| sizes.checked_add(4)) else {
        return pairs;
    };
    for n in 0..count {
        // In bounds: `4 + count * 8` did not overflow.
        let sizes = 4 + n * 8;
        let (Some(key_len), Some(value_len)) = (u32_at(sizes), u32_at(sizes + 4)) else {
            break;
        };
        let Some(key) = slice(at, key_len) else {
            break;
        };
        let Some(value) = at
            .checked_add(key_len + 1)
            .and_then(|start| slice(start, value_len))
        else {
            break;
        };
        at += key_len + 1 + value_len + 1;
        pairs.push((String::from_utf8_lossy(key).into_owned(), value.to_vec()));
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_maps_round_trip_and_truncation_is_safe() {
        let bytes = serialize_map(&[("location", "/a/b"), (":status", "201")]);
        assert_eq!(
            deserialize_map(&bytes),
            vec![
                ("location".to_owned(), b"/a/b".to_vec()),
                (":status".to_owned(), b"201".to_vec())
            ]
        );
        assert_eq!(
            deserialize_map(bytes.get(..bytes.len() - 6).unwrap()).len(),
            1
        );
        assert!(deserialize_map(&[]).is_empty());
    }

    #[test]
    fn hostile_lengths_end_the_map() {
        let mut bytes = serialize_map(&[("a", "b")]);
        assert!(deserialize_map(&[0xff, 0xff, 0xff, 0xff]).is_empty());
        bytes.splice(4..8, u32::MAX.to_le_bytes());
        assert!(deserialize_map(&bytes).is_empty());
        bytes.splice(4..8, 1u32.to_le_bytes());
        bytes.splice(8..12, u32::MAX.to_le_bytes());
        assert!(deserialize_map(&bytes).is_empty());
    }

    #[test]
    fn header_maps_use_the_abi_layout() {
        let bytes = serialize_map(&[("a", "bc")]);
        assert_eq!(
            bytes,
            [1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, b'a', 0, b'b', b'c', 0]
        );
    }
}
