//! Generated HMS responses with their ground truth, for the tests that try to
//! make a raw id leak: core's generator test (`core/src/alias/scan/tests/generator.rs`,
//! in process), core's last-word test (`core/src/alias/lastword/tests.rs`) and
//! the end-to-end corpus (`tests/tests/e2e/hms_corpus.rs`, through Envoy and
//! control). Plain data: bytes, strings and the ground truth's own
//! [`Unreadable`], so that core's tests and the end-to-end tests share it.
//!
//! A [`Session`] is drawn from a seed: one to five ground-truth ids, a first
//! body with every id in a structured position of its format, a later body
//! that only mentions them, and (one session in four) a body nobody can read.
//! The envelopes: JSON (HAL, FHIR bundles, GraphQL, keyed maps, nested
//! escaped JSON, cursors), the same JSON under `text/plain` and under no
//! content type, NDJSON, problem+json, CSV exports (`,`, `;`, tab; numeric id
//! columns), FHIR XML bundles (entity-encoded ids too), HTML with ids written
//! with character references; later bodies as prose, CSV rows, XML entries
//! and HTML lists. Ids are mentioned again in prose, URLs (percent-encoded
//! too), arrays, glued to other text. Ground-truth ids include alias-shaped
//! HMS values (`ward-101`, `patient-042`, `patient-m3x9-007`); look-alikes
//! that are not ids ([`LOOKALIKES`]: dates, codes, phone numbers, dose
//! schedules, status words, hyphenated names) stand around them.

/// Why a body nobody can read must be withheld: the ground truth of an
/// unreadable body (keyhole's own reasons are compared against it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Compressed without a `content-encoding` that says so (gzip, zstd, zip).
    Compressed,
    /// Not text in the charset it claims (brotli-like bytes, UTF-16, Latin-1).
    Binary,
}

/// The path the bodies are served at: a patient list.
pub const PATH: &str = "/api/v2/patients";

/// One generated body.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The body as HMS sends it.
    pub body: Vec<u8>,
    /// Its `content-type` (`None`: the header is absent).
    pub content_type: Option<&'static str>,
    /// Its envelope, for counts per format.
    pub label: &'static str,
}

/// One generated session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The ground truth: every id the bodies hold.
    pub ids: Vec<String>,
    /// The first body, then a later one, both readable.
    pub readable: [Sample; 2],
    /// A body nobody can read (compressed without `content-encoding`,
    /// binary), with the reason it must be withheld for.
    pub unreadable: Option<(Sample, Unreadable)>,
}

/// The session drawn from `seed`.
pub fn session(seed: u64) -> Session {
    let mut rng = Rng(seed | 1);
    let n = 1 + rng.below(5);
    let ids: Vec<String> = (0..n)
        .map(|i| gen_id(&mut rng, (seed as usize % 50_000) * 8 + i))
        .collect();
    let sample =
        |(body, content_type, label): (String, Option<&'static str>, &'static str)| Sample {
            body: body.into_bytes(),
            content_type,
            label,
        };
    let first = sample(first_body(&mut rng, &ids));
    let later = sample(text_body(&mut rng, &ids));
    let unreadable = (rng.below(4) == 0).then(|| {
        let (body, content_type, why) = unreadable_body(&mut rng, &ids);
        (
            Sample {
                body,
                content_type,
                label: "unreadable",
            },
            why,
        )
    });
    Session {
        ids,
        readable: [first, later],
        unreadable,
    }
}

/// The look-alikes `body` holds (each must come out as often as it went in).
pub fn lookalikes_in(body: &str) -> Vec<&'static str> {
    LOOKALIKES
        .iter()
        .copied()
        .filter(|l| body.contains(l))
        .collect()
}

/// Whether `id` stands in `out`: as written, with character references and
/// percent-escapes decoded, JSON-unescaped, or inside base64 (a cursor); a
/// digit-only id inside a longer number is another number.
pub fn leaked(out: &str, id: &str) -> bool {
    let hay = out.to_ascii_lowercase();
    let id = id.to_ascii_lowercase();
    let decoded = decoded_view(hay.as_bytes()).unwrap_or_default();
    let unescaped = hay.replace("\\\"", "\"");
    let base64 = base64_decoded(out).to_ascii_lowercase();
    [
        hay.as_str(),
        decoded.as_str(),
        unescaped.as_str(),
        base64.as_str(),
    ]
    .iter()
    .any(|h| {
        h.match_indices(&id).any(|(at, _)| {
            // A digit-only id inside a longer number is another number.
            let before = h.as_bytes().get(at.wrapping_sub(1)).copied();
            let after = h.as_bytes().get(at + id.len()).copied();
            !(is_num(&id)
                && (before.is_some_and(|b| b.is_ascii_digit())
                    || after.is_some_and(|b| b.is_ascii_digit())))
        })
    })
}

/// Every run of base64 or base64url characters in `out` long enough to
/// carry an id, decoded from each of its token starts and at each of the four
/// alignments, the pieces joined by newlines: wherever a cursor stands, what
/// it carries is in the result (much else is noise, which holds no id).
fn base64_decoded(out: &str) -> String {
    let is_b64 = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_');
    let mut text = String::new();
    for run in out
        .as_bytes()
        .split(|c| !is_b64(*c))
        .filter(|r| r.len() >= 12)
    {
        for start in 0..run.len() {
            let at_token = start == 0 || matches!(run[start - 1], b'/' | b'-' | b'_' | b'+');
            if !at_token {
                continue;
            }
            for shift in 0..4 {
                let Some(piece) = run.get(start + shift..) else {
                    break;
                };
                let bytes: Vec<u8> = base64_bytes(piece).collect();
                text.push_str(&String::from_utf8_lossy(&bytes));
                text.push('\n');
            }
        }
    }
    text
}

/// Percent-decodes and HTML-entity-decodes `text` when it holds an escape
/// (two rounds, for double encoding: `%252F`, `&amp;#45;`); `None` when it
/// holds none. The oracle's own copy of what keyhole's scanner does, so that
/// the oracle shares no code with what it checks.
fn decoded_view(text: &[u8]) -> Option<String> {
    if !text.iter().any(|b| matches!(b, b'%' | b'&')) {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        if b == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        } else if b == b'&' {
            if let Some((t, len)) = entity(text.get(i..).unwrap_or_default()) {
                out.extend_from_slice(t.as_bytes());
                i += len;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    let once = String::from_utf8_lossy(&out).into_owned();
    if once.as_bytes() != text && once.bytes().any(|b| b == b'%' || b == b'&') {
        if let Some(twice) = decoded_view(once.as_bytes()) {
            return Some(twice);
        }
    }
    Some(once)
}

/// One HTML character reference at the start of `s` (`&#45;`, `&#x2d;`, any
/// HTML5 name): the text it stands for and the reference's length.
/// Hyphen-like characters (U+2010, U+2011, U+2212) read as `-`.
fn entity(s: &[u8]) -> Option<(String, usize)> {
    let end = s.iter().take(34).position(|b| *b == b';')?;
    let name = std::str::from_utf8(s.get(1..end)?).ok()?;
    let text = if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse::<u32>().ok()?,
        };
        match char::from_u32(code)? {
            '\u{2010}' | '\u{2011}' | '\u{2212}' => "-".to_owned(),
            ch => ch.to_string(),
        }
    } else {
        match name {
            "hyphen" | "dash" | "minus" => "-".to_owned(),
            _ => quick_xml::escape::resolve_html5_entity(name)?.to_owned(),
        }
    };
    Some((text, end + 1))
}

/// The bytes base64 characters (either alphabet, no padding) decode to; a
/// trailing partial byte is dropped.
fn base64_bytes(chars: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut acc: u32 = 0;
    let mut bits = 0;
    chars.iter().filter_map(move |&c| {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            _ => 63,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        (bits >= 8).then(|| {
            bits -= 8;
            ((acc >> bits) & 0xff) as u8
        })
    })
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn hex(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b"0123456789abcdef"[self.below(16)]))
            .collect()
    }
}

/// Values that look like ids and are not.
pub const LOOKALIKES: &[&str] = &[
    "2025-03-25",
    "25.03.2025",
    "2025-03-25T10:30:00+01:00",
    "J18.9",
    "E11.65",
    "I10",
    "5-470.11",
    "8-930",
    "2345-7",
    "4548-4",
    "38341003",
    "+49 30 1234 5678",
    "030/555-0199",
    "1-0-1-0",
    "0-0-1",
    "3.5-5.1 mmol/l",
    "12-16 g/dl",
    "v2.3.1",
    "rev-3",
    "in-progress",
    "entered-in-error",
    "clinic-wide",
    "follow-up",
    "Müller-Lüdenscheidt",
    "Anna-Lena",
    "COVID-19",
    "HbA1c",
    "http://terminology.hl7.org/CodeSystem/v3-ActCode",
    "http://terminology.hl7.org/CodeSystem/v2-0203",
    "ValueSet/c80-doc-typecodes",
];

const FHIR_TYPES: &[&str] = &[
    "Patient",
    "Encounter",
    "Observation",
    "DocumentReference",
    "CarePlan",
    "Specimen",
    "ImagingStudy",
    "Procedure",
    "Consent",
    "NutritionOrder",
];

/// One ground-truth id.
fn gen_id(rng: &mut Rng, n: usize) -> String {
    match rng.below(9) {
        0 => format!(
            "{}-{}-4{}-a{}-{}",
            rng.hex(8),
            rng.hex(4),
            rng.hex(3),
            rng.hex(3),
            rng.hex(12)
        ),
        1 => {
            let mut h = rng.hex(31);
            h.push('f');
            h
        }
        2 => format!(
            "{}-{:06}",
            rng.pick(&["pat", "enc", "obs", "prac", "xq", "docref"]),
            100_000 + n * 7919 % 800_000
        ),
        3 => format!("9{:06}", n * 104_729 % 1_000_000),
        4 => format!(
            "{}-{}-{}",
            rng.pick(&["clinic", "ward", "station"]),
            rng.pick(&["berlin", "nord", "mitte"]),
            10 + n
        ),
        5 => format!("pat-{:06}", 200_000 + n),
        6 => format!("{}{:05}", rng.pick(&["MRN", "AKZ"]), 10_000 + n),
        // Alias-shaped HMS values: aliased like any other id.
        7 => format!(
            "{}-{}",
            rng.pick(&["ward", "slot", "clinic"]),
            100 + n % 900
        ),
        _ => match rng.below(2) {
            0 => format!("patient-{:03}", 1 + n % 999),
            _ => format!("patient-m3x9-{:03}", 1 + n % 999),
        },
    }
}

fn pct(s: &str) -> String {
    s.replace('/', "%2F").replace(':', "%3A")
}

fn b64(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn is_num(id: &str) -> bool {
    id.bytes().all(|b| b.is_ascii_digit())
}

/// A JSON value for an id in a structured position: numbers as numbers.
fn jv(id: &str) -> String {
    if is_num(id) {
        id.to_owned()
    } else {
        format!("\"{id}\"")
    }
}

/// Prose that mentions `id` in one of many ways, with look-alikes around.
fn mention(rng: &mut Rng, id: &str, la: &str) -> String {
    match rng.below(10) {
        0 => format!("Seen {id} on {la}."),
        1 => format!("Arztbrief_{id}_2025.pdf ({la})"),
        2 => format!("{id}-v7"),
        3 => format!(
            "https://hms.example/fhir?subject={}&code={la}",
            pct(&format!("Patient/{id}"))
        ),
        4 => format!("({id}), {la}"),
        5 => format!("see /api/v2/patients/{id}/visits; {la}"),
        6 => format!("Bezug: {id}; Status {la}"),
        7 => format!("{}{id}", "ref:"),
        8 => format!(
            "/api/v2/patients?cursor={}&limit=20 ({la})",
            b64(&format!(r#"{{"after":"{id}"}}"#))
        ),
        _ => format!("{la} / {id}"),
    }
}

/// A JSON body; every id sits in at least one structured position.
fn json_body(rng: &mut Rng, ids: &[String]) -> String {
    let la = |rng: &mut Rng| rng.pick(LOOKALIKES);
    let mut records = Vec::new();
    let envelope = rng.below(8);
    for id in ids {
        let key = rng.pick(&[
            "id",
            "ID",
            "_id",
            "patientId",
            "patient_id",
            "PatientID",
            "encounterId",
            "docId",
        ]);
        let l1 = la(rng);
        let l2 = la(rng);
        let note = mention(rng, id, l2);
        let rec = match envelope {
            0 => format!(
                r#"{{"{key}":{},"status":"{l1}","note":"{note}","_links":{{"self":{{"href":"/api/v2/patients/{id}"}}}}}}"#,
                jv(id)
            ),
            1 | 2 => {
                let ty = rng.pick(FHIR_TYPES);
                format!(
                    r#"{{"fullUrl":"https://fhir.example/{ty}/{id}","resource":{{"resourceType":"{ty}","id":"{id}","status":"{l1}","text":{{"div":"{note}"}}}},"request":{{"method":"PUT","url":"{ty}/{id}"}}}}"#
                )
            }
            3 => format!(
                r#"{{"node":{{"{key}":{},"code":"{l1}","tags":["{note}","{l2}"]}}}}"#,
                jv(id)
            ),
            4 => format!(
                r#"{{"{key}":{},"files":["Arztbrief_{id}_2025.pdf"],"etag":"{id}-v7","range":"{l1}"}}"#,
                jv(id)
            ),
            5 => format!(
                r#""{id}":{{"id":{},"label":"{l1}","msg":"{note}"}}"#,
                jv(id)
            ),
            6 => {
                let inner = format!(r#"{{"patientId":"{id}","dx":"{l1}"}}"#).replace('"', "\\\"");
                format!(
                    r#"{{"uuid":{},"legacy":"{inner}","comment":"{note}"}}"#,
                    jv(id)
                )
            }
            _ => format!(
                r#"{{"{key}":{},"next":"{}","schedule":"{l1}"}}"#,
                jv(id),
                b64(&format!(r#"{{"after":"{id}"}}"#))
            ),
        };
        records.push(rec);
    }
    let joined = records.join(",");
    let l = la(rng);
    match envelope {
        0 => format!(
            r#"{{"_embedded":{{"patients":[{joined}]}},"page":{{"size":20}},"info":"{l}"}}"#
        ),
        1 => format!(
            r#"{{"resourceType":"Bundle","type":"searchset","total":{},"entry":[{joined}]}}"#,
            ids.len()
        ),
        2 => format!(r#"{{"resourceType":"Bundle","type":"transaction","entry":[{joined}]}}"#),
        3 => format!(
            r#"{{"data":{{"search":{{"edges":[{joined}]}}}},"extensions":{{"cost":"{l}"}}}}"#
        ),
        5 => format!(r#"{{"byId":{{{joined}}},"hint":"{l}"}}"#),
        _ => format!("[{joined}]"),
    }
}

/// Markup escaping for text and attribute values.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An id written with character references, as an HTML or XML generator may.
fn entity_encoded(rng: &mut Rng, id: &str) -> String {
    match rng.below(6) {
        0 => id.replace('-', "&#45;"),
        1 => id.replace('-', "&#x2d;"),
        2 => id.replace('-', "&hyphen;"),
        3 => {
            let mut c = id.chars();
            let first = c.next().map_or(0, u32::from);
            format!("&#x{first:x};{}", c.as_str())
        }
        4 => id.chars().map(|c| format!("&#{};", u32::from(c))).collect(),
        _ => id.to_owned(),
    }
}

/// The content types a JSON body is served with.
fn json_type(rng: &mut Rng) -> (Option<&'static str>, &'static str) {
    match rng.below(6) {
        0 => (Some("text/plain; charset=utf-8"), "json-as-text"),
        1 => (None, "json-untyped"),
        2 => (Some("application/fhir+json"), "json"),
        _ => (Some("application/json"), "json"),
    }
}

/// NDJSON: one record per line.
fn ndjson_body(rng: &mut Rng, ids: &[String]) -> String {
    let mut out = String::new();
    for id in ids {
        let key = rng.pick(&["patientId", "id", "encounter_id", "docId"]);
        let l = rng.pick(LOOKALIKES);
        let note = mention(rng, id, l);
        out.push_str(&format!(
            r#"{{"{key}":{},"status":"{l}","note":"{note}"}}"#,
            jv(id)
        ));
        out.push_str(if rng.below(2) == 0 { "\n" } else { "\r\n" });
    }
    out
}

/// Server-sent events: one JSON `data:` line per id.
fn event_stream_body(rng: &mut Rng, ids: &[String]) -> String {
    let mut out = String::new();
    for id in ids {
        let key = rng.pick(&["patientId", "id", "encounter_id"]);
        let l = rng.pick(LOOKALIKES);
        let note = mention(rng, id, l);
        out.push_str(&format!(
            "event: update\ndata: {{\"{key}\":{},\"status\":\"{l}\",\"note\":\"{note}\"}}\n\n",
            jv(id)
        ));
    }
    out
}

/// Every byte but the unreserved ones percent-encoded, as a form value.
fn form_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A form-encoded body: ids under id keys, look-alikes under others.
fn form_body(rng: &mut Rng, ids: &[String]) -> String {
    ids.iter()
        .map(|id| {
            let key = rng.pick(&["patientId", "patient_id", "encounterId", "id"]);
            format!(
                "{key}={}&status={}",
                form_encoded(id),
                form_encoded(rng.pick(LOOKALIKES))
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A YAML list: ids under id keys (numbers bare), look-alikes and prose quoted.
fn yaml_body(rng: &mut Rng, ids: &[String]) -> String {
    let mut out = String::from("items:\n");
    for id in ids {
        let key = rng.pick(&["patientId", "patient_id", "id", "encounterId"]);
        let l = rng.pick(LOOKALIKES);
        let note = mention(rng, id, l);
        let value = if rng.below(2) == 0 {
            id.clone()
        } else {
            format!("\"{id}\"")
        };
        out.push_str(&format!(
            "  - {key}: {value}\n    status: \"{l}\"\n    note: \"{note}\"\n"
        ));
    }
    out
}

/// problem+json: the detail and the errors name the ids.
fn problem_body(rng: &mut Rng, ids: &[String]) -> String {
    let errors: Vec<String> = ids
        .iter()
        .map(|id| {
            let l = rng.pick(LOOKALIKES);
            let m = mention(rng, id, l);
            format!(
                r#"{{"detail":"{m}","pointer":"/data/patientId","patientId":{}}}"#,
                jv(id)
            )
        })
        .collect();
    let first = ids.first().map_or("", String::as_str);
    format!(
        r#"{{"type":"https://hms.example/problems/conflict","title":"Conflict","status":409,"detail":"Record {first} is locked ({})","instance":"/api/v2/patients/{first}","errors":[{}]}}"#,
        rng.pick(LOOKALIKES),
        errors.join(",")
    )
}

/// A CSV export: an id-named column (numbers as they are), look-alikes and
/// prose mentions in the other columns.
fn csv_body(rng: &mut Rng, ids: &[String]) -> String {
    let sep = rng.pick(&[",", ";", "\t"]);
    let col = rng.pick(&[
        "Patient ID",
        "patient_id",
        "PatientID",
        "patientId",
        "id",
        "ID",
        "encounterId",
        "Fall-ID",
    ]);
    let nl = if rng.below(2) == 0 { "\n" } else { "\r\n" };
    let mut out = format!("\u{feff}{col}{sep}Name{sep}Status{sep}Bemerkung{sep}Link{nl}");
    for id in ids {
        let name = rng.pick(&["Müller-Lüdenscheidt", "Anna-Lena Roth", "Meier, Jo"]);
        let l = rng.pick(LOOKALIKES);
        let m = {
            let l2 = rng.pick(LOOKALIKES);
            mention(rng, id, l2)
        }
        .replace('"', "\"\"");
        let cell = if rng.below(3) == 0 {
            format!("\"{id}\"")
        } else {
            id.clone()
        };
        // The link names the id only sometimes: the id column alone must do.
        let link = if rng.below(3) == 0 {
            format!("/api/v2/patients/{id}")
        } else {
            "-".to_owned()
        };
        out.push_str(&format!(
            "{cell}{sep}\"{name}\"{sep}{l}{sep}\"{m}\"{sep}{link}{nl}"
        ));
    }
    out
}

/// A FHIR XML bundle: resource ids, references, id-named elements, prose.
fn fhir_xml_body(rng: &mut Rng, ids: &[String]) -> String {
    let mut out = String::from(r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    out.push_str(&format!(
        r#"<Bundle xmlns="http://hl7.org/fhir"><type value="searchset"/><total value="{}"/>"#,
        ids.len()
    ));
    for id in ids {
        let ty = rng.pick(FHIR_TYPES);
        let l = esc(rng.pick(LOOKALIKES));
        let m = esc(&{
            let l2 = rng.pick(LOOKALIKES);
            mention(rng, id, l2)
        });
        let idv = if rng.below(4) == 0 {
            entity_encoded(rng, id)
        } else {
            id.clone()
        };
        let extra = match rng.below(3) {
            0 => format!("<subject><reference value=\"Patient/{id}\"/></subject>"),
            1 => format!("<patientId>{id}</patientId>"),
            _ => format!(
                "<identifier><system value=\"urn:hms\"/><value value=\"{l}\"/></identifier>"
            ),
        };
        let full = if rng.below(3) == 0 {
            format!(r#"<fullUrl value="https://fhir.example/{ty}/{id}"/>"#)
        } else {
            String::new()
        };
        out.push_str(&format!(
            r#"<entry>{full}<resource><{ty}><id value="{idv}"/><status value="{l}"/>{extra}<text><div xmlns="http://www.w3.org/1999/xhtml">{m}</div></text></{ty}></resource></entry>"#
        ));
    }
    out.push_str("</Bundle>");
    out
}

/// An HTML page whose links carry the ids written with character references.
fn html_body(rng: &mut Rng, ids: &[String]) -> String {
    let mut out = format!(
        "<!DOCTYPE html><html><body><h1>{}</h1><ul>",
        esc(rng.pick(LOOKALIKES))
    );
    for id in ids {
        let enc = entity_encoded(rng, id);
        let l = esc(rng.pick(LOOKALIKES));
        let m = esc(&{
            let l2 = rng.pick(LOOKALIKES);
            mention(rng, id, l2)
        });
        out.push_str(&format!(
            r#"<li><a href="/patients/{enc}">{l}</a> {m}</li>"#
        ));
    }
    out.push_str("</ul></body></html>");
    out
}

/// The first body of a session: ids in structured positions of its format.
fn first_body(rng: &mut Rng, ids: &[String]) -> (String, Option<&'static str>, &'static str) {
    match rng.below(15) {
        10 => (
            event_stream_body(rng, ids),
            Some("text/event-stream"),
            "event-stream",
        ),
        11 => (
            form_body(rng, ids),
            Some("application/x-www-form-urlencoded"),
            "form",
        ),
        12 => (yaml_body(rng, ids), Some("application/yaml"), "yaml"),
        13 => (
            format!("hms_cb({});", json_body(rng, ids)),
            Some("application/javascript"),
            "jsonp",
        ),
        14 => (
            format!(")]}}',\n{}", json_body(rng, ids)),
            Some("application/json"),
            "xssi",
        ),
        0 => (
            ndjson_body(rng, ids),
            Some("application/x-ndjson"),
            "ndjson",
        ),
        1 => (
            problem_body(rng, ids),
            Some("application/problem+json"),
            "problem+json",
        ),
        2 => (csv_body(rng, ids), Some("text/csv; charset=utf-8"), "csv"),
        3 => (
            fhir_xml_body(rng, ids),
            Some("application/fhir+xml"),
            "fhir-xml",
        ),
        4 => (
            html_body(rng, ids),
            Some("text/html; charset=utf-8"),
            "html",
        ),
        _ => {
            let (ct, label) = json_type(rng);
            (json_body(rng, ids), ct, label)
        }
    }
}

/// A later body of the same session, in a non-JSON format: it only mentions
/// ids the session learned before.
fn text_body(rng: &mut Rng, ids: &[String]) -> (String, Option<&'static str>, &'static str) {
    let mut rows = Vec::new();
    let kind = rng.below(4);
    for id in ids {
        let l = rng.pick(LOOKALIKES);
        let m = mention(rng, id, l);
        rows.push(match kind {
            0 => format!("{id};{l};\"{m}\""),
            1 => format!(
                "<entry><id value=\"{id}\"/><note>{}</note><code>{l}</code></entry>",
                esc(&m)
            ),
            2 => format!(
                "<li><a href=\"/patients/{}\">{l}</a> {}</li>",
                entity_encoded(rng, id),
                esc(&m)
            ),
            _ => m,
        });
    }
    let body = rows.join("\n");
    match kind {
        0 => (body, Some("text/csv"), "later-csv"),
        1 => (
            format!("<entries>{body}</entries>"),
            Some("application/xml"),
            "later-xml",
        ),
        2 => (format!("<ul>{body}</ul>"), Some("text/html"), "later-html"),
        _ => (
            body,
            if rng.below(2) == 0 {
                Some("text/plain")
            } else {
                None
            },
            "later-text",
        ),
    }
}

/// Bodies nobody can read as sent: compressed without a content-encoding,
/// or binary. Raw ids stand in them in plain bytes.
fn unreadable_body(rng: &mut Rng, ids: &[String]) -> (Vec<u8>, Option<&'static str>, Unreadable) {
    let text = ids.join(",");
    let mut b: Vec<u8> = Vec::new();
    match rng.below(6) {
        0 => {
            // gzip with a stored block: the ids are readable in the bytes.
            b.extend_from_slice(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x01");
            b.extend_from_slice(text.as_bytes());
            (b, Some("application/json"), Unreadable::Compressed)
        }
        1 => {
            b.extend_from_slice(b"\x28\xb5\x2f\xfd\x24\x00");
            b.extend_from_slice(text.as_bytes());
            (b, None, Unreadable::Compressed)
        }
        2 => {
            b.extend_from_slice(b"PK\x03\x04\x14\x00\x00\x00");
            b.extend_from_slice(format!("Arztbrief_{text}.pdf").as_bytes());
            (b, Some("text/csv"), Unreadable::Compressed)
        }
        3 => {
            // Brotli has no magic number: high bytes around the ids. Each run
            // starts with a continuation byte after ASCII, so it is never
            // UTF-8 by chance (eight random high bytes sometimes are:
            // `ʽӻ𬴿`, generator seed 123456789).
            for id in ids {
                b.extend((0..8).map(|j| {
                    let high = 0x80 + rng.below(0x7f) as u8;
                    if j == 0 {
                        high & 0xbf
                    } else {
                        high
                    }
                }));
                b.extend_from_slice(id.as_bytes());
            }
            (b, Some("text/plain"), Unreadable::Binary)
        }
        4 => {
            for c in format!(r#"{{"patientId":"{text}"}}"#).encode_utf16() {
                b.extend_from_slice(&c.to_le_bytes());
            }
            (b, Some("application/json"), Unreadable::Binary)
        }
        _ => {
            b.extend_from_slice(b"M\xfcller ");
            b.extend_from_slice(text.as_bytes());
            (b, Some("text/html; charset=iso-8859-1"), Unreadable::Binary)
        }
    }
}
