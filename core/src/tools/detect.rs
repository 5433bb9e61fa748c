//! The last word on "never the full registry": an independent tool detector.
//!
//! [`count_tool_shaped`] reads a whole JSON body and counts every object,
//! anywhere in it, that has the shape of a function / tool *definition* in any
//! provider format. It knows nothing of paths, of the format the request was
//! read as, or of the request parser in [`crate::tools::format`], and shares no code
//! with it, so a blind spot of the parser is not a blind spot here. The filter
//! runs it on every body that leaves the LLM listener; more tool-shaped
//! objects than the phase budget means the request is refused.
//!
//! # What counts
//! Keys are compared *folded*: Unicode lowercase, with `_` and `-` removed, and
//! with the two non-ASCII letters that case-insensitive JSON decoders (Go's
//! `encoding/json`) fold onto ASCII (`ſ` → `s`, `K` (Kelvin) → `k`). So
//! `input_schema`, `inputSchema`, `INPUT_SCHEMA` and `\u0069nput_schema` are
//! one key. An object counts once when it has a string-valued `name` and:
//!
//! - a definition key: `description`, `parameters`, `parametersJsonSchema`,
//!   `input_schema`, `inputJsonSchema`, `schema` (every format, legacy
//!   `functions` included); or
//! - a `type` of `function` or `custom`, wherever it stands: a definition
//!   needs nothing but a name (a Responses tool, a tool loaded by OpenAI's
//!   tool search in a `tool_search_output` item, a Realtime session's tools);
//!   or
//! - it is the value of a `function` or `custom` key of an array element and
//!   carries no call payload (`arguments`, `input`, `args`): a Chat
//!   Completions definition, which needs nothing but a name (a `tool_choice`
//!   naming a function is not an array element); or
//! - it is an element of a `tools` array and has no `type`, or one of
//!   `function` / `custom` (a provider built-in names its own `type`); or
//! - it is an element of a `functionDeclarations` or `functions` array.
//!
//! # What does not count
//! A *reference* names a tool without defining it. Inside the value of a
//! `tool_choice`, `toolConfig`, `allowed_tools` or `allowedFunctionNames`
//! member (any spelling), only an object with a definition key counts: the
//! name-only rules above do not apply there, so `{"type": "allowed_tools",
//! "tools": [{"type": "function", "name": "a"}]}` counts nothing. This is the
//! detector's own short list of reference positions; it shares nothing with
//! the request parser's.
//!
//! A Responses `namespace` (`{"type": "namespace", "name", "description",
//! "tools": [...]}`, an element of a `tools` array) groups definitions and
//! is not one itself: its definitions count, the namespace does not — when
//! its `tools` holds at least one counted definition and it has no schema
//! key and no call payload; otherwise it counts like any other object.
//!
//! Tool *calls* in a conversation history (`{"name", "arguments"}`,
//! `{"type":"tool_use","name","input"}`, `{"functionCall":{"name","args"}}`,
//! `{"type":"function_call",…}`) carry no definition key and are not counted;
//! neither are provider built-in tools (`{"type":"web_search_20250305",
//! "name":"web_search"}`), which carry no schema. JSON Schema properties
//! named `name` are objects, not strings, and are not counted. The count
//! errs on the side of counting: a structured-output schema (`{"name",
//! "schema"}`) counts as one, and the filter leaves room for it
//! ([`crate::tools::surface`]); a false negative could forward a registry.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::cell::Cell;
use std::fmt;

/// Why a body could not be counted. The filter refuses such a body.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DetectError {
    /// The body is not valid JSON (or nests deeper than the parser allows).
    /// The message never quotes the body.
    #[error("request body is not readable JSON at line {line} column {column}")]
    Json {
        /// Line of the problem.
        line: usize,
        /// Column of the problem.
        column: usize,
    },
}

/// The number of tool-definition-shaped objects anywhere in `body`.
///
/// An empty (or all-whitespace) body has none. Any other body must be one
/// JSON value; a body that is not is an error, never "zero".
pub fn count_tool_shaped(body: &[u8]) -> Result<usize, DetectError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(0);
    }
    let count = Cell::new(0usize);
    // UTF-8 is checked once for the whole body, not string by string; a
    // body that is not UTF-8 is read as bytes, so the error says where.
    let result = match std::str::from_utf8(body) {
        Ok(text) => count_in(&mut serde_json::Deserializer::from_str(text), &count),
        Err(_) => count_in(&mut serde_json::Deserializer::from_slice(body), &count),
    };
    match result {
        Ok(()) => Ok(count.get()),
        Err(e) => Err(DetectError::Json {
            line: e.line(),
            column: e.column(),
        }),
    }
}

/// Whether the count of a body can depend on what a string says: a string
/// that folds to a key the detector reads (`name`, `parameters`, `tools`…)
/// or to a `type` word (`function`, `custom`, `namespace`). Replacing one
/// string value by another, neither such a word, leaves
/// [`count_tool_shaped`] the same: every other string counts only as "a
/// string".
pub fn reads_word(value: &str) -> bool {
    classify(value) != Key::Other || word_kind(value) != Kind::String
}

/// Reads one JSON value, and nothing after it, from `de`, adding the tool
/// shapes found to `count`.
fn count_in<'de, R: serde_json::de::Read<'de>>(
    de: &mut serde_json::Deserializer<R>,
    count: &Cell<usize>,
) -> Result<(), serde_json::Error> {
    let root = Node {
        at: Position::Plain,
        reference: false,
        count,
    };
    root.deserialize(&mut *de).and_then(|_| de.end())
}

/// Where a value sits, as far as tool shapes are concerned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Anywhere else.
    Plain,
    /// An element of an array.
    Element,
    /// The value of a `function` / `custom` key.
    Wrapped,
    /// A `functionDeclarations` / `functions` array.
    DeclarationList,
    /// An element of such an array.
    Declaration,
    /// A `tools` array.
    ToolsList,
    /// An element of a `tools` array.
    ToolsElement,
}

/// What a visited value was, as its parent needs to know.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    String,
    /// A string that folds to `function` or `custom`.
    FunctionWord,
    /// A string that folds to `namespace`.
    NamespaceWord,
    Other,
}

/// The keys that matter, after folding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Name,
    /// `description`: a definition key that a namespace has too.
    Description,
    Definition,
    CallPayload,
    Wrapper,
    DeclarationList,
    ToolsList,
    Type,
    /// A member whose value only names tools ([the module docs](self)).
    Reference,
    Other,
}

/// Keys that mean something to the detector, folded.
const TABLE: [(&str, Key); 20] = [
    ("name", Key::Name),
    ("description", Key::Description),
    ("parameters", Key::Definition),
    ("parametersjsonschema", Key::Definition),
    ("inputschema", Key::Definition),
    ("inputjsonschema", Key::Definition),
    ("schema", Key::Definition),
    ("arguments", Key::CallPayload),
    ("input", Key::CallPayload),
    ("args", Key::CallPayload),
    ("function", Key::Wrapper),
    ("custom", Key::Wrapper),
    ("functiondeclarations", Key::DeclarationList),
    ("functions", Key::DeclarationList),
    ("tools", Key::ToolsList),
    ("type", Key::Type),
    ("toolchoice", Key::Reference),
    ("toolconfig", Key::Reference),
    ("allowedtools", Key::Reference),
    ("allowedfunctionnames", Key::Reference),
];

/// What a string value is to a parent's `type` or `name`: a word that
/// folds to `function` / `custom` (the `type` of a client-defined tool) or
/// to `namespace`, or any other string. Without allocating: most strings
/// are none of the words.
fn word_kind(value: &str) -> Kind {
    if value.len() > 16 {
        return Kind::String;
    }
    // Each word starts with `f`, `c` or `n` (either case); a value whose
    // first byte is another ASCII letter or digit, or ASCII punctuation but
    // a separator, is none of them.
    if value
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii() && b != b'_' && b != b'-' && !b"fFcCnN".contains(&b))
    {
        return Kind::String;
    }
    let mut buf = [0u8; 16];
    let folded = ascii_folded(value, &mut buf);
    let is = |target: &str| match folded {
        Some(folded) => folded == target.as_bytes(),
        None => folds_to(value, target),
    };
    if is("function") || is("custom") {
        Kind::FunctionWord
    } else if is("namespace") {
        Kind::NamespaceWord
    } else {
        Kind::String
    }
}

/// An ASCII `text` folded into `buf`: lowercase, without `_` and `-`.
/// `None` when `text` is not ASCII or does not fit (then fold it character
/// by character, [`folds_to`]).
fn ascii_folded<'b>(text: &str, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    if !text.is_ascii() || text.len() > buf.len() {
        return None;
    }
    let mut len = 0;
    for b in text.bytes().filter(|b| *b != b'_' && *b != b'-') {
        *buf.get_mut(len)? = b.to_ascii_lowercase();
        len += 1;
    }
    buf.get(..len)
}

fn classify(key: &str) -> Key {
    // Folding never lengthens an ASCII key by more than the removed
    // separators, so a key much longer than every target is none of them.
    if key.len() > 64 {
        return Key::Other;
    }
    // Most keys are ASCII: folded once into a buffer and compared whole
    // (ASCII letters lowercase the same by either rule).
    let mut buf = [0u8; 64];
    match ascii_folded(key, &mut buf) {
        Some(folded) => TABLE
            .iter()
            .find(|(target, _)| target.as_bytes() == folded)
            .map_or(Key::Other, |(_, k)| *k),
        None => classify_folding(key),
    }
}

/// [`classify`], folding each character as it is compared.
fn classify_folding(key: &str) -> Key {
    TABLE
        .iter()
        .find(|(target, _)| folds_to(key, target))
        .map_or(Key::Other, |(_, k)| *k)
}

/// Whether `key`, folded, equals `target` (lowercase ASCII, no separators).
fn folds_to(key: &str, target: &str) -> bool {
    let mut want = target.bytes();
    for c in key.chars() {
        if c == '_' || c == '-' {
            continue;
        }
        let folded = match c {
            'ſ' => 's',
            '\u{212A}' => 'k',
            c => c.to_lowercase().next().unwrap_or(c),
        };
        match want.next() {
            Some(w) if u32::from(w) == u32::from(folded) => {}
            _ => return false,
        }
    }
    want.next().is_none()
}

/// Reads an object's key as the [`Key`] it folds to, without copying it:
/// the key is classified where the parser holds it.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Key, E> {
        Ok(classify(key))
    }
}

/// Visits one value, counting the tool-shaped objects in it.
struct Node<'c> {
    at: Position,
    /// Inside a reference member: name-only rules do not apply.
    reference: bool,
    count: &'c Cell<usize>,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Kind;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, value: &str) -> Result<Kind, E> {
        Ok(word_kind(value))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_unit<E>(self) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let at = match self.at {
            Position::DeclarationList => Position::Declaration,
            Position::ToolsList => Position::ToolsElement,
            _ => Position::Element,
        };
        while seq
            .next_element_seed(Node {
                at,
                reference: self.reference,
                count: self.count,
            })?
            .is_some()
        {}
        Ok(Kind::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let (mut named, mut defines, mut calls) = (false, false, false);
        // `type`: absent, `function` / `custom`, or anything else.
        let (mut typed_function, mut typed_other) = (false, false);
        // A namespace: `type` `namespace`, a `tools` member holding counted
        // definitions, and no definition key but `description`.
        let (mut typed_namespace, mut holds_definitions, mut schema) = (false, false, false);
        let element = matches!(
            self.at,
            Position::Element | Position::Declaration | Position::ToolsElement
        );
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let at = match key {
                Key::Wrapper if element => Position::Wrapped,
                Key::DeclarationList => Position::DeclarationList,
                Key::ToolsList => Position::ToolsList,
                _ => Position::Plain,
            };
            let reference = self.reference || key == Key::Reference;
            let before = self.count.get();
            let kind = map.next_value_seed(Node {
                at,
                reference,
                count: self.count,
            })?;
            match key {
                Key::Name => named |= matches!(kind, Kind::String | Kind::FunctionWord),
                Key::Description => defines = true,
                Key::Definition => (defines, schema) = (true, true),
                Key::CallPayload => calls = true,
                Key::Type => match kind {
                    Kind::FunctionWord => typed_function = true,
                    Kind::NamespaceWord => (typed_namespace, typed_other) = (true, true),
                    Kind::String | Kind::Other => typed_other = true,
                },
                Key::ToolsList => holds_definitions |= self.count.get() > before,
                Key::Wrapper | Key::DeclarationList | Key::Reference | Key::Other => {}
            }
        }
        // A Responses namespace is not itself a tool the model can call: the
        // definitions in its `tools` are, and they were counted. Only a
        // `tools` element qualifies, and only one without a schema, a call
        // payload, or an empty `tools`: anything that could be read as a
        // definition still counts.
        let namespace = self.at == Position::ToolsElement
            && typed_namespace
            && holds_definitions
            && !schema
            && !calls;
        if namespace {
            return Ok(Kind::Other);
        }
        let by_name_only = !self.reference
            && (typed_function
                || (self.at == Position::Wrapped && !calls)
                || (self.at == Position::ToolsElement && !typed_other));
        let shaped = named && (defines || self.at == Position::Declaration || by_name_only);
        if shaped {
            self.count.set(self.count.get().saturating_add(1));
        }
        Ok(Kind::Other)
    }
}

#[cfg(test)]
mod tests;
