//! Id shapes: which form a raw id has, and where ids hide inside free text.
//!
//! Three forms exist: a UUID (the HMS primary key), a FHIR logical id
//! (`pat-000123`, also whatever follows `Patient/` in a reference) and a slug
//! (`clinic-berlin-mitte`; the catch-all for any other identifier). Inside text
//! (URLs, error prose, non-JSON bodies) three patterns are found: UUIDs
//! anywhere, with no boundary required; FHIR references `Type/id` for configured
//! resource types; and FHIR ids `prefix-digits` for configured prefixes.
//!
//! # Layout
//! - this file: the byte classes, the id predicates ([`is_uuid`], [`classify`],
//!   ...) and what a match inside text is ([`Pattern`], [`TextHit`]).
//! - [`text`]: finding ids inside free text ([`find_in_text`]).
//! - [`words`]: the word starts next to `/` and `-` that text patterns begin at.
//! - [`cursor`]: opaque base64 cursors that carry an id.

mod cursor;
mod text;
mod words;

#[cfg(test)]
mod tests;

use super::id::{Form, KindId};
use super::taxonomy::Taxonomy;

use std::ops::Range;

pub(crate) use cursor::base64_bytes;
pub(crate) use text::{find_in_text, kind_before};

/// Bytes that continue a token: an id next to one of these is part of a longer
/// word. `-` counts, so `appt-001` inside `patient-appt-001` is no match.
pub(crate) fn is_token_byte(b: u8) -> bool {
    is(b, TOKEN)
}

/// Byte classes the patterns read runs of, one bit each ([`is`]): a table
/// lookup per byte instead of a chain of range checks.
const ALNUM: u8 = 1;
/// [`is_token_byte`].
const TOKEN: u8 = 2;
/// [`is_fhir_id_byte`].
const FHIR_ID: u8 = 4;
/// A FHIR id byte, `_` or `~`: what a path segment id may hold.
const SEGMENT_ID: u8 = 8;
/// `[a-z0-9-]`: what an alias-shaped value may hold.
const ALIAS: u8 = 16;
/// `[0-9A-Fa-f]`.
const HEX: u8 = 32;
/// `[A-Za-z0-9+/_-]`: base64 and base64url.
const BASE64: u8 = 64;

static CLASSES: [u8; 256] = classes();

// `i` runs below 256, so the index is in bounds (`get_mut` is not const).
#[allow(clippy::indexing_slicing)]
const fn classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let mut c = 0;
        if b.is_ascii_alphanumeric() {
            c |= ALNUM | TOKEN | FHIR_ID | SEGMENT_ID;
        }
        if b == b'-' {
            c |= TOKEN | FHIR_ID | SEGMENT_ID | ALIAS;
        }
        if b == b'_' {
            c |= TOKEN | SEGMENT_ID;
        }
        if b == b'.' {
            c |= FHIR_ID | SEGMENT_ID;
        }
        if b == b'~' {
            c |= SEGMENT_ID;
        }
        if b.is_ascii_lowercase() || b.is_ascii_digit() {
            c |= ALIAS;
        }
        if b.is_ascii_hexdigit() {
            c |= HEX;
        }
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_') {
            c |= BASE64;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// Whether `b` is of `class`.
fn is(b: u8, class: u8) -> bool {
    CLASSES.get(usize::from(b)).is_some_and(|c| c & class != 0)
}

/// Whether `s` is exactly a UUID (8-4-4-4-12 hex digits, any case).
pub fn is_uuid(s: &[u8]) -> bool {
    let Ok(s) = <&[u8; 36]>::try_from(s) else {
        return false;
    };
    // The dashes first: they turn most candidates away. Then every other
    // byte, without a branch per byte.
    [8, 13, 18, 23].iter().all(|&i| s.get(i) == Some(&b'-'))
        && s.iter().enumerate().fold(true, |ok, (i, &b)| {
            ok & (is(b, HEX) | matches!(i, 8 | 13 | 18 | 23))
        })
}

/// Whether `s` has the shape of a FHIR logical id with a letter prefix:
/// `[a-z][a-z0-9]*-[0-9]+` (`pat-000123`, `oo-5521`).
pub fn is_fhir_like(s: &str) -> bool {
    match s.split_once('-') {
        Some((prefix, digits)) => {
            prefix
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase())
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// Routes an id of unknown form by its shape: UUID, else FHIR-like, else slug.
pub fn classify(value: &str) -> Form {
    if is_uuid(value.as_bytes()) {
        Form::Uuid
    } else if is_fhir_like(value) {
        Form::Fhir
    } else {
        Form::Slug
    }
}

/// Whether a string under an id key is an identifier rather than prose: short,
/// no whitespace or punctuation beyond `._:-~`, and at least one digit or `-`
/// (so `"clinic": "Berlin"` is a name, `"clinic": "clinic-berlin-mitte"` an id).
pub(crate) fn is_identifier(value: &str, max_len: usize) -> bool {
    !value.is_empty()
        && value.len() <= max_len
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'~'))
        && value.bytes().any(|b| b.is_ascii_digit() || b == b'-')
}

/// Whether `s` is a FHIR logical id: 1 to 64 of `[A-Za-z0-9.-]`.
pub(crate) fn is_fhir_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= FHIR_ID_MAX && s.bytes().all(is_fhir_id_byte)
}

/// A FHIR id character (`[A-Za-z0-9.-]`).
fn is_fhir_id_byte(b: u8) -> bool {
    is(b, FHIR_ID)
}

/// Longest alias-shaped run looked at in text.
const ALIAS_MAX: usize = 96;

/// Longest FHIR id (FHIR caps logical ids at 64 characters).
const FHIR_ID_MAX: usize = 64;

/// Splits `Type/id` (the whole string) into a known resource type's kinds and
/// the id, or `None`.
pub(crate) fn parse_reference<'t, 'v>(
    tax: &'t Taxonomy,
    value: &'v str,
) -> Option<(&'t [KindId], &'v str)> {
    let (ty, id) = value.split_once('/')?;
    let kinds = tax.resource_type_kinds(ty)?;
    let ok = !id.is_empty() && id.len() <= FHIR_ID_MAX && id.bytes().all(is_fhir_id_byte);
    ok.then_some((kinds, id))
}

/// What kind of pattern matched inside text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pattern<'t> {
    /// A UUID; its kind comes from the text around it.
    Uuid,
    /// The id part of `Type/id`; kinds of the resource type.
    Reference(&'t [KindId]),
    /// A FHIR id with a configured prefix; kinds of the prefix.
    FhirId(&'t [KindId]),
    /// A value with the shape of an alias of a kind (`ward-101`).
    AliasShaped(KindId),
    /// A URL path segment after a segment that names a kind
    /// (`/patients/482913`).
    Segment(KindId),
    /// A query or form value under a key that names an id or a kind
    /// (`?patientId=482913`, `&patient=482913,482914`).
    Query(KindId),
    /// An opaque cursor that carries an id: base64 or base64url whose bytes
    /// are printable text holding a digit ([`cursor::decodes_to_id_text`]), whole or
    /// in a query string or prose (`eyJhZnRlciI6InBhdC0wMDAxMjMifQ` is
    /// `{"after":"pat-000123"}`).
    Cursor,
}

/// One id found inside text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TextHit<'t> {
    /// Byte range of the id inside the text.
    pub range: Range<usize>,
    /// Which pattern found it.
    pub pattern: Pattern<'t>,
}
