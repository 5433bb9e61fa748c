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
