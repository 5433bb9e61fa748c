use super::*;
use crate::alias::id::{Form, Origin};
use crate::proto::alias::IdInput;
use proptest::prelude::*;

fn tax() -> Taxonomy {
    Taxonomy::default()
}

fn id(value: &str, kind: &str, form: Option<Form>, group: Option<u32>) -> IdInput {
    IdInput {
        value: value.into(),
        kind: Some(kind.into()),
        form,
        group,
    }
}

const U1: &str = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
const U2: &str = "74229a55-de5f-4d66-af4a-88e122c37321";

#[test]
fn mints_per_kind_counters_and_never_re_mints() {
    let t = tax();
    let mut m = SessionMap::new();
    let batch = [
        id(U1, "patient", None, None),
        id(U2, "patient", None, None),
        id("appt-0009812", "appointment", Some(Form::Fhir), None),
    ];
    let e = m.encode(&t, &batch).unwrap();
    assert_eq!(
        e.aliases,
        ["patient-001", "patient-002", "patient-appt-001"]
    );
    assert_eq!(e.changes.len(), 3);
    let again = m.encode(&t, &batch).unwrap();
    assert_eq!(again.aliases, e.aliases);
    assert!(again.changes.is_empty(), "re-encoding writes nothing");
    assert_eq!(m.len(), 3);
}

#[test]
fn reverse_dedup_across_id_spaces_both_orders() {
    let t = tax();
    // {uuid, fhirId} first, fhirId alone later.
    let mut m = SessionMap::new();
    let a = m
        .encode(
            &t,
            &[
                id(U1, "patient", Some(Form::Uuid), Some(1)),
                id("pat-000123", "patient", Some(Form::Fhir), Some(1)),
            ],
        )
        .unwrap();
    let b = m
        .encode(&t, &[id("pat-000123", "patient", Some(Form::Fhir), None)])
        .unwrap();
    assert_eq!(a.aliases[0], a.aliases[1]);
    assert_eq!(b.aliases[0], a.aliases[0]);
    // fhirId alone first, then {uuid, fhirId}: the uuid joins the entity.
    let mut m = SessionMap::new();
    let a = m
        .encode(&t, &[id("pat-000123", "patient", Some(Form::Fhir), None)])
        .unwrap();
    let b = m
        .encode(
            &t,
            &[
                id(U1, "patient", None, Some(7)),
                id("pat-000123", "patient", Some(Form::Fhir), Some(7)),
            ],
        )
        .unwrap();
    assert_eq!(b.aliases, [a.aliases[0].clone(), a.aliases[0].clone()]);
    assert_eq!(b.changes.len(), 1, "the extended entity is persisted");
    let d = m.decode(&t, &a.aliases[0]).unwrap();
    assert_eq!(d.record.ids.uuid.as_deref(), Some(U1));
    assert_eq!(d.record.ids.fhir_id.as_deref(), Some("pat-000123"));
    assert_eq!(m.len(), 1);
}

#[test]
fn conflicting_members_fail_closed_and_mint_nothing() {
    let t = tax();
    let mut m = SessionMap::new();
    m.encode(
        &t,
        &[
            id(U1, "patient", None, Some(1)),
            id("pat-000123", "patient", Some(Form::Fhir), Some(1)),
        ],
    )
    .unwrap();
    m.encode(
        &t,
        &[
            id(U2, "patient", None, Some(1)),
            id("pat-000871", "patient", Some(Form::Fhir), Some(1)),
        ],
    )
    .unwrap();
    let before = m.clone();
    // A group joining two known entities.
    let e = m
        .encode(
            &t,
            &[
                id("new-value-1", "patient", None, None),
                id(U1, "patient", None, Some(3)),
                id("pat-000871", "patient", Some(Form::Fhir), Some(3)),
            ],
        )
        .unwrap_err();
    assert!(matches!(e, SessionError::Conflict { index: 2, .. }), "{e}");
    assert_eq!(m, before, "nothing minted, not even the valid first id");
    // A group giving an entity a second UUID.
    let e = m
        .encode(
            &t,
            &[
                id(
                    "9396170f-6b67-4cb4-b6fa-feddf8407435",
                    "patient",
                    None,
                    Some(4),
                ),
                id("pat-000123", "patient", Some(Form::Fhir), Some(4)),
            ],
        )
        .unwrap_err();
    assert!(
        matches!(e, SessionError::FormConflict { ref alias, form: "uuid", .. } if alias == "patient-001"),
        "{e}"
    );
    // A group with two different FHIR ids.
    let e = m
        .encode(
            &t,
            &[
                id("pat-1", "patient", Some(Form::Fhir), Some(5)),
                id("pat-2", "patient", Some(Form::Fhir), Some(5)),
            ],
        )
        .unwrap_err();
    assert!(
        matches!(e, SessionError::FormConflict { form: "fhirId", .. }),
        "{e}"
    );
    assert_eq!(m, before);
    assert!(
        !e.to_string().contains("pat-1"),
        "errors never carry raw values: {e}"
    );
}

#[test]
fn sightings_of_one_entity_merge_and_both_aliases_keep_decoding() {
    let t = tax();
    for reverse in [false, true] {
        let mut m = SessionMap::new();
        // The UUID seen in prose (no kind known), its FHIR id seen alone.
        let prose = IdInput {
            value: U1.into(),
            kind: None,
            form: None,
            group: None,
        };
        let fhir = id("pat-000123", "patient", Some(Form::Fhir), None);
        let (first, second) = if reverse {
            (fhir.clone(), prose.clone())
        } else {
            (prose.clone(), fhir.clone())
        };
        let a1 = m.encode(&t, &[first]).unwrap().aliases;
        let a2 = m.encode(&t, &[second]).unwrap().aliases;
        assert_ne!(a1, a2);
        // Then both in one `{id, fhirId}` detail: one entity, not a conflict.
        let detail = [
            id(U1, "patient", None, Some(1)),
            id("pat-000123", "patient", Some(Form::Fhir), Some(1)),
        ];
        let planned = m.plan(&t, &detail).unwrap();
        assert_eq!(planned.changes.len(), 1, "one merged record");
        let merged = planned.changes.first().unwrap().clone();
        assert_eq!(merged.kind, "patient", "the specific kind wins");
        m.apply(&planned.changes).unwrap();
        let again = m.encode(&t, &detail).unwrap();
        assert!(again.changes.is_empty(), "merged for good");
        assert_eq!(again.aliases.first(), again.aliases.get(1));
        for a in a1.iter().chain(&a2) {
            let d = m.decode(&t, a).unwrap().record;
            assert_eq!(d.ids.uuid.as_deref(), Some(U1), "{a}");
            assert_eq!(d.ids.fhir_id.as_deref(), Some("pat-000123"), "{a}");
        }
        // Every later sighting, in either form, keeps the one alias.
        assert_eq!(
            m.encode(&t, std::slice::from_ref(&prose)).unwrap().aliases,
            again.aliases[..1]
        );
        assert_eq!(
            m.encode(&t, std::slice::from_ref(&fhir)).unwrap().aliases,
            again.aliases[..1]
        );
        // A reload (stores keep the record under each alias) gives the same map.
        let rows: Vec<EntityRecord> = m
            .records()
            .iter()
            .filter(|r| m.decode(&t, &r.alias).is_some_and(|d| d.record == *r))
            .flat_map(|r| r.aliases().map(|_| r.clone()).collect::<Vec<_>>())
            .collect();
        let rebuilt = SessionMap::from_records(&t, rows).unwrap();
        for a in a1.iter().chain(&a2) {
            assert_eq!(
                rebuilt.decode(&t, a).map(|d| d.record),
                m.decode(&t, a).map(|d| d.record),
                "{a}"
            );
        }
        assert_eq!(
            rebuilt
                .plan(&t, &[id(U2, "patient", None, None)])
                .unwrap()
                .aliases,
            ["patient-002"],
            "counters survive a merge and a reload"
        );
        let fallback = t.kind_name(t.fallback_kind()).to_owned();
        let next = rebuilt
            .plan(
                &t,
                &[IdInput {
                    value: U2.into(),
                    kind: Some(fallback),
                    form: None,
                    group: None,
                }],
            )
            .unwrap()
            .aliases;
        assert!(
            !a1.contains(&next[0]) && !a2.contains(&next[0]),
            "a merged alias' number is never reissued: {next:?}"
        );
    }
}

#[test]
fn merging_two_different_records_still_fails_closed() {
    let t = tax();
    let mut m = SessionMap::new();
    m.encode(&t, &[id(U1, "patient", None, None)]).unwrap();
    m.encode(
        &t,
        &[
            id(U2, "patient", None, Some(1)),
            id("pat-2", "patient", Some(Form::Fhir), Some(1)),
        ],
    )
    .unwrap();
    let before = m.clone();
    // U1's entity and pat-2's entity (whose UUID is U2) are two records.
    let e = m
        .encode(
            &t,
            &[
                id(U1, "patient", None, Some(2)),
                id("pat-2", "patient", Some(Form::Fhir), Some(2)),
            ],
        )
        .unwrap_err();
    assert!(matches!(e, SessionError::Conflict { .. }), "{e}");
    // Two specific kinds are two records too.
    m.encode(&t, &[id("enc-1", "encounter", Some(Form::Fhir), None)])
        .unwrap();
    let before2 = m.clone();
    let e = m
        .encode(
            &t,
            &[
                id(U1, "patient", None, Some(3)),
                id("enc-1", "encounter", Some(Form::Fhir), Some(3)),
            ],
        )
        .unwrap_err();
    assert!(matches!(e, SessionError::Conflict { .. }), "{e}");
    assert_eq!(m, before2);
    assert_ne!(before, before2);
}

#[test]
fn epoch_maps_issue_and_decode_only_their_own_epoch() {
    let t = tax();
    let (e1, e2) = (Epoch::from_seed(1), Epoch::from_seed(2));
    let mut old = SessionMap::with_epoch(e1);
    let a_old = old
        .encode(&t, &[id(U1, "patient", None, None)])
        .unwrap()
        .aliases;
    assert_eq!(a_old, [format!("patient-{e1}-001")]);
    // The session's map recreated (expiry, lost store): a new epoch.
    let mut new = SessionMap::with_epoch(e2);
    let a_new = new
        .encode(&t, &[id(U2, "patient", None, None)])
        .unwrap()
        .aliases;
    assert_eq!(a_new, [format!("patient-{e2}-001")]);
    assert!(
        new.decode(&t, &a_old[0]).is_none(),
        "an old alias never reaches the new record"
    );
    assert!(new.decode(&t, "patient-001").is_none());
    let rebuilt = SessionMap::from_records(&t, new.records().to_vec()).unwrap();
    assert_eq!(rebuilt.epoch(), Some(e2));
    let mut mixed = old.records().to_vec();
    mixed.extend(new.records().iter().cloned());
    assert!(matches!(
        SessionMap::from_records(&t, mixed),
        Err(SessionError::BadRecord { .. })
    ));
}

#[test]
fn sentinel_past_the_limit_decodes_to_nothing() {
    let cfg = crate::alias::TaxonomyConfig {
        max_aliases_per_session: 3,
        ..Default::default()
    };
    let t = Taxonomy::try_from(cfg).unwrap();
    let mut m = SessionMap::new();
    let ids: Vec<IdInput> = (0..5)
        .map(|i| id(&format!("pat-{i}"), "patient", Some(Form::Fhir), None))
        .collect();
    let e = m.encode(&t, &ids).unwrap();
    assert_eq!(
        e.aliases,
        [
            "patient-001",
            "patient-002",
            "patient-003",
            "patient-000",
            "patient-000"
        ]
    );
    assert_eq!(m.len(), 3);
    assert!(m.decode(&t, "patient-000").is_none());
    // Known ids still resolve past the limit.
    assert_eq!(m.encode(&t, &ids[..1]).unwrap().aliases, ["patient-001"]);
}

#[test]
fn near_miss_repair_only_to_issued_aliases() {
    let t = tax();
    let mut m = SessionMap::new();
    m.encode(&t, &[id("task-0055101", "task", Some(Form::Fhir), None)])
        .unwrap();
    let d = m.decode(&t, "task-item-001").unwrap();
    assert!(d.repaired);
    assert_eq!(d.record.alias, "task-001");
    assert!(
        m.decode(&t, "task-item-002").is_none(),
        "task-002 was never issued"
    );
    assert!(m.decode(&t, "task-record-001").is_some());
    assert!(m.decode(&t, "task-foo-001").is_none());
    assert!(m.decode(&t, "patient-001").is_none());
    // `task-group-001` is a task group's alias, not a drift of the task's:
    // refused while no task group is issued.
    assert!(m.decode(&t, "task-group-001").is_none());
    // An issued task-group alias is exact, not a repair; the task's drift
    // still decodes to the task.
    m.encode(&t, &[id("tg-000311", "task-group", Some(Form::Fhir), None)])
        .unwrap();
    let d = m.decode(&t, "task-group-001").unwrap();
    assert!(!d.repaired);
    assert_eq!(d.record.kind, "task-group");
    assert_eq!(
        m.decode(&t, "task-group-item-001").unwrap().record.kind,
        "task-group"
    );
    assert_eq!(m.decode(&t, "task-item-001").unwrap().record.kind, "task");
}

#[test]
fn form_routing_never_poisons_the_uuid_slot() {
    let t = tax();
    let mut m = SessionMap::new();
    let e = m
        .encode(
            &t,
            &[
                id("pat-000123", "patient", Some(Form::Uuid), None),
                id("clinic-berlin-mitte", "clinic", None, None),
            ],
        )
        .unwrap();
    let p = m.decode(&t, &e.aliases[0]).unwrap().record;
    assert_eq!(p.ids.uuid, None);
    assert_eq!(p.ids.fhir_id.as_deref(), Some("pat-000123"));
    assert_eq!(
        m.decode(&t, &e.aliases[1])
            .unwrap()
            .record
            .ids
            .slug
            .as_deref(),
        Some("clinic-berlin-mitte")
    );
}

#[test]
fn rejects_bad_inputs() {
    let t = tax();
    let mut m = SessionMap::new();
    assert!(matches!(
        m.encode(&t, &[id("x-1", "nope", None, None)]),
        Err(SessionError::UnknownKind { index: 0, .. })
    ));
    assert!(matches!(
        m.encode(&t, &[id("", "patient", None, None)]),
        Err(SessionError::BadValue { index: 0, .. })
    ));
    assert!(m.is_empty());
}

#[test]
fn plan_then_apply_equals_encode_and_records_rebuild_the_map() {
    let t = tax();
    let batch = [
        id(U1, "patient", None, Some(1)),
        id("pat-000123", "patient", Some(Form::Fhir), Some(1)),
        id(U2, "visit", None, None),
    ];
    let mut a = SessionMap::new();
    let planned = a.plan(&t, &batch).unwrap();
    assert!(a.is_empty(), "plan changes nothing");
    a.apply(&planned.changes).unwrap();
    let mut b = SessionMap::new();
    assert_eq!(b.encode(&t, &batch).unwrap(), planned);
    assert_eq!(a, b);
    let rebuilt = SessionMap::from_records(&t, a.records().iter().rev().cloned()).unwrap();
    assert_eq!(rebuilt.encode_clone(&t, &batch), planned.aliases);
    let next = rebuilt
        .plan(&t, &[id("pat-9", "patient", Some(Form::Fhir), None)])
        .unwrap();
    assert_eq!(next.aliases, ["patient-002"], "counters survive a reload");
    let dup = EntityRecord {
        also: Vec::new(),
        alias: "patient-009".into(),
        kind: "patient".into(),
        ids: RealIds {
            uuid: Some(U1.into()),
            ..Default::default()
        },
    };
    assert!(matches!(
        SessionMap::from_records(&t, a.records().iter().cloned().chain([dup])),
        Err(SessionError::BadRecord { .. })
    ));
}

impl SessionMap {
    fn encode_clone(&self, t: &Taxonomy, ids: &[IdInput]) -> Vec<String> {
        self.clone().encode(t, ids).unwrap().aliases
    }
}

fn arb_value() -> impl Strategy<Value = (String, Form)> {
    prop_oneof![
        any::<u128>().prop_map(|n| {
            let h = format!("{n:032x}");
            (
                format!(
                    "{}-{}-{}-{}-{}",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                ),
                Form::Uuid,
            )
        }),
        (
            prop::sample::select(vec!["pat", "enc", "appt", "task", "tg"]),
            0u32..50
        )
            .prop_map(|(p, n)| (format!("{p}-{n:06}"), Form::Fhir)),
        "[a-z]{3,6}-[a-z]{2,4}-[0-9]{1,2}".prop_map(|s| (s, Form::Slug)),
    ]
}

proptest! {
    /// decode(encode(x)) == x: every value encoded comes back in its slot, each
    /// (kind, value) has one alias, the same value under two kinds that name
    /// different records has two, and re-encoding never mints.
    #[test]
    fn decode_inverts_encode(batches in prop::collection::vec(prop::collection::vec((arb_value(), prop::sample::select(vec!["patient", "visit", "task", "task-group", "appointment"])), 0..12), 1..5)) {
        let t = tax();
        let mut m = SessionMap::new();
        let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
        for batch in &batches {
            let ids: Vec<IdInput> = batch.iter().map(|((v, f), k)| id(v, k, Some(*f), None)).collect();
            let e = m.encode(&t, &ids).unwrap();
            for (input, alias) in ids.iter().zip(&e.aliases) {
                let d = m.decode(&t, alias).unwrap();
                prop_assert!(!d.repaired);
                prop_assert_eq!(d.record.ids.get(input.form.unwrap()), Some(input.value.as_str()));
                let want = t.kind_by_name(input.kind.as_deref().unwrap()).unwrap();
                let got = t.kind_by_name(&d.record.kind).unwrap();
                prop_assert!(t.kinds_may_meet(got, want), "{} decodes to a {} record where a {} was seen", alias, d.record.kind, input.kind.as_deref().unwrap());
                if let Some(prev) = seen.insert((input.value.clone(), input.kind.clone().unwrap()), alias.clone()) {
                    prop_assert_eq!(&prev, alias);
                }
            }
            let again = m.encode(&t, &ids).unwrap();
            prop_assert_eq!(again.aliases, e.aliases);
            prop_assert!(again.changes.is_empty());
        }
        // One alias never stands for two values.
        let mut value_of: BTreeMap<&String, &String> = BTreeMap::new();
        for ((v, _), a) in &seen {
            if let Some(prev) = value_of.insert(a, v) {
                prop_assert_eq!(prev, v, "{} stands for two values", a);
            }
        }
    }
}

/// An id as a prompt scan sends it: no hints beyond what the scan saw.
fn plain(value: &str) -> IdInput {
    IdInput {
        value: value.into(),
        kind: None,
        form: None,
        group: None,
    }
}

#[test]
fn a_prompt_passes_the_aliases_this_session_issued_unchanged() {
    let t = tax();
    let mut m = SessionMap::with_epoch(Epoch::from_seed(7));
    let issued = m
        .encode(
            &t,
            &[
                id(U1, "patient", None, None),
                id("ward-101", "ward", Some(Form::Slug), None),
            ],
        )
        .unwrap()
        .aliases;
    assert_eq!(m.len(), 2);
    // The model writes back the aliases it was given, beside a new raw id.
    let batch = [plain(&issued[0]), plain(U2), plain(&issued[1])];
    let e = m.encode_from(&t, &batch, Origin::Prompt).unwrap();
    assert_eq!(e.aliases[0], issued[0]);
    assert_eq!(e.aliases[2], issued[1]);
    assert_ne!(e.aliases[1], U2);
    assert!(t.parse_alias(&e.aliases[1]).is_some());
    assert_eq!(e.changes.len(), 1, "only the raw id is minted");
    assert_eq!(m.len(), 3);
    assert_eq!(
        m.alias_of(&issued[0]),
        None,
        "an alias never becomes a raw value"
    );
    // A repairable near-miss of an issued alias is the model's too.
    let drifted = issued[0].to_uppercase();
    let e = m.plan_from(&t, &[plain(&drifted)], Origin::Prompt).unwrap();
    if m.decode(&t, &drifted).is_some() {
        assert_eq!(e.aliases, [drifted]);
        assert!(e.changes.is_empty());
    }
}

#[test]
fn from_a_response_an_issued_alias_is_a_raw_id_like_any_other() {
    let t = tax();
    let mut m = SessionMap::with_epoch(Epoch::from_seed(7));
    let issued = m
        .encode(&t, &[id(U1, "patient", None, None)])
        .unwrap()
        .aliases;
    let e = m
        .encode_from(&t, &[plain(&issued[0])], Origin::Response)
        .unwrap();
    assert_ne!(e.aliases[0], issued[0]);
    assert_eq!(e.changes.len(), 1);
    assert_eq!(m.alias_of(&issued[0]), Some(e.aliases[0].as_str()));
}

#[test]
fn a_prompt_mints_for_alias_shaped_values_this_session_did_not_issue() {
    let t = tax();
    let mut m = SessionMap::with_epoch(Epoch::from_seed(7));
    m.encode(&t, &[id(U1, "patient", None, None)]).unwrap();
    let other = SessionMap::with_epoch(Epoch::from_seed(8))
        .encode(&t, &[id(U1, "patient", None, None)])
        .unwrap()
        .aliases;
    for foreign in [
        other[0].as_str(),
        "ward-101",
        "patient-001",
        "patient-k7q2-001",
    ] {
        if m.decode(&t, foreign).is_some() {
            continue;
        }
        let e = m.plan_from(&t, &[plain(foreign)], Origin::Prompt).unwrap();
        assert_ne!(e.aliases[0], foreign, "{foreign}");
        assert_eq!(e.changes.len(), 1, "{foreign}");
    }
}

#[test]
fn prompt_errors_name_the_callers_index() {
    let t = tax();
    let mut m = SessionMap::with_epoch(Epoch::from_seed(7));
    let issued = m
        .encode(&t, &[id(U1, "patient", None, None)])
        .unwrap()
        .aliases;
    let long = "x".repeat(t.max_id_len() + 1);
    let err = m
        .plan_from(
            &t,
            &[plain(&issued[0]), plain(U2), plain(&long)],
            Origin::Prompt,
        )
        .unwrap_err();
    assert!(
        matches!(err, SessionError::BadValue { index: 2, .. }),
        "{err}"
    );
}

// === Repair never crosses kinds ===

/// The taxonomies the project ships: the built-in kinds, and the built-ins
/// with `config/taxonomy.example.json`'s kinds.
fn shipped_taxonomies() -> Vec<(&'static str, Taxonomy)> {
    let example = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/taxonomy.example.json"
    ));
    vec![
        ("built-in", Taxonomy::default()),
        ("example", Taxonomy::from_json(example).unwrap()),
    ]
}

/// splitmix64: a fixed-seed shuffle that does not depend on proptest's RNG
/// settings, so every run walks the same orders.
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed;
    let mut next = move || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..items.len()).rev() {
        items.swap(i, (next() % (i as u64 + 1)) as usize);
    }
}

/// Every string a drift of an alias of `t` can be built from: each prefix,
/// alone and with each word (every repair infix, every prefix and every
/// segment of one) before it, after it, or between the epoch and the
/// number; numbers 1 and 2.
fn drift_probes(t: &Taxonomy, epoch: Option<Epoch>) -> Vec<String> {
    let prefixes: Vec<String> = t.kinds().map(|(_, k)| k.prefix.clone()).collect();
    let mut words: Vec<String> = t.repair_infixes().to_vec();
    for p in &prefixes {
        words.push(p.clone());
        words.extend(p.split('-').map(str::to_owned));
    }
    words.sort();
    words.dedup();
    let e = epoch.map(|e| format!("-{e}")).unwrap_or_default();
    let mut out = Vec::new();
    for p in &prefixes {
        for n in 1..=2u32 {
            out.push(format!("{p}{e}-{n:03}"));
            for w in &words {
                out.push(format!("{p}-{w}{e}-{n:03}"));
                out.push(format!("{w}-{p}{e}-{n:03}"));
                if epoch.is_some() {
                    out.push(format!("{p}{e}-{w}-{n:03}"));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Over a session's life no string decodes to two different records, and a
/// decode is always of the kind the string's own prefix names (its alias's
/// kind if it parses, else its longest prefix's). Two aliases of every kind
/// of each shipped taxonomy are minted in 12 fixed-seed random orders, in
/// maps with and without an epoch; after every mint every probe of
/// [`drift_probes`] is decoded. A probe that parses as an alias decodes only
/// to itself, issued. Before repair stayed within a kind, `task-group-…-001`
/// decoded to `task-…-001` while no task group was issued, and to the task
/// group once one was.
#[test]
fn no_string_decodes_to_two_records_over_a_sessions_life() {
    let mut decodes = 0usize;
    let mut repairs = 0usize;
    for (name, t) in shipped_taxonomies() {
        let kinds: Vec<KindId> = t.kinds().map(|(k, _)| k).collect();
        for (round, epoch) in [
            None,
            Some(Epoch::from_seed(7)),
            Some(Epoch::from_seed(0xC0FFEE)),
        ]
        .into_iter()
        .enumerate()
        {
            let probes = drift_probes(&t, epoch);
            for order in 0..4u64 {
                let seed = 0x5EED_0000 + (round as u64) * 16 + order;
                let mut mints: Vec<(KindId, u32)> =
                    kinds.iter().flat_map(|k| [(*k, 0), (*k, 1)]).collect();
                shuffle(&mut mints, seed);
                let mut m = epoch.map_or_else(SessionMap::new, SessionMap::with_epoch);
                let mut seen: BTreeMap<&str, String> = BTreeMap::new();
                for (step, (kind, n)) in mints.iter().enumerate() {
                    let value = format!("raw-{}-{n}", kind_index(&t, *kind));
                    m.encode(
                        &t,
                        &[id(&value, t.kind_name(*kind), Some(Form::Slug), None)],
                    )
                    .unwrap();
                    for probe in &probes {
                        let Some(d) = m.decode(&t, probe) else {
                            continue;
                        };
                        decodes += 1;
                        repairs += usize::from(d.repaired);
                        let ctx = || {
                            format!("{name} taxonomy, seed {seed:#x}, after mint {step}: {probe}")
                        };
                        let own = t
                            .parse_alias(probe)
                            .map(|p| p.kind)
                            .or_else(|| t.own_prefix_kind(probe).map(|(k, _)| k))
                            .unwrap_or_else(|| panic!("{} decoded with no prefix", ctx()));
                        assert_eq!(
                            d.record.kind,
                            t.kind_name(own),
                            "{} decoded across kinds",
                            ctx()
                        );
                        if t.parse_alias(probe).is_some() {
                            assert!(
                                !d.repaired && d.record.alias == *probe,
                                "{} parses: exact only",
                                ctx()
                            );
                        }
                        if let Some(before) = seen.insert(probe, d.record.alias.clone()) {
                            assert_eq!(before, d.record.alias, "{} decoded to two records", ctx());
                        }
                    }
                }
            }
        }
    }
    // The probes do exercise repair (not only exact hits).
    assert!(
        repairs > 100_000 && decodes > repairs,
        "{decodes} decodes, {repairs} repairs"
    );
}

fn kind_index(t: &Taxonomy, kind: KindId) -> usize {
    t.kinds().position(|(k, _)| k == kind).unwrap_or(usize::MAX)
}

#[test]
fn one_value_under_two_kinds_is_two_records_and_prose_names_the_oldest() {
    let t = tax();
    let mut m = SessionMap::new();
    let prose = IdInput {
        value: "enc-000042".into(),
        kind: None,
        form: None,
        group: None,
    };
    let first = m.encode(&t, std::slice::from_ref(&prose)).unwrap().aliases;
    // First seen with a kind: the record of unknown kind takes it.
    let visit = m
        .encode(&t, &[id("enc-000042", "visit", Some(Form::Fhir), None)])
        .unwrap();
    assert_eq!(visit.aliases, first);
    assert_eq!(
        visit.changes.first().map(|r| r.kind.as_str()),
        Some("visit")
    );
    // Another kind that names another record: another alias.
    let task = m
        .encode(&t, &[id("enc-000042", "task", Some(Form::Fhir), None)])
        .unwrap()
        .aliases;
    assert_ne!(task, first);
    assert_eq!(m.decode(&t, &task[0]).unwrap().record.kind, "task");
    assert_eq!(m.decode(&t, &first[0]).unwrap().record.kind, "visit");
    // Where no kind is known, the oldest record; each kind keeps its own.
    assert_eq!(m.encode(&t, &[prose]).unwrap().aliases, first);
    assert_eq!(
        m.encode(&t, &[id("enc-000042", "task", Some(Form::Fhir), None)])
            .unwrap()
            .aliases,
        task
    );
    let known: Vec<(&str, &str)> = m.known_values().collect();
    assert_eq!(
        known,
        [
            ("enc-000042", first[0].as_str()),
            ("enc-000042", task[0].as_str())
        ]
    );
    // A reload gives the same map.
    let rebuilt = SessionMap::from_records(&t, m.records().to_vec()).unwrap();
    assert_eq!(rebuilt, m);
}
