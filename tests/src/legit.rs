//! Legitimate LLM requests in the shapes the providers' current API
//! references give, and a check that what left is what was sent, bounded.
//!
//! [`generate`] writes requests of the four formats around the catalog's
//! 108-tool registry with the options current SDKs send: structured outputs
//! (Chat `response_format`, Responses `text.format`, Gemini
//! `responseSchema`), `allowed_tools` and named `tool_choice`s, provider
//! built-ins of every family at their current versions, Responses
//! namespaces, `tool_search` with `defer_loading` functions, MCP servers with
//! `allowed_tools` (and a replayed listing), Anthropic `cache_control`,
//! thinking blocks with signatures, image / audio / document parts,
//! streaming, request bookkeeping holding ids (`metadata`, `user`,
//! `safety_identifier`, `prompt_cache_key`, `metadata.user_id`), tool loops
//! and turns without text, Vertex AI and Bedrock paths for Anthropic bodies.
//! Model-visible text holds no record id, so nothing but the tools may change.
//!
//! [`check`] holds the forwarded body to that: every member but `tools` is
//! what was sent; every forwarded function tool is byte for byte one of the
//! request's; every built-in and tool source is still there; every tool the
//! request forces is kept; and the oracle ([`crate::adversary::tool_definitions`])
//! counts at most the budget.

use crate::adversary::{self, Rng};
use crate::paths;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// One generated legitimate request.
#[derive(Debug, Clone)]
pub struct Legit {
    /// What it exercises, for failure messages (`responses+namespace+…`).
    pub label: String,
    /// `:path`.
    pub path: String,
    /// Extra headers (session, phase).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// The phase's budget.
    pub budget: usize,
    /// Function names the request forces: each must be kept.
    pub forced: Vec<String>,
}

/// The catalog's tools as `(name, description, parameters)`.
pub fn catalog_tools() -> Vec<(String, String, Value)> {
    let body: Value = serde_json::from_slice(
        &std::fs::read(paths::catalog().join("openai_request.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    let f = &t["function"];
                    (
                        f["name"].as_str().unwrap_or_default().to_owned(),
                        f["description"].as_str().unwrap_or_default().to_owned(),
                        f["parameters"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

const PHASES: [(&str, usize); 5] = [
    ("planner", 12),
    ("tool-input", 1),
    ("agent-call", 8),
    ("recovery", 12),
    ("formatter", 12),
];

const TURNS: [&str; 6] = [
    "Book Anna Schmidt a follow-up with me next Tuesday at 10:30.",
    "What was her last HbA1c, and is metformin still on the medication list?",
    "Frau Kühn hat eine neue Handynummer, bitte im Stammblatt ändern.",
    "Quelle est la tension de M. Benali ce matin ?",
    "Order a potassium and creatinine for tomorrow morning.",
    "Summarise the discharge letter for the ward round.",
];

/// Request bookkeeping that holds ids the model never reads.
const BOOKKEEPING_ID: &str = "8f14e45f-ceea-467f-a0e6-3f3e0b1c9d2a";

fn pick_turn(rng: &mut Rng) -> String {
    (*rng.pick(&TURNS)).to_owned()
}

/// A few tool names of the catalog, distinct.
fn some_names(rng: &mut Rng, tools: &[(String, String, Value)], n: usize) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    while names.len() < n.min(tools.len()) {
        let name = tools[rng.below(tools.len())].0.clone();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Generates one legitimate request of some format.
///
/// In the tool-input phase (a budget of one: the tool whose arguments are
/// being filled in) nothing else that takes a place is added — a
/// structured-output schema, an MCP server, a tool result holding a
/// resource with a name and a description, schema examples holding one (the
/// detector counts such a tool twice): such a body is over budget by
/// construction, and keyhole refuses it rather than drop the forced tool
/// (`format::compat_tests`).
pub fn generate(rng: &mut Rng, tools: &[(String, String, Value)]) -> Legit {
    let (phase, budget) = *rng.pick(&PHASES);
    let mut label = Vec::new();
    let mut forced = Vec::new();
    let (path, body) = match rng.below(4) {
        0 => chat(rng, tools, &mut label, &mut forced, budget),
        1 => responses(rng, tools, &mut label, &mut forced, budget),
        2 => anthropic(rng, tools, &mut label, &mut forced, budget),
        _ => gemini(rng, tools, &mut label, &mut forced, budget),
    };
    let headers = vec![
        ("x-keyhole-phase", phase.to_owned()),
        ("x-keyhole-session", format!("legit-{}", rng.below(20))),
    ];
    Legit {
        label: format!("{phase}:{}", label.join("+")),
        path,
        headers,
        body: serde_json::to_vec(&body).unwrap_or_default(),
        budget,
        forced,
    }
}

/// At most one forced function for tool-input (its budget is one), a few elsewhere.
fn forcing(rng: &mut Rng, tools: &[(String, String, Value)], budget: usize) -> Vec<String> {
    let n = if budget == 1 { 1 } else { 1 + rng.below(3) };
    some_names(rng, tools, n)
}

fn chat(
    rng: &mut Rng,
    tools: &[(String, String, Value)],
    label: &mut Vec<&'static str>,
    forced: &mut Vec<String>,
    budget: usize,
) -> (String, Value) {
    label.push("chat");
    // Schemas whose examples hold objects with a name and a description:
    // the detector counts each such tool twice, and the set gives places.
    let examples = budget > 1 && rng.chance(15);
    if examples {
        label.push("schema-examples");
    }
    let mut list: Vec<Value> = tools
        .iter()
        .map(|(n, d, p)| {
            let mut p = p.clone();
            if examples {
                p["examples"] = json!([{"name": "Anna Schmidt", "description": "a patient"}]);
            }
            json!({"type": "function", "function": {"name": n, "description": d, "parameters": p, "strict": false}})
        })
        .collect();
    if rng.chance(30) {
        label.push("custom-grammar");
        list.push(json!({"type": "custom", "custom": {"name": "sql_query", "description": "Runs a read-only SQL query.", "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: SELECT"}}}}));
    }
    let user_content = match rng.below(4) {
        0 => json!(pick_turn(rng)),
        1 => {
            label.push("image");
            json!([{"type": "text", "text": pick_turn(rng)}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}}])
        }
        2 => {
            label.push("audio+file");
            json!([{"type": "text", "text": pick_turn(rng)}, {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}, {"type": "file", "file": {"filename": "letter.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}}])
        }
        _ => {
            label.push("empty-turn");
            json!("")
        }
    };
    let mut messages =
        vec![json!({"role": "developer", "content": "You are the clinical assistant."})];
    if rng.chance(40) {
        label.push("tool-loop");
        messages.push(json!({"role": "user", "content": pick_turn(rng)}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": tools[0].0, "arguments": "{\"query\":\"Schmidt\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"resourceType\":\"Bundle\",\"total\":1}"}));
    }
    messages.push(json!({"role": "user", "content": user_content}));
    let mut body = Map::new();
    body.insert("model".into(), json!("gpt-5.4"));
    body.insert("messages".into(), json!(messages));
    body.insert("tools".into(), json!(list));
    if budget > 1 && rng.chance(50) {
        label.push("response_format");
        body.insert("response_format".into(), json!({"type": "json_schema", "json_schema": {"name": "clinical_answer", "description": "The answer", "schema": {"type": "object", "properties": {"name": {"type": "string"}, "description": {"type": "string"}}, "required": ["name"], "additionalProperties": false}, "strict": true}}));
    }
    match rng.below(4) {
        0 => {
            label.push("allowed_tools");
            let names = forcing(rng, tools, budget);
            let refs: Vec<Value> = names
                .iter()
                .map(|n| json!({"type": "function", "function": {"name": n}}))
                .collect();
            body.insert("tool_choice".into(), json!({"type": "allowed_tools", "allowed_tools": {"mode": *rng.pick(&["auto", "required"]), "tools": refs}}));
            forced.extend(names);
        }
        1 => {
            label.push("named-choice");
            let name = some_names(rng, tools, 1).remove(0);
            body.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": name}}),
            );
            forced.push(name);
        }
        2 => {
            body.insert(
                "tool_choice".into(),
                json!(*rng.pick(&["auto", "required", "none"])),
            );
        }
        _ => {}
    }
    bookkeeping(rng, &mut body, label, true);
    if rng.chance(40) {
        label.push("stream");
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    body.insert("parallel_tool_calls".into(), json!(rng.chance(50)));
    ("/v1/chat/completions".into(), Value::Object(body))
}

/// `metadata`, `user`, `safety_identifier`, `prompt_cache_key` holding an id.
fn bookkeeping(
    rng: &mut Rng,
    body: &mut Map<String, Value>,
    label: &mut Vec<&'static str>,
    openai: bool,
) {
    if !rng.chance(60) {
        return;
    }
    label.push("bookkeeping");
    if openai {
        body.insert(
            "metadata".into(),
            json!({"trace_id": BOOKKEEPING_ID, "patient_ref": format!("Patient/{BOOKKEEPING_ID}")}),
        );
        body.insert("user".into(), json!(BOOKKEEPING_ID));
        body.insert("safety_identifier".into(), json!(BOOKKEEPING_ID));
        body.insert(
            "prompt_cache_key".into(),
            json!(format!("clinic-{BOOKKEEPING_ID}")),
        );
    } else {
        body.insert("metadata".into(), json!({"user_id": BOOKKEEPING_ID}));
    }
}

fn responses(
    rng: &mut Rng,
    tools: &[(String, String, Value)],
    label: &mut Vec<&'static str>,
    forced: &mut Vec<String>,
    budget: usize,
) -> (String, Value) {
    label.push("responses");
    let defer = rng.chance(25);
    let function = |(n, d, p): &(String, String, Value)| {
        let mut t = json!({"type": "function", "name": n, "description": d, "parameters": p, "strict": false});
        if defer {
            t["defer_loading"] = json!(true);
        }
        t
    };
    let mut list: Vec<Value> = Vec::new();
    if rng.chance(30) {
        label.push("namespace");
        let (a, b) = tools.split_at(tools.len() / 2);
        list.push(json!({"type": "namespace", "name": "clinical", "description": "Clinical record tools", "tools": a.iter().map(function).collect::<Vec<_>>()}));
        list.extend(b.iter().map(function));
    } else {
        list.extend(tools.iter().map(function));
    }
    if defer {
        label.push("tool_search");
        list.push(json!({"type": "tool_search"}));
    }
    let builtins = [
        json!({"type": "web_search"}),
        json!({"type": "web_search_preview", "search_context_size": "low"}),
        json!({"type": "file_search", "vector_store_ids": ["vs_guidelines"]}),
        json!({"type": "code_interpreter", "container": {"type": "auto"}}),
        json!({"type": "image_generation"}),
        json!({"type": "computer", "display_width": 1280, "display_height": 800, "environment": "browser"}),
        json!({"type": "computer_use_preview", "display_width": 1280, "display_height": 800, "environment": "browser"}),
        json!({"type": "local_shell"}),
        json!({"type": "shell"}),
        json!({"type": "apply_patch"}),
    ];
    for _ in 0..rng.below(3) {
        label.push("builtin");
        list.push(rng.pick(&builtins).clone());
    }
    let mut input: Vec<Value> = Vec::new();
    let mcp = budget > 1 && rng.chance(25);
    if mcp {
        label.push("mcp");
        let replayed = rng.chance(50);
        let allowed = if budget >= 8 || !replayed {
            Some(vec!["lookup_drug", "interaction_check"])
        } else {
            None
        };
        let mut server = json!({"type": "mcp", "server_label": "drugdb", "server_url": "https://mcp.example.org/sse", "require_approval": "never"});
        match &allowed {
            Some(names) if rng.chance(50) => server["allowed_tools"] = json!(names),
            Some(names) => server["allowed_tools"] = json!({"tool_names": names}),
            None => {}
        }
        if replayed || allowed.is_none() {
            label.push("mcp_list_tools");
            input.push(json!({"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "drugdb", "tools": [{"name": "lookup_drug", "description": "Looks a drug up.", "input_schema": {"type": "object"}, "annotations": null}]}));
        }
        list.push(server);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!("gpt-5.4"));
    match rng.below(4) {
        0 => {
            body.insert("input".into(), json!(pick_turn(rng)));
        }
        1 => {
            label.push("previous_response_id+function_call_output");
            body.insert(
                "previous_response_id".into(),
                json!("resp_68af3c1e2b8481a0b1f3d7e9c4a20f5d"),
            );
            input.push(json!({"type": "function_call_output", "call_id": "call_7", "output": "{\"status\":\"booked\"}"}));
            body.insert("input".into(), json!(input));
        }
        2 => {
            label.push("reasoning+parts");
            input.push(json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABo"}));
            input.push(json!({"role": "user", "content": [{"type": "input_text", "text": pick_turn(rng)}, {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}, {"type": "input_file", "file_id": "file-abc123"}]}));
            body.insert("input".into(), json!(input));
        }
        _ => {
            input.push(json!({"role": "user", "content": pick_turn(rng)}));
            body.insert("input".into(), json!(input));
        }
    }
    if !body.contains_key("input") {
        body.insert("input".into(), json!(input));
    }
    body.insert(
        "instructions".into(),
        json!("You are the clinical assistant."),
    );
    body.insert("tools".into(), json!(list));
    if budget > 1 && rng.chance(50) {
        label.push("text.format");
        body.insert("text".into(), json!({"format": {"type": "json_schema", "name": "clinical_answer", "schema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"], "additionalProperties": false}, "strict": true}, "verbosity": "low"}));
    }
    match rng.below(4) {
        0 => {
            label.push("allowed_tools");
            let names = forcing(rng, tools, budget);
            let mut refs: Vec<Value> = names
                .iter()
                .map(|n| json!({"type": "function", "name": n}))
                .collect();
            if mcp {
                refs.push(json!({"type": "mcp", "server_label": "drugdb"}));
            }
            body.insert("tool_choice".into(), json!({"type": "allowed_tools", "mode": *rng.pick(&["auto", "required"]), "tools": refs}));
            forced.extend(names);
        }
        1 => {
            label.push("named-choice");
            let name = some_names(rng, tools, 1).remove(0);
            body.insert(
                "tool_choice".into(),
                json!({"type": "function", "name": name}),
            );
            forced.push(name);
        }
        _ => {}
    }
    bookkeeping(rng, &mut body, label, true);
    if rng.chance(30) {
        label.push("stream");
        body.insert("stream".into(), json!(true));
    }
    body.insert(
        "reasoning".into(),
        json!({"effort": "low", "summary": "auto"}),
    );
    body.insert("store".into(), json!(false));
    ("/v1/responses".into(), Value::Object(body))
}

fn anthropic(
    rng: &mut Rng,
    tools: &[(String, String, Value)],
    label: &mut Vec<&'static str>,
    forced: &mut Vec<String>,
    budget: usize,
) -> (String, Value) {
    label.push("anthropic");
    let mut list: Vec<Value> = tools
        .iter()
        .map(|(n, d, p)| json!({"name": n, "description": d, "input_schema": p}))
        .collect();
    if let Some(last) = list.last_mut() {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    let builtins = [
        json!({"type": "web_search_20260209", "name": "web_search", "max_uses": 3, "allowed_domains": ["awmf.org"]}),
        json!({"type": "web_search_20250305", "name": "web_search"}),
        json!({"type": "web_fetch_20260309", "name": "web_fetch", "max_uses": 2}),
        json!({"type": "web_fetch_20250910", "name": "web_fetch"}),
        json!({"type": "code_execution_20260120", "name": "code_execution"}),
        json!({"type": "code_execution_20250825", "name": "code_execution"}),
        json!({"type": "computer_20251124", "name": "computer", "display_width_px": 1024, "display_height_px": 768}),
        json!({"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}),
        json!({"type": "bash_20250124", "name": "bash"}),
        json!({"type": "memory_20250818", "name": "memory"}),
        json!({"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}),
    ];
    for _ in 0..rng.below(3) {
        label.push("server-tool");
        list.push(rng.pick(&builtins).clone());
    }
    let mut body = Map::new();
    if budget > 1 && rng.chance(25) {
        label.push("mcp_toolset");
        body.insert("mcp_servers".into(), json!([{"type": "url", "url": "https://mcp.example.org/sse", "name": "drugdb", "authorization_token": "tok"}]));
        list.push(json!({"type": "mcp_toolset", "mcp_server_name": "drugdb", "default_config": {"enabled": false}, "configs": {"lookup_drug": {"enabled": true}}}));
    }
    let turn = pick_turn(rng);
    let mut messages = Vec::new();
    match rng.below(4) {
        0 => messages.push(json!({"role": "user", "content": turn})),
        1 => {
            label.push("blocks+cache_control");
            messages.push(json!({"role": "user", "content": [{"type": "text", "text": turn, "cache_control": {"type": "ephemeral"}}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}, {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]}));
        }
        2 => {
            label.push("thinking+tool_result");
            messages.push(json!({"role": "user", "content": turn}));
            messages.push(json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "Look the patient up first.", "signature": "EqQBCkgIARABGAIiQJ"}, {"type": "tool_use", "id": "toolu_1", "name": tools[0].0, "input": {"query": "Schmidt"}}]}));
            messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "{\"total\":1}"}]}]}));
        }
        _ => {
            label.push("redacted_thinking");
            messages.push(json!({"role": "user", "content": turn}));
            messages.push(json!({"role": "assistant", "content": [{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}, {"type": "text", "text": "Let me check."}]}));
            messages.push(json!({"role": "user", "content": "Go on."}));
        }
    }
    body.insert("max_tokens".into(), json!(1024));
    body.insert("messages".into(), json!(messages));
    body.insert("tools".into(), json!(list));
    if rng.chance(60) {
        body.insert("system".into(), json!([{"type": "text", "text": "You are the clinical assistant.", "cache_control": {"type": "ephemeral"}}]));
    }
    match rng.below(3) {
        0 => {
            label.push("tool-choice");
            let name = some_names(rng, tools, 1).remove(0);
            body.insert(
                "tool_choice".into(),
                json!({"type": "tool", "name": name, "disable_parallel_tool_use": true}),
            );
            forced.push(name);
        }
        1 => {
            body.insert(
                "tool_choice".into(),
                json!({"type": *rng.pick(&["auto", "any", "none"])}),
            );
        }
        _ => {}
    }
    if budget > 1 && rng.chance(30) {
        label.push("thinking");
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": 2048}),
        );
    }
    bookkeeping(rng, &mut body, label, false);
    if rng.chance(30) {
        label.push("stream");
        body.insert("stream".into(), json!(true));
    }
    let path = match rng.below(3) {
        0 => {
            label.push("vertex");
            body.insert("anthropic_version".into(), json!("vertex-2023-10-16"));
            let method = if body.contains_key("stream") {
                "streamRawPredict"
            } else {
                "rawPredict"
            };
            format!("/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5:{method}")
        }
        1 => {
            label.push("bedrock");
            body.insert("anthropic_version".into(), json!("bedrock-2023-05-31"));
            body.remove("stream");
            "/model/anthropic.claude-sonnet-4-5-v1%3A0/invoke".into()
        }
        _ => {
            body.insert("model".into(), json!("claude-sonnet-4-5"));
            "/v1/messages".into()
        }
    };
    (path, Value::Object(body))
}

fn gemini(
    rng: &mut Rng,
    tools: &[(String, String, Value)],
    label: &mut Vec<&'static str>,
    forced: &mut Vec<String>,
    budget: usize,
) -> (String, Value) {
    label.push("gemini");
    let declarations: Vec<Value> = tools
        .iter()
        .map(|(n, d, p)| json!({"name": n, "description": d, "parameters": p}))
        .collect();
    let mut list = vec![json!({"functionDeclarations": declarations})];
    let builtins = [
        json!({"googleSearch": {}}),
        json!({"codeExecution": {}}),
        json!({"urlContext": {}}),
    ];
    for _ in 0..rng.below(2) {
        label.push("builtin");
        list.push(rng.pick(&builtins).clone());
    }
    let turn = pick_turn(rng);
    let mut contents = Vec::new();
    match rng.below(if budget > 1 { 3 } else { 2 }) {
        0 => contents.push(json!({"role": "user", "parts": [{"text": turn}]})),
        1 => {
            label.push("inline-data");
            contents.push(json!({"role": "user", "parts": [{"text": turn}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}, {"fileData": {"mimeType": "application/pdf", "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc"}}]}));
        }
        _ => {
            label.push("function-response");
            contents.push(json!({"role": "user", "parts": [{"text": turn}]}));
            contents.push(json!({"role": "model", "parts": [{"functionCall": {"name": tools[1].0, "args": {"code": "metformin"}}, "thoughtSignature": "CiQB0e2Kb"}]}));
            // A tool result holding a resource with a name and a description:
            // the detector counts it, and it costs one place at most.
            contents.push(json!({"role": "user", "parts": [{"functionResponse": {"name": tools[1].0, "response": {"resourceType": "Medication", "name": "Metformin 500 mg", "description": "Biguanide, oral tablet"}}}]}));
        }
    }
    let mut body = Map::new();
    body.insert("contents".into(), json!(contents));
    body.insert(
        "systemInstruction".into(),
        json!({"parts": [{"text": "You are the clinical assistant."}]}),
    );
    body.insert("tools".into(), json!(list));
    if rng.chance(40) {
        label.push("allowedFunctionNames");
        let names = forcing(rng, tools, budget);
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": names}}),
        );
        forced.extend(names);
    }
    if rng.chance(40) {
        label.push("responseSchema");
        body.insert("generationConfig".into(), json!({"responseMimeType": "application/json", "responseSchema": {"type": "OBJECT", "properties": {"answer": {"type": "STRING"}}}, "thinkingConfig": {"thinkingBudget": 512}}));
    }
    let stream = rng.chance(30);
    if stream {
        label.push("stream");
    }
    let path = if stream {
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    } else {
        "/v1beta/models/gemini-2.5-flash:generateContent"
    };
    (path.into(), Value::Object(body))
}

/// What is wrong with `forwarded` as the forwarding of `sent`, if anything.
pub fn check(sent: &Legit, forwarded: &[u8]) -> Result<(), String> {
    let before: Map<String, Value> =
        serde_json::from_slice(&sent.body).map_err(|e| format!("sent: {e}"))?;
    let after: Map<String, Value> =
        serde_json::from_slice(forwarded).map_err(|e| format!("forwarded is not JSON: {e}"))?;
    for (key, value) in &before {
        if key != "tools" && after.get(key) != Some(value) {
            return Err(format!("member {key:?} was altered"));
        }
    }
    if let Some(extra) = after.keys().find(|k| !before.contains_key(*k)) {
        return Err(format!("member {extra:?} was added"));
    }
    let found = adversary::tool_definitions(forwarded);
    if found > sent.budget {
        return Err(format!(
            "{found} tool definitions left (budget {})",
            sent.budget
        ));
    }
    // Function tools byte for byte; everything else kept.
    let sent_text = String::from_utf8_lossy(&sent.body);
    let raw: RawTools<'_> =
        serde_json::from_slice(forwarded).map_err(|e| format!("forwarded tools: {e}"))?;
    let mut names: Vec<String> = Vec::new();
    for element in raw.tools.unwrap_or_default() {
        let value: Value = serde_json::from_str(element.get()).map_err(|e| e.to_string())?;
        for (inner, name) in functions_of(element, &value)? {
            if name == "keyhole_tool_search" {
                continue;
            }
            if !sent_text.contains(inner) {
                return Err(format!("tool {name:?} is not byte for byte the one sent"));
            }
            names.push(name);
        }
    }
    for name in &sent.forced {
        if !names.contains(name) {
            return Err(format!("forced tool {name:?} was dropped"));
        }
    }
    let kept_others = |v: &Value| {
        after
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|a| a.contains(v))
    };
    for element in before
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function_like = element.get("function").is_some()
            || element.get("input_schema").is_some()
            || element.get("functionDeclarations").is_some()
            || matches!(
                element.get("type").and_then(Value::as_str),
                Some("function" | "custom" | "namespace")
            );
        if !function_like && !kept_others(element) {
            return Err(format!("built-in or tool source {element} was dropped"));
        }
    }
    Ok(())
}

#[derive(serde::Deserialize)]
struct RawTools<'a> {
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
}

/// The function tools of one forwarded tools element, as `(raw text, name)`:
/// the element itself, or the elements of its namespace or declarations.
fn functions_of<'a>(
    element: &'a RawValue,
    value: &Value,
) -> Result<Vec<(&'a str, String)>, String> {
    #[derive(serde::Deserialize)]
    struct Group<'a> {
        #[serde(borrow, default, rename = "functionDeclarations")]
        declarations: Option<Vec<&'a RawValue>>,
        #[serde(borrow, default)]
        tools: Option<Vec<&'a RawValue>>,
    }
    let name_of = |v: &Value| {
        v.get("function")
            .or_else(|| v.get("custom"))
            .unwrap_or(v)
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let group: Group<'a> = serde_json::from_str(element.get()).map_err(|e| e.to_string())?;
    let kind = value.get("type").and_then(Value::as_str);
    let inner = match (kind, group.declarations, group.tools) {
        (_, Some(declarations), _) => declarations,
        (Some("namespace"), _, Some(tools)) => tools,
        (Some("function" | "custom") | None, _, _) => {
            return Ok(name_of(value)
                .map(|n| (element.get(), n))
                .into_iter()
                .collect())
        }
        _ => return Ok(Vec::new()),
    };
    inner
        .into_iter()
        .map(|raw| {
            let v: Value = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
            Ok((raw.get(), name_of(&v).unwrap_or_default()))
        })
        .collect()
}
