//! `POST /v2/turn`: one LLM turn in one round trip (`aliases: on`).
//!
//! The filter sends what `POST /v1/alias/encode` and `POST /v1/resolve` carried
//! apart: the raw ids its prompt scan found, and the turn as read from the
//! body *before* aliasing (the registry by digest, the session, the phase, the
//! tool-search query). Control mints or looks up the aliases and persists them,
//! aliases the turn and the query itself (the same scan rules, the same
//! aliases: [`crate::alias::prompt::alias_text`]), ranks the aliased turn,
//! audits it, and answers the aliases and the set together.
//!
//! The exchange is versioned: the request carries [`TURN_VERSION`] and control
//! answers [`ErrorCode::VersionMismatch`](crate::proto::alias::ErrorCode) (400)
//! with its own version when they differ; the answer carries control's version
//! and the filter checks it. A control that predates the route answers 404.
//! In both cases the filter falls back to the two `/v1` calls.
//!
//! Errors of the alias half (taxonomy, store, conflict) are the alias API's
//! ([`crate::proto::alias::ErrorBody`], the same statuses): no aliases, no
//! forwarding. A failure of the resolve half is answered 200 with the aliases
//! and [`TurnResolve::Failed`]: the filter forwards the aliased body with the
//! bounded fallback, as when `/v1/resolve` fails.

use crate::proto::alias::{EncodeRequest, KnownAlias};
use crate::proto::tools::{ResolveRequest, ResolveResponse};
use serde::{Deserialize, Serialize};

/// The version of the `/v2/turn` exchange both sides speak.
pub const TURN_VERSION: u32 = 2;

/// The route.
pub const TURN_PATH: &str = "/v2/turn";

/// `POST /v2/turn` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    /// [`TURN_VERSION`] of the sender.
    pub version: u32,
    /// The digest of the sender's taxonomy (as [`crate::proto::alias::WithTaxonomy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taxonomy: Option<String>,
    /// The ids to alias (`prompt: true`), as for `/v1/alias/encode`.
    pub encode: EncodeRequest,
    /// The turn to rank, read from the body before aliasing: control aliases
    /// its `turn` and tool-search query before anything reads them.
    pub resolve: ResolveRequest,
}

/// Only the version of a request, read before the rest so that a request
/// of another version is answered with both versions, not a parse error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct VersionProbe {
    /// The sender's version (`None`: not a versioned request).
    #[serde(default)]
    pub version: Option<u32>,
}

/// `POST /v2/turn` answer (200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnResponse {
    /// Control's [`TURN_VERSION`].
    pub version: u32,
    /// One alias per id of the request, in its order (as `/v1/alias/encode`).
    pub aliases: Vec<String>,
    /// The session's known ids (as `/v1/alias/encode`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known: Vec<KnownAlias>,
    /// The resolve half.
    pub resolve: TurnResolve,
}

/// What came of ranking the turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnResolve {
    /// The set, as `/v1/resolve` answers it.
    Answer(ResolveResponse),
    /// Control does not know the registry's digest: the filter asks
    /// `/v1/resolve` once more with the descriptors (on the aliased body).
    UnknownRegistry,
    /// The turn could not be ranked (the status `/v1/resolve` would have
    /// answered): the filter takes the bounded fallback.
    Failed {
        /// That status.
        status: u16,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tools::Source;

    #[test]
    fn the_answer_round_trips_in_each_form() {
        for resolve in [
            TurnResolve::Answer(ResolveResponse {
                tools: Vec::new(),
                source: Source::Lexical,
                turn: Some(7),
            }),
            TurnResolve::UnknownRegistry,
            TurnResolve::Failed { status: 400 },
        ] {
            let answer = TurnResponse {
                version: TURN_VERSION,
                aliases: vec!["patient-k7q2-001".into()],
                known: Vec::new(),
                resolve,
            };
            let json = serde_json::to_vec(&answer).unwrap();
            assert_eq!(
                serde_json::from_slice::<TurnResponse>(&json).unwrap(),
                answer
            );
        }
    }

    #[test]
    fn the_version_is_read_from_any_request() {
        let probe: VersionProbe =
            serde_json::from_str(r#"{"version":3,"something":"new"}"#).unwrap();
        assert_eq!(probe.version, Some(3));
        let probe: VersionProbe = serde_json::from_str(r#"{"session":"s"}"#).unwrap();
        assert_eq!(probe.version, None);
    }
}
