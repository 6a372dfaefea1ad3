//! `grant_model`: the receiver's grant scheduler against a reference model of SRPT with
//! overcommitment.
//!
//! One receiving endpoint gets DATA of up to 12 incoming messages, each from its own peer:
//! requests to its server port, or responses to requests it sent (which it can then abort).
//! The input picks each message's length and unscheduled bytes, which message's next bytes
//! arrive and how many, which are lost and arrive later, and which responses are aborted.
//! The senders behave: they send only bytes granted so far (the unscheduled ones, or up to the
//! latest GRANT). After every arrival or abort, the GRANTs the endpoint sends must be exactly
//! those of the model, and its gauges must agree with the model's.
//!
//! The model, for this configuration (`window` fixed at W > 0, FIFO grants off, any
//! `max_incoming` and `max_overcommit` K, every message from a different peer, the clock
//! still):
//! - a message is *managed* while it needs grants (its unscheduled bytes are less than its
//!   length), has started and is neither complete nor aborted; rank = (bytes not yet
//!   received, arrival order), smaller first;
//! - the *active* messages are the K best-ranked managed ones;
//! - headroom = `max_incoming` - sum over active messages of (granted - received);
//! - active messages, best first, are each granted up to min(received + W, length), as far as
//!   the headroom allows; nothing else is ever granted;
//! - a GRANT goes out exactly when a message's grant grows, once, carrying the new offset, at
//!   level `max_sched_prio - rank - max(0, max_sched_prio + 1 - active)` floored at 0, where
//!   rank counts the active messages ranked above it (the module's `homa_grant_update_offset`
//!   rule);
//! - gauges: `grantable` = managed, `active_grants` = active, `incoming` = the sum above.
//!
//! Not covered (each changes the answer in ways the model would have to re-implement rather
//! than state): several messages from one peer (activation balances peers), FIFO grants, the
//! dynamic window, and the timers (a silent sender, RESEND).

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use arbitrary::{Arbitrary, Unstructured};
use homa_core::wire::{self, Ack, Body, PacketType, data, header};
use homa_core::{ApiError, Config, Event, ServerRpc};

use crate::common::{Node, Output, SERVER_PORT, pattern};

const MAX_OPS: usize = 3000;
const MAX_MESSAGES: usize = 12;

/// The scheduler's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) struct Setup {
    /// `1 + n % 8`.
    pub(crate) max_overcommit: u8,
    /// `1 + 16 n` bytes.
    pub(crate) window: u16,
    /// `1 + 16 n` bytes; `None`: 2^30 (never reached).
    pub(crate) max_incoming: Option<u16>,
    /// `1 + n % 8`.
    pub(crate) num_priorities: u8,
}

impl Setup {
    pub(crate) fn config(&self) -> Config {
        Config {
            max_overcommit: 1 + self.max_overcommit % 8,
            window: 1 + 16 * u32::from(self.window),
            max_incoming: self.max_incoming.map_or(1 << 30, |n| 1 + 16 * u32::from(n)),
            num_priorities: 1 + self.num_priorities % 8,
            grant_fifo_fraction: 0,
            ..Config::default()
        }
    }
}

/// A message length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Length {
    /// `1 + n` bytes.
    Short(u16),
    /// `1 + n % 1,000,000` bytes.
    Long(u32),
}

/// Bytes in one DATA packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Chunk {
    /// `max_payload`.
    Full,
    /// `1 + n % max_payload`.
    Bytes(u16),
}

/// One step of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Op {
    /// A new message's first packet. `unsched`: `1 + 16 n` bytes announced as unscheduled.
    Start { response: bool, length: Length, unsched: u16, chunk: Chunk },
    /// The next bytes of message `msg % n`, if granted.
    Send { msg: u8, chunk: Chunk },
    /// Up to `1 + packets % 64` full packets of one message.
    Burst { msg: u8, packets: u8 },
    /// The next bytes of a message are sent and lost.
    Lose { msg: u8, chunk: Chunk },
    /// The first lost range of a message arrives.
    Recover { msg: u8 },
    /// The receiver aborts a response (requests cannot be aborted).
    Abort { msg: u8 },
    /// `packets` full packets, from each message that may send in turn.
    RoundRobin { packets: u8 },
}

/// Decodes and runs one input.
pub fn grant_model(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(setup) = Setup::arbitrary(&mut u) else { return };
    let mut m = Model::new(setup.config());
    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        m.op(op);
    }
}

#[derive(Debug)]
struct Msg {
    addr: SocketAddr,
    /// The client RPC id, for a response.
    response: Option<u64>,
    sender_id: u64,
    sport: u16,
    dport: u16,
    length: u32,
    unsched: u32,
    /// Bytes that arrived.
    received: u32,
    /// The sender's next new byte.
    sent: u32,
    lost: VecDeque<(u32, u32)>,
    /// The model's grant: the sender may send [0, granted).
    granted: u32,
    complete: bool,
    aborted: bool,
}

impl Msg {
    fn managed(&self) -> bool {
        self.unsched < self.length && !self.complete && !self.aborted
    }

    fn rank(&self, birth: usize) -> (u32, usize) {
        (self.length - self.received, birth)
    }
}

#[derive(Debug)]
struct Model {
    node: Node,
    config: Config,
    max_payload: u32,
    ephemeral: u16,
    msgs: Vec<Msg>,
    next_turn: usize,
}

impl Model {
    fn new(config: Config) -> Model {
        let mut node = Node::new(config.clone());
        node.ep.bind(SERVER_PORT).expect("bind");
        let ephemeral = node.ep.bind_ephemeral().expect("ephemeral port");
        Model {
            node,
            max_payload: config.max_payload(),
            config,
            ephemeral,
            msgs: Vec::new(),
            next_turn: 0,
        }
    }

    fn chunk(&self, c: Chunk) -> u32 {
        match c {
            Chunk::Full => self.max_payload,
            Chunk::Bytes(n) => 1 + u32::from(n) % self.max_payload,
        }
    }

    fn pick(&self, msg: u8) -> Option<usize> {
        (!self.msgs.is_empty()).then(|| usize::from(msg) % self.msgs.len())
    }

    fn op(&mut self, op: Op) {
        match op {
            Op::Start { response, length, unsched, chunk } => {
                self.start(response, length, unsched, chunk)
            }
            Op::Send { msg, chunk } => {
                if let Some(i) = self.pick(msg) {
                    self.send(i, self.chunk(chunk), true);
                }
            }
            Op::Burst { msg, packets } => {
                if let Some(i) = self.pick(msg) {
                    for _ in 0..=packets % 64 {
                        if !self.send(i, self.max_payload, true) {
                            break;
                        }
                    }
                }
            }
            Op::Lose { msg, chunk } => {
                if let Some(i) = self.pick(msg) {
                    self.send(i, self.chunk(chunk), false);
                }
            }
            Op::Recover { msg } => {
                if let Some(i) = self.pick(msg) {
                    self.recover(i);
                }
            }
            Op::Abort { msg } => {
                if let Some(i) = self.pick(msg) {
                    self.abort(i);
                }
            }
            Op::RoundRobin { packets } => {
                for _ in 0..packets {
                    let n = self.msgs.len();
                    let Some(i) = (0..n).map(|k| (self.next_turn + k) % n.max(1)).find(|&i| {
                        let m = &self.msgs[i];
                        !m.aborted && (m.sent < m.granted || !m.lost.is_empty())
                    }) else {
                        break;
                    };
                    self.next_turn = i + 1;
                    if !self.send(i, self.max_payload, true) {
                        self.recover(i);
                    }
                }
            }
        }
    }

    fn start(&mut self, response: bool, length: Length, unsched: u16, chunk: Chunk) {
        let i = self.msgs.len();
        if i >= MAX_MESSAGES {
            return;
        }
        let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(198, 18, 1, 1 + i as u8), 4000));
        let length = match length {
            Length::Short(n) => 1 + u32::from(n),
            Length::Long(n) => 1 + n % wire::MAX_MESSAGE_LENGTH,
        };
        let unsched = 1 + 16 * u32::from(unsched);
        let (sender_id, sport, dport, response) = if response {
            let port = self.ephemeral;
            let (id, out) = self.node.api(0, false, |ep, now| {
                ep.send_request(now, port, addr, SERVER_PORT, vec![i as u8], i as u64)
            });
            let id = id.expect("send_request");
            assert!(
                out.events.is_empty()
                    && out.packets.len() == 1
                    && out.packets[0].to == addr
                    && out.packets[0].repr().packet_type() == PacketType::Data,
                "a one-byte request is one DATA: {out:?}"
            );
            (wire::local_id(id), SERVER_PORT, port, Some(id))
        } else {
            (1000 + 2 * i as u64, 40_000, SERVER_PORT, None)
        };
        self.msgs.push(Msg {
            addr,
            response,
            sender_id,
            sport,
            dport,
            length,
            unsched,
            received: 0,
            sent: 0,
            lost: VecDeque::new(),
            granted: unsched.min(length),
            complete: false,
            aborted: false,
        });
        let first = self.chunk(chunk);
        self.send(i, first, true);
    }

    /// Sends the next `len` granted bytes of message `i` (they arrive, or are lost); false if
    /// it may not send.
    fn send(&mut self, i: usize, len: u32, arrives: bool) -> bool {
        let m = &mut self.msgs[i];
        if m.aborted || m.sent >= m.granted {
            return false;
        }
        let start = m.sent;
        let end = start + len.min(m.granted - start);
        m.sent = end;
        if arrives {
            self.arrive(i, start, end);
        } else {
            self.msgs[i].lost.push_back((start, end));
        }
        true
    }

    fn recover(&mut self, i: usize) {
        if self.msgs[i].aborted {
            return;
        }
        if let Some((start, end)) = self.msgs[i].lost.pop_front() {
            self.arrive(i, start, end);
        }
    }

    fn abort(&mut self, i: usize) {
        let m = &self.msgs[i];
        let Some(id) = m.response else { return };
        let live = !m.complete && !m.aborted;
        let (result, out) = self.node.api(0, false, |ep, _| ep.abort(id));
        match (result, live) {
            (Ok(()), true) => {}
            (Err(ApiError::UnknownRpc(_)), false) => return,
            (result, _) => panic!("abort of message {i} ({m:?}) gave {result:?}"),
        }
        self.msgs[i].aborted = true;
        self.compare(out, None);
    }

    /// Bytes [start, end) of message `i` arrive.
    fn arrive(&mut self, i: usize, start: u32, end: u32) {
        let m = &self.msgs[i];
        let mut h = header::Repr::new(PacketType::Data, m.sport, m.dport, m.sender_id);
        h.sequence = start;
        let fields = data::Repr {
            message_length: m.length,
            incoming: m.unsched,
            ack: Ack::NONE,
            cutoff_version: self.config.cutoff_version,
            retransmit: 0,
            pad: [0; 3],
            seg_offset: start,
        };
        let payload = pattern((end - start) as usize, u64::from(start));
        let repr = wire::Repr { header: h, body: Body::Data { repr: fields, payload: &payload } };
        let mut bytes = vec![0; repr.buffer_len()];
        repr.emit(&mut bytes).expect("exactly buffer_len");
        let accepted = self.node.ep.metrics().accepted;
        let (result, out) = self.node.packet(0, m.addr, &bytes, false);
        result.expect("valid DATA");
        assert_eq!(
            self.node.ep.metrics().accepted,
            accepted + 1,
            "DATA from a good sender dropped"
        );
        let m = &mut self.msgs[i];
        m.received += end - start;
        m.complete = m.received == m.length;
        let completed = m.complete.then_some(i);
        self.compare(out, completed);
    }

    /// Runs the model after an arrival or abort and compares the endpoint's output with it.
    fn compare(&mut self, out: Output, completed: Option<usize>) {
        let expected = self.grant();
        let mut got: Vec<(usize, u32, u8)> = Vec::new();
        for p in &out.packets {
            let repr = p.repr();
            let Body::Grant(g) = repr.body else {
                panic!("only GRANTs expected, got {:?} to {}", repr.packet_type(), p.to)
            };
            let i = self.msgs.iter().position(|m| m.addr == p.to).expect("a GRANT to a sender");
            let m = &self.msgs[i];
            assert_eq!((repr.header.dport, repr.header.sport), (m.sport, m.dport), "GRANT ports");
            assert_eq!(repr.header.sender_id, wire::local_id(m.sender_id), "GRANT id");
            assert_eq!(p.priority, self.config.num_priorities - 1, "GRANTs go at the top level");
            got.push((i, g.offset, g.priority));
        }
        got.sort_unstable();
        assert_eq!(
            got, expected,
            "GRANTs (message, offset, priority) differ from the model's; messages: {:#?}",
            self.msgs
        );
        for event in out.events {
            let i =
                completed.unwrap_or_else(|| panic!("event without a completed message: {event:?}"));
            let m = &self.msgs[i];
            match event {
                Event::RequestReceived { rpc, message, .. } => {
                    assert!(
                        m.response.is_none() && rpc.client == m.addr,
                        "{rpc:?} for message {i}"
                    );
                    assert_eq!(message.len(), m.length as usize);
                    let rpc = ServerRpc { client: rpc.client, id: rpc.id };
                    let (result, more) = self.node.api(0, false, |ep, _| ep.discard(rpc));
                    result.expect("discard a delivered request");
                    assert!(more.packets.is_empty() && more.events.is_empty());
                }
                Event::ResponseReceived { id, message, .. } => {
                    assert_eq!(Some(id), m.response, "response for message {i}");
                    assert_eq!(message.len(), m.length as usize);
                }
                Event::RpcFailed { .. } => panic!("nothing fails with the clock still: {event:?}"),
            }
        }
        let mut managed: Vec<usize> =
            (0..self.msgs.len()).filter(|&i| self.msgs[i].managed()).collect();
        managed.sort_by_key(|&i| self.msgs[i].rank(i));
        let k = usize::from(self.config.max_overcommit);
        let incoming: u64 = managed[..managed.len().min(k)]
            .iter()
            .map(|&i| u64::from(self.msgs[i].granted - self.msgs[i].received))
            .sum();
        let metrics = self.node.ep.metrics();
        assert_eq!(
            (metrics.grantable, metrics.active_grants, metrics.incoming),
            (managed.len() as u64, managed.len().min(k) as u64, incoming),
            "(grantable, active, incoming) differ from the model's"
        );
    }

    /// The model's grants for the current state, as (message, new offset, priority), sorted;
    /// applies them.
    fn grant(&mut self) -> Vec<(usize, u32, u8)> {
        let c = &self.config;
        let mut managed: Vec<usize> =
            (0..self.msgs.len()).filter(|&i| self.msgs[i].managed()).collect();
        managed.sort_by_key(|&i| self.msgs[i].rank(i));
        let active = &managed[..managed.len().min(usize::from(c.max_overcommit))];
        let outstanding: i64 =
            active.iter().map(|&i| i64::from(self.msgs[i].granted - self.msgs[i].received)).sum();
        let mut headroom = i64::from(c.max_incoming) - outstanding;
        let max_sched = i64::from(c.max_sched_prio());
        let mut grants = Vec::new();
        for (rank, &i) in active.iter().enumerate() {
            let m = &mut self.msgs[i];
            let want =
                i64::from(m.received.saturating_add(c.window).min(m.length)) - i64::from(m.granted);
            if want <= 0 || headroom <= 0 {
                continue;
            }
            let delta = want.min(headroom);
            headroom -= delta;
            m.granted += delta as u32;
            let mut level = max_sched - rank as i64;
            let extra = max_sched + 1 - active.len() as i64;
            if extra >= 0 {
                level -= extra;
            }
            grants.push((i, m.granted, level.max(0) as u8));
        }
        grants.sort_unstable();
        grants
    }
}
