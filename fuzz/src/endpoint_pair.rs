//! `endpoint_pair`: a client and a server endpoint talking through a link the input drives.
//!
//! The input is a [`Setup`] and then [`Op`]s: calls of up to 200,000 bytes (payloads from a
//! seeded pattern), responses, discards and aborts, time steps, and what the link does with
//! each packet in flight: deliver (any one of them: reordering), drop, duplicate, corrupt,
//! or a seeded lossy run. Both endpoints are [`Node`]s, so every input is checked as there.
//!
//! Checked throughout:
//! - an event names a call the client made and has not seen end or aborted (no event for an
//!   unknown id; at most one outcome per call), with its cookie; a failure's reason is
//!   `Timeout` (the only one the ops can cause);
//! - a response holds exactly the bytes the server sent for that call; a request the server
//!   receives holds exactly the bytes the client sent under that id (the server may receive a
//!   request again after it forgot the RPC: Homa does not promise at-most-once then);
//! - every packet goes to the other endpoint's address.
//!
//! After the ops, quiescence: the link stops misbehaving, the server answers what it holds,
//! and the clock runs from deadline to deadline. Within a bound of timeout periods both
//! endpoints must be idle (no deadline) with no RPC, message memory or grant state, and every
//! call not aborted must have had exactly one outcome.
//!
//! **Corruption.** Homa has no checksum of its own (the transport's or Ethernet's CRC drops
//! damaged packets), so a corrupted packet that still parses may rightly deliver wrong bytes
//! or end the wrong RPC. Corruption comes in three kinds: truncation below the common header
//! and an unknown type code (always malformed: the receiver counts and drops them), and a
//! changed byte. A changed byte that leaves the packet unparsable, or that lies in a field
//! receivers ignore (the TCP-overlay bytes 8..11 and 12..20, and DATA's `cutoff_version`,
//! `retransmit` and padding), keeps every check. Any other change that still parses *taints*
//! the run: from then on payloads and server-side request ids are not checked; everything else
//! (no panic, limits, no event for an unknown id, one outcome per call, quiescence) still is.

use homa_core::Instant;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use arbitrary::{Arbitrary, Unstructured};
use homa_core::testnet::Rng;
use homa_core::wire::{self, PacketType};
use homa_core::{ApiError, Config, Event, FailReason, ServerRpc};

use crate::common::{MsgLen, Node, Output, SERVER_PORT, Step, pattern, pick};

const MAX_OPS: usize = 1000;
/// Calls in flight at once (further `Call`s are skipped), and in all.
const MAX_LIVE_CALLS: usize = 16;
const MAX_CALLS: usize = 64;

const CLIENT: SocketAddr = crate::common::PEERS[2];
const SERVER: SocketAddr = crate::common::PEERS[0];

/// Tunables shared by both endpoints; index 0 of each choice is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) struct Setup {
    pub(crate) unsched_bytes: u8,
    pub(crate) window: u8,
    pub(crate) max_overcommit: u8,
    pub(crate) timers: u8,
    pub(crate) mtu: u8,
    pub(crate) num_priorities: u8,
    /// The server answers each request as it arrives, with as many bytes.
    pub(crate) auto_respond: bool,
    /// Seeds the lossy runs of [`Op::Pump`].
    pub(crate) seed: u64,
}

impl Setup {
    pub(crate) fn config(&self) -> Config {
        // (resend_ticks, resend_interval, timeout_ticks, request_ack_ticks, ack_timeout_ticks)
        let timers = pick(
            &[(5, 5, 100, 2, 1000), (2, 2, 10, 1, 20), (1, 1, 4, 0, 8), (3, 2, 30, 5, 60)],
            self.timers,
        );
        Config {
            unsched_bytes: pick(&[40_000, 1424, 5_000, 100_000], self.unsched_bytes),
            window: pick(&[0, 10_000, 100_000], self.window),
            max_overcommit: pick(&[8, 1, 2], self.max_overcommit),
            // (The same byte's higher digits: no input field moves and seeds still parse;
            // a seed with a small byte there now runs at the default, 1.)
            max_active_per_peer: pick(&[1, 8, 2], self.max_overcommit / 3),
            num_priorities: pick(&[8, 1, 3], self.num_priorities),
            resend_ticks: timers.0,
            resend_interval: timers.1,
            timeout_ticks: timers.2,
            request_ack_ticks: timers.3,
            ack_timeout_ticks: timers.4,
            mtu: pick(&[1500, 9000, 576], self.mtu),
            ..Config::default()
        }
    }
}

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Dir {
    ToServer,
    ToClient,
}

/// What corruption does to a packet in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Corruption {
    /// Cut to `n % 28` bytes: shorter than the common header.
    Truncate(u8),
    /// A type code outside 0x10..=0x18.
    BadType(u8),
    /// `bytes[at % len] ^= xor`.
    Flip { at: u16, xor: u8 },
}

/// One step of the input.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub(crate) enum Op {
    /// The client sends a request.
    Call {
        len: MsgLen,
        cookie: u8,
    },
    /// The server answers a request it holds.
    Respond {
        pick: u8,
        len: MsgLen,
    },
    /// The server drops a request it holds without answering.
    Discard {
        pick: u8,
    },
    /// The client aborts a call in flight.
    Abort {
        pick: u8,
    },
    /// Packet `pick % n` of those in flight arrives.
    Deliver {
        dir: Dir,
        pick: u8,
    },
    Drop {
        dir: Dir,
        pick: u8,
    },
    /// A copy of the packet joins the end of the queue.
    Duplicate {
        dir: Dir,
        pick: u8,
    },
    Corrupt {
        dir: Dir,
        pick: u8,
        how: Corruption,
    },
    /// Everything in flight arrives, in order, and what that sends, until the link is empty.
    Flush,
    /// `rounds` rounds of 1 µs: each direction delivers a packet (a random one with chance
    /// `reorder / 256`), which is lost with chance `loss / 256` and duplicated with chance
    /// `dup / 256`; timers run as they fall due.
    Pump {
        rounds: u8,
        loss: u8,
        dup: u8,
        reorder: u8,
    },
    /// The clock moves on (packets stay in flight); timers due run.
    Advance(Step),
    /// The clock jumps to the earlier deadline of the two.
    Deadline,
}

/// Bytes of ignored fields: a change there keeps a packet's meaning.
fn ignored_byte(packet_type: PacketType, at: usize) -> bool {
    matches!(at, 8..=10 | 12..=19) || (packet_type == PacketType::Data && (46..=51).contains(&at))
}

/// Decodes and runs one input.
pub fn endpoint_pair(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(setup) = Setup::arbitrary(&mut u) else { return };
    let mut pair = Pair::new(&setup);
    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        pair.op(op);
    }
    pair.quiesce();
}

/// What the test knows about one call.
#[derive(Debug)]
struct CallRecord {
    len: usize,
    cookie: u64,
    aborted: bool,
    outcome: Option<&'static str>,
    /// Every response the server sent for this id: (len, seed).
    responses: Vec<(usize, u64)>,
}

#[derive(Debug)]
struct Pair {
    client: Node,
    server: Node,
    port: u16,
    now: u64,
    /// Packets in flight: [to the server, to the client].
    links: [VecDeque<Vec<u8>>; 2],
    calls: HashMap<u64, CallRecord>,
    order: Vec<u64>,
    /// Requests the server application holds: (handle, request length).
    held: Vec<(ServerRpc, usize)>,
    auto_respond: bool,
    tainted: bool,
    rng: Rng,
    responses_sent: u64,
}

impl Pair {
    fn new(setup: &Setup) -> Pair {
        let config = setup.config();
        let mut client = Node::new(config.clone());
        let mut server = Node::new(config);
        server.ep.bind(SERVER_PORT).expect("bind");
        let port = client.ep.bind_ephemeral().expect("ephemeral port");
        Pair {
            client,
            server,
            port,
            now: 0,
            links: [VecDeque::new(), VecDeque::new()],
            calls: HashMap::new(),
            order: Vec::new(),
            held: Vec::new(),
            auto_respond: setup.auto_respond,
            tainted: false,
            rng: Rng::new(setup.seed),
            responses_sent: 0,
        }
    }

    fn op(&mut self, op: Op) {
        match op {
            Op::Call { len, cookie } => self.call(len.valid_len(), u64::from(cookie)),
            Op::Respond { pick, len } => {
                if !self.held.is_empty() {
                    let (rpc, _) = self.held.swap_remove(usize::from(pick) % self.held.len());
                    self.respond(rpc, len.valid_len());
                }
            }
            Op::Discard { pick } => {
                if !self.held.is_empty() {
                    let (rpc, _) = self.held.swap_remove(usize::from(pick) % self.held.len());
                    let (result, out) = self.server.api(self.now, false, |ep, _| ep.discard(rpc));
                    // As for `respond`, the server may have forgotten it.
                    assert!(matches!(result, Ok(()) | Err(ApiError::UnknownRpc(_))), "{result:?}");
                    self.route_server(out);
                }
            }
            Op::Abort { pick } => {
                let live: Vec<u64> =
                    self.order.iter().copied().filter(|id| self.is_live(*id)).collect();
                if !live.is_empty() {
                    let id = live[usize::from(pick) % live.len()];
                    let (result, out) = self.client.api(self.now, false, |ep, _| ep.abort(id));
                    result.unwrap_or_else(|e| panic!("abort of live call {id}: {e:?}"));
                    self.calls.get_mut(&id).expect("live").aborted = true;
                    self.route_client(out);
                }
            }
            Op::Deliver { dir, pick } => {
                if let Some(bytes) = self.take(dir, pick) {
                    self.deliver(dir, &bytes);
                }
            }
            Op::Drop { dir, pick } => {
                self.take(dir, pick);
            }
            Op::Duplicate { dir, pick } => {
                let q = &mut self.links[dir as usize];
                if !q.is_empty() {
                    let copy = q[usize::from(pick) % q.len()].clone();
                    q.push_back(copy);
                }
            }
            Op::Corrupt { dir, pick, how } => self.corrupt(dir, pick, how),
            Op::Flush => self.flush(),
            Op::Pump { rounds, loss, dup, reorder } => {
                for _ in 0..rounds {
                    self.pump_round(loss, dup, reorder);
                }
            }
            Op::Advance(step) => {
                let now = self.now + step.nanos();
                self.advance(now);
            }
            Op::Deadline => {
                let next = self
                    .client
                    .ep
                    .poll_timeout()
                    .map(Instant::as_nanos)
                    .into_iter()
                    .chain(self.server.ep.poll_timeout().map(Instant::as_nanos))
                    .min();
                if let Some(at) = next {
                    self.advance(at.max(self.now));
                }
            }
        }
    }

    fn is_live(&self, id: u64) -> bool {
        self.calls.get(&id).is_some_and(|c| !c.aborted && c.outcome.is_none())
    }

    fn call(&mut self, len: usize, cookie: u64) {
        let live = self.order.iter().filter(|id| self.is_live(**id)).count();
        if live >= MAX_LIVE_CALLS || self.order.len() >= MAX_CALLS {
            return;
        }
        let port = self.port;
        // The request's bytes depend on the id it will get (ids are 2, 4, ...).
        let id = 2 * (self.order.len() as u64 + 1);
        let message = pattern(len, id);
        let (result, out) = self.client.api(self.now, false, |ep, now| {
            ep.send_request(now, port, SERVER, SERVER_PORT, message, cookie)
        });
        let got = result.expect("send_request within wmem_max");
        assert_eq!(got, id, "client ids are 2, 4, 6, ...");
        self.order.push(id);
        let record =
            CallRecord { len, cookie, aborted: false, outcome: None, responses: Vec::new() };
        self.calls.insert(id, record);
        self.route_client(out);
    }

    fn respond(&mut self, rpc: ServerRpc, len: usize) {
        self.responses_sent += 1;
        let seed = rpc.id.wrapping_mul(1_000_003) ^ self.responses_sent;
        let client_id = wire::local_id(rpc.id);
        let (result, out) = self
            .server
            .api(self.now, false, |ep, now| ep.send_response(now, rpc, pattern(len, seed)));
        match result {
            Ok(()) => {
                if let Some(c) = self.calls.get_mut(&client_id) {
                    c.responses.push((len, seed));
                }
            }
            // The server may forget a request it delivered: an ACK or RPC_UNKNOWN from the
            // client (for an earlier delivery of the same request) ends it.
            Err(ApiError::UnknownRpc(_) | ApiError::NotAwaitingResponse(_)) => {}
            Err(e) => panic!("send_response to a request the server holds: {e:?}"),
        }
        self.route_server(out);
    }

    fn take(&mut self, dir: Dir, pick: u8) -> Option<Vec<u8>> {
        let q = &mut self.links[dir as usize];
        if q.is_empty() {
            return None;
        }
        q.remove(usize::from(pick) % q.len())
    }

    fn corrupt(&mut self, dir: Dir, pick: u8, how: Corruption) {
        let q = &mut self.links[dir as usize];
        if q.is_empty() {
            return;
        }
        let n = q.len();
        let bytes = &mut q[usize::from(pick) % n];
        // A packet corrupted before may no longer parse, or be too short for the change.
        let packet_type = wire::Repr::parse(bytes).map(|r| r.packet_type());
        match how {
            Corruption::Truncate(len) => bytes.truncate(usize::from(len) % 28),
            Corruption::BadType(code) => {
                if let Some(b) = bytes.get_mut(11) {
                    *b = if code < 0x10 { code } else { code.max(0x19) };
                }
            }
            Corruption::Flip { at, xor } => {
                if bytes.is_empty() {
                    return;
                }
                let at = usize::from(at) % bytes.len();
                bytes[at] ^= xor;
                let harmless = packet_type.is_ok_and(|t| ignored_byte(t, at));
                if xor != 0 && wire::Repr::parse(bytes).is_ok() && !harmless {
                    self.tainted = true;
                }
            }
        }
    }

    fn deliver(&mut self, dir: Dir, bytes: &[u8]) {
        match dir {
            Dir::ToServer => {
                let (_, out) = self.server.packet(self.now, CLIENT, bytes, false);
                self.route_server(out);
            }
            Dir::ToClient => {
                let (_, out) = self.client.packet(self.now, SERVER, bytes, false);
                self.route_client(out);
            }
        }
    }

    fn flush(&mut self) {
        for _ in 0..100_000 {
            if let Some(bytes) = self.links[0].pop_front() {
                self.deliver(Dir::ToServer, &bytes);
            } else if let Some(bytes) = self.links[1].pop_front() {
                self.deliver(Dir::ToClient, &bytes);
            } else {
                return;
            }
        }
        panic!(
            "the link never empties: {} + {} packets in flight",
            self.links[0].len(),
            self.links[1].len()
        );
    }

    fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }

    fn chance(&mut self, per_256: u8) -> bool {
        (self.random() & 0xff) < u64::from(per_256)
    }

    fn pump_round(&mut self, loss: u8, dup: u8, reorder: u8) {
        for dir in [Dir::ToServer, Dir::ToClient] {
            let n = self.links[dir as usize].len();
            if n == 0 {
                continue;
            }
            let i = if self.chance(reorder) { (self.random() % n as u64) as usize } else { 0 };
            let bytes = self.links[dir as usize].remove(i).expect("in range");
            if self.chance(dup) {
                self.links[dir as usize].push_back(bytes.clone());
            }
            if !self.chance(loss) {
                self.deliver(dir, &bytes);
            }
        }
        self.advance(self.now + 1000);
    }

    fn advance(&mut self, now: u64) {
        self.now = self.now.max(now);
        let out = self.client.advance(self.now);
        self.route_client(out);
        let out = self.server.advance(self.now);
        self.route_server(out);
    }

    fn route_client(&mut self, out: Output) {
        for p in out.packets {
            assert_eq!(p.to, SERVER, "the client sent a packet elsewhere");
            self.links[Dir::ToServer as usize].push_back(p.bytes);
        }
        for event in out.events {
            self.client_event(event);
        }
    }

    fn route_server(&mut self, out: Output) {
        for p in out.packets {
            assert_eq!(p.to, CLIENT, "the server sent a packet elsewhere");
            self.links[Dir::ToClient as usize].push_back(p.bytes);
        }
        for event in out.events {
            self.server_event(event);
        }
    }

    fn client_event(&mut self, event: Event) {
        let (id, cookie, outcome) = match &event {
            Event::ResponseReceived { id, cookie, .. } => (*id, *cookie, "response"),
            Event::RpcFailed { id, cookie, reason } => {
                assert_eq!(*reason, FailReason::Timeout, "call {id} failed");
                (*id, *cookie, "failure")
            }
            Event::RequestReceived { .. } => panic!("the client got a request: {event:?}"),
        };
        let Some(call) = self.calls.get_mut(&id) else {
            panic!("{outcome} for id {id}, which the client never used")
        };
        assert!(!call.aborted, "{outcome} for call {id} after it was aborted");
        assert!(
            call.outcome.is_none(),
            "{outcome} for call {id}, which already had a {:?}",
            call.outcome
        );
        assert_eq!(call.cookie, cookie, "{outcome} for call {id} with another cookie");
        call.outcome = Some(outcome);
        if let Event::ResponseReceived { message, .. } = &event
            && !self.tainted
        {
            assert!(
                call.responses.iter().any(|&(len, seed)| *message == pattern(len, seed)),
                "call {id}: the response ({} bytes) is none of the {} the server sent",
                message.len(),
                call.responses.len()
            );
        }
    }

    fn server_event(&mut self, event: Event) {
        let Event::RequestReceived { rpc, port, client_port, message } = event else {
            panic!("the server got a client event: {event:?}")
        };
        assert_eq!(rpc.client, CLIENT);
        assert_eq!(port, SERVER_PORT);
        if !self.tainted {
            assert_eq!(client_port, self.port, "request {rpc:?} from another port");
            let id = wire::local_id(rpc.id);
            let call = self.calls.get(&id).unwrap_or_else(|| panic!("request {rpc:?} nobody sent"));
            assert!(
                message.len() == call.len && message == pattern(call.len, id),
                "request {rpc:?}: {} bytes, not the {} the client sent",
                message.len(),
                call.len
            );
        }
        if self.auto_respond {
            let len = message.len().min(200_000);
            self.respond(rpc, len);
        } else {
            self.held.push((rpc, message.len()));
        }
    }

    /// The link heals, the server answers what it holds, and time runs until both are idle.
    fn quiesce(mut self) {
        let c = self.client.config().clone();
        let give_up = c.timeout_ticks.max(c.ack_timeout_ticks);
        let period = u64::from(give_up + c.request_ack_ticks + c.resend_ticks + 5);
        let limit = self.now + 4 * period * c.tick() + 20_000_000;
        for _ in 0..1_000_000 {
            self.flush();
            if let Some((rpc, len)) = self.held.pop() {
                self.respond(rpc, len.min(5000));
                continue;
            }
            let next = self
                .client
                .ep
                .poll_timeout()
                .map(Instant::as_nanos)
                .into_iter()
                .chain(self.server.ep.poll_timeout().map(Instant::as_nanos))
                .min();
            let Some(at) = next else { break };
            self.advance(at.max(self.now));
            assert!(
                self.now <= limit,
                "not quiescent {limit} ns after the faults stopped: client {:?}, server {:?}",
                self.client.ep.metrics(),
                self.server.ep.metrics()
            );
        }
        assert!(self.links.iter().all(VecDeque::is_empty));
        assert_eq!(
            self.client.ep.poll_timeout().map(Instant::as_nanos),
            None,
            "client deadline after quiescence"
        );
        assert_eq!(
            self.server.ep.poll_timeout().map(Instant::as_nanos),
            None,
            "server deadline after quiescence"
        );
        self.client.assert_empty("client");
        self.server.assert_empty("server");
        for id in &self.order {
            let call = &self.calls[id];
            assert!(
                call.aborted || call.outcome.is_some(),
                "call {id} ({} bytes) never completed nor failed",
                call.len
            );
        }
    }
}
