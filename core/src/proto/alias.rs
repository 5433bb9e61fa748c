//! The JSON of control's alias API (`POST /v1/alias/encode`, `POST /v1/alias/decode`).
//!
//! The filter and control both use these types, so a change here is a protocol
//! change: add fields with `#[serde(default)]`.
//!
//! A request names the sender's taxonomy by digest ([`WithTaxonomy`]:
//! `{"session": …, "ids": […], "taxonomy": "<64 hex>"}`); control answers
//! `409` [`ErrorCode::TaxonomyMismatch`] when it is not control's own, so a
//! filter and a control configured with different kinds never exchange
//! aliases.

use crate::alias::id::{Form, Origin};
use serde::{Deserialize, Serialize};

/// One raw id to alias.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdInput {
    /// The raw id.
    pub value: String,
    /// Kind name used if an alias must be minted (default: the taxonomy's
    /// fallback kind). A value the session already knows keeps its alias
    /// whatever the hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The slot the value fills; routed by shape when absent (a `uuid` hint on a
    /// value that is not a UUID is routed by shape too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<Form>,
    /// Ids with the same group number within one request are one entity (its
    /// UUID and FHIR id seen in one object); no group means an entity alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
}

/// `POST /v1/alias/encode` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncodeRequest {
    /// The session, as named by the agent service.
    pub session: String,
    /// The raw ids, in any order.
    pub ids: Vec<IdInput>,
    /// The ids were read in an LLM request (the filter's LLM listener), not
    /// an HMS response: a value that is an alias this session issued is then
    /// answered with itself and mints nothing ([`Origin::Prompt`]). Absent:
    /// `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prompt: bool,
}

impl EncodeRequest {
    /// Where the ids were read.
    pub fn origin(&self) -> Origin {
        if self.prompt {
            Origin::Prompt
        } else {
            Origin::Response
        }
    }
}

/// `POST /v1/alias/encode` response: one alias per input id, in input order.
/// Past the session limit an alias may be a sentinel (`patient-000`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncodeResponse {
    /// Aliases, parallel to the request's `ids`.
    pub aliases: Vec<String>,
    /// Every raw id the session knew before this request, with its alias: the
    /// filter replaces each wherever it occurs in the response (an id learned
    /// from a structured field of an earlier body, now in prose). Empty from
    /// a control that predates it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known: Vec<KnownAlias>,
}

/// A raw id the session knows, with its alias.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownAlias {
    /// The raw id.
    pub value: String,
    /// Its alias.
    pub alias: String,
}

/// `POST /v1/alias/decode` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodeRequest {
    /// The session, as named by the agent service.
    pub session: String,
    /// Aliases as the model wrote them.
    pub aliases: Vec<String>,
}

/// An encode or decode request with the digest of the sender's taxonomy
/// ([`crate::alias::taxonomy::Taxonomy::digest`]): on the wire, the request's own
/// members plus `taxonomy`.
///
/// ```
/// use keyhole_core::proto::alias::WithTaxonomy;
/// use keyhole_core::alias::{EncodeRequest, Taxonomy};
///
/// let tax = Taxonomy::default();
/// let question = WithTaxonomy::new(EncodeRequest { session: "s1".into(), ids: vec![], prompt: false }, &tax);
/// let json = serde_json::to_value(&question).unwrap();
/// assert_eq!(json["taxonomy"], tax.digest());
/// let back: WithTaxonomy<EncodeRequest> = serde_json::from_value(json).unwrap();
/// assert_eq!(back, question);
/// ```
///
/// A request without `taxonomy` (a filter that predates it) parses with
/// `taxonomy: None`, and control then does not check. The request's own
/// members keep their strictness: an unknown member besides `taxonomy` is an
/// error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WithTaxonomy<R> {
    /// The request.
    #[serde(flatten)]
    pub request: R,
    /// The sender's [`crate::alias::taxonomy::Taxonomy::digest`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taxonomy: Option<String>,
}

impl<R> WithTaxonomy<R> {
    /// `request`, naming `taxonomy` by its digest.
    pub fn new(request: R, taxonomy: &crate::alias::taxonomy::Taxonomy) -> Self {
        WithTaxonomy {
            request,
            taxonomy: Some(taxonomy.digest().to_owned()),
        }
    }
}

/// Takes `taxonomy` out of the object and hands the rest to `R`, so that
/// `R`'s `deny_unknown_fields` still applies (serde's `flatten` would make it
/// ignore unknown members).
impl<'de, R: serde::de::DeserializeOwned> Deserialize<'de> for WithTaxonomy<R> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut members = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let taxonomy = match members.remove("taxonomy") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(digest)) => Some(digest),
            Some(_) => return Err(D::Error::custom("taxonomy: must be a digest string")),
        };
        let request =
            R::deserialize(serde_json::Value::Object(members)).map_err(D::Error::custom)?;
        Ok(WithTaxonomy { request, taxonomy })
    }
}

/// The real ids behind one alias.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RealIds {
    /// The UUID, when seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The FHIR logical id, when seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fhir_id: Option<String>,
    /// The slug (or other identifier), when seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slug: Option<String>,
}

impl RealIds {
    /// The slot of one form.
    pub fn get(&self, form: Form) -> Option<&str> {
        match form {
            Form::Uuid => self.uuid.as_deref(),
            Form::Fhir => self.fhir_id.as_deref(),
            Form::Slug => self.slug.as_deref(),
        }
    }

    pub(crate) fn slot_mut(&mut self, form: Form) -> &mut Option<String> {
        match form {
            Form::Uuid => &mut self.uuid,
            Form::Fhir => &mut self.fhir_id,
            Form::Slug => &mut self.slug,
        }
    }

    /// Every value held, with its form.
    pub fn values(&self) -> impl Iterator<Item = (Form, &str)> {
        [Form::Uuid, Form::Fhir, Form::Slug]
            .into_iter()
            .filter_map(|f| self.get(f).map(|v| (f, v)))
    }

    /// The id to send where `want` is expected: that form if known, else the
    /// others in the order UUID, FHIR id, slug. `None` only when empty.
    pub fn pick(&self, want: Form) -> Option<&str> {
        self.get(want)
            .or(self.uuid.as_deref())
            .or(self.fhir_id.as_deref())
            .or(self.slug.as_deref())
    }
}

/// One decoded alias.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecodedIds {
    /// The issued alias it resolved to; differs from the asked alias after a
    /// near-miss repair (`task-item-001` → `task-001`).
    pub alias: String,
    /// The kind name of the entity.
    pub kind: String,
    /// The real ids.
    #[serde(flatten)]
    pub ids: RealIds,
}

/// `POST /v1/alias/decode` response: parallel to the request's aliases; `null`
/// for an alias this session did not issue (or a sentinel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodeResponse {
    /// Decoded ids or `null`, in request order.
    pub ids: Vec<Option<DecodedIds>>,
    /// The epoch of the session's current map (`k7q2`), so that the filter can
    /// tell an alias of an earlier map from an invented one in its refusal.
    /// Absent from a control that predates it, or for an epoch-less map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
}

/// A machine-readable error code of the alias API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request body is not a valid encode/decode request.
    BadRequest,
    /// A group asserts members of different entities; nothing was minted.
    Conflict,
    /// A kind hint names no kind of the taxonomy.
    UnknownKind,
    /// An alias was not issued in this session (or is a sentinel).
    UnknownAlias,
    /// The alias store failed; nothing was persisted.
    StoreUnavailable,
    /// The request names another taxonomy than control's (a filter and
    /// control configured with different taxonomy files); nothing was done.
    TaxonomyMismatch,
    /// The request speaks another version of a versioned exchange
    /// (`POST /v2/turn`, [`crate::proto::turn::TURN_VERSION`]); nothing was done.
    VersionMismatch,
}

/// An error body of the alias API (and of the filter's local replies):
/// `{"error": {"code": "unknown_alias", "message": "...", "alias": "patient-007"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The content of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Machine-readable code.
    pub code: ErrorCode,
    /// Human-readable message; never contains a raw id.
    pub message: String,
    /// The alias at fault, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

impl ErrorBody {
    /// Builds an error body.
    pub fn new(code: ErrorCode, message: impl Into<String>, alias: Option<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code,
                message: message.into(),
                alias,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shapes_match_the_api() {
        let req: EncodeRequest = serde_json::from_str(
            r#"{"session":"s1","ids":[{"value":"pat-000123","kind":"patient","form":"fhirId","group":1},{"value":"x"}]}"#,
        )
        .unwrap();
        assert_eq!(req.ids[0].form, Some(Form::Fhir));
        assert_eq!(req.ids[1].kind, None);
        assert!(serde_json::from_str::<EncodeRequest>(
            r#"{"session":"s","ids":[{"value":"x","extra":1}]}"#
        )
        .is_err());
        let resp = DecodeResponse {
            ids: vec![
                Some(DecodedIds {
                    alias: "patient-001".into(),
                    kind: "patient".into(),
                    ids: RealIds {
                        uuid: Some("u".into()),
                        fhir_id: Some("pat-1".into()),
                        slug: None,
                    },
                }),
                None,
            ],
            epoch: None,
        };
        assert_eq!(
            serde_json::to_string(&resp).unwrap(),
            r#"{"ids":[{"alias":"patient-001","kind":"patient","uuid":"u","fhirId":"pat-1"},null]}"#
        );
        let err = ErrorBody::new(
            ErrorCode::UnknownAlias,
            "alias \"patient-007\" was not issued in this session",
            Some("patient-007".into()),
        );
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            serde_json::json!({"error":{"code":"unknown_alias","message":"alias \"patient-007\" was not issued in this session","alias":"patient-007"}})
        );
    }

    #[test]
    fn the_taxonomy_digest_rides_along_and_is_optional() {
        let digest = "ab".repeat(32);
        let req: WithTaxonomy<EncodeRequest> = serde_json::from_str(&format!(
            r#"{{"session":"s","ids":[{{"value":"x"}}],"taxonomy":"{digest}"}}"#
        ))
        .unwrap();
        assert_eq!(req.taxonomy.as_deref(), Some(digest.as_str()));
        assert_eq!(req.request.ids.len(), 1);
        // Today's filter sends the plain request.
        let plain = EncodeRequest {
            session: "s".into(),
            ids: vec![],
            prompt: false,
        };
        let req: WithTaxonomy<EncodeRequest> =
            serde_json::from_slice(&serde_json::to_vec(&plain).unwrap()).unwrap();
        assert_eq!(req.taxonomy, None);
        assert_eq!(req.request, plain);
        let req: WithTaxonomy<DecodeRequest> =
            serde_json::from_str(r#"{"session":"s","aliases":["patient-001"],"taxonomy":null}"#)
                .unwrap();
        assert_eq!(req.taxonomy, None);
        // Strict as before: unknown members, a non-string digest, missing members.
        for bad in [
            r#"{"session":"s","aliases":[],"extra":1}"#,
            r#"{"session":"s","aliases":[],"taxonomy":7}"#,
            r#"{"session":"s","taxonomy":"x"}"#,
            r#"[]"#,
        ] {
            assert!(
                serde_json::from_str::<WithTaxonomy<DecodeRequest>>(bad).is_err(),
                "{bad}"
            );
        }
        // Serialized as one object.
        let tax = crate::alias::taxonomy::Taxonomy::default();
        let json = serde_json::to_value(WithTaxonomy::new(
            DecodeRequest {
                session: "s".into(),
                aliases: vec!["patient-001".into()],
            },
            &tax,
        ))
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!({"session": "s", "aliases": ["patient-001"], "taxonomy": tax.digest()})
        );
        assert_eq!(
            serde_json::to_value(ErrorCode::TaxonomyMismatch).unwrap(),
            "taxonomy_mismatch"
        );
    }

    #[test]
    fn the_prompt_marker_is_optional_and_only_written_when_set() {
        let req: EncodeRequest = serde_json::from_str(r#"{"session":"s","ids":[]}"#).unwrap();
        assert_eq!(req.origin(), Origin::Response);
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"session":"s","ids":[]}"#
        );
        let req: EncodeRequest =
            serde_json::from_str(r#"{"session":"s","ids":[],"prompt":true}"#).unwrap();
        assert_eq!(req.origin(), Origin::Prompt);
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"session":"s","ids":[],"prompt":true}"#
        );
        assert!(serde_json::from_str::<EncodeRequest>(
            r#"{"session":"s","ids":[],"prompt":"yes"}"#
        )
        .is_err());
    }

    #[test]
    fn pick_prefers_the_wanted_form() {
        let ids = RealIds {
            uuid: Some("u".into()),
            fhir_id: Some("f".into()),
            slug: None,
        };
        assert_eq!(ids.pick(Form::Fhir), Some("f"));
        assert_eq!(ids.pick(Form::Uuid), Some("u"));
        assert_eq!(ids.pick(Form::Slug), Some("u"));
        assert_eq!(RealIds::default().pick(Form::Uuid), None);
    }
}
