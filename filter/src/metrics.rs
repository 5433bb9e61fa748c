//! The filter's counters, visible in Envoy's admin `/stats` as
//! `wasmcustom.keyhole.<name>`: defined once per worker, counted with
//! [`count`].

use crate::abi;
use keyhole_core::alias::lastword::Reason as LastWordReason;
use keyhole_core::alias::prompt::Refusal as AliasRefusal;
use keyhole_core::proto::reply::ErrorKind;
use keyhole_core::proto::withhold::Withheld;
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
    /// LLM requests (and answers) answered locally with an error.
    pub rejected: Option<u32>,
    /// Requests whose control answer exceeded the phase budget.
    pub clamped: Option<u32>,
    /// Tool calls in responses naming a tool outside the surfaced set.
    pub off_surface_calls: Option<u32>,
    /// LLM requests refused because the body about to leave held more
    /// tool-shaped objects than the phase budget.
    pub over_budget: Option<u32>,
    /// Events of streamed LLM answers that could not be checked for tool
    /// calls (oversized or unreadable), skipped.
    pub stream_events_skipped: Option<u32>,
    /// LLM requests whose tools were recalled from the worker's memo of
    /// registries (the same bytes read before), not read again.
    pub registry_recalled: Option<u32>,
    /// Calls in answers of a tool on the surface (hits), summed.
    pub calls_covered: Option<u32>,
    /// Calls in answers of a tool outside the surface, or of the tool-search
    /// control tool (misses), summed.
    pub calls_missed: Option<u32>,
    /// Answers whose calls were not posted to control (queue full, dispatch
    /// refused).
    pub calls_dropped: Option<u32>,
    /// `POST /v1/calls` lists sent (at most one per tick and 256 answers).
    pub calls_posts: Option<u32>,
    /// The LLM listener's `enforce: shadow` counters.
    pub shadow: ShadowMetrics,
    /// The LLM listener's id-alias counters.
    pub llm: LlmAliasMetrics,
    /// The HMS listener's counters.
    pub hms: HmsMetrics,
}

/// Why an HMS request was refused (answered locally, never sent): the suffix
/// of `keyhole.hms_refused.<reason>`, one per local reply kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No session header, an unreadable request, or trailers (400).
    Invalid,
    /// An alias this session did not issue, or a sentinel (404).
    UnknownAlias,
    /// A body over `max_body_bytes` (413).
    TooLarge,
    /// Control could not decode (503).
    Unavailable,
    /// The filter could not rewrite or hold the request (500).
    Internal,
}

impl Refused {
    /// Every reason, in counter order.
    pub const ALL: [Refused; 5] = [
        Refused::Invalid,
        Refused::UnknownAlias,
        Refused::TooLarge,
        Refused::Unavailable,
        Refused::Internal,
    ];

    /// The counter's name suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Invalid => "invalid",
            Refused::UnknownAlias => "unknown_alias",
            Refused::TooLarge => "too_large",
            Refused::Unavailable => "unavailable",
            Refused::Internal => "internal",
        }
    }

    /// The reason of a local reply, by its kind.
    pub fn of_reply(kind: ErrorKind) -> Refused {
        match kind {
            ErrorKind::InvalidRequest => Refused::Invalid,
            ErrorKind::UnknownAlias => Refused::UnknownAlias,
            ErrorKind::BodyTooLarge => Refused::TooLarge,
            ErrorKind::Unavailable => Refused::Unavailable,
            _ => Refused::Internal,
        }
    }
}

/// The LLM listener's `enforce: shadow` counters (`keyhole.shadow.*`).
#[derive(Debug, Default, Clone, Copy)]
pub struct ShadowMetrics {
    /// Requests whose would-be set was resolved (forwarded unchanged).
    pub requests: Option<u32>,
    /// Requests forwarded unchanged where `on` would have refused or
    /// fallen back (control down, over budget, …), outages included.
    pub passed: Option<u32>,
    /// Of those, control gave no usable answer.
    pub outage: Option<u32>,
    /// Answers whose every call was in the would-be set.
    pub covered: Option<u32>,
    /// Answers with at least one call outside it.
    pub missed: Option<u32>,
}

/// The LLM listener's id-alias counters (`keyhole.llm.*`).
#[derive(Debug, Default, Clone, Copy)]
pub struct LlmAliasMetrics {
    /// Raw id occurrences replaced by aliases in requests, summed.
    pub ids_aliased: Option<u32>,
    /// Requests with at least one id replaced.
    pub requests_aliased: Option<u32>,
    /// Callouts to control made for LLM requests, summed (one per turn with
    /// aliases on; a second only for a registry control did not know).
    pub callouts: Option<u32>,
    /// Turns sent as the two `/v1` calls because control does not speak
    /// `/v2/turn` (404, or another version): `keyhole.llm.turn_v1_fallback`.
    pub turn_v1_fallback: Option<u32>,
    /// Requests refused because their ids could not be aliased, per
    /// [`AliasRefusal::ALL`] (`keyhole.llm.alias_refused.<reason>`).
    refused: [Option<u32>; 7],
}

impl LlmAliasMetrics {
    /// The counter of requests refused for `reason`.
    pub fn refused(&self, reason: AliasRefusal) -> Option<u32> {
        let i = AliasRefusal::ALL.iter().position(|r| *r == reason)?;
        self.refused.get(i).copied().flatten()
    }
}

/// The HMS listener's counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct HmsMetrics {
    /// Responses passed on with their ids replaced by aliases.
    pub responses_aliased: Option<u32>,
    /// Aliases in requests decoded to real ids, summed.
    pub aliases_decoded: Option<u32>,
    /// Raw-id-shaped values in requests (path, query, headers, body), summed;
    /// counted whether the `raw_ids` policy refuses or passes them.
    pub raw_ids: Option<u32>,
    /// Callouts to control made for HMS responses (`/v1/alias/encode`), summed:
    /// at most one per response.
    pub response_callouts: Option<u32>,
    /// Callouts to control made for HMS requests (`/v1/alias/decode`), summed:
    /// at most one per request, none for a request without an alias.
    pub request_callouts: Option<u32>,
    /// Withheld responses, per [`Withheld::ALL`].
    withheld: [Option<u32>; Withheld::ALL.len()],
    /// Refused requests, per [`Refused::ALL`].
    refused: [Option<u32>; 5],
    /// Responses the last word withheld, per
    /// [`keyhole_core::alias::lastword::Reason::ALL`] (`keyhole.hms_last_word.<reason>`).
    last_word: [Option<u32>; LastWordReason::ALL.len()],
    /// `enforce: shadow`: responses scanned and forwarded unchanged.
    pub shadow_responses: Option<u32>,
    /// Of those, the ones with ids `on` would have aliased.
    pub shadow_with_ids: Option<u32>,
    /// Of those, the ones `on` would have withheld, per [`Withheld::ALL`]
    /// (`keyhole.hms_shadow.withheld.<reason>`).
    shadow_withheld: [Option<u32>; Withheld::ALL.len()],
}

impl HmsMetrics {
    /// The counter of responses withheld for `reason`.
    pub fn withheld(&self, reason: Withheld) -> Option<u32> {
        let i = Withheld::ALL.iter().position(|r| *r == reason)?;
        self.withheld.get(i).copied().flatten()
    }

    /// The counter of requests refused for `reason`.
    pub fn refused(&self, reason: Refused) -> Option<u32> {
        let i = Refused::ALL.iter().position(|r| *r == reason)?;
        self.refused.get(i).copied().flatten()
    }

    /// The counter of shadow responses `on` would have withheld for `reason`.
    pub fn shadow_withheld(&self, reason: Withheld) -> Option<u32> {
        let i = Withheld::ALL.iter().position(|r| *r == reason)?;
        self.shadow_withheld.get(i).copied().flatten()
    }

    /// The counter of responses the last word withheld for `reason`.
    pub fn last_word(&self, reason: LastWordReason) -> Option<u32> {
        let i = LastWordReason::ALL.iter().position(|r| *r == reason)?;
        self.last_word.get(i).copied().flatten()
    }
}

/// Adds `offset` to `counter` (`None`: a counter the host refused to define).
/// A refused increment is dropped on purpose: counters report, they never
/// decide, so a refusal changes nothing about the stream.
pub fn count(counter: Option<u32>, offset: i64) {
    if let Some(id) = counter {
        if let Err(status) = abi::increment_metric(id, offset) {
            log::debug!("keyhole.metrics op=increment id={id} status={}", status.0);
        }
    }
}

/// Counters whose names are known only at run time (an id kind of the
/// taxonomy), defined on first use; at most [`MAX_NAMED`] per worker.
const MAX_NAMED: usize = 256;

thread_local! {
    static NAMED: std::cell::RefCell<std::collections::BTreeMap<String, Option<u32>>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
}

/// Adds `offset` to the counter `name`, defining it on first use.
pub fn count_named(name: &str, offset: i64) {
    let id = NAMED.with(|named| {
        let Ok(mut named) = named.try_borrow_mut() else {
            return None;
        };
        if let Some(id) = named.get(name) {
            return *id;
        }
        if named.len() >= MAX_NAMED {
            return None;
        }
        let id = counter(name);
        named.insert(name.to_owned(), id);
        id
    });
    count(id, offset);
}

fn counter(name: &str) -> Option<u32> {
    match abi::define_metric(MetricType::Counter, name) {
        Ok(id) => Some(id),
        Err(status) => {
            log::warn!("keyhole.metrics op=define name={name} status={}", status.0);
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
            over_budget: counter("keyhole.over_budget"),
            stream_events_skipped: counter("keyhole.stream_events_skipped"),
            registry_recalled: counter("keyhole.registry_recalled"),
            calls_covered: counter("keyhole.calls_covered"),
            calls_missed: counter("keyhole.calls_missed"),
            calls_dropped: counter("keyhole.calls_dropped"),
            calls_posts: counter("keyhole.calls_posts"),
            shadow: ShadowMetrics {
                requests: counter("keyhole.shadow.requests"),
                passed: counter("keyhole.shadow.passed"),
                outage: counter("keyhole.shadow.outage"),
                covered: counter("keyhole.shadow.covered"),
                missed: counter("keyhole.shadow.missed"),
            },
            llm: LlmAliasMetrics {
                ids_aliased: counter("keyhole.llm.ids_aliased"),
                requests_aliased: counter("keyhole.llm.requests_aliased"),
                callouts: counter("keyhole.llm.callouts"),
                turn_v1_fallback: counter("keyhole.llm.turn_v1_fallback"),
                refused: AliasRefusal::ALL
                    .map(|r| counter(&format!("keyhole.llm.alias_refused.{}", r.as_str()))),
            },
            hms: HmsMetrics {
                responses_aliased: counter("keyhole.hms_responses_aliased"),
                aliases_decoded: counter("keyhole.hms_aliases_decoded"),
                raw_ids: counter("keyhole.hms_raw_ids"),
                response_callouts: counter("keyhole.hms_callouts.response"),
                request_callouts: counter("keyhole.hms_callouts.request"),
                withheld: Withheld::ALL
                    .map(|r| counter(&format!("keyhole.hms_withheld.{}", r.as_str()))),
                refused: Refused::ALL
                    .map(|r| counter(&format!("keyhole.hms_refused.{}", r.as_str()))),
                last_word: LastWordReason::ALL
                    .map(|r| counter(&format!("keyhole.hms_last_word.{}", r.as_str()))),
                shadow_responses: counter("keyhole.hms_shadow.responses"),
                shadow_with_ids: counter("keyhole.hms_shadow.with_ids"),
                shadow_withheld: Withheld::ALL
                    .map(|r| counter(&format!("keyhole.hms_shadow.withheld.{}", r.as_str()))),
            },
        }
    }
}
