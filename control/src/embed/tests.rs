//! The embedder client against a test double of the endpoint that records
//! every request and holds each one until the test releases it, so that what
//! is in flight, and what waits, is decided by the test and not by timing.

use super::*;
use crate::test_util::bag_of_words;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use std::sync::atomic::AtomicBool;
use tokio::sync::Semaphore;

/// An embeddings endpoint that records each request's texts, tells the test
/// it arrived, and answers only once the test releases it.
struct HeldEmbedder {
    url: String,
    /// Each request's `input`, in arrival order.
    requests: Arc<Mutex<Vec<Vec<String>>>>,
    /// One message per request as it arrives.
    arrived: mpsc::UnboundedReceiver<()>,
    /// One permit answers one request.
    gate: Arc<Semaphore>,
    /// Answer 503 while set.
    failing: Arc<AtomicBool>,
}

#[derive(Clone)]
struct HeldState {
    requests: Arc<Mutex<Vec<Vec<String>>>>,
    arrived: mpsc::UnboundedSender<()>,
    gate: Arc<Semaphore>,
    failing: Arc<AtomicBool>,
}

async fn held(
    State(s): State<HeldState>,
    Json(body): Json<serde_json::Value>,
) -> Result<Json<serde_json::Value>, StatusCode> {
    let texts: Vec<String> = body["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    s.requests.lock().await.push(texts.clone());
    let _ = s.arrived.send(());
    s.gate.acquire().await.unwrap().forget();
    if s.failing.load(Ordering::SeqCst) {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    let data: Vec<serde_json::Value> = texts
        .iter()
        .enumerate()
        .map(|(index, t)| serde_json::json!({"index": index, "embedding": bag_of_words(t, 16)}))
        .collect();
    Ok(Json(serde_json::json!({"data": data})))
}

impl HeldEmbedder {
    async fn start() -> HeldEmbedder {
        let (tx, arrived) = mpsc::unbounded_channel();
        let state = HeldState {
            requests: Arc::default(),
            arrived: tx,
            gate: Arc::new(Semaphore::new(0)),
            failing: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/embeddings", post(held))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        HeldEmbedder {
            url,
            requests: state.requests,
            arrived,
            gate: state.gate,
            failing: state.failing,
        }
    }

    fn client(&self) -> Embedder {
        let config = EmbedderConfig {
            url: self.url.clone(),
            timeout: Duration::from_secs(10),
            attempts: 1,
            ..EmbedderConfig::default()
        };
        Embedder::try_new(config).unwrap()
    }

    /// Waits until the next request has arrived (and is held).
    async fn next_request(&mut self) {
        tokio::time::timeout(Duration::from_secs(10), self.arrived.recv())
            .await
            .unwrap()
            .unwrap();
    }

    /// Lets `n` requests answer.
    fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    async fn requests(&self) -> Vec<Vec<String>> {
        self.requests.lock().await.clone()
    }
}

/// Starts one query on its own task; its ask is queued when this returns.
async fn asked(embedder: &Embedder, text: &str) -> Asked {
    embedder.ask(text, None).await.unwrap()
}

#[tokio::test]
async fn turns_that_wait_while_a_request_is_out_go_together_in_the_next() {
    let mut double = HeldEmbedder::start().await;
    let embedder = double.client();
    // The embedder is idle: the first turn goes at once, alone.
    let first = asked(&embedder, "turn 0").await;
    double.next_request().await;
    // Eight turns arrive while it is out.
    let mut waiting = Vec::new();
    for i in 1..=8 {
        waiting.push(asked(&embedder, &format!("turn {i}")).await);
    }
    double.release(2);
    let v0 = first.wait().await.unwrap();
    assert_eq!(&*v0, &bag_of_words("turn 0", 16)[..]);
    for (i, w) in waiting.into_iter().enumerate() {
        let v = w.wait().await.unwrap();
        assert_eq!(
            &*v,
            &bag_of_words(&format!("turn {}", i + 1), 16)[..],
            "each waiter gets its own vector"
        );
    }
    let requests = double.requests().await;
    let expected: Vec<String> = (1..=8).map(|i| format!("turn {i}")).collect();
    assert_eq!(
        requests,
        vec![vec!["turn 0".to_owned()], expected],
        "9 turns, 2 requests"
    );
    assert_eq!(embedder.query_requests(), 2);
    assert_eq!(embedder.texts_embedded(), 9);
}

#[tokio::test]
async fn a_batch_is_never_larger_than_batch_size() {
    let mut double = HeldEmbedder::start().await;
    let config = EmbedderConfig {
        url: double.url.clone(),
        attempts: 1,
        batch_size: 3,
        ..EmbedderConfig::default()
    };
    let embedder = Embedder::try_new(config).unwrap();
    let first = asked(&embedder, "turn 0").await;
    double.next_request().await;
    let mut waiting = Vec::new();
    for i in 1..=7 {
        waiting.push(asked(&embedder, &format!("turn {i}")).await);
    }
    double.release(10);
    first.wait().await.unwrap();
    for w in waiting {
        w.wait().await.unwrap();
    }
    let sizes: Vec<usize> = double.requests().await.iter().map(Vec::len).collect();
    assert_eq!(sizes, [1, 3, 3, 1]);
}

#[tokio::test]
async fn one_text_asked_by_several_turns_at_once_is_embedded_once() {
    let mut double = HeldEmbedder::start().await;
    let embedder = double.client();
    let first = asked(&embedder, "turn 0").await;
    double.next_request().await;
    // The same turn as planner, agent call and formatter see it, spaced and
    // spelled differently (NFD "ü", a no-break space); and the text in
    // flight asked once more.
    let spellings = [
        "Termin für Herrn Müller",
        "  Termin  für Herrn\u{a0}Mu\u{308}ller\n",
        "Termin für\tHerrn Müller",
    ];
    let mut same = Vec::new();
    for s in spellings {
        same.push(asked(&embedder, s).await);
    }
    let again = asked(&embedder, " turn  0 ").await;
    double.release(2);
    first.wait().await.unwrap();
    again.wait().await.unwrap();
    let vectors: Vec<Arc<[f32]>> = {
        let mut out = Vec::new();
        for w in same {
            out.push(w.wait().await.unwrap());
        }
        out
    };
    assert!(vectors.iter().all(|v| v == &vectors[0]));
    assert_eq!(
        double.requests().await,
        vec![
            vec!["turn 0".to_owned()],
            vec!["Termin für Herrn Müller".to_owned()]
        ]
    );
    // Asked again later: from the cache, no request.
    let cached = embedder
        .embed_query("Termin für Herrn Müller ", None)
        .await
        .unwrap();
    assert_eq!(cached, vectors[0]);
    assert!(
        embedder
            .is_cached(Side::Query, "Termin  für Herrn Müller")
            .await
    );
    assert_eq!(embedder.query_requests(), 2);
    assert_eq!(embedder.texts_embedded(), 2);
}

#[tokio::test]
async fn a_turn_that_stops_waiting_costs_the_others_nothing() {
    let mut double = HeldEmbedder::start().await;
    let embedder = double.client();
    let first = asked(&embedder, "turn 0").await;
    double.next_request().await;
    // Queued behind it: one gives up before it is sent, two stay.
    let gone = asked(&embedder, "given up while queued").await;
    let a = asked(&embedder, "turn a").await;
    let b = asked(&embedder, "turn b").await;
    drop(gone);
    double.release(1);
    first.wait().await.unwrap();
    double.next_request().await;
    assert_eq!(
        double.requests().await[1],
        ["turn a", "turn b"],
        "the text nobody waits for is not sent"
    );
    // Its request is out; now one of its turns passes its deadline.
    let timed_out = tokio::time::timeout(Duration::from_millis(20), a.wait()).await;
    assert!(
        timed_out.is_err(),
        "the request is held, so the wait ends at its deadline"
    );
    double.release(1);
    let vb = b.wait().await.unwrap();
    assert_eq!(&*vb, &bag_of_words("turn b", 16)[..]);
    // The vector of the turn that left is cached for its next ask.
    assert!(embedder.is_cached(Side::Query, "turn a").await);
    assert!(
        !embedder
            .is_cached(Side::Query, "given up while queued")
            .await
    );
    // Nothing waits now: the text given up goes alone, as spare work.
    double.next_request().await;
    assert_eq!(double.requests().await[2], ["given up while queued"]);
    assert_eq!(embedder.query_requests(), 3);
}

#[tokio::test]
async fn a_turn_ranked_without_its_vector_is_embedded_when_the_embedder_is_idle() {
    let mut double = HeldEmbedder::start().await;
    let embedder = double.client();
    // Too slow for the deadline: answered Late and not sent with it.
    embedder.set_per_text_estimate(Duration::from_secs(10));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    let err = embedder
        .embed_query("planner turn", Some(deadline))
        .await
        .unwrap_err();
    assert!(matches!(err, EmbedError::Late), "{err:?}");
    // The embedder is idle and nothing waits: the same turn's next phase
    // will want it, so it is sent as spare work and cached.
    double.next_request().await;
    assert_eq!(double.requests().await, [["planner turn"]]);
    double.release(1);
    for _ in 0..200 {
        if embedder.is_cached(Side::Query, "planner turn").await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(embedder.is_cached(Side::Query, "planner turn").await);
    // The next phase's ask costs the embedder nothing.
    embedder
        .embed_query("planner  turn", Some(deadline))
        .await
        .unwrap();
    assert_eq!(double.requests().await.len(), 1);
}

#[tokio::test]
async fn spare_work_waits_while_a_turn_waits_and_a_turn_asking_for_it_takes_it_back() {
    let mut double = HeldEmbedder::start().await;
    let embedder = double.client();
    let first = asked(&embedder, "turn 0").await;
    double.next_request().await;
    // Queued behind it: two give up, one still waits.
    let gone = asked(&embedder, "given up 1").await;
    let again = asked(&embedder, "given up 2").await;
    let live = asked(&embedder, "waiting").await;
    drop(gone);
    drop(again);
    double.release(1);
    first.wait().await.unwrap();
    double.next_request().await;
    assert_eq!(
        double.requests().await[1],
        ["waiting"],
        "the turn waiting goes first"
    );
    // While it is out, a turn asks for a text given up: it is queued again
    // and goes as a turn's text, not as spare work.
    let back = asked(&embedder, "given up 2").await;
    double.release(1);
    live.wait().await.unwrap();
    double.next_request().await;
    assert_eq!(double.requests().await[2], ["given up 2"]);
    double.release(1);
    back.wait().await.unwrap();
    // Then the spare text nobody asked for again.
    double.next_request().await;
    assert_eq!(double.requests().await[3], ["given up 1"]);
}

#[test]
fn the_cost_has_a_part_per_request_and_a_part_per_text() {
    // One text in 50 ms, sixteen in 500 ms: 20 ms a request, 30 ms a text.
    let samples = [(1, 50_000), (16, 500_000), (1, 50_000), (16, 500_000)];
    let cost = batch::Cost::fit(&samples, batch::Cost::default());
    assert!((cost.fixed_us - 20_000.0).abs() < 1.0, "{cost:?}");
    assert!((cost.per_text_us - 30_000.0).abs() < 1.0, "{cost:?}");
    assert_eq!(cost.of(8), Duration::from_millis(260));
    // Eight texts by the time per text of single requests would be 400 ms:
    // a list that fits a 300 ms deadline would be held back.
    assert!(cost.of(8) < Duration::from_millis(300));
    // All of one size: the part per request is kept, the rest is per text.
    let previous = batch::Cost {
        fixed_us: 10_000.0,
        per_text_us: 1.0,
    };
    let same = batch::Cost::fit(&[(1, 60_000), (1, 40_000)], previous);
    assert_eq!(
        same,
        batch::Cost {
            fixed_us: 10_000.0,
            per_text_us: 40_000.0
        }
    );
    // Never negative: a fixed part above a text's mean cost is cut to it.
    let odd = batch::Cost::fit(&[(1, 100_000), (2, 100_000), (4, 100_000)], previous);
    assert!(odd.fixed_us >= 0.0 && odd.per_text_us >= 0.0, "{odd:?}");
    assert!(odd.of(1) <= Duration::from_millis(100), "{odd:?}");
}

#[tokio::test]
async fn a_failed_request_fails_every_turn_it_carried() {
    let mut double = HeldEmbedder::start().await;
    let embedder = double.client();
    let first = asked(&embedder, "turn 0").await;
    double.next_request().await;
    let mut waiting = Vec::new();
    for i in 1..=3 {
        waiting.push(asked(&embedder, &format!("turn {i}")).await);
    }
    double.release(1);
    first.wait().await.unwrap();
    double.next_request().await;
    double.failing.store(true, Ordering::SeqCst);
    double.release(1);
    for w in waiting {
        let err = w.wait().await.unwrap_err();
        assert!(matches!(err, EmbedError::Batch(_)), "{err:?}");
        assert!(
            matches!(err.cause(), EmbedError::Status { status: 503, .. }),
            "{err:?}"
        );
    }
    // Nothing was cached; once the embedder answers again, so do they.
    double.failing.store(false, Ordering::SeqCst);
    double.release(1);
    embedder.embed_query("turn 1", None).await.unwrap();
    assert_eq!(double.requests().await.len(), 3);
}

#[tokio::test]
async fn a_turn_that_would_come_back_after_its_deadline_is_not_sent() {
    let double = HeldEmbedder::start().await;
    let embedder = double.client();
    embedder.set_per_text_estimate(Duration::from_secs(10));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    let err = embedder
        .embed_query("too late", Some(deadline))
        .await
        .unwrap_err();
    assert!(matches!(err, EmbedError::Late), "{err:?}");
    // Answered while the double holds every request: it did not wait for one.
    assert!(double.requests().await.len() <= 1);
    // Without a deadline it waits for the embedder (joining the spare
    // request that carries the text since: one request in all).
    double.release(1);
    embedder.embed_query("too late", None).await.unwrap();
    assert_eq!(double.requests().await.len(), 1);
}

#[tokio::test]
async fn a_request_carries_no_more_turns_than_can_come_back_by_their_deadline() {
    let mut double = HeldEmbedder::start().await;
    let embedder = double.client();
    let first = asked(&embedder, "turn 0").await;
    double.next_request().await;
    // One text costs about 1 s lately; the turns queued have 2.5 s left.
    // Request 0's quick answer lowers the estimate by at most an eighth
    // (7/8 s a text): two fit, three would not, with 0.75 s to spare.
    embedder.set_per_text_estimate(Duration::from_secs(1));
    let deadline = tokio::time::Instant::now() + Duration::from_millis(2500);
    let mut waiting = Vec::new();
    for i in 1..=5 {
        waiting.push(
            embedder
                .ask(&format!("turn {i}"), Some(deadline))
                .await
                .unwrap(),
        );
    }
    double.release(1);
    first.wait().await.unwrap();
    double.next_request().await;
    assert_eq!(double.requests().await[1], ["turn 1", "turn 2"]);
    double.release(10);
    for w in waiting {
        // Each is answered: its vector, or late; none is left hanging.
        match w.wait().await {
            Ok(_) | Err(EmbedError::Late) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[test]
fn the_query_cache_evicts_the_least_recently_used() {
    let mut cache = query::QueryCache::new(2);
    let v = |x: f32| -> Arc<[f32]> { vec![x].into() };
    cache.insert(key("m", "a"), v(1.0));
    cache.insert(key("m", "b"), v(2.0));
    assert!(
        cache.get(&key("m", "a")).is_some(),
        "a is now the most recent"
    );
    cache.insert(key("m", "c"), v(3.0));
    assert_eq!(cache.len(), 2);
    assert!(
        !cache.contains(&key("m", "b")),
        "b was the least recently used"
    );
    assert!(cache.contains(&key("m", "a")) && cache.contains(&key("m", "c")));
    cache.insert(key("m", "c"), v(4.0));
    assert_eq!(cache.len(), 2);
    assert_eq!(&*cache.get(&key("m", "c")).unwrap(), &[4.0]);
}

#[tokio::test]
async fn query_vectors_are_bounded_and_never_written_to_the_cache_file() {
    let mut double = HeldEmbedder::start().await;
    double.release(100);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.bin");
    let config = EmbedderConfig {
        url: double.url.clone(),
        attempts: 1,
        query_cache: 3,
        cache_path: Some(path.clone()),
        ..EmbedderConfig::default()
    };
    let embedder = Embedder::try_new(config).unwrap();
    for i in 0..10 {
        embedder
            .embed_query(&format!("turn {i}"), None)
            .await
            .unwrap();
        double.next_request().await;
    }
    assert_eq!(embedder.queries.lock().await.len(), 3);
    assert!(
        embedder.is_cached(Side::Query, "turn 9").await
            && !embedder.is_cached(Side::Query, "turn 0").await
    );
    embedder.embed(Side::Document, &["a tool"]).await.unwrap();
    assert_eq!(
        load_cache(&path).unwrap().len(),
        1,
        "only the document is on disk"
    );
}

#[test]
fn canonical_text_is_nfkc_with_whitespace_collapsed() {
    assert_eq!(
        query::canonical("\t Order  a\u{3000}lipid\r\npanel\u{a0}"),
        "Order a lipid panel"
    );
    assert_eq!(
        query::canonical("Mu\u{308}ller"),
        query::canonical("Müller")
    );
    assert_eq!(query::canonical("ＡＢＣ ﬁ"), "ABC fi");
    assert_eq!(query::canonical("   "), "");
}

#[test]
fn cache_file_round_trips_and_ignores_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.bin");
    let a: Arc<[f32]> = vec![1.0, -2.5, 3.0].into();
    append_cache(&path, &[(key("m", "a"), a.clone())]).unwrap();
    append_cache(&path, &[(key("m", "b"), vec![0.5; 384].into())]).unwrap();
    // A crash mid-write leaves a partial record.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
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
            EmbeddingItem {
                index: 1,
                embedding: vec![2.0],
            },
            EmbeddingItem {
                index: 0,
                embedding: vec![1.0],
            },
        ],
    };
    assert_eq!(order(resp, 2).unwrap(), vec![vec![1.0], vec![2.0]]);
    let short = EmbeddingsResponse {
        data: vec![EmbeddingItem {
            index: 0,
            embedding: vec![1.0],
        }],
    };
    assert!(matches!(order(short, 2), Err(EmbedError::Malformed(_))));
}

#[tokio::test]
async fn under_overload_the_turns_with_the_most_time_left_go_first() {
    let mut double = HeldEmbedder::start().await;
    let embedder = double.client();
    let first = asked(&embedder, "turn 0").await;
    double.next_request().await;
    // About 7/8 s a text once request 0 answers (see above). The older turn
    // has 1.5 s left, the newer 2.5 s: both would take 1.75 s, too late for
    // the older. Oldest first, the request would carry the older alone and
    // the newer would wait behind it; most time left first, the newer goes.
    embedder.set_per_text_estimate(Duration::from_secs(1));
    let now = tokio::time::Instant::now();
    let older = embedder
        .ask("older turn", Some(now + Duration::from_millis(1500)))
        .await
        .unwrap();
    let newer = embedder
        .ask("newer turn", Some(now + Duration::from_millis(2500)))
        .await
        .unwrap();
    double.release(1);
    first.wait().await.unwrap();
    double.next_request().await;
    assert_eq!(double.requests().await[1], ["newer turn"]);
    double.release(10);
    newer.wait().await.unwrap();
    match older.wait().await {
        Ok(_) | Err(EmbedError::Late) => {}
        Err(e) => panic!("{e:?}"),
    }
}
