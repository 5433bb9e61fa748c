//! The model never holds a raw id, on the LLM listener too, end to end (the
//! real `.wasm` in a real Envoy, the real control binary, the echo upstream
//! recording what the model would get).
//!
//! Requests of all four formats carry raw ids from a ground-truth list in
//! every place a model reads — system prompts, user turns, content parts, tool
//! calls, tool results as JSON strings and as objects — written as UUIDs
//! (lower and upper case), FHIR ids, FHIR references, id-bearing URLs and
//! percent-encoded references. What the upstream received is checked by the
//! ground truth and an independent UUID regex, never by keyhole code. An alias
//! minted here decodes on the HMS listener to the right id; aliases the model
//! got from an HMS response pass unchanged; streaming requests, a 100-message
//! history and an outage of control are covered.

use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{Stack, StackOptions};
use regex::Regex;
use serde_json::{json, Value};

const SESSION_HEADER: &str = "x-keyhole-session";

/// A small deterministic generator (the ids differ per case, never per run).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }

    fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a & 0xffff_ffff,
            (a >> 32) & 0xffff,
            b & 0xfff,
            ((b >> 12) & 0x3fff) | 0x8000,
            (b >> 28) & 0xffff_ffff_ffff
        )
    }

    fn fhir(&mut self, prefix: &str) -> String {
        format!("{prefix}-{:06}", 100_000 + self.next() % 900_000)
    }
}

/// One raw id and how it is written into a request.
struct Id {
    raw: String,
    written: String,
}

/// `n` ids in every written form, cycling.
fn ids(g: &mut Gen, n: usize) -> Vec<Id> {
    (0..n)
        .map(|i| match i % 6 {
            0 => {
                let u = g.uuid();
                Id {
                    written: u.clone(),
                    raw: u,
                }
            }
            1 => {
                let u = g.uuid();
                Id {
                    written: u.to_uppercase(),
                    raw: u,
                }
            }
            2 => {
                let u = g.uuid();
                Id {
                    written: format!("https://hms.example.org/api/v2/patients/{u}?view=full"),
                    raw: u,
                }
            }
            3 => {
                let f = g.fhir("pat");
                Id {
                    written: format!("Patient/{f}"),
                    raw: f,
                }
            }
            4 => {
                let f = g.fhir("enc");
                Id {
                    written: format!(
                        "https://hms.example.org/fhir/Observation?subject=Encounter%2F{f}&_count=5"
                    ),
                    raw: f,
                }
            }
            _ => {
                let f = g.fhir("prac");
                Id {
                    written: format!("Practitioner/{f}"),
                    raw: f,
                }
            }
        })
        .collect()
}

fn prose(ids: &[Id]) -> String {
    let mut s = "Noted on 2025-03-14 (LOINC 2345-7): ".to_owned();
    for (i, id) in ids.iter().enumerate() {
        s.push_str(&format!("see {} ({i}); ", id.written));
    }
    s.push_str("continue.");
    s
}

/// Tool definitions per format, with an id in a description: never touched.
fn tools(format: usize) -> Value {
    let params = json!({"type":"object","properties":{"patientId":{"type":"string","description":"e.g. 039b70b8-92f7-44b7-9c91-4e3f0e900c71"}}});
    match format {
        0 => {
            json!([{"type":"function","function":{"name":"patient__get","description":"Reads a patient","parameters":params}}])
        }
        1 => {
            json!([{"type":"function","name":"patient__get","description":"Reads a patient","parameters":params}])
        }
        2 => json!([{"name":"patient__get","description":"Reads a patient","input_schema":params}]),
        _ => {
            json!([{"functionDeclarations":[{"name":"patient__get","description":"Reads a patient","parameters":params}]}])
        }
    }
}

const PATHS: [&str; 4] = [
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1beta/models/gemini-2.0-flash:generateContent",
];
const FORMATS: [&str; 4] = ["openai-chat", "openai-responses", "anthropic", "gemini"];

/// A request of `format` carrying `ids` in every place a model reads; `open`
/// stands in the system prompt as "The open patient is {open}.".
fn request(format: usize, open: &str, ids: &[Id], rec: (u64, &str), stream: bool) -> Value {
    let n = ids.len();
    let (a, b, c) = (&ids[..n / 3], &ids[n / 3..2 * n / 3], &ids[2 * n / 3..]);
    let system = format!("The open patient is {open}. {}", prose(a));
    let result =
        json!({"id": rec.0, "patientId": rec.1, "status": "in-progress", "note": prose(c)});
    let result_text = result.to_string();
    let args = json!({"patientId": rec.1}).to_string();
    let mut v = match format {
        0 => json!({
            "model": "gpt-4o-2024-08-06",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": [{"type": "text", "text": prose(b)}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc123", "type": "function",
                    "function": {"name": "patient__get", "arguments": args}}]},
                {"role": "tool", "tool_call_id": "call_abc123", "content": result_text},
            ],
            "tools": tools(format),
            "tool_choice": {"type": "function", "function": {"name": "patient__get"}},
        }),
        1 => json!({
            "model": "gpt-4o-2024-08-06",
            "instructions": system,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": prose(b)}]},
                {"type": "function_call", "call_id": "call_1", "name": "patient__get", "arguments": args},
                {"type": "function_call_output", "call_id": "call_1", "output": result_text},
            ],
            "tools": tools(format),
        }),
        2 => json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 512,
            "system": [{"type": "text", "text": system}],
            "messages": [
                {"role": "user", "content": prose(b)},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01A", "name": "patient__get", "input": {"patientId": rec.1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": result_text}]},
            ],
            "tools": tools(format),
        }),
        _ => json!({
            "systemInstruction": {"parts": [{"text": system}]},
            "contents": [
                {"role": "user", "parts": [{"text": prose(b)}]},
                {"role": "model", "parts": [{"functionCall": {"name": "patient__get", "args": {"patientId": rec.1}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "patient__get", "response": result}}]},
            ],
            "tools": tools(format),
        }),
    };
    if stream && format < 3 {
        v["stream"] = json!(true);
    }
    v
}

/// Every string and number outside the top-level tools, decoded.
fn readable(v: &Value, top: bool, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|i| readable(i, false, out)),
        Value::Object(map) => {
            for (k, v) in map {
                if !(top && k == "tools") {
                    readable(v, false, out);
                }
            }
        }
        _ => {}
    }
}

/// Checks what the upstream got: no ground-truth id in any form, nothing
/// UUID-shaped outside the tools, the tools byte-identical. Returns the
/// forwarded body as text.
fn assert_no_raw_id(what: &str, sent: &[u8], got: &[u8], raw: &[&str]) -> String {
    let uuid = Regex::new(r"(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
        .expect("regex");
    let after: Value = serde_json::from_slice(got)
        .unwrap_or_else(|e| panic!("{what}: forwarded body is not JSON: {e}"));
    let before: Value = serde_json::from_slice(sent).expect("json");
    let mut texts = Vec::new();
    readable(&after, true, &mut texts);
    for t in &texts {
        let lower = t.to_lowercase();
        for r in raw {
            assert!(
                !lower.contains(&r.to_lowercase()),
                "{what}: raw id {r} reached the model in {t:?}"
            );
        }
        assert!(
            !uuid.is_match(t),
            "{what}: UUID-shaped text reached the model: {t:?}"
        );
        assert!(
            !lower.contains("%2d") || !uuid.is_match(&t.replace("%2D", "-").replace("%2d", "-")),
            "{what}: {t:?}"
        );
    }
    // Byte-identical: every forwarded tool is one the client sent, as sent
    // (the tool surface may keep fewer).
    // The client's tools: keyhole adds its tool-search control tool (recovery.rs).
    let (sent_tools, got_tools) = (
        raw_tools(sent),
        keyhole_e2e::bodies::client_tools(raw_tools(got)),
    );
    for t in &got_tools {
        assert!(
            sent_tools.contains(t),
            "{what}: tool definition not byte-identical: {t}"
        );
    }
    if before.get("tool_choice").is_some() {
        assert_eq!(
            got_tools, sent_tools,
            "{what}: the forced tool is forwarded"
        );
    }
    String::from_utf8_lossy(got).into_owned()
}

/// Raw bytes of each element of the top-level `tools`, read independently.
fn raw_tools(body: &[u8]) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct B<'a> {
        #[serde(borrow, default)]
        tools: Vec<&'a serde_json::value::RawValue>,
    }
    let b: B<'_> = serde_json::from_slice(body).expect("json body");
    b.tools.iter().map(|t| t.get().to_owned()).collect()
}

async fn post(stack: &Stack, path: &str, body: &[u8], session: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", stack.envoy.llm_url()))
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(s) = session {
        req = req.header(SESSION_HEADER, s);
    }
    req.send().await.expect("request through envoy")
}

fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The ids of a generated request, as raw strings.
fn raw_of<'a>(ids: &'a [Id], open: &'a str, rec: &'a str) -> Vec<&'a str> {
    ids.iter()
        .map(|i| i.raw.as_str())
        .chain([open, rec])
        .collect()
}

/// `GET path` through the HMS listener in `session`.
async fn hms_get(stack: &Stack, session: &str, path: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{path}", stack.envoy.hms_url()))
        .header(SESSION_HEADER, session)
        .send()
        .await
        .expect("hms request")
}

/// Sends through the HMS listener with `alias` in the path; returns the path
/// the HMS upstream received.
async fn hms_path_for(stack: &Stack, session: &str, alias: &str) -> String {
    stack.hms.clear();
    stack.hms.set(
        &format!("/api/v2/patients/{alias}"),
        Canned::json(b"{}".to_vec()),
    );
    let resp = hms_get(stack, session, &format!("/api/v2/patients/{alias}")).await;
    let status = resp.status().as_u16();
    let seen = stack.hms.seen();
    assert_eq!(
        seen.len(),
        1,
        "status {status}: the decoded request reached HMS once"
    );
    seen[0].uri.clone()
}

#[tokio::test]
async fn every_format_reaches_the_model_with_aliases_only_and_the_aliases_decode_on_hms() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let mut g = Gen(20_261_130);
    let mut total = 0u64;
    let open_patient = Regex::new(r"The open patient is ([A-Za-z0-9-]+)\.").expect("regex");
    for format in 0..4 {
        for stream in [false, true] {
            let what = format!(
                "{}{}",
                FORMATS[format],
                if stream { " (stream)" } else { "" }
            );
            let session = format!("s-llm-{format}-{stream}");
            let open = g.uuid();
            let ids = ids(&mut g, 12);
            let rec = (100_000 + g.next() % 900_000_000, g.uuid());
            let body = serde_json::to_vec(&request(format, &open, &ids, (rec.0, &rec.1), stream))
                .expect("json");
            stack.llm.clear();
            let resp = post(&stack, PATHS[format], &body, Some(&session)).await;
            assert_eq!(resp.status(), 200, "{what}: {}", stack.envoy.log_tail());
            let count: u64 = header(&resp, "x-keyhole-ids-aliased")
                .and_then(|v| v.parse().ok())
                .expect("audit header");
            assert!(count >= ids.len() as u64, "{what}: {count} ids aliased");
            total += count;
            let seen = stack.llm.seen();
            assert_eq!(seen.len(), 1, "{what}");
            let rec_number = rec.0.to_string();
            let mut raw = raw_of(&ids, &open, &rec.1);
            raw.push(&rec_number);
            let got = assert_no_raw_id(&what, &body, &seen[0].body, &raw);
            assert!(
                got.contains("2025-03-14") && got.contains("LOINC 2345-7"),
                "{what}: look-alikes lost"
            );
            // The open patient's alias decodes on the HMS listener to its UUID.
            let alias = open_patient
                .captures(&got)
                .map(|c| c[1].to_owned())
                .unwrap_or_else(|| panic!("{what}: no alias in {got}"));
            let uri = hms_path_for(&stack, &session, &alias).await;
            assert_eq!(
                uri,
                format!("/api/v2/patients/{open}"),
                "{what}: {alias} decodes to the open patient"
            );
        }
    }
    assert!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.llm.ids_aliased")
            .await
            .unwrap()
            >= total
    );
    println!(
        "llm_aliases: {total} id occurrences aliased across the four formats (plain and streaming)"
    );
    assert!(!stack.envoy.log_text().contains("panicked"));
}

#[tokio::test]
async fn aliases_the_model_holds_pass_unchanged_and_hms_ids_learned_before_are_replaced() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let session = "s-held";
    let uuid = "5b0c3a7e-1f2d-4c5b-8a9e-0d1c2b3a4f5e";
    let detail = format!(
        r#"{{"data":{{"id":"{uuid}","fhirId":"pat-000777","ward":{{"id":"ward-101","name":"Ward 7b"}}}}}}"#
    );
    stack
        .hms
        .set("/api/v2/patients/detail", Canned::json(detail.into_bytes()));
    let resp = hms_get(&stack, session, "/api/v2/patients/detail").await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.expect("json");
    let alias = v
        .pointer("/data/id")
        .and_then(Value::as_str)
        .expect("alias")
        .to_owned();
    let ward = v
        .pointer("/data/ward/id")
        .and_then(Value::as_str)
        .expect("ward alias")
        .to_owned();
    assert_ne!(ward, "ward-101", "an alias-shaped HMS id is aliased");
    // History: the model's own tool call and words carry the aliases; the
    // agent's note carries the raw ids (the UUID, and the alias-shaped ward id).
    let body = json!({
        "model": "gpt-4o-2024-08-06",
        "messages": [
            {"role": "system", "content": format!("Open patient {uuid}, ward ward-101.")},
            {"role": "assistant", "content": format!("I will read {alias} on {ward}."), "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "patient__get", "arguments": json!({"patientId": alias, "wardId": ward}).to_string()}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json!({"id": alias, "fhirId": "pat-000777"}).to_string()},
            {"role": "user", "content": format!("And {alias}? See Patient/pat-000777.")},
        ],
        "tools": tools(0),
        "tool_choice": {"type": "function", "function": {"name": "patient__get"}},
    });
    let body = serde_json::to_vec(&body).expect("json");
    stack.llm.clear();
    let resp = post(&stack, PATHS[0], &body, Some(session)).await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    let got = assert_no_raw_id(
        "held",
        &body,
        &stack.llm.seen()[0].body,
        &[uuid, "pat-000777", "ward-101"],
    );
    let after: Value = serde_json::from_str(&got).expect("json");
    assert_eq!(
        after["messages"][0]["content"],
        format!("Open patient {alias}, ward {ward}."),
        "learned ids replaced"
    );
    assert_eq!(
        after["messages"][1]["content"],
        format!("I will read {alias} on {ward}."),
        "the model's words unchanged"
    );
    let args: Value = serde_json::from_str(
        after["messages"][1]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        args,
        json!({"patientId": alias, "wardId": ward}),
        "the model's arguments unchanged"
    );
    assert_eq!(
        after["messages"][3]["content"],
        format!("And {alias}? See Patient/{alias}.")
    );
    // Nothing new was minted for the held aliases: they still decode to the HMS ids.
    assert_eq!(
        hms_path_for(&stack, session, &alias).await,
        format!("/api/v2/patients/{uuid}")
    );
}

#[tokio::test]
async fn a_long_history_is_aliased_whole() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let mut g = Gen(7);
    let mut raw = Vec::new();
    let mut messages = vec![json!({"role": "system", "content": "You are a clinic assistant."})];
    for i in 0..100 {
        let ids = ids(&mut g, 3);
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": prose(&ids)}));
        raw.extend(ids.into_iter().map(|i| i.raw));
    }
    let body =
        serde_json::to_vec(&json!({"model": "gpt-4o", "messages": messages, "tools": tools(0)}))
            .expect("json");
    let resp = post(&stack, PATHS[0], &body, Some("s-long")).await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    let count: usize = header(&resp, "x-keyhole-ids-aliased")
        .and_then(|v| v.parse().ok())
        .expect("audit header");
    assert!(count >= 300, "{count}");
    let raw: Vec<&str> = raw.iter().map(String::as_str).collect();
    assert_no_raw_id("100 messages", &body, &stack.llm.seen()[0].body, &raw);
    println!("llm_aliases: {count} id occurrences aliased in a 100-message history");
}

#[tokio::test]
async fn without_a_session_ids_are_refused_and_a_body_without_ids_passes() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let body =
        br#"{"messages":[{"role":"user","content":"Open 039b70b8-92f7-44b7-9c91-4e3f0e900c71"}]}"#;
    let resp = post(&stack, PATHS[0], body, None).await;
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.expect("json error");
    assert_eq!(err["error"]["type"], "keyhole_invalid_request");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains(SESSION_HEADER),
        "{err}"
    );
    assert!(!err.to_string().contains("039b70b8"), "{err}");
    assert!(stack.llm.seen().is_empty(), "nothing forwarded");
    let clean = br#"{"messages":[{"role":"user","content":"book an appointment"}]}"#;
    let resp = post(&stack, PATHS[0], clean, None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        stack.llm.seen()[0].body.as_ref(),
        clean.as_slice(),
        "passed as sent"
    );
    // Not JSON: refused, not forwarded.
    let resp = post(
        &stack,
        PATHS[0],
        b"open 039b70b8-92f7-44b7-9c91-4e3f0e900c71",
        Some("s"),
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(stack.llm.seen().len(), 1);
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.llm.alias_refused.no_session")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.llm.alias_refused.unreadable")
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn with_control_down_nothing_with_a_session_is_forwarded() {
    let stack = Stack::start(StackOptions {
        control: false,
        llm_filter_config: r#"{"mode":"llm","timeout_ms":2000,"aliases":"on","on_outage":"strip"}"#
            .into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let mut g = Gen(99);
    let ids = ids(&mut g, 6);
    let body = serde_json::to_vec(&request(0, &g.uuid(), &ids, (1234567, &g.uuid()), false))
        .expect("json");
    let resp = post(&stack, PATHS[0], &body, Some("s-down")).await;
    assert_eq!(resp.status(), 503);
    let err: Value = resp.json().await.expect("json error");
    assert_eq!(err["error"]["type"], "keyhole_unavailable");
    // With a session, control is asked even without ids (its known ids).
    let resp = post(
        &stack,
        PATHS[0],
        br#"{"messages":[{"role":"user","content":"hello"}]}"#,
        Some("s-down"),
    )
    .await;
    assert_eq!(resp.status(), 503);
    assert!(stack.llm.seen().is_empty(), "the upstream got no request");
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.llm.alias_refused.control")
            .await
            .unwrap(),
        2
    );
    // Off: the tool surface's own outage rule applies (strip), ids as sent.
    let off = Stack::start(StackOptions {
        control: false,
        llm_filter_config:
            r#"{"mode":"llm","timeout_ms":2000,"aliases":"off","on_outage":"strip"}"#.into(),
        ..Default::default()
    })
    .await
    .expect("stack");
    let resp = post(&off, PATHS[0], &body, Some("s-down")).await;
    assert_eq!(resp.status(), 200);
    assert!(String::from_utf8_lossy(&off.llm.seen()[0].body).contains(&ids[0].raw));
}

#[tokio::test]
async fn the_catalog_request_leaves_with_its_practitioner_aliased_and_nothing_else_changed() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let original =
        std::fs::read(keyhole_e2e::paths::catalog().join("openai_request.json")).expect("catalog");
    let uuid = Regex::new(r"(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
        .expect("regex");
    let text = String::from_utf8_lossy(&original).into_owned();
    let practitioner = uuid
        .find(&text)
        .expect("the catalog request names a UUID")
        .as_str()
        .to_owned();
    let resp = post(&stack, PATHS[0], &original, Some("s-catalog")).await;
    assert_eq!(resp.status(), 200, "{}", stack.envoy.log_tail());
    assert_eq!(header(&resp, "x-keyhole-ids-aliased").as_deref(), Some("1"));
    let got = String::from_utf8_lossy(&stack.llm.seen()[0].body).into_owned();
    let mut before: Value = serde_json::from_str(&text).expect("json");
    let mut after: Value = serde_json::from_str(&got).expect("json");
    before.as_object_mut().expect("object").remove("tools");
    after.as_object_mut().expect("object").remove("tools");
    let after_text = after.to_string();
    assert!(!uuid.is_match(&after_text), "a UUID reached the model");
    // Its alias, put back, gives the request as sent.
    let alias = Regex::new(r"practitionerId ([A-Za-z0-9-]+)")
        .expect("regex")
        .captures(&after_text)
        .map(|c| c[1].to_owned())
        .expect("the practitioner's alias");
    let restored: Value =
        serde_json::from_str(&after_text.replace(&alias, &practitioner)).expect("json");
    assert_eq!(restored, before, "only the id changed");
    assert_eq!(
        hms_path_for(&stack, "s-catalog", &alias).await,
        format!("/api/v2/patients/{practitioner}")
    );
}

#[tokio::test]
async fn ids_control_cannot_alias_refuse_the_request() {
    let stack = Stack::start(StackOptions::default()).await.expect("stack");
    let session = "s-conflict";
    let uuid = "6c1d4b8f-2a3e-4d6c-9b0f-1e2d3c4b5a6f";
    stack.hms.set(
        "/api/v2/patients/detail",
        Canned::json(format!(r#"{{"data":{{"id":"{uuid}","fhirId":"pat-000321"}}}}"#).into_bytes()),
    );
    let resp = hms_get(&stack, session, "/api/v2/patients/detail").await;
    assert_eq!(resp.status(), 200);
    // A tool result the agent built says the same record has another FHIR id.
    let result = json!({"id": uuid, "fhirId": "pat-000999"}).to_string();
    let body = serde_json::to_vec(&json!({"messages": [
        {"role": "user", "content": "read it"},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]}))
    .expect("json");
    let resp = post(&stack, PATHS[0], &body, Some(session)).await;
    assert_eq!(resp.status(), 422);
    let err: Value = resp.json().await.expect("json error");
    assert_eq!(err["error"]["type"], "keyhole_unaliasable_request");
    assert!(
        !err.to_string().contains(uuid) && !err.to_string().contains("pat-000"),
        "{err}"
    );
    assert!(stack.llm.seen().is_empty(), "nothing forwarded");
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.llm.alias_refused.conflict")
            .await
            .unwrap(),
        1
    );
}

/// A private Redis for one test, stopped (by its PID) when dropped.
struct PrivateRedis {
    child: std::process::Child,
    url: String,
}

impl PrivateRedis {
    async fn start() -> PrivateRedis {
        // Not an ephemeral port: once it is killed, nothing else may answer there.
        let port = keyhole_testkit::ports::fixed_port().expect("a free port");
        let child = std::process::Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/with-services.sh puts it on PATH)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        PrivateRedis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test]
async fn with_the_alias_store_down_requests_with_ids_are_refused_and_nothing_is_forwarded() {
    let mut redis = PrivateRedis::start().await;
    let mut options = StackOptions::default();
    options
        .control_args
        .extend(["--redis-url".into(), redis.url.clone()]);
    let stack = Stack::start(options).await.expect("stack");
    let session = "s-store-down";
    let body = |uuid: &str| {
        serde_json::to_vec(
            &json!({"messages": [{"role": "user", "content": format!("open patient {uuid}")}]}),
        )
        .expect("json")
    };

    let resp = post(
        &stack,
        PATHS[0],
        &body("5d2c1b0a-3e4f-4a5b-8c6d-7e8f9a0b1c2d"),
        Some(session),
    )
    .await;
    assert_eq!(resp.status(), 200, "store up: aliased and forwarded");
    assert_eq!(stack.llm.seen().len(), 1);

    redis.kill();
    stack.llm.clear();
    let uuid = "0a1b2c3d-4e5f-4a6b-9c8d-7e6f5a4b3c2d";
    let resp = post(&stack, PATHS[0], &body(uuid), Some(session)).await;
    assert_eq!(resp.status(), 503, "store down: refused");
    let err = resp.text().await.expect("body");
    assert!(!err.contains(uuid), "the refusal names no id: {err}");
    assert!(
        stack.llm.seen().is_empty(),
        "nothing forwarded while the store is down"
    );
    assert_eq!(
        stack
            .envoy
            .stat("wasmcustom.keyhole.llm.alias_refused.store")
            .await
            .unwrap(),
        1
    );
}
