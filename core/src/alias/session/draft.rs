//! The draft a plan writes to: where each value lives while a batch is planned,
//! and the merge of two entities that are one record.

use super::{EntityRecord, SessionMap};
use crate::alias::id::Form;
use crate::alias::id::KindId;
use crate::alias::taxonomy::Taxonomy;
use std::collections::BTreeMap;

/// Where a value lives while a batch is planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Target {
    Existing(usize),
    New(usize),
}

/// A batch being planned: changes stay here until the plan succeeds.
pub(super) struct Draft<'m> {
    pub(super) map: &'m SessionMap,
    /// Existing records the batch extends (copies).
    pub(super) changed: BTreeMap<usize, EntityRecord>,
    /// Records the batch mints.
    pub(super) new: Vec<EntityRecord>,
    /// Records a value joined in this batch.
    pub(super) values: BTreeMap<String, Vec<Target>>,
    pub(super) counters: BTreeMap<String, u32>,
    /// Entities merged into another by this batch.
    pub(super) merged: BTreeMap<Target, Target>,
}

impl Draft<'_> {
    /// The record `value` names where `kind` is known: the one of that kind
    /// (or of a kind one record can be read as), else one of the fallback kind;
    /// where no kind is known, the oldest that holds it.
    pub(super) fn lookup(&self, tax: &Taxonomy, value: &str, kind: KindId) -> Option<Target> {
        let mut holders: Vec<Target> = self
            .map
            .by_value
            .get(value)
            .into_iter()
            .flatten()
            .map(|i| Target::Existing(*i))
            .chain(self.values.get(value).into_iter().flatten().copied())
            .map(|t| self.resolve(t))
            .collect();
        holders.sort_unstable();
        holders.dedup();
        let fallback = tax.fallback_kind();
        if kind == fallback {
            return holders.first().copied();
        }
        let kind_of = |t: Target| self.record(t).and_then(|r| tax.kind_by_name(&r.kind));
        holders
            .iter()
            .find(|t| kind_of(**t).is_some_and(|k| tax.kinds_may_meet(k, kind)))
            .or_else(|| holders.iter().find(|t| kind_of(**t) == Some(fallback)))
            .copied()
    }

    /// Records that `value` belongs to `t`.
    pub(super) fn claim(&mut self, value: &str, t: Target) {
        self.values.entry(value.to_owned()).or_default().push(t);
    }

    /// Follows merges (bounded: each merge retires one entity).
    pub(super) fn resolve(&self, mut t: Target) -> Target {
        for _ in 0..=self.merged.len() {
            match self.merged.get(&t) {
                Some(n) => t = *n,
                None => break,
            }
        }
        t
    }

    pub(super) fn record(&self, t: Target) -> Option<&EntityRecord> {
        let t = self.resolve(t);
        match t {
            Target::Existing(i) => self.changed.get(&i).or_else(|| self.map.records.get(i)),
            Target::New(i) => self.new.get(i),
        }
    }

    pub(super) fn record_mut(&mut self, t: Target) -> Option<&mut EntityRecord> {
        let t = self.resolve(t);
        match t {
            Target::Existing(i) => {
                if !self.changed.contains_key(&i) {
                    let copy = self.map.records.get(i)?.clone();
                    self.changed.insert(i, copy);
                }
                self.changed.get_mut(&i)
            }
            Target::New(i) => self.new.get_mut(i),
        }
    }
}

/// Merges the entities `a` and `b` when they can be one record: no form holds
/// two different values and their kinds agree (or one is the fallback kind).
/// The older entity survives and takes the other's ids and aliases; returns
/// it, or `None` when they are different records.
pub(super) fn merge(tax: &Taxonomy, draft: &mut Draft<'_>, a: Target, b: Target) -> Option<Target> {
    let (ra, rb) = (draft.record(a)?, draft.record(b)?);
    for form in [Form::Uuid, Form::Fhir, Form::Slug] {
        if let (Some(x), Some(y)) = (ra.ids.get(form), rb.ids.get(form)) {
            if x != y {
                return None;
            }
        }
    }
    let fallback = tax.kind_name(tax.fallback_kind());
    let kind = if ra.kind == rb.kind || rb.kind == fallback {
        ra.kind.clone()
    } else if ra.kind == fallback {
        rb.kind.clone()
    } else {
        return None;
    };
    // Existing before new, then minting order.
    let (keep, gone) = if a <= b { (a, b) } else { (b, a) };
    let gone_record = draft.record(gone)?.clone();
    let values: Vec<String> = gone_record
        .ids
        .values()
        .map(|(_, v)| v.to_owned())
        .collect();
    let kept = draft.record_mut(keep)?;
    for (form, v) in gone_record.ids.values() {
        let slot = kept.ids.slot_mut(form);
        if slot.is_none() {
            *slot = Some(v.to_owned());
        }
    }
    kept.kind = kind;
    for alias in gone_record.aliases() {
        if !kept.also.iter().any(|x| x == alias) {
            kept.also.push(alias.to_owned());
        }
    }
    draft.merged.insert(gone, keep);
    for v in values {
        draft.claim(&v, keep);
    }
    Some(keep)
}
