//! Receiving: batches with `recvmmsg` (or `recvfrom` for one), and single UDP datagrams
//! peeked at or received split in two.

use std::io;
use std::mem::{self, MaybeUninit};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

use super::cmsg::{gro_segment, received};
use super::{
    CmsgBuf, MmsgScratch, Reports, drain_errors, is_unreachable, may_be_pending, read_sockaddr,
};
use crate::transport::{self, Batch, Datagram, Peeked};

/// How a socket's datagrams arrive.
#[derive(Debug, Clone, Copy)]
pub(in crate::transport) struct RecvMode {
    /// Raw IP: no source port.
    pub(in crate::transport) raw: bool,
    /// Raw IPv4: the IP header comes first; strip it.
    pub(in crate::transport) strip_ipv4: bool,
    /// UDP GRO is on: a datagram may hold several packets (segment size in a cmsg).
    pub(in crate::transport) gro: bool,
    /// Block until one datagram arrives (the socket must be in blocking mode), then take
    /// what else is waiting.
    pub(in crate::transport) block: bool,
    /// Empty datagrams from this address are wake-ups ([`Waiter`]), not packets.
    ///
    /// [`Waiter`]: crate::transport::Waiter
    pub(in crate::transport) kick_from: Option<SocketAddr>,
    /// Most datagrams to take (0: as many as the batch holds).
    pub(in crate::transport) vlen: usize,
}

/// Receives into `batch` with one `recvmmsg`: without blocking, or with `mode.block`
/// waiting for the first datagram. A blocking receive may return with nothing (a signal,
/// an ICMP error report, a wake-up datagram).
pub(in crate::transport) fn recv_batch(
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
        if !retry(io::Error::last_os_error(), fd, mode, r)? {
            return Ok(());
        }
    };
    if got > 0 {
        r.stats.rx_calls += 1;
    }
    for i in 0..got {
        let h = &s.hdrs[i];
        let (mut len, flags) = (h.msg_len as usize, h.msg_hdr.msg_flags);
        let raw = mode.raw;
        let from = read_sockaddr(&s.names[i]).and_then(|a| transport::source(a, raw));
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
        let segment = if mode.gro { gro_segment(unsafe { received(&h.msg_hdr) }) } else { 0 };
        batch.push(Datagram { addr: from, len, priority: 0, segment });
        r.stats.rx_datagrams += 1;
    }
    Ok(())
}

/// After a receive failed with `err`: whether to try again (`false`: return with nothing
/// received; a blocking receive returns so that its caller looks at what woke it).
fn retry(err: io::Error, fd: RawFd, mode: RecvMode, r: &mut Reports<'_>) -> io::Result<bool> {
    match err.raw_os_error().unwrap_or(0) {
        libc::EINTR => Ok(!mode.block),
        // Nothing to read. (The error queue needs no look here: every ICMP error also fails
        // one send or receive, and that drains it.)
        libc::EAGAIN => Ok(false),
        // A pending ICMP error, reported once: details are in the error queue.
        errno if may_be_pending(errno) && (drain_errors(fd, r) || is_unreachable(errno)) => {
            Ok(!mode.block)
        }
        _ => Err(err),
    }
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
        if !retry(io::Error::last_os_error(), fd, mode, r)? {
            return Ok(());
        }
    };
    r.stats.rx_calls += 1;
    let raw = mode.raw;
    let from = read_sockaddr(&name).and_then(|a| transport::source(a, raw));
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

/// Looks at the next UDP datagram without taking it: its first `head.len()` bytes into
/// `head`, its source, whole length and (with `gro`) the size of the packets it holds.
pub(in crate::transport) fn peek(
    fd: RawFd,
    head: &mut [u8],
    gro: bool,
    r: &mut Reports<'_>,
) -> Option<Peeked> {
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
    let segment = if gro { gro_segment(unsafe { received(&msg) }) } else { 0 };
    let segment = if segment >= len { 0 } else { segment };
    Some(Peeked { from, len, segment })
}

/// The most packets a datagram received in place may hold (a GRO batch of 64 KiB of
/// packets of a kilobyte, the least the driver receives in place in runs).
pub(crate) const MAX_RUN: usize = 64;

/// Where [`recv_split`] puts the headers of a run of packets: `heads` holds one
/// `head_len`-byte header per `segment`-byte packet.
pub(in crate::transport) struct Run<'a> {
    pub(in crate::transport) heads: &'a mut [u8],
    pub(in crate::transport) head_len: usize,
    pub(in crate::transport) segment: usize,
}

/// Receives the next UDP datagram, a run of packets, split: each packet's header into
/// `run.heads`, its payload into `rest`, after the previous payload. Returns its source
/// and whole length (a datagram longer than the buffers was cut short). Each payload is
/// received into a 64-byte-aligned iovec after the few bytes before the first aligned
/// address: the kernel copies several times slower to an unaligned destination (see
/// [`Batch`]). Refused (`InvalidInput`): a run of more than [`MAX_RUN`] packets, `heads` not
/// a whole number of headers, or `rest` longer than the packets' payloads (its end would
/// stay unwritten while the length returned says it was).
pub(in crate::transport) fn recv_split(
    fd: RawFd,
    run: Run<'_>,
    rest: &mut [MaybeUninit<u8>],
    r: &mut Reports<'_>,
) -> io::Result<(SocketAddr, usize)> {
    let Run { heads, head_len, segment } = run;
    let packets = heads.len() / head_len.max(1);
    let whole = head_len > 0 && heads.len() % head_len == 0;
    if !whole || packets == 0 || packets > MAX_RUN || segment <= head_len {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    if rest.len() > packets * (segment - head_len) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let iovec = |p: *mut u8, len| libc::iovec { iov_base: p.cast(), iov_len: len };
    let mut iov = [iovec(ptr::null_mut(), 0); 3 * MAX_RUN];
    let mut n = 0;
    let mut payloads = rest;
    for head in heads.chunks_exact_mut(head_len) {
        let take = (segment - head_len).min(payloads.len());
        let (payload, more) = payloads.split_at_mut(take);
        payloads = more;
        let split = payload.as_ptr().align_offset(64).min(payload.len());
        let (before, aligned) = payload.split_at_mut(split);
        iov[n] = iovec(head.as_mut_ptr(), head_len);
        iov[n + 1] = iovec(before.as_mut_ptr().cast(), before.len());
        iov[n + 2] = iovec(aligned.as_mut_ptr().cast(), aligned.len());
        n += 3;
    }
    // SAFETY: all-zero bytes are a valid msghdr.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n;
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
    let from = read_sockaddr(&name).and_then(|a| transport::source(a, false));
    Ok((from.ok_or_else(|| io::Error::other("no source address a reply could reach"))?, len))
}
