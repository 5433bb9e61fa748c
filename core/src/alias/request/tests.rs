use super::*;
use crate::alias::{DecodedIds, IdInput, SessionMap};

fn session(tax: &Taxonomy) -> SessionMap {
    let mut m = SessionMap::new();
    let ids = [
        IdInput {
            value: "039b70b8-92f7-44b7-9c91-4e3f0e900c71".into(),
            kind: Some("patient".into()),
            form: None,
            group: Some(1),
        },
        IdInput {
            value: "pat-000123".into(),
            kind: Some("patient".into()),
            form: Some(Form::Fhir),
            group: Some(1),
        },
        IdInput {
            value: "81630f00-cc5c-48d4-b3b6-90cc29dbfb6e".into(),
            kind: Some("clinic".into()),
            form: None,
            group: Some(2),
        },
        IdInput {
            value: "clinic-berlin-mitte".into(),
            kind: Some("clinic".into()),
            form: Some(Form::Slug),
            group: Some(2),
        },
        IdInput {
            value: "task-0055101".into(),
            kind: Some("task".into()),
            form: Some(Form::Fhir),
            group: None,
        },
        IdInput {
            value: "a b/c".into(),
            kind: Some("record".into()),
            form: Some(Form::Slug),
            group: None,
        },
    ];
    assert_eq!(
        m.encode(tax, &ids).unwrap().aliases,
        [
            "patient-001",
            "patient-001",
            "clinic-001",
            "clinic-001",
            "task-001",
            "ref-001"
        ]
    );
    m
}

fn decode(tax: &Taxonomy, m: &SessionMap, scan: &RequestScan) -> Vec<Option<DecodedIds>> {
    scan.aliases()
        .iter()
        .map(|a| {
            m.decode(tax, a).map(|d| DecodedIds {
                alias: d.record.alias.clone(),
                kind: d.record.kind.clone(),
                ids: d.record.ids.clone(),
            })
        })
        .collect()
}

fn rewrite(path: &str, body: Option<&str>) -> Result<(String, Option<String>), RequestError> {
    let tax = Taxonomy::default();
    let m = session(&tax);
    let scan = RequestScan::new(&tax, path, body.map(|b| (b.as_bytes(), BodyKind::Json)))?;
    let decoded = decode(&tax, &m, &scan);
    scan.rewrite(&tax, path, body.map(str::as_bytes), &decoded)
        .map(|(p, b)| (p, b.map(|b| String::from_utf8(b).unwrap())))
}

#[test]
fn path_query_and_fhir_forms() {
    let (p, _) = rewrite("/api/v2/patients/patient-001/visits?clinicSlug=clinic-001&clinic=clinic-001&fhirId=patient-001", None).unwrap();
    assert_eq!(
        p,
        "/api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71/visits?clinicSlug=clinic-berlin-mitte&clinic=clinic-berlin-mitte&fhirId=pat-000123"
    );
    let (p, _) = rewrite("/fhir/R4/Patient/patient-001/$everything", None).unwrap();
    assert_eq!(p, "/fhir/R4/Patient/pat-000123/$everything");
    // A decoded id with reserved characters is percent-encoded in the path.
    let (p, _) = rewrite("/x/ref-001", None).unwrap();
    assert_eq!(p, "/x/a%20b%2Fc");
}

#[test]
fn json_body_keys_decide_the_form() {
    let body = r#"{"patientId":"patient-001","subject":{"reference":"Patient/patient-001"},"fhirId":"patient-001","items":["patient-001"],"note":"for patient-001\n(task-item-001)","n":7}"#;
    let (_, b) = rewrite("/api/v2/appointments", Some(body)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&b.unwrap()).unwrap();
    assert_eq!(v["patientId"], "039b70b8-92f7-44b7-9c91-4e3f0e900c71");
    assert_eq!(v["subject"]["reference"], "Patient/pat-000123");
    assert_eq!(v["fhirId"], "pat-000123");
    assert_eq!(v["items"][0], "039b70b8-92f7-44b7-9c91-4e3f0e900c71");
    assert_eq!(
        v["note"], "for 039b70b8-92f7-44b7-9c91-4e3f0e900c71\n(task-0055101)",
        "near-miss repaired to an issued alias"
    );
    assert_eq!(v["n"], 7);
}

/// With only `task-001` issued, `task-group-001` names a task group (its own
/// prefix), so it is refused wherever it stands instead of reaching HMS as
/// the task; `task-item-001` is the task's drift and decodes to it.
#[test]
fn a_drift_is_never_repaired_across_kinds() {
    for (path, body) in [
        ("/api/v2/task-groups/task-group-001", None),
        ("/api/v2/tasks?group=task-group-001", None),
        ("/api/v2/tasks", Some(r#"{"note":"see task-group-001"}"#)),
    ] {
        assert_eq!(
            rewrite(path, body).unwrap_err(),
            RequestError::UnknownAlias {
                alias: "task-group-001".into()
            },
            "{path} {body:?}"
        );
    }
    let (p, _) = rewrite("/api/v2/tasks/task-item-001", None).unwrap();
    assert_eq!(p, "/api/v2/tasks/task-0055101");
}

#[test]
fn unknown_foreign_and_sentinel_aliases_are_refused() {
    for (path, body, want) in [
        (
            "/api/v2/patients/patient-002",
            None,
            RequestError::UnknownAlias {
                alias: "patient-002".into(),
            },
        ),
        (
            "/api/v2/x",
            Some(r#"{"visitId":"visit-001"}"#),
            RequestError::UnknownAlias {
                alias: "visit-001".into(),
            },
        ),
        (
            "/api/v2/x?t=task-group-002",
            None,
            RequestError::UnknownAlias {
                alias: "task-group-002".into(),
            },
        ),
        (
            "/api/v2/patients/patient-000",
            None,
            RequestError::Sentinel {
                alias: "patient-000".into(),
            },
        ),
    ] {
        let err = rewrite(path, body).unwrap_err();
        assert_eq!(err, want);
        let text = err.to_string();
        assert!(text.contains(match &want {
            RequestError::UnknownAlias { alias } | RequestError::Sentinel { alias } =>
                alias.as_str(),
            _ => unreachable!(),
        }));
    }
    let tax = Taxonomy::default();
    let scan = RequestScan::new(&tax, "/p/patient-000", None).unwrap();
    assert_eq!(
        scan.sentinel(&tax),
        Some("patient-000"),
        "refusable without asking control"
    );
}

#[test]
fn ignores_what_is_not_an_alias() {
    let tax = Taxonomy::default();
    let scan = RequestScan::new(
        &tax,
        "/api/v2/patients/search?q=anna&date=2025-03-25",
        Some((br#"{"text":"patient-appt-x follow-up-001 Xpatient-001 patient-001x pat-000123","id":"patient-01"}"#, BodyKind::Json)),
    )
    .unwrap();
    assert!(scan.aliases().is_empty(), "{:?}", scan.aliases());
    assert!(RequestScan::new(&tax, "/", Some((b"{", BodyKind::Json))).is_err());
}

#[test]
fn an_alias_of_another_epoch_is_refused_as_from_an_earlier_map() {
    let tax = Taxonomy::default();
    let unknown = |a: &str| RequestError::UnknownAlias { alias: a.into() };
    let e = unknown("patient-k7q2-001").with_current_epoch(&tax, Some("m3p9"));
    assert_eq!(
        e,
        RequestError::EarlierMap {
            alias: "patient-k7q2-001".into(),
            current: "m3p9".into()
        }
    );
    assert!(e.to_string().contains("patient-k7q2-001") && e.to_string().contains("earlier map"));
    assert_eq!(e.alias(), Some("patient-k7q2-001"));
    // Same epoch (invented number), no epoch, or no current epoch known: unknown.
    for (alias, current) in [
        ("patient-k7q2-042", Some("k7q2")),
        ("patient-042", Some("k7q2")),
        ("patient-k7q2-042", None),
    ] {
        assert_eq!(
            unknown(alias).with_current_epoch(&tax, current),
            unknown(alias)
        );
    }
}

/// A session map with an epoch holding `n` patients, UUIDs only.
fn epoch_session(tax: &Taxonomy, n: u32) -> (SessionMap, crate::alias::Epoch, Vec<String>) {
    let epoch = crate::alias::Epoch::parse("k7q2").unwrap();
    let mut m = SessionMap::with_epoch(epoch);
    let uuids: Vec<String> = (1..=n)
        .map(|i| format!("00000000-0000-4000-8000-{i:012}"))
        .collect();
    let ids: Vec<IdInput> = uuids
        .iter()
        .map(|u| IdInput {
            value: u.clone(),
            kind: Some("patient".into()),
            form: None,
            group: None,
        })
        .collect();
    m.encode(tax, &ids).unwrap();
    (m, epoch, uuids)
}

fn rewrite_in(
    tax: &Taxonomy,
    m: &SessionMap,
    path: &str,
    body: Option<&str>,
) -> Result<(String, Option<String>), RequestError> {
    let scan = RequestScan::new(tax, path, body.map(|b| (b.as_bytes(), BodyKind::Json)))?;
    let decoded = decode(tax, m, &scan);
    scan.rewrite(tax, path, body.map(str::as_bytes), &decoded)
        .map(|(p, b)| (p, b.map(|b| String::from_utf8(b).unwrap())))
}

#[test]
fn percent_encoded_aliases_are_decoded_in_path_query_and_body() {
    let tax = Taxonomy::default();
    let (m, _, uuids) = epoch_session(&tax, 2);
    let u1 = &uuids[0];
    let (p, b) = rewrite_in(
        &tax,
        &m,
        "/api/v2/patients/patient%2Dk7q2%2D001?q=%20patient-k7q2-002%20&r=%70atient-k7q2-001",
        Some(r#"{"patientId":"patient%2dk7q2%2d001","next":"/p?id=%20patient-k7q2-001%20"}"#),
    )
    .unwrap();
    assert_eq!(
        p,
        format!("/api/v2/patients/{u1}?q=%20{}%20&r={u1}", uuids[1])
    );
    assert_eq!(
        b.unwrap(),
        format!(r#"{{"patientId":"{u1}","next":"/p?id=%20{u1}%20"}}"#)
    );
}

#[test]
fn near_misses_are_repaired_only_to_issued_aliases() {
    let tax = Taxonomy::default();
    let (m, _, uuids) = epoch_session(&tax, 12);
    for written in [
        "Patient-K7Q2-001",
        "PATIENT-k7q2-001",
        "patient-K7Q2-001",
        "patient-k7q2-1",
        "patient-k7q2-01",
        "patient-k7q2-0001",
        "Patient-K7q2-00001",
    ] {
        let (p, _) = rewrite_in(&tax, &m, &format!("/api/v2/patients/{written}"), None)
            .unwrap_or_else(|e| panic!("{written}: {e}"));
        assert_eq!(p, format!("/api/v2/patients/{}", uuids[0]), "{written}");
    }
    let (p, _) = rewrite_in(&tax, &m, "/api/v2/patients/patient-k7q2-12", None).unwrap();
    assert_eq!(p, format!("/api/v2/patients/{}", uuids[11]));
    // Not issued: refused, naming the alias as written.
    for written in [
        "Patient-K7Q2-013",
        "patient-k7q2-13",
        "patient-k7q2-0099",
        "PATIENT-M3P9-001",
    ] {
        let err = rewrite_in(&tax, &m, &format!("/api/v2/patients/{written}"), None).unwrap_err();
        assert_eq!(
            err,
            RequestError::UnknownAlias {
                alias: written.into()
            },
            "{written}"
        );
    }
    // A padded sentinel is the sentinel.
    let scan = RequestScan::new(&tax, "/p/patient-k7q2-0", None).unwrap();
    assert_eq!(scan.sentinel(&tax), Some("patient-k7q2-0"));
    // Epoch-less look-alikes are text: control issues no such alias.
    for text in ["Patient-001", "patient-1", "Task-7", "Visit-12"] {
        let scan = RequestScan::new(&tax, &format!("/x?note={text}"), None).unwrap();
        assert!(scan.aliases().is_empty(), "{text}: {:?}", scan.aliases());
    }
}

#[test]
fn epoch_aliases_glued_to_other_text_are_decoded_and_prose_is_not() {
    let tax = Taxonomy::default();
    let (m, _, uuids) = epoch_session(&tax, 3);
    let (u1, u2) = (&uuids[0], &uuids[1]);
    // Where HMS glued text to an id, keyhole wrote the alias with the same
    // text glued: an ETag version, a file name, a list in one token.
    let hs = headers(&[
        ("if-match", "\"patient-k7q2-001-v7\""),
        ("x-file", "Arztbrief_patient-k7q2-002_2025.pdf"),
        ("x-pair", "patient-k7q2-001_patient-k7q2-002"),
        (
            "x-note",
            "non-patient-care-100 wing-a2b3-001 patient-k7q2-001x",
        ),
    ]);
    let mut scan =
        RequestScan::new(&tax, "/api/v2/visits?etag=patient%2Dk7q2%2D002-v1", None).unwrap();
    scan.scan_headers(&tax, &hs);
    assert_eq!(scan.aliases(), ["patient-k7q2-002", "patient-k7q2-001"]);
    let decoded = decode(&tax, &m, &scan);
    let (p, _) = scan
        .rewrite(
            &tax,
            "/api/v2/visits?etag=patient%2Dk7q2%2D002-v1",
            None,
            &decoded,
        )
        .unwrap();
    assert_eq!(p, format!("/api/v2/visits?etag={u2}-v1"));
    let out = scan.rewrite_headers(&tax, &hs, &decoded).unwrap();
    assert_eq!(
        out,
        [
            (0, format!("\"{u1}-v7\"")),
            (1, format!("Arztbrief_{u2}_2025.pdf")),
            (2, format!("{u1}_{u2}")),
            (3, format!("non-patient-care-100 wing-a2b3-001 {u1}x")),
        ]
    );
    // A run of any length is read in linear time: 400,000 bytes of dashes or
    // underscores before the alias (quadratic, this would take minutes).
    for filler in ["a-", "a_", "ab9c-", "-"] {
        let run = format!(
            "{}patient-k7q2-001-v2",
            filler.repeat(400_000 / filler.len())
        );
        let mut scan = RequestScan::new(&tax, "/api/v2/visits", None).unwrap();
        scan.scan_headers(&tax, &headers(&[("if-match", run.as_str())]));
        assert_eq!(scan.aliases(), ["patient-k7q2-001"], "{filler}");
    }
    // Glued or not, an alias this session did not issue is refused.
    let hs = headers(&[("if-match", "\"patient-k7q2-009-v7\"")]);
    let mut scan = RequestScan::new(&tax, "/api/v2/visits", None).unwrap();
    scan.scan_headers(&tax, &hs);
    let decoded = decode(&tax, &m, &scan);
    assert_eq!(
        scan.rewrite_headers(&tax, &hs, &decoded),
        Err(RequestError::UnknownAlias {
            alias: "patient-k7q2-009".into()
        })
    );
}

#[test]
fn raw_id_shaped_values_are_counted_per_place_never_kept() {
    let tax = Taxonomy::default();
    let scan = RequestScan::new(
        &tax,
        "/api/v2/patients/482913/visits/039b70b8-92f7-44b7-9c91-4e3f0e900c71?ref=pat-000123",
        Some((
            br#"{"x":"039b70b892f744b79c914e3f0e900c71","note":"see PAT-000124","n":"%70at-000125"}"#,
            BodyKind::Json,
        )),
    )
    .unwrap();
    assert_eq!(
        scan.raw_ids(),
        RawIdCount {
            path: 2,
            query: 1,
            headers: 0,
            body: 3
        }
    );
    assert_eq!(
        scan.raw_ids().places(),
        [("path", 2), ("query", 1), ("body", 3)]
    );
    // Look-alikes that are not ids.
    let scan = RequestScan::new(
        &tax,
        "/api/v2/patients/search?q=anna&date=2025-03-25&dose=1-0-1-0",
        Some((
            br#"{"status":"in-progress","scope":"clinic-wide","icd":"E11.9","loinc":"4548-4","name":"Meyer-Schmidt","v":"v2-1"}"#,
            BodyKind::Json,
        )),
    )
    .unwrap();
    assert_eq!(scan.raw_ids(), RawIdCount::default());
}

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn aliases_in_headers_are_decoded_and_counted_with_the_rest() {
    let tax = Taxonomy::default();
    let m = session(&tax);
    let path = "/api/v2/patients/patient-001";
    let hs = headers(&[
        ("x-patient-id", "patient-001"),
        ("if-match", "\"task-001\""),
        ("referer", "http://hms/api/v2/clinics/clinic%2D001?x=1"),
        ("link", "</fhir/R4/Patient/patient-001>; rel=\"subject\""),
        ("x-record", "ref-001"),
        ("accept", "application/json"),
        ("x-raw", "pat-000999"),
    ]);
    let mut scan = RequestScan::new(&tax, path, None).unwrap();
    scan.scan_headers(&tax, &hs);
    assert_eq!(
        scan.aliases(),
        ["patient-001", "task-001", "clinic-001", "ref-001"]
    );
    assert_eq!(scan.raw_ids().headers, 1);
    let decoded = decode(&tax, &m, &scan);
    let (p, _) = scan.rewrite(&tax, path, None, &decoded).unwrap();
    assert_eq!(p, "/api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71");
    let out = scan.rewrite_headers(&tax, &hs, &decoded).unwrap();
    assert_eq!(
        out,
        [
            (0, "039b70b8-92f7-44b7-9c91-4e3f0e900c71".to_owned()),
            (1, "\"task-0055101\"".to_owned()),
            (
                2,
                "http://hms/api/v2/clinics/clinic-berlin-mitte?x=1".to_owned()
            ),
            (
                3,
                "</fhir/R4/Patient/pat-000123>; rel=\"subject\"".to_owned()
            ),
            // Reserved characters of an id never reach a header raw.
            (4, "a%20b%2Fc".to_owned()),
        ]
    );
    // An alias this session did not issue, in a header only: refused naming it.
    let hs = headers(&[("x-patient-id", "patient-077")]);
    let mut scan = RequestScan::new(&tax, "/api/v2/visits", None).unwrap();
    scan.scan_headers(&tax, &hs);
    let decoded = decode(&tax, &m, &scan);
    assert_eq!(
        scan.rewrite_headers(&tax, &hs, &decoded),
        Err(RequestError::UnknownAlias {
            alias: "patient-077".into()
        })
    );
    assert!(scan
        .rewrite(&tax, "/api/v2/visits", None, &decoded)
        .is_err());
}

/// How one alias occurrence is written.
#[derive(Debug, Clone, Copy)]
enum Variant {
    Exact,
    Upper,
    Capitalized,
    Unpadded,
    ExtraZero,
}

/// How it is encoded.
#[derive(Debug, Clone, Copy)]
enum Encoding {
    Plain,
    Dashes,
    Every,
    Spaces,
}

fn written(prefix: &str, epoch: &str, n: u32, v: Variant) -> String {
    match v {
        Variant::Exact => format!("{prefix}-{epoch}-{n:03}"),
        Variant::Upper => format!("{prefix}-{epoch}-{n:03}").to_ascii_uppercase(),
        Variant::Capitalized => {
            let s = format!("{prefix}-{epoch}-{n:03}");
            s[..1].to_ascii_uppercase() + &s[1..]
        }
        Variant::Unpadded => format!("{prefix}-{epoch}-{n}"),
        Variant::ExtraZero => format!("{prefix}-{epoch}-0{n:03}"),
    }
}

fn encode_as(token: &str, e: Encoding) -> String {
    match e {
        Encoding::Plain => token.to_owned(),
        Encoding::Dashes => token.replace('-', "%2D"),
        Encoding::Every => token.bytes().map(|b| format!("%{b:02x}")).collect(),
        Encoding::Spaces => format!("%20{token}%20"),
    }
}

fn variant() -> impl Strategy<Value = Variant> {
    prop_oneof![
        Just(Variant::Exact),
        Just(Variant::Upper),
        Just(Variant::Capitalized),
        Just(Variant::Unpadded),
        Just(Variant::ExtraZero)
    ]
}

fn encoding() -> impl Strategy<Value = Encoding> {
    prop_oneof![
        Just(Encoding::Plain),
        Just(Encoding::Dashes),
        Just(Encoding::Every),
        Just(Encoding::Spaces)
    ]
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Aliases in every position (path, query, JSON id field, JSON prose), in
    /// every spelling and encoding: issued ones decode exactly to their
    /// patient; a foreign one (another epoch, or a number never issued)
    /// refuses the request naming it as written.
    #[test]
    fn generated_requests_decode_exactly_or_are_refused(
        slots in prop::collection::vec((1u32..=20, variant(), encoding(), 0u8..8), 4),
    ) {
        let tax = Taxonomy::default();
        let (m, epoch, uuids) = epoch_session(&tax, 20);
        let mut tokens = Vec::new();
        let mut expect = Vec::new();
        let mut first_foreign: Option<String> = None;
        for (i, (n, v, e, foreign)) in slots.iter().enumerate() {
            // 0: another epoch; 1: a number never issued; else issued.
            let (ep, num) = match foreign {
                0 => ("m3p9", *n),
                1 => (epoch.as_str(), 900 + i as u32),
                _ => (epoch.as_str(), *n),
            };
            let w = written("patient", ep, num, *v);
            if *foreign < 2 && first_foreign.is_none() {
                first_foreign = Some(w.clone());
            }
            tokens.push(encode_as(&w, *e));
            let u = uuids[(*n - 1) as usize].clone();
            expect.push(match e {
                Encoding::Spaces => format!("%20{u}%20"),
                _ => u,
            });
        }
        let path = format!("/api/v2/patients/{}/visits?x={}", tokens[0], tokens[1]);
        let body = format!(r#"{{"patientId":"{}","note":"for {} today"}}"#, tokens[2], tokens[3]);
        let got = rewrite_in(&tax, &m, &path, Some(&body));
        match first_foreign {
            Some(w) => prop_assert_eq!(got.unwrap_err(), RequestError::UnknownAlias { alias: w }),
            None => {
                let (p, b) = got.unwrap();
                prop_assert_eq!(p, format!("/api/v2/patients/{}/visits?x={}", expect[0], expect[1]));
                prop_assert_eq!(b.unwrap(), format!(r#"{{"patientId":"{}","note":"for {} today"}}"#, expect[2], expect[3]));
            }
        }
    }
}

// === An alias decodes only where its kind fits ===

/// A patient (UUID and FHIR id), an observation, a visit, a record of the
/// fallback kind known by a FHIR id only (an `Immunization/example`) and one
/// known by a UUID only: `patient-001`, `observation-001`, `visit-001`,
/// `ref-001`, `ref-002`.
fn kinds_session(tax: &Taxonomy) -> SessionMap {
    let id = |value: &str, kind: &str, form: Option<Form>, group: Option<u32>| IdInput {
        value: value.into(),
        kind: Some(kind.into()),
        form,
        group,
    };
    let mut m = SessionMap::new();
    let e = m
        .encode(
            tax,
            &[
                id(
                    "039b70b8-92f7-44b7-9c91-4e3f0e900c71",
                    "patient",
                    None,
                    Some(1),
                ),
                id("pat-000123", "patient", Some(Form::Fhir), Some(1)),
                id("obs-0042", "observation", Some(Form::Fhir), None),
                id("enc-0077", "visit", Some(Form::Fhir), None),
                id("example", "record", Some(Form::Fhir), None),
                id("5b0c6c57-8f43-4f4e-a3f3-7a1b2c3d4e5f", "record", None, None),
            ],
        )
        .unwrap();
    assert_eq!(
        e.aliases,
        [
            "patient-001",
            "patient-001",
            "observation-001",
            "visit-001",
            "ref-001",
            "ref-002"
        ]
    );
    m
}

fn wrong_kind(alias: &str, kind: &str, wanted: &str) -> RequestError {
    RequestError::WrongKind {
        alias: alias.into(),
        kind: kind.into(),
        wanted: wanted.into(),
    }
}

/// The red team's case: an observation's alias under `/fhir/Patient/` reached
/// HMS as `Patient/<the observation's id>`, another record (FHIR ids are
/// unique per resource type only). In a FHIR path or reference, a path
/// segment after a kind's segment, a query parameter, a JSON key or a header
/// of a kind, an alias of another kind is refused, naming the alias.
#[test]
fn an_alias_of_another_kind_in_a_kinds_place_is_refused() {
    let tax = Taxonomy::default();
    let m = kinds_session(&tax);
    for (path, body, want) in [
        (
            "/fhir/Patient/observation-001",
            None,
            wrong_kind("observation-001", "observation", "patient"),
        ),
        (
            "/fhir/R4/Patient/observation-001/$everything",
            None,
            wrong_kind("observation-001", "observation", "patient"),
        ),
        (
            "/api/v2/patients/observation-001",
            None,
            wrong_kind("observation-001", "observation", "patient"),
        ),
        (
            "/api/v2/patients/patient-001/visits/observation-001",
            None,
            wrong_kind("observation-001", "observation", "visit"),
        ),
        (
            "/fhir/Observation?subject=Patient/observation-001",
            None,
            wrong_kind("observation-001", "observation", "patient"),
        ),
        (
            "/fhir/Observation?subject=Patient%2Fobservation-001",
            None,
            wrong_kind("observation-001", "observation", "patient"),
        ),
        (
            "/api/v2/appointments?patientId=visit-001",
            None,
            wrong_kind("visit-001", "visit", "patient"),
        ),
        // A FHIR search parameter named for a kind (its object key).
        (
            "/fhir/Observation?patient=observation-001",
            None,
            wrong_kind("observation-001", "observation", "patient"),
        ),
        (
            "/fhir/Observation?subject=ref-001&_count=5",
            None,
            wrong_kind("ref-001", "record", "patient"),
        ),
        (
            "/api/v2/notes",
            Some(r#"{"patientId":"observation-001"}"#),
            wrong_kind("observation-001", "observation", "patient"),
        ),
        (
            "/api/v2/notes",
            Some(r#"{"patientIds":["patient-001","visit-001"]}"#),
            wrong_kind("visit-001", "visit", "patient"),
        ),
        (
            "/api/v2/notes",
            Some(r#"{"subject":{"reference":"Patient/observation-001"}}"#),
            wrong_kind("observation-001", "observation", "patient"),
        ),
        (
            "/fhir/Observation/patient-001",
            None,
            wrong_kind("patient-001", "patient", "observation"),
        ),
        // An unconfigured FHIR type names records of the fallback kind only.
        (
            "/fhir/Immunization/patient-001",
            None,
            wrong_kind("patient-001", "patient", "record"),
        ),
        // A record of unknown kind known by a FHIR id: under `Patient/` its
        // id would name whichever patient has it.
        (
            "/fhir/Patient/ref-001",
            None,
            wrong_kind("ref-001", "record", "patient"),
        ),
    ] {
        assert_eq!(
            rewrite_in(&tax, &m, path, body).unwrap_err(),
            want,
            "{path} {body:?}"
        );
    }
    let scan_headers = |hs: &[(String, String)]| {
        let mut scan = RequestScan::new(&tax, "/api/v2/x", None).unwrap();
        scan.scan_headers(&tax, hs);
        let decoded = decode(&tax, &m, &scan);
        scan.rewrite_headers(&tax, hs, &decoded)
    };
    assert_eq!(
        scan_headers(&headers(&[("x-patient-id", "observation-001")])).unwrap_err(),
        wrong_kind("observation-001", "observation", "patient")
    );
    assert_eq!(
        wrong_kind("observation-001", "observation", "patient").to_string(),
        "alias \"observation-001\" names a record of kind observation, not patient: it cannot stand here"
    );
}

/// Where the place names no kind, or a kind the record may also be read as,
/// the alias decodes as before.
#[test]
fn an_alias_decodes_where_its_kind_fits_or_no_kind_is_named() {
    let tax = Taxonomy::default();
    let m = kinds_session(&tax);
    for (path, body, want_path, want_body) in [
        (
            "/fhir/Patient/patient-001",
            None,
            "/fhir/Patient/pat-000123",
            None,
        ),
        (
            "/fhir/Observation/observation-001",
            None,
            "/fhir/Observation/obs-0042",
            None,
        ),
        (
            "/api/v2/vitals/observation-001",
            None,
            "/api/v2/vitals/obs-0042",
            None,
        ),
        // A visit and an encounter are one FHIR Encounter.
        (
            "/fhir/Encounter/visit-001",
            None,
            "/fhir/Encounter/enc-0077",
            None,
        ),
        (
            "/api/v2/x?encounterId=visit-001",
            None,
            "/api/v2/x?encounterId=enc-0077",
            None,
        ),
        (
            "/fhir/Observation?patient=patient-001",
            None,
            "/fhir/Observation?patient=039b70b8-92f7-44b7-9c91-4e3f0e900c71",
            None,
        ),
        (
            "/fhir/Observation?subject=ref-002",
            None,
            "/fhir/Observation?subject=5b0c6c57-8f43-4f4e-a3f3-7a1b2c3d4e5f",
            None,
        ),
        // Object keys in a body stay kind-neutral.
        (
            "/api/v2/x",
            Some(r#"{"participants":["patient-001"]}"#),
            "/api/v2/x",
            Some(r#"{"participants":["039b70b8-92f7-44b7-9c91-4e3f0e900c71"]}"#),
        ),
        // Kind-neutral places: prose, a search, an `id`, an unnamed segment.
        (
            "/api/v2/search?q=observation-001",
            None,
            "/api/v2/search?q=obs-0042",
            None,
        ),
        (
            "/api/v2/patients/search/observation-001",
            None,
            "/api/v2/patients/search/obs-0042",
            None,
        ),
        (
            "/api/v2/notes",
            Some(r#"{"id":"observation-001","text":"for patient-001 see observation-001"}"#),
            "/api/v2/notes",
            Some(
                r#"{"id":"obs-0042","text":"for 039b70b8-92f7-44b7-9c91-4e3f0e900c71 see obs-0042"}"#,
            ),
        ),
        // The fallback kind: its own FHIR types, and by UUID anywhere (a
        // UUID names one record whatever its type).
        (
            "/fhir/Immunization/ref-001",
            None,
            "/fhir/Immunization/example",
            None,
        ),
        (
            "/api/v2/patients/ref-002",
            None,
            "/api/v2/patients/5b0c6c57-8f43-4f4e-a3f3-7a1b2c3d4e5f",
            None,
        ),
    ] {
        let (p, b) =
            rewrite_in(&tax, &m, path, body).unwrap_or_else(|e| panic!("{path} {body:?}: {e}"));
        assert_eq!(p, want_path, "{path}");
        assert_eq!(b.as_deref(), want_body, "{path}");
    }
}

// === Raw ids the model could only have from outside keyhole ===

/// The red team's raw ids that reached HMS under `raw_ids: refuse`: a UUID
/// glued with `_` in a path segment, `If-Match: "<uuid>-v7"`, a number after
/// a FHIR resource type in a path and in a query reference, and a raw id in
/// the authority. Each is counted in its place now.
#[test]
fn glued_typed_numeric_and_authority_raw_ids_are_counted() {
    let tax = Taxonomy::default();
    let u = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let count = |path: &str, hs: &[(&str, &str)], body: Option<&str>| {
        let mut scan =
            RequestScan::new(&tax, path, body.map(|b| (b.as_bytes(), BodyKind::Json))).unwrap();
        scan.scan_headers(&tax, &headers(hs));
        scan.raw_ids()
    };
    let raw = |path, query, headers, body| RawIdCount {
        path,
        query,
        headers,
        body,
    };
    for (path, hs, body, want) in [
        (
            format!("/api/v2/documents/Arztbrief_{u}_2025.pdf"),
            vec![],
            None,
            raw(1, 0, 0, 0),
        ),
        (
            format!("/api/v2/documents/{u}_v2"),
            vec![],
            None,
            raw(1, 0, 0, 0),
        ),
        (
            "/api/v2/documents/befund_pat-000123_2025".to_owned(),
            vec![],
            None,
            raw(1, 0, 0, 0),
        ),
        (
            format!("/api/v2/x?file=scan_{}", u.replace('-', "")),
            vec![],
            None,
            raw(0, 1, 0, 0),
        ),
        (
            "/api/v2/visits/v1".to_owned(),
            vec![("if-match", format!("\"{u}-v7\""))],
            None,
            raw(0, 0, 1, 0),
        ),
        (
            "/api/v2/visits/v1".to_owned(),
            vec![("if-match", "W/\"pat-000123-v7\"".to_owned())],
            None,
            raw(0, 0, 1, 0),
        ),
        (
            "/fhir/Patient/482913".to_owned(),
            vec![],
            None,
            raw(1, 0, 0, 0),
        ),
        (
            "/fhir/R4/Patient/482913/_history/2".to_owned(),
            vec![],
            None,
            raw(1, 0, 0, 0),
        ),
        (
            "/fhir/Observation?subject=Patient/482913".to_owned(),
            vec![],
            None,
            raw(0, 1, 0, 0),
        ),
        (
            "/fhir/Observation?subject=Patient%2F482913&_count=20".to_owned(),
            vec![],
            None,
            raw(0, 1, 0, 0),
        ),
        (
            "/fhir/Observation".to_owned(),
            vec![],
            Some(r#"{"subject":{"reference":"Patient/482913"}}"#),
            raw(0, 0, 0, 1),
        ),
        (
            "/api/v2/x".to_string(),
            vec![("x-note", format!("Befund_{u}"))],
            Some(&*format!(r#"{{"f":"a_{u}"}}"#)),
            raw(0, 0, 1, 1),
        ),
    ] {
        let hs: Vec<(&str, &str)> = hs.iter().map(|(n, v)| (*n, v.as_str())).collect();
        assert_eq!(count(&path, &hs, body), want, "{path} {hs:?} {body:?}");
    }
    let mut scan = RequestScan::new(&tax, "/api/v2/x", None).unwrap();
    scan.scan_authority(&tax, &format!("{u}.hms.internal:8443"));
    assert_eq!(scan.raw_ids().headers, 1);
    assert!(scan.aliases().is_empty());
    let mut scan = RequestScan::new(&tax, "/api/v2/x", None).unwrap();
    scan.scan_authority(&tax, "hms.internal:8443");
    assert_eq!(scan.raw_ids(), RawIdCount::default());
}

/// Aliases glued to text stay aliases (decoded, never counted raw), and
/// look-alikes beside FHIR types and in glued text are not ids.
#[test]
fn glued_aliases_and_look_alikes_are_not_raw_ids() {
    let tax = Taxonomy::default();
    for (path, hs) in [
        (
            "/api/v2/documents/Arztbrief_patient-k7q2-002_2025.pdf",
            vec![("if-match", "\"patient-k7q2-001-v7\"")],
        ),
        ("/fhir/Patient/patient-k7q2-001/_history/2", vec![]),
        (
            "/fhir/Patient?_count=50&birthdate=2025-03-25",
            vec![("if-none-match", "W/\"7\"")],
        ),
        (
            "/fhir/Observation?code=http://loinc.org|4548-4&value-quantity=5.4",
            vec![],
        ),
        (
            "/api/v2/reports/report_2025-03_final?dose=1-0-1-0&v=v2-1",
            vec![("x-file", "scan_2025_v2.pdf")],
        ),
        (
            "/fhir/metadata",
            vec![("x-note", "Observation/ CodeSystem/2 R4/482913 page_2")],
        ),
    ] {
        let mut scan = RequestScan::new(&tax, path, None).unwrap();
        scan.scan_headers(&tax, &headers(&hs));
        assert_eq!(scan.raw_ids(), RawIdCount::default(), "{path} {hs:?}");
    }
}

/// A text keyhole decoded from the body counts its raw ids as the body's
/// and names its first alias (the filter refuses that request).
#[test]
fn hidden_texts_count_raw_ids_and_name_their_aliases() {
    let tax = Taxonomy::default();
    let mut scan = RequestScan::new(&tax, "/api/v2/notes", None).unwrap();
    assert_eq!(
        scan.scan_hidden(
            &tax,
            "Befund 039b70b8-92f7-44b7-9c91-4e3f0e900c71, /fhir/Patient/482913"
        ),
        None
    );
    assert_eq!(
        scan.raw_ids(),
        RawIdCount {
            body: 2,
            ..RawIdCount::default()
        }
    );
    assert_eq!(
        scan.scan_hidden(&tax, "für Patient-K7Q2-1 und patient-k7q2-002"),
        Some("Patient-K7Q2-1".to_owned())
    );
    assert!(scan.aliases().is_empty(), "a hidden alias is never decoded");
    assert_eq!(scan.scan_hidden(&tax, "nothing here, 2025-03-25"), None);
    assert_eq!(scan.raw_ids().body, 2);
}

#[test]
fn a_hidden_json_text_is_read_with_its_escapes() {
    let tax = Taxonomy::default();
    let mut scan = RequestScan::new(&tax, "/api/v2/notes", None).unwrap();
    assert_eq!(
        scan.scan_hidden(
            &tax,
            r#"{"note":"\u0070at-000123","a":"\u0070atient-k7q2-001"}"#
        ),
        Some("patient-k7q2-001".to_owned())
    );
    assert_eq!(scan.raw_ids().body, 1);
}

fn raw_id() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<u128>(), any::<bool>()).prop_map(|(n, upper)| {
            let h = format!("{n:032x}");
            let u = format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            );
            if upper {
                u.to_ascii_uppercase()
            } else {
                u
            }
        }),
        any::<u128>().prop_map(|n| format!("a1{:030x}", n >> 8)),
        (
            prop::sample::select(vec!["pat", "enc", "obs", "PAT", "Enc", "prac"]),
            1u64..1_000_000_000
        )
            .prop_map(|(p, n)| format!("{p}-{n:06}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A raw id (UUID in either case, 32 hex digits, a prefixed FHIR id),
    /// alone or glued by `_` or `-` to words, a date or an ETag version, is
    /// counted once in its place (path segment, query value, header, JSON
    /// string); the same text around an issued alias counts nothing and
    /// finds the alias.
    #[test]
    fn glued_raw_ids_are_counted_wherever_they_stand(
        id in raw_id(),
        before in prop::sample::select(vec!["", "Arztbrief_", "scan_", "x-", "_", "W-"]),
        after in prop::sample::select(vec!["", "_2025", "-v7", "_v2", "-final", "_"]),
        place in 0..4usize,
    ) {
        let tax = Taxonomy::default();
        let count = |token: &str| {
            let (path, hs, body) = match place {
                0 => (format!("/api/v2/documents/{token}.pdf"), Vec::new(), None),
                1 => (format!("/api/v2/x?file={token}"), Vec::new(), None),
                2 => ("/api/v2/x".to_owned(), vec![("if-match".to_owned(), format!("\"{token}\""))], None),
                _ => ("/api/v2/x".to_owned(), Vec::new(), Some(format!(r#"{{"f":"{token}"}}"#))),
            };
            let mut scan = RequestScan::new(&tax, &path, body.as_deref().map(|b| (b.as_bytes(), BodyKind::Json))).unwrap();
            scan.scan_headers(&tax, &hs);
            let raw = scan.raw_ids();
            ([raw.path, raw.query, raw.headers, raw.body], scan.aliases().to_vec())
        };
        let mut want = [0; 4];
        want[place] = 1;
        let (raw, aliases) = count(&format!("{before}{id}{after}"));
        prop_assert_eq!(raw, want, "{}{}{}", before, id, after);
        prop_assert!(aliases.is_empty());
        let (raw, aliases) = count(&format!("{before}patient-k7q2-001{after}"));
        prop_assert_eq!(raw, [0; 4]);
        prop_assert_eq!(aliases, ["patient-k7q2-001"]);
    }
}

/// Every record kind of the built-in taxonomy in every place that names a
/// kind (each of its FHIR resource types in a path, a query reference and a
/// body reference; each of its path segments; each of its object keys as a
/// query parameter; each of its id fields as a query parameter and a JSON
/// key; an unconfigured FHIR type for the
/// fallback kind): the rewrite succeeds exactly where the configuration
/// says the two kinds can be one FHIR record (the same kind, or a shared
/// resource type or FHIR id prefix), with that record's id; everywhere
/// else it is refused naming the alias. The expectation is computed from
/// the kind configurations, not by `Taxonomy::kinds_may_meet`.
#[test]
fn every_kind_in_every_kinds_place_decodes_only_where_it_fits() {
    use crate::alias::taxonomy::{defaults, KindConfig};
    let tax = Taxonomy::default();
    let configs = defaults::kinds();
    let meet = |a: &KindConfig, b: &KindConfig| {
        a.name == b.name
            || a.resource_types
                .iter()
                .any(|t| b.resource_types.contains(t))
            || a.fhir_prefixes.iter().any(|p| b.fhir_prefixes.contains(p))
    };
    let mut m = SessionMap::new();
    let ids: Vec<IdInput> = configs
        .iter()
        .enumerate()
        .map(|(i, k)| IdInput {
            value: format!("rec{i}-{i:04}"),
            kind: Some(k.name.clone()),
            form: Some(Form::Fhir),
            group: None,
        })
        .collect();
    let aliases = m.encode(&tax, &ids).unwrap().aliases;
    let fallback = tax.kind_name(tax.fallback_kind()).to_owned();
    let (mut decoded, mut refused) = (0, 0);
    for (pi, place_kind) in configs.iter().enumerate() {
        let mut places: Vec<(String, Option<String>)> = Vec::new();
        let types: Vec<&str> = if place_kind.name == fallback {
            vec!["Immunization"]
        } else {
            place_kind
                .resource_types
                .iter()
                .map(String::as_str)
                .collect()
        };
        for t in types {
            places.push((format!("/fhir/{t}/@"), None));
            places.push((format!("/fhir/Observation?subject={t}/@"), None));
            places.push((
                "/api/v2/x".to_owned(),
                Some(format!(r#"{{"x":{{"reference":"{t}/@"}}}}"#)),
            ));
        }
        for seg in &place_kind.path_segments {
            places.push((format!("/api/v2/{seg}/@"), None));
        }
        for o in &place_kind.object_keys {
            places.push((format!("/fhir/x?{o}=@"), None));
        }
        for f in &place_kind.id_fields {
            places.push((format!("/api/v2/x?{f}=@"), None));
            places.push(("/api/v2/x".to_owned(), Some(format!(r#"{{"{f}":"@"}}"#))));
        }
        assert!(!places.is_empty(), "{} names no place", place_kind.name);
        for (ri, record_kind) in configs.iter().enumerate() {
            let alias = &aliases[ri];
            for (path, body) in &places {
                let (path, body) = (
                    path.replace('@', alias),
                    body.as_ref().map(|b| b.replace('@', alias)),
                );
                let got = rewrite_in(&tax, &m, &path, body.as_deref());
                let ctx = format!(
                    "{} record {alias} in a {} place: {path} {body:?}",
                    record_kind.name, configs[pi].name
                );
                if meet(record_kind, place_kind) {
                    let (p, b) = got.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    let out = format!("{p} {}", b.unwrap_or_default());
                    assert!(
                        out.contains(&ids[ri].value) && !out.contains(alias.as_str()),
                        "{ctx}: {out}"
                    );
                    decoded += 1;
                } else {
                    match got {
                        Err(RequestError::WrongKind { alias: a, .. }) => {
                            assert_eq!(&a, alias, "{ctx}")
                        }
                        other => panic!("{ctx}: {other:?}"),
                    }
                    refused += 1;
                }
            }
        }
    }
    assert!(
        decoded > 100 && refused > 1000,
        "{decoded} decoded, {refused} refused"
    );
}
