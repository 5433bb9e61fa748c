//! Floors: tools a turn must be able to see whatever retrieval ranks.
//!
//! Floors guarantee visibility, never a call. They enter the candidate set as
//! always-include entries ahead of the ranked hits, so they never compete for a
//! top-K slot (the budget still bounds the whole set).
//!
//! - **Multi-entity** (prompt-conditioned): a set of regex signals — en/de/fr
//!   action phrasings, ICD-10 codes, dose units, vital-sign units — where each
//!   signal counts once however often it matches. Two or more signals pin the
//!   composite workflow tools. Matchers are loose on purpose: a false positive
//!   shows a workflow for one turn, a false negative hides it.
//! - **Research** (prompt-conditioned): research/literature phrasing pins the
//!   research tools. There is deliberately no bare `search` signal: "search for
//!   the patient" is the commonest clinical phrasing and must not fire.
//! - **Patient-resolve** (structural, after retrieval): when a surfaced tool
//!   needs a patient id, or the turn names a person ([`person`]: an
//!   honorific or a capitalised name pair), and no resolver is surfaced,
//!   exactly one resolver is prepended.
//!
//! Everything here is configuration with defaults for the catalog; patterns
//! are matched against the turn after [`fold`](super::tokenize::fold)
//! (lowercase, diacritics stripped), so they are written lowercase and
//! without accents.

pub mod person;

use super::meta::ToolMeta;
use crate::proto::tools::Reason;
use crate::Phase;
use regex::RegexSet;
use serde::{Deserialize, Serialize};

/// One named regex signal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalSettings {
    /// Name reported in the decision trace (never the matched text).
    pub name: String,
    /// Regex matched against the folded turn.
    pub pattern: String,
}

/// A prompt-conditioned floor as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalFloorSettings {
    /// The signals; each counts at most once per turn.
    pub signals: Vec<SignalSettings>,
    /// How many distinct signals fire the floor.
    pub min_signals: usize,
    /// Tool ids the floor pins, in order.
    pub tools: Vec<String>,
    /// Phases the floor applies in.
    pub phases: Vec<Phase>,
}

/// The structural patient-resolve floor as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PatientResolveSettings {
    /// Tool ids that turn a patient name into an id; one surfaced is enough.
    pub resolvers: Vec<String>,
    /// The one resolver prepended when none is surfaced.
    pub prepend: String,
    /// Parameter names that identify a patient in `requiresOneOf`.
    pub patient_params: Vec<String>,
    /// Whether a turn that names a person ([`person::names_a_person`])
    /// needs the resolver too, whatever was surfaced.
    pub on_named_person: bool,
    /// Phases the floor applies in.
    pub phases: Vec<Phase>,
}

/// All floors as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FloorSettings {
    /// Multi-entity (composite-turn) floor.
    pub multi_entity: SignalFloorSettings,
    /// Research floor.
    pub research: SignalFloorSettings,
    /// Patient-resolve floor.
    pub patient_resolve: PatientResolveSettings,
}

/// Why a floor configuration was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FloorError {
    /// A signal pattern does not compile.
    #[error("floors.{floor}.signals[{index}].pattern: {source}")]
    BadPattern {
        /// `multiEntity`, `research` or `workflow.executeSignals`.
        floor: &'static str,
        /// Position of the signal.
        index: usize,
        /// The regex compiler's complaint.
        #[source]
        source: Box<regex::Error>,
    },
    /// A floor can never fire, or fires on nothing.
    #[error("floors.{floor}.minSignals: must be between 1 and the number of signals ({signals}), got {got}")]
    BadMinSignals {
        /// Floor name.
        floor: &'static str,
        /// Number of signals.
        signals: usize,
        /// Configured value.
        got: usize,
    },
    /// The patient-resolve floor names no resolver to prepend.
    #[error("floors.patientResolve.prepend: must name a tool")]
    NoResolver,
}

/// A compiled signal set.
#[derive(Debug, Clone)]
pub struct SignalSet {
    names: Vec<String>,
    set: RegexSet,
}

impl SignalSet {
    /// Compiles signals; `floor` names the configuration path in errors.
    pub fn try_new(floor: &'static str, signals: &[SignalSettings]) -> Result<Self, FloorError> {
        for (index, s) in signals.iter().enumerate() {
            // Compile one by one first so the error names the bad entry.
            RegexSet::new([s.pattern.as_str()]).map_err(|e| FloorError::BadPattern {
                floor,
                index,
                source: Box::new(e),
            })?;
        }
        let set = RegexSet::new(signals.iter().map(|s| s.pattern.as_str())).map_err(|e| {
            FloorError::BadPattern {
                floor,
                index: 0,
                source: Box::new(e),
            }
        })?;
        Ok(SignalSet {
            names: signals.iter().map(|s| s.name.clone()).collect(),
            set,
        })
    }

    /// The names of the distinct signals the folded text matches, in
    /// configuration order. Each signal counts once.
    pub fn matches(&self, folded: &str) -> Vec<&str> {
        self.set
            .matches(folded)
            .iter()
            .filter_map(|i| self.names.get(i).map(String::as_str))
            .collect()
    }

    /// Number of signals.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no signals.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// A compiled prompt-conditioned floor.
#[derive(Debug, Clone)]
pub struct SignalFloor {
    signals: SignalSet,
    min_signals: usize,
    tools: Vec<String>,
    phases: Vec<Phase>,
    reason: Reason,
}

/// A floor that fired on a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FiredFloor {
    /// The activation reason of its tools.
    pub reason: Reason,
    /// Names of the signals that matched.
    pub signals: Vec<String>,
    /// Tool ids it pins.
    pub tools: Vec<String>,
}

impl SignalFloor {
    fn try_new(
        floor: &'static str,
        s: &SignalFloorSettings,
        reason: Reason,
    ) -> Result<Self, FloorError> {
        if s.min_signals == 0 || s.min_signals > s.signals.len() {
            return Err(FloorError::BadMinSignals {
                floor,
                signals: s.signals.len(),
                got: s.min_signals,
            });
        }
        Ok(SignalFloor {
            signals: SignalSet::try_new(floor, &s.signals)?,
            min_signals: s.min_signals,
            tools: s.tools.clone(),
            phases: s.phases.clone(),
            reason,
        })
    }

    /// The distinct signals of a folded turn (whatever the phase).
    pub fn signals(&self, folded: &str) -> Vec<&str> {
        self.signals.matches(folded)
    }

    /// Whether enough distinct signals match.
    pub fn fires(&self, folded: &str) -> bool {
        self.signals(folded).len() >= self.min_signals
    }

    /// The floor fired by a turn that names one of its tools (see
    /// [`Floors::prompt_floors`]), in a phase it applies in.
    fn named(&self, phase: Phase, named: impl Fn(&str) -> bool) -> Option<FiredFloor> {
        (self.phases.contains(&phase) && self.tools.iter().any(|t| named(t))).then(|| FiredFloor {
            reason: self.reason,
            signals: vec![NAMED_BY_ACRONYM.to_owned()],
            tools: self.tools.clone(),
        })
    }

    /// The floor's verdict on a folded turn in a phase.
    pub fn evaluate(&self, folded: &str, phase: Phase) -> Option<FiredFloor> {
        if !self.phases.contains(&phase) {
            return None;
        }
        let signals = self.signals(folded);
        (signals.len() >= self.min_signals).then(|| FiredFloor {
            reason: self.reason,
            signals: signals.into_iter().map(str::to_owned).collect(),
            tools: self.tools.clone(),
        })
    }
}

/// The signal name of a floor fired because the turn names one of its tools
/// by an acronym the tool's own texts are written with.
pub const NAMED_BY_ACRONYM: &str = "named-by-acronym";

/// All floors, compiled.
#[derive(Debug, Clone)]
pub struct Floors {
    /// Multi-entity floor.
    pub multi_entity: SignalFloor,
    /// Research floor.
    pub research: SignalFloor,
    /// Patient-resolve floor.
    pub patient_resolve: PatientResolveSettings,
}

impl Floors {
    /// Compiles and checks the floor configuration.
    pub fn try_new(s: &FloorSettings) -> Result<Self, FloorError> {
        if s.patient_resolve.prepend.is_empty() {
            return Err(FloorError::NoResolver);
        }
        Ok(Floors {
            multi_entity: SignalFloor::try_new(
                "multiEntity",
                &s.multi_entity,
                Reason::FloorMultiEntity,
            )?,
            research: SignalFloor::try_new("research", &s.research, Reason::FloorResearch)?,
            patient_resolve: s.patient_resolve.clone(),
        })
    }

    /// The prompt-conditioned floors that fire on a folded turn in a phase.
    /// `named` says whether the turn names a tool by one of its acronyms
    /// ([`Registry::named_by_acronym`]): a floor whose signals miss still
    /// fires when the turn names one of its tools so ("Que dit la HAS sur …"
    /// names the guideline search whose keywords list `HAS`).
    ///
    /// [`Registry::named_by_acronym`]: super::registry::Registry::named_by_acronym
    pub fn prompt_floors(
        &self,
        folded: &str,
        phase: Phase,
        named: impl Fn(&str) -> bool,
    ) -> Vec<FiredFloor> {
        [&self.multi_entity, &self.research]
            .into_iter()
            .filter_map(|f| f.evaluate(folded, phase).or_else(|| f.named(phase, &named)))
            .collect()
    }
}

impl PatientResolveSettings {
    /// Whether a tool needs a patient id: `requiresPatient`, or a
    /// `requiresOneOf` naming one of the patient parameters.
    pub fn needs_patient(&self, meta: &ToolMeta) -> bool {
        meta.requires_patient
            || meta
                .requires_one_of
                .iter()
                .any(|p| self.patient_params.contains(p))
    }

    /// Whether a tool id is a resolver.
    pub fn is_resolver(&self, id: &str) -> bool {
        id == self.prepend || self.resolvers.iter().any(|r| r == id)
    }
}

// === defaults for the catalog ===

fn signal(name: &str, pattern: &str) -> SignalSettings {
    SignalSettings {
        name: name.into(),
        pattern: pattern.into(),
    }
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

impl Default for FloorSettings {
    fn default() -> Self {
        FloorSettings {
            multi_entity: SignalFloorSettings {
                // Each entry is ONE action or one kind of clinical datum, so a
                // single-action turn stays at one signal.
                signals: vec![
                    signal(
                        "appointment",
                        r"\b(book\w*|schedul\w*|reschedul\w*|appointments?|termin\w*|rendez-vous|rdv|creneau\w*)\b",
                    ),
                    signal(
                        "prescribing",
                        r"\b(prescri\w*|rezept\w*|verordn\w*|ordonnance\w*)\b",
                    ),
                    signal(
                        "visit",
                        r"\b(admit\w*|admission|aufnehm\w*|aufnahme|aufgenommen|stationar\w*|hospitalis\w*|visit|besuch\w*|fall anlegen|neuen fall|sejour)\b",
                    ),
                    signal(
                        "note",
                        r"\b(notes?|notiz\w*|verlaufs\w*|compte[- ]rendu|sign|signer|signieren|unterschreib\w*)\b",
                    ),
                    signal(
                        "registration",
                        r"\b(register\w*|new patient|neue[nr]? patient\w*|nouveau patient|nouvelle patiente|intake|anamnese\w*|questionnaire|fragebogen)\b",
                    ),
                    signal("discharge", r"\b(discharg\w*|entlass\w*|sortie)\b"),
                    signal(
                        "order",
                        r"\b(order\w*|labs?|blood (count|test)|blutbild|labor\w*|bilan|x-?ray|rontgen\w*|mrt|ct|irm|scanner|anforder\w*)\b",
                    ),
                    signal(
                        "task-message",
                        r"\b(tasks?|aufgabe\w*|taches?|messages?|nachricht\w*|notify|benachrichtig\w*|prevenir|rappel|reminder|send|schick\w*|envoyer)\b",
                    ),
                    signal(
                        "referral-letter",
                        r"\b(refer\w*|uberweis\w*|letters?|\w*brief\w*|courrier|upload\w*|hochlad\w*|share)\b",
                    ),
                    signal("diagnosis", r"\b(diagnos\w*|probleme?liste|problem list)\b"),
                    signal("icd10-code", r"\b[a-z][0-9]{2}(\.[0-9]{1,2})?\b"),
                    signal(
                        "dose-unit",
                        r"\b[0-9]+([.,][0-9]+)?\s*(mg|mcg|[µμu]g|iu|ie|ui|units?|einheiten)\b",
                    ),
                    signal(
                        "vital-unit",
                        r"([0-9]{2,3}\s*/\s*[0-9]{2,3}\s*mm\s?hg|\bmm\s?hg\b|\bbpm\b|[0-9]\s*/\s*min\b|°\s*[cf]\b|\bspo2\b)",
                    ),
                ],
                min_signals: 2,
                tools: ids(&[
                    "intake.composite",
                    "admission.composite",
                    "discharge.composite",
                ]),
                phases: vec![Phase::Planner, Phase::AgentCall, Phase::Recovery],
            },
            research: SignalFloorSettings {
                // No bare `search`/`suche`/`recherche`: those name patient
                // lookups far more often than literature searches.
                signals: vec![
                    signal(
                        "literature-en",
                        r"\b(literature|pubmed|medline|pmid|doi|cochrane|rcts?|randomi[sz]ed|meta-?analys\w*|systematic reviews?|review articles?|publications?|papers?|journals?|abstracts?|evidence|research|case reports?|cohort stud\w*)\b",
                    ),
                    signal("guideline-en", r"\bguidelines?\b"),
                    signal("trial-en", r"\b(clinical trials?|trials?|studies)\b"),
                    signal(
                        "literature-de",
                        r"\b(literatur\w*|publikation\w*|studie\w*|fachartikel|evidenz\w*|forschung\w*|wissenschaftlich\w*)\b",
                    ),
                    signal("guideline-de", r"\bleitlinie\w*\b"),
                    signal(
                        "literature-fr",
                        r"\b(litterature|etudes?|articles? scientifiques?|revue systematique|publications?|recherche bibliographique|meta-?analyse\w*)\b",
                    ),
                    signal("guideline-fr", r"\brecommandations?\b"),
                    signal("trial-fr", r"\bessais?( cliniques?)?\b"),
                ],
                min_signals: 1,
                tools: ids(&[
                    "research.pubmed.search",
                    "research.guideline.search",
                    "research.trials.search",
                    "research.article.get",
                ]),
                phases: vec![
                    Phase::Planner,
                    Phase::AgentCall,
                    Phase::Recovery,
                    Phase::Formatter,
                ],
            },
            patient_resolve: PatientResolveSettings::default(),
        }
    }
}

impl Default for PatientResolveSettings {
    fn default() -> Self {
        PatientResolveSettings {
            resolvers: ids(&["patient.search.smart", "patient.search.exact"]),
            prepend: "patient.search.smart".into(),
            patient_params: ids(&["patientId", "patient_id", "patient"]),
            on_named_person: true,
            phases: vec![Phase::Planner, Phase::AgentCall, Phase::Recovery],
        }
    }
}

#[cfg(test)]
mod tests;
