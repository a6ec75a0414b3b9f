//! Review of 3218580 (sleeps outlive their runtime: shutdown drains the wheel, later
//! sleeps wait on the process alarm thread). Safe public API only.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{child, with_limit, with_timeout, workers};
use weft::time::{self, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A thread-park executor that knows nothing of weft.
struct Unpark(std::thread::Thread);
impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}
fn park_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// Many plain threads sleep in `Handle::block_on` in tight loops while the runtime is
/// dropped from another thread: no sleep may end before its deadline, none may hang.
#[test]
fn sleeps_racing_the_drop_neither_hang_nor_end_early() {
    with_limit(Duration::from_secs(120), || {
        let early = Arc::new(AtomicUsize::new(0));
        let total = Arc::new(AtomicUsize::new(0));
        for round in 0..12u64 {
            let rt = workers(2);
            let stop = Arc::new(AtomicBool::new(false));
            let threads: Vec<_> = (0..6u64)
                .map(|t| {
                    let h = rt.handle().clone();
                    let (stop, early, total) = (stop.clone(), early.clone(), total.clone());
                    std::thread::spawn(move || {
                        // Bounded: at most 400 sleeps, and a few after the drop.
                        let mut after = 0;
                        for i in 0..400u64 {
                            let d = ms((i + t + round) % 4);
                            let start = Instant::now();
                            h.block_on(time::sleep(d));
                            total.fetch_add(1, Ordering::Relaxed);
                            if start.elapsed() < d {
                                early.fetch_add(1, Ordering::Relaxed);
                            }
                            if stop.load(Ordering::Relaxed) {
                                after += 1;
                                if after > 5 {
                                    break;
                                }
                            }
                        }
                    })
                })
                .collect();
            std::thread::sleep(ms(2 + round * 3));
            drop(rt);
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                t.join().unwrap();
            }
        }
        assert_eq!(early.load(Ordering::Relaxed), 0, "sleeps ended early");
        eprintln!("sleeps: {}", total.load(Ordering::Relaxed));
    });
}

/// Timeouts and intervals in a plain thread's `block_on` across the drop, the runtime
/// shut down by `shutdown_timeout` while one of its workers is stuck in a task.
#[test]
fn timeout_and_interval_across_shutdown_timeout() {
    with_timeout(|| {
        let rt = workers(2);
        let h = rt.handle().clone();
        // A task that holds its worker well past the shutdown timeout.
        rt.spawn(async { std::thread::sleep(ms(600)) });
        let h1 = h.clone();
        let tmo = std::thread::spawn(move || {
            let start = Instant::now();
            let r = h1.block_on(time::timeout(ms(300), std::future::pending::<()>()));
            (r.is_err(), start.elapsed())
        });
        let h2 = h.clone();
        let ticks = std::thread::spawn(move || {
            h2.block_on(async {
                let start = Instant::now();
                let mut iv = time::interval(ms(40));
                let mut at = Vec::new();
                for _ in 0..8 {
                    iv.tick().await;
                    at.push(start.elapsed());
                }
                at
            })
        });
        std::thread::sleep(ms(60));
        rt.shutdown_timeout(ms(50));
        let (elapsed, took) = tmo.join().unwrap();
        assert!(elapsed, "the timeout did not elapse");
        assert!(took >= ms(300), "the timeout elapsed after {took:?}");
        let at = ticks.join().unwrap();
        for (i, t) in at.iter().enumerate() {
            assert!(*t >= ms(40) * i as u32, "tick {i} at {t:?}: {at:?}");
        }
        // After the drop: a new sleep, reset earlier and later.
        let start = Instant::now();
        h.block_on(async {
            let mut s = time::sleep(ms(10_000));
            // Polled once (files it on the alarm thread), then moved earlier.
            let _ = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut s).poll(cx))).await;
            s.reset(Instant::now() + ms(30));
            (&mut s).await;
            assert!(start.elapsed() >= ms(30));
            let later = Instant::now() + ms(80);
            s.reset(Instant::now() + ms(20));
            let _ = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut s).poll(cx))).await;
            s.reset(later);
            (&mut s).await;
            assert!(Instant::now() >= later);
        });
    });
}

/// A sleep created and first polled on a worker, moved out, polled after the drop on
/// a thread with an executor that knows nothing of weft.
#[test]
fn worker_sleep_polled_elsewhere_after_the_drop() {
    with_timeout(|| {
        let rt = workers(2);
        let (s, deadline) = rt.block_on(async {
            weft::spawn(async {
                let mut s = Box::pin(time::sleep(ms(150)));
                let d = s.deadline();
                std::future::poll_fn(|cx| {
                    assert!(s.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                (s, d)
            })
            .await
            .unwrap()
        });
        drop(rt);
        std::thread::spawn(move || {
            park_on(s);
            assert!(Instant::now() >= deadline);
        })
        .join()
        .unwrap();
        // Timer channels made off any runtime still work.
        let start = Instant::now();
        let rx = weft::chan::after(ms(30));
        rx.recv_blocking().unwrap();
        assert!(start.elapsed() >= ms(30));
    });
}

/// The runtime dropped from inside one of its own tasks, with a plain thread asleep.
#[test]
fn runtime_dropped_from_its_own_task() {
    with_timeout(|| {
        let rt = workers(2);
        let h = rt.handle().clone();
        let sleeper = std::thread::spawn(move || {
            let start = Instant::now();
            h.block_on(time::sleep(ms(200)));
            start.elapsed()
        });
        std::thread::sleep(ms(20));
        let rt = Arc::new(std::sync::Mutex::new(Some(rt)));
        let (tx, rx) = mpsc::channel();
        let rt2 = rt.clone();
        let h = rt.lock().unwrap().as_ref().unwrap().handle().clone();
        h.spawn(async move {
            let me = rt2.lock().unwrap().take();
            drop(me);
            // Still on the dying worker: a sleep here goes to the alarm thread.
            let start = Instant::now();
            time::sleep(ms(30)).await;
            let _ = tx.send(start.elapsed());
        });
        let slept = sleeper.join().unwrap();
        assert!(slept >= ms(200), "{slept:?}");
        // The task's own sleep either completed at its deadline or the task was
        // cancelled with its worker; it must not report an early wake.
        if let Ok(d) = rx.recv_timeout(ms(5_000)) {
            assert!(d >= ms(30), "{d:?}");
        }
    });
}

fn proc_status(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Many runtimes dropped with sleeps pending on plain threads: threads come back to
/// the baseline (one alarm thread per process), and memory does not grow with them.
#[test]
fn child_runtimes_dropped_in_a_loop() {
    if std::env::var_os("REVIEW_S19T_CHILD").is_none() {
        return;
    }
    let round = |n: u64| {
        for i in 0..n {
            let rt = workers(2);
            let h = rt.handle().clone();
            let sleepers: Vec<_> = (0..3u64)
                .map(|k| {
                    let h = h.clone();
                    std::thread::spawn(move || {
                        h.block_on(async move {
                            let mut s = time::sleep(ms(5 + k));
                            // Armed after the drop, and a far one that is dropped.
                            let far = time::sleep(ms(3_600_000));
                            let mut far = std::pin::pin!(far);
                            let _ =
                                std::future::poll_fn(|cx| Poll::Ready(far.as_mut().poll(cx))).await;
                            (&mut s).await;
                        })
                    })
                })
                .collect();
            if i % 2 == 0 {
                std::thread::sleep(ms(1));
            }
            drop(rt);
            for s in sleepers {
                s.join().unwrap();
            }
        }
    };
    round(30);
    std::thread::sleep(ms(50));
    let (t0, m0) = (proc_status("Threads:"), proc_status("VmRSS:"));
    round(300);
    std::thread::sleep(ms(50));
    let (t1, m1) = (proc_status("Threads:"), proc_status("VmRSS:"));
    println!("CHILD threads={t0}->{t1} rss_kb={m0}->{m1}");
    assert!(t1 <= t0, "threads grew {t0} -> {t1}");
    assert!(m1 < m0 + 8 * 1024, "VmRSS grew {m0} -> {m1} kB");
    println!("CHILD done=ok");
}

#[test]
fn runtimes_dropped_in_a_loop() {
    with_limit(Duration::from_secs(150), || {
        let out = child::run(
            "child_runtimes_dropped_in_a_loop",
            &[("REVIEW_S19T_CHILD", "1")],
            Duration::from_secs(120),
        );
        eprintln!("{}", out.stdout);
        out.assert_finished();
    });
}

/// A waker that panics when woken: at shutdown (the driver guards it), and on the
/// alarm thread afterwards. The alarm thread is one per process, so a panic there must
/// not stop it: every later off-runtime timer would hang.
#[test]
fn child_panicking_waker_on_the_alarm_thread() {
    if std::env::var_os("REVIEW_S19T_CHILD").is_none() {
        return;
    }
    struct Bomb;
    impl Wake for Bomb {
        fn wake(self: Arc<Self>) {
            panic!("bomb waker");
        }
    }
    let bomb = Waker::from(Arc::new(Bomb));
    let rt = workers(1);
    let h = rt.handle().clone();
    // Registered on the wheel: woken (guarded) by the shutdown.
    let mut on_wheel = {
        let _g = h.enter();
        // Long enough that no worker fires it before the drop, even under valgrind.
        Box::pin(time::sleep(ms(1_500)))
    };
    let deadline = on_wheel.deadline();
    assert!(on_wheel
        .as_mut()
        .poll(&mut Context::from_waker(&bomb))
        .is_pending());
    drop(rt);
    println!("CHILD shutdown=survived");
    // Re-polled with the bomb: now on the alarm thread, which wakes the bomb at its
    // deadline.
    assert!(on_wheel
        .as_mut()
        .poll(&mut Context::from_waker(&bomb))
        .is_pending());
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + ms(300));
    // Off-runtime timers after that must still fire.
    let start = Instant::now();
    h.block_on(time::sleep(ms(30)));
    assert!(start.elapsed() >= ms(30));
    weft::chan::after(ms(10)).recv_blocking().unwrap();
    println!("CHILD done=ok");
}

#[test]
fn panicking_waker_on_the_alarm_thread() {
    with_limit(Duration::from_secs(60), || {
        let out = child::run(
            "child_panicking_waker_on_the_alarm_thread",
            &[("REVIEW_S19T_CHILD", "1")],
            Duration::from_secs(20),
        );
        out.assert_finished();
    });
}

/// A sleep moved to later deadlines after its runtime shut down (an idle timeout
/// pushed back on every message, say): each move arms a new alarm entry that shares
/// the sleep's slot, so none is forgotten, not even after the sleep is dropped, until
/// the earliest of their deadlines passes.
#[test]
fn child_reset_sleeps_do_not_pile_up_alarms() {
    if std::env::var_os("REVIEW_S19T_CHILD").is_none() {
        return;
    }
    let rt = workers(1);
    let h = rt.handle().clone();
    drop(rt);
    let noop = Waker::noop();
    let mut cx = Context::from_waker(noop);
    let _g = h.enter();
    let run = |n: u32, cx: &mut Context<'_>| {
        for _ in 0..n {
            let mut s = Box::pin(time::sleep(ms(3_600_000)));
            for k in 0..4u64 {
                assert!(s.as_mut().poll(cx).is_pending());
                let d = s.deadline();
                s.as_mut().reset(d + ms(1 + k));
            }
            drop(s);
        }
    };
    run(2_000, &mut cx);
    std::thread::sleep(ms(200));
    let m0 = proc_status("VmRSS:");
    let start = Instant::now();
    run(50_000, &mut cx);
    let took = start.elapsed();
    std::thread::sleep(ms(500));
    let m1 = proc_status("VmRSS:");
    println!("CHILD rss_kb={m0}->{m1} took={took:?}");
    assert!(m1 < m0 + 4 * 1024, "VmRSS grew {m0} -> {m1} kB");
    println!("CHILD done=ok");
}

#[test]
fn reset_sleeps_do_not_pile_up_alarms() {
    with_limit(Duration::from_secs(150), || {
        let out = child::run(
            "child_reset_sleeps_do_not_pile_up_alarms",
            &[("REVIEW_S19T_CHILD", "1")],
            Duration::from_secs(120),
        );
        eprintln!("{}", out.stdout);
        out.assert_finished();
    });
}
