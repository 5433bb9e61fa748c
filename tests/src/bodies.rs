//! Readers of the request bodies the LLM upstream received, independent of
//! keyhole's own parsers: the tests count and compare tools with these.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// Raw bytes of every function tool in a body (`gemini`: inside
/// `functionDeclarations`; else each `tools` element of type `function`,
/// `custom` or none).
pub fn function_tools(body: &[u8], gemini: bool) -> Vec<String> {
    #[derive(Deserialize)]
    struct B<'a> {
        #[serde(borrow, default)]
        tools: Vec<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct G<'a> {
        #[serde(borrow, default, rename = "functionDeclarations")]
        decls: Vec<&'a RawValue>,
    }
    let b: B<'_> = serde_json::from_slice(body).expect("json body");
    let mut out = Vec::new();
    for t in b.tools {
        if gemini {
            let g: G<'_> = serde_json::from_str(t.get()).expect("gemini tool");
            out.extend(g.decls.iter().map(|d| d.get().to_owned()));
        } else {
            let v: Value = serde_json::from_str(t.get()).expect("tool");
            let kind = v.get("type").and_then(Value::as_str);
            if matches!(kind, None | Some("function") | Some("custom")) {
                out.push(t.get().to_owned());
            }
        }
    }
    out
}

/// Whether a raw tool definition is keyhole's own tool-search control tool,
/// which the filter adds to every surfaced set (`tool_search: on`, the
/// default), rather than one of the client's.
pub fn is_search_tool(raw: &str) -> bool {
    raw.contains(&format!("\"{}\"", keyhole_core::tools::recovery::TOOL_NAME))
}

/// `tools` without keyhole's control tool: the client's tools as forwarded.
pub fn client_tools(tools: Vec<String>) -> Vec<String> {
    tools.into_iter().filter(|t| !is_search_tool(t)).collect()
}

/// The function names of an OpenAI chat body's tools.
pub fn tool_names(body: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).expect("json body");
    v["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// The body as JSON without its `tools` member: what must pass unchanged.
pub fn without_tools(body: &[u8]) -> Value {
    let mut v: Value = serde_json::from_slice(body).expect("json");
    v.as_object_mut().expect("object").remove("tools");
    v
}
