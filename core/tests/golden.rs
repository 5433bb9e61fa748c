//! Golden tests: the full-registry catalog request in all four formats.
//!
//! The OpenAI and Anthropic bodies come from `shared/catalog/`, the Responses and
//! Gemini bodies from `tests/fixtures/` (generated from the OpenAI one). Each is
//! parsed and rewritten, and the rewrite is compared byte for byte with the
//! body rebuilt independently from the original's raw tool elements.

use keyhole_core::tools::format::{parse, Format};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

struct Case {
    file: &'static str,
    path: &'static str,
    format: Format,
}

const CASES: [Case; 4] = [
    Case {
        file: "catalog/openai_request.json",
        path: "/v1/chat/completions",
        format: Format::OpenAiChat,
    },
    Case {
        file: "fixtures/responses_request.json",
        path: "/v1/responses",
        format: Format::OpenAiResponses,
    },
    Case {
        file: "catalog/anthropic_request.json",
        path: "/v1/messages",
        format: Format::Anthropic,
    },
    Case {
        file: "fixtures/gemini_request.json",
        path: "/v1beta/models/gemma-3-27b-it:generateContent",
        format: Format::Gemini,
    },
];

fn read(file: &str) -> Vec<u8> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let path = match file.strip_prefix("catalog/") {
        Some(name) => format!("{dir}/../../shared/catalog/{name}"),
        None => format!("{dir}/tests/{file}"),
    };
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The catalog's user turn and tool names, in order.
fn catalog_truth() -> (String, Vec<String>) {
    let chat: Value = serde_json::from_slice(&read("catalog/openai_request.json")).unwrap();
    let turn = chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let names = chat["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    (turn, names)
}

/// Where the function tools sit: the array holding them (the Gemini
/// declarations array) with each element's raw text and byte range.
struct Layout {
    array: std::ops::Range<usize>,
    elements: Vec<(String, std::ops::Range<usize>)>,
}

fn offset(body: &[u8], raw: &RawValue) -> std::ops::Range<usize> {
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    start..start + raw.get().len()
}

fn layout(body: &[u8], format: Format) -> Layout {
    #[derive(Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        tools: &'a RawValue,
    }
    #[derive(Deserialize)]
    struct Entry<'a> {
        #[serde(borrow, rename = "functionDeclarations")]
        declarations: &'a RawValue,
    }
    let top: Top<'_> = serde_json::from_slice(body).unwrap();
    let array = match format {
        Format::Gemini => {
            let entries: Vec<Entry<'_>> = serde_json::from_str(top.tools.get()).unwrap();
            assert_eq!(entries.len(), 1);
            entries[0].declarations
        }
        _ => top.tools,
    };
    let elements: Vec<&RawValue> = serde_json::from_str(array.get()).unwrap();
    Layout {
        array: offset(body, array),
        elements: elements
            .iter()
            .map(|e| (e.get().to_owned(), offset(body, e)))
            .collect(),
    }
}

#[test]
fn every_format_reads_the_catalog_request() {
    let (turn, names) = catalog_truth();
    for case in &CASES {
        let body = read(case.file);
        let req = parse(case.path, &body).unwrap().unwrap();
        assert_eq!(req.format, case.format, "{}", case.file);
        let got: Vec<&str> = req.tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(got, names, "{}: tool names in request order", case.file);
        assert!(
            req.tools.iter().all(|t| !t.description.is_empty()),
            "{}",
            case.file
        );
        assert_eq!(req.turn, turn, "{}", case.file);
        assert_eq!(
            req.tool_choice, None,
            "{}: auto names no function",
            case.file
        );
        assert!(req.forced.is_empty(), "{}", case.file);
        assert_eq!(req.descriptors().len(), 108);
    }
}

#[test]
fn body_shape_alone_detects_every_format() {
    for case in &CASES {
        let body = read(case.file);
        let req = parse("/llm/proxy", &body).unwrap().unwrap();
        assert_eq!(req.format, case.format, "{}", case.file);
        assert_eq!(req.tools.len(), 108, "{}", case.file);
    }
}

#[test]
fn rewrite_is_the_original_with_only_the_kept_tools_spliced_in() {
    let wanted = [
        "visit__manage",
        "appointment__manage",
        "patient__search__smart",
        "no__such__tool",
    ];
    for case in &CASES {
        let body = read(case.file);
        let req = parse(case.path, &body).unwrap().unwrap();
        let keep = req.select(&wanted, 12);
        assert_eq!(keep.len(), 3, "{}", case.file);
        let out = req.rewrite(&body, &keep);

        // Rebuild the expected body from the original's raw elements.
        let layout = layout(&body, case.format);
        let mut kept: Vec<usize> = keep.clone();
        kept.sort_unstable();
        let joined: Vec<&str> = kept
            .iter()
            .map(|&i| layout.elements[i].0.as_str())
            .collect();
        let mut expected = body[..layout.array.start].to_vec();
        expected.extend_from_slice(format!("[{}]", joined.join(",")).as_bytes());
        expected.extend_from_slice(&body[layout.array.end..]);
        assert!(
            out == expected,
            "{}: rewrite differs from the spliced original",
            case.file
        );

        // And the result reads back as the same format with the kept tools, in request order.
        let again = parse(case.path, &out).unwrap().unwrap();
        let names: Vec<&str> = again.tools.iter().map(|t| t.name.as_ref()).collect();
        let in_order: Vec<&str> = kept.iter().map(|&i| req.tools[i].name.as_ref()).collect();
        assert_eq!(names, in_order, "{}", case.file);
        assert_eq!(names.len(), 3);
        assert_eq!(again.turn, req.turn);
        assert!(
            out.len() < body.len() / 10,
            "{}: {} of {} bytes",
            case.file,
            out.len(),
            body.len()
        );
    }
}

/// Inserts `tool` as the first element of the top-level `tools` array.
fn with_builtin(body: &[u8], tool: &str) -> Vec<u8> {
    let text = std::str::from_utf8(body).unwrap();
    let at = text.find("\"tools\"").unwrap();
    let open = at + text[at..].find('[').unwrap() + 1;
    format!("{}{tool},{}", &text[..open], &text[open..]).into_bytes()
}

#[test]
fn built_in_tools_are_kept_and_not_counted() {
    let builtins = [
        r#"{"type":"web_search"}"#,
        r#"{"type":"web_search_preview","search_context_size":"low"}"#,
        r#"{"type":"web_search_20250305","name":"web_search","max_uses":5}"#,
        r#"{"googleSearch":{}}"#,
    ];
    for (case, builtin) in CASES.iter().zip(builtins) {
        let body = with_builtin(&read(case.file), builtin);
        let req = parse(case.path, &body).unwrap().unwrap();
        assert_eq!(req.tools.len(), 108, "{}: built-in not counted", case.file);
        assert!(req.tools.iter().all(|t| t.name != "web_search"));
        let out = req.rewrite(&body, &req.select(&["note__write"], 12));
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(builtin),
            "{}: built-in kept byte for byte",
            case.file
        );
        let again = parse(case.path, text.as_bytes()).unwrap().unwrap();
        assert_eq!(again.tools.len(), 1);
        // Nothing kept: the built-in still goes out, and a Gemini entry of
        // declarations alone is dropped rather than sent empty.
        let none = String::from_utf8(req.rewrite(&body, &[])).unwrap();
        #[derive(Deserialize)]
        struct Tools<'a> {
            #[serde(borrow)]
            tools: Vec<&'a RawValue>,
        }
        let left: Tools<'_> = serde_json::from_str(&none).unwrap();
        let raw: Vec<&str> = left.tools.iter().map(|t| t.get()).collect();
        assert_eq!(raw, [builtin], "{}", case.file);
    }
}

#[test]
fn a_forced_tool_is_read_in_every_format() {
    let forcing = [
        (
            r#""tool_choice":"auto""#,
            r#""tool_choice":{"type":"function","function":{"name":"lab__order"}}"#,
        ),
        (
            r#""tool_choice":"auto""#,
            r#""tool_choice":{"type":"function","name":"lab__order"}"#,
        ),
        (
            r#""tool_choice":{"type":"auto"}"#,
            r#""tool_choice":{"type":"tool","name":"lab__order"}"#,
        ),
        (
            r#""mode": "AUTO""#,
            r#""mode": "ANY", "allowedFunctionNames": ["lab__order", "note__write", "lab__order"]"#,
        ),
    ];
    for (case, (from, to)) in CASES.iter().zip(forcing) {
        let text = String::from_utf8(read(case.file)).unwrap();
        assert_eq!(text.matches(from).count(), 1, "{}", case.file);
        let body = text.replace(from, to).into_bytes();
        let req = parse(case.path, &body).unwrap().unwrap();
        assert_eq!(
            req.tool_choice.as_deref(),
            Some("lab__order"),
            "{}",
            case.file
        );
        let expected: &[&str] = if case.format == Format::Gemini {
            &["lab__order", "note__write"]
        } else {
            &["lab__order"]
        };
        assert_eq!(req.forced, expected, "{}", case.file);
    }
}

#[test]
fn an_unrecognised_path_still_needs_a_known_shape() {
    // A catalog registry in a shape no format uses: tools with neither
    // `function`, `input_schema` nor a top-level `name`.
    let body = br#"{"prompt":"hi","tools":[{"tool":{"id":"patient.get"}}]}"#;
    let err = parse("/v1/generate", body).unwrap_err();
    assert!(err.is_unknown_format(), "{err}");
    // The same body on a known path is an unreadable request of that format.
    let err = parse("/v1/chat/completions", body).unwrap_err();
    assert!(!err.is_unknown_format());
    assert_eq!(
        err.to_string(),
        "tools[0] is not a openai-chat tool: a function tool without a `function` object"
    );
}
