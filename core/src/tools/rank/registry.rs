//! A registry ready for ranking: the request's tools joined with their overlay
//! metadata, sorted by name, with the lexical index built over them.
//!
//! Build it once per distinct registry (control caches it by content hash) and
//! rank every turn against it. The input order of the tools never matters: they
//! are sorted by name, and a name sent twice keeps its smallest description.

use super::config::RankConfig;
use super::lexical::{BorrowedText, LexicalDoc, LexicalIndex};
use super::meta::{Overlay, Plane, ToolMeta};
use super::text::embedding_text;
use crate::proto::tools::ToolDescriptor;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

/// One tool of the registry.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredTool {
    /// Function name as the request carries it.
    pub name: String,
    /// Tool id (the name through the configured mapping).
    pub id: String,
    /// The request's description (the overlay's when the request sent none).
    pub description: String,
    /// Overlay metadata, if the overlay knows the id.
    pub meta: Option<ToolMeta>,
    /// Domain for domain scoping: the overlay's, else the configured domain of
    /// its category; `None` is generic.
    pub domain: Option<String>,
    /// The acronyms its keywords and descriptions are written with
    /// (`NICE`, `HAS`), folded: names of things the tool serves.
    pub acronyms: BTreeSet<String>,
    /// The words of its parameter schema, as the request's descriptor
    /// carried them.
    pub parameters: String,
}

impl RegisteredTool {
    /// Whether the tool may be a business candidate (control-plane tools never are).
    pub fn is_business(&self) -> bool {
        self.meta
            .as_ref()
            .is_none_or(|m| m.plane == Plane::Business)
    }

    /// Whether the formatter phase must not see it (unknown ops count as mutating).
    pub fn mutates(&self) -> bool {
        self.meta.as_ref().is_none_or(ToolMeta::mutates)
    }

    /// The frozen passage text to embed for this tool.
    pub fn embedding_text(&self) -> String {
        embedding_text(&self.id, &self.description, self.meta.as_ref())
    }
}

/// The tools of one registry plus their lexical index.
#[derive(Debug, Clone)]
pub struct Registry {
    tools: Vec<RegisteredTool>,
    /// Looked up for every cosine of every turn: hashed, not a tree of
    /// string comparisons.
    by_name: FxHashMap<String, usize>,
    by_id: FxHashMap<String, usize>,
    names: BTreeSet<String>,
    mutating: BTreeSet<String>,
    /// Business tools' indices, by id then index: the ranking order of tools
    /// that tie on score and coverage.
    business_by_id: Vec<usize>,
    /// Each tool's place in the order by id then index (indexed by the
    /// tool's index): ties on score and coverage compare two integers,
    /// not two strings looked up per comparison.
    id_order: Vec<u32>,
    lexical: LexicalIndex,
}

impl Registry {
    /// Joins the request's tools with the overlay and indexes them.
    pub fn build(tools: &[ToolDescriptor], overlay: Option<&Overlay>, config: &RankConfig) -> Self {
        let mut sorted: Vec<&ToolDescriptor> = tools.iter().collect();
        sorted.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then_with(|| a.description.cmp(&b.description))
        });
        sorted.dedup_by(|later, first| later.name == first.name);
        let settings = config.settings();
        let tools: Vec<RegisteredTool> = sorted
            .into_iter()
            .map(|t| {
                let id = settings.names.to_id(&t.name);
                let meta = overlay.and_then(|o| o.get(&id)).cloned();
                let description = match (&meta, t.description.is_empty()) {
                    (Some(m), true) => m.description.clone(),
                    _ => t.description.clone(),
                };
                let domain = meta.as_ref().and_then(|m| {
                    m.domain.clone().or_else(|| {
                        m.category
                            .as_ref()
                            .and_then(|c| settings.pipeline.domain.category_domains.get(c).cloned())
                    })
                });
                let acronyms = meta
                    .iter()
                    .flat_map(|m| {
                        m.rag_keywords
                            .iter()
                            .map(String::as_str)
                            .chain(m.rag_description.as_deref())
                    })
                    .chain(std::iter::once(description.as_str()))
                    .flat_map(super::tokenize::acronyms)
                    .collect();
                RegisteredTool {
                    name: t.name.clone(),
                    id,
                    description,
                    meta,
                    domain,
                    acronyms,
                    parameters: t.parameters.clone(),
                }
            })
            .collect();
        let siblings = sibling_keywords(&tools);
        let docs: Vec<LexicalDoc<'_>> = tools
            .iter()
            .zip(&siblings)
            .map(|(t, siblings)| LexicalDoc {
                id: &t.id,
                description: &t.description,
                rag_description: t.meta.as_ref().and_then(|m| m.rag_description.as_deref()),
                keywords: t.meta.as_ref().map_or(&[], |m| m.rag_keywords.as_slice()),
                parameters: &t.parameters,
                siblings,
            })
            .collect();
        let lexical = LexicalIndex::build(&docs, &settings.lexical);
        let by_name = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let by_id = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), i))
            .collect();
        let names = tools.iter().map(|t| t.name.clone()).collect();
        let mutating = tools
            .iter()
            .filter(|t| t.mutates())
            .map(|t| t.name.clone())
            .collect();
        let mut business_by_id: Vec<usize> = (0..tools.len())
            .filter(|&i| tools.get(i).is_some_and(RegisteredTool::is_business))
            .collect();
        business_by_id.sort_by(|&a, &b| {
            let id = |i: usize| tools.get(i).map_or("", |t| t.id.as_str());
            id(a).cmp(id(b)).then(a.cmp(&b))
        });
        let mut by_id_order: Vec<usize> = (0..tools.len()).collect();
        by_id_order.sort_by(|&a, &b| {
            let id = |i: usize| tools.get(i).map_or("", |t| t.id.as_str());
            id(a).cmp(id(b)).then(a.cmp(&b))
        });
        let mut id_order = vec![0u32; tools.len()];
        for (place, &i) in by_id_order.iter().enumerate() {
            if let Some(o) = id_order.get_mut(i) {
                *o = u32::try_from(place).unwrap_or(u32::MAX);
            }
        }
        Registry {
            tools,
            by_name,
            by_id,
            names,
            mutating,
            business_by_id,
            id_order,
            lexical,
        }
    }

    /// All tools, sorted by name; a tool's position is its index.
    pub fn tools(&self) -> &[RegisteredTool] {
        &self.tools
    }

    /// The tool at an index.
    pub fn tool(&self, index: usize) -> Option<&RegisteredTool> {
        self.tools.get(index)
    }

    /// The index of a function name.
    pub fn index_of_name(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The tool with a function name.
    pub fn by_name(&self, name: &str) -> Option<&RegisteredTool> {
        self.index_of_name(name).and_then(|i| self.tools.get(i))
    }

    /// The tool with an id.
    pub fn by_id(&self, id: &str) -> Option<&RegisteredTool> {
        self.by_id.get(id).and_then(|&i| self.tools.get(i))
    }

    /// Every function name.
    pub fn names(&self) -> &BTreeSet<String> {
        &self.names
    }

    /// Names the formatter phase must not see.
    pub fn mutating(&self) -> &BTreeSet<String> {
        &self.mutating
    }

    /// Indices of the business tools (those that may be candidates), by id
    /// ascending (ties by index).
    pub fn business_by_id(&self) -> &[usize] {
        &self.business_by_id
    }

    /// The tool's place in the order of all tools by id, then index (the
    /// last place for an index out of range).
    pub fn id_order(&self, index: usize) -> u32 {
        self.id_order.get(index).copied().unwrap_or(u32::MAX)
    }

    /// Whether a turn names the tool with an id by one of its acronyms, written
    /// as an acronym ("Que dit la HAS" names the guideline search that lists
    /// `HAS`; "que dit la has" names nothing).
    pub fn named_by_acronym(&self, id: &str, turn: &[String]) -> bool {
        self.by_id(id)
            .is_some_and(|t| turn.iter().any(|a| t.acronyms.contains(a)))
    }

    /// The lexical index (document `i` is tool `i`).
    pub fn lexical(&self) -> &LexicalIndex {
        &self.lexical
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether the registry is empty.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// Per tool, the keywords of the other tools of its semantic group and
/// category, space-joined, at most [`super::lexical::BORROWED_BYTES`] (empty for a tool
/// without a group or without siblings). The category keeps a view's words
/// (the calendar's `vue semaine`, category `ui`) off the tools that act on
/// the object.
fn sibling_keywords(tools: &[RegisteredTool]) -> Vec<String> {
    fn group(t: &RegisteredTool) -> Option<(Option<&str>, &str)> {
        let m = t.meta.as_ref()?;
        let g = m.semantic_group.as_deref()?;
        Some((m.category.as_deref(), g))
    }
    let mut by_group: BTreeMap<(Option<&str>, &str), Vec<usize>> = BTreeMap::new();
    for (i, t) in tools.iter().enumerate() {
        if let Some(g) = group(t) {
            by_group.entry(g).or_default().push(i);
        }
    }
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let members = group(t)
                .and_then(|g| by_group.get(&g))
                .map_or(&[][..], Vec::as_slice);
            let keywords = members
                .iter()
                .filter(|&&j| j != i)
                .filter_map(|&j| tools.get(j).and_then(|o| o.meta.as_ref()))
                .flat_map(|m| &m.rag_keywords);
            let mut out = BorrowedText::default();
            for k in keywords {
                if !out.push(k) {
                    break;
                }
            }
            out.into_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::rank::lexical::BORROWED_BYTES;

    #[test]
    fn one_group_of_thousands_of_tools_lends_a_bounded_share_to_each() {
        let n = 3000;
        let overlay: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!({
                    "id": format!("tool.t{i}"),
                    "category": "c",
                    "semanticGroup": "g",
                    "ragKeywords": [format!("keyword{i} one"), format!("keyword{i} two")],
                })
            })
            .collect();
        let overlay = Overlay::from_json(serde_json::to_vec(&overlay).unwrap().as_slice()).unwrap();
        let tools: Vec<ToolDescriptor> = (0..n)
            .map(|i| ToolDescriptor {
                name: format!("tool__t{i}"),
                description: "A tool.".into(),
                parameters: String::new(),
            })
            .collect();
        let config = RankConfig::try_new(Default::default()).unwrap();
        let registry = Registry::build(&tools, Some(&overlay), &config);
        let siblings = sibling_keywords(registry.tools());
        assert_eq!(siblings.len(), n);
        for (t, s) in registry.tools().iter().zip(&siblings) {
            assert!(!s.is_empty() && s.len() <= BORROWED_BYTES, "{}", s.len());
            // A tool never lends to itself.
            let own = t.id.trim_start_matches("tool.t");
            assert!(
                !s.split(' ').any(|w| w == format!("keyword{own}")),
                "{}",
                t.id
            );
        }
    }
}
