//! Three alias behaviours of the HMS listener that the core's unit tests cover,
//! proved end to end: the real `.wasm` in a real Envoy, the real control binary
//! and a recording HMS upstream, with the listener's default configuration
//! (`raw_ids: refuse`, so every request here carries aliases only).
//!
//! - An encounters list in an envelope the samples do not have (a FHIR
//!   `searchset` Bundle, an HMS `items` list with a cursor `next` link) is
//!   passed on aliased, not withheld: no raw id in body or headers, the
//!   look-alikes (dates, statuses, codes) untouched, and requests built from
//!   the aliases reach HMS with the raw ids.
//! - Sightings of one patient in several forms (its UUID in prose, its FHIR id
//!   alone, then both in one detail) merge into one entity instead of a 502,
//!   and every earlier alias keeps decoding to that one record in both forms.
//! - Near misses of an issued alias (letter case, zero padding) are repaired to
//!   that alias' record; near misses of a number the session never issued are
//!   refused with a 404 naming the alias as written, and nothing reaches HMS.
//! - One id under two resource types (`Patient/1`, `Encounter/1`, as FHIR
//!   servers number them) is two records with two aliases; each reaches HMS
//!   in its own type's path, and in the other's it is refused.

use keyhole_e2e::hms_client::{self, Reply};
use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{Stack, StackOptions};
use regex::Regex;
use serde_json::Value;

/// Anna's HMS UUID and FHIR id (as in the catalog's samples).
const ANNA_UUID: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
const ANNA_FHIR: &str = "pat-000123";

async fn send(
    stack: &Stack,
    session: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let body = body.map(|b| serde_json::to_vec(&b).unwrap());
    hms_client::send(&stack.envoy.hms_url(), method, path, Some(session), body).await
}

async fn get(stack: &Stack, session: &str, path: &str) -> Reply {
    send(stack, session, "GET", path, None).await
}

fn str_at<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} missing in {v}"))
}

/// A canned answer with these extra headers.
fn canned(body: &[u8], headers: &[(&str, &str)]) -> Canned {
    let mut c = Canned::json(body.to_vec());
    c.headers.extend(
        headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    c
}

/// Asserts that none of `raw` appears in the client's body or headers, in any
/// letter case.
fn assert_no_raw(what: &str, raw: &[&str], reply: &Reply) {
    let (body, headers) = (
        reply.text().to_ascii_lowercase(),
        reply.header_text().to_ascii_lowercase(),
    );
    for id in raw {
        let id_lower = id.to_ascii_lowercase();
        assert!(
            !body.contains(&id_lower),
            "{what}: raw id {id} reached the client in the body:\n{}",
            reply.text()
        );
        assert!(
            !headers.contains(&id_lower),
            "{what}: raw id {id} reached the client in a header:\n{}",
            reply.header_text()
        );
    }
}

/// Sends `path` in `session` and returns the one request HMS received for it.
async fn reaches_hms(stack: &Stack, session: &str, path: &str) -> String {
    stack.hms.clear();
    let reply = get(stack, session, path).await;
    assert_eq!(
        reply.status,
        200,
        "{path}: {}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    let seen = stack.hms.seen();
    assert_eq!(
        seen.len(),
        1,
        "{path}: HMS saw {:?}",
        seen.iter().map(|r| &r.uri).collect::<Vec<_>>()
    );
    seen[0].uri.clone()
}

/// A JSON value with every string blanked: what a rewrite must not change.
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

/// Base64url without padding (an opaque HMS cursor).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

async fn counter(stack: &Stack, name: &str) -> u64 {
    stack
        .envoy
        .stat(&format!("wasmcustom.keyhole.{name}"))
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------
// 1. Envelopes the samples do not have.

/// The ids of the FHIR Bundle below: configured prefixes (`enc`, `pat`,
/// `prac`, `loc`, `cond`, `sr`) and ones no kind configures (`amb` for an
/// Encounter's own id, `org` under `Organization`, `eoc` under the
/// unconfigured type `EpisodeOfCare`), plus the Bundle's UUID.
const BUNDLE_IDS: &[&str] = &[
    "6f1c8a2e-3b4d-4c5e-9f60-7a8b9c0d1e2f",
    "enc-000451",
    "enc-000452",
    "amb-000453",
    "pat-000123",
    "prac-00042",
    "prac-00077",
    "loc-00017",
    "cond-000311",
    "sr-0000912",
    "org-0007",
    "eoc-000318",
];

/// The Encounter ids of the Bundle, in entry order.
const BUNDLE_ENCOUNTERS: [&str; 3] = ["enc-000451", "enc-000452", "amb-000453"];

/// A FHIR R4 `searchset` Bundle of three Encounters of one patient, with
/// what every real one carries and is no record: `meta.versionId` (a version
/// counter) and `class.system`, the canonical URL of a code system
/// (`http://terminology.hl7.org/CodeSystem/v3-ActCode`).
fn encounter_bundle() -> Value {
    serde_json::json!({
        "resourceType": "Bundle",
        "id": "6f1c8a2e-3b4d-4c5e-9f60-7a8b9c0d1e2f",
        "meta": {"lastUpdated": "2025-03-01T09:12:44Z"},
        "type": "searchset",
        "total": 3,
        "link": [
            {"relation": "self", "url": "https://hms.example/fhir/Encounter?subject=Patient/pat-000123&_count=20"},
            {"relation": "next", "url": "https://hms.example/fhir?_getpages=6f1c8a2e-3b4d-4c5e-9f60-7a8b9c0d1e2f&_getpagesoffset=20&_count=20"}
        ],
        "entry": [
            {
                "fullUrl": "https://hms.example/fhir/Encounter/enc-000451",
                "resource": {
                    "resourceType": "Encounter",
                    "id": "enc-000451",
                    "meta": {"versionId": "3", "lastUpdated": "2025-03-01T09:12:44Z"},
                    "status": "in-progress",
                    "class": {"system": "http://terminology.hl7.org/CodeSystem/v3-ActCode", "code": "IMP", "display": "inpatient encounter"},
                    "type": [{"coding": [{"system": "http://snomed.info/sct", "code": "32485007", "display": "Hospital admission"}]}],
                    "subject": {"reference": "Patient/pat-000123", "display": "Anna Schmidt"},
                    "participant": [{"individual": {"reference": "Practitioner/prac-00042"}}],
                    "period": {"start": "2025-03-01T08:00:00Z"},
                    "reasonCode": [{"coding": [{"system": "http://fhir.de/CodeSystem/bfarm/icd-10-gm", "code": "I21.4"}], "text": "NSTEMI"}],
                    "diagnosis": [{"condition": {"reference": "Condition/cond-000311"}, "rank": 1}],
                    "location": [{"location": {"reference": "Location/loc-00017"}, "status": "active"}],
                    "serviceProvider": {"reference": "Organization/org-0007"}
                },
                "search": {"mode": "match"}
            },
            {
                "fullUrl": "https://hms.example/fhir/Encounter/enc-000452",
                "resource": {
                    "resourceType": "Encounter",
                    "id": "enc-000452",
                    "status": "finished",
                    "class": {"code": "AMB"},
                    "subject": {"reference": "Patient/pat-000123"},
                    "participant": [
                        {"individual": {"reference": "Practitioner/prac-00042"}},
                        {"individual": {"reference": "Practitioner/prac-00077"}}
                    ],
                    "period": {"start": "2025-02-11T09:30:00Z", "end": "2025-02-11T10:15:00Z"},
                    "reasonCode": [{"coding": [{"system": "http://fhir.de/CodeSystem/bfarm/ops", "code": "8-930"}]}],
                    "basedOn": [{"reference": "ServiceRequest/sr-0000912"}]
                },
                "search": {"mode": "match"}
            },
            {
                "fullUrl": "https://hms.example/fhir/Encounter/amb-000453",
                "resource": {
                    "resourceType": "Encounter",
                    "id": "amb-000453",
                    "status": "planned",
                    "class": {"code": "AMB"},
                    "subject": {"reference": "Patient/pat-000123"},
                    "episodeOfCare": [{"reference": "EpisodeOfCare/eoc-000318"}],
                    "participant": [{"individual": {"reference": "Practitioner/prac-00077"}}],
                    "period": {"start": "2025-03-18T14:00:00Z"}
                },
                "search": {"mode": "match"}
            }
        ]
    })
}

/// The HMS list's ids.
const ENC_1: &str = "b1f0c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
const ENC_2: &str = "c2e1d3f5-6a7b-4c8d-9e0f-1a2b3c4d5e6f";
const BOB_UUID: &str = "74229a55-de5f-4d66-af4a-88e122c37321";
const WEBER_UUID: &str = "0ac775b2-ad2e-4163-99ac-3a87a51d563e";
const WARD: &str = "ward-3a-bm";

/// The opaque cursor of the list's `next` link: base64url of a JSON object
/// that carries the last encounter's UUID.
fn list_cursor() -> String {
    base64url(format!(r#"{{"after":"{ENC_2}","sort":"start"}}"#).as_bytes())
}

/// An HMS JSON list of encounters under `items`, with a cursor `next` link.
fn encounter_list() -> Value {
    serde_json::json!({
        "items": [
            {
                "encounterId": ENC_1,
                "type": "inpatient",
                "status": "in-progress",
                "patient": {"id": ANNA_UUID, "name": "Anna Schmidt", "birthDate": "1961-07-14"},
                "attendingPractitioner": {"id": WEBER_UUID, "name": "Dr. Weber"},
                "ward": WARD,
                "bed": "3A-12",
                "start": "2025-03-01T08:00:00+01:00",
                "end": null,
                "diagnosis": {"code": "I21.4", "system": "ICD-10-GM"},
                "href": format!("/api/v2/encounters/{ENC_1}")
            },
            {
                "encounterId": ENC_2,
                "type": "outpatient",
                "status": "finished",
                "patient": {"id": BOB_UUID, "name": "Bob Meyer", "birthDate": "1975-11-02"},
                "attendingPractitioner": {"id": WEBER_UUID, "name": "Dr. Weber"},
                "ward": WARD,
                "start": "2025-02-11T09:30:00+01:00",
                "end": "2025-02-11T10:15:00+01:00",
                "procedure": {"code": "5-470.11", "system": "OPS"},
                "href": format!("/api/v2/encounters/{ENC_2}")
            }
        ],
        "next": format!("/api/v2/encounters?cursor={}&limit=20", list_cursor()),
        "total": 57
    })
}

/// An encounters list in an envelope the samples don't have — a FHIR
/// `searchset` Bundle (`entry[].resource`) and an HMS `items` list with a
/// cursor link — is answered 200 with every raw id (configured FHIR prefixes
/// and unconfigured ones, UUIDs, a ward slug, the cursor) aliased in body and
/// headers, the look-alikes left as they were, and requests built from the
/// aliases (FHIR reads, HMS paths, the `next` link) reach HMS with the raw ids.
#[tokio::test]
async fn encounter_lists_in_unsampled_envelopes_are_aliased_not_withheld() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let session = "s-envelopes";

    // The FHIR Bundle.
    let bundle = encounter_bundle();
    stack.hms.set(
        "/fhir/Encounter",
        canned(
            &serde_json::to_vec(&bundle).unwrap(),
            &[
                ("content-type", "application/fhir+json; charset=utf-8"),
                (
                    "content-location",
                    "https://hms.example/fhir/Encounter?subject=Patient/pat-000123",
                ),
            ],
        ),
    );
    let reply = get(
        &stack,
        session,
        "/fhir/Encounter?status=in-progress,finished,planned&_count=20",
    )
    .await;
    assert_eq!(
        reply.status,
        200,
        "the Bundle was withheld: {}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    assert_no_raw("Bundle", BUNDLE_IDS, &reply);
    let out = reply.json();
    assert_eq!(
        skeleton(&out),
        skeleton(&bundle),
        "the Bundle's shape changed"
    );
    // The look-alikes are still there, where they were.
    let text = reply.text();
    for kept in [
        "searchset",
        "2025-03-01T09:12:44Z",
        "2025-03-01T08:00:00Z",
        "2025-02-11T10:15:00Z",
        "in-progress",
        "finished",
        "planned",
        "32485007",
        "I21.4",
        "8-930",
        "http://fhir.de/CodeSystem/bfarm/icd-10-gm",
        "http://snomed.info/sct",
        "IMP",
        "AMB",
        "http://terminology.hl7.org/CodeSystem/v3-ActCode",
    ] {
        assert!(
            text.contains(kept),
            "Bundle: the look-alike {kept} was changed:\n{text}"
        );
    }
    assert_eq!(
        str_at(&out, "/entry/0/resource/meta/versionId"),
        "3",
        "a version counter is no record"
    );
    assert_eq!(str_at(&out, "/entry/0/resource/status"), "in-progress");
    assert_eq!(
        str_at(&out, "/entry/0/resource/period/start"),
        "2025-03-01T08:00:00Z"
    );
    assert_eq!(
        str_at(&out, "/entry/1/resource/reasonCode/0/coding/0/code"),
        "8-930"
    );
    assert_eq!(out["total"], 3);
    // One alias per Encounter, the same in its fullUrl and its id; one for the
    // patient in every entry.
    let mut encounter_aliases = Vec::new();
    for i in 0..3 {
        let id = str_at(&out, &format!("/entry/{i}/resource/id")).to_owned();
        assert_eq!(
            str_at(&out, &format!("/entry/{i}/fullUrl")),
            format!("https://hms.example/fhir/Encounter/{id}")
        );
        encounter_aliases.push(id);
    }
    let distinct: std::collections::BTreeSet<&String> = encounter_aliases.iter().collect();
    assert_eq!(distinct.len(), 3, "{encounter_aliases:?}");
    let patient = str_at(&out, "/entry/0/resource/subject/reference").to_owned();
    for i in 1..3 {
        assert_eq!(
            str_at(&out, &format!("/entry/{i}/resource/subject/reference")),
            patient
        );
    }
    let content_location = reply.header("content-location").expect("content-location");
    assert_eq!(
        content_location,
        format!("https://hms.example/fhir/Encounter?subject={patient}")
    );
    // Requests built from the aliases reach HMS with the raw ids.
    for (alias, raw) in encounter_aliases.iter().zip(BUNDLE_ENCOUNTERS) {
        assert_eq!(
            reaches_hms(&stack, session, &format!("/fhir/Encounter/{alias}")).await,
            format!("/fhir/Encounter/{raw}")
        );
    }
    assert_eq!(
        reaches_hms(&stack, session, &format!("/fhir/{patient}")).await,
        format!("/fhir/Patient/{ANNA_FHIR}")
    );
    for (pointer, resource, raw) in [
        (
            "/entry/0/resource/participant/0/individual/reference",
            "Practitioner",
            "prac-00042",
        ),
        (
            "/entry/0/resource/serviceProvider/reference",
            "Organization",
            "org-0007",
        ),
        (
            "/entry/2/resource/episodeOfCare/0/reference",
            "EpisodeOfCare",
            "eoc-000318",
        ),
        (
            "/entry/0/resource/location/0/location/reference",
            "Location",
            "loc-00017",
        ),
    ] {
        let reference = str_at(&out, pointer);
        assert!(
            reference.starts_with(&format!("{resource}/")),
            "{pointer}: {reference}"
        );
        assert_eq!(
            reaches_hms(&stack, session, &format!("/fhir/{reference}")).await,
            format!("/fhir/{resource}/{raw}"),
            "{pointer}"
        );
    }

    // The HMS `items` list.
    let list = encounter_list();
    let cursor = list_cursor();
    let next_link = format!("</api/v2/encounters?cursor={cursor}&limit=20>; rel=\"next\"");
    stack.hms.set(
        "/api/v2/encounters",
        canned(
            &serde_json::to_vec(&list).unwrap(),
            &[("link", next_link.as_str())],
        ),
    );
    let reply = get(
        &stack,
        session,
        "/api/v2/encounters?status=in-progress&limit=20",
    )
    .await;
    assert_eq!(
        reply.status,
        200,
        "the list was withheld: {}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    assert_no_raw(
        "items list",
        &[
            ENC_1,
            ENC_2,
            ANNA_UUID,
            BOB_UUID,
            WEBER_UUID,
            WARD,
            cursor.as_str(),
        ],
        &reply,
    );
    let out = reply.json();
    assert_eq!(skeleton(&out), skeleton(&list), "the list's shape changed");
    let text = reply.text();
    for kept in [
        "in-progress",
        "finished",
        "2025-03-01T08:00:00+01:00",
        "2025-02-11T10:15:00+01:00",
        "1961-07-14",
        "I21.4",
        "5-470.11",
        "3A-12",
        "ICD-10-GM",
        "limit=20",
    ] {
        assert!(
            text.contains(kept),
            "items list: the look-alike {kept} was changed:\n{text}"
        );
    }
    assert_eq!(out["total"], 57);
    assert!(out["items"][0]["end"].is_null());
    let enc1 = str_at(&out, "/items/0/encounterId").to_owned();
    assert_eq!(
        str_at(&out, "/items/0/href"),
        format!("/api/v2/encounters/{enc1}")
    );
    let anna = str_at(&out, "/items/0/patient/id").to_owned();
    assert_ne!(
        str_at(&out, "/items/1/patient/id"),
        anna,
        "two patients, two aliases"
    );
    let ward = str_at(&out, "/items/0/ward").to_owned();
    assert_eq!(str_at(&out, "/items/1/ward"), ward);
    assert_eq!(
        str_at(&out, "/items/0/attendingPractitioner/id"),
        str_at(&out, "/items/1/attendingPractitioner/id")
    );
    let next = str_at(&out, "/next").to_owned();
    let link = reply.header("link").expect("link header");
    assert!(
        link.contains(&next),
        "the Link header and next carry the same alias: {link} / {next}"
    );
    // Requests built from the aliases reach HMS with the raw ids.
    assert_eq!(
        reaches_hms(&stack, session, &format!("/api/v2/encounters/{enc1}")).await,
        format!("/api/v2/encounters/{ENC_1}")
    );
    assert_eq!(
        reaches_hms(&stack, session, &format!("/api/v2/patients/{anna}")).await,
        format!("/api/v2/patients/{ANNA_UUID}")
    );
    assert_eq!(
        reaches_hms(&stack, session, &format!("/api/v2/wards/{ward}")).await,
        format!("/api/v2/wards/{WARD}")
    );
    assert_eq!(
        reaches_hms(&stack, session, &next).await,
        format!("/api/v2/encounters?cursor={cursor}&limit=20"),
        "the next link"
    );

    assert_eq!(counter(&stack, "hms_withheld.conflict").await, 0);
    assert_eq!(counter(&stack, "hms_withheld.unreadable").await, 0);
    assert!(counter(&stack, "hms_responses_aliased").await >= 2);
}

// ---------------------------------------------------------------------------
// 2. Sightings merge.

/// The prose answer of [`sightings_of_one_patient_merge_instead_of_a_502`]:
/// 200, no raw UUID, the look-alikes kept; returns the alias the UUID got.
async fn prose_alias(stack: &Stack, session: &str) -> String {
    let reply = get(stack, session, "/api/v2/handover/summary").await;
    assert_eq!(
        reply.status,
        200,
        "{session}: prose withheld: {}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    assert_no_raw("prose", &[ANNA_UUID], &reply);
    let text = reply.text();
    assert!(
        text.contains("01.03.2025 07:45") && text.contains("2025-03-01T14:00"),
        "{text}"
    );
    let m = Regex::new(r"Anna Schmidt \(([a-z][a-z-]*-[a-z0-9]{4}-[0-9]{3,})\) aufgenommen")
        .unwrap()
        .captures(&text)
        .unwrap_or_else(|| panic!("{session}: no alias in the prose: {text}"));
    m[1].to_owned()
}

/// The FHIR-id-only answer of
/// [`sightings_of_one_patient_merge_instead_of_a_502`]: 200, no raw FHIR id;
/// returns the alias of its `Patient/` reference.
async fn flag_alias(stack: &Stack, session: &str) -> String {
    let reply = get(stack, session, "/api/v2/alerts/active").await;
    assert_eq!(
        reply.status,
        200,
        "{session}: FHIR-only answer withheld: {}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    assert_no_raw("FHIR-only", &[ANNA_FHIR], &reply);
    let v = reply.json();
    assert_eq!(str_at(&v, "/data/category"), "fall-risk");
    let reference = str_at(&v, "/data/subject/reference");
    reference
        .strip_prefix("Patient/")
        .unwrap_or_else(|| panic!("{reference}"))
        .to_owned()
}

/// A patient's UUID seen only in prose (`text/plain`), its FHIR id seen only in
/// a reference, then both in one `{id, fhirId}` detail — in either order of the
/// first two — are one record, not a conflict: all three answers are 200, the
/// detail's `id`, `fhirId` and `fhirReference` carry one alias (the older
/// one), and each earlier alias reaches HMS as the raw UUID on an HMS path and
/// as the raw FHIR id on a FHIR path.
#[tokio::test]
async fn sightings_of_one_patient_merge_instead_of_a_502() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let prose = format!(
        "Übergabe Station 3A, 01.03.2025 07:45: Anna Schmidt ({ANNA_UUID}) aufgenommen mit NSTEMI, Troponin-Kontrolle 2025-03-01T14:00.\n"
    );
    stack.hms.set(
        "/api/v2/handover/summary",
        canned(
            prose.as_bytes(),
            &[("content-type", "text/plain; charset=utf-8")],
        ),
    );
    let flag = serde_json::json!({
        "data": {
            "status": "active",
            "category": "fall-risk",
            "subject": {"reference": format!("Patient/{ANNA_FHIR}"), "display": "Anna Schmidt"},
            "period": {"start": "2025-03-01"}
        }
    });
    stack.hms.set(
        "/api/v2/alerts/active",
        canned(&serde_json::to_vec(&flag).unwrap(), &[]),
    );
    let detail = serde_json::json!({
        "data": {
            "id": ANNA_UUID,
            "fhirId": ANNA_FHIR,
            "fhirReference": format!("Patient/{ANNA_FHIR}"),
            "name": {"family": "Schmidt", "given": ["Anna"]},
            "birthDate": "1961-07-14",
            "gender": "female"
        }
    });
    stack.hms.set(
        &format!("/api/v2/patients/{ANNA_UUID}"),
        canned(&serde_json::to_vec(&detail).unwrap(), &[]),
    );

    for prose_first in [true, false] {
        let session = if prose_first {
            "s-merge-prose-first"
        } else {
            "s-merge-fhir-first"
        };
        let (from_prose, from_fhir) = if prose_first {
            let p = prose_alias(&stack, session).await;
            (p, flag_alias(&stack, session).await)
        } else {
            let f = flag_alias(&stack, session).await;
            (prose_alias(&stack, session).await, f)
        };
        assert_ne!(
            from_prose, from_fhir,
            "{session}: two sightings, two aliases so far"
        );
        let older = if prose_first { &from_prose } else { &from_fhir };

        // The detail, asked for by the prose alias (HMS gets the UUID).
        stack.hms.clear();
        let reply = get(&stack, session, &format!("/api/v2/patients/{from_prose}")).await;
        assert_eq!(
            reply.status,
            200,
            "{session}: the detail was withheld (the sightings did not merge): {}\n{}",
            reply.text(),
            stack.envoy.log_tail()
        );
        assert_eq!(stack.hms.seen().len(), 1);
        assert_eq!(
            stack.hms.seen()[0].uri,
            format!("/api/v2/patients/{ANNA_UUID}")
        );
        assert_no_raw("detail", &[ANNA_UUID, ANNA_FHIR], &reply);
        let v = reply.json();
        let id = str_at(&v, "/data/id");
        assert_eq!(
            str_at(&v, "/data/fhirId"),
            id,
            "{session}: one record, one alias"
        );
        assert_eq!(str_at(&v, "/data/fhirReference"), format!("Patient/{id}"));
        assert_eq!(id, older, "{session}: the older alias stays the record's");
        assert_eq!(str_at(&v, "/data/birthDate"), "1961-07-14");

        // Each earlier alias is that one record, in both forms.
        for alias in [&from_prose, &from_fhir] {
            assert_eq!(
                reaches_hms(&stack, session, &format!("/api/v2/patients/{alias}")).await,
                format!("/api/v2/patients/{ANNA_UUID}"),
                "{session}: {alias} on an HMS path"
            );
            assert_eq!(
                reaches_hms(&stack, session, &format!("/fhir/Patient/{alias}")).await,
                format!("/fhir/Patient/{ANNA_FHIR}"),
                "{session}: {alias} on a FHIR path"
            );
        }
        // Every later sighting, in either form, gets the one alias.
        assert_eq!(
            &prose_alias(&stack, session).await,
            older,
            "{session}: prose after the merge"
        );
        assert_eq!(
            &flag_alias(&stack, session).await,
            older,
            "{session}: FHIR id after the merge"
        );
    }
    assert_eq!(counter(&stack, "hms_withheld.conflict").await, 0);
}

// ---------------------------------------------------------------------------
// 3. Near-miss aliases.

/// After `patient-<epoch>-001` was issued, near misses of it — other letter
/// case (whole, prefix only, epoch only) and other zero padding (`-1`, `-01`,
/// `-0001`, `-00001`) — in a path, a FHIR path, the query and a JSON body reach
/// HMS as Anna's raw UUID / FHIR id (the repair goes to the alias this session
/// issued); `patient-<epoch>-002` and its near misses (`-0002`, upper case,
/// `-2`), and an upper-case alias of another epoch, are refused with a 404
/// naming the alias as written, and HMS receives nothing.
#[tokio::test]
async fn near_miss_aliases_decode_only_to_issued_aliases() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let session = "s-near-miss";
    let search = serde_json::json!({"data": [{"id": ANNA_UUID, "fhirId": ANNA_FHIR, "name": "Anna Schmidt"}]});
    stack.hms.set(
        "/api/v2/patients/search",
        canned(&serde_json::to_vec(&search).unwrap(), &[]),
    );
    let reply = get(&stack, session, "/api/v2/patients/search?q=anna").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    let alias = str_at(&v, "/data/0/id").to_owned();
    assert_eq!(str_at(&v, "/data/0/fhirId"), alias);
    let parts = Regex::new(r"^patient-([a-z0-9]{4})-([0-9]{3,})$")
        .unwrap()
        .captures(&alias)
        .unwrap_or_else(|| panic!("not an epoch alias: {alias}"));
    let (epoch, number) = (parts[1].to_owned(), parts[2].to_owned());
    assert_eq!(number, "001", "the session's first patient");
    let up = epoch.to_ascii_uppercase();

    let repaired = [
        format!("PATIENT-{up}-001"),
        format!("Patient-{up}-001"),
        format!("Patient-{epoch}-001"),
        format!("patient-{up}-001"),
        format!("patient-{epoch}-1"),
        format!("patient-{epoch}-01"),
        format!("patient-{epoch}-0001"),
        format!("patient-{epoch}-00001"),
        format!("PATIENT-{up}-0001"),
    ];
    for written in &repaired {
        assert_eq!(
            reaches_hms(&stack, session, &format!("/api/v2/patients/{written}")).await,
            format!("/api/v2/patients/{ANNA_UUID}"),
            "{written} in the path"
        );
    }
    for written in [&repaired[0], &repaired[6]] {
        assert_eq!(
            reaches_hms(&stack, session, &format!("/fhir/Patient/{written}")).await,
            format!("/fhir/Patient/{ANNA_FHIR}"),
            "{written} in a FHIR path"
        );
        assert_eq!(
            reaches_hms(
                &stack,
                session,
                &format!("/api/v2/appointments?patientId={written}&status=booked")
            )
            .await,
            format!("/api/v2/appointments?patientId={ANNA_UUID}&status=booked"),
            "{written} in the query"
        );
    }
    // A JSON body (the upstream echoes it, aliased again).
    stack.hms.clear();
    let body = serde_json::json!({"patientId": repaired[5], "note": format!("Kontrolle für {}", repaired[1])});
    let reply = send(&stack, session, "POST", "/api/v2/appointments", Some(body)).await;
    assert_eq!(
        reply.status,
        200,
        "{}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    let seen = stack.hms.seen();
    assert_eq!(seen.len(), 1);
    let got: Value = serde_json::from_slice(&seen[0].body).unwrap();
    assert_eq!(got["patientId"], ANNA_UUID, "near miss in a body field");
    assert_eq!(
        got["note"],
        format!("Kontrolle für {ANNA_UUID}"),
        "near miss in body prose"
    );
    assert_eq!(
        reply.json()["patientId"],
        alias.as_str(),
        "the echo comes back with the issued alias"
    );
    assert_no_raw("echo", &[ANNA_UUID], &reply);

    // Never issued: refused by name, nothing reaches HMS.
    let other_epoch = if epoch == "m3p9" { "n4q8" } else { "m3p9" }.to_ascii_uppercase();
    let refused = [
        format!("patient-{epoch}-002"),
        format!("patient-{epoch}-0002"),
        format!("PATIENT-{up}-002"),
        format!("Patient-{epoch}-2"),
        format!("PATIENT-{other_epoch}-001"),
    ];
    for written in &refused {
        for (place, method, path, body) in [
            ("path", "GET", format!("/api/v2/patients/{written}"), None),
            (
                "query",
                "GET",
                format!("/api/v2/appointments?patientId={written}"),
                None,
            ),
            (
                "body",
                "POST",
                "/api/v2/appointments".to_owned(),
                Some(serde_json::json!({"patientId": written})),
            ),
        ] {
            stack.hms.clear();
            let reply = send(&stack, session, method, &path, body).await;
            assert_eq!(
                reply.status,
                404,
                "{written} in the {place}: {}",
                reply.text()
            );
            let message = reply.json()["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(
                message.contains(written.as_str()),
                "{written} in the {place}: the error names it: {message}"
            );
            assert!(
                stack.hms.seen().is_empty(),
                "{written} in the {place}: HMS received {:?}",
                stack.hms.seen().iter().map(|r| &r.uri).collect::<Vec<_>>()
            );
            assert_no_raw("refusal", &[ANNA_UUID, ANNA_FHIR], &reply);
        }
    }
    assert_eq!(
        counter(&stack, "hms_refused.unknown_alias").await,
        3 * refused.len() as u64
    );
    assert_eq!(
        counter(&stack, "hms_raw_ids").await,
        0,
        "no near miss is taken for a raw id"
    );
    // The refusals changed nothing: the issued alias still decodes.
    assert_eq!(
        reaches_hms(&stack, session, &format!("/api/v2/patients/{alias}")).await,
        format!("/api/v2/patients/{ANNA_UUID}")
    );
}

// ---------------------------------------------------------------------------
// 4. One id, two resource types.

#[tokio::test]
async fn one_id_under_two_resource_types_is_two_aliases_end_to_end() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let session = "s-two-kinds";
    let bundle = serde_json::json!({
        "resourceType": "Bundle", "type": "searchset",
        "entry": [
            {"resource": {"resourceType": "Encounter", "id": "1", "status": "finished",
                          "subject": {"reference": "Patient/1"}}},
            {"resource": {"resourceType": "Patient", "id": "1", "name": [{"family": "Kuehn"}]}}
        ]
    });
    stack.hms.set(
        "/fhir/Encounter",
        canned(
            &serde_json::to_vec(&bundle).unwrap(),
            &[("content-type", "application/fhir+json")],
        ),
    );
    let reply = get(
        &stack,
        session,
        "/fhir/Encounter?_include=Encounter:subject",
    )
    .await;
    assert_eq!(
        reply.status,
        200,
        "{}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    let v = reply.json();
    let encounter = str_at(&v, "/entry/0/resource/id").to_owned();
    let patient = str_at(&v, "/entry/1/resource/id").to_owned();
    assert_ne!(encounter, patient, "two records, two aliases: {v}");
    assert_eq!(
        str_at(&v, "/entry/0/resource/subject/reference"),
        format!("Patient/{patient}")
    );
    assert_eq!(skeleton(&v), skeleton(&bundle));
    for (alias, kind) in [(&encounter, "Encounter"), (&patient, "Patient")] {
        assert_eq!(
            reaches_hms(&stack, session, &format!("/fhir/{kind}/{alias}")).await,
            format!("/fhir/{kind}/1")
        );
    }
    for (alias, kind) in [(&encounter, "Patient"), (&patient, "Encounter")] {
        stack.hms.clear();
        let reply = get(&stack, session, &format!("/fhir/{kind}/{alias}")).await;
        assert_eq!(
            reply.status,
            404,
            "{alias} in a {kind} path: {}",
            reply.text()
        );
        assert!(
            stack.hms.seen().is_empty(),
            "{alias} in a {kind} path reached HMS"
        );
    }
}

// ---------------------------------------------------------------------------
// 5. Content types beyond JSON, CSV, XML and HTML.

#[tokio::test]
async fn event_streams_forms_yaml_and_wrapped_json_are_read_or_withheld() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let session = "s-formats";
    let cases: [(&str, &str, String, String); 6] = [
        (
            "/api/v2/events",
            "text/event-stream",
            "id: 7\ndata: {\"patientId\": 482913, \"status\": \"arrived\"}\n\n".into(),
            "\"patientId\": \"patient-".into(),
        ),
        (
            "/api/v2/form",
            "application/x-www-form-urlencoded",
            "patientId=482914&count=3".into(),
            "patientId=patient-".into(),
        ),
        (
            "/api/v2/yaml",
            "application/yaml",
            "patient:\n  patientId: 482915\ncount: 2\n".into(),
            "patientId: patient-".into(),
        ),
        (
            "/api/v2/jsonp",
            "application/javascript",
            "cb({\"patientId\": 482916});".into(),
            "cb({\"patientId\": \"patient-".into(),
        ),
        (
            "/api/v2/xssi",
            "application/json",
            ")]}'\n{\"patientId\": 482917}".into(),
            ")]}'\n{\"patientId\": \"patient-".into(),
        ),
        (
            "/api/v2/link",
            "application/json",
            r#"{"next":"/api/v2/appointments?patientId=482918&page=2"}"#.into(),
            "?patientId=patient-".into(),
        ),
    ];
    for (path, ct, body, want) in &cases {
        stack
            .hms
            .set(path, canned(body.as_bytes(), &[("content-type", ct)]));
        let reply = get(&stack, session, path).await;
        assert_eq!(
            reply.status,
            200,
            "{ct}: {}\n{}",
            reply.text(),
            stack.envoy.log_tail()
        );
        assert!(
            reply.text().contains(want.as_str()),
            "{ct}: {}",
            reply.text()
        );
        assert_no_raw(
            ct,
            &["482913", "482914", "482915", "482916", "482917", "482918"],
            &reply,
        );
    }
    // JSON with a comment is no JSON: withheld, and counted by its reason.
    let before = counter(&stack, "hms_withheld.unreadable").await;
    stack.hms.set(
        "/api/v2/commented",
        canned(b"{\"patientId\": 482919, // x\n}", &[]),
    );
    let reply = get(&stack, session, "/api/v2/commented").await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_no_raw("commented", &["482919"], &reply);
    assert_eq!(counter(&stack, "hms_withheld.unreadable").await, before + 1);
    assert_eq!(
        counter(&stack, "hms_withheld.last_word").await,
        0,
        "what was aliased was all there was"
    );
}
