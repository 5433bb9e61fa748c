//! The operator's taxonomy file, end to end: one file given to control
//! (`--taxonomy`) and to the HMS filter (its `taxonomy` member) adds a kind
//! without a rebuild, and a filter and a control that disagree on the taxonomy
//! never alias (control refuses the other digest; the response is withheld).

use keyhole_e2e::upstream::Canned;
use keyhole_e2e::{paths, Stack, StackOptions};
use serde_json::Value;

const SPECIMEN: &str = "7c1e2d3a-5b6f-4a8e-9d0c-1f2e3a4b5c6d";

fn example_file() -> std::path::PathBuf {
    paths::repo().join("config/taxonomy.example.json")
}

/// A stack whose HMS filter runs with `filter_taxonomy` (`None`: the
/// built-in one) and whose control loads the example file.
async fn stack(filter_taxonomy: Option<&str>) -> Stack {
    let mut hms = serde_json::json!({"mode": "hms", "timeout_ms": 5000, "raw_ids": "pass"});
    if let Some(t) = filter_taxonomy {
        hms["taxonomy"] = serde_json::from_str(t).expect("taxonomy json");
    }
    let mut options = StackOptions {
        hms_filter_config: hms.to_string(),
        ..Default::default()
    };
    options
        .control_args
        .extend(["--taxonomy".into(), example_file().display().to_string()]);
    Stack::start(options).await.expect("stack")
}

async fn get(stack: &Stack, path: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .get(format!("{}{path}", stack.envoy.hms_url()))
        .header("x-keyhole-session", "taxonomy")
        .send()
        .await
        .expect("request through envoy");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

fn specimen_body() -> Vec<u8> {
    format!(r#"{{"data":{{"id":"{SPECIMEN}","fhirId":"spec-000042","type":"blood"}}}}"#)
        .into_bytes()
}

#[tokio::test]
async fn a_kind_added_by_the_file_is_aliased_and_decoded_without_a_rebuild() {
    let file = std::fs::read_to_string(example_file()).expect("example taxonomy");
    let stack = stack(Some(&file)).await;
    let path = format!("/api/v2/specimens/{SPECIMEN}");
    stack.hms.set(&path, Canned::json(specimen_body()));

    let (status, body) = get(&stack, &path).await;
    assert_eq!(status, 200, "{body}\n{}", stack.envoy.log_tail());
    assert!(
        !body.contains(SPECIMEN) && !body.contains("spec-000042"),
        "raw ids reached the client: {body}"
    );
    let v: Value = serde_json::from_str(&body).expect("json");
    let alias = v
        .pointer("/data/id")
        .and_then(Value::as_str)
        .expect("aliased id")
        .to_owned();
    assert!(
        alias.starts_with("specimen-"),
        "the file's kind names the alias: {alias}"
    );

    // The alias goes back to HMS as the record's id.
    stack.hms.clear();
    stack.hms.set(
        &format!("/api/v2/specimens/{SPECIMEN}/labels"),
        Canned::json(b"{}".to_vec()),
    );
    let (status, body) = get(&stack, &format!("/api/v2/specimens/{alias}/labels")).await;
    assert_eq!(status, 200, "{body}");
    let seen = stack.hms.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].uri.contains(SPECIMEN),
        "HMS got the real id: {}",
        seen[0].uri
    );
}

#[tokio::test]
async fn a_filter_and_a_control_on_different_taxonomies_never_alias() {
    // The filter runs the built-in taxonomy, control the example file.
    let stack = stack(None).await;
    let path = format!("/api/v2/specimens/{SPECIMEN}");
    stack.hms.set(&path, Canned::json(specimen_body()));
    let (status, body) = get(&stack, &path).await;
    assert_eq!(status, 502, "withheld, not passed raw: {body}");
    assert!(!body.contains(SPECIMEN), "{body}");
    assert!(
        body.contains("different taxonomies"),
        "the reason is named: {body}"
    );
    let withheld = |reason: &'static str| {
        let envoy = &stack.envoy;
        async move {
            envoy
                .stat(&format!("wasmcustom.keyhole.hms_withheld.{reason}"))
                .await
                .unwrap()
        }
    };
    assert_eq!(
        (withheld("taxonomy").await, withheld("conflict").await),
        (1, 0)
    );
    // A request with an alias is refused for the same reason, and never sent.
    stack.hms.clear();
    let (status, body) = get(&stack, "/api/v2/patients/patient-k7q2-001").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("different taxonomies"), "{body}");
    assert!(stack.hms.seen().is_empty());
}

/// The example file's business identifiers through the real filter, with the
/// listener's default `raw_ids: refuse`: a KVNR and an MRN in a Patient's
/// `identifier` are aliased, the MRN stays readable in the narrative, the
/// last word passes the response, and an `identifier=<system>|<value>`
/// search reaches HMS only with the alias.
#[tokio::test]
async fn business_identifiers_are_aliased_and_searched_by_alias() {
    let file = std::fs::read_to_string(example_file()).expect("example taxonomy");
    let mut hms = serde_json::json!({"mode": "hms", "timeout_ms": 5000});
    hms["taxonomy"] = serde_json::from_str(&file).expect("taxonomy json");
    let mut options = StackOptions {
        hms_filter_config: hms.to_string(),
        ..Default::default()
    };
    options
        .control_args
        .extend(["--taxonomy".into(), example_file().display().to_string()]);
    let stack = Stack::start(options).await.expect("stack");
    let patient = br#"{"resourceType":"Patient","id":"pat-000123","identifier":[
        {"system":"http://fhir.de/sid/gkv/kvid-10","value":"A123456789"},
        {"system":"https://hospital.example.org/fhir/sid/mrn","value":"MRN-0042"}],
      "text":{"status":"generated","div":"<div>KVNR A123456789 / MRN-0042</div>"}}"#;
    stack
        .hms
        .set("/fhir/Patient", Canned::json(patient.to_vec()));
    let (status, body) = get(&stack, "/fhir/Patient?_id=x").await;
    assert_eq!(status, 200, "{body}\n{}", stack.envoy.log_tail());
    assert!(
        !body.contains("A123456789") && !body.contains("pat-000123"),
        "raw ids reached the client: {body}"
    );
    let v: Value = serde_json::from_str(&body).expect("json");
    let kvnr = v
        .pointer("/identifier/0/value")
        .and_then(Value::as_str)
        .expect("kvnr")
        .to_owned();
    let mrn = v
        .pointer("/identifier/1/value")
        .and_then(Value::as_str)
        .expect("mrn")
        .to_owned();
    assert!(
        kvnr.starts_with("kvnr-") && mrn.starts_with("mrn-"),
        "{body}"
    );
    assert_eq!(
        v.pointer("/text/div").and_then(Value::as_str),
        Some(format!("<div>KVNR {kvnr} / MRN-0042</div>").as_str())
    );

    let kvid = "http://fhir.de/sid/gkv/kvid-10";
    stack.hms.clear();
    let (status, body) = get(&stack, &format!("/fhir/Patient?identifier={kvid}|{kvnr}")).await;
    assert_eq!(status, 200, "{body}");
    let seen = stack.hms.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].uri,
        format!("/fhir/Patient?identifier={kvid}|A123456789")
    );
    stack.hms.clear();
    let (status, body) = get(
        &stack,
        &format!("/fhir/Patient?identifier={kvid}|A123456789"),
    )
    .await;
    assert_eq!(status, 400, "a raw business identifier is refused: {body}");
    assert!(stack.hms.seen().is_empty(), "the raw search reached HMS");
}
