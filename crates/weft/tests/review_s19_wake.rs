//! Review (session 19b) of the wake policy of 2f004ee / 0a89acb: a task pushed out of
//! the LIFO slot wakes a sleeper only when `local.len() x avg_task_ns > wake latency`,
//! sysmon rescues a queue behind a worker stuck in one poll after `STALE_AFTER`, and
//! moving yielded tasks wakes a peer only for a stealable one.
//!
//! Every scenario is bounded (spins and waits give up after a few seconds) and prints
//! what it measured; timing is asserted only where the gap is orders of magnitude (the
//! machine is shared and processes may be paused). The tests whose doc says "Found in
//! review" failed before the fix in `Core::evict_lifo` (`sysmon::rescues_quickly`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use weft::{Builder, Pool, Runtime};

/// How long a blocked task waits for the work it spawned before giving up.
const GIVE_UP: Duration = Duration::from_secs(3);

/// A watchdog: aborts the process if the test is not done in `limit` (a hang must
/// fail, not block the test binary).
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn new(what: &'static str, limit: Duration) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < limit {
                if d.load(SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            eprintln!("watchdog: {what} still running after {limit:?}: hang");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

#[derive(Clone, Copy, Debug)]
struct Cfg {
    workers: usize,
    /// `None`: the default (temporary workers on).
    extra: Option<usize>,
    /// `Some(None)`: `stall_report(None)`.
    stall: Option<Option<Duration>>,
    interactive: usize,
}

impl Cfg {
    fn new(workers: usize) -> Self {
        Cfg {
            workers,
            extra: None,
            stall: None,
            interactive: 0,
        }
    }
    fn no_temp(mut self) -> Self {
        self.extra = Some(0);
        self
    }
    fn no_stall(mut self) -> Self {
        self.stall = Some(None);
        self
    }
    fn no_sysmon(self) -> Self {
        self.no_temp().no_stall()
    }
    fn interactive(mut self, n: usize) -> Self {
        self.interactive = n;
        self
    }
    fn build(self) -> Runtime {
        let mut b = Builder::new();
        b.worker_threads(self.workers)
            .interactive_threads(self.interactive);
        if let Some(n) = self.extra {
            b.max_extra_workers(n);
        }
        if let Some(s) = self.stall {
            b.stall_report(s);
        }
        b.build().unwrap()
    }
}

/// Trains the workers of `pool` on tiny tasks (their average task time then says a
/// task pushed out of the LIFO slot is not worth a wake).
fn train(rt: &Runtime, pool: Pool) {
    rt.block_on(async move {
        weft::spawn_on(pool, async {
            for _ in 0..4 {
                let hs: Vec<_> = (0..5_000).map(|i| weft::spawn(async move { i })).collect();
                for h in hs {
                    h.await.unwrap();
                }
            }
        })
        .await
        .unwrap();
    });
}

#[derive(Clone, Copy, Debug)]
enum Block {
    /// A spin on an atomic.
    Spin,
    /// `std::thread::sleep` in 1 ms steps.
    Sleep,
    /// `std::sync::mpsc::Receiver::recv_timeout`.
    Mpsc,
    /// A `std::sync::Mutex` the spawned task unlocks (held by a plain thread here).
    Mutex,
}

/// A task spawns `setter` (pushed out of the LIFO slot by a second spawn), then blocks
/// its worker thread until `setter` has run, giving up after [`GIVE_UP`]. Returns how
/// long the setter took to run, `None` if it had not run by then.
fn blocked_worker_delay(rt: &Runtime, pool: Pool, block: Block) -> Option<Duration> {
    rt.block_on(async move {
        weft::spawn_on(pool, async move {
            let flag = Arc::new(AtomicBool::new(false));
            let (tx, rx) = mpsc::channel::<()>();
            let gate = Arc::new(Mutex::new(()));
            // A plain thread holds the lock until the setter tells it to let go.
            let (let_go_tx, let_go_rx) = mpsc::channel::<()>();
            let (held_tx, held_rx) = mpsc::channel::<()>();
            let holder = {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    let _g = gate.lock().unwrap();
                    held_tx.send(()).unwrap();
                    let _ = let_go_rx.recv_timeout(GIVE_UP);
                })
            };
            held_rx.recv().unwrap();
            let f = flag.clone();
            let t = Instant::now();
            let setter = weft::spawn(async move {
                f.store(true, SeqCst);
                let _ = tx.send(());
                let _ = let_go_tx.send(());
            });
            // Pushes the setter out of the LIFO slot into the stealable queue.
            let other = weft::spawn(async {});
            let ran = match block {
                Block::Spin => {
                    while !flag.load(SeqCst) && t.elapsed() < GIVE_UP {
                        std::hint::spin_loop();
                    }
                    flag.load(SeqCst)
                }
                Block::Sleep => {
                    while !flag.load(SeqCst) && t.elapsed() < GIVE_UP {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    flag.load(SeqCst)
                }
                Block::Mpsc => rx.recv_timeout(GIVE_UP).is_ok(),
                Block::Mutex => {
                    drop(gate.lock().unwrap());
                    flag.load(SeqCst)
                }
            };
            let took = t.elapsed();
            holder.join().unwrap();
            setter.await.unwrap();
            other.await.unwrap();
            ran.then_some(took)
        })
        .await
        .unwrap()
    })
}

fn fmt(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.2} ms", d.as_secs_f64() * 1e3),
        None => format!("never (gave up after {GIVE_UP:?})"),
    }
}

/// The delays of `rounds` rounds of [`blocked_worker_delay`] on a fresh runtime.
fn delays(cfg: Cfg, pool: Pool, block: Block, rounds: usize) -> Vec<Option<Duration>> {
    let rt = cfg.build();
    train(&rt, pool);
    let v: Vec<_> = (0..rounds)
        .map(|_| blocked_worker_delay(&rt, pool, block))
        .collect();
    eprintln!(
        "{cfg:?} {pool:?} {block:?}: {:?}",
        v.iter().map(|d| fmt(*d)).collect::<Vec<_>>()
    );
    v
}

/// With sysmon on (the default: temporary workers and the stall report), a task queued
/// behind a blocked worker is rescued, for every way of blocking and worker count.
/// Prints the delays (measured: see the report; 10-30 ms with temporary workers,
/// 100-200 ms with only the stall report's 100 ms period).
#[test]
fn queued_task_behind_blocked_worker_runs_with_sysmon() {
    let _w = Watchdog::new("rescue with sysmon", Duration::from_secs(300));
    for workers in [1, 2, 4] {
        for block in [Block::Spin, Block::Sleep, Block::Mpsc, Block::Mutex] {
            let v = delays(Cfg::new(workers), Pool::Default, block, 3);
            assert!(v.iter().all(Option::is_some), "{workers} {block:?}: {v:?}");
        }
    }
    // Only the stall report on (period 100 ms): slower, but it runs.
    for workers in [2, 4] {
        let v = delays(Cfg::new(workers).no_temp(), Pool::Default, Block::Sleep, 3);
        assert!(v.iter().all(Option::is_some), "{v:?}");
    }
    // Only temporary workers on.
    let v = delays(Cfg::new(2).no_stall(), Pool::Default, Block::Spin, 3);
    assert!(v.iter().all(Option::is_some), "{v:?}");
    // The interactive pool.
    let v = delays(
        Cfg::new(1).interactive(2),
        Pool::Interactive,
        Block::Sleep,
        3,
    );
    assert!(v.iter().all(Option::is_some), "{v:?}");
}

/// Found in review (BUG before the fix in `Core::evict_lifo`, which now always wakes a
/// sleeper where sysmon would not rescue quickly): with `max_extra_workers(0)` and
/// `stall_report(None)` no sysmon thread runs, so
/// the only rescue for a task pushed out of the LIFO slot without a wake is gone: a
/// task that spawns work (two spawns: the first is pushed into the stealable queue)
/// and then blocks its worker thread until that work has run waits for ever, although
/// a second worker sits parked. Before 2f004ee the push woke that worker, which stole
/// the task at once (measured 0.05-0.3 ms on the previous commit).
#[test]
fn queued_task_behind_blocked_worker_runs_without_sysmon() {
    let _w = Watchdog::new("rescue without sysmon", Duration::from_secs(300));
    let mut bad = Vec::new();
    for workers in [2, 4] {
        for block in [Block::Spin, Block::Sleep, Block::Mpsc] {
            let v = delays(Cfg::new(workers).no_sysmon(), Pool::Default, block, 3);
            if v.iter()
                .any(|d| d.is_none_or(|d| d > Duration::from_secs(1)))
            {
                bad.push(format!("{workers} workers, {block:?}: {v:?}"));
            }
        }
    }
    let v = delays(
        Cfg::new(1).no_sysmon().interactive(2),
        Pool::Interactive,
        Block::Sleep,
        3,
    );
    if v.iter()
        .any(|d| d.is_none_or(|d| d > Duration::from_secs(1)))
    {
        bad.push(format!("interactive pool of 2: {v:?}"));
    }
    assert!(bad.is_empty(), "never rescued: {bad:#?}");
}

/// Found in review (a regression before the fix): with temporary workers off (`max_extra_workers(0)`) but the stall
/// report on (its default 5 s threshold), sysmon looks only every 100 ms (a fifth of
/// the threshold, clamped to 10-100 ms), so the rescue of a task pushed out of the
/// LIFO slot behind a blocked worker takes 100-200 ms (measured 140-200 ms in most
/// rounds), where before 2f004ee the push woke the parked peer at once (about 1 ms:
/// one 1 ms sleep step of the blocker).
#[test]
fn queued_task_behind_blocked_worker_runs_soon_without_temp_workers() {
    let _w = Watchdog::new("rescue without temp workers", Duration::from_secs(300));
    let mut v = delays(Cfg::new(2).no_temp(), Pool::Default, Block::Sleep, 9);
    v.sort();
    let median = v[v.len() / 2];
    // Generous (fixed: 0.1-3 ms; the bug: 100-200 ms in most rounds, the first look
    // at the stuck worker starting its 10 ms; this machine is shared): under 60 ms.
    assert!(
        median.is_some_and(|d| d < Duration::from_millis(60)),
        "median {}: {v:?}",
        fmt(median)
    );
}

/// Keeps the thread busy for `work` (a CPU-bound task: no yield).
fn busy(work: Duration) {
    let start = Instant::now();
    while start.elapsed() < work {
        std::hint::spin_loop();
    }
}

/// Spawns `n` CPU-bound tasks of `work` each from one task, after the workers were
/// trained on tiny tasks; returns (the delay between the first and the last start, the
/// wall time, the distinct threads that ran them).
fn cpu_burst(rt: &Runtime, n: usize, work: Duration) -> (Duration, Duration, usize) {
    rt.block_on(async move {
        weft::spawn(async move {
            let t = Instant::now();
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    weft::spawn(async move {
                        let start = Instant::now();
                        busy(work);
                        (start, std::thread::current().id())
                    })
                })
                .collect();
            let mut starts = Vec::new();
            let mut threads = Vec::new();
            for h in hs {
                let (s, id) = h.await.unwrap();
                starts.push(s);
                if !threads.contains(&id) {
                    threads.push(id);
                }
            }
            let first = *starts.iter().min().unwrap();
            let last = *starts.iter().max().unwrap();
            (last - first, t.elapsed(), threads.len())
        })
        .await
        .unwrap()
    })
}

/// Two CPU-bound tasks of 300 ms spawned from a task after a long run of tiny tasks:
/// how long until the second worker joins (prints it). With sysmon the second starts
/// after STALE_AFTER plus a sysmon period; without it, only when the first is done.
#[test]
fn cpu_bound_tasks_after_tiny_ones_run_in_parallel_with_sysmon() {
    let _w = Watchdog::new("cpu burst", Duration::from_secs(300));
    for cfg in [Cfg::new(2), Cfg::new(2).no_temp(), Cfg::new(4)] {
        let rt = cfg.build();
        train(&rt, Pool::Default);
        let mut res = Vec::new();
        for _ in 0..3 {
            res.push(cpu_burst(&rt, 2, Duration::from_millis(300)));
        }
        eprintln!("{cfg:?}: (second start after, wall, threads) = {res:?}");
        // Serial would be 300 ms apart; generous for a loaded machine.
        assert!(
            res.iter().any(|r| r.0 < Duration::from_millis(250)),
            "{cfg:?}: {res:?}"
        );
    }
}

/// Found in review (a regression to serial execution before the fix): without sysmon, two CPU-bound tasks spawned
/// from a task after tiny ones run one after the other on one worker while the other
/// worker stays parked.
#[test]
fn cpu_bound_tasks_after_tiny_ones_run_in_parallel_without_sysmon() {
    let _w = Watchdog::new("cpu burst no sysmon", Duration::from_secs(300));
    let rt = Cfg::new(2).no_sysmon().build();
    train(&rt, Pool::Default);
    let mut res = Vec::new();
    for _ in 0..5 {
        res.push(cpu_burst(&rt, 2, Duration::from_millis(300)));
    }
    eprintln!("no sysmon: (second start after, wall, threads) = {res:?}");
    // Fixed: 4-6 ms each round. The bug: 300 ms (serial) in most rounds (a round in
    // which the peer happened to be spinning in its park was parallel). Allows one
    // slow round on a loaded machine.
    let parallel = res
        .iter()
        .filter(|r| r.0 < Duration::from_millis(250))
        .count();
    assert!(parallel >= 4, "{res:?}");
}

/// Many medium tasks (2 ms each, under STALE_AFTER, so sysmon never sees a stuck
/// poll) spawned from one task after tiny tasks: does the second worker help? Prints
/// the wall time and how many ran elsewhere.
fn medium_burst(rt: &Runtime, n: usize, work: Duration) -> (Duration, usize) {
    rt.block_on(async move {
        weft::spawn(async move {
            let here = std::thread::current().id();
            let t = Instant::now();
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    weft::spawn(async move {
                        busy(work);
                        std::thread::current().id()
                    })
                })
                .collect();
            let mut elsewhere = 0;
            for h in hs {
                if h.await.unwrap() != here {
                    elsewhere += 1;
                }
            }
            (t.elapsed(), elsewhere)
        })
        .await
        .unwrap()
    })
}

/// Prints wall times of 100 x 2 ms tasks spawned from a task (serial: 200 ms;
/// two workers: 100 ms) for each sysmon configuration.
#[test]
fn medium_tasks_after_tiny_ones_spread() {
    let _w = Watchdog::new("medium burst", Duration::from_secs(300));
    for cfg in [Cfg::new(2), Cfg::new(2).no_temp(), Cfg::new(2).no_sysmon()] {
        let rt = cfg.build();
        train(&rt, Pool::Default);
        let res: Vec<_> = (0..3)
            .map(|_| medium_burst(&rt, 100, Duration::from_millis(2)))
            .collect();
        eprintln!("{cfg:?}: 100 x 2 ms (wall, ran on the other worker) = {res:?}");
        // Must finish at all (serial is 200 ms).
        assert!(res.iter().all(|r| r.0 < Duration::from_secs(30)));
    }
}

/// 200 tasks asleep on one deadline, each then working 2 ms: the timer fires them on
/// one worker (woken there, so into its LIFO slot and queue). Prints wall time from the
/// deadline and how many threads ran them.
#[test]
fn timer_burst_after_tiny_tasks() {
    let _w = Watchdog::new("timer burst", Duration::from_secs(300));
    for cfg in [Cfg::new(2), Cfg::new(2).no_sysmon()] {
        let rt = cfg.build();
        train(&rt, Pool::Default);
        let mut res = Vec::new();
        for _ in 0..3 {
            let r = rt.block_on(async {
                let deadline = Instant::now() + Duration::from_millis(50);
                let hs: Vec<_> = (0..200)
                    .map(|_| {
                        weft::spawn(async move {
                            weft::time::sleep_until(deadline).await;
                            let s = Instant::now();
                            while s.elapsed() < Duration::from_millis(2) {
                                std::hint::spin_loop();
                            }
                            std::thread::current().id()
                        })
                    })
                    .collect();
                let mut threads = Vec::new();
                for h in hs {
                    let id = h.await.unwrap();
                    if !threads.contains(&id) {
                        threads.push(id);
                    }
                }
                (deadline.elapsed(), threads.len())
            });
            res.push(r);
        }
        eprintln!("{cfg:?}: 200 x 2 ms after one deadline (wall, threads) = {res:?}");
        assert!(res.iter().all(|r| r.0 < Duration::from_secs(30)));
    }
}

/// A fiber (tied to its worker) spawns a task, then a second one that blocks in a
/// 200 ms sleep (the first is pushed out of the LIFO slot), and yields: the yielded
/// fiber is not stealable, so `next_deferred` wakes nobody, and the first task must
/// still run before the blocker is done. Prints when the first task ran (the fiber
/// itself can only resume after the blocker: it is tied to that worker).
#[test]
fn yielding_fiber_with_task_behind_a_blocking_one() {
    let _w = Watchdog::new("fiber yield", Duration::from_secs(300));
    for cfg in [Cfg::new(2), Cfg::new(2).no_temp(), Cfg::new(2).no_sysmon()] {
        let rt = cfg.build();
        train(&rt, Pool::Default);
        let mut res = Vec::new();
        for _ in 0..3 {
            let r = rt.block_on(async {
                weft::fiber::spawn(|| {
                    let ran_at = Arc::new(Mutex::new(None));
                    let r = ran_at.clone();
                    let t = Instant::now();
                    let a = weft::spawn(async move { *r.lock().unwrap() = Some(t.elapsed()) });
                    let b = weft::spawn(async {
                        std::thread::sleep(Duration::from_millis(200));
                    });
                    let mut yields = 0u64;
                    while ran_at.lock().unwrap().is_none() && t.elapsed() < GIVE_UP {
                        weft::fiber::yield_now();
                        yields += 1;
                    }
                    weft::wait(a).unwrap();
                    weft::wait(b).unwrap();
                    let ran = ran_at.lock().unwrap().unwrap();
                    (ran, t.elapsed(), yields)
                })
                .await
                .unwrap()
            });
            res.push(r);
        }
        eprintln!("{cfg:?}: fiber + blocker (task ran after, fiber done after, yields) = {res:?}");
        assert!(res.iter().all(|r| r.1 < GIVE_UP), "{cfg:?}: {res:?}");
    }
}

/// The runtime is shut down while tasks wait in the queue of a worker blocked in one
/// poll: every JoinHandle resolves (run or cancelled), and every task's future is
/// dropped (nothing leaked).
#[test]
fn shutdown_with_tasks_behind_a_blocked_worker_loses_nothing() {
    let _w = Watchdog::new("shutdown", Duration::from_secs(120));
    for cfg in [Cfg::new(2), Cfg::new(2).no_sysmon()] {
        let rt = cfg.build();
        train(&rt, Pool::Default);
        let alive = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        struct Live(Arc<AtomicUsize>);
        impl Drop for Live {
            fn drop(&mut self) {
                self.0.fetch_sub(1, SeqCst);
            }
        }
        let (htx, hrx) = mpsc::channel();
        let (a, r) = (alive.clone(), ran.clone());
        let blocker = rt.spawn(async move {
            for _ in 0..50 {
                a.fetch_add(1, SeqCst);
                let live = Live(a.clone());
                let r = r.clone();
                htx.send(weft::spawn(async move {
                    let _live = live;
                    r.fetch_add(1, SeqCst);
                }))
                .unwrap();
            }
            std::thread::sleep(Duration::from_millis(300));
        });
        let handles: Vec<_> = (0..50).map(|_| hrx.recv().unwrap()).collect();
        rt.shutdown_timeout(Duration::from_secs(10));
        let (mut ok, mut cancelled) = (0, 0);
        for h in handles {
            match h.join() {
                Ok(()) => ok += 1,
                Err(e) if e.is_cancelled() => cancelled += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
        let _ = blocker.join();
        eprintln!(
            "{cfg:?}: shutdown: {ok} ran, {cancelled} cancelled, ran counter {}",
            ran.load(SeqCst)
        );
        assert_eq!(ok + cancelled, 50);
        assert_eq!(ok, ran.load(SeqCst));
        assert_eq!(alive.load(SeqCst), 0, "futures leaked");
    }
}

/// `weft::wait` (also inside a `weft::join` half) in a task waiting for a task it spawned, pushed
/// out of the LIFO slot: the nested wait runs the worker's queue (or suspends), so it
/// must complete quickly in every configuration.
#[test]
fn nested_waits_in_tasks_run_their_queued_children() {
    let _w = Watchdog::new("nested waits", Duration::from_secs(120));
    for cfg in [
        Cfg::new(1).no_sysmon(),
        Cfg::new(2).no_sysmon(),
        Cfg::new(2),
    ] {
        let rt = cfg.build();
        train(&rt, Pool::Default);
        let mut res = Vec::new();
        for _ in 0..3 {
            let r = rt.block_on(async move {
                weft::spawn(async move {
                    let t = Instant::now();
                    let a = weft::spawn(async { 1 });
                    let b = weft::spawn(async { 2 });
                    let x = weft::wait(a).unwrap();
                    let t1 = t.elapsed();
                    let c = weft::spawn(async { 3 });
                    let d = weft::spawn(async { 4 });
                    // A wait nested in a fork-join half.
                    let (y, _) = weft::join(|| weft::wait(c).ok(), || ());
                    let z = weft::wait(b).unwrap() + weft::wait(d).unwrap();
                    (x, y, z, t1, t.elapsed())
                })
                .await
                .unwrap()
            });
            res.push(r);
        }
        eprintln!("{cfg:?}: nested waits = {res:?}");
        assert!(res
            .iter()
            .all(|r| r.0 == 1 && r.1 == Some(3) && r.2 == 6 && r.4 < Duration::from_secs(20)));
    }
}

/// Fork-join inside tasks after tiny tasks (jobs always wake a peer): `weft::join` of
/// two 100 ms halves, and a par iterator; prints wall times.
#[test]
fn fork_join_inside_tasks_after_tiny_ones() {
    use weft::prelude::*;
    let _w = Watchdog::new("fork-join", Duration::from_secs(120));
    for cfg in [Cfg::new(2), Cfg::new(2).no_sysmon()] {
        let rt = cfg.build();
        train(&rt, Pool::Default);
        let r = rt.block_on(async {
            weft::spawn(async {
                let spin = || {
                    let s = Instant::now();
                    while s.elapsed() < Duration::from_millis(100) {
                        std::hint::spin_loop();
                    }
                    std::thread::current().id()
                };
                let t = Instant::now();
                let (a, b) = weft::join(spin, spin);
                let join_wall = t.elapsed();
                let t = Instant::now();
                let sum: u64 = (0..64u64)
                    .into_par_iter()
                    .map(|i| {
                        let s = Instant::now();
                        while s.elapsed() < Duration::from_millis(3) {
                            std::hint::spin_loop();
                        }
                        i
                    })
                    .sum();
                (join_wall, a != b, t.elapsed(), sum)
            })
            .await
            .unwrap()
        });
        eprintln!("{cfg:?}: join 2x100 ms (wall, two threads), par 64x3 ms (wall) = {r:?}");
        assert_eq!(r.3, 63 * 64 / 2);
    }
}

/// A burst of 8 tasks of 8 ms each (each poll under `STALE_AFTER`, so sysmon never
/// sees a stuck worker) spawned from one task after tiny tasks, with the default
/// configuration: prints the wall time (serial: 64 ms; two workers: 32 ms) and how
/// many ran on another thread than the spawner's.
#[test]
fn short_fanout_under_stale_after_spreads() {
    let _w = Watchdog::new("short fan-out", Duration::from_secs(300));
    let rt = Cfg::new(2).build();
    train(&rt, Pool::Default);
    let res: Vec<_> = (0..7)
        .map(|_| medium_burst(&rt, 8, Duration::from_millis(8)))
        .collect();
    eprintln!("default, 2 workers: 8 x 8 ms (wall, ran on the other worker) = {res:?}");
    assert!(res.iter().all(|r| r.0 < Duration::from_secs(30)));
    // Tiny tasks between the fan-outs: each fan-out meets an average trained on them.
    let res: Vec<_> = (0..7)
        .map(|_| {
            train(&rt, Pool::Default);
            medium_burst(&rt, 8, Duration::from_millis(8))
        })
        .collect();
    eprintln!("default, 2 workers, tiny tasks between: 8 x 8 ms (wall, elsewhere) = {res:?}");
    assert!(res.iter().all(|r| r.0 < Duration::from_secs(30)));
}

/// A fork-join job run from outside the runtime (`weft::join` on a plain thread: the
/// pair runs as a job on a worker, with no task around it) wakes two tasks waiting on
/// channels; they go to that worker's LIFO slot, the first pushed out into its queue.
/// The job then keeps the worker (a spin) until the first task has run. Sysmon's
/// rescue looks only at workers inside a task's poll (`running_task != 0`), so here it
/// never comes; before 2f004ee the push woke the parked peer. Returns the delay.
fn woken_by_a_long_job(rt: &Runtime) -> Option<Duration> {
    let (tx1, rx1) = futures_channel::oneshot::channel::<()>();
    let (tx2, rx2) = futures_channel::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let r1 = {
        let ready = ready_tx.clone();
        rt.spawn(async move {
            ready.send(()).unwrap();
            let _ = rx1.await;
            f.store(true, SeqCst);
        })
    };
    let r2 = rt.spawn(async move {
        ready_tx.send(()).unwrap();
        let _ = rx2.await;
    });
    ready_rx.recv().unwrap();
    ready_rx.recv().unwrap();
    let b_done = Arc::new(AtomicBool::new(false));
    let b = b_done.clone();
    let _g = rt.enter();
    let (took, ()) = weft::join(
        move || {
            // Let the other half run and the peer park again (bounded).
            let t = Instant::now();
            while !b_done.load(SeqCst) && t.elapsed() < GIVE_UP {
                std::hint::spin_loop();
            }
            std::thread::sleep(Duration::from_millis(20));
            let t = Instant::now();
            let _ = tx1.send(());
            let _ = tx2.send(());
            while !flag.load(SeqCst) && t.elapsed() < GIVE_UP {
                std::hint::spin_loop();
            }
            flag.load(SeqCst).then(|| t.elapsed())
        },
        move || b.store(true, SeqCst),
    );
    r1.join().unwrap();
    r2.join().unwrap();
    took
}

/// Found in review (see [`woken_by_a_long_job`]): with the default configuration
/// (sysmon on, with temporary workers) tasks woken by a long fork-join job run at the
/// top of a worker's loop were never rescued: "never" (3 s) in 5 of 5 rounds; before
/// 2f004ee, and with the fix in `Core::evict_lifo`, 0.1-10 ms. Prints the delays for
/// each configuration.
#[test]
fn tasks_woken_by_a_long_fork_join_job_run() {
    let _w = Watchdog::new("woken by a job", Duration::from_secs(300));
    for cfg in [Cfg::new(2), Cfg::new(2).no_temp(), Cfg::new(2).no_sysmon()] {
        let rt = cfg.build();
        train(&rt, Pool::Default);
        let v: Vec<_> = (0..5).map(|_| woken_by_a_long_job(&rt)).collect();
        eprintln!(
            "{cfg:?}: tasks woken by a long job: {:?}",
            v.iter().map(|d| fmt(*d)).collect::<Vec<_>>()
        );
        // Allows one slow round on a loaded machine.
        let soon = v
            .iter()
            .filter(|d| d.is_some_and(|d| d < Duration::from_secs(1)))
            .count();
        assert!(soon >= 4, "{cfg:?}: {v:?}");
    }
}

/// Found in review (a regression, fixed by sysmon's queue-age rescue; default
/// configuration): a fan-out of tasks shorter than `STALE_AFTER` spawned from a task,
/// after the worker ran tiny tasks, sometimes ran wholly on the spawner's worker while
/// the other slept: its average task time said the queued tasks were not worth a wake,
/// and no poll was long enough for the stuck-poll rescue. Measured in release builds
/// (8 x 8 ms, tiny tasks before each burst), fully serial bursts (64-74 ms, none on the
/// other worker): 5 of 28 and 3 of 14 on 2f004ee, 0 of 28 on the commit before 0a89acb
/// (32-40 ms, 3-6 elsewhere), 0 of 28 (release) and 0 of 14 (debug) with the rescue.
/// With N workers such a burst takes N times as long. Statistical: allows two serial
/// bursts (a preempted peer on a loaded machine).
#[test]
fn short_fanouts_after_tiny_tasks_never_run_serially() {
    let _w = Watchdog::new("short fan-outs", Duration::from_secs(300));
    let rt = Cfg::new(2).build();
    let res: Vec<_> = (0..14)
        .map(|_| {
            train(&rt, Pool::Default);
            medium_burst(&rt, 8, Duration::from_millis(8))
        })
        .collect();
    eprintln!("8 x 8 ms after tiny tasks (wall, elsewhere) = {res:?}");
    let serial = res.iter().filter(|r| r.1 == 0).count();
    assert!(serial <= 2, "{serial} of 14 bursts ran serially: {res:?}");
}
