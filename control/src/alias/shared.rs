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
//!
//! # Sentinel and acknowledged writes
//! The store talks to one Redis URL, or finds the primary through Redis
//! Sentinel ([`RedisEndpoint::Sentinel`]). With
//! [`RedisOptions::min_replicas_acked`] > 0 every encode ends with `WAIT n
//! timeout` on the connection that wrote: the aliases are answered only when
//! that many replicas acknowledged the replication stream up to this
//! request's last write, else the encode fails and nothing is handed out. The
//! WAIT runs even when the batch minted nothing, because the session's
//! expiry was just re-armed (a write) after loading it, so the WAIT also
//! covers aliases another replica wrote but could not get acknowledged: an
//! alias is never handed out before a replica holds it, and a promoted
//! replica knows every alias that was handed out.
//!
//! A failed connection, a timeout, or `READONLY` from a demoted primary drops
//! the connection; the operation is retried on a new one (the primary found
//! again through Sentinel) until [`RedisOptions::deadline`], within the
//! filter's callout timeout.

use super::{
    check_session, decode_all, known_of, with_fresh_epoch, AliasStore, Sessions, StoreConfig,
    StoreError, StoreFuture,
};
use keyhole_core::alias::{
    DecodedIds, EntityRecord, IdInput, KnownAlias, Origin, SessionMap, Taxonomy,
};
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, Script, ServerErrorKind};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

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

/// Where the Redis primary is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisEndpoint {
    /// One Redis (`redis://host:port/db`).
    Url(String),
    /// The primary Sentinel names `master`, asked of these Sentinels.
    Sentinel {
        /// Sentinel addresses (`host`, `port`).
        sentinels: Vec<(String, u16)>,
        /// The primary's name in Sentinel (`sentinel monitor NAME …`).
        master: String,
    },
}

/// Alias store settings that cannot be used together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// Both a URL and Sentinels were given.
    #[error("aliases.redis_url and aliases.redis_sentinel exclude each other: give one")]
    UrlAndSentinel,
    /// Sentinels without the primary's name.
    #[error("aliases.redis_sentinel needs aliases.redis_master_name (--redis-master-name)")]
    NoMasterName,
    /// A primary's name without Sentinels.
    #[error("aliases.redis_master_name is only used with aliases.redis_sentinel")]
    MasterNameWithoutSentinel,
    /// An entry of the Sentinel list is not `host:port`.
    #[error("aliases.redis_sentinel: {0}")]
    BadSentinel(#[from] BadSentinel),
    /// Replica acknowledgements asked of the embedded store.
    #[error("aliases.min_replicas_acked is {wanted}, but there is no Redis: give aliases.redis_url or aliases.redis_sentinel")]
    AcksWithoutRedis {
        /// The setting's value.
        wanted: u64,
    },
}

impl RedisEndpoint {
    /// The endpoint the settings name (`None`: the embedded store).
    ///
    /// Fails when the settings contradict each other or a Sentinel address
    /// is not `host:port`.
    pub fn from_settings(
        url: Option<&str>,
        sentinels: Option<&str>,
        master: Option<&str>,
        min_replicas_acked: u64,
    ) -> Result<Option<RedisEndpoint>, EndpointError> {
        let endpoint = match (url, sentinels, master) {
            (Some(_), Some(_), _) => return Err(EndpointError::UrlAndSentinel),
            (_, None, Some(_)) => return Err(EndpointError::MasterNameWithoutSentinel),
            (None, Some(_), None) => return Err(EndpointError::NoMasterName),
            (Some(url), None, None) => Some(RedisEndpoint::Url(url.to_owned())),
            (None, Some(list), Some(master)) => Some(RedisEndpoint::Sentinel {
                sentinels: parse_sentinels(list)?,
                master: master.to_owned(),
            }),
            (None, None, None) => None,
        };
        if endpoint.is_none() && min_replicas_acked > 0 {
            return Err(EndpointError::AcksWithoutRedis {
                wanted: min_replicas_acked,
            });
        }
        Ok(endpoint)
    }
}

/// An entry of a Sentinel list that is not `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not host:port (port 1..65535)")]
pub struct BadSentinel {
    /// The entry.
    pub entry: String,
}

/// `host:port,host:port` (blanks around entries ignored).
///
/// Fails on the first entry that is not `host:port`.
pub fn parse_sentinels(list: &str) -> Result<Vec<(String, u16)>, BadSentinel> {
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    entries
        .iter()
        .map(|entry| {
            let bad = || BadSentinel {
                entry: (*entry).to_owned(),
            };
            let (host, port) = entry.rsplit_once(':').ok_or_else(bad)?;
            let port: u16 = port.parse().map_err(|_| bad())?;
            if host.is_empty() || port == 0 || host.contains(char::is_whitespace) {
                return Err(bad());
            }
            Ok((host.to_owned(), port))
        })
        .collect()
}

/// How writes are acknowledged, and how long one operation may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisOptions {
    /// Replicas that must acknowledge an encode's writes (`WAIT`) before its
    /// aliases are answered; 0 answers once the primary has them.
    pub min_replicas_acked: u32,
    /// Deadline of one store operation, reconnecting after a failover and
    /// the `WAIT` included. Keep it under the filter's callout timeout.
    pub deadline: Duration,
}

impl RedisOptions {
    /// How long one request may take before the connection is given up for
    /// a new one: a third of the deadline (at least 100 ms), so a killed
    /// primary leaves time to find the promoted one.
    pub fn attempt_timeout(&self) -> Duration {
        (self.deadline / 3).max(Duration::from_millis(100))
    }

    /// `WAIT`'s timeout: half the response timeout, so a replica that does
    /// not answer fails the write instead of the connection (Redis times
    /// blocked clients out on its 100 ms clock, so a WAIT returns late).
    fn wait_timeout_ms(&self) -> u64 {
        let ms = u64::try_from(self.attempt_timeout().as_millis()).unwrap_or(u64::MAX);
        (ms / 2).max(1)
    }
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            min_replicas_acked: 0,
            deadline: Duration::from_millis(1500),
        }
    }
}

/// Whether `e` means the connection or the primary is gone: reconnect (find
/// the primary again) and retry.
fn needs_reconnect(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::BusyLoading
            ) | ErrorKind::MasterNameNotFoundBySentinel
        )
        // A write in a Lua script on a demoted primary: the script error
        // carries the READONLY reply in its detail.
        || e.detail().is_some_and(|d| d.contains("READONLY"))
        || e.code() == Some("READONLY")
}

/// Whether a store error was caused by a lost connection or primary.
fn is_failover(e: &StoreError) -> bool {
    use std::error::Error as _;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<RedisError>() {
            return needs_reconnect(r);
        }
        cause = c.source();
    }
    false
}

/// The connection to the primary, and how many times it was replaced.
struct Link {
    generation: u64,
    con: Option<MultiplexedConnection>,
}

/// Finds the primary and connects to it.
struct Primary {
    endpoint: RedisEndpoint,
    link: tokio::sync::Mutex<Link>,
    options: RedisOptions,
}

impl Primary {
    fn try_new(endpoint: RedisEndpoint, options: RedisOptions) -> Result<Primary, RedisError> {
        if let RedisEndpoint::Url(url) = &endpoint {
            redis::Client::open(url.as_str())?;
        }
        Ok(Primary {
            endpoint,
            link: tokio::sync::Mutex::new(Link {
                generation: 0,
                con: None,
            }),
            options,
        })
    }

    fn connection_config(&self) -> AsyncConnectionConfig {
        // A killed host answers nothing: without a response timeout a request
        // would wait for TCP to give up, instead of finding the new primary.
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.options.attempt_timeout()))
            .set_response_timeout(Some(self.options.attempt_timeout()))
    }

    async fn open(&self) -> Result<MultiplexedConnection, RedisError> {
        let client = match &self.endpoint {
            RedisEndpoint::Url(url) => redis::Client::open(url.as_str())?,
            RedisEndpoint::Sentinel { sentinels, master } => {
                // A new Sentinel client for every look-up: one that kept its
                // connections to the Sentinels would keep asking over a
                // connection that died with a network cut (seen: a minute
                // until TCP gave up). It asks each Sentinel for the primary
                // and checks that the node named calls itself primary.
                let nodes: Vec<String> = sentinels
                    .iter()
                    .map(|(h, p)| format!("redis://{h}:{p}/"))
                    .collect();
                let mut sentinel =
                    SentinelClient::build(nodes, master.clone(), None, SentinelServerType::Master)?;
                sentinel.async_get_client().await?
            }
        };
        client
            .get_multiplexed_async_connection_with_config(&self.connection_config())
            .await
    }

    /// The current connection (opened when there is none) and its generation.
    async fn get(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        let mut link = self.link.lock().await;
        if let Some(con) = &link.con {
            return Ok((link.generation, con.clone()));
        }
        let con = self.open().await?;
        link.generation += 1;
        link.con = Some(con.clone());
        if link.generation > 1 {
            tracing::info!(
                generation = link.generation,
                "reconnected to the Redis primary"
            );
        }
        Ok((link.generation, con))
    }

    /// Drops connection `generation` (unless another caller replaced it
    /// already): the next [`Primary::get`] finds the primary again.
    async fn drop_link(&self, generation: u64) {
        let mut link = self.link.lock().await;
        if link.generation == generation {
            link.con = None;
        }
    }
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
    primary: Primary,
    prefix: String,
    config: StoreConfig,
    sessions: Sessions<Slot>,
    script: Script,
}

impl RedisStore {
    /// Connects to `url` (`redis://host:port/db`) with the default options;
    /// keys start with `prefix`.
    ///
    /// Fails when Redis cannot be reached.
    pub async fn connect(url: &str, prefix: &str, config: StoreConfig) -> Result<Self, StoreError> {
        Self::connect_to(
            RedisEndpoint::Url(url.to_owned()),
            prefix,
            config,
            RedisOptions::default(),
        )
        .await
    }

    /// Connects to the primary of `endpoint`; keys start with `prefix`.
    ///
    /// Fails when the URL is invalid, or no primary answers within the
    /// deadline (no Sentinel names one, or it cannot be reached).
    pub async fn connect_to(
        endpoint: RedisEndpoint,
        prefix: &str,
        config: StoreConfig,
        options: RedisOptions,
    ) -> Result<Self, StoreError> {
        let primary = Primary::try_new(endpoint, options).map_err(redis_err)?;
        // Sentinel may name no primary for a moment (a failover under way):
        // asked again until the deadline.
        let deadline = Instant::now() + options.deadline;
        while let Err(e) = primary.get().await {
            if !needs_reconnect(&e) || Instant::now() >= deadline {
                return Err(redis_err(e));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(RedisStore {
            primary,
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
    async fn refresh(
        &self,
        con: &MultiplexedConnection,
        session: &str,
        slot: &mut Slot,
    ) -> Result<(), StoreError> {
        let (vk, ek) = self.keys(session);
        let ttl = self.config.ttl_ms();
        let mut con = con.clone();
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
        self.reload(&con, session, slot).await
    }

    /// Loads the session's version and records atomically.
    async fn reload(
        &self,
        con: &MultiplexedConnection,
        session: &str,
        slot: &mut Slot,
    ) -> Result<(), StoreError> {
        let (vk, ek) = self.keys(session);
        let mut con = con.clone();
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

impl RedisStore {
    /// One encode on connection `con`: plan, compare-and-set, then `WAIT`
    /// for the replicas the options ask for.
    async fn encode_once(
        &self,
        con: &MultiplexedConnection,
        session: &str,
        ids: &[IdInput],
        origin: Origin,
        slot: &mut Slot,
    ) -> Result<Vec<String>, StoreError> {
        let (vk, ek) = self.keys(session);
        self.refresh(con, session, slot).await?;
        for tries in 0..MAX_TRIES {
            let planned = slot.map.plan_from(&self.config.taxonomy, ids, origin)?;
            if planned.changes.is_empty() {
                // Nothing new; the aliases answered may still be another
                // replica's unacknowledged write: wait for them too.
                self.wait_acked(con).await?;
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
            let mut c = con.clone();
            let written: i64 = call.invoke_async(&mut c).await.map_err(redis_err)?;
            if written == 1 {
                // Written, not yet handed out: reload on the next access
                // unless the replicas acknowledge it.
                slot.version = None;
                self.wait_acked(con).await?;
                slot.map.apply(&planned.changes)?;
                slot.version = Some(next);
                return Ok(planned.aliases);
            }
            // Another replica wrote first: plan again on its state.
            tokio::time::sleep(backoff(tries)).await;
            self.reload(con, session, slot).await?;
        }
        Err(StoreError::Contended {
            backend: BACKEND,
            tries: MAX_TRIES,
        })
    }

    /// `WAIT min_replicas_acked timeout` on `con`, the connection that wrote:
    /// fails unless that many replicas acknowledged its writes.
    async fn wait_acked(&self, con: &MultiplexedConnection) -> Result<(), StoreError> {
        let wanted = self.primary.options.min_replicas_acked;
        if wanted == 0 {
            return Ok(());
        }
        let timeout_ms = self.primary.options.wait_timeout_ms();
        let mut c = con.clone();
        let acked: i64 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(timeout_ms)
            .query_async(&mut c)
            .await
            .map_err(redis_err)?;
        if acked < i64::from(wanted) {
            return Err(StoreError::Unacknowledged {
                backend: BACKEND,
                acked: acked.max(0) as u64,
                wanted,
            });
        }
        Ok(())
    }

    /// After a failed attempt on connection `generation`: true (after a short
    /// wait) when the error is a lost connection or primary and the deadline
    /// leaves time for another attempt on a new connection.
    async fn retry_after(&self, generation: u64, error: &StoreError, deadline: Instant) -> bool {
        if matches!(error, StoreError::Deadline { .. }) {
            // A request may still hang on this connection: the next
            // operation starts on a new one.
            self.primary.drop_link(generation).await;
            return false;
        }
        if !is_failover(error) {
            return false;
        }
        self.primary.drop_link(generation).await;
        let pause = Duration::from_millis(50);
        if Instant::now() + pause >= deadline {
            return false;
        }
        tracing::warn!(cause = %error, "Redis primary lost; finding it again");
        tokio::time::sleep(pause).await;
        true
    }

    /// The connection for an attempt, within `deadline`.
    async fn connection(
        &self,
        deadline: Instant,
    ) -> Result<(u64, MultiplexedConnection), StoreError> {
        match tokio::time::timeout_at(deadline, self.primary.get()).await {
            Ok(r) => r.map_err(redis_err),
            Err(_) => Err(StoreError::Deadline {
                backend: BACKEND,
                ms: self.primary.options.deadline.as_millis() as u64,
            }),
        }
    }

    fn deadline_error(&self) -> StoreError {
        StoreError::Deadline {
            backend: BACKEND,
            ms: self.primary.options.deadline.as_millis() as u64,
        }
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
            let deadline = Instant::now() + self.primary.options.deadline;
            let slot = self.sessions.get(session);
            let mut slot = slot.lock().await;
            loop {
                let attempt = match self.connection(deadline).await {
                    Ok((generation, con)) => {
                        let once = self.encode_once(&con, session, ids, origin, &mut slot);
                        match tokio::time::timeout_at(deadline, once).await {
                            Ok(r) => r.map_err(|e| (generation, e)),
                            Err(_) => Err((generation, self.deadline_error())),
                        }
                    }
                    Err(e) => Err((0, e)),
                };
                match attempt {
                    Ok(aliases) => return Ok(aliases),
                    Err((generation, e)) => {
                        // Whatever this attempt loaded may be stale or unacknowledged.
                        slot.version = None;
                        if !self.retry_after(generation, &e, deadline).await {
                            return Err(e);
                        }
                    }
                }
            }
        })
    }

    fn decode<'a>(
        &'a self,
        session: &'a str,
        aliases: &'a [String],
    ) -> StoreFuture<'a, Vec<Option<DecodedIds>>> {
        Box::pin(async move {
            check_session(session)?;
            let deadline = Instant::now() + self.primary.options.deadline;
            let slot = self.sessions.get(session);
            let mut slot = slot.lock().await;
            loop {
                let attempt = match self.connection(deadline).await {
                    Ok((generation, con)) => {
                        let once = self.refresh(&con, session, &mut slot);
                        match tokio::time::timeout_at(deadline, once).await {
                            Ok(r) => r.map_err(|e| (generation, e)),
                            Err(_) => Err((generation, self.deadline_error())),
                        }
                    }
                    Err(e) => Err((0, e)),
                };
                match attempt {
                    Ok(()) => return Ok(decode_all(&self.config.taxonomy, &slot.map, aliases)),
                    Err((generation, e)) => {
                        slot.version = None;
                        if !self.retry_after(generation, &e, deadline).await {
                            return Err(e);
                        }
                    }
                }
            }
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
                let (_, mut con) = self.primary.get().await.map_err(redis_err)?;
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

#[cfg(test)]
mod tests;
