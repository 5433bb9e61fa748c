//! Undoing a body's `Content-Encoding`: gzip, deflate, brotli and zstd.
//!
//! An HMS response that arrives compressed is decoded here before it is
//! scanned, so keyhole reads what the client would read; the filter then sends
//! it on decoded (without `content-encoding`). Every decoder is pure Rust and
//! builds for the filter's wasm target. The output is bounded: a body that
//! inflates past the caller's limit is refused, never decoded further (a small
//! compressed body can expand a thousandfold).
//!
//! Envoy's own decompressor filter cannot sit in front of keyhole: it ends a
//! body it decompressed with trailers of its own, and Envoy never delivers
//! trailers added that way to a later filter that buffers the body, so the
//! response stalls until the stream times out.

use std::io::Read;

/// One content coding, as named in `Content-Encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// `gzip` (or `x-gzip`): one or more gzip members.
    Gzip,
    /// `deflate`: zlib-wrapped deflate (RFC 9110). Raw deflate, which some old
    /// servers send instead, is refused: without the wrapper's checksum,
    /// arbitrary bytes "decode" to garbage.
    Deflate,
    /// `br`: brotli.
    Brotli,
    /// `zstd`: Zstandard.
    Zstd,
}

impl Coding {
    /// The coding's name in `Content-Encoding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }
}

/// Why a body cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodingError {
    /// A coding keyhole has no decoder for (`compress`, or an unknown name).
    #[error("content-encoding {0:?} is not one keyhole decodes (gzip, deflate, br, zstd)")]
    Unsupported(String),
    /// The bytes are not what the coding says.
    #[error("the body is not valid {0} data")]
    Corrupt(&'static str),
    /// The decoded body would be larger than the limit.
    #[error("the decoded body is larger than {limit} bytes")]
    TooLarge {
        /// The limit passed to [`decode`].
        limit: usize,
    },
}

/// The codings of a `Content-Encoding` value, in the order they were applied
/// (`identity` entries dropped; an empty list means the body is as it is).
pub fn parse(value: &str) -> Result<Vec<Coding>, CodingError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty() && !name.eq_ignore_ascii_case("identity"))
        .map(|name| match name.to_ascii_lowercase().as_str() {
            "gzip" | "x-gzip" => Ok(Coding::Gzip),
            "deflate" => Ok(Coding::Deflate),
            "br" => Ok(Coding::Brotli),
            "zstd" => Ok(Coding::Zstd),
            _ => Err(CodingError::Unsupported(name.to_owned())),
        })
        .collect()
}

/// `body` with `codings` undone (the last applied is undone first), at most
/// `limit` bytes after each step.
pub fn decode(body: &[u8], codings: &[Coding], limit: usize) -> Result<Vec<u8>, CodingError> {
    let mut out = body.to_vec();
    for coding in codings.iter().rev() {
        out = decode_one(&out, *coding, limit)?;
    }
    Ok(out)
}

fn decode_one(body: &[u8], coding: Coding, limit: usize) -> Result<Vec<u8>, CodingError> {
    let corrupt = |_| CodingError::Corrupt(coding.as_str());
    match coding {
        Coding::Gzip => bounded(flate2::read::MultiGzDecoder::new(body), limit, coding),
        Coding::Deflate => bounded(flate2::read::ZlibDecoder::new(body), limit, coding),
        Coding::Brotli => bounded(
            brotli_decompressor::Decompressor::new(body, 16 * 1024),
            limit,
            coding,
        ),
        Coding::Zstd => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(body).map_err(corrupt)?;
            bounded(decoder, limit, coding)
        }
    }
}

/// Reads `reader` to its end, refusing more than `limit` bytes.
fn bounded(reader: impl Read, limit: usize, coding: Coding) -> Result<Vec<u8>, CodingError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|_| CodingError::Corrupt(coding.as_str()))?;
    if out.len() > limit {
        return Err(CodingError::TooLarge { limit });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
