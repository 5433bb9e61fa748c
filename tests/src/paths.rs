//! Locations of built artifacts and shared data.

use std::path::PathBuf;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `../shared/catalog` next to the repository, or `$KEYHOLE_CATALOG`.
pub fn catalog() -> PathBuf {
    std::env::var_os("KEYHOLE_CATALOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/catalog"))
}

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"))
}

/// The filter built by `make build` (`--profile wasm-release`), or `$KEYHOLE_WASM`.
pub fn wasm() -> PathBuf {
    std::env::var_os("KEYHOLE_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| target().join("wasm32-wasip1/wasm-release/keyhole_filter.wasm"))
}

/// The control binary built by `make build` (release), or `$KEYHOLE_BIN`.
pub fn keyhole_bin() -> PathBuf {
    std::env::var_os("KEYHOLE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| target().join("release/keyhole"))
}

/// Envoy from the project venv, or `$ENVOY_BIN`.
pub fn envoy_bin() -> PathBuf {
    std::env::var_os("ENVOY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/envoy"))
}

/// The alias taxonomy file every test's control and filter run with, from
/// `$KEYHOLE_TAXONOMY` (relative to the repository when relative); `None`
/// (unset or empty) for the built-in taxonomy. Control gets `--taxonomy`, and
/// `envoy/render.py` puts the file into both filter configurations.
pub fn taxonomy() -> Option<PathBuf> {
    let value = std::env::var_os("KEYHOLE_TAXONOMY").filter(|v| !v.is_empty())?;
    Some(repo().join(value))
}

/// The shared embedder's base URL. Panics with instructions when unset: the
/// end-to-end tests need a real embedder (run them through `make test`).
pub fn embedder_url() -> String {
    std::env::var("KEYHOLE_EMBEDDER_URL").unwrap_or_else(|_| {
        panic!("KEYHOLE_EMBEDDER_URL is not set: run the end-to-end tests with `make test` (scripts/with-services.sh starts the embedder)")
    })
}
