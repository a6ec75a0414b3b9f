//! The `wake` suite: how economically a runtime wakes its sleeping workers,
//! and what it costs while it has nothing to do. weft against tokio's
//! multi-thread runtime, both with exactly `--workers` threads (weft without
//! its interactive pool, except in `idle_interactive`).
//!
//! * `burst_N` (N = 1, 2, 8, 64, 1024) — the benchmark thread (not a
//!   runtime thread) spawns N trivial tasks into a runtime whose workers
//!   have all been idle for 20 ms (so all of them sleep), and waits until
//!   the last one has run. One measurement repeats this [`REPS`] times on one
//!   runtime (after one untimed burst) and reports means per burst:
//!   - `wall`: from the first spawn until the last task has run;
//!   - `cpu`: process CPU time (`getrusage`, user + system, all threads)
//!     from the first spawn until 20 ms after the last task ran, so that the
//!     workers' spinning and going back to sleep is counted, minus the CPU
//!     time of a 20 ms idle window just before the burst (`cpu idle`: the
//!     measuring thread's own sleep and wake-up, the same for every runtime
//!     and tens of µs on a VM);
//!   - `wakes` (weft only): futex wake calls made to wake weft's workers, per
//!     spawned task, over the same window; target <= 1;
//!   - `spurious` (weft only): wake-ups after which the worker found no work
//!     and slept again, as a share of the wake calls; target < 10 %.
//!
//!   tokio exposes no unpark count on stable, so CPU time is the figure to
//!   compare.
//! * `idle` — a fresh runtime (one trivial task run first, so every worker
//!   has started) sits idle for `--idle-secs` (default 2): process CPU time
//!   per second of idle (target for weft: < 1 ms/s), and weft's wake calls
//!   and parks during the window (target 0: nothing is due). `cpu base` is
//!   the same window measured just before, with no runtime alive: what the
//!   measuring thread's own sleep costs.
//! * `idle_timer` — as `idle` with one task sleeping for an hour, so a
//!   timer is pending but none comes due in the window.
//! * `idle_interactive` — weft only: as `idle`, with weft's default
//!   interactive pool of one thread.
//!
//! The idle cases are one measurement per runtime (one round, not 11): they
//! take seconds each and count events that should not happen at all.

use std::sync::atomic::Ordering::AcqRel;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::countdown::Countdown;
use crate::cputime::CpuClock;
use crate::harness::{Case, Metric, Options, Suite, Target, Unit};
use crate::runtimes::{build, PoolCounters, Rt, TimeRt, Tokio, Weft};

/// Contenders, in the index order the cases use.
pub const CONTENDERS: &[&str] = &[Weft::NAME, Tokio::NAME];

/// Burst sizes.
const BURSTS: [usize; 5] = [1, 2, 8, 64, 1024];
/// Timed bursts per measurement.
pub const REPS: u32 = 16;
/// Idle time before a burst (so every worker sleeps) and after it (so the
/// workers' way back to sleep is counted).
const SETTLE: Duration = Duration::from_millis(20);

/// The `wake` suite.
pub fn suite() -> Suite {
    let mut cases: Vec<Case> = BURSTS
        .iter()
        .map(|&n| {
            let metrics = vec![
                Metric::new("wall", "burst", Unit::Ns),
                Metric::new("cpu", "burst", Unit::Ns),
                Metric::new("cpu idle", "20 ms", Unit::Ns),
                Metric::new("wakes", "insert", Unit::Count).target(Target::AtMost(1.0)),
                Metric::new("spurious", "wake", Unit::Percent).target(Target::Below(10.0)),
            ];
            Case::new(
                &format!("burst_{n}"),
                metrics,
                move |index, opts| match index {
                    0 => burst::<Weft>(n, opts.workers),
                    1 => burst::<Tokio>(n, opts.workers),
                    _ => unreachable!("no contender #{index}"),
                },
            )
        })
        .collect();
    let idle_case = |name: &str, measure: fn(usize, &Options) -> Vec<f64>| {
        let metrics = vec![
            Metric::new("cpu", "s idle", Unit::Ns).target(Target::Below(1e6)),
            Metric::new("cpu base", "s idle", Unit::Ns),
            Metric::new("wakes", "window", Unit::Count).target(Target::AtMost(0.0)),
            Metric::new("parks", "window", Unit::Count).target(Target::AtMost(0.0)),
        ];
        Case::new(name, metrics, measure).rounds(1)
    };
    cases.push(idle_case("idle", |index, opts| match index {
        0 => idle(|| build::<Weft>(opts.workers, true), opts.idle, false),
        1 => idle(|| build::<Tokio>(opts.workers, true), opts.idle, false),
        _ => unreachable!("no contender #{index}"),
    }));
    cases.push(idle_case("idle_timer", |index, opts| match index {
        0 => idle(|| build::<Weft>(opts.workers, true), opts.idle, true),
        1 => idle(|| build::<Tokio>(opts.workers, true), opts.idle, true),
        _ => unreachable!("no contender #{index}"),
    }));
    cases.push(idle_case("idle_interactive", |index, opts| match index {
        0 => idle(
            || Weft::with_pools(opts.workers, 1).expect("cannot build weft"),
            opts.idle,
            false,
        ),
        _ => vec![f64::NAN; 4],
    }));
    Suite {
        command: "wake",
        contenders: CONTENDERS,
        cases,
        notes: vec![
            format!(
                "burst_N: N spawns from a plain thread into an idle runtime; means over {REPS} bursts per round; \
                 cpu = process CPU (user+sys) until 20 ms after the burst minus that of a 20 ms idle window \
                 before it (cpu idle); wakes/spurious are weft's counters (tokio has none on stable)"
            ),
            "idle*: one measurement per runtime (1 round, not 11); cpu per second of idle; \
             cpu base = the same window with no runtime alive; wakes/parks are weft's counters over the window; idle_interactive is weft with 1 interactive worker"
                .to_string(),
        ],
        baseline: None,
        checks: Vec::new(),
    }
}

/// Spawns `n` trivial tasks from this thread and returns once all have run.
fn spawn_burst<R: Rt>(
    rt: &R,
    n: usize,
    done_tx: &mpsc::SyncSender<()>,
    done_rx: &mpsc::Receiver<()>,
) {
    let remaining = Arc::new(Countdown::new(n));
    for _ in 0..n {
        let (remaining, done_tx) = (remaining.clone(), done_tx.clone());
        rt.spawn_detached(async move { remaining.count_down(AcqRel, &done_tx) });
    }
    done_rx.recv().unwrap();
}

/// One `burst_n` measurement: `[wall ns, net cpu ns, idle-window cpu ns,
/// wakes per insert, spurious %]`, the last two NaN for runtimes without
/// counters. Each timed burst is preceded by a 20 ms idle window whose CPU
/// time (the measuring thread's own sleep and wake-up) is subtracted from
/// the burst's.
fn burst<R: Rt>(n: usize, workers: usize) -> Vec<f64> {
    let rt = build::<R>(workers, true);
    let (done_tx, done_rx) = mpsc::sync_channel(1);
    thread::sleep(SETTLE);
    spawn_burst(&rt, n, &done_tx, &done_rx);
    thread::sleep(SETTLE);

    let (mut wall, mut cpu, mut cpu_idle) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    // `None` for a runtime without counters.
    let mut counters: Option<PoolCounters> = None;
    for _ in 0..REPS {
        // An idle window as long as the settling after the burst: what the
        // measuring thread's own sleep costs, with every worker asleep.
        let clock = CpuClock::start();
        thread::sleep(SETTLE);
        cpu_idle += clock.elapsed();

        let before = rt.pool_counters();
        let clock = CpuClock::start();
        let start = Instant::now();
        spawn_burst(&rt, n, &done_tx, &done_rx);
        wall += start.elapsed();
        thread::sleep(SETTLE);
        cpu += clock.elapsed();
        if let (Some(b), Some(a)) = (before, rt.pool_counters()) {
            *counters.get_or_insert_default() += a.since(b);
        }
    }
    rt.shutdown();

    let reps = f64::from(REPS);
    let (wakes, spurious) = match counters {
        Some(c) => {
            let wakes = c.wake_calls as f64 / (reps * n as f64);
            let spurious = if c.wake_calls == 0 {
                0.0
            } else {
                100.0 * c.spurious_wakeups as f64 / c.wake_calls as f64
            };
            (wakes, spurious)
        }
        None => (f64::NAN, f64::NAN),
    };
    vec![
        wall.as_nanos() as f64 / reps,
        (cpu.as_nanos() as f64 - cpu_idle.as_nanos() as f64) / reps,
        cpu_idle.as_nanos() as f64 / reps,
        wakes,
        spurious,
    ]
}

/// One idle measurement: `[cpu ns per s, baseline cpu ns per s, wake
/// calls, parks]`, the last two NaN for runtimes without counters. The
/// baseline is the same window with no runtime alive (the measuring
/// thread's own sleep and wake-up), taken first. With `far_timer`, a task
/// sleeps for an hour meanwhile.
fn idle<R: TimeRt>(build: impl FnOnce() -> R, window: Duration, far_timer: bool) -> Vec<f64> {
    let baseline = cpu_per_s(|| thread::sleep(window));

    let rt = build();
    // Run one task so that every worker has started and gone to sleep.
    rt.block_on(rt.spawn(async {}));
    if far_timer {
        // Created inside the task: tokio's timers need its context.
        rt.spawn_detached(async { R::sleep(Duration::from_secs(3600)).await });
    }
    thread::sleep(5 * SETTLE);

    let before = rt.pool_counters();
    let cpu = cpu_per_s(|| thread::sleep(window));
    let after = rt.pool_counters();
    rt.shutdown();

    match (before, after) {
        (Some(b), Some(a)) => {
            let d = a.since(b);
            vec![cpu, baseline, d.wake_calls as f64, d.parks as f64]
        }
        _ => vec![cpu, baseline, f64::NAN, f64::NAN],
    }
}

/// Process CPU time per second of wall time while `f` runs, in ns.
fn cpu_per_s(f: impl FnOnce()) -> f64 {
    let clock = CpuClock::start();
    let start = Instant::now();
    f();
    let cpu = clock.elapsed();
    cpu.as_nanos() as f64 / start.elapsed().as_secs_f64()
}
