//! keyhole control: the decisions that need I/O.
//!
//! The filter asks control, over a Unix socket, which tools a turn may see.
//! Control owns the embedder client, the vector index and per-session state.
//!
//! # Layout
//! - [`alias`]: per-session alias stores (redb, Redis) and the `/v1/alias/*` routes.
//! - [`config`]: the TOML configuration file, checked field by field.
//! - [`embed`]: OpenAI-compatible `/v1/embeddings` client: tool texts cached on
//!   disk, turns batched across concurrent resolves and cached in memory by
//!   canonical text.
//! - [`index`]: the vector store trait, its embedded and Qdrant backends, and
//!   incremental indexing by content hash.
//! - [`load`]: reading registries (tools.json, tools.jsonl, request bodies).
//! - [`metrics`]: control's counters at `GET /metrics` (Prometheus text).
//! - [`eval`]: retrieval metrics over labelled queries (`keyhole eval`).
//! - [`report`]: `keyhole report`, figures over a window of the audit trail.
//! - [`resolve`]: answers `/v1/resolve` from embeddings and per-session memory.
//! - [`server`]: the HTTP API (router, errors, serving with graceful shutdown).
//! - [`turn`]: `/v2/turn`, one LLM turn's aliases and set in one round trip.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod alias;
pub mod config;
pub mod embed;
pub mod eval;
pub mod index;
pub mod load;
pub mod metrics;
pub mod report;
pub mod resolve;
pub mod server;
#[cfg(test)]
mod test_util;
pub mod turn;
