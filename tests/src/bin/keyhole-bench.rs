//! `keyhole-bench`: every figure side by side in one run (`make bench`).
//!
//! The machine is shared and noisy, so what matters is measured as a pair in
//! the same run: Envoy with keyhole against the same Envoy without it, with
//! requests interleaved so that both see the same noise. Load comes from this
//! binary's HTTP client over loopback, with bounded counts and durations.
//!
//! Writes `bench/results/latest.json` and `bench/RESULTS.md`. `--only
//! vector_share` runs scenario 9 alone and writes only
//! `bench/results/vector_share.json`; `--only scaling` prints scenario 6,
//! `--only native_rewrite` scenario 0.

use anyhow::Context as _;
use keyhole_core::alias::lastword::LastWord;
use keyhole_core::alias::{BodyKind, Epoch, ResponseScan, SessionMap, Taxonomy};
use keyhole_core::proto::tools::{descriptors_digest, ResolveRequest, ToolDescriptor};
use keyhole_core::tools::format;
use keyhole_core::Phase;
use keyhole_e2e::control::{self, Control};
use keyhole_e2e::envoy::{Envoy, EnvoyOptions};
use keyhole_e2e::fake_control::{FakeControl, Fault};
use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{paths, Stack, StackOptions};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Lat {
    n: usize,
    p50_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
}

fn summarize(mut v: Vec<Duration>) -> Lat {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at = |q: f64| {
        v.get(((v.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .map(ms)
            .unwrap_or(0.0)
    };
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().copied().map(ms).sum::<f64>() / v.len() as f64
    };
    Lat {
        n: v.len(),
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        mean_ms: mean,
    }
}

/// A pair measured in one run.
#[derive(Debug, serde::Serialize)]
struct Pair {
    with_keyhole: Lat,
    without: Lat,
    added_p50_ms: f64,
    added_p99_ms: f64,
}

fn pair(with: Vec<Duration>, without: Vec<Duration>) -> Pair {
    let (a, b) = (summarize(with), summarize(without));
    Pair {
        added_p50_ms: a.p50_ms - b.p50_ms,
        added_p99_ms: a.p99_ms - b.p99_ms,
        with_keyhole: a,
        without: b,
    }
}

/// One request: method, path, headers, body.
#[derive(Clone)]
struct Req {
    method: reqwest::Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    fn post(path: &str, body: Vec<u8>, session: &str) -> Req {
        Req {
            method: reqwest::Method::POST,
            path: path.into(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-keyhole-session".into(), session.into()),
            ],
            body,
        }
    }
    fn get(path: &str, session: &str) -> Req {
        Req {
            method: reqwest::Method::GET,
            path: path.into(),
            headers: vec![("x-keyhole-session".into(), session.into())],
            body: Vec::new(),
        }
    }
}

async fn send(
    client: &reqwest::Client,
    base: &str,
    r: &Req,
) -> anyhow::Result<(Duration, u16, usize)> {
    let mut b = client
        .request(r.method.clone(), format!("{base}{}", r.path))
        .body(r.body.clone());
    for (k, v) in &r.headers {
        b = b.header(k, v);
    }
    let started = Instant::now();
    let resp = b.send().await?;
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await?.len();
    Ok((started.elapsed(), status, bytes))
}

/// `n` rounds, each sending every request once to each side, alternating which
/// side goes first.
async fn interleaved(
    a: &str,
    b: &str,
    reqs: &[Req],
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let client = reqwest::Client::new();
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    for i in 0..n {
        for r in reqs {
            let order: [(&str, bool); 2] = if i % 2 == 0 {
                [(a, true), (b, false)]
            } else {
                [(b, false), (a, true)]
            };
            for (base, is_a) in order {
                let (d, status, _) = send(&client, base, r).await?;
                anyhow::ensure!(status < 500, "{base}{} answered {status}", r.path);
                if is_a {
                    va.push(d)
                } else {
                    vb.push(d)
                }
            }
        }
    }
    Ok((va, vb))
}

/// Requests per second with `conns` concurrent clients for `secs`.
async fn throughput(base: &str, r: &Req, conns: usize, secs: u64) -> anyhow::Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (base, r) = (base.to_owned(), r.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut done = 0u64;
            while Instant::now() < deadline {
                if let Ok((_, s, _)) = send(&client, &base, &r).await {
                    if s < 500 {
                        done += 1;
                    }
                }
            }
            done
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await?;
    }
    Ok(total as f64 / secs as f64)
}

/// Control's arguments for a stack whose control indexes the catalog
/// registry before it reports ready, so that turns are answered with
/// vectors (`x-keyhole-source: retrieval`), not lexically while it indexes.
fn indexed_catalog() -> Vec<String> {
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

/// How keyhole answered `r` (`x-keyhole-source`: `retrieval`, `lexical`, …).
async fn source_of(client: &reqwest::Client, base: &str, r: &Req) -> anyhow::Result<String> {
    let mut b = client
        .request(r.method.clone(), format!("{base}{}", r.path))
        .body(r.body.clone());
    for (k, v) in &r.headers {
        b = b.header(k, v);
    }
    let resp = b.send().await?;
    let source = resp
        .headers()
        .get("x-keyhole-source")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned();
    resp.bytes().await?;
    Ok(source)
}

/// Sends `r` until `base` answers 200 (a new stack's first turns may be
/// answered before control has indexed the registry), then five more times.
async fn warm_up(client: &reqwest::Client, base: &str, r: &Req) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(180);
    while send(client, base, r).await?.1 != 200 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{base} never answered {} with 200",
            r.path
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for _ in 0..5 {
        send(client, base, r).await?;
    }
    Ok(())
}

fn rss_kib(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(str::to_owned)
        })
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    json!({"cpu": cpu, "cores": cores})
}

/// The catalog request with `turn` as its user message.
fn with_turn(catalog: &Value, turn: &str) -> Vec<u8> {
    let mut v = catalog.clone();
    if let Some(msgs) = v["messages"].as_array_mut() {
        if let Some(user) = msgs.iter_mut().rev().find(|m| m["role"] == "user") {
            user["content"] = json!(turn);
        }
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// A synthetic HMS list body of about `target` bytes with fresh ids.
fn synthetic_hms(target: usize) -> Vec<u8> {
    let mut items = Vec::new();
    let mut size = 0;
    let mut i = 0u64;
    while size < target {
        let uuid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            i * 7919 + 1,
            i % 65536,
            i % 4096,
            (i * 3) % 4096,
            i * 104729
        );
        let item = json!({
            "id": uuid,
            "fhirId": format!("pat-{:06}", i),
            "name": {"family": "Muster", "given": ["Erika"]},
            "birthDate": "1950-01-01",
            "links": {"self": format!("/api/v2/patients/{uuid}"), "fhir": format!("https://fhir.example/Patient/pat-{:06}", i)},
            "note": format!("Seen at clinic for follow-up; record {uuid} reviewed."),
        });
        size += item.to_string().len() + 1;
        items.push(item);
        i += 1;
    }
    serde_json::to_vec(&json!({"data": items, "page": {"size": items.len()}})).unwrap_or_default()
}

/// Native core rewrite of one body repeated: scan + rewrite + verify, MB/s
/// and ms per body (see [`core_rewrite_in_turns`]).
fn core_rewrite(body: &[u8], rounds: Rounds) -> anyhow::Result<(f64, f64)> {
    let per = core_rewrite_in_turns(&[body.to_vec()], rounds)?.rewrite;
    Ok((body.len() as f64 / per / 1e6, per * 1e3))
}

/// How many timed rounds: at least `min`, and more until `seconds` have
/// passed.
#[derive(Debug, Clone, Copy)]
struct Rounds {
    min: usize,
    seconds: f64,
}

/// The seconds of one round of [`core_rewrite_in_turns`], each a median of
/// the timed rounds: the rewrite, the last word, and both (the median of
/// their sums per round, what the route pays).
#[derive(Debug, Clone, Copy)]
struct RoundCost {
    rewrite: f64,
    last_word: f64,
    both: f64,
}

impl RoundCost {
    /// The figures of a round over `bytes`: ms and MB/s of the rewrite (the
    /// names scenario 0 has always had), of the last word and of both, and
    /// the last word's ms per MB.
    fn figures(&self, bytes: usize) -> Value {
        let mbps = |s: f64| bytes as f64 / s / 1e6;
        json!({"bytes": bytes, "ms": self.rewrite * 1e3, "mb_per_s": mbps(self.rewrite),
               "last_word_ms": self.last_word * 1e3, "last_word_mb_per_s": mbps(self.last_word),
               "with_last_word_ms": self.both * 1e3, "with_last_word_mb_per_s": mbps(self.both),
               "last_word_ms_per_mb": self.last_word * 1e3 / (bytes as f64 / 1e6)})
    }
}

/// Native core work of the HMS route on several bodies taking turns, as the
/// filter does it per body: scan + rewrite + verify, then the last word
/// (`LastWord::new` over the scan's raw ids and the aliases, `check_body` of
/// the rewritten body; these bodies have no headers to check). The seconds
/// of one round (each body once), medians of the timed rounds after one
/// untimed warm-up. This box is shared and its speed comes and goes for
/// tenths of a second at a time: the rounds run for a while
/// (`rounds.seconds`), so that the median is what a round costs rather than
/// what a slow spell made of the few rounds it covered. Unlike one body
/// repeated, no body finds the caches and branch predictors trained on
/// itself. Each body's aliases, control's answer, come from a session map of
/// their own (one per body, as a fresh session), encoded once outside the
/// timing: control encodes across a socket, not in the filter. A body the
/// last word would withhold is an error, not a figure.
fn core_rewrite_in_turns(bodies: &[Vec<u8>], rounds: Rounds) -> anyhow::Result<RoundCost> {
    let tax = Taxonomy::default();
    let root = tax.kind_for_path("/api/v2/patients");
    let mut answers = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.iter().enumerate() {
        let mut scan = ResponseScan::new(&tax);
        scan.add(body, BodyKind::Json, root)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut session = SessionMap::with_epoch(Epoch::from_seed(i as u64 + 1));
        answers.push(
            session
                .encode(&tax, scan.ids())
                .map_err(|e| anyhow::anyhow!("body {i}: {e}"))?
                .aliases,
        );
    }
    let (mut rewrite, mut last_word, mut both) = (Vec::new(), Vec::new(), Vec::new());
    let begun = Instant::now();
    for round in 0.. {
        if round > rounds.min && begun.elapsed().as_secs_f64() >= rounds.seconds {
            break;
        }
        let (mut rw, mut lw) = (Duration::ZERO, Duration::ZERO);
        for (i, (body, aliases)) in bodies.iter().zip(&answers).enumerate() {
            let started = Instant::now();
            let mut scan = ResponseScan::new(&tax);
            let part = scan
                .add(body, BodyKind::Json, root)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let out = scan
                .rewrite(part, body, aliases)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let rewritten = Instant::now();
            let word = LastWord::new(
                &tax,
                scan.ids().iter().map(|id| id.value.as_str()),
                aliases.iter().map(String::as_str),
            );
            let found = std::hint::black_box(word.check_body(std::hint::black_box(&out)));
            lw += rewritten.elapsed();
            rw += rewritten - started;
            if let Some(found) = found {
                anyhow::bail!(
                    "the last word withholds body {i}: {} in the {}",
                    found.reason.as_str(),
                    found.place.as_str()
                );
            }
        }
        if round > 0 {
            rewrite.push(rw.as_secs_f64());
            last_word.push(lw.as_secs_f64());
            both.push((rw + lw).as_secs_f64());
        }
    }
    Ok(RoundCost {
        rewrite: percentile(rewrite, 0.5),
        last_word: percentile(last_word, 0.5),
        both: percentile(both, 0.5),
    })
}

/// An OpenAI-compatible embedder that answers deterministic vectors at once:
/// the far side of the network for the scaling runs, where thousands of
/// synthetic tools would take the real embedder minutes to embed.
async fn hash_embedder() -> anyhow::Result<(
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
)> {
    use axum::routing::post;
    use std::sync::atomic::{AtomicU64, Ordering};
    let count = std::sync::Arc::new(AtomicU64::new(0));
    let c = count.clone();
    let app = axum::Router::new().route(
        "/v1/embeddings",
        post(move |axum::Json(req): axum::Json<Value>| {
            let c = c.clone();
            async move {
                let inputs: Vec<String> = match &req["input"] {
                    Value::String(s) => vec![s.clone()],
                    Value::Array(a) => a
                        .iter()
                        .map(|v| v.as_str().unwrap_or("").to_owned())
                        .collect(),
                    _ => Vec::new(),
                };
                c.fetch_add(inputs.len() as u64, Ordering::Relaxed);
                let data: Vec<Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, text)| {
                        let mut state: u64 = 1469598103934665603;
                        for b in text.bytes() {
                            state = (state ^ u64::from(b)).wrapping_mul(1099511628211);
                        }
                        let v: Vec<f32> = (0..384)
                            .map(|_| {
                                state ^= state << 13;
                                state ^= state >> 7;
                                state ^= state << 17;
                                (state % 2000) as f32 / 1000.0 - 1.0
                            })
                            .collect();
                        json!({"index": i, "embedding": v})
                    })
                    .collect();
                axum::Json(json!({"data": data, "model": "hash"}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, count))
}

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
            }
        })
        .collect()
}

async fn resolve_over_socket(socket: &Path, req: &ResolveRequest, n: usize) -> anyhow::Result<Lat> {
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

/// The box's load average over the last minute (`/proc/loadavg`).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What the process's allocator does with the memory a round freed.
#[derive(Debug, Clone, Copy)]
enum Heap {
    /// glibc's defaults: the top of the heap is given back to the kernel
    /// once enough of it is free, so a round that frees a few MB faults the
    /// same pages in, zeroed, on the next round (a sixth of a 1 MB round).
    Returned,
    /// Kept for the next round, as the filter's heap is: a wasm module's
    /// linear memory only grows, so after its first responses a worker
    /// rewrites in pages it already has.
    Kept,
}

/// Makes the allocator keep freed memory ([`Heap::Kept`]) or go back to
/// giving it back at glibc's initial thresholds ([`Heap::Returned`]).
fn set_heap(heap: Heap) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let (trim, mmap) = match heap {
            Heap::Kept => (1 << 30, 32 << 20),
            Heap::Returned => (128 << 10, 128 << 10),
        };
        // SAFETY: mallopt only changes the allocator's thresholds; it is
        // called from the bench's main thread before any other is started.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = heap;
}

/// Scenario 0: the native HMS rewrite (scan + rewrite + verify) and the last
/// word after it, each timed apart in the same rounds, one synthetic body
/// repeated at 10 KB … 1 MB and the catalog's samples taking turns. It
/// runs first, before any server of the bench has work: after scenario 6 the
/// vector store still indexes 20,000 points, and after scenario 9 the embedder
/// still works through its backlog, each on one of this box's two cores. The
/// load average when it starts goes with the figures.
///
/// Each figure is measured twice, in one run: with the memory a round frees
/// kept for the next ([`Heap::Kept`], as in the filter), and with glibc's
/// default of giving it back to the kernel ([`Heap::Returned`]), which adds
/// the page faults of a heap that shrinks and grows again every round.
fn native_rewrite() -> anyhow::Result<Value> {
    eprintln!("scenario 0: native HMS rewrite…");
    let load = load_average();
    let mut samples = Vec::new();
    for entry in std::fs::read_dir(paths::catalog().join("hms_samples"))? {
        samples.push(std::fs::read(entry?.path())?);
    }
    let bodies: Vec<Vec<u8>> = [10 * 1024, 100 * 1024, 1 << 20]
        .into_iter()
        .map(synthetic_hms)
        .collect();
    let measure = || -> anyhow::Result<(Vec<Value>, Value)> {
        let mut rewrite = Vec::new();
        for body in &bodies {
            let cost = core_rewrite_in_turns(
                std::slice::from_ref(body),
                Rounds {
                    min: 60,
                    seconds: 2.0,
                },
            )?;
            rewrite.push(cost.figures(body.len()));
        }
        let bytes = samples.iter().map(Vec::len).sum::<usize>();
        let mut in_turns = core_rewrite_in_turns(
            &samples,
            Rounds {
                min: 1000,
                seconds: 2.0,
            },
        )?
        .figures(bytes);
        in_turns["bodies"] = json!(samples.len());
        Ok((rewrite, in_turns))
    };
    // The process starts with glibc's defaults: measured first, then kept.
    let (returned, returned_in_turns) = measure()?;
    set_heap(Heap::Kept);
    let kept = measure();
    set_heap(Heap::Returned);
    let (rewrite, in_turns) = kept?;
    Ok(
        json!({"hms_core_rewrite": rewrite, "hms_core_rewrite_samples_in_turns": in_turns,
              "heap_returned": {"hms_core_rewrite": returned, "hms_core_rewrite_samples_in_turns": returned_in_turns},
              "load_average_1min_at_start": load}),
    )
}

/// Scenario 6: resolve latency at 100 … 20,000 tools on each backend.
async fn scaling(rounds: usize) -> anyhow::Result<Value> {
    eprintln!("scenario 6: scaling…");
    let (emb, embedded) = hash_embedder().await?;
    let mut per_backend = serde_json::Map::new();
    let mut rss_20k = serde_json::Map::new();
    for (backend, args) in backends()? {
        let scale_dir = tempfile::tempdir()?;
        let scale_socket = scale_dir.path().join("c.sock");
        let mut control_args = vec!["--embedder-url".into(), format!("http://{emb}")];
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

/// Scenario 7: a soak of mixed traffic through keyhole, `conns` closed-loop
/// clients for `secs` seconds, alternating the catalog LLM request and an HMS
/// sample GET (every client its own session), with Envoy's and control's RSS
/// before and after. Every answer that is not a 200 is an error.
async fn soak(
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

/// Scenario 8: a 20,000-tool registry through Envoy and the filter (control on
/// the deterministic embedder): Envoy's and control's RSS after it, and the
/// bytes the filter sent control per turn (from control's counter).
async fn edge_at_20k() -> anyhow::Result<Value> {
    eprintln!("scenario 8: 20,000 tools through Envoy…");
    let (emb, _) = hash_embedder().await?;
    let stack = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000,"max_body_bytes":8388608}"#.into(),
        max_body_bytes: 8 << 20,
        control_args: vec![
            "--embedder-url".into(),
            format!("http://{emb}"),
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

/// Session counts scenario 9 measures at: one agent alone, a few, many, and
/// far more than the embedder can serve within any deadline measured.
const VECTOR_SHARE_SESSIONS: [usize; 4] = [1, 4, 16, 64];

/// Deadlines scenario 9 compares besides control's default (in ms): 400, the
/// largest that leaves 100 ms under the filter's default `timeout_ms` (500),
/// and two that need the filter's `timeout_ms` raised above them.
const VECTOR_SHARE_CANDIDATES_MS: [u64; 3] = [400, 1000, 2500];

/// The rule that picks control's default turn deadline from scenario 9: the
/// smallest deadline measured whose vector share at this many concurrent
/// sessions is at least [`VECTOR_SHARE_TARGET`].
const VECTOR_SHARE_RULE_SESSIONS: usize = 4;

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

/// One turn of scenario 9: its latency, status and `x-keyhole-source`.
struct TurnOutcome {
    latency: Duration,
    status: u16,
    source: String,
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
        } = turns.clone();
        let session = format!("vector-share-{label}-{s}");
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut out = Vec::new();
            while Instant::now() < deadline && out.len() < max_turns {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let turn = format!("{} (ref. {n})", queries[n % queries.len()]);
                let body = template.replacen(VECTOR_SHARE_MARK, &serde_json::to_string(&turn)?, 1);
                let started = Instant::now();
                let sent = client
                    .post(format!("{base}/v1/chat/completions"))
                    .header("content-type", "application/json")
                    .header("x-keyhole-session", &session)
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
                out.push(TurnOutcome {
                    latency: started.elapsed(),
                    status,
                    source,
                });
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

/// Scenario 9: the share of turns answered with vectors (`x-keyhole-source:
/// retrieval`) rather than lexically, per turn deadline
/// (`--retrieval-timeout-ms`) and number of concurrent sessions, on the real
/// stack: Envoy with the filter, control over its socket, the real embedder.
/// Each deadline gets a control of its own (the setting applies at start) on
/// the same socket and data directory, started with the catalog as its
/// `--registry`, so it is healthy only once the registry is indexed. The
/// filter's `timeout_ms` is far above every deadline, so control's deadline
/// is what decides.
async fn vector_share(secs: u64) -> anyhow::Result<Value> {
    eprintln!("scenario 9: vector share per turn deadline and sessions…");
    let default_ms = default_retrieval_timeout_ms()?;
    // The box is shared: its load when the scenario starts goes with the figures.
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut deadlines = vec![default_ms];
    deadlines.extend(
        VECTOR_SHARE_CANDIDATES_MS
            .iter()
            .copied()
            .filter(|&d| d != default_ms),
    );
    deadlines.sort_unstable();
    let registry = paths::catalog().join("openai_request.json");
    let catalog: Value = serde_json::from_slice(&std::fs::read(&registry)?)?;
    let template = String::from_utf8(with_turn(&catalog, "@@keyhole-bench-turn@@"))?;
    anyhow::ensure!(
        template.matches(VECTOR_SHARE_MARK).count() == 1,
        "the catalog request has no single user turn"
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
        queries: queries.into(),
        next: Default::default(),
    };
    let probe_client = reqwest::Client::new();
    let mut rows = Vec::new();
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
        for sessions in VECTOR_SHARE_SESSIONS {
            let before = resolves_by_source(&stack.socket()).await?;
            let outcomes = vector_share_cell(
                &turns,
                &format!("{deadline}-{sessions}"),
                sessions,
                secs,
                usize::MAX,
            )
            .await?;
            let after = resolves_by_source(&stack.socket()).await?;
            let backlog = embedder_drained(&probe_client).await?;
            let mut sources: BTreeMap<String, u64> = BTreeMap::new();
            for t in &outcomes {
                let key = if t.status == 200 {
                    t.source.clone()
                } else {
                    format!("status {}", t.status)
                };
                *sources.entry(key).or_default() += 1;
            }
            let vectors = sources.get("retrieval").copied().unwrap_or(0);
            let share = vectors as f64 / outcomes.len().max(1) as f64;
            let lat = summarize(outcomes.iter().map(|t| t.latency).collect());
            let control_counts: BTreeMap<&String, u64> = after
                .iter()
                .map(|(k, v)| (k, v.saturating_sub(before.get(k).copied().unwrap_or(0))))
                .collect();
            eprintln!(
                "  deadline {deadline} ms, {sessions} sessions: {} turns, vector share {share:.3}, p50 {:.1} ms, p99 {:.1} ms, embedder backlog after {:.1} s",
                outcomes.len(),
                lat.p50_ms,
                lat.p99_ms,
                backlog.as_secs_f64()
            );
            rows.push(json!({"deadline_ms": deadline, "sessions": sessions, "turns": outcomes.len(),
                             "vector_share": share, "sources": sources, "latency": lat,
                             "control_resolves": control_counts, "embedder_backlog_after_s": backlog.as_secs_f64()}));
        }
    }
    drop(stack);
    let chosen = deadlines.iter().copied().find(|&d| {
        rows.iter().any(|r| {
            r["deadline_ms"] == d
                && r["sessions"] == VECTOR_SHARE_RULE_SESSIONS
                && r["vector_share"]
                    .as_f64()
                    .is_some_and(|s| s >= VECTOR_SHARE_TARGET)
        })
    });
    Ok(json!({
        "date": utc_date(), "machine": machine(), "loadavg_at_start": loadavg.trim(), "default_deadline_ms": default_ms, "deadlines_ms": deadlines,
        "sessions": VECTOR_SHARE_SESSIONS, "seconds_per_cell": secs, "filter_timeout_ms": filter_timeout_ms,
        "rows": rows,
        "rule": format!("the smallest deadline measured whose vector share at {VECTOR_SHARE_RULE_SESSIONS} concurrent sessions is at least {VECTOR_SHARE_TARGET}"),
        "rule_picks_ms": chosen,
        "note": "closed loop: every session sends its next turn as soon as the last is answered (echo LLM, no think time); \
                 turns are the catalog's 120 labelled dev turns, each with a unique ` (ref. n)` after it; \
                 vector share = turns answered `x-keyhole-source: retrieval` / all turns"
    }))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::var("KEYHOLE_BENCH_QUICK").is_ok();
    let rounds = if quick { 30 } else { 300 };
    let vector_share_secs = if quick { 3 } else { 8 };
    // One scenario alone: `--only NAME` or `KEYHOLE_BENCH_ONLY=NAME`.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only = match args.as_slice() {
        [] => std::env::var("KEYHOLE_BENCH_ONLY").ok(),
        [flag, name] if flag == "--only" => Some(name.clone()),
        _ => anyhow::bail!("usage: keyhole-bench [--only native_rewrite|scaling|vector_share]"),
    };
    match only.as_deref() {
        None => {}
        // Scenario 6 alone, printed, nothing written.
        Some("scaling") => {
            println!("{}", serde_json::to_string_pretty(&scaling(rounds).await?)?);
            return Ok(());
        }
        // Scenario 0 alone, printed, nothing written.
        Some("native_rewrite") => {
            println!("{}", serde_json::to_string_pretty(&native_rewrite()?)?);
            return Ok(());
        }
        // Scenario 9 alone: printed and written to `bench/results/vector_share.json`
        // (`latest.json` and `RESULTS.md` are left as they are).
        Some("vector_share") => {
            let figures = vector_share(vector_share_secs).await?;
            let out = paths::repo().join("bench/results");
            std::fs::create_dir_all(&out)?;
            let text = serde_json::to_string_pretty(&figures)?;
            std::fs::write(out.join("vector_share.json"), format!("{text}\n"))?;
            println!("{text}");
            println!("{}", vector_share_markdown(&figures));
            return Ok(());
        }
        Some(other) => anyhow::bail!(
            "no scenario {other:?} to run alone (native_rewrite, scaling, vector_share)"
        ),
    }
    let mut results: BTreeMap<&str, Value> = BTreeMap::new();
    results.insert("machine", machine());
    results.insert("native_rewrite", native_rewrite()?);

    eprintln!("starting keyhole (Envoy + filter + control) and plain Envoy…");
    let stack = Stack::start(StackOptions {
        llm_filter_config: r#"{"mode":"llm","timeout_ms":30000}"#.into(),
        // The filter's default limit is 1 MiB; scenario 3 sends a ~1 MB body.
        hms_filter_config: r#"{"mode":"hms","timeout_ms":30000,"max_body_bytes":4194304}"#.into(),
        control_args: indexed_catalog(),
        ..Default::default()
    })
    .await?;
    let base_dir = tempfile::tempdir()?;
    let baseline = Envoy::start(EnvoyOptions {
        dir: base_dir.path().to_owned(),
        socket: base_dir.path().join("unused.sock"),
        llm_upstream: stack.llm.addr,
        hms_upstream: stack.hms.addr,
        llm_filter_config: String::new(),
        hms_filter_config: String::new(),
        max_body_bytes: 4 * 1024 * 1024,
        baseline: true,
    })
    .await?;
    let (k, b) = (stack.envoy.llm_url(), baseline.llm_url());
    let catalog_bytes = std::fs::read(paths::catalog().join("openai_request.json"))?;
    let catalog: Value = serde_json::from_slice(&catalog_bytes)?;

    // 1. LLM route, catalog request, warm query embedding.
    eprintln!("scenario 1: catalog request, warm…");
    let warm = Req::post("/v1/chat/completions", catalog_bytes.clone(), "bench");
    let client = reqwest::Client::new();
    warm_up(&client, &k, &warm).await.context("keyhole")?;
    let warm_source = source_of(&client, &k, &warm).await?;
    eprintln!("  answered by: {warm_source}");
    let (a, z) = interleaved(&k, &b, std::slice::from_ref(&warm), rounds).await?;
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
    warm_up(&client, &k_off, &warm)
        .await
        .context("keyhole, aliases off")?;
    let (a, z) = interleaved(&k, &k_off, std::slice::from_ref(&warm), rounds).await?;
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
    warm_up(&client, &k_instant, &warm)
        .await
        .context("keyhole, control answering at once")?;
    let (a, z) = interleaved(&k_instant, &b, std::slice::from_ref(&warm), rounds).await?;
    let filter_pair = pair(a, z);
    eprintln!(
        "  filter + one callout: added p50 {:.3} ms, p99 {:.3} ms",
        filter_pair.added_p50_ms, filter_pair.added_p99_ms
    );
    drop(instant);
    // Throughput at 1, 4 and 16 connections, keyhole and plain Envoy side by side.
    let mut tput = Vec::new();
    for conns in [1usize, 4, 16] {
        let with = throughput(&k, &warm, conns, if quick { 2 } else { 5 }).await?;
        let without = throughput(&b, &warm, conns, if quick { 2 } else { 5 }).await?;
        tput.push(json!({"connections": conns, "with_keyhole": with, "without": without, "share": with / without.max(1e-9)}));
    }
    // Cold: a new turn each time, so the query is embedded on the request path.
    eprintln!("scenario 1: catalog request, cold query embedding…");
    let cold: Vec<Req> = (0..if quick { 5 } else { 30 })
        .map(|i| {
            Req::post(
                "/v1/chat/completions",
                with_turn(
                    &catalog,
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
    let cold_source = source_of(&client, &k, &cold[0]).await?;
    results.insert(
        "llm_catalog",
        json!({"warm": warm_pair, "cold_query_embedding": cold_pair,
               "source": {"warm": warm_source, "cold": cold_source},
               "alias_pass": alias_pair, "filter_and_callout": filter_pair, "throughput_rps": tput}),
    );

    // 2. Non-LLM traffic through the same listener.
    eprintln!("scenario 2: GET passthrough…");
    let get = Req::get("/v1/models", "bench");
    let (a, z) = interleaved(&k, &b, std::slice::from_ref(&get), rounds * 3).await?;
    results.insert("llm_get", json!(pair(a, z)));

    // 3. HMS route: every sample and a ~1 MB body.
    eprintln!("scenario 3: HMS route…");
    let mut hms = Vec::new();
    let samples_dir = paths::catalog().join("hms_samples");
    let mut samples: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in std::fs::read_dir(&samples_dir)? {
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
    samples.push(("synthetic-30KB.json".into(), synthetic_hms(30 << 10)));
    samples.push(("synthetic-1MB.json".into(), synthetic_hms(1 << 20)));
    let (hk, hb) = (stack.envoy.hms_url(), baseline.hms_url());
    for (name, body) in &samples {
        // The synthetic body is a patient list: served where a patient list lives,
        // so the path names its kind (at an unknown path its ids are ambiguous and
        // the filter refuses them).
        let path = if name.starts_with("synthetic") {
            "/api/v2/patients".to_owned()
        } else {
            format!("/api/v2/bench/{}", name.trim_end_matches(".json"))
        };
        stack.hms.set(&path, Canned::json(body.clone()));
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
    // HMS route throughput: the patient search sample at 4 connections.
    let search = Req::get("/api/v2/bench/01_patients.search", "bench-hms");
    let hms_tput = json!({"sample": "01_patients.search.json", "connections": 4,
        "with_keyhole": throughput(&hk, &search, 4, if quick { 2 } else { 5 }).await?,
        "without": throughput(&hb, &search, 4, if quick { 2 } else { 5 }).await?});
    results.insert("hms_throughput_rps", hms_tput);
    results.insert("hms", json!(hms));

    // 5. Prompt bytes over the catalog dev turns.
    eprintln!("scenario 5: prompt bytes over the dev turns…");
    let queries = std::fs::read_to_string(paths::catalog().join("queries.dev.jsonl"))?;
    let (mut bytes_out, mut tools_out) = (Vec::new(), Vec::new());
    stack.llm.clear();
    for (i, line) in queries
        .lines()
        .enumerate()
        .take(if quick { 20 } else { usize::MAX })
    {
        let q: Value = serde_json::from_str(line)?;
        let body = with_turn(&catalog, q["query"].as_str().unwrap_or(""));
        let (_, status, _) = send(
            &client,
            &k,
            &Req::post("/v1/chat/completions", body, &format!("dev-{i}")),
        )
        .await?;
        anyhow::ensure!(status == 200, "dev turn {i}: {status}");
    }
    for r in stack.llm.seen() {
        bytes_out.push(r.body.len() as f64);
        let parsed =
            format::parse("/v1/chat/completions", &r.body).map_err(|e| anyhow::anyhow!("{e}"))?;
        tools_out.push(parsed.map_or(0, |p| p.tools.len()) as f64);
    }
    let n = bytes_out.len().max(1) as f64;
    results.insert(
        "prompt_bytes",
        json!({"turns": bytes_out.len(), "bytes_in": catalog_bytes.len(), "tools_in": 108,
               "bytes_out_mean": bytes_out.iter().sum::<f64>() / n, "bytes_out_p95": percentile(bytes_out.clone(), 0.95),
               "tools_out_mean": tools_out.iter().sum::<f64>() / n, "tools_out_max": percentile(tools_out, 1.0)}),
    );

    // 4. control alone, and memory.
    eprintln!("scenario 4: control alone…");
    let parsed = format::parse("/v1/chat/completions", &catalog_bytes)
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
    };
    let socket = stack.socket();
    let resolve_108 = resolve_over_socket(&socket, &catalog_req, rounds).await?;
    // Bytes filter→control per turn: the first turn carries the registry, the
    // next ones name it by digest.
    let catalog_by_digest = ResolveRequest {
        registry: Some(descriptors_digest(&catalog_req.tools)),
        tools: Vec::new(),
        ..catalog_req.clone()
    };
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
    results.insert(
        "control",
        json!({"resolve_108_tools": resolve_108, "turn_bytes_108_tools": turn_bytes_108,
               "alias_encode_ids_per_s": encode_ops, "alias_decode_ids_per_s": decode_ops,
               "note": "one HTTP/1.1 connection per call over the Unix socket, batches of 10 ids"}),
    );
    results.insert(
        "rss_kib",
        json!({"control": rss_kib(stack.control.as_ref().and_then(|c| c.child.id())),
               "envoy_with_keyhole": rss_kib(stack.envoy.child.id()),
               "envoy_without": rss_kib(baseline.child.id())}),
    );

    // 7. A soak of mixed LLM and HMS traffic, 0 errors expected.
    eprintln!("scenario 7: soak…");
    stack.hms.set(
        "/api/v2/bench/02_patient.detail",
        Canned::json(std::fs::read(samples_dir.join("02_patient.detail.json"))?),
    );
    let hms_req = Req::get("/api/v2/bench/02_patient.detail", "soak");
    results.insert(
        "soak",
        soak(&stack, &warm, &hms_req, 4, if quick { 10 } else { 60 }).await?,
    );
    drop(stack);
    drop(baseline);

    // 8. 20,000 tools through Envoy: memory and bytes.
    results.insert("edge_20k", edge_at_20k().await?);

    // 9. The share of turns answered with vectors per turn deadline and sessions.
    results.insert("vector_share", vector_share(vector_share_secs).await?);

    // 6. Scaling: resolve at 100 … 20,000 tools on each vector-store backend
    // (deterministic embedder), and the core HMS rewrite at 10 KB … 1 MB.
    results.insert("scaling", scaling(rounds).await?);

    let out = paths::repo().join("bench/results");
    std::fs::create_dir_all(&out)?;
    let json_text = serde_json::to_string_pretty(&results)?;
    std::fs::write(out.join("latest.json"), &json_text)?;
    let md = markdown(&results);
    std::fs::write(paths::repo().join("bench/RESULTS.md"), &md)?;
    println!("{md}");
    Ok(())
}

fn f(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.is_finite() && x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.is_finite() => format!("{x:.3}"),
        Some(_) => "∞".into(),
        None => "–".into(),
    }
}

fn markdown(r: &BTreeMap<&str, Value>) -> String {
    let m = &r["machine"];
    let mut s = format!(
        "# keyhole benchmarks\n\nMachine: {} cores, {}. Written by `make bench` (`keyhole-bench`); raw figures in `bench/results/latest.json`.\nEvery \"added\" figure is keyhole minus plain Envoy, measured interleaved in the same run.\n\n",
        m["cores"], m["cpu"].as_str().unwrap_or("?")
    );
    let l = &r["llm_catalog"];
    s += "| scenario | with keyhole p50 / p99 (ms) | plain Envoy p50 / p99 (ms) | added p50 / p99 (ms) |\n|---|---|---|---|\n";
    let row = |name: &str, p: &Value| {
        format!(
            "| {name} | {} / {} | {} / {} | {} / {} |\n",
            f(&p["with_keyhole"]["p50_ms"]),
            f(&p["with_keyhole"]["p99_ms"]),
            f(&p["without"]["p50_ms"]),
            f(&p["without"]["p99_ms"]),
            f(&p["added_p50_ms"]),
            f(&p["added_p99_ms"])
        )
    };
    let source = |which: &str| l["source"][which].as_str().unwrap_or("?").to_owned();
    s += &row(
        &format!(
            "1. LLM catalog request (84 KB), warm (answered by: {})",
            source("warm")
        ),
        &l["warm"],
    );
    s += &row(
        &format!(
            "1. LLM catalog request, cold query embedding (answered by: {})",
            source("cold")
        ),
        &l["cold_query_embedding"],
    );
    s += &row(
        "1. LLM catalog request, aliases on (vs keyhole with aliases off)",
        &l["alias_pass"],
    );
    s += &row(
        "1. LLM catalog request, filter + one callout (control answering at once, aliases off)",
        &l["filter_and_callout"],
    );
    s += &row("2. GET through the LLM listener", &r["llm_get"]);
    for h in r["hms"].as_array().into_iter().flatten() {
        if let Some(e) = h["error"].as_str() {
            s += &format!(
                "| 3. HMS {} ({} B) | failed: {e} | | |\n",
                h["sample"].as_str().unwrap_or("?"),
                h["bytes"]
            );
            continue;
        }
        s += &row(
            &format!(
                "3. HMS {} ({} B)",
                h["sample"].as_str().unwrap_or("?"),
                h["bytes"]
            ),
            &h["latency"],
        );
    }
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
    let h = &r["hms_throughput_rps"];
    s += &format!(
        "\nThroughput, HMS route ({}, {} connections): {} req/s with keyhole, {} req/s plain Envoy.\n\n",
        h["sample"].as_str().unwrap_or("?"), h["connections"], f(&h["with_keyhole"]), f(&h["without"])
    );
    let c = &r["control"];
    s += &format!(
        "control alone: `/v1/resolve` at 108 tools p50 {} ms, p99 {} ms; bytes filter→control per turn at 108 tools: first turn {} B, by digest {} B; alias encode {} ids/s, decode {} ids/s ({}).\n\n",
        f(&c["resolve_108_tools"]["p50_ms"]), f(&c["resolve_108_tools"]["p99_ms"]),
        c["turn_bytes_108_tools"]["first_turn"], c["turn_bytes_108_tools"]["by_digest"], f(&c["alias_encode_ids_per_s"]),
        f(&c["alias_decode_ids_per_s"]), c["note"].as_str().unwrap_or("")
    );
    let m = &r["rss_kib"];
    s += &format!(
        "Memory (RSS): control {} KiB; Envoy with keyhole {} KiB, plain Envoy {} KiB.\n\n",
        m["control"], m["envoy_with_keyhole"], m["envoy_without"]
    );
    let k = &r["soak"];
    s += &format!(
        "Soak: {} s of mixed traffic (catalog LLM request and HMS GET alternating, {} closed-loop clients): {} requests, {} req/s, {} errors; RSS before → after: Envoy {} → {} KiB, control {} → {} KiB.\n\n",
        k["seconds"], k["connections"], k["requests"], f(&k["rps"]), k["errors"], k["rss_kib_before"]["envoy"],
        k["rss_kib_after"]["envoy"], k["rss_kib_before"]["control"], k["rss_kib_after"]["control"]
    );
    let e = &r["edge_20k"];
    s += &format!(
        "20,000 tools through Envoy ({} B request, 5 turns, answers {}): {} B forwarded; Envoy RSS {} KiB, control RSS {} KiB; control received {}.\n\n",
        e["request_bytes"], e["statuses"], e["forwarded_bytes"], e["envoy_rss_kib"], e["control_rss_kib"],
        e["control_resolve_bytes"].as_array().and_then(|a| a.first()).and_then(Value::as_str).unwrap_or("?")
    );
    let p = &r["prompt_bytes"];
    s += &format!(
        "Prompt bytes over {} catalog dev turns: {} B in → mean {} B, p95 {} B out; tools {} in → mean {}, max {} out.\n\n",
        p["turns"], p["bytes_in"], f(&p["bytes_out_mean"]), f(&p["bytes_out_p95"]), p["tools_in"], f(&p["tools_out_mean"]), f(&p["tools_out_max"])
    );
    s += "| scaling: backend | tools | resolve p50 (ms) | resolve p99 (ms) | fallbacks | request bytes, first turn | by digest |\n|---|---|---|---|---|---|---|\n";
    for (backend, rows) in r["scaling"]["resolve"].as_object().into_iter().flatten() {
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
    for (backend, kib) in r["scaling"]["control_rss_kib_after_20k"]
        .as_object()
        .into_iter()
        .flatten()
    {
        s += &format!("\ncontrol RSS after the 20,000-tool registry ({backend}): {kib} KiB.");
    }
    s += &format!(
        "\nQdrant: {}.\n\n",
        r["scaling"]["qdrant_version"].as_str().unwrap_or("?")
    );
    s += &format!(
        "Scenario 0, run first, before any server of the bench has work (1-minute load average when it began: {}):\n\n",
        f(&r["native_rewrite"]["load_average_1min_at_start"])
    );
    let native = &r["native_rewrite"];
    let returned = &native["heap_returned"];
    s += "| HMS core rewrite (scan + rewrite + verify, native) | ms | MB/s | MB/s, heap returned each round | last word MB/s | rewrite + last word MB/s | last word ms per MB |\n|---|---|---|---|---|---|---|\n";
    let row = |x: &Value, r: &Value| {
        format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            f(&x["ms"]),
            f(&x["mb_per_s"]),
            f(&r["mb_per_s"]),
            f(&x["last_word_mb_per_s"]),
            f(&x["with_last_word_mb_per_s"]),
            f(&x["last_word_ms_per_mb"])
        )
    };
    let rows = native["hms_core_rewrite"].as_array().into_iter().flatten();
    for (i, x) in rows.enumerate() {
        s += &format!(
            "| {} B {}",
            x["bytes"],
            row(x, &returned["hms_core_rewrite"][i])
        );
    }
    let turns = &native["hms_core_rewrite_samples_in_turns"];
    s += &format!(
        "| the catalog's {} HMS samples ({} B) taking turns {}\n\
         Each of the first rows repeats one synthetic body; the samples take turns, so that no body finds the \
         caches and branch predictors trained on itself. Medians of timed rounds after a warm-up. \
         \"MB/s\": the memory a round frees is kept for the next, as in the filter, whose wasm heap only \
         grows; \"heap returned\": glibc's defaults, which give a freed heap top back to the kernel, so the \
         next round faults it in again (measured first, in the same run). The last word (`LastWord::new` over \
         the body's raw ids and aliases, then `check_body` of the rewritten body, as the filter runs it on every \
         HMS response) is timed apart from the rewrite in the same rounds; \"rewrite + last word\" is the \
         median of their sums, what the route pays.\n\n",
        turns["bodies"], turns["bytes"], row(turns, &returned["hms_core_rewrite_samples_in_turns"])
    );
    s += &vector_share_markdown(&r["vector_share"]);
    s
}

/// Scenario 9's section of `RESULTS.md`.
fn vector_share_markdown(v: &Value) -> String {
    let mut s = format!(
        "## Turns answered with vectors, per turn deadline\n\nMeasured {} ({} cores, {}): control's `--retrieval-timeout-ms` (default {} ms in the binary measured) against the share of turns answered with vectors (`x-keyhole-source: retrieval`; the rest `lexical`), each cell {} s of closed-loop sessions on the catalog request, every turn a new labelled dev turn. The last column is how long the embedder then took to answer a new text within 250 ms: a turn past its deadline is ranked lexically, but the embedder still computes the embedding nobody waits for.\n\n",
        v["date"].as_str().unwrap_or("?"), v["machine"]["cores"], v["machine"]["cpu"].as_str().unwrap_or("?"),
        v["default_deadline_ms"], v["seconds_per_cell"]
    );
    s += "| deadline (ms) | sessions | turns | vector share | p50 (ms) | p99 (ms) | sources | embedder backlog after (s) |\n|---|---|---|---|---|---|---|---|\n";
    for x in v["rows"].as_array().into_iter().flatten() {
        let sources: Vec<String> = x["sources"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            x["deadline_ms"],
            x["sessions"],
            x["turns"],
            f(&x["vector_share"]),
            f(&x["latency"]["p50_ms"]),
            f(&x["latency"]["p99_ms"]),
            sources.join(", "),
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
