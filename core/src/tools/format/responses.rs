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
    has_text, history, latest_user_text, search_event, search_parameters, ArrayRole, Builder,
    Dialect, FormatError, Item, TypedName,
};
use crate::json::shallow::{self, Raw};
use crate::tools::recovery::{self, HistoryEvent};
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
    /// The tool's JSON Schema, read for its words only.
    #[serde(borrow, default)]
    parameters: Option<Raw<'a>>,
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
    by_element: |e| {
        e.kind.as_deref() == Some("function") && e.name.is_some() && e.function.is_none()
    },
    read_request: parse,
    read_calls: calls,
    read_history,
    search_tool,
};

/// Built-in types kept untouched (see [`super::BuiltinTools`]). `mcp` is
/// not here: it brings an MCP server's tools, and is read as a tool source
/// ([`super::sources`]); `namespace` holds function tools, and is read as a
/// group of them.
pub(super) const BUILTINS: &[&str] = &[
    "web_search",
    "web_search_*",
    "web_search_preview",
    "web_search_preview_*",
    "file_search",
    "code_interpreter",
    "computer",
    "computer_use",
    "computer_use_preview",
    "image_generation",
    "local_shell",
    "shell",
    "apply_patch",
    "tool_search",
];

/// Reads the tools and the forcing `tool_choice`; returns the turn.
pub(super) fn parse<'a>(b: &mut Builder<'a, '_>, top: &Top<'a>) -> Result<String, FormatError> {
    if let Some(raw) = top.tools {
        let array = b.array(raw, "tools", ArrayRole::Tools, |b, at, raw| {
            let keys = b.spelling(raw, at)?;
            let tool: Tool<'_> = b.read(raw, at)?;
            match (tool.kind.as_deref(), tool.name) {
                (None | Some("function" | "custom"), Some(name)) => {
                    Ok(b.function(name, tool.description, tool.parameters))
                }
                (None | Some("function" | "custom"), None) => {
                    Err(b.tool_error(at(), "a function tool without a name"))
                }
                (Some("mcp"), _) => b.responses_mcp(raw, at),
                (Some("namespace"), _) => namespace(b, raw, at),
                (Some(kind), _) => b.builtin(&keys, Some(kind), at),
            }
        })?;
        b.arrays.push(array);
    }

    if let Some(raw) = top.tool_choice {
        b.forced.extend(chosen(raw));
    }
    Ok(match top.input {
        Some(raw) => match shallow::from_str::<Cow<'_, str>>(raw.get()) {
            Ok(text) => text.into_owned(),
            Err(_) => latest_user_text(Some(raw), |role| role == Some("user")),
        },
        None => String::new(),
    })
}

/// The functions a `tool_choice` forces: `{"type": "function" | "custom",
/// "name": …}` names one; `{"type": "allowed_tools", "mode": …, "tools":
/// [{"type": "function", "name": …}, …]}` restricts the model to those it
/// lists, so every one is kept. Anything else names nothing.
fn chosen(raw: Raw<'_>) -> Vec<String> {
    #[derive(Deserialize)]
    struct Choice<'a> {
        #[serde(borrow, default, rename = "type")]
        kind: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        tools: Option<Vec<Tool<'a>>>,
    }
    let Ok(choice) = shallow::from_str::<Choice<'_>>(raw.get()) else {
        return Vec::new();
    };
    let function = |kind: Option<&str>| matches!(kind, Some("function" | "custom"));
    match choice.kind.as_deref() {
        kind if function(kind) => choice.name.map(Cow::into_owned).into_iter().collect(),
        Some("allowed_tools") => choice
            .tools
            .unwrap_or_default()
            .into_iter()
            .filter(|t| function(t.kind.as_deref()))
            .filter_map(|t| t.name.map(Cow::into_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// A `{"type": "namespace", "name", "description", "tools": [...]}` tool: a
/// group of function (and custom) tools, each ranked and bounded like any
/// other; a namespace left with none of them is dropped whole.
fn namespace<'a>(
    b: &mut Builder<'a, '_>,
    raw: Raw<'a>,
    at: &dyn Fn() -> String,
) -> Result<Item, FormatError> {
    #[derive(Deserialize)]
    struct Namespace<'a> {
        #[serde(borrow, default)]
        tools: Option<Raw<'a>>,
    }
    let group: Namespace<'_> = b.read(raw, at)?;
    let Some(tools) = group.tools else {
        return Err(b.tool_error(at(), "a namespace without tools"));
    };
    let path = format!("{}.tools", at());
    let inner = b.array(tools, &path, ArrayRole::Declarations, |b, at, raw| {
        b.spelling(raw, at)?;
        let tool: Tool<'_> = b.read(raw, at)?;
        match (tool.kind.as_deref(), tool.name) {
            (None | Some("function" | "custom"), Some(name)) => {
                Ok(b.function(name, tool.description, tool.parameters))
            }
            _ => Err(b.tool_error(at(), "a namespace may hold only function and custom tools")),
        }
    })?;
    Ok(Item::Group {
        inner,
        only_key: true,
    })
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
pub(super) fn calls(
    json: &[u8],
    add: &mut dyn FnMut(Option<Cow<'_, str>>),
) -> Result<(), serde_json::Error> {
    let r: ResponsesEvent<'_> = serde_json::from_slice(json)?;
    let nested = r.response.and_then(|r| r.output).unwrap_or_default();
    let items = r
        .output
        .unwrap_or_default()
        .into_iter()
        .chain(r.item)
        .chain(nested);
    for item in items {
        if matches!(
            item.kind.as_deref(),
            Some("function_call" | "custom_tool_call")
        ) {
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
