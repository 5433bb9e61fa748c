//! End-to-end harness: starts the real parts and talks to them over loopback.
//!
//! Each test gets its own temp dir, control socket, Envoy (with ports picked
//! by the kernel and read back from the admin API) and recording upstreams.
//! The embedder is shared: `scripts/with-services.sh` starts one and exports
//! `KEYHOLE_EMBEDDER_URL` (Redis likewise as `KEYHOLE_TEST_REDIS_URL`; not `KEYHOLE_REDIS_URL`, which control itself reads).
//! With `KEYHOLE_TAXONOMY=FILE` every control gets `--taxonomy FILE` and every
//! filter configuration the same file as its `taxonomy` ([`paths::taxonomy`]).
//!
//! # Layout
//! - [`paths`]: where the built artifacts and the shared data are.
//! - [`upstream`]: a recording upstream (LLM echo, programmable HMS).
//! - [`control`]: the control binary as a child process.
//! - [`envoy`]: Envoy from the project venv, with the real `.wasm`.
//! - [`fake_control`]: a misbehaving control, for fault injection.
//! - [`bodies`]: independent readers of the bodies the upstreams received.
//! - [`embedder`]: a local bag-of-words embedder for tests not about the embedder.
//! - [`adversary`]: adversarial LLM requests with ground truth, and a tool-definition oracle.
//! - [`h2`]: an h2c client that can send request trailers.
//! - [`hms_client`]: one request through the HMS listener, its answer as the client saw it.
//! - [`qdrant`]: the shared Qdrant server and private ones for fault tests.

pub mod adversary;
pub mod bodies;
pub mod control;
pub mod embedder;
pub mod envoy;
pub mod fake_control;
pub mod h2;
pub mod hms_client;
pub mod legit;
pub mod paths;
pub mod qdrant;
pub mod upstream;

/// A complete local stack: upstreams, control and Envoy.
pub struct Stack {
    /// The LLM upstream (echoes request bodies).
    pub llm: upstream::Upstream,
    /// The HMS upstream.
    pub hms: upstream::Upstream,
    /// control, when started.
    pub control: Option<control::Control>,
    /// Envoy.
    pub envoy: envoy::Envoy,
    /// The test's scratch directory (socket, data dir, rendered config).
    pub dir: tempfile::TempDir,
}

/// Options for [`Stack::start`].
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// Start control (false: its socket stays dead, and the LLM filter runs
    /// with `aliases` off unless its configuration names the setting).
    pub control: bool,
    /// The LLM filter's JSON configuration.
    pub llm_filter_config: String,
    /// The HMS filter's JSON configuration.
    pub hms_filter_config: String,
    /// Envoy's buffer limit.
    pub max_body_bytes: usize,
    /// Extra arguments for `keyhole serve`.
    pub control_args: Vec<String>,
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            control: true,
            llm_filter_config: r#"{"mode":"llm","timeout_ms":30000}"#.into(),
            hms_filter_config: r#"{"mode":"hms","timeout_ms":5000}"#.into(),
            max_body_bytes: 4 * 1024 * 1024,
            // The catalog's metadata overlay, as `make run` and compose use it.
            control_args: vec![
                "--overlay".into(),
                paths::catalog().join("tools.json").display().to_string(),
            ],
        }
    }
}

/// The LLM filter configuration of a stack without control: `aliases` off
/// unless the configuration names it. Such a stack tests the tool surface's
/// outage rules (or a fake control that only answers `/v1/resolve`), and with
/// aliases on every request with a session would be refused before them
/// (aliasing fails closed without control). A configuration that is not a
/// JSON object is passed as written.
fn without_control(config: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(config) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.entry("aliases").or_insert_with(|| "off".into());
            serde_json::Value::Object(map).to_string()
        }
        _ => config.to_owned(),
    }
}

impl Stack {
    /// Starts upstreams, control (unless disabled) and Envoy, and waits until
    /// all of them answer.
    pub async fn start(options: StackOptions) -> anyhow::Result<Stack> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("control.sock");
        let llm = upstream::Upstream::start().await?;
        let hms = upstream::Upstream::start().await?;
        let control = if options.control {
            Some(
                control::Control::start(&socket, &dir.path().join("data"), &options.control_args)
                    .await?,
            )
        } else {
            None
        };
        let llm_filter_config = if options.control {
            options.llm_filter_config
        } else {
            without_control(&options.llm_filter_config)
        };
        let envoy = envoy::Envoy::start(envoy::EnvoyOptions {
            dir: dir.path().to_owned(),
            socket,
            llm_upstream: llm.addr,
            hms_upstream: hms.addr,
            llm_filter_config,
            hms_filter_config: options.hms_filter_config,
            max_body_bytes: options.max_body_bytes,
            baseline: false,
        })
        .await?;
        Ok(Stack {
            llm,
            hms,
            control,
            envoy,
            dir,
        })
    }

    /// The control socket path.
    pub fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("control.sock")
    }
}
