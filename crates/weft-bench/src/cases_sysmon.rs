//! The `sysmon` suite (issue 18): throughput of short tasks while one task blocks a
//! worker, with and without weft's temporary workers.
//!
//! Every runtime has `--workers` workers (default 2). One measurement, on a fresh
//! runtime: 1,000 untimed tasks warm it up; then [`TASKS`] short tasks (each spins
//! [`WORK`]) are spawned from the benchmark thread and timed until the last one has
//! run (*unblocked*); then a task that calls `std::thread::sleep(1 s)` is spawned and,
//! once it runs, the same [`TASKS`] tasks again (*blocked*). Reported: both rates and
//! the slowdown, unblocked rate / blocked rate (target for weft: at most 2).
//!
//! Contenders:
//! * `weft` — the default: sysmon starts a temporary worker once the sleeper has held
//!   its worker for 10 ms while tasks wait.
//! * `weft-k0` — `max_extra_workers(0)`: the sleeper's worker is lost for the second.
//! * `tokio` — the multi-thread runtime, which does not replace a blocked worker.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::countdown::Countdown;
use crate::harness::{Case, Metric, Suite, Target, Unit};
use crate::load::spin;
use crate::runtimes::{Rt, Tokio};

/// Contenders, in the index order [`measure`] uses.
pub const CONTENDERS: &[&str] = &["weft", "weft-k0", Tokio::NAME];

/// Timed tasks per pass.
pub const TASKS: usize = 10_000;
/// What one short task does.
pub const WORK: Duration = Duration::from_micros(5);
/// How long the blocking task holds its worker.
pub const BLOCK: Duration = Duration::from_secs(1);

pub const HELP: &str =
    "short_10k: on a fresh runtime of --workers workers (default 2), the time for\n\
    10,000 short tasks (each spins 5 us) spawned from a plain thread, first as is\n\
    (unblocked), then while one task blocks a worker in std::thread::sleep(1 s)\n\
    (blocked; the clock starts once the sleeper runs). Rates in tasks/s and the\n\
    slowdown unblocked/blocked (target for weft <= 2). weft: default (temporary\n\
    workers on); weft-k0: max_extra_workers(0); tokio: multi-thread runtime.\n\
    Each round blocks a worker for 1 s per contender.";

/// The `sysmon` suite.
pub fn suite() -> Suite {
    let metrics = vec![
        Metric::new("unblocked", "task", Unit::Rate),
        Metric::new("blocked", "task", Unit::Rate),
        Metric::new("slowdown", "pass", Unit::Count).target(Target::AtMost(2.0)),
    ];
    Suite {
        command: "sysmon",
        contenders: CONTENDERS,
        cases: vec![Case::new("short_10k", metrics, |index, opts| {
            measure(index, opts.workers)
        })],
        notes: vec![format!(
            "{TASKS} tasks (spin {} us each) spawned from a plain thread; blocked: while one \
             task sleeps {} s on a worker; slowdown = unblocked rate / blocked rate; \
             weft-k0 = max_extra_workers(0)",
            WORK.as_micros(),
            BLOCK.as_secs()
        )],
        baseline: None,
        checks: Vec::new(),
    }
}

/// Spawns `n` short tasks through `spawn` and returns the rate (tasks/s) from the
/// first spawn to the last task's end.
fn pass(n: usize, spawn: &dyn Fn(Box<dyn FnOnce() + Send>)) -> f64 {
    let left = Arc::new(Countdown::new(n));
    let (tx, rx) = mpsc::sync_channel(1);
    let start = Instant::now();
    for _ in 0..n {
        let (left, tx) = (left.clone(), tx.clone());
        spawn(Box::new(move || {
            spin(WORK);
            left.count_down(Relaxed, &tx);
        }));
    }
    rx.recv().expect("a task was lost");
    n as f64 / start.elapsed().as_secs_f64()
}

/// Warm-up, the unblocked pass, then the blocked pass; `[unblocked, blocked,
/// slowdown]`. `spawn` runs a closure as a task; `block` spawns the sleeper and
/// returns once it runs, with a wait for its end.
fn run(
    spawn: &dyn Fn(Box<dyn FnOnce() + Send>),
    block: &dyn Fn() -> Box<dyn FnOnce()>,
) -> Vec<f64> {
    pass(1_000, spawn);
    let unblocked = pass(TASKS, spawn);
    let wait = block();
    let blocked = pass(TASKS, spawn);
    wait();
    vec![unblocked, blocked, unblocked / blocked]
}

/// A sleeper body that says when it runs.
fn sleeper(started: mpsc::SyncSender<()>) -> impl FnOnce() + Send {
    move || {
        started.send(()).unwrap();
        std::thread::sleep(BLOCK);
    }
}

/// One measurement of contender `index` (see [`CONTENDERS`]).
fn measure(index: usize, workers: usize) -> Vec<f64> {
    match index {
        0 | 1 => {
            let mut b = weft::Builder::new();
            b.worker_threads(workers)
                .interactive_threads(0)
                .thread_name("weft-bench-worker");
            if index == 1 {
                b.max_extra_workers(0);
            }
            let rt = b.build().expect("cannot build weft");
            let spawn = |f: Box<dyn FnOnce() + Send>| drop(rt.spawn(async move { f() }));
            let block = || -> Box<dyn FnOnce()> {
                let (tx, rx) = mpsc::sync_channel(1);
                let body = sleeper(tx);
                let h = rt.spawn(async move { body() });
                rx.recv().unwrap();
                Box::new(move || h.join().unwrap())
            };
            let out = run(&spawn, &block);
            let s = rt.stats();
            // With more workers the others drain the blocked worker's queue, so no work
            // waits and sysmon rightly starts no helper.
            if index == 0 && workers <= 2 {
                assert!(s.temp_workers_started >= 1, "no temporary worker started");
            } else if index == 1 {
                assert_eq!(s.temp_workers_started, 0);
            }
            out
        }
        2 => {
            let rt = Tokio::build(workers).expect("cannot build tokio");
            let spawn = |f: Box<dyn FnOnce() + Send>| rt.spawn_detached(async move { f() });
            let block = || -> Box<dyn FnOnce()> {
                let (tx, rx) = mpsc::sync_channel(1);
                let body = sleeper(tx);
                let (done_tx, done_rx) = mpsc::sync_channel(1);
                rt.spawn_detached(async move {
                    body();
                    done_tx.send(()).unwrap();
                });
                rx.recv().unwrap();
                Box::new(move || done_rx.recv().unwrap())
            };
            let out = run(&spawn, &block);
            rt.shutdown();
            out
        }
        _ => unreachable!("no contender #{index}"),
    }
}
