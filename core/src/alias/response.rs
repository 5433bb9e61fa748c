//! Finding and replacing raw ids in HMS responses.
//!
//! [`ResponseScan::add`] reads one body (a response's body and its
//! `Location` header are two parts of one scan) with the reader its
//! [`BodyKind`] names ([`BodyKind::from_content_type`]) and records every raw
//! id occurrence with its kind, form and grouping: the UUID, FHIR id, slug and
//! self-reference of one object are one entity. [`ResponseScan::ids`] is the
//! encode batch for control; [`ResponseScan::rewrite`] splices the aliases into
//! the original bytes and then *verifies* the result by scanning it again: if
//! any id other than an alias, or any raw value of the batch, is still there,
//! it returns an error instead of the body (fail closed). A body that cannot
//! be read (compressed without a content-encoding, binary, or not the format
//! it claims) is an error too; [`RewriteError::reason`] names why.
//!
//! What counts as a raw id, in JSON (also NDJSON, `+json`, and text whose
//! bytes are JSON):
//! - values of self-id keys (`id`, `uuid`, `fhirId`, `slug`, `reference`):
//!   the object's own ids, whose kind comes from `resourceType`, the FHIR id's
//!   prefix, the key the object sits under, or (for the primary record of a
//!   response) the request path;
//! - values of id fields (`patientId`, `clinic`, `slotId`, …) of the taxonomy;
//! - inside any string or key: UUIDs anywhere, FHIR references `Type/id`
//!   (not to a terminology or conformance definition nobody configured:
//!   `http://terminology.hl7.org/CodeSystem/v3-ActCode` names no record),
//!   prefixed FHIR ids (`prac-00042`) and values shaped like an alias
//!   (`ward-101`: an HMS value the model could not tell from an alias);
//! - anywhere in any string: a raw value found by the rules above elsewhere in
//!   the scan (a slot slug in error prose).
//!
//! CSV: cells under id-named columns (`response/csv.rs`). XML: FHIR resource ids,
//! references, id-named elements and attributes (`response/xml.rs`). In every text
//! format the patterns and known values apply to the whole text and to its
//! decoded view (percent escapes, character references), where an id written
//! with escapes is replaced escapes and all. Numbers are ids only under id
//! keys or columns.
//!
//! Rewriting splices byte ranges (no DOM, no re-serialisation): the body keeps
//! its key order, whitespace and number formatting. A string holding a backslash
//! escape is decoded, rewritten and re-encoded as a whole.

use super::id::Form;
use super::id::KindId;
use super::known::KnownIds;
use super::shape::{self, Pattern, TextHit};
use super::taxonomy::{KeyRole, Taxonomy};
use crate::json::lexer::{text_of, Event, JsonError, Lexer, Lit};
use crate::proto::alias::{IdInput, KnownAlias};
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

mod broken;
mod csv;
mod format;
mod keyvalue;
mod xml;

pub use format::WithholdReason;

/// How to read a body; [`BodyKind::from_content_type`] picks it from the
/// `content-type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// A JSON document; a body that is not JSON is an error.
    Json,
    /// Text of no particular format (or a header value): only the text
    /// patterns apply, unless the bytes are JSON (then read as JSON).
    Text,
    /// Newline-delimited JSON: every non-blank line a JSON document.
    NdJson,
    /// A CSV (or TSV, `;`-separated) export: cells under id-named columns
    /// are ids, numbers included; every cell is scanned as text.
    Csv,
    /// XML, FHIR XML included: `<id value>` of a resource element,
    /// `<reference value>`, id-named elements and attributes are ids;
    /// character references are decoded for scanning. A body that is not
    /// well-formed XML is an error.
    Xml,
    /// HTML: text whose character references (`&#45;`, `&hyphen;`) are
    /// decoded for scanning; an id written with them is replaced whole.
    Html,
    /// Server-sent events: a `data:` line whose payload is a JSON document
    /// is read as JSON; every other line (and a payload split over several
    /// `data:` lines) as text.
    EventStream,
    /// A form-encoded body (`a=1&b=2`): values under id-named keys are ids,
    /// numbers included; the whole body is read as text too.
    Form,
    /// YAML: `key: value` lines under id-named keys are ids, numbers
    /// included; the whole body is read as text too. A YAML body that is
    /// JSON is read as JSON.
    Yaml,
}

/// A part of a scan (one body or header), returned by [`ResponseScan::add`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartId(usize);

/// Why a body could not be scanned or rewritten. The filter answers all of
/// these with a 502 JSON error: a body it cannot alias is never passed on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// A JSON body is not JSON.
    #[error("response body is not valid JSON: {0}")]
    Json(#[from] JsonError),
    /// The body is compressed or archived (gzip, zstd, zip, …) but carries
    /// no `content-encoding`.
    #[error("response body is compressed without a content-encoding")]
    Compressed,
    /// The body is binary: NUL bytes, or not UTF-8.
    #[error("response body is binary (NUL bytes or not UTF-8)")]
    Binary,
    /// An XML body is not well-formed.
    #[error("response body is not well-formed XML at offset {at}")]
    Xml {
        /// Byte offset of the error.
        at: usize,
    },
    /// The aliases do not match the scan's ids.
    #[error("got {got} aliases for {want} ids")]
    AliasCount {
        /// Aliases passed.
        got: usize,
        /// Ids of the scan.
        want: usize,
    },
    /// An alias is empty.
    #[error("alias {index} is empty")]
    EmptyAlias {
        /// Its index.
        index: usize,
    },
    /// The body passed to rewrite is not the body scanned.
    #[error("part {part} was scanned with {scanned} bytes, rewrite got {got}")]
    WrongBody {
        /// The part.
        part: usize,
        /// Bytes scanned.
        scanned: usize,
        /// Bytes passed.
        got: usize,
    },
    /// Verification found a raw id in the rewritten body.
    #[error("rewritten body still holds a raw id at offset {at}; refusing to pass it on")]
    Leak {
        /// Byte offset in the rewritten body.
        at: usize,
    },
    /// An id runs across an invisible or look-alike character
    /// (`pat-0001&shy;24`): aliasing what the patterns see would alias a
    /// prefix, another record (see `response/broken.rs`).
    #[error(
        "response body holds an id broken by an invisible or look-alike character at offset {at}"
    )]
    BrokenId {
        /// Byte offset of the character in the body.
        at: usize,
    },
}

impl RewriteError {
    /// The reason as a counter label: what made the body unreadable, or
    /// that verification refused it.
    pub fn reason(&self) -> WithholdReason {
        match self {
            RewriteError::Json(JsonError::NotUtf8) => WithholdReason::Binary,
            RewriteError::Json(_) => WithholdReason::NotJson,
            RewriteError::Compressed => WithholdReason::Compressed,
            RewriteError::Binary => WithholdReason::Binary,
            RewriteError::Xml { .. } => WithholdReason::NotXml,
            RewriteError::Leak { .. } => WithholdReason::Leak,
            RewriteError::BrokenId { .. } => WithholdReason::BrokenId,
            RewriteError::AliasCount { .. }
            | RewriteError::EmptyAlias { .. }
            | RewriteError::WrongBody { .. } => WithholdReason::Mismatch,
        }
    }
}

impl From<WithholdReason> for RewriteError {
    fn from(r: WithholdReason) -> Self {
        match r {
            WithholdReason::Compressed => RewriteError::Compressed,
            WithholdReason::NotJson => RewriteError::Json(JsonError::NotUtf8),
            WithholdReason::NotXml => RewriteError::Xml { at: 0 },
            _ => RewriteError::Binary,
        }
    }
}

/// Where an occurrence sits.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Loc {
    /// Byte range in the body.
    Raw(Range<usize>),
    /// Byte range inside the decoded text of an escaped literal.
    Esc { lit: usize, range: Range<usize> },
}

/// A string literal holding an escape, kept decoded.
#[derive(Debug, Clone)]
struct EscLit {
    span: Range<usize>,
    text: String,
    occs: Vec<(Range<usize>, usize)>,
    /// Clinical content ([`super::fhir::is_clinical_value_key`]): nothing
    /// in it is replaced.
    protected: bool,
}

/// An unescaped string literal of a part.
#[derive(Debug, Clone)]
struct LitSpan {
    /// Content range (quotes excluded).
    range: Range<usize>,
    /// The scan ran the text patterns over this text and found nothing, and
    /// the text holds no escape to decode: verification need not look at it
    /// again while its bytes are unchanged.
    clean: bool,
    /// Clinical content ([`super::fhir::is_clinical_value_key`]): nothing
    /// in it is replaced; verification reads it, so an id there withholds
    /// the body.
    protected: bool,
}

/// One scanned part.
#[derive(Debug, Clone)]
struct Part {
    len: usize,
    kind: BodyKind,
    /// Raw occurrences: (byte range, value index), sorted by start.
    occs: Vec<(Range<usize>, usize)>,
    /// Unescaped string literals (the whole text for a text part), in order.
    lits: Vec<LitSpan>,
    /// Number tokens of a JSON part, in order: an id found there is written
    /// back as a string (`"id": 482913` → `"id": "patient-001"`).
    numbers: Vec<Range<usize>>,
    escaped: Vec<EscLit>,
}

/// An entity seen in one object: its values, at most one per form, sorted
/// and then `None` — ordered as the sorted list of its values would be, and
/// held inline (a list body has an entity per item).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    kind: KindId,
    members: [Option<(usize, Form)>; FORMS],
}

/// How many forms an id can have ([`Form`]): the most members of a [`Group`].
const FORMS: usize = 3;

/// The raw ids of one response (one or more parts).
#[derive(Debug, Clone)]
pub struct ResponseScan<'t> {
    tax: &'t Taxonomy,
    /// Every raw value found, once per kind it stands as (`Patient/1` and
    /// `Encounter/1` are two records), numbered in order of discovery.
    values: Vec<String>,
    /// The numbers of each distinct value in [`Self::values`], oldest first.
    holders: HashMap<String, Vec<usize>, FixedState>,
    /// Kind and form of each value's strongest sighting.
    meta: Vec<(KindId, Form)>,
    /// The entities of the scan (sorted and without repeats after
    /// [`Self::build_ids`]).
    groups: Vec<Group>,
    parts: Vec<Part>,
    ids: Vec<IdInput>,
    /// Value index → index in `ids`.
    id_of_value: Vec<usize>,
}

impl<'t> ResponseScan<'t> {
    /// An empty scan.
    pub fn new(tax: &'t Taxonomy) -> Self {
        ResponseScan {
            tax,
            values: Vec::new(),
            holders: HashMap::default(),
            meta: Vec::new(),
            groups: Vec::new(),
            parts: Vec::new(),
            ids: Vec::new(),
            id_of_value: Vec::new(),
        }
    }

    /// Scans one part. `root_kind` is the kind of the response's primary record
    /// (see [`Taxonomy::kind_for_path`]).
    ///
    /// The bytes are checked against `kind` first (see
    /// [`BodyKind::from_content_type`]): text, CSV and HTML bodies that are
    /// JSON are read as JSON.
    ///
    /// Fails with [`RewriteError::Compressed`] for compressed bytes without a
    /// content-encoding, [`RewriteError::Binary`] for NUL bytes or bytes that
    /// are not UTF-8, [`RewriteError::Json`] when a JSON (or NDJSON) body does
    /// not parse and [`RewriteError::Xml`] when an XML body is not well-formed.
    /// [`RewriteError::reason`] names the cause for counting.
    pub fn add(
        &mut self,
        body: &[u8],
        kind: BodyKind,
        root_kind: Option<KindId>,
    ) -> Result<PartId, RewriteError> {
        let (kind, src) = format::effective_kind(body, kind).map_err(RewriteError::from)?;
        // Learning canonicalises first: an id cut by an invisible or
        // look-alike character is never learned as its prefix.
        if let Some(at) = broken::broken_id(Some(self.tax), None, body) {
            return Err(RewriteError::BrokenId { at });
        }
        // A UTF-8 byte order mark (some FHIR servers write one), an XSSI
        // guard or a JSONP call is no part of the JSON: the document
        // stands inside it.
        let (bom, doc) = split_bom(src);
        let part = match kind {
            BodyKind::Json => {
                let span = format::json_span(src);
                if span == (0..src.len()) {
                    self.json_part(src, kind, root_kind)?
                } else {
                    let doc = src.get(span.clone()).unwrap_or_default();
                    let one = self
                        .json_part(doc, kind, root_kind)
                        .map_err(|e| shift_json_error(e, span.start))?;
                    let mut part = Part::empty(body.len(), kind);
                    part.append_shifted(one, span.start);
                    part
                }
            }
            BodyKind::EventStream => {
                let mut part = Part::empty(body.len(), kind);
                for line in event_lines(doc, bom) {
                    let one = match line.json {
                        Some(at) => {
                            let payload = line.text.get(at..).unwrap_or_default();
                            let one = self
                                .json_part(payload, BodyKind::Json, root_kind)
                                .map_err(|e| shift_json_error(e, line.base + at))?;
                            (one, line.base + at)
                        }
                        None => (
                            self.text_part(line.text.as_bytes(), BodyKind::Text, root_kind)?,
                            line.base,
                        ),
                    };
                    part.append_shifted(one.0, one.1);
                }
                part
            }
            BodyKind::NdJson => {
                let mut part = Part::empty(body.len(), kind);
                let mut at = bom;
                for line in doc.split_inclusive('\n') {
                    let base = at;
                    at += line.len();
                    if line.trim().is_empty() {
                        continue;
                    }
                    let one = self.json_part(line, kind, root_kind).map_err(|e| match e {
                        RewriteError::Json(JsonError::Unexpected { at })
                        | RewriteError::Json(JsonError::Eof { at }) => {
                            RewriteError::Json(JsonError::Unexpected { at: at + base })
                        }
                        other => other,
                    })?;
                    part.append_shifted(one, base);
                }
                part
            }
            BodyKind::Text
            | BodyKind::Csv
            | BodyKind::Xml
            | BodyKind::Html
            | BodyKind::Form
            | BodyKind::Yaml => self.text_part(body, kind, root_kind)?,
        };
        let mut part = part;
        // Occurrences of one range are of one value (the same bytes), so
        // the order among equal keys does not matter. A JSON walk keeps them
        // in order already ([`Walker::insert_occ`]).
        if !part.occs.is_sorted_by_key(|(r, _)| occ_order(r)) {
            part.occs.sort_unstable_by_key(|(r, v)| (occ_order(r), *v));
        }
        // Keep the first (longest) of overlapping occurrences.
        let mut end = 0;
        part.occs.retain(|(r, _)| {
            let keep = r.start >= end;
            if keep {
                end = r.end;
            }
            keep
        });
        self.parts.push(part);
        self.build_ids();
        Ok(PartId(self.parts.len() - 1))
    }

    /// Walks one JSON document (a whole body, or one NDJSON line).
    fn json_part(
        &mut self,
        src: &str,
        kind: BodyKind,
        root_kind: Option<KindId>,
    ) -> Result<Part, RewriteError> {
        let mut part = Part::empty(src.len(), kind);
        // Sized for typical HMS JSON (a string every dozen bytes or so): a
        // few allocations up front instead of a string of regrowths.
        part.lits.reserve(src.len() / 12);
        part.occs.reserve(src.len() / 64);
        let mut w = Walker {
            scan: self,
            src,
            root_kind,
            frames: Vec::new(),
            hits: Vec::new(),
            members: Vec::new(),
            part,
            keys: HashMap::with_capacity_and_hasher(32, FixedState::default()),
        };
        w.run()?;
        Ok(w.part)
    }

    /// Reads a text body: the format's structured positions first (CSV id
    /// columns, FHIR XML ids), then the text patterns over the raw bytes and
    /// over their decoded view (escapes replaced whole).
    fn text_part(
        &mut self,
        body: &[u8],
        kind: BodyKind,
        root_kind: Option<KindId>,
    ) -> Result<Part, RewriteError> {
        let mut part = Part::empty(body.len(), kind);
        part.lits.push(LitSpan {
            range: 0..body.len(),
            clean: false,
            protected: false,
        });
        match kind {
            BodyKind::Csv => csv::scan(self, body, root_kind, &mut part),
            BodyKind::Xml => xml::scan(self, body, root_kind, &mut part)?,
            BodyKind::Form => keyvalue::scan_form(self, body, root_kind, &mut part),
            BodyKind::Yaml => keyvalue::scan_yaml(self, body, root_kind, &mut part),
            _ => {}
        }
        let mut hits = Vec::new();
        shape::find_in_text(self.tax, body, &mut hits);
        for h in &hits {
            let Some(value) = body
                .get(h.range.clone())
                .and_then(|v| std::str::from_utf8(v).ok())
            else {
                continue;
            };
            let (k, form) = self.hit_meta(h, body, None);
            let v = self.value(value, k, form);
            part.occs.push((h.range.clone(), v));
        }
        if let Some(view) = super::known::MappedView::new(body) {
            part.occs.sort_by_key(|(r, _)| r.start);
            let plain = part.occs.len();
            shape::find_in_text(self.tax, &view.text, &mut hits);
            for h in &hits {
                let raw = view.raw_range(h.range.clone());
                let Some(value) = view
                    .text
                    .get(h.range.clone())
                    .and_then(|v| std::str::from_utf8(v).ok())
                else {
                    continue;
                };
                let (k, form) = self.hit_meta(h, &view.text, None);
                let v = self.value(value, k, form);
                if !overlaps(part.occs.get(..plain).unwrap_or_default(), &raw) {
                    part.occs.push((raw, v));
                }
            }
        }
        self.learn_decoded(body, None);
        Ok(part)
    }

    /// The encode batch: every distinct raw id, grouped by entity, with kind and
    /// form hints. Send it to control as is; the aliases come back in this order.
    pub fn ids(&self) -> &[IdInput] {
        &self.ids
    }

    /// Whether the scan found no id at all (nothing to encode or rewrite).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The raw values no output may hold: this scan's and `known` (the
    /// session's earlier ones), except ids of a kind readable in text
    /// ([`Taxonomy::readable_in_text`]), which stay where they stand in
    /// free text. What the last word is given to look for.
    pub fn raw_values<'a>(&'a self, known: &'a [KnownAlias]) -> impl Iterator<Item = &'a str> {
        let tax = self.tax;
        self.values
            .iter()
            .zip(&self.meta)
            .filter(move |(_, (kind, _))| !tax.readable_in_text(*kind))
            .map(|(v, _)| v.as_str())
            .chain(
                known
                    .iter()
                    .filter(move |k| !readable_alias(tax, &k.alias))
                    .map(|k| k.value.as_str()),
            )
    }

    /// Number of id occurrences found in a part by the structural and pattern
    /// rules (known-value matches found at rewrite time not included).
    pub fn occurrences(&self, part: PartId) -> usize {
        self.parts.get(part.0).map_or(0, |p| {
            p.occs.len() + p.escaped.iter().map(|e| e.occs.len()).sum::<usize>()
        })
    }

    /// Rewrites a scanned part with `aliases` (parallel to [`Self::ids`]) and
    /// verifies the result.
    ///
    /// Fails when `body` is not the scanned part, the aliases do not fit the
    /// ids, or verification finds a raw id left ([`RewriteError::Leak`]).
    pub fn rewrite(
        &self,
        part: PartId,
        body: &[u8],
        aliases: &[String],
    ) -> Result<Vec<u8>, RewriteError> {
        self.rewriter(aliases, &[])?.rewrite(part, body)
    }

    /// A rewriter for every part of this scan: `aliases` parallel to
    /// [`Self::ids`], and `known`, the ids the session learned from earlier
    /// bodies with their aliases (control returns them with the encode
    /// answer). Every occurrence of any of these ids is replaced, wherever it
    /// stands. The search index is built once here.
    ///
    /// Fails when the aliases do not fit the ids.
    pub fn rewriter<'r>(
        &'r self,
        aliases: &'r [String],
        known: &'r [KnownAlias],
    ) -> Result<Rewriter<'r, 't>, RewriteError> {
        if aliases.len() != self.ids.len() {
            return Err(RewriteError::AliasCount {
                got: aliases.len(),
                want: self.ids.len(),
            });
        }
        if let Some(index) = aliases.iter().position(String::is_empty) {
            return Err(RewriteError::EmptyAlias { index });
        }
        let mut alias_of: Vec<&'r str> = self
            .id_of_value
            .iter()
            .map(|i| aliases.get(*i).map_or("", String::as_str))
            .collect();
        // An id of a kind readable in text is replaced in its own positions
        // only: left out of the search (an empty value is never searched).
        let tax = self.tax;
        let mut values: Vec<&'r str> = self
            .values
            .iter()
            .zip(&self.meta)
            .map(|(v, (kind, _))| {
                if tax.readable_in_text(*kind) {
                    ""
                } else {
                    v.as_str()
                }
            })
            .collect();
        for k in known {
            if k.alias.is_empty()
                || self.holders.contains_key(k.value.as_str())
                || readable_alias(tax, &k.alias)
            {
                continue;
            }
            values.push(&k.value);
            alias_of.push(&k.alias);
        }
        let known = KnownIds::with_taxonomy(values.iter().copied(), self.tax);
        let allowed = aliases
            .iter()
            .map(String::as_bytes)
            .chain(alias_of.iter().map(|a| a.as_bytes()))
            .collect();
        let plain_aliases = alias_of
            .iter()
            .all(|a| !a.bytes().any(|b| b == b'"' || b == b'\\'));
        Ok(Rewriter {
            scan: self,
            alias_of,
            allowed,
            known,
            plain_aliases,
        })
    }

    /// The value index of `value` as a record of `kind`, adding it if new.
    /// Where no kind is known (the fallback kind), the oldest record of the
    /// value; a record of the fallback kind takes the first specific kind it
    /// is seen with; another kind is another record.
    fn value(&mut self, value: &str, kind: KindId, form: Form) -> usize {
        let tax = self.tax;
        let fallback = tax.fallback_kind();
        if let Some(holders) = self.holders.get_mut(value) {
            let kind_of = |i: &usize| self.meta.get(*i).map(|m| m.0);
            let found = if kind == fallback {
                holders.first().copied()
            } else {
                holders
                    .iter()
                    .find(|i| kind_of(i).is_some_and(|k| tax.kinds_may_meet(k, kind)))
                    .or_else(|| holders.iter().find(|i| kind_of(i) == Some(fallback)))
                    .copied()
            };
            if let Some(i) = found {
                if let Some(m) = self.meta.get_mut(i) {
                    if m.0 == fallback {
                        m.0 = kind;
                    }
                }
                return i;
            }
            holders.push(self.values.len());
        } else {
            self.holders
                .insert(value.to_owned(), vec![self.values.len()]);
        }
        self.meta.push((kind, form));
        self.values.push(value.to_owned());
        self.values.len() - 1
    }

    /// Kind and form of a text hit; `ctx` is the kind the surrounding key names.
    fn hit_meta(&self, h: &TextHit<'_>, text: &[u8], ctx: Option<KindId>) -> (KindId, Form) {
        let tax = self.tax;
        match h.pattern {
            Pattern::Uuid => {
                let whole = h.range.start == 0 && h.range.end == text.len();
                let k =
                    shape::kind_before(tax, text, h.range.start).or(if whole { ctx } else { None });
                (k.unwrap_or(tax.fallback_kind()), Form::Uuid)
            }
            Pattern::Reference(kinds) | Pattern::FhirId(kinds) => (
                choose(kinds, ctx, None).unwrap_or(tax.fallback_kind()),
                Form::Fhir,
            ),
            Pattern::AliasShaped(kind) => (kind, Form::Slug),
            Pattern::Cursor => (tax.fallback_kind(), Form::Slug),
            Pattern::Segment(kind) | Pattern::Query(kind) => {
                let form = text
                    .get(h.range.clone())
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .map_or(Form::Slug, shape::classify);
                (kind, form)
            }
        }
    }

    /// Learns the ids inside the percent- or entity-decoded form of `text`
    /// (`Patient%2Fpat-000123`, `pat&#45;000123`). They get no occurrence of
    /// their own: the known-id search replaces them in the raw bytes, in
    /// whichever encoding they stand there.
    /// Returns whether `text` holds an escape to decode.
    fn learn_decoded(&mut self, text: &[u8], ctx: Option<KindId>) -> bool {
        let Some(decoded) = super::known::decoded_view(text) else {
            return false;
        };
        let mut hits = Vec::new();
        shape::find_in_text(self.tax, decoded.as_bytes(), &mut hits);
        for h in &hits {
            let Some(value) = decoded.get(h.range.clone()) else {
                continue;
            };
            let (k, form) = self.hit_meta(h, decoded.as_bytes(), ctx);
            self.value(value, k, form);
        }
        true
    }

    fn build_ids(&mut self) {
        self.groups.sort_unstable();
        self.groups.dedup();
        let mut ids = Vec::new();
        let mut id_of_value = vec![usize::MAX; self.values.len()];
        for (g, group) in self.groups.iter().enumerate() {
            let g = u32::try_from(g).unwrap_or(u32::MAX);
            for (v, form) in group.members.iter().flatten() {
                let (Some(value), Some(slot)) = (self.values.get(*v), id_of_value.get_mut(*v))
                else {
                    continue;
                };
                if *slot == usize::MAX {
                    *slot = ids.len();
                }
                ids.push(IdInput {
                    value: value.clone(),
                    kind: Some(self.tax.kind_name(group.kind).to_owned()),
                    form: Some(*form),
                    group: Some(g),
                });
            }
        }
        for (v, value) in self.values.iter().enumerate() {
            let (Some(slot), Some((kind, form))) = (id_of_value.get_mut(v), self.meta.get(v))
            else {
                continue;
            };
            if *slot == usize::MAX {
                *slot = ids.len();
                ids.push(IdInput {
                    value: value.clone(),
                    kind: Some(self.tax.kind_name(*kind).to_owned()),
                    form: Some(*form),
                    group: None,
                });
            }
        }
        self.ids = ids;
        self.id_of_value = id_of_value;
    }
}

impl Part {
    /// Appends `other` (a part of the same body starting at `base`).
    fn append_shifted(&mut self, other: Part, base: usize) {
        let shift = |r: Range<usize>| r.start + base..r.end + base;
        self.occs
            .extend(other.occs.into_iter().map(|(r, v)| (shift(r), v)));
        self.lits.extend(other.lits.into_iter().map(|l| LitSpan {
            range: shift(l.range),
            clean: l.clean,
            protected: l.protected,
        }));
        self.numbers.extend(other.numbers.into_iter().map(shift));
        self.escaped.extend(other.escaped.into_iter().map(|mut e| {
            e.span = shift(e.span);
            e
        }));
    }

    fn empty(len: usize, kind: BodyKind) -> Part {
        Part {
            len,
            kind,
            occs: Vec::new(),
            lits: Vec::new(),
            numbers: Vec::new(),
            escaped: Vec::new(),
        }
    }
}

/// One line of an event stream ([`event_lines`]).
struct EventLine<'a> {
    /// Its offset in the body.
    base: usize,
    /// The line, its end of line excluded.
    text: &'a str,
    /// Where its payload starts, when it is a `data:` line whose payload is
    /// one JSON document.
    json: Option<usize>,
}

/// The lines of an event stream `doc` that starts `base` bytes into the
/// body (`\n`, `\r\n` or `\r` ends a line).
fn event_lines(doc: &str, base: usize) -> impl Iterator<Item = EventLine<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = doc.get(at..).filter(|r| !r.is_empty())?;
        let len = rest.find(['\n', '\r']).unwrap_or(rest.len());
        let text = rest.get(..len).unwrap_or_default();
        let mut next = at + len;
        if doc.get(next..).is_some_and(|r| r.starts_with("\r\n")) {
            next += 2;
        } else if next < doc.len() {
            next += 1;
        }
        let line = EventLine {
            base: base + at,
            text,
            json: data_json(text),
        };
        at = next;
        Some(line)
    })
}

/// Where the JSON payload of a `data:` line starts, if the payload is one
/// JSON object or array.
fn data_json(line: &str) -> Option<usize> {
    let payload = line.strip_prefix("data:")?;
    let lead = payload.len() - payload.trim_start().len();
    let at = line.len() - payload.len() + lead;
    let doc = line.get(at..)?;
    (matches!(doc.bytes().next(), Some(b'{' | b'[')) && format::parses(doc)).then_some(at)
}

/// The length of a leading UTF-8 byte order mark (0 or 3) and the text
/// after it.
pub(crate) fn split_bom(src: &str) -> (usize, &str) {
    match src.strip_prefix('\u{feff}') {
        Some(rest) => (src.len() - rest.len(), rest),
        None => (0, src),
    }
}

/// A JSON error at an offset of a document that starts `by` bytes into the
/// body.
fn shift_json_error(e: RewriteError, by: usize) -> RewriteError {
    match e {
        RewriteError::Json(JsonError::Unexpected { at }) => {
            RewriteError::Json(JsonError::Unexpected { at: at + by })
        }
        RewriteError::Json(JsonError::Eof { at }) => {
            RewriteError::Json(JsonError::Eof { at: at + by })
        }
        other => other,
    }
}

/// The order of a part's occurrences: by start, the longest first.
fn occ_order(r: &Range<usize>) -> (usize, usize) {
    (r.start, usize::MAX - r.end)
}

/// Picks a kind: the context kind if the candidates allow it, else the first
/// candidate; with no candidates, the context, then `or`.
fn choose(candidates: &[KindId], ctx: Option<KindId>, or: Option<KindId>) -> Option<KindId> {
    if candidates.is_empty() {
        return ctx.or(or);
    }
    ctx.filter(|c| candidates.contains(c))
        .or(or.filter(|c| candidates.contains(c)))
        .or(candidates.first().copied())
}

/// Whether `alias` is of a kind readable in text.
fn readable_alias(tax: &Taxonomy, alias: &str) -> bool {
    tax.parse_alias(alias)
        .is_some_and(|p| tax.readable_in_text(p.kind))
}

/// The local id of a reference to a contained resource (`#p1` → `p1`).
fn contained_ref(text: &str) -> Option<&str> {
    text.strip_prefix('#').filter(|id| shape::is_fhir_id(id))
}

/// Whether `r` overlaps any range of `sorted` (sorted by start, non-overlapping).
fn overlaps(sorted: &[(Range<usize>, usize)], r: &Range<usize>) -> bool {
    let i = sorted.partition_point(|(o, _)| o.end <= r.start);
    sorted.get(i).is_some_and(|(o, _)| o.start < r.end)
}

/// Fx hashing: fast on short keys, no random seed. The HMS is the trusted
/// upstream, so hash flooding is not a concern here.
type FixedState = rustc_hash::FxBuildHasher;

/// Applies one encode answer to the parts of a scan ([`ResponseScan::rewriter`]).
pub struct Rewriter<'r, 't> {
    scan: &'r ResponseScan<'t>,
    /// Alias per value (scan values, then the session's earlier ids).
    alias_of: Vec<&'r str>,
    /// Every alias of this answer: what verification lets through.
    allowed: std::collections::HashSet<&'r [u8], FixedState>,
    known: KnownIds<'r>,
    /// No alias holds a `"` or `\`: splicing them into a JSON string
    /// keeps the document's structure (see [`Rewriter::verify`]).
    plain_aliases: bool,
}

impl<'t> Rewriter<'_, 't> {
    /// Rewrites a scanned part and verifies the result.
    ///
    /// Fails when `body` is not the scanned part, or verification finds a raw
    /// id left ([`RewriteError::Leak`]).
    pub fn rewrite(&self, part: PartId, body: &[u8]) -> Result<Vec<u8>, RewriteError> {
        let p = self.scan.parts.get(part.0).ok_or(RewriteError::WrongBody {
            part: part.0,
            scanned: 0,
            got: body.len(),
        })?;
        if p.len != body.len() {
            return Err(RewriteError::WrongBody {
                part: part.0,
                scanned: p.len,
                got: body.len(),
            });
        }
        // A known id (of this body or an earlier one) cut by an invisible
        // or look-alike character: replacing the part that matches would
        // alias a prefix.
        if let Some(at) = broken::broken_id(None, Some(&self.known), body) {
            return Err(RewriteError::BrokenId { at });
        }
        if self.alias_of.is_empty() {
            self.verify(body, p, &[])?;
            return Ok(body.to_vec());
        }
        let alias = |v: usize| self.alias_of.get(v).copied().unwrap_or("");
        // Ids that stood as numbers are written back as JSON strings.
        let quoted = |v: usize| Cow::Owned(format!("\"{}\"", alias(v)));
        let is_number = |r: &Range<usize>| {
            p.numbers
                .binary_search_by(|n| n.start.cmp(&r.start))
                .is_ok_and(|i| p.numbers.get(i) == Some(r))
        };
        let mut edits: Vec<(Range<usize>, Cow<'_, str>)> = Vec::with_capacity(p.occs.len());
        for (r, v) in &p.occs {
            let with = if is_number(r) {
                quoted(*v)
            } else {
                Cow::Borrowed(alias(*v))
            };
            edits.push((r.clone(), with));
        }
        // Known ids anywhere: inside unescaped strings that are not
        // clinical content, or a whole number.
        let in_lit = |r: &Range<usize>| {
            !p.kind.is_json() || {
                let l = p.lits.partition_point(|l| l.range.end < r.end);
                p.lits.get(l).is_some_and(|l| {
                    l.range.start <= r.start && r.end <= l.range.end && !l.protected
                })
            }
        };
        self.known.for_each_outside(body, &p.occs, |r, v| {
            if overlaps(&p.occs, &r) {
                return;
            }
            if in_lit(&r) {
                edits.push((r, Cow::Borrowed(alias(v))));
            } else if is_number(&r) {
                edits.push((r, quoted(v)));
            }
        });
        // Known ids written with escapes (`&#x70;at-000123`,
        // `%70at-000123`): found decoded, replaced with their escapes.
        if let Some(view) = super::known::MappedView::new(body) {
            edits.sort_by_key(|(r, _)| r.start);
            let plain = edits.len();
            let mut extra = Vec::new();
            let reach = self.known.max_len() + 1;
            for w in view.windows(reach) {
                let Some(win) = view.text.get(w.clone()) else {
                    continue;
                };
                let cut_start = w.start != 0;
                let cut_end = w.end != view.text.len();
                self.known.for_each(win, |r, v| {
                    let r = r.start + w.start..r.end + w.start;
                    // A match at a cut edge had no context to check; one
                    // without an escape was found in the raw bytes already.
                    if (cut_start && r.start == w.start)
                        || (cut_end && r.end == w.end)
                        || !view.touches_escape(&r)
                    {
                        return;
                    }
                    let raw = view.raw_range(r);
                    let taken = {
                        let i = edits
                            .get(..plain)
                            .unwrap_or_default()
                            .partition_point(|(o, _)| o.end <= raw.start);
                        edits
                            .get(i)
                            .is_some_and(|(o, _)| i < plain && o.start < raw.end)
                    };
                    if !taken && in_lit(&raw) {
                        extra.push((raw, Cow::Borrowed(alias(v))));
                    }
                });
            }
            edits.extend(extra);
        }
        // Escaped literals: rewrite the decoded text, re-encode the literal.
        for e in p.escaped.iter().filter(|e| !e.protected) {
            let mut inner: Vec<(Range<usize>, usize)> = e.occs.clone();
            inner.sort_by_key(|(r, _)| r.start);
            let mut extra = Vec::new();
            self.known.for_each(e.text.as_bytes(), |r, v| {
                if !overlaps(&inner, &r) {
                    extra.push((r, v));
                }
            });
            inner.extend(extra);
            if inner.is_empty() {
                continue;
            }
            let text = splice(
                e.text.as_bytes(),
                inner
                    .into_iter()
                    .map(|(r, v)| (r, Cow::Borrowed(alias(v))))
                    .collect(),
            );
            let text =
                String::from_utf8(text).map_err(|_| RewriteError::Leak { at: e.span.start })?;
            let literal = serde_json::to_string(&text)
                .map_err(|_| RewriteError::Leak { at: e.span.start })?;
            edits.push((e.span.clone(), Cow::Owned(literal)));
        }
        let (out, applied) = splice_mapped(body, edits);
        self.verify(&out, p, &applied)?;
        Ok(out)
    }

    /// Verifies the output of `p` (`applied`: its edits, see
    /// [`splice_mapped`]). A JSON part keeps the structure the scan lexed
    /// (every edit lies inside a string, or replaces a number or a whole
    /// escaped string with a string), so only the strings an edit touched,
    /// the escaped ones and those the scan did not prove clean are looked
    /// at again; anything else is re-read whole ([`Self::verify_whole`]).
    /// The known-id search always covers every byte.
    fn verify(&self, out: &[u8], p: &Part, applied: &[Edit]) -> Result<(), RewriteError> {
        if !p.kind.is_json() || !self.plain_aliases {
            return self.verify_whole(out, p.kind);
        }
        let allowed = |v: &[u8]| self.allowed.contains(v);
        if let Some(r) = self.known.first_except(out, allowed) {
            return Err(RewriteError::Leak { at: r.start });
        }
        let mut hits = Vec::new();
        // The check reads nothing but the text: a text that passed once
        // passes again, and a string that is one of this answer's aliases,
        // whole, is what the rewrite meant to write there.
        let mut passed: std::collections::HashSet<&[u8], FixedState> =
            std::collections::HashSet::with_capacity_and_hasher(
                p.occs.len().min(p.lits.len()),
                FixedState::default(),
            );
        let kept = visit_touched(p, applied, |t| match t {
            Touched::Plain(r) => {
                let text = out.get(r.clone()).unwrap_or_default();
                if !allowed(text) && passed.insert(text) {
                    self.check_text(text, r.start, &mut hits)?;
                }
                Ok(())
            }
            Touched::Escaped(span) => {
                // Only this literal is read as text: the rest of the
                // output is the scanned body's UTF-8 with aliases spliced
                // in at character boundaries.
                let lit = out
                    .get(span.clone())
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .ok_or(JsonError::NotUtf8)?;
                self.check_escaped(lit, 0..lit.len(), span.start, &mut hits)
            }
        })?;
        match kept {
            Structure::Kept => Ok(()),
            // What was checked so far passed; the rest is read whole.
            Structure::Changed => self.verify_whole(out, p.kind),
        }
    }

    /// Scans `out` again: no known id may remain anywhere in its bytes (nor in
    /// the decoded form of an escaped string, a percent-encoded or
    /// entity-encoded text), and every id the text patterns find in a string
    /// must be one of the aliases.
    fn verify_whole(&self, out: &[u8], kind: BodyKind) -> Result<(), RewriteError> {
        // A raw value may be spelled like an alias this answer issued
        // (`patient-001` from HMS): where it stands as that alias, it is one.
        let allowed = |v: &[u8]| self.allowed.contains(v);
        if let Some(r) = self.known.first_except(out, allowed) {
            return Err(RewriteError::Leak { at: r.start });
        }
        let mut hits = Vec::new();
        let json =
            |src: &str, base: usize, hits: &mut Vec<TextHit<'t>>| -> Result<(), RewriteError> {
                let mut lx = Lexer::new(src);
                while let Some(ev) = lx.next_event()? {
                    let (Event::Key(lit) | Event::Str(lit)) = ev else {
                        continue;
                    };
                    if lit.escaped {
                        self.check_escaped(src, lit.span, base, hits)?;
                    } else {
                        let inner = lit.inner();
                        self.check_text(
                            src.as_bytes().get(inner.clone()).unwrap_or_default(),
                            base + inner.start,
                            hits,
                        )?;
                    }
                }
                Ok(())
            };
        match kind {
            BodyKind::Json => {
                let src = std::str::from_utf8(out).map_err(|_| JsonError::NotUtf8)?;
                let span = format::json_span(src);
                json(
                    src.get(span.clone()).unwrap_or_default(),
                    span.start,
                    &mut hits,
                )?;
            }
            BodyKind::EventStream => {
                let src = std::str::from_utf8(out).map_err(|_| JsonError::NotUtf8)?;
                let (bom, doc) = split_bom(src);
                for line in event_lines(doc, bom) {
                    match line.json {
                        Some(at) => json(
                            line.text.get(at..).unwrap_or_default(),
                            line.base + at,
                            &mut hits,
                        )?,
                        None => self.check_text(line.text.as_bytes(), line.base, &mut hits)?,
                    }
                }
            }
            BodyKind::NdJson => {
                let src = std::str::from_utf8(out).map_err(|_| JsonError::NotUtf8)?;
                let (bom, doc) = split_bom(src);
                let mut at = bom;
                for line in doc.split_inclusive('\n') {
                    if !line.trim().is_empty() {
                        json(line, at, &mut hits)?;
                    }
                    at += line.len();
                }
            }
            BodyKind::Text
            | BodyKind::Csv
            | BodyKind::Xml
            | BodyKind::Html
            | BodyKind::Form
            | BodyKind::Yaml => self.check_text(out, 0, &mut hits)?,
        }
        Ok(())
    }

    /// Every id the text patterns find in `text` (at offset `at` of the
    /// output) must be an alias, and so must every known id and pattern hit
    /// in its decoded form.
    fn check_text(
        &self,
        text: &[u8],
        at: usize,
        hits: &mut Vec<TextHit<'t>>,
    ) -> Result<(), RewriteError> {
        let allowed = |v: &[u8]| self.allowed.contains(v);
        let tax = self.scan.tax;
        shape::find_in_text(tax, text, hits);
        if let Some(h) = hits
            .iter()
            .find(|h| !text.get(h.range.clone()).is_some_and(allowed))
        {
            return Err(RewriteError::Leak {
                at: at + h.range.start,
            });
        }
        if let Some(decoded) = super::known::decoded_view(text) {
            if self
                .known
                .first_except(decoded.as_bytes(), allowed)
                .is_some()
            {
                return Err(RewriteError::Leak { at });
            }
            shape::find_in_text(tax, decoded.as_bytes(), hits);
            if hits
                .iter()
                .any(|h| !decoded.as_bytes().get(h.range.clone()).is_some_and(allowed))
            {
                return Err(RewriteError::Leak { at });
            }
        }
        Ok(())
    }

    /// [`Self::check_text`] over the decoded text of the escaped string
    /// literal at `span` of `src`, and no known id in it.
    fn check_escaped(
        &self,
        src: &str,
        span: Range<usize>,
        base: usize,
        hits: &mut Vec<TextHit<'t>>,
    ) -> Result<(), RewriteError> {
        let at = base + span.start;
        let lit = crate::json::lexer::Lit {
            span,
            escaped: true,
        };
        let text = text_of(src, &lit)?;
        self.check_text(text.as_bytes(), at, hits)?;
        let allowed = |v: &[u8]| self.allowed.contains(v);
        if self.known.first_except(text.as_bytes(), allowed).is_some() {
            return Err(RewriteError::Leak { at });
        }
        Ok(())
    }
}

/// An applied edit: its range in the body and the range of its replacement
/// in the output.
type Edit = (Range<usize>, Range<usize>);

/// A string of a rewritten JSON part that verification must read again, by
/// its range in the output.
enum Touched {
    /// An unescaped string's content.
    Plain(Range<usize>),
    /// An escaped string literal, quotes included.
    Escaped(Range<usize>),
}

impl Touched {
    /// The same string at its place in the output (`None`: inside an edit).
    fn shifted(self, shift: &mut Shift<'_>) -> Option<Touched> {
        Some(match self {
            Touched::Plain(r) => Touched::Plain(shift.at(r.start)?..shift.at(r.end)?),
            Touched::Escaped(r) => Touched::Escaped(shift.at(r.start)?..shift.at(r.end)?),
        })
    }
}

/// Whether the edits of a JSON part kept the structure the scan lexed.
enum Structure {
    Kept,
    Changed,
}

/// Hands `check` the strings of the output of JSON part `p` that
/// verification must read, in order: those an edit touched or wrote, the
/// escaped ones, and those the scan did not prove clean. Stops at
/// [`Structure::Changed`] when an edit does not keep the part's structure
/// (then the output must be re-read whole), or at the first error of
/// `check`. Nothing is collected: a 1 MB body touches tens of thousands of
/// strings.
fn visit_touched(
    p: &Part,
    applied: &[Edit],
    mut check: impl FnMut(Touched) -> Result<(), RewriteError>,
) -> Result<Structure, RewriteError> {
    let mut touched = vec![false; p.lits.len()];
    for (r, o) in applied {
        if r.is_empty() {
            return Ok(Structure::Changed);
        }
        let number = p
            .numbers
            .binary_search_by(|n| n.start.cmp(&r.start))
            .is_ok_and(|i| p.numbers.get(i) == Some(r));
        if number {
            // Written back as a string: `"<alias>"`.
            if o.len() < 2 {
                return Ok(Structure::Changed);
            }
            check(Touched::Plain(o.start + 1..o.end - 1))?;
            continue;
        }
        let e = p.escaped.partition_point(|e| e.span.start < r.start);
        if p.escaped.get(e).is_some_and(|e| e.span == *r) {
            // Re-encoded whole; read below with every escaped string.
            continue;
        }
        let l = p.lits.partition_point(|l| l.range.end < r.end);
        match (p.lits.get(l), touched.get_mut(l)) {
            (Some(lit), Some(t)) if lit.range.start <= r.start => *t = true,
            _ => return Ok(Structure::Changed),
        }
    }
    let mut shift = Shift {
        applied,
        next: 0,
        delta: 0,
    };
    let mut lits = p.lits.iter().zip(touched).peekable();
    let mut escaped = p.escaped.iter().peekable();
    loop {
        let plain_first = match (lits.peek(), escaped.peek()) {
            (None, None) => break,
            (Some((l, _)), Some(e)) => l.range.start < e.span.start,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let in_body = if plain_first {
            let Some((l, touched)) = lits.next() else {
                break;
            };
            if !touched && l.clean {
                continue;
            }
            Touched::Plain(l.range.clone())
        } else {
            let Some(e) = escaped.next() else {
                break;
            };
            Touched::Escaped(e.span.clone())
        };
        let Some(in_output) = in_body.shifted(&mut shift) else {
            return Ok(Structure::Changed);
        };
        check(in_output)?;
    }
    Ok(Structure::Kept)
}

/// Maps body offsets to output offsets, for offsets asked in order and never
/// inside an edit: an offset moves by the edits that end at or before it.
struct Shift<'e> {
    applied: &'e [Edit],
    next: usize,
    delta: isize,
}

impl Shift<'_> {
    fn at(&mut self, x: usize) -> Option<usize> {
        while let Some((r, o)) = self.applied.get(self.next).filter(|(r, _)| r.end <= x) {
            let grew = isize::try_from(o.len()).ok()? - isize::try_from(r.len()).ok()?;
            self.delta += grew;
            self.next += 1;
        }
        x.checked_add_signed(self.delta)
    }
}

/// Replaces sorted, non-overlapping ranges of `src`.
pub(crate) fn splice(src: &[u8], edits: Vec<(Range<usize>, Cow<'_, str>)>) -> Vec<u8> {
    splice_mapped(src, edits).0
}

/// [`splice`], also returning the edits applied (an edit overlapping an
/// earlier one is dropped), each with the range its replacement took in the
/// output, in order.
fn splice_mapped(src: &[u8], mut edits: Vec<(Range<usize>, Cow<'_, str>)>) -> (Vec<u8>, Vec<Edit>) {
    // Stable: of two edits at one start, the first given wins. Edits mostly
    // come in order (a scan's occurrences are), and the sort's scratch
    // buffer is as large as the edits.
    if !edits.is_sorted_by_key(|(r, _)| r.start) {
        edits.sort_by_key(|(r, _)| r.start);
    }
    let mut out = Vec::with_capacity(src.len() + edits.len() * 8);
    let mut applied = Vec::with_capacity(edits.len());
    let mut at = 0;
    for (r, with) in edits {
        if r.start < at {
            continue;
        }
        out.extend_from_slice(src.get(at..r.start).unwrap_or_default());
        let from = out.len();
        out.extend_from_slice(with.as_bytes());
        applied.push((r.clone(), from..out.len()));
        at = r.end;
    }
    out.extend_from_slice(src.get(at..).unwrap_or_default());
    (out, applied)
}

/// A member of an object waiting for the object's kind.
#[derive(Debug)]
struct Member<'a> {
    role: Option<KeyRole>,
    /// For id fields: the field's kind. For references: none (see `kinds`).
    field_kind: Option<KindId>,
    /// Resource-type kinds of a self-reference.
    kinds: Vec<KindId>,
    value: Cow<'a, str>,
    loc: Loc,
    /// An `id` that is an id only if its object is a FHIR resource (a
    /// word, or an element id inside a resource).
    weak: bool,
}

#[derive(Debug, Default)]
struct Obj<'a> {
    /// The key the object sits under.
    key: Option<KeyInfo>,
    primary: bool,
    resource_type: Option<Cow<'a, str>>,
    /// The key of the member being read.
    cur_key: Option<KeyInfo>,
    /// Where the object's own ids start in [`Walker::members`].
    members_from: usize,
    /// How many occurrences the part had when the object began (see
    /// [`Walker::insert_occ`]).
    occs_from: usize,
    /// The kind its `system` member names as a business identifier system.
    identifier_kind: Option<KindId>,
    /// Its `value` member, a string: with a business identifier system,
    /// an id of that kind.
    identifier_value: Option<(Cow<'a, str>, Loc)>,
}

#[derive(Debug)]
enum Frame<'a> {
    Obj(Obj<'a>),
    Arr {
        /// The key the array sits under.
        key: Option<KeyInfo>,
        primary: bool,
    },
}

/// One pass over a JSON body.
struct Walker<'s, 't, 'a> {
    scan: &'s mut ResponseScan<'t>,
    src: &'a str,
    root_kind: Option<KindId>,
    frames: Vec<Frame<'a>>,
    hits: Vec<TextHit<'t>>,
    /// The own ids of the open objects, innermost last (see
    /// [`Obj::members_from`]): one vector for the whole walk.
    members: Vec<Member<'a>>,
    part: Part,
    /// What each unescaped key of this document means: keys repeat in
    /// every element of a list, the answer does not.
    keys: HashMap<&'a str, KeyInfo, FixedState>,
}

/// What a key means for scanning, and what its text holds: worked out once
/// per distinct key and carried by the frames, so a value or a container
/// under the key asks nothing of the taxonomy again.
#[derive(Debug, Clone, Copy)]
struct KeyInfo {
    /// [`Taxonomy::key_role`].
    role: Option<KeyRole>,
    /// [`Taxonomy::id_named_kind`].
    field_kind: Option<KindId>,
    /// [`Taxonomy::object_key_kind`]: the kind of an object under the key.
    object_kind: Option<KindId>,
    /// [`Taxonomy::is_envelope_key`]: at the root, the key holds the
    /// primary record(s).
    envelope: bool,
    /// The key is `resourceType`.
    resource_type: bool,
    /// The key's own text holds no id and no escape.
    clean: bool,
    /// Its values are clinical content ([`super::fhir::is_clinical_value_key`]).
    clinical: bool,
    /// It names no record when inside a FHIR resource
    /// ([`super::fhir::is_non_record_id_key`]).
    non_record_in_resource: bool,
    /// It is a FHIR `Identifier`'s `system` or `value`.
    identifier: Option<IdentifierPart>,
}

/// The members of a FHIR `Identifier` that make a business identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdentifierPart {
    System,
    Value,
}

impl<'t, 'a> Walker<'_, 't, 'a> {
    fn run(&mut self) -> Result<(), JsonError> {
        let mut lx = Lexer::new(self.src);
        while let Some(ev) = lx.next_event()? {
            match ev {
                Event::StartObject => {
                    let (key, primary) = self.child_context();
                    self.frames.push(Frame::Obj(Obj {
                        key,
                        primary,
                        members_from: self.members.len(),
                        occs_from: self.part.occs.len(),
                        ..Obj::default()
                    }));
                }
                Event::StartArray => {
                    let (key, primary) = self.child_context();
                    self.frames.push(Frame::Arr { key, primary });
                }
                Event::EndObject => {
                    if let Some(Frame::Obj(obj)) = self.frames.pop() {
                        self.finish_object(obj);
                    }
                }
                Event::EndArray => {
                    self.frames.pop();
                }
                Event::Key(lit) => {
                    let (text, loc) = self.literal(&lit)?;
                    let known = match &text {
                        Cow::Borrowed(k) => self.keys.get(k).copied(),
                        Cow::Owned(_) => None,
                    };
                    let info = match known {
                        // Scanned before: no hit then, none now.
                        Some(info) if info.clean => {
                            if let Some(l) = self.part.lits.last_mut() {
                                l.clean = true;
                            }
                            info
                        }
                        _ => {
                            self.scan_text(&text, &loc, None);
                            let clean = self.part.lits.last().is_some_and(|l| l.clean);
                            let info = known.unwrap_or_else(|| self.key_info(&text, clean));
                            if let (Cow::Borrowed(k), None) = (&text, known) {
                                self.keys.insert(k, info);
                            }
                            info
                        }
                    };
                    if let Some(Frame::Obj(o)) = self.frames.last_mut() {
                        o.cur_key = Some(info);
                    }
                }
                Event::Str(lit) => {
                    let (text, loc) = self.literal(&lit)?;
                    self.string_value(text, loc);
                }
                Event::Scalar => {
                    let span = lx.scalar_span();
                    self.scalar_value(span);
                }
            }
        }
        Ok(())
    }

    /// The key a new container sits under and whether it holds the primary
    /// record(s): the root, or the value of an envelope key of the root.
    fn child_context(&self) -> (Option<KeyInfo>, bool) {
        match self.frames.last() {
            None => (None, true),
            Some(Frame::Obj(o)) => {
                let primary = self.frames.len() == 1 && o.cur_key.is_some_and(|k| k.envelope);
                (o.cur_key, primary)
            }
            Some(Frame::Arr { key, primary }) => (*key, *primary),
        }
    }

    /// The key a value sits under (its array's key inside an array) and
    /// whether it is an object's member.
    fn value_context(&self) -> (Option<KeyInfo>, bool) {
        let (key, member) = match self.frames.last() {
            Some(Frame::Obj(o)) => (o.cur_key, true),
            Some(Frame::Arr { key, .. }) => (*key, false),
            None => (None, false),
        };
        // A FHIR `…Id` element that names no record: no id position there.
        let key = key.map(|mut k| {
            if k.non_record_in_resource && self.in_resource() {
                k.role = None;
                k.field_kind = None;
            }
            k
        });
        (key, member)
    }

    /// Whether an open object is a FHIR resource (has a `resourceType`).
    fn in_resource(&self) -> bool {
        self.frames
            .iter()
            .any(|f| matches!(f, Frame::Obj(o) if o.resource_type.is_some()))
    }

    /// Marks the literal just registered at `loc` as clinical content.
    fn protect(&mut self, loc: &Loc) {
        match loc {
            Loc::Raw(r) => {
                if let Some(l) = self.part.lits.last_mut().filter(|l| l.range == *r) {
                    l.protected = true;
                }
            }
            Loc::Esc { lit, .. } => {
                if let Some(e) = self.part.escaped.get_mut(*lit) {
                    e.protected = true;
                }
            }
        }
    }

    fn key_info(&self, key: &str, clean: bool) -> KeyInfo {
        let tax = self.scan.tax;
        let meaning = tax.key_meaning(key);
        // `linkId` and its kin label items; they name no record anywhere.
        let link = super::fhir::is_link_id_key(key);
        KeyInfo {
            role: meaning.role.filter(|_| !link),
            field_kind: meaning.id_kind.filter(|_| !link),
            object_kind: meaning.object_kind,
            envelope: tax.is_envelope_key(key),
            resource_type: key == "resourceType",
            clean,
            clinical: super::fhir::is_clinical_value_key(key),
            non_record_in_resource: super::fhir::is_non_record_id_key(key, true),
            identifier: match key {
                "system" => Some(IdentifierPart::System),
                "value" => Some(IdentifierPart::Value),
                _ => None,
            },
        }
    }

    /// Registers a literal and returns its text and location.
    // Inlined: its result, returned through memory, was read back wider
    // than it was written, and the load waited for the stores.
    #[inline(always)]
    fn literal(&mut self, lit: &Lit) -> Result<(Cow<'a, str>, Loc), JsonError> {
        let text = text_of(self.src, lit)?;
        if lit.escaped {
            self.part.escaped.push(EscLit {
                span: lit.span.clone(),
                text: text.clone().into_owned(),
                occs: Vec::new(),
                protected: false,
            });
            let idx = self.part.escaped.len() - 1;
            Ok((
                text,
                Loc::Esc {
                    lit: idx,
                    range: 0..0,
                },
            ))
        } else {
            let inner = lit.inner();
            self.part.lits.push(LitSpan {
                range: inner.clone(),
                clean: false,
                protected: false,
            });
            Ok((text, Loc::Raw(inner)))
        }
    }

    /// Inserts an occurrence found late (an object's own id, known when the
    /// object ends) among those since the object began (`from`), where its
    /// range puts it: the part's occurrences stay in order, and the sort
    /// after the walk finds nothing to do.
    fn insert_occ(&mut self, from: usize, range: Range<usize>, value: usize) {
        let occs = &mut self.part.occs;
        let from = from.min(occs.len());
        let key = occ_order(&range);
        let at = from
            + occs
                .get(from..)
                .map_or(0, |tail| tail.partition_point(|(r, _)| occ_order(r) <= key));
        occs.insert(at, (range, value));
    }

    fn push_occ(&mut self, loc: &Loc, sub: Range<usize>, value: usize) {
        match loc {
            Loc::Raw(r) => self
                .part
                .occs
                .push((r.start + sub.start..r.start + sub.end, value)),
            Loc::Esc { lit, .. } => {
                if let Some(e) = self.part.escaped.get_mut(*lit) {
                    e.occs.push((sub, value));
                }
            }
        }
    }

    fn sub_loc(loc: &Loc, sub: Range<usize>) -> Loc {
        match loc {
            Loc::Raw(r) => Loc::Raw(r.start + sub.start..r.start + sub.end),
            Loc::Esc { lit, .. } => Loc::Esc {
                lit: *lit,
                range: sub,
            },
        }
    }

    /// Pattern-scans a string; each hit is an entity alone.
    fn scan_text(&mut self, text: &str, loc: &Loc, ctx: Option<KindId>) {
        let mut hits = std::mem::take(&mut self.hits);
        shape::find_in_text(self.scan.tax, text.as_bytes(), &mut hits);
        for h in &hits {
            let Some(value) = text.get(h.range.clone()) else {
                continue;
            };
            let (kind, form) = self.scan.hit_meta(h, text.as_bytes(), ctx);
            let v = self.scan.value(value, kind, form);
            self.push_occ(loc, h.range.clone(), v);
        }
        let clean = hits.is_empty();
        self.hits = hits;
        let decoded = self.scan.learn_decoded(text.as_bytes(), ctx);
        if clean && !decoded {
            // The literal just registered (`literal` runs right before).
            if let (Loc::Raw(r), Some(l)) = (loc, self.part.lits.last_mut()) {
                if l.range == *r {
                    l.clean = true;
                }
            }
        }
    }

    fn string_value(&mut self, text: Cow<'a, str>, loc: Loc) {
        let tax = self.scan.tax;
        let max = tax.max_id_len();
        let (key, in_object) = self.value_context();
        let Some(key) = key else {
            self.scan_text(&text, &loc, None);
            return;
        };
        if let (Some(part), true) = (key.identifier, in_object) {
            let kind = match part {
                IdentifierPart::System => tax.identifier_system_kind(&text),
                IdentifierPart::Value => None,
            };
            if let Some(Frame::Obj(o)) = self.frames.last_mut() {
                match part {
                    IdentifierPart::System => o.identifier_kind = kind,
                    IdentifierPart::Value => o.identifier_value = Some((text.clone(), loc.clone())),
                }
            }
        }
        if key.clinical {
            // A code, system, display or name: an id shape in it (a UUID, a
            // reference of a configured type) is an id, but an id learned
            // elsewhere is never replaced in it (`hl7` of `Organization/hl7`
            // in `http://terminology.hl7.org/…`). Verification reads it: a
            // learned id left there withholds the body.
            self.protect(&loc);
            self.scan_text(&text, &loc, None);
            return;
        }
        // A scalar under a key that names a record (`"patient": "482913"`)
        // is that record's id; a string needs a digit (`"encounter":
        // "ambulatory-visit"` is a word).
        let (role, field_kind) = (
            key.role,
            key.field_kind.or(key
                .object_kind
                .filter(|_| text.bytes().any(|b| b.is_ascii_digit()))),
        );
        if in_object {
            if key.resource_type {
                if let Some(Frame::Obj(o)) = self.frames.last_mut() {
                    o.resource_type = Some(text);
                }
                return;
            }
            if role == Some(KeyRole::Reference) {
                if let Some(local) = contained_ref(&text) {
                    // `#p1`: a contained resource of this one, whose `id`
                    // is aliased where it stands; the two are rewritten
                    // together, as one value.
                    let v = self.scan.value(local, tax.fallback_kind(), Form::Fhir);
                    self.push_occ(&loc, 1..text.len(), v);
                    return;
                }
            }
            let member = match role {
                Some(KeyRole::Reference) => {
                    shape::parse_reference(tax, &text).map(|(kinds, id)| {
                        let start = text.len() - id.len();
                        let sub = start..text.len();
                        let value = match &text {
                            Cow::Borrowed(s) => Cow::Borrowed(s.get(start..).unwrap_or_default()),
                            Cow::Owned(s) => {
                                Cow::Owned(s.get(start..).unwrap_or_default().to_owned())
                            }
                        };
                        Member {
                            role: Some(KeyRole::Reference),
                            field_kind: None,
                            kinds: kinds.to_vec(),
                            value,
                            loc: Self::sub_loc(&loc, sub),
                            weak: false,
                        }
                    })
                }
                Some(role) if shape::is_identifier(&text, max) => {
                    let sub = 0..text.len();
                    Some(Member {
                        role: Some(role),
                        field_kind: None,
                        kinds: Vec::new(),
                        value: text.clone(),
                        loc: Self::sub_loc(&loc, sub),
                        weak: false,
                    })
                }
                // A FHIR resource's id may be a word (`example`,
                // `referral`): an id when the object turns out to be a
                // resource, text otherwise.
                Some(KeyRole::Id) if shape::is_fhir_id(&text) => Some(Member {
                    role: Some(KeyRole::Id),
                    field_kind: None,
                    kinds: Vec::new(),
                    value: text.clone(),
                    loc: Self::sub_loc(&loc, 0..text.len()),
                    weak: true,
                }),
                Some(_) => None,
                None => field_kind
                    .filter(|_| shape::is_identifier(&text, max))
                    .map(|k| {
                        let sub = 0..text.len();
                        Member {
                            role: None,
                            field_kind: Some(k),
                            kinds: Vec::new(),
                            value: text.clone(),
                            loc: Self::sub_loc(&loc, sub),
                            weak: false,
                        }
                    }),
            };
            if let Some(m) = member {
                self.members.push(m);
                return;
            }
        } else if let Some(k) = field_kind.filter(|_| shape::is_identifier(&text, max)) {
            let v = self.scan.value(&text, k, shape::classify(&text));
            self.push_occ(&loc, 0..text.len(), v);
            return;
        }
        // An opaque cursor that carries an id, whole or in a link, is an id
        // itself (`shape::Pattern::Cursor`): the model gets an alias, and the
        // request side decodes it back.
        self.scan_text(&text, &loc, field_kind);
    }

    /// A number: an id when it is an integer under an id-named key.
    fn scalar_value(&mut self, span: Range<usize>) {
        let Some(text) = self.src.get(span.clone()) else {
            return;
        };
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return;
        }
        let tax = self.scan.tax;
        let (key, in_object) = self.value_context();
        let Some(key) = key else {
            return;
        };
        // A number under a key that names a record is that record's id.
        let (role, field_kind) = (key.role, key.field_kind.or(key.object_kind));
        let role = if in_object { role } else { None };
        if role.is_none() && field_kind.is_none() {
            return;
        }
        self.part.numbers.push(span.clone());
        let value = Cow::Borrowed(text);
        match role {
            Some(role @ (KeyRole::Id | KeyRole::Fhir | KeyRole::Slug)) => {
                self.members.push(Member {
                    role: Some(role),
                    field_kind: None,
                    kinds: Vec::new(),
                    value,
                    loc: Loc::Raw(span),
                    weak: false,
                });
            }
            _ => {
                let k = field_kind.unwrap_or(tax.fallback_kind());
                if in_object {
                    self.members.push(Member {
                        role: None,
                        field_kind: Some(k),
                        kinds: Vec::new(),
                        value,
                        loc: Loc::Raw(span),
                        weak: false,
                    });
                } else {
                    let v = self.scan.value(text, k, Form::Slug);
                    self.part.occs.push((span, v));
                }
            }
        }
    }

    /// Resolves an object's kind and groups its own ids into one entity.
    fn finish_object(&mut self, obj: Obj<'a>) {
        if let (Some(kind), Some((value, loc))) = (obj.identifier_kind, &obj.identifier_value) {
            self.identifier(&obj, kind, value, loc);
        }
        if self.members.len() == obj.members_from {
            // No own ids: nothing to resolve or group.
            return;
        }
        let mut all = std::mem::take(&mut self.members);
        let mut own = all.split_off(obj.members_from.min(all.len()));
        // The `id` of an element inside a FHIR resource (`result[0].id`,
        // an extension's or an item's id) names no record; nor does a
        // word under `id` outside a resource. Such a text is read for id
        // shapes like any other.
        // An embedded record (under a kind's key, or with a FHIR id or a
        // slug of its own beside its `id`) keeps its `id`.
        let element = obj.resource_type.is_none()
            && obj.key.is_none_or(|k| k.object_kind.is_none())
            && !own
                .iter()
                .any(|m| matches!(m.role, Some(KeyRole::Fhir | KeyRole::Slug)))
            && self.in_resource();
        let resource = obj.resource_type.is_some();
        let mut texts = Vec::new();
        own.retain(|m| {
            let keep = if m.role == Some(KeyRole::Id) && element {
                false
            } else {
                !m.weak || resource
            };
            if !keep {
                texts.push((m.value.clone(), m.loc.clone()));
            }
            keep
        });
        for (text, loc) in texts {
            let loc = match loc {
                Loc::Raw(r) => Loc::Raw(r),
                Loc::Esc { lit, .. } => Loc::Esc { lit, range: 0..0 },
            };
            self.scan_text(&text, &loc, None);
        }
        self.finish_members(&obj, &own);
        self.members = all;
    }

    /// A business identifier (`{system, value}` of a configured system): its
    /// value is an id of the system's kind, replaced whole where it stands.
    fn identifier(&mut self, obj: &Obj<'a>, kind: KindId, value: &str, loc: &Loc) {
        let value = value.trim();
        if value.is_empty() || value.len() > self.scan.tax.max_id_len() {
            return;
        }
        let v = self.scan.value(value, kind, shape::classify(value));
        match loc {
            Loc::Raw(r) => {
                // The literal's text is the value, up to the spaces trimmed.
                let text = self.src.get(r.clone()).unwrap_or_default();
                let start = r.start + (text.len() - text.trim_start().len());
                self.insert_occ(obj.occs_from, start..start + value.len(), v);
            }
            Loc::Esc { lit, range } => {
                if let Some(e) = self.part.escaped.get_mut(*lit) {
                    let text = e.text.get(range.clone()).unwrap_or_default();
                    let start = range.start + (text.len() - text.trim_start().len());
                    e.occs.push((start..start + value.len(), v));
                }
            }
        }
    }

    /// [`Self::finish_object`] with the object's own ids.
    fn finish_members(&mut self, obj: &Obj<'a>, members: &[Member<'a>]) {
        let tax = self.scan.tax;
        let fhir_prefix_kinds = |v: &str| {
            v.split_once('-')
                .and_then(|(p, _)| tax.fhir_prefix_kinds(p))
        };
        let candidates: &[KindId] = obj
            .resource_type
            .as_deref()
            .and_then(|t| tax.resource_type_kinds(t))
            .or_else(|| {
                members
                    .iter()
                    .find(|m| m.role == Some(KeyRole::Fhir))
                    .and_then(|m| fhir_prefix_kinds(&m.value))
            })
            .or_else(|| {
                members
                    .iter()
                    .find(|m| m.role == Some(KeyRole::Id) && shape::is_fhir_like(&m.value))
                    .and_then(|m| fhir_prefix_kinds(&m.value))
            })
            .or_else(|| {
                members
                    .iter()
                    .find(|m| m.role == Some(KeyRole::Reference))
                    .map(|m| m.kinds.as_slice())
            })
            .unwrap_or(&[]);
        let parent = obj.key.and_then(|k| k.object_kind);
        let root = if obj.primary { self.root_kind } else { None };
        let kind = choose(candidates, parent, root).unwrap_or(tax.fallback_kind());

        let mut group: [Option<(usize, Form)>; FORMS] = [None; FORMS];
        let mut forms = 0;
        for m in members {
            let (member_kind, form, joins) = match m.role {
                Some(KeyRole::Id) => {
                    let form = if shape::is_uuid(m.value.as_bytes()) {
                        Form::Uuid
                    } else if obj.resource_type.is_some() || shape::is_fhir_like(&m.value) {
                        Form::Fhir
                    } else {
                        Form::Slug
                    };
                    (kind, form, true)
                }
                Some(KeyRole::Fhir) => (kind, Form::Fhir, true),
                Some(KeyRole::Slug) => (kind, Form::Slug, true),
                Some(KeyRole::Reference) => {
                    if m.kinds.contains(&kind) {
                        (kind, Form::Fhir, true)
                    } else {
                        (
                            choose(&m.kinds, None, None).unwrap_or(tax.fallback_kind()),
                            Form::Fhir,
                            false,
                        )
                    }
                }
                None => {
                    let k = m.field_kind.unwrap_or(tax.fallback_kind());
                    (k, shape::classify(&m.value), k == kind)
                }
            };
            let v = self.scan.value(&m.value, member_kind, form);
            match &m.loc {
                Loc::Raw(r) => self.insert_occ(obj.occs_from, r.clone(), v),
                Loc::Esc { lit, range } => {
                    if let Some(e) = self.part.escaped.get_mut(*lit) {
                        e.occs.push((range.clone(), v));
                    }
                }
            }
            if !joins || group.iter().flatten().any(|(g, _)| *g == v) {
                continue;
            }
            // One value per form: a second, different value of a form stays an
            // entity of its own rather than a self-inflicted conflict.
            if group.iter().flatten().all(|(_, f)| *f != form) {
                if let Some(slot) = group.get_mut(forms) {
                    *slot = Some((v, form));
                    forms += 1;
                }
            }
        }
        if forms > 1 {
            if let Some(found) = group.get_mut(..forms) {
                found.sort();
            }
            self.scan.groups.push(Group {
                kind,
                members: group,
            });
        }
    }
}

#[cfg(test)]
mod tests;
