//! Sentinel discovery, acknowledged writes and failover, against real
//! `redis-server` processes on loopback: a primary, a replica (`replicaof`)
//! and a Sentinel, started by each test on free ports.

use super::super::tests::{config, id, uuid_of, RedisServer};
use super::*;
use crate::alias::AliasStore;
use std::time::Duration;

async fn admin(port: u16) -> MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Waits until `check` holds (polled every 100 ms), at most `secs` seconds.
async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not after {secs} s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `INFO replication` of the server on `port`, or "" when it does not answer.
async fn replication(port: u16) -> String {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return String::new();
    };
    let Ok(mut con) = client.get_multiplexed_async_connection().await else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut con)
        .await
        .unwrap_or_default()
}

/// Whether the primary on `port` has a replica whose link is up.
async fn has_online_replica(port: u16) -> bool {
    replication(port).await.contains("state=online")
}

/// The port Sentinel names as primary of `name`.
async fn sentinel_primary(sentinel: u16, name: &str) -> Option<u16> {
    let mut con = admin(sentinel).await;
    let addr: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(name)
        .query_async(&mut con)
        .await
        .ok()
        .flatten();
    addr.and_then(|(_, p)| p.parse().ok())
}

/// Whether Sentinel knows a healthy replica of `name`.
async fn sentinel_knows_a_replica(sentinel: u16, name: &str) -> bool {
    let mut con = admin(sentinel).await;
    let replicas: Vec<HashMap<String, String>> = redis::cmd("SENTINEL")
        .arg("replicas")
        .arg(name)
        .query_async(&mut con)
        .await
        .unwrap_or_default();
    replicas.iter().any(|r| {
        r.get("flags")
            .is_some_and(|f| f == "slave" && r.get("master-link-status").is_some_and(|s| s == "ok"))
    })
}

fn patients(from: u32, n: u32) -> Vec<IdInput> {
    (from..from + n)
        .map(|i| id(&uuid_of(i), "patient", None, None))
        .collect()
}

fn store_config() -> StoreConfig {
    config(Duration::from_secs(3600))
}

fn acked(deadline_ms: u64) -> RedisOptions {
    RedisOptions {
        min_replicas_acked: 1,
        deadline: Duration::from_millis(deadline_ms),
    }
}

#[test]
fn settings_name_one_endpoint_with_clear_errors() {
    let s =
        |url, sentinels, master, acks| RedisEndpoint::from_settings(url, sentinels, master, acks);
    assert_eq!(s(None, None, None, 0), Ok(None));
    assert_eq!(
        s(Some("redis://r:6379/"), None, None, 1),
        Ok(Some(RedisEndpoint::Url("redis://r:6379/".into())))
    );
    assert_eq!(
        s(None, Some("s1:26379, s2:26380"), Some("kh"), 1),
        Ok(Some(RedisEndpoint::Sentinel {
            sentinels: vec![("s1".into(), 26379), ("s2".into(), 26380)],
            master: "kh".into()
        }))
    );
    assert_eq!(
        s(Some("redis://r/"), Some("s1:1"), Some("kh"), 0),
        Err(EndpointError::UrlAndSentinel)
    );
    assert_eq!(
        s(None, Some("s1:1"), None, 0),
        Err(EndpointError::NoMasterName)
    );
    assert_eq!(
        s(None, None, Some("kh"), 0),
        Err(EndpointError::MasterNameWithoutSentinel)
    );
    assert_eq!(
        s(None, None, None, 2),
        Err(EndpointError::AcksWithoutRedis { wanted: 2 })
    );
    for bad in ["s1", "s1:", ":26379", "s1:0", "s1:70000", "s1:1,", "s 1:2"] {
        let e = s(None, Some(bad), Some("kh"), 0).unwrap_err();
        assert!(
            e.to_string().starts_with("aliases.redis_sentinel: \"")
                && e.to_string().ends_with("is not host:port (port 1..65535)"),
            "{bad}: {e}"
        );
    }
}

/// min_replicas_acked = 1 and no replica: nothing is handed out, not even
/// on a second try (the first try's write is on the primary, unacknowledged);
/// once a replica acknowledges, the same aliases are answered.
#[tokio::test]
async fn an_alias_is_answered_only_after_a_replica_acknowledged_it() {
    let primary = RedisServer::start();
    let store = RedisStore::connect_to(
        RedisEndpoint::Url(primary.url()),
        "kh",
        store_config(),
        acked(1500),
    )
    .await
    .unwrap();
    let ids = patients(1, 3);
    for _ in 0..2 {
        match store.encode("s", &ids).await {
            Err(StoreError::Unacknowledged {
                acked: 0,
                wanted: 1,
                ..
            }) => {}
            other => panic!("want Unacknowledged, got {other:?}"),
        }
    }
    let port = primary.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    eventually(10, "replica online", || has_online_replica(primary.port)).await;
    // A replica that has just synced acknowledges from its first ACK on:
    // the first WAIT after "online" may still count 0.
    let mut answer = None;
    for _ in 0..50 {
        match store.encode("s", &ids).await {
            Ok(a) => {
                answer = Some(a);
                break;
            }
            Err(StoreError::Unacknowledged { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let aliases = answer.expect("never acknowledged by the online replica");
    assert_eq!(aliases.len(), 3);
    // The replica holds them: the records are there.
    let mut con = admin(replica.port).await;
    let held: usize = redis::cmd("HLEN")
        .arg("kh:s:e")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(held, 3);
    // The replica gone: even aliases the session knows are withheld.
    drop(replica);
    eventually(10, "replica gone", || async {
        !has_online_replica(primary.port).await
    })
    .await;
    assert!(matches!(
        store.encode("s", &ids).await,
        Err(StoreError::Unacknowledged { .. })
    ));
    // Decoding needs no acknowledgement.
    let d = store.decode("s", &aliases).await.unwrap();
    assert!(d.iter().all(Option::is_some));
}

/// A plain URL naming a replica: writes fail (READONLY) within the
/// deadline, nothing is answered.
#[tokio::test]
async fn a_read_only_replica_never_answers_an_encode() {
    let primary = RedisServer::start();
    let port = primary.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    eventually(10, "replica online", || has_online_replica(primary.port)).await;
    let store = RedisStore::connect_to(
        RedisEndpoint::Url(replica.url()),
        "kh",
        store_config(),
        RedisOptions {
            min_replicas_acked: 0,
            deadline: Duration::from_millis(400),
        },
    )
    .await
    .unwrap();
    let started = Instant::now();
    let e = store.encode("s", &patients(1, 1)).await.unwrap_err();
    let text = e.to_string().to_lowercase();
    assert!(
        text.contains("readonly") || text.contains("read only"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

/// Through Sentinel: a switch-over (the old primary demoted: READONLY) and
/// then a kill -9 of the new primary. The store finds each new primary
/// itself, and every alias it handed out decodes to the same id afterwards.
#[tokio::test]
async fn failovers_lose_no_alias_that_was_handed_out() {
    let p = RedisServer::start();
    let p_port = p.port.to_string();
    let r = RedisServer::start_with(&["--replicaof", "127.0.0.1", &p_port]);
    let mut p = p;
    let mut r = r;
    let sentinel = RedisServer::sentinel("kh", p.port);
    eventually(10, "replica online", || has_online_replica(p.port)).await;
    eventually(20, "sentinel knows the replica", || {
        sentinel_knows_a_replica(sentinel.port, "kh")
    })
    .await;
    let endpoint = RedisEndpoint::Sentinel {
        sentinels: vec![("127.0.0.1".into(), sentinel.port)],
        master: "kh".into(),
    };
    let store = RedisStore::connect_to(endpoint.clone(), "kh", store_config(), acked(1500))
        .await
        .unwrap();
    let mut handed: Vec<(String, Vec<String>, Vec<IdInput>)> = Vec::new();
    for s in 0..10u32 {
        let ids = patients(s * 10, 5);
        // A replica that has just synced acknowledges from its first ACK
        // on: the first WAITs after "online" may still count 0, and such an
        // encode hands nothing out.
        let mut aliases = None;
        for _ in 0..50 {
            match store.encode(&format!("s{s}"), &ids).await {
                Ok(a) => {
                    aliases = Some(a);
                    break;
                }
                Err(StoreError::Unacknowledged { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let aliases = aliases.expect("never acknowledged by the online replica");
        handed.push((format!("s{s}"), aliases, ids));
    }

    // Switch-over: P becomes a replica of R; the store's connection to P
    // answers READONLY to the next write.
    let mut con = admin(sentinel.port).await;
    let _: () = redis::cmd("SENTINEL")
        .arg("failover")
        .arg("kh")
        .query_async(&mut con)
        .await
        .unwrap();
    eventually(20, "R promoted", || async {
        sentinel_primary(sentinel.port, "kh").await == Some(r.port)
    })
    .await;
    eventually(20, "P replicates R", || has_online_replica(r.port)).await;
    let mut after_switch = 0;
    for s in 10..20u32 {
        let ids = patients(s * 10, 5);
        // The first attempts may meet the switch-over half done.
        let mut aliases = None;
        for _ in 0..20 {
            match store.encode(&format!("s{s}"), &ids).await {
                Ok(a) => {
                    aliases = Some(a);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        let aliases = aliases.expect("no encode succeeded after the switch-over");
        after_switch += 1;
        handed.push((format!("s{s}"), aliases, ids));
    }
    assert_eq!(after_switch, 10);

    // kill -9 of the primary (R): Sentinel promotes P.
    r.kill();
    eventually(30, "P promoted", || async {
        sentinel_primary(sentinel.port, "kh").await == Some(p.port)
    })
    .await;
    // A fresh store (another replica of control) and the one that lived
    // through both failovers decode every alias handed out to the same id.
    let fresh = RedisStore::connect_to(endpoint, "kh", store_config(), acked(1500))
        .await
        .unwrap();
    for st in [&store, &fresh] {
        for (session, aliases, ids) in &handed {
            let mut decoded = None;
            for _ in 0..20 {
                if let Ok(d) = st.decode(session, aliases).await {
                    decoded = Some(d);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let decoded = decoded.expect("decode never answered after the failover");
            for ((d, a), input) in decoded.iter().zip(aliases).zip(ids) {
                let d = d
                    .as_ref()
                    .unwrap_or_else(|| panic!("{a} lost in {session}"));
                assert_eq!(d.ids.uuid.as_deref(), Some(input.value.as_str()), "{a}");
            }
        }
    }
    // No replica left: new aliases are refused, never handed out unacknowledged.
    assert!(matches!(
        store.encode("s-new", &patients(900, 1)).await,
        Err(StoreError::Unacknowledged { .. })
    ));
    p.kill();
}
