//! OpenAI Chat Completions: `{"messages": [...], "tools": [{"type": "function",
//! "function": {"name", "description", "parameters"}}], "tool_choice": ...}`.
//!
//! Also read: custom tools (`{"type": "custom", "custom": {"name", …}}`, client
//! defined, so counted as function tools). Any other `type` must be on the
//! allow-list of built-ins ([`BUILTINS`]). The legacy `functions` array and
//! `function_call` are read for every format (see [`super`]).

use super::body::Top;
use super::{latest_user_text, AnswerName, Builder, Dialect, FormatError, Named};
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

/// OpenAI Chat Completions, for [`super::Format::OpenAiChat`].
pub(super) const DIALECT: Dialect = Dialect {
    name: "openai-chat",
    paths: &["/chat/completions"],
    builtins: BUILTINS,
    builtins_by_key: false,
    builtins_named: false,
    // `messages` (without Anthropic's `system`), legacy `functions`, or a
    // `tool_choice` naming a `function` object.
    by_top: |top| top.messages.is_some() || top.functions.is_some() || top.tool_choice_names_function(),
    sniff_rank: 3,
    by_element: |e| e.function.is_some(),
    read_request: parse,
    read_calls: calls,
};

/// Built-in types kept untouched in a Chat request (see [`super::BuiltinTools`]).
pub(super) const BUILTINS: &[&str] = &["web_search", "web_search_preview"];

/// Reads the tools and the forcing `tool_choice`; returns the turn.
pub(super) fn parse<'a>(b: &mut Builder<'a, '_>, top: &Top<'a>) -> Result<String, FormatError> {
    if let Some(raw) = top.tools {
        let array = b.array(raw, "tools", |b, at, raw| {
            let keys = b.spelling(raw, at)?;
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
                Some(kind) => b.builtin(&keys, Some(kind), at),
            }
        })?;
        b.arrays.push(array);
    }

    if let Some(raw) = top.tool_choice {
        match b.read::<ToolChoice<'_>>(raw, &|| "tool_choice".to_owned())? {
            ToolChoice::Function { function: Named { name: Some(name), .. } }
            | ToolChoice::Custom { custom: Named { name: Some(name), .. } } => b.forced.push(name.into_owned()),
            ToolChoice::Function { .. } | ToolChoice::Custom { .. } | ToolChoice::Other(_) => {}
        }
    }
    Ok(latest_user_text(top.messages, |role| role == Some("user")))
}

// === answers ===

/// Calls in an answer: `choices[].message.tool_calls[].function.name`
/// (`.custom.name`, legacy `function_call.name`); streamed in `choices[].delta`.
pub(super) fn calls(json: &[u8], add: &mut dyn FnMut(Option<Cow<'_, str>>)) -> Result<(), serde_json::Error> {
    let r: ChatResponse<'_> = serde_json::from_slice(json)?;
    for choice in r.choices.unwrap_or_default() {
        for message in [choice.message, choice.delta].into_iter().flatten() {
            for call in message.tool_calls.unwrap_or_default() {
                add(call.function.and_then(|f| f.name));
                add(call.custom.and_then(|c| c.name));
            }
            add(message.function_call.and_then(|f| f.name));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct ChatResponse<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<ChatChoice<'a>>>,
}

#[derive(Deserialize)]
struct ChatChoice<'a> {
    #[serde(borrow, default)]
    message: Option<ChatMessage<'a>>,
    #[serde(borrow, default)]
    delta: Option<ChatMessage<'a>>,
}

#[derive(Deserialize)]
struct ChatMessage<'a> {
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ChatCall<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<AnswerName<'a>>,
}

#[derive(Deserialize)]
struct ChatCall<'a> {
    #[serde(borrow, default)]
    function: Option<AnswerName<'a>>,
    #[serde(borrow, default)]
    custom: Option<AnswerName<'a>>,
}

