//! Reading and rewriting LLM request bodies.
//!
//! A request body is read once, borrowing: only what a decision needs (each
//! function tool's name and description, the latest user turn, a forced
//! `tool_choice`) is looked at, and every tool object is kept as the exact byte
//! range the client sent. Rewriting splices those ranges back together, so a
//! kept tool is byte-for-byte the client's and the rest of the body is untouched
//! outside the rewritten arrays.
//!
//! Building a DOM of an 84 KB body costs ~10× more than borrowing slices of it,
//! and re-serialising would reorder keys and change number formatting.
//!
//! The body is checked as JSON once, by serde_json; what is read after that is
//! read shallowly (`shallow.rs`): a tool's schema is passed over by
//! matching brackets, never parsed. An agent sends the same registry on every
//! turn: with a [`Memo`] ([`parse_memo`], as the filter reads), a tools array
//! whose bytes were read before is recalled, not read or hashed again.
//!
//! # Formats
//! | [`Format`] | path | tools |
//! |---|---|---|
//! | [`Format::OpenAiChat`] | `…/chat/completions` | `tools[].function`, legacy `functions[]` |
//! | [`Format::OpenAiResponses`] | `…/responses` | `tools[]` with `type: function` and a top-level `name` |
//! | [`Format::Anthropic`] | `…/messages` | `tools[]` with `name`, `input_schema` |
//! | [`Format::Gemini`] | `…:generateContent`, `…:streamGenerateContent` | `tools[].functionDeclarations[]` |
//!
//! A path names the format when it ends like one of the above (after
//! percent-decoding and dot segments); any other path is read by body shape
//! (see [`parse`]). Custom (free-form) tools of OpenAI are client-defined and
//! count as function tools. The legacy `functions` array is read whatever the
//! format: it carries a registry just as well as `tools`.
//!
//! # Hardening
//! The top level is read key by key: a key that carries or forces tools may
//! appear once, and a key that folds to one of them (`"Tools"`, `"tool-choice"`,
//! `"toolſ"`) is refused, because some upstream parsers (Go's `encoding/json`)
//! match keys case-insensitively and would read a list the filter did not.
//! Every element of a tools array must be a function tool of the format or a
//! built-in on the format's allow-list ([`BuiltinTools`]) that defines no
//! function; keys in another spelling are refused (see `tools.rs`). So a tool
//! of another format, an unknown `type` or a look-alike is refused, never
//! kept uncounted. None of this is the last word: before a body leaves, the
//! filter counts tool-shaped objects with [`crate::tools::detect`], which shares no
//! code with this module.

mod anthropic;
mod body;
mod gemini;
mod memo;
mod openai;
mod responses;
mod sources;
mod stream;
mod tools;

pub use memo::Memo;
pub use sources::PASS_SETTING;
pub use stream::{ScanLimits, ScanStats, StreamScanner};
pub use tools::BuiltinTools;

use crate::json::shallow::{self, Raw};
use crate::json::StringEdit;
use crate::tools::recovery::{self, HistoryEvent};
use serde::Deserialize;
use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, LazyLock};

/// The request formats keyhole understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// OpenAI Chat Completions: `tools[].function`.
    OpenAiChat,
    /// OpenAI Responses: `tools[]` with `type: function` and a top-level `name`.
    OpenAiResponses,
    /// Anthropic Messages: `tools[]` with `name`, `description`, `input_schema`.
    Anthropic,
    /// Gemini `generateContent`: `tools[].functionDeclarations[]`.
    Gemini,
}

/// Reads an answer's function-call names (`None` for a call without one).
type ReadCalls = fn(&[u8], &mut dyn FnMut(Option<Cow<'_, str>>)) -> Result<(), serde_json::Error>;

/// Everything keyhole knows of one wire format, in one place: each
/// `format/<dialect>.rs` defines one, and nothing outside it matches on the
/// format.
///
/// # Adding a format
/// 1. A new `format/<dialect>.rs` with its request reader, its answer reader,
///    its built-in tools and a `pub(super) const DIALECT: Dialect`.
/// 2. One variant in [`Format`], in [`Format::ALL`], and one arm in
///    [`Format::dialect`] (the compiler asks for it).
struct Dialect {
    /// Stable name for logs, metrics and configuration.
    name: &'static str,
    /// Path endings (lowercase) that name the format.
    paths: &'static [&'static str],
    /// Built-in tools kept untouched by default ([`BuiltinTools`]).
    builtins: &'static [&'static str],
    /// Built-ins are tools-entry keys (`{"googleSearch": {}}`), not `type`s.
    builtins_by_key: bool,
    /// Built-ins carry a `name` (`{"type": "bash_20250124", "name": "bash"}`).
    builtins_named: bool,
    /// On an unrecognised path, whether the body's top level says it is this
    /// format; formats are asked in `sniff_rank` order (lowest first).
    by_top: fn(&body::Top<'_>) -> bool,
    sniff_rank: u8,
    /// Whether a tools element is shaped like this format's function tool.
    by_element: fn(&body::ElementShape<'_>) -> bool,
    /// Reads the tools and forcing fields of a request; returns its turn.
    read_request:
        for<'a, 'b> fn(&mut Builder<'a, 'b>, &body::Top<'a>) -> Result<String, FormatError>,
    /// Adds the names of the function calls in an answer (or streamed event).
    read_calls: ReadCalls,
    /// The request's history as far as the tool-search control tool is
    /// concerned: user messages with text, and the model's calls of it.
    read_history: fn(&body::Top<'_>) -> Vec<HistoryEvent>,
    /// The tool-search control tool as an element of this format's tools
    /// array (Gemini: as one function declaration).
    search_tool: fn() -> String,
}

impl Format {
    /// All formats, in a stable order.
    pub const ALL: [Format; 4] = [
        Format::OpenAiChat,
        Format::OpenAiResponses,
        Format::Anthropic,
        Format::Gemini,
    ];

    /// The format's dialect: the one place that knows its shapes.
    fn dialect(self) -> &'static Dialect {
        match self {
            Format::OpenAiChat => &openai::DIALECT,
            Format::OpenAiResponses => &responses::DIALECT,
            Format::Anthropic => &anthropic::DIALECT,
            Format::Gemini => &gemini::DIALECT,
        }
    }

    /// A short stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        self.dialect().name
    }

    /// The format named `name` ([`Self::as_str`]).
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.as_str() == name)
    }

    /// Adds the names of the function calls in an answer of this format (a
    /// whole response or one streamed event) to `out`, each name once.
    pub(crate) fn read_calls(
        self,
        json: &[u8],
        out: &mut Vec<String>,
    ) -> Result<(), serde_json::Error> {
        let mut add = |name: Option<Cow<'_, str>>| {
            if let Some(name) = name {
                if !name.is_empty() && !out.iter().any(|n| *n == name) {
                    out.push(name.into_owned());
                }
            }
        };
        (self.dialect().read_calls)(json, &mut add)
    }

    /// The format a request path names, if any. The query string is ignored and
    /// any prefix is allowed (`/openai/deployments/x/chat/completions?api-version=…`).
    ///
    /// The path is read as the upstream would route it: percent-escapes are
    /// decoded, dot segments resolved and letter case ignored, so
    /// `/v1/chat/%63ompletions` and `/x/../v1/messages` name their formats.
    pub fn from_path(path: &str) -> Option<Format> {
        let path = normalized_path(path);
        let path = path.trim_end_matches('/');
        Format::ALL
            .into_iter()
            .find(|f| f.dialect().paths.iter().any(|p| path.ends_with(p)))
    }
}

/// The path part of `path` (no query or fragment), percent-decoded, with dot
/// segments resolved, in lowercase.
fn normalized_path(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = |at: usize| bytes.get(at).and_then(|h| (*h as char).to_digit(16));
        match (b, hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                decoded.push((hi * 16 + lo) as u8);
                i += 3;
            }
            _ => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&decoded).to_lowercase();
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    segments.join("/")
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a request body could not be read. The filter answers these locally with
/// a 4xx and never forwards the body: a body it cannot read could carry the
/// whole registry.
///
/// Messages never quote the body (it may hold patient data): they name the
/// format, the place (`tools[3]`, `line 1 column 20`) and a fixed description.
/// The `#[source]` parser error may quote the body; do not log it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The body is not UTF-8.
    #[error("request body is not UTF-8")]
    NotUtf8,
    /// The body is JSON but not a JSON object.
    #[error("request body is not a JSON object")]
    NotAnObject,
    /// The body is not valid JSON, or a field keyhole reads has the wrong shape.
    #[error("request body is not a readable {format} request at {at}: {problem}")]
    Json {
        /// The format being read.
        format: &'static str,
        /// Where: `line L column C` of the body, or the field (`tools[3]`).
        at: String,
        /// A fixed description of what is wrong.
        problem: &'static str,
        /// The parser's complaint; it may quote the body.
        #[source]
        source: serde_json::Error,
    },
    /// An element of a tools array is not a tool of the detected format.
    #[error("{at} is not a {format} tool: {problem}")]
    Tool {
        /// The format being read.
        format: &'static str,
        /// The element (`tools[3]`, `tools[0].functionDeclarations[2]`).
        at: String,
        /// What is missing or wrong.
        problem: &'static str,
    },
    /// A key that carries or forces tools appears twice.
    #[error("request body has the key {key:?} more than once")]
    DuplicateKey {
        /// The key, as keyhole reads it.
        key: &'static str,
    },
    /// A key differs only in letter case from one that carries tools.
    #[error("request body has a key spelled like {key:?} in another letter case")]
    CaseVariantKey {
        /// The key it resembles.
        key: &'static str,
    },
    /// A tool source (an MCP server the provider reads itself) that nothing
    /// bounds: keyhole cannot know how many tools it brings.
    #[error("{at} lets the provider load every tool of an MCP server, which keyhole cannot count: name the tools in `{member}`, or set `{setting}` on this listener to pass such servers knowingly")]
    UnboundedToolSource {
        /// The element (`tools[2]`, `mcp_servers[0]`).
        at: String,
        /// The member that would bound it.
        member: &'static str,
        /// The listener setting that passes it.
        setting: &'static str,
    },
    /// The body carries tools but matches none of the known formats. The filter
    /// must reject it: forwarding it could forward the whole registry.
    #[error("request body carries tools in an unknown format")]
    UnknownFormat,
    /// A span could not be located inside the body (never expected).
    #[error("internal: a JSON value was not borrowed from the body")]
    NotBorrowed,
}

impl FormatError {
    /// Whether the body carries tools in a shape keyhole does not know, as
    /// opposed to a body that is broken. Both are refused; the refusal's log
    /// line tells them apart (`reason=unknown-format`).
    pub fn is_unknown_format(&self) -> bool {
        matches!(self, FormatError::UnknownFormat)
    }
}

/// One function tool of a request.
#[derive(Debug, Clone)]
pub struct FunctionTool<'a> {
    /// The function name as sent.
    pub name: Cow<'a, str>,
    /// The description as sent (empty when absent).
    pub description: Cow<'a, str>,
    /// The words of its parameter schema
    /// ([`crate::tools::rank::schema_words`]), empty without one. Shared:
    /// a memo hands them out on every request and only a resend of the
    /// descriptors reads them.
    pub parameters: Arc<str>,
}

impl FunctionTool<'_> {
    /// The same tool, owning its strings.
    pub fn into_owned(self) -> FunctionTool<'static> {
        FunctionTool {
            name: Cow::Owned(self.name.into_owned()),
            description: Cow::Owned(self.description.into_owned()),
            parameters: self.parameters,
        }
    }
}

/// A parsed request: what a decision needs, plus where the tools sit in the body.
#[derive(Debug)]
pub struct ParsedRequest<'a> {
    /// The detected format.
    pub format: Format,
    /// Function tools, in request order. Non-function tools (built-in search,
    /// code interpreters) are not listed: they are always kept and never count
    /// against a budget.
    pub tools: Vec<FunctionTool<'a>>,
    /// Text of the latest user message that has text (text parts joined by
    /// newlines). User messages holding only tool results are skipped.
    pub turn: String,
    /// The first function of [`Self::forced`]: the one `tool_choice` names.
    pub tool_choice: Option<String>,
    /// Every function the request forces or restricts the model to, in request
    /// order, without duplicates: `tool_choice`, legacy `function_call`, or
    /// Gemini's `allowedFunctionNames` (which may list several). These are
    /// always kept — yet the filter's clamp to the phase budget still applies,
    /// since a client could name the whole registry here.
    pub forced: Vec<String>,
    /// The model's latest call of the tool-search control tool
    /// ([`crate::tools::recovery`]) after the latest user message with text, if it
    /// made one.
    pub search_call: Option<SearchCall>,
    /// Places of the budget taken by tools the provider loads itself from
    /// the MCP servers the request names ([`sources`]).
    pub sourced: usize,
    /// Tool definitions the independent detector counts in the body
    /// without any of the function tools keyhole chooses from (a
    /// structured-output schema, a replayed tool listing), once
    /// [`crate::tools::surface::read`] counted them.
    pub(crate) rest: Option<usize>,
    /// The arrays that hold tools, with each element's span, in body order.
    arrays: Vec<ToolArray>,
    /// The registry digest, when a [`Memo`] knew or learned it.
    digest: Option<String>,
}

/// A call of the tool-search control tool found in a request's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchCall {
    /// Its `query` argument ([`recovery::query_of`]); `None` when the call
    /// has no readable query.
    pub query: Option<String>,
}

/// A JSON array inside the body whose elements are (or contain) tools.
#[derive(Debug)]
struct ToolArray {
    /// Byte range of the whole array, brackets included.
    span: Range<usize>,
    /// The array's elements, in order.
    elements: Vec<Element>,
    /// Which array it is.
    role: ArrayRole,
}

/// Which tools array a [`ToolArray`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArrayRole {
    /// The format's top-level `tools`.
    Tools,
    /// The legacy top-level `functions`.
    Functions,
    /// A Gemini `functionDeclarations` array inside a tools entry.
    Declarations,
}

/// Where a rewrite adds the control tool: the top-level array at `array`
/// (an index into [`ParsedRequest::arrays`]), or the inner array of its
/// element `into`; `bytes` is the element.
#[derive(Debug)]
struct Placement {
    array: usize,
    into: Option<usize>,
    bytes: Vec<u8>,
}

/// What a rewrite adds to one array.
#[derive(Debug, Clone, Copy)]
enum Add<'x> {
    /// Nothing.
    Nothing,
    /// This element, after the kept ones.
    Append(&'x [u8]),
    /// This element, appended to the inner array of the element at this index.
    Into(usize, &'x [u8]),
}

/// One element of a [`ToolArray`].
#[derive(Debug)]
struct Element {
    /// Byte range of the element.
    span: Range<usize>,
    /// What the element is.
    item: Item,
}

#[derive(Debug)]
enum Item {
    /// A function tool: its index in [`ParsedRequest::tools`].
    Function(usize),
    /// A non-function tool: always kept.
    Other,
    /// A tool source (an MCP server): always kept, and its places counted
    /// ([`sources`]).
    Source(sources::Source),
    /// An object holding an array of function tools (a Gemini tools entry):
    /// the inner array is rewritten in place. When `only_key` (the entry holds
    /// nothing but that array) and none of its functions is kept, the entry is
    /// dropped rather than sent empty.
    Group { inner: ToolArray, only_key: bool },
}

/// Reads `body` as a request of some known format.
///
/// | result | meaning | the filter |
/// |---|---|---|
/// | `Ok(Some(req))` | a known format carrying a `tools` (or `functions`) array | resolves and rewrites |
/// | `Ok(None)` | no tools anywhere keyhole reads (empty body included) | forwards untouched |
/// | `Err(FormatError::UnknownFormat)` | tools, but not in a known shape | rejects (400) |
/// | `Err(_)` | unreadable | rejects (400) |
///
/// The format comes from the path ([`Format::from_path`]) when it names one,
/// and the body must then be of that format. Otherwise the body's shape
/// decides: `contents` means Gemini; then the first tool element that has
/// `function`, `functionDeclarations`, `input_schema`, or `type: function` with
/// a top-level `name`; then a `tool_choice` with a `function` object, a legacy
/// `functions` array, an `input` (Responses), or `messages` (Anthropic when a
/// top-level `system` is present, else Chat). A non-empty tools array that
/// none of these settles is [`FormatError::UnknownFormat`].
pub fn parse<'a>(path: &str, body: &'a [u8]) -> Result<Option<ParsedRequest<'a>>, FormatError> {
    static DEFAULT: LazyLock<BuiltinTools> = LazyLock::new(BuiltinTools::default);
    parse_with(path, body, &DEFAULT)
}

/// [`parse`] with an operator's allow-lists of built-in tools.
pub fn parse_with<'a>(
    path: &str,
    body: &'a [u8],
    builtins: &BuiltinTools,
) -> Result<Option<ParsedRequest<'a>>, FormatError> {
    read(path, body, builtins, None)
}

/// [`parse_with`], recalling tools arrays read before from `memo` and
/// remembering new ones (see [`Memo`]): the result is the same.
pub fn parse_memo<'a>(
    path: &str,
    body: &'a [u8],
    builtins: &BuiltinTools,
    memo: &mut Memo,
) -> Result<Option<ParsedRequest<'a>>, FormatError> {
    read(path, body, builtins, Some(memo))
}

fn read<'a>(
    path: &str,
    body: &'a [u8],
    builtins: &BuiltinTools,
    memo: Option<&mut Memo>,
) -> Result<Option<ParsedRequest<'a>>, FormatError> {
    let body = std::str::from_utf8(body).map_err(|_| FormatError::NotUtf8)?;
    if body.trim().is_empty() {
        return Ok(None);
    }
    let top = body::Top::read(body, memo.as_deref())?;
    if !top.carries_tools() {
        return Ok(None);
    }
    let format = match Format::from_path(path) {
        Some(format) => format,
        None => match top.shape(builtins) {
            Some(format) => format,
            None if top.tools_are_empty() => return Ok(None),
            None => return Err(FormatError::UnknownFormat),
        },
    };
    let mut b = Builder {
        body,
        index: None,
        known: top.known.clone(),
        format,
        builtins,
        memo,
        tools: Vec::new(),
        arrays: Vec::new(),
        digests: Vec::new(),
        forced: Vec::new(),
    };
    let turn = (format.dialect().read_request)(&mut b, &top)?;
    b.legacy(&top)?;
    let sourced = b.source_places(&top)?;
    // The history is read only when the control tool's name appears in it at
    // all: most requests never called it. (A name written with escapes is not
    // found: that only forgoes a search, it never widens a set.)
    let search_call = if top.history_mentions(recovery::TOOL_NAME) {
        recovery::latest_search(&(format.dialect().read_history)(&top))
            .map(|query| SearchCall { query })
    } else {
        None
    };
    Ok(Some(b.finish(turn, search_call, sourced)))
}

impl ParsedRequest<'_> {
    /// The same request, owning its strings, so it can outlive the body it was
    /// read from (the filter keeps it across the callout to control instead of
    /// reading the body twice). Spans still refer to that body.
    pub fn into_owned(self) -> ParsedRequest<'static> {
        ParsedRequest {
            format: self.format,
            tools: self
                .tools
                .into_iter()
                .map(FunctionTool::into_owned)
                .collect(),
            turn: self.turn,
            tool_choice: self.tool_choice,
            forced: self.forced,
            search_call: self.search_call,
            sourced: self.sourced,
            rest: self.rest,
            arrays: self.arrays,
            digest: self.digest,
        }
    }

    /// This request as read from the body `edits` made of the body it was
    /// read from, without reading that body: every tools array moved by what
    /// the edits before it added or removed. The turn and the tool-search
    /// query stay as read (the caller replaces them). The count of the rest
    /// of the body is kept when every edit is [`StringEdit::neutral`], else
    /// cleared (count it on the new body).
    ///
    /// `None` when the edits do not leave the read valid: one touches a
    /// tools array, one replaced a string that is a name the request forces
    /// (`tool_choice`, `allowedFunctionNames`: the read of the new body would
    /// hold the new name), or they are not in body order without overlap.
    /// Then read the new body.
    pub fn moved(mut self, edits: &[StringEdit]) -> Option<Self> {
        let ordered = edits.windows(2).all(|w| match w {
            [a, b] => a.span.start <= a.span.end && a.span.end <= b.span.start,
            _ => true,
        });
        // `tool_choice` is the first of `forced`.
        let forced = edits.iter().any(|e| self.forced.contains(&e.was));
        let touched = self.arrays.iter().any(|a| {
            edits
                .iter()
                .any(|e| e.span.start < a.span.end && a.span.start < e.span.end)
        });
        if !ordered || forced || touched {
            return None;
        }
        for array in &mut self.arrays {
            let mut delta = 0isize;
            for e in edits.iter().take_while(|e| e.span.end <= array.span.start) {
                let (Ok(new), Ok(old)) = (isize::try_from(e.len), isize::try_from(e.span.len()))
                else {
                    return None;
                };
                delta += new - old;
            }
            if !array.shift(delta) {
                return None;
            }
        }
        // The detector's count of the rest holds when every edit replaced
        // a string the detector does not read by another.
        if !edits.iter().all(|e| e.neutral) {
            self.rest = None;
        }
        Some(self)
    }

    /// The registry digest of the function tools
    /// ([`crate::proto::tools::registry_digest`]), as control keys registries.
    pub fn registry_digest(&self) -> String {
        match &self.digest {
            Some(digest) => digest.clone(),
            None => crate::proto::tools::registry_digest(
                self.tools
                    .iter()
                    .map(|t| (t.name.as_ref(), t.description.as_ref(), &*t.parameters)),
            ),
        }
    }

    /// Whether the request carries a function tool named `name`.
    pub fn carries(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// The tool descriptors to send to control.
    pub fn descriptors(&self) -> Vec<crate::proto::tools::ToolDescriptor> {
        self.tools
            .iter()
            .map(|t| crate::proto::tools::ToolDescriptor {
                name: t.name.clone().into_owned(),
                description: t.description.clone().into_owned(),
                parameters: t.parameters.to_string(),
            })
            .collect()
    }

    /// Indexes of the function tools to keep for a list of names: the first
    /// tool of each name, in the order of `names`, duplicates and unknown names
    /// skipped, at most `limit` of them.
    pub fn select(&self, names: &[&str], limit: usize) -> Vec<usize> {
        let mut kept: Vec<usize> = Vec::with_capacity(names.len().min(limit));
        for name in names {
            if kept.len() >= limit {
                break;
            }
            let found = self.tools.iter().position(|t| t.name == *name);
            if let Some(i) = found {
                if !kept.contains(&i) {
                    kept.push(i);
                }
            }
        }
        kept
    }

    /// The body with only the function tools at `keep` (indexes into
    /// [`Self::tools`]); non-function tools stay. `body` must be the bytes this
    /// request was parsed from. Kept elements keep their request order; in an
    /// array that lost elements the separators between them become a bare `,`,
    /// and an array that lost none is copied as it was.
    ///
    /// Gemini: declarations are removed inside each `functionDeclarations`
    /// array. A tools entry holding nothing but that array is removed whole
    /// when none of its declarations is kept (an entry with no declarations
    /// has no meaning); an entry that also holds something else (a built-in
    /// tool in the same object) keeps it, with an empty array.
    pub fn rewrite(&self, body: &[u8], keep: &[usize]) -> Vec<u8> {
        self.splice(body, keep, None)
    }

    /// [`Self::rewrite`], with the tool-search control tool
    /// ([`crate::tools::recovery`]) added in this request's format: after the kept
    /// tools of the `tools` array (Gemini: as a declaration at the end of the
    /// first `functionDeclarations` array that goes out, else in a tools
    /// entry of its own at the end), or, in a request that has only the
    /// legacy `functions` array, at its end in that array's shape.
    pub fn rewrite_with_search_tool(&self, body: &[u8], keep: &[usize]) -> Vec<u8> {
        let Some(place) = self.search_tool_place(keep) else {
            return self.rewrite(body, keep);
        };
        self.splice(body, keep, Some(place))
    }

    /// Where the control tool goes.
    fn search_tool_place(&self, keep: &[usize]) -> Option<Placement> {
        if let Some(array) = self.arrays.iter().position(|a| a.role == ArrayRole::Tools) {
            let elements = &self.arrays.get(array)?.elements;
            let tool = (self.format.dialect().search_tool)();
            if self.format.dialect().builtins_by_key {
                let group = elements
                    .iter()
                    .position(|e| matches!(e.item, Item::Group { .. }) && e.emitted(keep));
                return Some(match group {
                    Some(g) => Placement {
                        array,
                        into: Some(g),
                        bytes: tool.into_bytes(),
                    },
                    None => Placement {
                        array,
                        into: None,
                        bytes: format!(r#"{{"functionDeclarations":[{tool}]}}"#).into_bytes(),
                    },
                });
            }
            return Some(Placement {
                array,
                into: None,
                bytes: tool.into_bytes(),
            });
        }
        let array = self
            .arrays
            .iter()
            .position(|a| a.role == ArrayRole::Functions)?;
        Some(Placement {
            array,
            into: None,
            bytes: legacy_search_tool().into_bytes(),
        })
    }

    /// Writes the body with the kept tools and the element `add` places.
    fn splice(&self, body: &[u8], keep: &[usize], add: Option<Placement>) -> Vec<u8> {
        let mut out = Vec::with_capacity(body.len().min(16 * 1024));
        let mut at = 0;
        for (i, array) in self.arrays.iter().enumerate() {
            out.extend_from_slice(body.get(at..array.span.start).unwrap_or_default());
            let here = match &add {
                Some(p) if p.array == i => match p.into {
                    Some(element) => Add::Into(element, &p.bytes),
                    None => Add::Append(&p.bytes),
                },
                _ => Add::Nothing,
            };
            array.write(body, keep, &mut out, here);
            at = array.span.end;
        }
        out.extend_from_slice(body.get(at..).unwrap_or_default());
        out
    }
}

/// The JSON Schema of the control tool's parameters: one required string
/// `query`. `closed`: no other property (OpenAI's strict mode asks for it).
fn search_parameters(closed: bool) -> serde_json::Value {
    let mut schema = serde_json::json!({
        "type": "object",
        "properties": {"query": {"type": "string", "description": recovery::QUERY_DESCRIPTION}},
        "required": ["query"],
    });
    if closed {
        if let Some(map) = schema.as_object_mut() {
            map.insert(
                "additionalProperties".to_owned(),
                serde_json::Value::Bool(false),
            );
        }
    }
    schema
}

/// The control tool in the legacy `functions` array's shape.
fn legacy_search_tool() -> String {
    serde_json::json!({
        "name": recovery::TOOL_NAME,
        "description": recovery::DESCRIPTION,
        "parameters": search_parameters(true),
    })
    .to_string()
}

/// The `query` argument of a call: `arguments` is an object, or (OpenAI)
/// a string holding one.
fn query_argument(arguments: Option<Raw<'_>>) -> Option<String> {
    #[derive(Deserialize)]
    struct Args<'a> {
        #[serde(borrow, default)]
        query: Option<Cow<'a, str>>,
    }
    let raw = arguments?;
    let args: Args<'_> = match shallow::from_str::<Cow<'_, str>>(raw.get()) {
        Ok(text) => {
            return serde_json::from_str::<Args<'_>>(&text)
                .ok()?
                .query
                .and_then(|q| recovery::query_of(&q))
        }
        Err(_) => shallow::from_str(raw.get()).ok()?,
    };
    args.query.and_then(|q| recovery::query_of(&q))
}

// === impl ToolArray ===

impl ToolArray {
    /// Writes the array with only the kept function tools.
    ///
    /// An array that loses no element at its own level (a Gemini `tools`
    /// array whose entries all stay) keeps its original whitespace; one that
    /// loses elements is written compact.
    /// `add`: an element to append, or one to append inside an element.
    fn write(&self, body: &[u8], keep: &[usize], out: &mut Vec<u8>, add: Add<'_>) {
        let inner = |i: usize| match add {
            Add::Into(at, bytes) if at == i => Add::Append(bytes),
            _ => Add::Nothing,
        };
        let emitted: Vec<(usize, &Element)> = self
            .elements
            .iter()
            .enumerate()
            .filter(|(_, e)| e.emitted(keep))
            .collect();
        if emitted.len() == self.elements.len() {
            let mut at = self.span.start;
            for (i, element) in emitted {
                out.extend_from_slice(body.get(at..element.span.start).unwrap_or_default());
                element.write(body, keep, out, inner(i));
                at = element.span.end;
            }
            if let Add::Append(bytes) = add {
                if self.elements.is_empty() {
                    out.push(b'[');
                    out.extend_from_slice(bytes);
                    out.push(b']');
                    return;
                }
                out.push(b',');
                out.extend_from_slice(bytes);
            }
            out.extend_from_slice(body.get(at..self.span.end).unwrap_or_default());
            return;
        }
        out.push(b'[');
        let any = !emitted.is_empty();
        for (n, (i, element)) in emitted.into_iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            element.write(body, keep, out, inner(i));
        }
        if let Add::Append(bytes) = add {
            if any {
                out.push(b',');
            }
            out.extend_from_slice(bytes);
        }
        out.push(b']');
    }

    /// Moves the array and everything in it by `delta` bytes; false when a
    /// span would leave the addressable range (never expected).
    fn shift(&mut self, delta: isize) -> bool {
        let at = |x: &mut usize| match x.checked_add_signed(delta) {
            Some(moved) => {
                *x = moved;
                true
            }
            None => false,
        };
        at(&mut self.span.start)
            && at(&mut self.span.end)
            && self.elements.iter_mut().all(|e| {
                at(&mut e.span.start)
                    && at(&mut e.span.end)
                    && match &mut e.item {
                        Item::Group { inner, .. } => inner.shift(delta),
                        Item::Function(_) | Item::Other | Item::Source(_) => true,
                    }
            })
    }

    /// Whether any function tool of this array (or a nested one) is kept.
    fn keeps_any(&self, keep: &[usize]) -> bool {
        self.elements.iter().any(|e| match &e.item {
            Item::Function(i) => keep.contains(i),
            Item::Other | Item::Source(_) => false,
            Item::Group { inner, .. } => inner.keeps_any(keep),
        })
    }
}

// === impl Element ===

impl Element {
    /// Whether the element goes out when `keep` is kept.
    fn emitted(&self, keep: &[usize]) -> bool {
        match &self.item {
            Item::Function(i) => keep.contains(i),
            Item::Other | Item::Source(_) => true,
            Item::Group { inner, only_key } => !only_key || inner.keeps_any(keep),
        }
    }

    /// Writes the element: its own bytes, or for a group its bytes around
    /// the rewritten inner array.
    fn write(&self, body: &[u8], keep: &[usize], out: &mut Vec<u8>, add: Add<'_>) {
        match &self.item {
            Item::Group { inner, .. } => {
                out.extend_from_slice(
                    body.get(self.span.start..inner.span.start)
                        .unwrap_or_default(),
                );
                inner.write(body, keep, out, add);
                out.extend_from_slice(body.get(inner.span.end..self.span.end).unwrap_or_default());
            }
            Item::Function(_) | Item::Other | Item::Source(_) => {
                out.extend_from_slice(body.get(self.span.clone()).unwrap_or_default());
            }
        }
    }
}

/// Collects function tools, their arrays and the forced names while one
/// request is read.
struct Builder<'a, 'b> {
    body: &'a str,
    /// The ends of the containers of the top-level tools array being read.
    index: Option<shallow::Index<'a>>,
    /// Tools arrays whose bytes the memo holds ([`body::Top::known`]).
    known: Vec<(Raw<'a>, memo::Known)>,
    format: Format,
    builtins: &'b BuiltinTools,
    memo: Option<&'b mut Memo>,
    tools: Vec<FunctionTool<'a>>,
    arrays: Vec<ToolArray>,
    /// The registry digest of each top-level array's tools, when known.
    digests: Vec<Option<String>>,
    forced: Vec<String>,
}

impl<'a> Builder<'a, '_> {
    /// Records a function tool, with the words of its parameter `schema`,
    /// and returns its item. Runs once per registry while a memo holds it.
    fn function(
        &mut self,
        name: Cow<'a, str>,
        description: Option<Cow<'a, str>>,
        schema: Option<Raw<'a>>,
    ) -> Item {
        // The body is valid JSON, so is the schema: a schema that is no
        // object (or no JSON Schema at all) simply has no words.
        let parameters = schema
            .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok())
            .map(|schema| crate::tools::rank::schema_words::schema_words(&schema))
            .unwrap_or_default();
        self.tools.push(FunctionTool {
            name,
            description: description.unwrap_or_default(),
            parameters: Arc::from(parameters),
        });
        Item::Function(self.tools.len() - 1)
    }

    /// Reads the array `raw` (named `at` in errors), classifying each element
    /// with `each(builder, element_path, element)`.
    fn array(
        &mut self,
        raw: Raw<'a>,
        at: &str,
        role: ArrayRole,
        mut each: impl FnMut(&mut Self, &dyn Fn() -> String, Raw<'a>) -> Result<Item, FormatError>,
    ) -> Result<ToolArray, FormatError> {
        let span = span_of(self.body, raw)?;
        // Top-level arrays are remembered whole, nested ones with them.
        let top_level = role != ArrayRole::Declarations;
        let first_tool = self.tools.len();
        let key = memo::Key {
            format: self.format,
            role,
            builtins: self.builtins,
            text: raw.get(),
            start: span.start,
        };
        if let Some(memo) = self.memo.as_deref_mut().filter(|_| top_level) {
            let same = |(r, _): &&(Raw<'a>, memo::Known)| {
                r.get().as_ptr() == raw.get().as_ptr() && r.get().len() == raw.get().len()
            };
            let known = self.known.iter().find(same).map(|(_, k)| *k);
            if let Some(recalled) = memo.recall(&key, first_tool, known) {
                self.tools.extend(recalled.tools);
                self.digests.push(Some(recalled.digest));
                return Ok(recalled.array);
            }
        }
        // The body is checked: each tool, its function object and its schema
        // are read with the ends of containers looked up, found in one pass,
        // not searched for again at every depth.
        if top_level {
            self.index = Some(shallow::Index::new(raw.get()));
        }
        let elements: Vec<Raw<'a>> = shallow::from_raw(self.index.as_ref(), raw)
            .map_err(|e| self.field_error(at.to_owned(), e))?;
        let mut out = Vec::with_capacity(elements.len());
        for (i, element) in elements.into_iter().enumerate() {
            let path = || format!("{at}[{i}]");
            let item = each(self, &path, element)?;
            out.push(Element {
                span: span_of(self.body, element)?,
                item,
            });
        }
        let array = ToolArray {
            span: span.clone(),
            elements: out,
            role,
        };
        if top_level {
            let tools = self.tools.get(first_tool..).unwrap_or_default();
            let digest = self
                .memo
                .as_deref_mut()
                .map(|memo| memo.remember(&key, &array, first_tool, tools));
            self.digests.push(digest);
        }
        Ok(array)
    }

    /// A serde error while reading the field `at`.
    fn field_error(&self, at: String, source: serde_json::Error) -> FormatError {
        FormatError::Json {
            format: self.format.as_str(),
            at,
            problem: problem_of(&source),
            source,
        }
    }

    /// An element of a tools array that is not a tool.
    fn tool_error(&self, at: String, problem: &'static str) -> FormatError {
        FormatError::Tool {
            format: self.format.as_str(),
            at,
            problem,
        }
    }

    /// Reads `raw` as `T`, naming the field `at` on error.
    fn read<T: Deserialize<'a>>(
        &self,
        raw: Raw<'a>,
        at: &dyn Fn() -> String,
    ) -> Result<T, FormatError> {
        shallow::from_raw(self.index.as_ref(), raw).map_err(|e| self.field_error(at(), e))
    }

    /// Reads the legacy `functions` array and `function_call`, whatever the
    /// format: a provider that still honours them would see a registry.
    fn legacy(&mut self, top: &body::Top<'a>) -> Result<(), FormatError> {
        if let Some(raw) = top.functions {
            let array = self.array(raw, "functions", ArrayRole::Functions, |b, at, raw| {
                b.spelling(raw, at)?;
                let f: Named<'_> = b.read(raw, at)?;
                b.named(f, at)
            })?;
            self.arrays.push(array);
        }
        if let Some(raw) = top.function_call {
            // `"auto"`, `"none"` or `{"name": …}`.
            if let Ok(Named {
                name: Some(name), ..
            }) = shallow::from_str::<Named<'_>>(raw.get())
            {
                self.forced.push(name.into_owned());
            }
        }
        Ok(())
    }

    /// The finished request.
    fn finish(
        self,
        turn: String,
        search_call: Option<SearchCall>,
        sourced: usize,
    ) -> ParsedRequest<'a> {
        let mut arrays = self.arrays;
        arrays.sort_by_key(|a| a.span.start);
        let mut unique: Vec<String> = Vec::with_capacity(self.forced.len());
        for name in self.forced {
            if !unique.contains(&name) {
                unique.push(name);
            }
        }
        // One array's digest is the request's; two arrays' tools are hashed
        // together when asked.
        let digest = match self.digests.as_slice() {
            [Some(digest)] => Some(digest.clone()),
            _ => None,
        };
        ParsedRequest {
            format: self.format,
            tools: self.tools,
            turn,
            tool_choice: unique.first().cloned(),
            forced: unique,
            search_call,
            sourced,
            rest: None,
            arrays,
            digest,
        }
    }
}

/// A function call's name in an answer: `{"name": …}` (other keys skipped).
#[derive(Deserialize)]
struct AnswerName<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// An answer's output item or content block: `{"type": …, "name": …}`.
#[derive(Deserialize)]
struct TypedName<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// A named tool object: `{"name": …, "description": …}` with its schema
/// (`parameters`, or Gemini's `parametersJsonSchema`; other keys skipped).
#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    description: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    parameters: Option<Raw<'a>>,
    #[serde(borrow, default, alias = "parameters_json_schema")]
    #[serde(rename = "parametersJsonSchema")]
    parameters_json_schema: Option<Raw<'a>>,
}

impl<'a> Builder<'a, '_> {
    /// Records the function tool `named` (at `at`), which must have a name.
    fn named(&mut self, named: Named<'a>, at: &dyn Fn() -> String) -> Result<Item, FormatError> {
        match named.name {
            Some(name) => {
                let schema = named.parameters.or(named.parameters_json_schema);
                Ok(self.function(name, named.description, schema))
            }
            None => Err(self.tool_error(at(), "a function tool without a name")),
        }
    }
}

/// A fixed, body-free description of a serde error.
fn problem_of(e: &serde_json::Error) -> &'static str {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax => "invalid JSON syntax",
        Category::Eof => "unexpected end of input",
        Category::Data => "a field is missing or has the wrong type",
        Category::Io => "read error",
    }
}

/// The byte range of `raw` inside `body`. `raw` must have been borrowed from
/// `body` by the parser; anything else is reported, not trusted.
fn span_of(body: &str, raw: Raw<'_>) -> Result<Range<usize>, FormatError> {
    let start = (raw.get().as_ptr() as usize)
        .checked_sub(body.as_ptr() as usize)
        .ok_or(FormatError::NotBorrowed)?;
    let end = start + raw.get().len();
    if end > body.len() {
        return Err(FormatError::NotBorrowed);
    }
    Ok(start..end)
}

/// Message content in any of the common shapes: a string, or a list of parts of
/// which the text parts carry `text`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Parts(#[serde(borrow)] Vec<Part<'a>>),
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// The text of one message content value; non-text parts are skipped.
fn content_text(raw: Raw<'_>) -> String {
    match shallow::from_str::<Content<'_>>(raw.get()) {
        Ok(Content::Text(t)) => t.into_owned(),
        Ok(Content::Parts(parts)) => {
            let texts: Vec<&str> = parts.iter().filter_map(|p| p.text.as_deref()).collect();
            texts.join("\n")
        }
        Ok(Content::Other(_)) | Err(_) => String::new(),
    }
}

/// A message of any format: a role and its content (`content` or `parts`).
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default, alias = "parts")]
    content: Option<Raw<'a>>,
}

/// The history of a messages array (`messages`, `contents`, `input`) for the
/// control tool: a message for which `is_user(role)` holds and whose text is
/// not blank is [`HistoryEvent::UserText`]; `calls(message)` adds the
/// message's calls of the control tool.
fn history<'a, M: Deserialize<'a>>(
    raw: Option<Raw<'a>>,
    user_text: impl Fn(&M) -> bool,
    calls: impl Fn(&M, &mut Vec<HistoryEvent>),
) -> Vec<HistoryEvent> {
    let Some(messages) = raw.and_then(|raw| shallow::from_str::<Vec<M>>(raw.get()).ok()) else {
        return Vec::new();
    };
    let mut events = Vec::new();
    for message in &messages {
        if user_text(message) {
            events.push(HistoryEvent::UserText);
        }
        calls(message, &mut events);
    }
    events
}

/// Whether a message `content` holds text that is not blank.
fn has_text(content: Option<Raw<'_>>) -> bool {
    content.is_some_and(|c| !content_text(c).trim().is_empty())
}

/// The event of a call named `name` with `arguments`, if it calls the control tool.
fn search_event(name: Option<&str>, arguments: Option<Raw<'_>>) -> Option<HistoryEvent> {
    (name == Some(recovery::TOOL_NAME)).then(|| HistoryEvent::Search(query_argument(arguments)))
}

/// The turn: the text of the latest message for which `is_user(role)` holds
/// and whose text is not blank. `raw` is the messages array; anything else
/// (or an unreadable array) gives an empty turn, since the turn only steers
/// retrieval and never widens what is forwarded.
fn latest_user_text(raw: Option<Raw<'_>>, is_user: impl Fn(Option<&str>) -> bool) -> String {
    let Some(raw) = raw else {
        return String::new();
    };
    let Ok(messages) = shallow::from_str::<Vec<Message<'_>>>(raw.get()) else {
        return String::new();
    };
    messages
        .iter()
        .rev()
        .filter(|m| is_user(m.role.as_deref()))
        .filter_map(|m| m.content)
        .map(content_text)
        .find(|t| !t.trim().is_empty())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod compat_tests;
