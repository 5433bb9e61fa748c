//! Putting the decoded ids in: the path and the body rewritten, each id in
//! the form and of the kind its place asks for.

use super::percent::percent_encode;
use super::{Hit, RequestError, RequestScan};
use crate::alias::id::Form;
use crate::alias::rewrite::splice;
use crate::alias::shape;
use crate::alias::taxonomy::Taxonomy;
use crate::proto::alias::DecodedIds;
use std::borrow::Cow;
use std::ops::Range;

impl RequestScan {
    /// Replaces every alias with its decoded id. `decoded` is parallel to
    /// [`Self::aliases`] (control's decode answer). Returns the new path and the
    /// new body (`None` when there was none).
    ///
    /// Fails with [`RequestError::UnknownAlias`] for the first alias that
    /// decoded to nothing and [`RequestError::Sentinel`] for a sentinel.
    pub fn rewrite(
        &self,
        tax: &Taxonomy,
        path: &str,
        body: Option<&[u8]>,
        decoded: &[Option<DecodedIds>],
    ) -> Result<(String, Option<Vec<u8>>), RequestError> {
        self.check_decoded(tax, decoded)?;
        let got = body.map_or(0, <[u8]>::len);
        if path.len() != self.path_len || got != self.body_len {
            return Err(RequestError::WrongBody {
                scanned: self.body_len,
                got,
            });
        }
        let value = |h: &Hit| self.id_for(tax, h, decoded);
        let mut edits = Vec::with_capacity(self.path.len());
        for h in &self.path {
            edits.push((h.range.clone(), Cow::Owned(percent_encode(value(h)?))));
        }
        let new_path = String::from_utf8(splice(path.as_bytes(), edits)).unwrap_or_default();
        let Some(body) = body else {
            return Ok((new_path, None));
        };
        let mut edits: Vec<(Range<usize>, Cow<'_, str>)> = Vec::new();
        for h in &self.body {
            let v = value(h)?;
            if h.encoded {
                edits.push((h.range.clone(), Cow::Owned(percent_encode(v))));
                continue;
            }
            // Ids never need JSON escaping in practice; if one does, escape it.
            let v = match serde_json::to_string(v) {
                Ok(quoted) if quoted.len() != v.len() + 2 => Cow::Owned(
                    quoted
                        .get(1..quoted.len() - 1)
                        .unwrap_or_default()
                        .to_owned(),
                ),
                _ => Cow::Borrowed(v),
            };
            edits.push((h.range.clone(), v));
        }
        for e in &self.escaped {
            let mut inner = Vec::with_capacity(e.hits.len());
            for h in &e.hits {
                let v = value(h)?;
                inner.push((
                    h.range.clone(),
                    if h.encoded {
                        Cow::Owned(percent_encode(v))
                    } else {
                        Cow::Borrowed(v)
                    },
                ));
            }
            let text = String::from_utf8(splice(e.text.as_bytes(), inner)).unwrap_or_default();
            let literal = serde_json::to_string(&text).unwrap_or_else(|_| "\"\"".to_owned());
            edits.push((e.span.clone(), Cow::Owned(literal)));
        }
        Ok((new_path, Some(splice(body, edits))))
    }

    /// Fails unless `decoded` answers every alias of the scan (no sentinel,
    /// none unknown).
    pub(super) fn check_decoded(
        &self,
        tax: &Taxonomy,
        decoded: &[Option<DecodedIds>],
    ) -> Result<(), RequestError> {
        if decoded.len() != self.aliases.len() {
            return Err(RequestError::DecodedCount {
                got: decoded.len(),
                want: self.aliases.len(),
            });
        }
        if let Some(alias) = self.sentinel(tax) {
            return Err(RequestError::Sentinel {
                alias: alias.to_owned(),
            });
        }
        if let Some(i) = decoded.iter().position(Option::is_none) {
            return Err(RequestError::UnknownAlias {
                alias: self.written(i).unwrap_or_default().to_owned(),
            });
        }
        Ok(())
    }

    /// The id that replaces hit `h`, in the form its place wants.
    pub(super) fn id_for<'d>(
        &self,
        tax: &Taxonomy,
        h: &Hit,
        decoded: &'d [Option<DecodedIds>],
    ) -> Result<&'d str, RequestError> {
        let unknown = || RequestError::UnknownAlias {
            alias: self.written(h.alias).unwrap_or_default().to_owned(),
        };
        let d = decoded
            .get(h.alias)
            .and_then(Option::as_ref)
            .ok_or_else(unknown)?;
        let kind = tax.kind_by_name(&d.kind);
        let preferred = kind
            .and_then(|k| tax.kind(k))
            .and_then(|k| k.preferred_form);
        let id = d
            .ids
            .pick(h.want.or(preferred).unwrap_or(Form::Uuid))
            .ok_or_else(unknown)?;
        if h.kinds.is_empty() {
            return Ok(id);
        }
        // An id is unique only within its kind (FHIR ids within a resource
        // type): another kind's id in this place names another record. A
        // record of unknown kind (the fallback) fits only by a UUID, which
        // names one record whatever its type.
        let fits = kind.is_some_and(|k| h.kinds.iter().any(|want| tax.kinds_may_meet(k, *want)));
        let unknown_kind_by_uuid =
            kind == Some(tax.fallback_kind()) && shape::is_uuid(id.as_bytes());
        if fits || unknown_kind_by_uuid {
            return Ok(id);
        }
        Err(RequestError::WrongKind {
            alias: self.written(h.alias).unwrap_or_default().to_owned(),
            kind: d.kind.clone(),
            wanted: h
                .kinds
                .iter()
                .map(|k| tax.kind_name(*k))
                .collect::<Vec<_>>()
                .join(" or "),
        })
    }
}
