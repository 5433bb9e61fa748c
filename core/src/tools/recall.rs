//! Recall from real calls: was the tool the model called on the surface?
//!
//! Judged on every answer, on both `enforce` modes. A call of a tool in the
//! surfaced set is a hit (`covered`); a call of a tool outside it (off the
//! surface, in shadow mode: outside the set keyhole would have surfaced), or
//! of the tool-search control tool ([`crate::tools::recovery::TOOL_NAME`]:
//! the model said what it needed was missing) is a miss.

use crate::proto::calls::CalledTool;
use crate::tools::admission::is_surfaced;
use crate::tools::recovery;

/// The calls `called` (answer order, each once) judged against `surfaced`.
pub fn judge<S: AsRef<str>>(called: &[String], surfaced: &[S]) -> Vec<CalledTool> {
    called
        .iter()
        .map(|name| CalledTool {
            name: name.clone(),
            covered: name != recovery::TOOL_NAME && is_surfaced(name, surfaced),
        })
        .collect()
}

/// One answer's verdict, as the `x-keyhole-shadow` header says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every call was on the surface.
    Covered,
    /// At least one call was a miss.
    Missed,
}

impl Verdict {
    /// The verdict of judged `calls`; `None` for an answer without calls.
    pub fn of(calls: &[CalledTool]) -> Option<Verdict> {
        if calls.is_empty() {
            None
        } else if calls.iter().all(|c| c.covered) {
            Some(Verdict::Covered)
        } else {
            Some(Verdict::Missed)
        }
    }

    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Covered => "covered",
            Verdict::Missed => "missed",
        }
    }
}

/// Adds the names of `fresh` not yet in `seen` to it (a stream reports a
/// call's name once per event that carries it).
pub fn merge(seen: &mut Vec<String>, fresh: Vec<String>) {
    for name in fresh {
        if !seen.contains(&name) {
            seen.push(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_surfaced_call_is_a_hit_and_others_miss() {
        let surfaced = ["patient_search", "lab_results"];
        let judged = judge(
            &names(&["lab_results", "billing_refund", recovery::TOOL_NAME]),
            &surfaced,
        );
        let covered: Vec<(&str, bool)> = judged
            .iter()
            .map(|c| (c.name.as_str(), c.covered))
            .collect();
        assert_eq!(
            covered,
            [
                ("lab_results", true),
                ("billing_refund", false),
                (recovery::TOOL_NAME, false)
            ]
        );
        assert_eq!(Verdict::of(&judged), Some(Verdict::Missed));
        assert_eq!(Verdict::of(&judged[..1]), Some(Verdict::Covered));
        assert_eq!(Verdict::of(&[]), None);
        assert_eq!(Verdict::Missed.as_str(), "missed");
    }

    #[test]
    fn the_control_tool_misses_even_when_it_was_shown() {
        let judged = judge(&names(&[recovery::TOOL_NAME]), &[recovery::TOOL_NAME]);
        assert!(!judged[0].covered);
    }

    #[test]
    fn merge_keeps_answer_order_once() {
        let mut seen = names(&["a"]);
        merge(&mut seen, names(&["b", "a", "b", "c"]));
        assert_eq!(seen, names(&["a", "b", "c"]));
    }
}
