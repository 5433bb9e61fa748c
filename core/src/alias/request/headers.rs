//! The request's headers and its other texts beyond the path and the body:
//! the authority and the texts decoded from a body, scanned and rewritten.

use super::percent::percent_encode;
use super::{Field, HeaderHits, Place, RequestError, RequestScan};
use crate::alias::rewrite::splice;
use crate::alias::scan::BodyKind;
use crate::alias::taxonomy::Taxonomy;
use crate::proto::alias::DecodedIds;
use std::borrow::Cow;

impl RequestScan {
    /// Counts the raw ids in the request's authority (`:authority`, the
    /// `Host` of HTTP/1): a host name built around a record id sends it to
    /// HMS as surely as the path does. Aliases there are not decoded (a host
    /// is never rewritten) and pass as text.
    pub fn scan_authority(&mut self, tax: &Taxonomy, authority: &str) {
        let mut scratch = RequestScan::default();
        scratch.find(
            tax,
            authority,
            Field::default(),
            Place::Header,
            &mut Vec::new(),
        );
        self.raw.headers += scratch.raw.total();
    }

    /// Scans a text keyhole decoded from the body (see [`body::view`]): its
    /// raw ids count as the body's; the first alias in it, as written, is
    /// returned. Such a text is never rewritten, so a request holding an
    /// alias there cannot be decoded and the filter refuses it.
    pub fn scan_hidden(&mut self, tax: &Taxonomy, text: &str) -> Option<String> {
        // JSON as JSON (its escapes read), anything else as text.
        let scratch = RequestScan::new(tax, "", Some((text.as_bytes(), BodyKind::Json)))
            .unwrap_or_else(|_| {
                let mut scratch = RequestScan::default();
                scratch.find(tax, text, Field::default(), Place::Body, &mut Vec::new());
                scratch
            });
        self.raw.body += scratch.raw.total();
        scratch.written.into_iter().next()
    }

    /// Adds request headers to the scan: each value is read as text (and
    /// percent-decoded), the form an id takes chosen by the header's name as
    /// by a JSON key (`x-patient-fhir-id` wants the FHIR id). `headers` are
    /// the ones the filter scans, in order; [`Self::rewrite_headers`] takes
    /// the same list.
    pub fn scan_headers(&mut self, tax: &Taxonomy, headers: &[(String, String)]) {
        for (index, (name, value)) in headers.iter().enumerate() {
            let mut found = Vec::new();
            // `X-Patient-Id` names a patient as `patientId` does.
            let key = name
                .get(..2)
                .filter(|x| x.eq_ignore_ascii_case("x-"))
                .and_then(|_| name.get(2..))
                .unwrap_or(name);
            let field = Field {
                want: tax.form_wanted_by_key(name),
                ..Field::of_key(tax, key)
            };
            self.find(tax, value, field, Place::Header, &mut found);
            if !found.is_empty() {
                self.headers.push(HeaderHits {
                    index,
                    value: value.clone(),
                    hits: found,
                });
            }
        }
    }

    /// The new value of every scanned header that held an alias, as
    /// `(index, value)` with `index` into the list passed to
    /// [`Self::scan_headers`]. `decoded` is as for [`Self::rewrite`]. Each id
    /// is written percent-encoded (ids are URL-safe in practice, so this
    /// changes nothing but a value that could otherwise break the header).
    ///
    /// Fails as [`Self::rewrite`] does, and with [`RequestError::WrongBody`]
    /// when `headers` is not the list scanned.
    pub fn rewrite_headers(
        &self,
        tax: &Taxonomy,
        headers: &[(String, String)],
        decoded: &[Option<DecodedIds>],
    ) -> Result<Vec<(usize, String)>, RequestError> {
        self.check_decoded(tax, decoded)?;
        let mut out = Vec::with_capacity(self.headers.len());
        for h in &self.headers {
            if headers.get(h.index).map(|(_, v)| v) != Some(&h.value) {
                return Err(RequestError::WrongBody {
                    scanned: h.value.len(),
                    got: 0,
                });
            }
            let mut edits = Vec::with_capacity(h.hits.len());
            for hit in &h.hits {
                edits.push((
                    hit.range.clone(),
                    Cow::Owned(percent_encode(self.id_for(tax, hit, decoded)?)),
                ));
            }
            let value = String::from_utf8(splice(h.value.as_bytes(), edits)).unwrap_or_default();
            out.push((h.index, value));
        }
        Ok(out)
    }
}
