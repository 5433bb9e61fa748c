//! LLM request bodies of the four formats, generated with raw ids from a
//! ground-truth list in every place a model reads — system prompts, user and
//! assistant messages, content parts, tool calls and tool results (as JSON
//! strings and as objects), percent-encoded URLs, escaped JSON — and with
//! look-alikes that are not ids. Checked by readers independent of the scan:
//! no ground-truth id and nothing UUID-shaped is left outside the tool
//! definitions, every look-alike survives, the tool definitions are
//! byte-identical, and the result is JSON of the same shape.

use super::*;
use crate::alias::SessionMap;
use proptest::prelude::*;
use serde_json::{json, Value};

/// One raw id and the forms it may be written in.
#[derive(Debug, Clone)]
struct Id {
    /// What must not reach the model, in any of its forms.
    raw: String,
    /// How it is written into the body.
    written: String,
}

const LOOKALIKES: [&str; 10] = [
    "2025-03-14",
    "E11.9",
    "1-0-1-0",
    "in-progress",
    "+49 30 1234-5678",
    "gpt-4o-2024-08-06",
    "LOINC 2345-7",
    "clinic-wide",
    "Müller-Lüdenscheidt",
    "4.5-5.9 mmol/L",
];

fn uuid() -> impl Strategy<Value = String> {
    (
        any::<u32>(),
        any::<u16>(),
        any::<u16>(),
        any::<u16>(),
        any::<u64>(),
    )
        .prop_map(|(a, b, c, d, e)| {
            format!(
                "{a:08x}-{b:04x}-4{:03x}-{:04x}-{:012x}",
                c & 0xfff,
                (d & 0x3fff) | 0x8000,
                e & 0xffff_ffff_ffff
            )
        })
}

/// A raw id in one of its written forms.
fn id() -> impl Strategy<Value = Id> {
    let plain = uuid().prop_map(|u| Id {
        written: u.clone(),
        raw: u,
    });
    let url = uuid().prop_map(|u| Id {
        written: format!("https://hms.example.org/api/v2/patients/{u}?view=full"),
        raw: u,
    });
    let reference = (
        prop::sample::select(vec![
            ("Patient", "pat"),
            ("Encounter", "enc"),
            ("Practitioner", "prac"),
        ]),
        1u32..999_999,
    )
        .prop_map(|((ty, prefix), n)| {
            let raw = format!("{prefix}-{n:06}");
            Id {
                written: format!("{ty}/{raw}"),
                raw,
            }
        });
    let encoded = (1u32..999_999).prop_map(|n| {
        let raw = format!("pat-{n:06}");
        Id {
            written: format!(
                "https://hms.example.org/fhir/Observation?subject=Patient%2F{raw}&_count=10"
            ),
            raw,
        }
    });
    let upper = uuid().prop_map(|u| Id {
        written: u.to_uppercase(),
        raw: u,
    });
    prop_oneof![plain, url, reference, encoded, upper]
}

/// A JSON number id with a string id, as a tool result carries them.
fn record() -> impl Strategy<Value = (u64, String)> {
    (100_000u64..999_999_999, uuid())
}

/// Free text with ids and look-alikes woven in.
fn prose(ids: &[Id], lookalike: &str) -> String {
    let mut s = format!("Noted on {lookalike}: ");
    for (i, id) in ids.iter().enumerate() {
        s.push_str(&format!("see {} ({i}); ", id.written));
    }
    s.push_str("continue.");
    s
}

/// The tool definitions, in each format's shape: kept byte-identical.
fn tools(format: usize) -> Value {
    let params = json!({"type":"object","properties":{"patientId":{"type":"string","description":"e.g. 039b70b8-92f7-44b7-9c91-4e3f0e900c71"}}});
    match format {
        0 => {
            json!([{"type":"function","function":{"name":"get_patient","description":"Reads a patient","parameters":params}}])
        }
        1 => {
            json!([{"type":"function","name":"get_patient","description":"Reads a patient","parameters":params}])
        }
        2 => json!([{"name":"get_patient","description":"Reads a patient","input_schema":params}]),
        _ => {
            json!([{"functionDeclarations":[{"name":"get_patient","description":"Reads a patient","parameters":params}]}])
        }
    }
}

/// A request body of `format` (0 OpenAI chat, 1 OpenAI responses, 2
/// Anthropic, 3 Gemini) carrying the ids in every place a model reads.
fn request(format: usize, ids: &[Id], rec: (u64, &str), look: &str) -> Value {
    let n = ids.len();
    let (a, b, c) = (&ids[..n / 3], &ids[n / 3..2 * n / 3], &ids[2 * n / 3..]);
    let result =
        json!({"id": rec.0, "patientId": rec.1, "status": "in-progress", "note": prose(c, look)});
    let result_text = result.to_string();
    match format {
        0 => json!({
            "model": "gpt-4o-2024-08-06",
            "messages": [
                {"role": "system", "content": prose(a, look)},
                {"role": "user", "content": [{"type": "text", "text": prose(b, look)}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc123", "type": "function",
                    "function": {"name": "get_patient", "arguments": json!({"patientId": rec.1}).to_string()}}]},
                {"role": "tool", "tool_call_id": "call_abc123", "content": result_text},
            ],
            "tools": tools(format),
        }),
        1 => json!({
            "model": "gpt-4o-2024-08-06",
            "instructions": prose(a, look),
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": prose(b, look)}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_patient", "arguments": json!({"patientId": rec.1}).to_string()},
                {"type": "function_call_output", "call_id": "call_1", "output": result_text},
            ],
            "tools": tools(format),
        }),
        2 => json!({
            "model": "claude-sonnet-4-5",
            "system": [{"type": "text", "text": prose(a, look)}],
            "messages": [
                {"role": "user", "content": prose(b, look)},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01A", "name": "get_patient", "input": {"patientId": rec.1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": result_text}]},
            ],
            "tools": tools(format),
        }),
        _ => json!({
            "systemInstruction": {"parts": [{"text": prose(a, look)}]},
            "contents": [
                {"role": "user", "parts": [{"text": prose(b, look)}]},
                {"role": "model", "parts": [{"functionCall": {"name": "get_patient", "args": {"patientId": rec.1}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_patient", "response": result}}]},
            ],
            "tools": tools(format),
        }),
    }
}

/// Every string and number of `v` outside the top-level `tools`, decoded.
fn readable(v: &Value, top: bool, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|i| readable(i, false, out)),
        Value::Object(map) => {
            for (k, v) in map {
                if !(top && k == "tools") {
                    readable(v, false, out);
                }
            }
        }
        _ => {}
    }
}

/// Same keys and array lengths, whatever the leaf values.
fn same_shape(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_shape(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_shape(v, w))
        }
        _ => true,
    }
}

/// Writes some `-` of string literals as `\u002d`: the same JSON, escaped.
fn escape_dashes(body: &str, every: usize) -> String {
    let mut out = String::with_capacity(body.len() + 64);
    for (i, c) in body.chars().enumerate() {
        if c == '-' && i % every == 0 {
            out.push_str("\\u002d");
        } else {
            out.push(c);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn no_raw_id_reaches_the_model(
        format in 0usize..4,
        ids in prop::collection::vec(id(), 3..9),
        rec in record(),
        look in prop::sample::select(LOOKALIKES.to_vec()),
        escape in prop::option::of(2usize..7),
    ) {
        let tax = Taxonomy::default();
        let value = request(format, &ids, (rec.0, &rec.1), look);
        let mut body = value.to_string();
        if let Some(every) = escape {
            body = escape_dashes(&body, every);
        }
        let scan = PromptScan::new(&tax, body.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let aliases = SessionMap::new().encode(&tax, scan.ids()).map_err(|e| TestCaseError::fail(e.to_string()))?.aliases;
        let out = scan.rewrite(body.as_bytes(), &aliases, &[]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Tool definitions passed over as the filter does, its memo knowing
        // them: the same ids, the same rewrite.
        let mut memo = crate::tools::format::Memo::new();
        let read = crate::tools::format::parse_memo("/any", body.as_bytes(), &crate::tools::format::BuiltinTools::default(), &mut memo);
        prop_assert!(matches!(read, Ok(Some(_))));
        let skipping = PromptScan::new_skipping(&tax, body.as_bytes(), &|rest| memo.known_array(rest))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(skipping.ids(), scan.ids());
        prop_assert_eq!(skipping.rewrite(body.as_bytes(), &aliases, &[]).ok(), Some(out.clone()));

        let after: Value = serde_json::from_slice(&out).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let before: Value = serde_json::from_str(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(same_shape(&before, &after));
        prop_assert_eq!(&before["tools"], &after["tools"]);
        let mut texts = Vec::new();
        readable(&after, true, &mut texts);
        let uuid = regex::Regex::new(r"(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}").map_err(|e| TestCaseError::fail(e.to_string()))?;
        for t in &texts {
            let lower = t.to_lowercase();
            for id in &ids {
                prop_assert!(!lower.contains(&id.raw.to_lowercase()), "{} left in {t:?}", id.raw);
            }
            prop_assert!(!lower.contains(&rec.1), "{} left in {t:?}", rec.1);
            prop_assert!(!t.contains(&rec.0.to_string()), "{} left in {t:?}", rec.0);
            prop_assert!(!uuid.is_match(t), "UUID-shaped text left: {t:?}");
        }
        let all = texts.join("\n");
        prop_assert!(all.contains(look), "look-alike {look:?} lost");
        prop_assert!(all.contains("gpt-4o-2024-08-06") || format > 1, "the model name changed");
    }
}

#[test]
fn tool_definitions_stay_byte_identical_even_with_ids_in_them() {
    let tax = Taxonomy::default();
    let tools = r#"[{"type":"function","function":{"name":"get_patient","description":"e.g. 039b70b8-92f7-44b7-9c91-4e3f0e900c71","parameters":{"type":"object"}}}]"#;
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"open 039b70b8-92f7-44b7-9c91-4e3f0e900c71"}}],"tools":{tools}}}"#
    );
    let scan = PromptScan::new(&tax, body.as_bytes()).expect("scan");
    let aliases = fresh_aliases(&tax, &scan);
    let out = String::from_utf8(
        scan.rewrite(body.as_bytes(), &aliases, &[])
            .expect("rewrite"),
    )
    .expect("utf8");
    assert!(out.ends_with(&format!(r#""tools":{tools}}}"#)), "{out}");
    assert!(
        out.starts_with(r#"{"messages":[{"role":"user","content":"open ref-"#),
        "{out}"
    );
}

#[test]
fn request_bookkeeping_never_reaches_the_model_and_is_left_as_sent() {
    let tax = Taxonomy::default();
    let id = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let hidden = format!(
        r#""metadata":{{"user_id":"{id}","trace":"{id}"}},"user":"{id}","safety_identifier":"{id}","prompt_cache_key":"{id}","previous_response_id":"resp_{id}""#
    );
    let body = format!(r#"{{{hidden},"messages":[{{"role":"user","content":"open {id}"}}]}}"#);
    let scan = PromptScan::new(&tax, body.as_bytes()).expect("scan");
    let aliases = fresh_aliases(&tax, &scan);
    let known = [KnownAlias {
        value: id.into(),
        alias: "ref-001".into(),
    }];
    let out = String::from_utf8(
        scan.rewrite(body.as_bytes(), &aliases, &known)
            .expect("rewrite"),
    )
    .expect("utf8");
    assert!(
        out.starts_with(&format!("{{{hidden},")),
        "bookkeeping untouched: {out}"
    );
    assert!(
        out.ends_with(r#""content":"open ref-001"}]}"#),
        "the message is aliased: {out}"
    );
    // Only at the top level: a `metadata` inside a message is what the model reads.
    let nested = format!(
        r#"{{"messages":[{{"role":"user","content":[{{"type":"text","text":"x","metadata":"{id}"}}]}}]}}"#
    );
    let scan = PromptScan::new(&tax, nested.as_bytes()).expect("scan");
    assert_eq!(scan.ids().len(), 1);
}

#[test]
fn ids_the_session_learned_before_are_replaced_in_prompts() {
    let tax = Taxonomy::default();
    let body =
        br#"{"messages":[{"role":"system","content":"Clinic: berlin-mitte-ambulanz. Ward 7b."}]}"#;
    let scan = PromptScan::new(&tax, body).expect("scan");
    assert!(
        scan.ids().is_empty(),
        "a bare slug is not an id by its shape"
    );
    let known = [KnownAlias {
        value: "berlin-mitte-ambulanz".into(),
        alias: "clinic-001".into(),
    }];
    let out = scan.rewrite(body, &[], &known).expect("rewrite");
    assert_eq!(
        out,
        br#"{"messages":[{"role":"system","content":"Clinic: clinic-001. Ward 7b."}]}"#
    );
}

#[test]
fn number_ids_in_tool_data_are_ids() {
    let tax = Taxonomy::default();
    let body = br#"{"contents":[{"parts":[{"functionResponse":{"name":"get","response":{"patientId":482913,"count":3}}}]}]}"#;
    let scan = PromptScan::new(&tax, body).expect("scan");
    assert_eq!(scan.ids().len(), 1);
    let aliases = fresh_aliases(&tax, &scan);
    let out = String::from_utf8(scan.rewrite(body, &aliases, &[]).expect("rewrite")).expect("utf8");
    assert!(
        !out.contains("482913") && out.contains(r#""count":3"#),
        "{out}"
    );
}

#[test]
fn bodies_that_are_not_json_are_errors() {
    let tax = Taxonomy::default();
    for bad in [
        &b"{\"messages\":["[..],
        b"not json",
        b"{\"a\":\"\xff\"}",
        b"{\"a\":\"\\x\"}",
    ] {
        assert!(
            PromptScan::new(&tax, bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn the_models_own_aliases_pass_unchanged_and_are_not_counted() {
    use crate::alias::{Epoch, Origin};
    let tax = Taxonomy::default();
    let mut session = SessionMap::with_epoch(Epoch::from_seed(11));
    // An earlier HMS response gave the model these aliases.
    let hms = [IdInput {
        value: "039b70b8-92f7-44b7-9c91-4e3f0e900c71".into(),
        kind: Some("patient".into()),
        form: None,
        group: None,
    }];
    let held = session
        .encode(&tax, &hms)
        .expect("encode")
        .aliases
        .remove(0);
    let body = format!(
        r#"{{"messages":[{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"get_patient","arguments":"{{\"patientId\":\"{held}\"}}"}}}}]}},{{"role":"user","content":"Compare {held} with 74229a55-de5f-4d66-af4a-88e122c37321."}}]}}"#
    );
    let scan = PromptScan::new(&tax, body.as_bytes()).expect("scan");
    let before = session.len();
    let encoded = session
        .encode_from(&tax, scan.ids(), Origin::Prompt)
        .expect("encode");
    assert_eq!(session.len(), before + 1, "only the raw UUID is minted");
    let known: Vec<KnownAlias> = session
        .records()
        .iter()
        .filter_map(|r| {
            r.ids.uuid.clone().map(|value| KnownAlias {
                value,
                alias: r.alias.clone(),
            })
        })
        .collect();
    let out = scan
        .rewrite_counted(body.as_bytes(), &encoded.aliases, &known)
        .expect("rewrite");
    let text = String::from_utf8(out.body.expect("changed")).expect("utf8");
    assert_eq!(text.matches(held.as_str()).count(), 2, "{text}");
    assert!(!text.contains("74229a55"), "{text}");
    assert_eq!(out.ids, 1, "{text}");
}

#[test]
fn occurrences_are_counted_once_each() {
    let tax = Taxonomy::default();
    let u = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let body = format!(
        r#"{{"system":"open {u}","messages":[{{"role":"user","content":"{u} and Patient/pat-000123 and {u}"}}]}}"#
    );
    let scan = PromptScan::new(&tax, body.as_bytes()).expect("scan");
    let aliases = fresh_aliases(&tax, &scan);
    let out = scan
        .rewrite_counted(body.as_bytes(), &aliases, &[])
        .expect("rewrite");
    assert_eq!(
        out.ids,
        4,
        "{}",
        String::from_utf8_lossy(out.body.as_deref().unwrap_or_default())
    );
    // Ids the session knew, found only at rewrite time, count too.
    let body = br#"{"messages":[{"role":"system","content":"Clinic berlin-mitte-ambulanz, again berlin-mitte-ambulanz."}]}"#;
    let scan = PromptScan::new(&tax, body).expect("scan");
    let known = [KnownAlias {
        value: "berlin-mitte-ambulanz".into(),
        alias: "clinic-001".into(),
    }];
    assert_eq!(
        scan.rewrite_counted(body, &[], &known)
            .expect("rewrite")
            .ids,
        2
    );
    // Each id once, wherever it stands: after a percent escape, in a JSON
    // document inside a string, and a known id written with an escape.
    let body = br#"{"messages":[{"role":"user","content":"subject=Patient%2Fpat-000123&x=Patient/pat-000124"},{"role":"tool","content":"{\"ref\":\"Patient/pat-000125\",\"at\":\"%62erlin-mitte-ambulanz\"}"}]}"#;
    let scan = PromptScan::new(&tax, body).expect("scan");
    let aliases = fresh_aliases(&tax, &scan);
    let out = scan
        .rewrite_counted(body, &aliases, &known)
        .expect("rewrite");
    let text = String::from_utf8_lossy(out.body.as_deref().unwrap_or_default()).into_owned();
    assert!(
        !text.contains("000123") && !text.contains("erlin-mitte"),
        "{text}"
    );
    assert_eq!(out.ids, 4, "{text}");
}

#[test]
fn a_body_nothing_changed_in_is_not_copied() {
    let tax = Taxonomy::default();
    let body = br#"{"messages":[{"role":"user","content":"Book Anna a follow-up on Thursday."}],"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"id":{"type":"string","description":"pat-000123"}}}}}]}"#;
    let scan = PromptScan::new(&tax, body).expect("scan");
    assert!(scan.ids().is_empty());
    // Nothing to replace, and a known id the body does not hold.
    let known = [KnownAlias {
        value: "berlin-mitte-ambulanz".into(),
        alias: "clinic-001".into(),
    }];
    for known in [&[][..], &known[..]] {
        let out = scan.rewrite_counted(body, &[], known).expect("rewrite");
        assert_eq!((out.body, out.ids), (None, 0));
        assert_eq!(scan.rewrite(body, &[], known).expect("rewrite"), body);
    }
    // The same body holding the known id is rewritten.
    let body = br#"{"messages":[{"role":"user","content":"At berlin-mitte-ambulanz today."}]}"#;
    let out = PromptScan::new(&tax, body)
        .expect("scan")
        .rewrite_counted(body, &[], &known)
        .expect("rewrite");
    assert_eq!(out.ids, 1);
    assert_eq!(
        out.body.as_deref(),
        Some(&br#"{"messages":[{"role":"user","content":"At clinic-001 today."}]}"#[..])
    );
}

#[test]
fn refusals_read_controls_error_codes_and_never_quote_the_request() {
    let body =
        |code: &str| format!(r#"{{"error":{{"code":"{code}","message":"m"}}}}"#).into_bytes();
    assert_eq!(
        Refusal::of_answer(503, Some(&body("store_unavailable"))),
        Refusal::Store
    );
    assert_eq!(
        Refusal::of_answer(409, Some(&body("conflict"))),
        Refusal::Conflict
    );
    assert_eq!(
        Refusal::of_answer(409, Some(&body("taxonomy_mismatch"))),
        Refusal::Conflict
    );
    assert_eq!(
        Refusal::of_answer(503, Some(b"no healthy upstream")),
        Refusal::Control
    );
    assert_eq!(Refusal::of_answer(0, None), Refusal::Control);
    for r in Refusal::ALL {
        let reply = r.reply("x-keyhole-session");
        let v: Value = serde_json::from_slice(&reply.body).expect("json");
        assert_eq!(v["error"]["code"], reply.status);
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("not sent")),
            "{v}"
        );
    }
    assert_eq!(Refusal::NoSession.reply("x-s").status, 400);
    assert_eq!(Refusal::Store.reply("x-s").status, 503);
    assert_eq!(Refusal::Conflict.reply("x-s").status, 422);
}

#[test]
fn a_turn_is_aliased_with_the_batch_of_its_body() {
    let tax = Taxonomy::default();
    let uuid = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"open {uuid} and schedule"}}],"tools":[]}}"#
    );
    let scan = PromptScan::new(&tax, body.as_bytes()).unwrap();
    let aliases = SessionMap::new().encode(&tax, scan.ids()).unwrap().aliases;
    let turn = format!("open {uuid} and schedule");
    let aliased = alias_text(&tax, &turn, scan.ids(), &aliases, &[]).unwrap();
    assert!(!aliased.contains(uuid), "{aliased}");
    assert_eq!(aliased, format!("open {} and schedule", aliases[0]));
    // The same words as the rewritten body's turn.
    let rewritten =
        String::from_utf8(scan.rewrite(body.as_bytes(), &aliases, &[]).unwrap()).unwrap();
    assert!(rewritten.contains(&aliased));
    // Text without ids is returned as it is.
    assert_eq!(
        alias_text(&tax, "schedule a visit", scan.ids(), &aliases, &[]).unwrap(),
        "schedule a visit"
    );
    // An id the batch does not hold is never passed on raw.
    let other = "ffffffff-92f7-44b7-9c91-4e3f0e900c71";
    assert!(alias_text(&tax, &format!("open {other}"), scan.ids(), &aliases, &[]).is_err());
}

/// `value`'s members written in order with `tools` moved to place `at`
/// (modulo the member count): the tools array before, between or after the
/// strings a rewrite replaces.
fn with_tools_at(value: &Value, at: usize) -> String {
    let Value::Object(map) = value else {
        return value.to_string();
    };
    let mut members: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| *k != "tools").collect();
    if let Some(tools) = map.get_key_value("tools") {
        members.insert(at % (members.len() + 1), tools);
    }
    let inner: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::String((*k).clone())))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// What a read holds that the filter acts on, for comparing two reads.
fn read_facts(req: &crate::tools::format::ParsedRequest<'_>, body: &[u8]) -> String {
    let names: Vec<(&str, &str)> = req
        .tools
        .iter()
        .map(|t| (t.name.as_ref(), t.description.as_ref()))
        .collect();
    let all: Vec<usize> = (0..req.tools.len()).collect();
    let rewrites: Vec<String> = [&all[..], &all[..1], &[][..]]
        .iter()
        .map(|keep| String::from_utf8_lossy(&req.rewrite_with_search_tool(body, keep)).into_owned())
        .collect();
    format!(
        "{:?} {names:?} turn={:?} choice={:?} forced={:?} search={:?} sourced={} rest={:?} digest={} {rewrites:?}",
        req.format,
        req.turn,
        req.tool_choice,
        req.forced,
        req.search_call,
        req.sourced,
        req.rest,
        req.registry_digest()
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The read as sent, moved past the aliases' edits, is the read of the
    /// aliased body: the same tools, turn, forced names and rest, and the
    /// same bytes for every rewrite, wherever the tools array sits.
    #[test]
    fn a_read_moved_past_the_aliases_is_the_read_of_the_aliased_body(
        format in 0usize..4,
        ids in prop::collection::vec(id(), 3..9),
        rec in record(),
        look in prop::sample::select(LOOKALIKES.to_vec()),
        at in 0usize..6,
        escape in prop::option::of(2usize..7),
    ) {
        use crate::tools::format::{BuiltinTools, Memo};
        use crate::tools::surface::{self, Read};
        let tax = Taxonomy::default();
        let mut body = with_tools_at(&request(format, &ids, (rec.0, &rec.1), look), at);
        if let Some(every) = escape {
            body = escape_dashes(&body, every);
        }
        let fail = |e: &dyn std::fmt::Display| TestCaseError::fail(e.to_string());
        let scan = PromptScan::new(&tax, body.as_bytes()).map_err(|e| fail(&e))?;
        let aliases = SessionMap::new().encode(&tax, scan.ids()).map_err(|e| fail(&e))?.aliases;
        let rewritten = scan.rewrite_counted(body.as_bytes(), &aliases, &[]).map_err(|e| fail(&e))?;
        let out = rewritten.body.clone().ok_or_else(|| fail(&"no id replaced"))?;
        let (builtins, phase) = (BuiltinTools::default(), crate::Phase::Planner);
        let Read::Resolve(sent) = surface::read("/any", body.as_bytes(), phase, &builtins, &mut Memo::new()) else {
            return Err(fail(&"the body as sent is not resolved"));
        };
        let Read::Resolve(again) = surface::read("/any", &out, phase, &builtins, &mut Memo::new()) else {
            return Err(fail(&"the aliased body is not resolved"));
        };
        let alias = |t: &str| alias_text(&tax, t, scan.ids(), &aliases, &[]).ok();
        let moved = surface::read_moved(sent.into_owned(), &out, &rewritten.edits, phase, &alias);
        let Some(Read::Resolve(moved)) = moved else {
            return Err(fail(&format!("not moved: {}", rewritten.edits.len())));
        };
        prop_assert_eq!(read_facts(&moved, &out), read_facts(&again, &out));
    }
}

#[test]
fn a_read_is_not_moved_over_a_forced_name_or_into_the_tools() {
    use crate::json::StringEdit;
    use crate::tools::format::{parse, BuiltinTools, Memo};
    use crate::tools::surface::{self, Read};
    let tax = Taxonomy::default();
    // A tool named like an id, forced by name: the forced string is aliased,
    // the tool definitions are not, so the read must be taken again.
    let uuid = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"go"}}],"tool_choice":{{"type":"function","function":{{"name":"{uuid}"}}}},"tools":[{{"type":"function","function":{{"name":"{uuid}","parameters":{{"type":"object"}}}}}},{{"type":"function","function":{{"name":"b"}}}}]}}"#
    );
    let scan = PromptScan::new(&tax, body.as_bytes()).expect("scan");
    let aliases = fresh_aliases(&tax, &scan);
    let rewritten = scan
        .rewrite_counted(body.as_bytes(), &aliases, &[])
        .expect("rewrite");
    let out = rewritten.body.expect("the tool choice is aliased");
    assert_eq!(rewritten.edits.len(), 1);
    assert_eq!(rewritten.edits[0].was, uuid);
    let (builtins, phase) = (BuiltinTools::default(), crate::Phase::Planner);
    let Read::Resolve(sent) =
        surface::read("/any", body.as_bytes(), phase, &builtins, &mut Memo::new())
    else {
        panic!("read")
    };
    let alias = |t: &str| alias_text(&tax, t, scan.ids(), &aliases, &[]).ok();
    assert!(
        surface::read_moved(sent.into_owned(), &out, &rewritten.edits, phase, &alias).is_none()
    );

    // An edit inside a tools array, or edits out of order: not moved.
    let body = br#"{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"x"}}]}"#;
    let tools_at = body
        .windows(8)
        .position(|w| w == b"\"tools\":")
        .expect("tools")
        + 8;
    let edit = |span: std::ops::Range<usize>| StringEdit {
        span,
        len: 3,
        was: "a".into(),
        neutral: true,
    };
    let sent = || {
        parse("/v1/chat/completions", body)
            .expect("read")
            .expect("tools")
            .into_owned()
    };
    assert!(sent().moved(&[edit(tools_at + 2..tools_at + 9)]).is_none());
    assert!(sent().moved(&[edit(30..33), edit(20..23)]).is_none());
    // Before the tools: moved by what the edit added.
    let a = body
        .windows(3)
        .position(|w| w == b"\"a\"")
        .expect("the turn");
    let grown: Vec<u8> = [&body[..a], &b"\"abcd\""[..], &body[a + 3..]].concat();
    let moved = sent()
        .moved(&[StringEdit {
            span: a..a + 3,
            len: 6,
            was: "a".into(),
            neutral: true,
        }])
        .expect("moved");
    let again = parse("/v1/chat/completions", &grown)
        .expect("read")
        .expect("tools");
    for keep in [&[0][..], &[]] {
        assert_eq!(moved.rewrite(&grown, keep), again.rewrite(&grown, keep));
    }
    assert_eq!(
        String::from_utf8(moved.rewrite(&grown, &[])).expect("utf8"),
        r#"{"messages":[{"role":"user","content":"abcd"}],"tools":[]}"#
    );
}

#[test]
fn only_a_string_the_detector_does_not_read_keeps_the_count_of_the_rest() {
    use crate::tools::detect::{count_tool_shaped, reads_word};
    use crate::tools::format::{BuiltinTools, Memo};
    use crate::tools::surface::{self, Read};
    for word in [
        "name",
        "Input_Schema",
        "TOOLS",
        "function",
        "cus-tom",
        "namespace",
    ] {
        assert!(reads_word(word), "{word}");
    }
    for other in [
        "go",
        "039b70b8-92f7-44b7-9c91-4e3f0e900c71",
        "names",
        "functional",
    ] {
        assert!(!reads_word(other), "{other}");
    }
    let tax = Taxonomy::default();
    let uuid = "039b70b8-92f7-44b7-9c91-4e3f0e900c71";
    let tools = r#""tools":[{"type":"function","function":{"name":"b"}}]"#;
    let declarations = r#""tools":[{"functionDeclarations":[{"name":"b"}]}]"#;
    // A string of the conversation: neutral, and the count as sent is kept.
    // An id in a tool's arguments (a container read as one document): not
    // neutral, so the rest of the aliased body is counted again.
    for (body, neutral) in [
        (
            format!(r#"{{"messages":[{{"role":"user","content":"see {uuid}"}}],{tools}}}"#),
            true,
        ),
        (
            format!(
                r#"{{"contents":[{{"role":"model","parts":[{{"functionCall":{{"name":"b","args":{{"id":"{uuid}"}}}}}}]}}],{declarations}}}"#
            ),
            false,
        ),
    ] {
        let scan = PromptScan::new(&tax, body.as_bytes()).expect("scan");
        let aliases = fresh_aliases(&tax, &scan);
        let rewritten = scan
            .rewrite_counted(body.as_bytes(), &aliases, &[])
            .expect("rewrite");
        let out = rewritten.body.clone().expect("aliased");
        assert_eq!(rewritten.edits.len(), 1, "{body}");
        assert_eq!(rewritten.edits[0].neutral, neutral, "{body}");
        let phase = crate::Phase::Planner;
        let Read::Resolve(sent) = surface::read(
            "/any",
            body.as_bytes(),
            phase,
            &BuiltinTools::default(),
            &mut Memo::new(),
        ) else {
            panic!("read")
        };
        let moved = sent.into_owned().moved(&rewritten.edits).expect("moved");
        assert_eq!(moved.rest.is_some(), neutral, "{body}");
        if let Some(rest) = moved.rest {
            let without_tools = moved.rewrite(&out, &[]);
            assert_eq!(Some(rest), count_tool_shaped(&without_tools).ok());
        }
    }
}

/// The aliases a new session gives the ids `scan` found.
fn fresh_aliases(tax: &Taxonomy, scan: &PromptScan<'_>) -> Vec<String> {
    SessionMap::new()
        .encode(tax, scan.ids())
        .expect("encode")
        .aliases
}
