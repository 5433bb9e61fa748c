//! `make run` keeps its state in the `RUN_DIR` the user chose: the real
//! `scripts/run.sh` (what `make run` calls after `make build`) as a child
//! process, stopped as Ctrl-C stops it and started again on the same
//! directory, decodes the aliases it issued before the restart.
//!
//! The upstreams are the test's own (`LLM_UPSTREAM`, `HMS_UPSTREAM`), so
//! run.sh starts no demo upstreams on their fixed ports; the embedder is the
//! one `scripts/with-services.sh` exported (`KEYHOLE_EMBEDDER_URL`), so run.sh
//! does not start services of its own.

use keyhole_e2e::paths;
use keyhole_e2e::upstream::{Canned, Upstream};
use keyhole_testkit::ports;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SESSION_HEADER: &str = "x-keyhole-session";
const UUID: &str = "5d0c7e2a-41b3-4f6e-9a8d-2c7b1e0f3a94";
/// How long one start may take: control indexes the catalog registry with the
/// real embedder before run.sh starts Envoy (cached in `RUN_DIR` the second
/// time). About 15 s alone; the embedder is shared with the tests running
/// beside this one, and CI once saw the first start pass 180 s. run.sh itself
/// waits at most ~300 s for the index before it starts Envoy anyway, so this
/// deadline is past that: what this test checks is the aliases across a
/// restart, not how fast a loaded machine indexes.
const START_TIMEOUT: Duration = Duration::from_secs(420);
/// How long run.sh may take to stop its children after the signal.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether any process of process group `pgid` is alive.
fn group_alive(pgid: u32) -> bool {
    Command::new("kill")
        .args(["-0", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Sends `signal` (`INT`, `TERM`, `KILL`) to process group `pgid`.
fn signal_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// The last `bytes` of the file at `path` (empty when it cannot be read).
fn tail(path: &Path, bytes: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(bytes);
    text.get(start..).unwrap_or(&text).to_owned()
}

/// `scripts/run.sh` in a process group of its own, stopped (the whole group)
/// when dropped, also when the test fails.
struct RunSh {
    child: Child,
    log: PathBuf,
}

impl RunSh {
    /// Starts run.sh on `run_dir` and the given ports and upstreams; its
    /// output goes to `log` (appended).
    fn start(run_dir: &Path, ports: [u16; 3], llm: &Upstream, hms: &Upstream, log: &Path) -> RunSh {
        // Fails with instructions when the suite does not run under with-services.sh.
        let embedder = paths::embedder_url();
        let [llm_port, hms_port, admin_port] = ports;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(paths::repo().join("scripts/run.sh"))
            .env("RUN_DIR", run_dir)
            .env("KEYHOLE_EMBEDDER_URL", embedder)
            .env("LLM_PORT", llm_port.to_string())
            .env("HMS_PORT", hms_port.to_string())
            .env("ADMIN_PORT", admin_port.to_string())
            .env("LLM_UPSTREAM", llm.addr.to_string())
            .env("HMS_UPSTREAM", hms.addr.to_string())
            // run.sh's own defaults: a local LLM upstream, the embedded stores,
            // its filter configurations.
            .env_remove("LLM_PROVIDER")
            .env_remove("KEYHOLE_REDIS_URL")
            .env_remove("KEYHOLE_QDRANT_URL")
            .env_remove("LLM_FILTER_CONFIG")
            .env_remove("HMS_FILTER_CONFIG")
            .env_remove("LISTEN_ADDRESS")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .expect("starting scripts/run.sh");
        RunSh {
            child,
            log: log.to_owned(),
        }
    }

    /// Its output so far, the last 6 KiB.
    fn log_tail(&self) -> String {
        tail(&self.log, 6144)
    }

    /// Waits until Envoy's admin API answers `/ready` on `admin_port`; past
    /// the deadline fails with run.sh's output and control's log (the index
    /// state and the embedder's errors are there).
    async fn wait_ready(&mut self, run_dir: &Path, admin_port: u16) {
        let started = Instant::now();
        let deadline = Instant::now() + START_TIMEOUT;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "run.sh exited with {status} before Envoy was ready:\n{}",
                    self.log_tail()
                );
            }
            let ready = http
                .get(format!("http://127.0.0.1:{admin_port}/ready"))
                .send()
                .await;
            if matches!(ready, Ok(r) if r.status().is_success()) {
                eprintln!("run.sh ready in {:?}", started.elapsed());
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Envoy not ready within {START_TIMEOUT:?}:\n{}\ncontrol.log:\n{}",
                self.log_tail(),
                tail(&run_dir.join("logs/control.log"), 4096)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Stops it as Ctrl-C does (SIGINT to the group), escalating to SIGTERM
    /// and SIGKILL past [`STOP_TIMEOUT`]; returns whether the group was gone
    /// after SIGINT alone.
    fn stop(&mut self) -> bool {
        let pgid = self.child.id();
        for signal in ["INT", "TERM", "KILL"] {
            signal_group(pgid, signal);
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline {
                let exited = matches!(self.child.try_wait(), Ok(Some(_)));
                if exited && !group_alive(pgid) {
                    return signal == "INT";
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.wait();
        false
    }
}

impl Drop for RunSh {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) && !group_alive(self.child.id()) {
            return;
        }
        self.stop();
    }
}

/// One GET through the HMS listener in the session; returns status and body.
async fn get(hms_port: u16, path: &str) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{hms_port}{path}"))
        .header(SESSION_HEADER, "rundir")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{path}: {status}: not JSON: {text}")),
    )
}

/// `make run` across a restart on one `RUN_DIR`: an alias issued before run.sh
/// was stopped (Ctrl-C: SIGINT to its process group, which stops every child)
/// is in the alias store file under `RUN_DIR/data`, and after run.sh starts
/// again on that directory it decodes to the raw UUID on the way to HMS and
/// HMS's answer gets the same alias; an alias of the same shape that was
/// never issued is refused (4xx naming it) and never reaches HMS.
#[tokio::test]
async fn make_run_keeps_its_aliases_in_the_run_dir_across_restarts() {
    let run_dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("run.log");
    let llm = Upstream::start().await.unwrap();
    let hms = Upstream::start().await.unwrap();
    let search = format!(
        r#"{{"data":[{{"id":"{UUID}","fhirId":"pat-004417","name":{{"display":"Schmidt, Anna"}}}}]}}"#
    );
    hms.set("/api/v2/patients/search", Canned::json(search.into_bytes()));
    let detail = format!(r#"{{"id":"{UUID}","fhirId":"pat-004417","birthDate":"1952-08-14"}}"#);
    hms.set(
        &format!("/api/v2/patients/{UUID}"),
        Canned::json(detail.into_bytes()),
    );
    // Below the ephemeral range: run.sh binds them a minute from now, and
    // again after the restart, and no other test's socket may take them in
    // between (CI once saw the HMS port refused after run.sh was ready).
    let ports = [(); 3].map(|()| ports::fixed_port().unwrap());
    let [_, hms_port, admin_port] = ports;

    // First run: the search answer's UUID comes back as an alias.
    let mut run = RunSh::start(run_dir.path(), ports, &llm, &hms, &log);
    run.wait_ready(run_dir.path(), admin_port).await;
    let (status, body) = get(hms_port, "/api/v2/patients/search?q=anna").await;
    assert_eq!(status, 200, "{body}\n{}", run.log_tail());
    let alias = body["data"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {body}"))
        .to_owned();
    let shape = regex::Regex::new(r"^patient-[a-z0-9]{4}-[0-9]{3}$").unwrap();
    assert!(shape.is_match(&alias), "a patient alias, not {alias:?}");
    assert!(
        !body.to_string().contains(UUID),
        "the raw id reached the client: {body}"
    );
    assert!(
        run.stop(),
        "SIGINT to the group stopped run.sh and its children:\n{}",
        run.log_tail()
    );
    drop(run);
    // `keyhole serve --data-dir RUN_DIR/data` opens the embedded store in `aliases/`.
    let store = run_dir.path().join("data/aliases/aliases.redb");
    let size = std::fs::metadata(&store).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0, "{} holds the alias store", store.display());

    // Second run on the same RUN_DIR: the alias decodes.
    hms.clear();
    let mut run = RunSh::start(run_dir.path(), ports, &llm, &hms, &log);
    run.wait_ready(run_dir.path(), admin_port).await;
    let (status, body) = get(hms_port, &format!("/api/v2/patients/{alias}")).await;
    assert_eq!(status, 200, "{body}\n{}", run.log_tail());
    let seen: Vec<String> = hms.seen().into_iter().map(|r| r.uri).collect();
    assert_eq!(
        seen,
        [format!("/api/v2/patients/{UUID}")],
        "HMS got the raw UUID"
    );
    assert_eq!(
        body["id"],
        alias.as_str(),
        "the same alias after the restart: {body}"
    );
    assert!(!body.to_string().contains(UUID), "{body}");

    // A fresh alias of the same shape (the same map, a number not issued).
    let number: u32 = alias.rsplit('-').next().unwrap().parse().unwrap();
    let fresh = format!("{}-{:03}", alias.rsplit_once('-').unwrap().0, number + 1);
    hms.clear();
    let (status, body) = get(hms_port, &format!("/api/v2/patients/{fresh}")).await;
    assert!((400..500).contains(&status), "{fresh}: {status} {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&fresh),
        "the refusal names {fresh}: {body}"
    );
    assert!(
        hms.seen().is_empty(),
        "{fresh} reached HMS: {:?}",
        hms.seen().iter().map(|r| &r.uri).collect::<Vec<_>>()
    );
    assert!(
        run.stop(),
        "SIGINT to the group stopped run.sh and its children:\n{}",
        run.log_tail()
    );
}
