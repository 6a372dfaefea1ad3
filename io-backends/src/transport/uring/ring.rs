//! The ring: its sizes and `user_data` tags, the slots its operations use, setting it up
//! for a socket ([`UringTransport::new`]: probing the kernel, posting the receive), and
//! posting, reaping and cancelling operations.

use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr;
use std::thread::ThreadId;

use homa_core::PayloadSlice;
use io_uring::{IoUring, Probe, opcode, squeue, types};

use super::{Unavailable, UringTransport};
use crate::transport::RECV_SLOT_LEN;
use crate::transport::socket::SocketTransport;
use crate::transport::sys::CmsgBuf;

/// Ring size; holds every posted receive and send with room to spare.
const RING_ENTRIES: u32 = 256;
/// Sends in flight at once.
const SEND_SLOTS: usize = 64;
/// Receive slots. One is posted at a time: each posted receive arms a poll of its own on
/// the socket, and a datagram wakes them all (each retries, all but one find nothing and
/// arm again), so with 32 posted a 100-byte round trip took over three times as long as
/// with one. The others hold receives being cancelled when another thread takes over
/// receiving (`UringTransport::receive_here`), until the kernel returns them.
pub(super) const RECV_SLOTS: usize = 4;
/// `user_data` tags: receive slots are `0..RECV_SLOTS`, send slots `SEND | i`.
pub(super) const SEND: u64 = 1 << 32;
const CANCEL: u64 = 1 << 33;
/// A completion a [`Kicker`] posted into the ring (not an operation of ours).
///
/// [`Kicker`]: super::waiter::Kicker
pub(super) const WAKE: u64 = 1 << 34;

/// One posted `recvmsg`: its buffer, source address, and the headers pointing at them.
pub(super) struct RecvSlot {
    /// `RECV_SLOT_LEN` bytes from `off`, 64-byte aligned (see [`Batch`]); empty until used.
    ///
    /// [`Batch`]: crate::transport::Batch
    pub(super) buf: Box<[u8]>,
    pub(super) off: usize,
    pub(super) name: libc::sockaddr_storage,
    iov: libc::iovec,
    msg: libc::msghdr,
    /// Completed with this result, not yet handed out.
    pub(super) done: Option<i32>,
    /// The kernel holds it: posted, not yet completed.
    pub(super) posted: bool,
}

/// One `sendmsg` in flight (or free): a copy of the datagram's slot, its tail (kept alive
/// until the kernel is done with it) and its headers.
pub(super) struct SendSlot {
    pub(super) buf: Vec<u8>,
    pub(super) tail: Option<PayloadSlice>,
    pub(super) name: libc::sockaddr_storage,
    pub(super) iovs: [libc::iovec; 2],
    pub(super) msg: libc::msghdr,
    pub(super) cmsg: CmsgBuf,
    pub(super) to: SocketAddr,
}

/// The ring and the buffers its operations use.
pub(super) struct Ring {
    pub(super) ring: IoUring,
    /// Boxed so the headers' pointers stay valid while the kernel holds them.
    pub(super) recv: Box<[RecvSlot]>,
    pub(super) send: Box<[SendSlot]>,
    pub(super) free_send: Vec<usize>,
    /// Receive slots completed, in completion order.
    pub(super) ready: std::collections::VecDeque<usize>,
    /// The receive slot reposted after each datagram; the others only finish.
    pub(super) current: usize,
    /// The thread that posted it: the one its completion runs on.
    pub(super) poster: Option<ThreadId>,
    /// Operations the kernel still owns.
    pub(super) in_flight: usize,
    /// `quiesce` ran: nothing is posted, and nothing more is reaped (a last kick stays).
    pub(super) quiesced: bool,
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
        // A completion that arrives while the thread it runs on is in user space waits for
        // that thread's next system call (COOP_TASKRUN) instead of interrupting it from
        // another CPU (an interrupt costs a VM microseconds); a polling thread makes one at
        // once. Whoever waits reposts the receive first (`receive_here`), so no thread gone
        // back to other work holds a datagram up.
        let ring = IoUring::builder().setup_coop_taskrun().build(RING_ENTRIES);
        let ring = match ring.or_else(|_| IoUring::new(RING_ENTRIES)) {
            Ok(ring) => ring,
            Err(e) => return Err(fail(socket, format!("cannot create a ring: {e}"))),
        };
        let mut probe = Probe::new();
        if let Err(e) = ring.submitter().register_probe(&mut probe) {
            return Err(fail(socket, format!("cannot probe opcodes: {e}")));
        }
        let msg_ring = probe.is_supported(opcode::MsgRingData::CODE);
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
        let recv = (0..RECV_SLOTS)
            .map(|_| {
                let (name, iov, msg) = zero();
                // The buffer comes with the slot's first use (most sockets use one).
                RecvSlot { buf: Box::default(), off: 0, name, iov, msg, done: None, posted: false }
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
            current: 0,
            poster: None,
            in_flight: 0,
            quiesced: false,
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
        let posted = ring.post_recv(fd, 0);
        if let Err(e) = posted.and_then(|()| ring.ring.submit().map(drop)) {
            drop(ring); // cancels what was posted
            return Err(fail(socket, format!("cannot post receives: {e}")));
        }
        Ok(UringTransport { ring, socket, ready_fd, msg_ring, kicker: None, eventfd_off: false })
    }
}

impl Ring {
    pub(super) fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        // SAFETY: every entry's buffers live in the boxed slots until its completion is
        // reaped (or until `quiesce` has seen every operation end).
        while unsafe { self.ring.submission().push(entry) }.is_err() {
            self.ring.submit()?;
        }
        self.in_flight += 1;
        Ok(())
    }

    /// Posts receive slot `i` from this thread, as the current one.
    pub(super) fn post_recv(&mut self, fd: i32, i: usize) -> io::Result<()> {
        self.current = i;
        self.poster = Some(std::thread::current().id());
        let s = &mut self.recv[i];
        s.done = None;
        if s.buf.is_empty() {
            s.buf = vec![0; RECV_SLOT_LEN + 64].into();
            s.off = s.buf.as_ptr().align_offset(64);
        }
        let buf = &mut s.buf[s.off..s.off + RECV_SLOT_LEN];
        s.iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        s.msg.msg_name = ptr::from_mut(&mut s.name).cast();
        s.msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as u32;
        s.msg.msg_iov = &raw mut s.iov;
        s.msg.msg_iovlen = 1;
        s.msg.msg_control = ptr::null_mut();
        s.msg.msg_controllen = 0;
        let entry = opcode::RecvMsg::new(types::Fd(fd), &raw mut s.msg).build().user_data(i as u64);
        let pushed = self.push(&entry);
        self.recv[i].posted = pushed.is_ok();
        pushed
    }

    /// A slot neither posted nor waiting to be handed out.
    pub(super) fn free_recv(&self) -> Option<usize> {
        (0..self.recv.len()).find(|&i| !self.recv[i].posted && self.recv[i].done.is_none())
    }

    /// Asks the kernel to end posted receive `i` (it completes, cancelled or with a
    /// datagram it took meanwhile).
    pub(super) fn cancel_recv(&mut self, i: usize) -> io::Result<()> {
        let entry = opcode::AsyncCancel::new(i as u64).build().user_data(CANCEL);
        self.push(&entry)
    }

    /// Takes every completion: finished receives wait in `ready`; finished sends free
    /// their slots and are handed to `sent` as (destination, result). Returns whether a
    /// wake-up was among them. Allocates nothing: this runs on every send and receive.
    pub(super) fn reap(&mut self, mut sent: impl FnMut(SocketAddr, i32)) -> bool {
        let Ring { ring, recv, send, free_send, ready, in_flight, .. } = self;
        let mut woken = false;
        for c in ring.completion() {
            let (tag, res) = (c.user_data(), c.result());
            if tag == WAKE {
                woken = true;
                continue;
            }
            *in_flight -= 1;
            if tag & CANCEL != 0 {
                continue;
            }
            if tag & SEND != 0 {
                let i = (tag & !SEND) as usize;
                send[i].tail = None; // the message's bytes may go
                free_send.push(i);
                sent(send[i].to, res);
            } else {
                let s = &mut recv[tag as usize];
                s.posted = false;
                s.done = Some(res);
                ready.push_back(tag as usize);
            }
        }
        woken
    }

    /// Cancels every posted operation and waits until the kernel has released them all.
    pub(super) fn quiesce(&mut self) {
        if mem::replace(&mut self.quiesced, true) {
            return;
        }
        let posted: Vec<usize> = (0..self.recv.len()).filter(|&i| self.recv[i].posted).collect();
        for i in posted {
            if self.cancel_recv(i).is_err() {
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
            self.reap(|_, _| {});
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
