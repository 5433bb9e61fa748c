//! Numbers standing as record ids: under an id-named key or a key that names
//! a record, in JSON, in `key=value` pairs and in `key: value` lines.

use super::LastWord;

impl LastWord<'_> {
    /// Whether a JSON text holds a number, or a numeric string, under an
    /// id-named key (alone or in an array of them).
    pub(super) fn id_numbers(&self, t: &[u8]) -> bool {
        for colon in memchr::memchr_iter(b':', t) {
            let Some(key) = key_before(t, colon) else {
                continue;
            };
            if !(id_named(key) || self.names_record(key)) {
                continue;
            }
            let mut j = colon + 1;
            while t.get(j).is_some_and(u8::is_ascii_whitespace) {
                j += 1;
            }
            let in_array = t.get(j) == Some(&b'[');
            loop {
                if in_array {
                    j += 1;
                    while t
                        .get(j)
                        .is_some_and(|b| b.is_ascii_whitespace() || *b == b',')
                    {
                        j += 1;
                    }
                }
                let (value, next) = match t.get(j) {
                    Some(b'"') => {
                        let s = j + 1;
                        let len = t
                            .get(s..)
                            .unwrap_or_default()
                            .iter()
                            .position(|b| *b == b'"');
                        let Some(len) = len else { break };
                        (t.get(s..s + len).unwrap_or_default(), s + len + 1)
                    }
                    Some(b) if b.is_ascii_digit() || *b == b'-' => {
                        let len = t
                            .get(j..)
                            .unwrap_or_default()
                            .iter()
                            .take_while(|b| {
                                b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')
                            })
                            .count();
                        (t.get(j..j + len).unwrap_or_default(), j + len)
                    }
                    _ => break,
                };
                let v = trim(value);
                if is_number(v) && !self.allowed.contains(&v.to_ascii_lowercase()) {
                    return true;
                }
                if !in_array {
                    break;
                }
                j = next;
                while t.get(j).is_some_and(u8::is_ascii_whitespace) {
                    j += 1;
                }
                if t.get(j) != Some(&b',') {
                    break;
                }
            }
        }
        false
    }

    /// Whether a number stands under an id-named key of a `key=value` pair
    /// (a query, a form, text) or, in a body (`lines`), of a `key: value`
    /// line.
    pub(super) fn pair_numbers(&self, t: &[u8], lines: bool) -> bool {
        let opens = |i: usize| {
            i == 0
                || t.get(i - 1).is_some_and(|b| {
                    matches!(b, b'?' | b'&' | b';' | b'"' | b'\'') || b.is_ascii_whitespace()
                })
        };
        let key_at = |end: usize| {
            let len = t
                .get(..end)
                .unwrap_or_default()
                .iter()
                .rev()
                .take(64)
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
                .count();
            (len > 0).then(|| end - len)
        };
        for eq in memchr::memchr_iter(b'=', t) {
            let Some(start) = key_at(eq).filter(|s| opens(*s)) else {
                continue;
            };
            let key = t.get(start..eq).unwrap_or_default();
            if !(id_named(key) || self.names_record(key)) {
                continue;
            }
            let mut j = eq + 1;
            loop {
                let len = t
                    .get(j..)
                    .unwrap_or_default()
                    .iter()
                    .take_while(|b| {
                        !matches!(b, b'&' | b';' | b'#' | b'"' | b'\'' | b',')
                            && !b.is_ascii_whitespace()
                    })
                    .count();
                let v = t.get(j..j + len).unwrap_or_default();
                if is_number(v) && !self.allowed.contains(&v.to_ascii_lowercase()) {
                    return true;
                }
                if t.get(j + len) != Some(&b',') || len == 0 {
                    break;
                }
                j += len + 1;
            }
        }
        if !lines {
            return false;
        }
        for colon in memchr::memchr_iter(b':', t) {
            let Some(start) = key_at(colon) else {
                continue;
            };
            // The key opens its line (after indentation and a list item's `- `).
            if !opens_line(t, start) || !id_named(t.get(start..colon).unwrap_or_default()) {
                continue;
            }
            let rest = t.get(colon + 1..).unwrap_or_default();
            let end = rest
                .iter()
                .position(|b| matches!(b, b'\n' | b'\r' | b'#'))
                .unwrap_or(rest.len());
            let v = trim(rest.get(..end).unwrap_or_default());
            let v = v
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .or_else(|| v.strip_prefix(b"'").and_then(|v| v.strip_suffix(b"'")))
                .unwrap_or(v);
            let v = trim(v);
            if is_number(v) && !self.allowed.contains(&v.to_ascii_lowercase()) {
                return true;
            }
        }
        false
    }

    /// Whether `key` names a record of the taxonomy (`patient`,
    /// `Related_Patients`): a scalar there is that record's id.
    fn names_record(&self, key: &[u8]) -> bool {
        if key.len() > 64 {
            return false;
        }
        let mut norm = [0u8; 64];
        let mut n = 0;
        for b in key
            .iter()
            .filter(|b| !matches!(b, b'_' | b'-' | b'.' | b' '))
        {
            if let Some(slot) = norm.get_mut(n) {
                *slot = b.to_ascii_lowercase();
                n += 1;
            }
        }
        norm.get(..n).is_some_and(|k| self.tax.is_object_key(k))
    }
}

/// Whether `t[start..]` opens its line: only indentation and a list item's
/// `- ` stand before it since the last newline. Walking back over those
/// bytes reaches the line's start; only they are read, not the line back to
/// its start: a JSON body on one line holds every colon in one line, and
/// reading each colon's line made the line pass quadratic in the body (a
/// 1 MB body took 0.65 s).
pub(super) fn opens_line(t: &[u8], start: usize) -> bool {
    let head = t.get(..start).unwrap_or_default();
    let indent = head
        .iter()
        .rev()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'-'))
        .count();
    indent == head.len() || head.get(head.len() - indent - 1) == Some(&b'\n')
}

/// The key of a JSON member whose `:` is at `colon`.
fn key_before(t: &[u8], colon: usize) -> Option<&[u8]> {
    let mut e = colon;
    while e > 0 && t.get(e - 1).is_some_and(u8::is_ascii_whitespace) {
        e -= 1;
    }
    if e == 0 || t.get(e - 1) != Some(&b'"') {
        return None;
    }
    let close = e - 1;
    let head = t.get(close.saturating_sub(128)..close)?;
    let open = head.iter().rposition(|b| *b == b'"')?;
    let start = close.saturating_sub(128) + open + 1;
    t.get(start..close)
}

/// Whether a key names an id, in any spelling: `id`, `ID`, `patientId`,
/// `patientID`, `patient_id`, `PATIENT_ID`, `patientIds`, `uuid`; not an id
/// of a request (`requestId`, `traceId`, …), a version or a FHIR `linkId`.
fn id_named(key: &[u8]) -> bool {
    const NOT_RECORDS: [&[u8]; 8] = [
        b"request",
        b"trace",
        b"span",
        b"correlation",
        b"idempotency",
        b"session",
        b"version",
        b"link",
    ];
    let key = key
        .strip_suffix(b"s")
        .filter(|k| k.len() > 1)
        .unwrap_or(key);
    let lower = key.to_ascii_lowercase();
    let stem: &[u8] = if lower == b"id" || lower == b"uuid" || lower == b"guid" {
        return true;
    } else if let Some(stem) = key.strip_suffix(b"Id").or_else(|| key.strip_suffix(b"ID")) {
        // camelCase: the stem ends lower case or in a digit.
        if !stem
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && !key.iter().all(|b| !b.is_ascii_lowercase())
        {
            return false;
        }
        stem
    } else if let Some(stem) = lower
        .strip_suffix(b"_id")
        .or_else(|| lower.strip_suffix(b"-id"))
    {
        return !NOT_RECORDS.iter().any(|n| stem.ends_with(n));
    } else if let Some(stem) = key
        .strip_suffix(b"Uuid")
        .or_else(|| lower.strip_suffix(b"_uuid"))
    {
        stem
    } else {
        return false;
    };
    let stem = stem.to_ascii_lowercase();
    let stem = stem.strip_suffix(b"_").unwrap_or(&stem);
    !NOT_RECORDS.iter().any(|n| stem.ends_with(n))
}

/// `v` without the whitespace around it.
fn trim(v: &[u8]) -> &[u8] {
    let s = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let e = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(s, |p| p + 1);
    v.get(s..e).unwrap_or_default()
}

/// Whether `v` is a number in JSON's grammar (or a plain `+` / leading-zero
/// variant of one).
fn is_number(v: &[u8]) -> bool {
    let v = v
        .strip_prefix(b"-")
        .or_else(|| v.strip_prefix(b"+"))
        .unwrap_or(v);
    let mut seen_digit = false;
    let mut seen_e = false;
    let mut prev = 0u8;
    for &b in v {
        match b {
            b'0'..=b'9' => seen_digit = true,
            b'.' if !seen_e => {}
            b'e' | b'E' if seen_digit && !seen_e => seen_e = true,
            b'+' | b'-' if matches!(prev, b'e' | b'E') => {}
            _ => return false,
        }
        prev = b;
    }
    seen_digit && v.first().is_some_and(u8::is_ascii_digit)
}
