//! `POST /v1/calls`: the tool calls of one answer, as the filter read them,
//! for control's audit trail and counters (recall from real calls).
//!
//! The filter learns what the model called only on the answer, after the
//! turn's resolve; it posts the names and whether each was on the surface it
//! was judged against, never a call's arguments. Sent on both `enforce`
//! modes; control answers 204 and the filter never waits for it.
//!
//! A worker sends its pending answers together, as a list
//! ([`CallsBody::Many`]), at most one post per tick whatever the traffic;
//! control also takes one answer's object ([`CallsBody::One`]).

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

/// A `POST /v1/calls` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CallsBody {
    /// The answers a worker gathered since its last post.
    Many(Vec<CallsRequest>),
    /// One answer's calls.
    One(CallsRequest),
}

impl CallsBody {
    /// The answers, in the order sent.
    pub fn into_answers(self) -> Vec<CallsRequest> {
        match self {
            Self::Many(answers) => answers,
            Self::One(answer) => vec![answer],
        }
    }
}

/// Writes `answers` (each one [`CallsRequest`] serialised) as one
/// [`CallsBody::Many`] body, without parsing them again.
pub fn list_body<'a>(answers: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut body = vec![b'['];
    for (i, answer) in answers.into_iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(answer);
    }
    body.push(b']');
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(turn: u64, name: &str) -> CallsRequest {
        CallsRequest {
            session: Some("s".into()),
            turn: Some(turn),
            bytes_in: 100,
            bytes_out: 10,
            calls: vec![CalledTool {
                name: name.into(),
                covered: turn.is_multiple_of(2),
            }],
            ..CallsRequest::default()
        }
    }

    #[test]
    fn a_list_body_reads_back_as_every_answer_in_order() {
        let answers = [answer(1, "a"), answer(2, "b"), answer(3, "c")];
        let serialised: Vec<Vec<u8>> = answers
            .iter()
            .map(|a| serde_json::to_vec(a).unwrap())
            .collect();
        let body = list_body(serialised.iter().map(Vec::as_slice));
        let read: CallsBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(read.into_answers(), answers.to_vec());
        let empty: CallsBody = serde_json::from_slice(&list_body([])).unwrap();
        assert!(empty.into_answers().is_empty());
    }

    #[test]
    fn one_answer_object_is_still_read() {
        let one = answer(7, "x");
        let read: CallsBody = serde_json::from_slice(&serde_json::to_vec(&one).unwrap()).unwrap();
        assert_eq!(read.into_answers(), vec![one]);
    }

    #[test]
    fn a_body_that_is_neither_is_refused() {
        for bad in [&b"42"[..], b"\"calls\"", b"[1,2]", b"{\"calls\": 3}"] {
            assert!(serde_json::from_slice::<CallsBody>(bad).is_err(), "{bad:?}");
        }
    }
}
