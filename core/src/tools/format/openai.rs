//! OpenAI Chat Completions: `{"messages": [...], "tools": [{"type": "function",
//! "function": {"name", "description", "parameters"}}], "tool_choice": ...}`.
//!
//! Also read: custom tools (`{"type": "custom", "custom": {"name", …}}`, client
//! defined, so counted as function tools). Any other `type` must be on the
//! allow-list of built-ins ([`BUILTINS`]). The legacy `functions` array and
//! `function_call` are read for every format (see [`super`]).

use super::body::Top;
use super::{
    has_text, history, latest_user_text, search_event, search_parameters, AnswerName, ArrayRole,
    Builder, Dialect, FormatError, Named,
};
use crate::json::shallow::Raw;
use crate::tools::recovery::{self, HistoryEvent};
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

/// `"auto"`, `"none"`, `"required"`, `{"type":"function","function":{"name":..}}`,
/// `{"type":"custom","custom":{"name":..}}`, or `{"type":"allowed_tools",
/// "allowed_tools":{"mode":..,"tools":[{"type":"function","function":{"name":..}}, …]}}`.
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
    Allowed {
        #[serde(borrow)]
        allowed_tools: AllowedTools<'a>,
    },
    Other(serde::de::IgnoredAny),
}

/// The tools an `allowed_tools` choice restricts the model to.
#[derive(Deserialize)]
struct AllowedTools<'a> {
    #[serde(borrow, default)]
    tools: Vec<ToolRef<'a>>,
}

/// One tool an `allowed_tools` choice names.
#[derive(Deserialize)]
struct ToolRef<'a> {
    #[serde(borrow, default)]
    function: Option<Named<'a>>,
    #[serde(borrow, default)]
    custom: Option<Named<'a>>,
}

/// OpenAI Chat Completions, for [`super::Format::OpenAiChat`].
pub(super) const DIALECT: Dialect = Dialect {
    name: "openai-chat",
    paths: &["/chat/completions"],
    builtins: BUILTINS,
    builtins_by_key: false,
    builtins_named: false,
    // Legacy `functions`, or a `tool_choice` naming a `function` object;
    // a body with `messages` and nothing that names another format is read
    // as Chat too, after its tools had their say (`Top::shape`).
    by_top: |top| top.functions.is_some() || top.tool_choice_names_function(),
    sniff_rank: 3,
    by_element: |e| e.function.is_some(),
    read_request: parse,
    read_calls: calls,
    read_history,
    search_tool,
};

/// Built-in types kept untouched in a Chat request (see [`super::BuiltinTools`]).
pub(super) const BUILTINS: &[&str] = &["web_search", "web_search_preview"];

/// Reads the tools and the forcing `tool_choice`; returns the turn.
pub(super) fn parse<'a>(b: &mut Builder<'a, '_>, top: &Top<'a>) -> Result<String, FormatError> {
    if let Some(raw) = top.tools {
        let array = b.array(raw, "tools", ArrayRole::Tools, |b, at, raw| {
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
            ToolChoice::Function {
                function: Named {
                    name: Some(name), ..
                },
            }
            | ToolChoice::Custom {
                custom: Named {
                    name: Some(name), ..
                },
            } => b.forced.push(name.into_owned()),
            ToolChoice::Allowed { allowed_tools } => {
                // Every tool the model may call is kept, as a named one is.
                let named = allowed_tools
                    .tools
                    .into_iter()
                    .filter_map(|t| t.function.or(t.custom));
                b.forced
                    .extend(named.filter_map(|n| n.name.map(Cow::into_owned)));
            }
            ToolChoice::Function { .. } | ToolChoice::Custom { .. } | ToolChoice::Other(_) => {}
        }
    }
    Ok(latest_user_text(top.messages, |role| role == Some("user")))
}

// === the tool-search control tool ===

/// The control tool as a Chat tool.
fn search_tool() -> String {
    serde_json::json!({
        "type": "function",
        "function": {
            "name": recovery::TOOL_NAME,
            "description": recovery::DESCRIPTION,
            "parameters": search_parameters(true),
        },
    })
    .to_string()
}

/// User messages with text, and the assistant's calls of the control tool
/// (`tool_calls[].function`, legacy `function_call`, `arguments` a JSON string).
fn read_history(top: &Top<'_>) -> Vec<HistoryEvent> {
    history(
        top.messages,
        |m: &HistoryMessage<'_>| m.role.as_deref() == Some("user") && has_text(m.content),
        |m, events| {
            let calls = m
                .tool_calls
                .iter()
                .flatten()
                .filter_map(|c| c.function.as_ref());
            for call in calls.chain(m.function_call.as_ref()) {
                events.extend(search_event(call.name.as_deref(), call.arguments));
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
    #[serde(borrow, default)]
    tool_calls: Option<Vec<HistoryCall<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<CallArguments<'a>>,
}

#[derive(Deserialize)]
struct HistoryCall<'a> {
    #[serde(borrow, default)]
    function: Option<CallArguments<'a>>,
}

#[derive(Deserialize)]
struct CallArguments<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Raw<'a>>,
}

// === answers ===

/// Calls in an answer: `choices[].message.tool_calls[].function.name`
/// (`.custom.name`, legacy `function_call.name`); streamed in `choices[].delta`.
pub(super) fn calls(
    json: &[u8],
    add: &mut dyn FnMut(Option<Cow<'_, str>>),
) -> Result<(), serde_json::Error> {
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
