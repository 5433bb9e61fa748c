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
            Phase::Planner | Phase::Recovery | Phase::Formatter => Budget {
                min: 6,
                max: MAX_BUDGET,
            },
            Phase::ToolInput => Budget { min: 1, max: 1 },
            Phase::AgentCall => Budget { min: 3, max: 8 },
        }
    }

    /// Whether a turn of this phase is offered the tool-search control tool
    /// ([`crate::tools::recovery`]): the phases that choose tools (planner,
    /// agent-call, recovery). A tool-input turn fills in the one tool already
    /// chosen, and a formatter turn writes the answer: neither looks for a
    /// tool, and tool-input's budget of one has no place to spare.
    pub fn offers_tool_search(self) -> bool {
        matches!(self, Phase::Planner | Phase::AgentCall | Phase::Recovery)
    }

    /// How many registry tools a turn may surface when `reserved` places of
    /// the budget are taken by tools keyhole adds itself (the tool-search
    /// control tool): `budget().max - reserved`, so the body that leaves never
    /// holds more tool definitions than [`Self::budget`] allows.
    pub fn registry_budget(self, reserved: usize) -> usize {
        self.budget().max.saturating_sub(reserved)
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
/// ([`crate::tools::rank::outage::bounded`]) and the filter checks control's answer
/// through them again ([`crate::tools::surface::decide`]).
///
/// - At most `phase.budget().max` tools (less the places [`Rules::reserving`]
///   keeps).
/// - Formatter: no mutating tool, except a forced one.
/// - Recovery: at most [`RECOVERY_NEW_TOOLS`] tools outside the prior set; a
///   forced one is always taken and takes one of those places.
#[derive(Debug, Clone)]
pub struct Rules {
    phase: Phase,
    admitted: usize,
    new: usize,
    /// At most this many tools: the budget, less the reserved places.
    cap: usize,
}

impl Rules {
    /// The rules of `phase`, for an empty set.
    pub fn new(phase: Phase) -> Self {
        Rules {
            phase,
            admitted: 0,
            new: 0,
            cap: phase.budget().max,
        }
    }

    /// The rules of `phase` with `reserved` places of its budget kept for
    /// tools keyhole adds itself ([`Phase::registry_budget`]). Every other
    /// rule is unchanged.
    pub fn reserving(phase: Phase, reserved: usize) -> Self {
        Rules {
            phase,
            admitted: 0,
            new: 0,
            cap: phase.registry_budget(reserved),
        }
    }

    /// How many tools the set has taken.
    pub fn admitted(&self) -> usize {
        self.admitted
    }

    /// Whether the set may take `offer`; counts it when it may. The caller
    /// checks that the tool exists and is not in the set already.
    pub fn admit(&mut self, offer: Offer) -> bool {
        if self.admitted >= self.cap {
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
        Offer {
            mutating,
            forced,
            outside_prior,
        }
    }

    #[test]
    fn rules_hold_the_budget_even_for_forced_tools() {
        for p in Phase::ALL {
            let mut rules = Rules::new(p);
            let taken = (0..40)
                .filter(|_| rules.admit(offer(false, true, false)))
                .count();
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
    fn a_reserved_place_is_never_given_away() {
        for p in Phase::ALL {
            let mut rules = Rules::reserving(p, 1);
            let taken = (0..40)
                .filter(|_| rules.admit(offer(false, true, false)))
                .count();
            assert_eq!(taken, p.budget().max - 1, "{p}");
            assert_eq!(rules.admitted(), taken);
        }
        assert_eq!(Phase::ToolInput.registry_budget(5), 0);
        for p in Phase::ALL {
            // Only phases with a place to spare offer the control tool.
            assert!(
                !p.offers_tool_search() || p.registry_budget(1) >= p.budget().min,
                "{p}"
            );
        }
        assert!(!Phase::ToolInput.offers_tool_search() && !Phase::Formatter.offers_tool_search());
    }

    #[test]
    fn recovery_adds_few_tools_outside_the_prior_set() {
        let mut rules = Rules::new(Phase::Recovery);
        let new = (0..10)
            .filter(|_| rules.admit(offer(false, false, true)))
            .count();
        assert_eq!(new, RECOVERY_NEW_TOOLS);
        assert!(
            rules.admit(offer(false, true, true)),
            "a forced tool is always taken"
        );
        assert!(
            rules.admit(offer(false, false, false)),
            "the prior set still fits"
        );
    }
}
