use super::*;
use crate::tools::rank::tokenize::fold;
use serde_json::Value;

fn floors() -> Floors {
    Floors::try_new(&FloorSettings::default()).unwrap()
}

fn dev_turns() -> Vec<Value> {
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/catalog/queries.dev.jsonl"
    ))
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect()
}

#[test]
fn one_action_is_one_signal_and_two_actions_pin_the_workflows() {
    let f = floors();
    assert_eq!(
        f.multi_entity
            .signals(&fold("Book an appointment for Mrs. Krause.")),
        ["appointment"]
    );
    assert_eq!(
        f.multi_entity
            .signals(&fold("Book, then reschedule the appointment")),
        ["appointment"]
    );
    let fired = f
        .multi_entity
        .evaluate(
            &fold("Book an appointment and write a note."),
            Phase::Planner,
        )
        .unwrap();
    assert_eq!(fired.signals, ["appointment", "note"]);
    assert_eq!(fired.reason, Reason::FloorMultiEntity);
    assert_eq!(
        fired.tools,
        [
            "intake.composite",
            "admission.composite",
            "discharge.composite"
        ]
    );
    assert!(f
        .multi_entity
        .evaluate(&fold("Book an appointment."), Phase::Planner)
        .is_none());
}

#[test]
fn codes_doses_and_vital_units_are_signals_in_three_languages() {
    let f = floors();
    let s = |t: &str| {
        f.multi_entity
            .signals(&fold(t))
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(s("Add diagnosis E11.9").contains(&"icd10-code".to_owned()));
    assert!(s("Diagnose I10 hinterlegen").contains(&"icd10-code".to_owned()));
    assert!(s("levothyroxine 75 mcg").contains(&"dose-unit".to_owned()));
    assert!(s("Insulin glargin 20 IE").contains(&"dose-unit".to_owned()));
    assert!(s("vitamin D3 20000 IU").contains(&"dose-unit".to_owned()));
    assert!(s("TA 128/82 mmHg, FC 88 bpm").contains(&"vital-unit".to_owned()));
    assert!(s("Puls 72/min, Temperatur 38,4 °C").contains(&"vital-unit".to_owned()));
    assert!(s("Prescrire de la metformine et prendre rendez-vous").len() >= 2);
    assert!(s("Termin buchen und Rezept ausstellen").len() >= 2);
}

#[test]
fn research_floor_never_fires_on_patient_searches() {
    let f = floors();
    for q in [
        "Search for the patient Becker",
        "Such mal nach dem Patienten Lukas Müller",
        "Rechercher la patiente Bernard",
    ] {
        assert!(
            f.research.evaluate(&fold(q), Phase::Planner).is_none(),
            "{q}"
        );
    }
    let fired = f
        .research
        .evaluate(
            &fold("Suche aktuelle Leitlinien zur Herzinsuffizienz"),
            Phase::Planner,
        )
        .unwrap();
    assert_eq!(fired.signals, ["guideline-de"]);
    assert_eq!(fired.reason, Reason::FloorResearch);
}

#[test]
fn on_the_dev_turns_research_fires_on_research_turns_and_never_where_forbidden() {
    let f = floors();
    let (mut research, mut fired) = (0, 0);
    for q in dev_turns() {
        let text = fold(q["query"].as_str().unwrap());
        let fires = f.research.fires(&text);
        if q.get("forbidden").is_some() {
            assert!(
                !fires,
                "forbidden turn fired the research floor: {}",
                q["id"]
            );
        }
        if q["kind"] == "research" {
            research += 1;
            fired += usize::from(fires);
        }
    }
    assert_eq!((research, fired), (10, 10));
}

#[test]
fn floors_respect_their_phases() {
    let f = floors();
    let t = fold("Book an appointment and write a note.");
    assert!(f.prompt_floors(&t, Phase::ToolInput, |_| false).is_empty());
    assert_eq!(f.prompt_floors(&t, Phase::AgentCall, |_| false).len(), 1);
}

#[test]
fn patient_need_comes_from_requires_patient_or_a_patient_parameter() {
    let pr = PatientResolveSettings::default();
    let m = |json: &str| -> ToolMeta { serde_json::from_str(json).unwrap() };
    assert!(pr.needs_patient(&m(r#"{"id":"a","requiresPatient":true}"#)));
    assert!(pr.needs_patient(&m(r#"{"id":"a","requiresOneOf":["patient_id","x"]}"#)));
    assert!(!pr.needs_patient(&m(r#"{"id":"a","requiresOneOf":["practitionerId"]}"#)));
    assert!(pr.is_resolver("patient.search.exact") && !pr.is_resolver("patient.get"));
}

#[test]
fn bad_floor_settings_name_the_field() {
    let mut s = FloorSettings::default();
    s.research.min_signals = 0;
    assert_eq!(
        Floors::try_new(&s).unwrap_err().to_string(),
        "floors.research.minSignals: must be between 1 and the number of signals (8), got 0"
    );
    let mut s = FloorSettings::default();
    s.patient_resolve.prepend.clear();
    assert!(matches!(Floors::try_new(&s), Err(FloorError::NoResolver)));
}
