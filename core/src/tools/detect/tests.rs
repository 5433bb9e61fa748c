use super::*;
use std::path::PathBuf;

fn count(json: &str) -> usize {
    count_tool_shaped(json.as_bytes()).unwrap()
}

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

#[test]
fn definitions_of_every_format_count_once_each() {
    assert_eq!(
        count(r#"{"tools":[{"type":"function","function":{"name":"a"}}]}"#),
        1
    );
    assert_eq!(
        count(r#"{"tools":[{"type":"function","function":{"name":"a","parameters":{}}}]}"#),
        1
    );
    assert_eq!(
        count(r#"{"tools":[{"type":"function","name":"a","parameters":{}}]}"#),
        1
    );
    assert_eq!(
        count(r#"{"tools":[{"name":"a","input_schema":{"type":"object"}}]}"#),
        1
    );
    assert_eq!(
        count(r#"{"tools":[{"functionDeclarations":[{"name":"a"},{"name":"b"}]}]}"#),
        2
    );
    assert_eq!(count(r#"{"functions":[{"name":"a"},{"name":"b"}]}"#), 2);
    assert_eq!(
        count(r#"{"tools":[{"type":"custom","custom":{"name":"a"}}]}"#),
        1
    );
}

#[test]
fn spelling_case_and_escapes_do_not_hide_a_definition() {
    for key in [
        "input_schema",
        "inputSchema",
        "INPUT_SCHEMA",
        "\\u0069nput_schema",
        "Input-Schema",
        "DESCRIPTION",
        "Parameters",
    ] {
        let body = format!(r#"{{"x":[{{"NAME":"a","{key}":{{}}}}]}}"#);
        assert_eq!(count(&body), 1, "{key}");
    }
    assert_eq!(count(r#"{"FunctionDeclarations":[{"Name":"a"}]}"#), 1);
    assert_eq!(
        count(r#"{"tools":[{"type":"x","Function":{"n\u0061me":"a"}}]}"#),
        1
    );
    // Keys a case-insensitive decoder folds onto ASCII.
    assert_eq!(count("{\"FUNCTIONſ\":[{\"name\":\"a\"}]}"), 1);
    assert_eq!(
        count("{\"t\":{\"name\":\"a\",\"de\u{17F}cription\":\"x\"}}"),
        1
    );
}

#[test]
fn definitions_are_found_at_any_depth() {
    let nested = r#"{"a":{"b":[{"c":{"name":"x","description":"d"}}]},"tools":[]}"#;
    assert_eq!(count(nested), 1);
    assert_eq!(
        count(r#"[{"name":"x","parameters":{}},{"name":"y","parameters":{}}]"#),
        2
    );
}

#[test]
fn calls_builtins_and_schemas_are_not_definitions() {
    // Chat tool calls, Anthropic tool_use, Gemini functionCall, Responses calls.
    let history = r#"{"messages":[
        {"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"a","arguments":"{}"}}]},
        {"role":"assistant","content":[{"type":"tool_use","id":"2","name":"a","input":{}}]},
        {"role":"tool","name":"a","content":"ok"},
        {"parts":[{"functionCall":{"name":"a","args":{}}}]},
        {"type":"function_call","name":"a","arguments":"{}","call_id":"3"},
        {"type":"custom_tool_call","custom":{"name":"a","input":"x"}}
    ]}"#;
    assert_eq!(count(history), 0);
    // A forced function names a tool; it does not define one.
    assert_eq!(
        count(r#"{"tool_choice":{"type":"function","function":{"name":"a"}},"tools":[]}"#),
        0
    );
    assert_eq!(
        count(
            r#"{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":3},{"type":"web_search"},{"googleSearch":{}}]}"#
        ),
        0
    );
    let schema = r#"{"type":"object","properties":{"name":{"type":"string","description":"d"},"description":{"type":"string"}}}"#;
    assert_eq!(count(schema), 0);
}

#[test]
fn unreadable_bodies_are_errors_not_zero() {
    for bad in ["{", "{\"a\":1}x", "nul", "\u{0}", "{\"a\":1,}"] {
        assert!(count_tool_shaped(bad.as_bytes()).is_err(), "{bad:?}");
    }
    let deep = "[".repeat(4096);
    assert!(count_tool_shaped(deep.as_bytes()).is_err());
    assert_eq!(count_tool_shaped(b"").unwrap(), 0);
    assert_eq!(count_tool_shaped(b" \n ").unwrap(), 0);
    // Not UTF-8, inside a string or outside one: an error that says where.
    let tool = br#"{"tools":[{"name":"a","description":"b"}],"x":"caf"#;
    for tail in [&b"\xe9\"}"[..], b"\"}\xff", b"\xc3\"}"] {
        let body = [&tool[..], tail].concat();
        match count_tool_shaped(&body) {
            Err(DetectError::Json { line: 1, column }) => assert!(column >= 45, "{column}"),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(&body)),
        }
    }
    assert_eq!(count_tool_shaped(&[&tool[..], b"\"}"].concat()).unwrap(), 1);
}

#[test]
fn the_catalog_requests_hold_the_whole_registry() {
    for file in ["openai_request.json", "anthropic_request.json"] {
        let body = std::fs::read(shared().join("catalog").join(file)).unwrap();
        assert_eq!(count_tool_shaped(&body).unwrap(), 108, "{file}");
    }
}

/// Every tool of every public data set, written in each format, counts as
/// exactly one: their schemas (thousands of real-world ones) hold nothing
/// the detector mistakes for a second definition.
#[test]
fn real_world_tools_count_exactly_once_in_every_format() {
    let mut seen = 0usize;
    for set in [
        "apibank",
        "bfcl",
        "metatool",
        "sealtools",
        "stabletoolbench",
    ] {
        let text = std::fs::read_to_string(shared().join("datasets").join(set).join("tools.jsonl"))
            .unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let tool: serde_json::Value = serde_json::from_str(line).unwrap();
            let name = serde_json::to_string(&tool["name"]).unwrap();
            let description = serde_json::to_string(&tool["description"]).unwrap();
            let parameters = if tool["parameters"].is_null() {
                "{\"type\":\"object\"}".to_owned()
            } else {
                tool["parameters"].to_string()
            };
            let shapes = [
                format!(
                    r#"{{"tools":[{{"type":"function","function":{{"name":{name},"description":{description},"parameters":{parameters}}}}}]}}"#
                ),
                format!(
                    r#"{{"tools":[{{"type":"function","name":{name},"description":{description},"parameters":{parameters}}}]}}"#
                ),
                format!(
                    r#"{{"tools":[{{"name":{name},"description":{description},"input_schema":{parameters}}}]}}"#
                ),
                format!(
                    r#"{{"tools":[{{"functionDeclarations":[{{"name":{name},"description":{description},"parameters":{parameters}}}]}}]}}"#
                ),
            ];
            for body in shapes {
                assert_eq!(count(&body), 1, "{set}: {line}");
                seen += 1;
            }
        }
    }
    assert!(seen > 1000, "only {seen} tools read");
}

proptest::proptest! {
    /// Folding an ASCII key once reads it as folding each character does.
    #[test]
    fn ascii_keys_classify_as_folded_character_by_character(
        key in proptest::string::string_regex("[a-zA-Z_\\-]{0,24}|(name|Name|NAME|input_schema|function-Declarations|Parameters_Json_Schema|args)[_-]?").unwrap()
    ) {
        proptest::prop_assert!(super::classify(&key) == super::classify_folding(&key), "{}", key);
    }

    /// A string value folded once (ASCII) is the word folding each
    /// character finds: `function`, `custom`, `namespace` or none (a value
    /// whose first byte starts no word is turned away before folding).
    #[test]
    fn ascii_values_are_words_as_folded_character_by_character(
        value in proptest::string::string_regex("[a-zA-Z_\\-]{0,20}|[ -~]{0,3}(function|Function|CUSTOM|name_space|Fun-ction|customs|namespac)[_-]?|[ -~]{0,18}").unwrap()
    ) {
        let folded = ["function", "custom", "namespace"]
            .into_iter()
            .find(|w| value.len() <= 16 && super::folds_to(&value, w));
        let expected = match folded {
            Some("namespace") => super::Kind::NamespaceWord,
            Some(_) => super::Kind::FunctionWord,
            None => super::Kind::String,
        };
        proptest::prop_assert!(super::word_kind(&value) == expected, "{}", value);
    }
}

#[test]
fn type_words_fold_beyond_ascii() {
    // `ſ` folds to `s`, as a case-insensitive decoder reads it.
    assert_eq!(count(r#"{"x":{"type":"cuſtom","name":"a"}}"#), 1);
    assert_eq!(count(r#"{"x":{"type":"\u0046UNC_TION","name":"a"}}"#), 1);
    // Longer than any word after folding: a string like any other.
    assert_eq!(count(r#"{"x":{"type":"f_u_n_c_t_i_o_n_x","name":"a"}}"#), 0);
}

#[test]
fn name_only_definitions_count_wherever_they_stand() {
    // OpenAI's tool search loads tools into the context from an input item.
    let loaded: Vec<String> = (0..5)
        .map(|i| format!(r#"{{"type":"function","name":"t{i}"}}"#))
        .collect();
    let body = format!(
        r#"{{"input":[{{"type":"tool_search_output","tools":[{}]}}],"tools":[{{"type":"function","name":"a"}}]}}"#,
        loaded.join(",")
    );
    assert_eq!(count(&body), 6);
    // A Realtime session's tools; custom tools with a grammar format; any case.
    assert_eq!(
        count(
            r#"{"session":{"type":"realtime","tools":[{"type":"function","name":"a"},{"type":"custom","name":"b","format":{"type":"grammar"}}]}}"#
        ),
        2
    );
    assert_eq!(count(r#"{"x":{"TYPE":"Function","Name":"a"}}"#), 1);
    // An element of a tools array with a name and no type of its own.
    assert_eq!(
        count(r#"{"session":{"tools":[{"name":"a"},{"name":"b"}]}}"#),
        2
    );
    // A built-in names its own type: not a definition.
    assert_eq!(
        count(
            r#"{"tools":[{"type":"web_search_20260209","name":"web_search"},{"type":"computer_20251124","name":"computer","display_width_px":1024}]}"#
        ),
        0
    );
}

#[test]
fn references_name_tools_without_defining_them() {
    // Chat and Responses allowed_tools, Gemini toolConfig, Anthropic's forced tool.
    let chat = r#"{"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]}}}"#;
    assert_eq!(count(chat), 0);
    let responses = r#"{"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"a"},{"type":"mcp","server_label":"x"}]}}"#;
    assert_eq!(count(responses), 0);
    assert_eq!(
        count(r#"{"tool_choice":{"type":"function","name":"a"}}"#),
        0
    );
    assert_eq!(
        count(
            r#"{"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["a","b"]}}}"#
        ),
        0
    );
    assert_eq!(count(r#"{"tool_choice":{"type":"tool","name":"a"}}"#), 0);
    // A definition key still counts there: a reference needs none.
    assert_eq!(
        count(r#"{"tool_choice":{"type":"function","name":"a","parameters":{}}}"#),
        1
    );
}

#[test]
fn structured_outputs_and_listings_count_as_what_they_are() {
    // A structured-output schema has a name and a schema: one place.
    assert_eq!(
        count(
            r#"{"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{},"strict":true}}}"#
        ),
        1
    );
    assert_eq!(
        count(r#"{"text":{"format":{"type":"json_schema","name":"r","schema":{},"strict":true}}}"#),
        1
    );
    // A replayed MCP listing: each listed tool is in the model's context.
    let listing = r#"{"input":[{"type":"mcp_list_tools","server_label":"s","tools":[{"name":"a","input_schema":{}},{"name":"b","description":"d","input_schema":{}}]}]}"#;
    assert_eq!(count(listing), 2);
}

#[test]
fn a_namespace_counts_its_definitions_not_itself() {
    let ns = |members: &str| {
        format!(
            r#"{{"tools":[{{"type":"namespace","name":"clinical","description":"Clinical record tools",{members}}}]}}"#
        )
    };
    // The Responses shape: one function inside, one definition in all.
    assert_eq!(count(&ns(r#""tools":[{"type":"function","name":"a"}]"#)), 1);
    assert_eq!(
        count(&ns(
            r#""tools":[{"type":"function","name":"a"},{"type":"custom","name":"b"}]"#
        )),
        2
    );
    // Spelled otherwise, still a namespace.
    assert_eq!(
        count(
            r#"{"tools":[{"TYPE":"Name_Space","name":"n","tools":[{"name":"a","parameters":{}}]}]}"#
        ),
        1
    );
    // Anything that could be read as a definition still counts itself:
    // a schema key, a call payload, or nothing counted inside.
    assert_eq!(
        count(&ns(
            r#""parameters":{},"tools":[{"type":"function","name":"a"}]"#
        )),
        2
    );
    assert_eq!(
        count(&ns(
            r#""input_schema":{},"tools":[{"type":"function","name":"a"}]"#
        )),
        2
    );
    assert_eq!(
        count(&ns(
            r#""arguments":"{}","tools":[{"type":"function","name":"a"}]"#
        )),
        2
    );
    assert_eq!(count(&ns(r#""tools":[]"#)), 1);
    assert_eq!(count(&ns(r#""tools":[{"type":"web_search"}]"#)), 1);
    assert_eq!(count(&ns(r#""tools":"a""#)), 1);
    // Only as an element of a `tools` array: elsewhere a namespace-typed
    // object with a name and a description counts, its contents too.
    assert_eq!(
        count(
            r#"{"functions":[{"type":"namespace","name":"n","description":"d","tools":[{"type":"function","name":"a"}]}]}"#
        ),
        2
    );
    assert_eq!(
        count(
            r#"{"x":{"type":"namespace","name":"n","description":"d","tools":[{"type":"function","name":"a"}]}}"#
        ),
        2
    );
    // A Chat Completions definition wrapped as a namespace still counts.
    assert_eq!(
        count(
            r#"{"tools":[{"type":"function","function":{"type":"namespace","name":"f","description":"d","tools":[{"type":"function","name":"a"}]}}]}"#
        ),
        2
    );
}
