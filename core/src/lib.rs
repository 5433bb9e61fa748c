//! Pure decision logic for keyhole.
//!
//! Nothing in this crate performs I/O, reads a clock or spawns a task: it builds for
//! `wasm32-wasip1` (inside the Envoy filter) and for the native control binary, and
//! both sides share one implementation of every decision.
//!
//! # Layout
//! - [`admission`]: which tools an LLM response calls (edge plan validation).
//! - [`alias`]: raw record ids ↔ per-session aliases: scanning, rewriting, session maps.
//! - [`charset`]: windows-1252 / ISO-8859-1 bodies read as UTF-8.
//! - [`coding`]: undoing a body's `Content-Encoding` (gzip, deflate, br, zstd), bounded.
//! - [`config`]: the filter's plugin configuration, raw and validated.
//! - [`detect`]: the independent tool detector, the last word before a body leaves.
//! - [`field`]: the one error type for a bad setting ([`FieldError`]).
//! - [`format`](mod@format): reading and rewriting LLM request bodies without re-serialising them.
//! - [`hold`]: the hold protocol with Envoy's Lua hold filters (verdict lines).
//! - [`lastword`]: the independent last word on every HMS response (raw-id shapes in any encoding).
//! - [`phase`]: agent phases and their candidate-set budgets.
//! - [`reply`]: the JSON error bodies the filter answers locally.
//! - `shallow`: reading parts of a JSON text serde_json has checked, without parsing the rest again.
//! - [`prior`]: a bounded per-session memory of the last audited set.
//! - [`rank`]: the candidate-set engine: ranking, floors, phase budgets, bounded fallback.
//! - [`recovery`]: the tool-search control tool (recovery when retrieval misses).
//! - [`surface`]: the filter's bounded decision on one LLM request.
//! - [`wire`]: the JSON types exchanged between the filter and control.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod admission;
pub mod alias;
pub mod charset;
pub mod coding;
pub mod config;
pub mod detect;
pub mod field;
pub mod format;
pub mod hold;
pub mod lastword;
pub mod phase;
pub mod prior;
pub mod rank;
pub mod recovery;
pub mod reply;
mod shallow;
pub mod surface;
pub mod wire;

pub use field::FieldError;
pub use phase::{Budget, Phase};
