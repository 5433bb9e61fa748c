//! A client for an OpenAI-compatible `/v1/embeddings` endpoint.
//!
//! Queries and documents are embedded with separately named models (e5-style
//! embedders distinguish them by model name). Every vector is cached by
//! `(model, sha256(text))` in memory and, when a cache file is configured, on
//! disk, so a registry re-sent unchanged costs zero embedder calls.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// Which side of the retrieval a text is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A user turn.
    Query,
    /// A tool's embedding text.
    Document,
}

/// Embedder settings.
#[derive(Debug, Clone)]
pub struct EmbedderConfig {
    /// Base URL, e.g. `http://127.0.0.1:8080` (the client appends `/v1/embeddings`).
    pub url: String,
    /// Model name for queries.
    pub query_model: String,
    /// Model name for documents.
    pub document_model: String,
    /// Texts per request.
    pub batch_size: usize,
    /// Timeout of one HTTP request.
    pub timeout: Duration,
    /// Attempts per batch on 429, 5xx and connection errors.
    pub attempts: u32,
    /// Cache file; `None` keeps the cache in memory only.
    pub cache_path: Option<PathBuf>,
}

impl Default for EmbedderConfig {
    fn default() -> Self {
        EmbedderConfig {
            url: "http://127.0.0.1:8089".into(),
            query_model: "e5-query".into(),
            document_model: "e5-passage".into(),
            batch_size: 32,
            timeout: Duration::from_secs(30),
            attempts: 3,
            cache_path: None,
        }
    }
}

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The endpoint could not be reached or timed out.
    #[error("embedder at {url} unreachable: {source}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The endpoint answered with an error status.
    #[error("embedder answered {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The start of the answer body.
        body: String,
    },
    /// The answer was not the expected JSON.
    #[error("embedder answer is malformed: {0}")]
    Malformed(String),
    /// The cache file could not be read or written.
    #[error("embedding cache {path}: {source}")]
    Cache {
        /// The cache file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [&'a str],
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

type Key = [u8; 32];

fn key(model: &str, text: &str) -> Key {
    let mut h = Sha256::new();
    h.update(model.as_bytes());
    h.update([0u8]);
    h.update(text.as_bytes());
    h.finalize().into()
}

/// The embedder client. Cheap to share behind an `Arc`.
pub struct Embedder {
    config: EmbedderConfig,
    http: reqwest::Client,
    cache: Mutex<HashMap<Key, Arc<[f32]>>>,
    /// Texts sent to the endpoint (cache misses), for tests and metrics.
    calls: AtomicU64,
}

impl Embedder {
    /// A client; loads the cache file when one is configured.
    pub fn try_new(config: EmbedderConfig) -> Result<Embedder, EmbedError> {
        let http = reqwest::Client::builder().timeout(config.timeout).build().map_err(|source| {
            EmbedError::Unreachable { url: config.url.clone(), source }
        })?;
        let cache = match &config.cache_path {
            Some(path) => load_cache(path)?,
            None => HashMap::new(),
        };
        Ok(Embedder { config, http, cache: Mutex::new(cache), calls: AtomicU64::new(0) })
    }

    /// The configured model for a side.
    pub fn model(&self, side: Side) -> &str {
        match side {
            Side::Query => &self.config.query_model,
            Side::Document => &self.config.document_model,
        }
    }

    /// How many texts were sent to the endpoint so far (cache misses).
    pub fn texts_embedded(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// True when every text is cached for `side` (no call would be made).
    pub async fn is_cached(&self, side: Side, text: &str) -> bool {
        self.cache.lock().await.contains_key(&key(self.model(side), text))
    }

    /// Embeds `texts`, from the cache where possible; one vector per text, in order.
    pub async fn embed(&self, side: Side, texts: &[&str]) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        let model = self.model(side).to_owned();
        let keys: Vec<Key> = texts.iter().map(|t| key(&model, t)).collect();
        let mut missing: Vec<usize> = Vec::new();
        {
            let cache = self.cache.lock().await;
            // Each missing text once (a registry of thousands embeds each
            // distinct text once, without comparing every pair).
            let mut asked = std::collections::HashSet::new();
            for (i, k) in keys.iter().enumerate() {
                if !cache.contains_key(k) && asked.insert(*k) {
                    missing.push(i);
                }
            }
        }
        for chunk in missing.chunks(self.config.batch_size.max(1)) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            let vectors = self.request(&model, &batch).await?;
            self.calls.fetch_add(batch.len() as u64, Ordering::Relaxed);
            let mut fresh = Vec::with_capacity(chunk.len());
            {
                let mut cache = self.cache.lock().await;
                for (&i, v) in chunk.iter().zip(vectors) {
                    let v: Arc<[f32]> = v.into();
                    cache.insert(keys[i], v.clone());
                    fresh.push((keys[i], v));
                }
            }
            if let Some(path) = &self.config.cache_path {
                append_cache(path, &fresh)?;
            }
        }
        let cache = self.cache.lock().await;
        keys.iter()
            .map(|k| cache.get(k).cloned().ok_or_else(|| EmbedError::Malformed("a vector went missing".into())))
            .collect()
    }

    /// One batch, retried with exponential backoff on 429, 5xx and transport errors.
    async fn request(&self, model: &str, batch: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let url = format!("{}/v1/embeddings", self.config.url.trim_end_matches('/'));
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.http.post(&url).json(&EmbeddingsRequest { model, input: batch }).send().await;
            let retryable = match result {
                Ok(resp) if resp.status().is_success() => {
                    let parsed: EmbeddingsResponse =
                        resp.json().await.map_err(|e| EmbedError::Malformed(e.to_string()))?;
                    return order(parsed, batch.len());
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let body: String = resp.text().await.unwrap_or_default().chars().take(256).collect();
                    let err = EmbedError::Status { status, body };
                    if status == 429 || status >= 500 { err } else { return Err(err) }
                }
                Err(source) => EmbedError::Unreachable { url: url.clone(), source },
            };
            if attempt >= self.config.attempts {
                return Err(retryable);
            }
            tracing::debug!(attempt, ?delay, "retrying embedder");
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
}

/// Puts the answer's vectors in input order and checks there is one per text.
fn order(resp: EmbeddingsResponse, n: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for item in resp.data {
        let slot = out
            .get_mut(item.index)
            .ok_or_else(|| EmbedError::Malformed(format!("index {} out of range", item.index)))?;
        *slot = Some(item.embedding);
    }
    out.into_iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| EmbedError::Malformed(format!("no vector for input {i}"))))
        .collect()
}

/// Cache file records: 32-byte key, u32 LE dimension, dimension × f32 LE.
/// Append-only; a torn last record (crash mid-write) is ignored on load.
fn load_cache(path: &PathBuf) -> Result<HashMap<Key, Arc<[f32]>>, EmbedError> {
    let mut map = HashMap::new();
    let mut bytes = Vec::new();
    match std::fs::File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes).map_err(|source| EmbedError::Cache { path: path.clone(), source })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(map),
        Err(source) => return Err(EmbedError::Cache { path: path.clone(), source }),
    };
    let mut rest = bytes.as_slice();
    while rest.len() >= 36 {
        let (k, tail) = rest.split_at(32);
        let (dim, tail) = tail.split_at(4);
        let dim = u32::from_le_bytes([dim[0], dim[1], dim[2], dim[3]]) as usize;
        if tail.len() < dim * 4 {
            break;
        }
        let (vals, tail) = tail.split_at(dim * 4);
        let v: Vec<f32> = vals.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let mut key = [0u8; 32];
        key.copy_from_slice(k);
        map.insert(key, v.into());
        rest = tail;
    }
    Ok(map)
}

fn append_cache(path: &PathBuf, entries: &[(Key, Arc<[f32]>)]) -> Result<(), EmbedError> {
    let mut buf = Vec::new();
    for (k, v) in entries {
        buf.extend_from_slice(k);
        buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
        for x in v.iter() {
            buf.extend_from_slice(&x.to_le_bytes());
        }
    }
    let io = |source| EmbedError::Cache { path: path.clone(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
    f.write_all(&buf).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_file_round_trips_and_ignores_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.bin");
        let a: Arc<[f32]> = vec![1.0, -2.5, 3.0].into();
        append_cache(&path, &[(key("m", "a"), a.clone())]).unwrap();
        append_cache(&path, &[(key("m", "b"), vec![0.5; 384].into())]).unwrap();
        // A crash mid-write leaves a partial record.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[7u8; 40]).unwrap();
        let map = load_cache(&path).unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(&*map[&key("m", "a")], &*a);
        assert_ne!(key("m", "a"), key("n", "a"), "the model is part of the key");
    }

    #[test]
    fn answers_are_put_in_input_order() {
        let resp = EmbeddingsResponse {
            data: vec![
                EmbeddingItem { index: 1, embedding: vec![2.0] },
                EmbeddingItem { index: 0, embedding: vec![1.0] },
            ],
        };
        assert_eq!(order(resp, 2).unwrap(), vec![vec![1.0], vec![2.0]]);
        let short = EmbeddingsResponse { data: vec![EmbeddingItem { index: 0, embedding: vec![1.0] }] };
        assert!(matches!(order(short, 2), Err(EmbedError::Malformed(_))));
    }
}
