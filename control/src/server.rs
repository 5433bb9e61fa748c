//! control's HTTP API, served on a Unix socket (or loopback TCP).
//!
//! [`router`] builds the routes over shared state so tests can drive it without
//! a socket; [`serve_unix`] binds, restricts the socket's mode, serves until the
//! shutdown future resolves, drains, and removes the socket file.

use crate::alias::{AliasState, AliasStore};
use crate::metrics::{Metrics, RegistryVia};
use crate::resolve::{AuditEntry, Bytes, ResolveError, Resolver, SessionTrail};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use keyhole_core::proto::calls::CallsBody;
use keyhole_core::proto::tools::{
    registry_digest, ResolveRequest, ResolveResponse, ToolDescriptor, UnknownRegistry,
    UNKNOWN_REGISTRY_STATUS,
};
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Answers `/v1/resolve`.
    pub resolver: Arc<Resolver>,
    /// Per-session alias state (`/v1/alias/*`).
    pub aliases: Arc<dyn AliasStore>,
}

/// An error a handler returns; rendered as `{"error":{"type","message"}}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// `/v1/audit/{session}` for a session control does not know.
    #[error("no audit trail for this session")]
    UnknownSession,
    /// A `/v1/resolve` body that is not a resolve request.
    #[error("not a resolve request: {0}")]
    BadRequest(String),
    /// A `/v1/resolve` whose registry digest is malformed or does not match its tools.
    #[error(transparent)]
    Registry(ResolveError),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind) = match &self {
            ApiError::UnknownSession => (StatusCode::NOT_FOUND, "unknown_session"),
            ApiError::BadRequest(_) | ApiError::Registry(_) => {
                (StatusCode::BAD_REQUEST, "invalid_request")
            }
        };
        let body = serde_json::json!({"error": {"type": kind, "message": self.to_string()}});
        (status, Json(body)).into_response()
    }
}

/// The routes over `state`.
pub fn router(state: AppState) -> Router {
    let aliases = crate::alias::routes(AliasState {
        store: state.aliases.clone(),
    });
    let metrics = Arc::new(Metrics::default());
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/resolve", post(resolve))
        .route(
            keyhole_core::proto::turn::TURN_PATH,
            post(crate::turn::turn),
        )
        .route("/v1/audit/{session}", get(audit))
        .route("/v1/audit", get(audit_window))
        .route("/v1/calls", post(calls))
        .merge(aliases)
        .route("/metrics", get(render_metrics))
        // Counts every matched route (after routing, so the route is known).
        .route_layer(axum::middleware::from_fn_with_state(
            metrics.clone(),
            crate::metrics::track,
        ))
        .layer(axum::Extension(metrics))
        // A request carries the whole registry (tens of thousands of tools in
        // the largest deployments); the filter's own limit is 64 MiB.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

/// Largest request body control reads.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// `GET /healthz`: 200 `ok` once the configured registry is indexed (or
/// none is configured); until then 503 with the index state as JSON, so
/// nothing routes turns to a control that would answer them lexically.
async fn healthz(State(state): State<AppState>) -> Response {
    let index = state.resolver.index_state();
    if index.is_ready() {
        return "ok\n".into_response();
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({ "ready": false, "index": index })),
    )
        .into_response()
}

/// `GET /metrics`: Prometheus text, with the configured registry's index state.
async fn render_metrics(
    State(state): State<AppState>,
    axum::Extension(metrics): axum::Extension<Arc<Metrics>>,
) -> impl IntoResponse {
    let mut text = metrics.render().await;
    crate::metrics::render_index(&mut text, &state.resolver.index_state());
    ([("content-type", "text/plain; version=0.0.4")], text)
}

/// `POST /v1/resolve`. A request naming an unknown registry digest without
/// its tools is answered 409 `{"unknown_registry":true}`: the filter resends
/// it once with the descriptors.
async fn resolve(
    State(state): State<AppState>,
    axum::Extension(metrics): axum::Extension<Arc<Metrics>>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let Question {
        tools,
        turn: mut req,
    } = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    crate::resolve::read_aliases(state.aliases.taxonomy(), &mut req);
    let descriptors: Vec<Descriptor<'_>> = match tools {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| ApiError::BadRequest(format!("tools: {e}")))?,
        None => Vec::new(),
    };
    let via = if req.registry.is_none() || !descriptors.is_empty() {
        RegistryVia::Sent
    } else {
        RegistryVia::Known
    };
    let answered = answer(&state.resolver, req, &descriptors).await;
    let (answer, tools_in, req) = match answered {
        Ok(answered) => answered,
        Err(ResolveError::UnknownRegistry) => {
            metrics.resolve_request(body.len(), RegistryVia::Unknown);
            let status =
                StatusCode::from_u16(UNKNOWN_REGISTRY_STATUS).unwrap_or(StatusCode::CONFLICT);
            return Ok((
                status,
                Json(UnknownRegistry {
                    unknown_registry: true,
                }),
            )
                .into_response());
        }
        Err(e) => return Err(ApiError::Registry(e)),
    };
    metrics.resolve_request(body.len(), via);
    metrics.resolved(answer.source, tools_in, answer.tools.len());
    tracing::debug!(
        session = req.session.as_deref().unwrap_or("-"),
        phase = %req.phase,
        tools_in,
        bytes = body.len(),
        tools_out = answer.tools.len(),
        source = answer.source.as_str(),
        micros = started.elapsed().as_micros() as u64,
        "resolved"
    );
    Ok(Json(answer).into_response())
}

/// A `/v1/resolve` body with its tools left unread ([`Descriptor`]s are read
/// from them in place, without copying a string that has no escape).
#[derive(serde::Deserialize)]
struct Question<'a> {
    #[serde(default, borrow, deserialize_with = "raw_present")]
    tools: Option<&'a serde_json::value::RawValue>,
    /// Everything else (its `tools` stay empty).
    #[serde(flatten)]
    turn: ResolveRequest,
}

/// A present `tools` member as it was sent, `null` included (a `null` is
/// refused when it is read as a list, as before).
fn raw_present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<&'de serde_json::value::RawValue>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

/// A [`ToolDescriptor`] borrowed from the request body.
#[derive(serde::Deserialize)]
struct Descriptor<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    description: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    parameters: std::borrow::Cow<'a, str>,
}

/// Answers `req` whose tools, if it sent any, are `sent`. A request that
/// sends its tools is answered by their digest when control knows it
/// (nothing is copied, nothing built), else as sent: the answer is the one
/// [`Resolver::answer`] gives the request with its tools.
async fn answer(
    resolver: &Resolver,
    mut req: ResolveRequest,
    sent: &[Descriptor<'_>],
) -> Result<(ResolveResponse, usize, ResolveRequest), ResolveError> {
    if !sent.is_empty() {
        let digest = registry_digest(sent.iter().map(|t| {
            (
                t.name.as_ref(),
                t.description.as_ref(),
                t.parameters.as_ref(),
            )
        }));
        // A digest named that is not the tools' own keeps the full path
        // (which checks it); so does an unknown registry.
        if req.registry.as_ref().is_none_or(|named| *named == digest) {
            let named = req.registry.replace(digest);
            match resolver.answer(&req).await {
                Err(ResolveError::UnknownRegistry) => req.registry = named,
                Ok((answer, size)) => {
                    req.registry = named;
                    return Ok((answer, size, req));
                }
                Err(e) => return Err(e),
            }
        }
        req.tools = sent
            .iter()
            .map(|t| ToolDescriptor {
                name: t.name.clone().into_owned(),
                description: t.description.clone().into_owned(),
                parameters: t.parameters.clone().into_owned(),
            })
            .collect();
    }
    let (answer, size) = resolver.answer(&req).await?;
    Ok((answer, size, req))
}

/// A session's audit trail (names, reasons, source, timings; never prompt text).
async fn audit(
    State(state): State<AppState>,
    UrlPath(session): UrlPath<String>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    state
        .resolver
        .audit(&session)
        .await
        .map(Json)
        .ok_or(ApiError::UnknownSession)
}

/// The window of `GET /v1/audit`, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
pub struct Window {
    /// From (inclusive); default the epoch.
    #[serde(default)]
    pub since_ms: u64,
    /// To (exclusive); default the end of time.
    #[serde(default = "forever")]
    pub until_ms: u64,
}

fn forever() -> u64 {
    u64::MAX
}

/// `GET /v1/audit?since_ms=&until_ms=`: every session's entries in the
/// window (what `keyhole report` reads). Names, reasons, counts; never
/// prompt text, an id or a value.
async fn audit_window(
    State(state): State<AppState>,
    Query(window): Query<Window>,
) -> Json<Vec<SessionTrail>> {
    Json(
        state
            .resolver
            .audit_window(window.since_ms, window.until_ms)
            .await,
    )
}

/// `POST /v1/calls`: answers' tool calls as the filter judged them, one
/// answer's object or a worker's list. Each is counted
/// (`keyhole_calls_total`) and attached to the session's entry of its turn,
/// each miss with its reason. 204 either way: the filter does not wait for it.
async fn calls(
    State(state): State<AppState>,
    axum::Extension(metrics): axum::Extension<Arc<Metrics>>,
    body: axum::body::Bytes,
) -> Result<StatusCode, ApiError> {
    let answers = serde_json::from_slice::<CallsBody>(&body)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?
        .into_answers();
    for req in answers {
        let mode = if req.shadow { "shadow" } else { "on" };
        metrics
            .calls(&req.phase.to_string(), &req.calls, mode)
            .await;
        let (Some(session), Some(turn)) = (&req.session, req.turn) else {
            continue;
        };
        let bytes = Bytes {
            bytes_in: req.bytes_in,
            bytes_out: req.bytes_out,
        };
        if state
            .resolver
            .record_calls(session, turn, &req.calls, bytes)
            .await
            .is_none()
        {
            tracing::debug!(turn, "calls of a turn no longer in the audit trail");
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Errors binding the socket.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket could not be bound or prepared.
    #[error("socket {path}: {source}")]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Serves `app` on a Unix socket at `path` (mode 0660) until `shutdown`
/// resolves, then drains in-flight requests and removes the socket file.
/// A stale socket file from a crashed run is replaced.
pub async fn serve_unix(
    path: &Path,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let io = |source| ServeError::Socket {
        path: path.to_owned(),
        source,
    };
    if path.exists() {
        std::fs::remove_file(path).map_err(io)?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(io)?;
    tracing::info!(socket = %path.display(), "control listening");
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    let _ = std::fs::remove_file(path);
    served.map_err(io)
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
