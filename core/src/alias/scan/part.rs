//! A part's own methods and the helpers over id occurrences: their order,
//! overlaps, the kind a place picks, and `#id` references to contained
//! resources.

use super::{BodyKind, LitSpan, Part};
use crate::alias::{shape, KindId, Taxonomy};
use std::ops::Range;

impl Part {
    /// Appends `other` (a part of the same body starting at `base`).
    pub(super) fn append_shifted(&mut self, other: Part, base: usize) {
        let shift = |r: Range<usize>| r.start + base..r.end + base;
        self.occs
            .extend(other.occs.into_iter().map(|(r, v)| (shift(r), v)));
        self.lits.extend(other.lits.into_iter().map(|l| LitSpan {
            range: shift(l.range),
            clean: l.clean,
            protected: l.protected,
        }));
        self.numbers.extend(other.numbers.into_iter().map(shift));
        self.escaped.extend(other.escaped.into_iter().map(|mut e| {
            e.span = shift(e.span);
            e
        }));
    }

    pub(super) fn empty(len: usize, kind: BodyKind) -> Part {
        Part {
            len,
            kind,
            occs: Vec::new(),
            lits: Vec::new(),
            numbers: Vec::new(),
            escaped: Vec::new(),
        }
    }
}

/// The order of a part's occurrences: by start, the longest first.
pub(crate) fn occ_order(r: &Range<usize>) -> (usize, usize) {
    (r.start, usize::MAX - r.end)
}

/// Picks a kind: the context kind if the candidates allow it, else the first
/// candidate; with no candidates, the context, then `or`.
pub(crate) fn choose(
    candidates: &[KindId],
    ctx: Option<KindId>,
    or: Option<KindId>,
) -> Option<KindId> {
    if candidates.is_empty() {
        return ctx.or(or);
    }
    ctx.filter(|c| candidates.contains(c))
        .or(or.filter(|c| candidates.contains(c)))
        .or(candidates.first().copied())
}

/// Whether `alias` is of a kind readable in text.
pub(crate) fn readable_alias(tax: &Taxonomy, alias: &str) -> bool {
    tax.parse_alias(alias)
        .is_some_and(|p| tax.readable_in_text(p.kind))
}

/// The local id of a reference to a contained resource (`#p1` → `p1`).
pub(crate) fn contained_ref(text: &str) -> Option<&str> {
    text.strip_prefix('#').filter(|id| shape::is_fhir_id(id))
}

/// Whether `r` overlaps any range of `sorted` (sorted by start, non-overlapping).
pub(crate) fn overlaps(sorted: &[(Range<usize>, usize)], r: &Range<usize>) -> bool {
    let i = sorted.partition_point(|(o, _)| o.end <= r.start);
    sorted.get(i).is_some_and(|(o, _)| o.start < r.end)
}
