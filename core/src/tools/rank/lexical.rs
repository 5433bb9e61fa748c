//! A BM25-style lexical index over a registry's tools.
//!
//! Each tool is one document with five weighted fields: its id (split on
//! separators and camelCase), its description, the *positive* part of its
//! `ragDescription` (the text before `DO NOT USE WHEN`, which names the
//! siblings *not* to use and would otherwise pull them up), its keywords, and
//! the words of its parameter schema ([`super::schema_words`]). Field term
//! frequencies are summed with their weights (BM25F-lite), then scored with
//! the usual `k1`/`b` saturation and length normalisation. The parameter
//! field only adds evidence: document frequencies and lengths are those of
//! the tools' own texts.
//!
//! IDF and the average length are statistics of the indexed registry, fixed at
//! build time. They never depend on which tools a query happens to retrieve, so
//! a tool's lexical score — and [`LexicalSettings::saturate`] of it — is a
//! function of that tool and the query alone.

use super::tokenize::{
    content_words, fold, identifier_words, query_tokens, split_compound, stem, tokens,
};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// Weight of the parameter-schema field ([`super::schema_words`]).
    pub parameters_weight: f32,
    /// Weight of the sibling-keywords field: the keywords of the other tools
    /// of a tool's semantic group within its category (the overlay's
    /// `semanticGroup` and `category`). Siblings act on one object, so the
    /// words one sibling is written with name that object for all of them
    /// (`demandes d'avis` on the referral list is a consult request too);
    /// a view of another category (a calendar's `vue semaine`) lends none.
    pub siblings_weight: f32,
    /// Text after this marker in a ragDescription is not indexed (it names
    /// what the tool is *not* for). `None` indexes the whole text.
    pub negative_marker: Option<String>,
    /// The set-independent transform `s / (s + saturation)` maps a raw BM25
    /// score into `[0, 1)`; this is the raw score that maps to 0.5.
    pub saturation: f32,
    /// Clinical shorthand read as the words it stands for, on the query side
    /// only: a turn's word equal to a key (folded: lowercase, no accents)
    /// also brings in the words of its value. The defaults are common
    /// German, French and English chart abbreviations, only those that
    /// read one way (`cr` is a report in French and creatinine in English:
    /// not listed).
    pub shorthand: BTreeMap<String, String>,
    /// On the query side of a turn that reads as French, a verb form also
    /// matches its infinitive when a tool is written with it (`préviens` →
    /// `prévenir`; [`super::french`]).
    pub french_verbs: bool,
}

/// The default [`LexicalSettings::shorthand`].
const SHORTHAND: &[(&str, &str)] = &[
    // appointments
    ("appt", "appointment"),
    ("appts", "appointment"),
    ("rdv", "rendez-vous appointment"),
    // imaging
    ("mrt", "mri imaging"),
    ("mri", "mri imaging"),
    ("irm", "irm imaging"),
    ("ct", "ct imaging"),
    ("cxr", "chest x-ray imaging"),
    ("xr", "x-ray imaging"),
    ("sono", "sonographie ultrasound imaging"),
    ("ekg", "ecg electrocardiogram"),
    ("ecg", "ecg electrocardiogram"),
    // vitals
    ("bp", "blood pressure vital"),
    ("rr", "blutdruck vital"),
    ("hr", "heart rate vital"),
    ("hf", "herzfrequenz vital"),
    ("fc", "frequence cardiaque vital"),
    ("spo2", "oxygen saturation vital"),
    ("bz", "blutzucker glucose"),
    // labs
    ("labs", "lab results"),
    ("krea", "kreatinin creatinine lab"),
    ("crea", "creatinine lab"),
    ("hba1c", "hba1c lab"),
    ("crp", "crp lab"),
    ("ldh", "ldh lab"),
    ("ggt", "ggt lab"),
    ("tsh", "tsh lab"),
    ("ptt", "ptt lab"),
    ("aptt", "aptt lab"),
    ("hb", "hemoglobin lab"),
    ("hgb", "hemoglobin lab"),
    ("wbc", "white blood cells lab"),
    ("bnp", "bnp lab"),
    ("ntprobnp", "bnp lab"),
    ("cbc", "cbc lab"),
    ("lft", "liver function lab"),
    ("lfts", "liver function lab"),
    ("esr", "esr lab"),
    ("egfr", "egfr lab"),
    ("gfr", "gfr lab"),
    ("abg", "blood gas lab"),
    ("vbg", "blood gas lab"),
    ("lytes", "electrolytes lab"),
    ("coags", "coagulation lab"),
    ("bga", "blutgase lab"),
    ("hst", "harnstoff lab"),
    ("bsg", "blutsenkung lab"),
    ("iono", "ionogramme lab"),
    ("gds", "gaz du sang lab"),
    ("bhc", "bilan hepatique lab"),
    // medication and orders
    ("meds", "medication"),
    ("medis", "medikamente medication"),
    ("abx", "antibiotic medication"),
    ("rp", "rezept prescription"),
    ("ordo", "ordonnance prescription"),
    ("ttt", "traitement medication"),
    // history, diagnosis
    ("dx", "diagnosis"),
    ("ddx", "differential diagnosis"),
    ("hx", "history"),
    ("atcd", "antecedents history"),
    // people and places
    ("pt", "patient"),
    ("gp", "general practitioner"),
    ("ref", "referral"),
    ("kh", "krankenhaus hospital"),
];

fn default_shorthand() -> BTreeMap<String, String> {
    SHORTHAND
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
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
            parameters_weight: 0.25,
            siblings_weight: 0.25,
            negative_marker: Some("DO NOT USE WHEN".into()),
            saturation: 6.0,
            shorthand: default_shorthand(),
            french_verbs: true,
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
    /// The words of its parameter schema ([`super::schema_words`]).
    pub parameters: &'a str,
    /// The keywords of the other tools of its semantic group, space-joined.
    pub siblings: &'a str,
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

/// One term of the vocabulary: its IDF and the documents that contain it.
#[derive(Debug, Clone, Default)]
struct Term {
    idf: f32,
    /// `(document, weighted term frequency)`, by document ascending.
    postings: Vec<(u32, f32)>,
}

/// The index. Build once per registry; query per turn.
///
/// Inverted: a query touches only the postings of its own terms, never the
/// whole registry ([`LexicalIndex::matches`]).
#[derive(Debug, Clone, Default)]
pub struct LexicalIndex {
    terms: BTreeMap<String, Term>,
    /// Per document, the length part of the BM25 denominator,
    /// `k1 · (1 − b + b · len / avg_len)`, fixed at build time.
    length_norm: Vec<f32>,
    /// Looked up for every split point of every long word of a turn: hashed.
    vocabulary: FxHashSet<String>,
    /// [`LexicalSettings::shorthand`], keys folded and values tokenised once.
    shorthand: FxHashMap<String, Vec<String>>,
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
        let fields: Vec<[(Vec<String>, f32); FIELDS]> =
            docs.iter().map(|d| field_words(d, settings)).collect();
        let vocabulary: FxHashSet<String> = fields
            .iter()
            .flat_map(|f| {
                f.iter()
                    .filter(|(_, weight)| *weight > 0.0)
                    .flat_map(|(ws, _)| ws.iter().map(|w| stem(w)))
            })
            .collect();
        // Pass 2: weighted term frequencies, compound parts included. A field
        // weighted 0 is not indexed at all. The borrowed fields (parameters,
        // siblings' keywords) add term frequency only: a term's document
        // frequency counts the tools whose own texts carry it (those whose
        // borrowed fields alone do, when no tool's own text does), and a
        // tool's length is its own texts' — a registry whose every tool takes
        // a `patientId` must not make `patient` a common word, nor a long
        // schema dilute a tool's description.
        let mut terms: BTreeMap<String, Term> = BTreeMap::new();
        let mut described: FxHashMap<String, u32> = FxHashMap::default();
        let mut lens: Vec<f32> = Vec::with_capacity(fields.len());
        for (doc, f) in fields.iter().enumerate() {
            let mut tf: BTreeMap<String, f32> = BTreeMap::new();
            let mut own: FxHashSet<String> = FxHashSet::default();
            let mut len = 0.0f32;
            for (field, (ws, weight)) in f.iter().enumerate() {
                if *weight <= 0.0 {
                    continue;
                }
                let own_text = field < BORROWED_FIELDS;
                for w in ws {
                    let mut add = |term: String| {
                        if own_text {
                            own.insert(term.clone());
                        }
                        *tf.entry(term).or_default() += weight;
                    };
                    add(stem(w));
                    for part in split_compound(w, |p| vocabulary.contains(p)) {
                        add(part);
                    }
                    if own_text {
                        len += weight;
                    }
                }
            }
            for term in own {
                *described.entry(term).or_default() += 1;
            }
            // Documents are visited in order, so every postings list is sorted.
            let doc = u32::try_from(doc).unwrap_or(u32::MAX);
            for (term, f) in tf {
                terms.entry(term).or_default().postings.push((doc, f));
            }
            lens.push(len);
        }
        let n = lens.len() as f32;
        for (text, term) in terms.iter_mut() {
            let d = described
                .get(text)
                .map_or(term.postings.len() as f32, |&d| d as f32);
            term.idf = (1.0 + (n - d + 0.5) / (d + 0.5)).ln();
        }
        let avg_len = if lens.is_empty() {
            0.0
        } else {
            lens.iter().sum::<f32>() / n
        };
        let s = settings;
        let length_norm = lens
            .iter()
            .map(|len| {
                let norm = if avg_len > 0.0 { len / avg_len } else { 1.0 };
                s.k1 * (1.0 - s.b + s.b * norm)
            })
            .collect();
        let shorthand = settings
            .shorthand
            .iter()
            .map(|(k, v)| (fold(k.trim()), tokens(v)))
            .collect();
        LexicalIndex {
            terms,
            length_norm,
            vocabulary,
            shorthand,
            settings: settings.clone(),
        }
    }

    /// Tokenises a query against this index (compounds split on its vocabulary).
    pub fn query(&self, text: &str) -> QueryTerms {
        QueryTerms(query_tokens(
            text,
            |p| self.vocabulary.contains(p),
            |w| self.shorthand.get(w).map(Vec::as_slice),
            self.settings.french_verbs,
        ))
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.length_norm.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.length_norm.is_empty()
    }

    /// The settings the index was built with.
    pub fn settings(&self) -> &LexicalSettings {
        &self.settings
    }

    /// Scores document `doc` against a query. An unknown document scores 0.
    pub fn score(&self, doc: usize, query: &QueryTerms) -> LexicalScore {
        let (Some(&norm), Ok(doc)) = (self.length_norm.get(doc), u32::try_from(doc)) else {
            return LexicalScore::default();
        };
        let mut acc = Accumulator::default();
        for term in query.0.iter().filter_map(|t| self.terms.get(t)) {
            if let Ok(at) = term.postings.binary_search_by_key(&doc, |p| p.0) {
                if let Some(&(_, tf)) = term.postings.get(at) {
                    acc.add(term.idf, tf, norm, &self.settings);
                }
            }
        }
        acc.finish(query)
    }

    /// Every document that contains at least one of the query's terms, by
    /// document ascending, with its score; every other document scores
    /// [`LexicalScore::default`]. Reads only the postings of the query's
    /// terms. Each score equals [`Self::score`] of that document, bit for bit
    /// (terms are summed in the same order).
    pub fn matches(&self, query: &QueryTerms) -> Vec<(usize, LexicalScore)> {
        let lists: Vec<(&Term, usize)> = query
            .0
            .iter()
            .filter_map(|t| self.terms.get(t))
            .map(|t| (t, 0))
            .collect();
        let mut cursors = lists;
        let mut out = Vec::new();
        loop {
            let next = cursors
                .iter()
                .filter_map(|(t, at)| t.postings.get(*at).map(|p| p.0))
                .min();
            let Some(doc) = next else { break };
            let norm = self.length_norm.get(doc as usize).copied().unwrap_or(0.0);
            let mut acc = Accumulator::default();
            // Query order, as `score` sums them.
            for (term, at) in cursors.iter_mut() {
                if let Some(&(d, tf)) = term.postings.get(*at) {
                    if d == doc {
                        acc.add(term.idf, tf, norm, &self.settings);
                        *at += 1;
                    }
                }
            }
            out.push((doc as usize, acc.finish(query)));
        }
        out
    }
}

/// One document's running BM25 sum over a query's terms.
#[derive(Default)]
struct Accumulator {
    raw: f32,
    matched: usize,
}

impl Accumulator {
    fn add(&mut self, idf: f32, tf: f32, length_norm: f32, s: &LexicalSettings) {
        self.matched += 1;
        self.raw += idf * tf * (s.k1 + 1.0) / (tf + length_norm);
    }

    fn finish(self, query: &QueryTerms) -> LexicalScore {
        let n = query.0.len();
        let coverage = if n == 0 {
            0.0
        } else {
            self.matched as f32 / n as f32
        };
        LexicalScore {
            raw: self.raw,
            coverage,
        }
    }
}

/// The most bytes of one tool's borrowed field (its schema words, its
/// siblings' keywords): a hostile schema or an overlay that puts thousands
/// of tools in one group costs bounded work and memory per tool.
pub const BORROWED_BYTES: usize = 4096;

/// The text of one borrowed field, built up to [`BORROWED_BYTES`]; texts
/// past it are dropped whole.
#[derive(Debug, Default)]
pub struct BorrowedText(String);

impl BorrowedText {
    /// Appends `text`, trimmed and space-separated, when it fits; reports
    /// whether it did (an empty text always does).
    pub fn push(&mut self, text: &str) -> bool {
        let text = text.trim();
        if text.is_empty() {
            return true;
        }
        let extra = text.len() + usize::from(!self.0.is_empty());
        if self.0.len() + extra > BORROWED_BYTES {
            return false;
        }
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        self.0.push_str(text);
        true
    }

    /// The text.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// How many fields [`field_words`] answers.
const FIELDS: usize = 6;

/// The place of the first borrowed field in [`field_words`]'s answer: from
/// it on (parameters, siblings' keywords), a field is evidence about the
/// tool, not the tool's own text.
const BORROWED_FIELDS: usize = 4;

/// The folded, stopword-free words of each field, with the field's weight;
/// the borrowed fields come last, from [`BORROWED_FIELDS`] on.
fn field_words(d: &LexicalDoc<'_>, s: &LexicalSettings) -> [(Vec<String>, f32); FIELDS] {
    let free = content_words;
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
        (
            d.keywords.iter().flat_map(|k| free(k)).collect(),
            s.keywords_weight,
        ),
        (free(d.parameters), s.parameters_weight),
        (free(d.siblings), s.siblings_weight),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kw(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn index() -> (LexicalIndex, [Vec<String>; 3]) {
        let k = [
            kw(&["book appointment", "Termin buchen", "Kontrolltermin"]),
            kw(&["vital signs", "Blutdruck"]),
            kw(&[]),
        ];
        let docs = [
            LexicalDoc {
                id: "appointment.manage",
                description: "Books or cancels a future appointment.",
                rag_description: Some(
                    "USE WHEN booking. DO NOT USE WHEN the patient is present (visit.manage).",
                ),
                keywords: &k[0],
                parameters: "",
                siblings: "",
            },
            LexicalDoc {
                id: "vitals.list",
                description: "Lists vital signs.",
                rag_description: None,
                keywords: &k[1],
                parameters: "",
                siblings: "",
            },
            LexicalDoc {
                id: "visit.manage",
                description: "Opens the case of a present patient.",
                rag_description: None,
                keywords: &k[2],
                parameters: "",
                siblings: "",
            },
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
    fn a_borrowed_text_keeps_whole_texts_up_to_its_bound() {
        let mut t = BorrowedText::default();
        assert!(t.push("  consult request "));
        assert!(t.push("   "));
        let long = "x".repeat(BORROWED_BYTES);
        assert!(!t.push(&long), "a text past the bound is dropped whole");
        assert!(t.push("referral"));
        assert_eq!(t.into_string(), "consult request referral");
        let mut full = BorrowedText::default();
        assert!(full.push(&"y".repeat(BORROWED_BYTES)));
        assert!(!full.push("z"));
        assert_eq!(full.into_string().len(), BORROWED_BYTES);
    }

    /// Three tools written with an id and a description only, and the
    /// given borrowed fields.
    fn borrowing(
        tools: [(&'static str, &'static str); 3],
        parameters: [&'static str; 3],
        siblings: [&'static str; 3],
    ) -> Vec<LexicalDoc<'static>> {
        tools
            .into_iter()
            .zip(parameters.into_iter().zip(siblings))
            .map(|((id, description), (parameters, siblings))| LexicalDoc {
                id,
                description,
                rag_description: None,
                keywords: &[],
                parameters,
                siblings,
            })
            .collect()
    }

    #[test]
    fn sibling_keywords_add_evidence_but_not_frequency_or_length() {
        let docs = |siblings: [&'static str; 3]| {
            let tools = [
                ("referral.create", "Creates a referral."),
                ("referral.list", "Lists referrals."),
                ("message.send", "Sends a message."),
            ];
            borrowing(tools, ["", "", ""], siblings)
        };
        let bare = LexicalIndex::build(&docs(["", "", ""]), &LexicalSettings::default());
        let borrowed = LexicalIndex::build(
            &docs(["consult request", "referral", ""]),
            &LexicalSettings::default(),
        );
        let q = borrowed.query("consult request");
        assert_eq!(bare.score(0, &bare.query("consult request")).raw, 0.0);
        assert!(borrowed.score(0, &q).raw > 0.0);
        assert_eq!(borrowed.score(2, &q).raw, 0.0);
        // "referral" stays as rare as the tools' own texts make it, and a
        // tool's length is its own text's.
        let q = borrowed.query("referral");
        assert_eq!(
            borrowed.score(0, &q).raw,
            bare.score(0, &bare.query("referral")).raw
        );
        assert!(borrowed.score(1, &q).raw > bare.score(1, &bare.query("referral")).raw);
        // Weighted 0, the field is not indexed at all.
        let off = LexicalSettings {
            siblings_weight: 0.0,
            ..LexicalSettings::default()
        };
        let off = LexicalIndex::build(&docs(["consult request", "referral", ""]), &off);
        assert_eq!(off.score(0, &off.query("consult request")).raw, 0.0);
    }

    #[test]
    fn shorthand_brings_in_the_words_it_stands_for() {
        let (ix, _) = index();
        // "RDV" shares no word with any tool; it stands for an appointment.
        let q = ix.query("RDV mardi 10h");
        assert_eq!(q.terms(), ["rdv", "rendez", "appointment", "mardi", "10h"]);
        assert!(ix.score(0, &q).raw > 0.0);
        assert_eq!(ix.score(1, &q).raw, 0.0);
        let none = LexicalSettings {
            shorthand: BTreeMap::new(),
            ..LexicalSettings::default()
        };
        let docs = [LexicalDoc {
            id: "appointment.manage",
            description: "Books an appointment.",
            rag_description: None,
            keywords: &[],
            parameters: "",
            siblings: "",
        }];
        let plain = LexicalIndex::build(&docs, &none);
        assert_eq!(plain.score(0, &plain.query("RDV mardi")).raw, 0.0);
        // An operator's key is compared as turns are: folded.
        let own_key = LexicalSettings {
            shorthand: BTreeMap::from([("WV".to_owned(), "appointment".to_owned())]),
            ..LexicalSettings::default()
        };
        let own_key = LexicalIndex::build(&docs, &own_key);
        assert!(own_key.score(0, &own_key.query("WV in 4 Wochen")).raw > 0.0);
    }

    #[test]
    fn parameter_words_add_evidence_but_not_frequency_or_length() {
        let docs = |parameters: [&'static str; 3]| {
            let tools = [
                ("appointment.checkin", "Marks a patient as arrived."),
                ("patient.search.exact", "Finds a patient by an exact id."),
                ("billing.invoice.get", "Reads an invoice."),
            ];
            borrowing(tools, parameters, ["", "", ""])
        };
        let bare = LexicalIndex::build(&docs(["", "", ""]), &LexicalSettings::default());
        let schemas = LexicalIndex::build(
            &docs([
                "patient Id insurance Card Read Whether the insurance card was read",
                "patient Id identifier",
                "invoice Id patient Id",
            ]),
            &LexicalSettings::default(),
        );
        // A word only a schema carries finds its tool.
        let card = schemas.query("card's been read");
        assert_eq!(bare.score(0, &bare.query("card's been read")).raw, 0.0);
        assert!(schemas.score(0, &card).raw > 0.0);
        assert_eq!(schemas.score(1, &card).raw, 0.0);
        // Every schema naming a patient id does not make `patient` or `id`
        // common, nor a tool's long schema shorten its own evidence: a tool
        // whose own text carries the words scores at least what it did.
        let q = schemas.query("patient id");
        assert!(schemas.score(1, &q).raw >= bare.score(1, &bare.query("patient id")).raw);
        assert!(schemas.score(1, &q).raw > schemas.score(2, &q).raw);
        // Weighted 0, the field is not indexed at all.
        let off = LexicalSettings {
            parameters_weight: 0.0,
            ..LexicalSettings::default()
        };
        let off = LexicalIndex::build(
            &docs(["card", "patient Id identifier", "invoice Id patient Id"]),
            &off,
        );
        for (text, doc) in [("patient id", 1), ("card", 0), ("invoice", 2)] {
            let (a, b) = (
                off.score(doc, &off.query(text)),
                bare.score(doc, &bare.query(text)),
            );
            assert_eq!(a.raw.to_bits(), b.raw.to_bits(), "{text}");
        }
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
    fn postings_give_every_document_its_own_score() {
        let (ix, _) = index();
        for text in [
            "book an appointment",
            "Nachsorgetermin",
            "present patient vital signs",
            "",
            "zzz",
        ] {
            let q = ix.query(text);
            let matched = ix.matches(&q);
            for doc in 0..ix.len() {
                let want = ix.score(doc, &q);
                let got = matched
                    .iter()
                    .find(|(d, _)| *d == doc)
                    .map_or(LexicalScore::default(), |(_, s)| *s);
                assert_eq!(got.raw.to_bits(), want.raw.to_bits(), "{text:?} doc {doc}");
                assert_eq!(
                    got.coverage.to_bits(),
                    want.coverage.to_bits(),
                    "{text:?} doc {doc}"
                );
            }
            assert!(matched.windows(2).all(|w| w[0].0 < w[1].0));
        }
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
