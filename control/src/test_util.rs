//! Test helpers: a local OpenAI-compatible embeddings endpoint, and the
//! Qdrant server `scripts/with-services.sh` starts.
//!
//! Vectors are hashed bags of words (each lowercase word adds 1 to one of
//! `dim` buckets), so cosine similarity follows word overlap and tests can
//! reason about rankings. The endpoint can be switched to fail (503).

use crate::embed::{Embedder, EmbedderConfig};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A running fake embedder.
pub(crate) struct FakeEmbedder {
    /// Base URL.
    pub(crate) url: String,
    /// Answer 503 to everything while set.
    pub(crate) failing: Arc<AtomicBool>,
    /// Vector size; can change between requests.
    pub(crate) dim: Arc<AtomicUsize>,
    /// Every text it was asked to embed, in order.
    pub(crate) seen: Arc<std::sync::Mutex<Vec<String>>>,
}

#[derive(Clone)]
struct FakeState {
    failing: Arc<AtomicBool>,
    dim: Arc<AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

/// The bag-of-words vector of a text.
pub(crate) fn bag_of_words(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; dim];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = word.to_lowercase().bytes().fold(2166136261u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16777619)
        });
        v[h as usize % dim] += 1.0;
    }
    // Never the zero vector.
    v[0] += 0.01;
    v
}

async fn embeddings(
    State(s): State<FakeState>,
    Json(body): Json<serde_json::Value>,
) -> Result<Json<serde_json::Value>, StatusCode> {
    if s.failing.load(Ordering::Relaxed) {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    let dim = s.dim.load(Ordering::Relaxed);
    let data: Vec<serde_json::Value> = body["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t.as_str().unwrap_or(""))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .inspect(|t| {
            if let Ok(mut seen) = s.seen.lock() {
                seen.push((*t).to_owned());
            }
        })
        .enumerate()
        .map(|(index, t)| serde_json::json!({"index": index, "embedding": bag_of_words(t, dim)}))
        .collect();
    Ok(Json(serde_json::json!({"data": data})))
}

impl FakeEmbedder {
    /// Starts one on a free loopback port.
    pub(crate) async fn start(dim: usize) -> FakeEmbedder {
        let failing = Arc::new(AtomicBool::new(false));
        let dim = Arc::new(AtomicUsize::new(dim));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .with_state(FakeState {
                failing: failing.clone(),
                dim: dim.clone(),
                seen: seen.clone(),
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeEmbedder {
            url,
            failing,
            dim,
            seen,
        }
    }

    /// A fresh client (empty cache, one attempt per batch).
    pub(crate) fn client(&self) -> Arc<Embedder> {
        let config = EmbedderConfig {
            url: self.url.clone(),
            timeout: Duration::from_secs(5),
            attempts: 1,
            ..EmbedderConfig::default()
        };
        Arc::new(Embedder::try_new(config).unwrap())
    }
}

/// The gRPC URL of the Qdrant server `scripts/with-services.sh` starts
/// (`KEYHOLE_TEST_QDRANT_URL`). Panics when it is unset: the Qdrant backend is
/// never skipped — run the tests through `make test` / `make unit`.
pub(crate) fn qdrant_url() -> String {
    std::env::var("KEYHOLE_TEST_QDRANT_URL").unwrap_or_else(|_| {
        panic!(
            "KEYHOLE_TEST_QDRANT_URL is not set: the Qdrant backend is tested in every run; \
             run the tests with `make test` or `make unit` (scripts/with-services.sh starts Qdrant)"
        )
    })
}

/// A client of the test Qdrant server.
pub(crate) fn qdrant_store() -> crate::index::QdrantStore {
    crate::index::QdrantStore::connect(&qdrant_url(), Duration::from_secs(10)).unwrap()
}

/// A registry namespace no other test uses (the Qdrant server is shared by
/// every test of the run, and by reruns against the same server).
pub(crate) fn fresh_namespace(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Both vector-store backends, named: the embedded store and the test Qdrant.
pub(crate) fn stores() -> Vec<(&'static str, Arc<dyn crate::index::VectorStore>)> {
    vec![
        ("memory", Arc::new(crate::index::MemoryStore::in_memory())),
        ("qdrant", Arc::new(qdrant_store())),
    ]
}

/// The text `GET /metrics` answers on `app`.
pub(crate) async fn metrics_text(app: &Router) -> String {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    let req = axum::http::Request::get("/metrics")
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}
