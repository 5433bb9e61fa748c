//! `POST /v2/turn`: one LLM turn in one round trip (the types and the
//! protocol are [`keyhole_core::proto::turn`]).
//!
//! The alias half is `/v1/alias/encode`'s (the same taxonomy check, the same
//! store calls, aliases durable before the answer); the turn and the
//! tool-search query are then aliased here with those aliases
//! ([`keyhole_core::alias::prompt::alias_text`]) and the resolve half is
//! `/v1/resolve`'s, on the aliased text. A request of another version is
//! answered 400 `version_mismatch` naming both versions, before anything
//! is done.

use crate::alias::http::{check_taxonomy, AliasApiError, MAX_BATCH};
use crate::metrics::{Metrics, RegistryVia};
use crate::resolve::ResolveError;
use crate::server::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use keyhole_core::alias::prompt::alias_text;
use keyhole_core::alias::Origin;
use keyhole_core::proto::alias::{ErrorBody, ErrorCode};
use keyhole_core::proto::turn::{
    TurnRequest, TurnResolve, TurnResponse, VersionProbe, TURN_VERSION,
};
use std::sync::Arc;

/// A `/v2/turn` error. The alias half's errors are the alias API's.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The request speaks another version of the exchange; nothing was done.
    #[error("the filter sent /v2/turn version {sent}, this control speaks version {own}: upgrade the older side")]
    VersionMismatch {
        /// The version the request named (`none` when it named none).
        sent: String,
        /// [`TURN_VERSION`].
        own: u32,
    },
    /// The alias half failed (or the body is not a turn request).
    #[error(transparent)]
    Alias(#[from] AliasApiError),
}

impl IntoResponse for TurnError {
    fn into_response(self) -> Response {
        match self {
            TurnError::VersionMismatch { ref sent, own } => {
                tracing::warn!(%sent, own, "turn request of another version refused");
                let body = ErrorBody::new(ErrorCode::VersionMismatch, self.to_string(), None);
                (StatusCode::BAD_REQUEST, Json(body)).into_response()
            }
            TurnError::Alias(e) => e.into_response(),
        }
    }
}

/// `POST /v2/turn`.
pub async fn turn(
    State(state): State<AppState>,
    axum::Extension(metrics): axum::Extension<Arc<Metrics>>,
    body: Bytes,
) -> Result<Json<TurnResponse>, TurnError> {
    let started = std::time::Instant::now();
    let probe = serde_json::from_slice::<VersionProbe>(&body)
        .map_err(|e| AliasApiError::BadRequest(e.to_string()))?;
    if probe.version != Some(TURN_VERSION) {
        return Err(TurnError::VersionMismatch {
            sent: probe
                .version
                .map_or_else(|| "none".to_owned(), |v| v.to_string()),
            own: TURN_VERSION,
        });
    }
    let TurnRequest {
        taxonomy,
        encode,
        resolve: mut req,
        ..
    } = serde_json::from_slice(&body).map_err(|e| AliasApiError::BadRequest(e.to_string()))?;
    let store = &state.aliases;
    check_taxonomy(taxonomy.as_deref(), store.taxonomy())?;
    if encode.ids.len() > MAX_BATCH {
        return Err(AliasApiError::BadRequest(format!(
            "encode.ids: at most {MAX_BATCH} per request, got {}",
            encode.ids.len()
        ))
        .into());
    }
    // The alias half, as `/v1/alias/encode` with `"prompt": true`.
    let aliases = store
        .encode_from(&encode.session, &encode.ids, Origin::Prompt)
        .await
        .map_err(AliasApiError::from)?;
    let known = store
        .known(&encode.session)
        .await
        .map_err(AliasApiError::from)?;
    // Nothing raw reaches the ranking (nor the embedder): the turn and the
    // query are aliased with the answer's own aliases. A text that cannot be
    // (an id in it has no alias in the batch: never expected, the text was
    // read from the body the batch was scanned from) is ranked without its
    // text -- the session's prior set and the floors -- rather than refusing
    // the turn: the request itself is aliased and verified by the filter.
    let aliased = |what: &str, text: &str| match alias_text(
        store.taxonomy(),
        text,
        &encode.ids,
        &aliases,
        &known,
    ) {
        Ok(text) => Some(text),
        Err(e) => {
            tracing::warn!(session = %encode.session, cause = %e, "{what} ranked without its text: it could not be aliased");
            metrics.unaliased_text();
            None
        }
    };
    req.turn = aliased("turn", &req.turn).unwrap_or_default();
    if let Some(search) = req.tool_search.as_mut() {
        if let Some(query) = search.query.take() {
            search.query = aliased("tool-search query", &query);
        }
    }
    crate::resolve::read_aliases(store.taxonomy(), &mut req);
    req.session = Some(encode.session.clone());
    let via = if req.registry.is_none() || !req.tools.is_empty() {
        RegistryVia::Sent
    } else {
        RegistryVia::Known
    };
    let resolve = match state.resolver.answer(&req).await {
        Ok((answer, tools_in)) => {
            metrics.resolve_request(body.len(), via);
            metrics.resolved(answer.source, tools_in, answer.tools.len());
            TurnResolve::Answer(answer)
        }
        Err(ResolveError::UnknownRegistry) => {
            metrics.resolve_request(body.len(), RegistryVia::Unknown);
            TurnResolve::UnknownRegistry
        }
        Err(e) => {
            tracing::warn!(cause = %e, "turn not ranked");
            TurnResolve::Failed {
                status: StatusCode::BAD_REQUEST.as_u16(),
            }
        }
    };
    tracing::debug!(
        session = %encode.session,
        phase = %req.phase,
        ids = encode.ids.len(),
        known = known.len(),
        unknown_registry = matches!(resolve, TurnResolve::UnknownRegistry),
        micros = started.elapsed().as_micros() as u64,
        "turn"
    );
    Ok(Json(TurnResponse {
        version: TURN_VERSION,
        aliases,
        known,
        resolve,
    }))
}

#[cfg(test)]
mod tests;
