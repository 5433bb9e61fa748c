//! Id aliasing: the model never sees a raw record id.
//!
//! HMS responses carry raw ids (UUIDs, FHIR ids and references, slugs); the
//! filter replaces each with a per-session alias `<prefix>-NNN` and decodes
//! aliases in requests back to the id form the target expects. Everything here
//! is pure: control owns the per-session state and its persistence, the filter
//! owns the I/O.
//!
//! # Layout
//! Words and rules:
//! - [`id`]: the words every stage shares ([`Form`], [`KindId`], [`Origin`]),
//!   at the bottom so the stages need not use each other.
//! - [`taxonomy`]: kinds, prefixes and the scanning rules, from configuration.
//! - [`fhir`]: every FHIR R4/R5 resource type, and the definition types that
//!   name no record.
//! - [`grammar`]: the alias grammar `<prefix>-<epoch>-NNN`, sentinels,
//!   near-miss repair.
//! - [`shape`]: id forms (uuid / FHIR id / slug) and ids inside free text.
//! - `known`: ids a session already knows, found wherever they stand as that id.
//! - `pairs`: a quick "certainly not" in front of the taxonomy's table lookups.
//!
//! The stages of a response, then the other directions:
//! - [`coding`], [`charset`]: undoing a body's content coding and reading
//!   windows-1252 / ISO-8859-1 as UTF-8, bounded.
//! - [`scan`]: collect every raw id of a response body (JSON, XML, CSV,
//!   key-value, text; sniffing what a body is).
//! - [`rewrite`]: splice the aliases in and verify that no raw id remains
//!   (fail closed).
//! - [`lastword`]: the independent last word on every HMS response (raw-id
//!   shapes in any encoding), sharing no code with the scanner and rewriter.
//! - [`prompt`]: find every raw id in an LLM request (outside the tool
//!   definitions) and rewrite them, by the same rules.
//! - [`reading`]: what the tool ranking reads of a text holding aliases (each
//!   as its kind and `id`, never its epoch and number).
//! - [`request`]: find aliases (and raw ids) in a request's path, query,
//!   headers and body, and rewrite the aliases to real ids.
//! - [`session`]: one session's alias map as a pure state machine.
//! - `corpus` (tests and the `corpus` feature only): generated responses with
//!   their ground truth, for the leak tests.
//!
//! The JSON of control's alias API is [`crate::proto::alias`].
//!
//! # Flow of a response
//! ```
//! use keyhole_core::alias::{BodyKind, ResponseScan, SessionMap, Taxonomy};
//!
//! let tax = Taxonomy::default();
//! let body = br#"{"data":{"id":"039b70b8-92f7-44b7-9c91-4e3f0e900c71","fhirId":"pat-000123"}}"#;
//! let mut scan = ResponseScan::new(&tax);
//! let part = scan.add(body, BodyKind::Json, tax.kind_for_path("/api/v2/patients/x")).unwrap();
//! // In keyhole, control answers this (`POST /v1/alias/encode`).
//! let mut session = SessionMap::new();
//! let aliases = session.encode(&tax, scan.ids()).unwrap().aliases;
//! let out = scan.rewrite(part, body, &aliases).unwrap();
//! assert_eq!(out, br#"{"data":{"id":"patient-001","fhirId":"patient-001"}}"#);
//! ```

pub mod charset;
pub mod coding;
pub mod fhir;
pub mod grammar;
pub mod id;
mod known;
pub mod lastword;
mod pairs;
pub mod prompt;
pub mod reading;
pub mod request;
pub mod rewrite;
pub mod scan;
pub mod session;
pub mod shape;
pub mod taxonomy;

pub use crate::json::JsonError;
pub use crate::proto::alias::{
    DecodeRequest, DecodeResponse, DecodedIds, EncodeRequest, EncodeResponse, IdInput, KnownAlias,
    RealIds,
};
pub use grammar::{AliasParts, Epoch};
pub use id::{Form, KindId, Origin};
pub use prompt::PromptScan;
pub use request::{RawIdCount, RequestError, RequestScan};
pub use rewrite::{RewriteError, Rewriter};
pub use scan::{BodyKind, PartId, ResponseScan};
pub use session::{Decoded, Encoded, EntityRecord, SessionError, SessionMap};
pub use shape::classify;
pub use taxonomy::{Kind, KindConfig, Taxonomy, TaxonomyConfig, TaxonomyError};

#[cfg(test)]
mod tests;
