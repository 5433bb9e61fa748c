use super::*;
use crate::alias::{RedbStore, StoreConfig};
use crate::index::{MemoryStore, VectorStore};
use crate::server::{router, AppState};
use crate::test_util::{fresh_namespace, stores, FakeEmbedder};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use keyhole_core::alias::Taxonomy;
use keyhole_core::proto::tools::Reason;
use keyhole_core::Phase;
use std::sync::atomic::Ordering;
use tower::ServiceExt as _;

const CATALOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/catalog/tools.json"
);

struct Fixture {
    fake: FakeEmbedder,
    store: Arc<dyn VectorStore>,
    /// The namespace's collection (a fresh one per fixture).
    coll: String,
    resolver: Arc<Resolver>,
    tools: Vec<ToolDescriptor>,
}

/// A resolver over the catalog (overlay included), a fake embedder and an
/// in-memory store.
async fn fixture() -> Fixture {
    fixture_on(Arc::new(MemoryStore::in_memory())).await
}

/// A resolver over the catalog, a fake embedder and `store`, in a fresh namespace.
async fn fixture_on(store: Arc<dyn VectorStore>) -> Fixture {
    let fake = FakeEmbedder::start(64).await;
    let namespace = fresh_namespace("test");
    let coll = crate::index::collection_name(&namespace).unwrap();
    let bytes = std::fs::read(CATALOG).unwrap();
    let overlay = Overlay::from_json(&bytes).unwrap();
    let rank = RankConfig::try_new(Default::default()).unwrap();
    let tools: Vec<ToolDescriptor> = overlay
        .iter()
        .filter(|m| m.plane == keyhole_core::tools::rank::meta::Plane::Business)
        .map(|m| ToolDescriptor {
            name: rank.settings().names.to_name(&m.id),
            description: m.description.clone(),
            parameters: String::new(),
        })
        .collect();
    let indexer = Arc::new(Indexer::try_new(fake.client(), store.clone(), &namespace).unwrap());
    let settings = ResolverSettings {
        retrieval_timeout: Duration::from_secs(2),
        ..ResolverSettings::default()
    };
    let resolver = Arc::new(Resolver::new(
        indexer,
        Arc::new(rank),
        Some(Arc::new(overlay)),
        settings,
    ));
    Fixture {
        fake,
        store,
        coll,
        resolver,
        tools,
    }
}

fn request(f: &Fixture, session: &str, turn: &str, phase: Phase) -> ResolveRequest {
    ResolveRequest {
        session: Some(session.into()),
        phase,
        turn: turn.into(),
        tools: f.tools.clone(),
        forced: vec![],
        registry: None,
        tool_search: None,
        shadow: false,
    }
}

async fn wait_ready(f: &Fixture) {
    let prepared = f.resolver.registry(&f.tools).await;
    for _ in 0..500 {
        if prepared.is_ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the registry was never indexed");
}

#[tokio::test]
async fn a_new_registry_is_ranked_lexically_while_it_is_indexed_then_hybrid() {
    for (_, store) in stores() {
        new_registry_lexical_then_hybrid(fixture_on(store).await).await;
    }
}

async fn new_registry_lexical_then_hybrid(f: Fixture) {
    let turn = "Book an appointment for Mrs. Krause on Friday at 9.";
    let first = f
        .resolver
        .resolve(&request(&f, "s1", turn, Phase::Planner))
        .await;
    assert_eq!(
        first.source,
        Source::Lexical,
        "ranked without vectors, and says so"
    );
    assert!(
        (6..=12).contains(&first.tools.len()),
        "{}",
        first.tools.len()
    );
    assert!(
        first.tools.iter().any(|t| t.name == "appointment__manage"),
        "{:?}",
        first.tools
    );

    wait_ready(&f).await;
    assert_eq!(
        f.store.info(&f.coll).await.unwrap().map(|i| i.points),
        Some(108)
    );
    let second = f
        .resolver
        .resolve(&request(&f, "s1", turn, Phase::Planner))
        .await;
    assert!(second.tools.iter().any(|t| t.name == "appointment__manage"));

    let trail = f.resolver.audit("s1").await.unwrap();
    let how: Vec<Retrieval> = trail.iter().map(|e| e.retrieval).collect();
    assert_eq!(how, [Retrieval::Lexical, Retrieval::Hybrid]);
    assert!(trail[1].timings.embed_us > 0 && trail[1].timings.total_us >= trail[1].timings.rank_us);
    assert_eq!(trail[1].tools, second.tools);
    assert_eq!(trail[1].tools_in, 108);
}

#[tokio::test]
async fn a_registry_sent_again_costs_no_embedding_and_no_rebuild() {
    for (_, store) in stores() {
        registry_sent_again(fixture_on(store).await).await;
    }
}

async fn registry_sent_again(f: Fixture) {
    let (first, report) = f.resolver.prepare(&f.tools).await.unwrap();
    assert_eq!(report.upserted, 108);
    let embedded = f.resolver.indexer().embedder().texts_embedded();
    assert_eq!(embedded, 108);
    let (again, report) = f.resolver.prepare(&f.tools).await.unwrap();
    assert!(
        Arc::ptr_eq(&first, &again),
        "the built registry is cached by content"
    );
    assert_eq!((report.upserted, report.unchanged), (0, 108));
    for turn in [
        "Show the vital signs of Anna Schmidt",
        "Show the vital signs of Anna Schmidt",
    ] {
        f.resolver
            .resolve(&request(&f, "s", turn, Phase::Planner))
            .await;
    }
    assert_eq!(
        f.resolver.indexer().embedder().texts_embedded(),
        embedded + 1,
        "one query embedding, cached"
    );
}

#[tokio::test]
async fn an_outage_answers_the_bounded_fallback_and_keeps_the_audited_set() {
    let f = fixture().await;
    f.resolver.prepare(&f.tools).await.unwrap();
    let ok = f
        .resolver
        .resolve(&request(
            &f,
            "s",
            "Show the latest lab results of Anna Schmidt",
            Phase::Planner,
        ))
        .await;
    assert_eq!(ok.source, Source::Retrieval);
    let audited: Vec<String> = ok.tools.iter().map(|t| t.name.clone()).collect();

    f.fake.failing.store(true, Ordering::Relaxed);
    for phase in [Phase::Planner, Phase::AgentCall, Phase::ToolInput] {
        let down = f
            .resolver
            .resolve(&request(
                &f,
                "s",
                "Prescribe metformin 500 mg twice daily",
                phase,
            ))
            .await;
        assert_eq!(down.source, Source::ControlFallback, "{phase}");
        assert!(
            down.tools.len() <= phase.budget().max,
            "{phase}: {}",
            down.tools.len()
        );
        for t in &down.tools {
            let from_prior = audited.contains(&t.name) && t.reason == Reason::PriorSet;
            assert!(
                from_prior || t.reason != Reason::Rag,
                "{phase}: {t:?} is neither prior nor a floor"
            );
        }
    }
    // Fallbacks never replace the audited set.
    assert_eq!(f.resolver.sessions.lock().await.prior("s"), audited);
    let trail = f.resolver.audit("s").await.unwrap();
    assert_eq!(trail.len(), 4);
    assert!(trail[1..]
        .iter()
        .all(|e| e.retrieval == Retrieval::Outage && e.source == Source::ControlFallback));

    // A session with no prior set gets floors at most, never the registry.
    let cold = f
        .resolver
        .resolve(&request(&f, "cold", "Show the vital signs", Phase::Planner))
        .await;
    assert_eq!(cold.source, Source::ControlFallback);
    assert!(
        cold.tools
            .iter()
            .all(|t| t.reason != Reason::Rag && t.reason != Reason::PriorSet),
        "{:?}",
        cold.tools
    );
}

#[tokio::test]
async fn a_dropped_collection_degrades_to_lexical_and_heals() {
    for (_, store) in stores() {
        dropped_collection_heals(fixture_on(store).await).await;
    }
}

async fn dropped_collection_heals(f: Fixture) {
    f.resolver.prepare(&f.tools).await.unwrap();
    f.store.drop_collection(&f.coll).await.unwrap();
    let answer = f
        .resolver
        .resolve(&request(
            &f,
            "s",
            "Order a lipid panel for Anna Schmidt",
            Phase::Planner,
        ))
        .await;
    assert_eq!(
        answer.source,
        Source::Lexical,
        "a missing collection is no outage, and says so"
    );
    assert_eq!(
        f.resolver.audit("s").await.unwrap()[0].retrieval,
        Retrieval::Lexical
    );
    wait_ready(&f).await;
    assert_eq!(
        f.store.info(&f.coll).await.unwrap().map(|i| i.points),
        Some(108)
    );
    f.resolver
        .resolve(&request(
            &f,
            "s",
            "Order a lipid panel for Anna Schmidt",
            Phase::Planner,
        ))
        .await;
    assert_eq!(
        f.resolver.audit("s").await.unwrap()[1].retrieval,
        Retrieval::Hybrid
    );
}

#[tokio::test]
async fn sessions_and_their_trails_are_bounded() {
    let mut s = Sessions::new(2, 3);
    let res = Resolution {
        candidates: vec![],
        source: Source::Retrieval,
        trace: Default::default(),
        mutating: Default::default(),
    };
    let entry = |n: usize| AuditEntry {
        turn: 0,
        shadow: false,
        at_ms: n as u64,
        phase: Phase::Planner,
        source: Source::Retrieval,
        retrieval: Retrieval::Hybrid,
        tools_in: n,
        tools: vec![],
        floors: vec![],
        domains: vec![],
        clauses: 0,
        timings: Timings::default(),
        search: None,
        off_domain: vec![],
        deduped: vec![],
        ranked: vec![],
        bytes: None,
        calls: vec![],
    };
    for n in 0..5 {
        s.record("a", &res, entry(n));
    }
    let kept: Vec<usize> = s.trail("a").unwrap().iter().map(|e| e.tools_in).collect();
    assert_eq!(kept, [2, 3, 4]);
    s.record("b", &res, entry(0));
    s.record("a", &res, entry(5));
    s.record("c", &res, entry(0));
    assert!(
        s.trail("b").is_none(),
        "the least recently used session is evicted"
    );
    assert!(s.trail("a").is_some() && s.trail("c").is_some());
}

/// control's router over `f`'s resolver and an alias store in a temporary
/// directory (kept while the second value lives).
fn app_with_store(f: &Fixture) -> (axum::Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig::new(Arc::new(Taxonomy::default()), Duration::from_secs(3600));
    let aliases = Arc::new(RedbStore::open(&dir.path().join("aliases"), config).unwrap());
    let app = router(AppState {
        resolver: f.resolver.clone(),
        aliases,
    });
    (app, dir)
}

/// `POST /v1/calls` with `body`; the status.
async fn post_calls(app: &axum::Router, body: Vec<u8>) -> StatusCode {
    let post = Request::post("/v1/calls")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    app.clone().oneshot(post).await.unwrap().status()
}

/// `GET /v1/audit?since_ms=0`: every session's entries, answered 200.
async fn audit_since_start(app: &axum::Router) -> serde_json::Value {
    let get = Request::get("/v1/audit?since_ms=0")
        .body(Body::empty())
        .unwrap();
    let (status, body) = call(app.clone(), get).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn call(app: axum::Router, req: Request<Body>) -> (StatusCode, serde_json::Value) {
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn handlers_resolve_and_show_the_audit_trail_without_prompt_text() {
    let f = fixture().await;
    let (app, _dir) = app_with_store(&f);
    f.resolver.prepare(&f.tools).await.unwrap();

    let turn = "Search for the patient Hannelore Krause, born 1941.";
    let mut req = request(&f, "sess-1", turn, Phase::AgentCall);
    req.forced = vec!["billing__invoice__create".into()];
    let post = Request::post("/v1/resolve")
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&req).unwrap()))
        .unwrap();
    let (status, body) = call(app.clone(), post).await;
    assert_eq!(status, StatusCode::OK);
    let answer: ResolveResponse = serde_json::from_value(body).unwrap();
    assert_eq!(answer.source, Source::Retrieval);
    assert!(answer.tools.len() <= 8);
    assert_eq!(
        answer.tools[0],
        keyhole_core::proto::tools::SurfacedTool {
            name: "billing__invoice__create".into(),
            reason: Reason::ToolChoice,
            mutating: true
        }
    );
    assert!(
        answer
            .tools
            .iter()
            .any(|t| t.name == "patient__search__smart"),
        "{:?}",
        answer.tools
    );

    let (status, body) = call(
        app.clone(),
        Request::get("/v1/audit/sess-1")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let text = body.to_string();
    assert!(
        !text.contains("Krause") && !text.contains("1941"),
        "no prompt text in the audit trail: {text}"
    );
    assert_eq!(body[0]["source"], "retrieval");
    assert_eq!(body[0]["retrieval"], "hybrid");
    assert_eq!(body[0]["phase"], "agent-call");
    assert_eq!(body[0]["tools"][0]["reason"], "tool-choice");

    let (status, body) = call(
        app,
        Request::get("/v1/audit/nobody")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["type"], "unknown_session");
}

#[tokio::test]
async fn the_configured_registry_is_indexed_at_start_retrying_until_done_and_health_follows() {
    let f = fixture().await;
    let (app, _dir) = app_with_store(&f);
    let health = || Request::get("/healthz").body(Body::empty()).unwrap();
    assert_eq!(
        app.clone().oneshot(health()).await.unwrap().status(),
        StatusCode::OK,
        "nothing configured: ready"
    );

    f.fake.failing.store(true, Ordering::Relaxed);
    f.resolver.expect_registry(f.tools.len());
    let retry = StartupIndex {
        batch: 32,
        min_batch: 4,
        backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
    };
    let (resolver, tools) = (f.resolver.clone(), f.tools.clone());
    let indexing = tokio::spawn(async move { resolver.index_at_start(&tools, retry).await });
    // Failing attempts: not ready, the batch shrinks, the error is shown.
    let mut state = f.resolver.index_state();
    for _ in 0..1000 {
        if matches!(state, IndexState::Indexing { attempts, .. } if attempts >= 3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        state = f.resolver.index_state();
    }
    let IndexState::Indexing {
        attempts,
        batch,
        ref last_error,
        ..
    } = state
    else {
        panic!("{state:?}")
    };
    assert!(
        attempts >= 3 && batch < 32 && last_error.is_some(),
        "{state:?}"
    );
    let resp = app.clone().oneshot(health()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["index"]["state"], "indexing", "{body}");

    // A turn meanwhile is ranked lexically, and says so in the answer and the trail.
    let turn = "Show the latest lab results of Anna Schmidt";
    let answer = f
        .resolver
        .resolve(&request(&f, "s", turn, Phase::Planner))
        .await;
    assert_eq!(answer.source, Source::Lexical);
    assert!((1..=12).contains(&answer.tools.len()));
    assert_eq!(
        f.resolver.audit("s").await.unwrap()[0].retrieval,
        Retrieval::Lexical
    );

    // The embedder recovers: the index completes and control reports ready.
    f.fake.failing.store(false, Ordering::Relaxed);
    let prepared = tokio::time::timeout(Duration::from_secs(10), indexing)
        .await
        .unwrap()
        .unwrap();
    assert!(prepared.is_ready());
    assert!(
        matches!(
            f.resolver.index_state(),
            IndexState::Ready { tools: 108, .. }
        ),
        "{:?}",
        f.resolver.index_state()
    );
    assert_eq!(
        app.clone().oneshot(health()).await.unwrap().status(),
        StatusCode::OK
    );
    let text = crate::test_util::metrics_text(&app).await;
    assert!(
        text.contains("keyhole_control_index_state{state=\"ready\"} 1"),
        "{text}"
    );
    let answer = f
        .resolver
        .resolve(&request(&f, "s", turn, Phase::Planner))
        .await;
    assert_eq!(
        answer.source,
        Source::Retrieval,
        "the first turn after start is hybrid"
    );
}

/// A resolver whose tool vectors come from the fake embedder, through a
/// cache file (kept alive by the returned directory), and whose turns go to
/// `turns_url`, an endpoint that accepts connections and never answers.
async fn cached_tools_resolver(
    f: &Fixture,
    turns_url: &str,
    settings: ResolverSettings,
) -> (Resolver, tempfile::TempDir) {
    use crate::embed::{Embedder, EmbedderConfig};
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("embeddings.cache");
    let client = |url: &str| {
        let config = EmbedderConfig {
            url: url.into(),
            attempts: 1,
            cache_path: Some(cache.clone()),
            ..EmbedderConfig::default()
        };
        Arc::new(Embedder::try_new(config).unwrap())
    };
    let rank = || Arc::new(RankConfig::try_new(Default::default()).unwrap());
    let overlay = || {
        Some(Arc::new(
            Overlay::from_json(&std::fs::read(CATALOG).unwrap()).unwrap(),
        ))
    };
    let store: Arc<dyn VectorStore> = Arc::new(MemoryStore::in_memory());
    let namespace = fresh_namespace("silent");
    let warm = Indexer::try_new(client(&f.fake.url), store.clone(), &namespace).unwrap();
    Resolver::new(
        Arc::new(warm),
        rank(),
        overlay(),
        ResolverSettings::default(),
    )
    .prepare(&f.tools)
    .await
    .unwrap();
    let indexer = Indexer::try_new(client(turns_url), store, &namespace).unwrap();
    (
        Resolver::new(Arc::new(indexer), rank(), overlay(), settings),
        dir,
    )
}

#[tokio::test]
async fn a_turn_past_its_deadline_is_ranked_lexically_and_says_so() {
    let f = fixture().await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let settings = ResolverSettings {
        retrieval_timeout: Duration::from_millis(200),
        ..ResolverSettings::default()
    };
    let (resolver, _cache) = cached_tools_resolver(&f, &url, settings).await;
    let (prepared, report) = resolver.prepare(&f.tools).await.unwrap();
    assert!(prepared.is_ready() && report.upserted == 0, "{report:?}");
    let answer = resolver
        .resolve(&request(
            &f,
            "late",
            "Order a lipid panel for Anna Schmidt",
            Phase::Planner,
        ))
        .await;
    assert_eq!(answer.source, Source::Lexical);
    assert!(
        answer.tools.iter().any(|t| t.reason == Reason::Rag),
        "ranked, not the bounded fallback: {:?}",
        answer.tools
    );
    assert_eq!(
        resolver.audit("late").await.unwrap()[0].retrieval,
        Retrieval::Lexical
    );
}

#[tokio::test]
async fn a_busy_embedder_gets_one_request_at_a_time() {
    use std::sync::atomic::AtomicUsize;
    // Turns go to an endpoint that takes connections and never answers,
    // counting them.
    let f = fixture().await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    let settings = ResolverSettings {
        retrieval_timeout: Duration::from_millis(200),
        ..ResolverSettings::default()
    };
    let (resolver, _cache) = cached_tools_resolver(&f, &url, settings).await;
    resolver.prepare(&f.tools).await.unwrap();
    for (i, turn) in [
        "Order a lipid panel for Anna Schmidt",
        "Book a follow-up for Mr. Weber",
        "Discharge the patient in room 4",
    ]
    .into_iter()
    .enumerate()
    {
        let started = Instant::now();
        let answer = resolver
            .resolve(&request(&f, &format!("busy-{i}"), turn, Phase::Planner))
            .await;
        let took = started.elapsed();
        assert_eq!(answer.source, Source::Lexical, "turn {i}");
        assert!(
            answer.tools.iter().any(|t| t.reason == Reason::Rag),
            "turn {i}: ranked, not the fallback"
        );
        // Each waited out its deadline: the first for its embedding, the
        // others queued behind that request.
        assert!(took >= Duration::from_millis(200), "turn {i}: {took:?}");
    }
    // The first request still runs (the endpoint never answers); the turns
    // queued behind it never reached the embedder.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    assert_eq!(resolver.indexer.embedder().query_requests(), 1);
}

#[tokio::test]
async fn a_turn_the_embedder_would_answer_too_late_is_ranked_lexically_at_once() {
    let f = fixture().await;
    let (prepared, _) = f.resolver.prepare(&f.tools).await.unwrap();
    assert!(prepared.is_ready());
    let turn = "Order a lipid panel for Anna Schmidt";
    // The embedder's recent answers took far longer than this turn's
    // deadline (2 s in the fixture) leaves.
    f.resolver
        .indexer
        .embedder()
        .set_per_text_estimate(Duration::from_secs(10));
    let started = Instant::now();
    let answer = f
        .resolver
        .resolve(&request(&f, "late", turn, Phase::Planner))
        .await;
    assert_eq!(answer.source, Source::Lexical);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "lexical at once: {:?}",
        started.elapsed()
    );
    let embedder = f.resolver.indexer.embedder();
    // Nothing else waits, so the embedder, idle, embeds it meanwhile for
    // the turn's next phase.
    for _ in 0..200 {
        if embedder.is_cached(Side::Query, turn).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(embedder.is_cached(Side::Query, turn).await);
    // The next phase of the same turn is ranked with it.
    embedder.set_per_text_estimate(Duration::from_secs(10));
    let answer = f
        .resolver
        .resolve(&request(&f, "late", turn, Phase::Planner))
        .await;
    assert_eq!(answer.source, Source::Retrieval);
    assert!(embedder.is_cached(Side::Query, turn).await);
}

#[tokio::test]
async fn after_a_slow_spell_turns_reach_the_embedder_again() {
    let f = fixture().await;
    let (prepared, _) = f.resolver.prepare(&f.tools).await.unwrap();
    assert!(prepared.is_ready());
    // A slow spell left an estimate far past the fixture's 2 s deadline, and
    // no turn is sent that could measure the embedder anew: each turn held
    // back lowers the estimate, until one is sent.
    f.resolver
        .indexer
        .embedder()
        .set_per_text_estimate(Duration::from_secs(10));
    let mut lexical = 0;
    let sent = loop {
        let turn = format!("Order a lipid panel for patient {lexical}");
        let answer = f
            .resolver
            .resolve(&request(&f, "spell", &turn, Phase::Planner))
            .await;
        if answer.source == Source::Retrieval {
            break turn;
        }
        assert_eq!(answer.source, Source::Lexical);
        lexical += 1;
        assert!(
            lexical < 40,
            "no turn reached the embedder after {lexical} turns"
        );
    };
    assert!(lexical >= 5, "the first turns were held back ({lexical})");
    assert!(
        f.resolver
            .indexer
            .embedder()
            .is_cached(Side::Query, &sent)
            .await
    );
    // The embedder's real answer replaced the estimate.
    assert!(f.resolver.indexer.embedder().per_text_estimate() < Duration::from_secs(2));
}

// === recovery: the tool-search control tool ===

/// `request` with the filter's control tool, and the model's query if any.
fn searching(
    f: &Fixture,
    session: &str,
    turn: &str,
    phase: Phase,
    query: Option<&str>,
) -> ResolveRequest {
    let tool_search = Some(keyhole_core::proto::tools::ToolSearch {
        query: query.map(str::to_owned),
    });
    ResolveRequest {
        tool_search,
        shadow: false,
        ..request(f, session, turn, phase)
    }
}

const MISSED: &str = "util__units__convert";
const BOOKING: &str = "Book an appointment for Mrs. Krause next Tuesday with Dr. Weber.";
const QUERY: &str = "convert glucose from mg/dL to mmol/L";

#[tokio::test]
async fn a_tool_search_surfaces_what_retrieval_missed_with_the_recovery_reason() {
    let f = fixture().await;
    f.resolver.prepare(&f.tools).await.unwrap();
    let plain = f
        .resolver
        .resolve(&request(&f, "plain", BOOKING, Phase::Planner))
        .await;
    assert!(
        !plain.tools.iter().any(|t| t.name == MISSED),
        "the turn's retrieval misses it: {:?}",
        plain.tools
    );
    assert!(plain.tools.len() <= 12);

    // The control tool offered, not called: one place less, nothing recovered.
    let offered = f
        .resolver
        .resolve(&searching(&f, "s", BOOKING, Phase::Planner, None))
        .await;
    assert_eq!(offered.tools.len(), plain.tools.len().min(11));
    assert!(offered.tools.iter().all(|t| t.reason != Reason::Recovery));
    assert!(f.resolver.audit("s").await.unwrap()[0].search.is_none());

    // Called: the search finds it, within the budget, first after forced tools.
    let recovered = f
        .resolver
        .resolve(&searching(&f, "s", BOOKING, Phase::Planner, Some(QUERY)))
        .await;
    assert!(recovered.tools.len() <= 11, "{}", recovered.tools.len());
    let found = recovered
        .tools
        .iter()
        .find(|t| t.name == MISSED)
        .expect("the missed tool is surfaced");
    assert_eq!(found.reason, Reason::Recovery);
    assert!(!found.mutating, "its metadata travels with it");
    assert_eq!(recovered.tools[0].name, MISSED, "{:?}", recovered.tools);
    assert!(
        recovered
            .tools
            .iter()
            .filter(|t| t.reason == Reason::Recovery)
            .count()
            <= keyhole_core::tools::recovery::MAX_FOUND
    );
    assert!(
        recovered
            .tools
            .iter()
            .any(|t| t.name == "appointment__manage"),
        "the turn's own tools stay"
    );

    // The audit trail keeps the query, what it found and what was surfaced.
    let trail = f.resolver.audit("s").await.unwrap();
    let search = trail[1].search.as_ref().expect("the search is audited");
    assert_eq!(search.query, QUERY);
    assert_eq!(search.found.first().map(String::as_str), Some(MISSED));
    assert!(search.surfaced.iter().any(|n| n == MISSED));
    assert_eq!(search.retrieval, Retrieval::Hybrid);
    assert_eq!(trail[1].tools, recovered.tools);
    // And the session's audited set holds it (a later fallback keeps it).
    assert!(f
        .resolver
        .sessions
        .lock()
        .await
        .prior("s")
        .iter()
        .any(|n| n == MISSED));
}

#[tokio::test]
async fn a_tool_search_keeps_every_phase_rule() {
    let f = fixture().await;
    f.resolver.prepare(&f.tools).await.unwrap();
    // Recovery: the prior set plus at most three new tools, the found ones first.
    f.resolver
        .resolve(&request(&f, "r", BOOKING, Phase::Planner))
        .await;
    let prior = f.resolver.sessions.lock().await.prior("r");
    let answer = f
        .resolver
        .resolve(&searching(&f, "r", BOOKING, Phase::Recovery, Some(QUERY)))
        .await;
    let new: Vec<&str> = answer
        .tools
        .iter()
        .filter(|t| !prior.contains(&t.name))
        .map(|t| t.name.as_str())
        .collect();
    assert!(
        new.len() <= keyhole_core::tools::phase::RECOVERY_NEW_TOOLS,
        "{new:?}"
    );
    assert!(new.contains(&MISSED), "{new:?}");
    assert!(answer.tools.len() <= 11);
    // Phases that do not choose tools ignore it: tool-input keeps its one tool.
    let one = f
        .resolver
        .resolve(&searching(&f, "t", BOOKING, Phase::ToolInput, Some(QUERY)))
        .await;
    assert_eq!(one.tools.len(), 1);
    assert!(one.tools.iter().all(|t| t.reason != Reason::Recovery));
    // Formatter: never a mutating tool, whatever the search asks for.
    let fmt = f
        .resolver
        .resolve(&searching(
            &f,
            "m",
            BOOKING,
            Phase::Formatter,
            Some("cancel the prescription"),
        ))
        .await;
    assert!(fmt.tools.iter().all(|t| !t.mutating), "{:?}", fmt.tools);
    // An embedder outage: the search still runs, lexically, and says so.
    f.fake.failing.store(true, Ordering::Relaxed);
    let turn = "Book a follow-up appointment for Mr. Braun in two weeks.";
    let down = f
        .resolver
        .resolve(&searching(
            &f,
            "d",
            turn,
            Phase::Planner,
            Some("units converter for glucose mmol"),
        ))
        .await;
    assert_eq!(down.source, Source::ControlFallback);
    assert!(down.tools.len() <= 11);
    assert!(
        down.tools
            .iter()
            .any(|t| t.name == MISSED && t.reason == Reason::Recovery),
        "{:?}",
        down.tools
    );
    let trail = f.resolver.audit("d").await.unwrap();
    assert_eq!(
        trail[0].search.as_ref().map(|s| s.retrieval),
        Some(Retrieval::Lexical)
    );
}

#[tokio::test]
async fn the_resolve_handler_takes_the_tool_search_and_the_audit_shows_it() {
    let f = fixture().await;
    let (app, _dir) = app_with_store(&f);
    f.resolver.prepare(&f.tools).await.unwrap();
    let req = searching(&f, "h", BOOKING, Phase::Planner, Some(QUERY));
    let post = Request::post("/v1/resolve")
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&req).unwrap()))
        .unwrap();
    let (status, body) = call(app.clone(), post).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == MISSED && t["reason"] == "recovery"),
        "{body}"
    );
    let (status, body) = call(
        app,
        Request::get("/v1/audit/h").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body[0]["search"]["query"], QUERY);
    assert_eq!(body[0]["search"]["found"][0], MISSED);
    assert!(
        !body.to_string().contains("Krause"),
        "the turn's text is still never kept"
    );
}

#[tokio::test]
async fn calls_are_audited_with_the_reason_of_each_miss_and_counted() {
    let f = fixture().await;
    let (app, _dir) = app_with_store(&f);
    f.resolver.prepare(&f.tools).await.unwrap();
    let mut req = request(
        &f,
        "sess-shadow",
        "Search for the patient Hannelore Krause, born 1941.",
        Phase::Planner,
    );
    req.shadow = true;
    let post = Request::post("/v1/resolve")
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&req).unwrap()))
        .unwrap();
    let (status, body) = call(app.clone(), post).await;
    assert_eq!(status, StatusCode::OK);
    let answer: ResolveResponse = serde_json::from_value(body).unwrap();
    let turn = answer.turn.expect("a turn with a session is numbered");
    let hit = answer.tools[0].name.clone();
    // A shadow set is never the session's audited set: the model did not see it.
    assert!(f
        .resolver
        .sessions
        .lock()
        .await
        .prior("sess-shadow")
        .is_empty());

    let calls = keyhole_core::proto::calls::CallsRequest {
        session: Some("sess-shadow".into()),
        phase: Phase::Planner,
        turn: Some(turn),
        shadow: true,
        bytes_in: 40_000,
        bytes_out: 6_000,
        calls: vec![
            keyhole_core::proto::calls::CalledTool {
                name: hit.clone(),
                covered: true,
            },
            keyhole_core::proto::calls::CalledTool {
                name: "billing__invoice__create".into(),
                covered: false,
            },
            keyhole_core::proto::calls::CalledTool {
                name: keyhole_core::tools::recovery::TOOL_NAME.into(),
                covered: false,
            },
            // Never ranked: no such tool in the registry.
            keyhole_core::proto::calls::CalledTool {
                name: "billing__invoice__void".into(),
                covered: false,
            },
        ],
    };
    assert_eq!(
        post_calls(&app, serde_json::to_vec(&calls).unwrap()).await,
        StatusCode::NO_CONTENT
    );

    let body = audit_since_start(&app).await;
    let entry = &body[0]["entries"][0];
    assert_eq!(body[0]["session"], "sess-shadow");
    assert_eq!(entry["shadow"], true);
    assert_eq!(entry["turn"], turn);
    assert_eq!(entry["bytes"]["in"], 40_000);
    assert_eq!(entry["calls"][0]["tool"], hit.as_str());
    assert_eq!(entry["calls"][0]["covered"], true);
    assert!(entry["calls"][0].get("missed").is_none());
    assert_eq!(entry["calls"][1]["covered"], false);
    // Under the threshold, and not among the best searched tools it spares.
    assert_eq!(entry["calls"][1]["missed"], "below-threshold");
    assert_eq!(entry["calls"][3]["missed"], "below-threshold");
    assert_eq!(entry["calls"][2]["missed"], "tool-search");
    let text = body.to_string();
    assert!(!text.contains("Krause"), "{text}");

    let metrics = crate::test_util::metrics_text(&app).await;
    assert!(
        metrics.contains(&format!(
            "keyhole_calls_total{{phase=\"planner\",tool=\"{hit}\",covered=\"true\",mode=\"shadow\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "keyhole_calls_total{phase=\"planner\",tool=\"keyhole_tool_search\",covered=\"false\",mode=\"shadow\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_list_of_answers_is_audited_turn_by_turn() {
    let f = fixture().await;
    let (app, _dir) = app_with_store(&f);
    f.resolver.prepare(&f.tools).await.unwrap();
    // Two sessions' turns, answered in one post as a worker sends them.
    let mut answers = Vec::new();
    for (session, turn_text) in [
        ("sess-list-1", "Search for the patient Hannelore Krause."),
        ("sess-list-2", "Book a follow-up appointment in four weeks."),
    ] {
        let req = request(&f, session, turn_text, Phase::Planner);
        let post = Request::post("/v1/resolve")
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&req).unwrap()))
            .unwrap();
        let (status, body) = call(app.clone(), post).await;
        assert_eq!(status, StatusCode::OK);
        let answer: ResolveResponse = serde_json::from_value(body).unwrap();
        answers.push(keyhole_core::proto::calls::CallsRequest {
            session: Some(session.into()),
            phase: Phase::Planner,
            turn: answer.turn,
            bytes_in: 1_000 * (answers.len() as u64 + 1),
            bytes_out: 100,
            calls: vec![keyhole_core::proto::calls::CalledTool {
                name: answer.tools[0].name.clone(),
                covered: true,
            }],
            ..Default::default()
        });
    }
    let serialised: Vec<Vec<u8>> = answers
        .iter()
        .map(|a| serde_json::to_vec(a).unwrap())
        .collect();
    let list = keyhole_core::proto::calls::list_body(serialised.iter().map(Vec::as_slice));
    assert_eq!(post_calls(&app, list).await, StatusCode::NO_CONTENT);

    let body = audit_since_start(&app).await;
    for (i, answer) in answers.iter().enumerate() {
        let session = body
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session"] == answer.session.as_deref().unwrap())
            .unwrap_or_else(|| panic!("{:?} audited: {body}", answer.session));
        let entry = &session["entries"][0];
        assert_eq!(entry["bytes"]["in"], 1_000 * (i as u64 + 1), "{entry}");
        assert_eq!(entry["calls"][0]["tool"], answer.calls[0].name.as_str());
        assert_eq!(entry["calls"][0]["covered"], true);
    }

    // A body that is neither an answer nor a list of them is refused.
    assert_eq!(
        post_calls(&app, b"[1, 2]".to_vec()).await,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn a_turn_of_two_asks_retrieves_each_clause_in_the_turns_embedding_request() {
    let f = fixture().await;
    // The first sight of the registry starts its indexing.
    f.resolver
        .resolve(&request(
            &f,
            "first",
            "show the vital signs",
            Phase::Planner,
        ))
        .await;
    wait_ready(&f).await;
    let turn = "Cancel the appointment of Mrs. Krause on Friday, then send a message to the night nurse about her insulin.";
    let clauses = f.resolver.rank.settings().clauses.split(turn);
    assert_eq!(clauses.len(), 2, "{clauses:?}");
    f.fake.seen.lock().unwrap().clear();
    let answer = f
        .resolver
        .resolve(&request(&f, "two-asks", turn, Phase::Planner))
        .await;
    let seen = f.fake.seen.lock().unwrap().clone();
    // The turn and both clauses, in one request: embedded once each.
    for text in std::iter::once(turn).chain(clauses.iter().copied()) {
        assert_eq!(
            seen.iter().filter(|s| s.as_str() == text).count(),
            1,
            "{text:?} in {seen:?}"
        );
    }
    assert!(
        (6..=12).contains(&answer.tools.len()),
        "{}",
        answer.tools.len()
    );
    let names: Vec<&str> = answer.tools.iter().map(|t| t.name.as_str()).collect();
    for tool in ["appointment__manage", "message__send"] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    let trail = f.resolver.audit("two-asks").await.unwrap();
    assert_eq!(trail[0].retrieval, Retrieval::Hybrid);
    assert_eq!(trail[0].clauses, 2);

    // One ask: retrieved whole, one text embedded.
    f.fake.seen.lock().unwrap().clear();
    let one = "Cancel the appointment of Mrs. Krause on Friday.";
    f.resolver
        .resolve(&request(&f, "one-ask", one, Phase::Planner))
        .await;
    assert_eq!(*f.fake.seen.lock().unwrap(), [one]);
    assert_eq!(f.resolver.audit("one-ask").await.unwrap()[0].clauses, 0);
}
