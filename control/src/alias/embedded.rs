//! The embedded alias store: one redb file in the data directory.
//!
//! Table `entities` maps `(session, alias)` to the entity record (JSON; a
//! merged entity is stored under each of its aliases); table `sessions` maps a
//! session to the time it was last written or swept; table `epochs` holds
//! `(session, epoch)` for every epoch a session name has issued aliases
//! under, and is never expired (the tombstones that keep a reused session
//! name from drawing an old epoch again). Every
//! encode that mints or extends an entity commits one write transaction (redb
//! fsyncs on commit) before answering; re-encoding and decoding write nothing
//! and only touch the in-memory idle clock, which [`AliasStore::sweep`]
//! persists in one batch.

use super::{
    check_session, decode_all, known_of, with_fresh_epoch, AliasStore, Sessions, StoreConfig,
    StoreError, StoreFuture,
};
use keyhole_core::alias::{
    DecodedIds, EntityRecord, IdInput, KnownAlias, Origin, SessionMap, Taxonomy,
};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;
use std::sync::Arc;

const ENTITIES: TableDefinition<'_, (&str, &str), &[u8]> = TableDefinition::new("entities");
const SESSIONS: TableDefinition<'_, &str, u64> = TableDefinition::new("sessions");
const EPOCHS: TableDefinition<'_, (&str, &str), u64> = TableDefinition::new("epochs");
const BACKEND: &str = "redb";

fn db_err(e: impl Into<redb::Error>) -> StoreError {
    StoreError::backend(BACKEND, e.into())
}

/// One session in memory.
#[derive(Default)]
struct Slot {
    /// `None` until loaded from the file.
    map: Option<SessionMap>,
    /// Last use (ms since the epoch).
    last_used: u64,
}

/// The embedded store. Opening takes redb's exclusive lock on the file: one
/// control process per data directory.
pub struct RedbStore {
    db: Arc<Database>,
    config: StoreConfig,
    sessions: Sessions<Slot>,
}

impl RedbStore {
    /// Opens (or creates) `dir/aliases.redb`.
    ///
    /// Fails when the directory cannot be created or the file cannot be opened
    /// (for instance, another process holds it).
    pub fn open(dir: &Path, config: StoreConfig) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::backend(BACKEND, e))?;
        let db = Database::create(dir.join("aliases.redb")).map_err(db_err)?;
        let txn = db.begin_write().map_err(db_err)?;
        txn.open_table(ENTITIES).map_err(db_err)?;
        txn.open_table(SESSIONS).map_err(db_err)?;
        txn.open_table(EPOCHS).map_err(db_err)?;
        txn.commit().map_err(db_err)?;
        Ok(RedbStore {
            db: Arc::new(db),
            config,
            sessions: Sessions::new(),
        })
    }

    /// Runs blocking redb work off the async runtime.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| StoreError::backend(BACKEND, e))?
    }

    /// Makes sure `slot` holds the session's map, dropping it first if it has
    /// been idle past the TTL.
    async fn load(&self, session: &str, slot: &mut Slot, now: u64) -> Result<(), StoreError> {
        let ttl = self.config.ttl_ms();
        if slot.map.is_some() && slot.last_used.saturating_add(ttl) >= now {
            return Ok(());
        }
        let expired_in_memory = slot.map.is_some();
        let s = session.to_owned();
        let tax = self.config.taxonomy.clone();
        let map = self
            .blocking(move |db| {
                let read = db.begin_read().map_err(db_err)?;
                let last = read
                    .open_table(SESSIONS)
                    .map_err(db_err)?
                    .get(s.as_str())
                    .map_err(db_err)?
                    .map(|v| v.value());
                let expired =
                    expired_in_memory || last.is_some_and(|t| t.saturating_add(ttl) < now);
                let mut used = Vec::new();
                for row in read
                    .open_table(EPOCHS)
                    .map_err(db_err)?
                    .range((s.as_str(), "")..)
                    .map_err(db_err)?
                {
                    let (k, _) = row.map_err(db_err)?;
                    if k.value().0 != s {
                        break;
                    }
                    used.push(k.value().1.to_owned());
                }
                if expired {
                    drop(read);
                    delete_sessions(db, &[s])?;
                    return Ok(with_fresh_epoch(SessionMap::new(), &used));
                }
                let entities = read.open_table(ENTITIES).map_err(db_err)?;
                let mut records = Vec::new();
                for row in entities.range((s.as_str(), "")..).map_err(db_err)? {
                    let (k, v) = row.map_err(db_err)?;
                    if k.value().0 != s {
                        break;
                    }
                    let record: EntityRecord = serde_json::from_slice(v.value())
                        .map_err(|e| StoreError::backend(BACKEND, e))?;
                    records.push(record);
                }
                Ok(with_fresh_epoch(
                    SessionMap::from_records(&tax, records)?,
                    &used,
                ))
            })
            .await?;
        slot.map = Some(map);
        slot.last_used = now;
        Ok(())
    }
}

/// Deletes sessions and their entities in one transaction.
fn delete_sessions(db: &Database, sessions: &[String]) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(db_err)?;
    {
        let mut entities = txn.open_table(ENTITIES).map_err(db_err)?;
        let mut rows = txn.open_table(SESSIONS).map_err(db_err)?;
        for s in sessions {
            entities
                .retain_in((s.as_str(), "")..=(s.as_str(), "\u{10FFFF}"), |_, _| false)
                .map_err(db_err)?;
            rows.remove(s.as_str()).map_err(db_err)?;
        }
    }
    txn.commit().map_err(db_err)
}

impl AliasStore for RedbStore {
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
            let now = (self.config.clock)();
            self.load(session, &mut slot, now).await?;
            let map = slot
                .map
                .get_or_insert_with(|| with_fresh_epoch(SessionMap::new(), &[]));
            let planned = map.plan_from(&self.config.taxonomy, ids, origin)?;
            let epoch = map.epoch().map(|e| e.to_string());
            if !planned.changes.is_empty() {
                let s = session.to_owned();
                // A merged entity is written under each of its aliases.
                let mut rows: Vec<(String, Vec<u8>)> = Vec::new();
                for r in &planned.changes {
                    let v = serde_json::to_vec(r).map_err(|e| StoreError::backend(BACKEND, e))?;
                    rows.extend(r.aliases().map(|a| (a.to_owned(), v.clone())));
                }
                // Persist before answering: one transaction for the batch.
                self.blocking(move |db| {
                    let txn = db.begin_write().map_err(db_err)?;
                    {
                        let mut entities = txn.open_table(ENTITIES).map_err(db_err)?;
                        for (alias, value) in &rows {
                            entities
                                .insert((s.as_str(), alias.as_str()), value.as_slice())
                                .map_err(db_err)?;
                        }
                        txn.open_table(SESSIONS)
                            .map_err(db_err)?
                            .insert(s.as_str(), now)
                            .map_err(db_err)?;
                        if let Some(e) = &epoch {
                            let mut epochs = txn.open_table(EPOCHS).map_err(db_err)?;
                            if epochs
                                .get((s.as_str(), e.as_str()))
                                .map_err(db_err)?
                                .is_none()
                            {
                                epochs
                                    .insert((s.as_str(), e.as_str()), now)
                                    .map_err(db_err)?;
                            }
                        }
                    }
                    txn.commit().map_err(db_err)
                })
                .await?;
                if let Some(map) = slot.map.as_mut() {
                    map.apply(&planned.changes)?;
                }
            }
            slot.last_used = now;
            Ok(planned.aliases)
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
            let now = (self.config.clock)();
            self.load(session, &mut slot, now).await?;
            slot.last_used = now;
            Ok(slot.map.as_ref().map_or_else(
                || vec![None; aliases.len()],
                |m| decode_all(&self.config.taxonomy, m, aliases),
            ))
        })
    }

    fn current_epoch<'a>(&'a self, session: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let slot = self.sessions.get(session);
            let slot = slot.lock().await;
            Ok(slot
                .map
                .as_ref()
                .and_then(|m| m.epoch())
                .map(|e| e.to_string()))
        })
    }

    fn known<'a>(&'a self, session: &'a str) -> StoreFuture<'a, Vec<KnownAlias>> {
        Box::pin(async move {
            let slot = self.sessions.get(session);
            let slot = slot.lock().await;
            match slot.map.as_ref() {
                Some(map) => known_of(map),
                None => Ok(Vec::new()),
            }
        })
    }

    fn sweep(&self) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let now = (self.config.clock)();
            let ttl = self.config.ttl_ms();
            // Idle clocks of sessions in memory (busy ones are in use: skip).
            let mut touched: Vec<(String, u64)> = Vec::new();
            for (s, slot) in self.sessions.snapshot() {
                if let Ok(slot) = slot.try_lock() {
                    if slot.map.is_some() {
                        touched.push((s, slot.last_used));
                    }
                }
            }
            let expired = self
                .blocking(move |db| {
                    let txn = db.begin_write().map_err(db_err)?;
                    let mut expired = Vec::new();
                    {
                        let mut rows = txn.open_table(SESSIONS).map_err(db_err)?;
                        for (s, t) in &touched {
                            let stored = rows.get(s.as_str()).map_err(db_err)?.map(|v| v.value());
                            if stored.is_some_and(|old| old < *t) {
                                rows.insert(s.as_str(), *t).map_err(db_err)?;
                            }
                        }
                        for row in rows.iter().map_err(db_err)? {
                            let (k, v) = row.map_err(db_err)?;
                            if v.value().saturating_add(ttl) < now {
                                expired.push(k.value().to_owned());
                            }
                        }
                        let mut entities = txn.open_table(ENTITIES).map_err(db_err)?;
                        for s in &expired {
                            entities
                                .retain_in((s.as_str(), "")..=(s.as_str(), "\u{10FFFF}"), |_, _| {
                                    false
                                })
                                .map_err(db_err)?;
                            rows.remove(s.as_str()).map_err(db_err)?;
                        }
                    }
                    txn.commit().map_err(db_err)?;
                    Ok(expired)
                })
                .await?;
            for s in &expired {
                self.sessions.remove(s);
            }
            Ok(expired.len())
        })
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn taxonomy(&self) -> &Taxonomy {
        &self.config.taxonomy
    }
}
