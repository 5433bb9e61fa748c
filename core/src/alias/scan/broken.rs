//! Ids broken by an invisible or look-alike character: learning
//! canonicalises first.
//!
//! `pat-0001&shy;24`, `Patient/4829\u{200b}13`, `enc‑0077` (U+2011) or
//! `pat-０００１２４` (full-width digits) are one id to a reader, but the text
//! patterns see a shorter id (`pat-0001`, another patient) or none at all.
//! Aliasing the prefix would hand the model an alias that decodes to another
//! record, so a body where an id shape or a known id runs across such a
//! character is withheld ([`crate::alias::rewrite::RewriteError::BrokenId`]).
//!
//! The check reads a canonical copy of the text, made only when the body
//! holds a candidate byte: invisible characters (soft hyphen, zero-width
//! space and joiners, word joiner, BOM, bidi marks; `<wbr>`) removed, dash
//! look-alikes (U+2010–U+2015, U+2212, U+FE58, U+FE63, U+FF0D) folded to
//! `-`, full-width ASCII (U+FF01–U+FF5E) folded to ASCII — written raw, as
//! HTML character references or as JSON `\u` escapes (but `&hyphen;`,
//! `&dash;`, `&minus;` and the numeric references of U+2010, U+2011 and
//! U+2212, which the scanner reads as `-` already). Around each such
//! character the canonical token is searched for id shapes and known ids;
//! one that spans the character breaks the body. An invisible character
//! between words (`Kranken&shy;haus`) breaks nothing.

use crate::alias::known::KnownIds;
use crate::alias::shape;
use crate::alias::taxonomy::Taxonomy;

/// What happened to one odd character in the canonical text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Odd {
    /// Position in the canonical text: where the removed character stood,
    /// or the folded byte.
    at: usize,
    /// Removed (`true`) or folded to one byte (`false`).
    removed: bool,
    /// Offset in the body.
    raw: usize,
}

/// How far a token is read on either side of an odd character.
const REACH: usize = 128;

/// The canonical form of a character: `None` when it is not odd,
/// `Some(None)` removed, `Some(Some(b))` folded to `b`.
fn fold(c: char) -> Option<Option<u8>> {
    let u = u32::from(c);
    match u {
        0xAD | 0x34F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0xFEFF => {
            Some(None)
        }
        0x2010..=0x2015 | 0x2212 | 0xFE58 | 0xFE63 | 0xFF0D => Some(Some(b'-')),
        0xFF01..=0xFF5E => u8::try_from(u - 0xFF01 + 0x21).ok().map(Some),
        _ => None,
    }
}

/// Whether the body may hold an odd character in any writing.
fn may_hold_odd(body: &[u8]) -> bool {
    memchr::memchr3(0xC2, 0xE2, 0xEF, body).is_some()
        || memchr::memchr(b'&', body).is_some()
        || memchr::memmem::find(body, b"\\u").is_some()
        || memchr::memmem::find(body, b"<wbr").is_some()
        || memchr::memchr(0xCD, body).is_some()
        || memchr::memchr(0xE1, body).is_some()
}

/// A named or numeric character reference at the start of `s` whose
/// character is odd: (its fold, its length).
fn odd_reference(s: &[u8]) -> Option<(Option<u8>, usize)> {
    let end = s.iter().take(24).position(|b| *b == b';')?;
    let name = std::str::from_utf8(s.get(1..end)?).ok()?;
    let c = if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse::<u32>().ok()?,
        };
        // Written as a reference, these read as `-` to the scanner already
        // (`known::MappedView`): the id is found and replaced whole.
        if matches!(code, 0x2010 | 0x2011 | 0x2212) {
            return None;
        }
        char::from_u32(code)?
    } else {
        match name {
            "shy" => '\u{ad}',
            "ZeroWidthSpace"
            | "NegativeVeryThinSpace"
            | "NegativeThinSpace"
            | "NegativeMediumSpace"
            | "NegativeThickSpace" => '\u{200b}',
            "zwnj" => '\u{200c}',
            "zwj" => '\u{200d}',
            "lrm" => '\u{200e}',
            "rlm" => '\u{200f}',
            "NoBreak" => '\u{2060}',
            "ndash" => '\u{2013}',
            "mdash" => '\u{2014}',
            "horbar" => '\u{2015}',
            _ => return None,
        }
    };
    fold(c).map(|f| (f, end + 1))
}

/// A JSON `\uXXXX` escape at the start of `s` whose character is odd.
fn odd_json_escape(s: &[u8]) -> Option<(Option<u8>, usize)> {
    let hex = std::str::from_utf8(s.get(2..6)?).ok()?;
    let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
    fold(c).map(|f| (f, 6))
}

/// `<wbr>`, `<wbr/>` or `<wbr />` at the start of `s`: its length.
fn wbr(s: &[u8]) -> Option<usize> {
    let head = s.get(..4)?;
    if !head.eq_ignore_ascii_case(b"<wbr") {
        return None;
    }
    let rest = s.get(4..)?;
    let close = rest.iter().take(3).position(|b| *b == b'>')?;
    rest.get(..close)
        .is_some_and(|between| between.iter().all(|b| *b == b' ' || *b == b'/'))
        .then_some(4 + close + 1)
}

/// The canonical text of `body` and its odd characters; `None` when it has
/// none.
fn canonical(body: &str) -> Option<(Vec<u8>, Vec<Odd>)> {
    let bytes = body.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut odd = Vec::new();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let rest = bytes.get(i..).unwrap_or_default();
        // Bytes no rule below reads are copied a stretch at a time.
        let stretch = rest
            .iter()
            .position(|b| matches!(b, b'&' | b'\\' | b'<' | 0x80..))
            .unwrap_or(rest.len());
        if stretch > 0 {
            out.extend_from_slice(rest.get(..stretch).unwrap_or_default());
            i += stretch;
            continue;
        }
        let found = match b {
            b'&' => odd_reference(rest),
            b'\\' if rest.get(1) == Some(&b'u') => odd_json_escape(rest),
            b'<' => wbr(rest).map(|len| (None, len)),
            0x80.. => body
                .get(i..)
                .and_then(|s| s.chars().next())
                .and_then(|c| fold(c).map(|f| (f, c.len_utf8()))),
            _ => None,
        };
        match found {
            Some((f, len)) => {
                odd.push(Odd {
                    at: out.len(),
                    removed: f.is_none(),
                    raw: i,
                });
                if let Some(f) = f {
                    out.push(f);
                }
                i += len;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    (!odd.is_empty()).then_some((out, odd))
}

/// Bytes that end a token of the canonical text.
fn ends_token(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'"' | b'\''
                | b'<'
                | b'>'
                | b'('
                | b')'
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b','
                | b'|'
                | b'\\'
        )
}

/// The body offset of the first id shape of `tax` (when given) or known id
/// that runs across an invisible or look-alike character; `None` when there
/// is none.
pub(crate) fn broken_id(
    tax: Option<&Taxonomy>,
    known: Option<&KnownIds<'_>>,
    body: &[u8],
) -> Option<usize> {
    if !may_hold_odd(body) {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    let (canon, odd) = canonical(text)?;
    let mut hits = Vec::new();
    let mut checked_to = 0;
    for o in &odd {
        if o.at < checked_to {
            continue;
        }
        let from = o.at.saturating_sub(REACH);
        let head = canon.get(from..o.at).unwrap_or_default();
        let start = head
            .iter()
            .rposition(|b| ends_token(*b))
            .map_or(from, |p| from + p + 1);
        let tail = canon.get(o.at..).unwrap_or_default();
        let end = o.at
            + tail
                .iter()
                .take(REACH)
                .position(|b| ends_token(*b))
                .unwrap_or(tail.len().min(REACH));
        let token = canon.get(start..end).unwrap_or_default();
        // Every odd character of this token, in token coordinates.
        let inside: Vec<(usize, bool)> = odd
            .iter()
            .filter(|x| x.at >= start && x.at <= end)
            .map(|x| (x.at - start, x.removed))
            .collect();
        let spans = |s: usize, e: usize| {
            inside.iter().any(|&(p, removed)| {
                if removed {
                    s < p && p < e
                } else {
                    s <= p && p < e
                }
            })
        };
        if let Some(tax) = tax {
            shape::find_in_text(tax, token, &mut hits);
            if hits.iter().any(|h| spans(h.range.start, h.range.end)) {
                return Some(o.raw);
            }
        }
        let mut broken = false;
        if let Some(k) = known {
            k.for_each(token, |r, _| broken |= spans(r.start, r.end));
        }
        if broken {
            return Some(o.raw);
        }
        checked_to = end + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;

    /// [`canonical`] as it was first written: one byte a step.
    fn canonical_byte_at_a_time(body: &str) -> Option<(Vec<u8>, Vec<Odd>)> {
        let bytes = body.as_bytes();
        let (mut out, mut odd) = (Vec::new(), Vec::new());
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            let rest = bytes.get(i..).unwrap_or_default();
            let found = match b {
                b'&' => odd_reference(rest),
                b'\\' if rest.get(1) == Some(&b'u') => odd_json_escape(rest),
                b'<' => wbr(rest).map(|len| (None, len)),
                0x80.. => body
                    .get(i..)
                    .and_then(|s| s.chars().next())
                    .and_then(|c| fold(c).map(|f| (f, c.len_utf8()))),
                _ => None,
            };
            match found {
                Some((f, len)) => {
                    odd.push(Odd {
                        at: out.len(),
                        removed: f.is_none(),
                        raw: i,
                    });
                    out.extend(f);
                    i += len;
                }
                None => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        (!odd.is_empty()).then_some((out, odd))
    }

    proptest::proptest! {
        /// Copying plain stretches whole reads as reading byte by byte.
        #[test]
        fn canonical_reads_as_one_byte_a_step(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    "[a-z0-9 :/\"-]{0,12}",
                    proptest::sample::select(vec![
                        "&shy;", "&#173;", "&#xAD;", "&#x2011;", "&amp;", "&ndash;", "&",
                        "\\u200b", "\\u2010", "\\u0041", "\\n", "\\", "<wbr>", "<wbr />",
                        "<b>", "\u{ad}", "\u{200b}", "\u{2011}", "\u{ff10}", "\u{fc}", "\u{feff}",
                    ]).prop_map(str::to_owned),
                ],
                0..16,
            ),
        ) {
            let body = parts.concat();
            proptest::prop_assert_eq!(canonical(&body), canonical_byte_at_a_time(&body), "{:?}", body);
        }
    }

    fn broken(body: &str) -> bool {
        broken_id(Some(&Taxonomy::default()), None, body.as_bytes()).is_some()
    }

    #[test]
    fn ids_broken_by_odd_characters_are_found() {
        for body in [
            "pat-0001&shy;24",
            "pat-0001&#173;24",
            "pat-0001&#xAD;24",
            "pat-0001\u{ad}24",
            "Patient/4829\u{200b}13",
            r#"{"note":"Patient/4829\u200b13"}"#,
            "enc\u{2011}000771",
            "enc\u{2013}000771",
            "pat-\u{ff10}\u{ff10}\u{ff10}\u{ff11}\u{ff12}\u{ff14}",
            "pat-0001<wbr>24",
            "039b70b8-92f7-44b7\u{200b}-9c91-4e3f0e900c71",
            "039b70b8\u{2010}92f7-44b7-9c91-4e3f0e900c71",
        ] {
            assert!(broken(body), "{body}");
        }
    }

    #[test]
    fn odd_characters_between_words_break_nothing() {
        for body in [
            "Kranken&shy;haus",
            "Kranken\u{ad}haus pat-000124 seen",
            "pat-000124\u{200b} and \u{200b}pat-000125",
            "2024\u{2013}2025, S. 12\u{2013}15",
            "Dr. M\u{fc}ller\u{2013}L\u{fc}denscheid",
            "\u{feff}{\"id\":\"pat-000124\"}",
            "\u{ff21}\u{ff22}\u{ff23} 12\u{ff05}",
            "a &amp; b &lt;wbr&gt;",
        ] {
            assert!(!broken(body), "{body}");
        }
    }

    #[test]
    fn known_ids_broken_by_odd_characters_are_found() {
        let tax = Taxonomy::default();
        let known = KnownIds::with_taxonomy(["anna-k-4471", "4829137"], &tax);
        assert!(broken_id(None, Some(&known), "anna\u{2011}k-4471".as_bytes()).is_some());
        assert!(broken_id(None, Some(&known), "48291\u{200b}37".as_bytes()).is_some());
        assert!(broken_id(None, Some(&known), "anna-k-4471\u{200b}".as_bytes()).is_none());
    }
}
