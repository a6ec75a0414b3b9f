//! Review session 40: timers, timeouts and nurseries, attacked from safe code only.
//!
//! `sleep`/`timeout`/`interval` moved after their first poll, polled by another runtime
//! or by a hand-rolled executor, dropped on other threads as they fire and after their
//! runtime is gone, reset at the moment they fire; zero, past, huge and `Duration::MAX`
//! deadlines; missed-tick behaviours. Timeouts racing the value they wait for (channel
//! receives and selects, lock and semaphore acquires, `Notify`, socket reads with a read
//! timeout) in tasks, fibers, tasks nested on a worker (`weft::wait`) and plain threads:
//! nothing handed to a timed-out wait may be lost. `Stats::timers_pending` after
//! cancellation storms, and the wake-ups of an idle runtime with cancelled timers.
//! Nurseries whose children wait on timers, channels, locks and `Notify` when a sibling
//! panics, a deadline passes, the owner is dropped or aborted, or the runtime goes.
//! Every wait is bounded.

// Sleeps are made inside `block_on` (bound to that runtime) and polled elsewhere: the
// future returning a future is the point.
#![allow(clippy::async_yields_async)]

mod common;

use common::placement::ms;

use std::future::Future;
use std::io::{Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{
    counter, fiber_on, join_within, load, poll_once, spin_for, thread_within, watchdog, workers,
    DropCounter, Rng,
};
use weft::sync::{Mutex, Notify, RwLock, Semaphore};
use weft::time::{self, MissedTickBehavior};
use weft::Runtime;

fn timers_settle(rt: &Runtime, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = rt.stats().timers_pending;
        if n == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {n} timers still pending 5 s after every waiter is gone"
        );
        std::thread::sleep(ms(1));
    }
}

/// A waker that counts its wakes and unparks the thread that made it.
struct Flag {
    wakes: AtomicUsize,
    thread: std::thread::Thread,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        self.thread.unpark();
    }
}

fn flag() -> (Arc<Flag>, Waker) {
    let f = Arc::new(Flag {
        wakes: AtomicUsize::new(0),
        thread: std::thread::current(),
    });
    let w = Waker::from(f.clone());
    (f, w)
}

/// A hand-rolled executor: polls `f` on this thread with a parking waker until ready,
/// or panics with "hang" after `limit`.
fn park_on<F: Future>(f: F, limit: Duration) -> F::Output {
    let mut f = pin!(f);
    let (_f, w) = flag();
    let mut cx = Context::from_waker(&w);
    let end = Instant::now() + limit;
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        let left = end.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "hang: a hand-polled future never woke");
        std::thread::park_timeout(left);
    }
}

/// Counts the polls of the future it wraps.
struct Counted<'a, F> {
    f: F,
    polls: &'a AtomicUsize,
}

impl<F: Future + Unpin> Future for Counted<'_, F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.fetch_add(1, SeqCst);
        Pin::new(&mut self.f).poll(cx)
    }
}

// ------------------------------------------------------------- sleeps in odd hands

/// A sleep bound to runtime A, polled once with a no-op waker, then moved to a plain
/// thread's hand-rolled executor, then into a task of runtime B: it ends at its
/// deadline wherever it is, never early, and leaves nothing on A's wheel.
#[test]
fn a_sleep_moved_after_its_first_poll_ends_in_other_hands() {
    watchdog(10, || {
        let a = workers(1);
        let b = workers(1);
        // Moved to a plain thread.
        let mut s = a.block_on(async { Box::pin(time::sleep(ms(30))) });
        assert!(poll_once(s.as_mut(), Waker::noop()).is_pending());
        assert_eq!(a.stats().timers_pending, 1);
        let deadline = s.deadline();
        std::thread::spawn(move || park_on(s, Duration::from_secs(5)))
            .join()
            .unwrap();
        assert!(Instant::now() >= deadline);
        timers_settle(&a, "after the moved sleep ended");

        // Moved into a task of another runtime.
        let mut s = a.block_on(async { Box::pin(time::sleep(ms(30))) });
        assert!(poll_once(s.as_mut(), Waker::noop()).is_pending());
        let deadline = s.deadline();
        let h = b.spawn(async move {
            s.await;
            Instant::now()
        });
        let ended = join_within(h, 5).unwrap();
        assert!(ended >= deadline);
        timers_settle(&a, "after the sleep moved to runtime B ended");
        assert_eq!(b.stats().timers_pending, 0);

        // Created unbound on a plain thread, first polled in a task: binds there.
        let s = time::sleep(ms(20));
        let deadline = s.deadline();
        let ended = join_within(
            b.spawn(async move {
                s.await;
                Instant::now()
            }),
            5,
        )
        .unwrap();
        assert!(ended >= deadline);
        timers_settle(&b, "after the late-bound sleep ended");
    });
}

/// Sleeps polled once (a counting waker) then dropped on another thread around the
/// moment they fire: nothing stays on the wheel and no waker is kept (its `Arc` count
/// returns to one).
#[test]
fn sleeps_dropped_on_other_threads_as_they_fire_leave_nothing() {
    watchdog(15, || {
        let rt = workers(2);
        let (tx, rx) = mpsc::channel::<(Pin<Box<time::Sleep>>, u64)>();
        let dropper = std::thread::spawn(move || {
            for (s, pause) in rx {
                spin_for(Duration::from_micros(pause));
                drop(s);
            }
        });
        let (flagged, w) = flag();
        let mut rng = Rng(0x5eed_4001);
        let _g = rt.enter();
        for _ in 0..200 {
            let mut s = Box::pin(time::sleep(ms(1)));
            assert!(poll_once(s.as_mut(), &w).is_pending());
            tx.send((s, rng.below(2_000))).unwrap();
        }
        drop(tx);
        thread_within(dropper, 10);
        timers_settle(&rt, "sleeps dropped as they fire");
        drop(w);
        common::wait_until("the driver lets go of every waker", || {
            Arc::strong_count(&flagged) == 1
        });
    });
}

/// A sleep outlives its runtime: polled before the drop, woken by the drop, pending
/// again until its deadline (the alarm thread), ready after it; dropped afterwards
/// without harm. An interval and a timeout likewise.
#[test]
fn sleeps_intervals_and_timeouts_outlive_their_runtime() {
    watchdog(10, || {
        let rt = workers(1);
        let (f, w) = flag();
        let (mut s, mut iv, mut to) = rt.block_on(async {
            let mut iv = time::interval(ms(40));
            iv.tick().await; // the first is at once
            (
                Box::pin(time::sleep(ms(80))),
                iv,
                Box::pin(time::timeout(ms(60), std::future::pending::<()>())),
            )
        });
        assert!(poll_once(s.as_mut(), &w).is_pending());
        let mut cx = Context::from_waker(&w);
        assert!(iv.poll_tick(&mut cx).is_pending());
        assert!(poll_once(to.as_mut(), &w).is_pending());
        let deadline = s.deadline();
        drop(rt);
        assert!(f.wakes.load(SeqCst) >= 1, "the drop woke the sleeps");
        let dropped_mid = Box::pin(time::sleep(ms(1))); // no runtime: unbound, never polled
        drop(dropped_mid);
        let t0 = Instant::now();
        let tick = park_on(
            std::future::poll_fn(|cx| iv.poll_tick(cx)),
            Duration::from_secs(5),
        );
        assert!(Instant::now() >= tick);
        assert!(park_on(to.as_mut(), Duration::from_secs(5)).is_err());
        park_on(s.as_mut(), Duration::from_secs(5));
        assert!(Instant::now() >= deadline, "ended early");
        assert!(t0.elapsed() < Duration::from_secs(2));
        // Reset after the runtime is gone: re-armed on the alarm thread.
        s.as_mut().reset(Instant::now() + ms(20));
        let d = s.deadline();
        park_on(s.as_mut(), Duration::from_secs(5));
        assert!(Instant::now() >= d);
        drop(s);
        drop(iv);
        drop(to);
    });
}

/// A sleep reset to a new deadline at the moment its timer fires (spinning up to its
/// deadline, then `reset`): it ends at the new deadline, never early, never lost.
#[test]
fn reset_at_the_moment_of_firing() {
    watchdog(15, || {
        let rt = workers(2);
        let h = rt.spawn(async {
            let mut rng = Rng(0xabcd_0040);
            for i in 0..200 {
                let mut s = Box::pin(time::sleep(ms(1)));
                let polled = std::future::poll_fn(|cx| Poll::Ready(s.as_mut().poll(cx))).await;
                if polled.is_ready() {
                    continue;
                }
                spin_for(Duration::from_micros(700 + rng.below(700)));
                let d = Instant::now() + Duration::from_micros(rng.below(1_500));
                s.as_mut().reset(d);
                match time::timeout(Duration::from_secs(2), s.as_mut()).await {
                    Ok(()) => assert!(Instant::now() >= d, "round {i}: ended early"),
                    Err(_) => panic!("round {i}: a sleep reset as it fired never ended"),
                }
            }
        });
        join_within(h, 12).unwrap();
        timers_settle(&rt, "after the resets");
    });
}

/// Zero, past, huge and `Duration::MAX` deadlines: the zero and past ones are ready at
/// the first poll (even a timeout whose deadline passed returns a ready value); the
/// huge ones wait without spinning a worker, and leave nothing behind when dropped.
#[test]
fn zero_past_huge_and_max_deadlines() {
    watchdog(10, || {
        let rt = workers(2);
        rt.block_on(async {
            assert!(poll_once(pin!(time::sleep(Duration::ZERO)), Waker::noop()).is_ready());
            let past = Instant::now() - ms(5);
            assert!(poll_once(pin!(time::sleep_until(past)), Waker::noop()).is_ready());
            assert_eq!(time::timeout(Duration::ZERO, async { 3 }).await, Ok(3));
            assert_eq!(time::timeout_at(past, async { 4 }).await, Ok(4));
            assert!(time::timeout(Duration::ZERO, std::future::pending::<()>())
                .await
                .is_err());
            assert_eq!(time::timeout(Duration::MAX, async { 5 }).await, Ok(5));
        });
        // Huge deadlines wait quietly for 150 ms: a handful of polls at most.
        let far = [
            Instant::now() + Duration::from_millis(u64::MAX),
            Instant::now() + Duration::from_secs(86_400 * 365 * 1_000),
            Instant::now() + Duration::from_secs(86_400 * 800), // past the wheel's span
            time::sleep(Duration::MAX).deadline(),
        ];
        for (i, d) in far.into_iter().enumerate() {
            let polls = AtomicUsize::new(0);
            let r = rt.block_on(async {
                let s = Counted {
                    f: Box::pin(time::sleep_until(d)),
                    polls: &polls,
                };
                time::timeout(ms(150), s).await
            });
            assert!(r.is_err(), "deadline {i} ended");
            let p = polls.load(SeqCst);
            assert!(
                p <= 4,
                "deadline {i}: polled {p} times in 150 ms (a spinning timer)"
            );
            timers_settle(&rt, "after a far sleep was dropped");
        }
        // An interval of `Duration::MAX` ticks once.
        rt.block_on(async {
            let mut iv = time::interval(Duration::MAX);
            iv.tick().await;
            assert!(time::timeout(ms(30), iv.tick()).await.is_err());
        });
        timers_settle(&rt, "after the MAX interval");
        // A stats sample of an idle runtime with those gone: no parks for 200 ms.
        std::thread::sleep(ms(50));
        let before = rt.stats().total_parked;
        std::thread::sleep(ms(200));
        let after = rt.stats().total_parked;
        assert!(
            after - before <= 2,
            "an idle runtime parked {} times in 200 ms",
            after - before
        );
    });
}

/// Missed-tick behaviours after a stall of five periods, and an interval started in
/// the past.
#[test]
fn interval_missed_tick_behaviours() {
    watchdog(10, || {
        let rt = workers(1);
        rt.block_on(async {
            let period = ms(10);
            for b in [
                MissedTickBehavior::Burst,
                MissedTickBehavior::Delay,
                MissedTickBehavior::Skip,
            ] {
                let mut iv = time::interval(period);
                iv.set_missed_tick_behavior(b);
                let first = iv.tick().await;
                std::thread::sleep(ms(55));
                let late = iv.tick().await; // missed: at once
                assert_eq!(late, first + period, "{b:?}: the first missed tick");
                let now = Instant::now();
                let next = iv.tick().await;
                match b {
                    MissedTickBehavior::Burst => assert_eq!(next, first + 2 * period),
                    MissedTickBehavior::Delay => {
                        assert!(next >= now + period - ms(2), "{b:?}: {:?}", next - now)
                    }
                    MissedTickBehavior::Skip => {
                        assert!(next > now, "{b:?}");
                        assert_eq!(
                            (next - first).as_nanos() % period.as_nanos(),
                            0,
                            "{b:?}: phase"
                        );
                    }
                }
            }
            // Started 1 s in the past with Skip: the first tick is at once, the next in
            // the future on the original phase.
            let start = Instant::now() - Duration::from_secs(1);
            let mut iv = time::interval_at(start, ms(7));
            iv.set_missed_tick_behavior(MissedTickBehavior::Skip);
            assert_eq!(iv.tick().await, start);
            let n = iv.tick().await;
            assert_eq!((n - start).as_nanos() % ms(7).as_nanos(), 0);
        });
        timers_settle(&rt, "intervals dropped");
    });
}

// ------------------------------------------------------ cancellation storms, idling

/// Hundreds of timed waits of every context cancelled at once (tasks aborted, fibers
/// aborted in `recv_timeout`, timeouts dropped by a `select`-like race): the count of
/// pending timers returns to zero and every waiter's state is dropped.
#[test]
fn timers_pending_returns_to_zero_after_cancellation_storms() {
    watchdog(15, || {
        let rt = workers(3);
        let drops = counter();
        let (_tx, rx) = weft::chan::unbounded::<u32>();
        let notify = Arc::new(Notify::new());
        let mut handles = Vec::new();
        for i in 0..300u64 {
            let d = DropCounter(drops.clone());
            let rx = rx.clone();
            let n = notify.clone();
            handles.push(rt.spawn(async move {
                let _d = d;
                let _ = time::timeout(ms(5_000 + i), n.notified()).await;
                let _ = time::timeout(ms(5_000), rx.recv()).await;
            }));
        }
        for i in 0..100u64 {
            let d = DropCounter(drops.clone());
            let rx = rx.clone();
            handles.push(fiber_on(&rt, move || {
                let _d = d;
                let _ = rx.recv_timeout(ms(5_000 + i));
            }));
        }
        for _ in 0..100 {
            let d = DropCounter(drops.clone());
            let rx = rx.clone();
            // A task nested on its worker (`weft::wait`).
            handles.push(rt.spawn(async move {
                let _d = d;
                let _ = rx.recv_timeout(ms(5_000));
            }));
        }
        common::wait_until("every waiter files its timer", || {
            rt.stats().timers_pending >= 450
        });
        for h in &handles {
            h.abort();
        }
        for h in handles {
            let _ = join_within(h, 5);
        }
        assert_eq!(load(&drops), 500);
        timers_settle(&rt, "after aborting 500 timed waits");
        // Timeouts that complete first (the value is there) leave no timer either.
        let notify2 = notify.clone();
        rt.block_on(async move {
            for _ in 0..500 {
                notify2.notify_one();
                time::timeout(ms(10_000), notify2.notified()).await.unwrap();
            }
        });
        timers_settle(&rt, "after 500 timeouts that completed");
    });
}

/// An idle runtime whose timers were all cancelled makes (almost) no wake-ups: its
/// workers park and stay parked.
#[test]
fn an_idle_runtime_with_cancelled_timers_stays_asleep() {
    watchdog(10, || {
        let rt = workers(2);
        {
            let _g = rt.enter();
            let mut sleeps: Vec<_> = (0..1_000u64)
                .map(|i| Box::pin(time::sleep(ms(30 + i % 200))))
                .collect();
            for s in &mut sleeps {
                assert!(poll_once(s.as_mut(), Waker::noop()).is_pending());
            }
            // And some far ones in the wheel's coarse levels.
            let mut far: Vec<_> = (0..100u64)
                .map(|i| Box::pin(time::sleep(Duration::from_secs(3_600 * (i + 1)))))
                .collect();
            for s in &mut far {
                assert!(poll_once(s.as_mut(), Waker::noop()).is_pending());
            }
            assert_eq!(rt.stats().timers_pending, 1_100);
        }
        timers_settle(&rt, "dropped sleeps");
        // The holder may wake once at the deadline it went to sleep with.
        std::thread::sleep(ms(80));
        let s0 = rt.stats();
        std::thread::sleep(ms(300));
        let s1 = rt.stats();
        let parks = s1.total_parked - s0.total_parked;
        let polls = s1.total_polled - s0.total_polled;
        assert!(
            parks <= 2,
            "an idle runtime with cancelled timers parked {parks} times in 300 ms"
        );
        assert_eq!(polls, 0);
    });
}

// ------------------------------------------------- timeouts racing the value they wait for

#[derive(Clone, Copy, Debug)]
enum Ctx {
    Task,
    Fiber,
    Nested,
    Thread,
}

/// One round of a receiver whose timed receives race a sender that sends about when
/// they time out; the receiver then drains the channel until it is disconnected. Every
/// value whose send returned `Ok` is received exactly once.
fn recv_race(rt: &Runtime, ctx: Ctx, cap: Option<usize>, rounds: u32, use_select: bool) {
    let (tx, rx) = match cap {
        Some(c) => weft::chan::bounded::<u32>(c),
        None => weft::chan::unbounded::<u32>(),
    };
    let sender = std::thread::spawn(move || {
        let mut rng = Rng(0x1234_5678 ^ rounds as u64);
        let mut sent = Vec::new();
        for i in 0..rounds {
            spin_for(Duration::from_micros(300 + rng.below(1_400)));
            match tx.send_timeout(i, ms(3)) {
                Ok(()) => sent.push(i),
                Err(e) => assert!(e.is_timeout(), "{e:?}"),
            }
        }
        sent
    });
    let body = move |rx: weft::chan::Receiver<u32>| -> Vec<u32> {
        let mut got = Vec::new();
        let once = |rx: &weft::chan::Receiver<u32>| -> Option<u32> {
            if use_select {
                let mut sel = weft::chan::Select::new();
                sel.recv(rx);
                match sel.select_timeout(ms(1)) {
                    Ok(op) => op.recv(rx).ok(),
                    Err(_) => None,
                }
            } else {
                rx.recv_timeout(ms(1)).ok()
            }
        };
        let t0 = Instant::now();
        loop {
            if let Some(v) = once(&rx) {
                got.push(v);
            }
            if rx.is_closed() && rx.is_empty() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(8),
                "hang: the receiver never saw the end"
            );
        }
        // Anything left behind (a value given back after the close).
        while let Ok(v) = rx.try_recv() {
            got.push(v);
        }
        got
    };
    let async_body = |rx: weft::chan::Receiver<u32>| async move {
        let mut got = Vec::new();
        let t0 = Instant::now();
        loop {
            match time::timeout(ms(1), rx.recv()).await {
                Ok(Ok(v)) => got.push(v),
                Ok(Err(_)) => break,
                Err(_) => {}
            }
            assert!(
                t0.elapsed() < Duration::from_secs(8),
                "hang: the receiver never saw the end"
            );
        }
        got
    };
    let got = match ctx {
        Ctx::Task if !use_select => join_within(rt.spawn(async_body(rx)), 10).unwrap(),
        Ctx::Task | Ctx::Nested => join_within(rt.spawn(async move { body(rx) }), 10).unwrap(),
        Ctx::Fiber => join_within(fiber_on(rt, move || body(rx)), 10).unwrap(),
        Ctx::Thread => thread_within(std::thread::spawn(move || body(rx)), 10),
    };
    let sent = thread_within(sender, 10);
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted, sent,
        "{ctx:?} cap {cap:?} select {use_select}: received (sorted) != sent Ok"
    );
}

fn recv_races_in(ctx: Ctx) {
    watchdog(18, move || {
        let rt = workers(2);
        for cap in [Some(0), Some(1), None] {
            recv_race(&rt, ctx, cap, 150, false);
        }
        if !matches!(ctx, Ctx::Task) {
            recv_race(&rt, ctx, Some(0), 100, true);
            recv_race(&rt, ctx, Some(2), 100, true);
        }
        timers_settle(&rt, "after the receive races");
    });
}

#[test]
fn timed_receives_racing_sends_lose_nothing_in_tasks() {
    recv_races_in(Ctx::Task);
}

#[test]
fn timed_receives_racing_sends_lose_nothing_in_fibers() {
    recv_races_in(Ctx::Fiber);
}

#[test]
fn timed_receives_racing_sends_lose_nothing_nested_on_workers() {
    recv_races_in(Ctx::Nested);
}

#[test]
fn timed_receives_racing_sends_lose_nothing_on_plain_threads() {
    recv_races_in(Ctx::Thread);
}

/// Timed lock, write-lock and semaphore acquires racing the release that would hand
/// them the lock: a timed-out acquire passes what it was handed on. After each round
/// (everyone done) the lock is free and every permit is back.
#[test]
fn timed_acquires_racing_releases_pass_the_lock_on() {
    watchdog(15, || {
        let rt = workers(3);
        let m = Arc::new(Mutex::new(0u64));
        let rw = Arc::new(RwLock::new(0u64));
        let sem = Arc::new(Semaphore::new(2));
        let mut rng = Rng(0x10c4_0040);
        for round in 0..150u32 {
            let g = m.try_lock().expect("the mutex is free between rounds");
            let wg = rw.try_write().expect("the rwlock is free between rounds");
            let p = sem
                .try_acquire_many(2)
                .expect("every permit is back between rounds");
            let mut hs = Vec::new();
            for k in 0..3u32 {
                let (m, rw, sem) = (m.clone(), rw.clone(), sem.clone());
                let d = Duration::from_micros(500 + 300 * k as u64);
                match (round + k) % 3 {
                    // A task awaiting the timeouts.
                    0 => hs.push(rt.spawn(async move {
                        if let Ok(mut g) = time::timeout(d, m.lock()).await {
                            *g += 1;
                        }
                        if let Ok(g) = time::timeout(d, rw.read()).await {
                            drop(g);
                        }
                        if let Ok(p) = time::timeout(d, sem.acquire_many(2)).await {
                            drop(p);
                        }
                    })),
                    // A fiber waiting with `weft::wait`.
                    1 => hs.push(fiber_on(&rt, move || {
                        if let Ok(mut g) = weft::wait(time::timeout(d, m.lock())) {
                            *g += 1;
                        }
                        if let Ok(g) = weft::wait(time::timeout(d, rw.write())) {
                            drop(g);
                        }
                        if let Ok(p) = weft::wait(time::timeout(d, sem.acquire())) {
                            drop(p);
                        }
                    })),
                    // A task waiting nested on its worker.
                    _ => hs.push(rt.spawn(async move {
                        if let Ok(mut g) = weft::wait(time::timeout(d, m.lock())) {
                            *g += 1;
                        }
                        if let Ok(g) = weft::wait(time::timeout(d, rw.read())) {
                            drop(g);
                        }
                        if let Ok(p) = weft::wait(time::timeout(d, sem.acquire_many(2))) {
                            drop(p);
                        }
                    })),
                }
            }
            spin_for(Duration::from_micros(400 + rng.below(900)));
            drop(g);
            spin_for(Duration::from_micros(rng.below(300)));
            drop(wg);
            spin_for(Duration::from_micros(rng.below(300)));
            drop(p);
            for h in hs {
                join_within(h, 5).unwrap();
            }
        }
        assert!(m.try_lock().is_ok());
        assert!(rw.try_write().is_ok());
        assert_eq!(sem.available_permits(), 2);
        timers_settle(&rt, "after the acquire races");
    });
}

/// A timed `notified()` racing one `notify_one`: exactly one of "the waiter was
/// notified" and "a permit is stored" holds afterwards (the notification is never
/// lost with a timed-out waiter, nor doubled). In tasks, fibers (`notified_blocking`
/// has no timeout: `weft::wait(timeout(..))`) and plain threads.
#[test]
fn timed_notified_racing_notify_one_loses_nothing() {
    watchdog(15, || {
        let rt = workers(2);
        let mut rng = Rng(0x0071_f000);
        for round in 0..300u32 {
            let n = Arc::new(Notify::new());
            let waiters = 1 + (round % 2) as usize;
            let ok = Arc::new(AtomicUsize::new(0));
            let mut hs = Vec::new();
            let mut ths = Vec::new();
            for k in 0..waiters {
                let (n, ok) = (n.clone(), ok.clone());
                let d = Duration::from_micros(600 + 200 * k as u64);
                match (round as usize + k) % 3 {
                    0 => hs.push(rt.spawn(async move {
                        if time::timeout(d, n.notified()).await.is_ok() {
                            ok.fetch_add(1, SeqCst);
                        }
                    })),
                    1 => hs.push(fiber_on(&rt, move || {
                        if weft::wait(time::timeout(d, n.notified())).is_ok() {
                            ok.fetch_add(1, SeqCst);
                        }
                    })),
                    _ => {
                        let h = rt.handle().clone();
                        ths.push(std::thread::spawn(move || {
                            if h.block_on(time::timeout(d, n.notified())).is_ok() {
                                ok.fetch_add(1, SeqCst);
                            }
                        }))
                    }
                }
            }
            spin_for(Duration::from_micros(300 + rng.below(1_000)));
            n.notify_one();
            for h in hs {
                join_within(h, 5).unwrap();
            }
            for t in ths {
                thread_within(t, 5);
            }
            let stored = poll_once(pin!(n.notified()), Waker::noop()).is_ready();
            let woke = ok.load(SeqCst);
            assert_eq!(
                woke + usize::from(stored),
                1,
                "round {round} ({waiters} waiters): {woke} notified, permit stored: {stored}"
            );
        }
        timers_settle(&rt, "after the notify races");
    });
}

/// A socket read with a read timeout racing the bytes that arrive: every byte comes
/// through exactly once and in order, in a fiber, a task nested on its worker and a
/// plain thread.
#[test]
fn socket_read_timeouts_racing_data_lose_no_byte() {
    watchdog(18, || {
        let rt = workers(2);
        for ctx in [Ctx::Fiber, Ctx::Nested, Ctx::Thread] {
            let l = rt
                .block_on(weft::net::TcpListener::bind(common::loopback()))
                .unwrap();
            let addr = l.local_addr().unwrap();
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            client.set_nodelay(true).unwrap();
            let (server, _) = rt.block_on(l.accept()).unwrap();
            server.set_read_timeout(Some(ms(1))).unwrap();
            const N: usize = 120;
            let reader = move || {
                let mut server = server;
                let mut got = Vec::new();
                let mut timeouts = 0;
                let t0 = Instant::now();
                while got.len() < N {
                    let mut b = [0u8; 4];
                    match server.read(&mut b) {
                        Ok(0) => break,
                        Ok(n) => got.extend_from_slice(&b[..n]),
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) =>
                        {
                            timeouts += 1
                        }
                        Err(e) => panic!("{e}"),
                    }
                    assert!(
                        t0.elapsed() < Duration::from_secs(8),
                        "hang: {} bytes of {N}",
                        got.len()
                    );
                }
                (got, timeouts)
            };
            let writer = std::thread::spawn(move || {
                let mut rng = Rng(0xb17e_5000);
                for i in 0..N {
                    spin_for(Duration::from_micros(400 + rng.below(1_200)));
                    client.write_all(&[i as u8]).unwrap();
                }
                client
            });
            let (got, timeouts) = match ctx {
                Ctx::Fiber => join_within(fiber_on(&rt, reader), 12).unwrap(),
                Ctx::Nested => join_within(rt.spawn(async move { reader() }), 12).unwrap(),
                _ => thread_within(std::thread::spawn(reader), 12),
            };
            let _client = thread_within(writer, 12);
            let want: Vec<u8> = (0..N).map(|i| i as u8).collect();
            assert_eq!(
                got, want,
                "{ctx:?}: bytes lost or reordered ({timeouts} timeouts)"
            );
        }
        timers_settle(&rt, "after the socket read races");
    });
}

// ------------------------------------------------------------------------ nurseries

/// What the children of the nursery tests wait on; the lock and the sender are held
/// by the test so that they never come.
struct Waits {
    m: Arc<Mutex<()>>,
    rx: weft::chan::Receiver<u32>,
    tx: weft::chan::Sender<u32>,
    n: Arc<Notify>,
    drops: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
}

impl Waits {
    fn new() -> Waits {
        let (tx, rx) = weft::chan::bounded(1);
        Waits {
            m: Arc::new(Mutex::new(())),
            rx,
            tx,
            n: Arc::new(Notify::new()),
            drops: counter(),
            started: counter(),
        }
    }

    /// Spawns one child of every kind waiting on a timer, the channel, the lock and the
    /// Notify (tasks and fibers); returns how many.
    fn spawn_all(&self, n: &weft::Nursery<'_, &'static str>) -> usize {
        let mut k = 0;
        for kind in 0..5 {
            let (m, rx, nf) = (self.m.clone(), self.rx.clone(), self.n.clone());
            let d = DropCounter(self.drops.clone());
            let s = self.started.clone();
            n.spawn(async move {
                let _d = d;
                s.fetch_add(1, SeqCst);
                match kind {
                    0 => time::sleep(Duration::from_secs(60)).await,
                    1 => drop(rx.recv().await),
                    2 => drop(m.lock().await),
                    3 => nf.notified().await,
                    _ => drop(time::timeout(Duration::from_secs(60), rx.recv()).await),
                }
                Ok(())
            });
            k += 1;
            let (m, rx, nf) = (self.m.clone(), self.rx.clone(), self.n.clone());
            let d = DropCounter(self.drops.clone());
            let s = self.started.clone();
            n.spawn_fiber(move || {
                let _d = d;
                s.fetch_add(1, SeqCst);
                match kind {
                    0 => weft::fiber::sleep(Duration::from_secs(60)),
                    1 => drop(rx.recv_blocking()),
                    2 => drop(m.lock_blocking()),
                    3 => nf.notified_blocking(),
                    _ => drop(rx.recv_timeout(Duration::from_secs(60))),
                }
                Ok(())
            });
            k += 1;
        }
        k
    }

    /// After the nursery: everyone is gone and nothing they waited on was taken.
    fn check(&self, rt: &Runtime, k: usize, what: &str) {
        assert_eq!(load(&self.drops), k, "{what}: children dropped");
        assert!(
            self.m.try_lock().is_ok(),
            "{what}: a cancelled child kept the lock"
        );
        self.tx.try_send(7).unwrap();
        assert_eq!(
            self.rx.try_recv(),
            Ok(7),
            "{what}: a cancelled receiver took the value"
        );
        self.n.notify_one();
        assert!(
            poll_once(pin!(self.n.notified()), Waker::noop()).is_ready(),
            "{what}: a cancelled waiter swallowed the permit"
        );
        timers_settle(rt, what);
    }
}

async fn panic_after(ms_: u64) -> Result<(), &'static str> {
    time::sleep(ms(ms_)).await;
    panic!("child boom");
}

/// A child panics while its siblings (tasks and fibers) wait on timers, a channel, a
/// lock and a Notify: every sibling is cancelled and dropped, the panic reaches the
/// owner, and nothing they waited on is lost. Async form and blocking form from a
/// plain thread, a fiber and a task nested on a worker.
#[test]
fn a_child_panic_cancels_siblings_at_every_wait() {
    watchdog(15, || {
        let rt = workers(2);
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let run = |owner: &str| {
            let w = Waits::new();
            let held = w.m.try_lock().unwrap();
            let t0 = Instant::now();
            let r = match owner {
                "async" => {
                    let w2 = Waits {
                        m: w.m.clone(),
                        rx: w.rx.clone(),
                        tx: w.tx.clone(),
                        n: w.n.clone(),
                        drops: w.drops.clone(),
                        started: w.started.clone(),
                    };
                    let h = rt.spawn(weft::nursery(
                        move |n: weft::Nursery<'static, &'static str>| async move {
                            w2.spawn_all(&n);
                            n.spawn(panic_after(20));
                            time::sleep(Duration::from_secs(60)).await;
                            Ok(())
                        },
                    ));
                    join_within(h, 8).map(|_| ()).map_err(|e| e.is_panic())
                }
                _ => {
                    let body = || {
                        catch_unwind(AssertUnwindSafe(|| {
                            weft::nursery_blocking(|n| {
                                w.spawn_all(n);
                                n.spawn(panic_after(20));
                                Ok(())
                            })
                        }))
                    };
                    // A plain thread owner (entered, so the children go to `rt`).
                    let _g = rt.enter();
                    let caught = body();
                    caught.map(|_| ()).map_err(|_| true)
                }
            };
            assert_eq!(r, Err(true), "{owner}: the child's panic reached the owner");
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{owner}: {:?}",
                t0.elapsed()
            );
            drop(held);
            w.check(&rt, 10, owner);
        };
        run("async");
        run("thread");
        std::panic::set_hook(quiet);
    });
}

/// The blocking nursery with a panicking child, owned by a fiber and by a task that
/// waits nested on its worker.
#[test]
fn a_child_panic_in_blocking_nurseries_owned_by_fibers_and_tasks() {
    watchdog(15, || {
        let rt = workers(2);
        for owner in ["fiber", "task"] {
            let w = Arc::new(Waits::new());
            let held = w.m.try_lock().unwrap();
            let w2 = w.clone();
            let body = move || {
                catch_unwind(AssertUnwindSafe(|| {
                    weft::nursery_blocking(|n| {
                        w2.spawn_all(n);
                        n.spawn(panic_after(20));
                        Ok(())
                    })
                }))
                .is_err()
            };
            let t0 = Instant::now();
            let panicked = match owner {
                "fiber" => join_within(fiber_on(&rt, body), 8).unwrap(),
                _ => join_within(rt.spawn(async move { body() }), 8).unwrap(),
            };
            assert!(panicked, "{owner}: the child's panic reached the owner");
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{owner}: {:?}",
                t0.elapsed()
            );
            drop(held);
            w.check(&rt, 10, owner);
        }
    });
}

/// An async nursery dropped (its task aborted) while children wait at every kind of
/// wait, and a blocking nursery whose owner fiber and owner task are aborted mid-wait:
/// every child is dropped, the owner ends, and nothing is lost.
#[test]
fn nurseries_dropped_or_aborted_mid_wait() {
    watchdog(15, || {
        let rt = workers(2);
        // Async, its task aborted.
        let w = Arc::new(Waits::new());
        let held = w.m.try_lock().unwrap();
        let w2 = w.clone();
        let h = rt.spawn(weft::nursery(
            move |n: weft::Nursery<'static, &'static str>| async move {
                w2.spawn_all(&n);
                std::future::pending::<()>().await;
                Ok(())
            },
        ));
        common::wait_until("every child started", || load(&w.started) == 10);
        h.abort();
        assert!(join_within(h, 5).unwrap_err().is_cancelled());
        common::wait_until("every child dropped", || load(&w.drops) == 10);
        drop(held);
        w.check(&rt, 10, "async nursery aborted");

        // Blocking, owned by a fiber and by a nested task, the owner aborted.
        for owner in ["fiber", "task"] {
            let w = Arc::new(Waits::new());
            let held = w.m.try_lock().unwrap();
            let w2 = w.clone();
            let body = move || {
                let _ = weft::nursery_blocking(|n| {
                    w2.spawn_all(n);
                    Ok(())
                });
            };
            let h = match owner {
                "fiber" => fiber_on(&rt, body),
                _ => rt.spawn(async move { body() }),
            };
            common::wait_until("every child started", || load(&w.started) == 10);
            h.abort();
            let _ = join_within(h, 5);
            assert_eq!(
                load(&w.drops),
                10,
                "{owner}: the owner ended before its children"
            );
            drop(held);
            w.check(&rt, 10, owner);
        }
    });
}

/// A nursery with a deadline whose fiber children are parked in every kind of wait
/// (each with a far timeout of its own): the deadline cancels them all within bounds,
/// the result is `Elapsed`, and the deadline's and children's timers are all gone.
#[test]
fn a_deadline_cancels_fiber_children_at_every_timed_wait() {
    watchdog(15, || {
        let rt = workers(2);
        let _g = rt.enter();
        let w = Waits::new();
        let held = w.m.try_lock().unwrap();
        let (_stx, srx) = weft::chan::bounded::<u32>(0);
        let t0 = Instant::now();
        let r = weft::Nursery::with_timeout(ms(40)).run_blocking(|n| {
            w.spawn_all(n);
            let d = DropCounter(w.drops.clone());
            n.spawn_fiber(move || {
                let _d = d;
                let mut sel = weft::chan::Select::new();
                sel.recv(&srx);
                let _ = sel
                    .select_timeout(Duration::from_secs(60))
                    .map(|op| op.recv(&srx));
                Ok(())
            });
            let d = DropCounter(w.drops.clone());
            n.spawn_fiber(move || {
                let _d = d;
                // A nested nursery with a far deadline of its own.
                let _ = weft::Nursery::with_timeout(Duration::from_secs(60)).run_blocking(|n2| {
                    n2.spawn_fiber(|| {
                        weft::fiber::sleep(Duration::from_secs(60));
                        Ok::<_, ()>(())
                    });
                    Ok::<_, ()>(())
                });
                Ok(())
            });
            Ok::<_, &'static str>(())
        });
        assert!(r.is_err(), "the deadline elapsed: {r:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        drop(held);
        w.check(&rt, 12, "deadline");
    });
}

/// A nursery inside a fiber inside a task: the task spawns a fiber and waits for it;
/// the fiber's blocking nursery has a task child that runs an async nursery of its own
/// (grandchildren on timers) and a fiber child on a channel; a grandchild panics. The
/// panic surfaces at each level; everything is dropped; no timer is left.
#[test]
fn a_nursery_in_a_fiber_in_a_task() {
    watchdog(15, || {
        let rt = workers(2);
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let drops = counter();
        let d = drops.clone();
        let h = rt.spawn(async move {
            let f = weft::fiber::spawn(move || {
                let (_tx, rx) = weft::chan::bounded::<u8>(0);
                weft::nursery_blocking(|n| {
                    let d1 = d.clone();
                    n.spawn(async move {
                        weft::nursery(move |inner: weft::Nursery<'static, ()>| async move {
                            for _ in 0..4 {
                                let g = DropCounter(d1.clone());
                                inner.spawn(async move {
                                    let _g = g;
                                    time::sleep(Duration::from_secs(60)).await;
                                    Ok(())
                                });
                            }
                            inner.spawn(async {
                                time::sleep(ms(15)).await;
                                panic!("grandchild boom")
                            });
                            time::sleep(Duration::from_secs(60)).await;
                            Ok(())
                        })
                        .await
                    });
                    let g = DropCounter(d.clone());
                    n.spawn_fiber(move || {
                        let _g = g;
                        let _ = rx.recv_blocking();
                        Ok(())
                    });
                    Ok(())
                })
            });
            f.await
        });
        let r = join_within(h, 8).unwrap();
        assert!(
            r.is_err_and(|e| e.is_panic()),
            "the fiber ended by the grandchild's panic"
        );
        assert_eq!(load(&drops), 5);
        timers_settle(&rt, "nursery in a fiber in a task");
        std::panic::set_hook(quiet);
    });
}

/// The runtime dropped while nurseries of every form wait with children on timers:
/// the drop ends within bounds, the owners return, everyone is dropped.
#[test]
fn the_runtime_dropped_while_nurseries_wait_on_timers() {
    watchdog(15, || {
        let rt = workers(2);
        let drops = counter();
        let started = counter();
        // A plain thread owning a blocking nursery with a deadline.
        let h = rt.handle().clone();
        let (d, s) = (drops.clone(), started.clone());
        let plain = std::thread::spawn(move || {
            let _g = h.enter();
            let r = catch_unwind(AssertUnwindSafe(|| {
                weft::Nursery::with_timeout(Duration::from_secs(60)).run_blocking(|n| {
                    for _ in 0..3 {
                        let (g, s1) = (DropCounter(d.clone()), s.clone());
                        n.spawn(async move {
                            let _g = g;
                            s1.fetch_add(1, SeqCst);
                            time::sleep(Duration::from_secs(60)).await;
                            Ok(())
                        });
                        let (g, s2) = (DropCounter(d.clone()), s.clone());
                        n.spawn_fiber(move || {
                            let _g = g;
                            s2.fetch_add(1, SeqCst);
                            weft::fiber::sleep(Duration::from_secs(60));
                            Ok(())
                        });
                    }
                    Ok::<_, ()>(())
                })
            }));
            drop(r);
        });
        // An async nursery in a task, and a blocking one in a fiber.
        let (d, s) = (drops.clone(), started.clone());
        let _t = rt.spawn(weft::nursery(
            move |n: weft::Nursery<'static, ()>| async move {
                for _ in 0..3 {
                    let (g, s) = (DropCounter(d.clone()), s.clone());
                    n.spawn(async move {
                        let _g = g;
                        s.fetch_add(1, SeqCst);
                        let mut iv = time::interval(ms(5));
                        loop {
                            iv.tick().await;
                        }
                    });
                }
                time::sleep(Duration::from_secs(60)).await;
                Ok(())
            },
        ));
        let (d, s) = (drops.clone(), started.clone());
        let _f = fiber_on(&rt, move || {
            let _ = weft::nursery_blocking(|n| {
                for _ in 0..3 {
                    let (g, s) = (DropCounter(d.clone()), s.clone());
                    n.spawn_fiber(move || {
                        let _g = g;
                        s.fetch_add(1, SeqCst);
                        let _ = weft::chan::after(Duration::from_secs(60)).recv_blocking();
                        Ok::<_, ()>(())
                    });
                }
                Ok(())
            });
        });
        common::wait_until("every child started", || load(&started) == 12);
        common::drop_within(rt, Duration::from_secs(8), "nurseries waiting on timers");
        thread_within(plain, 5);
        common::wait_until("every child dropped", || load(&drops) == 12);
    });
}

/// The runtime dropped while timers are pending in every context: a task's sleep, a
/// task nested on its worker in `recv_timeout`, a fiber's sleep and `recv_timeout`, an
/// interval, a plain thread's `block_on` of a sleep of the runtime (ends at its
/// deadline, not early, not never) and a plain thread's hand-polled timeout.
#[test]
fn runtime_drop_with_timers_pending_in_every_context() {
    let mask = std::env::var("S40_MASK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x3ffu32);
    drop_with_timers(mask);
}

fn nested_wait() -> Duration {
    ms(std::env::var("S40_NESTED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400))
}

fn drop_with_timers(mask: u32) {
    watchdog(15, move || {
        let rt = workers(2);
        let drops = counter();
        let started = counter();
        let (_tx, rx) = weft::chan::unbounded::<u8>();
        let mut keep = Vec::new();
        let mut n = 0;
        for k in 0..4 {
            if mask & (1 << k) != 0 {
                n += 1;
                let (g, s, rx1) = (DropCounter(drops.clone()), started.clone(), rx.clone());
                keep.push(rt.spawn(async move {
                    let rx = rx1;
                    let _g = g;
                    s.fetch_add(1, SeqCst);
                    match k {
                        0 => time::sleep(Duration::from_secs(60)).await,
                        // Nested on the worker: not cancellable, the drop waits for
                        // its deadline (see `runtime_drop_waits_for_a_nested_timed_wait`).
                        1 => drop(rx.recv_timeout(nested_wait())),
                        2 => {
                            let mut iv = time::interval(ms(3));
                            loop {
                                iv.tick().await;
                            }
                        }
                        _ => drop(time::timeout(Duration::from_secs(60), rx.recv()).await),
                    }
                }));
            }
            if mask & (16 << k) != 0 {
                n += 1;
                let (g, s, rx2) = (DropCounter(drops.clone()), started.clone(), rx.clone());
                keep.push(fiber_on(&rt, move || {
                    let rx = rx2;
                    let _g = g;
                    s.fetch_add(1, SeqCst);
                    match k {
                        0 => weft::fiber::sleep(Duration::from_secs(60)),
                        1 => drop(rx.recv_timeout(Duration::from_secs(60))),
                        2 => weft::wait(time::sleep(Duration::from_secs(60))),
                        _ => drop(weft::chan::tick(ms(2)).recv_timeout(Duration::from_secs(60))),
                    }
                }));
            }
        }
        let mut threads = Vec::new();
        if mask & 256 != 0 {
            let h = rt.handle().clone();
            threads.push(std::thread::spawn(move || {
                let s = h.block_on(async { time::sleep(ms(300)) });
                let d = s.deadline();
                h.block_on(s);
                assert!(Instant::now() >= d, "a plain thread's sleep ended early");
            }));
        }
        if mask & 512 != 0 {
            let h = rt.handle().clone();
            threads.push(std::thread::spawn(move || {
                let to = h.block_on(async { time::timeout(ms(250), std::future::pending::<()>()) });
                drop(h);
                park_on(to, Duration::from_secs(5)).unwrap_err();
            }));
        }
        common::wait_until("every waiter started", || load(&started) == n);
        std::thread::sleep(ms(20));
        let t0 = Instant::now();
        common::drop_within(
            rt,
            Duration::from_secs(8),
            "timers pending in every context",
        );
        eprintln!("drop took {:?}", t0.elapsed());
        assert_eq!(load(&drops), n);
        for t in threads {
            thread_within(t, 5);
        }
        drop(keep);
    });
}

/// Many timeouts in flight on a one-worker runtime whose only worker is kept busy by a
/// task that yields: timeouts still end (busy workers fire timers), and the values
/// their futures got just before are never reported as `Elapsed` (the inner future is
/// polled first).
#[test]
fn timeouts_end_beside_a_busy_yielding_task_and_prefer_ready_values() {
    watchdog(10, || {
        let rt = workers(1);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let busy = rt.spawn(async move {
            while !s.load(SeqCst) {
                weft::task::yield_now().await;
            }
        });
        let h = rt.spawn(async {
            let mut late = 0;
            for i in 0..100u64 {
                let n = Notify::new();
                let t0 = Instant::now();
                let r = time::timeout(Duration::from_micros(200 + i * 10), n.notified()).await;
                assert!(r.is_err());
                if t0.elapsed() > ms(50) {
                    late += 1;
                }
                // Ready and elapsed at once: the value wins.
                n.notify_one();
                let r = time::timeout_at(Instant::now() - ms(1), n.notified()).await;
                assert!(r.is_ok(), "round {i}: a ready value reported as elapsed");
            }
            late
        });
        let late = join_within(h, 8).unwrap();
        stop.store(true, SeqCst);
        join_within(busy, 5).unwrap();
        assert!(
            late <= 2,
            "{late} of 100 short timeouts came over 50 ms late"
        );
    });
}

/// A task waiting nested on its worker (`recv_timeout` inside a task's poll) cannot be
/// cancelled by shutdown: `Runtime::drop` waits for its deadline (a limitation of the
/// design, kept here as a bound), and `shutdown_timeout` gives up on it at its timeout.
#[test]
fn runtime_drop_waits_for_a_nested_timed_wait() {
    watchdog(10, || {
        for (drop_kind, limit) in [("drop", 2_000u64), ("shutdown_timeout", 1_500)] {
            let rt = workers(2);
            let (tx, rx) = weft::chan::unbounded::<u8>();
            let started = counter();
            let s = started.clone();
            let _h = rt.spawn(async move {
                s.fetch_add(1, SeqCst);
                let _ = rx.recv_timeout(ms(600));
            });
            common::wait_until("the nested wait started", || load(&started) == 1);
            let t0 = Instant::now();
            let (done_tx, done_rx) = mpsc::channel();
            std::thread::spawn(move || {
                match drop_kind {
                    "drop" => drop(rt),
                    _ => rt.shutdown_timeout(ms(100)),
                }
                let _ = done_tx.send(());
            });
            done_rx
                .recv_timeout(Duration::from_secs(8))
                .expect("hang: the runtime's drop outlived its nested timed wait");
            let took = t0.elapsed();
            eprintln!("{drop_kind} took {took:?}");
            assert!(took < ms(limit), "{drop_kind} took {took:?}");
            drop(tx);
        }
    });
}

/// A waker whose `wake`, `clone`-made copies' `drop` arm and cancel timers on the same
/// runtime's wheel (user code the driver runs: it must not run it under the wheel's
/// lock, or the thread deadlocks on it): polled with a fresh such waker every time,
/// reset, fired, cancelled and woken by the runtime's drop.
#[test]
fn wakers_that_use_the_timer_wheel_from_wake_and_drop() {
    watchdog(10, || {
        struct Reentrant {
            h: weft::Handle,
            woke: AtomicUsize,
        }
        impl Reentrant {
            fn touch(&self) {
                let _g = self.h.enter();
                let mut s = Box::pin(time::sleep(ms(5)));
                let _ = poll_once(s.as_mut(), Waker::noop());
                s.as_mut().reset(Instant::now() + ms(7));
                let _ = poll_once(s.as_mut(), Waker::noop());
            }
        }
        impl Wake for Reentrant {
            fn wake(self: Arc<Self>) {
                self.wake_by_ref();
            }
            fn wake_by_ref(self: &Arc<Self>) {
                self.woke.fetch_add(1, SeqCst);
                self.touch();
            }
        }
        struct DropTouch(Arc<Reentrant>);
        impl Drop for DropTouch {
            fn drop(&mut self) {
                self.0.touch();
            }
        }
        impl Wake for DropTouch {
            fn wake(self: Arc<Self>) {
                self.0.wake_by_ref();
            }
        }
        let rt = workers(2);
        let r = Arc::new(Reentrant {
            h: rt.handle().clone(),
            woke: AtomicUsize::new(0),
        });
        let fresh = || Waker::from(Arc::new(DropTouch(r.clone())));
        let _g = rt.enter();
        let mut sleeps: Vec<_> = (0..50u64)
            .map(|i| Box::pin(time::sleep(ms(2 + i % 10))))
            .collect();
        for round in 0..4 {
            for s in &mut sleeps {
                let _ = poll_once(s.as_mut(), &fresh());
            }
            if round == 1 {
                for s in sleeps.iter_mut().step_by(3) {
                    s.as_mut().reset(Instant::now() + ms(3));
                }
            }
        }
        std::thread::sleep(ms(30));
        common::wait_until("the fired sleeps woke their wakers", || {
            r.woke.load(SeqCst) >= 50
        });
        // Cancelled with the waker stored, and the rest woken by the runtime's drop.
        let mut pending: Vec<_> = (0..20u64)
            .map(|_| Box::pin(time::sleep(Duration::from_secs(60))))
            .collect();
        for s in &mut pending {
            let _ = poll_once(s.as_mut(), &fresh());
        }
        pending.truncate(10);
        drop(_g);
        common::drop_within(rt, Duration::from_secs(5), "wakers that use the wheel");
        drop(pending);
    });
}

/// A nursery with a deadline whose body and children all finished well before the
/// deadline, but whose owner polled it again only after the deadline (a slow executor,
/// or an owner task queued behind busy work): nothing was cancelled, the body's value
/// exists, yet the nursery reports `Elapsed` and the value is dropped. `timeout` polls
/// its future first and would return the value; the nursery's docs say `Elapsed` only
/// "unless it failed or finished first".
#[test]
fn a_nursery_that_finished_before_its_deadline_is_not_elapsed() {
    watchdog(10, || {
        let rt = workers(2);
        let _g = rt.enter();
        let child_done = Arc::new(AtomicBool::new(false));
        let cd = child_done.clone();
        let body_value = counter();
        let bv = body_value.clone();
        let mut fut = Box::pin(
            weft::Nursery::with_timeout(ms(30)).run(move |n| async move {
                n.spawn(async move {
                    cd.store(true, SeqCst);
                    Ok(())
                });
                bv.fetch_add(1, SeqCst);
                Ok::<_, ()>(42)
            }),
        );
        // First poll: the body returns 42 at once; the child runs on a worker.
        let first = poll_once(fut.as_mut(), Waker::noop());
        common::wait_until("the child ran", || child_done.load(SeqCst));
        let finished_at = Instant::now();
        if let Poll::Ready(r) = first {
            assert_eq!(r, Ok(Ok(42)));
            return;
        }
        // Everything finished; the owner looks again after the deadline.
        std::thread::sleep(ms(80));
        assert!(finished_at.elapsed() >= ms(30));
        let r = match poll_once(fut.as_mut(), Waker::noop()) {
            Poll::Ready(r) => r,
            Poll::Pending => panic!("the nursery is still pending with every child ended"),
        };
        assert_eq!(load(&body_value), 1);
        assert_eq!(
            r,
            Ok(Ok(42)),
            "a nursery whose body and children all ended before its deadline was reported \
             Elapsed (its value dropped) because its owner looked after the deadline"
        );
    });
}

/// The blocking form: a body still running at the deadline is not interrupted, and the
/// value it returns after it is dropped (documented: the deadline came first), even
/// with no child to cancel.
#[test]
fn a_blocking_nursery_body_overrunning_its_deadline_with_no_children() {
    watchdog(10, || {
        let rt = workers(1);
        let _g = rt.enter();
        let dropped = counter();
        let r = weft::Nursery::with_timeout(ms(10)).run_blocking(|_n| {
            std::thread::sleep(ms(40));
            Ok::<_, ()>(DropCounter(dropped.clone()))
        });
        assert!(
            r.is_err(),
            "the body returned after its deadline: {:?}",
            r.is_ok()
        );
        assert_eq!(load(&dropped), 1, "the late value is dropped, once");
    });
}

/// A blocking body that returns before its deadline while its last child ends just as
/// the deadline fires gets its value, never `Elapsed` (the race of the async form's
/// late look).
#[test]
fn a_blocking_nursery_whose_last_child_ends_at_the_deadline_keeps_its_value() {
    watchdog(15, || {
        let rt = workers(2);
        let _g = rt.enter();
        let mut elapsed_with_all_done = 0;
        for i in 0..40u64 {
            let ended: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
            let e = ended.clone();
            let deadline = Instant::now() + ms(5);
            let r = weft::Nursery::with_deadline(deadline).run_blocking(|n| {
                n.spawn(async move {
                    // Ends around the deadline, a little before or after it.
                    std::thread::sleep(Duration::from_micros(3_000 + (i % 8) * 500));
                    *e.lock().unwrap() = Some(Instant::now());
                    Ok(())
                });
                Ok::<_, ()>(i)
            });
            match r {
                Ok(v) => assert_eq!(v, Ok(i)),
                // Elapsed is right only if the child was still running at the deadline.
                Err(_) => {
                    let end = ended.lock().unwrap().expect("the child ran to its end");
                    elapsed_with_all_done += usize::from(end + ms(1) < deadline);
                }
            }
        }
        assert_eq!(elapsed_with_all_done, 0);
    });
}
