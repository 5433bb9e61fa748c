//! OpenAI Responses: `{"input": "…" | [items], "tools": [{"type": "function",
//! "name", "description", "parameters"}], "tool_choice": ...}`.
//!
//! Function and custom tools carry their `name` at the top level of the tool
//! object and count against the budget; built-in tools (`web_search`,
//! `file_search`, `code_interpreter`, `mcp`, …) are kept and not counted.
//! The turn is `input` when it is a string, else the latest input item with
//! role `user` (content a string or `input_text` parts).

use super::body::Top;
use super::{latest_user_text, Builder, Format, FormatError, Item, ParsedRequest};
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

pub(super) fn parse<'a>(body: &'a str, top: &Top<'a>) -> Result<ParsedRequest<'a>, FormatError> {
    let mut b = Builder::new(body, Format::OpenAiResponses);
    let mut arrays = Vec::new();
    if let Some(raw) = top.tools {
        arrays.push(b.array(raw, "tools", |b, at, raw| {
            let tool: Tool<'_> = b.read(raw, at)?;
            match (tool.kind.as_deref(), tool.name) {
                (None | Some("function" | "custom"), Some(name)) => Ok(b.function(name, tool.description)),
                (None | Some("function" | "custom"), None) => Err(b.tool_error(at(), "a function tool without a name")),
                (Some(_), _) => Ok(Item::Other),
            }
        })?);
    }

    let turn = match top.input {
        Some(raw) => match serde_json::from_str::<Cow<'_, str>>(raw.get()) {
            Ok(text) => text.into_owned(),
            Err(_) => latest_user_text(Some(raw), |role| role == Some("user")),
        },
        None => String::new(),
    };

    let mut forced = Vec::new();
    if let Some(raw) = top.tool_choice {
        if let Some(name) = named_choice(raw) {
            forced.push(name);
        }
    }
    Ok(b.finish(arrays, turn, forced))
}

/// `{"type": "function" | "custom", "name": …}`; anything else names nothing.
fn named_choice(raw: &RawValue) -> Option<String> {
    let tool: Tool<'_> = serde_json::from_str(raw.get()).ok()?;
    match tool.kind.as_deref() {
        Some("function" | "custom") => tool.name.map(Cow::into_owned),
        _ => None,
    }
}
