//! A fake OpenAI-compatible embeddings endpoint (`POST /v1/embeddings`) on
//! loopback, for tests whose subject is not the embedder: it answers at once,
//! with vectors a test can reason about, and can be told to fail.
//!
//! [`Vectors::BagOfWords`]: each lowercase word adds 1 to one of `dim`
//! buckets, so cosine similarity follows word overlap (control's tests, the
//! end-to-end tests). [`Vectors::Hashed`]: a pseudo-random vector seeded by
//! the text, for registries of thousands of synthetic tools (the bench).

use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// How the fake embedder turns a text into a vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vectors {
    /// [`bag_of_words`]: cosine follows word overlap.
    BagOfWords,
    /// [`hashed`]: deterministic, unrelated for different texts.
    Hashed,
}

impl Vectors {
    /// The `model` the endpoint answers with.
    fn model(self) -> &'static str {
        match self {
            Vectors::BagOfWords => "bag-of-words",
            Vectors::Hashed => "hash",
        }
    }

    fn vector(self, text: &str, dim: usize) -> Vec<f32> {
        match self {
            Vectors::BagOfWords => bag_of_words(text, dim),
            Vectors::Hashed => hashed(text, dim),
        }
    }
}

/// The bag-of-words vector of `text`: word counts hashed (FNV-1a of the
/// lowercase word) into `dim` buckets, never the zero vector.
pub fn bag_of_words(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; dim.max(1)];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = word.to_lowercase().bytes().fold(2166136261u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16777619)
        });
        if let Some(x) = v.get_mut(h as usize % dim.max(1)) {
            *x += 1.0;
        }
    }
    // Never the zero vector.
    if let Some(x) = v.first_mut() {
        *x += 0.01;
    }
    v
}

/// A pseudo-random vector in [-1, 1)^dim seeded by the FNV-1a hash of `text`
/// (xorshift), the same for the same text.
pub fn hashed(text: &str, dim: usize) -> Vec<f32> {
    let mut state: u64 = 1469598103934665603;
    for b in text.bytes() {
        state = (state ^ u64::from(b)).wrapping_mul(1099511628211);
    }
    (0..dim)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// What a [`FakeEmbedder`] starts with.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// How texts become vectors.
    pub vectors: Vectors,
    /// The vector size (can change later through [`FakeEmbedder::dim`]).
    pub dim: usize,
    /// How many requests are answered 503 before the first that succeeds.
    pub refuse_first: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            vectors: Vectors::BagOfWords,
            dim: 384,
            refuse_first: 0,
        }
    }
}

/// A running fake embedder; it serves until the test's runtime ends.
pub struct FakeEmbedder {
    /// Its address on loopback.
    pub addr: SocketAddr,
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Answers 503 to everything while set.
    pub failing: Arc<AtomicBool>,
    /// The vector size; can change between requests.
    pub dim: Arc<AtomicUsize>,
    /// Texts embedded so far (requests refused not counted).
    pub embedded: Arc<AtomicU64>,
}

#[derive(Clone)]
struct State {
    vectors: Vectors,
    failing: Arc<AtomicBool>,
    dim: Arc<AtomicUsize>,
    embedded: Arc<AtomicU64>,
    refused: Arc<AtomicUsize>,
    refuse_first: usize,
}

async fn embeddings(
    axum::extract::State(s): axum::extract::State<State>,
    axum::Json(req): axum::Json<Value>,
) -> Result<axum::Json<Value>, StatusCode> {
    if s.failing.load(Ordering::Relaxed)
        || s.refused.fetch_add(1, Ordering::Relaxed) < s.refuse_first
    {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    let inputs: Vec<&str> = match &req["input"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().map(|v| v.as_str().unwrap_or("")).collect(),
        _ => Vec::new(),
    };
    s.embedded.fetch_add(inputs.len() as u64, Ordering::Relaxed);
    let dim = s.dim.load(Ordering::Relaxed);
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, t)| json!({"index": index, "embedding": s.vectors.vector(t, dim)}))
        .collect();
    Ok(axum::Json(
        json!({"data": data, "model": s.vectors.model()}),
    ))
}

impl FakeEmbedder {
    /// Starts one on a free loopback port, on the current tokio runtime.
    pub async fn start(options: Options) -> std::io::Result<FakeEmbedder> {
        let state = State {
            vectors: options.vectors,
            failing: Arc::new(AtomicBool::new(false)),
            dim: Arc::new(AtomicUsize::new(options.dim)),
            embedded: Arc::new(AtomicU64::new(0)),
            refused: Arc::new(AtomicUsize::new(0)),
            refuse_first: options.refuse_first,
        };
        let (failing, dim, embedded) = (
            state.failing.clone(),
            state.dim.clone(),
            state.embedded.clone(),
        );
        let app = axum::Router::new()
            .route("/v1/embeddings", post(embeddings))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeEmbedder {
            addr,
            url: format!("http://{addr}"),
            failing,
            dim,
            embedded,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bag_of_words_follows_word_overlap() {
        let a = bag_of_words("Book a follow-up", 64);
        let b = bag_of_words("book A FOLLOW up", 64);
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert!(a.iter().sum::<f32>() > 4.0);
        assert_eq!(bag_of_words("", 8)[0], 0.01);
    }

    #[test]
    fn hashed_vectors_are_deterministic_and_differ_by_text() {
        assert_eq!(hashed("a", 16), hashed("a", 16));
        assert_ne!(hashed("a", 16), hashed("b", 16));
        assert!(hashed("x", 384).iter().all(|v| (-1.0..1.0).contains(v)));
    }
}
