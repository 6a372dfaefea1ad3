//! [`UringTransport`]: the same sockets as [`SocketTransport`], driven through io_uring:
//! a receive stays posted in the ring, a batch of sends is one submission.
//!
//! A waiting thread sleeps in the ring itself (`io_uring_enter` for a completion, see
//! [`UringWaiter`]) where the kernel offers `IORING_OP_MSG_RING` to wake it. A socket
//! receive completes through task work on the thread that submitted it; when that is the
//! waiting thread (it reposts the receive after each datagram it takes), one wake-up per
//! packet, as with a plain blocking receive.
//!
//! This file holds [`UringTransport`] and its [`Transport`] implementation. The other
//! parts: [`ring`] (the ring: setup, the slots its operations use, posting and reaping)
//! and [`waiter`] (sleeping in the ring, and waking a thread asleep there).

mod ring;
mod waiter;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use homa_core::PayloadSlice;
use io_uring::{opcode, types};

use super::socket::SocketTransport;
use super::sys;
use super::{
    Batch, Datagram, RECV_SLOT_LEN, Transport, TransportKind, TransportStats, Unreachable,
    WaitHandle,
};
#[cfg(test)]
use ring::RECV_SLOTS;
use ring::{Ring, SEND};
use waiter::{Kicker, UringWaiter};

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
    /// Whether the kernel has `IORING_OP_MSG_RING` (a [`UringWaiter`] can be woken).
    msg_ring: bool,
    /// Wakes the [`UringWaiter`], once there is one.
    kicker: Option<Arc<Kicker>>,
    /// The eventfd is off (`IORING_CQ_EVENTFD_DISABLED`): nobody watches it while the
    /// waiter is in use.
    eventfd_off: bool,
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

    fn readiness_fd(&self) -> BorrowedFd<'_> {
        self.ready_fd.as_fd()
    }

    fn receive_buffer(&self) -> Option<usize> {
        self.socket.receive_buffer()
    }

    fn send(&mut self, batch: &mut Batch) -> io::Result<()> {
        let mut woken = false;
        let result = self.send_batch(batch, &mut woken);
        self.hand_over(woken);
        batch.clear();
        result
    }

    fn recv(&mut self, batch: &mut Batch) -> io::Result<()> {
        let delivered = batch.len();
        let result = self.take_datagrams(batch);
        self.hand_over(false);
        if batch.len() > delivered {
            self.socket.stats.rx_calls += 1;
        }
        result
    }

    fn poll_unreachable(&mut self) -> Option<Unreachable> {
        self.socket.poll_unreachable()
    }

    fn receives_on_poster(&self) -> bool {
        true
    }

    /// Posts a receive from this thread in a free slot and cancels the one another
    /// thread posted. (With every slot still held by the kernel, it stays as it is.)
    fn receive_here(&mut self) {
        let me = std::thread::current().id();
        if self.ring.poster == Some(me) || self.ring.quiesced {
            return;
        }
        let Some(i) = self.ring.free_recv() else { return };
        let old = self.ring.current;
        if self.ring.recv[old].posted
            && let Err(e) = self.ring.cancel_recv(old)
        {
            tracing::error!("cannot move the io_uring receive to this thread: {e}");
            return;
        }
        if let Err(e) = self.ring.post_recv(self.socket.fd(), i) {
            // Posted by the next receive call, which the readiness fd asks for.
            tracing::error!("cannot post an io_uring receive: {e}");
            self.ring.recv[i].done = Some(-libc::EAGAIN);
            self.ring.ready.push_front(i);
        }
        if let Err(e) = self.ring.ring.submit() {
            tracing::error!("io_uring submission failed: {e}");
        }
        self.hand_over(false);
    }

    fn stats(&self) -> TransportStats {
        Transport::stats(&self.socket)
    }

    /// With the eventfd off, what waits is in the ring, or still in the socket: a
    /// receive completes through task work on the waiting thread, so a datagram sits in
    /// the socket queue until that thread runs (on a busy host, a while).
    fn input_waiting(&mut self) -> bool {
        if self.eventfd_off {
            !self.ring.ready.is_empty()
                || !self.ring.ring.completion().is_empty()
                || sys::readable(self.socket.fd())
        } else {
            sys::readable(self.ready_fd.as_raw_fd())
        }
    }

    fn waiter_in_use(&mut self, in_use: bool) {
        if self.kicker.is_none() {
            return;
        }
        if in_use {
            if !self.eventfd_off {
                self.eventfd_off = true;
                self.ring.ring.completion().disable_eventfd();
                // Cleared now, it is readable once on again only for what is pending then.
                sys::clear(self.ready_fd.as_raw_fd());
            }
            // Left by a failed submission (the waiter submits nothing): the receive may be
            // among them.
            if !self.ring.ring.submission().is_empty()
                && let Err(e) = self.ring.ring.submit()
            {
                tracing::error!("io_uring submission failed: {e}");
            }
            return;
        }
        if !self.eventfd_off {
            return;
        }
        self.eventfd_off = false;
        let pending = {
            let cq = self.ring.ring.completion();
            cq.enable_eventfd();
            !cq.is_empty()
        };
        if pending || !self.ring.ready.is_empty() {
            sys::signal(self.ready_fd.as_raw_fd());
        }
    }

    /// Where the kernel has `IORING_OP_MSG_RING`: the waiter sleeps in `io_uring_enter`
    /// until the ring holds a completion, and is woken by one posted from a ring of the
    /// the `Kicker`'s.
    fn waiter(&mut self) -> Option<WaitHandle> {
        if !self.msg_ring || self.kicker.is_some() {
            return None;
        }
        let made = (|| -> io::Result<WaitHandle> {
            let kicker = Arc::new(Kicker::new(self.ring.ring.as_raw_fd())?);
            // Check that a wake-up arrives; a waiter that cannot be woken must not be used.
            kicker.kick()?;
            self.ring.ring.submit_and_wait(1)?;
            let woken = self.reap();
            self.hand_over(false); // datagrams reaped meanwhile
            if !woken {
                return Err(io::Error::other("the wake-up completion did not arrive"));
            }
            let closed = Arc::new(AtomicBool::new(false));
            let waiter =
                UringWaiter { ring: kicker.target.try_clone()?, closed: Arc::clone(&closed) };
            self.kicker = Some(Arc::clone(&kicker));
            let waker = Arc::clone(&kicker);
            let wake = Box::new(move || {
                if let Err(e) = waker.kick() {
                    tracing::error!("cannot wake the io_uring waiter: {e}");
                }
            });
            // The flag stops waits to come; the kick ends the one under way. (Dropping the
            // transport kicks again once its ring has no operations left, for a wait that
            // began in between.)
            let shutdown = Box::new(move || {
                closed.store(true, Ordering::Release);
                let _ = kicker.kick();
            });
            Ok(WaitHandle { waiter: Box::new(waiter), wake, shutdown })
        })();
        match made {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::debug!("io_uring waiter unavailable, waiting in poll: {e}");
                None
            }
        }
    }
}

impl Drop for UringTransport {
    fn drop(&mut self) {
        // A waiter that began to wait after the shutdown's kick was reaped must still
        // return: once the ring has no operations left, a last kick stays in it unreaped.
        self.ring.quiesce();
        self.kick();
    }
}

impl UringTransport {
    /// Queues `batch` as one submission. Sets `woken` if a wake-up meant for the waiter was
    /// reaped meanwhile.
    fn send_batch(&mut self, batch: &Batch, woken: &mut bool) -> io::Result<()> {
        let (fd, v6) = (self.socket.fd(), self.socket.v6);
        for k in 0..batch.len() {
            let (d, bytes) = batch.get(k);
            let i = loop {
                if let Some(i) = self.ring.free_send.pop() {
                    break i;
                }
                self.ring.ring.submit_and_wait(1)?;
                *woken |= self.reap();
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
            // Refused, not held, when the socket buffer is full (as the plain socket's
            // sends are): a datagram the kernel sent later could leave after the receiver
            // asked for it again, and arrive twice.
            let entry = opcode::SendMsg::new(types::Fd(fd), &raw const s.msg)
                .flags(libc::MSG_DONTWAIT as u32)
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
            if !self.eventfd_off {
                sys::clear(self.ready_fd.as_raw_fd());
            }
            *woken |= self.reap();
        }
        Ok(())
    }

    /// Hands out completed receives, reposting the one receive after each. Submitted at
    /// once, it completes during the submission if a datagram is queued, and that is taken
    /// too: one posted receive keeps up with a burst.
    fn take_datagrams(&mut self, batch: &mut Batch) -> io::Result<()> {
        let fd = self.socket.fd();
        let raw = self.socket.kind == TransportKind::Ip;
        let strip = raw && !self.socket.v6;
        loop {
            if !self.eventfd_off {
                // Cleared before reaping: a completion posted afterwards signals it again.
                sys::clear(self.ready_fd.as_raw_fd());
            }
            self.reap();
            let before = batch.len();
            let mut reposted = false;
            while !batch.is_full() {
                let Some(i) = self.ring.ready.pop_front() else { break };
                let res = self.ring.recv[i].done.unwrap_or(-libc::EAGAIN);
                if res < 0 {
                    // A pending ICMP error is read from the error queue (`may_be_pending`).
                    let pending = sys::may_be_pending(-res)
                        && sys::drain_errors(fd, &mut self.socket.reports());
                    if !pending && res != -libc::EAGAIN && res != -libc::ECANCELED {
                        tracing::debug!("recvmsg failed: {}", io::Error::from_raw_os_error(-res));
                    }
                } else {
                    self.deliver(i, res as usize, strip, raw, batch);
                }
                if i != self.ring.current {
                    // Replaced by another thread's receive (`receive_here`): free now.
                    self.ring.recv[i].done = None;
                    continue;
                }
                if let Err(e) = self.ring.post_recv(fd, i) {
                    // Back in line, to be posted next time: the socket's only receive.
                    self.ring.recv[i].done = Some(-libc::EAGAIN);
                    self.ring.ready.push_front(i);
                    return Err(e);
                }
                reposted = true;
            }
            if !reposted {
                return Ok(());
            }
            self.ring.ring.submit()?;
            // Done at a full batch, or after a pass that found only errors.
            if batch.is_full() || batch.len() == before {
                return Ok(());
            }
        }
    }

    /// Before returning from a send or receive: while reaped datagrams wait to be handed
    /// out, the readiness fd stays readable (unless it is off) and a waiter asleep in the
    /// ring is woken; so it is if a wake-up meant for it was reaped here (`woken`).
    fn hand_over(&self, woken: bool) {
        let waiting = !self.ring.ready.is_empty();
        if waiting && !self.eventfd_off {
            sys::signal(self.ready_fd.as_raw_fd());
        }
        if waiting || woken {
            self.kick();
        }
    }

    /// Wakes the waiter, if there is one.
    fn kick(&self) {
        if let Some(Err(e)) = self.kicker.as_ref().map(|k| k.kick()) {
            tracing::error!("cannot wake the io_uring waiter: {e}");
        }
    }

    /// Takes completions; failed sends are counted and their peers reported. Returns
    /// whether a wake-up was among them.
    fn reap(&mut self) -> bool {
        let socket = &mut self.socket;
        self.ring.reap(|to, res| {
            if res >= 0 {
                socket.stats.tx_datagrams += 1;
            } else if sys::may_be_pending(-res)
                && (sys::drain_errors(socket.fd(), &mut socket.reports())
                    || -res == libc::ECONNREFUSED)
            {
                // A pending ICMP error about an earlier packet; this one was not sent.
                socket.stats.tx_dropped += 1;
            } else {
                sys::refused(to, -res, &mut socket.reports());
            }
        })
    }

    /// Copies the datagram in receive slot `i` (`len` bytes) into `batch`.
    fn deliver(&mut self, i: usize, len: usize, strip: bool, raw: bool, batch: &mut Batch) {
        let s = &self.ring.recv[i];
        let from = sys::read_sockaddr(&s.name).and_then(|a| super::source(a, raw));
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

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// A ring over a UDP socket on loopback, or `None` (printed) where io_uring is missing.
    fn transport() -> Option<UringTransport> {
        let socket =
            SocketTransport::udp("127.0.0.1:0".parse().unwrap(), /* reuse_port */ false).unwrap();
        UringTransport::new(socket)
            .inspect_err(|e| eprintln!("skipping: io_uring unavailable: {}", e.reason))
            .ok()
    }

    #[test]
    fn the_receive_moves_to_the_thread_about_to_wait() {
        let Some(mut t) = transport() else { return };
        let opener = std::thread::current().id();
        assert_eq!(t.ring.poster, Some(opener));
        t.receive_here();
        assert_eq!(t.ring.poster, Some(opener), "already here: nothing moves");
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = t.local_addr();
        let (mut t, waiter) = std::thread::spawn(move || {
            t.receive_here();
            let waiter = std::thread::current().id();
            assert_eq!(t.ring.poster, Some(waiter));
            peer.send_to(b"here", to).unwrap();
            let mut batch = Batch::new(4, RECV_SLOT_LEN);
            while batch.is_empty() {
                // The new receive completes on this thread, in this wait.
                t.ring.ring.submit_and_wait(1).unwrap();
                t.recv(&mut batch).unwrap();
            }
            assert_eq!(batch.get(0).1, b"here");
            (t, waiter)
        })
        .join()
        .unwrap();
        assert_eq!(t.ring.poster, Some(waiter), "reposted by the thread that received");
        // The cancelled receive completed on this thread, the one that posted it (as it
        // returned from the join).
        t.reap();
        let posted: Vec<usize> = (0..RECV_SLOTS).filter(|&i| t.ring.recv[i].posted).collect();
        assert_eq!(posted, [t.ring.current], "only the current receive stays posted");
    }

    #[test]
    fn one_posted_receive_takes_a_whole_burst_in_one_call() {
        let Some(mut t) = transport() else { return };
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..100u8 {
            peer.send_to(&[i; 40], t.local_addr()).unwrap();
        }
        let mut batch = Batch::new(32, RECV_SLOT_LEN);
        t.recv(&mut batch).unwrap();
        assert_eq!(batch.len(), 32, "a full batch from one call");
        let mut got: Vec<u8> = (0..batch.len()).map(|i| batch.get(i).1[0]).collect();
        while got.len() < 100 {
            batch.clear();
            t.recv(&mut batch).unwrap();
            assert!(!batch.is_empty(), "datagrams {} to 99 still queued", got.len());
            got.extend((0..batch.len()).map(|i| batch.get(i).1[0]));
        }
        assert_eq!(got, (0..100).collect::<Vec<u8>>());
        assert_eq!(t.stats().rx_dropped, 0);
    }

    #[test]
    fn the_waiter_sleeps_in_the_ring_until_a_datagram_a_wake_up_or_the_shutdown() {
        let Some(mut t) = transport() else { return };
        let Some(handle) = t.waiter() else {
            eprintln!("skipping: the kernel lacks IORING_OP_MSG_RING");
            return;
        };
        let WaitHandle { mut waiter, wake, shutdown } = handle;
        assert!(waiter.only_waits());
        // As in the driver, each wait begins only after what ended the last was taken.
        let (go, turn) = mpsc::channel();
        let (woke, woken) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut unused = Batch::new(1, 64);
            while turn.recv().is_ok() {
                waiter.wait(&mut unused).unwrap();
                woke.send(()).unwrap();
            }
            waiter
        });
        let bound = Duration::from_secs(20);
        let mut batch = Batch::new(8, RECV_SLOT_LEN);

        t.waiter_in_use(true);
        go.send(()).unwrap();
        UdpSocket::bind("127.0.0.1:0").unwrap().send_to(b"hello", t.local_addr()).unwrap();
        woken.recv_timeout(bound).expect("a datagram ends the wait");
        t.recv(&mut batch).unwrap();
        assert_eq!(batch.len(), 1, "what woke it is received through the transport");
        assert_eq!(batch.get(0).1, b"hello");

        t.waiter_in_use(true);
        go.send(()).unwrap();
        // Nothing in the ring: it sleeps (a wait that returned would show here).
        assert!(woken.recv_timeout(Duration::from_millis(100)).is_err(), "woke for nothing");
        wake();
        woken.recv_timeout(bound).expect("a wake-up ends the wait");
        batch.clear();
        t.recv(&mut batch).unwrap();
        assert!(batch.is_empty(), "a wake-up is no datagram");

        t.waiter_in_use(true);
        go.send(()).unwrap();
        shutdown();
        woken.recv_timeout(bound).expect("the shutdown ends the wait");
        drop(go);
        let mut waiter = thread.join().unwrap();
        drop(t);
        // Every wait after the shutdown returns at once, the transport gone or not.
        waiter.wait(&mut batch).unwrap();
    }
}
