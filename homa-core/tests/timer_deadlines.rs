//! After `handle_timeout(now)` and a full drain (packets and events), nothing is due any more:
//! `poll_timeout` is later than now (or `None`), so a driver that follows the contract never
//! spins. (An event not yet taken makes `poll_timeout` say "now".)

use homa_core::Instant;
use std::net::SocketAddr;

use homa_core::{Config, Endpoint};

/// Found by the `endpoint_pair` fuzz target (fuzz/regressions/endpoint_pair/
/// timer-armed-in-the-past): while `handle_timeout` ran an RPC's timer, re-checking whether the
/// RPC waits on its peer armed a wake-up for a tick already due, which only the next
/// `handle_timeout` cleared, so `poll_timeout` said "now" right after it ran.
#[test]
fn no_wake_up_is_due_right_after_handle_timeout() {
    for (resend_ticks, resend_interval, timeout_ticks) in [(1, 1, 4), (2, 3, 10), (5, 5, 100)] {
        let config = Config { resend_ticks, resend_interval, timeout_ticks, ..Config::default() };
        let mut ep = Endpoint::new(config.clone()).unwrap();
        let port = ep.bind_ephemeral().unwrap();
        // The server never answers: the client resends, then times out.
        let server: SocketAddr = "198.18.0.2:4000".parse().unwrap();
        ep.send_request(Instant::ZERO, port, server, 99, vec![1; 3000], 0).unwrap();
        let mut buf = vec![0; config.max_packet_len()];
        while ep.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some() {}
        let (mut wake_ups, mut failures) = (0, 0);
        while let Some(now) = ep.poll_timeout() {
            ep.handle_timeout(now);
            while ep.poll_transmit(now, &mut buf).unwrap().is_some() {}
            failures += std::iter::from_fn(|| ep.poll_event()).count();
            let next = ep.poll_timeout();
            assert!(
                next.is_none_or(|d| d > now),
                "{config:?}: after handle_timeout({now}) poll_timeout is {next:?}"
            );
            wake_ups += 1;
            assert!(wake_ups < 1000);
        }
        assert_eq!(ep.rpc_count(), 0);
        assert_eq!(failures, 1, "the call failed");
    }
}
