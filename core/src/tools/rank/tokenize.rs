//! Language-aware tokenising for English, German and French.
//!
//! Turns arrive without a language tag and often mix languages (a German
//! prompt with an English drug name; tool keywords in three languages), so
//! every text goes through the same steps and both sides of a match are
//! normalised alike:
//!
//! 1. [`fold`]: lowercase and strip diacritics (`é` → `e`, `ü` → `u`, `ß` → `ss`,
//!    `œ` → `oe`), so `Röntgen`/`Rontgen` and `résultat`/`resultat` meet;
//! 2. split on anything that is not a letter or a digit;
//! 3. drop the stopwords of all three languages (function words only, minus a
//!    few that are content words in another of the languages), except a word
//!    written as an acronym (`HAS`, `OR`: two or more letters, all capitals),
//!    which is a name;
//! 4. [`stem`]: a light suffix stripper covering the common English, German and
//!    French inflections (plurals, `-ing`/`-ed`, `-en`/`-ungen`, `-es`/`-e`);
//! 5. German compounds: [`split_compound`] finds the head noun (and, when it
//!    is known, the modifier) of a long token against a vocabulary, so
//!    `Kontrolltermin` also yields `termin` when the index knows `termin`;
//! 6. on the query side of a turn that reads as French, a verb form also asks
//!    for its infinitive when the index knows it (`préviens` → `prévenir`,
//!    [`super::french`]).

use super::french;

/// Lowercases and strips diacritics. Letters outside Latin-1 and Latin
/// Extended-A are lowercased and otherwise kept.
pub fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        for l in c.to_lowercase() {
            match l {
                'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'ā' | 'ă' | 'ą' => out.push('a'),
                'ç' | 'ć' | 'ĉ' | 'č' => out.push('c'),
                'ď' | 'đ' => out.push('d'),
                'è' | 'é' | 'ê' | 'ë' | 'ē' | 'ė' | 'ę' | 'ě' => out.push('e'),
                'ì' | 'í' | 'î' | 'ï' | 'ī' | 'į' | 'ı' => out.push('i'),
                'ñ' | 'ń' | 'ň' => out.push('n'),
                'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'ō' | 'ő' => out.push('o'),
                'ù' | 'ú' | 'û' | 'ü' | 'ū' | 'ů' | 'ű' | 'ų' => out.push('u'),
                'ý' | 'ÿ' => out.push('y'),
                'ś' | 'š' | 'ş' => out.push('s'),
                'ź' | 'ż' | 'ž' => out.push('z'),
                'ł' => out.push('l'),
                'ř' => out.push('r'),
                'ť' => out.push('t'),
                'ß' => out.push_str("ss"),
                'œ' => out.push_str("oe"),
                'æ' => out.push_str("ae"),
                other => out.push(other),
            }
        }
    }
    out
}

/// Function words of English, German and French (already folded).
///
/// Words that carry meaning in one of the other languages are left out on
/// purpose: `die` (English verb), `war`, `not`/`note`, `son` (French "his"
/// but English "son").
const STOPWORDS: &[&str] = &[
    // English
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "before", "being", "but", "by", "can", "could", "did", "do", "does", "for",
    "from", "get", "give", "had", "has", "have", "he", "her", "here", "hers", "him", "his", "how",
    "i", "if", "in", "into", "is", "it", "its", "just", "let", "me", "my", "now", "of", "on", "or",
    "our", "please", "she", "should", "so", "some", "than", "that", "the", "their", "them", "then",
    "there", "these", "they", "this", "those", "to", "up", "us", "was", "we", "were", "what",
    "when", "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your",
    // German
    "aber", "alle", "als", "am", "auch", "auf", "aus", "bei", "bin", "bis", "bitte", "da", "dann",
    "das", "dass", "dem", "den", "der", "des", "dich", "dir", "doch", "du", "durch", "ein", "eine",
    "einem", "einen", "einer", "eines", "er", "es", "fur", "hat", "hatte", "ich", "ihm", "ihn",
    "ihr", "ihre", "ihrem", "ihren", "im", "ist", "ja", "kann", "kannst", "mal", "mich", "mir",
    "mit", "noch", "nach", "oder", "sein", "seine", "seinem", "seinen", "sich", "sie", "sind",
    "uber", "um", "und", "uns", "vom", "von", "vor", "wie", "wir", "wird", "zu", "zum", "zur",
    // French
    "au", "aux", "avec", "ce", "ces", "cet", "cette", "dans", "du", "elle", "en", "est", "et", "il",
    "ils", "je", "la", "le", "les", "leur", "lui", "ma", "mes", "moi", "mon", "ne", "nous", "ou",
    "par", "pas", "pour", "qu", "que", "qui", "sa", "se", "ses", "sur", "ta", "te", "tes", "toi",
    "ton", "tu", "un", "une", "vos", "votre", "vous", "svp", "d", "l", "j", "s", "c", "n", "y",
];

/// Whether a folded word is a stopword (asked for every word of every turn:
/// hashed, not a scan of the list).
pub fn is_stopword(word: &str) -> bool {
    static SET: std::sync::LazyLock<rustc_hash::FxHashSet<&'static str>> =
        std::sync::LazyLock::new(|| STOPWORDS.iter().copied().collect());
    SET.contains(word)
}

/// Suffix rules, longest first: (suffix, replacement). Applied once.
const SUFFIXES: &[(&str, &str)] = &[
    ("ungen", "ung"),
    ("ies", "y"),
    ("ing", ""),
    ("ed", ""),
    ("es", ""),
    ("en", ""),
    ("e", ""),
    ("s", ""),
];

/// The shortest stem a suffix rule may leave.
const MIN_STEM: usize = 3;

/// Light multilingual stemming of one folded token: strips the first (longest)
/// matching inflection suffix when at least [`MIN_STEM`] characters remain.
/// Digits-bearing tokens (codes, doses) are kept as they are.
pub fn stem(token: &str) -> String {
    let (base, replacement) = stem_parts(token);
    let mut out = String::with_capacity(base.len() + replacement.len());
    out.push_str(base);
    out.push_str(replacement);
    out
}

/// [`stem`] as the token's kept prefix and the replacement that follows it.
fn stem_parts(token: &str) -> (&str, &'static str) {
    if token.chars().any(|c| c.is_ascii_digit()) {
        return (token, "");
    }
    for (suffix, replacement) in SUFFIXES {
        if let Some(base) = token.strip_suffix(suffix) {
            // `ss` is a German/English root ending, not a plural.
            if *suffix == "s" && (base.ends_with('s') || base.ends_with('u') || base.ends_with('i'))
            {
                continue;
            }
            if base.chars().count() >= MIN_STEM {
                return (base, replacement);
            }
        }
    }
    (token, "")
}

/// Whether `known` holds the [`stem`] of `token`, without a new string
/// for most tokens (`scratch` holds a stem with a replacement).
fn stem_known(token: &str, known: &impl Fn(&str) -> bool, scratch: &mut String) -> bool {
    match stem_parts(token) {
        (base, "") => known(base),
        (base, replacement) => {
            scratch.clear();
            scratch.push_str(base);
            scratch.push_str(replacement);
            known(scratch)
        }
    }
}

/// Splits folded text into raw words (letters and digits), without stopword
/// removal or stemming.
pub fn words(folded: &str) -> impl Iterator<Item = &str> {
    folded
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// Whether a word as written is an acronym: two or more letters, every
/// letter uppercase ("HAS", "NICE", "OR", "US"). An acronym is a name, not
/// the function word its letters spell, so it is never dropped as a stopword.
fn is_acronym(word: &str) -> bool {
    let mut letters = 0usize;
    for c in word.chars() {
        if c.is_alphabetic() {
            if !c.is_uppercase() {
                return false;
            }
            letters += 1;
        }
    }
    letters >= 2
}

/// The acronyms of a text as written, folded ("Que dit la HAS" → `has`).
pub fn acronyms(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| is_acronym(w))
        .map(fold)
}

/// The folded words of free text that carry content: split as written,
/// folded, stopwords dropped unless the word is written as an acronym.
pub fn content_words(text: &str) -> Vec<String> {
    content_words_seen(text, |_| {})
}

/// [`content_words`], showing every folded word, stopwords included, to
/// `seen` on the way (one pass and one fold per word).
fn content_words_seen(text: &str, mut seen: impl FnMut(&str)) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .filter_map(|w| {
            let folded = fold(w);
            seen(&folded);
            (!is_stopword(&folded) || is_acronym(w)).then_some(folded)
        })
        .collect()
}

/// Tokenises free text: fold, split, drop stopwords, stem.
pub fn tokens(text: &str) -> Vec<String> {
    content_words(text).iter().map(|w| stem(w)).collect()
}

/// The folded words of an identifier (`patient.search.smart`,
/// `getHealthWorkforce`, `calculate_triangle_area`): camelCase split, then
/// split and stopword-filtered as free text, not stemmed.
pub fn identifier_words(id: &str) -> Vec<String> {
    let folded = fold(&camel_spaced(id));
    words(&folded)
        .filter(|w| !is_stopword(w))
        .map(str::to_owned)
        .collect()
}

/// An identifier with a space before each capital that follows a lowercase
/// letter or a digit: `insuranceCardRead` → `insurance Card Read`. Other
/// separators stay; free-text splitting reads them.
pub fn camel_spaced(id: &str) -> String {
    let mut spaced = String::with_capacity(id.len() + 8);
    let mut prev_lower = false;
    for c in id.chars() {
        if c.is_uppercase() && prev_lower {
            spaced.push(' ');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        spaced.push(c);
    }
    spaced
}

/// Tokenises an identifier: [`identifier_words`], stemmed.
pub fn identifier_tokens(id: &str) -> Vec<String> {
    identifier_words(id).iter().map(|w| stem(w)).collect()
}

/// Tokens shorter than this are never split as compounds.
const MIN_COMPOUND: usize = 8;
/// Shortest part a compound split may produce.
const MIN_PART: usize = 4;
/// German linking elements between the parts of a compound (`Patient-en-akte`).
const LINKERS: &[&str] = &["s", "es", "n", "en", "e"];

/// Finds the parts of a long (German-style) compound that the vocabulary knows.
///
/// `word` is a folded, unstemmed word; `known` answers whether a stemmed part
/// is in the vocabulary. Returns the stemmed head (the longest known suffix of
/// at least four characters) and, when the rest (minus a linking element) is
/// also known, the stemmed modifier; with no known head, the longest known
/// modifier. Returns nothing for short words or when no part is known.
/// `Kontrolltermin` → `[kontroll, termin]` when both are known.
pub fn split_compound(word: &str, known: impl Fn(&str) -> bool) -> Vec<String> {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    if chars.len() < MIN_COMPOUND {
        return Vec::new();
    }
    let mut scratch = String::new();
    // Split points leave at least MIN_PART characters on each side; the
    // longest head wins (the earliest split point).
    for (i, _) in chars
        .iter()
        .skip(MIN_PART)
        .take(chars.len().saturating_sub(2 * MIN_PART) + 1)
    {
        let Some((modifier, head)) = word.split_at_checked(*i) else {
            continue;
        };
        if !stem_known(head, &known, &mut scratch) {
            continue;
        }
        let mut parts = Vec::with_capacity(2);
        let modifier_known = std::iter::once(modifier)
            .chain(LINKERS.iter().filter_map(|l| modifier.strip_suffix(l)))
            .filter(|m| m.chars().count() >= MIN_PART)
            .find(|m| stem_known(m, &known, &mut scratch));
        if let Some(m) = modifier_known {
            parts.push(stem(m));
        }
        parts.push(stem(head));
        return parts;
    }
    // No known head: the longest known modifier still names the domain
    // (`Blutdruckkontrolle` → `blutdruck`).
    for (i, _) in chars
        .iter()
        .rev()
        .skip(MIN_PART - 1)
        .take(chars.len().saturating_sub(2 * MIN_PART) + 1)
    {
        let Some((modifier, _)) = word.split_at_checked(*i) else {
            continue;
        };
        if modifier.chars().count() >= MIN_PART && stem_known(modifier, &known, &mut scratch) {
            return vec![stem(modifier)];
        }
    }
    Vec::new()
}

/// Tokenises a query against a vocabulary (`known`: whether a stem is in
/// it): [`tokens`] plus the known parts of compounds, plus the tokens of what
/// a shorthand word stands for (`shorthand`: a folded word → the tokens it
/// stands for), plus, with `french_verbs` on a turn that reads as French,
/// the known infinitive of a verb form ([`super::french`]). Each token
/// appears once, in first-seen order.
pub fn query_tokens<'s>(
    text: &str,
    known: impl Fn(&str) -> bool,
    shorthand: impl Fn(&str) -> Option<&'s [String]>,
    french_verbs: bool,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let push = |t: String, out: &mut Vec<String>| {
        if !out.contains(&t) {
            out.push(t);
        }
    };
    let mut language = french::Tally::default();
    let words = content_words_seen(text, |w| {
        if french_verbs {
            language.count(w);
        }
    });
    let french = french_verbs && language.is_french();
    for w in words {
        let w = w.as_str();
        push(stem(w), &mut out);
        for part in split_compound(w, &known) {
            push(part, &mut out);
        }
        for t in shorthand(w).unwrap_or_default() {
            push(t.clone(), &mut out);
        }
        if french {
            if let Some(verb) = french::infinitive(w).map(|v| stem(&v)).filter(|v| known(v)) {
                push(verb, &mut out);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn folding_strips_accents_in_all_three_languages() {
        assert_eq!(fold("Röntgen Thorax, Größe"), "rontgen thorax, grosse");
        assert_eq!(
            fold("Décaler le rendez-vous, cœur"),
            "decaler le rendez-vous, coeur"
        );
        assert_eq!(fold("ÉCHOGRAPHIE"), "echographie");
    }

    #[test]
    fn a_stopword_written_as_an_acronym_is_a_name_and_kept() {
        assert_eq!(tokens("Que dit la HAS"), ["dit", "has"]);
        assert_eq!(tokens("que dit la has"), ["dit"]);
        assert_eq!(tokens("What does NICE say"), ["nic", "say"]);
        // One capital is no acronym: a sentence's first word stays a stopword.
        assert_eq!(tokens("The OR list"), ["or", "list"]);
        assert_eq!(
            acronyms("Que dit la HAS, l'ESC ou S3? Dr Roux").collect::<Vec<_>>(),
            ["has", "esc"]
        );
    }

    #[test]
    fn stopwords_of_each_language_are_dropped() {
        assert_eq!(tokens("Show me the lab results"), ["show", "lab", "result"]);
        assert_eq!(
            tokens("Zeig mir den letzten Blutdruck"),
            ["zeig", "letzt", "blutdruck"]
        );
        assert_eq!(
            tokens("Afficher la dernière tension"),
            ["afficher", "dernier", "tension"]
        );
    }

    #[test]
    fn stemming_conflates_inflections() {
        assert_eq!(stem("appointments"), stem("appointment"));
        assert_eq!(stem("booking"), stem("booked"));
        assert_eq!(stem("patienten"), "patient");
        assert_eq!(stem("untersuchungen"), stem("untersuchung"));
        assert_eq!(stem("notes"), stem("note"));
        assert_eq!(stem("class"), "class");
        assert_eq!(stem("e11.9"), "e11.9");
        assert_eq!(stem("bus"), "bus");
    }

    #[test]
    fn identifiers_split_on_dots_underscores_and_camel_case() {
        assert_eq!(
            identifier_tokens("patient.search.smart"),
            ["patient", "search", "smart"]
        );
        assert_eq!(
            identifier_tokens("getHealthWorkforce"),
            ["health", "workforc"]
        );
        assert_eq!(
            identifier_tokens("calculate_triangle_area"),
            ["calculat", "triangl", "area"]
        );
    }

    #[test]
    fn compounds_split_against_the_vocabulary() {
        let vocab: BTreeSet<String> = ["termin", "kontroll", "blutdruck"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            split_compound("kontrolltermin", |p| vocab.contains(p)),
            ["kontroll", "termin"]
        );
        assert_eq!(
            split_compound("nachsorgetermin", |p| vocab.contains(p)),
            ["termin"]
        );
        assert_eq!(
            split_compound("blutdruckmessung", |p| vocab.contains(p)),
            ["blutdruck"]
        );
        assert!(split_compound("zahnarztpraxis", |p| vocab.contains(p)).is_empty());
        let vocab2: BTreeSet<String> = ["messung", "blutdruck"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            split_compound("blutdruckmessung", |p| vocab2.contains(p)),
            ["blutdruck", "messung"]
        );
        // Linking element: Patient-en-akte.
        let vocab3: BTreeSet<String> = ["patient", "akt"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            split_compound("patientenakte", |p| vocab3.contains(p)),
            ["patient", "akt"]
        );
        assert!(split_compound("termin", |_| true).is_empty());
    }

    #[test]
    fn query_tokens_add_compound_parts_once() {
        let vocab: BTreeSet<String> = ["termin"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            query_tokens(
                "Kontrolltermin und Termin",
                |p| vocab.contains(p),
                |_| None,
                true
            ),
            ["kontrolltermin", "termin"]
        );
    }

    #[test]
    fn a_french_turn_also_asks_for_the_known_infinitive_of_its_verbs() {
        let vocab: BTreeSet<String> = ["prevenir", "annuler"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let known = |p: &str| vocab.contains(p);
        let turn = "Enregistre sa glycémie et préviens l'interne";
        assert_eq!(
            query_tokens(turn, known, |_| None, true),
            ["enregistr", "glycemi", "previen", "prevenir", "intern"]
        );
        // Switched off (`lexical.frenchVerbs: false`).
        assert_eq!(
            query_tokens(turn, known, |_| None, false),
            ["enregistr", "glycemi", "previen", "intern"]
        );
        // An infinitive the vocabulary does not know adds nothing.
        assert!(!query_tokens(
            "Enregistre sa glycémie et préviens-le",
            known,
            |_| None,
            true
        )
        .contains(&"enregistrer".to_owned()));
        // Not on a turn that reads as English or German.
        assert_eq!(
            query_tokens("Annule the appointment for her", known, |_| None, true),
            ["annul", "appointment"]
        );
    }

    proptest::proptest! {
        /// Whatever the text, the French step only adds: every token without
        /// it is still there, and each token it adds is known.
        #[test]
        fn the_french_step_only_adds_known_infinitives(
            text in r"(\PC{0,12}|(le|la|et|du|pour|annule|envoie|previens|prescris|ouvre|the|und|[a-zé]{1,9}) ){0,10}"
        ) {
            let vocab: BTreeSet<String> = ["prevenir", "annuler", "envoyer", "prescrire", "ouvrir"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            let known = |p: &str| vocab.contains(p);
            let on = query_tokens(&text, known, |_| None, true);
            let off = query_tokens(&text, known, |_| None, false);
            for t in &off {
                proptest::prop_assert!(on.contains(t), "{t} lost from {on:?}");
            }
            for t in on.iter().filter(|t| !off.contains(t)) {
                proptest::prop_assert!(vocab.contains(t), "{t} added but not known");
            }
        }
    }

    #[test]
    fn non_latin_text_is_kept_as_words() {
        assert_eq!(tokens("血压 давление"), ["血压", "давление"]);
    }
}
