//! Pure decision logic for keyhole.
//!
//! Nothing in this crate performs I/O, reads a clock or spawns a task: it builds for
//! `wasm32-wasip1` (inside the Envoy filter) and for the native control binary, and
//! both sides share one implementation of every decision.
//!
//! # Layout
//! The two features, what they share, and their protocol with the rest of
//! keyhole, each in its own module tree:
//! - [`tools`]: the tool surface of an LLM request — reading the four wire
//!   formats, the independent detector, ranking the registry, the bounded
//!   decision, recovery by the tool-search control tool.
//! - [`alias`]: raw record ids ↔ per-session aliases — the taxonomy, scanning
//!   and rewriting responses, prompts and requests, session maps, and the
//!   independent last word on every HMS response.
//! - [`json`]: the two JSON readers the features share beside serde_json.
//! - [`proto`]: what crosses a process or filter boundary: the JSON of
//!   control's APIs, the hold protocol with Envoy's Lua filters, the local
//!   error replies.
//! - [`config`]: the filter's plugin configuration, raw and validated.
//! - [`field`]: the one error type for a bad setting ([`FieldError`]).
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

pub mod alias;
pub mod config;
pub mod field;
pub mod json;
pub mod proto;
pub mod tools;

pub use field::FieldError;
pub use tools::phase::{Budget, Phase};
