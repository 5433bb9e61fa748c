use super::*;
use crate::alias::SessionMap;

fn run(
    tax: &Taxonomy,
    body: &[u8],
    kind: BodyKind,
    root: Option<&str>,
) -> (Vec<u8>, ResponseScan<'static>, SessionMap) {
    let tax: &'static Taxonomy = Box::leak(Box::new(tax.clone()));
    let mut scan = ResponseScan::new(tax);
    let part = scan
        .add(body, kind, root.and_then(|r| tax.kind_by_name(r)))
        .unwrap();
    let mut session = SessionMap::new();
    let aliases = session.encode(tax, scan.ids()).unwrap().aliases;
    (scan.rewrite(part, body, &aliases).unwrap(), scan, session)
}

const U: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";

#[test]
fn groups_an_objects_own_ids_and_reads_its_kind() {
    let tax = Taxonomy::default();
    let body = format!(
        r#"{{"resourceType":"Appointment","id":"appt-1","subject":{{"reference":"Patient/pat-9"}},"patient":{{"id":"{U}","fhirId":"pat-9","display":"x"}},"slot":{{"id":"slot-a-1"}}}}"#
    );
    let (out, scan, _) = run(&tax, body.as_bytes(), BodyKind::Json, None);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"resourceType":"Appointment","id":"patient-appt-001","subject":{"reference":"Patient/patient-001"},"patient":{"id":"patient-001","fhirId":"patient-001","display":"x"},"slot":{"id":"slot-001"}}"#
    );
    let grouped: Vec<&IdInput> = scan.ids().iter().filter(|i| i.group.is_some()).collect();
    assert_eq!(grouped.len(), 2, "{:?}", scan.ids());
    assert!(grouped.iter().all(|i| i.kind.as_deref() == Some("patient")));
}

#[test]
fn root_kind_applies_to_the_primary_record_only() {
    let tax = Taxonomy::default();
    let body = format!(
        r#"{{"data":[{{"id":"{U}","owner":{{"id":"6e0ba0c4-6d7a-4c43-a0b6-3bfa7a6f6f11"}}}}]}}"#
    );
    let (_, scan, _) = run(&tax, body.as_bytes(), BodyKind::Json, Some("visit"));
    let kind_of = |v: &str| {
        scan.ids()
            .iter()
            .find(|i| i.value == v)
            .unwrap()
            .kind
            .clone()
            .unwrap()
    };
    assert_eq!(kind_of(U), "visit");
    assert_eq!(kind_of("6e0ba0c4-6d7a-4c43-a0b6-3bfa7a6f6f11"), "record");
}

#[test]
fn escaped_strings_and_keys_are_rewritten() {
    let tax = Taxonomy::default();
    let body = format!(
        r#"{{"href":"\/api\/v2\/patients\/{U}","{U}":"note\n{U}","slug":"clinic-x-1","msg":"at\tclinic-x-1\u0021"}}"#
    );
    let (out, _, _) = run(&tax, body.as_bytes(), BodyKind::Json, None);
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains(U) && !text.contains("clinic-x-1"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["href"], "/api/v2/patients/patient-001");
    assert_eq!(v["patient-001"], "note\npatient-001");
    assert_eq!(v["msg"], "at\tref-001!");
}

#[test]
fn known_values_are_replaced_only_at_token_boundaries() {
    let tax = Taxonomy::default();
    let body = br#"{"slotId":"slot-im-1","a":"slot-im-1 and slot-im-12 and xslot-im-1","n":1}"#;
    let (out, _, _) = run(&tax, body, BodyKind::Json, None);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"slotId":"slot-001","a":"slot-001 and slot-im-12 and xslot-im-1","n":1}"#
    );
}

#[test]
fn text_bodies_and_headers() {
    let tax = Taxonomy::default();
    let text = format!("Location: /api/v2/patients/{U}\nsee Patient/pat-1 and prac-00042.\n");
    let (out, _, _) = run(&tax, text.as_bytes(), BodyKind::Text, None);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "Location: /api/v2/patients/patient-001\nsee Patient/patient-002 and practitioner-001.\n"
    );
    // Not UTF-8 still works: ids are ASCII.
    let mut bytes = b"\xff\xfe ".to_vec();
    bytes.extend_from_slice(U.as_bytes());
    let (out, _, _) = run(&tax, &bytes, BodyKind::Text, None);
    assert_eq!(
        out,
        b"\xff\xfe ref-001".to_vec(),
        "no context: the fallback kind"
    );
}

#[test]
fn two_parts_share_one_batch() {
    let tax = Taxonomy::default();
    let mut scan = ResponseScan::new(&tax);
    let body = br#"{"slug":"ward-4a-bm"}"#;
    let header = b"/wards/ward-4a-bm";
    let b = scan.add(body, BodyKind::Json, None).unwrap();
    let h = scan.add(header, BodyKind::Text, None).unwrap();
    assert_eq!(scan.ids().len(), 1);
    let aliases = vec!["ward-001".to_owned()];
    assert_eq!(
        scan.rewrite(b, body, &aliases).unwrap(),
        br#"{"slug":"ward-001"}"#
    );
    assert_eq!(
        scan.rewrite(h, header, &aliases).unwrap(),
        b"/wards/ward-001"
    );
}

#[test]
fn fails_closed() {
    let tax = Taxonomy::default();
    let mut scan = ResponseScan::new(&tax);
    assert!(matches!(
        scan.add(b"{\"id\":", BodyKind::Json, None),
        Err(RewriteError::Json(_))
    ));
    let body = format!(r#"{{"id":"{U}"}}"#);
    let part = scan.add(body.as_bytes(), BodyKind::Json, None).unwrap();
    // Wrong alias count, wrong body, empty alias.
    assert!(matches!(
        scan.rewrite(part, body.as_bytes(), &[]),
        Err(RewriteError::AliasCount { .. })
    ));
    assert!(matches!(
        scan.rewrite(part, b"{}", &["x-001".into()]),
        Err(RewriteError::WrongBody { .. })
    ));
    assert!(matches!(
        scan.rewrite(part, body.as_bytes(), &[String::new()]),
        Err(RewriteError::EmptyAlias { .. })
    ));
    // Verification: an alias that carries another raw id back in is refused,
    // and the error names an offset, never the id.
    let body = format!(r#"{{"a":"{U}","b":"pat-7"}}"#);
    let mut s3 = ResponseScan::new(&tax);
    let p3 = s3.add(body.as_bytes(), BodyKind::Json, None).unwrap();
    let names: Vec<String> = s3
        .ids()
        .iter()
        .map(|i| {
            if i.value == U {
                "see pat-7".into()
            } else {
                "y-001".into()
            }
        })
        .collect();
    let e = s3.rewrite(p3, body.as_bytes(), &names).unwrap_err();
    assert!(matches!(e, RewriteError::Leak { at: 10 }), "{e}");
    assert!(!e.to_string().contains("pat-7"));
    let names: Vec<String> = s3
        .ids()
        .iter()
        .map(|i| {
            if i.value == U {
                "x-001".into()
            } else {
                "y-001".into()
            }
        })
        .collect();
    assert_eq!(
        s3.rewrite(p3, body.as_bytes(), &names).unwrap(),
        br#"{"a":"x-001","b":"y-001"}"#
    );
}

mod generator;
