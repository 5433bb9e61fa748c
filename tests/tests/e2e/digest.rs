//! The registry-by-digest protocol through the real Envoy, the real `.wasm`
//! and the real control: the filter names the registry by digest, sends the
//! descriptors only when control does not know it (first sight, a restart),
//! and what control receives per turn does not grow with the registry.

use keyhole_e2e::{control, paths, Stack, StackOptions};
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

fn catalog_request() -> Vec<u8> {
    let path = paths::catalog().join("openai_request.json");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A chat request with `n` synthetic function tools (schemas included, so the
/// body is registry-sized) and one user turn.
fn synthetic_request(n: usize) -> Vec<u8> {
    let kinds = [
        "patient",
        "encounter",
        "observation",
        "invoice",
        "appointment",
        "medication",
        "report",
        "claim",
    ];
    let verbs = ["search", "read", "create", "update", "list", "cancel"];
    let tools: Vec<Value> = (0..n)
        .map(|i| {
            let kind = kinds[i % kinds.len()];
            let verb = verbs[(i / kinds.len()) % verbs.len()];
            json!({"type": "function", "function": {
                "name": format!("{kind}__{verb}__{i}"),
                "description": format!("{verb} {kind} records of department {} (tool {i})", i % 97),
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}, "limit": {"type": "integer"}}}
            }})
        })
        .collect();
    serde_json::to_vec(&json!({
        "model": "m",
        "messages": [{"role": "user", "content": "Create an invoice for the patient's last encounter"}],
        "tools": tools,
    }))
    .unwrap_or_default()
}

async fn send(stack: &Stack, body: &[u8], session: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{CHAT}", stack.envoy.llm_url()))
        .header("content-type", "application/json")
        .header("x-keyhole-session", session)
        .body(body.to_vec())
        .send()
        .await
        .expect("request through envoy")
}

/// One counter of control's `/metrics` (`name` with its labels, as printed).
async fn metric(stack: &Stack, name: &str) -> u64 {
    let text = control::get(&stack.socket(), "/metrics")
        .await
        .expect("control's metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

const BYTES: &str = "keyhole_control_resolve_request_bytes_total";
const KNOWN: &str = r#"keyhole_control_resolve_registry_total{via="known"}"#;
const SENT: &str = r#"keyhole_control_resolve_registry_total{via="sent"}"#;
const UNKNOWN: &str = r#"keyhole_control_resolve_registry_total{via="unknown"}"#;

/// (known, sent, unknown) resolve requests so far.
async fn vias(stack: &Stack) -> (u64, u64, u64) {
    (
        metric(stack, KNOWN).await,
        metric(stack, SENT).await,
        metric(stack, UNKNOWN).await,
    )
}

/// A stack whose control has no embedder: nothing gets indexed, every turn is
/// ranked lexically, deterministically, and no background embedding loads
/// the machine. The protocol under test does not depend on vectors.
async fn lexical_stack() -> Stack {
    Stack::start(StackOptions {
        control_args: vec![
            "--overlay".into(),
            paths::catalog().join("tools.json").display().to_string(),
            "--embedder-url".into(),
            "http://127.0.0.1:9".into(),
        ],
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"max_body_bytes":8388608}"#.into(),
        max_body_bytes: 8 * 1024 * 1024,
        ..Default::default()
    })
    .await
    .expect("stack")
}

/// Sends the turn under `session`; returns the audit header, checking that
/// control ranked it lexically (not a fallback) and said so.
async fn answer(stack: &Stack, body: &[u8], session: &str) -> String {
    let resp = send(stack, body, session).await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    assert_eq!(
        resp.headers()["x-keyhole-source"],
        "lexical",
        "{}",
        stack.envoy.log_tail()
    );
    let tools = resp.headers()["x-keyhole-tools"]
        .to_str()
        .unwrap_or_default()
        .to_owned();
    let audit = control::get(&stack.socket(), &format!("/v1/audit/{session}"))
        .await
        .expect("audit");
    let body = audit.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let trail: Value = serde_json::from_str(body).expect("audit json");
    let last = trail
        .as_array()
        .and_then(|t| t.last())
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(last["retrieval"], "lexical", "{last}");
    assert_eq!(
        last["toolsIn"], 108,
        "control ranked the whole registry: {last}"
    );
    tools
}

#[tokio::test]
async fn control_restarted_between_turns_is_sent_the_registry_again_and_answers_the_same() {
    let mut stack = lexical_stack().await;
    let body = catalog_request();

    // First sight: asked by digest, answered unknown, asked again with the tools.
    let before = answer(&stack, &body, "first").await;
    assert_eq!(
        vias(&stack).await,
        (0, 1, 1),
        "one unknown digest, then the descriptors once"
    );
    assert_eq!(
        answer(&stack, &body, "second").await,
        before,
        "by digest alone, the same answer"
    );
    assert_eq!(
        vias(&stack).await,
        (1, 1, 1),
        "the next turn went by digest alone"
    );
    assert!(
        !before.is_empty() && before.split(',').count() <= 12,
        "{before}"
    );

    // A restart forgets every registry: the next turn sends it again, once.
    stack
        .control
        .as_mut()
        .expect("control")
        .restart()
        .await
        .expect("restart");
    let after = answer(&stack, &body, "first").await;
    assert_eq!(
        vias(&stack).await,
        (0, 1, 1),
        "after the restart: unknown, then sent once"
    );
    assert_eq!(
        after, before,
        "the same turn gets the same answer across the restart"
    );
    assert_eq!(answer(&stack, &body, "second").await, before);
    assert_eq!(vias(&stack).await, (1, 1, 1));
    // Every request reached the upstream bounded.
    for r in stack.llm.seen() {
        let v: Value = serde_json::from_slice(&r.body).expect("json");
        let n = v["tools"].as_array().map_or(0, Vec::len);
        assert!(n <= 12, "{n} tools reached the upstream");
    }
}

/// Bytes control receives for one turn (every call the filter made for it).
async fn turn_bytes(stack: &Stack, body: &[u8], session: &str) -> u64 {
    let before = metric(stack, BYTES).await;
    let resp = send(stack, body, session).await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    metric(stack, BYTES).await - before
}

#[tokio::test]
async fn requests_to_control_do_not_grow_with_the_registry() {
    let stack = lexical_stack().await;
    let small = synthetic_request(108);
    let large = synthetic_request(5_000);
    let first_108 = turn_bytes(&stack, &small, "s108").await;
    let second_108 = turn_bytes(&stack, &small, "s108").await;
    let first_5000 = turn_bytes(&stack, &large, "s5000").await;
    let second_5000 = turn_bytes(&stack, &large, "s5000").await;
    println!(
        "bytes filter→control per turn: 108 tools {first_108} first, {second_108} after; \
         5,000 tools {first_5000} first, {second_5000} after"
    );
    assert!(
        first_5000 > 200_000,
        "the first turn sends the 5,000 descriptors ({first_5000} B)"
    );
    assert!(second_108 < 1_024, "{second_108} B");
    assert!(second_5000 < 1_024, "{second_5000} B");
    // The same turn, session length and digest length: the registry adds nothing.
    assert!(
        second_5000.abs_diff(second_108) < 16,
        "{second_108} B vs {second_5000} B"
    );
}
