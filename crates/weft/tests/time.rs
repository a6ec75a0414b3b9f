//! Timers: sleep, timeout, interval.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{block_a_worker, panic_message, runtime, with_timeout, workers};
use weft::time::{self, Instant, MissedTickBehavior};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn sleep_never_fires_early() {
    with_timeout(|| {
        let rt = workers(2);
        rt.block_on(async {
            for d in [0, 1, 2, 5, 13] {
                let start = Instant::now();
                time::sleep(ms(d)).await;
                assert!(
                    start.elapsed() >= ms(d),
                    "{d} ms sleep took {:?}",
                    start.elapsed()
                );
            }
        });
    });
}

#[test]
fn many_timers_fire_in_deadline_order() {
    with_timeout(|| {
        let rt = workers(2);
        let order = Arc::new(Mutex::new(Vec::new()));
        rt.block_on(async {
            let start = Instant::now();
            let hs: Vec<_> = (0..200u64)
                .rev()
                .map(|i| {
                    let order = order.clone();
                    weft::spawn(async move {
                        // Deadlines 3 ms apart, registered in reverse order.
                        time::sleep_until(start + ms(3 * i)).await;
                        order.lock().unwrap().push((i, Instant::now()));
                    })
                })
                .collect();
            for h in hs {
                h.await.unwrap();
            }
        });
        let order = order.lock().unwrap();
        assert_eq!(order.len(), 200);
        // Whoever runs later never has an earlier deadline by more than the wheel's
        // 1 ms resolution, except among tasks woken together, which run in queue
        // order: when the machine stalls the process past several deadlines (12 ms
        // under a loaded test run: timers 49 to 52 came due at once, and 51 ran
        // first), those run within a few hundred microseconds of each other.
        let mut by_time = order.clone();
        by_time.sort_by_key(|&(_, t)| t);
        let inversions = by_time
            .iter()
            .enumerate()
            .flat_map(|(k, a)| by_time[k + 1..].iter().map(move |b| (a, b)))
            .filter(|(a, b)| a.0 > b.0 + 1 && b.1 - a.1 > ms(2))
            .count();
        assert_eq!(inversions, 0, "timers fired out of order: {by_time:?}");
    });
}

#[test]
fn dropping_a_sleep_cancels_its_timer() {
    with_timeout(|| {
        let rt = workers(1);
        rt.block_on(async {
            let mut sleeps: Vec<_> = (0..1000)
                .map(|_| time::sleep(Duration::from_secs(60)))
                .collect();
            // Register them all.
            for s in sleeps.iter_mut() {
                let r = time::timeout(ms(0), s).await;
                assert!(r.is_err());
            }
        });
        // All those timers were cancelled when their Sleep was dropped.
        assert_eq!(rt.stats().timers_pending, 0);
    });
}

#[test]
fn timeout_around_the_boundary() {
    with_timeout(|| {
        let rt = workers(2);
        rt.block_on(async {
            // Finishes well before the deadline: Ok.
            let r = time::timeout(ms(200), time::sleep(ms(5))).await;
            assert!(r.is_ok());
            // Finishes well after: Err, and not before the deadline.
            let start = Instant::now();
            let r = time::timeout(ms(20), time::sleep(ms(500))).await;
            assert!(r.is_err());
            assert!(start.elapsed() >= ms(20));
            assert!(
                start.elapsed() < ms(400),
                "timeout fired late: {:?}",
                start.elapsed()
            );
            // A zero timeout on a ready future still gives its value.
            assert_eq!(time::timeout(ms(0), async { 3 }).await, Ok(3));
            // And on a pending one, an error.
            let e = time::timeout(ms(0), std::future::pending::<()>())
                .await
                .unwrap_err();
            assert_eq!(e.to_string(), "deadline has elapsed");
        });
    });
}

#[test]
fn timer_registered_while_every_worker_is_parked_fires_on_time() {
    with_timeout(|| {
        let rt = runtime(2, 1);
        // Let every worker go to sleep.
        std::thread::sleep(ms(50));
        assert_eq!(rt.stats().timers_pending, 0);
        let h = rt.handle().clone();
        let fired_after = std::thread::spawn(move || {
            // Registered from a plain thread (through block_on, which enters the runtime).
            h.block_on(async {
                let start = Instant::now();
                time::sleep(ms(30)).await;
                start.elapsed()
            })
        })
        .join()
        .unwrap();
        assert!(fired_after >= ms(30));
        assert!(fired_after < ms(500), "fired late: {fired_after:?}");
    });
}

#[test]
fn a_sleep_created_in_a_runtime_can_be_polled_from_a_plain_thread() {
    with_timeout(|| {
        let rt = workers(1);
        // Created (and bound) inside the runtime, then polled elsewhere.
        // Before the sleep is made: its deadline is 20 ms after it was made, which is
        // later than `start` (measured after it, a busy machine made this flaky).
        let start = Instant::now();
        let sleep = rt.spawn_blocking(|| time::sleep(ms(20))).join().unwrap();
        std::thread::spawn(move || futures_block_on(sleep))
            .join()
            .unwrap();
        assert!(start.elapsed() >= ms(20));
        drop(rt);
    });
}

/// A minimal block_on for a thread outside any runtime.
fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct T(std::thread::Thread);
    impl Wake for T {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(T(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn sleep_reset_moves_the_deadline_both_ways() {
    with_timeout(|| {
        let rt = workers(1);
        rt.block_on(async {
            let start = Instant::now();
            let mut s = time::sleep(Duration::from_secs(60));
            // Register it, then bring it forward.
            assert!(time::timeout(ms(1), &mut s).await.is_err());
            s.reset(Instant::now() + ms(10));
            (&mut s).await;
            assert!(start.elapsed() < Duration::from_secs(5));
            // Re-arm a completed sleep later.
            let t = Instant::now();
            s.reset(Instant::now() + ms(15));
            assert!(!s.is_elapsed());
            (&mut s).await;
            assert!(t.elapsed() >= ms(15));
        });
    });
}

#[test]
fn interval_ticks_on_schedule_and_handles_missed_ticks() {
    with_timeout(|| {
        let rt = workers(1);
        rt.block_on(async {
            let start = Instant::now();
            let mut iv = time::interval(ms(10));
            let first = iv.tick().await;
            assert!(
                first.duration_since(start) < ms(5),
                "first tick is immediate"
            );
            let second = iv.tick().await;
            assert_eq!(second - first, ms(10));

            for behavior in [
                MissedTickBehavior::Burst,
                MissedTickBehavior::Delay,
                MissedTickBehavior::Skip,
            ] {
                let mut iv = time::interval(ms(10));
                iv.set_missed_tick_behavior(behavior);
                let t0 = iv.tick().await;
                // Miss about three ticks.
                std::thread::sleep(ms(35));
                let late = iv.tick().await; // the overdue tick, at once
                assert_eq!(late, t0 + ms(10));
                let before = Instant::now();
                let next = iv.tick().await;
                let waited = before.elapsed();
                match behavior {
                    MissedTickBehavior::Burst => {
                        assert_eq!(next, t0 + ms(20));
                        assert!(waited < ms(5), "burst catches up at once ({waited:?})");
                    }
                    MissedTickBehavior::Delay => {
                        assert!(
                            next >= t0 + ms(45),
                            "delay restarts from now: {:?}",
                            next - t0
                        );
                    }
                    MissedTickBehavior::Skip => {
                        assert_eq!(next, t0 + ms(40), "skip keeps the phase");
                    }
                }
            }
        });
    });
}

#[test]
fn timers_from_many_tasks_and_threads() {
    with_timeout(|| {
        let rt = workers(2);
        let done = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let h = rt.handle().clone();
                let done = done.clone();
                std::thread::spawn(move || {
                    for i in 0..20u64 {
                        h.block_on(time::sleep(ms((i * 7 + t) % 5)));
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        rt.block_on(async {
            let hs: Vec<_> = (0..1000u64)
                .map(|i| {
                    let done = done.clone();
                    weft::spawn(async move {
                        time::sleep(ms(i % 17)).await;
                        done.fetch_add(1, Ordering::SeqCst);
                    })
                })
                .collect();
            for h in hs {
                h.await.unwrap();
            }
        });
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 1080);
        assert_eq!(rt.stats().timers_pending, 0);
    });
}

#[test]
fn sleep_outside_a_runtime_panics_with_a_clear_message_when_polled() {
    let s = time::sleep(ms(1));
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| futures_block_on(s))).unwrap_err();
    let msg = panic_message(&*err).unwrap();
    assert!(msg.contains("no weft runtime"), "{msg}");
}

/// While one worker is stuck in a long poll, the other drives the timers: the holder
/// is woken last for new work, and a holder that leaves hands the driver on.
#[test]
fn timers_fire_on_time_while_a_worker_is_stuck() {
    with_timeout(|| {
        let rt = runtime(2, 0);
        for round in 0..3 {
            std::thread::sleep(ms(20)); // both workers asleep, one holding the driver
            let hog = block_a_worker(&rt); // a badly behaved task blocks its worker
            let late = rt
                .spawn(async {
                    let start = Instant::now();
                    time::sleep(ms(30)).await;
                    start.elapsed()
                })
                .join()
                .unwrap();
            assert!(late >= ms(30));
            assert!(late < ms(200), "round {round}: a 30 ms sleep took {late:?}");
            hog.release();
        }
    });
}

/// Sleeps of a runtime that shuts down meanwhile still end at their deadlines, never
/// before: pending ones (a plain thread in `block_on`) and ones polled first after the
/// drop (on a handle kept alive). Nothing fires a dropped runtime's wheel, so they go
/// on on the process's alarm thread; before, the first slept for ever.
#[test]
fn sleeps_outlive_their_runtime() {
    with_timeout(|| {
        let rt = workers(2);
        let h = rt.handle().clone();
        let h2 = h.clone();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let pending = std::thread::spawn(move || {
            let start = Instant::now();
            h.block_on(async {
                let s = time::sleep(ms(300));
                started_tx.send(()).unwrap();
                s.await
            });
            start.elapsed()
        });
        started_rx.recv().unwrap();
        std::thread::sleep(ms(20));
        drop(rt);
        let slept = pending.join().unwrap();
        assert!(slept >= ms(300), "woke after {slept:?}");
        let start = Instant::now();
        h2.block_on(time::sleep(ms(50)));
        assert!(start.elapsed() >= ms(50));
        // A reset moves the deadline on the alarm thread too.
        let start = Instant::now();
        h2.block_on(async {
            let mut s = time::sleep(ms(1));
            s.reset(Instant::now() + ms(40));
            s.await
        });
        assert!(start.elapsed() >= ms(40));
    });
}
