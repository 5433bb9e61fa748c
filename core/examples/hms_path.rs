//! The filter's per-response core work on the HMS route, in a loop, for
//! profiling natively (`valgrind --tool=callgrind`, `perf record`), in the
//! order the filter runs it on an answer with a body (`filter/src/hms/
//! response.rs`): the body and headers scanned, the encode question built,
//! control's answer read, body and headers rewritten, and the last word.
//!
//! The session is warm, as on a re-fetch: control answers each id's alias and
//! every raw id the session knew before (`known`), as it does after the first
//! sight of the sample.
//!
//! `cargo run --release -p keyhole-core --example hms_path [ROUNDS] [SAMPLE]`
//! (default: 200 rounds of `01_patients.search.json`, the bench's sample).

use keyhole_core::alias::lastword::LastWord;
use keyhole_core::alias::{
    BodyKind, EncodeRequest, EncodeResponse, KnownAlias, ResponseScan, SessionMap, Taxonomy,
};
use keyhole_core::proto::alias::WithTaxonomy;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let sample = args
        .next()
        .unwrap_or_else(|| "01_patients.search.json".to_owned());
    let path = format!(
        "{}/../../shared/catalog/hms_samples/{sample}",
        env!("CARGO_MANIFEST_DIR")
    );
    let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let url = "/hms/api/v1/patients/search?name=schmidt";
    // What an HMS answer carries beside the body (the filter scans each value).
    let headers = [
        ("content-type", "application/json; charset=utf-8"),
        ("date", "Thu, 03 Dec 2026 10:00:00 GMT"),
        ("x-request-id", "5f0c2b1e-8a4d-4c39-9e57-1d2a3b4c5d6e"),
    ];
    let tax = Taxonomy::default();

    // First sight: control mints the aliases; afterwards it answers them and
    // every raw id the session knew.
    let mut session = SessionMap::new();
    let (answer, known) = {
        let mut scan = ResponseScan::new(&tax);
        scan.add(&body, BodyKind::Json, tax.kind_for_path(url))
            .expect("the sample scans");
        for (_, v) in &headers {
            scan.add(v.as_bytes(), BodyKind::Text, None)
                .expect("a header scans");
        }
        let encoded = session.encode(&tax, scan.ids()).expect("encode");
        let known: Vec<KnownAlias> = scan
            .ids()
            .iter()
            .zip(&encoded.aliases)
            .map(|(id, alias)| KnownAlias {
                value: id.value.clone(),
                alias: alias.clone(),
            })
            .collect();
        let answer = EncodeResponse {
            aliases: encoded.aliases,
            known: known.clone(),
        };
        (
            serde_json::to_vec(&answer).expect("the answer serialises"),
            known.len(),
        )
    };

    let started = Instant::now();
    let mut out_bytes = 0usize;
    for _ in 0..rounds {
        // Scan: the body, then each header value as text.
        let mut scan = ResponseScan::new(&tax);
        let part = scan
            .add(&body, BodyKind::Json, tax.kind_for_path(url))
            .expect("the sample scans");
        let header_parts: Vec<_> = headers
            .iter()
            .map(|(_, v)| {
                scan.add(v.as_bytes(), BodyKind::Text, None)
                    .expect("a header scans")
            })
            .collect();
        // The question to control.
        let question = WithTaxonomy::new(
            EncodeRequest {
                session: "bench-hms".to_owned(),
                ids: scan.ids().to_vec(),
                prompt: false,
            },
            &tax,
        );
        std::hint::black_box(serde_json::to_vec(&question).expect("the question serialises"));
        // Control's answer, read.
        let answer: EncodeResponse = serde_json::from_slice(&answer).expect("the answer reads");
        // The rewrite of the body and every header.
        let rewriter = scan
            .rewriter(&answer.aliases, &answer.known)
            .expect("the aliases fit");
        let rewritten = rewriter.rewrite(part, &body).expect("the body rewrites");
        let finals: Vec<Vec<u8>> = headers
            .iter()
            .zip(&header_parts)
            .map(|((_, v), p)| {
                rewriter
                    .rewrite(*p, v.as_bytes())
                    .expect("a header rewrites")
            })
            .collect();
        // The last word.
        let given = answer
            .aliases
            .iter()
            .map(String::as_str)
            .chain(answer.known.iter().map(|k| k.alias.as_str()));
        let word = LastWord::new(&tax, scan.raw_values(&answer.known), given);
        assert!(
            word.check_body(&rewritten).is_none(),
            "the last word found a raw id"
        );
        for ((name, _), value) in headers.iter().zip(&finals) {
            assert!(word.check_header(name.as_bytes(), value).is_none());
        }
        out_bytes += rewritten.len();
    }
    let elapsed = started.elapsed();
    println!(
        "{sample}: {} bytes, {known} ids known; {rounds} rounds in {:.3} s = {:.1} µs a response ({} bytes out)",
        body.len(),
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / rounds.max(1) as f64,
        out_bytes / rounds.max(1)
    );
}
