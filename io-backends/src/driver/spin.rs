//! Busy polling: a thread about to sleep until a packet arrives first checks for it without
//! sleeping for a while, as the Linux module does (`poll_usecs`). A round trip then costs
//! no wake-up at the waiting end, which on a VM is most of a cross-CPU round trip.
//!
//! Spinning pays only while the packet comes soon and the CPU has nothing else to do, so
//! it adapts: a spin that ends without the packet, or whose yield let another thread run
//! (spinning there takes the CPU from the very thread that would send the packet, or from
//! other work), makes the next waits sleep at once, twice as many after each such spin in
//! a row; one that finds the packet spins again the next time.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The window when the socket's builder names none: the module's `poll_usecs`.
pub(crate) const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// A yield that took this long gave the CPU to another thread (one that gives it to no
/// one returns in well under a microsecond).
const YIELD_RAN_ANOTHER: Duration = Duration::from_micros(2);

/// The most waits one unpaid spin makes sleep at once.
const MAX_SKIP: u32 = 1024;

/// When and how long to spin; shared by the threads waiting on one socket.
#[derive(Debug)]
pub(crate) struct Spin {
    /// The longest spin; zero: never.
    window: Duration,
    /// Waits left that sleep at once.
    skip: AtomicU32,
    /// How many the next unpaid spin makes sleep at once.
    backoff: AtomicU32,
    /// Waits that spun, and those of them that found what they waited for.
    spins: AtomicU64,
    paid: AtomicU64,
}

/// How a spin ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spun {
    /// What was waited for is there.
    Ready,
    /// The window passed, or the CPU had other work: sleep.
    Sleep,
}

impl Spin {
    pub(crate) fn new(window: Duration) -> Spin {
        let (skip, backoff) = (AtomicU32::new(0), AtomicU32::new(1));
        Spin { window, skip, backoff, spins: AtomicU64::new(0), paid: AtomicU64::new(0) }
    }

    /// The longest spin.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// Waits that spun, and those that found their packet spinning (`Metrics::busy_polls`).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.spins.load(Ordering::Relaxed), self.paid.load(Ordering::Relaxed))
    }

    /// Whether this wait should spin before it sleeps (counts off a wait to skip if not).
    pub(crate) fn wanted(&self) -> bool {
        if self.window.is_zero() {
            return false;
        }
        let skipping =
            self.skip.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        skipping.is_err()
    }

    /// Checks `ready` and yields the CPU, over and over, until `ready` says yes, the window
    /// passes or a yield runs another thread; learns from which.
    pub(crate) fn spin(&self, mut ready: impl FnMut() -> bool) -> Spun {
        if ready() {
            return Spun::Ready; // it did not have to spin: nothing learnt
        }
        let start = Instant::now();
        let cpu_start = thread_cpu_time();
        let outcome = loop {
            let before = Instant::now();
            // SAFETY: no arguments; gives the CPU to a thread waiting for it, if any.
            unsafe { libc::sched_yield() };
            let after = Instant::now();
            // A long yield ran another thread, or this one ran work the kernel had queued
            // for it on its way back (io_uring completes a receive so): only the first
            // means the CPU is wanted elsewhere.
            if after - before >= YIELD_RAN_ANOTHER {
                let off_cpu = (after - start).saturating_sub(thread_cpu_time() - cpu_start);
                if off_cpu >= YIELD_RAN_ANOTHER {
                    break Spun::Sleep;
                }
            }
            if ready() {
                break Spun::Ready;
            }
            if after - start >= self.window {
                break Spun::Sleep;
            }
        };
        self.spins.fetch_add(1, Ordering::Relaxed);
        if outcome == Spun::Ready {
            self.paid.fetch_add(1, Ordering::Relaxed);
        }
        self.learn(outcome);
        outcome
    }

    fn learn(&self, outcome: Spun) {
        match outcome {
            Spun::Ready => self.backoff.store(1, Ordering::Relaxed),
            Spun::Sleep => {
                let n = self.backoff.load(Ordering::Relaxed);
                self.skip.store(n, Ordering::Relaxed);
                self.backoff.store((n * 2).min(MAX_SKIP), Ordering::Relaxed);
            }
        }
    }
}

/// CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    // SAFETY: all-zero bytes are a valid timespec.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a live timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_window_never_spins() {
        let spin = Spin::new(Duration::ZERO);
        assert!(!spin.wanted());
    }

    #[test]
    fn spins_that_find_nothing_make_ever_more_waits_sleep_at_once() {
        let spin = Spin::new(Duration::from_micros(1));
        let mut skipped = Vec::new();
        for _ in 0..4 {
            assert!(spin.wanted());
            assert_eq!(spin.spin(|| false), Spun::Sleep);
            skipped.push(std::iter::from_fn(|| (!spin.wanted()).then_some(())).count());
        }
        // Each count stops at the next wait that spins: 1, 2, 4, 8 skipped before it.
        assert_eq!(skipped, [1, 2, 4, 8]);
    }

    #[test]
    fn only_a_spin_that_paid_starts_the_backoff_over() {
        let spin = Spin::new(Duration::from_secs(1));
        let skipped = |spin: &Spin| std::iter::from_fn(|| (!spin.wanted()).then_some(())).count();
        spin.learn(Spun::Sleep);
        spin.learn(Spun::Sleep);
        assert_eq!(skipped(&spin), 2);
        // A packet there at the first look: no spin, nothing learnt.
        assert_eq!(spin.spin(|| true), Spun::Ready);
        spin.learn(Spun::Sleep);
        assert_eq!(skipped(&spin), 4);
        // One found after yielding: the next unpaid spin skips one wait again.
        spin.learn(Spun::Ready);
        spin.learn(Spun::Sleep);
        assert_eq!(skipped(&spin), 1);
    }
}
