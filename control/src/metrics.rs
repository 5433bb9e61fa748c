//! control's own metrics, served at `GET /metrics` in the Prometheus text format.
//!
//! Requests are counted per route and status with their total duration,
//! resolves per source (retrieval, lexical or fallback) with tools in and
//! out, and the state of the configured registry's index is a gauge. No label
//! carries a session, an id or any request content.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use keyhole_core::proto::tools::Source;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Mutex;

/// Counters shared by the handlers.
/// One series of `keyhole_calls_total`: (phase, tool, covered, mode).
type CallKey = (String, String, bool, &'static str);

#[derive(Debug, Default)]
pub struct Metrics {
    /// (route, status) → (requests, seconds).
    requests: Mutex<BTreeMap<(String, u16), (u64, f64)>>,
    resolves_retrieval: AtomicU64,
    resolves_lexical: AtomicU64,
    resolves_no_turn: AtomicU64,
    resolves_fallback: AtomicU64,
    tools_in: AtomicU64,
    tools_out: AtomicU64,
    resolve_bytes: AtomicU64,
    /// Resolve requests by how their registry came: by a known digest, with
    /// its descriptors, or by an unknown digest (answered 409).
    registry_known: AtomicU64,
    registry_sent: AtomicU64,
    registry_unknown: AtomicU64,
    /// `/v2/turn` texts (a turn, a tool-search query) that could not be
    /// aliased and were ranked without their text.
    unaliased_texts: AtomicU64,
    /// (phase, tool, covered, mode) → tool calls in answers
    /// (`keyhole_calls_total`); at most [`MAX_CALL_SERIES`] series, calls
    /// past it counted under the tool `other`.
    calls: Mutex<BTreeMap<CallKey, u64>>,
}

/// Series of `keyhole_calls_total` kept before new tools count as `other`
/// (tool names are the model's: a label must not grow without bound).
pub const MAX_CALL_SERIES: usize = 4096;

/// A tool name fit for a label: at most 64 characters of `[A-Za-z0-9_.:-]`,
/// anything else `other`.
fn tool_label(name: &str) -> String {
    let fits = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
    if fits {
        name.to_owned()
    } else {
        "other".to_owned()
    }
}

/// How a resolve request named its registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistryVia {
    /// By a digest control knew.
    Known,
    /// With its descriptors.
    Sent,
    /// By a digest control did not know.
    Unknown,
}

impl Metrics {
    /// Counts one resolve.
    pub fn resolved(&self, source: Source, tools_in: usize, tools_out: usize) {
        let counter = match source {
            Source::Retrieval => &self.resolves_retrieval,
            Source::Lexical => &self.resolves_lexical,
            Source::NoTurn => &self.resolves_no_turn,
            Source::ControlFallback | Source::FilterFallback => &self.resolves_fallback,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.tools_in.fetch_add(tools_in as u64, Ordering::Relaxed);
        self.tools_out
            .fetch_add(tools_out as u64, Ordering::Relaxed);
    }

    /// Counts one resolve request's body size and how it named its registry.
    pub fn resolve_request(&self, bytes: usize, via: RegistryVia) {
        self.resolve_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        let counter = match via {
            RegistryVia::Known => &self.registry_known,
            RegistryVia::Sent => &self.registry_sent,
            RegistryVia::Unknown => &self.registry_unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a `/v2/turn` text ranked without its text: it could not be
    /// aliased.
    pub fn unaliased_text(&self) {
        self.unaliased_texts.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the judged calls of one answer in `phase` on a listener of
    /// `mode` (`on` or `shadow`).
    pub async fn calls(
        &self,
        phase: &str,
        calls: &[keyhole_core::proto::calls::CalledTool],
        mode: &'static str,
    ) {
        let mut series = self.calls.lock().await;
        for call in calls {
            let mut key = (phase.to_owned(), tool_label(&call.name), call.covered, mode);
            if !series.contains_key(&key) && series.len() >= MAX_CALL_SERIES {
                key.1 = "other".to_owned();
            }
            *series.entry(key).or_default() += 1;
        }
    }

    /// The Prometheus text exposition of every counter.
    pub async fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP keyhole_control_requests_total HTTP requests answered, by route and status.\n",
        );
        out.push_str("# TYPE keyhole_control_requests_total counter\n");
        let requests = self.requests.lock().await;
        for ((route, status), (n, _)) in requests.iter() {
            let _ = writeln!(
                out,
                "keyhole_control_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP keyhole_control_request_seconds_total Time spent answering, by route and status.\n");
        out.push_str("# TYPE keyhole_control_request_seconds_total counter\n");
        for ((route, status), (_, secs)) in requests.iter() {
            let _ = writeln!(out, "keyhole_control_request_seconds_total{{route=\"{route}\",status=\"{status}\"}} {secs:.6}");
        }
        drop(requests);
        out.push_str("# HELP keyhole_control_resolves_total Candidate sets answered, by source.\n");
        out.push_str("# TYPE keyhole_control_resolves_total counter\n");
        let _ = writeln!(
            out,
            "keyhole_control_resolves_total{{source=\"retrieval\"}} {}",
            self.resolves_retrieval.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "keyhole_control_resolves_total{{source=\"lexical\"}} {}",
            self.resolves_lexical.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "keyhole_control_resolves_total{{source=\"fallback\"}} {}",
            self.resolves_fallback.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "keyhole_control_resolves_total{{source=\"no-turn\"}} {}",
            self.resolves_no_turn.load(Ordering::Relaxed)
        );
        out.push_str("# HELP keyhole_control_tools_total Function tools received and surfaced by resolves.\n");
        out.push_str("# TYPE keyhole_control_tools_total counter\n");
        let _ = writeln!(
            out,
            "keyhole_control_tools_total{{direction=\"in\"}} {}",
            self.tools_in.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "keyhole_control_tools_total{{direction=\"out\"}} {}",
            self.tools_out.load(Ordering::Relaxed)
        );
        out.push_str("# HELP keyhole_control_resolve_request_bytes_total Bytes of resolve request bodies received.\n");
        out.push_str("# TYPE keyhole_control_resolve_request_bytes_total counter\n");
        let _ = writeln!(
            out,
            "keyhole_control_resolve_request_bytes_total {}",
            self.resolve_bytes.load(Ordering::Relaxed)
        );
        out.push_str("# HELP keyhole_control_resolve_registry_total Resolve requests by how they named their registry.\n");
        out.push_str("# TYPE keyhole_control_resolve_registry_total counter\n");
        for (via, counter) in [
            ("known", &self.registry_known),
            ("sent", &self.registry_sent),
            ("unknown", &self.registry_unknown),
        ] {
            let _ = writeln!(
                out,
                "keyhole_control_resolve_registry_total{{via=\"{via}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP keyhole_control_turn_unaliased_total Turn texts and tool-search queries ranked without their text: an id in them had no alias.\n");
        out.push_str("# TYPE keyhole_control_turn_unaliased_total counter\n");
        let _ = writeln!(
            out,
            "keyhole_control_turn_unaliased_total {}",
            self.unaliased_texts.load(Ordering::Relaxed)
        );
        out.push_str("# HELP keyhole_calls_total Tool calls in answers, by phase, tool, whether the tool was on the surface, and enforce mode.\n");
        out.push_str("# TYPE keyhole_calls_total counter\n");
        for ((phase, tool, covered, mode), n) in self.calls.lock().await.iter() {
            let _ = writeln!(
                out,
                "keyhole_calls_total{{phase=\"{phase}\",tool=\"{tool}\",covered=\"{covered}\",mode=\"{mode}\"}} {n}"
            );
        }
        out
    }
}

/// Appends the configured registry's index state: one gauge per state (1 for
/// the current one) and the attempts it has taken.
pub fn render_index(out: &mut String, state: &crate::resolve::IndexState) {
    use crate::resolve::IndexState;
    out.push_str("# HELP keyhole_control_index_state The configured registry's index: 1 for the current state.\n");
    out.push_str("# TYPE keyhole_control_index_state gauge\n");
    for name in ["unconfigured", "indexing", "ready"] {
        let _ = writeln!(
            out,
            "keyhole_control_index_state{{state=\"{name}\"}} {}",
            u8::from(state.as_str() == name)
        );
    }
    let attempts = match state {
        IndexState::Unconfigured => 0,
        IndexState::Indexing { attempts, .. } | IndexState::Ready { attempts, .. } => *attempts,
    };
    out.push_str(
        "# HELP keyhole_control_index_attempts Attempts at indexing the configured registry.\n",
    );
    out.push_str("# TYPE keyhole_control_index_attempts gauge\n");
    let _ = writeln!(out, "keyhole_control_index_attempts {attempts}");
}

/// Middleware counting each matched route's requests and time.
pub async fn track(
    State(metrics): State<Arc<Metrics>>,
    path: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let route = path
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "other".to_owned());
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    let secs = started.elapsed().as_secs_f64();
    let mut requests = metrics.requests.lock().await;
    let entry = requests
        .entry((route, resp.status().as_u16()))
        .or_insert((0, 0.0));
    entry.0 += 1;
    entry.1 += secs;
    resp
}
