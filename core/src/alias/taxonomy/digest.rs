//! [`digest_of`]: the name a taxonomy goes by between filter and control and
//! on disk ([`super::Taxonomy::digest`]).

use super::schema::TaxonomyConfig;

/// Domain tag of [`super::Taxonomy::digest`]'s input; a change to what the digest
/// covers changes the tag.
const DIGEST_TAG: &[u8] = b"keyhole-taxonomy-v1\n";

/// SHA-256 over [`DIGEST_TAG`] and the merged configuration as compact JSON
/// (fields in declaration order, lists in configuration order), as 64
/// lowercase hex digits. serde_json writes a struct the same way every time,
/// so the digest depends only on the configuration, not on how a file spelled
/// it (whitespace, member order, defaults left out or written out). A kind's
/// `description` is not serialized, so it is no part of the digest.
pub(super) fn digest_of(merged: &TaxonomyConfig) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let mut h = Sha256::new();
    h.update(DIGEST_TAG);
    // Serializing plain strings, numbers and enums cannot fail; were it ever
    // to, the digest of an empty body still differs from every real one.
    h.update(serde_json::to_vec(merged).unwrap_or_default());
    let bytes: [u8; 32] = h.finalize().into();
    let mut out = String::with_capacity(64);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}
