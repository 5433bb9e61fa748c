//! Anthropic Messages: `{"system", "messages": [...], "tools": [{"name",
//! "description", "input_schema"}], "tool_choice": {"type": "tool", "name"}}`.
//!
//! Client tools have no `type` (or `type: "custom"`) and count against the
//! budget; server tools (`{"type": "web_search_20250305", "name": "web_search"}`,
//! `bash_…`, `text_editor_…`, `code_execution_…`) are kept and not counted.
//! The turn is the latest `user` message with text: in a tool loop the latest
//! user message often holds only `tool_result` blocks, which are skipped.

use super::body::Top;
use super::{latest_user_text, Builder, Format, FormatError, Item, ParsedRequest};
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

pub(super) fn parse<'a>(body: &'a str, top: &Top<'a>) -> Result<ParsedRequest<'a>, FormatError> {
    let mut b = Builder::new(body, Format::Anthropic);
    let mut arrays = Vec::new();
    if let Some(raw) = top.tools {
        arrays.push(b.array(raw, "tools", |b, at, raw| {
            let tool: Tool<'_> = b.read(raw, at)?;
            match (tool.kind.as_deref(), tool.name) {
                (None | Some("custom"), Some(name)) => Ok(b.function(name, tool.description)),
                (None | Some("custom"), None) => Err(b.tool_error(at(), "a client tool without a name")),
                (Some(_), _) => Ok(Item::Other),
            }
        })?);
    }

    let turn = latest_user_text(top.messages, |role| role == Some("user"));

    let mut forced = Vec::new();
    if let Some(raw) = top.tool_choice {
        // `auto`, `any`, `none` name nothing; `{"type": "tool", "name"}` does.
        if let Ok(choice) = serde_json::from_str::<Tool<'_>>(raw.get()) {
            if let (Some("tool"), Some(name)) = (choice.kind.as_deref(), choice.name) {
                forced.push(name.into_owned());
            }
        }
    }
    Ok(b.finish(arrays, turn, forced))
}
