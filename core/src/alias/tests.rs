//! Golden tests on the HMS samples and property tests of the whole flow:
//! scan → encode → rewrite → verify, and request decode.

use super::*;
use keyhole_testkit::hms::{raw_ids as oracle, samples};
use proptest::prelude::*;
use serde_json::Value;
use std::collections::BTreeSet;

mod repair;
mod requests;

/// Processes a response in one session, as the filter and control do.
fn process(tax: &Taxonomy, session: &mut SessionMap, path: &str, body: &[u8]) -> Vec<u8> {
    let mut scan = ResponseScan::new(tax);
    let part = scan
        .add(body, BodyKind::Json, tax.kind_for_path(path))
        .unwrap();
    let aliases = session.encode(tax, scan.ids()).unwrap().aliases;
    scan.rewrite(part, body, &aliases).unwrap()
}

/// Every string of a JSON value with its pointer.
fn strings(v: &Value, at: String, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((at, s.clone())),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| strings(x, format!("{at}/{i}"), out)),
        Value::Object(o) => o
            .iter()
            .for_each(|(k, x)| strings(x, format!("{at}/{k}"), out)),
        _ => {}
    }
}

/// Replaces every string by a marker: what must survive a rewrite untouched.
fn skeleton(v: &Value) -> Value {
    match v {
        Value::String(_) => Value::String(String::new()),
        Value::Array(a) => Value::Array(a.iter().map(skeleton).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), skeleton(x))).collect())
        }
        other => other.clone(),
    }
}

#[test]
fn golden_no_raw_id_survives_any_sample() {
    let tax = Taxonomy::default();
    let mut session = SessionMap::new();
    let mut total = 0;
    for (name, path, body) in samples() {
        let text = String::from_utf8(body.clone()).unwrap();
        let raw = oracle(&text);
        assert!(raw.len() >= 3, "{name}: oracle found only {raw:?}");
        total += raw.len();
        let out = process(&tax, &mut session, path, &body);
        let out_text = String::from_utf8(out.clone()).unwrap();
        for id in &raw {
            assert!(
                !out_text.contains(id.as_str()),
                "{name}: raw id {id} survived"
            );
        }
        // Same document shape; strings without ids unchanged.
        let (a, b): (Value, Value) = (
            serde_json::from_slice(&body).unwrap(),
            serde_json::from_slice(&out).unwrap(),
        );
        assert_eq!(skeleton(&a), skeleton(&b), "{name}: structure changed");
        let (mut sa, mut sb) = (Vec::new(), Vec::new());
        strings(&a, String::new(), &mut sa);
        strings(&b, String::new(), &mut sb);
        for ((p, x), (_, y)) in sa.iter().zip(&sb) {
            if !raw.iter().any(|id| x.contains(id.as_str())) {
                assert_eq!(x, y, "{name}: {p} changed although it holds no id");
            }
        }
        // Whitespace and layout are the original's: only string contents moved.
        assert_eq!(text.lines().count(), out_text.lines().count(), "{name}");
    }
    assert!(total > 100, "oracle found {total} ids");
}

fn find<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} missing"))
}

#[test]
fn golden_aliases_are_stable_and_create_response_dedups() {
    let tax = Taxonomy::default();
    let mut session = SessionMap::new();
    let mut out = std::collections::BTreeMap::new();
    for (name, path, body) in samples() {
        let o: Value = serde_json::from_slice(&process(&tax, &mut session, path, &body)).unwrap();
        out.insert(name[..2].to_owned(), o);
    }
    // Anna Maria Schmidt is patient-001 everywhere.
    let anna = find(&out["01"], "/data/0/id");
    assert_eq!(anna, "patient-001");
    assert_eq!(find(&out["01"], "/data/0/fhirId"), anna);
    assert_eq!(find(&out["02"], "/data/id"), anna);
    assert_eq!(
        find(&out["02"], "/data/fhirReference"),
        format!("Patient/{anna}")
    );
    assert_eq!(find(&out["04"], "/data/patient/id"), anna);
    assert_eq!(find(&out["08"], "/errors/1/relatedPatients/0/id"), anna);
    assert!(find(&out["08"], "/errors/1/message")
        .contains(&format!("Requested patient {anna} (Patient/{anna})")));
    // The booked follow-up in the list: uuid and FHIR id share one alias.
    let list = out["03"]["data"].as_array().unwrap();
    let booked = list
        .iter()
        .find(|a| a["start"] == "2025-03-25T10:30:00+01:00")
        .unwrap();
    let appt = booked["id"].as_str().unwrap();
    assert!(appt.starts_with("patient-appt-"), "{appt}");
    assert_eq!(booked["fhirId"], appt);
    // The FHIR-only create response, processed later, gets the same alias.
    assert_eq!(find(&out["07"], "/fhirId"), appt);
    assert_eq!(
        find(&out["07"], "/reference"),
        format!("Appointment/{appt}")
    );
    assert!(find(&out["07"], "/location").contains(&format!("/Appointment/{appt}/_history/1")));
    assert_eq!(
        find(&out["06"], "/data/tasks/2/output/0/reference"),
        format!("Appointment/{appt}")
    );
    // The visit is a visit (path kind), its encounters are encounters.
    assert!(find(&out["04"], "/data/id").starts_with("visit-"));
    assert!(find(&out["04"], "/data/encounters/0/id").starts_with("encounter-"));
    assert_eq!(
        find(&out["04"], "/data/encounters/0/partOf"),
        format!("Encounter/{}", find(&out["04"], "/data/id"))
    );
    assert_eq!(
        find(&out["05"], "/data/visit/id"),
        find(&out["04"], "/data/id")
    );
    // The clinic slug keeps one alias across the {uuid, slug} object and the slug alone.
    assert_eq!(
        find(&out["03"], "/data/0/clinic/slug"),
        find(&out["01"], "/data/0/clinic/id")
    );
    // Prose and URLs.
    let detail = find(&out["08"], "/detail");
    assert!(detail.starts_with("Slot slot-"), "{detail}");
    assert!(detail.contains("practitioner practitioner-"), "{detail}");
    assert_eq!(
        session
            .decode(&tax, find(&out["05"], "/data/id"))
            .unwrap()
            .record
            .ids
            .fhir_id
            .as_deref(),
        Some("mr-0007731")
    );
}

#[test]
fn golden_any_order_of_samples_is_conflict_free() {
    let tax = Taxonomy::default();
    let all = samples();
    let n = all.len();
    let mut orders: Vec<Vec<usize>> = (0..n)
        .map(|r| (0..n).map(|i| (i + r) % n).collect())
        .collect();
    orders.push((0..n).rev().collect());
    orders.push(vec![6, 7, 5, 2, 0, 4, 3, 1]);
    for order in orders {
        let mut session = SessionMap::new();
        for &i in &order {
            let (name, path, body) = &all[i];
            let mut scan = ResponseScan::new(&tax);
            let part = scan
                .add(body, BodyKind::Json, tax.kind_for_path(path))
                .unwrap();
            let enc = session
                .encode(&tax, scan.ids())
                .unwrap_or_else(|e| panic!("order {order:?} at {name}: {e}"));
            scan.rewrite(part, body, &enc.aliases).unwrap();
        }
        // Re-fetching everything mints nothing.
        let before = session.len();
        for (_, path, body) in &all {
            let mut scan = ResponseScan::new(&tax);
            scan.add(body, BodyKind::Json, tax.kind_for_path(path))
                .unwrap();
            assert!(session.encode(&tax, scan.ids()).unwrap().changes.is_empty());
        }
        assert_eq!(session.len(), before);
    }
}

#[test]
fn round_trip_request_built_from_aliases_reaches_real_ids() {
    let tax = Taxonomy::default();
    let mut session = SessionMap::new();
    let (_, path, body) = &samples()[3];
    let out: Value = serde_json::from_slice(&process(&tax, &mut session, path, body)).unwrap();
    let visit = find(&out, "/data/id").to_owned();
    let patient = find(&out, "/data/patient/id").to_owned();
    let clinic = find(&out, "/data/clinic/slug").to_owned();
    let req_path =
        format!("/api/v2/patients/{patient}/visits?visitId={visit}&fhir=Encounter/{visit}");
    let req_body = format!(
        r#"{{"patientId":"{patient}","fhirId":"{visit}","clinicSlug":"{clinic}","note":"re: task-group-001\n{patient}"}}"#
    );
    let scan =
        RequestScan::new(&tax, &req_path, Some((req_body.as_bytes(), BodyKind::Json))).unwrap();
    let decoded: Vec<Option<DecodedIds>> = scan
        .aliases()
        .iter()
        .map(|a| {
            session.decode(&tax, a).map(|d| DecodedIds {
                alias: d.record.alias.clone(),
                kind: d.record.kind.clone(),
                ids: d.record.ids.clone(),
            })
        })
        .collect();
    let err = scan
        .rewrite(&tax, &req_path, Some(req_body.as_bytes()), &decoded)
        .unwrap_err();
    assert_eq!(
        err,
        RequestError::UnknownAlias {
            alias: "task-group-001".into()
        },
        "no task was issued"
    );
    let req_body = req_body.replace("task-group-001", "later");
    let scan =
        RequestScan::new(&tax, &req_path, Some((req_body.as_bytes(), BodyKind::Json))).unwrap();
    let decoded: Vec<Option<DecodedIds>> = scan
        .aliases()
        .iter()
        .map(|a| {
            session.decode(&tax, a).map(|d| DecodedIds {
                alias: d.record.alias.clone(),
                kind: d.record.kind.clone(),
                ids: d.record.ids.clone(),
            })
        })
        .collect();
    let (p, b) = scan
        .rewrite(&tax, &req_path, Some(req_body.as_bytes()), &decoded)
        .unwrap();
    assert_eq!(
        p,
        "/api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71/visits?visitId=10c85729-d6ad-4aca-820e-d8626e93e35d&fhir=Encounter/enc-0045120"
    );
    let b: Value = serde_json::from_slice(&b.unwrap()).unwrap();
    assert_eq!(b["patientId"], "039b70b8-92f7-44b7-9c91-4e3f0e900c71");
    assert_eq!(b["fhirId"], "enc-0045120");
    assert_eq!(b["clinicSlug"], "clinic-berlin-mitte");
    assert_eq!(b["note"], "re: later\n039b70b8-92f7-44b7-9c91-4e3f0e900c71");
}

/// Random ids of every form, with where they go.
#[derive(Debug, Clone)]
enum Embedded {
    /// `{"id": uuid, "fhirId": fhir}` under an object key.
    Entity {
        key: &'static str,
        uuid: String,
        fhir: String,
    },
    /// `"patientId": uuid`.
    Field { key: &'static str, value: String },
    /// A UUID in a URL.
    Url { segment: &'static str, uuid: String },
    /// A reference in prose.
    Prose { reference: String },
    /// A slug under `slug`.
    Slug { slug: String },
    /// A UUID as an object key.
    Key { uuid: String },
}

fn uuid() -> impl Strategy<Value = String> {
    any::<u128>().prop_map(|n| {
        let h = format!("{n:032x}");
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    })
}

fn fhir() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["pat", "enc", "appt", "prac", "task", "mr"]),
        1u32..10_000_000,
    )
        .prop_map(|(p, n)| format!("{p}-{n:07}"))
}

fn embedded() -> impl Strategy<Value = Embedded> {
    prop_oneof![
        (
            prop::sample::select(vec![
                "patient",
                "visit",
                "appointment",
                "practitioner",
                "clinic",
                "other"
            ]),
            uuid(),
            fhir()
        )
            .prop_map(|(key, uuid, fhir)| Embedded::Entity { key, uuid, fhir }),
        (
            prop::sample::select(vec!["patientId", "slotId", "createdBy", "clinic"]),
            uuid()
        )
            .prop_map(|(key, value)| Embedded::Field { key, value }),
        (
            prop::sample::select(vec!["patients", "visits", "unknown"]),
            uuid()
        )
            .prop_map(|(segment, uuid)| Embedded::Url { segment, uuid }),
        (
            prop::sample::select(vec!["Patient", "Appointment", "Encounter"]),
            fhir()
        )
            .prop_map(|(t, f)| Embedded::Prose {
                reference: format!("{t}/{f}")
            }),
        "[a-z]{4,8}-[a-z]{3}-[0-9]{2}".prop_map(|slug| Embedded::Slug { slug }),
        uuid().prop_map(|uuid| Embedded::Key { uuid }),
    ]
}

/// Plain text that holds no id (no digits next to dashes, no hex runs).
fn filler() -> impl Strategy<Value = String> {
    "[a-zA-Z ,.:/\"\\\\\n]{0,20}"
}

fn build(items: &[(Embedded, String)]) -> (Value, BTreeSet<String>) {
    let mut raw = BTreeSet::new();
    let mut list = Vec::new();
    for (i, (e, text)) in items.iter().enumerate() {
        let mut o = serde_json::Map::new();
        o.insert("n".into(), Value::from(i));
        o.insert("text".into(), Value::from(text.clone()));
        match e {
            Embedded::Entity { key, uuid, fhir } => {
                o.insert(
                    (*key).into(),
                    serde_json::json!({"id": uuid, "fhirId": fhir, "display": text}),
                );
                raw.extend([uuid.clone(), fhir.clone()]);
            }
            Embedded::Field { key, value } => {
                o.insert((*key).into(), Value::from(value.clone()));
                raw.insert(value.clone());
            }
            Embedded::Url { segment, uuid } => {
                o.insert(
                    "href".into(),
                    Value::from(format!("/api/v2/{segment}/{uuid}/x?{text}")),
                );
                raw.insert(uuid.clone());
            }
            Embedded::Prose { reference } => {
                o.insert(
                    "message".into(),
                    Value::from(format!("{text} ({reference}).\n{text}")),
                );
                raw.insert(reference.split_once('/').unwrap().1.to_owned());
            }
            Embedded::Slug { slug } => {
                o.insert(
                    "site".into(),
                    serde_json::json!({"slug": slug, "name": text}),
                );
                raw.insert(slug.clone());
            }
            Embedded::Key { uuid } => {
                o.insert(uuid.clone(), Value::from(text.clone()));
                raw.insert(uuid.clone());
            }
        }
        list.push(Value::Object(o));
    }
    (
        serde_json::json!({"data": list, "meta": {"total": items.len()}}),
        raw,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Random JSON with embedded ids never leaks a raw id, keeps its shape and
    /// every string without an id, and every alias decodes to the raw value it
    /// replaced.
    #[test]
    fn rewriter_never_leaks_and_round_trips(items in prop::collection::vec((embedded(), filler()), 1..12), pretty in any::<bool>()) {
        let tax = Taxonomy::default();
        let (doc, raw) = build(&items);
        let body = if pretty { serde_json::to_vec_pretty(&doc).unwrap() } else { serde_json::to_vec(&doc).unwrap() };
        let mut session = SessionMap::new();
        let out = process(&tax, &mut session, "/api/v2/things", &body);
        let out_text = String::from_utf8(out.clone()).unwrap();
        for id in &raw {
            prop_assert!(!out_text.contains(id.as_str()), "raw id {} leaked", id);
        }
        let got: Value = serde_json::from_slice(&out).unwrap();
        let skel = |v: &Value| {
            // Object keys that are ids change; compare the rest.
            let mut v = skeleton(v);
            for o in v["data"].as_array_mut().unwrap() {
                o.as_object_mut().unwrap().retain(|k, _| !raw.contains(k) && tax.parse_alias(k).is_none());
            }
            v
        };
        prop_assert_eq!(skel(&doc), skel(&got));
        for (i, (e, text)) in items.iter().enumerate() {
            let o = &got["data"][i];
            prop_assert_eq!(&o["text"], &Value::from(text.clone()));
            let decode = |a: &Value| session.decode(&tax, a.as_str().unwrap()).map(|d| d.record.ids.clone());
            match e {
                Embedded::Entity { key, uuid, fhir } => {
                    let ids = decode(&o[*key]["id"]).unwrap();
                    prop_assert_eq!(ids.uuid.as_deref(), Some(uuid.as_str()));
                    prop_assert_eq!(ids.fhir_id.as_deref(), Some(fhir.as_str()));
                    prop_assert_eq!(&o[*key]["fhirId"], &o[*key]["id"]);
                }
                Embedded::Field { key, value } => {
                    let ids = decode(&o[*key]).unwrap();
                    prop_assert!(ids.values().any(|(_, v)| v == value));
                }
                Embedded::Slug { slug } => {
                    let ids = decode(&o["site"]["slug"]).unwrap();
                    prop_assert_eq!(ids.slug.as_deref(), Some(slug.as_str()));
                }
                _ => {}
            }
        }
    }

    /// The same body twice in one session gives the same bytes (stable aliases).
    #[test]
    fn rewriting_is_stable_within_a_session(items in prop::collection::vec((embedded(), filler()), 1..8)) {
        let tax = Taxonomy::default();
        let (doc, _) = build(&items);
        let body = serde_json::to_vec(&doc).unwrap();
        let mut session = SessionMap::new();
        let a = process(&tax, &mut session, "/api/v2/things", &body);
        let n = session.len();
        let b = process(&tax, &mut session, "/api/v2/things", &body);
        prop_assert_eq!(a, b);
        prop_assert_eq!(session.len(), n);
    }
}

/// Decodes a request as the filter does, with `session` as control.
fn decode_request(
    tax: &Taxonomy,
    session: &SessionMap,
    path: &str,
) -> Result<String, RequestError> {
    let scan = RequestScan::new(tax, path, None)?;
    let decoded: Vec<Option<DecodedIds>> = scan
        .aliases()
        .iter()
        .map(|a| {
            session.decode(tax, a).map(|d| DecodedIds {
                alias: d.record.alias.clone(),
                kind: d.record.kind.clone(),
                ids: d.record.ids.clone(),
            })
        })
        .collect();
    scan.rewrite(tax, path, None, &decoded).map(|(p, _)| p)
}

#[test]
fn one_id_under_two_resource_types_is_two_records() {
    // FHIR servers number each resource type on its own: `Patient/1` and
    // `Encounter/1` are two records, and neither alias may reach the other.
    let tax = Taxonomy::default();
    let mut session = SessionMap::new();
    let body = br#"{"resourceType":"Bundle","type":"searchset","entry":[
      {"resource":{"resourceType":"Encounter","id":"1","subject":{"reference":"Patient/1"}}},
      {"resource":{"resourceType":"Patient","id":"1","name":[{"family":"Kuehn"}]}}]}"#;
    let out: Value = serde_json::from_slice(&process(
        &tax,
        &mut session,
        "/fhir/Encounter?_include=Encounter:subject",
        body,
    ))
    .unwrap();
    let encounter = find(&out, "/entry/0/resource/id").to_owned();
    let patient = find(&out, "/entry/1/resource/id").to_owned();
    assert_ne!(encounter, patient, "two records, two aliases");
    assert_eq!(
        find(&out, "/entry/0/resource/subject/reference"),
        format!("Patient/{patient}")
    );
    assert_eq!(session.len(), 2);
    for (alias, kind) in [(&encounter, "Encounter"), (&patient, "Patient")] {
        assert_eq!(
            decode_request(&tax, &session, &format!("/fhir/{kind}/{alias}")).unwrap(),
            format!("/fhir/{kind}/1")
        );
    }
    for (alias, kind) in [(&encounter, "Patient"), (&patient, "Encounter")] {
        let err = decode_request(&tax, &session, &format!("/fhir/{kind}/{alias}")).unwrap_err();
        assert!(
            matches!(err, RequestError::WrongKind { .. }),
            "{alias} in a {kind} path: {err:?}"
        );
    }
    // A later body keeps both aliases, whichever type comes first.
    let again = br#"{"resourceType":"Bundle","type":"searchset","entry":[
      {"resource":{"resourceType":"Patient","id":"1"}},
      {"resource":{"resourceType":"Encounter","id":"1"}}]}"#;
    let out: Value = serde_json::from_slice(&process(
        &tax,
        &mut session,
        "/fhir/Patient?_revinclude=Encounter:subject",
        again,
    ))
    .unwrap();
    assert_eq!(find(&out, "/entry/0/resource/id"), patient);
    assert_eq!(find(&out, "/entry/1/resource/id"), encounter);
    assert_eq!(session.len(), 2, "nothing new minted");
}

fn example_taxonomy() -> Taxonomy {
    Taxonomy::from_json(include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/taxonomy.example.json"
    )))
    .unwrap()
}

#[test]
fn business_identifiers_are_aliased_and_an_mrn_stays_readable_in_text() {
    let tax = example_taxonomy();
    let mut session = SessionMap::new();
    let body = br#"{"resourceType":"Patient","id":"pat-000123",
      "identifier":[
        {"system":"http://fhir.de/sid/gkv/kvid-10","value":"A123456789"},
        {"type":{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/v2-0203","code":"MR"}]},
         "system":"urn:oid:1.2.276.0.76.3.1.999.1","value":"MRN-0042"},
        {"system":"http://example.org/other","value":"X-77"}],
      "text":{"div":"<div>KVNR A123456789, MRN-0042 (Etikett)</div>"}}"#;
    let out: Value = serde_json::from_slice(&process(
        &tax,
        &mut session,
        "/fhir/Patient/pat-000123",
        body,
    ))
    .unwrap();
    let kvnr = find(&out, "/identifier/0/value").to_owned();
    let mrn = find(&out, "/identifier/1/value").to_owned();
    assert!(kvnr.starts_with("kvnr-"), "{out}");
    assert!(mrn.starts_with("mrn-"), "{out}");
    assert_eq!(
        find(&out, "/identifier/2/value"),
        "X-77",
        "a system nobody configured names no kind"
    );
    assert_eq!(
        find(&out, "/identifier/1/type/coding/0/code"),
        "MR",
        "codes and systems untouched"
    );
    assert_eq!(
        find(&out, "/identifier/0/system"),
        "http://fhir.de/sid/gkv/kvid-10"
    );
    assert_eq!(
        find(&out, "/text/div"),
        format!("<div>KVNR {kvnr}, MRN-0042 (Etikett)</div>"),
        "the KVNR is replaced wherever it stands; the MRN stays readable in text"
    );
    // A search by business identifier: the alias decodes, a raw value is refused.
    let kvid = "http://fhir.de/sid/gkv/kvid-10";
    assert_eq!(
        decode_request(
            &tax,
            &session,
            &format!("/fhir/Patient?identifier={kvid}|{kvnr}")
        )
        .unwrap(),
        format!("/fhir/Patient?identifier={kvid}|A123456789")
    );
    for raw in [
        format!("/fhir/Patient?identifier={kvid}|A123456789"),
        "/fhir/Patient?identifier=http%3A%2F%2Ffhir.de%2Fsid%2Fgkv%2Fkvid-10%7CA123456789"
            .to_owned(),
        "/fhir/Patient?identifier=1.2.276.0.76.3.1.999.1|MRN-0042".to_owned(),
    ] {
        let scan = RequestScan::new(&tax, &raw, None).unwrap();
        assert_eq!(scan.raw_ids().query, 1, "{raw}");
    }
    let other = RequestScan::new(
        &tax,
        "/fhir/Patient?identifier=http://example.org/other|X-77",
        None,
    )
    .unwrap();
    assert_eq!(other.raw_ids().total(), 0);
    // In a JSON body: a configured system beside a raw value is a raw id;
    // beside the alias it is none, and the alias decodes.
    let body = |v: &str| {
        format!(
            r#"{{"resourceType":"Coverage","beneficiary":{{"identifier":{{"system":"{kvid}","value":"{v}"}}}}}}"#
        )
    };
    let raw = body("A123456789");
    let scan = RequestScan::new(
        &tax,
        "/fhir/Coverage",
        Some((raw.as_bytes(), BodyKind::Json)),
    )
    .unwrap();
    assert_eq!(scan.raw_ids().body, 1);
    let aliased = body(&kvnr);
    let scan = RequestScan::new(
        &tax,
        "/fhir/Coverage",
        Some((aliased.as_bytes(), BodyKind::Json)),
    )
    .unwrap();
    assert_eq!(scan.raw_ids().total(), 0);
    let other = r#"{"identifier":{"system":"http://example.org/other","value":"X-77"}}"#;
    let scan = RequestScan::new(
        &tax,
        "/fhir/Coverage",
        Some((other.as_bytes(), BodyKind::Json)),
    )
    .unwrap();
    assert_eq!(scan.raw_ids().total(), 0);
}
