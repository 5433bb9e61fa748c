//! control's configuration file (TOML), checked field by field.
//!
//! Every setting of `keyhole serve` can live in one file; environment variables
//! override the file, and flags override both. The file is turned into flags
//! (those whose environment variable is set are skipped), so the flag parser
//! stays the one place that knows the settings' types and defaults.
//!
//! ```toml
//! socket = "/run/keyhole/control.sock"
//! data_dir = "/var/lib/keyhole"
//!
//! [embedder]
//! url = "http://embedder:8080"
//! ```

use std::fmt;

/// What a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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
}

/// One setting: its path in the file, its flag and its environment variable.
struct Field {
    path: &'static str,
    flag: &'static str,
    env: &'static str,
    kind: Kind,
}

const FIELDS: &[Field] = &[
    Field { path: "socket", flag: "--socket", env: "KEYHOLE_SOCKET", kind: Kind::Text },
    Field { path: "data_dir", flag: "--data-dir", env: "KEYHOLE_DATA_DIR", kind: Kind::Text },
    Field { path: "embedder.url", flag: "--embedder-url", env: "KEYHOLE_EMBEDDER_URL", kind: Kind::HttpUrl },
    Field { path: "embedder.query_model", flag: "--query-model", env: "KEYHOLE_QUERY_MODEL", kind: Kind::Text },
    Field { path: "embedder.document_model", flag: "--document-model", env: "KEYHOLE_DOCUMENT_MODEL", kind: Kind::Text },
    Field { path: "embedder.timeout_ms", flag: "--embedder-timeout-ms", env: "KEYHOLE_EMBEDDER_TIMEOUT_MS", kind: Kind::Positive },
    Field { path: "retrieval.overlay", flag: "--overlay", env: "KEYHOLE_OVERLAY", kind: Kind::File },
    Field { path: "retrieval.rank_config", flag: "--rank-config", env: "KEYHOLE_RANK_CONFIG", kind: Kind::File },
    Field { path: "retrieval.qdrant_url", flag: "--qdrant-url", env: "KEYHOLE_QDRANT_URL", kind: Kind::HttpUrl },
    Field { path: "retrieval.namespace", flag: "--namespace", env: "KEYHOLE_NAMESPACE", kind: Kind::Text },
    Field { path: "retrieval.timeout_ms", flag: "--retrieval-timeout-ms", env: "KEYHOLE_RETRIEVAL_TIMEOUT_MS", kind: Kind::Positive },
    Field { path: "aliases.redis_url", flag: "--redis-url", env: "KEYHOLE_REDIS_URL", kind: Kind::RedisUrl },
    Field { path: "aliases.redis_prefix", flag: "--redis-prefix", env: "KEYHOLE_REDIS_PREFIX", kind: Kind::Text },
    Field { path: "aliases.session_ttl_secs", flag: "--session-ttl-secs", env: "KEYHOLE_SESSION_TTL_SECS", kind: Kind::Positive },
];

/// One problem in a configuration file, at a field's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Dotted path (`embedder.timeout_ms`), or `<file>` for the document.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigIssue>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// A checked configuration file: (flag, value) pairs in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    settings: Vec<(&'static Field, String)>,
}

impl fmt::Debug for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path)
    }
}

impl PartialEq for Field {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Eq for Field {}

fn issue(path: &str, message: impl Into<String>) -> ConfigIssue {
    ConfigIssue { path: path.to_owned(), message: message.into() }
}

/// Walks a table, collecting the leaf values under their dotted paths.
fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (key, value) in table {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            toml::Value::Table(inner) => flatten(&path, inner, out),
            other => out.push((path, other.clone())),
        }
    }
}

fn check_value(field: &Field, value: &toml::Value) -> Result<String, String> {
    let text = match (field.kind, value) {
        (Kind::Positive, toml::Value::Integer(n)) if *n >= 1 => return Ok(n.to_string()),
        (Kind::Positive, toml::Value::Integer(n)) => return Err(format!("must be at least 1, got {n}")),
        (Kind::Positive, other) => return Err(format!("must be an integer, got {}", other.type_str())),
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
        Kind::File if !std::path::Path::new(&text).is_file() => Err(format!("no such file: {text}")),
        _ => Ok(text),
    }
}

impl ControlConfig {
    /// Parses and checks a TOML document; the error lists every problem with
    /// its field's path.
    pub fn parse(text: &str) -> Result<ControlConfig, ConfigErrors> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            ConfigErrors(vec![issue("<file>", format!("not valid TOML: {}", e.message()))])
        })?;
        let mut leaves = Vec::new();
        flatten("", &table, &mut leaves);
        let mut issues = Vec::new();
        let mut settings = Vec::new();
        for (path, value) in &leaves {
            match FIELDS.iter().find(|f| f.path == path) {
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
            .flat_map(|(field, value)| [field.flag.to_owned(), value.clone()])
            .collect()
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
        let paths: Vec<&str> = errors.0.iter().map(|i| i.path.as_str()).collect();
        for p in ["socket", "colour", "embedder.url", "embedder.timeout_ms", "retrieval.overlay", "retrieval.namespace", "aliases.redis_url"] {
            assert!(paths.contains(&p), "{p} missing from {errors}");
        }
        assert_eq!(errors.0.len(), 7);
        assert!(errors.to_string().contains("embedder.timeout_ms: must be at least 1, got 0"));
    }

    #[test]
    fn settings_become_flags_and_the_environment_wins() {
        let cfg = ControlConfig::parse("data_dir = \"/d\"\n[embedder]\nurl = \"http://e:8080\"\ntimeout_ms = 5\n").unwrap();
        assert_eq!(cfg.to_args(|_| false), ["--data-dir", "/d", "--embedder-url", "http://e:8080", "--embedder-timeout-ms", "5"]);
        assert_eq!(cfg.to_args(|env| env == "KEYHOLE_EMBEDDER_URL"), ["--data-dir", "/d", "--embedder-timeout-ms", "5"]);
    }

    #[test]
    fn not_toml_is_one_clear_error() {
        let errors = ControlConfig::parse("socket = ").unwrap_err();
        assert_eq!(errors.0.len(), 1);
        assert_eq!(errors.0[0].path, "<file>");
    }
}
