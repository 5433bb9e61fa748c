use super::*;
use crate::alias::{IdInput, SessionMap};

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
    let body = r#"{"patientId":"patient-001","subject":{"reference":"Patient/patient-001"},"fhirId":"patient-001","items":["patient-001"],"note":"for patient-001\n(task-group-001)","n":7}"#;
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
        assert_eq!(unknown(alias).with_current_epoch(&tax, current), unknown(alias));
    }
}
