//! Gemini `generateContent` / `streamGenerateContent`: `{"contents": [{"role",
//! "parts": [{"text"}]}], "tools": [{"functionDeclarations": [{"name",
//! "description", "parameters"}]}, {"googleSearch": {}}], "toolConfig":
//! {"functionCallingConfig": {"mode", "allowedFunctionNames": [...]}}}`.
//!
//! Each declaration is a function tool; tools entries without declarations
//! (`googleSearch`, `codeExecution`, `urlContext`, …) are kept and not counted.
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
use super::{latest_user_text, Builder, Format, FormatError, Item, Named, ParsedRequest};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// One `tools` entry: its declarations array, if any, and whether it holds
/// other keys too.
struct Entry<'a> {
    declarations: Option<&'a RawValue>,
    others: usize,
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
        let mut entry = Entry { declarations: None, others: 0, duplicate: false };
        let mut seen = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "functionDeclarations" || key == "function_declarations" {
                entry.duplicate |= seen;
                seen = true;
                let value: Option<&'de RawValue> = map.next_value()?;
                entry.declarations = value.or(entry.declarations);
            } else {
                map.next_value::<IgnoredAny>()?;
                entry.others += 1;
            }
        }
        Ok(entry)
    }
}

#[derive(Deserialize)]
struct ToolConfig<'a> {
    #[serde(borrow, default, rename = "functionCallingConfig", alias = "function_calling_config")]
    function_calling_config: Option<CallingConfig<'a>>,
}

#[derive(Deserialize)]
struct CallingConfig<'a> {
    #[serde(borrow, default, rename = "allowedFunctionNames", alias = "allowed_function_names")]
    allowed_function_names: Option<Vec<Cow<'a, str>>>,
}

pub(super) fn parse<'a>(body: &'a str, top: &Top<'a>) -> Result<ParsedRequest<'a>, FormatError> {
    let mut b = Builder::new(body, Format::Gemini);
    let mut arrays = Vec::new();
    if let Some(raw) = top.tools {
        arrays.push(b.array(raw, "tools", |b, at, raw| {
            let entry: Entry<'_> = b.read(raw, at)?;
            if entry.duplicate {
                return Err(b.tool_error(at(), "functionDeclarations appears more than once"));
            }
            let Some(declarations) = entry.declarations else {
                return Ok(Item::Other);
            };
            let path = format!("{}.functionDeclarations", at());
            let inner = b.array(declarations, &path, |b, at, raw| {
                let named: Named<'_> = b.read(raw, at)?;
                b.named(named, at)
            })?;
            Ok(Item::Group { inner, only_key: entry.others == 0 })
        })?);
    }

    let turn = latest_user_text(top.contents, |role| matches!(role, None | Some("user")));

    let mut forced = Vec::new();
    if let Some(raw) = top.tool_config {
        let config: ToolConfig<'_> = b.read(raw, &|| "toolConfig".to_owned())?;
        let names = config.function_calling_config.and_then(|c| c.allowed_function_names);
        forced.extend(names.unwrap_or_default().into_iter().map(Cow::into_owned));
    }
    Ok(b.finish(arrays, turn, forced))
}
