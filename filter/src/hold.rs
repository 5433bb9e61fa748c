//! The response-hold protocol between keyhole and the `keyhole_hold` Lua filter.
//!
//! Envoy does not let a wasm filter change response headers from a body
//! callback (it answers `BadArgument`), and a wasm filter that pauses response
//! headers stops its own body callbacks too. A decision that needs the whole
//! body but changes headers (status, `Location`) therefore goes through the hold
//! filter, listed before keyhole so that it sees responses after keyhole:
//!
//! 1. in the response-headers callback keyhole sets [`HOLD_HEADER`]; the hold
//!    filter removes it and keeps the headers until the body is complete;
//! 2. keyhole prepends a verdict line to the complete body;
//! 3. the hold filter strips the line, applies it to the headers and fixes
//!    `content-length`.
//!
//! The verdict line (`\t` separates fields, `\n` ends the line):
//!
//! ```text
//! keyhole-verdict STATUS[ NAMES][\tEDIT]...\n
//! ```
//!
//! - `STATUS`: `0` keeps the upstream status; any other value replaces it and
//!   sets `content-type: application/json` (the body is then keyhole's error).
//! - `NAMES`: comma-separated tool names for `x-keyhole-off-surface` (LLM
//!   listener); empty on the HMS listener.
//! - `EDIT`: `name: value` replaces a header, `-name` removes it; `name` is a
//!   lower-case token or a pseudo-header (`:path`).
//!
//! The same line works on requests: on the HMS listener a request hold filter
//! sits *after* keyhole and applies a verdict that keyhole prepended to a
//! request body (a new `:path`, decoded once the body is complete, when the
//! request headers have already left keyhole). On requests `STATUS` must be
//! `0`; keyhole answers refusals itself.
//!
//! The hold header's value says what the hold filter does with a body that
//! carries no valid verdict line: [`HOLD_OPEN`] passes it unchanged (the LLM
//! listener: a verdict only flags), [`HOLD_CLOSED`] replaces the response with
//! a 502 (the HMS listener: an unverified body may hold raw ids). On the closed
//! listener keyhole either writes a verdict or never resumes the response, so an
//! upstream body that starts with a forged verdict line is never read as one.

/// Response header asking the hold filter to keep the headers for a verdict.
pub const HOLD_HEADER: &str = "x-keyhole-hold";
/// [`HOLD_HEADER`] value: a body without a verdict passes unchanged.
pub const HOLD_OPEN: &str = "1";
/// [`HOLD_HEADER`] value: a body without a valid verdict is replaced by a 502.
pub const HOLD_CLOSED: &str = "closed";
/// Starts the verdict line.
pub const VERDICT_PREFIX: &str = "keyhole-verdict ";
/// The hold filter looks for the end of the verdict line in this many bytes.
pub const MAX_VERDICT_LINE: usize = 65_536;

/// One header change carried by a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderEdit {
    /// Replace (or add) a header.
    Set(String, String),
    /// Remove a header.
    Remove(String),
}

/// What the hold filter applies to a held response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// `0` keeps the upstream status; otherwise the new status.
    pub status: u16,
    /// Tool names for `x-keyhole-off-surface`.
    pub names: Vec<String>,
    /// Header changes, applied in order.
    pub edits: Vec<HeaderEdit>,
}

/// A verdict that cannot be written as one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerdictError {
    /// A header name is not a lower-case token.
    #[error("verdict header name {0:?} is not a lower-case token")]
    HeaderName(String),
    /// A name or value holds a tab, CR or LF.
    #[error("verdict field for header {0:?} holds a control character")]
    ControlChar(String),
    /// The line is longer than the hold filter reads.
    #[error("verdict line of {0} bytes is longer than {MAX_VERDICT_LINE}")]
    TooLong(usize),
}

/// A lower-case header token, or a pseudo-header (`:path`, `:status`).
fn valid_name(name: &str) -> bool {
    let token = name.strip_prefix(':').unwrap_or(name);
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl Verdict {
    /// Keeps the status and applies `edits`.
    pub fn keep(edits: Vec<HeaderEdit>) -> Verdict {
        Verdict {
            status: 0,
            names: Vec::new(),
            edits,
        }
    }

    /// Encodes the verdict line, `\n` included.
    ///
    /// Fails when a header name is not a token, a name or value holds a control
    /// character, or the line is too long for the hold filter.
    pub fn line(&self) -> Result<Vec<u8>, VerdictError> {
        let mut line = format!("{VERDICT_PREFIX}{} {}", self.status, self.names.join(","));
        if self
            .names
            .iter()
            .any(|n| n.contains(['\t', '\r', '\n', ' ']))
        {
            return Err(VerdictError::ControlChar("x-keyhole-off-surface".into()));
        }
        for edit in &self.edits {
            let (name, value) = match edit {
                HeaderEdit::Set(name, value) => (name, Some(value)),
                HeaderEdit::Remove(name) => (name, None),
            };
            if !valid_name(name) {
                return Err(VerdictError::HeaderName(name.clone()));
            }
            match value {
                Some(v) if v.contains(['\t', '\r', '\n']) => {
                    return Err(VerdictError::ControlChar(name.clone()))
                }
                Some(v) => line.push_str(&format!("\t{name}: {v}")),
                None => line.push_str(&format!("\t-{name}")),
            }
        }
        line.push('\n');
        if line.len() > MAX_VERDICT_LINE {
            return Err(VerdictError::TooLong(line.len()));
        }
        Ok(line.into_bytes())
    }

    /// The verdict line followed by `body`: what replaces the held body.
    pub fn frame(&self, body: &[u8]) -> Result<Vec<u8>, VerdictError> {
        let mut out = self.line()?;
        out.extend_from_slice(body);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_encodes_status_names_and_edits() {
        let v = Verdict {
            status: 0,
            names: vec![],
            edits: vec![
                HeaderEdit::Set("location".into(), "/a/patient-001".into()),
                HeaderEdit::Remove("link".into()),
            ],
        };
        assert_eq!(
            v.frame(b"{}").unwrap(),
            b"keyhole-verdict 0 \tlocation: /a/patient-001\t-link\n{}"
        );
        let llm = Verdict {
            status: 502,
            names: vec!["a".into(), "b".into()],
            edits: vec![],
        };
        let path = Verdict::keep(vec![HeaderEdit::Set(":path".into(), "/p/1?q=2".into())]);
        assert_eq!(
            path.line().unwrap(),
            b"keyhole-verdict 0 \t:path: /p/1?q=2\n"
        );
        assert_eq!(llm.line().unwrap(), b"keyhole-verdict 502 a,b\n");
    }

    #[test]
    fn unsafe_fields_are_refused() {
        let tab = Verdict::keep(vec![HeaderEdit::Set("x".into(), "a\tb".into())]);
        assert_eq!(tab.line(), Err(VerdictError::ControlChar("x".into())));
        let name = Verdict::keep(vec![HeaderEdit::Remove("Bad Name".into())]);
        assert_eq!(
            name.line(),
            Err(VerdictError::HeaderName("Bad Name".into()))
        );
        let long = Verdict::keep(vec![HeaderEdit::Set(
            "x".into(),
            "a".repeat(MAX_VERDICT_LINE),
        )]);
        assert!(matches!(long.line(), Err(VerdictError::TooLong(_))));
    }
}
