//! A full send buffer: requests and replies wait for room, oldest first, instead of failing;
//! `try_call_async` sheds the load instead; a waiting call can be aborted; and the socket
//! ends idle.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{bind_server, echo, loopback_v4, pattern};
use homa_io::{ApiError, Config, Error, Socket};

/// Room for two 400,000-byte messages at once (the least `wmem_max` may be: one message of
/// `max_message_length`).
fn tight() -> Config {
    Config { wmem_max: 1_000_000, ..Config::default() }
}

const LEN: usize = 400_000;

#[test]
fn requests_wait_for_room_and_all_complete() {
    let server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let client = Socket::builder().config(tight()).client(loopback_v4()).unwrap();
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let call = client.call_async(server.local_addr(), pattern(LEN, i), None).unwrap();
            (i, call)
        })
        .collect();
    // Nothing is answered yet: six wait behind the two in flight, and a caller that sheds
    // load is told so.
    assert_eq!(client.metrics().core.tx_bytes, 2 * LEN as u64);
    match client.try_call_async(server.local_addr(), pattern(LEN, 99), None) {
        Err(Error::Api(ApiError::TxBufferFull)) => {}
        other => panic!("expected TxBufferFull, got {:?}", other.map(|c| c.id())),
    }
    let echoer = echo(&server);
    for (i, call) in calls {
        assert!(call.wait().unwrap() == pattern(LEN, i), "response {i} differs");
    }
    assert!(client.wait_idle(Duration::from_secs(10)), "the client ends with RPCs left");
    let m = client.metrics();
    assert_eq!((m.core.rpcs, m.core.tx_bytes), (0, 0));
    server.shutdown();
    echoer.join().unwrap();
}

#[test]
fn a_call_waiting_for_room_can_be_aborted() {
    let server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let client = Socket::builder().config(tight()).client(loopback_v4()).unwrap();
    // Nobody answers: the first two hold the buffer, the third waits.
    let held: Vec<_> = (0..2)
        .map(|i| client.call_async(server.local_addr(), pattern(LEN, i), None).unwrap())
        .collect();
    let waiting = client.call_async(server.local_addr(), pattern(LEN, 2), None).unwrap();
    client.abort(waiting.id()).unwrap();
    assert!(matches!(waiting.wait(), Err(Error::Aborted)));
    // Only the two that went reach the server.
    for _ in 0..2 {
        server.recv_request_timeout(Duration::from_secs(10)).unwrap().reply(b"!".to_vec()).unwrap();
    }
    for call in held {
        assert_eq!(call.wait().unwrap(), b"!");
    }
    assert_eq!(server.metrics().core.requests_received, 2);
    assert!(client.wait_idle(Duration::from_secs(10)));
}

#[test]
fn replies_wait_for_room_and_all_arrive() {
    let server = Arc::new(bind_server(Socket::builder().config(tight()), loopback_v4()));
    let client = Socket::client(loopback_v4()).unwrap();
    let calls: Vec<_> =
        (0..8).map(|i| client.call_async(server.local_addr(), vec![i], None).unwrap()).collect();
    // Eight 400,000-byte replies into room for two: none fails, none blocks.
    for _ in 0..8 {
        let mut request = server.recv_request_timeout(Duration::from_secs(10)).unwrap();
        let seed = request.take_message()[0];
        request.reply(pattern(LEN, seed)).unwrap();
    }
    for (i, call) in calls.into_iter().enumerate() {
        assert!(call.wait().unwrap() == pattern(LEN, i as u8), "response {i} differs");
    }
    assert!(server.wait_idle(Duration::from_secs(10)), "the server ends with RPCs left");
    assert_eq!(server.metrics().core.tx_bytes, 0);
}
