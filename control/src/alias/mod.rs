//! Per-session alias state: the stores behind `/v1/alias/encode` and
//! `/v1/alias/decode`.
//!
//! The alias logic itself is [`keyhole_core::alias::SessionMap`]; a store keeps
//! one map per session in memory and makes every change durable *before* the
//! aliases are answered, as one batch per request:
//! - [`RedbStore`]: an embedded redb file in a data directory (the default; one
//!   control process owns it);
//! - [`RedisStore`]: a shared Redis, for several control replicas. Writes are a
//!   compare-and-set of the session's version in one Lua script, so two
//!   replicas encoding the same entities converge on one alias per entity.
//!
//! Sessions idle for longer than the configured TTL expire: Redis expires the
//! keys itself; the embedded store drops a session on its next access and in
//! [`AliasStore::sweep`].
//!
//! An alias is never decoded to a different entity: every map a store creates
//! for a session (first use, after expiry, after the store was lost) gets a
//! fresh random epoch that every alias it issues carries (`patient-k7q2-001`,
//! see `keyhole_core::alias::grammar`). The epochs a session name has used are
//! kept as tombstones that outlive the TTL (redb table `epochs`; Redis set
//! `<prefix>:<session>:x`, no expiry) and are never drawn again, so an alias
//! of an expired or reused session is refused, never resolved under the new
//! map. When the store itself is lost the tombstones go with it; the new
//! epoch is then random among 23 · 31² · 8 = 176,824 values, so an old alias
//! resolves under the new map only if the draw repeats the lost epoch *and*
//! the new map has issued that number of that kind.
//!
//! # Layout
//! - [`embedded`]: the redb store.
//! - [`shared`]: the Redis store.
//! - [`http`]: the routes and their JSON errors.

pub mod embedded;
pub mod http;
pub mod shared;

pub use embedded::RedbStore;
pub use http::{routes, AliasState};
pub use shared::{RedisEndpoint, RedisOptions, RedisStore};

use keyhole_core::alias::{
    DecodedIds, Epoch, IdInput, KnownAlias, Origin, SessionError, SessionMap, Taxonomy,
};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A boxed future of a store operation (the trait is used as `dyn AliasStore`).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Milliseconds since the Unix epoch; injected so tests can move time.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    })
}

/// Longest session name accepted.
pub const MAX_SESSION_LEN: usize = 256;

/// Where a session's aliases live.
pub trait AliasStore: Send + Sync {
    /// Aliases for `ids` read in an HMS response (one per id, in order): see
    /// [`AliasStore::encode_from`].
    fn encode<'a>(&'a self, session: &'a str, ids: &'a [IdInput]) -> StoreFuture<'a, Vec<String>> {
        self.encode_from(session, ids, Origin::Response)
    }

    /// Aliases for `ids` read at `origin` (one per id, in order; see
    /// `SessionMap::plan_from`). New aliases are durable before this
    /// returns. Fails on a conflict (nothing is minted) or a store error.
    fn encode_from<'a>(
        &'a self,
        session: &'a str,
        ids: &'a [IdInput],
        origin: Origin,
    ) -> StoreFuture<'a, Vec<String>>;

    /// The ids behind `aliases`, `None` for an alias this session did not issue
    /// (near-miss repair included, see `SessionMap::decode`).
    fn decode<'a>(
        &'a self,
        session: &'a str,
        aliases: &'a [String],
    ) -> StoreFuture<'a, Vec<Option<DecodedIds>>>;

    /// The epoch of the session's current map as loaded by the last
    /// `encode`/`decode` (`None` when none is loaded, or it has no epoch).
    /// Only for messages: an alias of another epoch is refused either way.
    fn current_epoch<'a>(&'a self, session: &'a str) -> StoreFuture<'a, Option<String>>;

    /// Every raw id the session knows, with its alias, as last loaded (call
    /// it after `encode` of the same session). Fails with
    /// [`StoreError::TooManyKnown`] past [`MAX_KNOWN`].
    fn known<'a>(&'a self, session: &'a str) -> StoreFuture<'a, Vec<KnownAlias>>;

    /// Drops sessions idle for longer than the TTL; returns how many.
    fn sweep(&self) -> StoreFuture<'_, usize>;

    /// The backend's name, for logs and metrics.
    fn backend(&self) -> &'static str;

    /// The taxonomy aliases are minted and decoded with
    /// ([`StoreConfig::taxonomy`]); a request naming another is refused.
    fn taxonomy(&self) -> &Taxonomy;
}

/// A store failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The batch was refused (conflict, unknown kind, bad value); nothing changed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The session name is empty or too long.
    #[error("session name must be 1 to {MAX_SESSION_LEN} bytes")]
    BadSession,
    /// The backend failed; nothing was answered from unpersisted state.
    #[error("alias store {backend}: {source}")]
    Backend {
        /// `redb` or `redis`.
        backend: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The session knows more raw ids than an encode answer may carry: the
    /// filter withholds the body (an id it was not told about could pass).
    #[error("session knows {count} raw ids, more than the {MAX_KNOWN} an encode answer carries")]
    TooManyKnown { count: usize },
    /// Other writers kept changing the session while this one planned.
    #[error("alias store {backend}: session kept changing under {tries} attempts")]
    Contended {
        /// The backend.
        backend: &'static str,
        /// Attempts made.
        tries: u32,
    },
    /// Fewer replicas than required acknowledged the write (`WAIT`): the
    /// aliases are not handed out.
    #[error("alias store {backend}: {acked} of {wanted} required replicas acknowledged the write; no alias handed out")]
    Unacknowledged {
        /// The backend.
        backend: &'static str,
        /// Replicas that acknowledged.
        acked: u64,
        /// Replicas required (`aliases.min_replicas_acked`).
        wanted: u32,
    },
    /// The operation, retries after a lost primary included, ran past its deadline.
    #[error("alias store {backend}: no answer within {ms} ms")]
    Deadline {
        /// The backend.
        backend: &'static str,
        /// The deadline.
        ms: u64,
    },
}

impl StoreError {
    pub(crate) fn backend(
        backend: &'static str,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Backend {
            backend,
            source: Box::new(e),
        }
    }
}

/// Settings shared by the stores.
#[derive(Clone)]
pub struct StoreConfig {
    /// The taxonomy aliases are minted with (the filter's).
    pub taxonomy: Arc<Taxonomy>,
    /// Idle time after which a session expires.
    pub ttl: Duration,
    /// The clock (milliseconds since the epoch).
    pub clock: Clock,
}

impl StoreConfig {
    /// A config with the system clock.
    pub fn new(taxonomy: Arc<Taxonomy>, ttl: Duration) -> Self {
        StoreConfig {
            taxonomy,
            ttl,
            clock: system_clock(),
        }
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// A fresh random epoch for a (re)created session map, never one of `used`.
fn fresh_epoch(used: &[String]) -> Epoch {
    let draw = || Epoch::from_seed(uuid::Uuid::new_v4().as_u64_pair().0);
    let mut e = draw();
    // 176,824 epochs: a repeat draw is rare, 64 in a row impossible in practice.
    for _ in 0..64 {
        if !used.iter().any(|u| u == e.as_str()) {
            break;
        }
        e = draw();
    }
    e
}

/// A new empty map with a fresh epoch when `map` has no records and no epoch
/// of its own yet.
fn with_fresh_epoch(map: SessionMap, used: &[String]) -> SessionMap {
    if map.is_empty() {
        SessionMap::with_epoch(fresh_epoch(used))
    } else {
        map
    }
}

fn check_session(session: &str) -> Result<(), StoreError> {
    if session.is_empty() || session.len() > MAX_SESSION_LEN {
        return Err(StoreError::BadSession);
    }
    Ok(())
}

/// Decodes a batch against a loaded map.
/// Most raw ids sent back with one encode answer (`EncodeResponse.known`):
/// every form (UUID, FHIR id, slug) of 5,000 entities, the default
/// `max_aliases` of a session. A session that knows more (a raised
/// `max_aliases`) fails its encodes with [`StoreError::TooManyKnown`], and the
/// filter withholds those responses (502): never passed raw.
pub const MAX_KNOWN: usize = 15_000;

/// The session's raw ids with their aliases, bounded by [`MAX_KNOWN`]: each
/// (kind, value) record once, the oldest record of a value first.
fn known_of(map: &SessionMap) -> Result<Vec<KnownAlias>, StoreError> {
    let known: Vec<KnownAlias> = map
        .known_values()
        .map(|(value, alias)| KnownAlias {
            value: value.to_owned(),
            alias: alias.to_owned(),
        })
        .collect();
    if known.len() > MAX_KNOWN {
        return Err(StoreError::TooManyKnown { count: known.len() });
    }
    Ok(known)
}

fn decode_all(tax: &Taxonomy, map: &SessionMap, aliases: &[String]) -> Vec<Option<DecodedIds>> {
    aliases
        .iter()
        .map(|a| {
            map.decode(tax, a).map(|d| DecodedIds {
                alias: d.record.alias.clone(),
                kind: d.record.kind.clone(),
                ids: d.record.ids.clone(),
            })
        })
        .collect()
}

/// In-memory session slots, each behind its own async lock so that one
/// session's requests are serialised while other sessions proceed.
struct Sessions<T> {
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<T>>>>,
}

impl<T: Default> Sessions<T> {
    fn new() -> Self {
        Sessions {
            slots: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, session: &str) -> Arc<tokio::sync::Mutex<T>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(session.to_owned()).or_default().clone()
    }

    fn remove(&self, session: &str) {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
    }

    fn snapshot(&self) -> Vec<(String, Arc<tokio::sync::Mutex<T>>)> {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests;
