//! The alias taxonomy: which kinds of record exist, their alias prefixes, and the
//! rules that tell a raw id's kind from where it sits in a body.
//!
//! [`TaxonomyConfig`] is what an operator writes (every field but `kinds` has
//! a documented default that covers the HMS API); [`Taxonomy`] is the
//! validated form with lookup tables. Both the filter (scanning) and control
//! (minting) load the same configuration, so an alias minted by one is
//! understood by the other; each side names its taxonomy by
//! [`Taxonomy::digest`], the filter sends that digest with every alias
//! request, and control refuses one that differs from its own.
//!
//! # Layout
//! - `builtin.json` (`builtin.rs`): the built-in kinds, a taxonomy file in the
//!   operator's schema, compiled in.
//! - `schema`: the file as written ([`TaxonomyConfig`], [`KindConfig`]),
//!   deserialised, not validated.
//! - `validate`: merging the built-in kinds in, the rules, and the errors
//!   naming the field (`kinds[3].prefix: ...`).
//! - `norm`: key normalisation (`patient_id` = `PatientID` = `patientId`)
//!   and id-named keys.
//! - `table`, `lookup`: the tables and the lookup API the scanner and the
//!   rewriter use ([`Taxonomy`]).
//! - `digest`: the digest that ties filter, control and stored sessions to
//!   one taxonomy.
//!
//! # The taxonomy file
//! One JSON object (`config/taxonomy.example.json`), read by control
//! (`keyhole serve --taxonomy FILE`) and inlined as the `taxonomy` member of
//! the filter's plugin configuration ([`crate::config::HmsFilterConfig`]).
//! `make run` and the end-to-end harness do both from `KEYHOLE_TAXONOMY`
//! (`envoy/render.py` does the inlining).
//!
//! The file *extends* the built-in kinds (`builtin.json`, in the same
//! schema): each entry of `kinds` replaces the built-in kind of the same name
//! (whole, in its place) or, under a new name, is added after the built-in
//! kinds. With `"replaceDefaults": true` the file's kinds are the only ones.
//! Every other field, when given, replaces its default.
//!
//! # Adding an id kind
//! Without a rebuild: one entry in the taxonomy file's `kinds` (name, alias
//! prefix, FHIR id prefixes and resource types, id-named keys, object keys,
//! path segments), checked by `keyhole config check --taxonomy FILE`, which
//! prints the digest both sides will report. Restart control and reload Envoy
//! with the same file; scanning, minting, decoding and the prefix grammar all
//! read the kind from there, and [`Taxonomy::try_from`] validates it.
//!
//! A kind every deployment needs belongs in `builtin.json` instead; the tests
//! in `tests.rs` parse and validate it, and pin the built-in digest. Either way
//! the digest changes, so control and every filter must be given the new
//! taxonomy together: until they are, control answers the filter's alias
//! requests with `409 taxonomy_mismatch`.

mod builtin;
mod digest;
mod lookup;
mod norm;
mod schema;
mod table;
mod validate;

pub(crate) use lookup::KeyRole;
pub use lookup::{Kind, Taxonomy};
pub use schema::{KindConfig, TaxonomyConfig, TaxonomyError};

/// The built-in kinds under the path tests that compute their expectations
/// from the kind configurations use (`alias/request/tests.rs`).
#[cfg(test)]
pub(crate) mod defaults {
    /// [`super::builtin::kinds`], which a unit test proves parse.
    pub fn kinds() -> Vec<super::KindConfig> {
        super::builtin::kinds().expect("builtin.json parses")
    }
}

#[cfg(test)]
mod tests;
