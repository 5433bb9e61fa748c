//! Tools a provider loads itself: MCP servers a request names.
//!
//! A Responses `mcp` tool, and an Anthropic `mcp_toolset` or `mcp_servers`
//! entry, make the provider fetch an MCP server's tools itself: no
//! definition passes through keyhole to be counted, yet every one of them is
//! in the model's context. Each such source takes the places of the tools it
//! brings, in this order:
//!
//! 1. the tools it allows: Responses `allowed_tools` (a list of names, or
//!    `{"tool_names": […]}`); an Anthropic toolset whose
//!    `default_config.enabled` is `false` brings the tools its `configs`
//!    enable; an Anthropic server's `tool_configuration.allowed_tools`, or
//!    none when `tool_configuration.enabled` is `false`; a server a toolset
//!    names is that toolset's;
//! 2. else the server's listing, when the request replays it (a Responses
//!    `mcp_list_tools` input item with the same `server_label`): those
//!    definitions are in the body, where the detector counts them already;
//! 3. else nothing bounds it: keyhole cannot know how many tools the
//!    provider will load, and the request is refused
//!    ([`FormatError::UnboundedToolSource`]) — unless the listener passes such
//!    sources knowingly ([`BuiltinTools::pass_unbounded_sources`]), when it
//!    takes no place.

use super::body::Top;
use super::{Builder, BuiltinTools, FormatError, Item};
use crate::json::shallow::{self, Raw};
use serde::Deserialize;
use std::borrow::Cow;

/// The setting that passes unbounded sources, as the refusal names it.
pub const PASS_SETTING: &str = "unbounded_tool_sources: pass";

/// A tools element that is a tool source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Source {
    /// The MCP server it names (`server_label`, `mcp_server_name`).
    pub server: String,
    /// What bounds it.
    pub places: Places,
}

/// What bounds a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Places {
    /// It brings at most this many tools.
    Bounded(usize),
    /// Bounded by the server's listing, if the request replays one.
    Listed,
    /// Nothing bounds it.
    Unbounded,
}

/// A Responses `mcp` tool's `allowed_tools`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Allowed<'a> {
    Names(#[serde(borrow)] Vec<Cow<'a, str>>),
    Filter {
        #[serde(borrow, default)]
        tool_names: Option<Vec<Cow<'a, str>>>,
    },
}

#[derive(Deserialize)]
struct ResponsesMcp<'a> {
    #[serde(borrow, default)]
    server_label: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    allowed_tools: Option<Allowed<'a>>,
}

#[derive(Deserialize)]
struct Enabled {
    #[serde(default)]
    enabled: Option<bool>,
}

#[derive(Deserialize)]
struct Toolset<'a> {
    #[serde(borrow, default)]
    mcp_server_name: Option<Cow<'a, str>>,
    #[serde(default)]
    default_config: Option<Enabled>,
    #[serde(borrow, default)]
    configs: Option<std::collections::BTreeMap<Cow<'a, str>, Enabled>>,
}

#[derive(Deserialize)]
struct Server<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_configuration: Option<ToolConfiguration<'a>>,
}

#[derive(Deserialize)]
struct ToolConfiguration<'a> {
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(borrow, default)]
    allowed_tools: Option<Vec<Cow<'a, str>>>,
}

#[derive(Deserialize)]
struct InputItem<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    server_label: Option<Cow<'a, str>>,
}

impl<'a> Builder<'a, '_> {
    /// A Responses `mcp` tool at `at`.
    pub(super) fn responses_mcp(
        &self,
        raw: Raw<'a>,
        at: &dyn Fn() -> String,
    ) -> Result<Item, FormatError> {
        let tool: ResponsesMcp<'_> = self.read(raw, at)?;
        let places = match tool.allowed_tools {
            Some(Allowed::Names(names)) => Places::Bounded(names.len()),
            Some(Allowed::Filter {
                tool_names: Some(names),
            }) => Places::Bounded(names.len()),
            Some(Allowed::Filter { tool_names: None }) | None => Places::Listed,
        };
        Ok(Item::Source(Source {
            server: tool.server_label.map(Cow::into_owned).unwrap_or_default(),
            places,
        }))
    }

    /// An Anthropic `mcp_toolset` at `at`.
    pub(super) fn anthropic_toolset(
        &self,
        raw: Raw<'a>,
        at: &dyn Fn() -> String,
    ) -> Result<Item, FormatError> {
        let set: Toolset<'_> = self.read(raw, at)?;
        let default_on = set.default_config.and_then(|c| c.enabled).unwrap_or(true);
        let places = if default_on {
            Places::Unbounded
        } else {
            let enabled = set
                .configs
                .iter()
                .flatten()
                .filter(|(_, c)| c.enabled == Some(true))
                .count();
            Places::Bounded(enabled)
        };
        Ok(Item::Source(Source {
            server: set.mcp_server_name.map(Cow::into_owned).unwrap_or_default(),
            places,
        }))
    }

    /// The places the request's tool sources take, or why one is refused.
    pub(super) fn source_places(&self, top: &Top<'a>) -> Result<usize, FormatError> {
        let pass = self.builtins.pass_unbounded_sources();
        let mut places = 0usize;
        let mut servers_in_tools: Vec<&str> = Vec::new();
        for (i, source) in self.sources() {
            servers_in_tools.push(&source.server);
            let bounded = match source.places {
                Places::Bounded(n) => Some(n),
                Places::Listed if replays_listing(top.input, &source.server) => Some(0),
                Places::Listed | Places::Unbounded => None,
            };
            match bounded {
                Some(n) => places = places.saturating_add(n),
                None if pass => {}
                None => {
                    let member = if source.places == Places::Listed {
                        "allowed_tools"
                    } else {
                        "default_config.enabled: false with configs"
                    };
                    return Err(FormatError::UnboundedToolSource {
                        at: format!("tools[{i}]"),
                        member,
                        setting: PASS_SETTING,
                    });
                }
            }
        }
        if let Some(raw) = top.mcp_servers {
            let servers: Vec<Server<'_>> = self.read(raw, &|| "mcp_servers".to_owned())?;
            for (i, server) in servers.iter().enumerate() {
                let name = server.name.as_deref().unwrap_or_default();
                let config = server.tool_configuration.as_ref();
                let bounded = match config {
                    Some(ToolConfiguration {
                        enabled: Some(false),
                        ..
                    }) => Some(0),
                    Some(ToolConfiguration {
                        allowed_tools: Some(names),
                        ..
                    }) => Some(names.len()),
                    _ if servers_in_tools.contains(&name) => Some(0),
                    _ => None,
                };
                match bounded {
                    Some(n) => places = places.saturating_add(n),
                    None if pass => {}
                    None => {
                        return Err(FormatError::UnboundedToolSource {
                            at: format!("mcp_servers[{i}]"),
                            member: "tool_configuration.allowed_tools",
                            setting: PASS_SETTING,
                        })
                    }
                }
            }
        }
        Ok(places)
    }

    /// The tool sources of the top-level tools array, with their indexes.
    fn sources(&self) -> impl Iterator<Item = (usize, &Source)> {
        let tools = self
            .arrays
            .iter()
            .filter(|a| a.role == super::ArrayRole::Tools);
        tools
            .flat_map(|a| a.elements.iter().enumerate())
            .filter_map(|(i, e)| match &e.item {
                Item::Source(source) => Some((i, source)),
                _ => None,
            })
    }
}

/// Whether the Responses `input` replays the tool listing of `server`.
fn replays_listing(input: Option<Raw<'_>>, server: &str) -> bool {
    let Some(items) = input.and_then(|raw| shallow::from_str::<Vec<InputItem<'_>>>(raw.get()).ok())
    else {
        return false;
    };
    items.iter().any(|item| {
        item.kind.as_deref() == Some("mcp_list_tools")
            && item.server_label.as_deref() == Some(server)
    })
}

impl BuiltinTools {
    /// Whether tool sources nothing bounds are passed (taking no place)
    /// rather than refused; see the [module docs](self).
    pub fn pass_unbounded_sources(&self) -> bool {
        self.pass_sources
    }

    /// Passes (`true`) or refuses (`false`, the default) tool sources
    /// nothing bounds.
    pub fn set_pass_unbounded_sources(&mut self, pass: bool) {
        self.pass_sources = pass;
    }
}
