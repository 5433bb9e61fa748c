//! Scenario 9: the share of turns answered with vectors per turn deadline
//! and number of concurrent sessions, on the real stack and the real
//! embedder; the figures control's default turn deadline is chosen by.
//!
//! Two kinds of traffic, each its own rows:
//! - agent traffic: each session's user turn goes to the LLM once per phase
//!   ([`AGENT_PHASES`]), and the session waits the LLM's answer time
//!   ([`Settings::llm_ms`]) after each answer, as an agent waits for its
//!   model; the next user turn follows the last phase at once;
//! - worst case: every session sends a new unique turn the instant the last
//!   is answered, no phases, no LLM time: a load no agent produces, which
//!   shows where the embedder's capacity ends.

use crate::measure::{machine, summarize, with_turn};
use crate::report::f;
use crate::scenarios::Settings;
use anyhow::Context as _;
use keyhole_e2e::control::{self, Control};
use keyhole_e2e::{paths, Stack, StackOptions};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The phases one user turn of the agent traffic goes through, in order (the
/// filter's `x-keyhole-phase` values): the planner chooses the tools, a
/// sub-agent call works on the turn, the chosen tool's arguments are filled
/// in, the formatter writes the answer. Each is one request to the LLM with
/// the same user turn, so control embeds the turn once and the later phases
/// find its vector cached.
const AGENT_PHASES: [&str; 4] = ["planner", "agent-call", "tool-input", "formatter"];

/// Deadlines (ms) the agent traffic is measured at besides control's
/// default: the last round's default (300) and 1000, the rule's candidates.
const AGENT_CANDIDATES_MS: [u64; 2] = [300, 1000];

/// Session counts scenario 9 measures at: one agent alone, a few, many, and
/// far more than the embedder can serve within any deadline measured.
const VECTOR_SHARE_SESSIONS: [usize; 4] = [1, 4, 16, 64];

/// Deadlines scenario 9 compares besides control's default (in ms): 300 and
/// 400 (the last round's default and its neighbour), 1000 and 2500 (the
/// latter above the filter's default `timeout_ms`, 1500, which the scenario
/// raises).
const VECTOR_SHARE_CANDIDATES_MS: [u64; 4] = [300, 400, 1000, 2500];

/// The rule that picks control's default turn deadline from scenario 9: the
/// smallest deadline measured whose vector share under agent traffic at this
/// many concurrent sessions is at least [`VECTOR_SHARE_TARGET`].
const VECTOR_SHARE_RULE_SESSIONS: usize = 16;

/// See [`VECTOR_SHARE_RULE_SESSIONS`].
const VECTOR_SHARE_TARGET: f64 = 0.95;

/// `keyhole serve`'s default `--retrieval-timeout-ms`, read from its `--help`
/// (the binary the scenario runs, so the figures name the default it had).
fn default_retrieval_timeout_ms() -> anyhow::Result<u64> {
    let out = std::process::Command::new(paths::keyhole_bin())
        .args(["serve", "--help"])
        .output()
        .with_context(|| format!("running {} serve --help", paths::keyhole_bin().display()))?;
    let help = String::from_utf8_lossy(&out.stdout);
    let flag = help
        .find("--retrieval-timeout-ms")
        .context("`keyhole serve --help` names no --retrieval-timeout-ms")?;
    help[flag..]
        .split("[default: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .and_then(|v| v.trim().parse().ok())
        .context("`keyhole serve --help` gives no default for --retrieval-timeout-ms")
}

/// `keyhole_control_resolves_total` by source.
async fn resolves_by_source(socket: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let text = control::get(socket, "/metrics").await?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("keyhole_control_resolves_total{source=\""))
        .filter_map(|l| l.split_once("\"} "))
        .filter_map(|(source, v)| Some((source.to_owned(), v.trim().parse().ok()?)))
        .collect())
}

/// Today's date (UTC) as `YYYY-MM-DD`, from the system clock.
fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Waits until the shared embedder answers a new text within 250 ms and
/// returns how long that took. A turn past its deadline is ranked lexically,
/// but the embedder still computes the embedding control stopped waiting for,
/// so an overloaded cell leaves a backlog behind; the next cell starts once it
/// has drained, and the wait is reported with the cell that left it.
async fn embedder_drained(client: &reqwest::Client) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for probe in 0u32.. {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(180),
            "the embedder did not drain within 180 s"
        );
        let sent = Instant::now();
        let text = format!(
            "keyhole-bench embedder probe {probe} {:?}",
            std::time::SystemTime::now()
        );
        let resp = client
            .post(format!("{}/v1/embeddings", paths::embedder_url()))
            .json(&json!({"model": "e5-query", "input": [text]}))
            .send()
            .await?;
        anyhow::ensure!(
            resp.status().is_success(),
            "the embedder answered {}",
            resp.status()
        );
        resp.bytes().await?;
        if sent.elapsed() < Duration::from_millis(250) {
            break;
        }
    }
    Ok(started.elapsed())
}

/// One request of scenario 9: its phase (the index in [`AGENT_PHASES`]; 0
/// in the worst case, which sends planner turns), latency, status and
/// `x-keyhole-source`.
struct TurnOutcome {
    phase: usize,
    latency: Duration,
    status: u16,
    source: String,
}

/// Sends one request with `turn` in `template` to the LLM listener. A request
/// that gets no answer is counted with status 0.
async fn send(
    client: &reqwest::Client,
    base: &str,
    session: &str,
    phase: usize,
    template: &str,
    turn: &str,
) -> anyhow::Result<TurnOutcome> {
    let body = template.replacen(VECTOR_SHARE_MARK, &serde_json::to_string(turn)?, 1);
    let started = Instant::now();
    let sent = client
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("x-keyhole-session", session)
        .header("x-keyhole-phase", AGENT_PHASES[phase])
        .body(body)
        .send()
        .await;
    let (status, source) = match sent {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let source = resp
                .headers()
                .get("x-keyhole-source")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_owned();
            match resp.bytes().await {
                Ok(_) => (status, source),
                Err(_) => (0, source),
            }
        }
        Err(_) => (0, "none".to_owned()),
    };
    Ok(TurnOutcome {
        phase,
        latency: started.elapsed(),
        status,
        source,
    })
}

/// What the sessions of scenario 9 send: catalog requests to `base`, each
/// with a new labelled turn. Turn `n` is dev turn `n mod 120` with ` (ref. n)`
/// after it; `next` runs on across the whole scenario, so no text repeats and
/// no answer comes from an embedding cache.
#[derive(Clone)]
struct Turns {
    /// The LLM listener's URL.
    base: String,
    /// The catalog request, its user turn [`VECTOR_SHARE_MARK`].
    template: String,
    /// The same request as a later phase sends it: the model's earlier
    /// answer follows the user turn.
    later: String,
    /// The catalog's labelled dev turns.
    queries: std::sync::Arc<[String]>,
    /// The next turn's number.
    next: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// `sessions` closed-loop clients, each its own `x-keyhole-session`, sending
/// `turns` for `secs` seconds, at most `max_turns` each. A turn that gets no
/// answer is counted with status 0.
async fn vector_share_cell(
    turns: &Turns,
    label: &str,
    sessions: usize,
    secs: u64,
    max_turns: usize,
) -> anyhow::Result<Vec<TurnOutcome>> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let Turns {
            base,
            template,
            queries,
            next,
            ..
        } = turns.clone();
        let session = format!("vector-share-{label}-{s}");
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut out = Vec::new();
            while Instant::now() < deadline && out.len() < max_turns {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let turn = format!("{} (ref. {n})", queries[n % queries.len()]);
                out.push(send(&client, &base, &session, 0, &template, &turn).await?);
            }
            anyhow::Ok(out)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// `sessions` agents, each its own `x-keyhole-session`, for `secs` seconds:
/// each takes a new user turn and sends it once per phase of
/// [`AGENT_PHASES`], waiting `llm` after each answer (the LLM's answer time),
/// then takes the next turn at once. A turn started before the end runs
/// through all its phases.
async fn agent_cell(
    turns: &Turns,
    label: &str,
    sessions: usize,
    secs: u64,
    llm: Duration,
) -> anyhow::Result<Vec<TurnOutcome>> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let Turns {
            base,
            template,
            later,
            queries,
            next,
        } = turns.clone();
        let session = format!("vector-share-agent-{label}-{s}");
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut out = Vec::new();
            while Instant::now() < deadline {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let turn = format!("{} (ref. {n})", queries[n % queries.len()]);
                for phase in 0..AGENT_PHASES.len() {
                    let body = if phase == 0 { &template } else { &later };
                    out.push(send(&client, &base, &session, phase, body, &turn).await?);
                    tokio::time::sleep(llm).await;
                }
            }
            anyhow::Ok(out)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// Where the turn goes in the catalog request template of scenario 9.
const VECTOR_SHARE_MARK: &str = "\"@@keyhole-bench-turn@@\"";

/// The share of `outcomes` answered with vectors (`x-keyhole-source:
/// retrieval`, status 200).
fn share(outcomes: &[&TurnOutcome]) -> f64 {
    let vectors = outcomes
        .iter()
        .filter(|t| t.status == 200 && t.source == "retrieval")
        .count();
    vectors as f64 / outcomes.len().max(1) as f64
}

/// One row of scenario 9: the cell's outcomes summed up, with what control
/// counted meanwhile and how long the embedder took to drain after it.
fn row(
    deadline: u64,
    sessions: usize,
    outcomes: &[TurnOutcome],
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    backlog: Duration,
) -> Value {
    let mut sources: BTreeMap<String, u64> = BTreeMap::new();
    for t in outcomes {
        let key = if t.status == 200 {
            t.source.clone()
        } else {
            format!("status {}", t.status)
        };
        *sources.entry(key).or_default() += 1;
    }
    let all: Vec<&TurnOutcome> = outcomes.iter().collect();
    let first: Vec<&TurnOutcome> = outcomes.iter().filter(|t| t.phase == 0).collect();
    let later: Vec<&TurnOutcome> = outcomes.iter().filter(|t| t.phase > 0).collect();
    let lat = summarize(outcomes.iter().map(|t| t.latency).collect());
    let first_lat = summarize(first.iter().map(|t| t.latency).collect());
    let control_counts: BTreeMap<&String, u64> = after
        .iter()
        .map(|(k, v)| (k, v.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .collect();
    json!({"deadline_ms": deadline, "sessions": sessions, "requests": outcomes.len(),
           "user_turns": first.len(), "vector_share": share(&all),
           "first_phase_vector_share": share(&first),
           "later_phases_vector_share": (!later.is_empty()).then(|| share(&later)),
           "sources": sources, "latency": lat, "first_phase_latency": first_lat,
           "control_resolves": control_counts, "embedder_backlog_after_s": backlog.as_secs_f64()})
}

/// Scenario 9: the share of turns answered with vectors (`x-keyhole-source:
/// retrieval`) rather than lexically, per turn deadline
/// (`--retrieval-timeout-ms`) and number of concurrent sessions, on the real
/// stack: Envoy with the filter, control over its socket, the real embedder;
/// under agent traffic at control's default deadline and
/// [`AGENT_CANDIDATES_MS`], and in the worst case at every deadline.
/// Each deadline gets a control of its own (the setting applies at start) on
/// the same socket and data directory, started with the catalog as its
/// `--registry`, so it is healthy only once the registry is indexed. The
/// filter's `timeout_ms` is far above every deadline, so control's deadline
/// is what decides.
pub(crate) async fn vector_share(s: &Settings) -> anyhow::Result<Value> {
    let secs = s.vector_share_secs;
    let llm = Duration::from_millis(s.llm_ms);
    eprintln!("scenario 9: vector share per turn deadline and sessions…");
    let default_ms = default_retrieval_timeout_ms()?;
    // The box is shared: its load when the scenario starts goes with the figures.
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut deadlines = vec![default_ms];
    deadlines.extend(
        VECTOR_SHARE_CANDIDATES_MS
            .iter()
            .chain(&AGENT_CANDIDATES_MS)
            .copied()
            .filter(|&d| d != default_ms),
    );
    deadlines.sort_unstable();
    deadlines.dedup();
    let agent_deadlines: Vec<u64> = deadlines
        .iter()
        .copied()
        .filter(|d| *d == default_ms || AGENT_CANDIDATES_MS.contains(d))
        .collect();
    let registry = paths::catalog().join("openai_request.json");
    let mut catalog: Value = serde_json::from_slice(&std::fs::read(&registry)?)?;
    let template = String::from_utf8(with_turn(&catalog, "@@keyhole-bench-turn@@"))?;
    anyhow::ensure!(
        template.matches(VECTOR_SHARE_MARK).count() == 1,
        "the catalog request has no single user turn"
    );
    // A later phase's request: the model's earlier answer after the user turn.
    catalog["messages"]
        .as_array_mut()
        .context("the catalog request has no messages")?
        .push(json!({"role": "assistant", "content": "Checking the chart first."}));
    let later = String::from_utf8(with_turn(&catalog, "@@keyhole-bench-turn@@"))?;
    anyhow::ensure!(
        later.matches(VECTOR_SHARE_MARK).count() == 1,
        "the later phases' request has no single user turn"
    );
    let queries: Vec<String> = std::fs::read_to_string(paths::catalog().join("queries.dev.jsonl"))?
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).map(|q| q["query"].as_str().unwrap_or("").to_owned())
        })
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(
        !queries.is_empty(),
        "no labelled turns in queries.dev.jsonl"
    );
    let control_args = |deadline: u64| {
        let mut args = StackOptions::default().control_args;
        args.extend(["--registry".into(), registry.display().to_string()]);
        args.extend(["--retrieval-timeout-ms".into(), deadline.to_string()]);
        args
    };
    let filter_timeout_ms = 30_000;
    let mut stack = Stack::start(StackOptions {
        llm_filter_config: format!(r#"{{"mode":"llm","timeout_ms":{filter_timeout_ms}}}"#),
        control_args: control_args(deadlines[0]),
        ..Default::default()
    })
    .await?;
    let turns = Turns {
        base: stack.envoy.llm_url(),
        template,
        later,
        queries: queries.into(),
        next: Default::default(),
    };
    let probe_client = reqwest::Client::new();
    let mut rows = Vec::new();
    let mut agent_rows = Vec::new();
    for (i, &deadline) in deadlines.iter().enumerate() {
        if i > 0 {
            // A new control with this deadline, on the same socket and data
            // directory: the tool vectors are cached there, the turns are new.
            if let Some(mut old) = stack.control.take() {
                old.kill().await?;
            }
            let data = stack.dir.path().join("data");
            stack.control =
                Some(Control::start(&stack.socket(), &data, &control_args(deadline)).await?);
        }
        embedder_drained(&probe_client).await?;
        // Warm-up: Envoy's connections to control and the filter's VMs, a few sequential turns.
        let warm = vector_share_cell(&turns, &format!("{deadline}-warm"), 1, 30, 5).await?;
        anyhow::ensure!(
            warm.iter().all(|t| t.status == 200),
            "warm-up turns were not all answered 200"
        );
        let agent = agent_deadlines.contains(&deadline);
        for (traffic, sessions) in VECTOR_SHARE_SESSIONS
            .iter()
            .filter(|_| agent)
            .map(|&n| ("agent", n))
            .chain(VECTOR_SHARE_SESSIONS.iter().map(|&n| ("worst case", n)))
        {
            let before = resolves_by_source(&stack.socket()).await?;
            let label = format!("{deadline}-{sessions}");
            let outcomes = if traffic == "agent" {
                agent_cell(&turns, &label, sessions, s.agent_secs, llm).await?
            } else {
                vector_share_cell(&turns, &label, sessions, secs, usize::MAX).await?
            };
            let after = resolves_by_source(&stack.socket()).await?;
            let backlog = embedder_drained(&probe_client).await?;
            let r = row(deadline, sessions, &outcomes, &before, &after, backlog);
            eprintln!(
                "  {traffic}, deadline {deadline} ms, {sessions} sessions: {} requests, vector share {:.3} (first phase {:.3}), p50 {:.1} ms, p99 {:.1} ms, embedder backlog after {:.1} s",
                outcomes.len(),
                r["vector_share"].as_f64().unwrap_or(0.0),
                r["first_phase_vector_share"].as_f64().unwrap_or(0.0),
                r["latency"]["p50_ms"].as_f64().unwrap_or(0.0),
                r["latency"]["p99_ms"].as_f64().unwrap_or(0.0),
                backlog.as_secs_f64()
            );
            if traffic == "agent" {
                agent_rows.push(r);
            } else {
                rows.push(r);
            }
        }
    }
    drop(stack);
    let chosen = agent_deadlines.iter().copied().find(|&d| {
        agent_rows.iter().any(|r| {
            r["deadline_ms"] == d
                && r["sessions"] == VECTOR_SHARE_RULE_SESSIONS
                && r["vector_share"]
                    .as_f64()
                    .is_some_and(|s| s >= VECTOR_SHARE_TARGET)
        })
    });
    Ok(json!({
        "date": utc_date(), "machine": machine(), "loadavg_at_start": loadavg.trim(),
        "loadavg_at_end": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "default_deadline_ms": default_ms, "deadlines_ms": deadlines,
        "sessions": VECTOR_SHARE_SESSIONS, "seconds_per_cell": secs, "filter_timeout_ms": filter_timeout_ms,
        "agent": {
            "deadlines_ms": agent_deadlines, "phases": AGENT_PHASES, "llm_answer_ms": s.llm_ms,
            "seconds_per_cell": s.agent_secs, "rows": agent_rows,
            "note": format!("agent traffic: each session takes a new user turn (a catalog dev turn with a unique ` (ref. n)` after it) and sends it once per phase ({}), \
                     with the `x-keyhole-phase` header; after each answer it waits {} ms, the LLM's answer time (the echo LLM answers at once; this figure is assumed, \
                     not measured), then sends the next phase, and the next user turn right after the last phase. Phases after the first carry the model's earlier \
                     answer after the user turn. vector share = requests answered `x-keyhole-source: retrieval` / all requests; first phase = the planner requests, \
                     the ones that need the embedder; latency = each request's, through Envoy, keyhole and the echo LLM, without the LLM's answer time",
                     AGENT_PHASES.join(", "), s.llm_ms)
        },
        "rows": rows,
        "rule": format!("the smallest deadline measured whose vector share at {VECTOR_SHARE_RULE_SESSIONS} concurrent sessions is at least {VECTOR_SHARE_TARGET} under agent traffic"),
        "rule_picks_ms": chosen,
        "note": "worst case (`rows`): closed loop: every session sends its next turn as soon as the last is answered (echo LLM, no think time, one request per turn); \
                 turns are the catalog's 120 labelled dev turns, each with a unique ` (ref. n)` after it; \
                 vector share = turns answered `x-keyhole-source: retrieval` / all turns; the machine is shared with other work, its load average is noted at start and end"
    }))
}

/// Scenario 9's section of `RESULTS.md`.
pub(crate) fn vector_share_markdown(v: &Value) -> String {
    let sources = |x: &Value| {
        x["sources"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let a = &v["agent"];
    let mut s = format!(
        "Measured {} ({} cores, {}; load average {} at the start, {} at the end: the machine is shared, and other work ran beside the bench): control's `--retrieval-timeout-ms` (default {} ms in the binary measured) against the share of turns answered with vectors (`x-keyhole-source: retrieval`; the rest `lexical`), on the catalog request with the real embedder. The last column is how long the embedder then took to answer a new text within 250 ms.\n\n",
        v["date"].as_str().unwrap_or("?"), v["machine"]["cores"], v["machine"]["cpu"].as_str().unwrap_or("?"),
        v["loadavg_at_start"].as_str().unwrap_or("?"), v["loadavg_at_end"].as_str().unwrap_or("?"),
        v["default_deadline_ms"]
    );
    s += &format!(
        "**Agent traffic**, each cell {} s: every session takes a new labelled dev turn and sends it once per phase ({}), waiting {} ms after each answer for the LLM (the echo LLM answers at once; {} ms is an assumed answer time, set by `KEYHOLE_BENCH_LLM_MS`), and takes its next turn right after the last phase. Vector share over every request, and over the first phase (the planner request, the one that needs the embedder; the later phases find the turn's vector cached). Latency is each request's through Envoy and keyhole, without the LLM's time.\n\n",
        a["seconds_per_cell"],
        a["phases"].as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>().join(", "),
        a["llm_answer_ms"], a["llm_answer_ms"]
    );
    s += "| deadline (ms) | sessions | user turns | requests | vector share | first phase | p50 (ms) | p99 (ms) | first phase p50 (ms) | first phase p99 (ms) | sources | embedder backlog after (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for x in a["rows"].as_array().into_iter().flatten() {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            x["deadline_ms"],
            x["sessions"],
            x["user_turns"],
            x["requests"],
            f(&x["vector_share"]),
            f(&x["first_phase_vector_share"]),
            f(&x["latency"]["p50_ms"]),
            f(&x["latency"]["p99_ms"]),
            f(&x["first_phase_latency"]["p50_ms"]),
            f(&x["first_phase_latency"]["p99_ms"]),
            sources(x),
            f(&x["embedder_backlog_after_s"])
        );
    }
    s += &format!(
        "\n**Worst case**, each cell {} s: closed-loop sessions, every turn a new labelled dev turn sent the instant the last is answered, one request per turn, no LLM time: a load no agent produces, which shows where the embedder's capacity ends.\n\n",
        v["seconds_per_cell"]
    );
    s += "| deadline (ms) | sessions | turns | vector share | p50 (ms) | p99 (ms) | sources | embedder backlog after (s) |\n|---|---|---|---|---|---|---|---|\n";
    for x in v["rows"].as_array().into_iter().flatten() {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            x["deadline_ms"],
            x["sessions"],
            x["requests"],
            f(&x["vector_share"]),
            f(&x["latency"]["p50_ms"]),
            f(&x["latency"]["p99_ms"]),
            sources(x),
            f(&x["embedder_backlog_after_s"])
        );
    }
    let picks = v["rule_picks_ms"]
        .as_u64()
        .map_or("none of the deadlines measured".to_owned(), |d| {
            format!("{d} ms")
        });
    s += &format!(
        "\nRule for the default: {}. It picks {picks}.\n",
        v["rule"].as_str().unwrap_or("?")
    );
    s
}
