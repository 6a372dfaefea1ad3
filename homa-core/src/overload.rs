//! Input this host dropped before the endpoint saw it (a full socket receive buffer): the
//! ticks in which that happened are mostly not the peers' silence.
//!
//! A host that cannot keep up drops what arrives, and the RPCs whose packets were among the
//! dropped then hear nothing, through no fault of their peers. RESENDs sent meanwhile only
//! bring more packets to a host that cannot take them (a receive livelock), and timeouts
//! fail calls whose peers are alive. So nine tenths of every tick in which input was dropped
//! are left out of each RPC's silence, for RESENDs and timeouts alike: while the host drops,
//! its RPC timers run at a tenth of their speed, as TCP's retransmission timer backs off,
//! and a peer that is gone is still found out (ten times later). The module's softirq
//! handling seldom falls behind; it counts every tick.

/// Ticks one reading may excuse: readings come at least every `resend_interval` ticks while
/// an RPC counts silence, and a count that grew over a longer idle span says little about
/// when.
const MAX_SPAN: u64 = 10;

#[derive(Debug, Default)]
pub(crate) struct Overload {
    /// The I/O layer's count of input dropped, at its last reading, and the tick of it.
    drops: u64,
    read_tick: Option<u64>,
    /// Tenths of ticks excused so far.
    tenths: u64,
}

impl Overload {
    /// Takes the count of input dropped so far, read in `tick`. If it grew since the last
    /// reading in an earlier tick, nine tenths of the ticks since then are excused. (Drops
    /// after the first reading in a tick count at the first one in a later tick.)
    pub(crate) fn read(&mut self, tick: u64, drops: u64) {
        let since = self.read_tick.unwrap_or(tick);
        if self.read_tick.is_some() && tick <= since {
            return;
        }
        if drops > self.drops {
            self.tenths += (tick - since).min(MAX_SPAN) * 9;
        }
        self.drops = drops;
        self.read_tick = Some(tick);
    }

    /// Ticks excused so far: the difference of two readings is how many of the ticks
    /// between them were.
    pub(crate) fn excused(&self) -> u64 {
        self.tenths / 10
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_with_drops_count_a_tenth() {
        let mut o = Overload::default();
        o.read(1, 0);
        for tick in 2..=11 {
            o.read(tick, tick * 100);
        }
        assert_eq!(o.excused(), 9, "ten ticks with drops: nine excused");
        o.read(15, 1100);
        assert_eq!(o.excused(), 9, "no drops since: nothing more");
    }

    #[test]
    fn drops_later_in_a_tick_count_in_the_next() {
        let mut o = Overload::default();
        o.read(3, 0);
        o.read(3, 50);
        assert_eq!(o.excused(), 0);
        o.read(4, 50);
        assert_eq!(o.excused(), 0, "0.9 of a tick");
        o.read(5, 60);
        assert_eq!(o.excused(), 1);
    }

    #[test]
    fn a_long_span_excuses_at_most_max_span() {
        let mut o = Overload::default();
        o.read(1, 0);
        o.read(1001, 7);
        assert_eq!(o.excused(), MAX_SPAN * 9 / 10);
    }
}
