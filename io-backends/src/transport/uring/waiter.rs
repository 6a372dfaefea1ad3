//! Sleeping in the ring: [`UringWaiter`] waits in `io_uring_enter` for a completion, and a
//! [`Kicker`] wakes it by posting one from a ring of its own (`IORING_OP_MSG_RING`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use io_uring::{IoUring, opcode, types};

use super::ring::WAKE;
use crate::transport::{Batch, TransportStats, Unreachable, Waiter};

/// Posts a completion tagged [`WAKE`] into a ring from a ring of its own
/// (`IORING_OP_MSG_RING`), from any thread.
pub(super) struct Kicker {
    ring: Mutex<IoUring>,
    /// The target ring (a duplicate of its descriptor: valid as long as this lives).
    pub(super) target: OwnedFd,
}

impl Kicker {
    pub(super) fn new(target: std::os::fd::RawFd) -> io::Result<Kicker> {
        // SAFETY: `target` is the open descriptor of a live ring; only borrowed to duplicate.
        let target = unsafe { BorrowedFd::borrow_raw(target) }.try_clone_to_owned()?;
        Ok(Kicker { ring: Mutex::new(IoUring::new(2)?), target })
    }

    pub(super) fn kick(&self) -> io::Result<()> {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let entry = opcode::MsgRingData::new(types::Fd(self.target.as_raw_fd()), 0, WAKE, None)
            .build()
            .user_data(WAKE);
        // SAFETY: the entry refers to no memory.
        if unsafe { ring.submission().push(&entry) }.is_err() {
            return Err(io::Error::other("the kick ring is full"));
        }
        ring.submit_and_wait(1)?; // MSG_RING completes during the submission
        match ring
            .completion()
            .fold(None, |failed, c| if c.result() < 0 { Some(c.result()) } else { failed })
        {
            Some(res) => Err(io::Error::from_raw_os_error(-res)),
            None => Ok(()),
        }
    }
}

/// Waits in the ring for a completion ([`Waiter::wait`] appends nothing: the driver then
/// receives through the transport). It passes `to_submit` 0: every entry was submitted
/// by the lock holder (`io_uring_enter` would skip the wait after submitting fewer than
/// asked).
#[derive(Debug)]
pub(super) struct UringWaiter {
    pub(super) ring: OwnedFd,
    pub(super) closed: Arc<AtomicBool>,
}

impl Waiter for UringWaiter {
    fn wait(&mut self, _batch: &mut Batch) -> io::Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: a plain system call on our duplicate of the ring's descriptor, with no
        // argument pointer.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                self.ring.as_raw_fd(),
                0u32,
                1u32,
                IORING_ENTER_GETEVENTS,
                ptr::null::<libc::c_void>(),
                0usize,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
        Ok(())
    }

    fn only_waits(&self) -> bool {
        true
    }

    fn poll_unreachable(&mut self) -> Option<Unreachable> {
        None
    }

    fn stats(&self) -> TransportStats {
        TransportStats::default()
    }
}

/// `io_uring_enter` flag: wait for `min_complete` completions.
const IORING_ENTER_GETEVENTS: u32 = 1;
