//! The alias grammar: `<prefix>-NNN`.
//!
//! The number is zero-padded to three digits and grows past 999
//! (`patient-1000`). A string is an alias when it splits at its last `-` into a
//! configured prefix and a canonical number, which is exactly a longest-prefix
//! match with a digits-only tail: `patient-appt-001` is an appointment, not a
//! patient, because `patient` leaves the tail `appt-001`. Number 0 is the
//! sentinel `<prefix>-000`, which is never issued and decodes to nothing.

use super::taxonomy::{KindId, Taxonomy};

/// A parsed alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AliasParts {
    /// The kind its prefix names.
    pub kind: KindId,
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
    /// Formats the alias `number` of `kind`; `None` for a kind of another taxonomy.
    pub fn format_alias(&self, kind: KindId, number: u32) -> Option<String> {
        self.kind(kind).map(|k| format!("{}-{number:03}", k.prefix))
    }

    /// The sentinel of `kind` (`patient-000`): looks like an alias, is never
    /// issued, decodes to nothing.
    pub fn sentinel(&self, kind: KindId) -> Option<String> {
        self.format_alias(kind, 0)
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
        let kind = self.alias_prefix(prefix)?;
        Some(AliasParts { kind, number })
    }

    /// Aliases that `drifted` may have meant: `drifted` with one configured noun
    /// infix removed (`task-group-001` → `task-001`), each itself a well-formed
    /// alias. The caller accepts a candidate only if its session issued it.
    pub fn repair_candidates(&self, drifted: &str) -> Vec<String> {
        let segments: Vec<&str> = drifted.split('-').collect();
        let mut out = Vec::new();
        // Segment 0 starts the prefix and the last one is the number: an infix
        // sits strictly between them.
        for (j, seg) in segments
            .iter()
            .enumerate()
            .take(segments.len().saturating_sub(1))
            .skip(1)
        {
            if !self.repair_infixes().iter().any(|i| i == seg) {
                continue;
            }
            let candidate = segments
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != j)
                .map(|(_, s)| *s)
                .collect::<Vec<_>>()
                .join("-");
            if self
                .parse_alias(&candidate)
                .is_some_and(|p| !p.is_sentinel())
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
            t.repair_candidates("task-group-001"),
            vec!["task-001".to_owned()]
        );
        assert_eq!(
            t.repair_candidates("patient-record-012"),
            vec!["patient-012".to_owned()]
        );
        assert!(t.repair_candidates("task-001").is_empty());
        assert!(t.repair_candidates("group-001").is_empty());
        assert!(
            t.repair_candidates("task-group-000").is_empty(),
            "never repairs to a sentinel"
        );
        assert!(t.looks_like_alias("patient-item-003"));
        assert!(!t.looks_like_alias("patient-foo-003"));
    }
}
