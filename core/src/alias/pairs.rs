//! A quick "certainly not" in front of a table lookup.
//!
//! The text patterns ask the taxonomy about every word next to a `/` or `-`
//! (`api`, `v2`, `fhir.example`): is it a path segment that names a kind, a
//! FHIR resource type, a FHIR id prefix? Most are none of these, and a hash
//! lookup costs far more than the word. A [`PairSet`] holds the first two
//! bytes and the length of every key of a table: a word whose first two bytes
//! or whose length no key has is no key of the table, and no lookup is made.
//!
//! The set compares bytes as they are. A table that ignores case and
//! separators holds its keys normalized, and a word is normalized the same
//! way before the set is asked about it.

/// The first two bytes of a table's keys, as a 64 Kbit set, and their
/// lengths.
#[derive(Clone)]
pub(crate) struct PairSet {
    bits: Vec<u64>,
    /// Bit `n`: some key has `n` bytes (bit 63: 63 or more).
    lens: u64,
    /// Some key has fewer than two bytes: every word may be one.
    any: bool,
}

impl std::fmt::Debug for PairSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pairs: u32 = self.bits.iter().map(|w| w.count_ones()).sum();
        f.debug_struct("PairSet")
            .field("pairs", &pairs)
            .field("any", &self.any)
            .finish()
    }
}

/// The first two bytes of `word` as one number (`None` for a shorter word).
fn pair(word: &[u8]) -> Option<usize> {
    match *word {
        [a, b, ..] => Some(usize::from(a) << 8 | usize::from(b)),
        _ => None,
    }
}

/// The bit of a length in [`PairSet::lens`].
fn len_bit(len: usize) -> u64 {
    1u64 << len.min(63)
}

impl PairSet {
    /// The set of a table's `keys`.
    pub(crate) fn of<'k>(keys: impl IntoIterator<Item = &'k str>) -> PairSet {
        let mut set = PairSet {
            bits: vec![0; 1024],
            lens: 0,
            any: false,
        };
        for key in keys {
            set.lens |= len_bit(key.len());
            match pair(key.as_bytes()) {
                Some(p) => {
                    if let Some(w) = set.bits.get_mut(p >> 6) {
                        *w |= 1u64 << (p & 63);
                    }
                }
                None => set.any = true,
            }
        }
        set
    }

    /// Whether `word` may be a key of the table (`false`: certainly not).
    pub(crate) fn may_hold(&self, word: &[u8]) -> bool {
        self.any
            || (self.lens & len_bit(word.len()) != 0
                && pair(word).is_some_and(|p| self.has_pair(p)))
    }

    /// Whether some key may start with the bytes `a`, `b` (`false`:
    /// certainly none).
    pub(crate) fn may_start(&self, a: u8, b: u8) -> bool {
        self.any || self.has_pair(usize::from(a) << 8 | usize::from(b))
    }

    fn has_pair(&self, p: usize) -> bool {
        self.bits
            .get(p >> 6)
            .is_some_and(|w| w & (1u64 << (p & 63)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn holds_its_keys_and_turns_others_away() {
        let set = PairSet::of(["patients", "Patient", "pat"]);
        for w in ["patients", "Patient", "pat", "pa_", "pax"] {
            assert!(set.may_hold(w.as_bytes()), "{w}");
        }
        for w in [
            "api",
            "v2",
            "x",
            "",
            "fhir.example",
            "pa",
            "patientsx",
            "PATIENTS",
        ] {
            assert!(!set.may_hold(w.as_bytes()), "{w}");
        }
        assert!(PairSet::of(["a"]).may_hold(b"zz"));
        assert!(set.may_start(b'p', b'a') && set.may_start(b'P', b'a'));
        assert!(!set.may_start(b'a', b'p'));
    }

    proptest! {
        /// Never "certainly not" for a key.
        #[test]
        fn no_false_no(keys in proptest::collection::vec("[A-Za-z0-9_.-]{0,8}", 0..20),
                       pick in any::<prop::sample::Index>()) {
            let set = PairSet::of(keys.iter().map(String::as_str));
            if !keys.is_empty() {
                let key = &keys[pick.index(keys.len())];
                prop_assert!(set.may_hold(key.as_bytes()));
            }
        }
    }
}
