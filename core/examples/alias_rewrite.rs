//! Rewrites the HMS samples through one session and reports the rewrite
//! throughput (scan + rewrite + verification) of the core rewriter.
//!
//! `cargo run --release -p keyhole-core --example alias_rewrite [CATALOG_DIR] [--print FILE]`

use keyhole_core::alias::{BodyKind, ResponseScan, SessionMap, Taxonomy};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// On-CPU time of this thread (Linux), so a busy machine does not skew the
/// numbers; wall time elsewhere.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace()
        .next()?
        .parse()
        .ok()
        .map(Duration::from_nanos)
}

/// Runs `f` and returns the seconds it took (CPU time when available).
fn timed(
    mut f: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(f64, &'static str), Box<dyn std::error::Error>> {
    let (c0, w0) = (cpu_time(), Instant::now());
    f()?;
    Ok(match (c0, cpu_time()) {
        (Some(a), Some(b)) => ((b - a).as_secs_f64(), "cpu"),
        _ => (w0.elapsed().as_secs_f64(), "wall"),
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/catalog"))
        .join("hms_samples");
    let print = args
        .iter()
        .position(|a| a == "--print")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let tax = Taxonomy::default();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    let bodies: Vec<(String, Vec<u8>)> = names
        .iter()
        .map(|p| {
            Ok((
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                std::fs::read(p)?,
            ))
        })
        .collect::<Result<_, std::io::Error>>()?;
    let mut session = SessionMap::new();
    let mut total_bytes = 0usize;
    for (name, body) in &bodies {
        let mut scan = ResponseScan::new(&tax);
        let part = scan.add(body, BodyKind::Json, None)?;
        let aliases = session.encode(&tax, scan.ids())?.aliases;
        let out = scan.rewrite(part, body, &aliases)?;
        total_bytes += body.len();
        println!(
            "{name}: {} bytes, {} ids, {} occurrences",
            body.len(),
            scan.ids().len(),
            scan.occurrences(part)
        );
        if print.as_deref() == Some(name.as_str()) {
            println!("{}", String::from_utf8_lossy(&out));
        }
    }
    // Throughput: the session is warm (aliases known), as on a re-fetch; encode
    // is excluded (it is control's work: each body's aliases are looked up
    // once, before the timing), scan + rewrite + verify included. The bodies
    // take turns, so no body finds the caches and branch predictors trained
    // on itself.
    let answers: Vec<Vec<String>> = bodies
        .iter()
        .map(|(_, body)| {
            let mut scan = ResponseScan::new(&tax);
            scan.add(body, BodyKind::Json, None)?;
            Ok(scan
                .ids()
                .iter()
                .map(|i| session.alias_of(&i.value).unwrap_or("ref-000").to_owned())
                .collect())
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let rounds = 400;
    let mb = (total_bytes * rounds) as f64 / 1e6;
    let (secs, clock) = timed(|| {
        for _ in 0..rounds {
            for ((_, body), aliases) in bodies.iter().zip(&answers) {
                let mut scan = ResponseScan::new(&tax);
                let part = scan.add(body, BodyKind::Json, None)?;
                std::hint::black_box(scan.rewrite(part, body, aliases)?);
            }
        }
        Ok(())
    })?;
    println!(
        "scan+rewrite+verify: {total_bytes} bytes x {rounds} in {secs:.3}s ({clock}) = {:.1} MB/s",
        mb / secs
    );
    let (secs, clock) = timed(|| {
        for _ in 0..rounds {
            for (_, body) in &bodies {
                let mut scan = ResponseScan::new(&tax);
                std::hint::black_box(scan.add(body, BodyKind::Json, None)?);
            }
        }
        Ok(())
    })?;
    println!("scan only: {secs:.3}s ({clock}) = {:.1} MB/s", mb / secs);
    let (secs, clock) = timed(|| {
        for _ in 0..rounds {
            for (_, body) in &bodies {
                std::hint::black_box(serde_json::from_slice::<serde_json::Value>(body)?);
            }
        }
        Ok(())
    })?;
    println!(
        "for scale, serde_json::Value parse: {secs:.3}s ({clock}) = {:.1} MB/s",
        mb / secs
    );
    Ok(())
}
