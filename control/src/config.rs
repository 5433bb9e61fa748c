//! control's settings: each one defined once, in [`SETTINGS`].
//!
//! A [`Setting`] names its TOML key, its flag, its environment variable, its
//! kind, its default and its meaning. From that one table come the clap
//! arguments of `keyhole serve` (and the other commands), the checks of
//! `keyhole config check` and `serve --config FILE`, and the table of flags in
//! docs/configuration.md ([`settings_table`]; a test checks the file holds it).
//!
//! Every setting of `keyhole serve` can live in one TOML file; environment
//! variables override the file, and flags override both. The file is turned
//! into flags (those whose environment variable is set are skipped).
//!
//! ```toml
//! socket = "/run/keyhole/control.sock"
//! data_dir = "/var/lib/keyhole"
//!
//! [embedder]
//! url = "http://embedder:8080"
//! ```
//!
//! # How to add a control setting
//! 1. Add one [`Setting`] to [`SETTINGS`] here (key, flag, env, kind,
//!    default, meaning), then regenerate the table in docs/configuration.md:
//!    the test `the_settings_table_is_current` prints it.
//! 2. Read it where it is used, in `control/src/main.rs`: one field in the
//!    args struct of its [`Scope`] and one line in that struct's
//!    `from_arg_matches` (`value(m, "section.key")`).

use keyhole_core::alias::Taxonomy;
use keyhole_core::FieldError;
use std::fmt;
use std::path::Path;

/// What a setting holds; checked in configuration files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A non-empty string.
    Text,
    /// An `http://` or `https://` URL.
    HttpUrl,
    /// A `redis://` or `rediss://` URL.
    RedisUrl,
    /// A path to a file that must exist.
    File,
    /// An integer ≥ 1.
    Positive,
    /// An integer ≥ 0.
    Count,
    /// A list of `host:port` addresses, comma-separated.
    HostPorts,
    /// An alias taxonomy file (JSON) that must exist and validate
    /// ([`load_taxonomy`]).
    Taxonomy,
}

/// A setting's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    /// This value.
    Value(&'static str),
    /// No default: the setting must be given.
    Required,
    /// Unset by default; the text says what happens then.
    Unset(&'static str),
}

/// Which commands take a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `serve` only.
    Serve,
    /// Every command that builds the engine (`serve`, `index`, `search`, `resolve`, `eval`).
    Common,
}

/// One setting of control, defined once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// Dotted key in the TOML file (`embedder.url`); also the clap argument id.
    pub key: &'static str,
    /// Long flag, without the dashes (`embedder-url`).
    pub flag: &'static str,
    /// Environment variable (`KEYHOLE_EMBEDDER_URL`).
    pub env: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// Its default.
    pub default: DefaultValue,
    /// Which commands take it.
    pub scope: Scope,
    /// What it means (the `--help` text and docs/configuration.md's).
    pub help: &'static str,
}

/// Every setting of control.
pub const SETTINGS: &[Setting] = &[
    Setting { key: "socket", flag: "socket", env: "KEYHOLE_SOCKET", kind: Kind::Text, default: DefaultValue::Required, scope: Scope::Serve, help: "Unix socket (created mode 0660; a stale file is replaced)" },
    Setting { key: "data_dir", flag: "data-dir", env: "KEYHOLE_DATA_DIR", kind: Kind::Text, default: DefaultValue::Value(".keyhole"), scope: Scope::Common, help: "embedding cache, embedded vector index, embedded alias store" },
    Setting { key: "embedder.url", flag: "embedder-url", env: "KEYHOLE_EMBEDDER_URL", kind: Kind::HttpUrl, default: DefaultValue::Value("http://127.0.0.1:8089"), scope: Scope::Common, help: "OpenAI-compatible embeddings endpoint" },
    Setting { key: "embedder.query_model", flag: "query-model", env: "KEYHOLE_QUERY_MODEL", kind: Kind::Text, default: DefaultValue::Value("e5-query"), scope: Scope::Common, help: "model name for turns" },
    Setting { key: "embedder.document_model", flag: "document-model", env: "KEYHOLE_DOCUMENT_MODEL", kind: Kind::Text, default: DefaultValue::Value("e5-passage"), scope: Scope::Common, help: "model name for tool texts" },
    Setting { key: "embedder.timeout_ms", flag: "embedder-timeout-ms", env: "KEYHOLE_EMBEDDER_TIMEOUT_MS", kind: Kind::Positive, default: DefaultValue::Value("10000"), scope: Scope::Common, help: "one embedder request" },
    // The embedder the project ships computes one request at a time (a lock
    // per request), so control keeps one out and sends the turns that waited
    // meanwhile together in the next.
    Setting { key: "embedder.requests_in_flight", flag: "embedder-requests-in-flight", env: "KEYHOLE_EMBEDDER_REQUESTS_IN_FLIGHT", kind: Kind::Positive, default: DefaultValue::Value("1"), scope: Scope::Common, help: "turn embedding requests at the embedder at once; turns that arrive meanwhile wait and go together in the next request (raise it for an embedder that serves several requests at a time)" },
    Setting { key: "embedder.batch_size", flag: "embedder-batch-size", env: "KEYHOLE_EMBEDDER_BATCH_SIZE", kind: Kind::Positive, default: DefaultValue::Value("32"), scope: Scope::Common, help: "texts per embedder request: tool texts when indexing, turns that waited together" },
    // 384 dimensions × 4 bytes and the key: about 1.6 KB an entry, 13 MB in all.
    Setting { key: "embedder.query_cache", flag: "query-cache", env: "KEYHOLE_QUERY_CACHE", kind: Kind::Positive, default: DefaultValue::Value("8192"), scope: Scope::Common, help: "turn embeddings kept in memory by canonical text (NFKC, whitespace collapsed; least recently used evicted; about 1.6 KB each at 384 dimensions); never written to disk" },
    Setting { key: "retrieval.overlay", flag: "overlay", env: "KEYHOLE_OVERLAY", kind: Kind::File, default: DefaultValue::Unset("none"), scope: Scope::Common, help: "tool metadata overlay (format of `catalog/tools.json`)" },
    Setting { key: "retrieval.rank_config", flag: "rank-config", env: "KEYHOLE_RANK_CONFIG", kind: Kind::File, default: DefaultValue::Unset("built-in defaults"), scope: Scope::Common, help: "ranking settings, floors included (JSON)" },
    Setting { key: "retrieval.qdrant_url", flag: "qdrant-url", env: "KEYHOLE_QDRANT_URL", kind: Kind::HttpUrl, default: DefaultValue::Unset("embedded index"), scope: Scope::Common, help: "Qdrant server (gRPC)" },
    Setting { key: "retrieval.qdrant_replication_factor", flag: "qdrant-replication-factor", env: "KEYHOLE_QDRANT_REPLICATION_FACTOR", kind: Kind::Positive, default: DefaultValue::Value("1"), scope: Scope::Common, help: "copies of each shard when control creates a collection in a Qdrant cluster (distributed mode; an existing collection keeps its own)" },
    Setting { key: "retrieval.namespace", flag: "namespace", env: "KEYHOLE_NAMESPACE", kind: Kind::Text, default: DefaultValue::Value("default"), scope: Scope::Common, help: "registry namespace (one collection each)" },
    // A measured default: the smallest deadline `keyhole-bench --only
    // vector_share` measured whose share of requests answered with vectors
    // under agent traffic at 16 concurrent sessions is at least 0.95 (figures
    // in `bench/RESULTS.md`, section 9; see `ResolverSettings::retrieval_timeout`).
    Setting { key: "retrieval.timeout_ms", flag: "retrieval-timeout-ms", env: "KEYHOLE_RETRIEVAL_TIMEOUT_MS", kind: Kind::Positive, default: DefaultValue::Value("1000"), scope: Scope::Common, help: "deadline for embedding a turn and searching" },
    Setting { key: "retrieval.max_registries", flag: "max-registries", env: "KEYHOLE_MAX_REGISTRIES", kind: Kind::Positive, default: DefaultValue::Value("16"), scope: Scope::Common, help: "distinct registries kept by digest, built and indexed (least recently used evicted; the filter resends an evicted one)" },
    Setting { key: "retrieval.registry", flag: "registry", env: "KEYHOLE_REGISTRY", kind: Kind::File, default: DefaultValue::Unset("none: a registry is indexed when a request first brings it"), scope: Scope::Serve, help: "registry to index at start (tools.json, tools.jsonl, or an LLM request body; its metadata is the overlay unless `--overlay` names one); `/healthz` answers 503 until it is indexed" },
    Setting { key: "aliases.redis_url", flag: "redis-url", env: "KEYHOLE_REDIS_URL", kind: Kind::RedisUrl, default: DefaultValue::Unset("embedded redb"), scope: Scope::Serve, help: "shared alias store for several replicas" },
    Setting { key: "aliases.redis_sentinel", flag: "redis-sentinel", env: "KEYHOLE_REDIS_SENTINEL", kind: Kind::HostPorts, default: DefaultValue::Unset("none"), scope: Scope::Serve, help: "Redis Sentinels (`host:port,host:port`) that name the alias store's primary (`--redis-master-name`); it is found again through them after a failover. Excludes `--redis-url`" },
    Setting { key: "aliases.redis_master_name", flag: "redis-master-name", env: "KEYHOLE_REDIS_MASTER_NAME", kind: Kind::Text, default: DefaultValue::Unset("none; required with `--redis-sentinel`"), scope: Scope::Serve, help: "the primary's name in Sentinel (`sentinel monitor NAME …`)" },
    Setting { key: "aliases.min_replicas_acked", flag: "min-replicas-acked", env: "KEYHOLE_MIN_REPLICAS_ACKED", kind: Kind::Count, default: DefaultValue::Value("0"), scope: Scope::Serve, help: "Redis replicas that must acknowledge (`WAIT`) an encode's writes before its aliases are answered; fewer: the encode fails, no alias is handed out and the filter withholds the response" },
    Setting { key: "aliases.redis_timeout_ms", flag: "redis-timeout-ms", env: "KEYHOLE_REDIS_TIMEOUT_MS", kind: Kind::Positive, default: DefaultValue::Value("1500"), scope: Scope::Serve, help: "deadline of one alias store operation, finding a new primary after a failover and `WAIT` included (keep it under the filter's callout `timeout_ms`)" },
    Setting { key: "aliases.redis_prefix", flag: "redis-prefix", env: "KEYHOLE_REDIS_PREFIX", kind: Kind::Text, default: DefaultValue::Value("keyhole"), scope: Scope::Serve, help: "key prefix in Redis" },
    Setting { key: "aliases.taxonomy", flag: "taxonomy", env: "KEYHOLE_TAXONOMY", kind: Kind::Taxonomy, default: DefaultValue::Unset("built-in HMS kinds"), scope: Scope::Serve, help: "alias taxonomy (JSON, see Taxonomy): id kinds added to or replacing the built-in ones; the filter's `taxonomy` must be the same file" },
    Setting { key: "aliases.session_ttl_secs", flag: "session-ttl-secs", env: "KEYHOLE_SESSION_TTL_SECS", kind: Kind::Positive, default: DefaultValue::Value("28800"), scope: Scope::Serve, help: "idle sessions' aliases expire after this" },
];

/// The log filter's environment variable (not a setting: read before anything else).
pub const LOG_ENV: &str = "KEYHOLE_LOG";

/// The setting with TOML key `key`.
pub fn setting(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.key == key)
}

impl Setting {
    /// The clap argument: `--flag`, its environment variable, default, help.
    pub fn arg(&self) -> clap::Arg {
        let arg = clap::Arg::new(self.key)
            .long(self.flag)
            .env(self.env)
            .help(self.help);
        let arg = match self.kind {
            Kind::Positive | Kind::Count => arg.value_parser(clap::value_parser!(u64)),
            _ => arg.value_parser(clap::value_parser!(String)),
        };
        match self.default {
            DefaultValue::Value(v) => arg.default_value(v),
            DefaultValue::Required => arg.required(true),
            DefaultValue::Unset(_) => arg,
        }
    }
}

/// Adds every setting of `scope` to a command.
pub fn augment(cmd: clap::Command, scope: Scope) -> clap::Command {
    SETTINGS
        .iter()
        .filter(|s| s.scope == scope)
        .fold(cmd, |cmd, s| cmd.arg(s.arg()))
}

/// The table of control settings in docs/configuration.md (flag, env, TOML
/// key, default, meaning).
pub fn settings_table() -> String {
    let mut out =
        String::from("| flag | env | TOML key | default | meaning |\n|---|---|---|---|---|\n");
    for s in SETTINGS {
        let default = match s.default {
            DefaultValue::Value(v) => format!("`{v}`"),
            DefaultValue::Required => "required".to_owned(),
            DefaultValue::Unset(text) => text.to_owned(),
        };
        out.push_str(&format!(
            "| `--{}` | `{}` | `{}` | {default} | {} |\n",
            s.flag, s.env, s.key, s.help
        ));
    }
    out.push_str(&format!(
        "| | `{LOG_ENV}` | | `info` | log filter (`tracing` syntax) |\n"
    ));
    out
}

/// A taxonomy file that cannot be used. The message names the file; its
/// source says what is wrong (`{:#}` with anyhow, or [`with_causes`]).
#[derive(Debug, thiserror::Error)]
pub enum TaxonomyFileError {
    /// The file cannot be read.
    #[error("{path}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid taxonomy; the error names the field.
    #[error("{path}")]
    Invalid {
        /// The file.
        path: String,
        /// The field and what is wrong with it (`kinds[0].prefix: …`).
        #[source]
        source: FieldError,
    },
}

/// An error and its sources, joined by `: ` (`taxonomy.json: kinds[0].prefix: …`).
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// Reads and validates an alias taxonomy file (JSON; it extends the built-in
/// kinds, see `keyhole_core::alias::taxonomy`).
///
/// Fails when the file cannot be read, or with the field's path when it is
/// not a valid taxonomy.
pub fn load_taxonomy(path: &Path) -> Result<Taxonomy, TaxonomyFileError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| TaxonomyFileError::Read {
        path: shown.clone(),
        source,
    })?;
    Taxonomy::from_json(&bytes).map_err(|source| TaxonomyFileError::Invalid {
        path: shown,
        source,
    })
}

/// Every problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<FieldError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// A checked configuration file: (setting, value) pairs in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    settings: Vec<(&'static Setting, String)>,
}

fn issue(path: &str, message: impl Into<String>) -> FieldError {
    FieldError::new(path, message)
}

/// Walks a table, collecting the leaf values under their dotted paths.
fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => flatten(&path, inner, out),
            other => out.push((path, other.clone())),
        }
    }
}

fn check_value(field: &Setting, value: &toml::Value) -> Result<String, String> {
    let text = match (field.kind, value) {
        (Kind::Positive, toml::Value::Integer(n)) if *n >= 1 => return Ok(n.to_string()),
        (Kind::Positive, toml::Value::Integer(n)) => {
            return Err(format!("must be at least 1, got {n}"))
        }
        (Kind::Count, toml::Value::Integer(n)) if *n >= 0 => return Ok(n.to_string()),
        (Kind::Count, toml::Value::Integer(n)) => {
            return Err(format!("must be at least 0, got {n}"))
        }
        (Kind::Positive | Kind::Count, other) => {
            return Err(format!("must be an integer, got {}", other.type_str()))
        }
        (_, toml::Value::String(s)) => s.clone(),
        (_, other) => return Err(format!("must be a string, got {}", other.type_str())),
    };
    match field.kind {
        _ if text.trim().is_empty() => Err("must not be empty".into()),
        Kind::HttpUrl if !(text.starts_with("http://") || text.starts_with("https://")) => {
            Err(format!("must be an http:// or https:// URL, got {text:?}"))
        }
        Kind::RedisUrl if !(text.starts_with("redis://") || text.starts_with("rediss://")) => {
            Err(format!("must be a redis:// or rediss:// URL, got {text:?}"))
        }
        Kind::HostPorts => match crate::alias::shared::parse_sentinels(&text) {
            Ok(_) => Ok(text),
            Err(e) => Err(e.to_string()),
        },
        Kind::File if !std::path::Path::new(&text).is_file() => {
            Err(format!("no such file: {text}"))
        }
        Kind::Taxonomy => match load_taxonomy(Path::new(&text)) {
            Ok(_) => Ok(text),
            Err(e) => Err(with_causes(&e)),
        },
        _ => Ok(text),
    }
}

impl ControlConfig {
    /// Parses and checks a TOML document; the error lists every problem with
    /// its field's path.
    pub fn parse(text: &str) -> Result<ControlConfig, ConfigErrors> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            ConfigErrors(vec![issue(
                "<file>",
                format!("not valid TOML: {}", e.message()),
            )])
        })?;
        let mut leaves = Vec::new();
        flatten("", &table, &mut leaves);
        let mut issues = Vec::new();
        let mut settings = Vec::new();
        for (path, value) in &leaves {
            match setting(path) {
                None => issues.push(issue(path, "unknown setting")),
                Some(field) => match check_value(field, value) {
                    Ok(v) => settings.push((field, v)),
                    Err(message) => issues.push(issue(path, message)),
                },
            }
        }
        if issues.is_empty() {
            Ok(ControlConfig { settings })
        } else {
            Err(ConfigErrors(issues))
        }
    }

    /// Reads and checks a file.
    pub fn load(path: &std::path::Path) -> Result<ControlConfig, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors(vec![issue("<file>", format!("{}: {e}", path.display()))]))?;
        ControlConfig::parse(&text)
    }

    /// The settings as `keyhole serve` flags, leaving out those whose
    /// environment variable is set (`env` answers whether one is): the
    /// environment overrides the file.
    pub fn to_args(&self, env: impl Fn(&str) -> bool) -> Vec<String> {
        self.settings
            .iter()
            .filter(|(field, _)| !env(field.env))
            .flat_map(|(field, value)| [format!("--{}", field.flag), value.clone()])
            .collect()
    }

    /// The value the file gives the setting with TOML key `key`.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(field, _)| field.key == key)
            .map(|(_, v)| v.as_str())
    }

    /// Number of settings in the file.
    pub fn len(&self) -> usize {
        self.settings.len()
    }

    /// True when the file sets nothing.
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let text = r#"
            socket = ""
            colour = "blue"
            [embedder]
            url = "ftp://x"
            timeout_ms = 0
            [retrieval]
            overlay = "/no/such/file.json"
            namespace = 7
            [aliases]
            redis_url = "http://not-redis"
        "#;
        let errors = ControlConfig::parse(text).unwrap_err();
        let paths: Vec<&str> = errors.0.iter().map(|i| i.field.as_str()).collect();
        for p in [
            "socket",
            "colour",
            "embedder.url",
            "embedder.timeout_ms",
            "retrieval.overlay",
            "retrieval.namespace",
            "aliases.redis_url",
        ] {
            assert!(paths.contains(&p), "{p} missing from {errors}");
        }
        assert_eq!(errors.0.len(), 7);
        assert!(errors
            .to_string()
            .contains("embedder.timeout_ms: must be at least 1, got 0"));
    }

    #[test]
    fn settings_become_flags_and_the_environment_wins() {
        let cfg = ControlConfig::parse(
            "data_dir = \"/d\"\n[embedder]\nurl = \"http://e:8080\"\ntimeout_ms = 5\n",
        )
        .unwrap();
        assert_eq!(
            cfg.to_args(|_| false),
            [
                "--data-dir",
                "/d",
                "--embedder-url",
                "http://e:8080",
                "--embedder-timeout-ms",
                "5"
            ]
        );
        assert_eq!(
            cfg.to_args(|env| env == "KEYHOLE_EMBEDDER_URL"),
            ["--data-dir", "/d", "--embedder-timeout-ms", "5"]
        );
    }

    #[test]
    fn the_settings_table_is_current() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/configuration.md"
        ))
        .unwrap();
        let table = settings_table();
        assert!(
            doc.contains(&table),
            "docs/configuration.md must hold this table of control settings:\n{table}"
        );
    }

    #[test]
    fn every_setting_is_one_clap_argument() {
        let cmd = augment(
            augment(clap::Command::new("t"), Scope::Serve),
            Scope::Common,
        );
        let cmd = cmd.no_binary_name(true);
        let m = cmd
            .try_get_matches_from(["--socket", "/s", "--embedder-timeout-ms", "5"])
            .unwrap();
        assert_eq!(
            m.get_one::<String>("socket").map(String::as_str),
            Some("/s")
        );
        assert_eq!(m.get_one::<u64>("embedder.timeout_ms"), Some(&5));
        assert_eq!(
            m.get_one::<String>("retrieval.namespace")
                .map(String::as_str),
            Some("default")
        );
        assert!(m.get_one::<String>("aliases.redis_url").is_none());
    }

    const EXAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/taxonomy.example.json"
    );

    #[test]
    fn the_taxonomy_file_is_checked_with_the_configuration() {
        let cfg = ControlConfig::parse(&format!("[aliases]\ntaxonomy = {EXAMPLE:?}\n")).unwrap();
        assert_eq!(cfg.value("aliases.taxonomy"), Some(EXAMPLE));
        assert_eq!(cfg.to_args(|_| false), ["--taxonomy", EXAMPLE]);
        let t = load_taxonomy(Path::new(EXAMPLE)).unwrap();
        assert_eq!(t.kind_count(), Taxonomy::default().kind_count() + 3);

        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("taxonomy.json");
        std::fs::write(
            &bad,
            r#"{"kinds":[{"name":"specimen","prefix":"Specimen"}]}"#,
        )
        .unwrap();
        let errors = ControlConfig::parse(&format!(
            "[aliases]\ntaxonomy = {:?}\n",
            bad.display().to_string()
        ))
        .unwrap_err();
        assert_eq!(errors.0.len(), 1);
        let text = errors.to_string();
        assert!(
            text.starts_with(&format!(
                "aliases.taxonomy: {}: kinds[0].prefix: must be lowercase",
                bad.display()
            )),
            "{text}"
        );
        let missing = dir.path().join("none.json");
        let errors = ControlConfig::parse(&format!(
            "[aliases]\ntaxonomy = {:?}\n",
            missing.display().to_string()
        ))
        .unwrap_err();
        assert!(
            errors
                .to_string()
                .starts_with(&format!("aliases.taxonomy: {}: ", missing.display())),
            "{errors}"
        );
    }

    #[test]
    fn not_toml_is_one_clear_error() {
        let errors = ControlConfig::parse("socket = ").unwrap_err();
        assert_eq!(errors.0.len(), 1);
        assert_eq!(errors.0[0].field, "<file>");
    }
}
