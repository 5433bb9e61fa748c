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
use super::{latest_user_text, Builder, FormatError};
use serde::Deserialize;
use serde_json::value::RawValue;
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
        let array = b.array(raw, "tools", |b, at, raw| {
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
        Some(raw) => match serde_json::from_str::<Cow<'_, str>>(raw.get()) {
            Ok(text) => text.into_owned(),
            Err(_) => latest_user_text(Some(raw), |role| role == Some("user")),
        },
        None => String::new(),
    })
}

/// `{"type": "function" | "custom", "name": …}`; anything else names nothing.
fn named_choice(raw: &RawValue) -> Option<String> {
    let tool: Tool<'_> = serde_json::from_str(raw.get()).ok()?;
    match tool.kind.as_deref() {
        Some("function" | "custom") => tool.name.map(Cow::into_owned),
        _ => None,
    }
}
