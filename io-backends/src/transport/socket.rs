//! [`SocketTransport`]: UDP or raw IP protocol 146 over a plain socket, batched with
//! `sendmmsg`/`recvmmsg`.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use homa_core::ApiError;
use socket2::{Domain, Protocol, Socket, Type};

use super::Peeked;
use super::sys::{self, MmsgScratch, RecvMode, Reports};
use super::{
    Batch, IPPROTO_HOMA, Transport, TransportKind, TransportStats, Unreachable, WaitHandle, Waiter,
};
use crate::error::{Error, Result};

/// Datagrams per `sendmmsg` / `recvmmsg`.
pub(crate) const BATCH: usize = 32;
/// Socket buffer size asked for: enough for a few 1,000,000-byte messages in flight.
const SOCKET_BUFFER: i32 = 8 << 20;
/// A datagram this long (a full packet of a multi-packet message, at any usual MTU) turns
/// UDP GRO on ([`Gro`]).
const BULK_DATAGRAM: usize = 1_024;

/// UDP receive offload, turned on lazily. With GRO on, every receive must fetch control
/// data (the segment size of coalesced datagrams), so it needs `recvmsg` and cannot use
/// the cheaper `recvfrom`; small-message traffic gains nothing from GRO. So it starts off
/// and is switched on, once and for good, when a datagram of a multi-packet message
/// ([`BULK_DATAGRAM`]) arrives. Datagrams queued before that were split by the kernel on
/// arrival, so nothing coalesced is ever read without its segment size. (Receives are
/// never concurrent: the driver serializes the transport's and the waiter's.)
#[derive(Debug)]
struct Gro(AtomicU8);

impl Gro {
    const UNSUPPORTED: u8 = 0;
    const OFF: u8 = 1;
    const ON: u8 = 2;

    fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed) == Gro::ON
    }

    /// Turns GRO on if it is off and `batch` (from `first` on) holds a bulk datagram.
    fn after_recv(&self, fd: RawFd, batch: &Batch, first: usize) {
        if self.0.load(Ordering::Relaxed) != Gro::OFF
            || !(first..batch.len()).any(|i| batch.get(i).0.len >= BULK_DATAGRAM)
        {
            return;
        }
        let state = match sys::setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1) {
            Ok(()) => Gro::ON,
            Err(e) => {
                tracing::debug!("UDP GRO refused: {e}");
                Gro::UNSUPPORTED
            }
        };
        self.0.store(state, Ordering::Relaxed);
    }
}

/// Homa over a UDP socket (the UDP payload is the Homa packet) or a raw IP socket of
/// protocol 146 (the IP payload is the Homa packet, as the Linux module sends it).
/// Priorities go per packet in IP_TOS / IPV6_TCLASS control messages; ICMP errors are read
/// from the error queue (IP_RECVERR) and reported as unreachable peers. UDP sockets use
/// segmentation offload (GSO) for runs of full-size packets to one peer and receive
/// offload (GRO), where the kernel offers them.
pub struct SocketTransport {
    pub(super) socket: Socket,
    pub(super) kind: TransportKind,
    pub(super) local: SocketAddr,
    pub(super) v6: bool,
    tx: MmsgScratch,
    rx: MmsgScratch,
    pub(super) stats: TransportStats,
    pub(super) unreachable: VecDeque<Unreachable>,
    /// Send runs of full-size datagrams to one peer as one UDP GSO message.
    gso: bool,
    /// Receive with UDP GRO (once bulk data arrives): the kernel may coalesce datagrams
    /// from one peer. Shared with the waiter.
    gro: Arc<Gro>,
    /// Empty datagrams from here are the waiter's wake-ups (see [`Transport::waiter`]).
    kick_from: Option<SocketAddr>,
    /// The receive buffer the kernel granted, in bytes of datagrams.
    rcvbuf: usize,
    /// SO_REUSEPORT is on: other sockets may share the port.
    shared_port: bool,
}

impl SocketTransport {
    /// A UDP socket bound to `local` (port 0: any free port). IPv6 sockets are IPv6-only.
    /// With `reuse_port` (SO_REUSEPORT), sockets of the same user may bind the same port,
    /// and the kernel spreads the peers over them by a hash of their addresses.
    pub fn udp(local: SocketAddr, reuse_port: bool) -> Result<SocketTransport> {
        let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
        if local.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        if reuse_port {
            socket.set_reuse_port(true)?;
        }
        socket.bind(&local.into()).map_err(|e| match e.raw_os_error() {
            Some(libc::EADDRINUSE) => ApiError::PortInUse(local.port()).into(),
            _ => Error::Io(e),
        })?;
        SocketTransport::finish(socket, TransportKind::Udp, local.is_ipv6())
    }

    /// A raw socket for IP protocol 146, receiving packets addressed to `local` (any
    /// local address if unspecified). Needs CAP_NET_RAW.
    pub fn ip(local: IpAddr) -> Result<SocketTransport> {
        let domain = if local.is_ipv6() { Domain::IPV6 } else { Domain::IPV4 };
        let socket = Socket::new(domain, Type::RAW, Some(Protocol::from(IPPROTO_HOMA))).map_err(
            |e| match e.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => Error::MissingCapability {
                    what: "a raw IP socket for protocol 146",
                    capability: "CAP_NET_RAW",
                },
                _ => Error::Io(e),
            },
        )?;
        socket.bind(&SocketAddr::new(local, 0).into())?;
        SocketTransport::finish(socket, TransportKind::Ip, local.is_ipv6())
    }

    fn finish(socket: Socket, kind: TransportKind, v6: bool) -> Result<SocketTransport> {
        socket.set_nonblocking(true)?;
        let fd = socket.as_raw_fd();
        for (force, plain) in
            [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)]
        {
            // Without CAP_NET_ADMIN the forced size is refused; the plain one is capped
            // by net.core.[rw]mem_max instead.
            if sys::setsockopt_int(fd, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
                sys::setsockopt_int(fd, libc::SOL_SOCKET, plain, SOCKET_BUFFER)?;
            }
        }
        // The kernel reports twice what it granted.
        let rcv = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)? / 2;
        let snd = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)? / 2;
        static SMALL_BUFFER_WARNED: AtomicBool = AtomicBool::new(false);
        if rcv.min(snd) < SOCKET_BUFFER && !SMALL_BUFFER_WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "socket buffers are capped at {rcv} bytes to receive and {snd} to send \
                 (net.core.rmem_max, wmem_max; past them needs CAP_NET_ADMIN): what \
                 overflows them is dropped and resent later; set both sysctls to \
                 {SOCKET_BUFFER} or more"
            );
        }
        let (level, recverr, discover, probe) = if v6 {
            (
                libc::IPPROTO_IPV6,
                libc::IPV6_RECVERR,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_PROBE,
            )
        } else {
            (libc::IPPROTO_IP, libc::IP_RECVERR, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_PROBE)
        };
        sys::setsockopt_int(fd, level, recverr, 1)?;
        // Don't fragment, and IPv4 ID 0 on packets sent one by one, as the module's go (the
        // kernel's default also sets DF but draws a hashed IPv4 ID for each packet: 1.7 % of
        // `homa bench rtt`'s CPU samples). Datagrams are sized by `Config::mtu`; if the path's MTU is
        // smaller, the refusal reaches the error queue and the socket goes back to letting
        // the kernel fragment (`sys::allow_fragments`).
        sys::setsockopt_int(fd, level, discover, probe)?;
        sys::set_default_tos(fd, v6)?;
        // UDP segmentation offload, where the kernel has it (Linux 4.18+).
        let udp = kind == TransportKind::Udp;
        let gso = udp && sys::setsockopt_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0).is_ok();
        // GRO: only whether the kernel knows the option (it starts off; see `Gro`).
        let gro = udp && sys::setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 0).is_ok();
        let gro = Arc::new(Gro(AtomicU8::new(if gro { Gro::OFF } else { Gro::UNSUPPORTED })));
        let local =
            socket.local_addr()?.as_socket().ok_or(io::Error::from(io::ErrorKind::InvalidInput))?;
        let shared_port = udp && socket.reuse_port()?;
        Ok(SocketTransport {
            socket,
            kind,
            local,
            v6,
            tx: MmsgScratch::new(BATCH),
            rx: MmsgScratch::new(BATCH),
            stats: TransportStats::default(),
            unreachable: VecDeque::new(),
            gso,
            gro,
            kick_from: None,
            rcvbuf: usize::try_from(rcv).unwrap_or(0),
            shared_port,
        })
    }

    fn recv_mode(&self, block: bool) -> RecvMode {
        let raw = self.raw();
        let kick_from = self.kick_from;
        RecvMode { raw, strip_ipv4: raw && !self.v6, gro: self.gro.on(), block, kick_from, vlen: 0 }
    }

    pub(super) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    pub(super) fn raw(&self) -> bool {
        self.kind == TransportKind::Ip
    }

    pub(super) fn reports(&mut self) -> Reports<'_> {
        let raw = self.raw();
        Reports { stats: &mut self.stats, unreachable: &mut self.unreachable, raw }
    }
}

impl fmt::Debug for SocketTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SocketTransport")
            .field("kind", &self.kind)
            .field("local", &self.local)
            .field("fd", &self.fd())
            .finish()
    }
}

impl Transport for SocketTransport {
    fn kind(&self) -> TransportKind {
        self.kind
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn readiness_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    fn receive_buffer(&self) -> Option<usize> {
        Some(self.rcvbuf)
    }

    fn send(&mut self, batch: &mut Batch) -> io::Result<()> {
        let (fd, v6, raw) = (self.fd(), self.v6, self.raw());
        let mut r = Reports { stats: &mut self.stats, unreachable: &mut self.unreachable, raw };
        sys::send_batch(fd, v6, &mut self.gso, batch, &mut self.tx, &mut r)
    }

    fn recv(&mut self, batch: &mut Batch) -> io::Result<()> {
        let (fd, raw, mode) = (self.fd(), self.raw(), self.recv_mode(false));
        let mut r = Reports { stats: &mut self.stats, unreachable: &mut self.unreachable, raw };
        let first = batch.len();
        let result = sys::recv_batch(fd, batch, &mut self.rx, mode, &mut r);
        self.gro.after_recv(fd, batch, first);
        result
    }

    fn poll_unreachable(&mut self) -> Option<Unreachable> {
        self.unreachable.pop_front()
    }

    /// UDP with GSO.
    fn sends_runs(&self) -> bool {
        self.gso
    }

    /// UDP only. (Raw IPv4 sockets deliver the IP header first, of varying length; raw
    /// IPv6 could, but is not done.)
    fn receives_in_place(&self) -> bool {
        !self.raw()
    }

    fn peek(&mut self, head: &mut [u8]) -> Option<Peeked> {
        if !self.receives_in_place() {
            return None;
        }
        let (fd, gro) = (self.fd(), self.gro.on());
        sys::peek(fd, head, gro, &mut self.reports())
    }

    fn recv_split(
        &mut self,
        heads: &mut [u8],
        head_len: usize,
        segment: usize,
        message: &mut Vec<u8>,
        len: usize,
    ) -> io::Result<Option<SocketAddr>> {
        let fd = self.fd();
        let rest =
            message.spare_capacity_mut().get_mut(..len).ok_or(io::ErrorKind::InvalidInput)?;
        let run = sys::Run { heads, head_len, segment };
        let (from, got) = sys::recv_split(fd, run, rest, &mut self.reports())?;
        if got != heads.len() + len {
            self.stats.rx_dropped += 1;
            return Ok(None);
        }
        // SAFETY: the kernel wrote all `len` bytes of `rest`, the spare capacity's start.
        unsafe { message.set_len(message.len() + len) };
        self.stats.rx_datagrams += 1;
        self.stats.rx_in_place += 1;
        Ok(Some(from))
    }

    fn read_errors(&mut self) {
        let fd = self.fd();
        sys::drain_errors(fd, &mut self.reports());
    }

    fn stats(&self) -> TransportStats {
        TransportStats { rx_overflow: sys::receive_drops(self.fd()), ..self.stats }
    }

    /// UDP only: the waiter blocks in `recvmmsg` on a duplicate of the socket (which turns
    /// to blocking mode; every other call here passes `MSG_DONTWAIT`), and is woken by an
    /// empty datagram from a socket of its own. (A raw IP socket would show such a
    /// wake-up to every raw socket of the address, and the kernel may hand it to another
    /// socket sharing the port, so these keep `poll`.)
    fn waiter(&mut self) -> Option<WaitHandle> {
        if self.raw() || self.shared_port || self.kick_from.is_some() {
            return None;
        }
        let made = (|| -> io::Result<WaitHandle> {
            let target = match self.local.ip() {
                ip if ip.is_unspecified() && self.v6 => {
                    SocketAddr::new(Ipv6Addr::LOCALHOST.into(), self.local.port())
                }
                ip if ip.is_unspecified() => {
                    SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.local.port())
                }
                _ => self.local,
            };
            let any: SocketAddr = if self.v6 {
                (Ipv6Addr::UNSPECIFIED, 0).into()
            } else {
                (Ipv4Addr::UNSPECIFIED, 0).into()
            };
            let kicker = UdpSocket::bind(any)?;
            kicker.connect(target)?;
            kicker.set_nonblocking(true)?;
            let from = kicker.local_addr()?;
            let from = super::transport_addr(from, false);
            // Check that a wake-up arrives (it is delivered during the send on the local
            // host); a waiter that cannot be woken must not be used.
            kicker.send(&[])?;
            let mut probe = [0u8; 1];
            let got = self.socket.recv_from(probe_buf(&mut probe))?;
            let came = got.1.as_socket().map(|a| super::transport_addr(a, false));
            if got.0 != 0 || came != Some(from) {
                return Err(io::Error::other("the wake-up datagram did not come back"));
            }
            let fd = self.socket.try_clone()?;
            fd.set_nonblocking(false)?; // shared with self.socket: every other call passes MSG_DONTWAIT
            let mut mode = self.recv_mode(true);
            mode.kick_from = Some(from);
            let waiter = SocketWaiter {
                socket: fd,
                scratch: MmsgScratch::new(BATCH),
                mode,
                gro: Arc::clone(&self.gro),
                vlen: 1,
                since_probe: 0,
                stats: TransportStats::default(),
                unreachable: VecDeque::new(),
            };
            self.kick_from = Some(from);
            let wake = Box::new(move || {
                let _ = kicker.send(&[]);
            });
            // shutdown(SHUT_RD) wakes every blocked receive, and later ones return at once
            // (with nothing): nothing can be lost, unlike a wake-up datagram.
            let reader = self.socket.try_clone()?;
            let shutdown = Box::new(move || {
                // SAFETY: a plain system call on a descriptor this closure owns. An
                // unconnected UDP socket answers ENOTCONN but shuts down all the same.
                unsafe { libc::shutdown(reader.as_raw_fd(), libc::SHUT_RD) };
            });
            Ok(WaitHandle { waiter: Box::new(waiter), wake, shutdown })
        })();
        match made {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::debug!("no blocking receive for {:?}: {e}", self.local);
                let _ = self.socket.set_nonblocking(true);
                None
            }
        }
    }
}

/// `probe` as the uninitialised-bytes buffer socket2's `recv_from` takes.
fn probe_buf(probe: &mut [u8]) -> &mut [std::mem::MaybeUninit<u8>] {
    // SAFETY: initialised bytes are valid MaybeUninit bytes, and the kernel only writes
    // initialised values into them.
    unsafe { &mut *(std::ptr::from_mut(probe) as *mut [std::mem::MaybeUninit<u8>]) }
}

/// How often a waiter that receives one datagram at a time asks for two.
const PROBE_EVERY: u32 = 64;

/// [`SocketTransport`]'s [`Waiter`]: `recvmmsg` with `MSG_WAITFORONE` on a blocking
/// duplicate of the socket.
struct SocketWaiter {
    socket: Socket,
    scratch: MmsgScratch,
    mode: RecvMode,
    gro: Arc<Gro>,
    /// Datagrams to ask for: 1 while waits find the queue empty (each datagram asked for
    /// beyond those queued costs the kernel a failed attempt); doubled while they fill it.
    vlen: usize,
    /// Waits since the last one that asked for 2 to see if datagrams queue up. (Not after
    /// every bulk datagram: a receiver that handles datagrams one by one sends its grants
    /// sooner, and the sender keeps going; batching them stalls it.)
    since_probe: u32,
    stats: TransportStats,
    unreachable: VecDeque<Unreachable>,
}

impl fmt::Debug for SocketWaiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SocketWaiter").field("fd", &self.socket.as_raw_fd()).finish()
    }
}

impl Waiter for SocketWaiter {
    fn wait(&mut self, batch: &mut Batch) -> io::Result<()> {
        let raw = self.mode.raw;
        let mut r = Reports { stats: &mut self.stats, unreachable: &mut self.unreachable, raw };
        // Every 64th wait asks for at least 2: a full batch means datagrams queue up.
        self.since_probe += 1;
        let vlen = if self.vlen == 1 && self.since_probe >= PROBE_EVERY { 2 } else { self.vlen };
        if vlen > 1 {
            self.since_probe = 0;
        }
        let mode = RecvMode { vlen, gro: self.gro.on(), ..self.mode };
        let before = r.stats.rx_datagrams + r.stats.rx_dropped;
        let first = batch.len();
        let fd = self.socket.as_raw_fd();
        let result = sys::recv_batch(fd, batch, &mut self.scratch, mode, &mut r);
        let got = (self.stats.rx_datagrams + self.stats.rx_dropped - before) as usize;
        self.vlen = if vlen > 1 && got >= vlen { (vlen * 2).min(BATCH) } else { 1 };
        self.gro.after_recv(fd, batch, first);
        result
    }

    fn poll_unreachable(&mut self) -> Option<Unreachable> {
        self.unreachable.pop_front()
    }

    fn stats(&self) -> TransportStats {
        self.stats
    }
}
