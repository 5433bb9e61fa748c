//! The shared alias store: Redis, for several control replicas.
//!
//! A session is two keys: `<prefix>:<session>:e`, a hash of alias → entity
//! record (JSON; a merged entity is stored under each of its aliases), and
//! `<prefix>:<session>:v`, a random version token replaced on every write. A
//! third key, `<prefix>:<session>:x`, is the set of epochs the session name has
//! issued aliases under; it has no expiry (tombstones: a reused session name
//! never draws an old epoch again). Each replica plans a batch against its cached copy of the
//! session and commits it with one Lua script that writes the records only if
//! the version is still the one it planned against (compare-and-set); if
//! another replica wrote in between, it reloads and plans again. So no entity
//! gets two aliases and no alias two entities, whichever replica answers.
//! Every access re-arms the keys' expiry: idle sessions vanish after the TTL.

use super::{
    check_session, decode_all, known_of, with_fresh_epoch, AliasStore, Sessions, StoreConfig,
    StoreError, StoreFuture,
};
use keyhole_core::alias::{
    DecodedIds, EntityRecord, IdInput, KnownAlias, Origin, SessionMap, Taxonomy,
};
use redis::aio::MultiplexedConnection;
use redis::Script;
use std::collections::HashMap;

const BACKEND: &str = "redis";
/// Attempts before a write gives up under contention.
const MAX_TRIES: u32 = 32;

/// A random wait before the next attempt after `tries` lost races: up to
/// 1, 2, 4, … 32 ms. Without it, replicas that keep losing retry in step and
/// can lose every attempt (seen with four replicas on one session).
fn backoff(tries: u32) -> std::time::Duration {
    let ceiling_us = 1_000u64 << tries.min(5);
    let random = (uuid::Uuid::new_v4().as_u128() & u128::from(u64::MAX)) as u64;
    std::time::Duration::from_micros(random % ceiling_us)
}

/// KEYS: version, entities, epochs. ARGV: expected version ("" = none), new
/// version, TTL in ms, epoch ("" = none), then alias/record pairs. Returns 1
/// when written, 0 when the version moved.
const CAS: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur == false then cur = '' end
if cur ~= ARGV[1] then return 0 end
if ARGV[4] ~= '' then redis.call('SADD', KEYS[3], ARGV[4]) end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
";

fn redis_err(e: redis::RedisError) -> StoreError {
    StoreError::backend(BACKEND, e)
}

/// One session as this replica last saw it.
#[derive(Default)]
struct Slot {
    /// Version the map was loaded at ("" = no session); `None` = not loaded.
    version: Option<String>,
    map: SessionMap,
}

/// The Redis store.
pub struct RedisStore {
    con: MultiplexedConnection,
    prefix: String,
    config: StoreConfig,
    sessions: Sessions<Slot>,
    script: Script,
}

impl RedisStore {
    /// Connects to `url` (`redis://host:port/db`); keys start with `prefix`.
    ///
    /// Fails when Redis cannot be reached.
    pub async fn connect(url: &str, prefix: &str, config: StoreConfig) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(redis_err)?;
        let con = client
            .get_multiplexed_async_connection()
            .await
            .map_err(redis_err)?;
        Ok(RedisStore {
            con,
            prefix: prefix.to_owned(),
            config,
            sessions: Sessions::new(),
            script: Script::new(CAS),
        })
    }

    fn keys(&self, session: &str) -> (String, String) {
        (
            format!("{}:{session}:v", self.prefix),
            format!("{}:{session}:e", self.prefix),
        )
    }

    fn epochs_key(&self, session: &str) -> String {
        format!("{}:{session}:x", self.prefix)
    }

    /// Re-arms the expiry and brings `slot` up to the stored version.
    async fn refresh(&self, session: &str, slot: &mut Slot) -> Result<(), StoreError> {
        let (vk, ek) = self.keys(session);
        let ttl = self.config.ttl_ms();
        let mut con = self.con.clone();
        let (version,): (Option<String>,) = redis::pipe()
            .get(&vk)
            .pexpire(&vk, ttl as i64)
            .ignore()
            .pexpire(&ek, ttl as i64)
            .ignore()
            .query_async(&mut con)
            .await
            .map_err(redis_err)?;
        if slot.version.as_deref() == Some(version.as_deref().unwrap_or("")) {
            return Ok(());
        }
        self.reload(session, slot).await
    }

    /// Loads the session's version and records atomically.
    async fn reload(&self, session: &str, slot: &mut Slot) -> Result<(), StoreError> {
        let (vk, ek) = self.keys(session);
        let mut con = self.con.clone();
        let (version, rows, used): (Option<String>, HashMap<String, String>, Vec<String>) =
            redis::pipe()
                .atomic()
                .get(&vk)
                .hgetall(&ek)
                .smembers(self.epochs_key(session))
                .query_async(&mut con)
                .await
                .map_err(redis_err)?;
        let records = rows
            .values()
            .map(|v| serde_json::from_str::<EntityRecord>(v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::backend(BACKEND, e))?;
        slot.map = with_fresh_epoch(
            SessionMap::from_records(&self.config.taxonomy, records)?,
            &used,
        );
        slot.version = Some(version.unwrap_or_default());
        Ok(())
    }
}

impl AliasStore for RedisStore {
    fn encode_from<'a>(
        &'a self,
        session: &'a str,
        ids: &'a [IdInput],
        origin: Origin,
    ) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            check_session(session)?;
            let slot = self.sessions.get(session);
            let mut slot = slot.lock().await;
            let (vk, ek) = self.keys(session);
            self.refresh(session, &mut slot).await?;
            for tries in 0..MAX_TRIES {
                let planned = slot.map.plan_from(&self.config.taxonomy, ids, origin)?;
                if planned.changes.is_empty() {
                    return Ok(planned.aliases);
                }
                let expected = slot.version.clone().unwrap_or_default();
                let next = uuid::Uuid::new_v4().to_string();
                let mut call = self.script.key(&vk);
                let epoch = slot.map.epoch().map(|e| e.to_string()).unwrap_or_default();
                call.key(&ek)
                    .key(self.epochs_key(session))
                    .arg(&expected)
                    .arg(&next)
                    .arg(self.config.ttl_ms())
                    .arg(epoch);
                for r in &planned.changes {
                    let record =
                        serde_json::to_string(r).map_err(|e| StoreError::backend(BACKEND, e))?;
                    // A merged entity is written under each of its aliases.
                    for a in r.aliases() {
                        call.arg(a).arg(&record);
                    }
                }
                let mut con = self.con.clone();
                let written: i64 = call.invoke_async(&mut con).await.map_err(redis_err)?;
                if written == 1 {
                    slot.map.apply(&planned.changes)?;
                    slot.version = Some(next);
                    return Ok(planned.aliases);
                }
                // Another replica wrote first: plan again on its state.
                tokio::time::sleep(backoff(tries)).await;
                self.reload(session, &mut slot).await?;
            }
            Err(StoreError::Contended {
                backend: BACKEND,
                tries: MAX_TRIES,
            })
        })
    }

    fn decode<'a>(
        &'a self,
        session: &'a str,
        aliases: &'a [String],
    ) -> StoreFuture<'a, Vec<Option<DecodedIds>>> {
        Box::pin(async move {
            check_session(session)?;
            let slot = self.sessions.get(session);
            let mut slot = slot.lock().await;
            self.refresh(session, &mut slot).await?;
            Ok(decode_all(&self.config.taxonomy, &slot.map, aliases))
        })
    }

    fn current_epoch<'a>(&'a self, session: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let slot = self.sessions.get(session);
            let slot = slot.lock().await;
            Ok(slot.map.epoch().map(|e| e.to_string()))
        })
    }

    fn known<'a>(&'a self, session: &'a str) -> StoreFuture<'a, Vec<KnownAlias>> {
        Box::pin(async move {
            let slot = self.sessions.get(session);
            let slot = slot.lock().await;
            known_of(&slot.map)
        })
    }

    fn sweep(&self) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            // Redis expires the keys; forget cached copies of sessions that are
            // gone so memory follows.
            let mut dropped = 0;
            for (s, slot) in self.sessions.snapshot() {
                let Ok(slot) = slot.try_lock() else { continue };
                let (vk, _) = self.keys(&s);
                let mut con = self.con.clone();
                let exists: bool = redis::cmd("EXISTS")
                    .arg(&vk)
                    .query_async(&mut con)
                    .await
                    .map_err(redis_err)?;
                if !exists {
                    drop(slot);
                    self.sessions.remove(&s);
                    dropped += 1;
                }
            }
            Ok(dropped)
        })
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn taxonomy(&self) -> &Taxonomy {
        &self.config.taxonomy
    }
}
