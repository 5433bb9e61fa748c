//! What of a request body keyhole reads before it lets the body go to HMS.
//!
//! [`super::RequestScan`] finds aliases and raw ids in the bytes as sent. Some
//! bodies hold text those bytes do not show: a body under a
//! `content-encoding` (gzip: the bytes are compressed), a text in a charset
//! that is not ASCII-compatible (UTF-16: every ASCII letter is followed by a
//! NUL, so no token is ever whole), and multipart parts under a
//! `content-transfer-encoding` (base64, quoted-printable). [`view`] decodes
//! each such text so that it is scanned too ([`BodyView::hidden`]); a body
//! keyhole cannot decode is an error, and the filter refuses it (415): it is
//! never forwarded unread. keyhole does not encode a body again, so a hidden
//! text that holds an alias cannot be rewritten: that request is refused as
//! well (the client can send the body plain).

use crate::alias::charset;
use crate::alias::coding::{self, CodingError};

/// How to read a request body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BodyView {
    /// Whether the bytes as sent are the text (no content coding, an
    /// ASCII-compatible charset): they are scanned and rewritten as they are.
    pub as_is: bool,
    /// Texts keyhole decoded itself (the decoded body, UTF-16 read as text,
    /// each multipart part under a transfer encoding): scanned, never
    /// rewritten.
    pub hidden: Vec<String>,
}

/// Why a request body cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The content coding is unknown, corrupt, or decodes past the limit.
    #[error("request body: {0}")]
    Coding(#[from] CodingError),
    /// A charset keyhole cannot read.
    #[error("request body: charset {0:?} is not one keyhole reads (UTF-8, UTF-16, or an ASCII-compatible charset)")]
    Charset(String),
    /// A multipart body without a boundary, or a part keyhole cannot decode.
    #[error("request body: multipart part {part}: {problem}")]
    Part {
        /// The part's index (0 for the body itself).
        part: usize,
        /// What is wrong.
        problem: &'static str,
    },
}

/// How deep multipart bodies may nest (a part that is itself multipart is
/// one level): deeper is refused, so a crafted body cannot exhaust the
/// filter's stack.
const MAX_DEPTH: usize = 4;

/// Charsets whose bytes hold every ASCII character as itself, one byte each:
/// an alias or a raw id (ASCII) in such a body is found in the bytes as sent.
fn ascii_compatible(charset: &str) -> bool {
    charset == "utf-8"
        || charset == "utf8"
        || charset::is_windows_1252(charset)
        || charset.starts_with("iso-8859-")
        || charset.starts_with("iso8859-")
        || charset.starts_with("windows-125")
}

/// How to read `body`, sent with `content_type` and `content_encoding`
/// (either absent); at most `limit` bytes are decoded.
///
/// Fails with [`BodyError`] for a coding, charset or multipart part keyhole
/// cannot decode.
pub fn view(
    content_type: Option<&str>,
    content_encoding: Option<&str>,
    body: &[u8],
    limit: usize,
) -> Result<BodyView, BodyError> {
    let codings = match content_encoding {
        Some(value) => coding::parse(value)?,
        None => Vec::new(),
    };
    if codings.is_empty() {
        return text_view(content_type, body, limit, 0);
    }
    let decoded = coding::decode(body, &codings, limit)?;
    let inner = text_view(content_type, &decoded, limit, 0)?;
    let mut hidden = inner.hidden;
    if inner.as_is {
        hidden.insert(0, String::from_utf8_lossy(&decoded).into_owned());
    }
    Ok(BodyView {
        as_is: false,
        hidden,
    })
}

/// [`view`] of bytes under no content coding.
fn text_view(
    content_type: Option<&str>,
    body: &[u8],
    limit: usize,
    depth: usize,
) -> Result<BodyView, BodyError> {
    let charset = content_type.and_then(charset::declared);
    let utf16 = match charset.as_deref() {
        Some(c) if c.starts_with("utf-16") || c == "utf16" => Some(c.ends_with("be")),
        Some(c) if c.starts_with("utf-32") || c.starts_with("ucs-") => {
            return Err(BodyError::Charset(c.to_owned()));
        }
        Some(c) if !ascii_compatible(c) => return Err(BodyError::Charset(c.to_owned())),
        // A UTF-16 byte order mark says so without a charset.
        _ if body.starts_with(&[0xff, 0xfe]) => Some(false),
        _ if body.starts_with(&[0xfe, 0xff]) => Some(true),
        _ => None,
    };
    if let Some(big_endian) = utf16 {
        return Ok(BodyView {
            as_is: false,
            hidden: vec![utf16_text(body, big_endian)],
        });
    }
    let multipart = content_type.is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|m| m.trim().to_ascii_lowercase().starts_with("multipart/"))
    });
    let hidden = if multipart {
        multipart_hidden(content_type.unwrap_or(""), body, limit, depth)?
    } else {
        Vec::new()
    };
    Ok(BodyView {
        as_is: true,
        hidden,
    })
}

/// UTF-16 text (a byte order mark, if any, decides the byte order), lossily.
fn utf16_text(body: &[u8], mut big_endian: bool) -> String {
    let mut bytes = body;
    if let Some(rest) = body.strip_prefix(&[0xff, 0xfe]) {
        (bytes, big_endian) = (rest, false);
    } else if let Some(rest) = body.strip_prefix(&[0xfe, 0xff]) {
        (bytes, big_endian) = (rest, true);
    }
    let units = bytes.chunks_exact(2).map(|pair| match pair {
        [a, b] if big_endian => u16::from_be_bytes([*a, *b]),
        [a, b] => u16::from_le_bytes([*a, *b]),
        _ => 0xfffd,
    });
    char::decode_utf16(units)
        .map(|c| c.unwrap_or('\u{fffd}'))
        .collect()
}

/// The parameter `name` of a header value (`boundary` of `multipart/…`),
/// unquoted.
fn parameter<'v>(value: &'v str, name: &str) -> Option<&'v str> {
    value.split(';').skip(1).find_map(|param| {
        let (n, v) = param.split_once('=')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().trim_matches('"'))
    })
}

/// The decoded text of every part under a transfer encoding (base64,
/// quoted-printable), and of nested multipart bodies' such parts. Parts in
/// `7bit`, `8bit` or `binary` are in the bytes as sent.
fn multipart_hidden(
    content_type: &str,
    body: &[u8],
    limit: usize,
    depth: usize,
) -> Result<Vec<String>, BodyError> {
    if depth >= MAX_DEPTH {
        return Err(BodyError::Part {
            part: 0,
            problem: "multipart bodies nested too deep",
        });
    }
    let boundary = parameter(content_type, "boundary")
        .filter(|b| !b.is_empty())
        .ok_or(BodyError::Part {
            part: 0,
            problem: "a multipart body without a boundary",
        })?;
    let delimiter = format!("--{boundary}");
    let mut hidden = Vec::new();
    for (index, part) in split_parts(body, delimiter.as_bytes()).enumerate() {
        let part_no = index + 1;
        let (head, content) = split_head(part);
        let head = String::from_utf8_lossy(head);
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
        };
        let decoded = match header("content-transfer-encoding")
            .map(|v| v.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("7bit" | "8bit" | "binary") => None,
            Some("base64") => Some(base64(content).ok_or(BodyError::Part {
                part: part_no,
                problem: "invalid base64",
            })?),
            Some("quoted-printable") => Some(quoted_printable(content)),
            Some(_) => {
                return Err(BodyError::Part {
                    part: part_no,
                    problem: "a transfer encoding keyhole does not decode",
                })
            }
        };
        if decoded.as_ref().is_some_and(|d| d.len() > limit) {
            return Err(BodyError::Part {
                part: part_no,
                problem: "decodes past the body limit",
            });
        }
        let part_type = header("content-type");
        if header("content-encoding").is_some_and(|v| !v.eq_ignore_ascii_case("identity")) {
            return Err(BodyError::Part {
                part: part_no,
                problem: "a content coding inside a part",
            });
        }
        let bytes = decoded.as_deref().unwrap_or(content);
        let inner =
            text_view(part_type.as_deref(), bytes, limit, depth + 1).map_err(|e| match e {
                BodyError::Charset(_) => BodyError::Part {
                    part: part_no,
                    problem: "a charset keyhole does not read",
                },
                other => other,
            })?;
        if decoded.is_some() && inner.as_is {
            hidden.push(String::from_utf8_lossy(bytes).into_owned());
        }
        hidden.extend(inner.hidden);
    }
    Ok(hidden)
}

/// The parts after each `delimiter` line, each up to the next one or the
/// body's end (a body cut before its closing delimiter keeps its last part;
/// the preamble and, after the closing `--boundary--`, the epilogue are
/// dropped).
fn split_parts<'b>(body: &'b [u8], delimiter: &'b [u8]) -> impl Iterator<Item = &'b [u8]> + 'b {
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(found) = body
        .get(at..)
        .and_then(|rest| memchr::memmem::find(rest, delimiter))
    {
        let pos = at + found;
        // A delimiter starts a line.
        if pos == 0 || body.get(pos.wrapping_sub(1)) == Some(&b'\n') {
            starts.push(pos);
        }
        at = pos + delimiter.len();
    }
    let ends: Vec<usize> = starts
        .iter()
        .skip(1)
        .copied()
        .chain(std::iter::once(body.len()))
        .collect();
    starts.into_iter().zip(ends).filter_map(move |(from, to)| {
        let part = body.get(from + delimiter.len()..to)?;
        if part.starts_with(b"--") {
            return None;
        }
        // The line break after the delimiter and the one before the next
        // belong to the delimiters.
        let part = part
            .strip_prefix(b"\r\n")
            .or_else(|| part.strip_prefix(b"\n"))
            .unwrap_or(part);
        Some(
            part.strip_suffix(b"\r\n")
                .or_else(|| part.strip_suffix(b"\n"))
                .unwrap_or(part),
        )
    })
}

/// A part's header lines and its content (after the first empty line).
fn split_head(part: &[u8]) -> (&[u8], &[u8]) {
    if let Some(p) = memchr::memmem::find(part, b"\r\n\r\n") {
        return (
            part.get(..p).unwrap_or_default(),
            part.get(p + 4..).unwrap_or_default(),
        );
    }
    if let Some(p) = memchr::memmem::find(part, b"\n\n") {
        return (
            part.get(..p).unwrap_or_default(),
            part.get(p + 2..).unwrap_or_default(),
        );
    }
    (part, &[])
}

/// Base64 (either alphabet; white space ignored, `=` padding optional).
/// `None` on any other character.
fn base64(content: &[u8]) -> Option<Vec<u8>> {
    let mut chars = Vec::with_capacity(content.len());
    for &c in content {
        match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'-' | b'_' => chars.push(c),
            b'=' | b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => return None,
        }
    }
    Some(crate::alias::shape::base64_bytes(&chars).collect())
}

/// Quoted-printable: `=XX` escapes and `=` soft line breaks undone.
fn quoted_printable(content: &[u8]) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(content.len());
    let mut i = 0;
    while i < content.len() {
        let b = content.get(i).copied().unwrap_or(0);
        if b != b'=' {
            out.push(b);
            i += 1;
            continue;
        }
        match (content.get(i + 1).copied(), content.get(i + 2).copied()) {
            (Some(b'\r'), Some(b'\n')) => i += 3,
            (Some(b'\n'), _) => i += 2,
            (Some(h), Some(l)) => match (hex(h), hex(l)) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                }
                _ => {
                    out.push(b);
                    i += 1;
                }
            },
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
