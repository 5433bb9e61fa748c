//! CSV exports: the columns whose header names an id (`patientId`,
//! `Patient ID`, `patient_id`, `id`, `slug`, `reference`) hold ids, numbers
//! included (`482913`); each such cell is learned with the column's kind and
//! replaced where it stands. The rest of the body is read as text by the
//! caller, so every cell is also scanned for id shapes and known ids.
//!
//! The parser is csv-core (the csv crate's): it reports how many input bytes
//! each field took, so every cell keeps its byte range and the rewrite splices
//! the original bytes (quoting, separators and line ends untouched; aliases
//! are `[a-z0-9-]` and never need quoting). The separator is the one of `,`,
//! `;`, tab and `|` that the header line uses most (German exports use `;`).

use super::{Part, ResponseScan};
use crate::alias::id::Form;
use crate::alias::id::KindId;
use crate::alias::shape;
use crate::alias::taxonomy::KeyRole;
use csv_core::{ReadFieldResult, ReaderBuilder};

/// Longest cell kept for a look; longer cells are text, never one id.
const CELL_MAX: usize = 4096;

/// What a column holds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Column {
    /// Ids of this kind.
    Id(KindId),
    /// FHIR references `Type/id`.
    Reference,
    /// Not ids.
    Other,
}

/// Learns the cells under id-named columns and records their occurrences.
pub(super) fn scan(
    scan: &mut ResponseScan<'_>,
    body: &[u8],
    root_kind: Option<KindId>,
    part: &mut Part,
) {
    let mut rdr = ReaderBuilder::new().delimiter(separator(body)).build();
    let mut columns: Vec<Column> = Vec::new();
    let mut cell = [0u8; CELL_MAX];
    let (mut pos, mut field_start, mut len, mut overflow) = (0, 0, 0, false);
    let (mut row, mut col) = (0usize, 0usize);
    // Every call consumes input or ends a field; the bound only guards
    // against a parser that does neither.
    for _ in 0..body.len().saturating_mul(2).saturating_add(16) {
        let input = body.get(pos..).unwrap_or_default();
        let (res, nin, nout) = rdr.read_field(input, cell.get_mut(len..).unwrap_or_default());
        pos += nin;
        len += nout;
        match res {
            ReadFieldResult::InputEmpty => {}
            ReadFieldResult::OutputFull => {
                overflow = true;
                len = 0;
            }
            ReadFieldResult::Field { record_end } => {
                let text = if overflow {
                    None
                } else {
                    cell.get(..len).and_then(|c| std::str::from_utf8(c).ok())
                };
                if row == 0 {
                    let name = text.unwrap_or("").trim().trim_start_matches('\u{feff}');
                    columns.push(column(scan, name, root_kind));
                } else if let (Some(text), Some(c)) = (text, columns.get(col)) {
                    let raw = body.get(field_start..pos).unwrap_or_default();
                    cell_value(scan, part, *c, text.trim(), raw, field_start);
                }
                field_start = pos;
                len = 0;
                overflow = false;
                if record_end {
                    row += 1;
                    col = 0;
                } else {
                    col += 1;
                }
            }
            ReadFieldResult::End => break,
        }
    }
}

/// The role of a column from its header.
pub(super) fn column(scan: &ResponseScan<'_>, name: &str, root_kind: Option<KindId>) -> Column {
    let tax = scan.tax;
    match tax.key_role(name) {
        Some(KeyRole::Reference) => Column::Reference,
        Some(_) => Column::Id(root_kind.unwrap_or(tax.fallback_kind())),
        None => tax.id_named_kind(name).map_or(Column::Other, Column::Id),
    }
}

/// One cell under a column: learned and recorded when it is an id. `raw` is
/// the field's bytes in the body (quotes and separator included), starting
/// at `base`.
pub(super) fn cell_value(
    scan: &mut ResponseScan<'_>,
    part: &mut Part,
    column: Column,
    text: &str,
    raw: &[u8],
    base: usize,
) {
    let tax = scan.tax;
    let (kind, value, form) = match column {
        Column::Other => return,
        Column::Id(kind) => {
            if !shape::is_identifier(text, tax.max_id_len()) {
                return;
            }
            (kind, text, shape::classify(text))
        }
        Column::Reference => match shape::parse_reference(tax, text) {
            Some((kinds, id)) => (
                kinds.first().copied().unwrap_or(tax.fallback_kind()),
                id,
                Form::Fhir,
            ),
            None => return,
        },
    };
    let v = scan.value(value, kind, form);
    // The value holds no quote, so it stands verbatim in the raw field.
    if let Some(at) = memchr::memmem::find(raw, value.as_bytes()) {
        part.occs.push((base + at..base + at + value.len(), v));
    }
}

/// The separator the header line uses most, outside quotes (`,` if none).
fn separator(body: &[u8]) -> u8 {
    let mut counts = [0usize; 4];
    const SEPS: [u8; 4] = [b',', b';', b'\t', b'|'];
    let mut quoted = false;
    for &b in body.iter().take(64 * 1024) {
        match b {
            b'"' => quoted = !quoted,
            b'\n' if !quoted => break,
            _ if !quoted => {
                if let Some(i) = SEPS.iter().position(|s| *s == b) {
                    if let Some(c) = counts.get_mut(i) {
                        *c += 1;
                    }
                }
            }
            _ => {}
        }
    }
    let mut best = (0, b',');
    for (c, s) in counts.iter().zip(SEPS) {
        if *c > best.0 {
            best = (*c, s);
        }
    }
    best.1
}
