//! Review of commit e8beb34 (a worker kept by a wait that wakes itself fires due
//! timers, and every 64th idle yield polls the sockets: `Core::fire_due_for_a_busy_wait`,
//! called from `yield_to_others` and from `run_until` before it wakes the yielded
//! waits). Attacked from safe code through the public API: streams of due timers while
//! waits yield (starvation, `run_until` exit), timers fired inside a task's poll whose
//! wakers reach other runtimes, other workers' fibers, JoinHandles, panic or re-enter
//! weft; sockets seen by a worker kept by a spinning wait; runtime drops with spinning
//! waits and pending timers.
//!
//! No failure after the change; 6 of the 12 tests fail at da94c60, before it (the
//! timers and sockets that only a worker kept by the spinning wait could fire).
//!
//! Every test runs under a watchdog.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::spawn::{fiber_on, join_within};
use common::watchdog;
use weft::Runtime;

/// A runtime of `workers` workers and no interactive pool.
fn rt(workers: usize) -> Runtime {
    common::runtime(workers, 0)
}

/// A self-waking `weft::wait` until `cond()` or `limit`; returns `cond()`.
fn spin_wait_until(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    weft::wait(std::future::poll_fn(|cx| {
        if cond() || start.elapsed() > limit {
            Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }));
    cond()
}

/// A `fiber::yield_now` loop (off a fiber: the worker's yield) until `cond()` or `limit`.
fn yield_loop_until(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !cond() && start.elapsed() < limit {
        weft::fiber::yield_now();
    }
    cond()
}

fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// Idea 1: a stream of timers that keep coming due (32 tasks re-arming 1 ms sleeps and
/// an interval of 1 ms) while several waits yield on the same worker(s): the yielded
/// waits must still get polled (each counts 3000 self-woken polls), the timer tasks
/// must tick, and everything must end.
#[test]
fn due_timer_stream_does_not_starve_yielded_waits() {
    watchdog(25, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let stop = flag();
            let ticks = Arc::new(AtomicUsize::new(0));
            let mut tickers = Vec::new();
            for i in 0..32 {
                let (stop, ticks) = (stop.clone(), ticks.clone());
                tickers.push(rt.spawn(async move {
                    while !stop.load(SeqCst) {
                        weft::time::sleep(Duration::from_micros(300 + 50 * i)).await;
                        ticks.fetch_add(1, SeqCst);
                    }
                }));
            }
            {
                let (stop, ticks) = (stop.clone(), ticks.clone());
                tickers.push(rt.spawn(async move {
                    let mut iv = weft::time::interval(Duration::from_millis(1));
                    while !stop.load(SeqCst) {
                        iv.tick().await;
                        ticks.fetch_add(1, SeqCst);
                    }
                }));
            }
            std::thread::sleep(Duration::from_millis(5));
            let waiters: Vec<_> = (0..4)
                .map(|k| {
                    rt.spawn(async move {
                        let mut polls = 0u32;
                        weft::wait(std::future::poll_fn(|cx| {
                            polls += 1;
                            if polls >= 3000 {
                                Poll::Ready(())
                            } else {
                                cx.waker().wake_by_ref();
                                Poll::Pending
                            }
                        }));
                        // and a yield_now loop with a count
                        for _ in 0..(500 + k) {
                            weft::fiber::yield_now();
                        }
                        polls
                    })
                })
                .collect();
            let before = ticks.load(SeqCst);
            for w in waiters {
                assert_eq!(join_within(w, 15).unwrap(), 3000);
            }
            // The timers kept firing meanwhile (or after).
            let t0 = Instant::now();
            while ticks.load(SeqCst) < before + 50 && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                ticks.load(SeqCst) >= before + 50,
                "timer tasks stopped ticking"
            );
            stop.store(true, SeqCst);
            for t in tickers {
                join_within(t, 10).unwrap();
            }
            common::drop_within(rt, Duration::from_secs(10), "after the timer stream");
        }
    });
}

/// Idea 4 / run_until exit: the yielding future polls a sleep, a timeout and an
/// interval of its own runtime inside itself (and wakes itself on every pending poll):
/// on one worker only the wait's own `fire_due_for_a_busy_wait` can fire them.
#[test]
fn sleep_timeout_interval_inside_the_self_waking_future() {
    watchdog(25, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let hs: Vec<_> = (0..3u32)
                .map(|kind| {
                    rt.spawn(async move {
                        let start = Instant::now();
                        match kind {
                            0 => {
                                let mut s = Box::pin(weft::time::sleep(Duration::from_millis(20)));
                                weft::wait(std::future::poll_fn(|cx| {
                                    if s.as_mut().poll(cx).is_ready() {
                                        return Poll::Ready(());
                                    }
                                    cx.waker().wake_by_ref();
                                    Poll::Pending
                                }));
                            }
                            1 => {
                                let mut t = Box::pin(weft::time::timeout(
                                    Duration::from_millis(20),
                                    std::future::pending::<()>(),
                                ));
                                let r = weft::wait(std::future::poll_fn(|cx| {
                                    if let Poll::Ready(r) = t.as_mut().poll(cx) {
                                        return Poll::Ready(r);
                                    }
                                    cx.waker().wake_by_ref();
                                    Poll::Pending
                                }));
                                assert!(r.is_err(), "a timeout of pending() completed");
                            }
                            _ => {
                                let mut iv = weft::time::interval(Duration::from_millis(2));
                                let mut n = 0;
                                weft::wait(std::future::poll_fn(|cx| {
                                    while iv.poll_tick(cx).is_ready() {
                                        n += 1;
                                        if n >= 10 {
                                            return Poll::Ready(());
                                        }
                                    }
                                    cx.waker().wake_by_ref();
                                    Poll::Pending
                                }));
                            }
                        }
                        start.elapsed()
                    })
                })
                .collect();
            for h in hs {
                let e = join_within(h, 10).unwrap();
                assert!(e >= Duration::from_millis(18), "ended early: {e:?}");
                assert!(e < Duration::from_secs(5), "took {e:?}");
            }
            common::drop_within(rt, Duration::from_secs(10), "after timers in a busy wait");
        }
    });
}

/// Idea 2: a timer of runtime A (one worker, kept by a self-waking wait) whose waker
/// is a task of runtime B: A's busy wait fires it (inside its own poll), and B's task
/// sets the flag A's wait waits for. Also a JoinHandle chain: B's task is joined by a
/// plain thread and by a task of A polled inside the busy wait.
#[test]
fn timer_fired_in_a_busy_wait_wakes_another_runtime_and_joinhandles() {
    watchdog(25, || {
        let a = rt(1);
        let b = rt(1);
        for round in 0..20 {
            // Made inside the runtime (its timers), returned unawaited.
            #[allow(clippy::async_yields_async)]
            let sleep_a = a.block_on(async { weft::time::sleep(Duration::from_millis(3)) });
            let f = flag();
            let f2 = f.clone();
            let hb = b.spawn(async move {
                sleep_a.await;
                f2.store(true, SeqCst);
                round
            });
            let f3 = f.clone();
            let ha = a.spawn(async move {
                let mut hb = hb;
                // The busy wait polls B's JoinHandle inside itself, and waits for the flag.
                let mut got = None;
                let start = Instant::now();
                weft::wait(std::future::poll_fn(|cx| {
                    if got.is_none() {
                        if let Poll::Ready(r) = Pin::new(&mut hb).poll(cx) {
                            got = Some(r.unwrap());
                        }
                    }
                    if (got.is_some() && f3.load(SeqCst))
                        || start.elapsed() > Duration::from_secs(5)
                    {
                        Poll::Ready(())
                    } else {
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                }));
                got
            });
            assert_eq!(join_within(ha, 10).unwrap(), Some(round), "round {round}");
            assert!(f.load(SeqCst));
        }
        common::drop_within(a, Duration::from_secs(10), "runtime A");
        common::drop_within(b, Duration::from_secs(10), "runtime B");
    });
}

/// Idea 2: on two workers, fibers (tied to whichever worker) sleep in a loop while
/// tasks on both workers busy-wait (self-waking waits and yield_now loops) for all
/// the fibers to finish: whoever fires a fiber's timer, the fiber runs on its worker.
#[test]
fn fiber_timers_fired_by_busy_waits_on_two_workers() {
    watchdog(25, || {
        let rt = rt(2);
        let done = Arc::new(AtomicUsize::new(0));
        let fibers: Vec<_> = (0..6)
            .map(|_| {
                let done = done.clone();
                fiber_on(&rt, move || {
                    for _ in 0..10 {
                        weft::fiber::sleep(Duration::from_millis(1));
                    }
                    done.fetch_add(1, SeqCst);
                })
            })
            .collect();
        let spinners: Vec<_> = (0..4)
            .map(|k| {
                let done = done.clone();
                rt.spawn(async move {
                    let cond = || done.load(SeqCst) == 6;
                    if k % 2 == 0 {
                        spin_wait_until(Duration::from_secs(6), cond)
                    } else {
                        yield_loop_until(Duration::from_secs(6), cond)
                    }
                })
            })
            .collect();
        for s in spinners {
            assert!(
                join_within(s, 15).unwrap(),
                "a busy wait never saw the fibers end"
            );
        }
        for f in fibers {
            join_within(f, 10).unwrap();
        }
        common::drop_within(rt, Duration::from_secs(10), "after fibers and busy waits");
    });
}

/// A waker whose wake runs a closure (on whatever thread fires the timer).
struct FnWaker<F: Fn() + Send + Sync + 'static>(F);

impl<F: Fn() + Send + Sync + 'static> Wake for FnWaker<F> {
    fn wake(self: Arc<Self>) {
        (self.0)()
    }
}

/// Registers a 2 ms sleep of `rt` with a waker that runs `f` (from a plain thread: the
/// sleep is polled once by hand and kept alive in the returned box).
fn timer_calling(
    rt: &Runtime,
    f: impl Fn() + Send + Sync + 'static,
) -> Pin<Box<weft::time::Sleep>> {
    // Made inside the runtime (its timers), returned unawaited.
    #[allow(clippy::async_yields_async)]
    let mut s = Box::pin(rt.block_on(async { weft::time::sleep(Duration::from_millis(2)) }));
    let w = Waker::from(Arc::new(FnWaker(f)));
    assert!(common::poll_once(s.as_mut(), &w).is_pending());
    s
}

/// Idea 2: timers whose wakers panic, spawn, re-arm weft timers, do a nested
/// `weft::wait` (a sleep, a join of a task), are fired by a self-waking wait on a
/// one-worker runtime (so inside that task's poll). Nothing deadlocks or escapes, and
/// every callback's effect is seen.
#[test]
fn timer_wakers_that_panic_or_reenter_weft_inside_a_busy_wait() {
    watchdog(25, || {
        let rt = rt(1);
        let handle = rt.handle().clone();
        let effects = Arc::new(AtomicUsize::new(0));
        let started = flag();
        let (e2, s2) = (effects.clone(), started.clone());
        let spinner = rt.spawn(async move {
            s2.store(true, SeqCst);
            // 4 callbacks + spawned task
            spin_wait_until(Duration::from_secs(8), || e2.load(SeqCst) >= 5)
        });
        while !started.load(SeqCst) {
            std::thread::yield_now();
        }
        let mut keep = Vec::new();
        // 1: panics.
        keep.push(timer_calling(&rt, || {
            panic!("review_s32b: a waker that panics")
        }));
        // 2: spawns a task on the runtime.
        let (e, h) = (effects.clone(), handle.clone());
        keep.push(timer_calling(&rt, move || {
            let e = e.clone();
            e.fetch_add(1, SeqCst);
            h.spawn(async move {
                weft::time::sleep(Duration::from_millis(1)).await;
                e.fetch_add(1, SeqCst);
            });
        }));
        // 3: a nested weft::wait on a sleep (inside the wake, inside the busy wait).
        let e = effects.clone();
        keep.push(timer_calling(&rt, move || {
            weft::wait(weft::time::sleep(Duration::from_millis(2)));
            e.fetch_add(1, SeqCst);
        }));
        // 4: a nested weft::wait that joins a task spawned in the wake.
        let (e, h) = (effects.clone(), handle.clone());
        keep.push(timer_calling(&rt, move || {
            let j = h.spawn(async { 7 });
            assert_eq!(weft::wait(j).unwrap(), 7);
            e.fetch_add(1, SeqCst);
        }));
        // 5: re-arms a timer by a nested sleep of 0 and a fiber sleep... as a fiber.
        let (e, h) = (effects.clone(), handle.clone());
        keep.push(timer_calling(&rt, move || {
            let e = e.clone();
            let _ = h.block_on(async move {
                Some(weft::fiber::spawn(move || {
                    weft::fiber::sleep(Duration::from_millis(1));
                    e.fetch_add(1, SeqCst);
                }))
            });
        }));
        let saw = join_within(spinner, 15).unwrap();
        assert!(saw, "effects seen: {}", effects.load(SeqCst));
        drop(keep);
        common::drop_within(rt, Duration::from_secs(10), "after re-entrant timer wakers");
    });
}

/// Idea 3: a task busy-waits (self-waking wait / yield_now loop) on a one-worker
/// runtime for a flag set by another task that awaits a loopback TCP read, which a
/// plain thread writes after the busy wait began. No timer is pending: only the
/// every-64th socket poll of the busy wait can see the data.
#[test]
fn busy_wait_sees_a_tcp_read_on_one_worker() {
    use weft::io::AsyncReadExt;
    watchdog(25, || {
        for how in 0..2 {
            let rt = rt(1);
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let got = flag();
            let reading = flag();
            let (g2, r2) = (got.clone(), reading.clone());
            let reader = rt.spawn(async move {
                let mut s = weft::net::TcpStream::connect(addr).await.unwrap();
                r2.store(true, SeqCst);
                let mut buf = [0u8; 4];
                let n = s.read(&mut buf).await.unwrap();
                g2.store(true, SeqCst);
                n
            });
            let (mut peer, _) = l.accept().unwrap();
            while !reading.load(SeqCst) {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(5)); // the reader parks in its read
            let g3 = got.clone();
            let spinning = flag();
            let sp2 = spinning.clone();
            let spinner = rt.spawn(async move {
                sp2.store(true, SeqCst);
                let cond = || g3.load(SeqCst);
                if how == 0 {
                    spin_wait_until(Duration::from_secs(5), cond)
                } else {
                    yield_loop_until(Duration::from_secs(5), cond)
                }
            });
            while !spinning.load(SeqCst) {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(10));
            std::io::Write::write_all(&mut peer, b"ping").unwrap();
            assert!(
                join_within(spinner, 10).unwrap(),
                "how {how}: the busy wait never saw the TCP read complete"
            );
            assert!(join_within(reader, 10).unwrap() > 0);
            common::drop_within(rt, Duration::from_secs(10), "after the tcp busy wait");
        }
    });
}

/// Idea 3, UDP and two workers both kept busy by spinning waits.
#[test]
fn busy_waits_see_udp_datagrams_on_two_busy_workers() {
    watchdog(25, || {
        let rt = rt(2);
        let sock = rt.block_on(async { weft::net::UdpSocket::bind("127.0.0.1:0").await.unwrap() });
        let addr = sock.local_addr().unwrap();
        let got = Arc::new(AtomicUsize::new(0));
        let g2 = got.clone();
        let reader = rt.spawn(async move {
            let mut buf = [0u8; 16];
            for _ in 0..5 {
                sock.recv(&mut buf).await.unwrap();
                g2.fetch_add(1, SeqCst);
            }
        });
        std::thread::sleep(Duration::from_millis(5));
        let spinners: Vec<_> = (0..2)
            .map(|k| {
                let g = got.clone();
                rt.spawn(async move {
                    let cond = || g.load(SeqCst) >= 5;
                    if k == 0 {
                        spin_wait_until(Duration::from_secs(6), cond)
                    } else {
                        yield_loop_until(Duration::from_secs(6), cond)
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(10));
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..5 {
            tx.send_to(b"x", addr).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        for s in spinners {
            assert!(
                join_within(s, 10).unwrap(),
                "a busy wait never saw the datagrams (got {})",
                got.load(SeqCst)
            );
        }
        join_within(reader, 10).unwrap();
        common::drop_within(rt, Duration::from_secs(10), "after the udp busy waits");
    });
}

/// Idea 4: runtime drop while busy waits (self-waking, yield_now loops, futures that
/// poll their own long sleep), sleeping tasks and fibers with long timers pending, on
/// one and two workers. The busy waits end at shutdown (their sleep's timer is woken
/// by the shutdown and waited out on the alarm thread) or by their deadline.
#[test]
fn runtime_drop_with_busy_waits_and_pending_timers() {
    watchdog(40, || {
        for workers in [1, 2] {
            for delay_ms in [0u64, 3, 20] {
                let rt = rt(workers);
                for k in 0..6u32 {
                    rt.spawn(async move {
                        match k % 3 {
                            0 => {
                                let mut s = Box::pin(weft::time::sleep(Duration::from_millis(300)));
                                weft::wait(std::future::poll_fn(|cx| {
                                    if s.as_mut().poll(cx).is_ready() {
                                        return Poll::Ready(());
                                    }
                                    cx.waker().wake_by_ref();
                                    Poll::Pending
                                }));
                            }
                            1 => {
                                yield_loop_until(Duration::from_millis(400), || false);
                            }
                            _ => {
                                weft::time::sleep(Duration::from_secs(60)).await;
                            }
                        }
                    });
                }
                for _ in 0..2 {
                    drop(fiber_on(&rt, || {
                        weft::fiber::sleep(Duration::from_secs(60))
                    }));
                }
                std::thread::sleep(Duration::from_millis(delay_ms));
                common::drop_within(rt, Duration::from_secs(8), "busy waits + pending timers");
            }
        }
    });
}

/// Idea 1/2: a future woken only by its own timers (a fresh 0-1 ms sleep each time it
/// fires) that also wakes itself on some polls; many such waits on one and two workers,
/// each must see all 40 of its timers (no wake lost to the yield's reset of the signal
/// after `fire_due_for_a_busy_wait` fired the wait's own timer).
#[test]
fn waits_woken_by_their_own_timers_and_by_themselves() {
    watchdog(25, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let hs: Vec<_> = (0..8u64)
                .map(|k| {
                    rt.spawn(async move {
                        let mut rng = common::Rng(k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
                        let mut fired = 0u32;
                        let mut s = Box::pin(weft::time::sleep(Duration::from_micros(500)));
                        let start = Instant::now();
                        weft::wait(std::future::poll_fn(|cx| {
                            loop {
                                if fired >= 40 || start.elapsed() > Duration::from_secs(8) {
                                    return Poll::Ready(());
                                }
                                if s.as_mut().poll(cx).is_ready() {
                                    fired += 1;
                                    let us = rng.below(1200);
                                    s.as_mut().reset(Instant::now() + Duration::from_micros(us));
                                    continue;
                                }
                                break;
                            }
                            if rng.below(3) == 0 {
                                cx.waker().wake_by_ref();
                            }
                            Poll::Pending
                        }));
                        fired
                    })
                })
                .collect();
            for h in hs {
                assert_eq!(join_within(h, 15).unwrap(), 40);
            }
            common::drop_within(rt, Duration::from_secs(10), "after own-timer waits");
        }
    });
}

/// Idea 4: a plain thread's `block_on` of a sleep and a fiber tied to the lone worker
/// while a task keeps that worker in a yield_now loop waiting for both.
#[test]
fn plain_thread_and_fiber_timers_while_the_only_worker_spins() {
    watchdog(25, || {
        let rt = rt(1);
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let spinner = rt
            .spawn(async move { yield_loop_until(Duration::from_secs(6), || c.load(SeqCst) >= 2) });
        std::thread::sleep(Duration::from_millis(5));
        let c = count.clone();
        let fib = fiber_on(&rt, move || {
            for _ in 0..5 {
                weft::fiber::sleep(Duration::from_millis(1));
            }
            c.fetch_add(1, SeqCst);
        });
        let c = count.clone();
        let h = rt.handle().clone();
        let th = std::thread::spawn(move || {
            h.block_on(async { weft::time::sleep(Duration::from_millis(5)).await });
            c.fetch_add(1, SeqCst);
        });
        assert!(
            join_within(spinner, 10).unwrap(),
            "count {}",
            count.load(SeqCst)
        );
        join_within(fib, 10).unwrap();
        th.join().unwrap();
        common::drop_within(rt, Duration::from_secs(10), "after plain thread + fiber");
    });
}

/// A self-waking wait inside a `weft::join` half (its stack cannot be set aside: the
/// yield dispatches in place) on one worker, for a flag a sleeping task sets, while
/// the other half computes; plus ticking tasks so the yields find due timers.
#[test]
fn busy_wait_inside_join_half_with_due_timers() {
    watchdog(25, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let stop = flag();
            let tickers: Vec<_> = (0..4)
                .map(|_| {
                    let stop = stop.clone();
                    rt.spawn(async move {
                        while !stop.load(SeqCst) {
                            weft::time::sleep(Duration::from_millis(1)).await;
                        }
                    })
                })
                .collect();
            for round in 0..10u64 {
                let f = flag();
                let f2 = f.clone();
                let h = rt.spawn(async move {
                    let f3 = f2.clone();
                    weft::spawn(async move {
                        weft::time::sleep(Duration::from_millis(3)).await;
                        f3.store(true, SeqCst);
                    });
                    let (a, b) = weft::join(
                        || spin_wait_until(Duration::from_secs(5), || f2.load(SeqCst)),
                        || (0..1000u64).map(|x| x * round).sum::<u64>(),
                    );
                    (a, b)
                });
                let (a, _) = join_within(h, 10).unwrap();
                assert!(
                    a,
                    "workers {workers} round {round}: the join half never saw the flag"
                );
                assert!(f.load(SeqCst));
            }
            stop.store(true, SeqCst);
            for t in tickers {
                join_within(t, 10).unwrap();
            }
            common::drop_within(rt, Duration::from_secs(10), "after join-half busy waits");
        }
    });
}

/// Continuous socket readiness (a plain thread floods a UDP socket read by a task)
/// while waits on the same worker yield: the yielded waits still progress (each counts
/// 2000 self-woken polls), and the reader keeps reading.
#[test]
fn socket_flood_does_not_starve_yielded_waits() {
    watchdog(25, || {
        let rt = rt(1);
        let sock = rt.block_on(async { weft::net::UdpSocket::bind("127.0.0.1:0").await.unwrap() });
        let addr = sock.local_addr().unwrap();
        let stop = flag();
        let got = Arc::new(AtomicUsize::new(0));
        let (g2, st2) = (got.clone(), stop.clone());
        let reader = rt.spawn(async move {
            let mut buf = [0u8; 16];
            while !st2.load(SeqCst) {
                if weft::time::timeout(Duration::from_millis(50), sock.recv(&mut buf))
                    .await
                    .is_ok()
                {
                    g2.fetch_add(1, SeqCst);
                }
            }
        });
        let st3 = stop.clone();
        let flooder = std::thread::spawn(move || {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            while !st3.load(SeqCst) {
                let _ = tx.send_to(b"x", addr);
                std::thread::sleep(Duration::from_micros(50));
            }
        });
        std::thread::sleep(Duration::from_millis(10));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                rt.spawn(async move {
                    let mut polls = 0u32;
                    weft::wait(std::future::poll_fn(|cx| {
                        polls += 1;
                        if polls >= 2000 {
                            Poll::Ready(polls)
                        } else {
                            cx.waker().wake_by_ref();
                            Poll::Pending
                        }
                    }))
                })
            })
            .collect();
        let before = got.load(SeqCst);
        for w in waiters {
            assert_eq!(join_within(w, 15).unwrap(), 2000);
        }
        let t0 = Instant::now();
        while got.load(SeqCst) < before + 10 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            got.load(SeqCst) >= before + 10,
            "the reader stopped reading"
        );
        stop.store(true, SeqCst);
        flooder.join().unwrap();
        join_within(reader, 10).unwrap();
        common::drop_within(rt, Duration::from_secs(10), "after the socket flood");
    });
}

#[allow(dead_code)]
fn _unused(_: Mutex<()>) {}
