//! A quick "certainly not" in front of a table lookup.
//!
//! The text patterns ask the taxonomy about every word next to a `/` or `-`
//! (`api`, `v2`, `fhir.example`): is it a path segment that names a kind, a
//! FHIR resource type, a FHIR id prefix? Most are none of these, and a hash
//! lookup (with its key normalized first) costs far more than the word. A
//! [`PairSet`] holds the first two letters and the length of every key of a
//! table, folded the way the table folds its keys or more (the separators
//! `_`, `-`, `.` and space skipped; ASCII case ignored unless the table
//! matches case): a word whose first two letters or whose length no key has
//! is no key of the table, and no lookup is made.

/// The folded first two bytes of a table's keys, as a 64 Kbit set, and
/// their folded lengths.
#[derive(Clone)]
pub(crate) struct PairSet {
    bits: Vec<u64>,
    /// Bit `n`: some key folds to `n` bytes (bit 63: to 63 or more).
    lens: u64,
    /// Letter case is folded (the table ignores it).
    fold_case: bool,
    /// Some key folds to fewer than two bytes: every word may be one.
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

/// The first two bytes of `word` as the set folds them (separators
/// skipped, ASCII lower case when `fold_case`; `None` when fewer than two
/// remain) and the length bit of its folded length.
fn folded(word: &[u8], fold_case: bool) -> (Option<usize>, u64) {
    let (mut len, mut pair) = (0usize, 0usize);
    for &b in word {
        if matches!(b, b'_' | b'-' | b'.' | b' ') {
            continue;
        }
        if len < 2 {
            let b = if fold_case { b.to_ascii_lowercase() } else { b };
            pair = pair << 8 | usize::from(b);
        }
        len += 1;
    }
    ((len >= 2).then_some(pair), 1u64 << len.min(63))
}

impl PairSet {
    /// The set of `keys` of a table that ignores letter case.
    pub(crate) fn of<'k>(keys: impl IntoIterator<Item = &'k str>) -> PairSet {
        PairSet::build(keys, true)
    }

    /// The set of `keys` of a table that matches letter case.
    pub(crate) fn of_exact<'k>(keys: impl IntoIterator<Item = &'k str>) -> PairSet {
        PairSet::build(keys, false)
    }

    fn build<'k>(keys: impl IntoIterator<Item = &'k str>, fold_case: bool) -> PairSet {
        let mut set = PairSet {
            bits: vec![0; 1024],
            lens: 0,
            fold_case,
            any: false,
        };
        for key in keys {
            let (pair, len) = folded(key.as_bytes(), fold_case);
            set.lens |= len;
            match pair {
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
        if self.any {
            return true;
        }
        let (pair, len) = folded(word, self.fold_case);
        if self.lens & len == 0 {
            return false;
        }
        match pair {
            Some(p) => self
                .bits
                .get(p >> 6)
                .is_some_and(|w| w & (1u64 << (p & 63)) != 0),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn folds_as_the_tables_do() {
        let set = PairSet::of(["patients", "Patient", "pat"]);
        for w in ["patients", "PATIENTS", "Pa_tients", "p-atient", "pat"] {
            assert!(set.may_hold(w.as_bytes()), "{w}");
        }
        for w in ["api", "v2", "x", "", "fhir.example", "pa", "patientsx"] {
            assert!(!set.may_hold(w.as_bytes()), "{w}");
        }
        assert!(PairSet::of(["a"]).may_hold(b"zz"));
        let exact = PairSet::of_exact(["Patient"]);
        assert!(exact.may_hold(b"Patient"));
        assert!(!exact.may_hold(b"patient"));
    }

    proptest! {
        /// Never "certainly not" for a word that folds to a key.
        #[test]
        fn no_false_no(keys in proptest::collection::vec("[A-Za-z0-9_.-]{0,8}", 0..20),
                       pick in any::<prop::sample::Index>(),
                       noise in "[_.-]{0,2}") {
            let set = PairSet::of(keys.iter().map(String::as_str));
            let exact = PairSet::of_exact(keys.iter().map(String::as_str));
            if !keys.is_empty() {
                let key = &keys[pick.index(keys.len())];
                let variant: String = format!("{noise}{}", key.to_ascii_uppercase());
                prop_assert!(set.may_hold(key.as_bytes()));
                prop_assert!(set.may_hold(variant.as_bytes()));
                prop_assert!(exact.may_hold(key.as_bytes()));
                let glued = format!("{noise}{key}");
                prop_assert!(exact.may_hold(glued.as_bytes()));
            }
        }
    }
}
