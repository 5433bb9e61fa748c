//! The canonical views of the last word (see [`super`]): escapes and
//! references decoded, invisible characters removed, look-alikes folded,
//! markup stripped, and the decoders of percent, quoted-printable, base64
//! and hex text.

/// Shortest base64 or hex run that is decoded: 12 bytes of payload at least.
const MIN_RUN: usize = 16;

/// Longest text read in one decoded run (bounds the work on a huge blob).
const MAX_RUN: usize = 64 * 1024;

/// The canonical form of one character: removed, folded to ASCII, or kept.
enum Fold {
    Drop,
    Ascii(u8),
    Keep,
}

fn fold(c: char) -> Fold {
    match u32::from(c) {
        0xAD
        | 0x34F
        | 0x61C
        | 0x180E
        | 0x200B..=0x200F
        | 0x202A..=0x202E
        | 0x2060..=0x2064
        | 0x2066..=0x2069
        | 0xFEFF => Fold::Drop,
        0x2010..=0x2015 | 0x2043 | 0x2212 | 0x2796 | 0xFE58 | 0xFE63 | 0xFF0D => Fold::Ascii(b'-'),
        0x2044 | 0x2215 | 0xFF0F => Fold::Ascii(b'/'),
        0x3000 | 0x00A0 | 0x2000..=0x200A | 0x202F | 0x205F => Fold::Ascii(b' '),
        u @ 0xFF01..=0xFF5E => u8::try_from(u - 0xFF01 + 0x21).map_or(Fold::Keep, Fold::Ascii),
        // Unicode's tag characters mirror ASCII; invisible on screen, a model
        // reads them (ASCII smuggling).
        u @ 0xE0020..=0xE007E => u8::try_from(u - 0xE0000).map_or(Fold::Keep, Fold::Ascii),
        _ => Fold::Keep,
    }
}

/// Pushes characters folded: by the table above, else by what a reader
/// takes them for ([`read_as`]), else as they are. [`read_as`] looks up
/// Unicode's tables, and a text repeats its characters: each non-ASCII
/// character is read once per text.
#[derive(Default)]
struct Folder {
    seen: rustc_hash::FxHashMap<char, Option<Box<[u8]>>>,
}

impl Folder {
    fn push(&mut self, out: &mut Vec<u8>, c: char) {
        match fold(c) {
            Fold::Drop => {}
            Fold::Ascii(b) => out.push(b),
            Fold::Keep if c.is_ascii() => out.push(c as u8),
            Fold::Keep => {
                let reading = self.seen.entry(c).or_insert_with(|| {
                    let mut ascii = Vec::new();
                    read_as(c, &mut ascii).then(|| ascii.into_boxed_slice())
                });
                match reading {
                    Some(ascii) => out.extend_from_slice(ascii),
                    None => {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                }
            }
        }
    }
}

/// The ASCII a reader (or a model) takes a non-ASCII `c` for, pushed onto
/// `out`; `false` (nothing pushed) when `c` reads as no ASCII.
///
/// Unicode's own data, not a list of look-alikes: a decimal digit of any
/// script is its digit (`٣`, `३`, `𝟑` → `3`); the compatibility
/// decomposition (NFKC's mapping) with combining marks dropped
/// (`𝐩`, `ⓟ`, `ᵖ` → `p`; `⁴`, `④` → `4`; `é` → `e`; `ﬁ` → `fi`); a
/// default-ignorable character is nothing; else the character's UTS #39
/// confusable prototype when that is ASCII letters and digits (Cyrillic `р`
/// → `p`, Greek `Ο` → `O`).
fn read_as(c: char, out: &mut Vec<u8>) -> bool {
    if let Some(d) = decimal_digit(c) {
        out.push(b'0' + d);
        return true;
    }
    let mark = out.len();
    let mut ascii = true;
    let mut changed = false;
    unicode_normalization::char::decompose_compatible(c, |d| {
        changed |= d != c;
        if !ascii || unicode_normalization::char::is_combining_mark(d) {
            return;
        }
        match (d.is_ascii(), fold(d), decimal_digit(d)) {
            (true, ..) => out.push(d as u8),
            (_, Fold::Ascii(b), _) => out.push(b),
            (_, Fold::Drop, _) => {}
            (_, Fold::Keep, Some(digit)) => out.push(b'0' + digit),
            (_, Fold::Keep, None) => ascii = false,
        }
    });
    if ascii && changed {
        return true;
    }
    out.truncate(mark);
    let mut buf = [0u8; 4];
    let mut prototype = unicode_security::skeleton(c.encode_utf8(&mut buf)).peekable();
    if prototype.peek().is_none() {
        return true;
    }
    for p in prototype {
        if unicode_normalization::char::is_combining_mark(p) {
            continue;
        }
        if !p.is_ascii_alphanumeric() {
            out.truncate(mark);
            return false;
        }
        out.push(p as u8);
    }
    true
}

/// The value of a decimal digit of any script (general category `Nd`).
/// Unicode encodes every decimal digit set as ten contiguous code points
/// from zero to nine, so the value is the distance from the run's start.
fn decimal_digit(c: char) -> Option<u8> {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    let nd = |c: char| c.general_category() == GeneralCategory::DecimalNumber;
    if !nd(c) {
        return None;
    }
    let code = u32::from(c);
    let start = (code.saturating_sub(64)..code)
        .rev()
        .find(|&p| !char::from_u32(p).is_some_and(nd))
        .map_or(code.saturating_sub(64), |p| p + 1);
    u8::try_from((code - start) % 10).ok()
}

/// The canonical text of `raw` (see the module doc); `strip_markup` also
/// removes tags and CDATA / comment markers.
pub fn canonical(raw: &[u8], strip_markup: bool) -> Vec<u8> {
    // `from_utf8` first: its check of valid text is faster than the lossy
    // reader's, which is only needed for text that is not UTF-8.
    let text = match std::str::from_utf8(raw) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(raw),
    };
    let s = text.as_bytes();
    let mut out = Vec::with_capacity(s.len());
    let mut folder = Folder::default();
    // Bytes no rule below reads are copied a stretch at a time.
    let plain = |b: u8| {
        !(matches!(b, b'\\' | b'&' | 0x80..) || strip_markup && matches!(b, b'<' | b']' | b'-'))
    };
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        let rest = s.get(i..).unwrap_or_default();
        let stretch = rest.iter().position(|b| !plain(*b)).unwrap_or(rest.len());
        if stretch > 0 {
            out.extend_from_slice(rest.get(..stretch).unwrap_or_default());
            i += stretch;
            continue;
        }
        match b {
            b'\\' => {
                if let Some((c, len)) = json_escape(rest) {
                    folder.push(&mut out, c);
                    i += len;
                    continue;
                }
            }
            b'&' => {
                if let Some((decoded, len)) = reference(rest) {
                    decoded.push(&mut folder, &mut out);
                    i += len;
                    continue;
                }
            }
            b'<' if strip_markup => {
                if let Some(len) = markup(rest) {
                    i += len;
                    continue;
                }
            }
            b']' if strip_markup && rest.starts_with(b"]]>") => {
                i += 3;
                continue;
            }
            b'-' if strip_markup && rest.starts_with(b"-->") => {
                out.push(b' ');
                i += 3;
                continue;
            }
            0x80.. => {
                if let Some(c) = text.get(i..).and_then(|t| t.chars().next()) {
                    folder.push(&mut out, c);
                    i += c.len_utf8();
                    continue;
                }
            }
            _ => {}
        }
        out.push(b);
        i += 1;
    }
    out
}

/// A JSON escape at the start of `s`: the character and the escape's length
/// (a surrogate pair is one character).
fn json_escape(s: &[u8]) -> Option<(char, usize)> {
    let c = *s.get(1)?;
    let simple = match c {
        b'"' => Some('"'),
        b'\\' => Some('\\'),
        b'/' => Some('/'),
        b'n' => Some('\n'),
        b't' => Some('\t'),
        b'r' => Some('\r'),
        b'b' | b'f' => Some(' '),
        _ => None,
    };
    if let Some(ch) = simple {
        return Some((ch, 2));
    }
    if c != b'u' {
        return None;
    }
    let unit = |at: usize| -> Option<u32> {
        let h = std::str::from_utf8(s.get(at..at + 4)?).ok()?;
        u32::from_str_radix(h, 16).ok()
    };
    let hi = unit(2)?;
    if (0xD800..0xDC00).contains(&hi) && s.get(6..8) == Some(b"\\u") {
        let lo = unit(8)?;
        let code = 0x10000 + ((hi - 0xD800) << 10) + lo.checked_sub(0xDC00)?;
        return Some((char::from_u32(code)?, 12));
    }
    Some((char::from_u32(hi)?, 6))
}

/// What a reference decodes to: one character, or the text of a named
/// reference (some name two characters).
#[derive(Debug, Clone, Copy)]
enum Decoded {
    Char(char),
    Text(&'static str),
}

impl Decoded {
    fn push(self, folder: &mut Folder, out: &mut Vec<u8>) {
        match self {
            Decoded::Char(c) => folder.push(out, c),
            Decoded::Text(t) => t.chars().for_each(|c| folder.push(out, c)),
        }
    }
}

/// An HTML character reference at the start of `s`: numeric, or any of
/// HTML5's named references (`&Popf;` is a letter too).
fn reference(s: &[u8]) -> Option<(Decoded, usize)> {
    let end = s.iter().take(40).position(|b| *b == b';')?;
    let name = std::str::from_utf8(s.get(1..end)?).ok()?;
    let c = match name.strip_prefix('#') {
        Some(num) => {
            let code = match num.strip_prefix(['x', 'X']) {
                Some(h) => u32::from_str_radix(h, 16).ok()?,
                None => num.parse().ok()?,
            };
            Decoded::Char(char::from_u32(code)?)
        }
        None => match name.as_bytes() {
            // The mathematical letters (`&Popf;` 𝕡, `&pscr;`, `&pfr;`) read
            // as their letter, which is what NFKC makes of them; quick-xml's
            // table (0.38) holds their code points cut to four hex digits.
            [l, b'o', b'p', b'f'] | [l, b's', b'c', b'r'] | [l, b'f', b'r']
                if l.is_ascii_alphabetic() =>
            {
                Decoded::Char(char::from(*l))
            }
            _ => Decoded::Text(quick_xml::escape::resolve_html5_entity(name)?),
        },
    };
    Some((c, end + 1))
}

/// A tag, `<![CDATA[` or `<!--` at the start of `s`: its length.
fn markup(s: &[u8]) -> Option<usize> {
    if s.starts_with(b"<![CDATA[") {
        return Some(9);
    }
    if s.starts_with(b"<!--") {
        return Some(4);
    }
    let next = *s.get(1)?;
    if !(next.is_ascii_alphabetic() || next == b'/' || next == b'!' || next == b'?') {
        return None;
    }
    let close = s.iter().take(512).position(|b| *b == b'>')?;
    Some(close + 1)
}

/// One round of percent decoding; `None` when there is no escape.
pub(super) fn percent_decoded(t: &[u8]) -> Option<Vec<u8>> {
    // Most texts hold no `%`: no copy of them is made.
    let first = memchr::memchr(b'%', t)?;
    let mut out = Vec::with_capacity(t.len());
    out.extend_from_slice(t.get(..first).unwrap_or_default());
    let mut any = false;
    let mut i = first;
    while let Some(&b) = t.get(i) {
        if b == b'%' {
            let v = t
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(v) = v {
                out.push(v);
                i += 3;
                any = true;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    any.then_some(out)
}

/// Quoted-printable decoding (`=2D`, soft line breaks); `None` when the
/// text holds neither.
pub(super) fn quoted_printable(t: &[u8]) -> Option<Vec<u8>> {
    // Every escape and soft break starts with `=`: a text without one is
    // not copied.
    let first = memchr::memchr(b'=', t)?;
    let mut out = Vec::with_capacity(t.len());
    out.extend_from_slice(t.get(..first).unwrap_or_default());
    let mut any = false;
    let mut i = first;
    while let Some(&b) = t.get(i) {
        if b == b'=' {
            if t.get(i + 1..i + 3) == Some(b"\r\n") {
                i += 3;
                any = true;
                continue;
            }
            if t.get(i + 1) == Some(&b'\n') {
                i += 2;
                any = true;
                continue;
            }
            let h = t.get(i + 1..i + 3).unwrap_or_default();
            let upper_hex = h.len() == 2
                && h.iter()
                    .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c));
            if upper_hex {
                let v = std::str::from_utf8(h)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(v) = v {
                    out.push(v);
                    i += 3;
                    any = true;
                    continue;
                }
            }
        }
        out.push(b);
        i += 1;
    }
    any.then_some(out)
}

/// Runs of base64 / base64url / hex characters long enough to decode.
pub(super) fn runs(t: &[u8]) -> impl Iterator<Item = &[u8]> {
    t.split(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_')))
        .filter(|r| r.len() >= MIN_RUN)
        .map(|r| r.get(..MAX_RUN).unwrap_or(r))
}

/// Base64 or base64url (padding optional) of `run`, from its start.
pub(super) fn base64(run: &[u8]) -> Option<Vec<u8>> {
    let val = |b: u8| -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => u32::from(b - b'A'),
            b'a'..=b'z' => u32::from(b - b'a') + 26,
            b'0'..=b'9' => u32::from(b - b'0') + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        })
    };
    let mut out = Vec::with_capacity(run.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for &b in run {
        acc = (acc << 6) | val(b)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xFF).ok()?);
        }
    }
    Some(out)
}

/// Hex of `run`: every byte a hex digit, an even count.
pub(super) fn hex(run: &[u8]) -> Option<Vec<u8>> {
    if !run.len().is_multiple_of(2) || !run.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    run.chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect()
}

/// Whether decoded bytes are text (UTF-8, almost all printable): random
/// bytes are not read.
pub(super) fn is_text(b: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(b) else {
        return false;
    };
    let total = s.chars().count();
    let printable = s
        .chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
        .count();
    total > 0 && printable * 20 >= total * 19
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;

    /// [`canonical`] as it was first written: one byte a step.
    fn canonical_byte_at_a_time(raw: &[u8], strip_markup: bool) -> Vec<u8> {
        let text = String::from_utf8_lossy(raw);
        let s = text.as_bytes();
        let mut out = Vec::with_capacity(s.len());
        let mut folder = Folder::default();
        let mut i = 0;
        while let Some(&b) = s.get(i) {
            let rest = s.get(i..).unwrap_or_default();
            let step = match b {
                b'\\' => json_escape(rest).map(|(c, len)| (Decoded::Char(c), len)),
                b'&' => reference(rest),
                b'<' if strip_markup => markup(rest).map(|len| (Decoded::Char('\0'), len)),
                b']' if strip_markup && rest.starts_with(b"]]>") => Some((Decoded::Char('\0'), 3)),
                b'-' if strip_markup && rest.starts_with(b"-->") => Some((Decoded::Char(' '), 3)),
                0x80.. => text
                    .get(i..)
                    .and_then(|t| t.chars().next())
                    .map(|c| (Decoded::Char(c), c.len_utf8())),
                _ => None,
            };
            match (b, step) {
                (b'<' | b']', Some((_, len))) => i += len,
                (_, Some((decoded, len))) => {
                    decoded.push(&mut folder, &mut out);
                    i += len;
                }
                (_, None) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        out
    }

    proptest::proptest! {
        /// Copying plain stretches whole reads as reading byte by byte:
        /// escapes, references, markup, comment ends and non-ASCII
        /// characters anywhere in a text, and bytes that are not UTF-8.
        #[test]
        fn canonical_reads_as_one_byte_a_step(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    "[a-z0-9 :/\"-]{0,12}",
                    proptest::sample::select(vec![
                        "\\u002d", "\\u200b", "\\ud83d\\ude00", "\\n", "\\/", "\\x", "&shy;",
                        "&#x2011;", "&#45;", "&amp", "&nbsp;", "<b>", "</i>", "<wbr/>",
                        "<![CDATA[", "]]>", "<!--", "-->", "- ->", "<3", "pat\u{ad}-0001",
                        "\u{ff10}\u{ff11}", "\u{2010}", "é", "\u{feff}",
                        "&Popf;", "&NotEqualTilde;", "\u{1d7ce}", "\u{440}", "\u{663}", "\u{2463}",
                        "\u{fb01}", "u\u{308}", "\u{3042}",
                    ]).prop_map(str::to_owned),
                ],
                0..16,
            ),
            invalid in proptest::option::of(0usize..40),
            strip in proptest::bool::ANY,
        ) {
            let mut raw = parts.concat().into_bytes();
            if let Some(at) = invalid {
                let at = at.min(raw.len());
                raw.insert(at, 0xFF);
            }
            proptest::prop_assert_eq!(
                canonical(&raw, strip),
                canonical_byte_at_a_time(&raw, strip),
                "{:?} strip={}", String::from_utf8_lossy(&raw), strip
            );
        }
    }
}
