//! Which reader a body gets: the declared content type, checked against the
//! bytes.
//!
//! The content type picks the format ([`BodyKind::from_content_type`]); the
//! bytes then have to agree. A compressed or archived body without a
//! `content-encoding` (gzip, zstd, xz, bzip2, zip magic), a body holding NUL
//! bytes, or a text body that is not UTF-8 is unreadable: the filter cannot
//! find ids in it, so it is withheld rather than passed on. `text/plain`, a
//! missing content type and the other text formats whose bytes are JSON are
//! read as JSON, with the structural rules (a numeric id under `patientId` is
//! found only there).

use super::BodyKind;
use crate::alias::json::Lexer;

/// Why a body was withheld: one label per cause, for the filter's counters
/// and logs (`RewriteError::reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WithholdReason {
    /// Compressed or archived bytes without a `content-encoding` header.
    Compressed,
    /// Binary bytes: NUL bytes, or a text body that is not UTF-8.
    Binary,
    /// Declared (or sniffed) JSON or NDJSON that does not parse.
    NotJson,
    /// Declared XML that does not parse.
    NotXml,
    /// Verification found a raw id in the rewritten body.
    Leak,
    /// The encode answer does not fit the scan (alias count, empty alias,
    /// another body): a bug on the caller's side, not in the body.
    Mismatch,
    /// An id runs across an invisible or look-alike character.
    BrokenId,
}

impl WithholdReason {
    /// The label (`compressed`, `binary`, `not_json`, `not_xml`, `leak`,
    /// `mismatch`, `broken_id`).
    pub fn as_str(self) -> &'static str {
        match self {
            WithholdReason::Compressed => "compressed",
            WithholdReason::Binary => "binary",
            WithholdReason::NotJson => "not_json",
            WithholdReason::NotXml => "not_xml",
            WithholdReason::Leak => "leak",
            WithholdReason::Mismatch => "mismatch",
            WithholdReason::BrokenId => "broken_id",
        }
    }
}

impl BodyKind {
    /// The reader for a `content-type` header value (parameters ignored,
    /// letter case ignored); `None` (no header) reads like `text/plain`:
    /// JSON when the bytes are JSON, else text.
    ///
    /// - `application/json`, `text/json`, any `+json` (`problem+json`,
    ///   `fhir+json`): [`BodyKind::Json`];
    /// - `application/x-ndjson`, `application/ndjson`, JSON lines:
    ///   [`BodyKind::NdJson`];
    /// - `text/csv`, `application/csv`, `text/tab-separated-values`:
    ///   [`BodyKind::Csv`];
    /// - `application/xml`, `text/xml`, any `+xml` (`fhir+xml`):
    ///   [`BodyKind::Xml`];
    /// - `text/html`, `application/xhtml+xml`: [`BodyKind::Html`];
    /// - anything else: [`BodyKind::Text`] (binary bytes are refused when
    ///   the body is added).
    pub fn from_content_type(content_type: Option<&str>) -> BodyKind {
        let Some(ct) = content_type else {
            return BodyKind::Text;
        };
        let media = ct.split(';').next().unwrap_or("").trim();
        let is = |name: &str| media.eq_ignore_ascii_case(name);
        let ends = |tail: &str| {
            media.len() > tail.len()
                && media
                    .get(media.len() - tail.len()..)
                    .is_some_and(|t| t.eq_ignore_ascii_case(tail))
        };
        if is("application/x-ndjson")
            || is("application/ndjson")
            || is("application/jsonl")
            || is("application/x-jsonlines")
            || is("application/jsonlines")
            || ends("+ndjson")
        {
            BodyKind::NdJson
        } else if is("application/json") || is("text/json") || ends("+json") {
            BodyKind::Json
        } else if is("text/csv") || is("application/csv") || is("text/tab-separated-values") {
            BodyKind::Csv
        } else if is("text/html") || is("application/xhtml+xml") {
            BodyKind::Html
        } else if is("application/xml") || is("text/xml") || ends("+xml") {
            BodyKind::Xml
        } else {
            BodyKind::Text
        }
    }

    /// A short label for logs and counters (`json`, `ndjson`, `text`, `csv`,
    /// `xml`, `html`).
    pub fn as_str(self) -> &'static str {
        match self {
            BodyKind::Json => "json",
            BodyKind::NdJson => "ndjson",
            BodyKind::Text => "text",
            BodyKind::Csv => "csv",
            BodyKind::Xml => "xml",
            BodyKind::Html => "html",
        }
    }

    /// Whether the body is read as JSON documents (string literals and
    /// numbers), as opposed to text read as a whole.
    pub(crate) fn is_json(self) -> bool {
        matches!(self, BodyKind::Json | BodyKind::NdJson)
    }
}

/// What the bytes say against the declared kind: the kind to read them as,
/// or why they cannot be read.
/// The body comes back as text (checked once, here).
pub(super) fn effective_kind(
    body: &[u8],
    declared: BodyKind,
) -> Result<(BodyKind, &str), WithholdReason> {
    if compressed(body) {
        return Err(WithholdReason::Compressed);
    }
    let text = std::str::from_utf8(body).map_err(|_| WithholdReason::Binary)?;
    if memchr::memchr(0, body).is_some() {
        return Err(WithholdReason::Binary);
    }
    let kind = match declared {
        BodyKind::Text | BodyKind::Csv | BodyKind::Html => sniff_json(text).unwrap_or(declared),
        other => other,
    };
    Ok((kind, text))
}

/// Magic numbers of compressed and archive formats. Brotli has none; its
/// bytes are caught as binary (not UTF-8) instead.
fn compressed(body: &[u8]) -> bool {
    const MAGIC: [&[u8]; 7] = [
        b"\x1f\x8b",         // gzip
        b"\x28\xb5\x2f\xfd", // zstd
        b"\xfd7zXZ\x00",     // xz
        b"PK\x03\x04",       // zip
        b"PK\x05\x06",       // empty zip
        b"\x78\x9c",         // zlib (default level)
        b"\x78\xda",         // zlib (best)
    ];
    MAGIC.iter().any(|m| body.starts_with(m))
        || (body.starts_with(b"BZh")
            && body.get(4..10) == Some(b"\x31\x41\x59\x26\x53\x59".as_slice()))
}

/// JSON (or NDJSON) when the first non-space byte opens an object or array
/// and the whole body parses; `None` otherwise.
fn sniff_json(src: &str) -> Option<BodyKind> {
    let src = super::split_bom(src).1;
    let first = src.bytes().find(|b| !b.is_ascii_whitespace())?;
    if !matches!(first, b'{' | b'[') {
        return None;
    }
    if parses(src) {
        return Some(BodyKind::Json);
    }
    let mut lines = src.lines().filter(|l| !l.trim().is_empty()).peekable();
    lines.peek()?;
    lines.all(parses).then_some(BodyKind::NdJson)
}

/// Whether `src` is one complete JSON document.
pub(super) fn parses(src: &str) -> bool {
    let mut lx = Lexer::new(src);
    loop {
        match lx.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_pick_the_reader() {
        let k = |ct: &str| BodyKind::from_content_type(Some(ct));
        assert_eq!(k("application/json; charset=utf-8"), BodyKind::Json);
        assert_eq!(k("application/problem+json"), BodyKind::Json);
        assert_eq!(k("Application/FHIR+JSON;fhirVersion=4.0"), BodyKind::Json);
        assert_eq!(k("application/x-ndjson"), BodyKind::NdJson);
        assert_eq!(k("text/csv; header=present"), BodyKind::Csv);
        assert_eq!(k("application/fhir+xml"), BodyKind::Xml);
        assert_eq!(k("text/xml"), BodyKind::Xml);
        assert_eq!(k("text/html; charset=utf-8"), BodyKind::Html);
        assert_eq!(k("text/plain"), BodyKind::Text);
        assert_eq!(k("application/octet-stream"), BodyKind::Text);
        assert_eq!(BodyKind::from_content_type(None), BodyKind::Text);
    }

    #[test]
    fn bytes_are_checked_against_the_declared_kind() {
        let k = |b: &[u8], d| effective_kind(b, d).map(|(k, _)| k);
        assert_eq!(k(b" {\"a\":1}", BodyKind::Text), Ok(BodyKind::Json));
        assert_eq!(
            k(b"{\"a\":1}\n{\"b\":2}\n", BodyKind::Text),
            Ok(BodyKind::NdJson)
        );
        assert_eq!(k(b"[INFO] {x}", BodyKind::Text), Ok(BodyKind::Text));
        assert_eq!(k(b"a,b\n1,2\n", BodyKind::Csv), Ok(BodyKind::Csv));
        assert_eq!(
            k(b"\x1f\x8b\x08\x00", BodyKind::Json),
            Err(WithholdReason::Compressed)
        );
        assert_eq!(
            k(b"\x28\xb5\x2f\xfdabc", BodyKind::Text),
            Err(WithholdReason::Compressed)
        );
        assert_eq!(
            k(b"PK\x03\x04....", BodyKind::Csv),
            Err(WithholdReason::Compressed)
        );
        assert_eq!(k(b"ab\x00cd", BodyKind::Text), Err(WithholdReason::Binary));
        assert_eq!(
            k(b"\xff\xfe ab", BodyKind::Html),
            Err(WithholdReason::Binary)
        );
    }
}
