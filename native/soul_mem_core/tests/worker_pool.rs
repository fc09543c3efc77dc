//! The global pool's setup (its own test binary: the pool is built once per process).

use soul_mem_core::worker_pool::{allowed_cpus, init_global, pin_target};

#[test]
fn the_global_pool_pins_each_worker_to_its_cpu_once() {
    let setup = init_global(true).expect("the first setup builds the pool");
    assert_eq!(setup.threads, rayon::current_num_threads());
    let allowed = allowed_cpus();
    assert_eq!(setup.pinned, allowed.len() >= 2);
    #[cfg(target_os = "linux")]
    if setup.pinned {
        let sets: Vec<Vec<usize>> = rayon::broadcast(|_| allowed_cpus());
        for (i, set) in sets.iter().enumerate() {
            assert_eq!(set, &vec![pin_target(&allowed, i).unwrap()], "worker {i}");
        }
        assert!(
            allowed_cpus().len() >= 2,
            "the calling thread keeps its own CPUs"
        );
    }
    assert_eq!(init_global(true), None, "a second setup changes nothing");
}
