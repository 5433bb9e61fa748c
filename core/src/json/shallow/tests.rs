use super::*;
use proptest::prelude::*;
use serde_json::Value;
use std::borrow::Cow;

/// Any JSON value, with keys and strings that need escapes, written with
/// random whitespace between tokens (ground truth: the `Value` itself).
fn value() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        "[a-z]{0,6}",
        Just("quote\" back\\slash \u{1} tab\t".to_owned()),
        Just("ünï €😀 ]}[{,:".to_owned()),
        "\\PC{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Quarters: written and read back exactly.
        (-4_000_000i64..4_000_000).prop_map(|q| Value::from(q as f64 / 4.0)),
        text.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text.clone(), inner), 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `v` written with `ws` (cycled) around every token.
fn spaced(v: &Value, ws: &[&str], n: &mut usize) -> String {
    fn pad(ws: &[&str], n: &mut usize) -> String {
        *n += 1;
        ws.get(*n % ws.len().max(1))
            .copied()
            .unwrap_or("")
            .to_owned()
    }
    match v {
        Value::Array(items) => {
            let mut inner = Vec::new();
            for item in items {
                let (before, value) = (pad(ws, n), spaced(item, ws, n));
                inner.push(format!("{before}{value}{}", pad(ws, n)));
            }
            format!("[{}{}]", inner.join(","), pad(ws, n))
        }
        Value::Object(map) => {
            let mut inner = Vec::new();
            for (k, item) in map {
                let (a, b, c) = (pad(ws, n), pad(ws, n), pad(ws, n));
                inner.push(format!(
                    "{a}{}{b}:{c}{}",
                    Value::String(k.clone()),
                    spaced(item, ws, n)
                ));
            }
            format!("{{{}{}}}", inner.join(","), pad(ws, n))
        }
        scalar => scalar.to_string(),
    }
}

proptest! {
    /// Read through the shallow deserializer, any checked JSON text gives
    /// the value serde_json gives, and every value's end is where
    /// serde_json says it is.
    #[test]
    fn reads_what_serde_json_reads(v in value(), ws in prop::sample::subsequence(vec!["", " ", "\n", "\t ", "\r\n  "], 1..5)) {
        let text = spaced(&v, &ws, &mut 0);
        let expected: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&expected, &v);
        let shallow: Value = from_str(&text).unwrap();
        prop_assert_eq!(&shallow, &expected);
        let trimmed = text.trim();
        prop_assert_eq!(value_end(trimmed.as_bytes(), 0), Some(trimmed.len()));
        if let Value::Array(items) = &expected {
            let raws: Vec<Raw<'_>> = from_str(&text).unwrap();
            prop_assert_eq!(raws.len(), items.len());
            for (raw, item) in raws.iter().zip(items) {
                prop_assert_eq!(&serde_json::from_str::<Value>(raw.get()).unwrap(), item);
            }
        }
    }

    /// A struct read shallowly reads its fields as serde_json does, whatever
    /// else the object holds, and refuses what serde_json refuses.
    #[test]
    fn structs_read_as_serde_json_reads_them(v in value(), name in prop::option::of("[a-z\"\\\\]{0,5}"), twice in any::<bool>()) {
        let mut text = String::from("{");
        if let Some(name) = &name {
            text.push_str(&format!("\"name\":{},", Value::String(name.clone())));
            if twice {
                text.push_str("\"name\":\"again\",");
            }
        }
        text.push_str(&format!("\"parameters\":{v},\"description\":null}}"));
        let by_serde = serde_json::from_str::<Named<'_>>(&text);
        let by_shallow = from_str::<Named<'_>>(&text);
        match (by_serde, by_shallow) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(a.name, b.name);
                prop_assert_eq!(a.description, b.description);
                prop_assert_eq!(a.parameters.map(|r| r.get()), b.parameters.map(|r| r.get()));
            }
            (Err(_), Err(_)) => {}
            (a, b) => prop_assert!(false, "serde_json: {:?}, shallow: {:?}", a.is_ok(), b.is_ok()),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    description: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    parameters: Option<Raw<'a>>,
}

#[test]
fn a_raw_value_is_the_exact_bytes_and_is_borrowed() {
    let text = r#"{ "name" : "a\"b", "parameters" :  {"type": "object", "x": [1, {"]": "}"}]} }"#;
    let named: Named<'_> = from_str(text).unwrap();
    assert_eq!(named.name.as_deref(), Some("a\"b"));
    let raw = named.parameters.unwrap();
    assert_eq!(raw.get(), r#"{"type": "object", "x": [1, {"]": "}"}]}"#);
    let offset = raw.get().as_ptr() as usize - text.as_ptr() as usize;
    assert_eq!(text.get(offset..offset + raw.get().len()), Some(raw.get()));
    // The same through serde_json.
    let named: Named<'_> = serde_json::from_str(text).unwrap();
    assert_eq!(named.parameters.unwrap().get(), raw.get());
}

#[test]
fn unchecked_or_cut_texts_are_errors_not_panics() {
    for text in [
        "",
        "{",
        "[",
        "{\"a\"",
        "{\"a\":",
        "[1,",
        "\"abc",
        "{\"a\":1 \"b\":2}",
        "[}",
        "}",
        "{\"a\\",
        "nul",
    ] {
        let _ = from_str::<Value>(text);
        let _ = from_str::<Named<'_>>(text);
        let _ = from_str::<Vec<Raw<'_>>>(text);
        let _ = value_end(text.as_bytes(), 0);
    }
    assert!(from_str::<Vec<Raw<'_>>>("{}").is_err());
    assert_eq!(value_end(b"[1,[2]", 0), None);
    assert_eq!(value_end(b"\"a\\\"", 0), None);
}

#[test]
fn serde_json_raw_values_are_refused_by_name() {
    #[derive(Deserialize)]
    struct WithRawValue<'a> {
        #[serde(borrow)]
        #[allow(dead_code)]
        x: &'a RawValue,
    }
    let err = from_str::<WithRawValue<'_>>(r#"{"x": [1]}"#).err().unwrap();
    assert!(err.to_string().contains("shallow::Raw"), "{err}");
}
