//! Finding aliases in HMS requests and replacing them with real ids.
//!
//! [`RequestScan::new`] finds every alias token (and every repairable drift of
//! one, `task-item-001`) in the path, the query string and the strings (and
//! keys) of a JSON body, or anywhere in a text body;
//! [`RequestScan::scan_headers`] adds the headers the filter scans
//! (`X-Patient-Id`, `If-Match`, a `Referer` URL), read as text and
//! percent-decoded like the rest. [`RequestScan::aliases`]
//! is the decode batch for control; [`RequestScan::rewrite`] puts the decoded
//! ids in, each in the form its place expects:
//! - a FHIR-id or reference key (`fhirId`, `reference`), or a FHIR path or
//!   reference (`Patient/<alias>`): the FHIR id;
//! - a slug key (`slug`, `clinicSlug`): the slug;
//! - anywhere else: the kind's preferred form, by default the UUID when known.
//!
//! An alias that decoded to nothing, and any sentinel, fails the whole request
//! with an error naming the alias: nothing is sent upstream.
//!
//! Every text is read percent-decoded as well (`patient%2Dk7q2%2D001`,
//! `%20patient-k7q2-001%20`): an alias written encoded is decoded and its id
//! put back percent-encoded (in a header every id is written percent-encoded:
//! a value control returns can then never end or split the header). Near-misses of an epoch alias — another letter
//! case (`Patient-K7Q2-001`), missing or extra zero padding (`patient-k7q2-1`,
//! `patient-k7q2-0001`) — are asked for in their canonical form, so they are
//! repaired only to an alias the session issued and refused (naming the alias
//! as written) otherwise. Epoch-less near-misses (`Patient-001`) are not
//! aliases: control issues none. Values shaped like raw ids (UUIDs, 32-hex
//! UUIDs, FHIR ids with a configured prefix — whole or glued to other text
//! by `_` or `-`, as in `Befund_<uuid>` or an ETag `<uuid>-v7` — numbers
//! after a kind in the path and after a FHIR resource type anywhere,
//! `Patient/482913`, and any of these in the authority) are counted per
//! place ([`RawIdCount`]), never recorded: the filter's `raw_ids` policy
//! refuses or passes them.
//!
//! # Layout
//! - this file: the scan's types and [`RequestScan::new`] (path, query
//!   parameters, and the body dispatched by kind).
//! - [`find`](self::find): alias tokens, near-misses and raw ids in a text.
//! - [`json`](self::json): a JSON body, key by key.
//! - [`headers`](self::headers): the headers, the authority and decoded body texts.
//! - [`rewrite`](self::rewrite): the decoded ids put in.
//! - [`percent`](self::percent): percent-decoding and -encoding.
//! - [`body`]: what of a body is read before it goes to HMS (decoded views).

pub mod body;
mod find;
mod headers;
mod json;
mod percent;
mod rewrite;

use super::id::Form;
use super::id::KindId;
use super::scan::BodyKind;
use super::taxonomy::Taxonomy;
use crate::json::lexer::JsonError;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use percent::percent_decode;

/// Why a request cannot be forwarded. The filter answers each with a 4xx JSON
/// error (naming the alias) and sends nothing to HMS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// An alias was not issued in this session (foreign, invented, or a
    /// near-miss with no issued original).
    #[error("alias {alias:?} was not issued in this session")]
    UnknownAlias {
        /// The alias as written.
        alias: String,
    },
    /// An alias whose epoch is not the one of the session's current map: it
    /// was issued under a map of this session that has since expired or been
    /// lost (or under another session's map). It is never decoded again.
    #[error("alias {alias:?} is not from this session's current map: it was issued under an earlier map of this session (expired, or its aliases were lost) or under another session, and is never decoded again; look the record up again for a current alias")]
    EarlierMap {
        /// The alias as written.
        alias: String,
        /// The epoch of the session's current map.
        current: String,
    },
    /// A sentinel, handed out past the session's alias limit, never decodes.
    #[error("alias {alias:?} stands for an id past this session's alias limit and cannot be used")]
    Sentinel {
        /// The sentinel as written.
        alias: String,
    },
    /// An alias stands where another kind of record is named (an
    /// observation's alias under `/fhir/Patient/`, a visit's as `patientId`):
    /// its id there would name another record, so nothing is sent.
    #[error("alias {alias:?} names a record of kind {kind}, not {wanted}: it cannot stand here")]
    WrongKind {
        /// The alias as written.
        alias: String,
        /// The kind of the record it names.
        kind: String,
        /// The kind (or kinds, `a or b`) its place names.
        wanted: String,
    },
    /// A JSON body is not JSON.
    #[error("request body is not valid JSON: {0}")]
    Json(#[from] JsonError),
    /// The decoded list does not match the scan's aliases.
    #[error("got {got} decoded ids for {want} aliases")]
    DecodedCount {
        /// Entries passed.
        got: usize,
        /// Aliases of the scan.
        want: usize,
    },
    /// The body passed to rewrite is not the body scanned.
    #[error("request body was scanned with {scanned} bytes, rewrite got {got}")]
    WrongBody {
        /// Bytes scanned.
        scanned: usize,
        /// Bytes passed.
        got: usize,
    },
}

impl RequestError {
    /// The alias this error names, if any.
    pub fn alias(&self) -> Option<&str> {
        match self {
            RequestError::UnknownAlias { alias }
            | RequestError::EarlierMap { alias, .. }
            | RequestError::Sentinel { alias }
            | RequestError::WrongKind { alias, .. } => Some(alias),
            _ => None,
        }
    }

    /// Turns [`RequestError::UnknownAlias`] into [`RequestError::EarlierMap`]
    /// when the alias carries an epoch other than `current`, the epoch of the
    /// session's current map (control's decode answer says it). Any other
    /// error is returned as is.
    pub fn with_current_epoch(self, tax: &Taxonomy, current: Option<&str>) -> RequestError {
        match (self, current) {
            (RequestError::UnknownAlias { alias }, Some(current)) => {
                let other = tax
                    .parse_alias(&alias)
                    .and_then(|p| p.epoch)
                    .is_some_and(|e| e.as_str() != current);
                if other {
                    RequestError::EarlierMap {
                        alias,
                        current: current.to_owned(),
                    }
                } else {
                    RequestError::UnknownAlias { alias }
                }
            }
            (e, _) => e,
        }
    }
}

/// One alias occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hit {
    /// Range in the path, in the body, or in an escaped literal's text.
    range: Range<usize>,
    alias: usize,
    want: Option<Form>,
    /// The kinds its place names (`/patients/<alias>`, `Encounter/<alias>`,
    /// `patientId`); empty where the place names none (prose, `id`).
    kinds: Vec<KindId>,
    /// Written percent-encoded: the id goes back percent-encoded.
    encoded: bool,
}

/// What the field around a value asks of an alias in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Field {
    /// The id form it wants.
    want: Option<Form>,
    /// The kind it names (a key or header name of a kind: `patientId`).
    kind: Option<KindId>,
}

impl Field {
    /// The field a key, a query parameter's or a header's name makes.
    fn of_key(tax: &Taxonomy, key: &str) -> Field {
        Field {
            want: tax.form_wanted_by_key(key),
            kind: tax.id_named_kind(key).filter(|k| *k != tax.fallback_kind()),
        }
    }

    /// The field a query parameter's name makes: as a key, and a kind's
    /// object key names that kind too (the FHIR search `?patient=<id>`,
    /// `?subject=<id>`: an observation's id there would search another
    /// record's data). In a JSON body object keys stay kind-neutral: they
    /// are a response heuristic (`participants` of an appointment hold
    /// patients as well as practitioners).
    fn of_query(tax: &Taxonomy, name: &str) -> Field {
        let field = Field::of_key(tax, name);
        Field {
            kind: field.kind.or_else(|| tax.object_key_kind(name)),
            ..field
        }
    }
}

/// Where a value of a request sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Path,
    Query,
    Header,
    Body,
}

/// How many raw-id-shaped values a request carries, per place. Only counts:
/// the values themselves are never kept (they must not be logged).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawIdCount {
    /// In the path.
    pub path: usize,
    /// In the query string.
    pub query: usize,
    /// In the scanned headers.
    pub headers: usize,
    /// In the body.
    pub body: usize,
}

impl RawIdCount {
    /// All places together.
    pub fn total(&self) -> usize {
        self.path + self.query + self.headers + self.body
    }

    /// The places holding any, with their counts, in request order (`path`,
    /// `query`, `headers`, `body`): for logs and error messages.
    pub fn places(&self) -> Vec<(&'static str, usize)> {
        [
            ("path", self.path),
            ("query", self.query),
            ("headers", self.headers),
            ("body", self.body),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }

    fn bump(&mut self, place: Place) {
        match place {
            Place::Path => self.path += 1,
            Place::Query => self.query += 1,
            Place::Header => self.headers += 1,
            Place::Body => self.body += 1,
        }
    }
}

/// A scanned header that holds aliases.
#[derive(Debug, Clone)]
struct HeaderHits {
    /// Its index in the headers passed to [`RequestScan::scan_headers`].
    index: usize,
    /// Its value as sent.
    value: String,
    hits: Vec<Hit>,
}

/// A body literal with an escape, kept decoded.
#[derive(Debug, Clone)]
struct EscLit {
    span: Range<usize>,
    text: String,
    hits: Vec<Hit>,
}

/// The aliases of one request.
#[derive(Debug, Clone, Default)]
pub struct RequestScan {
    aliases: Vec<String>,
    /// Each alias as first written (differs from `aliases` for a near-miss).
    written: Vec<String>,
    raw: RawIdCount,
    index: BTreeMap<String, usize>,
    path_len: usize,
    path: Vec<Hit>,
    body_len: usize,
    body: Vec<Hit>,
    escaped: Vec<EscLit>,
    headers: Vec<HeaderHits>,
}

impl RequestScan {
    /// Scans a request: `path` is the `:path` header (query included), `body`
    /// the buffered body if any.
    ///
    /// Fails with [`RequestError::Json`] when a JSON body is not JSON.
    pub fn new(
        tax: &Taxonomy,
        path: &str,
        body: Option<(&[u8], BodyKind)>,
    ) -> Result<RequestScan, RequestError> {
        let mut scan = RequestScan {
            path_len: path.len(),
            ..RequestScan::default()
        };
        let (path_part, query) = match path.find('?') {
            Some(q) => (path.get(..q).unwrap_or(path), path.get(q..).unwrap_or("")),
            None => (path, ""),
        };
        let mut hits = Vec::new();
        scan.find(tax, path_part, Field::default(), Place::Path, &mut hits);
        scan.numeric_after_kind(tax, path_part);
        let offset = path_part.len();
        for (param_start, param) in split_params(query) {
            let (name, value_at) = match param.find('=') {
                Some(eq) => (param.get(..eq).unwrap_or(""), eq + 1),
                None => ("", 0),
            };
            let field = Field::of_query(tax, name);
            let mut found = Vec::new();
            let value = param.get(value_at..).unwrap_or("");
            if business_identifier_is_raw(tax, name, value) {
                scan.raw.bump(Place::Query);
            }
            scan.find(tax, value, field, Place::Query, &mut found);
            for mut h in found {
                let base = offset + param_start + value_at;
                h.range = base + h.range.start..base + h.range.end;
                hits.push(h);
            }
        }
        scan.path = hits;
        if let Some((bytes, kind)) = body {
            scan.body_len = bytes.len();
            match kind {
                // Aliases are found by their grammar in any text; only JSON
                // needs its structure (which key asks for which id form).
                BodyKind::Text
                | BodyKind::NdJson
                | BodyKind::Csv
                | BodyKind::Xml
                | BodyKind::Html
                | BodyKind::EventStream
                | BodyKind::Form
                | BodyKind::Yaml => {
                    let text = String::from_utf8_lossy(bytes);
                    if let Cow::Borrowed(text) = text {
                        let mut found = Vec::new();
                        scan.find(tax, text, Field::default(), Place::Body, &mut found);
                        scan.body = found;
                    } else {
                        // Not UTF-8: aliases are ASCII, so scan the valid prefix
                        // would miss some; read it lossily instead, where every
                        // replacement char stands for invalid bytes only.
                        scan.scan_lossy(tax, bytes);
                    }
                }
                BodyKind::Json => scan.scan_json(tax, bytes)?,
            }
        }
        Ok(scan)
    }

    /// Distinct aliases found, in order of first appearance: the decode batch.
    pub fn aliases(&self) -> &[String] {
        &self.aliases
    }

    /// Raw-id-shaped values found, per place.
    pub fn raw_ids(&self) -> RawIdCount {
        self.raw
    }

    /// The alias at `index` of [`Self::aliases`] as the request first wrote it.
    pub fn written(&self, index: usize) -> Option<&str> {
        self.written.get(index).map(String::as_str)
    }

    /// The first sentinel found, as written, if any: the request can be
    /// refused without asking control.
    pub fn sentinel(&self, tax: &Taxonomy) -> Option<&str> {
        self.aliases
            .iter()
            .position(|a| tax.parse_alias(a).is_some_and(|p| p.is_sentinel()))
            .and_then(|i| self.written(i))
    }

    fn alias_index(&mut self, alias: &str, written: &str) -> usize {
        if let Some(i) = self.index.get(alias) {
            return *i;
        }
        self.aliases.push(alias.to_owned());
        self.written.push(written.to_owned());
        self.index.insert(alias.to_owned(), self.aliases.len() - 1);
        self.aliases.len() - 1
    }
}

/// `&`-separated parameters of a query string (leading `?` included in the
/// offsets), with their offsets.
fn split_params(query: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    query.split(['&', ';']).map(move |p| {
        let start = at;
        at += p.len() + 1;
        match p.strip_prefix('?') {
            Some(rest) => (start + 1, rest),
            None => (start, p),
        }
    })
}

/// Whether a FHIR `identifier` search (`identifier=<system>|<value>`, any
/// of a comma-joined list, percent-encoded or not) names a business
/// identifier of a configured system with a raw value (not an alias).
fn business_identifier_is_raw(tax: &Taxonomy, name: &str, value: &str) -> bool {
    let name = name.split_once(':').map_or(name, |(n, _)| n);
    if !name.eq_ignore_ascii_case("identifier") {
        return false;
    }
    let (decoded, _) = percent_decode(value.as_bytes());
    let decoded = String::from_utf8_lossy(&decoded);
    decoded.split(',').any(|token| {
        let Some((system, id)) = token.split_once('|') else {
            return false;
        };
        let id = id.trim();
        tax.identifier_system_kind(system).is_some()
            && !id.is_empty()
            && tax.parse_alias(id).is_none()
    })
}

#[cfg(test)]
mod tests;
