//! The answers for the catalog's development turns, pinned: every turn of
//! `queries.dev.jsonl` in four phases, over the catalog request's 108 tools
//! (overlay included), once hybrid (indexed, bag-of-words vectors) and once
//! lexical (the embedder failing, so the registry is never indexed), through
//! the `/v1/resolve` route. The answers' bytes are hashed per mode; a change
//! of any set, order, reason or source changes the hash. On a mismatch the
//! answers are written next to the test binary to compare with a run of the
//! earlier code.

use super::*;
use crate::alias::{RedbStore, StoreConfig};
use crate::index::MemoryStore;
use crate::server::{router, AppState};
use crate::test_util::{fresh_namespace, FakeEmbedder};
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt as _;
use keyhole_core::alias::Taxonomy;
use keyhole_core::Phase;
use sha2::{Digest as _, Sha256};
use tower::ServiceExt as _;

const CATALOG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/catalog");

/// SHA-256 of the answers, one line each, per mode.
const HYBRID: &str = "4f7fea0fc6548b38d22d867fabcac3d4081f86dc90fb226536c5ec7e03bedccd";
const LEXICAL: &str = "388e7a433a56bb7e15fe1d97b28f017d0f9723f9e8929ea1a2300da8a0b92ff1";

async fn answers(lexical: bool) -> String {
    let fake = FakeEmbedder::start(64).await;
    let overlay =
        Overlay::from_json(&std::fs::read(format!("{CATALOG}/tools.json")).unwrap()).unwrap();
    let rank = RankConfig::try_new(Default::default()).unwrap();
    let store = Arc::new(MemoryStore::in_memory());
    let indexer =
        Arc::new(Indexer::try_new(fake.client(), store, &fresh_namespace("pinned")).unwrap());
    let resolver = Arc::new(Resolver::new(
        indexer,
        Arc::new(rank),
        Some(Arc::new(overlay)),
        ResolverSettings {
            retrieval_timeout: Duration::from_secs(5),
            index_retry: Duration::from_secs(24 * 3600),
            ..ResolverSettings::default()
        },
    ));
    let body = std::fs::read(format!("{CATALOG}/openai_request.json")).unwrap();
    let tools = keyhole_core::tools::format::parse("/v1/chat/completions", &body)
        .unwrap()
        .unwrap()
        .descriptors();
    if lexical {
        fake.failing.store(true, Ordering::Relaxed);
    } else {
        resolver.prepare(&tools).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig::new(Arc::new(Taxonomy::default()), Duration::from_secs(3600));
    let aliases = Arc::new(RedbStore::open(&dir.path().join("aliases"), config).unwrap());
    let app = router(AppState { resolver, aliases });
    let turns = std::fs::read_to_string(format!("{CATALOG}/queries.dev.jsonl")).unwrap();
    let mut out = String::new();
    for (i, line) in turns.lines().enumerate() {
        let q: serde_json::Value = serde_json::from_str(line).unwrap();
        let turn = q["query"].as_str().unwrap();
        let phases = [
            Phase::Planner,
            Phase::AgentCall,
            Phase::Formatter,
            Phase::ToolInput,
        ];
        for phase in phases {
            // Every other question sends its tools, the rest name them by digest.
            let by_digest = i % 2 == 1;
            let req = ResolveRequest {
                session: None,
                phase,
                turn: turn.into(),
                tools: if by_digest { Vec::new() } else { tools.clone() },
                forced: Vec::new(),
                registry: by_digest.then(|| descriptors_digest(&tools)),
                tool_search: None,
                shadow: false,
            };
            let http = Request::post("/v1/resolve")
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&req).unwrap()))
                .unwrap();
            let resp = app.clone().oneshot(http).await.unwrap();
            let status = resp.status();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            out += &format!(
                "{} {phase} {status} {}\n",
                q["id"].as_str().unwrap(),
                String::from_utf8_lossy(&bytes)
            );
        }
    }
    out
}

async fn pinned(lexical: bool, want: &str) {
    let all = answers(lexical).await;
    let got = format!("{:x}", Sha256::digest(all.as_bytes()));
    if got != want {
        let mode = if lexical { "lexical" } else { "hybrid" };
        let path = std::env::current_exe()
            .unwrap()
            .with_file_name(format!("pinned-{mode}.txt"));
        std::fs::write(&path, &all).unwrap();
        panic!(
            "{mode} answers changed: {got} (were {want}); written to {}",
            path.display()
        );
    }
    assert_eq!(all.lines().count(), 120 * 4);
}

#[tokio::test]
async fn the_dev_turns_hybrid_answers_are_pinned() {
    pinned(false, HYBRID).await;
}

#[tokio::test]
async fn the_dev_turns_lexical_answers_are_pinned() {
    pinned(true, LEXICAL).await;
}
