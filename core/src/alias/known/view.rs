//! Escape-decoded views of a text: percent escapes and HTML entities decoded,
//! with the way back to the raw bytes ([`MappedView`]).

use memchr::memchr2;
use std::ops::Range;

/// Percent-decodes and HTML-entity-decodes `text` when it holds an escape;
/// `None` when it holds none (nothing to look at twice).
pub(crate) fn decoded_view(text: &[u8]) -> Option<String> {
    memchr2(b'%', b'&', text)?;
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        if b == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        } else if b == b'&' {
            if let Some((t, len)) = entity(text.get(i..).unwrap_or_default()) {
                t.push_to(&mut out);
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

/// One HTML character reference at the start of `s` (`&#45;`, `&#x2d;`,
/// `&hyphen;`, any HTML5 name): the text it stands for and the reference's
/// length. Hyphen-like characters (`&hyphen;` is U+2010) read as `-`: an id
/// written with one is still the id.
fn entity(s: &[u8]) -> Option<(Ent, usize)> {
    let end = s.iter().take(34).position(|b| *b == b';')?;
    let name = std::str::from_utf8(s.get(1..end)?).ok()?;
    let text = if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse::<u32>().ok()?,
        };
        let ch = char::from_u32(code)?;
        let ch = if matches!(ch, '\u{2010}' | '\u{2011}' | '\u{2212}') {
            '-'
        } else {
            ch
        };
        Ent::Char(ch)
    } else {
        match name {
            "hyphen" | "dash" | "minus" => Ent::Static("-"),
            _ => Ent::Static(quick_xml::escape::resolve_html5_entity(name)?),
        }
    };
    Some((text, end + 1))
}

/// What a character reference stands for.
enum Ent {
    Static(&'static str),
    Char(char),
}

impl Ent {
    fn push_to(&self, out: &mut Vec<u8>) {
        match self {
            Ent::Static(s) => out.extend_from_slice(s.as_bytes()),
            Ent::Char(c) => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

/// A text with its percent escapes and character references decoded (one
/// round), and the way back: every decoded range maps to the raw bytes it
/// came from, an escape as a whole. An id written with escapes is found in
/// the decoded text and replaced in the raw bytes, escapes and all.
pub(crate) struct MappedView {
    /// The decoded bytes.
    pub text: Vec<u8>,
    /// One entry per escape, in order: (decoded start, raw start, decoded
    /// length, raw length).
    spans: Vec<(usize, usize, usize, usize)>,
}

impl MappedView {
    /// The view of `raw`; `None` when it holds no escape.
    pub(crate) fn new(raw: &[u8]) -> Option<MappedView> {
        // Most bodies hold a `&` or `%` that is no escape (`?a=1&b=2`, `50%`):
        // look before copying anything.
        let decodes = |i: usize| match raw.get(i) {
            Some(b'%') => raw
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)),
            _ => entity(raw.get(i..).unwrap_or_default()).is_some(),
        };
        let mut from = 0;
        loop {
            let at = from + memchr2(b'%', b'&', raw.get(from..)?)?;
            if decodes(at) {
                break;
            }
            from = at + 1;
        }
        let mut text = Vec::with_capacity(raw.len());
        let mut spans = Vec::new();
        let mut i = 0;
        while let Some(&b) = raw.get(i) {
            let at = text.len();
            let used = match b {
                b'%' => raw
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .map(|v| {
                        text.push(v);
                        3
                    }),
                b'&' => entity(raw.get(i..).unwrap_or_default()).map(|(t, len)| {
                    t.push_to(&mut text);
                    len
                }),
                _ => None,
            };
            match used {
                Some(len) => {
                    spans.push((at, i, text.len() - at, len));
                    i += len;
                }
                None => {
                    // Copy up to the next escape in one go.
                    let rest = raw.get(i + 1..).unwrap_or_default();
                    let next = memchr2(b'%', b'&', rest).map_or(raw.len(), |p| i + 1 + p);
                    text.extend_from_slice(raw.get(i..next).unwrap_or_default());
                    i = next;
                }
            }
        }
        if spans.is_empty() {
            return None;
        }
        Some(MappedView { text, spans })
    }

    fn raw_at(&self, d: usize, end: bool) -> usize {
        let idx = self.spans.partition_point(|s| s.0 <= d);
        let Some(&(ds, rs, dl, rl)) = idx.checked_sub(1).and_then(|i| self.spans.get(i)) else {
            return d;
        };
        if d < ds + dl {
            if end {
                rs + rl
            } else {
                rs
            }
        } else {
            rs + rl + (d - ds - dl)
        }
    }

    /// Ranges of the decoded text within `reach` bytes of an escape, merged:
    /// a match that involves an escape lies inside one of them (searching
    /// only these keeps the second search off the escape-free bulk).
    pub(crate) fn windows(&self, reach: usize) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for &(ds, _, dl, _) in &self.spans {
            let w = ds.saturating_sub(reach)..(ds + dl + reach).min(self.text.len());
            match out.last_mut() {
                Some(last) if w.start <= last.end => last.end = last.end.max(w.end),
                _ => out.push(w),
            }
        }
        out
    }

    /// Whether decoded range `r` covers part of an escape.
    pub(crate) fn touches_escape(&self, r: &Range<usize>) -> bool {
        let i = self.spans.partition_point(|s| s.0 + s.2 <= r.start);
        self.spans.get(i).is_some_and(|s| s.0 < r.end)
    }

    /// The raw range a decoded range stands for (escapes it touches whole).
    pub(crate) fn raw_range(&self, r: Range<usize>) -> Range<usize> {
        let start = self.raw_at(r.start, false);
        let end = match r.end.checked_sub(1) {
            Some(last) if r.end > r.start => {
                self.raw_at(last, true).max(self.raw_at(last, false) + 1)
            }
            _ => start,
        };
        start..end
    }
}
