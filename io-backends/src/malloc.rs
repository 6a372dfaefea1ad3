//! Keeping the memory of freed message buffers (glibc's `malloc`).

/// Blocks up to this size come from `malloc`'s heaps, not from their own `mmap`.
const MMAP_THRESHOLD: i32 = 4 << 20;
/// Free memory kept at the top of each heap before it is given back to the kernel.
const TRIM_THRESHOLD: i32 = 32 << 20;

/// Makes glibc's `malloc` keep the memory of freed large blocks for the next ones, for the
/// whole process. Returns whether it could: `false` (and nothing changed) where the C
/// library is not glibc.
///
/// Every received message is a fresh buffer of its length. By default glibc gives a freed
/// block of a megabyte back to the kernel (with `munmap`, or by trimming its heap once more
/// than a few megabytes are free at its top), so the next message's buffer is untouched
/// memory that the kernel must map and zero page by page while the payload is written into
/// it. With many large messages in flight this can halve throughput: `homa bench
/// throughput` at 16 one-megabyte messages in flight over loopback took 5,000-9,000 page
/// faults per run with this against 10,000-210,000 without, and ran at 39-46 Gbit/s against
/// 24-38. With it, blocks up to 4 MB come from the heaps, and up to 32 MB of free memory
/// stays at the top of each heap (glibc keeps up to 8 heaps per core), so resident memory
/// stays near its peak. The `homa` command calls this; a program that moves large messages
/// should too, or use an allocator that keeps freed memory (such as jemalloc).
pub fn retain_freed_buffers() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt only sets malloc's parameters; any value is accepted or refused.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}
