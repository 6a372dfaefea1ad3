//! A host that drops input (its socket buffer full) counts a tenth of those ticks as its
//! peers' silence: RESENDs come ten times slower and a dead peer is found out ten times
//! later, so an overloaded host drains before it asks for more and fails no call early.

use homa_core::{Config, Endpoint, Instant};
use std::net::SocketAddr;

/// A call to a server that never answers, driven by `poll_timeout`; the host reports
/// `drops` before each `handle_timeout`. Returns when it failed and the RESENDs it sent.
fn dead_server(drops: impl Fn(u64) -> u64) -> (u64, u64) {
    let config = Config::default();
    let mut ep = Endpoint::new(config.clone()).unwrap();
    let port = ep.bind_ephemeral().unwrap();
    let server: SocketAddr = "198.18.0.2:4000".parse().unwrap();
    ep.send_request(Instant::ZERO, port, server, 99, vec![1; 3000], 0).unwrap();
    let mut buf = vec![0; config.max_packet_len()];
    while ep.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some() {}
    let mut wake_ups = 0;
    while let Some(now) = ep.poll_timeout() {
        ep.note_input_drops(now, drops(now.as_nanos() / config.tick()));
        ep.handle_timeout(now);
        while ep.poll_transmit(now, &mut buf).unwrap().is_some() {}
        if ep.poll_event().is_some() {
            let resends = ep.metrics().packets_out_by_type[2];
            return (now.as_nanos() / config.tick(), resends);
        }
        wake_ups += 1;
        assert!(wake_ups < 10_000);
    }
    panic!("the call never failed");
}

#[test]
fn ticks_in_which_the_host_dropped_input_count_a_tenth_of_the_silence() {
    let timeout = u64::from(Config::default().timeout_ticks);
    let (failed, resends) = dead_server(|_| 0);
    assert!((timeout..timeout + 2).contains(&failed), "failed at tick {failed}");
    // Drops all along (from the first reading on, at the first RESEND): about ten times as
    // long, and no more RESENDs for it.
    let (failed_dropping, resends_dropping) = dead_server(|tick| tick * 7);
    assert!(
        (9 * timeout..10 * timeout + 20).contains(&failed_dropping),
        "failed at tick {failed_dropping}"
    );
    assert!(resends_dropping <= resends, "{resends_dropping} RESENDs, {resends} without drops");
    // Drops that stop: the silence runs at full speed from then on.
    let (failed_once, _) = dead_server(|tick| if tick < 50 { tick } else { 50 });
    assert!((timeout + 40..timeout + 50).contains(&failed_once), "failed at tick {failed_once}");
}
