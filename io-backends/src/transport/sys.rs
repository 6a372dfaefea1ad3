//! The system calls the socket transports share: address conversion, per-packet TOS
//! control messages, `sendmmsg`/`recvmmsg`, and the socket error queue (ICMP errors).

use std::collections::VecDeque;
use std::io;
use std::mem::{self, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::ptr;

use homa_core::wire::tos_for_priority;

use super::{Batch, Datagram, TransportStats, Unreachable};

/// Room for the control messages of one datagram: TOS / traffic class and the UDP segment
/// size (CMSG_SPACE of an int and of a u16: 24 bytes each on 64-bit Linux).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(super) struct CmsgBuf(pub(super) [u8; 64]);

impl CmsgBuf {
    pub(super) const ZERO: CmsgBuf = CmsgBuf([0; 64]);
}

/// Most segments in one UDP GSO send (the kernel's UDP_MAX_SEGMENTS is 64 or more).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes in one UDP GSO send (a UDP datagram holds at most 65,507).
const GSO_MAX_BYTES: usize = 65_000;

/// Writes `addr` into `storage`; returns the length to pass to the kernel.
pub(super) fn write_sockaddr(addr: SocketAddr, storage: &mut libc::sockaddr_storage) -> u32 {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { ptr::write(ptr::from_mut(storage).cast::<libc::sockaddr_in>(), sin) };
            mem::size_of::<libc::sockaddr_in>() as u32
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { ptr::write(ptr::from_mut(storage).cast::<libc::sockaddr_in6>(), sin6) };
            mem::size_of::<libc::sockaddr_in6>() as u32
        }
    }
}

/// The address the kernel wrote into `storage`, if it is IPv4 or IPv6.
pub(super) fn read_sockaddr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(sin.sin_port)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            Some(SocketAddrV6::new(ip, port, sin6.sin6_flowinfo, sin6.sin6_scope_id).into())
        }
        _ => None,
    }
}

/// The priority whose TOS / traffic class sockets carry by default ([`set_default_tos`]):
/// the highest, that of control packets and the shortest messages. Packets at this level
/// need no control message (the kernel parses each one; that is measurable per packet).
pub(super) const DEFAULT_PRIORITY: u8 = 7;

/// Sets the socket's TOS (IPv4) or traffic class (IPv6) to that of [`DEFAULT_PRIORITY`].
pub(super) fn set_default_tos(fd: RawFd, v6: bool) -> io::Result<()> {
    let tos = i32::from(tos_for_priority(DEFAULT_PRIORITY));
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, tos)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TOS, tos)
    }
}

/// Fills `msg`'s control buffer with the TOS (IPv4) or traffic class (IPv6) for Homa
/// `priority` (unless it is the socket's default, [`DEFAULT_PRIORITY`]) and, if given, the
/// UDP GSO segment size. Without either, `msg` carries no control data.
///
/// # Safety
/// `msg.msg_control` must point to a [`CmsgBuf`] that outlives the use of `msg`.
pub(super) unsafe fn set_cmsgs(
    msg: &mut libc::msghdr,
    v6: bool,
    priority: u8,
    segment: Option<u16>,
) {
    let tos = priority != DEFAULT_PRIORITY;
    // SAFETY: pure arithmetic macros.
    let (int_space, u16_space) =
        unsafe { (libc::CMSG_SPACE(mem::size_of::<libc::c_int>() as u32), libc::CMSG_SPACE(2)) };
    msg.msg_controllen =
        (if tos { int_space } else { 0 } + if segment.is_some() { u16_space } else { 0 }) as usize;
    if msg.msg_controllen == 0 {
        msg.msg_control = ptr::null_mut();
        return;
    }
    // SAFETY: msg_control points to a CmsgBuf (64 bytes, 8-aligned: the caller's
    // contract), which holds both messages; the CMSG macros stay inside msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        if tos {
            (*c).cmsg_level = if v6 { libc::IPPROTO_IPV6 } else { libc::IPPROTO_IP };
            (*c).cmsg_type = if v6 { libc::IPV6_TCLASS } else { libc::IP_TOS };
            (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<libc::c_int>() as u32) as usize;
            let tos = libc::c_int::from(tos_for_priority(priority));
            ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), tos);
            c = libc::CMSG_NXTHDR(msg, c);
        }
        if let Some(size) = segment {
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
            ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
        }
    }
}

/// Per-message headers for `sendmmsg`/`recvmmsg`, reused across calls. They hold raw
/// pointers into a batch only for the duration of one call.
pub(super) struct MmsgScratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<CmsgBuf>,
    /// Per message: the batch datagrams it carries (first, count).
    runs: Vec<(usize, usize)>,
    /// Receiving: the slots the headers point to (the first's address, the slots' length,
    /// the first's index and how many) and whether they take control data; and how many
    /// headers the last call may have changed (the rest are still set up).
    prepared: Option<(usize, usize, usize, usize, bool)>,
    touched: usize,
}

// SAFETY: the raw pointers inside are rewritten before every system call and never
// dereferenced outside one, so moving the scratch to another thread is harmless.
unsafe impl Send for MmsgScratch {}

impl MmsgScratch {
    /// Room for `n` messages (receiving) or `n` datagrams (sending: two iovecs each, the
    /// slot's bytes and the tail).
    pub(super) fn new(n: usize) -> MmsgScratch {
        // SAFETY: all-zero bytes are valid for these plain C structs.
        let (hdr, iov, name) = unsafe { (mem::zeroed(), mem::zeroed(), mem::zeroed()) };
        MmsgScratch {
            hdrs: vec![hdr; n],
            iovs: vec![iov; 2 * n],
            names: vec![name; n],
            cmsgs: vec![CmsgBuf::ZERO; n],
            runs: vec![(0, 0); n],
            prepared: None,
            touched: 0,
        }
    }

    /// Points headers `..want` at slots `first..` of `batch`. Only the headers the last
    /// call touched are reset when nothing else changed (the kernel rewrites lengths and
    /// flags; a receive usually touches one or two of 32). "Nothing else" includes the
    /// slots' length: another batch may sit where a dropped one was, with other slots, and
    /// a header left pointing at the old ones would let the kernel write past the new.
    fn prepare_recv(&mut self, batch: &mut Batch, first: usize, want: usize, gro: bool) {
        let slot = batch.slot_mut(first);
        let key = (slot.as_ptr() as usize, slot.len(), first, want, gro);
        let count = if self.prepared == Some(key) { self.touched.min(want) } else { want };
        self.prepared = Some(key);
        for i in 0..count {
            let slot = batch.slot_mut(first + i);
            self.iovs[i] = libc::iovec { iov_base: slot.as_mut_ptr().cast(), iov_len: slot.len() };
            let msg = &mut self.hdrs[i].msg_hdr;
            msg.msg_name = ptr::from_mut(&mut self.names[i]).cast();
            msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as u32;
            msg.msg_iov = &raw mut self.iovs[i];
            msg.msg_iovlen = 1;
            (msg.msg_control, msg.msg_controllen) = match gro {
                true => (self.cmsgs[i].0.as_mut_ptr().cast(), mem::size_of::<CmsgBuf>()),
                false => (ptr::null_mut(), 0),
            };
            msg.msg_flags = 0;
        }
    }
}

/// Reads an eventfd or timerfd to clear its readiness; nothing to read is fine.
pub(crate) fn clear(fd: RawFd) {
    let mut n = 0u64;
    // SAFETY: reads 8 bytes into a live u64 from a non-blocking descriptor of ours.
    unsafe { libc::read(fd, (&raw mut n).cast(), 8) };
}

/// Makes an eventfd readable. A full counter still leaves it readable.
pub(crate) fn signal(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd of ours.
    unsafe { libc::write(fd, (&raw const one).cast(), 8) };
}

/// Whether datagrams wait on `fd` now (POLLERR alone is no datagram).
pub(super) fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd; no waiting.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
}

/// Whether a failed send or receive may have reported a socket error pending from an ICMP
/// error (with IP_RECVERR every one is also queued, with its details, on the error queue):
/// anything but "try again" and errors about our own descriptor or buffers. The queue must
/// then be read: while it holds anything the socket polls as in error, and an event loop on
/// it would spin.
pub(super) fn may_be_pending(errno: i32) -> bool {
    !matches!(errno, libc::EAGAIN | libc::EINTR | libc::EBADF | libc::ENOTSOCK | libc::EFAULT)
}

/// Errors that mean "this destination cannot be reached".
pub(super) fn is_unreachable(errno: i32) -> bool {
    matches!(
        errno,
        libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::ENETDOWN
            | libc::ENOPROTOOPT
            | libc::EADDRNOTAVAIL
    )
}

/// Where the socket layer reports what happened to the packets.
pub(super) struct Reports<'a> {
    pub(super) stats: &'a mut TransportStats,
    pub(super) unreachable: &'a mut VecDeque<Unreachable>,
    /// Raw IP: ICMP port-unreachable names a Homa port (in the returned Homa header).
    pub(super) raw: bool,
}

/// Sends `batch` with `sendmmsg` and clears it; each datagram is its slot's bytes and its
/// tail (two iovecs). With `gso`, runs of full-size datagrams to one peer at one priority
/// go as one UDP GSO message; if the kernel refuses that, `gso` is turned off and they go
/// one by one. A refused datagram is dropped and counted; if its destination is
/// unreachable it is reported. A pending socket error (an ICMP error about an earlier
/// packet) is read from the error queue and the message is retried once.
pub(super) fn send_batch(
    fd: RawFd,
    v6: bool,
    gso: &mut bool,
    batch: &mut Batch,
    s: &mut MmsgScratch,
    r: &mut Reports<'_>,
) -> io::Result<()> {
    if batch.len() == 1 && send_lone(fd, batch, r) {
        batch.clear();
        return Ok(());
    }
    let mut next = 0;
    while next < batch.len() {
        next = send_some(fd, v6, gso, batch, next, s, r)?;
    }
    batch.clear();
    Ok(())
}

/// The round-trip case: a batch of one datagram in one piece at the socket's default
/// priority goes by `sendto` without the `sendmmsg` scratch. Returns whether it was sent;
/// if not, the general path sends it again and handles the error (a pending ICMP error this
/// call reported is read from the error queue first, as the general path would have).
fn send_lone(fd: RawFd, batch: &Batch, r: &mut Reports<'_>) -> bool {
    let (d, bytes) = batch.get(0);
    if batch.tail(0).is_some() || d.priority != DEFAULT_PRIORITY {
        return false;
    }
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut name: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let namelen = write_sockaddr(d.addr, &mut name);
    // SAFETY: `bytes` and `name` are live for the call; the kernel only reads them.
    let rc = unsafe {
        libc::sendto(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT,
            ptr::from_ref(&name).cast(),
            namelen,
        )
    };
    r.stats.tx_calls += 1;
    if rc >= 0 {
        r.stats.tx_datagrams += 1;
        return true;
    }
    let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
    if may_be_pending(errno) {
        drain_errors(fd, r);
    }
    false
}

/// How many datagrams from `first` on can go as one GSO message.
fn run_len(batch: &Batch, first: usize) -> usize {
    let (head, _) = batch.get(first);
    let max = GSO_MAX_SEGMENTS.min(GSO_MAX_BYTES / batch.slot_len()).max(1);
    let mut n = 1;
    while first + n < batch.len() && n < max {
        // Every segment but the last must be full.
        let (d, _) = batch.get(first + n);
        let full = batch.datagram_len(first + n - 1) == batch.slot_len();
        if !full || d.addr != head.addr || d.priority != head.priority {
            break;
        }
        n += 1;
    }
    n
}

/// Sends up to a scratch-full of messages starting at datagram `first`; returns the first
/// datagram not yet handled.
fn send_some(
    fd: RawFd,
    v6: bool,
    gso: &mut bool,
    batch: &Batch,
    first: usize,
    s: &mut MmsgScratch,
    r: &mut Reports<'_>,
) -> io::Result<usize> {
    let (mut n, mut k, mut v) = (0, first, 0);
    while n < s.hdrs.len() && k < batch.len() {
        // Two iovecs a datagram: its slot's bytes, and its tail if it has one.
        let room = (s.iovs.len() - v) / 2;
        let count = if *gso { run_len(batch, k) } else { 1 }.min(room);
        if count == 0 {
            break;
        }
        let first_iov = v;
        for j in k..k + count {
            s.iovs[v] = iovec(batch.get(j).1);
            v += 1;
            if let Some(tail) = batch.tail(j) {
                s.iovs[v] = iovec(tail.as_slice());
                v += 1;
            }
        }
        let (d, _) = batch.get(k);
        let namelen = write_sockaddr(d.addr, &mut s.names[n]);
        let msg = &mut s.hdrs[n].msg_hdr;
        msg.msg_name = ptr::from_mut(&mut s.names[n]).cast();
        msg.msg_namelen = namelen;
        msg.msg_iov = &raw mut s.iovs[first_iov];
        msg.msg_iovlen = v - first_iov;
        msg.msg_control = s.cmsgs[n].0.as_mut_ptr().cast();
        msg.msg_flags = 0;
        let segment = (count > 1).then_some(batch.slot_len() as u16);
        // SAFETY: msg_control points to this message's own CmsgBuf, which lives in the
        // scratch for the whole call.
        unsafe { set_cmsgs(msg, v6, d.priority, segment) };
        s.runs[n] = (k, count);
        n += 1;
        k += count;
    }
    let (mut i, mut retried) = (0, false);
    while i < n {
        // SAFETY: hdrs[i..n] point to live names, iovecs (into `batch` and its tails)
        // and control buffers set up above; the kernel only reads them. One message goes
        // with sendmsg (or sendto, in one piece without control data), which cost the
        // kernel less than a batch of one.
        let sent = unsafe {
            if n - i == 1 {
                let h = &s.hdrs[i].msg_hdr;
                let rc = if h.msg_controllen == 0 && h.msg_iovlen <= 1 {
                    let iov = &*h.msg_iov;
                    let name = h.msg_name.cast::<libc::sockaddr>();
                    libc::sendto(
                        fd,
                        iov.iov_base,
                        iov.iov_len,
                        libc::MSG_DONTWAIT,
                        name,
                        h.msg_namelen,
                    )
                } else {
                    libc::sendmsg(fd, h, libc::MSG_DONTWAIT)
                };
                if rc >= 0 { 1 } else { -1 }
            } else {
                libc::sendmmsg(fd, s.hdrs[i..].as_mut_ptr(), (n - i) as u32, libc::MSG_DONTWAIT)
            }
        };
        r.stats.tx_calls += 1;
        if sent > 0 {
            let sent = sent as usize;
            r.stats.tx_datagrams += s.runs[i..i + sent].iter().map(|&(_, c)| c as u64).sum::<u64>();
            (i, retried) = (i + sent, false);
            continue;
        }
        let err = io::Error::last_os_error();
        let errno = err.raw_os_error().unwrap_or(0);
        let (start, count) = s.runs[i];
        // Probably an ICMP error about an earlier packet, if the error queue held one: learn
        // which peer it was about, then try this message again.
        let pending = may_be_pending(errno) && drain_errors(fd, r);
        match errno {
            libc::EINTR => {}
            libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH if !retried => {
                retried = true;
            }
            _ if pending && !retried => retried = true,
            libc::EIO | libc::EINVAL | libc::EMSGSIZE | libc::ENOPROTOOPT | libc::EOPNOTSUPP
                if count > 1 =>
            {
                *gso = false;
                tracing::info!("UDP GSO refused ({err}); sending datagrams one by one");
                return Ok(start);
            }
            // The socket is unusable. (EINVAL is about one datagram, e.g. to port 0: below.)
            libc::EBADF | libc::ENOTSOCK | libc::EFAULT => return Err(err),
            _ => {
                let (d, _) = batch.get(start);
                for _ in 0..count {
                    refused(d.addr, errno, r);
                }
                tracing::debug!(to = %d.addr, "send failed: {err}");
                (i, retried) = (i + 1, false);
            }
        }
    }
    Ok(k)
}

/// An iovec the kernel reads `bytes` from.
pub(super) fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec { iov_base: bytes.as_ptr().cast_mut().cast(), iov_len: bytes.len() }
}

/// Counts a datagram the kernel refused with `errno`, reporting its peer if the error is
/// final for it. Transient refusals (a full buffer or queue, ENOBUFS / EAGAIN / ENOMEM, or
/// a firewall rule dropping the packet, EPERM) are a lost packet like any other: Homa's
/// RESENDs recover it.
pub(super) fn refused(to: SocketAddr, errno: i32, r: &mut Reports<'_>) {
    if errno == libc::EINVAL {
        // No datagram to this address can be sent (UDP port 0, an IPv6 link-local address
        // without its interface): its calls fail now rather than time out.
        tracing::warn!(%to, "the kernel refuses to send to this address (EINVAL)");
    }
    if is_unreachable(errno) || matches!(errno, libc::EACCES | libc::EINVAL) {
        r.stats.unreachable += 1;
        r.unreachable.push_back(Unreachable { peer: to, port: None });
    }
    r.stats.tx_dropped += 1;
}

/// How a socket's datagrams arrive.
#[derive(Debug, Clone, Copy)]
pub(super) struct RecvMode {
    /// Raw IP: no source port.
    pub(super) raw: bool,
    /// Raw IPv4: the IP header comes first; strip it.
    pub(super) strip_ipv4: bool,
    /// UDP GRO is on: a datagram may hold several packets (segment size in a cmsg).
    pub(super) gro: bool,
    /// Block until one datagram arrives (the socket must be in blocking mode), then take
    /// what else is waiting.
    pub(super) block: bool,
    /// Empty datagrams from this address are wake-ups ([`super::Waiter`]), not packets.
    pub(super) kick_from: Option<SocketAddr>,
    /// Most datagrams to take (0: as many as the batch holds).
    pub(super) vlen: usize,
}

/// Receives into `batch` with one `recvmmsg`: without blocking, or with `mode.block`
/// waiting for the first datagram. A blocking receive may return with nothing (a signal,
/// an ICMP error report, a wake-up datagram).
pub(super) fn recv_batch(
    fd: RawFd,
    batch: &mut Batch,
    s: &mut MmsgScratch,
    mode: RecvMode,
    r: &mut Reports<'_>,
) -> io::Result<()> {
    let first = batch.len();
    let mut want = (batch.capacity() - first).min(s.hdrs.len());
    if mode.vlen > 0 {
        want = want.min(mode.vlen);
    }
    if want == 0 {
        return Ok(());
    }
    if want == 1 && !mode.gro {
        return recv_one(fd, batch, mode, r);
    }
    s.prepare_recv(batch, first, want, mode.gro);
    let flags = if mode.block { libc::MSG_WAITFORONE } else { libc::MSG_DONTWAIT };
    let got = loop {
        // SAFETY: hdrs[..want] point to live names and to distinct slots of `batch`, which
        // stays mutably borrowed (unused otherwise) for the whole call. One message is
        // received with recvmsg, cheaper in the kernel than a batch of one.
        let got = unsafe {
            if want == 1 {
                let flags = if mode.block { 0 } else { libc::MSG_DONTWAIT };
                let n = libc::recvmsg(fd, &mut s.hdrs[0].msg_hdr, flags);
                if n >= 0 {
                    s.hdrs[0].msg_len = n as u32;
                    1
                } else {
                    -1
                }
            } else {
                libc::recvmmsg(fd, s.hdrs.as_mut_ptr(), want as u32, flags, ptr::null_mut())
            }
        };
        if got >= 0 {
            s.touched = got as usize + 1;
            break got as usize;
        }
        s.touched = 1;
        let err = io::Error::last_os_error();
        match err.raw_os_error().unwrap_or(0) {
            libc::EINTR if mode.block => return Ok(()),
            libc::EINTR => continue,
            // Nothing to read. (The error queue needs no look here: every ICMP error also
            // fails one send or receive, and that drains it.)
            libc::EAGAIN => return Ok(()),
            // A pending ICMP error, reported once: details are in the error queue.
            errno if may_be_pending(errno) && (drain_errors(fd, r) || is_unreachable(errno)) => {
                if mode.block {
                    return Ok(());
                }
                continue;
            }
            _ => return Err(err),
        }
    };
    if got > 0 {
        r.stats.rx_calls += 1;
    }
    for i in 0..got {
        let h = &s.hdrs[i];
        let (mut len, flags) = (h.msg_len as usize, h.msg_hdr.msg_flags);
        let raw = mode.raw;
        let from = read_sockaddr(&s.names[i]).and_then(|a| super::source(a, raw));
        let Some(from) = from.filter(|_| flags & libc::MSG_TRUNC == 0) else {
            r.stats.rx_dropped += 1;
            continue;
        };
        if len == 0 && mode.kick_from == Some(from) {
            continue; // a wake-up, not a packet
        }
        let (src, dst) = (first + i, batch.len());
        let mut offset = 0;
        if mode.strip_ipv4 {
            let slot = batch.slot_mut(src);
            let ihl = usize::from(slot.first().copied().unwrap_or(0) & 0x0f) * 4;
            if ihl < 20 || ihl > len {
                r.stats.rx_dropped += 1;
                continue;
            }
            offset = ihl;
            len -= ihl;
        }
        // Close the gap left by a dropped datagram and/or the stripped header.
        batch.move_within(src, offset, len, dst);
        // SAFETY: the kernel wrote this message's control data (if any) into its buffer.
        let segment = if mode.gro { unsafe { gro_segment(&h.msg_hdr) } } else { 0 };
        batch.push(Datagram { addr: from, len, priority: 0, segment });
        r.stats.rx_datagrams += 1;
    }
    Ok(())
}

/// Receives one datagram into the next slot of `batch` with `recvfrom` (no control data
/// wanted: it spares the kernel copying in and checking a msghdr and an iovec, which is
/// measurable per packet). As [`recv_batch`] otherwise.
fn recv_one(fd: RawFd, batch: &mut Batch, mode: RecvMode, r: &mut Reports<'_>) -> io::Result<()> {
    let flags = if mode.block { 0 } else { libc::MSG_DONTWAIT };
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut name: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let slot = batch.next_slot();
    let len = loop {
        let mut namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: the slot and `name` are live buffers of the lengths given.
        let n = unsafe {
            libc::recvfrom(
                fd,
                slot.as_mut_ptr().cast(),
                slot.len(),
                flags,
                ptr::from_mut(&mut name).cast(),
                &mut namelen,
            )
        };
        if n >= 0 {
            break n as usize;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error().unwrap_or(0) {
            libc::EINTR if mode.block => return Ok(()),
            libc::EINTR => continue,
            libc::EAGAIN => return Ok(()),
            errno if may_be_pending(errno) && (drain_errors(fd, r) || is_unreachable(errno)) => {
                if mode.block {
                    return Ok(());
                }
            }
            _ => return Err(err),
        }
    };
    r.stats.rx_calls += 1;
    let raw = mode.raw;
    let from = read_sockaddr(&name).and_then(|a| super::source(a, raw));
    // Slots hold any IP packet: a datagram that fills one was truncated.
    let Some(from) = from.filter(|_| len < slot.len()) else {
        r.stats.rx_dropped += 1;
        return Ok(());
    };
    if len == 0 && mode.kick_from == Some(from) {
        return Ok(()); // a wake-up, not a packet
    }
    let (mut offset, mut len) = (0, len);
    if mode.strip_ipv4 {
        let ihl = usize::from(slot[0] & 0x0f) * 4;
        if len == 0 || ihl < 20 || ihl > len {
            r.stats.rx_dropped += 1;
            return Ok(());
        }
        (offset, len) = (ihl, len - ihl);
    }
    let dst = batch.len();
    batch.move_within(dst, offset, len, dst);
    batch.push(Datagram { addr: from, len, priority: 0, segment: 0 });
    r.stats.rx_datagrams += 1;
    Ok(())
}

/// Looks at the next UDP datagram without taking it (`MSG_PEEK`): its source, its whole
/// length, and its first `head.len()` bytes in `head`. `None` if nothing waits, on an error
/// about our own socket (the next receive meets it), or if UDP GRO coalesced several
/// packets into it (`gro`: the socket has GRO on).
pub(super) fn peek(
    fd: RawFd,
    head: &mut [u8],
    gro: bool,
    r: &mut Reports<'_>,
) -> Option<(SocketAddr, usize)> {
    // SAFETY: all-zero bytes are a valid msghdr.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    let mut control = CmsgBuf::ZERO;
    let mut iov = libc::iovec { iov_base: head.as_mut_ptr().cast(), iov_len: head.len() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if gro {
        msg.msg_control = ptr::from_mut(&mut control).cast();
        msg.msg_controllen = mem::size_of::<CmsgBuf>();
    }
    let (from, len) = recvmsg_from(fd, &mut msg, libc::MSG_PEEK | libc::MSG_TRUNC, r).ok()?;
    // SAFETY: the kernel just filled msg, control buffer included.
    let segment = if gro { unsafe { gro_segment(&msg) } } else { 0 };
    (segment == 0 || segment >= len).then_some((from, len))
}

/// Receives the next UDP datagram split in two: its first `head.len()` bytes into `head`,
/// the rest into `rest`. Returns its source and whole length (a datagram longer than both
/// was cut short; the bytes written are that length, up to both's). The part in `rest` is
/// received into a 64-byte-aligned iovec after the few bytes before the first aligned
/// address: the kernel copies several times slower to an unaligned destination (see
/// [`Batch`]).
pub(super) fn recv_split(
    fd: RawFd,
    head: &mut [u8],
    rest: &mut [MaybeUninit<u8>],
    r: &mut Reports<'_>,
) -> io::Result<(SocketAddr, usize)> {
    let split = rest.as_ptr().align_offset(64).min(rest.len());
    let (before, aligned) = rest.split_at_mut(split);
    let iovec = |p: *mut u8, len| libc::iovec { iov_base: p.cast(), iov_len: len };
    let mut iov = [
        iovec(head.as_mut_ptr(), head.len()),
        iovec(before.as_mut_ptr().cast(), before.len()),
        iovec(aligned.as_mut_ptr().cast(), aligned.len()),
    ];
    // SAFETY: all-zero bytes are a valid msghdr.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len();
    recvmsg_from(fd, &mut msg, libc::MSG_TRUNC, r)
}

/// One non-blocking `recvmsg` on a UDP socket into `msg`'s iovecs and control buffer, for
/// [`peek`] and [`recv_split`]: retried after a signal, and after a pending ICMP error
/// (read off the error queue, as every receive does). Returns the source (an error if it is
/// none a reply could reach, see `source`) and what `recvmsg` returned.
fn recvmsg_from(
    fd: RawFd,
    msg: &mut libc::msghdr,
    flags: libc::c_int,
    r: &mut Reports<'_>,
) -> io::Result<(SocketAddr, usize)> {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut name: libc::sockaddr_storage = unsafe { mem::zeroed() };
    msg.msg_name = ptr::from_mut(&mut name).cast();
    msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let len = loop {
        // SAFETY: msg points to live buffers of the lengths it gives.
        let n = unsafe { libc::recvmsg(fd, msg, flags | libc::MSG_DONTWAIT) };
        if n >= 0 {
            r.stats.rx_calls += 1;
            break n as usize;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error().unwrap_or(0) {
            libc::EINTR => {}
            errno if may_be_pending(errno) && (drain_errors(fd, r) || is_unreachable(errno)) => {}
            _ => return Err(err),
        }
    };
    msg.msg_name = ptr::null_mut(); // `name` goes now
    let from = read_sockaddr(&name).and_then(|a| super::source(a, false));
    Ok((from.ok_or_else(|| io::Error::other("no source address a reply could reach"))?, len))
}

/// The UDP GRO segment size in a received message's control data, or 0.
///
/// # Safety
/// `msg` must describe a message the kernel just filled, control buffer included.
unsafe fn gro_segment(msg: &libc::msghdr) -> usize {
    // SAFETY: the CMSG macros stay within msg_controllen bytes the kernel wrote.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: c points to a complete cmsghdr inside the buffer (see above).
        unsafe {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let size = ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(size).unwrap_or(0);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    0
}

/// Reads the socket's error queue (enabled with IP_RECVERR / IPV6_RECVERR), reports the
/// destinations of ICMP "unreachable" errors and, on a "message too long", lets the kernel
/// fragment from then on (`allow_fragments`). The data read is the start of the packet the
/// error is about (from the Homa header on, for raw IP and UDP alike).
pub(super) fn drain_errors(fd: RawFd, r: &mut Reports<'_>) -> bool {
    let mut data = [0u8; 256];
    let mut control = [0u64; 64];
    let mut drained = false;
    loop {
        // SAFETY: all-zero bytes are valid for these plain C structs.
        let mut name: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_name = ptr::from_mut(&mut name).cast();
        msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as u32;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = mem::size_of_val(&control);
        // SAFETY: msg points to live buffers of the lengths given.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            return drained;
        }
        drained = true;
        let Some(dest) = read_sockaddr(&name).map(|a| super::transport_addr(a, r.raw)) else {
            continue;
        };
        // SAFETY: the kernel filled msg_controllen bytes of `control` with well-formed
        // cmsgs; the CMSG macros stay inside them.
        let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !c.is_null() {
            // SAFETY: c is a header inside the control buffer (see above).
            let (level, kind) = unsafe { ((*c).cmsg_level, (*c).cmsg_type) };
            let recverr = (level == libc::IPPROTO_IP && kind == libc::IP_RECVERR)
                || (level == libc::IPPROTO_IPV6 && kind == libc::IPV6_RECVERR);
            if recverr {
                // SAFETY: an IP(V6)_RECVERR message carries a sock_extended_err.
                let e = unsafe {
                    ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::sock_extended_err>())
                };
                // Only "destination unreachable" says the peer cannot be reached (the
                // kernel also reports "time exceeded", a transient routing loop, as
                // EHOSTUNREACH), and IPv6's "unrecognized next header", its protocol
                // unreachable: a raw-IP peer without Homa.
                let (v4, v6) = (libc::SO_EE_ORIGIN_ICMP, libc::SO_EE_ORIGIN_ICMP6);
                let no_homa = e.ee_origin == v6 && (e.ee_type, e.ee_code) == (4, 1);
                let unreachable =
                    (e.ee_origin == v4 && e.ee_type == 3) || (e.ee_origin == v6 && e.ee_type == 1);
                let errno = e.ee_errno as i32;
                if errno == libc::EMSGSIZE {
                    // Refused here (too big for the interface) or by a router (ICMP).
                    allow_fragments(fd, level, dest, e.ee_info);
                }
                if no_homa || (unreachable && is_unreachable(errno)) {
                    // With UDP the port is part of `dest` already.
                    let port = (r.raw && errno == libc::ECONNREFUSED && n >= 4)
                        .then(|| u16::from_be_bytes([data[2], data[3]]));
                    r.stats.unreachable += 1;
                    r.unreachable.push_back(Unreachable { peer: dest, port });
                }
            }
            // SAFETY: as above.
            c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
        }
    }
}

/// Packets too big for the path (`mtu`, as the kernel reports it) were refused: the socket
/// stops sending with don't-fragment regardless (`*_PMTUDISC_PROBE`, set when it was opened)
/// and lets the kernel fragment what does not fit, as by default; once per socket, with a
/// warning. Slower, but a default `mtu` of 1500 keeps working over smaller-MTU links.
fn allow_fragments(fd: RawFd, level: i32, to: SocketAddr, mtu: u32) {
    let (name, probe, want) = if level == libc::IPPROTO_IPV6 {
        (libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_PROBE, libc::IPV6_PMTUDISC_WANT)
    } else {
        (libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_PROBE, libc::IP_PMTUDISC_WANT)
    };
    if getsockopt_int(fd, level, name).ok() == Some(probe)
        && setsockopt_int(fd, level, name, want).is_ok()
    {
        tracing::warn!(
            %to,
            "packets are larger than the path's MTU ({mtu}): the kernel fragments them from \
             now on, which is slower; set the socket's mtu (Builder::mtu) to at most {mtu}"
        );
    }
}

/// Datagrams the kernel dropped for want of room in the socket's receive buffer
/// (`SO_MEMINFO`'s `SK_MEMINFO_DROPS`, Linux 4.6+; 0 where it cannot be read).
pub(super) fn receive_drops(fd: RawFd) -> u64 {
    const SO_MEMINFO: i32 = 55;
    const SK_MEMINFO_DROPS: usize = 8;
    let mut info = [0u32; 9];
    let mut len = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` and `len` are live and `len` holds `info`'s size; the kernel writes at
    // most that many bytes.
    let rc = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, SO_MEMINFO, info.as_mut_ptr().cast(), &mut len)
    };
    if rc < 0 || (len as usize) < (SK_MEMINFO_DROPS + 1) * 4 {
        return 0;
    }
    u64::from(info[SK_MEMINFO_DROPS])
}

/// Reads an integer socket option.
pub(super) fn getsockopt_int(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are live and len holds value's size.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, ptr::from_mut(&mut value).cast(), &mut len) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(value) }
}

/// Sets an integer socket option.
pub(super) fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the option value is a live int of the length given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch where a dropped one was, with slots of another length (white-box: the same
    /// batch with its slot length changed), gets headers for its own slots, not the old.
    #[test]
    fn receive_headers_follow_the_slot_length() {
        for (before, after) in [(2048, 1024), (1024, 2048)] {
            let mut batch = Batch::new(4, before);
            let mut s = MmsgScratch::new(BATCH_SLOTS);
            s.prepare_recv(&mut batch, 0, 2, false);
            s.touched = 0; // as after a receive that changed no header
            batch.slot_len = after;
            s.prepare_recv(&mut batch, 0, 2, false);
            for i in 0..2 {
                let slot = batch.slot_mut(i);
                assert_eq!(s.iovs[i].iov_base, slot.as_mut_ptr().cast(), "slot {i}");
                assert_eq!(s.iovs[i].iov_len, after, "slot {i}: {before} -> {after}");
            }
        }
    }

    /// Scratch headers for the tests.
    const BATCH_SLOTS: usize = 32;

    #[test]
    fn gso_runs_are_full_packets_to_one_peer_at_one_priority() {
        let (a, b): (SocketAddr, SocketAddr) =
            ("1.1.1.1:1".parse().unwrap(), "2.2.2.2:2".parse().unwrap());
        let mut batch = Batch::new(8, 100);
        // full a, full a, short a | full a | full b, full b | full b at another priority
        for (addr, len, priority) in [
            (a, 100, 6),
            (a, 100, 6),
            (a, 40, 6),
            (a, 100, 6),
            (b, 100, 6),
            (b, 100, 6),
            (b, 100, 7),
        ] {
            batch.push(Datagram { addr, len, priority, segment: 0 });
        }
        assert_eq!(run_len(&batch, 0), 3);
        assert_eq!(run_len(&batch, 3), 1);
        assert_eq!(run_len(&batch, 4), 2);
        assert_eq!(run_len(&batch, 6), 1);
    }

    /// Gathered DATA (headers in the slot, message bytes in the tail) is full when slot and
    /// tail together fill `slot_len`.
    #[test]
    fn gso_runs_count_the_tails_of_gathered_datagrams() {
        let mut ep = homa_core::Endpoint::new(homa_core::Config::default()).unwrap();
        let to: SocketAddr = "198.18.0.1:1".parse().unwrap();
        let port = ep.bind_ephemeral().unwrap();
        // 2,847 bytes go first (SRPT) as 1,424 + 1,423, then 3,000 as 1,424 + 1,424 + 152.
        ep.send_request(homa_core::Instant::ZERO, port, to, 99, vec![1; 3000], 0).unwrap();
        ep.send_request(homa_core::Instant::ZERO, port, to, 99, vec![2; 2847], 1).unwrap();
        let mut batch = Batch::new(8, ep.config().max_packet_len());
        while let Some((t, tail)) =
            ep.poll_transmit_gather(homa_core::Instant::ZERO, batch.next_slot()).unwrap()
        {
            batch.push_gather(Datagram { addr: to, len: t.len, priority: 5, segment: 0 }, tail);
        }
        let lens: Vec<usize> = (0..batch.len()).map(|i| batch.datagram_len(i)).collect();
        assert_eq!(lens, [1480, 1479, 1480, 1480, 208]);
        assert_eq!(run_len(&batch, 0), 2, "a datagram one byte short ends its run");
        assert_eq!(run_len(&batch, 2), 3);
    }
}
