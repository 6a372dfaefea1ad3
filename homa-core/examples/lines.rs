//! One packet of each type into an endpoint whose RPCs' state is cold, as in a simulation of
//! many hosts or a server with many clients: each packet names the next of `n` RPCs, each
//! with a peer of its own, so its state has left the L1 cache since it was last touched. Only
//! `measured` is meant to be counted:
//!
//! ```sh
//! cargo build --release -p homa-core --example lines
//! valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --collect-atstart=no \
//!     --toggle-collect='lines::measured' target/release/examples/lines data 4096
//! ```
//!
//! L1 data misses per packet (outside the payload's copy) are then the cache lines of
//! per-RPC, per-peer and table state the packet touches; `scripts/instructions lines` prints
//! them per type.

#[path = "../benches/pair.rs"]
mod pair;

use std::collections::HashMap;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use homa_core::wire::{self, Body, PacketType, grant, header};
use homa_core::{Config, Endpoint, Event, Instant};
use pair::{SERVER_PORT, keep_freed_memory};

/// Large enough to need grants, small enough for thousands in memory.
const LARGE: usize = 100_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_default();
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(4096);
    keep_freed_memory();
    let config = Config {
        link_mbps: 1_000_000,
        wmem_max: 1 << 40,
        max_rx_bytes: 1 << 40,
        max_bytes_per_host: 1 << 40,
        ..Config::default()
    };
    let mut client = Endpoint::new(config.clone()).unwrap();
    let mut server = Endpoint::new(config).unwrap();
    server.bind(SERVER_PORT).unwrap();
    let port = client.bind_ephemeral().unwrap();
    let (target, packets) = match kind.as_str() {
        // The second DATA packet of each of n requests, into the server.
        "data" => {
            let first = requests(&mut client, port, n, LARGE);
            let mut second = Vec::new();
            for (from, packets) in first {
                server.handle_packet(Instant::ZERO, from, &packets[0]).unwrap();
                second.push((from, packets[1].clone()));
            }
            (&mut server, second)
        }
        // A GRANT for each of n requests whose unscheduled bytes are out, into the client.
        "grant" => {
            let sent = requests(&mut client, port, n, LARGE);
            let grants = sent
                .iter()
                .map(|(_, packets)| {
                    let id = sender_id(&packets[0]);
                    let body = Body::Grant(grant::Repr { offset: 60_000, priority: 0 });
                    (server_addr(), emit(PacketType::Grant, SERVER_PORT, port, id ^ 1, body))
                })
                .collect();
            (&mut client, grants)
        }
        // An ACK for each of n answered requests, into the server.
        "ack" => {
            let sent = requests(&mut client, port, n, 100);
            let mut acks = Vec::new();
            for (from, packets) in sent {
                server.handle_packet(Instant::ZERO, from, &packets[0]).unwrap();
                let id = sender_id(&packets[0]);
                let body = Body::Ack(wire::ack::Repr::new(&[]).unwrap());
                acks.push((from, emit(PacketType::Ack, port, SERVER_PORT, id, body)));
            }
            while let Some(event) = server.poll_event() {
                if let Event::RequestReceived { rpc, message, .. } = event {
                    server.send_response(Instant::ZERO, rpc, message).unwrap();
                }
            }
            let mut buf = vec![0; 65_536];
            while server.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some() {}
            (&mut server, acks)
        }
        other => {
            eprintln!("unknown packet type {other:?}: data | grant | ack");
            std::process::exit(2);
        }
    };
    let before = target.metrics().accepted;
    let mut buf = vec![0; 65_536]; // freed outside `measured`: a large free sweeps malloc's bins
    measured(target, &packets, &mut buf);
    assert_eq!(target.metrics().accepted - before, packets.len() as u64, "every packet is taken");
}

/// Handles each packet (in a buffer reused as an I/O layer's would be, so that only the
/// endpoint's state can be cold).
#[inline(never)]
fn measured(endpoint: &mut Endpoint, packets: &[(SocketAddr, Vec<u8>)], buf: &mut [u8]) {
    for (from, packet) in packets {
        buf[..packet.len()].copy_from_slice(packet);
        black_box(endpoint.handle_packet(Instant::ZERO, *from, &buf[..packet.len()])).unwrap();
    }
}

/// Starts `n` requests of `len` bytes from `client`, and returns each one's packets (as far
/// as it sends unscheduled) with the address of the peer it is presented as coming from.
fn requests(
    client: &mut Endpoint,
    port: u16,
    n: usize,
    len: usize,
) -> Vec<(SocketAddr, Vec<Vec<u8>>)> {
    let mut index = HashMap::new();
    for i in 0..n {
        let message = vec![1; len];
        let id = client
            .send_request(Instant::ZERO, port, server_addr(), SERVER_PORT, message, 0)
            .unwrap();
        index.insert(id, i);
    }
    let mut sent: Vec<(SocketAddr, Vec<Vec<u8>>)> =
        (0..n).map(|i| (peer_addr(i), Vec::new())).collect();
    let mut buf = vec![0; 65_536];
    // The pacer holds packets back: wait for it, as an I/O layer would.
    let mut now = Instant::ZERO;
    loop {
        while let Some(t) = client.poll_transmit(now, &mut buf).unwrap() {
            sent[index[&sender_id(&buf[..t.len])]].1.push(buf[..t.len].to_vec());
        }
        match client.poll_timeout() {
            Some(t) if sent.iter().any(|(_, p)| p.len() < 2.min(len.div_ceil(1424))) => {
                // A deadline already passed is a timer: run it, or time would stand still.
                now = t.max(now);
                client.handle_timeout(now);
            }
            _ => break,
        }
    }
    sent
}

fn emit(kind: PacketType, sport: u16, dport: u16, id: u64, body: Body<'_>) -> Vec<u8> {
    let repr = wire::Repr { header: header::Repr::new(kind, sport, dport, id), body };
    let mut buf = vec![0; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

fn sender_id(packet: &[u8]) -> u64 {
    header::Packet::new_checked(packet).unwrap().sender_id()
}

fn server_addr() -> SocketAddr {
    "198.18.0.2:4000".parse().unwrap()
}

fn peer_addr(i: usize) -> SocketAddr {
    let ip = Ipv4Addr::new(198, 19, (i / 256) as u8, (i % 256) as u8);
    SocketAddr::new(IpAddr::V4(ip), 4000)
}
