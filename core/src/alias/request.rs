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

pub mod body;

use super::grammar;
use super::id::Form;
use super::id::KindId;
use super::rewrite::splice;
use super::scan::BodyKind;
use super::shape;
use super::taxonomy::Taxonomy;
use crate::json::lexer::{text_of, Event, JsonError, Lexer, Lit};
use crate::proto::alias::DecodedIds;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

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

    /// Counts the raw ids in the request's authority (`:authority`, the
    /// `Host` of HTTP/1): a host name built around a record id sends it to
    /// HMS as surely as the path does. Aliases there are not decoded (a host
    /// is never rewritten) and pass as text.
    pub fn scan_authority(&mut self, tax: &Taxonomy, authority: &str) {
        let mut scratch = RequestScan::default();
        scratch.find(
            tax,
            authority,
            Field::default(),
            Place::Header,
            &mut Vec::new(),
        );
        self.raw.headers += scratch.raw.total();
    }

    /// Scans a text keyhole decoded from the body (see [`body::view`]): its
    /// raw ids count as the body's; the first alias in it, as written, is
    /// returned. Such a text is never rewritten, so a request holding an
    /// alias there cannot be decoded and the filter refuses it.
    pub fn scan_hidden(&mut self, tax: &Taxonomy, text: &str) -> Option<String> {
        // JSON as JSON (its escapes read), anything else as text.
        let scratch = RequestScan::new(tax, "", Some((text.as_bytes(), BodyKind::Json)))
            .unwrap_or_else(|_| {
                let mut scratch = RequestScan::default();
                scratch.find(tax, text, Field::default(), Place::Body, &mut Vec::new());
                scratch
            });
        self.raw.body += scratch.raw.total();
        scratch.written.into_iter().next()
    }

    /// Adds request headers to the scan: each value is read as text (and
    /// percent-decoded), the form an id takes chosen by the header's name as
    /// by a JSON key (`x-patient-fhir-id` wants the FHIR id). `headers` are
    /// the ones the filter scans, in order; [`Self::rewrite_headers`] takes
    /// the same list.
    pub fn scan_headers(&mut self, tax: &Taxonomy, headers: &[(String, String)]) {
        for (index, (name, value)) in headers.iter().enumerate() {
            let mut found = Vec::new();
            // `X-Patient-Id` names a patient as `patientId` does.
            let key = name
                .get(..2)
                .filter(|x| x.eq_ignore_ascii_case("x-"))
                .and_then(|_| name.get(2..))
                .unwrap_or(name);
            let field = Field {
                want: tax.form_wanted_by_key(name),
                ..Field::of_key(tax, key)
            };
            self.find(tax, value, field, Place::Header, &mut found);
            if !found.is_empty() {
                self.headers.push(HeaderHits {
                    index,
                    value: value.clone(),
                    hits: found,
                });
            }
        }
    }

    /// The new value of every scanned header that held an alias, as
    /// `(index, value)` with `index` into the list passed to
    /// [`Self::scan_headers`]. `decoded` is as for [`Self::rewrite`]. Each id
    /// is written percent-encoded (ids are URL-safe in practice, so this
    /// changes nothing but a value that could otherwise break the header).
    ///
    /// Fails as [`Self::rewrite`] does, and with [`RequestError::WrongBody`]
    /// when `headers` is not the list scanned.
    pub fn rewrite_headers(
        &self,
        tax: &Taxonomy,
        headers: &[(String, String)],
        decoded: &[Option<DecodedIds>],
    ) -> Result<Vec<(usize, String)>, RequestError> {
        self.check_decoded(tax, decoded)?;
        let mut out = Vec::with_capacity(self.headers.len());
        for h in &self.headers {
            if headers.get(h.index).map(|(_, v)| v) != Some(&h.value) {
                return Err(RequestError::WrongBody {
                    scanned: h.value.len(),
                    got: 0,
                });
            }
            let mut edits = Vec::with_capacity(h.hits.len());
            for hit in &h.hits {
                edits.push((
                    hit.range.clone(),
                    Cow::Owned(percent_encode(self.id_for(tax, hit, decoded)?)),
                ));
            }
            let value = String::from_utf8(splice(h.value.as_bytes(), edits)).unwrap_or_default();
            out.push((h.index, value));
        }
        Ok(out)
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

    /// Replaces every alias with its decoded id. `decoded` is parallel to
    /// [`Self::aliases`] (control's decode answer). Returns the new path and the
    /// new body (`None` when there was none).
    ///
    /// Fails with [`RequestError::UnknownAlias`] for the first alias that
    /// decoded to nothing and [`RequestError::Sentinel`] for a sentinel.
    pub fn rewrite(
        &self,
        tax: &Taxonomy,
        path: &str,
        body: Option<&[u8]>,
        decoded: &[Option<DecodedIds>],
    ) -> Result<(String, Option<Vec<u8>>), RequestError> {
        self.check_decoded(tax, decoded)?;
        let got = body.map_or(0, <[u8]>::len);
        if path.len() != self.path_len || got != self.body_len {
            return Err(RequestError::WrongBody {
                scanned: self.body_len,
                got,
            });
        }
        let value = |h: &Hit| self.id_for(tax, h, decoded);
        let mut edits = Vec::with_capacity(self.path.len());
        for h in &self.path {
            edits.push((h.range.clone(), Cow::Owned(percent_encode(value(h)?))));
        }
        let new_path = String::from_utf8(splice(path.as_bytes(), edits)).unwrap_or_default();
        let Some(body) = body else {
            return Ok((new_path, None));
        };
        let mut edits: Vec<(Range<usize>, Cow<'_, str>)> = Vec::new();
        for h in &self.body {
            let v = value(h)?;
            if h.encoded {
                edits.push((h.range.clone(), Cow::Owned(percent_encode(v))));
                continue;
            }
            // Ids never need JSON escaping in practice; if one does, escape it.
            let v = match serde_json::to_string(v) {
                Ok(quoted) if quoted.len() != v.len() + 2 => Cow::Owned(
                    quoted
                        .get(1..quoted.len() - 1)
                        .unwrap_or_default()
                        .to_owned(),
                ),
                _ => Cow::Borrowed(v),
            };
            edits.push((h.range.clone(), v));
        }
        for e in &self.escaped {
            let mut inner = Vec::with_capacity(e.hits.len());
            for h in &e.hits {
                let v = value(h)?;
                inner.push((
                    h.range.clone(),
                    if h.encoded {
                        Cow::Owned(percent_encode(v))
                    } else {
                        Cow::Borrowed(v)
                    },
                ));
            }
            let text = String::from_utf8(splice(e.text.as_bytes(), inner)).unwrap_or_default();
            let literal = serde_json::to_string(&text).unwrap_or_else(|_| "\"\"".to_owned());
            edits.push((e.span.clone(), Cow::Owned(literal)));
        }
        Ok((new_path, Some(splice(body, edits))))
    }

    /// Fails unless `decoded` answers every alias of the scan (no sentinel,
    /// none unknown).
    fn check_decoded(
        &self,
        tax: &Taxonomy,
        decoded: &[Option<DecodedIds>],
    ) -> Result<(), RequestError> {
        if decoded.len() != self.aliases.len() {
            return Err(RequestError::DecodedCount {
                got: decoded.len(),
                want: self.aliases.len(),
            });
        }
        if let Some(alias) = self.sentinel(tax) {
            return Err(RequestError::Sentinel {
                alias: alias.to_owned(),
            });
        }
        if let Some(i) = decoded.iter().position(Option::is_none) {
            return Err(RequestError::UnknownAlias {
                alias: self.written(i).unwrap_or_default().to_owned(),
            });
        }
        Ok(())
    }

    /// The id that replaces hit `h`, in the form its place wants.
    fn id_for<'d>(
        &self,
        tax: &Taxonomy,
        h: &Hit,
        decoded: &'d [Option<DecodedIds>],
    ) -> Result<&'d str, RequestError> {
        let unknown = || RequestError::UnknownAlias {
            alias: self.written(h.alias).unwrap_or_default().to_owned(),
        };
        let d = decoded
            .get(h.alias)
            .and_then(Option::as_ref)
            .ok_or_else(unknown)?;
        let kind = tax.kind_by_name(&d.kind);
        let preferred = kind
            .and_then(|k| tax.kind(k))
            .and_then(|k| k.preferred_form);
        let id = d
            .ids
            .pick(h.want.or(preferred).unwrap_or(Form::Uuid))
            .ok_or_else(unknown)?;
        if h.kinds.is_empty() {
            return Ok(id);
        }
        // An id is unique only within its kind (FHIR ids within a resource
        // type): another kind's id in this place names another record. A
        // record of unknown kind (the fallback) fits only by a UUID, which
        // names one record whatever its type.
        let fits = kind.is_some_and(|k| h.kinds.iter().any(|want| tax.kinds_may_meet(k, *want)));
        let unknown_kind_by_uuid =
            kind == Some(tax.fallback_kind()) && shape::is_uuid(id.as_bytes());
        if fits || unknown_kind_by_uuid {
            return Ok(id);
        }
        Err(RequestError::WrongKind {
            alias: self.written(h.alias).unwrap_or_default().to_owned(),
            kind: d.kind.clone(),
            wanted: h
                .kinds
                .iter()
                .map(|k| tax.kind_name(*k))
                .collect::<Vec<_>>()
                .join(" or "),
        })
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

    /// Finds alias tokens in `text`, read as written and percent-decoded;
    /// `want` is the form the surrounding field asks for. Counts raw-id-shaped
    /// tokens of `place`.
    fn find(&mut self, tax: &Taxonomy, text: &str, field: Field, place: Place, out: &mut Vec<Hit>) {
        let bytes = text.as_bytes();
        if !bytes.contains(&b'%') {
            return self.find_in(tax, bytes, None, field, place, out);
        }
        let (decoded, origin) = percent_decode(bytes);
        self.find_in(tax, &decoded, Some(&origin), field, place, out);
    }

    /// Finds tokens in `bytes`; `origin` maps each byte (and the end) to its
    /// offset in the text as written when `bytes` is percent-decoded.
    fn find_in(
        &mut self,
        tax: &Taxonomy,
        bytes: &[u8],
        origin: Option<&[usize]>,
        field: Field,
        place: Place,
        out: &mut Vec<Hit>,
    ) {
        let at = |i: usize| origin.map_or(Some(i), |o| o.get(i).copied());
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes.get(i).copied().unwrap_or(0);
            let start = shape::is_token_byte(b)
                && !i
                    .checked_sub(1)
                    .and_then(|p| bytes.get(p))
                    .copied()
                    .is_some_and(shape::is_token_byte);
            if !start {
                i += 1;
                continue;
            }
            // One run of token bytes (`Arztbrief_patient-k7q2-001_2025`):
            // an alias as a whole (or a near-miss of one), else every epoch
            // alias glued inside it.
            let len = bytes.get(i..).map_or(0, |t| {
                t.iter().take_while(|b| shape::is_token_byte(**b)).count()
            });
            let end = i + len;
            let run = bytes
                .get(i..end)
                .and_then(|t| std::str::from_utf8(t).ok())
                .unwrap_or("");
            let whole = if run.contains('_') {
                None
            } else if tax.looks_like_alias(run) {
                Some(run.to_owned())
            } else {
                near_miss(tax, run)
            };
            let found: Vec<(Range<usize>, String)> = match whole {
                Some(alias) => vec![(i..end, alias)],
                None => {
                    let glued = glued_aliases(tax, run);
                    // Raw ids whole or glued to other text (`Befund_<uuid>`,
                    // an ETag `<uuid>-v7`), and a number after a FHIR
                    // resource type (`Patient/482913`, also in a query's
                    // `subject=Patient/482913`).
                    let numeric = run.bytes().all(|b| b.is_ascii_digit())
                        && resource_type_before(tax, bytes, i).is_some();
                    for _ in 0..raw_ids_in(tax, run, &glued) + usize::from(numeric) {
                        self.raw.bump(place);
                    }
                    glued
                        .into_iter()
                        .filter_map(|r| Some((i + r.start..i + r.end, run.get(r)?.to_owned())))
                        .collect()
                }
            };
            for (range, alias) in found {
                let (Some(from), Some(to)) = (at(range.start), at(range.end)) else {
                    continue;
                };
                let typed = resource_type_before(tax, bytes, range.start);
                // The most specific name of a kind wins: `Type/` before the
                // alias, else the path segment before it, else the field's.
                let kinds = match typed {
                    Some(kinds) => kinds.to_vec(),
                    None => match (place, segment_kind_before(tax, bytes, range.start)) {
                        (Place::Path, Some(k)) => vec![k],
                        _ => field.kind.into_iter().collect(),
                    },
                };
                let written = bytes
                    .get(range.clone())
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .unwrap_or("");
                let index = self.alias_index(&alias, written);
                out.push(Hit {
                    range: from..to,
                    alias: index,
                    want: if typed.is_some() {
                        Some(Form::Fhir)
                    } else {
                        field.want
                    },
                    kinds,
                    encoded: to - from != range.len(),
                });
            }
            i = end.max(i + 1);
        }
    }

    /// Counts path segments right after a kind's segment that are numbers
    /// (`/patients/482913`): raw ids, whatever their length.
    fn numeric_after_kind(&mut self, tax: &Taxonomy, path: &str) {
        let mut prev_kind = false;
        for segment in path.split('/') {
            let (decoded, _) = percent_decode(segment.as_bytes());
            let numeric = !decoded.is_empty() && decoded.iter().all(u8::is_ascii_digit);
            if prev_kind && numeric {
                self.raw.bump(Place::Path);
            }
            prev_kind = tax.path_segment_kind(segment).is_some();
        }
    }

    fn scan_lossy(&mut self, tax: &Taxonomy, bytes: &[u8]) {
        // Scan each valid UTF-8 run; aliases are ASCII and never span an
        // invalid byte.
        let mut at = 0;
        for chunk in bytes.utf8_chunks() {
            let valid = chunk.valid();
            let mut found = Vec::new();
            self.find(tax, valid, Field::default(), Place::Body, &mut found);
            for mut h in found {
                h.range = at + h.range.start..at + h.range.end;
                self.body.push(h);
            }
            at += valid.len() + chunk.invalid().len();
        }
    }

    fn scan_json(&mut self, tax: &Taxonomy, bytes: &[u8]) -> Result<(), RequestError> {
        let src = std::str::from_utf8(bytes).map_err(|_| JsonError::NotUtf8)?;
        let mut lx = Lexer::new(src);
        // Key of the innermost object member (`None` inside arrays keeps the
        // array's key).
        let mut keys: Vec<Option<Cow<'_, str>>> = Vec::new();
        let mut cur: Option<Cow<'_, str>> = None;
        // Per open object: its `system` is a configured business identifier
        // system, and its `value` is no alias.
        let mut identifiers: Vec<(bool, bool)> = Vec::new();
        while let Some(ev) = lx.next_event()? {
            match ev {
                Event::StartObject | Event::StartArray => {
                    keys.push(cur.take());
                    if matches!(ev, Event::StartArray) {
                        cur = keys.last().cloned().flatten();
                    } else {
                        identifiers.push((false, false));
                    }
                }
                Event::EndObject | Event::EndArray => {
                    if matches!(ev, Event::EndObject) && identifiers.pop() == Some((true, true)) {
                        self.raw.bump(Place::Body);
                    }
                    keys.pop();
                    cur = None;
                    // Back inside an array, elements keep the array's key.
                    if let Some(k) = keys.last() {
                        cur = k.clone();
                    }
                }
                Event::Key(lit) => {
                    self.literal(tax, src, &lit, Field::default())?;
                    cur = Some(text_of(src, &lit)?);
                }
                Event::Str(lit) => {
                    let field = cur
                        .as_deref()
                        .map(|k| Field::of_key(tax, k))
                        .unwrap_or_default();
                    if let (Some(k @ ("system" | "value")), Some(ident)) =
                        (cur.as_deref(), identifiers.last_mut())
                    {
                        let text = text_of(src, &lit)?;
                        let text = text.trim();
                        if k == "system" {
                            ident.0 = tax.identifier_system_kind(text).is_some();
                        } else {
                            ident.1 = !text.is_empty() && tax.parse_alias(text).is_none();
                        }
                    }
                    self.literal(tax, src, &lit, field)?;
                }
                Event::Scalar => {}
            }
        }
        Ok(())
    }

    fn literal(
        &mut self,
        tax: &Taxonomy,
        src: &str,
        lit: &Lit,
        field: Field,
    ) -> Result<(), RequestError> {
        let text = text_of(src, lit)?;
        let mut found = Vec::new();
        self.find(tax, &text, field, Place::Body, &mut found);
        if found.is_empty() {
            return Ok(());
        }
        if lit.escaped {
            self.escaped.push(EscLit {
                span: lit.span.clone(),
                text: text.into_owned(),
                hits: found,
            });
        } else {
            let base = lit.inner().start;
            self.body.extend(found.into_iter().map(|mut h| {
                h.range = base + h.range.start..base + h.range.end;
                h
            }));
        }
        Ok(())
    }
}

/// The kinds of the resource type `Type/` (a FHIR resource type) that ends
/// right before `at`, if one does (`Patient/<alias>`).
fn resource_type_before<'t>(tax: &'t Taxonomy, bytes: &[u8], at: usize) -> Option<&'t [KindId]> {
    let slash = at.checked_sub(1)?;
    if bytes.get(slash) != Some(&b'/') {
        return None;
    }
    let head = bytes.get(..slash).unwrap_or_default();
    let word_start = head
        .iter()
        .rposition(|b| !b.is_ascii_alphanumeric())
        .map_or(0, |p| p + 1);
    head.get(word_start..)
        .and_then(|w| std::str::from_utf8(w).ok())
        .and_then(|w| tax.resource_type_kinds(w))
}

/// The kind of the path segment that ends right before `at` (`/patients/`
/// before `<alias>`), if it names one.
fn segment_kind_before(tax: &Taxonomy, bytes: &[u8], at: usize) -> Option<KindId> {
    let slash = at.checked_sub(1)?;
    if bytes.get(slash) != Some(&b'/') {
        return None;
    }
    let head = bytes.get(..slash).unwrap_or_default();
    let start = head.iter().rposition(|b| *b == b'/').map_or(0, |p| p + 1);
    tax.path_segment_kind(head.get(start..)?)
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

/// The epoch aliases glued inside a run of token bytes that is not one alias
/// as a whole: `patient-k7q2-001` in the ETag `patient-k7q2-001-v7` or the file
/// name `Arztbrief_patient-k7q2-001_2025` (keyhole writes an alias where HMS
/// had the id, with whatever was glued to it). An alias starts at the run's
/// start or after a non-alphanumeric byte and ends before a non-digit; only
/// aliases carrying an epoch count (`<kind>-<epoch>-<number>`: the epoch has a
/// letter and a digit, which prose does not), so `non-patient-care-100` is
/// text. Byte ranges within `run`.
fn glued_aliases(tax: &Taxonomy, run: &str) -> Vec<Range<usize>> {
    let b = run.as_bytes();
    let longest = tax.longest_alias_prefix();
    let mut out = Vec::new();
    let mut p = 0;
    while p < b.len() {
        let starts = b.get(p).is_some_and(u8::is_ascii_alphabetic)
            && p.checked_sub(1)
                .and_then(|q| b.get(q))
                .is_none_or(|c| !c.is_ascii_alphanumeric());
        let found = if starts {
            epoch_alias_at(tax, run, p, longest)
        } else {
            None
        };
        match found {
            Some(end) => {
                out.push(p..end);
                p = end;
            }
            None => p += 1,
        }
    }
    out
}

/// The end of the epoch alias starting at `p` in `run`, if one does: the
/// first `-<epoch>-<digits>` after `p` whose whole makes an epoch alias. Only
/// the next `longest` bytes (the longest alias prefix) are looked at for the
/// epoch's dash, and at most ten digits after it, so a run of any length is
/// read in time linear in it.
fn epoch_alias_at(tax: &Taxonomy, run: &str, p: usize, longest: usize) -> Option<usize> {
    let b = run.as_bytes();
    let window = b.len().min(p + longest + 1);
    let mut q = p;
    while let Some(dash) = b
        .get(q + 1..window)
        .and_then(|t| t.iter().position(|c| *c == b'-'))
        .map(|d| q + 1 + d)
    {
        // The kind's prefix never spans an underscore.
        if b.get(q..dash).is_some_and(|t| t.contains(&b'_')) {
            return None;
        }
        let digits_from = dash + 1 + grammar::EPOCH_LEN + 1;
        if b.get(digits_from - 1) == Some(&b'-') {
            let digits = b.get(digits_from..).map_or(0, |t| {
                t.iter().take(10).take_while(|c| c.is_ascii_digit()).count()
            });
            let end = digits_from + digits;
            let epoch = run
                .get(..end)
                .and_then(|a| tax.parse_alias(a.get(p..)?))
                .and_then(|parts| parts.epoch);
            if digits >= 3 && epoch.is_some() {
                return Some(end);
            }
        }
        q = dash;
    }
    None
}

/// The canonical epoch alias a near-miss token stands for: lower-cased, its
/// number padded to three digits (`Patient-K7Q2-1` → `patient-k7q2-001`).
/// `None` unless that is an alias (or a repairable drift of one) carrying an
/// epoch: control issues no epoch-less aliases, so `Patient-001` is text.
fn near_miss(tax: &Taxonomy, token: &str) -> Option<String> {
    let lower = token.to_ascii_lowercase();
    let (head, digits) = lower.rsplit_once('-')?;
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u32 = digits.parse().ok()?;
    let canonical = format!("{head}-{number:03}");
    if canonical == token {
        return None;
    }
    let has_epoch = |a: &str| tax.parse_alias(a).is_some_and(|p| p.epoch.is_some());
    let is_alias = has_epoch(&canonical)
        || tax
            .repair_candidates(&canonical)
            .iter()
            .any(|c| has_epoch(c));
    is_alias.then_some(canonical)
}

/// How many raw record ids a run of token bytes holds: 1 if it is one
/// ([`raw_id_shaped`]), else those glued to other text in it — a UUID, 32 hex
/// digits or a FHIR id with a configured prefix that starts the run or
/// follows a byte other than a letter or digit (`_`, `-`), and ends it or is
/// followed by one (`Arztbrief_<uuid>_2025`, `<uuid>-v7`, `pat-000123_v2`).
/// The `aliases` glued in the run (ranges into it) are not looked into.
fn raw_ids_in(tax: &Taxonomy, run: &str, aliases: &[Range<usize>]) -> usize {
    if aliases.is_empty() && !run.contains('_') && raw_id_shaped(tax, run) {
        return 1;
    }
    let b = run.as_bytes();
    let mut n = 0;
    let mut p = 0;
    while p < b.len() {
        if let Some(r) = aliases.iter().find(|r| r.contains(&p)) {
            p = r.end;
            continue;
        }
        let starts = p
            .checked_sub(1)
            .and_then(|q| b.get(q))
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        let len = if starts { raw_id_at(tax, b, p) } else { None };
        match len {
            Some(len) => {
                n += 1;
                p += len;
            }
            None => p += 1,
        }
    }
    n
}

/// The length of the raw id (UUID, 32 hex digits, prefixed FHIR id) that
/// starts at `p` in `b` and ends where a letter or digit does not follow.
fn raw_id_at(tax: &Taxonomy, b: &[u8], p: usize) -> Option<usize> {
    let rest = b.get(p..)?;
    let ends = |len: usize| rest.get(len).is_none_or(|c| !c.is_ascii_alphanumeric());
    if rest.get(..36).is_some_and(shape::is_uuid) && ends(36) {
        return Some(36);
    }
    let hex = rest.iter().take_while(|c| c.is_ascii_hexdigit()).count();
    if hex == 32 && ends(32) {
        let h = rest.get(..32)?;
        if h.iter().any(u8::is_ascii_digit) && h.iter().any(u8::is_ascii_alphabetic) {
            return Some(32);
        }
    }
    // `<prefix>-<digits>`: a configured FHIR prefix (any case).
    let prefix = rest
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric())
        .count();
    if prefix == 0
        || !rest.first().is_some_and(u8::is_ascii_alphabetic)
        || rest.get(prefix) != Some(&b'-')
    {
        return None;
    }
    let digits = rest
        .get(prefix + 1..)?
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count();
    let len = prefix + 1 + digits;
    let lower = rest.get(..prefix)?.to_ascii_lowercase();
    (digits > 0 && ends(len) && tax.fhir_prefix_kinds(&lower).is_some()).then_some(len)
}

/// Whether a token has the shape of a raw record id: a UUID (with or without
/// dashes, any case) or a FHIR id with a configured prefix (`pat-000123`).
fn raw_id_shaped(tax: &Taxonomy, token: &str) -> bool {
    let b = token.as_bytes();
    if shape::is_uuid(b) {
        return true;
    }
    if b.len() == 32
        && b.iter().all(u8::is_ascii_hexdigit)
        && b.iter().any(u8::is_ascii_digit)
        && b.iter().any(u8::is_ascii_alphabetic)
    {
        return true;
    }
    let lower = token.to_ascii_lowercase();
    shape::is_fhir_like(&lower)
        && lower
            .split_once('-')
            .is_some_and(|(prefix, _)| tax.fhir_prefix_kinds(prefix).is_some())
}

/// Percent-decodes `bytes` (`%XX` with two hex digits; anything else stays),
/// with the offset in `bytes` of every decoded byte and of the end.
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

fn percent_decode(bytes: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::with_capacity(bytes.len());
    let mut origin = Vec::with_capacity(bytes.len() + 1);
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes.get(i).copied().unwrap_or(0);
        let pair = (bytes.get(i + 1).copied(), bytes.get(i + 2).copied());
        origin.push(i);
        match (b, pair) {
            (b'%', (Some(h), Some(l))) => match (hex(h), hex(l)) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                }
                _ => {
                    out.push(b);
                    i += 1;
                }
            },
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    origin.push(bytes.len());
    (out, origin)
}

/// Percent-encodes everything outside RFC 3986 unreserved characters.
fn percent_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
