//! `retain_freed_buffers`: freed large buffers are reused without new page faults.
//! Its own test binary, since the setting is process-wide.

/// Minor page faults of the calling thread so far.
fn page_faults() -> libc::c_long {
    // SAFETY: all-zero bytes are a valid rusage, which getrusage then fills.
    let mut usage = unsafe { std::mem::zeroed::<libc::rusage>() };
    // SAFETY: usage is live and of the type getrusage writes.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
    usage.ru_minflt
}

/// Allocates and fills `count` buffers of `len` bytes (as received messages), frees them,
/// and returns the page faults that took.
fn messages(count: u8, len: usize) -> libc::c_long {
    let before = page_faults();
    let buffers: Vec<Vec<u8>> =
        (0..count).map(|i| std::hint::black_box(vec![i | 1; len])).collect();
    assert!(buffers.iter().all(|b| b[len - 1] != 0));
    drop(buffers);
    page_faults() - before
}

/// A 4 MiB tensor: a size at which a threshold of exactly 4 MiB still maps afresh.
const TENSOR: usize = 4 << 20;

#[test]
fn freed_message_buffers_are_reused_without_page_faults() {
    // SAFETY: sysconf only reads a system value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let pages_of = |count: u8, len: usize| libc::c_long::from(count) * len as libc::c_long / page;
    let linux_glibc =
        cfg!(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"));
    // The operator's own thresholds are left alone.
    let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."))
        || std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_some();
    if !linux_glibc || tuned {
        assert!(!homa_io::retain_freed_buffers());
        return;
    }
    // glibc's default: the first round maps fresh memory; the second comes from a heap,
    // which is trimmed once the sixteen buffers are freed, so it faults its pages in again.
    for round in 1..=2 {
        let faults = messages(16, 1_000_000);
        let pages = pages_of(16, 1_000_000);
        assert!(faults >= pages / 2, "round {round} without: {faults} faults ({pages} pages)");
    }
    assert!(homa_io::retain_freed_buffers());
    for (count, len) in [(16, 1_000_000), (8, TENSOR)] {
        messages(count, len);
        let faults = messages(count, len);
        let pages = pages_of(count, len);
        assert!(faults < pages / 20, "{faults} faults reusing {count} x {len} B ({pages} pages)");
    }
}
