//! Envoy from the project venv, configured from `envoy/envoy.yaml.tmpl`.

use anyhow::{bail, Context as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// What to render into the template.
#[derive(Debug, Clone)]
pub struct EnvoyOptions {
    /// Scratch directory for the rendered config and logs.
    pub dir: PathBuf,
    /// control's socket.
    pub socket: PathBuf,
    /// The LLM upstream.
    pub llm_upstream: SocketAddr,
    /// The HMS upstream.
    pub hms_upstream: SocketAddr,
    /// Filter JSON on the LLM listener.
    pub llm_filter_config: String,
    /// Filter JSON on the HMS listener.
    pub hms_filter_config: String,
    /// Buffer limit.
    pub max_body_bytes: usize,
    /// Plain Envoy without keyhole (`envoy/baseline.yaml.tmpl`), for side-by-side measurements.
    pub baseline: bool,
}

impl EnvoyOptions {
    /// Options for rendering a config that is only validated, never served:
    /// upstreams on the discard port, default filter configurations.
    pub fn for_validation(dir: &std::path::Path) -> EnvoyOptions {
        EnvoyOptions {
            dir: dir.to_owned(),
            socket: dir.join("control.sock"),
            llm_upstream: SocketAddr::from(([127, 0, 0, 1], 9)),
            hms_upstream: SocketAddr::from(([127, 0, 0, 1], 9)),
            llm_filter_config: r#"{"mode":"llm"}"#.into(),
            hms_filter_config: r#"{"mode":"hms"}"#.into(),
            max_body_bytes: 1 << 20,
            baseline: false,
        }
    }
}

/// A running Envoy; killed when dropped.
pub struct Envoy {
    /// The child process.
    pub child: Child,
    /// Admin API address.
    pub admin: SocketAddr,
    /// The LLM listener.
    pub llm: SocketAddr,
    /// The HMS listener.
    pub hms: SocketAddr,
    /// Envoy's log file.
    pub log: PathBuf,
}

/// Renders the shipped template with `vars` through `envoy/render.py`.
pub fn render(vars: &[(&str, String)]) -> anyhow::Result<String> {
    render_template("envoy/envoy.yaml.tmpl", vars)
}

/// Renders `template` (relative to the repository) with `vars`.
pub fn render_template(template: &str, vars: &[(&str, String)]) -> anyhow::Result<String> {
    let repo = crate::paths::repo();
    let out = std::process::Command::new("python3")
        .arg(repo.join("envoy/render.py"))
        .arg(repo.join(template))
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .context("running envoy/render.py")?;
    if !out.status.success() {
        bail!("render.py failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The template variables for `o`, with every port left to the kernel, and
/// the taxonomy of [`crate::paths::taxonomy`].
pub fn vars(o: &EnvoyOptions) -> Vec<(&'static str, String)> {
    vec![
        ("LISTEN_ADDRESS", "127.0.0.1".into()),
        ("ADMIN_PORT", "0".into()),
        ("LLM_PORT", "0".into()),
        ("HMS_PORT", "0".into()),
        ("KEYHOLE_WASM", crate::paths::wasm().display().to_string()),
        ("KEYHOLE_SOCKET", o.socket.display().to_string()),
        ("LLM_CLUSTER", "llm_upstream".into()),
        ("LLM_TLS_HOST", "api.openai.com".into()),
        ("CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt".into()),
        ("LLM_UPSTREAM_HOST", o.llm_upstream.ip().to_string()),
        ("LLM_UPSTREAM_PORT", o.llm_upstream.port().to_string()),
        ("HMS_UPSTREAM_HOST", o.hms_upstream.ip().to_string()),
        ("HMS_UPSTREAM_PORT", o.hms_upstream.port().to_string()),
        ("LLM_FILTER_CONFIG", o.llm_filter_config.clone()),
        ("HMS_FILTER_CONFIG", o.hms_filter_config.clone()),
        ("MAX_BODY_BYTES", o.max_body_bytes.to_string()),
        // render.py inlines it into both filter configurations ("" = built-in).
        (
            "KEYHOLE_TAXONOMY",
            crate::paths::taxonomy()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        ),
    ]
}

/// Runs `envoy --mode validate` on a config text; returns (success, output).
pub fn validate(config: &str, dir: &std::path::Path) -> anyhow::Result<(bool, String)> {
    let path = dir.join("validate.yaml");
    std::fs::write(&path, config)?;
    let out = std::process::Command::new(crate::paths::envoy_bin())
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&path)
        .output()
        .context("running envoy --mode validate")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

impl Envoy {
    /// Renders the config, starts Envoy and waits until its listeners are up.
    pub async fn start(o: EnvoyOptions) -> anyhow::Result<Envoy> {
        let template = if o.baseline {
            "envoy/baseline.yaml.tmpl"
        } else {
            "envoy/envoy.yaml.tmpl"
        };
        Envoy::start_template(template, o).await
    }

    /// Like [`Envoy::start`], from another template (relative to the repository).
    pub async fn start_template(template: &str, o: EnvoyOptions) -> anyhow::Result<Envoy> {
        let config = render_template(template, &vars(&o))?;
        let config_path = o.dir.join("envoy.yaml");
        std::fs::write(&config_path, config)?;
        let admin_path = o.dir.join("admin.addr");
        let log = o.dir.join("envoy.log");
        let log_file = std::fs::File::create(&log)?;
        let child = Command::new(crate::paths::envoy_bin())
            .arg("-c")
            .arg(&config_path)
            .args([
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "--log-level",
                "info",
            ])
            .arg("--admin-address-path")
            .arg(&admin_path)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true)
            .spawn()
            .context("starting envoy (run `make setup` first)")?;
        let mut envoy = Envoy {
            child,
            admin: "127.0.0.1:1".parse()?,
            llm: "127.0.0.1:1".parse()?,
            hms: "127.0.0.1:1".parse()?,
            log,
        };
        envoy.wait_ready(&admin_path).await?;
        Ok(envoy)
    }

    async fn wait_ready(&mut self, admin_path: &std::path::Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let http = reqwest::Client::new();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("envoy exited with {status}:\n{}", self.log_tail());
            }
            if Instant::now() > deadline {
                bail!("envoy did not become ready:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let Ok(addr) = std::fs::read_to_string(admin_path) else {
                continue;
            };
            let Ok(admin) = addr.trim().parse::<SocketAddr>() else {
                continue;
            };
            self.admin = admin;
            let ready = http.get(format!("http://{admin}/ready")).send().await;
            if !matches!(ready, Ok(r) if r.status().is_success()) {
                continue;
            }
            let listeners: serde_json::Value = http
                .get(format!("http://{admin}/listeners?format=json"))
                .send()
                .await?
                .json()
                .await?;
            for l in listeners["listener_statuses"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let port = l["local_address"]["socket_address"]["port_value"]
                    .as_u64()
                    .unwrap_or(0) as u16;
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                match l["name"].as_str() {
                    Some("llm") => self.llm = addr,
                    Some("hms") => self.hms = addr,
                    _ => {}
                }
            }
            return Ok(());
        }
    }

    /// The last 4 KiB of Envoy's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(4096);
        text.get(start..).unwrap_or(&text).to_owned()
    }

    /// Envoy's whole log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The value of a counter from `/stats` (e.g. `wasmcustom.keyhole.requests`); 0 when absent.
    pub async fn stat(&self, name: &str) -> anyhow::Result<u64> {
        let text = reqwest::get(format!("http://{}/stats?filter={}", self.admin, name))
            .await?
            .text()
            .await?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_once(": "))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0))
    }

    /// Base URL of the LLM listener.
    pub fn llm_url(&self) -> String {
        format!("http://{}", self.llm)
    }

    /// Base URL of the HMS listener.
    pub fn hms_url(&self) -> String {
        format!("http://{}", self.hms)
    }
}
