//! A misbehaving control on a Unix socket, for fault-injection tests of the
//! filter: it answers `/v1/resolve` slowly, with an error status, with garbage
//! or with the whole registry. (The real control never does these on purpose;
//! the filter must stay bounded when it does.)

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use keyhole_core::proto::tools::{
    Reason, ResolveRequest, ResolveResponse, Source, SurfacedTool, UnknownRegistry,
    UNKNOWN_REGISTRY_STATUS,
};
use std::path::Path;
use std::time::Duration;

/// How the fake answers.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Sleeps this long, then answers an empty set.
    Slow(Duration),
    /// Answers this status with a JSON error.
    Status(u16),
    /// Answers 200 with a body that is not a resolve answer.
    Garbage,
    /// Answers 200 with every tool of the request (after asking for the
    /// descriptors of a request by digest alone, as for an unknown registry).
    Everything,
}

/// A running fake; stops when dropped.
pub struct FakeControl {
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeControl {
    /// Serves `fault` on `socket`.
    pub async fn start(socket: &Path, fault: Fault) -> anyhow::Result<FakeControl> {
        let _ = std::fs::remove_file(socket);
        let listener = tokio::net::UnixListener::bind(socket)?;
        let app = axum::Router::new()
            .route("/v1/resolve", axum::routing::post(resolve))
            .with_state(fault);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(FakeControl { _stop: stop })
    }
}

async fn resolve(State(fault): State<Fault>, Json(req): Json<ResolveRequest>) -> Response {
    match fault {
        Fault::Slow(d) => {
            // A zero sleep still waits for the timer's next tick (up to 1 ms).
            if !d.is_zero() {
                tokio::time::sleep(d).await;
            }
            Json(ResolveResponse {
                tools: Vec::new(),
                source: Source::Retrieval,
                turn: None,
            })
            .into_response()
        }
        Fault::Status(s) => (
            StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "{\"error\":\"injected\"}",
        )
            .into_response(),
        Fault::Garbage => (StatusCode::OK, "{\"tools\": [\"not\", \"a\", \"set\"").into_response(),
        // Keeps no registry: a question by digest alone is answered "unknown",
        // so the filter asks again with the descriptors.
        Fault::Everything if req.tools.is_empty() && req.registry.is_some() => (
            StatusCode::from_u16(UNKNOWN_REGISTRY_STATUS).unwrap_or(StatusCode::CONFLICT),
            Json(UnknownRegistry {
                unknown_registry: true,
            }),
        )
            .into_response(),
        Fault::Everything => Json(ResolveResponse {
            tools: req
                .tools
                .into_iter()
                .map(|t| SurfacedTool {
                    name: t.name,
                    reason: Reason::Rag,
                    mutating: false,
                })
                .collect(),
            source: Source::Retrieval,
            turn: None,
        })
        .into_response(),
    }
}
