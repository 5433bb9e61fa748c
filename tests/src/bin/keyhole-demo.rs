//! `keyhole-demo`: the far side of the network for local runs.
//!
//! - an LLM upstream that echoes each request body back, so a client sees
//!   exactly what the model would have received;
//! - an HMS upstream that serves the catalog's HMS samples.

use clap::Parser;
use keyhole_e2e::upstream::{Canned, Upstream};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "keyhole-demo",
    about = "Demo upstreams for keyhole: an echoing LLM and an HMS serving samples"
)]
struct Args {
    /// Address of the echoing LLM upstream.
    #[arg(long, default_value = "127.0.0.1:18080")]
    llm: SocketAddr,
    /// Address of the HMS upstream.
    #[arg(long, default_value = "127.0.0.1:18081")]
    hms: SocketAddr,
    /// Directory of HMS sample bodies (`NN_name.json`).
    #[arg(long)]
    hms_samples: Option<PathBuf>,
}

/// The HMS path each sample is served at.
pub const SAMPLE_ROUTES: &[(&str, &str)] = &[
    ("01_patients.search.json", "/api/v2/patients"),
    (
        "02_patient.detail.json",
        "/api/v2/patients/039b70b8-92f7-44b7-9c91-4e3f0e900c71",
    ),
    ("03_appointments.list.json", "/api/v2/appointments"),
    ("04_visit.detail.json", "/api/v2/visit"),
    ("05_prescription.detail.json", "/api/v2/prescription"),
    ("06_task-group.detail.json", "/api/v2/task-group"),
    (
        "07_appointment.create.response.json",
        "/api/v2/appointments/create",
    ),
    (
        "08_error.appointment-conflict.json",
        "/api/v2/appointments/conflict",
    ),
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _llm = Upstream::start_on(args.llm).await?;
    let hms = Upstream::start_on(args.hms).await?;
    if let Some(dir) = &args.hms_samples {
        for (file, path) in SAMPLE_ROUTES {
            let body = std::fs::read(dir.join(file))?;
            hms.set(path, Canned::json(body));
        }
    }
    eprintln!(
        "keyhole-demo: echo LLM on http://{}, HMS on http://{}",
        args.llm, args.hms
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}
