//! OpenAI Responses: `{"input": "…" | [items], "tools": [{"type": "function",
//! "name", "description", "parameters"}], "tool_choice": ...}`.
//!
//! Function and custom tools carry their `name` at the top level of the tool
//! object and count against the budget; built-in tools (`web_search`,
//! `file_search`, `code_interpreter`, `mcp`, …, see [`BUILTINS`]) are kept and
//! not counted.
//! The turn is `input` when it is a string, else the latest input item with
//! role `user` (content a string or `input_text` parts).

use super::body::Top;
use super::{
    has_text, history, latest_user_text, search_event, search_parameters, ArrayRole, Builder, Dialect, FormatError,
    TypedName,
};
use crate::recovery::{self, HistoryEvent};
use crate::shallow::{self, Raw};
use serde::Deserialize;
use std::borrow::Cow;

#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    description: Option<Cow<'a, str>>,
}

/// OpenAI Responses, for [`super::Format::OpenAiResponses`].
pub(super) const DIALECT: Dialect = Dialect {
    name: "openai-responses",
    paths: &["/responses"],
    builtins: BUILTINS,
    builtins_by_key: false,
    builtins_named: false,
    by_top: |top| top.input.is_some(),
    sniff_rank: 1,
    by_element: |e| e.kind.as_deref() == Some("function") && e.name.is_some() && e.function.is_none(),
    read_request: parse,
    read_calls: calls,
    read_history,
    search_tool,
};

/// Built-in types kept untouched (see [`super::BuiltinTools`]).
pub(super) const BUILTINS: &[&str] = &[
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "web_search_2025_08_26",
    "file_search",
    "code_interpreter",
    "computer_use_preview",
    "computer_use",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
];

/// Reads the tools and the forcing `tool_choice`; returns the turn.
pub(super) fn parse<'a>(b: &mut Builder<'a, '_>, top: &Top<'a>) -> Result<String, FormatError> {
    if let Some(raw) = top.tools {
        let array = b.array(raw, "tools", ArrayRole::Tools, |b, at, raw| {
            let keys = b.spelling(raw, at)?;
            let tool: Tool<'_> = b.read(raw, at)?;
            match (tool.kind.as_deref(), tool.name) {
                (None | Some("function" | "custom"), Some(name)) => Ok(b.function(name, tool.description)),
                (None | Some("function" | "custom"), None) => Err(b.tool_error(at(), "a function tool without a name")),
                (Some(kind), _) => b.builtin(&keys, Some(kind), at),
            }
        })?;
        b.arrays.push(array);
    }

    if let Some(raw) = top.tool_choice {
        if let Some(name) = named_choice(raw) {
            b.forced.push(name);
        }
    }
    Ok(match top.input {
        Some(raw) => match shallow::from_str::<Cow<'_, str>>(raw.get()) {
            Ok(text) => text.into_owned(),
            Err(_) => latest_user_text(Some(raw), |role| role == Some("user")),
        },
        None => String::new(),
    })
}

/// `{"type": "function" | "custom", "name": …}`; anything else names nothing.
fn named_choice(raw: Raw<'_>) -> Option<String> {
    let tool: Tool<'_> = shallow::from_str(raw.get()).ok()?;
    match tool.kind.as_deref() {
        Some("function" | "custom") => tool.name.map(Cow::into_owned),
        _ => None,
    }
}

// === the tool-search control tool ===

/// The control tool as a Responses function tool (its schema closed, as
/// strict mode asks).
fn search_tool() -> String {
    serde_json::json!({
        "type": "function",
        "name": recovery::TOOL_NAME,
        "description": recovery::DESCRIPTION,
        "parameters": search_parameters(true),
    })
    .to_string()
}

/// User input items with text, and `function_call` items calling the
/// control tool (`arguments` a JSON string). An `input` string has no history.
fn read_history(top: &Top<'_>) -> Vec<HistoryEvent> {
    history(
        top.input,
        |item: &HistoryItem<'_>| item.role.as_deref() == Some("user") && has_text(item.content),
        |item, events| {
            if item.kind.as_deref() == Some("function_call") {
                events.extend(search_event(item.name.as_deref(), item.arguments));
            }
        },
    )
}

#[derive(Deserialize)]
struct HistoryItem<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<Raw<'a>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Raw<'a>>,
}

// === answers ===

/// Calls in an answer: `output[]` items of type `function_call` /
/// `custom_tool_call`; streamed as `response.output_item.added` / `.done`
/// `item`, and `response.completed`. Built-in calls (`web_search_call`) are not
/// function calls.
pub(super) fn calls(json: &[u8], add: &mut dyn FnMut(Option<Cow<'_, str>>)) -> Result<(), serde_json::Error> {
    let r: ResponsesEvent<'_> = serde_json::from_slice(json)?;
    let nested = r.response.and_then(|r| r.output).unwrap_or_default();
    let items = r.output.unwrap_or_default().into_iter().chain(r.item).chain(nested);
    for item in items {
        if matches!(item.kind.as_deref(), Some("function_call" | "custom_tool_call")) {
            add(item.name);
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(borrow, default)]
    output: Option<Vec<TypedName<'a>>>,
    #[serde(borrow, default)]
    item: Option<TypedName<'a>>,
    #[serde(borrow, default)]
    response: Option<ResponsesOutput<'a>>,
}

#[derive(Deserialize)]
struct ResponsesOutput<'a> {
    #[serde(borrow, default)]
    output: Option<Vec<TypedName<'a>>>,
}

