//! What the tool ranking reads of a text that holds aliases.
//!
//! An alias is opaque on purpose: `patient-k7q2-001` says which kind of
//! record it stands for, and its epoch and number are noise drawn per
//! session. Ranked as written, that noise reaches the embedder and the
//! lexical index (`k7q2`, `001`), so one turn ranks differently in two
//! sessions, and a turn that names a record ("For patient-k7q2-001, any
//! allergies?") reads as a name to resolve rather than an identifier in hand.
//! [`ranking_text`] writes each alias as what it means to a reader, its
//! kind and the word `id` ("For patient id, any allergies?"); the request
//! the model receives keeps the alias.
//!
//! [`ranking_text_of_raw`] is the same reading of a text whose raw ids are not
//! aliased yet: the offline evaluation's turns, which live traffic never ranks
//! raw (control ranks the turn aliased, [`super::prompt::alias_text`]).

use super::grammar::Epoch;
use super::prompt::{alias_text, string_kind};
use super::rewrite::RewriteError;
use super::scan::ResponseScan;
use super::session::{SessionError, SessionMap};
use super::taxonomy::Taxonomy;
use std::borrow::Cow;

/// Why [`ranking_text_of_raw`] could not alias a text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadingError {
    /// The text could not be scanned or rewritten.
    #[error(transparent)]
    Rewrite(#[from] RewriteError),
    /// A fresh session map could not alias its ids.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// `text` with every alias of `tax` written as `<kind> id` (`patient id`,
/// `task group id`). Borrowed when the text holds none.
///
/// An alias is a maximal run of ASCII letters, digits and `-` that
/// [`Taxonomy::parse_alias`] reads (sentinels included: they too name a
/// kind); a run around it (`x-patient-k7q2-001`) is not an alias, as
/// everywhere else.
pub fn ranking_text<'t>(tax: &Taxonomy, text: &'t str) -> Cow<'t, str> {
    let bytes = text.as_bytes();
    let is_alias_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'-';
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        if !bytes.get(at).copied().is_some_and(is_alias_byte) {
            at += 1;
            continue;
        }
        let start = at;
        while bytes.get(at).copied().is_some_and(is_alias_byte) {
            at += 1;
        }
        // Runs are ASCII, so both ends are character boundaries.
        let Some(run) = text.get(start..at) else {
            continue;
        };
        let Some(kind) = tax.parse_alias(run).and_then(|p| tax.kind(p.kind)) else {
            continue;
        };
        let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
        o.push_str(text.get(copied..start).unwrap_or_default());
        for (i, word) in kind.name.split(['-', '_']).enumerate() {
            if i > 0 {
                o.push(' ');
            }
            o.push_str(word);
        }
        o.push_str(" id");
        copied = at;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut o) => {
            o.push_str(text.get(copied..).unwrap_or_default());
            Cow::Owned(o)
        }
    }
}

/// [`ranking_text`] of `text` once its raw ids are aliased as control aliases
/// a turn: every id the prompt scan finds is given an alias of a fresh
/// session map, by the same rules as [`alias_text`]. For ranking a text
/// offline exactly as the live path ranks it.
pub fn ranking_text_of_raw(tax: &Taxonomy, text: &str) -> Result<String, ReadingError> {
    let mut scan = ResponseScan::new(tax);
    scan.add(text.as_bytes(), string_kind(text), None)?;
    if scan.ids().is_empty() {
        return Ok(ranking_text(tax, text).into_owned());
    }
    let ids = scan.ids().to_vec();
    let encoded = SessionMap::with_epoch(Epoch::from_seed(0)).encode(tax, &ids)?;
    let aliased = alias_text(tax, text, &ids, &encoded.aliases, &[])?;
    Ok(ranking_text(tax, &aliased).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alias_reads_as_its_kind_and_the_word_id() {
        let tax = Taxonomy::default();
        assert_eq!(
            ranking_text(&tax, "For patient-k7q2-001, any allergies?"),
            "For patient id, any allergies?"
        );
        // Two sessions' aliases of one turn read the same.
        assert_eq!(
            ranking_text(&tax, "For patient-x9u3-014, any allergies?"),
            ranking_text(&tax, "For patient-k7q2-001, any allergies?")
        );
        assert_eq!(
            ranking_text(&tax, "Observation/observation-e266-001 and ref-nk29-1000."),
            "Observation/observation id and record id."
        );
        // The longest prefix names the kind; a name with a dash reads as words.
        assert_eq!(
            ranking_text(&tax, "move patient-appt-k7q2-003 to task-group-k7q2-002"),
            "move appointment id to task group id"
        );
        // Epoch-less aliases and the sentinel name their kind too.
        assert_eq!(
            ranking_text(&tax, "patient-001 / patient-000"),
            "patient id / patient id"
        );
    }

    #[test]
    fn text_without_an_alias_is_borrowed_unchanged() {
        let tax = Taxonomy::default();
        for text in [
            "Book Anna Schmidt a follow-up in 4 weeks",
            "x-patient-k7q2-001 is not an alias, nor patient-k7q2-01",
            "Größe 1,82 m — HbA1c 7,2 %",
            "",
        ] {
            assert!(matches!(ranking_text(&tax, text), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn raw_ids_read_as_their_aliases_would() {
        let tax = Taxonomy::default();
        let live = ranking_text(&tax, "For patient-k7q2-001, any allergies?").into_owned();
        let raw = ranking_text_of_raw(&tax, "For pat-002931, any allergies?").unwrap();
        assert_eq!(raw, live);
        assert_eq!(
            ranking_text_of_raw(&tax, "Get me the FHIR resource Observation/obs-88213.").unwrap(),
            "Get me the FHIR resource Observation/observation id."
        );
        assert_eq!(
            ranking_text_of_raw(&tax, "Show the allergy list").unwrap(),
            "Show the allergy list"
        );
    }
}
