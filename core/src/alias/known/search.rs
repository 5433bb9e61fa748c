//! The search itself: which positions are tried (anchors or every class
//! boundary), the longest known value at each, and whether it counts there.

use super::bounds::{in_host_or_email, stands_as_record_id};
use super::{
    class, end_ok, has, pair_bit, pair_key, start_ok, Anchors, Entry, KnownIds, LenBits, Mode,
    ENCODED_DASH,
};
use std::ops::Range;

impl KnownIds<'_> {
    /// Searches `hay`, with encoded dashes folded when they may matter;
    /// `f` returns whether to go on.
    /// `skip`: ranges of `hay` whose anchors need not be tried (see
    /// [`Self::for_each_outside`]).
    /// `strict`: verification's rules (see the module doc).
    pub(super) fn search(
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
