//! Reading a tool registry from a file, for the command line.
//!
//! Three shapes are accepted:
//! - a catalog `tools.json` (a JSON array of descriptors with dotted `id`s):
//!   it is also the metadata overlay; function names come from the ids
//!   through the configured [`NameMapping`]; control-plane tools are left out;
//! - a `tools.jsonl` (one `{id, name, description, parameters, category}` per
//!   line, the public evaluation sets): the function name is the id (labels
//!   name ids), so the registry uses the identity mapping;
//! - a full LLM request body (any format [`keyhole_core::tools::format`] reads).

use keyhole_core::proto::tools::ToolDescriptor;
use keyhole_core::tools::format;
use keyhole_core::tools::rank::meta::{MetaError, NameMapping, Overlay, Plane, ToolMeta};
use keyhole_core::tools::rank::schema_words::schema_words;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A registry read from a file.
#[derive(Debug)]
pub struct LoadedRegistry {
    /// The tools, as a request would carry them.
    pub tools: Vec<ToolDescriptor>,
    /// Overlay metadata the file carries (catalog and jsonl files).
    pub overlay: Option<Overlay>,
    /// The name mapping the file implies (`None`: keep the configured one).
    pub names: Option<NameMapping>,
    /// An OpenAI Chat request body carrying every tool (the file itself when
    /// it is a request body), to measure request bytes before and after.
    pub request: Vec<u8>,
}

/// Why a registry file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line or the document is not the expected JSON.
    #[error("{path}:{line}: {problem}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 for whole-document errors).
        line: usize,
        /// The parser's complaint.
        problem: String,
    },
    /// The overlay part is invalid (duplicate or empty ids).
    #[error("{path}: {source}")]
    Overlay {
        /// The file.
        path: PathBuf,
        /// The overlay's complaint.
        #[source]
        source: MetaError,
    },
    /// A JSON object that is no request body keyhole reads.
    #[error("{path}: not a tools.json array, a tools.jsonl or an LLM request body with tools ({problem})")]
    NotARegistry {
        /// The file.
        path: PathBuf,
        /// What the request parser said.
        problem: String,
    },
}

#[derive(Deserialize)]
struct JsonlTool {
    id: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default)]
    category: Option<String>,
}

/// Reads a registry file; `names` maps catalog ids to function names.
pub fn load_registry(path: &Path, names: &NameMapping) -> Result<LoadedRegistry, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    let json_err = |line: usize, e: &dyn std::fmt::Display| LoadError::Json {
        path: path.to_owned(),
        line,
        problem: e.to_string(),
    };
    let overlay_err = |source| LoadError::Overlay {
        path: path.to_owned(),
        source,
    };
    if path.extension().and_then(|e| e.to_str()) == Some("jsonl") {
        let text = std::str::from_utf8(&bytes).map_err(|e| json_err(1, &e))?;
        let mut metas = Vec::new();
        let mut parameters = Vec::new();
        let mut functions = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let t: JsonlTool = serde_json::from_str(line).map_err(|e| json_err(i + 1, &e))?;
            let description = t.description.unwrap_or_default();
            parameters.push(t.parameters.as_ref().map_or_else(String::new, schema_words));
            functions.push(function(&t.id, &description, t.parameters));
            let meta =
                serde_json::json!({"id": t.id, "category": t.category, "description": description});
            metas.push(serde_json::from_value::<ToolMeta>(meta).map_err(|e| json_err(i + 1, &e))?);
        }
        let tools = metas
            .iter()
            .zip(parameters)
            .map(|(m, parameters)| ToolDescriptor {
                name: m.id.clone(),
                description: m.description.clone(),
                parameters,
            })
            .collect();
        let overlay = Overlay::try_from_entries(metas).map_err(overlay_err)?;
        return Ok(LoadedRegistry {
            tools,
            overlay: Some(overlay),
            names: Some(NameMapping::identity()),
            request: chat_request(functions),
        });
    }
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| json_err(e.line(), &e))?;
    if let Value::Array(entries) = doc {
        let overlay = Overlay::from_json(&bytes).map_err(overlay_err)?;
        let mut tools = Vec::new();
        let mut functions = Vec::new();
        for e in entries {
            let Some(id) = e.get("id").and_then(Value::as_str) else {
                continue;
            };
            let Some(meta) = overlay.get(id) else {
                continue;
            };
            if meta.plane != Plane::Business {
                continue;
            }
            let name = names.to_name(id);
            let parameters = e.get("parameters").map_or_else(String::new, schema_words);
            functions.push(function(
                &name,
                &meta.description,
                e.get("parameters").cloned(),
            ));
            tools.push(ToolDescriptor {
                name,
                description: meta.description.clone(),
                parameters,
            });
        }
        return Ok(LoadedRegistry {
            tools,
            overlay: Some(overlay),
            names: None,
            request: chat_request(functions),
        });
    }
    match format::parse("", &bytes) {
        Ok(Some(parsed)) => {
            let tools = parsed.descriptors();
            Ok(LoadedRegistry {
                tools,
                overlay: None,
                names: None,
                request: bytes,
            })
        }
        Ok(None) => Err(LoadError::NotARegistry {
            path: path.to_owned(),
            problem: "it carries no tools".into(),
        }),
        Err(e) => Err(LoadError::NotARegistry {
            path: path.to_owned(),
            problem: e.to_string(),
        }),
    }
}

/// One OpenAI Chat function tool.
fn function(name: &str, description: &str, parameters: Option<Value>) -> Value {
    let parameters = parameters
        .filter(Value::is_object)
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    serde_json::json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
}

/// An OpenAI Chat request carrying `functions` and one user turn.
fn chat_request(functions: Vec<Value>) -> Vec<u8> {
    let body = serde_json::json!({
        "model": "keyhole-eval",
        "messages": [{"role": "user", "content": ""}],
        "tools": functions,
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CATALOG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/catalog");

    #[test]
    fn catalog_tools_json_is_the_overlay_and_maps_names() {
        let r = load_registry(
            &Path::new(CATALOG).join("tools.json"),
            &NameMapping::default(),
        )
        .unwrap();
        assert_eq!(r.tools.len(), 108, "control-plane tools are left out");
        assert!(r.tools.iter().any(|t| t.name == "patient__search__smart"));
        assert_eq!(r.overlay.as_ref().unwrap().len(), 110);
        let parsed = format::parse("/v1/chat/completions", &r.request)
            .unwrap()
            .unwrap();
        assert_eq!(parsed.tools.len(), 108);
    }

    #[test]
    fn request_bodies_and_jsonl_files_load() {
        let r = load_registry(
            &Path::new(CATALOG).join("anthropic_request.json"),
            &NameMapping::default(),
        )
        .unwrap();
        assert_eq!(r.tools.len(), 108);
        assert!(r.overlay.is_none());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tools.jsonl");
        std::fs::write(
            &path,
            "{\"id\":\"Image::a__get\",\"name\":\"a\",\"description\":\"Gets a.\",\"parameters\":null,\"category\":\"Media\"}\n\n",
        )
        .unwrap();
        let r = load_registry(&path, &NameMapping::default()).unwrap();
        assert_eq!(
            r.tools,
            [ToolDescriptor {
                name: "Image::a__get".into(),
                description: "Gets a.".into(),
                parameters: String::new(),
            }]
        );
        assert_eq!(r.names, Some(NameMapping::identity()));
        assert_eq!(
            r.overlay
                .unwrap()
                .get("Image::a__get")
                .unwrap()
                .category
                .as_deref(),
            Some("Media")
        );

        std::fs::write(&path, "{\"id\":1}\n").unwrap();
        let err = load_registry(&path, &NameMapping::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("tools.jsonl:1: "), "{err}");
    }
}
