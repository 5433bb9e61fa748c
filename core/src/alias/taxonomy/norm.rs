//! Key normalisation: how a key, a word of a body or an identifier system is
//! spelled in the lookup tables, and how a key names an id by its spelling
//! (`patientId`, `PATIENT_IDS`, `fooGUID`). Pure functions of bytes; the
//! tables themselves are [`super::lookup`]'s.

use crate::alias::pairs::PairSet;

/// An identifier system as the table holds it: an OID without `urn:oid:`.
pub(super) fn bare_system(system: &str) -> &str {
    system
        .get(..8)
        .filter(|p| p.eq_ignore_ascii_case("urn:oid:"))
        .and_then(|_| system.get(8..))
        .unwrap_or(system)
}

/// A key as the lookup tables hold it: ASCII lowercase, without `_`, `-`,
/// `.` and spaces (`patient_id`, `PatientID` and `patientId` are one key).
pub(super) fn norm_key(key: &str) -> String {
    // Dropping and lower-casing ASCII bytes keeps UTF-8 whole.
    String::from_utf8(normalized(key.as_bytes()).collect()).unwrap_or_default()
}

/// The bytes of a normalized key (see [`norm_key`]).
pub(super) fn normalized(key: &[u8]) -> impl Iterator<Item = u8> + '_ {
    key.iter()
        .filter(|&&b| !is_key_separator(b))
        .map(u8::to_ascii_lowercase)
}

/// The bytes a normalized key leaves out.
pub(super) fn is_key_separator(b: u8) -> bool {
    matches!(b, b'_' | b'-' | b'.' | b' ')
}

/// Whether `set` (of normalized keys) may hold `key` once normalized, judged
/// by its first two bytes when neither is dropped by normalizing (most keys):
/// a cheap "certainly not" before [`with_norm`] reads the whole key.
pub(super) fn may_hold_normalized(set: &PairSet, key: &[u8]) -> bool {
    match *key {
        [a, b, ..] if !is_key_separator(a) && !is_key_separator(b) => {
            set.may_start(a.to_ascii_lowercase(), b.to_ascii_lowercase())
        }
        _ => true,
    }
}

/// Calls `f` with the normalized `key` without allocating (keys up to 64
/// bytes; longer keys are normalized on the heap).
pub(super) fn with_norm<R>(key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    // Most keys are normalized already (`patients`, `id`).
    if !key
        .iter()
        .any(|&b| b.is_ascii_uppercase() || is_key_separator(b))
    {
        return f(key);
    }
    let mut buf = [0u8; 64];
    let mut n = 0;
    for b in normalized(key) {
        match buf.get_mut(n) {
            Some(slot) => *slot = b,
            None => return f(&normalized(key).collect::<Vec<u8>>()),
        }
        n += 1;
    }
    f(buf.get(..n).unwrap_or_default())
}

/// The stem of a key that ends in an id word at a word boundary: `patient`
/// of `patientId`, `PatientID`, `patient_id`, `PATIENT-IDS`, `patientUuid`,
/// `patientGUID`; `""` of a bare `id`, `ID`, `_id`, `uuid`. The word is
/// `id`, `ids`, `uuid`, `uuids`, `guid` or `guids` in any case, after a
/// separator (`_`, `-`, `.`, space), at the start of the key, or (camelCase)
/// starting upper case after a lower-case letter or a digit. `None` otherwise:
/// `paid`, `VALID`, `grid`, `squid`.
pub(super) fn id_stem(key: &str) -> Option<&str> {
    const WORDS: [&str; 6] = ["uuids", "guids", "uuid", "guid", "ids", "id"];
    // Every word ends in `d` or `s`: most keys are turned away here.
    if !key
        .bytes()
        .last()
        .is_some_and(|b| matches!(b, b'd' | b'D' | b's' | b'S'))
    {
        return None;
    }
    for word in WORDS {
        let Some(split) = key.len().checked_sub(word.len()) else {
            continue;
        };
        let (Some(stem), Some(tail)) = (key.get(..split), key.get(split..)) else {
            continue;
        };
        if !tail.eq_ignore_ascii_case(word) {
            continue;
        }
        let camel = tail.bytes().next().is_some_and(|b| b.is_ascii_uppercase());
        let boundary = match stem.bytes().last() {
            None | Some(b'_' | b'-' | b'.' | b' ') => true,
            Some(b) => camel && (b.is_ascii_lowercase() || b.is_ascii_digit()),
        };
        if boundary {
            return Some(stem.trim_end_matches(['_', '-', '.', ' ']));
        }
    }
    None
}
