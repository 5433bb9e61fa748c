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
//!
//! A JSON document may stand inside a wrapper ([`json_span`]): a UTF-8 byte
//! order mark, an XSSI guard (`)]}'`, `while(1);`, `for(;;);`) or a JSONP
//! call (`callback({...});`). The document is read where it stands and the
//! wrapper is kept as it is. JSON with comments or trailing commas is not
//! JSON: declared JSON that does not parse is withheld (`not_json`); as text
//! it is read with the text patterns.

use super::BodyKind;
use crate::alias::rewrite::RewriteError;
use crate::json::lexer::{JsonError, Lexer};
pub use crate::proto::withhold::WithholdReason;

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
    /// - `text/event-stream`: [`BodyKind::EventStream`];
    /// - `application/x-www-form-urlencoded`: [`BodyKind::Form`];
    /// - `application/yaml`, `application/x-yaml`, `text/yaml`,
    ///   `text/x-yaml`, any `+yaml`: [`BodyKind::Yaml`];
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
        } else if is("text/event-stream") {
            BodyKind::EventStream
        } else if is("application/x-www-form-urlencoded") {
            BodyKind::Form
        } else if is("application/yaml")
            || is("application/x-yaml")
            || is("text/yaml")
            || is("text/x-yaml")
            || ends("+yaml")
        {
            BodyKind::Yaml
        } else {
            BodyKind::Text
        }
    }

    /// A short label for logs and counters (`json`, `ndjson`, `text`, `csv`,
    /// `xml`, `html`, `event_stream`, `form`, `yaml`).
    pub fn as_str(self) -> &'static str {
        match self {
            BodyKind::Json => "json",
            BodyKind::NdJson => "ndjson",
            BodyKind::Text => "text",
            BodyKind::Csv => "csv",
            BodyKind::Xml => "xml",
            BodyKind::Html => "html",
            BodyKind::EventStream => "event_stream",
            BodyKind::Form => "form",
            BodyKind::Yaml => "yaml",
        }
    }

    /// Whether the body is read as JSON documents (string literals and
    /// numbers; an event stream's other lines count as literals), as
    /// opposed to text read as a whole.
    pub(crate) fn is_json(self) -> bool {
        matches!(
            self,
            BodyKind::Json | BodyKind::NdJson | BodyKind::EventStream
        )
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
        BodyKind::Text | BodyKind::Csv | BodyKind::Html | BodyKind::Yaml => {
            sniff_json(text).unwrap_or(declared)
        }
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

/// JSON (or NDJSON) when the first non-space byte of the document (inside
/// its wrapper, [`json_span`]) opens an object or array and the whole
/// document parses; `None` otherwise.
fn sniff_json(src: &str) -> Option<BodyKind> {
    let doc = src.get(json_span(src)).unwrap_or_default();
    let first = doc.bytes().find(|b| !b.is_ascii_whitespace())?;
    if !matches!(first, b'{' | b'[') {
        return None;
    }
    if parses(doc) {
        return Some(BodyKind::Json);
    }
    let src = super::split_bom(src).1;
    let mut lines = src.lines().filter(|l| !l.trim().is_empty()).peekable();
    lines.peek()?;
    lines.all(parses).then_some(BodyKind::NdJson)
}

/// XSSI guards servers put before JSON so that a `<script>` tag cannot run it.
const XSSI_GUARDS: [&str; 4] = [")]}',", ")]}'", "while(1);", "for(;;);"];

/// Where the JSON document of a body stands: after a UTF-8 byte order mark
/// and an XSSI guard, or inside a JSONP call (`name(` … `)` with an optional
/// `;`, the name a dotted JavaScript identifier). The whole body (after a
/// byte order mark) when it has no wrapper.
pub(crate) fn json_span(src: &str) -> std::ops::Range<usize> {
    let (bom, doc) = super::split_bom(src);
    let lead = doc.len() - doc.trim_start().len();
    let rest = doc.get(lead..).unwrap_or_default();
    for guard in XSSI_GUARDS {
        if let Some(after) = rest.strip_prefix(guard) {
            return src.len() - after.len()..src.len();
        }
    }
    let name = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.'))
        .count();
    let starts_name = rest
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || matches!(b, b'_' | b'$'));
    if starts_name {
        let after = rest.get(name..).unwrap_or_default().trim_start();
        if let Some(inner) = after.strip_prefix('(') {
            let tail = inner.trim_end();
            let tail = tail.strip_suffix(';').unwrap_or(tail).trim_end();
            if let Some(body) = tail.strip_suffix(')') {
                let start = src.len() - inner.len();
                return start..start + body.len();
            }
        }
    }
    bom..src.len()
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

/// One line of an event stream ([`event_lines`]).
pub(crate) struct EventLine<'a> {
    /// Its offset in the body.
    pub(crate) base: usize,
    /// The line, its end of line excluded.
    pub(crate) text: &'a str,
    /// Where its payload starts, when it is a `data:` line whose payload is
    /// one JSON document.
    pub(crate) json: Option<usize>,
}

/// The lines of an event stream `doc` that starts `base` bytes into the
/// body (`\n`, `\r\n` or `\r` ends a line).
pub(crate) fn event_lines(doc: &str, base: usize) -> impl Iterator<Item = EventLine<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = doc.get(at..).filter(|r| !r.is_empty())?;
        let len = rest.find(['\n', '\r']).unwrap_or(rest.len());
        let text = rest.get(..len).unwrap_or_default();
        let mut next = at + len;
        if doc.get(next..).is_some_and(|r| r.starts_with("\r\n")) {
            next += 2;
        } else if next < doc.len() {
            next += 1;
        }
        let line = EventLine {
            base: base + at,
            text,
            json: data_json(text),
        };
        at = next;
        Some(line)
    })
}

/// Where the JSON payload of a `data:` line starts, if the payload is one
/// JSON object or array.
pub(crate) fn data_json(line: &str) -> Option<usize> {
    let payload = line.strip_prefix("data:")?;
    let lead = payload.len() - payload.trim_start().len();
    let at = line.len() - payload.len() + lead;
    let doc = line.get(at..)?;
    (matches!(doc.bytes().next(), Some(b'{' | b'[')) && parses(doc)).then_some(at)
}

/// The length of a leading UTF-8 byte order mark (0 or 3) and the text
/// after it.
pub(crate) fn split_bom(src: &str) -> (usize, &str) {
    match src.strip_prefix('\u{feff}') {
        Some(rest) => (src.len() - rest.len(), rest),
        None => (0, src),
    }
}

/// A JSON error at an offset of a document that starts `by` bytes into the
/// body.
pub(crate) fn shift_json_error(e: RewriteError, by: usize) -> RewriteError {
    match e {
        RewriteError::Json(JsonError::Unexpected { at }) => {
            RewriteError::Json(JsonError::Unexpected { at: at + by })
        }
        RewriteError::Json(JsonError::Eof { at }) => {
            RewriteError::Json(JsonError::Eof { at: at + by })
        }
        other => other,
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
