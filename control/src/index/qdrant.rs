//! A Qdrant server as the vector store, through the official `qdrant-client`
//! (gRPC; built without its default features, so no `protoc` is needed).
//!
//! Collections use cosine distance and get keyword payload indexes on
//! `category` and `domain`, the fields a [`Predicate`] filters on. A gRPC
//! `NOT_FOUND` (Qdrant's 404) on a search means the collection was never
//! created or was dropped: the search answers [`Search::Missing`] so the
//! caller degrades to an empty hit list and rebuilds. Every other error is
//! an [`IndexError::Qdrant`], an outage.

use super::{
    CollectionInfo, Hit, IndexError, IndexFuture, Point, PointPayload, Predicate, Search,
    VectorStore,
};
use qdrant_client::qdrant::{
    vectors_config, Condition, CreateCollectionBuilder, CreateFieldIndexCollectionBuilder,
    DeletePointsBuilder, Distance, FieldType, Filter, PointId, PointStruct, PointsIdsList,
    QueryBatchPointsBuilder, QueryPointsBuilder, ScrollPointsBuilder, UpsertPointsBuilder,
    VectorParamsBuilder,
};
use qdrant_client::{Payload, Qdrant, QdrantError};
use std::collections::HashMap;
use std::time::Duration;
use uuid::Uuid;

/// Points per upsert request.
const UPSERT_CHUNK: usize = 256;
/// Points per scroll page.
const SCROLL_PAGE: u32 = 1024;
/// gRPC status code `NOT_FOUND`.
const GRPC_NOT_FOUND: i32 = 5;

/// The Qdrant store.
pub struct QdrantStore {
    client: Qdrant,
    url: String,
    /// Copies of each shard in a collection this store creates.
    replication_factor: u32,
}

impl std::fmt::Debug for QdrantStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QdrantStore")
            .field("url", &self.url)
            .field("replication_factor", &self.replication_factor)
            .finish()
    }
}

impl QdrantStore {
    /// A client for the server at `url` (gRPC, e.g. `http://127.0.0.1:6334`).
    /// Connects lazily: an unreachable server shows up as an outage on first use.
    ///
    /// Fails when the URL is not a valid URI.
    pub fn connect(url: &str, timeout: Duration) -> Result<QdrantStore, IndexError> {
        let client = Qdrant::from_url(url)
            .timeout(timeout)
            .skip_compatibility_check()
            .build()
            .map_err(|e| qdrant_error("connect", "", e))?;
        Ok(QdrantStore {
            client,
            url: url.to_owned(),
            replication_factor: 1,
        })
    }

    /// Collections this store creates keep `factor` copies of each shard
    /// (Qdrant's distributed mode: a search still answers while all but one
    /// copy of every shard is down). An existing collection keeps its own.
    pub fn with_replication_factor(mut self, factor: u32) -> QdrantStore {
        self.replication_factor = factor.max(1);
        self
    }
}

fn qdrant_error(operation: &'static str, collection: &str, source: QdrantError) -> IndexError {
    IndexError::Qdrant {
        operation,
        collection: collection.to_owned(),
        source: Box::new(source),
    }
}

/// Whether the server said the collection (or point) does not exist.
fn is_not_found(e: &QdrantError) -> bool {
    matches!(e, QdrantError::ResponseError { status } if i32::from(status.code()) == GRPC_NOT_FOUND)
}

fn payload_of(p: &PointPayload) -> Payload {
    let mut out = Payload::new();
    out.insert("name", p.name.clone());
    out.insert("hash", p.hash.clone());
    if let Some(c) = &p.category {
        out.insert("category", c.clone());
    }
    if let Some(d) = &p.domain {
        out.insert("domain", d.clone());
    }
    out
}

fn read_payload(
    collection: &str,
    map: HashMap<String, qdrant_client::qdrant::Value>,
) -> Result<PointPayload, IndexError> {
    Payload::from(map)
        .deserialize()
        .map_err(|e| IndexError::MalformedPoint {
            collection: collection.to_owned(),
            problem: e.to_string(),
        })
}

/// A search's points as hits, in the embedded store's order: best first,
/// ties by id.
fn hits_of(
    collection: &str,
    points: Vec<qdrant_client::qdrant::ScoredPoint>,
) -> Result<Search, IndexError> {
    let mut hits = Vec::with_capacity(points.len());
    for p in points {
        let id = read_id(collection, p.id)?;
        let payload = read_payload(collection, p.payload)?;
        hits.push(Hit {
            id,
            score: p.score,
            name: payload.name,
        });
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    Ok(Search::Hits(hits))
}

fn read_id(collection: &str, id: Option<PointId>) -> Result<Uuid, IndexError> {
    use qdrant_client::qdrant::point_id::PointIdOptions;
    let malformed = |problem: String| IndexError::MalformedPoint {
        collection: collection.to_owned(),
        problem,
    };
    match id.and_then(|id| id.point_id_options) {
        Some(PointIdOptions::Uuid(s)) => {
            Uuid::parse_str(&s).map_err(|e| malformed(format!("point id {s:?}: {e}")))
        }
        other => Err(malformed(format!("point id {other:?} is not a UUID"))),
    }
}

fn filter_of(p: &Predicate) -> Option<Filter> {
    let mut conditions = Vec::new();
    if let Some(c) = &p.category {
        conditions.push(Condition::matches("category", c.clone()));
    }
    if let Some(d) = &p.domain {
        conditions.push(Condition::matches("domain", d.clone()));
    }
    (!conditions.is_empty()).then(|| Filter::must(conditions))
}

impl VectorStore for QdrantStore {
    fn ensure_collection<'a>(
        &'a self,
        collection: &'a str,
        vector_size: usize,
    ) -> IndexFuture<'a, ()> {
        Box::pin(async move {
            if let Some(info) = self.info(collection).await? {
                if info.vector_size != vector_size {
                    return Err(IndexError::VectorSize {
                        collection: collection.to_owned(),
                        expected: info.vector_size,
                        got: vector_size,
                    });
                }
                return Ok(());
            }
            let params = VectorParamsBuilder::new(vector_size as u64, Distance::Cosine);
            self.client
                .create_collection(
                    CreateCollectionBuilder::new(collection)
                        .vectors_config(params)
                        .replication_factor(self.replication_factor),
                )
                .await
                .map_err(|e| qdrant_error("create collection", collection, e))?;
            for field in ["category", "domain"] {
                self.client
                    .create_field_index(
                        CreateFieldIndexCollectionBuilder::new(
                            collection,
                            field,
                            FieldType::Keyword,
                        )
                        .wait(true),
                    )
                    .await
                    .map_err(|e| qdrant_error("create payload index", collection, e))?;
            }
            Ok(())
        })
    }

    fn info<'a>(&'a self, collection: &'a str) -> IndexFuture<'a, Option<CollectionInfo>> {
        Box::pin(async move {
            let info = match self.client.collection_info(collection).await {
                Ok(r) => r.result,
                Err(e) if is_not_found(&e) => return Ok(None),
                Err(e) => return Err(qdrant_error("collection info", collection, e)),
            };
            let malformed = |problem: &str| IndexError::MalformedPoint {
                collection: collection.to_owned(),
                problem: problem.to_owned(),
            };
            let info = info.ok_or_else(|| malformed("no collection info"))?;
            let size = info
                .config
                .as_ref()
                .and_then(|c| c.params.as_ref())
                .and_then(|p| p.vectors_config.as_ref())
                .and_then(|v| v.config.as_ref())
                .and_then(|c| match c {
                    vectors_config::Config::Params(p) => Some(p.size),
                    vectors_config::Config::ParamsMap(_) => None,
                })
                .ok_or_else(|| malformed("not a single unnamed dense vector"))?;
            Ok(Some(CollectionInfo {
                vector_size: size as usize,
                points: info.points_count.unwrap_or(0) as usize,
            }))
        })
    }

    fn upsert<'a>(&'a self, collection: &'a str, points: Vec<Point>) -> IndexFuture<'a, ()> {
        Box::pin(async move {
            let Some(info) = self.info(collection).await? else {
                return Err(IndexError::MissingCollection {
                    collection: collection.to_owned(),
                });
            };
            let mut structs = Vec::with_capacity(points.len());
            for p in points {
                if p.vector.len() != info.vector_size {
                    return Err(IndexError::VectorSize {
                        collection: collection.to_owned(),
                        expected: info.vector_size,
                        got: p.vector.len(),
                    });
                }
                if super::normalised(&p.vector).is_none() {
                    return Err(IndexError::BadVector { id: p.id });
                }
                structs.push(PointStruct::new(
                    p.id.to_string(),
                    p.vector,
                    payload_of(&p.payload),
                ));
            }
            if structs.is_empty() {
                return Ok(());
            }
            self.client
                .upsert_points_chunked(
                    UpsertPointsBuilder::new(collection, structs).wait(true),
                    UPSERT_CHUNK,
                )
                .await
                .map_err(|e| qdrant_error("upsert", collection, e))?;
            Ok(())
        })
    }

    fn delete<'a>(&'a self, collection: &'a str, ids: &'a [Uuid]) -> IndexFuture<'a, ()> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(());
            }
            let ids: Vec<PointId> = ids.iter().map(|id| PointId::from(id.to_string())).collect();
            match self
                .client
                .delete_points(
                    DeletePointsBuilder::new(collection)
                        .points(PointsIdsList { ids })
                        .wait(true),
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if is_not_found(&e) => Ok(()),
                Err(e) => Err(qdrant_error("delete", collection, e)),
            }
        })
    }

    fn search<'a>(
        &'a self,
        collection: &'a str,
        vector: &'a [f32],
        k: usize,
        filter: Option<&'a Predicate>,
    ) -> IndexFuture<'a, Search> {
        Box::pin(async move {
            let mut query = QueryPointsBuilder::new(collection)
                .query(vector.to_vec())
                .limit(k as u64)
                .with_payload(true);
            if let Some(f) = filter.and_then(filter_of) {
                query = query.filter(f);
            }
            match self.client.query(query).await {
                Ok(r) => hits_of(collection, r.result),
                Err(e) if is_not_found(&e) => Ok(Search::Missing),
                Err(e) => Err(qdrant_error("search", collection, e)),
            }
        })
    }

    fn search_batch<'a>(
        &'a self,
        collection: &'a str,
        vectors: &'a [&'a [f32]],
        k: usize,
    ) -> IndexFuture<'a, Vec<Search>> {
        Box::pin(async move {
            if vectors.is_empty() {
                return Ok(Vec::new());
            }
            let queries: Vec<_> = vectors
                .iter()
                .map(|v| {
                    QueryPointsBuilder::new(collection)
                        .query(v.to_vec())
                        .limit(k as u64)
                        .with_payload(true)
                        .build()
                })
                .collect();
            let batches = match self
                .client
                .query_batch(QueryBatchPointsBuilder::new(collection, queries))
                .await
            {
                Ok(r) => r.result,
                Err(e) if is_not_found(&e) => return Ok(vec![Search::Missing; vectors.len()]),
                Err(e) => return Err(qdrant_error("search", collection, e)),
            };
            if batches.len() != vectors.len() {
                return Err(IndexError::MalformedPoint {
                    collection: collection.to_owned(),
                    problem: format!(
                        "{} answers to a batch of {} searches",
                        batches.len(),
                        vectors.len()
                    ),
                });
            }
            batches
                .into_iter()
                .map(|b| hits_of(collection, b.result))
                .collect()
        })
    }

    fn payloads<'a>(&'a self, collection: &'a str) -> IndexFuture<'a, Vec<(Uuid, PointPayload)>> {
        Box::pin(async move {
            let mut out = Vec::new();
            let mut offset: Option<PointId> = None;
            loop {
                let mut page = ScrollPointsBuilder::new(collection)
                    .limit(SCROLL_PAGE)
                    .with_payload(true);
                if let Some(o) = offset.take() {
                    page = page.offset(o);
                }
                let resp = match self.client.scroll(page).await {
                    Ok(r) => r,
                    Err(e) if is_not_found(&e) => return Ok(Vec::new()),
                    Err(e) => return Err(qdrant_error("scroll", collection, e)),
                };
                for p in resp.result {
                    out.push((
                        read_id(collection, p.id)?,
                        read_payload(collection, p.payload)?,
                    ));
                }
                match resp.next_page_offset {
                    Some(next) => offset = Some(next),
                    None => return Ok(out),
                }
            }
        })
    }

    fn drop_collection<'a>(&'a self, collection: &'a str) -> IndexFuture<'a, ()> {
        Box::pin(async move {
            match self.client.delete_collection(collection).await {
                Ok(_) => Ok(()),
                Err(e) if is_not_found(&e) => Ok(()),
                Err(e) => Err(qdrant_error("drop collection", collection, e)),
            }
        })
    }

    fn backend(&self) -> &'static str {
        "qdrant"
    }
}
