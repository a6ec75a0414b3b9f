//! The `timers` suite: weft's timer wheel against tokio's (tokio built with
//! `enable_time`: its time driver, no I/O driver). Both runtimes have exactly
//! `--workers` threads (weft without its interactive pool: an idle extra
//! thread would be the one waiting for the next deadline).
//!
//! * `sleeps_100k` — one task spawns 100,000 tasks that each sleep a random
//!   0..100 ms (uniform, microsecond grain, the same seeded sequence for both
//!   runtimes); timed from the first spawn until the last sleep has fired.
//!   Reported: that total, the throughput (timers per second of it) and the
//!   mean lateness of a sleep (time from its creation to its task running
//!   again, minus its duration). Warm-up: 10,000 sleeps of 0..10 ms.
//! * `timeout_cancel` — inside a task, 1,000,000 times: create
//!   `timeout(10 s, pending())`, poll it once (so the timer is registered,
//!   as the inner future is not ready) and drop it (cancelling the timer).
//!   Reported per create + register + cancel. For tokio the loop runs
//!   `unconstrained`: with its cooperative budget spent, a tokio timer poll
//!   returns `Pending` without registering. Warm-up: 10,000 iterations.
//! * `accuracy` — while `workers` tasks keep every worker busy (spin
//!   [`BUSY_STEP`], yield, repeat), a task sleeps 10 ms 500 times in a row;
//!   reported: median and 99th percentile of the lateness (actual − 10 ms).
//!   Warm-up: 5 sleeps.
//!
//! In `sleeps_100k` and `accuracy` a sleep that returns before its duration
//! fails the measurement (checked after the timing).

use std::future::{pending, Future};
use std::pin::pin;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::{mpsc, Arc};
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::countdown::Countdown;
use crate::harness::{median, percentile, Case, Metric, Options, Suite, Unit};
use crate::load::Busy;
use crate::rng::Rng;
use crate::runtimes::{build, Rt, Spawn, TimeRt, Tokio, Weft};

/// Contenders, in the index order the cases use.
pub const CONTENDERS: &[&str] = &[Weft::NAME, Tokio::NAME];

/// Concurrent sleeps in `sleeps_100k`.
const SLEEPS: usize = 100_000;
/// Longest of those sleeps.
const MAX_SLEEP: Duration = Duration::from_millis(100);
const SEED: u64 = 0x5EED_0002;
/// Create/cancel pairs in `timeout_cancel`.
const TIMEOUTS: u32 = 1_000_000;
/// Sleeps in `accuracy`, and their length.
const ACCURACY_SLEEPS: usize = 500;
const ACCURACY_SLEEP: Duration = Duration::from_millis(10);
/// How long a busy task spins between yields in `accuracy`.
pub const BUSY_STEP: Duration = Duration::from_micros(50);

/// The `timers` suite.
pub fn suite() -> Suite {
    Suite {
        command: "timers",
        contenders: CONTENDERS,
        cases: vec![
            Case::new(
                "sleeps_100k",
                vec![
                    Metric::new("total", "100k sleeps", Unit::Ns),
                    Metric::new("rate", "timer", Unit::Rate),
                    Metric::new("late", "timer", Unit::Ns),
                ],
                on_contender::<Sleeps>,
            ),
            Case::new(
                "timeout_cancel",
                vec![Metric::new("", "create+cancel", Unit::Ns)],
                on_contender::<TimeoutCancel>,
            ),
            Case::new(
                "accuracy",
                vec![
                    Metric::new("p50 late", "10ms sleep", Unit::Ns),
                    Metric::new("p99 late", "10ms sleep", Unit::Ns),
                ],
                on_contender::<Accuracy>,
            ),
        ],
        notes: vec![
            "weft without its interactive pool; tokio with enable_time (time driver); \
             sleeps_100k: 100,000 tasks sleeping uniform 0..100 ms; late = mean lateness per sleep"
                .to_string(),
            format!(
                "timeout_cancel: {TIMEOUTS} x (timeout(10 s, pending) polled once, then dropped) in one task; \
                 accuracy: {ACCURACY_SLEEPS} sequential 10 ms sleeps while `workers` tasks spin {} µs between yields",
                BUSY_STEP.as_micros()
            ),
        ],
        baseline: None,
        checks: Vec::new(),
    }
}

/// A measurement, written once for every runtime.
trait TimerCase {
    fn run<R: TimeRt>(rt: &R, workers: usize) -> Vec<f64>;
}

fn on_contender<C: TimerCase>(index: usize, opts: &Options) -> Vec<f64> {
    match index {
        0 => fresh::<C, Weft>(opts.workers),
        1 => fresh::<C, Tokio>(opts.workers),
        _ => unreachable!("no contender #{index}"),
    }
}

/// Builds a fresh runtime, runs `C` on it, shuts it down.
fn fresh<C: TimerCase, R: TimeRt>(workers: usize) -> Vec<f64> {
    let rt = build::<R>(workers, true);
    let result = C::run(&rt, workers);
    rt.shutdown();
    result
}

struct Sleeps;

/// What the sleeping tasks of [`Sleeps`] add up, in one allocation.
#[derive(Default)]
struct Lateness {
    /// Total lateness in ns.
    late_ns: AtomicU64,
    /// Sleeps that returned before their duration (should stay 0).
    early: AtomicU64,
}

impl Sleeps {
    /// Spawns `n` sleeping tasks (durations from `seed`, below `max`) from
    /// inside a task; returns the time until the last fired and the mean
    /// lateness in ns. Panics if a sleep returned early.
    fn once<R: TimeRt>(rt: &R, n: usize, max: Duration, seed: u64) -> (Duration, f64) {
        let remaining = Arc::new(Countdown::new(n));
        let lateness = Arc::new(Lateness::default());
        let (tx, rx) = mpsc::sync_channel(1);
        let max_us = max.as_micros() as u64;
        let start = Instant::now();
        {
            let (remaining, lateness, local) = (remaining.clone(), lateness.clone(), rt.local());
            rt.spawn_detached(async move {
                let mut rng = Rng::new(seed);
                for _ in 0..n {
                    let d = Duration::from_micros(rng.below(max_us));
                    let (remaining, lateness, tx) =
                        (remaining.clone(), lateness.clone(), tx.clone());
                    local.spawn_detached(async move {
                        let created = Instant::now();
                        R::sleep(d).await;
                        let elapsed = created.elapsed();
                        if elapsed < d {
                            lateness.early.fetch_add(1, Relaxed);
                        }
                        let late = elapsed.saturating_sub(d);
                        lateness.late_ns.fetch_add(late.as_nanos() as u64, Relaxed);
                        remaining.count_down(AcqRel, &tx);
                    });
                }
            });
        }
        rx.recv().expect("a sleeping task was dropped");
        let total = start.elapsed();
        // Acquire-ordered by the countdown that sent the signal.
        let early = lateness.early.load(Relaxed);
        assert_eq!(
            early, 0,
            "sleep returned before its duration ({early} of {n})"
        );
        (total, lateness.late_ns.load(Relaxed) as f64 / n as f64)
    }
}

impl TimerCase for Sleeps {
    fn run<R: TimeRt>(rt: &R, _workers: usize) -> Vec<f64> {
        Sleeps::once(rt, SLEEPS / 10, MAX_SLEEP / 10, SEED ^ 1);
        let (total, late) = Sleeps::once(rt, SLEEPS, MAX_SLEEP, SEED);
        vec![
            total.as_nanos() as f64,
            SLEEPS as f64 / total.as_secs_f64(),
            late,
        ]
    }
}

struct TimeoutCancel;

impl TimeoutCancel {
    /// `iters` create + poll once + drop cycles inside one task; returns the
    /// time they took, measured inside the task.
    fn once<R: TimeRt>(rt: &R, iters: u32) -> Duration {
        let task = rt.spawn(R::unconstrained(async move {
            let start = Instant::now();
            let mut registered = 0u32;
            for _ in 0..iters {
                let mut t = pin!(R::timeout(Duration::from_secs(10), pending::<()>()));
                let pending =
                    std::future::poll_fn(|cx| Poll::Ready(t.as_mut().poll(cx).is_pending())).await;
                registered += u32::from(pending);
            }
            let elapsed = start.elapsed();
            assert_eq!(registered, iters, "a timeout completed at its first poll");
            elapsed
        }));
        rt.block_on(task)
    }
}

impl TimerCase for TimeoutCancel {
    fn run<R: TimeRt>(rt: &R, _workers: usize) -> Vec<f64> {
        TimeoutCancel::once(rt, 10_000);
        let elapsed = TimeoutCancel::once(rt, TIMEOUTS);
        vec![elapsed.as_nanos() as f64 / f64::from(TIMEOUTS)]
    }
}

struct Accuracy;

impl Accuracy {
    /// `n` sequential sleeps in one task; returns each one's lateness in ns.
    /// Panics if a sleep returned early.
    fn once<R: TimeRt>(rt: &R, n: usize) -> Vec<f64> {
        let task = rt.spawn(async move {
            let mut late = Vec::with_capacity(n);
            let mut early = 0usize;
            for _ in 0..n {
                let start = Instant::now();
                R::sleep(ACCURACY_SLEEP).await;
                let elapsed = start.elapsed();
                if elapsed < ACCURACY_SLEEP {
                    early += 1;
                }
                let l = elapsed.saturating_sub(ACCURACY_SLEEP);
                late.push(l.as_nanos() as f64);
            }
            (late, early)
        });
        let (late, early) = rt.block_on(task);
        assert_eq!(
            early, 0,
            "sleep returned before its duration ({early} of {n})"
        );
        late
    }
}

impl TimerCase for Accuracy {
    fn run<R: TimeRt>(rt: &R, workers: usize) -> Vec<f64> {
        let busy = Busy::start(rt, workers, BUSY_STEP);
        Accuracy::once(rt, 5);
        let late = Accuracy::once(rt, ACCURACY_SLEEPS);
        busy.stop(rt);
        vec![
            median(&late).unwrap_or(f64::NAN),
            percentile(&late, 99.0).unwrap_or(f64::NAN),
        ]
    }
}
