//! [`UringTransport`]: the same sockets as [`SocketTransport`], driven through io_uring:
//! receives stay posted in the ring, a batch of sends is one submission.

use std::fmt;
use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;

use homa_core::PayloadSlice;
use io_uring::{IoUring, Probe, opcode, squeue, types};

use super::socket::{BATCH, SocketTransport};
use super::sys::{self, CmsgBuf};
use super::{
    Batch, Datagram, RECV_SLOT_LEN, Transport, TransportKind, TransportStats, Unreachable,
};

/// Ring size; holds every posted receive and send with room to spare.
const RING_ENTRIES: u32 = 256;
/// Sends in flight at once.
const SEND_SLOTS: usize = 64;
/// `user_data` tags: receive slots are `0..BATCH`, send slots `SEND | i`.
const SEND: u64 = 1 << 32;
const CANCEL: u64 = 1 << 33;

/// One posted `recvmsg`: its buffer, source address, and the headers pointing at them.
struct RecvSlot {
    /// `RECV_SLOT_LEN` bytes from `off`, 64-byte aligned (see [`Batch`]).
    buf: Box<[u8]>,
    off: usize,
    name: libc::sockaddr_storage,
    iov: libc::iovec,
    msg: libc::msghdr,
    /// Completed with this result, not yet handed out.
    done: Option<i32>,
}

/// One `sendmsg` in flight (or free): a copy of the datagram's slot, its tail (kept alive
/// until the kernel is done with it) and its headers.
struct SendSlot {
    buf: Vec<u8>,
    tail: Option<PayloadSlice>,
    name: libc::sockaddr_storage,
    iovs: [libc::iovec; 2],
    msg: libc::msghdr,
    cmsg: CmsgBuf,
    to: SocketAddr,
}

/// Why io_uring cannot be used, with the socket to fall back to.
#[derive(Debug)]
pub struct Unavailable {
    /// The socket, unchanged.
    pub socket: SocketTransport,
    /// What failed (ring creation, a missing opcode, ...).
    pub reason: String,
}

/// UDP or raw IP through io_uring. Falls back (in [`open`](super::open)) to the plain
/// [`SocketTransport`] when the ring cannot be created or lacks `RECVMSG`/`SENDMSG`.
pub struct UringTransport {
    // Declared first so it is dropped (and its operations cancelled) before the socket.
    ring: Ring,
    socket: SocketTransport,
    /// The readiness fd: the ring signals it for every completion, and we signal it when
    /// completions were reaped (during a send) but their datagrams not yet handed out.
    ready_fd: OwnedFd,
}

/// The ring and the buffers its operations use.
struct Ring {
    ring: IoUring,
    /// Boxed so the headers' pointers stay valid while the kernel holds them.
    recv: Box<[RecvSlot]>,
    send: Box<[SendSlot]>,
    free_send: Vec<usize>,
    /// Receive slots completed, in completion order.
    ready: std::collections::VecDeque<usize>,
    /// Operations the kernel still owns.
    in_flight: usize,
}

// SAFETY: the raw pointers in the slots point into the slots' own heap allocations, which
// move with the ring, or into the message bytes a send slot's `tail` keeps alive (shared,
// immutable, Send + Sync); the ring is used only through `&mut self`.
unsafe impl Send for Ring {}

impl UringTransport {
    /// Sets up a ring for `socket`. On failure returns the socket and the reason, so the
    /// caller can fall back to it.
    pub fn new(socket: SocketTransport) -> Result<UringTransport, Box<Unavailable>> {
        let fail = |socket, reason| Box::new(Unavailable { socket, reason });
        let ring = match IoUring::new(RING_ENTRIES) {
            Ok(ring) => ring,
            Err(e) => return Err(fail(socket, format!("cannot create a ring: {e}"))),
        };
        let mut probe = Probe::new();
        if let Err(e) = ring.submitter().register_probe(&mut probe) {
            return Err(fail(socket, format!("cannot probe opcodes: {e}")));
        }
        for (code, name) in [
            (opcode::RecvMsg::CODE, "RECVMSG"),
            (opcode::SendMsg::CODE, "SENDMSG"),
            (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
        ] {
            if !probe.is_supported(code) {
                return Err(fail(socket, format!("the kernel lacks opcode {name}")));
            }
        }
        // SAFETY: all-zero bytes are valid for these plain C structs.
        let zero = || unsafe { (mem::zeroed(), mem::zeroed(), mem::zeroed()) };
        let recv = (0..BATCH)
            .map(|_| {
                let (name, iov, msg) = zero();
                let buf: Box<[u8]> = vec![0; RECV_SLOT_LEN + 64].into();
                let off = buf.as_ptr().align_offset(64);
                RecvSlot { buf, off, name, iov, msg, done: None }
            })
            .collect();
        let send = (0..SEND_SLOTS)
            .map(|_| {
                let (name, iov, msg) = zero();
                let to = socket.local;
                let iovs = [iov; 2];
                SendSlot { buf: Vec::new(), tail: None, name, iovs, msg, cmsg: CmsgBuf::ZERO, to }
            })
            .collect();
        let mut ring = Ring {
            ring,
            recv,
            send,
            free_send: (0..SEND_SLOTS).rev().collect(),
            ready: Default::default(),
            in_flight: 0,
        };
        // SAFETY: creates a new descriptor owned by nobody else.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(fail(socket, format!("eventfd: {}", io::Error::last_os_error())));
        }
        // SAFETY: efd was just created and is owned here only.
        let ready_fd = unsafe { OwnedFd::from_raw_fd(efd) };
        if let Err(e) = ring.ring.submitter().register_eventfd(efd) {
            return Err(fail(socket, format!("cannot register an eventfd: {e}")));
        }
        let fd = socket.fd();
        let posted = (0..BATCH).try_for_each(|i| ring.post_recv(fd, i));
        if let Err(e) = posted.and_then(|()| ring.ring.submit().map(drop)) {
            drop(ring); // cancels what was posted
            return Err(fail(socket, format!("cannot post receives: {e}")));
        }
        Ok(UringTransport { ring, socket, ready_fd })
    }
}

impl Ring {
    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        // SAFETY: every entry's buffers live in the boxed slots until its completion is
        // reaped (or until `quiesce` has seen every operation end).
        while unsafe { self.ring.submission().push(entry) }.is_err() {
            self.ring.submit()?;
        }
        self.in_flight += 1;
        Ok(())
    }

    fn post_recv(&mut self, fd: i32, i: usize) -> io::Result<()> {
        let s = &mut self.recv[i];
        s.done = None;
        let buf = &mut s.buf[s.off..s.off + RECV_SLOT_LEN];
        s.iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        s.msg.msg_name = ptr::from_mut(&mut s.name).cast();
        s.msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as u32;
        s.msg.msg_iov = &raw mut s.iov;
        s.msg.msg_iovlen = 1;
        s.msg.msg_control = ptr::null_mut();
        s.msg.msg_controllen = 0;
        let entry = opcode::RecvMsg::new(types::Fd(fd), &raw mut s.msg).build().user_data(i as u64);
        self.push(&entry)
    }

    /// Takes every completion: finished receives wait in `ready`; finished sends free
    /// their slots and are returned as (slot, result).
    fn reap(&mut self) -> Vec<(usize, i32)> {
        let done: Vec<(u64, i32)> =
            self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        let mut sends = Vec::new();
        for (tag, res) in done {
            self.in_flight -= 1;
            if tag & CANCEL != 0 {
                continue;
            }
            if tag & SEND != 0 {
                let i = (tag & !SEND) as usize;
                self.send[i].tail = None; // the message's bytes may go
                self.free_send.push(i);
                sends.push((i, res));
            } else {
                self.recv[tag as usize].done = Some(res);
                self.ready.push_back(tag as usize);
            }
        }
        sends
    }

    /// Cancels every posted operation and waits until the kernel has released them all.
    fn quiesce(&mut self) {
        let posted: Vec<u64> = (0..self.recv.len())
            .filter(|&i| self.recv[i].done.is_none())
            .map(|i| i as u64)
            .collect();
        for tag in posted {
            let entry = opcode::AsyncCancel::new(tag).build().user_data(CANCEL);
            if self.push(&entry).is_err() {
                break;
            }
        }
        for _ in 0..1000 {
            if self.in_flight == 0 {
                return;
            }
            if self.ring.submit_and_wait(1).is_err() {
                break;
            }
            self.reap();
        }
        if self.in_flight > 0 {
            // The kernel may still write into the slots: never free them.
            tracing::error!(
                in_flight = self.in_flight,
                "io_uring operations did not finish; leaking their buffers"
            );
            mem::forget(mem::take(&mut self.recv));
            mem::forget(mem::take(&mut self.send));
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.quiesce();
    }
}

impl fmt::Debug for UringTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringTransport")
            .field("socket", &self.socket)
            .field("in_flight", &self.ring.in_flight)
            .finish()
    }
}

impl Transport for UringTransport {
    fn kind(&self) -> TransportKind {
        match self.socket.kind {
            TransportKind::Ip => TransportKind::UringIp,
            _ => TransportKind::UringUdp,
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.socket.local_addr()
    }

    fn max_packet_len(&self) -> usize {
        self.socket.max_packet_len()
    }

    fn outer_header_bytes(&self) -> u32 {
        self.socket.outer_header_bytes()
    }

    fn peer(&self, dest: SocketAddr) -> Option<SocketAddr> {
        self.socket.peer(dest)
    }

    fn readiness_fd(&self) -> BorrowedFd<'_> {
        self.ready_fd.as_fd()
    }

    fn send(&mut self, batch: &mut Batch) -> io::Result<()> {
        let (fd, v6) = (self.socket.fd(), self.socket.v6);
        for k in 0..batch.len() {
            let (d, bytes) = batch.get(k);
            let i = loop {
                if let Some(i) = self.ring.free_send.pop() {
                    break i;
                }
                self.ring.ring.submit_and_wait(1)?;
                self.reap();
            };
            let s = &mut self.ring.send[i];
            s.buf.clear();
            s.buf.extend_from_slice(bytes);
            s.to = d.addr;
            s.tail = batch.tail(k).cloned();
            s.iovs[0] = sys::iovec(&s.buf);
            s.iovs[1] = sys::iovec(s.tail.as_ref().map_or(&[], PayloadSlice::as_slice));
            s.msg.msg_namelen = sys::write_sockaddr(d.addr, &mut s.name);
            s.msg.msg_name = ptr::from_mut(&mut s.name).cast();
            s.msg.msg_iov = s.iovs.as_mut_ptr();
            s.msg.msg_iovlen = 1 + usize::from(s.tail.is_some());
            s.msg.msg_control = s.cmsg.0.as_mut_ptr().cast();
            // SAFETY: msg_control points to the slot's own 8-aligned buffer.
            unsafe { sys::set_cmsgs(&mut s.msg, v6, d.priority, None) };
            let entry = opcode::SendMsg::new(types::Fd(fd), &raw const s.msg)
                .build()
                .user_data(SEND | i as u64);
            if let Err(e) = self.ring.push(&entry) {
                self.ring.send[i].tail = None;
                self.ring.free_send.push(i);
                return Err(e);
            }
        }
        if !batch.is_empty() {
            self.ring.ring.submit()?;
            self.socket.stats.tx_calls += 1;
            // Sends on a datagram socket usually complete during the submission: reap them
            // now so they do not wake the driver again.
            self.clear_ready();
            self.reap();
            self.signal_if_ready();
        }
        batch.clear();
        Ok(())
    }

    fn recv(&mut self, batch: &mut Batch) -> io::Result<()> {
        self.clear_ready();
        self.reap();
        let fd = self.socket.fd();
        let raw = self.socket.kind == TransportKind::Ip;
        let strip = raw && !self.socket.v6;
        let mut reposted = false;
        let delivered = batch.len();
        while !batch.is_full() {
            let Some(i) = self.ring.ready.pop_front() else { break };
            let res = self.ring.recv[i].done.unwrap_or(-libc::EAGAIN);
            if res < 0 {
                // A pending ICMP error is read from the error queue (see `may_be_pending`).
                let pending =
                    sys::may_be_pending(-res) && sys::drain_errors(fd, &mut self.socket.reports());
                if !pending && res != -libc::EAGAIN {
                    tracing::debug!("recvmsg failed: {}", io::Error::from_raw_os_error(-res));
                }
            } else {
                self.deliver(i, res as usize, strip, raw, batch);
            }
            self.ring.post_recv(fd, i)?;
            reposted = true;
        }
        if reposted {
            self.ring.ring.submit()?;
        }
        self.signal_if_ready();
        if batch.len() > delivered {
            self.socket.stats.rx_calls += 1;
        }
        Ok(())
    }

    fn poll_unreachable(&mut self) -> Option<Unreachable> {
        self.socket.poll_unreachable()
    }

    fn stats(&self) -> TransportStats {
        self.socket.stats
    }
}

impl UringTransport {
    /// Resets the readiness fd. Done before reaping, so a completion posted afterwards
    /// signals it again.
    fn clear_ready(&self) {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe { libc::read(self.ready_fd.as_raw_fd(), (&raw mut n).cast(), 8) };
    }

    /// Keeps the readiness fd readable while reaped datagrams wait to be handed out.
    fn signal_if_ready(&self) {
        if !self.ring.ready.is_empty() {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd.
            unsafe { libc::write(self.ready_fd.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }

    /// Takes completions; failed sends are counted and their peers reported.
    fn reap(&mut self) {
        for (i, res) in self.ring.reap() {
            if res >= 0 {
                self.socket.stats.tx_datagrams += 1;
            } else if sys::may_be_pending(-res)
                && (sys::drain_errors(self.socket.fd(), &mut self.socket.reports())
                    || -res == libc::ECONNREFUSED)
            {
                // A pending ICMP error about an earlier packet; this one was not sent.
                self.socket.stats.tx_dropped += 1;
            } else {
                let to = self.ring.send[i].to;
                sys::refused(to, -res, &mut self.socket.reports());
            }
        }
    }

    /// Copies the datagram in receive slot `i` (`len` bytes) into `batch`.
    fn deliver(&mut self, i: usize, len: usize, strip: bool, raw: bool, batch: &mut Batch) {
        let s = &self.ring.recv[i];
        let from = sys::read_sockaddr(&s.name)
            .map(|a| SocketAddr::new(a.ip().to_canonical(), if raw { 0 } else { a.port() }));
        // A datagram filling the whole slot may have been cut short (no IP packet is this big).
        let (Some(from), true) = (from, len < RECV_SLOT_LEN) else {
            self.socket.stats.rx_dropped += 1;
            return;
        };
        let mut bytes = &s.buf[s.off..s.off + len];
        if strip {
            let ihl = usize::from(bytes.first().copied().unwrap_or(0) & 0x0f) * 4;
            if ihl < 20 || ihl > bytes.len() {
                self.socket.stats.rx_dropped += 1;
                return;
            }
            bytes = &bytes[ihl..];
        }
        if bytes.len() > batch.slot_len() {
            self.socket.stats.rx_dropped += 1;
            return;
        }
        batch.next_slot()[..bytes.len()].copy_from_slice(bytes);
        batch.push(Datagram { addr: from, len: bytes.len(), priority: 0, segment: 0 });
        self.socket.stats.rx_datagrams += 1;
    }
}
