//! `enforce: shadow` on the LLM listener, and the recall of every answer.
//!
//! Shadow never rewrites: the request leaves as the client sent it (no
//! alias, even under `aliases: on`; no tool removed; no control tool added;
//! no header), and the answer leaves as the provider sent it, with one
//! header, [`SHADOW_HEADER`]. What keyhole would have done is resolved and
//! audited (control marks the entry `shadow`) and measured on the answer.
//!
//! Recall is judged on both modes ([`keyhole_core::tools::recall`]) and
//! posted to control as `POST /v1/calls`. The answer is queued in the
//! worker's [`Shared`](super::Shared) state and sent by the root context on
//! its next tick with the others queued since ([`send_pending`]): a callout
//! of a stream context is cancelled when the stream ends, which for an
//! answer is at once, and one post per tick keeps control's work per turn
//! to the resolve.

use super::{LlmStream, State};
use crate::hold::Verdict;
use crate::host;
use crate::metrics::{count, Metrics};
use keyhole_core::config::{Aliases, Control, Enforce};
use keyhole_core::proto::calls::{self, CalledTool, CallsRequest};
use keyhole_core::proto::hold::HeaderEdit;
use keyhole_core::proto::tools::{ResolveResponse, SurfacedTool};
use keyhole_core::tools::format::ParsedRequest;
use keyhole_core::tools::recall::{self, Verdict as Recall};
use keyhole_core::tools::surface::{self, Finished, Outage};
use proxy_wasm::types::{Action, BufferType};
use std::time::Duration;

/// Answer header of a shadow listener: `covered` when every tool the answer
/// calls was in the set keyhole would have surfaced, `missed` when one was
/// not. Absent on an answer without calls, and on a streamed answer (its
/// headers leave before its calls are known; the counters and the audit
/// have it).
pub const SHADOW_HEADER: &str = "x-keyhole-shadow";

/// Answers (each one serialised [`CallsRequest`]) a worker keeps for its
/// next tick; more are dropped and counted (`keyhole.calls_dropped`).
pub const MAX_PENDING_CALLS: usize = 1024;

/// Answers sent in one `POST /v1/calls` at most.
pub const CALLS_PER_POST: usize = 256;

/// How often the root context sends the pending answers.
pub const CALLS_TICK: Duration = Duration::from_millis(100);

impl LlmStream {
    /// The listener only measures.
    pub(super) fn shadow(&self) -> bool {
        self.config.enforce == Enforce::Shadow
    }

    /// Raw ids in requests are replaced (`aliases: on`, never in shadow).
    pub(super) fn aliasing(&self) -> bool {
        self.config.aliases == Aliases::On && !self.shadow()
    }

    /// Forwards the request unchanged where `on` would have refused it
    /// (`reason`): counted, logged, never checked on the answer.
    pub(super) fn shadow_pass(&mut self, reason: &str) -> Action {
        count(self.metrics.shadow.passed, 1);
        log::info!(
            "keyhole.shadow-pass context={} session={} phase={} reason={reason}",
            self.context_id,
            self.session.as_deref().unwrap_or("-"),
            self.phase
        );
        self.state = State::Passthrough;
        Action::Continue
    }

    /// The shadow decision: core decides as it would on `on`, nothing of it
    /// is applied, and the answer is checked against the set it chose.
    pub(super) fn shadow_apply(
        &mut self,
        parsed: &ParsedRequest<'_>,
        body: &[u8],
        answer: Result<&ResolveResponse, Outage>,
    ) -> Action {
        let answer = match answer {
            Ok(answer) => answer,
            Err(outage) => {
                count(self.metrics.shadow.outage, 1);
                return self.shadow_pass(outage.as_str());
            }
        };
        let finished = surface::finish_with(
            parsed,
            body,
            self.phase,
            Ok(answer),
            &[],
            self.config.on_outage,
            false,
        );
        let (would_send, surfaced, source) = match finished {
            Finished::Refuse(refusal, _) => return self.shadow_pass(refusal.as_str()),
            Finished::Forward {
                body,
                surfaced,
                source,
                ..
            } => (body, surfaced, source),
        };
        self.bytes = (body.len(), would_send.len());
        count(self.metrics.shadow.requests, 1);
        log::info!(
            "keyhole.shadow-set session={} phase={} source={} format={} tools_in={} tools_out={} bytes_in={} bytes_out={}",
            self.session.as_deref().unwrap_or("-"),
            self.phase,
            source.as_str(),
            parsed.format.as_str(),
            parsed.tools.len(),
            surfaced.len(),
            body.len(),
            would_send.len()
        );
        self.state = State::Decided {
            surfaced,
            source,
            format: parsed.format,
            search_tool: false,
        };
        Action::Continue
    }

    /// Judges the answer's `called` tools against `surfaced`, counts them
    /// and queues them for control. Returns the judged calls.
    pub(super) fn judge_calls(
        &mut self,
        called: &[String],
        surfaced: &[SurfacedTool],
    ) -> Vec<CalledTool> {
        let names: Vec<&str> = surfaced.iter().map(|t| t.name.as_str()).collect();
        let judged = recall::judge(called, &names);
        let hits = judged.iter().filter(|c| c.covered).count();
        count(self.metrics.calls_covered, hits as i64);
        count(self.metrics.calls_missed, (judged.len() - hits) as i64);
        if self.shadow() {
            match Recall::of(&judged) {
                Some(Recall::Covered) => count(self.metrics.shadow.covered, 1),
                Some(Recall::Missed) => count(self.metrics.shadow.missed, 1),
                None => {}
            }
        }
        let post = CallsRequest {
            session: self.session.clone(),
            phase: self.phase,
            turn: self.turn,
            shadow: self.shadow(),
            bytes_in: self.bytes.0 as u64,
            bytes_out: self.bytes.1 as u64,
            calls: judged.clone(),
        };
        let queued = serde_json::to_vec(&post).ok().is_some_and(|body| {
            let Ok(mut pending) = self.shared.calls.try_borrow_mut() else {
                return false;
            };
            if pending.len() >= MAX_PENDING_CALLS {
                return false;
            }
            pending.push_back(body);
            true
        });
        if !queued {
            count(self.metrics.calls_dropped, 1);
        }
        judged
    }

    /// Passes a held shadow answer `body` on unchanged, with its verdict
    /// header when it calls tools.
    pub(super) fn shadow_verdict(&mut self, body: &[u8], judged: &[CalledTool]) -> Action {
        let edits = Recall::of(judged)
            .map(|v| HeaderEdit::Set(SHADOW_HEADER.to_owned(), v.as_str().to_owned()))
            .into_iter()
            .collect();
        let verdict = Verdict {
            status: 0,
            names: Vec::new(),
            edits,
        };
        // A verdict that cannot be written leaves the answer without one:
        // the open hold passes it on unchanged.
        if let Ok(framed) = verdict.frame(body) {
            let _ = host::replace_buffer(BufferType::HttpResponseBody, body.len(), &framed);
        }
        Action::Continue
    }
}

/// Sends the worker's pending answers to control as `POST /v1/calls` lists
/// of at most [`CALLS_PER_POST`] (from the root context's tick: one post per
/// tick under any traffic short of that many answers per tick). Answers are
/// not awaited; a refused dispatch drops its answers and counts them
/// (`keyhole.calls_dropped`).
pub fn send_pending(shared: &super::Shared, control: &Control, metrics: &Metrics) {
    let pending: Vec<Vec<u8>> = match shared.calls.try_borrow_mut() {
        Ok(mut pending) => pending.drain(..).collect(),
        Err(_) => return,
    };
    for answers in pending.chunks(CALLS_PER_POST) {
        let body = calls::list_body(answers.iter().map(Vec::as_slice));
        let headers = vec![
            (":method", "POST"),
            (":path", "/v1/calls"),
            (":authority", control.authority.as_str()),
            ("content-type", "application/json"),
        ];
        let timeout = Duration::from_millis(control.timeout_ms);
        match host::dispatch(&control.cluster, headers, &body, timeout) {
            Ok(_) => count(metrics.calls_posts, 1),
            Err(_) => count(metrics.calls_dropped, answers.len() as i64),
        }
    }
}
