use super::*;
use crate::proto::tools::ToolDescriptor;
use crate::tools::rank::config::RankSettings;
use crate::tools::rank::fuse::{compare, Scored};
use crate::tools::rank::meta::{NameMapping, Overlay};
use crate::tools::rank::stages::BudgetSettings;
use proptest::prelude::*;
use serde_json::Value;

const TOOLS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/catalog/tools.json"
));
const DEV: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/catalog/queries.dev.jsonl"
));

fn config() -> RankConfig {
    RankConfig::try_new(Default::default()).unwrap()
}

/// The catalog's business tools as a request would carry them, plus the
/// overlay (which also knows the two control-plane tools).
fn catalog() -> (Vec<ToolDescriptor>, Overlay) {
    let map = NameMapping::default();
    let all: Vec<Value> = serde_json::from_str(TOOLS).unwrap();
    let tools = all
        .iter()
        .filter(|t| t["plane"] == "business")
        .map(|t| ToolDescriptor {
            name: map.to_name(t["id"].as_str().unwrap()),
            description: t["description"].as_str().unwrap().into(),
            parameters: String::new(),
        })
        .collect();
    (tools, Overlay::from_json(TOOLS.as_bytes()).unwrap())
}

fn registry() -> Registry {
    let (tools, overlay) = catalog();
    Registry::build(&tools, Some(&overlay), &config())
}

/// Lexical-only retrieval (an empty cosine list is a successful retrieval).
fn lexical_turn(text: &str, phase: Phase) -> Turn<'_> {
    Turn {
        text,
        phase,
        prior: &[],
        tool_choice: None,
        cosine: Some(&[]),
    }
}

fn names(r: &Resolution) -> Vec<&str> {
    r.candidates.iter().map(|c| c.name.as_str()).collect()
}

#[test]
fn booking_turns_surface_the_booking_tool() {
    let reg = registry();
    let cfg = config();
    for text in [
        "Book an appointment for Mrs. Krause on Friday at 9.",
        "Termin buchen für Herrn Becker",
        "Prendre un rendez-vous pour Mme Dubois",
    ] {
        let r = resolve(&reg, &cfg, &lexical_turn(text, Phase::Planner));
        assert!(
            names(&r).contains(&"appointment__manage"),
            "{text}: {:?}",
            names(&r)
        );
        assert!(r.candidates.len() <= 12);
    }
}

#[test]
fn patient_searches_surface_no_research_tool() {
    let reg = registry();
    let cfg = config();
    for text in [
        "Search for the patient Hannelore Krause, born 1941.",
        "Kannst du die Patientin Weiß suchen?",
        "Rechercher la patiente Bernard, Camille",
    ] {
        let r = resolve(&reg, &cfg, &lexical_turn(text, Phase::Planner));
        assert!(
            !names(&r).iter().any(|n| n.starts_with("research__")),
            "{text}: {:?}",
            names(&r)
        );
        assert!(names(&r).contains(&"patient__search__smart"), "{text}");
    }
}

#[test]
fn research_phrasing_pins_the_research_tools() {
    let r = resolve(
        &registry(),
        &config(),
        &lexical_turn("Find literature on lactic acidosis in CKD", Phase::Planner),
    );
    let research: Vec<&Candidate> = r
        .candidates
        .iter()
        .filter(|c| c.name.starts_with("research__"))
        .collect();
    assert_eq!(research.len(), 4);
    assert!(research.iter().all(|c| c.reason == Reason::FloorResearch));
    assert!(r.trace.domains.contains(&"research".to_owned()));
}

#[test]
fn a_turn_naming_a_guideline_body_by_its_acronym_pins_the_research_tools() {
    // No research phrasing: the guideline search lists `HAS` among its own
    // keywords, and the turn writes it as an acronym.
    let reg = registry();
    let named = resolve(
        &reg,
        &config(),
        &lexical_turn("Que dit la HAS sur l'obésité de l'enfant ?", Phase::Planner),
    );
    assert!(names(&named).contains(&"research__guideline__search"));
    let fired = named
        .trace
        .floors
        .iter()
        .find(|f| f.reason == Reason::FloorResearch);
    assert_eq!(
        fired.map(|f| f.signals.clone()),
        Some(vec![crate::tools::rank::floors::NAMED_BY_ACRONYM.to_owned()])
    );
    // Lowercase "has" is the English verb: nothing fires, no research tool.
    let verb = resolve(
        &reg,
        &config(),
        &lexical_turn("Which appointments has she got this week?", Phase::Planner),
    );
    assert!(verb
        .trace
        .floors
        .iter()
        .all(|f| f.reason != Reason::FloorResearch));
    assert!(names(&verb).iter().all(|n| !n.starts_with("research__")));
}

#[test]
fn composite_turns_pin_the_workflows_without_taking_rag_slots() {
    let r = resolve(
        &registry(),
        &config(),
        &lexical_turn("Book an appointment and write a note.", Phase::Planner),
    );
    let floored: Vec<&str> = r
        .candidates
        .iter()
        .filter(|c| c.reason == Reason::FloorMultiEntity)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        floored,
        [
            "intake__composite",
            "admission__composite",
            "discharge__composite"
        ]
    );
    assert!(names(&r).contains(&"appointment__manage") && names(&r).contains(&"note__write"));
    assert!(r.candidates.len() <= 12);
}

#[test]
fn a_tool_needing_a_patient_brings_exactly_one_resolver() {
    let reg = registry();
    // Cosine puts only patient-scoped tools on top; no resolver among them.
    let cosine: Vec<(String, f32)> = vec![
        ("vitals__list".into(), 0.95),
        ("vitals__record".into(), 0.94),
        ("ui__vitals__chart".into(), 0.93),
    ];
    let turn = Turn {
        text: "blood pressure trend",
        phase: Phase::AgentCall,
        prior: &[],
        tool_choice: None,
        cosine: Some(&cosine),
    };
    let r = resolve(&reg, &config(), &turn);
    assert_eq!(r.candidates[0].name, "patient__search__smart");
    assert_eq!(r.candidates[0].reason, Reason::FloorPatientResolve);
    assert_eq!(
        r.candidates
            .iter()
            .filter(|c| c.reason == Reason::FloorPatientResolve)
            .count(),
        1
    );
    assert!(r.candidates.len() <= 8);
    let pr = r.trace.patient_resolve.unwrap();
    assert_eq!(pr.added, "patient__search__smart");
}

#[test]
fn a_turn_naming_a_person_brings_the_name_resolver() {
    let reg = registry();
    // Retrieval surfaces an update and the identifier search, no tool that
    // needs a patient id: the person named in the turn still needs the
    // resolver that takes a name.
    let cosine: Vec<(String, f32)> = vec![
        ("patient__update".into(), 0.95),
        ("patient__search__exact".into(), 0.94),
        ("inbox__list".into(), 0.93),
    ];
    let turn = |text| Turn {
        text,
        phase: Phase::Planner,
        prior: &[],
        tool_choice: None,
        cosine: Some(&cosine),
    };
    let r = resolve(
        &reg,
        &config(),
        &turn("Frau Renate Kühn hat eine neue Handynummer"),
    );
    assert_eq!(r.candidates[0].name, "patient__search__smart");
    assert_eq!(r.candidates[0].reason, Reason::FloorPatientResolve);
    assert_eq!(r.trace.patient_resolve.unwrap().needed_by, NAMED_PERSON);
    // The same turn without a name: no floor.
    let r = resolve(&reg, &config(), &turn("die Handynummer ist neu"));
    assert!(r.trace.patient_resolve.is_none(), "{:?}", names(&r));
    // Switched off, the name alone brings nothing.
    let mut s = config().settings().clone();
    s.floors.patient_resolve.on_named_person = false;
    let off = RankConfig::try_new(s).unwrap();
    let r = resolve(
        &reg,
        &off,
        &turn("Frau Renate Kühn hat eine neue Handynummer"),
    );
    assert!(r.trace.patient_resolve.is_none(), "{:?}", names(&r));
}

#[test]
fn tool_input_surfaces_only_the_forced_tool() {
    let turn = Turn {
        text: "Book an appointment and write a note.",
        phase: Phase::ToolInput,
        prior: &[],
        tool_choice: Some("note__write"),
        cosine: Some(&[]),
    };
    let r = resolve(&registry(), &config(), &turn);
    assert_eq!(
        r.candidates,
        [Candidate {
            name: "note__write".into(),
            reason: Reason::ToolChoice,
            score: 0.0
        }]
    );
}

#[test]
fn formatter_turns_see_no_mutating_tool() {
    let reg = registry();
    let r = resolve(
        &reg,
        &config(),
        &lexical_turn(
            "Book an appointment and prescribe metformin 500 mg",
            Phase::Formatter,
        ),
    );
    assert!(!r.candidates.is_empty());
    assert!(
        r.candidates
            .iter()
            .all(|c| !reg.by_name(&c.name).unwrap().mutates()),
        "{:?}",
        names(&r)
    );
}

#[test]
fn outage_answers_floors_and_prior_set_only() {
    let prior: Vec<String> = vec!["vitals__list".into(), "patient__search__smart".into()];
    let turn = Turn {
        text: "Find literature on metformin",
        phase: Phase::Planner,
        prior: &prior,
        tool_choice: None,
        cosine: None,
    };
    let r = resolve(&registry(), &config(), &turn);
    assert_eq!(r.source, Source::ControlFallback);
    let reasons: BTreeSet<Reason> = r.candidates.iter().map(|c| c.reason).collect();
    assert_eq!(
        reasons,
        [Reason::FloorResearch, Reason::PriorSet]
            .into_iter()
            .collect()
    );
    assert_eq!(r.candidates.len(), 6);
    assert_eq!(r.to_response().tools.len(), 6);
}

#[test]
fn recovery_adds_at_most_three_to_the_prior_set() {
    let prior: Vec<String> = ["vitals__list", "patient__search__smart", "note__read"]
        .map(String::from)
        .to_vec();
    let turn = Turn {
        text: "Book an appointment",
        phase: Phase::Recovery,
        prior: &prior,
        tool_choice: None,
        cosine: Some(&[]),
    };
    let r = resolve(&registry(), &config(), &turn);
    assert_eq!(
        &names(&r)[..3],
        ["vitals__list", "patient__search__smart", "note__read"]
    );
    assert_eq!(r.candidates.len(), 6);
    assert!(names(&r).contains(&"appointment__manage"));
}

#[test]
fn control_plane_tools_are_never_candidates() {
    let (mut tools, overlay) = catalog();
    tools.push(ToolDescriptor {
        name: "tool__search".into(),
        description: "Search the tool registry.".into(),
        parameters: String::new(),
    });
    let reg = Registry::build(&tools, Some(&overlay), &config());
    let r = resolve(
        &reg,
        &config(),
        &lexical_turn("search the tool registry for a tool", Phase::Planner),
    );
    assert!(!names(&r).contains(&"tool__search"));
    assert!(search(&reg, &config(), "tool search", &[], 200)
        .iter()
        .all(|c| c.name != "tool__search"));
}

#[test]
fn per_subtask_is_bounded_and_keeps_its_best() {
    let reg = registry();
    let cfg = config();
    let s = per_subtask(&reg, &cfg, "order a CRP", &[]);
    assert!(!s.is_empty() && s.len() <= cfg.settings().clauses.per_clause_k);
    assert_eq!(s[0].name, "lab__order");
}

#[test]
fn each_clause_brings_its_best_tool_under_the_budget() {
    let reg = registry();
    let mut s = RankSettings::default();
    s.clauses.min_words = 2;
    let cfg = RankConfig::try_new(s.clone()).unwrap();
    s.clauses.enabled = false;
    let off = RankConfig::try_new(s).unwrap();
    let text =
        "Record BP 160/95 mmHg and pulse 102 bpm, then create a task for the doctor to review.";
    // The default joins a piece of fewer than four words to the one before.
    assert_eq!(
        config().settings().clauses.split(text),
        [
            "Record BP 160/95 mmHg and pulse 102 bpm",
            "create a task for the doctor to review"
        ]
    );
    let parts = cfg.settings().clauses.split(text);
    assert_eq!(parts.len(), 3);
    let clauses: Vec<Clause<'_>> = parts
        .iter()
        .map(|t| Clause {
            text: t,
            cosine: &[],
        })
        .collect();
    let turn = lexical_turn(text, Phase::Planner);
    let r = resolve_clauses(&reg, &cfg, &turn, &clauses);
    assert!(
        names(&r).contains(&"vitals__record") && names(&r).contains(&"task__manage"),
        "{:?}",
        names(&r)
    );
    assert!(r.candidates.len() <= 12);
    assert_eq!(r.trace.clauses, 3);
    // One clause, or clause retrieval off, is the plain resolution.
    let one = [Clause { text, cosine: &[] }];
    assert_eq!(
        resolve_clauses(&reg, &cfg, &turn, &one),
        resolve(&reg, &cfg, &turn)
    );
    assert_eq!(
        resolve_clauses(&reg, &off, &turn, &clauses),
        resolve(&reg, &off, &turn)
    );
    assert_ne!(
        resolve_clauses(&reg, &cfg, &turn, &clauses),
        resolve(&reg, &cfg, &turn)
    );
}

#[test]
fn the_confidence_budget_keeps_hits_within_the_margin_and_the_minimum() {
    let c = |n: &str, score: f32| Candidate {
        name: n.into(),
        reason: Reason::Rag,
        score,
    };
    let hits: Vec<Candidate> = [0.95, 0.90, 0.88, 0.86, 0.85, 0.84, 0.83, 0.70, 0.60]
        .iter()
        .enumerate()
        .map(|(i, s)| c(&format!("t{i}"), *s))
        .collect();
    let keep = |margin: Option<f32>, min: usize| {
        BudgetSettings {
            margin,
            beyond_minimum: 0,
            ..BudgetSettings::default()
        }
        .keep(&hits, min)
    };
    assert_eq!(keep(None, 6), 9, "no margin: every hit");
    assert_eq!(
        keep(Some(0.02), 6),
        6,
        "a clear top still fills the minimum"
    );
    assert_eq!(keep(Some(0.2), 6), 7);
    assert_eq!(keep(Some(1.0), 6), 9);
    assert_eq!(keep(Some(0.0), 12), 9, "never more than there are");
    assert_eq!(BudgetSettings::default().keep(&[], 6), 0);
}

#[test]
fn the_confidence_budget_keeps_hits_beyond_the_phase_minimum() {
    let hits: Vec<Candidate> = [
        0.95, 0.80, 0.79, 0.78, 0.77, 0.76, 0.75, 0.74, 0.73, 0.72, 0.71,
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| Candidate {
        name: format!("t{i}"),
        reason: Reason::Rag,
        score: *s,
    })
    .collect();
    let budget = |beyond_minimum: usize| BudgetSettings {
        margin: Some(0.02),
        beyond_minimum,
        ..BudgetSettings::default()
    };
    // A clear top hit: the margin alone keeps one, the minimum six.
    assert_eq!(budget(0).keep(&hits, 6), 6);
    assert_eq!(budget(3).keep(&hits, 6), 9, "three beyond the minimum");
    assert_eq!(budget(3).keep(&hits, 3), 6, "relative to the phase minimum");
    assert_eq!(budget(9).keep(&hits, 6), 11, "never more than there are");
    // Flat scores: the margin keeps more than the floor asks for.
    let flat: Vec<Candidate> = hits
        .iter()
        .map(|c| Candidate {
            score: 0.9,
            ..c.clone()
        })
        .collect();
    assert_eq!(budget(3).keep(&flat, 6), 11);
    // The default keeps two beyond the minimum; without a margin, every hit.
    assert_eq!(BudgetSettings::default().beyond_minimum, 2);
    let none = BudgetSettings {
        margin: None,
        ..BudgetSettings::default()
    };
    assert_eq!(none.keep(&hits, 6), 11);
}

/// Every tool of `reg` with a cosine, from `top` down by 0.001 a tool, in
/// registry order.
fn falling_cosines(reg: &Registry, top: f32) -> Vec<(String, f32)> {
    reg.tools()
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), top - i as f32 * 0.001))
        .collect()
}

#[test]
fn the_confidence_budget_cuts_only_turns_with_cosines() {
    let reg = registry();
    let mut s = RankSettings::default();
    s.pipeline.budget.margin = Some(0.0);
    s.pipeline.budget.beyond_minimum = 0;
    s.pipeline.budget.embedder_top = 0;
    let tight = RankConfig::try_new(s).unwrap();
    let text = "Show the vital signs";
    let cos = falling_cosines(&reg, 0.9);
    let with = Turn {
        cosine: Some(&cos),
        ..lexical_turn(text, Phase::Planner)
    };
    let r = resolve(&reg, &tight, &with);
    assert_eq!(r.trace.confident, Some(6));
    assert!(
        r.candidates.len() <= 6 + 1,
        "the minimum, plus a resolver at most: {:?}",
        names(&r)
    );
    let lexical = resolve(&reg, &tight, &lexical_turn(text, Phase::Planner));
    assert_eq!(lexical.trace.confident, None);
    assert_eq!(
        lexical,
        resolve(&reg, &config(), &lexical_turn(text, Phase::Planner))
    );
}

#[test]
fn lexical_only_retrieval_keeps_most_gold_on_the_dev_turns() {
    // A floor for the lexical half alone (no embedder): full-gold recall within
    // the surfaced set over the 120 dev turns.
    let reg = registry();
    let cfg = config();
    let map = NameMapping::default();
    let (mut ok, mut n) = (0, 0);
    for line in DEV.lines() {
        let q: Value = serde_json::from_str(line).unwrap();
        let r = resolve(
            &reg,
            &cfg,
            &lexical_turn(q["query"].as_str().unwrap(), Phase::Planner),
        );
        let got = names(&r);
        n += 1;
        ok += usize::from(
            q["gold"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| got.contains(&map.to_name(g.as_str().unwrap()).as_str())),
        );
    }
    assert!(
        ok as f64 / n as f64 >= 0.9,
        "lexical-only full-gold recall {ok}/{n}"
    );
}

#[test]
fn a_tools_score_does_not_depend_on_the_other_tools_cosines() {
    let reg = registry();
    let cfg = config();
    let text = "Show the lab results";
    let alone = vec![("lab__results__list".to_owned(), 0.8)];
    let mut crowded = alone.clone();
    crowded.extend([
        ("vitals__list".to_owned(), 0.99),
        ("note__read".to_owned(), 0.2),
    ]);
    let score = |cos: &[(String, f32)]| {
        fused_scores(&reg, &cfg, text, cos)
            .scored
            .into_iter()
            .find(|s| reg.tool(s.index).unwrap().name == "lab__results__list")
            .unwrap()
            .fused
    };
    assert_eq!(score(&alone), score(&crowded));
}

/// What ranking did before it read postings only: score every business tool
/// one by one, sort them all (stable, from registry order), keep the first `m`.
fn best_by_full_sort(
    reg: &Registry,
    cfg: &RankConfig,
    text: &str,
    cos: &[(String, f32)],
    m: usize,
) -> Vec<(usize, u32, u32)> {
    let mut by_name: BTreeMap<&str, f32> = BTreeMap::new();
    for (name, c) in cos {
        let e = by_name.entry(name.as_str()).or_insert(*c);
        if c.total_cmp(e).is_gt() {
            *e = *c;
        }
    }
    let lexical = reg.lexical();
    let query = lexical.query(text);
    let s = cfg.settings();
    let mut all: Vec<ToolScore> = reg
        .tools()
        .iter()
        .enumerate()
        .filter(|(_, t)| t.is_business())
        .map(|(index, t)| {
            let lex = lexical.score(index, &query);
            ToolScore {
                index,
                fused: s
                    .fusion
                    .fuse(by_name.get(t.name.as_str()).copied(), lex, &s.lexical),
                coverage: lex.coverage,
                searched: by_name.contains_key(t.name.as_str()),
            }
        })
        .collect();
    let id_of = |i: usize| reg.tool(i).map_or("", |t| t.id.as_str());
    all.sort_by(|a, b| {
        compare(
            &Scored {
                id: id_of(a.index),
                score: a.fused,
                coverage: a.coverage,
            },
            &Scored {
                id: id_of(b.index),
                score: b.fused,
                coverage: b.coverage,
            },
        )
    });
    all.truncate(m);
    all.into_iter()
        .map(|s| (s.index, s.fused.to_bits(), s.coverage.to_bits()))
        .collect()
}

#[test]
fn ranking_from_postings_equals_sorting_every_tool() {
    let reg = registry();
    let cfg = config();
    let names: Vec<String> = reg.tools().iter().map(|t| t.name.clone()).collect();
    let texts = [
        "Show the lab results",
        "Book an appointment and write a note.",
        "Zeig mir den letzten Blutdruck",
        "",
        "qqq",
    ];
    for (k, text) in texts.iter().enumerate() {
        // No cosines, a few, some negative, every tool (with ties).
        let few: Vec<(String, f32)> = names
            .iter()
            .step_by(7)
            .enumerate()
            .map(|(i, n)| (n.clone(), 0.9 - i as f32 * 0.2))
            .collect();
        let every: Vec<(String, f32)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), 0.7 + (i % 3) as f32 * 0.05))
            .collect();
        for cos in [Vec::new(), few, every] {
            let scores = fused_scores(&reg, &cfg, text, &cos);
            for m in [0, 1, 3, 10, 40, usize::MAX] {
                let got: Vec<(usize, u32, u32)> = best(&reg, &scores, m)
                    .into_iter()
                    .map(|s| (s.index, s.fused.to_bits(), s.coverage.to_bits()))
                    .collect();
                assert_eq!(
                    got,
                    best_by_full_sort(&reg, &cfg, text, &cos, m),
                    "text {k}, {} cosines, m {m}",
                    cos.len()
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Shuffling the request's tools and the vector hits changes nothing.
    #[test]
    fn resolution_does_not_depend_on_input_order(
        seed in any::<u64>(),
        turn in prop::sample::select(vec![
            "Book an appointment and write a note.",
            "Search for the patient Becker",
            "Zeig mir den letzten Blutdruck von Anna Schmidt.",
            "Prescrire une NFS et une CRP",
        ]),
        phase in prop::sample::select(Phase::ALL.to_vec()),
    ) {
        let (tools, overlay) = catalog();
        let cfg = config();
        // Cosines with many exact ties, to exercise the tie-breaks.
        let cosine: Vec<(String, f32)> = tools.iter().enumerate()
            .map(|(i, t)| (t.name.clone(), 0.7 + ((i as u64 * 7 + seed) % 5) as f32 * 0.05)).collect();
        let mut rng = seed;
        let mut shuffle = |len: usize| -> Vec<usize> {
            let mut idx: Vec<usize> = (0..len).collect();
            for i in (1..len).rev() {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                idx.swap(i, (rng >> 33) as usize % (i + 1));
            }
            idx
        };
        let t2: Vec<ToolDescriptor> = shuffle(tools.len()).into_iter().map(|i| tools[i].clone()).collect();
        let c2: Vec<(String, f32)> = shuffle(cosine.len()).into_iter().map(|i| cosine[i].clone()).collect();
        let a = resolve(&Registry::build(&tools, Some(&overlay), &cfg), &cfg,
            &Turn { text: turn, phase, prior: &[], tool_choice: None, cosine: Some(&cosine) });
        let b = resolve(&Registry::build(&t2, Some(&overlay), &cfg), &cfg,
            &Turn { text: turn, phase, prior: &[], tool_choice: None, cosine: Some(&c2) });
        prop_assert_eq!(a, b);
    }
}

#[test]
fn a_turn_without_text_keeps_the_prior_set_or_the_read_only_minimum() {
    let (registry, config) = (registry(), config());
    for text in ["", "  \n"] {
        // No prior set: the phase minimum, none of them changes a record.
        let none = resolve(
            &registry,
            &config,
            &Turn {
                text,
                phase: Phase::Planner,
                prior: &[],
                tool_choice: None,
                cosine: Some(&[]),
            },
        );
        assert_eq!(none.source, Source::NoTurn);
        assert_eq!(none.candidates.len(), Phase::Planner.budget().min);
        assert!(none
            .candidates
            .iter()
            .all(|c| c.reason == Reason::NoTurn && !registry.mutating().contains(&c.name)));
        // A prior set: exactly it, whatever retrieval would say.
        let prior: Vec<String> = registry
            .tools()
            .iter()
            .rev()
            .take(4)
            .map(|t| t.name.clone())
            .collect();
        let kept = resolve(
            &registry,
            &config,
            &Turn {
                text,
                phase: Phase::Planner,
                prior: &prior,
                tool_choice: None,
                cosine: None,
            },
        );
        let names: Vec<&str> = kept.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, prior.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(kept.candidates.iter().all(|c| c.reason == Reason::PriorSet));
    }
}

/// The catalog's registry with settings edited from the defaults.
fn registry_with(edit: impl FnOnce(&mut RankSettings)) -> Registry {
    let (tools, overlay) = catalog();
    let mut settings = RankSettings::default();
    edit(&mut settings);
    Registry::build(
        &tools,
        Some(&overlay),
        &RankConfig::try_new(settings).unwrap(),
    )
}

/// A tool's raw lexical score for a text.
fn lexical_raw(reg: &Registry, name: &str, text: &str) -> f32 {
    let i = reg.index_of_name(name).unwrap();
    reg.lexical().score(i, &reg.lexical().query(text)).raw
}

#[test]
fn a_siblings_keywords_name_the_object_for_the_whole_group() {
    let with = registry();
    let without = registry_with(|s| s.lexical.siblings_weight = 0.0);
    let text = "demande d'avis cardiologique";
    let score = |reg: &Registry, name: &str| lexical_raw(reg, name, text);
    // Only the referral list is written with "demandes d'avis"; the referral
    // a clinician asks to create is the same object.
    assert_eq!(score(&without, "referral__create"), 0.0);
    assert!(score(&with, "referral__create") > 0.0);
    // What a tool borrows weighs less than its own words.
    assert!(score(&with, "referral__list") > score(&with, "referral__create"));
    assert_eq!(
        score(&with, "referral__list"),
        score(&without, "referral__list")
    );
    // A tool of another group borrows nothing.
    assert_eq!(
        score(&with, "appointment__manage"),
        score(&without, "appointment__manage")
    );
    // Nor does a tool of the group in another category: the calendar view
    // (`ui`) lends its `vue semaine` to no appointment tool.
    let week = |reg: &Registry| lexical_raw(reg, "appointment__list", "vue semaine");
    assert_eq!(week(&with), week(&without));
}

#[test]
fn a_lab_analyte_in_shorthand_reads_as_lab_work() {
    let with = registry();
    let without = registry_with(|s| s.lexical.shorthand.clear());
    let text = "send the pleural fluid for LDH, protein, cytology and culture";
    let score = |reg: &Registry, name: &str| lexical_raw(reg, name, text);
    // No lab tool is written with "LDH"; it is a lab analyte.
    assert_eq!(score(&without, "lab__order"), 0.0);
    assert!(score(&with, "lab__order") > 0.0);
    assert_eq!(
        score(&with, "message__send"),
        score(&without, "message__send")
    );
}

#[test]
fn dedup_is_off_by_default_and_demotes_same_axis_siblings_when_on() {
    let text = "latest lab results, lab values trend and the full lab report";
    let reg = registry();
    let turn = lexical_turn(text, Phase::Planner);
    let off = resolve(&reg, &config(), &turn);
    assert!(off.trace.deduped.is_empty(), "{:?}", off.trace.deduped);
    let mut settings = RankSettings::default();
    settings.pipeline.dedup.enabled = true;
    let on = resolve(&reg, &RankConfig::try_new(settings).unwrap(), &turn);
    assert!(
        !on.trace.deduped.is_empty(),
        "siblings of one group and axis"
    );
    let key = |name: &str| {
        let meta = reg.by_name(name).and_then(|t| t.meta.as_ref()).unwrap();
        (meta.semantic_group.clone().unwrap(), meta.mutates())
    };
    for demoted in &on.trace.deduped {
        let k = key(demoted);
        assert!(
            on.candidates
                .iter()
                .any(|c| !on.trace.deduped.contains(&c.name) && key(&c.name) == k),
            "{demoted} was demoted with no kept sibling of {k:?}"
        );
    }
}

#[test]
fn the_embedders_best_tools_stay_past_the_budgets_cut() {
    let reg = registry();
    let map = NameMapping::default();
    let tight = |embedder_top: usize| {
        let mut s = RankSettings::default();
        s.pipeline.budget.margin = Some(0.0);
        s.pipeline.budget.beyond_minimum = 0;
        s.pipeline.budget.embedder_top = embedder_top;
        RankConfig::try_new(s).unwrap()
    };
    // The lexical side meets the vitals tools; the embedder prefers a
    // payment and, above it, a literature search.
    let payment = map.to_name("billing.payment.record");
    let literature = map.to_name("research.pubmed.search");
    let cos: Vec<(String, f32)> = reg
        .tools()
        .iter()
        .map(|t| {
            let c = if t.name == literature {
                0.90
            } else if t.name == payment {
                0.86
            } else {
                0.80
            };
            (t.name.clone(), c)
        })
        .collect();
    let turn = Turn {
        cosine: Some(&cos),
        ..lexical_turn("Show the vital signs", Phase::Planner)
    };
    let without = resolve(&reg, &tight(0), &turn);
    assert!(
        !names(&without).contains(&payment.as_str()),
        "{:?}",
        names(&without)
    );
    let with = resolve(&reg, &tight(1), &turn);
    let with_names = names(&with);
    assert!(with_names.contains(&payment.as_str()), "{with_names:?}");
    assert!(
        !with_names.contains(&literature.as_str()),
        "a floor-only domain never enters by its cosine: {with_names:?}"
    );
    // The rest of the set is the cut's, in order; the kept tool comes after it.
    assert_eq!(with_names.len(), names(&without).len() + 1);
    assert_eq!(with_names.last(), Some(&payment.as_str()));
    assert!(with.candidates.len() <= Phase::Planner.budget().max);
}

proptest! {
    /// The one-pass selection equals sorting every eligible hit by
    /// similarity (then name), each name once at its best, and taking the first.
    #[test]
    fn the_embedders_best_are_the_first_of_a_full_sort(
        picks in proptest::collection::vec((0usize..120, 0u8..20), 0..60),
        n in 0usize..5,
    ) {
        let reg = registry();
        let mut s = RankSettings::default();
        s.pipeline.budget.embedder_top = n;
        let cfg = RankConfig::try_new(s).unwrap();
        let names: Vec<String> = reg.tools().iter().map(|t| t.name.clone()).collect();
        // Coarse similarities, so that ties and repeated names are common.
        let cos: Vec<(String, f32)> = picks
            .iter()
            .map(|&(i, c)| (names.get(i).cloned().unwrap_or_else(|| format!("unknown{i}")), f32::from(c) / 20.0))
            .collect();
        let floor_only = &cfg.settings().pipeline.domain.floor_only_domains;
        let mut want: Vec<(&str, f32)> = Vec::new();
        for (name, c) in &cos {
            let eligible = reg.by_name(name).is_some_and(|t| {
                t.is_business() && !t.domain.as_deref().is_some_and(|d| floor_only.iter().any(|f| f == d))
            });
            if !eligible {
                continue;
            }
            match want.iter_mut().find(|w| w.0 == name.as_str()) {
                Some(w) => w.1 = w.1.max(*c),
                None => want.push((name.as_str(), *c)),
            }
        }
        want.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let want: Vec<&str> = want.into_iter().take(n).map(|w| w.0).collect();
        prop_assert_eq!(embedder_top(&reg, &cfg, &cos), want);
    }
}

#[test]
fn on_a_turn_with_cosines_the_threshold_spares_the_best_searched_tools() {
    let reg = registry();
    let mut s = RankSettings::default();
    s.pipeline.budget.margin = None;
    s.pipeline.budget.embedder_top = 0;
    let cfg = RankConfig::try_new(s).unwrap();
    // Every similarity far below the threshold: without the budget's cut
    // the set fills to the phase maximum with searched tools, chosen from
    // twice that many.
    let cos = falling_cosines(&reg, 0.3);
    let turn = Turn {
        cosine: Some(&cos),
        ..lexical_turn("zzz qqq", Phase::Planner)
    };
    let r = resolve(&reg, &cfg, &turn);
    assert_eq!(r.trace.above_threshold, 0);
    assert_eq!(r.trace.ranked.len(), 2 * Phase::Planner.budget().max);
    assert_eq!(r.candidates.len(), Phase::Planner.budget().max);
    // A lexical-only turn is still cut by it (lexical scores lie below it):
    // the phase minimum, and the patient resolver the vitals tools need.
    let lexical = resolve(
        &reg,
        &cfg,
        &lexical_turn("Show the vital signs", Phase::Planner),
    );
    assert_eq!(lexical.trace.above_threshold, 0);
    assert_eq!(lexical.candidates.len(), Phase::Planner.budget().min + 1);
    assert!(lexical.trace.patient_resolve.is_some());
}
