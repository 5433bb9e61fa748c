//! Whether a turn names a person: the structural signal that drives the
//! patient-resolve floor from the turn itself, not only from the tools
//! retrieval surfaced ("Frau Renate Kühn hat eine neue Handynummer" needs
//! the resolver before any tool can be called for her).
//!
//! Two shapes, read on the turn as written (letter case matters here, so
//! not on the folded turn), in any language:
//! - an honorific or the word patient, then a capitalised word
//!   (`Mrs. Featherstone`, `M. Karim Benali`, `Frau Kühn`, `Patientin Aylin`);
//! - two capitalised words in a row that do not open a sentence
//!   (`… for Rafael Ortega`), each a name's shape: an upper-case letter, then
//!   lower-case letters (hyphens and apostrophes inside allowed).
//!
//! No list of phrasings and no list of names: a false positive surfaces the
//! resolver for one turn (one tool), a false negative hides it.

/// Honorifics (and the words for a patient) that put a name after them,
/// lower case, without their trailing period. Doctors' titles are not here:
/// `Dr. Weber` names a colleague, not a patient to resolve.
const HONORIFICS: &[&str] = &[
    "mr",
    "mrs",
    "ms",
    "miss",
    "mx",
    "herr",
    "herrn",
    "frau",
    "m",
    "mme",
    "mlle",
    "monsieur",
    "madame",
    "mademoiselle",
    "patient",
    "patientin",
    "patienten",
    "patiente",
    "pt",
];

/// Doctors' titles: the name after one is a colleague's (`Dr. Anna Weber`).
const DOCTORS: &[&str] = &["dr", "prof", "doktor", "docteur", "pr"];

/// Whether `text` names a person (see the module doc).
pub fn names_a_person(text: &str) -> bool {
    let mut previous: Option<Word<'_>> = None;
    // The first word opens a sentence.
    let mut opens_sentence = true;
    // Inside a colleague's name (the capitalised words after a doctor's title).
    let mut colleague = false;
    for raw in text.split_whitespace() {
        let word = Word::of(raw, opens_sentence);
        colleague = word.is_name() && (colleague || previous.as_ref().is_some_and(Word::is_doctor));
        if word.is_doctor() || colleague {
            opens_sentence = false;
            previous = Some(word);
            continue;
        }
        if let Some(prev) = &previous {
            if word.is_name() {
                if prev.is_honorific() {
                    return true;
                }
                if prev.is_name() && !prev.opens_sentence {
                    return true;
                }
            }
        }
        opens_sentence = word.ends_sentence();
        previous = Some(word);
    }
    false
}

/// One whitespace-separated word: its letters without the punctuation
/// around them, and where it stands.
struct Word<'t> {
    /// The word without leading quotes and brackets, and without trailing
    /// punctuation.
    core: &'t str,
    /// The raw word, for its trailing punctuation.
    raw: &'t str,
    /// Whether it is the first word of a sentence.
    opens_sentence: bool,
}

impl<'t> Word<'t> {
    fn of(raw: &'t str, opens_sentence: bool) -> Self {
        let core = raw
            .trim_start_matches(|c: char| !c.is_alphanumeric())
            .trim_end_matches(|c: char| !c.is_alphanumeric());
        Word {
            core,
            raw,
            opens_sentence,
        }
    }

    /// A name's shape: an upper-case letter, then at least one letter, all
    /// lower case (a hyphen or apostrophe may join two such parts:
    /// `Müller-Lüdenscheidt`, `O'Neill`); possessive `'s` allowed.
    fn is_name(&self) -> bool {
        let core = self
            .core
            .strip_suffix("'s")
            .or_else(|| self.core.strip_suffix("’s"))
            .unwrap_or(self.core);
        let mut parts = core.split(['-', '\'', '’']);
        let Some(first) = parts.next() else {
            return false;
        };
        let capitalised = |p: &str| {
            let mut chars = p.chars();
            chars.next().is_some_and(char::is_uppercase)
                && p.chars().count() >= 2
                && chars.all(char::is_lowercase)
        };
        capitalised(first) && parts.all(|p| capitalised(p) || p.chars().all(char::is_lowercase))
    }

    fn is_doctor(&self) -> bool {
        DOCTORS.contains(&self.core.to_lowercase().as_str())
    }

    fn is_honorific(&self) -> bool {
        let lower = self.core.to_lowercase();
        HONORIFICS.contains(&lower.as_str())
            // `M.` is an honorific only with its period (`M Karim` is not).
            && (lower != "m" || self.raw.ends_with('.'))
    }

    /// Whether the next word opens a sentence: this one ends with `.`, `!`,
    /// `?` or `:` and is not an honorific (`Mr.`, `M.`).
    fn ends_sentence(&self) -> bool {
        let last = self
            .raw
            .trim_end_matches(['"', '\'', ')', '»', '”'])
            .chars()
            .last();
        matches!(last, Some('.' | '!' | '?' | ':')) && !self.is_honorific()
    }
}

#[cfg(test)]
mod tests {
    use super::names_a_person;

    #[test]
    fn honorifics_and_name_pairs_name_a_person() {
        for turn in [
            "Frau Renate Kühn hat eine neue Handynummer",
            "M. Karim Benali, il était à combien de tension ce matin ?",
            "What's Mr. Desmond Achterberg's latest potassium?",
            "I need to find a patient — Rafael Ortega, in his fifties.",
            "Search for the Patientin Aylin Demirtaş and show her card.",
            "Retrace-moi tout pour Mme Apolline Marchetti depuis 2023.",
            "bitte Termin für Herrn Özdemir am Donnerstag",
            "labs for jane and then Ana-Lucía Pérez-Gómez",
        ] {
            assert!(names_a_person(turn), "{turn}");
        }
    }

    #[test]
    fn sentence_openings_doctors_and_plain_turns_do_not() {
        for turn in [
            "Search for the patient born 1990 and open the chart.",
            "Show the latest potassium and creatinine.",
            "Order a CBC. Then Check the results tomorrow.",
            "Ask Dr. Weber about the discharge letter.",
            "Send it to Dr Anna Weber and Prof. Jean Martin today",
            "K+ 5.9, Krea 2.1 — what now?",
            "refer to ENT and book MRI",
            "M Karim",
        ] {
            assert!(!names_a_person(turn), "{turn}");
        }
    }
}
