//! "Never the full registry", tried hard: through the real Envoy with the real
//! `.wasm`, every request that reaches the LLM upstream holds at most the
//! phase budget of tool definitions, counted by the test's own oracle
//! ([`adversary::tool_definitions`]) — or the request was refused and nothing
//! reached the upstream.
//!
//! Control is the adversarial fake that surfaces every tool it is shown, so
//! the bound is the filter's alone. Each of the six ways through that outside
//! checks found has a test here; a seeded generator covers their mixtures
//! over methods and transports (HTTP/1.1, h2c, h2c with request trailers).

use keyhole_core::proto::tools::{Reason, ResolveResponse, Source, SurfacedTool};
use keyhole_core::tools::surface::{self, Finished, Read};
use keyhole_core::{config::OnOutage, tools::format::BuiltinTools, tools::format::Memo, Phase};
use keyhole_e2e::adversary::{self, Rng, Transport};
use keyhole_e2e::fake_control::{FakeControl, Fault};
use keyhole_e2e::{h2, paths, Stack, StackOptions};
use serde_json::Value;

/// The stack with a control that surfaces every tool it is shown.
async fn adversarial() -> (Stack, FakeControl) {
    let stack = Stack::start(StackOptions {
        control: false,
        ..Default::default()
    })
    .await
    .expect("stack");
    let fake = FakeControl::start(&stack.socket(), Fault::Everything)
        .await
        .expect("fake control");
    (stack, fake)
}

/// Sends one request; returns the status and the oracle's count of tool
/// definitions in what the upstream received (`None`: nothing reached it).
async fn deliver(stack: &Stack, request: &adversary::Request) -> (u16, Option<usize>) {
    stack.llm.clear();
    let status = match request.transport {
        Transport::Http1 => {
            let method = reqwest::Method::from_bytes(request.method.as_bytes()).expect("method");
            let mut req = reqwest::Client::new()
                .request(method, format!("{}{}", stack.envoy.llm_url(), request.path))
                .header("content-type", "application/json")
                .body(request.body.clone());
            for (k, v) in &request.headers {
                req = req.header(*k, v.as_str());
            }
            req.send().await.expect("send").status().as_u16()
        }
        Transport::Http2 | Transport::Http2Trailers => {
            let trailers = request.transport == Transport::Http2Trailers;
            let reply = h2::send(
                stack.envoy.llm,
                request.method,
                &request.path,
                &request.headers,
                request.body.clone(),
                trailers,
            )
            .await
            .expect("h2 send");
            reply.status
        }
    };
    let forwarded = stack
        .llm
        .seen()
        .last()
        .map(|r| adversary::tool_definitions(&r.body));
    (status, forwarded)
}

/// Asserts the invariant for one outcome.
fn holds(label: &str, request: &adversary::Request, status: u16, forwarded: Option<usize>) {
    match forwarded {
        Some(n) => assert!(
            n <= request.budget,
            "{label}: {n} tool definitions reached the LLM (budget {})",
            request.budget
        ),
        None => assert!(
            status >= 400,
            "{label}: nothing forwarded, yet status {status}"
        ),
    }
}

fn catalog(file: &str) -> Value {
    serde_json::from_slice(&std::fs::read(paths::catalog().join(file)).expect("catalog"))
        .expect("json")
}

fn request(
    method: &'static str,
    path: &str,
    body: &Value,
    transport: Transport,
) -> adversary::Request {
    adversary::Request {
        method,
        path: path.to_owned(),
        headers: vec![("x-keyhole-session", "invariant".into())],
        body: serde_json::to_vec(body).expect("body"),
        transport,
        budget: 12,
        placed: 108,
        clean: false,
    }
}

/// The catalog's Chat request with every tool rewritten by `f`.
fn chat_tools_mapped(f: impl Fn(&mut Value)) -> Value {
    let mut body = catalog("openai_request.json");
    for tool in body["tools"].as_array_mut().expect("tools") {
        f(tool);
    }
    body
}

// === the six ways through ===

/// 1. HTTP/2 with request trailers: the body never sees end-of-stream.
#[tokio::test]
async fn http2_request_trailers_do_not_carry_the_registry_past() {
    let (stack, _fake) = adversarial().await;
    for transport in [Transport::Http2, Transport::Http2Trailers, Transport::Http1] {
        for (path, file) in [
            ("/v1/chat/completions", "openai_request.json"),
            ("/v1/messages", "anthropic_request.json"),
        ] {
            let req = request("POST", path, &catalog(file), transport);
            let (status, forwarded) = deliver(&stack, &req).await;
            assert_eq!(
                status, 200,
                "{transport:?} {path}: a valid request is served"
            );
            let n = forwarded.expect("forwarded");
            assert!(
                (1..=12).contains(&n),
                "{transport:?} {path}: {n} tools forwarded"
            );
        }
    }
}

/// 2. Unknown tool types and spellings on the right path.
#[tokio::test]
async fn unknown_tool_types_are_refused_not_kept() {
    let (stack, _fake) = adversarial().await;
    let mut cases: Vec<(String, adversary::Request)> = Vec::new();
    for kind in ["function_v2", "Function", "FUNCTION", "web_search_20250305"] {
        let body = chat_tools_mapped(|t| t["type"] = Value::from(kind));
        cases.push((
            format!("chat type {kind}"),
            request("POST", "/v1/chat/completions", &body, Transport::Http1),
        ));
    }
    // `"type":"x","TYPE":"function"` and an escaped type, written as raw text.
    let raw = serde_json::to_string(&catalog("openai_request.json")).expect("text");
    for (label, from, to) in [
        (
            "TYPE twin",
            r#""type":"function""#,
            r#""type":"x","TYPE":"function""#,
        ),
        (
            "escaped type",
            r#""type":"function""#,
            r#""type":"\u0066unction_v2""#,
        ),
    ] {
        let text = raw.replace(from, to);
        let mut req = request(
            "POST",
            "/v1/chat/completions",
            &Value::Null,
            Transport::Http1,
        );
        req.body = text.into_bytes();
        cases.push((label.into(), req));
    }
    for kind in ["custom_v2", "Custom", "web_search_20250305"] {
        let mut body = catalog("anthropic_request.json");
        for tool in body["tools"].as_array_mut().expect("tools") {
            tool["type"] = Value::from(kind);
        }
        cases.push((
            format!("anthropic type {kind}"),
            request("POST", "/v1/messages", &body, Transport::Http1),
        ));
    }
    // Responses function_v2, Gemini FunctionDeclarations.
    let tools: Vec<Value> = catalog("openai_request.json")["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"].clone())
        .collect();
    let responses: Vec<Value> = tools
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f["type"] = Value::from("function_v2");
            f
        })
        .collect();
    cases.push((
        "responses function_v2".into(),
        request(
            "POST",
            "/v1/responses",
            &serde_json::json!({"input": "hi", "tools": responses}),
            Transport::Http1,
        ),
    ));
    cases.push((
        "gemini FunctionDeclarations".into(),
        request(
            "POST",
            "/v1beta/models/m:generateContent",
            &serde_json::json!({"contents": [], "tools": [{"FunctionDeclarations": tools}]}),
            Transport::Http1,
        ),
    ));
    for (label, req) in &cases {
        let (status, forwarded) = deliver(&stack, req).await;
        holds(label, req, status, forwarded);
        assert_eq!(
            (status, forwarded),
            (400, None),
            "{label}: refused, nothing forwarded"
        );
    }
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.rejected")
            .await
            .expect("stat") as usize,
        cases.len()
    );
}

/// 3. A body whose shape disagrees with its path, including via dot segments.
#[tokio::test]
async fn bodies_that_disagree_with_their_path_are_read_as_they_are_or_refused() {
    let (stack, _fake) = adversarial().await;
    let chat = catalog("openai_request.json");
    let anthropic = catalog("anthropic_request.json");
    let mut refused = 0;
    for (body, paths) in [
        (
            &chat,
            [
                "/v1/messages",
                "/v1beta/models/m:generateContent",
                "/x/../../messages",
                "/v1/responses",
            ],
        ),
        (
            &anthropic,
            [
                "/v1/chat/completions",
                "/v1beta/models/m:generateContent",
                "/v1/responses",
                "/a/./b/../v1/chat/completions",
            ],
        ),
    ] {
        for path in paths {
            let req = request("POST", path, body, Transport::Http1);
            let (status, forwarded) = deliver(&stack, &req).await;
            holds(path, &req, status, forwarded);
            if forwarded.is_none() {
                refused += 1;
            }
        }
    }
    assert!(
        refused > 0,
        "cross-format bodies are refused where they cannot be read"
    );
}

/// 4. Decoys on an unrecognised path: another format's keys, a first tool of
/// another format.
#[tokio::test]
async fn decoys_on_unrecognised_paths_do_not_steer_the_reading() {
    let (stack, _fake) = adversarial().await;
    let mut chat = catalog("openai_request.json");
    chat["contents"] = serde_json::json!([]);
    let mut mixed = catalog("openai_request.json");
    mixed["tools"]
        .as_array_mut()
        .expect("tools")
        .insert(0, serde_json::json!({"name": "decoy", "input_schema": {}}));
    let mut gemini_first = catalog("openai_request.json");
    gemini_first["tools"].as_array_mut().expect("tools").insert(
        0,
        serde_json::json!({"functionDeclarations": [{"name": "d"}]}),
    );
    for (label, path, body) in [
        (
            "percent-encoded path + contents",
            "/v1/chat/%63ompletions",
            &chat,
        ),
        ("unknown path + contents", "/proxy/llm", &chat),
        ("anthropic-shaped first tool", "/proxy/llm", &mixed),
        ("gemini-shaped first tool", "/proxy/llm", &gemini_first),
    ] {
        let req = request("POST", path, body, Transport::Http1);
        let (status, forwarded) = deliver(&stack, &req).await;
        holds(label, &req, status, forwarded);
    }
}

/// 5. The legacy `functions` array on every format's path.
#[tokio::test]
async fn legacy_functions_are_read_on_every_path() {
    let (stack, _fake) = adversarial().await;
    let functions: Vec<Value> = catalog("openai_request.json")["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"].clone())
        .collect();
    for (path, mut body) in [
        (
            "/v1/responses",
            serde_json::json!({"input": "book an appointment"}),
        ),
        (
            "/v1/messages",
            serde_json::json!({"system": "s", "messages": [{"role": "user", "content": "book"}]}),
        ),
        (
            "/v1beta/models/m:generateContent",
            serde_json::json!({"contents": [{"parts": [{"text": "book"}]}]}),
        ),
    ] {
        body["functions"] = Value::from(functions.clone());
        let req = request("POST", path, &body, Transport::Http1);
        let (status, forwarded) = deliver(&stack, &req).await;
        assert_eq!(status, 200, "{path}");
        let n = forwarded.expect("forwarded");
        assert!(
            (1..=12).contains(&n),
            "{path}: {n} legacy functions forwarded"
        );
    }
}

/// 6. Methods other than POST that carry a body, with or without an override.
#[tokio::test]
async fn every_method_with_a_body_is_read() {
    let (stack, _fake) = adversarial().await;
    let body = catalog("openai_request.json");
    for method in ["PUT", "PATCH", "GET", "DELETE", "POST"] {
        for override_header in [false, true] {
            let mut req = request(method, "/v1/chat/completions", &body, Transport::Http1);
            if override_header {
                req.headers.push(("x-http-method-override", "POST".into()));
            }
            let (status, forwarded) = deliver(&stack, &req).await;
            assert_eq!(status, 200, "{method}");
            let n = forwarded.expect("forwarded");
            assert!((1..=12).contains(&n), "{method}: {n} tools forwarded");
        }
    }
}

/// Definitions hidden outside `tools` (nested in other keys) count too.
#[tokio::test]
async fn definitions_hidden_elsewhere_in_the_body_are_counted() {
    let (stack, _fake) = adversarial().await;
    let mut body = catalog("openai_request.json");
    let functions: Vec<Value> = body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"].clone())
        .collect();
    body["metadata"] = serde_json::json!({"registry": functions});
    let req = request("POST", "/v1/chat/completions", &body, Transport::Http1);
    let (status, forwarded) = deliver(&stack, &req).await;
    assert_eq!((status, forwarded), (400, None));
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.over_budget")
            .await
            .expect("stat"),
        1
    );
    assert!(
        stack.envoy.log_text().contains("reason=over-budget"),
        "the refusal is logged with its reason"
    );
}

// === generated ===

fn cases(default: usize) -> usize {
    std::env::var("KEYHOLE_INVARIANT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("KEYHOLE_INVARIANT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x006b_6579_686f_6c65)
}

/// Generated requests through Envoy: every method, transport and phase;
/// each also delivered alone before and after the filter remembers its
/// registry, which must end the same way.
#[tokio::test]
async fn generated_requests_never_reach_the_llm_over_budget() {
    let (stack, _fake) = adversarial().await;
    let mut rng = Rng::new(seed());
    let (mut refused, mut forwarded_n, mut max_forwarded, mut clean) =
        (0usize, 0usize, 0usize, 0usize);
    let total = cases(300);
    for i in 0..total {
        let req = adversary::generate(&mut rng);
        // Under a session of its own (a session's last audited set bounds its
        // later recovery turns, so sessions are kept apart here), before and
        // after the filter's memo holds this request's tools arrays: a
        // recalled reading must end as the first reading did.
        let alone = |tag: &str| {
            let mut r = req.clone();
            for (k, v) in r.headers.iter_mut() {
                if *k == "x-keyhole-session" {
                    *v = format!("{v}-{tag}-{i}");
                }
            }
            r
        };
        let read = deliver(&stack, &alone("read")).await;
        holds(
            &format!(
                "case {i} read ({} {} {:?})",
                req.method, req.path, req.transport
            ),
            &req,
            read.0,
            read.1,
        );
        let (status, forwarded) = deliver(&stack, &req).await;
        holds(
            &format!("case {i} ({} {} {:?})", req.method, req.path, req.transport),
            &req,
            status,
            forwarded,
        );
        let recalled = deliver(&stack, &alone("recalled")).await;
        holds(
            &format!(
                "case {i} recalled ({} {} {:?})",
                req.method, req.path, req.transport
            ),
            &req,
            recalled.0,
            recalled.1,
        );
        assert_eq!(
            recalled, read,
            "case {i}: the recalled reading ended differently ({})",
            req.path
        );
        match forwarded {
            Some(n) => {
                forwarded_n += 1;
                max_forwarded = max_forwarded.max(n);
            }
            None => refused += 1,
        }
        if req.clean {
            clean += 1;
            assert!(
                status < 400 && forwarded.is_some(),
                "case {i}: a clean request was refused ({status})"
            );
        }
    }
    let recalled = stack
        .envoy
        .stat("wasmcustom.keyhole.registry_recalled")
        .await
        .unwrap_or(0);
    println!(
        "registry invariant through Envoy: generated={total} refused={refused} forwarded={forwarded_n} \
         clean={clean} max_tool_definitions_forwarded={max_forwarded} registries_recalled={recalled}"
    );
    assert!(
        recalled as usize > forwarded_n,
        "the filter's memo was exercised ({recalled} recalled)"
    );
    assert!(
        refused > total / 10 && forwarded_n > total / 10,
        "the generator exercises both outcomes"
    );
}

/// The same generator against the filter's own decision code, without
/// Envoy: many more cases, the adversarial control answer, every phase.
#[test]
fn generated_requests_never_leave_core_over_budget() {
    let builtins = BuiltinTools::default();
    let mut memo = Memo::new();
    let mut rng = Rng::new(seed() ^ 0x5eed);
    let (mut refused, mut forwarded, mut max_forwarded) = (0usize, 0usize, 0usize);
    let total = cases(10_000);
    for i in 0..total {
        let req = adversary::generate(&mut rng);
        let phase = req
            .headers
            .iter()
            .find(|(k, _)| *k == "x-keyhole-phase")
            .and_then(|(_, v)| v.parse::<Phase>().ok());
        let phase = phase.unwrap_or_default();
        let leave =
            |memo: &mut Memo| match surface::read(&req.path, &req.body, phase, &builtins, memo) {
                Read::Pass => Some(req.body.clone()),
                Read::Refuse(..) => None,
                Read::Resolve(parsed) => {
                    let everything = ResolveResponse {
                        tools: parsed
                            .tools
                            .iter()
                            .map(|t| SurfacedTool {
                                name: t.name.to_string(),
                                reason: Reason::Rag,
                                mutating: false,
                            })
                            .collect(),
                        source: Source::Retrieval,
                        turn: None,
                    };
                    match surface::finish(
                        &parsed,
                        &req.body,
                        phase,
                        Ok(&everything),
                        &[],
                        OnOutage::Reject,
                    ) {
                        Finished::Forward { body, .. } => Some(body),
                        Finished::Refuse(..) => None,
                    }
                }
            };
        // Read twice through the memo every request goes through: the second
        // reading recalls the tools arrays of the first (the first may recall
        // an earlier request's), and what leaves must not change.
        let leaving = leave(&mut memo);
        assert_eq!(
            leave(&mut memo),
            leaving,
            "case {i}: a recalled reading differs ({})",
            req.path
        );
        match leaving {
            Some(body) => {
                let n = adversary::tool_definitions(&body);
                assert!(
                    n <= phase.budget().max,
                    "case {i}: {n} definitions leave ({} {})",
                    req.method,
                    req.path
                );
                forwarded += 1;
                max_forwarded = max_forwarded.max(n);
            }
            None => {
                assert!(
                    !req.clean,
                    "case {i}: a clean request was refused ({})",
                    req.path
                );
                refused += 1;
            }
        }
    }
    println!(
        "registry invariant in core: generated={total} refused={refused} forwarded={forwarded} \
         max_tool_definitions_forwarded={max_forwarded} recalled_arrays={}",
        memo.hits()
    );
    assert!(
        memo.hits() as usize > forwarded / 2,
        "the memo was exercised"
    );
    assert!(refused > total / 10 && forwarded > total / 10);
}
