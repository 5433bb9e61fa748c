//! Shapes of the providers' current API references that keyhole must read
//! (tools kept or ranked, forcing forms kept, sources bounded) and the
//! headroom that keeps them from being refused.

use super::*;
use crate::config::OnOutage;
use crate::proto::tools::{Reason, ResolveResponse, Source, SurfacedTool};
use crate::tools::surface::{self, Finished, Read, Refusal};
use crate::{tools::detect, Phase};

fn chat_tools(n: usize) -> String {
    let tools: Vec<String> =
        (0..n).map(|i| format!(r#"{{"type":"function","function":{{"name":"t{i}","description":"d{i}","parameters":{{"type":"object"}}}}}}"#)).collect();
    tools.join(",")
}

fn responses_tools(n: usize) -> String {
    let tools: Vec<String> = (0..n)
        .map(|i| {
            format!(r#"{{"type":"function","name":"t{i}","description":"d{i}","parameters":{{}}}}"#)
        })
        .collect();
    tools.join(",")
}

fn answer(n: usize) -> ResolveResponse {
    ResolveResponse {
        tools: (0..n)
            .map(|i| SurfacedTool {
                name: format!("t{i}"),
                reason: Reason::Rag,
                mutating: false,
            })
            .collect(),
        source: Source::Retrieval,
        turn: None,
    }
}

/// Reads and finishes `body` as the filter does, control answering the first
/// 40 tools; the forwarded body, or the refusal.
fn through(path: &str, body: &str, phase: Phase) -> Result<Vec<u8>, Refusal> {
    let mut memo = Memo::new();
    match surface::read(
        path,
        body.as_bytes(),
        phase,
        &BuiltinTools::default(),
        &mut memo,
    ) {
        Read::Pass => Ok(body.as_bytes().to_vec()),
        Read::Refuse(refusal, _) => Err(refusal),
        Read::Resolve(req) => {
            let search = surface::offers_search_tool(&req, phase, true);
            match surface::finish_with(
                &req,
                body.as_bytes(),
                phase,
                Ok(&answer(40)),
                &[],
                OnOutage::Reject,
                search,
            ) {
                Finished::Forward { body, .. } => Ok(body),
                Finished::Refuse(refusal, _) => Err(refusal),
            }
        }
    }
}

fn kept(out: &[u8]) -> usize {
    parse("/any", out).unwrap().map_or(0, |r| r.tools.len())
}

#[test]
fn a_structured_output_takes_a_place_and_is_never_refused() {
    let chat = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"tools":[{}],"response_format":{{"type":"json_schema","json_schema":{{"name":"answer","schema":{{"type":"object"}},"strict":true}}}}}}"#,
        chat_tools(108)
    );
    let responses = format!(
        r#"{{"model":"m","input":"hi","tools":[{}],"text":{{"format":{{"type":"json_schema","name":"answer","schema":{{"type":"object"}},"strict":true}}}}}}"#,
        responses_tools(108)
    );
    for (path, body) in [("/v1/chat/completions", chat), ("/v1/responses", responses)] {
        for phase in Phase::ALL {
            let out =
                through(path, &body, phase).unwrap_or_else(|r| panic!("{path} {phase}: {r:?}"));
            assert_eq!(
                detect::count_tool_shaped(&out).unwrap(),
                phase.budget().max,
                "{path} {phase}"
            );
            assert!(
                String::from_utf8_lossy(&out).contains(r#""name":"answer""#),
                "{path}: the schema is kept"
            );
        }
    }
}

#[test]
fn a_body_whose_rest_alone_is_over_the_budget_is_refused() {
    let listing: Vec<String> = (0..13)
        .map(|i| format!(r#"{{"name":"m{i}","input_schema":{{}}}}"#))
        .collect();
    let body = format!(
        r#"{{"input":[{{"type":"mcp_list_tools","server_label":"s","tools":[{}]}}],"tools":[{}]}}"#,
        listing.join(","),
        responses_tools(3)
    );
    assert_eq!(
        through("/v1/responses", &body, Phase::Planner),
        Err(Refusal::OverBudget {
            found: 13,
            budget: 12
        })
    );
    // Eleven listed: one place is left, for one tool (no room for the control tool).
    let body = body.replace(
        r#"{"name":"m11","input_schema":{}},{"name":"m12","input_schema":{}}"#,
        "",
    );
    let body = body.replace(r#",]"#, "]");
    let out = through("/v1/responses", &body, Phase::Planner).unwrap();
    assert_eq!(kept(&out), 1);
    assert_eq!(detect::count_tool_shaped(&out).unwrap(), 12);
}

#[test]
fn a_kept_tool_that_counts_twice_gives_a_place() {
    // A schema whose examples hold {name, description}: the detector counts
    // the tool twice; the set shrinks until the body fits.
    let tools: Vec<String> = (0..20)
        .map(|i| format!(r#"{{"type":"function","function":{{"name":"t{i}","parameters":{{"type":"object","examples":[{{"name":"x","description":"y"}}]}}}}}}"#))
        .collect();
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":[{}]}}"#,
        tools.join(",")
    );
    let out = through("/v1/chat/completions", &body, Phase::Planner).unwrap();
    assert!(detect::count_tool_shaped(&out).unwrap() <= 12);
    // Five tools counted twice and the control tool: 11; a sixth would be 13.
    assert_eq!(kept(&out), 6, "five registry tools and the control tool");
}

#[test]
fn allowed_tools_are_kept_as_a_named_choice_is() {
    let chat = format!(
        r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":[{}],"tool_choice":{{"type":"allowed_tools","allowed_tools":{{"mode":"required","tools":[{{"type":"function","function":{{"name":"t90"}}}},{{"type":"function","function":{{"name":"t99"}}}}]}}}}}}"#,
        chat_tools(108)
    );
    let req = parse("/v1/chat/completions", chat.as_bytes())
        .unwrap()
        .unwrap();
    assert_eq!(req.forced, vec!["t90".to_owned(), "t99".to_owned()]);
    let responses = format!(
        r#"{{"input":"hi","tools":[{}],"tool_choice":{{"type":"allowed_tools","mode":"required","tools":[{{"type":"function","name":"t90"}},{{"type":"function","name":"t99"}},{{"type":"image_generation"}}]}}}}"#,
        responses_tools(108)
    );
    let req = parse("/v1/responses", responses.as_bytes())
        .unwrap()
        .unwrap();
    assert_eq!(req.forced, vec!["t90".to_owned(), "t99".to_owned()]);
    for (path, body) in [
        ("/v1/chat/completions", &chat),
        ("/v1/responses", &responses),
    ] {
        let out = String::from_utf8(through(path, body, Phase::Planner).unwrap()).unwrap();
        assert!(
            out.contains(r#""name":"t90","description""#)
                && out.contains(r#""name":"t99","description""#),
            "{path}"
        );
    }
}

#[test]
fn current_builtins_of_every_family_are_kept_and_unknown_types_refused() {
    let anthropic = r#"{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20260209","name":"web_search","max_uses":3},{"type":"web_fetch_20260309","name":"web_fetch"},{"type":"code_execution_20260120","name":"code_execution"},{"type":"computer_20251124","name":"computer","display_width_px":1024,"display_height_px":768},{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"},{"type":"bash_20250124","name":"bash"},{"type":"memory_20250818","name":"memory"},{"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"},{"name":"a","description":"d","input_schema":{"type":"object"}}]}"#.to_string();
    let req = parse("/v1/messages", anthropic.as_bytes())
        .unwrap()
        .unwrap();
    assert_eq!(req.tools.len(), 1);
    let responses = r#"{"input":"hi","tools":[{"type":"tool_search"},{"type":"computer","display_width":1024,"display_height":768,"environment":"browser"},{"type":"web_search_2025_08_26"},{"type":"function","name":"a","description":"d","parameters":{},"defer_loading":true}]}"#.to_string();
    let req = parse("/v1/responses", responses.as_bytes())
        .unwrap()
        .unwrap();
    assert_eq!(req.tools.len(), 1);
    for bad in [
        r#"{"type":"web_search_x"}"#,
        r#"{"type":"teleport_20260101"}"#,
    ] {
        let body = format!(r#"{{"input":"hi","tools":[{bad}]}}"#);
        assert!(
            matches!(
                parse("/v1/responses", body.as_bytes()),
                Err(FormatError::Tool { .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn a_namespace_is_ranked_like_its_tools_and_dropped_when_emptied() {
    let body = format!(
        r#"{{"input":"hi","tools":[{{"type":"namespace","name":"crm","description":"CRM tools","tools":[{}]}},{{"type":"namespace","name":"lab","description":"Lab","tools":[{{"type":"function","name":"x1"}},{{"type":"custom","name":"x2"}}]}}]}}"#,
        responses_tools(30)
    );
    let req = parse("/v1/responses", body.as_bytes()).unwrap().unwrap();
    assert_eq!(req.tools.len(), 32);
    let out = through("/v1/responses", &body, Phase::Planner).unwrap();
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(
        text.contains(r#""name":"crm""#) && !text.contains(r#""name":"lab""#),
        "{text}"
    );
    assert!(detect::count_tool_shaped(&out).unwrap() <= 12);
    let again = parse("/v1/responses", &out).unwrap().unwrap();
    // The namespace kept is no definition of its own: its tools fill the
    // whole budget.
    assert!(again.tools.len() <= 12 && !again.tools.is_empty());
}

#[test]
fn mcp_servers_take_the_places_of_their_tools_or_are_refused() {
    let with = |mcp: &str, extra: &str| {
        format!(
            r#"{{"input":[{extra}{{"role":"user","content":"hi"}}],"tools":[{mcp},{}]}}"#,
            responses_tools(40)
        )
    };
    // allowed_tools, as a list or a filter: their places are taken.
    for mcp in [
        r#"{"type":"mcp","server_label":"s","server_url":"https://x","allowed_tools":["a","b","c"],"require_approval":"never"}"#,
        r#"{"type":"mcp","server_label":"s","server_url":"https://x","allowed_tools":{"tool_names":["a","b","c"]}}"#,
    ] {
        let body = with(mcp, "");
        let req = parse("/v1/responses", body.as_bytes()).unwrap().unwrap();
        assert_eq!(req.sourced, 3);
        let out = through("/v1/responses", &body, Phase::Planner).unwrap();
        assert_eq!(kept(&out), 9, "12 - 3 places, the control tool among them");
    }
    // None: a replayed listing of that server bounds it; else refused.
    let bare = r#"{"type":"mcp","server_label":"s","server_url":"https://x"}"#;
    let listing = r#"{"type":"mcp_list_tools","id":"l","server_label":"s","tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{}}]},"#;
    let out = through("/v1/responses", &with(bare, listing), Phase::Planner).unwrap();
    assert_eq!(kept(&out), 10);
    let refused = parse("/v1/responses", with(bare, "").as_bytes()).unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains("tools[0]")
            && message.contains("allowed_tools")
            && message.contains(PASS_SETTING),
        "{message}"
    );
    let other = listing.replace(r#""server_label":"s""#, r#""server_label":"other""#);
    assert!(
        parse("/v1/responses", with(bare, &other).as_bytes()).is_err(),
        "another server's listing bounds nothing"
    );
    // An operator may pass them knowingly.
    let mut pass = BuiltinTools::default();
    pass.set_pass_unbounded_sources(true);
    assert_eq!(
        parse_with("/v1/responses", with(bare, "").as_bytes(), &pass)
            .unwrap()
            .unwrap()
            .sourced,
        0
    );

    // Anthropic: a toolset off by default brings what its configs enable.
    let anthropic = |toolset: &str, servers: &str| {
        format!(
            r#"{{"model":"m","max_tokens":9,"messages":[{{"role":"user","content":"hi"}}],"mcp_servers":[{servers}],"tools":[{toolset}{{"name":"a","input_schema":{{}}}}]}}"#
        )
    };
    let server = r#"{"type":"url","url":"https://x","name":"s"}"#;
    let off = r#"{"type":"mcp_toolset","mcp_server_name":"s","default_config":{"enabled":false},"configs":{"a1":{"enabled":true},"a2":{"enabled":true},"a3":{"enabled":false}}},"#;
    assert_eq!(
        parse("/v1/messages", anthropic(off, server).as_bytes())
            .unwrap()
            .unwrap()
            .sourced,
        2
    );
    let on = r#"{"type":"mcp_toolset","mcp_server_name":"s"},"#;
    assert!(matches!(
        parse("/v1/messages", anthropic(on, server).as_bytes()),
        Err(FormatError::UnboundedToolSource { .. })
    ));
    // The older connector: a server's own tool_configuration.
    let allowed = r#"{"type":"url","url":"https://x","name":"s","tool_configuration":{"enabled":true,"allowed_tools":["a","b"]}}"#;
    assert_eq!(
        parse("/v1/messages", anthropic("", allowed).as_bytes())
            .unwrap()
            .unwrap()
            .sourced,
        2
    );
    assert!(matches!(
        parse("/v1/messages", anthropic("", server).as_bytes()),
        Err(FormatError::UnboundedToolSource { .. })
    ));
}

#[test]
fn anthropic_bodies_are_read_by_their_own_members_on_any_path() {
    let tools = r#"[{"name":"a","description":"d","input_schema":{"type":"object"}},{"name":"b","input_schema":{"type":"object"}}]"#;
    let vertex = format!(
        r#"{{"anthropic_version":"vertex-2023-10-16","max_tokens":100,"messages":[{{"role":"user","content":[{{"type":"text","text":"hi"}}]}}],"tools":{tools}}}"#
    );
    let bedrock = vertex.replace("vertex-2023-10-16", "bedrock-2023-05-31");
    let bare = format!(
        r#"{{"max_tokens":100,"messages":[{{"role":"user","content":"hi"}}],"tools":{tools}}}"#
    );
    for (path, body) in [
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude:rawPredict",
            &vertex,
        ),
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude:streamRawPredict",
            &vertex,
        ),
        ("/model/anthropic.claude-v2/invoke", &bedrock),
        (
            "/model/anthropic.claude-v2/invoke-with-response-stream",
            &bedrock,
        ),
        ("/gateway/x", &bare),
    ] {
        let req = parse(path, body.as_bytes())
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .unwrap();
        assert_eq!(req.format, Format::Anthropic, "{path}");
        assert_eq!(req.turn, "hi");
    }
}

#[test]
fn a_forced_tool_pushed_out_by_the_rest_is_refused_not_dropped() {
    // tool-input's one place: a structured output takes it, and the tool
    // the request forces no longer fits. Dropping it would change what the
    // client asked for: refused, saying why.
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":[{}],"tool_choice":{{"type":"function","function":{{"name":"t7"}}}},"response_format":{{"type":"json_schema","json_schema":{{"name":"r","schema":{{}}}}}}}}"#,
        chat_tools(20)
    );
    assert_eq!(
        through("/v1/chat/completions", &body, Phase::ToolInput),
        Err(Refusal::OverBudget {
            found: 2,
            budget: 1
        })
    );
    // Without the schema it fits, and is kept.
    let plain = body.replace(
        r#","response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{}}}"#,
        "",
    );
    let out = String::from_utf8(through("/v1/chat/completions", &plain, Phase::ToolInput).unwrap())
        .unwrap();
    assert!(out.contains(r#""name":"t7""#));
}
