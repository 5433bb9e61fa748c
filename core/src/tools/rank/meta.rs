//! The metadata overlay: what an operator knows about a tool beyond its name
//! and description, and the mapping between request names and tool ids.
//!
//! The overlay file has the format of the catalog's `tools.json`: a JSON array
//! of descriptors keyed by dotted id. Every field but `id` is optional, so an
//! overlay can carry as much or as little as is known; unknown fields (such as
//! `parameters`) are ignored because the overlay is a view on a richer file.
//!
//! Request bodies carry OpenAI-safe function names (`patient__search__smart`),
//! the overlay carries ids (`patient.search.smart`): [`NameMapping`] converts
//! between the two and is configuration.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which plane a tool belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plane {
    /// May be offered to the model.
    #[default]
    Business,
    /// Planner-internal: never a business candidate.
    Control,
}

/// What a tool does to the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Reads only.
    Read,
    /// Creates or changes data.
    Write,
    /// Deletes or voids data.
    Delete,
}

impl Op {
    /// Whether the operation changes the record (write or delete).
    pub fn mutates(self) -> bool {
        !matches!(self, Op::Read)
    }
}

/// A tool's policy class: the verb and its risk tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyClass {
    /// `read` or `mutate`.
    pub verb: String,
    /// `LOW` or `HIGH`.
    pub tier: String,
}

/// One overlay entry, keyed by [`ToolMeta::id`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolMeta {
    /// Dotted tool id (`patient.search.smart`).
    pub id: String,
    /// Business or control plane (business when absent).
    #[serde(default)]
    pub plane: Plane,
    /// Functional area (`appointments`).
    #[serde(default)]
    pub category: Option<String>,
    /// Domain used by domain scoping (`clinical`, `administrative`, …).
    #[serde(default)]
    pub domain: Option<String>,
    /// Entity group shared by read, write and display siblings.
    #[serde(default)]
    pub semantic_group: Option<String>,
    /// Read, write or delete.
    #[serde(default)]
    pub op: Option<Op>,
    /// Verb and risk tier.
    #[serde(default)]
    pub policy_class: Option<PolicyClass>,
    /// The call acts on one patient's chart.
    #[serde(default)]
    pub requires_patient: bool,
    /// At least one of these parameters must be set.
    #[serde(default)]
    pub requires_one_of: Vec<String>,
    /// The one-sentence description the request bodies send.
    #[serde(default)]
    pub description: String,
    /// Retrieval text (`USE WHEN … DO NOT USE WHEN …`), never sent to the model.
    #[serde(default)]
    pub rag_description: Option<String>,
    /// Retrieval keywords, mixed languages, never sent to the model.
    #[serde(default)]
    pub rag_keywords: Vec<String>,
}

impl ToolMeta {
    /// Whether the tool may change the record. A tool whose op is unknown is
    /// treated as mutating: the formatter phase must never see a write by
    /// accident.
    pub fn mutates(&self) -> bool {
        match (self.op, &self.policy_class) {
            (Some(op), _) => op.mutates(),
            (None, Some(pc)) => pc.verb != "read",
            (None, None) => true,
        }
    }
}

/// Why an overlay or a name mapping was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetaError {
    /// The overlay is not a JSON array of descriptors.
    #[error("metadata overlay is not a JSON array of tool descriptors: {source}")]
    Json {
        /// The parser's complaint (line and column included).
        #[source]
        source: serde_json::Error,
    },
    /// Two entries share an id.
    #[error("metadata overlay: tool id {id:?} appears more than once")]
    DuplicateId {
        /// The repeated id.
        id: String,
    },
    /// An entry has an empty id.
    #[error("metadata overlay: entry {index} has an empty id")]
    EmptyId {
        /// Position in the array.
        index: usize,
    },
    /// A separator is empty or both separators are equal.
    #[error("names.{field}: {problem}")]
    BadSeparator {
        /// `idSeparator` or `nameSeparator`.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// The overlay: tool metadata by id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overlay {
    by_id: BTreeMap<String, ToolMeta>,
}

impl Overlay {
    /// Parses an overlay file (a JSON array in the format of `tools.json`).
    ///
    /// Fails on malformed JSON, an empty id or a repeated id.
    pub fn from_json(bytes: &[u8]) -> Result<Self, MetaError> {
        let entries: Vec<ToolMeta> =
            serde_json::from_slice(bytes).map_err(|source| MetaError::Json { source })?;
        Self::try_from_entries(entries)
    }

    /// Builds an overlay from entries. Fails on an empty or a repeated id.
    pub fn try_from_entries(entries: Vec<ToolMeta>) -> Result<Self, MetaError> {
        let mut by_id = BTreeMap::new();
        for (index, meta) in entries.into_iter().enumerate() {
            if meta.id.is_empty() {
                return Err(MetaError::EmptyId { index });
            }
            let id = meta.id.clone();
            if by_id.insert(id.clone(), meta).is_some() {
                return Err(MetaError::DuplicateId { id });
            }
        }
        Ok(Overlay { by_id })
    }

    /// The entry for a tool id.
    pub fn get(&self, id: &str) -> Option<&ToolMeta> {
        self.by_id.get(id)
    }

    /// All entries, ordered by id.
    pub fn iter(&self) -> impl Iterator<Item = &ToolMeta> {
        self.by_id.values()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the overlay has no entries.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// The mapping between tool ids and the function names requests carry.
///
/// The catalog's rule is `.` ↔ `__`: ids never contain `_`, so the inverse is
/// unambiguous. Other registries may use other separators, or none: both
/// separators empty means function names are the ids ([`NameMapping::identity`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NameMapping {
    /// Separator inside tool ids (`.`).
    pub id_separator: String,
    /// What the separator becomes in function names (`__`).
    pub name_separator: String,
}

impl Default for NameMapping {
    fn default() -> Self {
        NameMapping {
            id_separator: ".".into(),
            name_separator: "__".into(),
        }
    }
}

impl NameMapping {
    /// The mapping of registries whose function names are their ids.
    pub fn identity() -> Self {
        NameMapping {
            id_separator: String::new(),
            name_separator: String::new(),
        }
    }

    /// Whether names are ids (both separators empty).
    pub fn is_identity(&self) -> bool {
        self.id_separator.is_empty() && self.name_separator.is_empty()
    }

    /// Checks that both separators are non-empty and differ, or are both
    /// empty (the identity).
    pub fn validate(&self) -> Result<(), MetaError> {
        if self.is_identity() {
            return Ok(());
        }
        if self.id_separator.is_empty() {
            return Err(MetaError::BadSeparator {
                field: "idSeparator",
                problem: "must not be empty",
            });
        }
        if self.name_separator.is_empty() {
            return Err(MetaError::BadSeparator {
                field: "nameSeparator",
                problem: "must not be empty",
            });
        }
        if self.id_separator == self.name_separator {
            return Err(MetaError::BadSeparator {
                field: "nameSeparator",
                problem: "must differ from idSeparator",
            });
        }
        Ok(())
    }

    /// The tool id of a function name (`patient__search__smart` → `patient.search.smart`).
    pub fn to_id(&self, name: &str) -> String {
        if self.is_identity() {
            return name.to_owned();
        }
        name.replace(&self.name_separator, &self.id_separator)
    }

    /// The function name of a tool id (`patient.search.smart` → `patient__search__smart`).
    pub fn to_name(&self, id: &str) -> String {
        if self.is_identity() {
            return id.to_owned();
        }
        id.replace(&self.id_separator, &self.name_separator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const CATALOG: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/catalog/tools.json"
    ));

    #[test]
    fn catalog_overlay_loads_with_its_two_control_tools() {
        let overlay = Overlay::from_json(CATALOG.as_bytes()).unwrap();
        assert_eq!(overlay.len(), 110);
        let control: Vec<&str> = overlay
            .iter()
            .filter(|m| m.plane == Plane::Control)
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(control, ["referents.resolve", "tool.search"]);
        let booking = overlay.get("appointment.manage").unwrap();
        assert_eq!(booking.op, Some(Op::Write));
        assert!(booking.requires_patient && booking.mutates());
        assert_eq!(booking.requires_one_of, ["patientId", "appointmentId"]);
        assert_eq!(booking.semantic_group.as_deref(), Some("appointment"));
        assert!(!overlay.get("patient.search.smart").unwrap().mutates());
    }

    #[test]
    fn catalog_names_map_both_ways() {
        let m = NameMapping::default();
        assert_eq!(m.to_name("patient.search.smart"), "patient__search__smart");
        assert_eq!(m.to_id("patient__search__smart"), "patient.search.smart");
        let overlay = Overlay::from_json(CATALOG.as_bytes()).unwrap();
        for meta in overlay.iter() {
            let name = m.to_name(&meta.id);
            assert!(!name.contains('.'), "{name}");
            assert_eq!(m.to_id(&name), meta.id);
        }
    }

    #[test]
    fn custom_separators_map_and_bad_ones_are_rejected() {
        let m = NameMapping {
            id_separator: "/".into(),
            name_separator: "-".into(),
        };
        m.validate().unwrap();
        assert_eq!(m.to_name("labs/order"), "labs-order");
        let same = NameMapping {
            id_separator: ".".into(),
            name_separator: ".".into(),
        };
        assert_eq!(
            same.validate().unwrap_err().to_string(),
            "names.nameSeparator: must differ from idSeparator"
        );
        let empty = NameMapping {
            id_separator: String::new(),
            name_separator: "__".into(),
        };
        assert!(empty.validate().is_err());
        let identity = NameMapping::identity();
        identity.validate().unwrap();
        assert_eq!(
            identity.to_id("Image::charcoal__get"),
            "Image::charcoal__get"
        );
        assert_eq!(identity.to_name("math.factorial"), "math.factorial");
    }

    #[test]
    fn overlay_rejects_duplicates_and_empty_ids() {
        let dup = br#"[{"id":"a.b"},{"id":"a.b"}]"#;
        assert_eq!(
            Overlay::from_json(dup).unwrap_err().to_string(),
            "metadata overlay: tool id \"a.b\" appears more than once"
        );
        assert!(matches!(
            Overlay::from_json(br#"[{"id":""}]"#),
            Err(MetaError::EmptyId { index: 0 })
        ));
        assert!(matches!(
            Overlay::from_json(b"{}"),
            Err(MetaError::Json { .. })
        ));
    }

    #[test]
    fn unknown_op_counts_as_mutating() {
        let o = Overlay::from_json(
            br#"[{"id":"x"},{"id":"y","policyClass":{"verb":"read","tier":"LOW"}}]"#,
        )
        .unwrap();
        assert!(o.get("x").unwrap().mutates());
        assert!(!o.get("y").unwrap().mutates());
    }
}
