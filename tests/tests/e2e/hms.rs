//! The HMS listener end to end: the real `.wasm` in a real Envoy, the real
//! control binary (redb, or Redis when `KEYHOLE_TEST_REDIS_URL` is set), and a
//! recording HMS upstream. These tests try to make a raw id reach the client,
//! or an alias this session did not issue reach HMS.

use keyhole_e2e::hms_client::{send, Reply, SESSION_HEADER};
use keyhole_e2e::upstream::{Canned, Recorded};
use keyhole_e2e::{control, envoy, Stack, StackOptions};
use keyhole_testkit::hms::{raw_ids, sample, samples};
use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The HMS filter configuration of most tests here: they fetch the samples at
/// their HMS paths, which hold raw ids (`/api/v2/patients/<uuid>`), so raw ids
/// pass (counted). The default, refusing them, is tested on its own.
const RAW_IDS_PASS: &str = r#"{"mode":"hms","timeout_ms":5000,"raw_ids":"pass"}"#;

/// The default stack with [`RAW_IDS_PASS`].
fn raw_ids_pass() -> StackOptions {
    StackOptions {
        hms_filter_config: RAW_IDS_PASS.into(),
        ..StackOptions::default()
    }
}

/// Asserts that no raw id of `original` appears in `text`.
fn assert_no_raw_id(what: &str, original: &str, text: &str) {
    let raw = raw_ids(original);
    for id in &raw {
        assert!(
            !text.contains(id.as_str()),
            "{what}: raw id {id} reached the client:\n{text}"
        );
    }
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

async fn get(stack: &Stack, session: &str, path: &str) -> Reply {
    send(&stack.envoy.hms_url(), "GET", path, Some(session), None).await
}

/// Serves one sample from the HMS upstream and fetches it through Envoy.
async fn fetch(stack: &Stack, session: &str, prefix: &str) -> (Vec<u8>, Reply) {
    let (_, path, body) = sample(prefix);
    stack
        .hms
        .set(path.split('?').next().unwrap(), Canned::json(body.clone()));
    let reply = get(stack, session, path).await;
    (body, reply)
}

fn str_at<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} missing in {v}"))
}

/// The one request HMS saw since the last `clear`.
fn only_seen(stack: &Stack) -> Recorded {
    let seen = stack.hms.seen();
    assert_eq!(seen.len(), 1, "HMS saw {} requests", seen.len());
    seen.into_iter().next().unwrap()
}

/// Asserts a local 4xx JSON error that names `alias`, and that HMS saw nothing.
fn assert_refused(stack: &Stack, reply: &Reply, status: u16, alias: &str, case: &str) {
    assert_eq!(reply.status, status, "{case}: {}", reply.text());
    let v = reply.json();
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(alias),
        "{case}: the error names {alias}: {message}"
    );
    assert!(
        stack.hms.seen().is_empty(),
        "{case}: HMS received {:?}",
        stack.hms.seen().iter().map(|r| &r.uri).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn every_sample_reaches_the_client_without_a_raw_id_and_aliases_are_stable() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let mut first: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
    let mut total_ids = 0;
    for round in 0..2 {
        for (file, path, original) in samples() {
            stack.hms.set(
                path.split('?').next().unwrap(),
                Canned::json(original.clone()),
            );
            let reply = get(&stack, "s-samples", path).await;
            assert_eq!(
                reply.status,
                200,
                "{file}: {}\n{}",
                reply.text(),
                stack.envoy.log_tail()
            );
            let original_text = String::from_utf8(original.clone()).unwrap();
            let raw = raw_ids(&original_text);
            assert!(raw.len() >= 3, "{file}: the oracle found only {raw:?}");
            total_ids += raw.len();
            assert_no_raw_id(file, &original_text, &reply.text());
            assert_no_raw_id(file, &original_text, &reply.header_text());
            assert!(
                !reply.text().contains("keyhole-verdict"),
                "{file}: the verdict line is stripped"
            );
            let (a, b): (Value, Value) = (serde_json::from_slice(&original).unwrap(), reply.json());
            assert_eq!(
                skeleton(&a),
                skeleton(&b),
                "{file}: the document's shape changed"
            );
            match first.get(file) {
                None => {
                    first.insert(file, reply.body.clone());
                }
                Some(before) => assert_eq!(
                    before, &reply.body,
                    "{file}: aliases changed when fetched again"
                ),
            }
        }
        assert!(
            round == 1 || total_ids > 100,
            "the oracle found {total_ids} ids"
        );
    }
    let out = |p: &str| -> Value {
        serde_json::from_slice(&first[samples().iter().find(|s| s.0.starts_with(p)).unwrap().0])
            .unwrap()
    };
    // One patient, one alias, in every response and every form.
    let anna = str_at(&out("01"), "/data/0/id").to_owned();
    assert!(anna.starts_with("patient-"), "{anna}");
    assert_eq!(str_at(&out("01"), "/data/0/fhirId"), anna);
    assert_eq!(str_at(&out("02"), "/data/id"), anna);
    assert_eq!(
        str_at(&out("02"), "/data/fhirReference"),
        format!("Patient/{anna}")
    );
    assert_eq!(str_at(&out("04"), "/data/patient/id"), anna);
    assert_eq!(
        str_at(&out("06"), "/data/patient/reference"),
        format!("Patient/{anna}")
    );
    assert!(str_at(&out("08"), "/errors/1/message").contains(&format!("{anna} (Patient/{anna})")));
    // The FHIR-only create response (07) gets the alias of the UUID+FHIR list entry (03).
    let list = out("03")["data"].as_array().unwrap().clone();
    let booked = list
        .iter()
        .find(|a| a["start"] == "2025-03-25T10:30:00+01:00")
        .expect("booked entry");
    let appt = booked["id"].as_str().unwrap();
    assert!(appt.starts_with("patient-appt-"), "{appt}");
    assert_eq!(booked["fhirId"], appt);
    assert_eq!(str_at(&out("07"), "/fhirId"), appt);
    assert_eq!(
        str_at(&out("07"), "/reference"),
        format!("Appointment/{appt}")
    );
    assert!(str_at(&out("07"), "/location").contains(&format!("/Appointment/{appt}/")));
}

#[tokio::test]
async fn a_request_built_from_aliases_reaches_hms_with_the_real_ids() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let (_, list) = fetch(&stack, "s-round", "01").await;
    let (_, appts) = fetch(&stack, "s-round", "03").await;
    let v = list.json();
    let anna = str_at(&v, "/data/0/id").to_owned();
    let clinic = str_at(&v, "/data/0/clinic/slug").to_owned();
    let booked = appts.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["start"] == "2025-03-25T10:30:00+01:00")
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .unwrap();
    let anna_uuid = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";

    let cases = [
        (format!("/api/v2/patients/{anna}"), format!("/api/v2/patients/{anna_uuid}")),
        (
            format!("/api/v2/appointments?patientId={anna}&clinic={clinic}&status=booked"),
            format!("/api/v2/appointments?patientId={anna_uuid}&clinic=clinic-berlin-mitte&status=booked"),
        ),
        (format!("/fhir/R4/Patient/{anna}"), "/fhir/R4/Patient/pat-000123".to_owned()),
        (format!("/fhir/R4/Appointment/{booked}"), "/fhir/R4/Appointment/appt-0009812".to_owned()),
        // A drifted alias is repaired to the one this session issued.
        (format!("/api/v2/patients/{}", anna.replace("patient-", "patient-record-")), format!("/api/v2/patients/{anna_uuid}")),
    ];
    for (sent, expected) in cases {
        stack.hms.clear();
        let reply = get(&stack, "s-round", &sent).await;
        assert_eq!(reply.status, 200, "{sent}: {}", reply.text());
        assert_eq!(only_seen(&stack).uri, expected, "{sent}");
    }

    // A JSON body: each place gets the form it expects. The HMS upstream echoes
    // the body, so the client gets its own request back, aliased again.
    let body = serde_json::json!({
        "patientId": anna,
        "patient": {"reference": format!("Patient/{anna}"), "fhirId": anna},
        "appointmentId": booked,
        "note": format!("Kontrolle für {anna}, bitte \"dringend\""),
    });
    let sent = serde_json::to_vec(&body).unwrap();
    stack.hms.clear();
    let reply = send(
        &stack.envoy.hms_url(),
        "POST",
        &format!("/api/v2/patients/{anna}/notes"),
        Some("s-round"),
        Some(sent),
    )
    .await;
    assert_eq!(
        reply.status,
        200,
        "{}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    let seen = only_seen(&stack);
    assert_eq!(seen.uri, format!("/api/v2/patients/{anna_uuid}/notes"));
    let got: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(got["patientId"], anna_uuid);
    assert_eq!(got["patient"]["reference"], "Patient/pat-000123");
    assert_eq!(got["patient"]["fhirId"], "pat-000123");
    let (_, _, list03) = sample("03");
    let list03: Value = serde_json::from_slice(&list03).unwrap();
    let booked_uuid = list03["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["start"] == "2025-03-25T10:30:00+01:00")
        .unwrap()["id"]
        .clone();
    assert_eq!(
        got["appointmentId"], booked_uuid,
        "a plain id field gets the UUID"
    );
    assert_eq!(
        got["note"],
        format!("Kontrolle für {anna_uuid}, bitte \"dringend\"")
    );
    let length = seen
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    assert_eq!(
        length,
        Some(seen.body.len()),
        "HMS got a correct content-length"
    );
    assert_eq!(
        reply.json(),
        body,
        "the echo comes back with the same aliases"
    );
}

#[tokio::test]
async fn foreign_invented_sentinel_and_near_miss_aliases_never_reach_hms() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let (_, list) = fetch(&stack, "s-owner", "01").await;
    let anna = str_at(&list.json(), "/data/0/id").to_owned();
    let hms = stack.envoy.hms_url();
    let cases: Vec<(&str, &str, String, Option<Value>, &str)> = vec![
        (
            "foreign",
            "s-intruder",
            format!("/api/v2/patients/{anna}"),
            None,
            anna.as_str(),
        ),
        (
            "invented",
            "s-owner",
            "/api/v2/patients/patient-777".into(),
            None,
            "patient-777",
        ),
        (
            "sentinel",
            "s-owner",
            "/api/v2/patients/patient-000".into(),
            None,
            "patient-000",
        ),
        (
            "near miss never issued",
            "s-owner",
            "/api/v2/patients/patient-record-042".into(),
            None,
            "patient-record-042",
        ),
        (
            "invented in the query",
            "s-owner",
            format!("/api/v2/appointments?patientId={anna}&practitionerId=practitioner-404"),
            None,
            "practitioner-404",
        ),
        (
            "invented in the body",
            "s-owner",
            "/api/v2/appointments".into(),
            Some(serde_json::json!({"patientId": anna, "practitionerId": "practitioner-999"})),
            "practitioner-999",
        ),
        (
            "foreign in the body",
            "s-intruder",
            "/api/v2/appointments".into(),
            Some(serde_json::json!({"note": format!("for {anna}")})),
            anna.as_str(),
        ),
    ];
    for (case, session, path, body, alias) in cases {
        stack.hms.clear();
        let method = if body.is_some() { "POST" } else { "GET" };
        let reply = send(
            &hms,
            method,
            &path,
            Some(session),
            body.map(|b| serde_json::to_vec(&b).unwrap()),
        )
        .await;
        assert_refused(&stack, &reply, 404, alias, case);
    }
    // The owner's alias still works: the refusals changed nothing.
    stack.hms.clear();
    assert_eq!(
        get(&stack, "s-owner", &format!("/api/v2/patients/{anna}"))
            .await
            .status,
        200
    );
    assert_eq!(
        only_seen(&stack).uri,
        "/api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71"
    );
    let stat = |name: &'static str| {
        let envoy = &stack.envoy;
        async move {
            envoy
                .stat(&format!("wasmcustom.keyhole.{name}"))
                .await
                .unwrap()
        }
    };
    assert!(stat("hms_refused.unknown_alias").await >= 1);
    assert!(stat("hms_aliases_decoded").await >= 1);
}

#[tokio::test]
async fn a_request_without_the_session_header_fails_closed() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let (_, path, body) = sample("02");
    stack.hms.set(path, Canned::json(body));
    let hms = stack.envoy.hms_url();
    for (method, body) in [("GET", None), ("POST", Some(b"{\"q\":1}".to_vec()))] {
        let reply = send(&hms, method, path, None, body).await;
        assert_eq!(reply.status, 400, "{method}: {}", reply.text());
        assert!(reply.text().contains(SESSION_HEADER), "{}", reply.text());
        let reply = send(&hms, method, path, Some(""), None).await;
        assert_eq!(reply.status, 400, "{method} with an empty session");
    }
    assert!(
        stack.hms.seen().is_empty(),
        "HMS received a request without a session"
    );
}

#[tokio::test]
async fn control_down_withholds_responses_and_refuses_aliased_requests() {
    let mut stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let (_, list) = fetch(&stack, "s-down", "01").await;
    let anna = str_at(&list.json(), "/data/0/id").to_owned();
    stack.control.as_mut().unwrap().kill().await.expect("kill");

    // A response full of ids: a 502 JSON error, no raw id in body or headers.
    let (file, path, original) = sample("04");
    let mut canned = Canned::json(original.clone());
    canned.headers.push((
        "location".into(),
        "/api/v2/visits/10c85729-d6ad-4aca-820e-d8626e93e35d".into(),
    ));
    canned
        .headers
        .push(("x-hms-record".into(), "Encounter/enc-0045120".into()));
    stack.hms.set(path.split('?').next().unwrap(), canned);
    let reply = get(&stack, "s-down", path).await;
    assert_eq!(reply.status, 502, "{file}: {}", reply.text());
    assert_eq!(
        reply.json()["error"]["type"],
        "keyhole_unaliasable_response"
    );
    let original_text = String::from_utf8(original).unwrap();
    assert_no_raw_id(file, &original_text, &reply.text());
    assert_no_raw_id(
        file,
        "/api/v2/visits/10c85729-d6ad-4aca-820e-d8626e93e35d Encounter/enc-0045120",
        &reply.header_text(),
    );
    assert!(reply.header("location").is_none());

    // A bodiless response whose Location carries an id: withheld too.
    let mut created = Canned::json(Vec::new());
    created.status = 201;
    created.headers.push((
        "location".into(),
        "/api/v2/patients/74229a55-de5f-4d66-af4a-88e122c37321".into(),
    ));
    stack.hms.set("/api/v2/patients", created);
    let reply = send(
        &stack.envoy.hms_url(),
        "POST",
        "/api/v2/patients",
        Some("s-down"),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert!(
        !reply.header_text().contains("74229a55"),
        "{}",
        reply.header_text()
    );

    // A request with an alias cannot be decoded: refused, HMS sees nothing.
    stack.hms.clear();
    let reply = get(&stack, "s-down", &format!("/api/v2/patients/{anna}")).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(stack.hms.seen().is_empty());

    // Back up: everything works again, with the same aliases.
    stack
        .control
        .as_mut()
        .unwrap()
        .restart()
        .await
        .expect("restart");
    let (_, again) = fetch(&stack, "s-down", "01").await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, list.body);
}

#[tokio::test]
async fn conflicting_ids_and_unreadable_bodies_are_withheld() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    fetch(&stack, "s-conflict", "01").await;
    // Anna's UUID with another patient's FHIR id: a corrupt projection.
    let body = br#"{"data":{"id":"039b70b8-92f7-44b7-9c91-4e3f0e900c71","fhirId":"pat-000871","name":"x"}}"#;
    stack
        .hms
        .set("/api/v2/patients/x", Canned::json(body.to_vec()));
    let reply = get(&stack, "s-conflict", "/api/v2/patients/x").await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_no_raw_id(
        "conflict",
        std::str::from_utf8(body).unwrap(),
        &reply.text(),
    );
    assert!(reply.text().contains("conflict"), "{}", reply.text());

    // A body keyhole cannot read is never passed on: broken JSON, an encoding.
    let broken = br#"{"data":{"id":"74229a55-de5f-4d66-af4a-88e122c37321","#;
    stack
        .hms
        .set("/api/v2/patients/broken", Canned::json(broken.to_vec()));
    let mut gzipped = Canned::json(b"\x1f\x8b 74229a55-de5f-4d66-af4a-88e122c37321".to_vec());
    gzipped
        .headers
        .push(("content-encoding".into(), "gzip".into()));
    stack.hms.set("/api/v2/patients/gzipped", gzipped);
    for path in ["/api/v2/patients/broken", "/api/v2/patients/gzipped"] {
        let reply = get(&stack, "s-conflict", path).await;
        assert_eq!(reply.status, 502, "{path}: {}", reply.text());
        assert_eq!(
            reply.json()["error"]["type"],
            "keyhole_unaliasable_response"
        );
        assert!(
            !reply.text().contains("74229a55") && !reply.header_text().contains("gzip"),
            "{path}"
        );
    }
    // HMS is asked for bodies keyhole can read.
    stack.hms.clear();
    let resp = reqwest::Client::new()
        .get(format!("{}/api/v2/patients/broken", stack.envoy.hms_url()))
        .header(SESSION_HEADER, "s-conflict")
        .header("accept-encoding", "gzip, br")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    assert!(
        only_seen(&stack).headers.get("accept-encoding").is_none(),
        "accept-encoding reached HMS"
    );
    // HMS's own counters say why: one conflict, three unreadable bodies;
    // the sample before them was aliased. None of this is an LLM rejection.
    let stat = |name: &'static str| {
        let envoy = &stack.envoy;
        async move {
            envoy
                .stat(&format!("wasmcustom.keyhole.{name}"))
                .await
                .unwrap()
        }
    };
    assert_eq!(stat("hms_withheld.conflict").await, 1);
    assert_eq!(stat("hms_withheld.unreadable").await, 3);
    assert_eq!(stat("hms_withheld.control").await, 0);
    assert!(stat("hms_responses_aliased").await >= 1);
    assert_eq!(stat("rejected").await, 0);
}

/// `data` gzip-compressed (real deflate).
fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// `data` zlib-wrapped deflate (`content-encoding: deflate`).
fn zlib(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// `data` as one zstd frame of raw blocks: valid for any zstd decoder, built
/// without a compression library.
fn zstd(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    // Frame header: a 4-byte content size, a single segment, no checksum.
    out.push(0xa0);
    out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_le_bytes());
    let chunks: Vec<&[u8]> = if data.is_empty() {
        vec![&[]]
    } else {
        data.chunks(65_536).collect()
    };
    for (i, chunk) in chunks.iter().enumerate() {
        let last = u32::from(i + 1 == chunks.len());
        // Block header: last flag, type raw (0), size.
        let header = last | (u32::try_from(chunk.len()).unwrap() << 3);
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(chunk);
    }
    out
}

/// `data` as a brotli stream of uncompressed meta-blocks: valid for any
/// brotli decoder, built without a compression library.
fn brotli(data: &[u8]) -> Vec<u8> {
    // Bits are packed from the least significant bit of each byte up.
    struct Bits {
        out: Vec<u8>,
        acc: u32,
        n: u32,
    }
    impl Bits {
        fn put(&mut self, value: u32, bits: u32) {
            self.acc |= value << self.n;
            self.n += bits;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        fn pad(&mut self) {
            if self.n > 0 {
                self.out.push(self.acc as u8);
                (self.acc, self.n) = (0, 0);
            }
        }
    }
    let mut bits = Bits {
        out: Vec::new(),
        acc: 0,
        n: 0,
    };
    bits.put(0, 1); // window: 16 bits
    for chunk in data.chunks(65_536) {
        bits.put(0, 1); // not the last meta-block
        bits.put(0, 2); // its length in four nibbles
        bits.put(u32::try_from(chunk.len() - 1).unwrap(), 16);
        bits.put(1, 1); // uncompressed
        bits.pad();
        bits.out.extend_from_slice(chunk);
    }
    bits.put(1, 1); // last meta-block,
    bits.put(1, 1); // and empty
    bits.pad();
    bits.out
}

#[tokio::test]
async fn compressed_responses_are_decoded_and_aliased_and_unreadable_ones_withheld() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let (file, path, original) = sample("02");
    let original_text = String::from_utf8(original.clone()).unwrap();
    let canned = |encoding: Option<&str>, extra: &[(&str, &str)], body: Vec<u8>| {
        let mut canned = Canned::json(body);
        if let Some(e) = encoding {
            canned.headers.push(("content-encoding".into(), e.into()));
        }
        canned
            .headers
            .extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        canned
    };
    // A large body too, so that it arrives in many chunks.
    let mut big = Vec::from(&b"{\"data\":["[..]);
    for i in 0..3_000 {
        big.extend_from_slice(
            format!(
                "{}{{\"id\":\"pat-{:06}\",\"note\":\"seen\"}}",
                if i > 0 { "," } else { "" },
                100_000 + i
            )
            .as_bytes(),
        );
    }
    big.extend_from_slice(b"]}");
    let cases: [(&str, &str, Vec<(&str, &str)>, Vec<u8>, &[u8]); 7] = [
        ("gzip", "gzip", vec![], gzip(&original), &original),
        ("deflate", "deflate", vec![], zlib(&original), &original),
        (
            "gzip, no-transform",
            "gzip",
            vec![("cache-control", "no-transform")],
            gzip(&original),
            &original,
        ),
        ("gzip, 200 KB", "gzip", vec![], gzip(&big), &big),
        ("brotli", "br", vec![], brotli(&original), &original),
        ("zstd", "zstd", vec![], zstd(&original), &original),
        (
            "zstd inside gzip",
            "zstd, gzip",
            vec![],
            gzip(&zstd(&original)),
            &original,
        ),
    ];
    for (case, encoding, extra, body, plain) in cases {
        stack.hms.set(path, canned(Some(encoding), &extra, body));
        let reply = get(&stack, "s-compressed", path).await;
        assert_eq!(
            reply.status,
            200,
            "{case}: {}\n{}",
            reply.text(),
            stack.envoy.log_tail()
        );
        assert!(
            reply.header("content-encoding").is_none(),
            "{case}: {}",
            reply.header_text()
        );
        let plain_text = std::str::from_utf8(plain).unwrap();
        assert_no_raw_id(file, plain_text, &reply.text());
        let (a, b): (Value, Value) = (serde_json::from_slice(plain).unwrap(), reply.json());
        assert_eq!(skeleton(&a), skeleton(&b), "{case}");
        let first = if plain == big.as_slice() {
            "/data/0/id"
        } else {
            "/data/id"
        };
        assert!(
            str_at(&b, first).starts_with("patient-"),
            "{case}: {}",
            str_at(&b, first)
        );
    }
    // Withheld: gzip bytes without content-encoding (core reads the magic
    // bytes), an encoding keyhole does not decode, a gzip body cut short, one
    // that is not gzip at all, and one that inflates past the body limit.
    let gzipped = gzip(&original);
    let bomb = gzip(&vec![b' '; 3 << 20]);
    for (case, encoding, body) in [
        ("gzip without content-encoding", None, gzipped.clone()),
        ("compress", Some("compress"), original.clone()),
        (
            "gzip cut short",
            Some("gzip"),
            gzipped[..gzipped.len() / 2].to_vec(),
        ),
        ("not gzip", Some("gzip"), original.clone()),
        ("3 MiB of spaces in 3 KB", Some("gzip"), bomb),
    ] {
        stack.hms.set(path, canned(encoding, &[], body));
        let reply = get(&stack, "s-compressed", path).await;
        assert_eq!(reply.status, 502, "{case}: {}", reply.text());
        assert_eq!(
            reply.json()["error"]["type"],
            "keyhole_unaliasable_response",
            "{case}"
        );
        assert_no_raw_id(case, &original_text, &reply.text());
        assert_no_raw_id(case, &original_text, &reply.header_text());
    }
    let withheld = stack
        .envoy
        .stat("wasmcustom.keyhole.hms_withheld.unreadable")
        .await
        .unwrap();
    assert_eq!(withheld, 5);
}

#[tokio::test]
async fn a_one_megabyte_patient_list_is_aliased_whole() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let mut body = String::from(r#"{"data":["#);
    let mut uuids = Vec::new();
    let mut i = 0u64;
    while body.len() < 1 << 20 {
        let uuid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            i * 7919 + 1,
            i % 65536,
            i % 4096,
            (i * 3) % 4096,
            i * 104_729
        );
        body.push_str(&format!(
            r#"{}{{"id":"{uuid}","fhirId":"pat-{i:06}","note":"record {uuid} reviewed","self":"/api/v2/patients/{uuid}"}}"#,
            if i > 0 { "," } else { "" }
        ));
        uuids.push(uuid);
        i += 1;
    }
    body.push_str("]}");
    stack
        .hms
        .set("/api/v2/patients", Canned::json(body.clone().into_bytes()));
    let reply = get(&stack, "s-1mb", "/api/v2/patients").await;
    assert_eq!(
        reply.status,
        200,
        "{} B: {}\n{}",
        body.len(),
        reply.text(),
        stack.envoy.log_tail()
    );
    let out = reply.text();
    assert!(
        uuids.iter().all(|u| !out.contains(u.as_str())),
        "a raw UUID reached the client"
    );
    assert!(
        !Regex::new(r"pat-\d{6}").unwrap().is_match(&out),
        "a raw FHIR id reached the client"
    );
    let v = reply.json();
    assert_eq!(v["data"].as_array().map(Vec::len), Some(uuids.len()));
}

#[tokio::test]
async fn windows_1252_text_declared_so_is_read_as_utf8_and_aliased() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let uuid = "5b0e4c1a-93d2-4f6e-8a7b-2c1d0e9f8a7b";
    // `Müller`, `€` and curly quotes in windows-1252 bytes around the ids.
    let mut html = b"<html><body><p>Patientin M\xfcller (\x93".to_vec();
    html.extend_from_slice(format!("/api/v2/patients/{uuid}").as_bytes());
    html.extend_from_slice(b"\x94), pat-000777, Kosten 12 \x80</p></body></html>");
    for (case, content_type) in [
        ("iso-8859-1", "text/html; charset=ISO-8859-1"),
        ("windows-1252", "text/html;charset=\"windows-1252\""),
    ] {
        let mut canned = Canned::json(html.clone());
        canned
            .headers
            .push(("content-type".into(), content_type.into()));
        stack.hms.set("/api/v2/patients/letter", canned);
        let reply = get(&stack, "s-latin1", "/api/v2/patients/letter").await;
        assert_eq!(
            reply.status,
            200,
            "{case}: {}\n{}",
            reply.text(),
            stack.envoy.log_tail()
        );
        assert_eq!(
            reply.header("content-type").as_deref(),
            Some("text/html; charset=utf-8"),
            "{case}"
        );
        let text = String::from_utf8(reply.body.clone()).expect("UTF-8 out");
        assert!(
            text.contains("Patientin Müller (“/api/v2/patients/patient-"),
            "{case}: {text}"
        );
        assert!(text.contains("Kosten 12 €"), "{case}: {text}");
        assert!(
            !text.contains(uuid) && !text.contains("pat-000777"),
            "{case}: raw id in {text}"
        );
    }
    // Another declared charset is not guessed at: its bytes are withheld.
    let mut canned = Canned::json(html.clone());
    canned
        .headers
        .push(("content-type".into(), "text/html; charset=shift_jis".into()));
    stack.hms.set("/api/v2/patients/letter", canned);
    let reply = get(&stack, "s-latin1", "/api/v2/patients/letter").await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert!(!reply.text().contains(uuid));
}

#[tokio::test]
async fn headers_and_text_bodies_are_aliased() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let (_, list) = fetch(&stack, "s-headers", "01").await;
    let anna = str_at(&list.json(), "/data/0/id").to_owned();
    let schmitt = str_at(&list.json(), "/data/1/id").to_owned();

    // 201 with a body and a Location.
    let (_, _, created) = sample("07");
    let mut canned = Canned::json(created);
    canned.status = 201;
    canned.headers.push((
        "location".into(),
        "/api/v2/appointments/appt-0009812".into(),
    ));
    canned.headers.push((
        "link".into(),
        "</api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71>; rel=\"patient\"".into(),
    ));
    stack.hms.set("/api/v2/appointments", canned);
    let reply = send(
        &stack.envoy.hms_url(),
        "POST",
        "/api/v2/appointments",
        Some("s-headers"),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let appt = str_at(&reply.json(), "/fhirId").to_owned();
    assert_eq!(
        reply.header("location").unwrap(),
        format!("/api/v2/appointments/{appt}")
    );
    assert_eq!(
        reply.header("link").unwrap(),
        format!("</api/v2/patients/{anna}>; rel=\"patient\"")
    );

    // 201 without a body: the headers alone are aliased.
    let mut bare = Canned::json(Vec::new());
    bare.status = 201;
    bare.headers.push((
        "location".into(),
        "/api/v2/patients/74229a55-de5f-4d66-af4a-88e122c37321".into(),
    ));
    stack.hms.set("/api/v2/patients", bare);
    let reply = send(
        &stack.envoy.hms_url(),
        "POST",
        "/api/v2/patients",
        Some("s-headers"),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        reply.header("location").unwrap(),
        format!("/api/v2/patients/{schmitt}")
    );

    // A text body: UUIDs, references and prefixed FHIR ids.
    let text =
        "Patient 039b70b8-92f7-44b7-9c91-4e3f0e900c71 (Patient/pat-000123) moved to prac-00042.\n";
    let mut plain = Canned::json(text.as_bytes().to_vec());
    plain
        .headers
        .push(("content-type".into(), "text/plain; charset=utf-8".into()));
    stack.hms.set("/api/v2/export.txt", plain);
    let reply = get(&stack, "s-headers", "/api/v2/export.txt").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_no_raw_id("text", text, &reply.text());
    assert!(
        reply.text().starts_with(&format!(
            "Patient {anna} (Patient/{anna}) moved to practitioner-"
        )),
        "{}",
        reply.text()
    );

    // An upstream cannot forge the hold or a verdict.
    let mut forged = Canned::json(
        b"keyhole-verdict 0 \n{\"id\":\"039b70b8-92f7-44b7-9c91-4e3f0e900c71\"}".to_vec(),
    );
    forged.headers.push(("x-keyhole-hold".into(), "1".into()));
    forged
        .headers
        .push(("content-type".into(), "text/plain".into()));
    stack.hms.set("/api/v2/forged", forged);
    let reply = get(&stack, "s-headers", "/api/v2/forged").await;
    assert!(!reply.text().contains("039b70b8"), "{}", reply.text());
    assert!(
        reply.text().starts_with("keyhole-verdict 0 \n"),
        "the upstream's line is body text: {}",
        reply.text()
    );
}

/// Reads a request's head (through the blank line); `None` when the peer
/// closes first.
async fn read_head(sock: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(head)
}

/// An HMS upstream that answers every request with `body` in small chunks
/// (split mid-id) and id-carrying headers.
async fn chunking_upstream(body: Vec<u8>, location: &'static str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                if read_head(&mut sock).await.is_none() {
                    return;
                }
                let start = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nlocation: {location}\r\nconnection: close\r\n\r\n"
                );
                let _ = sock.write_all(start.as_bytes()).await;
                for chunk in body.chunks(97) {
                    let _ = sock
                        .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                        .await;
                    let _ = sock.write_all(chunk).await;
                    let _ = sock.write_all(b"\r\n").await;
                    let _ = sock.flush().await;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let _ = sock.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_body_in_many_chunks_is_aliased_whole() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let _control = control::Control::start(&socket, &dir.path().join("data"), &[])
        .await
        .expect("control");
    let (file, path, original) = sample("04");
    let upstream = chunking_upstream(
        original.clone(),
        "/api/v2/visits/10c85729-d6ad-4aca-820e-d8626e93e35d",
    )
    .await;
    let defaults = raw_ids_pass();
    let envoy = envoy::Envoy::start(envoy::EnvoyOptions {
        dir: dir.path().to_owned(),
        socket,
        llm_upstream: upstream,
        hms_upstream: upstream,
        llm_filter_config: defaults.llm_filter_config,
        hms_filter_config: defaults.hms_filter_config,
        max_body_bytes: defaults.max_body_bytes,
        baseline: false,
    })
    .await
    .expect("envoy");
    let reply = send(&envoy.hms_url(), "GET", path, Some("s-chunks"), None).await;
    assert_eq!(reply.status, 200, "{}\n{}", reply.text(), envoy.log_tail());
    let original_text = String::from_utf8(original.clone()).unwrap();
    assert_no_raw_id(file, &original_text, &reply.text());
    let (a, b): (Value, Value) = (serde_json::from_slice(&original).unwrap(), reply.json());
    assert_eq!(skeleton(&a), skeleton(&b));
    let visit = str_at(&b, "/data/id");
    assert_eq!(
        reply.header("location").unwrap(),
        format!("/api/v2/visits/{visit}")
    );
}

#[tokio::test]
async fn aliases_survive_a_kill_9_of_control() {
    let mut stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let (_, list) = fetch(&stack, "s-crash", "01").await;
    let (_, created) = fetch(&stack, "s-crash", "07").await;
    // Killed right after the responses were aliased: no shutdown, no flush.
    stack.control.as_mut().unwrap().kill().await.expect("kill");
    stack
        .control
        .as_mut()
        .unwrap()
        .restart()
        .await
        .expect("restart");
    let anna = str_at(&list.json(), "/data/0/id").to_owned();
    let appt = str_at(&created.json(), "/fhirId").to_owned();
    stack.hms.clear();
    assert_eq!(
        get(&stack, "s-crash", &format!("/api/v2/patients/{anna}"))
            .await
            .status,
        200
    );
    assert_eq!(
        only_seen(&stack).uri,
        "/api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71"
    );
    stack.hms.clear();
    assert_eq!(
        get(&stack, "s-crash", &format!("/fhir/R4/Appointment/{appt}"))
            .await
            .status,
        200
    );
    assert_eq!(only_seen(&stack).uri, "/fhir/R4/Appointment/appt-0009812");
    // Re-fetching mints nothing new.
    let (_, again) = fetch(&stack, "s-crash", "01").await;
    assert_eq!(again.body, list.body);
}

/// The Redis URL the test set-up started (`scripts/with-services.sh`).
fn redis_url() -> String {
    std::env::var("KEYHOLE_TEST_REDIS_URL")
        .expect("KEYHOLE_TEST_REDIS_URL is not set: run through scripts/with-services.sh with redis-server installed")
}

#[tokio::test]
async fn two_controls_sharing_redis_agree_under_concurrent_encoding_and_survive_kill_9() {
    let prefix = format!("keyhole-e2e-{}-{}", std::process::id(), rand_seed());
    let options = StackOptions {
        control_args: vec![
            "--redis-url".into(),
            redis_url(),
            "--redis-prefix".into(),
            prefix,
        ],
        ..raw_ids_pass()
    };
    let mut a = Stack::start(options.clone()).await.expect("stack a");
    let b = Stack::start(options).await.expect("stack b");
    for (_, path, body) in samples() {
        a.hms
            .set(path.split('?').next().unwrap(), Canned::json(body.clone()));
        b.hms
            .set(path.split('?').next().unwrap(), Canned::json(body));
    }
    // The same entities, encoded by both controls at once, over and over.
    for round in 0..3 {
        let session = format!("s-shared-{round}");
        let mut from_a = Vec::new();
        let mut from_b = Vec::new();
        for (file, path, original) in samples() {
            let (ra, rb) = tokio::join!(get(&a, &session, path), get(&b, &session, path));
            assert_eq!(
                (ra.status, rb.status),
                (200, 200),
                "{file}: {} / {}",
                ra.text(),
                rb.text()
            );
            let original_text = String::from_utf8(original).unwrap();
            assert_no_raw_id(file, &original_text, &ra.text());
            assert_no_raw_id(file, &original_text, &rb.text());
            assert_eq!(
                ra.body, rb.body,
                "{file}: the two controls gave different aliases"
            );
            from_a.push(ra);
            from_b.push(rb);
        }
        // No alias for two entities: distinct raw ids map to distinct aliases.
        let anna = str_at(&from_a[0].json(), "/data/0/id").to_owned();
        let schmitt = str_at(&from_b[0].json(), "/data/1/id").to_owned();
        assert_ne!(anna, schmitt);
    }
    // kill -9 of one control; an alias minted through the other decodes through it.
    let (_, list) = fetch(&b, "s-shared-0", "01").await;
    let schmitt = str_at(&list.json(), "/data/1/id").to_owned();
    a.control.as_mut().unwrap().kill().await.expect("kill");
    a.control
        .as_mut()
        .unwrap()
        .restart()
        .await
        .expect("restart");
    a.hms.clear();
    assert_eq!(
        get(&a, "s-shared-0", &format!("/api/v2/patients/{schmitt}"))
            .await
            .status,
        200
    );
    assert_eq!(
        only_seen(&a).uri,
        "/api/v2/patients/74229a55-de5f-4d66-af4a-88e122c37321"
    );
}

/// Distinguishes Redis key prefixes of runs that share one server.
fn rand_seed() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Median and 90th percentile of `n` sequential GETs, in microseconds.
async fn timings(base: &str, path: &str, n: usize) -> (u128, u128) {
    let client = reqwest::Client::new();
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let resp = client
            .get(format!("{base}{path}"))
            .header(SESSION_HEADER, "s-latency")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        all.push(started.elapsed().as_micros());
    }
    all.sort_unstable();
    (all[n / 2], all[n * 9 / 10])
}

/// Prints the HMS route's latency with and without keyhole, same upstream,
/// same run: the largest sample and all samples in one 30 KB body. Numbers
/// only; timings are not asserted.
#[tokio::test]
async fn latency_of_the_hms_route_with_and_without_keyhole() {
    let stack = Stack::start(raw_ids_pass()).await.expect("stack");
    let defaults = raw_ids_pass();
    std::fs::create_dir_all(stack.dir.path().join("baseline")).unwrap();
    let baseline = envoy::Envoy::start(envoy::EnvoyOptions {
        dir: stack.dir.path().join("baseline"),
        socket: stack.socket(),
        llm_upstream: stack.llm.addr,
        hms_upstream: stack.hms.addr,
        llm_filter_config: defaults.llm_filter_config,
        hms_filter_config: defaults.hms_filter_config,
        max_body_bytes: defaults.max_body_bytes,
        baseline: true,
    })
    .await
    .expect("baseline envoy");
    let (largest, _, body) = samples().into_iter().max_by_key(|s| s.2.len()).unwrap();
    stack.hms.set("/api/v2/largest", Canned::json(body.clone()));
    let all: Vec<Value> = samples()
        .iter()
        .map(|s| serde_json::from_slice(&s.2).unwrap())
        .collect();
    let combined = serde_json::to_vec_pretty(&serde_json::json!({ "data": all })).unwrap();
    stack
        .hms
        .set("/api/v2/combined", Canned::json(combined.clone()));
    for (name, path, size) in [
        (largest, "/api/v2/largest", body.len()),
        ("all samples", "/api/v2/combined", combined.len()),
    ] {
        // Warm up both (first request mints the aliases).
        timings(&stack.envoy.hms_url(), path, 5).await;
        timings(&baseline.hms_url(), path, 5).await;
        let (with_p50, with_p90) = timings(&stack.envoy.hms_url(), path, 200).await;
        let (plain_p50, plain_p90) = timings(&baseline.hms_url(), path, 200).await;
        println!(
            "hms latency {name} ({size} bytes): keyhole p50 {with_p50} us p90 {with_p90} us; plain envoy p50 {plain_p50} us p90 {plain_p90} us; added p50 {} us",
            with_p50 as i128 - plain_p50 as i128
        );
    }
}

// === Headers, raw ids and compressed bodies ===

/// An HMS upstream that answers a request for each path (query aside) of
/// `routes` with its bytes as written (status line, headers, body), so a
/// header can be repeated exactly as sent; 404 for any other path.
async fn raw_upstream(routes: Vec<(&'static str, Vec<u8>)>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = std::sync::Arc::new(routes);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let routes = routes.clone();
            tokio::spawn(async move {
                let Some(head) = read_head(&mut sock).await else {
                    return;
                };
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let target = line.split(' ').nth(1).unwrap_or("");
                let path = target.split('?').next().unwrap_or("");
                let answer = routes
                    .iter()
                    .find(|(p, _)| *p == path)
                    .map(|(_, r)| r.clone())
                    .unwrap_or_else(|| {
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_vec()
                    });
                let _ = sock.write_all(&answer).await;
                let _ = sock.flush().await;
            });
        }
    });
    addr
}

/// A raw HTTP/1.1 response: `status`, `headers` in order (repeats kept), a
/// `content-length` for `body`, and `connection: close`.
fn raw_response(status: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n").into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(body);
    out
}

/// Control, and Envoy with `hms_upstream` and the HMS filter configuration
/// `hms_config`.
async fn stack_on(
    hms_upstream: SocketAddr,
    hms_config: &str,
) -> (tempfile::TempDir, control::Control, envoy::Envoy) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let control = control::Control::start(&socket, &dir.path().join("data"), &[])
        .await
        .expect("control");
    let defaults = StackOptions::default();
    let envoy = envoy::Envoy::start(envoy::EnvoyOptions {
        dir: dir.path().to_owned(),
        socket,
        llm_upstream: hms_upstream,
        hms_upstream,
        llm_filter_config: defaults.llm_filter_config,
        hms_filter_config: hms_config.to_owned(),
        max_body_bytes: defaults.max_body_bytes,
        baseline: false,
    })
    .await
    .expect("envoy");
    (dir, control, envoy)
}

/// Every value of header `name`, in order.
fn all(reply: &Reply, name: &str) -> Vec<String> {
    reply
        .headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn every_response_header_but_a_safe_few_is_aliased_and_repeated_headers_stay_repeated() {
    const UUID: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    const FHIR: &str = "pat-000123";
    let (_, search_path, search) = sample("01");
    // Ids in every kind of header; Envoy's own headers (date, server, the
    // upstream service time) forged with ids too: Envoy sets those itself.
    let headers = |ct: &str| -> Vec<(&'static str, String)> {
        vec![
            (
                "content-type",
                format!("{ct}; profile=\"https://hms.example/fhir/Patient/{FHIR}\""),
            ),
            ("x-patient-id", UUID.to_owned()),
            ("etag", format!("\"{FHIR}-v7\"")),
            (
                "link",
                format!("</api/v2/patients/{UUID}>; rel=\"patient\""),
            ),
            ("link", "</api/v2/help>; rel=\"help\"".to_owned()),
            ("link", format!("</fhir/R4/Patient/{FHIR}>; rel=\"fhir\"")),
            ("location", format!("/api/v2/patients/{UUID}")),
            ("content-location", format!("/fhir/R4/Patient/{FHIR}")),
            (
                "content-disposition",
                format!("attachment; filename=\"Arztbrief_{FHIR}_2025.pdf\""),
            ),
            ("x-envoy-patient", FHIR.to_owned()),
            ("date", FHIR.to_owned()),
            ("server", UUID.to_owned()),
            ("x-envoy-upstream-service-time", UUID.to_owned()),
        ]
    };
    let search_head = [("content-type", "application/json".to_owned())];
    let upstream = raw_upstream(vec![
        (
            search_path.split('?').next().unwrap(),
            raw_response("200 OK", &search_head, &search),
        ),
        (
            "/api/v2/letters/latest",
            raw_response("200 OK", &headers("application/json"), br#"{"ok":true}"#),
        ),
        (
            "/api/v2/letters",
            raw_response("201 Created", &headers("application/json"), b""),
        ),
        (
            "/api/v2/letters/latest.txt",
            raw_response("200 OK", &headers("text/plain"), b"no ids here"),
        ),
    ])
    .await;
    // Raw ids refused in requests (the default): Envoy's own UUID-shaped
    // x-request-id is not one of them.
    let (_dir, _control, envoy) = stack_on(upstream, r#"{"mode":"hms","timeout_ms":5000}"#).await;
    let hms = envoy.hms_url();
    let list = send(&hms, "GET", search_path, Some("s-rh"), None).await;
    assert_eq!(list.status, 200, "{}\n{}", list.text(), envoy.log_tail());
    let anna = str_at(&list.json(), "/data/0/id").to_owned();

    let cases = [
        ("with a JSON body", "GET", "/api/v2/letters/latest", 200),
        ("bodiless", "POST", "/api/v2/letters", 201),
        ("with a text body", "GET", "/api/v2/letters/latest.txt", 200),
    ];
    for (case, method, path, status) in cases {
        let body = (method == "POST").then(|| b"{}".to_vec());
        let reply = send(&hms, method, path, Some("s-rh"), body).await;
        assert_eq!(
            reply.status,
            status,
            "{case}: {}\n{}",
            reply.text(),
            envoy.log_tail()
        );
        let text = reply.header_text();
        for raw in [UUID, FHIR, "039b70b8"] {
            assert!(
                !text.contains(raw),
                "{case}: {raw} reached the client:\n{text}"
            );
        }
        assert_eq!(reply.header("x-patient-id").unwrap(), anna, "{case}");
        assert_eq!(
            reply.header("location").unwrap(),
            format!("/api/v2/patients/{anna}"),
            "{case}"
        );
        assert_eq!(
            reply.header("content-location").unwrap(),
            format!("/fhir/R4/Patient/{anna}"),
            "{case}"
        );
        assert_eq!(reply.header("x-envoy-patient").unwrap(), anna, "{case}");
        assert_eq!(
            all(&reply, "link"),
            [
                format!("</api/v2/patients/{anna}>; rel=\"patient\""),
                "</api/v2/help>; rel=\"help\"".to_owned(),
                format!("</fhir/R4/Patient/{anna}>; rel=\"fhir\""),
            ],
            "{case}: repeated headers stay repeated, in order"
        );
        assert!(
            reply.header("etag").unwrap().contains(&anna),
            "{case}: {text}"
        );
        assert!(
            reply.header("content-disposition").unwrap().contains(&anna),
            "{case}: {text}"
        );
        let ct = reply.header("content-type").unwrap();
        assert!(ct.contains(&format!("Patient/{anna}")), "{case}: {ct}");
        assert_ne!(
            reply.header("date").unwrap_or_default(),
            "",
            "{case}: Envoy's date"
        );
        if method == "GET" && path.ends_with("latest") {
            assert_eq!(reply.json(), serde_json::json!({"ok": true}), "{case}");
        }
    }
}

#[tokio::test]
async fn aliases_in_request_headers_are_decoded_and_unknown_ones_never_reach_hms() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let (_, list) = fetch(&stack, "s-qh", "01").await;
    let anna = str_at(&list.json(), "/data/0/id").to_owned();
    const UUID: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let hms = stack.envoy.hms_url();
    let client = reqwest::Client::new();
    let request = |method: &str, session: &str, headers: &[(&str, String)], body: bool| {
        let mut req = client
            .request(method.parse().unwrap(), format!("{hms}/api/v2/visits"))
            .header(SESSION_HEADER, session);
        for (name, value) in headers {
            req = req.header(*name, value.as_str());
        }
        if body {
            req = req
                .header("content-type", "application/json")
                .body(r#"{"note":"x"}"#);
        }
        req.send()
    };
    let encoded = anna.replace('-', "%2D");
    let headers = vec![
        ("x-patient-id", anna.clone()),
        ("if-match", format!("\"{anna}\"")),
        (
            "referer",
            format!("http://agent.local/api/v2/patients/{encoded}?tab=1"),
        ),
        (
            "link",
            format!("</fhir/R4/Patient/{anna}>; rel=\"subject\""),
        ),
        ("link", "</api/v2/help>; rel=\"help\"".to_owned()),
        ("authorization", format!("Bearer {anna}")),
    ];
    for (method, body) in [("GET", false), ("POST", true)] {
        stack.hms.clear();
        let r = request(method, "s-qh", &headers, body).await.unwrap();
        assert_eq!(r.status(), 200, "{method}: {}", r.text().await.unwrap());
        let seen = only_seen(&stack);
        let h = |name: &str| -> Vec<String> {
            seen.headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(h("x-patient-id"), [UUID], "{method}");
        assert_eq!(h("if-match"), [format!("\"{UUID}\"")], "{method}");
        assert_eq!(
            h("referer"),
            [format!("http://agent.local/api/v2/patients/{UUID}?tab=1")],
            "{method}"
        );
        assert_eq!(
            h("link"),
            [
                "</fhir/R4/Patient/pat-000123>; rel=\"subject\"",
                "</api/v2/help>; rel=\"help\""
            ],
            "{method}: a FHIR reference gets the FHIR id; the repeated header stays repeated"
        );
        // Credentials and the session header pass untouched.
        assert_eq!(h("authorization"), [format!("Bearer {anna}")], "{method}");
        assert_eq!(h(SESSION_HEADER), ["s-qh"], "{method}");
        assert!(h("x-keyhole-hold").is_empty(), "{method}");
        if body {
            assert_eq!(seen.body.as_ref(), br#"{"note":"x"}"#, "{method}");
        }
    }
    // An alias this session did not issue, in a header only: 404 naming it,
    // nothing reaches HMS; with a body, and from another session.
    let invented = format!("{}-777", anna.rsplit_once('-').unwrap().0);
    let cases = [
        (
            "invented",
            "s-qh",
            ("x-patient-id", invented.clone()),
            invented.clone(),
        ),
        (
            "invented, encoded",
            "s-qh",
            (
                "referer",
                format!("http://a/p/{}", invented.replace('-', "%2D")),
            ),
            invented.clone(),
        ),
        (
            "foreign",
            "s-other",
            ("if-match", format!("\"{anna}\"")),
            anna.clone(),
        ),
    ];
    for (case, session, header, alias) in cases {
        for (method, body) in [("GET", false), ("POST", true)] {
            stack.hms.clear();
            let r = request(method, session, std::slice::from_ref(&header), body)
                .await
                .unwrap();
            let reply = Reply::read(r).await;
            assert_refused(&stack, &reply, 404, &alias, &format!("{case} ({method})"));
        }
    }
}

#[tokio::test]
async fn raw_ids_in_requests_are_refused_by_default_and_counted_when_passed() {
    const UUID: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let refusing = Stack::start(StackOptions::default()).await.expect("stack");
    let hms = refusing.envoy.hms_url();
    refusing
        .hms
        .set("/api/v2/visits", Canned::json(b"{}".to_vec()));
    let client = reqwest::Client::new();
    let cases: Vec<(&str, &str, &str, Option<(&str, &str)>, Option<&str>)> = vec![
        (
            "path",
            "GET",
            "/api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71",
            None,
            None,
        ),
        ("path", "GET", "/api/v2/patients/482913", None, None),
        (
            "query",
            "GET",
            "/api/v2/visits?patientId=039b70b8-92f7-44b7-9c91-4e3f0e900c71",
            None,
            None,
        ),
        (
            "headers",
            "GET",
            "/api/v2/visits",
            Some(("x-patient-id", "pat-000123")),
            None,
        ),
        (
            "headers",
            "GET",
            "/api/v2/visits",
            Some((
                "referer",
                "http://a/patients/039b70b892f744b79c914e3f0e900c71",
            )),
            None,
        ),
        (
            "body",
            "POST",
            "/api/v2/visits",
            None,
            Some(r#"{"patientId":"039b70b8-92f7-44b7-9c91-4e3f0e900c71"}"#),
        ),
        (
            "body",
            "POST",
            "/api/v2/visits",
            None,
            Some(r#"{"note":"see %70at-000123"}"#),
        ),
    ];
    for (place, method, path, header, body) in &cases {
        refusing.hms.clear();
        let mut req = client
            .request(method.parse().unwrap(), format!("{hms}{path}"))
            .header(SESSION_HEADER, "s-raw");
        if let Some((name, value)) = header {
            req = req.header(*name, *value);
        }
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, 400, "{place} {path}: {text}");
        assert!(
            text.contains(&format!("in the {place}")),
            "the error names the place: {text}"
        );
        for raw in [UUID, "039b70b8", "482913", "pat-000123", "at-000123"] {
            assert!(!text.contains(raw), "the error quotes a raw id: {text}");
        }
        assert!(
            refusing.hms.seen().is_empty(),
            "{place} {path}: a raw id reached HMS"
        );
    }
    let counted = refusing
        .envoy
        .stat("wasmcustom.keyhole.hms_raw_ids")
        .await
        .unwrap();
    assert!(counted >= cases.len() as u64, "counted {counted}");
    // A request with no raw id goes on (Envoy's x-request-id is no raw id).
    let ok = send(&hms, "GET", "/api/v2/visits", Some("s-raw"), None).await;
    assert_eq!(ok.status, 200, "{}", ok.text());

    // `raw_ids: pass`: forwarded as sent, and counted.
    let passing = Stack::start(raw_ids_pass()).await.expect("stack");
    let (_, path, body) = sample("02");
    passing.hms.set(path, Canned::json(body));
    let reply = send(&passing.envoy.hms_url(), "GET", path, Some("s-raw"), None).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(only_seen(&passing).uri, path);
    let counted = passing
        .envoy
        .stat("wasmcustom.keyhole.hms_raw_ids")
        .await
        .unwrap();
    assert_eq!(counted, 1);
    assert!(
        passing.envoy.log_tail().contains("keyhole.raw-ids"),
        "logged"
    );
    assert!(
        !passing.envoy.log_tail().contains(UUID),
        "the log holds no raw id"
    );
}
