//! Review of session 28 (commit 9467fb5): a blocked wait on a worker whose future keeps
//! waking itself yields the worker (`Core::yield_wait`), and so do `fiber::yield_now`
//! outside a fiber and an expired timed wait. Attacked from the public API only:
//! nested self-waking waits, waits that all yield to each other on one worker, waits
//! inside fork-join `join`/`scope` (on tasks and on fibers), `block_on` of another
//! runtime, panics and timeouts after yields, aborts and runtime drops while waits
//! are yielded, genuine wakes racing the yield, many yielders on one and two workers,
//! temporary workers, and blocking channel ping-pong between tasks on a worker.
//!
//! Every test runs under a watchdog. One finding, fixed in session 28:
//! `dropping_a_runtime_during_dependent_self_waking_waits_returns`, a runtime drop
//! that hung while a self-waking wait on a worker depended on another wait set aside
//! (or yielded) there. The ping-pong test prints its timings: about the same as
//! before 9467fb5 (checked against b8bbd1b's sources, debug build).

mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::spawn::{fiber_on, join_within};
use common::watchdog;
use weft::Runtime;

/// A runtime of `workers` workers and no interactive pool.
fn rt(workers: usize) -> Runtime {
    common::runtime(workers, 0)
}

fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// A future that wakes itself on every poll until `f` is set; counts its polls.
struct Until {
    flag: Arc<AtomicBool>,
    polls: u64,
    /// Gives up (returns `false`) after this long: every loop is bounded.
    deadline: Instant,
}

fn until(flag: &Arc<AtomicBool>) -> Until {
    Until {
        flag: flag.clone(),
        polls: 0,
        deadline: Instant::now() + Duration::from_secs(40),
    }
}

impl Future for Until {
    type Output = bool;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        self.polls += 1;
        if self.flag.load(SeqCst) {
            return Poll::Ready(true);
        }
        if Instant::now() > self.deadline {
            return Poll::Ready(false);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// `weft::wait` on [`until`], asserting it saw the flag (not its own deadline).
fn wait_until_set(f: &Arc<AtomicBool>, what: &str) {
    assert!(
        weft::wait(until(f)),
        "self-waking wait for {what} never saw it"
    );
}

/// A loop of `fiber::yield_now` until `f` is set (bounded).
fn yield_until(f: &AtomicBool, what: &str) {
    let start = Instant::now();
    while !f.load(SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "yield_now loop for {what} never saw it"
        );
        weft::fiber::yield_now();
    }
}

/// A loop of expired `recv_timeout(ZERO)` on a channel nobody sends on, until `f`.
fn expired_until(f: &AtomicBool, what: &str) {
    let (_tx, rx) = weft::chan::bounded::<()>(1);
    let start = Instant::now();
    while !f.load(SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "expired-retry loop for {what} never saw it"
        );
        assert!(rx.recv_timeout(Duration::ZERO).is_err());
    }
}

/// A self-waking wait whose poll itself makes a self-waking `weft::wait` (nested
/// `on_worker` loops, two signals), on one worker: the flags are set by a fiber and a
/// task tied to that worker, which only run if the inner and outer waits yield.
#[test]
fn nested_self_waking_waits_let_fibers_and_tasks_run() {
    watchdog(60, || {
        let rt = rt(1);
        for round in 0..20 {
            let h = rt.spawn(async move {
                let inner = flag();
                let outer = flag();
                let (i2, o2) = (inner.clone(), outer.clone());
                let setter = if round % 2 == 0 {
                    weft::fiber::spawn(move || {
                        i2.store(true, SeqCst);
                        for _ in 0..3 {
                            weft::fiber::yield_now();
                        }
                        o2.store(true, SeqCst);
                    })
                } else {
                    weft::spawn(async move {
                        i2.store(true, SeqCst);
                        for _ in 0..3 {
                            weft::task::yield_now().await;
                        }
                        o2.store(true, SeqCst);
                    })
                };
                let mut inner_waits = 0u32;
                let deadline = Instant::now() + Duration::from_secs(40);
                weft::wait(std::future::poll_fn(|cx| {
                    if outer.load(SeqCst) || Instant::now() > deadline {
                        return Poll::Ready(());
                    }
                    // The inner wait yields too (the outer's own wake is pending).
                    wait_until_set(&inner, "inner");
                    inner_waits += 1;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }));
                assert!(outer.load(SeqCst), "outer flag never set");
                setter.join().unwrap();
                inner_waits
            });
            assert!(join_within(h, 50).unwrap() >= 1);
        }
    });
}

/// Every task of a one-worker runtime waits, by a self-waking wait, a `yield_now`
/// loop or expired timed waits, for all the others to have arrived, then for all to
/// have left the first barrier: they can only finish if they keep yielding to each
/// other.
#[test]
fn all_tasks_of_one_worker_yielding_to_each_other_all_finish() {
    watchdog(60, || {
        let rt = rt(1);
        for round in 0..5 {
            const N: usize = 9;
            let arrived = Arc::new(AtomicUsize::new(0));
            let all_in = flag();
            let left = Arc::new(AtomicUsize::new(0));
            let all_out = flag();
            let hs: Vec<_> = (0..N)
                .map(|i| {
                    let (arrived, all_in, left, all_out) = (
                        arrived.clone(),
                        all_in.clone(),
                        left.clone(),
                        all_out.clone(),
                    );
                    let body = move || {
                        if arrived.fetch_add(1, SeqCst) + 1 == N {
                            all_in.store(true, SeqCst);
                        }
                        match (i + round) % 3 {
                            0 => wait_until_set(&all_in, "all in"),
                            1 => yield_until(&all_in, "all in"),
                            _ => expired_until(&all_in, "all in"),
                        }
                        if left.fetch_add(1, SeqCst) + 1 == N {
                            all_out.store(true, SeqCst);
                        }
                        match (i + round + 1) % 3 {
                            0 => wait_until_set(&all_out, "all out"),
                            1 => yield_until(&all_out, "all out"),
                            _ => expired_until(&all_out, "all out"),
                        }
                    };
                    if i % 4 == 3 {
                        // Some are fibers (they suspend), the rest tasks (they yield).
                        fiber_on(&rt, body)
                    } else {
                        rt.spawn(async move { body() })
                    }
                })
                .collect();
            for h in hs {
                join_within(h, 50).unwrap();
            }
        }
    });
}

/// Self-waking waits inside a fork-join `join` and `scope` made by a task on one
/// worker (the waits dispatch in place): the partners are a task and a fiber.
#[test]
fn self_waking_waits_inside_join_and_scope_in_a_task_let_partners_run() {
    watchdog(60, || {
        let rt = rt(1);
        for _ in 0..10 {
            let h = rt.spawn(async {
                let (a, b, c, d) = (flag(), flag(), flag(), flag());
                let (a2, b2, c2, d2) = (a.clone(), b.clone(), c.clone(), d.clone());
                let t = weft::spawn(async move { a2.store(true, SeqCst) });
                let f = weft::fiber::spawn(move || b2.store(true, SeqCst));
                weft::join(
                    || wait_until_set(&a, "a (task)"),
                    || yield_until(&b, "b (fiber)"),
                );
                let t2 = weft::spawn(async move { c2.store(true, SeqCst) });
                let f2 = weft::fiber::spawn(move || d2.store(true, SeqCst));
                weft::scope(|s| {
                    s.spawn(|_| wait_until_set(&c, "c (task)"));
                    expired_until(&d, "d (fiber)");
                });
                t.join().unwrap();
                f.join().unwrap();
                t2.join().unwrap();
                f2.join().unwrap();
            });
            join_within(h, 50).unwrap();
        }
    });
}

/// The same on a fiber (inside a join a fiber may not suspend, its waits dispatch).
#[test]
fn self_waking_waits_inside_join_on_a_fiber_let_partners_run() {
    watchdog(60, || {
        let rt = rt(1);
        for _ in 0..10 {
            let h = fiber_on(&rt, || {
                let (a, b) = (flag(), flag());
                let (a2, b2) = (a.clone(), b.clone());
                let f = weft::fiber::spawn(move || a2.store(true, SeqCst));
                let t = weft::spawn(async move { b2.store(true, SeqCst) });
                weft::join(
                    || {
                        // Nested: a join inside the join.
                        weft::join(|| wait_until_set(&a, "a (fiber)"), || ());
                    },
                    || yield_until(&b, "b (task)"),
                );
                f.join().unwrap();
                t.join().unwrap();
            });
            join_within(h, 50).unwrap();
        }
    });
}

/// `b.block_on` of a self-waking future in a task of runtime `a` (one worker each);
/// the flag is set by a task of `a` queued on the same worker.
#[test]
fn block_on_of_another_runtime_with_a_self_waking_future_lets_the_worker_run() {
    watchdog(60, || {
        let a = rt(1);
        let b = Arc::new(rt(1));
        for _ in 0..10 {
            let b2 = b.clone();
            let h = a.spawn(async move {
                let f = flag();
                let f2 = f.clone();
                let setter = weft::spawn(async move { f2.store(true, SeqCst) });
                let seen = b2.block_on(until(&f));
                setter.join().unwrap();
                seen
            });
            assert!(join_within(h, 50).unwrap(), "the setter task never ran");
        }
        drop(a);
        match Arc::try_unwrap(b) {
            Ok(b) => drop(b),
            Err(_) => panic!("runtime b still shared"),
        }
    });
}

/// A future that panics after it woke itself (and so yielded) many times: the panic
/// reaches the task (caught, or as its join error), and the worker goes on; a second
/// self-waking wait in the same task works afterwards.
#[test]
fn a_panic_in_a_future_after_it_yielded_reaches_the_task_and_the_worker_goes_on() {
    watchdog(60, || {
        let rt = rt(1);
        let stop = flag();
        let s2 = stop.clone();
        // A partner that keeps others ready (it yields too).
        let ticker = rt.spawn(async move { yield_until(&s2, "stop") });
        for round in 0..10 {
            let h = rt.spawn(async move {
                let mut polls = 0u32;
                let r = catch_unwind(AssertUnwindSafe(|| {
                    weft::wait(std::future::poll_fn(|cx| {
                        polls += 1;
                        if polls == 20 {
                            panic!("boom {round}");
                        }
                        cx.waker().wake_by_ref();
                        Poll::<()>::Pending
                    }))
                }));
                assert!(r.is_err());
                let f = flag();
                let f2 = f.clone();
                let setter = weft::spawn(async move { f2.store(true, SeqCst) });
                wait_until_set(&f, "after the panic");
                setter.join().unwrap();
                if round % 2 == 1 {
                    // Uncaught this time.
                    let mut n = 0u32;
                    weft::wait(std::future::poll_fn(|cx| {
                        n += 1;
                        if n == 10 {
                            panic!("uncaught");
                        }
                        cx.waker().wake_by_ref();
                        Poll::<()>::Pending
                    }));
                }
                polls
            });
            match join_within(h, 50) {
                Ok(p) => assert_eq!(p, 20),
                Err(e) => {
                    assert!(round % 2 == 1 && e.is_panic(), "{e:?}");
                }
            }
            assert_eq!(join_within(rt.spawn(async { 5 }), 50).unwrap(), 5);
        }
        stop.store(true, SeqCst);
        join_within(ticker, 50).unwrap();
    });
}

/// A task aborted while its self-waking wait is yielded (a blocking wait cannot be
/// cancelled: it goes on until its future ends); then the runtime works, and drops.
#[test]
fn aborting_a_task_whose_wait_is_yielded() {
    watchdog(60, || {
        for _ in 0..10 {
            let rt = rt(1);
            let go = flag();
            let stop = flag();
            let (g2, s2) = (go.clone(), stop.clone());
            let ticker = rt.spawn(async move { yield_until(&s2, "stop") });
            let entered = flag();
            let e2 = entered.clone();
            let h = rt.spawn(async move {
                e2.store(true, SeqCst);
                wait_until_set(&g2, "go");
                7
            });
            let t0 = Instant::now();
            while !entered.load(SeqCst) {
                assert!(t0.elapsed() < Duration::from_secs(20), "never started");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(5));
            h.abort();
            assert_eq!(join_within(rt.spawn(async { 1 }), 50).unwrap(), 1);
            go.store(true, SeqCst);
            match join_within(h, 50) {
                Ok(v) => assert_eq!(v, 7),
                Err(e) => assert!(e.is_cancelled(), "{e:?}"),
            }
            stop.store(true, SeqCst);
            join_within(ticker, 50).unwrap();
            drop(rt);
        }
    });
}

/// `weft::time::timeout` around a future that wakes itself for ever, waited on by a
/// task: the timer fires (with a yielding partner on the worker, and alone), and the
/// future is dropped once.
#[test]
fn a_timeout_ends_a_self_waking_wait_and_drops_its_future() {
    struct Forever(Arc<AtomicUsize>);
    impl Drop for Forever {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    impl Future for Forever {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    watchdog(60, || {
        let rt = rt(1);
        for with_partner in [true, false] {
            let stop = flag();
            let s2 = stop.clone();
            let partner = with_partner.then(|| rt.spawn(async move { yield_until(&s2, "stop") }));
            let drops = Arc::new(AtomicUsize::new(0));
            let d2 = drops.clone();
            let h = rt.spawn(async move {
                let t0 = Instant::now();
                let r = weft::wait(weft::time::timeout(
                    Duration::from_millis(30),
                    Forever(d2.clone()),
                ));
                assert!(r.is_err(), "a future that never ends ended");
                assert_eq!(d2.load(SeqCst), 1);
                t0.elapsed()
            });
            let took = join_within(h, 50).unwrap();
            assert!(took < Duration::from_secs(20), "{took:?}");
            stop.store(true, SeqCst);
            if let Some(p) = partner {
                join_within(p, 50).unwrap();
            }
            assert_eq!(drops.load(SeqCst), 1);
        }
    });
}

/// A genuine wake (from a plain thread) that lands while the future also wakes itself:
/// the future's state is only ever made visible together with a wake, and the wait
/// must see it (a yield resets the signal; the re-poll must still come).
#[test]
fn genuine_wakes_racing_self_wakes_are_not_lost() {
    watchdog(60, || {
        let rt = rt(1);
        let stop = flag();
        let s2 = stop.clone();
        let ticker = rt.spawn(async move { yield_until(&s2, "stop") });
        let (wtx, wrx) = mpsc::channel::<(Waker, Arc<AtomicUsize>)>();
        let waker_thread = std::thread::spawn(move || {
            // Sets the value, then wakes: the wait ends only if this wake is seen
            // (the future self-wakes only on every other poll).
            while let Ok((w, v)) = wrx.recv() {
                v.fetch_add(1, SeqCst);
                w.wake();
            }
        });
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let wtx = wtx.clone();
                rt.spawn(async move {
                    for _ in 0..200 {
                        let v = Arc::new(AtomicUsize::new(0));
                        let mut polls = 0u32;
                        let mut sent = false;
                        weft::wait(std::future::poll_fn(|cx| {
                            polls += 1;
                            if v.load(SeqCst) > 0 {
                                return Poll::Ready(());
                            }
                            if !sent {
                                sent = true;
                                wtx.send((cx.waker().clone(), v.clone())).unwrap();
                            }
                            if polls % 2 == 1 {
                                cx.waker().wake_by_ref();
                            }
                            Poll::Pending
                        }));
                    }
                })
            })
            .collect();
        drop(wtx);
        for h in hs {
            join_within(h, 50).unwrap();
        }
        stop.store(true, SeqCst);
        join_within(ticker, 50).unwrap();
        drop(rt);
        waker_thread.join().unwrap();
    });
}

/// Many tasks and fibers on one and on two workers pass a token by self-waking waits,
/// `yield_now` loops and expired timed waits: every one must get its turn.
#[test]
fn many_yielders_pass_a_token_on_one_and_two_workers() {
    watchdog(90, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            const N: usize = 40;
            const ROUNDS: usize = 4;
            let turn = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..N)
                .map(|i| {
                    let turn = turn.clone();
                    let body = move || {
                        for r in 0..ROUNDS {
                            let mine = r * N + i;
                            let start = Instant::now();
                            match i % 3 {
                                0 => {
                                    weft::wait(std::future::poll_fn(|cx| {
                                        if turn.load(SeqCst) == mine
                                            || start.elapsed() > Duration::from_secs(60)
                                        {
                                            Poll::Ready(())
                                        } else {
                                            cx.waker().wake_by_ref();
                                            Poll::Pending
                                        }
                                    }));
                                }
                                1 => {
                                    while turn.load(SeqCst) != mine
                                        && start.elapsed() < Duration::from_secs(60)
                                    {
                                        weft::fiber::yield_now();
                                    }
                                }
                                _ => {
                                    let (_tx, rx) = weft::chan::bounded::<()>(1);
                                    while turn.load(SeqCst) != mine
                                        && start.elapsed() < Duration::from_secs(60)
                                    {
                                        let _ = rx.recv_timeout(Duration::ZERO);
                                    }
                                }
                            }
                            assert_eq!(turn.load(SeqCst), mine, "turn {mine} never came");
                            turn.store(mine + 1, SeqCst);
                        }
                    };
                    if i % 5 == 4 {
                        fiber_on(&rt, body)
                    } else {
                        rt.spawn(async move { body() })
                    }
                })
                .collect();
            for h in hs {
                join_within(h, 80).unwrap();
            }
            assert_eq!(turn.load(SeqCst), N * ROUNDS);
        }
    });
}

/// Plain threads, fibers and tasks mixed on two workers: threads set flags the tasks
/// wait for by self-waking waits, fibers hand tokens through blocking channels to
/// tasks in `yield_now` loops.
#[test]
fn threads_fibers_and_tasks_mixed_on_two_workers() {
    watchdog(60, || {
        let rt = rt(2);
        for _ in 0..5 {
            let flags: Vec<_> = (0..6).map(|_| flag()).collect();
            let done = Arc::new(AtomicUsize::new(0));
            let mut hs = Vec::new();
            for f in &flags {
                let (f, done) = (f.clone(), done.clone());
                hs.push(rt.spawn(async move {
                    wait_until_set(&f, "a thread's flag");
                    done.fetch_add(1, SeqCst);
                }));
            }
            let (tx, rx) = weft::chan::bounded::<usize>(0);
            let got = Arc::new(Mutex::new(Vec::new()));
            for k in 0..3 {
                let tx = tx.clone();
                hs.push(fiber_on(&rt, move || {
                    for j in 0..10 {
                        tx.send_blocking(k * 100 + j).unwrap();
                    }
                }));
            }
            drop(tx);
            for _ in 0..2 {
                let (rx, got) = (rx.clone(), got.clone());
                hs.push(rt.spawn(async move {
                    loop {
                        match rx.try_recv() {
                            Ok(v) => got.lock().unwrap().push(v),
                            Err(weft::chan::TryRecvError::Disconnected) => break,
                            Err(_) => weft::fiber::yield_now(),
                        }
                    }
                }));
            }
            let threads: Vec<_> = flags
                .iter()
                .cloned()
                .map(|f| {
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(5));
                        f.store(true, SeqCst);
                    })
                })
                .collect();
            for h in hs {
                join_within(h, 50).unwrap();
            }
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(done.load(SeqCst), 6);
            let mut got = got.lock().unwrap().clone();
            got.sort_unstable();
            let want: Vec<usize> = (0..3)
                .flat_map(|k| (0..10).map(move |j| k * 100 + j))
                .collect();
            assert_eq!(got, want);
        }
    });
}

/// A runtime dropped while its only worker has several tasks in self-waking waits,
/// yielding to each other, each released by a plain thread after the drop began.
#[test]
fn dropping_a_runtime_while_waits_are_yielded_returns() {
    watchdog(60, || {
        for _ in 0..10 {
            let rt = rt(1);
            let stop = flag();
            let started = Arc::new(AtomicUsize::new(0));
            for i in 0..4 {
                let (s, st) = (stop.clone(), started.clone());
                let _h = rt.spawn(async move {
                    st.fetch_add(1, SeqCst);
                    match i % 3 {
                        0 => wait_until_set(&s, "stop"),
                        1 => yield_until(&s, "stop"),
                        _ => expired_until(&s, "stop"),
                    }
                });
            }
            let t0 = Instant::now();
            while started.load(SeqCst) < 4 {
                assert!(t0.elapsed() < Duration::from_secs(20), "not all started");
                std::thread::sleep(Duration::from_millis(1));
            }
            let stopper = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                stop.store(true, SeqCst);
            });
            drop(rt);
            stopper.join().unwrap();
        }
    });
}

/// As above, but the waits depend on each other: task X waits (a self-waking wait, a
/// `yield_now` loop, or expired `recv_timeout(ZERO)` retries) for a flag that task Y
/// sets once its own self-waking wait, released by a plain thread 20 ms after the drop
/// began, ends. Before the drop they yield to each other; during it no wait yields,
/// and the shutdown resumes the set-aside waits one at a time (`finish_stacks`): if X
/// is resumed first it re-polls for ever, since its future is never "pending and not
/// woken", so `wait_shutting_down` (which would resume Y's stack) is never reached,
/// and `worker_yield` returns at once while shutting down.
///
/// Found in this review: the drop hung (until X gave up after 8 s) in most rounds. On
/// one worker this scenario could not arise before 9467fb5 (Y never ran at all). Fixed
/// in session 28: a wait that keeps finding itself woken during shutdown (and a yield
/// then) resumes a ready set-aside wait of its worker, as `wait_shutting_down` does
/// for a pending one.
#[test]
fn dropping_a_runtime_during_dependent_self_waking_waits_returns() {
    watchdog(60, || {
        for round in 0..6 {
            let rt = rt(1);
            let released = flag();
            let y_done = flag();
            let started = Arc::new(AtomicUsize::new(0));
            let (yd, st) = (y_done.clone(), started.clone());
            let _x = rt.spawn(async move {
                st.fetch_add(1, SeqCst);
                let give_up = Instant::now() + Duration::from_secs(8);
                match round % 3 {
                    0 => {
                        weft::wait(std::future::poll_fn(|cx| {
                            if yd.load(SeqCst) || Instant::now() > give_up {
                                Poll::Ready(())
                            } else {
                                cx.waker().wake_by_ref();
                                Poll::Pending
                            }
                        }));
                    }
                    1 => {
                        while !yd.load(SeqCst) && Instant::now() < give_up {
                            weft::fiber::yield_now();
                        }
                    }
                    _ => {
                        let (_tx, rx) = weft::chan::bounded::<()>(1);
                        while !yd.load(SeqCst) && Instant::now() < give_up {
                            let _ = rx.recv_timeout(Duration::ZERO);
                        }
                    }
                }
            });
            let (rel, yd, st) = (released.clone(), y_done.clone(), started.clone());
            let _y = rt.spawn(async move {
                st.fetch_add(1, SeqCst);
                wait_until_set(&rel, "released");
                yd.store(true, SeqCst);
            });
            let t0 = Instant::now();
            while started.load(SeqCst) < 2 {
                assert!(t0.elapsed() < Duration::from_secs(20), "not all started");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(5));
            let stopper = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                released.store(true, SeqCst);
            });
            let t0 = Instant::now();
            drop(rt);
            let took = t0.elapsed();
            stopper.join().unwrap();
            assert!(y_done.load(SeqCst), "round {round}: Y never finished");
            assert!(
                took < Duration::from_secs(6),
                "round {round}: the drop took {took:?} (X spun until it gave up)"
            );
        }
    });
}

/// A temporary worker (started while the base worker is blocked in a thread-blocking
/// call) runs tasks in self-waking waits that yield to each other; once all ended it
/// retires, and the runtime still runs new work.
#[test]
fn yielding_waits_on_a_temporary_worker_and_its_retirement() {
    watchdog(60, || {
        let rt = weft::Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .max_extra_workers(1)
            .extra_worker_keep_alive(Duration::from_millis(20))
            .build()
            .unwrap();
        for _ in 0..3 {
            let blocker = rt.spawn(async {
                std::thread::sleep(Duration::from_millis(300));
            });
            std::thread::sleep(Duration::from_millis(20));
            let go = flag();
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    let go = go.clone();
                    rt.spawn(async move {
                        if i == 3 {
                            for _ in 0..20 {
                                weft::fiber::yield_now();
                            }
                            go.store(true, SeqCst);
                        } else {
                            wait_until_set(&go, "go");
                        }
                    })
                })
                .collect();
            for h in hs {
                join_within(h, 50).unwrap();
            }
            join_within(blocker, 50).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(join_within(rt.spawn(async { 3 }), 50).unwrap(), 3);
        }
        // (Whether a temporary worker started depends on sysmon's timing; if one did,
        // it must retire.)
        let t0 = Instant::now();
        loop {
            let s2 = rt.stats();
            if s2.temp_workers_retired == s2.temp_workers_started {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "temporary workers never retired: {} started, {} retired",
                s2.temp_workers_started,
                s2.temp_workers_retired
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    });
}

/// Blocking channel ping-pong between two tasks (not fibers) with `send_blocking` and
/// `recv_blocking`, on one and two workers, rendezvous and buffered: all values arrive
/// in order and the run stays bounded.
#[test]
fn blocking_ping_pong_between_tasks_stays_correct_and_bounded() {
    watchdog(120, || {
        for workers in [1, 2] {
            for cap in [0usize, 1, 16] {
                let rt = rt(workers);
                const N: u64 = 3000;
                let (atx, arx) = weft::chan::bounded::<u64>(cap);
                let (btx, brx) = weft::chan::bounded::<u64>(cap);
                let t0 = Instant::now();
                let ping = rt.spawn(async move {
                    let mut sum = 0u64;
                    for i in 0..N {
                        atx.send_blocking(i).unwrap();
                        let v = brx.recv_blocking().unwrap();
                        assert_eq!(v, i * 2);
                        sum += v;
                    }
                    sum
                });
                let pong = rt.spawn(async move {
                    for i in 0..N {
                        let v = arx.recv_blocking().unwrap();
                        assert_eq!(v, i);
                        btx.send_blocking(v * 2).unwrap();
                    }
                });
                let sum = join_within(ping, 100).unwrap();
                join_within(pong, 100).unwrap();
                let took = t0.elapsed();
                assert_eq!(sum, N * (N - 1));
                eprintln!(
                    "ping-pong: {workers} worker(s), cap {cap}: {N} round trips in {took:?} ({:?} each)",
                    took / N as u32
                );
                assert!(took < Duration::from_secs(30), "{took:?}");
            }
        }
    });
}
