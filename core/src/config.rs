//! The filter's plugin configuration (JSON in the Envoy config).
//!
//! [`FilterConfig`] is what the operator writes; [`Config`] is what the filter
//! runs with. [`Config::from_json`] is the only way from one to the other, and
//! every error it returns names the offending field, so `on_configure` (and
//! `envoy --mode validate`) can say exactly what is wrong.

use crate::alias::{Taxonomy, TaxonomyConfig};
use crate::tools::format::{BuiltinTools, Format};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What a listener's filter instance does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Tool surface on LLM requests.
    Llm,
    /// Id aliasing on HMS traffic.
    Hms,
}

/// What to do when control gives no usable answer and nothing is known about
/// the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOutage {
    /// Answer the client with a 503 JSON error.
    Reject,
    /// Forward the request with no function tools.
    Strip,
}

/// What to do with an LLM answer that calls a tool the model was not shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OffSurface {
    /// Pass the answer on, with an `x-keyhole-off-surface` header and a counter.
    Flag,
    /// Replace the answer with a 502 JSON error naming the tools.
    Block,
}

/// What the HMS listener does with a request carrying values shaped like raw
/// record ids (UUIDs, FHIR ids with a configured prefix, numbers after a kind
/// in the path) in its path, query, scanned headers or body. Either way they
/// are counted (`keyhole.hms_raw_ids`) and logged by place, never by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RawIds {
    /// Answer with a 400 naming the places; nothing reaches HMS. The model
    /// never holds a raw id, so one in a request went around keyhole.
    Refuse,
    /// Forward the request as sent.
    Pass,
}

impl RawIds {
    /// The setting as written.
    pub fn as_str(self) -> &'static str {
        match self {
            RawIds::Refuse => "refuse",
            RawIds::Pass => "pass",
        }
    }
}

/// Whether the LLM listener replaces raw ids in requests with their session
/// aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Aliases {
    /// Requests pass with their ids as written.
    Off,
    /// Every raw id outside the tool definitions is replaced by its session
    /// alias before the request leaves (the same aliases as on the HMS
    /// listener); an id that cannot be aliased refuses the request.
    On,
}

/// Whether the LLM listener adds the tool-search control tool
/// ([`crate::tools::recovery`]) to the surfaced set of every turn that chooses tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchTool {
    /// No control tool: the model sees only the surfaced registry tools, and
    /// calls of the control tool in a history are not read.
    Off,
    /// The control tool takes one place of the phase budget; a call of it
    /// has control search the registry, and what it finds joins the next set
    /// with the reason `recovery`.
    On,
}

/// What the filter does with an MCP server the provider reads itself when
/// nothing in the request bounds the tools it brings (no `allowed_tools`, no
/// replayed listing; see `format/sources.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolSources {
    /// Refuse the request (400, naming the member that would bound it): the
    /// provider could load a whole registry keyhole never sees.
    Refuse,
    /// Pass it, taking no place of the budget: the operator knows what the
    /// server serves.
    Pass,
}

/// Whether a listener acts on what keyhole decides or only measures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforce {
    /// keyhole acts: an LLM request carries only the surfaced tools, an HMS
    /// response leaves with aliases only.
    On,
    /// keyhole reads and counts but never rewrites: an LLM request goes
    /// upstream byte-identical (the whole registry, no alias), the set it
    /// would have surfaced is resolved and audited as `shadow`, and the
    /// answer's calls are checked against it (`x-keyhole-shadow`); an HMS
    /// response is forwarded unchanged and what would have been aliased or
    /// withheld is counted, with no alias minted and no value stored.
    Shadow,
}

impl Enforce {
    /// The setting as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforce::On => "on",
            Enforce::Shadow => "shadow",
        }
    }
}

/// The configuration as written by the operator: one JSON object whose `mode`
/// says which listener it configures and which fields it may carry.
///
/// A field of the other mode, or an unknown field, is an error naming it
/// ([`Config::from_json`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum FilterConfig {
    /// The tool surface on an LLM listener.
    Llm(LlmFilterConfig),
    /// Id aliasing on an HMS listener.
    Hms(HmsFilterConfig),
}

/// The fields of an `llm` listener's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LlmFilterConfig {
    /// Envoy cluster name of control (a `pipe` cluster).
    #[serde(default = "defaults::control_cluster")]
    pub control_cluster: String,
    /// `:authority` sent to control.
    #[serde(default = "defaults::control_authority")]
    pub control_authority: String,
    /// Timeout of one control call, in milliseconds.
    #[serde(default = "defaults::timeout_ms")]
    pub timeout_ms: u64,
    /// Request header naming the session.
    #[serde(default = "defaults::session_header")]
    pub session_header: String,
    /// Request header naming the phase.
    #[serde(default = "defaults::phase_header")]
    pub phase_header: String,
    /// Largest request body the filter reads; larger ones get a 413.
    #[serde(default = "defaults::max_body_bytes")]
    pub max_body_bytes: usize,
    /// Behaviour when control is unusable and nothing is known.
    #[serde(default = "defaults::on_outage")]
    pub on_outage: OnOutage,
    /// Behaviour when an answer calls a tool outside the surfaced set.
    #[serde(default = "defaults::off_surface")]
    pub off_surface: OffSurface,
    /// Provider built-in tools forwarded untouched, per format; a format named
    /// here replaces its default allow-list.
    #[serde(default)]
    pub builtin_tools: BuiltinToolsConfig,
    /// The alias taxonomy (the taxonomy file's object, inline): see
    /// [`HmsFilterConfig::taxonomy`]. Default `{}`: the built-in kinds.
    #[serde(default)]
    pub taxonomy: TaxonomyConfig,
    /// Replace raw ids in requests with the session's aliases (`on`), so the
    /// model never holds a raw id whichever path brought it (system prompt,
    /// pasted reference, tool result, replayed history). Default `on`: a
    /// deployment runs the HMS listener beside this one, and the aliases are
    /// that listener's.
    #[serde(default = "defaults::aliases")]
    pub aliases: Aliases,
    /// Add the tool-search control tool to every surfaced set (`on`, the
    /// default): the model's way to ask for a tool retrieval missed.
    #[serde(default = "defaults::tool_search")]
    pub tool_search: SearchTool,
    /// MCP servers the provider reads itself with nothing bounding their
    /// tools: `refuse` (the default) or `pass` ([`ToolSources`]).
    #[serde(default = "defaults::unbounded_tool_sources")]
    pub unbounded_tool_sources: ToolSources,
    /// `on` (the default) or `shadow` ([`Enforce`]): measure on live
    /// traffic before acting on it.
    #[serde(default = "defaults::enforce")]
    pub enforce: Enforce,
}

/// Allow-lists of built-in tool types per format, as the operator writes them:
/// format name ([`crate::tools::format::Format::as_str`]) → types (`"anthropic":
/// ["web_search_20250305", …]`). An absent format keeps its defaults
/// ([`crate::tools::format::BuiltinTools::default`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct BuiltinToolsConfig(pub std::collections::BTreeMap<String, Vec<String>>);

impl BuiltinToolsConfig {
    /// The allow-lists, defaults filled in. Every key must name a format and
    /// every entry must be a non-empty name.
    fn validate(self) -> Result<BuiltinTools, ConfigError> {
        let mut tools = BuiltinTools::default();
        for (key, given) in self.0 {
            let field = format!("builtin_tools.{key}");
            let Some(format) = Format::from_name(&key) else {
                let names: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
                return Err(err(
                    &field,
                    format!("is not a format (expected one of {})", names.join(", ")),
                ));
            };
            if let Some(bad) = given
                .iter()
                .find(|t| t.trim().is_empty() || t.trim() != t.as_str())
            {
                return Err(err(&field, format!("must list tool names, got {bad:?}")));
            }
            tools.set(format, given);
        }
        Ok(tools)
    }
}

/// The fields of an `hms` listener's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HmsFilterConfig {
    /// Envoy cluster name of control (a `pipe` cluster).
    #[serde(default = "defaults::control_cluster")]
    pub control_cluster: String,
    /// `:authority` sent to control.
    #[serde(default = "defaults::control_authority")]
    pub control_authority: String,
    /// Timeout of one control call, in milliseconds.
    #[serde(default = "defaults::timeout_ms")]
    pub timeout_ms: u64,
    /// Request header naming the session.
    #[serde(default = "defaults::session_header")]
    pub session_header: String,
    /// Largest request or response body the filter reads.
    #[serde(default = "defaults::max_body_bytes")]
    pub max_body_bytes: usize,
    /// The alias taxonomy: the object of the taxonomy file control reads
    /// (`keyhole serve --taxonomy FILE`), inline. It extends the built-in
    /// kinds ([`TaxonomyConfig::kinds`]). Default `{}`: the built-in kinds.
    /// Filter and control must hold the same one; the filter names it by
    /// [`Taxonomy::digest`] in every alias request.
    #[serde(default)]
    pub taxonomy: TaxonomyConfig,
    /// Requests carrying raw-id-shaped values: `refuse` (default) or `pass`.
    #[serde(default = "defaults::raw_ids")]
    pub raw_ids: RawIds,
    /// `on` (the default) or `shadow` ([`Enforce`]).
    #[serde(default = "defaults::enforce")]
    pub enforce: Enforce,
}

/// The fields each mode accepts (besides `mode`); a field in the other list
/// is reported as belonging to the other mode. A test checks these lists are
/// exactly the fields of [`LlmFilterConfig`] and [`HmsFilterConfig`].
pub const LLM_FIELDS: [&str; 14] = [
    "control_cluster",
    "control_authority",
    "timeout_ms",
    "session_header",
    "phase_header",
    "max_body_bytes",
    "on_outage",
    "off_surface",
    "builtin_tools",
    "taxonomy",
    "aliases",
    "tool_search",
    "unbounded_tool_sources",
    "enforce",
];
/// See [`LLM_FIELDS`].
pub const HMS_FIELDS: [&str; 8] = [
    "control_cluster",
    "control_authority",
    "timeout_ms",
    "session_header",
    "max_body_bytes",
    "taxonomy",
    "raw_ids",
    "enforce",
];

mod defaults {
    use super::OnOutage;
    pub fn control_cluster() -> String {
        "keyhole_control".into()
    }
    pub fn control_authority() -> String {
        "keyhole-control".into()
    }
    pub fn timeout_ms() -> u64 {
        1500
    }
    pub fn session_header() -> String {
        "x-keyhole-session".into()
    }
    pub fn phase_header() -> String {
        "x-keyhole-phase".into()
    }
    pub fn max_body_bytes() -> usize {
        1024 * 1024
    }
    pub fn on_outage() -> OnOutage {
        OnOutage::Reject
    }
    pub fn raw_ids() -> super::RawIds {
        super::RawIds::Refuse
    }
    pub fn off_surface() -> super::OffSurface {
        super::OffSurface::Flag
    }
    pub fn aliases() -> super::Aliases {
        super::Aliases::On
    }
    pub fn unbounded_tool_sources() -> super::ToolSources {
        super::ToolSources::Refuse
    }
    pub fn tool_search() -> super::SearchTool {
        super::SearchTool::On
    }
    pub fn enforce() -> super::Enforce {
        super::Enforce::On
    }
}

/// How the filter reaches control (the same on both listeners).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// See [`LlmFilterConfig::control_cluster`].
    pub cluster: String,
    /// See [`LlmFilterConfig::control_authority`].
    pub authority: String,
    /// See [`LlmFilterConfig::timeout_ms`].
    pub timeout_ms: u64,
}

/// The validated configuration of an `llm` listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmConfig {
    /// How to reach control.
    pub control: Control,
    /// Lower-cased header name.
    pub session_header: String,
    /// Lower-cased header name.
    pub phase_header: String,
    /// See [`LlmFilterConfig::max_body_bytes`].
    pub max_body_bytes: usize,
    /// See [`LlmFilterConfig::on_outage`].
    pub on_outage: OnOutage,
    /// See [`LlmFilterConfig::off_surface`].
    pub off_surface: OffSurface,
    /// See [`LlmFilterConfig::builtin_tools`].
    pub builtin_tools: BuiltinTools,
    /// The validated alias taxonomy ([`LlmFilterConfig::taxonomy`]).
    pub taxonomy: Arc<Taxonomy>,
    /// See [`LlmFilterConfig::aliases`].
    pub aliases: Aliases,
    /// See [`LlmFilterConfig::tool_search`].
    pub tool_search: SearchTool,
    /// See [`LlmFilterConfig::enforce`].
    pub enforce: Enforce,
}

/// The validated configuration of an `hms` listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HmsConfig {
    /// How to reach control.
    pub control: Control,
    /// Lower-cased header name.
    pub session_header: String,
    /// See [`HmsFilterConfig::max_body_bytes`].
    pub max_body_bytes: usize,
    /// The validated alias taxonomy ([`HmsFilterConfig::taxonomy`]); send
    /// its [`Taxonomy::digest`] with every alias request. Configurations
    /// compare equal when their taxonomies' digests do.
    pub taxonomy: Arc<Taxonomy>,
    /// See [`HmsFilterConfig::raw_ids`].
    pub raw_ids: RawIds,
    /// See [`HmsFilterConfig::enforce`].
    pub enforce: Enforce,
}

/// The validated configuration the filter runs with, per mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Config {
    /// An `llm` listener.
    Llm(LlmConfig),
    /// An `hms` listener.
    Hms(HmsConfig),
}

/// A configuration error, naming the field.
pub type ConfigError = crate::field::FieldError;

fn err(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// Extracts the field name from serde's "unknown field `x`" / "missing field `x`"
/// / "invalid type … for key `x`" style messages, so even a parse error names a field.
fn field_of_serde_error(msg: &str) -> String {
    msg.split('`')
        .nth(1)
        .map(str::to_owned)
        .unwrap_or_else(|| "<root>".to_owned())
}

fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Checks every key of `doc` against its mode's fields, so that a field of the
/// other mode is named as such (serde would only call it unknown).
fn check_fields(doc: &serde_json::Map<String, serde_json::Value>) -> Result<(), ConfigError> {
    let (fields, other, mode, other_mode): (&[&str], &[&str], &str, &str) =
        match doc.get("mode").and_then(serde_json::Value::as_str) {
            Some("llm") => (&LLM_FIELDS, &HMS_FIELDS, "llm", "hms"),
            Some("hms") => (&HMS_FIELDS, &LLM_FIELDS, "hms", "llm"),
            Some(other) => {
                return Err(err(
                    "mode",
                    format!("must be `llm` or `hms`, got {other:?}"),
                ))
            }
            None if doc.contains_key("mode") => {
                return Err(err("mode", "must be a string (`llm` or `hms`)"))
            }
            None => return Err(err("mode", "missing field `mode`")),
        };
    for key in doc.keys().filter(|k| *k != "mode") {
        if fields.contains(&key.as_str()) {
            continue;
        }
        return Err(if other.contains(&key.as_str()) {
            err(
                key,
                format!("is a setting of mode {other_mode}, not of mode {mode}"),
            )
        } else {
            err(key, format!("unknown field `{key}`"))
        });
    }
    Ok(())
}

/// Names the field behind a serde error: serde_json does not say which key
/// held a value of the wrong type, so each field is tried alone.
fn blame(doc: &serde_json::Map<String, serde_json::Value>, msg: &str) -> ConfigError {
    for (key, value) in doc.iter().filter(|(k, _)| *k != "mode") {
        let mut one = serde_json::Map::new();
        if let Some(mode) = doc.get("mode") {
            one.insert("mode".to_owned(), mode.clone());
        }
        one.insert(key.clone(), value.clone());
        if let Err(e) = serde_json::from_value::<FilterConfig>(serde_json::Value::Object(one)) {
            if key == "taxonomy" {
                // Name the member inside the taxonomy (`taxonomy.kinds`).
                if let Err(inner) = TaxonomyConfig::from_value(value.clone()) {
                    return err(&taxonomy_field(&inner.field), inner.message);
                }
            }
            return err(key, e.to_string());
        }
    }
    ConfigError {
        field: field_of_serde_error(msg),
        message: msg.to_owned(),
    }
}

impl Config {
    /// Parses and validates plugin configuration bytes.
    ///
    /// Fails with a [`ConfigError`] naming the field when the JSON is malformed,
    /// `mode` is missing or unknown, a field is unknown or belongs to the other
    /// mode, or a value is out of range.
    pub fn from_json(bytes: &[u8]) -> Result<Config, ConfigError> {
        let doc: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| err("<root>", e.to_string()))?;
        let serde_json::Value::Object(map) = &doc else {
            return Err(err("<root>", "must be a JSON object"));
        };
        check_fields(map)?;
        let raw: FilterConfig = match serde_json::from_value(doc.clone()) {
            Ok(raw) => raw,
            Err(e) => return Err(blame(map, &e.to_string())),
        };
        Config::try_from(raw)
    }

    /// The listener's mode.
    pub fn mode(&self) -> Mode {
        match self {
            Config::Llm(_) => Mode::Llm,
            Config::Hms(_) => Mode::Hms,
        }
    }

    /// How this listener reaches control.
    pub fn control(&self) -> &Control {
        match self {
            Config::Llm(c) => &c.control,
            Config::Hms(c) => &c.control,
        }
    }
}

fn control(cluster: String, authority: String, timeout_ms: u64) -> Result<Control, ConfigError> {
    if cluster.trim().is_empty() {
        return Err(err("control_cluster", "must not be empty"));
    }
    if authority.trim().is_empty() {
        return Err(err("control_authority", "must not be empty"));
    }
    if !(1..=60_000).contains(&timeout_ms) {
        return Err(err(
            "timeout_ms",
            format!("must be between 1 and 60000, got {timeout_ms}"),
        ));
    }
    Ok(Control {
        cluster,
        authority,
        timeout_ms,
    })
}

fn header(field: &str, value: &str) -> Result<String, ConfigError> {
    if !valid_header_name(value) {
        return Err(err(
            field,
            format!("must be a header name ([A-Za-z0-9_-]+), got {value:?}"),
        ));
    }
    Ok(value.to_ascii_lowercase())
}

/// The path of a taxonomy member in the filter's configuration.
fn taxonomy_field(inner: &str) -> String {
    if inner == "<root>" {
        "taxonomy".to_owned()
    } else {
        format!("taxonomy.{inner}")
    }
}

/// The validated taxonomy; errors name the member under `taxonomy.`.
fn taxonomy(raw: TaxonomyConfig) -> Result<Arc<Taxonomy>, ConfigError> {
    Taxonomy::try_from(raw)
        .map(Arc::new)
        .map_err(|e| err(&taxonomy_field(&e.field), e.message))
}

fn max_body_bytes(value: usize) -> Result<usize, ConfigError> {
    if !(1024..=64 * 1024 * 1024).contains(&value) {
        return Err(err(
            "max_body_bytes",
            format!("must be between 1024 and 67108864, got {value}"),
        ));
    }
    Ok(value)
}

impl TryFrom<FilterConfig> for Config {
    type Error = ConfigError;

    fn try_from(raw: FilterConfig) -> Result<Self, Self::Error> {
        Ok(match raw {
            FilterConfig::Llm(raw) => Config::Llm(LlmConfig {
                control: control(raw.control_cluster, raw.control_authority, raw.timeout_ms)?,
                session_header: header("session_header", &raw.session_header)?,
                phase_header: header("phase_header", &raw.phase_header)?,
                max_body_bytes: max_body_bytes(raw.max_body_bytes)?,
                on_outage: raw.on_outage,
                off_surface: raw.off_surface,
                builtin_tools: {
                    let mut tools = raw.builtin_tools.validate()?;
                    tools.set_pass_unbounded_sources(
                        raw.unbounded_tool_sources == ToolSources::Pass,
                    );
                    tools
                },
                taxonomy: taxonomy(raw.taxonomy)?,
                aliases: raw.aliases,
                tool_search: raw.tool_search,
                enforce: raw.enforce,
            }),
            FilterConfig::Hms(raw) => Config::Hms(HmsConfig {
                control: control(raw.control_cluster, raw.control_authority, raw.timeout_ms)?,
                session_header: header("session_header", &raw.session_header)?,
                max_body_bytes: max_body_bytes(raw.max_body_bytes)?,
                taxonomy: taxonomy(raw.taxonomy)?,
                raw_ids: raw.raw_ids,
                enforce: raw.enforce,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_config_gets_defaults() {
        let Config::Llm(c) = Config::from_json(br#"{"mode":"llm"}"#).unwrap() else {
            panic!("llm")
        };
        assert_eq!(c.control.cluster, "keyhole_control");
        assert_eq!(c.on_outage, OnOutage::Reject);
        assert_eq!(c.session_header, "x-keyhole-session");
        assert_eq!(c.aliases, Aliases::On);
        assert_eq!(c.tool_search, SearchTool::On);
        let Config::Llm(c) = Config::from_json(br#"{"mode":"llm","tool_search":"off"}"#).unwrap()
        else {
            panic!("llm")
        };
        assert_eq!(c.tool_search, SearchTool::Off);
        assert!(
            !c.builtin_tools.pass_unbounded_sources(),
            "unbounded MCP servers are refused by default"
        );
        let Config::Llm(c) =
            Config::from_json(br#"{"mode":"llm","unbounded_tool_sources":"pass"}"#).unwrap()
        else {
            panic!("llm")
        };
        assert!(c.builtin_tools.pass_unbounded_sources());
        let Config::Llm(c) = Config::from_json(br#"{"mode":"llm","aliases":"off"}"#).unwrap()
        else {
            panic!("llm")
        };
        assert_eq!(c.aliases, Aliases::Off);
        let Config::Hms(c) = Config::from_json(br#"{"mode":"hms"}"#).unwrap() else {
            panic!("hms")
        };
        assert_eq!(c.control.timeout_ms, 1500);
        assert_eq!(c.max_body_bytes, 1 << 20);
        assert_eq!(c.enforce, Enforce::On);
    }

    #[test]
    fn enforce_is_on_unless_shadow_on_both_listeners() {
        let Config::Llm(c) = Config::from_json(br#"{"mode":"llm"}"#).unwrap() else {
            panic!("llm")
        };
        assert_eq!(c.enforce, Enforce::On);
        let Config::Llm(c) = Config::from_json(br#"{"mode":"llm","enforce":"shadow"}"#).unwrap()
        else {
            panic!("llm")
        };
        assert_eq!(c.enforce, Enforce::Shadow);
        let Config::Hms(c) = Config::from_json(br#"{"mode":"hms","enforce":"shadow"}"#).unwrap()
        else {
            panic!("hms")
        };
        assert_eq!(c.enforce, Enforce::Shadow);
        assert_eq!(c.enforce.as_str(), "shadow");
        for json in [
            &br#"{"mode":"llm","enforce":"off"}"#[..],
            br#"{"mode":"hms","enforce":"log"}"#,
            br#"{"mode":"llm","enforce":true}"#,
        ] {
            let e = Config::from_json(json).unwrap_err();
            assert_eq!(e.field, "enforce", "{e}");
            assert!(e.to_string().starts_with("enforce: "), "{e}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let cases: [(&[u8], &str); 23] = [
            (br#"{"mode":"llm","tool_search":"maybe"}"#, "tool_search"),
            (
                br#"{"mode":"llm","unbounded_tool_sources":"allow"}"#,
                "unbounded_tool_sources",
            ),
            (br#"{"mode":"hms","tool_search":"off"}"#, "tool_search"),
            (br#"{"mode":"llm","aliases":"maybe"}"#, "aliases"),
            (br#"{"mode":"llm","aliases":true}"#, "aliases"),
            (br#"{"mode":"llm","alias":"on"}"#, "alias"),
            (br#"{"mode":"llm","timeout_ms":0}"#, "timeout_ms"),
            (br#"{"mode":"llm","timeout_msec":5}"#, "timeout_msec"),
            (
                br#"{"mode":"llm","session_header":"x y"}"#,
                "session_header",
            ),
            (
                br#"{"mode":"llm","control_cluster":" "}"#,
                "control_cluster",
            ),
            (br#"{"mode":"llm","max_body_bytes":10}"#, "max_body_bytes"),
            (br#"{}"#, "mode"),
            (br#"{"mode":"sql"}"#, "mode"),
            (br#"{"mode":"hms","on_outage":"strip"}"#, "on_outage"),
            (br#"{"mode":"hms","phase_header":"x-p"}"#, "phase_header"),
            (br#"{"mode":"hms","timeout_ms":"5"}"#, "timeout_ms"),
            (br#"{"mode":"llm","off_surface":"drop"}"#, "off_surface"),
            (
                br#"{"mode":"llm","builtin_tools":{"anthropic":[""]}}"#,
                "builtin_tools.anthropic",
            ),
            (
                br#"{"mode":"llm","builtin_tools":{"bedrock":["x"]}}"#,
                "builtin_tools.bedrock",
            ),
            (
                br#"{"mode":"hms","taxonomy":{"kinds":[{"name":"a","prefix":"A"}]}}"#,
                "taxonomy.kinds[0].prefix",
            ),
            (
                br#"{"mode":"hms","taxonomy":{"prefixes":[]}}"#,
                "taxonomy.prefixes",
            ),
            (
                br#"{"mode":"hms","taxonomy":"config/taxonomy.json"}"#,
                "taxonomy",
            ),
            (
                br#"{"mode":"llm","taxonomy":{"maxIdLen":1}}"#,
                "taxonomy.maxIdLen",
            ),
        ];
        for (json, field) in cases {
            let e = Config::from_json(json).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().starts_with(field), "{e}");
        }
        let e = Config::from_json(br#"{"mode":"hms","off_surface":"block"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "off_surface: is a setting of mode llm, not of mode hms"
        );
        let e = Config::from_json(br#"{"mode":"hms","aliases":"off"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "aliases: is a setting of mode llm, not of mode hms"
        );
    }

    #[test]
    fn raw_ids_are_refused_unless_passed() {
        let Config::Hms(c) = Config::from_json(br#"{"mode":"hms"}"#).unwrap() else {
            panic!("hms")
        };
        assert_eq!(c.raw_ids, RawIds::Refuse);
        let Config::Hms(c) = Config::from_json(br#"{"mode":"hms","raw_ids":"pass"}"#).unwrap()
        else {
            panic!("hms")
        };
        assert_eq!(c.raw_ids, RawIds::Pass);
        assert_eq!(c.raw_ids.as_str(), "pass");
        for (json, field) in [
            (&br#"{"mode":"hms","raw_ids":"drop"}"#[..], "raw_ids"),
            (br#"{"mode":"hms","raw_id":"pass"}"#, "raw_id"),
            (br#"{"mode":"llm","raw_ids":"pass"}"#, "raw_ids"),
        ] {
            let e = Config::from_json(json).unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
        let e = Config::from_json(br#"{"mode":"llm","raw_ids":"pass"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "raw_ids: is a setting of mode hms, not of mode llm"
        );
    }

    #[test]
    fn both_modes_take_a_taxonomy_that_extends_the_defaults() {
        let Config::Hms(plain) = Config::from_json(br#"{"mode":"hms"}"#).unwrap() else {
            panic!("hms")
        };
        assert_eq!(*plain.taxonomy, Taxonomy::default());
        let example = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../config/taxonomy.example.json"
        ));
        let file = Taxonomy::from_json(example.as_bytes()).unwrap();
        let json = format!(r#"{{"mode":"hms","timeout_ms":5000,"taxonomy":{example}}}"#);
        let Config::Hms(c) = Config::from_json(json.as_bytes()).unwrap() else {
            panic!("hms")
        };
        assert_eq!(c.taxonomy.digest(), file.digest());
        assert!(c.taxonomy.kind_by_name("specimen").is_some());
        assert_ne!(c, plain, "configurations with different taxonomies differ");
        let json = format!(r#"{{"mode":"llm","taxonomy":{example}}}"#);
        let Config::Llm(c) = Config::from_json(json.as_bytes()).unwrap() else {
            panic!("llm")
        };
        assert_eq!(c.taxonomy.digest(), file.digest());
        let Config::Llm(c) = Config::from_json(br#"{"mode":"llm","taxonomy":{}}"#).unwrap() else {
            panic!("llm")
        };
        assert_eq!(c.taxonomy.digest(), Taxonomy::default().digest());
    }

    #[test]
    fn the_field_lists_are_the_struct_fields() {
        let keys = |c: FilterConfig| -> Vec<String> {
            let serde_json::Value::Object(m) = serde_json::to_value(c).unwrap() else {
                panic!("object")
            };
            m.keys().filter(|k| *k != "mode").cloned().collect()
        };
        let llm = serde_json::from_str::<FilterConfig>(r#"{"mode":"llm"}"#).unwrap();
        let hms = serde_json::from_str::<FilterConfig>(r#"{"mode":"hms"}"#).unwrap();
        let mut want: Vec<String> = LLM_FIELDS.iter().map(|s| s.to_string()).collect();
        let mut have = keys(llm);
        want.sort();
        have.sort();
        assert_eq!(have, want);
        let mut want: Vec<String> = HMS_FIELDS.iter().map(|s| s.to_string()).collect();
        let mut have = keys(hms);
        want.sort();
        have.sort();
        assert_eq!(have, want);
    }
}
