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
//!   (numeric and every HTML5 name) decoded, invisible characters removed
//!   (soft hyphen, zero-width space and joiners, word joiner, BOM, bidi
//!   marks), dash look-alikes folded to `-`, and every other non-ASCII
//!   character read as the ASCII a reader takes it for, by Unicode's own
//!   data: a decimal digit of any script as its digit, the compatibility
//!   decomposition (NFKC's: `𝐩`, `ⓟ`, `⁴`, full-width forms) without its
//!   combining marks, else a confusable prototype of ASCII letters and
//!   digits (UTS #39: Cyrillic `р` is `p`);
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
//!
//! # Layout
//! - this file: the findings, the checker ([`LastWord`]) and the views each
//!   text is read in.
//! - [`canonical`](mod@canonical): the canonical views and the decoders they use.
//! - [`shapes`](self::shapes): raw-id shapes (UUIDs, FHIR ids, references,
//!   known ids).
//! - [`numbers`]: numbers that stand as record ids under a key.

use crate::alias::Taxonomy;
// Fx, not SipHash: every class run of a body that the key filter lets
// through is looked up (a thousand a 4 KB sample), and SipHash was a tenth of
// an HMS response's work. The keys are the session's own known ids and
// aliases, which HMS and control issue; a body's runs are only looked up.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

mod canonical;
mod numbers;
mod shapes;

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
pub struct LastWord<'t> {
    /// The configuration: its FHIR id prefixes and the keys that name a
    /// record (`patient`, `visits`; a number under one is that record's id),
    /// read in place: built once per configuration, not per response.
    tax: &'t Taxonomy,
    /// Known distinctive ids, lower case, by their first class run.
    known: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    /// Which runs can be a key of `known`.
    keys: KeyFilter,
    /// Aliases, lower case.
    allowed: HashSet<Vec<u8>>,
}

impl<'t> LastWord<'t> {
    /// The check for a response of a session: `known` its raw ids (of this
    /// answer and earlier ones), `aliases` every alias it was given.
    pub fn new<'a>(
        tax: &'t Taxonomy,
        known: impl IntoIterator<Item = &'a str>,
        aliases: impl IntoIterator<Item = &'a str>,
    ) -> LastWord<'t> {
        let mut map: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::default();
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
            tax,
            known: map,
            keys,
            allowed,
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
        let token = t
            .get(super::known::alias_token(t, s..e))
            .unwrap_or_default()
            .to_ascii_lowercase();
        let exact = t.get(s..e).unwrap_or_default().to_ascii_lowercase();
        self.allowed.contains(&token) || self.allowed.contains(&exact)
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

#[cfg(test)]
mod tests;
