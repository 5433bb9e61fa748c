//! Finding alias tokens (and their near-misses) in a text, and counting the
//! raw-id-shaped values beside them.

use super::percent::percent_decode;
use super::{Field, Hit, Place, RequestScan};
use crate::alias::grammar;
use crate::alias::id::Form;
use crate::alias::id::KindId;
use crate::alias::shape;
use crate::alias::taxonomy::Taxonomy;
use std::ops::Range;

impl RequestScan {
    /// Finds alias tokens in `text`, read as written and percent-decoded;
    /// `want` is the form the surrounding field asks for. Counts raw-id-shaped
    /// tokens of `place`.
    pub(super) fn find(
        &mut self,
        tax: &Taxonomy,
        text: &str,
        field: Field,
        place: Place,
        out: &mut Vec<Hit>,
    ) {
        let bytes = text.as_bytes();
        if !bytes.contains(&b'%') {
            return self.find_in(tax, bytes, None, field, place, out);
        }
        let (decoded, origin) = percent_decode(bytes);
        self.find_in(tax, &decoded, Some(&origin), field, place, out);
    }

    /// Finds tokens in `bytes`; `origin` maps each byte (and the end) to its
    /// offset in the text as written when `bytes` is percent-decoded.
    fn find_in(
        &mut self,
        tax: &Taxonomy,
        bytes: &[u8],
        origin: Option<&[usize]>,
        field: Field,
        place: Place,
        out: &mut Vec<Hit>,
    ) {
        let at = |i: usize| origin.map_or(Some(i), |o| o.get(i).copied());
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes.get(i).copied().unwrap_or(0);
            let start = shape::is_token_byte(b)
                && !i
                    .checked_sub(1)
                    .and_then(|p| bytes.get(p))
                    .copied()
                    .is_some_and(shape::is_token_byte);
            if !start {
                i += 1;
                continue;
            }
            // One run of token bytes (`Arztbrief_patient-k7q2-001_2025`):
            // an alias as a whole (or a near-miss of one), else every epoch
            // alias glued inside it.
            let len = bytes.get(i..).map_or(0, |t| {
                t.iter().take_while(|b| shape::is_token_byte(**b)).count()
            });
            let end = i + len;
            let run = bytes
                .get(i..end)
                .and_then(|t| std::str::from_utf8(t).ok())
                .unwrap_or("");
            let whole = if run.contains('_') {
                None
            } else if tax.looks_like_alias(run) {
                Some(run.to_owned())
            } else {
                near_miss(tax, run)
            };
            let found: Vec<(Range<usize>, String)> = match whole {
                Some(alias) => vec![(i..end, alias)],
                None => {
                    let glued = glued_aliases(tax, run);
                    // Raw ids whole or glued to other text (`Befund_<uuid>`,
                    // an ETag `<uuid>-v7`), and a number after a FHIR
                    // resource type (`Patient/482913`, also in a query's
                    // `subject=Patient/482913`).
                    let numeric = run.bytes().all(|b| b.is_ascii_digit())
                        && resource_type_before(tax, bytes, i).is_some();
                    for _ in 0..raw_ids_in(tax, run, &glued) + usize::from(numeric) {
                        self.raw.bump(place);
                    }
                    glued
                        .into_iter()
                        .filter_map(|r| Some((i + r.start..i + r.end, run.get(r)?.to_owned())))
                        .collect()
                }
            };
            for (range, alias) in found {
                let (Some(from), Some(to)) = (at(range.start), at(range.end)) else {
                    continue;
                };
                let typed = resource_type_before(tax, bytes, range.start);
                // The most specific name of a kind wins: `Type/` before the
                // alias, else the path segment before it, else the field's.
                let kinds = match typed {
                    Some(kinds) => kinds.to_vec(),
                    None => match (place, segment_kind_before(tax, bytes, range.start)) {
                        (Place::Path, Some(k)) => vec![k],
                        _ => field.kind.into_iter().collect(),
                    },
                };
                let written = bytes
                    .get(range.clone())
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .unwrap_or("");
                let index = self.alias_index(&alias, written);
                out.push(Hit {
                    range: from..to,
                    alias: index,
                    want: if typed.is_some() {
                        Some(Form::Fhir)
                    } else {
                        field.want
                    },
                    kinds,
                    encoded: to - from != range.len(),
                });
            }
            i = end.max(i + 1);
        }
    }

    /// Counts path segments right after a kind's segment that are numbers
    /// (`/patients/482913`): raw ids, whatever their length.
    pub(super) fn numeric_after_kind(&mut self, tax: &Taxonomy, path: &str) {
        let mut prev_kind = false;
        for segment in path.split('/') {
            let (decoded, _) = percent_decode(segment.as_bytes());
            let numeric = !decoded.is_empty() && decoded.iter().all(u8::is_ascii_digit);
            if prev_kind && numeric {
                self.raw.bump(Place::Path);
            }
            prev_kind = tax.path_segment_kind(segment).is_some();
        }
    }

    pub(super) fn scan_lossy(&mut self, tax: &Taxonomy, bytes: &[u8]) {
        // Scan each valid UTF-8 run; aliases are ASCII and never span an
        // invalid byte.
        let mut at = 0;
        for chunk in bytes.utf8_chunks() {
            let valid = chunk.valid();
            let mut found = Vec::new();
            self.find(tax, valid, Field::default(), Place::Body, &mut found);
            for mut h in found {
                h.range = at + h.range.start..at + h.range.end;
                self.body.push(h);
            }
            at += valid.len() + chunk.invalid().len();
        }
    }
}

/// The kinds of the resource type `Type/` (a FHIR resource type) that ends
/// right before `at`, if one does (`Patient/<alias>`).
fn resource_type_before<'t>(tax: &'t Taxonomy, bytes: &[u8], at: usize) -> Option<&'t [KindId]> {
    let slash = at.checked_sub(1)?;
    if bytes.get(slash) != Some(&b'/') {
        return None;
    }
    let head = bytes.get(..slash).unwrap_or_default();
    let word_start = head
        .iter()
        .rposition(|b| !b.is_ascii_alphanumeric())
        .map_or(0, |p| p + 1);
    head.get(word_start..)
        .and_then(|w| std::str::from_utf8(w).ok())
        .and_then(|w| tax.resource_type_kinds(w))
}

/// The kind of the path segment that ends right before `at` (`/patients/`
/// before `<alias>`), if it names one.
fn segment_kind_before(tax: &Taxonomy, bytes: &[u8], at: usize) -> Option<KindId> {
    let slash = at.checked_sub(1)?;
    if bytes.get(slash) != Some(&b'/') {
        return None;
    }
    let head = bytes.get(..slash).unwrap_or_default();
    let start = head.iter().rposition(|b| *b == b'/').map_or(0, |p| p + 1);
    tax.path_segment_kind(head.get(start..)?)
}

/// The epoch aliases glued inside a run of token bytes that is not one alias
/// as a whole: `patient-k7q2-001` in the ETag `patient-k7q2-001-v7` or the file
/// name `Arztbrief_patient-k7q2-001_2025` (keyhole writes an alias where HMS
/// had the id, with whatever was glued to it). An alias starts at the run's
/// start or after a non-alphanumeric byte and ends before a non-digit; only
/// aliases carrying an epoch count (`<kind>-<epoch>-<number>`: the epoch has a
/// letter and a digit, which prose does not), so `non-patient-care-100` is
/// text. Byte ranges within `run`.
pub(super) fn glued_aliases(tax: &Taxonomy, run: &str) -> Vec<Range<usize>> {
    let b = run.as_bytes();
    let longest = tax.longest_alias_prefix();
    let mut out = Vec::new();
    let mut p = 0;
    while p < b.len() {
        let starts = b.get(p).is_some_and(u8::is_ascii_alphabetic)
            && p.checked_sub(1)
                .and_then(|q| b.get(q))
                .is_none_or(|c| !c.is_ascii_alphanumeric());
        let found = if starts {
            epoch_alias_at(tax, run, p, longest)
        } else {
            None
        };
        match found {
            Some(end) => {
                out.push(p..end);
                p = end;
            }
            None => p += 1,
        }
    }
    out
}

/// The end of the epoch alias starting at `p` in `run`, if one does: the
/// first `-<epoch>-<digits>` after `p` whose whole makes an epoch alias. Only
/// the next `longest` bytes (the longest alias prefix) are looked at for the
/// epoch's dash, and at most ten digits after it, so a run of any length is
/// read in time linear in it.
fn epoch_alias_at(tax: &Taxonomy, run: &str, p: usize, longest: usize) -> Option<usize> {
    let b = run.as_bytes();
    let window = b.len().min(p + longest + 1);
    let mut q = p;
    while let Some(dash) = b
        .get(q + 1..window)
        .and_then(|t| t.iter().position(|c| *c == b'-'))
        .map(|d| q + 1 + d)
    {
        // The kind's prefix never spans an underscore.
        if b.get(q..dash).is_some_and(|t| t.contains(&b'_')) {
            return None;
        }
        let digits_from = dash + 1 + grammar::EPOCH_LEN + 1;
        if b.get(digits_from - 1) == Some(&b'-') {
            let digits = b.get(digits_from..).map_or(0, |t| {
                t.iter().take(10).take_while(|c| c.is_ascii_digit()).count()
            });
            let end = digits_from + digits;
            let epoch = run
                .get(..end)
                .and_then(|a| tax.parse_alias(a.get(p..)?))
                .and_then(|parts| parts.epoch);
            if digits >= 3 && epoch.is_some() {
                return Some(end);
            }
        }
        q = dash;
    }
    None
}

/// The canonical epoch alias a near-miss token stands for: lower-cased, its
/// number padded to three digits (`Patient-K7Q2-1` → `patient-k7q2-001`).
/// `None` unless that is an alias (or a repairable drift of one) carrying an
/// epoch: control issues no epoch-less aliases, so `Patient-001` is text.
pub(super) fn near_miss(tax: &Taxonomy, token: &str) -> Option<String> {
    let lower = token.to_ascii_lowercase();
    let (head, digits) = lower.rsplit_once('-')?;
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u32 = digits.parse().ok()?;
    let canonical = format!("{head}-{number:03}");
    if canonical == token {
        return None;
    }
    let has_epoch = |a: &str| tax.parse_alias(a).is_some_and(|p| p.epoch.is_some());
    let is_alias = has_epoch(&canonical)
        || tax
            .repair_candidates(&canonical)
            .iter()
            .any(|c| has_epoch(c));
    is_alias.then_some(canonical)
}

/// How many raw record ids a run of token bytes holds: 1 if it is one
/// ([`raw_id_shaped`]), else those glued to other text in it — a UUID, 32 hex
/// digits or a FHIR id with a configured prefix that starts the run or
/// follows a byte other than a letter or digit (`_`, `-`), and ends it or is
/// followed by one (`Arztbrief_<uuid>_2025`, `<uuid>-v7`, `pat-000123_v2`).
/// The `aliases` glued in the run (ranges into it) are not looked into.
fn raw_ids_in(tax: &Taxonomy, run: &str, aliases: &[Range<usize>]) -> usize {
    if aliases.is_empty() && !run.contains('_') && raw_id_shaped(tax, run) {
        return 1;
    }
    let b = run.as_bytes();
    let mut n = 0;
    let mut p = 0;
    while p < b.len() {
        if let Some(r) = aliases.iter().find(|r| r.contains(&p)) {
            p = r.end;
            continue;
        }
        let starts = p
            .checked_sub(1)
            .and_then(|q| b.get(q))
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        let len = if starts { raw_id_at(tax, b, p) } else { None };
        match len {
            Some(len) => {
                n += 1;
                p += len;
            }
            None => p += 1,
        }
    }
    n
}

/// The length of the raw id (UUID, 32 hex digits, prefixed FHIR id) that
/// starts at `p` in `b` and ends where a letter or digit does not follow.
fn raw_id_at(tax: &Taxonomy, b: &[u8], p: usize) -> Option<usize> {
    let rest = b.get(p..)?;
    let ends = |len: usize| rest.get(len).is_none_or(|c| !c.is_ascii_alphanumeric());
    if rest.get(..36).is_some_and(shape::is_uuid) && ends(36) {
        return Some(36);
    }
    let hex = rest.iter().take_while(|c| c.is_ascii_hexdigit()).count();
    if hex == 32 && ends(32) {
        let h = rest.get(..32)?;
        if h.iter().any(u8::is_ascii_digit) && h.iter().any(u8::is_ascii_alphabetic) {
            return Some(32);
        }
    }
    // `<prefix>-<digits>`: a configured FHIR prefix (any case).
    let prefix = rest
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric())
        .count();
    if prefix == 0
        || !rest.first().is_some_and(u8::is_ascii_alphabetic)
        || rest.get(prefix) != Some(&b'-')
    {
        return None;
    }
    let digits = rest
        .get(prefix + 1..)?
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count();
    let len = prefix + 1 + digits;
    let lower = rest.get(..prefix)?.to_ascii_lowercase();
    (digits > 0 && ends(len) && tax.fhir_prefix_kinds(&lower).is_some()).then_some(len)
}

/// Whether a token has the shape of a raw record id: a UUID (with or without
/// dashes, any case) or a FHIR id with a configured prefix (`pat-000123`).
pub(super) fn raw_id_shaped(tax: &Taxonomy, token: &str) -> bool {
    let b = token.as_bytes();
    if shape::is_uuid(b) {
        return true;
    }
    if b.len() == 32
        && b.iter().all(u8::is_ascii_hexdigit)
        && b.iter().any(u8::is_ascii_digit)
        && b.iter().any(u8::is_ascii_alphabetic)
    {
        return true;
    }
    let lower = token.to_ascii_lowercase();
    shape::is_fhir_like(&lower)
        && lower
            .split_once('-')
            .is_some_and(|(prefix, _)| tax.fhir_prefix_kinds(prefix).is_some())
}
