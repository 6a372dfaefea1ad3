//! Running a simulation: Poisson arrivals of messages between random hosts, every host a
//! `homa_core::Endpoint` on the fabric, and the bookkeeping of each message's completion.

use std::collections::HashMap;
use std::sync::Arc;

use homa_core::testnet::{App, LinkId, Network, Rng};
use homa_core::{ApiError, Config, Endpoint, Event, Instant, Payload};

use crate::config::{Mode, SimConfig, Stop, Tail};
use crate::fabric::{Fabric, PortKind, host_addr, host_of};
use crate::message::Msg;
use crate::oracle;
use crate::protocol;
use crate::report::{self, Report, Stats};

/// The Homa port every host serves on.
const SERVER_PORT: u16 = 1;

/// How far a run is, for progress displays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Simulated time, in ns.
    pub now: u64,
    /// Measured messages completed so far.
    pub measured_done: u64,
    /// Measured messages to wait for: the [`Stop::Messages`] count, or for
    /// [`Stop::Duration`] those created so far.
    pub measured_total: u64,
    /// Network actions executed so far.
    pub steps: u64,
}

/// Message bytes without storage of their own: a prefix of one shared buffer of zeros.
struct Zeros {
    all: Arc<Vec<u8>>,
    len: usize,
}

impl AsRef<[u8]> for Zeros {
    fn as_ref(&self) -> &[u8] {
        &self.all[..self.len]
    }
}

/// Payloads of zeros, one per workload size (ascending, as the workload lists them),
/// shared: a message costs a reference count, not an allocation or a lookup.
struct ZeroPayloads {
    by_size: Vec<Arc<Zeros>>,
}

impl ZeroPayloads {
    fn new(sizes: &[u64]) -> ZeroPayloads {
        // One buffer as long as the longest message, allocated zeroed, so pages never
        // written cost no memory.
        let all = Arc::new(vec![0; sizes.last().copied().unwrap_or(0) as usize]);
        let by_size = sizes
            .iter()
            .map(|&len| Arc::new(Zeros { all: all.clone(), len: len as usize }))
            .collect();
        ZeroPayloads { by_size }
    }

    /// Zeros as long as the workload's size `size_index`.
    fn get(&self, size_index: usize) -> Payload {
        Payload::shared(self.by_size[size_index].clone())
    }

    /// Zeros as long as a message of the workload (a request, answered in kind).
    fn of_len(&self, len: u64) -> Option<Payload> {
        let i = self.by_size.binary_search_by_key(&len, |z| z.len as u64).ok()?;
        Some(self.get(i))
    }
}

/// Work for a host other than the one whose event is being handled: forget a one-way
/// message's client RPC.
#[derive(Debug, Clone, Copy)]
struct Abort {
    host: u32,
    id: u64,
}

/// The application at every host: it starts messages, answers or discards requests and
/// records completions.
struct Driver {
    mode: Mode,
    client_port: u16,
    msgs: Vec<Option<Msg>>,
    free: Vec<u32>,
    /// One-way mode: the message behind each (client host, client RPC id).
    by_rpc: HashMap<(u32, u64), u32, foldhash::fast::FixedState>,
    pending: Vec<Abort>,
    zeros: ZeroPayloads,
    stats: Stats,
    /// Per size index: idle-network time within a rack and across the spine, ns.
    ideal_local: Vec<f64>,
    ideal_remote: Vec<f64>,
    hosts_per_rack: u32,
    measured_done: u64,
    measured_live: u64,
    failures: u64,
    send_errors: u64,
    delivered_bytes: u64,
}

impl Driver {
    fn insert(&mut self, m: Msg) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.msgs[i as usize] = Some(m);
                i
            }
            None => {
                self.msgs.push(Some(m));
                (self.msgs.len() - 1) as u32
            }
        }
    }

    /// Notes the outcome of handing message `i` to host `src`'s endpoint.
    fn sent(&mut self, i: u32, src: usize, result: Result<u64, ApiError>) {
        match result {
            Ok(id) if self.mode == Mode::OneWay => {
                self.by_rpc.insert((src as u32, id), i);
            }
            Ok(_) => {}
            Err(_) => {
                self.send_errors += 1;
                self.finish(i, None);
            }
        }
    }

    /// Message `i` (`len` bytes) arrived.
    fn delivered(&mut self, now: u64, i: u32, len: u64) {
        self.delivered_bytes += len;
        self.finish(i, Some(now));
    }

    fn finish(&mut self, i: u32, done: Option<u64>) {
        let Some(m) = self.msgs[i as usize].take() else { return };
        self.free.push(i);
        if !m.measured {
            return;
        }
        self.measured_live -= 1;
        let Some(done) = done else {
            self.failures += 1;
            return;
        };
        self.measured_done += 1;
        let same_rack = m.src / self.hosts_per_rack == m.dst / self.hosts_per_rack;
        let ideal = if same_rack { &self.ideal_local } else { &self.ideal_remote };
        let mut best = ideal[m.size_index as usize];
        if self.mode == Mode::Rpc {
            best *= 2.0;
        }
        self.stats.record(m.size_index as usize, (done - m.created) as f64 / best);
    }
}

fn send(
    now: Instant,
    ep: &mut Endpoint,
    port: u16,
    dst: usize,
    payload: Payload,
    i: u32,
) -> Result<u64, ApiError> {
    ep.send_request(now, port, host_addr(dst), SERVER_PORT, payload, u64::from(i))
}

impl App for Driver {
    fn on_event(&mut self, at: Instant, host: usize, ep: &mut Endpoint, event: Event) {
        let now = at.as_nanos();
        match event {
            Event::RequestReceived { rpc, message, .. } => {
                let len = message.len() as u64;
                drop(message);
                match self.mode {
                    Mode::Rpc => {
                        self.delivered_bytes += len; // requests count as delivered too
                        let sent = self.zeros.of_len(len).map(|z| ep.send_response(at, rpc, z));
                        if !matches!(sent, Some(Ok(()))) {
                            self.send_errors += 1;
                        }
                    }
                    Mode::OneWay => {
                        let _ = ep.discard(rpc);
                        let Some(client) = host_of(rpc.client) else { return };
                        let id = rpc.id ^ 1;
                        let Some(i) = self.by_rpc.remove(&(client as u32, id)) else { return };
                        self.pending.push(Abort { host: client as u32, id });
                        self.delivered(now, i, len);
                    }
                }
            }
            Event::ResponseReceived { cookie, message, .. } => {
                self.delivered(now, cookie as u32, message.len() as u64);
            }
            Event::RpcFailed { cookie, .. } => {
                let _ = host;
                self.finish(cookie as u32, None);
            }
        }
    }
}

/// Runs a simulation. `progress` is called now and then with how far it is.
pub fn run(cfg: &SimConfig, progress: &mut dyn FnMut(&Progress)) -> Result<Report, String> {
    validate(cfg)?;
    let mut sim = Sim::build(cfg)?;
    let measured = sim.generate(progress);
    sim.finish_stragglers(measured.window_ns);
    Ok(sim.report(measured))
}

fn validate(cfg: &SimConfig) -> Result<(), String> {
    cfg.topology.validate()?;
    if !(cfg.load > 0.0 && cfg.load <= 1.0) {
        return Err(format!("load {} must be in (0, 1]", cfg.load));
    }
    if !(0.0..1.0).contains(&cfg.warmup) {
        return Err(format!("warm-up share {} must be in [0, 1)", cfg.warmup));
    }
    cfg.endpoint.validate().map_err(|e| e.to_string())?;
    if cfg.oracle && cfg.mode != Mode::OneWay {
        return Err("the SRPT oracle models one-way messages only".into());
    }
    let longest = cfg.workload.longest();
    let max = cfg.endpoint.max_message_length;
    if longest > u64::from(max) {
        return Err(format!(
            "the workload's longest message ({longest} bytes) exceeds the endpoints' \
             max_message_length ({max})"
        ));
    }
    Ok(())
}

/// A simulation being run: the fabric with an endpoint at every host, and the application.
struct Sim<'a> {
    cfg: &'a SimConfig,
    net: Network,
    driver: Driver,
    host_up: Vec<LinkId>,
    switch_ports: Vec<(LinkId, PortKind, usize)>,
    /// Wire bytes each message puts on host links, and the messages per ns per host that
    /// make the offered load.
    per_msg_wire: f64,
    per_host_rate: f64,
    bounds: Vec<u64>,
}

/// What the measurement window saw.
struct Measured {
    window_ns: u64,
    /// Wire bytes sent on the host uplinks and message bytes delivered in the window.
    uplink_bytes: u64,
    delivered: u64,
    /// Messages created in the window.
    created: u64,
    /// Packet hops before the window (the links' counters restart with it).
    hops_before: u64,
    /// (time, uplink wire bytes since the window opened), about 100 times per window: how
    /// steady the carried load was while measuring.
    load_samples: Vec<(u64, u64)>,
    /// Every message created, in order, if the oracle is to replay them.
    arrivals: Vec<Msg>,
}

impl<'a> Sim<'a> {
    fn build(cfg: &'a SimConfig) -> Result<Sim<'a>, String> {
        let (topo, w) = (&cfg.topology, &cfg.workload);
        let hosts = topo.hosts;
        let endpoints = (0..hosts)
            .map(|i| {
                let seed = cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i as u64);
                Endpoint::new(Config { seed, ..cfg.endpoint.clone() }).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let Fabric { mut net, host_up, switch_ports, .. } =
            Fabric::build(topo, endpoints, cfg.seed ^ 0x5EED_F00D);

        // Offered load -> message rate, from the bytes each message puts on host links.
        let per_msg_wire = protocol::wire_bytes_per_message(w, &cfg.endpoint, cfg.mode);
        let per_host_rate = cfg.load * link_bytes_per_ns(cfg) / per_msg_wire;

        // Idle-network time of every size, within a rack and across the spine.
        let ideal = |src: usize, dst: usize| -> Vec<f64> {
            w.sizes().iter().map(|&s| topo.idle_time(src, dst, &paced(s, &cfg.endpoint))).collect()
        };
        let ideal_local = ideal(0, 1);
        let ideal_remote =
            if topo.racks() > 1 { ideal(0, topo.hosts_per_rack) } else { ideal_local.clone() };

        let bounds = report::bin_bounds(cfg);
        let mut driver = Driver {
            mode: cfg.mode,
            client_port: 0,
            msgs: Vec::new(),
            free: Vec::new(),
            by_rpc: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(cfg.seed)),
            pending: Vec::new(),
            zeros: ZeroPayloads::new(w.sizes()),
            stats: Stats::new(w, &bounds),
            ideal_local,
            ideal_remote,
            hosts_per_rack: topo.hosts_per_rack as u32,
            measured_done: 0,
            measured_live: 0,
            failures: 0,
            send_errors: 0,
            delivered_bytes: 0,
        };
        for h in 0..hosts {
            let port = net.with_endpoint(h, &mut driver, |_, ep| {
                ep.bind(SERVER_PORT).map_err(|e| e.to_string())?;
                ep.bind_ephemeral().map_err(|e| e.to_string())
            })?;
            driver.client_port = port; // the same on every fresh endpoint
        }
        share_cutoffs(&mut net, &mut driver, hosts, &cfg.endpoint);
        Ok(Sim { cfg, net, driver, host_up, switch_ports, per_msg_wire, per_host_rate, bounds })
    }

    /// Creates messages at Poisson arrivals until the measured ones are all created and,
    /// with a loaded tail, while they finish (for at most as long again).
    fn generate(&mut self, progress: &mut dyn FnMut(&Progress)) -> Measured {
        let cfg = self.cfg;
        let hosts = cfg.topology.hosts;
        let rate = self.per_host_rate * hosts as f64;
        // Which messages are measured: by count or by creation time.
        let (warm_msgs, measured_msgs) = match cfg.stop {
            Stop::Messages(n) => ((n as f64 * cfg.warmup / (1.0 - cfg.warmup)).round() as u64, n),
            Stop::Duration(_) => (0, 0),
        };
        let in_window = |generated: u64, t: u64| match cfg.stop {
            Stop::Messages(_) => generated >= warm_msgs && generated < warm_msgs + measured_msgs,
            Stop::Duration(d) => t >= (d as f64 * cfg.warmup) as u64 && t < d,
        };
        let generating_measured = |generated: u64, t: u64| match cfg.stop {
            Stop::Messages(_) => generated < warm_msgs + measured_msgs,
            Stop::Duration(d) => t < d,
        };
        let sample_every = match cfg.stop {
            Stop::Messages(n) => n as f64 / rate,
            Stop::Duration(d) => d as f64 * (1.0 - cfg.warmup),
        } / 100.0;
        let mut rng = Rng::new(cfg.seed);
        let exp = |rng: &mut Rng| -(-rng.next_f64()).ln_1p() / rate;
        let mut next = exp(&mut rng);
        let mut generated = 0u64;
        let mut window_start: Option<u64> = None;
        let mut window_closed = false;
        let mut delivered_at_start = 0;
        let mut last_progress = 0u64;
        let mut loaded_until = u64::MAX;
        let mut m = Measured {
            window_ns: 1,
            uplink_bytes: 0,
            delivered: 0,
            created: 0,
            hops_before: 0,
            load_samples: Vec::new(),
            arrivals: Vec::new(),
        };
        let (net, driver) = (&mut self.net, &mut self.driver);
        loop {
            let t = next as u64;
            // Move the network up to the next arrival, doing the hosts' deferred work as it
            // comes.
            while net.next_time().is_some_and(|nt| nt <= t) {
                net.step(driver);
                flush(net, driver);
                if net.steps - last_progress >= 1 << 16 {
                    last_progress = net.steps;
                    progress(&Progress {
                        now: net.now(),
                        measured_done: driver.measured_done,
                        measured_total: m.created.max(measured_msgs),
                        steps: net.steps,
                    });
                }
            }
            net.run_until(t, driver);
            if !window_closed
                && let Some(&(last, _)) = m.load_samples.last()
                && (t - last) as f64 >= sample_every
            {
                m.load_samples.push((t, uplink_wire_bytes(net, &self.host_up)));
            }
            if !generating_measured(generated, t) {
                if !window_closed {
                    window_closed = true;
                    let start = window_start.unwrap_or(t);
                    m.window_ns = (t - start).max(1);
                    m.uplink_bytes = uplink_wire_bytes(net, &self.host_up);
                    m.delivered = driver.delivered_bytes - delivered_at_start;
                    m.load_samples.push((t, m.uplink_bytes));
                    loaded_until = t + (t - start);
                }
                let stop_arrivals = match cfg.tail {
                    Tail::Loaded => t > loaded_until,
                    Tail::Drain => true,
                };
                if driver.measured_live == 0 || stop_arrivals {
                    break;
                }
            }
            // A new message.
            let src = rng.below(hosts as u64) as usize;
            let mut dst = rng.below(hosts as u64 - 1) as usize;
            if dst >= src {
                dst += 1;
            }
            let size_index = cfg.workload.sample_index(rng.next_f64());
            let measured = in_window(generated, t);
            if measured && window_start.is_none() {
                // Counters and peak queues start with the measurement.
                window_start = Some(t);
                m.hops_before = net.links().iter().map(|l| l.stats.packets).sum();
                for l in 0..net.links().len() {
                    net.link_mut(l).stats = Default::default();
                }
                delivered_at_start = driver.delivered_bytes;
                m.load_samples.push((t, 0));
            }
            if measured {
                m.created += 1;
                driver.measured_live += 1;
            }
            generated += 1;
            let msg = Msg {
                src: src as u32,
                dst: dst as u32,
                size_index: size_index as u32,
                created: t,
                measured,
            };
            if cfg.oracle {
                m.arrivals.push(msg);
            }
            let i = driver.insert(msg);
            let (payload, port) = (driver.zeros.get(size_index), driver.client_port);
            let result =
                net.with_endpoint(src, driver, |now, ep| send(now, ep, port, dst, payload, i));
            driver.sent(i, src, result);
            flush(net, driver);
            next += exp(&mut rng);
        }
        m
    }

    /// Stragglers finish on a network that now only drains: after a loaded tail, within
    /// another window; a draining tail waits for all of them, as HomaSimulation did (RPC
    /// timeouts end any that cannot finish).
    fn finish_stragglers(&mut self, window_ns: u64) {
        let limit = match self.cfg.tail {
            Tail::Loaded => self.net.now() + window_ns,
            Tail::Drain => u64::MAX,
        };
        while self.driver.measured_live > 0 && self.net.next_time().is_some_and(|t| t <= limit) {
            self.net.step(&mut self.driver);
            flush(&mut self.net, &mut self.driver);
        }
    }

    fn report(self, m: Measured) -> Report {
        let Sim { cfg, net, driver, host_up, switch_ports, .. } = self;
        let (hosts, w) = (cfg.topology.hosts, &cfg.workload);
        let mut metrics = homa_core::Metrics::default();
        for h in 0..hosts {
            report::add_metrics(&mut metrics, &net.endpoint(h).metrics());
        }
        let ports = switch_ports
            .iter()
            .map(|&(l, kind, switch)| report::Port {
                kind,
                switch,
                peak_queued_bytes: net.link(l).stats.peak_queued,
                drops: net.link(l).stats.overflow_drops,
            })
            .collect();
        let oracle = cfg.oracle.then(|| {
            let mut stats = Stats::new(w, &self.bounds);
            oracle::run(&m.arrivals, w.sizes(), hosts, cfg.topology.host_bps, &mut stats);
            stats
        });
        let host_nic_peak =
            host_up.iter().map(|&l| net.link(l).stats.peak_queued).max().unwrap_or(0);
        let packet_hops = m.hops_before + net.links().iter().map(|l| l.stats.packets).sum::<u64>();
        let link_capacity = link_bytes_per_ns(cfg) * m.window_ns as f64 * hosts as f64;
        report::build(report::Inputs {
            cfg,
            stats: driver.stats,
            oracle,
            per_host_msgs_per_sec: self.per_host_rate * 1e9,
            wire_bytes_per_message: self.per_msg_wire,
            measured_load: m.uplink_bytes as f64 / link_capacity,
            load_by_tenth: load_by_tenth(&m.load_samples, link_bytes_per_ns(cfg) * hosts as f64),
            goodput_gbps: m.delivered as f64 * 8.0 / m.window_ns as f64 / hosts as f64,
            window_ns: m.window_ns,
            measured: m.created,
            unfinished: driver.measured_live,
            failures: driver.failures + driver.send_errors,
            metrics,
            ports,
            host_nic_peak,
            steps: net.steps,
            packet_hops,
            sim_end: net.now(),
        })
    }
}

/// A host link's capacity in bytes per ns.
fn link_bytes_per_ns(cfg: &SimConfig) -> f64 {
    cfg.topology.host_bps as f64 / 8e9
}

/// Wire bytes (headers and framing included) sent on the host uplinks since their counters
/// were last reset.
fn uplink_wire_bytes(net: &Network, host_up: &[LinkId]) -> u64 {
    host_up
        .iter()
        .map(|&l| {
            let link = net.link(l);
            link.stats.bytes + link.stats.packets * u64::from(link.overhead)
        })
        .sum()
}

/// The carried load in each tenth of the window, from (time, cumulative bytes) samples that
/// start at its opening and end at its close; `capacity` is bytes per ns of all uplinks.
fn load_by_tenth(samples: &[(u64, u64)], capacity: f64) -> Vec<f64> {
    let (Some(&(start, _)), Some(&(end, _))) = (samples.first(), samples.last()) else {
        return Vec::new();
    };
    if end <= start {
        return Vec::new();
    }
    // Cumulative bytes at time t, interpolated between the samples around it.
    let bytes_at = |t: f64| {
        let i = samples.partition_point(|&(s, _)| (s as f64) < t).clamp(1, samples.len() - 1);
        let ((t0, b0), (t1, b1)) = (samples[i - 1], samples[i]);
        let f = if t1 > t0 { (t - t0 as f64) / (t1 - t0) as f64 } else { 1.0 };
        b0 as f64 + f.clamp(0.0, 1.0) * (b1 as f64 - b0 as f64)
    };
    let tenth = (end - start) as f64 / 10.0;
    (0..10)
        .map(|k| {
            let from = start as f64 + k as f64 * tenth;
            (bytes_at(from + tenth) - bytes_at(from)) / (capacity * tenth)
        })
        .collect()
}

/// Tells every host every other host's unscheduled cutoffs, as a CUTOFFS packet from each
/// would. A sender uses one level for all unscheduled packets to a receiver it has not heard
/// CUTOFFS from (module behaviour); in a long-running cluster every pair has, so the
/// simulation starts there.
fn share_cutoffs(net: &mut Network, driver: &mut Driver, hosts: usize, config: &Config) {
    use homa_core::wire::{self, PacketType, header};
    let repr = wire::Repr {
        // Sender id 1: the receiver takes it as one of its client RPCs, on its client port.
        header: header::Repr::new(PacketType::Cutoffs, SERVER_PORT, driver.client_port, 1),
        body: wire::Body::Cutoffs(wire::cutoffs::Repr {
            unsched_cutoffs: config.advertised_cutoffs(),
            cutoff_version: config.cutoff_version,
        }),
    };
    let mut buf = [0u8; 128];
    let len = repr.emit(&mut buf).expect("a CUTOFFS packet fits");
    for to in 0..hosts {
        net.with_endpoint(to, driver, |now, ep| {
            for from in (0..hosts).filter(|&f| f != to) {
                let _ = ep.handle_packet(now, host_addr(from), &buf[..len]);
            }
        });
    }
}

/// A message's packets as the sender releases them on an idle host: (bytes on the wire,
/// release time in ns). The pacer lets a packet go when its estimate of the NIC queue allows
/// (`max_nic_est_backlog_usecs`, counting data at `link_mbps`); packets of a message with at
/// most `defer_min_bytes` left go at once.
fn paced(len: u64, config: &Config) -> Vec<(u32, f64)> {
    let backlog = f64::from(config.max_nic_est_backlog_usecs) * 1e3;
    let (mut idle, mut emitted, mut left) = (0.0f64, 0.0f64, len);
    protocol::data_packets(len, config)
        .map(|payload| {
            let wire = protocol::data_wire_bytes(payload, config);
            let ready = if left > u64::from(config.defer_min_bytes) { idle - backlog } else { 0.0 };
            emitted = emitted.max(ready);
            idle = idle.max(emitted) + f64::from(wire) * 8e3 / f64::from(config.link_mbps);
            left -= u64::from(payload);
            (wire, emitted)
        })
        .collect()
}

/// Does the hosts' deferred work: one-way aborts.
fn flush(net: &mut Network, driver: &mut Driver) {
    while let Some(Abort { host, id }) = driver.pending.pop() {
        net.with_endpoint(host as usize, driver, |_, ep| {
            let _ = ep.abort(id);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::load_by_tenth;

    #[test]
    fn load_by_tenth_follows_the_samples() {
        // 1 byte per ns for the first half, 3 for the second, sampled unevenly.
        let samples = [(100, 0), (130, 30), (600, 500), (700, 800), (1100, 2000)];
        let tenths = load_by_tenth(&samples, 4.0);
        let want = [0.25, 0.25, 0.25, 0.25, 0.25, 0.75, 0.75, 0.75, 0.75, 0.75];
        assert_eq!(tenths.len(), 10);
        for (got, want) in tenths.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{tenths:?}");
        }
        assert!(load_by_tenth(&[(5, 0)], 1.0).is_empty());
    }
}
