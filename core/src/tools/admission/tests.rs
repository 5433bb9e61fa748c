use super::*;

const CHAT: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,
  "tool_calls":[{"id":"call_1","type":"function","function":{"name":"patient__search__smart","arguments":"{\"query\":\"x\"}"}},
  {"id":"call_2","type":"function","function":{"name":"visit__manage","arguments":"{}"}},
  {"id":"call_3","type":"custom","custom":{"name":"sql__run","input":"select 1"}}]},"finish_reason":"tool_calls"}],"usage":{"total_tokens":9}}"#;

const RESPONSES: &str = r#"{"id":"resp_1","object":"response","output":[{"type":"reasoning","id":"rs_1","summary":[]},
  {"type":"web_search_call","id":"ws_1","status":"completed"},
  {"type":"function_call","id":"fc_1","call_id":"call_1","name":"appointment__manage","arguments":"{}"},
  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]}"#;

const ANTHROPIC: &str = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"I will book it."},
  {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}},
  {"type":"tool_use","id":"toolu_1","name":"appointment__manage","input":{"action":"create"}},
  {"type":"tool_use","id":"toolu_2","name":"appointment__manage","input":{"action":"cancel"}}],"stop_reason":"tool_use"}"#;

const GEMINI: &str = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"},
  {"functionCall":{"name":"note__write","args":{"text":"x"}}},{"functionCall":{"name":"lab__order","args":{}}}]},
  "finishReason":"STOP"}],"usageMetadata":{"totalTokenCount":5}}"#;

#[test]
fn whole_responses_name_their_calls_in_order_once_each() {
    let cases: [(Format, &str, &[&str]); 4] = [
        (
            Format::OpenAiChat,
            CHAT,
            &["patient__search__smart", "visit__manage", "sql__run"],
        ),
        (Format::OpenAiResponses, RESPONSES, &["appointment__manage"]),
        (Format::Anthropic, ANTHROPIC, &["appointment__manage"]),
        (Format::Gemini, GEMINI, &["note__write", "lab__order"]),
    ];
    for (format, body, expected) in cases {
        assert_eq!(
            tool_calls(format, body.as_bytes()).unwrap(),
            expected,
            "{format}"
        );
    }
}

#[test]
fn off_surface_lists_only_the_calls_not_shown() {
    let surfaced = ["patient__search__smart", "appointment__manage"];
    assert_eq!(
        off_surface(Format::OpenAiChat, CHAT.as_bytes(), &surfaced).unwrap(),
        ["visit__manage", "sql__run"]
    );
    assert!(
        off_surface(Format::Anthropic, ANTHROPIC.as_bytes(), &surfaced)
            .unwrap()
            .is_empty()
    );
    let owned: Vec<String> = vec!["note__write".into()];
    assert_eq!(
        off_surface(Format::Gemini, GEMINI.as_bytes(), &owned).unwrap(),
        ["lab__order"]
    );
}

#[test]
fn answers_without_calls_and_provider_errors_name_nothing() {
    for (format, body) in [
        (
            Format::OpenAiChat,
            r#"{"choices":[{"message":{"role":"assistant","content":"hi","tool_calls":null}}]}"#,
        ),
        (
            Format::OpenAiChat,
            r#"{"error":{"message":"rate limited","type":"rate_limit"}}"#,
        ),
        (
            Format::Anthropic,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#,
        ),
        (
            Format::Gemini,
            r#"{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}"#,
        ),
        (Format::OpenAiResponses, r#"{"output":[]}"#),
    ] {
        assert!(
            tool_calls(format, body.as_bytes()).unwrap().is_empty(),
            "{body}"
        );
    }
}

#[test]
fn a_buffered_gemini_stream_is_read_as_a_list() {
    let body = format!("[{GEMINI},{GEMINI}]");
    assert_eq!(
        tool_calls(Format::Gemini, body.as_bytes()).unwrap(),
        ["note__write", "lab__order"]
    );
}

#[test]
fn unreadable_responses_are_errors_without_the_body_in_the_message() {
    let err = tool_calls(
        Format::OpenAiChat,
        br#"{"choices":[{"message":{"tool_calls":[{"function":{"name":7}}]}}]}"#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "response body is not a readable openai-chat response at line 1 column 59"
    );
    assert!(tool_calls(Format::Anthropic, b"<html>").is_err());
}

// === streaming ===

const CHAT_SSE: &str = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n\
data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"patient__search__smart\",\"arguments\":\"\"}}]}}]}\n\n\
data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"q\\\":\"}}]}}]}\n\n\
data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"drop__everything\",\"arguments\":\"\"}}]}}]}\n\n\
data: [DONE]\n\n";

const ANTHROPIC_SSE: &str = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\r\n\r\n\
event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n\
: keep-alive comment\r\n\r\n\
event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web_search\"}}\r\n\r\n\
event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"appointment__manage\",\"input\":{}}}\r\n\r\n\
event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\"}}\r\n\r\n\
event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n";

const RESPONSES_SSE: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"output\":[]}}\n\n\
event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"c\",\"name\":\"lab__order\",\"arguments\":\"\"}}\n\n\
event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{}\"}\n\n\
event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"name\":\"lab__order\",\"arguments\":\"{}\"}}\n\n\
event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"function_call\",\"name\":\"lab__order\"},{\"type\":\"function_call\",\"name\":\"note__sign\"}]}}\n\n";

const GEMINI_SSE: &str = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Let me\"}]}}]}\r\n\r\n\
data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"vitals__list\",\"args\":{}}}]}}]}\r\n\r\n";

fn scan_whole(format: Format, stream: &str) -> (Vec<String>, ScanStats) {
    let mut s = StreamScanner::new(format, ScanLimits::default());
    let mut seen = s.feed(stream.as_bytes());
    seen.extend(s.finish());
    assert_eq!(seen, s.names());
    (seen, s.stats())
}

#[test]
fn streams_of_every_format_name_their_calls() {
    let cases: [(Format, &str, &[&str]); 4] = [
        (
            Format::OpenAiChat,
            CHAT_SSE,
            &["patient__search__smart", "drop__everything"],
        ),
        (Format::Anthropic, ANTHROPIC_SSE, &["appointment__manage"]),
        (
            Format::OpenAiResponses,
            RESPONSES_SSE,
            &["lab__order", "note__sign"],
        ),
        (Format::Gemini, GEMINI_SSE, &["vitals__list"]),
    ];
    for (format, stream, expected) in cases {
        let (names, stats) = scan_whole(format, stream);
        assert_eq!(names, expected, "{format}");
        assert_eq!(stats.unreadable, 0, "{format}");
        assert_eq!(stats.oversized, 0, "{format}");
    }
}

#[test]
fn a_gemini_json_stream_is_read_object_by_object() {
    let stream = format!("[{GEMINI}\r\n,\r\n{{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"] {{ \\\" ,\"}},{{\"functionCall\":{{\"name\":\"x__y\"}}}}]}}}}]}}]");
    let (names, stats) = scan_whole(Format::Gemini, &stream);
    assert_eq!(names, ["note__write", "lab__order", "x__y"]);
    assert_eq!(stats.events, 2);
}

#[test]
fn chunk_boundaries_anywhere_give_the_same_names() {
    let streams = [
        (Format::OpenAiChat, CHAT_SSE.to_owned()),
        (Format::Anthropic, ANTHROPIC_SSE.to_owned()),
        (Format::OpenAiResponses, RESPONSES_SSE.to_owned()),
        (Format::Gemini, GEMINI_SSE.to_owned()),
        (Format::Gemini, format!("[{GEMINI},{GEMINI}]")),
    ];
    for (format, stream) in streams {
        let (whole, _) = scan_whole(format, &stream);
        let bytes = stream.as_bytes();
        for cut in 0..=bytes.len() {
            for size in [1, 7] {
                let mut s = StreamScanner::new(format, ScanLimits::default());
                let mut seen = s.feed(&bytes[..cut]);
                for chunk in bytes[cut..].chunks(size) {
                    seen.extend(s.feed(chunk));
                }
                seen.extend(s.finish());
                assert_eq!(
                    seen, whole,
                    "{format} cut at {cut}, then {size}-byte chunks"
                );
            }
        }
    }
}

#[test]
fn an_event_without_its_blank_line_is_read_at_the_end() {
    let mut s = StreamScanner::new(Format::Anthropic, ScanLimits::default());
    let event =
        r#"data: {"type":"content_block_start","content_block":{"type":"tool_use","name":"a"}}"#;
    assert!(s.feed(event.as_bytes()).is_empty());
    assert_eq!(s.finish(), ["a"]);
}

#[test]
fn memory_stays_bounded_and_oversized_events_are_counted() {
    let limits = ScanLimits {
        max_event_bytes: 256,
        max_names: 2,
    };
    let mut s = StreamScanner::new(Format::Anthropic, limits);
    let big = format!(
        "data: {{\"type\":\"content_block_start\",\"content_block\":{{\"type\":\"tool_use\",\"name\":\"hidden\",\"pad\":\"{}\"}}}}\n\n",
        "x".repeat(10_000)
    );
    s.feed(big.as_bytes());
    let (buf, data) = s.buffer_capacities();
    assert!(buf <= 1024 && data <= 1024, "{buf} {data}");
    for name in ["a", "b", "c", "a"] {
        let e = format!("data: {{\"type\":\"content_block_start\",\"content_block\":{{\"type\":\"tool_use\",\"name\":\"{name}\"}}}}\n\n");
        s.feed(e.as_bytes());
    }
    s.feed(b"data: {not json\n\n");
    assert_eq!(s.names(), ["a", "b"]);
    let stats = s.stats();
    assert_eq!(stats.oversized, 1);
    assert_eq!(stats.names_dropped, 1);
    assert_eq!(stats.unreadable, 1);
    assert_eq!(stats.events, 5);
    assert_eq!(s.off_surface(&["a"]), ["b"]);
}

#[test]
fn a_data_field_split_over_lines_is_joined() {
    let stream = "data: {\"type\":\"content_block_start\",\ndata: \"content_block\":{\"type\":\"tool_use\",\"name\":\"joined\"}}\n\n";
    assert_eq!(scan_whole(Format::Anthropic, stream).0, ["joined"]);
}
