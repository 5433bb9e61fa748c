//! One conformance suite for both stores, plus durability (kill -9 of a
//! process that answered), expiry, two processes encoding through one Redis,
//! and the HTTP routes.
//!
//! The Redis tests start their own `redis-server` (Debian package
//! `redis-server`) on a free port and fail with instructions when it is missing.

use super::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use keyhole_core::alias::{Form, IdInput, Taxonomy};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tower::ServiceExt;

pub(super) fn id(value: &str, kind: &str, form: Option<Form>, group: Option<u32>) -> IdInput {
    IdInput {
        value: value.into(),
        kind: Some(kind.into()),
        form,
        group,
    }
}

pub(super) fn config(ttl: Duration) -> StoreConfig {
    StoreConfig::new(Arc::new(Taxonomy::default()), ttl)
}

/// An alias without its epoch (`patient-k7q2-001` → `patient-001`), so tests
/// can name numbers; the epoch itself is random per session map.
fn plain(aliases: &[String]) -> Vec<String> {
    aliases.iter().map(|a| strip_epoch(a)).collect()
}

fn strip_epoch(a: &str) -> String {
    let t = Taxonomy::default();
    match t.parse_alias(a).and_then(|p| p.epoch) {
        Some(e) => a.replacen(&format!("-{e}-"), "-", 1),
        None => a.to_owned(),
    }
}

/// The epoch of an issued alias.
fn epoch_of(a: &str) -> String {
    Taxonomy::default()
        .parse_alias(a)
        .and_then(|p| p.epoch)
        .map(|e| e.to_string())
        .unwrap_or_default()
}

/// `patient-002` under the epoch of `issued` (`patient-k7q2-002`).
fn at(issued: &str, plain_alias: &str) -> String {
    let e = epoch_of(issued);
    match plain_alias.rsplit_once('-') {
        Some((p, n)) if !e.is_empty() => format!("{p}-{e}-{n}"),
        _ => plain_alias.to_owned(),
    }
}

pub(super) fn uuid_of(i: u32) -> String {
    format!("{i:08x}-92f7-44b7-9c91-4e3f0e900c71")
}

/// The behaviour every store must have. `session` makes fresh session names.
async fn conformance(store: &dyn AliasStore, session: &dyn Fn(&str) -> String) {
    let s = session("a");
    let entity = [
        id(&uuid_of(1), "patient", None, Some(1)),
        id("pat-000001", "patient", Some(Form::Fhir), Some(1)),
    ];
    let first = store.encode(&s, &entity).await.unwrap();
    assert_eq!(plain(&first), ["patient-001", "patient-001"]);
    assert!(
        !epoch_of(&first[0]).is_empty(),
        "stores issue aliases with an epoch: {first:?}"
    );
    let a = |p: &str| at(&first[0], p);
    // Re-encoding never mints; one member alone keeps the alias.
    assert_eq!(store.encode(&s, &entity).await.unwrap(), first);
    assert_eq!(
        plain(
            &store
                .encode(&s, &[id("pat-000001", "patient", Some(Form::Fhir), None)])
                .await
                .unwrap()
        ),
        ["patient-001"]
    );
    // FHIR id alone first, UUID joins later (the create response, then the list).
    let appt = store
        .encode(
            &s,
            &[id("appt-0009812", "appointment", Some(Form::Fhir), None)],
        )
        .await
        .unwrap();
    assert_eq!(plain(&appt), ["patient-appt-001"]);
    let joined = store
        .encode(
            &s,
            &[
                id(&uuid_of(2), "appointment", None, Some(4)),
                id("appt-0009812", "appointment", Some(Form::Fhir), Some(4)),
            ],
        )
        .await
        .unwrap();
    assert_eq!(plain(&joined), ["patient-appt-001", "patient-appt-001"]);
    // Decode: the right slots; unknown and sentinel aliases are None.
    let d = store
        .decode(
            &s,
            &[a("patient-appt-001"), a("patient-002"), a("patient-000")],
        )
        .await
        .unwrap();
    let appt = d[0].as_ref().unwrap();
    assert_eq!(
        (appt.ids.uuid.as_deref(), appt.ids.fhir_id.as_deref()),
        (Some(uuid_of(2).as_str()), Some("appt-0009812"))
    );
    assert_eq!(appt.kind, "appointment");
    assert!(d[1].is_none() && d[2].is_none());
    // Conflict: no alias minted, not even for the valid id of the batch.
    let before = store
        .encode(&s, &[id(&uuid_of(3), "patient", None, None)])
        .await
        .unwrap();
    assert_eq!(plain(&before), ["patient-002"]);
    let err = store
        .encode(
            &s,
            &[
                id(&uuid_of(9), "patient", None, None),
                id(&uuid_of(1), "patient", None, Some(7)),
                id(&uuid_of(3), "patient", None, Some(7)),
            ],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Session(SessionError::Conflict { .. })),
        "{err}"
    );
    assert!(store.decode(&s, &[a("patient-003")]).await.unwrap()[0].is_none());
    assert_eq!(
        plain(
            &store
                .encode(&s, &[id(&uuid_of(9), "patient", None, None)])
                .await
                .unwrap()
        ),
        ["patient-003"]
    );
    // Near-miss repair only to issued aliases, and only within the kind the
    // drift's own prefix names: `task-group-…` is a task group, never the task.
    store
        .encode(&s, &[id("task-0055101", "task", Some(Form::Fhir), None)])
        .await
        .unwrap();
    let d = store
        .decode(
            &s,
            &[a("task-item-001"), a("task-item-002"), a("task-group-001")],
        )
        .await
        .unwrap();
    assert_eq!(d[0].as_ref().map(|d| d.alias.clone()), Some(a("task-001")));
    assert!(d[1].is_none());
    assert!(
        d[2].is_none(),
        "a task group's alias never decodes to the task"
    );
    // Sessions are isolated: another session's alias decodes to nothing.
    let other = session("b");
    assert!(store.decode(&other, &[first[0].clone()]).await.unwrap()[0].is_none());
    let theirs = store
        .encode(&other, &[id(&uuid_of(3), "patient", None, None)])
        .await
        .unwrap();
    assert_eq!(plain(&theirs), ["patient-001"]);
    assert_ne!(
        theirs,
        first[..1],
        "another session's map has its own epoch"
    );
    // Known ids: every raw id of the session with its own alias, no other
    // session's.
    store.encode(&s, &[]).await.unwrap();
    let known = store.known(&s).await.unwrap();
    let alias_of = |v: &str| known.iter().find(|k| k.value == v).map(|k| k.alias.clone());
    assert_eq!(alias_of(&uuid_of(1)), Some(first[0].clone()));
    assert_eq!(alias_of("pat-000001"), Some(first[0].clone()));
    assert_eq!(alias_of("appt-0009812"), Some(a("patient-appt-001")));
    let known_b = store.known(&other).await.unwrap();
    assert_eq!(known_b.len(), 1);
    assert_eq!(
        (known_b[0].value.as_str(), known_b[0].alias.as_str()),
        (uuid_of(3).as_str(), theirs[0].as_str())
    );
    // From an LLM request, the aliases the session issued pass as themselves
    // and mint nothing; an alias-shaped value it did not issue is a raw id.
    let plain_id = |v: &str| IdInput {
        value: v.into(),
        kind: None,
        form: None,
        group: None,
    };
    let before = store.known(&s).await.unwrap().len();
    let prompt = [
        plain_id(&first[0]),
        plain_id(&a("task-001")),
        plain_id(&uuid_of(1)),
    ];
    assert_eq!(
        store
            .encode_from(&s, &prompt, Origin::Prompt)
            .await
            .unwrap(),
        [first[0].clone(), a("task-001"), first[0].clone()]
    );
    assert_eq!(
        store.known(&s).await.unwrap().len(),
        before,
        "nothing minted"
    );
    let foreign = store
        .encode_from(&s, &[plain_id(&theirs[0])], Origin::Prompt)
        .await
        .unwrap();
    assert_ne!(foreign[0], theirs[0]);
    assert_eq!(store.known(&s).await.unwrap().len(), before + 1);
    // Bad input.
    assert!(matches!(
        store.encode("", &entity).await,
        Err(StoreError::BadSession)
    ));
    assert!(matches!(
        store
            .encode(&s, &[id("x-1", "spaceship", None, None)])
            .await,
        Err(StoreError::Session(SessionError::UnknownKind { .. }))
    ));
}

/// One record's sightings merged in a session by [`merged_sightings`].
struct Merged {
    session: String,
    uuid: String,
    fhir_id: String,
    /// The aliases of the two sightings, in the order they were issued.
    earlier: [String; 2],
    /// The entity's one alias after the merge.
    alias: String,
}

impl Merged {
    /// The UUID as prose gives it (no kind), and the FHIR id alone.
    fn sightings(&self) -> [IdInput; 2] {
        [
            IdInput {
                value: self.uuid.clone(),
                kind: None,
                form: None,
                group: None,
            },
            id(&self.fhir_id, "patient", Some(Form::Fhir), None),
        ]
    }

    /// Both in one `{id, fhirId}` detail.
    fn detail(&self) -> [IdInput; 2] {
        [
            id(&self.uuid, "patient", None, Some(1)),
            id(&self.fhir_id, "patient", Some(Form::Fhir), Some(1)),
        ]
    }
}

/// Sightings of one record merge on the store as in `SessionMap`
/// (`sightings_of_one_entity_merge_and_both_aliases_keep_decoding`), in both
/// orders: a UUID seen in prose and its FHIR id seen alone get two aliases;
/// both in one `{id, fhirId}` detail are one entity, not a conflict, and take
/// the older alias; both earlier aliases keep decoding to the one record on
/// `store` and on `replica` (the same store, or another replica of it, which
/// read the session before the merge); see [`merged_hold`].
async fn merged_sightings(
    store: &dyn AliasStore,
    replica: &dyn AliasStore,
    session: &dyn Fn(&str) -> String,
) -> Vec<Merged> {
    let mut out = Vec::new();
    for reverse in [false, true] {
        let mut m = Merged {
            session: session(&format!("merge-{reverse}")),
            uuid: uuid_of(0x51),
            fhir_id: "pat-000051".into(),
            earlier: [String::new(), String::new()],
            alias: String::new(),
        };
        let [prose, fhir] = m.sightings();
        let (first, second) = if reverse {
            (fhir, prose)
        } else {
            (prose, fhir)
        };
        let a1 = store.encode(&m.session, &[first]).await.unwrap();
        let a2 = store.encode(&m.session, &[second]).await.unwrap();
        assert_ne!(a1, a2, "two sightings, two entities so far");
        // The UUID alone is of the fallback kind, the FHIR id a patient's.
        let mut kinds = [plain(&a1), plain(&a2)].concat();
        kinds.sort();
        assert_eq!(kinds, ["patient-001", "ref-001"]);
        m.earlier = [a1[0].clone(), a2[0].clone()];
        // The replica reads the session as it is before the merge.
        let d = replica.decode(&m.session, &m.earlier).await.unwrap();
        assert!(
            d.iter()
                .all(|d| d.as_ref().is_some_and(|d| d.ids.values().count() == 1)),
            "{d:?}"
        );

        let merged = store
            .encode(&m.session, &m.detail())
            .await
            .unwrap_or_else(|e| panic!("the merge was refused: {e}"));
        assert_eq!(merged[0], merged[1], "both members, one alias");
        assert_eq!(
            merged[0], m.earlier[0],
            "the older alias stays the entity's"
        );
        m.alias = merged[0].clone();
        for s in [store, replica] {
            merged_hold(s, &m).await;
        }
        out.push(m);
    }
    out
}

/// What a merge leaves on a store: both earlier aliases decode to the one
/// record (kind patient, both ids, the one alias); the detail and each sighting
/// alone keep the one alias; `known` lists both values, each once, with it.
async fn merged_hold(store: &dyn AliasStore, m: &Merged) {
    let d = store.decode(&m.session, &m.earlier).await.unwrap();
    for (alias, d) in m.earlier.iter().zip(&d) {
        let d = d
            .as_ref()
            .unwrap_or_else(|| panic!("{alias} no longer decodes"));
        assert_eq!(
            (d.ids.uuid.as_deref(), d.ids.fhir_id.as_deref()),
            (Some(m.uuid.as_str()), Some(m.fhir_id.as_str())),
            "{alias}"
        );
        assert_eq!(
            (d.kind.as_str(), d.alias.as_str()),
            ("patient", m.alias.as_str()),
            "{alias}"
        );
    }
    assert_eq!(
        store.encode(&m.session, &m.detail()).await.unwrap(),
        [m.alias.clone(), m.alias.clone()]
    );
    for sighting in m.sightings() {
        assert_eq!(
            store.encode(&m.session, &[sighting]).await.unwrap(),
            std::slice::from_ref(&m.alias),
            "a later sighting keeps the one alias"
        );
    }
    let known: BTreeSet<(String, String)> = store
        .known(&m.session)
        .await
        .unwrap()
        .into_iter()
        .map(|k| (k.value, k.alias))
        .collect();
    let expected = BTreeSet::from([
        (m.uuid.clone(), m.alias.clone()),
        (m.fhir_id.clone(), m.alias.clone()),
    ]);
    assert_eq!(known, expected, "known: both values, with the one alias");
    assert_eq!(
        store.known(&m.session).await.unwrap().len(),
        2,
        "each value once"
    );
}

/// After [`merged_hold`] on a store that reloaded the session (reopened,
/// another replica): a new entity never gets a number a merged alias holds,
/// in either kind.
async fn merged_numbers_stay_issued(store: &dyn AliasStore, m: &Merged) {
    merged_hold(store, m).await;
    let patient = store
        .encode(&m.session, &[id(&uuid_of(0x52), "patient", None, None)])
        .await
        .unwrap();
    let record = store
        .encode(
            &m.session,
            &[IdInput {
                value: uuid_of(0x53),
                kind: None,
                form: None,
                group: None,
            }],
        )
        .await
        .unwrap();
    assert_eq!(
        [plain(&patient), plain(&record)].concat(),
        ["patient-002", "ref-002"]
    );
    for a in patient.iter().chain(&record) {
        assert!(!m.earlier.contains(a), "{a} was a merged alias");
        assert_eq!(epoch_of(a), epoch_of(&m.alias), "the same map");
    }
}

/// Many tasks encoding overlapping entities into one session.
async fn concurrent_encoders(stores: Vec<Arc<dyn AliasStore>>, session: &str) {
    let mut tasks = Vec::new();
    for (n, store) in stores.into_iter().enumerate() {
        let session = session.to_owned();
        tasks.push(tokio::spawn(async move {
            encode_pool(store.as_ref(), &session, n as u32).await
        }));
    }
    let mut maps = Vec::new();
    for t in tasks {
        maps.push(t.await.unwrap());
    }
    check_pool_maps(&maps);
}

/// Encodes a pool of 40 entities ({uuid, fhirId}) in a seed-dependent order,
/// sometimes by FHIR id alone; returns value → alias.
async fn encode_pool(store: &dyn AliasStore, session: &str, seed: u32) -> BTreeMap<String, String> {
    let mut seen = BTreeMap::new();
    for step in 0..40u32 {
        let i = (step * 7 + seed * 13) % 40;
        let fhir = format!("pat-{i:06}");
        let ids = if (step + seed).is_multiple_of(3) {
            vec![id(&fhir, "patient", Some(Form::Fhir), None)]
        } else {
            vec![
                id(&uuid_of(i), "patient", None, Some(1)),
                id(&fhir, "patient", Some(Form::Fhir), Some(1)),
            ]
        };
        let aliases = store.encode(session, &ids).await.unwrap();
        for (input, alias) in ids.iter().zip(aliases) {
            seen.insert(input.value.clone(), alias);
        }
    }
    seen
}

/// No entity has two aliases, no alias two entities, across every encoder.
fn check_pool_maps(maps: &[BTreeMap<String, String>]) {
    let mut alias_of_entity: BTreeMap<u32, String> = BTreeMap::new();
    let mut entity_of_alias: BTreeMap<String, u32> = BTreeMap::new();
    for m in maps {
        for (value, alias) in m {
            let i = match value.strip_prefix("pat-") {
                Some(n) => n.parse().unwrap(),
                None => u32::from_str_radix(&value[..8], 16).unwrap(),
            };
            assert_eq!(
                alias_of_entity.entry(i).or_insert_with(|| alias.clone()),
                alias,
                "entity {i} has two aliases"
            );
            assert_eq!(
                *entity_of_alias.entry(alias.clone()).or_insert(i),
                i,
                "alias {alias} has two entities"
            );
        }
    }
    assert_eq!(alias_of_entity.len(), 40);
    let numbers: BTreeSet<&String> = alias_of_entity.values().collect();
    assert_eq!(numbers.len(), 40);
}

// === redb ===

#[tokio::test]
async fn redb_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path(), config(Duration::from_secs(3600))).unwrap();
    conformance(&store, &|s| format!("redb-{s}")).await;
}

#[tokio::test]
async fn redb_survives_reopen_and_serialises_concurrent_encoders() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Arc<dyn AliasStore> =
            Arc::new(RedbStore::open(dir.path(), config(Duration::from_secs(3600))).unwrap());
        concurrent_encoders(vec![store.clone(), store.clone(), store.clone()], "s").await;
    }
    let store = RedbStore::open(dir.path(), config(Duration::from_secs(3600))).unwrap();
    let again = encode_pool(&store, "s", 9).await;
    check_pool_maps(&[again]);
    let next = store
        .encode("s", &[id(&uuid_of(99), "patient", None, None)])
        .await
        .unwrap();
    assert_eq!(plain(&next), ["patient-041"], "counters survive a reopen");
}

#[tokio::test]
async fn redb_idle_sessions_expire() {
    let dir = tempfile::tempdir().unwrap();
    let now = Arc::new(AtomicU64::new(1_000_000));
    let clock = {
        let now = now.clone();
        Arc::new(move || now.load(Ordering::SeqCst)) as Clock
    };
    let cfg = StoreConfig {
        clock,
        ..config(Duration::from_secs(60))
    };
    let store = RedbStore::open(dir.path(), cfg.clone()).unwrap();
    let idle = store
        .encode("idle", &[id(&uuid_of(1), "patient", None, None)])
        .await
        .unwrap();
    let busy = store
        .encode("busy", &[id(&uuid_of(1), "patient", None, None)])
        .await
        .unwrap();
    now.fetch_add(50_000, Ordering::SeqCst);
    assert!(store.decode("busy", &busy).await.unwrap()[0].is_some());
    now.fetch_add(20_000, Ordering::SeqCst);
    // `idle` is 70 s old: gone on access, and the sweep removes it from disk.
    assert_eq!(store.sweep().await.unwrap(), 1);
    assert!(store.decode("idle", &idle).await.unwrap()[0].is_none());
    assert!(
        store.decode("busy", &busy).await.unwrap()[0].is_some(),
        "decode kept it alive"
    );
    // The name reused after expiry: a new map, a new epoch; the old alias is
    // refused, never resolved to the new session's patient-001.
    let reused = store
        .encode("idle", &[id(&uuid_of(2), "patient", None, None)])
        .await
        .unwrap();
    assert_eq!(plain(&reused), ["patient-001"]);
    assert_ne!(reused, idle);
    assert!(store.decode("idle", &idle).await.unwrap()[0].is_none());
    drop(store);
    let reopened = RedbStore::open(dir.path(), cfg.clone()).unwrap();
    assert!(reopened.decode("idle", &idle).await.unwrap()[0].is_none());
    assert_eq!(
        reopened.decode("idle", &reused).await.unwrap()[0]
            .as_ref()
            .unwrap()
            .ids
            .uuid,
        Some(uuid_of(2))
    );
    assert!(reopened.decode("busy", &busy).await.unwrap()[0].is_some());
    // Many expiries of one name: the tombstones keep every epoch distinct.
    let mut epochs = BTreeSet::from([epoch_of(&idle[0]), epoch_of(&reused[0])]);
    for i in 0..20 {
        now.fetch_add(120_000, Ordering::SeqCst);
        let a = reopened
            .encode("idle", &[id(&uuid_of(100 + i), "patient", None, None)])
            .await
            .unwrap();
        assert!(epochs.insert(epoch_of(&a[0])), "epoch reused: {a:?}");
        assert!(reopened.decode("idle", &idle).await.unwrap()[0].is_none());
    }
}

#[tokio::test]
async fn redb_store_lost_never_decodes_old_aliases_to_new_entities() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(Duration::from_secs(3600));
    let store = RedbStore::open(dir.path(), cfg.clone()).unwrap();
    let old = store
        .encode("s", &[id(&uuid_of(1), "patient", None, None)])
        .await
        .unwrap();
    drop(store);
    std::fs::remove_file(dir.path().join("aliases.redb")).unwrap();
    let store = RedbStore::open(dir.path(), cfg).unwrap();
    assert!(
        store.decode("s", &old).await.unwrap()[0].is_none(),
        "lost: refused"
    );
    let new = store
        .encode("s", &[id(&uuid_of(2), "patient", None, None)])
        .await
        .unwrap();
    assert_eq!(plain(&new), ["patient-001"]);
    assert_ne!(new, old);
    assert!(
        store.decode("s", &old).await.unwrap()[0].is_none(),
        "the old alias never reaches the new patient"
    );
}

/// Merged sightings on redb (see [`merged_sightings`]), and after the store
/// is dropped and reopened from its directory.
#[tokio::test]
async fn redb_merges_sightings_of_one_entity_and_keeps_them_merged() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(Duration::from_secs(3600));
    let merged = {
        let store = RedbStore::open(dir.path(), cfg.clone()).unwrap();
        merged_sightings(&store, &store, &|s| format!("redb-{s}")).await
    };
    let store = RedbStore::open(dir.path(), cfg).unwrap();
    for m in &merged {
        merged_numbers_stay_issued(&store, m).await;
    }
}

/// Runs this test binary again as a child that executes one ignored test.
fn child(test: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        test,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Reads the child's stdout up to a line holding `tag` (libtest prints the
/// test's name first on that line); returns what follows the tag.
fn read_tagged(child: &mut Child, tag: &str) -> String {
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    loop {
        let line = lines.next().expect("child exited early").unwrap();
        if let Some(at) = line.find(tag) {
            return line[at + tag.len()..].to_owned();
        }
    }
}

#[test]
#[ignore = "child process of redb_alias_survives_kill_9"]
fn redb_crash_child() {
    let Ok(dir) = std::env::var("KEYHOLE_ALIAS_CRASH_DIR") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedbStore::open(Path::new(&dir), config(Duration::from_secs(3600))).unwrap();
        let ids = [
            id(&uuid_of(7), "patient", None, Some(1)),
            id("pat-000007", "patient", Some(Form::Fhir), Some(1)),
            id("clinic-x-1", "clinic", None, None),
        ];
        let aliases = store.encode("crash", &ids).await.unwrap();
        println!("ALIASES {}", serde_json::to_string(&aliases).unwrap());
        // Wait to be killed; exit on our own if the parent never does.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

use std::path::Path;

#[test]
fn redb_alias_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = child(
        "alias::tests::redb_crash_child",
        &[("KEYHOLE_ALIAS_CRASH_DIR", dir.path().display().to_string())],
    );
    let aliases: Vec<String> = serde_json::from_str(&read_tagged(&mut c, "ALIASES ")).unwrap();
    c.kill().unwrap(); // SIGKILL: no destructor, no flush
    c.wait().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedbStore::open(dir.path(), config(Duration::from_secs(3600))).unwrap();
        let d = store.decode("crash", &aliases).await.unwrap();
        assert_eq!(
            d[0].as_ref().unwrap().ids.uuid.as_deref(),
            Some(uuid_of(7).as_str())
        );
        assert_eq!(
            d[1].as_ref().unwrap().ids.fhir_id.as_deref(),
            Some("pat-000007")
        );
        assert_eq!(
            d[2].as_ref().unwrap().ids.slug.as_deref(),
            Some("clinic-x-1")
        );
    });
}

// === Redis ===

/// A `redis-server` (or Sentinel) on a free port, killed on drop.
pub(super) struct RedisServer {
    child: Child,
    pub(super) port: u16,
    dir: tempfile::TempDir,
}

/// A free loopback port below the ephemeral range
/// ([`keyhole_testkit::ports`]): a primary a failover test kills must not
/// find its port taken by another test's socket while Sentinel still dials it.
pub(super) fn free_port() -> u16 {
    keyhole_testkit::ports::fixed_port().expect("a free loopback port")
}

impl RedisServer {
    pub(super) fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A server with extra arguments (`["--replicaof", "127.0.0.1 6379"]`).
    pub(super) fn start_with(extra: &[&str]) -> RedisServer {
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.push("--dir".into());
        args.push(dir.path().display().to_string());
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        RedisServer::spawn(port, dir, &args)
    }

    /// A Sentinel watching the primary on `primary_port` as `name` (quorum
    /// 1, down after 500 ms).
    pub(super) fn sentinel(name: &str, primary_port: u16) -> RedisServer {
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {name} 127.0.0.1 {primary_port} 1\n\
                 sentinel down-after-milliseconds {name} 500\n\
                 sentinel failover-timeout {name} 2000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let args = [conf.display().to_string(), "--sentinel".to_owned()];
        RedisServer::spawn(port, dir, &args)
    }

    fn spawn(port: u16, dir: tempfile::TempDir, args: &[String]) -> RedisServer {
        let child = Command::new("redis-server")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server ({e}): install it with `apt-get install -y redis-server`"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer { child, port, dir }
    }

    pub(super) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// kill -9.
    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    #[allow(dead_code)]
    pub(super) fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test]
async fn redis_conformance() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "kh", config(Duration::from_secs(3600)))
        .await
        .unwrap();
    conformance(&store, &|s| format!("redis-{s}")).await;
    // A second replica sees everything the first wrote.
    let replica = RedisStore::connect(&server.url(), "kh", config(Duration::from_secs(3600)))
        .await
        .unwrap();
    let appt = store
        .encode(
            "redis-a",
            &[id("appt-0009812", "appointment", Some(Form::Fhir), None)],
        )
        .await
        .unwrap();
    assert_eq!(plain(&appt), ["patient-appt-001"]);
    let d = replica.decode("redis-a", &appt).await.unwrap();
    assert_eq!(
        d[0].as_ref().unwrap().ids.fhir_id.as_deref(),
        Some("appt-0009812")
    );
}

/// Merged sightings on Redis (see [`merged_sightings`]): merged on one
/// replica, read before and after by another in the same process, which then
/// mints without reusing a merged alias's number.
#[tokio::test]
async fn redis_merges_sightings_of_one_entity_across_replicas() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "kh", config(Duration::from_secs(3600)))
        .await
        .unwrap();
    let replica = RedisStore::connect(&server.url(), "kh", config(Duration::from_secs(3600)))
        .await
        .unwrap();
    let merged = merged_sightings(&store, &replica, &|s| format!("redis-{s}")).await;
    for m in &merged {
        merged_numbers_stay_issued(&replica, m).await;
        // The first replica sees what the other minted.
        let d = store
            .decode(
                &m.session,
                &[at(&m.alias, "patient-002"), at(&m.alias, "ref-002")],
            )
            .await
            .unwrap();
        assert_eq!(
            d[0].as_ref().and_then(|d| d.ids.uuid.clone()),
            Some(uuid_of(0x52))
        );
        assert_eq!(
            d[1].as_ref().and_then(|d| d.ids.uuid.clone()),
            Some(uuid_of(0x53))
        );
    }
}

#[tokio::test]
async fn redis_replicas_in_one_process_agree_under_concurrency() {
    let server = RedisServer::start();
    let mut stores: Vec<Arc<dyn AliasStore>> = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(
            RedisStore::connect(&server.url(), "kh", config(Duration::from_secs(3600)))
                .await
                .unwrap(),
        ));
    }
    concurrent_encoders(stores, "race").await;
}

#[tokio::test]
async fn redis_idle_sessions_expire() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "kh", config(Duration::from_millis(400)))
        .await
        .unwrap();
    let old = store
        .encode("s", &[id(&uuid_of(1), "patient", None, None)])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(
        store.decode("s", &old).await.unwrap()[0].is_some(),
        "access re-arms the expiry"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(store.decode("s", &old).await.unwrap()[0].is_some());
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        store.decode("s", &old).await.unwrap()[0].is_none(),
        "expired"
    );
    let new = store
        .encode("s", &[id(&uuid_of(2), "patient", None, None)])
        .await
        .unwrap();
    assert_eq!(plain(&new), ["patient-001"]);
    assert_ne!(new, old, "a reused name gets a new epoch");
    assert!(
        store.decode("s", &old).await.unwrap()[0].is_none(),
        "the old alias never reaches the new patient"
    );
    // Another replica agrees.
    let replica = RedisStore::connect(&server.url(), "kh", config(Duration::from_millis(400)))
        .await
        .unwrap();
    assert!(replica.decode("s", &old).await.unwrap()[0].is_none());
    assert!(replica.decode("s", &new).await.unwrap()[0].is_some());
    // Redis flushed: the tombstones are gone too, the new epoch is random.
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut con).await.unwrap();
    assert!(
        store.decode("s", &new).await.unwrap()[0].is_none(),
        "flushed: refused"
    );
    let after = store
        .encode("s", &[id(&uuid_of(3), "patient", None, None)])
        .await
        .unwrap();
    assert_eq!(plain(&after), ["patient-001"]);
    assert_ne!(after, new);
    assert!(replica.decode("s", &new).await.unwrap()[0].is_none());
    assert!(store.decode("s", &old).await.unwrap()[0].is_none());
}

#[test]
#[ignore = "child process of redis_two_processes_encode_the_same_entities"]
fn redis_encoder_child() {
    let (Ok(url), Ok(seed)) = (
        std::env::var("KEYHOLE_ALIAS_REDIS_URL"),
        std::env::var("KEYHOLE_ALIAS_SEED"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedisStore::connect(&url, "kh", config(Duration::from_secs(3600)))
            .await
            .unwrap();
        let seen = encode_pool(&store, "shared", seed.parse().unwrap()).await;
        println!("MAP {}", serde_json::to_string(&seen).unwrap());
        // Wait to be killed; exit on our own if the parent never does.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

#[test]
fn redis_two_processes_encode_the_same_entities() {
    let server = RedisServer::start();
    let mut children: Vec<Child> = (0..2)
        .map(|seed| {
            child(
                "alias::tests::redis_encoder_child",
                &[
                    ("KEYHOLE_ALIAS_REDIS_URL", server.url()),
                    ("KEYHOLE_ALIAS_SEED", seed.to_string()),
                ],
            )
        })
        .collect();
    let maps: Vec<BTreeMap<String, String>> = children
        .iter_mut()
        .map(|c| serde_json::from_str(&read_tagged(c, "MAP ")).unwrap())
        .collect();
    // kill -9 both controls after they answered; the aliases live on.
    for c in &mut children {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    check_pool_maps(&maps);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedisStore::connect(&server.url(), "kh", config(Duration::from_secs(3600)))
            .await
            .unwrap();
        for (value, alias) in &maps[0] {
            let d = store
                .decode("shared", std::slice::from_ref(alias))
                .await
                .unwrap();
            let ids = &d[0].as_ref().unwrap().ids;
            assert!(
                ids.uuid.as_deref() == Some(value.as_str())
                    || ids.fhir_id.as_deref() == Some(value.as_str())
            );
        }
    });
}

// === HTTP ===

async fn call(app: &axum::Router, path: &str, body: &str) -> (StatusCode, serde_json::Value) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn http_routes_speak_the_wire_types() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path(), config(Duration::from_secs(3600))).unwrap());
    let app: axum::Router = routes(AliasState { store });
    let u = uuid_of(1);
    let (status, body) = call(
        &app,
        "/v1/alias/encode",
        &format!(r#"{{"session":"s","ids":[{{"value":"{u}","kind":"patient","group":1}},{{"value":"pat-1","kind":"patient","form":"fhirId","group":1}}]}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let issued: Vec<String> = serde_json::from_value(body["aliases"].clone()).unwrap();
    assert_eq!(plain(&issued), ["patient-001", "patient-001"]);
    let p1 = issued[0].clone();
    let (status, body) = call(
        &app,
        "/v1/alias/decode",
        &format!(
            r#"{{"session":"s","aliases":["{p1}","{}","patient-001"]}}"#,
            at(&p1, "patient-009")
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // With a refusal, the answer names the current map's epoch (for the
    // filter's message); without one it is left out.
    let epoch = p1.split('-').nth(1).unwrap().to_owned();
    assert_eq!(
        body,
        serde_json::json!({"ids": [{"alias": p1, "kind": "patient", "uuid": u, "fhirId": "pat-1"}, null, null], "epoch": epoch})
    );
    let (_, body) = call(
        &app,
        "/v1/alias/decode",
        &format!(r#"{{"session":"s","aliases":["{p1}"]}}"#),
    )
    .await;
    assert_eq!(
        body,
        serde_json::json!({"ids": [{"alias": p1, "kind": "patient", "uuid": u, "fhirId": "pat-1"}]})
    );

    // The prompt marker: an issued alias comes back as itself.
    let (status, body) = call(
        &app,
        "/v1/alias/encode",
        &format!(r#"{{"session":"s","ids":[{{"value":"{p1}"}}],"prompt":true}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["aliases"], serde_json::json!([p1]));
    let (_, body) = call(
        &app,
        "/v1/alias/encode",
        &format!(r#"{{"session":"s","ids":[{{"value":"{p1}"}}]}}"#),
    )
    .await;
    assert_ne!(
        body["aliases"],
        serde_json::json!([p1]),
        "from a response it is a raw id"
    );

    let cases = [
        (
            "/v1/alias/encode",
            "{".to_owned(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "/v1/alias/encode",
            r#"{"session":"s","ids":[{"value":"x-1","kind":"nope"}]}"#.to_owned(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_kind",
        ),
        (
            "/v1/alias/encode",
            format!(
                r#"{{"session":"s","ids":[{{"value":"{u}","group":2}},{{"value":"pat-2","form":"fhirId","group":2}},{{"value":"pat-1","form":"fhirId","group":2}}]}}"#
            ),
            StatusCode::CONFLICT,
            "conflict",
        ),
        (
            "/v1/alias/decode",
            r#"{"session":"","aliases":[]}"#.to_owned(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ];
    for (path, req, want_status, code) in cases {
        let (status, body) = call(&app, path, &req).await;
        assert_eq!(status, want_status, "{req}: {body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        assert!(
            !body["error"]["message"].as_str().unwrap().contains(&u),
            "no raw id in errors: {body}"
        );
    }
}

#[tokio::test]
async fn a_request_naming_another_taxonomy_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let example =
        Taxonomy::from_json(include_bytes!("../../../config/taxonomy.example.json")).unwrap();
    let own = Arc::new(example);
    let store = Arc::new(
        RedbStore::open(
            dir.path(),
            StoreConfig::new(own.clone(), Duration::from_secs(3600)),
        )
        .unwrap(),
    );
    let app: axum::Router = routes(AliasState {
        store: store.clone(),
    });
    let other = Taxonomy::default();
    let u = uuid_of(1);
    let encode = |digest: Option<&str>| {
        let taxonomy = digest.map_or(String::new(), |d| format!(r#","taxonomy":"{d}""#));
        format!(r#"{{"session":"s","ids":[{{"value":"{u}","kind":"specimen"}}]{taxonomy}}}"#)
    };

    // Another taxonomy: 409, typed, both digests named by their first 12 hex digits.
    let (status, body) = call(&app, "/v1/alias/encode", &encode(Some(other.digest()))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "taxonomy_mismatch", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&other.digest()[..12]) && message.contains(&own.digest()[..12]),
        "{message}"
    );
    assert!(
        !message.contains(&other.digest()[..13]) && !message.contains(&own.digest()[..13]),
        "{message}"
    );
    // Nothing was minted: the session does not exist.
    assert!(store.known("s").await.unwrap().is_empty());
    let (status, body) = call(
        &app,
        "/v1/alias/decode",
        &format!(
            r#"{{"session":"s","aliases":["specimen-001"],"taxonomy":"{}"}}"#,
            other.digest()
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "taxonomy_mismatch");
    let (status, body) = call(&app, "/v1/alias/encode", &encode(Some("not-a-digest"))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    // Its own digest, or none (a filter that predates the field): served.
    let (status, body) = call(&app, "/v1/alias/encode", &encode(Some(own.digest()))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let issued: Vec<String> = serde_json::from_value(body["aliases"].clone()).unwrap();
    assert!(issued[0].starts_with("specimen-"), "{issued:?}");
    let (status, _) = call(&app, "/v1/alias/encode", &encode(None)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(
        &app,
        "/v1/alias/decode",
        &format!(
            r#"{{"session":"s","aliases":["{}"],"taxonomy":"{}"}}"#,
            issued[0],
            own.digest()
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["ids"][0]["kind"], "specimen");
    // A wrong type for the digest is a bad request, not a mismatch.
    let (status, body) = call(
        &app,
        "/v1/alias/decode",
        r#"{"session":"s","aliases":[],"taxonomy":7}"#,
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
}
