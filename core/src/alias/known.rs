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
//!
//! # Layout
//! - this file: a value's [`Mode`] and the index ([`KnownIds`]) built over
//!   the values.
//! - [`search`]: the positions tried and the match that counts at each.
//! - [`bounds`]: where a match counts (boundaries, hosts, record-id places).
//! - [`view`]: escape-decoded views of a text ([`decoded_view`], [`MappedView`]).

use super::taxonomy::Taxonomy;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

mod bounds;
mod search;
mod view;

#[cfg(test)]
mod tests;

pub(crate) use bounds::{end_ok, searchable, start_ok};
pub(crate) use view::{decoded_view, MappedView};

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

    /// Whether `token` is an alias by the taxonomy's grammar (never,
    /// without a taxonomy).
    fn alias_by_grammar(&self, token: &[u8]) -> bool {
        self.tax.is_some_and(|tax| {
            std::str::from_utf8(token)
                .ok()
                .and_then(|t| tax.parse_alias(t))
                .is_some()
        })
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
    /// through (verification: an issued alias may equal a raw value), nor
    /// the alias token around it ([`alias_token`]) when that token is an
    /// alias by the grammar: an alias whose epoch is spelled like a raw
    /// value, `clinic-f764-001` beside the record `f764`, is that alias, not
    /// the value.
    pub(crate) fn first_except(
        &self,
        hay: &[u8],
        allowed: impl Fn(&[u8]) -> bool,
    ) -> Option<Range<usize>> {
        let mut found = None;
        self.search(hay, &[], true, |r, _| {
            if hay.get(r.clone()).is_some_and(&allowed)
                || hay
                    .get(alias_token(hay, r.clone()))
                    .is_some_and(|t| allowed(t) && self.alias_by_grammar(t))
            {
                return true;
            }
            found = Some(r);
            false
        });
        found
    }
}

/// The run of alias bytes (ASCII letters, digits, `-`) around `at` in `hay`:
/// the token a match inside an alias belongs to. Checks on both sides of the
/// alias exchange (the rewrite's verification, the last word) read a match
/// inside an issued alias as that alias.
pub(crate) fn alias_token(hay: &[u8], at: Range<usize>) -> Range<usize> {
    let alias_byte = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-';
    let start = hay
        .get(..at.start)
        .unwrap_or_default()
        .iter()
        .rposition(|b| !alias_byte(b))
        .map_or(0, |p| p + 1);
    let end = at.end
        + hay
            .get(at.end..)
            .unwrap_or_default()
            .iter()
            .position(|b| !alias_byte(b))
            .unwrap_or(hay.len().saturating_sub(at.end));
    start..end
}
