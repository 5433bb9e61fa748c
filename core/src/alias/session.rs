//! One session's alias map, as a pure data structure.
//!
//! An entity is one record seen in up to three forms (UUID, FHIR id, slug) and
//! has exactly one alias. [`SessionMap::plan`] resolves a batch of raw ids
//! against the map without changing it and returns the aliases plus the entity
//! records that changed; a store persists those records as one batch and only
//! then calls [`SessionMap::apply`]. [`SessionMap::encode`] does both for callers
//! without persistence.
//!
//! The rules:
//! - a record is a (kind, raw id) pair: the same id string under two
//!   resource types (`Patient/1`, `Encounter/1`) is two records with two
//!   aliases. A value seen where no kind is known (prose, a bare UUID) is the
//!   record that holds it (the oldest, when several kinds do); a record of the
//!   fallback kind takes the first specific kind it is seen with;
//! - a raw value the session knows keeps its alias: re-encoding never mints;
//! - reverse dedup: a group that shares any member with an entity is that
//!   entity, and its new members are added to it ({uuid, fhirId} then fhirId
//!   alone keeps one alias, and the other way round);
//! - sightings merge: a group whose members belong to two entities that cannot
//!   be different records (no form holds two different values, kinds agree or
//!   one is the fallback kind) merges them into one; the older alias stays the
//!   entity's alias and the other is kept as one of its `also` aliases, so both
//!   keep decoding to the one record (a UUID seen in prose, its FHIR id seen
//!   alone, then both in one `{id, fhirId}` object);
//! - a group whose members belong to two entities that differ (two different
//!   values of one form, two specific kinds), or that would give an entity a
//!   second value of one form, is a conflict: the whole batch fails and
//!   nothing is minted;
//! - every alias carries the map's epoch (see [`super::grammar`]); records of
//!   another epoch never load into a map;
//! - counters are per kind and monotonic; past the session limit, an id that
//!   would need a new alias gets the sentinel `<prefix>-000`, which decodes to
//!   nothing;
//! - decode is exact, except a bounded near-miss repair that only ever resolves
//!   to an alias this session issued, of the kind the drift's own prefix names
//!   (see [`Taxonomy::repair_candidates`]): one string never decodes to two
//!   records over a session's life.
//!
//! # Layout
//! - this file: the map, its records and errors, loading, applying and
//!   decoding.
//! - [`plan`](self::plan): planning a batch of raw ids into aliases.
//! - [`draft`]: the draft a plan writes to, and merging two entities.

use super::grammar::Epoch;
use super::id::KindId;
use super::taxonomy::Taxonomy;
use crate::proto::alias::RealIds;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod draft;
mod plan;

/// One entity of a session, as persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntityRecord {
    /// Its alias (`patient-001`).
    pub alias: String,
    /// Its kind name.
    pub kind: String,
    /// Its raw ids.
    #[serde(flatten)]
    pub ids: RealIds,
    /// Aliases of entities merged into this one (each decodes to it). A store
    /// keeps the record under every one of its aliases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
}

impl EntityRecord {
    /// Its alias and the aliases merged into it.
    pub fn aliases(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.alias.as_str()).chain(self.also.iter().map(String::as_str))
    }
}

/// Why a batch could not be encoded, or records could not be loaded. Messages
/// name inputs by index and entities by alias, never by raw value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// An id is empty or too long.
    #[error("ids[{index}]: value is empty or longer than {max} bytes")]
    BadValue {
        /// Input index.
        index: usize,
        /// The length limit.
        max: usize,
    },
    /// A kind hint names no kind.
    #[error("ids[{index}]: unknown kind {kind:?}")]
    UnknownKind {
        /// Input index.
        index: usize,
        /// The hint.
        kind: String,
    },
    /// One group holds members of two known entities.
    #[error("ids[{index}]: group asserts members of two entities ({first} and {second}); nothing was minted")]
    Conflict {
        /// Input index of the member that hit the second entity.
        index: usize,
        /// Alias of the first entity.
        first: String,
        /// Alias of the second entity.
        second: String,
    },
    /// A group would give an entity a second value of one form.
    #[error("ids[{index}]: entity {alias} already has a different {form}; nothing was minted")]
    FormConflict {
        /// Input index.
        index: usize,
        /// The entity's alias.
        alias: String,
        /// The form.
        form: &'static str,
    },
    /// A persisted record cannot be loaded.
    #[error("record {alias:?}: {problem}")]
    BadRecord {
        /// The record's alias.
        alias: String,
        /// What is wrong.
        problem: &'static str,
    },
}

impl SessionError {
    /// The same error naming inputs by `index[i]` instead of `i` (a batch
    /// planned from a subset of the caller's ids).
    fn reindexed(self, index: &[usize]) -> SessionError {
        let map = |i: usize| index.get(i).copied().unwrap_or(i);
        match self {
            SessionError::BadValue { index: i, max } => {
                SessionError::BadValue { index: map(i), max }
            }
            SessionError::UnknownKind { index: i, kind } => SessionError::UnknownKind {
                index: map(i),
                kind,
            },
            SessionError::Conflict {
                index: i,
                first,
                second,
            } => SessionError::Conflict {
                index: map(i),
                first,
                second,
            },
            SessionError::FormConflict {
                index: i,
                alias,
                form,
            } => SessionError::FormConflict {
                index: map(i),
                alias,
                form,
            },
            other @ SessionError::BadRecord { .. } => other,
        }
    }
}

/// The outcome of a plan: aliases for the inputs and the records to persist.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Encoded {
    /// One alias per input, in input order.
    pub aliases: Vec<String>,
    /// Entity records created or extended by the batch (full snapshots), to be
    /// persisted as one batch and then applied. Empty when nothing changed.
    pub changes: Vec<EntityRecord>,
}

/// A decoded alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// The entity.
    pub record: &'a EntityRecord,
    /// Whether a near-miss repair found it (the asked alias was not issued).
    pub repaired: bool,
}

/// One session's aliases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionMap {
    /// The epoch every alias of this map carries (`None`: epoch-less aliases).
    epoch: Option<Epoch>,
    /// Records in minting order; a record merged into another stays here,
    /// unindexed.
    records: Vec<EntityRecord>,
    by_alias: BTreeMap<String, usize>,
    /// The records holding each raw value: one per kind, oldest first.
    by_value: BTreeMap<String, Vec<usize>>,
    /// Highest number issued per alias prefix (merged aliases of another
    /// prefix count for their own prefix, so no number is ever reissued).
    counters: BTreeMap<String, u32>,
}

impl SessionMap {
    /// An empty session whose aliases carry no epoch (`patient-001`): for
    /// callers that never recreate a session under the same name.
    pub fn new() -> Self {
        SessionMap::default()
    }

    /// An empty session whose aliases carry `epoch` (`patient-k7q2-001`).
    pub fn with_epoch(epoch: Epoch) -> Self {
        SessionMap {
            epoch: Some(epoch),
            ..SessionMap::default()
        }
    }

    /// The epoch its aliases carry.
    pub fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }

    /// Rebuilds a session from persisted records (any order).
    ///
    /// Fails with [`SessionError::BadRecord`] when an alias does not parse, a
    /// record holds no id, or two records claim one raw value.
    pub fn from_records(
        tax: &Taxonomy,
        records: impl IntoIterator<Item = EntityRecord>,
    ) -> Result<Self, SessionError> {
        let mut map = SessionMap::new();
        let records: Vec<EntityRecord> = records.into_iter().collect();
        let mut epoch: Option<Option<Epoch>> = None;
        for r in &records {
            for a in r.aliases() {
                let Some(parts) = tax.parse_alias(a).filter(|p| !p.is_sentinel()) else {
                    return Err(SessionError::BadRecord {
                        alias: a.to_owned(),
                        problem: "alias does not parse",
                    });
                };
                if *epoch.get_or_insert(parts.epoch) != parts.epoch {
                    return Err(SessionError::BadRecord {
                        alias: a.to_owned(),
                        problem: "records of two epochs in one session",
                    });
                }
            }
        }
        map.epoch = epoch.flatten();
        map.apply(&records)?;
        Ok(map)
    }

    /// Number of aliases issued.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no alias was issued.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every entity, in minting order.
    pub fn records(&self) -> &[EntityRecord] {
        &self.records
    }

    /// Applies planned (or loaded) records: a record with a known alias replaces
    /// it (gaining members), others are added.
    ///
    /// Fails with [`SessionError::BadRecord`] when a record holds no id or a raw
    /// value already belongs to another alias of the same kind; the map is
    /// unchanged then.
    pub fn apply(&mut self, records: &[EntityRecord]) -> Result<(), SessionError> {
        // Check everything before touching anything.
        let mut claimed: BTreeMap<(&str, &str), &str> = BTreeMap::new();
        for r in records {
            if r.ids.values().next().is_none() {
                return Err(SessionError::BadRecord {
                    alias: r.alias.clone(),
                    problem: "record holds no id",
                });
            }
            // A value may move to the entity its owner was merged into.
            let foreign = |o: &str| o != r.alias && !r.also.iter().any(|a| a == o);
            for (_, v) in r.ids.values() {
                let owner = self
                    .by_value
                    .get(v)
                    .into_iter()
                    .flatten()
                    .filter_map(|i| self.records.get(*i))
                    .find(|o| o.kind == r.kind && foreign(&o.alias));
                let prior = claimed.insert((v, r.kind.as_str()), &r.alias);
                if owner.is_some() || prior.is_some_and(|p| p != r.alias) {
                    return Err(SessionError::BadRecord {
                        alias: r.alias.clone(),
                        problem: "raw value belongs to another alias",
                    });
                }
            }
        }
        for r in records {
            let index = match self.by_alias.get(&r.alias) {
                Some(i) => *i,
                None => {
                    self.records.push(r.clone());
                    self.by_alias
                        .insert(r.alias.clone(), self.records.len() - 1);
                    self.records.len() - 1
                }
            };
            if let Some(slot) = self.records.get_mut(index) {
                *slot = r.clone();
            }
            let merged: Vec<usize> = r
                .also
                .iter()
                .filter_map(|a| self.by_alias.get(a).copied())
                .collect();
            for (_, v) in r.ids.values() {
                let holders = self.by_value.entry(v.to_owned()).or_default();
                // A merged entity's values are the survivor's now.
                holders.retain(|i| *i == index || !merged.contains(i));
                if !holders.contains(&index) {
                    holders.push(index);
                    holders.sort_unstable();
                }
            }
            for a in &r.also {
                self.by_alias.insert(a.clone(), index);
            }
            for a in r.aliases() {
                let Some((head, digits)) = a.rsplit_once('-') else {
                    continue;
                };
                let n: u32 = digits.parse().unwrap_or(0);
                let c = self.counters.entry(prefix_of(head)).or_insert(0);
                *c = (*c).max(n);
            }
        }
        Ok(())
    }

    /// Decodes an alias: the entity it was issued for, else the unique entity a
    /// near-miss repair finds among this session's aliases, else `None`. A
    /// sentinel, a foreign or an invented alias decodes to `None`.
    pub fn decode(&self, tax: &Taxonomy, alias: &str) -> Option<Decoded<'_>> {
        if let Some(r) = self.by_alias.get(alias).and_then(|i| self.records.get(*i)) {
            return Some(Decoded {
                record: r,
                repaired: false,
            });
        }
        if tax.parse_alias(alias).is_some_and(|p| p.is_sentinel()) {
            return None;
        }
        let mut found = tax
            .repair_candidates(alias)
            .into_iter()
            .filter_map(|c| self.by_alias.get(&c).copied());
        let first = found.next()?;
        // Two different repairs are ambiguous: refuse.
        if found.any(|other| other != first) {
            return None;
        }
        self.records.get(first).map(|r| Decoded {
            record: r,
            repaired: true,
        })
    }

    /// The alias of a raw value, if the session knows it: of its oldest
    /// record, when several kinds hold it.
    pub fn alias_of(&self, value: &str) -> Option<&str> {
        self.by_value
            .get(value)
            .and_then(|holders| holders.first())
            .and_then(|i| self.records.get(*i))
            .map(|r| r.alias.as_str())
    }

    /// Every raw value with the alias that stands for it, oldest record
    /// first (the answer a rewriter replaces known values with); records
    /// merged into another are left out, their values are the survivor's.
    pub fn known_values(&self) -> impl Iterator<Item = (&str, &str)> {
        self.records
            .iter()
            .enumerate()
            .filter(|(i, r)| self.by_alias.get(&r.alias) == Some(i))
            .flat_map(|(_, r)| r.ids.values().map(move |(_, v)| (v, r.alias.as_str())))
    }
}

fn sentinel(tax: &Taxonomy, kind: KindId, epoch: Option<Epoch>) -> String {
    tax.sentinel_in(kind, epoch)
        .unwrap_or_else(|| "ref-000".to_owned())
}

/// The prefix of an alias without its number (`patient-k7q2` → `patient`).
fn prefix_of(head: &str) -> String {
    match head.rsplit_once('-') {
        Some((p, e)) if Epoch::parse(e).is_some() => p.to_owned(),
        _ => head.to_owned(),
    }
}

#[cfg(test)]
mod tests;
