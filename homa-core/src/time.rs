//! Time as the core sees it: plain nanosecond counts handed in by the caller.

/// A point in time: nanoseconds since an arbitrary origin chosen by the caller. The core
/// never reads a clock; every call that needs the time takes one, and an `Instant` earlier
/// than one already seen is treated as that one (time never goes backwards).
pub type Instant = u64;
/// A span of time in nanoseconds.
pub type Duration = u64;

/// Nanoseconds per microsecond.
pub const NANOS_PER_USEC: u64 = 1_000;
/// Nanoseconds per millisecond.
pub const NANOS_PER_MSEC: u64 = 1_000_000;
