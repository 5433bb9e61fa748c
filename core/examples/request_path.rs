//! The filter's per-request core work on the catalog request, in a loop, for
//! profiling natively (`valgrind --tool=callgrind`, `perf record`): read the
//! body, build the question to control, decide, rewrite, count.
//!
//! `cargo run --release -p keyhole-core --example request_path [ROUNDS]`

use keyhole_core::config::OnOutage;
use keyhole_core::format;
use keyhole_core::surface;
use keyhole_core::wire::{Reason, ResolveResponse, Source, SurfacedTool};
use keyhole_core::Phase;
use std::time::Instant;

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/catalog/openai_request.json");
    let body = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let names: Vec<String> = {
        let req = format::parse("/v1/chat/completions", &body).ok().flatten().expect("catalog parses");
        req.tools.iter().step_by(9).take(12).map(|t| t.name.to_string()).collect()
    };
    let answer = ResolveResponse {
        tools: names.iter().map(|n| SurfacedTool::new(n.clone(), Reason::Rag)).collect(),
        source: Source::Retrieval,
    };
    let started = Instant::now();
    let mut out_bytes = 0;
    for _ in 0..rounds {
        let req = format::parse("/v1/chat/completions", &body).ok().flatten().expect("parses");
        // By digest, as the filter asks once control knows the registry.
        let question = surface::question(&req, Some("s"), Phase::Planner, false);
        let payload = serde_json::to_vec(&question).expect("serialises");
        let decision = surface::decide(&req, Phase::Planner, Ok(&answer), &[], OnOutage::Reject);
        let keep = match decision {
            surface::Decision::Forward { keep, .. } => keep,
            surface::Decision::Reject => Vec::new(),
        };
        let rewritten = req.rewrite(&body, &keep);
        let check = format::parse("/v1/chat/completions", &rewritten).ok().flatten().map_or(0, |r| r.tools.len());
        out_bytes += rewritten.len() + payload.len() + check;
    }
    let per = started.elapsed().as_secs_f64() / rounds as f64;
    println!("{rounds} rounds: {:.1} µs per request ({} bytes in, {} bytes out per round)", per * 1e6, body.len(), out_bytes / rounds);
}
