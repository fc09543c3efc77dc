//! The process's compute pool: rayon's global pool (the similarity scan, the lexical channel,
//! the sub-queries' walks, working memory's long-term scan), set up once with each worker
//! pinned to its own CPU.
//!
//! Why pin: a recall is milliseconds of parallel work between pauses of seconds (a chat),
//! and during a pause the workers go to sleep. On this project's 2-vCPU machine a worker
//! woken after a pause was run on the CPU of the thread that woke it (to the kernel's wake-up
//! placement, an idle vCPU the host has descheduled looks busy), so a recall after a pause
//! ran on one core: the 100k-note pipeline took as long as on one thread (`soul_tune bench
//! recall --gap-ms 400`; numbers in `bench/README.md`). A pinned worker is woken on its own
//! CPU. What it costs: a worker cannot move away from a CPU that other work keeps busy;
//! rayon's work stealing lets the other workers take its queued jobs.

/// How the global pool was set up by [`init_global`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSetup {
    /// Worker threads.
    pub threads: usize,
    /// Whether each worker was asked to stay on one CPU.
    pub pinned: bool,
}

/// The CPU of worker `i` when the pool pins: the process's allowed CPUs in ascending order,
/// round robin. `None` (no pinning) when fewer than two CPUs are allowed: one CPU has
/// nothing to place. Complexity: O(1).
pub fn pin_target(allowed: &[usize], i: usize) -> Option<usize> {
    if allowed.len() < 2 {
        return None;
    }
    allowed.get(i % allowed.len()).copied()
}

/// Builds rayon's global pool (its default size: `RAYON_NUM_THREADS` or the CPUs available
/// to the process), workers named `soulmem-worker-N`, each pinned to one CPU when `pin` and
/// the platform allows it ([`pin_target`]; a refused pin leaves that worker free). Returns
/// `None` when the global pool already existed (it is built once per process: the first
/// caller or the first parallel call decides).
pub fn init_global(pin: bool) -> Option<PoolSetup> {
    let allowed = if pin { allowed_cpus() } else { Vec::new() };
    let pinned = pin_target(&allowed, 0).is_some();
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("soulmem-worker-{i}"))
        .start_handler(move |i| {
            if let Some(cpu) = pin_target(&allowed, i) {
                pin_current_thread(cpu);
            }
        })
        .build_global()
        .ok()
        .map(|()| PoolSetup {
            threads: rayon::current_num_threads(),
            pinned,
        })
}

/// Whether the environment asks for pinned workers: yes unless `SOUL_MEM_PIN_WORKERS` is
/// `0`, `false`, `no` or `off` (any case).
pub fn pin_from_env() -> bool {
    pin_wanted(std::env::var("SOUL_MEM_PIN_WORKERS").ok().as_deref())
}

/// [`pin_from_env`] for the variable's value (`None`: unset).
pub fn pin_wanted(value: Option<&str>) -> bool {
    value.is_none_or(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    })
}

/// The CPUs the calling thread may run on, ascending (empty where this is not known).
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::thread::{sched_getaffinity, CpuSet};
        if let Ok(set) = sched_getaffinity(None) {
            return (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
        }
    }
    Vec::new()
}

/// Asks the kernel to run the calling thread on `cpu` only; best effort.
fn pin_current_thread(cpu: usize) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::thread::{sched_setaffinity, CpuSet};
        let mut set = CpuSet::new();
        set.set(cpu);
        let _ = sched_setaffinity(None, &set);
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = cpu;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_take_the_allowed_cpus_round_robin() {
        let allowed = [1, 3, 6];
        let cpus: Vec<Option<usize>> = (0..5).map(|i| pin_target(&allowed, i)).collect();
        assert_eq!(cpus, [Some(1), Some(3), Some(6), Some(1), Some(3)]);
    }

    #[test]
    fn pinning_is_on_unless_turned_off() {
        for on in [None, Some("1"), Some("true"), Some("yes")] {
            assert!(pin_wanted(on), "{on:?}");
        }
        for off in ["0", "false", "FALSE", " no ", "off"] {
            assert!(!pin_wanted(Some(off)), "{off:?}");
        }
    }

    #[test]
    fn one_allowed_cpu_pins_nothing() {
        assert_eq!(pin_target(&[4], 0), None);
        assert_eq!(pin_target(&[], 0), None);
    }
}
