//! The vector files match their JSON Schemas (draft 2020-12), checked by a real validator.

use conformance::scenarios::{SCENARIOS_JSON, SCENARIOS_SCHEMA_JSON};
use conformance::vectors::{WIRE_JSON, WIRE_SCHEMA_JSON};
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(WIRE_SCHEMA_JSON).expect("schema is JSON");
    jsonschema::draft202012::new(&schema).expect("schema is a valid draft 2020-12 schema")
}

fn errors(validator: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    validator.iter_errors(doc).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

#[test]
fn wire_vectors_match_their_schema() {
    let doc: Value = serde_json::from_str(WIRE_JSON).expect("wire.json is JSON");
    let problems = errors(&validator(), &doc);
    assert!(problems.is_empty(), "wire.json breaks its schema:\n{}", problems.join("\n"));
}

/// The schema is not vacuous: it rejects the mistakes a hand-edited case is likely to have.
#[test]
fn schema_rejects_malformed_cases() {
    let v = validator();
    let file = |case: Value| {
        json!({"schema_version": 1, "kind": "wire", "description": "",
               "groups": [{"name": "g", "description": "", "cases": [case]}]})
    };
    let busy = json!({"type": "BUSY", "sport": 1, "dport": 2, "sequence": 0, "doff": 80,
        "flags": 6, "window": 0, "checksum": 0, "urgent": 47485, "sender_id": 3});
    let valid = json!({"id": "busy", "description": "d", "tags": [], "hex": "00",
        "result": "valid", "parsed_len": 28, "fields": busy});
    assert_eq!(errors(&v, &file(valid.clone())), Vec::<String>::new());

    let with = |key: &str, value: Value| {
        let mut case = valid.clone();
        case[key] = value;
        file(case)
    };
    let mut bad_fields = busy.clone();
    bad_fields["offset"] = json!(1); // a GRANT key on a BUSY
    let mut bad_port = busy.clone();
    bad_port["sport"] = json!(65536);
    for doc in [
        with("hex", json!("ABCD")),
        with("hex", json!("abc")),
        with("id", json!("Not An Id")),
        with("error", json!("truncated")),
        with("fields", bad_fields),
        with("fields", bad_port),
        with("result", json!("invalid")),
    ] {
        assert!(!v.is_valid(&doc), "schema accepted {doc}");
    }
    let invalid = json!({"id": "x", "description": "d", "tags": [], "hex": "",
        "result": "invalid", "error": "no_such_class"});
    assert!(!v.is_valid(&file(invalid)));
}

fn scenario_validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(SCENARIOS_SCHEMA_JSON).expect("schema is JSON");
    jsonschema::draft202012::new(&schema).expect("schema is a valid draft 2020-12 schema")
}

#[test]
fn scenario_vectors_match_their_schema() {
    let doc: Value = serde_json::from_str(SCENARIOS_JSON).expect("scenarios.json is JSON");
    let problems = errors(&scenario_validator(), &doc);
    assert!(problems.is_empty(), "scenarios.json breaks its schema:\n{}", problems.join("\n"));
}

/// A case may set any `Config` field and nothing else: the schema lists exactly the core's
/// fields, so a new field cannot be left out of the vectors' reach.
#[test]
fn scenario_schema_lists_every_config_field() {
    let schema: Value = serde_json::from_str(SCENARIOS_SCHEMA_JSON).expect("schema is JSON");
    let listed = schema["$defs"]["config"]["properties"].as_object().expect("config properties");
    let listed: BTreeSet<&str> = listed.keys().map(String::as_str).collect();
    let fields: BTreeSet<&str> = homa_core::config::FIELDS.iter().map(|f| f.name).collect();
    assert_eq!(listed, fields);
}

/// The scenario schema rejects the mistakes a hand-edited case is likely to have.
#[test]
fn scenario_schema_rejects_malformed_steps() {
    let v = scenario_validator();
    let file = |step: Value| {
        json!({"schema_version": 1, "kind": "scenario", "description": "",
               "groups": [{"name": "g", "description": "", "cases": [
                   {"id": "c", "description": "d", "tags": [], "steps": [step]}]}]})
    };
    let good = [
        json!({"at": 0, "op": "bind", "port": 99}),
        json!({"at": 0, "op": "timeout"}),
        json!({"at": 0, "op": "expect_timeout", "deadline": null}),
        json!({"at": 0, "op": "expect_timeout", "not_before": 5}),
        json!({"at": 0, "op": "send_request", "port": 1, "dest": "[::1]:4000", "dest_port": 2,
               "message": {"len": 3, "pattern": "mod251"}, "cookie": 0, "expect_return": 2}),
        json!({"at": 0, "op": "packet", "from": "198.18.0.2:4000",
               "fields": {"type": "BUSY", "sport": 1, "dport": 2, "sender_id": 3}}),
        json!({"at": 0, "op": "expect_transmits", "transmits": [{"to": "198.18.0.2:4000",
               "priority": 7, "packet": {"type": "DATA", "effective_offset": 0,
               "payload_len": 4, "payload": {"fill": 1}}}]}),
    ];
    for step in good {
        assert_eq!(errors(&v, &file(step.clone())), Vec::<String>::new(), "{step}");
    }
    let bad = [
        json!({"at": 0, "op": "bind"}),
        json!({"at": -1, "op": "timeout"}),
        json!({"at": 0, "op": "timeout", "port": 1}),
        json!({"at": 0, "op": "fly"}),
        json!({"at": 0, "op": "bind", "port": 99, "expect_error": "no_such_error"}),
        json!({"at": 0, "op": "expect_timeout"}),
        json!({"at": 0, "op": "expect_timeout", "deadline": 5, "not_after": 6}),
        json!({"at": 0, "op": "send_request", "port": 1, "dest": "nowhere", "dest_port": 2,
               "message": "00", "cookie": 0}),
        json!({"at": 0, "op": "send_request", "port": 1, "dest": "198.18.0.2:1", "dest_port": 2,
               "message": {"len": 3, "fill": 1, "pattern": "mod251"}, "cookie": 0}),
        json!({"at": 0, "op": "packet", "from": "198.18.0.2:4000", "hex": "00",
               "fields": {"type": "BUSY", "sport": 1, "dport": 2, "sender_id": 3}}),
        json!({"at": 0, "op": "packet", "from": "198.18.0.2:4000",
               "fields": {"type": "BUSY", "sport": 1, "dport": 2, "sender_id": 3, "bogus": 1}}),
        json!({"at": 0, "op": "expect_transmits", "transmits": [{"to": "198.18.0.2:4000",
               "priority": 8, "packet": {"type": "BUSY"}}]}),
        json!({"at": 0, "op": "expect_transmits", "transmits": [{"to": "198.18.0.2:4000",
               "priority": 7, "packet": {"type": "DATA", "payload": {"fill": 1}}}]}),
        json!({"at": 0, "op": "expect_events", "events": [{"type": "rpc_failed", "id": 2,
               "cookie": 0, "reason": "bored"}]}),
        json!({"at": 0, "op": "expect_metrics", "metrics": {"drops": {"no_port": -1}}}),
    ];
    for step in bad {
        assert!(!v.is_valid(&file(step.clone())), "schema accepted {step}");
    }
    let bad_config = json!({"schema_version": 1, "kind": "scenario", "description": "",
        "groups": [{"name": "g", "description": "", "cases": [{"id": "c", "description": "d",
        "tags": [], "config": {"max_overcommit": 9}, "steps": [{"at": 0, "op": "timeout"}]}]}]});
    assert!(!v.is_valid(&bad_config));
}
