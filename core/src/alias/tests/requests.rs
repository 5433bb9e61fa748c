//! The request generator, as the model would write requests: a FHIR bundle
//! is aliased first (the same numeric id under several resource types, a
//! patient with a KVNR under its `identifier.system`), then requests are
//! drawn from what the model saw — aliases in paths, query references,
//! `identifier=<system>|<value>` searches, JSON and form-encoded bodies, in
//! the place of their own kind or of another — and some carry a raw id from
//! the bundle instead. The ground truth decides each request:
//!
//! - a raw id anywhere: counted (the filter refuses it, HMS sees nothing);
//! - else an alias in another kind's place: refused as the wrong kind;
//! - else the request reaches HMS with exactly the records the aliases were
//!   minted for, each under its own resource type — never another record.

use super::*;

/// A record of the bundle: its FHIR type (`None`: the KVNR, an identifier
/// value) and its id.
#[derive(Debug, Clone)]
struct Record {
    ty: Option<&'static str>,
    id: String,
}

const TYPES: [&str; 5] = [
    "Patient",
    "Encounter",
    "Observation",
    "Practitioner",
    "Task",
];
const KVID: &str = "http://fhir.de/sid/gkv/kvid-10";

/// splitmix64: the same seed draws the same session everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The bundle's records: a numeric id shared by two to four types, one
/// record per type with an id of the type's own shape (UUID or prefixed),
/// and the patient's KVNR.
fn records(rng: &mut Rng) -> Vec<Record> {
    let shared = (1 + rng.below(40)).to_string();
    let mut out = Vec::new();
    for ty in TYPES.iter().take(2 + rng.below(4)) {
        out.push(Record {
            ty: Some(ty),
            id: shared.clone(),
        });
    }
    let prefix = |ty: &str| match ty {
        "Patient" => "pat",
        "Encounter" => "enc",
        "Observation" => "obs",
        "Practitioner" => "prac",
        _ => "task",
    };
    for ty in TYPES {
        let id = if rng.below(2) == 0 {
            format!("{}-{:06}", prefix(ty), 100 + rng.below(900_000))
        } else {
            let (a, b) = (rng.next(), rng.next());
            format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                a >> 32,
                (a >> 16) & 0xffff,
                a & 0xfff,
                b >> 52,
                b & 0xffff_ffff_ffff
            )
        };
        out.push(Record { ty: Some(ty), id });
    }
    out.push(Record {
        ty: None,
        id: format!("A{:09}", rng.below(1_000_000_000)),
    });
    out
}

/// The bundle HMS answers with, every record in its resource's `id`, the
/// KVNR under its system, references to the first patient.
fn bundle(records: &[Record]) -> String {
    let kvnr = records
        .iter()
        .find(|r| r.ty.is_none())
        .map(|r| r.id.as_str());
    let patient = records
        .iter()
        .find(|r| r.ty == Some("Patient"))
        .map(|r| r.id.as_str())
        .unwrap();
    let entries: Vec<String> = records
        .iter()
        .filter_map(|r| {
            let ty = r.ty?;
            let extra = match ty {
                "Patient" => format!(
                    r#","identifier":[{{"system":"{KVID}","value":"{}"}}],"name":[{{"family":"Kühn"}}]"#,
                    kvnr.unwrap()
                ),
                _ => format!(r#","subject":{{"reference":"Patient/{patient}"}}"#),
            };
            Some(format!(
                r#"{{"resource":{{"resourceType":"{ty}","id":"{}"{extra}}}}}"#,
                r.id
            ))
        })
        .collect();
    format!(
        r#"{{"resourceType":"Bundle","type":"searchset","entry":[{}]}}"#,
        entries.join(",")
    )
}

/// The aliases the model saw, one per record, read from the aliased bundle.
fn aliases_seen(out: &Value, records: &[Record]) -> Vec<String> {
    let mut at = 0;
    records
        .iter()
        .map(|r| match r.ty {
            Some(_) => {
                let a = find(out, &format!("/entry/{at}/resource/id")).to_owned();
                at += 1;
                a
            }
            None => find(out, "/entry/0/resource/identifier/0/value").to_owned(),
        })
        .collect()
}

/// Where a token stands in a request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// `/fhir/{T}/@`
    Path,
    /// `subject={T}/@` (the slash percent-encoded or not)
    QueryRef { encoded: bool },
    /// `identifier=<kvid>|@`
    Identifier,
    /// `{"subject":{"reference":"{T}/@"}}`
    JsonRef,
    /// `subject={T}%2F@` in a form-encoded body
    FormRef,
}

/// One token of a request: which record, written in which type's place,
/// as its alias or as its raw id.
#[derive(Debug, Clone)]
struct Slot {
    record: usize,
    place: Place,
    ty: &'static str,
    raw: bool,
}

/// What the request must come to.
#[derive(Debug, PartialEq)]
enum Expect {
    RawCounted,
    /// Refused as an alias this session never issued: a raw id of an
    /// alias's shape (`task-177493`) never reaches HMS either.
    UnknownAlias(String),
    WrongKind(Vec<String>),
    Decoded(String, Option<String>),
}

struct Request {
    path: String,
    /// The raw ids the request carries (ground truth).
    raw_tokens: Vec<String>,
    body: Option<(String, BodyKind)>,
    expect: Expect,
}

fn draw_request(rng: &mut Rng, records: &[Record], aliases: &[String]) -> Request {
    let kvnr = records.len() - 1;
    let mut slots = Vec::new();
    for i in 0..1 + rng.below(4) {
        let record = rng.below(records.len());
        let place = if record == kvnr {
            Place::Identifier
        } else {
            match rng.below(4) {
                0 if i == 0 => Place::Path,
                0 | 1 => Place::QueryRef {
                    encoded: rng.below(2) == 0,
                },
                2 => Place::JsonRef,
                _ => Place::FormRef,
            }
        };
        // Its own type three times in four, else another's.
        let own = records.get(record).and_then(|r| r.ty).unwrap_or("Patient");
        let ty = if rng.below(4) == 0 {
            TYPES[rng.below(TYPES.len())]
        } else {
            own
        };
        slots.push(Slot {
            record,
            place,
            ty,
            raw: rng.below(6) == 0,
        });
    }
    // One body per request: the first body slot decides JSON or form.
    let body_kind = slots.iter().find_map(|s| match s.place {
        Place::JsonRef => Some(BodyKind::Json),
        Place::FormRef => Some(BodyKind::Form),
        _ => None,
    });
    let (mut path, mut query, mut json, mut form) = (
        "/fhir/Observation".to_owned(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let (mut want_path, mut want_query, mut want_json, mut want_form) =
        (path.clone(), Vec::new(), Vec::new(), Vec::new());
    let mut wrong = Vec::new();
    let mut raw_tokens = Vec::new();
    for s in &slots {
        let r = &records[s.record];
        let token = if s.raw { &r.id } else { &aliases[s.record] };
        if s.raw {
            raw_tokens.push(r.id.clone());
        }
        let fits = match s.place {
            Place::Identifier => true,
            _ => r.ty == Some(s.ty),
        };
        if !s.raw && !fits {
            wrong.push(aliases[s.record].clone());
        }
        let ty = s.ty;
        match s.place {
            Place::Path => {
                path = format!("/fhir/{ty}/{token}");
                want_path = format!("/fhir/{ty}/{}", r.id);
            }
            Place::QueryRef { encoded } => {
                let slash = if encoded { "%2F" } else { "/" };
                query.push(format!("subject={ty}{slash}{token}"));
                want_query.push(format!("subject={ty}{slash}{}", r.id));
            }
            Place::Identifier => {
                query.push(format!("identifier={KVID}|{token}"));
                want_query.push(format!("identifier={KVID}|{}", r.id));
            }
            Place::JsonRef | Place::FormRef => match body_kind {
                Some(BodyKind::Form) => {
                    form.push(format!("subject={ty}%2F{token}"));
                    want_form.push(format!("subject={ty}%2F{}", r.id));
                }
                _ => {
                    json.push(format!(r#"{{"reference":"{ty}/{token}"}}"#));
                    want_json.push(format!(r#"{{"reference":"{ty}/{}"}}"#, r.id));
                }
            },
        }
    }
    let join = |p: String, q: &[String]| {
        if q.is_empty() {
            p
        } else {
            format!("{p}?{}", q.join("&"))
        }
    };
    let body = |json: &[String], form: &[String]| match body_kind {
        Some(BodyKind::Form) => Some((format!("note=x&{}", form.join("&")), BodyKind::Form)),
        Some(_) => Some((
            format!(r#"{{"resourceType":"List","entry":[{}]}}"#, json.join(",")),
            BodyKind::Json,
        )),
        None => None,
    };
    let expect = if !raw_tokens.is_empty() {
        Expect::RawCounted
    } else if !wrong.is_empty() {
        Expect::WrongKind(wrong)
    } else {
        Expect::Decoded(
            join(want_path, &want_query),
            body(&want_json, &want_form).map(|(b, _)| b),
        )
    };
    Request {
        path: join(path, &query),
        raw_tokens,
        body: body(&json, &form),
        expect,
    }
}

/// What keyhole does with the request: counts raw ids (refused), or decodes.
fn run(tax: &Taxonomy, session: &SessionMap, req: &Request) -> Expect {
    let body = req.body.as_ref().map(|(b, k)| (b.as_bytes(), *k));
    let scan = RequestScan::new(tax, &req.path, body).unwrap();
    if scan.raw_ids().total() > 0 {
        return Expect::RawCounted;
    }
    let decoded: Vec<Option<DecodedIds>> = scan
        .aliases()
        .iter()
        .map(|a| {
            session.decode(tax, a).map(|d| DecodedIds {
                alias: d.record.alias.clone(),
                kind: d.record.kind.clone(),
                ids: d.record.ids.clone(),
            })
        })
        .collect();
    match scan.rewrite(tax, &req.path, body.map(|(b, _)| b), &decoded) {
        Ok((p, b)) => Expect::Decoded(p, b.map(|b| String::from_utf8(b).unwrap())),
        Err(RequestError::WrongKind { alias, .. }) => Expect::WrongKind(vec![alias]),
        Err(RequestError::UnknownAlias { alias }) => Expect::UnknownAlias(alias),
        Err(e) => panic!("{e:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Every drawn request comes to what its ground truth says: 0 raw ids
    /// uncounted, 0 aliases decoded in another kind's place, 0 records
    /// other than the one an alias was minted for.
    #[test]
    fn generated_requests_reach_hms_with_their_own_records_only(seed in any::<u64>()) {
        let tax = example_taxonomy();
        let mut rng = Rng(seed);
        let records = records(&mut rng);
        let mut session = SessionMap::new();
        let out: Value = serde_json::from_slice(&process(
            &tax,
            &mut session,
            "/fhir/Patient?_revinclude=*",
            bundle(&records).as_bytes(),
        ))
        .unwrap();
        let aliases = aliases_seen(&out, &records);
        // Two records, two aliases: the shared number under each type too.
        let distinct: BTreeSet<&String> = aliases.iter().collect();
        prop_assert_eq!(distinct.len(), aliases.len(), "{:?} {:?}", records, aliases);
        for (r, a) in records.iter().zip(&aliases) {
            prop_assert_ne!(&r.id, a, "raw id left in the bundle");
        }
        for _ in 0..16 {
            let req = draw_request(&mut rng, &records, &aliases);
            let got = run(&tax, &session, &req);
            match (&req.expect, &got) {
                // A raw id of an alias's shape is refused as unknown.
                (Expect::RawCounted, Expect::UnknownAlias(named)) => prop_assert!(
                    req.raw_tokens.contains(named),
                    "{} {:?}: refused naming {:?}, not a raw id of it", req.path, req.body, named
                ),
                (Expect::WrongKind(any), Expect::WrongKind(named)) => prop_assert!(
                    named.iter().all(|n| any.contains(n)),
                    "{} {:?}: refused naming {:?}, not one of {:?}", req.path, req.body, named, any
                ),
                (want, got) => prop_assert_eq!(
                    want, got, "{} {:?} ({:?}, aliases {:?})", req.path, req.body, records, aliases
                ),
            }
        }
    }
}
