//! Measuring: latency summaries and pairs (keyhole against plain Envoy in
//! the same run, interleaved), requests, throughput, the process's memory
//! and the machine.

use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Lat {
    pub(crate) n: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) mean_ms: f64,
}

/// The summary of `v`.
pub(crate) fn summarize(mut v: Vec<Duration>) -> Lat {
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
pub(crate) struct Pair {
    pub(crate) with_keyhole: Lat,
    pub(crate) without: Lat,
    pub(crate) added_p50_ms: f64,
    pub(crate) added_p99_ms: f64,
}

/// The pair of two runs measured together.
pub(crate) fn pair(with: Vec<Duration>, without: Vec<Duration>) -> Pair {
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
pub(crate) struct Req {
    pub(crate) method: reqwest::Method,
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Req {
    /// A JSON POST in `session`.
    pub(crate) fn post(path: &str, body: Vec<u8>, session: &str) -> Req {
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
    /// A GET in `session`.
    pub(crate) fn get(path: &str, session: &str) -> Req {
        Req {
            method: reqwest::Method::GET,
            path: path.into(),
            headers: vec![("x-keyhole-session".into(), session.into())],
            body: Vec::new(),
        }
    }
}

/// Sends `r` to `base`: the time to the whole answer, its status and size.
pub(crate) async fn send(
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
pub(crate) async fn interleaved(
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

/// Requests per second through `a` and through `b`, with `conns` concurrent
/// clients for `secs` each, taken in one-second slices that alternate
/// a, b, b, a, …: a machine whose speed drifts during the run moves both
/// figures alike, so their ratio is read from the same moments.
pub(crate) async fn throughput_pair(
    a: &str,
    b: &str,
    r: &Req,
    conns: usize,
    secs: u64,
) -> anyhow::Result<(f64, f64)> {
    let (bases, mut done) = ([a, b], [0u64; 2]);
    for slice in 0..secs.max(1) {
        let order = if slice % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            done[i] += completed(bases[i], r, conns, Duration::from_secs(1)).await?;
        }
    }
    let secs = secs.max(1) as f64;
    Ok((done[0] as f64 / secs, done[1] as f64 / secs))
}

/// Requests answered below 500 with `conns` concurrent clients for `span`.
async fn completed(base: &str, r: &Req, conns: usize, span: Duration) -> anyhow::Result<u64> {
    let deadline = Instant::now() + span;
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
    Ok(total)
}

/// How keyhole answered `r` (`x-keyhole-source`: `retrieval`, `lexical`, …).
pub(crate) async fn source_of(
    client: &reqwest::Client,
    base: &str,
    r: &Req,
) -> anyhow::Result<String> {
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
pub(crate) async fn warm_up(client: &reqwest::Client, base: &str, r: &Req) -> anyhow::Result<()> {
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

/// A process's resident memory (`VmRSS`) in KiB; 0 when unknown.
pub(crate) fn rss_kib(pid: Option<u32>) -> u64 {
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

/// The CPU model and core count.
pub(crate) fn machine() -> Value {
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
pub(crate) fn with_turn(catalog: &Value, turn: &str) -> Vec<u8> {
    let mut v = catalog.clone();
    if let Some(msgs) = v["messages"].as_array_mut() {
        if let Some(user) = msgs.iter_mut().rev().find(|m| m["role"] == "user") {
            user["content"] = json!(turn);
        }
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The `q` quantile of `v` (nearest rank).
pub(crate) fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// The box's load average over the last minute (`/proc/loadavg`).
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
