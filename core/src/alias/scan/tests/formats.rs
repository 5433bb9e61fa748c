//! The content types beyond JSON, CSV, XML and HTML: each read, or withheld
//! with its reason. Every rewritten body also passes the independent last
//! word, so what is aliased is all there was.

use super::*;
use crate::alias::lastword::LastWord;

/// Rewrites `body` read as `kind` and checks it with the last word.
fn rewritten(body: &str, kind: BodyKind) -> String {
    let tax = Taxonomy::default();
    let (out, scan, session) = run(&tax, body.as_bytes(), kind, None);
    let known: Vec<&str> = scan.ids().iter().map(|i| i.value.as_str()).collect();
    let aliases: Vec<&str> = session.records().iter().map(|r| r.alias.as_str()).collect();
    let word = LastWord::new(&tax, known, aliases);
    let text = String::from_utf8(out).unwrap();
    let found = match kind {
        BodyKind::EventStream => word.check_event_stream(text.as_bytes()),
        _ => word.check_body(text.as_bytes()),
    };
    assert_eq!(found, None, "the last word finds a raw id in\n{text}");
    text
}

fn withheld(body: &str, kind: BodyKind) -> WithholdReason {
    let tax = Taxonomy::default();
    let mut scan = ResponseScan::new(&tax);
    scan.add(body.as_bytes(), kind, None).unwrap_err().reason()
}

#[test]
fn server_sent_events_read_each_json_data_line_as_json() {
    let ct = BodyKind::from_content_type(Some("text/event-stream; charset=utf-8"));
    assert_eq!(ct, BodyKind::EventStream);
    let body = "event: update\r\nid: 7\r\ndata: {\"patientId\": 482913, \"status\": \"arrived\"}\r\n\r\n\
                : keep-alive\n\
                data: {\"resourceType\":\"Encounter\",\"id\":\"1\",\"subject\":{\"reference\":\"Patient/482913\"}}\n\n\
                data: plain text about Patient/482913\n\n";
    let out = rewritten(body, ct);
    assert_eq!(
        out,
        "event: update\r\nid: 7\r\ndata: {\"patientId\": \"patient-001\", \"status\": \"arrived\"}\r\n\r\n\
         : keep-alive\n\
         data: {\"resourceType\":\"Encounter\",\"id\":\"visit-001\",\"subject\":{\"reference\":\"Patient/patient-001\"}}\n\n\
         data: plain text about Patient/patient-001\n\n"
    );
}

#[test]
fn form_bodies_alias_values_under_id_keys() {
    let ct = BodyKind::from_content_type(Some("application/x-www-form-urlencoded"));
    assert_eq!(ct, BodyKind::Form);
    let out = rewritten(
        "patientId=482913&note=seen+today&visitId=%37%37&count=3",
        ct,
    );
    assert_eq!(
        out,
        "patientId=patient-001&note=seen+today&visitId=visit-001&count=3"
    );
}

#[test]
fn yaml_lines_alias_values_under_id_keys() {
    let ct = BodyKind::from_content_type(Some("application/yaml"));
    assert_eq!(ct, BodyKind::Yaml);
    let body = "patient:\n  id: 482913\n  name: Renate Kühn\nvisits:\n  - visitId: \"77\"  # last\n  - visitId: '78'\ncount: 2\n";
    let out = rewritten(body, ct);
    assert_eq!(
        out,
        "patient:\n  id: patient-001\n  name: Renate Kühn\nvisits:\n  - visitId: \"visit-001\"  # last\n  - visitId: 'visit-002'\ncount: 2\n"
    );
    // A nested `id` takes the kind of the mapping it is in, list items and
    // deeper levels included; back at the top level, the path's kind again.
    let body = "data:\n  encounters:  # today\n  - id: 91\n    status: arrived\n    subject:\n      id: 482913\n    meta:\n      versionId: 3\n  - id: 92\nid: 5\n";
    assert_eq!(
        rewritten(body, ct),
        "data:\n  encounters:  # today\n  - id: encounter-001\n    status: arrived\n    subject:\n      id: patient-001\n    meta:\n      versionId: 3\n  - id: encounter-002\nid: ref-001\n"
    );
    // YAML that is JSON is read as JSON.
    assert_eq!(
        rewritten("{\"patientId\": 5}", ct),
        "{\"patientId\": \"patient-001\"}"
    );
}

#[test]
fn jsonp_and_xssi_wrappers_are_read_as_json_and_kept() {
    for (body, want) in [
        (
            ")]}'\n{\"patientId\": 482913}",
            ")]}'\n{\"patientId\": \"patient-001\"}",
        ),
        (
            ")]}',\n{\"patientId\": 482913}",
            ")]}',\n{\"patientId\": \"patient-001\"}",
        ),
        (
            "while(1);{\"patientId\": 482913}",
            "while(1);{\"patientId\": \"patient-001\"}",
        ),
        (
            "for(;;);{\"patientId\": 482913}",
            "for(;;);{\"patientId\": \"patient-001\"}",
        ),
        (
            "cb_1({\"patientId\": 482913});",
            "cb_1({\"patientId\": \"patient-001\"});",
        ),
        (
            "jQuery.x ( [{\"patientId\": 482913}] )\n",
            "jQuery.x ( [{\"patientId\": \"patient-001\"}] )\n",
        ),
    ] {
        for kind in [
            BodyKind::Json,
            BodyKind::from_content_type(Some("application/javascript")),
        ] {
            assert_eq!(rewritten(body, kind), want, "{body} as {kind:?}");
        }
    }
}

#[test]
fn json_with_comments_or_trailing_commas_is_withheld_as_not_json() {
    for body in [
        "{\"patientId\": 1, // note\n}",
        "{\"patientId\": 1,}",
        "/* x */ {\"patientId\": 1}",
    ] {
        assert_eq!(
            withheld(body, BodyKind::Json),
            WithholdReason::NotJson,
            "{body}"
        );
    }
}

#[test]
fn links_with_id_query_values_are_aliased() {
    let body = r#"{"data":[],"links":{"next":"/api/v2/appointments?patientId=482913&page=2","self":"/fhir/Observation?patient=17&_count=10"}}"#;
    let out = rewritten(body, BodyKind::Json);
    assert_eq!(
        out,
        r#"{"data":[],"links":{"next":"/api/v2/appointments?patientId=patient-001&page=2","self":"/fhir/Observation?patient=patient-002&_count=10"}}"#
    );
}

#[test]
fn scalars_under_kind_named_keys_are_ids_of_that_kind() {
    let body = r#"{"patient": 482913, "encounter": "77", "visits": [12, 13], "practitioner": {"id": "5"}}"#;
    let out = rewritten(body, BodyKind::Json);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["patient"]
            .as_str()
            .is_some_and(|a| a.starts_with("patient-")),
        "{out}"
    );
    assert!(
        v["encounter"]
            .as_str()
            .is_some_and(|a| a.starts_with("encounter-")),
        "{out}"
    );
    assert!(
        v["visits"][0]
            .as_str()
            .is_some_and(|a| a.starts_with("visit-")),
        "{out}"
    );
    assert!(
        v["practitioner"]["id"]
            .as_str()
            .is_some_and(|a| a.starts_with("practitioner-")),
        "{out}"
    );
}
