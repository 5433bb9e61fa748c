use super::*;

const LIMIT: usize = 1 << 20;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn utf16le(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

fn utf16be(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
        }
        for _ in chunk.len()..3 {
            out.push('=');
        }
    }
    out
}

#[test]
fn plain_bodies_are_read_as_they_are() {
    for ct in [
        None,
        Some("application/json"),
        Some("text/plain; charset=utf-8"),
        Some("text/plain; charset=ISO-8859-1"),
        Some("text/csv; charset=windows-1252"),
    ] {
        let v = view(ct, None, br#"{"patientId":"patient-k7q2-001"}"#, LIMIT).unwrap();
        assert_eq!(
            v,
            BodyView {
                as_is: true,
                hidden: Vec::new()
            },
            "{ct:?}"
        );
    }
    assert!(view(None, Some("identity"), b"x", LIMIT).unwrap().as_is);
}

#[test]
fn a_content_coding_is_undone_and_the_text_is_hidden() {
    let text = r#"{"patientId":"039b70b8-92f7-44b7-9c91-4e3f0e900c71"}"#;
    let v = view(
        Some("application/json"),
        Some("gzip"),
        &gzip(text.as_bytes()),
        LIMIT,
    )
    .unwrap();
    assert_eq!(
        v,
        BodyView {
            as_is: false,
            hidden: vec![text.to_owned()]
        }
    );
    // UTF-16 under gzip: both undone.
    let v = view(
        Some("text/plain; charset=utf-16le"),
        Some("gzip"),
        &gzip(&utf16le("für patient-k7q2-001")),
        LIMIT,
    )
    .unwrap();
    assert_eq!(v.hidden, ["für patient-k7q2-001"]);
    assert!(matches!(
        view(None, Some("compress"), b"x", LIMIT),
        Err(BodyError::Coding(CodingError::Unsupported(_)))
    ));
    assert!(matches!(
        view(None, Some("gzip"), b"not gzip", LIMIT),
        Err(BodyError::Coding(CodingError::Corrupt(_)))
    ));
    let big = gzip(&vec![b'a'; 10_000]);
    assert!(matches!(
        view(None, Some("gzip"), &big, 1000),
        Err(BodyError::Coding(CodingError::TooLarge { .. }))
    ));
}

#[test]
fn utf16_is_read_as_text_and_other_charsets_are_refused() {
    let text = "Befund für 039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    for (ct, bytes) in [
        ("text/plain; charset=utf-16le", utf16le(text)),
        ("text/plain; charset=UTF-16BE", utf16be(text)),
        (
            "text/plain; charset=\"utf-16\"",
            [&[0xfe, 0xff][..], &utf16be(text)].concat(),
        ),
        (
            "text/plain; charset=utf-16",
            [&[0xff, 0xfe][..], &utf16le(text)].concat(),
        ),
        // A byte order mark alone says UTF-16.
        ("text/plain", [&[0xff, 0xfe][..], &utf16le(text)].concat()),
    ] {
        let v = view(Some(ct), None, &bytes, LIMIT).unwrap();
        assert_eq!(
            v,
            BodyView {
                as_is: false,
                hidden: vec![text.to_owned()]
            },
            "{ct}"
        );
    }
    for ct in [
        "text/plain; charset=utf-32",
        "text/plain; charset=shift_jis",
        "text/plain; charset=ebcdic-cp-us",
    ] {
        assert!(
            matches!(
                view(Some(ct), None, b"x", LIMIT),
                Err(BodyError::Charset(_))
            ),
            "{ct}"
        );
    }
}

#[test]
fn multipart_parts_under_a_transfer_encoding_are_decoded() {
    let uuid = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let body = format!(
        "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nplain patient-k7q2-001\r\n\
         --XyZ\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n\
         --XyZ\r\nContent-Transfer-Encoding: Quoted-Printable\r\n\r\nid=3D{}=\r\n-v7 f=C3=BCr\r\n\
         --XyZ--\r\nepilogue",
        b64(format!("Befund {uuid}").as_bytes()),
        &uuid[..20],
    );
    let v = view(
        Some("multipart/form-data; boundary=XyZ"),
        None,
        body.as_bytes(),
        LIMIT,
    )
    .unwrap();
    assert!(v.as_is, "the plain part is in the bytes as sent");
    assert_eq!(
        v.hidden,
        [
            format!("Befund {uuid}"),
            format!("id={}-v7 für", &uuid[..20])
        ]
    );
    // A base64 part holding UTF-16.
    let body = format!(
        "--b\r\nContent-Type: text/plain; charset=utf-16le\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n--b--\r\n",
        b64(&utf16le(uuid))
    );
    assert_eq!(
        view(
            Some("multipart/mixed; boundary=\"b\""),
            None,
            body.as_bytes(),
            LIMIT
        )
        .unwrap()
        .hidden,
        [uuid]
    );
    for (ct, body, part) in [
        ("multipart/form-data", "--b\r\n\r\nx\r\n--b--", 0),
        (
            "multipart/form-data; boundary=b",
            "--b\r\nContent-Transfer-Encoding: x-uuencode\r\n\r\nx\r\n--b--",
            1,
        ),
        (
            "multipart/form-data; boundary=b",
            "--b\r\nContent-Transfer-Encoding: base64\r\n\r\n%%%\r\n--b--",
            1,
        ),
        (
            "multipart/form-data; boundary=b",
            "--b\r\n\r\nok\r\n--b\r\nContent-Encoding: gzip\r\n\r\nx\r\n--b--",
            2,
        ),
    ] {
        match view(Some(ct), None, body.as_bytes(), LIMIT) {
            Err(BodyError::Part { part: p, .. }) => assert_eq!(p, part, "{body:?}"),
            other => panic!("{body:?}: {other:?}"),
        }
    }
}

#[test]
fn a_cut_body_keeps_its_last_part_and_nesting_is_bounded() {
    let body = format!(
        "--b\r\nContent-Transfer-Encoding: base64\r\n\r\n{}",
        b64(b"cut 039b70b8")
    );
    assert_eq!(
        view(
            Some("multipart/mixed; boundary=b"),
            None,
            body.as_bytes(),
            LIMIT
        )
        .unwrap()
        .hidden,
        ["cut 039b70b8"]
    );
    // Nested multipart: a base64 part two levels down is found.
    let inner = format!(
        "--c\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n--c--",
        b64(b"deep")
    );
    let body = format!("--b\r\nContent-Type: multipart/mixed; boundary=c\r\n\r\n{inner}\r\n--b--");
    assert_eq!(
        view(
            Some("multipart/mixed; boundary=b"),
            None,
            body.as_bytes(),
            LIMIT
        )
        .unwrap()
        .hidden,
        ["deep"]
    );
    let mut body = "x".to_owned();
    for level in (0..8).rev() {
        body = format!("--l{level}\r\nContent-Type: multipart/mixed; boundary=l{}\r\n\r\n{body}\r\n--l{level}--", level + 1);
    }
    assert!(matches!(
        view(
            Some("multipart/mixed; boundary=l0"),
            None,
            body.as_bytes(),
            LIMIT
        ),
        Err(BodyError::Part {
            problem: "multipart bodies nested too deep",
            ..
        })
    ));
}
