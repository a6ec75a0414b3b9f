//! One adapter per async runtime, so that every benchmark case is written once
//! and runs the identical code on each of them.
//!
//! * [`Rt`] is what the benchmark's own (non-runtime) thread does with a
//!   runtime: build it with a worker count, spawn into it from outside,
//!   `block_on` a future, and shut it down.
//! * [`Spawn`] is how code running *inside* a runtime task spawns more tasks.
//!   For weft and tokio this is the ambient free function (`weft::spawn`,
//!   `tokio::spawn`), exactly what user code and tokio's own benchmarks write.
//!   async-executor has no ambient spawner, so its tasks carry an
//!   `Arc<Executor>` — the idiomatic way to use that crate.
//!
//! Join handles of all three runtimes are awaited through the same shape: a
//! future that yields the task's output (a failed task panics the awaiter).

use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::ops::AddAssign;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread;
use std::time::Duration;

use async_executor::Executor;
use futures_channel::oneshot;

/// Spawning from inside a runtime task.
pub trait Spawn: Clone + Send + Sync + 'static {
    /// Awaiting it gives the task's output.
    type Join<T: Send + 'static>: Future<Output = T> + Send + Unpin + 'static;

    /// Spawns `f` and returns a handle to await its output.
    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static;

    /// Spawns `f` and lets it run to completion without a handle. The
    /// default drops the handle, which detaches a weft or tokio task.
    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.spawn(f));
    }
}

/// The join handle type of runtime `R` for output `T`.
pub type JoinOf<R, T> = <<R as Rt>::Local as Spawn>::Join<T>;

/// A multi-threaded async runtime as seen from the benchmark's own thread.
pub trait Rt: Sized + 'static {
    /// Name shown in tables and JSON.
    const NAME: &'static str;

    /// How tasks of this runtime spawn further tasks.
    type Local: Spawn;

    /// Builds a fresh runtime whose spawned tasks run on `workers` worker
    /// threads (weft: plus its one interactive worker, parked).
    fn build(workers: usize) -> io::Result<Self>;

    /// Builds a runtime whose only worker threads are the `workers` that
    /// run spawned tasks (weft: no interactive pool), for cases that count
    /// threads, CPU time or wake-ups.
    fn build_one_pool(workers: usize) -> io::Result<Self> {
        Self::build(workers)
    }

    /// The runtime's sleep/wake counters summed over its pools, where it
    /// keeps them (weft); `None` otherwise.
    fn pool_counters(&self) -> Option<PoolCounters> {
        None
    }

    /// The spawner to move into tasks so they can spawn more tasks.
    fn local(&self) -> Self::Local;

    /// Spawns from outside the runtime (a "remote" spawn).
    fn spawn<F>(&self, f: F) -> JoinOf<Self, F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static;

    /// Remote spawn without keeping a handle. The default drops the
    /// handle, which detaches a weft or tokio task.
    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.spawn(f));
    }

    /// Runs `f` to completion on the calling (non-worker) thread.
    fn block_on<F: Future>(&self, f: F) -> F::Output;

    /// The runtime's cooperative yield.
    fn yield_now() -> impl Future<Output = ()> + Send + 'static;

    /// Stops the runtime and waits for its worker threads to exit.
    fn shutdown(self) {
        drop(self);
    }
}

/// Builds a fresh `R` with `workers` workers, with [`Rt::build_one_pool`]
/// if `one_pool`, else [`Rt::build`]; panics if it cannot.
pub fn build<R: Rt>(workers: usize, one_pool: bool) -> R {
    let rt = if one_pool {
        R::build_one_pool(workers)
    } else {
        R::build(workers)
    };
    rt.unwrap_or_else(|e| panic!("cannot build {} with {workers} workers: {e}", R::NAME))
}

/// Sleep/wake counters of a runtime, summed over its pools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Futex wake calls made to wake sleeping workers.
    pub wake_calls: u64,
    /// Wake-ups after which the worker found no work and slept again.
    pub spurious_wakeups: u64,
    /// Times a worker went to sleep.
    pub parks: u64,
}

impl AddAssign for PoolCounters {
    fn add_assign(&mut self, other: PoolCounters) {
        self.wake_calls += other.wake_calls;
        self.spurious_wakeups += other.spurious_wakeups;
        self.parks += other.parks;
    }
}

impl PoolCounters {
    /// The counts accumulated since `earlier`.
    pub fn since(self, earlier: PoolCounters) -> PoolCounters {
        PoolCounters {
            wake_calls: self.wake_calls - earlier.wake_calls,
            spurious_wakeups: self.spurious_wakeups - earlier.spurious_wakeups,
            parks: self.parks - earlier.parks,
        }
    }
}

/// Timers, for runtimes that have them (weft, tokio).
pub trait TimeRt: Rt {
    /// The runtime's `sleep`.
    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send + 'static;

    /// The runtime's `timeout`: `None` if `future` did not finish in time.
    fn timeout<F: Future + Send>(
        duration: Duration,
        future: F,
    ) -> impl Future<Output = Option<F::Output>> + Send;

    /// Runs `future` exempt from the runtime's cooperative budget (tokio's
    /// `unconstrained`; weft has no budget). A tokio timer polled with its
    /// task's budget spent returns `Pending` without registering, which
    /// would let a tight loop of timer polls skip the work it measures.
    fn unconstrained<F: Future + Send>(future: F) -> impl Future<Output = F::Output> + Send;
}

/// Turns a `Result`-returning join handle (weft, tokio) into one that yields
/// the task's output and panics if the task failed.
pub struct Unwrapped<H>(H);

impl<H, T, E> Future for Unwrapped<H>
where
    H: Future<Output = Result<T, E>> + Unpin,
    E: Debug,
{
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.expect("benchmark task failed"))
    }
}

// ---------------------------------------------------------------- weft ----
//
// The weft and tokio adapters below look alike but differ in more than crate
// paths (building, pool counters, `unconstrained`); a macro for the shared
// part would be harder to read than the two short copies.

/// weft's runtime.
pub struct Weft(weft::Runtime);

/// Spawns with the ambient `weft::spawn`.
#[derive(Clone, Copy)]
pub struct WeftAmbient;

impl Spawn for WeftAmbient {
    type Join<T: Send + 'static> = Unwrapped<weft::JoinHandle<T>>;

    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Unwrapped(weft::spawn(f))
    }
}

impl Weft {
    /// A runtime with `workers` default-pool workers and `interactive`
    /// interactive-pool workers.
    pub fn with_pools(workers: usize, interactive: usize) -> io::Result<Self> {
        weft::Builder::new()
            .worker_threads(workers)
            .interactive_threads(interactive)
            .thread_name("weft-bench-worker")
            .build()
            .map(Weft)
    }

    /// The runtime itself.
    pub fn runtime(&self) -> &weft::Runtime {
        &self.0
    }
}

impl Rt for Weft {
    const NAME: &'static str = "weft";
    type Local = WeftAmbient;

    fn build(workers: usize) -> io::Result<Self> {
        Weft::with_pools(workers, 1)
    }

    fn build_one_pool(workers: usize) -> io::Result<Self> {
        Weft::with_pools(workers, 0)
    }

    fn pool_counters(&self) -> Option<PoolCounters> {
        let pools = self.0.stats().pools;
        Some(PoolCounters {
            wake_calls: pools.iter().map(|p| p.total_wake_calls).sum(),
            spurious_wakeups: pools.iter().map(|p| p.total_spurious_wakeups).sum(),
            parks: pools.iter().map(|p| p.total_parked).sum(),
        })
    }

    fn local(&self) -> WeftAmbient {
        WeftAmbient
    }

    fn spawn<F>(&self, f: F) -> JoinOf<Self, F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Unwrapped(self.0.spawn(f))
    }

    fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.0.block_on(f)
    }

    fn yield_now() -> impl Future<Output = ()> + Send + 'static {
        weft::task::yield_now()
    }
}

impl TimeRt for Weft {
    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send + 'static {
        weft::time::sleep(duration)
    }

    fn timeout<F: Future + Send>(
        duration: Duration,
        future: F,
    ) -> impl Future<Output = Option<F::Output>> + Send {
        let t = weft::time::timeout(duration, future);
        async move { t.await.ok() }
    }

    fn unconstrained<F: Future + Send>(future: F) -> impl Future<Output = F::Output> + Send {
        future
    }
}

// --------------------------------------------------------------- tokio ----

/// tokio's multi-thread runtime, built as in tokio's own
/// `benches/rt_multi_threaded.rs` (`new_multi_thread()`), with the timer
/// driver and no I/O driver (`enable_time()`: what `enable_all()` gave before
/// this crate enabled tokio's `net` feature for the `net` suite, which builds
/// its own runtime with the I/O driver). Idle workers park on a condvar, one
/// of them inside the timer driver.
pub struct Tokio(tokio::runtime::Runtime);

/// Spawns with the ambient `tokio::spawn`.
#[derive(Clone, Copy)]
pub struct TokioAmbient;

impl Spawn for TokioAmbient {
    type Join<T: Send + 'static> = Unwrapped<tokio::task::JoinHandle<T>>;

    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Unwrapped(tokio::spawn(f))
    }
}

impl Rt for Tokio {
    const NAME: &'static str = "tokio";
    type Local = TokioAmbient;

    fn build(workers: usize) -> io::Result<Self> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("tokio-bench-worker")
            .enable_time()
            .build()
            .map(Tokio)
    }

    fn local(&self) -> TokioAmbient {
        TokioAmbient
    }

    fn spawn<F>(&self, f: F) -> JoinOf<Self, F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Unwrapped(self.0.spawn(f))
    }

    fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.0.block_on(f)
    }

    fn yield_now() -> impl Future<Output = ()> + Send + 'static {
        tokio::task::yield_now()
    }
}

impl TimeRt for Tokio {
    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send + 'static {
        tokio::time::sleep(duration)
    }

    fn timeout<F: Future + Send>(
        duration: Duration,
        future: F,
    ) -> impl Future<Output = Option<F::Output>> + Send {
        let t = tokio::time::timeout(duration, future);
        async move { t.await.ok() }
    }

    fn unconstrained<F: Future + Send>(future: F) -> impl Future<Output = F::Output> + Send {
        tokio::task::unconstrained(future)
    }
}

// ------------------------------------------------------ async-executor ----

/// An `async_executor::Executor` driven by `workers` threads, each running
/// `futures_lite::future::block_on(executor.run(shutdown))`.
pub struct AsyncExecutor {
    executor: Arc<Executor<'static>>,
    stop: Vec<oneshot::Sender<()>>,
    threads: Vec<thread::JoinHandle<()>>,
}

/// Spawns through a shared handle to the executor.
#[derive(Clone)]
pub struct AsyncExecutorSpawner(Arc<Executor<'static>>);

impl Spawn for AsyncExecutorSpawner {
    type Join<T: Send + 'static> = async_executor::Task<T>;

    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.0.spawn(f)
    }

    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // Dropping an async-executor `Task` cancels it; detach instead.
        self.0.spawn(f).detach();
    }
}

impl Rt for AsyncExecutor {
    const NAME: &'static str = "async-executor";
    type Local = AsyncExecutorSpawner;

    fn build(workers: usize) -> io::Result<Self> {
        if workers == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "worker count must be at least 1",
            ));
        }
        let mut rt = AsyncExecutor {
            executor: Arc::new(Executor::new()),
            stop: Vec::with_capacity(workers),
            threads: Vec::with_capacity(workers),
        };
        for i in 0..workers {
            let (tx, rx) = oneshot::channel::<()>();
            let executor = rt.executor.clone();
            let thread = thread::Builder::new()
                .name(format!("async-executor-bench-worker-{i}"))
                .spawn(move || {
                    futures_lite::future::block_on(executor.run(async {
                        // Resolves on send or when the sender is dropped.
                        let _ = rx.await;
                    }));
                });
            match thread {
                Ok(t) => {
                    rt.stop.push(tx);
                    rt.threads.push(t);
                }
                // Dropping `rt` stops the threads started so far.
                Err(e) => return Err(e),
            }
        }
        Ok(rt)
    }

    fn local(&self) -> AsyncExecutorSpawner {
        AsyncExecutorSpawner(self.executor.clone())
    }

    fn spawn<F>(&self, f: F) -> JoinOf<Self, F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.executor.spawn(f)
    }

    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.executor.spawn(f).detach();
    }

    fn block_on<F: Future>(&self, f: F) -> F::Output {
        // Like tokio's and weft's `block_on` from a non-worker thread: the
        // future is polled on the calling thread, which does not run tasks.
        futures_lite::future::block_on(f)
    }

    fn yield_now() -> impl Future<Output = ()> + Send + 'static {
        futures_lite::future::yield_now()
    }
}

impl Drop for AsyncExecutor {
    fn drop(&mut self) {
        for tx in self.stop.drain(..) {
            let _ = tx.send(());
        }
        for t in self.threads.drain(..) {
            // A worker only dies early if a task panicked; that panic has
            // already been reported by the panic hook.
            let _ = t.join();
        }
        // Dropping the last `Arc` drops the executor and any unfinished task.
    }
}
