//! Latency samples and their percentiles, shared by `homa client` and `homa bench`.

use std::time::Duration;

use serde_json::{Map, Value, json};

/// Latencies in nanoseconds. Percentiles are exact (nearest rank over all samples).
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples {
    ns: Vec<u64>,
    sorted: bool,
}

impl Samples {
    pub(crate) fn push(&mut self, d: Duration) {
        self.ns.push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    /// The summary of what was recorded (sorts the samples).
    pub(crate) fn summary(&mut self) -> Summary {
        if !self.sorted {
            self.ns.sort_unstable();
            self.sorted = true;
        }
        let n = self.ns.len();
        let at = |p: f64| {
            // Nearest rank: the smallest sample with at least p of all samples at or below it.
            let rank = (p * n as f64).ceil() as usize;
            self.ns[rank.clamp(1, n) - 1]
        };
        if n == 0 {
            return Summary::default();
        }
        let sum: u128 = self.ns.iter().map(|&x| u128::from(x)).sum();
        Summary {
            count: n as u64,
            min: self.ns[0],
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: self.ns[n - 1],
            mean: (sum / n as u128) as u64,
        }
    }
}

/// Percentiles of a set of latencies, in nanoseconds (all 0 when there are none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) count: u64,
    pub(crate) min: u64,
    pub(crate) p50: u64,
    pub(crate) p90: u64,
    pub(crate) p99: u64,
    pub(crate) p999: u64,
    pub(crate) max: u64,
    pub(crate) mean: u64,
}

/// Nanoseconds as microseconds, rounded to 0.01 µs (for JSON).
pub(crate) fn us(ns: u64) -> f64 {
    (ns as f64 / 10.0).round() / 100.0
}

impl Summary {
    /// `{count, min_us, p50_us, p90_us, p99_us, p999_us, max_us, mean_us}`.
    pub(crate) fn to_json(self) -> Map<String, Value> {
        let Value::Object(map) = json!({
            "count": self.count,
            "min_us": us(self.min),
            "p50_us": us(self.p50),
            "p90_us": us(self.p90),
            "p99_us": us(self.p99),
            "p999_us": us(self.p999),
            "max_us": us(self.max),
            "mean_us": us(self.mean),
        }) else {
            unreachable!("json! of an object literal is an object")
        };
        map
    }
}

/// A ratio rounded to 0.001, or null when the baseline is missing.
pub(crate) fn ratio(a: u64, b: u64) -> Value {
    if a == 0 || b == 0 {
        return Value::Null;
    }
    json!(((a as f64 / b as f64) * 1000.0).round() / 1000.0)
}

/// CPU seconds used by this process so far (all threads): (user, system).
pub(crate) fn cpu_time() -> (f64, f64) {
    // SAFETY: all-zero bytes are a valid rusage; getrusage writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a live rusage to write into.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// The whole machine's CPU time so far, every CPU and the kernel's softirq work included
/// (/proc/stat): (busy, total) in clock ticks.
pub(crate) fn machine_cpu_ticks() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> =
        text.lines().next()?.split_whitespace().skip(1).filter_map(|t| t.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

/// The 1-minute load average, if readable.
pub(crate) fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Facts about the machine that matter for reading benchmark numbers.
pub(crate) fn host_json() -> Value {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".to_string(), |s| s.trim().to_string());
    json!({ "cpus": cpus, "kernel": kernel, "load_average_1min": load_average() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut s = Samples::default();
        for i in 1..=1000 {
            s.push(Duration::from_nanos(i));
        }
        let m = s.summary();
        assert_eq!((m.min, m.p50, m.p99, m.p999, m.max), (1, 500, 990, 999, 1000));
        assert_eq!(m.mean, 500);
        assert_eq!(Samples::default().summary(), Summary::default());
    }
}
