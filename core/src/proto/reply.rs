//! The JSON error bodies the filter answers locally.
//!
//! Every local answer has one shape, close enough to each provider's error
//! body that their client libraries surface the message:
//!
//! ```json
//! {"type":"error","error":{"type":"keyhole_invalid_request","code":400,"message":"…"}}
//! ```
//!
//! (`error.message` and `error.type` are what OpenAI and Anthropic clients
//! read; `error.code` is what Gemini clients read; the top-level `type` is
//! Anthropic's.) Messages name the problem and never quote the request: a
//! body may hold patient data.

use crate::tools::format::FormatError;
use serde::Serialize;

/// The `content-type` of every local reply.
pub const CONTENT_TYPE: &str = "application/json";

/// What went wrong, as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request body cannot be read, or carries tools in an unknown format (400).
    InvalidRequest,
    /// The request body is larger than the filter reads (413).
    BodyTooLarge,
    /// No candidate set can be decided and the configuration says reject (503).
    Unavailable,
    /// The model called a tool it was not shown; the answer was withheld (502).
    OffSurfaceToolCall,
    /// An alias in an HMS request was not issued in this session (404).
    UnknownAlias,
    /// An HMS response holds an id that could not be aliased; it was withheld (502).
    Unaliasable,
    /// An LLM request holds an id that could not be aliased (conflicting ids,
    /// a rewrite that would leave one); it was not forwarded (422).
    UnaliasableRequest,
    /// The filter failed in a way that is not the client's fault (500).
    Internal,
}

impl ErrorKind {
    /// The `error.type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "keyhole_invalid_request",
            ErrorKind::BodyTooLarge => "keyhole_body_too_large",
            ErrorKind::Unavailable => "keyhole_unavailable",
            ErrorKind::OffSurfaceToolCall => "keyhole_off_surface_tool_call",
            ErrorKind::UnknownAlias => "keyhole_unknown_alias",
            ErrorKind::Unaliasable => "keyhole_unaliasable_response",
            ErrorKind::UnaliasableRequest => "keyhole_unaliasable_request",
            ErrorKind::Internal => "keyhole_internal",
        }
    }

    /// The HTTP status of the reply.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::BodyTooLarge => 413,
            ErrorKind::Unavailable => 503,
            ErrorKind::OffSurfaceToolCall => 502,
            ErrorKind::UnknownAlias => 404,
            ErrorKind::Unaliasable => 502,
            ErrorKind::UnaliasableRequest => 422,
            ErrorKind::Internal => 500,
        }
    }
}

/// A local reply: status and JSON body (send with [`CONTENT_TYPE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalReply {
    /// What kind of error it answers (the status follows from it).
    pub kind: ErrorKind,
    /// HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: Vec<u8>,
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    code: u16,
    message: &'a str,
}

/// The reply for `kind` with `message` (which must not quote request data).
pub fn error(kind: ErrorKind, message: &str) -> LocalReply {
    let body = Body {
        kind: "error",
        error: Detail {
            kind: kind.as_str(),
            code: kind.status(),
            message,
        },
    };
    // Serialising a struct of strings and a number cannot fail; the fallback
    // keeps the reply well-formed regardless.
    let body = serde_json::to_vec(&body).unwrap_or_else(|_| {
        format!(
            r#"{{"type":"error","error":{{"type":"{}","code":{}}}}}"#,
            kind.as_str(),
            kind.status()
        )
        .into_bytes()
    });
    LocalReply {
        kind,
        status: kind.status(),
        body,
    }
}

/// A request body the filter cannot read (400).
pub fn invalid_request(err: &FormatError) -> LocalReply {
    error(
        ErrorKind::InvalidRequest,
        &format!("keyhole cannot read this request: {err}"),
    )
}

/// A request body that carries more tool definitions than its phase allows
/// (400): `found` by the independent detector ([`crate::tools::detect`]), `budget`
/// the phase's. The request is not forwarded.
pub fn too_many_tools(found: usize, budget: usize, phase: crate::Phase) -> LocalReply {
    error(
        ErrorKind::InvalidRequest,
        &format!(
            "keyhole refuses this request: it would send {found} tool definitions to the model, \
             and the {phase} phase allows at most {budget}"
        ),
    )
}

/// A request body over the limit (413).
pub fn body_too_large(limit_bytes: usize) -> LocalReply {
    error(
        ErrorKind::BodyTooLarge,
        &format!("keyhole reads request bodies up to {limit_bytes} bytes; this one is larger"),
    )
}

/// No bounded candidate set could be decided and `on_outage` is `reject` (503).
pub fn unavailable() -> LocalReply {
    error(
        ErrorKind::Unavailable,
        "keyhole cannot choose the tools for this request right now (control unavailable); retry later",
    )
}

/// The model's answer called tools outside the surfaced set (502). `names`
/// are tool names, which are not patient data.
pub fn off_surface_tool_call<S: AsRef<str>>(names: &[S]) -> LocalReply {
    let names: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
    error(
        ErrorKind::OffSurfaceToolCall,
        &format!(
            "the model called tools it was not offered on this turn: {}",
            names.join(", ")
        ),
    )
}

/// An alias not issued in this session (404). Aliases are opaque, so naming
/// one is safe.
pub fn unknown_alias(alias: &str) -> LocalReply {
    error(
        ErrorKind::UnknownAlias,
        &format!("alias {alias:?} was not issued in this session"),
    )
}

/// An HMS response that cannot be passed on because an id in it could not be
/// aliased (502). `reason` says why and must not quote the response.
pub fn unaliasable(reason: &str) -> LocalReply {
    error(
        ErrorKind::Unaliasable,
        &format!("keyhole withheld this HMS response: an id in it could not be aliased ({reason})"),
    )
}

/// What the response hold filter answers in place of a response that keyhole
/// held closed but that carries no valid verdict (502). Sent by the Lua side
/// (see [`crate::proto::hold::lua_protocol`]).
pub fn withheld_without_verdict() -> LocalReply {
    error(
        ErrorKind::Unaliasable,
        "keyhole withheld this response: it carried no valid verdict",
    )
}

/// What the request hold filter answers for a held request without a valid
/// verdict (500): the request is not sent. Sent by the Lua side.
pub fn request_not_rewritten() -> LocalReply {
    error(
        ErrorKind::Internal,
        "keyhole could not rewrite this request; it was not sent",
    )
}

/// An internal failure (500); `message` says what could not be done.
pub fn internal(message: &str) -> LocalReply {
    error(ErrorKind::Internal, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn every_reply_has_the_one_shape() {
        let replies = [
            (
                invalid_request(&FormatError::UnknownFormat),
                ErrorKind::InvalidRequest,
            ),
            (body_too_large(1024), ErrorKind::BodyTooLarge),
            (unavailable(), ErrorKind::Unavailable),
            (
                off_surface_tool_call(&["drop__table"]),
                ErrorKind::OffSurfaceToolCall,
            ),
            (unknown_alias("patient-042"), ErrorKind::UnknownAlias),
            (unaliasable("control unavailable"), ErrorKind::Unaliasable),
            (
                error(ErrorKind::UnaliasableRequest, "conflicting ids"),
                ErrorKind::UnaliasableRequest,
            ),
        ];
        for (reply, kind) in replies {
            assert_eq!(reply.status, kind.status());
            let v: Value = serde_json::from_slice(&reply.body).unwrap();
            assert_eq!(v["type"], "error");
            assert_eq!(v["error"]["type"], kind.as_str());
            assert_eq!(v["error"]["code"], kind.status());
            assert!(!v["error"]["message"].as_str().unwrap().is_empty());
        }
    }

    #[test]
    fn messages_are_escaped_and_name_the_problem() {
        let reply = invalid_request(&FormatError::UnknownFormat);
        assert_eq!(
            String::from_utf8(reply.body).unwrap(),
            r#"{"type":"error","error":{"type":"keyhole_invalid_request","code":400,"message":"keyhole cannot read this request: request body carries tools in an unknown format"}}"#
        );
        let reply = unknown_alias("a\"b");
        let v: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(
            v["error"]["message"],
            "alias \"a\\\"b\" was not issued in this session"
        );
    }

    #[test]
    fn an_unreadable_body_is_described_without_quoting_it() {
        let body = br#"{"tools":[{"type":"function","function":{"name":"a","description":["Anna Schmidt"]}}]}"#;
        let err = crate::tools::format::parse("/v1/chat/completions", body).unwrap_err();
        let reply = invalid_request(&err);
        let text = String::from_utf8(reply.body).unwrap();
        assert!(!text.contains("Anna"), "{text}");
        assert!(text.contains("tools[0]"), "{text}");
    }
}
