//! Key-value bodies: form-encoded (`patientId=482913&status=booked`) and
//! YAML (`patientId: 482913` lines). A value under a key that names an id
//! (the same rule as a CSV column's header, [`csv::column`]) is learned with
//! the key's kind and replaced where it stands, numbers included. The rest
//! of the body is read as text by the caller, so every value is also
//! scanned for id shapes and known ids.
//!
//! YAML is read line by line, not as a document: a `key: value` line (in a
//! list item too, `- id: 7`) whose value is a plain or quoted scalar, with
//! the kind of the mapping it is nested in (its indentation says which). A
//! value in a flow collection or a block scalar is text. A YAML body that is
//! JSON never gets here (it is read as JSON).

use super::csv::{self, Column};
use super::{Part, ResponseScan};
use crate::alias::id::KindId;
use crate::alias::known::decoded_view;
use crate::alias::shape;

/// Reads a form-encoded body: `&`- or `;`-separated `key=value` pairs.
pub(super) fn scan_form(
    scan: &mut ResponseScan<'_>,
    body: &[u8],
    root_kind: Option<KindId>,
    part: &mut Part,
) {
    let mut at = 0;
    for pair in body.split(|b| matches!(b, b'&' | b';')) {
        let base = at;
        at += pair.len() + 1;
        let Some(eq) = memchr::memchr(b'=', pair) else {
            continue;
        };
        let (key, value) = (
            pair.get(..eq).unwrap_or_default(),
            pair.get(eq + 1..).unwrap_or_default(),
        );
        let key = decoded_view(key).unwrap_or_else(|| String::from_utf8_lossy(key).into_owned());
        value_under(scan, part, &key, value, base + eq + 1, root_kind);
    }
}

/// Reads a YAML body's `key: value` lines. A generic id key (`id`) takes
/// the kind of the nearest mapping it is nested in whose key names a kind
/// (`patient:` then `  id: 7`), as a JSON object's `id` does; outside
/// one, the path's kind.
pub(super) fn scan_yaml(
    scan: &mut ResponseScan<'_>,
    body: &[u8],
    root_kind: Option<KindId>,
    part: &mut Part,
) {
    // The open mappings: the column of their key, and the kind it names.
    let mut open: Vec<(usize, Option<KindId>)> = Vec::new();
    let mut at = 0;
    for line in body.split(|b| *b == b'\n') {
        let base = at;
        at += line.len() + 1;
        let Some(column) = key_column(line) else {
            continue;
        };
        while open.last().is_some_and(|(c, _)| *c >= column) {
            open.pop();
        }
        let context = open.iter().rev().find_map(|(_, k)| *k).or(root_kind);
        if let Some(key) = yaml_opener(line) {
            let kind = std::str::from_utf8(key)
                .ok()
                .and_then(|k| scan.tax.object_key_kind(k));
            open.push((column, kind));
            continue;
        }
        let Some((key, value, offset)) = yaml_pair(line) else {
            continue;
        };
        let Ok(key) = std::str::from_utf8(key) else {
            continue;
        };
        value_under(scan, part, key, value, base + offset, context);
    }
}

/// The column a YAML line's content starts at, past its indentation and a
/// list item's `- `; `None` for a blank or comment line.
fn key_column(line: &[u8]) -> Option<usize> {
    let mut i = line.iter().take_while(|b| **b == b' ').count();
    if line.get(i..i + 2) == Some(b"- ") {
        i += 2;
        i += line.get(i..)?.iter().take_while(|b| **b == b' ').count();
    }
    match line.get(i) {
        None | Some(b'#' | b'\r') => None,
        Some(_) => Some(i),
    }
}

/// The key of a line that opens a nested mapping or list (`patient:`,
/// `- visits:  # all`), with no value of its own.
fn yaml_opener(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = match memchr::memmem::find(line, b" #") {
        Some(c) => line.get(..c)?,
        None => line,
    };
    let start = key_column(line)?;
    let rest = line.get(start..)?;
    let trimmed = rest.len() - rest.iter().rev().take_while(|b| **b == b' ').count();
    let key = rest.get(..trimmed)?.strip_suffix(b":")?;
    let key = unquote(key);
    (!key.is_empty()
        && !key
            .iter()
            .any(|b| matches!(b, b':' | b'{' | b'[' | b'"' | b'\'')))
    .then_some(key)
}

/// The key, the scalar value and the value's offset of a YAML `key: value`
/// line (indentation, a list item's `- `, quotes around either and a
/// trailing ` # comment` stripped).
fn yaml_pair(line: &[u8]) -> Option<(&[u8], &[u8], usize)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut i = line.iter().take_while(|b| **b == b' ').count();
    if line.get(i..i + 2) == Some(b"- ") {
        i += 2;
        i += line.get(i..)?.iter().take_while(|b| **b == b' ').count();
    }
    let rest = line.get(i..)?;
    let colon = memchr::memmem::find(rest, b": ")
        .or_else(|| rest.ends_with(b":").then(|| rest.len() - 1))?;
    let key = unquote(rest.get(..colon)?);
    if key.is_empty() || key.iter().any(|b| matches!(b, b'{' | b'[' | b'#')) {
        return None;
    }
    let mut v = i + colon + 1;
    v += line.get(v..)?.iter().take_while(|b| **b == b' ').count();
    let raw = line.get(v..)?;
    // A comment starts at ` #` outside quotes; a quoted scalar ends at its quote.
    let (value, skip) = match raw.first() {
        Some(q @ (b'"' | b'\'')) => {
            let end = raw.get(1..)?.iter().position(|b| b == q)?;
            (raw.get(1..1 + end)?, 1)
        }
        Some(b'{' | b'[' | b'|' | b'>' | b'&' | b'*' | b'!') | None => return None,
        Some(_) => {
            let end = memchr::memmem::find(raw, b" #").unwrap_or(raw.len());
            let v = raw.get(..end)?;
            let trimmed = v.len() - v.iter().rev().take_while(|b| **b == b' ').count();
            (v.get(..trimmed)?, 0)
        }
    };
    Some((key, value, v + skip))
}

fn unquote(s: &[u8]) -> &[u8] {
    match (s.first(), s.last()) {
        (Some(b'"'), Some(b'"')) | (Some(b'\''), Some(b'\'')) if s.len() >= 2 => {
            s.get(1..s.len() - 1).unwrap_or_default()
        }
        _ => s,
    }
}

/// A value under `key`, at `base` in the body: learned and recorded when
/// the key names an id. A value written with escapes (`%34%38`) is
/// replaced whole.
fn value_under(
    scan: &mut ResponseScan<'_>,
    part: &mut Part,
    key: &str,
    raw: &[u8],
    base: usize,
    root_kind: Option<KindId>,
) {
    let column = csv::column(scan, key.trim(), root_kind);
    if matches!(column, Column::Other) {
        return;
    }
    let Ok(text) = std::str::from_utf8(raw) else {
        return;
    };
    match decoded_view(raw) {
        None => csv::cell_value(scan, part, column, text, raw, base),
        Some(decoded) => {
            let Column::Id(kind) = column else {
                return;
            };
            if !shape::is_identifier(&decoded, scan.tax.max_id_len()) {
                return;
            }
            let v = scan.value(&decoded, kind, shape::classify(&decoded));
            part.occs.push((base..base + raw.len(), v));
        }
    }
}
