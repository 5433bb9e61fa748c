//! Ids inside free text: UUIDs (dashed or as 32 hex digits), FHIR references
//! and prefixed ids, alias-shaped values, path segments and query values.

use super::cursor::{find_cursors, CURSOR_MIN};
use super::words::{Marks, WordStarts};
use super::{
    is, is_fhir_id_byte, is_token_byte, is_uuid, Pattern, TextHit, ALIAS, ALIAS_MAX, FHIR_ID_MAX,
    SEGMENT_ID, TOKEN,
};
use crate::alias::id::KindId;
use crate::alias::taxonomy::{KeyRole, Taxonomy};

/// Finds every UUID, reference id and prefixed FHIR id inside `text`, in order,
/// without overlaps. `out` is cleared first.
pub(crate) fn find_in_text<'t>(tax: &'t Taxonomy, text: &[u8], out: &mut Vec<TextHit<'t>>) {
    out.clear();
    find_hex32(text, out);
    // Every pattern below but cursors holds a `-` (UUIDs, FHIR ids) or a `/`
    // (references, path segments).
    let marks = Marks::new(text, b'-', b'/');
    let marked = marks.clone().next().is_some();
    if marked && text.len() >= 36 {
        find_uuids(text, marks.clone(), out);
    }
    if text.len() >= CURSOR_MIN {
        if out.len() > 1 {
            out.sort_by_key(|h| h.range.start);
        }
        find_cursors(text, out);
    }
    if out.len() > 1 {
        out.sort_by_key(|h| h.range.start);
    }
    if !marked {
        find_query_values(tax, text, out);
        return;
    }
    let uuids = out.len();
    let mut next_uuid = 0;
    let mut i = 0;
    // Only word starts next to a `/` or `-` are tried (see `WordStarts`).
    let mut starts = WordStarts::new(text, marks);
    while let Some((w, word_end)) = starts.next_outside(out.get(..uuids).unwrap_or_default()) {
        if w < i {
            // Inside the last hit: its marks need not be read.
            starts.skip_to(i);
            continue;
        }
        i = w;
        // Jump over UUIDs already found.
        while let Some(u) = out.get(next_uuid).filter(|_| next_uuid < uuids) {
            if u.range.end <= i {
                next_uuid += 1;
            } else {
                break;
            }
        }
        if let Some(u) = out.get(next_uuid).filter(|_| next_uuid < uuids) {
            if u.range.contains(&i) {
                i = u.range.end;
                starts.skip_to(i);
                continue;
            }
        }
        let next = text.get(word_end).copied();
        let after_slash = i > 0 && text.get(i - 1) == Some(&b'/');
        // Every pattern below follows a `/` or runs up to a `/` or `-`.
        if !after_slash && !matches!(next, Some(b'/' | b'-')) {
            continue;
        }
        let word = text.get(i..word_end).unwrap_or_default();
        let limit = out
            .get(next_uuid)
            .filter(|_| next_uuid < uuids)
            .map_or(text.len(), |u| u.range.start);
        // A path segment naming a kind: the next segment is an id of it.
        let seg_end = if after_slash {
            i + text
                .get(i..)
                .map_or(0, |t| t.iter().take_while(|b| is_token_byte(**b)).count())
        } else {
            i
        };
        if after_slash && text.get(seg_end) == Some(&b'/') {
            let kind = text.get(i..seg_end).and_then(|w| tax.path_segment_kind(w));
            if let Some(kind) = kind {
                let start = seg_end + 1;
                let end = start
                    + text.get(start..limit).map_or(0, |t| {
                        t.iter()
                            .take(FHIR_ID_MAX + 1)
                            .take_while(|&&b| is(b, SEGMENT_ID))
                            .count()
                    });
                let mut end = end;
                while end > start && text.get(end - 1) == Some(&b'.') {
                    end -= 1;
                }
                let seg = text.get(start..end).unwrap_or_default();
                if end - start <= FHIR_ID_MAX
                    && seg.iter().any(u8::is_ascii_digit)
                    && !is_date_like(seg)
                    && !escape_at(text, end)
                {
                    out.push(TextHit {
                        range: start..end,
                        pattern: Pattern::Segment(kind),
                    });
                    i = end;
                    continue;
                }
            }
        }
        if next == Some(b'/') {
            if let Some((kinds, configured)) = tax.resource_type(word) {
                let start = word_end + 1;
                let mut end = start
                    + text.get(start..limit).map_or(0, |t| {
                        t.iter()
                            .take(FHIR_ID_MAX)
                            .take_while(|b| is_fhir_id_byte(**b))
                            .count()
                    });
                // A sentence may end right after a reference.
                while end > start && text.get(end - 1) == Some(&b'.') {
                    end -= 1;
                }
                // A type nobody configured needs a digit in the id: `Group/Team`
                // in prose is not a reference.
                let plausible = configured
                    || text
                        .get(start..end)
                        .is_some_and(|t| t.iter().any(u8::is_ascii_digit));
                if end > start && plausible && !escape_at(text, end) {
                    out.push(TextHit {
                        range: start..end,
                        pattern: Pattern::Reference(kinds),
                    });
                    i = end;
                    continue;
                }
            }
        } else if next == Some(b'-') {
            if let Some(kinds) = tax.fhir_prefix_kinds(word) {
                let start = word_end + 1;
                let end = start
                    + text
                        .get(start..limit)
                        .map_or(0, |t| t.iter().take_while(|b| b.is_ascii_digit()).count());
                if end > start
                    && !text.get(end).copied().is_some_and(is_token_byte)
                    && !escape_at(text, end)
                {
                    out.push(TextHit {
                        range: i..end,
                        pattern: Pattern::FhirId(kinds),
                    });
                    i = end;
                    continue;
                }
            }
            // A value shaped like an alias (`ward-101`, `patient-k7q2-001`)
            // is a raw id like any other: left alone, the model could not
            // tell it from an alias of another record.
            let run = text.get(i..limit).map_or(0, |t| {
                t.iter()
                    .take(ALIAS_MAX)
                    .take_while(|&&b| is(b, ALIAS))
                    .count()
            });
            let mut end = i + run;
            while end > i && text.get(end - 1) == Some(&b'-') {
                end -= 1;
            }
            // Cheap first: an alias ends in `-` and at least three digits.
            let tail = text.get(i..end).map_or(0, |t| {
                t.iter().rev().take_while(|b| b.is_ascii_digit()).count()
            });
            let dash_before_tail = end > i + tail && text.get(end - tail - 1) == Some(&b'-');
            if tail >= 3
                && dash_before_tail
                && !text.get(end).copied().is_some_and(is_token_byte)
                && !escape_at(text, end)
            {
                let kind = text
                    .get(i..end)
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .and_then(|t| tax.parse_alias(t))
                    .map(|p| p.kind);
                if let Some(kind) = kind {
                    out.push(TextHit {
                        range: i..end,
                        pattern: Pattern::AliasShaped(kind),
                    });
                    i = end;
                    continue;
                }
            }
        }
    }
    out.sort_by_key(|h| h.range.start);
    find_query_values(tax, text, out);
}

/// Appends the values of query (or form) parameters whose key names an id or
/// a kind (`?patientId=482913`, `&patient=1,2`, `id=7` at the text's start
/// or after a space)
/// and that no hit of `out` (sorted) covers; `out` stays sorted. A value is a
/// run of id bytes holding a digit, not a date; a comma-joined list is one
/// value each.
fn find_query_values<'t>(tax: &'t Taxonomy, text: &[u8], out: &mut Vec<TextHit<'t>>) {
    let found = out.len();
    for eq in memchr::memchr_iter(b'=', text) {
        let head = text.get(..eq).unwrap_or_default();
        let key_len = head
            .iter()
            .rev()
            .take(64)
            .take_while(|b| is(**b, TOKEN) || **b == b'.')
            .count();
        let key_start = eq - key_len;
        let opens = key_start == 0
            || text
                .get(key_start - 1)
                .is_some_and(|b| matches!(b, b'?' | b'&' | b';') || b.is_ascii_whitespace());
        if key_len == 0 || !opens {
            continue;
        }
        let Some(key) = text
            .get(key_start..eq)
            .and_then(|k| std::str::from_utf8(k).ok())
        else {
            continue;
        };
        let kind = tax
            .id_named_kind(key)
            .or_else(|| tax.object_key_kind(key))
            .or_else(|| {
                matches!(
                    tax.key_role(key),
                    Some(KeyRole::Id | KeyRole::Fhir | KeyRole::Slug)
                )
                .then(|| tax.fallback_kind())
            });
        let Some(kind) = kind else {
            continue;
        };
        let mut start = eq + 1;
        loop {
            let run = text.get(start..).map_or(0, |t| {
                t.iter()
                    .take(FHIR_ID_MAX + 1)
                    .take_while(|&&b| is(b, SEGMENT_ID))
                    .count()
            });
            let mut end = start + run;
            while end > start && text.get(end - 1) == Some(&b'.') {
                end -= 1;
            }
            let value = text.get(start..end).unwrap_or_default();
            let range = start..end;
            let before = out.get(..found).unwrap_or_default();
            let i = before.partition_point(|h| h.range.end <= range.start);
            let covered = before.get(i).is_some_and(|h| h.range.start < range.end);
            if run <= FHIR_ID_MAX
                && value.iter().any(u8::is_ascii_digit)
                && !is_date_like(value)
                && !escape_at(text, end)
                && !covered
            {
                out.push(TextHit {
                    range,
                    pattern: Pattern::Query(kind),
                });
            }
            if text.get(end) != Some(&b',') || run == 0 {
                break;
            }
            start = end + 1;
        }
    }
    if out.len() > found {
        out.sort_by_key(|h| h.range.start);
    }
}

/// Whether a percent escape or a character reference starts at `i`: an id
/// cut short there goes on in encoded form (`pat&#45;000123`), and is found
/// whole in the decoded text instead.
fn escape_at(text: &[u8], i: usize) -> bool {
    match text.get(i) {
        Some(b'%') => text
            .get(i + 1..i + 3)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)),
        Some(b'&') => text.get(i + 1..).is_some_and(|t| {
            t.iter()
                .take(34)
                .take_while(|b| **b != b';')
                .all(|b| b.is_ascii_alphanumeric() || *b == b'#')
                && t.iter().take(34).any(|b| *b == b';')
        }),
        _ => false,
    }
}

/// Whether a path segment is a date (`2025-03-25`), not an id.
fn is_date_like(seg: &[u8]) -> bool {
    seg.len() >= 10
        && seg.iter().take(10).enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
}

/// Appends every UUID written without dashes: a run of exactly 32 hex digits,
/// with letters and digits, standing alone (not inside a longer token such as
/// a trace id).
///
/// Such a run is 32 hex digits in a row, so the byte 31 places ahead of the
/// next possible start decides: when it is no hex digit, no run starts
/// before it and the search jumps past it (most text is read one byte in 32).
fn find_hex32(text: &[u8], out: &mut Vec<TextHit<'_>>) {
    let hex = |i: usize| text.get(i).is_some_and(u8::is_ascii_hexdigit);
    // Every hex run that could hold a hit starts at or after `k`.
    let mut k = 0;
    while let Some(&probe) = text.get(k + 31) {
        if !probe.is_ascii_hexdigit() {
            k += 32;
            continue;
        }
        // The hex run around the probe: back to `k` at most, then forward.
        let mut start = k + 31;
        while start > k && hex(start - 1) {
            start -= 1;
        }
        let mut end = k + 32;
        while hex(end) {
            end += 1;
        }
        let alone = (start == 0 || !text.get(start - 1).copied().is_some_and(is_token_byte))
            && !text.get(end).copied().is_some_and(is_token_byte);
        if end - start == 32 && alone {
            if let Some(run) = text.get(start..end) {
                if run.iter().any(u8::is_ascii_digit) && run.iter().any(u8::is_ascii_alphabetic) {
                    out.push(TextHit {
                        range: start..end,
                        pattern: Pattern::Uuid,
                    });
                }
            }
        }
        k = end + 1;
    }
}

/// Appends every UUID in `text` (no boundary required: a UUID glued to other
/// characters is still a raw id). `marks`: the text's `-` (and `/`) bytes.
fn find_uuids(text: &[u8], marks: Marks<'_>, out: &mut Vec<TextHit<'_>>) {
    // A UUID has its first dash at offset 8: look at each dash.
    let mut from = 8;
    for dash in marks {
        if dash < from || text.get(dash) != Some(&b'-') {
            continue;
        }
        let start = dash - 8;
        if text.get(start..start + 36).is_some_and(is_uuid) {
            out.push(TextHit {
                range: start..start + 36,
                pattern: Pattern::Uuid,
            });
            from = start + 36 + 8;
        }
    }
}

/// The kind of a UUID found inside text, from what precedes it: a path segment
/// (`/patients/<uuid>`), a resource type (`Patient/<uuid>`) or a query parameter
/// (`?groupId=<uuid>`).
pub(crate) fn kind_before(tax: &Taxonomy, text: &[u8], start: usize) -> Option<KindId> {
    let before = text.get(..start)?;
    match before.last()? {
        b'/' => {
            let seg_start = before.len() - 1;
            let seg_begin = before
                .get(..seg_start)?
                .iter()
                .rposition(|b| !is_token_byte(*b))
                .map_or(0, |p| p + 1);
            let seg = std::str::from_utf8(before.get(seg_begin..seg_start)?).ok()?;
            tax.path_segment_kind(seg).or_else(|| {
                tax.resource_type_kinds(seg)
                    .and_then(|k| k.first().copied())
            })
        }
        b'=' => {
            let eq = before.len() - 1;
            let name_begin = before
                .get(..eq)?
                .iter()
                .rposition(|b| matches!(b, b'?' | b'&' | b';'))
                .map_or(0, |p| p + 1);
            tax.id_field_kind(std::str::from_utf8(before.get(name_begin..eq)?).ok()?)
        }
        _ => None,
    }
}
