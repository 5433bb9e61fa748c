//! A generic framer for streamed LLM answers: server-sent events (`data:`
//! lines, every format) and streamed JSON (Gemini's `streamGenerateContent`
//! without `alt=sse`: one JSON array of responses; newline-delimited objects
//! work too). Each complete event is handed to its format's answer reader
//! ([`Format::read_calls`]), which names the tool calls in it.

use super::Format;

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
        ScanLimits {
            max_event_bytes: 64 * 1024,
            max_names: 64,
        }
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
        self.names
            .iter()
            .filter(|n| !surfaced.iter().any(|s| s.as_ref() == n.as_str()))
            .cloned()
            .collect()
    }

    /// Counts of what was read and skipped.
    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    /// Capacity of the event buffers (tests check memory stays bounded).
    #[cfg(test)]
    pub(crate) fn buffer_capacities(&self) -> (usize, usize) {
        (self.buf.capacity(), self.data.capacity())
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
        let reading = self.depth > self.object_depth
            || (!self.in_string && self.depth == self.object_depth && byte == b'{');
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
        if self.format.read_calls(json, &mut found).is_err() {
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
