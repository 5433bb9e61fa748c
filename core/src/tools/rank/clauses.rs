//! Multi-intent turns: a turn split into clauses at en/de/fr conjunctions and
//! punctuation, so each intent can be retrieved on its own, and the clauses'
//! rankings merged under the budget.
//!
//! "Record BP 160/95 mmHg, then create a task for the doctor" asks for two
//! tools; the whole turn's embedding sits between them and can rank either
//! one below unrelated tools. Each clause's own ranking puts its tool first.

use super::tokenize::fold;
use super::Candidate;
use serde::{Deserialize, Serialize};

/// The most clauses a turn is split into: each is embedded and searched on
/// its own, and no phase has places for more (a turn of thousands of commas
/// must not cost thousands of searches).
pub const MAX_CLAUSES: usize = 12;

/// Clause splitting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClauseSettings {
    /// Whether multi-clause turns retrieve each clause as well (control
    /// embeds the turn and its clauses in one request). On by default: on
    /// the tune parts it raised full-gold recall on the multi-tool sets
    /// (Seal-Tools, StableToolBench, API-Bank), held the clinical sets and
    /// cost BFCL two queries of 359; see `eval/RESULTS.md`.
    pub enabled: bool,
    /// A piece with fewer words joins the clause before it ("Dr." is no
    /// clause; neither is an aside, "…, no complications, …").
    pub min_words: usize,
    /// How many of each clause's best hits join the turn's hits.
    pub per_clause_k: usize,
    /// Words that separate clauses (folded: lowercase, no diacritics).
    pub conjunctions: Vec<String>,
}

impl Default for ClauseSettings {
    fn default() -> Self {
        let words = [
            // en
            "and",
            "then",
            "also",
            "plus", // de
            "und",
            "dann",
            "sowie",
            "ausserdem",
            "anschliessend",
            "danach", // fr
            "et",
            "puis",
            "ensuite",
            "aussi",
        ];
        ClauseSettings {
            enabled: true,
            min_words: 4,
            per_clause_k: 1,
            conjunctions: words.iter().map(|w| (*w).to_owned()).collect(),
        }
    }
}

/// One word of a turn: its byte span and whether a clause ends after it
/// (sentence punctuation or a comma follows).
struct Word {
    start: usize,
    end: usize,
    ends_clause: bool,
}

fn words(text: &str) -> Vec<Word> {
    let mut out: Vec<Word> = Vec::new();
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric()
            || matches!(c, '\'' | '-' | '/' | '.' | ':' | '°' | '%') && start.is_some()
        {
            start.get_or_insert(i);
            continue;
        }
        if let Some(s) = start.take() {
            out.push(Word {
                start: s,
                end: i,
                ends_clause: false,
            });
        }
        if matches!(c, ',' | ';' | '!' | '?') {
            if let Some(last) = out.last_mut() {
                last.ends_clause = true;
            }
        }
    }
    if let Some(s) = start {
        out.push(Word {
            start: s,
            end: text.len(),
            ends_clause: false,
        });
    }
    // A word ending in '.' or ':' ends a clause (a dot inside a word, as in
    // "E11.9" or "12.03.1984", does not).
    for w in out.iter_mut() {
        let trimmed = text.get(w.start..w.end).unwrap_or("");
        if let Some(stem) = trimmed.strip_suffix(['.', ':']) {
            w.end = w.start + stem.len();
            // "Dr.", "Mrs.", "St." are titles, not sentence ends.
            let title = stem.chars().count() <= 3 && stem.starts_with(char::is_uppercase);
            w.ends_clause = !title || trimmed.ends_with(':');
        }
    }
    out
}

impl ClauseSettings {
    /// The clauses of a turn as slices of it, in order. A turn with one
    /// intent comes back as one clause (the whole turn, trimmed).
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut spans: Vec<(usize, usize, usize)> = Vec::new(); // start, end, words
        let mut current: Option<(usize, usize, usize)> = None;
        for w in words(text) {
            let word = fold(text.get(w.start..w.end).unwrap_or(""));
            if self.conjunctions.contains(&word) {
                spans.extend(current.take());
                continue;
            }
            let span = current.get_or_insert((w.start, w.end, 0));
            span.1 = w.end;
            span.2 += 1;
            if w.ends_clause {
                spans.extend(current.take());
            }
        }
        spans.extend(current);
        // Short pieces join the clause before them (the first joins the next),
        // and every piece past the most clauses joins the last one.
        let mut merged: Vec<(usize, usize, usize)> = Vec::new();
        for s in spans {
            let full = merged.len() >= MAX_CLAUSES;
            match merged.last_mut() {
                Some(last) if full || s.2 < self.min_words || last.2 < self.min_words => {
                    last.1 = s.1;
                    last.2 += s.2;
                }
                _ => merged.push(s),
            }
        }
        let out: Vec<&str> = merged
            .into_iter()
            .filter_map(|(s, e, _)| text.get(s..e))
            .collect();
        if out.is_empty() {
            vec![text.trim()]
        } else {
            out
        }
    }
}

/// The turn's hits followed by each clause's best `per_clause` hits, taken in
/// turns (the turn's best, each clause's best, the turn's second, …) so a
/// clause's tool is never the one the budget cuts; each tool once, keeping
/// its first place.
pub fn interleave(
    turn: Vec<Candidate>,
    clauses: Vec<Vec<Candidate>>,
    per_clause: usize,
) -> Vec<Candidate> {
    let mut lists: Vec<std::vec::IntoIter<Candidate>> = Vec::with_capacity(clauses.len() + 1);
    lists.push(turn.into_iter());
    lists.extend(clauses.into_iter().map(|mut c| {
        c.truncate(per_clause);
        c.into_iter()
    }));
    let mut out: Vec<Candidate> = Vec::new();
    loop {
        let mut any = false;
        for list in lists.iter_mut() {
            if let Some(c) = list.next() {
                any = true;
                if !out.iter().any(|o| o.name == c.name) {
                    out.push(c);
                }
            }
        }
        if !any {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tools::Reason;

    /// Split with pieces of two words kept apart, to see every boundary.
    fn split(text: &str) -> Vec<&str> {
        ClauseSettings {
            min_words: 2,
            ..ClauseSettings::default()
        }
        .split(text)
    }

    #[test]
    fn a_turn_of_many_asks_is_at_most_the_most_clauses_and_keeps_its_text() {
        let text = "order the lab panel, ".repeat(5000) + "then book a follow up visit";
        let clauses = ClauseSettings::default().split(&text);
        assert_eq!(clauses.len(), MAX_CLAUSES);
        assert_eq!(clauses[0], "order the lab panel");
        let last = clauses[MAX_CLAUSES - 1];
        assert!(last.ends_with("then book a follow up visit"), "{last}");
        assert!(
            last.starts_with("order the lab panel, order the lab panel"),
            "{last}"
        );
    }

    #[test]
    fn the_default_keeps_a_short_aside_in_its_clause() {
        let text = "Write the procedure note for the pleural tap, no complications, and send the fluid for LDH and protein.";
        assert_eq!(
            ClauseSettings::default().split(text),
            [
                "Write the procedure note for the pleural tap, no complications",
                "send the fluid for LDH and protein"
            ]
        );
        assert_eq!(
            split(text),
            [
                "Write the procedure note for the pleural tap",
                "no complications",
                "send the fluid for LDH and protein"
            ]
        );
    }

    #[test]
    fn conjunctions_and_punctuation_split_in_three_languages() {
        assert_eq!(
            split("Record BP 160/95 mmHg and pulse 102 bpm, then create a task for the doctor to review."),
            ["Record BP 160/95 mmHg", "pulse 102 bpm", "create a task for the doctor to review"]
        );
        assert_eq!(
            split("Termin buchen und danach den Arztbrief schicken"),
            ["Termin buchen", "den Arztbrief schicken"]
        );
        assert_eq!(
            split("Prendre un rendez-vous puis envoyer le courrier au médecin"),
            ["Prendre un rendez-vous", "envoyer le courrier au médecin"]
        );
    }

    #[test]
    fn one_intent_stays_whole_and_short_pieces_rejoin() {
        assert_eq!(split("Show the vital signs"), ["Show the vital signs"]);
        assert_eq!(
            split("Show Dr. Weber's week in calendar view"),
            ["Show Dr. Weber's week in calendar view"]
        );
        assert_eq!(
            split("Order a CRP and ferritin"),
            ["Order a CRP and ferritin"]
        );
        assert_eq!(split("Order E11.9 labs"), ["Order E11.9 labs"]);
        assert_eq!(split(""), [""]);
    }

    #[test]
    fn interleave_takes_turns_and_keeps_first_places() {
        let c = |n: &str| Candidate {
            name: n.into(),
            reason: Reason::Rag,
            score: 0.0,
        };
        let turn = vec![c("a"), c("b"), c("c")];
        let merged = interleave(turn, vec![vec![c("x"), c("y")], vec![c("a"), c("z")]], 1);
        let names: Vec<&str> = merged.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "x", "b", "c"]);
    }
}
