//! Why the filter withholds an HMS response: one home for the reasons, their
//! counter names and the status the client gets, so the filter, control and
//! the docs never spell them on their own.
//!
//! - [`Withheld`]: the reason a response was replaced by a 502
//!   (`keyhole.hms_withheld.<reason>`), decided from control's
//!   [`ErrorCode`], never from a status number.
//! - [`WithholdReason`]: why the scan or the rewrite could not read a body
//!   (the detail of [`Withheld::Unreadable`], in the log line).
//! - [`UNSCANNED_RESPONSE_HEADERS`]: the response headers no id can be in.
//!
//! Every withheld response is answered with
//! [`ErrorKind::Unaliasable`](crate::proto::reply::ErrorKind::Unaliasable)
//! (502) and [`KEPT_ON_WITHHOLD`] headers only.

use crate::proto::alias::ErrorCode;
use crate::proto::hold::{HOLD_HEADER, KEPT_ON_WITHHOLD};

/// Response headers that are never scanned (pseudo-headers aside: `:status`
/// is a number Envoy's codec checks). Each carries no id and is owned by Envoy
/// or keyhole, whatever the upstream sent:
/// - the [`KEPT_ON_WITHHOLD`] headers (`server`, overwritten by Envoy's
///   connection manager; `x-envoy-upstream-service-time`, by its router);
/// - `content-length`: a number Envoy's codec checks; the hold filter sets it;
/// - the hold header: keyhole's own, removed from upstream responses.
///
/// Every other header is scanned, `content-type` included (its parameters are
/// free text: `application/pdf; name="pat-000123.pdf"`), and `date` too:
/// measured, Envoy passes an upstream's `date` on as it came.
pub const UNSCANNED_RESPONSE_HEADERS: [&str; 4] = [
    KEPT_ON_WITHHOLD[0],
    KEPT_ON_WITHHOLD[1],
    "content-length",
    HOLD_HEADER,
];

/// Why an HMS response was withheld (replaced by a 502): the suffix of
/// `keyhole.hms_withheld.<reason>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// The body or a header could not be scanned or rewritten (malformed, encoded, too odd).
    Unreadable,
    /// Control could not be reached or answered garbage.
    Control,
    /// Control found conflicting ids for one record ([`ErrorCode::Conflict`]).
    Conflict,
    /// Control's alias store is unavailable ([`ErrorCode::StoreUnavailable`]).
    Store,
    /// Envoy refused a host call (reading, holding or replacing the response).
    Host,
    /// The response had trailers, so its body was never complete for a scan.
    Trailers,
    /// Control runs another taxonomy than the filter ([`ErrorCode::TaxonomyMismatch`]).
    Taxonomy,
    /// The last word found a raw id in what was about to leave
    /// (`keyhole_core::alias::lastword`; its reason has a counter of its own).
    LastWord,
}

impl Withheld {
    /// Every reason, in counter order.
    pub const ALL: [Withheld; 8] = [
        Withheld::Unreadable,
        Withheld::Control,
        Withheld::Conflict,
        Withheld::Store,
        Withheld::Host,
        Withheld::Trailers,
        Withheld::Taxonomy,
        Withheld::LastWord,
    ];

    /// The counter's name suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            Withheld::Unreadable => "unreadable",
            Withheld::Control => "control",
            Withheld::Conflict => "conflict",
            Withheld::Store => "store",
            Withheld::Host => "host",
            Withheld::Trailers => "trailers",
            Withheld::Taxonomy => "taxonomy",
            Withheld::LastWord => "last_word",
        }
    }
    /// Why control's encode answer withholds the response, by the code of
    /// its error body, never by its status: a failure without a code
    /// (unreachable, garbage, an error body of another shape) is
    /// [`Withheld::Control`].
    pub fn of_code(code: Option<ErrorCode>) -> Withheld {
        match code {
            Some(ErrorCode::TaxonomyMismatch) => Withheld::Taxonomy,
            Some(ErrorCode::Conflict) => Withheld::Conflict,
            Some(ErrorCode::StoreUnavailable) => Withheld::Store,
            _ => Withheld::Control,
        }
    }
}

/// Why a body was withheld: one label per cause, for the filter's counters
/// and logs (`RewriteError::reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WithholdReason {
    /// Compressed or archived bytes without a `content-encoding` header.
    Compressed,
    /// Binary bytes: NUL bytes, or a text body that is not UTF-8.
    Binary,
    /// Declared (or sniffed) JSON or NDJSON that does not parse.
    NotJson,
    /// Declared XML that does not parse.
    NotXml,
    /// Verification found a raw id in the rewritten body.
    Leak,
    /// The encode answer does not fit the scan (alias count, empty alias,
    /// another body): a bug on the caller's side, not in the body.
    Mismatch,
    /// An id runs across an invisible or look-alike character.
    BrokenId,
}

impl WithholdReason {
    /// The label (`compressed`, `binary`, `not_json`, `not_xml`, `leak`,
    /// `mismatch`, `broken_id`).
    pub fn as_str(self) -> &'static str {
        match self {
            WithholdReason::Compressed => "compressed",
            WithholdReason::Binary => "binary",
            WithholdReason::NotJson => "not_json",
            WithholdReason::NotXml => "not_xml",
            WithholdReason::Leak => "leak",
            WithholdReason::Mismatch => "mismatch",
            WithholdReason::BrokenId => "broken_id",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_failures_are_read_by_code() {
        assert_eq!(
            Withheld::of_code(Some(ErrorCode::TaxonomyMismatch)),
            Withheld::Taxonomy
        );
        assert_eq!(
            Withheld::of_code(Some(ErrorCode::Conflict)),
            Withheld::Conflict
        );
        assert_eq!(
            Withheld::of_code(Some(ErrorCode::StoreUnavailable)),
            Withheld::Store
        );
        assert_eq!(
            Withheld::of_code(Some(ErrorCode::BadRequest)),
            Withheld::Control
        );
        assert_eq!(Withheld::of_code(None), Withheld::Control);
    }

    #[test]
    fn counter_names_are_distinct_and_every_reason_is_listed() {
        let names: std::collections::BTreeSet<&str> =
            Withheld::ALL.iter().map(|w| w.as_str()).collect();
        assert_eq!(names.len(), Withheld::ALL.len());
        assert!(UNSCANNED_RESPONSE_HEADERS
            .iter()
            .all(|h| h.to_ascii_lowercase() == *h));
        assert!(KEPT_ON_WITHHOLD
            .iter()
            .all(|h| UNSCANNED_RESPONSE_HEADERS.contains(h)));
    }
}
