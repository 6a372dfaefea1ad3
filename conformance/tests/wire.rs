//! The Rust runner for `vectors/wire.json`: homa-core's codec, through `conformance::fields`,
//! must give every valid case's fields and bytes back and reject every invalid case with its
//! error class. Failures are judged against `expected-failures/rust.txt`.

use std::collections::BTreeSet;
use std::panic::{self, AssertUnwindSafe};

use conformance::fields;
use conformance::vectors::{
    self, ERROR_CLASSES, Expected, ExpectedFailures, PACKET_TYPES, WireCase, WireFile,
};
use serde_json::{Map, Value, json};

type Fields = Map<String, Value>;

fn wire() -> WireFile {
    vectors::load_wire().unwrap_or_else(|e| panic!("vectors/wire.json: {e}"))
}

/// Decodes, turning a panic into an error message: a panic on any input is a failure of its
/// case, not of the whole run.
fn decode(bytes: &[u8]) -> Result<Result<Fields, String>, String> {
    panic::catch_unwind(AssertUnwindSafe(|| fields::decode(bytes)))
        .map(|r| r.map_err(|e| e.class().to_string()))
        .map_err(|_| format!("decoding {} bytes panicked", bytes.len()))
}

/// The keys on which two field objects differ, for a readable failure.
fn diff(want: &Fields, got: &Fields) -> String {
    let keys: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let lines: Vec<String> = keys
        .into_iter()
        .filter(|k| want.get(*k) != got.get(*k))
        .map(|k| {
            let show = |v: Option<&Value>| v.map_or("(absent)".to_string(), Value::to_string);
            format!("`{k}`: want {}, got {}", show(want.get(k)), show(got.get(k)))
        })
        .collect();
    lines.join("; ")
}

/// The fields a strict prefix of `bytes` (at least a header long) must decode to: the same
/// ones, with a DATA payload cut to what the prefix holds.
fn prefix_fields(want: &Fields, bytes: &[u8], n: usize) -> Fields {
    let mut f = want.clone();
    if f["type"] == "DATA" {
        f.insert("payload_len".into(), json!(n - 56));
        f.insert("payload".into(), json!(hex::encode(&bytes[56..n])));
    }
    f
}

fn check(case: &WireCase) -> Result<(), String> {
    let bytes = &case.bytes;
    match &case.expected {
        Expected::Invalid { error } => match decode(bytes)? {
            Err(class) if class == *error => Ok(()),
            Err(class) => Err(format!("error class {class}, want {error}")),
            Ok(f) => Err(format!("decoded to {}, want error {error}", Value::Object(f))),
        },
        Expected::Valid { parsed_len, fields: want } => {
            let got = decode(bytes)?.map_err(|class| format!("rejected as {class}"))?;
            if got != *want {
                return Err(format!("fields differ: {}", diff(want, &got)));
            }
            let encoded = fields::encode(want).map_err(|e| format!("encoding fields: {e}"))?;
            if bytes.get(..*parsed_len) != Some(&encoded[..]) {
                return Err(format!(
                    "encoding fields gives {}, want the first {parsed_len} bytes",
                    hex::encode(&encoded)
                ));
            }
            let name = want["type"].as_str().unwrap_or_default();
            let min = vectors::min_len(name).ok_or_else(|| format!("unknown type {name}"))?;
            for n in 0..bytes.len() {
                let prefix = decode(&bytes[..n])?;
                if n < min {
                    if prefix != Err("truncated".to_string()) {
                        return Err(format!("{n}-byte prefix: {prefix:?}, want truncated"));
                    }
                } else if prefix.as_ref() != Ok(&prefix_fields(want, bytes, n)) {
                    return Err(format!("{n}-byte prefix decodes to {prefix:?}"));
                }
            }
            Ok(())
        }
    }
}

#[test]
fn rust_codec_passes_every_wire_vector() {
    let file = wire();
    let expected = ExpectedFailures::parse(vectors::RUST_EXPECTED_FAILURES)
        .unwrap_or_else(|e| panic!("expected-failures/rust.txt: {e}"));
    let outcomes: Vec<(&str, Result<(), String>)> =
        file.cases().map(|c| (c.id.as_str(), check(c))).collect();
    let total = outcomes.len();
    match expected.judge("wire", outcomes) {
        Ok(n) => println!("wire vectors: {} passed, {n} failed as expected", total - n),
        Err(problems) => {
            panic!("{} wire vector problems:\n{}", problems.len(), problems.join("\n"))
        }
    }
}

#[test]
fn wire_vectors_cover_the_required_ground() {
    let file = wire();
    let cases: Vec<&WireCase> = file.cases().collect();

    let mut ids = BTreeSet::new();
    for c in &cases {
        assert!(ids.insert(c.id.as_str()), "case id {} is used twice", c.id);
    }
    let mut names = BTreeSet::new();
    for g in &file.groups {
        assert!(names.insert(g.name.as_str()), "group name {} is used twice", g.name);
    }

    let invalid: Vec<(&WireCase, &str)> = cases
        .iter()
        .filter_map(|c| match &c.expected {
            Expected::Invalid { error } => Some((*c, error.as_str())),
            Expected::Valid { .. } => None,
        })
        .collect();
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    assert!(invalid.len() >= 20, "only {} invalid cases", invalid.len());

    for class in ERROR_CLASSES {
        assert!(invalid.iter().any(|(_, e)| *e == class), "no invalid case expects {class}");
    }
    for (_, e) in &invalid {
        assert!(ERROR_CLASSES.contains(e), "unknown error class {e}");
    }

    for (name, code, min) in PACKET_TYPES {
        assert!(cases.iter().any(|c| c.packet_type() == Some(name)), "no valid {name} case");
        assert!(
            invalid.iter().any(|(c, e)| *e == "truncated"
                && c.bytes.len() == min - 1
                && c.bytes.get(11) == Some(&code)),
            "no {name} truncated to {} bytes",
            min - 1
        );
    }

    let hand_built: Vec<&Fields> =
        cases.iter().filter(|c| c.has_tag("hand-built")).filter_map(|c| c.fields()).collect();
    assert!(hand_built.iter().any(|f| f["type"] == "DATA"), "no hand-built DATA");
    assert!(hand_built.iter().any(|f| f["type"] == "GRANT"), "no hand-built GRANT");
    assert!(
        hand_built.iter().any(|f| f["type"] == "ACK" && f["num_acks"] == 5),
        "no hand-built ACK with 5 acks"
    );
}

/// Every packet of the capture from the Linux module is a valid case tagged `golden`, and its
/// fields agree with every value the capture records.
#[test]
fn golden_kernel_packets_are_vectors() {
    let golden: Value = serde_json::from_str(include_str!("../golden/kernel-packets.json"))
        .expect("golden/kernel-packets.json");
    let packets = golden["packets"].as_array().expect("packets");
    assert_eq!(packets.len(), 5);
    let file = wire();
    for p in packets {
        let hex = p["hex"].as_str().expect("hex");
        let case = file
            .cases()
            .find(|c| hex::encode(&c.bytes) == hex)
            .unwrap_or_else(|| panic!("no vector holds the golden packet {hex}"));
        assert!(case.has_tag("golden"), "{} is not tagged golden", case.id);
        let Expected::Valid { fields, parsed_len } = &case.expected else {
            panic!("{} is not valid", case.id)
        };
        assert_eq!(*parsed_len, case.bytes.len(), "{}", case.id);
        for (k, v) in p["decoded"].as_object().expect("decoded") {
            assert_eq!(fields.get(k), Some(v), "{}: field `{k}`", case.id);
        }
    }
}
