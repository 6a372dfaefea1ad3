//! [`Histogram`]: latencies in fixed, log-spaced buckets.

/// Bucket upper bounds in nanoseconds, from 1 µs to 10 s: four a decade (1, 1.78, 3.16
/// and 5.62 times each power of ten, rounded), so that quantiles read within 78 %.
const BOUNDS_NS: [u64; 29] = [
    1_000,
    1_778,
    3_162,
    5_623,
    10_000,
    17_780,
    31_620,
    56_230,
    100_000,
    177_800,
    316_200,
    562_300,
    1_000_000,
    1_778_000,
    3_162_000,
    5_623_000,
    10_000_000,
    17_780_000,
    31_620_000,
    56_230_000,
    100_000_000,
    177_800_000,
    316_200_000,
    562_300_000,
    1_000_000_000,
    1_778_000_000,
    3_162_000_000,
    5_623_000_000,
    10_000_000_000,
];
const BOUNDS: usize = BOUNDS_NS.len();

/// A latency histogram: counts of durations in buckets whose upper bounds are log-spaced
/// from 1 µs to 10 s (four a decade), and one for longer ones; their count and sum.
/// Recording a sample takes no allocation: a fixed array, and a binary search of the
/// bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    /// `buckets[i]`: samples at most `BOUNDS_NS[i]` and above the bound before (the last:
    /// above 10 s).
    buckets: [u64; BOUNDS + 1],
    count: u64,
    sum_ns: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram { buckets: [0; BOUNDS + 1], count: 0, sum_ns: 0 }
    }
}

impl Histogram {
    /// The upper bounds of the buckets, in seconds (the last bucket, above them, has none).
    pub fn bounds() -> impl Iterator<Item = f64> {
        BOUNDS_NS.iter().map(|&ns| ns as f64 / 1e9)
    }

    /// Counts a duration of `ns` nanoseconds.
    pub fn record(&mut self, ns: u64) {
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Their sum, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns as f64 / 1e9
    }

    /// Samples per bucket, in the order of [`bounds`](Histogram::bounds), then those above
    /// the last bound.
    pub fn buckets(&self) -> &[u64] {
        &self.buckets
    }

    /// As the bindings show it: `count`, `sum` (seconds), `bounds` (seconds) and `buckets`
    /// (samples per bucket, one more than `bounds`: the last is above them).
    pub fn to_value(&self) -> homa_core::Map {
        use homa_core::Value;
        let mut v = homa_core::Map::new();
        v.insert("count", self.count);
        v.insert("sum", Value::Float(self.sum_seconds()));
        v.insert("bounds", Value::List(Histogram::bounds().map(Value::Float).collect()));
        v.insert("buckets", Value::List(self.buckets.iter().map(|&n| n.into()).collect()));
        v
    }

    /// The bound of the bucket that holds the `q` quantile (0 < `q` <= 1), in seconds: an
    /// upper estimate, within a bucket's width (at most 78 %). `None` without samples, or
    /// when it lies above the last bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate().take(BOUNDS) {
            seen += n;
            if seen >= rank && self.count > 0 {
                return Some(BOUNDS_NS[i] as f64 / 1e9);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_log_spaced_buckets() {
        let bounds: Vec<f64> = Histogram::bounds().collect();
        assert_eq!(bounds.len(), 29);
        assert!((bounds[0] - 1e-6).abs() < 1e-12 && (bounds[28] - 10.0).abs() < 1e-9);
        let mut h = Histogram::default();
        for ns in [500, 1_000, 1_001, 150_000, 20_000_000_000] {
            h.record(ns);
        }
        assert_eq!(h.count(), 5);
        assert_eq!(h.buckets()[0], 2, "up to 1 µs, the bound included");
        assert_eq!(h.buckets()[1], 1, "just above 1 µs");
        assert_eq!(h.buckets()[BOUNDS], 1, "above 10 s");
        let i = bounds.iter().position(|&b| b >= 150e-6).unwrap();
        assert_eq!(h.buckets()[i], 1);
        assert!((h.sum_seconds() - 20.000_152_501).abs() < 1e-9);
        assert_eq!(h.quantile(0.5), Some(bounds[1]));
        assert_eq!(h.quantile(0.8), Some(bounds[i]));
        assert_eq!(h.quantile(1.0), None, "the slowest is above the last bound");
        assert_eq!(Histogram::default().quantile(0.5), None);
        // A bound itself falls in its bucket: exactly 100 µs and 100 ms.
        let mut h = Histogram::default();
        h.record(100_000);
        h.record(100_000_000);
        assert_eq!((h.buckets()[8], h.buckets()[20]), (1, 1));
        assert_eq!((bounds[8], bounds[20]), (1e-4, 0.1));
    }
}
