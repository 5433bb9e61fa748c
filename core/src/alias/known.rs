//! Known ids, found anywhere: one Aho-Corasick automaton over every raw id a
//! session knows (learned from structured positions of this body or of earlier
//! ones), in its plain, percent-encoded and HTML-entity forms.
//!
//! A match counts unless it continues a word of the same class on either side
//! (`slot-im-1` is not inside `slot-im-12` or `xslot-im-1`), so an id glued to
//! other text by `_`, `-`, `.` or a percent escape (`Arztbrief_pat-000123_2025`,
//! `pat-000123-v7`, `Patient%2Fpat-000123`) is found. Values made of digits
//! only take part when they have at least [`MIN_NUMERIC_LEN`] digits: a short
//! number in prose is a count or a dose, not an id (it is still aliased where
//! it stands under an id key).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use std::ops::Range;

/// Shortest all-digit value searched in free text.
pub(crate) const MIN_NUMERIC_LEN: usize = 5;

/// The automaton and, per pattern, the index of the value it stands for.
pub(crate) struct KnownIds {
    ac: Option<AhoCorasick>,
    value_of: Vec<usize>,
}

/// Encodings of `-` (and `:`) an id may carry in a URL or an HTML body.
const ENCODED_DASH: [&str; 5] = ["%2D", "%2d", "&#45;", "&#x2d;", "&#x2D;"];

impl KnownIds {
    /// Builds the automaton over `values` (index = value number). Values that
    /// are too short to be searched safely are left out.
    pub(crate) fn new<'v>(values: impl IntoIterator<Item = &'v str>) -> KnownIds {
        let mut patterns: Vec<String> = Vec::new();
        let mut value_of = Vec::new();
        for (i, v) in values.into_iter().enumerate() {
            if !searchable(v) {
                continue;
            }
            patterns.push(v.to_owned());
            value_of.push(i);
            if v.contains('-') {
                for enc in ENCODED_DASH {
                    patterns.push(v.replace('-', enc));
                    value_of.push(i);
                }
            }
        }
        let ac = if patterns.is_empty() {
            None
        } else {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostLongest)
                .ascii_case_insensitive(true)
                // Built per response: a contiguous NFA builds in microseconds,
                // a DFA would cost more than the scan it speeds up.
                .kind(Some(AhoCorasickKind::ContiguousNFA))
                .build(&patterns)
                .ok()
        };
        KnownIds { ac, value_of }
    }

    /// Whether the automaton could not be built although values were given:
    /// the caller must fail closed.
    pub(crate) fn broken(&self) -> bool {
        self.ac.is_none() && !self.value_of.is_empty()
    }

    /// Calls `f(range, value)` for each accepted match in `hay`, in order,
    /// without overlaps.
    pub(crate) fn for_each(&self, hay: &[u8], mut f: impl FnMut(Range<usize>, usize)) {
        let Some(ac) = &self.ac else {
            return;
        };
        for m in ac.find_iter(hay) {
            let r = m.start()..m.end();
            if accept(hay, &r) {
                if let Some(v) = self.value_of.get(m.pattern().as_usize()) {
                    f(r, *v);
                }
            }
        }
    }

    /// The first accepted match in `hay`.
    pub(crate) fn first(&self, hay: &[u8]) -> Option<Range<usize>> {
        let ac = self.ac.as_ref()?;
        ac.find_iter(hay)
            .map(|m| m.start()..m.end())
            .find(|r| accept(hay, r))
    }
}

/// Whether a value may be searched in free text.
pub(crate) fn searchable(v: &str) -> bool {
    if v.is_empty() {
        return false;
    }
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return v.len() >= MIN_NUMERIC_LEN;
    }
    v.len() >= 3
}

fn same_class(a: u8, b: u8) -> bool {
    (a.is_ascii_digit() && b.is_ascii_digit()) || (a.is_ascii_alphabetic() && b.is_ascii_alphabetic())
}

/// Boundary rule (see the module doc).
fn accept(hay: &[u8], r: &Range<usize>) -> bool {
    let (Some(&first), Some(&last)) = (hay.get(r.start), r.end.checked_sub(1).and_then(|e| hay.get(e))) else {
        return false;
    };
    if let Some(&before) = r.start.checked_sub(1).and_then(|b| hay.get(b)) {
        let escape = r.start >= 3
            && hay.get(r.start - 3) == Some(&b'%')
            && hay.get(r.start - 2).is_some_and(u8::is_ascii_hexdigit)
            && before.is_ascii_hexdigit();
        if same_class(before, first) && !escape {
            return false;
        }
    }
    if let Some(&after) = hay.get(r.end) {
        if same_class(last, after) {
            return false;
        }
    }
    true
}

/// Percent-decodes and HTML-entity-decodes `text` when it holds an escape;
/// `None` when it holds none (nothing to look at twice).
pub(crate) fn decoded_view(text: &[u8]) -> Option<String> {
    if !text.iter().any(|b| *b == b'%' || *b == b'&') {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        if b == b'%' {
            let hex = text.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        } else if b == b'&' {
            if let Some((ch, len)) = entity(text.get(i..).unwrap_or_default()) {
                let mut buf = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                i += len;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    // A second round catches double encoding (`%252F`, `&amp;#45;`).
    let once = String::from_utf8_lossy(&out).into_owned();
    if once.as_bytes() != text && once.bytes().any(|b| b == b'%' || b == b'&') {
        if let Some(twice) = decoded_view(once.as_bytes()) {
            return Some(twice);
        }
    }
    Some(once)
}

/// One HTML character reference at the start of `s`: the character and the
/// reference's length.
fn entity(s: &[u8]) -> Option<(char, usize)> {
    let end = s.iter().take(12).position(|b| *b == b';')?;
    let name = std::str::from_utf8(s.get(1..end)?).ok()?;
    let ch = if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse::<u32>().ok()?,
        };
        char::from_u32(code)?
    } else {
        match name {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            "sol" => '/',
            "hyphen" | "dash" | "minus" => '-',
            "lowbar" => '_',
            "period" => '.',
            "colon" => ':',
            "percnt" => '%',
            "nbsp" => ' ',
            _ => return None,
        }
    };
    Some((ch, end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(values: &[&str], hay: &str) -> Vec<String> {
        let k = KnownIds::new(values.iter().copied());
        let mut out = Vec::new();
        k.for_each(hay.as_bytes(), |r, _| out.push(hay[r].to_owned()));
        out
    }

    #[test]
    fn glued_encoded_and_bounded() {
        let v = ["pat-000123", "482913", "slot-im-1"];
        assert_eq!(found(&v, "Arztbrief_pat-000123_2025.pdf"), ["pat-000123"]);
        assert_eq!(found(&v, "\"pat-000123-v7\""), ["pat-000123"]);
        assert_eq!(found(&v, "?subject=Patient%2Fpat-000123&x"), ["pat-000123"]);
        assert_eq!(found(&v, "pat&#45;000123 pat%2D000123"), ["pat&#45;000123", "pat%2D000123"]);
        assert_eq!(found(&v, "/patients/482913/x 1482913 4829130"), ["482913"]);
        assert_eq!(found(&v, "slot-im-12 xslot-im-1 slot-im-1."), ["slot-im-1"]);
        assert_eq!(found(&["12"], "12 tablets"), Vec::<String>::new());
    }

    #[test]
    fn decodes_escapes() {
        assert_eq!(decoded_view(b"Patient%2Fpat-1").as_deref(), Some("Patient/pat-1"));
        assert_eq!(decoded_view(b"pat&#45;1 &amp; &#x2D;").as_deref(), Some("pat-1 & -"));
        assert_eq!(decoded_view(b"a%252Fb").as_deref(), Some("a/b"));
        assert_eq!(decoded_view(b"plain"), None);
    }
}
