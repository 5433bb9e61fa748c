//! The lookup API the scanner, the rewriter, the session map and the grammar
//! use: [`Taxonomy`] with its tables, built by [`super::validate`], and the
//! questions it answers (the kind of a path, a key, a FHIR prefix or resource
//! type, an identifier system, an alias prefix).

use super::norm::{bare_system, id_stem, may_hold_normalized, with_norm};
use super::table::Table;
use crate::alias::fhir;
use crate::alias::id::{Form, KindId};
use crate::alias::pairs::PairSet;

/// What a JSON key says ([`Taxonomy::key_meaning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyMeaning {
    /// [`Taxonomy::key_role`].
    pub role: Option<KeyRole>,
    /// [`Taxonomy::id_named_kind`].
    pub id_kind: Option<KindId>,
    /// [`Taxonomy::object_key_kind`].
    pub object_kind: Option<KindId>,
}

/// The [`PairSet`]s of the tables the text patterns ask about, and of those
/// the response walker asks about every distinct key. The keys of path
/// segments, key roles, id fields and object keys are normalized
/// ([`norm_key`]), so a word is asked about normalized ([`with_norm`]).
#[derive(Debug, Clone)]
pub(super) struct WordPairs {
    path_segment: PairSet,
    resource_type: PairSet,
    fhir_prefix: PairSet,
    /// Key roles and id fields (looked up together).
    key: PairSet,
    object_key: PairSet,
}

impl Default for WordPairs {
    /// Sets that turn nothing away (filled in by [`WordPairs::of`]).
    fn default() -> Self {
        let all = PairSet::of([""]);
        WordPairs {
            path_segment: all.clone(),
            resource_type: all.clone(),
            fhir_prefix: all.clone(),
            key: all.clone(),
            object_key: all,
        }
    }
}

impl WordPairs {
    pub(super) fn of(t: &Taxonomy) -> WordPairs {
        WordPairs {
            path_segment: PairSet::of(t.path_segment.keys()),
            resource_type: PairSet::of(
                t.resource_type
                    .keys()
                    .chain(fhir::RESOURCE_TYPES.iter().copied()),
            ),
            fhir_prefix: PairSet::of(t.fhir_prefix.keys()),
            key: PairSet::of(t.key_role.keys().chain(t.id_field.keys())),
            object_key: PairSet::of(t.object_key.keys()),
        }
    }
}

/// A validated kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// See [`KindConfig::name`](super::KindConfig::name).
    pub name: String,
    /// See [`KindConfig::prefix`](super::KindConfig::prefix).
    pub prefix: String,
    /// See [`KindConfig::preferred_form`](super::KindConfig::preferred_form).
    pub preferred_form: Option<Form>,
    /// See [`KindConfig::readable_in_text`](super::KindConfig::readable_in_text).
    pub readable_in_text: bool,
}

/// What a key of an object means, for scanning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyRole {
    /// The object's own id, any form.
    Id,
    /// The object's own FHIR id.
    Fhir,
    /// The object's own slug.
    Slug,
    /// A FHIR reference to the object itself.
    Reference,
}

/// The validated taxonomy with its lookup tables.
///
/// Two taxonomies are equal when their [digests](Taxonomy::digest) are: the
/// tables are a function of the merged configuration the digest covers.
#[derive(Clone)]
pub struct Taxonomy {
    pub(super) kinds: Vec<Kind>,
    pub(super) fallback: KindId,
    pub(super) by_prefix: Table<KindId>,
    pub(super) by_name: Table<KindId>,
    pub(super) fhir_prefix: Table<Vec<KindId>>,
    pub(super) resource_type: Table<Vec<KindId>>,
    pub(super) id_field: Table<KindId>,
    pub(super) object_key: Table<KindId>,
    pub(super) path_segment: Table<KindId>,
    pub(super) key_role: Table<KeyRole>,
    /// Business identifier systems, `urn:oid:` stripped.
    pub(super) identifier_system: Table<KindId>,
    /// First letters of the path segments, resource types (FHIR's and the
    /// configured ones) and FHIR id prefixes: most words of a text are
    /// none of these and are turned away before a lookup.
    pub(super) pairs: WordPairs,
    /// Kinds by normalized kind name (`taskgroup`), for id-named keys.
    pub(super) by_norm_name: Table<KindId>,
    /// The fallback kind alone: the kinds of a FHIR resource type nobody mapped.
    pub(super) fallback_only: Vec<KindId>,
    pub(super) envelope_keys: Vec<String>,
    pub(super) repair_infixes: Vec<String>,
    pub(super) max_aliases: usize,
    pub(super) max_id_len: usize,
    /// See [`Taxonomy::digest`].
    pub(super) digest: String,
}

/// The digest and the kinds, not the tables (a configuration's `Debug` holds
/// its taxonomy).
impl std::fmt::Debug for Taxonomy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.kinds.iter().map(|k| k.name.as_str()).collect();
        f.debug_struct("Taxonomy")
            .field("digest", &self.digest)
            .field("kinds", &names)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Taxonomy {
    fn eq(&self, other: &Taxonomy) -> bool {
        self.digest == other.digest
    }
}

impl Eq for Taxonomy {}

impl Taxonomy {
    /// The taxonomy's digest: SHA-256 of the merged configuration (built-in
    /// kinds included), 64 lowercase hex digits. Equal digests mean the same
    /// kinds, prefixes and rules; the filter sends its digest with every alias
    /// request (`taxonomy` of [`crate::proto::alias::WithTaxonomy`]) and control
    /// refuses one that is not its own.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Number of kinds.
    pub fn kind_count(&self) -> usize {
        self.kinds.len()
    }

    /// The kind behind an id.
    pub fn kind(&self, id: KindId) -> Option<&Kind> {
        self.kinds.get(usize::from(id.0))
    }

    /// The name of a kind (`"record"` for an id from another taxonomy).
    pub fn kind_name(&self, id: KindId) -> &str {
        self.kind(id).map_or("record", |k| k.name.as_str())
    }

    /// Looks a kind up by name.
    pub fn kind_by_name(&self, name: &str) -> Option<KindId> {
        self.by_name.get(name).copied()
    }

    /// Every kind, in configuration order.
    pub fn kinds(&self) -> impl Iterator<Item = (KindId, &Kind)> {
        self.kinds
            .iter()
            .enumerate()
            .filter_map(|(i, k)| u16::try_from(i).ok().map(|i| (KindId(i), k)))
    }

    /// The kind of ids nothing else classifies.
    pub fn fallback_kind(&self) -> KindId {
        self.fallback
    }

    /// Aliases one session may hold.
    pub fn max_aliases_per_session(&self) -> usize {
        self.max_aliases
    }

    /// Longest string taken for an id under an id key.
    pub fn max_id_len(&self) -> usize {
        self.max_id_len
    }

    /// The kind of the primary record of a response to `path` (`/api/v2/visits/…`
    /// → visit): the last path segment (query excluded) that names a kind.
    pub fn kind_for_path(&self, path: &str) -> Option<KindId> {
        let path = path.split(['?', '#']).next().unwrap_or(path);
        path.split('/')
            .rev()
            .find_map(|seg| self.path_segment_kind(seg))
    }

    pub(crate) fn alias_prefix(&self, prefix: &str) -> Option<KindId> {
        self.by_prefix.get(prefix).copied()
    }
    /// The length of the longest alias prefix (`appointment`: 11).
    pub(crate) fn longest_alias_prefix(&self) -> usize {
        self.by_prefix.keys().map(str::len).max().unwrap_or(0)
    }
    /// Whether a key, lower case without separators, is one whose object
    /// is a record of a kind (`patient`, `visits`): for a check that reads
    /// the configuration only ([`crate::alias::lastword`]).
    pub fn is_object_key(&self, normalized: &[u8]) -> bool {
        self.object_key.0.contains_key(normalized)
    }

    /// Whether a word is a FHIR id prefix the taxonomy names (`pat`), in any
    /// case, for the same check. The prefixes are lower case
    /// (`[a-z][a-z0-9]*`, checked when the taxonomy is built): a word is
    /// lower-cased on the stack and looked up.
    pub fn is_fhir_prefix(&self, word: &[u8]) -> bool {
        if !word.first().is_some_and(u8::is_ascii_alphabetic) {
            return false;
        }
        let mut buf = [0u8; 32];
        match buf.get_mut(..word.len()) {
            Some(lower) => {
                for (l, b) in lower.iter_mut().zip(word) {
                    *l = b.to_ascii_lowercase();
                }
                self.fhir_prefix.0.contains_key(&*lower)
            }
            None => self
                .fhir_prefix
                .0
                .keys()
                .any(|p| p.eq_ignore_ascii_case(word)),
        }
    }

    // The text-pattern lookups take a word as bytes, as the patterns read it.
    pub(crate) fn fhir_prefix_kinds(&self, prefix: impl AsRef<[u8]>) -> Option<&[KindId]> {
        let prefix = prefix.as_ref();
        if !self.pairs.fhir_prefix.may_hold(prefix) {
            return None;
        }
        self.fhir_prefix.get(prefix).map(Vec::as_slice)
    }
    /// The kinds of a FHIR resource type: the configured ones, else the
    /// fallback kind for any other FHIR R4/R5 type but a definition
    /// ([`fhir::DEFINITION_TYPES`]).
    pub(crate) fn resource_type_kinds(&self, resource_type: impl AsRef<[u8]>) -> Option<&[KindId]> {
        self.resource_type(resource_type).map(|(kinds, _)| kinds)
    }
    /// [`Self::resource_type_kinds`], and whether the taxonomy maps this
    /// type to a kind itself.
    pub(crate) fn resource_type(
        &self,
        resource_type: impl AsRef<[u8]>,
    ) -> Option<(&[KindId], bool)> {
        let resource_type = resource_type.as_ref();
        if !self.pairs.resource_type.may_hold(resource_type) {
            return None;
        }
        match self.resource_type.get(resource_type) {
            Some(k) => Some((k.as_slice(), true)),
            // A terminology or conformance definition (`CodeSystem`) is no
            // record type unless a kind names it.
            None if fhir::is_resource_type(resource_type)
                && !fhir::is_definition_type(resource_type) =>
            {
                Some((self.fallback_only.as_slice(), false))
            }
            None => None,
        }
    }
    /// Whether a record of kind `a` may stand where kind `b` is named: the
    /// same kind, or two kinds one FHIR record can be read as, because they
    /// share a resource type or a FHIR id prefix (a bare `Encounter/enc-…` is
    /// read as a visit, and an `encounterId` may take that visit's alias).
    pub(crate) fn kinds_may_meet(&self, a: KindId, b: KindId) -> bool {
        a == b
            || self
                .resource_type
                .0
                .values()
                .chain(self.fhir_prefix.0.values())
                .any(|ks| ks.contains(&a) && ks.contains(&b))
    }
    pub(crate) fn id_field_kind(&self, key: &str) -> Option<KindId> {
        with_norm(key.as_bytes(), |k| self.id_field.get(k).copied())
    }
    pub(crate) fn object_key_kind(&self, key: &str) -> Option<KindId> {
        if !may_hold_normalized(&self.pairs.object_key, key.as_bytes()) {
            return None;
        }
        with_norm(key.as_bytes(), |k| {
            self.pairs
                .object_key
                .may_hold(k)
                .then(|| self.object_key.get(k).copied())?
        })
    }
    /// The kind of a key that names an id by its spelling, in any case or
    /// separator style (`id`, `ID`, `_id`, `patientId`, `patient_id`,
    /// `PatientID`, `PATIENT-ID`, `externalDocIds`): a configured id field's
    /// kind, else the kind the stem names (`patient`), else the fallback kind.
    /// `None` for a key that does not name an id (`paid`, `VALID`, `grid`) or
    /// names an id of the request rather than of a record (`requestId`,
    /// `x-correlation-id`).
    pub(crate) fn id_named_kind(&self, key: &str) -> Option<KindId> {
        self.id_field_kind(key).or_else(|| self.stem_kind(key))
    }
    /// [`Self::key_role`], [`Self::id_named_kind`] and
    /// [`Self::object_key_kind`] of one key, which is normalized once for all
    /// three (the response walker asks them of every distinct key).
    pub(crate) fn key_meaning(&self, key: &str) -> KeyMeaning {
        let b = key.as_bytes();
        let as_key = may_hold_normalized(&self.pairs.key, b);
        let as_object = may_hold_normalized(&self.pairs.object_key, b);
        let (role, field, object_kind) = if as_key || as_object {
            with_norm(b, |k| {
                let (role, field) = if as_key && self.pairs.key.may_hold(k) {
                    (self.key_role.get(k).copied(), self.id_field.get(k).copied())
                } else {
                    (None, None)
                };
                let object = as_object && self.pairs.object_key.may_hold(k);
                (
                    role,
                    field,
                    object.then(|| self.object_key.get(k).copied()).flatten(),
                )
            })
        } else {
            (None, None, None)
        };
        KeyMeaning {
            role,
            id_kind: field.or_else(|| self.stem_kind(key)),
            object_kind,
        }
    }
    /// The kind of a key that names an id but no configured id field: the
    /// kind its stem names, else none for an id of a request, else the
    /// fallback kind.
    fn stem_kind(&self, key: &str) -> Option<KindId> {
        // Ids of a request, not of a record: they name no patient data.
        const NOT_RECORDS: [&str; 6] = [
            "request",
            "trace",
            "span",
            "correlation",
            "idempotency",
            "session",
        ];
        // A version of the record the object is (FHIR `meta.versionId`: a
        // counter, `"3"`), not a record: the key alone, not `documentVersionId`.
        const VERSION: &[u8] = b"version";
        let stem = id_stem(key)?;
        with_norm(stem.as_bytes(), |s| {
            let named = self.by_norm_name.get(s).or_else(|| self.object_key.get(s));
            match named {
                Some(kind) => Some(*kind),
                None if NOT_RECORDS.iter().any(|n| s.ends_with(n.as_bytes())) => None,
                None if s == VERSION => None,
                None => Some(self.fallback),
            }
        })
    }
    pub(crate) fn path_segment_kind(&self, segment: impl AsRef<[u8]>) -> Option<KindId> {
        let segment = segment.as_ref();
        if !may_hold_normalized(&self.pairs.path_segment, segment) {
            return None;
        }
        with_norm(segment, |k| {
            self.pairs
                .path_segment
                .may_hold(k)
                .then(|| self.path_segment.get(k).copied())?
        })
    }
    /// The kind whose business identifiers `system` names, if any.
    pub(crate) fn identifier_system_kind(&self, system: &str) -> Option<KindId> {
        if self.identifier_system.0.is_empty() {
            return None;
        }
        self.identifier_system
            .get(bare_system(system.trim()))
            .copied()
    }
    /// Whether ids of `kind` stay readable in free text
    /// ([`KindConfig::readable_in_text`](super::KindConfig::readable_in_text)).
    pub fn readable_in_text(&self, kind: KindId) -> bool {
        self.kind(kind).is_some_and(|k| k.readable_in_text)
    }
    pub(crate) fn key_role(&self, key: &str) -> Option<KeyRole> {
        with_norm(key.as_bytes(), |k| self.key_role.get(k).copied())
    }
    pub(crate) fn is_envelope_key(&self, key: &str) -> bool {
        self.envelope_keys.iter().any(|k| k == key)
    }
    pub(crate) fn repair_infixes(&self) -> &[String] {
        &self.repair_infixes
    }

    /// The form a request field asks for: FHIR for FHIR-id and reference keys,
    /// slug for slug keys (and keys ending in `slug`), otherwise none.
    pub(crate) fn form_wanted_by_key(&self, key: &str) -> Option<Form> {
        match self.key_role(key) {
            Some(KeyRole::Fhir | KeyRole::Reference) => Some(Form::Fhir),
            Some(KeyRole::Slug) => Some(Form::Slug),
            _ if key.len() >= 4
                && key
                    .get(key.len() - 4..)
                    .is_some_and(|tail| tail.eq_ignore_ascii_case("slug")) =>
            {
                Some(Form::Slug)
            }
            _ => None,
        }
    }
}
