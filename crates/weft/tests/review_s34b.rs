//! Review s34b of 2bdf836 (a blocking `lock_blocking` / `read_blocking` /
//! `write_blocking` / `acquire_blocking` / `acquire_many_blocking` on a fiber whose
//! worker has other work ready yields to it and retries for up to 20 us before it
//! queues: `sync::semaphore::try_outside_line` -> `fiber::wait::spin_yield_try`) and
//! of 5ee3292 (the fairness check requeues the worker's deferred list; weft's
//! thread-locals are read through `#[inline(never)]` accessors).
//!
//! Attacks from safe code: aborts of fibers while they yield inside a blocking acquire,
//! runtime drops and `shutdown_timeout`s while fibers yield-spin, `Semaphore::close`
//! while they do, fairness against tight re-lockers and FIFO order of the line, mixed
//! stress (threads, pinned and migrating fibers, tasks; with and without CPU burners),
//! yields beside ping-pong pairs, `task::yield_now` loops against the injection queue,
//! the lock-depth diagnostics, and fork-join inside fibers and tasks that also lock.
//!
//! Every fiber spawned with [`migrating`] honours the migration contract: only `Send`
//! data across its waits, no thread-local reads in its functions that wait (atomics and
//! `Instant`s only; fork-join is called from `#[inline(never)]` helpers that do not
//! wait). Every test runs under a watchdog and every loop is bounded.
//!
//! Run: `cargo test -p weft --test review_s34b -- --test-threads=2` (and `--release`).
//!
//! What it found:
//! * `fiber_woken_from_a_thread_runs_beside_a_*_pair_and_a_yielder`,
//!   `fiber_spawned_from_a_thread_runs_beside_a_fiber_pair_and_a_yielder`,
//!   `lockers_yielders_and_sleepers_progress_beside_a_*_pair` (a bug of 5ee3292,
//!   fixed): on a worker where two fibers or tasks wake each other and one fiber
//!   loops on `yield_now`, a fiber woken (or spawned) from another thread never runs.
//!   `next_task_slow`'s fairness branch now calls `requeue_deferred` first, which puts
//!   the yielded pinned fiber into the pinned queue, and `next_pinned` refills from
//!   the inbox only when the pinned queue is empty, which it then never is at that
//!   point; the other paths reach `next_pinned` only when the LIFO slot and ring are
//!   empty, which the pair never lets happen. Before 5ee3292 the pinned queue was empty
//!   there (the yielder stayed in the deferred list) and the inbox was drained. With
//!   2bdf836 a lock handed to such a fiber by a plain thread's release stays with it,
//!   so the thread waits too. Fixed: the fairness check drains the inbox into the
//!   pinned queue (`Core::pull_inbox`) before `requeue_deferred`.
//! * Test mistakes fixed on the way: drop counters made inside fiber bodies (a fiber
//!   aborted before it starts never made one); a writer's half-written value left by an
//!   abort (now restored on unwind); the FIFO check ran before every waiter had queued
//!   (now it waits until the dump shows it parked on the lock) and counted a semaphore's
//!   simultaneous holders as an order; lockers that never waited hogged the one worker;
//!   and join halves waiting for a lock that other fibers hold across waits, which can
//!   bury a half under its own waiter (a wait inside a join runs other work on top of
//!   it in place, as documented on `weft::wait`).

mod common;
use common::fiber_on as spawn_pinned;
use common::migrating::spawn_migrating;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{counter, drop_within, join_within, load, on, spin_for, watchdog, DropCounter, Rng};
use weft::sync::{Mutex, RwLock, Semaphore};
use weft::{Builder, JoinHandle, Runtime};

// ---------------------------------------------------------------------------------
// Helpers.

/// A runtime of `n` default workers and no interactive pool.
fn rt_of(n: usize) -> Runtime {
    Builder::new()
        .worker_threads(n)
        .interactive_threads(0)
        .build()
        .unwrap()
}

/// `n` pinned fibers that keep their worker's ready queue non-empty: each spins 20 us
/// and yields, until `stop`. Returns their handles (each gives its count of yields).
fn yielders(rt: &Runtime, n: usize, stop: &Arc<AtomicBool>) -> Vec<JoinHandle<u64>> {
    (0..n)
        .map(|_| {
            let stop = stop.clone();
            spawn_pinned(rt, move || {
                let mut k = 0u64;
                while !stop.load(SeqCst) {
                    spin_for(Duration::from_micros(20));
                    weft::fiber::yield_now();
                    k += 1;
                }
                k
            })
        })
        .collect()
}

fn join_all<T: Send + 'static>(hs: Vec<JoinHandle<T>>, secs: u64) -> Vec<T> {
    hs.into_iter()
        .map(|h| join_within(h, secs).unwrap())
        .collect()
}

/// Joins `h` within `secs`; prints `rt`'s dump and `what` on a timeout.
fn join_or_dump<T: Send + 'static>(
    rt: &Runtime,
    h: JoinHandle<T>,
    secs: u64,
    what: impl Fn() -> String,
) -> Result<T, weft::JoinError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.join());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("HANG DUMP ({}):\n{:?}", what(), rt.dump());
            panic!(
                "hang: a weft task or fiber did not finish in time ({})",
                what()
            );
        }
    }
}

const PERMITS: usize = 3;

/// Which blocking acquire a test exercises.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lk {
    Mutex,
    Write,
    Read,
    /// `acquire_many_blocking(1 or 2)` of [`PERMITS`].
    Sem,
}

/// One lock of each kind, with counters that check them.
struct Locks {
    m: Mutex<u64>,
    rw: RwLock<(u64, u64)>,
    sem: Semaphore,
    /// Holders of `m` (at most 1), writers of `rw` (at most 1, and no reader beside),
    /// readers of `rw`, permits of `sem` held (at most `PERMITS`).
    m_in: AtomicUsize,
    w_in: AtomicUsize,
    r_in: AtomicUsize,
    s_in: AtomicUsize,
    /// Increments made under `m` and `rw`'s write lock; sections completed under each.
    m_done: AtomicU64,
    w_done: AtomicU64,
    r_done: AtomicU64,
    s_done: AtomicU64,
    /// Violations seen (a message each).
    bad: std::sync::Mutex<Vec<String>>,
}

/// Decrements its counter when dropped (also when an abort unwinds a section).
struct Inside<'a>(&'a AtomicUsize, usize);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, SeqCst);
    }
}

impl Locks {
    fn new() -> Arc<Locks> {
        Arc::new(Locks {
            m: Mutex::new(0),
            rw: RwLock::new((0, 0)),
            sem: Semaphore::new(PERMITS),
            m_in: AtomicUsize::new(0),
            w_in: AtomicUsize::new(0),
            r_in: AtomicUsize::new(0),
            s_in: AtomicUsize::new(0),
            m_done: AtomicU64::new(0),
            w_done: AtomicU64::new(0),
            r_done: AtomicU64::new(0),
            s_done: AtomicU64::new(0),
            bad: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn violation(&self, what: String) {
        self.bad.lock().unwrap().push(what);
    }

    fn enter<'a>(&self, c: &'a AtomicUsize, n: usize, cap: usize, what: &str) -> Inside<'a> {
        let now = c.fetch_add(n, SeqCst) + n;
        if now > cap {
            self.violation(format!("{what}: {now} inside (at most {cap})"));
        }
        Inside(c, n)
    }

    /// Takes the lock `k` the blocking way (`n` permits for `Sem`), runs `body` under it
    /// and counts the section; `false` for a closed semaphore.
    fn hold(&self, k: Lk, n: u32, body: impl FnOnce()) -> bool {
        match k {
            Lk::Mutex => {
                let mut g = self.m.lock_blocking();
                let _in = self.enter(&self.m_in, 1, 1, "mutex");
                let before = *g;
                body();
                // No suspension point between these two: an abort takes both or neither.
                *g = before + 1;
                self.m_done.fetch_add(1, SeqCst);
            }
            Lk::Write => {
                let mut g = self.rw.write_blocking();
                let _in = self.enter(&self.w_in, 1, 1, "writer");
                if self.r_in.load(SeqCst) != 0 {
                    self.violation("a reader beside a writer".into());
                }
                let before = *g;
                g.0 += 1;
                // Half-written while `body` runs (a reader beside it would see a torn
                // value); an abort that unwinds `body` puts the value back (resuming the
                // unwind, as a fiber's cancellation requires).
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                    *g = before;
                    std::panic::resume_unwind(p);
                }
                g.1 += 1;
                self.w_done.fetch_add(1, SeqCst);
            }
            Lk::Read => {
                let g = self.rw.read_blocking();
                let _in = self.enter(&self.r_in, 1, usize::MAX, "reader");
                if self.w_in.load(SeqCst) != 0 {
                    self.violation("a writer beside a reader".into());
                }
                body();
                if g.0 != g.1 {
                    self.violation(format!("torn read {:?}", *g));
                }
                self.r_done.fetch_add(1, SeqCst);
            }
            Lk::Sem => {
                let p = match self.sem.acquire_many_blocking(n) {
                    Ok(p) => p,
                    Err(_) => return false,
                };
                assert_eq!(p.num_permits(), n as usize);
                let _in = self.enter(&self.s_in, n as usize, PERMITS, "semaphore");
                body();
                self.s_done.fetch_add(1, SeqCst);
            }
        }
        true
    }

    /// Takes the whole of `k`'s lock (all permits; the write lock for `Read`) from a
    /// plain thread, for `hold` of time, counting it as a section.
    fn hold_exclusive(&self, k: Lk, hold: Duration) {
        match k {
            Lk::Sem => {
                self.hold(k, PERMITS as u32, || spin_for(hold));
            }
            Lk::Read => {
                self.hold(Lk::Write, 1, || spin_for(hold));
            }
            _ => {
                self.hold(k, 1, || spin_for(hold));
            }
        }
    }

    /// After every user is gone: nothing held, nothing lost, the counts exact.
    fn check_quiet(&self, what: &str) {
        let bad = self.bad.lock().unwrap();
        assert!(
            bad.is_empty(),
            "{what}: violations {:?}",
            &bad[..bad.len().min(10)]
        );
        let m = *self
            .m
            .try_lock()
            .unwrap_or_else(|_| panic!("{what}: the mutex is still held"));
        assert_eq!(m, self.m_done.load(SeqCst), "{what}: mutex increments");
        let w = *self
            .rw
            .try_write()
            .unwrap_or_else(|_| panic!("{what}: the rwlock is still held"));
        assert_eq!(w.0, w.1, "{what}: torn rwlock value");
        assert_eq!(w.0, self.w_done.load(SeqCst), "{what}: rwlock increments");
        assert_eq!(
            self.sem.available_permits(),
            PERMITS,
            "{what}: semaphore permits kept or lost"
        );
        assert_eq!(load(&self.m_in), 0, "{what}: mutex holders left");
        assert_eq!(load(&self.w_in), 0, "{what}: writers left");
        assert_eq!(load(&self.r_in), 0, "{what}: readers left");
        assert_eq!(load(&self.s_in), 0, "{what}: permits counted as held");
    }
}

/// A plain thread that takes `k`'s lock exclusively for `hold`, lets it go for `gap`,
/// again, until `stop`.
fn holder_thread(
    locks: &Arc<Locks>,
    k: Lk,
    hold: Duration,
    gap: Duration,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let (locks, stop) = (locks.clone(), stop.clone());
    std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(SeqCst) {
            locks.hold_exclusive(k, hold);
            n += 1;
            spin_for(gap);
        }
        n
    })
}

// ---------------------------------------------------------------------------------
// 1. Aborts of fibers while they yield inside a blocking acquire.

/// Waves of four fibers (pinned and migrating) take `k`'s lock three times each, one of
/// those across a `yield_now`, while a plain thread holds it 200 us at a time and two
/// yielder fibers keep the workers' queues busy (so a failed attempt takes the yield
/// path); two of each wave are aborted after a random 0-400 us. Every fiber ends (done
/// or cancelled), each drop counter once, the lock is free and its counts exact
/// afterwards, and six more fibers and a task still get through.
fn abort_while_yield_spinning(k: Lk) {
    watchdog(30, move || {
        let (mut rng, seed) = Rng::seeded("REVIEW_S34B_SEED");
        let rt = rt_of(2);
        let locks = Locks::new();
        let stop = Arc::new(AtomicBool::new(false));
        let ys = yielders(&rt, 2, &stop);
        let holder = holder_thread(
            &locks,
            k,
            Duration::from_micros(200),
            Duration::from_micros(30),
            &stop,
        );
        let drops = counter();
        let started = counter();
        let mut hs = Vec::new();
        const WAVES: usize = 150;
        for wave in 0..WAVES {
            let mut wave_hs = Vec::new();
            for j in 0..4 {
                let (locks, started) = (locks.clone(), started.clone());
                // Made here: a fiber aborted before it started drops it too.
                let d = DropCounter(drops.clone());
                let n = 1 + (j % 2) as u32;
                let body = move || {
                    let _d = d;
                    started.fetch_add(1, SeqCst);
                    for r in 0..3 {
                        locks.hold(k, n, || {
                            if r == 1 {
                                weft::fiber::yield_now();
                            }
                        });
                    }
                };
                wave_hs.push(if (wave + j) % 2 == 0 {
                    spawn_pinned(&rt, body)
                } else {
                    spawn_migrating(&rt, body)
                });
            }
            // Most aborts should find the fibers started (spinning, yielding, queued
            // or holding), not still waiting for their first poll.
            let t = Instant::now();
            while load(&started) < 4 * (wave + 1) && t.elapsed() < Duration::from_millis(50) {
                std::hint::spin_loop();
            }
            spin_for(Duration::from_micros(rng.below(300)));
            for (j, h) in wave_hs.iter().enumerate() {
                if j % 2 == wave % 2 {
                    h.abort();
                }
                if rng.below(3) == 0 {
                    spin_for(Duration::from_micros(rng.below(50)));
                }
            }
            hs.extend(wave_hs);
        }
        let n = hs.len();
        let (mut ok, mut cancelled) = (0, 0);
        for (i, h) in hs.into_iter().enumerate() {
            match join_or_dump(&rt, h, 10, || format!("{k:?} victim {i}, seed {seed}")) {
                Ok(()) => ok += 1,
                Err(e) if e.is_cancelled() => cancelled += 1,
                Err(e) => panic!("{k:?} victim {i}: {e:?} (seed {seed})"),
            }
        }
        assert_eq!(load(&drops), n, "{k:?}: drop count (seed {seed})");
        // Waiters still get through while the thread and the yielders go on.
        let mut more: Vec<JoinHandle<()>> = (0..6)
            .map(|i| {
                let locks = locks.clone();
                let body = move || {
                    locks.hold(k, 1 + (i % 2), || {});
                };
                if i % 2 == 0 {
                    spawn_pinned(&rt, body)
                } else {
                    spawn_migrating(&rt, body)
                }
            })
            .collect();
        let l2 = locks.clone();
        more.push(rt.spawn(async move {
            match k {
                Lk::Mutex => {
                    let mut g = l2.m.lock().await;
                    *g += 1;
                    l2.m_done.fetch_add(1, SeqCst);
                }
                Lk::Write | Lk::Read => {
                    let mut g = l2.rw.write().await;
                    g.0 += 1;
                    g.1 += 1;
                    l2.w_done.fetch_add(1, SeqCst);
                }
                Lk::Sem => drop(l2.sem.acquire_many(2).await.unwrap()),
            }
        }));
        for (i, h) in more.into_iter().enumerate() {
            join_or_dump(&rt, h, 10, || format!("{k:?} late waiter {i}, seed {seed}")).unwrap();
        }
        stop.store(true, SeqCst);
        let held = common::thread_within(holder, 10);
        join_all(ys, 10);
        locks.check_quiet(&format!("{k:?} (seed {seed})"));
        println!(
            "{k:?}: {n} fibers, {ok} done, {cancelled} cancelled, {} started; holder {held} times",
            load(&started)
        );
        drop_within(rt, Duration::from_secs(5), "abort test");
    })
}

#[test]
fn abort_fibers_yield_spinning_in_mutex_lock_blocking() {
    abort_while_yield_spinning(Lk::Mutex);
}

#[test]
fn abort_fibers_yield_spinning_in_rwlock_write_blocking() {
    abort_while_yield_spinning(Lk::Write);
}

#[test]
fn abort_fibers_yield_spinning_in_rwlock_read_blocking() {
    abort_while_yield_spinning(Lk::Read);
}

#[test]
fn abort_fibers_yield_spinning_in_semaphore_acquire_many_blocking() {
    abort_while_yield_spinning(Lk::Sem);
}

/// On one worker: a fiber yield-spins (the worker always has a yielder ready) for a
/// mutex a plain thread holds, and is aborted at once, or after 1 us to 1 ms: every
/// timing of the abort against the spin, the queueing and the hand-off.
#[test]
fn abort_a_lone_yield_spinner_at_every_timing() {
    watchdog(30, || {
        let rt = rt_of(1);
        let locks = Locks::new();
        let stop = Arc::new(AtomicBool::new(false));
        let ys = yielders(&rt, 1, &stop);
        let drops = counter();
        let mut delays: Vec<u64> = (0..40).collect();
        delays.extend([50, 70, 100, 150, 200, 300, 500, 800, 1000]);
        let mut n = 0;
        for round in 0..3 {
            for &d in &delays {
                // The thread holds the lock for 0-60 us past the abort.
                let g = locks
                    .m
                    .try_lock()
                    .expect("the mutex is free between rounds");
                let (l, dc) = (locks.clone(), DropCounter(drops.clone()));
                let h = spawn_pinned(&rt, move || {
                    let _d = dc;
                    l.hold(Lk::Mutex, 1, || {});
                });
                n += 1;
                spin_for(Duration::from_micros(d));
                h.abort();
                spin_for(Duration::from_micros((d * 7 + round * 20) % 60));
                drop(g);
                let r = join_within(h, 10);
                assert!(r.is_ok() || r.unwrap_err().is_cancelled());
                // Whatever the abort met, the lock comes back.
                let t = Instant::now();
                while locks.m.try_lock().is_err() {
                    assert!(
                        t.elapsed() < Duration::from_secs(5),
                        "the mutex stayed held after the aborted fiber ended (delay {d} us)"
                    );
                    std::thread::yield_now();
                }
            }
        }
        stop.store(true, SeqCst);
        join_all(ys, 10);
        assert_eq!(load(&drops), n);
        locks.check_quiet("lone yield-spinner");
        drop_within(rt, Duration::from_secs(5), "lone spinner");
    })
}

// ---------------------------------------------------------------------------------
// 2. Runtime drop and `shutdown_timeout` while fibers yield-spin.

#[derive(Clone, Copy, Debug)]
enum HolderKind {
    Thread,
    Task,
}

#[derive(Clone, Copy, Debug)]
enum Ending {
    Drop,
    ShutdownTimeout,
}

/// `k`'s lock is held (all of it) by a plain thread or by a task of the runtime that
/// never finishes; 12 fibers (pinned and migrating) that want it yield-spin or queue,
/// beside two yielders, on two workers; then the runtime goes. The drop returns in
/// time, every fiber's locals drop once, and once the holder lets go the lock is free
/// with its permits exact.
fn shutdown_while_yield_spinning(k: Lk, holder: HolderKind, ending: Ending) {
    watchdog(30, move || {
        let rt = rt_of(2);
        let locks = Locks::new();
        let stop = Arc::new(AtomicBool::new(false));
        let drops = counter();
        let ys: Vec<JoinHandle<u64>> = yielders(&rt, 2, &stop);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (held_tx, held_rx) = mpsc::channel::<()>();
        let thread = match holder {
            HolderKind::Thread => {
                let l = locks.clone();
                Some(std::thread::spawn(move || {
                    // One section first, then the lock held for real while the
                    // runtime goes.
                    l.hold_exclusive(k, Duration::ZERO);
                    let guard: Box<dyn Send + '_> = match k {
                        Lk::Mutex => Box::new(l.m.lock_blocking()),
                        Lk::Write | Lk::Read => Box::new(l.rw.write_blocking()),
                        Lk::Sem => Box::new(l.sem.acquire_many_blocking(PERMITS as u32).unwrap()),
                    };
                    held_tx.send(()).unwrap();
                    let _ = release_rx.recv_timeout(Duration::from_secs(20));
                    drop(guard);
                }))
            }
            HolderKind::Task => {
                let l = locks.clone();
                let d = drops.clone();
                let _task = rt.spawn(async move {
                    let _d = DropCounter(d);
                    let _guard: Box<dyn Send + '_> = match k {
                        Lk::Mutex => Box::new(l.m.lock().await),
                        Lk::Write | Lk::Read => Box::new(l.rw.write().await),
                        Lk::Sem => Box::new(l.sem.acquire_many(PERMITS as u32).await.unwrap()),
                    };
                    held_tx.send(()).unwrap();
                    std::future::pending::<()>().await
                });
                drop(release_rx);
                None
            }
        };
        held_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the holder took the lock");
        let spinning = counter();
        let mut hs = Vec::new();
        for i in 0..12 {
            let (l, d, s) = (locks.clone(), DropCounter(drops.clone()), spinning.clone());
            let body = move || {
                let _d = d;
                s.fetch_add(1, SeqCst);
                l.hold(k, 1 + (i % 2) as u32, weft::fiber::yield_now);
            };
            hs.push(if i % 3 == 0 {
                spawn_migrating(&rt, body)
            } else {
                spawn_pinned(&rt, body)
            });
        }
        let t = Instant::now();
        while load(&spinning) < 12 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(load(&spinning), 12, "every fiber started");
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        match ending {
            Ending::Drop => drop_within(rt, Duration::from_secs(5), "yield-spinners"),
            Ending::ShutdownTimeout => {
                let (tx, rx) = mpsc::channel();
                std::thread::spawn(move || {
                    rt.shutdown_timeout(Duration::from_millis(200));
                    let _ = tx.send(());
                });
                rx.recv_timeout(Duration::from_secs(5))
                    .expect("hang: shutdown_timeout did not return");
            }
        }
        let took = t.elapsed();
        for (i, h) in hs.into_iter().enumerate() {
            match join_within(h, 5) {
                Ok(()) => {}
                Err(e) => assert!(e.is_cancelled(), "fiber {i}: {e:?}"),
            }
        }
        for y in ys {
            let _ = join_within(y, 5);
        }
        stop.store(true, SeqCst);
        let expect_drops = 12 + usize::from(matches!(holder, HolderKind::Task));
        assert_eq!(
            load(&drops),
            expect_drops,
            "{k:?}/{holder:?}/{ending:?}: locals dropped"
        );
        if let Some(th) = thread {
            release_tx.send(()).unwrap();
            common::thread_within(th, 10);
        }
        // Fibers that got the lock during the shutdown counted their sections; the
        // thread's two holds count too.
        locks.check_quiet(&format!("{k:?}/{holder:?}/{ending:?}"));
        println!("{k:?}/{holder:?}/{ending:?}: the runtime went in {took:?}");
        assert!(
            took < Duration::from_secs(3),
            "the runtime took {took:?} to go"
        );
    })
}

#[test]
fn runtime_drop_while_fibers_yield_spin_for_a_threads_mutex() {
    shutdown_while_yield_spinning(Lk::Mutex, HolderKind::Thread, Ending::Drop);
}

#[test]
fn shutdown_timeout_while_fibers_yield_spin_for_a_threads_rwlock() {
    shutdown_while_yield_spinning(Lk::Write, HolderKind::Thread, Ending::ShutdownTimeout);
    shutdown_while_yield_spinning(Lk::Read, HolderKind::Thread, Ending::Drop);
}

#[test]
fn shutdown_while_fibers_yield_spin_for_a_threads_semaphore() {
    shutdown_while_yield_spinning(Lk::Sem, HolderKind::Thread, Ending::ShutdownTimeout);
    shutdown_while_yield_spinning(Lk::Sem, HolderKind::Thread, Ending::Drop);
}

/// Runtimes dropped (or shut down with a timeout) at a random moment of 1-30 ms while
/// fibers (pinned and migrating) and tasks churn on `k`'s lock against a plain thread
/// that keeps re-taking it (so the fibers are caught spinning, yielding, queued, handed
/// the lock or holding it): every local drops once and the lock comes back whole.
#[test]
fn shutdown_at_random_moments_of_lock_churn() {
    watchdog(60, || {
        let (mut rng, seed) = Rng::seeded("REVIEW_S34B_SEED");
        for round in 0..24 {
            let k = [Lk::Mutex, Lk::Write, Lk::Read, Lk::Sem][round % 4];
            let rt = rt_of(2);
            let locks = Locks::new();
            let stop = Arc::new(AtomicBool::new(false));
            let drops = counter();
            let ys = yielders(&rt, 2, &stop);
            let holder = holder_thread(
                &locks,
                k,
                Duration::from_micros(30),
                Duration::from_micros(5),
                &stop,
            );
            let mut hs = Vec::new();
            for i in 0..12u32 {
                let (l, d) = (locks.clone(), DropCounter(drops.clone()));
                let body = move || {
                    let _d = d;
                    for r in 0..100_000u32 {
                        l.hold(k, 1 + (i + r) % 2, || {
                            if r % 3 == 0 {
                                weft::fiber::yield_now();
                            }
                        });
                    }
                };
                hs.push(if i % 3 == 0 {
                    spawn_migrating(&rt, body)
                } else {
                    spawn_pinned(&rt, body)
                });
            }
            for _ in 0..2 {
                let (l, d) = (locks.clone(), DropCounter(drops.clone()));
                hs.push(rt.spawn(async move {
                    let _d = d;
                    for _ in 0..100_000u32 {
                        let _p = l.sem.acquire_many(2).await.unwrap();
                        let _in = l.enter(&l.s_in, 2, PERMITS, "semaphore (task)");
                        weft::task::yield_now().await;
                        l.s_done.fetch_add(1, SeqCst);
                    }
                }));
            }
            std::thread::sleep(Duration::from_micros(1000 + rng.below(29_000)));
            if round % 2 == 0 {
                drop_within(rt, Duration::from_secs(5), "churn");
            } else {
                let (tx, rx) = mpsc::channel();
                std::thread::spawn(move || {
                    rt.shutdown_timeout(Duration::from_millis(100));
                    let _ = tx.send(());
                });
                rx.recv_timeout(Duration::from_secs(5))
                    .expect("hang: shutdown_timeout did not return");
            }
            for (i, h) in hs.into_iter().enumerate() {
                if let Err(e) = join_within(h, 5) {
                    assert!(e.is_cancelled(), "round {round}, {i}: {e:?} (seed {seed})");
                }
            }
            stop.store(true, SeqCst);
            for y in ys {
                let _ = join_within(y, 5);
            }
            common::thread_within(holder, 10);
            assert_eq!(
                load(&drops),
                14,
                "round {round} ({k:?}): locals dropped (seed {seed})"
            );
            locks.check_quiet(&format!("churn round {round} ({k:?}, seed {seed})"));
        }
    })
}

#[test]
fn shutdown_while_fibers_yield_spin_for_a_tasks_lock() {
    for k in [Lk::Mutex, Lk::Write, Lk::Read, Lk::Sem] {
        shutdown_while_yield_spinning(k, HolderKind::Task, Ending::Drop);
        shutdown_while_yield_spinning(k, HolderKind::Task, Ending::ShutdownTimeout);
    }
}

// ---------------------------------------------------------------------------------
// 3. `Semaphore::close` while fibers yield-spin.

/// A semaphore whose permits a plain thread holds; fibers (pinned and migrating) ask
/// for 1, 2 or 3 permits the blocking way beside yielders, tasks and threads ask too;
/// after 0-5 ms it is closed: every one gets `AcquireError` within 500 ms of the close.
#[test]
fn close_while_fibers_yield_spin_answers_everyone_promptly() {
    watchdog(40, || {
        let (mut rng, seed) = Rng::seeded("REVIEW_S34B_SEED");
        for round in 0..12 {
            let rt = rt_of(if round % 3 == 0 { 1 } else { 2 });
            let stop = Arc::new(AtomicBool::new(false));
            let ys = yielders(&rt, 2, &stop);
            let sem = Arc::new(Semaphore::new(PERMITS));
            // Held from here, so nobody gets a permit before the close.
            let held = sem.clone().try_acquire_many_owned(PERMITS as u32).unwrap();
            let closed_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
            let late = |closed_at: &Arc<std::sync::Mutex<Option<Instant>>>| {
                closed_at.lock().unwrap().map(|t| t.elapsed())
            };
            let mut fibers = Vec::new();
            for i in 0..10u32 {
                let (s, c) = (sem.clone(), closed_at.clone());
                let body = move || {
                    let r = if i % 3 == 0 {
                        s.acquire_blocking().map(|p| p.num_permits())
                    } else {
                        s.acquire_many_blocking(1 + i % 3).map(|p| p.num_permits())
                    };
                    (r.is_err(), late(&c))
                };
                fibers.push(if i % 2 == 0 {
                    spawn_pinned(&rt, body)
                } else {
                    spawn_migrating(&rt, body)
                });
            }
            let tasks: Vec<_> = (0..3)
                .map(|_| {
                    let (s, c) = (sem.clone(), closed_at.clone());
                    rt.spawn(async move {
                        let r = s.acquire_many(2).await.map(|p| p.num_permits());
                        (r.is_err(), late(&c))
                    })
                })
                .collect();
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (s, c) = (sem.clone(), closed_at.clone());
                    std::thread::spawn(move || {
                        let r = s.acquire_blocking().map(|p| p.num_permits());
                        (r.is_err(), late(&c))
                    })
                })
                .collect();
            spin_for(Duration::from_micros(rng.below(5000)));
            *closed_at.lock().unwrap() = Some(Instant::now());
            sem.close();
            for (i, h) in fibers.into_iter().enumerate() {
                let (err, after) =
                    join_or_dump(&rt, h, 5, || format!("closed: fiber {i}")).unwrap();
                assert!(
                    err,
                    "round {round}, fiber {i}: got permits of a closed semaphore"
                );
                let after = after.expect("answered after the close");
                assert!(
                    after < Duration::from_millis(500),
                    "round {round}, fiber {i}: answered {after:?} after the close (seed {seed})"
                );
            }
            for h in tasks {
                let (err, after) = join_within(h, 5).unwrap();
                assert!(err);
                assert!(after.unwrap() < Duration::from_millis(500));
            }
            for t in threads {
                let (err, after) = common::thread_within(t, 5);
                assert!(err);
                assert!(after.unwrap() < Duration::from_millis(500));
            }
            drop(held);
            assert_eq!(sem.available_permits(), PERMITS, "round {round}: permits");
            stop.store(true, SeqCst);
            join_all(ys, 5);
            drop_within(rt, Duration::from_secs(5), "close");
        }
    })
}

// ---------------------------------------------------------------------------------
// 4. Fairness.

#[derive(Clone, Copy, Debug)]
enum Relocker {
    Thread,
    Task,
    Fiber,
    MigratingFiber,
}

/// A tight re-locker (a plain thread, or a task or fiber alone on a one-worker runtime
/// of its own) takes `k`'s lock, keeps it 3 us, lets it go and takes it again, for ever;
/// a fiber on another one-worker runtime, beside two yielders (so it yield-spins
/// first), takes the lock 30 times, 1 ms apart. Each take is served within 200 ms
/// (the fiber queues after 20 us of retries, and then a release hands it the lock).
fn against_a_tight_relocker(k: Lk, who: Relocker) {
    watchdog(30, move || {
        let rt_victim = rt_of(1);
        let rt_other = rt_of(1);
        let locks = Locks::new();
        let stop = Arc::new(AtomicBool::new(false));
        let ys = yielders(&rt_victim, 2, &stop);
        let relocks = Arc::new(AtomicU64::new(0));
        let relock = {
            let (l, s, r) = (locks.clone(), stop.clone(), relocks.clone());
            move || {
                while !s.load(SeqCst) {
                    l.hold_exclusive(k, Duration::from_micros(3));
                    r.fetch_add(1, SeqCst);
                }
            }
        };
        enum H {
            T(std::thread::JoinHandle<()>),
            W(JoinHandle<()>),
        }
        let relocker = match who {
            Relocker::Thread => H::T(std::thread::spawn(relock)),
            Relocker::Fiber => H::W(spawn_pinned(&rt_other, relock)),
            Relocker::MigratingFiber => H::W(spawn_migrating(&rt_other, relock)),
            Relocker::Task => {
                let (l, s, r) = (locks.clone(), stop.clone(), relocks.clone());
                H::W(rt_other.spawn(async move {
                    while !s.load(SeqCst) {
                        match k {
                            Lk::Mutex => {
                                let mut g = l.m.lock().await;
                                spin_for(Duration::from_micros(3));
                                *g += 1;
                                l.m_done.fetch_add(1, SeqCst);
                            }
                            Lk::Write | Lk::Read => {
                                let mut g = l.rw.write().await;
                                g.0 += 1;
                                spin_for(Duration::from_micros(3));
                                g.1 += 1;
                                l.w_done.fetch_add(1, SeqCst);
                            }
                            Lk::Sem => {
                                let _p = l.sem.acquire_many(PERMITS as u32).await.unwrap();
                                spin_for(Duration::from_micros(3));
                            }
                        }
                        r.fetch_add(1, SeqCst);
                    }
                }))
            }
        };
        // The re-locker is going.
        let t = Instant::now();
        while relocks.load(SeqCst) < 100 {
            assert!(t.elapsed() < Duration::from_secs(5), "the re-locker runs");
            std::thread::yield_now();
        }
        let l = locks.clone();
        let victim = spawn_pinned(&rt_victim, move || {
            let mut waits = Vec::new();
            for _ in 0..30 {
                let t = Instant::now();
                l.hold(k, 1, || {});
                waits.push(t.elapsed());
                weft::fiber::sleep(Duration::from_millis(1));
            }
            waits
        });
        let waits = join_or_dump(&rt_victim, victim, 15, || format!("{k:?} vs {who:?}")).unwrap();
        stop.store(true, SeqCst);
        match relocker {
            H::T(t) => common::thread_within(t, 10),
            H::W(h) => join_within(h, 10).unwrap(),
        }
        join_all(ys, 10);
        let worst = waits.iter().max().copied().unwrap_or_default();
        println!(
            "{k:?} vs a tight {who:?}: worst wait {worst:?}, re-locks {}",
            relocks.load(SeqCst)
        );
        locks.check_quiet(&format!("{k:?} vs {who:?}"));
        assert!(
            worst < Duration::from_millis(200),
            "{k:?} vs a tight {who:?}: a take waited {worst:?}: {waits:?}"
        );
        drop_within(rt_victim, Duration::from_secs(5), "victim");
        drop_within(rt_other, Duration::from_secs(5), "other");
    })
}

#[test]
fn fairness_mutex_against_a_tight_relocking_thread() {
    against_a_tight_relocker(Lk::Mutex, Relocker::Thread);
}

#[test]
fn fairness_mutex_against_a_tight_relocking_task() {
    against_a_tight_relocker(Lk::Mutex, Relocker::Task);
}

#[test]
fn fairness_mutex_against_tight_relocking_fibers() {
    against_a_tight_relocker(Lk::Mutex, Relocker::Fiber);
    against_a_tight_relocker(Lk::Mutex, Relocker::MigratingFiber);
}

#[test]
fn fairness_rwlock_and_semaphore_against_tight_relockers() {
    against_a_tight_relocker(Lk::Write, Relocker::Thread);
    against_a_tight_relocker(Lk::Read, Relocker::Fiber);
    against_a_tight_relocker(Lk::Sem, Relocker::Task);
    against_a_tight_relocker(Lk::Sem, Relocker::Thread);
}

/// Waiters of every kind queue one by one (each fiber or task once the dump shows it
/// parked on the lock, each thread 20 ms after it started) for `k`'s lock, held from
/// here, on a one-worker runtime whose two yielders keep the fibers on the yield path
/// first; after the release they are served exactly in the order they came.
fn fifo_order_of_the_line(k: Lk) {
    watchdog(30, move || {
        let rt = rt_of(1);
        let locks = Locks::new();
        let stop = Arc::new(AtomicBool::new(false));
        let ys = yielders(&rt, 2, &stop);
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        // Held here: the write lock for `Read` (readers all queue behind it).
        let g: Box<dyn Send + '_> = match k {
            Lk::Mutex => Box::new(locks.m.try_lock().unwrap()),
            Lk::Write | Lk::Read => Box::new(locks.rw.try_write().unwrap()),
            Lk::Sem => Box::new(locks.sem.try_acquire_many(PERMITS as u32).unwrap()),
        };
        let mut fibers = Vec::new();
        let mut tasks = Vec::new();
        let mut threads = Vec::new();
        const N: usize = 12;
        let mut parked = 0;
        for i in 0..N {
            // Semaphore: 3, 1, 3, 2, ... permits: each big request absorbs what the
            // small one before it left and holds the next small one back, so
            // exactly one holds at a time.
            let n = match k {
                Lk::Sem => [3u32, 1, 3, 2][i % 4],
                _ => 1,
            };
            let (l, o) = (locks.clone(), order.clone());
            let hold_it = move || {
                l.hold(k, n, || o.lock().unwrap().push(i));
            };
            match i % 6 {
                0 | 2 => fibers.push(spawn_pinned(&rt, hold_it)),
                1 => fibers.push(spawn_migrating(&rt, hold_it)),
                3 => threads.push(std::thread::spawn(hold_it)),
                4 => {
                    let (l, o) = (locks.clone(), order.clone());
                    tasks.push(rt.spawn(async move {
                        match k {
                            Lk::Mutex => {
                                let _g = l.m.lock().await;
                                o.lock().unwrap().push(i);
                            }
                            Lk::Write => {
                                let _g = l.rw.write().await;
                                o.lock().unwrap().push(i);
                            }
                            Lk::Read => {
                                let _g = l.rw.read().await;
                                o.lock().unwrap().push(i);
                            }
                            Lk::Sem => {
                                let _p = l.sem.acquire_many(n).await.unwrap();
                                o.lock().unwrap().push(i);
                            }
                        }
                    }));
                }
                _ => fibers.push(spawn_pinned(&rt, hold_it)),
            }
            if i % 6 == 3 {
                // A plain thread spins a few dozen us, then queues.
                std::thread::sleep(Duration::from_millis(20));
            } else {
                // Queued once parked on the lock (the yielders are never parked).
                parked += 1;
                let t = Instant::now();
                loop {
                    let d = rt.dump().to_string();
                    let n = d.matches("parked on lock").count();
                    assert!(
                        n <= parked,
                        "{k:?}: {n} parked on the lock, {parked} waiting"
                    );
                    if n == parked {
                        break;
                    }
                    assert!(
                        t.elapsed() < Duration::from_secs(5),
                        "{k:?}: waiter {i} did not queue within 5 s:\n{d}"
                    );
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        assert!(order.lock().unwrap().is_empty(), "served while held");
        drop(g);
        join_all(fibers, 10);
        join_all(tasks, 10);
        for t in threads {
            common::thread_within(t, 10);
        }
        let order = order.lock().unwrap().clone();
        stop.store(true, SeqCst);
        join_all(ys, 10);
        locks.check_quiet(&format!("FIFO {k:?}"));
        if k == Lk::Read {
            // Readers may overlap: all served, each once.
            let mut o = order.clone();
            o.sort();
            assert_eq!(o, (0..N).collect::<Vec<_>>(), "readers served: {order:?}");
        } else {
            assert_eq!(order, (0..N).collect::<Vec<_>>(), "{k:?}: the line's order");
        }
        drop_within(rt, Duration::from_secs(5), "fifo");
    })
}

#[test]
fn fifo_order_of_a_mutex_line_with_yield_spinners() {
    fifo_order_of_the_line(Lk::Mutex);
}

#[test]
fn fifo_order_of_rwlock_and_semaphore_lines_with_yield_spinners() {
    fifo_order_of_the_line(Lk::Write);
    fifo_order_of_the_line(Lk::Read);
    fifo_order_of_the_line(Lk::Sem);
}

// ---------------------------------------------------------------------------------
// 5. Mixed stress.

/// Threads, pinned and migrating fibers and tasks on one mutex, one rwlock and one
/// semaphore: exact counts, never more holders than permits, never a reader beside a
/// writer; with `burners` plain threads spinning on the CPUs meanwhile.
fn mixed_stress(workers: usize, burners: usize, rounds: u64) {
    watchdog(60, move || {
        let rt = rt_of(workers);
        let locks = Locks::new();
        let stop_burn = Arc::new(AtomicBool::new(false));
        let burn: Vec<_> = (0..burners)
            .map(|_| {
                let s = stop_burn.clone();
                std::thread::spawn(move || {
                    while !s.load(SeqCst) {
                        spin_for(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        let blocking = |id: u64| {
            let l = locks.clone();
            move || {
                for r in 0..rounds {
                    let k = [Lk::Mutex, Lk::Write, Lk::Read, Lk::Sem][((r + id) % 4) as usize];
                    l.hold(k, 1 + ((r + id) % 2) as u32, || {
                        if (r + id).is_multiple_of(5) {
                            weft::fiber::yield_now();
                        } else if (r + id).is_multiple_of(3) {
                            spin_for(Duration::from_micros(2));
                        }
                    });
                }
            }
        };
        let t0 = Instant::now();
        let mut hs: Vec<JoinHandle<()>> = Vec::new();
        for id in 0..6 {
            hs.push(spawn_migrating(&rt, blocking(id)));
        }
        for id in 6..12 {
            hs.push(spawn_pinned(&rt, blocking(id)));
        }
        for id in 12..16u64 {
            let l = locks.clone();
            hs.push(rt.spawn(async move {
                for r in 0..rounds {
                    match (r + id) % 4 {
                        0 => {
                            let mut g = l.m.lock().await;
                            let _in = l.enter(&l.m_in, 1, 1, "mutex (task)");
                            let b = *g;
                            if r % 5 == 0 {
                                weft::task::yield_now().await;
                            }
                            *g = b + 1;
                            l.m_done.fetch_add(1, SeqCst);
                        }
                        1 => {
                            let mut g = l.rw.write().await;
                            let _in = l.enter(&l.w_in, 1, 1, "writer (task)");
                            g.0 += 1;
                            if r % 5 == 0 {
                                weft::task::yield_now().await;
                            }
                            g.1 += 1;
                            l.w_done.fetch_add(1, SeqCst);
                        }
                        2 => {
                            let g = l.rw.read().await;
                            let _in = l.enter(&l.r_in, 1, usize::MAX, "reader (task)");
                            if l.w_in.load(SeqCst) != 0 {
                                l.violation("a writer beside a task reader".into());
                            }
                            if g.0 != g.1 {
                                l.violation("torn read (task)".into());
                            }
                            l.r_done.fetch_add(1, SeqCst);
                        }
                        _ => {
                            let n = 1 + (r % 3) as u32;
                            let _p = l.sem.acquire_many(n).await.unwrap();
                            let _in = l.enter(&l.s_in, n as usize, PERMITS, "semaphore (task)");
                            if r % 5 == 0 {
                                weft::task::yield_now().await;
                            }
                            l.s_done.fetch_add(1, SeqCst);
                        }
                    }
                }
            }));
        }
        let threads: Vec<_> = (16..18)
            .map(|id| std::thread::spawn(blocking(id)))
            .collect();
        let state = {
            let l = locks.clone();
            move || {
                format!(
                    "mutex {:?}, rw {:?}, permits {}, in {}/{}/{}/{}",
                    l.m.try_lock().map(|g| *g).ok(),
                    l.rw.try_read().map(|g| *g).ok(),
                    l.sem.available_permits(),
                    load(&l.m_in),
                    load(&l.w_in),
                    load(&l.r_in),
                    load(&l.s_in)
                )
            }
        };
        for (i, h) in hs.into_iter().enumerate() {
            join_or_dump(&rt, h, 40, || format!("stress {i}: {}", state())).unwrap();
        }
        for t in threads {
            common::thread_within(t, 40);
        }
        let took = t0.elapsed();
        stop_burn.store(true, SeqCst);
        for b in burn {
            b.join().unwrap();
        }
        locks.check_quiet("mixed stress");
        let total = locks.m_done.load(SeqCst)
            + locks.w_done.load(SeqCst)
            + locks.r_done.load(SeqCst)
            + locks.s_done.load(SeqCst);
        assert_eq!(total, 18 * rounds, "sections completed");
        println!("mixed stress ({workers} workers, {burners} burners): {took:?}");
        drop_within(rt, Duration::from_secs(5), "stress");
    })
}

#[test]
fn mixed_stress_on_two_workers() {
    mixed_stress(2, 0, 3000);
}

#[test]
fn mixed_stress_on_three_workers_with_cpu_burners() {
    mixed_stress(3, 2, 1500);
}

#[test]
fn mixed_stress_on_one_worker() {
    mixed_stress(1, 0, 2000);
}

// ---------------------------------------------------------------------------------
// 6. Yields beside ping-pong pairs, and the injection queue.

/// On one worker, a pair of fibers (or tasks) hand a token back and forth as fast as
/// they can; beside them a pinned fiber takes a mutex and a migrating one two permits
/// of a semaphore that plain threads hold 1 ms in 2 (they yield-spin, then queue), a
/// fiber yields in a loop, a fiber sleeps 1 ms in a loop, and a task yields in a loop.
/// For 600 ms: each makes progress.
fn beside_a_pair(tasks: bool) {
    watchdog(20, move || {
        let rt = rt_of(1);
        let stop = Arc::new(AtomicBool::new(false));
        let (a_tx, a_rx) = weft::chan::bounded::<u64>(0);
        let (b_tx, b_rx) = weft::chan::bounded::<u64>(0);
        let mut pair = Vec::new();
        let mut ends = vec![(a_tx, b_rx), (b_tx, a_rx)];
        for side in 0..2 {
            let (tx, rx) = ends.remove(0);
            let stop = stop.clone();
            if tasks {
                pair.push(rt.spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(SeqCst) {
                        if side == 0 {
                            if tx.send(n).await.is_err() || rx.recv().await.is_err() {
                                break;
                            }
                        } else if rx.recv().await.is_err() || tx.send(n).await.is_err() {
                            break;
                        }
                        n += 1;
                    }
                    n
                }));
            } else {
                pair.push(spawn_pinned(&rt, move || {
                    let mut n = 0u64;
                    while !stop.load(SeqCst) {
                        if side == 0 {
                            if tx.send_blocking(n).is_err() || rx.recv_blocking().is_err() {
                                break;
                            }
                        } else if rx.recv_blocking().is_err() || tx.send_blocking(n).is_err() {
                            break;
                        }
                        n += 1;
                    }
                    n
                }));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
        let locks = Locks::new();
        let holder = holder_thread(
            &locks,
            Lk::Mutex,
            Duration::from_millis(1),
            Duration::from_millis(1),
            &stop,
        );
        let sem_holder = holder_thread(
            &locks,
            Lk::Sem,
            Duration::from_millis(1),
            Duration::from_millis(1),
            &stop,
        );
        // Each takes its lock (a failed attempt yield-spins beside the pair, then
        // queues), then sleeps 200 us: neither keeps the worker.
        let (l, s) = (locks.clone(), stop.clone());
        let locker = spawn_pinned(&rt, move || {
            common::time_rounds(
                &s,
                || l.hold(Lk::Mutex, 1, || {}),
                || weft::fiber::sleep(Duration::from_micros(200)),
            )
        });
        let (l, s) = (locks.clone(), stop.clone());
        let mig_locker = spawn_migrating(&rt, move || {
            common::time_rounds(
                &s,
                || l.hold(Lk::Sem, 2, || {}),
                || weft::fiber::sleep(Duration::from_micros(200)),
            )
        });
        let s = stop.clone();
        let yielder = spawn_pinned(&rt, move || {
            let mut n = 0u64;
            while !s.load(SeqCst) {
                weft::fiber::yield_now();
                n += 1;
            }
            n
        });
        let s = stop.clone();
        let sleeper = spawn_pinned(&rt, move || {
            common::time_rounds(&s, || weft::fiber::sleep(Duration::from_millis(1)), || {})
        });
        let s = stop.clone();
        let task_yielder = rt.spawn(async move {
            let mut n = 0u64;
            while !s.load(SeqCst) {
                weft::task::yield_now().await;
                n += 1;
            }
            n
        });
        std::thread::sleep(Duration::from_millis(600));
        stop.store(true, SeqCst);
        let what = if tasks { "task pair" } else { "fiber pair" };
        let (ln, lw) = join_or_dump(&rt, locker, 10, || format!("{what}: locker")).unwrap();
        let (mn, mw) = join_or_dump(&rt, mig_locker, 10, || format!("{what}: sem")).unwrap();
        let yn = join_or_dump(&rt, yielder, 10, || format!("{what}: yielder")).unwrap();
        let (sn, sw) = join_or_dump(&rt, sleeper, 10, || format!("{what}: sleeper")).unwrap();
        let tn = join_or_dump(&rt, task_yielder, 10, || format!("{what}: task")).unwrap();
        let rounds = join_all(pair, 10);
        let held = common::thread_within(holder, 10);
        let sem_held = common::thread_within(sem_holder, 10);
        println!(
            "{what}: rounds {rounds:?}; locker {ln} (worst {lw:?}), sem {mn} (worst {mw:?}), \
             yielder {yn}, sleeper {sn} (worst {sw:?}), task {tn}; holders {held}, {sem_held}"
        );
        locks.check_quiet(what);
        assert!(ln >= 20, "{what}: the locker took the mutex {ln} times");
        assert!(
            mn >= 20,
            "{what}: the semaphore user got permits {mn} times"
        );
        assert!(
            yn >= 100 && tn >= 100,
            "{what}: yields {yn} (fiber), {tn} (task)"
        );
        assert!(sn >= 20, "{what}: the sleeper ran {sn} times");
        assert!(
            lw < Duration::from_millis(200)
                && mw < Duration::from_millis(200)
                && sw < Duration::from_millis(200),
            "{what}: worst lock waits {lw:?}, {mw:?}, worst sleep {sw:?}"
        );
        drop_within(rt, Duration::from_secs(5), what);
    })
}

#[test]
fn lockers_yielders_and_sleepers_progress_beside_a_fiber_pair() {
    beside_a_pair(false);
}

#[test]
fn lockers_yielders_and_sleepers_progress_beside_a_task_pair() {
    beside_a_pair(true);
}

/// On one worker every task (and a fiber) yields in a loop; tasks and fibers spawned
/// from outside meanwhile all run, promptly.
#[test]
fn yield_loops_let_the_injection_queue_drain() {
    watchdog(30, || {
        let rt = rt_of(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut loops = Vec::new();
        for _ in 0..8 {
            let s = stop.clone();
            loops.push(rt.spawn(async move {
                let mut n = 0u64;
                while !s.load(SeqCst) {
                    weft::task::yield_now().await;
                    n += 1;
                }
                n
            }));
        }
        let ys = yielders(&rt, 2, &stop);
        // And a fiber that yield-spins on a mutex a thread keeps.
        let m = Arc::new(Mutex::new(0u64));
        let g = m.clone().try_lock_owned().unwrap();
        let m2 = m.clone();
        let spinner = spawn_pinned(&rt, move || {
            *m2.lock_blocking() += 1;
        });
        std::thread::sleep(Duration::from_millis(20));
        let ran = counter();
        let t0 = Instant::now();
        let mut worst = Duration::ZERO;
        for _ in 0..20 {
            let t = Instant::now();
            let hs: Vec<JoinHandle<()>> = (0..100)
                .map(|i| {
                    let r = ran.clone();
                    if i % 10 == 0 {
                        spawn_pinned(&rt, move || {
                            r.fetch_add(1, SeqCst);
                        })
                    } else {
                        rt.spawn(async move {
                            r.fetch_add(1, SeqCst);
                        })
                    }
                })
                .collect();
            for h in hs {
                join_within(h, 10).unwrap();
            }
            worst = worst.max(t.elapsed());
        }
        drop(g);
        join_within(spinner, 10).unwrap();
        stop.store(true, SeqCst);
        let counts = join_all(loops, 10);
        join_all(ys, 10);
        println!(
            "2000 spawned in {:?}, worst batch {worst:?}; yield loops {counts:?}",
            t0.elapsed()
        );
        assert_eq!(load(&ran), 2000);
        assert_eq!(*m.try_lock().unwrap(), 1);
        assert!(
            worst < Duration::from_secs(2),
            "a batch of 100 took {worst:?}"
        );
        for c in counts {
            assert!(c >= 10, "a yield loop ran {c} times");
        }
        drop_within(rt, Duration::from_secs(5), "injection");
    })
}

// ---------------------------------------------------------------------------------
// 7. Lock-depth diagnostics (child processes with `WEFT_DEBUG_LOCKS=1`).

const CHILD: &str = "REVIEW_S34B_CHILD";

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "spinners_silent" => child_spinners_silent(),
        "ref_beside_spinners" => child_ref_beside_spinners(),
        "ref_holder_locks" => child_ref_holder_locks(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str) -> common::child::Output {
    common::child::run_case_with_lock_checks(CHILD, case)
}

/// Fibers hold weft mutex guards (fine across waits) while they yield-spin for a
/// second lock a plain thread keeps, beside yielders, and release it with others
/// queued: nothing holds a `watch::Ref`.
fn child_spinners_silent() {
    let rt = rt_of(1);
    let locks = Locks::new();
    let other = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let ys = yielders(&rt, 2, &stop);
    let holder = holder_thread(
        &locks,
        Lk::Mutex,
        Duration::from_micros(300),
        Duration::from_micros(50),
        &stop,
    );
    let hs: Vec<_> = (0..6)
        .map(|i| {
            let (l, o) = (locks.clone(), other.clone());
            spawn_pinned(&rt, move || {
                for _ in 0..50 {
                    let _outer = o.lock_blocking();
                    l.hold(if i % 2 == 0 { Lk::Mutex } else { Lk::Sem }, 1, || {});
                }
            })
        })
        .collect();
    join_all(hs, 10);
    stop.store(true, SeqCst);
    common::thread_within(holder, 10);
    join_all(ys, 10);
}

/// A fiber holds a `watch::Ref` across a sleep (a report, of it), while fibers with no
/// `Ref` on the same worker yield-spin for a mutex and release it with waiters queued
/// (wakes flushed): only the borrower is reported.
fn child_ref_beside_spinners() {
    let rt = rt_of(1);
    let locks = Locks::new();
    let stop = Arc::new(AtomicBool::new(false));
    let ys = yielders(&rt, 1, &stop);
    let holder = holder_thread(
        &locks,
        Lk::Mutex,
        Duration::from_micros(300),
        Duration::from_micros(50),
        &stop,
    );
    let (tx, rx) = weft::sync::watch::channel(1u32);
    let borrower = on(&rt, move || {
        weft::fiber::Builder::new().name("borrower").spawn(move || {
            for _ in 0..5 {
                let r = rx.borrow();
                weft::fiber::sleep(Duration::from_millis(2));
                assert_eq!(*r, 1);
            }
        })
    });
    let hs: Vec<_> = (0..6)
        .map(|_| {
            let l = locks.clone();
            on(&rt, move || {
                weft::fiber::Builder::new().name("spinner").spawn(move || {
                    for _ in 0..100 {
                        l.hold(Lk::Mutex, 1, || {});
                    }
                })
            })
        })
        .collect();
    join_all(hs, 10);
    join_within(borrower, 10).unwrap();
    drop(tx);
    stop.store(true, SeqCst);
    common::thread_within(holder, 10);
    join_all(ys, 10);
}

/// A fiber holding a `watch::Ref` takes a mutex a plain thread keeps for 20 ms, beside
/// a yielder: it waits (yields, then parks) under the `Ref`, which is reported.
fn child_ref_holder_locks() {
    let rt = rt_of(1);
    let stop = Arc::new(AtomicBool::new(false));
    let ys = yielders(&rt, 1, &stop);
    let m = Arc::new(Mutex::new(0u64));
    let g = m.clone().try_lock_owned().unwrap();
    let (tx, rx) = weft::sync::watch::channel(1u32);
    let m2 = m.clone();
    let h = on(&rt, move || {
        weft::fiber::Builder::new()
            .name("ref-locker")
            .spawn(move || {
                let r = rx.borrow();
                *m2.lock_blocking() += *r as u64;
            })
    });
    std::thread::sleep(Duration::from_millis(20));
    drop(g);
    join_within(h, 10).unwrap();
    assert_eq!(*m.try_lock().unwrap(), 1);
    drop(tx);
    stop.store(true, SeqCst);
    join_all(ys, 10);
}

#[test]
fn yield_spinning_without_a_watch_ref_is_not_reported() {
    let out = run_child("spinners_silent");
    assert!(!out.stderr.contains("UNDER-LOCK"), "{}", out.context());
}

#[test]
fn only_the_ref_holder_is_reported_beside_yield_spinners() {
    let out = run_child("ref_beside_spinners");
    assert!(out.stderr.contains("PARK-UNDER-LOCK"), "{}", out.context());
    assert!(
        !out.stderr.contains("WAKE-FLUSH-UNDER-LOCK"),
        "{}",
        out.context()
    );
    for line in out.stderr.lines().filter(|l| l.contains("UNDER-LOCK")) {
        assert!(
            line.contains("'borrower'"),
            "a report of another fiber: {line}"
        );
    }
}

#[test]
fn a_ref_holder_waiting_for_a_mutex_is_reported() {
    let out = run_child("ref_holder_locks");
    assert!(out.stderr.contains("PARK-UNDER-LOCK"), "{}", out.context());
    assert!(out.stderr.contains("'ref-locker'"), "{}", out.context());
}

// ---------------------------------------------------------------------------------
// 8. Fork-join inside fibers and tasks that also lock.

/// A `join` whose halves take the mutex (the blocking way: a fiber inside a join may
/// not suspend, so they queue or wait as a worker would) and compute; never inlined,
/// and waits only inside the join (see `fiber_migration`'s contract).
#[inline(never)]
fn join_and_lock(l: &Locks, depth: u32) -> u64 {
    let (a, b) = weft::join(
        || {
            l.hold(Lk::Mutex, 1, || {});
            common::fib(10)
        },
        || {
            if depth > 0 {
                join_and_lock(l, depth - 1)
            } else {
                l.hold(Lk::Sem, 1, || {});
                common::fib(8)
            }
        },
    );
    a + b
}

/// A `scope` whose spawned jobs take the rwlock's write side and the semaphore.
#[inline(never)]
fn scope_and_lock(l: &Locks) -> u64 {
    let sum = AtomicU64::new(0);
    weft::scope(|s| {
        for i in 0..4u32 {
            let sum = &sum;
            s.spawn(move |_| {
                l.hold(
                    if i % 2 == 0 { Lk::Write } else { Lk::Sem },
                    1 + i % 2,
                    || {},
                );
                sum.fetch_add(common::fib(9), SeqCst);
            });
        }
    });
    sum.load(SeqCst)
}

/// Fibers (pinned and migrating) and tasks take the locks, hold the mutex across a
/// yield and a sleep, and call joins and scopes whose halves lock the same locks, while
/// a plain thread keeps taking them: exact counts, no hang.
#[test]
fn fork_join_inside_fibers_and_tasks_that_lock() {
    watchdog(40, || {
        let rt = rt_of(2);
        let locks = Locks::new();
        let stop = Arc::new(AtomicBool::new(false));
        let ys = yielders(&rt, 2, &stop);
        let holder = holder_thread(
            &locks,
            Lk::Mutex,
            Duration::from_micros(100),
            Duration::from_micros(100),
            &stop,
        );
        let holder2 = holder_thread(
            &locks,
            Lk::Sem,
            Duration::from_micros(100),
            Duration::from_micros(100),
            &stop,
        );
        // fib(10) = 55, fib(8) = 21, fib(9) = 34.
        let expect_join = |depth: u32| 55 * (depth as u64 + 1) + 21;
        const ROUNDS: u32 = 15;
        // The halves of a body's joins and scopes lock that body's own `Locks` (its
        // halves contend when stolen): a wait inside a join runs other work on top of
        // it in place (documented on `weft::wait`), so a half that waited for a lock
        // that other bodies hold across waits could be buried under one of them
        // waiting for it (found so here, first).
        let own: Vec<Arc<Locks>> = (0..10).map(|_| Locks::new()).collect();
        let body = |i: u32| {
            let (l, mine) = (locks.clone(), own[i as usize].clone());
            move || {
                let mut total = 0u64;
                for r in 0..ROUNDS {
                    l.hold(Lk::Mutex, 1, || {
                        if r % 3 == 0 {
                            weft::fiber::yield_now();
                        }
                        if r % 5 == 0 {
                            weft::fiber::sleep(Duration::from_micros(200));
                        }
                    });
                    total += join_and_lock(&mine, (i + r) % 3);
                    l.hold(Lk::Sem, 2, weft::fiber::yield_now);
                    total += scope_and_lock(&mine);
                }
                total
            }
        };
        let expected =
            |i: u32| -> u64 { (0..ROUNDS).map(|r| expect_join((i + r) % 3) + 4 * 34).sum() };
        let mut hs = Vec::new();
        for i in 0..4 {
            hs.push((i, spawn_pinned(&rt, body(i))));
        }
        for i in 4..8 {
            hs.push((i, spawn_migrating(&rt, body(i))));
        }
        for i in 8..10 {
            let f = body(i);
            // A task runs the same blocking body (it blocks its worker's loop stack).
            hs.push((i, rt.spawn(async move { f() })));
        }
        for (i, h) in hs {
            let got = join_or_dump(&rt, h, 30, || format!("fork-join body {i}")).unwrap();
            assert_eq!(got, expected(i), "body {i}'s sum");
        }
        stop.store(true, SeqCst);
        common::thread_within(holder, 10);
        common::thread_within(holder2, 10);
        join_all(ys, 10);
        locks.check_quiet("fork-join");
        for (i, o) in own.iter().enumerate() {
            o.check_quiet(&format!("fork-join body {i}'s own locks"));
        }
        drop_within(rt, Duration::from_secs(5), "fork-join");
    })
}

/// One worker: fiber A holds mutex `m1` and yield-spins for `m2`, which a plain thread
/// keeps for 30 ms; fiber B, in a `join`, wants `m1` (it may not suspend there, so its
/// worker waits in place and runs A meanwhile). Both finish.
#[test]
fn join_half_waits_for_a_lock_held_by_a_yield_spinning_fiber() {
    watchdog(20, || {
        for round in 0..20 {
            let rt = rt_of(1);
            let stop = Arc::new(AtomicBool::new(false));
            let ys = yielders(&rt, 1, &stop);
            let m1 = Arc::new(Mutex::new(0u64));
            let m2 = Arc::new(Mutex::new(0u64));
            let g2 = m2.clone().try_lock_owned().unwrap();
            let (a_in_tx, a_in_rx) = mpsc::channel();
            let (m1a, m2a) = (m1.clone(), m2.clone());
            let a = spawn_pinned(&rt, move || {
                let mut g1 = m1a.lock_blocking();
                a_in_tx.send(()).unwrap();
                let mut g2 = m2a.lock_blocking();
                *g1 += 1;
                *g2 += 1;
            });
            a_in_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let m1b = m1.clone();
            #[inline(never)]
            fn in_join(m: &Mutex<u64>) -> u64 {
                let (x, y) = weft::join(
                    || {
                        let mut g = m.lock_blocking();
                        *g += 10;
                        *g
                    },
                    || common::fib(12),
                );
                x + y
            }
            let b = spawn_pinned(&rt, move || in_join(&m1b));
            std::thread::sleep(Duration::from_millis(if round % 2 == 0 { 30 } else { 1 }));
            drop(g2);
            join_or_dump(&rt, a, 10, || format!("round {round}: A")).unwrap();
            let got = join_or_dump(&rt, b, 10, || format!("round {round}: B")).unwrap();
            assert!(got == 11 + 144 || got == 10 + 144, "round {round}: {got}");
            assert_eq!(*m1.try_lock().unwrap(), 11);
            assert_eq!(*m2.try_lock().unwrap(), 1);
            stop.store(true, SeqCst);
            join_all(ys, 10);
            drop_within(rt, Duration::from_secs(5), "join half");
        }
    })
}

// ---------------------------------------------------------------------------------
// 9. Minimal forms of what `lockers_yielders_and_sleepers_progress_beside_a_*_pair`
//    found.

/// A pair of pinned fibers ping-pongs on a one-worker runtime (`tasks`: a pair of
/// tasks); returns the stop flag and the pair's handles.
fn start_pair(rt: &Runtime, tasks: bool) -> (Arc<AtomicBool>, Vec<JoinHandle<u64>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (a_tx, a_rx) = weft::chan::bounded::<u64>(0);
    let (b_tx, b_rx) = weft::chan::bounded::<u64>(0);
    let mut ends = vec![(a_tx, b_rx), (b_tx, a_rx)];
    let mut pair = Vec::new();
    for side in 0..2 {
        let (tx, rx) = ends.remove(0);
        let stop = stop.clone();
        pair.push(if tasks {
            rt.spawn(async move {
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    if side == 0 {
                        if tx.send(n).await.is_err() || rx.recv().await.is_err() {
                            break;
                        }
                    } else if rx.recv().await.is_err() || tx.send(n).await.is_err() {
                        break;
                    }
                    n += 1;
                }
                n
            })
        } else {
            spawn_pinned(rt, move || {
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    if side == 0 {
                        if tx.send_blocking(n).is_err() || rx.recv_blocking().is_err() {
                            break;
                        }
                    } else if rx.recv_blocking().is_err() || tx.send_blocking(n).is_err() {
                        break;
                    }
                    n += 1;
                }
                n
            })
        });
    }
    std::thread::sleep(Duration::from_millis(10));
    (stop, pair)
}

/// No lock at all (5ee3292 alone): on one worker, beside a ping-pong pair and one
/// fiber that loops on `fiber::yield_now`, a fiber receives what a plain thread sends
/// it every millisecond for 500 ms. The wake from the thread puts it in the worker's inbox, which
/// `next_pinned` refills from only when the pinned queue is empty; the fairness check
/// now moves the yielder into the pinned queue just before it calls `next_pinned`, so
/// the inbox is never looked at. The receiver waits for the whole run.
fn woken_from_a_thread_beside_a_pair_and_a_yielder(tasks: bool, spawned_late: bool) {
    watchdog(20, move || {
        let rt = rt_of(1);
        let (tx, rx) = weft::chan::unbounded::<Instant>();
        let receive = move || {
            let (mut n, mut worst) = (0u64, Duration::ZERO);
            while let Ok(sent) = rx.recv_blocking() {
                worst = worst.max(sent.elapsed());
                n += 1;
            }
            (n, worst)
        };
        // Started and parked before the pair runs (each message then wakes it from
        // the thread), or spawned from outside once it runs.
        let mut receive = Some(receive);
        let mut receiver = None;
        if !spawned_late {
            receiver = Some(spawn_pinned(&rt, receive.take().unwrap()));
            std::thread::sleep(Duration::from_millis(10));
        }
        let (stop, pair) = start_pair(&rt, tasks);
        let s = stop.clone();
        let yielder = spawn_pinned(&rt, move || {
            let mut n = 0u64;
            while !s.load(SeqCst) {
                weft::fiber::yield_now();
                n += 1;
            }
            n
        });
        std::thread::sleep(Duration::from_millis(10));
        if let Some(receive) = receive.take() {
            receiver = Some(spawn_pinned(&rt, receive));
        }
        let receiver = receiver.unwrap();
        std::thread::sleep(Duration::from_millis(10));
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(500) {
            tx.send_blocking(Instant::now()).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(tx);
        // The pair and the yielder stop first: the receiver then catches up (and
        // reports how long its messages waited) instead of hanging the test.
        stop.store(true, SeqCst);
        let (n, worst) = join_or_dump(&rt, receiver, 10, || "receiver".into()).unwrap();
        let yn = join_within(yielder, 10).unwrap();
        let rounds = join_all(pair, 10);
        println!("pair rounds {rounds:?}; yielder {yn}; receiver got {n}, worst latency {worst:?}");
        drop_within(rt, Duration::from_secs(5), "inbox");
        assert!(
            worst < Duration::from_millis(100),
            "a message from a plain thread waited {worst:?} to be received ({n} received)"
        );
    })
}

#[test]
fn fiber_woken_from_a_thread_runs_beside_a_fiber_pair_and_a_yielder() {
    woken_from_a_thread_beside_a_pair_and_a_yielder(false, false);
}

#[test]
fn fiber_woken_from_a_thread_runs_beside_a_task_pair_and_a_yielder() {
    woken_from_a_thread_beside_a_pair_and_a_yielder(true, false);
}

#[test]
fn fiber_spawned_from_a_thread_runs_beside_a_fiber_pair_and_a_yielder() {
    woken_from_a_thread_beside_a_pair_and_a_yielder(false, true);
}

/// With locks only (2bdf836 with 5ee3292): on one worker beside a ping-pong pair, two
/// fibers take a mutex that a plain thread holds 1 ms in 2, sleeping 200 us after each
/// take. A failed attempt yields (the pair is ready work), which puts the fiber in the
/// deferred list for a moment; the other, queued and handed the lock by the thread's
/// release, is woken into the inbox. Passes: a yield-spinner is in the deferred list
/// too briefly to keep the inbox from being drained (contrast the yielder above, and
/// `lockers_yielders_and_sleepers_progress_beside_a_*_pair`).
fn lockers_beside_a_pair(tasks: bool) {
    watchdog(20, move || {
        let rt = rt_of(1);
        let (stop, pair) = start_pair(&rt, tasks);
        let locks = Locks::new();
        let holder = holder_thread(
            &locks,
            Lk::Mutex,
            Duration::from_millis(1),
            Duration::from_millis(1),
            &stop,
        );
        let lockers: Vec<_> = (0..2)
            .map(|_| {
                let (l, s) = (locks.clone(), stop.clone());
                spawn_pinned(&rt, move || {
                    common::time_rounds(
                        &s,
                        || l.hold(Lk::Mutex, 1, || {}),
                        || weft::fiber::sleep(Duration::from_micros(200)),
                    )
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, SeqCst);
        let got: Vec<(u64, Duration)> = lockers
            .into_iter()
            .map(|h| join_or_dump(&rt, h, 10, || "locker".into()).unwrap())
            .collect();
        let rounds = join_all(pair, 10);
        let held = common::thread_within(holder, 10);
        println!("pair rounds {rounds:?}; lockers (takes, worst wait) {got:?}; holder {held}");
        locks.check_quiet("lockers beside a pair");
        drop_within(rt, Duration::from_secs(5), "lockers");
        for (n, worst) in &got {
            assert!(
                *n >= 20 && *worst < Duration::from_millis(100),
                "a locker took the mutex {n} times, worst wait {worst:?}: {got:?}"
            );
        }
    })
}

#[test]
fn lock_blocking_fibers_progress_beside_a_fiber_pair() {
    lockers_beside_a_pair(false);
}

#[test]
fn lock_blocking_fibers_progress_beside_a_task_pair() {
    lockers_beside_a_pair(true);
}

// ---------------------------------------------------------------------------------
// 10. Blocking acquires inside futures that fibers wait on, and under shields.

/// Fibers (pinned and migrating) take the locks inside futures they `weft::wait` on
/// (the yield nests in the outer wait's poll), some inside `task::shield`s, against a
/// plain thread and yielders; half are aborted at random moments. A shielded section
/// that began always completes (the abort waits for the shield), every local drops
/// once, and the locks come back whole.
#[test]
fn blocking_acquires_inside_waited_futures_and_shields_with_aborts() {
    watchdog(40, || {
        let (mut rng, seed) = Rng::seeded("REVIEW_S34B_SEED");
        for round in 0..8 {
            let k = [Lk::Mutex, Lk::Write, Lk::Read, Lk::Sem][round % 4];
            let rt = rt_of(2);
            let locks = Locks::new();
            let stop = Arc::new(AtomicBool::new(false));
            let drops = counter();
            let ys = yielders(&rt, 2, &stop);
            let holder = holder_thread(
                &locks,
                k,
                Duration::from_micros(100),
                Duration::from_micros(20),
                &stop,
            );
            let mut hs = Vec::new();
            let mut books = Vec::new();
            for i in 0..16u32 {
                let (l, d) = (locks.clone(), DropCounter(drops.clone()));
                // (shielded sections begun, shielded sections completed)
                let book = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
                books.push(book.clone());
                let body = move || {
                    let _d = d;
                    for r in 0..200u32 {
                        let n = 1 + (i + r) % 2;
                        if r % 2 == 0 {
                            let (l, book) = (&l, &book);
                            weft::wait(weft::task::shield(async move {
                                book.0.fetch_add(1, SeqCst);
                                l.hold(k, n, || {
                                    if r % 4 == 0 {
                                        weft::fiber::yield_now();
                                    }
                                });
                                book.1.fetch_add(1, SeqCst);
                            }));
                        } else {
                            let l = &l;
                            weft::wait(async move {
                                l.hold(k, n, || {});
                            });
                        }
                    }
                };
                hs.push(if i % 2 == 0 {
                    spawn_pinned(&rt, body)
                } else {
                    spawn_migrating(&rt, body)
                });
            }
            std::thread::sleep(Duration::from_millis(2));
            for (i, h) in hs.iter().enumerate() {
                if i % 2 == round % 2 {
                    spin_for(Duration::from_micros(rng.below(500)));
                    h.abort();
                }
            }
            let mut cancelled = 0;
            for (i, h) in hs.into_iter().enumerate() {
                match join_or_dump(&rt, h, 10, || format!("round {round}: fiber {i}")) {
                    Ok(()) => {}
                    Err(e) if e.is_cancelled() => cancelled += 1,
                    Err(e) => panic!("round {round}, fiber {i}: {e:?} (seed {seed})"),
                }
            }
            for (i, b) in books.iter().enumerate() {
                assert_eq!(
                    b.0.load(SeqCst),
                    b.1.load(SeqCst),
                    "round {round} ({k:?}), fiber {i}: a shielded section began but did not \
                     complete (seed {seed})"
                );
            }
            stop.store(true, SeqCst);
            join_all(ys, 10);
            common::thread_within(holder, 10);
            assert_eq!(load(&drops), 16, "round {round}: locals dropped");
            locks.check_quiet(&format!("shields round {round} ({k:?}, seed {seed})"));
            println!("round {round} ({k:?}): {cancelled} cancelled");
            drop_within(rt, Duration::from_secs(5), "shields");
        }
    })
}
