//! A local OpenAI-compatible embedder for tests whose subject is not the
//! embedder: it answers at once with hashed bags of words (384 dimensions), so
//! cosine still follows word overlap, and it can refuse its first requests.
//! The shared embedder (one inference at a time on a busy box) would make
//! those tests' timing depend on everything else running.

use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Dimensions of every vector.
pub const DIMENSIONS: usize = 384;

/// The embedding of `text`: word counts hashed into [`DIMENSIONS`] buckets,
/// never the zero vector.
pub fn vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIMENSIONS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = word.to_lowercase().bytes().fold(2166136261u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16777619)
        });
        v[h as usize % DIMENSIONS] += 1.0;
    }
    v[0] += 0.01;
    v
}

/// Starts the embedder on a free loopback port; it answers 503 to its first
/// `failures` requests. Serves until the test ends. Returns its base URL.
pub async fn start(failures: usize) -> String {
    let seen = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/v1/embeddings",
        post(move |axum::Json(req): axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                if seen.fetch_add(1, Ordering::Relaxed) < failures {
                    return Err(StatusCode::SERVICE_UNAVAILABLE);
                }
                let inputs: Vec<String> = match &req["input"] {
                    Value::String(s) => vec![s.clone()],
                    Value::Array(a) => a
                        .iter()
                        .map(|v| v.as_str().unwrap_or("").to_owned())
                        .collect(),
                    _ => Vec::new(),
                };
                let data: Vec<Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, t)| json!({"index": i, "embedding": vector(t)}))
                    .collect();
                Ok(axum::Json(json!({"data": data, "model": "bag-of-words"})))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}
