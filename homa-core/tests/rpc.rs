//! RPCs end to end between endpoints on the deterministic network.

mod common;

use common::*;
use homa_core::Instant;
use homa_core::{ApiError, Config, Endpoint};

fn round_trip(len: usize) {
    round_trip_with(Config::default(), len);
}

fn round_trip_with(config: Config, len: usize) {
    let Star { mut net, hosts, ports, .. } = star(2, config, 10, 1);
    let mut app = Echo::default();
    let msg = pattern(len, len as u64);
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], msg.clone());
    assert!(net.run_until_idle(10_000 * MS, &mut app), "network did not go idle");
    assert_eq!(app.failures, vec![]);
    let got =
        app.responses.get(&(hosts[1], id)).unwrap_or_else(|| panic!("no response for {len} bytes"));
    assert!(got == &msg, "payload of {len} bytes corrupted");
    assert_eq!(app.duplicates, 0);
    // Once idle, both sides have forgotten the RPC (the server got its ack via NEED_ACK).
    assert_eq!(net.endpoint(hosts[0]).rpc_count(), 0, "server state left for {len} bytes");
    assert_eq!(net.endpoint(hosts[1]).rpc_count(), 0, "client state left for {len} bytes");
}

#[test]
fn rpcs_of_every_boundary_size() {
    for len in [1, 1423, 1424, 1425, 40_000, 40_001, 500_000, 1_000_000] {
        round_trip(len);
    }
}

#[test]
fn a_raised_message_limit_carries_longer_messages() {
    let config = Config { max_message_length: 3_000_000, ..Config::default() };
    round_trip_with(config.clone(), 2_999_999);
    let mut ep = Endpoint::new(config).unwrap();
    let port = ep.bind_ephemeral().unwrap();
    let dest = "198.18.0.1:4000".parse().unwrap();
    assert_eq!(
        ep.send_request(Instant::ZERO, port, dest, 1, vec![0; 3_000_001], 0),
        Err(ApiError::MessageLength { len: 3_000_001, max: 3_000_000 })
    );
}

#[test]
fn a_receiver_at_the_modules_limit_drops_longer_messages() {
    use homa_core::{FailReason, testnet};
    let mut server = Endpoint::new(Config::default()).unwrap();
    server.bind(SERVER_PORT).unwrap();
    // Only the client raised its limit: the server drops its DATA as too long.
    let mut client =
        Endpoint::new(Config { max_message_length: 2_000_000, ..Config::default() }).unwrap();
    let port = client.bind_ephemeral().unwrap();
    let (mut net, hosts, _) = testnet::star(1, vec![server, client], 10 * GBPS, 1_000);
    let mut app = Echo::default();
    let id = call(&mut net, &mut app, hosts[1], port, hosts[0], pattern(1_500_000, 1));
    assert!(net.run_until_idle(10_000 * MS, &mut app), "network did not go idle");
    assert_eq!(app.failures, vec![(hosts[1], id, FailReason::Timeout)]);
    let drops = net.endpoint(hosts[0]).metrics().drops;
    assert!(drops.too_long > 0 && drops.malformed == 0, "{drops:?}");
    assert_eq!(net.endpoint(hosts[0]).rpc_count(), 0);
}

#[test]
fn bad_message_lengths_are_rejected() {
    let mut ep = Endpoint::new(Config::default()).unwrap();
    let port = ep.bind_ephemeral().unwrap();
    let dest = "198.18.0.1:4000".parse().unwrap();
    assert_eq!(
        ep.send_request(Instant::ZERO, port, dest, 1, Vec::new(), 0),
        Err(ApiError::MessageLength { len: 0, max: 1_000_000 })
    );
    assert_eq!(
        ep.send_request(Instant::ZERO, port, dest, 1, vec![0; 1_000_001], 0),
        Err(ApiError::MessageLength { len: 1_000_001, max: 1_000_000 })
    );
    assert_eq!(ep.rpc_count(), 0);
    assert_eq!(ep.poll_timeout(), None, "a rejected call leaves nothing to do");
}

#[test]
fn discarded_requests_and_aborted_calls_leave_nothing() {
    use homa_core::testnet::{App, NodeId};
    use homa_core::{Event, ServerRpc};

    /// Takes each request as a one-way message: the server discards it and the client aborts.
    #[derive(Default)]
    struct OneWay {
        delivered: Vec<(ServerRpc, usize)>,
    }
    impl App for OneWay {
        fn on_event(&mut self, _: Instant, _: NodeId, ep: &mut Endpoint, event: Event) {
            if let Event::RequestReceived { rpc, message, .. } = event {
                ep.discard(rpc).unwrap();
                assert_eq!(ep.discard(rpc), Err(ApiError::UnknownRpc(rpc.id)));
                self.delivered.push((rpc, message.len()));
            }
        }
    }
    let Star { mut net, hosts, ports, .. } = star(2, Config::default(), 10, 1);
    let mut app = OneWay::default();
    let id = call(&mut net, &mut app, hosts[1], ports[1], hosts[0], pattern(50_000, 1));
    while app.delivered.is_empty() {
        net.step(&mut app);
    }
    net.with_endpoint(hosts[1], &mut app, |_, ep| ep.abort(id)).unwrap();
    settle(&mut net, &mut app, 1000);
    assert_eq!(app.delivered[0].1, 50_000);
    assert_eq!(net.endpoint(hosts[0]).rpc_count(), 0);
    assert_eq!(net.endpoint(hosts[1]).rpc_count(), 0);
    assert_eq!(net.endpoint(hosts[1]).metrics().client_timeouts, 0);
}

#[test]
fn late_timer_calls_still_resend() {
    // A driver on a loaded machine runs timers late: every call after the first RESEND is
    // due must still ask the silent server (RESEND(0, all) while awaiting the response).
    let config = Config::default();
    let mut ep = Endpoint::new(config.clone()).unwrap();
    let port = ep.bind_ephemeral().unwrap();
    let server = "198.18.0.2:4000".parse().unwrap();
    ep.send_request(Instant::ZERO, port, server, 1, vec![1; 100], 0).unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    while ep.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some() {}
    let mut resends = 0;
    for k in 1..=4u64 {
        let now = k * 7 * config.tick(); // 7 ticks apart, never on a planned tick
        ep.handle_timeout(Instant::from_nanos(now));
        while let Some(t) = ep.poll_transmit(Instant::from_nanos(now), &mut buf).unwrap() {
            assert_eq!(buf[11], homa_core::wire::PacketType::Resend.code());
            assert_eq!(t.to, server);
            resends += 1;
        }
    }
    assert_eq!(resends, 4);
}

#[test]
fn client_ids_start_where_configured() {
    let mut ep = Endpoint::new(Config { first_client_id: 1 << 40, ..Config::default() }).unwrap();
    let port = ep.bind_ephemeral().unwrap();
    let dest = "198.18.0.2:4000".parse().unwrap();
    assert_eq!(ep.send_request(Instant::ZERO, port, dest, 1, vec![1], 0), Ok(1 << 40));
    assert_eq!(ep.send_request(Instant::ZERO, port, dest, 1, vec![1], 0), Ok((1 << 40) + 2));
}

#[test]
fn a_short_transmit_buffer_is_refused_and_an_event_waiting_is_due_now() {
    use homa_core::BufferTooShort;
    let mut ep = Endpoint::new(Config::default()).unwrap();
    let port = ep.bind_ephemeral().unwrap();
    let server: std::net::SocketAddr = "198.18.0.2:4000".parse().unwrap();
    ep.send_request(Instant::ZERO, port, server, 99, vec![1; 100], 0).unwrap();
    let need = ep.config().max_packet_len();
    let mut short = vec![0; need - 1];
    assert_eq!(
        ep.poll_transmit(Instant::ZERO, &mut short),
        Err(BufferTooShort { len: need - 1, need })
    );
    let mut buf = vec![0; need];
    assert!(
        ep.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some(),
        "the refusal lost nothing"
    );
    // An event not yet taken is work due now.
    ep.handle_unreachable(server, None);
    assert_eq!(ep.poll_timeout(), Some(Instant::ZERO));
    assert!(ep.poll_event().is_some());
    assert!(ep.poll_timeout().is_none_or(|d| d > Instant::ZERO), "nothing is due");
}
