//! The `async` suite: weft against tokio's multi-thread runtime and
//! async-executor, modelled on tokio's `benches/rt_multi_threaded.rs`.
//!
//! Every case is written once, generic over [`Rt`], so all three runtimes
//! run identical code; completion is signalled through runtime-agnostic
//! channels (`std::sync::mpsc`, `futures_channel::oneshot`). Each case is a
//! type implementing [`AsyncCase`]: `prepare` does the per-runtime setup and
//! returns the iteration to time. One measurement builds a fresh runtime,
//! runs the iteration once untimed (warm-up), times `ITERS` iterations,
//! tears down and reports the mean time per unit.
//!
//! What each case measures:
//!
//! * `spawn_many_local` — spawn throughput from inside the runtime: one task
//!   spawns 10,000 trivial tasks (each decrements a counter; the last one
//!   signals the benchmark thread). Exercises the workers' local queues and
//!   stealing.
//! * `spawn_many_remote_idle` — spawn throughput from outside: the benchmark
//!   thread spawns 10,000 empty tasks into an idle runtime, then awaits all
//!   10,000 join handles in `block_on`. Exercises the injection queue, worker
//!   wake-up and join-handle completion.
//! * `spawn_many_remote_busy1` — as `remote_idle`, but `2 × workers` tasks
//!   keep the workers busy by yielding and stalling 10 µs in a loop. Shows how
//!   quickly remotely spawned tasks get through when workers mostly see yields.
//! * `spawn_many_remote_busy2` — 1,000 remote spawns while `workers` chains of
//!   tasks keep the workers busy: each task stalls 10 µs and spawns its
//!   successor. Spawned (not yielded) local work competes with the injection
//!   queue here.
//! * `ping_pong` — 1,000 pairs of tasks exchanging one message each way over
//!   oneshot channels (all spawned from inside the runtime). Measures the
//!   wake-up path: waking a task, scheduling it, and cross-worker hand-off.
//! * `yield_many` — 200 tasks each yielding 1,000 times (200,000 yields).
//!   Measures the cost of `yield_now` and re-scheduling a yielded task.
//! * `chained_spawn` — a chain 1,000 tasks deep, each spawning the next one
//!   and exiting. Measures the spawn → run latency for a single runnable task
//!   (LIFO slot / local queue hand-off) rather than throughput.
//! * `spawn_await` — inside a task, spawn a trivial task and await its join
//!   handle, 1,000 times per iteration; reported per spawn+await. Measures the
//!   round trip of spawning, running and joining one task.
//! * `tokio_shape_spawn_many_local`, `tokio_shape_ping_pong` — `spawn_many_local`
//!   and `ping_pong` written exactly as tokio's `benches/rt_multi_threaded.rs`
//!   writes them: each iteration is one `block_on` on the benchmark thread, the
//!   tasks are spawned with the runtime's ambient spawn from inside it (so the
//!   first spawns are remote: the `block_on` thread is no worker), completion is
//!   a blocking `std::sync::mpsc::sync_channel` receive inside the `block_on`,
//!   and `ping_pong` hands off through `tokio::sync::oneshot` on every runtime.
//!   Kept beside the cases above, which drive and signal differently, because
//!   this shape is the one tokio users compare with.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use futures_channel::oneshot;

use crate::countdown::Countdown;
use crate::harness::{Case, Suite};
use crate::runtimes::{build, AsyncExecutor, JoinOf, Rt, Spawn, Tokio, Weft};

/// Contenders, in the index order used by [`measure`].
pub const CONTENDERS: &[&str] = &[Weft::NAME, Tokio::NAME, AsyncExecutor::NAME];

/// The `async` suite.
pub fn suite() -> Suite {
    Suite {
        command: "async",
        contenders: CONTENDERS,
        cases: vec![
            case::<SpawnManyLocal>(),
            case::<SpawnManyRemoteIdle>(),
            case::<SpawnManyRemoteBusy1>(),
            case::<SpawnManyRemoteBusy2>(),
            case::<PingPong>(),
            case::<YieldMany>(),
            case::<ChainedSpawn>(),
            case::<SpawnAwait>(),
            case::<TokioShapeSpawnManyLocal>(),
            case::<TokioShapePingPong>(),
        ],
        notes: Vec::new(),
        baseline: None,
        checks: Vec::new(),
    }
}

/// One benchmark case, written once for every runtime.
trait AsyncCase {
    /// Name in the table and for `--case`.
    const NAME: &'static str;
    /// Timed iterations per measurement (after one untimed warm-up).
    const ITERS: u32;
    /// Units per iteration; the reported time is per unit.
    const UNITS_PER_ITER: u32 = 1;
    /// What a unit is.
    const UNIT: &'static str = "iter";

    /// Sets the case up on `rt` (built with `workers` workers) and returns
    /// the iteration to time.
    fn prepare<R: Rt>(rt: &R, workers: usize) -> Prepared<'_>;
}

/// A prepared case: the iteration to time and an optional teardown that
/// runs before the runtime is shut down.
struct Prepared<'a> {
    iteration: Box<dyn FnMut() + 'a>,
    teardown: Option<Box<dyn FnOnce() + 'a>>,
}

impl<'a> Prepared<'a> {
    fn new(iteration: impl FnMut() + 'a) -> Self {
        Prepared {
            iteration: Box::new(iteration),
            teardown: None,
        }
    }

    fn with_teardown(mut self, teardown: impl FnOnce() + 'a) -> Self {
        self.teardown = Some(Box::new(teardown));
        self
    }
}

fn case<C: AsyncCase>() -> Case {
    Case::timed(C::NAME, C::UNIT, measure::<C>)
}

/// Measures case `C` on contender `index` (see [`CONTENDERS`]).
fn measure<C: AsyncCase>(index: usize, workers: usize) -> f64 {
    match index {
        0 => measure_on::<C, Weft>(workers),
        1 => measure_on::<C, Tokio>(workers),
        2 => measure_on::<C, AsyncExecutor>(workers),
        _ => unreachable!("no contender #{index}"),
    }
}

/// Fresh runtime, warm-up, timed iterations, teardown, shutdown. Returns
/// the mean nanoseconds per unit.
fn measure_on<C: AsyncCase, R: Rt>(workers: usize) -> f64 {
    let rt = build::<R>(workers, false);
    let elapsed = {
        let mut prepared = C::prepare(&rt, workers);
        (prepared.iteration)();
        let start = Instant::now();
        for _ in 0..C::ITERS {
            (prepared.iteration)();
        }
        let elapsed = start.elapsed();
        if let Some(teardown) = prepared.teardown.take() {
            teardown();
        }
        elapsed
    };
    rt.shutdown();
    elapsed.as_nanos() as f64 / (f64::from(C::ITERS) * f64::from(C::UNITS_PER_ITER))
}

/// Tasks spawned by the spawn-many cases.
const NUM_SPAWN: usize = 10_000;
/// How long a busy task occupies its worker per step.
const STALL: Duration = Duration::from_micros(10);

/// Keeps the calling worker busy for [`STALL`] without sleeping.
fn stall() {
    let start = Instant::now();
    while start.elapsed() < STALL {
        std::thread::yield_now();
    }
}

/// Remote-spawns `n` empty tasks, then awaits all their handles in
/// `block_on` (shared by the three `spawn_many_remote_*` cases).
fn spawn_remote_and_join<R: Rt>(rt: &R, handles: &mut Vec<JoinOf<R, ()>>, n: usize) {
    for _ in 0..n {
        handles.push(rt.spawn(async {}));
    }
    rt.block_on(async {
        for handle in handles.drain(..) {
            handle.await;
        }
    });
}

struct SpawnManyLocal;

impl AsyncCase for SpawnManyLocal {
    const NAME: &'static str = "spawn_many_local";
    const ITERS: u32 = 10;

    fn prepare<R: Rt>(rt: &R, _workers: usize) -> Prepared<'_> {
        let (tx, rx) = mpsc::sync_channel(1000);
        let rem = Arc::new(Countdown::new(0));
        Prepared::new(move || {
            rem.reset(NUM_SPAWN);
            let (tx, rem, local) = (tx.clone(), rem.clone(), rt.local());
            rt.spawn_detached(async move {
                for _ in 0..NUM_SPAWN {
                    let tx = tx.clone();
                    let rem = rem.clone();
                    local.spawn_detached(async move { rem.count_down(Relaxed, &tx) });
                }
            });
            rx.recv().unwrap();
        })
    }
}

struct SpawnManyRemoteIdle;

impl AsyncCase for SpawnManyRemoteIdle {
    const NAME: &'static str = "spawn_many_remote_idle";
    const ITERS: u32 = 10;

    fn prepare<R: Rt>(rt: &R, _workers: usize) -> Prepared<'_> {
        let mut handles = Vec::with_capacity(NUM_SPAWN);
        Prepared::new(move || spawn_remote_and_join(rt, &mut handles, NUM_SPAWN))
    }
}

struct SpawnManyRemoteBusy1;

impl AsyncCase for SpawnManyRemoteBusy1 {
    const NAME: &'static str = "spawn_many_remote_busy1";
    const ITERS: u32 = 10;

    fn prepare<R: Rt>(rt: &R, workers: usize) -> Prepared<'_> {
        let flag = Arc::new(AtomicBool::new(true));
        let busy: Vec<_> = (0..2 * workers)
            .map(|_| {
                let flag = flag.clone();
                rt.spawn(async move {
                    while flag.load(Relaxed) {
                        R::yield_now().await;
                        stall();
                    }
                })
            })
            .collect();
        let mut handles = Vec::with_capacity(NUM_SPAWN);
        Prepared::new(move || spawn_remote_and_join(rt, &mut handles, NUM_SPAWN)).with_teardown(
            move || {
                flag.store(false, Relaxed);
                rt.block_on(async {
                    for handle in busy {
                        handle.await;
                    }
                });
            },
        )
    }
}

struct SpawnManyRemoteBusy2;

impl AsyncCase for SpawnManyRemoteBusy2 {
    const NAME: &'static str = "spawn_many_remote_busy2";
    const ITERS: u32 = 10;

    fn prepare<R: Rt>(rt: &R, workers: usize) -> Prepared<'_> {
        const NUM_SPAWN: usize = 1_000;

        /// Spawns the next link of a busy chain; the chain ends (and says
        /// so on `done`) once `flag` is cleared.
        fn chain<S: Spawn>(spawner: S, flag: Arc<AtomicBool>, done: mpsc::Sender<()>) {
            let next = spawner.clone();
            spawner.spawn_detached(async move {
                if flag.load(Relaxed) {
                    stall();
                    chain(next, flag, done);
                } else {
                    let _ = done.send(());
                }
            });
        }

        let flag = Arc::new(AtomicBool::new(true));
        let (done_tx, done_rx) = mpsc::channel();
        for _ in 0..workers {
            let (flag, done_tx, local) = (flag.clone(), done_tx.clone(), rt.local());
            rt.spawn_detached(async move { chain(local, flag, done_tx) });
        }
        drop(done_tx);
        let mut handles = Vec::with_capacity(NUM_SPAWN);
        Prepared::new(move || spawn_remote_and_join(rt, &mut handles, NUM_SPAWN)).with_teardown(
            move || {
                flag.store(false, Relaxed);
                for _ in 0..workers {
                    done_rx.recv().expect("a busy chain was dropped");
                }
            },
        )
    }
}

struct PingPong;

impl AsyncCase for PingPong {
    const NAME: &'static str = "ping_pong";
    const ITERS: u32 = 10;

    fn prepare<R: Rt>(rt: &R, _workers: usize) -> Prepared<'_> {
        const NUM_PINGS: usize = 1_000;

        let (done_tx, done_rx) = mpsc::sync_channel(1000);
        let rem = Arc::new(Countdown::new(0));
        Prepared::new(move || {
            let (done_tx, rem, local) = (done_tx.clone(), rem.clone(), rt.local());
            rem.reset(NUM_PINGS);
            rt.spawn_detached(async move {
                for _ in 0..NUM_PINGS {
                    let (rem, done_tx, spawner) = (rem.clone(), done_tx.clone(), local.clone());
                    local.spawn_detached(async move {
                        let (tx1, rx1) = oneshot::channel();
                        let (tx2, rx2) = oneshot::channel();
                        spawner.spawn_detached(async move {
                            rx1.await.unwrap();
                            tx2.send(()).unwrap();
                        });
                        tx1.send(()).unwrap();
                        rx2.await.unwrap();
                        rem.count_down(Relaxed, &done_tx);
                    });
                }
            });
            done_rx.recv().unwrap();
        })
    }
}

struct YieldMany;

impl AsyncCase for YieldMany {
    const NAME: &'static str = "yield_many";
    const ITERS: u32 = 3;

    fn prepare<R: Rt>(rt: &R, _workers: usize) -> Prepared<'_> {
        const NUM_YIELD: usize = 1_000;
        const TASKS: usize = 200;

        let (tx, rx) = mpsc::sync_channel(TASKS);
        Prepared::new(move || {
            for _ in 0..TASKS {
                let tx = tx.clone();
                rt.spawn_detached(async move {
                    for _ in 0..NUM_YIELD {
                        R::yield_now().await;
                    }
                    tx.send(()).unwrap();
                });
            }
            for _ in 0..TASKS {
                rx.recv().unwrap();
            }
        })
    }
}

struct ChainedSpawn;

impl AsyncCase for ChainedSpawn {
    const NAME: &'static str = "chained_spawn";
    const ITERS: u32 = 20;

    fn prepare<R: Rt>(rt: &R, _workers: usize) -> Prepared<'_> {
        const DEPTH: usize = 1_000;

        fn link<S: Spawn>(spawner: S, done_tx: mpsc::SyncSender<()>, n: usize) {
            if n == 0 {
                done_tx.send(()).unwrap();
            } else {
                let next = spawner.clone();
                spawner.spawn_detached(async move { link(next, done_tx, n - 1) });
            }
        }

        let (done_tx, done_rx) = mpsc::sync_channel(1000);
        Prepared::new(move || {
            let (done_tx, local) = (done_tx.clone(), rt.local());
            rt.spawn_detached(async move { link(local, done_tx, DEPTH) });
            done_rx.recv().unwrap();
        })
    }
}

struct SpawnAwait;

impl AsyncCase for SpawnAwait {
    const NAME: &'static str = "spawn_await";
    const ITERS: u32 = 10;
    const UNITS_PER_ITER: u32 = 1_000;
    const UNIT: &'static str = "spawn+await";

    fn prepare<R: Rt>(rt: &R, _workers: usize) -> Prepared<'_> {
        Prepared::new(move || {
            let local = rt.local();
            let outer = rt.spawn(async move {
                let mut sum = 0u64;
                for i in 0..u64::from(Self::UNITS_PER_ITER) {
                    sum += local.spawn(async move { i }).await;
                }
                sum
            });
            let n = u64::from(Self::UNITS_PER_ITER);
            assert_eq!(rt.block_on(outer), n * (n - 1) / 2);
        })
    }
}

struct TokioShapeSpawnManyLocal;

impl AsyncCase for TokioShapeSpawnManyLocal {
    const NAME: &'static str = "tokio_shape_spawn_many_local";
    const ITERS: u32 = 10;

    fn prepare<R: Rt>(rt: &R, _workers: usize) -> Prepared<'_> {
        let (tx, rx) = mpsc::sync_channel(1000);
        let rem = Arc::new(AtomicUsize::new(0));
        let local = rt.local();
        Prepared::new(move || {
            rem.store(NUM_SPAWN, Relaxed);
            rt.block_on(async {
                for _ in 0..NUM_SPAWN {
                    let tx = tx.clone();
                    let rem = rem.clone();
                    local.spawn_detached(async move {
                        if 1 == rem.fetch_sub(1, Relaxed) {
                            tx.send(()).unwrap();
                        }
                    });
                }
                rx.recv().unwrap();
            });
        })
    }
}

struct TokioShapePingPong;

impl AsyncCase for TokioShapePingPong {
    const NAME: &'static str = "tokio_shape_ping_pong";
    const ITERS: u32 = 10;

    fn prepare<R: Rt>(rt: &R, _workers: usize) -> Prepared<'_> {
        const NUM_PINGS: usize = 1_000;

        let (done_tx, done_rx) = mpsc::sync_channel(1000);
        let rem = Arc::new(AtomicUsize::new(0));
        let local = rt.local();
        Prepared::new(move || {
            let done_tx = done_tx.clone();
            let rem = rem.clone();
            rem.store(NUM_PINGS, Relaxed);
            let spawner = local.clone();
            rt.block_on(async {
                spawner.clone().spawn_detached(async move {
                    for _ in 0..NUM_PINGS {
                        let rem = rem.clone();
                        let done_tx = done_tx.clone();
                        let spawner2 = spawner.clone();
                        spawner.spawn_detached(async move {
                            let (tx1, rx1) = tokio::sync::oneshot::channel::<()>();
                            let (tx2, rx2) = tokio::sync::oneshot::channel::<()>();
                            spawner2.spawn_detached(async move {
                                rx1.await.unwrap();
                                tx2.send(()).unwrap();
                            });
                            tx1.send(()).unwrap();
                            rx2.await.unwrap();
                            if 1 == rem.fetch_sub(1, Relaxed) {
                                done_tx.send(()).unwrap();
                            }
                        });
                    }
                });
                done_rx.recv().unwrap();
            });
        })
    }
}
