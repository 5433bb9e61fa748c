//! Near-miss repair over a session's life: no string ever decodes to two
//! different records, and a string that decodes names a record of the kind
//! its own longest prefix names.
//!
//! Every prefix of the taxonomy is combined with every repair infix, in
//! every place of every alias the session issued (`task-group-k7q2-001`,
//! `task-k7q2-item-001`, another kind's prefix before the tail); records of
//! random kinds are minted one at a time, and after each mint every
//! candidate string is decoded again. The red team's case was one string,
//! two records over time: `task-group-…-001` decoded to the task while only
//! the task was issued, and to the task group once one was minted.

use super::*;
use std::collections::BTreeMap;

/// Every string a model could drift to from `alias`: an infix inserted at
/// each dash, and the alias's tail under every prefix, with and without an
/// infix after it.
fn drifts(alias: &str, prefixes: &[String], infixes: &[String]) -> Vec<String> {
    let mut out = vec![alias.to_owned()];
    let dashes: Vec<usize> = alias.match_indices('-').map(|(i, _)| i).collect();
    for &at in &dashes {
        for infix in infixes {
            out.push(format!("{}-{infix}{}", &alias[..at], &alias[at..]));
        }
    }
    // The tail after the alias's own prefix: `k7q2-001` or `001`.
    for &at in &dashes {
        let tail = &alias[at + 1..];
        for p in prefixes {
            out.push(format!("{p}-{tail}"));
            for infix in infixes {
                out.push(format!("{p}-{infix}-{tail}"));
            }
        }
    }
    out
}

fn one_string_one_record(tax: &Taxonomy, epoch: Option<u64>, order: &[usize]) {
    let kinds: Vec<(String, String)> = tax
        .kinds()
        .map(|(_, k)| (k.name.clone(), k.prefix.clone()))
        .collect();
    let prefixes: Vec<String> = kinds.iter().map(|(_, p)| p.clone()).collect();
    let infixes = tax.repair_infixes().to_vec();
    let mut session = match epoch {
        Some(seed) => SessionMap::with_epoch(Epoch::from_seed(seed)),
        None => SessionMap::new(),
    };
    // The record each string was ever decoded to (by its raw ids).
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut issued: Vec<String> = Vec::new();
    for (n, &pick) in order.iter().enumerate() {
        let (kind, _) = &kinds[pick % kinds.len()];
        let value = format!("raw-{n}-{kind}");
        let encoded = session
            .encode(
                tax,
                &[IdInput {
                    value: value.clone(),
                    kind: Some(kind.clone()),
                    form: None,
                    group: None,
                }],
            )
            .unwrap();
        issued.extend(encoded.aliases);
        for alias in &issued {
            for s in drifts(alias, &prefixes, &infixes) {
                let Some(d) = session.decode(tax, &s) else {
                    continue;
                };
                let raw = format!("{:?}", d.record.ids);
                let was = seen.entry(s.clone()).or_insert_with(|| raw.clone());
                assert_eq!(
                    *was, raw,
                    "{s} decoded to two records over the session's life"
                );
                // The record is of the kind the string's own prefix names.
                let own = tax
                    .own_prefix_kind(&s)
                    .map(|(k, _)| tax.kind_name(k).to_owned());
                assert_eq!(
                    own.as_deref(),
                    Some(d.record.kind.as_str()),
                    "{s} decoded to a {} record",
                    d.record.kind
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Built-in and example taxonomies, epoch aliases and pre-epoch ones,
    /// kinds minted in any order.
    #[test]
    fn no_string_decodes_to_two_records_over_a_session(
        order in proptest::collection::vec(0usize..64, 1..24),
        seed in any::<u64>(),
        epoch in any::<bool>(),
        example in any::<bool>(),
    ) {
        let tax = if example { example_taxonomy() } else { Taxonomy::default() };
        one_string_one_record(&tax, epoch.then_some(seed), &order);
    }
}

/// The red team's order, spelled out: the task first, then the task group.
#[test]
fn a_task_groups_drift_never_decodes_to_the_task() {
    let tax = Taxonomy::default();
    let kinds: Vec<String> = tax.kinds().map(|(_, k)| k.name.clone()).collect();
    let at = |name: &str| kinds.iter().position(|k| k == name).unwrap();
    one_string_one_record(&tax, Some(7), &[at("task"), at("task-group"), at("task")]);
    one_string_one_record(&tax, None, &[at("task"), at("task-group")]);
}
