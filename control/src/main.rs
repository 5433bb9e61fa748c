//! `keyhole`: the control binary.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use keyhole_control::alias::{AliasStore, RedbStore, RedisStore, StoreConfig};
use keyhole_control::embed::{Embedder, EmbedderConfig};
use keyhole_core::alias::Taxonomy;
use keyhole_control::resolve::Resolver;
use keyhole_control::server::{self, AppState};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "keyhole", version, about = "keyhole control: candidate sets and id aliases for the keyhole Envoy filter")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct EmbedderArgs {
    /// Base URL of an OpenAI-compatible embeddings endpoint.
    #[arg(long, env = "KEYHOLE_EMBEDDER_URL", default_value = "http://127.0.0.1:8089")]
    embedder_url: String,
    /// Model name used for user turns.
    #[arg(long, env = "KEYHOLE_QUERY_MODEL", default_value = "e5-query")]
    query_model: String,
    /// Model name used for tool texts.
    #[arg(long, env = "KEYHOLE_DOCUMENT_MODEL", default_value = "e5-passage")]
    document_model: String,
    /// Timeout of one embedder request, in milliseconds.
    #[arg(long, env = "KEYHOLE_EMBEDDER_TIMEOUT_MS", default_value_t = 10_000)]
    embedder_timeout_ms: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the filter's API on a Unix socket.
    Serve {
        /// Path of the Unix socket (created with mode 0660).
        #[arg(long, env = "KEYHOLE_SOCKET")]
        socket: PathBuf,
        /// Directory for durable state (embedding cache, indexes, aliases).
        #[arg(long, env = "KEYHOLE_DATA_DIR", default_value = ".keyhole")]
        data_dir: PathBuf,
        #[command(flatten)]
        embedder: EmbedderArgs,
        #[command(flatten)]
        aliases: AliasArgs,
    },
}

#[derive(clap::Args, Clone)]
struct AliasArgs {
    /// Shared alias store for several replicas (`redis://host:port/`); the
    /// embedded store in the data directory when absent.
    #[arg(long, env = "KEYHOLE_REDIS_URL")]
    redis_url: Option<String>,
    /// Key prefix in Redis (one per deployment).
    #[arg(long, env = "KEYHOLE_REDIS_PREFIX", default_value = "keyhole")]
    redis_prefix: String,
    /// Seconds after which an idle session's aliases expire.
    #[arg(long, env = "KEYHOLE_SESSION_TTL_SECS", default_value_t = 8 * 3600)]
    session_ttl_secs: u64,
}

async fn alias_store(args: &AliasArgs, data_dir: &std::path::Path) -> anyhow::Result<Arc<dyn AliasStore>> {
    let config = StoreConfig::new(Arc::new(Taxonomy::default()), Duration::from_secs(args.session_ttl_secs));
    Ok(match &args.redis_url {
        Some(url) => Arc::new(
            RedisStore::connect(url, &args.redis_prefix, config).await.context("connecting to the Redis alias store")?,
        ),
        None => Arc::new(RedbStore::open(&data_dir.join("aliases"), config).context("opening the alias store")?),
    })
}

/// Drops idle sessions once a minute.
fn spawn_sweeper(store: Arc<dyn AliasStore>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tick.tick().await;
            match store.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(expired = n, "expired idle alias sessions"),
                Err(e) => tracing::warn!(error = %e, "alias session sweep failed"),
            }
        }
    });
}

fn embedder(args: &EmbedderArgs, cache: Option<PathBuf>) -> anyhow::Result<Arc<Embedder>> {
    let config = EmbedderConfig {
        url: args.embedder_url.clone(),
        query_model: args.query_model.clone(),
        document_model: args.document_model.clone(),
        timeout: Duration::from_millis(args.embedder_timeout_ms),
        cache_path: cache,
        ..EmbedderConfig::default()
    };
    Ok(Arc::new(Embedder::try_new(config).context("starting the embedder client")?))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { socket, data_dir, embedder: args, aliases } => {
            let embedder = embedder(&args, Some(data_dir.join("embeddings.cache")))?;
            let aliases = alias_store(&aliases, &data_dir).await?;
            spawn_sweeper(aliases.clone());
            let state = AppState { resolver: Arc::new(Resolver::new(embedder)), aliases };
            server::serve_unix(&socket, server::router(state), server::shutdown_signal())
                .await
                .with_context(|| format!("serving on {}", socket.display()))?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KEYHOLE_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("keyhole: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("keyhole: {err:#}");
            ExitCode::FAILURE
        }
    }
}
