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

use super::rewrite::{splice, RewriteError};
use super::scan::{BodyKind, PartId, ResponseScan};
use super::taxonomy::Taxonomy;
use crate::json::lexer::{text_of, Event, JsonError, Lexer};
use crate::json::StringEdit;
use crate::proto::alias::{IdInput, KnownAlias};
use crate::proto::reply::{self, ErrorKind, LocalReply};
use crate::tools::detect::reads_word;
use std::borrow::Cow;
use std::ops::Range;

/// Top-level members whose values are tool definitions, folded (ASCII
/// lowercase, `_` and `-` dropped).
const TOOL_MEMBERS: [&str; 2] = ["tools", "functions"];

/// Top-level members that never reach the model, in any of the four
/// formats, folded likewise: request bookkeeping the provider keeps for the
/// caller (Chat and Responses `metadata`, `user`, `safety_identifier`,
/// `prompt_cache_key`, `previous_response_id`, `conversation`,
/// `service_tier`; Anthropic `metadata.user_id`, `container`,
/// `mcp_servers`; Gemini `cachedContent`, Vertex AI `labels`). Their values
/// are left byte-identical: rewriting them would break the provider's prompt
/// caching and the caller's own correlation, and hide nothing from the model.
/// Everything else (messages, system, instructions, input, contents, tool
/// results, prompt variables, …) is read, so a member a provider adds
/// tomorrow is aliased until it is listed here.
const HIDDEN_MEMBERS: [&str; 11] = [
    "metadata",
    "user",
    "safetyidentifier",
    "promptcachekey",
    "previousresponseid",
    "conversation",
    "servicetier",
    "container",
    "mcpservers",
    "cachedcontent",
    "labels",
];

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
    /// Tool definitions (a top-level `tools` or `functions`), or a member
    /// that never reaches the model ([`HIDDEN_MEMBERS`]): not read.
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
        if depth == 1
            && (TOOL_MEMBERS.contains(&key.as_str()) || HIDDEN_MEMBERS.contains(&key.as_str()))
        {
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
        Self::new_skipping(tax, body, &|_| None)
    }

    /// [`Self::new`], where `known(text)` is the length of a tool
    /// definitions value already known to be JSON at the start of `text`
    /// (the filter's [`crate::tools::format::Memo`]), passed over without a look.
    pub fn new_skipping(
        tax: &'t Taxonomy,
        body: &[u8],
        known: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<Self, RewriteError> {
        let src = std::str::from_utf8(body).map_err(|_| JsonError::NotUtf8)?;
        let mut lexer = Lexer::new(src);
        let mut scan = ResponseScan::new(tax);
        let mut strings = Vec::new();
        let mut depth = 0usize;
        // What the last key said of the value that follows it.
        let mut member = Member::Plain;
        // A container read whole as one JSON document: the depth it opened
        // at, and where.
        let mut skip: Option<(usize, usize)> = None;
        while let Some(event) = lexer.next_event()? {
            let this = std::mem::replace(&mut member, Member::Plain);
            match event {
                Event::Key(lit) if skip.is_none() => {
                    member = Member::of(&text_of(src, &lit)?, depth)
                }
                Event::Key(_) | Event::Scalar => {}
                Event::StartObject | Event::StartArray => {
                    if skip.is_none() {
                        match this {
                            // Tool definitions are not read, nor lexed: the
                            // body is checked whole when its tools are read.
                            Member::Tools => {
                                let start = lexer.offset().saturating_sub(1);
                                lexer.skip_container(src.get(start..).and_then(known))?;
                                continue;
                            }
                            Member::Data => {
                                let at = lexer
                                    .offset()
                                    .checked_sub(1)
                                    .ok_or(JsonError::Eof { at: 0 })?;
                                skip = Some((depth, at));
                            }
                            Member::Plain => {}
                        }
                    }
                    depth += 1;
                }
                Event::EndObject | Event::EndArray => {
                    depth = depth.saturating_sub(1);
                    if let Some((at, start)) = skip.filter(|(at, _)| *at == depth) {
                        skip = None;
                        let span = start..lexer.offset();
                        let text = src
                            .get(span.clone())
                            .ok_or(JsonError::Eof { at })?
                            .to_owned();
                        let part = scan.add(text.as_bytes(), BodyKind::Json, None)?;
                        strings.push(Scanned {
                            span,
                            part,
                            text,
                            json: true,
                        });
                    }
                }
                Event::Str(lit) => {
                    if skip.is_some() || this == Member::Tools {
                        continue;
                    }
                    let text = text_of(src, &lit)?.into_owned();
                    let part = scan.add(text.as_bytes(), string_kind(&text), None)?;
                    strings.push(Scanned {
                        span: lit.span,
                        part,
                        text,
                        json: false,
                    });
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
        self.strings
            .iter()
            .map(|s| self.scan.occurrences(s.part))
            .sum()
    }

    /// The body with every raw id replaced: `aliases` parallel to
    /// [`Self::ids`], `known` the session's earlier ids with their aliases.
    /// Every rewritten string is verified to hold no raw id
    /// ([`RewriteError::Leak`] otherwise); strings without ids stay
    /// byte-identical, and so does everything outside the strings.
    pub fn rewrite(
        &self,
        body: &[u8],
        aliases: &[String],
        known: &[KnownAlias],
    ) -> Result<Vec<u8>, RewriteError> {
        self.rewrite_counted(body, aliases, known)
            .map(|r| r.body.unwrap_or_else(|| body.to_vec()))
    }

    /// [`Self::rewrite`], with the number of id occurrences replaced; a
    /// body no string of which changed is not copied
    /// ([`Rewritten::body`] is `None`).
    ///
    /// The count is, per rewritten string, the aliases the rewrite added
    /// (tokens that are aliases by the grammar, after it less before it), and
    /// at least one: it includes the session's earlier ids found at rewrite
    /// time, and an alias the model already held, answered with itself,
    /// counts for nothing.
    pub fn rewrite_counted(
        &self,
        body: &[u8],
        aliases: &[String],
        known: &[KnownAlias],
    ) -> Result<Rewritten, RewriteError> {
        let rewriter = self.scan.rewriter(aliases, known)?;
        let mut edits: Vec<(Range<usize>, Cow<'_, str>)> = Vec::new();
        let mut replaced: Vec<StringEdit> = Vec::new();
        let mut ids = 0;
        for s in &self.strings {
            let (out, found) = rewriter.rewrite_counted(s.part, s.text.as_bytes())?;
            if out == s.text.as_bytes() {
                continue;
            }
            let text = String::from_utf8(out).map_err(|_| JsonError::NotUtf8)?;
            // A string changed only where an id was replaced: at least one.
            ids += found.max(1);
            let neutral = !s.json && !reads_word(&s.text) && !reads_word(&text);
            let value = if s.json {
                text
            } else {
                serde_json::to_string(&text).map_err(|_| JsonError::NotUtf8)?
            };
            replaced.push(StringEdit {
                span: s.span.clone(),
                len: value.len(),
                was: s.text.clone(),
                neutral,
            });
            edits.push((s.span.clone(), Cow::Owned(value)));
        }
        Ok(Rewritten {
            body: (!edits.is_empty()).then(|| splice(body, edits)),
            ids,
            edits: replaced,
        })
    }
}

/// `text` (a turn or a tool-search query read from an LLM request before it
/// was aliased) with every raw id replaced by its alias, by the rules of a
/// string of the request ([`PromptScan`]): `aliases` parallel to `ids` (the
/// request's encode batch, as control answered it), `known` the session's
/// earlier ids. Control ranks the aliased text, so retrieval never sees a raw
/// id. The result is verified like any rewrite.
///
/// Fails when an id of `text` has no alias among `ids` and `known`
/// ([`RewriteError::AliasCount`]; never expected: the text was read from the
/// body the batch was scanned from), or when the rewrite would leave a raw id.
pub fn alias_text(
    tax: &Taxonomy,
    text: &str,
    ids: &[IdInput],
    aliases: &[String],
    known: &[KnownAlias],
) -> Result<String, RewriteError> {
    let mut scan = ResponseScan::new(tax);
    let part = scan.add(text.as_bytes(), string_kind(text), None)?;
    if scan.ids().is_empty() && known.is_empty() {
        return Ok(text.to_owned());
    }
    let alias_of = |value: &str| {
        ids.iter()
            .zip(aliases)
            .find(|(id, _)| id.value == value)
            .map(|(_, alias)| alias.clone())
            .or_else(|| {
                known
                    .iter()
                    .find(|k| k.value == value)
                    .map(|k| k.alias.clone())
            })
    };
    let mine: Vec<String> = scan
        .ids()
        .iter()
        .filter_map(|id| alias_of(&id.value))
        .collect();
    if mine.len() != scan.ids().len() {
        return Err(RewriteError::AliasCount {
            got: mine.len(),
            want: scan.ids().len(),
        });
    }
    let out = scan
        .rewriter(&mine, known)?
        .rewrite(part, text.as_bytes())?;
    String::from_utf8(out).map_err(|_| RewriteError::Json(JsonError::NotUtf8))
}

/// A rewritten request body ([`PromptScan::rewrite_counted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The body to forward; `None` when no string changed: the body as
    /// sent is the body to forward, byte for byte.
    pub body: Option<Vec<u8>>,
    /// Id occurrences replaced by aliases.
    pub ids: usize,
    /// The strings replaced, in body order (the scan's strings never
    /// overlap: a string inside a value read whole is not scanned on its
    /// own); empty when [`Self::body`] is `None`.
    pub edits: Vec<StringEdit>,
}

/// Why an LLM request's ids could not be aliased. The request is then
/// refused with [`Refusal::reply`], never forwarded with a raw id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Ids were found, but no session header says whose aliases they get (400).
    NoSession,
    /// The body is not a JSON document the scan can read (400).
    Unreadable,
    /// Control could not be reached, or did not answer with aliases (503).
    Control,
    /// Control's alias store is unavailable (503).
    Store,
    /// Control refused the batch: conflicting ids for one record, or another
    /// taxonomy than the filter's (422).
    Conflict,
    /// The answer did not fit the ids, or the rewrite would have left a raw
    /// id (422).
    Rewrite,
    /// Envoy refused to read or replace the body (500).
    Host,
}

impl Refusal {
    /// Every reason, in counter order.
    pub const ALL: [Refusal; 7] = [
        Refusal::NoSession,
        Refusal::Unreadable,
        Refusal::Control,
        Refusal::Store,
        Refusal::Conflict,
        Refusal::Rewrite,
        Refusal::Host,
    ];

    /// The reason's name (a counter suffix and the `reason=` of a log line).
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoSession => "no_session",
            Refusal::Unreadable => "unreadable",
            Refusal::Control => "control",
            Refusal::Store => "store",
            Refusal::Conflict => "conflict",
            Refusal::Rewrite => "rewrite",
            Refusal::Host => "host",
        }
    }

    /// The reason of a failed encode answer: `status` (0: a 200 whose body
    /// was not an encode answer) and the body, read as control's error body.
    /// Envoy answers 503 for an unreachable control without that body.
    pub fn of_answer(status: u16, body: Option<&[u8]>) -> Refusal {
        use crate::proto::alias::{ErrorBody, ErrorCode};
        let code = body
            .and_then(|b| serde_json::from_slice::<ErrorBody>(b).ok())
            .map(|e| e.error.code);
        match (status, code) {
            (_, Some(ErrorCode::StoreUnavailable)) => Refusal::Store,
            (
                _,
                Some(ErrorCode::Conflict | ErrorCode::TaxonomyMismatch | ErrorCode::UnknownKind),
            ) => Refusal::Conflict,
            _ => Refusal::Control,
        }
    }

    /// The local reply; `session_header` is named when it is missing.
    pub fn reply(self, session_header: &str) -> LocalReply {
        let (kind, message) = match self {
            Refusal::NoSession => (
                ErrorKind::InvalidRequest,
                format!(
                    "keyhole refuses this request: it carries record ids and no {session_header} header \
                     to alias them under; it was not sent"
                ),
            ),
            Refusal::Unreadable => (
                ErrorKind::InvalidRequest,
                "keyhole cannot read this request to alias its record ids (not a JSON document); it was not sent"
                    .to_owned(),
            ),
            Refusal::Control | Refusal::Store => (
                ErrorKind::Unavailable,
                format!(
                    "keyhole cannot alias the record ids in this request right now ({}); it was not sent, retry later",
                    if self == Refusal::Store { "alias store unavailable" } else { "control unavailable" }
                ),
            ),
            Refusal::Conflict => (
                ErrorKind::UnaliasableRequest,
                "keyhole refuses this request: its record ids could not be aliased (conflicting ids for one \
                 record, or a taxonomy control does not share); it was not sent"
                    .to_owned(),
            ),
            Refusal::Rewrite => (
                ErrorKind::UnaliasableRequest,
                "keyhole refuses this request: a record id in it could not be replaced by its alias; it was not sent"
                    .to_owned(),
            ),
            Refusal::Host => {
                (ErrorKind::Internal, "keyhole could not rewrite the record ids of this request; it was not sent".to_owned())
            }
        };
        reply::error(kind, &message)
    }
}

/// How a string is read: a tool result or argument list serialized to a
/// string is a JSON document and read by the JSON rules; anything else is text.
pub(crate) fn string_kind(text: &str) -> BodyKind {
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
    key.chars()
        .filter(|c| !matches!(c, '_' | '-'))
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

#[cfg(test)]
mod tests;
