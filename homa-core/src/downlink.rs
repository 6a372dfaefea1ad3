//! What this receiver's downlink delivered, tick by tick: whether granted bytes that have
//! not arrived may still be queued behind other traffic, rather than lost.
//!
//! A switch port (or a shaped queue) serves its priority queues strictly: bytes sent at
//! level p wait while anything at p or above is queued. A tick in which the downlink ran at
//! about its full rate and delivered nothing below level p may have held level p back all
//! along; a tick with idle time, or with a packet from below p, drained level p (what was
//! sent at p before then has arrived, or was lost). Under load the lowest levels can wait
//! longer than `resend_ticks`, and a RESEND then only duplicates bytes on their way, so
//! the timer leaves such ticks out of the silence that leads to one (not out of the
//! silence that times an RPC out). The module counts every tick.

use crate::config::Config;
use crate::wire::MAX_PRIORITIES;

#[derive(Debug)]
pub(crate) struct Downlink {
    /// Wire bytes per tick above which a tick counts as busy: 7/8 of what `link_mbps`
    /// carries in a tick, as arrivals reach the endpoint in bursts a little off the link's
    /// pace.
    busy_bytes: u64,
    /// The tick being counted, and what it delivered so far.
    tick: u64,
    bytes: u64,
    lowest: u8,
    /// Idle ticks just before `tick`, that a late burst may turn out to have been busy.
    idle: u64,
    /// Per level, the ticks counted so far that may have held that level back.
    held: [u64; MAX_PRIORITIES as usize],
}

impl Downlink {
    pub(crate) fn new(config: &Config) -> Downlink {
        // Mbit/s x µs = bits.
        let per_tick = u64::from(config.link_mbps) * u64::from(config.tick_usecs) / 8;
        Downlink {
            busy_bytes: per_tick - per_tick / 8,
            tick: 0,
            bytes: 0,
            lowest: MAX_PRIORITIES - 1,
            idle: 0,
            held: [0; MAX_PRIORITIES as usize],
        }
    }

    /// Counts a DATA packet of `wire_bytes` that arrived in `tick`, sent at `level`.
    pub(crate) fn record(&mut self, tick: u64, wire_bytes: u32, level: u8) {
        self.roll(tick);
        self.bytes += u64::from(wire_bytes);
        self.lowest = self.lowest.min(level);
    }

    /// The ticks before `tick` that may have held `level` back: the difference of two
    /// readings is how many of the ticks between them did.
    pub(crate) fn held(&mut self, tick: u64, level: u8) -> u64 {
        self.roll(tick);
        self.held[usize::from(level.min(MAX_PRIORITIES - 1))]
    }

    /// Closes the counted tick when `tick` is a later one. Ticks without a packet were idle,
    /// unless a later tick handed over more than a tick's worth: the endpoint ran late,
    /// and those bytes crossed the link in the idle ticks before.
    fn roll(&mut self, tick: u64) {
        if tick == self.tick {
            return;
        }
        let worth = self.bytes / self.busy_bytes;
        let busy = worth.min(1 + self.idle);
        for held in &mut self.held[..=usize::from(self.lowest)] {
            *held += busy;
        }
        let skipped = tick.saturating_sub(self.tick + 1);
        self.idle = if worth == 0 { self.idle + 1 } else { 0 } + skipped;
        self.tick = tick;
        self.bytes = 0;
        self.lowest = MAX_PRIORITIES - 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> Downlink {
        // 1 Gbit/s, 1 ms ticks: 125,000 bytes a tick; busy from 109,375.
        Downlink::new(&Config { link_mbps: 1000, ..Config::default() })
    }

    fn levels(d: &mut Downlink, tick: u64) -> [u64; 8] {
        core::array::from_fn(|level| d.held(tick, level as u8))
    }

    #[test]
    fn a_busy_tick_holds_back_the_levels_up_to_the_lowest_it_delivered() {
        let mut d = link();
        d.record(3, 60_000, 5);
        d.record(3, 60_000, 2);
        assert_eq!(d.held(3, 0), 0, "the tick is still being counted");
        assert_eq!(levels(&mut d, 4), [1, 1, 1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_tick_with_idle_time_holds_nothing_back() {
        let mut d = link();
        d.record(3, 100_000, 0);
        d.record(5, 120_000, 7);
        assert_eq!(levels(&mut d, 9), [1; 8]);
        assert_eq!(d.held(10, 7), 1, "ticks 6 to 9 delivered nothing");
    }

    #[test]
    fn a_late_burst_makes_the_idle_ticks_before_it_busy() {
        let mut d = link();
        d.record(3, 120_000, 1);
        // Ticks 4 to 6 handed nothing over; tick 7 three ticks' worth.
        d.record(7, 340_000, 0);
        assert_eq!(levels(&mut d, 8), [4, 1, 0, 0, 0, 0, 0, 0], "level 0: ticks 3 and 5 to 7");
        // Idle ticks before a busy one stay idle: that one was on time.
        d.record(10, 120_000, 0);
        d.record(11, 340_000, 0);
        assert_eq!(d.held(12, 0), 6, "ticks 10 and 11 only");
    }

    #[test]
    fn busy_follows_link_mbps() {
        let mut d = Downlink::new(&Config::default());
        d.record(1, 1_000_000, 0);
        assert_eq!(d.held(2, 0), 0, "1 MB in a tick is a third of 25 Gbit/s");
    }
}
