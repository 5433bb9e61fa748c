//! The filter's plugin configuration (JSON in the Envoy config).
//!
//! [`FilterConfig`] is what the operator writes; [`Config`] is what the filter
//! runs with. [`Config::from_json`] is the only way from one to the other, and
//! every error it returns names the offending field, so `on_configure` (and
//! `envoy --mode validate`) can say exactly what is wrong.

use serde::Deserialize;
use std::fmt;

/// What a listener's filter instance does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Tool surface on LLM requests.
    Llm,
    /// Id aliasing on HMS traffic.
    Hms,
}

/// What to do when control gives no usable answer and nothing is known about
/// the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOutage {
    /// Answer the client with a 503 JSON error.
    Reject,
    /// Forward the request with no function tools.
    Strip,
}

/// What to do with an LLM answer that calls a tool the model was not shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffSurface {
    /// Pass the answer on, with an `x-keyhole-off-surface` header and a counter.
    Flag,
    /// Replace the answer with a 502 JSON error naming the tools.
    Block,
}

/// The configuration as written by the operator.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// `llm` or `hms`.
    pub mode: Mode,
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
}

mod defaults {
    use super::OnOutage;
    pub fn control_cluster() -> String {
        "keyhole_control".into()
    }
    pub fn control_authority() -> String {
        "keyhole-control".into()
    }
    pub fn timeout_ms() -> u64 {
        500
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
    pub fn off_surface() -> super::OffSurface {
        super::OffSurface::Flag
    }
}

/// The validated configuration the filter runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// See [`FilterConfig::mode`].
    pub mode: Mode,
    /// See [`FilterConfig::control_cluster`].
    pub control_cluster: String,
    /// See [`FilterConfig::control_authority`].
    pub control_authority: String,
    /// See [`FilterConfig::timeout_ms`].
    pub timeout_ms: u64,
    /// Lower-cased header name.
    pub session_header: String,
    /// Lower-cased header name.
    pub phase_header: String,
    /// See [`FilterConfig::max_body_bytes`].
    pub max_body_bytes: usize,
    /// See [`FilterConfig::on_outage`].
    pub on_outage: OnOutage,
    /// See [`FilterConfig::off_surface`].
    pub off_surface: OffSurface,
}

/// A configuration error, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// Dotted path of the field (`timeout_ms`), or `<root>` for the document.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn err(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { field: field.to_owned(), message: message.into() }
}

/// Extracts the field name from serde's "unknown field `x`" / "missing field `x`"
/// / "invalid type … for key `x`" style messages, so even a parse error names a field.
fn field_of_serde_error(msg: &str) -> String {
    msg.split('`').nth(1).map(str::to_owned).unwrap_or_else(|| "<root>".to_owned())
}

fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Config {
    /// Parses and validates plugin configuration bytes.
    ///
    /// Fails with a [`ConfigError`] naming the field when the JSON is malformed,
    /// has an unknown field, or a value is out of range.
    pub fn from_json(bytes: &[u8]) -> Result<Config, ConfigError> {
        let raw: FilterConfig = serde_json::from_slice(bytes).map_err(|e| {
            let msg = e.to_string();
            ConfigError { field: field_of_serde_error(&msg), message: msg }
        })?;
        Config::try_from(raw)
    }
}

impl TryFrom<FilterConfig> for Config {
    type Error = ConfigError;

    fn try_from(raw: FilterConfig) -> Result<Self, Self::Error> {
        if raw.control_cluster.trim().is_empty() {
            return Err(err("control_cluster", "must not be empty"));
        }
        if raw.control_authority.trim().is_empty() {
            return Err(err("control_authority", "must not be empty"));
        }
        if !(1..=60_000).contains(&raw.timeout_ms) {
            return Err(err("timeout_ms", format!("must be between 1 and 60000, got {}", raw.timeout_ms)));
        }
        for (field, value) in [("session_header", &raw.session_header), ("phase_header", &raw.phase_header)] {
            if !valid_header_name(value) {
                return Err(err(field, format!("must be a header name ([A-Za-z0-9_-]+), got {value:?}")));
            }
        }
        if !(1024..=64 * 1024 * 1024).contains(&raw.max_body_bytes) {
            return Err(err(
                "max_body_bytes",
                format!("must be between 1024 and 67108864, got {}", raw.max_body_bytes),
            ));
        }
        Ok(Config {
            mode: raw.mode,
            control_cluster: raw.control_cluster,
            control_authority: raw.control_authority,
            timeout_ms: raw.timeout_ms,
            session_header: raw.session_header.to_ascii_lowercase(),
            phase_header: raw.phase_header.to_ascii_lowercase(),
            max_body_bytes: raw.max_body_bytes,
            on_outage: raw.on_outage,
            off_surface: raw.off_surface,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_config_gets_defaults() {
        let c = Config::from_json(br#"{"mode":"llm"}"#).unwrap();
        assert_eq!(c.control_cluster, "keyhole_control");
        assert_eq!(c.on_outage, OnOutage::Reject);
        assert_eq!(c.session_header, "x-keyhole-session");
    }

    #[test]
    fn errors_name_the_field() {
        let cases: [(&[u8], &str); 6] = [
            (br#"{"mode":"llm","timeout_ms":0}"#, "timeout_ms"),
            (br#"{"mode":"llm","timeout_msec":5}"#, "timeout_msec"),
            (br#"{"mode":"llm","session_header":"x y"}"#, "session_header"),
            (br#"{"mode":"llm","control_cluster":" "}"#, "control_cluster"),
            (br#"{"mode":"llm","max_body_bytes":10}"#, "max_body_bytes"),
            (br#"{}"#, "mode"),
        ];
        for (json, field) in cases {
            let e = Config::from_json(json).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().starts_with(field), "{e}");
        }
    }
}
