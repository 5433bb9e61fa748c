//! The last word on an HMS response: an independent check of what is about
//! to leave the HMS listener, body and every header name and value.
//!
//! The scanner and the rewriter (`alias::scan`, `alias::rewrite`) find ids from lists of
//! shapes and positions, and their verification looks for ids already known:
//! every encoding not on a list would be a leak. This module shares no code
//! with them (as [`crate::tools::detect`] is to the LLM request parsers). It reads
//! the taxonomy's configuration only (FHIR prefixes, the keys that name a
//! record) and the FHIR resource type names, canonicalises the text its own
//! way and looks for raw-id shapes. Anything found means the response is withheld: it is the reason a
//! leak cannot happen, not a second chance to catch one.
//!
//! # Canonical views
//! Each text is read in several views, each searched whole:
//! - the text with JSON escapes (`\u002d`, `\/`), HTML character references
//!   (numeric and the common names) decoded, invisible characters removed
//!   (soft hyphen, zero-width space and joiners, word joiner, BOM, bidi
//!   marks), dash look-alikes folded to `-` and full-width ASCII folded to
//!   ASCII (the part of NFKC that matters for ids);
//! - the same with markup removed (tags, `<wbr>`, CDATA and comment
//!   markers), when the text holds a `<`: an id split by a tag is one id;
//! - percent-decoded, up to [`PERCENT_DEPTH`] rounds;
//! - quoted-printable-decoded, when the text holds a `=XX` or soft break;
//! - every base64 / base64url run and every hex run long enough to carry an
//!   id, decoded when what it decodes to is text, and read in the views
//!   above ([`DECODE_DEPTH`] levels deep).
//!
//! # Shapes
//! - UUIDs, any letter case, with dashes, or as 32 hex digits with a UUID's
//!   version and variant nibbles;
//! - FHIR ids with one of the taxonomy's prefixes, any letter case
//!   (`PAT-000123`);
//! - references `Type/id` to a FHIR record type (not a terminology or
//!   conformance definition) whose id holds a digit or starts lower case;
//! - the session's known ids (distinctive ones: a UUID, a separator, three
//!   digits or more, or five digits), any letter case, at class boundaries;
//! - in JSON, a number (any JSON number form) or a numeric string (padding
//!   trimmed) under an id-named key or a key the taxonomy says names a
//!   record (`"patient": 482913`), alone or in an array;
//! - in a query string, a form body or text, a number under an id-named key
//!   or a key that names a record (`?patientId=7`, `&patient=7,8`,
//!   `visit_id=7`);
//! - in a body, a YAML-style line `key: 7` (indented, in a list item, quoted)
//!   under an id-named key.
//!
//! Aliases of this answer and of the session are what is meant to be there:
//! a hit that is one of them, whole, is no hit.

use crate::alias::fhir;
use crate::alias::Taxonomy;
use std::collections::{HashMap, HashSet};

mod canonical;

pub use canonical::canonical;
use canonical::{base64, hex, is_text, percent_decoded, quoted_printable, runs};

/// Rounds of percent decoding (`%252D` is two).
pub const PERCENT_DEPTH: usize = 3;

/// Levels of base64 / hex decoding (a base64 run inside decoded base64).
pub const DECODE_DEPTH: usize = 2;

/// What the last word found (a counter label; never the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// A UUID.
    Uuid,
    /// A FHIR id with one of the taxonomy's prefixes.
    FhirId,
    /// A FHIR reference `Type/id`.
    Reference,
    /// One of the session's known raw ids.
    KnownId,
    /// A number under an id-named JSON key.
    IdNumber,
}

impl Reason {
    /// Every reason, in counter order.
    pub const ALL: [Reason; 5] = [
        Reason::Uuid,
        Reason::FhirId,
        Reason::Reference,
        Reason::KnownId,
        Reason::IdNumber,
    ];

    /// The label (`uuid`, `fhir_id`, `reference`, `known_id`, `id_number`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Uuid => "uuid",
            Reason::FhirId => "fhir_id",
            Reason::Reference => "reference",
            Reason::KnownId => "known_id",
            Reason::IdNumber => "id_number",
        }
    }
}

/// How a text is read: a body (JSON members, pairs and `key: value` lines),
/// an event stream (no `key: value` lines: those are its framing) or a
/// header (pairs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Document,
    EventStream,
    Header,
}

/// Where a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The body.
    Body,
    /// A header's name.
    HeaderName,
    /// A header's value.
    HeaderValue,
}

impl Place {
    /// The label (`body`, `header_name`, `header_value`).
    pub fn as_str(self) -> &'static str {
        match self {
            Place::Body => "body",
            Place::HeaderName => "header_name",
            Place::HeaderValue => "header_value",
        }
    }
}

/// A raw id the last word found: what and where, never the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finding {
    /// What was found.
    pub reason: Reason,
    /// Where.
    pub place: Place,
    /// It was found in a decoded view (percent, quoted-printable, base64,
    /// hex), not in the canonical text itself.
    pub decoded: bool,
}

/// The last word for one response: the taxonomy's prefixes, the session's
/// known ids and the aliases that may stand in the response.
pub struct LastWord {
    /// FHIR id prefixes, lower case.
    prefixes: HashSet<Vec<u8>>,
    /// Known distinctive ids, lower case, by their first class run.
    known: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    /// Which runs can be a key of `known`.
    keys: KeyFilter,
    /// Aliases, lower case.
    allowed: HashSet<Vec<u8>>,
    /// The taxonomy's keys that name a record (`patient`, `visits`), lower
    /// case without separators: a number under one is that record's id.
    record_keys: HashSet<Vec<u8>>,
}

impl LastWord {
    /// The check for a response of a session: `known` its raw ids (of this
    /// answer and earlier ones), `aliases` every alias it was given.
    pub fn new<'a>(
        tax: &Taxonomy,
        known: impl IntoIterator<Item = &'a str>,
        aliases: impl IntoIterator<Item = &'a str>,
    ) -> LastWord {
        let prefixes = tax
            .fhir_prefixes()
            .map(|p| p.to_ascii_lowercase().into_bytes())
            .collect();
        let mut map: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
        for v in known {
            let v = v.trim().to_ascii_lowercase().into_bytes();
            if !distinctive(&v) {
                continue;
            }
            let first = run_at(&v, 0).to_vec();
            map.entry(first).or_default().push(v);
        }
        // Longest first: the longest known id at a position is the one. Of
        // one length at most one can match a position (they are lower case
        // and distinct), so their order is free: sorted, the duplicates sit
        // side by side and go in one pass (a `contains` per id was quadratic
        // in a list, and every FHIR id of a taxonomy prefix is in one list).
        for list in map.values_mut() {
            list.sort_unstable_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
            list.dedup();
        }
        let keys = KeyFilter::of(map.keys());
        let allowed = aliases
            .into_iter()
            .map(|a| a.to_ascii_lowercase().into_bytes())
            .collect();
        LastWord {
            prefixes,
            known: map,
            keys,
            allowed,
            record_keys: tax.object_keys().map(<[u8]>::to_vec).collect(),
        }
    }

    /// The first raw id in a response body, or `None`.
    pub fn check_body(&self, body: &[u8]) -> Option<Finding> {
        self.check(body, Place::Body, Read::Document)
    }

    /// [`Self::check_body`] for a `text/event-stream` body, whose field
    /// lines (`id: 7`, `retry: 3000`) are the stream's framing, not
    /// `key: value` lines of a record.
    pub fn check_event_stream(&self, body: &[u8]) -> Option<Finding> {
        self.check(body, Place::Body, Read::EventStream)
    }

    /// The first raw id in a header's name or value, or `None`. The value
    /// is read as bytes (a Latin-1 byte is no error).
    pub fn check_header(&self, name: &[u8], value: &[u8]) -> Option<Finding> {
        self.check(name, Place::HeaderName, Read::Header)
            .or_else(|| self.check(value, Place::HeaderValue, Read::Header))
    }

    fn check(&self, raw: &[u8], place: Place, read: Read) -> Option<Finding> {
        let json = read != Read::Header;
        let lines = read == Read::Document;
        let found = |reason| Finding {
            reason,
            place,
            decoded: false,
        };
        let text = canonical(raw, false);
        if let Some(r) = self.shapes(&text) {
            return Some(found(r));
        }
        if (json && self.id_numbers(&text)) || self.pair_numbers(&text, lines) {
            return Some(found(Reason::IdNumber));
        }
        if raw.contains(&b'<') {
            let bare = canonical(raw, true);
            if let Some(r) = self.shapes(&bare) {
                return Some(found(r));
            }
        }
        self.decoded_views(&text, DECODE_DEPTH)
            .map(|reason| Finding {
                reason,
                place,
                decoded: true,
            })
    }

    /// The views of `text` that decoding makes: percent, quoted-printable,
    /// base64 and hex runs.
    fn decoded_views(&self, text: &[u8], depth: usize) -> Option<Reason> {
        let mut view = std::borrow::Cow::Borrowed(text);
        for _ in 0..PERCENT_DEPTH {
            match percent_decoded(&view) {
                Some(next) => {
                    view = std::borrow::Cow::Owned(canonical(&next, false));
                    if let Some(r) = self.shapes(&view) {
                        return Some(r);
                    }
                }
                None => break,
            }
        }
        if let Some(qp) = quoted_printable(text) {
            let qp = canonical(&qp, false);
            if let Some(r) = self.shapes(&qp) {
                return Some(r);
            }
        }
        if depth == 0 {
            return None;
        }
        for run in runs(text) {
            for decoded in [base64(run), hex(run)].into_iter().flatten() {
                if !is_text(&decoded) {
                    continue;
                }
                let view = canonical(&decoded, false);
                if let Some(r) = self
                    .shapes(&view)
                    .or_else(|| {
                        (self.id_numbers(&view) || self.pair_numbers(&view, true))
                            .then_some(Reason::IdNumber)
                    })
                    .or_else(|| self.decoded_views(&view, depth - 1))
                {
                    return Some(r);
                }
            }
        }
        None
    }

    /// Whether the token `t[s..e]` (extended over alias bytes) is an alias.
    fn is_alias(&self, t: &[u8], s: usize, e: usize) -> bool {
        let alias_byte = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-';
        let start = t
            .get(..s)
            .unwrap_or_default()
            .iter()
            .rposition(|b| !alias_byte(b))
            .map_or(0, |p| p + 1);
        let end = e + t
            .get(e..)
            .unwrap_or_default()
            .iter()
            .position(|b| !alias_byte(b))
            .unwrap_or(t.len().saturating_sub(e));
        let token = t.get(start..end).unwrap_or_default().to_ascii_lowercase();
        let exact = t.get(s..e).unwrap_or_default().to_ascii_lowercase();
        self.allowed.contains(&token) || self.allowed.contains(&exact)
    }

    /// The first raw-id shape in a canonical text.
    fn shapes(&self, t: &[u8]) -> Option<Reason> {
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
                // The prefixes are few: compared in place, no word is
                // lower-cased into a new string and hashed.
                if !self.prefixes.iter().any(|p| p.eq_ignore_ascii_case(word)) {
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
                let ty = std::str::from_utf8(word).ok()?;
                if !fhir::is_resource_type(ty) || fhir::is_definition_type(ty) {
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

    /// Whether a JSON text holds a number, or a numeric string, under an
    /// id-named key (alone or in an array of them).
    fn id_numbers(&self, t: &[u8]) -> bool {
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
}

impl LastWord {
    /// Whether a number stands under an id-named key of a `key=value` pair
    /// (a query, a form, text) or, in a body (`lines`), of a `key: value`
    /// line.
    fn pair_numbers(&self, t: &[u8], lines: bool) -> bool {
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
}

impl LastWord {
    /// Whether `key` names a record of the taxonomy (`patient`,
    /// `Related_Patients`): a scalar there is that record's id.
    fn names_record(&self, key: &[u8]) -> bool {
        if key.len() > 64 {
            return false;
        }
        let norm: Vec<u8> = key
            .iter()
            .filter(|b| !matches!(b, b'_' | b'-' | b'.' | b' '))
            .map(u8::to_ascii_lowercase)
            .collect();
        self.record_keys.contains(&norm)
    }
}

/// A quick "certainly not" in front of the known-id table: the lengths of
/// its keys (class runs, lower case) and their first two bytes (the byte,
/// for a key of one). A run that no key could be is not hashed: hashing
/// every run of a body was a fifth of the last word's time. Its own, not the
/// taxonomy's `PairSet`: the last word shares no code with the rewriter, so
/// one bug cannot blind both.
struct KeyFilter {
    /// Bit `n` (at most 127): a key is `n` bytes long.
    lengths: u128,
    /// The keys of one byte.
    single: [bool; 256],
    /// The first two bytes of the longer keys, as a 64 Kbit set.
    pairs: Vec<u64>,
}

impl KeyFilter {
    fn of<'a>(keys: impl IntoIterator<Item = &'a Vec<u8>>) -> KeyFilter {
        let mut filter = KeyFilter {
            lengths: 0,
            single: [false; 256],
            pairs: vec![0; 1024],
        };
        for key in keys {
            filter.lengths |= 1 << key.len().min(127);
            match key.as_slice() {
                [a] => {
                    if let Some(slot) = filter.single.get_mut(usize::from(*a)) {
                        *slot = true;
                    }
                }
                [a, b, ..] => {
                    let p = usize::from(*a) << 8 | usize::from(*b);
                    if let Some(w) = filter.pairs.get_mut(p >> 6) {
                        *w |= 1 << (p & 63);
                    }
                }
                [] => {}
            }
        }
        filter
    }

    /// Whether `run` (any letter case) may be a key: `false` is sure.
    fn may_hold(&self, run: &[u8]) -> bool {
        if self.lengths & (1 << run.len().min(127)) == 0 {
            return false;
        }
        match run {
            [a] => self.single.get(usize::from(a.to_ascii_lowercase())) == Some(&true),
            [a, b, ..] => {
                let p =
                    usize::from(a.to_ascii_lowercase()) << 8 | usize::from(b.to_ascii_lowercase());
                self.pairs
                    .get(p >> 6)
                    .is_some_and(|w| w & (1 << (p & 63)) != 0)
            }
            [] => false,
        }
    }
}

/// Whether `t[start..]` opens its line: only indentation and a list item's
/// `- ` stand before it since the last newline. Walking back over those
/// bytes reaches the line's start; only they are read, not the line back to
/// its start: a JSON body on one line holds every colon in one line, and
/// reading each colon's line made the line pass quadratic in the body (a
/// 1 MB body took 0.65 s).
fn opens_line(t: &[u8], start: usize) -> bool {
    let head = t.get(..start).unwrap_or_default();
    let indent = head
        .iter()
        .rev()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'-'))
        .count();
    indent == head.len() || head.get(head.len() - indent - 1) == Some(&b'\n')
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

/// 0 other, 1 digit, 2 letter.
fn class(b: u8) -> u8 {
    if b.is_ascii_digit() {
        1
    } else if b.is_ascii_alphabetic() {
        2
    } else {
        0
    }
}

/// The run of one class starting at `i`.
fn run_at(t: &[u8], i: usize) -> &[u8] {
    let c = t.get(i).map_or(0, |b| class(*b));
    let rest = t.get(i..).unwrap_or_default();
    let len = if c == 0 {
        1.min(rest.len())
    } else {
        rest.iter().take_while(|b| class(**b) == c).count()
    };
    rest.get(..len).unwrap_or_default()
}

/// Whether a known id is distinctive enough to look for anywhere: a UUID,
/// a separator, three digits or more, or five digits or more alone.
fn distinctive(v: &[u8]) -> bool {
    let digits = v.iter().filter(|b| b.is_ascii_digit()).count();
    if v.len() < 3 {
        return false;
    }
    if digits == v.len() {
        return digits >= 5;
    }
    digits >= 3
        || v.iter()
            .any(|b| matches!(b, b'-' | b'.' | b'_' | b':' | b'~'))
}

/// A UUID at `i`: its length (36 with dashes, 32 without).
fn uuid_at(t: &[u8], i: usize) -> Option<usize> {
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
    let run = t
        .get(i..)
        .unwrap_or_default()
        .iter()
        .take(33)
        .take_while(|b| b.is_ascii_hexdigit())
        .count();
    let glued = t.get(i + 32).is_some_and(u8::is_ascii_alphanumeric);
    let version = t.get(i + 12).is_some_and(|b| (b'1'..=b'8').contains(b));
    let variant = t.get(i + 16).is_some_and(|b| b"89abAB".contains(b));
    (run == 32 && !glued && version && variant).then_some(32)
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

#[cfg(test)]
mod tests;
