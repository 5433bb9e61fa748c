//! Never silently degraded, through the real Envoy, `.wasm` and control: a
//! control started with `--registry` indexes it before it reports ready, so
//! the first turn is hybrid; a control that cannot embed ranks lexically and
//! says so in the client's header, its counter and the audit trail.

use keyhole_e2e::{control, embedder, paths, Stack, StackOptions};
use serde_json::Value;

const CHAT: &str = "/v1/chat/completions";

fn catalog_request() -> Vec<u8> {
    let path = paths::catalog().join("openai_request.json");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn send(stack: &Stack, session: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{CHAT}", stack.envoy.llm_url()))
        .header("content-type", "application/json")
        .header("x-keyhole-session", session)
        .body(catalog_request())
        .send()
        .await
        .expect("request through envoy")
}

fn header(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// One line's value of control's `/metrics` (`name` with its labels, as printed).
async fn metric(stack: &Stack, name: &str) -> u64 {
    let text = control::get(&stack.socket(), "/metrics")
        .await
        .expect("control's metrics");
    body(&text)
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// The session's audit trail, as `(source, retrieval)` per answer.
async fn trail(stack: &Stack, session: &str) -> Vec<(String, String)> {
    let answer = control::get(&stack.socket(), &format!("/v1/audit/{session}"))
        .await
        .expect("audit");
    let trail: Value = serde_json::from_str(body(&answer)).expect("audit json");
    let field = |e: &Value, k: &str| e[k].as_str().unwrap_or("?").to_owned();
    trail
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| (field(e, "source"), field(e, "retrieval")))
        .collect()
}

/// Flags for the catalog overlay and whatever else the test needs.
fn with_overlay(extra: &[&str]) -> StackOptions {
    let mut control_args = vec![
        "--overlay".into(),
        paths::catalog().join("tools.json").display().to_string(),
    ];
    control_args.extend(extra.iter().map(|s| s.to_string()));
    StackOptions {
        control_args,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_control_started_with_its_registry_answers_the_first_turn_hybrid() {
    let registry = paths::catalog()
        .join("openai_request.json")
        .display()
        .to_string();
    // The embedder refuses its first requests: control retries (its client,
    // then the start-up index with smaller batches and backoff) until done.
    // `Stack::start` waits for `/healthz` to answer 200, i.e. for the index.
    let embedder = embedder::start(4).await;
    let args = [
        "--registry",
        &registry,
        "--embedder-url",
        &embedder,
        "--retrieval-timeout-ms",
        "5000",
    ];
    let stack = Stack::start(with_overlay(&args)).await.expect("stack");
    let state = metric(&stack, r#"keyhole_control_index_state{state="ready"}"#).await;
    assert_eq!(
        state, 1,
        "ready only once the configured registry is indexed"
    );
    assert!(
        metric(&stack, "keyhole_control_index_attempts").await >= 2,
        "the first attempt failed and was retried"
    );

    let resp = send(&stack, "first").await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    assert_eq!(
        header(&resp, "x-keyhole-source"),
        "retrieval",
        "{}",
        stack.envoy.log_tail()
    );
    assert_eq!(
        trail(&stack, "first").await,
        [("retrieval".to_owned(), "hybrid".to_owned())]
    );
    assert_eq!(
        metric(
            &stack,
            r#"keyhole_control_resolves_total{source="lexical"}"#
        )
        .await,
        0
    );
    assert_eq!(
        metric(
            &stack,
            r#"keyhole_control_resolves_total{source="retrieval"}"#
        )
        .await,
        1
    );
}

#[tokio::test]
async fn a_control_whose_embedder_is_down_answers_lexical_and_says_so_everywhere() {
    // Nothing listens on the discard port.
    let stack = Stack::start(with_overlay(&["--embedder-url", "http://127.0.0.1:9"]))
        .await
        .expect("stack");
    for turn in 1..=2 {
        let resp = send(&stack, "down").await;
        assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
        assert_eq!(
            header(&resp, "x-keyhole-source"),
            "lexical",
            "turn {turn}: {}",
            stack.envoy.log_tail()
        );
        let tools = header(&resp, "x-keyhole-tools");
        let n = tools.split(',').filter(|t| !t.is_empty()).count();
        assert!((1..=12).contains(&n), "turn {turn}: {n} tools: {tools}");
    }
    assert_eq!(
        metric(
            &stack,
            r#"keyhole_control_resolves_total{source="lexical"}"#
        )
        .await,
        2
    );
    assert_eq!(
        metric(
            &stack,
            r#"keyhole_control_resolves_total{source="retrieval"}"#
        )
        .await,
        0
    );
    let lexical = ("lexical".to_owned(), "lexical".to_owned());
    assert_eq!(trail(&stack, "down").await, [lexical.clone(), lexical]);
    // The filter's log line names the source too.
    assert!(
        stack.envoy.log_text().contains("source=lexical"),
        "{}",
        stack.envoy.log_tail()
    );
}
