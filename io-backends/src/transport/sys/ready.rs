//! Readiness: clearing and signalling an eventfd or timerfd, and polling a socket for
//! datagrams.

use std::os::fd::RawFd;

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
pub(in crate::transport) fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd; no waiting.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
}

/// Whether datagrams or an error report (POLLERR) wait on `fd` now.
pub(in crate::transport) fn pending(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd; no waiting.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & (libc::POLLIN | libc::POLLERR) != 0 }
}
