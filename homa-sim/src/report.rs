//! What a run measured: slowdowns per message-size bin, loads, queues and drops, as JSON
//! (deterministic: ordered fields, no wall-clock) and as a text table.

use core::fmt::Write as _;

use homa_core::Metrics;
use homa_core::wire::PacketType;
use serde::Serialize;

use crate::config::{Mode, SimConfig, Stop, Tail};
use crate::fabric::{PortKind, Topology};
use crate::paper;
use homa_core::workload::Workload;

/// Bins with fewer measured messages than this are left out when picking the worst bin
/// (their 99th percentile is little more than their maximum).
pub const MIN_WORST_SAMPLES: u64 = 100;

/// Upper bounds of the size bins for a run: the configured ones, else the paper's for its
/// workloads, else bins of at least 1 % of messages each.
pub fn bin_bounds(cfg: &SimConfig) -> Vec<u64> {
    if !cfg.bins.is_empty() {
        return cfg.bins.clone();
    }
    if cfg.workload.is_builtin()
        && let Some(b) = paper::bin_bounds(cfg.workload.name())
    {
        return b;
    }
    auto_bins(&cfg.workload, 0.01)
}

/// Groups consecutive sizes into bins holding at least `share` of the messages each (the last
/// bin may hold less).
pub fn auto_bins(w: &Workload, share: f64) -> Vec<u64> {
    let mut bounds = Vec::new();
    let mut in_bin = 0.0;
    for (&size, p) in w.sizes().iter().zip(w.probabilities()) {
        in_bin += p;
        if in_bin >= share {
            bounds.push(size);
            in_bin = 0.0;
        }
    }
    let last = w.longest();
    if bounds.last() != Some(&last) {
        bounds.push(last);
    }
    bounds
}

/// Slowdowns collected per bin.
#[derive(Debug)]
pub struct Stats {
    bounds: Vec<u64>,
    /// Per size index of the workload, its bin.
    bin_of: Vec<usize>,
    /// Per bin, the slowdowns.
    samples: Vec<Vec<f32>>,
    /// Per bin, the workload's cumulative probability at its upper bound.
    cum: Vec<f64>,
}

impl Stats {
    /// Empty bins with upper bounds `bounds` for `w`'s sizes (larger sizes go to the last).
    pub fn new(w: &Workload, bounds: &[u64]) -> Stats {
        let bin = |size: u64| bounds.partition_point(|&b| b < size).min(bounds.len() - 1);
        let bin_of = w.sizes().iter().map(|&s| bin(s)).collect();
        let cum = bounds
            .iter()
            .map(|&b| {
                let i = w.sizes().partition_point(|&s| s <= b);
                if i == 0 { 0.0 } else { w.cumulative()[i - 1] }
            })
            .collect();
        Stats { bounds: bounds.to_vec(), bin_of, samples: vec![Vec::new(); bounds.len()], cum }
    }

    /// Records a completed message of size index `size_index`.
    pub fn record(&mut self, size_index: usize, slowdown: f64) {
        self.samples[self.bin_of[size_index]].push(slowdown as f32);
    }

    /// Every recorded slowdown, bin by bin.
    #[cfg(test)]
    pub(crate) fn samples(&self) -> impl Iterator<Item = f64> + '_ {
        self.samples.iter().flatten().map(|&s| f64::from(s))
    }

    /// The bin of a size.
    fn bin(&self, size: u64) -> usize {
        self.bounds.partition_point(|&b| b < size).min(self.bounds.len() - 1)
    }
}

/// The `q` quantile of sorted values (nearest rank).
fn quantile(sorted: &[f32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    f64::from(sorted[rank - 1])
}

/// HomaSimulation's OMNeT++ histograms span 0 ..= the largest of the first this many values
/// recorded.
const HISTOGRAM_RANGE_VALUES: usize = 10_000;

/// The 99th percentile `p99` as HomaSimulation's published numbers read it: the histogram
/// splits 0 ..= `top` (see [`HISTOGRAM_RANGE_VALUES`]) into 100 equal cells, larger values go
/// to an overflow cell above, and the reported p99 is the lower edge of the cell holding it.
fn histogram_p99(p99: f64, top: f64) -> f64 {
    if p99 > top {
        return top; // the overflow cell
    }
    let width = top / 100.0;
    if width == 0.0 { 0.0 } else { (p99 / width).floor().min(99.0) * width }
}

/// Rounds for output: keeps JSON short and stable.
fn r4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// One message-size bin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bin {
    /// Sizes above the previous bin's `upper`, up to this, in bytes.
    pub upper: u64,
    /// Share of all messages at or below `upper` (the paper's x-axis position).
    pub cum_fraction: f64,
    /// Measured messages of these sizes that completed.
    pub messages: u64,
    /// Mean slowdown of those messages (`None`, like the other slowdowns, if there are none).
    pub mean: Option<f64>,
    /// Median slowdown (nearest rank).
    pub median: Option<f64>,
    /// 99th-percentile slowdown (nearest rank).
    pub p99: Option<f64>,
    /// The p99 as the paper's simulator read it from a histogram (see RESULTS.md): never
    /// above `p99`, and at most 1 % of the histogram's range below it unless its overflow
    /// cell caps it.
    pub p99_histogram: Option<f64>,
    /// The bin's largest slowdown.
    pub max: Option<f64>,
    /// The paper's Homa values for this bin, workload and load, where it has them.
    pub paper_median: Option<f64>,
    /// The paper's Homa p99 for this bin, where it has one.
    pub paper_p99: Option<f64>,
    /// An ideal SRPT scheduler's values for the same messages (runs with
    /// [`SimConfig::oracle`]; its slowdown is time / (size / link rate), so it is not in
    /// the units of `median` and `p99`, whose idle-network time counts headers and latency).
    /// It completes every measured message, also those Homa left unfinished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_messages: Option<u64>,
    /// The oracle's median slowdown in this bin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_median: Option<f64>,
    /// The oracle's 99th-percentile slowdown in this bin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_p99: Option<f64>,
    /// The paper's SRPT oracle for this bin (runs with [`SimConfig::oracle`], where the paper
    /// has it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paper_oracle_p99: Option<f64>,
}

/// The figures the paper's comparison uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Key {
    /// The bin's upper bound in bytes ([`Bin::upper`]).
    pub bin_upper: u64,
    /// Completed measured messages in the bin.
    pub messages: u64,
    /// The bin's median slowdown.
    pub median: Option<f64>,
    /// The bin's 99th-percentile slowdown.
    pub p99: Option<f64>,
    /// The bin's p99 as the paper's simulator read it ([`Bin::p99_histogram`]).
    pub p99_histogram: Option<f64>,
    /// The paper's Homa p99 for the bin.
    pub paper_p99: Option<f64>,
    /// The SRPT oracle's p99 for the bin's messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_p99: Option<f64>,
    /// The paper's SRPT oracle p99 for the bin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paper_oracle_p99: Option<f64>,
}

/// The bins the paper's comparison looks at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The smallest messages' bin.
    pub short: Key,
    /// The bin holding the median message size.
    pub median_size: Key,
    /// The bin holding the 99th-percentile message size.
    pub p99_size: Key,
    /// The bin with the highest p99 among bins with at least [`MIN_WORST_SAMPLES`] messages.
    pub worst: Option<Key>,
    /// The paper's highest bin p99 at this workload and load.
    pub paper_worst_p99: Option<f64>,
}

/// Slowdown over all completed measured messages, every size together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overall {
    /// The lowest slowdown seen (1 when a message met the idle-network time).
    pub min: f64,
    /// Mean slowdown.
    pub mean: f64,
    /// Median slowdown (nearest rank).
    pub median: f64,
    /// 99th-percentile slowdown (nearest rank).
    pub p99: f64,
}

/// The endpoint settings that shape the results (from [`SimConfig::endpoint`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProtocolSummary {
    /// Priority levels in use.
    pub priorities: u8,
    /// Most messages a receiver grants to at once.
    pub overcommit: u8,
    /// Most messages of one sender granted to at once, when fewer than `overcommit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_active_per_peer: Option<u8>,
    /// Levels for scheduled packets (`max_sched_prio` + 1).
    pub sched_levels: u8,
    /// Receivers' unscheduled cutoffs: entry i is the largest message sent at level i.
    pub unsched_cutoffs: [u32; 8],
    /// Bytes of each message sent before any grant.
    pub unsched_bytes: u32,
    /// Fixed per-message grant window in bytes; 0 = dynamic.
    pub window: u32,
    /// Cap on a receiver's granted-but-unreceived bytes.
    pub max_incoming: u32,
    /// Largest IP packet, in bytes.
    pub mtu: u32,
    /// Message bytes in a full DATA packet.
    pub payload_per_packet: u32,
    /// Thousandths of link bandwidth reserved for FIFO grants.
    pub grant_fifo_fraction: u32,
    /// Thousandths of pacer picks that go to the oldest message.
    pub pacer_fifo_fraction: u32,
    /// The pacer holds data back while the estimated NIC queue exceeds this many µs.
    pub max_nic_est_backlog_usecs: u32,
    /// The pacer releases data in batches of this many full packets; 0 = one at a time.
    pub pacer_batch_packets: u32,
}

/// The load the run offered, from [`SimConfig::load`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Offered {
    /// Target share of host link capacity, headers and grants included.
    pub load: f64,
    /// Messages (RPCs in `Rpc` mode) each host starts per second, on average.
    pub messages_per_sec_per_host: f64,
    /// Application bytes per second per host, in Gbit/s.
    pub app_gbps_per_host: f64,
    /// Mean bytes a message puts on host links (DATA and GRANT packets with all headers).
    pub wire_bytes_per_message: f64,
    /// Application bytes / network bytes (the paper's load factor, e.g. 0.887 for W3).
    pub app_share: f64,
}

/// What the measurement window saw.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// Share of host uplink capacity used while measured messages were created.
    pub load: f64,
    /// The same in each tenth of the window: level if the network was in a steady state,
    /// rising if it was still filling up (the first messages found it empty).
    pub load_by_tenth: Vec<f64>,
    /// Message bytes delivered per host in that time (requests and responses), in Gbit/s.
    pub goodput_gbps_per_host: f64,
    /// Length of the window in ns: from the first measured message's creation until the
    /// arrivals of measured messages ended.
    pub window_ns: u64,
    /// Measured messages created.
    pub messages: u64,
    /// Measured messages that completed (those with a slowdown).
    pub completed: u64,
    /// Measured messages not complete when the run ended (left out of the slowdowns).
    pub unfinished: u64,
    /// Measured messages whose RPC failed.
    pub failed: u64,
}

/// One switch output port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Port {
    /// What the port connects.
    pub kind: PortKind,
    /// Index of the switch among its kind (rack for a ToR).
    pub switch: usize,
    /// Most bytes waiting in its queues (not counting the packet on the wire), from
    /// the start of measurement to the end of the run.
    pub peak_queued_bytes: u64,
    /// Packets dropped at its byte limit, over the same time.
    pub drops: u64,
}

/// Peak queue lengths and drops, from the start of measurement to the end of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Queues {
    /// Highest peak over all host NIC queues.
    pub host_nic_peak_bytes: u64,
    /// Highest peak over ToR-to-host ports.
    pub tor_down_peak_bytes: u64,
    /// Highest peak over ToR-to-spine ports.
    pub tor_up_peak_bytes: u64,
    /// Highest peak over spine-to-ToR ports.
    pub spine_down_peak_bytes: u64,
    /// Every switch output port, ordered by kind and switch.
    pub ports: Vec<Port>,
}

/// Endpoint counters summed over all hosts, for the whole run (warm-up included).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoreCounters {
    /// DATA packets sent, retransmissions included.
    pub data_packets: u64,
    /// GRANT packets sent.
    pub grant_packets: u64,
    /// Packets of every other type sent (RESEND, BUSY, ACK, ...).
    pub other_control_packets: u64,
    /// DATA packets sent again in answer to RESEND or RPC_UNKNOWN.
    pub retransmitted_packets: u64,
    /// Packets the endpoints dropped on arrival (duplicates, unknown RPCs, ...).
    pub dropped_on_arrival: u64,
    /// Client RPCs that failed with a timeout.
    pub client_timeouts: u64,
    /// Server RPCs abandoned: request never completed, or response never acknowledged.
    pub server_timeouts: u64,
    /// Client RPCs restarted after RPC_UNKNOWN.
    pub restarts: u64,
}

/// How much work the simulation took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Work {
    /// Network actions executed (packet arrivals, links freeing, host timers).
    pub steps: u64,
    /// Packet transmissions over links (one per packet per hop).
    pub packet_hops: u64,
    /// Simulated time at the end of the run, in ns.
    pub sim_end_ns: u64,
}

/// Everything a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The workload's name.
    pub workload: String,
    /// As configured: [`SimConfig::mode`].
    pub mode: Mode,
    /// As configured: [`SimConfig::seed`].
    pub seed: u64,
    /// As configured: [`SimConfig::stop`].
    pub stop: Stop,
    /// As configured: [`SimConfig::warmup`].
    pub warmup: f64,
    /// As configured: [`SimConfig::tail`].
    pub tail: Tail,
    /// As configured: [`SimConfig::topology`].
    pub topology: Topology,
    /// The endpoints' main settings.
    pub protocol: ProtocolSummary,
    /// The load offered.
    pub offered: Offered,
    /// Load, goodput and message counts of the measurement window.
    pub measured: Measured,
    /// Slowdown over all completed measured messages.
    pub slowdown: Overall,
    /// The bins the paper's comparison looks at.
    pub summary: Summary,
    /// Slowdowns per message-size bin, smallest sizes first.
    pub bins: Vec<Bin>,
    /// Peak queue lengths and per-port drops.
    pub queues: Queues,
    /// Packets dropped at full switch buffers.
    pub switch_drops: u64,
    /// The endpoints' counters.
    pub core: CoreCounters,
    /// The simulator's work.
    pub work: Work,
}

/// Sums counters of several endpoints.
pub fn add_metrics(sum: &mut Metrics, m: &Metrics) {
    for i in 0..9 {
        sum.packets_out_by_type[i] += m.packets_out_by_type[i];
    }
    sum.retransmitted_packets += m.retransmitted_packets;
    sum.client_timeouts += m.client_timeouts;
    sum.server_timeouts += m.server_timeouts;
    sum.restarts += m.restarts;
    sum.packets_in += m.packets_in;
    sum.accepted += m.accepted;
}

pub(crate) struct Inputs<'a> {
    pub(crate) cfg: &'a SimConfig,
    pub(crate) stats: Stats,
    /// The oracle's slowdowns for the same messages, if it ran.
    pub(crate) oracle: Option<Stats>,
    pub(crate) per_host_msgs_per_sec: f64,
    pub(crate) wire_bytes_per_message: f64,
    pub(crate) measured_load: f64,
    pub(crate) load_by_tenth: Vec<f64>,
    pub(crate) goodput_gbps: f64,
    pub(crate) window_ns: u64,
    pub(crate) measured: u64,
    pub(crate) unfinished: u64,
    pub(crate) failures: u64,
    pub(crate) metrics: Metrics,
    pub(crate) ports: Vec<Port>,
    pub(crate) host_nic_peak: u64,
    pub(crate) steps: u64,
    pub(crate) packet_hops: u64,
    pub(crate) sim_end: u64,
}

pub(crate) fn build(mut x: Inputs<'_>) -> Report {
    let cfg = x.cfg;
    let w = &cfg.workload;
    let paper_bins =
        if w.is_builtin() { paper::bins(w.name(), cfg.load) } else { None }.unwrap_or_default();
    let paper_at = |upper: u64| paper_bins.iter().find(|b| b.upper == upper);
    let paper_oracle = if w.is_builtin() && x.oracle.is_some() {
        paper::oracle_bins(w.name(), cfg.load)
    } else {
        Vec::new()
    };
    // Per bin: (messages, median, p99) of the oracle.
    let mut oracle: Vec<(u64, Option<f64>, Option<f64>)> = Vec::new();
    if let Some(o) = x.oracle.as_mut() {
        for samples in &mut o.samples {
            samples.sort_unstable_by(f32::total_cmp);
            let some = |q| (!samples.is_empty()).then(|| r4(quantile(samples, q)));
            oracle.push((samples.len() as u64, some(0.5), some(0.99)));
        }
    }
    let mut all: Vec<f32> = Vec::new();
    let mut bins = Vec::new();
    for (i, samples) in x.stats.samples.iter_mut().enumerate() {
        // Before sorting: samples are in completion order.
        let top = samples.iter().take(HISTOGRAM_RANGE_VALUES).copied().fold(f32::NAN, f32::max);
        samples.sort_unstable_by(f32::total_cmp);
        let p99 = quantile(samples, 0.99);
        all.extend_from_slice(samples);
        let n = samples.len();
        let some = |v: f64| (n > 0).then(|| r4(v));
        let upper = x.stats.bounds[i];
        let mean = samples.iter().map(|&s| f64::from(s)).sum::<f64>() / n.max(1) as f64;
        bins.push(Bin {
            upper,
            cum_fraction: r4(x.stats.cum[i]),
            messages: n as u64,
            mean: some(mean),
            median: some(quantile(samples, 0.5)),
            p99: some(p99),
            p99_histogram: some(histogram_p99(p99, f64::from(top))),
            max: some(samples.last().map_or(f64::NAN, |&s| f64::from(s))),
            paper_median: paper_at(upper).map(|b| r4(b.median)),
            paper_p99: paper_at(upper).map(|b| r4(b.p99)),
            oracle_messages: oracle.get(i).map(|o| o.0),
            oracle_median: oracle.get(i).and_then(|o| o.1),
            oracle_p99: oracle.get(i).and_then(|o| o.2),
            paper_oracle_p99: paper_oracle.iter().find(|o| o.upper == upper).map(|o| r4(o.p99)),
        });
    }
    let completed = all.len() as u64;
    let mean = all.iter().map(|&s| f64::from(s)).sum::<f64>() / all.len().max(1) as f64;
    all.sort_unstable_by(f32::total_cmp);
    let key = |i: usize| Key {
        bin_upper: bins[i].upper,
        messages: bins[i].messages,
        median: bins[i].median,
        p99: bins[i].p99,
        p99_histogram: bins[i].p99_histogram,
        paper_p99: bins[i].paper_p99,
        oracle_p99: bins[i].oracle_p99,
        paper_oracle_p99: bins[i].paper_oracle_p99,
    };
    let first = bins.iter().position(|b| b.messages > 0).unwrap_or(0);
    let worst = bins
        .iter()
        .enumerate()
        .filter(|(_, b)| b.messages >= MIN_WORST_SAMPLES)
        .max_by(|a, b| a.1.p99.unwrap_or(0.0).total_cmp(&b.1.p99.unwrap_or(0.0)))
        .map(|(i, _)| key(i));
    let summary = Summary {
        short: key(first),
        median_size: key(x.stats.bin(w.quantile(0.5))),
        p99_size: key(x.stats.bin(w.quantile(0.99))),
        worst,
        paper_worst_p99: paper_bins.iter().map(|b| r4(b.p99)).reduce(f64::max),
    };
    let e = &cfg.endpoint;
    let peak = |kind| {
        x.ports.iter().filter(|p| p.kind == kind).map(|p| p.peak_queued_bytes).max().unwrap_or(0)
    };
    let m = &x.metrics;
    let out = |t: PacketType| m.packets_out_by_type[usize::from(t.code() - 0x10)];
    let total_out: u64 = m.packets_out_by_type.iter().sum();
    let msg_bytes = match cfg.mode {
        Mode::OneWay => w.mean(),
        Mode::Rpc => 2.0 * w.mean(),
    };
    Report {
        workload: w.name().to_string(),
        mode: cfg.mode,
        seed: cfg.seed,
        stop: cfg.stop,
        warmup: cfg.warmup,
        tail: cfg.tail,
        topology: cfg.topology.clone(),
        protocol: ProtocolSummary {
            priorities: e.num_priorities,
            overcommit: e.max_overcommit,
            max_active_per_peer: Some(e.max_active_per_peer).filter(|&n| n < e.max_overcommit),
            sched_levels: e.max_sched_prio() + 1,
            unsched_cutoffs: e.unsched_cutoffs,
            unsched_bytes: e.unsched_bytes,
            window: e.window,
            max_incoming: e.max_incoming,
            mtu: e.mtu,
            payload_per_packet: e.max_payload(),
            grant_fifo_fraction: e.grant_fifo_fraction,
            pacer_fifo_fraction: e.pacer_fifo_fraction,
            max_nic_est_backlog_usecs: e.max_nic_est_backlog_usecs,
            pacer_batch_packets: e.pacer_batch_packets,
        },
        offered: Offered {
            load: cfg.load,
            messages_per_sec_per_host: r4(x.per_host_msgs_per_sec),
            app_gbps_per_host: r4(x.per_host_msgs_per_sec * msg_bytes * 8e-9),
            wire_bytes_per_message: r4(x.wire_bytes_per_message),
            app_share: r4(msg_bytes / x.wire_bytes_per_message),
        },
        measured: Measured {
            load: r4(x.measured_load),
            load_by_tenth: x.load_by_tenth.iter().map(|&l| r4(l)).collect(),
            goodput_gbps_per_host: r4(x.goodput_gbps),
            window_ns: x.window_ns,
            messages: x.measured,
            completed,
            unfinished: x.unfinished,
            failed: x.failures,
        },
        slowdown: Overall {
            min: r4(all.first().map_or(f64::NAN, |&s| f64::from(s))),
            mean: r4(mean),
            median: r4(quantile(&all, 0.5)),
            p99: r4(quantile(&all, 0.99)),
        },
        summary,
        bins,
        queues: Queues {
            host_nic_peak_bytes: x.host_nic_peak,
            tor_down_peak_bytes: peak(PortKind::TorDown),
            tor_up_peak_bytes: peak(PortKind::TorUp),
            spine_down_peak_bytes: peak(PortKind::SpineDown),
            ports: x.ports,
        },
        switch_drops: 0,
        core: CoreCounters {
            data_packets: out(PacketType::Data),
            grant_packets: out(PacketType::Grant),
            other_control_packets: total_out - out(PacketType::Data) - out(PacketType::Grant),
            retransmitted_packets: m.retransmitted_packets,
            dropped_on_arrival: m.packets_in - m.accepted,
            client_timeouts: m.client_timeouts,
            server_timeouts: m.server_timeouts,
            restarts: m.restarts,
        },
        work: Work { steps: x.steps, packet_hops: x.packet_hops, sim_end_ns: x.sim_end },
    }
    .with_drops()
}

impl Report {
    fn with_drops(mut self) -> Report {
        self.switch_drops = self.queues.ports.iter().map(|p| p.drops).sum();
        self
    }

    /// The report as pretty JSON (the same run gives the same bytes).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serialises")
    }

    /// A human-readable summary and per-bin table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        let _ = writeln!(
            s,
            "workload {}  {}  hosts {}  load offered {:.3} measured {:.3}  goodput {:.2} Gbit/s/host",
            self.workload,
            match self.mode {
                Mode::OneWay => "one-way messages",
                Mode::Rpc => "request/response (echo)",
            },
            self.topology.hosts,
            self.offered.load,
            self.measured.load,
            self.measured.goodput_gbps_per_host
        );
        let tenths: Vec<String> =
            self.measured.load_by_tenth.iter().map(|l| format!("{l:.3}")).collect();
        let _ = writeln!(s, "measured load by tenth of the window: {}", tenths.join(" "));
        let per_peer = match self.protocol.max_active_per_peer {
            Some(n) => format!("  per peer {n}"),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "priorities {}  overcommit {}{per_peer}  scheduled levels {}  cutoffs {:?}",
            self.protocol.priorities,
            self.protocol.overcommit,
            self.protocol.sched_levels,
            self.protocol.unsched_cutoffs
        );
        let _ = writeln!(
            s,
            "messages measured {}  completed {}  unfinished {}  failed {}  switch drops {}  retransmitted {}",
            self.measured.messages,
            self.measured.completed,
            self.measured.unfinished,
            self.measured.failed,
            self.switch_drops,
            self.core.retransmitted_packets
        );
        let _ = writeln!(
            s,
            "peak queue bytes: host NIC {}  ToR->host {}  ToR->spine {}  spine->ToR {}",
            self.queues.host_nic_peak_bytes,
            self.queues.tor_down_peak_bytes,
            self.queues.tor_up_peak_bytes,
            self.queues.spine_down_peak_bytes
        );
        let _ = writeln!(
            s,
            "slowdown = a message's completion time / its time alone on an idle network (1 = no delay)"
        );
        let _ = writeln!(
            s,
            "slowdown min {:.3}  mean {:.3}  median {:.3}  p99 {:.3}",
            self.slowdown.min, self.slowdown.mean, self.slowdown.median, self.slowdown.p99
        );
        let _ = writeln!(s);
        let has_oracle = self.bins.iter().any(|b| b.oracle_messages.is_some());
        let _ = write!(
            s,
            "{:>10} {:>7} {:>9} {:>7} {:>7} {:>7} {:>9} {:>9}",
            "size<=", "cum", "messages", "mean", "median", "p99", "paper_med", "paper_p99"
        );
        let oracle_head = "  oracle_med oracle_p99 paper_oracle_p99";
        let _ = writeln!(s, "{}", if has_oracle { oracle_head } else { "" });
        for b in &self.bins {
            let _ = write!(
                s,
                "{:>10} {:>7.4} {:>9} {:>7} {:>7} {:>7} {:>9} {:>9}",
                b.upper,
                b.cum_fraction,
                b.messages,
                f(b.mean),
                f(b.median),
                f(b.p99),
                f(b.paper_median),
                f(b.paper_p99)
            );
            if has_oracle {
                let (median, p99) = (f(b.oracle_median), f(b.oracle_p99));
                let _ = write!(s, "  {median:>10} {p99:>10} {:>16}", f(b.paper_oracle_p99));
            }
            let _ = writeln!(s);
        }
        let _ = writeln!(s);
        let k = |name: &str, k: &Key| {
            let oracle = match (k.oracle_p99, k.paper_oracle_p99) {
                (None, _) => String::new(),
                (Some(o), paper) => format!("  oracle {o:>7.2}  paper's oracle {:>7}", f(paper)),
            };
            format!(
                "{name:<22} bin <= {:>10}  n {:>8}  p99 {:>7}  paper {:>7}{oracle}\n",
                k.bin_upper,
                k.messages,
                f(k.p99),
                f(k.paper_p99)
            )
        };
        s += &k("short messages", &self.summary.short);
        s += &k("median-size messages", &self.summary.median_size);
        s += &k("99th-pct-size messages", &self.summary.p99_size);
        if let Some(worst) = &self.summary.worst {
            s += &k("worst bin", worst);
        }
        if let Some(p) = self.summary.paper_worst_p99 {
            let _ = writeln!(s, "{:<22} paper's worst bin p99 {p:.2}", "");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_p99_is_the_lower_edge_of_its_cell() {
        // 0..=100 in cells of 1: p99 99.5 reads as 99.
        assert_eq!(histogram_p99(99.5, 100.0), 99.0);
        // An outlier of 1,000 makes cells of 10: p99 1 reads as 0.
        assert_eq!(histogram_p99(1.0, 1000.0), 0.0);
        // The largest value itself is in the last cell.
        assert_eq!(histogram_p99(100.0, 100.0), 99.0);
        // A p99 above the range (values after the first 10,000) is capped by the overflow
        // cell's edge.
        assert_eq!(histogram_p99(50.0, 2.0), 2.0);
    }
}
