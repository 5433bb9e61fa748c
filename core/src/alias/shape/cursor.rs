//! Opaque cursors: base64 or base64url runs whose decoded bytes are printable
//! text holding an id.

use super::{is, Pattern, TextHit, BASE64};

/// The shortest cursor, in base64 characters (its `=` padding not counted).
pub(super) const CURSOR_MIN: usize = 16;
/// The longest, with its padding.
const CURSOR_MAX: usize = 512;

/// Whether base64 characters (either alphabet, no padding) decode to printable
/// text of eight bytes or more holding a digit and a byte that is neither a
/// letter nor a digit. The decoded bytes are looked at one by one, not kept:
/// most words and paths fail on their first bytes.
pub(super) fn decodes_to_id_text(chars: &[u8]) -> bool {
    if chars.len() % 4 == 1 {
        return false;
    }
    let (mut count, mut digit, mut other) = (0usize, false, false);
    for byte in base64_bytes(chars) {
        if !(0x20..0x7f).contains(&byte) {
            return false;
        }
        count += 1;
        digit |= byte.is_ascii_digit();
        other |= !byte.is_ascii_alphanumeric();
    }
    count >= 8 && digit && other
}

/// The bytes base64 characters (either alphabet, no padding) decode to, one
/// by one as they are asked for; a trailing partial byte is dropped.
pub(crate) fn base64_bytes(chars: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut acc: u32 = 0;
    let mut bits = 0;
    chars.iter().filter_map(move |&c| {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            _ => 63,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        (bits >= 8).then(|| {
            bits -= 8;
            ((acc >> bits) & 0xff) as u8
        })
    })
}

/// Finds the opaque cursors inside `text` that carry an id: a run of base64
/// characters bounded by other bytes (`?cursor=…&limit=20`), or the part of
/// such a run after its last `/` (`/pages/<cursor>`), with its `=` padding.
/// The hits already in `out` (UUIDs), sorted, are not looked into; a run
/// ends where one begins.
pub(super) fn find_cursors(text: &[u8], out: &mut Vec<TextHit<'_>>) {
    let found_before = out.len();
    let mut next_hit = 0;
    // Every run that could hold a cursor starts at or after `k`, so one is
    // only there if the byte `CURSOR_MIN - 1` after `k` is base64, and every
    // byte back to `k`: a break found walking back moves `k` past it (most
    // words are read only in part).
    let mut k = 0;
    loop {
        while out
            .get(next_hit)
            .is_some_and(|h| next_hit < found_before && h.range.end <= k)
        {
            next_hit += 1;
        }
        let limit = out
            .get(next_hit)
            .filter(|_| next_hit < found_before)
            .map_or(text.len(), |h| h.range.start);
        if k + CURSOR_MIN > limit {
            match out.get(next_hit).filter(|_| next_hit < found_before) {
                Some(h) => {
                    k = h.range.end;
                    continue;
                }
                None => break,
            }
        }
        let b64 = |i: usize| i < limit && text.get(i).is_some_and(|b| is(*b, BASE64));
        if !b64(k + CURSOR_MIN - 1) {
            k += CURSOR_MIN;
            continue;
        }
        let mut start = k + CURSOR_MIN - 1;
        while start > k && b64(start - 1) {
            start -= 1;
        }
        if start > k {
            k = start;
            continue;
        }
        let mut end = k + CURSOR_MIN;
        while b64(end) {
            end += 1;
        }
        let padding = text
            .get(end..limit)
            .map_or(0, |t| t.iter().take(2).take_while(|b| **b == b'=').count());
        let padded = end + padding;
        let is_cursor = |from: usize| {
            end - from >= CURSOR_MIN
                && padded - from <= CURSOR_MAX
                && text.get(from..end).is_some_and(decodes_to_id_text)
        };
        // The run itself (`?cursor=…&`), else what follows its last `/`
        // (`/pages/<cursor>`: a `/` inside a path segment would be escaped).
        let found = if is_cursor(start) {
            Some(start)
        } else {
            text.get(start..end)
                .and_then(|run| run.iter().rposition(|b| *b == b'/'))
                .map(|at| start + at + 1)
                .filter(|&from| is_cursor(from))
        };
        if let Some(from) = found {
            out.push(TextHit {
                range: from..padded,
                pattern: Pattern::Cursor,
            });
        }
        k = end + 1;
    }
}
