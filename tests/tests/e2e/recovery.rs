//! Recovery when retrieval misses, through the real Envoy, `.wasm` and
//! control: every surfaced set carries the tool-search control tool
//! (`keyhole_tool_search`) in the request's own format; when the history
//! shows the model called it, the next turn's set holds what control's
//! search found, with the reason `recovery` in the audit header and the
//! audit trail — and never more than the phase budget of tool definitions.

use keyhole_e2e::fake_control::{FakeControl, Fault};
use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{adversary, control, embedder, paths, Stack, StackOptions};
use serde_json::{json, Value};

const SEARCH: &str = "keyhole_tool_search";
/// A catalog tool a booking turn never surfaces.
const MISSED: &str = "util__units__convert";
const BOOKING: &str = "Book an appointment for Mrs. Krause next Tuesday with Dr. Weber.";
const QUERY: &str = "convert glucose from mg/dL to mmol/L";

/// One of the four formats: its path, its catalog-sized request, and how its
/// history holds a call of the control tool.
#[derive(Clone, Copy, Debug)]
enum Dialect {
    Chat,
    Responses,
    Anthropic,
    Gemini,
}

impl Dialect {
    const ALL: [Dialect; 4] = [
        Dialect::Chat,
        Dialect::Responses,
        Dialect::Anthropic,
        Dialect::Gemini,
    ];

    fn path(self) -> &'static str {
        match self {
            Dialect::Chat => "/v1/chat/completions",
            Dialect::Responses => "/v1/responses",
            Dialect::Anthropic => "/v1/messages",
            Dialect::Gemini => "/v1beta/models/gemma-3-27b-it:generateContent",
        }
    }

    /// The format's full-registry request.
    fn request(self) -> Value {
        let path = match self {
            Dialect::Chat => paths::catalog().join("openai_request.json"),
            Dialect::Anthropic => paths::catalog().join("anthropic_request.json"),
            Dialect::Responses => paths::repo().join("core/tests/fixtures/responses_request.json"),
            Dialect::Gemini => paths::repo().join("core/tests/fixtures/gemini_request.json"),
        };
        serde_json::from_slice(&std::fs::read(&path).expect("fixture")).expect("json")
    }

    /// The history key and its messages: the booking turn, then (`call`) the
    /// model's search call, then (`result`) the agent's error for it, then
    /// (`user`) a new user message.
    fn history(self, call: bool, result: bool, user: Option<&str>) -> (&'static str, Value) {
        let args = json!({"query": QUERY});
        let mut m = Vec::new();
        match self {
            Dialect::Chat => {
                m.push(json!({"role": "user", "content": BOOKING}));
                if call {
                    m.push(json!({"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": SEARCH, "arguments": args.to_string()}}]}));
                }
                if result {
                    m.push(json!({"role": "tool", "tool_call_id": "c1", "content": "error: unknown tool keyhole_tool_search"}));
                }
                m.extend(user.map(|u| json!({"role": "user", "content": u})));
                ("messages", Value::Array(m))
            }
            Dialect::Responses => {
                m.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": BOOKING}]}));
                if call {
                    m.push(json!({"type": "function_call", "call_id": "c1", "name": SEARCH, "arguments": args.to_string()}));
                }
                if result {
                    m.push(json!({"type": "function_call_output", "call_id": "c1", "output": ""}));
                }
                m.extend(user.map(|u| json!({"type": "message", "role": "user", "content": u})));
                ("input", Value::Array(m))
            }
            Dialect::Anthropic => {
                m.push(json!({"role": "user", "content": BOOKING}));
                if call {
                    m.push(json!({"role": "assistant", "content": [
                        {"type": "tool_use", "id": "t1", "name": SEARCH, "input": args}]}));
                }
                if result {
                    m.push(json!({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": "unknown tool"}]}));
                }
                m.extend(user.map(|u| json!({"role": "user", "content": u})));
                ("messages", Value::Array(m))
            }
            Dialect::Gemini => {
                m.push(json!({"role": "user", "parts": [{"text": BOOKING}]}));
                if call {
                    m.push(json!({"role": "model", "parts": [{"functionCall": {"name": SEARCH, "args": args}}]}));
                }
                if result {
                    m.push(json!({"role": "user", "parts": [
                        {"functionResponse": {"name": SEARCH, "response": {"error": "unknown tool"}}}]}));
                }
                m.extend(user.map(|u| json!({"role": "user", "parts": [{"text": u}]})));
                ("contents", Value::Array(m))
            }
        }
    }

    /// The full-registry request with this history.
    fn body(self, call: bool, result: bool, user: Option<&str>) -> Vec<u8> {
        let mut body = self.request();
        let (key, history) = self.history(call, result, user);
        body[key] = history;
        serde_json::to_vec(&body).expect("body")
    }

    /// The function names of a body as the upstream got it, read
    /// independently of keyhole's parser.
    fn names(self, body: &[u8]) -> Vec<String> {
        let v: Value = serde_json::from_slice(body).expect("forwarded json");
        let tools = v["tools"].as_array().cloned().unwrap_or_default();
        let name = |t: &Value| t["name"].as_str().map(str::to_owned);
        match self {
            Dialect::Chat => tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect(),
            Dialect::Responses | Dialect::Anthropic => tools.iter().filter_map(name).collect(),
            Dialect::Gemini => tools
                .iter()
                .flat_map(|t| {
                    t["functionDeclarations"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .filter_map(|d| name(&d))
                .collect(),
        }
    }
}

async fn send(stack: &Stack, path: &str, body: Vec<u8>, session: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", stack.envoy.llm_url()))
        .header("content-type", "application/json")
        .header("x-keyhole-session", session)
        .body(body)
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

/// The session's audit trail from control's socket.
async fn trail(stack: &Stack, session: &str) -> Vec<Value> {
    let answer = control::get(&stack.socket(), &format!("/v1/audit/{session}"))
        .await
        .expect("audit");
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str::<Value>(body)
        .expect("audit json")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The last body the LLM upstream received, checked against the registry
/// invariant by the test's own oracle: at most the planner budget of tool
/// definitions, the control tool counted.
fn forwarded(stack: &Stack) -> Vec<u8> {
    let body = stack.llm.seen().last().expect("forwarded").body.to_vec();
    let n = adversary::tool_definitions(&body);
    assert!(n <= 12, "{n} tool definitions reached the LLM");
    body
}

/// A stack with real control over the catalog (overlay), a local embedder,
/// and `off_surface: block`, so that a call of the control tool that were
/// taken for an off-surface call would be seen as a 502.
async fn stack() -> Stack {
    let embedder = embedder::start(0).await;
    let mut options = StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"off_surface":"block"}"#.into(),
        ..Default::default()
    };
    options.control_args.extend([
        "--embedder-url".into(),
        embedder,
        "--retrieval-timeout-ms".into(),
        "5000".into(),
    ]);
    Stack::start(options).await.expect("stack")
}

#[tokio::test]
async fn a_search_call_brings_the_missed_tool_into_the_next_turn_in_every_format() {
    let stack = stack().await;
    for dialect in Dialect::ALL {
        let session = format!("recovery-{dialect:?}");
        let path = dialect.path();
        let registry = dialect.names(&dialect.body(false, false, None));
        assert!(
            registry.len() >= 100 && registry.iter().any(|n| n == MISSED),
            "{dialect:?}: the fixture's registry"
        );

        // Turn 1: a booking; the set misses the converter, and carries the control tool.
        let resp = send(&stack, path, dialect.body(false, false, None), &session).await;
        assert_eq!(
            resp.status(),
            200,
            "{dialect:?}: {}",
            stack.envoy.log_tail()
        );
        assert_eq!(
            header(&resp, "x-keyhole-tool-search"),
            "offered",
            "{dialect:?}"
        );
        let first = dialect.names(&forwarded(&stack));
        assert!(first.iter().any(|n| n == SEARCH), "{dialect:?}: {first:?}");
        assert!(
            !first.iter().any(|n| n == MISSED),
            "{dialect:?}: retrieval must miss it for this test: {first:?}"
        );
        assert!(first.len() <= 12, "{dialect:?}: {}", first.len());

        // Turn 2: the model searched; the agent answered with an error, or
        // sent the call alone. Either way the converter is surfaced.
        for result in [true, false] {
            let resp = send(&stack, path, dialect.body(true, result, None), &session).await;
            assert_eq!(
                resp.status(),
                200,
                "{dialect:?}: {}",
                stack.envoy.log_tail()
            );
            let audit = header(&resp, "x-keyhole-tools");
            assert!(
                audit.contains(&format!("{MISSED}=recovery")),
                "{dialect:?} result={result}: {audit}"
            );
            assert!(
                !audit.contains(SEARCH),
                "the control tool is keyhole's, not an audited registry tool: {audit}"
            );
            let body = forwarded(&stack);
            let second = dialect.names(&body);
            assert!(
                second.iter().any(|n| n == MISSED),
                "{dialect:?}: {second:?}"
            );
            assert_eq!(
                second.iter().filter(|n| *n == SEARCH).count(),
                1,
                "{dialect:?}: {second:?}"
            );
            assert!(
                second.len() <= 12 && second.len() < registry.len(),
                "{dialect:?}: {}",
                second.len()
            );
            // The recovered tool is the client's own definition, byte for byte.
            let original = String::from_utf8(dialect.body(false, false, None)).expect("utf-8");
            let sent = String::from_utf8_lossy(&body);
            let v: Value = serde_json::from_slice(&body).expect("json");
            let kept = match dialect {
                Dialect::Chat => v["tools"]
                    .as_array()
                    .and_then(|t| t.iter().find(|t| t["function"]["name"] == MISSED))
                    .cloned(),
                Dialect::Gemini => None,
                _ => v["tools"]
                    .as_array()
                    .and_then(|t| t.iter().find(|t| t["name"] == MISSED))
                    .cloned(),
            };
            if let Some(kept) = kept {
                let raw = serde_json::to_string(&kept).expect("json");
                assert!(
                    original.contains(&raw) && sent.contains(&raw),
                    "{dialect:?}: not byte-identical"
                );
            }
        }

        // The audit trail: the query and what it found.
        let entries = trail(&stack, &session).await;
        let search = &entries.last().expect("entries")["search"];
        assert_eq!(search["query"], QUERY, "{dialect:?}: {entries:?}");
        assert_eq!(search["found"][0], MISSED, "{dialect:?}: {search}");
        assert!(search["surfaced"]
            .as_array()
            .expect("surfaced")
            .iter()
            .any(|n| n == MISSED));
        assert!(entries[0]["search"].is_null(), "turn 1 searched nothing");

        // The user speaks again: that search is over.
        let resp = send(
            &stack,
            path,
            dialect.body(true, true, Some("Thanks. Now show her appointments.")),
            &session,
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert!(
            !header(&resp, "x-keyhole-tools").contains("=recovery"),
            "{dialect:?}"
        );
        assert!(trail(&stack, &session).await.last().expect("entries")["search"].is_null());
        stack.llm.clear();
    }
    let log = stack.envoy.log_text();
    assert!(
        log.contains("tool_search=query recovered="),
        "the per-turn log line says so"
    );
    assert!(log.contains("tool_search=offered recovered=0"));
    assert!(
        !log.contains(QUERY),
        "the query is never logged by the filter"
    );
}

#[tokio::test]
async fn an_answer_calling_the_control_tool_is_announced_not_flagged() {
    let stack = stack().await;
    let path = Dialect::Chat.path();
    let call = |name: &str| {
        let arguments = json!({"query": QUERY}).to_string();
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}}]})
        .to_string()
    };
    stack.llm.set(path, Canned::json(call(SEARCH)));
    let resp = send(
        &stack,
        path,
        Dialect::Chat.body(false, false, None),
        "answer",
    )
    .await;
    assert_eq!(
        resp.status(),
        200,
        "off_surface: block does not block the control tool"
    );
    assert_eq!(header(&resp, "x-keyhole-tool-search"), "called");
    assert!(resp.headers().get("x-keyhole-off-surface").is_none());
    let answer: Value = resp.json().await.expect("the answer, untouched");
    assert_eq!(
        answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        SEARCH
    );
    assert!(stack
        .envoy
        .log_text()
        .contains("keyhole.tool-search-called"));

    // A tool the model was not shown is still blocked.
    stack
        .llm
        .set(path, Canned::json(call("fhir__bundle__export_everything")));
    let resp = send(
        &stack,
        path,
        Dialect::Chat.body(false, false, None),
        "answer",
    )
    .await;
    assert_eq!(resp.status(), 502);
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.off_surface_calls")
            .await
            .unwrap(),
        1
    );

    // Streamed: the headers are gone before the call appears; it is logged,
    // never counted off-surface.
    let events = format!(
        "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{{\"name\":\"{SEARCH}\",\"arguments\":\"\"}}}}]}}}}]}}\n\ndata: [DONE]\n\n"
    );
    let stream = Canned {
        stream_delay: Some(std::time::Duration::from_millis(50)),
        ..Canned::json(events.clone())
    };
    stack.llm.set(path, stream);
    let resp = send(
        &stack,
        path,
        Dialect::Chat.body(false, false, None),
        "answer",
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-keyhole-tool-search"), "offered");
    assert_eq!(
        resp.text().await.expect("stream"),
        events,
        "the stream passes untouched"
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.off_surface_calls")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        stack
            .envoy
            .log_text()
            .matches("keyhole.tool-search-called")
            .count(),
        2
    );
}

#[tokio::test]
async fn tool_search_off_adds_nothing_and_reads_no_calls() {
    let embedder = embedder::start(0).await;
    let mut options = StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"tool_search":"off"}"#.into(),
        ..Default::default()
    };
    options
        .control_args
        .extend(["--embedder-url".into(), embedder]);
    let stack = Stack::start(options).await.expect("stack");
    let path = Dialect::Chat.path();
    let resp = send(&stack, path, Dialect::Chat.body(true, true, None), "off").await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("x-keyhole-tool-search").is_none());
    assert!(!header(&resp, "x-keyhole-tools").contains("=recovery"));
    let names = Dialect::Chat.names(&forwarded(&stack));
    assert!(
        !names.iter().any(|n| n == SEARCH) && !names.iter().any(|n| n == MISSED),
        "{names:?}"
    );
    assert!(trail(&stack, "off").await[0]["search"].is_null());
}

#[tokio::test]
async fn a_control_that_surfaces_everything_still_leaves_the_budget_with_the_control_tool() {
    // The bound is the filter's: a control answering every tool, on a turn
    // with a search, gets eleven registry tools and the control tool through.
    let stack = Stack::start(StackOptions {
        control: false,
        ..Default::default()
    })
    .await
    .expect("stack");
    let _fake = FakeControl::start(&stack.socket(), Fault::Everything)
        .await
        .expect("fake control");
    for dialect in Dialect::ALL {
        for phase in [
            "planner",
            "agent-call",
            "recovery",
            "tool-input",
            "formatter",
        ] {
            stack.llm.clear();
            let resp = reqwest::Client::new()
                .post(format!("{}{}", stack.envoy.llm_url(), dialect.path()))
                .header("content-type", "application/json")
                .header("x-keyhole-session", "everything")
                .header("x-keyhole-phase", phase)
                .body(dialect.body(true, true, None))
                .send()
                .await
                .expect("send");
            assert_eq!(
                resp.status(),
                200,
                "{dialect:?} {phase}: {}",
                stack.envoy.log_tail()
            );
            let body = forwarded(&stack);
            let budget = match phase {
                "tool-input" => 1,
                "agent-call" => 8,
                _ => 12,
            };
            let names = dialect.names(&body);
            let n = adversary::tool_definitions(&body);
            if phase == "recovery" {
                // The prior set this worker knows plus at most three new:
                // fewer than the budget when it knows one.
                assert!(n <= budget, "{dialect:?} {phase}: {names:?}");
            } else {
                assert_eq!(n, budget, "{dialect:?} {phase}: {names:?}");
            }
            let offered = matches!(phase, "planner" | "agent-call" | "recovery");
            assert_eq!(
                names.iter().any(|n| n == SEARCH),
                offered,
                "{dialect:?} {phase}"
            );
        }
    }
}
