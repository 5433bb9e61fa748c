//! The hold protocol between keyhole's filter and the Lua hold filters in Envoy.
//!
//! This module is the one source of the protocol: the filter writes verdicts
//! with [`Verdict`], and the Lua side (`envoy/keyhole_hold.lua`,
//! `envoy/keyhole_request_hold.lua`) reads them with the constants of
//! `envoy/keyhole_hold_protocol.lua`, which [`lua_protocol`] generates from
//! this module and [`crate::proto::reply`] (a test checks that file is current; run
//! `KEYHOLE_BLESS=1 cargo test -p keyhole-core hold` after changing either).
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
//! - `EDIT`: `name: value` replaces a header (every value of it), `-name`
//!   removes it, `+name: value` adds one more value (a repeated header: `Link`
//!   twice stays twice, written as `-link`, `+link: a`, `+link: b`); `name` is a
//!   lower-case token or a pseudo-header (`:path`). Edits apply in order.
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
/// Starts an `EDIT` that removes a header.
pub const EDIT_REMOVE: &str = "-";
/// Starts an `EDIT` that adds a value to a header.
pub const EDIT_ADD: &str = "+";
/// Separates an `EDIT`'s name from its value.
pub const EDIT_VALUE: &str = ": ";
/// Starts the verdict line.
pub const VERDICT_PREFIX: &str = "keyhole-verdict ";
/// The hold filter looks for the end of the verdict line in this many bytes.
pub const MAX_VERDICT_LINE: usize = 65_536;
/// Response header carrying a verdict's `NAMES` (tools called off the surface).
pub const NAMES_HEADER: &str = "x-keyhole-off-surface";
/// Response headers kept when a response is withheld (pseudo-headers aside):
/// Envoy overwrites both, whatever the upstream sent. Every other header is
/// removed, since it may hold a raw id (`date` too: Envoy passes an
/// upstream's `date` on as it came).
pub const KEPT_ON_WITHHOLD: [&str; 2] = ["server", "x-envoy-upstream-service-time"];

/// One header change carried by a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderEdit {
    /// Replace (or add) a header: every value it had is replaced by this one.
    Set(String, String),
    /// Remove a header (every value of it).
    Remove(String),
    /// Add one more value to a header, after the ones it has.
    Add(String, String),
    /// [`HeaderEdit::Set`] with a value that is not UTF-8 (a Latin-1 byte
    /// beside an alias): its bytes go on as they are.
    SetBytes(String, Vec<u8>),
    /// [`HeaderEdit::Add`] with a value that is not UTF-8.
    AddBytes(String, Vec<u8>),
}

impl HeaderEdit {
    /// The header this edit changes.
    pub fn name(&self) -> &str {
        match self {
            HeaderEdit::Set(name, _)
            | HeaderEdit::Remove(name)
            | HeaderEdit::Add(name, _)
            | HeaderEdit::SetBytes(name, _)
            | HeaderEdit::AddBytes(name, _) => name,
        }
    }

    /// The edits that give header `name` exactly `values`, in order: one
    /// [`HeaderEdit::Set`] for one value, a removal followed by one
    /// [`HeaderEdit::Add`] per value otherwise (a repeated header stays
    /// repeated), a removal alone for none.
    pub fn set_all(name: &str, values: Vec<String>) -> Vec<HeaderEdit> {
        if values.len() == 1 {
            return values
                .into_iter()
                .map(|v| HeaderEdit::Set(name.to_owned(), v))
                .collect();
        }
        let mut edits = vec![HeaderEdit::Remove(name.to_owned())];
        edits.extend(
            values
                .into_iter()
                .map(|v| HeaderEdit::Add(name.to_owned(), v)),
        );
        edits
    }

    /// [`Self::set_all`] with values as bytes (some not UTF-8).
    pub fn set_all_bytes(name: &str, values: Vec<Vec<u8>>) -> Vec<HeaderEdit> {
        if values.len() == 1 {
            return values
                .into_iter()
                .map(|v| HeaderEdit::SetBytes(name.to_owned(), v))
                .collect();
        }
        let mut edits = vec![HeaderEdit::Remove(name.to_owned())];
        edits.extend(
            values
                .into_iter()
                .map(|v| HeaderEdit::AddBytes(name.to_owned(), v)),
        );
        edits
    }

    /// The value this edit writes, as bytes (`None` for a removal).
    pub fn value(&self) -> Option<&[u8]> {
        match self {
            HeaderEdit::Set(_, v) | HeaderEdit::Add(_, v) => Some(v.as_bytes()),
            HeaderEdit::SetBytes(_, v) | HeaderEdit::AddBytes(_, v) => Some(v),
            HeaderEdit::Remove(_) => None,
        }
    }
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
        let mut line =
            format!("{VERDICT_PREFIX}{} {}", self.status, self.names.join(",")).into_bytes();
        if self
            .names
            .iter()
            .any(|n| n.contains(['\t', '\r', '\n', ' ']))
        {
            return Err(VerdictError::ControlChar(NAMES_HEADER.into()));
        }
        for edit in &self.edits {
            let mark = match edit {
                HeaderEdit::Set(..) | HeaderEdit::SetBytes(..) => "",
                HeaderEdit::Remove(_) => EDIT_REMOVE,
                HeaderEdit::Add(..) | HeaderEdit::AddBytes(..) => EDIT_ADD,
            };
            let name = edit.name();
            if !valid_name(name) {
                return Err(VerdictError::HeaderName(name.to_owned()));
            }
            line.push(b'\t');
            line.extend_from_slice(mark.as_bytes());
            line.extend_from_slice(name.as_bytes());
            match edit.value() {
                Some(v) if v.iter().any(|b| matches!(b, b'\t' | b'\r' | b'\n')) => {
                    return Err(VerdictError::ControlChar(name.to_owned()))
                }
                Some(v) => {
                    line.extend_from_slice(EDIT_VALUE.as_bytes());
                    line.extend_from_slice(v);
                }
                None => {}
            }
        }
        line.push(b'\n');
        if line.len() > MAX_VERDICT_LINE {
            return Err(VerdictError::TooLong(line.len()));
        }
        Ok(line)
    }

    /// The verdict line followed by `body`: what replaces the held body.
    pub fn frame(&self, body: &[u8]) -> Result<Vec<u8>, VerdictError> {
        let mut out = self.line()?;
        out.extend_from_slice(body);
        Ok(out)
    }
}

/// A Lua string literal holding `s` exactly.
fn lua_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\{:03}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A Lua pattern matching `s` literally.
fn lua_pattern(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == ' ' {
                c.to_string()
            } else {
                format!("%{c}")
            }
        })
        .collect()
}

/// The Lua side's constants, as `envoy/keyhole_hold_protocol.lua` holds them:
/// the hold header and its closed value, the verdict line's pattern and length
/// limit, the edit marks and the pattern of a `name: value` edit, the names header, the headers kept on a withheld response, and the
/// local replies the Lua filters send (from [`crate::proto::reply`]).
pub fn lua_protocol() -> String {
    let withheld = crate::proto::reply::withheld_without_verdict();
    let refused = crate::proto::reply::request_not_rewritten();
    let mut kept = format!("{{ [{}] = true", lua_string(":status"));
    for name in KEPT_ON_WITHHOLD {
        kept.push_str(&format!(", [{}] = true", lua_string(name)));
    }
    kept.push_str(" }");
    let lines = [
        "-- keyhole's hold protocol, generated from keyhole-core (core/src/proto/hold.rs and".to_owned(),
        "-- core/src/proto/reply.rs). Do not edit: `KEYHOLE_BLESS=1 cargo test -p keyhole-core hold`"
            .to_owned(),
        "-- rewrites it, and a test fails while it differs.".to_owned(),
        format!("local HOLD_HEADER = {}", lua_string(HOLD_HEADER)),
        format!("local HOLD_CLOSED = {}", lua_string(HOLD_CLOSED)),
        format!(
            "local VERDICT_PATTERN = {}",
            lua_string(&format!("^{}(%d+) ?(.*)$", lua_pattern(VERDICT_PREFIX)))
        ),
        format!("local MAX_VERDICT_LINE = {MAX_VERDICT_LINE}"),
        format!("local NAMES_HEADER = {}", lua_string(NAMES_HEADER)),
        format!("local EDIT_REMOVE = {}", lua_string(EDIT_REMOVE)),
        format!("local EDIT_ADD = {}", lua_string(EDIT_ADD)),
        format!(
            "local EDIT_PATTERN = {}",
            lua_string(&format!("^(:?[%w_%-]+){}(.*)$", lua_pattern(EDIT_VALUE)))
        ),
        format!(
            "local CONTENT_TYPE = {}",
            lua_string(crate::proto::reply::CONTENT_TYPE)
        ),
        format!("local KEPT = {kept}"),
        format!(
            "local WITHHELD_STATUS = {}",
            lua_string(&withheld.status.to_string())
        ),
        format!(
            "local WITHHELD = {}",
            lua_string(&String::from_utf8_lossy(&withheld.body))
        ),
        format!(
            "local REFUSED_STATUS = {}",
            lua_string(&refused.status.to_string())
        ),
        format!(
            "local REFUSED = {}",
            lua_string(&String::from_utf8_lossy(&refused.body))
        ),
    ];
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header value that is not UTF-8 goes into the verdict line byte
    /// for byte (a Latin-1 `0xfc` stays one byte, never U+FFFD).
    #[test]
    fn byte_values_keep_their_bytes_in_the_line() {
        let mut edits = HeaderEdit::set_all_bytes(
            "content-disposition",
            vec![b"attachment; filename=M\xfcller_patient-001.pdf".to_vec()],
        );
        edits.extend(HeaderEdit::set_all_bytes(
            "x-note",
            vec![b"a\xe9".to_vec(), b"b".to_vec()],
        ));
        let line = Verdict::keep(edits).line().unwrap();
        let want: &[u8] = b"keyhole-verdict 0 \tcontent-disposition: attachment; filename=M\xfcller_patient-001.pdf\t-x-note\t+x-note: a\xe9\t+x-note: b\n";
        assert_eq!(line, want);
        let bad = Verdict::keep(vec![HeaderEdit::SetBytes("x".into(), b"a\nb".to_vec())]);
        assert!(matches!(bad.line(), Err(VerdictError::ControlChar(_))));
    }

    #[test]
    fn the_lua_protocol_file_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../envoy/keyhole_hold_protocol.lua");
        let want = lua_protocol();
        if std::env::var_os("KEYHOLE_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            have, want,
            "run `KEYHOLE_BLESS=1 cargo test -p keyhole-core hold`"
        );
    }

    /// Envoy skips each hold filter on a message without [`HOLD_HEADER`]
    /// (a matcher on that header wraps it in `envoy/envoy.yaml.tmpl`): the
    /// matchers must name the header this protocol sets, or a held message
    /// would pass its hold unread.
    #[test]
    fn the_envoy_hold_matchers_name_the_hold_header() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../envoy/envoy.yaml.tmpl");
        let template = std::fs::read_to_string(&path).unwrap_or_default();
        let named: Vec<&str> = template
            .lines()
            .filter_map(|l| l.trim().strip_prefix("header_name:"))
            .map(str::trim)
            .collect();
        // One matcher per hold filter: the response hold, the request hold.
        assert_eq!(named, [HOLD_HEADER, HOLD_HEADER], "{}", path.display());
    }

    #[test]
    fn lua_literals_escape_quotes() {
        assert_eq!(lua_string(r#"{"a":"b\c"}"#), r#""{\"a\":\"b\\c\"}""#);
        assert_eq!(lua_pattern("keyhole-verdict "), "keyhole%-verdict ");
    }

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
        let links = Verdict::keep(HeaderEdit::set_all(
            "link",
            vec!["<a>".into(), "<b>".into()],
        ));
        assert_eq!(
            links.line().unwrap(),
            b"keyhole-verdict 0 \t-link\t+link: <a>\t+link: <b>\n"
        );
        assert_eq!(
            HeaderEdit::set_all("etag", vec!["\"x\"".into()]),
            vec![HeaderEdit::Set("etag".into(), "\"x\"".into())]
        );
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
