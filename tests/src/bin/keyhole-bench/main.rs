//! `keyhole-bench`: every figure side by side in one run (`make bench`).
//!
//! The machine is shared and noisy, so what matters is measured as a pair in
//! the same run: Envoy with keyhole against the same Envoy without it, with
//! requests interleaved so that both see the same noise. Load comes from this
//! binary's HTTP client over loopback, with bounded counts and durations.
//!
//! The scenarios are one table ([`scenarios::SCENARIOS`]): a full run measures
//! them in its order and writes `bench/results/latest.json` (one key per
//! scenario, and `machine`) and `bench/RESULTS.md` (one section per
//! scenario). `--only NAME` (or `KEYHOLE_BENCH_ONLY=NAME`; the old scenario
//! numbers work too: `--only 9`) runs one scenario, prints its figures and its
//! section, and writes `bench/results/NAME.json`, leaving `latest.json` and
//! `RESULTS.md` as they are. `KEYHOLE_BENCH_QUICK=1` shortens every scenario;
//! `KEYHOLE_BENCH_LLM_MS` sets the LLM's answer time in scenario 9's agent
//! traffic ([`scenarios::DEFAULT_LLM_MS`] by default).
//!
//! # Layout
//! - [`scenarios`]: the table, the settings, `--only`.
//! - [`measure`]: latency pairs, requests, throughput, memory.
//! - [`report`]: helpers for the `RESULTS.md` sections.
//! - [`native`]: scenario 0, keyhole-core's HMS rewrite in process.
//! - [`shared`]: the scenarios on one shared stack (1, 2, 3, 5, 4, 7).
//! - [`registry`]: large registries (6, 8) on a fake embedder.
//! - [`vector_share`]: scenario 9, the turn deadline's figures.

mod measure;
mod native;
mod registry;
mod report;
mod scenarios;
mod shared;
mod vector_share;

use anyhow::Context as _;
use keyhole_e2e::paths;
use scenarios::{Run, Scenario, Settings, SCENARIOS};
use serde_json::Value;
use shared::Shared;

/// What the command line asks for: every scenario, or one.
fn parse_only(args: &[String], env: Option<String>) -> anyhow::Result<Option<&'static Scenario>> {
    let name = match args {
        [] => env,
        [flag, name] if flag == "--only" => Some(name.clone()),
        _ => anyhow::bail!(
            "usage: keyhole-bench [--only NAME]; NAME: {}",
            scenarios::names()
        ),
    };
    name.map(|n| {
        scenarios::find(&n)
            .ok_or_else(|| anyhow::anyhow!("no scenario {n:?}; one of: {}", scenarios::names()))
    })
    .transpose()
}

/// Runs `todo` in order, the shared stack started before the first scenario
/// that needs it and stopped after the last.
async fn run(settings: &Settings, todo: &[&Scenario]) -> anyhow::Result<Vec<Value>> {
    let mut shared: Option<Shared> = None;
    let mut figures = Vec::with_capacity(todo.len());
    for scenario in todo {
        let value = match scenario.run {
            Run::Alone(f) => {
                // The shared scenarios are behind: their stack goes first.
                drop(shared.take());
                f(settings).await?
            }
            Run::Shared(f) => {
                if shared.is_none() {
                    shared = Some(Shared::start().await?);
                }
                match &shared {
                    Some(sh) => f(settings, sh).await?,
                    None => anyhow::bail!("the shared stack did not start"),
                }
            }
        };
        figures.push(value);
    }
    Ok(figures)
}

/// The header of `RESULTS.md`.
fn header(machine: &Value) -> String {
    format!(
        "# keyhole benchmarks\n\nMachine: {} cores, {}. Written by `make bench` (`keyhole-bench`); raw figures in `bench/results/latest.json`, one key per section below.\nEvery \"added\" figure is keyhole minus plain Envoy, measured interleaved in the same run.\n\n",
        machine["cores"],
        machine["cpu"].as_str().unwrap_or("?")
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let llm_ms = match std::env::var("KEYHOLE_BENCH_LLM_MS") {
        Ok(v) => v
            .trim()
            .parse()
            .with_context(|| format!("KEYHOLE_BENCH_LLM_MS={v:?} is not a number of ms"))?,
        Err(_) => scenarios::DEFAULT_LLM_MS,
    };
    let settings = Settings::new(std::env::var("KEYHOLE_BENCH_QUICK").is_ok(), llm_ms);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = paths::repo().join("bench/results");
    if let Some(scenario) = parse_only(&args, std::env::var("KEYHOLE_BENCH_ONLY").ok())? {
        let figures = run(&settings, &[scenario]).await?;
        let figures = figures.first().cloned().unwrap_or_default();
        let text = serde_json::to_string_pretty(&figures)?;
        std::fs::create_dir_all(&out)?;
        std::fs::write(
            out.join(format!("{}.json", scenario.name)),
            format!("{text}\n"),
        )?;
        println!("{text}");
        println!("{}", scenarios::section(scenario, &figures));
        return Ok(());
    }
    let todo: Vec<&Scenario> = SCENARIOS.iter().collect();
    let figures = run(&settings, &todo).await?;
    let machine = measure::machine();
    let mut results = serde_json::Map::new();
    results.insert("machine".into(), machine.clone());
    let mut md = header(&machine);
    for (scenario, value) in todo.iter().zip(figures) {
        md += &scenarios::section(scenario, &value);
        md.push('\n');
        results.insert(scenario.name.into(), value);
    }
    std::fs::create_dir_all(&out)?;
    std::fs::write(
        out.join("latest.json"),
        serde_json::to_string_pretty(&Value::Object(results))?,
    )?;
    std::fs::write(paths::repo().join("bench/RESULTS.md"), &md)?;
    println!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn no_arguments_run_everything_unless_the_environment_names_one() {
        assert!(parse_only(&[], None).unwrap().is_none());
        let s = parse_only(&[], Some("vector_share".into())).unwrap();
        assert_eq!(s.map(|s| s.name), Some("vector_share"));
    }

    #[test]
    fn only_takes_a_name_or_a_number_and_refuses_the_rest() {
        let only = |a: &[&str]| parse_only(&args(a), None).map(|s| s.map(|s| s.name));
        assert_eq!(only(&["--only", "scaling"]).unwrap(), Some("scaling"));
        assert_eq!(only(&["--only", "3"]).unwrap(), Some("hms"));
        // The command line wins over the environment.
        let s = parse_only(&args(&["--only", "soak"]), Some("scaling".into())).unwrap();
        assert_eq!(s.map(|s| s.name), Some("soak"));
        let err = only(&["--only", "nope"]).unwrap_err().to_string();
        assert!(err.contains("native_rewrite (0)"), "{err}");
        assert!(only(&["--only"]).is_err());
        assert!(only(&["scaling"]).is_err());
        assert!(only(&["--only", "scaling", "extra"]).is_err());
    }
}
