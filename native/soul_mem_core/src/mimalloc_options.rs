//! What the processes that allocate with mimalloc (the NIF, `soul_tune`) set on it, in one
//! place so that benchmarks run the allocator as production does.

use libmimalloc_sys::{mi_option_set, mi_option_t};

/// `mi_option_purge_delay`: its position in `mi_option_e` of the mimalloc that
/// `libmimalloc-sys` vendors (v3). The crate exports no constant for it; the test reads the
/// option's default (1000 ms in v3's `options.c`, no neighbour's) through this number, so a
/// version whose list moved fails there.
const PURGE_DELAY: mi_option_t = 15;

/// Memory mimalloc freed stays with it for the next allocations instead of going back to the
/// system a second later (its default). A message's recall makes and frees tens of MB of
/// short-lived blocks, and with the default the messages after a pause faulted those pages
/// in again: ~5 % of the CPU time of the 100k working-memory benchmark, for ~20–40 MB of
/// peak RSS — what glibc's trim threshold of 64 MiB kept before (`soul_mem_nif`'s
/// `allocator.rs`).
///
/// Call once, before threads of this process allocate through mimalloc (the options are
/// plain globals).
pub fn keep_freed_memory() {
    // SAFETY: sets one integer option of the allocator; the caller runs it before other
    // threads use mimalloc.
    unsafe { mi_option_set(PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmimalloc_sys::mi_option_get;

    #[test]
    fn the_purge_delay_option_is_where_the_header_puts_it() {
        // SAFETY: reads one integer option.
        let delay = unsafe { mi_option_get(PURGE_DELAY) };
        // MIMALLOC_PURGE_DELAY in the environment would override the default.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(
                delay, 1000,
                "mi_option_purge_delay moved in mimalloc's option list"
            );
        }
    }
}
