//! The words every stage of the alias engine shares, at the bottom of it so
//! that the taxonomy, the shapes, the session map and the wire types can all
//! use them without using each other: an id's [`Form`], a [`KindId`], and the
//! [`Origin`] of an encode batch.

use serde::{Deserialize, Serialize};

/// The form of a raw id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Form {
    /// A UUID (`039b70b8-92f7-44b7-9c91-4e3f0e900c71`).
    #[serde(rename = "uuid")]
    Uuid,
    /// A FHIR logical id (`pat-000123`).
    #[serde(rename = "fhirId")]
    Fhir,
    /// A slug (`clinic-berlin-mitte`) or any other identifier.
    #[serde(rename = "slug")]
    Slug,
}

impl Form {
    /// The wire name (`uuid`, `fhirId`, `slug`).
    pub fn as_str(self) -> &'static str {
        match self {
            Form::Uuid => "uuid",
            Form::Fhir => "fhirId",
            Form::Slug => "slug",
        }
    }
}

/// A kind, as an index into its [`Taxonomy`](super::Taxonomy). Only meaningful with the taxonomy
/// that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindId(pub(crate) u16);

/// Where the values of an encode batch were read: it decides what a value
/// spelled like an alias is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    /// An HMS response: every value is a raw id, alias-shaped ones included
    /// (an HMS id spelled `ward-101` is data, not an alias).
    #[default]
    Response,
    /// An LLM request: the model's own words and the agent's. A value that
    /// is an alias this session issued ([`SessionMap::decode`](super::SessionMap::decode) finds it) is
    /// that alias, which the model holds already: it is answered with itself
    /// and nothing is minted. Any other value, alias-shaped or not, is a raw
    /// id as for [`Origin::Response`].
    Prompt,
}
