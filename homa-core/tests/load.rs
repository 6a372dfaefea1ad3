//! Many RPCs at once, and many senders at one receiver.

mod common;

use std::collections::HashMap;

use common::*;
use homa_core::Config;
use homa_core::testnet::{NodeId, Rng};

#[test]
fn a_thousand_concurrent_rpcs_complete_intact() {
    // Five hosts; every one serves and every one calls the others.
    let Star { mut net, hosts, .. } = star(5, Config::default(), 10, 7);
    let mut app = Echo::default();
    let mut rng = Rng::new(99);
    let mut ports = HashMap::new();
    for &h in &hosts[1..] {
        net.with_endpoint(h, &mut app, |_, ep| ep.bind(SERVER_PORT).unwrap());
    }
    for &h in &hosts {
        let port = net.with_endpoint(h, &mut app, |_, ep| ep.bind_ephemeral().unwrap());
        ports.insert(h, port);
    }
    let mut sent: HashMap<(NodeId, u64), Vec<u8>> = HashMap::new();
    for i in 0..1000u64 {
        let client = hosts[rng.below(5) as usize];
        let server = loop {
            let s = hosts[rng.below(5) as usize];
            if s != client {
                break s;
            }
        };
        // Mostly small, some large: sizes from 1 byte to 200 KB.
        let len =
            if rng.chance(0.1) { 1 + rng.below(200_000) } else { 1 + rng.below(3000) } as usize;
        let msg = pattern(len, i);
        let id = call(&mut net, &mut app, client, ports[&client], server, msg.clone());
        sent.insert((client, id), msg);
    }
    settle(&mut net, &mut app, 60_000);
    assert_eq!(app.failures, vec![]);
    assert_eq!(app.duplicates, 0);
    assert_eq!(app.responses.len(), 1000);
    for (key, msg) in &sent {
        assert!(app.responses.get(key) == Some(msg), "RPC {key:?} payload differs");
    }
    for &h in &hosts {
        assert_eq!(net.endpoint(h).rpc_count(), 0, "host {h} kept RPC state");
    }
}

#[test]
fn incast_stays_within_max_incoming() {
    const SENDERS: usize = 32;
    const LEN: usize = 500_000;
    let config = Config::default();
    let Star { mut net, hosts, ports, links } = star(SENDERS + 1, config.clone(), 10, 3);
    let mut echo = Echo::default();
    let receiver = hosts[0];
    let bottleneck = links[0].1;
    let mut ids = vec![];
    for (i, &h) in hosts.iter().enumerate().skip(1) {
        ids.push((h, call(&mut net, &mut echo, h, ports[i], receiver, pattern(LEN, i as u64))));
    }
    // Step by step, watching the receiver while the requests arrive (the responses then go
    // out over 32 different links).
    let mut peak_incoming = 0;
    while echo.requests_served < SENDERS as u64 {
        assert!(net.next_time().is_some(), "stalled before all requests arrived");
        net.step(&mut echo);
        peak_incoming = peak_incoming.max(net.endpoint(receiver).metrics().incoming);
    }
    settle(&mut net, &mut echo, 60_000);
    for (i, (h, id)) in ids.iter().enumerate() {
        assert!(echo.responses.get(&(*h, *id)) == Some(&pattern(LEN, i as u64 + 1)));
    }
    let m = net.endpoint(receiver).metrics();
    let unscheduled = SENDERS as u64 * u64::from(config.unsched_bytes);
    let bound = u64::from(config.incoming_cap()) + unscheduled;
    let peak_queue = net.link(bottleneck).stats.peak_queued;
    // Each packet adds its 56-byte header to 1424 payload bytes on the queue.
    let queue_bound =
        (bound + u64::from(config.fifo_grant_increment)) * 1480 / 1424 + SENDERS as u64 * 1480;
    println!(
        "incast: peak incoming {peak_incoming} (metric {}) bound {bound}; peak bottleneck queue {peak_queue} bytes, bound {queue_bound}; incoming cap {}",
        m.peak_incoming,
        config.incoming_cap()
    );
    assert!(m.peak_incoming <= bound, "granted-but-unreceived {} > {bound}", m.peak_incoming);
    assert!(peak_queue <= queue_bound, "bottleneck queue {peak_queue} > {queue_bound}");
    assert_eq!(net.link(bottleneck).stats.overflow_drops, 0);
}
