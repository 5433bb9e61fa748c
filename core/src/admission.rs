//! Edge plan validation: which tools does the model's answer call?
//!
//! The filter surfaces a candidate set on every turn; the model may still name
//! a tool it was not shown (a hallucination, or a name it remembers from an
//! earlier turn). This module reads the function-call names out of an LLM
//! response so that the filter can flag, or replace, an answer that calls a
//! tool outside the surfaced set.
//!
//! - [`tool_calls`] / [`off_surface`] read a whole (non-streaming) response.
//! - [`StreamScanner`] is fed a streaming response chunk by chunk, split
//!   anywhere, with bounded memory, and reports names as they appear. It reads
//!   server-sent events (`data:` lines, every format) and streamed JSON
//!   (Gemini's `streamGenerateContent` without `alt=sse`: one JSON array of
//!   responses; newline-delimited objects work too).
//!
//! | [`Format`] | where a call's name is |
//! |---|---|
//! | OpenAI Chat | `choices[].message.tool_calls[].function.name` (`.custom.name`, legacy `function_call.name`); streamed in `choices[].delta` |
//! | OpenAI Responses | `output[]` items of type `function_call` / `custom_tool_call`; streamed as `response.output_item.added` / `.done` `item`, and `response.completed` |
//! | Anthropic | `content[]` blocks of type `tool_use`; streamed as `content_block_start` |
//! | Gemini | `candidates[].content.parts[].functionCall.name`, streamed the same |
//!
//! Built-in tools run by the provider (Anthropic `server_tool_use`, Responses
//! `web_search_call`) are not function calls and are not reported.

use crate::format::Format;
use serde::Deserialize;
use std::borrow::Cow;

/// Why a response could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdmissionError {
    /// The body is not JSON of the expected shape. The message never quotes
    /// the body; the `#[source]` parser error may.
    #[error("response body is not a readable {format} response at line {line} column {column}")]
    Json {
        /// The response format.
        format: &'static str,
        /// Line of the problem.
        line: usize,
        /// Column of the problem.
        column: usize,
        /// The parser's complaint; it may quote the body.
        #[source]
        source: serde_json::Error,
    },
}

/// The names of the function calls in a whole response of `format`, in
/// response order, each name once.
///
/// A response without calls (text, or a provider's error body) gives an
/// empty list. Fails when the body is not JSON, or a field read here has the
/// wrong type.
pub fn tool_calls(format: Format, body: &[u8]) -> Result<Vec<String>, AdmissionError> {
    let mut names = Vec::new();
    collect(format, body, &mut names).map_err(|source| AdmissionError::Json {
        format: format.as_str(),
        line: source.line(),
        column: source.column(),
        source,
    })?;
    Ok(names)
}

/// The function calls of a whole response that name a tool not in
/// `surfaced` (the function tools the request carried after the rewrite), in
/// response order, each name once. Empty when the answer stays on the surface.
///
/// Fails as [`tool_calls`] does.
pub fn off_surface<S: AsRef<str>>(format: Format, body: &[u8], surfaced: &[S]) -> Result<Vec<String>, AdmissionError> {
    let mut names = tool_calls(format, body)?;
    names.retain(|n| !is_surfaced(n, surfaced));
    Ok(names)
}

/// Whether `name` is one of `surfaced`.
pub fn is_surfaced<S: AsRef<str>>(name: &str, surfaced: &[S]) -> bool {
    surfaced.iter().any(|s| s.as_ref() == name)
}

/// Adds the call names of one JSON document (a whole response or one
/// streamed event) to `out`, skipping names already there.
fn collect(format: Format, json: &[u8], out: &mut Vec<String>) -> Result<(), serde_json::Error> {
    let mut add = |name: Option<Cow<'_, str>>| {
        if let Some(name) = name {
            if !name.is_empty() && !out.iter().any(|n| *n == name) {
                out.push(name.into_owned());
            }
        }
    };
    match format {
        Format::OpenAiChat => {
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
        }
        Format::OpenAiResponses => {
            let r: ResponsesEvent<'_> = serde_json::from_slice(json)?;
            let nested = r.response.and_then(|r| r.output).unwrap_or_default();
            let items = r.output.unwrap_or_default().into_iter().chain(r.item).chain(nested);
            for item in items {
                if matches!(item.kind.as_deref(), Some("function_call" | "custom_tool_call")) {
                    add(item.name);
                }
            }
        }
        Format::Anthropic => {
            let r: AnthropicEvent<'_> = serde_json::from_slice(json)?;
            let nested = r.message.and_then(|m| m.content).unwrap_or_default();
            let blocks = r.content.unwrap_or_default().into_iter().chain(r.content_block).chain(nested);
            for block in blocks {
                if block.kind.as_deref() == Some("tool_use") {
                    add(block.name);
                }
            }
        }
        Format::Gemini => {
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
        }
    }
    Ok(())
}

// === response shapes (whole responses and streamed events alike) ===

#[derive(Deserialize)]
struct Name<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
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
    function_call: Option<Name<'a>>,
}

#[derive(Deserialize)]
struct ChatCall<'a> {
    #[serde(borrow, default)]
    function: Option<Name<'a>>,
    #[serde(borrow, default)]
    custom: Option<Name<'a>>,
}

#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(borrow, default)]
    output: Option<Vec<TypedName<'a>>>,
    #[serde(borrow, default)]
    item: Option<TypedName<'a>>,
    #[serde(borrow, default)]
    response: Option<ResponsesOutput<'a>>,
}

#[derive(Deserialize)]
struct ResponsesOutput<'a> {
    #[serde(borrow, default)]
    output: Option<Vec<TypedName<'a>>>,
}

/// An output item or content block: `{"type": …, "name": …}`.
#[derive(Deserialize)]
struct TypedName<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(borrow, default)]
    content: Option<Vec<TypedName<'a>>>,
    #[serde(borrow, default)]
    content_block: Option<TypedName<'a>>,
    #[serde(borrow, default)]
    message: Option<AnthropicMessage<'a>>,
}

#[derive(Deserialize)]
struct AnthropicMessage<'a> {
    #[serde(borrow, default)]
    content: Option<Vec<TypedName<'a>>>,
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
    function_call: Option<Name<'a>>,
}

// === impl StreamScanner ===

/// Memory bounds of a [`StreamScanner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// Largest event (SSE `data`, or one streamed JSON object) that is read;
    /// larger ones are skipped and counted in [`ScanStats::oversized`]. Tool
    /// names arrive in small events; the large ones are text or a closing
    /// summary that repeats what was already seen.
    pub max_event_bytes: usize,
    /// Most distinct names kept; more are counted in
    /// [`ScanStats::names_dropped`].
    pub max_names: usize,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits { max_event_bytes: 64 * 1024, max_names: 64 }
    }
}

/// What a [`StreamScanner`] has seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Events (or streamed JSON objects) read.
    pub events: u64,
    /// Events that were not JSON of the expected shape.
    pub unreadable: u64,
    /// Events larger than [`ScanLimits::max_event_bytes`], skipped.
    pub oversized: u64,
    /// Distinct names beyond [`ScanLimits::max_names`], not kept.
    pub names_dropped: u64,
}

/// Reads tool-call names out of a streaming response, chunk by chunk.
///
/// The stream itself is never held: only the event being read (at most
/// [`ScanLimits::max_event_bytes`]) and the distinct names seen (at most
/// [`ScanLimits::max_names`]). Chunks may split the stream anywhere, inside a
/// line, a `\r\n` or a UTF-8 sequence. The first non-blank byte picks the
/// framing: `[` or `{` is streamed JSON, anything else server-sent events.
#[derive(Debug)]
pub struct StreamScanner {
    format: Format,
    limits: ScanLimits,
    framing: Framing,
    /// The current SSE line, or the current JSON object.
    buf: Vec<u8>,
    /// The `data` of the current SSE event.
    data: Vec<u8>,
    /// The current event or object is too large: skip it to its end.
    skipping: bool,
    /// SSE: the previous byte was `\r` (a following `\n` is the same line end).
    after_cr: bool,
    /// SSE: bytes in the current line, buffered or not (0 for a blank line).
    line_len: usize,
    /// Streamed JSON: nesting depth, string state, and the depth of the
    /// objects to read (0 for bare objects, 1 inside a top-level array).
    depth: usize,
    in_string: bool,
    escaped: bool,
    object_depth: usize,
    names: Vec<String>,
    stats: ScanStats,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Unknown,
    Sse,
    Json,
}

impl StreamScanner {
    /// A scanner for a streaming response of `format`.
    pub fn new(format: Format, limits: ScanLimits) -> Self {
        StreamScanner {
            format,
            limits,
            framing: Framing::Unknown,
            buf: Vec::new(),
            data: Vec::new(),
            skipping: false,
            after_cr: false,
            line_len: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            object_depth: 0,
            names: Vec::new(),
            stats: ScanStats::default(),
        }
    }

    /// Reads the next chunk of the stream; returns the names first seen in it.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        let before = self.names.len();
        for &byte in chunk {
            match self.framing {
                Framing::Unknown => {
                    if byte.is_ascii_whitespace() {
                        continue;
                    }
                    if byte == b'[' || byte == b'{' {
                        self.framing = Framing::Json;
                        self.object_depth = usize::from(byte == b'[');
                        self.json_byte(byte);
                    } else {
                        self.framing = Framing::Sse;
                        self.sse_byte(byte);
                    }
                }
                Framing::Sse => self.sse_byte(byte),
                Framing::Json => self.json_byte(byte),
            }
        }
        self.names.get(before..).unwrap_or_default().to_vec()
    }

    /// Ends the stream: reads an event left without its closing blank line.
    /// Returns the names first seen in it.
    pub fn finish(&mut self) -> Vec<String> {
        let before = self.names.len();
        if self.framing == Framing::Sse {
            self.end_line();
            self.dispatch();
        }
        self.names.get(before..).unwrap_or_default().to_vec()
    }

    /// Every distinct name seen so far, in stream order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The names seen so far that are not in `surfaced`.
    pub fn off_surface<S: AsRef<str>>(&self, surfaced: &[S]) -> Vec<String> {
        self.names.iter().filter(|n| !is_surfaced(n, surfaced)).cloned().collect()
    }

    /// Counts of what was read and skipped.
    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    /// Appends to the current line or object, or starts skipping it when it
    /// would grow past the limit.
    fn push(&mut self, byte: u8) {
        if self.skipping {
            return;
        }
        if self.buf.len() + self.data.len() >= self.limits.max_event_bytes {
            self.skipping = true;
            self.stats.oversized += 1;
            self.buf = Vec::new();
            self.data = Vec::new();
            return;
        }
        self.buf.push(byte);
    }

    fn sse_byte(&mut self, byte: u8) {
        let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
        match byte {
            b'\n' if after_cr => {}
            b'\n' | b'\r' => self.end_line(),
            _ => {
                self.line_len += 1;
                self.push(byte);
            }
        }
    }

    /// One SSE line is complete: a blank line ends the event, a `data` line
    /// adds to it, anything else (comments, `event`, `id`, `retry`) is skipped.
    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.buf);
        if std::mem::take(&mut self.line_len) == 0 {
            self.dispatch();
            return;
        }
        if self.skipping {
            return;
        }
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if !self.data.is_empty() {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
        }
    }

    /// The event is complete: read its data.
    fn dispatch(&mut self) {
        let data = std::mem::take(&mut self.data);
        let skipped = std::mem::replace(&mut self.skipping, false);
        if skipped || data.is_empty() || data.trim_ascii() == b"[DONE]" {
            return;
        }
        self.read_event(&data);
    }

    fn json_byte(&mut self, byte: u8) {
        let reading =
            self.depth > self.object_depth || (!self.in_string && self.depth == self.object_depth && byte == b'{');
        if reading {
            self.push(byte);
        }
        if self.in_string {
            match byte {
                _ if self.escaped => self.escaped = false,
                b'\\' => self.escaped = true,
                b'"' => self.in_string = false,
                _ => {}
            }
            return;
        }
        match byte {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if byte == b'}' && self.depth == self.object_depth {
                    let object = std::mem::take(&mut self.buf);
                    if !std::mem::replace(&mut self.skipping, false) {
                        self.read_event(&object);
                    }
                }
            }
            _ => {}
        }
    }

    fn read_event(&mut self, json: &[u8]) {
        self.stats.events += 1;
        let mut found = Vec::new();
        if collect(self.format, json, &mut found).is_err() {
            self.stats.unreadable += 1;
        }
        for name in found {
            if self.names.contains(&name) {
                continue;
            }
            if self.names.len() >= self.limits.max_names {
                self.stats.names_dropped += 1;
            } else {
                self.names.push(name);
            }
        }
    }
}

#[cfg(test)]
mod tests;
