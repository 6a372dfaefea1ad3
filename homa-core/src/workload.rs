//! Message-size distributions and what they imply for a receiver's priorities: the paper's
//! W1..W5 (shipped with the crate) and any CDF in the same format, sampled as a step
//! function as the Homa simulator does; the unscheduled cutoffs that balance a workload's
//! bytes over the priority levels (what the module's `homa_prio` computes from traffic);
//! and the packets a message becomes.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::Config;
use crate::wire::{self, MAX_MESSAGE_LENGTH, MAX_PRIORITIES};

/// The workloads of the SIGCOMM 2018 paper, as (name, file text).
const BUILTIN: [(&str, &str); 5] = [
    ("w1", include_str!("../workloads/w1.txt")),
    ("w2", include_str!("../workloads/w2.txt")),
    ("w3", include_str!("../workloads/w3.txt")),
    ("w4", include_str!("../workloads/w4.txt")),
    ("w5", include_str!("../workloads/w5.txt")),
];

/// A message-size distribution: sizes with their cumulative probabilities.
///
/// Sampling treats the CDF as a step function: a message has exactly one of the listed sizes,
/// size i with probability `cum[i] - cum[i-1]` (HomaSimulation's and cp_node's reading of
/// these files; no interpolation between points).
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    name: String,
    sizes: Vec<u64>,
    cum: Vec<f64>,
}

/// Why a CDF file was rejected, with the 1-based line number where it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    /// The 1-based line at fault; `None` when the problem is the file as a whole.
    pub line: Option<usize>,
    /// What is wrong, in words.
    pub reason: String,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

impl core::error::Error for WorkloadError {}

fn bad(line: usize, reason: impl Into<String>) -> WorkloadError {
    WorkloadError { line: Some(line), reason: reason.into() }
}

impl Workload {
    /// Names of the built-in workloads.
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN.iter().map(|(n, _)| *n)
    }

    /// One of the paper's workloads, `w1` .. `w5` (case-insensitive).
    pub fn builtin(name: &str) -> Option<Workload> {
        let name = name.to_ascii_lowercase();
        let (n, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
        Some(Workload::parse(n, text).expect("built-in workloads are valid"))
    }

    /// Parses a CDF: one `size_bytes cumulative_probability` pair per line, sizes strictly
    /// increasing positive integers, probabilities non-decreasing in [0, 1] and ending at 1.
    /// Blank lines and lines starting with `#` are skipped.
    pub fn parse(name: &str, text: &str) -> Result<Workload, WorkloadError> {
        let (mut sizes, mut cum) = (Vec::new(), Vec::<f64>::new());
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(s), Some(p), None) = (fields.next(), fields.next(), fields.next()) else {
                return Err(bad(n, "expected two fields: size_bytes cumulative_probability"));
            };
            let size: u64 = s
                .parse()
                .map_err(|_| bad(n, format!("size `{s}` is not a non-negative integer")))?;
            let prob: f64 =
                p.parse().map_err(|_| bad(n, format!("probability `{p}` is not a number")))?;
            if size == 0 || size > u64::from(u32::MAX) {
                return Err(bad(n, format!("size {size} is out of range 1..=4294967295")));
            }
            if !(0.0..=1.0 + 1e-9).contains(&prob) {
                return Err(bad(n, format!("probability {p} is outside [0, 1]")));
            }
            if sizes.last().is_some_and(|&last| size <= last) {
                return Err(bad(n, format!("size {size} does not increase")));
            }
            if cum.last().is_some_and(|&last| prob < last) {
                return Err(bad(n, format!("cumulative probability {p} decreases")));
            }
            sizes.push(size);
            cum.push(prob.min(1.0));
        }
        match cum.last() {
            None => Err(WorkloadError { line: None, reason: "no size/probability lines".into() }),
            Some(&last) if (last - 1.0).abs() > 1e-6 => Err(WorkloadError {
                line: None,
                reason: format!("the last cumulative probability is {last}, not 1"),
            }),
            Some(_) => {
                *cum.last_mut().expect("not empty") = 1.0;
                Ok(Workload { name: name.to_string(), sizes, cum })
            }
        }
    }

    /// A built-in name (`w1` .. `w5`) or the path of a CDF file (feature `std`).
    #[cfg(feature = "std")]
    pub fn load(name_or_path: &str) -> Result<Workload, WorkloadError> {
        if let Some(w) = Workload::builtin(name_or_path) {
            return Ok(w);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| WorkloadError {
            line: None,
            reason: format!(
                "`{name_or_path}` is neither a built-in workload (w1..w5) nor a readable file: {e}"
            ),
        })?;
        let name = std::path::Path::new(name_or_path)
            .file_stem()
            .map_or(name_or_path.into(), |s| s.to_string_lossy().into_owned());
        Workload::parse(&name, &text)
            .map_err(|e| WorkloadError { line: None, reason: format!("{name_or_path}: {e}") })
    }

    /// The name it was built with (`w1`..`w5`, or a CDF file's stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this is one of the paper's workloads (so its reference data applies).
    pub fn is_builtin(&self) -> bool {
        Workload::builtin(&self.name).is_some_and(|b| b == *self)
    }

    /// The distinct sizes, ascending.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// The longest message.
    pub fn longest(&self) -> u64 {
        *self.sizes.last().expect("a workload has sizes")
    }

    /// Probability of each size (the step heights).
    pub fn probabilities(&self) -> impl Iterator<Item = f64> + '_ {
        self.cum.iter().scan(0.0, |prev, &c| {
            let p = c - *prev;
            *prev = c;
            Some(p)
        })
    }

    /// Cumulative probability at each size.
    pub fn cumulative(&self) -> &[f64] {
        &self.cum
    }

    /// Mean message size in bytes.
    pub fn mean(&self) -> f64 {
        self.expect(|s| s as f64)
    }

    /// The expectation of `f(size)`.
    pub fn expect(&self, f: impl Fn(u64) -> f64) -> f64 {
        self.sizes.iter().zip(self.probabilities()).map(|(&s, p)| p * f(s)).sum()
    }

    /// Index into [`sizes`](Self::sizes) of a random message, for `u` drawn uniformly
    /// from [0, 1) (the core has no random number generator; the caller brings one).
    pub fn sample_index(&self, u: f64) -> usize {
        self.cum.partition_point(|&c| c <= u).min(self.sizes.len() - 1)
    }

    /// A random message size, for `u` drawn uniformly from [0, 1).
    pub fn sample(&self, u: f64) -> u64 {
        self.sizes[self.sample_index(u)]
    }

    /// The smallest size whose cumulative probability reaches `q`.
    pub fn quantile(&self, q: f64) -> u64 {
        self.sizes[self.cum.partition_point(|&c| c < q).min(self.sizes.len() - 1)]
    }
}

/// Message bytes in each DATA packet of a `len`-byte message, as the core packetises it: full
/// packets, except that the last unscheduled packet may be short (module
/// `homa_message_out_fill`).
pub fn data_packets(len: u64, config: &Config) -> impl Iterator<Item = u32> {
    let max_payload = u64::from(config.max_payload());
    let unsched = u64::from(config.unsched_bytes).min(len);
    let mut offset = 0u64;
    core::iter::from_fn(move || {
        if offset >= len {
            return None;
        }
        let limit = if offset < unsched { unsched } else { len };
        let end = (offset + max_payload).min(limit);
        let payload = (end - offset) as u32;
        offset = end;
        Some(payload)
    })
}

/// Bytes a DATA packet with `payload` message bytes occupies on the wire: Homa header, the
/// outer (IP) header and Ethernet framing.
pub fn data_wire_bytes(payload: u32, config: &Config) -> u32 {
    config.wire_bytes(wire::data::HEADER_LEN + payload as usize)
}

/// Bytes a GRANT occupies on the wire.
pub fn grant_wire_bytes(config: &Config) -> u32 {
    config.wire_bytes(wire::grant::HEADER_LEN)
}

/// GRANTs a receiver sends for a message of `len` bytes when its packets arrive in order
/// and it is granted to at once: one per arriving packet while `received + window` passes
/// what is granted, until the whole message is granted.
pub fn grants_for(len: u64, config: &Config) -> u64 {
    let window = u64::from(config.grant_window(1));
    let mut grants = 0;
    let (mut received, mut granted) = (0u64, u64::from(config.unsched_bytes).min(len));
    for payload in data_packets(len, config) {
        received += u64::from(payload);
        if granted < len && received + window > granted {
            granted = (received + window).min(len);
            grants += 1;
        }
    }
    grants
}

/// Unscheduled cutoffs for `workload`, as `Config::unsched_cutoffs`: the top `unsched_levels`
/// of `config.num_priorities` carry unscheduled packets, split so that each level carries
/// about the same number of bytes on the wire (HomaSimulation's `STATIC_CBF_GRADUATED` idea;
/// the module's `homa_prio` balances levels likewise). Shorter messages get higher levels.
///
/// The bytes counted are those that travel at unscheduled levels: each message's unscheduled
/// packets with all their headers, and GRANTs, which share the highest level with the
/// shortest messages (HomaSimulation's `accountForGrantTraffic`). Levels below the
/// unscheduled ones are for scheduled packets (the grant scheduler's `max_sched_prio` is the
/// level just below). Where the sizes are too few for distinct cutoffs, lower unscheduled
/// levels repeat a cutoff and go unused.
pub fn cutoffs_for_workload(
    workload: &Workload,
    config: &Config,
    unsched_levels: u8,
) -> [u32; MAX_PRIORITIES as usize] {
    let priorities = config.num_priorities.clamp(1, MAX_PRIORITIES);
    let levels = unsched_levels.clamp(1, priorities);
    let unsched = u64::from(config.unsched_bytes);
    let grant = f64::from(grant_wire_bytes(config));
    let grant_bytes = workload.expect(|s| grants_for(s, config) as f64 * grant);
    let bytes: Vec<f64> = workload
        .sizes()
        .iter()
        .zip(workload.probabilities())
        .map(|(&s, p)| {
            let wire: u32 =
                data_packets(s.min(unsched), config).map(|b| data_wire_bytes(b, config)).sum();
            p * f64::from(wire)
        })
        .collect();
    let total = grant_bytes + bytes.iter().sum::<f64>();
    // Cumulative share of unscheduled-level bytes up to and including each size.
    let mut cbf = Vec::with_capacity(bytes.len());
    let mut sum = grant_bytes;
    for b in &bytes {
        sum += b;
        cbf.push(sum / total);
    }
    let cap = MAX_MESSAGE_LENGTH - 1;
    let mut cuts = Vec::new();
    let mut from = 0;
    for k in 1..levels {
        let target = f64::from(k) / f64::from(levels);
        let i = from + cbf[from..].partition_point(|&c| c < target - 1e-12);
        let size = workload.sizes().get(i).copied().unwrap_or(u64::MAX);
        cuts.push(size.min(u64::from(cap)) as u32);
        from = (i + 1).min(cbf.len());
    }
    let mut table = [0u32; MAX_PRIORITIES as usize];
    let top = usize::from(priorities) - 1;
    for (j, &c) in cuts.iter().enumerate() {
        table[top - j] = c.max(if j > 0 { cuts[j - 1] } else { 0 });
    }
    table[top + 1 - usize::from(levels)] = MAX_MESSAGE_LENGTH;
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testnet::Rng;
    use alloc::vec;

    #[test]
    fn builtins_parse_with_the_documented_means() {
        let means = [187.5, 440.8, 2927.4, 127_796.6, 2_564_715.0];
        for (name, mean) in Workload::builtin_names().zip(means) {
            let w = Workload::builtin(name).unwrap();
            assert!((w.mean() - mean).abs() / mean < 1e-3, "{name}: {}", w.mean());
            assert!(w.is_builtin());
        }
        assert_eq!(Workload::builtin("W3").unwrap().quantile(0.5), 268);
    }

    #[test]
    fn sampler_mean_is_within_two_percent_of_the_cdf_mean() {
        // 2,000,000 samples put 2 % beyond four standard errors for W1, W4 and W5 (coefficients
        // of variation 2.5, 5.5 and 2.4). W2 and W3 are too heavy-tailed (17 and 23) for a
        // fast test of the mean; the CDF test below covers them.
        for name in ["w1", "w4", "w5"] {
            let w = Workload::builtin(name).unwrap();
            let mut rng = Rng::new(42);
            let n = 2_000_000;
            let sum: f64 = (0..n).map(|_| w.sample(rng.next_f64()) as f64).sum();
            let empirical = sum / f64::from(n);
            let err = (empirical - w.mean()).abs() / w.mean();
            assert!(err < 0.02, "{name}: empirical {empirical} vs {} ({err})", w.mean());
        }
    }

    #[test]
    fn sampled_sizes_follow_the_cdf() {
        // Kolmogorov-Smirnov distance of 200,000 samples; 0.005 is over 2x the 1 % critical
        // value (1.63 / sqrt(n) = 0.0036).
        for name in Workload::builtin_names() {
            let w = Workload::builtin(name).unwrap();
            let mut rng = Rng::new(7);
            let mut counts = vec![0u64; w.sizes().len()];
            let n = 200_000;
            for _ in 0..n {
                counts[w.sample_index(rng.next_f64())] += 1;
            }
            let mut seen = 0;
            let mut worst = 0.0f64;
            for (c, &cum) in counts.iter().zip(w.cumulative()) {
                seen += c;
                worst = worst.max((seen as f64 / f64::from(n) - cum).abs());
            }
            assert!(worst < 0.005, "{name}: KS distance {worst}");
        }
    }

    #[test]
    fn zero_probability_sizes_are_never_drawn() {
        let w = Workload::parse("t", "10 0\n20 0.5\n30 1\n").unwrap();
        let mut rng = Rng::new(1);
        assert!((0..10_000).all(|_| w.sample(rng.next_f64()) != 10));
        assert_eq!(w.mean(), 25.0);
    }

    #[test]
    fn bad_files_say_where_and_why() {
        let err = |t: &str| Workload::parse("t", t).unwrap_err().to_string();
        assert_eq!(err("10 0.5\n5 1\n"), "line 2: size 5 does not increase");
        assert_eq!(err("# c\n10 0.5\n20 0.4\n"), "line 3: cumulative probability 0.4 decreases");
        assert_eq!(err("10 0.5\n20 0.9\n"), "the last cumulative probability is 0.9, not 1");
        assert_eq!(err("x 1\n"), "line 1: size `x` is not a non-negative integer");
        assert_eq!(err("10\n"), "line 1: expected two fields: size_bytes cumulative_probability");
        assert_eq!(err("0 1\n"), "line 1: size 0 is out of range 1..=4294967295");
        assert_eq!(err("10 1.5\n"), "line 1: probability 1.5 is outside [0, 1]");
        assert_eq!(err("# only a comment\n"), "no size/probability lines");
    }
}
