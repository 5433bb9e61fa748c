//! Reading a body in the charset its `content-type` declares.
//!
//! keyhole scans UTF-8 only (a body with other bytes is withheld as binary).
//! HMS systems still send windows-1252 / ISO-8859-1 text (`Müller` as one
//! byte `0xfc`); such a body, declared so, is transcoded to UTF-8 here before
//! it is scanned, and sent on as UTF-8 with its `content-type` saying so. The
//! labels are the WHATWG Encoding Standard's for windows-1252 (which is what
//! browsers and HTTP clients read `iso-8859-1` as). Any other declared charset
//! is left alone: the body is read as it is, UTF-8 or withheld.

/// Labels of windows-1252 (WHATWG), lower case.
const WINDOWS_1252: [&str; 17] = [
    "ansi_x3.4-1968",
    "ascii",
    "cp1252",
    "cp819",
    "csisolatin1",
    "ibm819",
    "iso-8859-1",
    "iso-ir-100",
    "iso8859-1",
    "iso88591",
    "iso_8859-1",
    "iso_8859-1:1987",
    "l1",
    "latin1",
    "us-ascii",
    "windows-1252",
    "x-cp1252",
];

/// Code points of windows-1252 bytes 0x80–0x9f (the rest are Latin-1: the
/// byte is the code point). Undefined bytes map to the C1 control of the same
/// value, as the Encoding Standard does.
const HIGH: [char; 32] = [
    '\u{20ac}', '\u{0081}', '\u{201a}', '\u{0192}', '\u{201e}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{02c6}', '\u{2030}', '\u{0160}', '\u{2039}', '\u{0152}', '\u{008d}', '\u{017d}', '\u{008f}',
    '\u{0090}', '\u{2018}', '\u{2019}', '\u{201c}', '\u{201d}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{02dc}', '\u{2122}', '\u{0161}', '\u{203a}', '\u{0153}', '\u{009d}', '\u{017e}', '\u{0178}',
];

/// The `charset` parameter of a `content-type` value, unquoted, lower case.
pub fn declared(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches('"').to_ascii_lowercase())
    })
}

/// Whether `charset` (a [`declared`] value) is read as windows-1252.
pub fn is_windows_1252(charset: &str) -> bool {
    WINDOWS_1252.contains(&charset)
}

/// `bytes` read as windows-1252, written as UTF-8. Every byte sequence is
/// valid windows-1252; ASCII bytes stay as they are.
pub fn windows_1252_to_utf8(bytes: &[u8]) -> Vec<u8> {
    if bytes.is_ascii() {
        return bytes.to_vec();
    }
    let mut out = String::with_capacity(bytes.len() + bytes.len() / 8);
    for &b in bytes {
        let c = match b {
            0x80..=0x9f => HIGH
                .get(usize::from(b - 0x80))
                .copied()
                .unwrap_or(char::from(b)),
            _ => char::from(b),
        };
        out.push(c);
    }
    out.into_bytes()
}

/// `content_type` with its `charset` parameter set to `utf-8` (other
/// parameters kept as written).
pub fn with_utf8(content_type: &str) -> String {
    let mut parts = content_type.split(';');
    let mut out = parts.next().unwrap_or_default().trim().to_owned();
    for param in parts {
        let is_charset = param
            .split_once('=')
            .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("charset"));
        out.push_str("; ");
        out.push_str(if is_charset {
            "charset=utf-8"
        } else {
            param.trim()
        });
    }
    out
}

/// A header value as text: UTF-8 as it is, other bytes (a Latin-1 `0xfc`
/// beside an id) one character per byte (U+0000–U+00FF), so that nothing is
/// lost; `true` in the second place when the bytes were not UTF-8. Ids and
/// aliases are ASCII, so a value read this way and written back with
/// [`header_bytes`] changes only where an alias went in.
pub fn header_text(bytes: &[u8]) -> (String, bool) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), false),
        Err(_) => (bytes.iter().map(|b| char::from(*b)).collect(), true),
    }
}

/// The bytes of a value read by [`header_text`] with `true`: one byte per
/// character; `None` when a character above U+00FF was written into it.
pub fn header_bytes(text: &str) -> Option<Vec<u8>> {
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header value with a Latin-1 byte beside an id, read, rewritten
    /// and written back: only the alias changed, every other byte is as
    /// HMS sent it.
    #[test]
    fn a_rewritten_latin1_header_changes_only_the_alias() {
        use crate::alias::{BodyKind, ResponseScan, SessionMap, Taxonomy};
        let raw: &[u8] = b"attachment; filename=\"M\xfcller pat-000123.pdf\"";
        let (text, latin1) = header_text(raw);
        assert!(latin1);
        let tax = Taxonomy::default();
        let mut scan = ResponseScan::new(&tax);
        let part = scan.add(text.as_bytes(), BodyKind::Text, None).unwrap();
        let aliases = SessionMap::new().encode(&tax, scan.ids()).unwrap().aliases;
        let out = scan.rewrite(part, text.as_bytes(), &aliases).unwrap();
        let back = header_bytes(std::str::from_utf8(&out).unwrap()).unwrap();
        assert_eq!(
            back,
            b"attachment; filename=\"M\xfcller patient-001.pdf\"".to_vec()
        );
        assert!(!back.windows(3).any(|w| w == "\u{fffd}".as_bytes()));
        // UTF-8 stays UTF-8.
        assert_eq!(
            header_text("M\u{fc}ller".as_bytes()),
            ("M\u{fc}ller".to_owned(), false)
        );
        assert_eq!(header_bytes("\u{100}"), None);
    }

    #[test]
    fn declared_charsets_are_read_from_the_parameters() {
        assert_eq!(
            declared("text/html; charset=ISO-8859-1").as_deref(),
            Some("iso-8859-1")
        );
        assert_eq!(
            declared("text/csv;charset=\"windows-1252\"; header=present").as_deref(),
            Some("windows-1252")
        );
        assert_eq!(declared("application/json"), None);
        assert!(
            is_windows_1252("latin1") && is_windows_1252("us-ascii") && !is_windows_1252("utf-8")
        );
        assert!(!is_windows_1252("shift_jis") && !is_windows_1252("iso-8859-15"));
    }

    #[test]
    fn windows_1252_becomes_utf8() {
        assert_eq!(
            windows_1252_to_utf8(b"M\xfcller pat-000123"),
            "Müller pat-000123".as_bytes()
        );
        assert_eq!(
            windows_1252_to_utf8(b"\x80 \x93x\x94 \x81"),
            "€ “x” \u{81}".as_bytes()
        );
        // Every byte decodes, to exactly one char, and ASCII stays ASCII.
        let all: Vec<u8> = (0..=255).collect();
        let out = String::from_utf8(windows_1252_to_utf8(&all)).unwrap();
        assert_eq!(out.chars().count(), 256);
        assert!(out
            .chars()
            .take(128)
            .zip(0u8..)
            .all(|(c, b)| c == char::from(b)));
    }

    #[test]
    fn the_content_type_says_utf8_afterwards() {
        assert_eq!(
            with_utf8("text/html; charset=iso-8859-1"),
            "text/html; charset=utf-8"
        );
        assert_eq!(
            with_utf8("text/csv;Charset=latin1; header=present"),
            "text/csv; charset=utf-8; header=present"
        );
    }
}
