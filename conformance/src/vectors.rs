//! Typed access to the vector files, for every Rust runner (the conformance tests, the fuzz
//! corpus generator, the bindings' test harnesses).
//!
//! The files are compiled in ([`WIRE_JSON`]), so nothing here depends on the working
//! directory. The format is described in `conformance/README.md` and checked by
//! `schema/wire.schema.json`.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// The wire vectors, `vectors/wire.json`.
pub const WIRE_JSON: &str = include_str!("../vectors/wire.json");

/// The JSON Schema of the wire vectors, `schema/wire.schema.json`.
pub const WIRE_SCHEMA_JSON: &str = include_str!("../schema/wire.schema.json");

/// The Rust implementation's expected failures, `expected-failures/rust.txt`.
pub const RUST_EXPECTED_FAILURES: &str = include_str!("../expected-failures/rust.txt");

/// The `schema_version` this code reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Every error class a wire vector may expect, as `wire::Error::class` names them.
pub const ERROR_CLASSES: [&str; 6] = [
    "truncated",
    "unknown_type",
    "too_many_acks",
    "bad_message_length",
    "past_message_end",
    "bad_priority",
];

/// Each packet type's name, code and minimum length (its header's size; spec §1.3).
pub const PACKET_TYPES: [(&str, u8, usize); 9] = [
    ("DATA", 0x10, 56),
    ("GRANT", 0x11, 33),
    ("RESEND", 0x12, 37),
    ("RPC_UNKNOWN", 0x13, 28),
    ("BUSY", 0x14, 28),
    ("CUTOFFS", 0x15, 62),
    ("FREEZE", 0x16, 28),
    ("NEED_ACK", 0x17, 28),
    ("ACK", 0x18, 80),
];

/// The minimum length of the packet type named `name`, if it is one.
pub fn min_len(name: &str) -> Option<usize> {
    PACKET_TYPES.iter().find(|(n, _, _)| *n == name).map(|(_, _, len)| *len)
}

/// One vector file of kind `wire`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireFile {
    pub schema_version: u32,
    pub kind: String,
    pub description: String,
    pub groups: Vec<WireGroup>,
}

/// A named set of related cases.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireGroup {
    pub name: String,
    pub description: String,
    pub cases: Vec<WireCase>,
}

/// One input and what a decoder must make of it.
#[derive(Debug, Clone, Deserialize)]
pub struct WireCase {
    /// Stable, unique in the file; expected-failure lists name cases by it.
    pub id: String,
    pub description: String,
    pub tags: Vec<String>,
    /// The input, decoded from the file's `hex`.
    #[serde(rename = "hex", deserialize_with = "from_hex")]
    pub bytes: Vec<u8>,
    /// `result` with its companion keys.
    #[serde(flatten)]
    pub expected: Expected,
}

/// What decoding a case's bytes must give.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "result", rename_all = "lowercase")]
pub enum Expected {
    /// The bytes decode. `fields` is the whole canonical object ([`crate::fields::decode`]);
    /// `parsed_len` is how many leading bytes it describes, which is what encoding `fields`
    /// gives back (less than the input only for a control packet with trailing bytes).
    Valid { parsed_len: usize, fields: Map<String, Value> },
    /// The bytes are rejected with this error class (one of [`ERROR_CLASSES`]).
    Invalid { error: String },
}

impl WireCase {
    /// The tag list contains `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// For a valid case, the fields it decodes to.
    pub fn fields(&self) -> Option<&Map<String, Value>> {
        match &self.expected {
            Expected::Valid { fields, .. } => Some(fields),
            Expected::Invalid { .. } => None,
        }
    }

    /// For a valid case, the packet type name in its fields.
    pub fn packet_type(&self) -> Option<&str> {
        self.fields()?.get("type").and_then(Value::as_str)
    }
}

impl WireFile {
    /// Parses a wire vector file and checks its kind and schema version.
    pub fn from_json(text: &str) -> Result<WireFile, LoadError> {
        let file: WireFile = serde_json::from_str(text).map_err(LoadError::Json)?;
        if file.kind != "wire" {
            return Err(LoadError::Format(format!("kind is {:?}, expected \"wire\"", file.kind)));
        }
        if file.schema_version != SCHEMA_VERSION {
            return Err(LoadError::Format(format!(
                "schema_version {} is not {SCHEMA_VERSION}",
                file.schema_version
            )));
        }
        Ok(file)
    }

    /// Every case of every group, in file order.
    pub fn cases(&self) -> impl Iterator<Item = &WireCase> {
        self.groups.iter().flat_map(|g| &g.cases)
    }
}

/// Loads the compiled-in `vectors/wire.json`.
pub fn load_wire() -> Result<WireFile, LoadError> {
    WireFile::from_json(WIRE_JSON)
}

/// Why a vector file or an expected-failures list cannot be read.
#[derive(Debug)]
pub enum LoadError {
    Json(serde_json::Error),
    Format(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Json(e) => write!(f, "invalid vector file: {e}"),
            LoadError::Format(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for LoadError {}

fn from_hex<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s = String::deserialize(d)?;
    hex::decode(&s).map_err(serde::de::Error::custom)
}

/// One implementation's list of cases it is known to fail (`expected-failures/<impl>.txt`).
///
/// One entry per line, `<kind>/<case id>`, e.g. `wire/resend-upstream-36-bytes`; `#` starts a
/// comment (the reason belongs there); blank lines are ignored. A runner must fail when a
/// listed case passes (the entry is stale: remove it), when a listed case does not exist, and
/// of course when an unlisted case fails.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpectedFailures {
    entries: BTreeSet<(String, String)>,
}

impl ExpectedFailures {
    /// Parses a list; rejects malformed and duplicate entries.
    pub fn parse(text: &str) -> Result<ExpectedFailures, LoadError> {
        let mut entries = BTreeSet::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let bad = |why: &str| LoadError::Format(format!("line {}: {line:?} {why}", n + 1));
            let (kind, id) = line.split_once('/').ok_or_else(|| bad("is not <kind>/<id>"))?;
            if kind.is_empty() || id.is_empty() || id.contains(char::is_whitespace) {
                return Err(bad("is not <kind>/<id>"));
            }
            if !entries.insert((kind.to_string(), id.to_string())) {
                return Err(bad("is listed twice"));
            }
        }
        Ok(ExpectedFailures { entries })
    }

    /// The case ids listed for `kind`.
    pub fn ids(&self, kind: &str) -> impl Iterator<Item = &str> {
        self.entries.iter().filter(move |(k, _)| k == kind).map(|(_, id)| id.as_str())
    }

    /// Compares a run's outcomes (case id, `Err(reason)` when the case failed) with this list
    /// for `kind`. `Ok` carries how many listed cases failed as expected; `Err` every problem.
    pub fn judge<'a>(
        &self,
        kind: &str,
        outcomes: impl IntoIterator<Item = (&'a str, Result<(), String>)>,
    ) -> Result<usize, Vec<String>> {
        let listed: BTreeSet<&str> = self.ids(kind).collect();
        let mut seen = BTreeSet::new();
        let mut problems = Vec::new();
        let mut expected = 0;
        for (id, outcome) in outcomes {
            seen.insert(id);
            match (listed.contains(id), outcome) {
                (false, Ok(())) => {}
                (true, Err(_)) => expected += 1,
                (false, Err(why)) => problems.push(format!("{kind}/{id}: FAILED: {why}")),
                (true, Ok(())) => problems.push(format!(
                    "{kind}/{id}: passed unexpectedly; remove it from the expected failures"
                )),
            }
        }
        for id in listed.difference(&seen) {
            problems.push(format!("{kind}/{id}: listed as an expected failure but no such case"));
        }
        if problems.is_empty() { Ok(expected) } else { Err(problems) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_file_loads() {
        let file = load_wire().unwrap();
        assert!(file.cases().count() > 0);
        assert_eq!(min_len("ACK"), Some(80));
        assert_eq!(min_len("NOPE"), None);
    }

    #[test]
    fn rejects_other_kinds_and_versions() {
        let doc = |kind: &str, v: u32| {
            format!(
                r#"{{"schema_version": {v}, "kind": "{kind}", "description": "", "groups": []}}"#
            )
        };
        assert!(WireFile::from_json(&doc("wire", 1)).is_ok());
        assert!(matches!(WireFile::from_json(&doc("scenario", 1)), Err(LoadError::Format(_))));
        assert!(matches!(WireFile::from_json(&doc("wire", 2)), Err(LoadError::Format(_))));
    }

    #[test]
    fn case_shapes() {
        let case: WireCase = serde_json::from_str(
            r#"{"id": "x", "description": "", "tags": ["a"], "hex": "00ff",
                "result": "invalid", "error": "truncated"}"#,
        )
        .unwrap();
        assert_eq!(case.bytes, [0, 0xff]);
        assert_eq!(case.expected, Expected::Invalid { error: "truncated".into() });
        assert!(case.has_tag("a"));
        let bad_hex = r#"{"id": "x", "description": "", "tags": [], "hex": "0",
                "result": "invalid", "error": "truncated"}"#;
        assert!(serde_json::from_str::<WireCase>(bad_hex).is_err());
        let big = r#"{"id": "y", "description": "", "tags": [], "hex": "",
                "result": "valid", "parsed_len": 0, "fields": {"sender_id": 18446744073709551615}}"#;
        let case: WireCase = serde_json::from_str(big).unwrap();
        let Expected::Valid { fields, .. } = case.expected else { panic!("not valid") };
        assert_eq!(fields["sender_id"].as_u64(), Some(u64::MAX));
    }

    #[test]
    fn expected_failures_parse() {
        let list = ExpectedFailures::parse("# header\n\nwire/a  # why\nscenario/b\n").unwrap();
        assert_eq!(list.ids("wire").collect::<Vec<_>>(), ["a"]);
        assert_eq!(list.ids("scenario").collect::<Vec<_>>(), ["b"]);
        assert!(ExpectedFailures::parse("wire/a\nwire/a\n").is_err());
        assert!(ExpectedFailures::parse("just-an-id\n").is_err());
        assert!(ExpectedFailures::parse("wire/a b\n").is_err());
        assert!(ExpectedFailures::parse(RUST_EXPECTED_FAILURES).is_ok());
    }

    #[test]
    fn judge_fails_on_unexpected_passes_and_failures() {
        let list = ExpectedFailures::parse("wire/known-bad\n").unwrap();
        let fail = || Err("boom".to_string());
        assert_eq!(list.judge("wire", [("ok", Ok(())), ("known-bad", fail())]), Ok(1));
        let problems = list.judge("wire", [("ok", fail()), ("known-bad", Ok(()))]).unwrap_err();
        assert_eq!(problems.len(), 2);
        assert!(problems[0].contains("FAILED: boom"));
        assert!(problems[1].contains("passed unexpectedly"));
        let problems = list.judge("wire", [("ok", Ok(()))]).unwrap_err();
        assert!(problems[0].contains("no such case"));
        // Entries of another kind are not this runner's business.
        assert_eq!(list.judge("scenario", [("known-bad", fail())]).unwrap_err().len(), 1);
    }
}
