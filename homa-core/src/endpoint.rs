//! [`Endpoint`]: one host's Homa stack as a state machine, and its driving contract.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::SocketAddr;

use crate::config::{Config, ConfigError};
use crate::downlink::Downlink;
use crate::error::ApiError;
use crate::host::HostBytes;
use crate::metrics::{Metrics, type_index};
use crate::msg::incoming::{InMessage, Rejected};
use crate::msg::outgoing::OutMessage;
use crate::msg::{Payload, PayloadSlice};
use crate::overload::Overload;
use crate::peer::{MAX_PATIENCE, PeerId, PeerTable};
use crate::rpc::{Hasher, Rpc, RpcInfo, RpcRef, RpcTable, State, TimerState};
use crate::sched::grant::{GrantCx, Grants};
use crate::sched::tx::{Control, ControlBody, Pacer, TxKey, TxQueues};
use crate::time::{Instant, NANOS_PER_USEC, Nanos};
use crate::timer::TimerQueue;
use crate::wire::{self, Ack, Body, MAX_ACKS, PacketType, data, header};

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
    /// [`wire::tos_for_priority`] of it.
    pub priority: u8,
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
    /// What each host makes us hold (`max_bytes_per_host`): its messages being received
    /// and the responses to its requests.
    host_bytes: HostBytes,
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
            peers: PeerTable::new(config.max_peers, hasher.clone()),
            host_bytes: HostBytes::new(hasher),
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

    // ------------------------------------------------------------------ ports

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

    // ------------------------------------------------------------------ API calls

    /// Starts an RPC: sends `message` from local port `port` to Homa port `dest_port` at
    /// `dest`. Returns the RPC's id (even); the response or failure arrives as an [`Event`]
    /// carrying `cookie`.
    pub fn send_request(
        &mut self,
        now: Instant,
        port: u16,
        dest: SocketAddr,
        dest_port: u16,
        message: impl Into<Payload>,
        cookie: u64,
    ) -> Result<u64, ApiError> {
        let now = now.as_nanos();
        // Checked before the deferred bookkeeping runs: a call that fails changes nothing.
        let payload = message.into();
        self.check_message(&payload)?;
        if port == 0 || !self.port_taken(port) {
            return Err(ApiError::PortNotBound(port));
        }
        if dest_port == 0 {
            return Err(ApiError::InvalidPort(dest_port));
        }
        self.settle_data();
        self.advance(now);
        let peer = self.peers.get_or_insert(dest, self.now).ok_or(ApiError::TooManyPeers)?;
        let id = self.next_client_id;
        // Wraps to 2 after u64::MAX - 1 (never 0, which means "no ack" on the wire).
        self.next_client_id = self.next_client_id.checked_add(2).unwrap_or(2);
        self.tx_bytes += payload.len() as u64;
        let birth = self.birth();
        self.peers.get_mut(peer).rpcs += 1;
        // Built in the call: one move of the large `Rpc` fewer (BENCHMARKS.md: 204 instructions
        // per RPC).
        let r = self.rpcs.insert(Rpc {
            id,
            peer,
            addr: dest,
            local_port: port,
            remote_port: dest_port,
            state: State::Outgoing,
            cookie,
            msgout: Some(OutMessage::new(payload, self.config.unsched_bytes, birth)),
            msgin: None,
            timer: TimerState::default(),
            tx_queued: false,
            resend_queued: false,
            grant_managed: false,
        });
        self.queue_tx(r);
        self.refresh_worry(r);
        Ok(id)
    }

    /// Sends the response to a request delivered by [`Event::RequestReceived`].
    pub fn send_response(
        &mut self,
        now: Instant,
        rpc: ServerRpc,
        message: impl Into<Payload>,
    ) -> Result<(), ApiError> {
        let now = now.as_nanos();
        // Checked before the deferred bookkeeping runs: a call that fails changes nothing.
        let payload = message.into();
        self.check_message(&payload)?;
        let r = self.rpcs.find_server(rpc.client, rpc.id).ok_or(ApiError::UnknownRpc(rpc.id))?;
        if self.rpcs.get(r).is_none_or(|x| x.state != State::InService) {
            return Err(ApiError::NotAwaitingResponse(rpc.id));
        }
        self.settle_data();
        self.advance(now);
        let x = self.rpcs.get_mut(r).ok_or(ApiError::UnknownRpc(rpc.id))?;
        x.state = State::Outgoing;
        let client = x.addr;
        self.tx_bytes += payload.len() as u64;
        self.host_bytes.hold(client, payload.len() as u64);
        self.next_birth += 1;
        x.msgout = Some(OutMessage::new(payload, self.config.unsched_bytes, self.next_birth));
        self.queue_tx(r);
        Ok(())
    }

    fn check_message(&self, payload: &Payload) -> Result<(), ApiError> {
        self.check_send(payload.len())
    }

    /// Whether a message of `len` bytes could be sent now: [`ApiError::MessageLength`]
    /// unless it holds 1..=`max_message_length` bytes, [`ApiError::TxBufferFull`] while the
    /// bytes of outgoing messages would pass `wmem_max` (a driver can queue it until some
    /// finish). Changes nothing.
    pub fn check_send(&self, len: usize) -> Result<(), ApiError> {
        let max = self.config.max_message_length;
        if len == 0 || len > max as usize {
            return Err(ApiError::MessageLength { len, max });
        }
        if self.tx_bytes + len as u64 > self.config.wmem_max {
            return Err(ApiError::TxBufferFull);
        }
        Ok(())
    }

    /// Abandons a client RPC: it is forgotten without an event (the server is not told,
    /// as with the module's `HOMAIOCABORT`).
    pub fn abort(&mut self, id: u64) -> Result<(), ApiError> {
        self.settle_data();
        if !wire::is_client_id(id) {
            return Err(ApiError::UnknownRpc(id));
        }
        let r = self.rpcs.find_client(id).ok_or(ApiError::UnknownRpc(id))?;
        self.end_rpc(r);
        Ok(())
    }

    /// Forgets a request delivered by [`Event::RequestReceived`] without answering it (load
    /// shedding, or one-way messages in a simulation). The client is not told: it times out
    /// unless it aborts.
    pub fn discard(&mut self, rpc: ServerRpc) -> Result<(), ApiError> {
        self.settle_data();
        let r = self.rpcs.find_server(rpc.client, rpc.id).ok_or(ApiError::UnknownRpc(rpc.id))?;
        self.end_rpc(r);
        Ok(())
    }

    /// The transport learned that `peer` (or only its Homa port `port`, for ICMP port
    /// unreachable) cannot be reached: its client RPCs fail with
    /// [`FailReason::Unreachable`] and its server RPCs are dropped.
    pub fn handle_unreachable(&mut self, peer: SocketAddr, port: Option<u16>) {
        self.settle_data();
        let doomed: Vec<RpcRef> = self
            .rpcs
            .refs()
            .filter(|&r| {
                self.rpcs
                    .get(r)
                    .is_some_and(|x| x.addr == peer && port.is_none_or(|p| p == x.remote_port))
            })
            .collect();
        for r in doomed {
            self.fail_or_drop(r, FailReason::Unreachable);
        }
    }

    // ------------------------------------------------------------------ outputs

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
        let live =
            |due: u64, r: RpcRef| rpcs.get(r).is_some_and(|x| x.timer.armed_tick == Some(due));
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

    /// Writes the next packet into `buf` and says where it goes; `None` when nothing may
    /// be sent now. `buf` must hold [`Config::max_packet_len`] bytes: a shorter one is
    /// refused, and nothing changes.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Result<Option<Transmit>, BufferTooShort> {
        let now = now.as_nanos();
        self.check_buffer(buf)?;
        Ok(self.transmit(now, buf, None))
    }

    /// As [`poll_transmit`](Endpoint::poll_transmit), but a DATA packet of a message longer
    /// than one packet leaves its message bytes out: `buf[..len]` gets the headers, and the
    /// returned slice is the rest of the packet (for a vectored send, without a copy).
    /// Other packets are written whole.
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Result<Option<(Transmit, Option<PayloadSlice>)>, BufferTooShort> {
        let now = now.as_nanos();
        self.check_buffer(buf)?;
        let mut slice = None;
        Ok(self.transmit(now, buf, Some(&mut slice)).map(|t| (t, slice)))
    }

    fn check_buffer(&self, buf: &[u8]) -> Result<(), BufferTooShort> {
        let need = self.config.max_packet_len();
        if buf.len() < need { Err(BufferTooShort { len: buf.len(), need }) } else { Ok(()) }
    }

    /// The next packet; with `gather`, a multi-packet message's bytes go there instead of
    /// into `buf` (see `poll_transmit_gather`). An out-parameter, not a returned slice: the
    /// copying path then returns only a `Transmit` (BENCHMARKS.md: 118 instructions per RPC).
    fn transmit(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        mut gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        self.settle_data();
        self.advance(now);
        if let Some(c) = self.tx.control.pop_front() {
            return Some(self.emit_control(c, buf));
        }
        while let Some(&r) = self.tx.resends.front() {
            if let Some(sent) = self.emit_resend(r, buf, gather.as_deref_mut()) {
                return Some(sent);
            }
            self.tx.resends.pop_front();
            if let Some(x) = self.rpcs.get_mut(r) {
                x.resend_queued = false;
            }
        }
        self.emit_new_data(buf, gather)
    }

    fn emit_control(&mut self, c: Control, buf: &mut [u8]) -> Transmit {
        let body = match c.body {
            ControlBody::Grant { offset, priority } => {
                Body::Grant(wire::grant::Repr { offset, priority })
            }
            ControlBody::Resend { offset, length, priority } => {
                Body::Resend(wire::resend::Repr { offset, length, priority })
            }
            ControlBody::RpcUnknown => Body::RpcUnknown,
            ControlBody::Busy => Body::Busy,
            ControlBody::Cutoffs { cutoffs, version } => Body::Cutoffs(wire::cutoffs::Repr {
                unsched_cutoffs: cutoffs,
                cutoff_version: version,
            }),
            ControlBody::NeedAck => Body::NeedAck,
            ControlBody::Ack { acks, count } => Body::Ack(
                wire::ack::Repr::new(&acks[..usize::from(count)]).expect("at most MAX_ACKS acks"),
            ),
        };
        let header = header::Repr::new(body.packet_type(), c.sport, c.dport, c.id);
        let repr = wire::Repr { header, body };
        let len = repr.emit(buf).expect("buffer holds max_packet_len >= 80 bytes");
        self.count_out(repr.packet_type(), len);
        // The NIC sends control packets too: the module's qdisc counts every Homa packet.
        self.tx.pacer.record(self.now, self.config.wire_time(self.config.wire_bytes(len)));
        Transmit { to: c.to, len, priority: self.config.num_priorities - 1 }
    }

    /// Writes the next retransmitted packet of `r`, if it has one.
    fn emit_resend(
        &mut self,
        r: RpcRef,
        buf: &mut [u8],
        gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        let max_payload = self.max_payload;
        let x = self.rpcs.get_mut(r)?;
        let m = x.msgout.as_mut()?;
        let (start, end, incoming) = m.next_resend(max_payload)?;
        let priority = self.data_priority(r, start)?;
        self.metrics.retransmitted_packets += 1;
        self.emit_data(r, start, end, incoming, priority, true, buf, gather)
    }

    /// The level of `r`'s DATA packet starting at `start`: the receiver's cutoff level
    /// for unscheduled bytes, the latest GRANT's for scheduled ones. A retransmission goes
    /// at the level its original had, whatever the RESEND asks (the module uses the
    /// RESEND's level, the highest for its own receivers: resent bulk data would share
    /// the short messages' class).
    fn data_priority(&self, r: RpcRef, start: u32) -> Option<u8> {
        let x = self.rpcs.get(r)?;
        let m = x.msgout.as_ref()?;
        Some(if start < m.unscheduled {
            self.peers.get(x.peer).unsched_priority(m.length, self.config.num_priorities)
        } else {
            m.sched_priority
        })
    }

    /// Picks the message for the next new DATA packet (SRPT, with the FIFO share) and sends
    /// one packet of it, if the pacer allows.
    fn emit_new_data(
        &mut self,
        buf: &mut [u8],
        gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        let top = self.peek_sendable()?;
        let deferrable = top.bytes_left > self.config.defer_min_bytes;
        if deferrable && !self.tx.pacer.admit(self.now) {
            return None;
        }
        let key = if self.tx.fifo_turn() { self.oldest_sendable().unwrap_or(top) } else { top };
        if key == top {
            self.tx.pop(); // requeued below with its new key if it has more to send
        }
        let x = self.rpcs.get(key.rpc)?;
        let m = x.msgout.as_ref()?;
        let start = m.next_offset;
        let end = m.packet_end(start, self.max_payload);
        let incoming = m.unscheduled;
        let priority = self.data_priority(key.rpc, start)?;
        let sent = self.emit_data(key.rpc, start, end, incoming, priority, false, buf, gather)?;
        self.metrics.message_bytes_out += u64::from(end - start);
        let x = self.rpcs.get_mut(key.rpc)?;
        let m = x.msgout.as_mut()?;
        m.next_offset = end;
        m.sent_tick = self.tick;
        let fully_sent = end == m.length;
        let bytes_left = m.bytes_left();
        let still_sendable = m.can_send_new();
        // Queue it afresh under its new key if it has more to send (after a FIFO pick, its
        // old entry stays in the heap and is skipped as stale).
        x.tx_queued = false;
        if still_sendable {
            x.tx_queued = true;
            self.tx.push(TxKey { bytes_left, birth: key.birth, rpc: key.rpc });
        }
        if fully_sent && !x.is_client() {
            // NEED_ACK starts `request_ack_ticks` after the first tick that sees it done.
            let done = self.tick + 1;
            x.timer.done_tick = Some(done);
            x.timer.asked = 0;
            self.arm(key.rpc, done + u64::from(self.config.request_ack_ticks));
        }
        self.refresh_worry(key.rpc);
        Some(sent)
    }

    /// The SRPT head, after discarding stale entries. O(1) amortised.
    fn peek_sendable(&mut self) -> Option<TxKey> {
        while let Some(key) = self.tx.peek() {
            let valid = self.rpcs.get(key.rpc).and_then(|x| x.msgout.as_ref().map(|m| (x, m)));
            match valid {
                Some((x, m)) if x.tx_queued && m.bytes_left() == key.bytes_left => {
                    if m.can_send_new() && x.state == State::Outgoing {
                        return Some(key);
                    }
                    // Waiting for grants: leave the queue until a GRANT arrives.
                    self.tx.pop();
                    if let Some(x) = self.rpcs.get_mut(key.rpc) {
                        x.tx_queued = false;
                    }
                }
                _ => {
                    self.tx.pop();
                }
            }
        }
        None
    }

    /// The oldest queued message that can send now (the pacer's FIFO pick).
    fn oldest_sendable(&self) -> Option<TxKey> {
        self.tx
            .queued()
            .filter(|k| {
                self.rpcs.get(k.rpc).is_some_and(|x| {
                    x.tx_queued
                        && x.state == State::Outgoing
                        && x.msgout
                            .as_ref()
                            .is_some_and(|m| m.bytes_left() == k.bytes_left && m.can_send_new())
                })
            })
            .min_by_key(|k| (k.birth, k.rpc))
    }

    /// Writes one DATA packet for bytes [start, end) of `r`'s outgoing message: whole,
    /// unless `gather` and the message is longer than one packet (for one packet a copy
    /// costs less than sharing its bytes): then its headers, with those bytes put in
    /// `gather`.
    #[allow(clippy::too_many_arguments)]
    fn emit_data(
        &mut self,
        r: RpcRef,
        start: u32,
        end: u32,
        incoming: u32,
        priority: u8,
        retransmit: bool,
        buf: &mut [u8],
        gather: Option<&mut Option<PayloadSlice>>,
    ) -> Option<Transmit> {
        let x = self.rpcs.get_mut(r)?;
        let m = x.msgout.as_mut()?;
        let peer = self.peers.get_mut(x.peer);
        let mut acks = [Ack::NONE; MAX_ACKS];
        let ack = if peer.take_acks(1, &mut acks) == 1 { acks[0] } else { Ack::NONE };
        let out = &mut buf[..data::HEADER_LEN];
        let mut header = header::Repr::new(PacketType::Data, x.local_port, x.remote_port, x.id);
        header.sequence = start;
        header.emit(PacketType::Data, &mut header::Packet::new_unchecked(&mut *out));
        let fields = data::Repr {
            message_length: m.length,
            incoming,
            ack,
            cutoff_version: peer.cutoff_version,
            retransmit: u8::from(retransmit),
            pad: [0; 3],
            seg_offset: start,
        };
        fields.emit(&mut data::Packet::new_unchecked(out));
        let len = data::HEADER_LEN + (end - start) as usize;
        let written = match gather {
            Some(slice) if m.length > self.max_payload => {
                *slice = Some(PayloadSlice::new(&mut m.payload, start, end));
                data::HEADER_LEN
            }
            _ => {
                buf[data::HEADER_LEN..len]
                    .copy_from_slice(&m.payload.as_slice()[start as usize..end as usize]);
                len
            }
        };
        let to = x.addr;
        self.tx.pacer.record(self.now, self.config.wire_time(self.config.wire_bytes(len)));
        self.count_out(PacketType::Data, len);
        Some(Transmit { to, len: written, priority })
    }

    fn count_out(&mut self, t: PacketType, len: usize) {
        let i = type_index(t);
        self.metrics.packets_out_by_type[i] += 1;
        self.metrics.bytes_out_by_type[i] += len as u64;
    }

    // ------------------------------------------------------------------ inputs

    fn advance(&mut self, now: Nanos) {
        self.now = self.now.max(now);
        if self.now - self.stalled < self.tick_end {
            return; // the common case: still in the same tick
        }
        // A timer due more than a tick before now did not run when it was due: the
        // endpoint was stalled since then, and those ticks do not count. (Whoever drives
        // by `poll_timeout` runs each tick's timers within the tick.)
        let len = self.config.tick();
        if let Some(due) = self.timers.next_tick() {
            let late = self.now.saturating_sub(self.tick_start(due).saturating_add(len));
            // A tick boundary passed: the endpoint runs at least one tick on (the clock
            // never goes back to a tick already seen).
            let room = (self.now - self.stalled).saturating_sub((self.tick + 1) * len);
            self.stalled += late.min(room);
        }
        // A division only when a tick boundary passes, not on every call.
        self.tick = (self.now - self.stalled) / len;
        self.tick_end = (self.tick + 1).saturating_mul(len);
    }

    /// When tick `tick` starts, on the caller's clock.
    fn tick_start(&self, tick: u64) -> Nanos {
        tick.saturating_mul(self.config.tick()).saturating_add(self.stalled)
    }

    /// The current timer tick: tick T spans [T * tick, (T + 1) * tick).
    fn tick(&self) -> u64 {
        self.tick
    }

    /// Handles one received packet (the bytes from the Homa header on) from transport
    /// address `from`. Malformed bytes return the error and change nothing but counters.
    pub fn handle_packet(
        &mut self,
        now: Instant,
        from: SocketAddr,
        bytes: &[u8],
    ) -> Result<(), wire::Error> {
        let now = now.as_nanos();
        self.receive(now, from, bytes, None)
    }

    /// Receive-in-place, for I/O layers that can read a datagram's first bytes before the
    /// rest (e.g. with `MSG_PEEK`). When the DATA packet from `from` that starts with
    /// `header` (at least [`data::HEADER_LEN`] bytes) and carries `payload_len` bytes of
    /// payload extends its message's bytes in order, calls `fill` with the message's
    /// buffer, which holds the bytes before the packet's and has room for its payload:
    /// `fill` appends the payload (e.g. receives it straight into the spare capacity,
    /// sparing the copy that [`handle_packet`](Self::handle_packet) makes) and returns
    /// whether it did. The packet is then handled as `handle_packet` would handle it.
    /// Returns whether `fill` was called; if not, receive the packet and hand it to
    /// `handle_packet` as usual. Whatever `fill` leaves but the packet's payload (it
    /// returned false, or appended another length) is discarded, and the packet with it.
    pub fn place(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: &[u8],
        payload_len: usize,
        fill: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> bool {
        self.place_run(now, from, header, payload_len, 1, fill)
    }

    /// [`place`](Self::place) for a run of `packets` DATA packets of one message that
    /// arrived together (a GRO batch of a GSO sender's packets): `header` is the first's,
    /// `payload_len` the bytes of all, which `fill` appends. The caller has checked that
    /// the others continue the first (`wire::data::continues`): they are handled as one
    /// packet, and counted as `packets`.
    pub fn place_run(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: &[u8],
        payload_len: usize,
        packets: u32,
        fill: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> bool {
        let now = now.as_nanos();
        let Some(header) = header.get(..data::HEADER_LEN) else { return false };
        let Ok(repr) = wire::Repr::parse_up_to(header, self.config.max_message_length) else {
            return false;
        };
        let Body::Data { repr: d, .. } = repr.body else { return false };
        let h = &repr.header;
        let Ok(len) = u32::try_from(payload_len) else { return false };
        let Some(r) = self.find_rpc(from, h) else { return false };
        let placeable = self.rpcs.get(r).is_some_and(|x| {
            x.state == State::Incoming
                && x.local_port == h.dport
                && x.msgin.as_ref().is_some_and(|m| m.length == d.message_length)
        });
        let offset = data::effective_offset(d.seg_offset, h.sequence);
        let Some(m) = self.rpcs.get_mut(r).and_then(|x| x.msgin.as_mut()).filter(|_| placeable)
        else {
            return false;
        };
        let Some(buf) = m.place(offset, len) else { return false };
        let before = buf.len();
        if !fill(buf) || buf.len() != before + payload_len {
            buf.truncate(before);
            return true;
        }
        // Parsed above: it parses again.
        let _ = self.receive(now, from, header, Some(Placed { len, packets: packets.max(1) }));
        true
    }

    /// `handle_packet`, or with `placed`, `place_run` (`bytes` is then the first header,
    /// and the run's payload is in its message already).
    fn receive(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        bytes: &[u8],
        placed: Option<Placed>,
    ) -> Result<(), wire::Error> {
        if now > self.now {
            self.settle_data(); // at the time of the packets that owe it
        }
        self.advance(now);
        self.metrics.packets_in += 1;
        let repr = match wire::Repr::parse_up_to(bytes, self.config.max_message_length) {
            Ok(repr) => repr,
            Err(e) => {
                match e {
                    wire::Error::BadMessageLength { len, max } if len > max => {
                        self.metrics.drops.too_long += 1;
                    }
                    _ => self.metrics.drops.malformed += 1,
                }
                return Err(e);
            }
        };
        let i = type_index(repr.packet_type());
        self.metrics.packets_in_by_type[i] += 1;
        let placed_len = placed.map(|p| p.len);
        self.metrics.bytes_in_by_type[i] += (bytes.len() + placed_len.unwrap_or(0) as usize) as u64;
        if self.dispatch(from, &repr, placed_len) {
            self.metrics.accepted += 1;
            // The rest of a placed run, counted as what they are: accepted packets.
            if let Some(more) = placed.map(|p| u64::from(p.packets - 1)).filter(|&n| n > 0) {
                self.metrics.packets_in += more;
                self.metrics.accepted += more;
                self.metrics.packets_in_by_type[i] += more;
                self.metrics.bytes_in_by_type[i] += more * bytes.len() as u64;
            }
        }
        Ok(())
    }

    /// Routes a valid packet (DATA with `placed_len`: that many bytes of payload are in its
    /// message already); returns whether it was accepted (drops are counted here).
    fn dispatch(&mut self, from: SocketAddr, p: &wire::Repr<'_>, placed_len: Option<u32>) -> bool {
        let h = &p.header;
        let id = wire::local_id(h.sender_id);
        let server_side = !wire::is_client_id(id);
        // The destination port must be open, and a request needs a server port.
        if h.dport == 0
            || !self.port_taken(h.dport)
            || (server_side && h.dport >= MIN_EPHEMERAL_PORT)
        {
            self.metrics.drops.no_port += 1;
            return false;
        }
        let data = matches!(p.body, Body::Data { .. });
        // A run of DATA for one message (a GRO batch) looks its RPC up once.
        let same = |x: &Rpc| (x.id, x.addr, x.local_port) == (id, from, h.dport);
        let rpc = (self.deferred)
            .filter(|&r| data && self.rpcs.get(r).is_some_and(same))
            .or_else(|| self.find_rpc(from, h));
        if self.deferred.is_some() && (rpc != self.deferred || !data) {
            self.settle_deferred();
        }
        // The peer is there (`Peer::heard`); DATA says so once per run, in `handle_data`.
        if !data && let Some(x) = rpc.and_then(|r| self.rpcs.get(r)) {
            self.peers.get_mut(x.peer).heard = self.tick as u32;
        }
        match p.body {
            Body::Data { repr, payload } => {
                let offset = data::effective_offset(repr.seg_offset, h.sequence);
                let payload = match placed_len {
                    Some(len) => Arrived::Placed(len),
                    None => Arrived::Bytes(payload),
                };
                self.handle_data(from, h, id, rpc, &repr, offset, payload)
            }
            Body::Grant(g) => self.with_rpc(rpc, |ep, r| ep.handle_grant(r, g)),
            Body::Resend(rs) => self.handle_resend(from, h, id, rpc, rs),
            Body::RpcUnknown => self.with_rpc(rpc, |ep, r| ep.handle_rpc_unknown(r)),
            Body::Busy => self.with_rpc(rpc, |ep, r| {
                ep.busy_answered(r);
                ep.reset_silence(r);
            }),
            Body::Cutoffs(c) => match self.peers.get_or_insert(from, self.now) {
                Some(peer) => {
                    self.peers.get_mut(peer).set_cutoffs(c.unsched_cutoffs, c.cutoff_version);
                    true
                }
                None => {
                    self.metrics.drops.peer_limit += 1;
                    false
                }
            },
            Body::NeedAck => self.handle_need_ack(from, h, id, rpc),
            Body::Ack(a) => {
                // ACKs go from clients to servers: only a server RPC ends by one. (A client
                // RPC ends with an event; an ACK naming one is bogus, from whoever sent it.)
                if let Some(r) = rpc.filter(|_| server_side) {
                    self.end_rpc(r);
                }
                for ack in a.acks() {
                    self.handle_ack(from, *ack);
                }
                true
            }
            Body::Freeze => {
                self.metrics.drops.freeze += 1;
                false
            }
        }
    }

    /// The RPC a packet with header `h` from `from` is about, if it exists.
    fn find_rpc(&self, from: SocketAddr, h: &header::Repr) -> Option<RpcRef> {
        let id = wire::local_id(h.sender_id);
        if wire::is_client_id(id) {
            self.rpcs
                .find_client(id)
                .filter(|&r| self.rpcs.get(r).is_some_and(|x| x.local_port == h.dport))
        } else {
            self.rpcs.find_server(from, id)
        }
    }

    fn with_rpc(&mut self, rpc: Option<RpcRef>, f: impl FnOnce(&mut Endpoint, RpcRef)) -> bool {
        match rpc {
            Some(r) => {
                f(self, r);
                true
            }
            None => {
                self.metrics.drops.unknown_rpc += 1;
                false
            }
        }
    }

    /// Any DATA, GRANT or BUSY for an RPC restarts its silence count.
    fn reset_silence(&mut self, r: RpcRef) {
        let tick = self.tick();
        let top = self.config.num_priorities - 1;
        let Some(x) = self.rpcs.get_mut(r) else { return };
        // The lowest level of the bytes it waits for: the first missing byte's, or the last
        // granted one's (the two sides of `unsched_end`). A response not begun: the top.
        let level = match x.msgin.as_ref().filter(|_| x.state == State::Incoming) {
            Some(m) => {
                let missing = m.gaps.first().map_or(m.recv_end, |g| g.start);
                m.level_at(missing).min(m.level_at(m.granted.saturating_sub(1)))
            }
            None => top,
        };
        let t = &mut x.timer;
        t.silent_since = tick;
        t.asked = 0;
        t.restarts = 0;
        t.stale_until = 0;
        t.held_level = level;
        t.held_at = self.downlink.held(tick, level);
        t.excused_at = self.overload.excused();
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_data(
        &mut self,
        from: SocketAddr,
        h: &header::Repr,
        id: u64,
        rpc: Option<RpcRef>,
        d: &data::Repr,
        offset: u32,
        payload: Arrived<'_>,
    ) -> bool {
        let r = match rpc {
            Some(r) => r,
            None if !wire::is_client_id(id) => match self.new_server_rpc(from, h, id, d) {
                Ok(r) => r,
                Err(NoRpc::Memory) if offset == 0 => {
                    // The request waits for memory (delivered messages the application
                    // holds, or others in reassembly): its client hears that we are busy,
                    // not silence, and sends it again when its RESEND finds no RPC here.
                    let busy = Control {
                        to: from,
                        sport: h.dport,
                        dport: h.sport,
                        id,
                        body: ControlBody::Busy,
                    };
                    self.push_control(busy);
                    return false;
                }
                Err(_) => return false,
            },
            None => {
                self.metrics.drops.unknown_rpc += 1;
                return false;
            }
        };
        if d.ack.is_some() {
            self.handle_ack(from, d.ack);
        }
        // A client's first response packet creates the incoming message.
        let Some(x) = self.rpcs.get(r) else { return true };
        if x.is_client() && x.state == State::Outgoing {
            // Counted for the host the request went to, where `release_rx` finds it.
            if !self.reserve_rx(x.addr, d.message_length) {
                // The response waits for memory: the server is alive, and our RESENDs
                // ask for it again later.
                self.reset_silence(r);
                return false;
            }
            let birth = self.birth();
            let level = self.config.unsched_level(d.message_length);
            let x = self.rpcs.get_mut(r).expect("checked above");
            x.state = State::Incoming;
            x.msgin = Some(InMessage::new(d.message_length, d.incoming, level, birth));
        }
        let x = self.rpcs.get_mut(r).expect("checked above");
        let (peer, state) = (x.peer, x.state);
        let Some(m) = x.msgin.as_mut().filter(|_| state == State::Incoming) else {
            self.metrics.drops.not_receiving += 1;
            return false;
        };
        if m.length != d.message_length {
            self.metrics.drops.inconsistent += 1;
            return false;
        }
        let len = match payload {
            Arrived::Bytes(bytes) => bytes.len(),
            Arrived::Placed(len) => len as usize,
        };
        let tick = self.tick;
        let wire_bytes = self.config.wire_bytes(data::HEADER_LEN + len);
        self.downlink.record(tick, wire_bytes, m.level_at(offset));
        let max_gaps = self.config.max_gaps as usize;
        let added = match payload {
            Arrived::Bytes(bytes) => m.add(offset, bytes, max_gaps),
            Arrived::Placed(len) => m.add_placed(offset, len, max_gaps),
        };
        let (complete, grantable) = (m.is_complete(), m.grantable);
        if added.is_ok() && d.retransmit != 0 {
            // Resent bytes that fill a hole: a RESEND found a loss. Ask promptly again.
            self.peers.get_mut(peer).patience = 0;
        }
        self.send_cutoffs_if_stale(r, peer, d.cutoff_version);
        // The rest waits while DATA of this message keeps coming (a GRO batch, a run in the
        // receive queue): it reads the message's state, which the run's last packet settles.
        // (The module too checks grants once per RPC per batch of packets.)
        if added.is_ok() && !complete {
            self.deferred = Some(r); // (`dispatch` settled any other RPC's)
            return true;
        }
        self.settle_data(); // the run's earlier packets, before this one ends it
        self.peers.get_mut(peer).heard = tick as u32;
        match added {
            Ok(()) => {}
            Err(Rejected::Duplicate) => self.metrics.drops.duplicate += 1,
            Err(Rejected::PastEnd) => self.metrics.drops.inconsistent += 1,
            Err(Rejected::TooManyGaps) => self.metrics.drops.gap_limit += 1,
        }
        // Data that cannot belong to the message (past its end, or of another length above)
        // is no sign of progress: a sender that disagrees about the message must not keep it
        // alive. (Fuzz finding: a request whose length was damaged in flight drew RESENDs
        // that the client answered with DATA the server dropped as inconsistent, each
        // resetting its silence, forever.)
        if added != Err(Rejected::PastEnd) {
            self.reset_silence(r);
        }
        // Also for a dropped packet: it may have created the message (an empty or
        // out-of-reach first packet), which must then be granted to and watched by the
        // timers like any other, or it would hold its memory forever.
        if grantable {
            self.grant_cx(|g, cx| g.check_rpc(cx, r));
        }
        if added.is_err() {
            self.refresh_worry(r);
            return false;
        }
        self.deliver(r);
        true
    }

    /// The bookkeeping after DATA that extends a message: its silence count restarts, the
    /// grant scheduler places it again and sends what is due, its loss timer follows.
    fn after_data(&mut self, r: RpcRef) {
        self.reset_silence(r);
        if self.rpcs.get(r).and_then(|x| x.msgin.as_ref()).is_some_and(|m| m.grantable) {
            self.grant_cx(|g, cx| g.check_rpc(cx, r));
        }
        self.refresh_worry(r);
    }

    /// Runs the bookkeeping that DATA packets deferred, if any (see `after_data`). Before
    /// anything that reads or changes RPCs, and before time moves.
    #[inline]
    fn settle_data(&mut self) {
        if self.deferred.is_some() {
            self.settle_deferred();
        }
    }

    #[inline(never)]
    fn settle_deferred(&mut self) {
        if let Some(r) = self.deferred.take() {
            self.after_data(r);
        }
    }

    /// Creates a server RPC for the first DATA of a request, within the limits.
    fn new_server_rpc(
        &mut self,
        from: SocketAddr,
        h: &header::Repr,
        id: u64,
        d: &data::Repr,
    ) -> Result<RpcRef, NoRpc> {
        let Some(peer) = self.peers.get_or_insert(from, self.now) else {
            self.metrics.drops.peer_limit += 1;
            return Err(NoRpc::Limit);
        };
        if self.peers.get(peer).server_rpcs >= self.config.max_rpcs_per_peer {
            self.metrics.drops.rpc_limit += 1;
            return Err(NoRpc::Limit);
        }
        if !self.reserve_rx(from, d.message_length) {
            return Err(NoRpc::Memory);
        }
        let birth = self.birth();
        let level = self.config.unsched_level(d.message_length);
        let p = self.peers.get_mut(peer);
        p.rpcs += 1;
        p.server_rpcs += 1;
        Ok(self.rpcs.insert(Rpc {
            id,
            peer,
            addr: from,
            local_port: h.dport,
            remote_port: h.sport,
            state: State::Incoming,
            cookie: 0,
            msgout: None,
            msgin: Some(InMessage::new(d.message_length, d.incoming, level, birth)),
            timer: TimerState::default(),
            tx_queued: false,
            resend_queued: false,
            grant_managed: false,
        }))
    }

    /// Reserves reassembly memory for a new message from `from`, or counts the drop.
    fn reserve_rx(&mut self, from: SocketAddr, length: u32) -> bool {
        let length = u64::from(length);
        if self.rx_bytes + self.lent_bytes + length > self.config.max_rx_bytes {
            self.metrics.drops.rx_memory += 1;
            return false;
        }
        if !self.host_bytes.reserve(from, length, self.config.max_bytes_per_host) {
            self.metrics.drops.host_memory += 1;
            return false;
        }
        self.rx_bytes += length;
        true
    }

    /// Gives back what [`reserve_rx`](Self::reserve_rx) reserved.
    fn release_rx(&mut self, from: SocketAddr, length: u64) {
        self.rx_bytes -= length;
        self.host_bytes.release(from, length);
    }

    fn birth(&mut self) -> u64 {
        self.next_birth += 1;
        self.next_birth
    }

    /// Sends our CUTOFFS when a peer's DATA carries a stale version (one per tick per peer).
    fn send_cutoffs_if_stale(&mut self, r: RpcRef, peer: PeerId, version: u16) {
        let tick = self.tick();
        let p = self.peers.get_mut(peer);
        if version == self.config.cutoff_version || p.cutoffs_sent_tick == Some(tick) {
            return;
        }
        p.cutoffs_sent_tick = Some(tick);
        let Some(x) = self.rpcs.get(r) else { return };
        let body = ControlBody::Cutoffs {
            cutoffs: self.config.advertised_cutoffs(),
            version: self.config.cutoff_version,
        };
        let control = x.control(body);
        self.push_control(control);
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
        let from = x.addr;
        self.release_rx(from, u64::from(m.length));
        let Some(x) = self.rpcs.get_mut(r) else { return };
        self.metrics.message_bytes_in += u64::from(m.length);
        let message = m.buf;
        if x.is_client() {
            // The response completes the RPC: free it, and remember to ack the server.
            let (id, cookie) = (x.id, x.cookie);
            let ack = Ack { client_id: id, server_port: x.remote_port };
            // A full peer flushes its acks in an ACK packet that also names this RPC.
            let flush = self
                .peers
                .get_mut(x.peer)
                .add_ack(ack)
                .map(|acks| x.control(ControlBody::Ack { acks, count: MAX_ACKS as u8 }));
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

    fn handle_grant(&mut self, r: RpcRef, g: wire::grant::Repr) {
        self.reset_silence(r);
        let Some(x) = self.rpcs.get_mut(r) else { return };
        if x.state != State::Outgoing {
            return;
        }
        let Some(m) = x.msgout.as_mut() else { return };
        m.grant(g.offset);
        m.sched_priority = g.priority;
        self.queue_tx(r);
        self.refresh_worry(r);
    }

    fn handle_resend(
        &mut self,
        from: SocketAddr,
        h: &header::Repr,
        id: u64,
        rpc: Option<RpcRef>,
        rs: wire::resend::Repr,
    ) -> bool {
        let reply = |body| Control { to: from, sport: h.dport, dport: h.sport, id, body };
        let Some(r) = rpc else {
            self.push_control(reply(ControlBody::RpcUnknown));
            return true;
        };
        // A peer asking for our message is alive and waiting on us: while we send it (or wait
        // for grants to), its RESENDs count as hearing from it (the module does not count
        // them; we do, so a server waiting for grants does not time out while its client asks
        // for data). Not while we receive: then only the data we asked for does, or two sides
        // each waiting on the other (RESEND one way, BUSY back) would keep each other alive.
        if self.rpcs.get(r).is_some_and(|x| x.state == State::Outgoing) {
            self.reset_silence(r);
        }
        let Some(x) = self.rpcs.get_mut(r) else { return true };
        let sending = x.is_client() || x.state == State::Outgoing;
        let Some(m) = x.msgout.as_mut().filter(|_| sending) else {
            // A server still working on the request: keep the client waiting.
            self.push_control(reply(ControlBody::Busy));
            return true;
        };
        let tx_end = m.next_offset;
        let end = match rs.length {
            wire::resend::ALL_SENT => tx_end,
            length => rs.offset.saturating_add(length),
        };
        // Asked for bytes beyond the grant: a GRANT must have been lost.
        let grant_lost = end > m.granted;
        if grant_lost {
            m.grant(end);
        }
        // Granted bytes still unsent: we chose to send other messages first, and the asker
        // heard nothing because of that, not because of a loss; what it lacks may be on its
        // way. BUSY, as the module does: a real gap is asked for again once all granted is
        // out. Otherwise resend what was sent of the range; if nothing was, BUSY too. Not
        // for a range past the end of the message, which never comes (the asker has another
        // idea of the message, e.g. a damaged length): it must time out, not wait for ever.
        // New data sent within the last few ticks: the asker's RESEND crossed it (the asker
        // counts `resend_ticks` silent ticks before asking, so it was not lost yet): BUSY.
        let recent = self.tick.saturating_sub(m.sent_tick)
            < u64::from(self.config.resend_ticks.saturating_sub(1).max(1));
        let behind = tx_end < m.granted || recent;
        if !behind && m.queue_resend(rs.offset, end, self.max_payload) && !x.resend_queued {
            x.resend_queued = true;
            self.tx.resends.push_back(r);
        }
        if (behind || rs.offset >= tx_end) && rs.offset < m.length {
            self.push_control(reply(ControlBody::Busy));
        }
        if grant_lost {
            self.queue_tx(r);
        }
        self.refresh_worry(r);
        true
    }

    /// A BUSY answered our RESEND for granted bytes: the sender still had them queued (it
    /// sends shorter messages first, or its host fell behind), so none was lost. Its next
    /// silences are given longer before we ask again (`Peer::patience`).
    fn busy_answered(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get(r) else { return };
        if x.state == State::Incoming && x.timer.asked > 0 {
            let p = self.peers.get_mut(x.peer);
            p.patience = (p.patience + 1).min(MAX_PATIENCE);
        }
    }

    fn handle_rpc_unknown(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get_mut(r) else { return };
        if !x.is_client() {
            self.end_rpc(r);
            return;
        }
        if self.tick < x.timer.stale_until {
            return; // an answer to a RESEND from before the last restart (see below)
        }
        if x.state == State::Incoming {
            // The server forgot the RPC while answering it (it gave up waiting for our
            // grants while we were stalled, or it restarted): the rest of the response
            // never comes. Ask again from the start, as for a lost request. (The module
            // ignores this and times out; a restart can re-execute the request in both
            // cases.)
            if x.grant_managed {
                self.grant_cx(|g, cx| g.end_rpc(cx, r));
            }
            let Some(x) = self.rpcs.get_mut(r) else { return };
            let partial = x.msgin.take().map_or(0, |m| m.length);
            x.state = State::Outgoing;
            let from = x.addr;
            self.release_rx(from, u64::from(partial));
        }
        let Some(x) = self.rpcs.get_mut(r) else { return };
        if x.state != State::Outgoing {
            return;
        }
        let Some(m) = x.msgout.as_mut() else { return };
        // The server lost everything: send all we sent again.
        if m.queue_resend(0, m.next_offset, self.max_payload) && !x.resend_queued {
            x.resend_queued = true;
            self.tx.resends.push_back(r);
        }
        self.metrics.restarts += 1;
        // The server is alive and gets the request again, but the silence began before it
        // could answer: a user-space server may have been stalled for most of it (the
        // module's kernel code never is), which would leave the resent request only what
        // remains of `timeout_ticks`. So the silence starts over (the module's does not), a
        // few times, as the resent request may be lost too; a server that keeps forgetting
        // the request, and says nothing else, must still time out.
        //
        // The RESENDs sent since the first of this silence (or since the last restart) may
        // still draw RPC_UNKNOWNs, each of which would send the request once more (a client
        // that read its socket late, after a stall, sent storms of requests). The first
        // came back within the time since then, so that long from now the rest have: until
        // then none restarts the RPC, unless the server speaks of it first (then they have
        // come). At most a quarter of the timeout, as the request resent now may be lost
        // too, and the next RPC_UNKNOWN then has to count.
        let tick = self.tick;
        let first_resend =
            x.timer.silent_since.max(x.timer.restarted_at) + u64::from(self.config.resend_ticks);
        let most = u64::from(self.config.timeout_ticks / 4);
        let quiet = tick.saturating_sub(first_resend).min(most);
        let restarts = x.timer.restarts;
        if restarts < RESTARTS_THAT_END_SILENCE {
            self.reset_silence(r);
        }
        if let Some(x) = self.rpcs.get_mut(r) {
            x.timer.restarts = restarts.saturating_add(1);
            x.timer.restarted_at = tick;
            x.timer.stale_until = tick + quiet;
        }
        // Bytes it may send but has not: back in the sender's queue, which dropped it while
        // it was receiving (fuzz finding: DATA naming a request still being sent turned it to
        // receiving, and after this restart it sent nothing more, with no deadline).
        self.queue_tx(r);
        self.refresh_worry(r);
    }

    fn handle_need_ack(
        &mut self,
        from: SocketAddr,
        h: &header::Repr,
        id: u64,
        rpc: Option<RpcRef>,
    ) -> bool {
        if let Some(r) = rpc {
            // Still receiving the response: not safe to ack; ask for the rest instead.
            self.request_retransmission(r);
            return true;
        }
        let mut acks = [Ack::NONE; MAX_ACKS];
        let count = match self.peers.find(from) {
            Some(peer) => self.peers.get_mut(peer).take_acks(MAX_ACKS, &mut acks),
            None => 0,
        };
        let body = ControlBody::Ack { acks, count: count as u8 };
        self.push_control(Control { to: from, sport: h.dport, dport: h.sport, id, body });
        true
    }

    /// A client acknowledged a finished RPC: the server may forget it.
    fn handle_ack(&mut self, from: SocketAddr, ack: Ack) {
        let Some(r) = self.rpcs.find_server(from, wire::local_id(ack.client_id)) else { return };
        if self.rpcs.get(r).is_some_and(|x| x.local_port == ack.server_port) {
            self.end_rpc(r);
        }
    }

    // ------------------------------------------------------------------ timers

    /// How many arriving packets this host has dropped so far before the endpoint saw them
    /// (for a socket, `SK_MEMINFO_DROPS`: its receive buffer was full). Tell it before each
    /// [`handle_timeout`](Self::handle_timeout) if the I/O layer can know: while the count
    /// grows, RPCs count a tenth of each tick as silence, so an overloaded host drains its
    /// input before it asks for more, and fails no call whose peer is alive.
    pub fn note_input_drops(&mut self, now: Instant, dropped: u64) {
        self.advance(now.as_nanos());
        self.overload.read(self.tick, dropped);
    }

    /// Runs timer work due at `now`: RESENDs, NEED_ACKs and timeouts. A call with nothing
    /// due changes nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = now.as_nanos();
        self.settle_data();
        self.advance(now);
        let tick = self.tick();
        loop {
            // Sorted again each time (O(1) unless something new is due): running one timer
            // may arm another for this tick, which must run now, not at the next call.
            let rpcs = &self.rpcs;
            self.timers.sort_recent(tick, |due, r| {
                rpcs.get(r).is_some_and(|x| x.timer.armed_tick == Some(due))
            });
            let Some((due, r)) = self.timers.pop_due(tick) else { break };
            let Some(x) = self.rpcs.get_mut(r) else { continue };
            if x.timer.armed_tick != Some(due) {
                continue; // superseded by a later plan
            }
            x.timer.armed_tick = None;
            self.check_rpc_timer(r, tick);
        }
    }

    /// `homa_timer_check_rpc` for one RPC at `tick`.
    fn check_rpc_timer(&mut self, r: RpcRef, tick: u64) {
        let Some(x) = self.rpcs.get(r) else { return };
        if let Some(done) = x.timer.done_tick {
            // A server whose response is out asks for the ack `request_ack_ticks` later,
            // then after 1, 2, 4 ... ticks (at most 32: `NEED_ACK_BACKOFFS`) until
            // `ack_timeout_ticks`. A client that answers does at once; one that is stalled
            // with a thousand responses waiting is not sent a thousand NEED_ACKs a tick,
            // which would overflow its socket when it resumes. (The module asks each tick.)
            let (first, end) = (
                done + u64::from(self.config.request_ack_ticks),
                done + u64::from(self.config.ack_timeout_ticks),
            );
            if tick >= end {
                self.metrics.server_timeouts += 1;
                self.end_rpc(r);
                return;
            }
            let mut next = first;
            if tick >= first {
                let need_ack = x.control(ControlBody::NeedAck);
                self.push_control(need_ack);
                let Some(x) = self.rpcs.get_mut(r) else { return };
                next = tick + (1 << x.timer.asked.min(NEED_ACK_BACKOFFS));
                x.timer.asked += 1;
            }
            self.arm(r, next.min(end));
            return;
        }
        self.refresh_worry(r);
        let Some(x) = self.rpcs.get(r) else { return };
        if !x.timer.worried {
            return;
        }
        let c = &self.config;
        // A server waiting for grants hears nothing while its client grants other messages
        // first (more than `max_overcommit` arriving, the rest queued): it keeps its response
        // as long as one waiting for an ACK does, far longer than an RPC the peer owes data.
        let waits_for_grants = !x.is_client() && x.state == State::Outgoing;
        let timeout = if waits_for_grants { c.ack_timeout_ticks } else { c.timeout_ticks };
        let (resend, interval, timeout) =
            (u64::from(c.resend_ticks), u64::from(c.resend_interval), u64::from(timeout));
        let mut silent = tick.saturating_sub(x.timer.silent_since);
        // A client is owed nothing either while the server has its request in hand: while
        // the request waits for grants (the server grants shortest first, so a long one may
        // wait behind many; a lost GRANT is found by the server's own RESEND for what it
        // granted), and once it is all sent if the server granted some of it (the server
        // asks for what it lacks itself, and a lost response draws its NEED_ACK, which the
        // client answers with a RESEND). A request never granted may have been lost whole:
        // it is asked after as usual. Such a client only checks that the server is there,
        // by RESEND (answered with BUSY) halfway to the timeout. Any packet from the server
        // shows it is; the RPC's own silence counts a tenth (`timeout_ticks` over
        // `ack_timeout_ticks`, the time a server waits for a stalled client), for a server
        // that restarted and forgot it but talks of others. (The module asks every
        // `resend_interval`: thousands of RESENDs under load, for no lost packet.)
        let server_has_turn = x.is_client()
            && x.state == State::Outgoing
            && x.msgout
                .as_ref()
                .is_some_and(|m| m.next_offset < m.length || m.granted > m.unscheduled);
        let resend = if server_has_turn {
            let heard = u64::from((tick as u32).wrapping_sub(self.peers.get(x.peer).heard));
            let own = silent * timeout / u64::from(c.ack_timeout_ticks).max(timeout);
            silent = heard.min(silent).max(own);
            timeout / 2
        } else if x.state == State::Incoming {
            (resend << self.peers.get(x.peer).patience).min(timeout / 2)
        } else {
            resend
        };
        // Less the ticks in which this host dropped input (see `overload`).
        let silent = silent - (self.overload.excused() - x.timer.excused_at).min(silent);
        if silent >= timeout {
            let reason = FailReason::Timeout;
            if x.is_client() {
                self.metrics.client_timeouts += 1;
            } else {
                self.metrics.server_timeouts += 1;
            }
            self.fail_or_drop(r, reason);
            return;
        }
        let asked = x.timer.asked;
        // A RESEND is due resend_ticks into the silence, then every resend_interval, counting
        // neither the ticks in which the downlink may only have queued the awaited bytes
        // (see `downlink`) nor, past half the timeout, any fewer ticks than elapsed: a lost
        // packet is still asked for well before its RPC would fail.
        let held = self.downlink.held(tick, x.timer.held_level) - x.timer.held_at;
        let waited = (silent - held.min(silent)).max(silent.saturating_sub(timeout / 2));
        // A server asks for a silent request at intervals that double (5, 10, 20, 40 ...
        // ticks in): giving up loses nothing, as its client still holds the request and
        // sends it again when its own RESEND draws RPC_UNKNOWN, and a host that opens
        // thousands of requests and goes silent would otherwise draw a RESEND for each of
        // them every interval (`homa hostile`). A client keeps asking every interval:
        // giving up fails its call.
        let backoff = !x.is_client() && x.state == State::Incoming;
        let due = match (waited.checked_sub(resend), backoff) {
            (None, _) => 0,
            (Some(late), false) => late / interval + 1,
            (Some(late), true) => u64::from((late / interval + 1).ilog2()) + 1,
        };
        // One RESEND per due point, however late the driver ran this timer. A server
        // waiting for grants has nothing to ask for; it only times out.
        let may_ask = x.is_client() || x.state == State::Incoming;
        if due > u64::from(asked) {
            if may_ask {
                self.request_retransmission(r);
            }
            if self.rpcs.get(r).is_some_and(|x| x.grant_managed) {
                self.grant_cx(|g, cx| g.sender_silent(cx, r));
            }
            if let Some(x) = self.rpcs.get_mut(r) {
                x.timer.asked = due as u32;
            }
        }
        // The next due point, if no tick holds the awaited bytes from now on.
        let next_due = match backoff {
            false => resend + due * interval,
            true => resend + ((1 << due) - 1) * interval,
        };
        self.arm(r, tick + (next_due - waited).min(timeout - silent));
    }

    /// Whether an RPC waits on its peer and counts silent ticks (spec §2.6): receiving with
    /// granted bytes outstanding, or having sent all it may (a client then awaits the
    /// response; a server awaits grants for the rest of its response).
    ///
    /// The module never times out a server waiting for grants; we do, after
    /// `ack_timeout_ticks` (as a server waiting for an ACK), so a vanished client cannot pin
    /// a response in memory forever.
    fn waits_on_peer(x: &Rpc) -> bool {
        match x.state {
            State::Incoming => x.msgin.as_ref().is_some_and(|m| m.received() < m.granted),
            State::Outgoing => x.msgout.as_ref().is_some_and(|m| {
                m.next_offset >= m.granted && (x.is_client() || m.next_offset < m.length)
            }),
            State::InService => false,
        }
    }

    /// Starts counting silence when an RPC becomes owed data, and keeps a wake-up armed for
    /// its first RESEND.
    fn refresh_worry(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get_mut(r) else { return };
        let owed = Self::waits_on_peer(x);
        let begins = owed && !x.timer.worried;
        x.timer.worried = owed;
        if begins {
            self.reset_silence(r);
        }
        let Some(x) = self.rpcs.get_mut(r) else { return };
        if owed {
            let due = x.timer.silent_since + u64::from(self.config.resend_ticks);
            if x.timer.armed_tick.is_none_or(|t| t > due) {
                self.arm(r, due);
            }
        }
    }

    /// Wakes `r` at `tick`, or at the current tick if that has passed (a plan made from an
    /// old silence start): not in the past, which would read as a timer the driver ran late.
    fn arm(&mut self, r: RpcRef, tick: u64) {
        let tick = tick.max(self.tick);
        if let Some(x) = self.rpcs.get_mut(r) {
            x.timer.armed_tick = Some(tick);
            self.timers.push(tick, r);
        }
    }

    /// Asks the peer for missing bytes (`homa_request_retrans`): one RESEND per gap and one
    /// for [received, granted), or one for the first packet when nothing of the message
    /// arrived. Resent bytes keep the level they were first sent at (the unscheduled level
    /// of the message's length under this receiver's cutoffs, or the last grant's), so a
    /// retransmission does not jump ahead of the short messages; a first packet of unknown
    /// length is asked for at the top level.
    fn request_retransmission(&mut self, r: RpcRef) {
        let Some(x) = self.rpcs.get(r) else { return };
        let top = self.config.num_priorities - 1;
        let level = |offset: u32| x.msgin.as_ref().map_or(top, |m| m.level_at(offset));
        let limit = self.config.max_pending_control;
        let mut resend = |offset, length| {
            let priority = level(offset);
            let body = ControlBody::Resend { offset, length, priority };
            if !self.tx.push_control(x.control(body), limit) {
                self.metrics.control_overflow += 1;
            }
        };
        match x.msgin.as_ref() {
            Some(m) => {
                for g in &m.gaps {
                    resend(g.start, g.end - g.start);
                }
                if m.granted > m.recv_end {
                    resend(m.recv_end, m.granted - m.recv_end);
                }
            }
            // Nothing of the response yet: ask for its first packet only (as the module once
            // did). The server may have sent it all while this RESEND was on its way (a busy
            // server reads late), and all of a message being lost is rare; its first packet
            // gives the length, and the next RESEND the gaps.
            None => resend(0, self.max_payload),
        }
    }

    // ------------------------------------------------------------------ endings

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
        let from = x.addr;
        self.rpcs.remove(r);
        self.release_rx(from, rx);
        self.tx_bytes -= tx;
        if !client {
            self.host_bytes.release(from, tx);
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
