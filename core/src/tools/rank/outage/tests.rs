use super::*;
use crate::tools::phase::RECOVERY_NEW_TOOLS;
use proptest::prelude::*;

fn c(name: &str, reason: Reason) -> Candidate {
    Candidate {
        name: name.into(),
        reason,
        score: 0.5,
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

fn names(v: &[Candidate]) -> Vec<&str> {
    v.iter().map(|c| c.name.as_str()).collect()
}

#[test]
fn planner_takes_tool_choice_then_floors_then_hits() {
    let registry = set(&["a", "b", "c", "d", "f"]);
    let floors = [c("f", Reason::FloorResearch)];
    let hits = [
        c("a", Reason::Rag),
        c("f", Reason::Rag),
        c("b", Reason::Rag),
        c("zz", Reason::Rag),
    ];
    let out = bounded(&SetInputs {
        phase: Phase::Planner,
        registry: &registry,
        mutating: &BTreeSet::new(),
        tool_choice: Some("d"),
        floors: &floors,
        hits: Some(&hits),
        prior: &["c".into()],
    });
    assert_eq!(names(&out), ["d", "f", "a", "b"]);
    assert_eq!(out[0].reason, Reason::ToolChoice);
    assert_eq!(out[1].reason, Reason::FloorResearch);
}

#[test]
fn outage_and_empty_success_both_answer_floors_and_the_prior_set() {
    let registry = set(&["a", "b", "p", "q"]);
    let floors = [c("a", Reason::FloorMultiEntity)];
    let prior = vec!["p".to_owned(), "q".to_owned(), "gone".to_owned()];
    let base = SetInputs {
        phase: Phase::Planner,
        registry: &registry,
        mutating: &BTreeSet::new(),
        tool_choice: None,
        floors: &floors,
        hits: None,
        prior: &prior,
    };
    let outage = bounded(&base);
    let empty = bounded(&SetInputs {
        hits: Some(&[]),
        ..base
    });
    assert_eq!(outage, empty);
    assert_eq!(names(&outage), ["a", "p", "q"]);
    assert_eq!(outage[1].reason, Reason::PriorSet);
}

#[test]
fn recovery_keeps_the_prior_set_and_adds_at_most_three() {
    let registry: BTreeSet<String> = (0..20).map(|i| format!("t{i}")).collect();
    let prior: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    let hits: Vec<Candidate> = (3..15).map(|i| c(&format!("t{i}"), Reason::Rag)).collect();
    let out = bounded(&SetInputs {
        phase: Phase::Recovery,
        registry: &registry,
        mutating: &BTreeSet::new(),
        tool_choice: None,
        floors: &[],
        hits: Some(&hits),
        prior: &prior,
    });
    assert_eq!(
        names(&out),
        ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"]
    );
}

#[test]
fn formatter_drops_mutating_tools_but_keeps_a_forced_one() {
    let registry = set(&["read", "write", "forced"]);
    let mutating = set(&["write", "forced"]);
    let hits = [c("write", Reason::Rag), c("read", Reason::Rag)];
    let out = bounded(&SetInputs {
        phase: Phase::Formatter,
        registry: &registry,
        mutating: &mutating,
        tool_choice: Some("forced"),
        floors: &[],
        hits: Some(&hits),
        prior: &[],
    });
    assert_eq!(names(&out), ["forced", "read"]);
}

#[test]
fn tool_input_surfaces_exactly_one() {
    let registry = set(&["a", "b"]);
    let hits = [c("a", Reason::Rag), c("b", Reason::Rag)];
    let inputs = SetInputs {
        phase: Phase::ToolInput,
        registry: &registry,
        mutating: &BTreeSet::new(),
        tool_choice: Some("b"),
        floors: &[],
        hits: Some(&hits),
        prior: &[],
    };
    assert_eq!(names(&bounded(&inputs)), ["b"]);
    assert_eq!(
        names(&bounded(&SetInputs {
            tool_choice: None,
            ..inputs
        })),
        ["a"]
    );
}

fn phase() -> impl Strategy<Value = Phase> {
    prop::sample::select(Phase::ALL.to_vec())
}

fn name() -> impl Strategy<Value = String> {
    (0u8..40).prop_map(|i| format!("t{i}"))
}

fn reason() -> impl Strategy<Value = Reason> {
    prop::sample::select(vec![
        Reason::Rag,
        Reason::FloorMultiEntity,
        Reason::FloorResearch,
        Reason::FloorPatientResolve,
    ])
}

fn cands(max: usize) -> impl Strategy<Value = Vec<Candidate>> {
    prop::collection::vec(
        (name(), reason()).prop_map(|(n, r)| Candidate {
            name: n,
            reason: r,
            score: 0.0,
        }),
        0..max,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever goes in — a registry of 200 tools, 60 floors, 200 hits, a
    /// prior set of 100 — nothing comes out beyond the budget, twice, or from
    /// outside the registry.
    #[test]
    fn never_exceeds_the_budget(
        phase in phase(),
        registry in prop::collection::btree_set(name(), 0..40),
        mutating in prop::collection::btree_set(name(), 0..20),
        tool_choice in prop::option::of(name()),
        floors in cands(60),
        hits in prop::option::of(cands(200)),
        prior in prop::collection::vec(name(), 0..100),
    ) {
        let inputs = SetInputs {
            phase,
            registry: &registry,
            mutating: &mutating,
            tool_choice: tool_choice.as_deref(),
            floors: &floors,
            hits: hits.as_deref(),
            prior: &prior,
        };
        let out = bounded(&inputs);
        prop_assert!(out.len() <= phase.budget().max);
        let unique: BTreeSet<&str> = out.iter().map(|c| c.name.as_str()).collect();
        prop_assert_eq!(unique.len(), out.len());
        prop_assert!(out.iter().all(|c| registry.contains(&c.name)));
        if let Some(tc) = tool_choice.as_ref().filter(|tc| registry.contains(*tc)) {
            prop_assert_eq!(&out[0].name, tc);
        }
        if phase == Phase::Formatter {
            prop_assert!(out.iter().all(|c| c.reason == Reason::ToolChoice || !mutating.contains(&c.name)));
        }
        if phase == Phase::Recovery {
            let new = out.iter().filter(|c| !prior.contains(&c.name)).count();
            prop_assert!(new <= RECOVERY_NEW_TOOLS);
        }
        // Every surfaced tool comes from one of the allowed sources.
        let allowed: BTreeSet<&str> = floors.iter().chain(hits.iter().flatten()).map(|c| c.name.as_str())
            .chain(prior.iter().map(String::as_str)).chain(tool_choice.as_deref()).collect();
        prop_assert!(out.iter().all(|c| allowed.contains(c.name.as_str())));
    }
}
