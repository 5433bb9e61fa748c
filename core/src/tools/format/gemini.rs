//! Gemini `generateContent` / `streamGenerateContent`: `{"contents": [{"role",
//! "parts": [{"text"}]}], "tools": [{"functionDeclarations": [{"name",
//! "description", "parameters"}]}, {"googleSearch": {}}], "toolConfig":
//! {"functionCallingConfig": {"mode", "allowedFunctionNames": [...]}}}`.
//!
//! Each declaration is a function tool; tools entries without declarations
//! (`googleSearch`, `codeExecution`, `urlContext`, …, see [`BUILTINS`]) are kept
//! and not counted; an entry with any other key is refused.
//! The API accepts both lowerCamelCase and snake_case keys, so both are read,
//! and an object holding both spellings of one key is refused.
//! The turn is the latest content with role `user` (or no role, which Gemini
//! reads as the user) that has text parts; `functionResponse` parts are skipped.
//! `allowedFunctionNames` restricts the model to the functions it names, so
//! they are all forced.
//!
//! Rewriting removes declarations inside each `functionDeclarations` array
//! and removes a tools entry that is left with none (see
//! [`super::ParsedRequest::rewrite`]).

use super::body::Top;
use super::{
    has_text, history, latest_user_text, search_event, search_parameters, AnswerName, ArrayRole,
    Builder, Dialect, Format, FormatError, Item, Named,
};
use crate::json::shallow::{self, Raw};
use crate::tools::recovery::{self, HistoryEvent};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

/// One `tools` entry: its declarations array, if any, and whether it holds
/// other keys too.
struct Entry<'a> {
    declarations: Option<Raw<'a>>,
    /// The entry's other keys: each must name an allowed built-in.
    others: Vec<Cow<'a, str>>,
    duplicate: bool,
}

impl<'de> Deserialize<'de> for Entry<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(EntryVisitor)
    }
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = Entry<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tools entry object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry<'de>, A::Error> {
        let mut entry = Entry {
            declarations: None,
            others: Vec::new(),
            duplicate: false,
        };
        let mut seen = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "functionDeclarations" || key == "function_declarations" {
                entry.duplicate |= seen;
                seen = true;
                let value: Option<Raw<'de>> = map.next_value()?;
                entry.declarations = value.or(entry.declarations);
            } else {
                map.next_value::<IgnoredAny>()?;
                entry.others.push(key);
            }
        }
        Ok(entry)
    }
}

#[derive(Deserialize)]
struct ToolConfig<'a> {
    #[serde(
        borrow,
        default,
        rename = "functionCallingConfig",
        alias = "function_calling_config"
    )]
    function_calling_config: Option<CallingConfig<'a>>,
}

#[derive(Deserialize)]
struct CallingConfig<'a> {
    #[serde(
        borrow,
        default,
        rename = "allowedFunctionNames",
        alias = "allowed_function_names"
    )]
    allowed_function_names: Option<Vec<Cow<'a, str>>>,
}

/// Gemini `generateContent`, for [`super::Format::Gemini`].
pub(super) const DIALECT: Dialect = Dialect {
    name: "gemini",
    paths: &[":generatecontent", ":streamgeneratecontent"],
    builtins: BUILTINS,
    builtins_by_key: true,
    builtins_named: false,
    by_top: |top| top.contents.is_some(),
    sniff_rank: 0,
    by_element: |e| e.function_declarations.is_some(),
    read_request: parse,
    read_calls: calls,
    read_history,
    search_tool,
};

/// Tools-entry keys of built-in tools, kept untouched (see
/// [`super::BuiltinTools`]); each is also accepted in snake_case.
pub(super) const BUILTINS: &[&str] = &[
    "googleSearch",
    "googleSearchRetrieval",
    "codeExecution",
    "urlContext",
    "computerUse",
    "fileSearch",
    "googleMaps",
    "enterpriseWebSearch",
    "retrieval",
];

/// Reads the tools and the forcing `toolConfig`; returns the turn.
pub(super) fn parse<'a>(b: &mut Builder<'a, '_>, top: &Top<'a>) -> Result<String, FormatError> {
    if let Some(raw) = top.tools {
        let array = b.array(raw, "tools", ArrayRole::Tools, |b, at, raw| {
            let entry: Entry<'_> = b.read(raw, at)?;
            if entry.duplicate {
                return Err(b.tool_error(at(), "functionDeclarations appears more than once"));
            }
            b.spelling(raw, at)?;
            if let Some(key) = entry
                .others
                .iter()
                .find(|k| !b.builtins.allows(Format::Gemini, k))
            {
                let problem = if key.is_empty() {
                    "an empty key"
                } else {
                    "neither function declarations nor an allowed built-in"
                };
                return Err(b.tool_error(at(), problem));
            }
            let Some(declarations) = entry.declarations else {
                return if entry.others.is_empty() {
                    Err(b.tool_error(at(), "an empty tools entry"))
                } else {
                    Ok(Item::Other)
                };
            };
            let path = format!("{}.functionDeclarations", at());
            let inner = b.array(
                declarations,
                &path,
                ArrayRole::Declarations,
                |b, at, raw| {
                    b.spelling(raw, at)?;
                    let named: Named<'_> = b.read(raw, at)?;
                    b.named(named, at)
                },
            )?;
            Ok(Item::Group {
                inner,
                only_key: entry.others.is_empty(),
            })
        })?;
        b.arrays.push(array);
    }

    if let Some(raw) = top.tool_config {
        let config: ToolConfig<'_> = b.read(raw, &|| "toolConfig".to_owned())?;
        let names = config
            .function_calling_config
            .and_then(|c| c.allowed_function_names);
        b.forced
            .extend(names.unwrap_or_default().into_iter().map(Cow::into_owned));
    }
    Ok(latest_user_text(top.contents, |role| {
        matches!(role, None | Some("user"))
    }))
}

// === the tool-search control tool ===

/// The control tool as a function declaration (a JSON Schema in
/// `parametersJsonSchema`, as the declarations of the catalog carry theirs).
fn search_tool() -> String {
    serde_json::json!({
        "name": recovery::TOOL_NAME,
        "description": recovery::DESCRIPTION,
        "parametersJsonSchema": search_parameters(false),
    })
    .to_string()
}

/// User contents with text parts (not only `functionResponse` parts), and the
/// model's `functionCall` parts calling the control tool (`args` an object).
fn read_history(top: &Top<'_>) -> Vec<HistoryEvent> {
    history(
        top.contents,
        |c: &HistoryContent<'_>| {
            matches!(c.role.as_deref(), None | Some("user")) && has_text(c.parts)
        },
        |c, events| {
            if c.role.as_deref() != Some("model") {
                return;
            }
            let Some(parts) = c
                .parts
                .and_then(|p| shallow::from_str::<Vec<CallPart<'_>>>(p.get()).ok())
            else {
                return;
            };
            for call in parts.iter().filter_map(|p| p.function_call.as_ref()) {
                events.extend(search_event(call.name.as_deref(), call.args));
            }
        },
    )
}

#[derive(Deserialize)]
struct HistoryContent<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    parts: Option<Raw<'a>>,
}

#[derive(Deserialize)]
struct CallPart<'a> {
    #[serde(borrow, default, rename = "functionCall", alias = "function_call")]
    function_call: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    args: Option<Raw<'a>>,
}

// === answers ===

/// Calls in an answer: `candidates[].content.parts[].functionCall.name`,
/// streamed the same (one response, or a JSON array of them).
pub(super) fn calls(
    json: &[u8],
    add: &mut dyn FnMut(Option<Cow<'_, str>>),
) -> Result<(), serde_json::Error> {
    let responses = match serde_json::from_slice::<OneOrMany<GeminiResponse<'_>>>(json)? {
        OneOrMany::One(r) => vec![r],
        OneOrMany::Many(rs) => rs,
    };
    for r in responses {
        for candidate in r.candidates.unwrap_or_default() {
            let parts = candidate.content.and_then(|c| c.parts).unwrap_or_default();
            for part in parts {
                add(part.function_call.and_then(|f| f.name));
            }
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

#[derive(Deserialize)]
struct GeminiResponse<'a> {
    #[serde(borrow, default)]
    candidates: Option<Vec<GeminiCandidate<'a>>>,
}

#[derive(Deserialize)]
struct GeminiCandidate<'a> {
    #[serde(borrow, default)]
    content: Option<GeminiContent<'a>>,
}

#[derive(Deserialize)]
struct GeminiContent<'a> {
    #[serde(borrow, default)]
    parts: Option<Vec<GeminiPart<'a>>>,
}

#[derive(Deserialize)]
struct GeminiPart<'a> {
    #[serde(borrow, default, rename = "functionCall", alias = "function_call")]
    function_call: Option<AnswerName<'a>>,
}
