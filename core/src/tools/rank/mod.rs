//! The candidate-set engine: which tools the model may see on one turn.
//!
//! Pure: inputs are data (the request's tools, an optional metadata overlay,
//! the turn, and cosine similarities computed elsewhere), outputs are data (the
//! surfaced tools with their activation reasons, and a decision trace).
//!
//! # Layout
//! - [`meta`]: the metadata overlay (`tools.json` format) and the name ↔ id mapping.
//! - [`text`]: the frozen embedding-text contract.
//! - [`tokenize`]: en/de/fr tokenising (folding, stopwords, stemming, compounds).
//! - [`french`]: French verb forms read as their infinitive, on French turns.
//! - [`lexical`]: the BM25-style index.
//! - [`fuse`]: set-independent score fusion and the deterministic ranking order.
//! - [`registry`]: a request's tools joined with the overlay, indexed.
//! - [`floors`]: multi-entity, research and patient-resolve floors.
//! - [`clauses`]: multi-intent turns split into clauses, their rankings merged.
//! - [`stages`]: the settings of the stages after fusion (threshold, domains, dedup, budget).
//! - [`pipeline`]: the per-turn resolution, the confidence budget, per-subtask match.
//! - [`outage`]: the one bounded composition every path goes through.
//! - [`config`]: all settings, raw and validated.
//!
//! # Example
//! ```
//! use keyhole_core::tools::rank::{config::RankConfig, meta::Overlay, pipeline::{resolve, Turn}, registry::Registry};
//! use keyhole_core::proto::tools::{Reason, ToolDescriptor};
//! use keyhole_core::Phase;
//!
//! let config = RankConfig::try_new(Default::default()).unwrap();
//! let overlay = Overlay::from_json(br#"[
//!   {"id":"patient.search.smart","op":"read","domain":"administrative"},
//!   {"id":"vitals.list","op":"read","domain":"clinical","requiresPatient":true}
//! ]"#).unwrap();
//! let tools = vec![
//!     ToolDescriptor {
//!         name: "vitals__list".into(),
//!         description: "Lists vital signs.".into(),
//!         parameters: "patient Id from date".into(),
//!     },
//!     ToolDescriptor {
//!         name: "patient__search__smart".into(),
//!         description: "Finds a patient by name.".into(),
//!         parameters: String::new(),
//!     },
//! ];
//! let registry = Registry::build(&tools, Some(&overlay), &config);
//! let cosine = vec![("vitals__list".to_string(), 0.86), ("patient__search__smart".to_string(), 0.80)];
//! let turn = Turn { text: "Show the vital signs", phase: Phase::Planner, prior: &[], tool_choice: None, cosine: Some(&cosine) };
//! let set = resolve(&registry, &config, &turn);
//! assert_eq!(set.candidates[0].name, "vitals__list");
//! assert_eq!(set.candidates[0].reason, Reason::Rag);
//! ```

pub mod clauses;
pub mod config;
pub mod floors;
pub mod french;
pub mod fuse;
pub mod lexical;
pub mod meta;
pub mod outage;
pub mod pipeline;
pub mod registry;
pub mod schema_words;
pub mod stages;
pub mod text;
pub mod tokenize;

use crate::proto::tools::Reason;
use serde::{Deserialize, Serialize};

/// One surfaced tool: its function name, why it is there, and its fused score
/// (0 for tools that were not scored: `tool_choice`, prior set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Function name as the request carries it.
    pub name: String,
    /// Activation reason.
    pub reason: Reason,
    /// Fused score after the pipeline's adjustments.
    pub score: f32,
}
