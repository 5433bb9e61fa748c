//! The LLM listener in both directions, through the real Envoy and `.wasm`:
//! every legitimate request in the providers' current shapes is forwarded
//! (2xx, nothing but the tool list changed, kept tools byte for byte, forced
//! tools kept, built-ins and MCP servers kept), and none of this round's ways
//! to get a registry past it works.
//!
//! The legitimate generator ([`keyhole_e2e::legit`]) runs twice: against the
//! real control (aliases on, so request bookkeeping holding ids goes through
//! the alias path and must come out byte-identical), and against a control
//! that surfaces every tool it is shown, which fills every set to the budget:
//! the hardest case for headroom. Both report their counts; a refused or an
//! altered request fails the test.

use keyhole_e2e::adversary::{self, Rng};
use keyhole_e2e::fake_control::{FakeControl, Fault};
use keyhole_e2e::legit::{self, Legit};
use keyhole_e2e::{paths, Stack, StackOptions};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn cases(default: usize) -> usize {
    std::env::var("KEYHOLE_LEGIT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("KEYHOLE_LEGIT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261202)
}

/// Sends one request by HTTP/1.1 POST; the status and what the upstream got.
async fn send(
    stack: &Stack,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> (u16, Option<Vec<u8>>, String) {
    stack.llm.clear();
    let mut req = reqwest::Client::new()
        .post(format!("{}{}", stack.envoy.llm_url(), path))
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, v.as_str());
    }
    let reply = req.send().await.expect("send");
    let status = reply.status().as_u16();
    let text = reply.text().await.unwrap_or_default();
    (
        status,
        stack.llm.seen().last().map(|r| r.body.to_vec()),
        text,
    )
}

/// Runs `n` generated legitimate requests through `stack`; panics with every
/// failure when one was refused or altered.
async fn legitimate(stack: &Stack, n: usize, label: &str) {
    let tools = legit::catalog_tools();
    assert_eq!(tools.len(), 108);
    let mut rng = Rng::new(seed());
    let (mut forwarded, mut refused, mut altered) = (0usize, Vec::new(), Vec::new());
    for i in 0..n {
        let request: Legit = legit::generate(&mut rng, &tools);
        let (status, seen, reply) =
            send(stack, &request.path, &request.headers, request.body.clone()).await;
        match seen {
            Some(body) if (200..300).contains(&status) => match legit::check(&request, &body) {
                Ok(()) => forwarded += 1,
                Err(why) => altered.push(format!("#{i} {} {}: {why}", request.label, request.path)),
            },
            _ => refused.push(format!(
                "#{i} {} {}: status {status}: {reply}",
                request.label, request.path
            )),
        }
    }
    println!(
        "legitimate ({label}): {n} sent, {forwarded} forwarded, {} refused, {} altered",
        refused.len(),
        altered.len()
    );
    assert!(
        refused.is_empty() && altered.is_empty(),
        "{label}:\nrefused:\n{}\naltered:\n{}",
        refused.join("\n"),
        altered.join("\n")
    );
}

#[tokio::test]
async fn legitimate_requests_are_forwarded_unaltered_through_real_control() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    legitimate(&stack, cases(60), "real control").await;
}

#[tokio::test]
async fn legitimate_requests_fit_when_control_surfaces_everything() {
    let stack = Stack::start(StackOptions {
        control: false,
        ..Default::default()
    })
    .await
    .expect("stack");
    let _fake = FakeControl::start(&stack.socket(), Fault::Everything)
        .await
        .expect("fake control");
    legitimate(&stack, cases(60), "control surfaces everything").await;
}

fn catalog(file: &str) -> Value {
    serde_json::from_slice(&std::fs::read(paths::catalog().join(file)).expect("catalog"))
        .expect("json")
}

/// The catalog's tools as Responses function tools.
fn responses_tools() -> Vec<Value> {
    legit::catalog_tools()
        .into_iter()
        .map(|(n, d, p)| json!({"type": "function", "name": n, "description": d, "parameters": p}))
        .collect()
}

#[tokio::test]
async fn this_rounds_registry_bypasses_are_refused() {
    let stack = Stack::start(StackOptions {
        control: false,
        ..Default::default()
    })
    .await
    .expect("stack");
    let _fake = FakeControl::start(&stack.socket(), Fault::Everything)
        .await
        .expect("fake control");
    let name_only: Vec<Value> = legit::catalog_tools()
        .into_iter()
        .map(|(n, _, _)| json!({"type": "function", "name": n}))
        .collect();
    let with_format: Vec<Value> =
        legit::catalog_tools().into_iter().map(|(n, _, _)| json!({"type": "custom", "name": n, "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}})).collect();
    let bounded = &responses_tools()[..5];
    let anthropic = catalog("anthropic_request.json");
    let mut toolset_on = anthropic.clone();
    toolset_on["mcp_servers"] =
        json!([{"type": "url", "url": "https://mcp.example.org/sse", "name": "all"}]);
    toolset_on["tools"]
        .as_array_mut()
        .expect("tools")
        .push(json!({"type": "mcp_toolset", "mcp_server_name": "all"}));
    let mut bare_server = anthropic.clone();
    bare_server["mcp_servers"] =
        json!([{"type": "url", "url": "https://mcp.example.org/sse", "name": "all"}]);
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "tool_search_output beside a bounded tools array",
            "/v1/responses",
            json!({"input": [{"role": "user", "content": "book"}, {"type": "tool_search_output", "call_id": "c", "tools": name_only}], "tools": bounded}),
            "tool definitions",
        ),
        (
            "tool_search_output with grammar formats",
            "/v1/responses",
            json!({"input": [{"type": "tool_search_output", "tools": with_format}], "tools": bounded}),
            "tool definitions",
        ),
        (
            "realtime client secret",
            "/v1/realtime/client_secrets",
            json!({"session": {"type": "realtime", "model": "gpt-realtime", "tools": name_only}}),
            "tool definitions",
        ),
        (
            "responses mcp without allowed_tools",
            "/v1/responses",
            json!({"input": "book", "tools": [{"type": "mcp", "server_label": "all", "server_url": "https://mcp.example.org/sse"}, bounded[0]]}),
            "unbounded_tool_sources",
        ),
        (
            "anthropic mcp_toolset enabled by default",
            "/v1/messages",
            toolset_on,
            "unbounded_tool_sources",
        ),
        (
            "anthropic mcp_servers without a toolset",
            "/v1/messages",
            bare_server,
            "unbounded_tool_sources",
        ),
    ];
    for (label, path, body, says) in cases {
        let (status, seen, reply) = send(
            &stack,
            path,
            &[("x-keyhole-session", "bypass".into())],
            serde_json::to_vec(&body).expect("body"),
        )
        .await;
        assert_eq!(status, 400, "{label}: {reply}");
        assert!(seen.is_none(), "{label}: reached the LLM");
        assert!(
            reply.contains(says),
            "{label}: the refusal says why: {reply}"
        );
        assert!(
            adversary::tool_definitions(&serde_json::to_vec(&body).expect("body")) > 12,
            "{label}: the oracle sees the registry"
        );
    }
}

/// A Realtime session created with its tools at the top level is read as a
/// Responses-shaped request and bounded like one.
#[tokio::test]
async fn a_realtime_session_is_bounded() {
    let stack = Stack::start(StackOptions {
        control: false,
        ..Default::default()
    })
    .await
    .expect("stack");
    let _fake = FakeControl::start(&stack.socket(), Fault::Everything)
        .await
        .expect("fake control");
    let name_only: Vec<Value> = legit::catalog_tools()
        .into_iter()
        .map(|(n, _, _)| json!({"type": "function", "name": n}))
        .collect();
    let body =
        serde_json::to_vec(&json!({"model": "gpt-realtime", "tools": name_only})).expect("body");
    let (status, seen, reply) = send(&stack, "/v1/realtime/sessions", &[], body).await;
    assert_eq!(status, 200, "{reply}");
    let n = adversary::tool_definitions(&seen.expect("forwarded"));
    assert!((1..=12).contains(&n), "{n} tools reached the LLM");
}

/// A WebSocket upgrade on the LLM listener never reaches the provider: the
/// Realtime API over a socket would carry tools keyhole cannot read.
#[tokio::test]
async fn a_websocket_upgrade_on_the_llm_listener_is_refused() {
    let stack = Stack::start(StackOptions {
        control: false,
        ..Default::default()
    })
    .await
    .expect("stack");
    let _fake = FakeControl::start(&stack.socket(), Fault::Everything)
        .await
        .expect("fake control");
    stack.llm.clear();
    let mut socket = tokio::net::TcpStream::connect(stack.envoy.llm)
        .await
        .expect("connect");
    let request = "GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nHost: llm\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                   Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    socket.write_all(request.as_bytes()).await.expect("write");
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), socket.read(&mut answer))
        .await
        .expect("answer")
        .expect("read");
    let head = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 4"), "refused: {head}");
    assert!(!head.contains(" 101 "), "{head}");
    assert!(
        stack.llm.seen().is_empty(),
        "the upgrade reached the LLM upstream"
    );
}

/// The audit header of an answer: `(name, reason)` pairs.
fn audited(headers: &reqwest::header::HeaderMap) -> Vec<(String, String)> {
    let value = headers
        .get("x-keyhole-tools")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    value
        .split(',')
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.split_once('='))
        .map(|(n, r)| (n.to_owned(), r.to_owned()))
        .collect()
}

/// A turn without text (a Responses turn that only returns a tool result,
/// an empty Chat message, an image alone) keeps the session's prior set; a
/// session with none gets tools that change nothing — never a fixed set.
#[tokio::test]
async fn a_turn_without_text_keeps_the_sessions_prior_set() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let tools = responses_tools();
    let client = reqwest::Client::new();
    let post = |session: &'static str, body: Value| {
        client
            .post(format!("{}/v1/responses", stack.envoy.llm_url()))
            .header("content-type", "application/json")
            .header("x-keyhole-session", session)
            .body(serde_json::to_vec(&body).expect("body"))
            .send()
    };
    let first = post(
        "no-text",
        json!({"input": "Book Anna Schmidt a follow-up appointment next Tuesday", "tools": tools}),
    )
    .await
    .expect("send");
    assert_eq!(first.status(), 200);
    let shown: Vec<String> = audited(first.headers())
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n != "keyhole_tool_search")
        .collect();
    assert!(!shown.is_empty());
    let tool_output = json!({
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "{\"status\":\"booked\"}"}],
        "tools": tools,
    });
    let next = post("no-text", tool_output.clone()).await.expect("send");
    assert_eq!(next.status(), 200);
    assert_eq!(
        next.headers()
            .get("x-keyhole-source")
            .and_then(|v| v.to_str().ok()),
        Some("no-turn")
    );
    let kept = audited(next.headers());
    let names: Vec<String> = kept
        .iter()
        .map(|(n, _)| n.clone())
        .filter(|n| n != "keyhole_tool_search")
        .collect();
    assert_eq!(names, shown, "the prior set, in its order");
    assert!(
        kept.iter()
            .filter(|(n, _)| n != "keyhole_tool_search")
            .all(|(_, r)| r == "prior-set"),
        "{kept:?}"
    );
    // A new session: the phase minimum of read-only tools.
    let fresh = post("no-text-fresh", tool_output).await.expect("send");
    assert_eq!(fresh.status(), 200);
    let kept = audited(fresh.headers());
    let overlay: Value = serde_json::from_slice(
        &std::fs::read(paths::catalog().join("tools.json")).expect("overlay"),
    )
    .expect("json");
    let writes: Vec<String> = overlay
        .as_array()
        .expect("tools")
        .iter()
        .filter(|t| t["op"].as_str().is_some_and(|op| op != "read"))
        .filter_map(|t| t["id"].as_str().map(|id| id.replace('.', "__")))
        .collect();
    let registry: Vec<&(String, String)> = kept
        .iter()
        .filter(|(n, _)| n != "keyhole_tool_search")
        .collect();
    assert_eq!(registry.len(), 6, "{kept:?}");
    assert!(
        registry
            .iter()
            .all(|(n, r)| r == "no-turn" && !writes.contains(n)),
        "{kept:?}"
    );
}

/// Regression (legitimate generator, seed 2669930766, case #28): a Responses
/// request in the tool-input phase (one tool) forcing, by `allowed_tools`,
/// one function that sits in a namespace was refused as "2 tool
/// definitions": the namespace counted as one. It is forwarded, with the
/// namespace holding the forced function and nothing else.
#[tokio::test]
async fn a_forced_function_in_a_namespace_fits_a_one_tool_phase() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let tools = legit::catalog_tools();
    let function = |(n, d, p): &(String, String, Value)| json!({"type": "function", "name": n, "description": d, "parameters": p, "strict": false});
    let forced = tools[1].0.clone();
    let body = json!({
        "model": "gpt-5",
        "input": [{"role": "user", "content": "Book the follow-up."}],
        "tools": [
            {"type": "namespace", "name": "clinical", "description": "Clinical record tools",
             "tools": tools[..3].iter().map(function).collect::<Vec<_>>()},
            function(&tools[3]),
        ],
        "tool_choice": {"type": "allowed_tools", "mode": "required",
                        "tools": [{"type": "function", "name": forced}]},
    });
    let headers = [
        ("x-keyhole-session", "ns-forced".to_owned()),
        ("x-keyhole-phase", "tool-input".to_owned()),
    ];
    let (status, seen, reply) = send(
        &stack,
        "/v1/responses",
        &headers,
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let seen: Value = serde_json::from_slice(&seen.expect("forwarded")).unwrap();
    let left = seen["tools"].as_array().unwrap();
    assert_eq!(left.len(), 1, "{seen}");
    assert_eq!(left[0]["type"], "namespace");
    let inner: Vec<&str> = left[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(inner, [forced.as_str()]);
    assert_eq!(seen["tool_choice"], body["tool_choice"]);
}
