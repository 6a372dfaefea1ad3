//! Keeping the memory of freed message buffers (glibc's `malloc`).

/// Makes glibc's `malloc` keep the memory of freed large blocks for the next ones, for the
/// whole process. Returns whether it did: `false` (and nothing changed) where the C library
/// is not 64-bit Linux glibc, or where the operator already tuned these thresholds
/// (`GLIBC_TUNABLES`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`). A program whose
/// `#[global_allocator]` is not the system's gets `true` and no effect.
///
/// Every received message is a fresh buffer of its length. By default glibc gives a freed
/// block of a megabyte back to the kernel (with `munmap`, or by trimming its heap once more
/// than a few megabytes are free at its top), so the next message's buffer is untouched
/// memory that the kernel maps and zeroes page by page while the payload is written into
/// it. With many large messages in flight this costs a lot: `homa bench throughput` with
/// sixteen 1 MB messages in flight over loopback ran at 35.8-45.0 Gbit/s with this against
/// 29.4-36.0 without (four alternating runs; page faults per whole run 14,162 against
/// 89,512 in one pair, with the earlier 4 MiB threshold; 1 MB blocks are kept either way).
/// With it, blocks below 32 MiB (glibc's largest setting) come from the heaps, and up to
/// 64 MiB of free memory stays at the top of each heap (glibc keeps up to 8 arenas per core),
/// so resident memory stays near its peak. The `homa` command calls this; a program that
/// receives large messages should too, or use an allocator that keeps freed memory.
pub fn retain_freed_buffers() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    {
        /// Blocks below this size come from `malloc`'s heaps, not from their own `mmap`: the
        /// most glibc allows, well above common message sizes (a 4 MiB tensor is 4 MiB plus
        /// malloc's header, so a threshold of exactly 4 MiB would map every one afresh).
        const MMAP_THRESHOLD: i32 = 32 << 20;
        /// Free memory kept at the top of each heap before it goes back to the kernel: twice
        /// the largest block, as glibc's own adaptive thresholds keep.
        const TRIM_THRESHOLD: i32 = 64 << 20;
        let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."))
            || std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
            || std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_some();
        // SAFETY: mallopt only sets malloc's parameters; any value is accepted or refused.
        !tuned
            && unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                    && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
            }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
    {
        false
    }
}
