//! Edge plan validation: which tools does the model's answer call?
//!
//! The filter surfaces a candidate set on every turn; the model may still name
//! a tool it was not shown (a hallucination, or a name it remembers from an
//! earlier turn). This module reads the function-call names out of an LLM
//! response so that the filter can flag, or replace, an answer that calls a
//! tool outside the surfaced set.
//!
//! - [`tool_calls`] / [`off_surface`] read a whole (non-streaming) response.
//! - [`StreamScanner`] (the framer lives in `format/stream.rs`) is fed a
//!   streaming response chunk by chunk, split anywhere, with bounded memory,
//!   and reports names as they appear.
//!
//! Where each format puts a call's name is its dialect's business
//! (`format/<dialect>.rs`); this module only decides what is off the surface.
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

use crate::tools::format::Format;

pub use crate::tools::format::{ScanLimits, ScanStats, StreamScanner};

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
    format
        .read_calls(body, &mut names)
        .map_err(|source| AdmissionError::Json {
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
pub fn off_surface<S: AsRef<str>>(
    format: Format,
    body: &[u8],
    surfaced: &[S],
) -> Result<Vec<String>, AdmissionError> {
    let mut names = tool_calls(format, body)?;
    names.retain(|n| !is_surfaced(n, surfaced));
    Ok(names)
}

/// Whether `name` is one of `surfaced`.
pub fn is_surfaced<S: AsRef<str>>(name: &str, surfaced: &[S]) -> bool {
    surfaced.iter().any(|s| s.as_ref() == name)
}

#[cfg(test)]
mod tests;
