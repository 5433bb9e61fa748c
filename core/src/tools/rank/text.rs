//! The embedding-text contract: the exact text a tool's passage embedding is
//! computed from.
//!
//! ```text
//! {id}\n{category}\n{ragDescription}\nKeywords:{keywords}
//! ```
//!
//! - `ragDescription` falls back to the request's description when the tool
//!   has no (or an empty) `ragDescription`;
//! - `category` is the empty string when unknown: the line stays, so the
//!   layout is positional and never shifts;
//! - keywords are joined with `", "` and the line reads `Keywords:` (no space,
//!   nothing after it) when there are none.
//!
//! This is frozen: every stored embedding depends on it. Changing a byte here
//! means re-embedding every registry, so a snapshot test pins it.

use super::meta::ToolMeta;

/// What the keywords are joined with.
pub const KEYWORD_SEPARATOR: &str = ", ";

/// The passage text of one tool.
///
/// `id` is the dotted tool id, `description` the description the request sent
/// (used when the overlay has no `ragDescription`), `meta` the overlay entry.
pub fn embedding_text(id: &str, description: &str, meta: Option<&ToolMeta>) -> String {
    let category = meta.and_then(|m| m.category.as_deref()).unwrap_or("");
    let rag = meta
        .and_then(|m| m.rag_description.as_deref())
        .filter(|s| !s.is_empty());
    let body = match rag {
        Some(r) => r,
        None if !description.is_empty() => description,
        None => meta.map_or("", |m| m.description.as_str()),
    };
    let keywords = meta.map_or(String::new(), |m| m.rag_keywords.join(KEYWORD_SEPARATOR));
    format!("{id}\n{category}\n{body}\nKeywords:{keywords}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::rank::meta::Overlay;

    fn overlay() -> Overlay {
        let catalog = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/catalog/tools.json"
        ));
        Overlay::from_json(catalog.as_bytes()).unwrap()
    }

    // Snapshot: these strings are the contract. Do not update them without a
    // re-index of every stored registry.
    #[test]
    fn snapshot_patient_search_smart() {
        let o = overlay();
        let m = o.get("patient.search.smart").unwrap();
        assert_eq!(
            embedding_text(&m.id, &m.description, Some(m)),
            "patient.search.smart\npatients\nUSE WHEN a patient is referred to by name or description ('Anna Schmidt', 'Herr Müller', 'Mme Dubois', 'the diabetic lady born 1950') and must be resolved to an id before any patient-scoped action; also for 'search/find/look up the patient' ('Patient suchen', 'rechercher le patient'). DO NOT USE WHEN an exact identifier such as MRN, insurance number or FHIR id is given (patient.search.exact) or the UUID is already known (patient.get); never for literature or guideline searches (research.pubmed.search).\nKeywords:find patient, search patient, patient name, date of birth, Patient suchen, Patientensuche, Geburtsdatum, rechercher un patient, nom du patient, date de naissance"
        );
    }

    #[test]
    fn snapshot_util_units_convert() {
        let o = overlay();
        let m = o.get("util.units.convert").unwrap();
        assert_eq!(
            embedding_text(&m.id, &m.description, Some(m)),
            "util.units.convert\nutilities\nUSE WHEN the user asks to convert a value between units ('umrechnen', 'convertir', '180 mg/dL in mmol/L'). DO NOT USE WHEN calculating a dose (medication.dose.calculate).\nKeywords:unit conversion, mg/dL, mmol/L, °F to °C, umrechnen, Einheiten, convertir, unités"
        );
    }

    #[test]
    fn without_metadata_the_layout_keeps_its_four_lines() {
        assert_eq!(
            embedding_text("calc.bmi", "Computes the body-mass index.", None),
            "calc.bmi\n\nComputes the body-mass index.\nKeywords:"
        );
    }

    #[test]
    fn empty_rag_description_falls_back_to_the_description() {
        let m: ToolMeta = serde_json::from_str(
            r#"{"id":"a.b","category":"x","ragDescription":"","ragKeywords":["k1","k2"]}"#,
        )
        .unwrap();
        assert_eq!(
            embedding_text("a.b", "Does a.", Some(&m)),
            "a.b\nx\nDoes a.\nKeywords:k1, k2"
        );
        // The request's description wins over the overlay's when both exist.
        let m2: ToolMeta = serde_json::from_str(r#"{"id":"a.b","description":"overlay"}"#).unwrap();
        assert_eq!(
            embedding_text("a.b", "", Some(&m2)),
            "a.b\n\noverlay\nKeywords:"
        );
    }
}
