//! Review s38 (runtime): the runtime, fibers, stacks, tasks and fork-join attacked from
//! safe code with bad input and unusual use: `Builder` options at their extremes
//! (counts, names, durations, hooks that panic), runtimes dropped where they run,
//! nested `block_on`, joins racing aborts, panics whose payloads (or futures, or
//! outputs) panic again when dropped, fibers that panic holding weft locks, tens of
//! thousands of fibers dropped with their runtime, and stats read during a shutdown.
//!
//! Every wait is bounded. What could hang, abort or leave a broken runtime behind runs
//! in a child process (`common::child`), which reports `CHILD key=value` lines.

mod common;

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, panic_any, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{counter, fiber_on, join_within, load, on, watchdog, DropCounter};
use weft::fiber::{self, SpawnErrorKind};
use weft::{Builder, JoinError, Runtime};

const CHILD: &str = "WEFT_REVIEW_S38_RUNTIME_CHILD";

/// A child's time limit: short, since every case here finishes in well under a second
/// when it works.
const CHILD_LIMIT: Duration = Duration::from_secs(5);

/// How long a child waits for a join that should be immediate before it calls it lost.
const LOST_AFTER: u64 = 2;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs case `case` of `child_process_entry` in a child process with `vars` set.
fn run_child(case: &str, vars: &[(&str, &str)]) -> common::child::Output {
    let mut all = vec![(CHILD, case)];
    all.extend_from_slice(vars);
    common::child::run("child_process_entry", &all, CHILD_LIMIT)
}

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "nul_thread_name" => child_nul_thread_name(),
        "bad_future_drop" => child_bad_future_drop(),
        "bad_detached_payload" => child_bad_detached_payload(),
        "scope_early_return" => child_scope_early_return(),
        "start_hook_panics" => child_start_hook_panics(),
        "tiny_fiber_panics" => child_tiny_fiber_panics(),
        "many_fibers" => child_many_fibers(),
        "join_both_panic" => child_join_both_panic(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

/// Ends the child at once (its case reported), without dropping a runtime left broken.
fn leave() -> ! {
    println!("CHILD done=ok");
    std::process::exit(0);
}

/// A 1-worker runtime with no interactive pool, no temporary workers and no stall
/// report: a worker thread that dies is not replaced, so its loss shows.
fn lone_worker() -> Runtime {
    Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .max_extra_workers(0)
        .stall_report(None)
        .build()
        .unwrap()
}

/// A panic payload whose `Drop` panics with `Bomb(n - 1)`; `Bomb(0)` drops quietly.
struct Bomb(u32);

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 > 0 {
            panic_any(Bomb(self.0 - 1));
        }
    }
}

/// What a join came to, for a `CHILD` line.
fn outcome<T: std::fmt::Debug>(r: &Result<T, JoinError>) -> String {
    match r {
        Ok(v) => format!("ok:{v:?}"),
        Err(e) if e.is_panic() => "panic".into(),
        Err(_) => "cancelled".into(),
    }
}

/// Joins `h` from a helper thread; `None` if it did not resolve within `secs`.
fn try_join<T: Send + 'static>(h: weft::JoinHandle<T>, secs: u64) -> Option<Result<T, JoinError>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.join());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

// =================================================================================
// Bugs found by this review (each test fails until its bug is fixed).

/// Was a bug, fixed in 62ec005; before the fix: `Builder::thread_name` with an interior NUL
/// byte. `std::thread::Builder::spawn` panics on such a name; `WorkerThreads::spawn`
/// (runtime/mod.rs) has already counted the thread as running (`*running += 1`) when it
/// calls `spawn`, so the panic leaves the count at 1, and the `Runtime` that
/// `Runtime::start` drops while the panic unwinds waits in `shutdown` for that thread for
/// ever: `build()` never returns.
fn child_nul_thread_name() {
    let r = catch_unwind(|| {
        Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .thread_name("bad\0name")
            .build()
            .map(drop)
    });
    let what = match r {
        Ok(Ok(())) => "built".to_string(),
        Ok(Err(e)) => format!("error:{:?}", e.kind()),
        Err(p) => format!("panic:{}", common::panic_message(&*p).unwrap_or_default()),
    };
    println!("CHILD build={what}");
}

#[test]
fn a_thread_name_with_a_nul_byte_is_refused_not_a_hang() {
    let out = run_child("nul_thread_name", &[]);
    out.assert_finished();
    let build = out.report("build").unwrap_or_default();
    // A clear refusal: an `InvalidInput` error (or at worst a panic naming the NUL).
    assert!(
        build == "error:InvalidInput" || (build.starts_with("panic:") && build.contains("nul")),
        "build() with a NUL in the thread name gave {build:?}\n{}",
        out.context()
    );
}

/// A future that panics when polled and whose `Drop` panics with `Bomb(1)` (a payload
/// whose own `Drop` panics).
struct PanicsTwice(Option<Bomb>);

impl Future for PanicsTwice {
    type Output = u32;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<u32> {
        panic!("the poll panics");
    }
}

impl Drop for PanicsTwice {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            panic_any(b);
        }
    }
}

/// Was a bug, fixed in 62ec005; before the fix: `Cell::complete` (task/raw.rs) drops the
/// future with `set_stage`, which catches a panic of that drop and returns its payload;
/// when the task's result is already a panic, that second payload is dropped plainly (the
/// `_ => result` arm), outside any `catch_unwind`. A payload whose own `Drop` panics
/// unwinds out of the worker's poll: the worker thread dies in the middle of `complete`,
/// the task never completes (its `JoinHandle` waits for ever) and nothing else runs on that
/// worker.
fn child_bad_future_drop() {
    let rt = lone_worker();
    let h = rt.spawn(PanicsTwice(Some(Bomb(1))));
    let first = try_join(h, LOST_AFTER);
    println!(
        "CHILD first={}",
        first.as_ref().map_or("lost".into(), outcome)
    );
    let next = try_join(rt.spawn(async { 5 }), LOST_AFTER);
    println!(
        "CHILD next={}",
        next.as_ref().map_or("lost".into(), outcome)
    );
    if first.is_none() || next.is_none() {
        // The runtime is broken: leave without dropping it.
        leave();
    }
}

#[test]
fn a_panicking_future_whose_drop_panics_with_a_bad_payload_keeps_its_worker() {
    let out = run_child("bad_future_drop", &[]);
    out.assert_finished();
    assert_eq!(
        out.report("first"),
        Some("panic"),
        "the task's JoinHandle did not resolve\n{}",
        out.context()
    );
    assert_eq!(
        out.report("next"),
        Some("ok:5"),
        "the worker did not run the next task\n{}",
        out.context()
    );
}

/// Was a bug, fixed in 62ec005; before the fix: a detached task (its `JoinHandle` dropped)
/// that panics with a payload whose `Drop` panics with a payload whose `Drop` panics too.
/// `Cell::complete` (task/raw.rs) drops the unread result with `let _ =
/// self.set_stage(Stage::Consumed)`: the first drop panic is caught, and its payload is
/// then dropped plainly, outside any `catch_unwind`, on the worker, which dies
/// (`waker::ignore_panic` handles this very case for wakers by forgetting the second
/// payload).
fn child_bad_detached_payload() {
    let rt = lone_worker();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let h = rt.spawn(async move {
        let _ = go_rx.recv_timeout(Duration::from_secs(5));
        panic_any(Bomb(2));
    });
    // Detached before it completes, so the task itself drops its unread result.
    drop(h);
    go_tx.send(()).unwrap();
    let next = try_join(rt.spawn(async { 5 }), LOST_AFTER);
    println!(
        "CHILD next={}",
        next.as_ref().map_or("lost".into(), outcome)
    );
    if next.is_none() {
        leave();
    }
}

#[test]
fn a_detached_task_whose_payload_drop_panics_twice_keeps_its_worker() {
    let out = run_child("bad_detached_payload", &[]);
    out.assert_finished();
    assert_eq!(
        out.report("next"),
        Some("ok:5"),
        "the worker died dropping a detached task's panic payload\n{}",
        out.context()
    );
}

/// Was a bug, fixed in 62ec005; before the fix: a `scope` whose second panicking job has a
/// payload whose `Drop` panics. `Scope::record_panic` (forkjoin/scope.rs) drops the losing
/// payload plainly, in the job, after the job's `catch_unwind`; the drop's panic skips
/// `scope.job_done()`, and when the job ran on the scope's own worker (helping in
/// `scope.done.wait`) the panic unwinds out of `run_scope` while other jobs of the scope
/// still run and hold a pointer to its frame (`ScopePtr`): the scope "returns" before its
/// jobs finished, and they then write into a dead stack frame. Here the job still running
/// blocks until released; the child checks whether the scope ended first, and if so exits
/// at once, before that job can touch the dead frame.
fn child_scope_early_return() {
    let rt = Builder::new()
        .worker_threads(2)
        .interactive_threads(0)
        .build()
        .unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (s2, f2) = (started.clone(), finished.clone());
    let h = rt.spawn(async move {
        let r = catch_unwind(AssertUnwindSafe(|| {
            weft::scope(|s| {
                s.spawn(move |_| {
                    s2.store(true, SeqCst);
                    let _ = release_rx.recv_timeout(Duration::from_secs(5));
                    f2.store(true, SeqCst);
                });
                // Let the other worker steal that job before the panicking ones come.
                let t = Instant::now();
                while !started.load(SeqCst) && t.elapsed() < Duration::from_secs(3) {
                    std::thread::sleep(ms(1));
                }
                s.spawn(|_| panic_any(Bomb(1)));
                s.spawn(|_| panic_any(Bomb(1)));
            })
        }));
        // The resumed payload is a `Bomb(1)`: not dropped here.
        r.map_err(std::mem::forget).is_err()
    });
    let t = Instant::now();
    while !h.is_finished() && t.elapsed() < ms(1500) {
        std::thread::sleep(ms(5));
    }
    if h.is_finished() {
        // The scope ended while one of its jobs still runs: leave before that job
        // writes into the scope's dead frame.
        println!("CHILD early=true");
        leave();
    }
    println!("CHILD early=false");
    release_tx.send(()).unwrap();
    let r = try_join(h, 5);
    println!("CHILD scope={}", r.as_ref().map_or("lost".into(), outcome));
    assert!(finished.load(SeqCst));
}

/// `weft::join` where both halves panic and `b`'s payload's `Drop` panics: `a`'s panic
/// comes back to the caller. `b`'s payload used to be dropped plainly by the guard that
/// finishes `b` while `a` unwinds (`FinishOnUnwind`, `join_plain`'s `run_after_panic`),
/// and its panic escaping a destructor during unwinding aborted the process. From a
/// worker (a task) and from a plain thread (the job goes to the pool).
fn child_join_both_panic() {
    let rt = lone_worker();
    let both = || {
        catch_unwind(AssertUnwindSafe(|| {
            weft::join(|| panic!("a panics"), || -> () { panic_any(Bomb(1)) })
        }))
        .map_err(|p| common::panic_message(&*p).unwrap_or_default())
    };
    let h = rt.spawn(async move { both().unwrap_err() });
    let task = match try_join(h, 5) {
        Some(Ok(m)) => m,
        Some(Err(e)) => outcome::<()>(&Err(e)),
        None => "lost".into(),
    };
    println!("CHILD task={task}");
    let _in = rt.enter();
    println!("CHILD thread={}", both().unwrap_err());
}

#[test]
fn join_with_both_halves_panicking_and_a_bad_payload_returns_a_panic() {
    let out = run_child("join_both_panic", &[]);
    out.assert_finished();
    assert_eq!(out.report("task"), Some("a panics"), "{}", out.context());
    assert_eq!(out.report("thread"), Some("a panics"), "{}", out.context());
}

#[test]
fn a_scope_returns_only_after_its_jobs_even_when_a_payload_drop_panics() {
    let out = run_child("scope_early_return", &[]);
    out.assert_finished();
    assert_eq!(
        out.report("early"),
        Some("false"),
        "the scope ended while one of its jobs was still running\n{}",
        out.context()
    );
    // The scope resumes a panic (the first job's) once every job finished.
    assert_eq!(out.report("scope"), Some("ok:true"), "{}", out.context());
}

/// Was a bug, fixed in 62ec005; before the fix: a `scope` whose body panics and one of
/// whose jobs panics too. `run_scope` (forkjoin/scope.rs) swaps the job's payload out of
/// `scope.panic` and then resumes the body's panic (`Err(p) => resume_unwind(p)`) without
/// freeing it: the job's payload (a `Box` made by `record_panic`) is leaked and never
/// dropped.
#[test]
fn a_scope_drops_a_jobs_panic_payload_when_its_body_panicked_too() {
    let drops = counter();
    let d = drops.clone();
    let rt = common::workers(2);
    let r = watchdog(20, move || {
        let _in = rt.enter();
        catch_unwind(AssertUnwindSafe(|| {
            weft::scope(|s| {
                s.spawn(move |_| panic_any(DropCounter(d)));
                panic!("the body panics");
            })
        }))
        .map_err(|p| common::panic_message(&*p))
    });
    assert_eq!(r.unwrap_err().as_deref(), Some("the body panics"));
    assert_eq!(
        load(&drops),
        1,
        "the job's panic payload was leaked (never dropped)"
    );
}

/// Was a bug, fixed in 62ec005; before the fix: an `on_thread_start` hook that panics on
/// the only base worker. The worker thread dies before its loop starts
/// (`WorkerThreads::spawn`, runtime/mod.rs, calls the hook outside any `catch_unwind`);
/// `build()` has already returned `Ok`, and every task spawned afterwards waits for ever,
/// with nothing on stderr but the hook's panic message. (A temporary worker's panicking
/// hook is handled: `ThreadExit`; a base worker's is not.) Either `build()` should fail, or
/// the runtime should still run tasks.
fn child_start_hook_panics() {
    let built = Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .on_thread_start(|| panic!("the start hook panics"))
        .build();
    let rt = match built {
        Ok(rt) => rt,
        Err(e) => {
            println!("CHILD build=error:{:?}", e.kind());
            return;
        }
    };
    println!("CHILD build=ok");
    let r = try_join(rt.spawn(async { 5 }), LOST_AFTER);
    println!("CHILD task={}", r.as_ref().map_or("lost".into(), outcome));
    if r.is_none() {
        leave();
    }
}

#[test]
fn a_start_hook_that_panics_is_an_error_or_harmless_not_a_hang() {
    let out = run_child("start_hook_panics", &[]);
    out.assert_finished();
    let build = out.report("build").unwrap_or_default();
    if build == "ok" {
        assert_eq!(
            out.report("task"),
            Some("ok:5"),
            "build() succeeded but the runtime runs no task\n{}",
            out.context()
        );
    } else {
        assert!(build.starts_with("error:"), "{}", out.context());
    }
}

/// Was a bug, fixed in 62ec005 (documented behaviour broken); before the fix: a panic
/// inside a fiber is returned through its handle, and a stack of any size is accepted
/// (rounded up to 16 KiB, "since a few frames of formatting or unwinding need several KiB",
/// stack/mod.rs `MIN_STACK_SIZE`). But with `RUST_BACKTRACE=1` (common in development and
/// CI) the default panic hook captures and prints a backtrace on the fiber's stack, which
/// overflows 16 KiB: the whole process aborts on the fiber's first panic. 32 KiB is enough.
fn child_tiny_fiber_panics() {
    let rt = common::workers(1);
    let h = on(&rt, || {
        fiber::Builder::new()
            .stack_size(0)
            .spawn(|| -> u32 { panic!("a small fiber panics") })
    });
    let r = try_join(h, 5);
    println!("CHILD fiber={}", r.as_ref().map_or("lost".into(), outcome));
}

#[test]
fn a_panic_in_a_minimum_size_fiber_with_backtraces_on_is_returned() {
    let out = run_child("tiny_fiber_panics", &[("RUST_BACKTRACE", "1")]);
    out.assert_finished();
    assert_eq!(out.report("fiber"), Some("panic"), "{}", out.context());
}

// =================================================================================
// Builder options at their extremes.

/// Counts out of range are `InvalidInput` errors that name the count, and cost nothing
/// (no thread is started for them).
#[test]
fn builder_counts_out_of_range_are_clear_errors() {
    type Set = fn(&mut Builder);
    let cases: [(&str, Set); 6] = [
        ("worker_threads", |b| {
            b.worker_threads(usize::MAX);
        }),
        ("worker_threads", |b| {
            b.worker_threads(4097);
        }),
        ("worker_threads", |b| {
            b.worker_threads(0);
        }),
        ("interactive_threads", |b| {
            b.worker_threads(1).interactive_threads(usize::MAX);
        }),
        ("interactive_threads", |b| {
            b.worker_threads(1).interactive_threads(4097);
        }),
        ("max_blocking_threads", |b| {
            b.worker_threads(1).max_blocking_threads(0);
        }),
    ];
    for (what, set) in cases {
        let mut b = Builder::new();
        set(&mut b);
        let t = Instant::now();
        let err = b.build().expect_err(what);
        assert!(t.elapsed() < Duration::from_secs(2), "{what}: slow refusal");
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidInput,
            "{what}: {err}"
        );
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
}

/// Durations of zero and `Duration::MAX` for every keep-alive and the stall report, and
/// a temporary-worker cap of `usize::MAX`: the runtime runs tasks, blocking closures
/// and a task queued behind a blocked worker, and drops promptly (an idle blocking
/// thread or temporary worker kept for "ever" is still stopped).
#[test]
fn builder_durations_at_their_extremes_work_and_drop_promptly() {
    type Set = fn(&mut Builder);
    let cases: [(&str, Set); 6] = [
        ("keep_alive 0", |b| {
            b.thread_keep_alive(Duration::ZERO);
        }),
        ("keep_alive MAX", |b| {
            b.thread_keep_alive(Duration::MAX);
        }),
        ("extra keep_alive 0", |b| {
            b.extra_worker_keep_alive(Duration::ZERO);
        }),
        ("extra keep_alive MAX", |b| {
            b.extra_worker_keep_alive(Duration::MAX)
                .max_extra_workers(usize::MAX);
        }),
        ("stall 0", |b| {
            b.stall_report(Some(Duration::ZERO));
        }),
        ("stall MAX", |b| {
            b.stall_report(Some(Duration::MAX));
        }),
    ];
    watchdog(25, move || {
        for (what, set) in cases {
            let mut b = Builder::new();
            b.worker_threads(1)
                .interactive_threads(0)
                .max_extra_workers(1);
            set(&mut b);
            let rt = b.build().unwrap_or_else(|e| panic!("{what}: {e}"));
            for i in 0..3u32 {
                assert_eq!(
                    join_within(rt.spawn_blocking(move || i * 2), 5).unwrap(),
                    i * 2,
                    "{what}"
                );
            }
            // A task that blocks the only worker; the next one runs on a temporary
            // worker meanwhile (or after it).
            let blocker = rt.spawn(async { std::thread::sleep(ms(60)) });
            std::thread::sleep(ms(5));
            assert_eq!(join_within(rt.spawn(async { 7 }), 5).unwrap(), 7, "{what}");
            join_within(blocker, 5).unwrap();
            if what == "stall 0" {
                assert!(rt.stats().stalls_reported >= 1, "{what}: no stall reported");
            }
            let t = Instant::now();
            drop(rt);
            assert!(
                t.elapsed() < Duration::from_secs(3),
                "{what}: drop took {:?}",
                t.elapsed()
            );
        }
    });
}

/// Fiber builder extremes: oversized stacks are `StackSize` errors, the largest size
/// works (reserved address space only), odd sizes round up, and names of any content
/// (a NUL, multibyte characters, 10,000 bytes) come back intact.
#[test]
fn fiber_builder_extremes() {
    let rt = common::workers(1);
    for size in [usize::MAX, (1 << 30) + 1, usize::MAX / 2 + 1] {
        let err = on(&rt, || {
            fiber::Builder::new()
                .stack_size(size)
                .try_spawn(|| ())
                .expect_err("an oversized stack")
        });
        assert_eq!(err.kind(), SpawnErrorKind::StackSize, "{size}: {err}");
        assert!(err.to_string().contains(&size.to_string()), "{err}");
    }
    for size in [0, 1, 4097, 16 * 1024 + 1, 1 << 30] {
        let h = on(&rt, || {
            fiber::Builder::new().stack_size(size).spawn(move || {
                let buf = [size as u8; 4096];
                std::hint::black_box(&buf)[4095] as usize + 1
            })
        });
        assert_eq!(
            join_within(h, 10).unwrap(),
            (size as u8) as usize + 1,
            "{size}"
        );
    }
    let long: String = "é".repeat(5000);
    for name in ["", "a\0b", "naïve ünïcödé 🧵", long.as_str()] {
        let n = name.to_string();
        let h = on(&rt, || {
            fiber::Builder::new()
                .name(n)
                .spawn(|| fiber::current().unwrap().name().map(str::to_owned))
        });
        assert_eq!(join_within(h, 10).unwrap().as_deref(), Some(name));
    }
}

// =================================================================================
// Runtimes dropped where they run, nested block_on.

/// A runtime dropped inside one of its own blocking closures, its own task, its own
/// fiber, and a fiber of another runtime: each drop returns, the closure's, task's or
/// fiber's handle resolves, and a closure queued behind it (blocking cap 1) reports
/// cancellation instead of waiting for ever.
#[test]
fn a_runtime_dropped_where_it_runs_ends_and_resolves_every_handle() {
    watchdog(25, || {
        // In its own spawn_blocking closure.
        let rt = Builder::new()
            .worker_threads(1)
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let (tx, rx) = mpsc::channel::<Runtime>();
        let h = rt.spawn_blocking(move || {
            let rt = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            drop(rt);
            7
        });
        let queued = rt.spawn_blocking(|| 8);
        tx.send(rt).unwrap();
        let r = join_within(h, 10);
        assert!(
            matches!(r, Ok(7)) || r.as_ref().is_err_and(JoinError::is_cancelled),
            "{r:?}"
        );
        assert!(join_within(queued, 10).unwrap_err().is_cancelled());

        // In its own task.
        let rt = common::workers(2);
        let (tx, rx) = mpsc::channel::<Runtime>();
        let h = rt.spawn(async move {
            drop(rx.recv_timeout(Duration::from_secs(5)).unwrap());
            9
        });
        let never = counter();
        let pending = rt.spawn(common::never_ending(&never));
        tx.send(rt).unwrap();
        let r = join_within(h, 10);
        assert!(
            matches!(r, Ok(9)) || r.as_ref().is_err_and(JoinError::is_cancelled),
            "{r:?}"
        );
        assert!(join_within(pending, 10).unwrap_err().is_cancelled());
        assert_eq!(load(&never), 1);

        // In its own fiber.
        let rt = common::workers(2);
        let (tx, rx) = mpsc::channel::<Runtime>();
        let h = fiber_on(&rt, move || {
            drop(rx.recv_timeout(Duration::from_secs(5)).unwrap());
            10
        });
        tx.send(rt).unwrap();
        let r = join_within(h, 10);
        assert!(
            matches!(r, Ok(10)) || r.as_ref().is_err_and(JoinError::is_cancelled),
            "{r:?}"
        );

        // In a fiber of another runtime.
        let host = common::workers(1);
        let rt = common::workers(1);
        let pending = rt.spawn(common::never_ending(&never));
        let h = fiber_on(&host, move || {
            drop(rt);
            11
        });
        assert_eq!(join_within(h, 10).unwrap(), 11);
        assert!(join_within(pending, 10).unwrap_err().is_cancelled());
        assert_eq!(load(&never), 2);
        // The host still works.
        assert_eq!(join_within(host.spawn(async { 12 }), 10).unwrap(), 12);
    });
}

/// The thread name's prefix (the runtime that ran the code).
fn runtime_name() -> String {
    let name = std::thread::current().name().unwrap_or("").to_string();
    name.rsplit_once('-')
        .map_or(name.clone(), |(p, _)| p.to_string())
}

/// `block_on` nested in `block_on` (the same runtime and another), inside a fiber, and
/// inside a task of a one-worker runtime: no deadlock, and spawns go to the runtime
/// the innermost `block_on` entered.
#[test]
fn nested_block_on_completes_and_spawns_where_entered() {
    watchdog(20, || {
        let a = common::named_runtime("s38a", 1);
        let b = common::named_runtime("s38b", 1);
        let (ha, hb) = (a.handle().clone(), b.handle().clone());
        let (ha2, hb2) = (ha.clone(), hb.clone());
        // From a plain thread.
        let got = a.block_on(async move {
            let same = ha2.block_on(async { weft::spawn(async { runtime_name() }).await.unwrap() });
            let other =
                hb2.block_on(async { weft::spawn(async { runtime_name() }).await.unwrap() });
            let back = weft::spawn(async { runtime_name() }).await.unwrap();
            (same, other, back)
        });
        assert_eq!(got, ("s38a".into(), "s38b".into(), "s38a".into()));

        // Inside a task of a one-worker runtime, twice nested.
        let (ha2, hb2) = (ha.clone(), hb.clone());
        let h = a.spawn(async move {
            ha2.block_on(async move {
                let inner =
                    hb2.block_on(async { weft::spawn(async { runtime_name() }).await.unwrap() });
                let outer = weft::spawn(async { runtime_name() }).await.unwrap();
                (inner, outer)
            })
        });
        assert_eq!(join_within(h, 10).unwrap(), ("s38b".into(), "s38a".into()));

        // Inside a fiber.
        let hb2 = hb.clone();
        let h = fiber_on(&a, move || {
            let inner =
                hb2.block_on(async { weft::spawn(async { runtime_name() }).await.unwrap() });
            let outer = weft::spawn(async { runtime_name() }).join().unwrap();
            (inner, outer)
        });
        assert_eq!(join_within(h, 10).unwrap(), ("s38b".into(), "s38a".into()));
    });
}

// =================================================================================
// Join handles, aborts and panics.

/// A value that records its drops (and a second drop, which must never happen).
struct Once(Arc<AtomicUsize>);

impl Drop for Once {
    fn drop(&mut self) {
        assert_eq!(self.0.fetch_add(1, SeqCst), 0, "dropped twice");
    }
}

/// A join from a plain thread, from a fiber and from a task, each racing an abort from
/// another thread: every join resolves, with the output or a cancellation, and what
/// the task held is dropped exactly once.
#[test]
fn joins_from_threads_fibers_and_tasks_racing_aborts_all_resolve() {
    let rt = common::workers(2);
    watchdog(20, move || {
        let (mut oks, mut cancels) = (0, 0);
        for i in 0..150u64 {
            let dropped = counter();
            let held = Once(dropped.clone());
            let yields = i % 4;
            let target = if i % 2 == 0 {
                rt.spawn(async move {
                    let _held = held;
                    for _ in 0..yields {
                        weft::task::yield_now().await;
                    }
                    i
                })
            } else {
                fiber_on(&rt, move || {
                    let _held = held;
                    for _ in 0..yields {
                        fiber::yield_now();
                    }
                    i
                })
            };
            let abort = target.abort_handle();
            let aborter = std::thread::spawn(move || {
                common::spin_for(Duration::from_micros(i * 7 % 200));
                abort.abort();
            });
            let r = match i % 3 {
                0 => join_within(target, 10),
                1 => join_within(fiber_on(&rt, move || target.join()), 10).unwrap(),
                _ => join_within(rt.spawn(target), 10).unwrap(),
            };
            aborter.join().unwrap();
            match r {
                Ok(v) => {
                    assert_eq!(v, i);
                    oks += 1;
                }
                Err(e) => {
                    assert!(e.is_cancelled(), "{e:?}");
                    cancels += 1;
                }
            }
            common::wait_until("the held value dropped", || load(&dropped) == 1);
        }
        println!("{oks} completed, {cancels} cancelled");
    });
}

/// A panic payload that counts its drops.
struct Counted(&'static str, Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
    }
}

fn payload_tag(p: &(dyn Any + Send)) -> Option<&'static str> {
    p.downcast_ref::<Counted>().map(|c| c.0)
}

/// A task that panics after its abort was requested (mid-poll) resolves with an error,
/// its worker goes on, and a task whose output panics when dropped: joined, the value
/// comes back; dropped unread after completion, the panic reaches the dropper;
/// detached, the worker survives it.
#[test]
fn panics_after_abort_and_outputs_that_panic_on_drop() {
    struct Grenade(Arc<AtomicUsize>);
    impl Drop for Grenade {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
            panic!("the output panics on drop");
        }
    }
    let rt = lone_worker();
    watchdog(20, move || {
        // Panics in the poll during which it was aborted.
        let aborted = Arc::new(AtomicBool::new(false));
        let a2 = aborted.clone();
        let h = rt.spawn(async move {
            let t = Instant::now();
            while !a2.load(SeqCst) && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(ms(1));
            }
            panic!("panics after the abort");
        });
        std::thread::sleep(ms(20));
        h.abort();
        aborted.store(true, SeqCst);
        assert!(join_within(h, 10).is_err());
        assert_eq!(join_within(rt.spawn(async { 1 }), 10).unwrap(), 1);

        // Output whose drop panics.
        let drops = counter();
        let d = drops.clone();
        let out = join_within(rt.spawn(async move { Grenade(d) }), 10).unwrap();
        assert!(catch_unwind(AssertUnwindSafe(|| drop(out))).is_err());
        let d = drops.clone();
        let h = rt.spawn(async move { Grenade(d) });
        common::wait_until("the task finished", || h.is_finished());
        assert!(
            catch_unwind(AssertUnwindSafe(|| drop(h))).is_err(),
            "the dropper sees the panic"
        );
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let d = drops.clone();
        let h = rt.spawn(async move {
            let _ = go_rx.recv_timeout(Duration::from_secs(5));
            Grenade(d)
        });
        drop(h);
        go_tx.send(()).unwrap();
        common::wait_until("the detached output dropped", || load(&drops) == 3);
        assert_eq!(
            join_within(rt.spawn(async { 2 }), 10).unwrap(),
            2,
            "the worker survived"
        );
    });
}

/// A fiber that panics while holding a weft `Mutex` guard and a `RwLock` write guard
/// releases both as it unwinds: its handle reports the panic, and another fiber takes
/// the locks and sees what was written before the panic.
#[test]
fn a_fiber_panicking_under_weft_lock_guards_releases_them() {
    let rt = common::workers(1);
    let m = Arc::new(weft::sync::Mutex::new(0u32));
    let l = Arc::new(weft::sync::RwLock::new(0u32));
    let (m2, l2) = (m.clone(), l.clone());
    let h = fiber_on(&rt, move || {
        let mut g = m2.lock_blocking();
        let mut w = l2.write_blocking();
        *g = 1;
        *w = 2;
        fiber::yield_now();
        panic!("panics holding both guards");
    });
    assert!(join_within(h, 10).unwrap_err().is_panic());
    let h = fiber_on(&rt, move || (*m.lock_blocking(), *l.read_blocking()));
    assert_eq!(join_within(h, 10).unwrap(), (1, 2));
}

/// `join` with both closures panicking resumes `a`'s payload and drops `b`'s, once;
/// `scope` with two panicking jobs resumes one payload and drops the other, once.
#[test]
fn fork_join_with_two_panics_keeps_one_payload_and_drops_the_other() {
    let rt = common::workers(2);
    watchdog(20, move || {
        let _in = rt.enter();
        for _ in 0..20 {
            let drops = counter();
            let (da, db) = (drops.clone(), drops.clone());
            let p = catch_unwind(AssertUnwindSafe(|| {
                weft::join(
                    move || panic_any(Counted("a", da)),
                    move || panic_any(Counted("b", db)),
                )
            }))
            .unwrap_err();
            assert_eq!(payload_tag(&*p), Some("a"));
            assert_eq!(load(&drops), 1, "b's payload is dropped, a's is not yet");
            drop(p);
            assert_eq!(load(&drops), 2);

            let drops = counter();
            let (d1, d2) = (drops.clone(), drops.clone());
            let p = catch_unwind(AssertUnwindSafe(|| {
                weft::scope(|s| {
                    s.spawn(move |_| panic_any(Counted("one", d1)));
                    s.spawn(move |_| panic_any(Counted("two", d2)));
                })
            }))
            .unwrap_err();
            assert!(payload_tag(&*p).is_some());
            assert_eq!(load(&drops), 1);
            drop(p);
            assert_eq!(load(&drops), 2);
        }
    });
}

// =================================================================================
// Many fibers, and stats during shutdown.

fn vm_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 10,000 fibers parked on a `Notify` nobody notifies, then the runtime dropped: every
/// handle reports cancellation, no fiber stays live, and the stacks go back to the
/// pools (bounded) or are unmapped: the address space and resident memory return to
/// near where they started.
fn child_many_fibers() {
    const N: usize = 10_000;
    let before = (fiber::stats(), vm_kib("VmSize:"), vm_kib("VmRSS:"));
    let rt = common::workers(2);
    let never = Arc::new(weft::sync::Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = on(&rt, || {
        (0..N)
            .map(|_| {
                let (n, s) = (never.clone(), started.clone());
                fiber::spawn(move || {
                    s.fetch_add(1, SeqCst);
                    n.notified_blocking();
                })
            })
            .collect()
    });
    common::wait_until("every fiber parked", || started.load(SeqCst) == N);
    let mid = fiber::stats();
    assert_eq!(mid.live_fibers, N);
    let t = Instant::now();
    drop(rt);
    let drop_ms = t.elapsed().as_millis();
    let after = (fiber::stats(), vm_kib("VmSize:"), vm_kib("VmRSS:"));
    let cancelled = hs
        .into_iter()
        .filter(|h| h.is_finished())
        .map(|h| h.join().unwrap_err().is_cancelled())
        .filter(|&c| c)
        .count();
    println!("CHILD cancelled={cancelled}");
    println!("CHILD live={}", after.0.live_fibers);
    println!("CHILD pooled={}", after.0.pooled_stacks);
    let stack = (2 << 20) + 4096;
    println!(
        "CHILD reserved_ok={}",
        after.0.stack_bytes_reserved <= (after.0.pooled_stacks as u64) * stack
    );
    println!(
        "CHILD vm_growth_mib={}",
        after.1.saturating_sub(before.1) / 1024
    );
    println!(
        "CHILD rss_growth_mib={}",
        after.2.saturating_sub(before.2) / 1024
    );
    println!("CHILD drop_ms={drop_ms}");
}

#[test]
fn ten_thousand_parked_fibers_dropped_with_their_runtime_leave_nothing_behind() {
    let out = run_child("many_fibers", &[]);
    out.assert_finished();
    let num = |k: &str| -> u64 { out.report(k).unwrap().parse().unwrap() };
    let ctx = out.context();
    assert_eq!(num("cancelled"), 10_000, "{ctx}");
    assert_eq!(num("live"), 0, "{ctx}");
    // The shared pool keeps at most 256 stacks (thread caches went there or away).
    assert!(num("pooled") <= 256 + 16, "{ctx}");
    assert_eq!(out.report("reserved_ok"), Some("true"), "{ctx}");
    // 256 pooled 2 MiB stacks are 512 MiB of address space; 10,000 were 20 GiB.
    assert!(num("vm_growth_mib") < 1024, "{ctx}");
    assert!(num("rss_growth_mib") < 64, "{ctx}");
}

/// `Stats` read over and over from another thread (through a cloned `Handle`) while the
/// runtime shuts down with tasks, fibers and blocking closures still live: no panic, no
/// hang, and once the drop returned nothing is counted live.
#[test]
fn stats_read_during_a_shutdown_are_sane() {
    watchdog(20, || {
        let rt = common::workers(2);
        let handle = rt.handle().clone();
        let never = counter();
        let notify = Arc::new(weft::sync::Notify::new());
        for _ in 0..200 {
            rt.spawn(common::never_ending(&never));
        }
        for _ in 0..50 {
            let n = notify.clone();
            fiber_on(&rt, move || n.notified_blocking());
        }
        let (tx, rx) = mpsc::channel::<()>();
        let blocking = rt.spawn_blocking(move || {
            let _ = rx.recv_timeout(ms(200));
        });
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let reader = std::thread::spawn(move || {
            let mut reads = 0u64;
            let mut max_active = 0;
            while !s2.load(SeqCst) {
                let s = handle.stats();
                max_active = max_active.max(s.active_tasks);
                assert!(s.num_workers == 2, "{s:?}");
                let _ = format!("{s}");
                reads += 1;
            }
            (reads, handle.stats())
        });
        std::thread::sleep(ms(20));
        drop(rt);
        drop(tx);
        stop.store(true, SeqCst);
        let (reads, last) = reader.join().unwrap();
        assert!(reads > 0);
        assert_eq!(last.active_tasks, 0, "{last:?}");
        assert_eq!(load(&never), 200);
        // The blocking closure was running: it finishes (or is reported cancelled).
        let r = join_within(blocking, 10);
        assert!(
            r.is_ok() || r.as_ref().is_err_and(JoinError::is_cancelled),
            "{r:?}"
        );
    });
}
