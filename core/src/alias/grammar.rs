//! The alias grammar: `<prefix>-<epoch>-NNN` (`patient-k7q2-001`).
//!
//! The number is zero-padded to three digits and grows past 999
//! (`patient-k7q2-1000`). The epoch is four characters of
//! [`EPOCH_ALPHABET`] holding at least one letter and one digit (a new one
//! begins with a letter and ends with a digit, see [`Epoch::from_seed`]); it
//! names the session *map* that issued the alias. control draws a fresh random epoch
//! whenever it creates a session's map (first use, after expiry, after the
//! store was lost) and never reuses one it has recorded for that session name,
//! so an alias issued under an old map can never resolve under a new one: it
//! is refused as not issued in this session.
//!
//! A string is an alias when it splits at its last `-` into a configured
//! prefix (plus optional epoch) and a canonical number, which is exactly a
//! longest-prefix match with a digits-only tail: `patient-appt-k7q2-001` is an
//! appointment, not a patient. Maps without an epoch (unit tests, sessions
//! persisted before epochs existed) issue `<prefix>-NNN`; control never
//! creates one. Number 0 is the sentinel `<prefix>[-<epoch>]-000`, which is
//! never issued and decodes to nothing.

use super::id::KindId;
use super::taxonomy::Taxonomy;

/// Characters of an epoch: lowercase letters and digits without the
/// look-alikes `0`, `1`, `i`, `l`, `o`.
pub const EPOCH_ALPHABET: &[u8; 31] = b"abcdefghjkmnpqrstuvwxyz23456789";

/// Length of an epoch.
pub const EPOCH_LEN: usize = 4;

/// The epoch of a session map: which incarnation of a session issued an
/// alias (`k7q2` in `patient-k7q2-001`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch([u8; EPOCH_LEN]);

impl Epoch {
    /// The epoch a random `seed` picks (the caller draws the seed: core reads
    /// no RNG): a letter, two characters of the alphabet, a digit.
    ///
    /// The letter first and the digit last keep an alias from holding a
    /// shorter alias-shaped string where a known-id search would see one (a
    /// class boundary on each side). With a digit first, `patient-364w-001`
    /// held `patient-364`: an HMS value `patient-364` then made every body of
    /// that session that showed it fail verification. With a letter last, a
    /// two-letter prefix could be the epoch's tail (`ot-001` inside
    /// `patient-k7ot-001`).
    pub fn from_seed(seed: u64) -> Epoch {
        const LETTERS: u64 = 23;
        const DIGITS: u64 = 8;
        let n = EPOCH_ALPHABET.len() as u64;
        let at = |i: u64| EPOCH_ALPHABET.get(i as usize).copied().unwrap_or(b'a');
        let mut x = seed;
        let mut take = |range: u64, offset: u64| {
            let c = at(offset + x % range);
            x /= range;
            c
        };
        // The alphabet's letters are its first 23 characters, digits the rest.
        Epoch([
            take(LETTERS, 0),
            take(n, 0),
            take(n, 0),
            take(DIGITS, LETTERS),
        ])
    }

    /// Parses an epoch; `None` unless it is [`EPOCH_LEN`] characters of
    /// [`EPOCH_ALPHABET`] with at least one letter and one digit.
    pub fn parse(s: &str) -> Option<Epoch> {
        let b: [u8; EPOCH_LEN] = s.as_bytes().try_into().ok()?;
        let ok = b.iter().all(|c| EPOCH_ALPHABET.contains(c))
            && b.iter().any(u8::is_ascii_alphabetic)
            && b.iter().any(u8::is_ascii_digit);
        ok.then_some(Epoch(b))
    }

    /// The epoch as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AliasParts {
    /// The kind its prefix names.
    pub kind: KindId,
    /// The epoch of the map that issued it; `None` for an epoch-less alias.
    pub epoch: Option<Epoch>,
    /// Its number; 0 for the sentinel.
    pub number: u32,
}

impl AliasParts {
    /// Whether this is the sentinel handed out past the session limit.
    pub fn is_sentinel(&self) -> bool {
        self.number == 0
    }
}

impl Taxonomy {
    /// Formats the epoch-less alias `number` of `kind`; `None` for a kind of
    /// another taxonomy.
    pub fn format_alias(&self, kind: KindId, number: u32) -> Option<String> {
        self.format_alias_in(kind, None, number)
    }

    /// Formats the alias `number` of `kind` issued under `epoch`.
    pub fn format_alias_in(
        &self,
        kind: KindId,
        epoch: Option<Epoch>,
        number: u32,
    ) -> Option<String> {
        self.kind(kind).map(|k| match epoch {
            Some(e) => format!("{}-{e}-{number:03}", k.prefix),
            None => format!("{}-{number:03}", k.prefix),
        })
    }

    /// The sentinel of `kind` (`patient-000`): looks like an alias, is never
    /// issued, decodes to nothing.
    pub fn sentinel(&self, kind: KindId) -> Option<String> {
        self.format_alias(kind, 0)
    }

    /// The sentinel of `kind` under `epoch` (`patient-k7q2-000`).
    pub fn sentinel_in(&self, kind: KindId, epoch: Option<Epoch>) -> Option<String> {
        self.format_alias_in(kind, epoch, 0)
    }

    /// Parses an alias. `None` unless the string is a configured prefix, `-`, and
    /// a canonical number (at least three digits, no extra leading zeros).
    pub fn parse_alias(&self, alias: &str) -> Option<AliasParts> {
        let (prefix, digits) = alias.rsplit_once('-')?;
        if digits.len() < 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if digits.len() > 3 && digits.starts_with('0') {
            return None;
        }
        let number: u32 = digits.parse().ok()?;
        // `<prefix>-<epoch>` first; a prefix that itself ends in an
        // epoch-shaped segment would be read as that prefix and an epoch.
        if let Some((head, e)) = prefix.rsplit_once('-') {
            if let (Some(epoch), Some(kind)) = (Epoch::parse(e), self.alias_prefix(head)) {
                return Some(AliasParts {
                    kind,
                    epoch: Some(epoch),
                    number,
                });
            }
        }
        let kind = self.alias_prefix(prefix)?;
        Some(AliasParts {
            kind,
            epoch: None,
            number,
        })
    }

    /// The kind a drifted alias names itself: the kind of the longest
    /// configured prefix that `drifted` starts with, up to a `-`
    /// (`task-group-item-001` → task-group, `patient-record-012` → patient).
    /// Repair stays within it (see [`Self::repair_candidates`]).
    /// Returns the kind and the prefix's length.
    pub(crate) fn own_prefix_kind(&self, drifted: &str) -> Option<(KindId, usize)> {
        drifted.rmatch_indices('-').find_map(|(i, _)| {
            drifted
                .get(..i)
                .and_then(|p| self.alias_prefix(p))
                .map(|k| (k, i))
        })
    }

    /// Aliases that `drifted` may have meant: `drifted` with one configured noun
    /// infix removed after its own prefix (`task-item-001` → `task-001`), each
    /// itself a well-formed alias *of the kind that prefix names*. The caller
    /// accepts a candidate only if its session issued it.
    ///
    /// Repair never crosses kinds. A string that parses as an alias is that
    /// alias (issued or not) and has no candidates: `task-group-001` is a task
    /// group, never the drift of `task-001` (the infix `group` ends the
    /// `task-group` prefix), so it cannot decode to the task while no task
    /// group is issued and to the task group later. A string that does not
    /// parse is repaired only within the kind of its longest prefix:
    /// `patient-group-appt-001` (a patient prefix) is not the appointment
    /// `patient-appt-001`. So one string has one kind for the life of a
    /// session, and a decode of it never names a record of another.
    pub fn repair_candidates(&self, drifted: &str) -> Vec<String> {
        if self.parse_alias(drifted).is_some() {
            return Vec::new();
        }
        let Some((kind, prefix_end)) = self.own_prefix_kind(drifted) else {
            return Vec::new();
        };
        let (prefix, rest) = drifted.split_at(prefix_end);
        // `rest` is `-seg-…-number`: its first piece is empty, its last the
        // number; an infix sits strictly between them.
        let segments: Vec<&str> = rest.split('-').collect();
        let mut out = Vec::new();
        for (j, seg) in segments
            .iter()
            .enumerate()
            .take(segments.len().saturating_sub(1))
            .skip(1)
        {
            if !self.repair_infixes().iter().any(|i| i == seg) {
                continue;
            }
            let tail = segments
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != j)
                .map(|(_, s)| *s)
                .collect::<Vec<_>>()
                .join("-");
            let candidate = format!("{prefix}{tail}");
            if self
                .parse_alias(&candidate)
                .is_some_and(|p| !p.is_sentinel() && p.kind == kind)
                && !out.contains(&candidate)
            {
                out.push(candidate);
            }
        }
        out
    }

    /// Whether `token` is an alias or a repairable drift of one; request
    /// scanning decodes exactly these tokens.
    pub fn looks_like_alias(&self, token: &str) -> bool {
        self.parse_alias(token).is_some() || !self.repair_candidates(token).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use crate::alias::Taxonomy;

    #[test]
    fn format_pads_to_three_and_grows() {
        let t = Taxonomy::default();
        let p = t.kind_by_name("patient").unwrap();
        assert_eq!(t.format_alias(p, 1).unwrap(), "patient-001");
        assert_eq!(t.format_alias(p, 999).unwrap(), "patient-999");
        assert_eq!(t.format_alias(p, 1000).unwrap(), "patient-1000");
        for n in [1, 42, 999, 1000, 123_456] {
            let a = t.format_alias(p, n).unwrap();
            let parts = t.parse_alias(&a).unwrap();
            assert_eq!((parts.kind, parts.number), (p, n));
        }
    }

    #[test]
    fn longest_prefix_with_digit_tail() {
        let t = Taxonomy::default();
        let kind = |a: &str| t.parse_alias(a).map(|p| t.kind_name(p.kind).to_owned());
        assert_eq!(kind("patient-appt-001").as_deref(), Some("appointment"));
        assert_eq!(kind("patient-001").as_deref(), Some("patient"));
        assert_eq!(kind("task-group-007").as_deref(), Some("task-group"));
        assert_eq!(kind("task-007").as_deref(), Some("task"));
        for not_alias in [
            "patient-01",
            "patient-0001",
            "patient-appt",
            "patient-abc",
            "pat-000123",
            "patient-",
            "-001",
            "x",
        ] {
            assert_eq!(kind(not_alias), None, "{not_alias}");
        }
    }

    #[test]
    fn epoch_aliases_parse_and_keep_their_epoch() {
        use crate::alias::grammar::Epoch;
        let t = Taxonomy::default();
        let p = t.kind_by_name("patient").unwrap();
        let appt = t.kind_by_name("appointment").unwrap();
        for seed in [0u64, 1, 7, 42, 1 << 40, u64::MAX] {
            let e = Epoch::from_seed(seed);
            assert_eq!(Epoch::parse(e.as_str()), Some(e), "{e}");
            let a = t.format_alias_in(p, Some(e), 1).unwrap();
            assert_eq!(a, format!("patient-{e}-001"));
            let parts = t.parse_alias(&a).unwrap();
            assert_eq!((parts.kind, parts.epoch, parts.number), (p, Some(e), 1));
            let b = t.format_alias_in(appt, Some(e), 12).unwrap();
            assert_eq!(t.parse_alias(&b).unwrap().kind, appt, "{b}");
            assert!(t
                .parse_alias(&t.sentinel_in(p, Some(e)).unwrap())
                .unwrap()
                .is_sentinel());
        }
        // Epochs differ from seed to seed, and words are never epochs.
        for seed in 0..1000u64 {
            let e = Epoch::from_seed(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .as_str()
                .as_bytes()
                .to_vec();
            assert!(e[0].is_ascii_lowercase() && e[3].is_ascii_digit(), "{e:?}");
        }
        let distinct: std::collections::BTreeSet<Epoch> =
            (0..1000u64).map(|s| Epoch::from_seed(s * 7919)).collect();
        assert_eq!(distinct.len(), 1000);
        for not_epoch in [
            "appt", "item", "2024", "k7q", "k7q2x", "K7Q2", "k0q2", "kl12",
        ] {
            assert_eq!(Epoch::parse(not_epoch), None, "{not_epoch}");
        }
        assert_eq!(
            t.parse_alias("patient-k7q2-001").unwrap().epoch,
            Epoch::parse("k7q2")
        );
        assert_eq!(t.parse_alias("patient-001").unwrap().epoch, None);
    }

    /// Every place a known-id search could start and end a match inside an
    /// alias (class boundaries, see `known`): no such piece of an alias is
    /// itself alias-shaped, for any kind, epoch draw or number.
    #[test]
    fn an_alias_holds_no_shorter_alias() {
        use crate::alias::grammar::Epoch;
        use crate::alias::known::{end_ok, start_ok};
        let t = Taxonomy::default();
        let kinds: Vec<_> = t.kinds().map(|(id, _)| id).collect();
        for seed in (0..4000u64).map(|s| s.wrapping_mul(0x9E37_79B9_7F4A_7C15)) {
            let e = Epoch::from_seed(seed);
            for (k, n) in kinds
                .iter()
                .zip([1u32, 7, 42, 364, 999, 1000, 12_345].iter().cycle())
            {
                let a = t.format_alias_in(*k, Some(e), *n).unwrap();
                let b = a.as_bytes();
                for i in (0..b.len()).filter(|&i| start_ok(b, i)) {
                    for j in (i + 1..=b.len()).filter(|&j| end_ok(b, j)) {
                        if (i, j) != (0, b.len()) {
                            assert!(t.parse_alias(&a[i..j]).is_none(), "{} inside {a}", &a[i..j]);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sentinel_is_number_zero() {
        let t = Taxonomy::default();
        let p = t.kind_by_name("patient").unwrap();
        let s = t.sentinel(p).unwrap();
        assert_eq!(s, "patient-000");
        assert!(t.parse_alias(&s).unwrap().is_sentinel());
    }

    #[test]
    fn repair_strips_one_known_infix() {
        let t = Taxonomy::default();
        assert_eq!(
            t.repair_candidates("task-item-001"),
            vec!["task-001".to_owned()]
        );
        assert_eq!(
            t.repair_candidates("patient-record-012"),
            vec!["patient-012".to_owned()]
        );
        assert_eq!(
            t.repair_candidates("task-group-entry-k7q2-004"),
            vec!["task-group-k7q2-004".to_owned()]
        );
        assert!(t.repair_candidates("task-001").is_empty());
        assert!(t.repair_candidates("group-001").is_empty());
        assert!(
            t.repair_candidates("task-item-000").is_empty(),
            "never repairs to a sentinel"
        );
        assert!(t.looks_like_alias("patient-item-003"));
        assert!(!t.looks_like_alias("patient-foo-003"));
    }

    /// The red team's case: with `group` both an infix and the end of the
    /// `task-group` prefix, `task-group-001` was repaired to `task-001`; and
    /// `patient-group-appt-001` (a patient prefix) to the appointment
    /// `patient-appt-001`. A string that parses is its own alias, one that
    /// does not is repaired only within its longest prefix's kind.
    #[test]
    fn repair_never_crosses_kinds() {
        let t = Taxonomy::default();
        for alias in [
            "task-group-001",
            "task-group-k7q2-001",
            "patient-appt-001",
            "patient-appt-k7q2-017",
        ] {
            assert!(t.parse_alias(alias).is_some(), "{alias}");
            assert!(
                t.repair_candidates(alias).is_empty(),
                "{alias} is an alias, not a drift"
            );
        }
        assert!(t.repair_candidates("patient-group-appt-001").is_empty());
        assert!(t.repair_candidates("patient-item-appt-k7q2-001").is_empty());
        assert_eq!(
            t.repair_candidates("patient-appt-record-001"),
            ["patient-appt-001"]
        );
        assert_eq!(
            t.repair_candidates("task-group-group-001"),
            ["task-group-001"]
        );
        assert_eq!(t.repair_candidates("task-k7q2-item-001"), ["task-k7q2-001"]);
        let kind = |s: &str| t.own_prefix_kind(s).map(|(k, _)| t.kind_name(k).to_owned());
        assert_eq!(kind("task-group-item-001").as_deref(), Some("task-group"));
        assert_eq!(kind("task-item-001").as_deref(), Some("task"));
        assert_eq!(kind("patient-appt-x").as_deref(), Some("appointment"));
        assert_eq!(kind("patient-apptx-001").as_deref(), Some("patient"));
        assert_eq!(kind("patientx-001"), None);
        assert_eq!(kind("patient"), None, "a prefix ends at a dash");
    }
}
