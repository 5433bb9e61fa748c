//! Fusing the cosine and lexical scores of one tool, and the total order that
//! ranks tools.
//!
//! Both transforms are strictly monotone and set-independent: a tool's fused
//! score is a function of its own cosine similarity and its own lexical match,
//! never of the other tools in the pool (no min–max or rank normalisation,
//! which would let an unrelated tool move this one). Equal fused scores break
//! by query-term coverage, then by tool id — never by input order.

use super::lexical::{LexicalScore, LexicalSettings};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Weights of the fusion `cosine_weight · cos + lexical_weight · s/(s+k)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FusionSettings {
    /// Weight of the cosine similarity (in `[-1, 1]`).
    pub cosine_weight: f32,
    /// Weight of the saturated lexical score (in `[0, 1)`).
    pub lexical_weight: f32,
}

impl Default for FusionSettings {
    fn default() -> Self {
        FusionSettings {
            cosine_weight: 1.0,
            lexical_weight: 0.3,
        }
    }
}

impl FusionSettings {
    /// The fused score of one tool. A tool the vector search did not return
    /// (`cosine: None`) contributes no cosine term. Non-finite cosines count
    /// as absent.
    pub fn fuse(
        &self,
        cosine: Option<f32>,
        lexical: LexicalScore,
        lexical_settings: &LexicalSettings,
    ) -> f32 {
        let cos = cosine
            .filter(|c| c.is_finite())
            .map_or(0.0, |c| c.clamp(-1.0, 1.0));
        self.cosine_weight * cos + self.lexical_weight * lexical_settings.saturate(lexical.raw)
    }
}

/// One tool's ranking key.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored<'a> {
    /// Tool id (the last tie-break).
    pub id: &'a str,
    /// Fused score, adjusted by the pipeline's stages.
    pub score: f32,
    /// Query-term coverage (the first tie-break).
    pub coverage: f32,
}

/// The ranking order: higher score first, then higher coverage, then id
/// ascending. A total order: `total_cmp` puts NaN in a fixed place.
pub fn compare(a: &Scored<'_>, b: &Scored<'_>) -> Ordering {
    b.score
        .total_cmp(&a.score)
        .then(b.coverage.total_cmp(&a.coverage))
        .then_with(|| a.id.cmp(b.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lex(raw: f32) -> LexicalScore {
        LexicalScore { raw, coverage: 0.0 }
    }

    #[test]
    fn ties_break_by_coverage_then_id() {
        let mut v = [
            Scored {
                id: "b",
                score: 0.5,
                coverage: 0.5,
            },
            Scored {
                id: "a",
                score: 0.5,
                coverage: 0.5,
            },
            Scored {
                id: "c",
                score: 0.5,
                coverage: 1.0,
            },
            Scored {
                id: "d",
                score: 0.6,
                coverage: 0.0,
            },
        ];
        v.sort_by(compare);
        let ids: Vec<&str> = v.iter().map(|s| s.id).collect();
        assert_eq!(ids, ["d", "c", "a", "b"]);
    }

    #[test]
    fn missing_or_broken_cosine_counts_as_zero() {
        let f = FusionSettings::default();
        let l = LexicalSettings::default();
        assert_eq!(f.fuse(None, lex(0.0), &l), 0.0);
        assert_eq!(f.fuse(Some(f32::NAN), lex(0.0), &l), 0.0);
        assert_eq!(f.fuse(Some(2.0), lex(0.0), &l), 1.0);
    }

    proptest! {
        #[test]
        fn fusion_is_strictly_monotone_in_each_input(c in -1.0f32..0.99, r in 0.0f32..100.0, dc in 0.001f32..0.01, dr in 0.01f32..5.0) {
            let f = FusionSettings::default();
            let l = LexicalSettings::default();
            let base = f.fuse(Some(c), lex(r), &l);
            prop_assert!(f.fuse(Some(c + dc), lex(r), &l) > base);
            prop_assert!(f.fuse(Some(c), lex(r + dr), &l) > base);
        }
    }
}
