//! Resolves the catalog request's turn over and over, in process, through
//! the `/v1/resolve` route (decode, resolve, encode; no socket), and prints
//! the time per resolve. A driver for profiles: run it under
//! `valgrind --tool=callgrind --toggle-collect=*resolve_loop*rounds*` to
//! count the instructions of the rounds alone.
//!
//! ```text
//! cargo run --release -p keyhole-control --example resolve_loop -- [hybrid|lexical] [ROUNDS] [RANK_CONFIG]
//! ```
//!
//! `RANK_CONFIG`: a rank settings file (as `keyhole serve --rank-config`),
//! to profile a setting switched off (`{"clauses":{"enabled":false}}`).
//!
//! - `hybrid`: the catalog's registry indexed, the turn's vector cached
//!   (what a warm turn is);
//! - `lexical`: the embedder failing, so the registry is never indexed and
//!   every turn is ranked lexically.
//!
//! The registry is named by digest, as the filter names it. The embedder is
//! the test kit's (bag-of-words vectors, 384 dimensions), on loopback.

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt as _;
use keyhole_control::alias::{RedbStore, StoreConfig};
use keyhole_control::embed::{Embedder, EmbedderConfig};
use keyhole_control::index::{Indexer, MemoryStore};
use keyhole_control::resolve::{Resolver, ResolverSettings};
use keyhole_control::server::{router, AppState};
use keyhole_core::alias::Taxonomy;
use keyhole_core::proto::tools::{descriptors_digest, ResolveRequest};
use keyhole_core::tools::rank::config::RankConfig;
use keyhole_core::tools::rank::meta::Overlay;
use keyhole_core::Phase;
use keyhole_testkit::embedder::{FakeEmbedder, Options, Vectors};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt as _;

const CATALOG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/catalog");

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "hybrid".into());
    let rounds: usize = args.next().map_or(Ok(2000), |n| n.parse())?;
    let lexical = match mode.as_str() {
        "hybrid" => false,
        "lexical" => true,
        other => return Err(format!("mode {other:?}: hybrid or lexical").into()),
    };

    let fake = FakeEmbedder::start(Options {
        vectors: Vectors::BagOfWords,
        dim: 384,
        refuse_first: 0,
    })
    .await?;
    let embedder = Arc::new(Embedder::try_new(EmbedderConfig {
        url: fake.url.clone(),
        attempts: 1,
        ..EmbedderConfig::default()
    })?);
    let overlay = Overlay::from_json(&std::fs::read(format!("{CATALOG}/tools.json"))?)?;
    let rank = match args.next() {
        Some(path) => RankConfig::from_json(&std::fs::read(path)?)?,
        None => RankConfig::try_new(Default::default())?,
    };
    let store = Arc::new(MemoryStore::in_memory());
    let indexer = Arc::new(Indexer::try_new(embedder, store, "profile")?);
    let resolver = Arc::new(Resolver::new(
        indexer,
        Arc::new(rank),
        Some(Arc::new(overlay)),
        ResolverSettings {
            // A failed index is not retried while the rounds run.
            index_retry: Duration::from_secs(24 * 3600),
            ..ResolverSettings::default()
        },
    ));

    let body = std::fs::read(format!("{CATALOG}/openai_request.json"))?;
    let parsed = keyhole_core::tools::format::parse("/v1/chat/completions", &body)?
        .ok_or("the catalog request has no tools")?;
    let tools = parsed.descriptors();
    if lexical {
        fake.failing.store(true, Ordering::Relaxed);
        resolver.registry(&tools).await;
    } else {
        resolver.prepare(&tools).await?;
    }
    let dir = tempfile::tempdir()?;
    let config = StoreConfig::new(Arc::new(Taxonomy::default()), Duration::from_secs(3600));
    let aliases = RedbStore::open(&dir.path().join("aliases"), config)?;
    let app = router(AppState {
        resolver,
        aliases: Arc::new(aliases),
    });
    let request = serde_json::to_vec(&ResolveRequest {
        session: Some("bench".into()),
        phase: Phase::Planner,
        turn: parsed.turn.clone(),
        tools: Vec::new(),
        forced: Vec::new(),
        registry: Some(descriptors_digest(&tools)),
        tool_search: None,
        shadow: false,
    })?;
    // The first answer embeds the turn (hybrid) or starts the failing index.
    let first = resolve_once(&app, &request).await?;
    println!("{}", String::from_utf8_lossy(&first));
    let started = Instant::now();
    let last = resolve_loop_rounds(&app, &request, rounds).await?;
    let each = started.elapsed().as_secs_f64() * 1e6 / rounds.max(1) as f64;
    // Each answer numbers the session's turn; everything else must repeat.
    let set = |answer: &[u8]| -> Result<serde_json::Value, serde_json::Error> {
        let mut v: serde_json::Value = serde_json::from_slice(answer)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("turn");
        }
        Ok(v)
    };
    if set(&last)? != set(&first)? {
        return Err("the answer changed between rounds".into());
    }
    println!("{mode}: {rounds} rounds, {each:.1} µs per resolve");
    Ok(())
}

/// The measured rounds (its name is what callgrind's `--toggle-collect` matches).
#[inline(never)]
async fn resolve_loop_rounds(
    app: &axum::Router,
    request: &[u8],
    rounds: usize,
) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut last = Vec::new();
    for _ in 0..rounds {
        last = resolve_once(app, request).await?;
    }
    Ok(last)
}

async fn resolve_once(
    app: &axum::Router,
    request: &[u8],
) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let req = Request::post("/v1/resolve")
        .header("content-type", "application/json")
        .body(Body::from(request.to_vec()))?;
    let resp = app.clone().oneshot(req).await?;
    if !resp.status().is_success() {
        return Err(format!("resolve answered {}", resp.status()).into());
    }
    Ok(resp.into_body().collect().await?.to_bytes().to_vec())
}
