//! Callouts to control: a JSON `POST` dispatched from a stream callback, and
//! its answer read back in `on_http_call_response`.
//!
//! A stream half owns one [`Callout`]. It sends with [`Callout::send`] and
//! pauses; when Envoy answers, [`Callout::claim`] says whether the answer is
//! the awaited one, [`status`], [`body`] or [`answer`] read it, and
//! [`Callout::settle`] moves the stream on with the action the handler chose.
//!
//! Envoy may answer a call to a dead cluster inside the dispatch itself, running
//! `on_http_call_response` before `send` returns. The callback that dispatched
//! is then still running, and its return value (not a resume) must move the
//! stream on: `settle` keeps the handler's action, and `send` returns it as
//! [`Sent::Answered`]. A handler may itself send again (the LLM stream's second
//! ask); the bookkeeping nests.
//!
//! An unreachable or slow control still answers, with Envoy's synthetic
//! 503/504: callers always get the status, never an assumed success.

use crate::host::{self, HostError};
use keyhole_core::config::Control;
use keyhole_core::proto::alias::{ErrorBody, ErrorCode};
use proxy_wasm::types::{Action, BufferType, StreamType};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// One stream half's callouts to control (one at a time).
#[derive(Debug, Default)]
pub struct Callout {
    awaited: Awaited,
    /// True while [`Callout::send`] is inside the host's dispatch.
    dispatching: bool,
    /// The action of an answer handled during the dispatch, for `send` to return.
    early: Option<Action>,
}

/// The call whose answer the stream waits for.
#[derive(Debug, Default, Clone, Copy)]
enum Awaited {
    #[default]
    Nothing,
    /// Being dispatched: its token is not known yet, so any answer is its.
    Dispatching,
    Token(u32),
}

/// What came of [`Callout::send`].
#[derive(Debug)]
pub enum Sent {
    /// Dispatched: pause; the answer comes later.
    Waiting,
    /// Answered during the dispatch, and handled: return this action.
    Answered(Action),
}

impl Callout {
    /// POSTs `body` (JSON) to control at `path`. The caller puts what the
    /// answer handler needs into its state first: the answer may arrive before
    /// this returns. Fails when the host refuses the dispatch.
    pub fn send(&mut self, control: &Control, path: &str, body: &[u8]) -> Result<Sent, HostError> {
        let headers = vec![
            (":method", "POST"),
            (":path", path),
            (":authority", control.authority.as_str()),
            ("content-type", "application/json"),
        ];
        self.awaited = Awaited::Dispatching;
        self.early = None;
        // A send from a handler running inside an outer dispatch stays inside it.
        let outer = std::mem::replace(&mut self.dispatching, true);
        let dispatched = host::dispatch(
            &control.cluster,
            headers,
            body,
            Duration::from_millis(control.timeout_ms),
        );
        self.dispatching = outer;
        match (dispatched, self.early.take()) {
            (_, Some(action)) => Ok(Sent::Answered(action)),
            (Ok(token), None) => {
                self.awaited = Awaited::Token(token);
                Ok(Sent::Waiting)
            }
            (Err(e), None) => {
                self.awaited = Awaited::Nothing;
                Err(e)
            }
        }
    }

    /// True when `token` answers the awaited call, which is then over.
    pub fn claim(&mut self, token: u32) -> bool {
        let ours = match self.awaited {
            Awaited::Nothing => false,
            Awaited::Dispatching => true,
            Awaited::Token(awaited) => awaited == token,
        };
        if ours {
            self.awaited = Awaited::Nothing;
        }
        ours
    }

    /// Moves `stream` on after its answer was handled with `action`: resumes it
    /// on `Continue`, or, inside the dispatch, leaves `action` for `send` to
    /// return. A `Pause` leaves it paused (answered locally, or asking again).
    pub fn settle(&mut self, action: Action, stream: StreamType) {
        if self.dispatching {
            self.early = Some(action);
        } else if matches!(action, Action::Continue) {
            // A refused resume leaves the stream paused until Envoy times it
            // out: nothing unchecked leaves, so there is nothing else to do.
            let _ = host::resume(stream);
        }
    }
}

/// The answer's `:status`; 0 when it is missing or unreadable.
pub fn status() -> u16 {
    match host::call_response_header(":status") {
        Ok(Some(status)) => status.parse().unwrap_or(0),
        Ok(None) | Err(_) => 0,
    }
}

/// The answer's body (`size` from `on_http_call_response`); `None` when empty
/// or unreadable.
pub fn body(size: usize) -> Option<Vec<u8>> {
    if size == 0 {
        return None;
    }
    host::buffer(BufferType::HttpCallResponseBody, size).ok()
}

/// How a callout with a typed answer ended.
#[derive(Debug)]
pub enum Answer<T> {
    /// 200 with a body that deserialized.
    Ok(T),
    /// Anything else.
    Failed(Failure),
}

/// A callout that did not answer with a `T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Control's status (or Envoy's synthetic 503/504); 0 for a 200 whose body
    /// was missing, unreadable or not a `T`.
    pub status: u16,
    /// The code of control's JSON error body, when it sent one.
    pub code: Option<ErrorCode>,
}

/// Reads the answer (`body_size` from `on_http_call_response`) as a `T`.
pub fn answer<T: DeserializeOwned>(body_size: usize) -> Answer<T> {
    let status = status();
    if status != 200 {
        let code = body(body_size)
            .and_then(|b| serde_json::from_slice::<ErrorBody>(&b).ok())
            .map(|e| e.error.code);
        return Answer::Failed(Failure { status, code });
    }
    match body(body_size).and_then(|b| serde_json::from_slice(&b).ok()) {
        Some(value) => Answer::Ok(value),
        None => Answer::Failed(Failure {
            status: 0,
            code: None,
        }),
    }
}
