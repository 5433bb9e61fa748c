//! Where a match counts: token and class boundaries, host names and e-mail
//! addresses, and the places a word-like id stands as a record's id.

use super::MIN_NUMERIC_LEN;
use crate::alias::taxonomy::Taxonomy;

/// Bytes that end a URL or address token in text.
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

/// How far a token is read back from a match.
const TOKEN_REACH: usize = 2048;

/// Whether the match starting at `i` lies in the host of a URL
/// (`http://pat-000123.example/`, user info included) or in an e-mail
/// address (a token holding `@` but no `://`).
pub(super) fn in_host_or_email(t: &[u8], i: usize) -> bool {
    let from = i.saturating_sub(TOKEN_REACH);
    let before = t.get(from..i).unwrap_or_default();
    let start = before
        .iter()
        .rposition(|b| ends_token(*b))
        .map_or(from, |p| from + p + 1);
    let head = t.get(start..i).unwrap_or_default();
    if let Some(p) = memchr::memmem::rfind(head, b"://") {
        // In the authority while no `/`, `?` or `#` came after the scheme.
        return !head
            .get(p + 3..)
            .unwrap_or_default()
            .iter()
            .any(|b| matches!(b, b'/' | b'?' | b'#'));
    }
    let rest = t.get(i..).unwrap_or_default();
    let end = rest
        .iter()
        .take(TOKEN_REACH)
        .position(|b| ends_token(*b))
        .unwrap_or(rest.len().min(TOKEN_REACH));
    head.contains(&b'@') || rest.get(..end).is_some_and(|r| r.contains(&b'@'))
}

/// Whether a word-like value at `i..e` of `t` stands as a record's id: a
/// whole path segment after a record type or a kind's path segment, or a
/// whole query value under an id-named parameter.
pub(super) fn stands_as_record_id(tax: &Taxonomy, t: &[u8], i: usize, e: usize) -> bool {
    let ends_value = t
        .get(e)
        .is_none_or(|b| ends_token(*b) || matches!(b, b'/' | b'?' | b'#' | b'&' | b';' | b'.'));
    // `Patient/example.` ends a sentence; `example.json` is a file name.
    let ends_value = ends_value
        && !(t.get(e) == Some(&b'.') && t.get(e + 1).is_some_and(u8::is_ascii_alphanumeric));
    if !ends_value {
        return false;
    }
    let Some(before) = i.checked_sub(1).and_then(|b| t.get(b)) else {
        return false;
    };
    let word_before = |end: usize, stop: &dyn Fn(u8) -> bool| {
        let from = end.saturating_sub(64);
        let head = t.get(from..end).unwrap_or_default();
        let s = head
            .iter()
            .rposition(|b| stop(*b))
            .map_or(from, |p| from + p + 1);
        t.get(s..end).unwrap_or_default()
    };
    match before {
        b'/' => {
            let seg = word_before(i - 1, &|b| b == b'/' || ends_token(b));
            tax.resource_type(seg).is_some() || tax.path_segment_kind(seg).is_some()
        }
        b'=' => {
            let name = word_before(i - 1, &|b| matches!(b, b'?' | b'&' | b';') || ends_token(b));
            std::str::from_utf8(name).is_ok_and(|n| {
                let m = tax.key_meaning(n);
                m.role.is_some() || m.id_kind.is_some() || tax.object_key_kind(n).is_some()
            })
        }
        _ => false,
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
    (a.is_ascii_digit() && b.is_ascii_digit())
        || (a.is_ascii_alphabetic() && b.is_ascii_alphabetic())
}

/// Boundary rule at the start of a match at `i` (see the module doc).
pub(crate) fn start_ok(t: &[u8], i: usize) -> bool {
    let (Some(&first), Some(&before)) = (t.get(i), i.checked_sub(1).and_then(|b| t.get(b))) else {
        return true;
    };
    if !same_class(before, first) {
        return true;
    }
    // Glued by a percent escape (`%2Fpat-1`).
    i >= 3
        && t.get(i - 3) == Some(&b'%')
        && t.get(i - 2).is_some_and(u8::is_ascii_hexdigit)
        && before.is_ascii_hexdigit()
}

/// Boundary rule at the end `e` of a match (see the module doc).
pub(crate) fn end_ok(t: &[u8], e: usize) -> bool {
    match (e.checked_sub(1).and_then(|l| t.get(l)), t.get(e)) {
        (Some(&last), Some(&after)) => !same_class(last, after),
        _ => true,
    }
}
