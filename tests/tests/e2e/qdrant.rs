//! control in Qdrant mode (the compose topology) through the real Envoy: the
//! tool surface on every format, and Qdrant's faults — not started yet,
//! killed mid-run, restarted (with its data, and empty), a collection deleted
//! behind control's back.
//!
//! Tools are counted here, from the bodies the LLM upstream received, by a
//! parser of this file's own; control's and the filter's figures are only
//! compared against that count. Fault tests run a private Qdrant
//! ([`keyhole_e2e::qdrant::Qdrant`]) so that killing it disturbs no other test,
//! and a local bag-of-words embedder: what they exercise is the store, and the
//! shared embedder (one inference at a time, on a shared 2-core box) would
//! make their timing depend on everything else running.

use keyhole_e2e::bodies::{function_tools, tool_names};
use keyhole_e2e::qdrant::{self, Qdrant};
use keyhole_e2e::{control, embedder, paths, Stack, StackOptions};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Tools in the catalog request.
const REGISTRY: usize = 108;

fn read(path: std::path::PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn catalog_request() -> Vec<u8> {
    read(paths::catalog().join("openai_request.json"))
}

/// Control in Qdrant mode on `url`, in its own namespace, with the catalog
/// overlay (as compose runs it), on the shared embedder or on `embedder`.
/// Deadlines are generous: the shared embedder on a busy 2-core box must not
/// turn a hybrid answer into an outage, or an index into a failure, by accident.
fn qdrant_mode(url: &str, namespace: &str, embedder: Option<&str>) -> StackOptions {
    let mut control_args: Vec<String> = vec![
        "--overlay".into(),
        paths::catalog().join("tools.json").display().to_string(),
        "--qdrant-url".into(),
        url.into(),
        "--namespace".into(),
        namespace.into(),
        "--retrieval-timeout-ms".into(),
        "10000".into(),
        "--embedder-timeout-ms".into(),
        "120000".into(),
    ];
    if let Some(e) = embedder {
        control_args.extend(["--embedder-url".into(), e.into()]);
    }
    StackOptions {
        control_args,
        ..Default::default()
    }
}

async fn send(
    stack: &Stack,
    path: &str,
    body: Vec<u8>,
    session: &str,
    phase: &str,
) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", stack.envoy.llm_url()))
        .header("content-type", "application/json")
        .header("x-keyhole-session", session)
        .header("x-keyhole-phase", phase)
        .body(body)
        .send()
        .await
        .expect("request through envoy")
}

fn header(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

/// The body of a response control sent over its socket.
fn http_body(text: &str) -> &str {
    text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("")
}

/// How control ranked each turn of `session`, oldest first (`hybrid`,
/// `lexical`, `outage`), from its audit trail.
async fn retrievals(stack: &Stack, session: &str) -> Vec<String> {
    let text = control::get(&stack.socket(), &format!("/v1/audit/{session}"))
        .await
        .expect("audit");
    let trail: Value = serde_json::from_str(http_body(&text)).unwrap_or(Value::Null);
    trail
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["retrieval"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// control's `keyhole_control_resolves_total{source="…"}`.
async fn resolves(stack: &Stack, source: &str) -> u64 {
    let text = control::get(&stack.socket(), "/metrics")
        .await
        .expect("metrics");
    let prefix = format!("keyhole_control_resolves_total{{source=\"{source}\"}} ");
    http_body(&text)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in {text}"))
}

/// Sends the catalog request for `session` until control ranks it hybrid
/// (vector search on Qdrant); every answer on the way must be bounded.
/// Returns how each turn was ranked.
async fn until_hybrid(stack: &Stack, session: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let resp = send(
            stack,
            "/v1/chat/completions",
            catalog_request(),
            session,
            "planner",
        )
        .await;
        assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
        let how = retrievals(stack, session).await;
        if how.last().map(String::as_str) == Some("hybrid") {
            return how;
        }
        assert!(
            Instant::now() < deadline,
            "never hybrid: {how:?}; control log: {}",
            control_log(stack)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn control_log(stack: &Stack) -> String {
    let text = std::fs::read_to_string(stack.dir.path().join("data.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// No request the LLM upstream received carried more than `max` tools.
fn assert_upstream_bounded(stack: &Stack, max: usize) {
    for r in stack.llm.seen() {
        let n = function_tools(&r.body, false).len();
        assert!(n <= max, "{} tools reached the upstream (budget {max})", n);
    }
}

#[tokio::test]
async fn in_qdrant_mode_every_format_is_cut_to_a_bounded_byte_identical_hybrid_subset() {
    let ns = qdrant::fresh_namespace("formats");
    let stack = Stack::start(qdrant_mode(&qdrant::shared_grpc_url(), &ns, None))
        .await
        .expect("stack");
    until_hybrid(&stack, "warm", Duration::from_secs(120)).await;
    // The registry is in Qdrant, counted through Qdrant's own API.
    let coll = format!("keyhole-{ns}");
    assert_eq!(
        qdrant::points(&qdrant::shared_http_url(), &coll)
            .await
            .unwrap(),
        Some(REGISTRY as u64)
    );

    let fixtures = paths::repo().join("core/tests/fixtures");
    let cases = [
        (
            "/v1/chat/completions",
            read(paths::catalog().join("openai_request.json")),
            false,
        ),
        (
            "/v1/messages",
            read(paths::catalog().join("anthropic_request.json")),
            false,
        ),
        (
            "/v1/responses",
            read(fixtures.join("responses_request.json")),
            false,
        ),
        (
            "/v1beta/models/gemma-3-27b-it:generateContent",
            read(fixtures.join("gemini_request.json")),
            true,
        ),
    ];
    for (i, (path, body, gemini)) in cases.iter().enumerate() {
        stack.llm.clear();
        let original = function_tools(body, *gemini);
        assert!(
            original.len() >= 100,
            "{path}: the fixture carries the registry"
        );
        let resp = send(&stack, path, body.clone(), "formats", "planner").await;
        assert_eq!(resp.status(), 200, "{path}: {}", stack.envoy.log_tail());
        let source = header(&resp, "x-keyhole-source");
        let seen = stack.llm.seen();
        assert_eq!(seen.len(), 1, "{path}");
        let tools = function_tools(&seen[0].body, *gemini);
        assert!(
            (1..=12).contains(&tools.len()),
            "{path}: {} tools",
            tools.len()
        );
        let client = keyhole_e2e::bodies::client_tools(tools.clone());
        assert!(
            client.iter().all(|t| original.contains(t)),
            "{path}: every kept tool is byte-identical"
        );
        // Each format's registry is its own (other descriptions): it is indexed
        // in the background, ranked lexically meanwhile; the answer is bounded
        // either way. The turn is ranked by vector search once it is indexed.
        let how = retrievals(&stack, "formats").await;
        assert_eq!(how.len(), i + 1);
        assert!(
            matches!(how[i].as_str(), "hybrid" | "lexical"),
            "{path}: {how:?}"
        );
        // The header says how the turn was ranked.
        let said = if how[i] == "hybrid" {
            "retrieval"
        } else {
            "lexical"
        };
        assert_eq!(source, said, "{path}");
    }

    // Phase budgets and a forced tool, ranked by Qdrant.
    let mut body: Value = serde_json::from_slice(&catalog_request()).unwrap();
    body["tool_choice"] =
        serde_json::json!({"type": "function", "function": {"name": "billing__invoice__create"}});
    let body = serde_json::to_vec(&body).unwrap();
    for (phase, max) in [("tool-input", 1), ("agent-call", 8), ("planner", 12)] {
        stack.llm.clear();
        let resp = send(
            &stack,
            "/v1/chat/completions",
            body.clone(),
            "phases",
            phase,
        )
        .await;
        let tools_header = header(&resp, "x-keyhole-tools");
        assert_eq!(
            resp.status(),
            200,
            "{phase}: {}",
            resp.text().await.unwrap_or_default()
        );
        let names = tool_names(&stack.llm.seen()[0].body);
        assert!(
            !names.is_empty() && names.len() <= max,
            "{phase}: {}",
            names.len()
        );
        assert!(
            names.iter().any(|n| n == "billing__invoice__create"),
            "{phase}: the forced tool is kept"
        );
        assert!(
            tools_header.contains("billing__invoice__create=tool-choice"),
            "{tools_header}"
        );
    }
    assert_eq!(
        retrievals(&stack, "phases").await,
        ["hybrid", "hybrid", "hybrid"]
    );
    assert!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.tools_in")
            .await
            .unwrap()
            >= 100 * 8
    );
}

#[tokio::test]
async fn control_started_before_qdrant_ranks_lexically_then_hybrid_once_it_is_up() {
    let mut q = Qdrant::reserve().expect("ports");
    let ns = qdrant::fresh_namespace("late");
    let embedder = embedder::start(0).await;
    let stack = Stack::start(qdrant_mode(&q.grpc_url(), &ns, Some(&embedder)))
        .await
        .expect("control starts without Qdrant");

    // Qdrant is not there: control answers, ranked lexically, and says so.
    for phase in ["planner", "agent-call"] {
        let resp = send(
            &stack,
            "/v1/chat/completions",
            catalog_request(),
            "late",
            phase,
        )
        .await;
        assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
        assert_eq!(
            header(&resp, "x-keyhole-source"),
            "lexical",
            "ranked without vectors, and says so"
        );
    }
    assert_upstream_bounded(&stack, 12);
    let seen = stack.llm.seen();
    assert_eq!(seen.len(), 2);
    assert!(tool_names(&seen[1].body).len() <= 8, "agent-call budget");
    assert_eq!(
        retrievals(&stack, "late").await,
        ["lexical", "lexical"],
        "the audit trail shows the lexical ranking"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(stack.dir.path().join("data.log"))
        .unwrap_or_default()
        .contains("indexing the registry failed")
    {
        assert!(
            Instant::now() < deadline,
            "control never logged the failed index: {}",
            control_log(&stack)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Qdrant comes up: control retries by itself and turns hybrid.
    q.start().await.expect("qdrant");
    let how = until_hybrid(&stack, "late", Duration::from_secs(90)).await;
    assert!(
        how.iter().all(|h| h == "lexical" || h == "hybrid"),
        "no outage on the way: {how:?}"
    );
    assert_eq!(
        qdrant::points(&q.http_url(), &format!("keyhole-{ns}"))
            .await
            .unwrap(),
        Some(REGISTRY as u64)
    );
    assert_upstream_bounded(&stack, 12);
}

#[tokio::test]
async fn qdrant_killed_mid_run_gives_the_bounded_fallback_and_restarts_recover_without_control() {
    let mut q = Qdrant::start_new().await.expect("qdrant");
    let ns = qdrant::fresh_namespace("kill");
    let coll = format!("keyhole-{ns}");
    let embedder = embedder::start(0).await;
    let mut stack = Stack::start(qdrant_mode(&q.grpc_url(), &ns, Some(&embedder)))
        .await
        .expect("stack");
    until_hybrid(&stack, "s", Duration::from_secs(120)).await;
    let prior = tool_names(&stack.llm.seen().last().unwrap().body);
    assert!(!prior.is_empty());
    let control_pid = stack.control.as_ref().unwrap().child.id();

    // Killed: every turn gets control's bounded fallback, counted.
    q.kill().await.unwrap();
    stack.llm.clear();
    let fallbacks_before = resolves(&stack, "fallback").await;
    let mut sent = 0;
    for session in ["s", "cold"] {
        for (phase, max) in [("planner", 12), ("agent-call", 8), ("tool-input", 1)] {
            let resp = send(
                &stack,
                "/v1/chat/completions",
                catalog_request(),
                session,
                phase,
            )
            .await;
            sent += 1;
            assert_eq!(
                resp.status(),
                200,
                "{session} {phase}: {}",
                stack.envoy.log_tail()
            );
            assert_eq!(
                header(&resp, "x-keyhole-source"),
                "control-fallback",
                "{session} {phase}"
            );
            let seen = stack.llm.seen();
            assert_eq!(seen.len(), sent);
            let names = tool_names(&seen[sent - 1].body);
            assert!(
                names.len() <= max,
                "{session} {phase}: {} tools over the budget {max}",
                names.len()
            );
            assert_eq!(
                function_tools(&seen[sent - 1].body, false).len(),
                names.len()
            );
            // Only the session's prior audited set and the floors: never ranked anew.
            for entry in header(&resp, "x-keyhole-tools")
                .split(',')
                .filter(|e| !e.is_empty())
            {
                let (name, reason) = entry.split_once('=').expect("name=reason");
                assert!(
                    reason == "prior-set" || reason.starts_with("floor:"),
                    "{session} {phase}: {entry}"
                );
                if reason == "prior-set" {
                    assert!(
                        session == "s" && prior.iter().any(|p| p == name),
                        "{entry} was not in the prior set"
                    );
                }
            }
        }
    }
    assert_eq!(
        resolves(&stack, "fallback").await - fallbacks_before,
        sent as u64,
        "every fallback is counted"
    );
    let how = retrievals(&stack, "cold").await;
    assert_eq!(how, ["outage", "outage", "outage"]);
    assert!(stack
        .llm
        .seen()
        .iter()
        .all(|r| function_tools(&r.body, false).len() < REGISTRY));

    // Restarted with its data: retrieval recovers, control untouched.
    q.start().await.expect("qdrant restart");
    let before = retrievals(&stack, "s").await.len();
    let how = until_hybrid(&stack, "s", Duration::from_secs(60)).await;
    assert!(
        how[before..].iter().all(|h| h != "lexical"),
        "the stored collection was reused: {:?}",
        &how[before..]
    );
    let control = stack.control.as_mut().unwrap();
    assert!(
        matches!(control.child.try_wait(), Ok(None)),
        "control kept running"
    );
    assert_eq!(control.child.id(), control_pid, "control was not restarted");

    // Restarted empty (a Qdrant without persistence): control sees the
    // collection missing, ranks lexically, rebuilds it, and turns hybrid again.
    q.kill().await.unwrap();
    q.wipe().unwrap();
    q.start().await.expect("qdrant, empty");
    assert_eq!(qdrant::points(&q.http_url(), &coll).await.unwrap(), None);
    let before = retrievals(&stack, "s").await.len();
    let how = until_hybrid(&stack, "s", Duration::from_secs(90)).await;
    assert!(
        how[before..].iter().any(|h| h == "lexical"),
        "the rebuild was visible: {:?}",
        &how[before..]
    );
    assert_eq!(
        qdrant::points(&q.http_url(), &coll).await.unwrap(),
        Some(REGISTRY as u64)
    );
    assert_upstream_bounded(&stack, 12);
}

#[tokio::test]
async fn a_collection_deleted_behind_controls_back_is_rebuilt() {
    let ns = qdrant::fresh_namespace("deleted");
    let coll = format!("keyhole-{ns}");
    let http = qdrant::shared_http_url();
    let embedder = embedder::start(0).await;
    let stack = Stack::start(qdrant_mode(
        &qdrant::shared_grpc_url(),
        &ns,
        Some(&embedder),
    ))
    .await
    .expect("stack");
    until_hybrid(&stack, "d", Duration::from_secs(120)).await;
    assert_eq!(
        qdrant::points(&http, &coll).await.unwrap(),
        Some(REGISTRY as u64)
    );

    qdrant::delete_collection(&http, &coll).await.unwrap();
    assert_eq!(qdrant::points(&http, &coll).await.unwrap(), None);
    let before = retrievals(&stack, "d").await.len();
    let resp = send(
        &stack,
        "/v1/chat/completions",
        catalog_request(),
        "d",
        "planner",
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-keyhole-source"),
        "lexical",
        "a missing collection is no outage, and says so"
    );
    assert_eq!(
        retrievals(&stack, "d").await[before..],
        ["lexical"],
        "ranked lexically while it is rebuilt"
    );
    until_hybrid(&stack, "d", Duration::from_secs(90)).await;
    assert_eq!(
        qdrant::points(&http, &coll).await.unwrap(),
        Some(REGISTRY as u64),
        "rebuilt in full"
    );
    assert_upstream_bounded(&stack, 12);
}
