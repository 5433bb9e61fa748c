//! One conformance suite for every [`VectorStore`]: every test of the store
//! contract runs on [`MemoryStore`] and on [`QdrantStore`] (the server
//! `scripts/with-services.sh` starts; a missing server fails the test, it is
//! never skipped). Each test uses a collection of its own.

use super::*;
use crate::test_util::{fresh_namespace, qdrant_store, stores, FakeEmbedder};
use keyhole_core::proto::tools::ToolDescriptor;
use keyhole_core::tools::rank::config::RankConfig;
use keyhole_core::tools::rank::registry::Registry;
use std::sync::Arc;

fn payload(name: &str, category: &str, domain: &str) -> PointPayload {
    PointPayload {
        name: name.into(),
        hash: format!("h-{name}"),
        category: Some(category.into()),
        domain: Some(domain.into()),
    }
}

fn point(name: &str, vector: [f32; 3], category: &str, domain: &str) -> Point {
    Point {
        id: point_id("conformance", name),
        vector: vector.to_vec(),
        payload: payload(name, category, domain),
    }
}

fn names(s: Search) -> Vec<String> {
    match s {
        Search::Hits(h) => h.into_iter().map(|h| h.name).collect(),
        Search::Missing => panic!("collection missing"),
    }
}

/// The behaviour every backend must share.
async fn conformance(store: &dyn VectorStore, coll: &str) {
    store.drop_collection(coll).await.unwrap();
    // A collection that does not exist: empty answers, never errors (except writes).
    assert_eq!(store.info(coll).await.unwrap(), None);
    assert_eq!(
        store.search(coll, &[1.0, 0.0, 0.0], 3, None).await.unwrap(),
        Search::Missing
    );
    assert!(store.payloads(coll).await.unwrap().is_empty());
    store
        .delete(coll, &[point_id("conformance", "a")])
        .await
        .unwrap();
    store.drop_collection(coll).await.unwrap();
    let err = store
        .upsert(coll, vec![point("a", [1.0, 0.0, 0.0], "x", "clinical")])
        .await
        .unwrap_err();
    assert!(matches!(err, IndexError::MissingCollection { .. }), "{err}");

    assert_eq!(
        store
            .search_batch(coll, &[&[1.0, 0.0, 0.0], &[0.0, 1.0, 0.0]], 3)
            .await
            .unwrap(),
        [Search::Missing, Search::Missing]
    );

    store.ensure_collection(coll, 3).await.unwrap();
    store.ensure_collection(coll, 3).await.unwrap();
    assert!(matches!(
        store.ensure_collection(coll, 4).await,
        Err(IndexError::VectorSize {
            expected: 3,
            got: 4,
            ..
        })
    ));
    assert_eq!(
        store.search(coll, &[1.0, 0.0, 0.0], 3, None).await.unwrap(),
        Search::Hits(vec![])
    );

    store
        .upsert(
            coll,
            vec![
                point("a", [1.0, 0.0, 0.0], "x", "clinical"),
                // Not unit length: cosine must not care.
                point("b", [1.8, 0.2, 0.0], "y", "administrative"),
                point("c", [0.0, 1.0, 0.0], "x", "administrative"),
                point("d", [0.0, 0.0, 1.0], "y", "clinical"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        store.info(coll).await.unwrap(),
        Some(CollectionInfo {
            vector_size: 3,
            points: 4
        })
    );
    let Search::Hits(hits) = store.search(coll, &[2.0, 0.0, 0.0], 2, None).await.unwrap() else {
        panic!("missing")
    };
    assert_eq!(
        hits.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!((hits[0].score - 1.0).abs() < 1e-4, "{}", hits[0].score);
    assert!((hits[1].score - 0.99388).abs() < 1e-3, "{}", hits[1].score);
    assert_eq!(hits[0].id, point_id("conformance", "a"));

    // A batch answers each vector as its own search would, in order.
    let queries: [&[f32]; 3] = [&[0.0, 0.1, 1.0], &[2.0, 0.0, 0.0], &[0.1, 1.0, 0.0]];
    let mut one_by_one = Vec::new();
    for q in queries {
        one_by_one.push(store.search(coll, q, 2, None).await.unwrap());
    }
    let batch = store.search_batch(coll, &queries, 2).await.unwrap();
    assert_eq!(
        batch.into_iter().map(names).collect::<Vec<_>>(),
        [["d", "c"], ["a", "b"], ["c", "b"]]
    );
    assert_eq!(
        store.search_batch(coll, &queries, 2).await.unwrap(),
        one_by_one
    );
    assert!(store.search_batch(coll, &[], 2).await.unwrap().is_empty());

    let x = Predicate {
        category: Some("x".into()),
        domain: None,
    };
    assert_eq!(
        names(
            store
                .search(coll, &[1.0, 0.1, 0.0], 10, Some(&x))
                .await
                .unwrap()
        ),
        ["a", "c"]
    );
    let x_admin = Predicate {
        category: Some("x".into()),
        domain: Some("administrative".into()),
    };
    assert_eq!(
        names(
            store
                .search(coll, &[1.0, 0.1, 0.0], 10, Some(&x_admin))
                .await
                .unwrap()
        ),
        ["c"]
    );

    // Upsert by id replaces vector and payload.
    let mut moved = point("a", [0.0, 0.6, 0.8], "x", "clinical");
    moved.payload.hash = "h-a2".into();
    store.upsert(coll, vec![moved]).await.unwrap();
    assert_eq!(store.info(coll).await.unwrap().map(|i| i.points), Some(4));
    assert_eq!(
        names(store.search(coll, &[0.0, 0.6, 0.8], 1, None).await.unwrap()),
        ["a"]
    );
    let mut stored = store.payloads(coll).await.unwrap();
    stored.sort_by(|l, r| l.1.name.cmp(&r.1.name));
    assert_eq!(stored.len(), 4);
    assert_eq!(
        stored[0],
        (
            point_id("conformance", "a"),
            PointPayload {
                hash: "h-a2".into(),
                ..payload("a", "x", "clinical")
            }
        )
    );

    // Wrong sizes and broken vectors are refused.
    let wrong = Point {
        vector: vec![1.0, 0.0],
        ..point("e", [0.0; 3], "x", "clinical")
    };
    assert!(matches!(
        store.upsert(coll, vec![wrong]).await,
        Err(IndexError::VectorSize { .. })
    ));
    assert!(matches!(
        store
            .upsert(coll, vec![point("e", [0.0; 3], "x", "clinical")])
            .await,
        Err(IndexError::BadVector { .. })
    ));

    store
        .delete(
            coll,
            &[point_id("conformance", "b"), point_id("conformance", "zz")],
        )
        .await
        .unwrap();
    assert_eq!(store.info(coll).await.unwrap().map(|i| i.points), Some(3));
    assert!(!names(
        store
            .search(coll, &[1.0, 0.0, 0.0], 10, None)
            .await
            .unwrap()
    )
    .contains(&"b".to_string()));

    store.drop_collection(coll).await.unwrap();
    assert_eq!(store.info(coll).await.unwrap(), None);
    assert_eq!(
        store.search(coll, &[1.0, 0.0, 0.0], 3, None).await.unwrap(),
        Search::Missing
    );
}

#[tokio::test]
async fn memory_store_conforms() {
    conformance(&MemoryStore::in_memory(), "keyhole-conformance").await;
    let dir = tempfile::tempdir().unwrap();
    conformance(
        &MemoryStore::open(dir.path()).unwrap(),
        "keyhole-conformance",
    )
    .await;
}

#[tokio::test]
async fn qdrant_store_conforms() {
    let coll = collection_name(&fresh_namespace("conformance")).unwrap();
    conformance(&qdrant_store(), &coll).await;
}

#[tokio::test]
async fn qdrant_collections_are_cosine_with_payload_indexes_and_reads_see_writes() {
    // What a Qdrant operator sees, read back through Qdrant's own API rather
    // than the store's: one unnamed cosine vector, keyword indexes on the
    // predicate fields; and writes are visible to the very next read (`wait`).
    use qdrant_client::qdrant::{vectors_config, Distance};
    let store = qdrant_store();
    let coll = collection_name(&fresh_namespace("shape")).unwrap();
    store.ensure_collection(&coll, 3).await.unwrap();
    let client = qdrant_client::Qdrant::from_url(&crate::test_util::qdrant_url())
        .skip_compatibility_check()
        .build()
        .unwrap();
    let info = client.collection_info(&coll).await.unwrap().result.unwrap();
    let params = info
        .config
        .unwrap()
        .params
        .unwrap()
        .vectors_config
        .unwrap()
        .config
        .unwrap();
    let vectors_config::Config::Params(p) = params else {
        panic!("named vectors: {params:?}")
    };
    assert_eq!((p.size, p.distance), (3, Distance::Cosine as i32));
    let mut indexed: Vec<&String> = info.payload_schema.keys().collect();
    indexed.sort();
    assert_eq!(indexed, ["category", "domain"]);
    for round in 0..5u8 {
        let name = format!("p{round}");
        let mut p = point(&name, [1.0, f32::from(round), 0.5], "x", "clinical");
        p.id = point_id("conformance", &name);
        store.upsert(&coll, vec![p]).await.unwrap();
        assert_eq!(
            store.info(&coll).await.unwrap().map(|i| i.points),
            Some(usize::from(round) + 1)
        );
    }
    // More points than one upsert chunk and one scroll page.
    let many: Vec<Point> = (0..1500)
        .map(|i| {
            let name = format!("m{i}");
            Point {
                id: point_id("conformance", &name),
                vector: vec![1.0, i as f32, 2.0],
                payload: payload(&name, "y", "administrative"),
            }
        })
        .collect();
    store.upsert(&coll, many).await.unwrap();
    assert_eq!(store.payloads(&coll).await.unwrap().len(), 1505);
    assert_eq!(
        store.info(&coll).await.unwrap().map(|i| i.points),
        Some(1505)
    );
    store.drop_collection(&coll).await.unwrap();
}

#[tokio::test]
async fn qdrant_outage_is_an_error_not_an_empty_answer() {
    // Nothing listens on port 9 (discard): every call is an outage.
    let store =
        QdrantStore::connect("http://127.0.0.1:9", std::time::Duration::from_millis(500)).unwrap();
    let err = store
        .search("keyhole-x", &[1.0, 0.0], 3, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            IndexError::Qdrant {
                operation: "search",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn memory_store_saves_atomically_and_reloads() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = MemoryStore::open(dir.path()).unwrap();
        store.ensure_collection("keyhole-a", 3).await.unwrap();
        store
            .upsert(
                "keyhole-a",
                vec![
                    point("a", [1.0, 0.0, 0.0], "x", "clinical"),
                    point("c", [0.0, 1.0, 0.0], "x", "admin"),
                ],
            )
            .await
            .unwrap();
        store.ensure_collection("keyhole-b", 3).await.unwrap();
        store.drop_collection("keyhole-b").await.unwrap();
    }
    let files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files,
        ["keyhole-a.kvec"],
        "no temporary or dropped files left"
    );
    let store = MemoryStore::open(dir.path()).unwrap();
    assert_eq!(
        store.info("keyhole-a").await.unwrap(),
        Some(CollectionInfo {
            vector_size: 3,
            points: 2
        })
    );
    assert_eq!(
        names(
            store
                .search("keyhole-a", &[0.1, 1.0, 0.0], 2, None)
                .await
                .unwrap()
        ),
        ["c", "a"]
    );

    // A torn file is reported, not silently replaced.
    let path = dir.path().join("keyhole-a.kvec");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let err = MemoryStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, IndexError::Corrupt { .. }), "{err}");
}

#[test]
fn namespaces_name_collections_and_point_ids_are_stable() {
    assert_eq!(collection_name("clinic_1").unwrap(), "keyhole-clinic_1");
    assert_eq!(
        collection_name("../x").unwrap_err().to_string(),
        "registry namespace \"../x\" must be 1 to 64 characters of [A-Za-z0-9_-]"
    );
    assert!(collection_name("").is_err());
    let id = point_id("default", "patient__search__smart");
    assert_eq!(id, point_id("default", "patient__search__smart"));
    assert_eq!(id.get_version_num(), 5);
    assert_ne!(
        id,
        point_id("other", "patient__search__smart"),
        "ids are per namespace"
    );
}

fn tools(descriptions: &[(&str, &str)]) -> Vec<ToolDescriptor> {
    descriptions
        .iter()
        .map(|(n, d)| ToolDescriptor {
            name: n.to_string(),
            description: d.to_string(),
            parameters: String::new(),
        })
        .collect()
}

#[tokio::test]
async fn an_unchanged_registry_is_never_re_embedded_and_leavers_are_pruned() {
    for (backend, store) in stores() {
        unchanged_registry_is_not_re_embedded(store, &fresh_namespace("sync")).await;
        eprintln!("{backend}: ok");
    }
}

async fn unchanged_registry_is_not_re_embedded(store: Arc<dyn VectorStore>, ns: &str) {
    let coll = collection_name(ns).unwrap();
    let fake = FakeEmbedder::start(32).await;
    let config = RankConfig::try_new(Default::default()).unwrap();
    let first = tools(&[
        ("a__list", "Lists things."),
        ("b__get", "Gets one thing."),
        ("c__make", "Makes a thing."),
    ]);
    let indexer = Indexer::try_new(fake.client(), store.clone(), ns).unwrap();
    let report = indexer
        .sync(&Registry::build(&first, None, &config))
        .await
        .unwrap();
    assert_eq!(
        (report.upserted, report.unchanged, report.pruned),
        (3, 0, 0)
    );
    assert_eq!(indexer.embedder().texts_embedded(), 3);

    // A fresh client (empty cache) over the same store: nothing to embed.
    let again = Indexer::try_new(fake.client(), store.clone(), ns).unwrap();
    let report = again
        .sync(&Registry::build(&first, None, &config))
        .await
        .unwrap();
    assert_eq!((report.upserted, report.unchanged), (0, 3));
    assert_eq!(
        again.embedder().texts_embedded(),
        0,
        "an unchanged registry costs zero embedder calls"
    );

    // One changed, one gone, one new: one text embedded per change.
    let second = tools(&[
        ("a__list", "Lists things."),
        ("b__get", "Gets one thing by id."),
        ("d__drop", "Drops a thing."),
    ]);
    let report = again
        .sync(&Registry::build(&second, None, &config))
        .await
        .unwrap();
    assert_eq!(
        (report.upserted, report.unchanged, report.pruned),
        (2, 1, 1)
    );
    assert_eq!(again.embedder().texts_embedded(), 2);
    let mut stored: Vec<String> = store
        .payloads(&coll)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, p)| p.name)
        .collect();
    stored.sort();
    assert_eq!(stored, ["a__list", "b__get", "d__drop"]);
    // The stored vectors answer searches: the changed tool is found by its new text.
    let q = again
        .embedder()
        .embed(crate::embed::Side::Query, &["gets one thing by id"])
        .await
        .unwrap();
    let Search::Hits(hits) = again.search(&q[0], 1).await.unwrap() else {
        panic!("missing")
    };
    assert_eq!(hits[0].name, "b__get");
    store.drop_collection(&coll).await.unwrap();
}

#[tokio::test]
async fn a_collection_of_another_vector_size_is_dropped_and_rebuilt() {
    for (backend, store) in stores() {
        another_vector_size_rebuilds(store, &fresh_namespace("resize")).await;
        eprintln!("{backend}: ok");
    }
}

#[tokio::test]
async fn a_collection_deleted_behind_the_indexers_back_is_rebuilt() {
    for (backend, store) in stores() {
        let ns = fresh_namespace("deleted");
        let coll = collection_name(&ns).unwrap();
        let fake = FakeEmbedder::start(16).await;
        let config = RankConfig::try_new(Default::default()).unwrap();
        let registry = Registry::build(
            &tools(&[("a__list", "Lists things."), ("b__get", "Gets one.")]),
            None,
            &config,
        );
        let indexer = Indexer::try_new(fake.client(), store.clone(), &ns).unwrap();
        indexer.sync(&registry).await.unwrap();
        store.drop_collection(&coll).await.unwrap();
        let q = indexer
            .embedder()
            .embed(crate::embed::Side::Query, &["things"])
            .await
            .unwrap();
        assert_eq!(
            indexer.search(&q[0], 5).await.unwrap(),
            Search::Missing,
            "{backend}"
        );
        let report = indexer.sync(&registry).await.unwrap();
        assert_eq!((report.upserted, report.unchanged), (2, 0), "{backend}");
        assert_eq!(
            store.info(&coll).await.unwrap(),
            Some(CollectionInfo {
                vector_size: 16,
                points: 2
            }),
            "{backend}"
        );
        assert!(
            matches!(indexer.search(&q[0], 5).await.unwrap(), Search::Hits(h) if h.len() == 2),
            "{backend}"
        );
        store.drop_collection(&coll).await.unwrap();
    }
}

async fn another_vector_size_rebuilds(store: Arc<dyn VectorStore>, ns: &str) {
    let coll = collection_name(ns).unwrap();
    let fake = FakeEmbedder::start(16).await;
    let config = RankConfig::try_new(Default::default()).unwrap();
    let registry = Registry::build(
        &tools(&[("a__list", "Lists things."), ("b__get", "Gets one.")]),
        None,
        &config,
    );
    let indexer = Indexer::try_new(fake.client(), store.clone(), ns).unwrap();
    indexer.sync(&registry).await.unwrap();
    assert_eq!(
        store.info(&coll).await.unwrap().map(|i| i.vector_size),
        Some(16)
    );

    // The embedder now answers another size (a new model behind the same names).
    fake.dim.store(24, std::sync::atomic::Ordering::Relaxed);
    let indexer = Indexer::try_new(fake.client(), store.clone(), ns).unwrap();
    let q = indexer
        .embedder()
        .embed(crate::embed::Side::Query, &["things"])
        .await
        .unwrap();
    indexer.note_dimension(q[0].len());
    let report = indexer.sync(&registry).await.unwrap();
    assert!(report.rebuilt);
    assert_eq!(report.upserted, 2);
    assert_eq!(
        store.info(&coll).await.unwrap(),
        Some(CollectionInfo {
            vector_size: 24,
            points: 2
        })
    );
    assert!(matches!(indexer.search(&q[0], 5).await.unwrap(), Search::Hits(h) if h.len() == 2));
    store.drop_collection(&coll).await.unwrap();
}
