//! Splicing edits into a body: the new bytes, and where each edit landed in
//! them, so verification reads again only what changed.

use super::RewriteError;
use crate::alias::scan::Part;
use std::borrow::Cow;
use std::ops::Range;

/// An applied edit: its range in the body and the range of its replacement
/// in the output.
pub(super) type Edit = (Range<usize>, Range<usize>);

/// A string of a rewritten JSON part that verification must read again, by
/// its range in the output.
pub(super) enum Touched {
    /// An unescaped string's content.
    Plain(Range<usize>),
    /// An escaped string literal, quotes included.
    Escaped(Range<usize>),
}

impl Touched {
    /// The same string at its place in the output (`None`: inside an edit).
    fn shifted(self, shift: &mut Shift<'_>) -> Option<Touched> {
        Some(match self {
            Touched::Plain(r) => Touched::Plain(shift.at(r.start)?..shift.at(r.end)?),
            Touched::Escaped(r) => Touched::Escaped(shift.at(r.start)?..shift.at(r.end)?),
        })
    }
}

/// Whether the edits of a JSON part kept the structure the scan lexed.
pub(super) enum Structure {
    Kept,
    Changed,
}

/// Hands `check` the strings of the output of JSON part `p` that
/// verification must read, in order: those an edit touched or wrote, the
/// escaped ones, and those the scan did not prove clean. Stops at
/// [`Structure::Changed`] when an edit does not keep the part's structure
/// (then the output must be re-read whole), or at the first error of
/// `check`. Nothing is collected: a 1 MB body touches tens of thousands of
/// strings.
pub(super) fn visit_touched(
    p: &Part,
    applied: &[Edit],
    mut check: impl FnMut(Touched) -> Result<(), RewriteError>,
) -> Result<Structure, RewriteError> {
    let mut touched = vec![false; p.lits.len()];
    for (r, o) in applied {
        if r.is_empty() {
            return Ok(Structure::Changed);
        }
        let number = p
            .numbers
            .binary_search_by(|n| n.start.cmp(&r.start))
            .is_ok_and(|i| p.numbers.get(i) == Some(r));
        if number {
            // Written back as a string: `"<alias>"`.
            if o.len() < 2 {
                return Ok(Structure::Changed);
            }
            check(Touched::Plain(o.start + 1..o.end - 1))?;
            continue;
        }
        let e = p.escaped.partition_point(|e| e.span.start < r.start);
        if p.escaped.get(e).is_some_and(|e| e.span == *r) {
            // Re-encoded whole; read below with every escaped string.
            continue;
        }
        let l = p.lits.partition_point(|l| l.range.end < r.end);
        match (p.lits.get(l), touched.get_mut(l)) {
            (Some(lit), Some(t)) if lit.range.start <= r.start => *t = true,
            _ => return Ok(Structure::Changed),
        }
    }
    let mut shift = Shift {
        applied,
        next: 0,
        delta: 0,
    };
    let mut lits = p.lits.iter().zip(touched).peekable();
    let mut escaped = p.escaped.iter().peekable();
    loop {
        let plain_first = match (lits.peek(), escaped.peek()) {
            (None, None) => break,
            (Some((l, _)), Some(e)) => l.range.start < e.span.start,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let in_body = if plain_first {
            let Some((l, touched)) = lits.next() else {
                break;
            };
            if !touched && l.clean {
                continue;
            }
            Touched::Plain(l.range.clone())
        } else {
            let Some(e) = escaped.next() else {
                break;
            };
            Touched::Escaped(e.span.clone())
        };
        let Some(in_output) = in_body.shifted(&mut shift) else {
            return Ok(Structure::Changed);
        };
        check(in_output)?;
    }
    Ok(Structure::Kept)
}

/// Maps body offsets to output offsets, for offsets asked in order and never
/// inside an edit: an offset moves by the edits that end at or before it.
pub(super) struct Shift<'e> {
    applied: &'e [Edit],
    next: usize,
    delta: isize,
}

impl Shift<'_> {
    fn at(&mut self, x: usize) -> Option<usize> {
        while let Some((r, o)) = self.applied.get(self.next).filter(|(r, _)| r.end <= x) {
            let grew = isize::try_from(o.len()).ok()? - isize::try_from(r.len()).ok()?;
            self.delta += grew;
            self.next += 1;
        }
        x.checked_add_signed(self.delta)
    }
}

/// Replaces sorted, non-overlapping ranges of `src`.
pub(crate) fn splice(src: &[u8], edits: Vec<(Range<usize>, Cow<'_, str>)>) -> Vec<u8> {
    splice_mapped(src, edits).0
}

/// [`splice`], also returning the edits applied (an edit overlapping an
/// earlier one is dropped), each with the range its replacement took in the
/// output, in order.
pub(super) fn splice_mapped(
    src: &[u8],
    mut edits: Vec<(Range<usize>, Cow<'_, str>)>,
) -> (Vec<u8>, Vec<Edit>) {
    // Stable: of two edits at one start, the first given wins. Edits mostly
    // come in order (a scan's occurrences are), and the sort's scratch
    // buffer is as large as the edits.
    if !edits.is_sorted_by_key(|(r, _)| r.start) {
        edits.sort_by_key(|(r, _)| r.start);
    }
    let mut out = Vec::with_capacity(src.len() + edits.len() * 8);
    let mut applied = Vec::with_capacity(edits.len());
    let mut at = 0;
    for (r, with) in edits {
        if r.start < at {
            continue;
        }
        out.extend_from_slice(src.get(at..r.start).unwrap_or_default());
        let from = out.len();
        out.extend_from_slice(with.as_bytes());
        applied.push((r.clone(), from..out.len()));
        at = r.end;
    }
    out.extend_from_slice(src.get(at..).unwrap_or_default());
    (out, applied)
}
