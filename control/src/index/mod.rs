//! The vector index: tool passage embeddings, one collection per registry
//! namespace, behind one trait with two backends.
//!
//! - [`MemoryStore`]: the embedded default — an exact cosine scan over a
//!   normalised `f32` matrix, saved to disk atomically (write + rename) and
//!   reloaded at start. At tool-registry scale (≤10k tools) an exact scan is
//!   both faster and more accurate than an approximate index.
//! - [`QdrantStore`]: a Qdrant server through the official `qdrant-client`
//!   (gRPC), cosine distance, payload indexes on `category` and `domain`.
//!
//! A search on a collection that does not exist yet is not an error: it
//! answers [`Search::Missing`], which the caller treats as an empty hit list
//! while it (re)builds the collection. Every other failure is an
//! [`IndexError`], which the caller treats as an outage.
//!
//! # Layout
//! - [`memory`]: the embedded store.
//! - [`qdrant`]: the Qdrant store.
//! - [`sync`]: incremental indexing of a registry by content hash.

pub mod memory;
pub mod qdrant;
pub mod sync;

pub use memory::MemoryStore;
pub use qdrant::QdrantStore;
pub use sync::{Indexer, SyncReport};

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use uuid::Uuid;

/// A boxed future of a store operation (the trait is used as `dyn VectorStore`).
pub type IndexFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, IndexError>> + Send + 'a>>;

/// What a point carries besides its vector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointPayload {
    /// The tool's function name, as requests carry it.
    pub name: String,
    /// Content hash of the embedded text (and the model that embedded it):
    /// a point whose hash matches is never re-embedded.
    pub hash: String,
    /// Overlay category, when known.
    #[serde(default)]
    pub category: Option<String>,
    /// Domain, when known.
    #[serde(default)]
    pub domain: Option<String>,
}

/// One point to store.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Stable id: [`point_id`] of the tool name.
    pub id: Uuid,
    /// The passage embedding (any norm; stores normalise or use cosine).
    pub vector: Vec<f32>,
    /// The payload.
    pub payload: PointPayload,
}

/// One search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The point id.
    pub id: Uuid,
    /// Cosine similarity to the query.
    pub score: f32,
    /// The point's tool name.
    pub name: String,
}

/// A payload predicate: every field that is set must match exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Predicate {
    /// Only points of this category.
    pub category: Option<String>,
    /// Only points of this domain.
    pub domain: Option<String>,
}

impl Predicate {
    /// Whether a payload satisfies the predicate.
    pub fn matches(&self, p: &PointPayload) -> bool {
        let ok = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
        ok(&self.category, &p.category) && ok(&self.domain, &p.domain)
    }
}

/// Size and shape of a stored collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectionInfo {
    /// Dimension of its vectors.
    pub vector_size: usize,
    /// Number of points.
    pub points: usize,
}

/// A search's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Search {
    /// Hits, best first.
    Hits(Vec<Hit>),
    /// The collection does not exist (yet): no hits; the caller rebuilds it.
    Missing,
}

/// A vector store holding one collection per registry namespace.
pub trait VectorStore: Send + Sync {
    /// Creates the collection for vectors of `vector_size` if it does not
    /// exist. Fails when it exists with another size (drop it first).
    fn ensure_collection<'a>(
        &'a self,
        collection: &'a str,
        vector_size: usize,
    ) -> IndexFuture<'a, ()>;

    /// The collection's vector size and point count; `None` when it does not exist.
    fn info<'a>(&'a self, collection: &'a str) -> IndexFuture<'a, Option<CollectionInfo>>;

    /// Inserts or replaces points (by id). Fails when the collection does not
    /// exist or a vector has the wrong size.
    fn upsert<'a>(&'a self, collection: &'a str, points: Vec<Point>) -> IndexFuture<'a, ()>;

    /// Deletes points by id; unknown ids and a missing collection are no error.
    fn delete<'a>(&'a self, collection: &'a str, ids: &'a [Uuid]) -> IndexFuture<'a, ()>;

    /// The `k` points most similar to `vector` (cosine) that satisfy `filter`,
    /// best first, ties by id. [`Search::Missing`] when the collection does
    /// not exist.
    fn search<'a>(
        &'a self,
        collection: &'a str,
        vector: &'a [f32],
        k: usize,
        filter: Option<&'a Predicate>,
    ) -> IndexFuture<'a, Search>;

    /// The `k` points most similar to each of `vectors`: one answer per
    /// vector, in order, each as [`Self::search`] would give it. A backend
    /// across the network answers them in one request (a turn and its
    /// clauses: one round trip); this default asks one after another.
    fn search_batch<'a>(
        &'a self,
        collection: &'a str,
        vectors: &'a [&'a [f32]],
        k: usize,
    ) -> IndexFuture<'a, Vec<Search>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(vectors.len());
            for v in vectors {
                out.push(self.search(collection, v, k, None).await?);
            }
            Ok(out)
        })
    }

    /// Every point's id and payload (no vectors): what incremental indexing
    /// compares against. Empty when the collection does not exist.
    fn payloads<'a>(&'a self, collection: &'a str) -> IndexFuture<'a, Vec<(Uuid, PointPayload)>>;

    /// Drops the collection; a missing collection is no error.
    fn drop_collection<'a>(&'a self, collection: &'a str) -> IndexFuture<'a, ()>;

    /// The backend's name, for logs.
    fn backend(&self) -> &'static str;
}

/// A store failure: retrieval treats every one of them as an outage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// The collection does not exist (for writes; searches answer [`Search::Missing`]).
    #[error("collection {collection:?} does not exist")]
    MissingCollection {
        /// The collection.
        collection: String,
    },
    /// A vector's size differs from the collection's.
    #[error("collection {collection:?} holds vectors of size {expected}, got {got}")]
    VectorSize {
        /// The collection.
        collection: String,
        /// The collection's size.
        expected: usize,
        /// The offered size.
        got: usize,
    },
    /// A vector is empty or not finite.
    #[error("point {id} has an empty or non-finite vector")]
    BadVector {
        /// The point.
        id: Uuid,
    },
    /// The on-disk index could not be read or written.
    #[error("vector index file {path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The on-disk index is not in the expected format.
    #[error("vector index file {path} is corrupt: {problem}")]
    Corrupt {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The Qdrant server failed or could not be reached.
    #[error("qdrant {operation} on {collection:?}: {source}")]
    Qdrant {
        /// The operation (`search`, `upsert`, …).
        operation: &'static str,
        /// The collection.
        collection: String,
        /// The client's error.
        #[source]
        source: Box<qdrant_client::QdrantError>,
    },
    /// A stored point could not be read back.
    #[error("collection {collection:?}: malformed point: {problem}")]
    MalformedPoint {
        /// The collection.
        collection: String,
        /// What is wrong.
        problem: String,
    },
    /// The namespace cannot name a collection.
    #[error("registry namespace {namespace:?} must be 1 to 64 characters of [A-Za-z0-9_-]")]
    BadNamespace {
        /// The namespace.
        namespace: String,
    },
}

/// The collection of a registry namespace (`keyhole-{namespace}`).
///
/// Fails unless the namespace is 1–64 characters of `[A-Za-z0-9_-]` (it also
/// names a file of the embedded store).
pub fn collection_name(namespace: &str) -> Result<String, IndexError> {
    let ok = (1..=64).contains(&namespace.len())
        && namespace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        return Err(IndexError::BadNamespace {
            namespace: namespace.to_owned(),
        });
    }
    Ok(format!("keyhole-{namespace}"))
}

/// The stable point id of a tool: UUID v5 of its function name in the
/// namespace's own UUID namespace (itself UUID v5 of `keyhole:{namespace}` in
/// the URL namespace). The same tool keeps its id across restarts and stores.
pub fn point_id(namespace: &str, name: &str) -> Uuid {
    let ns = Uuid::new_v5(
        &Uuid::NAMESPACE_URL,
        format!("keyhole:{namespace}").as_bytes(),
    );
    Uuid::new_v5(&ns, name.as_bytes())
}

/// `v` scaled to unit length; `None` when it is empty, zero or not finite.
pub(crate) fn normalised(v: &[f32]) -> Option<Vec<f32>> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if v.is_empty() || !norm.is_finite() || norm == 0.0 {
        return None;
    }
    Some(v.iter().map(|x| x / norm).collect())
}

#[cfg(test)]
mod tests;
