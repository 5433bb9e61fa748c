//! Adversarial LLM requests with known ground truth, and an oracle that
//! counts tool definitions in a body without any of keyhole's code.
//!
//! [`generate`] builds requests in all four formats plus mixtures and decoys:
//! unknown tool `type`s, keys in other letter cases and escapes, tools of one
//! format on another format's path, decoy top-level keys, the legacy
//! `functions` array, tool definitions nested in messages, built-in tools,
//! every method and transport. [`tool_definitions`] is the oracle the tests
//! hold the forwarded body to: at most the phase budget, or nothing forwarded.

use serde_json::Value;

/// A small deterministic generator (splitmix64): the same seed gives the same
/// requests on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One element of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The four request formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI Chat Completions.
    Chat,
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini generateContent.
    Gemini,
}

const DIALECTS: [Dialect; 4] = [
    Dialect::Chat,
    Dialect::Responses,
    Dialect::Anthropic,
    Dialect::Gemini,
];

impl Dialect {
    /// The path that names this format.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::Chat => "/v1/chat/completions",
            Dialect::Responses => "/v1/responses",
            Dialect::Anthropic => "/v1/messages",
            Dialect::Gemini => "/v1beta/models/gemini-2.5-flash:generateContent",
        }
    }
}

/// How a request travels to the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// HTTP/1.1 with a content-length.
    Http1,
    /// HTTP/2 (h2c, prior knowledge), body ending the stream.
    Http2,
    /// HTTP/2 with a trailers frame after the body.
    Http2Trailers,
}

/// One generated request.
#[derive(Debug, Clone)]
pub struct Request {
    /// HTTP method.
    pub method: &'static str,
    /// `:path`.
    pub path: String,
    /// Extra headers (phase, method override).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// The transport.
    pub transport: Transport,
    /// The phase's budget: at most this many tool definitions may leave.
    pub budget: usize,
    /// Tool definitions the generator placed in the body.
    pub placed: usize,
    /// A well-formed request of one format on its own path, by POST: keyhole
    /// must forward it (refusing it would be the hidden cost of the guard).
    pub clean: bool,
}

const PHASES: [(&str, usize); 5] = [
    ("planner", 12),
    ("tool-input", 1),
    ("agent-call", 8),
    ("recovery", 12),
    ("formatter", 12),
];

/// A JSON string literal.
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn schema(rng: &mut Rng) -> String {
    // Schemas hold properties called `name` and `description`: not definitions.
    match rng.below(3) {
        0 => r#"{"type":"object","properties":{"name":{"type":"string","description":"a name"},"description":{"type":"string"}}}"#.into(),
        1 => r#"{"type":"object","properties":{"patientId":{"type":"string"}},"required":["patientId"]}"#.into(),
        _ => r#"{"type":"object"}"#.into(),
    }
}

/// A function tool of `dialect`, well formed.
fn function(rng: &mut Rng, dialect: Dialect, i: usize) -> String {
    let name = lit(&format!("tool_{i}_{}", rng.below(1000)));
    let description = lit(&format!("Does thing {i}: reads a record and reports it."));
    let params = schema(rng);
    match dialect {
        Dialect::Chat => format!(
            r#"{{"type":"function","function":{{"name":{name},"description":{description},"parameters":{params}}}}}"#
        ),
        Dialect::Responses => {
            format!(
                r#"{{"type":"function","name":{name},"description":{description},"parameters":{params}}}"#
            )
        }
        Dialect::Anthropic => {
            format!(r#"{{"name":{name},"description":{description},"input_schema":{params}}}"#)
        }
        Dialect::Gemini => format!(
            r#"{{"functionDeclarations":[{{"name":{name},"description":{description},"parameters":{params}}}]}}"#
        ),
    }
}

/// A function tool in a shape meant to slip past a parser: unknown types,
/// other letter cases, escapes, duplicate keys. Every one is a definition.
fn disguised(rng: &mut Rng, i: usize) -> String {
    let name = lit(&format!("hidden_{i}"));
    let d = lit("Hidden tool: full description of what it does.");
    let variants = [
        format!(
            r#"{{"type":"function_v2","function":{{"name":{name},"description":{d},"parameters":{{}}}}}}"#
        ),
        format!(r#"{{"type":"Function","function":{{"name":{name},"description":{d}}}}}"#),
        format!(
            r#"{{"type":"\u0066unction_v2","name":{name},"description":{d},"parameters":{{}}}}"#
        ),
        format!(
            r#"{{"type":"x","TYPE":"function","name":{name},"description":{d},"parameters":{{}}}}"#
        ),
        format!(r#"{{"type":"custom_v2","name":{name},"description":{d},"input_schema":{{}}}}"#),
        format!(r#"{{"type":"Custom","name":{name},"input_schema":{{"type":"object"}}}}"#),
        format!(
            r#"{{"type":"web_search_20250305","name":{name},"description":{d},"input_schema":{{}}}}"#
        ),
        format!(r#"{{"FunctionDeclarations":[{{"name":{name},"description":{d}}}]}}"#),
        format!(r#"{{"Name":{name},"Description":{d},"Input_Schema":{{}}}}"#),
        format!(r#"{{"n\u0061me":{name},"DESCRIPTION":{d},"inputSchema":{{}}}}"#),
        format!(r#"{{"type":"function","Function":{{"name":{name},"description":{d}}}}}"#),
        format!(
            r#"{{"type":"function","name":{name},"parameters":{{}},"function":{{"name":{name}}}}}"#
        ),
    ];
    rng.pick(&variants).clone()
}

/// A provider built-in tool of some format.
fn builtin(rng: &mut Rng) -> String {
    (*rng.pick(&[
        r#"{"type":"web_search"}"#,
        r#"{"type":"file_search","vector_store_ids":["vs_1"]}"#,
        r#"{"type":"web_search_20250305","name":"web_search","max_uses":3}"#,
        r#"{"type":"bash_20250124","name":"bash"}"#,
        r#"{"googleSearch":{}}"#,
        r#"{"codeExecution":{}}"#,
    ]))
    .to_owned()
}

/// Generates one adversarial (or, sometimes, clean) request.
pub fn generate(rng: &mut Rng) -> Request {
    let dialect = *rng.pick(&DIALECTS);
    let (phase, budget) = *rng.pick(&PHASES);
    let clean = rng.chance(20);
    let count = if rng.chance(50) {
        8 + rng.below(120)
    } else {
        rng.below(20)
    };

    let mut placed = 0usize;
    let mut elements = Vec::with_capacity(count + 4);
    for i in 0..count {
        let element = if clean {
            function(rng, dialect, i)
        } else {
            match rng.below(10) {
                0..=4 => function(rng, dialect, i),
                5 | 6 => {
                    let other = *rng.pick(&DIALECTS);
                    function(rng, other, i)
                }
                7 | 8 => disguised(rng, i),
                _ => {
                    elements.push(builtin(rng));
                    continue;
                }
            }
        };
        placed += 1;
        elements.push(element);
    }
    if clean && rng.chance(30) {
        elements.push(builtin_of(dialect).to_owned());
    }

    let mut top: Vec<String> = Vec::new();
    let turn = lit("Find the patient Anna Schmidt and book a follow-up appointment");
    match dialect {
        Dialect::Chat => top.push(format!(r#""messages":[{{"role":"system","content":"be brief"}},{{"role":"user","content":{turn}}}]"#)),
        Dialect::Responses => top.push(format!(r#""input":{turn}"#)),
        Dialect::Anthropic => {
            top.push(r#""system":"be brief""#.into());
            top.push(format!(r#""messages":[{{"role":"user","content":{turn}}}]"#));
        }
        Dialect::Gemini => top.push(format!(r#""contents":[{{"role":"user","parts":[{{"text":{turn}}}]}}]"#)),
    }
    top.push(format!(r#""tools":[{}]"#, elements.join(",")));
    if !clean {
        if rng.chance(25) {
            // Decoy top-level keys of another format.
            top.push(
                rng.pick(&[
                    r#""contents":[]"#,
                    r#""input":"x""#,
                    r#""messages":[]"#,
                    r#""system":"s""#,
                ])
                .to_string(),
            );
        }
        if rng.chance(25) {
            let n = 1 + rng.below(40);
            let fns: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        r#"{{"name":"legacy_{i}","description":"old style","parameters":{{}}}}"#
                    )
                })
                .collect();
            placed += n;
            top.push(format!(r#""functions":[{}]"#, fns.join(",")));
        }
        if rng.chance(20) {
            // Definitions nested where no parser looks for tools.
            let n = 1 + rng.below(20);
            let nested: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        r#"{{"tool":{{"name":"nested_{i}","description":"d","parameters":{{}}}}}}"#
                    )
                })
                .collect();
            placed += n;
            top.push(format!(r#""metadata":{{"extra":[{}]}}"#, nested.join(",")));
        }
        if rng.chance(10) {
            top.push(r#""Tools":[]"#.into());
        }
        if rng.chance(15) {
            // Name-only definitions the provider loads into the context:
            // OpenAI's tool search output, a Realtime session's tools.
            let n = 1 + rng.below(108);
            let loaded: Vec<String> = (0..n)
                .map(|i| format!(r#"{{"type":"function","name":"loaded_{i}"}}"#))
                .collect();
            placed += n;
            if rng.chance(50) {
                top.push(format!(
                    r#""extra_input":[{{"type":"tool_search_output","tools":[{}]}}]"#,
                    loaded.join(",")
                ));
            } else {
                top.push(format!(
                    r#""session":{{"type":"realtime","tools":[{}]}}"#,
                    loaded.join(",")
                ));
            }
        }
    }
    let body = format!("{{{}}}", top.join(",")).into_bytes();

    let path = if clean {
        dialect.path().to_owned()
    } else {
        let other = rng.pick(&DIALECTS).path();
        rng.pick(&[
            dialect.path().to_owned(),
            other.to_owned(),
            "/v1/chat/%63ompletions".to_owned(),
            "/x/../../v1/messages".to_owned(),
            "/proxy/llm".to_owned(),
            format!("{other}?alt=sse"),
        ])
        .clone()
    };
    let method = if clean {
        "POST"
    } else {
        *rng.pick(&["POST", "POST", "POST", "PUT", "PATCH", "DELETE", "GET"])
    };
    let mut headers = vec![
        ("x-keyhole-phase", phase.to_owned()),
        ("x-keyhole-session", format!("s{}", rng.below(50))),
    ];
    if method != "POST" && rng.chance(50) {
        headers.push(("x-http-method-override", "POST".into()));
    }
    let transport = *rng.pick(&[Transport::Http1, Transport::Http2, Transport::Http2Trailers]);
    Request {
        method,
        path,
        headers,
        body,
        transport,
        budget,
        placed,
        clean,
    }
}

fn builtin_of(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Chat | Dialect::Responses => r#"{"type":"web_search"}"#,
        Dialect::Anthropic => r#"{"type":"web_search_20250305","name":"web_search","max_uses":3}"#,
        Dialect::Gemini => r#"{"googleSearch":{}}"#,
    }
}

/// The oracle: tool definitions anywhere in `body`, counted on a DOM by rules
/// written here, without any of keyhole's code. A body that is not JSON, or
/// that names an MCP server the provider would read whole ([`unbounded_source`]),
/// counts as unbounded (`usize::MAX`).
///
/// A definition is an object with a string `name` (any letter case or
/// separators) and a description or schema key; or a `type` of `function` /
/// `custom`; or one that sits where only definitions sit: under `function` /
/// `custom` without call arguments, in a `functions` / `functionDeclarations`
/// array, or in a `tools` array without a `type` of its own. Inside a
/// `tool_choice`, `toolConfig` or `allowed_tools` member only the first rule
/// holds: a reference names a tool, it defines none.
pub fn tool_definitions(body: &[u8]) -> usize {
    if body.iter().all(u8::is_ascii_whitespace) {
        return 0;
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if unbounded_source(&v) => usize::MAX,
        Ok(v) => count(&v, Place::Other, false),
        Err(_) => usize::MAX,
    }
}

/// Whether `v` names an MCP server whose tools nothing bounds: a Responses
/// `mcp` tool without `allowed_tools` (and no replayed `mcp_list_tools` of
/// its label), an Anthropic `mcp_toolset` enabled by default, or an
/// `mcp_servers` entry with neither a toolset nor `allowed_tools`.
pub fn unbounded_source(v: &Value) -> bool {
    let tools = v
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let responses_mcp = tools.iter().any(|t| {
        t.get("type").and_then(Value::as_str) == Some("mcp")
            && t.get("allowed_tools").is_none()
            && !v
                .get("input")
                .and_then(Value::as_array)
                .is_some_and(|items| {
                    items.iter().any(|i| {
                        i.get("type").and_then(Value::as_str) == Some("mcp_list_tools")
                            && i.get("server_label") == t.get("server_label")
                    })
                })
    });
    let toolset_on = |t: &Value| {
        t.get("type").and_then(Value::as_str) == Some("mcp_toolset")
            && t.pointer("/default_config/enabled")
                .and_then(Value::as_bool)
                != Some(false)
    };
    let servers = v
        .get("mcp_servers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let bare_server = servers.iter().any(|s| {
        let named = |t: &Value| t.get("mcp_server_name") == s.get("name");
        s.pointer("/tool_configuration/allowed_tools").is_none()
            && s.pointer("/tool_configuration/enabled")
                .and_then(Value::as_bool)
                != Some(false)
            && !tools.iter().any(named)
    });
    responses_mcp || tools.iter().any(toolset_on) || bare_server
}

#[derive(Clone, Copy, PartialEq)]
enum Place {
    Other,
    Element,
    Wrapper,
    List,
    InList,
    ToolsList,
    InToolsList,
}

fn squash(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '_' | '-'))
        .flat_map(char::to_lowercase)
        .collect::<String>()
        .replace('ſ', "s")
}

fn count(v: &Value, place: Place, reference: bool) -> usize {
    match v {
        Value::Array(items) => {
            let inner = match place {
                Place::List => Place::InList,
                Place::ToolsList => Place::InToolsList,
                _ => Place::Element,
            };
            items.iter().map(|i| count(i, inner, reference)).sum()
        }
        Value::Object(map) => {
            let mut n = 0;
            let mut named = false;
            let mut defines = false;
            let mut call = false;
            let mut schema = false;
            let mut held = 0;
            let mut typed = None;
            for (k, v) in map {
                let k = squash(k);
                let in_array = matches!(place, Place::Element | Place::InList | Place::InToolsList);
                let child = match k.as_str() {
                    "function" | "custom" if in_array => Place::Wrapper,
                    "functions" | "functiondeclarations" => Place::List,
                    "tools" => Place::ToolsList,
                    _ => Place::Other,
                };
                let inner_reference =
                    reference || matches!(k.as_str(), "toolchoice" | "toolconfig" | "allowedtools");
                let inner = count(v, child, inner_reference);
                n += inner;
                match k.as_str() {
                    "name" => named |= v.is_string(),
                    "tools" => held += inner,
                    "description" => defines = true,
                    "parameters"
                    | "inputschema"
                    | "parametersjsonschema"
                    | "schema"
                    | "inputjsonschema" => (defines, schema) = (true, true),
                    "arguments" | "input" | "args" => call = true,
                    "type" => typed = Some(v.as_str().map(squash).unwrap_or_default()),
                    _ => {}
                }
            }
            let function_typed = matches!(typed.as_deref(), Some("function" | "custom"));
            let by_name = !reference
                && (function_typed
                    || (place == Place::Wrapper && !call)
                    || (place == Place::InToolsList && typed.is_none()));
            // A Responses namespace holding definitions is no definition
            // itself: the model calls the functions in it.
            let namespace = place == Place::InToolsList
                && typed.as_deref() == Some("namespace")
                && held > 0
                && !schema
                && !call;
            let definition = !namespace && named && (defines || place == Place::InList || by_name);
            n + usize::from(definition)
        }
        _ => 0,
    }
}
