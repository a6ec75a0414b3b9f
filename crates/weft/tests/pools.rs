//! Pools: default, interactive and blocking.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

use common::{runtime, with_timeout, workers};
use weft::{Builder, Pool};

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

#[test]
fn spawn_on_interactive_runs_on_an_interactive_worker_and_spawn_keeps_the_pool() {
    with_timeout(|| {
        let rt = Builder::new()
            .worker_threads(2)
            .interactive_threads(1)
            .thread_name("pt")
            .build()
            .unwrap();
        let (outer, inner) = rt
            .spawn_on(Pool::Interactive, async {
                let child = weft::spawn(async { thread_name() }).await.unwrap();
                (thread_name(), child)
            })
            .join()
            .unwrap();
        assert_eq!(outer, "pt-interactive-0");
        assert_eq!(inner, "pt-interactive-0", "spawn keeps the caller's pool");
        let d = rt.spawn(async { thread_name() }).join().unwrap();
        assert!(d.starts_with("pt-") && !d.contains("interactive"), "{d}");
        let stats = rt.stats();
        assert_eq!(stats.pools.len(), 2);
        assert!(stats.pools[1].total_spawned >= 2, "{:?}", stats.pools[1]);
        assert!(stats.pools[1].total_polled >= 2);
    });
}

/// A task spawned onto another pool wakes a worker of that pool: the interactive task
/// runs while every default worker is blocked, which would deadlock if the insert
/// went to (or woke) the caller's pool.
#[test]
fn cross_pool_insert_wakes_the_target_pool_while_the_callers_pool_is_saturated() {
    with_timeout(|| {
        let rt = runtime(2, 1);
        let barrier = Arc::new(Barrier::new(3));
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
        let (done_tx, done_rx) = mpsc::channel();
        let blockers: Vec<_> = (0..2)
            .map(|i| {
                let barrier = barrier.clone();
                let release_rx = release_rx.clone();
                let done_tx = done_tx.clone();
                rt.spawn(async move {
                    barrier.wait(); // both default workers are now inside a task
                    if i == 0 {
                        // From a saturated default worker, spawn into the interactive pool.
                        let h = weft::spawn_on(Pool::Interactive, async { thread_name() });
                        done_tx.send(h).unwrap();
                    }
                    let _ = release_rx.lock().unwrap().recv();
                })
            })
            .collect();
        barrier.wait();
        let h = done_rx.recv().unwrap();
        // Joined from this plain thread while the default pool is still blocked.
        assert!(h.join().unwrap().contains("interactive"));
        release_tx.send(()).unwrap();
        release_tx.send(()).unwrap();
        for b in blockers {
            b.join().unwrap();
        }
    });
}

#[test]
fn zero_interactive_threads_runs_interactive_tasks_on_the_default_pool() {
    with_timeout(|| {
        let rt = Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .thread_name("zi")
            .build()
            .unwrap();
        let name = rt
            .spawn_on(Pool::Interactive, async { thread_name() })
            .join()
            .unwrap();
        assert_eq!(name, "zi-0");
        assert_eq!(rt.stats().pools.len(), 1);
    });
}

#[test]
fn spawn_blocking_runs_on_blocking_threads_and_grows_on_demand() {
    with_timeout(|| {
        let rt = Builder::new()
            .worker_threads(1)
            .max_blocking_threads(4)
            .thread_name("bl")
            .build()
            .unwrap();
        let barrier = Arc::new(Barrier::new(4));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let barrier = barrier.clone();
                // All four must run at once to pass the barrier.
                rt.spawn_blocking(move || {
                    barrier.wait();
                    thread_name()
                })
            })
            .collect();
        for h in hs {
            assert!(h.join().unwrap().starts_with("bl-blocking-"));
        }
        let b = rt.stats().blocking;
        assert_eq!(b.threads_started, 4);
        assert_eq!(b.tasks, 4);
        // Inside a blocking closure the runtime is current.
        let v = rt
            .spawn_blocking(|| weft::Handle::current().spawn(async { 3 }).join().unwrap())
            .join()
            .unwrap();
        assert_eq!(v, 3);
    });
}

#[test]
fn blocking_pool_caps_threads_and_queues_the_rest() {
    with_timeout(|| {
        let rt = Builder::new()
            .worker_threads(1)
            .max_blocking_threads(2)
            .build()
            .unwrap();
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..10)
            .map(|_| {
                let (running, peak) = (running.clone(), peak.clone());
                rt.spawn_blocking(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    running.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 2);
        assert!(rt.stats().blocking.threads_started <= 2);
    });
}

#[test]
fn idle_blocking_threads_retire_after_the_keep_alive() {
    with_timeout(|| {
        let rt = Builder::new()
            .worker_threads(1)
            .thread_keep_alive(Duration::from_millis(20))
            .build()
            .unwrap();
        rt.spawn_blocking(|| ()).join().unwrap();
        common::wait_until("the blocking thread retired", || {
            rt.stats().blocking.threads == 0
        });
        // A later closure starts a new thread.
        assert_eq!(rt.spawn_blocking(|| 9).join().unwrap(), 9);
        assert_eq!(rt.stats().blocking.threads_started, 2);
    });
}

#[test]
fn a_panicking_blocking_closure_is_reported_through_its_handle() {
    with_timeout(|| {
        let rt = workers(1);
        let err = rt
            .spawn_blocking(|| panic!("blocking boom"))
            .join()
            .unwrap_err();
        assert!(err.is_panic());
        assert_eq!(rt.spawn_blocking(|| 1).join().unwrap(), 1);
    });
}

#[test]
fn blocking_work_after_shutdown_is_cancelled() {
    with_timeout(|| {
        let rt = workers(1);
        let handle = rt.handle().clone();
        drop(rt);
        let err = handle.spawn_blocking(|| 1).join().unwrap_err();
        assert!(err.is_cancelled());
        let err = handle
            .spawn_on(Pool::Interactive, async { 1 })
            .join()
            .unwrap_err();
        assert!(err.is_cancelled());
    });
}

#[test]
fn bad_pool_configuration_is_an_error() {
    let err = Builder::new().max_blocking_threads(0).build().unwrap_err();
    assert!(err.to_string().contains("max_blocking_threads"), "{err}");
    let err = Builder::new()
        .interactive_threads(100_000)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("interactive_threads"), "{err}");
}
