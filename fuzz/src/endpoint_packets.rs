//! `endpoint_packets`: one endpoint, fed what hostile or broken peers might send.
//!
//! The input is a [`Setup`] (small limits, so they are reached) and then [`Op`]s until the
//! bytes run out: raw packets, structured near-valid packets built from fields and emitted
//! with `homa_core::wire` (optionally with one byte changed afterwards), API calls, clock
//! jumps, timer runs, and stretches where output is held back instead of drained.
//!
//! Checked after every op, besides everything [`Node`] checks on each input:
//! - events name only live client RPCs, with their cookies, each at most once (a response
//!   or failure ends the RPC; `abort` succeeds exactly for live ones);
//! - the RPC count stays within live client RPCs + `max_peers * max_rpcs_per_peer`;
//! - requests arrive on the bound server port, with odd ids.
//!
//! At the end the application answers or drops every request it holds and the clock runs
//! with no peer speaking: every RPC must end (client ones with an event) within a bound of
//! timeout periods, leaving no RPC, no message memory and no grant state, and no deadline.

use homa_core::Instant;
use std::net::SocketAddr;

use arbitrary::{Arbitrary, Unstructured};
use homa_core::wire::{self, Ack, Body, data, header};
use homa_core::{ApiError, Config, Event, FailReason, MIN_EPHEMERAL_PORT, ServerRpc};

use crate::common::{MsgLen, Node, Output, PEERS, SERVER_PORT, Step, pattern, pick};

/// Ops run per input at most (longer inputs are cut).
const MAX_OPS: usize = 2000;

/// Limits and tunables; index 0 of each choice is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) struct Setup {
    pub(crate) max_peers: u8,
    pub(crate) max_rpcs_per_peer: u8,
    pub(crate) max_rx_bytes: u8,
    pub(crate) max_gaps: u8,
    pub(crate) max_pending_control: u8,
    pub(crate) unsched_bytes: u8,
    pub(crate) window: u8,
    pub(crate) max_incoming: u8,
    pub(crate) max_overcommit: u8,
    pub(crate) num_priorities: u8,
    pub(crate) grant_fifo_fraction: u8,
    pub(crate) timers: u8,
    pub(crate) mtu: u8,
}

impl Setup {
    pub(crate) fn config(&self) -> Config {
        // (resend_ticks, resend_interval, timeout_ticks, request_ack_ticks, ack_timeout_ticks)
        let timers = pick(
            &[(5, 5, 100, 2, 1000), (1, 1, 2, 0, 3), (2, 3, 10, 1, 20), (1, 2, 5, 3, 4)],
            self.timers,
        );
        Config {
            max_peers: pick(&[10_000, 1, 2, 3, 4], self.max_peers),
            max_rpcs_per_peer: pick(&[10_000, 1, 2, 3], self.max_rpcs_per_peer),
            max_rx_bytes: pick(&[1 << 30, 1_000_000, 1_500_000, 2_000_000], self.max_rx_bytes),
            max_gaps: pick(&[1024, 0, 1, 2, 4], self.max_gaps),
            max_pending_control: pick(&[65_536, 1, 2, 4, 8], self.max_pending_control),
            unsched_bytes: pick(&[40_000, 1, 1424, 10_000, 100_000], self.unsched_bytes),
            window: pick(&[0, 5_000, 50_000], self.window),
            max_incoming: pick(&[400_000, 10_000, 100_000], self.max_incoming),
            max_overcommit: pick(&[8, 1, 2, 3], self.max_overcommit),
            // (The same byte's higher digits: no input field moves and seeds still parse;
            // a seed with a small byte there now runs at the default, 1.)
            max_active_per_peer: pick(&[1, 8, 2], self.max_overcommit / 4),
            num_priorities: pick(&[8, 1, 2, 4], self.num_priorities),
            grant_fifo_fraction: pick(&[50, 0, 500], self.grant_fifo_fraction),
            resend_ticks: timers.0,
            resend_interval: timers.1,
            timeout_ticks: timers.2,
            request_ack_ticks: timers.3,
            ack_timeout_ticks: timers.4,
            mtu: pick(&[1500, 9000, 576], self.mtu),
            wmem_max: 1_000_000,
            ..Config::default()
        }
    }
}

/// One step of the input.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub(crate) enum Op {
    /// A structured packet from `PEERS[from % 5]`.
    Packet { from: u8, packet: PacketSpec },
    /// Any bytes from `PEERS[from % 5]`.
    Raw { from: u8, bytes: Vec<u8> },
    /// `send_request` from the ephemeral port.
    Request { to: u8, dport: Port, len: MsgLen, cookie: u8 },
    /// `send_response` to a request the application holds.
    Respond { pick: u8, len: MsgLen },
    /// `discard` a request the application holds.
    Discard { pick: u8 },
    /// `abort` a live client RPC (`pick` < 200), or an id that is not one.
    Abort { pick: u8 },
    /// `handle_unreachable` for a peer, or one port of it.
    Unreachable { to: u8, port: Option<u16> },
    /// Unbind and bind again the server port (`true`) or the ephemeral port.
    Rebind { server: bool },
    /// The clock moves on, and timers due run.
    Advance(Step),
    /// A `handle_timeout` now (usually spurious).
    Timeout,
    /// The clock jumps to the endpoint's deadline, which then runs.
    Deadline,
    /// Later inputs carry a time this many µs before the latest one (the endpoint must treat
    /// it as the latest).
    Rewind(u16),
    /// Stop draining packets after inputs (they accumulate: control packets hit their
    /// limit); events are still taken.
    Hold,
    /// Drain again.
    Release,
}

/// A packet built from fields, then emitted by `homa_core::wire`.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub(crate) struct PacketSpec {
    pub(crate) sport: Port,
    pub(crate) dport: Port,
    pub(crate) id: Id,
    pub(crate) body: BodySpec,
    /// After emitting: `bytes[at % len] ^= xor`.
    pub(crate) flip: Option<(u16, u8)>,
}

/// A Homa port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Port {
    /// Our server port (99).
    Server,
    /// Our ephemeral port (the current one).
    Ephemeral,
    /// A peer client's port (40000).
    Client,
    Other(u16),
}

/// An RPC id as the packet's sender knows it (`sender_id`, or an ack's `client_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Id {
    /// The server side of our client RPC number `n % 32` (ids 2, 4, ...): `2n + 3`.
    Ours(u8),
    /// A peer's client RPC: `100 + 2 (n % 32)`; we know it as that plus one.
    Theirs(u8),
    Raw(u64),
}

/// An offset into a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Offset {
    /// The start of packet `n` (`n * max_payload`).
    Packet(u8),
    Raw(u32),
}

/// An ack, as carried by DATA and ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) struct AckSpec {
    pub(crate) id: Id,
    pub(crate) port: Port,
}

/// The body of a structured packet.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub(crate) enum BodySpec {
    Data {
        /// `1 + length % 1,000,000`.
        length: u32,
        offset: Offset,
        /// At most `max_payload`; clipped to the message.
        payload: u16,
        /// `incoming`: the whole message when `None`.
        incoming: Option<u32>,
        ack: Option<AckSpec>,
        cutoff_version: u16,
        retransmit: bool,
        /// Put the offset in `sequence` and 0xFFFFFFFF in `seg_offset`, as the module does.
        in_sequence: bool,
    },
    Grant {
        offset: Offset,
        priority: u8,
    },
    /// `length` `None` is "everything sent" (0xFFFFFFFF).
    Resend {
        offset: Offset,
        length: Option<u32>,
        priority: u8,
    },
    RpcUnknown,
    Busy,
    Cutoffs {
        cutoffs: [u32; 8],
        version: u16,
    },
    Freeze,
    NeedAck,
    Ack {
        count: u8,
        acks: [AckSpec; 5],
    },
}

impl Id {
    pub(crate) fn raw(self) -> u64 {
        match self {
            Id::Ours(n) => 2 * u64::from(n % 32) + 3,
            Id::Theirs(n) => 100 + 2 * u64::from(n % 32),
            Id::Raw(x) => x,
        }
    }
}

impl Port {
    fn number(self, ephemeral: u16) -> u16 {
        match self {
            Port::Server => SERVER_PORT,
            Port::Ephemeral => ephemeral,
            Port::Client => 40_000,
            Port::Other(p) => p,
        }
    }
}

impl Offset {
    fn resolve(self, max_payload: u32) -> u32 {
        match self {
            Offset::Packet(n) => u32::from(n) * max_payload,
            Offset::Raw(x) => x,
        }
    }
}

impl PacketSpec {
    /// The packet's bytes: valid for the wire codec unless `flip` breaks them.
    pub(crate) fn bytes(&self, max_payload: u32, ephemeral: u16) -> Vec<u8> {
        let port = |p: Port| p.number(ephemeral);
        let ack = |a: AckSpec| Ack { client_id: a.id.raw(), server_port: port(a.port) };
        let mut payload = Vec::new();
        let mut sequence = 0;
        let body = match self.body {
            BodySpec::Data {
                length,
                offset,
                payload: len,
                incoming,
                ack: a,
                cutoff_version,
                retransmit,
                in_sequence,
            } => {
                let length = 1 + length % wire::MAX_MESSAGE_LENGTH;
                let len = (u32::from(len) % (max_payload + 1)).min(length);
                let offset = offset.resolve(max_payload).min(length - len);
                payload = pattern(len as usize, u64::from(offset));
                sequence = offset;
                let repr = data::Repr {
                    message_length: length,
                    incoming: incoming.unwrap_or(length),
                    ack: a.map_or(Ack::NONE, ack),
                    cutoff_version,
                    retransmit: u8::from(retransmit),
                    pad: [0; 3],
                    seg_offset: if in_sequence { wire::OFFSET_IN_SEQUENCE } else { offset },
                };
                Body::Data { repr, payload: &[] }
            }
            BodySpec::Grant { offset, priority } => Body::Grant(wire::grant::Repr {
                offset: offset.resolve(max_payload),
                priority: priority % 8,
            }),
            BodySpec::Resend { offset, length, priority } => Body::Resend(wire::resend::Repr {
                offset: offset.resolve(max_payload),
                length: length.unwrap_or(wire::resend::ALL_SENT),
                priority: priority % 8,
            }),
            BodySpec::RpcUnknown => Body::RpcUnknown,
            BodySpec::Busy => Body::Busy,
            BodySpec::Cutoffs { cutoffs, version } => Body::Cutoffs(wire::cutoffs::Repr {
                unsched_cutoffs: cutoffs,
                cutoff_version: version,
            }),
            BodySpec::Freeze => Body::Freeze,
            BodySpec::NeedAck => Body::NeedAck,
            BodySpec::Ack { count, acks } => {
                let acks = acks.map(ack);
                Body::Ack(wire::ack::Repr::new(&acks[..usize::from(count) % 6]).expect("<= 5"))
            }
        };
        let body = match body {
            Body::Data { repr, .. } => Body::Data { repr, payload: &payload },
            other => other,
        };
        let mut header = header::Repr::new(
            body.packet_type(),
            port(self.sport),
            port(self.dport),
            self.id.raw(),
        );
        header.sequence = sequence;
        let repr = wire::Repr { header, body };
        let mut bytes = vec![0; repr.buffer_len()];
        repr.emit(&mut bytes).expect("exactly buffer_len");
        debug_assert_eq!(wire::Repr::parse(&bytes), Ok(repr));
        if let Some((at, xor)) = self.flip {
            let at = usize::from(at) % bytes.len();
            bytes[at] ^= xor;
        }
        bytes
    }
}

/// Decodes and runs one input.
pub fn endpoint_packets(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(setup) = Setup::arbitrary(&mut u) else { return };
    let mut run = Run::new(setup.config());
    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        run.op(op);
    }
    run.finish();
}

/// A live client RPC: its id and cookie.
type Call = (u64, u64);

struct Run {
    node: Node,
    /// The time handed to the next input (may be behind the node's clock after a rewind).
    now: u64,
    ephemeral: u16,
    max_payload: u32,
    hold: bool,
    live: Vec<Call>,
    /// Requests delivered to the application and not yet answered or dropped by it.
    requests: Vec<ServerRpc>,
    next_client_id: u64,
}

impl Run {
    fn new(config: Config) -> Run {
        let max_payload = config.max_payload();
        let mut node = Node::new(config);
        node.ep.bind(SERVER_PORT).expect("bind the server port");
        let ephemeral = node.ep.bind_ephemeral().expect("an ephemeral port");
        Run {
            node,
            now: 0,
            ephemeral,
            max_payload,
            hold: false,
            live: Vec::new(),
            requests: Vec::new(),
            next_client_id: 2,
        }
    }

    fn op(&mut self, op: Op) {
        let now = self.now;
        let hold = self.hold;
        let out = match op {
            Op::Packet { from, packet } => {
                let bytes = packet.bytes(self.max_payload, self.ephemeral);
                self.node.packet(now, peer(from), &bytes, hold).1
            }
            Op::Raw { from, bytes } => self.node.packet(now, peer(from), &bytes, hold).1,
            Op::Request { to, dport, len, cookie } => {
                let (port, dest) = (self.ephemeral, peer(to));
                let dport = dport.number(self.ephemeral);
                let message = pattern(len.len(), u64::from(cookie));
                let cookie = u64::from(cookie);
                let (result, out) = self.node.api(now, hold, |ep, now| {
                    ep.send_request(now, port, dest, dport, message, cookie)
                });
                if let Ok(id) = result {
                    assert_eq!(id, self.next_client_id, "client ids are even, in order, unique");
                    self.next_client_id += 2;
                    self.live.push((id, cookie));
                }
                out
            }
            Op::Respond { pick, len } => {
                let Some(rpc) = self.take_request(pick) else { return };
                let message = pattern(len.len(), rpc.id);
                let (result, out) =
                    self.node.api(now, hold, |ep, now| ep.send_response(now, rpc, message));
                if let Err(ApiError::MessageLength { .. } | ApiError::TxBufferFull) = result {
                    self.requests.push(rpc); // still the application's to answer
                }
                out
            }
            Op::Discard { pick } => {
                let Some(rpc) = self.take_request(pick) else { return };
                self.node.api(now, hold, |ep, _| ep.discard(rpc)).1
            }
            Op::Abort { pick } => {
                let id = match self.live.len() {
                    n if n > 0 && pick < 200 => self.live[usize::from(pick) % n].0,
                    _ => u64::from(pick),
                };
                let (result, out) = self.node.api(now, hold, |ep, _| ep.abort(id));
                let live = self.live.iter().position(|&(x, _)| x == id);
                match (result, live) {
                    (Ok(()), Some(i)) => {
                        self.live.swap_remove(i);
                    }
                    (Err(ApiError::UnknownRpc(_)), None) => {}
                    (result, live) => panic!(
                        "abort({id}) gave {result:?}, but the RPC is {}",
                        if live.is_some() { "live" } else { "not live" }
                    ),
                }
                out
            }
            Op::Unreachable { to, port } => {
                let addr = peer(to);
                self.node.call(now, hold, |ep, _| ep.handle_unreachable(addr, port))
            }
            Op::Rebind { server } => {
                let port = if server { SERVER_PORT } else { self.ephemeral };
                let (result, mut out) = self.node.api(now, hold, |ep, _| ep.unbind(port));
                result.expect("unbind a bound port");
                if server {
                    let (result, more) = self.node.api(now, hold, |ep, _| ep.bind(SERVER_PORT));
                    result.expect("bind the server port again");
                    out.packets.extend(more.packets);
                    out.events.extend(more.events);
                } else {
                    let (result, more) = self.node.api(now, hold, |ep, _| ep.bind_ephemeral());
                    self.ephemeral = result.expect("another ephemeral port");
                    assert!(self.ephemeral >= MIN_EPHEMERAL_PORT);
                    out.packets.extend(more.packets);
                    out.events.extend(more.events);
                }
                out
            }
            Op::Advance(step) => {
                self.now = self.node.clock.max(now) + step.nanos();
                self.node.advance(self.now)
            }
            Op::Timeout => self.node.call(now, hold, |ep, now| ep.handle_timeout(now)),
            Op::Deadline => {
                self.hold = false;
                let out = self.node.run_deadline().unwrap_or_default();
                self.now = self.node.clock;
                out
            }
            Op::Rewind(us) => {
                self.now = self.node.clock.saturating_sub(u64::from(us) * 1000);
                return;
            }
            Op::Hold => {
                self.hold = true;
                return;
            }
            Op::Release => {
                self.hold = false;
                self.node.settle()
            }
        };
        self.output(out);
        self.check();
    }

    fn take_request(&mut self, pick: u8) -> Option<ServerRpc> {
        if self.requests.is_empty() {
            return None;
        }
        let i = usize::from(pick) % self.requests.len();
        Some(self.requests.swap_remove(i))
    }

    /// Checks the events; the packets go nowhere (the peers are played by the input).
    fn output(&mut self, out: Output) {
        for event in out.events {
            match event {
                Event::RequestReceived { rpc, port, .. } => {
                    assert!(!wire::is_client_id(rpc.id), "a server id is odd: {rpc:?}");
                    assert_eq!(port, SERVER_PORT, "a request on a port that is not a server's");
                    self.requests.push(rpc);
                }
                Event::ResponseReceived { id, cookie, .. } => self.end(id, cookie, "response"),
                Event::RpcFailed { id, cookie, reason } => {
                    assert!(
                        matches!(
                            reason,
                            FailReason::Timeout | FailReason::Unreachable | FailReason::PortClosed
                        ),
                        "{reason:?}"
                    );
                    self.end(id, cookie, "failure")
                }
            }
        }
    }

    fn end(&mut self, id: u64, cookie: u64, what: &str) {
        let Some(i) = self.live.iter().position(|&(x, _)| x == id) else {
            panic!("{what} for RPC {id}, which is not live (never sent, ended or aborted)")
        };
        assert_eq!(self.live[i].1, cookie, "{what} for RPC {id} with another cookie");
        self.live.swap_remove(i);
    }

    fn check(&self) {
        let c = self.node.config();
        let servers = u64::from(c.max_peers) * u64::from(c.max_rpcs_per_peer);
        let bound = self.live.len() as u64 + servers;
        assert!(
            self.node.ep.rpc_count() as u64 <= bound,
            "{} RPCs, beyond {} live client RPCs + max_peers * max_rpcs_per_peer",
            self.node.ep.rpc_count(),
            self.live.len()
        );
    }

    /// No peer speaks any more: every RPC must end within a few timeout periods.
    fn finish(mut self) {
        self.hold = false;
        let out = self.node.settle();
        self.output(out);
        let c = self.node.config().clone();
        let mut answer = false;
        while let Some(rpc) = self.requests.pop() {
            // Answer some (the responses then wait for acks that never come), drop the rest.
            answer = !answer;
            let now = self.node.clock;
            let mut answered = false;
            if answer {
                let (result, out) = self
                    .node
                    .api(now, false, |ep, now| ep.send_response(now, rpc, pattern(3000, 1)));
                self.output(out);
                answered = result.is_ok();
            }
            if !answered {
                // Not answered (or no room to: wmem_max): dropped. It may be gone already.
                let out = self.node.api(now, false, |ep, _| ep.discard(rpc)).1;
                self.output(out);
            }
        }
        let give_up = c.timeout_ticks.max(c.ack_timeout_ticks);
        let period = u64::from(give_up + c.request_ack_ticks + c.resend_ticks + 2);
        let rounds = self.node.ep.rpc_count() as u64 + 2;
        let limit = self.node.clock + rounds * period * c.tick() + 1_000_000;
        for _ in 0..1_000_000 {
            let Some(out) = self.node.run_deadline() else { break };
            self.output(out);
            assert!(
                self.node.clock <= limit,
                "{} RPCs still alive {} ns after the peers went quiet: {:?}",
                self.node.ep.rpc_count(),
                limit,
                self.node.ep.metrics()
            );
            assert!(self.requests.is_empty(), "a request arrived with no peer speaking");
        }
        assert_eq!(
            self.node.ep.poll_timeout().map(Instant::as_nanos),
            None,
            "still a deadline after the timer runs"
        );
        assert!(self.live.is_empty(), "client RPCs ended without an event: {:?}", self.live);
        self.node.assert_empty("endpoint");
    }
}

fn peer(i: u8) -> SocketAddr {
    PEERS[usize::from(i) % PEERS.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use homa_core::wire::PacketType;

    #[test]
    fn structured_packets_parse_unless_flipped() {
        let spec = PacketSpec {
            sport: Port::Client,
            dport: Port::Server,
            id: Id::Theirs(1),
            body: BodySpec::Data {
                length: 99_999,
                offset: Offset::Raw(u32::MAX),
                payload: 1424,
                incoming: None,
                ack: None,
                cutoff_version: 1,
                retransmit: false,
                in_sequence: true,
            },
            flip: None,
        };
        let bytes = spec.bytes(1424, 0x8000);
        let repr = wire::Repr::parse(&bytes).unwrap();
        assert_eq!(repr.packet_type(), PacketType::Data);
        assert_eq!(repr.data_offset(), Some(100_000 - 1424));
        assert_eq!(bytes.len(), 56 + 1424);
    }
}
