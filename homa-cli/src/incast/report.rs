//! What `homa incast` reports: per contender its headline figures and every run's details
//! (JSON), a table, and each target checked against TCP in the same run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use homa_sim::Workload;
use serde_json::{Value, json};

use super::contender::Kind;
use super::topo::{LEVELS, LONG_PACKET};
use super::{Args, Part, Role, Run, SHORT};
use crate::client::Bins;
use crate::error::Error;
use crate::stats::{Samples, Summary, host_json, us};

/// The run's setup, as the report states it.
pub(super) struct Setup<'a> {
    pub(super) args: &'a Args,
    pub(super) workload: &'a Workload,
    pub(super) namespaces: Vec<String>,
    /// Per workload, the request bytes offered per second, in Mbit/s.
    pub(super) offered_mbps: Vec<(String, f64)>,
}

/// One contender's figures.
struct Figures {
    name: &'static str,
    /// From the incast bursts: the Poisson probe, and the closed-loop one.
    probe: Summary,
    closed_probe: Summary,
    /// Short requests of the mixed workload at its highest load.
    short: Summary,
    /// Barrier rounds.
    barrier: Summary,
    goodput_mbps: f64,
    /// Median slowdown of the largest size bin, mixed workload at its highest load.
    largest_bin_slowdown_p50: Option<f64>,
    drops: u64,
    /// Packets Homa's sockets lost in the hosts, beside the bottleneck's `drops`.
    host_drops: u64,
    retransmissions: u64,
    cpu_s: f64,
    /// Process CPU time per 500 KB burst message (the whole run's, divided).
    cpu_us_per_burst_message: Option<f64>,
    per_class_packets: [u64; LEVELS],
    /// Top-class packets longer than any of a short message's (when counted).
    top_class_long_packets: Option<u64>,
    failed: u64,
    /// Per run, in order: loss recovery and what was left unanswered.
    recovery: Vec<Recovery>,
    runs: Vec<Value>,
}

/// One run's loss recovery, as the report's second table shows it.
struct Recovery {
    workload: String,
    resends: u64,
    busy: u64,
    retransmissions: u64,
    drops: u64,
    host_drops: u64,
    /// Timers run late enough to draw a RESEND by themselves (see `Counters`).
    late_timers: u64,
    failed: u64,
    /// Each unanswered request's state (Homa in this process only).
    unanswered: Vec<String>,
}

pub(super) struct Report {
    json: Value,
    table: String,
    failed: u64,
}

/// The nearest-rank percentile `p` of sorted `xs`.
fn percentile(xs: &[f64], p: f64) -> f64 {
    let rank = (p * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

fn latency(s: &Summary) -> Value {
    json!({ "count": s.count, "p50_us": us(s.p50), "p99_us": us(s.p99), "p999_us": us(s.p999) })
}

impl Figures {
    fn new(kind: Kind, runs: &[Run], setup: &Setup<'_>) -> Figures {
        let link_bps = f64::from(setup.args.link_mbps) * 1e6;
        // The floor of every slowdown: this contender's fastest short request.
        let base = runs
            .iter()
            .flat_map(|r| &r.records)
            .filter(|r| r.size <= SHORT)
            .filter_map(|r| r.result.ok())
            .min()
            .unwrap_or_default();
        let mixed = runs
            .iter()
            .filter(|r| matches!(r.part, Part::Mixed(_)))
            .max_by(|a, b| load(a.part).total_cmp(&load(b.part)));
        let mut f = Figures {
            name: kind.name(),
            probe: Summary::default(),
            closed_probe: Summary::default(),
            short: Summary::default(),
            barrier: Summary::default(),
            goodput_mbps: 0.0,
            largest_bin_slowdown_p50: None,
            drops: 0,
            host_drops: 0,
            retransmissions: 0,
            cpu_s: 0.0,
            cpu_us_per_burst_message: None,
            per_class_packets: [0; LEVELS],
            top_class_long_packets: None,
            failed: 0,
            recovery: Vec::new(),
            runs: Vec::new(),
        };
        for run in runs {
            let secs = setup.args.duration;
            let samples = |role: Role, max: usize| {
                let mut s = Samples::default();
                for r in run.records.iter().filter(|r| r.role == role && r.size <= max) {
                    if let Ok(d) = r.result {
                        s.push(d);
                    }
                }
                s.summary()
            };
            let mut errors: BTreeMap<&str, u64> = BTreeMap::new();
            for r in &run.records {
                if let Err(kind) = r.result {
                    *errors.entry(kind).or_default() += 1;
                }
            }
            for r in &run.rounds {
                if let Err(kind) = r {
                    *errors.entry(kind).or_default() += 1;
                }
            }
            let failed = errors.values().sum::<u64>() + run.unfinished as u64;
            let bytes: usize =
                run.records.iter().filter(|r| r.result.is_ok()).map(|r| r.size).sum();
            let goodput = bytes as f64 * 8.0 / secs / 1e6;
            let drops: u64 = run.queues.iter().map(|q| q.drops).sum();
            let packets: Vec<u64> = run.queues.iter().map(|q| q.packets).collect();
            let mut value = json!({
                "workload": match run.part { Part::Mixed(_) => "mixed", Part::Burst => "burst", Part::Barrier => "barrier" },
                "requests": {
                    "finished": run.records.len(),
                    "failed": failed,
                    "unfinished": run.unfinished,
                },
                "errors": errors,
                "goodput_mbps": goodput,
                "drops": drops,
                "retransmissions": run.retransmissions,
                "resends_sent": run.resends,
                "busy_received": run.busy,
                "unanswered": run.unanswered,
                "host_drops": run.host_drops,
                "late_timers": run.late_timers,
                "peak_backlog_bytes_sampled": run.peak_backlog_bytes,
                "per_class_packets": packets,
                "per_class_drops": run.queues.iter().map(|q| q.drops).collect::<Vec<_>>(),
                "top_class_packets_counted": run.top_class.map(|t| t.all),
                "top_class_long_packets": run.top_class.map(|t| t.long),
                "cpu_s": run.cpu_s,
                "machine_cpu_busy": run.machine_busy,
                "seconds": run.seconds,
            });
            let (bins_workload, role) = match run.part {
                Part::Mixed(l) => {
                    value["load"] = json!(l);
                    value["short"] = latency(&samples(Role::Load, SHORT));
                    (Some(setup.workload.clone()), Role::Load)
                }
                Part::Burst => {
                    let bursts = samples(Role::Burst, usize::MAX);
                    value["probe"] = latency(&samples(Role::Probe, SHORT));
                    value["closed_probe"] = latency(&samples(Role::ClosedProbe, SHORT));
                    value["burst_messages"] = latency(&bursts);
                    let per_message = run.cpu_s * 1e6 / (bursts.count.max(1)) as f64;
                    value["cpu_us_per_burst_message"] = json!(per_message);
                    f.cpu_us_per_burst_message = Some(per_message);
                    (None, Role::Burst)
                }
                Part::Barrier => {
                    let mut rounds = Samples::default();
                    for d in run.rounds.iter().flatten() {
                        rounds.push(*d);
                    }
                    value["rounds"] = latency(&rounds.summary());
                    (Workload::builtin("w5"), Role::Bulk)
                }
            };
            let slowdowns = bins_workload.map(|w| {
                let bins = Bins::new(&w, 10);
                let mut per_bin = vec![Vec::new(); bins.bounds.len()];
                for r in run.records.iter().filter(|r| r.role == role) {
                    if let Ok(d) = r.result {
                        let ideal = base.as_secs_f64() + r.size as f64 * 8.0 / link_bps;
                        per_bin[bins.of(r.size as u64)].push(d.as_secs_f64() / ideal);
                    }
                }
                (bins, per_bin)
            });
            if let Some((bins, mut per_bin)) = slowdowns {
                let rows: Vec<Value> = per_bin
                    .iter_mut()
                    .zip(&bins.bounds)
                    .map(|(xs, &max)| {
                        xs.sort_by(f64::total_cmp);
                        let p = |q| if xs.is_empty() { Value::Null } else { json!(percentile(xs, q)) };
                        json!({ "max_bytes": max, "count": xs.len(), "slowdown_p50": p(0.5), "slowdown_p99": p(0.99) })
                    })
                    .collect();
                if std::ptr::eq(run, mixed.map_or(std::ptr::null(), |m| m as *const Run)) {
                    f.largest_bin_slowdown_p50 =
                        rows.last().and_then(|r| r["slowdown_p50"].as_f64());
                    f.short = samples(Role::Load, SHORT);
                    f.goodput_mbps = goodput;
                }
                value["bins"] = Value::Array(rows);
            }
            match run.part {
                Part::Burst => {
                    f.probe = samples(Role::Probe, SHORT);
                    f.closed_probe = samples(Role::ClosedProbe, SHORT);
                }
                Part::Barrier => {
                    let mut rounds = Samples::default();
                    for d in run.rounds.iter().flatten() {
                        rounds.push(*d);
                    }
                    f.barrier = rounds.summary();
                }
                Part::Mixed(_) => {}
            }
            f.drops += drops;
            f.host_drops += run.host_drops;
            f.retransmissions += run.retransmissions;
            f.cpu_s += run.cpu_s;
            for (sum, q) in f.per_class_packets.iter_mut().zip(&run.queues) {
                *sum += q.packets;
            }
            if let Some(t) = run.top_class {
                *f.top_class_long_packets.get_or_insert(0) += t.long;
            }
            f.failed += failed;
            f.recovery.push(Recovery {
                workload: match run.part {
                    Part::Mixed(l) => format!("mixed {:.0} %", l * 100.0),
                    Part::Burst => "burst".into(),
                    Part::Barrier => "barrier".into(),
                },
                resends: run.resends,
                busy: run.busy,
                retransmissions: run.retransmissions,
                drops,
                host_drops: run.host_drops,
                late_timers: run.late_timers,
                failed,
                unanswered: run.unanswered.clone(),
            });
            f.runs.push(value);
        }
        f
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "probe": latency(&self.probe),
            "closed_probe": latency(&self.closed_probe),
            "short": latency(&self.short),
            "barrier": latency(&self.barrier),
            "goodput_mbps": self.goodput_mbps,
            "largest_bin_slowdown_p50": self.largest_bin_slowdown_p50,
            "drops": self.drops,
            "host_drops": self.host_drops,
            "retransmissions": self.retransmissions,
            "cpu_s": self.cpu_s,
            "cpu_us_per_burst_message": self.cpu_us_per_burst_message,
            "per_class_packets": self.per_class_packets,
            "top_class_long_packets": self.top_class_long_packets,
            "failed": self.failed,
            "runs": self.runs,
        })
    }
}

fn load(part: Part) -> f64 {
    if let Part::Mixed(l) = part { l } else { 0.0 }
}

/// Microseconds for the table, or "-" without samples.
fn cell(s: &Summary, ns: u64) -> String {
    if s.count == 0 { "-".into() } else { format!("{:.0}", ns as f64 / 1e3) }
}

impl Report {
    pub(super) fn new(setup: &Setup<'_>, contenders: Vec<(Kind, Vec<Run>)>) -> Report {
        let figures: Vec<Figures> =
            contenders.iter().map(|(k, runs)| Figures::new(*k, runs, setup)).collect();
        let a = setup.args;
        let top_load = a.loads.iter().copied().fold(0.0, f64::max);
        let json = json!({
            "command": "incast",
            "clients": a.clients,
            "link_mbps": a.link_mbps,
            "buffer_bytes_per_class": u64::from(a.buffer_kb) * 1000,
            "duration_s": a.duration,
            "seed": a.seed,
            "cpu_hogs": a.cpu_hog,
            "own_cpu": a.own_cpu,
            "workload": setup.workload.name(),
            "loads": a.loads,
            "load": top_load,
            "burst": { "bytes": a.burst_bytes, "period_ms": a.burst_period_ms, "probe_rate": a.probe_rate },
            "response_bytes": super::contender::RESPONSE_BYTES,
            "offered_mbps": setup.offered_mbps.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "namespaces": setup.namespaces,
            "contenders": figures.iter().map(Figures::to_json).collect::<Vec<_>>(),
            "targets": targets(&figures).iter().map(|t| json!({"target": t.0, "value": t.1, "met": t.2})).collect::<Vec<_>>(),
            "host": host_json(),
        });
        let mut t = String::new();
        let _ = writeln!(
            t,
            "homa incast: {} clients and a probe -> one server; bottleneck {} Mbit/s, {} KB per class; {} s per workload; seed {}",
            a.clients, a.link_mbps, a.buffer_kb, a.duration, a.seed
        );
        if a.own_cpu {
            let _ = writeln!(t, "the server and the probe host on a CPU of their own");
        }
        let _ = writeln!(
            t,
            "{:<11} {:>23} {:>13} {:>13} {:>13} {:>8} {:>8} {:>7} {:>7} {:>6}",
            "",
            "burst probe p50/99/99.9",
            "closed p50/99",
            "short p50/99",
            "rounds p50/99",
            "goodput",
            "big bin",
            "drops",
            "resent",
            "cpu"
        );
        let _ = writeln!(
            t,
            "{:<11} {:>23} {:>13} {:>13} {:>13} {:>8} {:>8} {:>7} {:>7} {:>6}",
            "",
            "us",
            "us",
            format!("us ({:.0} %)", top_load * 100.0),
            "us",
            "Mbit/s",
            "slowdown",
            "",
            "",
            "s"
        );
        for f in &figures {
            let p = &f.probe;
            let _ = writeln!(
                t,
                "{:<11} {:>23} {:>13} {:>13} {:>13} {:>8.0} {:>8} {:>7} {:>7} {:>6.1}",
                f.name,
                format!("{}/{}/{}", cell(p, p.p50), cell(p, p.p99), cell(p, p.p999)),
                format!(
                    "{}/{}",
                    cell(&f.closed_probe, f.closed_probe.p50),
                    cell(&f.closed_probe, f.closed_probe.p99)
                ),
                format!("{}/{}", cell(&f.short, f.short.p50), cell(&f.short, f.short.p99)),
                format!("{}/{}", cell(&f.barrier, f.barrier.p50), cell(&f.barrier, f.barrier.p99)),
                f.goodput_mbps,
                f.largest_bin_slowdown_p50.map_or("-".into(), |s| format!("{s:.1}")),
                f.drops,
                f.retransmissions,
                f.cpu_s
            );
        }
        let _ = writeln!(
            t,
            "{:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11}",
            "loss recovery",
            "RESENDs",
            "BUSY",
            "resent",
            "dropped",
            "in hosts",
            "unanswered",
            "late timers"
        );
        for f in &figures {
            let homa = |n: u64| if f.name.starts_with("homa") { n.to_string() } else { "-".into() };
            for r in &f.recovery {
                let _ = writeln!(
                    t,
                    "{:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11}",
                    format!("{} {}", f.name, r.workload),
                    homa(r.resends),
                    homa(r.busy),
                    r.retransmissions,
                    r.drops,
                    r.host_drops,
                    r.failed,
                    homa(r.late_timers)
                );
            }
        }
        let unanswered: Vec<_> = figures
            .iter()
            .flat_map(|f| f.recovery.iter().map(move |r| (f.name, r)))
            .flat_map(|(name, r)| r.unanswered.iter().map(move |u| (name, &r.workload, u)))
            .collect();
        if !unanswered.is_empty() {
            let _ = writeln!(t, "unanswered requests, as their client and the server held them:");
            for (name, workload, line) in &unanswered {
                let _ = writeln!(t, "  {name} {workload}: {line}");
            }
        }
        let _ = writeln!(t, "packets per class at the bottleneck (level 0..7):");
        for f in &figures {
            let _ = writeln!(t, "  {:<11} {:?}", f.name, f.per_class_packets);
        }
        let _ = writeln!(t, "targets:");
        for (what, value, met) in targets(&figures) {
            let _ = writeln!(t, "  {} {what}: {value}", if met { "met   " } else { "MISSED" });
        }
        let failed = figures.iter().map(|f| f.failed).sum();
        if failed > 0 {
            let _ = writeln!(t, "failed or unanswered requests: {failed} (see the JSON's runs)");
        }
        Report { json, table: t, failed }
    }

    /// The report as `--json` writes it.
    pub(super) fn json(&self) -> &Value {
        &self.json
    }

    /// Requests that failed or went unanswered, over every run.
    pub(super) fn failed(&self) -> u64 {
        self.failed
    }

    /// The table on stdout, and the JSON to `path` (`-`: on stdout instead).
    pub(super) fn write(&self, path: Option<&Path>) -> Result<(), Error> {
        let mut out = std::io::stdout().lock();
        let text = match path {
            Some(p) if p.as_os_str() == "-" => {
                serde_json::to_string_pretty(&self.json).expect("serializable") + "\n"
            }
            _ => self.table.clone(),
        };
        out.write_all(text.as_bytes()).map_err(Error::io("writing standard output"))?;
        match path {
            Some(p) if p.as_os_str() != "-" => crate::bench::write_json(p, &self.json),
            _ => Ok(()),
        }
    }
}

/// The targets, for each Homa contender against the TCP contenders present:
/// (what, measured, met).
fn targets(figures: &[Figures]) -> Vec<(String, String, bool)> {
    let by = |name: &str| figures.iter().find(|f| f.name == name);
    let mut out = Vec::new();
    let ratio = |a: u64, b: u64| if b == 0 { f64::NAN } else { a as f64 / b as f64 };
    for h in figures.iter().filter(|f| f.name.starts_with("homa")) {
        if let Some(tcp) = by("tcp") {
            let lower = |target: &str, tcp: &Summary, homa: &Summary, least: f64| {
                let target = format!("{} {target} >= {least}x lower than tcp's", h.name);
                (target, ratio(tcp.p99, homa.p99), 1, least)
            };
            let goodput = (
                format!("{} goodput >= 0.9x tcp's", h.name),
                h.goodput_mbps / tcp.goodput_mbps,
                2,
                0.9,
            );
            let checks = [
                lower("burst probe p99", &tcp.probe, &h.probe, 10.0),
                lower("closed-loop probe p99", &tcp.closed_probe, &h.closed_probe, 10.0),
                lower("round p99", &tcp.barrier, &h.barrier, 5.0),
                lower("short p99", &tcp.short, &h.short, 10.0),
                goodput,
            ];
            // A workload not run has nothing to compare.
            for (target, r, digits, least) in checks.into_iter().filter(|c| c.1.is_finite()) {
                out.push((target, format!("{r:.digits$}x"), r >= least));
            }
            if let (Some(a), Some(b)) = (h.cpu_us_per_burst_message, tcp.cpu_us_per_burst_message) {
                out.push((
                    format!("{} CPU per burst message <= 2x tcp's", h.name),
                    format!("{:.2}x ({a:.0} vs {b:.0} us)", a / b),
                    a <= 2.0 * b,
                ));
            }
            if let (Some(a), Some(b)) = (h.largest_bin_slowdown_p50, tcp.largest_bin_slowdown_p50) {
                out.push((
                    format!("{} largest bin's median slowdown <= tcp's", h.name),
                    format!("{a:.2} vs {b:.2}"),
                    a <= b,
                ));
            }
        }
        if let Some(top) = by("tcp-top") {
            let r = ratio(h.probe.p99, top.probe.p99);
            out.push((
                format!("{} burst probe p99 <= tcp-top's", h.name),
                format!("{r:.2}x"),
                r <= 1.0,
            ));
        }
        if let Some(long) = h.top_class_long_packets {
            out.push((
                format!("{} top class carries only short messages", h.name),
                format!("{long} of {} packets over {LONG_PACKET} B", h.per_class_packets[7]),
                long == 0,
            ));
        }
        let worst = h.recovery.iter().max_by_key(|r| {
            r.resends.saturating_sub(2 * (r.retransmissions + r.drops + r.host_drops))
        });
        if let Some(r) = worst {
            let lost = r.retransmissions + r.drops + r.host_drops;
            out.push((
                format!("{} RESENDs <= 2x (packets resent + dropped), every run", h.name),
                format!("{} for {lost} ({})", r.resends, r.workload),
                r.resends <= 2 * lost,
            ));
        }
        out.push((
            format!("{} retransmissions <= 2x the packets dropped", h.name),
            format!(
                "{} for {} drops at the bottleneck, {} in the hosts",
                h.retransmissions, h.drops, h.host_drops
            ),
            h.retransmissions <= 2 * (h.drops + h.host_drops),
        ));
    }
    out
}
