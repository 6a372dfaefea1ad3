//! After warm-up, a single-packet RPC allocates nothing but its message buffers; a DATA
//! packet far past its grant allocates nothing in proportion to the excess.

mod common;
#[path = "../benches/pair.rs"]
mod pair;

use homa_core::Instant;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use homa_core::{Config, Endpoint};
use pair::Pair;

/// Records the size of every allocation made while `COUNTING` is set.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static SIZES: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// Held by each test: the counter is global, and tests run in parallel.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

// SAFETY: every call forwards to the system allocator unchanged; the bookkeeping allocates
// nothing itself (the vector's capacity is reserved before counting starts).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn record(size: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        COUNTING.store(false, Ordering::Relaxed); // the lock below must not recurse
        SIZES.lock().unwrap().push(size);
        COUNTING.store(true, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn a_single_packet_rpc_allocates_only_its_message_buffers() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const LEN: usize = 100;
    const RPCS: usize = 1000;
    SIZES.lock().unwrap().clear();
    let mut pair = Pair::new(Config::default());
    // Warm-up: first contact with the peer (CUTOFFS), tables and queues reach their size,
    // timers cycle.
    for _ in 0..10_000 {
        pair.rpc(vec![7u8; LEN], 1000);
    }
    let requests: Vec<Vec<u8>> = (0..RPCS).map(|_| vec![7u8; LEN]).collect();
    SIZES.lock().unwrap().reserve(10 * RPCS);
    COUNTING.store(true, Ordering::Relaxed);
    for request in requests {
        let response = pair.rpc(request, 1000);
        assert_eq!(response.len(), LEN);
    }
    COUNTING.store(false, Ordering::Relaxed);
    let sizes = SIZES.lock().unwrap().clone();
    // The request is the caller's; the server echoes it, so each RPC needs exactly two
    // buffers: the request as the server receives it and the response as the client does.
    assert!(sizes.iter().all(|&s| s == LEN), "allocations other than message buffers: {:?}", {
        let mut other: Vec<usize> = sizes.iter().copied().filter(|&s| s != LEN).collect();
        other.dedup();
        other
    });
    assert_eq!(sizes.len(), 2 * RPCS);
}

/// Review finding: a sender that sent far past its grant (here a 65 KB DATA packet of a
/// message with no unscheduled bytes) was granted the free `max_incoming` headroom again and
/// again, one headroom's worth per pass (bytes below those received never count as
/// incoming, so the headroom never shrank), recording the message on every pass: 65,000
/// passes and a 512 KB list for one packet, and billions for a long enough message. It is
/// granted in one step now.
#[test]
fn data_far_past_its_grant_is_granted_in_one_step() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const LENGTH: u32 = 1_000_000;
    let config = Config {
        mtu: 65_535,
        max_incoming: 1,
        window: 10_000,
        max_overcommit: 1,
        grant_fifo_fraction: 0,
        ..Config::default()
    };
    let mut ep = Endpoint::new(config.clone()).unwrap();
    ep.bind(common::SERVER_PORT).unwrap();
    let from: std::net::SocketAddr = "198.18.0.2:40000".parse().unwrap();
    let payload = config.max_payload();
    let data = common::request_data(LENGTH, 0, 0, payload as usize);
    let mut buf = vec![0; config.max_packet_len()];
    SIZES.lock().unwrap().clear();
    SIZES.lock().unwrap().reserve(1000);
    COUNTING.store(true, Ordering::Relaxed);
    ep.handle_packet(Instant::ZERO, from, &data).unwrap();
    let mut out = 0;
    while ep.poll_transmit(Instant::ZERO, &mut buf).unwrap().is_some() {
        out += 1;
    }
    COUNTING.store(false, Ordering::Relaxed);
    let sizes = SIZES.lock().unwrap().clone();
    let other: usize = sizes.iter().filter(|&&s| s != LENGTH as usize).sum();
    assert!(other < 16 * 1024, "{other} bytes allocated besides the message: {sizes:?}");
    assert_eq!(out, 1, "one packet out: the GRANT");
    assert_eq!(ep.metrics().incoming, 1, "received + the 1 byte of headroom granted");
}
