//! The ranking configuration: raw settings as an operator writes them
//! ([`RankSettings`], every field defaulted for the catalog) and the validated,
//! compiled form the engine runs with ([`RankConfig`]).

use super::clauses::ClauseSettings;
use super::floors::{FloorError, FloorSettings, Floors, SignalSet};
use super::fuse::FusionSettings;
use super::lexical::LexicalSettings;
use super::meta::{MetaError, NameMapping};
use super::stages::PipelineSettings;
use serde::{Deserialize, Serialize};

/// Ranking settings as written (JSON, camelCase, unknown fields rejected).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RankSettings {
    /// Function name ↔ tool id mapping.
    pub names: NameMapping,
    /// Lexical index tuning.
    pub lexical: LexicalSettings,
    /// Cosine/lexical fusion weights.
    pub fusion: FusionSettings,
    /// Threshold, domain scoping, dedup and workflow boost.
    pub pipeline: PipelineSettings,
    /// Floors.
    pub floors: FloorSettings,
    /// Multi-intent turns: clause splitting and the per-clause match.
    pub clauses: ClauseSettings,
}

/// Why ranking settings were rejected. Each message names the setting's path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RankConfigError {
    /// The JSON does not match [`RankSettings`].
    #[error("ranking settings are not valid JSON: {source}")]
    Json {
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A number is out of range.
    #[error("{path}: {problem}, got {value}")]
    OutOfRange {
        /// Setting path, e.g. `lexical.b`.
        path: &'static str,
        /// The rule it breaks.
        problem: &'static str,
        /// The configured value.
        value: f64,
    },
    /// The name mapping is unusable.
    #[error(transparent)]
    Names(#[from] MetaError),
    /// A floor or signal set does not compile.
    #[error(transparent)]
    Floors(#[from] FloorError),
    /// A shorthand key is not one word (turns are matched word by word).
    #[error("lexical.shorthand: {key:?} must be one word of letters and digits")]
    Shorthand {
        /// The key.
        key: String,
    },
}

/// Validated, compiled ranking configuration.
#[derive(Debug, Clone)]
pub struct RankConfig {
    settings: RankSettings,
    floors: Floors,
    execute: SignalSet,
}

impl RankConfig {
    /// Validates settings and compiles their regexes.
    pub fn try_new(settings: RankSettings) -> Result<Self, RankConfigError> {
        settings.names.validate()?;
        let l = &settings.lexical;
        let p = &settings.pipeline;
        let non_negative: [(&'static str, f32); 15] = [
            ("pipeline.budget.margin", p.budget.margin.unwrap_or(0.0)),
            ("lexical.k1", l.k1),
            ("lexical.idWeight", l.id_weight),
            ("lexical.descriptionWeight", l.description_weight),
            ("lexical.ragDescriptionWeight", l.rag_description_weight),
            ("lexical.keywordsWeight", l.keywords_weight),
            ("lexical.parametersWeight", l.parameters_weight),
            ("lexical.siblingsWeight", l.siblings_weight),
            ("fusion.cosineWeight", settings.fusion.cosine_weight),
            ("fusion.lexicalWeight", settings.fusion.lexical_weight),
            ("pipeline.domain.penalty", p.domain.penalty),
            (
                "pipeline.domain.floorOnlyPenalty",
                p.domain.floor_only_penalty,
            ),
            (
                "pipeline.dedup.siblingPenalty",
                p.dedup.sibling_penalty.unwrap_or(0.0),
            ),
            ("pipeline.workflow.boost", p.workflow.boost),
            ("pipeline.threshold", p.threshold.abs()),
        ];
        for (path, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(RankConfigError::OutOfRange {
                    path,
                    problem: "must be a finite number >= 0",
                    value: v.into(),
                });
            }
        }
        if !(0.0..=1.0).contains(&l.b) {
            return Err(RankConfigError::OutOfRange {
                path: "lexical.b",
                problem: "must be within 0..=1",
                value: l.b.into(),
            });
        }
        if !(l.saturation.is_finite() && l.saturation > 0.0) {
            return Err(RankConfigError::OutOfRange {
                path: "lexical.saturation",
                problem: "must be a finite number > 0",
                value: l.saturation.into(),
            });
        }
        let one_word = |k: &str| {
            let folded = super::tokenize::fold(k);
            let mut words = super::tokenize::words(&folded);
            words.next() == Some(folded.as_str()) && words.next().is_none()
        };
        if let Some(key) = l.shorthand.keys().find(|k| !one_word(k)) {
            return Err(RankConfigError::Shorthand { key: key.clone() });
        }
        let counts: [(&'static str, usize); 3] = [
            ("clauses.minWords", settings.clauses.min_words),
            ("clauses.perClauseK", settings.clauses.per_clause_k),
            ("pipeline.dedup.perAxis", p.dedup.per_axis),
        ];
        for (path, v) in counts {
            if v == 0 {
                return Err(RankConfigError::OutOfRange {
                    path,
                    problem: "must be at least 1",
                    value: 0.0,
                });
            }
        }
        let floors = Floors::try_new(&settings.floors)?;
        let execute = SignalSet::try_new("workflow.executeSignals", &p.workflow.execute_signals)?;
        Ok(RankConfig {
            settings,
            floors,
            execute,
        })
    }

    /// Parses and validates settings from JSON (`{}` gives the defaults).
    pub fn from_json(bytes: &[u8]) -> Result<Self, RankConfigError> {
        let settings: RankSettings =
            serde_json::from_slice(bytes).map_err(|source| RankConfigError::Json { source })?;
        Self::try_new(settings)
    }

    /// The settings this configuration was built from.
    pub fn settings(&self) -> &RankSettings {
        &self.settings
    }

    /// The compiled floors.
    pub fn floors(&self) -> &Floors {
        &self.floors
    }

    /// The compiled execute-intent signals (workflow boost).
    pub fn execute_signals(&self) -> &SignalSet {
        &self.execute
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_compile_and_round_trip_through_json() {
        let cfg = RankConfig::from_json(b"{}").unwrap();
        let json = serde_json::to_vec(cfg.settings()).unwrap();
        let again = RankConfig::from_json(&json).unwrap();
        assert_eq!(again.settings(), cfg.settings());
    }

    #[test]
    fn errors_name_the_setting() {
        let err = RankConfig::from_json(br#"{"lexical":{"b":1.5}}"#).unwrap_err();
        assert_eq!(err.to_string(), "lexical.b: must be within 0..=1, got 1.5");
        let err = RankConfig::from_json(br#"{"clauses":{"perClauseK":0}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "clauses.perClauseK: must be at least 1, got 0"
        );
        let err = RankConfig::from_json(
            r#"{"lexical":{"shorthand":{"WV":"x","Rö-Thx":"x"}}}"#.as_bytes(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"lexical.shorthand: "Rö-Thx" must be one word of letters and digits"#
        );
        let err = RankConfig::from_json(br#"{"fusion":{"lexicalWeight":-1}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "fusion.lexicalWeight: must be a finite number >= 0, got -1"
        );
        assert!(matches!(
            RankConfig::from_json(br#"{"bogus":1}"#),
            Err(RankConfigError::Json { .. })
        ));
    }

    #[test]
    fn a_bad_floor_pattern_names_its_position() {
        let mut s = RankSettings::default();
        s.floors.research.signals[2].pattern = "(unclosed".into();
        let err = RankConfig::try_new(s).unwrap_err().to_string();
        assert!(
            err.starts_with("floors.research.signals[2].pattern: "),
            "{err}"
        );
    }
}
