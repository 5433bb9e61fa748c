//! `keyhole`: the control binary.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use keyhole_control::alias::{
    AliasStore, RedbStore, RedisEndpoint, RedisOptions, RedisStore, StoreConfig,
};
use keyhole_control::config::{self as settings, ControlConfig, Scope};
use keyhole_control::embed::{Embedder, EmbedderConfig};
use keyhole_control::eval::{self, EvalOptions, Mode};
use keyhole_control::index::{Indexer, MemoryStore, QdrantStore, VectorStore};
use keyhole_control::load::{load_registry, LoadedRegistry};
use keyhole_control::resolve::{Resolver, ResolverSettings, StartupIndex};
use keyhole_control::server::{self, AppState};
use keyhole_core::alias::Taxonomy;
use keyhole_core::proto::tools::{ResolveRequest, ToolDescriptor};
use keyhole_core::tools::rank::config::{RankConfig, RankSettings};
use keyhole_core::tools::rank::meta::{NameMapping, Overlay, ToolMeta};
use keyhole_core::tools::rank::pipeline::search;
use keyhole_core::Phase;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "keyhole",
    version,
    about = "keyhole control: candidate sets and id aliases for the keyhole Envoy filter"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// === settings ===
//
// The flags, environment variables and defaults of every setting come from
// `keyhole_control::config::SETTINGS`; these structs only read them back.

/// A text setting (clap enforces required ones and fills defaults).
fn text(m: &clap::ArgMatches, key: &str) -> Option<String> {
    m.get_one::<String>(key).cloned()
}

/// A setting that clap fills (a default, or required).
fn given<T: Clone + Send + Sync + 'static>(
    m: &clap::ArgMatches,
    key: &str,
) -> Result<T, clap::Error> {
    m.get_one::<T>(key).cloned().ok_or_else(|| {
        clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            format!("missing setting {key}\n"),
        )
    })
}

/// Derives `clap::Args` for a struct from the settings of one scope.
macro_rules! settings_args {
    ($ty:ty, $scope:expr) => {
        impl clap::Args for $ty {
            fn augment_args(cmd: clap::Command) -> clap::Command {
                settings::augment(cmd, $scope)
            }
            fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
                settings::augment(cmd, $scope)
            }
        }
    };
}

#[derive(Clone)]
struct EmbedderArgs {
    embedder_url: String,
    query_model: String,
    document_model: String,
    embedder_timeout_ms: u64,
    requests_in_flight: u64,
    batch_size: u64,
    query_cache: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the filter's API on a Unix socket.
    #[command(args_override_self = true)]
    Serve {
        /// TOML configuration file: its settings come first, environment
        /// variables override them, and flags override both.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        serve: ServeArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Index a registry (tools.json, tools.jsonl, or a full LLM request body).
    Index {
        /// The registry file.
        file: PathBuf,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Rank the indexed registry's tools for a text ("is there a tool for X?").
    Search {
        /// What the tool should do.
        query: String,
        /// How many tools to list.
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Registry file to search (default: the one `keyhole index` saved).
        #[arg(long)]
        tools: Option<PathBuf>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Dry-run one LLM request: the tools the model would see, why, and the bytes.
    /// The registry is indexed first and the retrieval deadline is at least
    /// 10 s, so the answer is the hybrid one a warm server gives.
    Resolve {
        /// The LLM request body.
        #[arg(long)]
        request: PathBuf,
        /// Session name (for the audit trail).
        #[arg(long)]
        session: Option<String>,
        /// Agent phase.
        #[arg(long, default_value = "planner")]
        phase: Phase,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Measure retrieval on labelled queries.
    Eval {
        /// The registry (tools.json or tools.jsonl).
        #[arg(long)]
        tools: PathBuf,
        /// Labelled queries (JSON lines: id, query, gold, optional forbidden).
        #[arg(long)]
        queries: PathBuf,
        /// The k of recall@k.
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Modes, side by side on the same embeddings.
        #[arg(long, value_delimiter = ',', default_value = "hybrid,cosine,rrf")]
        mode: Vec<Mode>,
        /// Evaluate an evenly spaced subset of about this many queries.
        #[arg(long)]
        sample: Option<usize>,
        /// Dataset name in the report (default: the queries file's directory name).
        #[arg(long)]
        name: Option<String>,
        /// Merge the figures into this JSON file (replacing this dataset's).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Write the tune part's misses in the first mode to this file (JSON
        /// lines: id, turn, each missing gold tool with its place in the
        /// ranking, tools surfaced). The check part's misses are never written.
        #[arg(long)]
        misses: Option<PathBuf>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Check a configuration file: every problem, with its field's path.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Exit 0 when control answers `/healthz` on its socket (container healthchecks).
    Health {
        #[command(flatten)]
        socket: SocketArg,
    },
    /// What keyhole did (or, in shadow, would have done) over a window of
    /// the audit trail of a running control (read over its socket): per
    /// phase and tool, turns, tools surfaced, bytes saved, recall from the
    /// model's calls, misses and why. No prompt text, id or value.
    Report {
        #[command(flatten)]
        socket: SocketArg,
        /// From: milliseconds since the Unix epoch, or an age (`30m`, `24h`, `7d`).
        #[arg(long)]
        since: Option<String>,
        /// To (exclusive), in the same forms; default now.
        #[arg(long)]
        until: Option<String>,
        /// An Envoy admin `/stats` text (a file) for the filter's counters:
        /// ids aliased, responses withheld by reason, HMS shadow counts.
        #[arg(long)]
        envoy_stats: Option<PathBuf>,
        /// Print JSON (for dashboards).
        #[arg(long)]
        json: bool,
    },
}

/// `--since`/`--until`: milliseconds since the epoch, or an age before `now_ms`.
fn instant_ms(value: &str, now_ms: u64) -> anyhow::Result<u64> {
    if let Ok(ms) = value.parse::<u64>() {
        return Ok(ms);
    }
    let (n, unit) = value.split_at(value.len().saturating_sub(1));
    let n: u64 = n
        .parse()
        .with_context(|| format!("{value:?} is neither milliseconds nor an age like 24h"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => anyhow::bail!("{value:?}: an age ends in s, m, h or d"),
    };
    Ok(now_ms.saturating_sub(secs * 1000))
}

/// `GET path` over control's socket; the answer's body (a 200 only).
async fn get(socket: &std::path::Path, path: &str) -> anyhow::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut stream = tokio::net::UnixStream::connect(socket).await?;
        let head =
            format!("GET {path} HTTP/1.1\r\nhost: keyhole-control\r\nconnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(30), ask)
        .await
        .context("control did not answer within 30 s")?
        .with_context(|| format!("connecting to {}", socket.display()))?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("control's answer has no body")?;
    let (head, body) = answer.split_at(split + 4);
    let status = String::from_utf8_lossy(head);
    anyhow::ensure!(
        status.starts_with("HTTP/1.1 200"),
        "control answered: {}",
        status.lines().next().unwrap_or("")
    );
    anyhow::ensure!(
        !status
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "control answered a chunked body"
    );
    Ok(body.to_vec())
}

async fn report(
    socket: &std::path::Path,
    since: Option<&str>,
    until: Option<&str>,
    envoy_stats: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<()> {
    use keyhole_control::report::{FilterCounters, Report, SessionTrail};
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let since_ms = since.map_or(Ok(0), |v| instant_ms(v, now_ms))?;
    let until_ms = until.map_or(Ok(now_ms.saturating_add(1)), |v| instant_ms(v, now_ms))?;
    let body = get(
        socket,
        &format!("/v1/audit?since_ms={since_ms}&until_ms={until_ms}"),
    )
    .await?;
    let trail: Vec<SessionTrail> =
        serde_json::from_slice(&body).context("reading control's audit trail")?;
    let mut report = Report::of(&trail, since_ms, until_ms);
    if let Some(path) = envoy_stats {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        report.filter = Some(FilterCounters::from_stats(&text));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Report every error in FILE (exit 1), or print the settings it makes,
    /// and check the alias taxonomy it names (or `--taxonomy FILE`): its
    /// kind count and the digest the filter must report.
    ///
    /// The built-in id kinds are the file core/src/alias/taxonomy/builtin.json,
    /// compiled in; a taxonomy file adds to them in the same schema (a kind of
    /// the same name replaces the built-in one, `{}` is the built-in taxonomy).
    Check {
        /// The TOML configuration file.
        #[arg(required_unless_present = "taxonomy")]
        file: Option<PathBuf>,
        /// An alias taxonomy file (JSON) to check: kinds added to the built-in
        /// ones (core/src/alias/taxonomy/builtin.json), in the same schema.
        #[arg(long)]
        taxonomy: Option<PathBuf>,
    },
}

/// `GET /healthz` over the socket, with a short timeout.
async fn health(socket: &std::path::Path) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let check = async {
        let mut stream = tokio::net::UnixStream::connect(socket).await?;
        stream
            .write_all(
                b"GET /healthz HTTP/1.1\r\nhost: keyhole-control\r\nconnection: close\r\n\r\n",
            )
            .await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(2), check)
        .await
        .context("control did not answer within 2 s")?
        .with_context(|| format!("connecting to {}", socket.display()))?;
    anyhow::ensure!(
        answer.starts_with("HTTP/1.1 200"),
        "control answered: {}",
        answer.lines().next().unwrap_or("")
    );
    Ok(())
}

/// The settings of every engine command ([`Scope::Common`]).
#[derive(Clone)]
struct CommonArgs {
    data_dir: PathBuf,
    embedder: EmbedderArgs,
    engine: EngineArgs,
}

#[derive(Clone)]
struct EngineArgs {
    overlay: Option<PathBuf>,
    rank_config: Option<PathBuf>,
    qdrant_url: Option<String>,
    qdrant_replication_factor: u64,
    namespace: String,
    retrieval_timeout_ms: u64,
    max_registries: u64,
}

settings_args!(CommonArgs, Scope::Common);

impl clap::FromArgMatches for CommonArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(CommonArgs {
            data_dir: PathBuf::from(given::<String>(m, "data_dir")?),
            embedder: EmbedderArgs {
                embedder_url: given(m, "embedder.url")?,
                query_model: given(m, "embedder.query_model")?,
                document_model: given(m, "embedder.document_model")?,
                embedder_timeout_ms: given(m, "embedder.timeout_ms")?,
                requests_in_flight: given(m, "embedder.requests_in_flight")?,
                batch_size: given(m, "embedder.batch_size")?,
                query_cache: given(m, "embedder.query_cache")?,
            },
            engine: EngineArgs {
                overlay: text(m, "retrieval.overlay").map(PathBuf::from),
                rank_config: text(m, "retrieval.rank_config").map(PathBuf::from),
                qdrant_url: text(m, "retrieval.qdrant_url"),
                qdrant_replication_factor: given(m, "retrieval.qdrant_replication_factor")?,
                namespace: given(m, "retrieval.namespace")?,
                retrieval_timeout_ms: given(m, "retrieval.timeout_ms")?,
                max_registries: given(m, "retrieval.max_registries")?,
            },
        })
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// The settings of `serve` only ([`Scope::Serve`]).
#[derive(Clone)]
struct ServeArgs {
    socket: PathBuf,
    registry: Option<PathBuf>,
    aliases: AliasArgs,
}

#[derive(Clone)]
struct AliasArgs {
    redis_url: Option<String>,
    redis_sentinel: Option<String>,
    redis_master_name: Option<String>,
    min_replicas_acked: u64,
    redis_timeout_ms: u64,
    redis_prefix: String,
    session_ttl_secs: u64,
    taxonomy: Option<PathBuf>,
}

settings_args!(ServeArgs, Scope::Serve);

impl clap::FromArgMatches for ServeArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(ServeArgs {
            socket: PathBuf::from(given::<String>(m, "socket")?),
            registry: text(m, "retrieval.registry").map(PathBuf::from),
            aliases: AliasArgs {
                redis_url: text(m, "aliases.redis_url"),
                redis_sentinel: text(m, "aliases.redis_sentinel"),
                redis_master_name: text(m, "aliases.redis_master_name"),
                min_replicas_acked: given(m, "aliases.min_replicas_acked")?,
                redis_timeout_ms: given(m, "aliases.redis_timeout_ms")?,
                redis_prefix: given(m, "aliases.redis_prefix")?,
                session_ttl_secs: given(m, "aliases.session_ttl_secs")?,
                taxonomy: text(m, "aliases.taxonomy").map(PathBuf::from),
            },
        })
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// `health`'s one setting: the socket, as `serve` defines it.
#[derive(Clone)]
struct SocketArg {
    socket: PathBuf,
}

impl clap::Args for SocketArg {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        settings::SETTINGS
            .iter()
            .filter(|s| s.key == "socket")
            .fold(cmd, |cmd, s| cmd.arg(s.arg()))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for SocketArg {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(SocketArg {
            socket: PathBuf::from(given::<String>(m, "socket")?),
        })
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// The alias taxonomy `--taxonomy` names, or the built-in one.
fn taxonomy(args: &AliasArgs) -> anyhow::Result<Arc<Taxonomy>> {
    let taxonomy = match &args.taxonomy {
        Some(path) => settings::load_taxonomy(path).context("loading the alias taxonomy")?,
        None => Taxonomy::default(),
    };
    let file = args
        .taxonomy
        .as_ref()
        .map_or_else(|| "built-in".to_owned(), |p| p.display().to_string());
    tracing::info!(digest = %taxonomy.digest(), kinds = taxonomy.kind_count(), %file, "alias taxonomy");
    Ok(Arc::new(taxonomy))
}

async fn alias_store(
    args: &AliasArgs,
    data_dir: &std::path::Path,
    taxonomy: Arc<Taxonomy>,
) -> anyhow::Result<Arc<dyn AliasStore>> {
    let config = StoreConfig::new(taxonomy, Duration::from_secs(args.session_ttl_secs));
    let endpoint = RedisEndpoint::from_settings(
        args.redis_url.as_deref(),
        args.redis_sentinel.as_deref(),
        args.redis_master_name.as_deref(),
        args.min_replicas_acked,
    )?;
    let options = RedisOptions {
        min_replicas_acked: u32::try_from(args.min_replicas_acked)
            .context("aliases.min_replicas_acked: too large")?,
        deadline: Duration::from_millis(args.redis_timeout_ms),
    };
    Ok(match endpoint {
        Some(endpoint) => {
            let shown = match &endpoint {
                RedisEndpoint::Url(_) => "url".to_owned(),
                RedisEndpoint::Sentinel { sentinels, master } => {
                    format!("sentinel ({} nodes, primary {master:?})", sentinels.len())
                }
            };
            let store = RedisStore::connect_to(endpoint, &args.redis_prefix, config, options)
                .await
                .context("connecting to the Redis alias store")?;
            tracing::info!(endpoint = %shown, min_replicas_acked = options.min_replicas_acked, "alias store: redis");
            Arc::new(store)
        }
        None => Arc::new(
            RedbStore::open(&data_dir.join("aliases"), config)
                .context("opening the alias store")?,
        ),
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
        batch_size: usize::try_from(args.batch_size).unwrap_or(usize::MAX),
        query_cache: usize::try_from(args.query_cache).unwrap_or(usize::MAX),
        requests_in_flight: usize::try_from(args.requests_in_flight).unwrap_or(usize::MAX),
        ..EmbedderConfig::default()
    };
    Ok(Arc::new(
        Embedder::try_new(config).context("starting the embedder client")?,
    ))
}

/// The registry `keyhole index` saved for `keyhole search`.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedRegistry {
    tools: Vec<ToolDescriptor>,
    overlay: Option<Vec<ToolMeta>>,
    names: Option<NameMapping>,
}

fn saved_registry_path(data_dir: &Path, namespace: &str) -> PathBuf {
    data_dir
        .join("registries")
        .join(format!("{namespace}.json"))
}

/// Builds the resolver: ranking settings, overlay, store, indexer.
/// `names` overrides the configured name mapping (registries whose names are ids).
async fn resolver(
    data_dir: &Path,
    args: &EmbedderArgs,
    engine: &EngineArgs,
    overlay: Option<Overlay>,
    names: Option<NameMapping>,
) -> anyhow::Result<Resolver> {
    let mut settings: RankSettings = match &engine.rank_config {
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_slice(&bytes).with_context(|| format!("{}", path.display()))?
        }
        None => RankSettings::default(),
    };
    if let Some(names) = names {
        settings.names = names;
    }
    let rank = RankConfig::try_new(settings).context("ranking settings")?;
    let overlay = match (&engine.overlay, overlay) {
        (Some(path), _) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Some(Overlay::from_json(&bytes).with_context(|| format!("{}", path.display()))?)
        }
        (None, from_file) => from_file,
    };
    let store: Arc<dyn VectorStore> = match &engine.qdrant_url {
        Some(url) => Arc::new(
            QdrantStore::connect(url, Duration::from_secs(5))
                .context("connecting to Qdrant")?
                .with_replication_factor(
                    u32::try_from(engine.qdrant_replication_factor).unwrap_or(u32::MAX),
                ),
        ),
        None => Arc::new(
            MemoryStore::open(&data_dir.join("index")).context("opening the vector index")?,
        ),
    };
    let embedder = embedder(args, Some(data_dir.join("embeddings.cache")))?;
    let indexer =
        Indexer::try_new(embedder, store, &engine.namespace).context("registry namespace")?;
    let settings = ResolverSettings {
        retrieval_timeout: Duration::from_millis(engine.retrieval_timeout_ms),
        max_registries: usize::try_from(engine.max_registries).unwrap_or(usize::MAX),
        ..ResolverSettings::default()
    };
    Ok(Resolver::new(
        Arc::new(indexer),
        Arc::new(rank),
        overlay.map(Arc::new),
        settings,
    ))
}

async fn resolver_for(
    common: &CommonArgs,
    loaded: &mut LoadedRegistry,
) -> anyhow::Result<Resolver> {
    resolver(
        &common.data_dir,
        &common.embedder,
        &common.engine,
        loaded.overlay.take(),
        loaded.names.take(),
    )
    .await
}

fn load(path: &Path) -> anyhow::Result<LoadedRegistry> {
    load_registry(path, &NameMapping::default())
        .with_context(|| format!("loading the registry {}", path.display()))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Health { socket } => health(&socket.socket).await?,
        Command::Report {
            socket,
            since,
            until,
            envoy_stats,
            json,
        } => {
            report(
                &socket.socket,
                since.as_deref(),
                until.as_deref(),
                envoy_stats.as_deref(),
                json,
            )
            .await?
        }
        Command::Config {
            action: ConfigAction::Check { file, taxonomy },
        } => {
            // The taxonomy files to report: the configuration's, and `--taxonomy`.
            let mut taxonomies: Vec<PathBuf> = Vec::new();
            if let Some(file) = &file {
                let config = ControlConfig::load(file)
                    .map_err(|e| anyhow::anyhow!("{}:\n{e}", file.display()))?;
                println!("{}: ok ({} settings)", file.display(), config.len());
                taxonomies.extend(config.value("aliases.taxonomy").map(PathBuf::from));
            }
            if let Some(t) = taxonomy {
                if !taxonomies.contains(&t) {
                    taxonomies.push(t);
                }
            }
            for path in &taxonomies {
                let t = settings::load_taxonomy(path)?;
                println!(
                    "{}: ok ({} kinds, digest {})",
                    path.display(),
                    t.kind_count(),
                    t.digest()
                );
            }
            if taxonomies.is_empty() {
                let t = Taxonomy::default();
                println!(
                    "taxonomy: built-in ({} kinds, digest {})",
                    t.kind_count(),
                    t.digest()
                );
            }
        }
        // `--config` was expanded into flags before parsing.
        Command::Serve {
            config: _,
            serve:
                ServeArgs {
                    socket,
                    registry,
                    aliases,
                },
            common,
        } => {
            // First: a bad taxonomy file stops control before it indexes anything.
            let taxonomy = taxonomy(&aliases)?;
            let (resolver, configured) = match &registry {
                Some(path) => {
                    let mut loaded = load(path)?;
                    let resolver = Arc::new(resolver_for(&common, &mut loaded).await?);
                    resolver.expect_registry(loaded.tools.len());
                    (resolver, Some(loaded.tools))
                }
                None => (
                    Arc::new(
                        resolver(
                            &common.data_dir,
                            &common.embedder,
                            &common.engine,
                            None,
                            None,
                        )
                        .await?,
                    ),
                    None,
                ),
            };
            if let Some(tools) = configured {
                // Served meanwhile: `/healthz` answers 503 until this is done.
                let resolver = resolver.clone();
                tokio::spawn(async move {
                    resolver
                        .index_at_start(&tools, StartupIndex::default())
                        .await;
                });
            }
            let aliases = alias_store(&aliases, &common.data_dir, taxonomy).await?;
            spawn_sweeper(aliases.clone());
            let state = AppState { resolver, aliases };
            server::serve_unix(&socket, server::router(state), server::shutdown_signal())
                .await
                .with_context(|| format!("serving on {}", socket.display()))?;
        }
        Command::Index { file, common } => {
            let mut loaded = load(&file)?;
            let saved = SavedRegistry {
                tools: loaded.tools.clone(),
                overlay: loaded.overlay.as_ref().map(|o| o.iter().cloned().collect()),
                names: loaded.names.clone(),
            };
            let resolver = resolver_for(&common, &mut loaded).await?;
            let embedded_before = resolver.indexer().embedder().texts_embedded();
            let started = std::time::Instant::now();
            let (_, report) = resolver.prepare(&loaded.tools).await.context("indexing")?;
            let path = saved_registry_path(&common.data_dir, &common.engine.namespace);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            std::fs::write(&path, serde_json::to_vec(&saved)?)
                .with_context(|| format!("writing {}", path.display()))?;
            println!(
                "indexed {} tools into {} ({}): {} unchanged, {} upserted, {} pruned{}, {} texts embedded, {} ms",
                report.tools,
                resolver.indexer().collection(),
                resolver.indexer().store().backend(),
                report.unchanged,
                report.upserted,
                report.pruned,
                if report.rebuilt { ", rebuilt" } else { "" },
                resolver.indexer().embedder().texts_embedded() - embedded_before,
                started.elapsed().as_millis()
            );
        }
        Command::Search {
            query,
            k,
            tools,
            common,
        } => {
            let (loaded_tools, overlay, names) = match tools {
                Some(path) => {
                    let l = load(&path)?;
                    (l.tools, l.overlay, l.names)
                }
                None => {
                    let path = saved_registry_path(&common.data_dir, &common.engine.namespace);
                    let bytes = std::fs::read(&path).with_context(|| {
                        format!(
                            "reading {} (run `keyhole index FILE` first)",
                            path.display()
                        )
                    })?;
                    let saved: SavedRegistry = serde_json::from_slice(&bytes)
                        .with_context(|| format!("{}", path.display()))?;
                    let overlay = saved.overlay.map(Overlay::try_from_entries).transpose()?;
                    (saved.tools, overlay, saved.names)
                }
            };
            let resolver = resolver(
                &common.data_dir,
                &common.embedder,
                &common.engine,
                overlay,
                names,
            )
            .await?;
            let (prepared, _) = resolver.prepare(&loaded_tools).await.context("indexing")?;
            let registry = prepared.registry();
            let hits = resolver
                .turn_cosine(&prepared, &query)
                .await
                .context("retrieval")?;
            let cosine: std::collections::HashMap<&str, f32> =
                hits.iter().map(|(n, s)| (n.as_str(), *s)).collect();
            for c in search(registry, resolver.rank_config(), &query, &hits, k) {
                let id = registry
                    .by_name(&c.name)
                    .map_or(c.name.as_str(), |t| t.id.as_str());
                let cos = cosine.get(c.name.as_str()).copied().unwrap_or(0.0);
                println!("{:.4}  {id}  (cosine {cos:.4})", c.score);
            }
        }
        Command::Resolve {
            request,
            session,
            phase,
            mut common,
        } => {
            common.engine.retrieval_timeout_ms = common.engine.retrieval_timeout_ms.max(10_000);
            let body = std::fs::read(&request)
                .with_context(|| format!("reading {}", request.display()))?;
            let parsed = keyhole_core::tools::format::parse(&request.to_string_lossy(), &body)
                .with_context(|| format!("{}", request.display()))?
                .with_context(|| format!("{} carries no tools", request.display()))?;
            let resolver = resolver(
                &common.data_dir,
                &common.embedder,
                &common.engine,
                None,
                None,
            )
            .await?;
            let tools = parsed.descriptors();
            resolver.prepare(&tools).await.context("indexing")?;
            let req = ResolveRequest {
                session: session.clone(),
                phase,
                turn: parsed.turn.clone(),
                tools,
                forced: parsed.forced.clone(),
                registry: None,
                tool_search: None,
                shadow: false,
            };
            let answer = resolver.resolve(&req).await;
            let names: Vec<&str> = answer.tools.iter().map(|t| t.name.as_str()).collect();
            let after = parsed.rewrite(&body, &parsed.select(&names, phase.budget().max));
            println!(
                "format: {}  phase: {phase}  source: {}",
                parsed.format,
                answer.source.as_str()
            );
            for t in &answer.tools {
                println!("  {:<40} {}", t.name, t.reason.as_str());
            }
            println!(
                "tools: {} -> {}   request bytes: {} -> {}",
                parsed.tools.len(),
                answer.tools.len(),
                body.len(),
                after.len()
            );
        }
        Command::Eval {
            tools,
            queries,
            k,
            mode,
            sample,
            name,
            out,
            misses,
            common,
        } => {
            let mut loaded = load(&tools)?;
            let dataset = name.unwrap_or_else(|| {
                queries
                    .parent()
                    .and_then(|p| p.file_name())
                    .map_or_else(|| "dataset".into(), |n| n.to_string_lossy().into_owned())
            });
            let mut common = common;
            if common.engine.namespace == "default" {
                // One collection per dataset: datasets must not prune each other.
                common.engine.namespace = dataset
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .take(64)
                    .collect();
            }
            let resolver = resolver_for(&common, &mut loaded).await?;
            let queries = eval::load_queries(&queries, sample).context("loading the queries")?;
            let started = std::time::Instant::now();
            let options = EvalOptions {
                dataset: dataset.clone(),
                k,
                modes: mode,
                taxonomy: Arc::default(),
            };
            let eval::Evaluation {
                metrics,
                tune_misses,
            } = eval::evaluate(&resolver, &loaded, &queries, &options).await?;
            if let Some(path) = &misses {
                let lines: String = tune_misses
                    .iter()
                    .map(|m| serde_json::to_string(m).map(|l| l + "\n"))
                    .collect::<Result<_, _>>()?;
                std::fs::write(path, lines)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            println!(
                "{:<16} {:<8} {:<6} {:>6} {:>6} {:>9} {:>8} {:>7} {:>8} {:>8} {:>9} {:>11} {:>10}",
                "dataset",
                "mode",
                "part",
                "tools",
                "turns",
                "full-gold",
                format!("R@{k}"),
                "MRR",
                "nDCG@10",
                "surfaced",
                "forbidden",
                "bytes-in",
                "bytes-out"
            );
            for m in &metrics {
                println!(
                    "{:<16} {:<8} {:<6} {:>6} {:>6} {:>9.3} {:>8.3} {:>7.3} {:>8.3} {:>8.2} {:>9} {:>11} {:>10.0}",
                    m.dataset,
                    format!("{:?}", m.mode).to_lowercase(),
                    m.part.as_str(),
                    m.tools,
                    m.queries,
                    m.full_gold_recall,
                    m.recall_at_k,
                    m.mrr,
                    m.ndcg_at_10,
                    m.mean_surfaced,
                    format!("{}/{}", m.forbidden_surfaced, m.queries_with_forbidden),
                    m.request_bytes_before,
                    m.request_bytes_after
                );
            }
            eprintln!(
                "{} queries in {:.1} s, {} texts embedded",
                queries.len(),
                started.elapsed().as_secs_f64(),
                resolver.indexer().embedder().texts_embedded()
            );
            if let Some(out) = out {
                eval::merge_json(&out, &dataset, &metrics)
                    .with_context(|| format!("writing {}", out.display()))?;
            }
        }
    }
    Ok(())
}

/// The command line, with `serve --config FILE` expanded: the file's settings
/// become flags placed before the user's own (later flags win), and settings
/// whose environment variable is set are left to the environment.
fn cli_with_config_file() -> anyhow::Result<Cli> {
    let mut args: Vec<String> = std::env::args().collect();
    let at = args
        .iter()
        .position(|a| a == "--config" || a.starts_with("--config="));
    if let (Some(i), Some("serve")) = (at, args.get(1).map(String::as_str)) {
        let file = match args.get(i).and_then(|a| a.strip_prefix("--config=")) {
            Some(f) => {
                let f = f.to_owned();
                args.remove(i);
                f
            }
            None => {
                anyhow::ensure!(i + 1 < args.len(), "--config needs a file");
                args.remove(i);
                args.remove(i)
            }
        };
        let config = ControlConfig::load(std::path::Path::new(&file))
            .map_err(|e| anyhow::anyhow!("{file}:\n{e}"))?;
        let from_file = config.to_args(|env| std::env::var_os(env).is_some());
        args.splice(2..2, from_file);
    }
    Ok(Cli::parse_from(args))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env(settings::LOG_ENV)
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = match cli_with_config_file() {
        Ok(cli) => cli,
        Err(err) => {
            eprintln!("keyhole: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
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
