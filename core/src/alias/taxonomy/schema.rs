//! The taxonomy file as written: [`TaxonomyConfig`] and its [`KindConfig`]s,
//! deserialised (`deny_unknown_fields`) but not validated. An operator's file,
//! the `taxonomy` member of the filter's configuration and the built-in
//! taxonomy (`builtin.json`, [`super::builtin`]) are all read by
//! [`TaxonomyConfig::from_json`] / [`TaxonomyConfig::from_value`];
//! [`super::validate`] turns the result into a [`super::Taxonomy`].
//!
//! Fields other than `kinds` default to the values documented on them (the
//! HMS API's); the built-in kinds are not defaults of this schema but a file
//! in it, merged in by [`super::validate`].

use crate::alias::id::Form;
use serde::{Deserialize, Serialize};

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
    /// Free text for the reader of the file: why the kind exists or sits
    /// where it does (the built-in visit says why it comes before the
    /// encounter). It changes no behaviour, so it is not serialized and no
    /// part of the [digest](super::Taxonomy::digest); when given it must not
    /// be blank.
    #[serde(default, skip_serializing)]
    pub description: Option<String>,
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

/// The taxonomy as written: an operator's file, or the built-in one
/// (`builtin.json`). Every field may be omitted: `{}` is the built-in HMS
/// taxonomy.
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
    /// alone: those of `core/src/alias/taxonomy/builtin.json` (patient,
    /// appointment = `patient-appt`, visit, encounter, task-group, task,
    /// prescription, practitioner, clinic, department, ward, location, slot,
    /// observation, condition, allergy, coverage, note, order, report,
    /// contact, user, record = `ref`).
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

/// The defaults of the fields other than `kinds`, as documented on each.
mod defaults {
    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
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

/// A taxonomy configuration error, naming the field (`kinds[3].prefix`).
pub type TaxonomyError = crate::field::FieldError;

/// A [`TaxonomyError`] at `field`.
pub(super) fn err(field: impl Into<String>, message: impl Into<String>) -> TaxonomyError {
    TaxonomyError {
        field: field.into(),
        message: message.into(),
    }
}
