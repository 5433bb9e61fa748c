//! Learn, then replace everywhere, end to end (the real `.wasm` in a real
//! Envoy, the real control binary): an id learned from a structured field of
//! one response is replaced in later responses of the same session wherever it
//! stands — prose of a JSON body, a `text/plain` body, a percent-encoded URL —
//! because control sends the session's known ids with every encode answer. In
//! another session the id is not known and never gets the first session's
//! alias.

use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{Stack, StackOptions};
use serde_json::Value;

const SESSION_HEADER: &str = "x-keyhole-session";
/// Ids only a structured field reveals: no text pattern finds them in prose.
const NUMBER_ID: &str = "4829137";
const SLUG_ID: &str = "anna-k-4471";

async fn get(stack: &Stack, session: &str, path: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .get(format!("{}{path}", stack.envoy.hms_url()))
        .header(SESSION_HEADER, session)
        .send()
        .await
        .expect("request through envoy");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

fn text_canned(text: &str) -> Canned {
    let mut c = Canned::json(text.as_bytes().to_vec());
    c.headers
        .push(("content-type".into(), "text/plain; charset=utf-8".into()));
    c
}

fn assert_raw_free(what: &str, text: &str) {
    for raw in [NUMBER_ID, SLUG_ID, "anna%2Dk%2D4471", "anna&#45;k&#45;4471"] {
        assert!(
            !text
                .to_ascii_lowercase()
                .contains(&raw.to_ascii_lowercase()),
            "{what}: raw id {raw} reached the client: {text}"
        );
    }
}

#[tokio::test]
async fn an_id_learned_from_a_detail_is_replaced_in_later_prose_text_and_urls_of_its_session_only()
{
    let stack = Stack::start(StackOptions::default()).await.expect("stack");

    // Response 1: the detail teaches the session both ids.
    let detail = format!(r#"{{"data":{{"id":{NUMBER_ID},"slug":"{SLUG_ID}","name":"Anna K."}}}}"#);
    stack
        .hms
        .set("/api/v2/patients/detail", Canned::json(detail.into_bytes()));
    let (status, body) = get(&stack, "s-known", "/api/v2/patients/detail").await;
    assert_eq!(status, 200, "{body}");
    assert_raw_free("detail", &body);
    let v: Value = serde_json::from_str(&body).expect("json");
    let alias = v
        .pointer("/data/id")
        .and_then(Value::as_str)
        .expect("the number id is written back as a string alias")
        .to_owned();
    let slug_alias = v
        .pointer("/data/slug")
        .and_then(Value::as_str)
        .expect("the slug is aliased")
        .to_owned();

    // Response 2, JSON: the ids stand only in prose and a URL.
    let note = format!(
        r#"{{"note":"Seen {NUMBER_ID} today; file Arztbrief_{SLUG_ID}_2025.pdf","next":"/api/v2/notes?subject=Patient%2F{NUMBER_ID}&slug=anna%2Dk%2D4471"}}"#
    );
    stack
        .hms
        .set("/api/v2/notes", Canned::json(note.into_bytes()));
    let (status, body) = get(&stack, "s-known", "/api/v2/notes").await;
    assert_eq!(status, 200, "{body}");
    assert_raw_free("prose", &body);
    assert!(body.contains(&format!("Seen {alias} today")), "{body}");
    assert!(
        body.contains(&format!("Arztbrief_{slug_alias}_2025.pdf")),
        "{body}"
    );

    // Response 2', text/plain: no structured id at all in the body.
    let text = format!(
        "Anna ({NUMBER_ID}) moved. Letter: /letters?who={SLUG_ID} and anna&#45;k&#45;4471.\n"
    );
    stack.hms.set("/api/v2/export.txt", text_canned(&text));
    let (status, body) = get(&stack, "s-known", "/api/v2/export.txt").await;
    assert_eq!(status, 200, "{body}");
    assert_raw_free("text/plain", &body);
    assert!(
        body.starts_with(&format!("Anna ({alias}) moved.")),
        "{body}"
    );

    // Another session never learned these ids: they are not rewritten with
    // the first session's alias (its own scan finds no id in prose).
    let (status, body) = get(&stack, "s-other", "/api/v2/export.txt").await;
    assert_eq!(status, 200, "{body}");
    for a in [&alias, &slug_alias] {
        assert!(
            !body.contains(a.as_str()),
            "first session's alias leaked: {body}"
        );
    }
    assert_eq!(body, text, "unknown in this session: the text is unchanged");
}
