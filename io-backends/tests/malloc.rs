//! `retain_freed_buffers`: freed megabyte buffers are reused without new page faults.
//! Its own test binary, since the setting is process-wide.

/// Minor page faults of the calling thread so far.
fn page_faults() -> i64 {
    let mut usage = unsafe { std::mem::zeroed::<libc::rusage>() };
    // SAFETY: getrusage fills the struct it is given.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
    usage.ru_minflt
}

/// Allocates and fills sixteen 1 MB buffers (as sixteen received messages), frees them,
/// and returns the page faults that took.
fn sixteen_messages() -> i64 {
    let before = page_faults();
    let buffers: Vec<Vec<u8>> = (0..16u8).map(|i| vec![i | 1; 1_000_000]).collect();
    assert!(buffers.iter().all(|b| b[999_999] != 0));
    drop(buffers);
    page_faults() - before
}

#[test]
fn freed_message_buffers_are_reused_without_page_faults() {
    let pages = 16 * 1_000_000 / 4096;
    // Without the setting glibc trims the 16 MB freed at its heap's top each round, and
    // every round faults all of its pages in again.
    let first = sixteen_messages();
    assert!(first >= pages / 2, "the first round maps its pages: {first} faults");
    assert_eq!(homa_io::retain_freed_buffers(), cfg!(target_env = "gnu"));
    if !cfg!(target_env = "gnu") {
        return;
    }
    sixteen_messages();
    let later = sixteen_messages();
    assert!(later < pages / 20, "{later} page faults reusing freed buffers ({pages} pages)");
}
