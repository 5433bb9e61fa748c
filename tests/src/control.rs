//! The control binary as a child process.

use anyhow::{bail, Context as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// A running `keyhole serve`; killed when dropped.
pub struct Control {
    /// The child process.
    pub child: Child,
    /// Its socket.
    pub socket: PathBuf,
    /// Its data directory.
    pub data_dir: PathBuf,
    args: Vec<String>,
}

impl Control {
    /// Starts `keyhole serve` on `socket` and waits for `/healthz`.
    pub async fn start(
        socket: &Path,
        data_dir: &Path,
        extra: &[String],
    ) -> anyhow::Result<Control> {
        let child = spawn(socket, data_dir, extra)?;
        let mut control = Control {
            child,
            socket: socket.to_owned(),
            data_dir: data_dir.to_owned(),
            args: extra.to_vec(),
        };
        control.wait_ready().await?;
        Ok(control)
    }

    /// Kills the process with SIGKILL (a crash, not a shutdown) and waits for it.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("killing control")?;
        Ok(())
    }

    /// Starts it again with the same socket, data dir and arguments.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        let _ = self.child.kill().await;
        self.child = spawn(&self.socket, &self.data_dir, &self.args)?;
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        // Generous: a control started with `--registry` embeds it first, and
        // the shared embedder on a busy 2-core box can take tens of seconds.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("control exited early with {status}");
            }
            if let Ok(answer) = get(&self.socket, "/healthz").await {
                // 503 while the configured registry is being indexed.
                if answer.starts_with("HTTP/1.1 200") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "control did not become healthy on {}",
                    self.socket.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn spawn(socket: &Path, data_dir: &Path, extra: &[String]) -> anyhow::Result<Child> {
    let bin = crate::paths::keyhole_bin();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data_dir.with_extension("log"))
        .context("opening control's log")?;
    let mut cmd = Command::new(&bin);
    cmd.arg("serve")
        .arg("--socket")
        .arg(socket)
        .arg("--data-dir")
        .arg(data_dir);
    // The shared embedder, unless the caller names another.
    if !extra.iter().any(|a| a == "--embedder-url") {
        cmd.arg("--embedder-url").arg(crate::paths::embedder_url());
    }
    // The taxonomy the filter gets too (`$KEYHOLE_TAXONOMY`), unless the caller names one.
    if let Some(taxonomy) =
        crate::paths::taxonomy().filter(|_| !extra.iter().any(|a| a == "--taxonomy"))
    {
        cmd.arg("--taxonomy").arg(taxonomy);
    }
    cmd.args(extra)
        .env("KEYHOLE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {} (run `make build` first)", bin.display()))
}

/// A plain HTTP/1.1 request over the Unix socket; returns the whole response text.
pub async fn request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<String> {
    let mut stream = tokio::net::UnixStream::connect(socket).await?;
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: keyhole-control\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out)
}

/// `GET path` over the socket.
pub async fn get(socket: &Path, path: &str) -> anyhow::Result<String> {
    request(socket, "GET", path, None).await
}
