//! A client for an OpenAI-compatible `/v1/embeddings` endpoint.
//!
//! Queries and documents are embedded with separately named models (e5-style
//! embedders distinguish them by model name).
//!
//! - Documents (tool texts) are cached by `(model, sha256(text))` in memory
//!   and, when a cache file is configured, on disk, so a registry re-sent
//!   unchanged costs zero embedder calls.
//! - Queries (turns) are cached in memory only, by their canonical text
//!   ([`query::canonical`]: NFKC, whitespace collapsed), least recently used
//!   evicted past `query_cache` entries. A turn's text never reaches the disk.
//!   Turns that miss the cache go through one batcher ([`batch`]): while a
//!   request is at the embedder, the turns arriving meanwhile wait together
//!   and go as one request (`input` is a list), each text once however many
//!   turns ask for it. A turn ranked without its vector is embedded once the
//!   embedder is idle, for the agent's next phase of the same turn.
//!
//! # Layout
//! - [`query`]: the canonical text of a turn and the bounded query cache.
//! - [`batch`]: the task that sends waiting turns together.

mod batch;
pub mod query;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Mutex, OnceCell};

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
    /// Texts per request: tool texts when indexing, and the most turns that
    /// wait together for one request.
    pub batch_size: usize,
    /// Timeout of one HTTP request.
    pub timeout: Duration,
    /// Attempts per batch on 429, 5xx and connection errors.
    pub attempts: u32,
    /// Cache file for document vectors; `None` keeps them in memory only.
    pub cache_path: Option<PathBuf>,
    /// Query vectors kept in memory (least recently used evicted).
    pub query_cache: usize,
    /// Query requests at the embedder at once; turns that arrive while they
    /// are all out wait and go together in the next one.
    pub requests_in_flight: usize,
}

/// The default of [`EmbedderConfig::query_cache`]: at 384 dimensions about
/// 1.6 KB an entry, so about 13 MB.
pub const DEFAULT_QUERY_CACHE: usize = 8192;

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
            query_cache: DEFAULT_QUERY_CACHE,
            requests_in_flight: 1,
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
    /// The request that carried this text with others failed: every text of
    /// it gets this same error.
    #[error(transparent)]
    Batch(Arc<EmbedError>),
    /// By the embedder's recent answers, the text would come back after its
    /// deadline, so it was not sent.
    #[error("the embedder would answer after the deadline")]
    Late,
    /// The batcher task is gone (its runtime shut down).
    #[error("the query batcher stopped")]
    Stopped,
}

impl EmbedError {
    /// The error itself, or the batch's error it stands for.
    pub fn cause(&self) -> &EmbedError {
        match self {
            EmbedError::Batch(inner) => inner.cause(),
            other => other,
        }
    }
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

/// The endpoint: where requests go and how they are retried. Shared by the
/// client and its batcher task.
struct Endpoint {
    url: String,
    http: reqwest::Client,
    attempts: u32,
}

/// What the client and its batcher count.
#[derive(Debug, Default)]
struct Stats {
    /// Texts sent to the endpoint and answered (cache misses).
    texts: AtomicU64,
    /// Query requests sent.
    query_requests: AtomicU64,
    /// What a query request costs the embedder lately, whatever it carries,
    /// in µs ([`batch::Cost`]; 0 before the first answer).
    fixed_us: AtomicU64,
    /// What each text of a query request adds, in µs (0 before the first
    /// answer).
    per_text_us: AtomicU64,
}

impl Stats {
    /// The embedder's recent cost.
    fn cost(&self) -> batch::Cost {
        batch::Cost {
            fixed_us: self.fixed_us.load(Ordering::Relaxed) as f64,
            per_text_us: self.per_text_us.load(Ordering::Relaxed) as f64,
        }
    }

    fn set_cost(&self, cost: batch::Cost) {
        self.fixed_us
            .store(cost.fixed_us.max(0.0) as u64, Ordering::Relaxed);
        self.per_text_us
            .store(cost.per_text_us.max(0.0) as u64, Ordering::Relaxed);
    }
}

/// The embedder client. Cheap to share behind an `Arc`.
pub struct Embedder {
    config: EmbedderConfig,
    endpoint: Arc<Endpoint>,
    /// Document vectors, mirrored in the cache file.
    documents: Mutex<HashMap<Key, Arc<[f32]>>>,
    /// Query vectors by canonical text, bounded.
    queries: Arc<Mutex<query::QueryCache>>,
    /// The batcher's queue; the task starts with the first query that misses
    /// the cache (it needs the caller's runtime) and ends when the client is dropped.
    batcher: OnceCell<mpsc::UnboundedSender<batch::Job>>,
    stats: Arc<Stats>,
}

impl Embedder {
    /// A client; loads the cache file when one is configured.
    pub fn try_new(config: EmbedderConfig) -> Result<Embedder, EmbedError> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|source| EmbedError::Unreachable {
                url: config.url.clone(),
                source,
            })?;
        let documents = match &config.cache_path {
            Some(path) => load_cache(path)?,
            None => HashMap::new(),
        };
        let endpoint = Arc::new(Endpoint {
            url: config.url.clone(),
            http,
            attempts: config.attempts,
        });
        let queries = Arc::new(Mutex::new(query::QueryCache::new(config.query_cache)));
        Ok(Embedder {
            config,
            endpoint,
            documents: Mutex::new(documents),
            queries,
            batcher: OnceCell::new(),
            stats: Arc::default(),
        })
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
        self.stats.texts.load(Ordering::Relaxed)
    }

    /// How many query requests were sent to the endpoint so far (each may
    /// carry several turns).
    pub fn query_requests(&self) -> u64 {
        self.stats.query_requests.load(Ordering::Relaxed)
    }

    /// What a query request of one text costs the embedder lately (zero
    /// before its first answer).
    pub fn per_text_estimate(&self) -> Duration {
        self.stats.cost().of(1)
    }

    /// Sets [`Self::per_text_estimate`], all of it per text (tests: an
    /// embedder known to be slow).
    #[cfg(test)]
    pub(crate) fn set_per_text_estimate(&self, cost: Duration) {
        self.stats.set_cost(batch::Cost {
            fixed_us: 0.0,
            per_text_us: cost.as_micros() as f64,
        });
    }

    /// True when the text is cached for `side` (no call would be made); a
    /// query by its canonical text.
    pub async fn is_cached(&self, side: Side, text: &str) -> bool {
        match side {
            Side::Document => self
                .documents
                .lock()
                .await
                .contains_key(&key(self.model(side), text)),
            Side::Query => self
                .queries
                .lock()
                .await
                .contains(&key(self.model(side), &query::canonical(text))),
        }
    }

    /// Embeds `texts`, from the cache where possible; one vector per text, in order.
    /// Queries go through the batcher without a deadline ([`Self::embed_query`]).
    pub async fn embed(&self, side: Side, texts: &[&str]) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        match side {
            Side::Document => self.embed_documents(texts).await,
            Side::Query => self.embed_queries(texts, None).await.into_iter().collect(),
        }
    }

    /// Several queries' embeddings (a turn and its clauses), each from the
    /// cache or the batcher: every text is queued before any answer is
    /// awaited, so they go in one request. One result per text, in order;
    /// each fails on its own, as [`Self::embed_query`] would.
    pub async fn embed_queries(
        &self,
        texts: &[&str],
        deadline: Option<tokio::time::Instant>,
    ) -> Vec<Result<Arc<[f32]>, EmbedError>> {
        let mut waiting = Vec::with_capacity(texts.len());
        for text in texts {
            waiting.push(self.ask(text, deadline).await);
        }
        let mut out = Vec::with_capacity(waiting.len());
        for asked in waiting {
            out.push(match asked {
                Ok(asked) => asked.wait().await,
                Err(e) => Err(e),
            });
        }
        out
    }

    /// One turn's embedding, by its canonical text: from the cache, else
    /// from the next request the batcher sends. A turn that stops waiting
    /// (its caller dropped the future at its deadline) leaves the others of
    /// its request alone, and is not sent if it had not been yet.
    ///
    /// Fails with the request's error ([`EmbedError::Batch`]), or
    /// [`EmbedError::Late`] when by the embedder's recent answers it would
    /// not come back before `deadline` (then it is not sent).
    pub async fn embed_query(
        &self,
        text: &str,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Arc<[f32]>, EmbedError> {
        self.ask(text, deadline).await?.wait().await
    }

    async fn ask(
        &self,
        text: &str,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Asked, EmbedError> {
        let text = query::canonical(text);
        let key = key(&self.config.query_model, &text);
        if let Some(v) = self.queries.lock().await.get(&key) {
            return Ok(Asked::Cached(v));
        }
        let (reply, answer) = oneshot::channel();
        self.batcher()
            .await
            .send(batch::Job {
                key,
                text,
                deadline,
                reply,
            })
            .map_err(|_| EmbedError::Stopped)?;
        Ok(Asked::Queued(answer))
    }

    async fn batcher(&self) -> &mpsc::UnboundedSender<batch::Job> {
        self.batcher
            .get_or_init(|| async {
                // Unbounded: every job has a caller waiting on it, so the
                // queue is no longer than the turns being resolved.
                let (tx, rx) = mpsc::unbounded_channel();
                let batcher = batch::Batcher {
                    endpoint: self.endpoint.clone(),
                    model: self.config.query_model.clone(),
                    cache: self.queries.clone(),
                    stats: self.stats.clone(),
                    batch_size: self.config.batch_size.max(1),
                    in_flight: self.config.requests_in_flight.max(1),
                };
                tokio::spawn(batcher.run(rx));
                tx
            })
            .await
    }

    async fn embed_documents(&self, texts: &[&str]) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        let model = self.config.document_model.clone();
        let keys: Vec<Key> = texts.iter().map(|t| key(&model, t)).collect();
        let mut missing: Vec<usize> = Vec::new();
        {
            let cache = self.documents.lock().await;
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
            let vectors = self.endpoint.request(&model, &batch).await?;
            self.stats
                .texts
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let mut fresh = Vec::with_capacity(chunk.len());
            {
                let mut cache = self.documents.lock().await;
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
        let cache = self.documents.lock().await;
        keys.iter()
            .map(|k| {
                cache
                    .get(k)
                    .cloned()
                    .ok_or_else(|| EmbedError::Malformed("a vector went missing".into()))
            })
            .collect()
    }
}

/// A query asked for: its vector at once, or the batcher's answer to come.
enum Asked {
    Cached(Arc<[f32]>),
    Queued(oneshot::Receiver<Result<Arc<[f32]>, EmbedError>>),
}

impl Asked {
    async fn wait(self) -> Result<Arc<[f32]>, EmbedError> {
        match self {
            Asked::Cached(v) => Ok(v),
            Asked::Queued(answer) => answer.await.map_err(|_| EmbedError::Stopped)?,
        }
    }
}

// === impl Endpoint ===

impl Endpoint {
    /// One batch, retried with exponential backoff on 429, 5xx and transport errors.
    async fn request(&self, model: &str, batch: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let url = format!("{}/v1/embeddings", self.url.trim_end_matches('/'));
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self
                .http
                .post(&url)
                .json(&EmbeddingsRequest {
                    model,
                    input: batch,
                })
                .send()
                .await;
            let retryable = match result {
                Ok(resp) if resp.status().is_success() => {
                    let parsed: EmbeddingsResponse = resp
                        .json()
                        .await
                        .map_err(|e| EmbedError::Malformed(e.to_string()))?;
                    return order(parsed, batch.len());
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let body: String = resp
                        .text()
                        .await
                        .unwrap_or_default()
                        .chars()
                        .take(256)
                        .collect();
                    let err = EmbedError::Status { status, body };
                    if status == 429 || status >= 500 {
                        err
                    } else {
                        return Err(err);
                    }
                }
                Err(source) => EmbedError::Unreachable {
                    url: url.clone(),
                    source,
                },
            };
            if attempt >= self.attempts {
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
        Ok(mut f) => f
            .read_to_end(&mut bytes)
            .map_err(|source| EmbedError::Cache {
                path: path.clone(),
                source,
            })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(map),
        Err(source) => {
            return Err(EmbedError::Cache {
                path: path.clone(),
                source,
            })
        }
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
        let v: Vec<f32> = vals
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
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
    let io = |source| EmbedError::Cache {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    f.write_all(&buf).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests;
