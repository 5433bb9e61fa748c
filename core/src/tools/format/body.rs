//! The top level of a request body, read key by key.
//!
//! Only the keys a decision needs are kept (borrowed, unparsed); every other
//! value is skipped. Keys that carry or force tools are checked for duplicates
//! and for case variants (see the module docs of [`super`]).

use super::memo::Known;
use super::tools::fold_eq;
use super::{BuiltinTools, Format, FormatError, Memo};
use crate::json::shallow::{self, Raw};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
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
    /// Anthropic's `mcp_servers` (MCP servers the provider reads itself).
    pub mcp_servers: Option<Raw<'a>>,
    /// Anthropic's `anthropic_version` (bodies sent through Vertex AI and
    /// Bedrock carry it, on paths that name no format).
    pub anthropic_version: Option<Raw<'a>>,
    /// The first key problem met; reported after the whole body parsed, so a
    /// syntax error later in the body is not masked by it.
    problem: Option<FormatError>,
    /// Tools arrays found in the memo while walking: each value, and the
    /// entry that holds its bytes.
    pub known: Vec<(Raw<'a>, Known)>,
}

/// Keys read, with their slot. The first five carry or force tools: they are
/// checked for duplicates and case variants.
const KEYS: [(&str, Slot); 12] = [
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
    ("mcp_servers", Slot::McpServers),
    ("anthropic_version", Slot::AnthropicVersion),
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
    McpServers,
    AnthropicVersion,
}

impl Slot {
    fn guarded(self) -> bool {
        matches!(
            self,
            Slot::Tools
                | Slot::Functions
                | Slot::ToolChoice
                | Slot::FunctionCall
                | Slot::ToolConfig
                | Slot::McpServers
        )
    }
}

impl<'a> Top<'a> {
    /// Reads the top level of `body`, checking all of it as JSON; a tools
    /// array `memo` holds byte for byte was checked when it was remembered.
    pub fn read(body: &'a str, memo: Option<&Memo>) -> Result<Self, FormatError> {
        if !body.trim_start().starts_with('{') {
            return Err(FormatError::NotAnObject);
        }
        match Self::walk(body, memo) {
            Some(top) => top.checked(),
            None => Self::read_whole(body),
        }
    }

    /// The top level read by serde_json in one go: the reference reading,
    /// and the one whose error is reported.
    pub(super) fn read_whole(body: &'a str) -> Result<Self, FormatError> {
        let mut de = serde_json::Deserializer::from_str(body);
        let top = de.deserialize_map(TopVisitor).map_err(json_error)?;
        de.end().map_err(json_error)?;
        top.checked()
    }

    /// The top level, unless a key problem was noted.
    pub(super) fn checked(self) -> Result<Self, FormatError> {
        match self.problem {
            Some(problem) => Err(problem),
            None => Ok(self),
        }
    }

    /// The top level walked member by member, each key and value checked
    /// by serde_json, except a tools array `memo` holds. `None` on anything
    /// unexpected: the body is then read whole ([`Self::read_whole`]).
    pub(super) fn walk(body: &'a str, memo: Option<&Memo>) -> Option<Self> {
        let bytes = body.as_bytes();
        let ws = |mut at: usize| {
            while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                at += 1;
            }
            at
        };
        let mut top = Top::default();
        let mut seen: Vec<Slot> = Vec::new();
        let mut at = ws(0);
        (bytes.get(at) == Some(&b'{')).then_some(())?;
        at = ws(at + 1);
        if bytes.get(at) == Some(&b'}') {
            return (ws(at + 1) == bytes.len()).then_some(top);
        }
        loop {
            (bytes.get(at) == Some(&b'"')).then_some(())?;
            let key_end = shallow::string_end(bytes, at)?;
            let key: Cow<'a, str> = serde_json::from_str(body.get(at..key_end)?).ok()?;
            at = ws(key_end);
            (bytes.get(at) == Some(&b':')).then_some(())?;
            at = ws(at + 1);
            let rest = body.get(at..)?;
            let slot = top.slot_of(&key, &mut seen);
            let carries_tools = matches!(slot, Some(Slot::Tools | Slot::Functions));
            let known = memo.filter(|_| carries_tools).and_then(|m| m.known(rest));
            let len = match known {
                Some(known) => known.len,
                None => {
                    let mut values =
                        serde_json::Deserializer::from_str(rest).into_iter::<IgnoredAny>();
                    values.next()?.ok()?;
                    values.byte_offset()
                }
            };
            let value = rest.get(..len)?;
            if let Some(known) = known {
                top.known.push((Raw::from_checked(value), known));
            }
            if let Some(slot) = slot {
                top.set(slot, (value != "null").then(|| Raw::from_checked(value)));
            }
            at = ws(at + len);
            match bytes.get(at) {
                Some(b',') => at = ws(at + 1),
                Some(b'}') => return (ws(at + 1) == bytes.len()).then_some(top),
                _ => return None,
            }
        }
    }

    /// The slot of the top-level `key`, noting the first key problem (a
    /// guarded key twice, or in another letter case).
    fn slot_of(&mut self, key: &str, seen: &mut Vec<Slot>) -> Option<Slot> {
        let slot = KEYS.iter().find(|(k, _)| *k == key).map(|(_, s)| *s);
        let Some(slot) = slot else {
            if self.problem.is_none() {
                let variant = KEYS.iter().find(|(k, s)| s.guarded() && fold_eq(k, key));
                if let Some((k, _)) = variant {
                    self.problem = Some(FormatError::CaseVariantKey { key: k });
                }
            }
            return None;
        };
        if slot.guarded() && seen.contains(&slot) && self.problem.is_none() {
            let name = KEYS
                .iter()
                .find(|(_, s)| *s == slot)
                .map_or("tools", |(k, _)| *k);
            self.problem = Some(FormatError::DuplicateKey { key: name });
        }
        seen.push(slot);
        Some(slot)
    }

    /// Fills `slot` with `value`. A `null` (`None`) is the same as an
    /// absent key, both to keyhole and to the providers: it leaves an
    /// earlier value in place.
    fn set(&mut self, slot: Slot, value: Option<Raw<'a>>) {
        let target = match slot {
            Slot::Tools => &mut self.tools,
            Slot::Functions => &mut self.functions,
            Slot::ToolChoice => &mut self.tool_choice,
            Slot::FunctionCall => &mut self.function_call,
            Slot::ToolConfig => &mut self.tool_config,
            Slot::Messages => &mut self.messages,
            Slot::Input => &mut self.input,
            Slot::Contents => &mut self.contents,
            Slot::System => &mut self.system,
            Slot::McpServers => &mut self.mcp_servers,
            Slot::AnthropicVersion => &mut self.anthropic_version,
        };
        *target = value.or(*target);
    }

    /// Whether `text` occurs in the conversation (`messages`, `input` or
    /// `contents`: what the dialects read a history from).
    pub fn history_mentions(&self, text: &str) -> bool {
        [self.messages, self.input, self.contents]
            .into_iter()
            .flatten()
            .any(|raw| memchr::memmem::find(raw.get().as_bytes(), text.as_bytes()).is_some())
    }

    /// Whether the body has tools to read: a `tools` or `functions` array,
    /// or MCP servers the provider reads itself (`mcp_servers`).
    pub fn carries_tools(&self) -> bool {
        self.tools.is_some() || self.functions.is_some() || self.mcp_servers.is_some()
    }

    /// Whether the only tools value is an empty array.
    pub fn tools_are_empty(&self) -> bool {
        self.functions.is_none()
            && self.mcp_servers.is_none()
            && self.tools.is_some_and(|t| t.get().trim() == "[]")
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
        let elements: Vec<ElementShape<'_>> = self
            .tools
            .and_then(|t| shallow::from_str(t.get()).ok())
            .unwrap_or_default();
        let shaped = |e: &ElementShape<'_>| {
            Format::ALL
                .into_iter()
                .find(|f| (f.dialect().by_element)(e))
        };
        if let Some(format) = elements.iter().find_map(shaped) {
            return Some(format);
        }
        let all_builtin = |format: Format| {
            !elements.is_empty() && elements.iter().all(|e| e.builtin_of(format, builtins))
        };
        if let Some(format) = Format::ALL.into_iter().find(|f| all_builtin(*f)) {
            return Some(format);
        }
        // `messages` alone is the weakest sign: Chat and Anthropic both
        // have it, so the tools decide first (an Anthropic body sent
        // through a gateway path without `system`).
        self.messages.is_some().then_some(Format::OpenAiChat)
    }

    /// Whether `tool_choice` names a `function` object (Chat's shape).
    pub fn tool_choice_names_function(&self) -> bool {
        self.tool_choice.is_some_and(|c| {
            shallow::from_str::<ChoiceShape>(c.get()).is_ok_and(|c| c.function.is_some())
        })
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
            match top.slot_of(&key, &mut seen) {
                Some(slot) => {
                    let value: Option<Raw<'de>> = map.next_value()?;
                    top.set(slot, value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
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
    #[serde(
        default,
        rename = "functionDeclarations",
        alias = "function_declarations"
    )]
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
            // A named built-in (`{"type": "web_search_20250305", "name":
            // "web_search"}`) is one only where the format's built-ins carry
            // names.
            (self.name.is_none() || format.dialect().builtins_named)
                && self
                    .kind
                    .as_deref()
                    .is_some_and(|k| builtins.allows(format, k))
        }
    }
}

#[derive(Deserialize)]
struct ChoiceShape {
    #[serde(default)]
    function: Option<IgnoredAny>,
}
