//! [`Endpoint`]: one host's Homa stack as a state machine, and its driving contract.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::SocketAddr;

use crate::addr::Hasher;
use crate::config::{Config, ConfigError};
use crate::downlink::Downlink;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::overload::Overload;
use crate::peer::PeerTable;
use crate::rpc::{RpcInfo, RpcRef, RpcTable, State};
use crate::sched::grant::{GrantCx, Grants};
use crate::sched::tx::{Control, ControlBody, Pacer, TxKey, TxQueues};
use crate::time::{Instant, NANOS_PER_USEC, Nanos};
use crate::timer::TimerQueue;
use crate::wire::{Ack, MAX_ACKS};

mod api;
mod control;
mod receive;
mod timer;
mod transmit;

/// Lowest ephemeral (client-only) port; server ports are below it.
pub const MIN_EPHEMERAL_PORT: u16 = 0x8000;

/// Restarts in a row, with nothing else heard from the server, that each start a client's
/// silence over: each may follow a resent request that was lost too (see
/// `handle_rpc_unknown`). Three in a row are lost once in 8,000 at 5 % independent loss
/// (0.05 cubed), the rate `homa-cli/tests/loss.rs` runs at.
const RESTARTS_THAT_END_SILENCE: u8 = 3;
/// Doublings of the interval between NEED_ACKs: at most every 2^5 = 32 ticks.
const NEED_ACK_BACKOFFS: u32 = 5;

/// A packet `poll_transmit` wrote into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it (the transport's address of the peer).
    pub to: SocketAddr,
    /// Bytes written at the start of the buffer.
    pub len: usize,
    /// Priority level 0..=7; the transport sets IPv4 TOS / IPv6 traffic class to
    /// [`wire::tos_for_priority`](crate::wire::tos_for_priority) of it.
    pub priority: u8,
}

/// Packets [`Endpoint::poll_transmit_run`] wrote, one per slot: all to one address at one
/// level, each filling its slot but the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Where to send them.
    pub to: SocketAddr,
    /// Their priority level (see [`Transmit::priority`]).
    pub priority: u8,
    /// How many (at least one).
    pub packets: usize,
    /// Bytes of the last, at the start of its slot.
    pub last_len: usize,
}

impl Run {
    fn one(t: Transmit) -> Run {
        Run { to: t.to, priority: t.priority, packets: 1, last_len: t.len }
    }

    /// The packets' lengths, slot by slot, for slots of `slot_len` bytes
    /// ([`Config::max_packet_len`]).
    pub fn lens(&self, slot_len: usize) -> impl Iterator<Item = usize> + use<> {
        let (packets, last) = (self.packets, self.last_len);
        (1..=packets).map(move |i| if i == packets { last } else { slot_len })
    }
}

/// A buffer handed to [`Endpoint::poll_transmit`] shorter than the packets the endpoint
/// may write ([`Config::max_packet_len`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferTooShort {
    /// Bytes in the buffer given.
    pub len: usize,
    /// Bytes the endpoint may write ([`Config::max_packet_len`]).
    pub need: usize,
}

impl core::fmt::Display for BufferTooShort {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "a {}-byte transmit buffer: packets need up to {} (max_packet_len)",
            self.len, self.need
        )
    }
}

impl core::error::Error for BufferTooShort {}

/// A request a server received: the handle to answer it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerRpc {
    /// The client's transport address.
    pub client: SocketAddr,
    /// The server's id for the RPC (odd; the client's id with bit 0 set).
    pub id: u64,
}

/// Why an RPC failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailReason {
    /// The peer was silent for `timeout_ticks`.
    Timeout,
    /// The transport reported the peer or its port unreachable (`handle_unreachable`).
    Unreachable,
    /// The local port was unbound while the RPC was pending.
    PortClosed,
}

impl FailReason {
    /// The reason as every binding and the conformance vectors name it: `"timeout"`,
    /// `"unreachable"`, `"port_closed"`.
    pub fn name(self) -> &'static str {
        match self {
            FailReason::Timeout => "timeout",
            FailReason::Unreachable => "unreachable",
            FailReason::PortClosed => "port_closed",
        }
    }
}

/// Something the application must learn about. Every value is plain owned data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A complete request arrived on a bound port; answer with
    /// [`Endpoint::send_response`].
    RequestReceived {
        /// The handle to answer it with.
        rpc: ServerRpc,
        /// The local port it arrived on.
        port: u16,
        /// The client's Homa port.
        client_port: u16,
        /// The request's bytes.
        message: Vec<u8>,
    },
    /// The response to a request from [`Endpoint::send_request`] arrived.
    ResponseReceived {
        /// The id `send_request` returned.
        id: u64,
        /// The cookie given to `send_request`.
        cookie: u64,
        /// The response's bytes.
        message: Vec<u8>,
    },
    /// A request from [`Endpoint::send_request`] will never get a response.
    RpcFailed {
        /// The id `send_request` returned.
        id: u64,
        /// The cookie given to `send_request`.
        cookie: u64,
        /// Why it failed.
        reason: FailReason,
    },
}

/// One host's Homa stack: bound ports, peers, RPCs, the receiver's grant scheduler and the
/// sender's SRPT queue and pacer. See the crate documentation for how to drive it.
#[derive(Debug)]
pub struct Endpoint {
    config: Config,
    max_payload: u32,
    now: Nanos,
    /// The timer tick the endpoint is in, and when it ends, on the clock that leaves out
    /// `stalled` (see `advance`).
    tick: u64,
    tick_end: Nanos,
    /// Time the endpoint was owed a timer run and did not get one: the process was not
    /// scheduled, a handler held the thread, the machine was suspended. Ticks are counted
    /// without it, so such a stall is not silence of the peers (as the module counts the
    /// timer runs in which nothing arrived).
    stalled: Nanos,
    /// Bit per port: bound (server ports) or taken (ephemeral ports).
    ports: Vec<u64>,
    next_ephemeral: u16,
    next_client_id: u64,
    /// Arrival order for messages (SRPT ties, FIFO choices).
    next_birth: u64,
    rpcs: RpcTable,
    peers: PeerTable,
    grants: Grants,
    downlink: Downlink,
    overload: Overload,
    tx: TxQueues,
    timers: TimerQueue,
    events: VecDeque<Event>,
    metrics: Metrics,
    rx_bytes: u64,
    /// Bytes of delivered messages the application still holds (`set_lent_bytes`).
    lent_bytes: u64,
    tx_bytes: u64,
    /// The RPC whose latest DATA packets still owe their bookkeeping (see `after_data`):
    /// it waits while more DATA of the same message follows, and runs before anything else.
    deferred: Option<RpcRef>,
}

/// Why a request's first packet made no server RPC.
#[derive(Debug, Clone, Copy)]
enum NoRpc {
    /// A limit on peers or on their RPCs.
    Limit,
    /// Its message does not fit in `max_rx_bytes` now.
    Memory,
}

/// A run of DATA packets whose payload `place_run` put in their message.
#[derive(Debug, Clone, Copy)]
struct Placed {
    len: u32,
    packets: u32,
}

/// A DATA packet's payload: its bytes, or how many of them `place` put in the message.
#[derive(Debug, Clone, Copy)]
enum Arrived<'a> {
    Bytes(&'a [u8]),
    Placed(u32),
}

impl Endpoint {
    /// An endpoint with no ports bound. Fails if the configuration is invalid.
    pub fn new(config: Config) -> Result<Endpoint, ConfigError> {
        config.validate()?;
        let hasher = Hasher::with_seed(config.seed);
        Ok(Endpoint {
            max_payload: config.max_payload(),
            now: 0,
            tick: 0,
            tick_end: config.tick(),
            stalled: 0,
            ports: alloc::vec![0; 65536 / 64],
            next_ephemeral: MIN_EPHEMERAL_PORT,
            next_client_id: config.first_client_id,
            next_birth: 0,
            rpcs: RpcTable::new(hasher.clone()),
            peers: PeerTable::new(config.max_peers, hasher),
            grants: Grants::new(&config),
            downlink: Downlink::new(&config),
            overload: Overload::default(),
            tx: TxQueues::new(
                Pacer::new(
                    u64::from(config.max_nic_est_backlog_usecs) * NANOS_PER_USEC,
                    config.pacer_batch(),
                ),
                config.pacer_fifo_fraction,
            ),
            timers: TimerQueue::default(),
            events: VecDeque::new(),
            metrics: Metrics::default(),
            rx_bytes: 0,
            lent_bytes: 0,
            tx_bytes: 0,
            deferred: None,
            config,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn port_taken(&self, port: u16) -> bool {
        self.ports[usize::from(port) / 64] & (1 << (port % 64)) != 0
    }

    fn set_port(&mut self, port: u16, taken: bool) {
        let word = &mut self.ports[usize::from(port) / 64];
        if taken {
            *word |= 1 << (port % 64);
        } else {
            *word &= !(1 << (port % 64));
        }
    }

    /// Binds a server port (1..=32767): requests addressed to it are accepted.
    pub fn bind(&mut self, port: u16) -> Result<(), ApiError> {
        if port == 0 || port >= MIN_EPHEMERAL_PORT {
            return Err(ApiError::InvalidPort(port));
        }
        if self.port_taken(port) {
            return Err(ApiError::PortInUse(port));
        }
        self.set_port(port, true);
        Ok(())
    }

    /// Takes a free ephemeral port (32768..=65535), for sending requests only.
    pub fn bind_ephemeral(&mut self) -> Result<u16, ApiError> {
        for _ in 0..MIN_EPHEMERAL_PORT {
            let port = self.next_ephemeral;
            self.next_ephemeral = self.next_ephemeral.checked_add(1).unwrap_or(MIN_EPHEMERAL_PORT);
            if !self.port_taken(port) {
                self.set_port(port, true);
                return Ok(port);
            }
        }
        Err(ApiError::NoEphemeralPort)
    }

    /// Releases a port. Its pending client RPCs fail with [`FailReason::PortClosed`] and its
    /// server RPCs are dropped.
    pub fn unbind(&mut self, port: u16) -> Result<(), ApiError> {
        self.settle_data();
        if port == 0 || !self.port_taken(port) {
            return Err(ApiError::PortNotBound(port));
        }
        self.set_port(port, false);
        let doomed: Vec<RpcRef> = self
            .rpcs
            .refs()
            .filter(|&r| self.rpcs.get(r).is_some_and(|x| x.local_port == port))
            .collect();
        for r in doomed {
            self.fail_or_drop(r, FailReason::PortClosed);
        }
        Ok(())
    }

    /// The next thing the application must learn, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When the endpoint next needs `handle_timeout`, `poll_transmit` or `poll_event`: a time
    /// at or before the last `now` seen whenever a packet or an event is ready (the pacer's
    /// next slot included).
    /// `None` when nothing is pending. A timer set for an RPC that has since ended may still
    /// be reported once (its `handle_timeout` is a no-op). Amortised O(1).
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.deadline().map(Instant::from_nanos)
    }

    /// `poll_timeout` in nanoseconds.
    fn deadline(&mut self) -> Option<Nanos> {
        self.settle_data();
        if !self.tx.control.is_empty() || !self.tx.resends.is_empty() || !self.events.is_empty() {
            return Some(self.now);
        }
        let data = self.peek_sendable().map(|key| {
            if key.bytes_left <= self.config.defer_min_bytes || self.tx.pacer.may_send(self.now) {
                self.now
            } else {
                self.tx.pacer.next_slot()
            }
        });
        if data == Some(self.now) {
            return data; // due now whatever the timers say
        }
        // Timers due by the next tick are checked now (each entry at most once), so a driver
        // is not woken for an RPC that has since ended; later ones are checked as they near.
        let rpcs = &self.rpcs;
        let live = |due: u64, r: RpcRef| {
            rpcs.get(r).is_some_and(|x| x.timer.armed_tick.get() == Some(due))
        };
        self.timers.drop_stale(self.tick + 1, live);
        let timer = self.timers.next_tick().map(|t| self.tick_start(t));
        match (data, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Counters and gauges.
    pub fn metrics(&self) -> Metrics {
        let mut m = self.metrics.clone();
        m.rpcs = self.rpcs.len() as u64;
        m.active_grants = self.grants.num_active() as u64;
        m.grantable = self.grants.num_managed() as u64;
        m.incoming = self.grants.total_incoming();
        m.peers = self.peers.len() as u64;
        m.rx_bytes = self.rx_bytes;
        m.tx_bytes = self.tx_bytes;
        m
    }

    /// Tells the endpoint how many bytes of the messages it delivered the application still
    /// holds (an I/O layer that lends its buffers counts them). They count against
    /// `max_rx_bytes` with the messages being reassembled: while they fill it, new messages
    /// wait. Their senders hear BUSY (a request) or are asked again later (a response), as
    /// from a busy host, and the calls finish late rather than fail. (A response refused
    /// longer than its server's `ack_timeout_ticks` is asked for from the start: the
    /// request runs again.)
    pub fn set_lent_bytes(&mut self, bytes: u64) {
        self.lent_bytes = bytes;
    }

    /// Number of RPCs alive (client and server).
    pub fn rpc_count(&self) -> usize {
        self.rpcs.len()
    }

    /// Where each RPC held stands (which side, its phase, how far its messages got, how
    /// long its peer has been silent), for diagnostics: what a call that never completes
    /// waits for. O(RPCs held).
    pub fn rpcs(&self) -> impl Iterator<Item = RpcInfo> + '_ {
        let tick = self.tick;
        self.rpcs.refs().filter_map(move |r| self.rpcs.get(r)).map(move |x| RpcInfo::of(x, tick))
    }

    fn push_control(&mut self, control: Control) {
        if !self.tx.push_control(control, self.config.max_pending_control) {
            self.metrics.control_overflow += 1;
        }
    }

    /// Runs `f` on the grant scheduler with the state it reads and writes; afterwards every
    /// message granted to is owed data, so its loss timer starts.
    fn grant_cx(&mut self, f: impl FnOnce(&mut Grants, &mut GrantCx<'_>)) {
        let mut cx = GrantCx {
            rpcs: &mut self.rpcs,
            peers: &mut self.peers,
            tx: &mut self.tx,
            config: &self.config,
            metrics: &mut self.metrics,
            now: self.now,
        };
        f(&mut self.grants, &mut cx);
        while let Some(r) = self.grants.take_granted() {
            self.refresh_worry(r);
        }
    }

    /// A message is complete: hand it to the application.
    fn deliver(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get_mut(r) else { return };
        let Some(m) = x.msgin.take() else { return };
        let peer = x.peer;
        self.release_rx(peer, u64::from(m.length));
        let Some(x) = self.rpcs.get_mut(r) else { return };
        self.metrics.message_bytes_in += u64::from(m.length);
        let message = m.buf;
        if x.is_client() {
            // The response completes the RPC: free it, and remember to ack the server.
            let (id, cookie) = (x.id, x.cookie);
            let ack = Ack { client_id: id, server_port: x.remote_port };
            // A full peer flushes its acks in an ACK packet that also names this RPC.
            let flush =
                self.peers.get_mut(x.peer).add_ack(ack).map(|acks| {
                    Control::about(x, ControlBody::Ack { acks, count: MAX_ACKS as u8 })
                });
            self.metrics.responses_received += 1;
            self.events.push_back(Event::ResponseReceived { id, cookie, message });
            self.end_rpc(r);
            if let Some(flush) = flush {
                self.push_control(flush);
            }
        } else {
            x.state = State::InService;
            x.timer.worried = false;
            let event = Event::RequestReceived {
                rpc: ServerRpc { client: x.addr, id: x.id },
                port: x.local_port,
                client_port: x.remote_port,
                message,
            };
            self.metrics.requests_received += 1;
            self.events.push_back(event);
        }
    }

    /// Client RPCs fail with `reason`; server RPCs are dropped silently.
    fn fail_or_drop(&mut self, r: RpcRef, reason: FailReason) {
        if let Some(x) = self.rpcs.get(r)
            && x.is_client()
        {
            self.events.push_back(Event::RpcFailed { id: x.id, cookie: x.cookie, reason });
        }
        self.end_rpc(r);
    }

    /// Frees an RPC and everything it holds.
    fn end_rpc(&mut self, r: RpcRef) {
        if self.rpcs.get(r).is_some_and(|x| x.grant_managed) {
            self.grant_cx(|g, cx| g.end_rpc(cx, r));
        }
        let Some(x) = self.rpcs.get(r) else { return };
        let (rx, tx, peer, client) = (x.rx_bytes(), x.tx_bytes(), x.peer, x.is_client());
        self.rpcs.remove(r);
        self.release_rx(peer, rx);
        self.tx_bytes -= tx;
        if !client {
            let host = self.peers.get(peer).host;
            self.peers.hosts.release(host, tx);
        }
        let p = self.peers.get_mut(peer);
        p.rpcs -= 1;
        if !client {
            p.server_rpcs -= 1;
        }
    }

    /// Puts `r` in the sender's SRPT queue if it has new data it may send.
    fn queue_tx(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get_mut(r) else { return };
        let Some(m) = x.msgout.as_ref() else { return };
        if x.tx_queued || !m.can_send_new() || x.state != State::Outgoing {
            return;
        }
        x.tx_queued = true;
        self.tx.push(TxKey { bytes_left: m.bytes_left(), birth: m.birth, rpc: r });
    }
}
