//! Test support shared by keyhole's crates, written once: the catalog's HMS
//! samples with the paths that answer them, the leak oracle that finds raw
//! ids by shape, the generated HMS response corpus, a fake OpenAI-compatible
//! embedder, and loopback ports for servers told theirs in advance.
//!
//! This crate depends on no keyhole crate on purpose: `keyhole-core` uses it
//! as a dev-dependency, and a crate that depended on `keyhole-core` would give
//! core's unit tests a second, incompatible copy of core's types. What it
//! hands out is plain data (bytes, strings, its own ground-truth types).
//!
//! # Layout
//! - [`hms`]: the HMS samples and the leak oracle ([`hms::raw_ids`]).
//! - [`corpus`]: generated HMS responses with their ground truth.
//! - [`embedder`] (feature `embedder`): a fake embeddings endpoint on loopback.
//! - [`ports`]: ports for servers told theirs in advance, never ephemeral ones.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod corpus;
#[cfg(feature = "embedder")]
pub mod embedder;
pub mod hms;
pub mod ports;
