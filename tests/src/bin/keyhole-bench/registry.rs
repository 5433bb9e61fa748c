//! Large registries: scenario 6 (resolve latency at 100 … 20,000 tools on
//! each vector-store backend) and scenario 8 (20,000 tools through Envoy),
//! on a fake embedder that answers at once (`keyhole_testkit::embedder`,
//! hashed vectors): thousands of synthetic tools would take the real
//! embedder minutes to embed.

use crate::measure::{rss_kib, send, summarize, Lat, Req};
use crate::report::f;
use crate::scenarios::Settings;
use anyhow::Context as _;
use keyhole_core::proto::tools::{descriptors_digest, ResolveRequest, ToolDescriptor};
use keyhole_core::proto::turn::{TurnRequest, TURN_PATH};
use keyhole_core::Phase;
use keyhole_e2e::control::{self, Control};
use keyhole_e2e::{Stack, StackOptions};
use keyhole_testkit::embedder::{FakeEmbedder, Options, Vectors};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// The fake embedder of these scenarios: hashed vectors of 384 dimensions.
async fn hash_embedder() -> anyhow::Result<FakeEmbedder> {
    Ok(FakeEmbedder::start(Options {
        vectors: Vectors::Hashed,
        dim: 384,
        refuse_first: 0,
    })
    .await?)
}

/// `n` synthetic tools, their names and descriptions drawn from a small vocabulary.
fn synthetic_registry(n: usize) -> Vec<ToolDescriptor> {
    const WORDS: &[&str] = &[
        "patient",
        "appointment",
        "invoice",
        "lab",
        "order",
        "note",
        "vitals",
        "record",
        "search",
        "create",
        "update",
        "list",
        "cancel",
        "schedule",
        "report",
        "export",
        "allergy",
        "medication",
        "referral",
        "document",
    ];
    (0..n)
        .map(|i| {
            let w = |k: usize| WORDS[(i / (k + 1) + k * 7) % WORDS.len()];
            ToolDescriptor {
                name: format!("synthetic__{}__{}__{i}", w(0), w(1)),
                description: format!("{} the {} {} for a {} ({i}).", w(2), w(3), w(4), w(5)),
                parameters: String::new(),
            }
        })
        .collect()
}

/// `n` sequential `/v1/resolve` calls over `socket`; fails on any answer not 200.
pub(crate) async fn resolve_over_socket(
    socket: &Path,
    req: &ResolveRequest,
    n: usize,
) -> anyhow::Result<Lat> {
    let body = serde_json::to_string(req)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let resp = control::request(socket, "POST", "/v1/resolve", Some(&body)).await?;
        v.push(started.elapsed());
        anyhow::ensure!(
            resp.starts_with("HTTP/1.1 200"),
            "resolve failed: {}",
            resp.lines().next().unwrap_or("")
        );
    }
    Ok(summarize(v))
}

/// One kept-alive HTTP/1.1 connection to control's socket, as the filter
/// reaches control (Envoy keeps its connections to the control cluster
/// open): each call's own latency, without a connection set up per call.
pub(crate) struct KeptAlive {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<hyper::body::Bytes>>,
}

impl KeptAlive {
    pub(crate) async fn connect(socket: &Path) -> anyhow::Result<Self> {
        let stream = tokio::net::UnixStream::connect(socket).await?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(KeptAlive { sender })
    }

    /// One call: its latency (from sending to the last byte of the answer)
    /// and the answer, which must be 200.
    pub(crate) async fn call(
        &mut self,
        method: hyper::Method,
        path: &str,
        body: hyper::body::Bytes,
    ) -> anyhow::Result<(std::time::Duration, hyper::body::Bytes)> {
        use http_body_util::BodyExt as _;
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "keyhole")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(body))?;
        // The connection takes the next request once the last answer is
        // read (HTTP/1.1: one at a time).
        self.sender.ready().await?;
        let started = Instant::now();
        let resp = self.sender.send_request(request).await?;
        let status = resp.status();
        let answer = resp.into_body().collect().await?.to_bytes();
        let took = started.elapsed();
        anyhow::ensure!(status == 200, "{path} failed: {status}");
        Ok((took, answer))
    }
}

/// `/v1/resolve` with `req` `n` times over one [`KeptAlive`] connection.
/// Before the timed calls it waits (up to 120 s) for an answer ranked with
/// vectors, so a registry still being indexed is not timed as lexical
/// answers; the second value is the source of the last answer.
pub(crate) async fn resolve_kept_alive(
    socket: &Path,
    req: &ResolveRequest,
    n: usize,
) -> anyhow::Result<(Lat, String)> {
    let body = serde_json::to_vec(req)?;
    kept_alive(socket, "/v1/resolve", body, n, |a| &a["source"]).await
}

/// `POST /v2/turn` `n` times over one [`KeptAlive`] connection, as the
/// filter asks on every LLM turn (the prompt's ids and the turn together),
/// after waiting, as [`resolve_kept_alive`] does, for answers ranked with
/// vectors; with the source of the last answer.
pub(crate) async fn turn_kept_alive(
    socket: &Path,
    req: &TurnRequest,
    n: usize,
) -> anyhow::Result<(Lat, String)> {
    let body = serde_json::to_vec(req)?;
    kept_alive(socket, TURN_PATH, body, n, |a| {
        &a["resolve"]["answer"]["source"]
    })
    .await
}

/// `POST path` with `body` `n` times over one [`KeptAlive`] connection,
/// once the answers' `source` (read by `source`) says `retrieval` (for at
/// most two minutes); the timings and the last answer's source.
async fn kept_alive(
    socket: &Path,
    path: &str,
    body: Vec<u8>,
    n: usize,
    source: fn(&serde_json::Value) -> &serde_json::Value,
) -> anyhow::Result<(Lat, String)> {
    let mut conn = KeptAlive::connect(socket).await?;
    let body = hyper::body::Bytes::from(body);
    let mut call = async || -> anyhow::Result<(std::time::Duration, String)> {
        let (took, answer) = conn.call(hyper::Method::POST, path, body.clone()).await?;
        let answer: serde_json::Value = serde_json::from_slice(&answer)?;
        Ok((took, source(&answer).as_str().unwrap_or("?").to_owned()))
    };
    let warm_until = Instant::now() + std::time::Duration::from_secs(120);
    while call().await?.1 != "retrieval" && Instant::now() < warm_until {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let mut v = Vec::with_capacity(n);
    let mut answered_by = String::new();
    for _ in 0..n {
        let (took, by) = call().await?;
        v.push(took);
        answered_by = by;
    }
    Ok((summarize(v), answered_by))
}

/// `GET /healthz` `n` times over one [`KeptAlive`] connection: the round
/// trip over the socket with next to no work behind it, the floor under
/// every call the filter makes.
pub(crate) async fn healthz_kept_alive(socket: &Path, n: usize) -> anyhow::Result<Lat> {
    let mut conn = KeptAlive::connect(socket).await?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let (took, _) = conn
            .call(hyper::Method::GET, "/healthz", hyper::body::Bytes::new())
            .await?;
        v.push(took);
    }
    Ok(summarize(v))
}

/// The vector-store backends control can run on, as `keyhole serve` arguments.
fn backends() -> anyhow::Result<Vec<(&'static str, Vec<String>)>> {
    // The Qdrant server `scripts/with-services.sh` starts (the one `make test` uses).
    let qdrant = std::env::var("KEYHOLE_TEST_QDRANT_URL")
        .context("KEYHOLE_TEST_QDRANT_URL is not set: run the benchmark with `make bench` (scripts/with-services.sh starts Qdrant)")?;
    let namespace = format!("bench-{}", std::process::id());
    Ok(vec![
        ("embedded", Vec::new()),
        (
            "qdrant",
            vec![
                "--qdrant-url".into(),
                qdrant,
                "--namespace".into(),
                namespace,
            ],
        ),
    ])
}

/// control's `keyhole_control_resolves_total{source="fallback"}`.
async fn fallbacks(socket: &Path) -> anyhow::Result<u64> {
    let text = control::get(socket, "/metrics").await?;
    text.lines()
        .find_map(|l| l.strip_prefix("keyhole_control_resolves_total{source=\"fallback\"} "))
        .and_then(|v| v.trim().parse().ok())
        .context("no fallback counter in /metrics")
}

/// Scenario 6: resolve latency at 100 … 20,000 tools on each backend.
pub(crate) async fn scaling(s: &Settings) -> anyhow::Result<Value> {
    eprintln!("scenario 6: scaling…");
    let rounds = s.rounds;
    let emb = hash_embedder().await?;
    let embedded = emb.embedded.clone();
    let mut per_backend = serde_json::Map::new();
    let mut rss_20k = serde_json::Map::new();
    for (backend, args) in backends()? {
        let scale_dir = tempfile::tempdir()?;
        let scale_socket = scale_dir.path().join("c.sock");
        let mut control_args = vec!["--embedder-url".into(), emb.url.clone()];
        // A deadline no search of this scale reaches: every answer measured is a
        // real retrieval (the fallback count below checks it), not a fallback.
        control_args.extend(["--retrieval-timeout-ms".into(), "30000".into()]);
        control_args.extend(args);
        let scale_control =
            Control::start(&scale_socket, &scale_dir.path().join("data"), &control_args).await?;
        let mut scaling = Vec::new();
        // Each registry extends the previous one; only the new tools are embedded.
        let mut previous = 0usize;
        for n in [100usize, 1_000, 5_000, 20_000] {
            let req = ResolveRequest {
                session: Some(format!("scale-{n}")),
                phase: Phase::Planner,
                turn: "create an invoice for the patient".into(),
                tools: synthetic_registry(n),
                forced: Vec::new(),
                registry: None,
                tool_search: None,
                shadow: false,
            };
            // Index, then wait until every tool has been embedded once and the
            // registry is ranked by vector search.
            let before = embedded.load(std::sync::atomic::Ordering::Relaxed);
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                resolve_over_socket(&scale_socket, &req, 1).await?;
                let done = embedded.load(std::sync::atomic::Ordering::Relaxed) - before;
                let trail = control::get(&scale_socket, &format!("/v1/audit/scale-{n}")).await?;
                let hybrid = trail
                    .rsplit("\"retrieval\":")
                    .next()
                    .is_some_and(|t| t.starts_with("\"hybrid\""));
                if (done >= (n - previous) as u64 && hybrid) || Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // Every later turn names the registry by its digest, as the filter
            // does once control knows it: what is measured is the ranking, not
            // parsing and hashing the descriptors.
            let by_digest = ResolveRequest {
                registry: Some(descriptors_digest(&req.tools)),
                tools: Vec::new(),
                ..req.clone()
            };
            resolve_over_socket(&scale_socket, &by_digest, 3).await?;
            let fallbacks_before = fallbacks(&scale_socket).await?;
            let lat = resolve_over_socket(
                &scale_socket,
                &by_digest,
                if n >= 5_000 { rounds / 5 } else { rounds / 2 },
            )
            .await?;
            let fell_back = fallbacks(&scale_socket).await? - fallbacks_before;
            previous = n;
            let request_bytes = serde_json::to_vec(&req)?.len();
            let digest_bytes = serde_json::to_vec(&by_digest)?.len();
            eprintln!(
                "  {backend}, {n} tools: p50 {:.3} ms, p99 {:.3} ms ({fell_back} fallbacks)",
                lat.p50_ms, lat.p99_ms
            );
            scaling.push(
                json!({"tools": n, "resolve": lat, "request_bytes": request_bytes,
                                "request_bytes_by_digest": digest_bytes, "fallbacks": fell_back}),
            );
        }
        rss_20k.insert(backend.into(), json!(rss_kib(scale_control.child.id())));
        per_backend.insert(backend.into(), Value::Array(scaling));
    }
    Ok(
        json!({"resolve": per_backend, "control_rss_kib_after_20k": rss_20k,
              "qdrant_version": "1.18.3",
              "note": "resolve over the Unix socket, deterministic embedder (embedding excluded), warm index; \
                       qdrant: the server scripts/with-services.sh starts, over gRPC on loopback"}),
    )
}

/// Scenario 8: a 20,000-tool registry through Envoy and the filter (control on
/// the deterministic embedder): Envoy's and control's RSS after it, and the
/// bytes the filter sent control per turn (from control's counter).
pub(crate) async fn edge_at_20k(_: &Settings) -> anyhow::Result<Value> {
    eprintln!("scenario 8: 20,000 tools through Envoy…");
    let emb = hash_embedder().await?;
    let stack = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"max_body_bytes":8388608}"#.into(),
        max_body_bytes: 8 << 20,
        control_args: vec![
            "--embedder-url".into(),
            emb.url.clone(),
            "--retrieval-timeout-ms".into(),
            "30000".into(),
        ],
        ..Default::default()
    })
    .await?;
    let tools: Vec<Value> = synthetic_registry(20_000)
        .iter()
        .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description,
                          "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}))
        .collect();
    let body = serde_json::to_vec(
        &json!({"model": "m", "messages": [{"role": "user", "content": "create an invoice for the patient"}], "tools": tools}),
    )?;
    let client = reqwest::Client::new();
    let req = Req::post("/v1/chat/completions", body.clone(), "bench-20k");
    let mut statuses = Vec::new();
    let mut forwarded = 0;
    for _ in 0..5 {
        stack.llm.clear();
        statuses.push(send(&client, &stack.envoy.llm_url(), &req).await?.1);
        forwarded = stack.llm.seen().first().map_or(0, |r| r.body.len());
    }
    let metrics = control::get(&stack.socket(), "/metrics")
        .await
        .unwrap_or_default();
    let resolve_bytes: Vec<String> = metrics
        .lines()
        .filter(|l| l.contains("request_bytes") && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    Ok(
        json!({"tools": 20_000, "request_bytes": body.len(), "forwarded_bytes": forwarded, "statuses": statuses,
              "envoy_rss_kib": rss_kib(stack.envoy.child.id()),
              "control_rss_kib": rss_kib(stack.control.as_ref().and_then(|c| c.child.id())),
              "control_resolve_bytes": resolve_bytes}),
    )
}

/// Scenario 6's section of `RESULTS.md`.
pub(crate) fn scaling_markdown(v: &Value) -> String {
    let mut s = "| backend | tools | resolve p50 (ms) | resolve p99 (ms) | fallbacks | request bytes, first turn | by digest |\n|---|---|---|---|---|---|---|\n".to_owned();
    for (backend, rows) in v["resolve"].as_object().into_iter().flatten() {
        for x in rows.as_array().into_iter().flatten() {
            s += &format!(
                "| {backend} | {} | {} | {} | {} | {} | {} |\n",
                x["tools"],
                f(&x["resolve"]["p50_ms"]),
                f(&x["resolve"]["p99_ms"]),
                x["fallbacks"],
                x["request_bytes"],
                x["request_bytes_by_digest"]
            );
        }
    }
    for (backend, kib) in v["control_rss_kib_after_20k"]
        .as_object()
        .into_iter()
        .flatten()
    {
        s += &format!("\ncontrol RSS after the 20,000-tool registry ({backend}): {kib} KiB.");
    }
    s += &format!(
        "\nQdrant: {}.\n",
        v["qdrant_version"].as_str().unwrap_or("?")
    );
    s
}

/// Scenario 8's section of `RESULTS.md`.
pub(crate) fn edge_20k_markdown(e: &Value) -> String {
    format!(
        "20,000 tools through Envoy ({} B request, 5 turns, answers {}): {} B forwarded; Envoy RSS {} KiB, control RSS {} KiB; control received {}.\n",
        e["request_bytes"], e["statuses"], e["forwarded_bytes"], e["envoy_rss_kib"], e["control_rss_kib"],
        e["control_resolve_bytes"].as_array().and_then(|a| a.first()).and_then(Value::as_str).unwrap_or("?")
    )
}
