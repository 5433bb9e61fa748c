//! Finding raw ids in HMS responses: the collect stage of the alias engine.
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
//! Layout: this module holds the scan and its parts; [`json`] walks JSON,
//! `csv`, `xml` and `keyvalue` read their formats, `format` sniffs which
//! reader a body gets (and reads event streams and wrapped JSON), `broken`
//! finds ids cut by invisible or look-alike characters, `part` holds a part's
//! methods and the helpers over occurrences. Rewriting and its
//! verification are [`crate::alias::rewrite`].

use crate::alias::id::Form;
use crate::alias::id::KindId;
use crate::alias::shape::{self, Pattern, TextHit};
use crate::alias::taxonomy::Taxonomy;
use crate::json::lexer::JsonError;
use crate::proto::alias::{IdInput, KnownAlias};
use std::collections::HashMap;
use std::ops::Range;

pub(crate) mod broken;
mod csv;
pub(crate) mod format;
pub(crate) mod json;
mod keyvalue;
mod part;
mod xml;

use crate::alias::rewrite::RewriteError;
pub(crate) use format::split_bom;
pub use format::WithholdReason;
use format::{event_lines, shift_json_error};
pub(crate) use part::{choose, contained_ref, occ_order, overlaps, readable_alias};

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
pub struct PartId(pub(crate) usize);

/// Where an occurrence sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Loc {
    /// Byte range in the body.
    Raw(Range<usize>),
    /// Byte range inside the decoded text of an escaped literal.
    Esc { lit: usize, range: Range<usize> },
}

/// A string literal holding an escape, kept decoded.
#[derive(Debug, Clone)]
pub(crate) struct EscLit {
    pub(crate) span: Range<usize>,
    pub(crate) text: String,
    pub(crate) occs: Vec<(Range<usize>, usize)>,
    /// Clinical content ([`super::fhir::is_clinical_value_key`]): nothing
    /// in it is replaced.
    pub(crate) protected: bool,
}

/// An unescaped string literal of a part.
#[derive(Debug, Clone)]
pub(crate) struct LitSpan {
    /// Content range (quotes excluded).
    pub(crate) range: Range<usize>,
    /// The scan ran the text patterns over this text and found nothing, and
    /// the text holds no escape to decode: verification need not look at it
    /// again while its bytes are unchanged.
    pub(crate) clean: bool,
    /// Clinical content ([`super::fhir::is_clinical_value_key`]): nothing
    /// in it is replaced; verification reads it, so an id there withholds
    /// the body.
    pub(crate) protected: bool,
}

/// One scanned part.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) len: usize,
    pub(crate) kind: BodyKind,
    /// Raw occurrences: (byte range, value index), sorted by start.
    pub(crate) occs: Vec<(Range<usize>, usize)>,
    /// Unescaped string literals (the whole text for a text part), in order.
    pub(crate) lits: Vec<LitSpan>,
    /// Number tokens of a JSON part, in order: an id found there is written
    /// back as a string (`"id": 482913` → `"id": "patient-001"`).
    pub(crate) numbers: Vec<Range<usize>>,
    pub(crate) escaped: Vec<EscLit>,
}

/// An entity seen in one object: its values, at most one per form, sorted
/// and then `None` — ordered as the sorted list of its values would be, and
/// held inline (a list body has an entity per item).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Group {
    pub(crate) kind: KindId,
    pub(crate) members: [Option<(usize, Form)>; FORMS],
}

/// How many forms an id can have ([`Form`]): the most members of a [`Group`].
pub(crate) const FORMS: usize = 3;

/// The raw ids of one response (one or more parts).
#[derive(Debug, Clone)]
pub struct ResponseScan<'t> {
    pub(crate) tax: &'t Taxonomy,
    /// Every raw value found, once per kind it stands as (`Patient/1` and
    /// `Encounter/1` are two records), numbered in order of discovery.
    pub(crate) values: Vec<String>,
    /// The numbers of each distinct value in [`Self::values`], oldest first.
    pub(crate) holders: HashMap<String, Vec<usize>, FixedState>,
    /// Kind and form of each value's strongest sighting.
    pub(crate) meta: Vec<(KindId, Form)>,
    /// The entities of the scan (sorted and without repeats after
    /// [`Self::build_ids`]).
    pub(crate) groups: Vec<Group>,
    pub(crate) parts: Vec<Part>,
    pub(crate) ids: Vec<IdInput>,
    /// Value index → index in `ids`.
    pub(crate) id_of_value: Vec<usize>,
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
        Ok(json::walk(self, src, root_kind, part)?)
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

/// Fx hashing: fast on short keys, no random seed. The HMS is the trusted
/// upstream, so hash flooding is not a concern here.
pub(crate) type FixedState = rustc_hash::FxBuildHasher;

#[cfg(test)]
mod tests;
