//! The driver thread's alarm: a timerfd armed with the next deadline (the endpoint's, a
//! call's, a grace period's or a leader's), moved as seldom as possible.

use std::io;
use std::os::fd::RawFd;

use homa_core::time::Nanos;

/// How late a timer tick may fire (see [`Alarm::arm`]): a busy socket's leader runs it
/// first. Ticks are a millisecond; Homa acts on several of them.
pub(super) const TICK_SLACK: Nanos = 250_000;

/// The endpoint's deadlines sooner than this are not slept for (see `Inner::settle`):
/// arming the timerfd and waking up take longer (tens of microseconds in a VM).
pub(super) const SLEEP_FLOOR: Nanos = 20_000;

/// The timerfd and what it is set to.
#[derive(Debug)]
pub(super) struct Alarm {
    fd: RawFd,
    /// The monotonic clock's reading at the driver's time 0.
    origin: u64,
    /// The endpoint's timer tick in nanoseconds.
    pub(super) tick_ns: Nanos,
    /// When the timerfd fires (until the driver thread consumes the expiry).
    armed: Option<Nanos>,
    /// The deadline `armed` was set for.
    armed_for: Nanos,
}

impl Alarm {
    pub(super) fn new(fd: RawFd, origin: u64, tick_ns: Nanos) -> Alarm {
        Alarm { fd, origin, tick_ns, armed: None, armed_for: 0 }
    }

    /// When the timerfd fires, if it is armed.
    pub(super) fn armed(&self) -> Option<Nanos> {
        self.armed
    }

    /// The time now, on the driver's clock (unlike `Inner::now`, which may run ahead).
    pub(super) fn clock_now(&self) -> Nanos {
        super::monotonic_ns().saturating_sub(self.origin)
    }

    /// The driver thread consumed an expiry: the next `arm` sets the timer again.
    pub(super) fn fired(&mut self) {
        self.armed = None;
    }

    /// Makes sure the timerfd fires by `deadline`, with as few `timerfd_settime` calls as
    /// possible (each costs microseconds, in a VM especially; most settles must not make
    /// one):
    ///
    /// - Timer ticks (deadlines on a tick boundary) fire `TICK_SLACK` late: the timers of
    ///   a busy socket are then run by its leader (which runs what is due after
    ///   receiving), and the timer is moved on before it fires.
    /// - A timer set to fire earlier than needed is left alone unless it would fire within
    ///   a tick: deadlines move later all the time (an RPC ends and its timer entry goes),
    ///   and whoever settles before it fires moves it then. One about to fire for nothing
    ///   is moved, which spares the driver thread a wake-up (and the lock hand-over).
    ///   So is one that has fired (and not yet been consumed) for a deadline no longer
    ///   there.
    /// - A timer set to fire later is always moved earlier.
    ///
    /// Without a deadline the timer is left as it is (it may wake the driver once for
    /// nothing).
    pub(super) fn arm(&mut self, deadline: Option<Nanos>, now: Nanos) {
        let Some(d) = deadline else { return };
        if self.armed.is_some() && self.armed_for == d {
            return; // the common case: nothing moved
        }
        let fire = if d % self.tick_ns == 0 { d + TICK_SLACK } else { d };
        let keep = match self.armed {
            Some(a) => a == fire || (a < fire && a > now + self.tick_ns),
            None => false,
        };
        if keep {
            return;
        }
        self.armed_for = d;
        self.armed = Some(fire);
        // An absolute time already past fires at once.
        let at = self.origin + fire.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: (at / 1_000_000_000) as libc::time_t,
                tv_nsec: (at % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: our timerfd, a valid itimerspec, and no old value wanted.
        let rc = unsafe {
            libc::timerfd_settime(self.fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
        };
        if rc < 0 {
            tracing::error!("timerfd_settime failed: {}", io::Error::last_os_error());
        }
    }
}

/// The earlier of two optional deadlines.
pub(super) fn earlier(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
