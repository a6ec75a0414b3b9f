//! The `pools` suite: how soon a latency-sensitive task starts while the
//! main pool is saturated.
//!
//! The main pool has `--workers` workers (default 2), kept busy by
//! `2 × workers` tasks that each spin for a step and yield, until told to
//! stop: 10 µs steps in `busy_10us` (short work, frequent yields), 1 ms
//! steps in `busy_1ms` (longer CPU work between yields). The benchmark thread (not a runtime thread) then spawns [`SAMPLES`]
//! probe tasks one after another, sleeping a random 0..[`MAX_GAP_US`] µs
//! between them (same seed for everyone); a probe reads the clock when it is
//! first polled and sends back the time since just before its spawn call.
//! Reported: the median and 99th percentile of that spawn → first-poll
//! latency, each the median over the rounds.
//!
//! Contenders:
//! * `weft` — one runtime with the busy default pool and one interactive
//!   worker; probes go to `spawn_on(Pool::Interactive, ..)`.
//! * `tokio` — the busy tokio runtime plus a second, one-worker tokio
//!   runtime that the probes are spawned into (tokio's way to keep a
//!   latency-sensitive lane).
//! * `weft-default` — for reference, the same weft runtime, probes spawned
//!   with plain `Runtime::spawn` into the busy default pool.
//!
//! 100 untimed probes warm each measurement up.

use std::future::Future;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::harness::{median, percentile, Case, Metric, Suite, Unit};
use crate::load::Busy;
use crate::rng::Rng;
use crate::runtimes::{Rt, Tokio, Weft};

/// Contenders, in the index order [`measure`] uses.
pub const CONTENDERS: &[&str] = &[Weft::NAME, Tokio::NAME, "weft-default"];

/// Timed probes per measurement.
pub const SAMPLES: usize = 2_000;
/// Untimed probes first.
const WARMUP: usize = 100;
/// Longest gap between two probes.
pub const MAX_GAP_US: u64 = 200;
/// The cases: name and how long a busy task spins between yields.
const STEPS: [(&str, Duration); 2] = [
    ("busy_10us", Duration::from_micros(10)),
    ("busy_1ms", Duration::from_millis(1)),
];
const SEED: u64 = 0x5EED_0001;

/// The `pools` suite.
pub fn suite() -> Suite {
    Suite {
        command: "pools",
        contenders: CONTENDERS,
        cases: STEPS
            .iter()
            .map(|&(name, step)| {
                let metrics = vec![
                    Metric::new("p50", "probe", Unit::Ns),
                    Metric::new("p99", "probe", Unit::Ns),
                ];
                Case::new(name, metrics, move |index, opts| {
                    measure(index, opts.workers, step)
                })
            })
            .collect(),
        notes: vec![format!(
            "latency from spawn (plain thread) to first poll while the main pool is saturated by \
             2 x workers tasks (spin 10 µs or 1 ms, yield); {SAMPLES} probes per round, gaps 0..{MAX_GAP_US} µs; \
             weft: spawn_on(Interactive) with 1 interactive worker; tokio: a second 1-worker runtime; \
             weft-default: plain spawn into the busy pool"
        )],
        baseline: None,
        checks: Vec::new(),
    }
}

/// What a probe runs: reports the time from `spawned` to its first poll.
async fn probe(spawned: Instant, tx: mpsc::SyncSender<Duration>) {
    let first_poll = Instant::now();
    let _ = tx.send(first_poll - spawned);
}

/// The future type of one probe.
type Probe = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs the probes, spawning each with `spawn`; returns `[p50, p99]` in ns.
fn run_probes(spawn: impl Fn(Probe)) -> Vec<f64> {
    let (tx, rx) = mpsc::sync_channel(1);
    let one = || {
        let tx = tx.clone();
        let spawned = Instant::now();
        spawn(Box::pin(probe(spawned, tx)));
        rx.recv().expect("a probe was dropped").as_nanos() as f64
    };
    for _ in 0..WARMUP {
        one();
    }
    let mut rng = Rng::new(SEED);
    let mut latencies = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        thread::sleep(Duration::from_micros(rng.below(MAX_GAP_US)));
        latencies.push(one());
    }
    vec![
        median(&latencies).unwrap_or(f64::NAN),
        percentile(&latencies, 99.0).unwrap_or(f64::NAN),
    ]
}

/// One measurement of contender `index` (see [`CONTENDERS`]).
fn measure(index: usize, workers: usize, step: Duration) -> Vec<f64> {
    match index {
        0 | 2 => {
            let rt = Weft::with_pools(workers, 1).expect("cannot build weft");
            let busy = Busy::start(&rt, 2 * workers, step);
            let r = rt.runtime();
            let result = if index == 0 {
                run_probes(|p| drop(r.spawn_on(weft::Pool::Interactive, p)))
            } else {
                run_probes(|p| drop(r.spawn(p)))
            };
            busy.stop(&rt);
            result
        }
        1 => {
            let main = Tokio::build(workers).expect("cannot build tokio");
            let lane = Tokio::build(1).expect("cannot build tokio");
            let busy = Busy::start(&main, 2 * workers, step);
            let result = run_probes(|p| lane.spawn_detached(p));
            busy.stop(&main);
            lane.shutdown();
            result
        }
        _ => unreachable!("no contender #{index}"),
    }
}
