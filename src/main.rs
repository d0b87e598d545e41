//! The `gaptop` binary: everything it does is the library's command line ([`gaptop::cli`]),
//! after one setting of the allocator.

fn main() -> std::process::ExitCode {
    big_allocations_mapped();
    gaptop::cli::main()
}

/// Allocations of 128 KiB and more get pages of their own, given back when freed: glibc's
/// mmap threshold fixed at its initial value. By default it rises to the size of each large
/// block freed, after which the analysis' lists of a few MB stay in the arenas of the threads
/// that made them: a report of 1M ops peaked at 114 MB instead of 91 (docs/perf.md), at the
/// same speed. The viewer's only `unsafe` (its library forbids it): one call, before any
/// thread starts.
fn big_allocations_mapped() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter and touches no memory of ours; it is called
    // before any other thread exists. Its result (0 when refused) changes nothing we rely on.
    unsafe {
        nix::libc::mallopt(nix::libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}
