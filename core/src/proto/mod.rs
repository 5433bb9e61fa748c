//! Everything that crosses a boundary: the filter ↔ control APIs, the hold
//! protocol with Envoy's Lua filters, and the replies the filter answers
//! locally. Both sides build and read these types; neither spells a field,
//! a code or a status on its own.
//!
//! - [`tools`]: `POST /v1/resolve` — the turn and the audited set.
//! - [`calls`]: `POST /v1/calls` — the tools an answer called, judged.
//! - [`alias`]: `POST /v1/alias/{encode,decode,known,…}` — ids and aliases,
//!   and the error codes of control's alias API.
//! - [`turn`]: `POST /v2/turn` — one LLM turn's ids and set in one round trip.
//! - [`hold`]: verdict lines between the filter and the Lua hold filters
//!   (the Lua side is generated from it).
//! - [`reply`]: the JSON error bodies the filter answers locally.
//! - [`withhold`]: why an HMS response is withheld, the counter names, and
//!   the response headers that are never scanned.

pub mod alias;
pub mod calls;
pub mod hold;
pub mod reply;
pub mod tools;
pub mod turn;
pub mod withhold;
