//! `POST /v1/calls`: the tool calls of one answer, as the filter read them,
//! for control's audit trail and counters (recall from real calls).
//!
//! The filter learns what the model called only on the answer, after the
//! turn's resolve; it posts the names and whether each was on the surface it
//! was judged against, never a call's arguments. Sent on both `enforce`
//! modes; control answers 204 and the filter never waits for it.

use crate::Phase;
use serde::{Deserialize, Serialize};

/// One answer's calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallsRequest {
    /// The session named by the agent service, if any.
    #[serde(default)]
    pub session: Option<String>,
    /// The turn's phase.
    #[serde(default)]
    pub phase: Phase,
    /// The turn as control numbered it in its resolve answer
    /// ([`crate::proto::tools::ResolveResponse::turn`]); `None` when control
    /// gave none (an outage, a session-less turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// The listener runs `enforce: shadow`: the set was only measured.
    #[serde(default)]
    pub shadow: bool,
    /// Bytes of the request body as the client sent it.
    #[serde(default)]
    pub bytes_in: u64,
    /// Bytes of the body keyhole forwarded (`on`) or would have forwarded
    /// (`shadow`).
    #[serde(default)]
    pub bytes_out: u64,
    /// The answer's function calls in answer order, each name once.
    #[serde(default)]
    pub calls: Vec<CalledTool>,
}

/// One called tool, judged against the surface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalledTool {
    /// The function name as the model wrote it.
    pub name: String,
    /// `true`: the tool was in the surfaced set (a hit). `false`: a miss,
    /// the tool was outside it or it is the tool-search control tool.
    pub covered: bool,
}
