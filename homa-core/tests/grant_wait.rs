//! A client whose request waits for grants is owed nothing: it sends no RESEND while its
//! server is there (a server grants the shortest message first, so a long one may wait for
//! many), yet still finds a server that died or forgot the request.

mod common;

use common::*;
use homa_core::testnet::Network;
use homa_core::{Config, Endpoint, FailReason};

/// RESENDs `host` sent.
fn resends(net: &Network, host: homa_core::testnet::NodeId) -> u64 {
    net.endpoint(host).metrics().packets_out_by_type[2]
}

#[test]
fn requests_waiting_behind_others_for_grants_send_no_resend() {
    // Three clients send 1 MB each at once; the server grants one message at a time
    // (`max_overcommit`), shortest first and never to the oldest (no FIFO share): the last
    // waits about 16 ms after its unscheduled bytes, while its first RESEND would be due
    // after 5 silent ticks.
    let config = Config { max_overcommit: 1, grant_fifo_fraction: 0, ..Config::default() };
    let Star { mut net, hosts, ports, .. } = star(4, config, 1, 3);
    let mut app = Echo::default();
    let messages: Vec<_> = (1..4).map(|i| pattern(1_000_000, i)).collect();
    let ids: Vec<_> = (1..4)
        .map(|c| call(&mut net, &mut app, hosts[c], ports[c], hosts[0], messages[c - 1].clone()))
        .collect();
    settle(&mut net, &mut app, 1000);
    assert_eq!(app.failures, vec![]);
    for c in 1..4 {
        assert!(app.responses[&(hosts[c], ids[c - 1])] == messages[c - 1]);
        assert_eq!(resends(&net, hosts[c]), 0, "client {c} asked for what it was not owed");
    }
    assert_eq!(net.endpoint(hosts[0]).metrics().packets_out_by_type[4], 0, "no BUSY needed");
}

#[test]
fn a_client_waiting_for_grants_finds_its_server_dead() {
    let config = Config::default();
    let Star { mut net, hosts, ports, links } = star(2, config.clone(), 1, 4);
    let mut app = Recorder::default();
    call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(800_000, 1));
    // The server takes the first packets, then dies (as do its grants on the way).
    while net.endpoint(hosts[0]).metrics().packets_in_by_type[0] == 0 {
        net.step(&mut app);
    }
    net.link_mut(links[0].0).faults.loss = 1.0;
    net.link_mut(links[0].1).faults.loss = 1.0;
    let died = net.now();
    settle(&mut net, &mut app, 1000);
    let failed = app.failures_at;
    assert_eq!(app.failures, vec![FailReason::Timeout]);
    // It asked halfway (then every resend_interval) and gave up after timeout_ticks.
    let tick = config.tick();
    let after = (failed - died) / tick;
    let timeout = u64::from(config.timeout_ticks);
    assert!((timeout - 5..timeout + 10).contains(&after), "failed {after} ticks after");
    let asked = resends(&net, hosts[1]);
    assert!((1..=11).contains(&asked), "{asked} RESENDs");
}

#[test]
fn a_request_its_server_forgot_restarts_although_the_server_talks_of_others() {
    // One unscheduled packet per message: the second's is in before the server restarts.
    let config = Config { unsched_bytes: 1400, ..Config::default() };
    let Star { mut net, hosts, ports, .. } = star(2, config.clone(), 1, 5);
    let mut app = Recorder::default();
    // The first request takes the grants the server gives one client at a time
    // (`max_active_per_peer`); the second waits.
    call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(800_000, 1));
    let msg = pattern(800_000, 2);
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], msg.clone());
    while net.endpoint(hosts[0]).rpc_count() < 2 {
        net.step(&mut app);
    }
    // The server restarts: it forgets the waiting request, while other calls keep it talking
    // to the client every 5 ms.
    let mut fresh = Endpoint::new(Config { link_mbps: 1000, ..config.clone() }).unwrap();
    fresh.bind(SERVER_PORT).unwrap();
    net.replace_endpoint(hosts[0], fresh);
    let forgot = net.now();
    while !app.responses.contains_key(&id) {
        call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(100, 3));
        let until = net.now() + 5 * MS;
        net.run_until(until, &mut app);
        assert!(net.now() - forgot < 2000 * MS, "the forgotten request never restarted");
    }
    assert!(app.responses[&id] == msg);
    assert!(net.endpoint(hosts[1]).metrics().restarts >= 1);
    // Its own silence counts a tenth: asked after about half of ack_timeout_ticks.
    let after = (net.now() - forgot) / config.tick();
    let half = u64::from(config.ack_timeout_ticks) / 2;
    assert!((half..half + 100).contains(&after), "completed {after} ticks after");
}

#[test]
fn a_granted_request_draws_no_resend_while_its_server_computes() {
    // The server holds each request 30 ms (30 ticks) before it answers: a client owed the
    // response used to ask every 5 ticks, and hear BUSY. One whose request the server
    // granted knows the server has it; one sent whole unscheduled still asks (it may have
    // been lost whole).
    for (len, asks) in [(200_000, false), (1_000, true)] {
        let Star { mut net, hosts, ports, .. } = star(2, Config::default(), 1, 6);
        let mut app = Recorder { hold: true, ..Recorder::default() };
        let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(len, 1));
        while app.held.is_none() {
            net.step(&mut app);
        }
        let until = net.now() + 30 * MS;
        net.run_until(until, &mut app);
        let (rpc, message) = app.held.take().unwrap();
        net.with_endpoint(hosts[0], &mut app, |now, ep| ep.send_response(now, rpc, message))
            .unwrap();
        settle(&mut net, &mut app, 1000);
        assert!(app.responses.contains_key(&id));
        assert_eq!(
            resends(&net, hosts[1]) > 0,
            asks,
            "{len} B: {} RESENDs",
            resends(&net, hosts[1])
        );
    }
}

#[test]
fn a_lost_response_to_a_granted_request_is_asked_for_at_the_servers_need_ack() {
    let config = Config::default();
    let Star { mut net, hosts, ports, links } = star(2, config.clone(), 1, 7);
    let mut app = Recorder { hold: true, ..Recorder::default() };
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(200_000, 1));
    while app.held.is_none() {
        net.step(&mut app);
    }
    // The response's one packet is lost on its way to the client.
    net.link_mut(links[1].1).faults.loss = 1.0;
    let (rpc, _) = app.held.take().unwrap();
    let sent = net.now();
    net.with_endpoint(hosts[0], &mut app, |now, ep| ep.send_response(now, rpc, vec![1; 100]))
        .unwrap();
    net.run_until(sent + MS / 2, &mut app);
    net.link_mut(links[1].1).faults.loss = 0.0;
    settle(&mut net, &mut app, 1000);
    assert!(app.responses.contains_key(&id) && app.failures.is_empty());
    let took = (app.responses_at - sent) / config.tick();
    assert!(took <= 2 * u64::from(config.request_ack_ticks) + 2, "{took} ticks");
}

/// Echo that records responses by id (one client here) and failures, each with its time;
/// with `hold`, it keeps the request instead, for the test to answer.
#[derive(Default)]
struct Recorder {
    hold: bool,
    held: Option<(homa_core::ServerRpc, Vec<u8>)>,
    responses: std::collections::HashMap<u64, Vec<u8>>,
    responses_at: u64,
    failures: Vec<FailReason>,
    failures_at: u64,
}

impl homa_core::testnet::App for Recorder {
    fn on_event(
        &mut self,
        now: homa_core::Instant,
        _host: homa_core::testnet::NodeId,
        ep: &mut Endpoint,
        event: homa_core::Event,
    ) {
        use homa_core::Event;
        match event {
            Event::RequestReceived { rpc, message, .. } if self.hold => {
                self.held = Some((rpc, message));
            }
            Event::RequestReceived { rpc, message, .. } => {
                ep.send_response(now, rpc, message).unwrap();
            }
            Event::ResponseReceived { id, message, .. } => {
                self.responses.insert(id, message);
                self.responses_at = now.as_nanos();
            }
            Event::RpcFailed { reason, .. } => {
                self.failures.push(reason);
                self.failures_at = now.as_nanos();
            }
        }
    }
}
