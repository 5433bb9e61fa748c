//! The tools arrays a reader met last, remembered with what reading them
//! gave.
//!
//! An agent sends the same registry on every turn: the same bytes in its
//! `tools` array. Reading them again (each tool's keys, its function object,
//! the end of its schema) and hashing every name and description for the
//! registry digest is most of the filter's work on a request. A [`Memo`]
//! keeps, for the last few arrays, their exact text and the result of
//! reading it: each element's span (relative to the array), what it is, the
//! function tools and their digest. An array whose text is byte for byte one
//! of them, read as the same format with the same built-ins, is not read
//! again: the result is the one a fresh reading gives, since reading depends
//! on nothing else. The body around it is still read whole (and checked by
//! serde_json) every time.

use super::{ArrayRole, BuiltinTools, Element, Format, FunctionTool, Item, ToolArray};
use std::collections::VecDeque;
use std::ops::Range;

/// Arrays remembered.
const ENTRIES: usize = 4;
/// Bytes of array text remembered, at most (one array larger is not kept).
const BYTES: usize = 8 * 1024 * 1024;

/// The last tools arrays read ([`super::parse_memo`]); one per filter VM.
#[derive(Debug, Default)]
pub struct Memo {
    /// Most recently used first.
    entries: VecDeque<Entry>,
    bytes: usize,
    hits: u64,
    /// The id the next entry gets.
    next_id: u64,
}

/// A remembered array found at the start of a text ([`Memo::known`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Known {
    /// Its length.
    pub len: usize,
    /// The entry whose text it is.
    entry: u64,
}

#[derive(Debug)]
struct Entry {
    /// Unique in this memo.
    id: u64,
    format: Format,
    role: ArrayRole,
    builtins: BuiltinTools,
    text: String,
    /// Spans relative to the array's start; function indexes from 0.
    array: ToolArray,
    tools: Vec<FunctionTool<'static>>,
    /// The registry digest of `tools` ([`crate::proto::tools::registry_digest`]).
    digest: String,
}

/// Which array: read as `format`, in the role `role`, with `builtins`; its
/// exact `text`, starting at byte `start` of the body.
pub(super) struct Key<'k> {
    pub format: Format,
    pub role: ArrayRole,
    pub builtins: &'k BuiltinTools,
    pub text: &'k str,
    pub start: usize,
}

/// What a remembered array gives a reader.
pub(super) struct Recalled {
    pub array: ToolArray,
    pub tools: Vec<FunctionTool<'static>>,
    pub digest: String,
}

impl Memo {
    /// An empty memo.
    pub fn new() -> Memo {
        Memo::default()
    }

    /// How many arrays were recalled rather than read.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// The reading of the array `key`, whose function tools will be
    /// numbered from `first_tool`, if it was read before. `known`: the
    /// entry [`Self::known`] found for this very text, whose bytes need not
    /// be compared again.
    pub(super) fn recall(
        &mut self,
        key: &Key<'_>,
        first_tool: usize,
        known: Option<Known>,
    ) -> Option<Recalled> {
        let start = key.start;
        let at = self.entries.iter().position(|e| {
            let same_text = match known {
                Some(known) if known.entry == e.id => known.len == key.text.len(),
                _ => e.text.len() == key.text.len() && e.text == key.text,
            };
            e.format == key.format && e.role == key.role && e.builtins == *key.builtins && same_text
        })?;
        let entry = self.entries.remove(at)?;
        let recalled = Recalled {
            array: entry
                .array
                .moved(&|span| span.start + start..span.end + start, &|i| {
                    i + first_tool
                }),
            tools: entry.tools.clone(),
            digest: entry.digest.clone(),
        };
        self.entries.push_front(entry);
        self.hits += 1;
        Some(recalled)
    }

    /// The length of the remembered array `text` begins with, if any: a
    /// JSON array checked when it was remembered, whatever format read it.
    pub fn known_array(&self, text: &str) -> Option<usize> {
        self.known(text).map(|k| k.len)
    }

    /// [`Self::known_array`], naming the entry.
    pub(super) fn known(&self, text: &str) -> Option<Known> {
        self.entries
            .iter()
            .find(|e| text.as_bytes().starts_with(e.text.as_bytes()))
            .map(|e| Known {
                len: e.text.len(),
                entry: e.id,
            })
    }

    /// Remembers the reading of the array `key`: `array` (spans in the
    /// body) and its function tools `tools` (numbered from `first_tool` in
    /// `array`). Returns the tools' registry digest.
    pub(super) fn remember(
        &mut self,
        key: &Key<'_>,
        array: &ToolArray,
        first_tool: usize,
        tools: &[FunctionTool<'_>],
    ) -> String {
        let (text, start) = (key.text, key.start);
        let digest = crate::proto::tools::registry_digest(
            tools
                .iter()
                .map(|t| (t.name.as_ref(), t.description.as_ref(), &*t.parameters)),
        );
        if text.len() > BYTES {
            return digest;
        }
        let relative = array.moved(
            &|span| span.start.saturating_sub(start)..span.end.saturating_sub(start),
            &|i| i.saturating_sub(first_tool),
        );
        self.bytes += text.len();
        self.next_id += 1;
        self.entries.push_front(Entry {
            id: self.next_id,
            format: key.format,
            role: key.role,
            builtins: key.builtins.clone(),
            text: text.to_owned(),
            array: relative,
            tools: tools.iter().map(|t| t.clone().into_owned()).collect(),
            digest: digest.clone(),
        });
        while self.entries.len() > ENTRIES || self.bytes > BYTES {
            match self.entries.pop_back() {
                Some(old) => self.bytes = self.bytes.saturating_sub(old.text.len()),
                None => break,
            }
        }
        digest
    }
}

impl ToolArray {
    /// The same array with every span mapped by `span` and every function
    /// index by `tool`.
    fn moved(
        &self,
        span: &dyn Fn(&Range<usize>) -> Range<usize>,
        tool: &dyn Fn(usize) -> usize,
    ) -> ToolArray {
        ToolArray {
            span: span(&self.span),
            role: self.role,
            elements: self
                .elements
                .iter()
                .map(|e| Element {
                    span: span(&e.span),
                    item: match &e.item {
                        Item::Function(i) => Item::Function(tool(*i)),
                        Item::Other => Item::Other,
                        Item::Source(source) => Item::Source(source.clone()),
                        Item::Group { inner, only_key } => Item::Group {
                            inner: inner.moved(span, tool),
                            only_key: *only_key,
                        },
                    },
                })
                .collect(),
        }
    }
}
