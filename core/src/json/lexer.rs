//! A pull lexer over a JSON document that reports where every string sits.
//!
//! Rewriting ids in place needs the byte range of each string literal, and
//! serde_json reports none (a string with escapes is not even borrowed from the
//! input). This lexer checks the document's structure (brackets, commas,
//! colons, literals, numbers) and yields events with byte ranges; escaped
//! strings are decoded by serde_json, never by hand. It does not reject raw
//! control characters inside strings: they cannot hide an id.

use std::borrow::Cow;
use std::ops::Range;

/// Deepest nesting accepted; deeper documents are refused, not recursed into.
pub(crate) const MAX_DEPTH: usize = 512;

/// Why a body is not JSON. Carries the byte offset, never the content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// A byte that cannot appear here.
    #[error("unexpected byte at offset {at}")]
    Unexpected {
        /// Byte offset.
        at: usize,
    },
    /// The document ends inside a value.
    #[error("unexpected end of document at offset {at}")]
    Eof {
        /// Byte offset.
        at: usize,
    },
    /// A string escape is invalid.
    #[error("invalid string escape in the literal at offset {at}")]
    BadEscape {
        /// Byte offset of the literal.
        at: usize,
    },
    /// Nesting deeper than the limit.
    #[error("nesting deeper than {MAX_DEPTH} at offset {at}")]
    TooDeep {
        /// Byte offset.
        at: usize,
    },
    /// The body is not UTF-8.
    #[error("body is not UTF-8")]
    NotUtf8,
}

/// A string literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lit {
    /// Byte range of the literal, quotes included.
    pub span: Range<usize>,
    /// Whether it contains a backslash escape.
    pub escaped: bool,
}

impl Lit {
    /// Byte range of the content (quotes excluded).
    pub fn inner(&self) -> Range<usize> {
        self.span.start + 1..self.span.end - 1
    }
}

/// One lexer event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    StartObject,
    EndObject,
    StartArray,
    EndArray,
    /// An object key.
    Key(Lit),
    /// A string value.
    Str(Lit),
    /// A number, `true`, `false` or `null`.
    Scalar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A value must come (document start, after `:`, after `,` in an array).
    Value,
    /// After `[`: a value or `]`.
    ValueOrEnd,
    /// After `{`: a key or `}`.
    KeyOrEnd,
    /// After `,` in an object: a key.
    Key,
    /// After a value: `,` or the container's end.
    AfterValue,
    /// The document is complete.
    Done,
}

/// The lexer. Call [`Lexer::next_event`] until it returns `Ok(None)`.
pub(crate) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    /// `true` for an object, `false` for an array.
    stack: Vec<bool>,
    state: State,
    /// Byte range of the last scalar read.
    scalar: Range<usize>,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Self {
        Lexer {
            src,
            pos: 0,
            stack: Vec::new(),
            state: State::Value,
            scalar: 0..0,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.src.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn unexpected(&self) -> JsonError {
        if self.pos >= self.src.len() {
            JsonError::Eof { at: self.pos }
        } else {
            JsonError::Unexpected { at: self.pos }
        }
    }

    fn after_pop(&mut self) {
        self.state = if self.stack.is_empty() {
            State::Done
        } else {
            State::AfterValue
        };
    }

    fn push(&mut self, object: bool) -> Result<(), JsonError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(JsonError::TooDeep { at: self.pos });
        }
        self.stack.push(object);
        self.pos += 1;
        Ok(())
    }

    /// The next event, `Ok(None)` at the end of a complete document.
    ///
    /// Inlined into its caller's loop: the event's kind is then known where
    /// the lexer decides it, instead of being dispatched on a second time.
    #[inline]
    pub fn next_event(&mut self) -> Result<Option<Event>, JsonError> {
        loop {
            self.skip_ws();
            return match self.state {
                State::Done => {
                    if self.pos == self.src.len() {
                        Ok(None)
                    } else {
                        Err(JsonError::Unexpected { at: self.pos })
                    }
                }
                State::Value | State::ValueOrEnd => {
                    if self.state == State::ValueOrEnd && self.peek() == Some(b']') {
                        self.pos += 1;
                        self.stack.pop();
                        self.after_pop();
                        return Ok(Some(Event::EndArray));
                    }
                    self.value().map(Some)
                }
                State::KeyOrEnd | State::Key => match self.peek() {
                    Some(b'}') if self.state == State::KeyOrEnd => {
                        self.pos += 1;
                        self.stack.pop();
                        self.after_pop();
                        Ok(Some(Event::EndObject))
                    }
                    Some(b'"') => {
                        let lit = self.string()?;
                        self.skip_ws();
                        if self.peek() != Some(b':') {
                            return Err(self.unexpected());
                        }
                        self.pos += 1;
                        self.state = State::Value;
                        Ok(Some(Event::Key(lit)))
                    }
                    _ => Err(self.unexpected()),
                },
                State::AfterValue => {
                    let object = self.stack.last().copied().unwrap_or(false);
                    match (self.peek(), object) {
                        (Some(b','), true) => {
                            self.pos += 1;
                            self.state = State::Key;
                            continue;
                        }
                        (Some(b','), false) => {
                            self.pos += 1;
                            self.state = State::Value;
                            continue;
                        }
                        (Some(b'}'), true) => {
                            self.pos += 1;
                            self.stack.pop();
                            self.after_pop();
                            Ok(Some(Event::EndObject))
                        }
                        (Some(b']'), false) => {
                            self.pos += 1;
                            self.stack.pop();
                            self.after_pop();
                            Ok(Some(Event::EndArray))
                        }
                        _ => Err(self.unexpected()),
                    }
                }
            };
        }
    }

    fn value(&mut self) -> Result<Event, JsonError> {
        match self.peek() {
            Some(b'{') => {
                self.push(true)?;
                self.state = State::KeyOrEnd;
                Ok(Event::StartObject)
            }
            Some(b'[') => {
                self.push(false)?;
                self.state = State::ValueOrEnd;
                Ok(Event::StartArray)
            }
            Some(b'"') => {
                let lit = self.string()?;
                self.after_pop();
                Ok(Event::Str(lit))
            }
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.unexpected()),
        }
    }

    /// After [`Event::StartObject`] or [`Event::StartArray`]: moves past the
    /// container's end without lexing its content, which is then not
    /// checked (the caller checks the document another way). `len`: the
    /// container's length when the caller knows it, else its end is found
    /// by matching brackets.
    pub fn skip_container(&mut self, len: Option<usize>) -> Result<(), JsonError> {
        let start = self
            .pos
            .checked_sub(1)
            .ok_or(JsonError::Unexpected { at: self.pos })?;
        if !matches!(self.bytes().get(start), Some(b'{' | b'[')) {
            return Err(JsonError::Unexpected { at: start });
        }
        let end = match len {
            Some(len) => Some(start + len).filter(|end| *end <= self.src.len()),
            None => crate::json::shallow::value_end(self.bytes(), start),
        };
        self.pos = end.ok_or(JsonError::Eof { at: self.src.len() })?;
        self.stack.pop();
        self.after_pop();
        Ok(())
    }

    /// Byte offset just past the last event read (after a closing bracket:
    /// the end of its container).
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Byte range of the scalar the last [`Event::Scalar`] stood for.
    pub fn scalar_span(&self) -> Range<usize> {
        self.scalar.clone()
    }

    fn literal(&mut self, word: &[u8]) -> Result<Event, JsonError> {
        if self.bytes().get(self.pos..self.pos + word.len()) == Some(word) {
            self.scalar = self.pos..self.pos + word.len();
            self.pos += word.len();
            self.after_pop();
            Ok(Event::Scalar)
        } else {
            Err(self.unexpected())
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Event, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.unexpected()),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.unexpected());
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.unexpected());
            }
        }
        self.scalar = start..self.pos;
        self.after_pop();
        Ok(Event::Scalar)
    }

    /// Reads a string literal starting at the opening quote.
    fn string(&mut self) -> Result<Lit, JsonError> {
        let start = self.pos;
        let bytes = self.bytes();
        let mut i = start + 1;
        let mut escaped = false;
        loop {
            let rest = bytes.get(i..).ok_or(JsonError::Eof { at: i })?;
            let Some(rel) = memchr::memchr2(b'"', b'\\', rest) else {
                return Err(JsonError::Eof { at: bytes.len() });
            };
            i += rel;
            if bytes.get(i) == Some(&b'"') {
                self.pos = i + 1;
                let lit = Lit {
                    span: start..i + 1,
                    escaped,
                };
                if escaped {
                    // Validates the escapes now, so a later decode cannot fail.
                    text_of(self.src, &lit)?;
                }
                return Ok(lit);
            }
            escaped = true;
            // Skip the backslash and the escaped byte; `\uXXXX` is checked when
            // the literal is decoded.
            i += 2;
        }
    }
}

/// The content of a literal of `src`: borrowed when unescaped, decoded by
/// serde_json otherwise.
pub(crate) fn text_of<'a>(src: &'a str, lit: &Lit) -> Result<Cow<'a, str>, JsonError> {
    if lit.escaped {
        let raw = src
            .get(lit.span.clone())
            .ok_or(JsonError::BadEscape { at: lit.span.start })?;
        serde_json::from_str::<String>(raw)
            .map(Cow::Owned)
            .map_err(|_| JsonError::BadEscape { at: lit.span.start })
    } else {
        src.get(lit.inner())
            .map(Cow::Borrowed)
            .ok_or(JsonError::Eof { at: lit.span.start })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(src: &str) -> Result<Vec<String>, JsonError> {
        let mut lx = Lexer::new(src);
        let mut out = Vec::new();
        while let Some(e) = lx.next_event()? {
            out.push(match e {
                Event::StartObject => "{".into(),
                Event::EndObject => "}".into(),
                Event::StartArray => "[".into(),
                Event::EndArray => "]".into(),
                Event::Key(l) => format!("k:{}", text_of(src, &l)?),
                Event::Str(l) => format!("s:{}", text_of(src, &l)?),
                Event::Scalar => "#".into(),
            });
        }
        Ok(out)
    }

    #[test]
    fn lexes_nested_documents() {
        let got =
            events(r#" {"a": [1, -2.5e3, "x\"y", {"b": null}, []], "c": {}, "d": true} "#).unwrap();
        assert_eq!(
            got,
            [
                "{", "k:a", "[", "#", "#", "s:x\"y", "{", "k:b", "#", "}", "[", "]", "]", "k:c",
                "{", "}", "k:d", "#", "}"
            ]
        );
        assert_eq!(events(r#""\u00e9\n""#).unwrap(), ["s:é\n"]);
    }

    #[test]
    fn rejects_malformed_documents() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "[1 2]",
            "{} {}",
            "tru",
            "01",
            "1.",
            "\"abc",
            r#""\x""#,
            r#""\u12""#,
            "{1:2}",
            "[}",
            "-",
        ] {
            assert!(events(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert!(matches!(events(&deep), Err(JsonError::TooDeep { .. })));
    }

    #[test]
    fn spans_point_at_the_literals() {
        let src = r#"{"id":"a\/b","x":"plain"}"#;
        let mut lx = Lexer::new(src);
        let mut lits = Vec::new();
        while let Some(e) = lx.next_event().unwrap() {
            if let Event::Str(l) | Event::Key(l) = e {
                lits.push((&src[l.span.clone()], l.escaped));
            }
        }
        assert_eq!(
            lits,
            [
                ("\"id\"", false),
                (r#""a\/b""#, true),
                ("\"x\"", false),
                ("\"plain\"", false)
            ]
        );
    }
}
