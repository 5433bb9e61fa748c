//! `keyhole report`: what keyhole did, or in shadow would have done, over a
//! window of control's audit trail.
//!
//! The trail is read from a running control (`GET /v1/audit?since_ms=&until_ms=`
//! over its socket: the trail lives in control's memory, not its data dir)
//! and, optionally, the filter's counters from an Envoy `/stats` text (ids
//! aliased, responses withheld by reason). [`Report::of`] is pure: tests feed
//! it a recorded trail. Per phase and per tool it gives turns, mean tools
//! surfaced, bytes saved, recall from the model's calls (hits / calls),
//! misses with the missing tool and why it was not surfaced, and tool-search
//! recoveries. Names, counts and reasons only: the trail holds no prompt
//! text, no id and no value, and neither does the report.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One session's entries, as `GET /v1/audit` answers them.
#[derive(Debug, Clone, Deserialize)]
pub struct SessionTrail {
    /// The session (never printed).
    pub session: String,
    /// Its entries.
    pub entries: Vec<Entry>,
}

/// What the report reads of one audit entry (other members are ignored).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The turn's phase.
    pub phase: String,
    /// Measured only (`enforce: shadow`).
    #[serde(default)]
    pub shadow: bool,
    /// The surfaced tools.
    #[serde(default)]
    pub tools: Vec<EntryTool>,
    /// Body sizes, once the filter posted the turn's calls.
    #[serde(default)]
    pub bytes: Option<EntryBytes>,
    /// The answer's calls.
    #[serde(default)]
    pub calls: Vec<EntryCall>,
}

/// A surfaced tool.
#[derive(Debug, Clone, Deserialize)]
pub struct EntryTool {
    /// Its name.
    pub name: String,
    /// Why it was surfaced.
    pub reason: String,
}

/// Body sizes of a turn.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct EntryBytes {
    /// As sent.
    #[serde(rename = "in")]
    pub bytes_in: u64,
    /// As forwarded (or, in shadow, as it would have been).
    #[serde(rename = "out")]
    pub bytes_out: u64,
}

/// A called tool.
#[derive(Debug, Clone, Deserialize)]
pub struct EntryCall {
    /// Its name.
    pub tool: String,
    /// On the surface.
    pub covered: bool,
    /// Why not, for a miss.
    #[serde(default)]
    pub missed: Option<String>,
}

/// The figures of one phase (or of every phase).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// Turns audited.
    pub turns: u64,
    /// Of those, measured in shadow.
    pub shadow_turns: u64,
    /// Mean tools surfaced per turn.
    pub mean_surfaced: f64,
    /// Request bytes saved (sent minus forwarded) over the turns whose
    /// calls were posted.
    pub bytes_saved: u64,
    /// Tool calls in answers.
    pub calls: u64,
    /// Of those, on the surface.
    pub hits: u64,
    /// hits / calls (`None`: no call).
    pub recall: Option<f64>,
    /// Calls of a tool surfaced because the model's tool search found it.
    pub recoveries: u64,
}

/// One missing tool in one phase, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Miss {
    /// The phase.
    pub phase: String,
    /// The tool the model called.
    pub tool: String,
    /// Why it was not surfaced.
    pub reason: String,
    /// How often.
    pub count: u64,
}

/// The filter's counters, from an Envoy `/stats` text.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterCounters {
    /// Raw ids replaced by aliases in LLM requests.
    pub ids_aliased: u64,
    /// HMS responses passed on with aliases.
    pub responses_aliased: u64,
    /// HMS responses withheld, by reason.
    pub withheld: BTreeMap<String, u64>,
    /// HMS shadow: ids the scan would have aliased, by kind.
    pub shadow_ids: BTreeMap<String, u64>,
    /// HMS shadow: responses that would have been withheld, by reason.
    pub shadow_withheld: BTreeMap<String, u64>,
}

impl FilterCounters {
    /// Reads `wasmcustom.keyhole.*` counters (`name: value` lines, as
    /// Envoy's admin `/stats` prints them); other lines are ignored.
    pub fn from_stats(text: &str) -> FilterCounters {
        let mut c = FilterCounters::default();
        for line in text.lines() {
            let Some((name, value)) = line.split_once(": ") else {
                continue;
            };
            let Ok(value) = value.trim().parse::<u64>() else {
                continue;
            };
            let Some(name) = name.trim().strip_prefix("wasmcustom.keyhole.") else {
                continue;
            };
            if name == "llm.ids_aliased" {
                c.ids_aliased += value;
            } else if name == "hms_responses_aliased" {
                c.responses_aliased += value;
            } else if let Some(reason) = name.strip_prefix("hms_withheld.") {
                *c.withheld.entry(reason.to_owned()).or_default() += value;
            } else if let Some(kind) = name.strip_prefix("hms_shadow.ids.") {
                *c.shadow_ids.entry(kind.to_owned()).or_default() += value;
            } else if let Some(reason) = name.strip_prefix("hms_shadow.withheld.") {
                *c.shadow_withheld.entry(reason.to_owned()).or_default() += value;
            }
        }
        c
    }
}

/// The report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The window, milliseconds since the Unix epoch: from (inclusive).
    pub since_ms: u64,
    /// To (exclusive).
    pub until_ms: u64,
    /// Every phase together.
    pub total: Figures,
    /// Per phase.
    pub phases: BTreeMap<String, Figures>,
    /// Per called tool: (calls, hits).
    pub tools: BTreeMap<String, ToolFigures>,
    /// Misses, most frequent first.
    pub misses: Vec<Miss>,
    /// The filter's counters, when a stats text was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterCounters>,
}

/// One tool's calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolFigures {
    /// Calls of it.
    pub calls: u64,
    /// Of those, on the surface.
    pub hits: u64,
}

#[derive(Default)]
struct Sums {
    figures: Figures,
    surfaced: u64,
}

impl Sums {
    fn add(&mut self, e: &Entry) {
        let f = &mut self.figures;
        f.turns += 1;
        f.shadow_turns += u64::from(e.shadow);
        self.surfaced += e.tools.len() as u64;
        if let Some(b) = e.bytes {
            f.bytes_saved += b.bytes_in.saturating_sub(b.bytes_out);
        }
        for call in &e.calls {
            f.calls += 1;
            f.hits += u64::from(call.covered);
            let recovered = e
                .tools
                .iter()
                .any(|t| t.name == call.tool && t.reason == "recovery");
            f.recoveries += u64::from(call.covered && recovered);
        }
    }

    fn done(self) -> Figures {
        let mut f = self.figures;
        if f.turns > 0 {
            f.mean_surfaced = self.surfaced as f64 / f.turns as f64;
        }
        if f.calls > 0 {
            f.recall = Some(f.hits as f64 / f.calls as f64);
        }
        f
    }
}

impl Report {
    /// The report of `trail`'s entries in `[since_ms, until_ms)`.
    pub fn of(trail: &[SessionTrail], since_ms: u64, until_ms: u64) -> Report {
        let mut total = Sums::default();
        let mut phases: BTreeMap<String, Sums> = BTreeMap::new();
        let mut tools: BTreeMap<String, ToolFigures> = BTreeMap::new();
        let mut misses: BTreeMap<(String, String, String), u64> = BTreeMap::new();
        let entries = trail
            .iter()
            .flat_map(|s| &s.entries)
            .filter(|e| (since_ms..until_ms).contains(&e.at_ms));
        for e in entries {
            total.add(e);
            phases.entry(e.phase.clone()).or_default().add(e);
            for call in &e.calls {
                let t = tools.entry(call.tool.clone()).or_default();
                t.calls += 1;
                t.hits += u64::from(call.covered);
                if !call.covered {
                    let reason = call.missed.clone().unwrap_or_else(|| "unknown".into());
                    *misses
                        .entry((e.phase.clone(), call.tool.clone(), reason))
                        .or_default() += 1;
                }
            }
        }
        let mut misses: Vec<Miss> = misses
            .into_iter()
            .map(|((phase, tool, reason), count)| Miss {
                phase,
                tool,
                reason,
                count,
            })
            .collect();
        misses.sort_by_key(|m| std::cmp::Reverse(m.count));
        Report {
            since_ms,
            until_ms,
            total: total.done(),
            phases: phases.into_iter().map(|(k, v)| (k, v.done())).collect(),
            tools,
            misses,
            filter: None,
        }
    }

    /// The report as text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let recall = |f: &Figures| {
            f.recall.map_or_else(
                || "-".to_owned(),
                |r| format!("{:.3} ({}/{})", r, f.hits, f.calls),
            )
        };
        let _ = writeln!(
            out,
            "{:<14} {:>6} {:>7} {:>9} {:>12} {:>18} {:>10}",
            "phase", "turns", "shadow", "surfaced", "bytes saved", "recall", "recovered"
        );
        let rows = self
            .phases
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .chain(std::iter::once(("all", &self.total)));
        for (phase, f) in rows {
            let _ = writeln!(
                out,
                "{:<14} {:>6} {:>7} {:>9.1} {:>12} {:>18} {:>10}",
                phase,
                f.turns,
                f.shadow_turns,
                f.mean_surfaced,
                f.bytes_saved,
                recall(f),
                f.recoveries
            );
        }
        if !self.tools.is_empty() {
            let _ = writeln!(out, "\n{:<40} {:>6} {:>6}", "tool", "calls", "hits");
            for (tool, t) in &self.tools {
                let _ = writeln!(out, "{:<40} {:>6} {:>6}", tool, t.calls, t.hits);
            }
        }
        if !self.misses.is_empty() {
            let _ = writeln!(
                out,
                "\n{:<14} {:<40} {:<16} {:>6}",
                "missed in", "tool", "reason", "count"
            );
            for m in &self.misses {
                let _ = writeln!(
                    out,
                    "{:<14} {:<40} {:<16} {:>6}",
                    m.phase, m.tool, m.reason, m.count
                );
            }
        }
        if let Some(c) = &self.filter {
            let _ = writeln!(
                out,
                "\nids aliased (LLM requests): {}\nHMS responses aliased: {}",
                c.ids_aliased, c.responses_aliased
            );
            for (title, map) in [
                ("withheld", &c.withheld),
                ("shadow: ids that would be aliased", &c.shadow_ids),
                ("shadow: would be withheld", &c.shadow_withheld),
            ] {
                for (k, v) in map {
                    let _ = writeln!(out, "{title}: {k} {v}");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRAIL: &str = include_str!("../tests/fixtures/audit-trail.json");

    fn trail() -> Vec<SessionTrail> {
        serde_json::from_str(TRAIL).unwrap()
    }

    #[test]
    fn the_recorded_trail_gives_known_figures() {
        let r = Report::of(&trail(), 0, u64::MAX);
        assert_eq!(r.total.turns, 4);
        assert_eq!(r.total.shadow_turns, 3);
        assert_eq!(r.total.calls, 5);
        assert_eq!(r.total.hits, 3);
        assert_eq!(r.total.recall, Some(0.6));
        assert_eq!(
            r.total.bytes_saved,
            (9000 - 2000) + (12000 - 3000) + (8000 - 2500)
        );
        assert_eq!(r.total.recoveries, 1);
        assert_eq!(r.total.mean_surfaced, 2.5);
        let planner = &r.phases["planner"];
        assert_eq!((planner.turns, planner.calls, planner.hits), (3, 4, 2));
        assert_eq!(r.phases["agent-call"].recall, Some(1.0));
        assert_eq!(
            r.tools["billing_refund"],
            ToolFigures { calls: 2, hits: 1 },
            "missed on one turn, recovered on another"
        );
        let misses: Vec<(&str, &str, &str, u64)> = r
            .misses
            .iter()
            .map(|m| {
                (
                    m.phase.as_str(),
                    m.tool.as_str(),
                    m.reason.as_str(),
                    m.count,
                )
            })
            .collect();
        assert_eq!(
            misses,
            [
                ("planner", "billing_refund", "budget", 1),
                ("planner", "keyhole_tool_search", "tool-search", 1)
            ]
        );
    }

    #[test]
    fn the_window_bounds_the_turns() {
        let r = Report::of(&trail(), 1_700_000_001_000, 1_700_000_003_000);
        assert_eq!(r.total.turns, 2);
        let none = Report::of(&trail(), 0, 1);
        assert_eq!(none.total, Figures::default());
        assert_eq!(none.total.recall, None);
    }

    #[test]
    fn text_and_json_name_no_session_and_no_prompt() {
        let mut r = Report::of(&trail(), 0, u64::MAX);
        r.filter = Some(FilterCounters::from_stats(
            "wasmcustom.keyhole.llm.ids_aliased: 7\n\
             wasmcustom.keyhole.hms_withheld.last_word: 2\n\
             wasmcustom.keyhole.hms_shadow.ids.patient: 5\n\
             cluster.x.upstream_rq: 9\n",
        ));
        let text = r.text();
        let json = serde_json::to_string(&r).unwrap();
        for out in [&text, &json] {
            assert!(!out.contains("sess-"), "{out}");
            assert!(!out.contains("refund my invoice"), "{out}");
        }
        assert!(text.contains("0.600 (3/5)"), "{text}");
        assert!(text.contains("billing_refund"), "{text}");
        assert!(text.contains("withheld: last_word 2"), "{text}");
        assert!(text.contains("ids aliased (LLM requests): 7"), "{text}");
        let c = r.filter.as_ref().unwrap();
        assert_eq!(c.shadow_ids["patient"], 5);
    }
}
