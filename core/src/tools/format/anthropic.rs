//! Anthropic Messages: `{"system", "messages": [...], "tools": [{"name",
//! "description", "input_schema"}], "tool_choice": {"type": "tool", "name"}}`.
//!
//! Client tools have no `type` (or `type: "custom"`) and count against the
//! budget; server tools (`{"type": "web_search_20250305", "name": "web_search"}`,
//! `bash_…`, `text_editor_…`, `code_execution_…`) are kept and not counted when
//! their type is on [`BUILTINS`] and they carry no description or schema.
//! The turn is the latest `user` message with text: in a tool loop the latest
//! user message often holds only `tool_result` blocks, which are skipped.

use super::body::Top;
use super::{
    has_text, history, latest_user_text, search_event, search_parameters, ArrayRole, Builder,
    Dialect, FormatError, TypedName,
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
    input_schema: Option<Raw<'a>>,
}

/// Anthropic Messages, for [`super::Format::Anthropic`].
pub(super) const DIALECT: Dialect = Dialect {
    name: "anthropic",
    paths: &["/messages"],
    builtins: BUILTINS,
    builtins_by_key: false,
    builtins_named: true,
    // Anthropic's own members: `anthropic_version` (Vertex AI and Bedrock
    // bodies, on paths of their own), `mcp_servers`, or `system` beside
    // `messages`.
    by_top: |top| {
        top.anthropic_version.is_some()
            || top.mcp_servers.is_some()
            || (top.messages.is_some() && top.system.is_some())
    },
    sniff_rank: 2,
    by_element: |e| e.input_schema.is_some(),
    read_request: parse,
    read_calls: calls,
    read_history,
    search_tool,
};

/// Server-tool types kept untouched (see [`super::BuiltinTools`]): every
/// date version of each family on Anthropic's tool reference.
/// `mcp_toolset` is not here: it brings an MCP server's tools, and is read
/// as a tool source ([`super::sources`]).
pub(super) const BUILTINS: &[&str] = &[
    "web_search_*",
    "web_fetch_*",
    "code_execution_*",
    "bash_*",
    "text_editor_*",
    "computer_*",
    "memory_*",
    "tool_search_tool_regex_*",
    "tool_search_tool_bm25_*",
];

/// Reads the tools and the forcing `tool_choice`; returns the turn.
pub(super) fn parse<'a>(b: &mut Builder<'a, '_>, top: &Top<'a>) -> Result<String, FormatError> {
    if let Some(raw) = top.tools {
        let array = b.array(raw, "tools", ArrayRole::Tools, |b, at, raw| {
            let keys = b.spelling(raw, at)?;
            let tool: Tool<'_> = b.read(raw, at)?;
            match (tool.kind.as_deref(), tool.name) {
                (None | Some("custom"), Some(name)) => {
                    Ok(b.function(name, tool.description, tool.input_schema))
                }
                (None | Some("custom"), None) => {
                    Err(b.tool_error(at(), "a client tool without a name"))
                }
                (Some("mcp_toolset"), _) => b.anthropic_toolset(raw, at),
                (Some(kind), _) => b.builtin(&keys, Some(kind), at),
            }
        })?;
        b.arrays.push(array);
    }

    if let Some(raw) = top.tool_choice {
        // `auto`, `any`, `none` name nothing; `{"type": "tool", "name"}` does.
        if let Ok(choice) = shallow::from_str::<Tool<'_>>(raw.get()) {
            if let (Some("tool"), Some(name)) = (choice.kind.as_deref(), choice.name) {
                b.forced.push(name.into_owned());
            }
        }
    }
    Ok(latest_user_text(top.messages, |role| role == Some("user")))
}

// === the tool-search control tool ===

/// The control tool as an Anthropic client tool.
fn search_tool() -> String {
    serde_json::json!({
        "name": recovery::TOOL_NAME,
        "description": recovery::DESCRIPTION,
        "input_schema": search_parameters(false),
    })
    .to_string()
}

/// User messages with text (not only `tool_result` blocks), and the
/// assistant's `tool_use` blocks calling the control tool (`input` an object).
fn read_history(top: &Top<'_>) -> Vec<HistoryEvent> {
    history(
        top.messages,
        |m: &HistoryMessage<'_>| m.role.as_deref() == Some("user") && has_text(m.content),
        |m, events| {
            if m.role.as_deref() != Some("assistant") {
                return;
            }
            let Some(blocks) = m
                .content
                .and_then(|c| shallow::from_str::<Vec<ToolUse<'_>>>(c.get()).ok())
            else {
                return;
            };
            for block in blocks
                .iter()
                .filter(|b| b.kind.as_deref() == Some("tool_use"))
            {
                events.extend(search_event(block.name.as_deref(), block.input));
            }
        },
    )
}

#[derive(Deserialize)]
struct HistoryMessage<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<Raw<'a>>,
}

#[derive(Deserialize)]
struct ToolUse<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<Raw<'a>>,
}

// === answers ===

/// Calls in an answer: `content[]` blocks of type `tool_use`; streamed as
/// `content_block_start`. Server tools (`server_tool_use`) are not function
/// calls.
pub(super) fn calls(
    json: &[u8],
    add: &mut dyn FnMut(Option<Cow<'_, str>>),
) -> Result<(), serde_json::Error> {
    let r: AnthropicEvent<'_> = serde_json::from_slice(json)?;
    let nested = r.message.and_then(|m| m.content).unwrap_or_default();
    let blocks = r
        .content
        .unwrap_or_default()
        .into_iter()
        .chain(r.content_block)
        .chain(nested);
    for block in blocks {
        if block.kind.as_deref() == Some("tool_use") {
            add(block.name);
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(borrow, default)]
    content: Option<Vec<TypedName<'a>>>,
    #[serde(borrow, default)]
    content_block: Option<TypedName<'a>>,
    #[serde(borrow, default)]
    message: Option<AnthropicMessage<'a>>,
}

#[derive(Deserialize)]
struct AnthropicMessage<'a> {
    #[serde(borrow, default)]
    content: Option<Vec<TypedName<'a>>>,
}
