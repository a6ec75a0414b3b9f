//! The `fiber` suite: weft's fibers against may's coroutines (stackful
//! coroutines on a work-stealing pool of worker threads), both with the
//! same number of worker threads.
//!
//! Every measurement runs in a fresh child process: this binary re-executed
//! with the hidden first argument [`CHILD_ARG`], which runs one job on one
//! runtime and prints its figures on one line of stdout. may keeps one
//! global scheduler per process (its worker count can be set only before
//! its first use, and its workers never stop), and resident memory is
//! process-wide, so a child per measurement keeps the contenders apart: no
//! may worker is alive while weft is measured, and vice versa. Inside the
//! child a weft runtime has `--workers` default-pool workers and no
//! interactive pool; may gets `config().set_workers(workers)` with its other
//! settings left at their defaults (so its workers are pinned to cores).
//!
//! * `spawn_join_100k` — the child's main thread spawns 100,000 fibers that
//!   each return a small value, then joins them all in order; timed from the
//!   first spawn to the last join. Warm-up: 10,000 fibers.
//! * `ping_pong_1w`, `ping_pong_2w` — two fibers pass a token back and forth
//!   100,000 times (2 switches per round trip) after 10,000 untimed round
//!   trips; timed inside the first fiber. weft: two one-slot channels
//!   ([`slot`], built on `weft::wait`); may: two
//!   `may::sync::mpsc` channels (its idiomatic channel; `recv` parks the
//!   coroutine). `_1w`: a runtime with 1 worker thread, the second fiber
//!   spawned from inside the first. `_2w`: 2 worker threads, both fibers
//!   spawned from the main thread (may: with `Builder::id(0)` and `id(1)`,
//!   which pick the worker); each spins without yielding until the other has
//!   started (at most 1 s), so they start on different workers. Where they
//!   actually ran: `start apart` is 100 % if the two started on different
//!   threads (`std::thread::current().id()`), and `apart` the share of
//!   samples (every 1,024th timed round trip, in both fibers) with the two
//!   on different threads. may moves a coroutine that another one wakes to
//!   the waker's worker, so its pair may end up on one thread.
//! * `sleep_10k` — 10,000 fibers each sleep 1 ms 10 times; total time (the
//!   ideal is ~10 ms plus timer granularity) and the mean lateness per
//!   sleep (actual - 1 ms). Warm-up: 1,000 fibers sleeping twice. A sleep
//!   that returns before its 1 ms fails the measurement (checked after the
//!   timing).
//! * `rss_per_parked_fiber` — VmRSS (/proc/self/status) before spawning
//!   10,000 fibers and once all of them are parked (weft: on a shared
//!   [`Gate`] through `weft::wait`; may: in
//!   `coroutine::park()`), 20 ms after the last one registered; (after -
//!   before) / 10,000 in KiB. `default`: each runtime's default stack (weft
//!   2 MiB reserved, may 4,096 words = 32 KiB mapped); `64k stack`: both
//!   with 64 KiB stacks (may: 8,192 words), each in its own child.
//!   `spawn+park`: the time from the first spawn until all have parked, per
//!   fiber (default stacks).
//!   may's scheduler keeps a pool of ready-made coroutines (1,000 by
//!   default, allocated when it starts, before the first reading), which
//!   the first 1,000 spawns would take; the RSS child sets its pool
//!   capacity to 1 so that every parked coroutine is counted.
//!
//! For a smoke test, `WEFT_BENCH_FIBER_SCALE=N` divides every count by N.

use std::io::Write as _;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use crate::fiber_sync::{slot, Gate, SlotReceiver, SlotSender};
use crate::harness::{Case, Check, Metric, Options, Suite, Target, Unit};
use crate::runtimes::Weft;

/// Contenders, in the index order the cases use.
pub const CONTENDERS: &[&str] = &["weft", "may"];
const MAY: usize = 1;

/// The hidden first argument that makes this binary run one measurement
/// as a child process (see [`child_main`]).
pub const CHILD_ARG: &str = "__fiber-child";
/// The child's result line starts with this, followed by the figures.
const RESULT_PREFIX: &str = "FIBER-RESULT";
/// The jobs a child runs: one per case, two for `rss_per_parked_fiber`.
const JOBS: &[&str] = &["spawn_join", "ping_pong", "sleep", "rss_default", "rss_64k"];
/// Divides every count, for smoke tests.
const SCALE_ENV: &str = "WEFT_BENCH_FIBER_SCALE";

/// Fibers spawned and joined in `spawn_join_100k`.
const SPAWNS: usize = 100_000;
/// Timed round trips in `ping_pong_*`, and untimed ones before them.
const ROUND_TRIPS: usize = 100_000;
const WARM_ROUND_TRIPS: usize = 10_000;
/// Every how many round trips both fibers note their thread.
const SAMPLE_EVERY: usize = 1_024;
/// How long a `ping_pong_2w` fiber waits for the other one to start.
const START_WAIT: Duration = Duration::from_secs(1);
/// Fibers in `sleep_10k`, sleeps per fiber, and their length.
const SLEEPERS: usize = 10_000;
const SLEEPS_EACH: u32 = 10;
const SLEEP: Duration = Duration::from_millis(1);
/// Parked fibers in `rss_per_parked_fiber`.
const PARKED: usize = 10_000;
/// The small stack of `rss_per_parked_fiber`.
const SMALL_STACK: usize = 64 * 1024;
/// How long after the last fiber registered RSS is read.
const SETTLE: Duration = Duration::from_millis(20);

/// What `fiber --help` prints above the options.
pub const HELP: &str = "\
Contenders: weft fibers vs may coroutines, each with --workers worker threads (ping_pong: 1 / 2);
every measurement runs in a fresh child process (may keeps one scheduler per process).
spawn_join_100k: the main thread spawns 100,000 fibers returning a small value, then joins them
  all; total and per fiber. Target: weft at least 2x as fast as may.
ping_pong_1w, ping_pong_2w: two fibers pass a token 100,000 round trips (2 switches each);
  weft through two one-slot channels built on weft::wait, may through two may::sync::mpsc
  channels. _1w: 1 worker thread, the second fiber spawned by the first; _2w: 2 worker threads,
  both spawned from the main thread (may: Builder::id(0) / id(1)) and held until both started;
  start apart = 100 % if they started on different threads, apart = share of sampled round
  trips with the two on different threads. Per switch, switches per second. Target: weft at
  least 2x as fast as may.
sleep_10k: 10,000 fibers each sleep 1 ms 10 times; total (ideal ~10 ms) and mean lateness.
rss_per_parked_fiber: VmRSS growth per fiber with 10,000 fibers parked (weft: on a future gate
  via weft::wait; may: coroutine::park), default stacks (weft 2 MiB reserved, may 32 KiB) and
  64 KiB stacks, each in its own child. Target: weft < 16 KiB with its default stack.
WEFT_BENCH_FIBER_SCALE=N divides every count by N (smoke tests).";

/// The counts of one run, after [`SCALE_ENV`].
#[derive(Debug, Clone, Copy)]
struct Sizes {
    spawns: usize,
    round_trips: usize,
    warm_round_trips: usize,
    sleepers: usize,
    parked: usize,
}

fn scale() -> usize {
    std::env::var(SCALE_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&d| d > 0)
        .unwrap_or(1)
}

fn sizes() -> Sizes {
    let d = scale();
    let f = |n: usize| (n / d).max(1);
    Sizes {
        spawns: f(SPAWNS),
        round_trips: f(ROUND_TRIPS),
        warm_round_trips: f(WARM_ROUND_TRIPS),
        sleepers: f(SLEEPERS),
        parked: f(PARKED),
    }
}

// ---------------------------------------------------------------- suite ----

/// The `fiber` suite.
pub fn suite(opts: &Options) -> Suite {
    let ping_pong_metrics = || {
        vec![
            Metric::new("", "switch", Unit::Ns),
            Metric::new("rate", "switch", Unit::Rate),
            Metric::new("apart", "sample", Unit::Percent),
            Metric::new("start apart", "pair", Unit::Percent),
        ]
    };
    let cases = vec![
        Case::new(
            "spawn_join_100k",
            vec![
                Metric::new("total", "100k fibers", Unit::Ns),
                Metric::new("per fiber", "fiber", Unit::Ns),
            ],
            |who, opts| run_child("spawn_join", who, opts.workers),
        ),
        Case::new("ping_pong_1w", ping_pong_metrics(), |who, _| {
            run_child("ping_pong", who, 1)
        }),
        Case::new("ping_pong_2w", ping_pong_metrics(), |who, _| {
            run_child("ping_pong", who, 2)
        }),
        Case::new(
            "sleep_10k",
            vec![
                Metric::new("total", "10k fibers", Unit::Ns),
                Metric::new("late", "sleep", Unit::Ns),
            ],
            |who, opts| run_child("sleep", who, opts.workers),
        ),
        Case::new(
            "rss_per_parked_fiber",
            vec![
                Metric::new("spawn+park", "fiber", Unit::Ns),
                Metric::new("default", "fiber, KiB", Unit::Count).target(Target::Below(16.0)),
                Metric::new("64k stack", "fiber, KiB", Unit::Count),
            ],
            |who, opts| {
                let default = run_child("rss_default", who, opts.workers);
                let small = run_child("rss_64k", who, opts.workers);
                vec![default[0], default[1], small[1]]
            },
        ),
    ];
    let s = sizes();
    let mut notes = vec![
        "every measurement in a fresh child process; weft without its interactive pool; \
         may with set_workers(N), other settings default (workers pinned to cores)"
            .to_string(),
        "ping_pong: weft via two one-slot channels on weft::wait, may via two may::sync::mpsc \
         channels; _1w: 1 worker thread, _2w: 2 (both fibers spawned from main, held until both \
         started); start apart / apart: the pair on different threads at the start / in sampled \
         round trips"
            .to_string(),
        "rss_per_parked_fiber: VmRSS growth / parked fibers; default = each runtime's default \
         stack (weft 2 MiB reserved, may 32 KiB); may's coroutine pool capacity set to 1 there"
            .to_string(),
    ];
    if scale() != 1 {
        notes.push(format!(
            "{SCALE_ENV}={}: spawns {}, round trips {} (+{} warm-up), sleepers {}, parked {}",
            scale(),
            s.spawns,
            s.round_trips,
            s.warm_round_trips,
            s.sleepers,
            s.parked
        ));
    }
    if opts.workers != 2 {
        notes.push(format!(
            "spawn_join, sleep and rss use {} workers; ping_pong always 1 and 2",
            opts.workers
        ));
    }
    Suite {
        command: "fiber",
        contenders: CONTENDERS,
        cases,
        notes,
        baseline: None,
        checks: vec![
            Check::new("spawn_join_100k", MAY, 2.0),
            Check::new("ping_pong_1w", MAY, 2.0),
            Check::new("ping_pong_2w", MAY, 2.0),
        ],
    }
}

/// Runs `job` for contender `who` with `workers` worker threads in a child
/// process and returns the figures it printed.
fn run_child(job: &str, who: usize, workers: usize) -> Vec<f64> {
    let exe = std::env::current_exe().expect("cannot find this executable");
    let out = Command::new(exe)
        .args([CHILD_ARG, job, CONTENDERS[who], &workers.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot start the {job} child: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the {job} child for {} failed ({}); its output: {stdout}",
        CONTENDERS[who],
        out.status
    );
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .unwrap_or_else(|| panic!("the {job} child printed no result: {stdout}"));
    line.split_whitespace()
        .map(|x| {
            x.parse::<f64>()
                .unwrap_or_else(|e| panic!("bad figure '{x}' from the {job} child: {e}"))
        })
        .collect()
}

// ---------------------------------------------------------------- child ----

/// The child process: `CHILD_ARG <job> <weft|may> <workers>`. Prints
/// `FIBER-RESULT <figures>` and exits 0, or exits 2 on bad arguments.
pub fn child_main(args: &[String]) -> ExitCode {
    crate::child::die_with_parent();
    let [job, who, workers] = args else {
        eprintln!("usage: weft-bench {CHILD_ARG} <job> <weft|may> <workers>");
        return ExitCode::from(2);
    };
    let Ok(workers) = workers.parse::<usize>() else {
        eprintln!("{CHILD_ARG}: bad worker count '{workers}'");
        return ExitCode::from(2);
    };
    if !JOBS.contains(&job.as_str()) {
        eprintln!(
            "{CHILD_ARG}: unknown job '{job}' (jobs: {})",
            JOBS.join(", ")
        );
        return ExitCode::from(2);
    }
    let figures = match who.as_str() {
        "weft" => weft_child(job, workers, sizes()),
        "may" => may_child(job, workers, sizes()),
        _ => {
            eprintln!("{CHILD_ARG}: unknown contender '{who}'");
            return ExitCode::from(2);
        }
    };
    let figures: Vec<String> = figures.iter().map(|x| format!("{x:?}")).collect();
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{RESULT_PREFIX} {}", figures.join(" "));
    let _ = stdout.flush();
    ExitCode::SUCCESS
}

/// Runs one of [`JOBS`] on a fresh weft runtime.
fn weft_child(job: &str, workers: usize, s: Sizes) -> Vec<f64> {
    let rt = Weft::with_pools(workers, 0).expect("cannot build weft");
    let figures = match job {
        "spawn_join" => spawn_join::<WeftFibers>(s),
        "ping_pong" => weft_ping_pong(workers, s),
        "sleep" => sleep::<WeftFibers>(s),
        "rss_default" => weft_rss(None, s),
        "rss_64k" => weft_rss(Some(SMALL_STACK), s),
        _ => unreachable!("unknown job {job}"),
    };
    drop(rt);
    figures
}

/// Runs one of [`JOBS`] on may, configured with `workers` workers.
fn may_child(job: &str, workers: usize, s: Sizes) -> Vec<f64> {
    // Before may's first use: it reads its configuration once, when its
    // scheduler starts.
    may::config().set_workers(workers);
    match job {
        "spawn_join" => spawn_join::<MayFibers>(s),
        "ping_pong" => may_ping_pong(workers, s),
        "sleep" => sleep::<MayFibers>(s),
        "rss_default" | "rss_64k" => {
            may::config().set_pool_capacity(1);
            // may's stack sizes are in words; an odd count would make it
            // fill the whole stack and print its usage.
            let words = (job == "rss_64k").then_some(SMALL_STACK / size_of::<usize>());
            may_rss(words, s)
        }
        _ => unreachable!("unknown job {job}"),
    }
}

// ------------------------------------------------------- both runtimes ----

/// What `spawn_join` and `sleep` need of a fiber runtime.
trait Fibers {
    type Handle<T: Send + 'static>;

    fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Self::Handle<T>;
    fn join<T: Send + 'static>(h: Self::Handle<T>) -> T;
    /// Suspends the calling fiber for `d`.
    fn sleep(d: Duration);
}

struct WeftFibers;

impl Fibers for WeftFibers {
    type Handle<T: Send + 'static> = weft::JoinHandle<T>;

    fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Self::Handle<T> {
        weft::fiber::spawn(f)
    }

    fn join<T: Send + 'static>(h: Self::Handle<T>) -> T {
        h.join().expect("weft fiber failed")
    }

    fn sleep(d: Duration) {
        weft::fiber::sleep(d);
    }
}

struct MayFibers;

impl Fibers for MayFibers {
    type Handle<T: Send + 'static> = may::coroutine::JoinHandle<T>;

    fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Self::Handle<T> {
        // may's spawn is unsafe because a coroutine may move between threads while it
        // holds a thread-local's address, and because a stack overflow is not caught.
        // SAFETY: the benchmark's coroutines keep no thread-local across a suspension
        // (`thread_id` reads it afresh) and use far less than their stack.
        unsafe { may::coroutine::spawn(f) }
    }

    fn join<T: Send + 'static>(h: Self::Handle<T>) -> T {
        h.join().expect("may coroutine failed")
    }

    fn sleep(d: Duration) {
        may::coroutine::sleep(d);
    }
}

/// The main thread spawns `n` fibers returning a small value, then joins
/// them in order; returns the time from the first spawn to the last join.
fn spawn_join_once<R: Fibers>(n: usize) -> Duration {
    let mut handles = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n as u64 {
        handles.push(R::spawn(move || 2 * i + 1));
    }
    let mut sum = 0u64;
    for h in handles {
        sum += R::join(h);
    }
    let elapsed = start.elapsed();
    assert_eq!(sum, (n as u64) * (n as u64), "wrong sum of fiber results");
    elapsed
}

/// `[total ns, ns per fiber]`.
fn spawn_join<R: Fibers>(s: Sizes) -> Vec<f64> {
    spawn_join_once::<R>((s.spawns / 10).max(1));
    let total = spawn_join_once::<R>(s.spawns);
    let ns = total.as_nanos() as f64;
    vec![ns, ns / s.spawns as f64]
}

/// `n` fibers each sleep [`SLEEP`] `k` times; returns the time from the
/// first spawn to the last join and the mean lateness per sleep in ns.
/// Panics if a sleep returned early.
fn sleep_once<R: Fibers>(n: usize, k: u32) -> (Duration, f64) {
    /// Sleeps that returned before [`SLEEP`] (should stay 0). Static, so a
    /// fiber carries and returns no more than before and touches it only
    /// when a sleep was early; a child process runs one `sleep_once` at a
    /// time.
    static EARLY: AtomicUsize = AtomicUsize::new(0);
    EARLY.store(0, Relaxed);
    let mut handles = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        handles.push(R::spawn(move || {
            let mut late = Duration::ZERO;
            for _ in 0..k {
                let t = Instant::now();
                R::sleep(SLEEP);
                let elapsed = t.elapsed();
                if elapsed < SLEEP {
                    EARLY.fetch_add(1, Relaxed);
                }
                late += elapsed.saturating_sub(SLEEP);
            }
            late
        }));
    }
    let late: Duration = handles.into_iter().map(R::join).sum();
    let elapsed = start.elapsed();
    // Every fiber has been joined, so its adds are visible.
    let early = EARLY.load(Relaxed);
    assert_eq!(
        early,
        0,
        "sleep returned before its duration ({early} of {} sleeps)",
        n as u64 * u64::from(k)
    );
    (elapsed, late.as_nanos() as f64 / (n as f64 * f64::from(k)))
}

/// `[total ns, mean lateness ns]`.
fn sleep<R: Fibers>(s: Sizes) -> Vec<f64> {
    sleep_once::<R>((s.sleepers / 10).max(1), 2);
    let (total, late) = sleep_once::<R>(s.sleepers, SLEEPS_EACH);
    vec![total.as_nanos() as f64, late]
}

// ------------------------------------------------------------ ping pong ----

/// The sending half of a ping-pong channel.
trait Tx: Send {
    fn send(&self, v: u64);
}

/// The receiving half of a ping-pong channel.
trait Rx: Send {
    fn recv(&self) -> u64;
}

impl Tx for SlotSender<u64> {
    fn send(&self, v: u64) {
        SlotSender::send(self, v);
    }
}

impl Rx for SlotReceiver<u64> {
    fn recv(&self) -> u64 {
        SlotReceiver::recv(self)
    }
}

impl Tx for may::sync::mpsc::Sender<u64> {
    fn send(&self, v: u64) {
        may::sync::mpsc::Sender::send(self, v).expect("may receiver gone");
    }
}

impl Rx for may::sync::mpsc::Receiver<u64> {
    fn recv(&self) -> u64 {
        may::sync::mpsc::Receiver::recv(self).expect("may sender gone")
    }
}

/// The calling thread's id, read afresh (never inlined into a loop that
/// suspends, so no thread-local address is kept across a switch).
#[inline(never)]
fn thread_id() -> ThreadId {
    thread::current().id()
}

/// Counts this fiber in and spins (without yielding its worker) until the
/// other fiber has started too, or [`START_WAIT`] has passed; so with two
/// idle workers the two start on different ones.
fn start_together(started: &AtomicUsize) {
    started.fetch_add(1, AcqRel);
    let t = Instant::now();
    while started.load(Acquire) < 2 && t.elapsed() < START_WAIT {
        std::hint::spin_loop();
    }
}

/// Where a ping-pong fiber ran: its thread when it started (after
/// [`start_together`], where that is used) and every [`SAMPLE_EVERY`]th
/// timed round trip.
struct Placement {
    start: ThreadId,
    samples: Vec<ThreadId>,
}

/// The first fiber: `warm` untimed round trips, then `n` timed ones.
/// Returns the timed part's duration and where the fiber ran.
fn ping(tx: &impl Tx, rx: &impl Rx, warm: usize, n: usize) -> (Duration, Placement) {
    let start_thread = thread_id();
    for i in 0..warm as u64 {
        tx.send(i);
        assert_eq!(rx.recv(), i + 1);
    }
    let mut samples = Vec::with_capacity(n / SAMPLE_EVERY + 1);
    let start = Instant::now();
    for i in 0..n {
        if i % SAMPLE_EVERY == 0 {
            samples.push(thread_id());
        }
        tx.send(i as u64);
        assert_eq!(rx.recv(), i as u64 + 1, "ping pong out of step");
    }
    let elapsed = start.elapsed();
    let placement = Placement {
        start: start_thread,
        samples,
    };
    (elapsed, placement)
}

/// The second fiber: answers `warm + n` tokens with token + 1; samples its
/// thread at the same round trips as [`ping`].
fn pong(rx: &impl Rx, tx: &impl Tx, warm: usize, n: usize) -> Placement {
    let start = thread_id();
    for _ in 0..warm {
        tx.send(rx.recv() + 1);
    }
    let mut samples = Vec::with_capacity(n / SAMPLE_EVERY + 1);
    for i in 0..n {
        if i % SAMPLE_EVERY == 0 {
            samples.push(thread_id());
        }
        tx.send(rx.recv() + 1);
    }
    Placement { start, samples }
}

/// `[ns per switch, switches per second, % of samples apart, 100 if the
/// two started on different threads else 0]`.
fn ping_pong_figures(n: usize, elapsed: Duration, a: &Placement, b: &Placement) -> Vec<f64> {
    assert_eq!(a.samples.len(), b.samples.len(), "unequal thread samples");
    let switches = 2.0 * n as f64;
    let apart = a
        .samples
        .iter()
        .zip(&b.samples)
        .filter(|(x, y)| x != y)
        .count();
    vec![
        elapsed.as_nanos() as f64 / switches,
        switches / elapsed.as_secs_f64(),
        100.0 * apart as f64 / a.samples.len().max(1) as f64,
        if a.start == b.start { 0.0 } else { 100.0 },
    ]
}

/// weft: one worker, the second fiber spawned by the first; or two workers,
/// both spawned from here and started apart.
fn weft_ping_pong(workers: usize, s: Sizes) -> Vec<f64> {
    let (n, warm) = (s.round_trips, s.warm_round_trips);
    let (ab_tx, ab_rx) = slot::<u64>();
    let (ba_tx, ba_rx) = slot::<u64>();
    let ((elapsed, a), b) = if workers == 1 {
        weft::fiber::spawn(move || {
            let pong = weft::fiber::spawn(move || pong(&ab_rx, &ba_tx, warm, n));
            let out = ping(&ab_tx, &ba_rx, warm, n);
            (out, pong.join().expect("pong fiber failed"))
        })
        .join()
        .expect("ping fiber failed")
    } else {
        let started = Arc::new(AtomicUsize::new(0));
        let st = started.clone();
        let ping_h = weft::fiber::spawn(move || {
            start_together(&st);
            ping(&ab_tx, &ba_rx, warm, n)
        });
        let pong_h = weft::fiber::spawn(move || {
            start_together(&started);
            pong(&ab_rx, &ba_tx, warm, n)
        });
        let a = ping_h.join().expect("ping fiber failed");
        (a, pong_h.join().expect("pong fiber failed"))
    };
    ping_pong_figures(n, elapsed, &a, &b)
}

/// may: the same shapes, with may::sync::mpsc channels; with two workers
/// the coroutines are placed with `Builder::id`.
fn may_ping_pong(workers: usize, s: Sizes) -> Vec<f64> {
    let (n, warm) = (s.round_trips, s.warm_round_trips);
    let (ab_tx, ab_rx) = may::sync::mpsc::channel::<u64>();
    let (ba_tx, ba_rx) = may::sync::mpsc::channel::<u64>();
    let ((elapsed, a), b) = if workers == 1 {
        MayFibers::join(MayFibers::spawn(move || {
            let pong_h = MayFibers::spawn(move || pong(&ab_rx, &ba_tx, warm, n));
            let out = ping(&ab_tx, &ba_rx, warm, n);
            (out, MayFibers::join(pong_h))
        }))
    } else {
        let started = Arc::new(AtomicUsize::new(0));
        let st = started.clone();
        let on = |id: usize| may::coroutine::Builder::new().id(id);
        // SAFETY: as in `MayFibers::spawn`.
        let ping_h = unsafe {
            on(0).spawn(move || {
                start_together(&st);
                ping(&ab_tx, &ba_rx, warm, n)
            })
        }
        .expect("cannot spawn a may coroutine");
        // SAFETY: as in `MayFibers::spawn`.
        let pong_h = unsafe {
            on(1).spawn(move || {
                start_together(&started);
                pong(&ab_rx, &ba_tx, warm, n)
            })
        }
        .expect("cannot spawn a may coroutine");
        let a = MayFibers::join(ping_h);
        (a, MayFibers::join(pong_h))
    };
    ping_pong_figures(n, elapsed, &a, &b)
}

// ------------------------------------------------------------------ rss ----

/// This process's resident set size in KiB, from /proc/self/status.
fn vm_rss_kib() -> f64 {
    let status =
        std::fs::read_to_string("/proc/self/status").expect("cannot read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .expect("no VmRSS in /proc/self/status")
}

/// Waits (sleeping briefly) until `done()`.
fn wait_until(done: impl Fn() -> bool) {
    while !done() {
        thread::sleep(Duration::from_micros(50));
    }
}

/// `[ns per fiber to spawn and park, KiB per parked fiber]` from `before`,
/// `start` and the number parked.
fn rss_figures(n: usize, before: f64, took: Duration) -> Vec<f64> {
    thread::sleep(SETTLE);
    let after = vm_rss_kib();
    vec![
        took.as_nanos() as f64 / n as f64,
        (after - before) / n as f64,
    ]
}

/// weft: `n` fibers parked on one gate (`stack`: bytes, or the default).
fn weft_rss(stack: Option<usize>, s: Sizes) -> Vec<f64> {
    let n = s.parked;
    // Starts the workers.
    weft::fiber::spawn(|| ()).join().expect("weft fiber failed");
    let gate = Arc::new(Gate::new());
    let mut handles = Vec::with_capacity(n);
    let before = vm_rss_kib();
    let start = Instant::now();
    for _ in 0..n {
        let gate = gate.clone();
        let builder = weft::fiber::Builder::new();
        let builder = match stack {
            Some(bytes) => builder.stack_size(bytes),
            None => builder,
        };
        handles.push(builder.spawn(move || gate.wait()));
    }
    wait_until(|| gate.waiting() == n);
    let figures = rss_figures(n, before, start.elapsed());
    gate.open();
    for h in handles {
        h.join().expect("weft fiber failed");
    }
    figures
}

/// may: `n` coroutines in `coroutine::park()` (`words`: stack size in
/// words, or the default).
fn may_rss(words: Option<usize>, s: Sizes) -> Vec<f64> {
    let n = s.parked;
    // Starts the scheduler and its workers.
    MayFibers::join(MayFibers::spawn(|| ()));
    let parked = Arc::new(AtomicUsize::new(0));
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut handles = Vec::with_capacity(n);
    let before = vm_rss_kib();
    let start = Instant::now();
    for _ in 0..n {
        let (parked, released) = (parked.clone(), released.clone());
        let builder = may::coroutine::Builder::new();
        let builder = match words {
            Some(w) => builder.stack_size(w),
            None => builder,
        };
        // SAFETY: as in `MayFibers::spawn`.
        let h = unsafe {
            builder.spawn(move || {
                parked.fetch_add(1, AcqRel);
                while !released.load(Acquire) {
                    may::coroutine::park();
                }
            })
        }
        .expect("cannot spawn a may coroutine");
        handles.push(h);
    }
    wait_until(|| parked.load(Acquire) == n);
    let figures = rss_figures(n, before, start.elapsed());
    released.store(true, std::sync::atomic::Ordering::Release);
    for h in &handles {
        h.coroutine().unpark();
    }
    for h in handles {
        MayFibers::join(h);
    }
    figures
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Sizes = Sizes {
        spawns: 200,
        round_trips: 3 * SAMPLE_EVERY,
        warm_round_trips: 10,
        sleepers: 20,
        parked: 50,
    };

    /// Runs `job` on a fresh weft runtime with `workers` workers, with that
    /// runtime entered (so fibers spawned from this thread go to it, not to
    /// another test's runtime).
    fn on_weft(workers: usize, job: impl FnOnce() -> Vec<f64>) -> Vec<f64> {
        let rt = Weft::with_pools(workers, 0).expect("cannot build weft");
        let out = rt.runtime().block_on(async move { job() });
        drop(rt);
        out
    }

    #[test]
    fn weft_jobs_report_sane_figures() {
        let v = on_weft(2, || spawn_join::<WeftFibers>(TINY));
        assert!(v[0] > 0.0 && (v[1] - v[0] / TINY.spawns as f64).abs() < 1e-6);

        let v = on_weft(1, || weft_ping_pong(1, TINY));
        assert_eq!(v.len(), 4);
        assert!(v[0] > 0.0 && v[1] > 0.0);
        assert_eq!((v[2], v[3]), (0.0, 0.0), "one worker, yet apart");

        let v = on_weft(2, || weft_ping_pong(2, TINY));
        assert!(v[0] > 0.0 && (0.0..=100.0).contains(&v[2]));

        let v = on_weft(2, || sleep::<WeftFibers>(TINY));
        assert!(v[0] >= (SLEEP * SLEEPS_EACH).as_nanos() as f64);
        assert!(v[1] >= 0.0);

        let v = on_weft(2, || weft_rss(Some(SMALL_STACK), TINY));
        assert!(v[0] > 0.0 && v[1].is_finite());
    }

    #[test]
    fn slot_passes_values_in_order() {
        let out = on_weft(1, || {
            let (tx, rx) = slot::<u64>();
            let producer = weft::fiber::spawn(move || {
                for i in 0..100u64 {
                    Tx::send(&tx, i);
                }
            });
            let got: Vec<f64> = (0..100).map(|_| Rx::recv(&rx) as f64).collect();
            producer.join().unwrap();
            got
        });
        assert_eq!(out, (0..100).map(f64::from).collect::<Vec<_>>());
    }

    #[test]
    fn suite_lists_its_cases() {
        let opts = Options::for_tests();
        let s = suite(&opts);
        assert_eq!(s.command, "fiber");
        for check in &s.checks {
            assert!(s.cases.iter().any(|c| c.name == check.case));
        }
    }
}
