use super::*;
use serde_json::value::RawValue;
use serde_json::Value;

fn catalog(name: &str) -> Vec<u8> {
    let path = format!("{}/../../shared/catalog/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The raw bytes of each element of the body's top-level `tools` array.
fn raw_tools(body: &[u8]) -> Vec<String> {
    #[derive(Deserialize)]
    struct B<'a> {
        #[serde(borrow)]
        tools: Vec<&'a RawValue>,
    }
    let b: B<'_> = serde_json::from_slice(body).unwrap();
    b.tools.iter().map(|r| r.get().to_owned()).collect()
}

#[test]
fn reads_the_catalog_request() {
    let body = catalog("openai_request.json");
    let req = parse("/v1/chat/completions", &body).unwrap().unwrap();
    assert_eq!(req.format, Format::OpenAiChat);
    assert_eq!(req.tools.len(), 108);
    assert_eq!(req.tools[0].name, "appointment__manage");
    assert!(!req.tools[0].description.is_empty());
    assert!(!req.turn.is_empty());
    assert_eq!(req.tool_choice, None, "\"auto\" names no function");
}

#[test]
fn rewrite_keeps_chosen_tools_byte_for_byte_and_the_rest_of_the_body() {
    let body = catalog("openai_request.json");
    let req = parse("/v1/chat/completions", &body).unwrap().unwrap();
    let keep = req.select(
        &["appointment__manage", "patient__search__smart", "nope"],
        12,
    );
    let out = req.rewrite(&body, &keep);

    let original = raw_tools(&body);
    let kept = raw_tools(&out);
    assert_eq!(kept.len(), 2);
    for t in &kept {
        assert!(original.contains(t), "kept tool not byte-identical: {t}");
    }
    // Request order is kept, not the order of the names.
    assert!(kept[0].contains("appointment__manage"));

    let mut a: Value = serde_json::from_slice(&body).unwrap();
    let mut b: Value = serde_json::from_slice(&out).unwrap();
    a.as_object_mut().unwrap().remove("tools");
    b.as_object_mut().unwrap().remove("tools");
    assert_eq!(a, b, "everything but tools is unchanged");
    assert!(out.len() < 8 * 1024, "two tools, {} bytes", out.len());
}

#[test]
fn rewrite_to_nothing_leaves_an_empty_array() {
    let body = br#"{"model":"m","tools":[{"type":"function","function":{"name":"a"}}],"x":1}"#;
    let req = parse("/", body).unwrap().unwrap();
    assert_eq!(
        req.rewrite(body, &[]),
        br#"{"model":"m","tools":[],"x":1}"#.to_vec()
    );
}

#[test]
fn non_function_tools_are_kept_and_not_counted() {
    let body = br#"{"tools":[{"type":"web_search"},{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]}"#;
    let req = parse("/", body).unwrap().unwrap();
    assert_eq!(req.tools.len(), 2);
    let out = req.rewrite(body, &req.select(&["b"], 12));
    assert_eq!(
        out,
        br#"{"tools":[{"type":"web_search"},{"type":"function","function":{"name":"b"}}]}"#
            .to_vec()
    );
}

#[test]
fn turn_is_the_latest_user_message_in_any_content_shape() {
    let body = br#"{"messages":[{"role":"user","content":"old"},{"role":"assistant","content":"x"},
        {"role":"user","content":[{"type":"text","text":"book"},{"type":"image_url","image_url":{}},{"type":"text","text":"now"}]},
        {"role":"tool","content":"result"}],"tools":[]}"#;
    let req = parse("/", body).unwrap().unwrap();
    assert_eq!(req.turn, "book\nnow");
}

#[test]
fn named_tool_choice_is_read() {
    let body = br#"{"tools":[],"tool_choice":{"type":"function","function":{"name":"a\u005fb"}}}"#;
    assert_eq!(
        parse("/", body).unwrap().unwrap().tool_choice.as_deref(),
        Some("a_b")
    );
}

#[test]
fn no_tools_means_nothing_to_do() {
    assert!(parse("/", br#"{"messages":[]}"#).unwrap().is_none());
    assert!(parse("/", br#"{"tools":null}"#).unwrap().is_none());
}

#[test]
fn unreadable_bodies_are_errors() {
    for bad in [
        &b"{"[..],
        b"not json",
        b"\xff\xfe",
        br#"{"tools":{}}"#,
        br#"{"tools":[1]}"#,
        br#"{"tools":[],"tools":[{"type":"function","function":{"name":"a"}}]}"#,
        br#"{"tools":[{"type":"function","function":{}}]}"#,
    ] {
        assert!(
            parse("/", bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn select_respects_the_limit_and_skips_duplicates() {
    let body = br#"{"tools":[{"function":{"name":"a"}},{"function":{"name":"b"}},{"function":{"name":"a"}}]}"#;
    let req = parse("/", body).unwrap().unwrap();
    assert_eq!(req.select(&["a", "a", "b"], 12), vec![0, 1]);
    assert_eq!(req.select(&["b", "a"], 1), vec![1]);
}

// === detection ===

#[test]
fn paths_name_formats_whatever_the_prefix_and_query() {
    for (path, format) in [
        ("/v1/chat/completions", Some(Format::OpenAiChat)),
        (
            "/openai/deployments/gpt/chat/completions?api-version=2024-10-21",
            Some(Format::OpenAiChat),
        ),
        ("/v1/responses", Some(Format::OpenAiResponses)),
        ("/v1/messages", Some(Format::Anthropic)),
        ("/anthropic/v1/messages/", Some(Format::Anthropic)),
        (
            "/v1beta/models/gemini-2.5-flash:generateContent",
            Some(Format::Gemini),
        ),
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            Some(Format::Gemini),
        ),
        ("/v1/messages/count_tokens", None),
        ("/v1/embeddings", None),
    ] {
        assert_eq!(Format::from_path(path), format, "{path}");
    }
    let names: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
    assert_eq!(
        names,
        ["openai-chat", "openai-responses", "anthropic", "gemini"]
    );
}

#[test]
fn shapes_name_formats_on_unknown_paths() {
    for (body, format) in [
        (
            r#"{"tools":[{"type":"function","function":{"name":"a"}}]}"#,
            Format::OpenAiChat,
        ),
        (r#"{"functions":[{"name":"a"}]}"#, Format::OpenAiChat),
        (
            r#"{"messages":[],"tools":[{"type":"web_search"}]}"#,
            Format::OpenAiChat,
        ),
        (
            r#"{"tools":[{"type":"function","name":"a"}]}"#,
            Format::OpenAiResponses,
        ),
        (
            r#"{"input":"hi","tools":[{"type":"web_search_preview"}]}"#,
            Format::OpenAiResponses,
        ),
        (
            r#"{"tools":[{"name":"a","input_schema":{}}]}"#,
            Format::Anthropic,
        ),
        (
            r#"{"system":"s","messages":[],"tools":[{"type":"web_search_20250305","name":"web_search"}]}"#,
            Format::Anthropic,
        ),
        (
            r#"{"tools":[{"functionDeclarations":[{"name":"a"}]}]}"#,
            Format::Gemini,
        ),
        (
            r#"{"contents":[],"tools":[{"googleSearch":{}}]}"#,
            Format::Gemini,
        ),
    ] {
        let req = parse("/proxy", body.as_bytes()).unwrap().unwrap();
        assert_eq!(req.format, format, "{body}");
    }
}

#[test]
fn no_tools_passes_and_unknown_tools_are_refused() {
    for body in [
        "",
        "  \n",
        r#"{"model":"m","prompt":"x"}"#,
        r#"{"tools":[]}"#,
        r#"{"contents":[],"tools":null}"#,
    ] {
        assert!(
            parse("/proxy", body.as_bytes()).unwrap().is_none(),
            "{body:?}"
        );
    }
    for body in [
        r#"{"tools":[{"spec":{"name":"a"}}]}"#,
        r#"{"tools":[{"type":"web_search_v9"}]}"#,
    ] {
        let err = parse("/proxy", body.as_bytes()).unwrap_err();
        assert!(err.is_unknown_format(), "{body}: {err}");
    }
    // Nothing but allow-listed built-ins: no function tool to count, and the
    // same reading as the rewrite of a body whose function tools all went.
    let req = parse("/proxy", br#"{"tools":[{"type":"web_search"}]}"#)
        .unwrap()
        .unwrap();
    assert!(req.tools.is_empty());
}

#[test]
fn keys_that_carry_tools_are_read_exactly_once() {
    for (body, message) in [
        (
            r#"{"Tools":[{"name":"a"}],"tools":[]}"#,
            r#"request body has a key spelled like "tools" in another letter case"#,
        ),
        (
            r#"{"TOOL_CHOICE":"auto","tools":[]}"#,
            r#"request body has a key spelled like "tool_choice" in another letter case"#,
        ),
        (
            r#"{"contents":[],"toolconfig":{},"tools":[]}"#,
            r#"request body has a key spelled like "toolConfig" in another letter case"#,
        ),
        (
            r#"{"tools":[],"t\u006fols":[]}"#,
            r#"request body has the key "tools" more than once"#,
        ),
        (
            r#"{"functions":null,"functions":[]}"#,
            r#"request body has the key "functions" more than once"#,
        ),
        (
            r#"{"contents":[],"toolConfig":{},"tool_config":{},"tools":[]}"#,
            r#"request body has the key "toolConfig" more than once"#,
        ),
    ] {
        assert_eq!(
            parse("/v1beta/models/m:generateContent", body.as_bytes())
                .unwrap_err()
                .to_string(),
            message
        );
    }
    assert!(matches!(parse("/", b"[1]"), Err(FormatError::NotAnObject)));
    let err = parse("/", br#"{"tools":[]"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "request body is not a readable JSON request at line 1 column 11: unexpected end of input"
    );
}

#[test]
fn elements_must_be_tools_of_the_format() {
    for (path, body, message) in [
        (
            "/v1/responses",
            r#"{"tools":[{"type":"function","function":{"name":"a"}}]}"#,
            "tools[0] is not a openai-responses tool: a function tool without a name",
        ),
        (
            "/v1/messages",
            r#"{"tools":[{"description":"d","input_schema":{}}]}"#,
            "tools[0] is not a anthropic tool: a client tool without a name",
        ),
        (
            "/m:generateContent",
            r#"{"tools":[{"functionDeclarations":[{"name":"a"},{"description":"b"}]}]}"#,
            "tools[0].functionDeclarations[1] is not a gemini tool: a function tool without a name",
        ),
        (
            "/m:generateContent",
            r#"{"tools":[{"functionDeclarations":[],"function_declarations":[{"name":"a"}]}]}"#,
            "tools[0] is not a gemini tool: functionDeclarations appears more than once",
        ),
        (
            "/v1/chat/completions",
            r#"{"tools":[{"type":"custom"}]}"#,
            "tools[0] is not a openai-chat tool: a custom tool without a `custom` object",
        ),
        (
            "/v1/chat/completions",
            r#"{"tools":[{"type":"function","function":{"name":"a","description":7}}]}"#,
            "request body is not a readable openai-chat request at tools[0]: a field is missing or has the wrong type",
        ),
    ] {
        assert_eq!(parse(path, body.as_bytes()).unwrap_err().to_string(), message, "{body}");
    }
}

// === per format ===

#[test]
fn chat_counts_custom_and_legacy_functions() {
    let body = br#"{"messages":[{"role":"user","content":"go"}],
        "tools":[{"type":"custom","custom":{"name":"c","description":"free text"}},{"type":"function","function":{"name":"f"}}],
        "functions":[{"name":"g","description":"legacy"}],"function_call":{"name":"g"},
        "tool_choice":{"type":"custom","custom":{"name":"c"}}}"#;
    let req = parse("/v1/chat/completions", body).unwrap().unwrap();
    let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["c", "f", "g"]);
    assert_eq!(req.forced, ["c", "g"]);
    let out = req.rewrite(body, &req.select(&["f"], 12));
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(r#""tools":[{"type":"function","function":{"name":"f"}}]"#),
        "{text}"
    );
    assert!(text.contains(r#""functions":[],"function_call""#), "{text}");
}

#[test]
fn responses_reads_string_and_item_input() {
    let body = br#"{"input":"plain turn","tools":[{"type":"function","name":"a","description":"A"},{"type":"file_search","vector_store_ids":["v"]},{"type":"custom","name":"b"}],"tool_choice":{"type":"function","name":"b"}}"#;
    let req = parse("/v1/responses", body).unwrap().unwrap();
    assert_eq!(req.turn, "plain turn");
    assert_eq!(req.tools.len(), 2);
    assert_eq!(req.tools[0].description, "A");
    assert_eq!(req.tool_choice.as_deref(), Some("b"));
    assert_eq!(
        req.rewrite(body, &[1]),
        br#"{"input":"plain turn","tools":[{"type":"file_search","vector_store_ids":["v"]},{"type":"custom","name":"b"}],"tool_choice":{"type":"function","name":"b"}}"#.to_vec()
    );

    let body = br#"{"input":[{"role":"user","content":"first"},{"type":"function_call","call_id":"c","name":"a","arguments":"{}"},
        {"type":"message","role":"user","content":[{"type":"input_text","text":"second"},{"type":"input_image","image_url":"u"},{"type":"input_text","text":"part"}]},
        {"type":"function_call_output","call_id":"c","output":"result"}],"tools":[],"tool_choice":{"type":"web_search_preview"}}"#;
    let req = parse("/v1/responses", body).unwrap().unwrap();
    assert_eq!(req.turn, "second\npart");
    assert_eq!(req.tool_choice, None);
}

#[test]
fn anthropic_skips_tool_results_and_reads_tool_choice() {
    let body = br#"{"system":[{"type":"text","text":"sys"}],"messages":[
        {"role":"user","content":[{"type":"text","text":"book it"},{"type":"image","source":{}}]},
        {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"a","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"done"}]}],
        "tools":[{"type":"custom","name":"a","input_schema":{}},{"type":"bash_20250124","name":"bash"},{"name":"b","description":"B","input_schema":{}}],
        "tool_choice":{"type":"tool","name":"b"}}"#;
    let req = parse("/v1/messages", body).unwrap().unwrap();
    assert_eq!(req.turn, "book it");
    let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(req.forced, ["b"]);
    let out = String::from_utf8(req.rewrite(body, &[1])).unwrap();
    assert!(
        out.contains(
            r#""tools":[{"type":"bash_20250124","name":"bash"},{"name":"b","description":"B","input_schema":{}}]"#
        ),
        "{out}"
    );
}

#[test]
fn gemini_drops_emptied_entries_and_keeps_mixed_ones() {
    let body = br#"{"contents":[{"parts":[{"text":"no role means user"}]},{"role":"model","parts":[{"text":"x"}]},
        {"role":"user","parts":[{"functionResponse":{"name":"a","response":{}}}]}],
        "tools":[{"functionDeclarations":[{"name":"a"},{"name":"b"}]},{"googleSearch":{}},{"function_declarations":[{"name":"c","description":"C"}],"codeExecution":{}}],
        "tool_config":{"function_calling_config":{"mode":"ANY","allowed_function_names":["c"]}}}"#;
    let req = parse("/v1beta/models/m:generateContent", body)
        .unwrap()
        .unwrap();
    assert_eq!(req.turn, "no role means user");
    let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(req.forced, ["c"]);

    let text = |keep: &[usize]| {
        let out = String::from_utf8(req.rewrite(body, keep)).unwrap();
        let start = out.find(r#""tools""#).unwrap();
        let end = out.find(r#""tool_config""#).unwrap();
        out[start..end]
            .trim_end_matches([',', ' ', '\n'])
            .to_owned()
    };
    assert_eq!(
        text(&[1]),
        r#""tools":[{"functionDeclarations":[{"name":"b"}]},{"googleSearch":{}},{"function_declarations":[],"codeExecution":{}}]"#
    );
    assert_eq!(
        text(&[2]),
        r#""tools":[{"googleSearch":{}},{"function_declarations":[{"name":"c","description":"C"}],"codeExecution":{}}]"#
    );
    // Nothing removed at the outer level: its whitespace is the client's.
    let all = req.rewrite(body, &[0, 1, 2]);
    assert_eq!(all, body.to_vec());
}

#[test]
fn every_format_reads_the_words_of_each_tools_schema() {
    let schema = r#"{"type":"object","properties":{"insuranceCardRead":{"type":"boolean","description":"Card read."}}}"#;
    let words = "insurance Card Read Card read.";
    let bodies: [(&str, String, &[&str]); 5] = [
        (
            "/v1/chat/completions",
            format!(
                r#"{{"messages":[],"tools":[{{"type":"function","function":{{"name":"a","parameters":{schema}}}}},
                {{"type":"custom","custom":{{"name":"b"}}}}],"functions":[{{"name":"c","parameters":{schema}}}]}}"#
            ),
            &[words, "", words],
        ),
        (
            "/v1/responses",
            format!(
                r#"{{"input":"x","tools":[{{"type":"function","name":"a","parameters":{schema}}},
                {{"type":"namespace","name":"n","description":"N","tools":[{{"type":"function","name":"b","parameters":{schema}}}]}}]}}"#
            ),
            &[words, words],
        ),
        (
            "/v1/messages",
            format!(
                r#"{{"messages":[],"tools":[{{"name":"a","input_schema":{schema}}},{{"name":"b"}}]}}"#
            ),
            &[words, ""],
        ),
        (
            "/v1beta/models/m:generateContent",
            format!(
                r#"{{"contents":[],"tools":[{{"functionDeclarations":[{{"name":"a","parameters":{schema}}},
                {{"name":"b","parametersJsonSchema":{schema}}}]}}]}}"#
            ),
            &[words, words],
        ),
        (
            "/v1beta/models/m:generateContent",
            format!(
                r#"{{"contents":[],"tools":[{{"function_declarations":[{{"name":"a","parameters_json_schema":{schema}}},
                {{"name":"b","parameters":"not a schema"}}]}}]}}"#
            ),
            &[words, ""],
        ),
    ];
    for (path, body, want) in bodies {
        let req = parse(path, body.as_bytes()).unwrap().unwrap();
        let got: Vec<&str> = req.tools.iter().map(|t| t.parameters.as_ref()).collect();
        assert_eq!(got, want, "{path}: {body}");
        let sent: Vec<String> = req
            .descriptors()
            .into_iter()
            .map(|d| d.parameters)
            .collect();
        assert_eq!(sent, want, "{path}");
        assert_eq!(
            req.registry_digest(),
            crate::proto::tools::descriptors_digest(&req.descriptors()),
            "{path}: the digest control keys is the descriptors' own"
        );
    }
}

#[test]
fn the_catalog_reads_the_same_schema_words_in_chat_and_anthropic_shapes() {
    let chat = catalog("openai_request.json");
    let anthropic = catalog("anthropic_request.json");
    let chat = parse("/v1/chat/completions", &chat).unwrap().unwrap();
    let anthropic = parse("/v1/messages", &anthropic).unwrap().unwrap();
    let words = |r: &ParsedRequest<'_>| -> Vec<(String, String)> {
        r.tools
            .iter()
            .map(|t| (t.name.to_string(), t.parameters.to_string()))
            .collect()
    };
    let chat_words = words(&chat);
    assert!(
        chat_words.iter().all(|(_, w)| !w.is_empty()),
        "{chat_words:?}"
    );
    assert_eq!(chat_words, words(&anthropic));
}

#[test]
fn a_schema_keyhole_cannot_read_costs_its_words_never_the_request() {
    let deep = format!(
        "{}{{}}{}",
        r#"{"properties":{"a":"#.repeat(70),
        "}}".repeat(70)
    );
    let long = format!(
        r#"{{"properties":{{"a":{{"enum":[{}]}}}}}}"#,
        vec![r#""xxxxxxxxxx""#; 5000].join(",")
    );
    let schemas = [
        deep.as_str(),
        long.as_str(),
        "true",
        "[]",
        r#""a string""#,
        r#"{"properties":{"a":5,"b":null,"c":{"enum":[1,null,{"x":"y"}],"description":7}}}"#,
        r#"{"properties":{"\ud800":{"description":"lone surrogate name"}}}"#,
        r##"{"$ref":"#/$defs/x","$defs":{"x":{"properties":{"hidden":{}}}}}"##,
    ];
    for schema in schemas {
        let body = format!(
            r#"{{"messages":[{{"role":"user","content":"hi"}}],"tools":[{{"type":"function","function":{{"name":"a","parameters":{schema}}}}}]}}"#
        );
        let req = parse("/v1/chat/completions", body.as_bytes())
            .unwrap_or_else(|e| panic!("{e}: {}", &schema[..schema.len().min(80)]))
            .unwrap();
        assert_eq!(req.tools.len(), 1);
        let words = &req.tools[0].parameters;
        assert!(words.len() <= crate::tools::rank::lexical::BORROWED_BYTES);
        assert_eq!(
            req.registry_digest(),
            crate::proto::tools::descriptors_digest(&req.descriptors())
        );
    }
}

// === the tool-search control tool ===

/// The function names of a body that went through `rewrite_with_search_tool`,
/// read back by the parser.
fn names_after(path: &str, body: &[u8]) -> Vec<String> {
    let req = parse(path, body).unwrap().unwrap();
    req.tools.iter().map(|t| t.name.to_string()).collect()
}

#[test]
fn the_control_tool_is_added_in_each_format_and_reads_back() {
    use crate::tools::recovery::TOOL_NAME;
    let cases: [(&str, &[u8]); 5] = [
        ("/v1/chat/completions", br#"{"messages":[],"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]}"#),
        ("/v1/responses", br#"{"input":"t","tools":[{"type":"function","name":"a","parameters":{}},{"type":"web_search"},{"type":"function","name":"b","parameters":{}}]}"#),
        ("/v1/messages", br#"{"system":"s","messages":[],"tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{}}]}"#),
        ("/m:generateContent", br#"{"contents":[],"tools":[{"functionDeclarations":[{"name":"a"},{"name":"b"}]},{"googleSearch":{}}]}"#),
        ("/v1/chat/completions", br#"{"messages":[],"functions":[{"name":"a"},{"name":"b"}]}"#),
    ];
    for (path, body) in cases {
        let req = parse(path, body).unwrap().unwrap();
        let out = req.rewrite_with_search_tool(body, &[1]);
        assert_eq!(
            names_after(path, &out),
            ["b", TOOL_NAME],
            "{path}: {}",
            String::from_utf8_lossy(&out)
        );
        // Counted by the independent detector like any tool definition.
        assert_eq!(
            crate::tools::detect::count_tool_shaped(&out).unwrap(),
            2,
            "{path}"
        );
        // Nothing kept: the control tool alone.
        let alone = req.rewrite_with_search_tool(body, &[]);
        assert_eq!(
            names_after(path, &alone),
            [TOOL_NAME],
            "{path}: {}",
            String::from_utf8_lossy(&alone)
        );
        // Built-ins stay.
        if path.contains("responses") {
            assert!(String::from_utf8_lossy(&out).contains(r#"{"type":"web_search"}"#));
        }
    }
    // Gemini: into the first declarations array that goes out, else an entry of its own.
    let body = br#"{"contents":[],"tools":[{"functionDeclarations":[{"name":"a"}]},{"functionDeclarations":[{"name":"b"}]}]}"#;
    let req = parse("/m:generateContent", body).unwrap().unwrap();
    let out: Value = serde_json::from_slice(&req.rewrite_with_search_tool(body, &[1])).unwrap();
    assert_eq!(out["tools"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(
        out["tools"][0]["functionDeclarations"][1]["name"],
        TOOL_NAME
    );
    let out: Value = serde_json::from_slice(&req.rewrite_with_search_tool(body, &[])).unwrap();
    assert_eq!(
        out["tools"],
        serde_json::json!([{"functionDeclarations": [out["tools"][0]["functionDeclarations"][0].clone()]}])
    );
    assert_eq!(
        out["tools"][0]["functionDeclarations"][0]["name"],
        TOOL_NAME
    );
}

#[test]
fn the_control_tool_says_what_it_is_for_in_each_shape() {
    let body = br#"{"messages":[],"tools":[{"type":"function","function":{"name":"a"}}]}"#;
    let req = parse("/v1/chat/completions", body).unwrap().unwrap();
    let out: Value = serde_json::from_slice(&req.rewrite_with_search_tool(body, &[])).unwrap();
    let f = &out["tools"][0]["function"];
    assert_eq!(f["description"], crate::tools::recovery::DESCRIPTION);
    assert!(f["description"]
        .as_str()
        .unwrap()
        .contains("none of the other tools fits"));
    assert_eq!(f["parameters"]["required"], serde_json::json!(["query"]));
    assert_eq!(f["parameters"]["properties"]["query"]["type"], "string");
    let body = br#"{"system":"s","messages":[],"tools":[{"name":"a","input_schema":{}}]}"#;
    let req = parse("/v1/messages", body).unwrap().unwrap();
    let out: Value = serde_json::from_slice(&req.rewrite_with_search_tool(body, &[])).unwrap();
    assert_eq!(
        out["tools"][0]["input_schema"]["properties"]["query"]["type"],
        "string"
    );
}

/// A search call in each format's history, with or without a tool result
/// after it, and a user message after it that ends the user turn.
#[test]
fn a_search_call_is_read_from_each_formats_history() {
    const TOOLS_CHAT: &str = r#""tools":[{"type":"function","function":{"name":"a"}}]"#;
    let chat = |after: &str| {
        format!(
            r#"{{"messages":[{{"role":"user","content":"compute the bmi"}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"keyhole_tool_search","arguments":"{{\"query\":\" body mass index \"}}"}}}}]}}{after}],{TOOLS_CHAT}}}"#
        )
    };
    let responses = |after: &str| {
        format!(
            r#"{{"input":[{{"role":"user","content":[{{"type":"input_text","text":"compute the bmi"}}]}},{{"type":"function_call","call_id":"c1","name":"keyhole_tool_search","arguments":"{{\"query\":\"body mass index\"}}"}}{after}],"tools":[{{"type":"function","name":"a"}}]}}"#
        )
    };
    let anthropic = |after: &str| {
        format!(
            r#"{{"system":"s","messages":[{{"role":"user","content":"compute the bmi"}},{{"role":"assistant","content":[{{"type":"text","text":"let me look"}},{{"type":"tool_use","id":"t1","name":"keyhole_tool_search","input":{{"query":"body mass index"}}}}]}}{after}],"tools":[{{"name":"a","input_schema":{{}}}}]}}"#
        )
    };
    let gemini = |after: &str| {
        format!(
            r#"{{"contents":[{{"role":"user","parts":[{{"text":"compute the bmi"}}]}},{{"role":"model","parts":[{{"functionCall":{{"name":"keyhole_tool_search","args":{{"query":"body mass index"}}}}}}]}}{after}],"tools":[{{"functionDeclarations":[{{"name":"a"}}]}}]}}"#
        )
    };
    type Build = Box<dyn Fn(&str) -> String>;
    let cases: [(&str, Build, &str, &str); 4] = [
        (
            "/v1/chat/completions",
            Box::new(chat),
            r#",{"role":"tool","tool_call_id":"c1","content":"error: unknown tool"}"#,
            r#",{"role":"user","content":"thanks"}"#,
        ),
        (
            "/v1/responses",
            Box::new(responses),
            r#",{"type":"function_call_output","call_id":"c1","output":""}"#,
            r#",{"role":"user","content":"thanks"}"#,
        ),
        (
            "/v1/messages",
            Box::new(anthropic),
            r#",{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"unknown tool"}]}"#,
            r#",{"role":"user","content":"thanks"}"#,
        ),
        (
            "/m:generateContent",
            Box::new(gemini),
            r#",{"role":"user","parts":[{"functionResponse":{"name":"keyhole_tool_search","response":{"error":"unknown"}}}]}"#,
            r#",{"role":"user","parts":[{"text":"thanks"}]}"#,
        ),
    ];
    let want = Some(SearchCall {
        query: Some("body mass index".into()),
    });
    for (path, build, result, user) in cases {
        // The call alone, and the call with the agent's error result.
        for after in ["", result] {
            let body = build(after);
            let req = parse(path, body.as_bytes()).unwrap().unwrap();
            assert_eq!(req.search_call, want, "{path}: {body}");
            assert_eq!(
                req.turn, "compute the bmi",
                "{path}: the turn is still the user's"
            );
        }
        // The user spoke since: the search is over.
        let body = build(&format!("{result}{user}"));
        let req = parse(path, body.as_bytes()).unwrap().unwrap();
        assert_eq!(req.search_call, None, "{path}: {body}");
    }
    // No call at all, a call of another tool, a call without a query.
    let body = br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"function":{"name":"a","arguments":"{}"}}]}],"tools":[{"type":"function","function":{"name":"a"}}]}"#;
    assert_eq!(
        parse("/v1/chat/completions", body)
            .unwrap()
            .unwrap()
            .search_call,
        None
    );
    let body = br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"function":{"name":"keyhole_tool_search","arguments":"not json"}}]}],"tools":[{"type":"function","function":{"name":"a"}}]}"#;
    assert_eq!(
        parse("/v1/chat/completions", body)
            .unwrap()
            .unwrap()
            .search_call,
        Some(SearchCall { query: None })
    );
    // Legacy function_call.
    let body = br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","function_call":{"name":"keyhole_tool_search","arguments":"{\"query\":\"lab\"}"}}],"tools":[{"type":"function","function":{"name":"a"}}]}"#;
    assert_eq!(
        parse("/v1/chat/completions", body)
            .unwrap()
            .unwrap()
            .search_call,
        Some(SearchCall {
            query: Some("lab".into())
        })
    );
}

// === properties ===

mod props {
    use super::*;
    use proptest::prelude::*;

    /// One tool element of a format: (raw JSON, is a function tool, name).
    fn element(format: Format, name: String, builtin: bool) -> (String, bool) {
        let n = serde_json::to_string(&name).unwrap();
        let json = match (format, builtin) {
            (Format::OpenAiChat, false) => {
                format!(
                    r#"{{"type":"function","function":{{"name":{n},"parameters":{{"type":"object"}}}}}}"#
                )
            }
            (Format::OpenAiResponses, false) => {
                format!(r#"{{"type":"function","name":{n},"strict":true}}"#)
            }
            (Format::Anthropic, false) => {
                format!(r#"{{"name":{n},"input_schema":{{"type":"object"}}}}"#)
            }
            (Format::Gemini, false) => {
                format!(
                    r#"{{"functionDeclarations":[{{"name":{n}}}, {{"name":{n},"description":"twin"}}]}}"#
                )
            }
            (Format::OpenAiChat | Format::OpenAiResponses, true) => {
                r#"{"type":"web_search"}"#.to_owned()
            }
            (Format::Anthropic, true) => {
                r#"{"type":"web_search_20250305","name":"web_search"}"#.to_owned()
            }
            (Format::Gemini, true) => r#"{"googleSearch":{}}"#.to_owned(),
        };
        (json, !builtin)
    }

    fn request() -> impl Strategy<Value = (Format, String, Vec<String>, Vec<usize>)> {
        let format = prop::sample::select(Format::ALL.to_vec());
        let tools = prop::collection::vec(("[a-z\u{e9}_\"\\\\]{1,6}", any::<bool>()), 0..20);
        let keep = prop::collection::vec(0usize..40, 0..15);
        let space = prop::sample::select(vec!["", " ", "\n  "]);
        (format, tools, keep, space).prop_map(|(format, tools, keep, sp)| {
            let elements: Vec<(String, bool)> =
                tools.into_iter().map(|(name, builtin)| element(format, name, builtin)).collect();
            let raw: Vec<String> = elements.iter().map(|(j, _)| j.clone()).collect();
            let array = format!("[{sp}{}{sp}]", raw.join(&format!(",{sp}")));
            let body = match format {
                Format::Gemini => {
                    format!(r#"{{"contents":[{{"parts":[{{"text":"t"}}]}}],{sp}"tools":{sp}{array},"x":1.50}}"#)
                }
                Format::OpenAiResponses => format!(r#"{{"input":"t","tools":{array},"x":1.50}}"#),
                Format::Anthropic => format!(r#"{{"system":"s","messages":[],"tools":{array},"x":1.50}}"#),
                Format::OpenAiChat => format!(r#"{{"messages":[],"tools":{array},"x":1.50}}"#),
            };
            (format, body, raw, keep)
        })
    }

    /// Raw function-tool elements of a body (Gemini: declarations).
    fn functions(body: &[u8], format: Format) -> Vec<String> {
        #[derive(Deserialize)]
        struct Top<'a> {
            #[serde(borrow)]
            tools: Vec<&'a RawValue>,
        }
        #[derive(Deserialize)]
        struct Entry<'a> {
            #[serde(borrow, default, rename = "functionDeclarations")]
            declarations: Vec<&'a RawValue>,
        }
        let top: Top<'_> = serde_json::from_slice(body).unwrap();
        let mut out = Vec::new();
        for t in top.tools {
            match format {
                Format::Gemini => {
                    let e: Entry<'_> = serde_json::from_str(t.get()).unwrap();
                    out.extend(e.declarations.iter().map(|d| d.get().to_owned()));
                }
                _ if t.get().contains("web_search") => {}
                _ => out.push(t.get().to_owned()),
            }
        }
        out
    }

    proptest! {
        #[test]
        fn rewrite_keeps_exactly_the_chosen_tools_byte_for_byte((format, body, raw, keep) in request()) {
            let req = parse("/any", body.as_bytes()).unwrap().unwrap();
            prop_assert_eq!(req.format, format);
            let keep: Vec<usize> = keep.into_iter().filter(|&i| i < req.tools.len()).collect();
            let mut distinct = keep.clone();
            distinct.sort_unstable();
            distinct.dedup();

            let out = req.rewrite(body.as_bytes(), &keep);
            let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(&value["x"], &serde_json::json!(1.50));

            // Reads back as the same format with exactly the kept functions.
            let again = parse("/any", &out).unwrap().unwrap();
            prop_assert_eq!(again.format, format);
            prop_assert_eq!(again.tools.len(), distinct.len());
            let before = functions(body.as_bytes(), format);
            let after = functions(&out, format);
            let expected: Vec<String> = distinct.iter().map(|&i| before[i].clone()).collect();
            prop_assert_eq!(after, expected);

            // Built-ins all survive, byte for byte.
            let builtins = raw.iter().filter(|r| !r.contains("name\":") || r.contains("web_search\"")).count();
            let kept_builtins = raw.iter().filter(|r| (!r.contains("name\":") || r.contains("web_search\"")) && String::from_utf8_lossy(&out).contains(r.as_str())).count();
            prop_assert_eq!(builtins, kept_builtins);
        }

        /// The control tool joins exactly the kept tools: the body reads back
        /// as the same format with the kept functions and the control tool
        /// once, built-ins intact, and the independent detector counts one
        /// definition more than the plain rewrite.
        #[test]
        fn the_control_tool_joins_exactly_the_kept_tools((format, body, raw, keep) in request()) {
            use crate::tools::recovery::TOOL_NAME;
            let req = parse("/any", body.as_bytes()).unwrap().unwrap();
            let keep: Vec<usize> = keep.into_iter().filter(|&i| i < req.tools.len()).collect();
            let plain = req.rewrite(body.as_bytes(), &keep);
            let out = req.rewrite_with_search_tool(body.as_bytes(), &keep);
            let again = parse("/any", &out).unwrap().unwrap();
            prop_assert_eq!(again.format, format);
            let plain_names: Vec<String> = parse("/any", &plain).unwrap().map(|r| r.tools.iter().map(|t| t.name.to_string()).collect()).unwrap_or_default();
            let mut names: Vec<String> = again.tools.iter().map(|t| t.name.to_string()).collect();
            prop_assert_eq!(names.iter().filter(|n| *n == TOOL_NAME).count(), 1);
            names.retain(|n| n != TOOL_NAME);
            prop_assert_eq!(names, plain_names);
            let after = functions(&out, format);
            let before = functions(&plain, format);
            let without: Vec<String> = after.into_iter().filter(|f| !f.contains(TOOL_NAME)).collect();
            prop_assert_eq!(without, before);
            prop_assert_eq!(
                crate::tools::detect::count_tool_shaped(&out).unwrap(),
                crate::tools::detect::count_tool_shaped(&plain).unwrap() + 1
            );
            let text = String::from_utf8_lossy(&out);
            for r in raw.iter().filter(|r| !r.contains("name\":") || r.contains("web_search\"")) {
                prop_assert!(text.contains(r.as_str()), "built-in lost: {}", r);
            }
        }

        /// A memo reads every body as a fresh parse does: primed by another
        /// request, by the same one, by the same tools array moved within
        /// the body, read under another format's path, or damaged.
        #[test]
        fn a_memo_reads_as_a_fresh_parse(
            (_, a, _, _) in request(),
            (_, b, _, keep) in request(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let builtins = BuiltinTools::default();
            let mut memo = Memo::new();
            let moved = format!("{{  {}", &b[1..]);
            let mut damaged = b.clone().into_bytes();
            let i = at.index(damaged.len());
            damaged[i] = byte;
            let bodies: [(&str, &[u8]); 7] = [
                ("/any", a.as_bytes()),
                ("/any", b.as_bytes()),
                ("/any", b.as_bytes()),
                ("/any", moved.as_bytes()),
                ("/v1/chat/completions", b.as_bytes()),
                ("/v1/messages", moved.as_bytes()),
                ("/any", &damaged),
            ];
            for (path, body) in bodies {
                let fresh = parse_with(path, body, &builtins);
                let recalled = parse_memo(path, body, &builtins, &mut memo);
                match (fresh, recalled) {
                    (Ok(Some(f)), Ok(Some(r))) => {
                        prop_assert_eq!(f.format, r.format);
                        prop_assert_eq!(format!("{:?}", f.tools), format!("{:?}", r.tools));
                        prop_assert_eq!(format!("{:?}", f.arrays), format!("{:?}", r.arrays));
                        prop_assert_eq!(&f.turn, &r.turn);
                        prop_assert_eq!(&f.forced, &r.forced);
                        prop_assert_eq!(f.registry_digest(), r.registry_digest());
                        let keep: Vec<usize> = keep.iter().copied().filter(|&k| k < f.tools.len()).collect();
                        prop_assert_eq!(f.rewrite(body, &keep), r.rewrite(body, &keep));
                        prop_assert_eq!(f.rewrite_with_search_tool(body, &keep), r.rewrite_with_search_tool(body, &keep));
                    }
                    (Ok(None), Ok(None)) => {}
                    (Err(f), Err(r)) => prop_assert_eq!(f.to_string(), r.to_string()),
                    (f, r) => prop_assert!(false, "fresh {:?} recalled {:?}", f.map(|r| r.map(|r| r.tools.len())), r.map(|r| r.map(|r| r.tools.len()))),
                }
            }
            prop_assert!(memo.hits() >= 2 || !b.contains("\"tools\":[{"), "hits {}", memo.hits());
        }

        /// Walking the top level member by member reads every body as
        /// serde_json reading it whole does (or defers to it), with a memo
        /// or without: generated requests, moved, padded with whitespace,
        /// damaged, cut, with duplicate and case-variant keys.
        #[test]
        fn the_top_level_walk_reads_as_serde_json_does(
            (_, a, _, _) in request(),
            (_, b, _, _) in request(),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(b" \t\n{}[]\",:0-e\\n".to_vec()),
            extra in prop::sample::select(vec!["", ",\"tools\":[]", ",\"Tools\":null", ",\"tool_choice\":\"auto\"", ",\"messages\":null", " ", ",\"x\":[1,{}]"]),
        ) {
            let builtins = BuiltinTools::default();
            let mut memo = Memo::new();
            let _ = parse_memo("/any", a.as_bytes(), &builtins, &mut memo);
            let _ = parse_memo("/any", b.as_bytes(), &builtins, &mut memo);
            let with_extra = format!("{}{extra}}}", &b[..b.len() - 1]);
            let mut damaged = with_extra.clone().into_bytes();
            let i = at.index(damaged.len());
            damaged[i] = byte;
            let cut = &with_extra[..(0..=i.min(with_extra.len())).rev().find(|&c| with_extra.is_char_boundary(c)).unwrap_or(0)];
            let padded = format!(" \n{{ {} \t", &with_extra[1..]);
            let damaged = String::from_utf8_lossy(&damaged).into_owned();
            for body in [a.as_str(), b.as_str(), &with_extra, &damaged, cut, &padded] {
                let whole = body::Top::read_whole(body);
                for memo in [None, Some(&memo)] {
                    match (body::Top::walk(body, memo).map(body::Top::checked), &whole) {
                        (None, _) => {}
                        (Some(Err(e)), Err(whole)) => prop_assert_eq!(e.to_string(), whole.to_string()),
                        (Some(Err(e)), Ok(_)) => prop_assert!(false, "walk refused what serde_json reads ({}): {}", e, body),
                        (Some(Ok(top)), Ok(whole)) => {
                            let slots = |t: &body::Top<'_>| {
                                [t.tools, t.functions, t.tool_choice, t.function_call, t.tool_config, t.messages, t.input, t.contents, t.system]
                                    .map(|r| r.map(|r| r.get().to_owned()))
                            };
                            prop_assert_eq!(slots(&top), slots(whole), "{}", body);
                        }
                        (Some(Ok(_)), Err(e)) => prop_assert!(false, "walk read what serde_json refuses ({}): {}", e, body),
                    }
                    if body.trim_start().starts_with('{') {
                        let read = body::Top::read(body, memo).map(|_| ()).map_err(|e| e.to_string());
                        prop_assert_eq!(read, whole.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                    }
                }
            }
        }

        #[test]
        fn parse_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512), path in "[/a-z:]{0,30}") {
            let _ = parse(&path, &bytes);
        }

        #[test]
        fn parse_never_panics_on_damaged_requests((_, body, _, _) in request(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<bool>()) {
            let mut bytes = body.into_bytes();
            let i = at.index(bytes.len());
            if cut { bytes.truncate(i) } else { bytes[i] = byte }
            if let Ok(Some(req)) = parse("/any", &bytes) {
                let all: Vec<usize> = (0..req.tools.len()).collect();
                let out = req.rewrite(&bytes, &all[..all.len() / 2]);
                let again = parse("/any", &out);
                prop_assert!(again.is_ok(), "rewrite of a readable body is readable");
            }
        }
    }
}
