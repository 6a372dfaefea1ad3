//! Loss, reordering, duplication, dead peers and restarted servers.

mod common;

use std::collections::HashMap;

use common::*;
use homa_core::testnet::{App, Faults, Network, NodeId, Rng};
use homa_core::{Config, Endpoint, Event, FailReason, Instant};

/// `count` RPCs of mixed sizes through a network that loses `loss` of all packets end to end
/// (the faults sit on each host's downlink, which every path crosses once), and duplicates
/// and reorders some. Every RPC must complete exactly once with its payload, and no state may
/// remain afterwards.
pub(crate) fn survive(loss: f64, count: u64, seed: u64) {
    let Star { mut net, hosts, ports, links } = star(4, Config::default(), 10, seed);
    let faults =
        Faults { loss, duplicate: 0.02, reorder: 0.05, reorder_delay: 20_000, corrupt: 0.0 };
    for &(_, down) in &links {
        net.link_mut(down).faults = faults;
    }
    let mut app = Echo::default();
    let mut rng = Rng::new(seed);
    let mut sent: HashMap<(NodeId, u64), Vec<u8>> = HashMap::new();
    for i in 0..count {
        let c = 1 + rng.below(3) as usize;
        let len = match rng.below(4) {
            0 => 1 + rng.below(100),
            1 => 1 + rng.below(5000),
            2 => 1 + rng.below(60_000),
            _ => 1 + rng.below(300_000),
        } as usize;
        let msg = pattern(len, i);
        let id = call(&mut net, &mut app, hosts[c], ports[c], hosts[0], msg.clone());
        sent.insert((hosts[c], id), msg);
    }
    settle(&mut net, &mut app, 600_000);
    assert_eq!(app.failures, vec![], "loss {loss}: RPCs failed");
    assert_eq!(app.duplicates, 0, "loss {loss}: a response was delivered twice");
    assert_eq!(app.responses.len(), sent.len(), "loss {loss}: responses missing");
    for (key, msg) in &sent {
        assert!(app.responses.get(key) == Some(msg), "loss {loss}: RPC {key:?} payload differs");
    }
    for &h in &hosts {
        assert_eq!(net.endpoint(h).rpc_count(), 0, "loss {loss}: host {h} kept RPC state");
    }
}

#[test]
fn one_percent_loss() {
    survive(0.01, 200, 1);
}

#[test]
fn ten_percent_loss() {
    survive(0.10, 100, 2);
}

#[test]
fn thirty_percent_loss() {
    survive(0.30, 60, 3);
}

#[test]
fn a_dead_peer_times_out_and_leaves_nothing() {
    let config = Config::default();
    let Star { mut net, hosts, ports, links } = star(2, config.clone(), 10, 5);
    // The server is gone: everything sent to it vanishes.
    net.link_mut(links[0].1).faults.loss = 1.0;
    let mut app = Echo::default();
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(5000, 1));
    let start = net.now();
    settle(&mut net, &mut app, 1000);
    assert_eq!(app.failures, vec![(hosts[1], id, FailReason::Timeout)]);
    let tick = config.tick();
    let elapsed = net.now() - start;
    let timeout = u64::from(config.timeout_ticks) * tick;
    // Silence starts within the first tick; the abort comes at the timeout tick after it.
    assert!(elapsed >= timeout && elapsed <= timeout + 2 * tick, "timed out after {elapsed} ns");
    assert_eq!(net.endpoint(hosts[1]).rpc_count(), 0);
    let m = net.endpoint(hosts[1]).metrics();
    assert_eq!(m.client_timeouts, 1);
    // RESEND(0, all) every resend_interval after resend_ticks, until the timeout.
    let resends = (config.timeout_ticks - config.resend_ticks) / config.resend_interval;
    assert_eq!(m.packets_out_by_type[2], u64::from(resends));
}

/// Echo, except that while `hold` is set requests are kept unanswered.
#[derive(Default)]
struct Holding {
    echo: Echo,
    hold: bool,
    held: usize,
}

impl App for Holding {
    fn on_event(&mut self, now: Instant, host: NodeId, ep: &mut Endpoint, event: Event) {
        if self.hold && matches!(event, Event::RequestReceived { .. }) {
            self.held += 1;
            return;
        }
        self.echo.on_event(now, host, ep, event);
    }
}

/// A server that discards every request (as a handler that fails does): Homa has no error
/// response.
struct Discarding(Echo);

impl App for Discarding {
    fn on_event(&mut self, now: Instant, host: NodeId, ep: &mut Endpoint, event: Event) {
        match event {
            Event::RequestReceived { rpc, .. } => ep.discard(rpc).unwrap(),
            other => self.0.on_event(now, host, ep, other),
        }
    }
}

#[test]
fn a_server_that_keeps_discarding_a_request_times_it_out() {
    let config = Config::default();
    let Star { mut net, hosts, ports, .. } = star(2, config.clone(), 10, 7);
    let mut app = Discarding(Echo::default());
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(100, 1));
    // Each RESEND finds the RPC gone (RPC_UNKNOWN) and the client restarts it. The first
    // three restarts each start the silence over (the resent request may have been lost);
    // later ones, with no DATA, GRANT or BUSY between, say nothing of progress, and the
    // client times out a full silence after the third.
    settle(&mut net, &mut app, 1000);
    assert_eq!(app.0.failures, vec![(hosts[1], id, FailReason::Timeout)]);
    let client = net.endpoint(hosts[1]).metrics();
    let asked = (config.timeout_ticks - config.resend_ticks) / config.resend_interval;
    assert_eq!(client.restarts, 3 + u64::from(asked), "one restart per RESEND");
    assert_eq!(net.endpoint(hosts[0]).metrics().requests_received, 1 + client.restarts);
    assert_eq!(net.endpoint(hosts[1]).rpc_count(), 0);
}

/// Requests lost while their server was stalled: its RPC_UNKNOWN comes late in the client's
/// silence, the resent request is lost too, the next RPC_UNKNOWN comes late in the new
/// silence, and the answer to the request resent then later still. Each restart starts the
/// silence over, so the RPC completes instead of timing out (as RPCs of a starved client and
/// server did in `homa-cli/tests/loss.rs`).
#[test]
fn restarts_late_in_a_silence_each_start_it_over() {
    let config = Config::default();
    let Star { mut net, hosts, ports, links } = star(2, config.clone(), 10, 8);
    let (server_down, client_down) = (links[0].1, links[1].1);
    let (client, server) = (hosts[1], hosts[0]);
    let ticks = |n: u32| u64::from(n) * config.tick();
    let timeout = config.timeout_ticks;
    let mut app = Echo::default();
    let msg = pattern(300, 3);
    net.link_mut(server_down).faults.loss = 1.0; // the request and the RESENDs are lost
    let id = call(&mut net, &mut app, client, ports[1], server, msg.clone());
    let start = net.now();
    let restart = |net: &mut Network, app: &mut Echo, n: u64| {
        net.link_mut(server_down).faults.loss = 0.0; // the next RESEND draws RPC_UNKNOWN
        while net.endpoint(client).metrics().restarts < n {
            assert_eq!(app.failures, vec![], "failed before restart {n}");
            net.step(app);
        }
    };
    net.run_until(start + ticks(timeout - 8), &mut app);
    restart(&mut net, &mut app, 1);
    net.link_mut(server_down).faults.loss = 1.0; // the resent request is lost too
    net.run_until(start + ticks(timeout + 80), &mut app);
    restart(&mut net, &mut app, 2);
    // The server answers, but nothing reaches the client until past the end of the
    // silence that the first restart began.
    net.link_mut(client_down).faults.loss = 1.0;
    net.run_until(start + ticks(2 * timeout + 20), &mut app);
    net.link_mut(client_down).faults.loss = 0.0;
    settle(&mut net, &mut app, 1000);
    assert_eq!(app.failures, vec![]);
    assert!(app.responses.get(&(client, id)) == Some(&msg));
    assert_eq!(net.endpoint(client).metrics().restarts, 2);
    assert_eq!(net.endpoint(server).metrics().requests_received, 1);
    assert_eq!(net.endpoint(server).rpc_count(), 0);
    assert_eq!(net.endpoint(client).rpc_count(), 0);
}

/// A round trip of 20 ticks, longer than `resend_interval`: when the first RPC_UNKNOWN
/// arrives, the answers to the RESENDs sent after the first are still on their way. They answer RESENDs from
/// before the restart and must not restart the RPC again (each restart sends the whole
/// request once more).
#[test]
fn rpc_unknowns_for_resends_before_a_restart_do_not_restart_it_again() {
    let config = Config::default();
    let Star { mut net, hosts, ports, links } = star(2, config.clone(), 10, 8);
    for &(up, down) in &links {
        net.link_mut(up).delay = 5 * config.tick();
        net.link_mut(down).delay = 5 * config.tick();
    }
    let (client, server) = (hosts[1], hosts[0]);
    let mut app = Echo::default();
    let msg = pattern(300, 3);
    net.link_mut(links[0].1).faults.loss = 1.0; // the request is lost
    let id = call(&mut net, &mut app, client, ports[1], server, msg.clone());
    net.run_until(net.now() + 12 * config.tick(), &mut app);
    net.link_mut(links[0].1).faults.loss = 0.0; // RESENDs from the second on arrive
    settle(&mut net, &mut app, 1000);
    assert_eq!(app.failures, vec![]);
    assert!(app.responses.get(&(client, id)) == Some(&msg));
    assert!(net.endpoint(server).metrics().packets_out_by_type[3] > 1, "several UNKNOWNs");
    assert_eq!(net.endpoint(client).metrics().restarts, 1);
    assert_eq!(net.endpoint(server).metrics().requests_received, 1);
}

#[test]
fn a_restarted_server_is_recovered_through_rpc_unknown() {
    let config = Config { link_mbps: 10_000, ..Config::default() };
    let Star { mut net, hosts, ports, .. } = star(2, config.clone(), 10, 6);
    let mut app = Holding { hold: true, ..Holding::default() };
    let msg = pattern(300_000, 9);
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], msg.clone());
    // The server receives the whole request, then restarts before answering: it loses the RPC.
    while app.held == 0 {
        net.step(&mut app);
    }
    let mut fresh = Endpoint::new(config).unwrap();
    fresh.bind(SERVER_PORT).unwrap();
    net.replace_endpoint(hosts[0], fresh);
    app.hold = false;
    settle(&mut net, &mut app, 1000);
    assert_eq!(app.echo.failures, vec![]);
    assert!(app.echo.responses.get(&(hosts[1], id)) == Some(&msg));
    let client = net.endpoint(hosts[1]).metrics();
    let server = net.endpoint(hosts[0]).metrics();
    assert_eq!(client.restarts, 1, "the client restarted the RPC once");
    assert_eq!(server.packets_out_by_type[3], 1, "the new server sent one RPC_UNKNOWN");
    assert_eq!(server.requests_received, 1);
    assert_eq!(net.endpoint(hosts[0]).rpc_count(), 0);
    assert_eq!(net.endpoint(hosts[1]).rpc_count(), 0);
}

#[test]
fn a_server_restarted_mid_request_recovers_the_missing_bytes() {
    let config = Config { link_mbps: 10_000, ..Config::default() };
    let Star { mut net, hosts, ports, .. } = star(2, config.clone(), 10, 6);
    let mut app = Echo::default();
    let msg = pattern(300_000, 9);
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], msg.clone());
    net.run_until(60_000, &mut app);
    assert!(net.endpoint(hosts[0]).metrics().packets_in_by_type[0] > 0);
    let mut fresh = Endpoint::new(config).unwrap();
    fresh.bind(SERVER_PORT).unwrap();
    net.replace_endpoint(hosts[0], fresh);
    settle(&mut net, &mut app, 1000);
    assert!(app.responses.get(&(hosts[1], id)) == Some(&msg));
    // The new server saw the message from its middle and asked for the start.
    assert!(net.endpoint(hosts[0]).metrics().packets_out_by_type[2] > 0);
    assert_eq!(net.endpoint(hosts[0]).rpc_count(), 0);
    assert_eq!(net.endpoint(hosts[1]).rpc_count(), 0);
}

/// A server waiting for grants keeps its response through a silence far longer than
/// `timeout_ticks` (its client may be granting other messages first: review finding, a
/// response was dropped after 100 ms that its client still wanted), and forgets it after
/// `ack_timeout_ticks`, so a vanished client does not pin it forever.
#[test]
fn a_server_whose_client_vanishes_forgets_the_rpc() {
    let config = Config { ack_timeout_ticks: 400, ..Config::default() };
    let Star { mut net, hosts, ports, links } = star(2, config.clone(), 10, 12);
    let mut app = Echo::default();
    // A large echo: the response needs grants the client will never send.
    call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(200_000, 1));
    while app.requests_served == 0 {
        net.step(&mut app);
    }
    net.link_mut(links[1].1).faults.loss = 1.0; // nothing reaches the client any more
    net.link_mut(links[1].0).faults.loss = 1.0; // and it sends nothing
    let silent_from = net.now();
    net.run_until(silent_from + 3 * u64::from(config.timeout_ticks) * config.tick(), &mut app);
    assert_eq!(net.endpoint(hosts[0]).rpc_count(), 1, "gave up after timeout_ticks");
    settle(&mut net, &mut app, 1000);
    let server = net.endpoint(hosts[0]);
    assert_eq!(server.rpc_count(), 0, "the server still holds the response");
    assert_eq!(server.metrics().server_timeouts, 1);
    assert_eq!(server.metrics().tx_bytes, 0);
}

#[test]
fn a_server_stops_asking_for_an_ack_after_ack_timeout_ticks() {
    for ack_timeout_ticks in [50, 1000] {
        let config = Config { ack_timeout_ticks, ..Config::default() };
        let Star { mut net, hosts, ports, links } = star(2, config.clone(), 10, 13);
        let mut app = Echo::default();
        let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(100, 1));
        while !app.responses.contains_key(&(hosts[1], id)) {
            net.step(&mut app);
        }
        // The client got its response, then vanished before acknowledging it.
        net.link_mut(links[1].0).faults.loss = 1.0;
        let start = net.now();
        settle(&mut net, &mut app, u64::from(ack_timeout_ticks) + 100);
        let server = net.endpoint(hosts[0]);
        assert_eq!(server.rpc_count(), 0);
        let need_acks = server.metrics().packets_out_by_type[7];
        // NEED_ACK from request_ack_ticks after the response, then after 1, 2, 4 ... ticks
        // (at most 32) until the limit: 6 in 50 ticks, 36 in 1,000 (not one a tick).
        let (mut at, mut step, mut expected) = (u64::from(config.request_ack_ticks), 1, 0);
        while at < u64::from(ack_timeout_ticks) {
            (at, step, expected) = (at + step, (step * 2).min(32), expected + 1);
        }
        assert!(need_acks.abs_diff(expected) <= 1, "{need_acks} NEED_ACKs, expected {expected}");
        let limit = u64::from(ack_timeout_ticks + 2) * config.tick();
        assert!(net.now() - start <= limit);
    }
}
