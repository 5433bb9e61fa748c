//! Recovery when retrieval misses: the tool-search control tool.
//!
//! A tool absent from the surfaced set can never be picked. So the filter
//! adds one tool of its own to every surfaced set, [`TOOL_NAME`], with one
//! string parameter `query` and a description ([`DESCRIPTION`]) telling the
//! model to call it when none of the tools fits. The agent cannot execute it
//! (it is not in the agent's registry); whatever the agent sends back (an
//! error or empty tool result, or the call alone), the next request's history
//! holds the model's call, and the filter sends its query to control with the
//! turn ([`crate::proto::tools::ToolSearch`]). Control searches the registry with the
//! query — the same ranking as turns, [`crate::tools::rank::pipeline::search`] —
//! and [`compose`] puts what it found into the turn's set with the reason
//! [`Reason::Recovery`].
//!
//! # Budget
//! The control tool is a tool definition like any other: it takes one place
//! of the phase budget ([`crate::tools::phase::Phase::registry_budget`]), so the
//! body that leaves holds at most `budget().max` tool definitions and the
//! independent detector's bound ([`crate::tools::surface::seal`]) is unchanged. Only
//! phases that choose tools are offered it
//! ([`crate::tools::phase::Phase::offers_tool_search`]). What a search finds is
//! bounded like every other tool: at most [`MAX_FOUND`], each through the
//! phase's [`Rules`] (so a recovery turn still adds at most
//! [`RECOVERY_NEW_TOOLS`](crate::tools::phase::RECOVERY_NEW_TOOLS) tools outside its
//! prior set, and a formatter turn no mutating one).
//!
//! # Which call counts
//! The latest call of the control tool after the latest user message with
//! text: the search serves the user turn it was made in, for every request
//! of that turn, and ends when the user speaks again. Each dialect reads its
//! own history shapes (`format/<dialect>.rs`).

use crate::proto::tools::{Reason, SurfacedTool};
use crate::tools::phase::{Offer, Rules};
use crate::Phase;

/// The control tool's function name.
pub const TOOL_NAME: &str = "keyhole_tool_search";

/// The control tool's description, as the model reads it.
pub const DESCRIPTION: &str = "Search the full tool catalog for a tool that is not in this list. \
Call this only when none of the other tools fits the task. Describe the tool you need in a few words \
(what it does, not who it is for). It returns nothing itself: the matching tools are added to your \
tool list on your next turn.";

/// The description of the control tool's `query` parameter.
pub const QUERY_DESCRIPTION: &str =
    "What the missing tool does, in a few words, for example \"calculate body mass index\".";

/// The longest query sent to control, in characters; a longer one is cut.
pub const MAX_QUERY_CHARS: usize = 256;

/// The most tools one search adds to a turn's set.
pub const MAX_FOUND: usize = 3;

/// The query of one call, as it goes to control: trimmed, cut to
/// [`MAX_QUERY_CHARS`] characters; `None` when nothing is left. A cut inside
/// a word drops that word's start (a record number cut in two would read as
/// another id), unless the query is one word.
pub fn query_of(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    let cut = match trimmed.char_indices().nth(MAX_QUERY_CHARS) {
        None => trimmed,
        Some((end, next)) => {
            let head = &trimmed[..end];
            if next.is_whitespace() {
                head
            } else {
                head.rfind(char::is_whitespace).map_or(head, |i| &head[..i])
            }
        }
    };
    let cut = cut.trim_end();
    (!cut.is_empty()).then(|| cut.to_owned())
}

/// One event of a request's history, as each dialect reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryEvent {
    /// A user message with text: a new user turn starts.
    UserText,
    /// A call of [`TOOL_NAME`] by the model, with its `query` argument when
    /// it could be read.
    Search(Option<String>),
}

/// The query of the latest [`HistoryEvent::Search`] after the latest
/// [`HistoryEvent::UserText`]: `Some(None)` when the model called the tool
/// there without a readable query, `None` when it did not call it.
pub fn latest_search(events: &[HistoryEvent]) -> Option<Option<String>> {
    events
        .iter()
        .rev()
        .take_while(|e| **e != HistoryEvent::UserText)
        .find_map(|e| match e {
            HistoryEvent::Search(query) => Some(query.clone()),
            HistoryEvent::UserText => None,
        })
}

/// The turn's set with what a search found: forced tools (`tool-choice`)
/// first, then the `found` tools (at most [`MAX_FOUND`], each with the reason
/// [`Reason::Recovery`]), then the rest of `resolved` in its order; each tool
/// once, all through the rules of `phase` keeping `reserved` places
/// ([`Rules::reserving`]). `prior`: the session's last audited set (recovery
/// phase: tools outside it are limited).
///
/// Never longer than `phase.registry_budget(reserved)`; never holds a tool
/// that is in neither `resolved` nor `found`.
pub fn compose(
    phase: Phase,
    reserved: usize,
    resolved: &[SurfacedTool],
    found: &[SurfacedTool],
    prior: &[String],
) -> Vec<SurfacedTool> {
    let mut rules = Rules::reserving(phase, reserved);
    let mut out: Vec<SurfacedTool> = Vec::with_capacity(phase.budget().max);
    let mut offer = |tool: SurfacedTool, out: &mut Vec<SurfacedTool>| {
        if out.iter().any(|t| t.name == tool.name) {
            return;
        }
        let offer = Offer {
            mutating: tool.mutating,
            forced: tool.reason == Reason::ToolChoice,
            outside_prior: tool.reason != Reason::PriorSet && !prior.contains(&tool.name),
        };
        if rules.admit(offer) {
            out.push(tool);
        }
    };
    let (forced, rest): (Vec<&SurfacedTool>, Vec<&SurfacedTool>) = resolved
        .iter()
        .partition(|t| t.reason == Reason::ToolChoice);
    for tool in forced {
        offer(tool.clone(), &mut out);
    }
    for tool in found.iter().take(MAX_FOUND) {
        offer(
            SurfacedTool {
                reason: Reason::Recovery,
                ..tool.clone()
            },
            &mut out,
        );
    }
    for tool in rest {
        offer(tool.clone(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tool(name: &str, reason: Reason) -> SurfacedTool {
        SurfacedTool {
            name: name.into(),
            reason,
            mutating: false,
        }
    }

    #[test]
    fn queries_are_trimmed_and_cut() {
        assert_eq!(
            query_of("  body mass index \n"),
            Some("body mass index".into())
        );
        assert_eq!(query_of(" \t"), None);
        let long = "é".repeat(1000);
        assert_eq!(
            query_of(&long).map(|q| q.chars().count()),
            Some(MAX_QUERY_CHARS)
        );
        // A cut inside a word drops the word: no half of a record number.
        let words = format!("{} MRN 4412345", "x".repeat(MAX_QUERY_CHARS - 8));
        assert_eq!(
            query_of(&words).as_deref(),
            Some(&words[..MAX_QUERY_CHARS - 4])
        );
        // A cut on a space keeps every word before it.
        let exact = format!("{} tail", "y".repeat(MAX_QUERY_CHARS));
        assert_eq!(query_of(&exact).map(|q| q.len()), Some(MAX_QUERY_CHARS));
    }

    #[test]
    fn only_a_search_in_the_current_user_turn_counts() {
        use HistoryEvent::*;
        let q = |s: &str| Search(Some(s.to_owned()));
        assert_eq!(latest_search(&[]), None);
        assert_eq!(latest_search(&[UserText, q("a")]), Some(Some("a".into())));
        assert_eq!(
            latest_search(&[UserText, q("a"), q("b")]),
            Some(Some("b".into()))
        );
        assert_eq!(
            latest_search(&[q("a"), UserText]),
            None,
            "the user spoke since"
        );
        assert_eq!(latest_search(&[UserText, Search(None)]), Some(None));
        assert_eq!(
            latest_search(&[q("a"), UserText, q("c")]),
            Some(Some("c".into()))
        );
    }

    #[test]
    fn found_tools_come_after_forced_ones_with_the_recovery_reason() {
        let resolved = vec![
            tool("f", Reason::ToolChoice),
            tool("a", Reason::Rag),
            tool("x", Reason::Rag),
        ];
        let found = vec![tool("x", Reason::Rag), tool("y", Reason::Rag)];
        let set = compose(Phase::Planner, 1, &resolved, &found, &[]);
        let names: Vec<(&str, Reason)> = set.iter().map(|t| (t.name.as_str(), t.reason)).collect();
        assert_eq!(
            names,
            [
                ("f", Reason::ToolChoice),
                ("x", Reason::Recovery),
                ("y", Reason::Recovery),
                ("a", Reason::Rag)
            ]
        );
    }

    #[test]
    fn a_search_never_widens_a_full_set() {
        let resolved: Vec<SurfacedTool> = (0..12)
            .map(|i| tool(&format!("t{i}"), Reason::Rag))
            .collect();
        let found = vec![tool("x", Reason::Rag)];
        let set = compose(Phase::Planner, 1, &resolved, &found, &[]);
        assert_eq!(set.len(), 11);
        assert_eq!(set[0].name, "x", "the model's search outranks retrieval");
        // The formatter phase keeps its rule for found tools too.
        let mutating = SurfacedTool {
            mutating: true,
            ..tool("w", Reason::Rag)
        };
        assert!(compose(Phase::Formatter, 0, &[], &[mutating], &[]).is_empty());
    }

    proptest! {
        /// Whatever control resolved and the search found: the set fits the
        /// budget less the reserved place, holds each tool once and nothing
        /// from outside the inputs, keeps every found tool it holds under the
        /// recovery reason, and a recovery turn adds at most three new tools.
        #[test]
        fn compose_stays_within_the_rules(
            resolved in proptest::collection::vec((0usize..30, 0usize..4, any::<bool>()), 0..20),
            found in proptest::collection::vec((0usize..30, any::<bool>()), 0..6),
            prior in proptest::collection::vec(0usize..30, 0..10),
            phase in 0usize..5,
            reserved in 0usize..2,
        ) {
            let phase = Phase::ALL[phase];
            let reasons = [Reason::Rag, Reason::ToolChoice, Reason::PriorSet, Reason::FloorResearch];
            let resolved: Vec<SurfacedTool> = resolved
                .iter()
                .map(|&(n, r, m)| SurfacedTool { name: format!("t{n}"), reason: reasons[r], mutating: m })
                .collect();
            let found: Vec<SurfacedTool> =
                found.iter().map(|&(n, m)| SurfacedTool { name: format!("t{n}"), reason: Reason::Rag, mutating: m }).collect();
            let prior: Vec<String> = prior.iter().map(|n| format!("t{n}")).collect();
            let set = compose(phase, reserved, &resolved, &found, &prior);
            prop_assert!(set.len() <= phase.registry_budget(reserved));
            for (i, t) in set.iter().enumerate() {
                prop_assert!(!set[..i].iter().any(|o| o.name == t.name), "{} twice", t.name);
                let from_found = found.iter().take(MAX_FOUND).any(|f| f.name == t.name);
                prop_assert!(from_found || resolved.iter().any(|r| r.name == t.name));
                if t.reason == Reason::Recovery {
                    prop_assert!(from_found);
                }
                if phase == Phase::Formatter {
                    prop_assert!(!t.mutating || t.reason == Reason::ToolChoice);
                }
            }
            if phase == Phase::Recovery {
                let new = set
                    .iter()
                    .filter(|t| t.reason != Reason::ToolChoice && t.reason != Reason::PriorSet && !prior.contains(&t.name))
                    .count();
                prop_assert!(new <= crate::tools::phase::RECOVERY_NEW_TOOLS);
            }
        }
    }
}
