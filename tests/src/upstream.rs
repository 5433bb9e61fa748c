//! A recording upstream: the far side of the network in tests and demos.
//!
//! It records every request it receives and answers from a table of canned
//! responses by path, or by echoing the request body (what an LLM would have
//! received) when no canned response matches.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
}

/// A canned answer.
#[derive(Debug, Clone)]
pub struct Canned {
    /// Status code.
    pub status: u16,
    /// Extra headers (`content-type` defaults to JSON; an empty value removes
    /// a header, so a body can come without a `content-type`).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Bytes,
    /// When set, the body is sent as server-sent events, one `\n\n`-terminated
    /// event at a time, with this pause between events.
    pub stream_delay: Option<std::time::Duration>,
}

impl Canned {
    /// A 200 JSON answer.
    pub fn json(body: impl Into<Bytes>) -> Canned {
        Canned {
            status: 200,
            headers: Vec::new(),
            body: body.into(),
            stream_delay: None,
        }
    }
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Vec<Recorded>>,
    /// Path (without query) → answer.
    canned: Mutex<HashMap<String, Canned>>,
}

/// A running upstream; stops when dropped.
pub struct Upstream {
    /// Its loopback address.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Upstream {
    /// Binds `127.0.0.1:0` and serves in the background.
    pub async fn start() -> anyhow::Result<Upstream> {
        Self::start_on("127.0.0.1:0".parse()?).await
    }

    /// Binds `addr` and serves in the background.
    pub async fn start_on(addr: SocketAddr) -> anyhow::Result<Upstream> {
        let shared = Arc::new(Shared::default());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Upstream {
            addr,
            shared,
            _stop: stop,
        })
    }

    /// Answers `path` with `canned` from now on.
    pub fn set(&self, path: &str, canned: Canned) {
        if let Ok(mut map) = self.shared.canned.lock() {
            map.insert(path.to_owned(), canned);
        }
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Recorded> {
        self.shared
            .seen
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Forgets the requests received so far.
    pub fn clear(&self) {
        if let Ok(mut v) = self.shared.seen.lock() {
            v.clear();
        }
    }
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 256 * 1024 * 1024).await {
        Ok(b) => b,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let path = parts.uri.path().to_owned();
    if let Ok(mut seen) = shared.seen.lock() {
        seen.push(Recorded {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            headers: parts.headers.clone(),
            body: body.clone(),
        });
    }
    let canned = shared
        .canned
        .lock()
        .ok()
        .and_then(|m| m.get(&path).cloned());
    match canned {
        Some(c) if c.stream_delay.is_some() => stream(c),
        Some(c) => {
            let mut resp = (
                StatusCode::from_u16(c.status).unwrap_or(StatusCode::OK),
                c.body,
            )
                .into_response();
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            for (k, v) in c.headers {
                let Ok(k) = axum::http::HeaderName::try_from(k) else {
                    continue;
                };
                if v.is_empty() {
                    resp.headers_mut().remove(k);
                } else if let Ok(v) = HeaderValue::try_from(v) {
                    resp.headers_mut().insert(k, v);
                }
            }
            resp
        }
        None => {
            let content_type = parts
                .headers
                .get("content-type")
                .cloned()
                .unwrap_or_else(|| HeaderValue::from_static("application/octet-stream"));
            let mut resp = (StatusCode::OK, body).into_response();
            resp.headers_mut().insert("content-type", content_type);
            resp.headers_mut().insert(
                "x-echo-method",
                HeaderValue::from_str(parts.method.as_str())
                    .unwrap_or(HeaderValue::from_static("?")),
            );
            resp
        }
    }
}

/// Sends a canned body as an event stream, event by event.
fn stream(c: Canned) -> Response {
    let delay = c.stream_delay.unwrap_or_default();
    let text = String::from_utf8_lossy(&c.body).into_owned();
    let events: Vec<String> = text.split_inclusive("\n\n").map(str::to_owned).collect();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        for event in events {
            if tx.send(Ok(Bytes::from(event))).await.is_err() {
                return;
            }
            tokio::time::sleep(delay).await;
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream_from(rx));
    let mut resp = (
        StatusCode::from_u16(c.status).unwrap_or(StatusCode::OK),
        body,
    )
        .into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp
}

/// An mpsc receiver as a stream.
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures_util::stream::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
