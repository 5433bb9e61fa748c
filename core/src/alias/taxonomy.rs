//! The alias taxonomy: which kinds of record exist, their alias prefixes, and the
//! rules that tell a raw id's kind from where it sits in a body.
//!
//! [`TaxonomyConfig`] is what an operator writes (every field has a documented
//! default that covers the HMS API); [`Taxonomy`] is the validated form with
//! lookup tables. Both the filter (scanning) and control (minting) load the same
//! configuration, so an alias minted by one is understood by the other; each
//! side names its taxonomy by [`Taxonomy::digest`], the filter sends that digest
//! with every alias request, and control refuses one that differs from its own.
//!
//! # The taxonomy file
//! One JSON object (`config/taxonomy.example.json`), read by control
//! (`keyhole serve --taxonomy FILE`) and inlined as the `taxonomy` member of
//! the filter's plugin configuration ([`crate::config::HmsFilterConfig`]).
//! `make run` and the end-to-end harness do both from `KEYHOLE_TAXONOMY`
//! (`envoy/render.py` does the inlining).
//!
//! The file *extends* the built-in kinds: each entry of `kinds` replaces the
//! built-in kind of the same name (whole, in its place) or, under a new name,
//! is added after the built-in kinds. With `"replaceDefaults": true` the
//! file's kinds are the only ones. Every other field, when given, replaces its
//! default.
//!
//! # Adding an id kind
//! Without a rebuild: one entry in the taxonomy file's `kinds` (name, alias
//! prefix, FHIR id prefixes and resource types, id-named keys, object keys,
//! path segments), checked by `keyhole config check --taxonomy FILE`, which
//! prints the digest both sides will report. Restart control and reload Envoy
//! with the same file; scanning, minting, decoding and the prefix grammar all
//! read the kind from there, and [`Taxonomy::try_from`] validates it.
//!
//! A kind every deployment needs belongs in `defaults::kinds` (this file)
//! instead; the test `defaults_validate_and_cover_the_hms_kinds` validates the
//! defaults. Either way the digest changes, so control and every filter must
//! be given the new taxonomy together: until they are, control answers the
//! filter's alias requests with `409 taxonomy_mismatch`.

use super::id::{Form, KindId};
use super::pairs::PairSet;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One kind of record, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KindConfig {
    /// Stable name of the kind (`patient`); stored with every alias, so renaming
    /// a kind orphans the aliases of live sessions.
    pub name: String,
    /// Alias prefix: aliases read `<prefix>-NNN`. Lowercase segments joined by
    /// `-`, no segment all digits (`patient`, `patient-appt`).
    pub prefix: String,
    /// Prefixes of this kind's FHIR logical ids (`pat` for `pat-000123`). One
    /// FHIR prefix may belong to several kinds (a visit and an encounter are both
    /// `enc-…`); where it sits then decides.
    #[serde(default)]
    pub fhir_prefixes: Vec<String>,
    /// FHIR resource types of this kind (`Patient`), for references
    /// (`Patient/pat-000123`) and `resourceType` members.
    #[serde(default)]
    pub resource_types: Vec<String>,
    /// Keys whose string value is an id of this kind (`patientId`, `clinic`).
    #[serde(default)]
    pub id_fields: Vec<String>,
    /// Keys whose object value (or array of objects) is a record of this kind
    /// (`patient`, `relatedPatients`): the object's own `id`, `fhirId` and `slug`
    /// are this kind's.
    #[serde(default)]
    pub object_keys: Vec<String>,
    /// URL path segments after which an id is of this kind (`patients` in
    /// `/api/v2/patients/<uuid>`); the last one in a request path names the kind
    /// of the response's primary record.
    #[serde(default)]
    pub path_segments: Vec<String>,
    /// The form a decoded alias takes when the target field does not ask for
    /// one (default: the UUID when known). Clinics travel as slugs.
    #[serde(default)]
    pub preferred_form: Option<Form>,
    /// Business identifier systems of this kind: FHIR `identifier.system`
    /// URIs or OIDs (`http://fhir.de/sid/gkv/kvid-10`, `urn:oid:1.2.3`,
    /// compared without the `urn:oid:` prefix). The `value` beside such a
    /// `system` is an id of this kind, aliased in responses and refused raw
    /// in requests (`identifier=<system>|<value>` searches included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identifier_systems: Vec<String>,
    /// `true`: an id of this kind is aliased in its own positions only, and
    /// stays readable where it stands in free text (an MRN in a note, which
    /// clinicians confirm identity with). Default `false`: replaced wherever
    /// it stands.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub readable_in_text: bool,
}

/// The taxonomy as written by the operator. Every field may be omitted: `{}`
/// is the built-in HMS taxonomy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaxonomyConfig {
    /// `false` (default): [`kinds`](Self::kinds) extend the built-in kinds.
    /// `true`: they replace them, and must then include the fallback kind.
    #[serde(default)]
    pub replace_defaults: bool,
    /// Kinds merged into the built-in HMS kinds by name: one named like a
    /// built-in kind replaces it whole, in its place (the order decides
    /// between kinds sharing a FHIR prefix); a new name is added after the
    /// built-in kinds, in file order. Default: none, so the built-in kinds
    /// alone (patient, appointment = `patient-appt`, visit, encounter,
    /// task-group, task, prescription, practitioner, clinic, department, ward,
    /// location, slot, observation, condition, allergy, coverage, note, order,
    /// report, contact, user, record = `ref`).
    #[serde(default)]
    pub kinds: Vec<KindConfig>,
    /// The kind of an id whose kind nothing tells (a UUID in an idempotency
    /// key). Default `record` (prefix `ref`).
    #[serde(default = "defaults::fallback_kind")]
    pub fallback_kind: String,
    /// Keys holding an object's own id in any form. Default `id`, `uuid`.
    #[serde(default = "defaults::self_id_keys")]
    pub self_id_keys: Vec<String>,
    /// Keys holding an object's own FHIR id; in requests, an alias under one of
    /// these decodes to the FHIR id. Default `fhirId`, `fhir_id`.
    #[serde(default = "defaults::fhir_id_keys")]
    pub fhir_id_keys: Vec<String>,
    /// Keys holding an object's own slug; in requests, an alias under one of
    /// these (or under any key ending in `slug`, any case) decodes to the slug.
    /// Default `slug`.
    #[serde(default = "defaults::slug_keys")]
    pub slug_keys: Vec<String>,
    /// Keys holding a FHIR reference (`Type/id`) to the object itself; in
    /// requests, an alias under one of these decodes to the FHIR id.
    /// Default `reference`, `fhirReference`.
    #[serde(default = "defaults::reference_keys")]
    pub reference_keys: Vec<String>,
    /// Top-level keys of response envelopes whose value is the primary record
    /// (or a list of them). Default `data`.
    #[serde(default = "defaults::envelope_keys")]
    pub envelope_keys: Vec<String>,
    /// Noun infixes a model inserts into an issued alias (`task-group-001` for
    /// `task-001`); decode strips one and retries, only against issued aliases.
    /// Default `group`, `item`, `entry`, `record`.
    #[serde(default = "defaults::repair_infixes")]
    pub repair_infixes: Vec<String>,
    /// Aliases one session may hold; past it encode returns a sentinel
    /// (`<prefix>-000`) that decodes to nothing. Default 5000.
    #[serde(default = "defaults::max_aliases_per_session")]
    pub max_aliases_per_session: usize,
    /// Longest string value taken for an id under an id key; longer values are
    /// text and only scanned for embedded ids. Default 128.
    #[serde(default = "defaults::max_id_len")]
    pub max_id_len: usize,
}

impl Default for TaxonomyConfig {
    /// The built-in taxonomy: no kinds of its own (so the built-in kinds
    /// alone) and every other field at its default.
    fn default() -> Self {
        TaxonomyConfig {
            replace_defaults: false,
            kinds: Vec::new(),
            fallback_kind: defaults::fallback_kind(),
            self_id_keys: defaults::self_id_keys(),
            fhir_id_keys: defaults::fhir_id_keys(),
            slug_keys: defaults::slug_keys(),
            reference_keys: defaults::reference_keys(),
            envelope_keys: defaults::envelope_keys(),
            repair_infixes: defaults::repair_infixes(),
            max_aliases_per_session: defaults::max_aliases_per_session(),
            max_id_len: defaults::max_id_len(),
        }
    }
}

impl TaxonomyConfig {
    /// Parses a taxonomy file (JSON) without validating it.
    ///
    /// Fails with a [`TaxonomyError`] naming the field when the JSON is
    /// malformed, has an unknown field or a value of the wrong type.
    pub fn from_json(bytes: &[u8]) -> Result<TaxonomyConfig, TaxonomyError> {
        serde_json::from_slice(bytes).map_err(|e| serde_err(&e))
    }

    /// Like [`TaxonomyConfig::from_json`], from an already parsed JSON value
    /// (the `taxonomy` member of the filter's plugin configuration).
    pub fn from_value(value: serde_json::Value) -> Result<TaxonomyConfig, TaxonomyError> {
        serde_json::from_value(value).map_err(|e| serde_err(&e))
    }

    /// The configuration with the built-in kinds merged in
    /// ([`TaxonomyConfig::kinds`]): `replace_defaults` is then `true`. Each
    /// kind comes with the path an error about it names: `kinds[i]` for the
    /// file's `i`-th kind, `default kind "visit"` for a built-in one.
    fn merged(self) -> (TaxonomyConfig, Vec<String>) {
        let mut kinds: Vec<(Option<usize>, KindConfig)> = if self.replace_defaults {
            Vec::new()
        } else {
            defaults::kinds().into_iter().map(|k| (None, k)).collect()
        };
        for (i, k) in self.kinds.into_iter().enumerate() {
            match kinds
                .iter_mut()
                .find(|(from, d)| from.is_none() && d.name == k.name)
            {
                Some(slot) => *slot = (Some(i), k),
                None => kinds.push((Some(i), k)),
            }
        }
        let at = kinds
            .iter()
            .map(|(from, k)| match from {
                Some(i) => format!("kinds[{i}]"),
                None => format!("default kind {:?}", k.name),
            })
            .collect();
        let merged = TaxonomyConfig {
            replace_defaults: true,
            kinds: kinds.into_iter().map(|(_, k)| k).collect(),
            ..self
        };
        (merged, at)
    }
}

/// A serde error as a [`TaxonomyError`]: serde_json names the offending key
/// between backticks (`unknown field `prefixes``), not its path.
fn serde_err(e: &serde_json::Error) -> TaxonomyError {
    let msg = e.to_string();
    let field = msg
        .split('`')
        .nth(1)
        .map_or_else(|| "<root>".to_owned(), str::to_owned);
    err(field, msg)
}

pub(crate) mod defaults {
    use super::{Form, KindConfig};

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn kind(
        name: &str,
        prefix: &str,
        fhir: &[&str],
        types: &[&str],
        fields: &[&str],
        objects: &[&str],
        segments: &[&str],
        preferred_form: Option<Form>,
    ) -> KindConfig {
        KindConfig {
            name: name.to_owned(),
            prefix: prefix.to_owned(),
            fhir_prefixes: strings(fhir),
            resource_types: strings(types),
            id_fields: strings(fields),
            object_keys: strings(objects),
            path_segments: strings(segments),
            preferred_form,
            identifier_systems: Vec::new(),
            readable_in_text: false,
        }
    }

    pub fn kinds() -> Vec<KindConfig> {
        let slug = Some(Form::Slug);
        vec![
            kind(
                "patient",
                "patient",
                &["pat"],
                &["Patient"],
                &["patientId", "patient_id"],
                &["patient", "patients", "relatedPatients", "subject"],
                &["patients"],
                None,
            ),
            kind(
                "appointment",
                "patient-appt",
                &["appt"],
                &["Appointment"],
                &["appointmentId", "appointment_id"],
                &["appointment", "appointments", "conflictingAppointment"],
                &["appointments"],
                None,
            ),
            // Visit before encounter: a bare `Encounter/enc-…` reference with no
            // other context is read as the visit (the administrative case).
            kind(
                "visit",
                "visit",
                &["enc"],
                &["Encounter"],
                &["visitId", "visit_id"],
                &["visit", "visits", "activeVisit"],
                &["visits"],
                None,
            ),
            kind(
                "encounter",
                "encounter",
                &["enc"],
                &["Encounter"],
                &["encounterId", "encounter_id"],
                &["encounter", "encounters"],
                &["encounters"],
                None,
            ),
            kind(
                "task-group",
                "task-group",
                &["tg"],
                &[],
                &["taskGroupId", "task_group_id", "groupId"],
                &["taskGroup", "taskGroups"],
                &["task-groups"],
                None,
            ),
            kind(
                "task",
                "task",
                &["task"],
                &["Task"],
                &["taskId", "task_id"],
                &["task", "tasks"],
                &["tasks"],
                None,
            ),
            kind(
                "prescription",
                "prescription",
                &["mr"],
                &["MedicationRequest"],
                &["prescriptionId", "prescription_id", "medicationRequestId"],
                &["prescription", "prescriptions"],
                &["prescriptions"],
                None,
            ),
            kind(
                "practitioner",
                "practitioner",
                &["prac"],
                &["Practitioner"],
                &["practitionerId", "practitioner_id", "prescriberId"],
                &[
                    "practitioner",
                    "practitioners",
                    "prescriber",
                    "attendingPractitioner",
                    "participants",
                    "signedBy",
                ],
                &["practitioners"],
                None,
            ),
            kind(
                "clinic",
                "clinic",
                &[],
                &["Organization"],
                &["clinic", "clinicId", "clinic_id", "clinicSlug"],
                &["clinic", "clinics"],
                &["clinics"],
                slug,
            ),
            kind(
                "department",
                "department",
                &[],
                &[],
                &["department", "departmentId", "departmentSlug"],
                &["department", "departments"],
                &["departments"],
                slug,
            ),
            kind(
                "ward",
                "ward",
                &[],
                &[],
                &["ward", "wardId", "wardSlug"],
                &["ward", "wards"],
                &["wards"],
                slug,
            ),
            kind(
                "location",
                "location",
                &["loc"],
                &["Location"],
                &["locationId", "location_id"],
                &["location", "locations"],
                &["locations"],
                None,
            ),
            kind(
                "slot",
                "slot",
                &[],
                &["Slot"],
                &["slotId", "slot_id"],
                &["slot", "slots"],
                &["slots"],
                slug,
            ),
            kind(
                "observation",
                "observation",
                &["obs"],
                &["Observation"],
                &["observationId"],
                &["observation", "observations"],
                &["observations", "vitals"],
                None,
            ),
            kind(
                "condition",
                "condition",
                &["cond"],
                &["Condition"],
                &["conditionId", "condition_id"],
                &["condition", "conditions", "problems", "diagnoses"],
                &["conditions", "problems"],
                None,
            ),
            kind(
                "allergy",
                "allergy",
                &["allg"],
                &["AllergyIntolerance"],
                &["allergyId"],
                &["allergy", "allergies"],
                &["allergies"],
                None,
            ),
            kind(
                "coverage",
                "coverage",
                &["cov"],
                &["Coverage"],
                &["coverageId", "insuranceId"],
                &["coverage", "insurance"],
                &["coverages"],
                None,
            ),
            kind(
                "note",
                "note",
                &["comp"],
                &["Composition"],
                &["noteId"],
                &["note", "notes"],
                &["notes"],
                None,
            ),
            kind(
                "order",
                "order",
                &["sr"],
                &["ServiceRequest"],
                &["orderId", "serviceRequestId"],
                &["order", "orders"],
                &["orders", "service-requests"],
                None,
            ),
            kind(
                "report",
                "report",
                &["dr"],
                &["DiagnosticReport"],
                &["reportId", "diagnosticReportId"],
                &["report", "reports", "resultReport"],
                &["reports"],
                None,
            ),
            kind(
                "contact",
                "contact",
                &[],
                &["RelatedPerson"],
                &["contactId"],
                &["contact", "contacts"],
                &["contacts"],
                None,
            ),
            kind(
                "user",
                "user",
                &[],
                &[],
                &["userId", "createdBy", "updatedBy"],
                &["user", "users"],
                &["users"],
                None,
            ),
            kind("record", "ref", &[], &[], &[], &[], &[], None),
        ]
    }
    pub fn fallback_kind() -> String {
        "record".into()
    }
    pub fn self_id_keys() -> Vec<String> {
        strings(&["id", "uuid"])
    }
    pub fn fhir_id_keys() -> Vec<String> {
        strings(&["fhirId", "fhir_id"])
    }
    pub fn slug_keys() -> Vec<String> {
        strings(&["slug"])
    }
    pub fn reference_keys() -> Vec<String> {
        strings(&["reference", "fhirReference"])
    }
    pub fn envelope_keys() -> Vec<String> {
        strings(&["data"])
    }
    pub fn repair_infixes() -> Vec<String> {
        strings(&["group", "item", "entry", "record"])
    }
    pub fn max_aliases_per_session() -> usize {
        5000
    }
    pub fn max_id_len() -> usize {
        128
    }
}

/// A lookup table keyed by configured names, looked up by bytes: the text
/// patterns ask about words of a body without reading them as UTF-8 first.
/// Fx hashing: fast on short keys and needs no random seed (wasm hosts may not
/// offer one); the keys come from configuration, not from traffic.
#[derive(Clone)]
struct Table<V>(HashMap<Box<[u8]>, V, rustc_hash::FxBuildHasher>);

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table(HashMap::default())
    }
}

impl<V> FromIterator<(String, V)> for Table<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(pairs: I) -> Self {
        let mut t = Table::default();
        for (k, v) in pairs {
            t.insert(k, v);
        }
        t
    }
}

impl<V> Table<V> {
    fn get(&self, key: impl AsRef<[u8]>) -> Option<&V> {
        self.0.get(key.as_ref())
    }
    fn insert(&mut self, key: String, value: V) -> Option<V> {
        self.0.insert(key.into_bytes().into_boxed_slice(), value)
    }
    fn entry(&mut self, key: String) -> std::collections::hash_map::Entry<'_, Box<[u8]>, V> {
        self.0.entry(key.into_bytes().into_boxed_slice())
    }
    /// The keys (inserted as `String`s, so always text).
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().filter_map(|k| std::str::from_utf8(k).ok())
    }
}

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
struct WordPairs {
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
    fn of(t: &Taxonomy) -> WordPairs {
        WordPairs {
            path_segment: PairSet::of(t.path_segment.keys()),
            resource_type: PairSet::of(
                t.resource_type
                    .keys()
                    .chain(super::fhir::RESOURCE_TYPES.iter().copied()),
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
    /// See [`KindConfig::name`].
    pub name: String,
    /// See [`KindConfig::prefix`].
    pub prefix: String,
    /// See [`KindConfig::preferred_form`].
    pub preferred_form: Option<Form>,
    /// See [`KindConfig::readable_in_text`].
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
    kinds: Vec<Kind>,
    fallback: KindId,
    by_prefix: Table<KindId>,
    by_name: Table<KindId>,
    fhir_prefix: Table<Vec<KindId>>,
    resource_type: Table<Vec<KindId>>,
    id_field: Table<KindId>,
    object_key: Table<KindId>,
    path_segment: Table<KindId>,
    key_role: Table<KeyRole>,
    /// Business identifier systems, `urn:oid:` stripped.
    identifier_system: Table<KindId>,
    /// First letters of the path segments, resource types (FHIR's and the
    /// configured ones) and FHIR id prefixes: most words of a text are
    /// none of these and are turned away before a lookup.
    pairs: WordPairs,
    /// Kinds by normalized kind name (`taskgroup`), for id-named keys.
    by_norm_name: Table<KindId>,
    /// The fallback kind alone: the kinds of a FHIR resource type nobody mapped.
    fallback_only: Vec<KindId>,
    envelope_keys: Vec<String>,
    repair_infixes: Vec<String>,
    max_aliases: usize,
    max_id_len: usize,
    /// See [`Taxonomy::digest`].
    digest: String,
}

/// A taxonomy configuration error, naming the field (`kinds[3].prefix`).
pub type TaxonomyError = crate::field::FieldError;

fn err(field: impl Into<String>, message: impl Into<String>) -> TaxonomyError {
    TaxonomyError {
        field: field.into(),
        message: message.into(),
    }
}

/// An identifier system as the table holds it: an OID without `urn:oid:`.
fn bare_system(system: &str) -> &str {
    system
        .get(..8)
        .filter(|p| p.eq_ignore_ascii_case("urn:oid:"))
        .and_then(|_| system.get(8..))
        .unwrap_or(system)
}

/// A key as the lookup tables hold it: ASCII lowercase, without `_`, `-`,
/// `.` and spaces (`patient_id`, `PatientID` and `patientId` are one key).
pub(crate) fn norm_key(key: &str) -> String {
    // Dropping and lower-casing ASCII bytes keeps UTF-8 whole.
    String::from_utf8(normalized(key.as_bytes()).collect()).unwrap_or_default()
}

/// The bytes of a normalized key (see [`norm_key`]).
fn normalized(key: &[u8]) -> impl Iterator<Item = u8> + '_ {
    key.iter()
        .filter(|&&b| !is_key_separator(b))
        .map(u8::to_ascii_lowercase)
}

/// The bytes a normalized key leaves out.
fn is_key_separator(b: u8) -> bool {
    matches!(b, b'_' | b'-' | b'.' | b' ')
}

/// Whether `set` (of normalized keys) may hold `key` once normalized, judged
/// by its first two bytes when neither is dropped by normalizing (most keys):
/// a cheap "certainly not" before [`with_norm`] reads the whole key.
fn may_hold_normalized(set: &PairSet, key: &[u8]) -> bool {
    match *key {
        [a, b, ..] if !is_key_separator(a) && !is_key_separator(b) => {
            set.may_start(a.to_ascii_lowercase(), b.to_ascii_lowercase())
        }
        _ => true,
    }
}

/// Calls `f` with the normalized `key` without allocating (keys up to 64
/// bytes; longer keys are normalized on the heap).
fn with_norm<R>(key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
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

/// `[a-z][a-z0-9]*`: one segment of a prefix, an infix or a FHIR prefix.
fn valid_segment(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn valid_prefix(s: &str) -> bool {
    s.split('-').all(valid_segment)
}

/// The stem of a key that ends in an id word at a word boundary: `patient`
/// of `patientId`, `PatientID`, `patient_id`, `PATIENT-IDS`, `patientUuid`,
/// `patientGUID`; `""` of a bare `id`, `ID`, `_id`, `uuid`. The word is
/// `id`, `ids`, `uuid`, `uuids`, `guid` or `guids` in any case, after a
/// separator (`_`, `-`, `.`, space), at the start of the key, or (camelCase)
/// starting upper case after a lower-case letter or a digit. `None` otherwise:
/// `paid`, `VALID`, `grid`, `squid`.
fn id_stem(key: &str) -> Option<&str> {
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

/// Inserts `key → kind` into a one-kind-per-key table, failing on a clash.
fn insert_unique(
    table: &mut Table<KindId>,
    key: &str,
    kind: KindId,
    field: &str,
    names: &[Kind],
) -> Result<(), TaxonomyError> {
    if key.is_empty() {
        return Err(err(field, "must not be empty"));
    }
    if let Some(other) = table.insert(norm_key(key), kind) {
        if other != kind {
            let other_name = names
                .get(usize::from(other.0))
                .map_or("?", |k| k.name.as_str());
            return Err(err(
                field,
                format!("{key:?} is already used by kind {other_name:?}"),
            ));
        }
    }
    Ok(())
}

impl TryFrom<TaxonomyConfig> for Taxonomy {
    type Error = TaxonomyError;

    /// Merges the built-in kinds in ([`TaxonomyConfig::kinds`]), validates
    /// the result and builds the lookup tables.
    ///
    /// Fails with a [`TaxonomyError`] naming the field (`kinds[0].prefix`, or
    /// `default kind "visit".idFields[0]` for a built-in kind a file kind
    /// clashes with) when a rule is broken.
    fn try_from(raw: TaxonomyConfig) -> Result<Self, Self::Error> {
        let (merged, at) = raw.merged();
        let digest = digest_of(&merged);
        let mut t = Taxonomy::validate(merged, &at)?;
        t.digest = digest;
        Ok(t)
    }
}

impl Taxonomy {
    /// Validates a merged configuration; `at[i]` is the path of kind `i`.
    fn validate(raw: TaxonomyConfig, at: &[String]) -> Result<Taxonomy, TaxonomyError> {
        let kind_at = |i: usize| at.get(i).cloned().unwrap_or_else(|| format!("kinds[{i}]"));
        if raw.kinds.is_empty() {
            return Err(err("kinds", "must list at least one kind"));
        }
        if raw.kinds.len() > usize::from(u16::MAX) {
            return Err(err("kinds", "too many kinds"));
        }
        let mut t = Taxonomy {
            kinds: Vec::with_capacity(raw.kinds.len()),
            fallback: KindId(0),
            by_prefix: Table::default(),
            by_name: Table::default(),
            fhir_prefix: Table::default(),
            resource_type: Table::default(),
            id_field: Table::default(),
            object_key: Table::default(),
            path_segment: Table::default(),
            key_role: Table::default(),
            identifier_system: Table::default(),
            pairs: WordPairs::default(),
            by_norm_name: Table::default(),
            fallback_only: Vec::new(),
            envelope_keys: raw.envelope_keys,
            repair_infixes: Vec::new(),
            max_aliases: raw.max_aliases_per_session,
            max_id_len: raw.max_id_len,
            digest: String::new(),
        };
        for (i, k) in raw.kinds.iter().enumerate() {
            let at = kind_at(i);
            let id = KindId(u16::try_from(i).map_err(|_| err(&at, "too many kinds"))?);
            if !valid_prefix(&k.name) {
                return Err(err(
                    format!("{at}.name"),
                    format!("must be lowercase words joined by '-', got {:?}", k.name),
                ));
            }
            if !valid_prefix(&k.prefix) {
                return Err(err(
                    format!("{at}.prefix"),
                    format!(
                        "must be lowercase segments [a-z][a-z0-9]* joined by '-', got {:?}",
                        k.prefix
                    ),
                ));
            }
            if t.by_name.insert(k.name.clone(), id).is_some() {
                return Err(err(
                    format!("{at}.name"),
                    format!("kind {:?} is listed twice", k.name),
                ));
            }
            if t.by_prefix.insert(k.prefix.clone(), id).is_some() {
                return Err(err(
                    format!("{at}.prefix"),
                    format!("prefix {:?} is used by two kinds", k.prefix),
                ));
            }
            t.kinds.push(Kind {
                name: k.name.clone(),
                prefix: k.prefix.clone(),
                preferred_form: k.preferred_form,
                readable_in_text: k.readable_in_text,
            });
        }
        for (i, k) in raw.kinds.iter().enumerate() {
            let at = kind_at(i);
            let id = KindId(u16::try_from(i).map_err(|_| err(&at, "too many kinds"))?);
            for (j, p) in k.fhir_prefixes.iter().enumerate() {
                if !valid_segment(p) {
                    return Err(err(
                        format!("{at}.fhirPrefixes[{j}]"),
                        format!("must match [a-z][a-z0-9]*, got {p:?}"),
                    ));
                }
                t.fhir_prefix.entry(p.clone()).or_default().push(id);
            }
            for (j, r) in k.resource_types.iter().enumerate() {
                let ok = r.bytes().next().is_some_and(|b| b.is_ascii_uppercase())
                    && r.bytes().all(|b| b.is_ascii_alphanumeric());
                if !ok {
                    return Err(err(
                        format!("{at}.resourceTypes[{j}]"),
                        format!("must be a FHIR type name, got {r:?}"),
                    ));
                }
                t.resource_type.entry(r.clone()).or_default().push(id);
            }
            for (j, f) in k.id_fields.iter().enumerate() {
                insert_unique(
                    &mut t.id_field,
                    f,
                    id,
                    &format!("{at}.idFields[{j}]"),
                    &t.kinds,
                )?;
            }
            for (j, f) in k.object_keys.iter().enumerate() {
                insert_unique(
                    &mut t.object_key,
                    f,
                    id,
                    &format!("{at}.objectKeys[{j}]"),
                    &t.kinds,
                )?;
            }
            for (j, f) in k.path_segments.iter().enumerate() {
                insert_unique(
                    &mut t.path_segment,
                    f,
                    id,
                    &format!("{at}.pathSegments[{j}]"),
                    &t.kinds,
                )?;
            }
            for (j, system) in k.identifier_systems.iter().enumerate() {
                let field = format!("{at}.identifierSystems[{j}]");
                let bare = bare_system(system);
                if bare.is_empty() || bare.bytes().any(|b| b.is_ascii_whitespace() || b == b'|') {
                    return Err(err(
                        field,
                        format!("must be a URI or an OID without spaces or '|', got {system:?}"),
                    ));
                }
                if let Some(other) = t.identifier_system.insert(bare.to_owned(), id) {
                    let name = t
                        .kinds
                        .get(usize::from(other.0))
                        .map_or("", |k| k.name.as_str());
                    return Err(err(
                        field,
                        format!("system {system:?} is listed for kind {name:?} too"),
                    ));
                }
            }
        }
        for (id, k) in t.kinds.iter().enumerate() {
            if let Ok(id) = u16::try_from(id) {
                t.by_norm_name.insert(norm_key(&k.name), KindId(id));
            }
        }
        t.fallback = *t.by_name.get(&raw.fallback_kind).ok_or_else(|| {
            err(
                "fallbackKind",
                format!("names no kind: {:?}", raw.fallback_kind),
            )
        })?;
        t.fallback_only = vec![t.fallback];
        let roles = [
            ("selfIdKeys", &raw.self_id_keys, KeyRole::Id),
            ("fhirIdKeys", &raw.fhir_id_keys, KeyRole::Fhir),
            ("slugKeys", &raw.slug_keys, KeyRole::Slug),
            ("referenceKeys", &raw.reference_keys, KeyRole::Reference),
        ];
        for (field, keys, role) in roles {
            for (j, key) in keys.iter().enumerate() {
                if key.is_empty() {
                    return Err(err(format!("{field}[{j}]"), "must not be empty"));
                }
                if t.key_role
                    .insert(norm_key(key), role)
                    .is_some_and(|r| r != role)
                {
                    return Err(err(
                        format!("{field}[{j}]"),
                        format!("key {key:?} has two roles"),
                    ));
                }
            }
        }
        for (j, infix) in raw.repair_infixes.iter().enumerate() {
            if !valid_segment(infix) {
                return Err(err(
                    format!("repairInfixes[{j}]"),
                    format!("must match [a-z][a-z0-9]*, got {infix:?}"),
                ));
            }
        }
        t.repair_infixes = raw.repair_infixes;
        if !(1..=1_000_000).contains(&t.max_aliases) {
            return Err(err(
                "maxAliasesPerSession",
                format!("must be between 1 and 1000000, got {}", t.max_aliases),
            ));
        }
        if !(36..=4096).contains(&t.max_id_len) {
            return Err(err(
                "maxIdLen",
                format!("must be between 36 and 4096, got {}", t.max_id_len),
            ));
        }
        t.pairs = WordPairs::of(&t);
        Ok(t)
    }
}

impl Default for Taxonomy {
    /// The default HMS taxonomy. The defaults are validated by a unit test; if
    /// they ever failed validation this returns a one-kind taxonomy rather than
    /// panicking.
    fn default() -> Self {
        Taxonomy::try_from(TaxonomyConfig::default()).unwrap_or_else(|_| Taxonomy::minimal())
    }
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

/// Domain tag of [`Taxonomy::digest`]'s input; a change to what the digest
/// covers changes the tag.
const DIGEST_TAG: &[u8] = b"keyhole-taxonomy-v1\n";

/// SHA-256 over [`DIGEST_TAG`] and the merged configuration as compact JSON
/// (fields in declaration order, lists in configuration order), as 64
/// lowercase hex digits. serde_json writes a struct the same way every time,
/// so the digest depends only on the configuration, not on how a file spelled
/// it (whitespace, member order, defaults left out or written out).
fn digest_of(merged: &TaxonomyConfig) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let mut h = Sha256::new();
    h.update(DIGEST_TAG);
    // Serializing plain strings, numbers and enums cannot fail; were it ever
    // to, the digest of an empty body still differs from every real one.
    h.update(serde_json::to_vec(merged).unwrap_or_default());
    let bytes: [u8; 32] = h.finalize().into();
    let mut out = String::with_capacity(64);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

impl Taxonomy {
    /// Parses and validates a taxonomy from JSON (a taxonomy file).
    ///
    /// Fails with a [`TaxonomyError`] naming the field when the JSON is
    /// malformed, has an unknown field, or breaks a rule.
    pub fn from_json(bytes: &[u8]) -> Result<Taxonomy, TaxonomyError> {
        Taxonomy::try_from(TaxonomyConfig::from_json(bytes)?)
    }

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

    fn minimal() -> Taxonomy {
        let kind = Kind {
            name: "record".into(),
            prefix: "ref".into(),
            preferred_form: None,
            readable_in_text: false,
        };
        let config = TaxonomyConfig {
            replace_defaults: true,
            kinds: vec![KindConfig {
                name: kind.name.clone(),
                prefix: kind.prefix.clone(),
                fhir_prefixes: Vec::new(),
                resource_types: Vec::new(),
                id_fields: Vec::new(),
                object_keys: Vec::new(),
                path_segments: Vec::new(),
                preferred_form: None,
                identifier_systems: Vec::new(),
                readable_in_text: false,
            }],
            fallback_kind: kind.name.clone(),
            self_id_keys: vec!["id".into()],
            fhir_id_keys: Vec::new(),
            slug_keys: Vec::new(),
            reference_keys: Vec::new(),
            envelope_keys: Vec::new(),
            repair_infixes: Vec::new(),
            max_aliases_per_session: 5000,
            max_id_len: 128,
        };
        let mut t = Taxonomy {
            by_prefix: Table::from_iter([(kind.prefix.clone(), KindId(0))]),
            by_name: Table::from_iter([(kind.name.clone(), KindId(0))]),
            kinds: vec![kind],
            fallback: KindId(0),
            fhir_prefix: Table::default(),
            resource_type: Table::default(),
            id_field: Table::default(),
            object_key: Table::default(),
            path_segment: Table::default(),
            key_role: Table::from_iter([("id".to_owned(), KeyRole::Id)]),
            identifier_system: Table::default(),
            pairs: WordPairs::default(),
            by_norm_name: Table::default(),
            fallback_only: vec![KindId(0)],
            envelope_keys: Vec::new(),
            repair_infixes: Vec::new(),
            max_aliases: 5000,
            max_id_len: 128,
            digest: digest_of(&config),
        };
        t.pairs = WordPairs::of(&t);
        t
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
    // The text-pattern lookups take a word as bytes, as the patterns read it.
    /// Every FHIR id prefix the taxonomy names (`pat`), for a check that
    /// reads the configuration only ([`crate::alias::lastword`]).
    /// The keys whose object is a record of a kind (`patient`, `visits`),
    /// as the table holds them: lower case, without separators.
    pub fn object_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.object_key.0.keys().map(|k| &**k)
    }

    pub fn fhir_prefixes(&self) -> impl Iterator<Item = &str> {
        self.fhir_prefix
            .0
            .keys()
            .filter_map(|k| std::str::from_utf8(k).ok())
    }
    pub(crate) fn fhir_prefix_kinds(&self, prefix: impl AsRef<[u8]>) -> Option<&[KindId]> {
        let prefix = prefix.as_ref();
        if !self.pairs.fhir_prefix.may_hold(prefix) {
            return None;
        }
        self.fhir_prefix.get(prefix).map(Vec::as_slice)
    }
    /// The kinds of a FHIR resource type: the configured ones, else the
    /// fallback kind for any other FHIR R4/R5 type but a definition
    /// ([`super::fhir::DEFINITION_TYPES`]).
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
            None if super::fhir::is_resource_type(resource_type)
                && !super::fhir::is_definition_type(resource_type) =>
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
    /// ([`KindConfig::readable_in_text`]).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_cover_the_hms_kinds() {
        let t = Taxonomy::try_from(TaxonomyConfig::default()).unwrap();
        for name in [
            "patient",
            "appointment",
            "visit",
            "encounter",
            "task",
            "task-group",
            "prescription",
            "clinic",
            "practitioner",
            "slot",
            "location",
            "department",
            "ward",
            "condition",
            "observation",
        ] {
            assert!(t.kind_by_name(name).is_some(), "{name}");
        }
        let appt = t.kind_by_name("appointment").unwrap();
        assert_eq!(t.kind(appt).unwrap().prefix, "patient-appt");
        assert_eq!(Taxonomy::default(), t);
    }

    #[test]
    fn empty_config_means_defaults() {
        assert_eq!(Taxonomy::from_json(b"{}").unwrap(), Taxonomy::default());
    }

    #[test]
    fn kind_for_path_takes_the_last_kind_segment() {
        let t = Taxonomy::default();
        let name = |p: &str| t.kind_for_path(p).map(|k| t.kind_name(k).to_owned());
        assert_eq!(
            name("/api/v2/visits/10c85729-d6ad-4aca-820e-d8626e93e35d").as_deref(),
            Some("visit")
        );
        assert_eq!(
            name("/api/v2/patients/x/visits?patients=1").as_deref(),
            Some("visit")
        );
        assert_eq!(
            name("/api/v2/patients/search?q=anna").as_deref(),
            Some("patient")
        );
        assert_eq!(name("/api/v2/task-groups/x").as_deref(), Some("task-group"));
        assert_eq!(name("/health"), None);
    }

    const EXAMPLE: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/taxonomy.example.json"
    ));

    #[test]
    fn the_example_file_adds_specimens_to_the_defaults() {
        let t = Taxonomy::from_json(EXAMPLE).unwrap();
        let defaults = Taxonomy::default();
        assert_eq!(
            t.kind_count(),
            defaults.kind_count() + 3,
            "specimen, insurance-number, mrn"
        );
        let kvnr = t.kind_by_name("insurance-number").unwrap();
        let mrn = t.kind_by_name("mrn").unwrap();
        assert_eq!(
            t.identifier_system_kind("http://fhir.de/sid/gkv/kvid-10"),
            Some(kvnr)
        );
        assert_eq!(
            t.identifier_system_kind("urn:oid:1.2.276.0.76.3.1.999.1"),
            Some(mrn)
        );
        assert_eq!(
            t.identifier_system_kind("1.2.276.0.76.3.1.999.1"),
            Some(mrn),
            "an OID with or without urn:oid:"
        );
        assert_eq!(t.identifier_system_kind("http://loinc.org"), None);
        assert!(t.readable_in_text(mrn) && !t.readable_in_text(kvnr));
        let specimen = t.kind_by_name("specimen").unwrap();
        assert_eq!(t.kind(specimen).unwrap().prefix, "specimen");
        assert_eq!(t.kind_for_path("/api/v2/specimens/x"), Some(specimen));
        assert_eq!(t.resource_type_kinds("Specimen"), Some(&[specimen][..]));
        assert_eq!(t.id_named_kind("specimen_id"), Some(specimen));
        // The built-in kinds are all there, unchanged.
        for (_, k) in defaults.kinds() {
            let id = t.kind_by_name(&k.name).unwrap();
            assert_eq!(t.kind(id), Some(k));
        }
        assert_ne!(t.digest(), defaults.digest());
    }

    #[test]
    fn file_kinds_replace_built_in_kinds_by_name_or_come_after_them() {
        let t = Taxonomy::from_json(
            br#"{"kinds":[{"name":"ward","prefix":"station","pathSegments":["stations"]},{"name":"bed","prefix":"bed"}]}"#,
        )
        .unwrap();
        let names: Vec<&str> = t.kinds().map(|(_, k)| k.name.as_str()).collect();
        let default_names: Vec<String> = Taxonomy::default()
            .kinds()
            .map(|(_, k)| k.name.clone())
            .collect();
        assert_eq!(names.len(), default_names.len() + 1);
        assert_eq!(
            names[..default_names.len()],
            default_names[..],
            "replaced in place"
        );
        assert_eq!(names.last(), Some(&"bed"));
        let ward = t.kind_by_name("ward").unwrap();
        assert_eq!(t.kind(ward).unwrap().prefix, "station");
        assert_eq!(t.kind_for_path("/api/v2/stations/x"), Some(ward));
        assert_eq!(t.kind_for_path("/api/v2/wards/x"), None, "replaced whole");

        let only = Taxonomy::from_json(
            br#"{"replaceDefaults":true,"kinds":[{"name":"thing","prefix":"thing"}],"fallbackKind":"thing"}"#,
        )
        .unwrap();
        assert_eq!(only.kind_count(), 1);
    }

    #[test]
    fn the_digest_names_the_merged_configuration() {
        let d = Taxonomy::default();
        assert_eq!(d.digest().len(), 64);
        assert!(d
            .digest()
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        // However the file spells the same taxonomy.
        assert_eq!(Taxonomy::from_json(b" { } ").unwrap().digest(), d.digest());
        let spelled_out = serde_json::json!({
            "replaceDefaults": true,
            "kinds": defaults::kinds(),
            "maxIdLen": 128,
        });
        let t = Taxonomy::from_json(spelled_out.to_string().as_bytes()).unwrap();
        assert_eq!(t.digest(), d.digest());
        let a = Taxonomy::from_json(EXAMPLE).unwrap();
        let mut reordered: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(EXAMPLE).unwrap();
        reordered.sort_keys();
        let b = Taxonomy::from_json(serde_json::to_string_pretty(&reordered).unwrap().as_bytes())
            .unwrap();
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a, b);
        // Any change is another digest.
        for changed in [
            &br#"{"maxIdLen":129}"#[..],
            br#"{"kinds":[{"name":"slot","prefix":"slot","idFields":["slotId"]}]}"#,
            br#"{"selfIdKeys":["id"]}"#,
        ] {
            let t = Taxonomy::from_json(changed).unwrap();
            assert_ne!(
                t.digest(),
                d.digest(),
                "{}",
                String::from_utf8_lossy(changed)
            );
            assert_ne!(t, d);
        }
        assert_ne!(Taxonomy::minimal().digest(), d.digest());
    }

    /// The digests of the built-in taxonomy and of the shipped example, as
    /// released: aliases and sessions on disk, and every filter and control
    /// of a deployment, are tied to them, so a refactoring of how the
    /// built-in kinds are written must leave them byte-identical.
    #[test]
    fn the_built_in_and_example_digests_are_pinned() {
        assert_eq!(
            Taxonomy::default().digest(),
            "c4840212ce80de710b5fe3e999125e249563c6ceca497e139e48f84e589530e5"
        );
        assert_eq!(Taxonomy::default().kind_count(), 23);
        assert_eq!(
            Taxonomy::from_json(EXAMPLE).unwrap().digest(),
            "a0b16dfca964db96c686b1e97ca4fd887c374045178c6a380574dfd6162d7aed"
        );
    }

    #[test]
    fn id_named_keys_match_in_any_case_and_separator_style() {
        let t = Taxonomy::default();
        let name = |key: &str| t.id_named_kind(key).map(|k| t.kind_name(k).to_owned());
        for key in [
            "patientId",
            "patient_id",
            "PatientID",
            "PATIENT_ID",
            "patient-id",
            "Patient-Id",
            "patient_Id",
            "patientIds",
            "patient_IDs",
            "patientUuid",
            "patient_uuid",
            "PatientUUID",
            "patient.id",
        ] {
            assert_eq!(name(key).as_deref(), Some("patient"), "{key}");
        }
        // A kind named by its stem only (no configured id field).
        for key in ["taskGroupUuid", "task_group_ids", "TaskGroupID"] {
            assert_eq!(name(key).as_deref(), Some("task-group"), "{key}");
        }
        for key in [
            "id",
            "ID",
            "_id",
            "Ids",
            "uuid",
            "UUID",
            "guid",
            "externalDocIds",
            "fooGUID",
            "address2Id",
        ] {
            assert_eq!(name(key).as_deref(), Some("record"), "{key}");
        }
        for key in [
            "paid",
            "PAID",
            "valid",
            "VALID",
            "grid",
            "squid",
            "Guidance",
            "idle",
            "",
            "requestId",
            "x-request-id",
            "X-Correlation-ID",
            "traceId",
            "parentSpanId",
            "session_id",
            "versionId",
            "version_id",
            "VersionID",
        ] {
            assert_eq!(name(key), None, "{key}");
        }
        // A version of something else is an id of the fallback kind.
        for key in ["documentVersionId", "reportVersion_id"] {
            assert_eq!(name(key).as_deref(), Some("record"), "{key}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let cases: [(&[u8], &str); 13] = [
            (br#"{"replaceDefaults":true,"kinds":[]}"#, "kinds"),
            (br#"{"kinds":[{"name":"a","prefix":"A"}],"fallbackKind":"a"}"#, "kinds[0].prefix"),
            (br#"{"kinds":[{"name":"a","prefix":"x-1"}],"fallbackKind":"a"}"#, "kinds[0].prefix"),
            (br#"{"kinds":[{"name":"a","prefix":"a"},{"name":"b","prefix":"a"}],"fallbackKind":"a"}"#, "kinds[1].prefix"),
            (
                br#"{"kinds":[{"name":"a","prefix":"a","idFields":["x"]},{"name":"b","prefix":"b","idFields":["x"]}],"fallbackKind":"a"}"#,
                "kinds[1].idFields[0]",
            ),
            (br#"{"replaceDefaults":true,"kinds":[{"name":"a","prefix":"a"}]}"#, "fallbackKind"),
            // A new kind taking a built-in kind's prefix or key.
            (br#"{"kinds":[{"name":"specimen","prefix":"patient"}]}"#, "kinds[0].prefix"),
            (br#"{"kinds":[{"name":"specimen","prefix":"specimen","pathSegments":["visits"]}]}"#, "kinds[0].pathSegments[0]"),
            // A replaced built-in kind taking a later built-in kind's key.
            (
                br#"{"kinds":[{"name":"patient","prefix":"patient","idFields":["visit_id"]}]}"#,
                "default kind \"visit\".idFields[0]",
            ),
            (br#"{"kinds":[{"name":"mrn","prefix":"mrn","identifierSystems":["urn:oid:"]}]}"#, "kinds[0].identifierSystems[0]"),
            (
                br#"{"kinds":[{"name":"a","prefix":"a","identifierSystems":["urn:oid:1.2"]},{"name":"b","prefix":"b","identifierSystems":["1.2"]}]}"#,
                "kinds[1].identifierSystems[0]",
            ),
            (br#"{"maxAliasesPerSession":0}"#, "maxAliasesPerSession"),
            (br#"{"prefixes":[]}"#, "prefixes"),
        ];
        for (json, field) in cases {
            let e = Taxonomy::from_json(json).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().starts_with(field), "{e}");
        }
    }

    proptest::proptest! {
        /// A table key spelled in any case, with separators anywhere, finds
        /// what the key finds: the quick "certainly not"s in front of the
        /// tables (first two bytes, then the pair sets) turn no key away.
        #[test]
        fn table_keys_are_found_in_any_spelling(
            pick in proptest::prelude::any::<proptest::sample::Index>(),
            upper in proptest::prelude::any::<u64>(),
            seps in proptest::collection::vec(
                (proptest::prelude::any::<proptest::sample::Index>(), proptest::sample::select(vec!['_', '-', '.', ' '])),
                0..3,
            ),
        ) {
            let t = Taxonomy::default();
            let keys: Vec<(u8, &str)> = t.path_segment.keys().map(|k| (0, k))
                .chain(t.object_key.keys().map(|k| (1, k)))
                .chain(t.key_role.keys().chain(t.id_field.keys()).map(|k| (2, k)))
                .collect();
            let (table, key) = keys[pick.index(keys.len())];
            let mut variant: String = key
                .chars()
                .enumerate()
                .map(|(i, c)| if upper >> (i % 64) & 1 == 1 { c.to_ascii_uppercase() } else { c })
                .collect();
            for (at, sep) in seps {
                variant.insert(at.index(variant.len() + 1), sep);
            }
            match table {
                0 => {
                    proptest::prop_assert!(t.path_segment_kind(key).is_some());
                    proptest::prop_assert_eq!(t.path_segment_kind(&variant), t.path_segment_kind(key), "{}", variant);
                }
                1 => {
                    proptest::prop_assert!(t.object_key_kind(key).is_some());
                    proptest::prop_assert_eq!(t.object_key_kind(&variant), t.object_key_kind(key), "{}", variant);
                    proptest::prop_assert_eq!(t.key_meaning(&variant).object_kind, t.object_key_kind(key), "{}", variant);
                }
                _ => {
                    let m = t.key_meaning(&variant);
                    proptest::prop_assert_eq!(m.role, t.key_role(key), "{}", variant);
                    if let Some(k) = t.id_field_kind(key) {
                        proptest::prop_assert_eq!(m.id_kind, Some(k), "{}", variant);
                    }
                }
            }
        }
    }
}
