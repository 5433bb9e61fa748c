//! The JSON readers keyhole uses beside serde_json, and when to use which.
//!
//! - serde_json first: every body is checked (and typed parts decoded) by it.
//! - [`shallow`]: reads parts of a JSON text serde_json has already checked —
//!   the members of the top object, the elements of an array — as byte ranges,
//!   without parsing the rest again. The tool surface uses it to rewrite a
//!   request's `tools` in place.
//! - [`lexer`]: a pull lexer that checks a document's structure and reports
//!   where every string sits. The alias engine uses it to splice ids in place,
//!   which needs the byte range of each string literal (serde_json gives none).
//!
//! The tool detector ([`crate::tools::detect`]) keeps its own reader on
//! purpose: it is the independent last word on a request and shares no parser
//! with what it checks.

pub mod lexer;
pub(crate) mod shallow;

pub use lexer::JsonError;

use std::ops::Range;

/// A string of a JSON body that a rewrite replaced: where it was, how long
/// its replacement is, and what it said. A read of the body before the
/// rewrite can be moved onto the body after it with these
/// ([`crate::tools::format::ParsedRequest::moved`]) instead of reading it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringEdit {
    /// Byte range of the value in the body as read (a string literal with
    /// its quotes, or a container read as one document).
    pub span: Range<usize>,
    /// Length in bytes of what replaced it.
    pub len: usize,
    /// Its decoded content before the rewrite.
    pub was: String,
    /// A string replaced by a string, neither a word the tool detector reads
    /// ([`crate::tools::detect::reads_word`]): the detector counts the body
    /// the same before and after this edit. A container read as one
    /// document never is (a number id in it becomes a string).
    pub neutral: bool,
}
