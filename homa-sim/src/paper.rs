//! Homa's and the SRPT oracle's simulated results in the SIGCOMM 2018 paper, per message-size
//! bin, for comparison (`workloads/paper-homa.txt`, `workloads/paper-oracle.txt`; their headers
//! name the source).

use serde::Serialize;

const DATA: &str = include_str!("../workloads/paper-homa.txt");
const ORACLE: &str = include_str!("../workloads/paper-oracle.txt");

/// One bin of the paper's results: messages up to `upper` bytes (and above the previous bin).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperBin {
    /// Upper bound of the bin's message sizes, in bytes.
    pub upper: u64,
    /// Share of messages in the bin, in percent.
    pub percent: f64,
    /// Mean slowdown.
    pub mean: f64,
    /// Median slowdown.
    pub median: f64,
    /// 99th-percentile slowdown.
    pub p99: f64,
}

/// The rows of a data file for `workload` at `load`: each bin's upper bound and the `N`
/// numbers after it (the files are ours, so a malformed line is a bug).
fn rows<'a, const N: usize>(
    data: &'a str,
    workload: &'a str,
    load: f64,
) -> impl Iterator<Item = (u64, [f64; N])> + 'a {
    data.lines().filter(|l| !l.starts_with('#')).filter_map(move |line| {
        let bad = || -> ! { panic!("malformed line in a paper data file: {line}") };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != N + 3 {
            bad();
        }
        let num = |s: &str| s.parse::<f64>().unwrap_or_else(|_| bad());
        (f[0] == workload && (num(f[1]) - load).abs() < 1e-9).then(|| {
            let upper = f[2].parse::<u64>().unwrap_or_else(|_| bad());
            (upper, core::array::from_fn(|i| num(f[3 + i])))
        })
    })
}

/// The paper's bins for workload `w1` .. `w5` at `load` (0.5 or 0.8), if it has them.
pub fn bins(workload: &str, load: f64) -> Option<Vec<PaperBin>> {
    let out: Vec<PaperBin> = rows(DATA, workload, load)
        .map(|(upper, [percent, mean, median, p99])| PaperBin { upper, percent, mean, median, p99 })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// One bin of the paper's SRPT oracle (see [`oracle_bins`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OracleBin {
    /// Upper bound of the bin's message sizes, in bytes.
    pub upper: u64,
    /// Median slowdown.
    pub median: f64,
    /// 99th-percentile slowdown.
    pub p99: f64,
}

/// The paper's SRPT oracle for workload `w1` .. `w5` at `load`, for the bins it has values
/// for (fewer than [`bins`] has).
pub fn oracle_bins(workload: &str, load: f64) -> Vec<OracleBin> {
    rows(ORACLE, workload, load)
        .map(|(upper, [median, p99])| OracleBin { upper, median, p99 })
        .collect()
}

/// The paper's bin upper bounds for a built-in workload (the same at every load).
pub fn bin_bounds(workload: &str) -> Option<Vec<u64>> {
    bins(workload, 0.8).map(|b| b.iter().map(|b| b.upper).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values_match_the_spec_table() {
        let w3 = bins("w3", 0.8).unwrap();
        assert_eq!(w3.len(), 102);
        assert!((w3[0].p99 - 2.22).abs() < 0.01);
        let worst = w3.iter().map(|b| b.p99).fold(0.0, f64::max);
        assert!((worst - 22.55).abs() < 0.01);
        let w5 = bin_bounds("w5").unwrap();
        assert_eq!(w5[0], 1470);
        assert_eq!(*w5.last().unwrap(), 29_400_000);
        assert!(bins("w3", 0.7).is_none());
    }

    #[test]
    fn oracle_values_sit_on_the_papers_bins() {
        let w5 = oracle_bins("w5", 0.5);
        assert_eq!(w5.len(), 85);
        assert_eq!(w5[0], OracleBin { upper: 1470, median: 1.0, p99: 1.0 });
        let last = w5.last().unwrap();
        assert_eq!(last.upper, 29_400_000);
        assert!((last.p99 - 9.17).abs() < 0.01);
        for w in ["w1", "w2", "w3", "w4", "w5"] {
            let bounds = bin_bounds(w).unwrap();
            let oracle = oracle_bins(w, 0.8);
            assert!(!oracle.is_empty() && oracle.len() <= bounds.len(), "{w}");
            assert!(oracle.iter().all(|b| bounds.contains(&b.upper)), "{w}");
        }
    }
}
