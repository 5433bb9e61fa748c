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
    let socket = stack.socket();
    for _ in 0..50 {
        let out = std::process::Command::new("curl")
            .args(["-s", "--unix-socket"])
            .arg(&socket)
            .arg(format!("http://keyhole/v1/audit/{session}"))
            .output()
            .unwrap();
        let trail: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let done = trail
            .as_array()
            .is_some_and(|t| t.len() >= entries && t.iter().all(|e| e.get("calls").is_some()));
        if done {
            return trail;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no calls in the audit trail of {session}");
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
