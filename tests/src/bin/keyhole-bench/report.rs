//! Helpers for the sections of `bench/RESULTS.md`.

use serde_json::Value;

/// A figure as the tables print it: whole numbers from 100 up, three
/// decimals below, `∞` and `–` for what is not a finite number.
pub(crate) fn f(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.is_finite() && x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.is_finite() => format!("{x:.3}"),
        Some(_) => "∞".into(),
        None => "–".into(),
    }
}

/// The header of a table of [`latency_row`]s.
pub(crate) const LATENCY_HEADER: &str = "| measured | with keyhole p50 / p99 (ms) | plain Envoy p50 / p99 (ms) | added p50 / p99 (ms) |\n|---|---|---|---|\n";

/// One row of a latency pair (`measure::Pair` as JSON).
pub(crate) fn latency_row(name: &str, p: &Value) -> String {
    format!(
        "| {name} | {} / {} | {} / {} | {} / {} |\n",
        f(&p["with_keyhole"]["p50_ms"]),
        f(&p["with_keyhole"]["p99_ms"]),
        f(&p["without"]["p50_ms"]),
        f(&p["without"]["p99_ms"]),
        f(&p["added_p50_ms"]),
        f(&p["added_p99_ms"])
    )
}
