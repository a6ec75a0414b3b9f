//! Review of commit da94c60 (`WaitSignal::reset` is a swap that reads from the wake it
//! erases, and writes nothing when the signal is clear). Attacked from safe code,
//! through the public API only: blocked `weft::wait`s on workers whose futures wake
//! themselves on some polls and are genuinely woken by plain threads, tasks, fibers and
//! timers (1 and 2 workers, many waits at once so set-aside slots are reused); nested
//! waits; duplicate, stale and cross-thread-dropped wakers; aborts and runtime drops
//! while waits are set aside; a value passed round a ring of a fiber, tasks and plain
//! threads while `yield_now` loops run on the same worker; and the same class of bug in
//! the sync primitives and channels (waits on workers woken from plain threads).
//!
//! No lost wake was found. One finding, fixed with the tests that showed it: a worker
//! whose only work was a wait that kept waking itself (a self-waking `weft::wait`, a
//! `yield_now` loop or a loop of expired timed waits, in a task) never fired a due
//! timer (`Core::fire_due_for_a_busy_wait`).
//!
//! Every test runs under a watchdog.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::spawn::{fiber_on, join_within};
use common::watchdog;
use common::Rng;
use weft::Runtime;

/// A runtime of `workers` workers and no interactive pool.
fn rt(workers: usize) -> Runtime {
    common::runtime(workers, 0)
}

/// A generator for test inputs from a small seed (spread so that nearby seeds differ).
fn seeded(seed: u64) -> Rng {
    Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
}

/// What a gated wait waits for: a value published by someone, then a wake.
#[derive(Default)]
struct Gate {
    value: AtomicUsize,
    waker: Mutex<Option<Waker>>,
}

impl Gate {
    fn new() -> Arc<Gate> {
        Arc::new(Gate::default())
    }

    /// Publishes the value, then wakes whoever registered (the wake a reset must not
    /// erase unseen). The waker is taken out and woken outside the lock.
    fn open(&self) {
        self.value.store(1, SeqCst);
        let w = self.waker.lock().unwrap().take();
        if let Some(w) = w {
            w.wake();
        }
    }

    fn is_open(&self) -> bool {
        self.value.load(SeqCst) > 0
    }
}

/// A future that is ready once `gate` is open; on each pending poll it registers its
/// waker, and wakes itself on the polls `self_wake` picks (a future that wakes itself
/// on some polls, the case the fix is about).
struct Gated {
    gate: Arc<Gate>,
    rng: Rng,
    /// 0: never wakes itself, n: wakes itself on about 1 poll in n.
    self_wake_one_in: u64,
    polls: u64,
    deadline: Instant,
}

fn gated(gate: &Arc<Gate>, seed: u64, self_wake_one_in: u64) -> Gated {
    Gated {
        gate: gate.clone(),
        rng: seeded(seed),
        self_wake_one_in,
        polls: 0,
        deadline: Instant::now() + Duration::from_secs(20),
    }
}

impl Future for Gated {
    /// false if it gave up at its own deadline (a lost wake).
    type Output = bool;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        self.polls += 1;
        if self.gate.is_open() {
            return Poll::Ready(true);
        }
        // Registered before the re-check: a wake from `open` after this is not lost.
        *self.gate.waker.lock().unwrap() = Some(cx.waker().clone());
        if self.gate.is_open() {
            return Poll::Ready(true);
        }
        if Instant::now() > self.deadline {
            return Poll::Ready(false);
        }
        let n = self.self_wake_one_in;
        if n > 0 && self.rng.below(n) == 0 {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

/// What the waker threads are asked to do with a gate.
enum Job {
    Open(Arc<Gate>, Waker, u64),
    Stop,
}

/// A plain thread that opens gates, with extra wakes on the side: a wake before the
/// value (spurious), a duplicate wake after, a clone of the waker dropped on another
/// thread, and stale wakes of gates long done.
fn waker_thread(rx: mpsc::Receiver<Job>, seed: u64) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut rng = seeded(seed);
        let mut stale: Vec<Waker> = Vec::new();
        let (drop_tx, drop_rx) = mpsc::channel::<Waker>();
        let dropper = std::thread::spawn(move || {
            let mut n = 0;
            while let Ok(w) = drop_rx.recv() {
                if n % 2 == 0 {
                    w.wake_by_ref();
                }
                drop(w);
                n += 1;
            }
        });
        let mut opened = 0;
        while let Ok(job) = rx.recv() {
            let Job::Open(gate, w, spin) = job else { break };
            if rng.below(3) == 0 {
                w.wake_by_ref(); // no value yet: a spurious wake
            }
            for _ in 0..spin {
                std::hint::spin_loop();
            }
            gate.open();
            opened += 1;
            match rng.below(4) {
                0 => w.wake_by_ref(), // a duplicate
                1 => drop_tx.send(w.clone()).unwrap(),
                _ => {}
            }
            stale.push(w);
            if stale.len() >= 16 {
                // Wakes of waits that completed long ago (their signals may be set
                // aside again in a later wait of the same task, or gone).
                for w in stale.drain(..) {
                    w.wake();
                }
            }
        }
        for w in stale.drain(..) {
            w.wake();
        }
        drop(drop_tx);
        dropper.join().unwrap();
        opened
    })
}

/// `weft::wait` on a gate that a plain thread opens, by tasks on 1 and 2 workers, many
/// at once (set-aside slots reused), the futures waking themselves on some polls, with
/// a `yield_now` loop running beside (so self-woken waits take the yield path), and
/// spurious, duplicate, cross-thread-dropped and stale wakes.
#[test]
fn thread_opened_gates_with_random_self_wakes() {
    watchdog(30, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let stop = Arc::new(AtomicBool::new(false));
            let s2 = stop.clone();
            let ticker = rt.spawn(async move {
                let mut n = 0u64;
                while !s2.load(SeqCst) {
                    weft::task::yield_now().await;
                    n += 1;
                }
                n
            });
            let (jtx0, jrx0) = mpsc::channel();
            let (jtx1, jrx1) = mpsc::channel();
            let t0 = waker_thread(jrx0, 1 + workers as u64);
            let t1 = waker_thread(jrx1, 7 + workers as u64);
            const TASKS: usize = 8;
            const WAITS: usize = 120;
            let hs: Vec<_> = (0..TASKS)
                .map(|i| {
                    let jtx = if i % 2 == 0 {
                        jtx0.clone()
                    } else {
                        jtx1.clone()
                    };
                    rt.spawn(async move {
                        let mut rng = seeded(100 + i as u64);
                        let mut lost = 0;
                        for k in 0..WAITS {
                            let gate = Gate::new();
                            let seed = rng.next();
                            let one_in = [0, 1, 2, 3][k % 4];
                            let spin = rng.below(2000);
                            let mut sent = false;
                            let mut fut = gated(&gate, seed, one_in);
                            let jtx = &jtx;
                            let ok = weft::wait(std::future::poll_fn(|cx| {
                                if !sent {
                                    sent = true;
                                    jtx.send(Job::Open(gate.clone(), cx.waker().clone(), spin))
                                        .unwrap();
                                }
                                Pin::new(&mut fut).poll(cx)
                            }));
                            if !ok {
                                lost += 1;
                            }
                        }
                        lost
                    })
                })
                .collect();
            for h in hs {
                assert_eq!(join_within(h, 25).unwrap(), 0, "a gated wait lost its wake");
            }
            stop.store(true, SeqCst);
            join_within(ticker, 10).unwrap();
            jtx0.send(Job::Stop).unwrap();
            jtx1.send(Job::Stop).unwrap();
            drop((jtx0, jtx1));
            assert_eq!(
                t0.join().unwrap() + t1.join().unwrap(),
                TASKS * WAITS,
                "every gate opened"
            );
            common::drop_within(rt, Duration::from_secs(10), "after gated waits");
        }
    });
}

/// Who opens a gate in [`gates_opened_by_tasks_fibers_timers_and_threads`].
fn open_from(kind: u64, gate: Arc<Gate>, yields: u64) {
    match kind {
        0 => {
            weft::spawn(async move {
                for _ in 0..yields {
                    weft::task::yield_now().await;
                }
                gate.open();
            });
        }
        1 => {
            weft::fiber::spawn(move || {
                for _ in 0..yields {
                    weft::fiber::yield_now();
                }
                gate.open();
            });
        }
        2 => {
            weft::spawn(async move {
                weft::time::sleep(Duration::from_micros(50 * yields)).await;
                gate.open();
            });
        }
        _ => {
            std::thread::spawn(move || {
                for _ in 0..yields * 100 {
                    std::hint::spin_loop();
                }
                gate.open();
            });
        }
    }
}

/// Gated waits on workers opened by other tasks, by fibers, after timers, and by plain
/// threads; the futures wake themselves on some polls; 1 and 2 workers.
#[test]
fn gates_opened_by_tasks_fibers_timers_and_threads() {
    watchdog(30, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let hs: Vec<_> = (0..6)
                .map(|i| {
                    rt.spawn(async move {
                        let mut rng = seeded(300 + i);
                        let mut lost = 0;
                        for k in 0..60u64 {
                            let gate = Gate::new();
                            let from = (k + i) % 4;
                            open_from(from, gate.clone(), rng.below(4));
                            // Including a future that wakes itself on every poll
                            // waiting for a timer (see
                            // `self_waking_waits_for_a_timer_on_one_worker`).
                            let one_in = k % 3;
                            if !weft::wait(gated(&gate, rng.next(), one_in)) {
                                lost += 1;
                            }
                        }
                        lost
                    })
                })
                .collect();
            // And waits made by fibers (they suspend the fiber, not through the
            // worker's signal), woken the same ways, alongside.
            let fs: Vec<_> = (0..2)
                .map(|i| {
                    fiber_on(&rt, move || {
                        let mut rng = seeded(400 + i);
                        let mut lost = 0;
                        for k in 0..60u64 {
                            let gate = Gate::new();
                            let from = (k + i) % 4;
                            open_from(from, gate.clone(), rng.below(4));
                            // Including a future that wakes itself on every poll
                            // waiting for a timer (see
                            // `self_waking_waits_for_a_timer_on_one_worker`).
                            let one_in = k % 3;
                            if !weft::wait(gated(&gate, rng.next(), one_in)) {
                                lost += 1;
                            }
                        }
                        lost
                    })
                })
                .collect();
            for h in hs.into_iter().chain(fs) {
                assert_eq!(join_within(h, 25).unwrap(), 0, "a gated wait lost its wake");
            }
            common::drop_within(rt, Duration::from_secs(10), "after mixed gates");
        }
    });
}

/// A wait whose future's poll itself waits (nested `on_worker` loops, one signal each),
/// both levels gated by plain threads, both waking themselves on some polls; on 1 and
/// 2 workers with several such tasks at once.
#[test]
fn nested_gated_waits_woken_from_threads() {
    watchdog(30, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let (jtx, jrx) = mpsc::channel();
            let t = waker_thread(jrx, 55);
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    let jtx = jtx.clone();
                    rt.spawn(async move {
                        let mut rng = seeded(500 + i as u64);
                        let mut lost = 0usize;
                        for k in 0..40u64 {
                            let outer = Gate::new();
                            let mut outer_fut = gated(&outer, rng.next(), k % 3);
                            let mut sent = false;
                            let mut inner_lost = 0usize;
                            let mut inner_rng = seeded(rng.next());
                            let jtx2 = jtx.clone();
                            let ok = weft::wait(std::future::poll_fn(|cx| {
                                // The inner wait, while the outer gate may be opened.
                                if inner_rng.below(2) == 0 {
                                    let inner = Gate::new();
                                    let mut fut = gated(&inner, inner_rng.next(), 2);
                                    let mut isent = false;
                                    let ok = weft::wait(std::future::poll_fn(|icx| {
                                        if !isent {
                                            isent = true;
                                            jtx2.send(Job::Open(
                                                inner.clone(),
                                                icx.waker().clone(),
                                                500,
                                            ))
                                            .unwrap();
                                        }
                                        Pin::new(&mut fut).poll(icx)
                                    }));
                                    if !ok {
                                        inner_lost += 1;
                                    }
                                }
                                if !sent {
                                    sent = true;
                                    jtx2.send(Job::Open(outer.clone(), cx.waker().clone(), 3000))
                                        .unwrap();
                                }
                                Pin::new(&mut outer_fut).poll(cx)
                            }));
                            lost += inner_lost + usize::from(!ok);
                        }
                        lost
                    })
                })
                .collect();
            for h in hs {
                assert_eq!(
                    join_within(h, 25).unwrap(),
                    0,
                    "a nested wait lost its wake"
                );
            }
            jtx.send(Job::Stop).unwrap();
            drop(jtx);
            t.join().unwrap();
            common::drop_within(rt, Duration::from_secs(10), "after nested waits");
        }
    });
}

/// A task aborted while its `weft::wait` is set aside: the wait goes on until its
/// gate opens (a blocking wait cannot be interrupted), then the task ends, cancelled or
/// not; meanwhile other waits on the same worker keep working.
#[test]
fn abort_while_a_wait_is_set_aside() {
    watchdog(30, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let mut rng = seeded(600 + workers as u64);
            for round in 0..40u64 {
                let gate = Gate::new();
                let (polled_tx, polled_rx) = mpsc::channel();
                let g2 = gate.clone();
                let after = Arc::new(AtomicBool::new(false));
                let a2 = after.clone();
                let self_wake = round % 3;
                let h = rt.spawn(async move {
                    let mut told = false;
                    let mut fut = gated(&g2, round, self_wake);
                    let ok = weft::wait(std::future::poll_fn(|cx| {
                        if !told {
                            told = true;
                            polled_tx.send(()).unwrap();
                        }
                        Pin::new(&mut fut).poll(cx)
                    }));
                    assert!(ok, "the aborted task's wait lost its wake");
                    // The next await is where a cancellation takes effect.
                    weft::task::yield_now().await;
                    a2.store(true, SeqCst);
                });
                // Another wait on the same worker(s), completed by a task meanwhile.
                let other_gate = Gate::new();
                let og = other_gate.clone();
                let other = rt.spawn(async move { weft::wait(gated(&og, 9, 2)) });
                polled_rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("first poll");
                h.abort();
                if rng.below(2) == 0 {
                    std::thread::sleep(Duration::from_micros(rng.below(300)));
                }
                let g3 = other_gate.clone();
                rt.spawn(async move { g3.open() });
                assert!(
                    join_within(other, 10).unwrap(),
                    "the other wait lost its wake"
                );
                let opener = {
                    let gate = gate.clone();
                    std::thread::spawn(move || gate.open())
                };
                match join_within(h, 10) {
                    Ok(()) => assert!(after.load(SeqCst)),
                    Err(e) => assert!(e.is_cancelled(), "aborted task: {e:?}"),
                }
                opener.join().unwrap();
            }
            common::drop_within(rt, Duration::from_secs(10), "after aborts");
        }
    });
}

/// The runtime dropped while many waits are set aside (and some yielded), their gates
/// opened by plain threads racing the drop, with extra and stale wakes after the
/// runtime is gone: the drop returns once every wait has seen its gate, and every
/// wait saw it.
#[test]
fn runtime_drop_while_waits_are_set_aside_and_wakes_race() {
    watchdog(30, || {
        for round in 0..16u64 {
            let workers = 1 + (round % 2) as usize;
            let rt = rt(workers);
            const N: usize = 10;
            let done = Arc::new(AtomicUsize::new(0));
            let polled = Arc::new(AtomicUsize::new(0));
            let gates: Vec<_> = (0..N).map(|_| Gate::new()).collect();
            let wakers: Arc<Mutex<Vec<Waker>>> = Arc::default();
            let mut hs = Vec::new();
            for (i, gate) in gates.iter().enumerate() {
                let gate = gate.clone();
                let done = done.clone();
                let polled = polled.clone();
                let wakers = wakers.clone();
                hs.push(rt.spawn(async move {
                    let mut first = true;
                    let mut fut = gated(&gate, round * 31 + i as u64, (i % 3) as u64);
                    let ok = weft::wait(std::future::poll_fn(|cx| {
                        if first {
                            first = false;
                            wakers.lock().unwrap().push(cx.waker().clone());
                            polled.fetch_add(1, SeqCst);
                        }
                        Pin::new(&mut fut).poll(cx)
                    }));
                    assert!(ok, "a wait at the drop lost its wake");
                    done.fetch_add(1, SeqCst);
                }));
            }
            common::wait_until("every wait polled", || polled.load(SeqCst) == N);
            // Half the gates open before the drop begins, the rest race it.
            let mut rng = seeded(700 + round);
            let (early, late): (Vec<_>, Vec<_>) = gates
                .iter()
                .cloned()
                .enumerate()
                .partition(|(i, _)| i % 2 == 0);
            for (_, g) in early {
                g.open();
            }
            let late: Vec<_> = late.into_iter().map(|(_, g)| g).collect();
            let delay = rng.below(2000);
            let w2 = wakers.clone();
            let opener = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(delay));
                for g in late {
                    g.open();
                    std::thread::yield_now();
                }
                // Stale wakes, during and after the drop.
                for _ in 0..50 {
                    for w in w2.lock().unwrap().iter() {
                        w.wake_by_ref();
                    }
                    std::thread::yield_now();
                }
            });
            drop(hs);
            common::drop_within(rt, Duration::from_secs(10), "waits set aside at the drop");
            assert_eq!(
                done.load(SeqCst),
                N,
                "a set-aside wait did not finish by the drop"
            );
            opener.join().unwrap();
            // Wakers outliving the runtime.
            for w in wakers.lock().unwrap().drain(..) {
                w.wake();
            }
        }
    });
}

/// A value passed round a ring: plain thread -> task (blocking `recv` via
/// `weft::wait`) -> fiber -> task -> plain thread, on bounded(1) and rendezvous
/// channels, while `yield_now` loops (a task's and a fiber's, and a self-waking
/// `weft::wait`) run on the same worker. 1 worker, then 2.
#[test]
fn ring_through_threads_tasks_and_a_fiber_with_yielders() {
    watchdog(30, || {
        for (workers, cap) in [(1, 1), (1, 0), (2, 1), (2, 0)] {
            let rt = rt(workers);
            const ROUNDS: usize = 300;
            let (a_tx, a_rx) = weft::chan::bounded::<usize>(cap);
            let (b_tx, b_rx) = weft::chan::bounded::<usize>(cap);
            let (c_tx, c_rx) = weft::chan::bounded::<usize>(cap);
            let (d_tx, d_rx) = weft::chan::bounded::<usize>(cap);
            let stop = Arc::new(AtomicBool::new(false));
            // Yielders on the same worker(s).
            let s1 = stop.clone();
            let y_task = rt.spawn(async move {
                while !s1.load(SeqCst) {
                    weft::task::yield_now().await;
                }
            });
            let s2 = stop.clone();
            let y_fiber = fiber_on(&rt, move || {
                while !s2.load(SeqCst) {
                    weft::fiber::yield_now();
                }
            });
            let s3 = stop.clone();
            let y_wait = rt.spawn(async move {
                weft::wait(std::future::poll_fn(|cx| {
                    if s3.load(SeqCst) {
                        Poll::Ready(())
                    } else {
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                }))
            });
            // Task 1: a -> b, by blocking waits on the worker.
            let t1 = rt.spawn(async move {
                for _ in 0..ROUNDS {
                    let v = weft::wait(a_rx.recv()).unwrap();
                    weft::wait(b_tx.send(v + 1)).unwrap();
                }
            });
            // The fiber: b -> c.
            let f = fiber_on(&rt, move || {
                for _ in 0..ROUNDS {
                    let v = b_rx.recv_blocking().unwrap();
                    c_tx.send_blocking(v + 1).unwrap();
                }
            });
            // Task 2: c -> d, half by `weft::wait`, half by `.await`.
            let t2 = rt.spawn(async move {
                for i in 0..ROUNDS {
                    let v = if i % 2 == 0 {
                        weft::wait(c_rx.recv()).unwrap()
                    } else {
                        c_rx.recv().await.unwrap()
                    };
                    weft::wait(d_tx.send(v + 1)).unwrap();
                }
            });
            // The plain thread: d -> a (and starts the ring).
            let th = std::thread::spawn(move || {
                a_tx.send_blocking(0).unwrap();
                let mut last = 0;
                for i in 0..ROUNDS {
                    last = d_rx.recv_blocking().unwrap();
                    if i + 1 < ROUNDS {
                        a_tx.send_blocking(last + 1).unwrap();
                    }
                }
                last
            });
            let last = common::thread_within(th, 25);
            assert_eq!(last, 4 * ROUNDS - 1, "the ring lost or duplicated a step");
            join_within(t1, 5).unwrap();
            join_within(f, 5).unwrap();
            join_within(t2, 5).unwrap();
            stop.store(true, SeqCst);
            join_within(y_task, 5).unwrap();
            join_within(y_fiber, 5).unwrap();
            join_within(y_wait, 5).unwrap();
            common::drop_within(rt, Duration::from_secs(10), "after the ring");
        }
    });
}

/// The same class elsewhere: waits on workers on `weft::sync` primitives and channels
/// woken from plain threads (each completion stores a reason then wakes; the waiter's
/// node is reset and re-registered), with self-woken waits yielding beside them.
#[test]
fn sync_waits_on_workers_woken_from_threads() {
    watchdog(30, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let stop = Arc::new(AtomicBool::new(false));
            let s1 = stop.clone();
            let y = rt.spawn(async move {
                while !s1.load(SeqCst) {
                    weft::task::yield_now().await;
                }
            });
            // Notify: a thread counts and notifies, tasks wait for each count.
            const N: usize = 400;
            let notify = Arc::new(weft::sync::Notify::new());
            let count = Arc::new(AtomicUsize::new(0));
            let acks = Arc::new(AtomicUsize::new(0));
            let (n2, c2, a2) = (notify.clone(), count.clone(), acks.clone());
            let waiter = rt.spawn(async move {
                for k in 1..=N {
                    while c2.load(SeqCst) < k {
                        weft::wait(n2.notified());
                    }
                    a2.store(k, SeqCst);
                }
            });
            let (n3, c3, a3) = (notify.clone(), count.clone(), acks.clone());
            let notifier = std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(20);
                for k in 1..=N {
                    c3.store(k, SeqCst);
                    n3.notify_one();
                    while a3.load(SeqCst) < k {
                        assert!(Instant::now() < deadline, "notify wait hung at {k}");
                        std::thread::yield_now();
                    }
                }
            });
            // Mutex: plain threads and tasks increment under `weft::sync::Mutex`.
            let m = Arc::new(weft::sync::Mutex::new(0usize));
            let mut ths = Vec::new();
            for _ in 0..2 {
                let m = m.clone();
                ths.push(std::thread::spawn(move || {
                    for _ in 0..300 {
                        *m.lock_blocking() += 1;
                    }
                }));
            }
            let tasks: Vec<_> = (0..3)
                .map(|_| {
                    let m = m.clone();
                    rt.spawn(async move {
                        for i in 0..200 {
                            let mut g = weft::wait(m.lock());
                            *g += 1;
                            if i % 7 == 0 {
                                drop(g);
                                weft::task::yield_now().await;
                            }
                        }
                    })
                })
                .collect();
            // Unbounded channel: a thread sends, a task receives by `weft::wait`.
            let (tx, rx) = weft::chan::unbounded::<usize>();
            let sender = std::thread::spawn(move || {
                for i in 0..2000 {
                    tx.send_blocking(i).unwrap();
                    if i % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            });
            let receiver = rt.spawn(async move {
                let mut sum = 0usize;
                for _ in 0..2000 {
                    sum += weft::wait(rx.recv()).unwrap();
                }
                sum
            });
            common::thread_within(notifier, 25);
            join_within(waiter, 5).unwrap();
            for t in ths {
                common::thread_within(t, 25);
            }
            for t in tasks {
                join_within(t, 25).unwrap();
            }
            assert_eq!(*m.lock_blocking(), 2 * 300 + 3 * 200);
            common::thread_within(sender, 25);
            assert_eq!(join_within(receiver, 25).unwrap(), (0..2000).sum::<usize>());
            stop.store(true, SeqCst);
            join_within(y, 5).unwrap();
            common::drop_within(rt, Duration::from_secs(10), "after sync waits");
        }
    });
}

/// How a task on a one-worker runtime busy-waits for a flag that another task sets
/// after a timer: a self-waking `weft::wait`, a loop of `fiber::yield_now` off a fiber
/// (the worker's yield), a loop of expired `recv_timeout(ZERO)`, and, for comparison,
/// a fiber's `yield_now` loop. Returns whether each saw the flag within `limit`.
fn busy_wait_for_a_timer(how: u32, limit: Duration) -> bool {
    let rt = rt(1);
    let flag = Arc::new(AtomicBool::new(false));
    let f2 = flag.clone();
    let body = move || {
        let f3 = f2.clone();
        weft::spawn(async move {
            weft::time::sleep(Duration::from_millis(2)).await;
            f3.store(true, SeqCst);
        });
        let start = Instant::now();
        match how {
            0 => weft::wait(std::future::poll_fn(|cx| {
                if f2.load(SeqCst) || start.elapsed() > limit {
                    Poll::Ready(())
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })),
            1 | 3 => {
                while !f2.load(SeqCst) && start.elapsed() < limit {
                    weft::fiber::yield_now();
                }
            }
            _ => {
                let (_tx, rx) = weft::chan::bounded::<()>(1);
                while !f2.load(SeqCst) && start.elapsed() < limit {
                    let _ = rx.recv_timeout(Duration::ZERO);
                }
            }
        }
        f2.load(SeqCst)
    };
    let saw = if how == 3 {
        join_within(fiber_on(&rt, body), 20).unwrap()
    } else {
        join_within(rt.spawn(async move { body() }), 20).unwrap()
    };
    assert!(flag.load(SeqCst) || !saw);
    common::drop_within(rt, Duration::from_secs(10), "after a busy wait");
    saw
}

/// Found in review (fixed: `Core::fire_due_for_a_busy_wait`): on a one-worker runtime a task whose blocked `weft::wait` wakes itself on
/// every poll (or loops on `fiber::yield_now` / expired timed waits outside a fiber)
/// never lets a due timer fire while nothing else is ready: the worker neither parks
/// (where timers fire) nor runs a task (whose count fires them every 16 polls), and
/// `yield_to_others` does not yield when nothing is ready. The flag set after a 2 ms
/// sleep is never seen (each case gives up after 3 s). A fiber's `yield_now` loop does
/// see it.
#[test]
fn self_waking_waits_for_a_timer_on_one_worker() {
    watchdog(30, || {
        let limit = Duration::from_secs(3);
        let fiber = busy_wait_for_a_timer(3, limit);
        let results: Vec<(&str, bool)> = vec![
            (
                "self-waking weft::wait in a task",
                busy_wait_for_a_timer(0, limit),
            ),
            (
                "fiber::yield_now loop in a task",
                busy_wait_for_a_timer(1, limit),
            ),
            (
                "expired recv_timeout loop in a task",
                busy_wait_for_a_timer(2, limit),
            ),
        ];
        assert!(fiber, "a fiber's yield_now loop never saw the timer");
        let missed: Vec<_> = results
            .iter()
            .filter(|(_, s)| !s)
            .map(|(w, _)| *w)
            .collect();
        assert!(
            missed.is_empty(),
            "never saw a 2 ms timer fire within 3 s: {missed:?}"
        );
    });
}

/// Found in review, fixed (the same on two workers): two tasks, each in a self-waking `weft::wait`
/// for a flag set after its own 2 ms sleep, keep both workers spinning, and neither
/// timer fires (each gives up after 3 s).
#[test]
fn self_waking_waits_for_timers_on_two_busy_workers() {
    watchdog(30, || {
        let rt = rt(2);
        let limit = Duration::from_secs(3);
        let hs: Vec<_> = (0..2)
            .map(|_| {
                rt.spawn(async move {
                    let flag = Arc::new(AtomicBool::new(false));
                    let f3 = flag.clone();
                    weft::spawn(async move {
                        weft::time::sleep(Duration::from_millis(2)).await;
                        f3.store(true, SeqCst);
                    });
                    let start = Instant::now();
                    weft::wait(std::future::poll_fn(|cx| {
                        if flag.load(SeqCst) || start.elapsed() > limit {
                            Poll::Ready(())
                        } else {
                            cx.waker().wake_by_ref();
                            Poll::Pending
                        }
                    }));
                    flag.load(SeqCst)
                })
            })
            .collect();
        let saw: Vec<bool> = hs
            .into_iter()
            .map(|h| join_within(h, 20).unwrap())
            .collect();
        common::drop_within(rt, Duration::from_secs(10), "after two busy waits");
        assert!(
            saw.iter().all(|s| *s),
            "a 2 ms timer never fired within 3 s: {saw:?}"
        );
    });
}

/// A task whose self-waking wait is all its worker has left (the task behind the timer
/// already asleep on it): the wait's yield finds nothing ready and fires the due timer
/// itself (`Core::fire_due_for_a_busy_wait`), so the flag the timer's task sets is seen.
#[test]
fn a_self_waking_wait_alone_on_its_worker_fires_a_due_timer() {
    watchdog(30, || {
        let rt = rt(1);
        let flag = Arc::new(AtomicBool::new(false));
        let f2 = flag.clone();
        let sleeper = rt.spawn(async move {
            weft::time::sleep(Duration::from_millis(30)).await;
            f2.store(true, SeqCst);
        });
        // The sleeper has registered its timer and the worker is idle.
        std::thread::sleep(Duration::from_millis(10));
        let waiter = rt.spawn(async move {
            let start = Instant::now();
            weft::wait(std::future::poll_fn(|cx| {
                if flag.load(SeqCst) || start.elapsed() > Duration::from_secs(3) {
                    Poll::Ready(flag.load(SeqCst))
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }))
        });
        assert!(
            join_within(waiter, 20).unwrap(),
            "a 30 ms timer never fired while a self-waking wait kept its worker"
        );
        join_within(sleeper, 20).unwrap();
        common::drop_within(rt, Duration::from_secs(10), "after a lone busy wait");
    });
}
