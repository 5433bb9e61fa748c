//! Id shapes: which form a raw id has, and where ids hide inside free text.
//!
//! Three forms exist: a UUID (the HMS primary key), a FHIR logical id
//! (`pat-000123`, also whatever follows `Patient/` in a reference) and a slug
//! (`clinic-berlin-mitte`; the catch-all for any other identifier). Inside text
//! (URLs, error prose, non-JSON bodies) three patterns are found: UUIDs
//! anywhere, with no boundary required; FHIR references `Type/id` for configured
//! resource types; and FHIR ids `prefix-digits` for configured prefixes.

use super::id::{Form, KindId};
use super::taxonomy::{KeyRole, Taxonomy};

use std::ops::Range;

/// Bytes that continue a token: an id next to one of these is part of a longer
/// word. `-` counts, so `appt-001` inside `patient-appt-001` is no match.
pub(crate) fn is_token_byte(b: u8) -> bool {
    is(b, TOKEN)
}

/// Byte classes the patterns read runs of, one bit each ([`is`]): a table
/// lookup per byte instead of a chain of range checks.
const ALNUM: u8 = 1;
/// [`is_token_byte`].
const TOKEN: u8 = 2;
/// [`is_fhir_id_byte`].
const FHIR_ID: u8 = 4;
/// A FHIR id byte, `_` or `~`: what a path segment id may hold.
const SEGMENT_ID: u8 = 8;
/// `[a-z0-9-]`: what an alias-shaped value may hold.
const ALIAS: u8 = 16;
/// `[0-9A-Fa-f]`.
const HEX: u8 = 32;
/// `[A-Za-z0-9+/_-]`: base64 and base64url.
const BASE64: u8 = 64;

static CLASSES: [u8; 256] = classes();

// `i` runs below 256, so the index is in bounds (`get_mut` is not const).
#[allow(clippy::indexing_slicing)]
const fn classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let mut c = 0;
        if b.is_ascii_alphanumeric() {
            c |= ALNUM | TOKEN | FHIR_ID | SEGMENT_ID;
        }
        if b == b'-' {
            c |= TOKEN | FHIR_ID | SEGMENT_ID | ALIAS;
        }
        if b == b'_' {
            c |= TOKEN | SEGMENT_ID;
        }
        if b == b'.' {
            c |= FHIR_ID | SEGMENT_ID;
        }
        if b == b'~' {
            c |= SEGMENT_ID;
        }
        if b.is_ascii_lowercase() || b.is_ascii_digit() {
            c |= ALIAS;
        }
        if b.is_ascii_hexdigit() {
            c |= HEX;
        }
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_') {
            c |= BASE64;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// Whether `b` is of `class`.
fn is(b: u8, class: u8) -> bool {
    CLASSES.get(usize::from(b)).is_some_and(|c| c & class != 0)
}

/// Whether `s` is exactly a UUID (8-4-4-4-12 hex digits, any case).
pub fn is_uuid(s: &[u8]) -> bool {
    let Ok(s) = <&[u8; 36]>::try_from(s) else {
        return false;
    };
    // The dashes first: they turn most candidates away. Then every other
    // byte, without a branch per byte.
    [8, 13, 18, 23].iter().all(|&i| s.get(i) == Some(&b'-'))
        && s.iter().enumerate().fold(true, |ok, (i, &b)| {
            ok & (is(b, HEX) | matches!(i, 8 | 13 | 18 | 23))
        })
}

/// Whether `s` has the shape of a FHIR logical id with a letter prefix:
/// `[a-z][a-z0-9]*-[0-9]+` (`pat-000123`, `oo-5521`).
pub fn is_fhir_like(s: &str) -> bool {
    match s.split_once('-') {
        Some((prefix, digits)) => {
            prefix
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase())
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// Routes an id of unknown form by its shape: UUID, else FHIR-like, else slug.
pub fn classify(value: &str) -> Form {
    if is_uuid(value.as_bytes()) {
        Form::Uuid
    } else if is_fhir_like(value) {
        Form::Fhir
    } else {
        Form::Slug
    }
}

/// Whether a string under an id key is an identifier rather than prose: short,
/// no whitespace or punctuation beyond `._:-~`, and at least one digit or `-`
/// (so `"clinic": "Berlin"` is a name, `"clinic": "clinic-berlin-mitte"` an id).
pub(crate) fn is_identifier(value: &str, max_len: usize) -> bool {
    !value.is_empty()
        && value.len() <= max_len
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'~'))
        && value.bytes().any(|b| b.is_ascii_digit() || b == b'-')
}

/// Whether `s` is a FHIR logical id: 1 to 64 of `[A-Za-z0-9.-]`.
pub(crate) fn is_fhir_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= FHIR_ID_MAX && s.bytes().all(is_fhir_id_byte)
}

/// A FHIR id character (`[A-Za-z0-9.-]`).
fn is_fhir_id_byte(b: u8) -> bool {
    is(b, FHIR_ID)
}

/// Longest alias-shaped run looked at in text.
const ALIAS_MAX: usize = 96;

/// Longest FHIR id (FHIR caps logical ids at 64 characters).
const FHIR_ID_MAX: usize = 64;

/// Splits `Type/id` (the whole string) into a known resource type's kinds and
/// the id, or `None`.
pub(crate) fn parse_reference<'t, 'v>(
    tax: &'t Taxonomy,
    value: &'v str,
) -> Option<(&'t [KindId], &'v str)> {
    let (ty, id) = value.split_once('/')?;
    let kinds = tax.resource_type_kinds(ty)?;
    let ok = !id.is_empty() && id.len() <= FHIR_ID_MAX && id.bytes().all(is_fhir_id_byte);
    ok.then_some((kinds, id))
}

/// What kind of pattern matched inside text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pattern<'t> {
    /// A UUID; its kind comes from the text around it.
    Uuid,
    /// The id part of `Type/id`; kinds of the resource type.
    Reference(&'t [KindId]),
    /// A FHIR id with a configured prefix; kinds of the prefix.
    FhirId(&'t [KindId]),
    /// A value with the shape of an alias of a kind (`ward-101`).
    AliasShaped(KindId),
    /// A URL path segment after a segment that names a kind
    /// (`/patients/482913`).
    Segment(KindId),
    /// A query or form value under a key that names an id or a kind
    /// (`?patientId=482913`, `&patient=482913,482914`).
    Query(KindId),
    /// An opaque cursor that carries an id: base64 or base64url whose bytes
    /// are printable text holding a digit ([`decodes_to_id_text`]), whole or
    /// in a query string or prose (`eyJhZnRlciI6InBhdC0wMDAxMjMifQ` is
    /// `{"after":"pat-000123"}`).
    Cursor,
}

/// One id found inside text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TextHit<'t> {
    /// Byte range of the id inside the text.
    pub range: Range<usize>,
    /// Which pattern found it.
    pub pattern: Pattern<'t>,
}

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

/// The word starts (a letter after a byte that is not a token byte) where a
/// pattern of [`find_in_text`] can begin, in order: every one of them follows
/// a `/`, or its run of letters and digits ends at a `/` or `-`. They are
/// found from the `/` and `-` bytes ([`Marks`]), so text between them is never
/// looked at byte by byte.
struct WordStarts<'a> {
    text: &'a [u8],
    marks: Marks<'a>,
    /// The start after the last mark's `/`, not yet returned.
    after: Option<usize>,
    /// The last word returned (start and end).
    last: Option<(usize, usize)>,
    /// How many of the UUIDs passed to [`Self::next_outside`] lie behind.
    uuids_behind: usize,
}

impl<'a> WordStarts<'a> {
    fn new(text: &'a [u8], marks: Marks<'a>) -> Self {
        WordStarts {
            text,
            marks,
            after: None,
            last: None,
            uuids_behind: 0,
        }
    }

    fn is_start(&self, w: usize) -> bool {
        self.text.get(w).is_some_and(u8::is_ascii_alphabetic)
            && (w == 0 || !self.text.get(w - 1).copied().is_some_and(is_token_byte))
    }

    /// Drops the starts before `pos`, whose marks are not read (the rest of
    /// an id matched).
    fn skip_to(&mut self, pos: usize) {
        self.marks.skip_to(pos);
        if self.after.is_some_and(|a| a < pos) {
            self.after = None;
        }
    }

    /// The next word: its start, and the end of its run of letters and
    /// digits. The dashes of `uuids` (the UUIDs of the text, in order, the
    /// same on every call) are not read: a word that runs into a UUID starts
    /// no pattern, as every pattern stops where the next UUID starts.
    fn next_outside(&mut self, uuids: &[TextHit<'_>]) -> Option<(usize, usize)> {
        loop {
            let (cand, end) = match self.after.take() {
                Some(w) => (w, None),
                None => {
                    let p = self.marks.next()?;
                    while uuids
                        .get(self.uuids_behind)
                        .is_some_and(|u| u.range.end <= p)
                    {
                        self.uuids_behind += 1;
                    }
                    if let Some(u) = uuids.get(self.uuids_behind) {
                        if u.range.contains(&p) {
                            self.marks.skip_to(u.range.end);
                            continue;
                        }
                    }
                    if self.text.get(p) == Some(&b'/') {
                        self.after = Some(p + 1);
                    }
                    // The word before the mark was returned already (after a
                    // `/`): its run ends here.
                    if self.last.is_some_and(|(_, e)| e == p) {
                        continue;
                    }
                    // The run of letters and digits that ends at the mark.
                    let run = self
                        .text
                        .get(..p)
                        .map_or(0, |t| t.iter().rev().take_while(|&&b| is(b, ALNUM)).count());
                    if run == 0 {
                        continue;
                    }
                    (p - run, Some(p))
                }
            };
            // Starts come in order; one may be found twice (after a `/`, and
            // before the next mark).
            if self.last.is_some_and(|(l, _)| cand <= l) || !self.is_start(cand) {
                continue;
            }
            let end = end.unwrap_or_else(|| {
                cand + self
                    .text
                    .get(cand..)
                    .map_or(0, |t| t.iter().take_while(|&&b| is(b, ALNUM)).count())
            });
            self.last = Some((cand, end));
            return Some((cand, end));
        }
    }
}

/// The positions of two bytes in a text, in order, read 64 bytes at a time
/// into a bit mask, eight bytes per step: the texts searched are mostly
/// short, and for a short text setting up `memchr` costs more than reading
/// it.
#[derive(Clone)]
struct Marks<'a> {
    /// The text from the block after the current one.
    rest: &'a [u8],
    x: u8,
    y: u8,
    /// Offset of the current block in the text.
    base: usize,
    /// The marks of the current block not yet returned.
    bits: u64,
}

impl<'a> Marks<'a> {
    /// The marks `x` and `y` of `text`; neither may be 0 (the last block is
    /// padded with zeros).
    fn new(text: &'a [u8], x: u8, y: u8) -> Self {
        let mut marks = Marks {
            rest: text,
            x,
            y,
            base: 0,
            bits: 0,
        };
        marks.bits = marks.load();
        marks
    }

    /// Reads the next block (up to 64 bytes) of `rest` into a mask.
    fn load(&mut self) -> u64 {
        let (block, rest) = self.rest.split_at(self.rest.len().min(64));
        self.rest = rest;
        let mut bits = 0u64;
        let mut chunks = block.chunks_exact(8);
        let mut at = 0;
        for chunk in chunks.by_ref() {
            let word = <[u8; 8]>::try_from(chunk).map_or(0, u64::from_le_bytes);
            bits |= byte_mask(word, self.x, self.y) << at;
            at += 8;
        }
        // The last bytes (fewer than eight), padded with zero bytes, which
        // are never marks.
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut word = [0u8; 8];
            for (w, b) in word.iter_mut().zip(tail) {
                *w = *b;
            }
            bits |= byte_mask(u64::from_le_bytes(word), self.x, self.y) << at;
        }
        bits
    }
}

/// Which bytes of `word` (little-endian) are `x` or `y`, as bits: bit `j`
/// for byte `j`, eight bytes compared at once.
fn byte_mask(word: u64, x: u8, y: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // 0x80 in exactly the bytes of `v` that are zero.
    let zero = |v: u64| !(((v & LOW7).wrapping_add(LOW7)) | v | LOW7);
    let spread = |b: u8| ONES.wrapping_mul(u64::from(b));
    let differ = x ^ y;
    let high = if differ.count_ones() == 1 {
        // `-` and `/` differ in one bit: with it set, both read as `/`,
        // and one comparison finds either.
        zero((word | spread(differ)) ^ spread(x | differ))
    } else {
        zero(word ^ spread(x)) | zero(word ^ spread(y))
    };
    // Gathers bit 7 of every byte into the top byte: byte `j` to bit 56 + j.
    (high >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

impl Marks<'_> {
    /// Drops the marks before `pos`.
    fn skip_to(&mut self, pos: usize) {
        while pos >= self.base + 64 && !self.rest.is_empty() {
            self.base += 64;
            self.bits = self.load();
        }
        if pos >= self.base + 64 {
            self.bits = 0;
        } else if pos > self.base {
            self.bits &= u64::MAX << (pos - self.base);
        }
    }
}

impl Iterator for Marks<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        while self.bits == 0 {
            if self.rest.is_empty() {
                return None;
            }
            self.base += 64;
            self.bits = self.load();
        }
        let at = usize::try_from(self.bits.trailing_zeros()).ok()?;
        self.bits &= self.bits - 1;
        Some(self.base + at)
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

/// The shortest cursor, in base64 characters (its `=` padding not counted).
const CURSOR_MIN: usize = 16;
/// The longest, with its padding.
const CURSOR_MAX: usize = 512;

/// Whether base64 characters (either alphabet, no padding) decode to printable
/// text of eight bytes or more holding a digit and a byte that is neither a
/// letter nor a digit. The decoded bytes are looked at one by one, not kept:
/// most words and paths fail on their first bytes.
fn decodes_to_id_text(chars: &[u8]) -> bool {
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
fn find_cursors(text: &[u8], out: &mut Vec<TextHit<'_>>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(text: &str) -> Vec<(String, &'static str)> {
        let t = Box::leak(Box::new(Taxonomy::default()));
        let mut out = Vec::new();
        find_in_text(t, text.as_bytes(), &mut out);
        out.iter()
            .map(|h| {
                let p = match h.pattern {
                    Pattern::Uuid => "uuid",
                    Pattern::Reference(_) => "ref",
                    Pattern::FhirId(_) => "fhir",
                    Pattern::Segment(_) => "seg",
                    Pattern::Query(_) => "query",
                    Pattern::AliasShaped(_) => "alias",
                    Pattern::Cursor => "cursor",
                };
                (text[h.range.clone()].to_owned(), p)
            })
            .collect()
    }

    #[test]
    fn cursors_in_text_are_found_whole() {
        // {"after":"pat-000123"}, base64url and standard with padding.
        let c = "eyJhZnRlciI6InBhdC0wMDAxMjMifQ";
        let padded = "eyJhZnRlciI6InBhdC0wMDAxMjMifQ==";
        assert_eq!(
            hits(&format!("/api/v2/patients?cursor={c}&limit=20")),
            [(c.to_owned(), "cursor")]
        );
        assert_eq!(
            hits(&format!("next page: {padded}.")),
            [(padded.to_owned(), "cursor")]
        );
        // After a `/` of its run: the path before it is not part of it.
        assert_eq!(hits(&format!("/pages/{c}")), [(c.to_owned(), "cursor")]);
        // Not cursors: long words, a path, an alias, ids of other shapes.
        for text in [
            "Oberschenkelhalsfraktur links, Verlaufskontrolle",
            "/api/v2/patients/visits/appointments",
            "patient-k7q2-001 and medicationrequest-x9m3-042",
            "QmVmdW5kIHVuYXVmZsOkbGxpZw", // decodes to non-ASCII text, no digit
        ] {
            assert!(hits(text).iter().all(|(_, p)| *p != "cursor"), "{text}");
        }
        assert_eq!(
            hits("ref 9f1c2e7a4b3d4e5f8a9b0c1d2e3f4a5b"),
            [("9f1c2e7a4b3d4e5f8a9b0c1d2e3f4a5b".to_owned(), "uuid")]
        );
    }

    #[test]
    fn classify_routes_by_shape() {
        assert_eq!(classify("039b70b8-92f7-44b7-9c91-4e3f0e900c71"), Form::Uuid);
        assert_eq!(classify("039B70B8-92F7-44B7-9C91-4E3F0E900C71"), Form::Uuid);
        assert_eq!(classify("pat-000123"), Form::Fhir);
        assert_eq!(classify("oo-5521"), Form::Fhir);
        assert_eq!(classify("clinic-berlin-mitte"), Form::Slug);
        assert_eq!(classify("loc-im-bm-2-14"), Form::Slug);
        assert_eq!(classify("039b70b8-92f7-44b7-9c91-4e3f0e900c7"), Form::Slug);
    }

    #[test]
    fn finds_ids_in_prose_and_urls() {
        let text =
            "Slot slot-im-bm-20250325-1100 for practitioner prac-00042 is booked by appointment \
                    fa129b43-cd9d-43cf-b923-a08771beb1b9 (Appointment/appt-0009815).";
        assert_eq!(
            hits(text),
            vec![
                ("prac-00042".into(), "fhir"),
                ("fa129b43-cd9d-43cf-b923-a08771beb1b9".into(), "uuid"),
                ("appt-0009815".into(), "ref"),
            ]
        );
        let url = "https://fhir.example/fhir/R4/Appointment/appt-0009812/_history/1";
        assert_eq!(hits(url), vec![("appt-0009812".into(), "ref")]);
        let glued = "x039b70b8-92f7-44b7-9c91-4e3f0e900c71y and Task/160.000.100.000.017.52.";
        assert_eq!(
            hits(glued),
            vec![
                ("039b70b8-92f7-44b7-9c91-4e3f0e900c71".into(), "uuid"),
                ("160.000.100.000.017.52".into(), "ref")
            ]
        );
    }

    #[test]
    fn leaves_near_misses_alone() {
        for text in [
            "ext-prac-20981",
            "pat-000123x",
            "patient-portal",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "2025-03-25T10:30:00+01:00",
            "W/\"1\"",
        ] {
            assert_eq!(hits(text), vec![], "{text}");
        }
    }

    #[test]
    fn alias_shaped_values_are_ids() {
        assert_eq!(
            hits("Bett in ward-101, see patient-k7q2-001 and patient-appt-001; ward-7 stays"),
            vec![
                ("ward-101".into(), "alias"),
                ("patient-k7q2-001".into(), "alias"),
                ("patient-appt-001".into(), "alias"),
            ]
        );
        // Not the grammar: too few digits, a word after, glued to a word.
        assert_eq!(hits("ward-7 ward-101a xward-101 clinic-wide"), vec![]);
    }

    #[test]
    fn byte_classes_are_what_they_say() {
        for b in 0..=255u8 {
            let alnum = b.is_ascii_alphanumeric();
            assert_eq!(is(b, ALNUM), alnum, "{b}");
            assert_eq!(is(b, TOKEN), alnum || matches!(b, b'-' | b'_'), "{b}");
            assert_eq!(is(b, FHIR_ID), alnum || matches!(b, b'-' | b'.'), "{b}");
            assert_eq!(
                is(b, SEGMENT_ID),
                alnum || matches!(b, b'-' | b'.' | b'_' | b'~'),
                "{b}"
            );
            assert_eq!(
                is(b, ALIAS),
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-',
                "{b}"
            );
            assert_eq!(is(b, HEX), b.is_ascii_hexdigit(), "{b}");
            assert_eq!(
                is(b, BASE64),
                alnum || matches!(b, b'+' | b'/' | b'-' | b'_'),
                "{b}"
            );
        }
    }

    #[test]
    fn byte_masks_agree_with_comparing_each_byte() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        // `-`/`/` differ in one bit (one comparison), `%`/`&` in two.
        let alphabet = [b'-', b'/', b'%', b'&', 0, 0xff, b'.', 0x2d ^ 0x80];
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let bytes: [u8; 8] = std::array::from_fn(|i| {
                let pick = (state >> (i * 3)) & 7;
                alphabet[pick as usize]
            });
            for (x, y) in [(b'-', b'/'), (b'%', b'&')] {
                let want = bytes
                    .iter()
                    .enumerate()
                    .fold(0u64, |m, (i, b)| m | u64::from(*b == x || *b == y) << i);
                assert_eq!(
                    byte_mask(u64::from_le_bytes(bytes), x, y),
                    want,
                    "{bytes:?}"
                );
            }
        }
        for len in [0, 1, 7, 8, 53, 63, 64, 65, 127, 128, 129, 300] {
            let text: Vec<u8> = (0..len)
                .map(|i| [b'a', b'-', b'/', b'0', b'x', b'x', b'-'][(i * i + 3 * i) % 7])
                .collect();
            let want: Vec<usize> = (0..text.len())
                .filter(|i| matches!(text[*i], b'-' | b'/'))
                .collect();
            assert_eq!(
                Marks::new(&text, b'-', b'/').collect::<Vec<_>>(),
                want,
                "{len}"
            );
        }
    }

    #[test]
    fn kind_before_reads_the_context() {
        let t = Taxonomy::default();
        let name = |text: &str| {
            let start = text.find("039b").unwrap();
            kind_before(&t, text.as_bytes(), start).map(|k| t.kind_name(k).to_owned())
        };
        assert_eq!(name("/api/v2/patients/039b").as_deref(), Some("patient"));
        assert_eq!(
            name("/api/v2/x?status=a&groupId=039b").as_deref(),
            Some("task-group")
        );
        assert_eq!(name("Patient/039b").as_deref(), Some("patient"));
        assert_eq!(name("?idempotencyKey=039b"), None);
        assert_eq!(name("039b"), None);
    }

    #[test]
    fn query_values_under_id_and_kind_keys_are_ids() {
        let q = |t: &str| {
            hits(t)
                .into_iter()
                .filter(|(_, p)| *p == "query")
                .map(|(v, _)| v)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            q("/api/v2/appointments?patientId=482913&page=2"),
            ["482913"]
        );
        assert_eq!(q("next: /fhir/Observation?patient=17&_count=10"), ["17"]);
        assert_eq!(q("patient_id=88&visitId=9,10"), ["88", "9", "10"]);
        assert_eq!(q("?id=7;status=booked"), ["7"]);
        // Not ids: counts, pages, dates, keys naming no id, values with no digit.
        assert!(q("?page=2&_count=10&since=2025-03-25&q=anna").is_empty());
        assert!(q("?patientId=anna").is_empty());
        assert!(q("?requestId=12&traceId=99").is_empty());
        assert_eq!(q("a patientId=12 in prose"), ["12"]);
        assert!(
            q("a.b=patientId=5").is_empty(),
            "a key opens a query, a word or the text"
        );
        assert!(q("dose=5mg&patient ok").is_empty());
        // A value another pattern found is not found twice.
        assert_eq!(hits("?patientId=pat-000123").len(), 1);
    }
}
