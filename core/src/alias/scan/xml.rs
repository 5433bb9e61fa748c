//! XML bodies, FHIR XML first: quick-xml checks that the body is well-formed
//! and reports where each element and attribute sits, so the structured
//! positions are learned with their kind and replaced in the original bytes:
//!
//! - `<id value="…"/>` of a resource element (`<Patient>`): the resource's
//!   id, of the resource type's kind; `<id>…</id>` of any element (the kind
//!   its name gives, else the fallback);
//! - `<reference value="Patient/…"/>`: the id after the type;
//! - id-named elements (`<patientId value="…"/>`, `<patientId>…</patientId>`)
//!   and id-named attributes (`patientId="…"`; not the bare `id`, which in XML
//!   names the element itself).
//!
//! Text nodes, attribute values and everything else are scanned as text by
//! the caller, character references decoded; a value written with references
//! is learned decoded and replaced whole by the known-id search.

use super::{choose, Part, ResponseScan, RewriteError};
use crate::alias::id::Form;
use crate::alias::id::KindId;
use crate::alias::known::MappedView;
use crate::alias::shape;
use quick_xml::events::Event;
use quick_xml::Reader;

use std::ops::Range;

/// Offset of `sub` inside `body`, when `sub` is a slice of it.
fn offset_in(body: &[u8], sub: &[u8]) -> Option<usize> {
    let start = (sub.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    (body.get(start..start + sub.len()) == Some(sub)).then_some(start)
}

/// Learns the structured ids of an XML body. Fails when it is not
/// well-formed XML (or holds no element at all).
pub(super) fn scan(
    scan: &mut ResponseScan<'_>,
    body: &[u8],
    root_kind: Option<KindId>,
    part: &mut Part,
) -> Result<(), RewriteError> {
    let mut reader = Reader::from_reader(body);
    // Local names of the open elements, as ranges of `body`.
    let mut stack: Vec<Range<usize>> = Vec::new();
    // Where the content of the innermost open element starts, while it has
    // no child element.
    let mut leaf: Option<usize> = None;
    let mut elements = 0usize;
    loop {
        let before = usize::try_from(reader.buffer_position()).unwrap_or(0);
        let ev = reader.read_event().map_err(|_| RewriteError::Xml {
            at: usize::try_from(reader.error_position()).unwrap_or(0),
        })?;
        let (e, start) = match ev {
            Event::Start(e) => (e, true),
            Event::Empty(e) => (e, false),
            Event::End(_) => {
                let el = name_at(body, stack.last());
                let parent = name_at(body, stack.len().checked_sub(2).and_then(|i| stack.get(i)));
                if let Some(start) = leaf.take() {
                    let kind =
                        element_kind(scan, el, parent, root_kind).filter(|_| el != "reference");
                    if let (Some(kind), Some(content)) = (kind, body.get(start..before)) {
                        learn(scan, part, body, content, kind, false);
                    }
                }
                stack.pop();
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        elements += 1;
        let local = e.local_name();
        let range = offset_in(body, local.as_ref()).map_or(0..0, |s| s..s + local.as_ref().len());
        let el = name_at(body, Some(&range));
        let parent = name_at(body, stack.last());
        for attr in e.attributes() {
            let attr = attr.map_err(|_| RewriteError::Xml { at: before })?;
            let key = std::str::from_utf8(attr.key.local_name().into_inner()).unwrap_or("");
            let ctx = if key == "value" {
                element_kind(scan, el, parent, root_kind).map(|k| (k, el == "reference"))
            } else if key != "id" {
                scan.tax.id_named_kind(key).map(|k| (k, false))
            } else {
                None
            };
            if let Some((kind, reference)) = ctx {
                learn(scan, part, body, &attr.value, kind, reference);
            }
        }
        leaf = None;
        if start {
            stack.push(range);
            leaf = Some(usize::try_from(reader.buffer_position()).unwrap_or(0));
        }
    }
    if elements == 0 || !stack.is_empty() {
        return Err(RewriteError::Xml { at: body.len() });
    }
    Ok(())
}

/// The name at `r` in `body`.
fn name_at<'b>(body: &'b [u8], r: Option<&Range<usize>>) -> &'b str {
    r.and_then(|r| body.get(r.clone()))
        .and_then(|n| std::str::from_utf8(n).ok())
        .unwrap_or("")
}

/// The kind of the value an element holds (in its `value` attribute or as
/// its text), or `None` when it holds no id: `id` takes the kind of its
/// parent (a resource type, an object key), `reference` its type's, an
/// id-named element the kind its name gives.
fn element_kind(
    scan: &ResponseScan<'_>,
    el: &str,
    parent: &str,
    root_kind: Option<KindId>,
) -> Option<KindId> {
    let tax = scan.tax;
    match el {
        "id" => Some(
            tax.resource_type_kinds(parent)
                .and_then(|k| choose(k, root_kind, None))
                .or_else(|| tax.object_key_kind(parent))
                .unwrap_or(tax.fallback_kind()),
        ),
        "reference" => Some(tax.fallback_kind()),
        _ => tax.id_named_kind(el),
    }
}

/// Learns one value (raw, as it stands in `body`) and records its
/// occurrence when it is written without character references.
fn learn(
    scan: &mut ResponseScan<'_>,
    part: &mut Part,
    body: &[u8],
    raw: &[u8],
    kind: KindId,
    reference: bool,
) {
    let view = MappedView::new(raw);
    let decoded: &[u8] = view.as_ref().map_or(raw, |v| v.text.as_slice());
    let Ok(text) = std::str::from_utf8(decoded) else {
        return;
    };
    let trimmed = text.trim();
    let lead = text.len() - text.trim_start().len();
    let tax = scan.tax;
    let (value, sub, kind, form) = if reference {
        let Some((kinds, id)) = shape::parse_reference(tax, trimmed) else {
            return;
        };
        let start = lead + trimmed.len() - id.len();
        let kind = kinds.first().copied().unwrap_or(kind);
        (id, start..start + id.len(), kind, Form::Fhir)
    } else {
        if !shape::is_identifier(trimmed, tax.max_id_len()) {
            return;
        }
        (
            trimmed,
            lead..lead + trimmed.len(),
            kind,
            shape::classify(trimmed),
        )
    };
    let v = scan.value(value, kind, form);
    if view.is_none() {
        if let Some(at) = offset_in(body, raw) {
            part.occs.push((at + sub.start..at + sub.end, v));
        }
    }
}
