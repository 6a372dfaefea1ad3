//! `homa decode` and `homa encode` on hex and JSON, run as the real binary.

mod common;

use common::homa;
use serde_json::{Value, json};

/// The five packets captured from the Linux module (a copy of shared/golden/kernel-packets.json).
const GOLDEN: &str = include_str!("data/kernel-packets.json");

fn golden() -> Vec<(String, Value)> {
    let file: Value = serde_json::from_str(GOLDEN).expect("golden file is JSON");
    file["packets"]
        .as_array()
        .expect("golden packets")
        .iter()
        .map(|p| (p["hex"].as_str().expect("hex").to_string(), p["decoded"].clone()))
        .collect()
}

/// Decodes one hex packet, expecting success, and returns its JSON object.
fn decode_ok(hex: &str) -> Value {
    let run = homa(&["decode", hex], "");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stderr, "");
    let mut lines = run.json_lines();
    assert_eq!(lines.len(), 1, "{run:?}");
    lines.remove(0)
}

/// Decodes one hex packet, expecting exit status 2, and returns its stderr.
fn decode_err(hex: &str) -> String {
    let run = homa(&["decode", hex], "");
    assert_eq!(run.code, 2, "{run:?}");
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr.lines().count(), 1, "one line: {:?}", run.stderr);
    run.stderr
}

#[test]
fn golden_kernel_packets_decode_to_their_fields() {
    for (hex, expected) in golden() {
        let got = decode_ok(&hex);
        let got = got.as_object().expect("an object");
        let expected = expected.as_object().expect("an object");
        for (key, value) in expected {
            assert_eq!(got.get(key), Some(value), "{key} of {hex}");
        }
        // Beyond the golden fields, only the DATA payload itself.
        for key in got.keys() {
            assert!(expected.contains_key(key) || key == "payload", "unexpected {key} in {hex}");
        }
    }
}

#[test]
fn golden_kernel_data_packet_in_detail() {
    let (hex, _) = &golden()[1];
    let got = decode_ok(hex);
    assert_eq!(got["type"], "DATA");
    assert_eq!(got["seg_offset"], 0xFFFF_FFFFu32);
    assert_eq!(got["effective_offset"], 0);
    assert_eq!(got["payload_len"], 100);
    // The payload is the last 100 bytes, in hex.
    assert_eq!(got["payload"], hex[hex.len() - 200..]);
}

#[test]
fn hand_built_data_packet() {
    // Built field by field from spec §1.2 and §1.4 (DATA), not with our encoder.
    let hex = [
        "0fa0",             // sport 4000
        "1388",             // dport 5000
        "00000590",         // sequence 1424
        "000000",           // ack[3], unused
        "10",               // type DATA
        "e0",               // doff: 14 words
        "06",               // flags
        "0000",             // window
        "1234",             // checksum (opaque)
        "b97d",             // urgent
        "0000000000000064", // sender_id 100
        "00000bb8",         // message_length 3000
        "000005a0",         // incoming 1440
        "000000000000000a", // ack.client_id 10
        "0fa1",             // ack.server_port 4001
        "0002",             // cutoff_version 2
        "01",               // retransmit
        "000000",           // pad
        "00000590",         // seg.offset 1424
        "68656c6c6f",       // payload "hello"
    ]
    .concat();
    assert_eq!(hex.len(), 2 * (56 + 5));
    assert_eq!(
        decode_ok(&hex),
        json!({
            "type": "DATA", "sport": 4000, "dport": 5000, "sequence": 1424, "doff": 224,
            "flags": 6, "window": 0, "checksum": 0x1234, "urgent": 0xB97D, "sender_id": 100,
            "message_length": 3000, "incoming": 1440, "ack_client_id": 10,
            "ack_server_port": 4001, "cutoff_version": 2, "retransmit": 1, "seg_offset": 1424,
            "effective_offset": 1424, "payload_len": 5, "payload": "68656c6c6f"
        })
    );
}

/// A control packet's common header (spec §1.2) with this type code.
fn control_header(type_code: &str) -> String {
    [
        "1388",             // sport 5000
        "0fa0",             // dport 4000
        "00000000",         // sequence
        "000000",           // ack[3]
        type_code,          // type
        "50",               // doff: 5 words
        "06",               // flags
        "0000",             // window
        "0000",             // checksum
        "b97d",             // urgent
        "0000000000000065", // sender_id 101
    ]
    .concat()
}

#[test]
fn hand_built_grant_packet() {
    let hex = control_header("11") + "00002800" /* offset 10240 */ + "05" /* priority */;
    assert_eq!(hex.len(), 2 * 33);
    assert_eq!(
        decode_ok(&hex),
        json!({
            "type": "GRANT", "sport": 5000, "dport": 4000, "sequence": 0, "doff": 80,
            "flags": 6, "window": 0, "checksum": 0, "urgent": 0xB97D, "sender_id": 101,
            "offset": 10240, "priority": 5
        })
    );
}

/// An ACK (spec §1.4) with `num_acks` and five slots: client ids 2, 4, .. 10 on ports
/// 1001 .. 1005.
fn ack_hex(num_acks: &str) -> String {
    let mut hex = control_header("18") + num_acks;
    for i in 1..=5u16 {
        hex += &format!("{:016x}{:04x}", 2 * i, 1000 + i);
    }
    hex
}

#[test]
fn hand_built_ack_with_five_acks() {
    let hex = ack_hex("0005");
    assert_eq!(hex.len(), 2 * 80);
    let got = decode_ok(&hex);
    assert_eq!(got["type"], "ACK");
    assert_eq!(got["num_acks"], 5);
    let acks: Vec<Value> =
        (1..=5).map(|i| json!({"client_id": 2 * i, "server_port": 1000 + i})).collect();
    assert_eq!(got["acks"], Value::Array(acks));
    assert_eq!(got.get("unused_acks"), None);
}

#[test]
fn input_forms_are_forgiving() {
    let (busy, _) = &golden()[4];
    let spaced: String = busy
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).expect("ascii"))
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(decode_ok(&format!("0x{spaced}")), decode_ok(busy));
    assert_eq!(decode_ok(&busy.to_uppercase()), decode_ok(busy));
}

#[test]
fn short_packet_is_a_clear_error() {
    let (busy, _) = &golden()[4];
    let err = decode_err(&busy[..54]);
    assert!(err.starts_with("error: packet 1: "), "{err}");
    assert!(err.contains("truncated") && err.contains("27 bytes"), "{err}");
}

#[test]
fn unknown_type_is_a_clear_error() {
    let err = decode_err(&control_header("20"));
    assert!(err.starts_with("error: packet 1: "), "{err}");
    assert!(err.contains("unknown packet type 0x20"), "{err}");
}

#[test]
fn ack_claiming_six_acks_is_a_clear_error() {
    let err = decode_err(&ack_hex("0006"));
    assert!(err.starts_with("error: packet 1: "), "{err}");
    assert!(err.contains("6 acks"), "{err}");
}

#[test]
fn bad_hex_is_a_clear_error() {
    let err = decode_err("13889g");
    assert!(err.contains("not hex") && err.contains("'g'"), "{err}");
    let err = decode_err("138");
    assert!(err.contains("odd number of digits"), "{err}");
}

#[test]
fn good_packets_are_printed_even_when_others_fail() {
    let (busy, _) = &golden()[4];
    let run = homa(&["decode", "00", busy], "");
    assert_eq!(run.code, 2);
    assert_eq!(run.json_lines().len(), 1);
    assert!(run.stderr.starts_with("error: packet 1: "), "{run:?}");
}

#[test]
fn decode_reads_lines_from_stdin() {
    let (cutoffs, _) = &golden()[0];
    let (busy, _) = &golden()[4];
    let stdin = format!("# two packets\n{cutoffs}\n\n  {busy}  \n");
    let run = homa(&["decode", "-"], &stdin);
    assert_eq!(run.code, 0, "{run:?}");
    let lines = run.json_lines();
    assert_eq!(lines.len(), 2);
    assert_eq!((&lines[0]["type"], &lines[1]["type"]), (&json!("CUTOFFS"), &json!("BUSY")));

    let run = homa(&["decode", "-"], format!("{busy}\nzz\n"));
    assert_eq!(run.code, 2);
    assert!(run.stderr.starts_with("error: line 2: not hex"), "{run:?}");
}

#[test]
fn trailing_bytes_after_a_control_header_are_reported() {
    let (busy, _) = &golden()[4];
    let run = homa(&["decode", &format!("{busy}abcd")], "");
    assert_eq!(run.code, 0);
    assert_eq!(run.json_lines().len(), 1);
    assert!(run.stderr.contains("2 bytes after the 28-byte BUSY header"), "{run:?}");
}

#[test]
fn decode_then_encode_gives_back_every_golden_packet() {
    let all: Vec<String> = golden().into_iter().map(|(hex, _)| hex).collect();
    let args: Vec<&str> = std::iter::once("decode").chain(all.iter().map(String::as_str)).collect();
    let decoded = homa(&args, "");
    assert_eq!(decoded.code, 0, "{decoded:?}");
    let encoded = homa(&["encode"], &decoded.stdout);
    assert_eq!(encoded.code, 0, "{encoded:?}");
    assert_eq!(encoded.stdout.lines().collect::<Vec<_>>(), all);
}

#[test]
fn hand_built_packets_round_trip() {
    for hex in [ack_hex("0005"), control_header("11") + "0000280005"] {
        let decoded = homa(&["decode", &hex], "");
        let encoded = homa(&["encode"], &decoded.stdout);
        assert_eq!(encoded.stdout.trim_end(), hex);
    }
}

#[test]
fn encode_reads_arrays_and_pretty_objects() {
    let stdin = r#"[{"type": "BUSY", "sport": 5000, "dport": 32768, "sender_id": 3},
                    {"type": "NEED_ACK", "sport": 5000, "dport": 40000, "sender_id": 1001}]
        {
          "type": "GRANT", "sport": 5000, "dport": 4000, "sender_id": 101,
          "offset": 10240, "priority": 5, "checksum": 0
        }"#;
    let run = homa(&["encode"], stdin);
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    // With the module's defaults for the fields left out, and checksum 0.
    assert_eq!(
        lines,
        [
            "138880000000000000000014500600000000b97d0000000000000003",
            "13889c400000000000000017500600000000b97d00000000000003e9",
            &(control_header("11") + "0000280005"),
        ]
    );
}

#[test]
fn encode_errors_name_the_field() {
    let stdin = r#"{"type": "GRANT", "sport": 1, "dport": 2, "sender_id": 3, "priority": 1}"#;
    let run = homa(&["encode"], stdin);
    assert_eq!(run.code, 2);
    assert_eq!(run.stdout, "");
    assert!(run.stderr.starts_with("error: packet 1: ") && run.stderr.contains("`offset`"));

    let six: Vec<Value> = (1..=6).map(|i| json!({"client_id": 2 * i, "server_port": 1})).collect();
    let ack = json!({"type": "ACK", "sport": 1, "dport": 2, "sender_id": 3, "acks": six});
    let run = homa(&["encode"], ack.to_string());
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("6 acks"), "{run:?}");

    let run = homa(&["encode"], r#"{"type": "BUSY", "sport": 70000, "dport": 2, "sender_id": 3}"#);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("`sport`"), "{run:?}");

    let run = homa(&["encode"], "[1]");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("expected a JSON object"), "{run:?}");
}

#[test]
fn encode_rejects_broken_json() {
    let run = homa(&["encode"], r#"{"type": "BUSY", "#);
    assert_eq!(run.code, 2);
    assert!(run.stderr.starts_with("error: standard input: not JSON"), "{run:?}");
}

#[test]
fn usage_errors_and_help() {
    assert_eq!(homa(&["decode"], "").code, 2);
    assert_eq!(homa(&["frobnicate"], "").code, 2);
    assert_eq!(homa(&["decode", "--udp-port", "4000", "00"], "").code, 2);
    let help = homa(&["decode", "--help"], "");
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("Examples:") && help.stdout.contains("--pcap"));
    let help = homa(&["--help"], "");
    assert!(help.stdout.contains("decode") && help.stdout.contains("encode"));
}

#[test]
fn missing_input_file_is_an_io_error() {
    let run = homa(&["encode", "/nonexistent/packets.json"], "");
    assert_eq!(run.code, 1);
    assert!(run.stderr.starts_with("error: opening /nonexistent/packets.json"), "{run:?}");
}
