use super::canonical::{percent_decoded, quoted_printable};
use super::numbers::opens_line;
use super::*;
use crate::alias::{BodyKind, Epoch, KnownAlias, ResponseScan, SessionMap};
use keyhole_testkit::corpus;

fn word(known: &[&str], aliases: &[&str]) -> LastWord<'static> {
    static TAX: std::sync::LazyLock<Taxonomy> = std::sync::LazyLock::new(Taxonomy::default);
    LastWord::new(&TAX, known.iter().copied(), aliases.iter().copied())
}

fn b64(bytes: &[u8], url: bool) -> String {
    let alphabet: &[u8] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Raw ids in every encoding of the red team's classes are found, each
/// for its reason.
#[test]
fn raw_ids_are_found_in_any_encoding() {
    let lw = word(
        &["anna-k-4471", "4829137", "erikamuster"],
        &["patient-k7q2-001"],
    );
    let uuid = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let jwt = format!(
        "eyJhbGciOiJIUzI1NiJ9.{}.c2ln",
        b64(br#"{"sub":"pat-000123","n":"M\xc3\xbcller"}"#, true)
    );
    let cases: Vec<(String, Reason)> = vec![
        (format!("see {uuid}"), Reason::Uuid),
        (format!("see {}", uuid.to_uppercase()), Reason::Uuid),
        (format!("etag \"{}\"", uuid.replace('-', "")), Reason::Uuid),
        (
            format!(r#"{{"x":"{}"}}"#, uuid.replace('-', "\\u002d")),
            Reason::Uuid,
        ),
        ("PAT-000123 in text".into(), Reason::FhirId),
        ("Pat\u{2011}000123".into(), Reason::FhirId),
        ("pat-0001&shy;23".into(), Reason::FhirId),
        (
            "pat-\u{ff10}\u{ff10}\u{ff10}\u{ff11}\u{ff12}\u{ff13}".into(),
            Reason::FhirId,
        ),
        ("<p>pat-<b></b>000123</p>".into(), Reason::FhirId),
        ("<id><![CDATA[pat-000123]]></id>".into(), Reason::FhirId),
        ("pat=2D000123 quoted-printable".into(), Reason::FhirId),
        ("/x?next=pat%252D000123".into(), Reason::FhirId),
        (
            format!(
                "data:application/json;base64,{}",
                b64(br#"{"after":"pat-000123"}"#, false)
            ),
            Reason::FhirId,
        ),
        (
            format!(
                "cursor={}",
                b64(
                    "{\"a\":\"\u{e9}\",\n\"id\":\"pat-000123\"}".as_bytes(),
                    true
                )
            ),
            Reason::FhirId,
        ),
        (jwt, Reason::FhirId),
        ("hex 7061742d303030313233".into(), Reason::FhirId),
        ("subject Patient/482913".into(), Reason::Reference),
        ("?subject=Patient%2F482913".into(), Reason::Reference),
        ("Patient/example".into(), Reason::Reference),
        ("Arztbrief_anna-k-4471_2025.pdf".into(), Reason::KnownId),
        ("ANNA-K-4471".into(), Reason::KnownId),
        ("seen 4829137 today".into(), Reason::KnownId),
        (r#"{"patientId": 482919.0}"#.into(), Reason::IdNumber),
        (r#"{"patient_id":5.5022E4}"#.into(), Reason::IdNumber),
        (r#"{"patientId": "482920    "}"#.into(), Reason::IdNumber),
        (
            r#"{"patientIds": [482921, 482922]}"#.into(),
            Reason::IdNumber,
        ),
        (r#"{"ID": 7}"#.into(), Reason::IdNumber),
    ];
    for (body, reason) in cases {
        let f = lw.check_body(body.as_bytes());
        assert_eq!(f.map(|f| f.reason), Some(reason), "{body}");
    }
    // Headers: names and values, bytes that are not UTF-8 included.
    assert!(lw
        .check_header(format!("x-{uuid}").as_bytes(), b"1")
        .is_some());
    assert!(lw
        .check_header(
            b"content-disposition",
            b"attachment; filename=\"pat-000123.pdf\""
        )
        .is_some());
    assert!(lw.check_header(b"etag", b"W/\"pat-000123-v7\"").is_some());
    assert!(lw
        .check_header(b"x-note", b"M\xfcller pat-000123")
        .is_some());
}

/// What is meant to be there passes: aliases (also in references and
/// URLs), terminology and canonical URLs, codes, dates, numbers under keys
/// that name no record.
#[test]
fn aliases_and_clinical_content_pass() {
    let lw = word(
        &["anna-k-4471", "hl7", "example"],
        &["patient-k7q2-001", "ref-k7q2-002"],
    );
    for body in [
        "patient-k7q2-001 seen; Patient/patient-k7q2-001; /api/v2/patients/patient-k7q2-001?cursor=ref-k7q2-002",
        r#"{"patientId":"patient-k7q2-001","subject":{"reference":"Patient/patient-k7q2-001"}}"#,
        "http://terminology.hl7.org/CodeSystem/v3-ActCode HL7 example",
        "http://hl7.org/fhir/StructureDefinition/us-core-patient ValueSet/c80-doc-typecodes",
        "LOINC 8480-6, ICD-10 E11.9, I10.00, OPS 5-470.11, 2024-03-01T10:00:00Z, COVID-19",
        r#"{"requestId": 1234567, "traceId": 99, "versionId": "3", "linkId": "1.1.2", "sequence": 1, "amountPaid": 120}"#,
        r#"{"count": 482913, "total": 5.5E4, "valueInteger": 13}"#,
        "Müller–Lüdenscheidt, Kranken&shy;haus, Ｔｅｌ ０３０",
        "eyJhbGciOiJIUzI1NiJ9 d41d8cd98f00b204e9800998ecf8427e",
        "Group/Team, and/or, km/h, Encounter/Visit, TG-2025-000311",
        r#"{"idempotencyKey":"01afb03b-b92c-439f-8342-b87728a9ab94","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#,
        "/api/v2/appointments?idempotencyKey=01afb03b-b92c-439f-8342-b87728a9ab94",
    ] {
        assert_eq!(lw.check_body(body.as_bytes()), None, "{body}");
    }
    assert_eq!(
        lw.check_header(b"link", b"</api/v2/patients?cursor=ref-k7q2-002>; rel=next"),
        None
    );
    assert_eq!(
        lw.check_header(b"content-type", b"application/fhir+json; charset=utf-8"),
        None
    );
}

/// Scans, encodes and rewrites `body` in `session` with its known ids; the
/// last word for the result, and the result (`None`: withheld before it).
fn through(
    tax: &'static Taxonomy,
    session: &mut SessionMap,
    body: &[u8],
    kind: BodyKind,
    path: &str,
) -> Option<(LastWord<'static>, Vec<u8>)> {
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
    let part = scan.add(body, kind, tax.kind_for_path(path)).ok()?;
    let aliases = session.encode(tax, scan.ids()).ok()?.aliases;
    let out = scan
        .rewriter(&aliases, &known)
        .ok()?
        .rewrite(part, body)
        .ok()?;
    let values: Vec<&str> = scan
        .ids()
        .iter()
        .map(|i| i.value.as_str())
        .chain(known.iter().map(|k| k.value.as_str()))
        .collect();
    let given: Vec<&str> = aliases
        .iter()
        .map(String::as_str)
        .chain(known.iter().map(|k| k.alias.as_str()))
        .collect();
    Some((LastWord::new(tax, values, given), out))
}

/// The realistic bodies: the catalog's HMS samples and the HMS body
/// generator's readable bodies, rewritten as the filter rewrites them. The
/// last word withholds none of them; it is also timed over them.
#[test]
fn realistic_bodies_are_never_withheld() {
    let tax: &'static Taxonomy = Box::leak(Box::new(Taxonomy::default()));
    let dir = format!(
        "{}/../../shared/catalog/hms_samples",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut samples = 0;
    let mut withheld = Vec::new();
    let mut outputs: Vec<(LastWord<'_>, Vec<u8>)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut session = SessionMap::with_epoch(Epoch::from_seed(7));
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            let body = std::fs::read(&p).unwrap();
            samples += 1;
            let (lw, out) = through(
                tax,
                &mut session,
                &body,
                BodyKind::Json,
                "/api/v2/patients/x",
            )
            .expect("sample rewritten");
            if let Some(f) = lw.check_body(&out) {
                withheld.push(format!("{}: {f:?}", p.display()));
            }
            outputs.push((lw, out));
        }
    }
    let base = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(20_261_130);
    let mut generated = 0;
    for i in 0..5_000u64 {
        let seed = base.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
        let s = corpus::session(seed);
        let mut session = SessionMap::with_epoch(Epoch::from_seed(seed));
        for sample in s.readable {
            let kind = BodyKind::from_content_type(sample.content_type);
            let Some((lw, out)) =
                through(tax, &mut session, &sample.body, kind, "/api/v2/patients")
            else {
                continue;
            };
            generated += 1;
            if let Some(f) = lw.check_body(&out) {
                withheld.push(format!(
                    "{} {f:?}: {}",
                    sample.label,
                    String::from_utf8_lossy(&out)
                ));
            }
            if outputs.len() < 2_000 {
                outputs.push((lw, out));
            }
        }
    }
    println!(
        "last word: samples={samples} generated={generated} withheld={}",
        withheld.len()
    );
    for w in withheld.iter().take(10) {
        eprintln!("withheld: {w}");
    }
    assert!(
        samples >= 8 || !std::path::Path::new(&dir).exists(),
        "{dir}: {samples} samples"
    );
    assert!(generated >= 9_000, "{generated}");
    assert!(
        withheld.is_empty(),
        "{} realistic bodies withheld",
        withheld.len()
    );

    // Cost per MB (printed, never asserted: the box is shared).
    let bytes: usize = outputs.iter().map(|(_, o)| o.len()).sum();
    let rounds = (8 << 20) / bytes.max(1) + 1;
    let start = std::time::Instant::now();
    let mut found = 0;
    for _ in 0..rounds {
        for (lw, out) in &outputs {
            found += usize::from(lw.check_body(out).is_some());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let mb = (bytes * rounds) as f64 / 1e6;
    println!(
        "last word: {mb:.1} MB in {secs:.3} s = {:.1} MB/s ({} bodies, found {found})",
        mb / secs,
        outputs.len()
    );
}

/// Numbers under id-named keys outside JSON: query strings, form bodies,
/// YAML lines, in bodies and headers; counts and dates are no ids.
#[test]
fn numbers_under_id_keys_of_pairs_and_lines_are_found() {
    let lw = word(&[], &["patient-001"]);
    for body in [
        "patientId=482913&note=x",
        "/api/v2/appointments?patientId=482913&page=2",
        r#"{"next":"/fhir/Observation?patient=17&_count=10"}"#,
        "?visit_id=9,10",
        "patient:\n  id: 482913\n",
        "- visitId: \"77\"  # last\n",
        "patientId: '00042'\n",
    ] {
        assert_eq!(
            lw.check_body(body.as_bytes()).map(|f| f.reason),
            Some(Reason::IdNumber),
            "{body}"
        );
    }
    assert_eq!(
        lw.check_header(b"location", b"/api/v2/visits?patientId=482913")
            .map(|f| f.reason),
        Some(Reason::IdNumber)
    );
    for body in [
        "patientId=patient-001&page=2",
        "?page=2&_count=10&since=2025-03-25",
        "count: 2\nversion: 3\n",
        "requestId=12&traceId=99",
        "note: id 5 of 7\n",
        "dose=5&unit=mg",
        "?code=12345&system=http://loinc.org",
    ] {
        assert_eq!(lw.check_body(body.as_bytes()), None, "{body}");
    }
}

#[test]
fn an_event_streams_field_lines_are_framing() {
    let lw = word(&[], &[]);
    let stream = b"id: 7\nretry: 3000\nevent: update\ndata: {\"status\": \"arrived\"}\n\n";
    assert_eq!(lw.check_event_stream(stream), None);
    assert_eq!(
        lw.check_body(b"id: 7\n").map(|f| f.reason),
        Some(Reason::IdNumber),
        "as a document, `id: 7` is a record's id"
    );
    let leak = b"id: 7\ndata: {\"patientId\": 482913}\n\n";
    assert_eq!(
        lw.check_event_stream(leak).map(|f| f.reason),
        Some(Reason::IdNumber)
    );
}

#[test]
fn numbers_under_keys_that_name_a_record_are_found() {
    let lw = word(&[], &[]);
    for body in [
        r#"{"patient": 482913}"#,
        r#"{"encounter":"77"}"#,
        r#"{"visits":[12, 13]}"#,
        "?patient=17",
    ] {
        assert_eq!(
            lw.check_body(body.as_bytes()).map(|f| f.reason),
            Some(Reason::IdNumber),
            "{body}"
        );
    }
    for body in [
        r#"{"schedule": "38341003"}"#,
        r#"{"encounter":"ambulatory"}"#,
        r#"{"count": 12}"#,
    ] {
        assert_eq!(lw.check_body(body.as_bytes()), None, "{body}");
    }
}

/// The line test as it was written first: the line back to its start, then
/// its head. [`opens_line`] must answer as it does.
fn opens_line_by_reading_the_line(t: &[u8], start: usize) -> bool {
    let line = t.get(..start).unwrap_or_default();
    let head = line
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(line, |n| line.get(n + 1..).unwrap_or_default());
    head.iter().all(|b| matches!(b, b' ' | b'\t' | b'-'))
}

/// The decoders as they were written first, copying every text.
fn percent_decoded_copying(t: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut any = false;
    let mut i = 0;
    while let Some(&b) = t.get(i) {
        let v = t
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if let (b'%', Some(v)) = (b, v) {
            out.push(v);
            i += 3;
            any = true;
            continue;
        }
        out.push(b);
        i += 1;
    }
    any.then_some(out)
}

fn quoted_printable_copying(t: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut any = false;
    let mut i = 0;
    while let Some(&b) = t.get(i) {
        if b == b'=' {
            if t.get(i + 1..i + 3) == Some(b"\r\n") {
                (i, any) = (i + 3, true);
                continue;
            }
            if t.get(i + 1) == Some(&b'\n') {
                (i, any) = (i + 2, true);
                continue;
            }
            let h = t.get(i + 1..i + 3).unwrap_or_default();
            if h.len() == 2
                && h.iter()
                    .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c))
            {
                out.push(u8::from_str_radix(std::str::from_utf8(h).unwrap(), 16).unwrap());
                (i, any) = (i + 3, true);
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    any.then_some(out)
}

/// A YAML-style id line is found wherever it stands in a long body, after
/// many colons on one line and many lines; a key that does not open its
/// line is no such line.
#[test]
fn id_lines_are_found_after_long_lines() {
    let lw = word(&[], &[]);
    let long = r#"{"a": "b", "c": "d"}"#.repeat(5_000);
    for tail in [
        "\npatientId: 482913\n",
        "\n  - visitId: \"77\"\n",
        "\n\t-\tid: 9",
    ] {
        let body = format!("{long}{tail}");
        assert_eq!(
            lw.check_body(body.as_bytes()).map(|f| f.reason),
            Some(Reason::IdNumber),
            "{tail:?}"
        );
    }
    for tail in ["\nnote patientId: 482913\n", " patientId: 482913"] {
        let body = format!("{long}{tail}");
        assert_eq!(lw.check_body(body.as_bytes()), None, "{tail:?}");
    }
}

/// Known ids that share their first run (every FHIR id of one prefix), given
/// twice and in any letter case, are each found.
#[test]
fn known_ids_sharing_a_first_run_are_each_found() {
    let ids: Vec<String> = (0..300).map(|i| format!("anna-k-{:04}", i * 7)).collect();
    let mut known: Vec<&str> = ids.iter().map(String::as_str).collect();
    known.extend(ids.iter().take(50).map(String::as_str));
    let lw = word(&known, &["patient-k7q2-001"]);
    for id in &ids {
        for v in [id.clone(), id.to_uppercase()] {
            assert_eq!(
                lw.check_body(format!("file {v}.pdf").as_bytes())
                    .map(|f| f.reason),
                Some(Reason::KnownId),
                "{v}"
            );
        }
    }
    assert_eq!(
        lw.check_body(b"file anna-k-0001.pdf"),
        None,
        "not a known id"
    );
}

proptest::proptest! {
    /// The line test answers as reading the whole line does, at every
    /// position of texts of indentation, list marks, newlines and keys.
    #[test]
    fn opens_line_reads_as_the_whole_line(t in "[ \t\n:a-c-]{0,40}") {
        let t = t.as_bytes();
        for start in 0..=t.len() + 1 {
            proptest::prop_assert_eq!(opens_line(t, start), opens_line_by_reading_the_line(t, start), "{:?} at {}", t, start);
        }
    }

    /// The decoders that copy nothing without a `%` or `=` decode as the
    /// copying ones.
    #[test]
    fn decoders_skip_only_what_holds_no_escape(t in "([a-z0-9 ]|%[0-9A-Fa-fg]{0,2}|=[0-9A-Fa-f\r\n]{0,2}){0,20}") {
        let t = t.as_bytes();
        proptest::prop_assert_eq!(percent_decoded(t), percent_decoded_copying(t));
        proptest::prop_assert_eq!(quoted_printable(t), quoted_printable_copying(t));
    }

    /// The key filter never turns a key away, whatever its letter case.
    #[test]
    fn the_key_filter_holds_every_key(keys in proptest::collection::vec("[a-z0-9]{1,6}", 1..30), upper in proptest::bool::ANY) {
        let keys: Vec<Vec<u8>> = keys.into_iter().map(String::into_bytes).collect();
        let filter = KeyFilter::of(&keys);
        for key in &keys {
            let probe = if upper { key.to_ascii_uppercase() } else { key.clone() };
            proptest::prop_assert!(filter.may_hold(&probe), "{:?}", probe);
        }
    }

    /// Known ids are found in a text wherever they stand, as many as are
    /// given, duplicated or not.
    #[test]
    fn known_ids_are_found_in_text(ids in proptest::collection::vec("[a-z]{2,5}-[0-9]{3,6}", 1..40), pick in proptest::sample::select(vec![0usize, 1, 7, 39]), dup in proptest::bool::ANY) {
        let mut known: Vec<&str> = ids.iter().map(String::as_str).collect();
        if dup {
            known.extend(ids.iter().map(String::as_str));
        }
        let lw = word(&known, &[]);
        let id = &ids[pick % ids.len()];
        let found = lw.check_body(format!("note ({}) end", id.to_uppercase()).as_bytes());
        proptest::prop_assert!(found.is_some(), "{} not found", id);
    }
}

/// A raw id in characters a reader takes for its ASCII: digits of other
/// scripts, compatibility forms (mathematical, superscript, circled),
/// HTML5's named letters, look-alike letters of other scripts. Each is
/// found; before the last word read characters by Unicode's own data, all
/// of them went through.
#[test]
fn raw_ids_are_found_in_the_characters_a_reader_takes_for_them() {
    let lw = word(&["anna-k-4471", "4829137"], &["patient-k7q2-001"]);
    for (body, reason) in [
        ("pat-\u{1d7ce}\u{1d7ce}\u{1d7ce}\u{1d7cf}\u{1d7d0}\u{1d7d1}", Reason::FhirId),
        ("pat-\u{2070}\u{2070}\u{2070}\u{b9}\u{b2}\u{b3}", Reason::FhirId),
        ("pat-\u{2080}\u{2080}\u{2080}\u{2081}\u{2082}\u{2083}", Reason::FhirId),
        ("pat-\u{660}\u{660}\u{660}\u{661}\u{662}\u{663}", Reason::FhirId),
        ("pat-\u{6f0}\u{6f0}\u{6f0}\u{6f1}\u{6f2}\u{6f3}", Reason::FhirId),
        ("pat-\u{966}\u{966}\u{966}\u{967}\u{968}\u{969}", Reason::FhirId),
        ("\u{1d429}\u{1d41a}\u{1d42d}-000123", Reason::FhirId),
        ("\u{24df}\u{24d0}\u{24e3}-000123", Reason::FhirId),
        ("&popf;&aopf;&topf;-000123", Reason::FhirId),
        ("&Pscr;&afr;&Topf;-000123", Reason::FhirId),
        ("\u{440}at-000123", Reason::FhirId),
        ("p\u{430}t-000123", Reason::FhirId),
        ("\u{420}\u{391}\u{54}-000123", Reason::FhirId),
        ("seen \u{1d7d2}\u{1d7d6}\u{1d7d0}\u{1d7d7}\u{1d7cf}\u{1d7d1}\u{1d7d5} today", Reason::KnownId),
        ("anna\u{2011}k\u{2011}\u{2463}\u{2463}\u{2466}\u{2460}", Reason::KnownId),
        ("\u{e1}nn\u{e0}-k-4471", Reason::KnownId),
        ("{\"patientId\": \"\u{664}\u{668}\u{662}\u{669}\u{661}\u{663}\"}", Reason::IdNumber),
        (r#"{"x": "pat-\ud835\udfce00123"}"#, Reason::FhirId),
        ("pat-&#x1D7CE;00123", Reason::FhirId),
        (
            "see \u{e0070}\u{e0061}\u{e0074}\u{e002d}\u{e0030}\u{e0030}\u{e0030}\u{e0031}\u{e0032}\u{e0033}",
            Reason::FhirId,
        ),
    ] {
        let f = lw.check_body(body.as_bytes());
        assert_eq!(f.map(|f| f.reason), Some(reason), "{body}");
    }
}

/// Text in other scripts and with compatibility characters, where no id is
/// meant, passes: the reading above folds only toward what is there.
#[test]
fn text_in_other_scripts_passes() {
    let lw = word(&["anna-k-4471", "hl7"], &["patient-k7q2-001"]);
    for body in [
        "Ромашова Анна Петровна, 3 таблетки по 500 мг, давление 120/80",
        "Ελένη Παπαδοπούλου, θερμοκρασία 38,5 °C, Ο2 96 %",
        "山田 太郎 様、血圧 １２０/８０、次回は３月１日",
        "محمد ٤٥ سنة، ضغط ١٢٠/٨٠",
        "Dosis ½ Tablette, Fläche 1,8 m², 5 µg/kg, Stadium Ⅲ, ﬁbrose, ℃",
        "Müller–Lüdenscheidt, Ærø, Œdème, naïve, façade, São Paulo",
        "&frac12; &sup2; &micro;g &Popf; &alpha;-Blocker",
        "patient-k7q2-001 (Ромашова), Patient/patient-k7q2-001",
    ] {
        assert_eq!(lw.check_body(body.as_bytes()), None, "{body}");
    }
}
