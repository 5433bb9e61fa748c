use super::*;
use crate::alias::{RedbStore, StoreConfig};
use crate::index::{Indexer, MemoryStore};
use crate::resolve::{Resolver, ResolverSettings};
use crate::server::router;
use crate::test_util::{fresh_namespace, FakeEmbedder};
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt as _;
use keyhole_core::alias::{EncodeRequest, IdInput, Taxonomy};
use keyhole_core::proto::tools::{registry_digest, ResolveRequest, ToolDescriptor};
use keyhole_core::proto::turn::TURN_PATH;
use keyhole_core::tools::rank::config::RankConfig;
use keyhole_core::Phase;
use std::time::Duration;
use tower::ServiceExt as _;

const UUID: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";

struct Fixture {
    _fake: FakeEmbedder,
    _dir: tempfile::TempDir,
    app: axum::Router,
    resolver: Arc<Resolver>,
    tax: Arc<Taxonomy>,
    tools: Vec<ToolDescriptor>,
}

async fn fixture() -> Fixture {
    let fake = FakeEmbedder::start(32).await;
    let namespace = fresh_namespace("turn");
    let store = Arc::new(MemoryStore::in_memory());
    let indexer = Arc::new(Indexer::try_new(fake.client(), store, &namespace).unwrap());
    let rank = RankConfig::try_new(Default::default()).unwrap();
    let resolver = Arc::new(Resolver::new(
        indexer,
        Arc::new(rank),
        None,
        ResolverSettings {
            retrieval_timeout: Duration::from_secs(2),
            ..ResolverSettings::default()
        },
    ));
    let dir = tempfile::tempdir().unwrap();
    let tax = Arc::new(Taxonomy::default());
    let config = StoreConfig::new(tax.clone(), Duration::from_secs(3600));
    let aliases = Arc::new(RedbStore::open(&dir.path().join("aliases"), config).unwrap());
    let tools: Vec<ToolDescriptor> = ["open a patient record", "create an invoice", "book a visit"]
        .iter()
        .enumerate()
        .map(|(i, d)| ToolDescriptor {
            name: format!("tool_{i}"),
            description: (*d).to_owned(),
            parameters: String::new(),
        })
        .collect();
    Fixture {
        _fake: fake,
        _dir: dir,
        app: router(AppState {
            resolver: resolver.clone(),
            aliases,
        }),
        resolver,
        tax,
        tools,
    }
}

fn question(f: &Fixture, with_tools: bool) -> serde_json::Value {
    let tools: Vec<ToolDescriptor> = f.tools.clone();
    let req = TurnRequest {
        version: TURN_VERSION,
        taxonomy: Some(f.tax.digest().to_owned()),
        encode: EncodeRequest {
            session: "s1".into(),
            ids: vec![IdInput {
                value: UUID.into(),
                kind: None,
                form: None,
                group: None,
            }],
            prompt: true,
        },
        resolve: ResolveRequest {
            session: Some("s1".into()),
            phase: Phase::AgentCall,
            turn: format!("open the record {UUID} and create an invoice"),
            registry: Some(registry_digest(
                tools
                    .iter()
                    .map(|t| (t.name.as_str(), t.description.as_str(), "")),
            )),
            tools: if with_tools { tools } else { Vec::new() },
            forced: Vec::new(),
            tool_search: None,
            shadow: false,
        },
    };
    serde_json::to_value(req).unwrap()
}

async fn post(
    app: &axum::Router,
    path: &str,
    body: &serde_json::Value,
) -> (StatusCode, serde_json::Value) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

#[tokio::test]
async fn one_call_answers_the_aliases_and_the_set() {
    let f = fixture().await;
    // Unknown registry: the aliases are minted all the same.
    let (status, body) = post(&f.app, TURN_PATH, &question(&f, false)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first: TurnResponse = serde_json::from_value(body).unwrap();
    assert_eq!(first.version, TURN_VERSION);
    assert_eq!(first.resolve, TurnResolve::UnknownRegistry);
    assert_eq!(first.aliases.len(), 1);
    assert!(!first.aliases[0].contains(UUID));

    let (status, body) = post(&f.app, TURN_PATH, &question(&f, true)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let second: TurnResponse = serde_json::from_value(body).unwrap();
    assert_eq!(
        second.aliases, first.aliases,
        "the session's alias, not a new one"
    );
    let TurnResolve::Answer(answer) = second.resolve else {
        panic!("{:?}", second.resolve)
    };
    assert!(!answer.tools.is_empty());

    // The same store as /v1/alias/encode: it answers the same alias.
    let encode = serde_json::json!({"session": "s1", "ids": [{"value": UUID}], "prompt": true});
    let (status, body) = post(&f.app, "/v1/alias/encode", &encode).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["aliases"][0], first.aliases[0].as_str());
}

#[tokio::test]
async fn a_text_that_cannot_be_aliased_is_ranked_without_it_not_refused() {
    const OTHER: &str = "5d1c7a8e-0c4f-4b8e-9a51-2f6d3b7e9c10";
    let f = fixture().await;
    // The session's turn before: its set is what a turn without text keeps.
    let (status, body) = post(&f.app, TURN_PATH, &question(&f, true)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let before: TurnResponse = serde_json::from_value(body).unwrap();
    let TurnResolve::Answer(before) = before.resolve else {
        panic!("{:?}", before.resolve)
    };
    let mut q = question(&f, true);
    // The turn and the query name an id the batch does not carry.
    q["resolve"]["turn"] = format!("open the record {UUID} and then {OTHER}").into();
    q["resolve"]["tool_search"] = serde_json::json!({"query": format!("records like {OTHER}")});
    let (status, body) = post(&f.app, TURN_PATH, &q).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: TurnResponse = serde_json::from_value(body).unwrap();
    assert_eq!(answer.aliases.len(), 1, "the batch is still aliased");
    let TurnResolve::Answer(set) = answer.resolve else {
        panic!("{:?}", answer.resolve)
    };
    let names = |tools: &[keyhole_core::proto::tools::SurfacedTool]| {
        tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(
        names(&set.tools),
        names(&before.tools),
        "the session's prior set"
    );
    let seen = f._fake.seen.lock().unwrap().join("\n");
    assert!(!seen.contains(OTHER) && !seen.contains(UUID), "{seen}");
    let metrics = crate::test_util::metrics_text(&f.app).await;
    assert!(
        metrics.contains("keyhole_control_turn_unaliased_total 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn another_version_or_taxonomy_is_refused_before_anything_is_done() {
    let f = fixture().await;
    let mut older = question(&f, true);
    older["version"] = 1.into();
    let (status, body) = post(&f.app, TURN_PATH, &older).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "version_mismatch");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("version 1") && message.contains("version 2"),
        "{message}"
    );

    let mut other = question(&f, true);
    other["taxonomy"] = "0".repeat(64).into();
    let (status, body) = post(&f.app, TURN_PATH, &other).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "taxonomy_mismatch");
}

#[tokio::test]
async fn the_ranking_reads_each_alias_as_its_kind_not_its_letters() {
    let f = fixture().await;
    // Indexed first: a turn that finds the index still building is ranked
    // without vectors, and its text never reaches the embedder, however
    // loaded the machine.
    f.resolver.prepare(&f.tools).await.unwrap();
    let (status, body) = post(&f.app, TURN_PATH, &question(&f, true)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: TurnResponse = serde_json::from_value(body).unwrap();
    let alias = answer.aliases[0].clone();
    assert!(matches!(answer.resolve, TurnResolve::Answer(_)));
    // Another session: another epoch, another alias for the same id.
    let mut other = question(&f, true);
    other["encode"]["session"] = "s2".into();
    other["resolve"]["session"] = "s2".into();
    let (status, body) = post(&f.app, TURN_PATH, &other).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: TurnResponse = serde_json::from_value(body).unwrap();
    assert_ne!(answer.aliases[0], alias, "sessions draw their own epochs");
    let seen = f._fake.seen.lock().unwrap().clone();
    let turns: Vec<&String> = seen
        .iter()
        .filter(|t| t.contains("open the record"))
        .collect();
    assert!(!turns.is_empty(), "{seen:?}");
    for t in turns {
        assert!(
            t.ends_with("open the record record id and create an invoice"),
            "{t}"
        );
        assert!(!t.contains(&alias) && !t.contains(UUID), "{t}");
    }
}
