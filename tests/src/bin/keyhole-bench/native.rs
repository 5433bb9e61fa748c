//! Scenario 0: the native HMS rewrite (keyhole-core in this process, no
//! Envoy), and the synthetic HMS bodies the route scenarios share.

use crate::measure::{load_average, percentile};
use crate::report::f;
use crate::scenarios::Settings;
use keyhole_core::alias::lastword::LastWord;
use keyhole_core::alias::{BodyKind, Epoch, ResponseScan, SessionMap, Taxonomy};
use keyhole_e2e::paths;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A synthetic HMS list body of about `target` bytes with fresh ids.
pub(crate) fn synthetic_hms(target: usize) -> Vec<u8> {
    let mut items = Vec::new();
    let mut size = 0;
    let mut i = 0u64;
    while size < target {
        let uuid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            i * 7919 + 1,
            i % 65536,
            i % 4096,
            (i * 3) % 4096,
            i * 104729
        );
        let item = json!({
            "id": uuid,
            "fhirId": format!("pat-{:06}", i),
            "name": {"family": "Muster", "given": ["Erika"]},
            "birthDate": "1950-01-01",
            "links": {"self": format!("/api/v2/patients/{uuid}"), "fhir": format!("https://fhir.example/Patient/pat-{:06}", i)},
            "note": format!("Seen at clinic for follow-up; record {uuid} reviewed."),
        });
        size += item.to_string().len() + 1;
        items.push(item);
        i += 1;
    }
    serde_json::to_vec(&json!({"data": items, "page": {"size": items.len()}})).unwrap_or_default()
}

/// Native core rewrite of one body repeated: scan + rewrite + verify, MB/s
/// and ms per body (see [`core_rewrite_in_turns`]).
pub(crate) fn core_rewrite(body: &[u8], rounds: Rounds) -> anyhow::Result<(f64, f64)> {
    let per = core_rewrite_in_turns(&[body.to_vec()], rounds)?.rewrite;
    Ok((body.len() as f64 / per / 1e6, per * 1e3))
}

/// How many timed rounds: at least `min`, and more until `seconds` have
/// passed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rounds {
    pub(crate) min: usize,
    pub(crate) seconds: f64,
}

/// The seconds of one round of [`core_rewrite_in_turns`], each a median of
/// the timed rounds: the rewrite, the last word, and both (the median of
/// their sums per round, what the route pays).
#[derive(Debug, Clone, Copy)]
struct RoundCost {
    rewrite: f64,
    last_word: f64,
    both: f64,
}

impl RoundCost {
    /// The figures of a round over `bytes`: ms and MB/s of the rewrite (the
    /// names scenario 0 has always had), of the last word and of both, and
    /// the last word's ms per MB.
    fn figures(&self, bytes: usize) -> Value {
        let mbps = |s: f64| bytes as f64 / s / 1e6;
        json!({"bytes": bytes, "ms": self.rewrite * 1e3, "mb_per_s": mbps(self.rewrite),
               "last_word_ms": self.last_word * 1e3, "last_word_mb_per_s": mbps(self.last_word),
               "with_last_word_ms": self.both * 1e3, "with_last_word_mb_per_s": mbps(self.both),
               "last_word_ms_per_mb": self.last_word * 1e3 / (bytes as f64 / 1e6)})
    }
}

/// Native core work of the HMS route on several bodies taking turns, as the
/// filter does it per body: scan + rewrite + verify, then the last word
/// (`LastWord::new` over the scan's raw ids and the aliases, `check_body` of
/// the rewritten body; these bodies have no headers to check). The seconds
/// of one round (each body once), medians of the timed rounds after one
/// untimed warm-up. This box is shared and its speed comes and goes for
/// tenths of a second at a time: the rounds run for a while
/// (`rounds.seconds`), so that the median is what a round costs rather than
/// what a slow spell made of the few rounds it covered. Unlike one body
/// repeated, no body finds the caches and branch predictors trained on
/// itself. Each body's aliases, control's answer, come from a session map of
/// their own (one per body, as a fresh session), encoded once outside the
/// timing: control encodes across a socket, not in the filter. A body the
/// last word would withhold is an error, not a figure.
fn core_rewrite_in_turns(bodies: &[Vec<u8>], rounds: Rounds) -> anyhow::Result<RoundCost> {
    let tax = Taxonomy::default();
    let root = tax.kind_for_path("/api/v2/patients");
    let mut answers = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.iter().enumerate() {
        let mut scan = ResponseScan::new(&tax);
        scan.add(body, BodyKind::Json, root)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut session = SessionMap::with_epoch(Epoch::from_seed(i as u64 + 1));
        answers.push(
            session
                .encode(&tax, scan.ids())
                .map_err(|e| anyhow::anyhow!("body {i}: {e}"))?
                .aliases,
        );
    }
    let (mut rewrite, mut last_word, mut both) = (Vec::new(), Vec::new(), Vec::new());
    let begun = Instant::now();
    for round in 0.. {
        if round > rounds.min && begun.elapsed().as_secs_f64() >= rounds.seconds {
            break;
        }
        let (mut rw, mut lw) = (Duration::ZERO, Duration::ZERO);
        for (i, (body, aliases)) in bodies.iter().zip(&answers).enumerate() {
            let started = Instant::now();
            let mut scan = ResponseScan::new(&tax);
            let part = scan
                .add(body, BodyKind::Json, root)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let out = scan
                .rewrite(part, body, aliases)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let rewritten = Instant::now();
            let word = LastWord::new(
                &tax,
                scan.ids().iter().map(|id| id.value.as_str()),
                aliases.iter().map(String::as_str),
            );
            let found = std::hint::black_box(word.check_body(std::hint::black_box(&out)));
            lw += rewritten.elapsed();
            rw += rewritten - started;
            if let Some(found) = found {
                anyhow::bail!(
                    "the last word withholds body {i}: {} in the {}",
                    found.reason.as_str(),
                    found.place.as_str()
                );
            }
        }
        if round > 0 {
            rewrite.push(rw.as_secs_f64());
            last_word.push(lw.as_secs_f64());
            both.push((rw + lw).as_secs_f64());
        }
    }
    Ok(RoundCost {
        rewrite: percentile(rewrite, 0.5),
        last_word: percentile(last_word, 0.5),
        both: percentile(both, 0.5),
    })
}

/// What the process's allocator does with the memory a round freed.
#[derive(Debug, Clone, Copy)]
enum Heap {
    /// glibc's defaults: the top of the heap is given back to the kernel
    /// once enough of it is free, so a round that frees a few MB faults the
    /// same pages in, zeroed, on the next round (a sixth of a 1 MB round).
    Returned,
    /// Kept for the next round, as the filter's heap is: a wasm module's
    /// linear memory only grows, so after its first responses a worker
    /// rewrites in pages it already has.
    Kept,
}

/// Makes the allocator keep freed memory ([`Heap::Kept`]) or go back to
/// giving it back at glibc's initial thresholds ([`Heap::Returned`]).
fn set_heap(heap: Heap) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let (trim, mmap) = match heap {
            Heap::Kept => (1 << 30, 32 << 20),
            Heap::Returned => (128 << 10, 128 << 10),
        };
        // SAFETY: mallopt only changes the allocator's thresholds; it is
        // called from the bench's main thread before any other is started.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = heap;
}

/// Scenario 0: the native HMS rewrite (scan + rewrite + verify) and the last
/// word after it, each timed apart in the same rounds, one synthetic body
/// repeated at 10 KB … 1 MB and the catalog's samples taking turns. It
/// runs first, before any server of the bench has work: after scenario 6 the
/// vector store still indexes 20,000 points, and after scenario 9 the embedder
/// still works through its backlog, each on one of this box's two cores. The
/// load average when it starts goes with the figures.
///
/// Each figure is measured twice, in one run: with the memory a round frees
/// kept for the next ([`Heap::Kept`], as in the filter), and with glibc's
/// default of giving it back to the kernel ([`Heap::Returned`]), which adds
/// the page faults of a heap that shrinks and grows again every round.
pub(crate) async fn native_rewrite(_: &Settings) -> anyhow::Result<Value> {
    eprintln!("scenario 0: native HMS rewrite…");
    let load = load_average();
    let mut samples = Vec::new();
    for entry in std::fs::read_dir(paths::catalog().join("hms_samples"))? {
        samples.push(std::fs::read(entry?.path())?);
    }
    let bodies: Vec<Vec<u8>> = [10 * 1024, 100 * 1024, 1 << 20]
        .into_iter()
        .map(synthetic_hms)
        .collect();
    let measure = || -> anyhow::Result<(Vec<Value>, Value)> {
        let mut rewrite = Vec::new();
        for body in &bodies {
            let cost = core_rewrite_in_turns(
                std::slice::from_ref(body),
                Rounds {
                    min: 60,
                    seconds: 2.0,
                },
            )?;
            rewrite.push(cost.figures(body.len()));
        }
        let bytes = samples.iter().map(Vec::len).sum::<usize>();
        let mut in_turns = core_rewrite_in_turns(
            &samples,
            Rounds {
                min: 1000,
                seconds: 2.0,
            },
        )?
        .figures(bytes);
        in_turns["bodies"] = json!(samples.len());
        Ok((rewrite, in_turns))
    };
    // The process starts with glibc's defaults: measured first, then kept.
    let (returned, returned_in_turns) = measure()?;
    set_heap(Heap::Kept);
    let kept = measure();
    set_heap(Heap::Returned);
    let (rewrite, in_turns) = kept?;
    Ok(
        json!({"hms_core_rewrite": rewrite, "hms_core_rewrite_samples_in_turns": in_turns,
              "heap_returned": {"hms_core_rewrite": returned, "hms_core_rewrite_samples_in_turns": returned_in_turns},
              "load_average_1min_at_start": load}),
    )
}

/// Scenario 0's section of `RESULTS.md`.
pub(crate) fn native_rewrite_markdown(native: &Value) -> String {
    let mut s = format!(
        "Run first, before any server of the bench has work (1-minute load average when it began: {}):\n\n",
        f(&native["load_average_1min_at_start"])
    );
    let returned = &native["heap_returned"];
    s += "| HMS core rewrite (scan + rewrite + verify, native) | ms | MB/s | MB/s, heap returned each round | last word MB/s | rewrite + last word MB/s | last word ms per MB |\n|---|---|---|---|---|---|---|\n";
    let row = |x: &Value, r: &Value| {
        format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            f(&x["ms"]),
            f(&x["mb_per_s"]),
            f(&r["mb_per_s"]),
            f(&x["last_word_mb_per_s"]),
            f(&x["with_last_word_mb_per_s"]),
            f(&x["last_word_ms_per_mb"])
        )
    };
    let rows = native["hms_core_rewrite"].as_array().into_iter().flatten();
    for (i, x) in rows.enumerate() {
        s += &format!(
            "| {} B {}",
            x["bytes"],
            row(x, &returned["hms_core_rewrite"][i])
        );
    }
    let turns = &native["hms_core_rewrite_samples_in_turns"];
    s += &format!(
        "| the catalog's {} HMS samples ({} B) taking turns {}\n\
         Each of the first rows repeats one synthetic body; the samples take turns, so that no body finds the \
         caches and branch predictors trained on itself. Medians of timed rounds after a warm-up. \
         \"MB/s\": the memory a round frees is kept for the next, as in the filter, whose wasm heap only \
         grows; \"heap returned\": glibc's defaults, which give a freed heap top back to the kernel, so the \
         next round faults it in again (measured first, in the same run). The last word (`LastWord::new` over \
         the body's raw ids and aliases, then `check_body` of the rewritten body, as the filter runs it on every \
         HMS response) is timed apart from the rewrite in the same rounds; \"rewrite + last word\" is the \
         median of their sums, what the route pays.\n",
        turns["bodies"], turns["bytes"], row(turns, &returned["hms_core_rewrite_samples_in_turns"])
    );
    s
}
