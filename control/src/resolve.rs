//! Answers `/v1/resolve`: which of a request's tools a turn may see.
//!
//! The decision itself is the pure engine ([`keyhole_core::tools::rank`]); this module
//! feeds it:
//! - the request's tools, joined with the metadata overlay into a
//!   [`Registry`] — built once per distinct tool list (kept by its
//!   [`registry_digest`], least recently used evicted past
//!   `max_registries`) and indexed into the vector store in the background, so
//!   the first request carrying a new registry never waits for 100+ embeddings.
//!   The filter names the registry by digest only; a digest control does not
//!   know is answered [`ResolveError::UnknownRegistry`] (409), and the filter
//!   asks once more with the descriptors. A known digest is never re-parsed
//!   or re-hashed;
//! - the turn's cosine similarities: embed the turn, search the namespace's
//!   collection. Until the registry's vectors are ready the engine ranks
//!   lexically (`cosine: Some(&[])`); once indexed, hybrid;
//! - the session's prior audited set.
//!
//! A turn ranked without vectors says so (`source: lexical`): while its
//! registry is being indexed (a turn waits for that index only until its
//! deadline), or when the deadline passes before the turn's embedding and
//! search do. The registry control is configured with (`--registry`) is
//! indexed at start ([`Resolver::index_at_start`]: smaller batches and
//! backoff until done), and `/healthz` answers 503 until it is.
//!
//! An embedder or store failure is an outage: the engine's bounded fallback
//! answers (`cosine: None`, `source: control-fallback`) over the session's
//! prior set and the floors, never more than the phase budget. Only a successful retrieval updates the
//! session's audited set. Every answer is appended to the session's bounded
//! audit trail (names, reasons, source and timings — never the turn's text).
//!
//! # Recovery: the tool-search control tool
//! A request whose filter adds the control tool (`tool_search` present) is
//! composed for one place less ([`keyhole_core::tools::recovery`]). When it carries
//! the model's query, the registry is searched with it — the same ranking as
//! a turn ([`keyhole_core::tools::rank::pipeline::search`]: fusion, domain scoping,
//! dedup), hybrid when the registry's vectors and the embedder answer within
//! the turn's deadline, else lexical — and the best [`MAX_FOUND`] join the
//! set with the reason `recovery` ([`recovery::compose`]), under the phase
//! rules. They become part of the session's audited set like any other
//! surfaced tool. The audit entry records the query and what it found
//! ([`SearchAudit`]): the query is model-written text, kept (cut to
//! [`recovery::MAX_QUERY_CHARS`], aliased by the filter) because the trail
//! must say why a tool outside retrieval's answer was shown.

mod audit;

pub use audit::{
    AuditEntry, Bytes, CallAudit, MissReason, Retrieval, SearchAudit, SessionTrail, Timings,
};

use crate::embed::{EmbedError, Side};
use crate::index::sync::SyncError;
use crate::index::{Hit, Indexer, Search, SyncReport};
use audit::Sessions;
use keyhole_core::alias::reading::ranking_text;
use keyhole_core::alias::Taxonomy;
use keyhole_core::proto::tools::{
    descriptors_digest, parse_digest, registry_digest, ResolveRequest, ResolveResponse, Source,
    SurfacedTool, ToolDescriptor,
};
use keyhole_core::tools::rank::config::RankConfig;
use keyhole_core::tools::rank::meta::Overlay;
use keyhole_core::tools::rank::pipeline::{
    resolve as rank_turn, resolve_clauses, Clause, Resolution, Turn,
};
use keyhole_core::tools::rank::registry::Registry;
use keyhole_core::tools::rank::Candidate;
use keyhole_core::tools::recovery::{self, MAX_FOUND};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, Notify};

/// Why the turn's cosines could not be computed (an outage).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetrievalError {
    /// Embedding the turn failed ([`EmbedError::Late`]: by the embedder's
    /// recent answers it would come back after the turn's deadline, so it
    /// was not asked for).
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// The vector search failed.
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
}

/// Why a request naming its registry by digest could not be resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// Control does not know the digest (never sent, evicted, or control
    /// restarted): the filter resends with the descriptors.
    #[error("unknown registry digest: resend the request with its tools")]
    UnknownRegistry,
    /// The digest is not 64 hex digits.
    #[error("the registry digest is not 64 hex digits")]
    BadDigest,
    /// The tools sent do not hash to the digest named.
    #[error("the registry digest is not the digest of the tools sent")]
    DigestMismatch,
}

/// The index of the registry control was started with (`--registry`), as
/// `/healthz` and `/metrics` show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum IndexState {
    /// No registry configured: each is indexed when a request first brings it.
    Unconfigured,
    /// Being indexed; not ready.
    Indexing {
        /// Business tools to index.
        tools: usize,
        /// Attempts so far (failed ones included).
        attempts: u32,
        /// Texts per embedder call in the current attempt.
        batch: usize,
        /// Why the last attempt failed, if one did.
        #[serde(skip_serializing_if = "Option::is_none")]
        last_error: Option<String>,
    },
    /// Indexed: turns over it are hybrid.
    Ready {
        /// Business tools indexed.
        tools: usize,
        /// Attempts it took.
        attempts: u32,
        /// Milliseconds from start to ready.
        millis: u64,
    },
}

impl IndexState {
    /// Whether control may report ready.
    pub fn is_ready(&self) -> bool {
        !matches!(self, IndexState::Indexing { .. })
    }

    /// The state's name (`unconfigured`, `indexing`, `ready`).
    pub fn as_str(&self) -> &'static str {
        match self {
            IndexState::Unconfigured => "unconfigured",
            IndexState::Indexing { .. } => "indexing",
            IndexState::Ready { .. } => "ready",
        }
    }
}

/// How [`Resolver::index_at_start`] retries: the batch halves after each
/// failure (down to `min_batch`) and the wait doubles (up to `max_backoff`).
#[derive(Debug, Clone, Copy)]
pub struct StartupIndex {
    /// Texts per embedder call on the first attempt.
    pub batch: usize,
    /// Smallest batch.
    pub min_batch: usize,
    /// Wait after the first failure.
    pub backoff: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
}

impl Default for StartupIndex {
    fn default() -> Self {
        StartupIndex {
            batch: 32,
            min_batch: 4,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What the vector search found for a turn: the cosine similarity of each
/// tool to the turn, and to each of its clauses when it has several.
#[derive(Debug, Default)]
struct Cosines {
    turn: Vec<(String, f32)>,
    clauses: Vec<Vec<(String, f32)>>,
}

/// The vector search's default depth: the most cosines a turn asks the store
/// for. Ranking surfaces at most a phase budget (≤ 12), and a tool the search
/// leaves out still ranks on its lexical evidence, so 256 nearest is more
/// than a turn can use; below 256 tools it
/// is the whole registry (every test and eval registry: their answers do not
/// change). It keeps each answer from the store — Qdrant's above all — from
/// growing with the registry.
pub const DEFAULT_SEARCH_K: usize = 256;

/// Resolver settings.
#[derive(Debug, Clone)]
pub struct ResolverSettings {
    /// How many nearest tools the vector search returns (default
    /// [`DEFAULT_SEARCH_K`]); `None` = every tool of the registry.
    pub search_k: Option<usize>,
    /// Deadline for embedding the turn and searching; past it the turn is
    /// ranked lexically. Keep it under the filter's `timeout_ms`.
    ///
    /// The default (1000 ms, `retrieval.timeout_ms`) is the smallest deadline
    /// `keyhole-bench --only vector_share` measured whose share of requests
    /// answered with vectors under agent traffic at 16 concurrent sessions is
    /// at least 0.95 (the filter's default `timeout_ms`, 1500, is above it). Past
    /// the embedder's capacity a short deadline alone does not shed load (an
    /// embedding once sent is computed whether anyone waits for it): the
    /// embedder client sends the turns waiting together, one request at a
    /// time, and no more of them than can come back before their deadlines
    /// ([`crate::embed`]).
    pub retrieval_timeout: Duration,
    /// Distinct registries kept built and indexed (least recently used evicted).
    pub max_registries: usize,
    /// Sessions remembered (least recently used evicted).
    pub max_sessions: usize,
    /// Audit entries kept per session (oldest dropped).
    pub audit_len: usize,
    /// Wait before retrying a failed background index of one registry.
    pub index_retry: Duration,
}

impl Default for ResolverSettings {
    fn default() -> Self {
        ResolverSettings {
            search_k: Some(DEFAULT_SEARCH_K),
            retrieval_timeout: Duration::from_millis(1000),
            max_registries: 16,
            max_sessions: 10_000,
            audit_len: 64,
            index_retry: Duration::from_secs(5),
        }
    }
}

/// One distinct registry: built once, indexed in the background.
pub struct PreparedRegistry {
    registry: Registry,
    /// Its vectors are in the store.
    ready: AtomicBool,
    /// A background sync of it runs.
    syncing: AtomicBool,
    /// The indexer generation this registry was last synced at.
    synced_at: AtomicU64,
    /// When the last background index failed (retry gate).
    failed_at: std::sync::Mutex<Option<Instant>>,
    /// Woken when a background index ends (a turn waits on it, bounded by its deadline).
    indexed: Notify,
    /// Last use, for eviction.
    used: AtomicU64,
}

impl PreparedRegistry {
    /// The engine's registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Whether its vectors are in the store.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// The resolver: registry cache, indexer, engine configuration and
/// per-session memory. Share it behind an `Arc`; a benchmark can call
/// Writes each alias in the turn and the tool-search query of `req` as the
/// ranking reads it, its kind and `id` ([`ranking_text`]): the epoch and
/// number of an alias are drawn per session and say nothing about the tools a
/// turn needs. Both routes that rank call it before [`Resolver::answer`].
pub fn read_aliases(tax: &Taxonomy, req: &mut ResolveRequest) {
    if let Cow::Owned(text) = ranking_text(tax, &req.turn) {
        req.turn = text;
    }
    if let Some(query) = req.tool_search.as_mut().and_then(|s| s.query.as_mut()) {
        if let Cow::Owned(text) = ranking_text(tax, query) {
            *query = text;
        }
    }
}

/// [`Resolver::resolve`] in-process after [`Resolver::prepare`].
pub struct Resolver {
    indexer: Arc<Indexer>,
    rank: Arc<RankConfig>,
    overlay: Option<Arc<Overlay>>,
    settings: ResolverSettings,
    /// Registries by descriptor hash.
    registries: Mutex<HashMap<[u8; 32], Arc<PreparedRegistry>>>,
    /// Bumped whenever a sync changed the collection, so registries synced
    /// earlier re-check theirs (another registry may have pruned their tools).
    generation: Arc<AtomicU64>,
    sessions: Mutex<Sessions>,
    clock: AtomicU64,
    /// The configured registry's index ([`Self::index_at_start`]).
    startup: std::sync::Mutex<IndexState>,
}

/// The [`registry_digest`] of the tool descriptors, in request order (the
/// same list in another order is a different key but builds the same registry).
fn registry_key(tools: &[ToolDescriptor]) -> [u8; 32] {
    parse_digest(&descriptors_digest(tools)).unwrap_or_default()
}

impl Resolver {
    /// A resolver over an indexer, a ranking configuration and an optional overlay.
    pub fn new(
        indexer: Arc<Indexer>,
        rank: Arc<RankConfig>,
        overlay: Option<Arc<Overlay>>,
        settings: ResolverSettings,
    ) -> Resolver {
        let sessions = Sessions::new(settings.max_sessions, settings.audit_len);
        Resolver {
            indexer,
            rank,
            overlay,
            settings,
            registries: Mutex::new(HashMap::new()),
            generation: Arc::new(AtomicU64::new(0)),
            sessions: Mutex::new(sessions),
            clock: AtomicU64::new(0),
            startup: std::sync::Mutex::new(IndexState::Unconfigured),
        }
    }

    /// The configured registry's index state.
    pub fn index_state(&self) -> IndexState {
        self.startup
            .lock()
            .map(|s| s.clone())
            .unwrap_or(IndexState::Unconfigured)
    }

    fn set_index_state(&self, state: IndexState) {
        if let Ok(mut s) = self.startup.lock() {
            *s = state;
        }
    }

    /// Marks the configured registry as not yet indexed, so control reports
    /// not ready until [`Self::index_at_start`] finishes. Call before serving.
    pub fn expect_registry(&self, tools: usize) {
        self.set_index_state(IndexState::Indexing {
            tools,
            attempts: 0,
            batch: 0,
            last_error: None,
        });
    }

    /// Indexes the registry control is configured with, retrying until it is
    /// done: after each failure the embedder batch halves and the wait
    /// doubles ([`StartupIndex`]). Every batch embedded is cached, so a busy
    /// embedder that times out on a large batch still makes progress. Only
    /// ends when the index is built.
    pub async fn index_at_start(
        &self,
        tools: &[ToolDescriptor],
        retry: StartupIndex,
    ) -> Arc<PreparedRegistry> {
        let started = Instant::now();
        let prepared = self.registry(tools).await;
        let business = prepared
            .registry()
            .tools()
            .iter()
            .filter(|t| t.is_business())
            .count();
        let (mut batch, mut wait, mut attempts) = (retry.batch.max(1), retry.backoff, 0u32);
        loop {
            attempts += 1;
            let last_error = match self.index_state() {
                IndexState::Indexing { last_error, .. } => last_error,
                _ => None,
            };
            self.set_index_state(IndexState::Indexing {
                tools: business,
                attempts,
                batch,
                last_error,
            });
            prepared.syncing.store(true, Ordering::Release);
            let result = sync_batched(&self.indexer, &self.generation, &prepared, batch).await;
            prepared.syncing.store(false, Ordering::Release);
            prepared.indexed.notify_waiters();
            match result {
                Ok(report) => {
                    let millis = started.elapsed().as_millis() as u64;
                    tracing::info!(
                        tools = report.tools,
                        upserted = report.upserted,
                        attempts,
                        millis,
                        "configured registry indexed"
                    );
                    self.set_index_state(IndexState::Ready {
                        tools: business,
                        attempts,
                        millis,
                    });
                    return prepared;
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempts, batch, retry_in = ?wait, "indexing the configured registry failed; retrying");
                    self.set_index_state(IndexState::Indexing {
                        tools: business,
                        attempts,
                        batch,
                        last_error: Some(e.to_string()),
                    });
                    tokio::time::sleep(wait).await;
                    batch = (batch / 2).max(retry.min_batch.max(1));
                    wait = (wait * 2).min(retry.max_backoff);
                }
            }
        }
    }

    /// The indexer (store, embedder, collection).
    pub fn indexer(&self) -> &Arc<Indexer> {
        &self.indexer
    }

    /// The ranking configuration.
    pub fn rank_config(&self) -> &RankConfig {
        &self.rank
    }

    /// The cached registry for `tools`, built on first sight.
    pub async fn registry(&self, tools: &[ToolDescriptor]) -> Arc<PreparedRegistry> {
        self.registry_at(registry_key(tools), tools).await
    }

    /// The registry a request names: by its digest when it carries one (the
    /// descriptors are read, hashed and built only when the digest is new),
    /// else by hashing its tools.
    pub async fn registry_of(
        &self,
        req: &ResolveRequest,
    ) -> Result<Arc<PreparedRegistry>, ResolveError> {
        let Some(digest) = &req.registry else {
            return Ok(self.registry(&req.tools).await);
        };
        let key = parse_digest(digest).ok_or(ResolveError::BadDigest)?;
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = self.registries.lock().await.get(&key) {
            p.used.store(now, Ordering::Relaxed);
            return Ok(p.clone());
        }
        // Not known: the tools must come with the digest (an empty registry
        // is its own digest and needs none).
        if req.tools.is_empty() && digest.as_str() != registry_digest([]) {
            return Err(ResolveError::UnknownRegistry);
        }
        if registry_key(&req.tools) != key {
            return Err(ResolveError::DigestMismatch);
        }
        Ok(self.registry_at(key, &req.tools).await)
    }

    /// The cached registry under `key` (the digest of `tools`), built on first sight.
    async fn registry_at(&self, key: [u8; 32], tools: &[ToolDescriptor]) -> Arc<PreparedRegistry> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut all = self.registries.lock().await;
        if let Some(p) = all.get(&key) {
            p.used.store(now, Ordering::Relaxed);
            return p.clone();
        }
        if all.len() >= self.settings.max_registries.max(1) {
            let oldest = all
                .iter()
                .min_by_key(|(_, p)| p.used.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                all.remove(&k);
            }
        }
        let registry = Registry::build(tools, self.overlay.as_deref(), &self.rank);
        let prepared = Arc::new(PreparedRegistry {
            registry,
            ready: AtomicBool::new(false),
            syncing: AtomicBool::new(false),
            synced_at: AtomicU64::new(0),
            failed_at: std::sync::Mutex::new(None),
            indexed: Notify::new(),
            used: AtomicU64::new(now),
        });
        all.insert(key, prepared.clone());
        prepared
    }

    /// Builds and indexes the registry of `tools` now, waiting for it (the
    /// command line, tests and benchmarks use this; requests index in the
    /// background instead). Fails when the embedder or the store does.
    pub async fn prepare(
        &self,
        tools: &[ToolDescriptor],
    ) -> Result<(Arc<PreparedRegistry>, SyncReport), SyncError> {
        let prepared = self.registry(tools).await;
        let report = sync(&self.indexer, &self.generation, &prepared).await?;
        Ok((prepared, report))
    }

    /// Starts a background index of `prepared` unless one runs, or one
    /// failed less than `index_retry` ago.
    fn spawn_index(&self, prepared: &Arc<PreparedRegistry>) {
        let recently_failed = prepared
            .failed_at
            .lock()
            .map(|f| f.is_some_and(|at| at.elapsed() < self.settings.index_retry))
            .unwrap_or(false);
        if recently_failed {
            return;
        }
        if prepared.syncing.swap(true, Ordering::AcqRel) {
            return;
        }
        let indexer = self.indexer.clone();
        let generation = self.generation.clone();
        let prepared = prepared.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let result = sync(&indexer, &generation, &prepared).await;
            prepared.syncing.store(false, Ordering::Release);
            prepared.indexed.notify_waiters();
            match result {
                Ok(r) => tracing::info!(
                    tools = r.tools,
                    upserted = r.upserted,
                    pruned = r.pruned,
                    rebuilt = r.rebuilt,
                    millis = started.elapsed().as_millis() as u64,
                    "registry indexed"
                ),
                Err(e) => {
                    if let Ok(mut f) = prepared.failed_at.lock() {
                        *f = Some(Instant::now());
                    }
                    tracing::warn!(error = %e, "indexing the registry failed; ranking lexically until it succeeds");
                }
            }
        });
    }

    /// Resolves one turn over the tools it carries (its digest, if any, is
    /// not consulted). Never fails: an outage answers the bounded fallback.
    pub async fn resolve(&self, req: &ResolveRequest) -> ResolveResponse {
        let started = Instant::now();
        let prepared = self.registry(&req.tools).await;
        self.resolve_over(prepared, req, started).await
    }

    /// Resolves one turn over the registry it names ([`Self::registry_of`]):
    /// fails only when that registry is not known and not sent. An outage
    /// answers the bounded fallback. Also returns the registry's size.
    pub async fn answer(
        &self,
        req: &ResolveRequest,
    ) -> Result<(ResolveResponse, usize), ResolveError> {
        let started = Instant::now();
        let prepared = self.registry_of(req).await?;
        let size = prepared.registry().len();
        Ok((self.resolve_over(prepared, req, started).await, size))
    }

    async fn resolve_over(
        &self,
        prepared: Arc<PreparedRegistry>,
        req: &ResolveRequest,
        started: Instant,
    ) -> ResolveResponse {
        let deadline = tokio::time::Instant::from_std(started) + self.settings.retrieval_timeout;
        let stale =
            prepared.synced_at.load(Ordering::Acquire) != self.generation.load(Ordering::Acquire);
        if !prepared.is_ready() || stale {
            // Registered before the index starts, so its end is not missed.
            let indexed = prepared.indexed.notified();
            self.spawn_index(&prepared);
            if !prepared.is_ready()
                && prepared.syncing.load(Ordering::Acquire)
                && self.all_embedded(&prepared).await
            {
                // Nothing to embed (the configured registry sent in another
                // order, or after an eviction): its index is a store write,
                // so wait for it within the deadline. A registry that needs
                // the embedder is ranked lexically meanwhile, without waiting.
                let _ = tokio::time::timeout_at(deadline, indexed).await;
            }
        }
        let mut timings = Timings::default();
        // A turn of several asks: each clause is retrieved as well.
        let clause_texts = match &self.rank.settings().clauses {
            c if c.enabled => Some(c.split(&req.turn)).filter(|c| c.len() >= 2),
            _ => None,
        }
        .unwrap_or_default();
        let retrieval = if req.turn.trim().is_empty() {
            // Nothing to embed: the ranking keeps the session's prior set.
            Ok(Cosines::default())
        } else if prepared.is_ready() {
            match tokio::time::timeout_at(
                deadline,
                self.cosines(
                    &prepared,
                    &req.turn,
                    &clause_texts,
                    Some(deadline),
                    &mut timings,
                ),
            )
            .await
            {
                Ok(Ok(Some(hits))) => Ok(hits),
                Ok(Ok(None)) => {
                    // The collection is gone (dropped, or a fresh Qdrant): rank
                    // lexically and rebuild it.
                    prepared.ready.store(false, Ordering::Release);
                    self.spawn_index(&prepared);
                    Err(Retrieval::Lexical)
                }
                Ok(Err(RetrievalError::Embed(EmbedError::Late))) => {
                    tracing::warn!(timeout = ?self.settings.retrieval_timeout, "the embedder would answer too late; ranking lexically");
                    Err(Retrieval::Lexical)
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "retrieval failed; answering the bounded fallback");
                    Err(Retrieval::Outage)
                }
                Err(_) => {
                    tracing::warn!(timeout = ?self.settings.retrieval_timeout, "retrieval timed out; ranking lexically");
                    Err(Retrieval::Lexical)
                }
            }
        } else {
            Err(Retrieval::Lexical)
        };
        let (cosines, how) = match retrieval {
            Ok(hits) => (Some(hits), Retrieval::Hybrid),
            Err(Retrieval::Lexical) => (Some(Cosines::default()), Retrieval::Lexical),
            Err(other) => (None, other),
        };
        // Clauses whose cosines came back, each with its own (none when
        // ranked lexically, on outage, or when a clause was not embedded).
        let clauses: Vec<Clause<'_>> = cosines
            .as_ref()
            .filter(|c| c.clauses.len() == clause_texts.len())
            .map(|c| {
                clause_texts
                    .iter()
                    .zip(&c.clauses)
                    .map(|(text, cosine)| Clause { text, cosine })
                    .collect()
            })
            .unwrap_or_default();
        let prior = match &req.session {
            Some(s) => self.sessions.lock().await.prior(s),
            None => Vec::new(),
        };
        let rank_started = Instant::now();
        let mut resolution = resolve_clauses(
            prepared.registry(),
            &self.rank,
            &Turn {
                text: &req.turn,
                phase: req.phase,
                prior: &prior,
                tool_choice: req.forced.first().map(String::as_str),
                cosine: cosines.as_ref().map(|c| c.turn.as_slice()),
            },
            &clauses,
        );
        timings.rank_us = rank_started.elapsed().as_micros() as u64;
        if how == Retrieval::Lexical {
            // Ranked without vectors: say so in the answer, the header and the counters.
            resolution.source = Source::Lexical;
        }
        let search = match &req.tool_search {
            Some(tool_search) if req.phase.offers_tool_search() => {
                let query = tool_search.query.as_deref().and_then(recovery::query_of);
                let found = match &query {
                    Some(query) => self.search_registry(&prepared, query, deadline).await,
                    None => Found::default(),
                };
                offer_tool_search(
                    &mut resolution,
                    prepared.registry(),
                    req.phase,
                    &found,
                    &prior,
                );
                query.map(|query| SearchAudit::new(query, &found, &resolution))
            }
            _ => None,
        };
        timings.total_us = started.elapsed().as_micros() as u64;
        let mut response = resolution.to_response();
        if resolution.source == Source::ControlFallback {
            tracing::warn!(
                phase = %req.phase,
                kept = response.tools.len(),
                prior = prior.len(),
                "control fallback: bounded over the prior set and floors"
            );
        }
        if let Some(search) = &search {
            tracing::info!(
                phase = %req.phase,
                found = search.found.len(),
                surfaced = search.surfaced.len(),
                retrieval = ?search.retrieval,
                "tool search"
            );
        }
        if let Some(session) = &req.session {
            let mut entry =
                AuditEntry::new(req, prepared.registry().len(), &resolution, how, timings);
            entry.search = search;
            let turn = self
                .sessions
                .lock()
                .await
                .record(session, &resolution, entry);
            response.turn = Some(turn);
        }
        response
    }

    /// The registry searched with the model's tool-search `query`: the best
    /// [`MAX_FOUND`] tools by the turn's ranking ([`pipeline::search`]),
    /// hybrid when the registry's vectors and the embedder answer before
    /// `deadline`, else lexical. Never fails.
    ///
    /// [`pipeline::search`]: keyhole_core::tools::rank::pipeline::search
    async fn search_registry(
        &self,
        prepared: &PreparedRegistry,
        query: &str,
        deadline: tokio::time::Instant,
    ) -> Found {
        let (cosine, retrieval) = if prepared.is_ready() {
            match tokio::time::timeout_at(
                deadline,
                self.cosine(prepared, query, Some(deadline), &mut Timings::default()),
            )
            .await
            {
                Ok(Ok(Some(hits))) => (hits, Retrieval::Hybrid),
                Ok(Ok(None)) | Ok(Err(RetrievalError::Embed(EmbedError::Late))) | Err(_) => {
                    (Vec::new(), Retrieval::Lexical)
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "tool search: retrieval failed; searching lexically");
                    (Vec::new(), Retrieval::Lexical)
                }
            }
        } else {
            (Vec::new(), Retrieval::Lexical)
        };
        let hits = keyhole_core::tools::rank::pipeline::search(
            prepared.registry(),
            &self.rank,
            query,
            &cosine,
            MAX_FOUND,
        );
        Found { hits, retrieval }
    }

    /// Whether every business tool's embedding text is in the embedder's cache.
    async fn all_embedded(&self, prepared: &PreparedRegistry) -> bool {
        let embedder = self.indexer.embedder();
        for tool in prepared
            .registry()
            .tools()
            .iter()
            .filter(|t| t.is_business())
        {
            if !embedder
                .is_cached(Side::Document, &tool.embedding_text())
                .await
            {
                return false;
            }
        }
        true
    }

    /// The turn's cosine similarities, by function name (`None`: the
    /// collection does not exist).
    async fn cosine(
        &self,
        prepared: &PreparedRegistry,
        turn: &str,
        deadline: Option<tokio::time::Instant>,
        timings: &mut Timings,
    ) -> Result<Option<Vec<(String, f32)>>, RetrievalError> {
        Ok(self
            .cosines(prepared, turn, &[], deadline, timings)
            .await?
            .map(|c| c.turn))
    }

    /// The cosine similarities of the turn and of each of its clauses, by
    /// function name (`None`: the collection does not exist). The turn and
    /// its clauses are embedded together: from the cache, or in the
    /// embedder's next request with the other turns waiting then
    /// ([`crate::embed::Embedder::embed_queries`]); the caller's deadline
    /// bounds the wait, and a text that would come back after it is not
    /// sent ([`EmbedError::Late`]). The turn's failure is the answer's; when
    /// a clause cannot be embedded the turn is answered without clauses.
    async fn cosines(
        &self,
        prepared: &PreparedRegistry,
        turn: &str,
        clauses: &[&str],
        deadline: Option<tokio::time::Instant>,
        timings: &mut Timings,
    ) -> Result<Option<Cosines>, RetrievalError> {
        let t = Instant::now();
        let texts: Vec<&str> = std::iter::once(turn)
            .chain(clauses.iter().copied())
            .collect();
        let mut vectors = self
            .indexer
            .embedder()
            .embed_queries(&texts, deadline)
            .await
            .into_iter();
        let q = vectors.next().unwrap_or(Err(EmbedError::Stopped))?;
        let clause_vectors = match vectors.collect::<Result<Vec<_>, _>>() {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "a clause could not be embedded; ranking the turn whole");
                Vec::new()
            }
        };
        timings.embed_us = t.elapsed().as_micros() as u64;
        let t = Instant::now();
        let registry = prepared.registry();
        let k = self.settings.search_k.unwrap_or(registry.len()).max(1);
        let known = |hits: Vec<Hit>| -> Vec<(String, f32)> {
            hits.into_iter()
                .filter(|h| registry.index_of_name(&h.name).is_some())
                .map(|h| (h.name, h.score))
                .collect()
        };
        // The turn and its clauses in one search request.
        let vectors: Vec<&[f32]> = std::iter::once(&*q)
            .chain(clause_vectors.iter().map(|v| &**v))
            .collect();
        let mut answers = self.indexer.search_batch(&vectors, k).await?.into_iter();
        let mut hits_of = || match answers.next() {
            Some(Search::Hits(hits)) => Some(known(hits)),
            Some(Search::Missing) | None => None,
        };
        let Some(turn) = hits_of() else {
            return Ok(None);
        };
        let mut found = Cosines {
            turn,
            clauses: Vec::with_capacity(clause_vectors.len()),
        };
        for _ in &clause_vectors {
            let Some(hits) = hits_of() else {
                return Ok(None);
            };
            found.clauses.push(hits);
        }
        timings.search_us = t.elapsed().as_micros() as u64;
        Ok(Some(found))
    }

    /// The cosine similarity of `text` to every tool of an indexed registry,
    /// best first (empty when its collection does not exist). For discovery
    /// (`keyhole search`). Fails when the embedder or the store does.
    pub async fn turn_cosine(
        &self,
        prepared: &PreparedRegistry,
        text: &str,
    ) -> Result<Vec<(String, f32)>, RetrievalError> {
        Ok(self
            .cosine(prepared, text, None, &mut Timings::default())
            .await?
            .unwrap_or_default())
    }

    /// The full resolution of one turn against an already prepared registry
    /// with explicit cosines (evaluation and dry runs; no session state).
    pub fn rank(&self, prepared: &PreparedRegistry, turn: &Turn<'_>) -> Resolution {
        rank_turn(prepared.registry(), &self.rank, turn)
    }

    /// A session's audit trail, oldest first; `None` for an unknown session.
    pub async fn audit(&self, session: &str) -> Option<Vec<AuditEntry>> {
        self.sessions.lock().await.trail(session)
    }

    /// Every session's audit entries in `[since_ms, until_ms)`.
    pub async fn audit_window(&self, since_ms: u64, until_ms: u64) -> Vec<SessionTrail> {
        self.sessions.lock().await.window(since_ms, until_ms)
    }

    /// Attaches an answer's judged calls to the session's entry of `turn`,
    /// with the reason of each miss; `None` when the entry is not kept.
    pub async fn record_calls(
        &self,
        session: &str,
        turn: u64,
        calls: &[keyhole_core::proto::calls::CalledTool],
        bytes: Bytes,
    ) -> Option<Vec<CallAudit>> {
        self.sessions
            .lock()
            .await
            .record_calls(session, turn, calls, bytes)
    }
}

/// What a tool search found, best first, and how it was ranked.
#[derive(Debug, Clone, Default)]
pub(crate) struct Found {
    /// The best tools for the query (at most [`MAX_FOUND`]).
    pub(crate) hits: Vec<Candidate>,
    /// Hybrid, or lexical when vectors were not available in time.
    pub(crate) retrieval: Retrieval,
}

impl std::ops::Deref for Found {
    type Target = [Candidate];

    fn deref(&self) -> &[Candidate] {
        &self.hits
    }
}

/// Recomposes `resolution` for a turn whose filter adds the control tool:
/// one place of the budget less, and the `found` tools first after forced
/// ones, with the reason `recovery` ([`recovery::compose`]). The engine's
/// candidates keep their scores; the found ones carry their search scores.
pub(crate) fn offer_tool_search(
    resolution: &mut Resolution,
    registry: &Registry,
    phase: keyhole_core::Phase,
    found: &[Candidate],
    prior: &[String],
) {
    let tool = |c: &Candidate| SurfacedTool {
        name: c.name.clone(),
        reason: c.reason,
        mutating: registry.mutating().contains(&c.name),
    };
    let resolved: Vec<SurfacedTool> = resolution.candidates.iter().map(tool).collect();
    let found_tools: Vec<SurfacedTool> = found.iter().map(tool).collect();
    let composed = recovery::compose(phase, 1, &resolved, &found_tools, prior);
    let score = |name: &str| {
        resolution
            .candidates
            .iter()
            .chain(found)
            .find(|c| c.name == name)
            .map_or(0.0, |c| c.score)
    };
    resolution.candidates = composed
        .iter()
        .map(|t| Candidate {
            name: t.name.clone(),
            reason: t.reason,
            score: score(&t.name),
        })
        .collect();
    resolution.mutating = composed
        .iter()
        .filter(|t| t.mutating)
        .map(|t| t.name.clone())
        .collect();
}

/// Syncs one registry and marks it ready at the generation it saw. A failed
/// sync changes nothing: a registry that was ready keeps its stored vectors.
async fn sync(
    indexer: &Indexer,
    generation: &AtomicU64,
    prepared: &PreparedRegistry,
) -> Result<SyncReport, SyncError> {
    sync_batched(indexer, generation, prepared, 0).await
}

/// [`sync`], embedding at most `batch` texts per embedder call (0: the embedder's own).
async fn sync_batched(
    indexer: &Indexer,
    generation: &AtomicU64,
    prepared: &PreparedRegistry,
    batch: usize,
) -> Result<SyncReport, SyncError> {
    let report = indexer.sync_batched(prepared.registry(), batch).await?;
    let gen = if report.upserted > 0 || report.pruned > 0 || report.rebuilt {
        generation.fetch_add(1, Ordering::AcqRel) + 1
    } else {
        generation.load(Ordering::Acquire)
    };
    prepared.synced_at.store(gen, Ordering::Release);
    prepared.ready.store(true, Ordering::Release);
    Ok(report)
}

#[cfg(test)]
mod pinned;
#[cfg(test)]
mod tests;
