//! The filter's counters, visible in Envoy's admin `/stats` as
//! `wasmcustom.keyhole.<name>`.

use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

/// Counter ids; a counter the host refused to define is `None` and never counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct Metrics {
    /// LLM requests that carried tools and were decided on.
    pub requests: Option<u32>,
    /// Function tools received, summed.
    pub tools_in: Option<u32>,
    /// Function tools forwarded, summed.
    pub tools_out: Option<u32>,
    /// Requests decided without a usable control answer.
    pub fallback: Option<u32>,
    /// Requests answered locally with an error.
    pub rejected: Option<u32>,
    /// Requests whose control answer exceeded the phase budget.
    pub clamped: Option<u32>,
    /// Tool calls in responses naming a tool outside the surfaced set.
    pub off_surface_calls: Option<u32>,
}

fn counter(name: &str) -> Option<u32> {
    match hostcalls::define_metric(MetricType::Counter, name) {
        Ok(id) => Some(id),
        Err(status) => {
            log::warn!("keyhole.metrics op=define name={name} status={status:?}");
            None
        }
    }
}

impl Metrics {
    /// Defines every counter with the host.
    pub fn define() -> Metrics {
        Metrics {
            requests: counter("keyhole.requests"),
            tools_in: counter("keyhole.tools_in"),
            tools_out: counter("keyhole.tools_out"),
            fallback: counter("keyhole.fallback"),
            rejected: counter("keyhole.rejected"),
            clamped: counter("keyhole.clamped"),
            off_surface_calls: counter("keyhole.off_surface_calls"),
        }
    }
}
