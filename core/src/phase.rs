//! Agent phases and the candidate-set budget of each.
//!
//! The budget is a property of the turn, not a global top-K: a planner turn may
//! see 6–12 tools, a tool-input turn exactly the one tool being filled in.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The phase of the agent loop a request belongs to, named by a request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Choosing which tools to call for a user turn (the default).
    #[default]
    Planner,
    /// Filling in the arguments of one chosen tool.
    ToolInput,
    /// A sub-agent call working on one subtask.
    AgentCall,
    /// Retrying after a failed step: the prior set plus a few new tools.
    Recovery,
    /// Writing the answer: no mutating tools.
    Formatter,
}

/// How many function tools a phase may surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Retrieval aims to fill at least this many slots when it has candidates.
    pub min: usize,
    /// No request ever leaves with more function tools than this.
    pub max: usize,
}

/// The largest budget of any phase: the hard ceiling the filter enforces when it
/// knows nothing else.
pub const MAX_BUDGET: usize = 12;

/// How many new tools a recovery turn may add to the session's prior set.
pub const RECOVERY_NEW_TOOLS: usize = 3;

impl Phase {
    /// All phases, in a stable order.
    pub const ALL: [Phase; 5] = [
        Phase::Planner,
        Phase::ToolInput,
        Phase::AgentCall,
        Phase::Recovery,
        Phase::Formatter,
    ];

    /// The phase's budget. Recovery's ceiling is the planner's: the prior set
    /// plus at most [`RECOVERY_NEW_TOOLS`], never beyond [`MAX_BUDGET`].
    pub fn budget(self) -> Budget {
        match self {
            Phase::Planner | Phase::Recovery | Phase::Formatter => Budget { min: 6, max: MAX_BUDGET },
            Phase::ToolInput => Budget { min: 1, max: 1 },
            Phase::AgentCall => Budget { min: 3, max: 8 },
        }
    }

    /// The header value naming this phase.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Planner => "planner",
            Phase::ToolInput => "tool-input",
            Phase::AgentCall => "agent-call",
            Phase::Recovery => "recovery",
            Phase::Formatter => "formatter",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A header value that names no phase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown phase {0:?} (expected planner, tool-input, agent-call, recovery or formatter)")]
pub struct UnknownPhase(pub String);

impl FromStr for Phase {
    type Err = UnknownPhase;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownPhase(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_round_trip_through_their_names() {
        for p in Phase::ALL {
            assert_eq!(p.as_str().parse::<Phase>(), Ok(p));
        }
        assert!("planer".parse::<Phase>().is_err());
    }

    #[test]
    fn no_budget_exceeds_the_ceiling() {
        for p in Phase::ALL {
            let b = p.budget();
            assert!(b.min <= b.max && b.max <= MAX_BUDGET, "{p}: {b:?}");
        }
        assert_eq!(Phase::ToolInput.budget().max, 1);
    }
}
