//! The walking skeleton, end to end: the real `.wasm` in a real Envoy, calling
//! the real control binary over a Unix socket, with a real embedder.

use keyhole_e2e::bodies::without_tools;
use keyhole_e2e::{envoy, paths, Stack, StackOptions};
use serde_json::value::RawValue;
use serde_json::Value;

fn catalog_request() -> Vec<u8> {
    std::fs::read(paths::catalog().join("openai_request.json")).expect("catalog request")
}

/// The raw bytes of each element of a body's `tools` array.
fn raw_tools(body: &[u8]) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct B<'a> {
        #[serde(borrow)]
        tools: Vec<&'a RawValue>,
    }
    let b: B<'_> = serde_json::from_slice(body).expect("body with tools");
    b.tools.iter().map(|t| t.get().to_owned()).collect()
}

async fn post(url: &str, body: Vec<u8>) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("x-keyhole-session", "s-skeleton")
        .body(body)
        .send()
        .await
        .expect("request through envoy")
}

#[tokio::test]
async fn catalog_request_reaches_the_upstream_as_a_bounded_byte_identical_subset() {
    // The tool surface alone: the other keys must come through byte for byte,
    // and the catalog request names a practitioner by UUID, which aliases (on
    // by default) would replace. llm_aliases.rs pins that rewrite.
    let options = StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"aliases":"off"}"#.into(),
        ..Default::default()
    };
    let stack = Stack::start(options).await.expect("stack");
    let original = catalog_request();
    let resp = post(&stack.envoy.llm_url(), original.clone()).await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    let audit = resp
        .headers()
        .get("x-keyhole-tools")
        .map(|v| v.to_str().unwrap().to_owned());

    let seen = stack.llm.seen();
    assert_eq!(seen.len(), 1);
    let got = &seen[0].body;
    // The client's tools (keyhole adds its tool-search control tool; recovery.rs).
    let got_tools = keyhole_e2e::bodies::client_tools(raw_tools(got));
    let original_tools = raw_tools(&original);
    assert!(
        (1..=12).contains(&got_tools.len()),
        "{} tools forwarded",
        got_tools.len()
    );
    for t in &got_tools {
        assert!(
            original_tools.contains(t),
            "a forwarded tool is not byte-identical to the client's: {t}"
        );
    }
    assert_eq!(
        without_tools(got),
        without_tools(&original),
        "model, messages and other keys unchanged"
    );
    assert_eq!(
        seen[0]
            .headers
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok()),
        Some(got.len()),
        "the upstream got a correct content-length"
    );
    assert!(
        got.len() < original.len() / 4,
        "{} of {} bytes forwarded",
        got.len(),
        original.len()
    );

    // The audit header names exactly the forwarded tools.
    let audit = audit.expect("audit header");
    let audited: Vec<&str> = audit
        .split(',')
        .map(|p| p.split('=').next().unwrap())
        .collect();
    assert_eq!(audited.len(), got_tools.len());
    for name in audited {
        assert!(
            got_tools
                .iter()
                .any(|t| t.contains(&format!("\"name\":\"{name}\""))),
            "{name}"
        );
    }
    assert!(
        stack.envoy.log_text().contains("keyhole.candidate-set"),
        "the per-turn line is logged"
    );

    // control's own metrics, in Prometheus text.
    let metrics = keyhole_e2e::control::get(&stack.socket(), "/metrics")
        .await
        .expect("metrics");
    assert!(
        metrics.contains("keyhole_control_requests_total{route=\"/v1/resolve\",status=\"200\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("keyhole_control_tools_total{direction=\"in\"} 108"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("s-skeleton"),
        "no session in metric labels"
    );
}

#[tokio::test]
async fn a_get_passes_through_untouched() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let resp = reqwest::get(format!("{}/v1/models?x=1", stack.envoy.llm_url()))
        .await
        .expect("get");
    assert_eq!(resp.status(), 200);
    let seen = stack.llm.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].uri, "/v1/models?x=1");
    assert!(seen[0].body.is_empty());
}

#[tokio::test]
async fn with_control_down_nothing_unbounded_is_forwarded() {
    // Default policy: reject with a clear 503.
    let stack = Stack::start(StackOptions {
        control: false,
        ..Default::default()
    })
    .await
    .expect("stack");
    let resp = post(&stack.envoy.llm_url(), catalog_request()).await;
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.expect("json error");
    assert_eq!(body["error"]["type"], "keyhole_unavailable");
    let seen = stack.llm.seen();
    assert!(
        seen.is_empty(),
        "nothing reached the upstream, but it saw {:?}",
        seen.iter()
            .map(|r| format!("{} {} ({} bytes)", r.method, r.uri, r.body.len()))
            .collect::<Vec<_>>()
    );

    // Strip policy: forwarded, with no function tools.
    let stack = Stack::start(StackOptions {
        control: false,
        llm_filter_config: r#"{"mode":"llm","on_outage":"strip"}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let resp = post(&stack.envoy.llm_url(), catalog_request()).await;
    assert_eq!(resp.status(), 200);
    let seen = stack.llm.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(raw_tools(&seen[0].body).len(), 0);
}

#[test]
fn envoy_validates_the_shipped_config_and_names_a_bad_plugin_field() {
    let dir = tempfile::tempdir().unwrap();
    let options = envoy::EnvoyOptions::for_validation(dir.path());
    let good = envoy::render(&envoy::vars(&options)).unwrap();
    let (ok, out) = envoy::validate(&good, dir.path()).unwrap();
    assert!(ok, "shipped config must validate:\n{out}");

    let bad = envoy::render(&envoy::vars(&envoy::EnvoyOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":0}"#.into(),
        ..options
    }))
    .unwrap();
    let (ok, out) = envoy::validate(&bad, dir.path()).unwrap();
    assert!(!ok, "a bad plugin field must fail validation");
    assert!(
        out.contains("field=timeout_ms"),
        "the log names the field:\n{out}"
    );
}
