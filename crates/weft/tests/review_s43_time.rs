//! Review session 43: time (sleep, sleep_until, timeout, interval, the alarm thread),
//! the timer driver and wheel, and the timer channels, attacked from safe code only.
//!
//! Sleeps reset from another thread while their task waits on them, after they fired,
//! and after their runtime is gone; timeouts whose inner future panics or completes at
//! the deadline; `Stats::timers_pending` after aborts, panics and selects; intervals at
//! zero and tiny periods; timer receivers in selects and blocking receives in every
//! context. Every wait is bounded.

mod common;

use std::future::{poll_fn, Future};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{mpsc, Arc, Mutex as StdMutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use common::{fiber_on, join_within, watchdog, workers};
use weft::time::{self, MissedTickBehavior};
use weft::Runtime;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits (bounded, 5 s) until the runtime has exactly `n` timers pending.
fn pending_becomes(rt: &Runtime, n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = rt.stats().timers_pending;
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {now} timers pending, expected {n} (after 5 s)"
        );
        std::thread::sleep(ms(1));
    }
}

// ----------------------------------------------------------- reset from elsewhere

/// A sleep shared behind a mutex: a task awaits it, another thread moves its deadline
/// (as a watchdog whose deadline is pushed back, or pulled in, by whoever sees
/// activity). The task must end at the new deadline: tokio's `Sleep::reset` keeps the
/// registered waker and wakes it at the new deadline. weft's `reset` dropped the wheel
/// entry with the waker in it and relied on a poll that never came: the task slept
/// for ever (fixed: the entry moves with its waker).
fn reset_from_another_thread(later: bool) {
    watchdog(20, move || {
        let rt = workers(2);
        let sleep =
            rt.block_on(async { Some(time::sleep(ms(if later { 50 } else { 3_600_000 }))) });
        let sleep = Arc::new(StdMutex::new(sleep.unwrap()));
        let (tx, rx) = mpsc::channel();
        let s = sleep.clone();
        let _h = rt.spawn(async move {
            poll_fn(|cx| Pin::new(&mut *s.lock().unwrap()).poll(cx)).await;
            let _ = tx.send(Instant::now());
        });
        pending_becomes(&rt, 1, "the task waits on its sleep");
        let new = Instant::now() + if later { ms(300) } else { ms(30) };
        sleep.lock().unwrap().reset(new);
        let ended = rx.recv_timeout(Duration::from_secs(5));
        let stats = rt.stats();
        drop(rt);
        let ended = ended.unwrap_or_else(|_| {
            panic!(
                "a sleep reset from another thread (to {} its old deadline) never woke the \
                 task awaiting it (timers pending: {})",
                if later { "after" } else { "before" },
                stats.timers_pending
            )
        });
        assert!(ended >= new, "ended before the new deadline");
    });
}

#[test]
fn a_sleep_reset_earlier_from_another_thread_wakes_its_task() {
    reset_from_another_thread(false);
}

#[test]
fn a_sleep_reset_later_from_another_thread_wakes_its_task() {
    reset_from_another_thread(true);
}

/// The same with an interval: `Interval::reset` from another thread while a task waits
/// in `tick`.
#[test]
fn an_interval_reset_from_another_thread_wakes_its_task() {
    // A short-period interval reset from elsewhere.
    watchdog(20, || {
        let rt = workers(2);
        let iv = rt
            .block_on(async {
                let mut iv = time::interval(ms(300));
                iv.tick().await;
                Some(iv)
            })
            .unwrap();
        let iv = Arc::new(StdMutex::new(iv));
        let (tx, rx) = mpsc::channel();
        let i = iv.clone();
        let _h = rt.spawn(async move {
            poll_fn(|cx| i.lock().unwrap().poll_tick(cx)).await;
            let _ = tx.send(());
        });
        pending_becomes(&rt, 1, "the task waits on its interval");
        iv.lock().unwrap().reset();
        let r = rx.recv_timeout(Duration::from_secs(5));
        drop(rt);
        r.expect("an interval reset from another thread never woke the task ticking it");
    });
}

// ------------------------------------------------------------ reset after firing

/// A sleep that completed, reset to a later deadline and awaited again, waits for the
/// new deadline (not done at once), and one reset into the past is done at once; no
/// timer is left pending either way.
#[test]
fn a_fired_sleep_reset_and_awaited_again() {
    watchdog(20, || {
        let rt = workers(2);
        rt.block_on(async {
            let mut s = time::sleep(ms(5));
            (&mut s).await;
            assert!(s.is_elapsed());
            let new = Instant::now() + ms(40);
            s.reset(new);
            assert!(!s.is_elapsed(), "reset to the future is not elapsed");
            assert_eq!(s.deadline(), new);
            (&mut s).await;
            assert!(Instant::now() >= new, "a re-armed sleep ended early");
            // Into the past: at once.
            s.reset(Instant::now() - ms(10));
            let t = Instant::now();
            (&mut s).await;
            assert!(t.elapsed() < Duration::from_secs(2));
            // Reset while registered, then again while registered, then dropped.
            s.reset(Instant::now() + Duration::from_secs(60));
            assert!(time::timeout(ms(2), &mut s).await.is_err());
            assert_eq!(weft::Handle::current().stats().timers_pending, 1);
            s.reset(Instant::now() + Duration::from_secs(120));
            assert!(time::timeout(ms(2), &mut s).await.is_err());
            assert_eq!(weft::Handle::current().stats().timers_pending, 1);
            drop(s);
        });
        pending_becomes(&rt, 0, "a sleep reset twice and dropped");
    });
}

/// A sleep reset after its runtime is gone (waiting on the alarm thread) ends at the
/// new deadline, earlier or later, on a plain thread.
#[test]
fn a_sleep_reset_after_its_runtime_is_gone() {
    watchdog(20, || {
        let rt = workers(1);
        let mut s = rt
            .block_on(async { Some(time::sleep(Duration::from_secs(3600))) })
            .unwrap();
        // Registered on the wheel.
        let h = rt.handle().clone();
        h.block_on(async {
            assert!(time::timeout(ms(2), &mut s).await.is_err());
        });
        drop(rt);
        // Earlier.
        let new = Instant::now() + ms(30);
        s.reset(new);
        h.block_on(&mut s);
        assert!(Instant::now() >= new);
        // Later, after it completed.
        let new = Instant::now() + ms(60);
        s.reset(new);
        let t = Instant::now();
        h.block_on(&mut s);
        assert!(
            Instant::now() >= new,
            "ended {:?} early",
            new - Instant::now()
        );
        assert!(t.elapsed() < Duration::from_secs(5));
    });
}

// ------------------------------------------------------------------- timeouts

/// A timeout whose inner future panics: the panic reaches the joiner and the timer is
/// gone from the wheel; also when the inner future panics in its first poll.
#[test]
fn a_timeout_whose_inner_future_panics_leaves_no_timer() {
    watchdog(20, || {
        let rt = workers(2);
        for first in [true, false] {
            let h = rt.spawn(async move {
                let r = time::timeout(Duration::from_secs(60), async move {
                    if !first {
                        time::sleep(ms(3)).await;
                    }
                    panic!("inner boom");
                })
                .await;
                drop(r);
            });
            let e = join_within(h, 10).expect_err("the panic comes through");
            assert!(e.is_panic());
            pending_becomes(&rt, 0, "a timeout whose future panicked");
        }
        assert_eq!(rt.stats().timers_pending, 0);
    });
}

/// A future that completes at the deadline gives its value or `Elapsed`, never
/// anything else, over several rounds; a future ready at once wins even against a zero
/// or past deadline (it is polled first), as tokio's does.
#[test]
fn a_timeout_whose_future_ends_at_the_deadline_keeps_the_value() {
    watchdog(20, || {
        let rt = workers(2);
        rt.block_on(async {
            // A future ready at the deadline itself may be polled just before it and
            // lose to the timer polled just after (as with any runtime's timeout):
            // only a hang or a wrong value would be wrong.
            for i in 0..20u64 {
                let d = Instant::now() + ms(2 + i % 5);
                let r = time::timeout_at(d, async move {
                    time::sleep_until(d).await;
                    i
                })
                .await;
                assert!(r.is_err() || r == Ok(i), "round {i}: {r:?}");
            }
            // Zero timeouts: a ready future still wins.
            assert_eq!(time::timeout(Duration::ZERO, async { 7 }).await, Ok(7));
            assert_eq!(
                time::timeout_at(Instant::now() - ms(5), async { 8 }).await,
                Ok(8)
            );
            assert!(time::timeout(Duration::ZERO, std::future::pending::<()>())
                .await
                .is_err());
            // Huge ones do not overflow.
            assert_eq!(time::timeout(Duration::MAX, async { 9 }).await, Ok(9));
        });
        pending_becomes(&rt, 0, "timeouts at the deadline");
    });
}

/// `into_inner` gives the future back with the timer cancelled; the future still works.
#[test]
fn timeout_into_inner_cancels_the_timer() {
    watchdog(20, || {
        let rt = workers(2);
        rt.block_on(async {
            let (tx, rx) = weft::sync::oneshot::channel::<u32>();
            let mut t = Box::pin(time::timeout(Duration::from_secs(60), rx));
            assert!(time::timeout(ms(2), t.as_mut()).await.is_err());
            assert_eq!(weft::Handle::current().stats().timers_pending, 1);
            let inner = Pin::into_inner(t).into_inner();
            assert_eq!(weft::Handle::current().stats().timers_pending, 0);
            tx.send(4).unwrap();
            assert_eq!(inner.await.unwrap(), 4);
        });
    });
}

// ------------------------------------------------------- cancellation bookkeeping

/// A task aborted while it awaits a sleep, a timeout and an interval, and a fiber
/// aborted in `fiber::sleep` and in a timed receive: nothing stays on the wheel.
#[test]
fn aborted_waiters_leave_no_timer() {
    watchdog(25, || {
        let rt = workers(2);
        let (_tx, rx) = weft::chan::unbounded::<u8>();
        for k in 0..5 {
            let rx = rx.clone();
            let h = match k {
                0 => rt.spawn(async { time::sleep(Duration::from_secs(60)).await }),
                1 => rt.spawn(async move {
                    let _ = time::timeout(Duration::from_secs(60), rx.recv()).await;
                }),
                2 => rt.spawn(async {
                    let mut iv = time::interval(Duration::from_secs(60));
                    loop {
                        iv.tick().await;
                    }
                }),
                3 => fiber_on(&rt, || weft::fiber::sleep(Duration::from_secs(60))),
                _ => fiber_on(&rt, move || {
                    let _ = rx.recv_timeout(Duration::from_secs(60));
                }),
            };
            pending_becomes(&rt, 1, "the waiter is on the wheel");
            h.abort();
            let r = join_within(h, 10);
            assert!(r.is_err_and(|e| e.is_cancelled()), "case {k}");
            pending_becomes(&rt, 0, "an aborted waiter");
        }
    });
}

/// A select of a channel and `after(60 s)` won by the channel leaves no timer, async
/// and blocking (fiber, and a task nested on its worker); a select won by the timer
/// delivers an instant at or after its deadline.
#[test]
fn selects_with_timer_receivers_leave_no_timer() {
    watchdog(25, || {
        let rt = workers(2);
        // Async.
        let (tx, rx) = weft::chan::unbounded::<u32>();
        let h = rt.spawn(async move {
            let far = weft::chan::after(Duration::from_secs(60));
            let mut sel = weft::chan::Select::new();
            let a = sel.recv(&rx);
            let _b = sel.recv(&far);
            let op = sel.select_async().await;
            assert_eq!(op.index(), a);
            op.recv(&rx).unwrap()
        });
        pending_becomes(&rt, 1, "the async select waits on its alarm");
        tx.send_blocking(5).unwrap();
        assert_eq!(join_within(h, 10).unwrap(), 5);
        pending_becomes(&rt, 0, "an async select won by the channel");

        // Blocking, in a fiber and in a task (nested on the worker).
        for fiber in [true, false] {
            let (tx, rx) = weft::chan::unbounded::<u32>();
            let body = move || {
                let far = weft::chan::after(Duration::from_secs(60));
                let mut sel = weft::chan::Select::new();
                let a = sel.recv(&rx);
                let _b = sel.recv(&far);
                let op = sel.select();
                assert_eq!(op.index(), a);
                op.recv(&rx).unwrap()
            };
            let h = if fiber {
                fiber_on(&rt, body)
            } else {
                rt.spawn(async move { body() })
            };
            pending_becomes(&rt, 1, "the blocking select waits on its timer");
            tx.send_blocking(6).unwrap();
            assert_eq!(join_within(h, 10).unwrap(), 6);
            pending_becomes(&rt, 0, "a blocking select won by the channel");
        }

        // Won by the timer.
        let h = rt.spawn(async move {
            let (_tx, rx) = weft::chan::unbounded::<u32>();
            let when = Instant::now() + ms(20);
            let at = weft::chan::at(when);
            let mut sel = weft::chan::Select::new();
            let _a = sel.recv(&rx);
            let b = sel.recv(&at);
            let op = sel.select_async().await;
            assert_eq!(op.index(), b);
            let got = op.recv(&at).unwrap();
            assert_eq!(got, when);
            assert!(Instant::now() >= when);
        });
        join_within(h, 10).unwrap();
        pending_becomes(&rt, 0, "an async select won by the timer");
    });
}

/// Timer receives in every context: a fiber, a task nested on its worker, a plain
/// thread, async in a task; `after(ZERO)`, `at(past)`, `after(MAX)` with a timeout,
/// `tick` twice; each delivers no earlier than due.
#[test]
fn timer_receivers_in_every_context() {
    watchdog(25, || {
        let rt = workers(2);
        let check = || {
            let t = Instant::now();
            assert!(weft::chan::after(Duration::ZERO).recv_blocking().unwrap() <= Instant::now());
            let past = Instant::now() - ms(50);
            assert_eq!(weft::chan::at(past).recv_blocking(), Ok(past));
            let far = weft::chan::after(Duration::MAX);
            assert!(far.recv_timeout(ms(5)).unwrap_err().is_timeout());
            let d = Instant::now() + ms(15);
            assert_eq!(
                weft::chan::at(d).recv_timeout(Duration::from_secs(5)),
                Ok(d)
            );
            assert!(Instant::now() >= d);
            let tick = weft::chan::tick(ms(5));
            let a = tick.recv_blocking().unwrap();
            let b = tick.recv_blocking().unwrap();
            assert!(b > a && b <= Instant::now());
            assert!(t.elapsed() < Duration::from_secs(5));
        };
        join_within(fiber_on(&rt, check), 10).unwrap();
        join_within(rt.spawn(async move { check() }), 10).unwrap();
        check();
        join_within(
            rt.spawn(async {
                let d = Instant::now() + ms(15);
                assert_eq!(weft::chan::at(d).recv().await, Ok(d));
                assert!(Instant::now() >= d);
                let far = weft::chan::after(Duration::MAX);
                assert!(time::timeout(ms(5), far.recv()).await.is_err());
            }),
            10,
        )
        .unwrap();
        pending_becomes(&rt, 0, "timer receives done");
    });
}

// ------------------------------------------------------------------- intervals

/// A zero period panics with a clear message (documented), for `interval` and
/// `interval_at`; a 1 ns period with each missed-tick behaviour neither hangs nor
/// ticks backwards.
#[test]
fn interval_zero_and_tiny_periods() {
    watchdog(25, || {
        for at in [false, true] {
            let r = catch_unwind(|| {
                if at {
                    time::interval_at(Instant::now(), Duration::ZERO)
                } else {
                    time::interval(Duration::ZERO)
                }
            });
            let e = r.expect_err("a zero period panics");
            let msg = common::panic_message(&*e).unwrap_or_default();
            assert!(msg.contains("non-zero"), "message: {msg}");
        }
        let rt = workers(2);
        rt.block_on(async {
            for b in [
                MissedTickBehavior::Burst,
                MissedTickBehavior::Delay,
                MissedTickBehavior::Skip,
            ] {
                let mut iv = time::interval(Duration::from_nanos(1));
                iv.set_missed_tick_behavior(b);
                let mut last = iv.tick().await;
                let start = Instant::now();
                for _ in 0..200 {
                    let t = iv.tick().await;
                    assert!(t >= last, "{b:?}: a tick went back");
                    last = t;
                }
                assert!(start.elapsed() < Duration::from_secs(10));
            }
        });
    });
}

/// `Skip` far behind with a period that does not divide the lag: the next tick is the
/// first on the original grid after now; `Delay` restarts from now; `Burst` returns
/// the missed instants in order.
#[test]
fn interval_missed_ticks_keep_their_grid() {
    watchdog(25, || {
        let rt = workers(2);
        rt.block_on(async {
            let period = ms(7);
            let start = Instant::now();
            let mut iv = time::interval_at(start, period);
            iv.set_missed_tick_behavior(MissedTickBehavior::Skip);
            assert_eq!(iv.tick().await, start);
            std::thread::sleep(ms(50));
            // Skip (as tokio's): the first missed tick comes at once, then the next
            // tick is the first one of the original grid after now.
            let t = iv.tick().await;
            assert_eq!(t, start + period);
            let t2 = iv.tick().await;
            assert!(t2 >= start + ms(50), "a skipped tick came back");
            assert_eq!(
                (t2 - start).as_nanos() % period.as_nanos(),
                0,
                "off the grid"
            );
            let t3 = iv.tick().await;
            assert_eq!(t3 - t2, period, "Skip keeps to the grid");

            let mut iv = time::interval_at(start, period);
            let mut ticks = Vec::new();
            for _ in 0..5 {
                ticks.push(iv.tick().await);
            }
            // Burst: the missed ones, in order, one period apart.
            for w in ticks.windows(2) {
                assert_eq!(w[1] - w[0], period);
            }
        });
    });
}

// ----------------------------------------------------------- odd hands and threads

/// Sleeps registered on a runtime's wheel, then dropped on other threads after the
/// runtime is gone, and sleeps dropped from a waker's drop: no panic, no hang.
#[test]
fn sleeps_dropped_on_other_threads_after_the_runtime() {
    watchdog(20, || {
        let rt = workers(2);
        let h = rt.handle().clone();
        let mut sleeps: Vec<_> = (0..32)
            .map(|i| {
                let mut s = h
                    .block_on(async move { Some(time::sleep(Duration::from_secs(60 + i))) })
                    .unwrap();
                h.block_on(async {
                    assert!(time::timeout(Duration::ZERO, &mut s).await.is_err());
                });
                s
            })
            .collect();
        assert_eq!(rt.stats().timers_pending, 32);
        drop(rt);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let part: Vec<_> = sleeps.drain(..8).collect();
                std::thread::spawn(move || drop(part))
            })
            .collect();
        for t in threads {
            common::thread_within(t, 10);
        }
    });
}

/// `block_on` of a sleep from a blocking-pool thread, a fiber in `join`, a plain
/// thread, and a task nested on a worker, on a one-worker runtime: each ends at its
/// deadline, none early.
#[test]
fn fiber_sleep_in_every_context_on_one_worker() {
    watchdog(25, || {
        let rt = workers(1);
        let d = ms(20);
        let check = move || {
            let t = Instant::now();
            weft::fiber::sleep(d);
            let e = t.elapsed();
            assert!(e >= d, "slept {e:?} < {d:?}");
            e
        };
        let a = rt.spawn_blocking(check);
        let b = fiber_on(&rt, move || weft::join(check, check));
        let c = rt.spawn(async move { check() });
        check();
        join_within(a, 10).unwrap();
        join_within(b, 10).unwrap();
        join_within(c, 10).unwrap();
        // A zero sleep on a plain thread returns at once.
        let t = Instant::now();
        weft::fiber::sleep(Duration::ZERO);
        assert!(t.elapsed() < Duration::from_secs(2));
        pending_becomes(&rt, 0, "fiber sleeps done");
    });
}

/// A sleep polled by a task of runtime B while bound to runtime A: ends on time, and
/// `Sleep::deadline`/`is_elapsed` agree with what happened.
#[test]
fn a_sleep_bound_to_one_runtime_awaited_in_another() {
    watchdog(20, || {
        let a = workers(1);
        let b = workers(1);
        let s = a.block_on(async { Some(time::sleep(ms(30))) }).unwrap();
        let deadline = s.deadline();
        let h = b.spawn(async move {
            let mut s = s;
            assert!(!s.is_elapsed());
            (&mut s).await;
            assert!(s.is_elapsed());
            Instant::now()
        });
        let end = join_within(h, 10).unwrap();
        assert!(end >= deadline);
        pending_becomes(&a, 0, "A's wheel");
        pending_becomes(&b, 0, "B's wheel");
    });
}

/// Many short sleeps each reset many times by their own task, some to the past: all
/// end, none early, none left on the wheel, and the fired counter moves.
#[test]
fn reset_storms_leave_an_accurate_count() {
    watchdog(25, || {
        let rt = workers(2);
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let hs: Vec<_> = (0..64u64)
            .map(|i| {
                let done = done.clone();
                rt.spawn(async move {
                    let mut s = time::sleep(Duration::from_secs(60));
                    for j in 0..20u64 {
                        let d = if (i + j) % 7 == 0 {
                            Instant::now() - ms(1)
                        } else {
                            Instant::now() + ms(1 + (i * 13 + j) % 9)
                        };
                        s.reset(d);
                        if j % 3 == 0 {
                            // Awaited to its end.
                            (&mut s).await;
                            assert!(Instant::now() >= d);
                        } else {
                            // Polled once, then moved on.
                            let _ = time::timeout(Duration::ZERO, &mut s).await;
                        }
                    }
                    done.fetch_add(1, SeqCst);
                })
            })
            .collect();
        for h in hs {
            join_within(h, 20).unwrap();
        }
        assert_eq!(done.load(SeqCst), 64);
        pending_becomes(&rt, 0, "reset storms");
    });
}

/// A panicking waker registered with the wheel (a hand-polled sleep) does not stop the
/// runtime's other timers from firing, nor its drop.
#[test]
fn a_panicking_waker_on_the_wheel_spares_the_other_timers() {
    watchdog(20, || {
        let rt = workers(2);
        let h = rt.handle().clone();
        let mut s = h.block_on(async { Some(time::sleep(ms(10))) }).unwrap();
        let w = common::fn_waker(|| panic!("waker boom"));
        let mut cx = std::task::Context::from_waker(&w);
        assert!(Pin::new(&mut s).poll(&mut cx).is_pending());
        let r = rt.block_on(async {
            let t = Instant::now();
            time::sleep(ms(40)).await;
            t.elapsed()
        });
        assert!(r >= ms(40));
        // It did fire: the sleep is over when looked at again.
        let polled = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut s).poll(&mut cx)));
        assert!(matches!(polled, Ok(Poll::Ready(()))));
        drop(rt);
    });
}

// --------------------------------------------------------- the alarm thread's drops

/// The alarm thread forgets an entry whose waiter moved on (a sleep of a dropped
/// runtime reset to a new deadline leaves its old slot, with the waker in it, to the
/// list alone) and drops it there, unguarded: a waker whose destructor panics kills the
/// process's only alarm thread, and every later sleep of a dropped runtime and every
/// off-runtime async timer receive then waits for ever. (The wake path is guarded,
/// `wake_guarded`; the forget path is not.)
#[test]
fn child_waker_drop_panic_on_the_alarm_thread() {
    if std::env::var_os("REVIEW_S43T_CHILD").is_none() {
        return;
    }
    struct DropBomb;
    impl std::task::Wake for DropBomb {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for DropBomb {
        fn drop(&mut self) {
            panic!("drop bomb");
        }
    }
    let rt = workers(1);
    let h = rt.handle().clone();
    let mut s = {
        let _g = h.enter();
        Box::pin(time::sleep(Duration::from_secs(3600)))
    };
    drop(rt);
    let bomb = std::task::Waker::from(Arc::new(DropBomb));
    // The runtime is gone: the sleep waits on the alarm thread, the bomb in its slot.
    assert!(s
        .as_mut()
        .poll(&mut std::task::Context::from_waker(&bomb))
        .is_pending());
    drop(bomb);
    // Moved: a fresh slot; the old one (with the last reference to the bomb) is the
    // list's alone, and the alarm thread drops it at its next pass.
    s.as_mut().reset(Instant::now() + Duration::from_secs(7200));
    // The reset moves the bomb with the alarm (a waiter elsewhere must still be woken);
    // the next poll's waker swap drops it here, on its owner's thread, never on the
    // alarm thread.
    let swapped = catch_unwind(AssertUnwindSafe(|| {
        s.as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
            .is_pending()
    }));
    assert!(
        swapped.is_err(),
        "the bomb goes off in the poll that replaces it"
    );
    std::thread::sleep(ms(200));
    println!("CHILD armed=ok");
    // Is the alarm thread still there? A 30 ms sleep of the dropped runtime.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        h.block_on(time::sleep(ms(30)));
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(()) => println!("CHILD alarm=alive"),
        Err(_) => println!("CHILD alarm=dead"),
    }
    println!("CHILD done=ok");
}

#[test]
fn a_waker_drop_panic_does_not_kill_the_alarm_thread() {
    common::with_limit(Duration::from_secs(60), || {
        let out = common::child::run(
            "child_waker_drop_panic_on_the_alarm_thread",
            &[("REVIEW_S43T_CHILD", "1")],
            Duration::from_secs(20),
        );
        out.assert_finished();
        assert_eq!(
            out.report("alarm"),
            Some("alive"),
            "the alarm thread died\n{}",
            out.context()
        );
    });
}

// ------------------------------------------------------------ documented panics

/// Outside any runtime, what has elapsed completes (a zero sleep, a timeout of a ready
/// future, an interval's first tick) and what must wait panics, as documented (the
/// documentation said "on first poll" until this review).
#[test]
fn outside_a_runtime_only_a_wait_panics() {
    watchdog(10, || {
        let noop = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(noop);
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut s = time::sleep(Duration::ZERO);
            Pin::new(&mut s).poll(&mut cx)
        }));
        assert!(matches!(r, Ok(Poll::Ready(()))), "sleep(ZERO)");
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut t = Box::pin(time::timeout(ms(10), async { 1 }));
            t.as_mut().poll(&mut cx)
        }));
        assert!(
            matches!(r, Ok(Poll::Ready(Ok(1)))),
            "timeout of a ready future"
        );
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut iv = time::interval(ms(10));
            iv.poll_tick(&mut cx).map(drop)
        }));
        assert!(matches!(r, Ok(Poll::Ready(()))), "interval's first tick");
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut s = time::sleep(ms(50));
            Pin::new(&mut s).poll(&mut cx)
        }));
        assert!(r.is_err(), "a sleep that must wait");
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut t = Box::pin(time::timeout(ms(50), std::future::pending::<()>()));
            t.as_mut().poll(&mut cx).map(drop)
        }));
        assert!(r.is_err(), "a timeout that must wait");
    });
}
