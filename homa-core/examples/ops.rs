//! Runs one benchmark scenario a given number of times, for instruction counting:
//!
//! ```sh
//! cargo build --release -p homa-core --example ops
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/ops rpc 10000
//! ```
//!
//! Instructions per operation = (total at N - total at 0) / N; `scripts/instructions` does
//! that for every scenario.

#[path = "../benches/pair.rs"]
mod pair;

use homa_core::Instant;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use homa_core::{Config, Endpoint, Payload};
use pair::{Pair, SERVER_PORT, keep_freed_memory};

fn main() {
    let mut args = std::env::args().skip(1);
    let scenario = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    keep_freed_memory();
    match scenario.as_str() {
        "rpc" => {
            let mut pair = Pair::new(Config::default());
            pair.rpc(vec![1; 100], 1000); // warm-up: first contact, CUTOFFS
            for _ in 0..n {
                black_box(pair.rpc(vec![1; 100], 1000));
            }
        }
        "megabyte" | "runs" => {
            let mut pair = Pair::new(Config { link_mbps: 1_000_000, ..Config::default() });
            pair.response_len = Some(1);
            if scenario == "runs" {
                pair.run_slots = 44; // a 64 KB GSO send at MTU 1500
            }
            pair.rpc(vec![1; 100], 1000);
            let message: Arc<Vec<u8>> = Arc::new(vec![1; 1_000_000]);
            for _ in 0..n {
                black_box(pair.rpc(Payload::shared(message.clone()), 1000));
            }
        }
        "data" => data(n, 1),
        "train" => data(n, TRAIN),
        other => {
            eprintln!("unknown scenario {other:?}: rpc | megabyte | runs | data | train");
            std::process::exit(2);
        }
    }
}

/// DATA packets of 1,424 bytes in one GRO batch of 64 KB, as homa-io receives them.
const TRAIN: u32 = 45;

/// `n` DATA packets of 1,000,000-byte messages into a server, draining what they cause (the
/// GRANTs) after every `per_drain` packets.
fn data(n: u64, per_drain: u32) {
    let from: SocketAddr = "198.18.0.1:4000".parse().unwrap();
    let mut server = Endpoint::new(Config { max_rx_bytes: 1 << 40, ..Config::default() }).unwrap();
    server.bind(SERVER_PORT).unwrap();
    let mut packet = vec![0u8; 56 + 1424];
    packet[0..2].copy_from_slice(&40_000u16.to_be_bytes());
    packet[2..4].copy_from_slice(&SERVER_PORT.to_be_bytes());
    packet[11] = 0x10;
    packet[12] = 0xE0;
    packet[28..32].copy_from_slice(&1_000_000u32.to_be_bytes());
    packet[32..36].copy_from_slice(&40_000u32.to_be_bytes());
    packet[46..48].copy_from_slice(&1u16.to_be_bytes());
    let mut buf = vec![0u8; 1500];
    let (mut id, mut offset) = (2u64, 0u32);
    for i in 0..n {
        if offset >= 1_000_000 {
            (id, offset) = (id + 2, 0);
        }
        packet[20..28].copy_from_slice(&id.to_be_bytes());
        packet[4..8].copy_from_slice(&offset.to_be_bytes());
        packet[52..56].copy_from_slice(&offset.to_be_bytes());
        let len = (1_000_000 - offset).min(1424) as usize;
        offset += len as u32;
        server.handle_packet(Instant::ZERO, from, &packet[..56 + len]).unwrap();
        if (i + 1) % u64::from(per_drain) != 0 && i + 1 != n {
            continue;
        }
        while let Some(t) = server.poll_transmit(Instant::ZERO, &mut buf).unwrap() {
            black_box(t);
        }
        while let Some(e) = server.poll_event() {
            black_box(e);
        }
    }
}
