//! The JSON exchanged between the filter and control (`POST /v1/resolve`).
//!
//! Both ends use these types, so a change here is a protocol change: add fields
//! with `#[serde(default)]` so that an older peer keeps working.

use crate::Phase;
use serde::{Deserialize, Serialize};

/// One function tool as the client sent it: what retrieval needs, nothing more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    /// The function name as it appears in the request (`patient__search__smart`).
    pub name: String,
    /// The description the client sent (may be empty).
    #[serde(default)]
    pub description: String,
    /// The words its parameter schema is written with (names, descriptions,
    /// enum values; [`crate::tools::rank::schema_words`]); empty when the
    /// tool has no schema or the peer sent none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parameters: String,
}

/// The filter's question: which of these tools may the model see on this turn?
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResolveRequest {
    /// The session named by the agent service, if any.
    #[serde(default)]
    pub session: Option<String>,
    /// The agent phase of this turn.
    #[serde(default)]
    pub phase: Phase,
    /// The latest user turn's text.
    #[serde(default)]
    pub turn: String,
    /// Every function tool of the request, in request order. Empty when the
    /// filter names the registry by [`Self::registry`] only: control then
    /// answers [`UNKNOWN_REGISTRY_STATUS`] when it does not know that digest,
    /// and the filter asks once more with the descriptors.
    #[serde(default)]
    pub tools: Vec<ToolDescriptor>,
    /// The [`registry_digest`] of the request's function tools (hex). `None`
    /// (an older filter): control hashes [`Self::tools`] itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// Functions the request forces (`tool_choice`, `tool_config`); always kept.
    #[serde(default)]
    pub forced: Vec<String>,
    /// The tool-search control tool ([`crate::tools::recovery`]) on this turn:
    /// `None` when the filter does not add it (configuration `tool_search:
    /// off`, a phase without it, an older filter), and control composes for
    /// the whole phase budget as before. `Some`: the filter adds it, so
    /// control composes for one place less, and searches the registry with
    /// the model's query when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_search: Option<ToolSearch>,
    /// The listener runs `enforce: shadow`: the set is resolved and audited
    /// (marked shadow) but the request goes upstream unchanged. Absent (an
    /// older filter): `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
}

/// The tool-search control tool on one turn (see [`ResolveRequest::tool_search`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSearch {
    /// The `query` of the model's latest call of the control tool in this
    /// user turn (at most [`crate::tools::recovery::MAX_QUERY_CHARS`] characters,
    /// aliased like the rest of the request); `None` when the model has not
    /// called it since the latest user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// Why a tool was surfaced. Serialised as the machine-readable reason string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Reason {
    /// Retrieval ranked it within the budget.
    #[serde(rename = "rag")]
    Rag,
    /// The multi-entity floor pinned a composite workflow.
    #[serde(rename = "floor:multi-entity")]
    FloorMultiEntity,
    /// The research floor matched research phrasing.
    #[serde(rename = "floor:research")]
    FloorResearch,
    /// A surfaced tool needs a patient and no resolver was surfaced.
    #[serde(rename = "floor:patient-resolve")]
    FloorPatientResolve,
    /// The request's `tool_choice` names it.
    #[serde(rename = "tool-choice")]
    ToolChoice,
    /// It was in the session's previous audited set (fallback or recovery).
    #[serde(rename = "prior-set")]
    PriorSet,
    /// The model asked for it: a search of the registry with the query of
    /// its tool-search call ([`crate::tools::recovery`]) found it.
    #[serde(rename = "recovery")]
    Recovery,
    /// The turn has no text (a tool result only, an image, an empty
    /// message) and the session no prior set: one of the phase minimum of
    /// tools that change nothing.
    #[serde(rename = "no-turn")]
    NoTurn,
}

impl Reason {
    /// The reason as it appears in headers, logs and the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Rag => "rag",
            Reason::FloorMultiEntity => "floor:multi-entity",
            Reason::FloorResearch => "floor:research",
            Reason::FloorPatientResolve => "floor:patient-resolve",
            Reason::ToolChoice => "tool-choice",
            Reason::PriorSet => "prior-set",
            Reason::Recovery => "recovery",
            Reason::NoTurn => "no-turn",
        }
    }
}

/// One surfaced tool and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurfacedTool {
    /// Function name, as in the request.
    pub name: String,
    /// Activation reason.
    pub reason: Reason,
    /// Whether the tool may change a record (writes, deletes, unknown
    /// operations). The filter keeps no such tool in the formatter phase; an
    /// answer that does not say counts as mutating.
    #[serde(default = "unknown_mutates")]
    pub mutating: bool,
}

impl SurfacedTool {
    /// A surfaced tool whose operation is unknown (so: mutating).
    pub fn new(name: impl Into<String>, reason: Reason) -> Self {
        SurfacedTool {
            name: name.into(),
            reason,
            mutating: true,
        }
    }
}

fn unknown_mutates() -> bool {
    true
}

/// Where a candidate set came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A successful retrieval.
    #[default]
    Retrieval,
    /// Control could not retrieve (embedder or store down) and answered its
    /// bounded fallback: prior set ∪ floors.
    ControlFallback,
    /// The filter could not get an answer from control and decided locally.
    FilterFallback,
    /// Control ranked without vectors (lexical evidence, floors and the
    /// engine's rules): the registry's index was still being built, or the
    /// turn's deadline passed before its embedding and search did. Never
    /// silent: the filter sets `x-keyhole-source: lexical`.
    Lexical,
    /// The turn had no text to rank: the session's prior set, or with none
    /// the phase minimum of tools that change nothing. Never a fixed set of
    /// the whole registry's first tools, and never recorded as the session's
    /// prior set.
    NoTurn,
}

impl Source {
    /// The source as it appears in logs and headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Retrieval => "retrieval",
            Source::ControlFallback => "control-fallback",
            Source::FilterFallback => "filter-fallback",
            Source::Lexical => "lexical",
            Source::NoTurn => "no-turn",
        }
    }
}

/// Control's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolveResponse {
    /// The tools the model may see, best first. The filter clamps this list to
    /// the phase budget whatever it holds.
    pub tools: Vec<SurfacedTool>,
    /// How the set was obtained.
    #[serde(default)]
    pub source: Source,
    /// The turn's number in the session's audit trail, for the filter's
    /// `POST /v1/calls` ([`crate::proto::calls::CallsRequest::turn`]); `None`
    /// for a turn without a session, or from an older control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
}

/// The status control answers a request naming a registry by a digest it
/// does not know (evicted, or control restarted), with [`UnknownRegistry`] as
/// the body.
pub const UNKNOWN_REGISTRY_STATUS: u16 = 409;

/// Control's answer to a registry digest it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownRegistry {
    /// Always `true`: resend the request with its tool descriptors.
    pub unknown_registry: bool,
}

/// A registry's digest: SHA-256 over each tool's name, description and
/// parameter words in request order, each length-prefixed (u64
/// little-endian), as 64 lowercase hex digits. Parameter words are hashed
/// only when there are some, after a `u64::MAX` marker no length can be, so
/// a registry without schemas keeps the digest it had before they were
/// read. The same tools in another order make another digest (and the
/// same registry). A cryptographic hash because a client picks the tools: a
/// registry crafted to collide with another's must not take its place in
/// control's cache.
pub fn registry_digest<'a>(tools: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, description, parameters) in tools {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((description.len() as u64).to_le_bytes());
        h.update(description.as_bytes());
        if !parameters.is_empty() {
            h.update(u64::MAX.to_le_bytes());
            h.update((parameters.len() as u64).to_le_bytes());
            h.update(parameters.as_bytes());
        }
    }
    let bytes: [u8; 32] = h.finalize().into();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in bytes {
        for nibble in [b >> 4, b & 15] {
            out.extend(HEX.get(usize::from(nibble)).map(|&c| char::from(c)));
        }
    }
    out
}

/// A hex digest as bytes (`None` unless exactly 64 hex digits).
pub fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let [hi, lo] = [pair.first()?, pair.get(1)?];
        *slot = digit(*hi)? << 4 | digit(*lo)?;
    }
    Some(out)
}

/// The digest of a descriptor list ([`registry_digest`]).
pub fn descriptors_digest(tools: &[ToolDescriptor]) -> String {
    registry_digest(tools.iter().map(|t| {
        (
            t.name.as_str(),
            t.description.as_str(),
            t.parameters.as_str(),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_serialise_as_their_names() {
        for r in [
            Reason::Rag,
            Reason::FloorMultiEntity,
            Reason::FloorResearch,
            Reason::FloorPatientResolve,
            Reason::ToolChoice,
            Reason::PriorSet,
            Reason::Recovery,
            Reason::NoTurn,
        ] {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<Reason>(&json).unwrap(), r);
        }
    }

    #[test]
    fn sources_serialise_as_their_header_values() {
        for s in [
            Source::Retrieval,
            Source::ControlFallback,
            Source::FilterFallback,
            Source::Lexical,
            Source::NoTurn,
        ] {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<Source>(&json).unwrap(), s);
        }
        // An answer from a control that predates the field still reads.
        let answer: ResolveResponse = serde_json::from_str(r#"{"tools":[]}"#).unwrap();
        assert_eq!(answer.source, Source::Retrieval);
    }

    #[test]
    fn request_defaults_missing_optional_fields() {
        let req: ResolveRequest = serde_json::from_str(r#"{"tools":[{"name":"a"}]}"#).unwrap();
        assert_eq!(req.phase, Phase::Planner);
        assert_eq!(req.tools[0].description, "");
        assert!(req.session.is_none());
    }

    #[test]
    fn a_tool_without_metadata_counts_as_mutating() {
        let answer: ResolveResponse =
            serde_json::from_str(r#"{"tools":[{"name":"a","reason":"rag"}]}"#).unwrap();
        assert!(answer.tools[0].mutating);
        let answer: ResolveResponse =
            serde_json::from_str(r#"{"tools":[{"name":"a","reason":"rag","mutating":false}]}"#)
                .unwrap();
        assert!(!answer.tools[0].mutating);
    }

    #[test]
    fn digests_are_hex_sha256_and_round_trip() {
        let tools = [ToolDescriptor {
            name: "a".into(),
            description: "b".into(),
            parameters: String::new(),
        }];
        let d = descriptors_digest(&tools);
        assert_eq!(d.len(), 64);
        assert_eq!(d, registry_digest([("a", "b", "")]));
        assert_ne!(
            d,
            registry_digest([("ab", "", "")]),
            "length prefixes separate fields"
        );
        let with_schema = registry_digest([("a", "b", "dose unit")]);
        assert_ne!(d, with_schema, "parameter words are part of the registry");
        assert_ne!(
            with_schema,
            registry_digest([("a", "b", ""), ("dose unit", "", "")]),
            "the marker separates parameter words from a next tool"
        );
        assert_eq!(parse_digest(&d).map(|b| b.len()), Some(32));
        assert!(parse_digest("zz").is_none());
        assert!(parse_digest(&"g".repeat(64)).is_none());
    }

    #[test]
    fn a_request_by_digest_carries_no_tools() {
        let req: ResolveRequest = serde_json::from_str(r#"{"registry":"ab","turn":"x"}"#).unwrap();
        assert!(req.tools.is_empty());
        assert_eq!(req.registry.as_deref(), Some("ab"));
        let json = serde_json::to_string(&ResolveRequest::default()).unwrap();
        assert!(
            !json.contains("registry"),
            "an older control never sees the field unless used"
        );
        assert!(!json.contains("tool_search"), "nor the tool search");
    }

    #[test]
    fn the_tool_search_field_is_optional_both_ways() {
        let old: ResolveRequest = serde_json::from_str(r#"{"turn":"x"}"#).unwrap();
        assert_eq!(old.tool_search, None);
        let req: ResolveRequest = serde_json::from_str(r#"{"turn":"x","tool_search":{}}"#).unwrap();
        assert_eq!(req.tool_search, Some(ToolSearch { query: None }));
        let req = ResolveRequest {
            tool_search: Some(ToolSearch {
                query: Some("bmi".into()),
            }),
            ..Default::default()
        };
        let json = serde_json::to_string(&req).unwrap();
        assert!(json.contains(r#""tool_search":{"query":"bmi"}"#), "{json}");
        assert_eq!(serde_json::from_str::<ResolveRequest>(&json).unwrap(), req);
        assert_eq!(
            serde_json::to_string(&Reason::Recovery).unwrap(),
            r#""recovery""#
        );
    }
}
