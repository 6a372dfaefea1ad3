//! `homa sim`: simulate a datacenter running Homa (the real protocol engine on a simulated
//! two-level fabric) and report message slowdowns per size, as the SIGCOMM 2018 paper does.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use homa_sim::{Mode, SimConfig, Stop, Tail, Workload, paper_config, paper_overcommit};
use indicatif::{ProgressBar, ProgressStyle};

use crate::error::Error;

/// Simulate Homa on a datacenter fabric (default: the SIGCOMM 2018 paper's setup).
#[derive(Debug, Parser)]
#[command(after_long_help = "\
Examples:
  homa sim --workload w3 --load 0.8
  homa sim --workload w4 --load 0.5 --messages 100000 --json w4.json --plot w4.svg
  homa sim --workload my_cdf.txt --load 0.7 --hosts 64 --priorities 4 --overcommit 2
  homa sim --workload w2 --load 0.8 --mode rpc --buffer-kb 500
  homa sim --workload w5 --load 0.5 --messages 20000 --oracle

The workload is w1..w5 or a CDF file: lines of `size_bytes cumulative_probability`.
Load is the share of host link capacity in use, counting headers and grants.")]
pub(crate) struct Args {
    /// w1..w5, or the path of a CDF file.
    #[arg(long, default_value = "w3")]
    workload: String,
    /// Offered network load (0..1].
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    #[arg(long, default_value_t = 144)]
    hosts: usize,
    /// Measure this many messages (after the warm-up).
    #[arg(long, conflicts_with = "duration_ms")]
    messages: Option<u64>,
    /// Generate messages for this long (simulated milliseconds) instead of a count.
    #[arg(long)]
    duration_ms: Option<f64>,
    /// Share of the run before measuring starts.
    #[arg(long, default_value_t = 0.1)]
    warmup: f64,
    /// After the measured messages: keep background load on while they finish (loaded), or
    /// stop arrivals and let the network drain as HomaSimulation did (drain).
    #[arg(long, value_enum, default_value_t = TailArg::Loaded)]
    tail: TailArg,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One-way messages (the paper's) or request/response (echo).
    #[arg(long, value_enum, default_value_t = ModeArg::Oneway)]
    mode: ModeArg,
    /// Write the full report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw slowdown vs message size here (SVG).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also run the same messages through an ideal SRPT scheduler and report its median and
    /// p99 per bin beside Homa's and the paper's oracle. It models messages as fluid flows at
    /// the link rate (no packets, headers, grants or latency), greedily matching senders and
    /// receivers in order of bytes left at every arrival and completion; the paper's oracle
    /// matched the same way per packet. Its slowdown is time / (size / link rate), so only
    /// long messages compare with Homa's. One-way mode only.
    #[arg(long)]
    oracle: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,

    // --- Topology ---
    #[arg(long, default_value_t = 16)]
    hosts_per_rack: usize,
    #[arg(long, default_value_t = 4)]
    spines: usize,
    #[arg(long, default_value_t = 10.0)]
    host_gbps: f64,
    #[arg(long, default_value_t = 40.0)]
    fabric_gbps: f64,
    /// Fixed delay per switch, ns.
    #[arg(long, default_value_t = 250)]
    switch_delay_ns: u64,
    /// Propagation delay per link, ns.
    #[arg(long, default_value_t = 0)]
    link_delay_ns: u64,
    /// Host delay from transport to wire, ns.
    #[arg(long, default_value_t = 1000)]
    host_send_delay_ns: u64,
    /// Host delay from wire to transport, ns.
    #[arg(long, default_value_t = 500)]
    host_recv_delay_ns: u64,
    /// Host NICs send in the order packets are handed to them (default: by priority).
    #[arg(long)]
    fifo_nic: bool,
    /// Buffer per switch port in KB (all priorities together); default unlimited. Drops are
    /// recovered by RESEND: pair it with a lower --resend-ticks (the module uses 5).
    #[arg(long)]
    buffer_kb: Option<u64>,

    // --- Protocol ---
    /// Priority levels (1..=8).
    #[arg(long, default_value_t = 8)]
    priorities: u8,
    /// Messages a receiver grants to at once (default: the paper's value for w1..w5, else 4).
    #[arg(long)]
    overcommit: Option<u8>,
    /// Messages of one sender a receiver grants to at once (default: --overcommit, as the
    /// module does today; the paper's simulator granted one message per sender).
    #[arg(long)]
    per_peer: Option<u8>,
    /// Priority levels for scheduled packets (default: the paper's overcommitment for the
    /// workload, at most priorities - 1).
    #[arg(long)]
    sched_levels: Option<u8>,
    /// Unscheduled bytes per message.
    #[arg(long, default_value_t = homa_sim::PAPER_UNSCHED_BYTES)]
    unsched_bytes: u32,
    /// Grant window per message (RTTbytes).
    #[arg(long, default_value_t = homa_sim::PAPER_RTT_BYTES)]
    window: u32,
    /// Silent ticks (1 ms) before a receiver asks for missing data with RESEND (the
    /// module's default is 5); an RPC silent for 4x as long, and at least the module's 100
    /// ticks, fails.
    #[arg(long, default_value_t = homa_sim::SIM_RESEND_TICKS)]
    resend_ticks: u32,
    /// Thousandths of the link rate a receiver grants to its oldest message regardless of
    /// size (the module's anti-starvation FIFO grants; its default is 50). Default: the
    /// paper's Homa, which had none.
    #[arg(long)]
    grant_fifo: Option<u32>,
    /// Thousandths of a sender's packets that go to its oldest message instead of the
    /// shortest (the module's default is 50). Default: the paper's Homa, which had none.
    #[arg(long)]
    pacer_fifo: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TailArg {
    Loaded,
    Drain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Oneway,
    Rpc,
}

fn input(e: impl ToString) -> Error {
    Error::Input(e.to_string())
}

impl Args {
    fn config(&self) -> Result<SimConfig, Error> {
        let workload = Workload::load(&self.workload).map_err(input)?;
        let paper_oc = paper_overcommit(workload.name()).filter(|_| workload.is_builtin());
        let overcommit = self.overcommit.or(paper_oc).unwrap_or(4);
        if !(1..=8).contains(&self.priorities) {
            return Err(input("--priorities must be between 1 and 8"));
        }
        let sched = self
            .sched_levels
            .unwrap_or(paper_oc.unwrap_or(overcommit))
            .min(self.priorities.saturating_sub(1));
        let mut cfg = SimConfig::paper(workload, self.load);
        let t = &mut cfg.topology;
        t.hosts = self.hosts;
        t.hosts_per_rack = self.hosts_per_rack;
        t.spines = self.spines;
        t.host_bps = (self.host_gbps * 1e9) as u64;
        t.fabric_bps = (self.fabric_gbps * 1e9) as u64;
        t.switch_delay = self.switch_delay_ns;
        t.link_delay = self.link_delay_ns;
        t.host_send_delay = self.host_send_delay_ns;
        t.host_recv_delay = self.host_recv_delay_ns;
        t.buffer_bytes = self.buffer_kb.map(|kb| kb * 1000);
        t.nic_priority = !self.fifo_nic;
        let mbps = (t.host_bps / 1_000_000) as u32;
        let mut endpoint =
            paper_config(&cfg.workload, mbps, self.priorities, overcommit.clamp(1, 8), sched);
        endpoint.max_overcommit = overcommit;
        endpoint.max_active_per_peer = self.per_peer.unwrap_or(overcommit);
        endpoint.unsched_bytes = self.unsched_bytes;
        endpoint.window = self.window;
        endpoint = homa_sim::with_resend_ticks(endpoint, self.resend_ticks);
        endpoint.grant_fifo_fraction = self.grant_fifo.unwrap_or(endpoint.grant_fifo_fraction);
        endpoint.pacer_fifo_fraction = self.pacer_fifo.unwrap_or(endpoint.pacer_fifo_fraction);
        if self.unsched_bytes != homa_sim::PAPER_UNSCHED_BYTES {
            let unsched_levels = self.priorities - sched;
            endpoint.unsched_cutoffs =
                homa_sim::cutoffs_for_workload(&cfg.workload, &endpoint, unsched_levels.max(1));
        }
        cfg.endpoint = endpoint;
        cfg.mode = match self.mode {
            ModeArg::Oneway => Mode::OneWay,
            ModeArg::Rpc => Mode::Rpc,
        };
        cfg.stop = match (self.messages, self.duration_ms) {
            (_, Some(ms)) if ms > 0.0 => Stop::Duration((ms * 1e6) as u64),
            (_, Some(_)) => return Err(input("--duration-ms must be positive")),
            (Some(0), _) => return Err(input("--messages must be positive")),
            (Some(n), None) => Stop::Messages(n),
            (None, None) => Stop::Messages(200_000),
        };
        cfg.warmup = self.warmup;
        cfg.tail = match self.tail {
            TailArg::Loaded => Tail::Loaded,
            TailArg::Drain => Tail::Drain,
        };
        cfg.seed = self.seed;
        cfg.oracle = self.oracle;
        Ok(cfg)
    }
}

impl Args {
    /// For a paper workload run otherwise than homa-sim/RESULTS.md's runs (144 hosts, the
    /// message count below, one-way): why its figures may differ from those.
    fn against_results(&self) -> Option<String> {
        let results = match self.workload.as_str() {
            "w1" | "w2" | "w3" => 2_000_000,
            "w4" => 100_000,
            "w5" => 20_000,
            _ => return None,
        };
        let messages = self.messages.unwrap_or(200_000);
        let same = self.hosts == 144
            && messages == results
            && self.duration_ms.is_none()
            && matches!(self.mode, ModeArg::Oneway);
        (!same).then(|| {
            format!(
                "(homa-sim/RESULTS.md's {w} figures come from `homa sim --workload {w} --load {l} \
                 --messages {results}` on 144 hosts; this run differs in hosts, message count or \
                 mode, so its tails may differ: fewer messages per bin make p99 noisier)",
                w = self.workload,
                l = self.load,
            )
        })
    }
}

/// A warning when the window carried clearly less than the offered load: the network started
/// empty, and the bytes of long messages created in the window leave after it, so a short
/// run measures a network still filling up, whatever its number of hosts.
fn not_steady(report: &homa_sim::Report) -> Option<String> {
    let (offered, carried) = (report.offered.load, report.measured.load);
    if carried >= 0.95 * offered {
        return None;
    }
    let tenths = &report.measured.load_by_tenth;
    let trend = match (tenths.first(), tenths.last()) {
        (Some(a), Some(b)) => format!(" (first tenth of the window {a:.3}, last {b:.3})"),
        _ => String::new(),
    };
    Some(format!(
        "(the window carried {carried:.3} of the {offered:.3} offered{trend}: the network had not \
         reached a steady state, which takes simulated time, not messages; run longer with a \
         longer warm-up, e.g. --duration-ms 200 --warmup 0.5, which carries 0.79 on w3 at 0.8)"
    ))
}

/// Peak resident memory of this process (Linux), in MB.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    let cfg = args.config()?;
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        let total = match cfg.stop {
            Stop::Messages(n) => n,
            Stop::Duration(_) => 0,
        };
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} messages done  {msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar
    };
    let started = Instant::now();
    let report = homa_sim::run(&cfg, &mut |p| {
        bar.set_length(p.measured_total);
        bar.set_position(p.measured_done);
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!(
            "sim {:.2} ms, {:.1} M steps/s",
            p.now as f64 / 1e6,
            p.steps as f64 / secs / 1e6
        ));
    })
    .map_err(input)?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    let table = report.table();
    writeln!(out, "{table}").map_err(Error::io("writing standard output"))?;
    if let Some(note) = args.against_results() {
        writeln!(out, "{note}").map_err(Error::io("writing standard output"))?;
    }
    if let Some(note) = not_steady(&report) {
        writeln!(out, "{note}").map_err(Error::io("writing standard output"))?;
    }
    writeln!(
        out,
        "wall {secs:.1} s{}: {:.2} M packet-hops/s, {:.2} M network steps/s; peak memory {}",
        if cfg.oracle { " (the oracle included)" } else { "" },
        report.work.packet_hops as f64 / secs / 1e6,
        report.work.steps as f64 / secs / 1e6,
        peak_rss_mb().map_or("unknown".into(), |mb| format!("{mb:.0} MB"))
    )
    .map_err(Error::io("writing standard output"))?;
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json() + "\n")
            .map_err(Error::io(format!("writing {}", path.display())))?;
    }
    if let Some(path) = &args.plot {
        homa_sim::plot::svg(&report, path)
            .map_err(Error::io(format!("writing {}", path.display())))?;
    }
    Ok(())
}
