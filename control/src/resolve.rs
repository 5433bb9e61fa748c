//! Answers `/v1/resolve`: which of a request's tools a turn may see.
//!
//! Tools are embedded as documents (cached, so an unchanged registry costs no
//! embedder call), the turn as a query; tools are ranked by cosine and cut to
//! the phase budget. A forced `tool_choice` is always kept. When the embedder
//! fails, control answers the session's prior audited set (bounded), or reports
//! the outage so that the filter applies its own bounded policy.

use crate::embed::{EmbedError, Embedder, Side};
use keyhole_core::wire::{Reason, ResolveRequest, ResolveResponse, Source, SurfacedTool};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Why a resolve has no answer at all.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Retrieval failed and the session has no prior set to fall back to.
    #[error("retrieval unavailable and no prior set for this session: {0}")]
    Unavailable(#[source] EmbedError),
}

/// The resolver and its per-session memory.
pub struct Resolver {
    embedder: Arc<Embedder>,
    /// Last set surfaced by a successful retrieval, per session.
    prior: Mutex<HashMap<String, Vec<String>>>,
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na.sqrt() * nb.sqrt()) }
}

impl Resolver {
    /// A resolver over `embedder`.
    pub fn new(embedder: Arc<Embedder>) -> Resolver {
        Resolver { embedder, prior: Mutex::new(HashMap::new()) }
    }

    /// Resolves one turn.
    pub async fn resolve(&self, req: &ResolveRequest) -> Result<ResolveResponse, ResolveError> {
        let max = req.phase.budget().max;
        match self.retrieve(req, max).await {
            Ok(tools) => {
                if let Some(session) = &req.session {
                    let names = tools.iter().map(|t| t.name.clone()).collect();
                    self.prior.lock().await.insert(session.clone(), names);
                }
                Ok(ResolveResponse { tools, source: Source::Retrieval })
            }
            Err(e) => {
                let prior = match &req.session {
                    Some(s) => self.prior.lock().await.get(s).cloned().unwrap_or_default(),
                    None => Vec::new(),
                };
                tracing::warn!(error = %e, prior = prior.len(), "retrieval failed; answering the bounded fallback");
                if prior.is_empty() {
                    return Err(ResolveError::Unavailable(e));
                }
                let tools = prior
                    .into_iter()
                    .filter(|n| req.tools.iter().any(|t| &t.name == n))
                    .take(max)
                    .map(|name| SurfacedTool { name, reason: Reason::PriorSet })
                    .collect();
                Ok(ResolveResponse { tools, source: Source::ControlFallback })
            }
        }
    }

    async fn retrieve(&self, req: &ResolveRequest, max: usize) -> Result<Vec<SurfacedTool>, EmbedError> {
        let docs: Vec<String> = req.tools.iter().map(|t| format!("{}\n{}", t.name, t.description)).collect();
        let doc_refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let doc_vecs = self.embedder.embed(Side::Document, &doc_refs).await?;
        let query = self.embedder.embed(Side::Query, &[req.turn.as_str()]).await?;
        let Some(q) = query.first() else { return Ok(Vec::new()) };

        let mut scored: Vec<(f32, &str)> =
            req.tools.iter().zip(&doc_vecs).map(|(t, v)| (cosine(q, v), t.name.as_str())).collect();
        // Best first; ties by name so the order never depends on request order.
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));

        let mut out: Vec<SurfacedTool> = Vec::with_capacity(max);
        for forced in &req.forced {
            if out.len() < max && req.tools.iter().any(|t| &t.name == forced) && !out.iter().any(|t| &t.name == forced) {
                out.push(SurfacedTool { name: forced.clone(), reason: Reason::ToolChoice });
            }
        }
        for (_, name) in scored {
            if out.len() >= max {
                break;
            }
            if !out.iter().any(|t| t.name == name) {
                out.push(SurfacedTool { name: name.to_owned(), reason: Reason::Rag });
            }
        }
        Ok(out)
    }
}
