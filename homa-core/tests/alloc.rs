//! After warm-up, a single-packet RPC allocates nothing but its message buffers.

#[path = "../benches/pair.rs"]
mod pair;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use homa_core::Config;
use pair::Pair;

/// Records the size of every allocation made while `COUNTING` is set.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static SIZES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

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
    const LEN: usize = 100;
    const RPCS: usize = 1000;
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
