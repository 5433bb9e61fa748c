//! The filter's per-request core work on the catalog request, in a loop, for
//! profiling natively (`valgrind --tool=callgrind`, `perf record`), stage by
//! stage, in the order the filter runs them: the prompt's raw ids scanned and
//! (none found) the body kept, the body read, the question to control built,
//! the decision, the rewrite and the seal.
//!
//! `cargo run --release -p keyhole-core --example request_path [ROUNDS]`

use keyhole_core::alias::prompt::alias_text;
use keyhole_core::alias::{PromptScan, Taxonomy};
use keyhole_core::config::OnOutage;
use keyhole_core::proto::tools::{Reason, ResolveResponse, Source, SurfacedTool};
use keyhole_core::tools::format;
use keyhole_core::tools::surface::{self, Finished, Read};
use keyhole_core::Phase;
use std::time::{Duration, Instant};

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/catalog/openai_request.json"
    );
    let body = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let names: Vec<String> = {
        let req = format::parse("/v1/chat/completions", &body)
            .ok()
            .flatten()
            .expect("catalog parses");
        req.tools
            .iter()
            .step_by(9)
            .take(12)
            .map(|t| t.name.to_string())
            .collect()
    };
    let answer = ResolveResponse {
        tools: names
            .iter()
            .map(|n| SurfacedTool::new(n.clone(), Reason::Rag))
            .collect(),
        source: Source::Retrieval,
        turn: None,
    };
    let tax = Taxonomy::default();
    // As in the filter: the registry is recalled after the first request.
    let (builtins, mut memo) = (format::BuiltinTools::default(), format::Memo::new());
    let mut stages = [Duration::ZERO; 5];
    let mut out_bytes = 0;
    let (mut changed, mut moved) = (0, 0);
    let started = Instant::now();
    for _ in 0..rounds {
        let t = Instant::now();
        let scan =
            PromptScan::new_skipping(&tax, &body, &|rest| memo.known_array(rest)).expect("scans");
        let t1 = Instant::now();
        // The turn read from the body as sent, for the one `/v2/turn` question.
        let Read::Resolve(sent) = surface::read(
            "/v1/chat/completions",
            &body,
            Phase::Planner,
            &builtins,
            &mut memo,
        ) else {
            panic!("the catalog request is resolved")
        };
        let question = surface::question(&sent, Some("s"), Phase::Planner, false);
        let payload = serde_json::to_vec(&question).expect("serialises");
        let sent = sent.into_owned();
        let t2 = Instant::now();
        let aliases: Vec<String> = (1..=scan.ids().len())
            .map(|n| format!("patient-k7q2-{n:03}"))
            .collect();
        let aliased = scan
            .rewrite_counted(&body, &aliases, &[])
            .expect("rewrites");
        // As in the filter: a body the aliases changed nothing in is not
        // read again, and the read as sent is moved past the aliases' edits
        // when it can be.
        changed += usize::from(aliased.body.is_some());
        let (req, forwarded) = match &aliased.body {
            None => (sent, &body[..]),
            Some(out) => {
                let alias = |t: &str| alias_text(&tax, t, scan.ids(), &aliases, &[]).ok();
                let read =
                    match surface::read_moved(sent, out, &aliased.edits, Phase::Planner, &alias) {
                        Some(read) => {
                            moved += 1;
                            read
                        }
                        None => surface::read(
                            "/v1/chat/completions",
                            out,
                            Phase::Planner,
                            &builtins,
                            &mut memo,
                        ),
                    };
                let Read::Resolve(req) = read else {
                    panic!("the aliased request is resolved")
                };
                (req.into_owned(), &out[..])
            }
        };
        let t3 = Instant::now();
        let finished = surface::finish_with(
            &req,
            forwarded,
            Phase::Planner,
            Ok(&answer),
            &[],
            OnOutage::Reject,
            true,
        );
        let Finished::Forward {
            body: rewritten, ..
        } = finished
        else {
            panic!("refused")
        };
        let t4 = Instant::now();
        for (stage, d) in stages
            .iter_mut()
            .zip([t1 - t, t2 - t1, t3 - t2, t4 - t3, Duration::ZERO])
        {
            *stage += d;
        }
        out_bytes += rewritten.len() + payload.len();
    }
    let per = |d: Duration| d.as_secs_f64() / rounds as f64 * 1e6;
    println!(
        "{rounds} rounds: {:.1} µs per request ({} bytes in, {} bytes out per round)",
        per(started.elapsed()),
        body.len(),
        out_bytes / rounds
    );
    println!("  bodies the aliases changed: {changed} of {rounds}, reads moved past them: {moved}");
    for (name, d) in [
        "prompt ids (scan)",
        "read as sent + question",
        "splice aliases + move the read",
        "decide+rewrite+seal",
    ]
    .iter()
    .zip(&stages[..4])
    {
        println!("  {name:<30} {:>8.1} µs", per(*d));
    }
}
