//! The top level of a request body, read key by key.
//!
//! Only the keys a decision needs are kept (borrowed, unparsed); every other
//! value is skipped. Keys that carry or force tools are checked for duplicates
//! and for case variants (see the module docs of [`super`]).

use super::tools::fold_eq;
use super::{BuiltinTools, Format, FormatError};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use crate::shallow::{self, Raw};
use std::borrow::Cow;
use std::fmt;

/// The top-level values keyhole reads; `None` when absent or `null`.
#[derive(Default)]
pub(super) struct Top<'a> {
    pub tools: Option<Raw<'a>>,
    /// OpenAI Chat's legacy `functions` array.
    pub functions: Option<Raw<'a>>,
    pub tool_choice: Option<Raw<'a>>,
    /// OpenAI Chat's legacy `function_call`.
    pub function_call: Option<Raw<'a>>,
    /// Gemini's `toolConfig` (or `tool_config`).
    pub tool_config: Option<Raw<'a>>,
    pub messages: Option<Raw<'a>>,
    pub input: Option<Raw<'a>>,
    pub contents: Option<Raw<'a>>,
    pub system: Option<Raw<'a>>,
    /// The first key problem met; reported after the whole body parsed, so a
    /// syntax error later in the body is not masked by it.
    problem: Option<FormatError>,
}

/// Keys read, with their slot. The first five carry or force tools: they are
/// checked for duplicates and case variants.
const KEYS: [(&str, Slot); 10] = [
    ("tools", Slot::Tools),
    ("functions", Slot::Functions),
    ("tool_choice", Slot::ToolChoice),
    ("function_call", Slot::FunctionCall),
    ("toolConfig", Slot::ToolConfig),
    ("tool_config", Slot::ToolConfig),
    ("messages", Slot::Messages),
    ("input", Slot::Input),
    ("contents", Slot::Contents),
    ("system", Slot::System),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Tools,
    Functions,
    ToolChoice,
    FunctionCall,
    ToolConfig,
    Messages,
    Input,
    Contents,
    System,
}

impl Slot {
    fn guarded(self) -> bool {
        matches!(self, Slot::Tools | Slot::Functions | Slot::ToolChoice | Slot::FunctionCall | Slot::ToolConfig)
    }
}

impl<'a> Top<'a> {
    /// Reads the top level of `body`.
    pub fn read(body: &'a str) -> Result<Self, FormatError> {
        if !body.trim_start().starts_with('{') {
            return Err(FormatError::NotAnObject);
        }
        let mut de = serde_json::Deserializer::from_str(body);
        let top = de.deserialize_map(TopVisitor).map_err(json_error)?;
        de.end().map_err(json_error)?;
        match top.problem {
            Some(problem) => Err(problem),
            None => Ok(top),
        }
    }

    /// Whether the body has a tools array to read (`tools` or `functions`).
    pub fn carries_tools(&self) -> bool {
        self.tools.is_some() || self.functions.is_some()
    }

    /// Whether the only tools value is an empty array.
    pub fn tools_are_empty(&self) -> bool {
        self.functions.is_none() && self.tools.is_some_and(|t| t.get().trim() == "[]")
    }

    /// The format the body's shape names, if any (see [`super::parse`]).
    ///
    /// Top-level keys decide first, because a rewrite never changes them: a
    /// body and its rewrite are read as the same format. Only a body without
    /// such keys is judged by its tools: the first element shaped like one
    /// format's function tool, else the first format whose built-ins
    /// allow-list holds every element.
    pub fn shape(&self, builtins: &BuiltinTools) -> Option<Format> {
        let mut by_rank = Format::ALL;
        by_rank.sort_by_key(|f| f.dialect().sniff_rank);
        if let Some(format) = by_rank.into_iter().find(|f| (f.dialect().by_top)(self)) {
            return Some(format);
        }
        // Not an array of objects: no element decides, and the body is
        // refused as carrying tools in an unknown format.
        let elements: Vec<ElementShape<'_>> =
            self.tools.and_then(|t| shallow::from_str(t.get()).ok()).unwrap_or_default();
        let shaped = |e: &ElementShape<'_>| Format::ALL.into_iter().find(|f| (f.dialect().by_element)(e));
        if let Some(format) = elements.iter().find_map(shaped) {
            return Some(format);
        }
        let all_builtin = |format: Format| {
            !elements.is_empty() && elements.iter().all(|e| e.builtin_of(format, builtins))
        };
        Format::ALL.into_iter().find(|f| all_builtin(*f))
    }

    /// Whether `tool_choice` names a `function` object (Chat's shape).
    pub fn tool_choice_names_function(&self) -> bool {
        self.tool_choice
            .is_some_and(|c| shallow::from_str::<ChoiceShape>(c.get()).is_ok_and(|c| c.function.is_some()))
    }
}

fn json_error(source: serde_json::Error) -> FormatError {
    FormatError::Json {
        format: "JSON",
        at: format!("line {} column {}", source.line(), source.column()),
        problem: super::problem_of(&source),
        source,
    }
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
        let mut top = Top::default();
        let mut seen: Vec<Slot> = Vec::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let slot = KEYS.iter().find(|(k, _)| *k == key).map(|(_, s)| *s);
            let Some(slot) = slot else {
                if top.problem.is_none() {
                    let variant = KEYS.iter().find(|(k, s)| s.guarded() && fold_eq(k, &key));
                    if let Some((k, _)) = variant {
                        top.problem = Some(FormatError::CaseVariantKey { key: k });
                    }
                }
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if slot.guarded() && seen.contains(&slot) && top.problem.is_none() {
                let name = KEYS.iter().find(|(_, s)| *s == slot).map_or("tools", |(k, _)| *k);
                top.problem = Some(FormatError::DuplicateKey { key: name });
            }
            seen.push(slot);
            let value: Option<Raw<'de>> = map.next_value()?;
            let target = match slot {
                Slot::Tools => &mut top.tools,
                Slot::Functions => &mut top.functions,
                Slot::ToolChoice => &mut top.tool_choice,
                Slot::FunctionCall => &mut top.function_call,
                Slot::ToolConfig => &mut top.tool_config,
                Slot::Messages => &mut top.messages,
                Slot::Input => &mut top.input,
                Slot::Contents => &mut top.contents,
                Slot::System => &mut top.system,
            };
            // `Option<Raw<'_>>` reads `null` as `None`: a null is the same as
            // an absent key, both to keyhole and to the providers.
            *target = value.or(*target);
        }
        Ok(top)
    }
}

/// The keys of one tool element that tell formats apart (each dialect's
/// `by_element` reads them).
#[derive(Deserialize)]
pub(super) struct ElementShape<'a> {
    /// Every other key, for built-ins named by key.
    #[serde(borrow, flatten)]
    keys: std::collections::BTreeMap<Cow<'a, str>, IgnoredAny>,
    #[serde(default)]
    pub function: Option<IgnoredAny>,
    #[serde(default, rename = "functionDeclarations", alias = "function_declarations")]
    pub function_declarations: Option<IgnoredAny>,
    #[serde(default)]
    pub input_schema: Option<IgnoredAny>,
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default)]
    pub name: Option<IgnoredAny>,
}

impl ElementShape<'_> {
    /// Whether the element is a built-in of `format`, by its type or, where
    /// the format names built-ins by key, by its keys.
    fn builtin_of(&self, format: Format, builtins: &BuiltinTools) -> bool {
        if format.dialect().builtins_by_key {
            !self.keys.is_empty() && self.keys.keys().all(|k| builtins.allows(format, k))
        } else {
            self.kind.as_deref().is_some_and(|k| builtins.allows(format, k))
        }
    }
}

#[derive(Deserialize)]
struct ChoiceShape {
    #[serde(default)]
    function: Option<IgnoredAny>,
}
