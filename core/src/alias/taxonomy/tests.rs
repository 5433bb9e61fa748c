use super::*;
use crate::alias::id::Form;

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
    let b =
        Taxonomy::from_json(serde_json::to_string_pretty(&reordered).unwrap().as_bytes()).unwrap();
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

/// The shipped `builtin.json` parses, lists the 23 built-in kinds, and read
/// as an operator's file (`"replaceDefaults": true`) it is the built-in
/// taxonomy: the same digest, pinned above.
#[test]
fn the_built_in_file_parses_and_is_the_default_taxonomy() {
    let kinds = builtin::kinds().unwrap();
    assert_eq!(kinds.len(), 23);
    assert_eq!(kinds.first().map(|k| k.name.as_str()), Some("patient"));
    assert_eq!(kinds.last().map(|k| k.prefix.as_str()), Some("ref"));
    let as_file = Taxonomy::from_json(builtin::BUILTIN_JSON.as_bytes()).unwrap();
    assert_eq!(as_file.digest(), Taxonomy::default().digest());
    assert_eq!(
        as_file.digest(),
        "c4840212ce80de710b5fe3e999125e249563c6ceca497e139e48f84e589530e5"
    );
    let names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
    let visit = names.iter().position(|n| *n == "visit").unwrap();
    let encounter = names.iter().position(|n| *n == "encounter").unwrap();
    assert!(
        visit < encounter,
        "a bare Encounter/enc-… is read as the visit"
    );
    let clinic = kinds.iter().find(|k| k.name == "clinic").unwrap();
    assert_eq!(clinic.preferred_form, Some(Form::Slug));
}

/// A built-in file that does not parse, does not replace the defaults, or
/// sets a field other than `kinds` is an error naming `builtin.json`, never a
/// panic; a taxonomy built over it falls back to one kind.
#[test]
fn a_broken_built_in_file_is_an_error_value() {
    let cases: [(&str, &str); 5] = [
        ("{", "builtin.json: <root>"),
        (
            r#"{"replaceDefaults":true,"kinds":[{"name":"a"}]}"#,
            "builtin.json: prefix",
        ),
        (
            r#"{"kinds":[{"name":"a","prefix":"a"}]}"#,
            "builtin.json: replaceDefaults",
        ),
        (
            r#"{"replaceDefaults":true,"kinds":[{"name":"a","prefix":"a"}],"maxIdLen":200}"#,
            "builtin.json",
        ),
        (
            r#"{"replaceDefaults":true,"kinds":[{"name":"a","prefix":"a","colour":"red"}]}"#,
            "builtin.json: colour",
        ),
    ];
    for (json, field) in cases {
        let e = builtin::kinds_of(json).unwrap_err();
        assert_eq!(e.field, field, "{json}: {e}");
    }
    let ok = builtin::kinds_of(r#"{"replaceDefaults":true,"kinds":[{"name":"a","prefix":"a"}]}"#)
        .unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(Taxonomy::minimal().kind_count(), 1);
}

/// A kind's `description` is for the reader: it changes neither the digest
/// nor any lookup, and must not be blank when given.
#[test]
fn a_description_is_documentation_only() {
    let plain = Taxonomy::from_json(
        br#"{"kinds":[{"name":"specimen","prefix":"specimen","pathSegments":["specimens"]}]}"#,
    )
    .unwrap();
    let described = Taxonomy::from_json(
        br#"{"kinds":[{"name":"specimen","prefix":"specimen","pathSegments":["specimens"],
            "description":"Lab specimens, by accession."}]}"#,
    )
    .unwrap();
    assert_eq!(described.digest(), plain.digest());
    let specimen = described.kind_by_name("specimen").unwrap();
    assert_eq!(
        described.kind_for_path("/api/v2/specimens/x"),
        Some(specimen)
    );
    let e = Taxonomy::from_json(
        br#"{"kinds":[{"name":"specimen","prefix":"specimen","description":"  "}]}"#,
    )
    .unwrap_err();
    assert_eq!(e.field, "kinds[0].description", "{e}");
}
