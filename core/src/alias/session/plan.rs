//! Planning a batch: each group of raw ids resolved to an existing entity,
//! a merge of two, or a new alias, without changing the map.

use super::draft::{merge, Draft, Target};
use super::{sentinel, Encoded, EntityRecord, SessionError, SessionMap};
use crate::alias::id::{Form, Origin};
use crate::alias::shape;
use crate::alias::taxonomy::Taxonomy;
use crate::proto::alias::{IdInput, RealIds};
use std::collections::BTreeMap;

impl SessionMap {
    /// Plans the aliases of a batch without changing the map.
    ///
    /// Fails (and plans nothing) on an empty or oversized value, an unknown kind
    /// hint, or a conflicting group.
    pub fn plan(&self, tax: &Taxonomy, ids: &[IdInput]) -> Result<Encoded, SessionError> {
        // Groups in order of first appearance; ungrouped ids stand alone.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_index: BTreeMap<u32, usize> = BTreeMap::new();
        for (i, id) in ids.iter().enumerate() {
            if id.value.is_empty() || id.value.len() > tax.max_id_len() {
                return Err(SessionError::BadValue {
                    index: i,
                    max: tax.max_id_len(),
                });
            }
            if let Some(k) = &id.kind {
                if tax.kind_by_name(k).is_none() {
                    return Err(SessionError::UnknownKind {
                        index: i,
                        kind: k.clone(),
                    });
                }
            }
            match id.group {
                Some(g) => match group_index.get(&g) {
                    Some(gi) => {
                        if let Some(members) = groups.get_mut(*gi) {
                            members.push(i);
                        }
                    }
                    None => {
                        group_index.insert(g, groups.len());
                        groups.push(vec![i]);
                    }
                },
                None => groups.push(vec![i]),
            }
        }
        let mut draft = Draft {
            map: self,
            changed: BTreeMap::new(),
            new: Vec::new(),
            values: BTreeMap::new(),
            counters: self.counters.clone(),
            merged: BTreeMap::new(),
        };
        let mut aliases = vec![String::new(); ids.len()];
        for members in &groups {
            let alias = self.plan_group(tax, ids, members, &mut draft)?;
            for i in members {
                if let Some(a) = aliases.get_mut(*i) {
                    a.clone_from(&alias);
                }
            }
        }
        let merged = draft.merged;
        let mut changes: Vec<EntityRecord> = draft
            .changed
            .into_iter()
            .filter(|(i, _)| !merged.contains_key(&Target::Existing(*i)))
            .map(|(_, r)| r)
            .collect();
        changes.extend(
            draft
                .new
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !merged.contains_key(&Target::New(*i)))
                .map(|(_, r)| r),
        );
        Ok(Encoded { aliases, changes })
    }

    fn plan_group(
        &self,
        tax: &Taxonomy,
        ids: &[IdInput],
        members: &[usize],
        draft: &mut Draft<'_>,
    ) -> Result<String, SessionError> {
        let member = |i: usize| ids.get(i).map(|id| (id, form_of(id)));
        let hint = |id: &IdInput| id.kind.as_deref().and_then(|k| tax.kind_by_name(k));
        // The group's kind: its first hint that names one; each member is
        // looked up as its own hint names it.
        let kind = members
            .iter()
            .find_map(|i| ids.get(*i).and_then(hint))
            .unwrap_or_else(|| tax.fallback_kind());
        let kind_of = |id: &IdInput| hint(id).unwrap_or(kind);
        // Which entity does the group name?
        let mut target: Option<(Target, usize)> = None;
        for &i in members {
            let Some((id, _)) = member(i) else { continue };
            if let Some(t) = draft.lookup(tax, &id.value, kind_of(id)) {
                match target {
                    None => target = Some((t, i)),
                    Some((t0, _)) if draft.resolve(t0) == t => {}
                    Some((t0, i0)) => {
                        let t0 = draft.resolve(t0);
                        match merge(tax, draft, t0, t) {
                            Some(survivor) => target = Some((survivor, i0)),
                            None => {
                                let alias_of = |t| {
                                    draft.record(t).map(|r| r.alias.clone()).unwrap_or_default()
                                };
                                return Err(SessionError::Conflict {
                                    index: i,
                                    first: alias_of(t0),
                                    second: alias_of(t),
                                });
                            }
                        }
                    }
                }
            }
        }
        // The group's own members must not disagree on a form.
        let mut seen: BTreeMap<Form, &str> = BTreeMap::new();
        for &i in members {
            let Some((id, form)) = member(i) else {
                continue;
            };
            if let Some(prev) = seen.insert(form, &id.value) {
                if prev != id.value {
                    let alias = target
                        .and_then(|(t, _)| draft.record(t))
                        .map(|r| r.alias.clone())
                        .unwrap_or_default();
                    return Err(SessionError::FormConflict {
                        index: i,
                        alias,
                        form: form.as_str(),
                    });
                }
            }
        }
        if let Some((t, _)) = target {
            // A record first seen where no kind was known takes the kind
            // it is seen with now.
            let fallback = tax.kind_name(tax.fallback_kind());
            if kind != tax.fallback_kind() && draft.record(t).is_some_and(|r| r.kind == fallback) {
                if let Some(r) = draft.record_mut(t) {
                    tax.kind_name(kind).clone_into(&mut r.kind);
                }
            }
            for &i in members {
                let Some((id, form)) = member(i) else {
                    continue;
                };
                if draft.lookup(tax, &id.value, kind_of(id)).is_some() {
                    continue;
                }
                let record = draft.record_mut(t).ok_or(SessionError::BadRecord {
                    alias: String::new(),
                    problem: "lost record",
                })?;
                let slot = record.ids.slot_mut(form);
                match slot {
                    None => *slot = Some(id.value.clone()),
                    Some(_) => {
                        return Err(SessionError::FormConflict {
                            index: i,
                            alias: record.alias.clone(),
                            form: form.as_str(),
                        })
                    }
                }
                draft.claim(&id.value, t);
            }
            return Ok(draft.record(t).map(|r| r.alias.clone()).unwrap_or_default());
        }
        // A new entity.
        if self.records.len() + draft.new.len() >= tax.max_aliases_per_session() {
            return Ok(sentinel(tax, kind, self.epoch));
        }
        let name = tax.kind_name(kind).to_owned();
        let prefix = tax.kind(kind).map(|k| k.prefix.clone()).unwrap_or_default();
        let counter = draft.counters.entry(prefix).or_insert(0);
        *counter = counter.saturating_add(1);
        let alias = tax
            .format_alias_in(kind, self.epoch, *counter)
            .unwrap_or_else(|| sentinel(tax, kind, self.epoch));
        let mut record = EntityRecord {
            alias: alias.clone(),
            kind: name,
            ids: RealIds::default(),
            also: Vec::new(),
        };
        let t = Target::New(draft.new.len());
        for &i in members {
            let Some((id, form)) = member(i) else {
                continue;
            };
            *record.ids.slot_mut(form) = Some(id.value.clone());
            draft.claim(&id.value, t);
        }
        draft.new.push(record);
        Ok(alias)
    }

    /// Plans a batch read at `origin` without changing the map: as
    /// [`Self::plan`], except that from a [`Origin::Prompt`] an alias this
    /// session issued is answered with itself (it creates nothing and joins
    /// no group). Errors name inputs by their index in `ids`.
    pub fn plan_from(
        &self,
        tax: &Taxonomy,
        ids: &[IdInput],
        origin: Origin,
    ) -> Result<Encoded, SessionError> {
        if origin == Origin::Response {
            return self.plan(tax, ids);
        }
        let issued: Vec<bool> = ids
            .iter()
            .map(|id| self.decode(tax, &id.value).is_some())
            .collect();
        if !issued.contains(&true) {
            return self.plan(tax, ids);
        }
        // The rest are planned as one batch; `index` maps its positions back.
        let index: Vec<usize> = (0..ids.len())
            .filter(|i| !issued.get(*i).copied().unwrap_or(false))
            .collect();
        let rest: Vec<IdInput> = index.iter().filter_map(|i| ids.get(*i).cloned()).collect();
        let planned = self.plan(tax, &rest).map_err(|e| e.reindexed(&index))?;
        let mut minted = planned.aliases.into_iter();
        let aliases = ids
            .iter()
            .zip(&issued)
            .map(|(id, own)| {
                if *own {
                    id.value.clone()
                } else {
                    minted.next().unwrap_or_default()
                }
            })
            .collect();
        Ok(Encoded {
            aliases,
            changes: planned.changes,
        })
    }

    /// Plans a batch and applies it at once (for callers without persistence).
    pub fn encode(&mut self, tax: &Taxonomy, ids: &[IdInput]) -> Result<Encoded, SessionError> {
        self.encode_from(tax, ids, Origin::Response)
    }

    /// [`Self::plan_from`] and applies it at once.
    pub fn encode_from(
        &mut self,
        tax: &Taxonomy,
        ids: &[IdInput],
        origin: Origin,
    ) -> Result<Encoded, SessionError> {
        let encoded = self.plan_from(tax, ids, origin)?;
        self.apply(&encoded.changes)?;
        Ok(encoded)
    }
}

/// The slot an input fills: its hint, except that a `uuid` hint on a value that
/// is not a UUID is routed by shape (a FHIR id must never poison the UUID slot).
fn form_of(id: &IdInput) -> Form {
    match id.form {
        Some(Form::Uuid) | None => shape::classify(&id.value),
        Some(f) => f,
    }
}
