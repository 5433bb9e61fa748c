//! `enforce: shadow` through the real Envoy, `.wasm` and control: the LLM
//! listener forwards the whole registry byte-identical and judges the
//! answer's calls against the set it would have surfaced (header, counters,
//! audit); the HMS listener forwards bodies unchanged and counts what it
//! would have aliased.

use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{paths, Stack, StackOptions};
use serde_json::Value;
use std::time::Duration;

fn chat_answer_calling(name: &str) -> String {
    format!(
        r#"{{"id":"x","choices":[{{"index":0,"message":{{"role":"assistant","tool_calls":[{{"id":"c1","type":"function","function":{{"name":"{name}","arguments":"{{}}"}}}}]}}}}]}}"#
    )
}

/// `GET /v1/audit/{session}` from control, once the filter's `POST /v1/calls`
/// (sent on the root context's tick) has reached it.
async fn audit_with_calls(stack: &Stack, session: &str, entries: usize) -> Value {
    audit_until(stack, session, |t| {
        t.len() >= entries && t.iter().all(|e| e.get("calls").is_some())
    })
    .await
}

#[tokio::test]
async fn a_shadow_llm_listener_forwards_the_registry_and_judges_the_calls() {
    let stack = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"enforce":"shadow"}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let body = std::fs::read(paths::catalog().join("openai_request.json")).unwrap();
    let http = reqwest::Client::new();
    let mut verdicts = Vec::new();
    for (i, called) in ["patient__search__smart", "billing__invoice__create"]
        .into_iter()
        .enumerate()
    {
        stack.llm.clear();
        stack.llm.set(
            "/v1/chat/completions",
            Canned::json(chat_answer_calling(called)),
        );
        let resp = http
            .post(format!("{}/v1/chat/completions", stack.envoy.llm_url()))
            .header("content-type", "application/json")
            .header("x-keyhole-session", format!("shadow-{i}"))
            .header("x-keyhole-phase", "planner")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
        assert!(resp.headers().get("x-keyhole-tools").is_none());
        verdicts.push(
            resp.headers()
                .get("x-keyhole-shadow")
                .map(|v| v.to_str().unwrap().to_owned()),
        );
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(
            answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            called
        );
        let seen = stack.llm.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].body.as_ref(),
            body.as_slice(),
            "shadow forwards the request byte-identical"
        );
        assert!(
            !seen[0].headers.keys().any(|k| {
                let k = k.as_str();
                k.starts_with("x-keyhole-") && k != "x-keyhole-session" && k != "x-keyhole-phase"
            }),
            "no header added: {:?}",
            seen[0].headers
        );
    }
    // The trail says which set would have been shown; the verdicts follow it.
    let first = audit_with_calls(&stack, "shadow-0", 1).await;
    let second = audit_with_calls(&stack, "shadow-1", 1).await;
    for (trail, verdict, called) in [
        (&first, &verdicts[0], "patient__search__smart"),
        (&second, &verdicts[1], "billing__invoice__create"),
    ] {
        let entry = &trail[0];
        assert_eq!(entry["shadow"], true);
        let surfaced = entry["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == called);
        assert_eq!(entry["calls"][0]["tool"], called);
        assert_eq!(entry["calls"][0]["covered"], surfaced);
        let want = if surfaced { "covered" } else { "missed" };
        assert_eq!(verdict.as_deref(), Some(want), "{entry}");
        assert!(entry["bytes"]["out"].as_u64() < entry["bytes"]["in"].as_u64());
    }
    assert_eq!(
        verdicts
            .iter()
            .filter(|v| v.as_deref() == Some("missed"))
            .count() as u64,
        stack
            .envoy
            .stat("wasmcustom.keyhole.shadow.missed")
            .await
            .unwrap()
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.shadow.requests")
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.tools_out")
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn a_shadow_hms_listener_forwards_bodies_unchanged_and_counts_ids() {
    let stack = Stack::start(StackOptions {
        hms_filter_config: r#"{"mode":"hms","timeout_ms":5000,"enforce":"shadow"}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let body =
        r#"{"id":"3f2b8c1e-6a4d-4e8b-9c2f-1a7d5e9b0c44","resourceType":"Patient","name":"Krause"}"#;
    stack
        .hms
        .set("/api/v2/patients/x", Canned::json(body.to_owned()));
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/api/v2/patients/x?subject=3f2b8c1e-6a4d-4e8b-9c2f-1a7d5e9b0c44",
            stack.envoy.hms_url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    assert_eq!(resp.text().await.unwrap(), body, "forwarded unchanged");
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.hms_shadow.responses")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.hms_shadow.with_ids")
            .await
            .unwrap(),
        1,
        "{}",
        stack.envoy.log_tail()
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.hms_responses_aliased")
            .await
            .unwrap(),
        0
    );
}

/// One request format of the matrix: where it is posted (whole and streamed
/// answers), the request, and how its provider writes a call, whole and as
/// an event stream.
struct Format {
    label: &'static str,
    path: &'static str,
    stream_path: &'static str,
    stream_query: &'static str,
    body: Vec<u8>,
    gemini: bool,
    answer: fn(&str) -> String,
    events: fn(&str) -> String,
}

fn formats() -> Vec<Format> {
    let fixtures = paths::repo().join("core/tests/fixtures");
    let read = |p: std::path::PathBuf| {
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    vec![
        Format {
            label: "chat",
            path: "/v1/chat/completions",
            stream_path: "/v1/chat/completions",
            stream_query: "",
            body: read(paths::catalog().join("openai_request.json")),
            gemini: false,
            answer: chat_answer_calling,
            events: |name| {
                format!(
                    "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}}}}]}}\n\n\
                     data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{{\"name\":\"{name}\",\"arguments\":\"\"}}}}]}}}}]}}\n\n\
                     data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"{{}}\"}}}}]}},\"finish_reason\":\"tool_calls\"}}]}}\n\n\
                     data: [DONE]\n\n"
                )
            },
        },
        Format {
            label: "responses",
            path: "/v1/responses",
            stream_path: "/v1/responses",
            stream_query: "",
            body: read(fixtures.join("responses_request.json")),
            gemini: false,
            answer: |name| {
                format!(
                    r#"{{"id":"r1","object":"response","status":"completed","output":[{{"type":"function_call","id":"fc1","call_id":"c1","name":"{name}","arguments":"{{}}","status":"completed"}}]}}"#
                )
            },
            events: |name| {
                format!(
                    "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":\"r1\",\"status\":\"in_progress\",\"output\":[]}}}}\n\n\
                     event: response.output_item.added\ndata: {{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{{\"type\":\"function_call\",\"id\":\"fc1\",\"call_id\":\"c1\",\"name\":\"{name}\",\"arguments\":\"\"}}}}\n\n\
                     event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"id\":\"r1\",\"status\":\"completed\",\"output\":[{{\"type\":\"function_call\",\"id\":\"fc1\",\"call_id\":\"c1\",\"name\":\"{name}\",\"arguments\":\"{{}}\"}}]}}}}\n\n"
                )
            },
        },
        Format {
            label: "anthropic",
            path: "/v1/messages",
            stream_path: "/v1/messages",
            stream_query: "",
            body: read(paths::catalog().join("anthropic_request.json")),
            gemini: false,
            answer: |name| {
                format!(
                    r#"{{"id":"m1","type":"message","role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"{name}","input":{{}}}}],"stop_reason":"tool_use"}}"#
                )
            },
            events: |name| {
                format!(
                    "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}}}\n\n\
                     event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"{name}\",\"input\":{{}}}}}}\n\n\
                     event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
                     event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
                )
            },
        },
        Format {
            label: "gemini",
            path: "/v1beta/models/gemma-3-27b-it:generateContent",
            stream_path: "/v1beta/models/gemma-3-27b-it:streamGenerateContent",
            stream_query: "?alt=sse",
            body: read(fixtures.join("gemini_request.json")),
            gemini: true,
            answer: gemini_answer_calling,
            events: |name| format!("data: {}\n\n", gemini_answer_calling(name)),
        },
    ]
}

fn gemini_answer_calling(name: &str) -> String {
    format!(
        r#"{{"candidates":[{{"content":{{"role":"model","parts":[{{"functionCall":{{"name":"{name}","args":{{}}}}}}]}},"finishReason":"STOP"}}]}}"#
    )
}

/// The function names of a request's tools (the whole registry).
fn registry(body: &[u8], gemini: bool) -> Vec<String> {
    keyhole_e2e::bodies::function_tools(body, gemini)
        .iter()
        .map(|raw| {
            let v: Value = serde_json::from_str(raw).unwrap();
            v["function"]["name"]
                .as_str()
                .or(v["name"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// `GET /v1/audit/{session}` once it holds `entries` entries.
async fn audit(stack: &Stack, session: &str, entries: usize) -> Value {
    audit_until(stack, session, |t| t.len() >= entries).await
}

/// `GET /v1/audit/{session}` from control's socket, polled for up to 5 s
/// until `done` holds of its entries.
async fn audit_until(stack: &Stack, session: &str, done: impl Fn(&[Value]) -> bool) -> Value {
    let socket = stack.socket();
    for _ in 0..50 {
        let out = std::process::Command::new("curl")
            .args(["-s", "--unix-socket"])
            .arg(&socket)
            .arg(format!("http://keyhole/v1/audit/{session}"))
            .output()
            .unwrap();
        let trail: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if trail.as_array().is_some_and(|t| done(t)) {
            return trail;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no audit trail for {session} as awaited");
}

/// Posts `body` to the LLM listener under `session`; the answer.
async fn post(stack: &Stack, path: &str, body: &[u8], session: &str) -> reqwest::Response {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", stack.envoy.llm_url()))
        .header("content-type", "application/json")
        .header("x-keyhole-session", session)
        .header("x-keyhole-phase", "planner")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{session}: {}", stack.envoy.log_tail());
    resp
}

/// Every format, whole and streamed, with an answer calling a tool of the set
/// keyhole would have surfaced and one calling a registry tool outside it.
#[tokio::test]
async fn shadow_judges_every_format_whole_and_streamed() {
    let stack = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"enforce":"shadow"}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let (mut covered, mut missed, mut requests) = (0u64, 0u64, 0u64);
    for format in formats() {
        let label = format.label;
        // A first turn without calls: the set keyhole would have surfaced.
        stack.llm.clear();
        stack.llm.set(
            format.path,
            Canned::json(if format.gemini {
                r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]}}]}"#
                    .to_owned()
            } else {
                r#"{"id":"x","content":[{"type":"text","text":"ok"}],"choices":[],"output":[]}"#
                    .to_owned()
            }),
        );
        let probe = format!("matrix-{label}-probe");
        let resp = post(&stack, format.path, &format.body, &probe).await;
        assert!(resp.headers().get("x-keyhole-shadow").is_none(), "{label}");
        requests += 1;
        let entry = audit(&stack, &probe, 1).await[0].clone();
        assert_eq!(entry["shadow"], true, "{label}: {entry}");
        let set: Vec<String> = entry["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        let all = registry(&format.body, format.gemini);
        let inside = set.first().expect("a surfaced tool").clone();
        let outside = all
            .iter()
            .find(|n| !set.contains(n))
            .unwrap_or_else(|| panic!("{label}: the set holds the whole registry"))
            .clone();
        assert!(all.contains(&inside), "{label}: {inside}");

        for streamed in [false, true] {
            for (called, hit) in [(&inside, true), (&outside, false)] {
                let cell = format!(
                    "matrix-{label}-{}-{}",
                    if streamed { "stream" } else { "whole" },
                    if hit { "covered" } else { "missed" }
                );
                stack.llm.clear();
                let (path, answer) = if streamed {
                    let events = (format.events)(called);
                    stack.llm.set(
                        format.stream_path,
                        Canned {
                            stream_delay: Some(Duration::from_millis(20)),
                            ..Canned::json(events.clone())
                        },
                    );
                    (
                        format!("{}{}", format.stream_path, format.stream_query),
                        events,
                    )
                } else {
                    let answer = (format.answer)(called);
                    stack.llm.set(format.path, Canned::json(answer.clone()));
                    (format.path.to_owned(), answer)
                };
                let resp = post(&stack, &path, &format.body, &cell).await;
                requests += 1;
                let verdict = resp
                    .headers()
                    .get("x-keyhole-shadow")
                    .map(|v| v.to_str().unwrap().to_owned());
                let want = (!streamed).then_some(if hit { "covered" } else { "missed" });
                assert_eq!(verdict.as_deref(), want, "{cell}");
                assert!(resp.headers().get("x-keyhole-tools").is_none(), "{cell}");
                assert_eq!(
                    resp.text().await.unwrap(),
                    answer,
                    "{cell}: answer unchanged"
                );
                let seen = stack.llm.seen();
                assert_eq!(seen.len(), 1, "{cell}");
                assert_eq!(
                    seen[0].body.as_ref(),
                    format.body.as_slice(),
                    "{cell}: the registry forwarded byte-identical"
                );
                assert!(
                    !seen[0].headers.keys().any(|k| {
                        let k = k.as_str();
                        k.starts_with("x-keyhole-")
                            && k != "x-keyhole-session"
                            && k != "x-keyhole-phase"
                    }),
                    "{cell}: no header added: {:?}",
                    seen[0].headers
                );
                let entry = audit_with_calls(&stack, &cell, 1).await[0].clone();
                assert_eq!(entry["shadow"], true, "{cell}: {entry}");
                let names: Vec<&str> = entry["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["name"].as_str().unwrap())
                    .collect();
                assert_eq!(names, set, "{cell}: the same set as the probe");
                assert_eq!(
                    entry["calls"].as_array().unwrap().len(),
                    1,
                    "{cell}: {entry}"
                );
                assert_eq!(entry["calls"][0]["tool"], called.as_str(), "{cell}");
                assert_eq!(entry["calls"][0]["covered"], hit, "{cell}: {entry}");
                if hit {
                    covered += 1;
                } else {
                    missed += 1;
                }
            }
        }
    }
    assert_eq!(covered, 8);
    assert_eq!(missed, 8);
    for (name, want) in [
        ("wasmcustom.keyhole.shadow.covered", covered),
        ("wasmcustom.keyhole.shadow.missed", missed),
        ("wasmcustom.keyhole.calls_covered", covered),
        ("wasmcustom.keyhole.calls_missed", missed),
        ("wasmcustom.keyhole.shadow.requests", requests),
        ("wasmcustom.keyhole.tools_out", 0),
        ("wasmcustom.keyhole.off_surface_calls", 0),
    ] {
        assert_eq!(stack.envoy.stat(name).await.unwrap(), want, "{name}");
    }
}

/// An `on` listener's recall: a call of a surfaced tool is a hit, a call of
/// a tool it removed and a call of `keyhole_tool_search` are misses.
#[tokio::test]
async fn an_on_listener_judges_surfaced_unsurfaced_and_search_calls() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let body = std::fs::read(paths::catalog().join("openai_request.json")).unwrap();
    let all = registry(&body, false);
    let search = keyhole_core::tools::recovery::TOOL_NAME;
    // A turn answered without calls: the set the listener surfaces.
    stack.llm.set(
        "/v1/chat/completions",
        Canned::json(
            r#"{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}"#,
        ),
    );
    post(&stack, "/v1/chat/completions", &body, "recall-on-set").await;
    let sent = registry(&stack.llm.seen()[0].body, false);
    assert!(
        sent.iter().any(|t| t == search),
        "the search tool is offered"
    );
    let surfaced: Vec<String> = sent.into_iter().filter(|t| t != search).collect();
    let outside = all
        .iter()
        .find(|n| !surfaced.contains(n))
        .expect("a removed tool")
        .clone();
    for (kind, called) in [
        ("surfaced", surfaced[0].clone()),
        ("unsurfaced", outside),
        ("search", search.to_owned()),
    ] {
        let session = format!("recall-on-{kind}");
        stack.llm.clear();
        stack.llm.set(
            "/v1/chat/completions",
            Canned::json(chat_answer_calling(&called)),
        );
        let resp = post(&stack, "/v1/chat/completions", &body, &session).await;
        let forwarded = registry(&stack.llm.seen()[0].body, false);
        assert_eq!(
            forwarded
                .iter()
                .filter(|t| *t != search)
                .collect::<Vec<_>>(),
            surfaced.iter().collect::<Vec<_>>(),
            "{kind}: the same set"
        );
        assert!(resp.headers().get("x-keyhole-shadow").is_none(), "{kind}");
        assert!(resp.headers().get("x-keyhole-tools").is_some(), "{kind}");
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(
            header("x-keyhole-off-surface").as_deref(),
            (kind == "unsurfaced").then_some(called.as_str()),
            "{kind}"
        );
        assert_eq!(
            header("x-keyhole-tool-search").as_deref(),
            Some(if kind == "search" {
                "called"
            } else {
                "offered"
            }),
            "{kind}"
        );
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(
            answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            called.as_str(),
            "{kind}: flagged, not blocked"
        );
        let entry = audit_with_calls(&stack, &session, 1).await[0].clone();
        assert_ne!(entry["shadow"], true, "{kind}: {entry}");
        assert_eq!(
            entry["calls"].as_array().unwrap().len(),
            1,
            "{kind}: {entry}"
        );
        assert_eq!(
            entry["calls"][0]["tool"],
            called.as_str(),
            "{kind}: {entry}"
        );
        assert_eq!(
            entry["calls"][0]["covered"],
            kind == "surfaced",
            "{kind}: {entry}"
        );
        if kind == "search" {
            assert_eq!(entry["calls"][0]["missed"], "tool-search", "{entry}");
        }
    }
    for (name, want) in [
        ("wasmcustom.keyhole.calls_covered", 1),
        ("wasmcustom.keyhole.calls_missed", 2),
        ("wasmcustom.keyhole.off_surface_calls", 1),
        ("wasmcustom.keyhole.shadow.covered", 0),
        ("wasmcustom.keyhole.shadow.missed", 0),
    ] {
        assert_eq!(stack.envoy.stat(name).await.unwrap(), want, "{name}");
    }
}

/// Answers that finish together reach control together: each worker sends
/// the answers queued since its last tick as one `POST /v1/calls` list, so
/// control gets one post per tick, not one per answer, and every answer's
/// calls still land on its own turn.
#[tokio::test]
async fn answers_are_posted_to_control_in_lists() {
    const ANSWERS: usize = 12;
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let body = std::fs::read(paths::catalog().join("openai_request.json")).unwrap();
    let all = registry(&body, false);
    stack.llm.set(
        "/v1/chat/completions",
        Canned::json(chat_answer_calling(&all[0])),
    );
    let sessions: Vec<String> = (0..ANSWERS).map(|i| format!("list-{i}")).collect();
    futures_util::future::join_all(
        sessions
            .iter()
            .map(|s| post(&stack, "/v1/chat/completions", &body, s)),
    )
    .await;
    for session in &sessions {
        let entry = audit_with_calls(&stack, session, 1).await[0].clone();
        assert_eq!(entry["calls"][0]["tool"], all[0].as_str(), "{entry}");
    }
    let posts = stack
        .envoy
        .stat("wasmcustom.keyhole.calls_posts")
        .await
        .unwrap();
    // Concurrent answers finish within a few ticks of each other: on two
    // workers they arrive in at most a handful of lists, never one each.
    assert!(
        (1..=(ANSWERS as u64 / 2)).contains(&posts),
        "{posts} posts for {ANSWERS} answers"
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.calls_dropped")
            .await
            .unwrap(),
        0
    );
}

/// `keyhole report` on a session recorded through the real stack: its
/// figures are the trail's, read back over control's socket, with the
/// filter's HMS shadow counts from a saved `/stats` text, and it names no
/// session and no prompt text.
#[tokio::test]
async fn keyhole_report_reads_a_recorded_shadow_session() {
    let stack = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"enforce":"shadow"}"#.into(),
        hms_filter_config: r#"{"mode":"hms","timeout_ms":5000,"enforce":"shadow"}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let body = std::fs::read(paths::catalog().join("openai_request.json")).unwrap();
    let session = "report-recorded-session";
    let called = [
        "patient__search__smart",
        "billing__invoice__create",
        "research__pubmed__search",
    ];
    for name in called {
        stack.llm.clear();
        stack.llm.set(
            "/v1/chat/completions",
            Canned::json(chat_answer_calling(name)),
        );
        post(&stack, "/v1/chat/completions", &body, session).await;
    }
    let patient = "3f2b8c1e-6a4d-4e8b-9c2f-1a7d5e9b0c44";
    stack.hms.set(
        "/api/v2/patients/x",
        Canned::json(format!(r#"{{"id":"{patient}","resourceType":"Patient"}}"#)),
    );
    let resp = reqwest::get(format!("{}/api/v2/patients/x", stack.envoy.hms_url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());

    let trail = audit_with_calls(&stack, session, called.len()).await;
    let entries = trail.as_array().unwrap();
    // What the report must say, computed from the trail itself.
    let calls: Vec<&Value> = entries
        .iter()
        .flat_map(|e| e["calls"].as_array().unwrap())
        .collect();
    let hits = calls.iter().filter(|c| c["covered"] == true).count() as u64;
    let saved: u64 = entries
        .iter()
        .map(|e| e["bytes"]["in"].as_u64().unwrap() - e["bytes"]["out"].as_u64().unwrap())
        .sum();
    let surfaced: usize = entries
        .iter()
        .map(|e| e["tools"].as_array().unwrap().len())
        .sum();
    assert!(
        hits < calls.len() as u64,
        "the registry's research tool is outside a planner set: one call must miss ({trail})"
    );

    let stats = reqwest::get(format!("http://{}/stats", stack.envoy.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let stats_file = stack.dir.path().join("envoy-stats.txt");
    std::fs::write(&stats_file, stats).unwrap();
    let run = |json: bool| {
        let mut cmd = std::process::Command::new(paths::keyhole_bin());
        cmd.arg("report")
            .arg("--socket")
            .arg(stack.socket())
            .args(["--since", "1h", "--envoy-stats"])
            .arg(&stats_file);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "keyhole report: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let report: Value = serde_json::from_str(&run(true)).unwrap();
    let total = &report["total"];
    assert_eq!(total["turns"], called.len() as u64, "{report}");
    assert_eq!(total["shadowTurns"], called.len() as u64);
    assert_eq!(total["calls"], calls.len() as u64);
    assert_eq!(total["hits"], hits);
    let recall = total["recall"].as_f64().unwrap();
    assert!((recall - hits as f64 / calls.len() as f64).abs() < 1e-9);
    assert_eq!(total["bytesSaved"], saved);
    let mean = total["meanSurfaced"].as_f64().unwrap();
    assert!((mean - surfaced as f64 / called.len() as f64).abs() < 1e-9);
    assert_eq!(report["phases"]["planner"]["turns"], called.len() as u64);
    for c in &calls {
        let tool = c["tool"].as_str().unwrap();
        let figures = &report["tools"][tool];
        assert_eq!(figures["calls"], 1, "{tool}: {report}");
        assert_eq!(figures["hits"], u64::from(c["covered"] == true));
        if c["covered"] == false {
            let miss = report["misses"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["tool"] == tool)
                .unwrap_or_else(|| panic!("{tool} missed but not in the misses: {report}"));
            assert_eq!(miss["reason"], c["missed"], "{report}");
            assert_eq!(miss["phase"], "planner");
        }
    }
    assert_eq!(
        report["filter"]["shadowIds"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        1,
        "the one id the HMS shadow listener saw: {report}"
    );

    let text = run(false);
    assert!(text.contains("recall"), "{text}");
    assert!(
        text.contains(&format!("({hits}/{})", calls.len())),
        "{text}"
    );
    for secret in [session, patient, "Anna Schmidt", "\"messages\""] {
        assert!(
            !text.contains(secret),
            "{secret} in the text report:\n{text}"
        );
        assert!(
            !report.to_string().contains(secret),
            "{secret} in the JSON report"
        );
    }
}
