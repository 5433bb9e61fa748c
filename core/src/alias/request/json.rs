//! A JSON body read by its structure: which key asks for which id form, and
//! escaped literals kept decoded.

use super::{EscLit, Field, Place, RequestError, RequestScan};
use crate::alias::taxonomy::Taxonomy;
use crate::json::lexer::{text_of, Event, JsonError, Lexer, Lit};
use std::borrow::Cow;

impl RequestScan {
    pub(super) fn scan_json(&mut self, tax: &Taxonomy, bytes: &[u8]) -> Result<(), RequestError> {
        let src = std::str::from_utf8(bytes).map_err(|_| JsonError::NotUtf8)?;
        let mut lx = Lexer::new(src);
        // Key of the innermost object member (`None` inside arrays keeps the
        // array's key).
        let mut keys: Vec<Option<Cow<'_, str>>> = Vec::new();
        let mut cur: Option<Cow<'_, str>> = None;
        // Per open object: its `system` is a configured business identifier
        // system, and its `value` is no alias.
        let mut identifiers: Vec<(bool, bool)> = Vec::new();
        while let Some(ev) = lx.next_event()? {
            match ev {
                Event::StartObject | Event::StartArray => {
                    keys.push(cur.take());
                    if matches!(ev, Event::StartArray) {
                        cur = keys.last().cloned().flatten();
                    } else {
                        identifiers.push((false, false));
                    }
                }
                Event::EndObject | Event::EndArray => {
                    if matches!(ev, Event::EndObject) && identifiers.pop() == Some((true, true)) {
                        self.raw.bump(Place::Body);
                    }
                    keys.pop();
                    cur = None;
                    // Back inside an array, elements keep the array's key.
                    if let Some(k) = keys.last() {
                        cur = k.clone();
                    }
                }
                Event::Key(lit) => {
                    self.literal(tax, src, &lit, Field::default())?;
                    cur = Some(text_of(src, &lit)?);
                }
                Event::Str(lit) => {
                    let field = cur
                        .as_deref()
                        .map(|k| Field::of_key(tax, k))
                        .unwrap_or_default();
                    if let (Some(k @ ("system" | "value")), Some(ident)) =
                        (cur.as_deref(), identifiers.last_mut())
                    {
                        let text = text_of(src, &lit)?;
                        let text = text.trim();
                        if k == "system" {
                            ident.0 = tax.identifier_system_kind(text).is_some();
                        } else {
                            ident.1 = !text.is_empty() && tax.parse_alias(text).is_none();
                        }
                    }
                    self.literal(tax, src, &lit, field)?;
                }
                Event::Scalar => {}
            }
        }
        Ok(())
    }

    fn literal(
        &mut self,
        tax: &Taxonomy,
        src: &str,
        lit: &Lit,
        field: Field,
    ) -> Result<(), RequestError> {
        let text = text_of(src, lit)?;
        let mut found = Vec::new();
        self.find(tax, &text, field, Place::Body, &mut found);
        if found.is_empty() {
            return Ok(());
        }
        if lit.escaped {
            self.escaped.push(EscLit {
                span: lit.span.clone(),
                text: text.into_owned(),
                hits: found,
            });
        } else {
            let base = lit.inner().start;
            self.body.extend(found.into_iter().map(|mut h| {
                h.range = base + h.range.start..base + h.range.end;
                h
            }));
        }
        Ok(())
    }
}
