//! keyhole's end-to-end tests, one test binary: the real Envoy from the venv
//! with the compiled `.wasm`, the real control binary, the demo upstreams and
//! a real embedder (`scripts/with-services.sh` starts the embedder, Redis and
//! Qdrant). The harness is the `keyhole_e2e` library (`tests/src/`).
//!
//! One binary links the harness once; each file below is a module, and a
//! test is named by its module: `cargo test --release -p keyhole-e2e --test
//! e2e -- hms::` runs the HMS listener's tests,
//! `registry_invariant::generated_requests_never_leave_core` one test. Every
//! test starts its own processes (Envoy, control, upstreams, private Qdrant
//! servers) in its own temp dir on kernel-picked ports, so tests of different
//! modules run side by side as tests of one module always have.

mod alias_epochs;
mod degraded;
mod deploy;
mod digest;
mod hms;
mod hms_corpus;
mod hms_known;
mod hms_regressions;
mod hms_requests;
mod hold;
mod llm_aliases;
mod llm_compat;
mod qdrant;
mod recovery;
mod registry_invariant;
mod run_dir;
mod shadow;
mod skeleton;
mod taxonomy;
mod tool_surface;
mod trips;
