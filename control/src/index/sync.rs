//! Incremental indexing: keep a namespace's collection equal to a registry's
//! business tools, embedding only what changed.
//!
//! Each point carries the content hash of its embedding text (and of the
//! document model). A sync compares the stored hashes with the registry's:
//! - an unchanged tool is never re-embedded — a registry re-sent unchanged
//!   costs zero embedder calls and zero writes;
//! - a new or changed tool is embedded and upserted under its stable id
//!   ([`point_id`] of its name);
//! - a tool that left the registry is pruned;
//! - a collection whose vector size differs from the embedder's (a new
//!   embedding model) is dropped and rebuilt.

use super::{collection_name, point_id, IndexError, Point, PointPayload, Search, VectorStore};
use crate::embed::{EmbedError, Embedder, Side};
use keyhole_core::tools::rank::registry::Registry;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use uuid::Uuid;

/// Why a sync failed. Nothing was pruned before the failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// The embedder failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// The store failed.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// What a sync did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Business tools in the registry.
    pub tools: usize,
    /// Tools whose stored point was already current.
    pub unchanged: usize,
    /// Points written (new or changed tools).
    pub upserted: usize,
    /// Points removed (tools that left the registry).
    pub pruned: usize,
    /// The collection was dropped and rebuilt (vector size changed).
    pub rebuilt: bool,
}

/// Keeps one namespace's collection in step with registries.
pub struct Indexer {
    embedder: Arc<Embedder>,
    store: Arc<dyn VectorStore>,
    namespace: String,
    collection: String,
    /// The embedder's vector size once seen (0 = not yet).
    dim: AtomicUsize,
    /// One sync at a time: two concurrent syncs would both embed and write.
    running: tokio::sync::Mutex<()>,
}

/// The content hash of one tool's embedding text under a document model.
pub fn content_hash(model: &str, text: &str) -> String {
    let mut h = Sha256::new();
    h.update(model.as_bytes());
    h.update([0u8]);
    h.update(text.as_bytes());
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Desired {
    id: Uuid,
    text: String,
    payload: PointPayload,
}

impl Indexer {
    /// An indexer for `namespace` (which names the collection, see
    /// [`collection_name`]). Fails on an unusable namespace.
    pub fn try_new(
        embedder: Arc<Embedder>,
        store: Arc<dyn VectorStore>,
        namespace: &str,
    ) -> Result<Indexer, IndexError> {
        let collection = collection_name(namespace)?;
        Ok(Indexer {
            embedder,
            store,
            namespace: namespace.to_owned(),
            collection,
            dim: AtomicUsize::new(0),
            running: tokio::sync::Mutex::new(()),
        })
    }

    /// The collection this indexer maintains.
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn VectorStore> {
        &self.store
    }

    /// The embedder.
    pub fn embedder(&self) -> &Arc<Embedder> {
        &self.embedder
    }

    /// Records the embedder's vector size (seen on a query embedding), so the
    /// next sync notices a collection of another size.
    pub fn note_dimension(&self, dim: usize) {
        if dim > 0 {
            self.dim.store(dim, Ordering::Relaxed);
        }
    }

    /// The `k` tools nearest to a query vector.
    pub async fn search(&self, vector: &[f32], k: usize) -> Result<Search, IndexError> {
        self.note_dimension(vector.len());
        self.store.search(&self.collection, vector, k, None).await
    }

    /// [`Self::search`] for several vectors (a turn and its clauses), in one
    /// request where the store takes a batch; one answer per vector, in order.
    pub async fn search_batch(
        &self,
        vectors: &[&[f32]],
        k: usize,
    ) -> Result<Vec<Search>, IndexError> {
        if let Some(v) = vectors.first() {
            self.note_dimension(v.len());
        }
        self.store.search_batch(&self.collection, vectors, k).await
    }

    fn desired(&self, registry: &Registry) -> Vec<Desired> {
        let model = self.embedder.model(Side::Document);
        registry
            .tools()
            .iter()
            .filter(|t| t.is_business())
            .map(|t| {
                let text = t.embedding_text();
                Desired {
                    id: point_id(&self.namespace, &t.name),
                    payload: PointPayload {
                        name: t.name.clone(),
                        hash: content_hash(model, &text),
                        category: t.meta.as_ref().and_then(|m| m.category.clone()),
                        domain: t.domain.clone(),
                    },
                    text,
                }
            })
            .collect()
    }

    /// Brings the collection in step with `registry`'s business tools.
    pub async fn sync(&self, registry: &Registry) -> Result<SyncReport, SyncError> {
        self.sync_batched(registry, 0).await
    }

    /// [`Self::sync`], embedding at most `batch` texts per embedder call (0:
    /// the embedder's own batching). Every batch embedded is cached, so a
    /// sync retried after a failure (a busy embedder timing out) embeds only
    /// what is still missing.
    pub async fn sync_batched(
        &self,
        registry: &Registry,
        batch: usize,
    ) -> Result<SyncReport, SyncError> {
        let _running = self.running.lock().await;
        let coll = self.collection.as_str();
        let desired = self.desired(registry);
        let mut report = SyncReport {
            tools: desired.len(),
            ..SyncReport::default()
        };

        let mut info = self.store.info(coll).await?;
        let known = self.dim.load(Ordering::Relaxed);
        let mut stored: HashMap<Uuid, String> = HashMap::new();
        if info.is_some_and(|i| known != 0 && i.vector_size != known) {
            self.store.drop_collection(coll).await?;
            info = None;
            report.rebuilt = true;
        } else if info.is_some() {
            stored = self
                .store
                .payloads(coll)
                .await?
                .into_iter()
                .map(|(id, p)| (id, p.hash))
                .collect();
        }
        let wanted: HashSet<Uuid> = desired.iter().map(|d| d.id).collect();
        let orphans: Vec<Uuid> = stored
            .keys()
            .filter(|id| !wanted.contains(id))
            .copied()
            .collect();
        let mut changed: Vec<&Desired> = desired
            .iter()
            .filter(|d| stored.get(&d.id) != Some(&d.payload.hash))
            .collect();
        report.unchanged = desired.len() - changed.len();
        if changed.is_empty() && orphans.is_empty() && info.is_some() {
            return Ok(report);
        }

        let mut vectors = self.embed(&changed, batch).await?;
        let dim = vectors
            .first()
            .map(|v| v.len())
            .or(info.map(|i| i.vector_size))
            .unwrap_or(known);
        if dim == 0 {
            // Nothing to embed and nothing stored: no collection is needed yet.
            return Ok(report);
        }
        self.note_dimension(dim);
        if info.is_some_and(|i| i.vector_size != dim) {
            // The embedder changed size under the same model names: rebuild.
            self.store.drop_collection(coll).await?;
            report.rebuilt = true;
            changed = desired.iter().collect();
            report.unchanged = 0;
            vectors = self.embed(&changed, batch).await?;
        }
        self.store.ensure_collection(coll, dim).await?;
        let points: Vec<Point> = changed
            .iter()
            .zip(vectors)
            .map(|(d, v)| Point {
                id: d.id,
                vector: v.to_vec(),
                payload: d.payload.clone(),
            })
            .collect();
        report.upserted = points.len();
        self.store.upsert(coll, points).await?;
        if !report.rebuilt {
            self.store.delete(coll, &orphans).await?;
            report.pruned = orphans.len();
        }
        Ok(report)
    }

    async fn embed(
        &self,
        changed: &[&Desired],
        batch: usize,
    ) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        if changed.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<&str> = changed.iter().map(|d| d.text.as_str()).collect();
        if batch == 0 {
            return self.embedder.embed(Side::Document, &texts).await;
        }
        let mut vectors = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(batch) {
            vectors.extend(self.embedder.embed(Side::Document, chunk).await?);
        }
        Ok(vectors)
    }
}
