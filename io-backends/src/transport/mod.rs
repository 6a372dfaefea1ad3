//! Transports: how Homa packets reach the network. [`Transport`] is the interface the
//! driver uses; [`SocketTransport`] implements it over UDP or raw IP protocol 146 with
//! `sendmmsg`/`recvmmsg`, and [`UringTransport`] over the same sockets with io_uring.

use std::fmt;
use std::io;
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::str::FromStr;

use homa_core::PayloadSlice;

use crate::error::Result;

mod socket;
mod sys;
mod uring;

pub use socket::SocketTransport;
pub(crate) use sys::{MAX_RUN, clear, gso_max_packets, signal};
pub use uring::{Unavailable, UringTransport};

/// The reading of received control messages: public for the fuzz targets (`fuzz/`), not an
/// API.
#[doc(hidden)]
pub mod control {
    pub use super::sys::cmsg::{
        Cmsg, ExtendedError, control_messages, extended_error, gro_segment,
    };
}

/// IP protocol number of Homa (`IPPROTO_HOMA`).
pub const IPPROTO_HOMA: i32 = 146;

/// Which transport a socket uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportKind {
    /// Homa packets as UDP payloads; unprivileged, passes networks that drop protocol 146.
    #[default]
    Udp,
    /// IP protocol 146 over raw sockets, as the Linux module sends it; needs CAP_NET_RAW.
    Ip,
    /// UDP through io_uring (falls back to [`Udp`](TransportKind::Udp) if unavailable).
    UringUdp,
    /// Raw IP through io_uring (falls back to [`Ip`](TransportKind::Ip) if unavailable).
    UringIp,
}

impl TransportKind {
    /// Whether the Homa port travels only in the Homa header (raw IP), rather than also
    /// being the UDP port.
    pub fn is_ip(self) -> bool {
        matches!(self, TransportKind::Ip | TransportKind::UringIp)
    }

    /// The same encapsulation without io_uring.
    pub fn plain(self) -> TransportKind {
        match self {
            TransportKind::UringUdp => TransportKind::Udp,
            TransportKind::UringIp => TransportKind::Ip,
            other => other,
        }
    }

    /// The name [`FromStr`] accepts: `udp`, `ip`, `uring` (UDP over io_uring), `uring-ip`.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Udp => "udp",
            TransportKind::Ip => "ip",
            TransportKind::UringUdp => "uring",
            TransportKind::UringIp => "uring-ip",
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transport name other than `udp`, `ip`, `uring`, `uring-udp` or `uring-ip`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport {0:?} (expected udp, ip, uring or uring-ip)")]
pub struct UnknownTransport(String);

impl FromStr for TransportKind {
    type Err = UnknownTransport;

    fn from_str(s: &str) -> Result<TransportKind, UnknownTransport> {
        match s {
            "udp" => Ok(TransportKind::Udp),
            "ip" => Ok(TransportKind::Ip),
            "uring" | "uring-udp" => Ok(TransportKind::UringUdp),
            "uring-ip" => Ok(TransportKind::UringIp),
            _ => Err(UnknownTransport(s.to_owned())),
        }
    }
}

/// Opens a transport of `kind` bound to `local` (for raw IP only its address counts); a
/// UDP one with `reuse_port` shares its port (see [`SocketTransport::udp`]; raw IP sockets
/// have no port to share, and ignore it).
/// An io_uring kind whose ring cannot be set up falls back to the plain socket and logs why
/// (`tracing` warning); [`Transport::kind`] tells which one you got.
pub fn open(
    kind: TransportKind,
    local: SocketAddr,
    reuse_port: bool,
) -> Result<Box<dyn Transport>> {
    let plain = match kind.plain() {
        TransportKind::Ip => SocketTransport::ip(local.ip())?,
        _ => SocketTransport::udp(local, reuse_port)?,
    };
    if kind == kind.plain() {
        return Ok(Box::new(plain));
    }
    match UringTransport::new(plain) {
        Ok(uring) => Ok(Box::new(uring)),
        Err(no) => {
            let fallback = kind.plain();
            tracing::warn!(transport = %kind, %fallback, "io_uring unavailable: {}", no.reason);
            Ok(Box::new(no.socket))
        }
    }
}

/// One datagram in a [`Batch`]: its peer, length and priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Destination (sending) or source (receiving), as a transport address: for raw IP the
    /// port is 0.
    pub addr: SocketAddr,
    /// Bytes in the datagram's slot (sending: a [`tail`](Batch::tail) may follow them).
    pub len: usize,
    /// Homa priority 0..=7 (sending only); becomes TOS / traffic class
    /// [`homa_core::wire::tos_for_priority`].
    pub priority: u8,
    /// Receiving only: 0 for one packet; else the datagram holds several packets back to
    /// back, each `segment` bytes but the last (UDP GRO coalesced them).
    pub segment: usize,
}

impl Datagram {
    /// The packets in `bytes`, the datagram's contents (one, possibly empty, unless
    /// `segment` says otherwise).
    pub fn packets<'a>(&self, bytes: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
        let seg = if self.segment == 0 { bytes.len() } else { self.segment };
        let count = if seg == 0 { 1 } else { bytes.len().div_ceil(seg) };
        (0..count).map(move |i| &bytes[i * seg..((i + 1) * seg).min(bytes.len())])
    }
}

/// Fixed-size slots for up to `capacity` datagrams, filled in order, reused across batches.
/// Sending: write a packet into [`next_slot`](Batch::next_slot), then [`push`](Batch::push)
/// its description, or [`push_gather`](Batch::push_gather) it with the message bytes
/// that follow (a vectored send, without copying them). Receiving: the transport does the
/// same with what arrived.
///
/// The first slot starts on a page boundary (and so does every slot whose length is a
/// multiple of 64, e.g. [`RECV_SLOT_LEN`]): the kernel copies a received datagram into a
/// buffer that is not 64-byte aligned several times slower (measured on loopback: 1.3-1.5
/// against 5-6 GB/s for 64 KB datagrams).
pub struct Batch {
    buf: Vec<u8>,
    /// Where slot 0 starts in `buf` (the first page-aligned byte).
    base: usize,
    slot_len: usize,
    items: Vec<Datagram>,
    /// Per datagram, the bytes that follow its slot's (sending only).
    tails: Vec<Option<PayloadSlice>>,
    /// Slots in `buf` (a `Vec` may hold room for more items than asked).
    capacity: usize,
}

/// Alignment of a batch's first slot.
const BATCH_ALIGN: usize = 4096;

impl Batch {
    /// A batch of `capacity` slots of `slot_len` bytes.
    pub fn new(capacity: usize, slot_len: usize) -> Batch {
        let len = capacity * slot_len;
        let buf = vec![0; len + if len == 0 { 0 } else { BATCH_ALIGN }];
        let base = if len == 0 { 0 } else { buf.as_ptr().align_offset(BATCH_ALIGN) };
        let (items, tails) = (Vec::with_capacity(capacity), Vec::with_capacity(capacity));
        Batch { buf, base, slot_len, items, tails, capacity }
    }

    /// How many datagrams the batch holds when full.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes each slot holds: the longest datagram it takes.
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// How many datagrams the batch holds now.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds no datagram.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether every slot is taken.
    pub fn is_full(&self) -> bool {
        self.items.len() == self.capacity()
    }

    /// Forgets every datagram; the slots stay allocated.
    pub fn clear(&mut self) {
        self.items.clear();
        self.tails.clear();
    }

    /// The slot the next [`push`](Batch::push) describes. Panics if the batch is full.
    pub fn next_slot(&mut self) -> &mut [u8] {
        self.slot_mut(self.items.len())
    }

    /// The slots not yet filled, as one buffer (they follow each other): for packets
    /// written back to back, one per slot, then [`push`](Batch::push)ed in order. Empty
    /// when the batch is full.
    pub fn free_slots(&mut self) -> &mut [u8] {
        let start = self.base + self.items.len() * self.slot_len;
        let end = self.base + self.capacity() * self.slot_len;
        &mut self.buf[start..end]
    }

    /// The bytes of datagrams `first..first + count` as they lie in their slots, if they
    /// are one contiguous buffer: none has a tail and each but the last fills its slot.
    pub(crate) fn contiguous(&self, first: usize, count: usize) -> Option<&[u8]> {
        if count == 0 {
            return None;
        }
        let (items, tails) = (&self.items[first..first + count], &self.tails[first..first + count]);
        let full = items[..count - 1].iter().all(|d| d.len == self.slot_len);
        if !full || tails.iter().any(Option::is_some) {
            return None;
        }
        let start = self.base + first * self.slot_len;
        let end = start + (count - 1) * self.slot_len + items[count - 1].len;
        Some(&self.buf[start..end])
    }

    /// Slot `i` (any slot, filled or not), e.g. for a transport that receives into several
    /// slots with one system call. Panics if `i >= capacity`.
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.capacity(), "batch slot {i} out of range");
        let start = self.base + i * self.slot_len;
        &mut self.buf[start..start + self.slot_len]
    }

    /// Appends the datagram whose bytes are in the next slot. Panics if full or if
    /// `d.len > slot_len`.
    pub fn push(&mut self, d: Datagram) {
        self.push_gather(d, None);
    }

    /// Appends the datagram whose first `d.len` bytes are in the next slot and whose rest
    /// is `tail`. Panics if full or if `d.len > slot_len`.
    pub fn push_gather(&mut self, d: Datagram, tail: Option<PayloadSlice>) {
        assert!(!self.is_full() && d.len <= self.slot_len, "batch overflow");
        self.items.push(d);
        self.tails.push(tail);
    }

    /// The bytes datagram `i` carries after its slot's, if any.
    pub fn tail(&self, i: usize) -> Option<&PayloadSlice> {
        self.tails[i].as_ref()
    }

    /// The whole length of datagram `i`: its slot's bytes and its tail.
    pub fn datagram_len(&self, i: usize) -> usize {
        self.items[i].len + self.tails[i].as_ref().map_or(0, PayloadSlice::len)
    }

    /// Moves `len` bytes at `offset` in slot `src` to the start of slot `dst`.
    pub(crate) fn move_within(&mut self, src: usize, offset: usize, len: usize, dst: usize) {
        if src != dst || offset != 0 {
            let from = self.base + src * self.slot_len + offset;
            self.buf.copy_within(from..from + len, self.base + dst * self.slot_len);
        }
    }

    /// Datagram `i` and the bytes in its slot (sending: its [`tail`](Batch::tail) follows).
    pub fn get(&self, i: usize) -> (Datagram, &[u8]) {
        let d = self.items[i];
        let start = self.base + i * self.slot_len;
        (d, &self.buf[start..start + d.len])
    }
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("slot_len", &self.slot_len)
            .finish()
    }
}

/// A datagram waiting to be received ([`Transport::peek`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peeked {
    /// Its transport address.
    pub from: SocketAddr,
    /// Its whole length.
    pub len: usize,
    /// Bytes per packet when it holds a run of them (GRO), the last possibly shorter; 0
    /// when it is one packet (as in [`Datagram`]).
    pub segment: usize,
}

/// Counters a transport keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Datagrams handed to the kernel.
    pub tx_datagrams: u64,
    /// System calls (or ring submissions) that sent them.
    pub tx_calls: u64,
    /// Datagrams the kernel refused (buffer full, too big, no route); Homa resends lost data.
    pub tx_dropped: u64,
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// System calls (or ring completions reaped in a batch) that received them, or looked
    /// at one first ([`Transport::peek`]).
    pub rx_calls: u64,
    /// Received datagrams dropped as malformed below Homa (truncated, bad IP header).
    pub rx_dropped: u64,
    /// Of `rx_datagrams`, those received straight into their message
    /// ([`Transport::recv_split`]).
    pub rx_in_place: u64,
    /// Peers reported unreachable (ICMP errors, failed sends).
    pub unreachable: u64,
    /// Datagrams the kernel dropped because the socket's receive buffer was full (read
    /// when the counters are; Homa's resends recover them). Raise `net.core.rmem_max`, or
    /// receive faster, when it grows.
    pub rx_overflow: u64,
}

impl TransportStats {
    /// Every counter by its field name.
    pub fn to_value(&self) -> homa_core::Map {
        let t = *self;
        [
            ("tx_datagrams", t.tx_datagrams),
            ("tx_calls", t.tx_calls),
            ("tx_dropped", t.tx_dropped),
            ("rx_datagrams", t.rx_datagrams),
            ("rx_calls", t.rx_calls),
            ("rx_dropped", t.rx_dropped),
            ("rx_in_place", t.rx_in_place),
            ("unreachable", t.unreachable),
            ("rx_overflow", t.rx_overflow),
        ]
        .into_iter()
        .collect()
    }
}

/// How the driver moves Homa packets. All calls are non-blocking; the driver waits for
/// [`readiness_fd`](Transport::readiness_fd) to become readable (epoll) before `recv`.
///
/// A backend provides five methods: what it is, its address, a descriptor to wait on, and
/// sending and receiving batches. The rest have defaults that suit an IP transport without
/// extras, and are there to override: address handling of another encapsulation, ICMP
/// errors (`poll_unreachable`, `read_errors`), counters, a blocking receiver for leading
/// threads (`waiter`), and receive-in-place (`peek`, `recv_split`).
///
/// A *transport address* names a peer as the transport sees it: the UDP address for UDP,
/// and the IP address with port 0 for raw IP (where the Homa port is only in the Homa
/// header).
pub trait Transport: Send + fmt::Debug {
    /// What this transport is (after any io_uring fallback).
    fn kind(&self) -> TransportKind;

    /// The local transport address (UDP: the bound address and port; raw IP: port 0).
    fn local_addr(&self) -> SocketAddr;

    /// Readable when `recv` may return datagrams or errors; for epoll.
    fn readiness_fd(&self) -> BorrowedFd<'_>;

    /// Sends every datagram in `batch` and clears it: datagram `i` is its slot's bytes
    /// ([`Batch::get`]) followed by its tail ([`Batch::tail`], the message bytes of a DATA
    /// packet, when there is one). Datagrams the kernel refuses are counted (and their
    /// peers reported by `poll_unreachable` when the refusal is final for them); an `Err`
    /// means the transport itself failed.
    fn send(&mut self, batch: &mut Batch) -> io::Result<()>;

    /// Appends datagrams that have arrived, until `batch` is full or none is waiting.
    /// Slots should be at least [`RECV_SLOT_LEN`] bytes: a longer datagram is dropped.
    fn recv(&mut self, batch: &mut Batch) -> io::Result<()>;

    /// Bytes of headers below Homa in each packet (`Config::outer_header_bytes`): by
    /// default IPv4 or IPv6 (by the local address), plus UDP's 8 unless the kind is raw IP.
    fn outer_header_bytes(&self) -> u32 {
        let ip = if self.local_addr().is_ipv6() { 40 } else { 20 };
        if self.kind().is_ip() { ip } else { ip + 8 }
    }

    /// Largest Homa packet (Homa header plus payload) one datagram can carry: by default
    /// what fits in the largest IP packet, 65,535 bytes with its headers.
    fn max_packet_len(&self) -> usize {
        65_535 - self.outer_header_bytes() as usize
    }

    /// The transport address of the Homa peer at `dest` (`dest`'s port is its Homa port),
    /// or `None` if this transport cannot reach `dest`'s address family. By default: in
    /// the local address's family (IPv4-mapped IPv6 as IPv4), without a flow label, with
    /// a scope only for link-local IPv6, and with port 0 for raw IP.
    fn peer(&self, dest: SocketAddr) -> Option<SocketAddr> {
        canonical(dest, self.local_addr().is_ipv6(), self.kind().is_ip())
    }

    /// A peer found unreachable since the last call (from ICMP errors or failed sends);
    /// by default none.
    fn poll_unreachable(&mut self) -> Option<Unreachable> {
        None
    }

    /// Reads the ICMP errors queued for the socket (IP_RECVERR) when it polls as in error
    /// without a send or receive having failed (the peers they name come out of
    /// [`poll_unreachable`](Transport::poll_unreachable)): unread, they keep it in error
    /// and every poll of it returns at once. Transports without such a socket do nothing.
    fn read_errors(&mut self) {}

    /// Counters so far (by default, none kept).
    fn stats(&self) -> TransportStats {
        TransportStats::default()
    }

    /// Optionally, a way for a thread to wait for datagrams in the receive system call
    /// itself, without the transport (the driver holds the transport under a lock that a
    /// waiting thread must not keep). Saves the `poll` before each receive. Called at most
    /// once, before any other call; `None` (the default) keeps the driver on `poll`.
    fn waiter(&mut self) -> Option<WaitHandle> {
        None
    }

    /// How many bytes of datagrams the kernel queues for this transport before it drops
    /// them, if known (a receiver grants no more than that ahead by default).
    fn receive_buffer(&self) -> Option<usize> {
        None
    }

    /// Whether datagrams or error reports wait to be received: by default, whether the
    /// readiness fd is readable or in error.
    fn input_waiting(&mut self) -> bool {
        sys::pending(self.readiness_fd().as_raw_fd())
    }

    /// A thread is about to wait through the [`waiter`](Transport::waiter) and nobody
    /// watches the readiness fd (`true`: called before each such wait), or the readiness
    /// fd is watched again (`false`: it must be readable while anything waits to be
    /// received). io_uring turns its eventfd off meanwhile, saving a system call per send
    /// and receive.
    fn waiter_in_use(&mut self, _in_use: bool) {}

    /// Whether a receive completes on the thread that asked for it (io_uring: on the
    /// thread that posted it, at its next system call). Then each thread about to wait for
    /// datagrams calls [`receive_here`](Transport::receive_here) first.
    fn receives_on_poster(&self) -> bool {
        false
    }

    /// The calling thread is about to wait for datagrams: receives are to complete on it
    /// from now on (see [`receives_on_poster`](Transport::receives_on_poster)); cheap when
    /// they already do. By default nothing.
    fn receive_here(&mut self) {}

    /// Whether a run of equal-sized datagrams to one peer that lie back to back in their
    /// [`Batch`] slots goes to the kernel as one buffer (UDP GSO): then the driver has the
    /// endpoint write such runs (`homa_core::Endpoint::poll_transmit_run`). Otherwise a
    /// DATA packet's message bytes go as its tail, uncopied. By default not.
    fn sends_runs(&self) -> bool {
        false
    }

    /// Whether this transport receives in place ([`peek`](Transport::peek),
    /// [`recv_split`](Transport::recv_split)); by default not.
    fn receives_in_place(&self) -> bool {
        false
    }

    /// Receive-in-place (`homa_core::Endpoint::place_run`): the next datagram, with its
    /// first `head.len()` bytes in `head`, without taking it. `None` if nothing waits, or
    /// the transport does not receive in place.
    fn peek(&mut self, _head: &mut [u8]) -> Option<Peeked> {
        None
    }

    /// Takes the datagram [`peek`](Transport::peek) saw, a run of packets of `segment`
    /// bytes each (the last may be shorter): the first `head_len` bytes of each into
    /// `heads`, one after another, and the rest of each appended to `message` (whose spare
    /// capacity must hold them), `len` bytes in all; returns its transport address.
    /// `Ok(None)`: it had another length, and is dropped (counted in `rx_dropped`);
    /// `message` is as it was. `InvalidInput`: `heads` is not a whole number of headers,
    /// or the packets cannot hold `len` bytes of payload; nothing is received.
    fn recv_split(
        &mut self,
        _heads: &mut [u8],
        _head_len: usize,
        _segment: usize,
        _message: &mut Vec<u8>,
        _len: usize,
    ) -> io::Result<Option<SocketAddr>> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// A receiver that blocks in the kernel ([`Transport::waiter`]), and how to wake it.
pub struct WaitHandle {
    /// Receives for the waiting thread.
    pub waiter: Box<dyn Waiter>,
    /// Makes a thread blocked in [`Waiter::wait`] return soon, from any thread.
    pub wake: Box<dyn Fn() + Send + Sync>,
    /// Makes every wait, blocked now or to come, return at once, for good: called when
    /// the socket closes, which must not depend on a wake-up datagram getting through.
    pub shutdown: Box<dyn Fn() + Send + Sync>,
}

impl fmt::Debug for WaitHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitHandle").field("waiter", &self.waiter).finish_non_exhaustive()
    }
}

/// Receives datagrams of a transport outside it, blocking ([`Transport::waiter`]).
pub trait Waiter: Send + fmt::Debug {
    /// Blocks until a datagram arrives, then appends it and whatever else is waiting to
    /// `batch` (until full), like [`Transport::recv`]. May return with nothing: after a
    /// wake-up, a signal or an error report; the caller decides whether to wait again.
    fn wait(&mut self, batch: &mut Batch) -> io::Result<()>;

    /// Whether [`wait`](Waiter::wait) only waits and appends nothing: what arrived is then
    /// taken with [`Transport::recv`] (io_uring, whose receive buffers are the transport's).
    fn only_waits(&self) -> bool {
        false
    }

    /// A peer found unreachable by [`wait`](Waiter::wait) since the last call.
    fn poll_unreachable(&mut self) -> Option<Unreachable>;

    /// Counters of what [`wait`](Waiter::wait) received so far (the transport's own
    /// counters do not include them).
    fn stats(&self) -> TransportStats;
}

/// A peer a transport found unreachable; becomes `Endpoint::handle_unreachable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreachable {
    /// Its transport address.
    pub peer: SocketAddr,
    /// Raw IP only: the Homa port an ICMP port-unreachable named (only RPCs with that port
    /// fail, as in the Linux module). `None`: the whole peer is unreachable.
    pub port: Option<u16>,
}

/// Receive slots hold any IP packet, so peers with a larger MTU are never truncated.
pub const RECV_SLOT_LEN: usize = 65_536;

/// The transport address for `dest` on a socket of family `v6`: `None` across families.
fn canonical(dest: SocketAddr, v6: bool, raw: bool) -> Option<SocketAddr> {
    Some(transport_addr(dest, raw)).filter(|a| a.is_ipv6() == v6)
}

/// The transport address of a received datagram's source; `None` for a UDP source port of
/// 0, which no reply can reach (and sending to it fails).
pub(crate) fn source(from: SocketAddr, raw: bool) -> Option<SocketAddr> {
    (raw || from.port() != 0).then(|| transport_addr(from, raw))
}

/// One form per peer, as the kernel reports sources: IPv4-mapped IPv6 addresses become
/// IPv4; a link-local IPv6 address keeps its scope (the interface it is on), others have
/// none; no flow label; raw IP has no port.
fn transport_addr(a: SocketAddr, raw: bool) -> SocketAddr {
    let port = if raw { 0 } else { a.port() };
    match a {
        SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_none() => {
            let scope = if v6.ip().is_unicast_link_local() { v6.scope_id() } else { 0 };
            SocketAddrV6::new(*v6.ip(), port, 0, scope).into()
        }
        _ => SocketAddr::new(a.ip().to_canonical(), port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_splits_into_its_segments() {
        let d = |len, segment| Datagram {
            addr: "1.2.3.4:5".parse().unwrap(),
            len,
            priority: 0,
            segment,
        };
        let bytes: Vec<u8> = (0..10).collect();
        let split = |dg: Datagram, b: &[u8]| dg.packets(b).map(<[u8]>::to_vec).collect::<Vec<_>>();
        assert_eq!(split(d(0, 0), &[]), vec![Vec::<u8>::new()]);
        assert_eq!(split(d(10, 0), &bytes), vec![bytes.clone()]);
        assert_eq!(split(d(10, 4), &bytes), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
        assert_eq!(split(d(8, 4), &bytes[..8]), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    }

    #[test]
    fn addresses_take_one_form_per_peer() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(source(a("[::ffff:1.2.3.4]:5"), false), Some(a("1.2.3.4:5")));
        assert_eq!(source(a("[::ffff:1.2.3.4]:5"), true), Some(a("1.2.3.4:0")));
        assert_eq!(source(a("1.2.3.4:0"), false), None, "UDP port 0 cannot be answered");
        assert_eq!(source(a("1.2.3.4:0"), true), Some(a("1.2.3.4:0")));
        let link_local = SocketAddrV6::new("fe80::1".parse().unwrap(), 5, 77, 3);
        let kept = SocketAddrV6::new("fe80::1".parse().unwrap(), 5, 0, 3);
        assert_eq!(
            source(link_local.into(), false),
            Some(kept.into()),
            "scope kept, flow label not"
        );
        assert_eq!(canonical(link_local.into(), true, false), Some(kept.into()));
        let global = SocketAddrV6::new("2001:db8::1".parse().unwrap(), 5, 0, 3);
        assert_eq!(source(global.into(), false), Some(a("[2001:db8::1]:5")), "no scope");
        assert_eq!(canonical(a("[::ffff:1.2.3.4]:5"), true, false), None, "IPv4 on an IPv6 socket");
        assert_eq!(canonical(a("1.2.3.4:5"), false, true), Some(a("1.2.3.4:0")));
    }

    #[test]
    fn packets_written_one_per_slot_are_one_buffer() {
        let a: SocketAddr = "1.2.3.4:5".parse().unwrap();
        let d = |len| Datagram { addr: a, len, priority: 0, segment: 0 };
        let mut b = Batch::new(4, 8);
        b.free_slots()[..21].copy_from_slice(&[7; 21]); // two full packets, then 5 bytes
        for len in [8, 8, 5] {
            b.push(d(len));
        }
        assert_eq!(b.free_slots().len(), 8, "one slot left");
        assert_eq!(b.contiguous(0, 3), Some(&[7; 21][..]));
        b.clear();
        for len in [8, 5, 8] {
            b.push(d(len));
        }
        assert_eq!(b.contiguous(0, 3), None, "a short packet before the last");
        assert_eq!(b.contiguous(0, 2).map(<[u8]>::len), Some(13));
    }

    #[test]
    fn gathered_datagrams_keep_their_tails_until_cleared() {
        let mut b = Batch::new(2, 8);
        let a: SocketAddr = "1.2.3.4:5".parse().unwrap();
        let mut ep = homa_core::Endpoint::new(homa_core::Config::default()).unwrap();
        let port = ep.bind_ephemeral().unwrap();
        ep.send_request(homa_core::Instant::ZERO, port, a, 1, vec![9; 5000], 0).unwrap();
        let mut head = vec![0; ep.config().max_packet_len()];
        let (t, tail) =
            ep.poll_transmit_gather(homa_core::Instant::ZERO, &mut head).unwrap().unwrap();
        b.next_slot()[..3].fill(1);
        b.push_gather(Datagram { addr: a, len: 3, priority: 1, segment: 0 }, tail);
        b.next_slot()[..2].fill(2);
        b.push(Datagram { addr: a, len: 2, priority: 1, segment: 0 });
        assert_eq!((b.get(0).1, b.tail(0).unwrap().as_slice()), (&[1, 1, 1][..], &[9; 1424][..]));
        assert_eq!((b.datagram_len(0), b.datagram_len(1)), (1427, 2));
        assert!(b.tail(1).is_none());
        assert_eq!(t.len, homa_core::wire::data::HEADER_LEN);
        b.clear();
        b.next_slot()[..2].fill(3);
        b.push(Datagram { addr: a, len: 2, priority: 1, segment: 0 });
        assert!(b.tail(0).is_none(), "clear() dropped the tails");
    }
}
