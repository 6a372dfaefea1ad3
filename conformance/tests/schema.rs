//! The vector files match their JSON Schemas (draft 2020-12), checked by a real validator.

use conformance::vectors::{WIRE_JSON, WIRE_SCHEMA_JSON};
use serde_json::{Value, json};

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
