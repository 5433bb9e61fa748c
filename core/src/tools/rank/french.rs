//! French verb forms read as their infinitive, on turns that read as French.
//!
//! Tool texts name actions by their infinitive (`prévenir`, `annuler`,
//! `envoyer un message`, `prescrire un bilan`); a clinician types the
//! imperative or a participle (`préviens l'interne`, `annule`, `envoie`,
//! `prescris`, `annulé`). The light stemmer of [`super::tokenize`] does not
//! meet the two, and no suffix rule can without also merging English and
//! German words (`note`/`noter`, `Pfleger`/`Pflege`). So this step is
//! structural, gated twice:
//!
//! 1. the turn must read as French ([`Tally`]: more French function
//!    words than English or German ones);
//! 2. a candidate infinitive ([`infinitive`]: the regular `-er` and `-ir`
//!    conjugations, and the verb families whose stems change — `-venir`,
//!    `-tenir`, `-prendre`, `-mettre`, `-crire`, `-vrir`) is used only when
//!    the registry's vocabulary knows it, so a form that happens to look
//!    like a verb adds nothing unless a tool is written with that verb.
//!
//! Words are folded (lowercase, no accents) on both sides.

use rustc_hash::FxHashMap;
use std::sync::LazyLock;

/// Function words of French (folded).
/// Elided forms (`l'`, `d'`) are split off as one letter and are not
/// counted: `l` and `d` are initials too.
const FRENCH: &[&str] = &[
    "le", "la", "les", "des", "du", "au", "aux", "et", "est", "une", "un", "pour", "dans", "avec",
    "sur", "sa", "ses", "lui", "elle", "il", "je", "tu", "pas", "qui", "que", "ce", "cette", "mon",
    "ma", "mes", "vous", "nous", "leur", "moi", "ne", "son", "par", "ou", "deja", "de", "quel",
    "quels", "quelle", "quelles",
];

/// Function words of English (folded) that French and German do not share.
const ENGLISH: &[&str] = &[
    "the", "and", "to", "of", "is", "for", "with", "her", "his", "she", "he", "it", "this", "that",
    "on", "in", "me", "my", "you", "what", "at", "from", "be", "has", "was",
];

/// Function words of German (folded). `des` is an article in both German
/// and French ("Abruf des Strompreises"): it counts for both.
const GERMAN: &[&str] = &[
    "des", "der", "die", "das", "und", "ist", "mit", "fur", "ein", "eine", "den", "dem", "zu",
    "von", "sie", "er", "bitte", "ich", "nicht", "auf", "im", "mir", "ihr", "ihre", "sein",
    "seine",
];

/// Counts the function words of each language in a turn, word by word
/// (so the tokeniser's one pass over the turn can feed it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    french: usize,
    english: usize,
    german: usize,
}

impl Tally {
    /// Counts one folded word.
    pub fn count(&mut self, word: &str) {
        // Asked of every word of every turn: one hashed lookup, not three scans.
        static LANGUAGE: LazyLock<FxHashMap<&'static str, [bool; 3]>> = LazyLock::new(|| {
            let mut m: FxHashMap<&'static str, [bool; 3]> = FxHashMap::default();
            for (i, list) in [FRENCH, ENGLISH, GERMAN].into_iter().enumerate() {
                for w in list {
                    if let Some(flag) = m.entry(w).or_default().get_mut(i) {
                        *flag = true;
                    }
                }
            }
            m
        });
        if let Some([f, e, d]) = LANGUAGE.get(word) {
            self.french += usize::from(*f);
            self.english += usize::from(*e);
            self.german += usize::from(*d);
        }
    }

    /// Whether the words counted read as French: more French function words
    /// than English or German ones, and at least one (a code-switched turn
    /// counts as the language it is mostly written in; "Débuter la
    /// consultation" is French by its one article).
    pub fn is_french(&self) -> bool {
        self.french > self.english && self.french > self.german
    }
}

/// Verb families whose stem changes with the form: (endings, infinitive
/// ending). A word ending in one of the endings after at least one letter
/// may be the verb `prefix + infinitive ending`
/// (`previens` → `prevenir`, `prescris` → `prescrire`, `remets` → `remettre`).
const FAMILIES: &[(&[&str], &str)] = &[
    (
        &[
            "viennent", "venons", "viens", "vient", "venez", "venue", "venus", "venu",
        ],
        "venir",
    ),
    (
        &[
            "tiennent", "tenons", "tiens", "tient", "tenez", "tenue", "tenus", "tenu",
        ],
        "tenir",
    ),
    (
        &[
            "prennent", "prenons", "prends", "prenez", "prend", "prise", "pris",
        ],
        "prendre",
    ),
    (
        &["mettons", "mettez", "mettent", "mets", "met", "mise", "mis"],
        "mettre",
    ),
    (
        &[
            "crivons", "crivez", "crivent", "crite", "crits", "cris", "crit",
        ],
        "crire",
    ),
    (
        &["vrons", "vrez", "vrent", "verte", "vert", "vres", "vre"],
        "vrir",
    ),
];

/// Regular conjugations: (ending, infinitive ending), longest first. The
/// first that leaves a stem of at least three letters gives the candidate
/// (`cree`: `-ee` would leave two, `-e` gives `creer`). A third-group
/// infinitive in `-re` (`prendre`) gives a word no tool is written with.
const REGULAR: &[(&str, &str)] = &[
    // second group: finis, remplissez, choisit
    ("issons", "ir"),
    ("issez", "ir"),
    ("issent", "ir"),
    // first group with a stem change: appelle, jette, envoie, paie, appuie
    ("elle", "eler"),
    ("ette", "eter"),
    ("oient", "oyer"),
    ("oies", "oyer"),
    ("oie", "oyer"),
    ("aie", "ayer"),
    ("uie", "uyer"),
    // first group: annulez, annulons, annulent, annulees, annulee, annule(s)
    ("ons", "er"),
    ("ent", "er"),
    ("ees", "er"),
    ("ez", "er"),
    ("ee", "er"),
    ("es", "er"),
    ("e", "er"),
    ("is", "ir"),
    ("it", "ir"),
];

/// The shortest stem a regular rule may leave.
const MIN_STEM: usize = 3;

/// Words that end like a verb form and are none: `rendez` is what folding
/// and splitting leave of the noun `rendez-vous`.
const NOT_VERBS: &[&str] = &["rendez"];

/// The infinitive a folded French word may be a form of: the verb family
/// whose ending it has, else the first regular conjugation that fits. An
/// infinitive itself (`annuler`, `prevenir`) gives nothing: it already
/// meets the tool text's word.
pub fn infinitive(word: &str) -> Option<String> {
    if word.chars().any(|c| !c.is_ascii_lowercase())
        || word.ends_with("er")
        || word.ends_with("ir")
        || NOT_VERBS.contains(&word)
    {
        return None;
    }
    let family = FAMILIES.iter().find_map(|(endings, infinitive)| {
        endings
            .iter()
            .find_map(|e| word.strip_suffix(e))
            .map(|prefix| (prefix, infinitive))
    });
    if let Some((prefix, infinitive)) = family {
        // The bare verbs are support verbs, their meaning the noun's
        // (`prend` in "quels médicaments prend-elle" is no appointment's
        // `prendre rendez-vous`); with a prefix they are verbs of their own
        // (`prévenir`, `transmettre`, `prescrire`).
        return (!prefix.is_empty()).then(|| format!("{prefix}{infinitive}"));
    }
    REGULAR.iter().find_map(|(e, i)| {
        word.strip_suffix(e)
            .filter(|s| s.len() >= MIN_STEM)
            .map(|s| format!("{s}{i}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        super::super::tokenize::words(&super::super::tokenize::fold(text))
            .map(str::to_owned)
            .collect()
    }

    fn french(text: &str) -> bool {
        let mut tally = Tally::default();
        for w in words(text) {
            tally.count(&w);
        }
        tally.is_french()
    }

    #[test]
    fn a_turn_reads_as_the_language_of_most_of_its_function_words() {
        assert!(french(
            "Enregistre sa glycémie et préviens l'interne de garde."
        ));
        assert!(french(
            "Mets-lui un RDV next Tuesday at 10 avec le Dr Martin, please."
        ));
        assert!(!french(
            "Book her in with the GP on Tuesday and tell the nurse."
        ));
        assert!(!french("Bitte den Termin mit der Patientin verschieben."));
        assert!(french("Débuter la consultation de Mme Petit maintenant."));
        // No function word, or as many of another language: not French.
        assert!(!french("Verlegung Zi 8 Bett 1"));
        assert!(!french("Abruf einer regionalen Prognose des Strompreises."));
        assert!(!french("Annule le RDV for her"));
        assert!(!french(""));
    }

    #[test]
    fn imperatives_and_participles_give_their_infinitive() {
        for (form, verb) in [
            ("previens", "prevenir"),
            ("obtiens", "obtenir"),
            ("annule", "annuler"),
            ("annulez", "annuler"),
            ("annulee", "annuler"),
            ("annulons", "annuler"),
            ("envoie", "envoyer"),
            ("appelle", "appeler"),
            ("cree", "creer"),
            ("enregistre", "enregistrer"),
            ("prescris", "prescrire"),
            ("prescrit", "prescrire"),
            ("remets", "remettre"),
            ("transmets", "transmettre"),
            ("admis", "admettre"),
            ("reprends", "reprendre"),
            ("reprise", "reprendre"),
            ("ouvre", "ouvrir"),
            ("ouvert", "ouvrir"),
            ("remplissez", "remplir"),
            ("finis", "finir"),
        ] {
            assert_eq!(infinitive(form).as_deref(), Some(verb), "{form}");
        }
    }

    #[test]
    fn infinitives_nouns_short_words_and_codes_give_nothing() {
        for word in ["annuler", "prevenir", "le", "e11", "crp", "rendez", "ecg"] {
            assert_eq!(infinitive(word), None, "{word}");
        }
    }

    proptest::proptest! {
        #[test]
        fn an_infinitive_is_another_word_ending_like_one(word in "[a-z]{0,14}|\\PC{0,10}") {
            if let Some(verb) = infinitive(&word) {
                proptest::prop_assert_ne!(&verb, &word);
                proptest::prop_assert!(
                    ["er", "ir", "re"].iter().any(|e| verb.ends_with(e)),
                    "{word} gave {verb}"
                );
            }
        }
    }
}
