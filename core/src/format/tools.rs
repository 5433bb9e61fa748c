//! What an element of a tools array may be, checked against every format.
//!
//! A dialect reads its own function tools; everything it would keep as "not a
//! function" goes through [`Builder::builtin`] here, which keeps it only when
//! it is a provider built-in on the request format's allow-list
//! ([`BuiltinTools`]) and carries nothing that defines a function. Before
//! either, [`Keys`] refuses an element whose keys some upstream could read
//! differently than keyhole does: a key spelled in another letter case or with
//! other separators (`"TYPE"`, `"Function"`, `"FunctionDeclarations"`), or one
//! key in two spellings. So a tool of another format, an unknown `type`, or a
//! look-alike is refused rather than forwarded uncounted.

use super::{Builder, Format, FormatError, Item};
use crate::shallow::Raw;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

/// Built-in tool types keyhole forwards untouched and never counts, per
/// format. A tools element of any other non-function type is refused.
///
/// OpenAI and Anthropic built-ins are named by their `type`; Gemini built-ins
/// are tools entries keyed by the tool (`{"googleSearch": {}}`), so Gemini's
/// list names keys (matched in lowerCamelCase or snake_case). The defaults are
/// each dialect's `BUILTINS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinTools {
    /// Each format's list, in [`Format::ALL`] order.
    lists: Vec<(Format, Vec<String>)>,
}

impl Default for BuiltinTools {
    fn default() -> Self {
        let own = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        BuiltinTools { lists: Format::ALL.into_iter().map(|f| (f, own(f.dialect().builtins))).collect() }
    }
}

impl BuiltinTools {
    /// The allow-list of `format`.
    pub fn of(&self, format: Format) -> &[String] {
        self.lists.iter().find(|(f, _)| *f == format).map_or(&[], |(_, list)| list.as_slice())
    }

    /// Replaces the allow-list of `format`.
    pub fn set(&mut self, format: Format, list: Vec<String>) {
        match self.lists.iter_mut().find(|(f, _)| *f == format) {
            Some((_, slot)) => *slot = list,
            None => self.lists.push((format, list)),
        }
    }

    /// Whether `name` (a `type`, or a key) is a built-in of `format`.
    pub fn allows(&self, format: Format, name: &str) -> bool {
        if format.dialect().builtins_by_key {
            self.of(format).iter().any(|k| k == name || snake_case(k) == name)
        } else {
            self.of(format).iter().any(|t| t == name)
        }
    }
}

/// Keys whose spelling decides how an element is read. Each may appear once,
/// spelled as here; any other spelling that folds to one of them is refused.
const SPELLINGS: [&str; 12] = [
    "type",
    "name",
    "description",
    "parameters",
    "parametersJsonSchema",
    "parameters_json_schema",
    "input_schema",
    "function",
    "custom",
    "functionDeclarations",
    "function_declarations",
    "strict",
];

/// [`SPELLINGS`], folded.
static FOLDED_SPELLINGS: LazyLock<Vec<String>> = LazyLock::new(|| SPELLINGS.iter().map(|s| fold(s)).collect());

/// Folded keys that define a function: a built-in carrying one is refused.
const DEFINING: [&str; 8] = [
    "name",
    "description",
    "parameters",
    "parametersjsonschema",
    "inputschema",
    "function",
    "custom",
    "functiondeclarations",
];

/// The keys of one tools element, checked for spelling.
pub(super) struct Keys {
    /// Folded keys of the element, in order.
    folded: Vec<String>,
    /// The first problem: a key in a non-canonical spelling, or twice.
    problem: Option<&'static str>,
}

impl Keys {
    /// The spelling problem, if any: the element must be refused.
    pub(super) fn problem(&self) -> Option<&'static str> {
        self.problem
    }

    /// Whether the element carries a key that defines a function.
    fn defines(&self) -> bool {
        self.folded.iter().any(|k| DEFINING.contains(&k.as_str()))
    }
}

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(KeysVisitor)
    }
}

struct KeysVisitor;

impl<'de> Visitor<'de> for KeysVisitor {
    type Value = Keys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tool object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
        let mut keys = Keys { folded: Vec::new(), problem: None };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            map.next_value::<IgnoredAny>()?;
            let folded = fold(&key);
            let spelled_like_a_known_key = FOLDED_SPELLINGS.contains(&folded);
            if keys.problem.is_none() {
                if spelled_like_a_known_key && !SPELLINGS.contains(&key.as_ref()) {
                    keys.problem = Some("a key is spelled in another letter case or with other separators");
                } else if keys.folded.contains(&folded) {
                    keys.problem = Some("a key appears more than once");
                }
            }
            keys.folded.push(folded);
        }
        Ok(keys)
    }
}

impl<'a> Builder<'a, '_> {
    /// Checks the spelling of the keys of `raw`, the element at `at`.
    pub(super) fn spelling(&self, raw: Raw<'a>, at: &dyn Fn() -> String) -> Result<Keys, FormatError> {
        let keys: Keys = self.read(raw, at)?;
        match keys.problem() {
            Some(problem) => Err(self.tool_error(at(), problem)),
            None => Ok(keys),
        }
    }

    /// Classifies an element that is not a function tool of the format:
    /// a built-in of the format's allow-list that defines nothing is kept,
    /// anything else refused.
    pub(super) fn builtin(&self, keys: &Keys, kind: Option<&str>, at: &dyn Fn() -> String) -> Result<Item, FormatError> {
        match kind {
            Some(kind) if self.builtins.allows(self.format, kind) => {
                if keys.defines() && !self.builtin_may_name(keys) {
                    Err(self.tool_error(at(), "a built-in tool that carries a function definition"))
                } else {
                    Ok(Item::Other)
                }
            }
            Some(_) => Err(self.tool_error(at(), "a tool type that is neither a function nor an allowed built-in")),
            None => Err(self.tool_error(at(), "neither a function tool nor an allowed built-in")),
        }
    }

    /// Some formats' built-ins carry a `name` (Anthropic's `"web_search"`),
    /// and nothing else that defines a function.
    fn builtin_may_name(&self, keys: &Keys) -> bool {
        self.format.dialect().builtins_named
            && keys.folded.iter().filter(|k| DEFINING.contains(&k.as_str())).all(|k| k == "name")
    }
}

/// A key folded: lowercase, without `_` and `-`, with the non-ASCII letters
/// that case-insensitive decoders fold onto ASCII (`ſ`, Kelvin `K`) mapped.
pub(super) fn fold(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(|c| match c {
            'ſ' => 's'.to_lowercase(),
            '\u{212A}' => 'k'.to_lowercase(),
            c => c.to_lowercase(),
        })
        .collect()
}

/// Whether two keys fold to the same key.
pub(super) fn fold_eq(a: &str, b: &str) -> bool {
    fold(a) == fold(b)
}

/// `googleSearch` → `google_search`.
fn snake_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
