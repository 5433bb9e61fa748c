//! The words a tool's parameter schema is written with.
//!
//! What a tool takes says what it does: `insuranceCardRead` ("Whether the
//! health insurance card was read at reception") belongs to a check-in, and
//! `method: cash | card | transfer` to a payment. The lexical index reads
//! these words as one more field of the tool, weighted below its
//! descriptions ([`super::lexical::LexicalSettings::parameters_weight`]).
//!
//! Read from the JSON Schema a request carries (`parameters`,
//! `input_schema`, `parametersJsonSchema`): each property's name split at
//! camelCase and separators, its `description` and `title`, and its string
//! `enum` values, then the same for nested objects and array items. Depth and
//! output are bounded, so a hostile schema costs bounded work; defaults and
//! examples are not read (they are values, not what the tool is for).

use super::lexical::BorrowedText;
use super::tokenize::camel_spaced;
use serde_json::Value;

/// How deep nested properties are followed (the top level is depth 1).
pub const MAX_DEPTH: usize = 4;

/// The words of one tool's parameter schema, space-separated, at most
/// [`super::lexical::BORROWED_BYTES`]; empty when the schema has no properties.
pub fn schema_words(schema: &Value) -> String {
    let mut out = BorrowedText::default();
    walk(schema, 1, &mut out);
    out.into_string()
}

fn walk(schema: &Value, depth: usize, out: &mut BorrowedText) {
    if depth > MAX_DEPTH {
        return;
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        if let Some(items) = schema.get("items") {
            walk(items, depth, out);
        }
        return;
    };
    for (name, property) in properties {
        if !out.push(&camel_spaced(name)) {
            return;
        }
        for key in ["title", "description"] {
            if let Some(text) = property.get(key).and_then(Value::as_str) {
                if !out.push(text) {
                    return;
                }
            }
        }
        let values = property.get("enum").and_then(Value::as_array);
        for v in values.into_iter().flatten().filter_map(Value::as_str) {
            if !out.push(v) {
                return;
            }
        }
        walk(property, depth + 1, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::rank::lexical::BORROWED_BYTES;
    use serde_json::json;

    #[test]
    fn names_descriptions_and_enums_are_read_defaults_are_not() {
        let schema = json!({
            "type": "object",
            "properties": {
                "insuranceCardRead": {"type": "boolean", "description": "Whether the card was read."},
                "method": {"type": "string", "enum": ["cash", "card"], "default": "cash"},
                "payer_name": {"type": "string", "title": "Payer", "examples": ["Jane Doe"]}
            }
        });
        assert_eq!(
            schema_words(&schema),
            "insurance Card Read Whether the card was read. method cash card payer_name Payer"
        );
    }

    #[test]
    fn nested_objects_and_array_items_are_followed_to_a_bounded_depth() {
        let schema = json!({"properties": {"lines": {"type": "array", "items": {
            "properties": {"dose": {"description": "Dose per intake.", "properties": {
                "unit": {"properties": {"deeper": {"properties": {
                    "deepest": {"description": "too deep"}}}}}}}}}}}});
        assert_eq!(
            schema_words(&schema),
            "lines dose Dose per intake. unit deeper"
        );
    }

    #[test]
    fn no_schema_or_no_properties_gives_nothing() {
        assert_eq!(schema_words(&Value::Null), "");
        assert_eq!(schema_words(&json!({"type": "object"})), "");
        assert_eq!(schema_words(&json!({"properties": []})), "");
    }

    #[test]
    fn output_is_bounded_and_keeps_whole_words() {
        let properties: serde_json::Map<String, Value> = (0..2000)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"description": "a long enough description"}),
                )
            })
            .collect();
        let words = schema_words(&json!({ "properties": properties }));
        assert!(words.len() <= BORROWED_BYTES);
        assert!(words.ends_with("description") || words.ends_with(char::is_numeric));
    }
}
