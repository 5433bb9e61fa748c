//! Known ids, found where they stand as that id: every raw id a session
//! knows (learned from structured positions of this body or of earlier ones),
//! in its plain, percent-encoded and HTML-entity forms.
//!
//! Where a value counts depends on its [`Mode`], which its shape decides:
//! - a UUID counts anywhere, letter case ignored;
//! - a distinctive id (a separator `-._:~`, three digits or more, or digits
//!   only) counts as a token of its own case, but never inside a host name
//!   or an e-mail address (`pat-000123` is not in `pat-000123.example.org`);
//! - an id that is an ordinary word (`example`, `hl7`, `referral`, `GHP`)
//!   counts only where it stands as a record's id in a URL or reference: a
//!   whole path segment after a record type or a kind's segment
//!   (`Patient/example`, `/patients/example`), or a whole query value under
//!   an id-named parameter (`?patient=example`). Anywhere else it is a word
//!   (`http://terminology.hl7.org/…`, `HL7 FHIR`) and left alone.
//!
//! Verification ([`KnownIds::first_except`]) is stricter than replacement: a
//! distinctive id counts in any letter case and in host names and e-mail
//! addresses too, so an id that replacement must leave alone there makes the
//! body withheld instead of passing raw.
//!
//! A match counts unless it continues a word of the same class on either side
//! (`slot-im-1` is not inside `slot-im-12` or `xslot-im-1`), so an id glued to
//! other text by `_`, `-`, `.` or a percent escape (`Arztbrief_pat-000123_2025`,
//! `pat-000123-v7`, `Patient%2Fpat-000123`) is found. Values made of digits
//! only take part when they have at least [`MIN_NUMERIC_LEN`] digits: a short
//! number in prose is a count or a dose, not an id (it is still aliased where
//! it stands under an id key).
//!
//! The search needs no automaton: a match must start and end on a class
//! boundary, so only those positions are tried, each against the lengths of
//! the values that start with the same two bytes (filtered by last byte) and
//! then one hash lookup. Building it is one hash insert per value (no copy
//! when the value is already lower case), so it is cheap to build per
//! response (an automaton costs far more to build than a body takes to
//! search), and the search allocates nothing per match.
//!
//! Which positions are tried: when every value holds a byte other than a
//! letter or digit (`-` in a UUID or a FHIR id, `.`, `_`), and those bytes
//! are at most three, a match can only start at a fixed distance before one
//! of them: `memchr` finds them and only those starts are tried, so text
//! without them costs nothing. Otherwise every class boundary is tried, in
//! one pass. Encoded dashes (`%2D`, `&#45;`, `&#x2d;`) are
//! folded to `-` in a copy of the text, made only when the text holds a `%`
//! or `&` and some value holds a `-`.

use super::taxonomy::Taxonomy;
use memchr::memchr2;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

/// Shortest all-digit value searched in free text.
pub(crate) const MIN_NUMERIC_LEN: usize = 5;

/// Where a known value counts (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A UUID (with or without dashes): anywhere, any letter case.
    AnyCase,
    /// A distinctive id: a token of its own case, not in a host or e-mail.
    Token,
    /// An ordinary word: only as a record's id in a URL or reference.
    Word,
}

impl Mode {
    /// The mode a value's shape gives it.
    pub(crate) fn of(v: &str) -> Mode {
        let b = v.as_bytes();
        if super::shape::is_uuid(b) || (b.len() == 32 && b.iter().all(u8::is_ascii_hexdigit)) {
            return Mode::AnyCase;
        }
        let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
        if digits == b.len()
            || digits >= 3
            || b.iter()
                .any(|c| matches!(c, b'-' | b'.' | b'_' | b':' | b'~'))
        {
            Mode::Token
        } else {
            Mode::Word
        }
    }
}

/// One indexed value.
#[derive(Debug, Clone, Copy)]
struct Entry<'v> {
    /// The caller's index of the value.
    index: usize,
    mode: Mode,
    /// The value as given (case-sensitive modes compare with it).
    exact: &'v [u8],
}

/// The session's known values, ready to be searched for.
pub(crate) struct KnownIds<'v> {
    /// Lower-cased value → the value it stands for.
    table: HashMap<Cow<'v, [u8]>, Entry<'v>, rustc_hash::FxBuildHasher>,
    /// Names the record types and kinds' path segments and query keys that
    /// a word-like value may follow ([`Mode::Word`]); without it, words are
    /// never searched.
    tax: Option<&'v Taxonomy>,
    /// Distinct value lengths, longest first (leftmost-longest matching).
    lens: Vec<usize>,
    /// Bytes a value may start / end with (both letter cases).
    first: [bool; 256],
    last: [bool; 256],
    /// Lower-cased first two bytes of the values, as a 4 Kbit set (see
    /// [`pair_bit`]): most candidate starts end here, before any length is
    /// tried.
    pairs: Vec<u64>,
    /// Per lower-cased first two bytes: the lengths (below 64) of the values
    /// that start so, as bits; only these lengths are tried at a position.
    pair_lens: HashMap<u16, u64, rustc_hash::FxBuildHasher>,
    /// Lengths of 64 and more, longest first (tried at every candidate).
    long_lens: Vec<usize>,
    /// Whether some value holds a `-` (its encoded forms must be searched).
    dash: bool,
    /// Where matches can start, when every value has an anchor (see the
    /// module doc); `None`: every class boundary is tried.
    anchors: Option<Anchors>,
}

/// The anchors of a value set: each value's first byte that is neither a
/// letter nor a digit, and the distances from a value's start to it.
#[derive(Debug, Default)]
struct Anchors {
    /// The distinct anchor bytes (one to three).
    bytes: Vec<u8>,
    /// (anchor byte, distance from the value's start), distinct.
    offsets: Vec<(u8, usize)>,
}

impl Anchors {
    /// Notes a value's anchor; `false` when it has none.
    fn add(&mut self, value: &[u8]) -> bool {
        let Some(d) = value.iter().position(|b| !b.is_ascii_alphanumeric()) else {
            return false;
        };
        let Some(&a) = value.get(d) else {
            return false;
        };
        if !self.bytes.contains(&a) {
            self.bytes.push(a);
        }
        if !self.offsets.contains(&(a, d)) {
            self.offsets.push((a, d));
        }
        true
    }
}

/// The byte's class for the boundary rule: 0 other, 1 digit, 2 letter.
fn class(b: u8) -> u8 {
    if b.is_ascii_digit() {
        1
    } else if b.is_ascii_alphabetic() {
        2
    } else {
        0
    }
}

fn has(set: &[bool; 256], b: u8) -> bool {
    set.get(usize::from(b)).copied().unwrap_or(false)
}

/// The word and bit of a value's first two bytes in [`KnownIds::pairs`]:
/// 4096 bits, so the set is cheap to clear for every answer; two pairs may
/// share a bit, and the exact lookup after it tells them apart.
fn pair_bit(a: u8, b: u8) -> (usize, u64) {
    let p = (usize::from(a.to_ascii_lowercase()) << 6 ^ usize::from(b.to_ascii_lowercase())) & 4095;
    (p >> 6, 1u64 << (p & 63))
}

fn pair_key(a: u8, b: u8) -> u16 {
    u16::from(a.to_ascii_lowercase()) << 8 | u16::from(b.to_ascii_lowercase())
}

/// The lengths of a length mask, longest first.
struct LenBits(u64);

impl Iterator for LenBits {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let top = 63 - self.0.leading_zeros();
        self.0 &= !(1u64 << top);
        usize::try_from(top).ok()
    }
}

/// Encodings of `-` an id may carry in a URL or an HTML body (compared
/// without regard to letter case).
const ENCODED_DASH: [&[u8]; 3] = [b"%2d", b"&#45;", b"&#x2d;"];

impl<'v> KnownIds<'v> {
    /// Indexes `values` (index = value number). Values that are too short to
    /// be searched safely are left out; of two values equal but for letter
    /// case, the first wins.
    #[cfg(test)]
    pub(crate) fn new(values: impl IntoIterator<Item = &'v str>) -> KnownIds<'v> {
        Self::build(values, None)
    }

    /// [`Self::new`], with the taxonomy that tells where a word-like value
    /// stands as a record's id ([`Mode::Word`]).
    pub(crate) fn with_taxonomy(
        values: impl IntoIterator<Item = &'v str>,
        tax: &'v Taxonomy,
    ) -> KnownIds<'v> {
        Self::build(values, Some(tax))
    }

    fn build(values: impl IntoIterator<Item = &'v str>, tax: Option<&'v Taxonomy>) -> KnownIds<'v> {
        let mut k = KnownIds {
            table: HashMap::default(),
            tax,
            lens: Vec::new(),
            first: [false; 256],
            last: [false; 256],
            pairs: vec![0; 64],
            pair_lens: HashMap::default(),
            long_lens: Vec::new(),
            dash: false,
            anchors: None,
        };
        let mut anchors = Some(Anchors::default());
        let values = values.into_iter();
        k.table.reserve(values.size_hint().0);
        for (i, v) in values.enumerate() {
            if !searchable(v) {
                continue;
            }
            let mode = Mode::of(v);
            if mode == Mode::Word && tax.is_none() {
                continue;
            }
            let b = v.as_bytes();
            let key: Cow<'v, [u8]> = if b.iter().any(u8::is_ascii_uppercase) {
                Cow::Owned(b.to_ascii_lowercase())
            } else {
                Cow::Borrowed(b)
            };
            if let (Some(&f), Some(&l)) = (key.first(), key.last()) {
                for x in [f, f.to_ascii_uppercase()] {
                    if let Some(slot) = k.first.get_mut(usize::from(x)) {
                        *slot = true;
                    }
                }
                for x in [l, l.to_ascii_uppercase()] {
                    if let Some(slot) = k.last.get_mut(usize::from(x)) {
                        *slot = true;
                    }
                }
            }
            if let (Some(&a), Some(&c)) = (key.first(), key.get(1)) {
                let (w, bit) = pair_bit(a, c);
                if let Some(word) = k.pairs.get_mut(w) {
                    *word |= bit;
                }
                if b.len() < 64 {
                    *k.pair_lens.entry(pair_key(a, c)).or_insert(0) |= 1u64 << b.len();
                } else if !k.long_lens.contains(&b.len()) {
                    k.long_lens.push(b.len());
                }
            }
            k.dash |= b.contains(&b'-');
            if anchors.as_mut().is_some_and(|a| !a.add(b)) {
                anchors = None;
            }
            if !k.lens.contains(&b.len()) {
                k.lens.push(b.len());
            }
            k.table.entry(key).or_insert(Entry {
                index: i,
                mode,
                exact: b,
            });
        }
        k.lens.sort_unstable_by(|a, b| b.cmp(a));
        k.long_lens.sort_unstable_by(|a, b| b.cmp(a));
        k.anchors = anchors.filter(|a| a.bytes.len() <= 3);
        k
    }

    /// Length of the longest value searched.
    pub(crate) fn max_len(&self) -> usize {
        self.lens.first().copied().unwrap_or(0)
    }

    /// Calls `f(range, value)` for each accepted match in `hay`, in order,
    /// without overlaps (leftmost, then longest).
    pub(crate) fn for_each(&self, hay: &[u8], f: impl FnMut(Range<usize>, usize)) {
        self.for_each_outside(hay, &[], f);
    }

    /// [`Self::for_each`] for a caller that drops every match overlapping a
    /// range of `skip` (sorted by start, not overlapping; the ids a scan
    /// already found). Where the values have anchors, anchors inside those
    /// ranges are not tried, and a match overlapping them is left out before
    /// the leftmost matches are chosen, so it cannot hide a match that does
    /// not; otherwise (no anchors, or encoded dashes) the matches are those
    /// of [`Self::for_each`], and `f` must drop the overlapping ones.
    pub(crate) fn for_each_outside(
        &self,
        hay: &[u8],
        skip: &[(Range<usize>, usize)],
        mut f: impl FnMut(Range<usize>, usize),
    ) {
        self.search(hay, skip, false, |r, v| {
            f(r, v);
            true
        });
    }

    /// The first accepted match in `hay` whose text `allowed` does not let
    /// through (verification: an issued alias may equal a raw value).
    pub(crate) fn first_except(
        &self,
        hay: &[u8],
        allowed: impl Fn(&[u8]) -> bool,
    ) -> Option<Range<usize>> {
        let mut found = None;
        self.search(hay, &[], true, |r, _| {
            if hay.get(r.clone()).is_some_and(&allowed) {
                return true;
            }
            found = Some(r);
            false
        });
        found
    }

    /// Searches `hay`, with encoded dashes folded when they may matter;
    /// `f` returns whether to go on.
    /// `skip`: ranges of `hay` whose anchors need not be tried (see
    /// [`Self::for_each_outside`]).
    /// `strict`: verification's rules (see the module doc).
    fn search(
        &self,
        hay: &[u8],
        skip: &[(Range<usize>, usize)],
        strict: bool,
        mut f: impl FnMut(Range<usize>, usize) -> bool,
    ) {
        if self.table.is_empty() {
            return;
        }
        // Where a `-` is written encoded (`%2D`, `&#45;`, `&#x2d;`): offset
        // in `hay` and length of each escape, in order.
        let escapes: Vec<(usize, usize)> = if self.dash {
            memchr::memchr2_iter(b'%', b'&', hay)
                .filter_map(|i| {
                    let e = ENCODED_DASH.iter().find(|e| {
                        hay.get(i..i + e.len())
                            .is_some_and(|h| h.eq_ignore_ascii_case(e))
                    })?;
                    Some((i, e.len()))
                })
                .collect()
        } else {
            Vec::new()
        };
        if escapes.is_empty() {
            self.search_plain(hay, skip, strict, &mut f);
            return;
        }
        // Fold each escape to `-`. `folded[k]`: where escape `k` stands in the
        // folded text; `lost[k]`: the bytes the escapes before it lost. An
        // offset of the folded text moves back to `hay` by the bytes the
        // escapes before it lost.
        let mut text = Vec::with_capacity(hay.len());
        let mut folded = Vec::with_capacity(escapes.len());
        let mut lost = Vec::with_capacity(escapes.len() + 1);
        lost.push(0);
        let mut from = 0;
        for &(at, len) in &escapes {
            text.extend_from_slice(hay.get(from..at).unwrap_or_default());
            folded.push(text.len());
            text.push(b'-');
            lost.push(lost.last().copied().unwrap_or(0) + len - 1);
            from = at + len;
        }
        text.extend_from_slice(hay.get(from..).unwrap_or_default());
        let to_hay = |j: usize| {
            let before = folded.partition_point(|q| *q < j);
            j + lost.get(before).copied().unwrap_or(0)
        };
        // Folded offsets are not `hay`'s: nothing is skipped.
        self.search_plain(&text, &[], strict, &mut |r: Range<usize>, v| {
            f(to_hay(r.start)..to_hay(r.end), v)
        });
    }

    fn search_plain(
        &self,
        t: &[u8],
        skip: &[(Range<usize>, usize)],
        strict: bool,
        f: &mut impl FnMut(Range<usize>, usize) -> bool,
    ) {
        match &self.anchors {
            Some(a) => self.search_anchored(t, a, skip, strict, f),
            None => self.search_boundaries(t, strict, f),
        }
    }

    /// Tries every start a value's anchor allows. The matches are collected
    /// (they are few), ordered and then taken leftmost first, as
    /// [`Self::search_boundaries`] takes them.
    fn search_anchored(
        &self,
        t: &[u8],
        a: &Anchors,
        skip: &[(Range<usize>, usize)],
        strict: bool,
        f: &mut impl FnMut(Range<usize>, usize) -> bool,
    ) {
        let mut key = Vec::new();
        let mut found: Vec<(usize, usize, usize)> = Vec::new();
        // Anchors come in order: the first skip range not yet behind them.
        let mut next_skip = 0;
        let mut at_anchor = |p: usize| {
            while skip.get(next_skip).is_some_and(|(r, _)| r.end <= p) {
                next_skip += 1;
            }
            if skip.get(next_skip).is_some_and(|(r, _)| r.start <= p) {
                return;
            }
            let Some(&byte) = t.get(p) else {
                return;
            };
            for &(ab, d) in &a.offsets {
                let Some(i) = p.checked_sub(d).filter(|_| ab == byte) else {
                    continue;
                };
                if let Some((e, v)) = self.longest_at(t, i, strict, &mut key) {
                    let s = skip.partition_point(|(r, _)| r.end <= i);
                    if skip.get(s).is_none_or(|(r, _)| r.start >= e) {
                        found.push((i, e, v));
                    }
                }
            }
        };
        match *a.bytes.as_slice() {
            [x] => memchr::memchr_iter(x, t).for_each(&mut at_anchor),
            [x, y] => memchr::memchr2_iter(x, y, t).for_each(&mut at_anchor),
            [x, y, z] => memchr::memchr3_iter(x, y, z, t).for_each(&mut at_anchor),
            _ => return self.search_boundaries(t, strict, f),
        }
        found.sort_unstable();
        let mut end = 0;
        for (i, e, v) in found {
            if i < end {
                continue;
            }
            if !f(i..e, v) {
                return;
            }
            end = e;
        }
    }

    /// Tries every position that starts a class run (and every position
    /// right after a percent escape), leftmost first.
    fn search_boundaries(
        &self,
        t: &[u8],
        strict: bool,
        f: &mut impl FnMut(Range<usize>, usize) -> bool,
    ) {
        let mut key = Vec::new();
        let mut prev = 0u8;
        let mut i = 0;
        while let Some(&b) = t.get(i) {
            let c = class(b);
            let boundary = c != prev || c == 0;
            prev = c;
            if !has(&self.first, b) || !(boundary || start_ok(t, i)) {
                i += 1;
                continue;
            }
            match self.longest_at(t, i, strict, &mut key) {
                Some((e, v)) => {
                    if !f(i..e, v) {
                        return;
                    }
                    // The byte before the next position tried.
                    prev = e
                        .checked_sub(1)
                        .and_then(|l| t.get(l))
                        .map_or(0, |&l| class(l));
                    i = e;
                }
                None => i += 1,
            }
        }
    }

    /// The longest value that matches at `i` within the boundary rules:
    /// (end, value index). `key` is scratch space.
    fn longest_at(
        &self,
        t: &[u8],
        i: usize,
        strict: bool,
        key: &mut Vec<u8>,
    ) -> Option<(usize, usize)> {
        let &b = t.get(i)?;
        let &c = t.get(i + 1)?;
        if !has(&self.first, b) {
            return None;
        }
        let (w, bit) = pair_bit(b, c);
        if self.pairs.get(w).is_none_or(|word| word & bit == 0) || !start_ok(t, i) {
            return None;
        }
        let short = self.pair_lens.get(&pair_key(b, c)).copied().unwrap_or(0);
        let lens = self.long_lens.iter().copied().chain(LenBits(short));
        for len in lens {
            let e = i + len;
            let Some(&last) = e.checked_sub(1).and_then(|l| t.get(l)) else {
                continue;
            };
            if !has(&self.last, last) || !end_ok(t, e) {
                continue;
            }
            let Some(cand) = t.get(i..e) else {
                continue;
            };
            key.clear();
            key.extend(cand.iter().map(u8::to_ascii_lowercase));
            if let Some(entry) = self.table.get(key.as_slice()) {
                if self.counts(entry, t, i, e, strict) {
                    return Some((e, entry.index));
                }
            }
        }
        None
    }

    /// Whether a match of `entry` at `i..e` of `t` counts, by its mode.
    fn counts(&self, entry: &Entry<'_>, t: &[u8], i: usize, e: usize, strict: bool) -> bool {
        let exact = || t.get(i..e) == Some(entry.exact);
        match entry.mode {
            Mode::AnyCase => true,
            Mode::Token if strict => true,
            Mode::Token => exact() && !in_host_or_email(t, i),
            Mode::Word => {
                exact()
                    && self
                        .tax
                        .is_some_and(|tax| stands_as_record_id(tax, t, i, e))
            }
        }
    }
}

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
fn in_host_or_email(t: &[u8], i: usize) -> bool {
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
fn stands_as_record_id(tax: &Taxonomy, t: &[u8], i: usize, e: usize) -> bool {
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
        assert_eq!(
            found(&v, "pat&#45;000123 pat%2D000123"),
            ["pat&#45;000123", "pat%2D000123"]
        );
        assert_eq!(found(&v, "/patients/482913/x 1482913 4829130"), ["482913"]);
        assert_eq!(found(&v, "slot-im-12 xslot-im-1 slot-im-1."), ["slot-im-1"]);
        assert_eq!(found(&["12"], "12 tablets"), Vec::<String>::new());
    }

    proptest::proptest! {
        /// Leaving out the matches that overlap the ranges to skip (the ids
        /// a scan already found) never leaves a value uncovered: every match
        /// of the plain search overlaps a skipped range or a match found.
        #[test]
        fn skipping_found_ids_leaves_no_match_uncovered(
            values in proptest::collection::vec("([a-c]{1,3}-[0-9]{1,3}(-[a-c])?|[0-9]{5,6}|[a-c]{2}_[0-9]{2})", 1..6),
            pieces in proptest::collection::vec(0usize..24, 0..30),
            keep in proptest::collection::vec(proptest::bool::ANY, 30),
        ) {
            let glue = ["-", " ", "/", "x", "7", "%2D", "_", ".", "&#45;", "&amp;", "%20", "&#x2d;"];
            let hay: String = pieces
                .iter()
                .map(|p| values.get(*p).map_or(glue[p % glue.len()], String::as_str))
                .collect();
            let k = KnownIds::new(values.iter().map(String::as_str));
            let mut plain = Vec::new();
            k.for_each(hay.as_bytes(), |r, v| plain.push((r, v)));
            let skip: Vec<(Range<usize>, usize)> = plain
                .iter()
                .zip(keep.iter().cycle())
                .filter(|(_, keep)| **keep)
                .map(|(m, _)| m.clone())
                .collect();
            let mut outside = Vec::new();
            k.for_each_outside(hay.as_bytes(), &skip, |r, _| outside.push(r));
            for r in &outside {
                let text = hay.get(r.clone()).unwrap_or_default().to_ascii_lowercase();
                let decoded = decoded_view(text.as_bytes()).unwrap_or(text);
                proptest::prop_assert!(values.contains(&decoded), "{r:?} in {hay}");
            }
            let covered = |r: &Range<usize>| {
                skip.iter().map(|(s, _)| s).chain(&outside).any(|c| c.start < r.end && r.start < c.end)
            };
            for (r, _) in &plain {
                proptest::prop_assert!(covered(r), "{r:?} uncovered in {hay}");
            }
        }
    }

    #[test]
    fn decodes_escapes() {
        assert_eq!(
            decoded_view(b"Patient%2Fpat-1").as_deref(),
            Some("Patient/pat-1")
        );
        assert_eq!(
            decoded_view(b"pat&#45;1 &amp; &#x2D;").as_deref(),
            Some("pat-1 & -")
        );
        assert_eq!(decoded_view(b"a%252Fb").as_deref(), Some("a/b"));
        assert_eq!(decoded_view(b"plain"), None);
    }
}
