//! Review s43 (runtime lifecycle and pools): handles used after their runtime is gone,
//! several runtimes and the "most recently started" rule, runtimes and handles dropped
//! in thread-local destructors, the blocking pool at its cap and at shutdown, hooks,
//! statistics, and threads or descriptors left behind by runtimes built and dropped.
//!
//! Every wait is bounded. What is process-wide (the latest runtime, thread counts) or
//! could abort runs in a child process (`common::child`).

mod common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{counter, join_within, load, watchdog, DropCounter};
use weft::fiber::{self, SpawnErrorKind};
use weft::{Builder, Handle, JoinHandle, Runtime};

/// Counts live heap bytes, for the leak check of runtimes built and dropped.
struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(l.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same layout contract as ours.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        LIVE_BYTES.fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with `l`.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const CHILD: &str = "WEFT_REVIEW_S43_RUNTIME_CHILD";
const CHILD_LIMIT: Duration = Duration::from_secs(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn run_child(case: &str) -> common::child::Output {
    common::child::run("child_process_entry", &[(CHILD, case)], CHILD_LIMIT)
}

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "latest_rule" => child_latest_rule(),
        "tls_runtime_drop" => child_tls_runtime_drop(),
        "tls_last_handle" => child_tls_last_handle(),
        "threads_and_fds" => child_threads_and_fds(),
        "draining_latest" => child_draining_latest(),
        "timer_waker_drops" => child_waker_drops_runtime(false),
        "io_waker_drops" => child_waker_drops_runtime(true),
        "latest_leak" => child_latest_leak(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn rt_named(name: &str, workers: usize) -> Runtime {
    Builder::new()
        .worker_threads(workers)
        .interactive_threads(0)
        .thread_name(name)
        .build()
        .unwrap()
}

/// Joins `h` within `secs` and unwraps its value.
fn jw<T: Send + 'static>(h: JoinHandle<T>, secs: u64) -> T {
    join_within(h, secs).unwrap()
}

fn thread_name() -> String {
    common::thread_name()
}

/// Joins `h` on a helper thread within `secs`, returning whether it was cancelled.
fn resolves_cancelled<T: Send + 'static + std::fmt::Debug>(h: JoinHandle<T>, secs: u64) -> bool {
    let r = watchdog(secs, move || h.join());
    match r {
        Ok(v) => panic!("expected a cancellation, got {v:?}"),
        Err(e) => e.is_cancelled(),
    }
}

// ---------------------------------------------------------------------------------
// Handles after their runtime is gone.

#[test]
fn a_handle_after_its_runtime_is_gone_resolves_everything() {
    watchdog(30, || {
        let rt = rt_named("s43-gone", 1);
        let handle = rt.handle().clone();
        drop(rt);
        // Spawns of every kind resolve, cancelled, at once.
        assert!(resolves_cancelled(handle.spawn(async { 1 }), 5));
        assert!(resolves_cancelled(
            handle.spawn_on(weft::Pool::Interactive, async { 1 }),
            5
        ));
        assert!(resolves_cancelled(handle.spawn_blocking(|| 1), 5));
        // The future and its destructor are dropped, not leaked.
        let drops = counter();
        let d = DropCounter(drops.clone());
        let h = handle.spawn(async move {
            let _d = d;
        });
        assert!(resolves_cancelled(h, 5));
        assert_eq!(load(&drops), 1, "a refused task's future was not dropped");
        let drops_b = counter();
        let d = DropCounter(drops_b.clone());
        let h = handle.spawn_blocking(move || drop(d));
        assert!(resolves_cancelled(h, 5));
        assert_eq!(load(&drops_b), 1, "a refused closure was not dropped");
        // block_on still runs a future to completion on this thread, and a timer too.
        assert_eq!(handle.block_on(async { 5 }), 5);
        let t = Instant::now();
        handle.block_on(weft::time::sleep(ms(20)));
        assert!(t.elapsed() >= ms(20));
        // Inside it, the runtime is current; spawns are cancelled, fibers refused.
        let (cancelled, fiber_err) = handle.block_on(async {
            let c = weft::spawn(async { 1 }).await.unwrap_err().is_cancelled();
            let f = fiber::try_spawn(|| 1).err().map(|e| e.kind());
            (c, f)
        });
        assert!(cancelled);
        assert_eq!(fiber_err, Some(SpawnErrorKind::Shutdown));
        // Stats and dumps still answer.
        let s = handle.stats();
        assert_eq!(s.active_tasks, 0);
        let _ = format!("{s}");
        let _ = format!("{}", handle.dump());
    });
}

// ---------------------------------------------------------------------------------
// The most recently started runtime.

/// Where a fiber spawned from a plain thread (no runtime entered) runs.
fn fiber_from_plain_thread() -> Result<String, SpawnErrorKind> {
    std::thread::spawn(|| match fiber::try_spawn(thread_name) {
        Ok(h) => Ok(jw(h, 5)),
        Err(e) => Err(e.kind()),
    })
    .join()
    .unwrap()
}

fn child_latest_rule() {
    let a = rt_named("s43-a", 1);
    assert!(fiber_from_plain_thread().unwrap().starts_with("s43-a-"));
    let b = rt_named("s43-b", 1);
    assert!(fiber_from_plain_thread().unwrap().starts_with("s43-b-"));
    let c = rt_named("s43-c", 1);
    assert!(fiber_from_plain_thread().unwrap().starts_with("s43-c-"));
    // Dropping one in the middle leaves the latest in place.
    drop(b);
    assert!(fiber_from_plain_thread().unwrap().starts_with("s43-c-"));
    // Dropping the latest falls back to the one before it still alive.
    drop(c);
    assert!(fiber_from_plain_thread().unwrap().starts_with("s43-a-"));
    // An entered runtime wins over the latest.
    let d = rt_named("s43-d", 1);
    {
        let _g = a.enter();
        let h = fiber::spawn(thread_name);
        assert!(jw(h, 5).starts_with("s43-a-"));
    }
    drop(d);
    drop(a);
    assert_eq!(fiber_from_plain_thread(), Err(SpawnErrorKind::NoRuntime));
    // A runtime built after all are gone is found again.
    let e = rt_named("s43-e", 1);
    assert!(fiber_from_plain_thread().unwrap().starts_with("s43-e-"));
    drop(e);
}

#[test]
fn fiber_spawn_goes_to_the_most_recently_started_live_runtime() {
    run_child("latest_rule").assert_finished();
}

/// A runtime draining (`shutdown_graceful` in progress) refuses outside spawns; is it
/// still "the latest", hiding an older runtime that would take the fiber?
fn child_draining_latest() {
    let a = rt_named("s43-old", 1);
    let b = rt_named("s43-new", 1);
    // Keep `b` draining for a while: a task that lives 2 s.
    b.spawn(async {
        weft::time::sleep(Duration::from_secs(2)).await;
    });
    let (tx, rx) = mpsc::channel();
    let drainer = std::thread::spawn(move || {
        tx.send(()).unwrap();
        b.shutdown_graceful(Duration::from_secs(5))
    });
    rx.recv().unwrap();
    std::thread::sleep(ms(200));
    let where_ = fiber_from_plain_thread();
    println!("CHILD fiber={where_:?}");
    let _ = drainer.join();
    drop(a);
}

#[test]
fn a_draining_runtime_and_the_latest_rule() {
    let out = run_child("draining_latest");
    out.assert_finished();
    // Report only: the documented rule says "still alive"; a draining runtime is
    // alive but refuses. Either answer is acceptable if it is not a hang.
    let fiber = out.report("fiber").unwrap_or("").to_string();
    assert!(
        fiber.contains("s43-old") || fiber.contains("Shutdown"),
        "{}",
        out.context()
    );
}

// ---------------------------------------------------------------------------------
// Runtimes and handles dropped in thread-local destructors.

thread_local! {
    static TLS_RT: RefCell<Option<Runtime>> = const { RefCell::new(None) };
    static TLS_HANDLE: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

fn child_tls_runtime_drop() {
    let drops = counter();
    let d2 = drops.clone();
    let t = std::thread::spawn(move || {
        let rt = rt_named("s43-tls", 2);
        // A pending task, a parked fiber, a sleeping task, and a blocking closure.
        let d = DropCounter(d2.clone());
        rt.spawn(async move {
            let _d = d;
            std::future::pending::<()>().await
        });
        let d = DropCounter(d2.clone());
        let (ftx, frx) = mpsc::channel::<()>();
        let _f = rt.block_on(async move {
            Some(fiber::spawn(move || {
                let _d = d;
                let _ = ftx.send(());
                weft::fiber::sleep(Duration::from_secs(60));
            }))
        });
        frx.recv_timeout(Duration::from_secs(5)).unwrap();
        let d = DropCounter(d2.clone());
        rt.spawn(async move {
            let _d = d;
            weft::time::sleep(Duration::from_secs(60)).await
        });
        let _b = rt.spawn_blocking(|| std::thread::sleep(ms(50)));
        TLS_RT.with(|c| *c.borrow_mut() = Some(rt));
        // The thread ends here: the runtime drops in its thread-local's destructor.
    });
    let t0 = Instant::now();
    while !t.is_finished() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(ms(5));
    }
    assert!(t.is_finished(), "the thread-local runtime drop hung");
    t.join().unwrap();
    assert_eq!(load(&drops), 3, "not every task and fiber was dropped");
}

#[test]
fn a_runtime_dropped_in_a_thread_local_destructor() {
    run_child("tls_runtime_drop").assert_finished();
}

fn child_tls_last_handle() {
    let rt = rt_named("s43-tlsh", 2);
    // Use the runtime a little: timers, sockets, fibers, blocking.
    rt.block_on(async {
        weft::time::sleep(ms(5)).await;
        weft::spawn_blocking(|| 1).await.unwrap();
        let l = weft::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        drop(l);
    });
    let h = rt.handle().clone();
    let t = std::thread::spawn(move || {
        TLS_HANDLE.with(|c| *c.borrow_mut() = Some(h));
    });
    // The runtime goes first; the thread's handle is then the last one.
    drop(rt);
    t.join().unwrap();
    // And the same with the handle dropped last on a blocking-pool thread of another
    // runtime, and in a task of another runtime.
    let rt = rt_named("s43-tlsh2", 1);
    let other = rt_named("s43-other", 1);
    let h = rt.handle().clone();
    let h2 = rt.handle().clone();
    let (tx, rx) = mpsc::channel::<()>();
    let blocking = other.spawn_blocking(move || {
        rx.recv().unwrap();
        drop(h);
    });
    let (tx2, rx2) = weft::sync::oneshot::channel::<()>();
    let task = other.spawn(async move {
        let _ = rx2.await;
        drop(h2);
    });
    drop(rt);
    tx.send(()).unwrap();
    tx2.send(()).unwrap();
    jw(blocking, 5);
    jw(task, 5);
    drop(other);
}

#[test]
fn the_last_handle_dropped_in_thread_local_destructors_and_other_runtimes() {
    run_child("tls_last_handle").assert_finished();
}

// ---------------------------------------------------------------------------------
// Threads and descriptors left behind.

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path).map(|d| d.count()).unwrap_or(0)
}

fn use_a_runtime(rt: &Runtime) {
    rt.block_on(async {
        weft::time::sleep(ms(1)).await;
        weft::spawn_blocking(|| 1).await.unwrap();
        weft::spawn_on(weft::Pool::Interactive, async { 1 })
            .await
            .unwrap();
        let f = fiber::spawn(|| weft::fiber::sleep(ms(1)));
        f.await.unwrap();
    });
    // Something still parked when it is dropped.
    rt.spawn(std::future::pending::<()>());
}

fn child_threads_and_fds() {
    // A first round starts what lives for the process (the alarm thread, say).
    for _ in 0..2 {
        let rt = Builder::new().worker_threads(2).build().unwrap();
        use_a_runtime(&rt);
        drop(rt);
    }
    std::thread::sleep(ms(200));
    let threads0 = count_dir("/proc/self/task");
    let fds0 = count_dir("/proc/self/fd");
    for _ in 0..20 {
        let rt = Builder::new()
            .worker_threads(2)
            .stall_report(Some(ms(100)))
            .build()
            .unwrap();
        use_a_runtime(&rt);
        drop(rt);
    }
    // Threads that are told to stop but not joined get a moment.
    let t0 = Instant::now();
    let (mut threads, mut fds);
    loop {
        threads = count_dir("/proc/self/task");
        fds = count_dir("/proc/self/fd");
        if (threads <= threads0 && fds <= fds0) || t0.elapsed() > Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(ms(20));
    }
    println!("CHILD threads={threads0}->{threads} fds={fds0}->{fds}");
    assert!(
        threads <= threads0,
        "threads left behind: {threads0} -> {threads}"
    );
    assert!(fds <= fds0, "descriptors left behind: {fds0} -> {fds}");
}

#[test]
fn runtimes_built_and_dropped_leave_no_threads_or_descriptors() {
    let out = run_child("threads_and_fds");
    out.assert_finished();
}

// ---------------------------------------------------------------------------------
// The blocking pool.

#[test]
fn the_blocking_pool_at_its_cap_runs_everything_queued() {
    watchdog(30, || {
        let rt = Builder::new()
            .worker_threads(1)
            .max_blocking_threads(2)
            .build()
            .unwrap();
        let peak = Arc::new(AtomicUsize::new(0));
        let now = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..40)
            .map(|i| {
                let (peak, now) = (peak.clone(), now.clone());
                rt.spawn_blocking(move || {
                    let n = now.fetch_add(1, SeqCst) + 1;
                    peak.fetch_max(n, SeqCst);
                    std::thread::sleep(ms(2));
                    now.fetch_sub(1, SeqCst);
                    i
                })
            })
            .collect();
        for (i, h) in hs.into_iter().enumerate() {
            assert_eq!(jw(h, 20), i);
        }
        assert!(load(&peak) <= 2, "the cap was exceeded: {}", load(&peak));
        let s = rt.stats();
        assert!(s.blocking.threads <= 2);
        assert_eq!(s.blocking.tasks, 40);
        assert_eq!(s.blocking.queued, 0);
    });
}

#[test]
fn the_blocking_pool_with_a_zero_keep_alive_still_runs_everything() {
    watchdog(30, || {
        let rt = Builder::new()
            .worker_threads(1)
            .thread_keep_alive(Duration::ZERO)
            .max_blocking_threads(1)
            .build()
            .unwrap();
        for round in 0..200 {
            let hs: Vec<_> = (0..3).map(|i| rt.spawn_blocking(move || i)).collect();
            for (i, h) in hs.into_iter().enumerate() {
                assert_eq!(jw(h, 10), i, "round {round}");
            }
        }
    });
}

#[test]
fn shutdown_timeout_with_blocking_work_running_and_queued() {
    watchdog(30, || {
        let rt = Builder::new()
            .worker_threads(1)
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let running = rt.spawn_blocking(move || {
            started_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(20));
            7
        });
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let drops = counter();
        let d = DropCounter(drops.clone());
        let queued = rt.spawn_blocking(move || {
            drop(d);
            8
        });
        // A task waiting for the running closure.
        let running_awaited = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        rt.shutdown_timeout(ms(100));
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "shutdown_timeout overran"
        );
        // The queued closure never ran and was dropped.
        assert!(resolves_cancelled(queued, 5));
        assert_eq!(load(&drops), 1);
        // The running one finishes later; its handle resolves either way.
        release_tx.send(()).unwrap();
        let r = watchdog(10, move || running.join());
        let _ = r;
        let _ = running_awaited;
    });
}

#[test]
fn a_task_awaiting_spawn_blocking_when_the_runtime_drops() {
    watchdog(30, || {
        let rt = Builder::new().worker_threads(1).build().unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let drops = counter();
        let d = DropCounter(drops.clone());
        let waiter = rt.spawn(async move {
            let _d = d;
            weft::spawn_blocking(move || {
                started_tx.send(()).unwrap();
                let _ = rx.recv_timeout(Duration::from_secs(20));
            })
            .await
        });
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let dropper = std::thread::spawn(move || drop(rt));
        std::thread::sleep(ms(50));
        tx.send(()).unwrap();
        common::thread_within(dropper, 10);
        assert!(resolves_cancelled(waiter, 5));
        assert_eq!(load(&drops), 1);
    });
}

// ---------------------------------------------------------------------------------
// Hooks and the current runtime.

/// Both hooks run outside the runtime's context, as documented (entering it, as tokio
/// does, let a hook block on the runtime's timers, which nobody fires there: a start
/// or a shutdown that hung; found in review of this session's change that entered
/// them). The hooks run, once per worker, and a captured handle reaches the runtime.
#[test]
fn thread_hooks_run_outside_the_runtime_once_per_worker() {
    watchdog(30, || {
        let entered = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let stopped = Arc::new(AtomicUsize::new(0));
        let (e1, s1) = (entered.clone(), started.clone());
        let (e2, s2) = (entered.clone(), stopped.clone());
        let rt = Builder::new()
            .worker_threads(2)
            .interactive_threads(0)
            .on_thread_start(move || {
                s1.fetch_add(1, SeqCst);
                if Handle::try_current().is_ok() {
                    e1.fetch_add(1, SeqCst);
                }
            })
            .on_thread_stop(move || {
                s2.fetch_add(1, SeqCst);
                if Handle::try_current().is_ok() {
                    e2.fetch_add(1, SeqCst);
                }
            })
            .build()
            .unwrap();
        rt.spawn(async {}).join().unwrap();
        common::wait_until("both start hooks ran", || load(&started) == 2);
        drop(rt);
        assert_eq!(load(&stopped), 2);
        assert_eq!(load(&entered), 0, "a hook ran inside the runtime");
    });
}

#[test]
fn block_on_of_its_own_runtime_inside_a_task_on_one_worker() {
    watchdog(30, || {
        let rt = Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .build()
            .unwrap();
        let h = rt.handle().clone();
        let t = rt.spawn(async move {
            h.block_on(async {
                let a = weft::spawn(async { 20 }).await.unwrap();
                weft::time::sleep(ms(5)).await;
                let b = weft::spawn_blocking(|| 22).await.unwrap();
                a + b
            })
        });
        assert_eq!(jw(t, 20), 42);
    });
}

// ---------------------------------------------------------------------------------
// Statistics.

#[test]
fn stats_pools_and_display_agree_with_the_configuration() {
    watchdog(30, || {
        for interactive in [0usize, 1, 3] {
            let rt = Builder::new()
                .worker_threads(2)
                .interactive_threads(interactive)
                .build()
                .unwrap();
            rt.block_on(async {
                for _ in 0..10 {
                    weft::spawn(async {}).await.unwrap();
                    weft::spawn_on(weft::Pool::Interactive, async {})
                        .await
                        .unwrap();
                }
            });
            let s = rt.stats();
            assert_eq!(s.num_workers, 2);
            assert_eq!(s.pools.len(), if interactive > 0 { 2 } else { 1 });
            assert_eq!(s.pools[0].pool, weft::Pool::Default);
            assert_eq!(s.pools[0].num_workers, 2);
            assert_eq!(s.pools[0].workers.len(), 2);
            if interactive > 0 {
                assert_eq!(s.pools[1].pool, weft::Pool::Interactive);
                assert_eq!(s.pools[1].num_workers, interactive);
                assert_eq!(s.pools[1].workers.len(), interactive);
                assert!(s.pools[1].total_spawned >= 10, "{s}");
            }
            let total: u64 = s.pools.iter().map(|p| p.total_spawned).sum();
            assert!(total >= 20, "{s}");
            let text = format!("{s}");
            assert!(text.contains("Default pool"), "{text}");
            assert_eq!(text.contains("Interactive pool"), interactive > 0, "{text}");
        }
    });
}

// ---------------------------------------------------------------------------------
// Blocking closures: aborts, detached outputs, graceful shutdown.

#[test]
fn aborting_a_running_blocking_closure_drops_its_output_once() {
    watchdog(30, || {
        let rt = Builder::new().worker_threads(1).build().unwrap();
        for round in 0..20 {
            let drops = counter();
            let d = drops.clone();
            let (started_tx, started_rx) = mpsc::channel::<()>();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let h = rt.spawn_blocking(move || {
                started_tx.send(()).unwrap();
                let _ = go_rx.recv_timeout(Duration::from_secs(10));
                DropCounter(d)
            });
            started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            h.abort();
            go_tx.send(()).unwrap();
            let r = watchdog(10, move || h.join().map(|_out| ()));
            // Either answer (tokio: the value), but the output is dropped exactly once.
            let _ = r;
            common::wait_until("the output was dropped", || load(&drops) >= 1);
            std::thread::sleep(ms(2));
            assert_eq!(load(&drops), 1, "round {round}");
        }
    });
}

#[test]
fn a_detached_blocking_closures_output_is_dropped() {
    watchdog(30, || {
        let rt = Builder::new().worker_threads(1).build().unwrap();
        let drops = counter();
        for _ in 0..50 {
            let d = drops.clone();
            drop(rt.spawn_blocking(move || DropCounter(d)));
        }
        common::wait_until("every output was dropped", || load(&drops) == 50);
        // And outputs completed but never joined are dropped with the runtime.
        let drops2 = counter();
        let hs: Vec<_> = (0..10)
            .map(|_| {
                let d = drops2.clone();
                rt.spawn_blocking(move || DropCounter(d))
            })
            .collect();
        common::wait_until("every closure ran", || hs.iter().all(|h| h.is_finished()));
        drop(rt);
        assert_eq!(load(&drops2), 0);
        drop(hs);
        assert_eq!(load(&drops2), 10);
    });
}

#[test]
fn graceful_shutdown_with_a_blocking_closure_running() {
    watchdog(30, || {
        let rt = Builder::new().worker_threads(1).build().unwrap();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let b = rt.spawn_blocking(move || {
            started_tx.send(()).unwrap();
            std::thread::sleep(ms(300));
            5
        });
        // A task waiting for it.
        let waiter = rt.spawn(async move { b.await.unwrap() + 1 });
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let t0 = Instant::now();
        let report = rt.shutdown_graceful(Duration::from_secs(10));
        let took = t0.elapsed();
        println!("report {report:?} in {took:?}");
        // The waiting task is live until the closure returns: graceful waits for it.
        assert_eq!(jw(waiter, 5), 6, "report {report:?}");
        assert!(took < Duration::from_secs(5));
    });
}

// ---------------------------------------------------------------------------------
// Blocked callers of every kind when the runtime drops.

#[test]
fn fork_join_from_a_plain_thread_racing_the_runtime_drop() {
    watchdog(30, || {
        for round in 0..10 {
            let rt = Builder::new().worker_threads(2).build().unwrap();
            let h = rt.handle().clone();
            let (started_tx, started_rx) = mpsc::channel::<()>();
            let caller = std::thread::spawn(move || {
                let _g = h.enter();
                started_tx.send(()).unwrap();
                weft::join(
                    || {
                        std::thread::sleep(ms(30));
                        1
                    },
                    || {
                        std::thread::sleep(ms(30));
                        2
                    },
                )
            });
            started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
            std::thread::sleep(ms(round * 5));
            let dropper = std::thread::spawn(move || drop(rt));
            assert_eq!(common::thread_within(caller, 10), (1, 2), "round {round}");
            common::thread_within(dropper, 10);
        }
    });
}

#[test]
fn par_iter_from_a_plain_thread_racing_the_runtime_drop() {
    use weft::prelude::*;
    watchdog(30, || {
        for round in 0..6 {
            let rt = Builder::new().worker_threads(2).build().unwrap();
            let h = rt.handle().clone();
            let caller = std::thread::spawn(move || {
                let _g = h.enter();
                (0..20_000u64)
                    .into_par_iter()
                    .map(|x| {
                        if x % 1000 == 0 {
                            std::thread::sleep(ms(1));
                        }
                        x
                    })
                    .sum::<u64>()
            });
            std::thread::sleep(ms(round * 4));
            let dropper = std::thread::spawn(move || drop(rt));
            assert_eq!(
                common::thread_within(caller, 10),
                (0..20_000u64).sum::<u64>(),
                "round {round}"
            );
            common::thread_within(dropper, 10);
        }
    });
}

#[test]
fn a_plain_block_on_awaiting_a_task_when_the_runtime_drops() {
    watchdog(30, || {
        let rt = Builder::new().worker_threads(1).build().unwrap();
        let h = rt.handle().clone();
        let caller = std::thread::spawn(move || {
            h.block_on(async {
                let t = weft::spawn(std::future::pending::<()>());
                let f = fiber::spawn(|| weft::fiber::sleep(Duration::from_secs(60)));
                let b = weft::spawn_blocking(|| std::thread::sleep(ms(100)));
                (t.await, f.await, b.await)
            })
        });
        std::thread::sleep(ms(50));
        let dropper = std::thread::spawn(move || drop(rt));
        let (t, f, b) = common::thread_within(caller, 10);
        assert!(t.unwrap_err().is_cancelled());
        assert!(f.unwrap_err().is_cancelled());
        let _ = b;
        common::thread_within(dropper, 10);
    });
}

// ---------------------------------------------------------------------------------
// A runtime dropped by a waker that its own drivers fire (a hand-made executor's
// waker owning the runtime): on the worker holding the timer or socket driver.

static OWNED_RT: std::sync::Mutex<Option<Runtime>> = std::sync::Mutex::new(None);

fn child_waker_drops_runtime(io: bool) {
    for round in 0..5 {
        let rt = Builder::new().worker_threads(2).build().unwrap();
        let (done_tx, done_rx) = mpsc::channel::<String>();
        let waker = common::fn_waker(move || {
            let taken = OWNED_RT.lock().unwrap().take();
            if let Some(rt) = taken {
                drop(rt);
                let _ = done_tx.send(thread_name());
            }
        });
        let h = rt.handle().clone();
        *OWNED_RT.lock().unwrap() = Some(rt);
        let _g = h.enter();
        if io {
            use weft::io::AsyncReadExt;
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let (mut stream, mut peer) = h.block_on(async move {
                let s = weft::net::TcpStream::connect(addr).await.unwrap();
                let (p, _) = listener.accept().unwrap();
                (s, p)
            });
            let mut buf = [0u8; 8];
            let mut fut = Box::pin(stream.read(&mut buf));
            assert!(common::poll_once(fut.as_mut(), &waker).is_pending());
            std::thread::sleep(ms(20));
            use std::io::Write;
            peer.write_all(b"x").unwrap();
            let who = done_rx.recv_timeout(Duration::from_secs(10));
            println!("CHILD round{round}={who:?}");
            assert!(who.is_ok(), "the drop from the socket waker hung");
            drop(fut);
        } else {
            let mut fut = Box::pin(weft::time::sleep(ms(20)));
            assert!(common::poll_once(fut.as_mut(), &waker).is_pending());
            let who = done_rx.recv_timeout(Duration::from_secs(10));
            println!("CHILD round{round}={who:?}");
            assert!(who.is_ok(), "the drop from the timer waker hung");
        }
    }
}

#[test]
fn a_timer_waker_that_drops_the_runtime() {
    run_child("timer_waker_drops").assert_finished();
}

#[test]
fn a_socket_waker_that_drops_the_runtime() {
    run_child("io_waker_drops").assert_finished();
}

// ---------------------------------------------------------------------------------
// Pools: cross-pool wakes under churn.

#[test]
fn cross_pool_ping_pong_loses_no_wakeup() {
    watchdog(60, || {
        let rt = Builder::new()
            .worker_threads(2)
            .interactive_threads(1)
            .build()
            .unwrap();
        let rounds = 3000u32;
        let total = rt.block_on(async move {
            let mut total = 0u32;
            for i in 0..rounds {
                // Default -> interactive -> default, through spawns and oneshots.
                let (tx, rx) = weft::sync::oneshot::channel::<u32>();
                let inter = weft::spawn_on(weft::Pool::Interactive, async move {
                    let name = thread_name();
                    assert!(name.contains("interactive"), "{name}");
                    // Back to the default pool from the interactive one.
                    let back = weft::spawn_on(weft::Pool::Default, async move { i }).await;
                    let _ = tx.send(back.unwrap());
                    // And a plain spawn here stays in the interactive pool.
                    weft::spawn(async { thread_name() }).await.unwrap()
                });
                total = total.wrapping_add(rx.await.unwrap());
                let name = inter.await.unwrap();
                assert!(name.contains("interactive"), "{name}");
            }
            total
        });
        assert_eq!(total, (0..rounds).fold(0u32, |a, b| a.wrapping_add(b)));
    });
}

#[test]
fn fibers_and_blocking_from_the_interactive_pool_stay_or_route_right() {
    watchdog(30, || {
        let rt = Builder::new()
            .worker_threads(1)
            .interactive_threads(1)
            .thread_name("s43-pools")
            .build()
            .unwrap();
        let names = rt.block_on(async {
            weft::spawn_on(weft::Pool::Interactive, async {
                let fiber_name = fiber::spawn(thread_name).await.unwrap();
                let blocking_name = weft::spawn_blocking(thread_name).await.unwrap();
                // From the blocking thread, a plain spawn goes to the default pool.
                let from_blocking =
                    weft::spawn_blocking(|| weft::spawn(async { thread_name() }).join().unwrap())
                        .await
                        .unwrap();
                (fiber_name, blocking_name, from_blocking)
            })
            .await
            .unwrap()
        });
        assert!(names.0.starts_with("s43-pools-interactive-"), "{names:?}");
        assert!(names.1.starts_with("s43-pools-blocking-"), "{names:?}");
        assert!(
            names.2.starts_with("s43-pools-") && !names.2.contains("interactive"),
            "{names:?}"
        );
    });
}

// ---------------------------------------------------------------------------------
// Runtimes built and dropped, never looked up as "the latest".

fn light_runtime() -> Runtime {
    Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .stall_report(None)
        .max_extra_workers(0)
        .build()
        .unwrap()
}

fn child_latest_leak() {
    // Warm up what lives for the process.
    for _ in 0..20 {
        drop(light_runtime());
    }
    let _ = fiber::try_spawn(|| ());
    std::thread::sleep(ms(100));
    let before = LIVE_BYTES.load(SeqCst);
    let n = 400;
    for _ in 0..n {
        drop(light_runtime());
    }
    std::thread::sleep(ms(100));
    let after = LIVE_BYTES.load(SeqCst);
    // The only thing that forgets dropped runtimes: a lookup of the latest one.
    assert_eq!(
        fiber::try_spawn(|| ()).unwrap_err().kind(),
        SpawnErrorKind::NoRuntime
    );
    let pruned = LIVE_BYTES.load(SeqCst);
    let per_runtime = after.saturating_sub(before) / n;
    let freed_by_lookup = after.saturating_sub(pruned) / n;
    println!("CHILD per_runtime={per_runtime} freed_by_lookup={freed_by_lookup}");
    assert!(
        per_runtime < 16,
        "each runtime built and dropped keeps {per_runtime} bytes until a lookup of the \
         latest runtime prunes them ({freed_by_lookup} freed per runtime by the lookup)"
    );
}

#[test]
fn runtimes_built_and_dropped_keep_no_memory() {
    run_child("latest_leak").assert_finished();
}
