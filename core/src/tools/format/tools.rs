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
use crate::json::shallow::Raw;
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
///
/// # Versioned families
/// Providers version their built-ins by date (`web_search_20250305`,
/// `web_search_20260209`, `web_search_preview_2025_03_11`) and ship a new
/// version every few months. An entry ending in `_*` names a family: it
/// allows its stem followed by `_` and a date version, eight digits
/// (`YYYYMMDD`) or `YYYY_MM_DD`, so next month's version is not refused.
/// Nothing else matches a family: `web_search_x` or `web_search_2025` is no
/// version, and stays refused as an unknown type.
///
/// # Adding a built-in
/// A new built-in type (not a new version of a family) goes into its
/// format's `BUILTINS` in `format/<dialect>.rs`, after checking in the
/// provider's API reference that it defines no client function (a type that
/// carries functions, like Responses' `namespace`, is read by the dialect
/// instead). An operator can replace a format's list (`builtin_tools` in the
/// filter configuration), in the same syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinTools {
    /// Each format's list, in [`Format::ALL`] order.
    lists: Vec<(Format, Vec<String>)>,
    /// Pass tool sources nothing bounds ([`super::sources`]).
    pub(super) pass_sources: bool,
}

impl Default for BuiltinTools {
    fn default() -> Self {
        let own = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        BuiltinTools {
            lists: Format::ALL
                .into_iter()
                .map(|f| (f, own(f.dialect().builtins)))
                .collect(),
            pass_sources: false,
        }
    }
}

impl BuiltinTools {
    /// The allow-list of `format`.
    pub fn of(&self, format: Format) -> &[String] {
        self.lists
            .iter()
            .find(|(f, _)| *f == format)
            .map_or(&[], |(_, list)| list.as_slice())
    }

    /// Replaces the allow-list of `format`.
    pub fn set(&mut self, format: Format, list: Vec<String>) {
        match self.lists.iter_mut().find(|(f, _)| *f == format) {
            Some((_, slot)) => *slot = list,
            None => self.lists.push((format, list)),
        }
    }

    /// Whether `name` (a `type`, or a key) is a built-in of `format`: an
    /// entry of its list, or a version of a family the list names.
    pub fn allows(&self, format: Format, name: &str) -> bool {
        if format.dialect().builtins_by_key {
            self.of(format)
                .iter()
                .any(|k| k == name || snake_case(k) == name)
        } else {
            self.of(format)
                .iter()
                .any(|t| t == name || in_family(t, name))
        }
    }
}

/// Whether `name` is a version of the family `entry` (`stem_*`): the stem,
/// `_`, and a date version (`YYYYMMDD` or `YYYY_MM_DD`).
fn in_family(entry: &str, name: &str) -> bool {
    let Some(stem) = entry.strip_suffix("_*") else {
        return false;
    };
    let Some(version) = name
        .strip_prefix(stem)
        .and_then(|rest| rest.strip_prefix('_'))
    else {
        return false;
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    match version.len() {
        8 => digits(version, 8),
        10 => {
            let mut parts = version.split('_');
            matches!((parts.next(), parts.next(), parts.next(), parts.next()), (Some(y), Some(m), Some(d), None) if digits(y, 4) && digits(m, 2) && digits(d, 2))
        }
        _ => false,
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
static FOLDED_SPELLINGS: LazyLock<Vec<String>> =
    LazyLock::new(|| SPELLINGS.iter().map(|s| fold(s)).collect());

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
        let mut keys = Keys {
            folded: Vec::new(),
            problem: None,
        };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            map.next_value::<IgnoredAny>()?;
            let folded = fold(&key);
            let spelled_like_a_known_key = FOLDED_SPELLINGS.contains(&folded);
            if keys.problem.is_none() {
                if spelled_like_a_known_key && !SPELLINGS.contains(&key.as_ref()) {
                    keys.problem =
                        Some("a key is spelled in another letter case or with other separators");
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
    pub(super) fn spelling(
        &self,
        raw: Raw<'a>,
        at: &dyn Fn() -> String,
    ) -> Result<Keys, FormatError> {
        let keys: Keys = self.read(raw, at)?;
        match keys.problem() {
            Some(problem) => Err(self.tool_error(at(), problem)),
            None => Ok(keys),
        }
    }

    /// Classifies an element that is not a function tool of the format:
    /// a built-in of the format's allow-list that defines nothing is kept,
    /// anything else refused.
    pub(super) fn builtin(
        &self,
        keys: &Keys,
        kind: Option<&str>,
        at: &dyn Fn() -> String,
    ) -> Result<Item, FormatError> {
        match kind {
            Some(kind) if self.builtins.allows(self.format, kind) => {
                if keys.defines() && !self.builtin_may_name(keys) {
                    Err(self.tool_error(at(), "a built-in tool that carries a function definition"))
                } else {
                    Ok(Item::Other)
                }
            }
            Some(_) => Err(self.tool_error(
                at(),
                "a tool type that is neither a function nor an allowed built-in",
            )),
            None => Err(self.tool_error(at(), "neither a function tool nor an allowed built-in")),
        }
    }

    /// Some formats' built-ins carry a `name` (Anthropic's `"web_search"`),
    /// and nothing else that defines a function.
    fn builtin_may_name(&self, keys: &Keys) -> bool {
        self.format.dialect().builtins_named
            && keys
                .folded
                .iter()
                .filter(|k| DEFINING.contains(&k.as_str()))
                .all(|k| k == "name")
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

#[cfg(test)]
mod family_tests {
    use super::in_family;

    #[test]
    fn a_family_takes_every_date_version_and_nothing_else() {
        for name in [
            "web_search_20250305",
            "web_search_20260209",
            "web_search_20991231",
        ] {
            assert!(in_family("web_search_*", name), "{name}");
        }
        assert!(in_family(
            "web_search_preview_*",
            "web_search_preview_2025_03_11"
        ));
        assert!(in_family("web_search_*", "web_search_2025_08_26"));
        for name in [
            "web_search",
            "web_search_",
            "web_search_2025",
            "web_search_x0250305",
            "web_search_202503051",
            "web_fetch_20250910",
            "web_search_2025_0311",
            "xweb_search_20250305",
        ] {
            assert!(!in_family("web_search_*", name), "{name}");
        }
        assert!(
            !in_family("web_search", "web_search_20250305"),
            "an exact entry is no family"
        );
    }
}
