//! The catalog's HMS response samples (`../shared/catalog/hms_samples`) and
//! the leak oracle: every raw id of an HMS body found by shape alone, with no
//! knowledge of keyhole's rules, so that a test can assert that none of them
//! reached the client. core's golden tests (in process) and the end-to-end
//! tests (through Envoy and control) use the same list and the same oracle.

use regex::Regex;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::LazyLock;

/// `../shared/catalog` next to the repository, or `$KEYHOLE_CATALOG`.
pub fn catalog() -> PathBuf {
    std::env::var_os("KEYHOLE_CATALOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/catalog"))
}

/// Every sample file with the HMS request path it answers (from the catalog
/// README), in file order.
pub const SAMPLES: [(&str, &str); 8] = [
    (
        "01_patients.search.json",
        "/api/v2/patients/search?q=anna%20schmidt",
    ),
    (
        "02_patient.detail.json",
        "/api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71",
    ),
    (
        "03_appointments.list.json",
        "/api/v2/appointments?practitionerId=0ac775b2-ad2e-4163-99ac-3a87a51d563e",
    ),
    (
        "04_visit.detail.json",
        "/api/v2/visits/10c85729-d6ad-4aca-820e-d8626e93e35d",
    ),
    (
        "05_prescription.detail.json",
        "/api/v2/prescriptions/69d3e45a-488e-411b-a82d-240378a07637",
    ),
    (
        "06_task-group.detail.json",
        "/api/v2/task-groups/14164bd6-1627-4547-8c46-6476270980f7",
    ),
    (
        "07_appointment.create.response.json",
        "/api/v2/appointments",
    ),
    ("08_error.appointment-conflict.json", "/api/v2/appointments"),
];

/// The samples as (file name, request path, body). Panics with the file
/// name when one cannot be read: the samples are part of every test run.
pub fn samples() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let dir = catalog().join("hms_samples");
    SAMPLES
        .into_iter()
        .map(|(file, path)| {
            let body = std::fs::read(dir.join(file))
                .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()));
            (file, path, body)
        })
        .collect()
}

/// The sample whose file name starts with `prefix` (`"04"`). Panics when
/// there is none.
pub fn sample(prefix: &str) -> (&'static str, &'static str, Vec<u8>) {
    samples()
        .into_iter()
        .find(|(f, _, _)| f.starts_with(prefix))
        .unwrap_or_else(|| panic!("no HMS sample starts with {prefix:?}"))
}

/// The raw-id shapes of the catalog (its README lists them): UUIDs in any
/// letter case and wherever they stand, prefixed FHIR ids with any number of
/// digits, and the clinic, department, ward, slot and location slugs.
const SHAPES: &[&str] = &[
    r"(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    r"\b(?:pat|enc|appt|mr|prac|task|obs|tg|cond|allg|cov|comp|sr|dr|oo|loc)-[0-9]+\b",
    r"\bclinic-berlin-[a-z]+\b",
    r"\b[a-z]+-medicine-bm\b",
    r"\bward-[0-9a-z]+-bm\b",
    r"\bslot-im-bm-[0-9]{8}-[0-9]{4}\b",
    r"\bloc-im-bm-[0-9]+-[0-9]+\b",
];

/// The id of a FHIR reference (`Patient/<id>`) of the resource types the
/// samples hold: whatever its shape, it is a raw id.
const REFERENCE: &str = r"\b(?:Patient|Practitioner|Appointment|Encounter|Location|Slot|MedicationRequest|ServiceRequest|DiagnosticReport|Task|Organization)/([A-Za-z0-9.\-]*[A-Za-z0-9])";

static ORACLE: LazyLock<(Vec<Regex>, Regex)> = LazyLock::new(|| {
    let shapes = SHAPES
        .iter()
        .map(|p| Regex::new(p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .collect();
    let reference = Regex::new(REFERENCE).unwrap_or_else(|e| panic!("{REFERENCE}: {e}"));
    (shapes, reference)
});

/// Every raw id in an HMS body (or header text), found by shape alone: the
/// [`SHAPES`] wherever they stand (values, URLs, prose, keys) and the id of
/// every FHIR reference. Meant for what HMS sent, never for what keyhole
/// answered: an HMS value shaped like an alias (`ext-prac-20981`) is a raw id
/// like any other, so nothing alias-shaped is left out.
pub fn raw_ids(text: &str) -> BTreeSet<String> {
    let (shapes, reference) = &*ORACLE;
    let mut out = BTreeSet::new();
    for shape in shapes {
        out.extend(shape.find_iter(text).map(|m| m.as_str().to_owned()));
    }
    out.extend(
        reference
            .captures_iter(text)
            .filter_map(|c| c.get(1))
            .map(|m| m.as_str().to_owned()),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oracle_finds_every_shape_and_short_fhir_ids() {
        let text = "x5D0C7E2A-41b3-4f6e-9a8d-2c7b1e0f3a94 pat-7 oo-5521 Organization/org-1 \
                    Practitioner/ext-prac-20981 ward-4a-bm internal-medicine-bm \
                    slot-im-bm-20250325-1030 loc-im-bm-4-12 clinic-berlin-mitte";
        let found = raw_ids(text);
        for id in [
            "5D0C7E2A-41b3-4f6e-9a8d-2c7b1e0f3a94",
            "pat-7",
            "oo-5521",
            "org-1",
            "ext-prac-20981",
            "ward-4a-bm",
            "internal-medicine-bm",
            "slot-im-bm-20250325-1030",
            "loc-im-bm-4-12",
            "clinic-berlin-mitte",
        ] {
            assert!(found.contains(id), "{id} not in {found:?}");
        }
    }

    #[test]
    fn the_oracle_leaves_look_alikes_alone() {
        let text = "2025-03-25 J18.9 follow-up COVID-19 patients-1 expat-12 rev-3";
        assert_eq!(raw_ids(text), BTreeSet::new());
    }

    #[test]
    fn every_sample_is_read_with_at_least_three_raw_ids() {
        let all = samples();
        assert_eq!(all.len(), SAMPLES.len());
        for (file, _, body) in all {
            let text = String::from_utf8(body).expect("UTF-8 sample");
            let ids = raw_ids(&text);
            assert!(ids.len() >= 3, "{file}: {ids:?}");
        }
    }
}
