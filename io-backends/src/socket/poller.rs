//! [`Poller`]: an event loop's handle on a socket it drives on its own thread.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use crate::driver::Shared;

/// An event loop's handle on a [`Socket`] it drives ([`Socket::poller`]).
///
/// [`Socket`]: super::Socket
/// [`Socket::poller`]: super::Socket::poller
#[derive(Debug)]
pub struct Poller {
    pub(super) shared: Arc<Shared>,
    pub(super) fd: RawFd,
}

impl Poller {
    /// The descriptor to watch for readability (the socket itself, or for io_uring an
    /// eventfd). Valid until the socket shuts down: remove it from the loop first.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// [`Socket::take_warnings`](crate::Socket::take_warnings), for the loop that drives.
    pub fn take_warnings(&self) -> Vec<String> {
        self.shared.take_warnings()
    }

    /// Receives and handles whatever has arrived, runs due timers and sends what is
    /// ready, without blocking; wakes (on this thread) the tasks of calls and requests
    /// that completed. Returns the number of datagrams received. Call it when
    /// [`fd`](Poller::fd) is readable (a spurious call does no harm).
    pub fn drive(&self) -> usize {
        self.shared.drive()
    }

    /// Holds this socket's sends back until [`uncork`](Poller::uncork): the packets of
    /// calls started and responses sent meanwhile (from any thread) wait, then leave
    /// together: `sendmmsg` batches, and runs of equal-sized packets to one peer as one
    /// UDP GSO send. For an event loop's turn: cork before settling what
    /// [`drive`](Poller::drive) completed, uncork when the code that ran is done; nothing
    /// else sends them meanwhile (a full batch is sent anyway), so nothing may block on
    /// this socket while it is corked. Dropping the `Poller` or shutting the socket down
    /// sends what waits.
    pub fn cork(&self) {
        self.shared.cork();
    }

    /// Sends what [`cork`](Poller::cork) held back, and sends at once again.
    pub fn uncork(&self) {
        self.shared.uncork();
    }

    /// Reads the errors queued on the socket (ICMP port or host unreachable: the calls to
    /// that peer fail). Call when the loop reports an error condition on [`fd`](Poller::fd)
    /// (`EPOLLERR`), which stays until the queue is read.
    pub fn read_errors(&self) {
        self.shared.read_errors();
    }
}

impl AsRawFd for Poller {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.shared.detach();
    }
}
