//! The request side of the HMS listener, end to end (the real `.wasm` in a
//! real Envoy, the real control binary, a recording HMS upstream, the default
//! `raw_ids: refuse`):
//!
//! - an alias decodes only where its kind fits: an Observation's alias under
//!   `/fhir/Patient/` (or as a `Patient/` reference, or as `patientId`) is
//!   refused with a 404 naming it and HMS sees nothing, while the same alias
//!   under `/fhir/Observation/` reaches HMS as the Observation's id;
//! - raw ids the model could only have from outside keyhole — glued with
//!   `_` in a path segment, in `If-Match: "<uuid>-v7"`, a number after a FHIR
//!   resource type in a path or a query reference, in the `Host` — are
//!   refused (400) and HMS sees nothing;
//! - bodies whose bytes do not show their text (gzip, UTF-16, a multipart
//!   part in base64 or quoted-printable) are read decoded: a raw id or an
//!   alias inside is refused (400), one holding neither goes on unchanged,
//!   and one keyhole cannot decode is refused.

use keyhole_e2e::hms_client::{Reply, SESSION_HEADER};
use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{Stack, StackOptions};
use regex::Regex;
use std::io::Write;

const PATIENT_UUID: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";

/// Sends a request with these headers (and body) and returns the reply.
async fn send(
    stack: &Stack,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Reply {
    let mut req = reqwest::Client::new()
        .request(
            method.parse().unwrap(),
            format!("{}{path}", stack.envoy.hms_url()),
        )
        .header(SESSION_HEADER, "s-requests");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some(b) = body {
        req = req.body(b);
    }
    Reply::read(req.send().await.expect("request through envoy")).await
}

/// Asserts the request was refused with `status` and HMS received nothing.
async fn refused(
    stack: &Stack,
    status: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Reply {
    stack.hms.clear();
    let reply = send(stack, method, path, headers, body).await;
    assert_eq!(
        reply.status,
        status,
        "{method} {path} {headers:?}: {}",
        reply.text()
    );
    assert!(
        stack.hms.seen().is_empty(),
        "{method} {path}: HMS saw {:?}",
        stack.hms.seen().iter().map(|r| &r.uri).collect::<Vec<_>>()
    );
    reply
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
        }
        for _ in chunk.len()..3 {
            out.push('=');
        }
    }
    out
}

/// One stack for the whole file: the cases share a session and never
/// interfere (each clears what HMS saw first).
#[tokio::test]
async fn hms_requests_are_decoded_only_where_they_fit_and_never_forwarded_unread() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    // A patient and an observation of that patient, as HMS shows them.
    let bundle = serde_json::json!({
        "resourceType": "Bundle", "type": "searchset",
        "entry": [
            {"resource": {"resourceType": "Patient", "id": "pat-000123", "identifier": [{"value": PATIENT_UUID}]}},
            {"resource": {"resourceType": "Observation", "id": "obs-0042", "status": "final",
                          "subject": {"reference": "Patient/pat-000123"}}}
        ]
    });
    stack.hms.set(
        "/fhir/Observation",
        Canned::json(serde_json::to_vec(&bundle).unwrap()),
    );
    let reply = send(&stack, "GET", "/fhir/Observation?code=8867-4", &[], None).await;
    assert_eq!(
        reply.status,
        200,
        "{}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    let text = reply.text();
    let alias = |prefix: &str| {
        Regex::new(&format!(r"\b{prefix}-[a-z0-9]{{4}}-[0-9]{{3,}}\b"))
            .unwrap()
            .find(&text)
            .unwrap_or_else(|| panic!("no {prefix} alias in {text}"))
            .as_str()
            .to_owned()
    };
    let (patient, observation) = (alias("patient"), alias("observation"));

    // 1. Kinds. Where they fit, aliases reach HMS as their records' ids.
    for (sent, expected) in [
        (
            format!("/fhir/Observation/{observation}"),
            "/fhir/Observation/obs-0042".to_owned(),
        ),
        (
            format!("/fhir/Patient/{patient}"),
            "/fhir/Patient/pat-000123".to_owned(),
        ),
        (
            format!("/fhir/Observation?subject=Patient/{patient}"),
            "/fhir/Observation?subject=Patient/pat-000123".to_owned(),
        ),
        (
            format!("/api/v2/search?q={observation}"),
            "/api/v2/search?q=obs-0042".to_owned(),
        ),
    ] {
        stack.hms.clear();
        let reply = send(&stack, "GET", &sent, &[], None).await;
        assert_eq!(reply.status, 200, "{sent}: {}", reply.text());
        let seen = stack.hms.seen();
        assert_eq!(seen.len(), 1, "{sent}");
        assert_eq!(seen[0].uri, expected, "{sent}");
    }
    // Where another kind is named: refused, naming the alias, HMS sees nothing.
    for path in [
        format!("/fhir/Patient/{observation}"),
        format!("/fhir/Observation?subject=Patient/{observation}"),
        format!("/api/v2/appointments?patientId={observation}"),
        format!("/fhir/Observation/{patient}"),
    ] {
        let reply = refused(&stack, 404, "GET", &path, &[], None).await;
        let wrong = if path.ends_with(&patient) {
            &patient
        } else {
            &observation
        };
        assert!(
            reply.text().contains(wrong.as_str()),
            "{path}: {}",
            reply.text()
        );
        assert!(
            reply.text().contains("cannot stand here"),
            "{path}: {}",
            reply.text()
        );
    }
    let body = serde_json::to_vec(&serde_json::json!({"patientId": observation})).unwrap();
    refused(
        &stack,
        404,
        "POST",
        "/api/v2/notes",
        &[("content-type", "application/json")],
        Some(body),
    )
    .await;

    // 2. Raw ids in places keyhole did not look at before.
    let if_match = format!("\"{PATIENT_UUID}-v7\"");
    let host = format!("{PATIENT_UUID}.hms.local");
    for (path, headers) in [
        (
            format!("/api/v2/documents/Arztbrief_{PATIENT_UUID}_2025.pdf"),
            vec![],
        ),
        (
            "/api/v2/visits/x".to_owned(),
            vec![("if-match", if_match.as_str())],
        ),
        ("/fhir/Patient/482913".to_owned(), vec![]),
        (
            "/fhir/Observation?subject=Patient/482913".to_owned(),
            vec![],
        ),
        ("/api/v2/visits".to_owned(), vec![("host", host.as_str())]),
    ] {
        let reply = refused(&stack, 400, "GET", &path, &headers, None).await;
        assert!(
            reply.text().contains("raw record ids"),
            "{path}: {}",
            reply.text()
        );
        assert!(
            !reply.text().contains(PATIENT_UUID),
            "the refusal never quotes the id"
        );
    }

    // 3. Bodies read decoded.
    stack
        .hms
        .set("/api/v2/uploads", Canned::json(&b"{\"ok\":true}"[..]));
    let json = |note: &str| serde_json::to_vec(&serde_json::json!({"note": note})).unwrap();
    let utf16 =
        |text: &str| -> Vec<u8> { text.encode_utf16().flat_map(u16::to_le_bytes).collect() };
    let multipart = |encoding: &str, content: &str| {
        format!(
            "--b1\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nplain\r\n--b1\r\nContent-Disposition: form-data; name=\"f\"\r\n\
             Content-Transfer-Encoding: {encoding}\r\n\r\n{content}\r\n--b1--\r\n"
        )
        .into_bytes()
    };
    let raw_note = format!("Befund für {PATIENT_UUID}");
    let qp = format!(
        "Befund f=C3=BCr {}=\r\n{}",
        &PATIENT_UUID[..18],
        &PATIENT_UUID[18..]
    );
    let cases: Vec<(&str, Vec<(&str, &str)>, Vec<u8>)> = vec![
        (
            "gzip raw id",
            vec![
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
            gzip(&json(&raw_note)),
        ),
        (
            "gzip text raw id",
            vec![("content-type", "text/plain"), ("content-encoding", "gzip")],
            gzip(raw_note.as_bytes()),
        ),
        (
            "utf-16 raw id",
            vec![("content-type", "text/plain; charset=utf-16le")],
            utf16(&raw_note),
        ),
        (
            "multipart base64",
            vec![("content-type", "multipart/form-data; boundary=b1")],
            multipart("base64", &base64(raw_note.as_bytes())),
        ),
        (
            "multipart quoted-printable",
            vec![("content-type", "multipart/form-data; boundary=b1")],
            multipart("quoted-printable", &qp),
        ),
        (
            "gzip alias",
            vec![
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
            gzip(&json(&patient)),
        ),
        (
            "utf-16 alias",
            vec![("content-type", "text/plain; charset=utf-16le")],
            utf16(&format!("für {patient}")),
        ),
        (
            "unknown coding",
            vec![
                ("content-type", "text/plain"),
                ("content-encoding", "compress"),
            ],
            b"x".to_vec(),
        ),
        (
            "corrupt gzip",
            vec![("content-type", "text/plain"), ("content-encoding", "gzip")],
            b"not gzip".to_vec(),
        ),
        (
            "unknown charset",
            vec![("content-type", "text/plain; charset=ebcdic-cp-us")],
            b"x".to_vec(),
        ),
    ];
    for (what, headers, body) in cases {
        let reply = refused(&stack, 400, "POST", "/api/v2/uploads", &headers, Some(body)).await;
        assert!(
            !reply.text().contains(PATIENT_UUID),
            "{what}: the refusal never quotes the id"
        );
        if what.ends_with("alias") {
            assert!(
                reply.text().contains(patient.as_str()),
                "{what}: {}",
                reply.text()
            );
        }
    }
    // Neither raw id nor alias: the body goes on as sent, still encoded.
    for (headers, body) in [
        (
            vec![
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
            gzip(&json("Kontrolle in 2 Wochen")),
        ),
        (
            vec![("content-type", "text/plain; charset=utf-16le")],
            utf16("Kontrolle für Frau Müller"),
        ),
        (
            vec![("content-type", "multipart/form-data; boundary=b1")],
            multipart("base64", &base64("Kontrolle".as_bytes())),
        ),
    ] {
        stack.hms.clear();
        let reply = send(
            &stack,
            "POST",
            "/api/v2/uploads",
            &headers,
            Some(body.clone()),
        )
        .await;
        assert_eq!(
            reply.status,
            200,
            "{headers:?}: {}\n{}",
            reply.text(),
            stack.envoy.log_tail()
        );
        let seen = stack.hms.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].body.as_ref(),
            body.as_slice(),
            "{headers:?}: forwarded unchanged"
        );
    }
    // An alias in the path beside such a body: the path is decoded (the
    // request headers are held for it), the body goes on unchanged.
    let body = gzip(&json("Kontrolle in 2 Wochen"));
    stack.hms.set(
        "/fhir/Patient/pat-000123/$everything",
        Canned::json(&b"{\"ok\":true}"[..]),
    );
    stack.hms.clear();
    let path = format!("/fhir/Patient/{patient}/$everything");
    let headers = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
    ];
    let reply = send(&stack, "POST", &path, &headers, Some(body.clone())).await;
    assert_eq!(
        reply.status,
        200,
        "{}\n{}",
        reply.text(),
        stack.envoy.log_tail()
    );
    let seen = stack.hms.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri, "/fhir/Patient/pat-000123/$everything");
    assert_eq!(
        seen[0].body.as_ref(),
        body.as_slice(),
        "the encoded body is forwarded unchanged"
    );
    assert_eq!(
        seen[0]
            .headers
            .get("content-encoding")
            .and_then(|v| v.to_str().ok()),
        Some("gzip")
    );
}

/// A `Range` request is answered whole: HMS never sees `Range` or `If-Range`,
/// so no partial answer carries part of an id past the last word.
#[tokio::test]
async fn range_requests_reach_hms_without_their_range() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    stack.hms.set(
        "/fhir/Patient",
        Canned::json(br#"{"resourceType":"Bundle","type":"searchset","total":0}"#.to_vec()),
    );
    stack.hms.clear();
    let reply = send(
        &stack,
        "GET",
        "/fhir/Patient?name=Schmidt",
        &[("range", "bytes=0-17"), ("if-range", "\"v7\"")],
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = stack.hms.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].headers.get("range").is_none() && seen[0].headers.get("if-range").is_none(),
        "{:?}",
        seen[0].headers
    );
}
