//! Review session 38, from safe code: nurseries over the sync primitives, the timers
//! users see (sleep, timeout, interval), and `WaitGroup`, `Barrier`, `watch`,
//! `broadcast` and `oneshot` in every context (task, fiber, plain thread), with futures
//! dropped in `select!`s and on other threads, owners and children cancelled, and
//! runtimes dropped under waiters. Every test runs under a watchdog.
//!
//! Bugs found (their tests fail until fixed):
//!
//! * `Interval` with `MissedTickBehavior::Skip` truncates the number of periods to
//!   skip to `u32` (`time/interval.rs`, `periods as u32`): far enough behind with a
//!   short period, it returns ticks from the past (8.59 s in the past in
//!   `interval_skip_with_a_tiny_period_far_behind_keeps_to_the_schedule`).
//! * `Interval` adds its period to an `Instant` unchecked (`time/interval.rs`, the three
//!   `scheduled + self.period` and `reset`'s `now + self.period`): `interval(
//!   Duration::MAX)` panics at its first tick ("overflow when adding duration to
//!   instant"), although `Duration::MAX` is "never" for `sleep`, `timeout` and
//!   `Nursery::with_timeout`.
//! * A deadline nursery's watcher task (`nursery/mod.rs`, `watch`) is aborted only on
//!   the normal return path: a blocking body that panics, an owner fiber cancelled in
//!   its wait, or an async body closure that panics leave it parked on its timer until
//!   the deadline (for ever with `Duration::MAX`), one live task per such nursery.

#![allow(clippy::async_yields_async)] // fibers are spawned inside `block_on` to land on that runtime

mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{watchdog, workers, Rng};
use weft::time::{self, MissedTickBehavior};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn interval_skip_with_a_tiny_period_far_behind_keeps_to_the_schedule() {
    watchdog(10, || {
        let rt = workers(1);
        rt.block_on(async {
            let now = Instant::now();
            let Some(start) = now.checked_sub(Duration::from_secs(10)) else {
                return;
            };
            let mut iv = time::interval_at(start, Duration::from_nanos(1));
            iv.set_missed_tick_behavior(MissedTickBehavior::Skip);
            let before_first = Instant::now();
            assert_eq!(iv.tick().await, start);
            // The first tick (at `start`, long past) skipped every missed one: the
            // next is scheduled after the moment that tick was asked for.
            let second = iv.tick().await;
            assert!(
                second >= before_first,
                "Skip returned a tick scheduled {:?} before the previous tick was asked for",
                before_first - second
            );
        });
    });
}

/// `Delay` restarts the schedule after a tick that came late by less than a whole
/// period too (by more than its 5 ms slack): the next tick is one period after the late
/// one, as documented. It used to restart only past a whole period, so a tick 60 ms late
/// on a 100 ms period was followed by the next one 40 ms later.
#[test]
fn interval_delay_restarts_after_a_tick_late_by_less_than_a_period() {
    watchdog(15, || {
        let rt = workers(1);
        rt.block_on(async {
            let mut iv = time::interval(ms(100));
            iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let t0 = iv.tick().await;
            // The tick due at t0 + 100 ms is asked for about 60 ms late.
            std::thread::sleep(ms(160));
            let asked = Instant::now();
            assert_eq!(iv.tick().await, t0 + ms(100));
            let next = iv.tick().await;
            assert!(
                next >= asked + ms(95),
                "the tick after a late one came {:?} after it was asked for",
                next - asked
            );
        });
    });
}

/// `Duration::MAX` is "never" for `sleep`, `timeout` and `Nursery::with_timeout`; an
/// interval of that period ticks at once and then waits (for ever), for every missed
/// tick behaviour, and `reset` restarts it without overflowing `Instant`.
#[test]
fn interval_with_a_huge_period_ticks_once_then_waits() {
    watchdog(10, || {
        let rt = workers(1);
        rt.block_on(async {
            let mut panicked = Vec::new();
            for b in [
                MissedTickBehavior::Burst,
                MissedTickBehavior::Delay,
                MissedTickBehavior::Skip,
            ] {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    let mut iv = time::interval(Duration::MAX);
                    iv.set_missed_tick_behavior(b);
                    assert!(
                        poll_once(pin!(iv.tick())).is_ready(),
                        "the first tick is at once"
                    );
                    assert!(
                        poll_once(pin!(iv.tick())).is_pending(),
                        "the second never comes"
                    );
                }));
                if r.is_err() {
                    panicked.push(format!("tick ({b:?})"));
                }
            }
            let r = catch_unwind(AssertUnwindSafe(|| {
                let mut iv = time::interval(Duration::MAX);
                iv.reset();
                assert!(poll_once(pin!(iv.tick())).is_pending());
            }));
            if r.is_err() {
                panicked.push("reset".to_string());
            }
            assert!(
                panicked.is_empty(),
                "interval(Duration::MAX) panicked in: {panicked:?}"
            );
        });
    });
}

/// Waits (bounded) until the runtime has no live task or fiber; the count left.
fn settle(rt: &weft::Runtime, limit: Duration) -> usize {
    let end = Instant::now() + limit;
    loop {
        let n = rt.dump().len();
        if n == 0 || Instant::now() >= end {
            return n;
        }
        std::thread::sleep(ms(2));
    }
}

#[test]
fn a_deadline_nursery_whose_body_panics_leaves_no_watcher_behind() {
    watchdog(10, || {
        let rt = workers(2);
        let _g = rt.enter();
        // Baseline: a body that returns stops the watcher.
        let r = weft::Nursery::with_timeout(Duration::from_secs(3600))
            .run_blocking(|_n: &weft::Nursery<'_, ()>| Ok(1));
        assert_eq!(r, Ok(Ok(1)));
        assert_eq!(settle(&rt, ms(500)), 0, "{}", rt.dump());
        // A body that panics.
        let r = catch_unwind(AssertUnwindSafe(|| {
            weft::Nursery::with_timeout(Duration::from_secs(3600))
                .run_blocking(|_n: &weft::Nursery<'_, ()>| -> Result<(), ()> { panic!("body") })
        }));
        assert!(r.is_err());
        assert_eq!(
            settle(&rt, ms(500)),
            0,
            "the deadline's watcher outlives a nursery whose body panicked:\n{}",
            rt.dump()
        );
    });
}

#[test]
fn a_deadline_nursery_whose_owner_fiber_is_aborted_leaves_no_watcher_behind() {
    watchdog(10, || {
        let rt = workers(2);
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let owner = rt.block_on(async move {
            weft::fiber::spawn(move || {
                weft::Nursery::with_timeout(Duration::from_secs(3600)).run_blocking(
                    |n: &weft::Nursery<'_, ()>| {
                        let s = s.clone();
                        n.spawn_fiber(move || {
                            s.fetch_add(1, SeqCst);
                            weft::fiber::sleep(Duration::from_secs(60));
                            Ok(())
                        });
                        Ok(())
                    },
                )
            })
        });
        common::wait_until("the child runs", || started.load(SeqCst) == 1);
        std::thread::sleep(ms(5));
        owner.abort();
        assert!(owner.join().unwrap_err().is_cancelled());
        assert_eq!(
            settle(&rt, ms(500)),
            0,
            "the deadline's watcher outlives a cancelled owner:\n{}",
            rt.dump()
        );
    });
}

#[test]
fn an_async_deadline_nursery_whose_body_closure_panics_leaves_no_watcher_behind() {
    watchdog(10, || {
        let rt = workers(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(weft::Nursery::with_timeout(Duration::from_secs(3600)).run(
                |_n: weft::Nursery<'static, ()>| -> std::future::Ready<Result<(), ()>> {
                    panic!("the body closure")
                },
            ))
        }));
        assert!(r.is_err());
        assert_eq!(
            settle(&rt, ms(500)),
            0,
            "the deadline's watcher outlives a nursery whose body closure panicked:\n{}",
            rt.dump()
        );
    });
}

// ------------------------------------------------------------------ helpers

use weft::sync::{broadcast, oneshot, watch, Barrier, WaitGroup};

enum Either<A, B> {
    Left(A),
    Right(B),
}

/// tokio's `select!` of two futures: the first ready wins, the other is dropped.
async fn select2<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let mut a = pin!(a);
    let mut b = pin!(b);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(v));
        }
        if let Poll::Ready(v) = b.as_mut().poll(cx) {
            return Poll::Ready(Either::Right(v));
        }
        Poll::Pending
    })
    .await
}

#[derive(Clone, Copy, Debug)]
enum Ctx {
    Task,
    Fiber,
    Thread,
}

const CTXS: [Ctx; 3] = [Ctx::Task, Ctx::Fiber, Ctx::Thread];

/// Waits for what [`run_in`] started: its value, or why it has none.
type Joiner<T> = Box<dyn FnOnce() -> Result<T, String> + Send>;

/// Runs the future `f` makes as a task of `rt`, in a fiber of `rt` (through
/// `weft::wait`), or on a plain thread that entered `rt` (through `weft::wait`).
fn run_in<T, Fut>(
    rt: &weft::Runtime,
    ctx: Ctx,
    f: impl FnOnce() -> Fut + Send + 'static,
) -> Joiner<T>
where
    T: Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    match ctx {
        Ctx::Task => {
            let h = rt.spawn(async move { f().await });
            Box::new(move || h.join().map_err(|e| format!("{e:?}")))
        }
        Ctx::Fiber => {
            let h = rt.block_on(async move { weft::fiber::spawn(move || weft::wait(f())) });
            Box::new(move || h.join().map_err(|e| format!("{e:?}")))
        }
        Ctx::Thread => {
            let handle = rt.handle().clone();
            let h = std::thread::spawn(move || {
                let _g = handle.enter();
                weft::wait(f())
            });
            Box::new(move || h.join().map_err(|_| "the thread panicked".to_string()))
        }
    }
}

// ------------------------------------------------- select! around sync primitives

/// A barrier wait that loses a `select!` to a sleep again and again withdraws its
/// arrival every time: a lone partner does not pass afterwards, and the next real
/// arrival releases exactly the two of them, with one leader.
#[test]
fn barrier_waits_losing_a_select_to_a_sleep_withdraw_their_arrivals() {
    watchdog(15, || {
        let rt = workers(2);
        for ctx in CTXS {
            let b = Arc::new(Barrier::new(2));
            let b2 = b.clone();
            let lost = run_in(&rt, ctx, move || async move {
                let mut lost = 0;
                for i in 0..20u64 {
                    match select2(b2.wait(), time::sleep(Duration::from_micros(i * 100))).await {
                        Either::Left(_) => panic!("a lone waiter of two passed"),
                        Either::Right(()) => lost += 1,
                    }
                }
                lost
            })();
            assert_eq!(lost, Ok(20), "{ctx:?}");
            // A lone waiter must not pass now.
            let mut lone = pin!(b.wait());
            assert!(
                poll_once(lone.as_mut()).is_pending(),
                "{ctx:?}: arrivals were left behind"
            );
            let b3 = b.clone();
            let other = run_in(&rt, ctx, move || async move { b3.wait().await.is_leader() });
            let start = Instant::now();
            let mine = loop {
                if let Poll::Ready(r) = poll_once(lone.as_mut()) {
                    break r.is_leader();
                }
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "{ctx:?}: the pair never passed"
                );
                std::thread::sleep(ms(1));
            };
            let theirs = other().unwrap();
            assert!(
                mine ^ theirs,
                "{ctx:?}: one leader per generation ({mine}, {theirs})"
            );
        }
    });
}

/// `recv` in a loop of `select!`s against short sleeps, in every context, while a
/// thread sends: every value arrives once, in order.
#[test]
fn broadcast_recv_losing_selects_loses_and_duplicates_nothing() {
    watchdog(15, || {
        let rt = workers(2);
        for (k, ctx) in CTXS.into_iter().enumerate() {
            let (tx, mut rx) = broadcast::channel::<u64>(256);
            let mut rx2 = tx.subscribe();
            let got = run_in(&rt, ctx, move || async move {
                let mut got = Vec::new();
                let mut rounds = 0u64;
                while got.len() < 200 {
                    rounds += 1;
                    assert!(rounds < 1_000_000, "unbounded");
                    match select2(rx.recv(), time::sleep(Duration::from_micros(rounds % 700))).await
                    {
                        Either::Left(Ok(v)) => got.push(v),
                        Either::Left(Err(e)) => panic!("{e:?}"),
                        Either::Right(()) => {}
                    }
                }
                got
            });
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 + k as u64);
            for v in 0..200u64 {
                tx.send(v).unwrap();
                if rng.next().is_multiple_of(3) {
                    std::thread::sleep(Duration::from_micros(rng.next() % 400));
                }
            }
            assert_eq!(got().unwrap(), (0..200).collect::<Vec<_>>(), "{ctx:?}");
            for v in 0..200u64 {
                assert_eq!(rx2.try_recv(), Ok(v));
            }
        }
    });
}

/// `changed` in a loop of `select!`s against sleeps: the receiver sees the last value,
/// never goes backwards, and then sees the sender go.
#[test]
fn watch_changed_losing_selects_sees_the_last_value_then_the_close() {
    watchdog(15, || {
        let rt = workers(2);
        for ctx in CTXS {
            let (tx, mut rx) = watch::channel(0u64);
            let seen = run_in(&rt, ctx, move || async move {
                let mut last = 0;
                let mut rounds = 0u64;
                loop {
                    rounds += 1;
                    assert!(rounds < 1_000_000, "unbounded");
                    match select2(
                        rx.changed(),
                        time::sleep(Duration::from_micros(rounds % 500)),
                    )
                    .await
                    {
                        Either::Left(Ok(())) => {
                            let v = *rx.borrow_and_update();
                            assert!(v > last, "went from {last} to {v}");
                            last = v;
                        }
                        Either::Left(Err(_)) => return last,
                        Either::Right(()) => {}
                    }
                }
            });
            for v in 1..=100u64 {
                tx.send(v).unwrap();
                if v % 7 == 0 {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
            drop(tx);
            assert_eq!(seen().unwrap(), 100, "{ctx:?}");
        }
    });
}

/// `WaitGroup::wait` and a oneshot receive (by `&mut`) in loops of `select!`s: both end
/// once the count is zero / the value is sent, and the value is the one sent.
#[test]
fn wait_group_and_oneshot_losing_selects_still_complete() {
    watchdog(15, || {
        let rt = workers(2);
        for ctx in CTXS {
            let wg = WaitGroup::new();
            wg.add(3);
            let (tx, mut orx) = oneshot::channel::<String>();
            let w = wg.clone();
            let done = run_in(&rt, ctx, move || async move {
                let mut rounds = 0u64;
                let mut wg_done = false;
                let mut value = None;
                while !wg_done || value.is_none() {
                    rounds += 1;
                    assert!(rounds < 1_000_000, "unbounded");
                    if !wg_done {
                        if let Either::Left(()) =
                            select2(w.wait(), time::sleep(Duration::from_micros(rounds % 300)))
                                .await
                        {
                            wg_done = true;
                        }
                    }
                    if value.is_none() {
                        if let Either::Left(r) =
                            select2(&mut orx, time::sleep(Duration::from_micros(rounds % 300)))
                                .await
                        {
                            value = Some(r.unwrap());
                        }
                    }
                }
                value.unwrap()
            });
            for _ in 0..3 {
                std::thread::sleep(ms(3));
                wg.done();
            }
            std::thread::sleep(ms(3));
            tx.send("v".to_string()).unwrap();
            assert_eq!(done().unwrap(), "v", "{ctx:?}");
            wg.wait_blocking();
        }
    });
}

// ------------------------------------------ a runtime dropped under every waiter

fn parked(rt: &weft::Runtime) -> usize {
    rt.dump().to_string().matches("parked on").count()
}

/// Tasks, fibers and plain threads wait on a barrier, a wait group, a watch, a broadcast
/// and a oneshot whose senders a fiber and a task hold, and the runtime is dropped from
/// another thread: the tasks and fibers end cancelled (their arrivals withdrawn, the
/// senders they held dropped, so the threads' receives end `Closed`), and the plain
/// threads still waiting go on when the primitive is released later.
#[test]
fn a_runtime_dropped_under_waiters_of_every_kind() {
    watchdog(15, || {
        for round in 0..3 {
            let rt = workers(2);
            let b = Arc::new(Barrier::new(4));
            let wg = WaitGroup::new();
            wg.add(1);
            let (wtx, wrx) = watch::channel(0u32);
            let (btx, brx) = broadcast::channel::<u32>(4);
            let mut brxs: Vec<_> = (0..4).map(|_| btx.subscribe()).collect();
            drop(brx);
            let (otx, orx) = oneshot::channel::<u32>();
            // The senders' holders: a fiber (watch, oneshot) and a task (broadcast).
            let holder_fiber = rt.block_on(async move {
                weft::fiber::spawn(move || {
                    let _keep = (wtx, otx);
                    weft::fiber::sleep(Duration::from_secs(3600));
                })
            });
            let holder_task = rt.spawn(async move {
                let _keep = btx;
                std::future::pending::<()>().await;
            });
            let mut joins: Vec<(String, Joiner<String>)> = Vec::new();
            let mut threads = Vec::new();
            for ctx in CTXS {
                let (b, wg, mut wrx) = (b.clone(), wg.clone(), wrx.clone());
                let mut brx = brxs.pop().unwrap();
                let j = run_in(&rt, ctx, move || async move {
                    let leader = b.wait().await.is_leader();
                    wg.wait().await;
                    let w = wrx.changed().await;
                    let r = brx.recv().await;
                    format!("{leader} {w:?} {r:?}")
                });
                match ctx {
                    Ctx::Thread => threads.push(j),
                    _ => joins.push((format!("{ctx:?}"), j)),
                }
            }
            // Per-primitive plain threads, each on one primitive.
            let t_watch = {
                let mut wrx = wrx.clone();
                std::thread::spawn(move || wrx.changed_blocking())
            };
            let t_bcast = {
                let mut brx = brxs.pop().unwrap();
                std::thread::spawn(move || brx.recv_blocking())
            };
            let t_once = std::thread::spawn(move || orx.recv_blocking());
            common::wait_until("everyone parks", || parked(&rt) >= 4);
            std::thread::sleep(ms(5));
            std::thread::spawn(move || drop(rt)).join().unwrap();
            for (what, j) in joins {
                let e = j().unwrap_err();
                assert!(e.contains("ancel"), "round {round}: {what}: {e}");
            }
            assert!(holder_fiber.join().unwrap_err().is_cancelled());
            assert!(holder_task.join().unwrap_err().is_cancelled());
            assert!(t_watch.join().unwrap().is_err(), "round {round}: watch");
            assert_eq!(
                t_bcast.join().unwrap(),
                Err(broadcast::error::RecvError::Closed),
                "round {round}: broadcast"
            );
            assert!(t_once.join().unwrap().is_err(), "round {round}: oneshot");
            // The barrier: one plain thread waits; the cancelled arrivals are gone, so
            // two more do not release it.
            let more: Vec<_> = (0..2)
                .map(|_| {
                    let b = b.clone();
                    std::thread::spawn(move || b.wait_blocking().is_leader())
                })
                .collect();
            std::thread::sleep(ms(20));
            assert!(
                more.iter().all(|t| !t.is_finished()),
                "round {round}: the barrier released three of four (cancelled arrivals kept)"
            );
            let last = b.wait_blocking().is_leader();
            let mut leaders = usize::from(last);
            for t in more {
                leaders += usize::from(t.join().unwrap());
            }
            wg.done();
            for j in threads {
                let s = j().unwrap();
                // The thread passed the barrier, then the group, then saw the watch and
                // the broadcast close.
                assert!(
                    s.contains("Err") && s.contains("Closed"),
                    "round {round}: {s}"
                );
                leaders += usize::from(s.starts_with("true"));
            }
            assert_eq!(leaders, 1, "round {round}");
        }
    });
}

// ------------------------------------------------- nurseries over sync primitives

use common::DropCounter;

/// Everything a child may wait on, shared.
#[derive(Clone)]
struct Prims {
    barrier: Arc<Barrier>,
    wg: WaitGroup,
    wrx: watch::Receiver<u32>,
    btx: broadcast::Sender<u32>,
    orx: Arc<std::sync::Mutex<Vec<oneshot::Receiver<u32>>>>,
}

struct Senders {
    wtx: watch::Sender<u32>,
    otxs: Vec<oneshot::Sender<u32>>,
}

const KINDS: u64 = 7;

fn prims(oneshots: usize) -> (Prims, Senders) {
    let wg = WaitGroup::new();
    wg.add(1);
    let (wtx, wrx) = watch::channel(0);
    let (btx, _) = broadcast::channel(4);
    let (otxs, orxs): (Vec<_>, Vec<_>) = (0..oneshots).map(|_| oneshot::channel()).unzip();
    (
        Prims {
            barrier: Arc::new(Barrier::new(1000)),
            wg,
            wrx,
            btx,
            orx: Arc::new(std::sync::Mutex::new(orxs)),
        },
        Senders { wtx, otxs },
    )
}

impl Prims {
    /// A wait that never ends on its own: kind `k` of [`KINDS`].
    async fn wait_on(&self, k: u64) {
        match k {
            0 => {
                self.barrier.wait().await;
            }
            1 => self.wg.wait().await,
            2 => {
                let mut rx = self.wrx.clone();
                let _ = rx.changed().await;
            }
            3 => {
                let mut rx = self.btx.subscribe();
                let _ = rx.recv().await;
            }
            4 => {
                let rx = self.orx.lock().unwrap().pop().expect("a oneshot left");
                let _ = rx.await;
            }
            5 => time::sleep(Duration::from_secs(3600)).await,
            _ => {
                let mut iv = time::interval(Duration::from_secs(3600));
                loop {
                    iv.tick().await;
                }
            }
        }
    }

    /// The same wait in blocking form (for a fiber).
    fn wait_on_blocking(&self, k: u64) {
        match k {
            0 => {
                self.barrier.wait_blocking();
            }
            1 => self.wg.wait_blocking(),
            2 => {
                let mut rx = self.wrx.clone();
                let _ = rx.changed_blocking();
            }
            3 => {
                let mut rx = self.btx.subscribe();
                let _ = rx.recv_blocking();
            }
            4 => {
                let rx = self.orx.lock().unwrap().pop().expect("a oneshot left");
                let _ = rx.recv_blocking();
            }
            5 => weft::fiber::sleep(Duration::from_secs(3600)),
            _ => weft::wait(self.wait_on(k)),
        }
    }

    /// After every waiter is gone: nothing is left registered.
    fn check_clean(&self, s: &Senders, what: &str) {
        // Every arrival withdrawn: 999 arrivals of a barrier for 1000 all wait (one
        // arrival left behind would make the last of them the leader).
        let mut arrivals: Vec<_> = (0..999).map(|_| Box::pin(self.barrier.wait())).collect();
        for (i, a) in arrivals.iter_mut().enumerate() {
            assert!(
                poll_once(a.as_mut()).is_pending(),
                "{what}: barrier released at {i}"
            );
        }
        drop(arrivals);
        assert_eq!(
            self.btx.receiver_count(),
            0,
            "{what}: broadcast receivers left"
        );
        assert_eq!(s.wtx.receiver_count(), 1, "{what}: watch receivers left");
        // Receivers that no child took (a child cancelled before it started) go now.
        self.orx.lock().unwrap().clear();
        for (i, o) in s.otxs.iter().enumerate() {
            assert!(o.is_closed(), "{what}: oneshot receiver {i} left");
        }
    }
}

/// Spawns `2 * KINDS` children (a task and a fiber per kind of wait), each holding a
/// `DropCounter`, that wait for ever.
fn spawn_waiters<'s>(n: &weft::Nursery<'s, &'static str>, p: &Prims, ended: &Arc<AtomicUsize>) {
    for k in 0..KINDS {
        let (p1, c1) = (p.clone(), DropCounter(ended.clone()));
        n.spawn(async move {
            let _c = c1;
            p1.wait_on(k).await;
            Err("a task child's wait ended")
        });
        let (p2, c2) = (p.clone(), DropCounter(ended.clone()));
        n.spawn_fiber(move || {
            let _c = c2;
            p2.wait_on_blocking(k);
            Err("a fiber child's wait ended")
        });
    }
}

fn load(c: &AtomicUsize) -> usize {
    c.load(SeqCst)
}

/// `Nursery::cancel` while task and fiber children wait on every primitive (and on
/// timers), for owners of every kind: the nursery returns the body's value, every
/// child's state is dropped once, and the primitives keep nothing of theirs.
#[test]
fn cancelling_a_nursery_whose_children_wait_on_every_primitive() {
    watchdog(15, || {
        let rt = workers(2);
        for ctx in CTXS {
            let (p, s) = prims(2);
            let ended = Arc::new(AtomicUsize::new(0));
            let (p1, e1) = (p.clone(), ended.clone());
            let j = run_in(&rt, ctx, move || async move {
                let b = |n: &weft::Nursery<'_, &'static str>| {
                    spawn_waiters(n, &p1, &e1);
                    std::thread::sleep(ms(20));
                    n.cancel();
                    Ok(7)
                };
                match ctx {
                    // A task awaits the async form (its body cancels at once after the
                    // spawns, then waits a little).
                    Ctx::Task => {
                        weft::nursery(move |n| async move {
                            spawn_waiters(&n, &p1, &e1);
                            time::sleep(ms(20)).await;
                            n.cancel();
                            Ok(7)
                        })
                        .await
                    }
                    _ => weft::nursery_blocking(b),
                }
            });
            assert_eq!(j(), Ok(Ok(7)), "{ctx:?}");
            assert_eq!(
                load(&ended),
                2 * KINDS as usize,
                "{ctx:?}: children's state dropped"
            );
            p.check_clean(&s, &format!("{ctx:?}"));
        }
    });
}

/// A child panics while its siblings wait on every primitive: the owner resumes that
/// panic once every sibling has ended, and the primitives keep nothing of theirs.
/// A body that returns `Err` early does the same with its error.
#[test]
fn a_child_panic_or_an_early_err_ends_siblings_waiting_on_every_primitive() {
    watchdog(15, || {
        let rt = workers(2);
        for ctx in CTXS {
            for panics in [true, false] {
                let (p, s) = prims(2);
                let ended = Arc::new(AtomicUsize::new(0));
                let (p1, e1) = (p.clone(), ended.clone());
                let j = run_in(&rt, ctx, move || async move {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        weft::nursery_blocking(|n: &weft::Nursery<'_, &'static str>| {
                            spawn_waiters(n, &p1, &e1);
                            if panics {
                                n.spawn_fiber(|| {
                                    weft::fiber::sleep(ms(10));
                                    panic!("child boom")
                                });
                                Ok(1)
                            } else {
                                std::thread::sleep(ms(10));
                                Err("body err")
                            }
                        })
                    }));
                    match r {
                        Ok(r) => format!("{r:?}"),
                        Err(p) => p.downcast_ref::<&str>().unwrap().to_string(),
                    }
                });
                let want = if panics {
                    "child boom"
                } else {
                    "Err(\"body err\")"
                };
                assert_eq!(j(), Ok(want.to_string()), "{ctx:?}");
                assert_eq!(load(&ended), 2 * KINDS as usize, "{ctx:?}");
                p.check_clean(&s, &format!("{ctx:?} panics={panics}"));
            }
        }
    });
}

/// The async nursery polled once (its children started and waiting on every
/// primitive), then dropped on another thread: every child ends and lets go.
#[test]
fn an_async_nursery_dropped_on_another_thread_ends_its_waiting_children() {
    watchdog(15, || {
        let rt = workers(2);
        let (p, s) = prims(2);
        let ended = Arc::new(AtomicUsize::new(0));
        let (p1, e1) = (p.clone(), ended.clone());
        let fut = {
            let _g = rt.enter();
            let mut fut = Box::pin(weft::nursery(move |n| async move {
                spawn_waiters(&n, &p1, &e1);
                std::future::pending::<()>().await;
                Ok(())
            }));
            assert!(poll_once(fut.as_mut()).is_pending());
            fut
        };
        common::wait_until("the children park", || parked(&rt) >= 2 * KINDS as usize);
        std::thread::spawn(move || drop(fut)).join().unwrap();
        common::wait_until("every child ends", || load(&ended) == 2 * KINDS as usize);
        assert_eq!(settle(&rt, Duration::from_secs(2)), 0, "{}", rt.dump());
        p.check_clean(&s, "dropped");
    });
}

/// A deadline nursery whose children wait on every primitive: `Err(Elapsed)` in both
/// forms, every child ended.
#[test]
fn a_deadline_ends_children_waiting_on_every_primitive() {
    watchdog(15, || {
        let rt = workers(2);
        for blocking in [false, true] {
            let (p, s) = prims(2);
            let ended = Arc::new(AtomicUsize::new(0));
            let (p1, e1) = (p.clone(), ended.clone());
            let opts = weft::Nursery::with_timeout(ms(30));
            let r = if blocking {
                let _g = rt.enter();
                opts.run_blocking(move |n| {
                    spawn_waiters(n, &p1, &e1);
                    Ok(())
                })
            } else {
                rt.block_on(opts.run(move |n| async move {
                    spawn_waiters(&n, &p1, &e1);
                    Ok(())
                }))
            };
            assert!(r.is_err(), "blocking={blocking}: {r:?}");
            assert_eq!(load(&ended), 2 * KINDS as usize);
            p.check_clean(&s, &format!("deadline blocking={blocking}"));
        }
        assert_eq!(settle(&rt, Duration::from_secs(2)), 0, "{}", rt.dump());
    });
}

/// Nested nurseries, the inner one in a fiber child and in a task child: an inner
/// child's error is the inner nursery's result, which the outer child handles; the
/// outer nursery returns its body's value, and the inner children waiting on
/// primitives were all ended by the inner failure.
#[test]
fn an_inner_nurserys_failure_is_its_owners_to_handle() {
    watchdog(15, || {
        let rt = workers(2);
        let _g = rt.enter();
        let (p, s) = prims(4);
        let ended = Arc::new(AtomicUsize::new(0));
        let handled = Arc::new(AtomicUsize::new(0));
        let r = weft::nursery_blocking(|outer: &weft::Nursery<'_, &'static str>| {
            let (p1, e1, h1) = (p.clone(), ended.clone(), handled.clone());
            outer.spawn_fiber(move || {
                let r = weft::nursery_blocking(|n: &weft::Nursery<'_, &'static str>| {
                    spawn_waiters(n, &p1, &e1);
                    n.spawn(async {
                        time::sleep(ms(10)).await;
                        Err("inner")
                    });
                    Ok(())
                });
                assert_eq!(r, Err("inner"));
                h1.fetch_add(1, SeqCst);
                Ok(())
            });
            let (p2, e2, h2) = (p.clone(), ended.clone(), handled.clone());
            outer.spawn(async move {
                let r = weft::nursery(move |n| async move {
                    spawn_waiters(&n, &p2, &e2);
                    n.spawn_fiber(|| {
                        weft::fiber::sleep(ms(10));
                        Err("inner async")
                    });
                    std::future::pending::<()>().await;
                    Ok(())
                })
                .await;
                assert_eq!(r, Err("inner async"));
                h2.fetch_add(1, SeqCst);
                Ok(())
            });
            Ok("outer")
        });
        assert_eq!(r, Ok("outer"));
        assert_eq!(load(&handled), 2);
        assert_eq!(load(&ended), 4 * KINDS as usize);
        p.check_clean(&s, "nested");
    });
}

/// The runtime is dropped (from another thread) while a plain thread's blocking
/// nursery body runs and its children wait on every primitive; the body then spawns
/// more children, which never run. The nursery returns the body's value (children
/// cancelled by the shutdown are not failures) and every child's state is dropped.
#[test]
fn a_runtime_dropped_under_a_blocking_nursery_body_that_goes_on_spawning() {
    watchdog(15, || {
        let rt = workers(2);
        let (p, s) = prims(2);
        let ended = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        let handle = rt.handle().clone();
        let rt_slot = std::sync::Mutex::new(Some(rt));
        let r = {
            let _g = handle.enter();
            let (p1, e1, ran1) = (p.clone(), ended.clone(), ran.clone());
            weft::nursery_blocking(move |n: &weft::Nursery<'_, &'static str>| {
                spawn_waiters(n, &p1, &e1);
                let rt = rt_slot.lock().unwrap().take().unwrap();
                common::wait_until("the children park", || parked(&rt) >= 2 * KINDS as usize);
                std::thread::spawn(move || drop(rt)).join().unwrap();
                for _ in 0..3 {
                    let (r1, c1) = (ran1.clone(), DropCounter(e1.clone()));
                    n.spawn(async move {
                        let _c = c1;
                        r1.fetch_add(1, SeqCst);
                        Ok(())
                    });
                    let (r2, c2) = (ran1.clone(), DropCounter(e1.clone()));
                    n.spawn_fiber(move || {
                        let _c = c2;
                        r2.fetch_add(1, SeqCst);
                        Ok(())
                    });
                }
                Ok(5)
            })
        };
        assert_eq!(r, Ok(5));
        assert_eq!(load(&ran), 0, "a child spawned after the shutdown ran");
        assert_eq!(load(&ended), 2 * KINDS as usize + 6);
        p.check_clean(&s, "runtime dropped");
    });
}

// ----------------------------------------------------------------- edge values

/// Timeouts of zero and `Duration::MAX`, deadlines in the past, in every context: a
/// future ready at its first poll wins even a zero timeout; a pending one loses it at
/// once; `Duration::MAX` is "never" (no overflow) and is dropped cleanly in a select.
#[test]
fn zero_max_and_past_timeouts_in_every_context() {
    watchdog(15, || {
        let rt = workers(2);
        for ctx in CTXS {
            let j = run_in(&rt, ctx, move || async move {
                assert_eq!(time::timeout(Duration::ZERO, async { 1 }).await, Ok(1));
                assert!(time::timeout(Duration::ZERO, std::future::pending::<()>())
                    .await
                    .is_err());
                let past = Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
                assert!(time::timeout_at(past, std::future::pending::<()>())
                    .await
                    .is_err());
                assert_eq!(time::timeout_at(past, async { 2 }).await, Ok(2));
                let start = Instant::now();
                let r = time::timeout(Duration::MAX, async {
                    time::sleep(ms(5)).await;
                    3
                })
                .await;
                assert_eq!(r, Ok(3));
                assert!(start.elapsed() >= ms(5));
                // `sleep(MAX)` and `sleep(0)` raced: zero wins, the far one is dropped.
                match select2(time::sleep(Duration::MAX), time::sleep(Duration::ZERO)).await {
                    Either::Right(()) => {}
                    Either::Left(()) => panic!("sleep(Duration::MAX) ended"),
                }
                let s = time::sleep(Duration::MAX);
                assert!(!s.is_elapsed());
                assert!(s.deadline() > Instant::now() + Duration::from_secs(86_400 * 365));
                // A sleep reset into the past ends at once.
                let mut s = pin!(time::sleep(Duration::MAX));
                assert!(poll_once(s.as_mut()).is_pending());
                s.as_mut().reset(past);
                s.await;
                // Nested timeouts: the inner, shorter one fires.
                let r = time::timeout(
                    Duration::MAX,
                    time::timeout(ms(2), std::future::pending::<()>()),
                )
                .await;
                assert!(matches!(r, Ok(Err(_))));
                "ok"
            });
            assert_eq!(j(), Ok("ok"), "{ctx:?}");
        }
        // Fibers' own sleeps of zero and in a timed race.
        let h = rt.block_on(async {
            weft::fiber::spawn(|| {
                weft::fiber::sleep(Duration::ZERO);
                let start = Instant::now();
                weft::fiber::sleep(ms(3));
                start.elapsed()
            })
        });
        assert!(h.join().unwrap() >= ms(3));
    });
}

/// A 1 ms interval that misses ticks: Burst delivers the missed ticks at once and then
/// keeps to its schedule; Delay and Skip never return a tick scheduled before the
/// previous one or far in the past.
#[test]
fn a_tiny_interval_missing_ticks() {
    watchdog(15, || {
        let rt = workers(1);
        rt.block_on(async {
            for b in [
                MissedTickBehavior::Burst,
                MissedTickBehavior::Delay,
                MissedTickBehavior::Skip,
            ] {
                let mut iv = time::interval(ms(1));
                iv.set_missed_tick_behavior(b);
                let t0 = iv.tick().await;
                std::thread::sleep(ms(30));
                let mut last = t0;
                let mut at_once = 0;
                for _ in 0..60 {
                    let before = Instant::now();
                    let t = iv.tick().await;
                    assert!(t > last, "{b:?}: ticks go forwards");
                    if b != MissedTickBehavior::Burst && at_once > 1 {
                        assert!(
                            t + ms(2) >= before,
                            "{b:?}: a tick scheduled {:?} before it was asked for",
                            before - t
                        );
                    }
                    if before.elapsed() < Duration::from_micros(200) {
                        at_once += 1;
                    }
                    last = t;
                }
                match b {
                    MissedTickBehavior::Burst => {
                        assert!(at_once >= 25, "Burst: {at_once} ticks at once");
                        assert_eq!(last, t0 + ms(60));
                    }
                    _ => assert!(at_once < 15, "{b:?}: {at_once} ticks at once"),
                }
            }
        });
    });
}

/// Barriers of 0 and 1 in every context: every wait leads at once. Wait groups: a count
/// that would overflow panics and leaves the count as it was; a huge count is kept.
#[test]
fn barrier_of_zero_and_one_and_wait_group_extremes() {
    watchdog(15, || {
        let rt = workers(2);
        for n in [0, 1] {
            for ctx in CTXS {
                let b = Arc::new(Barrier::new(n));
                let b2 = b.clone();
                let j = run_in(&rt, ctx, move || async move {
                    let mut leaders = 0;
                    for _ in 0..10 {
                        leaders += usize::from(b2.wait().await.is_leader());
                        leaders += usize::from(b2.wait_blocking().is_leader());
                    }
                    leaders
                });
                assert_eq!(j(), Ok(20), "n = {n}, {ctx:?}");
            }
        }
        let wg = WaitGroup::new();
        wg.add(usize::MAX);
        let r = catch_unwind(AssertUnwindSafe(|| wg.add(1)));
        assert!(r.is_err(), "an overflowing add panics");
        assert_eq!(
            format!("{wg:?}"),
            format!("WaitGroup {{ count: {} }}", usize::MAX)
        );
        let mut w = pin!(wg.wait());
        assert!(poll_once(w.as_mut()).is_pending());
        wg.add(0);
        wg.done();
        assert!(poll_once(w.as_mut()).is_pending());
        let wg = WaitGroup::new();
        wg.add(2);
        let w1 = wg.clone();
        let t = std::thread::spawn(move || w1.wait_blocking());
        wg.done();
        wg.done();
        t.join().unwrap();
        assert!(catch_unwind(AssertUnwindSafe(|| wg.done())).is_err());
        wg.wait_blocking();
    });
}

// ------------------------------------------------ drops racing a hand-off

/// A registered barrier wait dropped on one thread while the arrival that completes
/// its generation happens on another: either the drop withdrew the arrival first (the
/// arriving waiter then waits, and the next arrival releases it with one leader) or the
/// generation completed first (the arriving waiter leads, and the barrier is fresh).
#[test]
fn barrier_wait_dropped_while_the_last_arrival_comes() {
    watchdog(15, || {
        let b = Barrier::new(2);
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let (mut withdrawn, mut released) = (0, 0);
        for round in 0..300 {
            let mut a = Box::pin(b.wait());
            assert!(poll_once(a.as_mut()).is_pending());
            let (p1, p2) = (rng.next() % 50, rng.next() % 50);
            let led = std::thread::scope(|s| {
                let d = s.spawn(move || {
                    common::spin_for(Duration::from_micros(p1));
                    drop(a);
                });
                let mut w = Box::pin(b.wait());
                common::spin_for(Duration::from_micros(p2));
                let r = poll_once(w.as_mut());
                d.join().unwrap();
                match r {
                    Poll::Ready(r) => {
                        assert!(r.is_leader(), "round {round}");
                        None
                    }
                    Poll::Pending => Some(w),
                }
            });
            match led {
                None => {
                    released += 1;
                    // Fresh: a lone waiter waits.
                    let mut lone = pin!(b.wait());
                    assert!(
                        poll_once(lone.as_mut()).is_pending(),
                        "round {round}: not fresh"
                    );
                }
                Some(mut w) => {
                    withdrawn += 1;
                    let mut c = pin!(b.wait());
                    let Poll::Ready(c) = poll_once(c.as_mut()) else {
                        panic!("round {round}: the second of two did not release the barrier");
                    };
                    assert!(c.is_leader());
                    let Poll::Ready(w) = poll_once(w.as_mut()) else {
                        panic!("round {round}: a released waiter still waits");
                    };
                    assert!(!w.is_leader());
                }
            }
        }
        assert_eq!(withdrawn + released, 300);
    });
}

/// A oneshot receiver dropped on one thread while the value is sent on another: the
/// value is dropped exactly once, by whichever side ends up with it. And a watch
/// receiver's `changed` dropped while the sender sends and goes loses neither the
/// change nor the close.
#[test]
fn oneshot_and_watch_drops_racing_the_sender() {
    watchdog(15, || {
        let mut rng = Rng(0xfeed_beef_dead_c0de);
        for round in 0..300 {
            let drops = Arc::new(AtomicUsize::new(0));
            let (tx, mut rx) = oneshot::channel::<DropCounter>();
            assert!(poll_once(Pin::new(&mut rx)).is_pending());
            let (p1, p2) = (rng.next() % 40, rng.next() % 40);
            let d = drops.clone();
            std::thread::scope(|s| {
                let t = s.spawn(move || {
                    common::spin_for(Duration::from_micros(p1));
                    drop(rx);
                });
                common::spin_for(Duration::from_micros(p2));
                // `Err` gives the value back (dropped here); `Ok` leaves it to the
                // receiver's drop.
                drop(tx.send(DropCounter(d)));
                t.join().unwrap();
            });
            assert_eq!(
                load(&drops),
                1,
                "round {round}: the value dropped {} times",
                load(&drops)
            );

            let (wtx, mut wrx) = watch::channel(0u32);
            std::thread::scope(|s| {
                let mut ch = Box::pin(wrx.changed());
                assert!(poll_once(ch.as_mut()).is_pending());
                let t = s.spawn(move || {
                    common::spin_for(Duration::from_micros(p1));
                    wtx.send(1).unwrap();
                    drop(wtx);
                });
                common::spin_for(Duration::from_micros(p2));
                drop(ch);
                t.join().unwrap();
            });
            // The change was not lost by the dropped `changed`, then the close.
            assert_eq!(
                poll_once(pin!(wrx.changed())),
                Poll::Ready(Ok(())),
                "round {round}"
            );
            assert_eq!(*wrx.borrow(), 1);
            assert!(
                matches!(poll_once(pin!(wrx.changed())), Poll::Ready(Err(_))),
                "round {round}"
            );
        }
    });
}
