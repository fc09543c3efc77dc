//! How the NIF's allocations behave inside the BEAM.
//!
//! The emulator pins glibc malloc's trim threshold (`+MYtt`, 128 KiB by default), which
//! turns off glibc's adaptive thresholds. A recall allocates several buffers of one value
//! per note (400 KB each at 100k notes); with the pinned thresholds each was served by a
//! fresh `mmap` or trimmed off the heap top when freed, and every recall page-faulted its
//! buffers back in (11 % of a 100k-note recall's CPU time, measured with `perf` on the
//! server). On load the NIF sets both thresholds once, for the process: blocks below
//! [`MMAP_THRESHOLD`] come from malloc's heaps and up to [`TRIM_THRESHOLD`] of freed top
//! memory is kept for the next recall. Larger blocks (a big character's vectors) are still
//! mapped on their own and returned to the system when freed. Those thresholds now concern
//! SQLite's allocations: the NIF's own Rust allocations go to mimalloc ([`GLOBAL`]).

/// The allocator of every Rust allocation in the NIF. A message's recall makes and drops
/// hundreds of thousands of small blocks (each note loaded is parsed into strings and link
/// lists, copied, indexed and later released); mimalloc's per-thread free lists serve them
/// for ~3 % less CPU than glibc over a 100k-note working-memory benchmark, and its settle
/// (mostly frees) ~15 % faster. Transparent huge pages are off (`no_thp`): with them the
/// process held ~60 MB more for the same work. Freed memory is kept for reuse
/// ([`soul_mem_core::mimalloc_options::keep_freed_memory`], set at load).
#[global_allocator]
pub static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Allocations at least this large get their own mapping (glibc's maximum for this
/// threshold on 64-bit: half the 64 MiB heap of a thread arena).
pub const MMAP_THRESHOLD: i32 = 32 << 20;

/// Free memory at a heap's top kept for reuse before it is returned to the system.
pub const TRIM_THRESHOLD: i32 = 64 << 20;

/// Sets the thresholds; returns whether glibc accepted both (elsewhere there is nothing to
/// tune and this returns `true`). Idempotent.
pub fn tune() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt takes two integers and only changes malloc's parameters; glibc
        // serialises it with the arenas' locks.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_accepts_the_thresholds() {
        // A value glibc refused would leave the emulator's pinned defaults in place.
        assert!(tune());
        assert!(tune(), "setting them again is harmless");
    }
}
