//! The seed corpora of the structured targets, written as values and encoded with
//! [`crate::encode`]. Tests only.
//!
//! - `endpoint_packets`: every conformance scenario (`conformance/vectors/scenarios.json`)
//!   turned into ops (its packets as raw bytes from the same peers, its API calls, its clock),
//!   every wire vector (`conformance/vectors/wire.json`) as raw packets to a server and to a
//!   client, and a few hand-written runs of structured packets that reach the limits.
//! - `endpoint_pair` and `grant_model`: hand-written runs (clean, lossy, corrupt, aborted;
//!   short and long messages, overcommitment, a binding `max_incoming`).
//!
//! Hand-made reproductions of findings live here too, written to `regressions/<target>/`.
//!
//! `cargo test --manifest-path fuzz/Cargo.toml --lib -- --ignored write_seeds` writes them to
//! `corpus/<target>/seed-<name>` and `regressions/<target>/<name>`; `seed_files_are_current`
//! fails when a file is missing or no longer matches (the input types or the vectors changed:
//! write them again).

use std::fs;
use std::net::SocketAddr;
use std::path::PathBuf;

use arbitrary::{Arbitrary, Unstructured};
use conformance::scenarios::{self, Action, Message};
use homa_core::wire;
use serde_json::{Map, Value};

use crate::common::{MsgLen, PEERS, Step};
use crate::encode::input;
use crate::endpoint_packets::{AckSpec, BodySpec, Id, Offset, PacketSpec, Port};
use crate::{endpoint_packets as ep, endpoint_pair as pair, grant_model as gm};

/// One seed, as values.
#[derive(Debug)]
enum Seed {
    Packets(ep::Setup, Vec<ep::Op>),
    Pair(pair::Setup, Vec<pair::Op>),
    Grant(gm::Setup, Vec<gm::Op>),
}

impl Seed {
    fn target(&self) -> &'static str {
        match self {
            Seed::Packets(..) => "endpoint_packets",
            Seed::Pair(..) => "endpoint_pair",
            Seed::Grant(..) => "grant_model",
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            Seed::Packets(s, ops) => input(s, ops),
            Seed::Pair(s, ops) => input(s, ops),
            Seed::Grant(s, ops) => input(s, ops),
        }
    }

    /// Decodes the bytes as the target does and compares with the values.
    fn round_trips(&self) -> bool {
        let bytes = self.bytes();
        match self {
            Seed::Packets(s, ops) => decode(&bytes) == (*s, ops.clone()),
            Seed::Pair(s, ops) => decode(&bytes) == (*s, ops.clone()),
            Seed::Grant(s, ops) => decode(&bytes) == (*s, ops.clone()),
        }
    }
}

fn decode<'a, S: Arbitrary<'a>, O: Arbitrary<'a>>(data: &'a [u8]) -> (S, Vec<O>) {
    let mut u = Unstructured::new(data);
    let setup = S::arbitrary(&mut u).expect("setup");
    let mut ops = Vec::new();
    while !u.is_empty() {
        ops.push(O::arbitrary(&mut u).expect("op"));
    }
    (setup, ops)
}

fn all() -> Vec<(String, Seed)> {
    let mut seeds = Vec::new();
    seeds.extend(scenario_seeds());
    seeds.extend(wire_seeds());
    seeds.extend(packet_seeds());
    seeds.extend(pair_seeds());
    seeds.extend(grant_seeds());
    seeds
}

/// Hand-made reproductions of findings, as values: `regressions/<target>/<name>`.
fn regressions() -> Vec<(String, Seed)> {
    use gm::Op::*;
    let start = Start {
        response: false,
        length: gm::Length::Short(30_000),
        unsched: 625,
        chunk: gm::Chunk::Full,
    };
    let empty_first = ep::Op::Packet {
        from: 1,
        packet: PacketSpec { flip: None, ..data(Id::Theirs(0), 62_530, 0, 0) },
    };
    vec![
        (
            // Found by grant_model's seeds: once a message was granted to its end, each
            // further DATA drew a GRANT repeating that offset (homa-core: grant scheduler).
            "redundant-grant-after-full-grant".into(),
            Seed::Grant(grant_setup(1, 625, None), vec![start, Burst { msg: 0, packets: 63 }]),
        ),
        (
            // Found by endpoint_packets in its first minute: a request's first DATA, empty,
            // created a server RPC and was dropped; nothing watched the RPC, which held its
            // 62,530 bytes forever (homa-core: handle_data).
            "empty-first-data-pins-rpc".into(),
            Seed::Packets(DEFAULTS, vec![empty_first]),
        ),
        (
            // Found by endpoint_packets: an ACK naming one of our client RPCs, from any
            // address, freed it with no event (homa-core: dispatch).
            "ack-ends-client-rpc".into(),
            Seed::Packets(DEFAULTS, {
                use ep::Op::*;
                let acks = [AckSpec { id: Id::Ours(0), port: Port::Server }; 5];
                let body = BodySpec::Ack { count: 0, acks };
                vec![
                    Request { to: 0, dport: Port::Server, len: MsgLen::Bytes(99), cookie: 1 },
                    Packet {
                        from: 2,
                        packet: control(Id::Ours(0), Port::Server, Port::Ephemeral, body),
                    },
                    Abort { pick: 0 },
                ]
            }),
        ),
        (
            // Found by endpoint_pair: a request's first DATA with a damaged source port; the
            // server's RESENDs went nowhere, the client's RESENDs (answered BUSY) kept the
            // receiving server alive, and neither side ever timed out (homa-core:
            // handle_resend).
            "resend-busy-livelock".into(),
            Seed::Pair(pair::Setup { timers: 2, ..pair_setup(false) }, {
                use pair::Op::*;
                let flip = pair::Corruption::Flip { at: 0, xor: 171 };
                vec![
                    Call { len: MsgLen::Bytes(199_999), cookie: 1 },
                    Corrupt { dir: pair::Dir::ToServer, pick: 0, how: flip },
                ]
            }),
        ),
        (
            // Found by endpoint_pair: a request's DATA with a damaged message length; the
            // server asked for bytes past the message's end, the client answered BUSY, and
            // the two kept each other alive for ever (homa-core: handle_resend).
            "busy-for-bytes-past-the-end".into(),
            Seed::Pair(pair::Setup { max_overcommit: 1, timers: 1, ..pair_setup(false) }, {
                use pair::Op::*;
                let flip = pair::Corruption::Flip { at: 30, xor: 5 };
                vec![
                    Call { len: MsgLen::Bytes(2), cookie: 1 },
                    Corrupt { dir: pair::Dir::ToServer, pick: 0, how: flip },
                ]
            }),
        ),
        (
            // Found by endpoint_packets: a sender sent past its grant (one 16,000-byte packet),
            // the next GRANT counted all its new bytes as outstanding, and that phantom kept
            // max_incoming full and the message without a timer for good (homa-core:
            // grant scheduler).
            "data-past-grant-phantom-incoming".into(),
            Seed::Packets(
                ep::Setup {
                    max_incoming: 1,
                    max_overcommit: 1,
                    grant_fifo_fraction: 1,
                    ..DEFAULTS
                },
                vec![
                    ep::Op::Raw { from: 0, bytes: raw_data(100, 20_000, 2_000, 0, 1_000) },
                    ep::Op::Raw { from: 1, bytes: raw_data(200, 50_000, 2_000, 0, 1_000) },
                    ep::Op::Raw { from: 0, bytes: raw_data(100, 20_000, 2_000, 1_000, 16_085) },
                ],
            ),
        ),
        (
            // Found by endpoint_pair in its first minute: a RESEND wake-up armed another for
            // its own tick, so poll_timeout said "now" right after handle_timeout
            // (homa-core: handle_timeout).
            "timer-armed-in-the-past".into(),
            Seed::Pair(pair::Setup { timers: 2, ..pair_setup(true) }, {
                use pair::Op::*;
                let lost = Drop { dir: pair::Dir::ToServer, pick: 0 };
                let mut ops = vec![
                    Call { len: MsgLen::Bytes(2999), cookie: 1 },
                    lost.clone(),
                    lost.clone(),
                    lost,
                ];
                ops.extend(std::iter::repeat_n(Deadline, 6));
                ops
            }),
        ),
    ]
}

/// DATA of a request from client id `id` to port 99: `len` bytes at `offset`, of any size.
fn raw_data(id: u64, length: u32, incoming: u32, offset: u32, len: usize) -> Vec<u8> {
    let mut h = wire::header::Repr::new(wire::PacketType::Data, 40_000, 99, id);
    h.sequence = offset;
    let repr = wire::data::Repr {
        message_length: length,
        incoming,
        ack: wire::Ack::NONE,
        cutoff_version: 1,
        retransmit: 0,
        pad: [0; 3],
        seg_offset: offset,
    };
    let payload = vec![7; len];
    let p = wire::Repr { header: h, body: wire::Body::Data { repr, payload: &payload } };
    let mut bytes = vec![0; p.buffer_len()];
    p.emit(&mut bytes).expect("exactly buffer_len");
    bytes
}

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every seed and hand-made regression, with its file.
fn files() -> Vec<(PathBuf, Seed)> {
    let seeds = all().into_iter().map(|(name, seed)| {
        (fuzz_dir().join("corpus").join(seed.target()).join(format!("seed-{name}")), seed)
    });
    let regressions = regressions()
        .into_iter()
        .map(|(name, seed)| (fuzz_dir().join("regressions").join(seed.target()).join(name), seed));
    seeds.chain(regressions).collect()
}

#[test]
fn seeds_round_trip() {
    for (file, seed) in files() {
        assert!(seed.round_trips(), "{}: encode and the derived decoding disagree", file.display());
    }
}

#[test]
fn seed_files_are_current() {
    let mut stale = Vec::new();
    for (file, seed) in files() {
        if fs::read(&file).ok().as_deref() != Some(&seed.bytes()[..]) {
            stale.push(file.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "seed files missing or stale (run `cargo test --manifest-path fuzz/Cargo.toml --lib \
         -- --ignored write_seeds`):\n  {}",
        stale.join("\n  ")
    );
}

#[test]
#[ignore = "writes corpus/<target>/seed-* and the hand-made regressions; run when they change"]
fn write_seeds() {
    for (file, seed) in files() {
        fs::create_dir_all(file.parent().expect("in a target's folder")).expect("folder");
        fs::write(&file, seed.bytes()).expect("write seed");
    }
}

// ---------------------------------------------------------------- endpoint_packets

const DEFAULTS: ep::Setup = ep::Setup {
    max_peers: 0,
    max_rpcs_per_peer: 0,
    max_rx_bytes: 0,
    max_gaps: 0,
    max_pending_control: 0,
    unsched_bytes: 0,
    window: 0,
    max_incoming: 0,
    max_overcommit: 0,
    num_priorities: 0,
    grant_fifo_fraction: 0,
    timers: 0,
    mtu: 0,
};

fn peer_index(addr: SocketAddr) -> u8 {
    PEERS.iter().position(|p| *p == addr).unwrap_or(0) as u8
}

/// Steps that add up to `nanos`.
fn steps(mut nanos: u64) -> Vec<Step> {
    let mut out = Vec::new();
    while nanos >= 1_000_000 {
        let ms = (nanos / 1_000_000).min(255);
        out.push(Step::Millis(ms as u8));
        nanos -= ms * 1_000_000;
    }
    if nanos >= 1000 {
        out.push(Step::Micros((nanos / 1000) as u16));
        nanos %= 1000;
    }
    if nanos > 0 {
        out.push(Step::Nanos(nanos as u16));
    }
    out
}

fn msg_len(message: &Message) -> MsgLen {
    match message.bytes().map(|b| b.len()) {
        Ok(0) => MsgLen::Zero,
        Ok(n) if n > wire::MAX_MESSAGE_LENGTH as usize => MsgLen::TooLong,
        Ok(n) => MsgLen::Bytes(n as u32 - 1),
        Err(_) => MsgLen::Bytes(0),
    }
}

/// The nearest of the target's choices for a scenario's config overrides.
fn scenario_setup(config: &Map<String, Value>) -> ep::Setup {
    let mut s = DEFAULTS;
    for (key, value) in config {
        let n = value.as_u64().unwrap_or(0);
        match key.as_str() {
            "unsched_bytes" => s.unsched_bytes = 2, // 1424
            "max_incoming" => s.max_incoming = if n < 50_000 { 1 } else { 2 },
            "max_overcommit" => s.max_overcommit = n.min(3) as u8,
            "grant_fifo_fraction" if n == 0 => s.grant_fifo_fraction = 1,
            "timeout_ticks" => s.timers = 2, // resend 2, timeout 10
            _ => {}
        }
    }
    s
}

/// A generated DATA payload in packet fields, replaced by its hex (as the runner does).
fn with_payload(fields: &Map<String, Value>) -> Map<String, Value> {
    let mut out = fields.clone();
    let Some(spec) = fields.get("payload").and_then(Value::as_object) else { return out };
    let num = |k: &str| fields.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
    let (offset, len) = (num("effective_offset"), num("payload_len"));
    let bytes: Vec<u8> = match spec.get("fill").and_then(Value::as_u64) {
        Some(b) => vec![b as u8; len],
        None => (offset..offset + len).map(|k| (k % 251) as u8).collect(),
    };
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    out.insert("payload".into(), Value::String(hex));
    out
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex")).collect()
}

fn scenario_seeds() -> Vec<(String, Seed)> {
    let file = scenarios::load_scenarios().expect("scenario vectors");
    let mut seeds = Vec::new();
    for case in file.cases() {
        let mut ops = Vec::new();
        let mut at = 0;
        for step in &case.steps {
            if step.at > at {
                ops.extend(steps(step.at - at).into_iter().map(ep::Op::Advance));
                at = step.at;
            }
            let op = match &step.action {
                Action::SendRequest { dest, dest_port, message, cookie, .. } => ep::Op::Request {
                    to: peer_index(*dest),
                    dport: if *dest_port == 99 { Port::Server } else { Port::Other(*dest_port) },
                    len: msg_len(message),
                    cookie: *cookie as u8,
                },
                Action::SendResponse { message, .. } => {
                    ep::Op::Respond { pick: 0, len: msg_len(message) }
                }
                Action::Abort { .. } => ep::Op::Abort { pick: 0 },
                Action::HandleUnreachable { peer, port } => {
                    ep::Op::Unreachable { to: peer_index(*peer), port: *port }
                }
                Action::Unbind { port, .. } => ep::Op::Rebind { server: *port == 99 },
                Action::Packet { from, fields, hex, .. } => {
                    let bytes = match (fields, hex) {
                        (Some(f), _) => {
                            conformance::fields::encode(&with_payload(f)).expect("fields")
                        }
                        (None, Some(h)) => unhex(h),
                        (None, None) => continue,
                    };
                    ep::Op::Raw { from: peer_index(*from), bytes }
                }
                Action::Timeout => ep::Op::Timeout,
                _ => continue,
            };
            ops.push(op);
        }
        seeds.push((
            format!("scenario-{}", case.id),
            Seed::Packets(scenario_setup(&case.config), ops),
        ));
    }
    seeds
}

/// The wire vectors as raw packets from one peer: the valid ones, then the invalid ones.
fn wire_seeds() -> Vec<(String, Seed)> {
    let file = conformance::vectors::load_wire().expect("wire vectors");
    let (mut valid, mut invalid) = (Vec::new(), Vec::new());
    for case in file.cases() {
        let op = ep::Op::Raw { from: 0, bytes: case.bytes.clone() };
        match case.expected {
            conformance::vectors::Expected::Valid { .. } => valid.push(op),
            conformance::vectors::Expected::Invalid { .. } => invalid.push(op),
        }
    }
    vec![
        ("wire-valid".into(), Seed::Packets(DEFAULTS, valid)),
        ("wire-invalid".into(), Seed::Packets(DEFAULTS, invalid)),
    ]
}

fn data(id: Id, length: u32, packet: u8, payload: u16) -> PacketSpec {
    PacketSpec {
        sport: Port::Client,
        dport: Port::Server,
        id,
        body: BodySpec::Data {
            length: length - 1,
            offset: Offset::Packet(packet),
            payload,
            incoming: Some(10_000),
            ack: None,
            cutoff_version: 1,
            retransmit: false,
            in_sequence: true,
        },
        flip: None,
    }
}

fn control(id: Id, sport: Port, dport: Port, body: BodySpec) -> PacketSpec {
    PacketSpec { sport, dport, id, body, flip: None }
}

fn packet_seeds() -> Vec<(String, Seed)> {
    use ep::Op::*;
    let from_all = |spec: &dyn Fn(u8) -> PacketSpec| -> Vec<ep::Op> {
        (0..5).map(|p| Packet { from: p, packet: spec(p) }).collect()
    };
    let mut seeds = Vec::new();

    // Requests from five peers, three packets each, out of order, with small limits: peers,
    // RPCs per peer, gaps and reassembly memory all run out.
    let small =
        ep::Setup { max_peers: 2, max_rpcs_per_peer: 1, max_rx_bytes: 1, max_gaps: 2, ..DEFAULTS };
    let mut ops = Vec::new();
    for n in [2u8, 0, 1] {
        ops.extend(from_all(&|p| data(Id::Theirs(p), 990_000, n * 40, 1424)));
    }
    ops.extend([
        Advance(Step::Millis(6)),
        Deadline,
        Deadline,
        Advance(Step::Millis(200)),
        Deadline,
    ]);
    seeds.push(("limits-peers-rpcs-gaps-memory".into(), Seed::Packets(small, ops)));

    // Our own request, then the server's grants, resends, BUSY, RPC_UNKNOWN, and a response
    // whose packets arrive twice and out of order.
    let mut ops = vec![
        Request { to: 0, dport: Port::Server, len: MsgLen::Bytes(99_999), cookie: 7 },
        Packet {
            from: 0,
            packet: control(
                Id::Ours(0),
                Port::Server,
                Port::Ephemeral,
                BodySpec::Grant { offset: Offset::Raw(60_000), priority: 2 },
            ),
        },
        Packet {
            from: 0,
            packet: control(
                Id::Ours(0),
                Port::Server,
                Port::Ephemeral,
                BodySpec::Resend { offset: Offset::Packet(3), length: Some(3000), priority: 7 },
            ),
        },
        Packet {
            from: 0,
            packet: control(Id::Ours(0), Port::Server, Port::Ephemeral, BodySpec::Busy),
        },
        Packet {
            from: 0,
            packet: control(Id::Ours(0), Port::Server, Port::Ephemeral, BodySpec::RpcUnknown),
        },
        Advance(Step::Micros(100)),
    ];
    for n in [1u8, 0, 1, 3, 2] {
        let mut spec = data(Id::Ours(0), 5000, n, 1424);
        (spec.sport, spec.dport) = (Port::Server, Port::Ephemeral);
        ops.push(Packet { from: 0, packet: spec });
    }
    ops.extend([Advance(Step::Millis(10)), Deadline]);
    seeds.push(("client-grants-resends-response".into(), Seed::Packets(DEFAULTS, ops)));

    // A request delivered, answered, then NEED_ACK, ACKs (in DATA and in ACK), CUTOFFS,
    // FREEZE, and a flood of control packets while output is held back.
    let tiny_control = ep::Setup { max_pending_control: 2, ..DEFAULTS };
    let ack = |n| AckSpec { id: Id::Theirs(n), port: Port::Server };
    let mut ops = vec![
        Packet { from: 1, packet: data(Id::Theirs(0), 100, 0, 100) },
        Packet { from: 1, packet: data(Id::Theirs(1), 100, 0, 100) },
        Respond { pick: 0, len: MsgLen::Bytes(2999) },
        Respond { pick: 0, len: MsgLen::Bytes(0) },
        Advance(Step::Millis(4)),
        Packet {
            from: 1,
            packet: control(
                Id::Theirs(0),
                Port::Client,
                Port::Server,
                BodySpec::Ack { count: 2, acks: [ack(0), ack(1), ack(2), ack(3), ack(4)] },
            ),
        },
        Packet {
            from: 1,
            packet: control(
                Id::Raw(0),
                Port::Client,
                Port::Server,
                BodySpec::Cutoffs {
                    cutoffs: [0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200],
                    version: 3,
                },
            ),
        },
        Packet {
            from: 1,
            packet: control(Id::Raw(0), Port::Client, Port::Server, BodySpec::Freeze),
        },
        Hold,
    ];
    for p in 0..5 {
        ops.push(Packet {
            from: p,
            packet: control(
                Id::Theirs(p),
                Port::Client,
                Port::Server,
                BodySpec::Resend { offset: Offset::Raw(0), length: None, priority: 7 },
            ),
        });
        ops.push(Packet {
            from: p,
            packet: control(Id::Theirs(p), Port::Client, Port::Server, BodySpec::NeedAck),
        });
    }
    ops.extend([Release, Rewind(500), Timeout, Advance(Step::Millis(150)), Deadline]);
    seeds.push(("server-acks-control-flood".into(), Seed::Packets(tiny_control, ops)));

    // Clients' API: requests to every peer, an abort, an unreachable peer, an unbound port.
    let ops = vec![
        Request { to: 0, dport: Port::Server, len: MsgLen::Bytes(10), cookie: 1 },
        Request { to: 1, dport: Port::Server, len: MsgLen::Bytes(199_999), cookie: 2 },
        Request { to: 4, dport: Port::Other(7), len: MsgLen::Max, cookie: 3 },
        Request { to: 3, dport: Port::Server, len: MsgLen::Zero, cookie: 4 },
        Request { to: 2, dport: Port::Server, len: MsgLen::TooLong, cookie: 5 },
        Abort { pick: 1 },
        Abort { pick: 250 },
        Unreachable { to: 4, port: None },
        Rebind { server: false },
        Rebind { server: true },
        Advance(Step::Micros(50)),
        Deadline,
    ];
    seeds.push(("client-api".into(), Seed::Packets(DEFAULTS, ops)));

    // One byte changed in each of a few valid packets.
    let mut ops = Vec::new();
    for (i, at) in [0u16, 2, 11, 20, 28, 32, 52, 60].into_iter().enumerate() {
        let mut spec = data(Id::Theirs(i as u8), 3000, 0, 1424);
        spec.flip = Some((at, 0x80));
        ops.push(Packet { from: 0, packet: spec });
    }
    seeds.push(("flipped-bytes".into(), Seed::Packets(DEFAULTS, ops)));
    seeds
}

// ---------------------------------------------------------------- endpoint_pair

fn pair_setup(auto_respond: bool) -> pair::Setup {
    pair::Setup {
        unsched_bytes: 0,
        window: 0,
        max_overcommit: 0,
        timers: 0,
        mtu: 0,
        num_priorities: 0,
        auto_respond,
        seed: 1,
    }
}

fn pair_seeds() -> Vec<(String, Seed)> {
    use pair::Dir::{ToClient, ToServer};
    use pair::Op::*;
    vec![
        (
            "one-small-rpc".into(),
            Seed::Pair(pair_setup(true), vec![Call { len: MsgLen::Bytes(99), cookie: 1 }, Flush]),
        ),
        (
            "two-large-rpcs-manual-response".into(),
            Seed::Pair(
                pair_setup(false),
                vec![
                    Call { len: MsgLen::Bytes(199_999), cookie: 1 },
                    Call { len: MsgLen::Bytes(50_000), cookie: 2 },
                    Pump { rounds: 200, loss: 0, dup: 0, reorder: 0 },
                    Respond { pick: 1, len: MsgLen::Bytes(150_000) },
                    Respond { pick: 0, len: MsgLen::Bytes(10) },
                    Pump { rounds: 200, loss: 0, dup: 0, reorder: 0 },
                ],
            ),
        ),
        (
            "lossy-duplicating-reordering".into(),
            Seed::Pair(
                pair::Setup { timers: 1, ..pair_setup(true) },
                vec![
                    Call { len: MsgLen::Bytes(120_000), cookie: 1 },
                    Call { len: MsgLen::Bytes(3_000), cookie: 2 },
                    Call { len: MsgLen::Bytes(0), cookie: 3 },
                    Pump { rounds: 250, loss: 40, dup: 20, reorder: 40 },
                    Pump { rounds: 250, loss: 40, dup: 20, reorder: 40 },
                    Advance(Step::Millis(3)),
                    Pump { rounds: 250, loss: 10, dup: 10, reorder: 10 },
                ],
            ),
        ),
        (
            "targeted-faults".into(),
            Seed::Pair(
                pair::Setup { unsched_bytes: 1, window: 1, ..pair_setup(true) },
                vec![
                    Call { len: MsgLen::Bytes(30_000), cookie: 9 },
                    Drop { dir: ToServer, pick: 2 },
                    Duplicate { dir: ToServer, pick: 0 },
                    Deliver { dir: ToServer, pick: 3 },
                    Deliver { dir: ToServer, pick: 0 },
                    Corrupt { dir: ToServer, pick: 0, how: pair::Corruption::Truncate(20) },
                    Corrupt { dir: ToServer, pick: 1, how: pair::Corruption::BadType(0x30) },
                    Corrupt {
                        dir: ToServer,
                        pick: 2,
                        how: pair::Corruption::Flip { at: 13, xor: 0xff },
                    },
                    Flush,
                    Drop { dir: ToClient, pick: 0 },
                    Deadline,
                    Flush,
                    Advance(Step::Millis(6)),
                    Flush,
                ],
            ),
        ),
        (
            "abort-discard-timeout".into(),
            Seed::Pair(
                pair::Setup { timers: 2, ..pair_setup(false) },
                vec![
                    Call { len: MsgLen::Bytes(100_000), cookie: 1 },
                    Call { len: MsgLen::Bytes(500), cookie: 2 },
                    Call { len: MsgLen::Bytes(70_000), cookie: 3 },
                    Deliver { dir: ToServer, pick: 0 },
                    Abort { pick: 0 },
                    Flush,
                    Discard { pick: 0 },
                    Respond { pick: 0, len: MsgLen::Bytes(80_000) },
                    Pump { rounds: 100, loss: 0, dup: 0, reorder: 0 },
                    Advance(Step::Millis(5)),
                    Flush,
                ],
            ),
        ),
        (
            "corrupted-payload".into(),
            Seed::Pair(
                pair_setup(true),
                vec![
                    Call { len: MsgLen::Bytes(5_000), cookie: 1 },
                    Corrupt {
                        dir: ToServer,
                        pick: 1,
                        how: pair::Corruption::Flip { at: 900, xor: 1 },
                    },
                    Flush,
                ],
            ),
        ),
        (
            "jumbo-frames-one-priority".into(),
            Seed::Pair(
                pair::Setup { mtu: 1, num_priorities: 1, max_overcommit: 1, ..pair_setup(true) },
                vec![
                    Call { len: MsgLen::Bytes(199_999), cookie: 1 },
                    Call { len: MsgLen::Bytes(199_999), cookie: 2 },
                    Call { len: MsgLen::Bytes(1), cookie: 3 },
                    Pump { rounds: 255, loss: 5, dup: 0, reorder: 100 },
                ],
            ),
        ),
    ]
}

// ---------------------------------------------------------------- grant_model

fn grant_setup(max_overcommit: u8, window: u16, max_incoming: Option<u16>) -> gm::Setup {
    gm::Setup { max_overcommit: max_overcommit - 1, window, max_incoming, num_priorities: 7 }
}

fn grant_seeds() -> Vec<(String, Seed)> {
    use gm::Chunk::{Bytes, Full};
    use gm::Length::{Long, Short};
    use gm::Op::*;
    let start = |response, length, unsched| Start { response, length, unsched, chunk: Full };
    let mut seeds = Vec::new();
    // Three requests, two active: the shortest overtakes, the third waits, then all finish.
    seeds.push((
        "srpt-overcommit-2".into(),
        Seed::Grant(
            grant_setup(2, 625, None),
            vec![
                start(false, Long(300_000), 625),
                start(false, Long(100_000), 625),
                start(false, Short(60_000), 625),
                RoundRobin { packets: 255 },
                RoundRobin { packets: 255 },
                RoundRobin { packets: 255 },
                RoundRobin { packets: 255 },
            ],
        ),
    ));
    // Responses (abortable) and requests under a binding max_incoming, with losses.
    seeds.push((
        "max-incoming-binds-aborts".into(),
        Seed::Grant(
            grant_setup(3, 1250, Some(2500)),
            vec![
                start(true, Long(150_000), 100),
                start(false, Long(80_000), 200),
                start(true, Short(30_000), 300),
                start(false, Long(500_000), 2500),
                Burst { msg: 1, packets: 30 },
                Lose { msg: 1, chunk: Full },
                Lose { msg: 0, chunk: Bytes(100) },
                Burst { msg: 2, packets: 63 },
                Abort { msg: 0 },
                Recover { msg: 1 },
                RoundRobin { packets: 200 },
                Abort { msg: 2 },
                RoundRobin { packets: 255 },
            ],
        ),
    ));
    // Eight messages, one slot: every completion promotes the next best.
    let mut ops: Vec<gm::Op> =
        (0..8).map(|i| start(i % 2 == 0, Short(5_000 + 3_000 * i), 100)).collect();
    ops.extend([RoundRobin { packets: 255 }, RoundRobin { packets: 255 }]);
    seeds.push(("one-slot-eight-messages".into(), Seed::Grant(grant_setup(1, 312, None), ops)));
    // Small packets, messages needing no grants, and a late short one preempting.
    seeds.push((
        "small-packets-unscheduled-only".into(),
        Seed::Grant(
            grant_setup(8, 3125, Some(10_000)),
            vec![
                start(false, Short(3_000), 625),
                start(true, Long(200_000), 1),
                Send { msg: 1, chunk: Bytes(7) },
                Send { msg: 1, chunk: Bytes(700) },
                Burst { msg: 1, packets: 40 },
                start(false, Short(20_000), 1),
                Burst { msg: 2, packets: 20 },
                RoundRobin { packets: 255 },
            ],
        ),
    ));
    seeds
}
