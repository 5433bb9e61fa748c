//! An alias is never decoded to another record: the wrong-record scenarios of
//! the HMS route end to end (the real `.wasm` in a real Envoy, the real control
//! binary), on the embedded store and on Redis.
//!
//! In each scenario a session's map is lost or recreated while the model still
//! holds its aliases: control killed with SIGKILL and its alias store file
//! (`<data dir>/aliases/aliases.redb`) deleted, the session expired (`--session-ttl-secs 1`) and its name used
//! again, Redis flushed. The new map then issues the *same number* to a
//! different patient (`patient-<new epoch>-001` for Bob where
//! `patient-<old epoch>-001` was Anna). Every alias of the old map must be
//! refused with a 4xx naming it, and nothing may reach HMS.

use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{Stack, StackOptions};
use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SESSION_HEADER: &str = "x-keyhole-session";
const SEARCH: &str = "/api/v2/patients/search";
const ANNA: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
const BOB: &str = "74229a55-de5f-4d66-af4a-88e122c37321";

/// The patient search as HMS answers it: these patients, in this order.
fn search_body(patients: &[(&str, &str)]) -> Vec<u8> {
    let data: Vec<Value> = patients
        .iter()
        .map(|(id, fhir)| serde_json::json!({"id": id, "fhirId": fhir, "name": "x"}))
        .collect();
    serde_json::to_vec(&serde_json::json!({ "data": data })).unwrap()
}

struct Reply {
    status: u16,
    body: Vec<u8>,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(
    stack: &Stack,
    session: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let client = reqwest::Client::new();
    let mut req = client
        .request(
            method.parse().unwrap(),
            format!("{}{path}", stack.envoy.hms_url()),
        )
        .header(SESSION_HEADER, session);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&b).unwrap());
    }
    let resp = req.send().await.expect("request through envoy");
    let status = resp.status().as_u16();
    let body = resp.bytes().await.expect("body").to_vec();
    Reply { status, body }
}

/// Serves the search with `patients` and returns the aliases the client got,
/// in order.
async fn search(stack: &Stack, session: &str, patients: &[(&str, &str)]) -> Vec<String> {
    stack.hms.set(SEARCH, Canned::json(search_body(patients)));
    let reply = send(stack, session, "GET", &format!("{SEARCH}?q=x"), None).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v: Value = serde_json::from_slice(&reply.body).unwrap();
    let out: Vec<String> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    for (a, p) in out.iter().zip(v["data"].as_array().unwrap()) {
        assert_eq!(
            p["fhirId"].as_str(),
            Some(a.as_str()),
            "one alias per patient"
        );
    }
    assert!(!reply.text().contains(ANNA) && !reply.text().contains(BOB));
    out
}

/// `patient-k7q2-001` → (`k7q2`, `001`).
fn epoch_and_number(alias: &str) -> (String, String) {
    let parts: Vec<&str> = alias.rsplitn(3, '-').collect();
    assert_eq!(parts.len(), 3, "{alias}");
    (parts[1].to_owned(), parts[0].to_owned())
}

/// Asserts a local 4xx JSON error naming `alias`, and that HMS saw nothing.
fn assert_refused(stack: &Stack, reply: &Reply, alias: &str, case: &str) {
    assert!(
        (400..500).contains(&reply.status),
        "{case}: status {}: {}",
        reply.status,
        reply.text()
    );
    let v: Value = serde_json::from_slice(&reply.body)
        .unwrap_or_else(|e| panic!("{case}: not JSON ({e}): {}", reply.text()));
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(alias),
        "{case}: the error names {alias}: {message}"
    );
    let seen = stack.hms.seen();
    assert!(
        seen.is_empty(),
        "{case}: HMS received {:?}",
        seen.iter().map(|r| (&r.uri, &r.body)).collect::<Vec<_>>()
    );
}

/// How the session's map is lost.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// kill -9 of control, `aliases.redb` deleted, restart.
    KillAndDeleteStore,
    /// Idle past `--session-ttl-secs 1`.
    Expiry,
    /// Redis `FLUSHALL`.
    Flush,
}

/// One scenario: Anna and Bob aliased in the old map; the map lost; Bob alone
/// aliased in the new map (so he gets number 001, Anna's old number); every
/// old alias refused everywhere, the new one decoded to Bob.
async fn scenario(stack: &mut Stack, session: &str, loss: Loss) {
    let old = search(stack, session, &[(ANNA, "pat-000123"), (BOB, "pat-000456")]).await;
    let (old_anna, old_bob) = (old[0].clone(), old[1].clone());
    // The old map decodes: a sanity check of the set-up.
    stack.hms.clear();
    let r = send(
        stack,
        session,
        "GET",
        &format!("/api/v2/patients/{old_anna}"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(stack.hms.seen()[0].uri, format!("/api/v2/patients/{ANNA}"));

    match loss {
        Loss::KillAndDeleteStore => {
            let control = stack.control.as_mut().expect("control");
            control.kill().await.expect("kill -9");
            let store = control.data_dir.join("aliases").join("aliases.redb");
            std::fs::remove_file(&store).unwrap_or_else(|e| panic!("{}: {e}", store.display()));
            control.restart().await.expect("restart");
        }
        Loss::Expiry => tokio::time::sleep(Duration::from_millis(2500)).await,
        Loss::Flush => flushall(&redis_url()).await,
    }

    let new = search(stack, session, &[(BOB, "pat-000456")]).await;
    let new_bob = new[0].clone();
    let (old_epoch, old_n) = epoch_and_number(&old_anna);
    let (new_epoch, new_n) = epoch_and_number(&new_bob);
    assert_eq!(
        old_n, new_n,
        "{loss:?}: the new map reissued Anna's number to Bob"
    );
    assert_ne!(
        old_epoch, new_epoch,
        "{loss:?}: a recreated map has a new epoch"
    );
    // The new map's alias decodes to Bob, and only to Bob (checked first: with
    // a 1 s TTL the new map must not expire before it is used).
    stack.hms.clear();
    let r = send(
        stack,
        session,
        "GET",
        &format!("/api/v2/patients/{new_bob}"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = stack.hms.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri, format!("/api/v2/patients/{BOB}"));

    for alias in [&old_anna, &old_bob] {
        let cases: Vec<(&str, &str, String, Option<Value>)> = vec![
            ("path", "GET", format!("/api/v2/patients/{alias}"), None),
            (
                "query",
                "GET",
                format!("/api/v2/appointments?patientId={alias}"),
                None,
            ),
            (
                "body",
                "POST",
                "/api/v2/appointments".into(),
                Some(serde_json::json!({"patientId": alias, "note": "follow-up"})),
            ),
            (
                "FHIR reference",
                "POST",
                "/fhir/R4/Appointment".into(),
                Some(
                    serde_json::json!({"participant": [{"actor": {"reference": format!("Patient/{alias}")}}]}),
                ),
            ),
        ];
        for (place, method, path, body) in cases {
            stack.hms.clear();
            let reply = send(stack, session, method, &path, body).await;
            assert_refused(
                stack,
                &reply,
                alias,
                &format!("{loss:?}, old alias {alias} in the {place}"),
            );
            if alias == &old_anna {
                assert!(
                    reply.text().contains("earlier map"),
                    "{loss:?}: the refusal says why: {}",
                    reply.text()
                );
            }
        }
    }
}

/// The Redis URL the test set-up started (`scripts/with-services.sh`).
fn redis_url() -> String {
    std::env::var("KEYHOLE_TEST_REDIS_URL")
        .expect("KEYHOLE_TEST_REDIS_URL is not set: run through scripts/with-services.sh with redis-server installed")
}

/// `FLUSHALL` as a raw RESP command (no client library, no redis-cli needed).
async fn flushall(url: &str) {
    let addr = url
        .trim_start_matches("redis://")
        .split('/')
        .next()
        .unwrap()
        .rsplit('@')
        .next()
        .unwrap()
        .to_owned();
    let mut s = tokio::net::TcpStream::connect(&addr).await.expect("redis");
    s.write_all(b"*1\r\n$8\r\nFLUSHALL\r\n").await.unwrap();
    let mut buf = [0u8; 5];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(
        &buf,
        b"+OK\r\n",
        "FLUSHALL answered {:?}",
        String::from_utf8_lossy(&buf)
    );
}

/// Distinguishes Redis key prefixes of runs that share one server.
fn prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("keyhole-epochs-{}-{nanos}", std::process::id())
}

fn options(extra: &[&str]) -> StackOptions {
    let mut options = StackOptions::default();
    options
        .control_args
        .extend(extra.iter().map(|s| (*s).to_owned()));
    options
}

#[tokio::test]
async fn embedded_store_killed_and_deleted_never_decodes_an_old_alias() {
    let mut stack = Stack::start(options(&[])).await.expect("stack");
    scenario(&mut stack, "s-epoch-lost", Loss::KillAndDeleteStore).await;
}

#[tokio::test]
async fn embedded_session_expired_and_name_reused_never_decodes_an_old_alias() {
    let mut stack = Stack::start(options(&["--session-ttl-secs", "1"]))
        .await
        .expect("stack");
    scenario(&mut stack, "s-epoch-expired", Loss::Expiry).await;
}

/// One test for both Redis scenarios: `FLUSHALL` would wipe a concurrent
/// test's keys.
#[tokio::test]
async fn redis_session_expired_or_flushed_never_decodes_an_old_alias() {
    let url = redis_url();
    let prefix = prefix();
    let mut stack = Stack::start(options(&[
        "--redis-url",
        &url,
        "--redis-prefix",
        &prefix,
        "--session-ttl-secs",
        "1",
    ]))
    .await
    .expect("stack");
    scenario(&mut stack, "s-epoch-expired", Loss::Expiry).await;
    scenario(&mut stack, "s-epoch-flushed", Loss::Flush).await;
}
