//! The hold protocol, Rust against Lua, through a real Envoy: verdict lines
//! written by `keyhole_core::proto::hold` (what the filter sends) are applied by the
//! shipped Lua hold filters (`envoy/keyhole_hold.lua`,
//! `envoy/keyhole_request_hold.lua`), and the Lua side's own answers are
//! byte-for-byte the replies `keyhole_core::proto::reply` defines. The wasm filter is
//! not in this config (`tests/envoy/hold.yaml.tmpl`): the upstream and the
//! client play keyhole's part, so every verdict shape can be sent.

use keyhole_core::proto::hold::{
    HeaderEdit, Verdict, HOLD_CLOSED, HOLD_HEADER, HOLD_OPEN, KEPT_ON_WITHHOLD, NAMES_HEADER,
};
use keyhole_core::proto::reply;
use keyhole_e2e::envoy::{Envoy, EnvoyOptions};
use keyhole_e2e::upstream::{Canned, Upstream};

async fn start() -> (tempfile::TempDir, Upstream, Envoy) {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await.unwrap();
    let mut options = EnvoyOptions::for_validation(dir.path());
    options.hms_upstream = upstream.addr;
    let envoy = Envoy::start_template("tests/envoy/hold.yaml.tmpl", options)
        .await
        .unwrap();
    (dir, upstream, envoy)
}

fn held(hold: &str, body: Vec<u8>, headers: &[(&str, &str)]) -> Canned {
    let mut canned = Canned::json(body);
    canned.headers.push((HOLD_HEADER.into(), hold.into()));
    canned
        .headers
        .extend(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    canned
}

#[tokio::test]
async fn response_verdicts_written_by_rust_are_applied_by_the_lua_hold() {
    let (_dir, upstream, envoy) = start().await;
    let http = reqwest::Client::new();

    // Status kept, one header set, one removed (the HMS listener's shape).
    let verdict = Verdict::keep(vec![
        HeaderEdit::Set("location".into(), "/api/v2/patients/patient-001".into()),
        HeaderEdit::Remove("link".into()),
    ]);
    let body = br#"{"id":"patient-001"}"#;
    upstream.set(
        "/edits",
        held(
            HOLD_CLOSED,
            verdict.frame(body).unwrap(),
            &[("link", "<raw>"), ("location", "/raw")],
        ),
    );
    let r = http
        .get(format!("{}/edits", envoy.hms_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["location"], "/api/v2/patients/patient-001");
    assert!(r.headers().get("link").is_none());
    assert!(r.headers().get(HOLD_HEADER).is_none());
    assert_eq!(r.headers()["content-length"], body.len().to_string());
    assert_eq!(r.bytes().await.unwrap().as_ref(), body);

    // A repeated header set to several values, and one value added: each
    // stays a header of its own, in order.
    let mut edits = HeaderEdit::set_all(
        "link",
        vec!["<a/patient-001>; rel=\"a\"".into(), "<b>; rel=\"b\"".into()],
    );
    edits.push(HeaderEdit::Add("x-patient-id".into(), "patient-002".into()));
    edits.extend(HeaderEdit::set_all(
        "etag",
        vec!["\"patient-001-v7\"".into()],
    ));
    let verdict = Verdict::keep(edits);
    upstream.set(
        "/repeated",
        held(
            HOLD_CLOSED,
            verdict.frame(body).unwrap(),
            &[
                ("link", "<raw-1>"),
                ("x-patient-id", "patient-001"),
                ("etag", "\"raw\""),
            ],
        ),
    );
    let r = http
        .get(format!("{}/repeated", envoy.hms_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let all = |name: &str| -> Vec<String> {
        r.headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        all("link"),
        ["<a/patient-001>; rel=\"a\"", "<b>; rel=\"b\""]
    );
    assert_eq!(all("x-patient-id"), ["patient-001", "patient-002"]);
    assert_eq!(all("etag"), ["\"patient-001-v7\""]);
    assert_eq!(r.bytes().await.unwrap().as_ref(), body);

    // A new status and off-surface names (the LLM listener's shape): the body
    // is the filter's error reply.
    let blocked = reply::off_surface_tool_call(&["drop_table", "exfiltrate"]);
    let verdict = Verdict {
        status: blocked.status,
        names: vec!["drop_table".into(), "exfiltrate".into()],
        edits: vec![],
    };
    upstream.set(
        "/status",
        held(
            HOLD_OPEN,
            verdict.frame(&blocked.body).unwrap(),
            &[("content-type", "text/event-stream")],
        ),
    );
    let r = http
        .get(format!("{}/status", envoy.hms_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), blocked.status);
    assert_eq!(r.headers()[NAMES_HEADER], "drop_table,exfiltrate");
    assert_eq!(r.headers()["content-type"], reply::CONTENT_TYPE);
    assert_eq!(r.bytes().await.unwrap().as_ref(), blocked.body.as_slice());

    // Open hold without a verdict: the body passes unchanged.
    upstream.set("/open", held(HOLD_OPEN, b"{\"plain\":true}".to_vec(), &[]));
    let r = http
        .get(format!("{}/open", envoy.hms_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"{\"plain\":true}");

    // Closed hold without a valid verdict: the Lua side's 502 is the Rust
    // reply, and only the kept headers survive.
    for (path, body) in [
        (
            "/closed-plain",
            b"{\"id\":\"039b70b8-92f7-44b7-9c91-4e3f0e900c71\"}".to_vec(),
        ),
        ("/closed-bad-verdict", b"keyhole-verdict x\n{}".to_vec()),
        ("/closed-no-newline", b"keyhole-verdict 0 ".to_vec()),
    ] {
        upstream.set(
            path,
            held(
                HOLD_CLOSED,
                body,
                &[
                    ("x-record", "039b70b8"),
                    ("server", "hms"),
                    ("date", "039b70b8"),
                ],
            ),
        );
        let r = http
            .get(format!("{}{path}", envoy.hms_url()))
            .send()
            .await
            .unwrap();
        let want = reply::withheld_without_verdict();
        assert_eq!(r.status().as_u16(), want.status, "{path}");
        for name in r.headers().keys() {
            let name = name.as_str();
            // `date`: Envoy's own, once the upstream's is removed.
            assert!(
                KEPT_ON_WITHHOLD.contains(&name)
                    || ["content-type", "content-length", "date"].contains(&name),
                "{path}: header {name} survived a withheld response"
            );
        }
        for (name, value) in r.headers() {
            assert!(
                !value.to_str().unwrap_or("").contains("039b70b8"),
                "{path}: {name} holds the id"
            );
        }
        assert!(
            r.headers().get("x-record").is_none(),
            "{path}: a header that may hold an id survived"
        );
        assert_eq!(r.headers()["content-type"], reply::CONTENT_TYPE);
        assert_eq!(
            r.bytes().await.unwrap().as_ref(),
            want.body.as_slice(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn request_verdicts_written_by_rust_are_applied_by_the_lua_request_hold() {
    let (_dir, upstream, envoy) = start().await;
    let http = reqwest::Client::new();

    // The decoded `:path` travels in the verdict; the body follows it.
    let verdict = Verdict::keep(vec![HeaderEdit::Set(
        ":path".into(),
        "/api/v2/patients/039b70b8?x=1".into(),
    )]);
    let r = http
        .post(format!("{}/api/v2/patients/patient-001", envoy.hms_url()))
        .header(HOLD_HEADER, HOLD_CLOSED)
        .body(verdict.frame(br#"{"a":1}"#).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri, "/api/v2/patients/039b70b8?x=1");
    assert_eq!(seen[0].body.as_ref(), br#"{"a":1}"#);
    assert!(seen[0].headers.get(HOLD_HEADER).is_none());
    upstream.clear();

    // Header edits on a request: a repeated header stays repeated.
    let mut edits = vec![HeaderEdit::Set(":path".into(), "/api/v2/visits".into())];
    edits.extend(HeaderEdit::set_all(
        "link",
        vec!["<Patient/pat-000123>".into(), "<help>".into()],
    ));
    edits.push(HeaderEdit::Set("x-patient-id".into(), "039b70b8".into()));
    let r = http
        .post(format!("{}/api/v2/visits", envoy.hms_url()))
        .header(HOLD_HEADER, HOLD_CLOSED)
        .header("link", "<Patient/patient-001>")
        .header("link", "<help>")
        .header("x-patient-id", "patient-001")
        .body(Verdict::keep(edits).frame(b"{}").unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    let all = |name: &str| -> Vec<&str> {
        seen[0]
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    };
    assert_eq!(all("link"), ["<Patient/pat-000123>", "<help>"]);
    assert_eq!(all("x-patient-id"), ["039b70b8"]);
    assert_eq!(seen[0].body.as_ref(), b"{}");
    upstream.clear();

    // No verdict, a status, or names: refused with the Rust reply, never sent.
    let refusals: [Vec<u8>; 3] = [
        br#"{"a":1}"#.to_vec(),
        Verdict {
            status: 502,
            names: vec![],
            edits: vec![],
        }
        .frame(b"{}")
        .unwrap(),
        Verdict {
            status: 0,
            names: vec!["x".into()],
            edits: vec![],
        }
        .frame(b"{}")
        .unwrap(),
    ];
    for body in refusals {
        let r = http
            .post(format!("{}/api/v2/patients/patient-001", envoy.hms_url()))
            .header(HOLD_HEADER, HOLD_CLOSED)
            .body(body)
            .send()
            .await
            .unwrap();
        let want = reply::request_not_rewritten();
        assert_eq!(r.status().as_u16(), want.status);
        assert_eq!(r.headers()["content-type"], reply::CONTENT_TYPE);
        assert_eq!(r.bytes().await.unwrap().as_ref(), want.body.as_slice());
    }
    assert!(
        upstream.seen().is_empty(),
        "a refused request reached the upstream"
    );
}
