//! `homa decode --pcap` on captures the tests write with pcap-file, run as the real binary.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::homa;
use pcap_file::DataLink;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use serde_json::{Value, json};

/// Kernel CUTOFFS, BUSY and DATA packets (shared/golden/kernel-packets.json).
const CUTOFFS: &str = "13889c400000000000000015500600008c6cb97d00000000000003e900000000000000000000000000000000000f424000003a9800000af0000000c80001";
const BUSY: &str = "138880000000000000000014500600008c4ab97d0000000000000003";
/// A GRANT built by hand: sport 5000, dport 4000, sender_id 101, offset 10240, priority 5.
const GRANT: &str = "13880fa00000000000000011500600000000b97d00000000000000650000280005";
/// A DATA packet built by hand: message_length 5, offset 0 in `sequence`, payload "hello".
const DATA: &str = "13880fa00000000000000010e00600000000b97d0000000000000065000000050000000500000000000000000000000000000000ffffffff68656c6c6f";

const PROTO_HOMA: u8 = 146;
const PROTO_UDP: u8 = 17;

fn bytes(hex: &str) -> Vec<u8> {
    hex::decode(hex).expect("test hex")
}

fn ipv4(protocol: u8, payload: &[u8]) -> Vec<u8> {
    let total = u16::try_from(20 + payload.len()).expect("small packet");
    let mut p = vec![0x45, 0xe0]; // TOS: Homa priority 7
    p.extend(total.to_be_bytes());
    p.extend([0, 0, 0x40, 0, 64, protocol, 0, 0]);
    p.extend([198, 18, 0, 1, 198, 18, 0, 2]);
    p.extend(payload);
    p
}

/// IPv6 from fd00::1 to fd00::2, with a hop-by-hop options header before `payload`.
fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    let hop_by_hop = [next, 0, 1, 4, 0, 0, 0, 0]; // 8 bytes: a PadN option
    let len = u16::try_from(hop_by_hop.len() + payload.len()).expect("small packet");
    let mut p = vec![0x60, 0, 0, 0];
    p.extend(len.to_be_bytes());
    p.extend([0, 64]); // next header: hop-by-hop; hop limit
    p.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    p.extend(hop_by_hop);
    p.extend(payload);
    p
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(8 + payload.len()).expect("small datagram");
    let mut d = Vec::new();
    d.extend(sport.to_be_bytes());
    d.extend(dport.to_be_bytes());
    d.extend(len.to_be_bytes());
    d.extend([0, 0]);
    d.extend(payload);
    d
}

/// An Ethernet frame, padded to the 60-byte minimum as a NIC would.
fn ethernet(ether_type: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    f.extend(ether_type.to_be_bytes());
    f.extend(payload);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let file = File::create(path).expect("create capture");
    let mut writer = PcapWriter::new(file).expect("pcap header");
    for (i, frame) in frames.iter().enumerate() {
        let time = Duration::new(1_700_000_000 + i as u64, 250_000_000);
        let len = u32::try_from(frame.len()).expect("small frame");
        writer.write_packet(&PcapPacket::new(time, len, frame)).expect("write frame");
    }
}

/// The frames of the main test capture, in order:
/// 1. IPv4, protocol 146: kernel CUTOFFS
/// 2. IPv6 with a hop-by-hop header, protocol 146: kernel BUSY
/// 3. IPv4 / UDP 4000 -> 5000: the hand-built GRANT
/// 4. IPv4, protocol 146: 20 bytes of a Homa header (truncated), in a padded 60-byte frame
/// 5. IPv4, protocol 146: DATA, followed by 4 bytes of Ethernet trailer outside the IP packet
/// 6. IPv4 / UDP 53 -> 33000: not Homa
/// 7. ARP
/// 8. IPv4 / UDP 4000 -> 5000: 10 bytes, not a Homa packet
fn main_capture(dir: &Path) -> PathBuf {
    let mut data_frame = ethernet(0x0800, &ipv4(PROTO_HOMA, &bytes(DATA)));
    data_frame.extend([0xde, 0xad, 0xbe, 0xef]);
    let frames = vec![
        ethernet(0x0800, &ipv4(PROTO_HOMA, &bytes(CUTOFFS))),
        ethernet(0x86dd, &ipv6(PROTO_HOMA, &bytes(BUSY))),
        ethernet(0x0800, &ipv4(PROTO_UDP, &udp(4000, 5000, &bytes(GRANT)))),
        ethernet(0x0800, &ipv4(PROTO_HOMA, &bytes(&BUSY[..40]))),
        data_frame,
        ethernet(0x0800, &ipv4(PROTO_UDP, &udp(53, 33000, b"not a homa packet at all, no"))),
        ethernet(0x0806, &[0; 28]),
        ethernet(0x0800, &ipv4(PROTO_UDP, &udp(4000, 5000, &[7; 10]))),
    ];
    let path = dir.join("homa.pcap");
    write_pcap(&path, &frames);
    path
}

/// The JSON object of the given frame.
fn frame(lines: &[Value], n: u64) -> &Value {
    lines.iter().find(|l| l["frame"] == n).unwrap_or_else(|| panic!("frame {n} in {lines:?}"))
}

#[test]
fn capture_with_every_kind_of_frame() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = main_capture(dir.path());
    let run = homa(&["decode", "--pcap", path.to_str().expect("utf-8 path")], "");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stderr.trim_end(), "8 frames: decoded 4, errors 1, skipped 3");
    let lines = run.json_lines();
    let numbers: Vec<&Value> = lines.iter().map(|l| &l["frame"]).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5]);

    let cutoffs = frame(&lines, 1);
    assert_eq!(cutoffs["src"], "198.18.0.1");
    assert_eq!(cutoffs["dst"], "198.18.0.2");
    assert_eq!(cutoffs["transport"], "ip");
    assert_eq!(cutoffs["type"], "CUTOFFS");
    assert_eq!(cutoffs["unsched_cutoffs"], json!([0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200]));
    let time = cutoffs["time"].as_f64().expect("time is a number");
    assert!((time - 1_700_000_000.25).abs() < 1e-6, "{time}");
    // The frame's fields come first, then the packet's, in order.
    let keys: Vec<&str> = cutoffs.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys[..7], ["frame", "time", "src", "dst", "transport", "type", "sport"]);

    let busy = frame(&lines, 2);
    assert_eq!((&busy["src"], &busy["dst"]), (&json!("fd00::1"), &json!("fd00::2")));
    assert_eq!((&busy["transport"], &busy["type"]), (&json!("ip"), &json!("BUSY")));
    assert_eq!(busy["sender_id"], 3);

    let grant = frame(&lines, 3);
    assert_eq!(grant["transport"], "udp");
    assert_eq!(
        (&grant["src"], &grant["dst"]),
        (&json!("198.18.0.1:4000"), &json!("198.18.0.2:5000"))
    );
    assert_eq!((&grant["offset"], &grant["priority"]), (&json!(10240), &json!(5)));

    // Only the 20 bytes in the IP packet count, not the frame's padding.
    let short = frame(&lines, 4);
    assert_eq!(short["error_class"], "truncated");
    let message = short["error"].as_str().expect("error message");
    assert!(message.contains("20 bytes"), "{message}");
    assert_eq!(short.get("type"), None);

    // The trailer after the IP packet is not payload.
    let data = frame(&lines, 5);
    assert_eq!((&data["type"], &data["payload_len"]), (&json!("DATA"), &json!(5)));
    assert_eq!(data["payload"], "68656c6c6f");
}

#[test]
fn udp_port_restricts_and_reports() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = main_capture(dir.path());
    let path = path.to_str().expect("utf-8 path");
    let run = homa(&["decode", "--pcap", path, "--udp-port", "4000"], "");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stderr.trim_end(), "8 frames: decoded 4, errors 2, skipped 2");
    let lines = run.json_lines();
    let bad = frame(&lines, 8);
    assert_eq!(bad["transport"], "udp");
    assert_eq!(bad["error_class"], "truncated");

    // A port nothing uses: the UDP GRANT is skipped too.
    let run = homa(&["decode", "--pcap", path, "--udp-port", "9"], "");
    assert_eq!(run.stderr.trim_end(), "8 frames: decoded 3, errors 1, skipped 4");
}

#[test]
fn decoded_capture_packets_encode_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = main_capture(dir.path());
    let run = homa(&["decode", "--pcap", path.to_str().expect("utf-8 path")], "");
    let packets: Vec<Value> =
        run.json_lines().into_iter().filter(|l| l.get("error").is_none()).collect();
    let stdin: String = packets.iter().map(|p| format!("{p}\n")).collect();
    let encoded = homa(&["encode"], &stdin);
    assert_eq!(encoded.code, 0, "{encoded:?}");
    assert_eq!(encoded.stdout.lines().collect::<Vec<_>>(), [CUTOFFS, BUSY, GRANT, DATA]);
}

#[test]
fn pcapng_raw_ip_with_nanosecond_timestamps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("homa.pcapng");
    let file = File::create(&path).expect("create capture");
    let mut writer = PcapNgWriter::new(file).expect("section header");
    writer
        .write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::RAW,
            snaplen: 0,
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        })
        .expect("interface");
    for (i, packet) in
        [ipv4(PROTO_HOMA, &bytes(BUSY)), ipv6(PROTO_HOMA, &bytes(GRANT))].iter().enumerate()
    {
        writer
            .write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                // pcap-file writes the raw count; with if_tsresol 9 it means nanoseconds.
                timestamp: Duration::from_nanos(5_000_000_001 + i as u64),
                original_len: u32::try_from(packet.len()).expect("small"),
                data: packet.into(),
                options: vec![],
            })
            .expect("packet");
    }
    drop(writer);
    let run = homa(&["decode", "--pcap", path.to_str().expect("utf-8 path")], "");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stderr.trim_end(), "2 frames: decoded 2, errors 0, skipped 0");
    let lines = run.json_lines();
    assert_eq!((&lines[0]["type"], &lines[1]["type"]), (&json!("BUSY"), &json!("GRANT")));
    assert_eq!(lines[1]["src"], "fd00::1");
    let time = lines[0]["time"].as_f64().expect("time");
    assert!((time - 5.000_000_001).abs() < 1e-9, "{time}");
}

#[test]
fn capture_piped_on_stdin() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = main_capture(dir.path());
    let capture = std::fs::read(&path).expect("read capture");
    let run = homa(&["decode", "--pcap", "-"], &capture);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json_lines().len(), 5);
}

#[test]
fn not_a_capture_and_missing_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "just some text\n").expect("write");
    let run = homa(&["decode", "--pcap", text.to_str().expect("utf-8 path")], "");
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("is not a pcap or pcapng capture"), "{run:?}");

    let missing = dir.path().join("missing.pcap");
    let run = homa(&["decode", "--pcap", missing.to_str().expect("utf-8 path")], "");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("error: opening "), "{run:?}");
}

#[test]
fn capture_cut_mid_record_keeps_what_was_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = main_capture(dir.path());
    let mut capture = std::fs::read(&path).expect("read capture");
    capture.truncate(capture.len() - 5);
    std::fs::write(&path, &capture).expect("write");
    let run = homa(&["decode", "--pcap", path.to_str().expect("utf-8 path")], "");
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("ends in the middle of a record (after frame 7)"), "{run:?}");
    assert_eq!(run.json_lines().len(), 5);
}
