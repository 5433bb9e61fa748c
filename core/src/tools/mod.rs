//! The tool surface: which tools of the agent's registry the model sees on
//! one LLM turn.
//!
//! A request is read by its wire format ([`format`](mod@format)), its tools
//! counted by an independent detector ([`detect`]) that shares no parser with
//! the formats, the registry ranked for the turn ([`rank`]) and the set decided
//! within the phase's budget ([`surface`], [`phase`]). What the model calls is
//! checked against the set on the way back ([`admission`]); a miss is
//! recovered through the tool-search control tool ([`recovery`]), with a
//! bounded memory of the last audited set per session ([`prior`]).
//!
//! - [`format`](mod@format): reading and rewriting LLM request bodies without re-serialising them.
//! - [`detect`]: the independent tool detector, the last word before a body leaves.
//! - [`rank`]: the candidate-set engine: ranking, floors, phase budgets, bounded fallback.
//! - [`surface`]: the filter's bounded decision on one LLM request.
//! - [`phase`]: agent phases and their candidate-set budgets.
//! - [`admission`]: which tools an LLM response calls (edge plan validation).
//! - [`recall`]: whether each called tool was on the surface (hits and misses).
//! - [`recovery`]: the tool-search control tool (recovery when retrieval misses).
//! - [`prior`]: a bounded per-session memory of the last audited set.

pub mod admission;
pub mod detect;
pub mod format;
pub mod phase;
pub mod prior;
pub mod rank;
pub mod recall;
pub mod recovery;
pub mod surface;
