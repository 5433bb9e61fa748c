//! The response generator: HMS bodies in many envelopes with ids from a
//! ground-truth list in every structured position and mentioned again in prose,
//! URLs (percent-encoded too), arrays, glued to other text and in later bodies
//! of the session; plus look-alikes that are not ids. Control's alias
//! assignment is simulated with the pure [`SessionMap`].
//!
//! Measured over [`BODIES`] bodies: no raw id may reach the output, every
//! look-alike must come out unchanged, nothing may panic. The seed is
//! `PROPTEST_RNG_SEED` (set by `make test`), else a fixed one.

use super::super::*;
use crate::alias::{KnownAlias, SessionMap};
use std::panic::{catch_unwind, AssertUnwindSafe};

const BODIES: u64 = 10_000;

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
        (0..n).map(|_| char::from(b"0123456789abcdef"[self.below(16)])).collect()
    }
}

const LOOKALIKES: &[&str] = &[
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
    match rng.below(7) {
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
        2 => format!("{}-{:06}", rng.pick(&["pat", "enc", "obs", "prac", "xq", "docref"]), 100_000 + n * 7919 % 800_000),
        3 => format!("9{:06}", n * 104_729 % 1_000_000),
        4 => format!("{}-{}-{}", rng.pick(&["clinic", "ward", "station"]), rng.pick(&["berlin", "nord", "mitte"]), 10 + n),
        5 => format!("pat-{:06}", 200_000 + n),
        _ => format!("{}{:05}", rng.pick(&["MRN", "AKZ"]), 10_000 + n),
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
    match rng.below(9) {
        0 => format!("Seen {id} on {la}."),
        1 => format!("Arztbrief_{id}_2025.pdf ({la})"),
        2 => format!("{id}-v7"),
        3 => format!("https://hms.example/fhir?subject={}&code={la}", pct(&format!("Patient/{id}"))),
        4 => format!("({id}), {la}"),
        5 => format!("see /api/v2/patients/{id}/visits; {la}"),
        6 => format!("Bezug: {id}; Status {la}"),
        7 => format!("{}{id}", "ref:"),
        _ => format!("{la} / {id}"),
    }
}

/// A JSON body; every id sits in at least one structured position.
fn json_body(rng: &mut Rng, ids: &[String]) -> String {
    let la = |rng: &mut Rng| rng.pick(LOOKALIKES);
    let mut records = Vec::new();
    let envelope = rng.below(8);
    for id in ids {
        let key = rng.pick(&["id", "ID", "_id", "patientId", "patient_id", "PatientID", "encounterId", "docId"]);
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
            3 => format!(r#"{{"node":{{"{key}":{},"code":"{l1}","tags":["{note}","{l2}"]}}}}"#, jv(id)),
            4 => format!(r#"{{"{key}":{},"files":["Arztbrief_{id}_2025.pdf"],"etag":"{id}-v7","range":"{l1}"}}"#, jv(id)),
            5 => format!(r#""{id}":{{"id":{},"label":"{l1}","msg":"{note}"}}"#, jv(id)),
            6 => {
                let inner = format!(r#"{{"patientId":"{id}","dx":"{l1}"}}"#).replace('"', "\\\"");
                format!(r#"{{"uuid":{},"legacy":"{inner}","comment":"{note}"}}"#, jv(id))
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
        0 => format!(r#"{{"_embedded":{{"patients":[{joined}]}},"page":{{"size":20}},"info":"{l}"}}"#),
        1 => format!(r#"{{"resourceType":"Bundle","type":"searchset","total":{},"entry":[{joined}]}}"#, ids.len()),
        2 => format!(r#"{{"resourceType":"Bundle","type":"transaction","entry":[{joined}]}}"#),
        3 => format!(r#"{{"data":{{"search":{{"edges":[{joined}]}}}},"extensions":{{"cost":"{l}"}}}}"#),
        5 => format!(r#"{{"byId":{{{joined}}},"hint":"{l}"}}"#),
        _ => format!("[{joined}]"),
    }
}

/// A later body of the same session, in a non-JSON format: it only mentions
/// ids the session learned before.
fn text_body(rng: &mut Rng, ids: &[String]) -> String {
    let mut rows = Vec::new();
    let kind = rng.below(4);
    for id in ids {
        let l = rng.pick(LOOKALIKES);
        let m = mention(rng, id, l);
        rows.push(match kind {
            0 => format!("{id};{l};\"{m}\""),
            1 => format!("<entry><id value=\"{id}\"/><note>{}</note><code>{l}</code></entry>", m.replace('&', "&amp;")),
            2 => format!("<li><a href=\"/patients/{}\">{l}</a> {}</li>", id.replace('-', "&#45;"), m.replace('&', "&amp;")),
            _ => m,
        });
    }
    rows.join("\n")
}

#[derive(Default, Debug)]
struct Counts {
    bodies: u64,
    ids: u64,
    leaks: u64,
    lookalikes: u64,
    lost: u64,
    panics: u64,
    withheld: u64,
}

fn leaked(out: &str, id: &str) -> bool {
    let hay = out.to_ascii_lowercase();
    let id = id.to_ascii_lowercase();
    let decoded = crate::alias::known::decoded_view(hay.as_bytes()).unwrap_or_default();
    let unescaped = hay.replace("\\\"", "\"");
    [hay.as_str(), decoded.as_str(), unescaped.as_str()].iter().any(|h| {
        h.match_indices(&id).any(|(at, _)| {
            // A digit-only id inside a longer number is another number.
            let before = h.as_bytes().get(at.wrapping_sub(1)).copied();
            let after = h.as_bytes().get(at + id.len()).copied();
            !(is_num(&id) && (before.is_some_and(|b| b.is_ascii_digit()) || after.is_some_and(|b| b.is_ascii_digit())))
        })
    })
}

fn run_one(tax: &'static Taxonomy, seed: u64, c: &mut Counts) {
    let mut rng = Rng(seed | 1);
    let n = 1 + rng.below(5);
    let ids: Vec<String> = (0..n).map(|i| gen_id(&mut rng, (seed as usize % 50_000) * 8 + i)).collect();
    let mut session = SessionMap::new();
    let first = json_body(&mut rng, &ids);
    let second = text_body(&mut rng, &ids);
    for (body, kind) in [(first, BodyKind::Json), (second, BodyKind::Text)] {
        c.bodies += 1;
        c.ids += ids.len() as u64;
        let lookalikes: Vec<&str> = LOOKALIKES.iter().copied().filter(|l| body.contains(l)).collect();
        let known: Vec<KnownAlias> = session
            .records()
            .iter()
            .flat_map(|r| {
                r.ids.values().map(|(_, v)| KnownAlias {
                    value: v.to_owned(),
                    alias: r.alias.clone(),
                })
            })
            .collect();
        let mut scan = ResponseScan::new(tax);
        let part = match scan.add(body.as_bytes(), kind, tax.kind_for_path("/api/v2/patients")) {
            Ok(p) => p,
            Err(e) => panic!("unreadable generated body ({e}): {body}"),
        };
        let aliases = match session.encode(tax, scan.ids()) {
            Ok(e) => e.aliases,
            Err(e) => {
                c.withheld += 1;
                if std::env::var_os("KEYHOLE_GEN_VERBOSE").is_some() {
                    eprintln!("encode refused ({e}): {body}");
                }
                continue;
            }
        };
        let out = match scan.rewriter(&aliases, &known).and_then(|r| r.rewrite(part, body.as_bytes())) {
            Ok(out) => out,
            Err(e) => {
                c.withheld += 1;
                if std::env::var_os("KEYHOLE_GEN_VERBOSE").is_some() {
                    eprintln!("withheld ({e}): {body}");
                }
                continue;
            }
        };
        let out = String::from_utf8_lossy(&out).into_owned();
        for id in &ids {
            if leaked(&out, id) {
                c.leaks += 1;
                eprintln!("leak of {id}\n in: {body}\nout: {out}");
            }
        }
        for l in lookalikes {
            c.lookalikes += 1;
            if body.matches(l).count() > out.matches(l).count() {
                c.lost += 1;
                eprintln!("look-alike {l} lost\n in: {body}\nout: {out}");
            }
        }
    }
}

#[test]
fn generated_bodies_leak_no_id_and_keep_every_lookalike() {
    let tax: &'static Taxonomy = Box::leak(Box::new(Taxonomy::default()));
    let base = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(20_261_130);
    let mut c = Counts::default();
    let mut i = 0;
    while c.bodies < BODIES {
        let seed = base.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
        i += 1;
        let mut local = Counts::default();
        if catch_unwind(AssertUnwindSafe(|| run_one(tax, seed, &mut local))).is_err() {
            c.panics += 1;
            c.bodies += 2;
            continue;
        }
        c.bodies += local.bodies;
        c.ids += local.ids;
        c.leaks += local.leaks;
        c.lookalikes += local.lookalikes;
        c.lost += local.lost;
        c.withheld += local.withheld;
    }
    println!(
        "generator: bodies={} ids={} leaks={} lookalikes={} lookalikes_lost={} panics={} withheld={}",
        c.bodies, c.ids, c.leaks, c.lookalikes, c.lost, c.panics, c.withheld
    );
    assert_eq!((c.leaks, c.lost, c.panics), (0, 0, 0), "{c:?}");
}

