//! `POST /v1/alias/encode` and `POST /v1/alias/decode`.
//!
//! Bodies are the types of [`keyhole_core::proto::alias`]; every error is a JSON
//! [`ErrorBody`] with a code: `bad_request` (400), `unknown_kind` (422),
//! `conflict` (409), `taxonomy_mismatch` (409), `store_unavailable` (503).
//! Logs carry the session, counts and timings, never an id.
//!
//! A request that names a taxonomy (`"taxonomy": "<digest>"`) other than the
//! store's is refused before anything else is done: aliases minted under one
//! set of kinds and prefixes must not be decoded under another. A request
//! without one (a filter that predates the field) is not checked.

use super::{AliasStore, StoreError};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use keyhole_core::alias::{
    DecodeRequest, DecodeResponse, EncodeRequest, EncodeResponse, SessionError, Taxonomy,
};
use keyhole_core::proto::alias::{ErrorBody, ErrorCode, WithTaxonomy};
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// Most ids or aliases in one request.
pub const MAX_BATCH: usize = 20_000;

/// What the alias routes share.
#[derive(Clone)]
pub struct AliasState {
    /// The session store (embedded or Redis).
    pub store: Arc<dyn AliasStore>,
}

/// The alias routes, ready to `merge` into control's router (their state is
/// already applied, so they fit a router of any state type).
pub fn routes<S: Clone + Send + Sync + 'static>(state: AliasState) -> Router<S> {
    Router::new()
        .route("/v1/alias/encode", post(encode))
        .route("/v1/alias/decode", post(decode))
        .with_state(state)
}

/// An alias API error, rendered as an [`ErrorBody`].
#[derive(Debug, thiserror::Error)]
pub enum AliasApiError {
    /// The body is not a valid request.
    #[error("invalid request body: {0}")]
    BadRequest(String),
    /// The request names another taxonomy than control's; nothing was done.
    /// Both digests are cut to their first 12 characters.
    #[error(
        "the filter's taxonomy {sent} is not control's taxonomy {own}: give both the same taxonomy file"
    )]
    TaxonomyMismatch {
        /// The start of the digest the request named.
        sent: String,
        /// The start of control's own digest.
        own: String,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl IntoResponse for AliasApiError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            AliasApiError::Store(StoreError::TooManyKnown { .. }) => {
                (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::BadRequest)
            }
            AliasApiError::BadRequest(_) | AliasApiError::Store(StoreError::BadSession) => {
                (StatusCode::BAD_REQUEST, ErrorCode::BadRequest)
            }
            AliasApiError::TaxonomyMismatch { .. } => {
                (StatusCode::CONFLICT, ErrorCode::TaxonomyMismatch)
            }
            AliasApiError::Store(StoreError::Session(e)) => match e {
                SessionError::Conflict { .. } | SessionError::FormConflict { .. } => {
                    (StatusCode::CONFLICT, ErrorCode::Conflict)
                }
                SessionError::UnknownKind { .. } => {
                    (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::UnknownKind)
                }
                _ => (StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
            },
            AliasApiError::Store(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::StoreUnavailable)
            }
        };
        match &self {
            AliasApiError::Store(_) if status == StatusCode::SERVICE_UNAVAILABLE => {
                tracing::warn!(cause = %self, "alias store failed");
            }
            AliasApiError::TaxonomyMismatch { sent, own } => {
                tracing::warn!(%sent, %own, "alias request from a filter with another taxonomy refused");
            }
            _ => {}
        }
        // Store errors never carry raw ids (session errors name aliases and
        // indexes only), so the message is safe to return.
        (status, Json(ErrorBody::new(code, self.to_string(), None))).into_response()
    }
}

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, AliasApiError> {
    // serde's message names the field and position; it may quote a value, but
    // the caller is the filter, which sent that value.
    serde_json::from_slice(body).map_err(|e| AliasApiError::BadRequest(e.to_string()))
}

/// The first 12 characters of a digest, for messages.
fn short(digest: &str) -> String {
    digest.chars().take(12).collect()
}

/// Refuses a request that names a taxonomy other than `own`.
pub(crate) fn check_taxonomy(sent: Option<&str>, own: &Taxonomy) -> Result<(), AliasApiError> {
    match sent {
        Some(sent) if sent != own.digest() => Err(AliasApiError::TaxonomyMismatch {
            sent: short(sent),
            own: short(own.digest()),
        }),
        _ => Ok(()),
    }
}

async fn encode(
    State(state): State<AliasState>,
    body: Bytes,
) -> Result<Json<EncodeResponse>, AliasApiError> {
    let started = std::time::Instant::now();
    let WithTaxonomy {
        request: req,
        taxonomy,
    } = parse::<WithTaxonomy<EncodeRequest>>(&body)?;
    check_taxonomy(taxonomy.as_deref(), state.store.taxonomy())?;
    if req.ids.len() > MAX_BATCH {
        return Err(AliasApiError::BadRequest(format!(
            "ids: at most {MAX_BATCH} per request, got {}",
            req.ids.len()
        )));
    }
    // From an LLM request, aliases this session issued pass as themselves.
    let aliases = state
        .store
        .encode_from(&req.session, &req.ids, req.origin())
        .await?;
    // Ids learned from earlier bodies, so the filter replaces them in prose
    // and URLs of this one too (bounded: past the bound this fails closed).
    let known = state.store.known(&req.session).await?;
    tracing::debug!(
        session = %req.session,
        ids = req.ids.len(),
        prompt = req.prompt,
        known = known.len(),
        store = state.store.backend(),
        micros = started.elapsed().as_micros() as u64,
        "encoded"
    );
    Ok(Json(EncodeResponse { aliases, known }))
}

async fn decode(
    State(state): State<AliasState>,
    body: Bytes,
) -> Result<Json<DecodeResponse>, AliasApiError> {
    let started = std::time::Instant::now();
    let WithTaxonomy {
        request: req,
        taxonomy,
    } = parse::<WithTaxonomy<DecodeRequest>>(&body)?;
    check_taxonomy(taxonomy.as_deref(), state.store.taxonomy())?;
    if req.aliases.len() > MAX_BATCH {
        return Err(AliasApiError::BadRequest(format!(
            "aliases: at most {MAX_BATCH} per request, got {}",
            req.aliases.len()
        )));
    }
    let ids = state.store.decode(&req.session, &req.aliases).await?;
    // Only when something was refused: the message then says whether the
    // alias came from an earlier map.
    let epoch = if ids.iter().any(Option::is_none) {
        state.store.current_epoch(&req.session).await?
    } else {
        None
    };
    tracing::debug!(
        session = %req.session,
        aliases = req.aliases.len(),
        unknown = ids.iter().filter(|d| d.is_none()).count(),
        store = state.store.backend(),
        micros = started.elapsed().as_micros() as u64,
        "decoded"
    );
    Ok(Json(DecodeResponse { ids, epoch }))
}
