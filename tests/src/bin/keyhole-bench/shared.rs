//! The scenarios that run on one shared stack (keyhole: Envoy with the filter
//! and control, and a plain Envoy beside it on the same upstreams), started
//! once before the first of them and stopped after the last: 1, 2, 3, 5, 4
//! and 7, and the memory after them.

use crate::measure::{
    interleaved, pair, percentile, rss_kib, send, source_of, throughput_pair, warm_up, with_turn,
    Req,
};
use crate::native::{core_rewrite, synthetic_hms, Rounds};
use crate::registry::resolve_over_socket;
use crate::report::{f, latency_row, LATENCY_HEADER};
use crate::scenarios::Settings;
use anyhow::Context as _;
use keyhole_core::alias::{PromptScan, Taxonomy};
use keyhole_core::proto::alias::EncodeRequest;
use keyhole_core::proto::tools::{descriptors_digest, ResolveRequest};
use keyhole_core::proto::turn::{TurnRequest, TURN_VERSION};
use keyhole_core::tools::format;
use keyhole_core::Phase;
use keyhole_e2e::control;
use keyhole_e2e::envoy::{Envoy, EnvoyOptions};
use keyhole_e2e::fake_control::{FakeControl, Fault};
use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{paths, Stack, StackOptions};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Control's arguments for a stack whose control indexes the catalog
/// registry before it reports ready, so that turns are answered with
/// vectors (`x-keyhole-source: retrieval`), not lexically while it indexes.
pub(crate) fn indexed_catalog() -> Vec<String> {
    let mut args = StackOptions::default().control_args;
    args.extend([
        "--registry".into(),
        paths::catalog()
            .join("openai_request.json")
            .display()
            .to_string(),
    ]);
    args
}

/// The shared stack and what its scenarios send.
pub(crate) struct Shared {
    /// keyhole: upstreams, control (catalog indexed) and Envoy with the filter.
    pub(crate) stack: Stack,
    /// Plain Envoy on the same upstreams.
    pub(crate) baseline: Envoy,
    /// The baseline's scratch directory.
    _baseline_dir: tempfile::TempDir,
    /// The catalog request (84 KB, 108 tools) as sent.
    pub(crate) catalog_bytes: Vec<u8>,
    /// The same, parsed.
    pub(crate) catalog: Value,
    /// The catalog request in session `bench`, keyhole warmed up on it.
    pub(crate) warm: Req,
    /// One client for sequential requests.
    pub(crate) client: reqwest::Client,
}

impl Shared {
    /// Starts keyhole and plain Envoy, and sends the catalog request until
    /// keyhole answers it (control indexes the catalog before it is ready).
    pub(crate) async fn start() -> anyhow::Result<Shared> {
        eprintln!("starting keyhole (Envoy + filter + control) and plain Envoy…");
        let stack = Stack::start(StackOptions {
            llm_filter_config: r#"{"mode":"llm","timeout_ms":30000}"#.into(),
            // The filter's default limit is 1 MiB; scenario 3 sends a ~1 MB body.
            hms_filter_config: r#"{"mode":"hms","timeout_ms":30000,"max_body_bytes":4194304}"#
                .into(),
            control_args: indexed_catalog(),
            ..Default::default()
        })
        .await?;
        let baseline_dir = tempfile::tempdir()?;
        let baseline = Envoy::start(EnvoyOptions {
            dir: baseline_dir.path().to_owned(),
            socket: baseline_dir.path().join("unused.sock"),
            llm_upstream: stack.llm.addr,
            hms_upstream: stack.hms.addr,
            llm_filter_config: String::new(),
            hms_filter_config: String::new(),
            max_body_bytes: 4 * 1024 * 1024,
            baseline: true,
        })
        .await?;
        let catalog_bytes = std::fs::read(paths::catalog().join("openai_request.json"))?;
        let catalog: Value = serde_json::from_slice(&catalog_bytes)?;
        let warm = Req::post("/v1/chat/completions", catalog_bytes.clone(), "bench");
        let client = reqwest::Client::new();
        warm_up(&client, &stack.envoy.llm_url(), &warm)
            .await
            .context("keyhole")?;
        Ok(Shared {
            stack,
            baseline,
            _baseline_dir: baseline_dir,
            catalog_bytes,
            catalog,
            warm,
            client,
        })
    }
}

/// Scenario 1: the catalog request through keyhole and plain Envoy, warm
/// and with a cold query embedding; the alias pass alone; the filter and
/// one callout alone; throughput at 1, 4 and 16 connections.
pub(crate) async fn llm_catalog(s: &Settings, sh: &Shared) -> anyhow::Result<Value> {
    let (k, b) = (sh.stack.envoy.llm_url(), sh.baseline.llm_url());
    let (client, warm, rounds) = (&sh.client, &sh.warm, s.rounds);
    eprintln!("scenario 1: catalog request, warm…");
    let warm_source = source_of(client, &k, warm).await?;
    eprintln!("  answered by: {warm_source}");
    let (a, z) = interleaved(&k, &b, std::slice::from_ref(warm), rounds).await?;
    let warm_pair = pair(a, z);
    // The alias pass alone: the same request through a second keyhole with
    // `aliases` off, interleaved with the first (on, the default) in one run.
    eprintln!("scenario 1: catalog request, aliases on vs off…");
    let off = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"aliases":"off"}"#.into(),
        control_args: indexed_catalog(),
        ..Default::default()
    })
    .await?;
    let k_off = off.envoy.llm_url();
    warm_up(client, &k_off, warm)
        .await
        .context("keyhole, aliases off")?;
    let (a, z) = interleaved(&k, &k_off, std::slice::from_ref(warm), rounds).await?;
    let alias_pair = pair(a, z);
    eprintln!(
        "  alias pass on the catalog request: added p50 {:.3} ms, p99 {:.3} ms",
        alias_pair.added_p50_ms, alias_pair.added_p99_ms
    );
    drop(off);
    // The filter alone: a keyhole whose control answers at once (an empty set,
    // no ranking, no alias pass), interleaved with plain Envoy. What remains is
    // the filter's parse and rewrite of the body in V8 and one callout over the
    // Unix socket.
    eprintln!("scenario 1: catalog request, control answering at once…");
    let instant = Stack::start(StackOptions {
        control: false,
        llm_filter_config:
            r#"{"mode":"llm","timeout_ms":30000,"aliases":"off","tool_search":"off"}"#.into(),
        ..Default::default()
    })
    .await?;
    let _fake = FakeControl::start(&instant.socket(), Fault::Slow(Duration::ZERO)).await?;
    let k_instant = instant.envoy.llm_url();
    warm_up(client, &k_instant, warm)
        .await
        .context("keyhole, control answering at once")?;
    let (a, z) = interleaved(&k_instant, &b, std::slice::from_ref(warm), rounds).await?;
    let filter_pair = pair(a, z);
    eprintln!(
        "  filter + one callout: added p50 {:.3} ms, p99 {:.3} ms",
        filter_pair.added_p50_ms, filter_pair.added_p99_ms
    );
    drop(instant);
    // Throughput at 1, 4 and 16 connections, keyhole and plain Envoy in
    // alternating one-second slices (`throughput_pair`).
    let mut tput = Vec::new();
    for conns in [1usize, 4, 16] {
        let (with, without) = throughput_pair(&k, &b, warm, conns, s.throughput_secs).await?;
        tput.push(json!({"connections": conns, "with_keyhole": with, "without": without, "share": with / without.max(1e-9)}));
    }
    // Cold: a new turn each time, so the query is embedded on the request path.
    eprintln!("scenario 1: catalog request, cold query embedding…");
    let cold: Vec<Req> = (0..if s.quick { 5 } else { 30 })
        .map(|i| {
            Req::post(
                "/v1/chat/completions",
                with_turn(
                    &sh.catalog,
                    &format!(
                        "Book Anna Schmidt a follow-up, request {i} at {:?}",
                        Instant::now()
                    ),
                ),
                "bench-cold",
            )
        })
        .collect();
    let (a, z) = interleaved(&k, &b, &cold, 1).await?;
    let cold_pair = pair(a, z);
    let cold_source = source_of(client, &k, &cold[0]).await?;
    Ok(json!({"warm": warm_pair, "cold_query_embedding": cold_pair,
               "source": {"warm": warm_source, "cold": cold_source},
               "alias_pass": alias_pair, "filter_and_callout": filter_pair, "throughput_rps": tput}))
}

/// Scenario 1's section of `RESULTS.md`.
pub(crate) fn llm_catalog_markdown(l: &Value) -> String {
    let source = |which: &str| l["source"][which].as_str().unwrap_or("?").to_owned();
    let mut s = LATENCY_HEADER.to_owned();
    s += &latency_row(
        &format!(
            "catalog request (84 KB), warm (answered by: {})",
            source("warm")
        ),
        &l["warm"],
    );
    s += &latency_row(
        &format!(
            "catalog request, cold query embedding (answered by: {})",
            source("cold")
        ),
        &l["cold_query_embedding"],
    );
    s += &latency_row(
        "catalog request, aliases on (vs keyhole with aliases off)",
        &l["alias_pass"],
    );
    s += &latency_row(
        "catalog request, filter + one callout (control answering at once, aliases off)",
        &l["filter_and_callout"],
    );
    s += "\n| throughput, catalog request | with keyhole (req/s) | plain Envoy (req/s) | share |\n|---|---|---|---|\n";
    for t in l["throughput_rps"].as_array().into_iter().flatten() {
        s += &format!(
            "| {} connections | {} | {} | {} |\n",
            t["connections"],
            f(&t["with_keyhole"]),
            f(&t["without"]),
            f(&t["share"])
        );
    }
    s
}

/// Scenario 2: a GET (no body) through the LLM listener.
pub(crate) async fn llm_get(s: &Settings, sh: &Shared) -> anyhow::Result<Value> {
    eprintln!("scenario 2: GET passthrough…");
    let (k, b) = (sh.stack.envoy.llm_url(), sh.baseline.llm_url());
    let get = Req::get("/v1/models", "bench");
    let (a, z) = interleaved(&k, &b, std::slice::from_ref(&get), s.rounds * 3).await?;
    Ok(json!(pair(a, z)))
}

/// Scenario 2's section of `RESULTS.md`.
pub(crate) fn llm_get_markdown(v: &Value) -> String {
    format!(
        "{LATENCY_HEADER}{}",
        latency_row("GET through the LLM listener", v)
    )
}

/// Where scenario 3 serves a sample or a synthetic body: a synthetic body
/// is a patient list, served where a patient list lives, so the path names
/// its kind (at an unknown path its ids are ambiguous and the filter
/// refuses them).
fn hms_path(name: &str) -> String {
    if name.starts_with("synthetic") {
        "/api/v2/patients".to_owned()
    } else {
        format!("/api/v2/bench/{}", name.trim_end_matches(".json"))
    }
}

/// The catalog's HMS samples, sorted by name, as (file name, body).
fn hms_samples() -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut samples: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in std::fs::read_dir(paths::catalog().join("hms_samples"))? {
        let p = entry?.path();
        samples.push((
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            std::fs::read(&p)?,
        ));
    }
    samples.sort();
    Ok(samples)
}

/// Scenario 3: every HMS sample and a ~30 KB and ~1 MB synthetic body through
/// the HMS route, against plain Envoy, with the native core rewrite of each.
pub(crate) async fn hms(s: &Settings, sh: &Shared) -> anyhow::Result<Value> {
    eprintln!("scenario 3: HMS route…");
    let rounds = s.rounds;
    let mut hms = Vec::new();
    let mut samples = hms_samples()?;
    samples.push(("synthetic-30KB.json".into(), synthetic_hms(30 << 10)));
    samples.push(("synthetic-1MB.json".into(), synthetic_hms(1 << 20)));
    let (hk, hb) = (sh.stack.envoy.hms_url(), sh.baseline.hms_url());
    for (name, body) in &samples {
        let path = hms_path(name);
        sh.stack.hms.set(&path, Canned::json(body.clone()));
        let n = if body.len() > 100_000 {
            rounds / 10
        } else {
            rounds / 3
        };
        // A session per body: the synthetic bodies reuse FHIR ids of the
        // samples (`pat-000123`) for other patients, which in one session is a
        // conflict (withheld), not a benchmark.
        let session = format!("bench-hms-{name}");
        let (a, z) = match interleaved(&hk, &hb, &[Req::get(&path, &session)], n.max(3)).await {
            Ok(v) => v,
            Err(e) => {
                eprintln!("  {name}: {e}");
                hms.push(json!({"sample": name, "bytes": body.len(), "error": e.to_string()}));
                continue;
            }
        };
        let p = pair(a, z);
        let mbps = if p.added_p50_ms > 0.0 {
            body.len() as f64 / (p.added_p50_ms / 1e3) / 1e6
        } else {
            f64::INFINITY
        };
        let (core_mbps, _) = core_rewrite(
            body,
            Rounds {
                min: if body.len() > 500_000 { 20 } else { 200 },
                seconds: 0.0,
            },
        )
        .unwrap_or((0.0, 0.0));
        hms.push(json!({"sample": name, "bytes": body.len(), "latency": p, "route_mb_per_s": mbps, "core_rewrite_mb_per_s": core_mbps}));
    }
    Ok(json!(hms))
}

/// Scenario 3's section of `RESULTS.md`.
pub(crate) fn hms_markdown(v: &Value) -> String {
    let mut s = LATENCY_HEADER.to_owned();
    for h in v.as_array().into_iter().flatten() {
        let name = format!(
            "HMS {} ({} B)",
            h["sample"].as_str().unwrap_or("?"),
            h["bytes"]
        );
        match h["error"].as_str() {
            Some(e) => s += &format!("| {name} | failed: {e} | | |\n"),
            None => s += &latency_row(&name, &h["latency"]),
        }
    }
    s
}

/// The HMS route's throughput: the patient search sample at 4 connections,
/// keyhole and plain Envoy.
pub(crate) async fn hms_throughput(s: &Settings, sh: &Shared) -> anyhow::Result<Value> {
    eprintln!("HMS route throughput…");
    let file = "01_patients.search.json";
    let path = hms_path(file);
    let body = std::fs::read(paths::catalog().join("hms_samples").join(file))?;
    sh.stack.hms.set(&path, Canned::json(body));
    let search = Req::get(&path, "bench-hms");
    let (hk, hb) = (sh.stack.envoy.hms_url(), sh.baseline.hms_url());
    let (with, without) = throughput_pair(&hk, &hb, &search, 4, s.throughput_secs).await?;
    Ok(json!({"sample": file, "connections": 4, "with_keyhole": with, "without": without}))
}

/// The HMS throughput's section of `RESULTS.md`.
pub(crate) fn hms_throughput_markdown(h: &Value) -> String {
    format!(
        "Throughput, HMS route ({}, {} connections): {} req/s with keyhole, {} req/s plain Envoy.\n",
        h["sample"].as_str().unwrap_or("?"),
        h["connections"],
        f(&h["with_keyhole"]),
        f(&h["without"])
    )
}

/// Scenario 5: the bytes and tools the LLM received over the catalog's dev
/// turns, against the catalog request's 108 tools.
pub(crate) async fn prompt_bytes(s: &Settings, sh: &Shared) -> anyhow::Result<Value> {
    eprintln!("scenario 5: prompt bytes over the dev turns…");
    let k = sh.stack.envoy.llm_url();
    let queries = std::fs::read_to_string(paths::catalog().join("queries.dev.jsonl"))?;
    let (mut bytes_out, mut tools_out) = (Vec::new(), Vec::new());
    sh.stack.llm.clear();
    for (i, line) in queries
        .lines()
        .enumerate()
        .take(if s.quick { 20 } else { usize::MAX })
    {
        let q: Value = serde_json::from_str(line)?;
        let body = with_turn(&sh.catalog, q["query"].as_str().unwrap_or(""));
        let (_, status, _) = send(
            &sh.client,
            &k,
            &Req::post("/v1/chat/completions", body, &format!("dev-{i}")),
        )
        .await?;
        anyhow::ensure!(status == 200, "dev turn {i}: {status}");
    }
    for r in sh.stack.llm.seen() {
        bytes_out.push(r.body.len() as f64);
        let parsed =
            format::parse("/v1/chat/completions", &r.body).map_err(|e| anyhow::anyhow!("{e}"))?;
        tools_out.push(parsed.map_or(0, |p| p.tools.len()) as f64);
    }
    let n = bytes_out.len().max(1) as f64;
    Ok(
        json!({"turns": bytes_out.len(), "bytes_in": sh.catalog_bytes.len(), "tools_in": 108,
               "bytes_out_mean": bytes_out.iter().sum::<f64>() / n, "bytes_out_p95": percentile(bytes_out.clone(), 0.95),
               "tools_out_mean": tools_out.iter().sum::<f64>() / n, "tools_out_max": percentile(tools_out, 1.0)}),
    )
}

/// Scenario 5's section of `RESULTS.md`.
pub(crate) fn prompt_bytes_markdown(p: &Value) -> String {
    format!(
        "Prompt bytes over {} catalog dev turns: {} B in → mean {} B, p95 {} B out; tools {} in → mean {}, max {} out.\n",
        p["turns"], p["bytes_in"], f(&p["bytes_out_mean"]), f(&p["bytes_out_p95"]), p["tools_in"], f(&p["tools_out_mean"]), f(&p["tools_out_max"])
    )
}

/// Scenario 4: control alone over its socket: `/v1/resolve` at 108 tools,
/// `/v2/turn` as the filter sends it, the bytes filter→control per turn,
/// alias encode and decode rates.
pub(crate) async fn control(s: &Settings, sh: &Shared) -> anyhow::Result<Value> {
    eprintln!("scenario 4: control alone…");
    let rounds = s.rounds;
    let parsed = format::parse("/v1/chat/completions", &sh.catalog_bytes)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .context("tools")?;
    let catalog_req = ResolveRequest {
        session: Some("bench".into()),
        phase: Phase::Planner,
        turn: parsed.turn.clone(),
        tools: parsed.descriptors(),
        forced: Vec::new(),
        registry: None,
        tool_search: None,
        shadow: false,
    };
    let socket = sh.stack.socket();
    // The first call brings the descriptors, so the registry is known by
    // digest; the kept-alive run then waits for answers ranked with vectors,
    // and both timed runs are warm.
    resolve_over_socket(&socket, &catalog_req, 1).await?;
    // Bytes filter→control per turn: the first turn carries the registry, the
    // next ones name it by digest.
    let catalog_by_digest = ResolveRequest {
        registry: Some(descriptors_digest(&catalog_req.tools)),
        tools: Vec::new(),
        ..catalog_req.clone()
    };
    // The steady state: the registry named by digest, one kept-alive
    // connection (what the filter's calls through Envoy's pool see).
    let (resolve_108_steady, steady_source) =
        crate::registry::resolve_kept_alive(&socket, &catalog_by_digest, rounds).await?;
    // Where that time goes: control's own work per answer (its audit trail
    // times each resolve from the body read to the answer built), and the
    // round trip with next to no work behind it.
    let own = own_work(&socket, "bench", rounds).await?;
    // What the filter sends on each catalog turn: the prompt's raw ids and
    // the turn by digest, one `/v2/turn` (its own session, so the audit
    // figures above stay the resolve's).
    let tax = match keyhole_e2e::paths::taxonomy() {
        Some(file) => Taxonomy::from_json(&std::fs::read(&file)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?,
        None => Taxonomy::default(),
    };
    let scan = PromptScan::new(&tax, &sh.catalog_bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let turn_req = TurnRequest {
        version: TURN_VERSION,
        taxonomy: Some(tax.digest().to_owned()),
        encode: EncodeRequest {
            session: "bench-turn".into(),
            ids: scan.ids().to_vec(),
            prompt: true,
        },
        resolve: ResolveRequest {
            session: Some("bench-turn".into()),
            ..catalog_by_digest.clone()
        },
    };
    let (turn_steady, turn_source) =
        crate::registry::turn_kept_alive(&socket, &turn_req, rounds).await?;
    let floor = crate::registry::healthz_kept_alive(&socket, rounds).await?;
    let resolve_108 = resolve_over_socket(&socket, &catalog_req, rounds).await?;
    let turn_bytes_108 = json!({"tools": 108, "first_turn": serde_json::to_vec(&catalog_req)?.len(),
                                "by_digest": serde_json::to_vec(&catalog_by_digest)?.len()});
    let ids: Vec<Value> = (0..10)
        .map(|i| json!({"value": format!("00000000-0000-4000-8000-{:012}", i), "kind": "patient"}))
        .collect();
    let encode = serde_json::to_string(&json!({"session": "bench-alias", "ids": ids}))?;
    let started = Instant::now();
    let alias_rounds = rounds;
    let mut aliases = Vec::new();
    for _ in 0..alias_rounds {
        let resp = control::request(&socket, "POST", "/v1/alias/encode", Some(&encode)).await?;
        if aliases.is_empty() {
            let body = resp.split("\r\n\r\n").nth(1).unwrap_or("{}");
            let v: Value = serde_json::from_str(body).unwrap_or_default();
            aliases = v["aliases"].as_array().cloned().unwrap_or_default();
        }
    }
    let encode_ops = (alias_rounds * 10) as f64 / started.elapsed().as_secs_f64();
    let decode = serde_json::to_string(&json!({"session": "bench-alias", "aliases": aliases}))?;
    let started = Instant::now();
    for _ in 0..alias_rounds {
        control::request(&socket, "POST", "/v1/alias/decode", Some(&decode)).await?;
    }
    let decode_ops = (alias_rounds * aliases.len().max(1)) as f64 / started.elapsed().as_secs_f64();
    Ok(
        json!({"resolve_108_tools": resolve_108, "resolve_108_tools_by_digest_kept_alive": resolve_108_steady,
               "turn_by_digest_kept_alive": turn_steady, "turn_answered_by": turn_source,
               "turn_prompt_ids": scan.ids().len(),
               "by_digest_kept_alive_answered_by": steady_source,
               "resolve_own_work_us": own,
               "healthz_kept_alive": floor,
               "turn_bytes_108_tools": turn_bytes_108,
               "alias_encode_ids_per_s": encode_ops, "alias_decode_ids_per_s": decode_ops,
               "note": "one HTTP/1.1 connection per call over the Unix socket, batches of 10 ids"}),
    )
}

/// The p50 of control's own timings (`embedUs`, `searchUs`, `rankUs`,
/// `totalUs`) over the last `n` answers of `session`'s audit trail.
async fn own_work(socket: &std::path::Path, session: &str, n: usize) -> anyhow::Result<Value> {
    let resp = control::request(socket, "GET", &format!("/v1/audit/{session}"), None).await?;
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("[]");
    let trail: Value = serde_json::from_str(body).context("the audit trail")?;
    let entries = trail.as_array().context("the audit trail is a list")?;
    let last = entries
        .get(entries.len().saturating_sub(n)..)
        .unwrap_or_default();
    let p50 = |key: &str| {
        let mut v: Vec<u64> = last
            .iter()
            .filter_map(|e| e["timings"][key].as_u64())
            .collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    };
    Ok(
        json!({"n": last.len(), "embed_p50": p50("embedUs"), "search_p50": p50("searchUs"),
              "rank_p50": p50("rankUs"), "total_p50": p50("totalUs")}),
    )
}

/// Scenario 4's section of `RESULTS.md`.
pub(crate) fn control_markdown(c: &Value) -> String {
    format!(
        "control alone: `/v1/resolve` at 108 tools p50 {} ms, p99 {} ms (a connection per call, descriptors sent); by digest on one kept-alive connection, as the filter calls it, p50 {} ms, p99 {} ms (answered by: {}; control's own work p50 {} µs of it; `GET /healthz` on the same kind of connection p50 {} ms); `/v2/turn` as the filter sends it on each catalog turn (the prompt's {} raw ids and the turn by digest, kept alive) p50 {} ms, p99 {} ms (answered by: {}); bytes filter→control per turn at 108 tools: first turn {} B, by digest {} B; alias encode {} ids/s, decode {} ids/s ({}).\n",
        f(&c["resolve_108_tools"]["p50_ms"]), f(&c["resolve_108_tools"]["p99_ms"]),
        f(&c["resolve_108_tools_by_digest_kept_alive"]["p50_ms"]), f(&c["resolve_108_tools_by_digest_kept_alive"]["p99_ms"]),
        c["by_digest_kept_alive_answered_by"].as_str().unwrap_or("?"),
        c["resolve_own_work_us"]["total_p50"], f(&c["healthz_kept_alive"]["p50_ms"]),
        c["turn_prompt_ids"], f(&c["turn_by_digest_kept_alive"]["p50_ms"]), f(&c["turn_by_digest_kept_alive"]["p99_ms"]),
        c["turn_answered_by"].as_str().unwrap_or("?"),
        c["turn_bytes_108_tools"]["first_turn"], c["turn_bytes_108_tools"]["by_digest"], f(&c["alias_encode_ids_per_s"]),
        f(&c["alias_decode_ids_per_s"]), c["note"].as_str().unwrap_or("")
    )
}

/// The resident memory of control, Envoy with keyhole and plain Envoy, after
/// the scenarios before it on the shared stack.
pub(crate) async fn rss(_: &Settings, sh: &Shared) -> anyhow::Result<Value> {
    Ok(
        json!({"control": rss_kib(sh.stack.control.as_ref().and_then(|c| c.child.id())),
               "envoy_with_keyhole": rss_kib(sh.stack.envoy.child.id()),
               "envoy_without": rss_kib(sh.baseline.child.id())}),
    )
}

/// The memory's section of `RESULTS.md`.
pub(crate) fn rss_markdown(m: &Value) -> String {
    format!(
        "Memory (RSS): control {} KiB; Envoy with keyhole {} KiB, plain Envoy {} KiB.\n",
        m["control"], m["envoy_with_keyhole"], m["envoy_without"]
    )
}

/// Scenario 7: a soak of mixed LLM and HMS traffic on the shared stack, 0
/// errors expected ([`soak_traffic`]).
pub(crate) async fn soak(s: &Settings, sh: &Shared) -> anyhow::Result<Value> {
    eprintln!("scenario 7: soak…");
    let path = hms_path("02_patient.detail.json");
    let body = std::fs::read(
        paths::catalog()
            .join("hms_samples")
            .join("02_patient.detail.json"),
    )?;
    sh.stack.hms.set(&path, Canned::json(body));
    let hms_req = Req::get(&path, "soak");
    soak_traffic(&sh.stack, &sh.warm, &hms_req, 4, s.soak_secs).await
}

/// Scenario 7's section of `RESULTS.md`.
pub(crate) fn soak_markdown(k: &Value) -> String {
    format!(
        "Soak: {} s of mixed traffic (catalog LLM request and HMS GET alternating, {} closed-loop clients): {} requests, {} req/s, {} errors; RSS before → after: Envoy {} → {} KiB, control {} → {} KiB.\n",
        k["seconds"], k["connections"], k["requests"], f(&k["rps"]), k["errors"], k["rss_kib_before"]["envoy"],
        k["rss_kib_after"]["envoy"], k["rss_kib_before"]["control"], k["rss_kib_after"]["control"]
    )
}

/// A soak of mixed traffic through keyhole, `conns` closed-loop
/// clients for `secs` seconds, alternating the catalog LLM request and an HMS
/// sample GET (every client its own session), with Envoy's and control's RSS
/// before and after. Every answer that is not a 200 is an error.
async fn soak_traffic(
    stack: &Stack,
    llm: &Req,
    hms: &Req,
    conns: usize,
    secs: u64,
) -> anyhow::Result<Value> {
    let rss = || {
        json!({"envoy": rss_kib(stack.envoy.child.id()),
               "control": rss_kib(stack.control.as_ref().and_then(|c| c.child.id()))})
    };
    let before = rss();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for worker in 0..conns {
        let (k, h) = (stack.envoy.llm_url(), stack.envoy.hms_url());
        let (mut llm, mut hms) = (llm.clone(), hms.clone());
        for r in [&mut llm, &mut hms] {
            r.headers.retain(|(name, _)| name != "x-keyhole-session");
            r.headers
                .push(("x-keyhole-session".into(), format!("soak-{worker}")));
        }
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let (mut ok, mut errors, mut i) = (0u64, 0u64, 0u64);
            while Instant::now() < deadline {
                let (base, r) = if i % 2 == 0 { (&k, &llm) } else { (&h, &hms) };
                i += 1;
                match send(&client, base, r).await {
                    Ok((_, 200, _)) => ok += 1,
                    _ => errors += 1,
                }
            }
            (ok, errors)
        }));
    }
    let (mut ok, mut errors) = (0u64, 0u64);
    for t in tasks {
        let (o, e) = t.await?;
        ok += o;
        errors += e;
    }
    Ok(
        json!({"seconds": secs, "connections": conns, "requests": ok + errors, "errors": errors,
              "rps": (ok + errors) as f64 / secs as f64, "rss_kib_before": before, "rss_kib_after": rss()}),
    )
}
