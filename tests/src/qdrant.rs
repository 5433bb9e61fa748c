//! Qdrant for the end-to-end tests: the shared server `scripts/with-services.sh`
//! starts, and private servers a test can start, kill and restart.
//!
//! `with-services.sh` decompresses the shipped Qdrant binary and exports
//! `KEYHOLE_TEST_QDRANT_BIN` (the server), `KEYHOLE_TEST_QDRANT_URL` (gRPC,
//! what control's `--qdrant-url` takes) and `KEYHOLE_TEST_QDRANT_HTTP` (the
//! REST API, which the tests use to look at collections independently of
//! keyhole). A fault test runs its own [`Qdrant`] so that killing it disturbs
//! no other test.

use anyhow::{bail, Context as _};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

fn required(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the end-to-end tests with `make test` (scripts/with-services.sh starts Qdrant)")
    })
}

/// The shared server's gRPC URL (`KEYHOLE_TEST_QDRANT_URL`). Panics when unset.
pub fn shared_grpc_url() -> String {
    required("KEYHOLE_TEST_QDRANT_URL")
}

/// The shared server's REST URL (`KEYHOLE_TEST_QDRANT_HTTP`). Panics when unset.
pub fn shared_http_url() -> String {
    required("KEYHOLE_TEST_QDRANT_HTTP")
}

/// The decompressed server binary (`KEYHOLE_TEST_QDRANT_BIN`). Panics when unset.
pub fn bin() -> PathBuf {
    PathBuf::from(required("KEYHOLE_TEST_QDRANT_BIN"))
}

/// A registry namespace (and so a collection) no other test uses.
pub fn fresh_namespace(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// A private Qdrant server on loopback: its own ports and storage, fixed for
/// its lifetime, so a restart comes back where control expects it. Killed
/// when dropped.
pub struct Qdrant {
    /// The REST port.
    pub http_port: u16,
    /// The gRPC port.
    pub grpc_port: u16,
    /// Storage, snapshots and the log.
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Qdrant {
    /// Picks free ports and a storage directory; starts nothing yet.
    pub fn reserve() -> anyhow::Result<Qdrant> {
        // Never ephemeral ports: a restart must find them still free.
        let http_port = keyhole_testkit::ports::fixed_port()?;
        let grpc_port = keyhole_testkit::ports::fixed_port()?;
        Ok(Qdrant {
            http_port,
            grpc_port,
            dir: tempfile::tempdir()?,
            child: None,
        })
    }

    /// Reserves and starts one.
    pub async fn start_new() -> anyhow::Result<Qdrant> {
        let mut q = Qdrant::reserve()?;
        q.start().await?;
        Ok(q)
    }

    /// The gRPC URL (control's `--qdrant-url`).
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// The REST URL.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Whether it runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Starts the server (again) on its ports and storage and waits until
    /// `GET /` answers.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        let root = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("qdrant.log"))?;
        let child = Command::new(bin())
            .current_dir(root)
            .env("QDRANT__SERVICE__HOST", "127.0.0.1")
            .env("QDRANT__SERVICE__HTTP_PORT", self.http_port.to_string())
            .env("QDRANT__SERVICE__GRPC_PORT", self.grpc_port.to_string())
            .env("QDRANT__TELEMETRY_DISABLED", "true")
            .env("QDRANT__STORAGE__STORAGE_PATH", root.join("storage"))
            .env("QDRANT__STORAGE__SNAPSHOTS_PATH", root.join("snapshots"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin().display()))?;
        self.child = Some(child);
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if !self.is_running() {
                bail!("qdrant exited early: {}", self.log_tail());
            }
            if let Ok(r) = client.get(self.http_url()).send().await {
                if r.status().is_success()
                    && r.text().await.unwrap_or_default().contains("\"version\"")
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "qdrant did not answer on {}: {}",
                    self.http_url(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills the server with SIGKILL (a crash) and waits for it.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill().await.context("killing qdrant")?;
        }
        Ok(())
    }

    /// Deletes its storage (call while it is stopped): the next start is a
    /// fresh, empty server.
    pub fn wipe(&self) -> anyhow::Result<()> {
        for d in ["storage", "snapshots"] {
            let p = self.dir.path().join(d);
            if p.exists() {
                std::fs::remove_dir_all(&p)?;
            }
        }
        Ok(())
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("qdrant.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// The number of points of `collection` on the server at `http_url`, read
/// through Qdrant's REST API; `None` when the collection does not exist.
pub async fn points(http_url: &str, collection: &str) -> anyhow::Result<Option<u64>> {
    let resp = reqwest::get(format!("{http_url}/collections/{collection}")).await?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let status = resp.status();
    let body: serde_json::Value = resp.json().await?;
    if !status.is_success() {
        bail!("GET /collections/{collection}: {status} {body}");
    }
    // `points_count` can lag a write by a moment; an exact count does not.
    let count: serde_json::Value = reqwest::Client::new()
        .post(format!("{http_url}/collections/{collection}/points/count"))
        .json(&serde_json::json!({"exact": true}))
        .send()
        .await?
        .json()
        .await?;
    count["result"]["count"]
        .as_u64()
        .map(Some)
        .with_context(|| format!("count of {collection}: {count}"))
}

/// Deletes `collection` through the REST API, behind control's back.
pub async fn delete_collection(http_url: &str, collection: &str) -> anyhow::Result<()> {
    let resp = reqwest::Client::new()
        .delete(format!("{http_url}/collections/{collection}"))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("DELETE /collections/{collection}: {}", resp.status());
    }
    Ok(())
}
