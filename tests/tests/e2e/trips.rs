//! Round trips per request through the real Envoy, the real `.wasm` and the
//! real control: a turn with aliases on is one call to control (a second
//! only when control does not know the registry), and a request without a
//! body calls nothing.

use keyhole_e2e::{control, paths, Stack, StackOptions};
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

fn catalog_request() -> Vec<u8> {
    let path = paths::catalog().join("openai_request.json");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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

/// A stack whose control has no embedder: every turn is ranked lexically.
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

/// Calls control answered on the routes a turn uses (`/v2/turn`, and the
/// `/v1` routes an older filter or a first sight takes), by route.
async fn turn_calls(stack: &Stack) -> Vec<(String, u64)> {
    let text = control::get(&stack.socket(), "/metrics")
        .await
        .expect("control's metrics");
    let mut calls: Vec<(String, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("keyhole_control_requests_total{route=\""))
        .filter_map(|l| {
            let (route, rest) = l.split_once('"')?;
            let n = rest.rsplit(' ').next()?.trim().parse().ok()?;
            ["/v2/turn", "/v1/resolve", "/v1/alias/encode"]
                .contains(&route)
                .then(|| (route.to_owned(), n))
        })
        .collect();
    calls.sort();
    calls
}

#[tokio::test]
async fn a_turn_with_aliases_is_one_call_to_control() {
    let stack = lexical_stack().await;
    let mut body: Value = serde_json::from_slice(&catalog_request()).expect("json");
    let uuid = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    body["messages"].as_array_mut().expect("messages").push(
        json!({"role": "user", "content": format!("Open patient {uuid} and bill the visit")}),
    );
    let body = serde_json::to_vec(&body).expect("json");

    // First sight of the registry: the turn, then the descriptors once.
    let resp = send(&stack, &body, "calls").await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    // The catalog's own practitioner id and the one added above.
    assert_eq!(resp.headers()["x-keyhole-ids-aliased"], "2");
    let first = turn_calls(&stack).await;
    let count = |calls: &[(String, u64)], route: &str| {
        calls
            .iter()
            .filter(|(r, _)| r == route)
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    assert_eq!(count(&first, "/v2/turn"), 1, "{first:?}");
    assert_eq!(count(&first, "/v1/resolve"), 1, "{first:?}");
    assert_eq!(count(&first, "/v1/alias/encode"), 0, "{first:?}");

    // Every later turn: one call, aliases and set together.
    for n in 1..=3 {
        let resp = send(&stack, &body, "calls").await;
        assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
        assert_eq!(resp.headers()["x-keyhole-ids-aliased"], "2");
        assert_eq!(resp.headers()["x-keyhole-source"], "lexical");
        let now = turn_calls(&stack).await;
        assert_eq!(count(&now, "/v2/turn"), 1 + n, "{now:?}");
        assert_eq!(count(&now, "/v1/resolve"), 1, "{now:?}");
        assert_eq!(count(&now, "/v1/alias/encode"), 0, "{now:?}");
    }
    // The model was shown the alias only, and a bounded set.
    for r in stack.llm.seen() {
        let text = String::from_utf8_lossy(&r.body);
        assert!(!text.contains(uuid), "a raw id reached the upstream");
        let v: Value = serde_json::from_slice(&r.body).expect("json");
        assert!(v["tools"].as_array().map_or(0, Vec::len) <= 12);
    }
}

#[tokio::test]
async fn a_request_without_a_body_calls_nothing() {
    let stack = lexical_stack().await;
    let client = reqwest::Client::new();
    for method in [
        reqwest::Method::GET,
        reqwest::Method::HEAD,
        reqwest::Method::DELETE,
    ] {
        let resp = client
            .request(
                method.clone(),
                format!("{}/v1/models", stack.envoy.llm_url()),
            )
            .header("x-keyhole-session", "bodiless")
            .send()
            .await
            .expect("request through envoy");
        assert_eq!(resp.status(), 200, "{method}: {}", stack.envoy.log_tail());
        assert!(
            resp.headers().get("x-keyhole-ids-aliased").is_none(),
            "{method}"
        );
    }
    assert_eq!(turn_calls(&stack).await, Vec::new(), "control was called");
    assert_eq!(
        stack.llm.seen().len(),
        3,
        "each request reached the upstream"
    );
}

#[tokio::test]
async fn an_hms_response_with_ids_is_one_call_and_an_empty_one_none() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let uuid = "5d2c1b0a-3e4f-4a5b-8c6d-7e8f9a0b1c2d";
    stack.hms.set(
        "/api/v2/patients",
        keyhole_e2e::upstream::Canned::json(format!(r#"{{"data":[{{"id":"{uuid}"}}]}}"#)),
    );
    stack
        .hms
        .set("/api/v2/empty", keyhole_e2e::upstream::Canned::json(""));
    let get = |path: &'static str| {
        let url = format!("{}{path}", stack.envoy.hms_url());
        async move {
            reqwest::Client::new()
                .get(url)
                .header("x-keyhole-session", "calls")
                .send()
                .await
                .expect("hms request")
        }
    };
    let calls = || async {
        (
            stack
                .envoy
                .stat("wasmcustom.keyhole.hms_callouts.response")
                .await
                .unwrap_or(0),
            stack
                .envoy
                .stat("wasmcustom.keyhole.hms_callouts.request")
                .await
                .unwrap_or(0),
        )
    };
    for n in 1..=2 {
        let resp = get("/api/v2/patients").await;
        assert_eq!(resp.status(), 200);
        let body = resp.text().await.expect("body");
        assert!(!body.contains(uuid), "{body}");
        assert_eq!(calls().await, (n, 0), "one encode per response, no decode");
    }
    let resp = get("/api/v2/empty").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(calls().await, (2, 0), "an empty body calls nothing");
}
