//! Time as the core sees it: nanosecond counts handed in by the caller.

use core::ops::Add;

/// A point in time: nanoseconds since an arbitrary origin chosen by the caller. The core
/// never reads a clock; every call that needs the time takes one, and an `Instant` earlier
/// than one already seen is treated as that one (time never goes backwards). A type of its
/// own, so that a count of nanoseconds is not mistaken for one of ticks or microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is (zero if it is not after it).
    pub fn saturating_duration_since(self, earlier: Instant) -> core::time::Duration {
        core::time::Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// Later by a span (saturating at the end of time).
impl Add<core::time::Duration> for Instant {
    type Output = Instant;

    fn add(self, d: core::time::Duration) -> Instant {
        Instant(self.0.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }
}

impl core::fmt::Display for Instant {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ns", self.0)
    }
}

/// A point in time as a plain count of nanoseconds: inside the core, and the clock of the
/// test network ([`testnet`](crate::testnet)). The endpoint's API takes and returns
/// [`Instant`].
pub type Nanos = u64;
/// A span of time in nanoseconds.
pub type Duration = u64;

/// Nanoseconds per microsecond.
pub const NANOS_PER_USEC: u64 = 1_000;
/// Nanoseconds per millisecond.
pub const NANOS_PER_MSEC: u64 = 1_000_000;

/// A tick or none: `Option<u64>` in 8 bytes instead of 16 (no tick reaches `u64::MAX`), for
/// state that must fit a cache line (an RPC's timer, a peer's first line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaybeTick(u64);

impl MaybeTick {
    pub(crate) const NONE: MaybeTick = MaybeTick(u64::MAX);

    pub(crate) fn some(tick: u64) -> MaybeTick {
        debug_assert_ne!(tick, u64::MAX, "no tick is that late");
        MaybeTick(tick)
    }

    pub(crate) fn get(self) -> Option<u64> {
        (self.0 != u64::MAX).then_some(self.0)
    }
}

impl Default for MaybeTick {
    fn default() -> MaybeTick {
        MaybeTick::NONE
    }
}
