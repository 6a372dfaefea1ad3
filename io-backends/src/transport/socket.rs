//! [`SocketTransport`]: UDP or raw IP protocol 146 over a plain socket, batched with
//! `sendmmsg`/`recvmmsg`.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};

use super::sys::{self, MmsgScratch, RecvMode, Reports};
use super::{Batch, IPPROTO_HOMA, Transport, TransportKind, TransportStats, Unreachable};
use crate::error::{Error, Result};

/// Datagrams per `sendmmsg` / `recvmmsg`.
pub(crate) const BATCH: usize = 32;
/// Socket buffer size asked for: enough for a few 1,000,000-byte messages in flight.
const SOCKET_BUFFER: i32 = 8 << 20;

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
    /// Receive with UDP GRO: the kernel may coalesce datagrams from one peer.
    gro: bool,
}

impl SocketTransport {
    /// A UDP socket bound to `local` (port 0: any free port). IPv6 sockets are IPv6-only.
    pub fn udp(local: SocketAddr) -> Result<SocketTransport> {
        let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
        if local.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.bind(&local.into()).map_err(|e| match e.raw_os_error() {
            Some(libc::EADDRINUSE) => Error::PortInUse(local.port()),
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
        let (level, recverr) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
        } else {
            (libc::IPPROTO_IP, libc::IP_RECVERR)
        };
        sys::setsockopt_int(fd, level, recverr, 1)?;
        // UDP segmentation offload, where the kernel has it (Linux 4.18+).
        let udp = kind == TransportKind::Udp;
        let gso = udp && sys::setsockopt_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0).is_ok();
        let gro = udp && sys::setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        let local =
            socket.local_addr()?.as_socket().ok_or(io::Error::from(io::ErrorKind::InvalidInput))?;
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
        })
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

    fn max_packet_len(&self) -> usize {
        // The largest IP packet is 65,535 bytes, headers included.
        65_535 - self.outer_header_bytes() as usize
    }

    fn outer_header_bytes(&self) -> u32 {
        let ip = if self.v6 { 40 } else { 20 };
        if self.raw() { ip } else { ip + 8 }
    }

    fn peer(&self, dest: SocketAddr) -> Option<SocketAddr> {
        super::canonical(dest, self.v6, self.raw())
    }

    fn readiness_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    fn send(&mut self, batch: &mut Batch) -> io::Result<()> {
        let (fd, v6, raw) = (self.fd(), self.v6, self.raw());
        let mut r = Reports { stats: &mut self.stats, unreachable: &mut self.unreachable, raw };
        sys::send_batch(fd, v6, &mut self.gso, batch, &mut self.tx, &mut r)
    }

    fn recv(&mut self, batch: &mut Batch) -> io::Result<()> {
        let (fd, raw) = (self.fd(), self.raw());
        let mode = RecvMode { raw, strip_ipv4: raw && !self.v6, gro: self.gro };
        let mut r = Reports { stats: &mut self.stats, unreachable: &mut self.unreachable, raw };
        sys::recv_batch(fd, batch, &mut self.rx, mode, &mut r)
    }

    fn poll_unreachable(&mut self) -> Option<Unreachable> {
        self.unreachable.pop_front()
    }

    fn stats(&self) -> TransportStats {
        self.stats
    }
}
