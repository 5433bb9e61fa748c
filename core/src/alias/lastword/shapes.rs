//! Raw-id shapes in a canonical text: UUIDs, prefixed FHIR ids, references
//! to a record type and the session's distinctive known ids.

use super::{class, run_at, LastWord, Reason};
use crate::alias::fhir;

impl LastWord<'_> {
    /// The first raw-id shape in a canonical text.
    pub(super) fn shapes(&self, t: &[u8]) -> Option<Reason> {
        let mut key = Vec::with_capacity(64);
        let mut i = 0;
        let mut prev_class = 0u8;
        while let Some(&b) = t.get(i) {
            let c = class(b);
            let run_start = c != 0 && c != prev_class;
            prev_class = c;
            if !run_start {
                i += 1;
                continue;
            }
            let run = run_at(t, i);
            let word_start = i == 0 || !t.get(i - 1).is_some_and(u8::is_ascii_alphanumeric);
            if word_start {
                if let Some(len) = uuid_at(t, i) {
                    if !self.is_alias(t, i, i + len) && !names_no_record(t, i) {
                        return Some(Reason::Uuid);
                    }
                }
                // The alnum word starting here.
                let word_end = i + t
                    .get(i..)
                    .unwrap_or_default()
                    .iter()
                    .position(|b| !b.is_ascii_alphanumeric())
                    .unwrap_or(t.len() - i);
                let word = t.get(i..word_end).unwrap_or_default();
                if let Some(r) = self.prefixed_or_reference(t, i, word_end, word) {
                    return Some(r);
                }
            }
            key.clear();
            if self.keys.may_hold(run) {
                key.extend(run.iter().map(u8::to_ascii_lowercase));
            }
            if let Some(list) = self.known.get(key.as_slice()).filter(|_| !key.is_empty()) {
                for v in list {
                    let e = i + v.len();
                    let Some(cand) = t.get(i..e) else {
                        continue;
                    };
                    let last = v.last().copied().unwrap_or(0);
                    let glued = t
                        .get(e)
                        .is_some_and(|n| class(*n) != 0 && class(*n) == class(last));
                    if cand.eq_ignore_ascii_case(v) && !glued && !self.is_alias(t, i, e) {
                        return Some(Reason::KnownId);
                    }
                }
            }
            i += run.len().max(1);
            prev_class = c;
        }
        None
    }

    /// A prefixed FHIR id (`PAT-000123`) or a reference (`Patient/x1`)
    /// whose word is `t[i..word_end]`.
    fn prefixed_or_reference(
        &self,
        t: &[u8],
        i: usize,
        word_end: usize,
        word: &[u8],
    ) -> Option<Reason> {
        match t.get(word_end) {
            Some(b'-') => {
                // One lookup of the word lower-cased on the stack: no new
                // string per word.
                if !self.tax.is_fhir_prefix(word) {
                    return None;
                }
                let digits = t
                    .get(word_end + 1..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                let e = word_end + 1 + digits;
                // `TG-2025-000311` is a business number, `pat-000123-v7`
                // an id with a suffix.
                let longer_number =
                    t.get(e) == Some(&b'-') && t.get(e + 1).is_some_and(u8::is_ascii_digit);
                let glued = t.get(e).is_some_and(u8::is_ascii_alphanumeric) || longer_number;
                (digits > 0 && !glued && !self.is_alias(t, i, e)).then_some(Reason::FhirId)
            }
            Some(b'/') => {
                if !fhir::is_resource_type(word) || fhir::is_definition_type(word) {
                    return None;
                }
                let s = word_end + 1;
                let mut e = s + t
                    .get(s..)
                    .unwrap_or_default()
                    .iter()
                    .take(65)
                    .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'))
                    .count();
                while e > s && t.get(e - 1) == Some(&b'.') {
                    e -= 1;
                }
                let id = t.get(s..e).unwrap_or_default();
                let plausible = id.iter().any(u8::is_ascii_digit)
                    || id.first().is_some_and(u8::is_ascii_lowercase);
                (!id.is_empty() && id.len() <= 64 && plausible && !self.is_alias(t, s, e))
                    .then_some(Reason::Reference)
            }
            _ => None,
        }
    }
}

/// Keys whose values are ids of a request or a trace, never of a record
/// (normalised: lower case, no separators).
const NOT_RECORD_KEYS: [&[u8]; 7] = [
    b"idempotency",
    b"request",
    b"trace",
    b"correlation",
    b"span",
    b"session",
    b"nonce",
];

/// Whether the value starting at `i` stands under a key (JSON `"key": "`,
/// a query's or a header's `key=`) that names a request or a trace
/// (`idempotencyKey`, `traceparent`, `X-Request-Id`).
fn names_no_record(t: &[u8], i: usize) -> bool {
    let mut e = i;
    // A value may start a few bytes after its key: `"key": "`, `key=`,
    // a traceparent's version `00-`.
    let head = t.get(i.saturating_sub(8)..i).unwrap_or_default();
    if head.ends_with(b"00-") {
        e -= 3;
    }
    while e > 0
        && t.get(e - 1)
            .is_some_and(|b| matches!(b, b'"' | b' ' | b':' | b'='))
    {
        e -= 1;
    }
    if e == i {
        return false;
    }
    let from = e.saturating_sub(64);
    let key = t.get(from..e).unwrap_or_default();
    let start = key
        .iter()
        .rposition(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')))
        .map_or(0, |p| p + 1);
    let key: Vec<u8> = key
        .get(start..)
        .unwrap_or_default()
        .iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(u8::to_ascii_lowercase)
        .collect();
    NOT_RECORD_KEYS
        .iter()
        .any(|n| key.windows(n.len()).any(|w| w == *n))
}

/// A UUID at `i`: its length (36 with dashes, 32 without).
fn uuid_at(t: &[u8], i: usize) -> Option<usize> {
    let rest = t.get(i..).unwrap_or_default();
    // The hex run decides the form: 8 digits then a dash, or 32 digits.
    // Most words are not hex or are short: over at once.
    let run = rest
        .iter()
        .take(33)
        .take_while(|b| b.is_ascii_hexdigit())
        .count();
    match run {
        8 => {
            let dashed = (8..36).all(|k| {
                if matches!(k, 8 | 13 | 18 | 23) {
                    rest.get(k) == Some(&b'-')
                } else {
                    rest.get(k).is_some_and(u8::is_ascii_hexdigit)
                }
            });
            dashed.then_some(36)
        }
        32 => {
            let glued = rest.get(32).is_some_and(u8::is_ascii_alphanumeric);
            let version = rest.get(12).is_some_and(|b| (b'1'..=b'8').contains(b));
            let variant = rest.get(16).is_some_and(|b| b"89abAB".contains(b));
            (!glued && version && variant).then_some(32)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::uuid_at;
    use proptest::prelude::*;

    /// The definition, one position at a time: the dashed form is tried
    /// first, then 32 digits with a version and a variant, not glued.
    fn uuid_at_spelled_out(t: &[u8], i: usize) -> Option<usize> {
        let hex = |k: usize| t.get(i + k).is_some_and(u8::is_ascii_hexdigit);
        let dashed = (0..36).all(|k| {
            if matches!(k, 8 | 13 | 18 | 23) {
                t.get(i + k) == Some(&b'-')
            } else {
                hex(k)
            }
        });
        if dashed {
            return Some(36);
        }
        let run = (0..33).take_while(|&k| hex(k)).count();
        let glued = t.get(i + 32).is_some_and(u8::is_ascii_alphanumeric);
        let version = t.get(i + 12).is_some_and(|b| (b'1'..=b'8').contains(b));
        let variant = t.get(i + 16).is_some_and(|b| b"89abAB".contains(b));
        (run == 32 && !glued && version && variant).then_some(32)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Texts of hex digits, dashes and a few other bytes, so that both
        /// forms, near misses and glued ends all come up.
        #[test]
        fn uuid_at_reads_as_the_definition(
            t in proptest::collection::vec(
                prop_oneof![
                    6 => proptest::sample::select(b"0123456789abcdefABCDEF".to_vec()),
                    2 => Just(b'-'),
                    1 => proptest::sample::select(b"gxZ .\"".to_vec()),
                ],
                0..80,
            ),
            at in 0usize..80,
        ) {
            prop_assert_eq!(uuid_at(&t, at), uuid_at_spelled_out(&t, at));
        }
    }

    #[test]
    fn both_forms_are_read() {
        let dashed = b"x 123e4567-e89b-42d3-a456-426614174000 y";
        assert_eq!(uuid_at(dashed, 2), Some(36));
        let plain = b"123e4567e89b42d3a456426614174000";
        assert_eq!(uuid_at(plain, 0), Some(32));
        assert_eq!(uuid_at(b"123e4567e89b42d3a456426614174000g", 0), None);
        assert_eq!(uuid_at(b"cafe", 0), None);
    }
}
