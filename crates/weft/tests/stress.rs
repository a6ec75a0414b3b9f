//! Real-thread stress for what the loom models cannot reach: many workers, many
//! rounds, the sleep/wake handshake hit from every side. A lost wakeup shows up as a
//! hang, which `with_timeout` turns into a failure.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_channel::oneshot;

/// Each round lets the workers go idle, then wakes them with one task from outside.
#[test]
fn remote_spawn_into_an_idle_runtime_never_strands_a_task() {
    common::with_timeout(|| {
        for workers in [1, 2, 4] {
            let rt = common::workers(workers);
            for i in 0..2_000u64 {
                if i % 500 == 0 {
                    // Give every worker time to park.
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                assert_eq!(rt.spawn(async move { i }).join().unwrap(), i);
            }
        }
    });
}

/// Pairs of tasks on different workers hand a message back and forth through
/// oneshot channels, while outside threads spawn into the same runtime.
#[test]
fn cross_worker_ping_pong_with_remote_spawns() {
    common::with_timeout(|| {
        let rt = common::workers(4);
        let done = Arc::new(AtomicUsize::new(0));
        let pairs: Vec<_> = (0..50)
            .map(|_| {
                let done = done.clone();
                rt.spawn(async move {
                    for _ in 0..100 {
                        let (tx, rx) = oneshot::channel::<u32>();
                        let (tx2, rx2) = oneshot::channel::<u32>();
                        let echo = weft::spawn(async move {
                            let v = rx.await.unwrap();
                            tx2.send(v + 1).unwrap();
                        });
                        tx.send(1).unwrap();
                        assert_eq!(rx2.await.unwrap(), 2);
                        echo.await.unwrap();
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let outside: Vec<_> = (0..2)
            .map(|_| {
                let h = rt.handle().clone();
                std::thread::spawn(move || {
                    for i in 0..2_000u32 {
                        assert_eq!(h.spawn(async move { i }).join().unwrap(), i);
                    }
                })
            })
            .collect();
        for p in pairs {
            p.join().unwrap();
        }
        for t in outside {
            t.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 50);
    });
}

/// Bursts larger than a local queue (overflow into the global queue, stealing) from
/// inside a task, repeated with idle gaps.
#[test]
fn bursts_with_overflow_and_idle_gaps() {
    common::with_timeout(|| {
        let rt = common::workers(3);
        for round in 0..20u64 {
            let sum = rt.block_on(async move {
                let hs: Vec<_> = (0..1_000u64)
                    .map(|i| weft::spawn(async move { i + round }))
                    .collect();
                let mut s = 0;
                for h in hs {
                    s += h.await.unwrap();
                }
                s
            });
            assert_eq!(sum, 499_500 + 1_000 * round);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let stats = rt.stats();
        assert!(stats.total_spawned >= 20_000);
    });
}

/// Runtimes built and dropped in a loop while tasks are pending, woken from outside
/// during the drop.
#[test]
fn build_and_drop_with_concurrent_wakes() {
    common::with_timeout(|| {
        for _ in 0..50 {
            let rt = common::workers(2);
            let (tx, rx) = oneshot::channel::<()>();
            let h = rt.spawn(async move {
                let _ = rx.await;
            });
            let waker = std::thread::spawn(move || {
                let _ = tx.send(());
            });
            drop(rt);
            waker.join().unwrap();
            // Either it finished before the drop or it was cancelled: never lost.
            match h.join() {
                Ok(()) => {}
                Err(e) => assert!(e.is_cancelled(), "{e}"),
            }
        }
    });
}
