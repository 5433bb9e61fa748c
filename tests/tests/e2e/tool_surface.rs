//! The tool-surface filter through the real Envoy: every format, every fault,
//! streaming, admission on answers, and metrics.

use keyhole_e2e::bodies::{function_tools, without_tools};
use keyhole_e2e::fake_control::{FakeControl, Fault};
use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{paths, Stack, StackOptions};
use serde_json::Value;
use std::time::{Duration, Instant};

/// A catalog-sized request of one format.
struct Case {
    path: &'static str,
    body: Vec<u8>,
    gemini: bool,
}

fn read(path: std::path::PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixtures() -> std::path::PathBuf {
    paths::repo().join("core/tests/fixtures")
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            path: "/v1/chat/completions",
            body: read(paths::catalog().join("openai_request.json")),
            gemini: false,
        },
        Case {
            path: "/v1/messages",
            body: read(paths::catalog().join("anthropic_request.json")),
            gemini: false,
        },
        Case {
            path: "/v1/responses",
            body: read(fixtures().join("responses_request.json")),
            gemini: false,
        },
        Case {
            path: "/v1beta/models/gemma-3-27b-it:generateContent",
            body: read(fixtures().join("gemini_request.json")),
            gemini: true,
        },
    ]
}

async fn send(
    stack: &Stack,
    path: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", stack.envoy.llm_url()))
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("request through envoy")
}

fn session(s: &str) -> [(&'static str, &str); 1] {
    [("x-keyhole-session", s)]
}

#[tokio::test]
async fn every_format_is_cut_to_a_bounded_byte_identical_subset() {
    // The tool surface alone: the other keys must come through byte for byte,
    // and the catalog request names a practitioner by UUID, which aliases (on
    // by default) would replace. llm_aliases.rs pins that rewrite.
    let options = StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"aliases":"off"}"#.into(),
        ..Default::default()
    };
    let stack = Stack::start(options).await.expect("stack");
    for case in cases() {
        stack.llm.clear();
        let original_tools = function_tools(&case.body, case.gemini);
        assert!(
            original_tools.len() >= 100,
            "{}: fixture has the registry",
            case.path
        );
        let resp = send(&stack, case.path, case.body.clone(), &session("formats")).await;
        assert_eq!(
            resp.status(),
            200,
            "{}: {}",
            case.path,
            stack.envoy.log_tail()
        );
        let seen = stack.llm.seen();
        assert_eq!(seen.len(), 1, "{}", case.path);
        let got = &seen[0].body;
        let tools = function_tools(got, case.gemini);
        assert!(
            (1..=12).contains(&tools.len()),
            "{}: {} tools",
            case.path,
            tools.len()
        );
        // Every tool but keyhole's own control tool (recovery.rs) is the client's.
        for t in tools
            .iter()
            .filter(|t| !keyhole_e2e::bodies::is_search_tool(t))
        {
            assert!(
                original_tools.contains(t),
                "{}: tool not byte-identical",
                case.path
            );
        }
        if !case.gemini {
            assert_eq!(
                without_tools(got),
                without_tools(&case.body),
                "{}: other keys unchanged",
                case.path
            );
        }
    }
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.requests")
            .await
            .unwrap(),
        4
    );
    assert!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.tools_in")
            .await
            .unwrap()
            >= 400
    );
    assert!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.tools_out")
            .await
            .unwrap()
            <= 48
    );
}

#[tokio::test]
async fn phase_budgets_and_forced_tools_hold_end_to_end() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let case = &cases()[0];
    let mut body: Value = serde_json::from_slice(&case.body).unwrap();
    body["tool_choice"] =
        serde_json::json!({"type": "function", "function": {"name": "billing__invoice__create"}});
    let body = serde_json::to_vec(&body).unwrap();
    for (phase, max) in [("tool-input", 1), ("agent-call", 8), ("planner", 12)] {
        stack.llm.clear();
        // With a session, as a deployment sends it: the catalog request names
        // a practitioner by UUID, and ids without a session are refused.
        let resp = send(
            &stack,
            case.path,
            body.clone(),
            &[("x-keyhole-phase", phase), ("x-keyhole-session", "s-phase")],
        )
        .await;
        assert_eq!(resp.status(), 200);
        let audit = resp.headers()["x-keyhole-tools"]
            .to_str()
            .unwrap()
            .to_owned();
        let tools = function_tools(&stack.llm.seen()[0].body, false);
        assert!(
            tools.len() <= max && !tools.is_empty(),
            "{phase}: {}",
            tools.len()
        );
        assert!(
            tools
                .iter()
                .any(|t| t.contains("\"billing__invoice__create\"")),
            "{phase}: forced tool kept"
        );
        assert!(
            audit.contains("billing__invoice__create=tool-choice"),
            "{audit}"
        );
    }
    let resp = send(
        &stack,
        case.path,
        body,
        &[("x-keyhole-phase", "everything")],
    )
    .await;
    assert_eq!(resp.status(), 400, "an unknown phase is refused");
}

/// Runs one catalog request against a misbehaving control and returns the
/// status and the number of tools the upstream got (None: nothing forwarded),
/// and how long the request took (the stack's start-up not included).
async fn against_fault(fault: Fault, filter_config: &str) -> (u16, Option<usize>, Stack, Duration) {
    let stack = Stack::start(StackOptions {
        control: false,
        llm_filter_config: filter_config.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let fake = FakeControl::start(&stack.socket(), fault)
        .await
        .expect("fake control");
    let case = &cases()[0];
    let started = Instant::now();
    let resp = send(&stack, case.path, case.body.clone(), &session("fault")).await;
    let took = started.elapsed();
    let status = resp.status().as_u16();
    drop(fake);
    let forwarded = stack
        .llm
        .seen()
        .first()
        .map(|r| function_tools(&r.body, false).len());
    (status, forwarded, stack, took)
}

#[tokio::test]
async fn control_faults_never_forward_the_registry() {
    let strip = r#"{"mode":"llm","timeout_ms":300,"on_outage":"strip"}"#;
    let reject = r#"{"mode":"llm","timeout_ms":300}"#;
    for fault in [
        Fault::Slow(Duration::from_secs(3)),
        Fault::Status(500),
        Fault::Garbage,
    ] {
        let (status, forwarded, stack, took) = against_fault(fault, strip).await;
        assert_eq!((status, forwarded), (200, Some(0)), "{fault:?} with strip");
        assert!(took < Duration::from_secs(10), "{fault:?}: no hang");
        assert_eq!(
            stack
                .envoy
                .stat("wasmcustom.keyhole.fallback")
                .await
                .unwrap(),
            1,
            "{fault:?}"
        );
        assert!(
            stack.envoy.log_text().contains("keyhole.fallback"),
            "{fault:?}: the path taken is logged"
        );

        let (status, forwarded, stack, _) = against_fault(fault, reject).await;
        assert_eq!((status, forwarded), (503, None), "{fault:?} with reject");
        assert_eq!(
            stack
                .envoy
                .stat("wasmcustom.keyhole.rejected")
                .await
                .unwrap(),
            1
        );
    }
    // An over-budget answer is clamped and counted.
    let (status, forwarded, stack, _) = against_fault(Fault::Everything, reject).await;
    assert_eq!((status, forwarded), (200, Some(12)));
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.clamped")
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn an_outage_falls_back_to_the_sessions_prior_set() {
    // The tool surface's own outage rules: with aliases on, a request with a
    // session is refused while control is down, before these rules apply
    // (llm_aliases.rs pins that).
    let options = StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"aliases":"off"}"#.into(),
        ..Default::default()
    };
    let mut stack = Stack::start(options).await.expect("stack");
    let case = &cases()[0];
    let resp = send(&stack, case.path, case.body.clone(), &session("s-prior")).await;
    assert_eq!(resp.status(), 200);
    let first = function_tools(&stack.llm.seen()[0].body, false);

    stack.control.as_mut().unwrap().kill().await.unwrap();
    stack.llm.clear();
    let resp = send(&stack, case.path, case.body.clone(), &session("s-prior")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-keyhole-source"], "filter-fallback");
    assert!(resp.headers()["x-keyhole-tools"]
        .to_str()
        .unwrap()
        .contains("=prior-set"));
    let second = function_tools(&stack.llm.seen()[0].body, false);
    let mut a = first.clone();
    let mut b = second.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "the prior audited set, and nothing more");

    // Another session knows nothing: policy (reject) applies.
    let resp = send(&stack, case.path, case.body.clone(), &session("s-other")).await;
    assert_eq!(resp.status(), 503);
}

#[tokio::test]
async fn unreadable_and_oversize_bodies_are_answered_locally_and_the_vm_keeps_serving() {
    let stack = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"max_body_bytes":65536}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("/v1/chat/completions", b"{\"tools\": [".to_vec()),
        ("/v1/chat/completions", b"\xff\xfe\x00garbage".to_vec()),
        (
            "/v1/chat/completions",
            br#"{"tools":[],"tools":[{"type":"function","function":{"name":"a"}}]}"#.to_vec(),
        ),
        (
            "/v1/chat/completions",
            br#"{"tools":{"type":"function"}}"#.to_vec(),
        ),
        ("/v1/messages", br#"{"tools":[{"name":1}]}"#.to_vec()),
        ("/unknown", br#"{"tools":[{"weird":true}]}"#.to_vec()),
    ];
    for (path, body) in bad {
        let resp = send(&stack, path, body.clone(), &[]).await;
        assert_eq!(
            resp.status(),
            400,
            "{path} {:?}",
            String::from_utf8_lossy(&body)
        );
        let err: Value = resp.json().await.expect("a JSON error");
        assert_eq!(err["error"]["type"], "keyhole_invalid_request");
    }
    // Larger than the filter's limit (the catalog request is 84 KB).
    let resp = send(&stack, "/v1/chat/completions", cases()[0].body.clone(), &[]).await;
    assert_eq!(resp.status(), 413);
    // Odd headers: a session that is not UTF-8, an empty phase.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", stack.envoy.llm_url()))
        .header(
            "x-keyhole-session",
            reqwest::header::HeaderValue::from_bytes(&[0xff, 0xfe, b'a']).unwrap(),
        )
        .header("x-keyhole-phase", "")
        .body(r#"{"tools":[{"type":"function","function":{"name":"a"}}]}"#)
        .send()
        .await
        .expect("request through envoy");
    assert_eq!(resp.status(), 400, "an empty phase is refused");
    assert!(
        stack.llm.seen().iter().all(|r| r.body.len() < 100),
        "nothing unreadable was forwarded"
    );

    // The VM is alive: a good request still works.
    let small = br#"{"messages":[{"role":"user","content":"book an appointment"}],"tools":[{"type":"function","function":{"name":"appointment__manage","description":"Book"}}]}"#;
    let resp = send(&stack, "/v1/chat/completions", small.to_vec(), &[]).await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    assert!(
        !stack.envoy.log_text().contains("panicked"),
        "the filter never panics"
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.rejected")
            .await
            .unwrap(),
        8
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasm.envoy.wasm.runtime.v8.vm_failure")
            .await
            .unwrap_or(0),
        0
    );
}

#[tokio::test]
async fn envoy_buffer_limits_give_clear_errors() {
    let stack = Stack::start(StackOptions {
        max_body_bytes: 32 * 1024,
        ..Default::default()
    })
    .await
    .expect("stack");
    // A request over Envoy's buffer limit: 413 from Envoy, not a hang.
    let started = Instant::now();
    let resp = send(&stack, "/v1/chat/completions", cases()[0].body.clone(), &[]).await;
    assert_eq!(resp.status(), 413);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(stack.llm.seen().is_empty());

    // A JSON answer over the limit (the filter reads answers to check tool
    // calls): a clear error status, not a hang.
    let big = format!(
        "{{\"choices\":[{{\"message\":{{\"content\":\"{}\"}}}}]}}",
        "x".repeat(64 * 1024)
    );
    stack.llm.set("/v1/chat/completions", Canned::json(big));
    let small = br#"{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a","description":"x"}}]}"#;
    let started = Instant::now();
    let resp = send(&stack, "/v1/chat/completions", small.to_vec(), &[]).await;
    assert!(resp.status().is_server_error(), "{}", resp.status());
    assert!(started.elapsed() < Duration::from_secs(10));
}

fn chat_answer_calling(name: &str) -> String {
    format!(
        r#"{{"id":"x","choices":[{{"index":0,"message":{{"role":"assistant","tool_calls":[{{"id":"c1","type":"function","function":{{"name":"{name}","arguments":"{{}}"}}}}]}}}}]}}"#
    )
}

/// The response headers only keyhole writes, each forged by the upstream.
const OWN_HEADERS: [&str; 6] = [
    "x-keyhole-hold",
    "x-keyhole-off-surface",
    "x-keyhole-tools",
    "x-keyhole-source",
    "x-keyhole-ids-aliased",
    "x-keyhole-tool-search",
];

#[tokio::test]
async fn an_upstream_cannot_forge_keyholes_headers() {
    let stack = Stack::start(StackOptions {
        control: false,
        llm_filter_config:
            r#"{"mode":"llm","timeout_ms":30000,"aliases":"off","tool_search":"off"}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let _fake = FakeControl::start(&stack.socket(), Fault::Everything)
        .await
        .expect("fake control");
    let forged = |body: &str| {
        let mut canned = Canned::json(body.to_owned());
        canned.headers.extend(
            OWN_HEADERS
                .iter()
                .map(|h| ((*h).to_owned(), "forged".to_owned())),
        );
        canned
            .headers
            .push(("x-upstream-own".into(), "kept".into()));
        canned
    };
    // A GET passes through: the forged headers are gone, the upstream's own stays.
    stack.llm.set("/v1/models", forged(r#"{"data":[]}"#));
    let resp = reqwest::get(format!("{}/v1/models", stack.envoy.llm_url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    for h in OWN_HEADERS {
        assert!(resp.headers().get(h).is_none(), "GET: {h} forged through");
    }
    assert_eq!(
        resp.headers()
            .get("x-upstream-own")
            .map(|v| v.to_str().unwrap()),
        Some("kept")
    );
    // A decided request: keyhole's own audit, nothing forged.
    stack.llm.set(
        "/v1/chat/completions",
        forged(&chat_answer_calling("appointment__manage")),
    );
    let small = br#"{"messages":[{"role":"user","content":"book"}],"tools":[{"type":"function","function":{"name":"appointment__manage","description":"Book"}}]}"#;
    let resp = send(
        &stack,
        "/v1/chat/completions",
        small.to_vec(),
        &session("forge"),
    )
    .await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    for h in OWN_HEADERS {
        let values: Vec<&str> = resp
            .headers()
            .get_all(h)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert!(!values.contains(&"forged"), "{h}: {values:?}");
    }
    let audit = resp
        .headers()
        .get("x-keyhole-tools")
        .map(|v| v.to_str().unwrap().to_owned());
    assert!(
        audit.is_some_and(|a| a.starts_with("appointment__manage=")),
        "{}",
        stack.envoy.log_tail()
    );
}

#[tokio::test]
async fn answers_calling_unsurfaced_tools_are_flagged_or_blocked() {
    let small = br#"{"messages":[{"role":"user","content":"book an appointment"}],"tools":[{"type":"function","function":{"name":"appointment__manage","description":"Book an appointment"}},{"type":"function","function":{"name":"fhir__bundle__export","description":"Export"}}]}"#;
    for (mode, expect) in [("flag", 200u16), ("block", 502)] {
        let stack = Stack::start(StackOptions {
            llm_filter_config: format!(
                r#"{{"mode":"llm","timeout_ms":30000,"off_surface":"{mode}"}}"#
            ),
            ..Default::default()
        })
        .await
        .expect("stack");
        // A call to a tool that exists nowhere in the surfaced set.
        stack.llm.set(
            "/v1/chat/completions",
            Canned::json(chat_answer_calling("patient__delete")),
        );
        let resp = send(
            &stack,
            "/v1/chat/completions",
            small.to_vec(),
            &[("x-keyhole-phase", "tool-input")],
        )
        .await;
        assert_eq!(resp.status(), expect, "{mode}: {}", stack.envoy.log_tail());
        assert_eq!(
            resp.headers()
                .get("x-keyhole-off-surface")
                .map(|v| v.to_str().unwrap()),
            Some("patient__delete"),
            "{}",
            stack.envoy.log_tail()
        );
        let body: Value = resp.json().await.unwrap();
        if mode == "block" {
            assert_eq!(body["error"]["type"], "keyhole_off_surface_tool_call");
        } else {
            assert_eq!(
                body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
                "patient__delete"
            );
        }
        assert_eq!(
            stack
                .envoy
                .stat("wasmcustom.keyhole.off_surface_calls")
                .await
                .unwrap(),
            1
        );

        // A call to a surfaced tool passes unflagged.
        let surfaced = stack.llm.seen()[0].body.clone();
        let kept = function_tools(&surfaced, false);
        assert_eq!(kept.len(), 1);
        let name = if kept[0].contains("appointment__manage") {
            "appointment__manage"
        } else {
            "fhir__bundle__export"
        };
        stack.llm.set(
            "/v1/chat/completions",
            Canned::json(chat_answer_calling(name)),
        );
        let resp = send(
            &stack,
            "/v1/chat/completions",
            small.to_vec(),
            &[("x-keyhole-phase", "tool-input")],
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get("x-keyhole-off-surface").is_none());
    }
}

#[tokio::test]
async fn event_streams_pass_in_real_time_and_are_checked() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let mut events = String::new();
    for i in 0..5 {
        events.push_str(&format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"part {i}\"}}}}]}}\n\n"
        ));
    }
    events.push_str("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"patient__delete\",\"arguments\":\"\"}}]}}]}\n\n");
    events.push_str("data: [DONE]\n\n");
    stack.llm.set(
        "/v1/chat/completions",
        Canned {
            stream_delay: Some(Duration::from_millis(300)),
            ..Canned::json(events.clone())
        },
    );
    let small = br#"{"stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a","description":"x"}}]}"#;
    let started = Instant::now();
    let mut resp = send(&stack, "/v1/chat/completions", small.to_vec(), &[]).await;
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.unwrap().expect("a first event");
    let first_at = started.elapsed();
    let mut all = first.to_vec();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        all.extend_from_slice(&chunk);
    }
    let total = started.elapsed();
    assert_eq!(
        String::from_utf8(all).unwrap(),
        events,
        "the stream arrives intact"
    );
    assert!(
        total - first_at >= Duration::from_millis(1500),
        "events arrive as they are sent, not all at the end"
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.off_surface_calls")
            .await
            .unwrap(),
        1,
        "{}",
        stack.envoy.log_tail()
    );
}

#[tokio::test]
async fn a_thousand_requests_across_control_crashes_never_exceed_the_budget() {
    let mut stack = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":3000}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let body = cases()[0].body.clone();
    // Warm control's registry, as a running deployment would be.
    let deadline = Instant::now() + Duration::from_secs(120);
    while send(
        &stack,
        "/v1/chat/completions",
        body.clone(),
        &session("warm"),
    )
    .await
    .status()
        != 200
    {
        assert!(Instant::now() < deadline, "control never answered");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stack.llm.clear();
    let mut control = stack.control.take().expect("control");
    let url = stack.envoy.llm_url();

    // At least this many requests, and on until control crashed twice
    // (a fast filter sends a thousand before the second crash).
    const TOTAL: usize = 1000;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let (url, body, sent, stop) = (url.clone(), body.clone(), sent.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut statuses = Vec::new();
            loop {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return statuses;
                }
                let i = sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let resp = client
                    .post(format!("{url}/v1/chat/completions"))
                    .header("content-type", "application/json")
                    .header("x-keyhole-session", format!("s-{}", (i + w) % 16))
                    .body(body.clone())
                    .send()
                    .await
                    .expect("envoy answers");
                statuses.push(resp.status().as_u16());
            }
        }));
    }
    // Crash and restart control while requests are in flight.
    let mut crashes = 0;
    while sent.load(std::sync::atomic::Ordering::SeqCst) < TOTAL || crashes < 2 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        control.kill().await.unwrap();
        crashes += 1;
        tokio::time::sleep(Duration::from_millis(700)).await;
        control.restart().await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut statuses = Vec::new();
    for w in workers {
        statuses.extend(w.await.unwrap());
    }
    let total = statuses.len();
    assert!(total >= TOTAL, "{total} requests");
    assert!(
        crashes >= 2,
        "control crashed {crashes} times during the run"
    );

    let seen = stack.llm.seen();
    let over: Vec<usize> = seen
        .iter()
        .map(|r| function_tools(&r.body, false).len())
        .filter(|&n| n > 12)
        .collect();
    assert!(
        over.is_empty(),
        "{} requests reached the upstream over budget",
        over.len()
    );
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let unavailable = statuses.iter().filter(|&&s| s == 503).count();
    assert_eq!(
        ok + unavailable,
        total,
        "only forwarded-bounded or a clear 503: {statuses:?}"
    );
    assert_eq!(
        seen.len(),
        ok,
        "every 200 was forwarded (bounded), no 503 was"
    );
    println!("{total} requests, {crashes} control crashes: {ok} forwarded bounded, {unavailable} answered 503, 0 over budget");
}

#[tokio::test]
async fn with_the_embedder_down_control_answers_its_bounded_fallback() {
    // control is up, but its embedder is not: nothing listens on the discard port.
    let stack = Stack::start(StackOptions {
        control_args: vec!["--embedder-url".into(), "http://127.0.0.1:9".into()],
        ..Default::default()
    })
    .await
    .expect("stack");
    let case = &cases()[0];
    let resp = send(
        &stack,
        case.path,
        case.body.clone(),
        &session("no-embedder"),
    )
    .await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    let source = resp.headers()["x-keyhole-source"]
        .to_str()
        .unwrap()
        .to_owned();
    let tools = function_tools(&stack.llm.seen()[0].body, false);
    assert!(tools.len() <= 12, "{} tools", tools.len());
    // Either the bounded fallback or lexical ranking of a registry that cannot be
    // embedded: never the registry, and the source says which.
    assert!(
        source == "control-fallback" || source == "lexical",
        "{source}"
    );
    // control says how it ranked, in the session's audit trail.
    let audit = keyhole_e2e::control::get(&stack.socket(), "/v1/audit/no-embedder")
        .await
        .unwrap();
    assert!(
        audit.contains(r#""retrieval":"lexical""#) || audit.contains(r#""retrieval":"outage""#),
        "the audit trail names the degraded ranking: {audit}"
    );
    assert!(
        !audit.contains("Book Anna"),
        "no prompt text in the audit trail"
    );
}
