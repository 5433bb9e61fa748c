//! OpenAI Chat Completions: `{"messages": [...], "tools": [{"type": "function",
//! "function": {"name", "description", "parameters"}}], "tool_choice": ...}`.
//!
//! Also read: custom tools (`{"type": "custom", "custom": {"name", …}}`, client
//! defined, so counted as function tools), and the legacy `functions` array
//! with `function_call`, which carries a registry just as well as `tools`.
//! Any other `type` (a provider's built-in tool) is kept and not counted.

use super::body::Top;
use super::{latest_user_text, Builder, Format, FormatError, Item, Named, ParsedRequest};
use serde::Deserialize;
use std::borrow::Cow;

#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<Named<'a>>,
    #[serde(borrow, default)]
    custom: Option<Named<'a>>,
}

/// `"auto"`, `"none"`, `"required"`, `{"type":"function","function":{"name":..}}`
/// or `{"type":"custom","custom":{"name":..}}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum ToolChoice<'a> {
    Function {
        #[serde(borrow)]
        function: Named<'a>,
    },
    Custom {
        #[serde(borrow)]
        custom: Named<'a>,
    },
    Other(serde::de::IgnoredAny),
}

/// Legacy `function_call`: `"auto"`, `"none"` or `{"name": ..}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum FunctionCall<'a> {
    Named(#[serde(borrow)] Named<'a>),
    Other(serde::de::IgnoredAny),
}

pub(super) fn parse<'a>(body: &'a str, top: &Top<'a>) -> Result<ParsedRequest<'a>, FormatError> {
    let mut b = Builder::new(body, Format::OpenAiChat);
    let mut arrays = Vec::new();
    if let Some(raw) = top.tools {
        arrays.push(b.array(raw, "tools", |b, at, raw| {
            let tool: Tool<'_> = b.read(raw, at)?;
            match tool.kind.as_deref() {
                None | Some("function") => match tool.function {
                    Some(f) => b.named(f, at),
                    None => Err(b.tool_error(at(), "a function tool without a `function` object")),
                },
                Some("custom") => match tool.custom {
                    Some(c) => b.named(c, at),
                    None => Err(b.tool_error(at(), "a custom tool without a `custom` object")),
                },
                Some(_) => Ok(Item::Other),
            }
        })?);
    }
    if let Some(raw) = top.functions {
        arrays.push(b.array(raw, "functions", |b, at, raw| {
            let f: Named<'_> = b.read(raw, at)?;
            b.named(f, at)
        })?);
    }

    let turn = latest_user_text(top.messages, |role| role == Some("user"));

    let mut forced = Vec::new();
    if let Some(raw) = top.tool_choice {
        match b.read::<ToolChoice<'_>>(raw, &|| "tool_choice".to_owned())? {
            ToolChoice::Function { function: Named { name: Some(name), .. } }
            | ToolChoice::Custom { custom: Named { name: Some(name), .. } } => forced.push(name.into_owned()),
            ToolChoice::Function { .. } | ToolChoice::Custom { .. } | ToolChoice::Other(_) => {}
        }
    }
    if let Some(raw) = top.function_call {
        if let FunctionCall::Named(Named { name: Some(name), .. }) = b.read(raw, &|| "function_call".to_owned())? {
            forced.push(name.into_owned());
        }
    }
    Ok(b.finish(arrays, turn, forced))
}
