//! The bench's scenarios, in one table: each has a name (its key in
//! `bench/results/latest.json`, what `--only` takes), the number the results
//! and the docs have known it by, what it measures (its heading in
//! `bench/RESULTS.md`), how it runs and how its figures are written. The
//! table's order is the order of a full run. A scenario is added here, and
//! nowhere else.

use crate::shared::Shared;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;

/// What every scenario is given: how long to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// `KEYHOLE_BENCH_QUICK`: short runs, for trying the bench out.
    pub(crate) quick: bool,
    /// Sequential rounds of the latency pairs (300; quick 30).
    pub(crate) rounds: usize,
    /// Seconds of each throughput figure (5; quick 2), in one-second slices.
    pub(crate) throughput_secs: u64,
    /// Seconds of the soak (60; quick 10).
    pub(crate) soak_secs: u64,
    /// Seconds of each worst-case cell of scenario 9 (8; quick 3).
    pub(crate) vector_share_secs: u64,
    /// Seconds of each agent-traffic cell of scenario 9 (20; quick 6): a
    /// user turn there takes several LLM answers, so a cell needs longer to
    /// hold as many turns.
    pub(crate) agent_secs: u64,
    /// The LLM's answer time in scenario 9's agent traffic, in ms
    /// (`KEYHOLE_BENCH_LLM_MS`, default [`DEFAULT_LLM_MS`]): the echo LLM
    /// answers at once, so each session waits this long after each answer
    /// before its next request, as an agent waits for its model.
    pub(crate) llm_ms: u64,
}

/// The default of [`Settings::llm_ms`]: below what a hosted model takes to
/// answer a request that chooses tools, so the load it stands for errs on the
/// heavy side.
pub(crate) const DEFAULT_LLM_MS: u64 = 400;

impl Settings {
    /// The full settings, or the quick ones, with the LLM's answer time.
    pub(crate) fn new(quick: bool, llm_ms: u64) -> Settings {
        Settings {
            quick,
            rounds: if quick { 30 } else { 300 },
            throughput_secs: if quick { 2 } else { 5 },
            soak_secs: if quick { 10 } else { 60 },
            vector_share_secs: if quick { 3 } else { 8 },
            agent_secs: if quick { 6 } else { 20 },
            llm_ms,
        }
    }
}

/// A scenario's figures, measured.
pub(crate) type Figures<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Value>> + 'a>>;

/// How a scenario runs.
#[derive(Clone, Copy)]
pub(crate) enum Run {
    /// On its own: it starts whatever it needs and stops it.
    Alone(for<'a> fn(&'a Settings) -> Figures<'a>),
    /// On the shared stack (keyhole beside plain Envoy, the catalog indexed),
    /// started once for all such scenarios, which stand together in
    /// [`SCENARIOS`].
    Shared(for<'a> fn(&'a Settings, &'a Shared) -> Figures<'a>),
}

/// One scenario.
pub(crate) struct Scenario {
    /// Its key in `latest.json` and its name for `--only`.
    pub(crate) name: &'static str,
    /// The number it has been known by (`--only 6` runs `scaling`); `None`
    /// for the figures that were part of another scenario.
    pub(crate) number: Option<u8>,
    /// What it measures: its heading in `RESULTS.md`.
    pub(crate) measures: &'static str,
    /// How it runs.
    pub(crate) run: Run,
    /// Its section of `RESULTS.md`, from its figures.
    pub(crate) markdown: fn(&Value) -> String,
}

/// Boxes an `async fn(&Settings)` for [`Run::Alone`].
macro_rules! alone {
    ($f:path) => {
        Run::Alone(|s| Box::pin($f(s)))
    };
}

/// Boxes an `async fn(&Settings, &Shared)` for [`Run::Shared`].
macro_rules! shared {
    ($f:path) => {
        Run::Shared(|s, sh| Box::pin($f(s, sh)))
    };
}

/// Every scenario, in the order a full run measures them. Scenario 0 comes
/// first, before any server of the bench has work: after scenario 6 the
/// vector store still indexes 20,000 points, and after scenario 9 the
/// embedder still works through its backlog, each on one of the box's two
/// cores.
pub(crate) const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "native_rewrite",
        number: Some(0),
        measures: "the HMS rewrite and the last word in keyhole-core, native, 10 KB … 1 MB and the samples in turns",
        run: alone!(crate::native::native_rewrite),
        markdown: crate::native::native_rewrite_markdown,
    },
    Scenario {
        name: "llm_catalog",
        number: Some(1),
        measures: "the 84 KB catalog request through the LLM listener: warm, cold, the alias pass, the filter alone, throughput",
        run: shared!(crate::shared::llm_catalog),
        markdown: crate::shared::llm_catalog_markdown,
    },
    Scenario {
        name: "llm_get",
        number: Some(2),
        measures: "a GET through the LLM listener",
        run: shared!(crate::shared::llm_get),
        markdown: crate::shared::llm_get_markdown,
    },
    Scenario {
        name: "hms",
        number: Some(3),
        measures: "the HMS route: every sample and synthetic 30 KB and 1 MB bodies",
        run: shared!(crate::shared::hms),
        markdown: crate::shared::hms_markdown,
    },
    Scenario {
        name: "hms_throughput_rps",
        number: None,
        measures: "the HMS route's throughput at 4 connections",
        run: shared!(crate::shared::hms_throughput),
        markdown: crate::shared::hms_throughput_markdown,
    },
    Scenario {
        name: "prompt_bytes",
        number: Some(5),
        measures: "the bytes and tools the LLM receives over the catalog's dev turns",
        run: shared!(crate::shared::prompt_bytes),
        markdown: crate::shared::prompt_bytes_markdown,
    },
    Scenario {
        name: "control",
        number: Some(4),
        measures: "control alone over its socket: resolve at 108 tools, bytes per turn, alias encode and decode",
        run: shared!(crate::shared::control),
        markdown: crate::shared::control_markdown,
    },
    Scenario {
        name: "rss_kib",
        number: None,
        measures: "the memory of control and of Envoy with and without keyhole after the scenarios above",
        run: shared!(crate::shared::rss),
        markdown: crate::shared::rss_markdown,
    },
    Scenario {
        name: "soak",
        number: Some(7),
        measures: "a soak of mixed LLM and HMS traffic: errors and memory before and after",
        run: shared!(crate::shared::soak),
        markdown: crate::shared::soak_markdown,
    },
    Scenario {
        name: "edge_20k",
        number: Some(8),
        measures: "a 20,000-tool registry through Envoy: bytes forwarded, memory, bytes to control",
        run: alone!(crate::registry::edge_at_20k),
        markdown: crate::registry::edge_20k_markdown,
    },
    Scenario {
        name: "vector_share",
        number: Some(9),
        measures: "turns answered with vectors, per turn deadline and concurrent sessions",
        run: alone!(crate::vector_share::vector_share),
        markdown: crate::vector_share::vector_share_markdown,
    },
    Scenario {
        name: "scaling",
        number: Some(6),
        measures: "resolve latency at 100 … 20,000 tools on each vector-store backend",
        run: alone!(crate::registry::scaling),
        markdown: crate::registry::scaling_markdown,
    },
];

/// The scenario `--only` names: by name, or by its number.
pub(crate) fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS
        .iter()
        .find(|s| s.name == name || s.number.is_some_and(|n| name.parse::<u8>().ok() == Some(n)))
}

/// The names `--only` takes, for messages.
pub(crate) fn names() -> String {
    SCENARIOS
        .iter()
        .map(|s| match s.number {
            Some(n) => format!("{} ({n})", s.name),
            None => s.name.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The section of `RESULTS.md` for `scenario`'s figures: a heading with its
/// number and what it measures, then its own text.
pub(crate) fn section(scenario: &Scenario, figures: &Value) -> String {
    let number = scenario.number.map_or(String::new(), |n| format!("{n}. "));
    format!(
        "## {number}{} (`{}`)\n\n{}\n",
        scenario.measures,
        scenario.name,
        (scenario.markdown)(figures)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_and_numbers_are_unique() {
        let names: BTreeSet<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        assert_eq!(names.len(), SCENARIOS.len(), "{}", super::names());
        let numbers: Vec<u8> = SCENARIOS.iter().filter_map(|s| s.number).collect();
        let unique: BTreeSet<u8> = numbers.iter().copied().collect();
        assert_eq!(unique.len(), numbers.len(), "{numbers:?}");
        // The numbers the docs cite, 0 … 9, are all still there.
        assert_eq!(unique, (0..=9).collect());
        // `machine` is written beside the scenarios in latest.json.
        assert!(!names.contains("machine"));
        // A name is never a number (`--only 6` would be ambiguous).
        assert!(names.iter().all(|n| n.parse::<u8>().is_err()));
    }

    #[test]
    fn only_takes_a_name_or_an_old_number() {
        assert_eq!(find("scaling").map(|s| s.name), Some("scaling"));
        assert_eq!(find("6").map(|s| s.name), Some("scaling"));
        assert_eq!(find("0").map(|s| s.name), Some("native_rewrite"));
        assert_eq!(find("9").map(|s| s.name), Some("vector_share"));
        assert_eq!(find("native_rewrite").map(|s| s.number), Some(Some(0)));
        assert_eq!(find("rss_kib").map(|s| s.number), Some(None));
        assert!(find("10").is_none());
        assert!(find("Scaling").is_none());
        assert!(find("").is_none());
        assert!(find("machine").is_none());
    }

    #[test]
    fn the_shared_stack_scenarios_stand_together() {
        let shared: Vec<usize> = SCENARIOS
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.run, Run::Shared(_)))
            .map(|(i, _)| i)
            .collect();
        assert!(!shared.is_empty());
        assert_eq!(
            shared.last().copied().unwrap_or(0) - shared[0] + 1,
            shared.len(),
            "the shared stack would start twice: {shared:?}"
        );
        // Scenario 0 runs before any server of the bench has work.
        assert_eq!(SCENARIOS[0].name, "native_rewrite");
        assert!(matches!(SCENARIOS[0].run, Run::Alone(_)));
    }

    #[test]
    fn every_section_renders_empty_figures() {
        for s in SCENARIOS {
            let text = section(s, &Value::Null);
            assert!(text.contains(s.measures), "{text}");
            assert!(text.contains(&format!("(`{}`)", s.name)), "{text}");
        }
    }
}
