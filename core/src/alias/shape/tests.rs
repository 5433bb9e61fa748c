use super::words::{byte_mask, Marks};
use super::*;

fn hits(text: &str) -> Vec<(String, &'static str)> {
    let t = Box::leak(Box::new(Taxonomy::default()));
    let mut out = Vec::new();
    find_in_text(t, text.as_bytes(), &mut out);
    out.iter()
        .map(|h| {
            let p = match h.pattern {
                Pattern::Uuid => "uuid",
                Pattern::Reference(_) => "ref",
                Pattern::FhirId(_) => "fhir",
                Pattern::Segment(_) => "seg",
                Pattern::Query(_) => "query",
                Pattern::AliasShaped(_) => "alias",
                Pattern::Cursor => "cursor",
            };
            (text[h.range.clone()].to_owned(), p)
        })
        .collect()
}

#[test]
fn cursors_in_text_are_found_whole() {
    // {"after":"pat-000123"}, base64url and standard with padding.
    let c = "eyJhZnRlciI6InBhdC0wMDAxMjMifQ";
    let padded = "eyJhZnRlciI6InBhdC0wMDAxMjMifQ==";
    assert_eq!(
        hits(&format!("/api/v2/patients?cursor={c}&limit=20")),
        [(c.to_owned(), "cursor")]
    );
    assert_eq!(
        hits(&format!("next page: {padded}.")),
        [(padded.to_owned(), "cursor")]
    );
    // After a `/` of its run: the path before it is not part of it.
    assert_eq!(hits(&format!("/pages/{c}")), [(c.to_owned(), "cursor")]);
    // Not cursors: long words, a path, an alias, ids of other shapes.
    for text in [
        "Oberschenkelhalsfraktur links, Verlaufskontrolle",
        "/api/v2/patients/visits/appointments",
        "patient-k7q2-001 and medicationrequest-x9m3-042",
        "QmVmdW5kIHVuYXVmZsOkbGxpZw", // decodes to non-ASCII text, no digit
    ] {
        assert!(hits(text).iter().all(|(_, p)| *p != "cursor"), "{text}");
    }
    assert_eq!(
        hits("ref 9f1c2e7a4b3d4e5f8a9b0c1d2e3f4a5b"),
        [("9f1c2e7a4b3d4e5f8a9b0c1d2e3f4a5b".to_owned(), "uuid")]
    );
}

#[test]
fn classify_routes_by_shape() {
    assert_eq!(classify("039b70b8-92f7-44b7-9c91-4e3f0e900c71"), Form::Uuid);
    assert_eq!(classify("039B70B8-92F7-44B7-9C91-4E3F0E900C71"), Form::Uuid);
    assert_eq!(classify("pat-000123"), Form::Fhir);
    assert_eq!(classify("oo-5521"), Form::Fhir);
    assert_eq!(classify("clinic-berlin-mitte"), Form::Slug);
    assert_eq!(classify("loc-im-bm-2-14"), Form::Slug);
    assert_eq!(classify("039b70b8-92f7-44b7-9c91-4e3f0e900c7"), Form::Slug);
}

#[test]
fn finds_ids_in_prose_and_urls() {
    let text =
        "Slot slot-im-bm-20250325-1100 for practitioner prac-00042 is booked by appointment \
                    fa129b43-cd9d-43cf-b923-a08771beb1b9 (Appointment/appt-0009815).";
    assert_eq!(
        hits(text),
        vec![
            ("prac-00042".into(), "fhir"),
            ("fa129b43-cd9d-43cf-b923-a08771beb1b9".into(), "uuid"),
            ("appt-0009815".into(), "ref"),
        ]
    );
    let url = "https://fhir.example/fhir/R4/Appointment/appt-0009812/_history/1";
    assert_eq!(hits(url), vec![("appt-0009812".into(), "ref")]);
    let glued = "x039b70b8-92f7-44b7-9c91-4e3f0e900c71y and Task/160.000.100.000.017.52.";
    assert_eq!(
        hits(glued),
        vec![
            ("039b70b8-92f7-44b7-9c91-4e3f0e900c71".into(), "uuid"),
            ("160.000.100.000.017.52".into(), "ref")
        ]
    );
}

#[test]
fn leaves_near_misses_alone() {
    for text in [
        "ext-prac-20981",
        "pat-000123x",
        "patient-portal",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "2025-03-25T10:30:00+01:00",
        "W/\"1\"",
    ] {
        assert_eq!(hits(text), vec![], "{text}");
    }
}

#[test]
fn alias_shaped_values_are_ids() {
    assert_eq!(
        hits("Bett in ward-101, see patient-k7q2-001 and patient-appt-001; ward-7 stays"),
        vec![
            ("ward-101".into(), "alias"),
            ("patient-k7q2-001".into(), "alias"),
            ("patient-appt-001".into(), "alias"),
        ]
    );
    // Not the grammar: too few digits, a word after, glued to a word.
    assert_eq!(hits("ward-7 ward-101a xward-101 clinic-wide"), vec![]);
}

#[test]
fn byte_classes_are_what_they_say() {
    for b in 0..=255u8 {
        let alnum = b.is_ascii_alphanumeric();
        assert_eq!(is(b, ALNUM), alnum, "{b}");
        assert_eq!(is(b, TOKEN), alnum || matches!(b, b'-' | b'_'), "{b}");
        assert_eq!(is(b, FHIR_ID), alnum || matches!(b, b'-' | b'.'), "{b}");
        assert_eq!(
            is(b, SEGMENT_ID),
            alnum || matches!(b, b'-' | b'.' | b'_' | b'~'),
            "{b}"
        );
        assert_eq!(
            is(b, ALIAS),
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-',
            "{b}"
        );
        assert_eq!(is(b, HEX), b.is_ascii_hexdigit(), "{b}");
        assert_eq!(
            is(b, BASE64),
            alnum || matches!(b, b'+' | b'/' | b'-' | b'_'),
            "{b}"
        );
    }
}

#[test]
fn byte_masks_agree_with_comparing_each_byte() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    // `-`/`/` differ in one bit (one comparison), `%`/`&` in two.
    let alphabet = [b'-', b'/', b'%', b'&', 0, 0xff, b'.', 0x2d ^ 0x80];
    for _ in 0..20_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let bytes: [u8; 8] = std::array::from_fn(|i| {
            let pick = (state >> (i * 3)) & 7;
            alphabet[pick as usize]
        });
        for (x, y) in [(b'-', b'/'), (b'%', b'&')] {
            let want = bytes
                .iter()
                .enumerate()
                .fold(0u64, |m, (i, b)| m | u64::from(*b == x || *b == y) << i);
            assert_eq!(
                byte_mask(u64::from_le_bytes(bytes), x, y),
                want,
                "{bytes:?}"
            );
        }
    }
    for len in [0, 1, 7, 8, 53, 63, 64, 65, 127, 128, 129, 300] {
        let text: Vec<u8> = (0..len)
            .map(|i| [b'a', b'-', b'/', b'0', b'x', b'x', b'-'][(i * i + 3 * i) % 7])
            .collect();
        let want: Vec<usize> = (0..text.len())
            .filter(|i| matches!(text[*i], b'-' | b'/'))
            .collect();
        assert_eq!(
            Marks::new(&text, b'-', b'/').collect::<Vec<_>>(),
            want,
            "{len}"
        );
    }
}

#[test]
fn kind_before_reads_the_context() {
    let t = Taxonomy::default();
    let name = |text: &str| {
        let start = text.find("039b").unwrap();
        kind_before(&t, text.as_bytes(), start).map(|k| t.kind_name(k).to_owned())
    };
    assert_eq!(name("/api/v2/patients/039b").as_deref(), Some("patient"));
    assert_eq!(
        name("/api/v2/x?status=a&groupId=039b").as_deref(),
        Some("task-group")
    );
    assert_eq!(name("Patient/039b").as_deref(), Some("patient"));
    assert_eq!(name("?idempotencyKey=039b"), None);
    assert_eq!(name("039b"), None);
}

#[test]
fn query_values_under_id_and_kind_keys_are_ids() {
    let q = |t: &str| {
        hits(t)
            .into_iter()
            .filter(|(_, p)| *p == "query")
            .map(|(v, _)| v)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        q("/api/v2/appointments?patientId=482913&page=2"),
        ["482913"]
    );
    assert_eq!(q("next: /fhir/Observation?patient=17&_count=10"), ["17"]);
    assert_eq!(q("patient_id=88&visitId=9,10"), ["88", "9", "10"]);
    assert_eq!(q("?id=7;status=booked"), ["7"]);
    // Not ids: counts, pages, dates, keys naming no id, values with no digit.
    assert!(q("?page=2&_count=10&since=2025-03-25&q=anna").is_empty());
    assert!(q("?patientId=anna").is_empty());
    assert!(q("?requestId=12&traceId=99").is_empty());
    assert_eq!(q("a patientId=12 in prose"), ["12"]);
    assert!(
        q("a.b=patientId=5").is_empty(),
        "a key opens a query, a word or the text"
    );
    assert!(q("dose=5mg&patient ok").is_empty());
    // A value another pattern found is not found twice.
    assert_eq!(hits("?patientId=pat-000123").len(), 1);
}
