//! The built-in kinds: `builtin.json` beside this file, a taxonomy file in the
//! operator's schema ([`TaxonomyConfig`]) that lists the HMS API's kinds. It
//! is compiled in and read by the same deserialiser and validator as an
//! operator's file; an operator's file is merged over it
//! ([`TaxonomyConfig::kinds`]).
//!
//! A kind every deployment needs goes into `builtin.json`. That changes the
//! built-in digest, so the test pinning it (`tests.rs`) must be updated with
//! it, and control and every filter must be given the new build together.

use super::schema::{err, KindConfig, TaxonomyConfig, TaxonomyError};

/// The built-in taxonomy file, as shipped.
pub(crate) const BUILTIN_JSON: &str = include_str!("builtin.json");

/// `json` parsed as a taxonomy file (not validated: [`super::Taxonomy`]
/// validates the built-in kinds with whatever file is merged over them); an
/// error's field starts `builtin.json: `.
fn parse(json: &str) -> Result<TaxonomyConfig, TaxonomyError> {
    TaxonomyConfig::from_json(json.as_bytes()).map_err(|e| TaxonomyError {
        field: format!("builtin.json: {}", e.field),
        message: e.message,
    })
}

/// The built-in kinds, in file order.
///
/// Fails with a [`TaxonomyError`] whose field starts `builtin.json` when the
/// shipped file does not parse (a unit test proves it does), or is not a
/// whole taxonomy of kinds alone (`"replaceDefaults": true`, every other
/// field at the default [`TaxonomyConfig`] documents): an operator's file is
/// merged over the built-in *kinds*, so any other value there would be read
/// by nothing.
pub(crate) fn kinds() -> Result<Vec<KindConfig>, TaxonomyError> {
    kinds_of(BUILTIN_JSON)
}

/// [`kinds`] of `json`.
pub(super) fn kinds_of(json: &str) -> Result<Vec<KindConfig>, TaxonomyError> {
    let mut rest = parse(json)?;
    if !rest.replace_defaults {
        return Err(err(
            "builtin.json: replaceDefaults",
            "must be true: the file is the whole built-in taxonomy",
        ));
    }
    let kinds = std::mem::take(&mut rest.kinds);
    rest.replace_defaults = false;
    if rest != TaxonomyConfig::default() {
        return Err(err(
            "builtin.json",
            "must list kinds only; the other fields' defaults are TaxonomyConfig's",
        ));
    }
    Ok(kinds)
}
