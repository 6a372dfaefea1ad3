//! What the endpoint targets share: addresses, message sizes and payloads, time steps, and
//! [`Node`], an [`Endpoint`] driven by the crate's contract with every output checked.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use arbitrary::Arbitrary;
use homa_core::time::Nanos;
use homa_core::time::{NANOS_PER_MSEC, NANOS_PER_USEC};
use homa_core::wire::{self, Body, PacketType};
use homa_core::{ApiError, Config, Endpoint, Event, Instant, Metrics, Transmit};

const fn v4(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), port))
}

/// The peers a lone endpoint hears from: the two the conformance scenarios use first, a third
/// host, a second port on the first host (a distinct peer), and an IPv6 host.
pub(crate) const PEERS: [SocketAddr; 5] = [
    v4(198, 18, 0, 2, 4000),
    v4(198, 18, 0, 3, 4000),
    v4(198, 18, 0, 4, 4000),
    v4(198, 18, 0, 2, 4001),
    SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2), 4000, 0, 0)),
];

/// The server port the targets bind.
pub(crate) const SERVER_PORT: u16 = 99;
/// Packets a drain by runs (`poll_transmit_run`) takes per call, at most.
const RUN_SLOTS: usize = 8;

/// `choices[x % len]`: index 0 of every choice list is the module's default.
pub(crate) fn pick<T: Copy>(choices: &[T], x: u8) -> T {
    choices[usize::from(x) % choices.len()]
}

/// A message of `len` bytes whose contents depend on `seed`, so a payload delivered to the
/// wrong RPC, or with bytes misplaced, shows.
pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    out.extend(
        (0..len as u64)
            .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(0x9E37_79B9)) as u8 ^ (i >> 8) as u8),
    );
    out
}

/// The length of a message handed to `send_request` / `send_response`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum MsgLen {
    /// `1 + n % 200,000` bytes.
    Bytes(u32),
    /// The largest message (1,000,000 bytes).
    Max,
    /// Invalid: empty.
    Zero,
    /// Invalid: one byte over the maximum.
    TooLong,
}

impl MsgLen {
    pub(crate) fn len(self) -> usize {
        match self {
            MsgLen::Bytes(n) => 1 + (n % 200_000) as usize,
            MsgLen::Max => wire::MAX_MESSAGE_LENGTH as usize,
            MsgLen::Zero => 0,
            MsgLen::TooLong => wire::MAX_MESSAGE_LENGTH as usize + 1,
        }
    }

    /// The same, for targets that only want valid lengths of at most 200,000 bytes.
    pub(crate) fn valid_len(self) -> usize {
        match self {
            MsgLen::Bytes(n) => 1 + (n % 200_000) as usize,
            MsgLen::Max | MsgLen::TooLong => 200_000,
            MsgLen::Zero => 1,
        }
    }
}

/// How far the clock moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub(crate) enum Step {
    Nanos(u16),
    Micros(u16),
    /// Whole milliseconds (the default timer tick).
    Millis(u8),
}

impl Step {
    pub(crate) fn nanos(self) -> u64 {
        match self {
            Step::Nanos(n) => u64::from(n),
            Step::Micros(n) => u64::from(n) * NANOS_PER_USEC,
            Step::Millis(n) => u64::from(n) * NANOS_PER_MSEC,
        }
    }
}

/// A packet `poll_transmit_gather` gave (headers and slice joined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) to: SocketAddr,
    pub(crate) priority: u8,
    pub(crate) bytes: Vec<u8>,
}

impl Sent {
    pub(crate) fn repr(&self) -> wire::Repr<'_> {
        wire::Repr::parse(&self.bytes).expect("checked when drained")
    }
}

/// What one input made the endpoint do.
#[derive(Debug, Default)]
pub(crate) struct Output {
    pub(crate) packets: Vec<Sent>,
    pub(crate) events: Vec<Event>,
}

impl Output {
    fn append(&mut self, mut other: Output) {
        self.packets.append(&mut other.packets);
        self.events.append(&mut other.events);
    }
}

/// An endpoint driven by the contract in `homa_core`'s crate docs, checking after every input:
///
/// - every packet `poll_transmit_gather` gives (headers plus a non-empty slice, if any) fits
///   in `max_packet_len`, parses, re-emits to exactly
///   its length, is at a level below 8 (control packets at the top configured level; DATA at
///   the level the receiver asked for, unclipped, as in the module), and a DATA has payload;
/// - one drain gives at most `max_pending_control` control packets (`poll_transmit` never
///   queues control packets, so they all waited in the bounded queue);
/// - **deadlines**: if a drain right after an input gives a packet, `poll_timeout` read
///   before it was at or before now; after `handle_timeout(now)` and a full drain,
///   `poll_timeout` is `None` or later than now (nothing is left due: no stall, no busy loop);
///   and before the deadline, `poll_transmit` gives nothing and `handle_timeout` is a no-op
///   (no packet, no event), i.e. no work is ever due earlier than announced;
/// - an API call that fails leaves the metrics and the RPC count as they were;
/// - the metrics add up and stay within the `Config` limits (see [`Node::check_metrics`]).
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) ep: Endpoint,
    /// The latest time handed in (the endpoint's clock never goes back).
    pub(crate) clock: Nanos,
    buf: Vec<u8>,
    /// `handle_packet` calls made.
    handed: u64,
    /// Inputs since the last drain (while a target holds output back).
    pub(crate) held: bool,
}

impl Node {
    pub(crate) fn new(config: Config) -> Node {
        let buf = vec![0; config.max_packet_len() * RUN_SLOTS];
        let ep = Endpoint::new(config).expect("targets build valid configs");
        Node { ep, clock: 0, buf, handed: 0, held: false }
    }

    pub(crate) fn config(&self) -> &Config {
        self.ep.config()
    }

    fn see(&mut self, now: Nanos) {
        self.clock = self.clock.max(now);
    }

    /// `handle_packet`, then the drain the contract asks for (unless `hold`).
    pub(crate) fn packet(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        bytes: &[u8],
        hold: bool,
    ) -> (Result<(), wire::Error>, Output) {
        self.see(now);
        self.handed += 1;
        let before = self.ep.metrics();
        // Half the packets (by their last byte's bit 0) are offered for receive-in-place
        // first, as the I/O layer does with large ones, so both paths see every kind of
        // input. Bit 1: the caller appends junk and gives up (then `handle_packet` takes
        // the packet, which must not notice). (Nothing here may lose a packet: the pair
        // target expects delivery once its faults stop.)
        let header_len = wire::data::HEADER_LEN;
        let mode = bytes.last().copied().unwrap_or(0);
        if bytes.len() > header_len && mode & 1 == 1 {
            let payload = &bytes[header_len..];
            let give_up = mode & 2 == 2;
            let placed =
                self.ep.place(Instant::from_nanos(now), from, bytes, payload.len(), |message| {
                    if give_up {
                        message.extend(payload.iter().map(|b| !b).chain([0xEE; 7]));
                    } else {
                        message.extend_from_slice(payload);
                    }
                    !give_up
                });
            if placed && !give_up {
                return (Ok(()), self.after_input(hold));
            }
        }
        let result = self.ep.handle_packet(Instant::from_nanos(now), from, bytes);
        if result.is_err() {
            let after = self.ep.metrics();
            let invalid = |m: &Metrics| m.drops.malformed + m.drops.too_long;
            assert_eq!(invalid(&after), invalid(&before) + 1, "malformed (or too long), counted");
            assert_eq!(
                Metrics { packets_in: 0, drops: Default::default(), ..after },
                Metrics { packets_in: 0, drops: Default::default(), ..before },
                "a malformed packet changed more than its counters"
            );
        }
        (result, self.after_input(hold))
    }

    /// An API call through `f`; on `Err` the endpoint must be unchanged.
    pub(crate) fn api<T>(
        &mut self,
        now: Nanos,
        hold: bool,
        f: impl FnOnce(&mut Endpoint, Instant) -> Result<T, ApiError>,
    ) -> (Result<T, ApiError>, Output) {
        self.see(now);
        let (metrics, rpcs) = (self.ep.metrics(), self.ep.rpc_count());
        let result = f(&mut self.ep, Instant::from_nanos(now));
        if let Err(e) = &result {
            assert_eq!(self.ep.metrics(), metrics, "failed API call ({e:?}) changed the metrics");
            assert_eq!(self.ep.rpc_count(), rpcs, "failed API call ({e:?}) changed the RPCs");
        }
        (result, self.after_input(hold))
    }

    /// An input without a result (`handle_unreachable`, a spurious `handle_timeout`).
    pub(crate) fn call(
        &mut self,
        now: Nanos,
        hold: bool,
        f: impl FnOnce(&mut Endpoint, Instant),
    ) -> Output {
        self.see(now);
        f(&mut self.ep, Instant::from_nanos(now));
        self.after_input(hold)
    }

    /// The clock moves to `now`: first checks that nothing was due before the deadline the
    /// endpoint announced, then runs the timers.
    pub(crate) fn advance(&mut self, now: Nanos) -> Output {
        let mut out = Output::default();
        if self.held {
            out.append(self.settle());
        }
        let deadline = self.ep.poll_timeout().map(Instant::as_nanos);
        if now > self.clock && deadline.is_none_or(|d| now < d) {
            self.see(now);
            if let Some(t) = self
                .ep
                .poll_transmit(Instant::from_nanos(now), &mut self.buf)
                .expect("the buffer holds max_packet_len")
            {
                panic!(
                    "poll_transmit gave a packet ({t:?}) at {now}, before the deadline {deadline:?}"
                );
            }
            self.ep.handle_timeout(Instant::from_nanos(now));
            let early = self.drain();
            assert!(
                early.packets.is_empty() && early.events.is_empty(),
                "handle_timeout at {now}, before the deadline {deadline:?}, did work: {early:?}"
            );
        }
        self.see(now);
        self.ep.handle_timeout(Instant::from_nanos(self.clock));
        out.append(self.settle_after(true));
        out
    }

    /// Jumps to the endpoint's deadline (if any) and runs it; returns whether there was one.
    pub(crate) fn run_deadline(&mut self) -> Option<Output> {
        let deadline = self.ep.poll_timeout().map(Instant::as_nanos)?;
        Some(self.advance(deadline.max(self.clock)))
    }

    fn after_input(&mut self, hold: bool) -> Output {
        if hold {
            // Packets wait; events are still taken (the application keeps up with which RPCs
            // ended, e.g. before it aborts one).
            self.held = true;
            self.check_metrics();
            let mut out = Output::default();
            while let Some(event) = self.ep.poll_event() {
                out.events.push(event);
            }
            return out;
        }
        self.settle()
    }

    /// Drains as the contract says, runs timer work that is due, and checks the deadlines.
    pub(crate) fn settle(&mut self) -> Output {
        self.settle_after(false)
    }

    /// `settle`, after an input that was itself `handle_timeout(clock)` if `timeout_ran`.
    fn settle_after(&mut self, timeout_ran: bool) -> Output {
        self.held = false;
        let announced = self.ep.poll_timeout().map(Instant::as_nanos);
        let mut out = self.drain();
        if let Some(p) = out.packets.first() {
            assert!(
                announced.is_some_and(|d| d <= self.clock),
                "a packet was ready at {} ({:?}) but poll_timeout said {announced:?}",
                self.clock,
                p.repr().packet_type()
            );
        }
        if !timeout_ran
            && self.ep.poll_timeout().map(Instant::as_nanos).is_some_and(|d| d <= self.clock)
        {
            self.ep.handle_timeout(Instant::from_nanos(self.clock));
            out.append(self.drain());
        }
        let next = self.ep.poll_timeout().map(Instant::as_nanos);
        assert!(
            next.is_none_or(|d| d > self.clock),
            "after handle_timeout({0}) and a full drain, poll_timeout is still {next:?} <= {0}",
            self.clock
        );
        self.check_metrics();
        out
    }

    /// By turns after each input, `poll_transmit_gather` (what homa-io calls at 64 KB
    /// packets), `poll_transmit` (the simulator's and the sans-IO bindings' copying
    /// variant) or `poll_transmit_run` (homa-io's at MTU 1500) until `None`, then
    /// `poll_event` until `None`, checking each packet.
    fn drain(&mut self) -> Output {
        let config = self.ep.config().clone();
        let slot = config.max_packet_len();
        let mut out = Output::default();
        let mut control = 0u64;
        let mode = self.handed % 3;
        loop {
            let now = Instant::from_nanos(self.clock);
            // The packets of one call: destination, level, where their bytes are in `buf`.
            let mut got = Vec::new();
            match mode {
                0 => {
                    let next = self.ep.poll_transmit_gather(now, &mut self.buf[..slot]);
                    let Some((mut t, slice)) = next.expect("the buffer holds max_packet_len")
                    else {
                        break;
                    };
                    if let Some(s) = slice {
                        assert!(!s.is_empty(), "{t:?}: an empty payload slice");
                        let end = t.len + s.len();
                        assert!(end <= slot, "{t:?} + {s:?} longer than max_packet_len");
                        self.buf[t.len..end].copy_from_slice(s.as_slice());
                        t.len = end;
                    }
                    got.push((t.to, t.priority, 0..t.len));
                }
                1 => {
                    let next = self.ep.poll_transmit(now, &mut self.buf[..slot]);
                    let Some(t) = next.expect("the buffer holds max_packet_len") else { break };
                    got.push((t.to, t.priority, 0..t.len));
                }
                _ => {
                    let next = self.ep.poll_transmit_run(now, &mut self.buf);
                    let Some(run) = next.expect("the buffer holds a slot") else { break };
                    assert!(run.packets * slot <= self.buf.len(), "{run:?}: more than the room");
                    for (i, len) in run.lens(slot).enumerate() {
                        assert!(i + 1 == run.packets || len == slot, "{run:?}: a short packet");
                        got.push((run.to, run.priority, i * slot..i * slot + len));
                    }
                }
            }
            let in_run = got.len() > 1;
            for (to, priority, at) in got {
                let t = Transmit { to, len: at.len(), priority };
                let bytes = &self.buf[at];
                control += check_sent(&config, t, bytes, in_run);
                out.packets.push(Sent { to, priority, bytes: bytes.to_vec() });
            }
            assert!(
                control <= u64::from(config.max_pending_control),
                "more than max_pending_control ({}) control packets in one drain",
                config.max_pending_control
            );
            assert!(out.packets.len() < 1_000_000, "poll_transmit never stops");
        }
        while let Some(event) = self.ep.poll_event() {
            out.events.push(event);
        }
        out
    }

    /// The metrics add up (every packet counted once: accepted, or dropped for one reason;
    /// the valid ones once by type) and stay within the limits of the `Config`.
    pub(crate) fn check_metrics(&self) {
        let c = self.ep.config();
        let m = self.ep.metrics();
        assert_eq!(m.packets_in, self.handed, "packets_in counts every handle_packet");
        assert_eq!(m.packets_in, m.accepted + m.drops.total(), "in = accepted + dropped: {m:?}");
        let typed: u64 = m.packets_in_by_type.iter().sum();
        let invalid = m.drops.malformed + m.drops.too_long;
        assert_eq!(typed + invalid, m.packets_in, "valid packets counted by type");
        // A FREEZE is dropped as such, unless an earlier check (its port) drops it first.
        let freezes = m.packets_in_by_type[usize::from(PacketType::Freeze.code() - 0x10)];
        assert!(m.drops.freeze <= freezes, "more FREEZE drops than FREEZE packets");
        assert!(m.rx_bytes <= c.max_rx_bytes, "rx_bytes {} > max_rx_bytes", m.rx_bytes);
        assert!(m.tx_bytes <= c.wmem_max, "tx_bytes {} > wmem_max", m.tx_bytes);
        assert!(m.peers <= u64::from(c.max_peers), "{} peers > max_peers", m.peers);
        assert!(m.active_grants <= u64::from(c.max_overcommit), "active grants > max_overcommit");
        assert!(m.active_grants <= m.grantable, "more active than grantable messages");
        assert_eq!(m.rpcs, self.ep.rpc_count() as u64);
    }

    /// Nothing left: no RPC, no memory held for messages, nothing granted.
    pub(crate) fn assert_empty(&self, who: &str) {
        let m = self.ep.metrics();
        assert_eq!(self.ep.rpc_count(), 0, "{who}: RPC state remains: {m:?}");
        assert_eq!(
            (m.rx_bytes, m.tx_bytes, m.incoming, m.grantable, m.active_grants),
            (0, 0, 0, 0, 0),
            "{who}: no RPC, yet message memory or grant state remains: {m:?}"
        );
    }
}

/// Checks a packet given by a drain (`in_run`: one of several of one call, which are
/// DATA); returns 1 if it is a control packet.
fn check_sent(config: &Config, t: Transmit, bytes: &[u8], in_run: bool) -> u64 {
    assert!(t.len <= config.max_packet_len(), "{t:?} longer than max_packet_len");
    let repr = wire::Repr::parse(bytes)
        .unwrap_or_else(|e| panic!("poll_transmit gave an invalid packet ({e}): {bytes:02x?}"));
    assert_eq!(repr.buffer_len(), t.len, "trailing bytes after {:?}", repr.packet_type());
    // Control packets go at our top level; DATA at the level the receiver asked for
    // in GRANT or RESEND (as in the module, a sender does not clip it to its own
    // `num_priorities`), so only the wire's range applies.
    assert!(t.priority < wire::MAX_PRIORITIES, "{t:?}: no such priority level");
    if !matches!(repr.body, Body::Data { .. }) {
        assert_eq!(t.priority, config.num_priorities - 1, "{t:?}: control packet level");
    }
    match repr.body {
        Body::Data { payload, .. } => {
            assert!(!payload.is_empty(), "DATA without payload");
            0
        }
        _ => {
            assert!(!in_run, "{t:?}: a control packet in a run");
            1
        }
    }
}
