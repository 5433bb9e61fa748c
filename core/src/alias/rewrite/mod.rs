//! Splicing aliases into a scanned body and verifying the result: the rewrite
//! stage of the alias engine.
//!
//! [`ResponseScan::rewrite`] (or one [`Rewriter`] for every part of a scan)
//! replaces each occurrence [`crate::alias::scan`] recorded with its alias and
//! then *verifies* the output by reading it again: any id other than an alias,
//! or any raw value of the batch, still there is an error instead of the body
//! (fail closed, [`RewriteError`]).
//!
//! Rewriting splices byte ranges (no DOM, no re-serialisation): the body keeps
//! its key order, whitespace and number formatting. A string holding a backslash
//! escape is decoded, rewritten and re-encoded as a whole.

use crate::alias::known::KnownIds;
use crate::alias::shape::{self, TextHit};
use crate::json::lexer::{text_of, Event, JsonError, Lexer};
use crate::proto::alias::KnownAlias;
use std::borrow::Cow;
use std::ops::Range;

use crate::alias::scan::{
    overlaps, readable_alias, BodyKind, FixedState, Part, PartId, ResponseScan, WithholdReason,
};

mod splice;

pub(crate) use splice::splice;
use splice::{splice_mapped, visit_touched, Edit, Structure, Touched};

/// Why a body could not be scanned or rewritten. The filter answers all of
/// these with a 502 JSON error: a body it cannot alias is never passed on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// A JSON body is not JSON.
    #[error("response body is not valid JSON: {0}")]
    Json(#[from] JsonError),
    /// The body is compressed or archived (gzip, zstd, zip, …) but carries
    /// no `content-encoding`.
    #[error("response body is compressed without a content-encoding")]
    Compressed,
    /// The body is binary: NUL bytes, or not UTF-8.
    #[error("response body is binary (NUL bytes or not UTF-8)")]
    Binary,
    /// An XML body is not well-formed.
    #[error("response body is not well-formed XML at offset {at}")]
    Xml {
        /// Byte offset of the error.
        at: usize,
    },
    /// The aliases do not match the scan's ids.
    #[error("got {got} aliases for {want} ids")]
    AliasCount {
        /// Aliases passed.
        got: usize,
        /// Ids of the scan.
        want: usize,
    },
    /// An alias is empty.
    #[error("alias {index} is empty")]
    EmptyAlias {
        /// Its index.
        index: usize,
    },
    /// The body passed to rewrite is not the body scanned.
    #[error("part {part} was scanned with {scanned} bytes, rewrite got {got}")]
    WrongBody {
        /// The part.
        part: usize,
        /// Bytes scanned.
        scanned: usize,
        /// Bytes passed.
        got: usize,
    },
    /// Verification found a raw id in the rewritten body.
    #[error("rewritten body still holds a raw id at offset {at}; refusing to pass it on")]
    Leak {
        /// Byte offset in the rewritten body.
        at: usize,
    },
    /// An id runs across an invisible or look-alike character
    /// (`pat-0001&shy;24`): aliasing what the patterns see would alias a
    /// prefix, another record (see `response/broken.rs`).
    #[error(
        "response body holds an id broken by an invisible or look-alike character at offset {at}"
    )]
    BrokenId {
        /// Byte offset of the character in the body.
        at: usize,
    },
}

impl RewriteError {
    /// The reason as a counter label: what made the body unreadable, or
    /// that verification refused it.
    pub fn reason(&self) -> WithholdReason {
        match self {
            RewriteError::Json(JsonError::NotUtf8) => WithholdReason::Binary,
            RewriteError::Json(_) => WithholdReason::NotJson,
            RewriteError::Compressed => WithholdReason::Compressed,
            RewriteError::Binary => WithholdReason::Binary,
            RewriteError::Xml { .. } => WithholdReason::NotXml,
            RewriteError::Leak { .. } => WithholdReason::Leak,
            RewriteError::BrokenId { .. } => WithholdReason::BrokenId,
            RewriteError::AliasCount { .. }
            | RewriteError::EmptyAlias { .. }
            | RewriteError::WrongBody { .. } => WithholdReason::Mismatch,
        }
    }
}

impl From<WithholdReason> for RewriteError {
    fn from(r: WithholdReason) -> Self {
        match r {
            WithholdReason::Compressed => RewriteError::Compressed,
            WithholdReason::NotJson => RewriteError::Json(JsonError::NotUtf8),
            WithholdReason::NotXml => RewriteError::Xml { at: 0 },
            _ => RewriteError::Binary,
        }
    }
}

impl<'t> ResponseScan<'t> {
    /// Rewrites a scanned part with `aliases` (parallel to [`Self::ids`]) and
    /// verifies the result.
    ///
    /// Fails when `body` is not the scanned part, the aliases do not fit the
    /// ids, or verification finds a raw id left ([`RewriteError::Leak`]).
    pub fn rewrite(
        &self,
        part: PartId,
        body: &[u8],
        aliases: &[String],
    ) -> Result<Vec<u8>, RewriteError> {
        self.rewriter(aliases, &[])?.rewrite(part, body)
    }

    /// A rewriter for every part of this scan: `aliases` parallel to
    /// [`Self::ids`], and `known`, the ids the session learned from earlier
    /// bodies with their aliases (control returns them with the encode
    /// answer). Every occurrence of any of these ids is replaced, wherever it
    /// stands. The search index is built once here.
    ///
    /// Fails when the aliases do not fit the ids.
    pub fn rewriter<'r>(
        &'r self,
        aliases: &'r [String],
        known: &'r [KnownAlias],
    ) -> Result<Rewriter<'r, 't>, RewriteError> {
        if aliases.len() != self.ids.len() {
            return Err(RewriteError::AliasCount {
                got: aliases.len(),
                want: self.ids.len(),
            });
        }
        if let Some(index) = aliases.iter().position(String::is_empty) {
            return Err(RewriteError::EmptyAlias { index });
        }
        let mut alias_of: Vec<&'r str> = self
            .id_of_value
            .iter()
            .map(|i| aliases.get(*i).map_or("", String::as_str))
            .collect();
        // An id of a kind readable in text is replaced in its own positions
        // only: left out of the search (an empty value is never searched).
        let tax = self.tax;
        let mut values: Vec<&'r str> = self
            .values
            .iter()
            .zip(&self.meta)
            .map(|(v, (kind, _))| {
                if tax.readable_in_text(*kind) {
                    ""
                } else {
                    v.as_str()
                }
            })
            .collect();
        for k in known {
            if k.alias.is_empty()
                || self.holders.contains_key(k.value.as_str())
                || readable_alias(tax, &k.alias)
            {
                continue;
            }
            values.push(&k.value);
            alias_of.push(&k.alias);
        }
        let known = KnownIds::with_taxonomy(values.iter().copied(), self.tax);
        let allowed = aliases
            .iter()
            .map(String::as_bytes)
            .chain(alias_of.iter().map(|a| a.as_bytes()))
            .collect();
        let plain_aliases = alias_of
            .iter()
            .all(|a| !a.bytes().any(|b| b == b'"' || b == b'\\'));
        Ok(Rewriter {
            scan: self,
            alias_of,
            allowed,
            known,
            plain_aliases,
        })
    }
}

/// Applies one encode answer to the parts of a scan ([`ResponseScan::rewriter`]).
pub struct Rewriter<'r, 't> {
    scan: &'r ResponseScan<'t>,
    /// Alias per value (scan values, then the session's earlier ids).
    alias_of: Vec<&'r str>,
    /// Every alias of this answer: what verification lets through.
    allowed: std::collections::HashSet<&'r [u8], FixedState>,
    known: KnownIds<'r>,
    /// No alias holds a `"` or `\`: splicing them into a JSON string
    /// keeps the document's structure (see [`Rewriter::verify`]).
    plain_aliases: bool,
}

impl<'t> Rewriter<'_, 't> {
    /// Rewrites a scanned part and verifies the result.
    ///
    /// Fails when `body` is not the scanned part, or verification finds a raw
    /// id left ([`RewriteError::Leak`]).
    pub fn rewrite(&self, part: PartId, body: &[u8]) -> Result<Vec<u8>, RewriteError> {
        self.rewrite_counted(part, body).map(|(out, _)| out)
    }

    /// [`Self::rewrite`], with the number of id occurrences it replaced.
    pub fn rewrite_counted(
        &self,
        part: PartId,
        body: &[u8],
    ) -> Result<(Vec<u8>, usize), RewriteError> {
        let p = self.scan.parts.get(part.0).ok_or(RewriteError::WrongBody {
            part: part.0,
            scanned: 0,
            got: body.len(),
        })?;
        if p.len != body.len() {
            return Err(RewriteError::WrongBody {
                part: part.0,
                scanned: p.len,
                got: body.len(),
            });
        }
        // A known id (of this body or an earlier one) cut by an invisible
        // or look-alike character: replacing the part that matches would
        // alias a prefix.
        if let Some(at) = crate::alias::scan::broken::broken_id(None, Some(&self.known), body) {
            return Err(RewriteError::BrokenId { at });
        }
        if self.alias_of.is_empty() {
            self.verify(body, p, &[])?;
            return Ok((body.to_vec(), 0));
        }
        let alias = |v: usize| self.alias_of.get(v).copied().unwrap_or("");
        // Ids that stood as numbers are written back as JSON strings.
        let quoted = |v: usize| Cow::Owned(format!("\"{}\"", alias(v)));
        let is_number = |r: &Range<usize>| {
            p.numbers
                .binary_search_by(|n| n.start.cmp(&r.start))
                .is_ok_and(|i| p.numbers.get(i) == Some(r))
        };
        let mut edits: Vec<(Range<usize>, Cow<'_, str>)> = Vec::with_capacity(p.occs.len());
        for (r, v) in &p.occs {
            let with = if is_number(r) {
                quoted(*v)
            } else {
                Cow::Borrowed(alias(*v))
            };
            edits.push((r.clone(), with));
        }
        // Known ids anywhere: inside unescaped strings that are not
        // clinical content, or a whole number.
        let in_lit = |r: &Range<usize>| {
            !p.kind.is_json() || {
                let l = p.lits.partition_point(|l| l.range.end < r.end);
                p.lits.get(l).is_some_and(|l| {
                    l.range.start <= r.start && r.end <= l.range.end && !l.protected
                })
            }
        };
        self.known.for_each_outside(body, &p.occs, |r, v| {
            if overlaps(&p.occs, &r) {
                return;
            }
            if in_lit(&r) {
                edits.push((r, Cow::Borrowed(alias(v))));
            } else if is_number(&r) {
                edits.push((r, quoted(v)));
            }
        });
        // Known ids written with escapes (`&#x70;at-000123`,
        // `%70at-000123`): found decoded, replaced with their escapes.
        if let Some(view) = super::known::MappedView::new(body) {
            edits.sort_by_key(|(r, _)| r.start);
            let plain = edits.len();
            let mut extra = Vec::new();
            let reach = self.known.max_len() + 1;
            for w in view.windows(reach) {
                let Some(win) = view.text.get(w.clone()) else {
                    continue;
                };
                let cut_start = w.start != 0;
                let cut_end = w.end != view.text.len();
                self.known.for_each(win, |r, v| {
                    let r = r.start + w.start..r.end + w.start;
                    // A match at a cut edge had no context to check; one
                    // without an escape was found in the raw bytes already.
                    if (cut_start && r.start == w.start)
                        || (cut_end && r.end == w.end)
                        || !view.touches_escape(&r)
                    {
                        return;
                    }
                    let raw = view.raw_range(r);
                    let taken = {
                        let i = edits
                            .get(..plain)
                            .unwrap_or_default()
                            .partition_point(|(o, _)| o.end <= raw.start);
                        edits
                            .get(i)
                            .is_some_and(|(o, _)| i < plain && o.start < raw.end)
                    };
                    if !taken && in_lit(&raw) {
                        extra.push((raw, Cow::Borrowed(alias(v))));
                    }
                });
            }
            edits.extend(extra);
        }
        // Each edit so far replaced one occurrence (an alias the session
        // issued, answered with itself, is none); an escaped literal's edit
        // below replaces every occurrence inside it.
        let mut replaced = edits
            .iter()
            .filter(|(r, with)| body.get(r.clone()) != Some(with.as_bytes()))
            .count();
        // Escaped literals: rewrite the decoded text, re-encode the literal.
        for e in p.escaped.iter().filter(|e| !e.protected) {
            let mut inner: Vec<(Range<usize>, usize)> = e.occs.clone();
            inner.sort_by_key(|(r, _)| r.start);
            let mut extra = Vec::new();
            self.known.for_each(e.text.as_bytes(), |r, v| {
                if !overlaps(&inner, &r) {
                    extra.push((r, v));
                }
            });
            inner.extend(extra);
            if inner.is_empty() {
                continue;
            }
            replaced += inner
                .iter()
                .filter(|(r, v)| e.text.as_bytes().get(r.clone()) != Some(alias(*v).as_bytes()))
                .count();
            let text = splice(
                e.text.as_bytes(),
                inner
                    .into_iter()
                    .map(|(r, v)| (r, Cow::Borrowed(alias(v))))
                    .collect(),
            );
            let text =
                String::from_utf8(text).map_err(|_| RewriteError::Leak { at: e.span.start })?;
            let literal = serde_json::to_string(&text)
                .map_err(|_| RewriteError::Leak { at: e.span.start })?;
            edits.push((e.span.clone(), Cow::Owned(literal)));
        }
        let (out, applied) = splice_mapped(body, edits);
        self.verify(&out, p, &applied)?;
        Ok((out, replaced))
    }

    /// Verifies the output of `p` (`applied`: its edits, see
    /// [`splice_mapped`]). A JSON part keeps the structure the scan lexed
    /// (every edit lies inside a string, or replaces a number or a whole
    /// escaped string with a string), so only the strings an edit touched,
    /// the escaped ones and those the scan did not prove clean are looked
    /// at again; anything else is re-read whole ([`Self::verify_whole`]).
    /// The known-id search always covers every byte.
    fn verify(&self, out: &[u8], p: &Part, applied: &[Edit]) -> Result<(), RewriteError> {
        if !p.kind.is_json() || !self.plain_aliases {
            return self.verify_whole(out, p.kind);
        }
        let allowed = |v: &[u8]| self.allowed.contains(v);
        if let Some(r) = self.known.first_except(out, allowed) {
            return Err(RewriteError::Leak { at: r.start });
        }
        let mut hits = Vec::new();
        // The check reads nothing but the text: a text that passed once
        // passes again, and a string that is one of this answer's aliases,
        // whole, is what the rewrite meant to write there.
        let mut passed: std::collections::HashSet<&[u8], FixedState> =
            std::collections::HashSet::with_capacity_and_hasher(
                p.occs.len().min(p.lits.len()),
                FixedState::default(),
            );
        let kept = visit_touched(p, applied, |t| match t {
            Touched::Plain(r) => {
                let text = out.get(r.clone()).unwrap_or_default();
                if !allowed(text) && passed.insert(text) {
                    self.check_text(text, r.start, &mut hits)?;
                }
                Ok(())
            }
            Touched::Escaped(span) => {
                // Only this literal is read as text: the rest of the
                // output is the scanned body's UTF-8 with aliases spliced
                // in at character boundaries.
                let lit = out
                    .get(span.clone())
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .ok_or(JsonError::NotUtf8)?;
                self.check_escaped(lit, 0..lit.len(), span.start, &mut hits)
            }
        })?;
        match kept {
            Structure::Kept => Ok(()),
            // What was checked so far passed; the rest is read whole.
            Structure::Changed => self.verify_whole(out, p.kind),
        }
    }

    /// Scans `out` again: no known id may remain anywhere in its bytes (nor in
    /// the decoded form of an escaped string, a percent-encoded or
    /// entity-encoded text), and every id the text patterns find in a string
    /// must be one of the aliases.
    fn verify_whole(&self, out: &[u8], kind: BodyKind) -> Result<(), RewriteError> {
        // A raw value may be spelled like an alias this answer issued
        // (`patient-001` from HMS): where it stands as that alias, it is one.
        let allowed = |v: &[u8]| self.allowed.contains(v);
        if let Some(r) = self.known.first_except(out, allowed) {
            return Err(RewriteError::Leak { at: r.start });
        }
        let mut hits = Vec::new();
        let json =
            |src: &str, base: usize, hits: &mut Vec<TextHit<'t>>| -> Result<(), RewriteError> {
                let mut lx = Lexer::new(src);
                while let Some(ev) = lx.next_event()? {
                    let (Event::Key(lit) | Event::Str(lit)) = ev else {
                        continue;
                    };
                    if lit.escaped {
                        self.check_escaped(src, lit.span, base, hits)?;
                    } else {
                        let inner = lit.inner();
                        self.check_text(
                            src.as_bytes().get(inner.clone()).unwrap_or_default(),
                            base + inner.start,
                            hits,
                        )?;
                    }
                }
                Ok(())
            };
        match kind {
            BodyKind::Json => {
                let src = std::str::from_utf8(out).map_err(|_| JsonError::NotUtf8)?;
                let span = crate::alias::scan::format::json_span(src);
                json(
                    src.get(span.clone()).unwrap_or_default(),
                    span.start,
                    &mut hits,
                )?;
            }
            BodyKind::EventStream => {
                let src = std::str::from_utf8(out).map_err(|_| JsonError::NotUtf8)?;
                let (bom, doc) = crate::alias::scan::split_bom(src);
                for line in crate::alias::scan::format::event_lines(doc, bom) {
                    match line.json {
                        Some(at) => json(
                            line.text.get(at..).unwrap_or_default(),
                            line.base + at,
                            &mut hits,
                        )?,
                        None => self.check_text(line.text.as_bytes(), line.base, &mut hits)?,
                    }
                }
            }
            BodyKind::NdJson => {
                let src = std::str::from_utf8(out).map_err(|_| JsonError::NotUtf8)?;
                let (bom, doc) = crate::alias::scan::split_bom(src);
                let mut at = bom;
                for line in doc.split_inclusive('\n') {
                    if !line.trim().is_empty() {
                        json(line, at, &mut hits)?;
                    }
                    at += line.len();
                }
            }
            BodyKind::Text
            | BodyKind::Csv
            | BodyKind::Xml
            | BodyKind::Html
            | BodyKind::Form
            | BodyKind::Yaml => self.check_text(out, 0, &mut hits)?,
        }
        Ok(())
    }

    /// Every id the text patterns find in `text` (at offset `at` of the
    /// output) must be an alias, and so must every known id and pattern hit
    /// in its decoded form.
    fn check_text(
        &self,
        text: &[u8],
        at: usize,
        hits: &mut Vec<TextHit<'t>>,
    ) -> Result<(), RewriteError> {
        let allowed = |v: &[u8]| self.allowed.contains(v);
        let tax = self.scan.tax;
        shape::find_in_text(tax, text, hits);
        if let Some(h) = hits
            .iter()
            .find(|h| !text.get(h.range.clone()).is_some_and(allowed))
        {
            return Err(RewriteError::Leak {
                at: at + h.range.start,
            });
        }
        if let Some(decoded) = super::known::decoded_view(text) {
            if self
                .known
                .first_except(decoded.as_bytes(), allowed)
                .is_some()
            {
                return Err(RewriteError::Leak { at });
            }
            shape::find_in_text(tax, decoded.as_bytes(), hits);
            if hits
                .iter()
                .any(|h| !decoded.as_bytes().get(h.range.clone()).is_some_and(allowed))
            {
                return Err(RewriteError::Leak { at });
            }
        }
        Ok(())
    }

    /// [`Self::check_text`] over the decoded text of the escaped string
    /// literal at `span` of `src`, and no known id in it.
    fn check_escaped(
        &self,
        src: &str,
        span: Range<usize>,
        base: usize,
        hits: &mut Vec<TextHit<'t>>,
    ) -> Result<(), RewriteError> {
        let at = base + span.start;
        let lit = crate::json::lexer::Lit {
            span,
            escaped: true,
        };
        let text = text_of(src, &lit)?;
        self.check_text(text.as_bytes(), at, hits)?;
        let allowed = |v: &[u8]| self.allowed.contains(v);
        if self.known.first_except(text.as_bytes(), allowed).is_some() {
            return Err(RewriteError::Leak { at });
        }
        Ok(())
    }
}
