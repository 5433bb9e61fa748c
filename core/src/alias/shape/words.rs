//! Word scanning for [`super::find_in_text`]: the `/` and `-` bytes of a text
//! read 64 at a time ([`Marks`]) and the word starts next to them ([`WordStarts`]).

use super::{is, is_token_byte, TextHit, ALNUM};

/// The word starts (a letter after a byte that is not a token byte) where a
/// pattern of [`find_in_text`] can begin, in order: every one of them follows
/// a `/`, or its run of letters and digits ends at a `/` or `-`. They are
/// found from the `/` and `-` bytes ([`Marks`]), so text between them is never
/// looked at byte by byte.
pub(super) struct WordStarts<'a> {
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
    pub(super) fn new(text: &'a [u8], marks: Marks<'a>) -> Self {
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
    pub(super) fn skip_to(&mut self, pos: usize) {
        self.marks.skip_to(pos);
        if self.after.is_some_and(|a| a < pos) {
            self.after = None;
        }
    }

    /// The next word: its start, and the end of its run of letters and
    /// digits. The dashes of `uuids` (the UUIDs of the text, in order, the
    /// same on every call) are not read: a word that runs into a UUID starts
    /// no pattern, as every pattern stops where the next UUID starts.
    pub(super) fn next_outside(&mut self, uuids: &[TextHit<'_>]) -> Option<(usize, usize)> {
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
pub(super) struct Marks<'a> {
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
    pub(super) fn new(text: &'a [u8], x: u8, y: u8) -> Self {
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
pub(super) fn byte_mask(word: u64, x: u8, y: u8) -> u64 {
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
