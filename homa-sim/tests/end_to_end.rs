//! Small simulations end to end: sane slowdowns, the idle-network reference, long messages,
//! request/response, finite buffers, and determinism.

use homa_sim::{
    Mode, SimConfig, Stop, Tail, Workload, data_wire_bytes, paper_config, run, with_resend_ticks,
};

/// 16 hosts in 2 racks of 8 under 2 spines: every path kind, small enough for debug builds.
fn small(workload: Workload, load: f64, messages: u64) -> SimConfig {
    let mut cfg = SimConfig::paper(workload, load);
    cfg.topology.hosts = 16;
    cfg.topology.hosts_per_rack = 8;
    cfg.topology.spines = 2;
    cfg.topology.fabric_bps = 20_000_000_000;
    cfg.stop = Stop::Messages(messages);
    cfg
}

fn mixed() -> Workload {
    Workload::parse("mixed", "100 0.5\n1000 0.7\n5000 0.8\n50000 0.95\n300000 1\n").unwrap()
}

#[test]
fn slowdowns_are_sane_and_short_messages_fare_better_at_load() {
    let report = run(&small(mixed(), 0.8, 2000), &mut |_| {}).unwrap();
    assert_eq!(report.measured.completed, 2000, "{}", report.table());
    assert!(report.slowdown.min >= 0.999, "{}", report.slowdown.min);
    for b in &report.bins {
        assert!(b.median.unwrap() >= 1.0 && b.p99.unwrap() >= b.median.unwrap());
    }
    let short = report.bins.first().unwrap();
    let long = report.bins.last().unwrap();
    assert!(short.mean.unwrap() < long.mean.unwrap(), "{}", report.table());
    assert!(short.p99.unwrap() < long.p99.unwrap(), "{}", report.table());
    // The offered load is reached on the host links (within the noise of a short run).
    assert!((report.measured.load - 0.8).abs() < 0.15, "{}", report.measured.load);
    // The tenths of the window add up to the whole.
    let tenths = &report.measured.load_by_tenth;
    assert_eq!(tenths.len(), 10);
    let mean = tenths.iter().sum::<f64>() / 10.0;
    assert!((mean - report.measured.load).abs() < 0.002, "{tenths:?} vs {}", report.measured.load);
    assert_eq!(report.core.retransmitted_packets, 0);
}

/// Host NICs run at exactly the link rate, so a host that GRANTs what it receives while it
/// sends keeps its NIC queue short only because the pacer counts the GRANTs too (RESULTS
/// §5.3: without that, this run's host NIC peak was 44,973 B, and grew with the run).
#[test]
fn a_host_that_sends_and_receives_keeps_its_nic_queue_short() {
    let cfg = small(mixed(), 0.8, 2000);
    let report = run(&cfg, &mut |_| {}).unwrap();
    let full_packet = data_wire_bytes(cfg.endpoint.max_payload(), &cfg.endpoint);
    assert!(
        report.queues.host_nic_peak_bytes < 4 * u64::from(full_packet),
        "host NIC peak {} B",
        report.queues.host_nic_peak_bytes
    );
}

#[test]
fn an_idle_network_meets_the_ideal_time() {
    // At 1 % load messages hardly meet: slowdowns sit at 1, so the analytic idle-network
    // time matches what the core and the fabric achieve (grants keep a long message flowing).
    let report = run(&small(mixed(), 0.01, 300), &mut |_| {}).unwrap();
    assert!(report.slowdown.min >= 0.999, "{}", report.slowdown.min);
    assert!(report.slowdown.median < 1.01, "{}", report.table());
    let long = report.bins.last().unwrap();
    assert!(long.median.unwrap() < 1.05, "{}", report.table());
}

#[test]
fn messages_longer_than_the_modules_limit_go_whole() {
    let w = Workload::parse("long", "1000 0.5\n2500000 1\n").unwrap();
    let mut cfg = small(w, 0.3, 40);
    cfg.topology.hosts = 4;
    cfg.topology.hosts_per_rack = 4;
    assert_eq!(cfg.endpoint.max_message_length, 2_500_000);
    let report = run(&cfg, &mut |_| {}).unwrap();
    assert_eq!(report.measured.completed, 40);
    let long = report.bins.last().unwrap();
    assert!(long.messages > 0 && long.median.unwrap() >= 1.0, "{}", report.table());
    // Endpoints at the module's limit cannot carry the workload: a clear error, not a run.
    cfg.endpoint.max_message_length = 1_000_000;
    let err = run(&cfg, &mut |_| {}).unwrap_err();
    assert!(err.contains("max_message_length"), "{err}");
}

#[test]
fn request_response_mode_completes_rpcs() {
    let mut cfg = small(Workload::builtin("w1").unwrap(), 0.5, 1000);
    cfg.mode = Mode::Rpc;
    let report = run(&cfg, &mut |_| {}).unwrap();
    assert_eq!(report.measured.completed, 1000);
    assert!(report.slowdown.min >= 0.999);
    assert!(report.core.data_packets >= 2 * 1000);
}

#[test]
fn finite_buffers_drop_and_messages_still_complete() {
    let mut cfg = small(mixed(), 0.8, 300);
    cfg.topology.buffer_bytes = Some(6_000);
    // Losses need the module's loss recovery (RESEND after 5 silent ticks), and ticks
    // shorter than 1 ms keep the test quick.
    cfg.endpoint = with_resend_ticks(cfg.endpoint, 5);
    cfg.endpoint.tick_usecs = 50;
    let report = run(&cfg, &mut |_| {}).unwrap();
    assert!(report.switch_drops > 0, "{}", report.table());
    assert!(report.core.retransmitted_packets > 0);
    assert_eq!(report.measured.completed + report.measured.unfinished, 300);
    assert!(report.measured.completed >= 290, "{}", report.table());
}

#[test]
fn a_draining_tail_stops_arrivals_with_the_last_measured_message() {
    let loaded = small(mixed(), 0.8, 500);
    let drain = SimConfig { tail: Tail::Drain, warmup: 0.0, ..loaded.clone() };
    let loaded = run(&loaded, &mut |_| {}).unwrap();
    let drain = run(&drain, &mut |_| {}).unwrap();
    assert_eq!(drain.tail, Tail::Drain);
    assert_eq!(drain.measured.completed, 500, "{}", drain.table());
    // Without warm-up or background traffic after the measured messages, every DATA packet
    // belongs to a measured message.
    assert!(drain.core.data_packets < loaded.core.data_packets);
    for b in drain.bins.iter().filter(|b| b.messages > 0) {
        let (p99, hist, max) = (b.p99.unwrap(), b.p99_histogram.unwrap(), b.max.unwrap());
        assert!(hist <= p99 && p99 - hist <= max / 100.0 + 1e-3, "{b:?}");
    }
}

#[test]
fn the_same_seed_gives_the_same_json() {
    let cfg = small(Workload::builtin("w3").unwrap(), 0.7, 800);
    let a = run(&cfg, &mut |_| {}).unwrap().to_json();
    let b = run(&cfg, &mut |_| {}).unwrap().to_json();
    assert_eq!(a, b);
    let other = SimConfig { seed: 2, ..cfg };
    assert_ne!(a, run(&other, &mut |_| {}).unwrap().to_json());
}

#[test]
fn one_priority_level_is_a_valid_configuration() {
    let mut cfg = small(mixed(), 0.5, 300);
    cfg.endpoint = paper_config(&cfg.workload, 10_000, 1, 4, 0);
    let report = run(&cfg, &mut |_| {}).unwrap();
    assert_eq!(report.protocol.priorities, 1);
    assert_eq!(report.measured.completed, 300);
}

#[test]
fn the_srpt_oracle_runs_beside_homa_on_the_same_messages() {
    let cfg = small(mixed(), 0.8, 2000);
    let homa = run(&cfg, &mut |_| {}).unwrap();
    let with_oracle = SimConfig { oracle: true, ..cfg };
    let both = run(&with_oracle, &mut |_| {}).unwrap();
    // Homa's numbers do not change, and runs without the oracle keep their JSON.
    assert!(!homa.to_json().contains("oracle"));
    for (a, b) in homa.bins.iter().zip(&both.bins) {
        assert_eq!((a.messages, a.median, a.p99), (b.messages, b.median, b.p99));
    }
    for b in &both.bins {
        // The same messages: every bin holds as many as Homa's (all completed here).
        assert_eq!(b.oracle_messages, Some(b.messages), "{b:?}");
        let (median, p99) = (b.oracle_median.unwrap(), b.oracle_p99.unwrap());
        assert!(median >= 1.0 && p99 >= median, "{b:?}");
    }
    // The smallest messages go first everywhere: most never wait. The longest wait at 80 %.
    assert_eq!(both.bins[0].oracle_median, Some(1.0), "{}", both.table());
    assert!(both.bins.last().unwrap().oracle_p99.unwrap() > 1.5, "{}", both.table());
    assert!(both.table().contains("oracle_p99"));
    let rpc = SimConfig { mode: Mode::Rpc, ..with_oracle };
    assert!(run(&rpc, &mut |_| {}).unwrap_err().contains("one-way"));
}
