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

/// One tool offered to a candidate set, as the phase rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// The tool may change a record (a tool nothing is known of counts as one).
    pub mutating: bool,
    /// The request forces the tool (`tool_choice`): exempt from the formatter
    /// rule and the recovery limit, never from the budget.
    pub forced: bool,
    /// The tool is outside the session's prior set, as far as the caller knows.
    pub outside_prior: bool,
}

/// The phase rules, applied tool by tool while a candidate set is composed.
///
/// The one place these rules live: control composes its answer through them
/// ([`crate::rank::outage::bounded`]) and the filter checks control's answer
/// through them again ([`crate::surface::decide`]).
///
/// - At most `phase.budget().max` tools.
/// - Formatter: no mutating tool, except a forced one.
/// - Recovery: at most [`RECOVERY_NEW_TOOLS`] tools outside the prior set; a
///   forced one is always taken and takes one of those places.
#[derive(Debug, Clone)]
pub struct Rules {
    phase: Phase,
    admitted: usize,
    new: usize,
}

impl Rules {
    /// The rules of `phase`, for an empty set.
    pub fn new(phase: Phase) -> Self {
        Rules { phase, admitted: 0, new: 0 }
    }

    /// Whether the set may take `offer`; counts it when it may. The caller
    /// checks that the tool exists and is not in the set already.
    pub fn admit(&mut self, offer: Offer) -> bool {
        if self.admitted >= self.phase.budget().max {
            return false;
        }
        if self.phase == Phase::Formatter && offer.mutating && !offer.forced {
            return false;
        }
        if self.phase == Phase::Recovery && offer.outside_prior {
            if self.new >= RECOVERY_NEW_TOOLS && !offer.forced {
                return false;
            }
            self.new += 1;
        }
        self.admitted += 1;
        true
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

    fn offer(mutating: bool, forced: bool, outside_prior: bool) -> Offer {
        Offer { mutating, forced, outside_prior }
    }

    #[test]
    fn rules_hold_the_budget_even_for_forced_tools() {
        for p in Phase::ALL {
            let mut rules = Rules::new(p);
            let taken = (0..40).filter(|_| rules.admit(offer(false, true, false))).count();
            assert_eq!(taken, p.budget().max, "{p}");
        }
    }

    #[test]
    fn formatter_takes_no_mutating_tool_unless_forced() {
        let mut rules = Rules::new(Phase::Formatter);
        assert!(!rules.admit(offer(true, false, false)));
        assert!(rules.admit(offer(true, true, false)));
        assert!(rules.admit(offer(false, false, true)));
        let mut planner = Rules::new(Phase::Planner);
        assert!(planner.admit(offer(true, false, false)));
    }

    #[test]
    fn recovery_adds_few_tools_outside_the_prior_set() {
        let mut rules = Rules::new(Phase::Recovery);
        let new = (0..10).filter(|_| rules.admit(offer(false, false, true))).count();
        assert_eq!(new, RECOVERY_NEW_TOOLS);
        assert!(rules.admit(offer(false, true, true)), "a forced tool is always taken");
        assert!(rules.admit(offer(false, false, false)), "the prior set still fits");
    }
}
