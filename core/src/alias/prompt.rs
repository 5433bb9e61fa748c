//! Raw ids in an LLM request: everything the model would read except the tool
//! definitions.
//!
//! An agent puts record ids in front of the model by many paths that the HMS
//! listener never sees: the open patient's UUID in the system prompt, a FHIR
//! reference pasted into the chat, a tool result the agent built from its own
//! database, a conversation replayed from its store. [`PromptScan`] finds them
//! in every string of the request body — in all four formats, whatever the
//! message structure — and rewrites each with its session alias, by the same
//! rules as an HMS response ([`ResponseScan`]): a string is read as text, or
//! as JSON when it is a JSON document (a tool result), and every id the
//! session learned before is replaced wherever it stands.
//!
//! Data a tool produced or takes — an object or array under `response`,
//! `args`, `arguments`, `input`, `output` or `result` — is read whole as one
//! JSON document, so the structural rules (ids under id-named keys, numbers
//! included) apply there. What is not scanned: the values of the top-level
//! `tools` and `functions` members (tool definitions stay byte-identical; the
//! tool surface is decided on the aliased body), and the keys, numbers,
//! booleans and nulls of the request's own structure (an LLM API carries no
//! record ids there).
//!
//! ```
//! use keyhole_core::alias::{PromptScan, SessionMap, Taxonomy};
//!
//! let tax = Taxonomy::default();
//! let body = br#"{"messages":[{"role":"system","content":"Patient 039b70b8-92f7-44b7-9c91-4e3f0e900c71 is open."}],"tools":[]}"#;
//! let scan = PromptScan::new(&tax, body).unwrap();
//! // In keyhole, control answers this (`POST /v1/alias/encode`).
//! let aliases = SessionMap::new().encode(&tax, scan.ids()).unwrap().aliases;
//! let out = scan.rewrite(body, &aliases, &[]).unwrap();
//! assert_eq!(out, br#"{"messages":[{"role":"system","content":"Patient ref-001 is open."}],"tools":[]}"#);
//! ```

use super::json::{text_of, Event, JsonError, Lexer};
use super::response::{splice, BodyKind, PartId, ResponseScan, RewriteError};
use super::taxonomy::Taxonomy;
use super::wire::{IdInput, KnownAlias};
use std::borrow::Cow;
use std::ops::Range;

/// Top-level members whose values are tool definitions, folded (ASCII
/// lowercase, `_` and `-` dropped).
const TOOL_MEMBERS: [&str; 2] = ["tools", "functions"];

/// Members whose object or array value is data a tool produced or takes
/// (Gemini `functionResponse.response` and `functionCall.args`, Anthropic
/// `tool_use.input`, tool outputs), folded likewise. Never a top-level member:
/// the Responses API's top-level `input` is the conversation.
const DATA_MEMBERS: [&str; 6] = ["response", "args", "arguments", "input", "output", "result"];

/// The strings of one LLM request body, scanned for raw ids.
pub struct PromptScan<'t> {
    scan: ResponseScan<'t>,
    strings: Vec<Scanned>,
}

/// One string literal of the body and its scan.
struct Scanned {
    /// Byte range of the literal, quotes included.
    span: Range<usize>,
    part: PartId,
    /// The decoded content (what was scanned).
    text: String,
    /// A JSON value spliced back as is (else a string, re-escaped).
    json: bool,
}

/// What a key says of its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// Tool definitions (a top-level `tools` or `functions`): not read.
    Tools,
    /// Data a tool produced or takes (`response`, `args`, `input`, …): an
    /// object or array is read as one JSON document, by the JSON rules.
    Data,
    /// Anything else: its strings are read one by one.
    Plain,
}

impl Member {
    fn of(key: &str, depth: usize) -> Member {
        let key = fold(key);
        if depth == 1 && TOOL_MEMBERS.contains(&key.as_str()) {
            Member::Tools
        } else if depth > 1 && DATA_MEMBERS.contains(&key.as_str()) {
            Member::Data
        } else {
            Member::Plain
        }
    }
}

impl<'t> PromptScan<'t> {
    /// Scans every string value of `body` outside the tool definitions.
    ///
    /// Fails when the body is not a JSON document, or when a string that is
    /// itself a JSON document cannot be read (it is then refused, never
    /// forwarded unscanned).
    pub fn new(tax: &'t Taxonomy, body: &[u8]) -> Result<Self, RewriteError> {
        let src = std::str::from_utf8(body).map_err(|_| JsonError::NotUtf8)?;
        let mut lexer = Lexer::new(src);
        let mut scan = ResponseScan::new(tax);
        let mut strings = Vec::new();
        let mut depth = 0usize;
        // What the last key said of the value that follows it.
        let mut member = Member::Plain;
        // A container read whole or not at all: the depth it opened at, and
        // where (`None`: tool definitions, not read).
        let mut skip: Option<(usize, Option<usize>)> = None;
        while let Some(event) = lexer.next_event()? {
            let this = std::mem::replace(&mut member, Member::Plain);
            match event {
                Event::Key(lit) if skip.is_none() => member = Member::of(&text_of(src, &lit)?, depth),
                Event::Key(_) | Event::Scalar => {}
                Event::StartObject | Event::StartArray => {
                    if skip.is_none() {
                        match this {
                            Member::Tools => skip = Some((depth, None)),
                            Member::Data => skip = Some((depth, lexer.offset().checked_sub(1))),
                            Member::Plain => {}
                        }
                    }
                    depth += 1;
                }
                Event::EndObject | Event::EndArray => {
                    depth = depth.saturating_sub(1);
                    if let Some((at, start)) = skip.filter(|(at, _)| *at == depth) {
                        skip = None;
                        if let Some(start) = start {
                            let span = start..lexer.offset();
                            let text = src.get(span.clone()).ok_or(JsonError::Eof { at })?.to_owned();
                            let part = scan.add(text.as_bytes(), BodyKind::Json, None)?;
                            strings.push(Scanned { span, part, text, json: true });
                        }
                    }
                }
                Event::Str(lit) => {
                    if skip.is_some() || this == Member::Tools {
                        continue;
                    }
                    let text = text_of(src, &lit)?.into_owned();
                    let part = scan.add(text.as_bytes(), string_kind(&text), None)?;
                    strings.push(Scanned { span: lit.span, part, text, json: false });
                }
            }
        }
        Ok(PromptScan { scan, strings })
    }

    /// The encode batch: every distinct raw id found, as for a response.
    pub fn ids(&self) -> &[IdInput] {
        self.scan.ids()
    }

    /// How many id occurrences the rules found (ids the session learned
    /// before, replaced at rewrite time, not included).
    pub fn occurrences(&self) -> usize {
        self.strings.iter().map(|s| self.scan.occurrences(s.part)).sum()
    }

    /// The body with every raw id replaced: `aliases` parallel to
    /// [`Self::ids`], `known` the session's earlier ids with their aliases.
    /// Every rewritten string is verified to hold no raw id
    /// ([`RewriteError::Leak`] otherwise); strings without ids stay
    /// byte-identical, and so does everything outside the strings.
    pub fn rewrite(&self, body: &[u8], aliases: &[String], known: &[KnownAlias]) -> Result<Vec<u8>, RewriteError> {
        let rewriter = self.scan.rewriter(aliases, known)?;
        let mut edits: Vec<(Range<usize>, Cow<'_, str>)> = Vec::new();
        for s in &self.strings {
            let out = rewriter.rewrite(s.part, s.text.as_bytes())?;
            if out == s.text.as_bytes() {
                continue;
            }
            let text = String::from_utf8(out).map_err(|_| JsonError::NotUtf8)?;
            let value = if s.json { text } else { serde_json::to_string(&text).map_err(|_| JsonError::NotUtf8)? };
            edits.push((s.span.clone(), Cow::Owned(value)));
        }
        Ok(splice(body, edits))
    }
}

/// How a string is read: a tool result or argument list serialized to a
/// string is a JSON document and read by the JSON rules; anything else is text.
fn string_kind(text: &str) -> BodyKind {
    let t = text.trim_start();
    let document = (t.starts_with('{') || t.starts_with('['))
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
    if document {
        BodyKind::Json
    } else {
        BodyKind::Text
    }
}

/// ASCII lowercase with `_` and `-` dropped: `Tools`, `FUNCTIONS` and
/// `function_declarations` compare as the format parsers read them.
fn fold(key: &str) -> String {
    key.chars().filter(|c| !matches!(c, '_' | '-')).map(|c| c.to_ascii_lowercase()).collect()
}

#[cfg(test)]
mod tests;
