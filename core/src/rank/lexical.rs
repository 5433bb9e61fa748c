//! A BM25-style lexical index over a registry's tools.
//!
//! Each tool is one document with four weighted fields: its id (split on
//! separators and camelCase), its description, the *positive* part of its
//! `ragDescription` (the text before `DO NOT USE WHEN`, which names the
//! siblings *not* to use and would otherwise pull them up) and its keywords.
//! Field term frequencies are summed with their weights (BM25F-lite), then
//! scored with the usual `k1`/`b` saturation and length normalisation.
//!
//! IDF and the average length are statistics of the indexed registry, fixed at
//! build time. They never depend on which tools a query happens to retrieve, so
//! a tool's lexical score — and [`LexicalSettings::saturate`] of it — is a
//! function of that tool and the query alone.

use super::tokenize::{fold, identifier_words, is_stopword, query_tokens, split_compound, stem, words};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Tuning of the lexical index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LexicalSettings {
    /// Term-frequency saturation (BM25 `k1`).
    pub k1: f32,
    /// Length normalisation (BM25 `b`), 0..=1.
    pub b: f32,
    /// Weight of the id field.
    pub id_weight: f32,
    /// Weight of the description field.
    pub description_weight: f32,
    /// Weight of the ragDescription field.
    pub rag_description_weight: f32,
    /// Weight of the keywords field.
    pub keywords_weight: f32,
    /// Text after this marker in a ragDescription is not indexed (it names
    /// what the tool is *not* for). `None` indexes the whole text.
    pub negative_marker: Option<String>,
    /// The set-independent transform `s / (s + saturation)` maps a raw BM25
    /// score into `[0, 1)`; this is the raw score that maps to 0.5.
    pub saturation: f32,
}

impl Default for LexicalSettings {
    fn default() -> Self {
        LexicalSettings {
            k1: 1.2,
            b: 0.75,
            id_weight: 2.0,
            description_weight: 1.0,
            rag_description_weight: 1.0,
            keywords_weight: 1.5,
            negative_marker: Some("DO NOT USE WHEN".into()),
            saturation: 6.0,
        }
    }
}

impl LexicalSettings {
    /// Maps a raw score into `[0, 1)`, strictly increasing, independent of any
    /// other score.
    pub fn saturate(&self, raw: f32) -> f32 {
        let raw = raw.max(0.0);
        raw / (raw + self.saturation)
    }
}

/// The text of one tool as the lexical index sees it.
#[derive(Debug, Clone, Copy)]
pub struct LexicalDoc<'a> {
    /// Dotted tool id or function name.
    pub id: &'a str,
    /// The request's description.
    pub description: &'a str,
    /// The overlay's ragDescription, if any.
    pub rag_description: Option<&'a str>,
    /// The overlay's keywords.
    pub keywords: &'a [String],
}

/// A tool's lexical match against one query.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LexicalScore {
    /// Raw BM25 score (≥ 0).
    pub raw: f32,
    /// Share of distinct query terms the tool contains (0..=1): the first
    /// tie-break after the fused score.
    pub coverage: f32,
}

#[derive(Debug, Clone, Default)]
struct Doc {
    tf: BTreeMap<String, f32>,
    len: f32,
}

/// The index. Build once per registry; query per turn.
#[derive(Debug, Clone, Default)]
pub struct LexicalIndex {
    docs: Vec<Doc>,
    idf: BTreeMap<String, f32>,
    avg_len: f32,
    vocabulary: BTreeSet<String>,
    settings: LexicalSettings,
}

/// A query tokenised against an index's vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryTerms(Vec<String>);

impl QueryTerms {
    /// The distinct terms, in first-seen order.
    pub fn terms(&self) -> &[String] {
        &self.0
    }
}

impl LexicalIndex {
    /// Indexes documents; document `i` is scored as `i` later.
    pub fn build(docs: &[LexicalDoc<'_>], settings: &LexicalSettings) -> Self {
        // Pass 1: the words of every field, and the vocabulary of their stems.
        let fields: Vec<[(Vec<String>, f32); 4]> = docs.iter().map(|d| field_words(d, settings)).collect();
        let vocabulary: BTreeSet<String> =
            fields.iter().flat_map(|f| f.iter().flat_map(|(ws, _)| ws.iter().map(|w| stem(w)))).collect();
        // Pass 2: weighted term frequencies, compound parts included.
        let mut df: BTreeMap<String, u32> = BTreeMap::new();
        let built: Vec<Doc> = fields
            .iter()
            .map(|f| {
                let mut doc = Doc::default();
                for (ws, weight) in f {
                    for w in ws {
                        *doc.tf.entry(stem(w)).or_default() += weight;
                        doc.len += weight;
                        for part in split_compound(w, |p| vocabulary.contains(p)) {
                            *doc.tf.entry(part).or_default() += weight;
                        }
                    }
                }
                for term in doc.tf.keys() {
                    *df.entry(term.clone()).or_default() += 1;
                }
                doc
            })
            .collect();
        let n = built.len() as f32;
        let idf = df
            .into_iter()
            .map(|(t, d)| {
                let d = d as f32;
                (t, (1.0 + (n - d + 0.5) / (d + 0.5)).ln())
            })
            .collect();
        let avg_len = if built.is_empty() { 0.0 } else { built.iter().map(|d| d.len).sum::<f32>() / n };
        LexicalIndex { docs: built, idf, avg_len, vocabulary, settings: settings.clone() }
    }

    /// Tokenises a query against this index (compounds split on its vocabulary).
    pub fn query(&self, text: &str) -> QueryTerms {
        QueryTerms(query_tokens(text, &self.vocabulary))
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The settings the index was built with.
    pub fn settings(&self) -> &LexicalSettings {
        &self.settings
    }

    /// Scores document `doc` against a query. An unknown document scores 0.
    pub fn score(&self, doc: usize, query: &QueryTerms) -> LexicalScore {
        let Some(d) = self.docs.get(doc) else { return LexicalScore::default() };
        let s = &self.settings;
        let norm = if self.avg_len > 0.0 { d.len / self.avg_len } else { 1.0 };
        let mut raw = 0.0;
        let mut matched = 0usize;
        for term in &query.0 {
            let (Some(tf), Some(idf)) = (d.tf.get(term), self.idf.get(term)) else { continue };
            matched += 1;
            raw += idf * tf * (s.k1 + 1.0) / (tf + s.k1 * (1.0 - s.b + s.b * norm));
        }
        let coverage = if query.0.is_empty() { 0.0 } else { matched as f32 / query.0.len() as f32 };
        LexicalScore { raw, coverage }
    }
}

/// The folded, stopword-free words of each field, with the field's weight.
fn field_words(d: &LexicalDoc<'_>, s: &LexicalSettings) -> [(Vec<String>, f32); 4] {
    let free = |text: &str| -> Vec<String> {
        let folded = fold(text);
        words(&folded).filter(|w| !is_stopword(w)).map(str::to_owned).collect()
    };
    let rag = d.rag_description.unwrap_or("");
    let positive = match s.negative_marker.as_deref().filter(|m| !m.is_empty()) {
        Some(marker) => rag.split(marker).next().unwrap_or(rag),
        None => rag,
    };
    let id_words = identifier_words(d.id);
    [
        (id_words, s.id_weight),
        (free(d.description), s.description_weight),
        (free(positive), s.rag_description_weight),
        (d.keywords.iter().flat_map(|k| free(k)).collect(), s.keywords_weight),
    ]
}


#[cfg(test)]
mod tests {
    use super::*;

    fn kw(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn index() -> (LexicalIndex, [Vec<String>; 3]) {
        let k = [kw(&["book appointment", "Termin buchen", "Kontrolltermin"]), kw(&["vital signs", "Blutdruck"]), kw(&[])];
        let docs = [
            LexicalDoc {
                id: "appointment.manage",
                description: "Books or cancels a future appointment.",
                rag_description: Some("USE WHEN booking. DO NOT USE WHEN the patient is present (visit.manage)."),
                keywords: &k[0],
            },
            LexicalDoc { id: "vitals.list", description: "Lists vital signs.", rag_description: None, keywords: &k[1] },
            LexicalDoc { id: "visit.manage", description: "Opens the case of a present patient.", rag_description: None, keywords: &k[2] },
        ];
        (LexicalIndex::build(&docs, &LexicalSettings::default()), k)
    }

    #[test]
    fn matching_tool_scores_highest_with_full_coverage() {
        let (ix, _) = index();
        let q = ix.query("book an appointment");
        let scores: Vec<LexicalScore> = (0..3).map(|i| ix.score(i, &q)).collect();
        assert!(scores[0].raw > 0.0 && scores[1].raw == 0.0);
        assert_eq!(scores[0].coverage, 1.0);
        assert_eq!(ix.score(99, &q), LexicalScore::default());
    }

    #[test]
    fn text_after_the_negative_marker_is_not_indexed() {
        let (ix, _) = index();
        // "present" appears only in appointment.manage's DO NOT USE part.
        let q = ix.query("present");
        assert_eq!(ix.score(0, &q).raw, 0.0);
        assert!(ix.score(2, &q).raw > 0.0);
    }

    #[test]
    fn german_compounds_meet_their_parts() {
        let (ix, _) = index();
        // "Nachsorgetermin" is not in the index, but its head "termin" is.
        let q = ix.query("Nachsorgetermin");
        assert_eq!(q.terms(), ["nachsorgetermin", "termin"]);
        assert!(ix.score(0, &q).raw > 0.0);
        // The document side splits too: "Kontrolltermin" yields "termin".
        let q = ix.query("Blutdruckkontrolle");
        assert!(ix.score(1, &q).raw > 0.0);
    }

    #[test]
    fn saturation_is_strictly_increasing_and_bounded() {
        let s = LexicalSettings::default();
        assert_eq!(s.saturate(0.0), 0.0);
        assert_eq!(s.saturate(s.saturation), 0.5);
        assert!(s.saturate(3.0) < s.saturate(3.1) && s.saturate(1e6) < 1.0);
        assert_eq!(s.saturate(-1.0), 0.0);
    }
}
