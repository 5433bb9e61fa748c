//! keyhole's proxy-wasm filter: a thin shell over `keyhole-core`.
//!
//! One root context per plugin instance validates the configuration; one stream
//! context per HTTP stream does the work. Every decision is computed by
//! `keyhole-core`; this crate only moves bytes between the host and core.
//!
//! # Layout
//! - `abi`: the host calls, bound to the ABI directly so that none panics;
//!   only the callout dispatch goes through the SDK (its docs say why).
//! - `logger`: the `log` facade over the ABI (the SDK's logger unwraps).
//! - [`host`]: host calls as the filter uses them, each returning a `Result`.
//! - [`callout`]: callouts to control and their answers.
//! - [`llm`]: the tool-surface stream context (LLM listener).
//! - [`hms`]: the id-alias stream context (HMS listener), one half per direction.
//! - [`hold`]: the response-hold protocol with the `keyhole_hold` Lua filter.
//! - [`metrics`]: counters in Envoy's `/stats`.
//! - `taxonomy`: the alias taxonomy of the listener's configuration.
#![deny(rust_2018_idioms)]
#![deny(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

mod abi;
pub mod callout;
pub mod hms;
pub mod hold;
pub mod host;
pub mod llm;
mod logger;
pub mod metrics;
mod taxonomy;

use keyhole_core::config::{Config, HmsConfig, LlmConfig};
use keyhole_core::tools::format::Memo;
use keyhole_core::tools::prior::PriorSets;
use metrics::Metrics;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;
use std::cell::RefCell;
use std::rc::Rc;

/// Sessions whose last audited set a worker remembers for outages.
const PRIOR_SESSIONS: usize = 4096;

proxy_wasm::main! {{
    logger::init(log::LevelFilter::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::new()) });
}}

/// Plugin-wide state, shared by the stream contexts of one worker.
struct Root {
    /// The validated configuration; `None` until `on_configure` succeeds.
    config: Option<Configured>,
    metrics: Metrics,
    /// State the LLM stream contexts of this worker share.
    shared: Rc<llm::Shared>,
}

/// The validated configuration of one mode, shared by its stream contexts.
#[derive(Clone)]
enum Configured {
    Llm(Rc<LlmConfig>),
    Hms(Rc<HmsConfig>),
}

impl Root {
    fn new() -> Root {
        Root {
            config: None,
            metrics: Metrics::default(),
            shared: Rc::new(llm::Shared {
                prior: RefCell::new(PriorSets::new(
                    PRIOR_SESSIONS,
                    keyhole_core::tools::phase::MAX_BUDGET,
                )),
                memo: RefCell::new(Memo::new()),
                control_v1: std::cell::Cell::new(false),
                calls: RefCell::new(std::collections::VecDeque::new()),
            }),
        }
    }
}

impl Context for Root {}

impl Root {
    /// The LLM listener sends its answers' calls to control from here.
    fn tick(&self) {
        if let Some(Configured::Llm(config)) = &self.config {
            llm::send_pending(&self.shared, &config.control, &self.metrics);
        }
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let bytes = match host::buffer(
            proxy_wasm::types::BufferType::PluginConfiguration,
            usize::MAX,
        ) {
            Ok(bytes) if !bytes.is_empty() => bytes,
            _ => {
                log::error!(
                    "keyhole.config field=<root> error=\"plugin configuration is missing\""
                );
                return false;
            }
        };
        match Config::from_json(&bytes) {
            Ok(config) => {
                self.metrics = Metrics::define();
                log::info!(
                    "keyhole.config mode={:?} cluster={}",
                    config.mode(),
                    config.control().cluster
                );
                self.config = Some(match config {
                    Config::Llm(c) => {
                        // The answers' calls go to control on the tick; a
                        // refused tick period only leaves them queued.
                        let _ = proxy_wasm::hostcalls::set_tick_period(llm::CALLS_TICK);
                        Configured::Llm(Rc::new(c))
                    }
                    Config::Hms(c) => Configured::Hms(Rc::new(c)),
                });
                true
            }
            Err(e) => {
                log::error!("keyhole.config field={} error={:?}", e.field, e.message);
                false
            }
        }
    }

    fn on_tick(&mut self) {
        self.tick();
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        // Returning `None` here makes the SDK panic; an unconfigured plugin is
        // never instantiated by Envoy, but stay total anyway.
        let Some(config) = self.config.clone() else {
            return Some(Box::new(Unconfigured));
        };
        match config {
            Configured::Llm(config) => Some(Box::new(llm::LlmStream::new(
                context_id,
                config,
                self.metrics,
                self.shared.clone(),
            ))),
            Configured::Hms(config) => Some(Box::new(hms::HmsStream::new(
                context_id,
                config,
                self.metrics,
            ))),
        }
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// A stream context for a plugin without configuration: answers 503.
struct Unconfigured;

impl Context for Unconfigured {}

impl HttpContext for Unconfigured {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> proxy_wasm::types::Action {
        // Refused, the stream stays paused until Envoy times it out: still closed.
        let _ = host::send_json(
            503,
            br#"{"error":{"type":"keyhole_unconfigured","message":"keyhole filter has no valid configuration"}}"#,
            &[],
        );
        proxy_wasm::types::Action::Pause
    }
}
