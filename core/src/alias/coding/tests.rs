use super::*;
use proptest::prelude::*;
use std::io::Write;

const JSON: &[u8] =
    br#"{"data":{"id":"039b70b8-92f7-44b7-9c91-4e3f0e900c71","fhirId":"pat-000123","note":"seen by Dr. Weber"}}"#;

/// `JSON` brotli-compressed by the reference encoder (quality 11).
const JSON_BR: &str = "1b6600f89d07b68d7ceb2214060353ea6325b257445796db527597797700dbfb215aa20fcfa43966e9f4b5249a082493c4a01496c8045a03b09a2bfd122b53a53557b16e595ad4c930b26b4632dfb5ef01bee71792b95424253861699fc7f0d818";
/// 3,000,000 zero bytes brotli-compressed (14 bytes).
const ZEROS_BR: &str = "9bbfc62df82700e2b14020cfb705";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

fn encode(data: &[u8], coding: Coding) -> Vec<u8> {
    match coding {
        Coding::Gzip => gzip(data),
        Coding::Deflate => zlib(data),
        Coding::Zstd => zstd(data),
        Coding::Brotli => unreachable!("no brotli encoder here: see the fixed streams"),
    }
}

#[test]
fn content_encoding_values_parse_in_order() {
    assert_eq!(parse("gzip"), Ok(vec![Coding::Gzip]));
    assert_eq!(
        parse(" X-GZIP , br"),
        Ok(vec![Coding::Gzip, Coding::Brotli])
    );
    assert_eq!(parse("identity"), Ok(vec![]));
    assert_eq!(
        parse("deflate, identity, zstd"),
        Ok(vec![Coding::Deflate, Coding::Zstd])
    );
    assert_eq!(
        parse("compress"),
        Err(CodingError::Unsupported("compress".into()))
    );
    assert_eq!(
        parse("gzip, aes128gcm"),
        Err(CodingError::Unsupported("aes128gcm".into()))
    );
}

#[test]
fn each_coding_decodes_what_its_encoder_wrote() {
    for coding in [Coding::Gzip, Coding::Deflate, Coding::Zstd] {
        assert_eq!(
            decode(&encode(JSON, coding), &[coding], 1 << 20).unwrap(),
            JSON,
            "{coding:?}"
        );
    }
    assert_eq!(
        decode(&raw_deflate(JSON), &[Coding::Deflate], 1 << 20),
        Err(CodingError::Corrupt("deflate"))
    );
    assert_eq!(
        decode(&hex(JSON_BR), &[Coding::Brotli], 1 << 20).unwrap(),
        JSON
    );
    // Two gzip members are one body; codings stack (gzip applied last).
    let two = [gzip(&JSON[..40]), gzip(&JSON[40..])].concat();
    assert_eq!(decode(&two, &[Coding::Gzip], 1 << 20).unwrap(), JSON);
    let stacked = gzip(&zstd(JSON));
    assert_eq!(
        decode(&stacked, &[Coding::Zstd, Coding::Gzip], 1 << 20).unwrap(),
        JSON
    );
}

#[test]
fn corrupt_and_cut_bodies_are_refused() {
    for coding in [Coding::Gzip, Coding::Deflate, Coding::Zstd] {
        let encoded = encode(JSON, coding);
        let cut = &encoded[..encoded.len() / 2];
        assert_eq!(
            decode(cut, &[coding], 1 << 20),
            Err(CodingError::Corrupt(coding.as_str())),
            "{coding:?} cut"
        );
        assert!(
            decode(JSON, &[coding], 1 << 20).is_err(),
            "{coding:?} on plain bytes"
        );
    }
    let br = hex(JSON_BR);
    assert!(decode(&br[..br.len() / 2], &[Coding::Brotli], 1 << 20).is_err());
}

#[test]
fn a_body_that_inflates_past_the_limit_is_refused() {
    let zeros = vec![0u8; 3_000_000];
    for (coding, encoded) in [
        (Coding::Gzip, gzip(&zeros)),
        (Coding::Deflate, zlib(&zeros)),
        (Coding::Zstd, zstd(&zeros)),
        (Coding::Brotli, hex(ZEROS_BR)),
    ] {
        assert!(encoded.len() < 20_000, "{coding:?}: {}", encoded.len());
        assert_eq!(
            decode(&encoded, &[coding], 1 << 20),
            Err(CodingError::TooLarge { limit: 1 << 20 }),
            "{coding:?}"
        );
        assert_eq!(
            decode(&encoded, &[coding], 3_000_000).map(|d| d.len()),
            Ok(3_000_000),
            "{coding:?}"
        );
    }
}

fn coding() -> impl Strategy<Value = Coding> {
    prop_oneof![
        Just(Coding::Gzip),
        Just(Coding::Deflate),
        Just(Coding::Brotli),
        Just(Coding::Zstd)
    ]
}

proptest! {
    #[test]
    fn any_bytes_under_any_coding_decode_or_fail_without_panicking(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        coding in coding(),
    ) {
        if let Ok(out) = decode(&bytes, &[coding], 4096) {
            prop_assert!(out.len() <= 4096);
        }
    }

    #[test]
    fn encoded_bodies_round_trip(
        data in proptest::collection::vec(any::<u8>(), 0..20_000),
        coding in prop_oneof![Just(Coding::Gzip), Just(Coding::Deflate), Just(Coding::Zstd)],
    ) {
        prop_assert_eq!(decode(&encode(&data, coding), &[coding], 20_000).unwrap(), data);
    }

    #[test]
    fn a_broken_byte_never_yields_the_body_silently_longer(
        data in proptest::collection::vec(any::<u8>(), 1..4_000),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut encoded = gzip(&data);
        let i = at.index(encoded.len());
        encoded[i] ^= flip;
        // gzip carries a CRC and a length: a changed byte is refused or, in
        // a header field the decoder ignores, decodes to the same body.
        if let Ok(out) = decode(&encoded, &[Coding::Gzip], 8_000) {
            prop_assert_eq!(out, data);
        }
    }
}
