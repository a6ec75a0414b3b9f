//! The runtime: building workers, entering, spawning, shutting down.

mod builder;
mod env;
mod handle;
pub(crate) mod wait;

pub use builder::Builder;
pub use handle::{spawn, Handle, TryCurrentError};

use std::future::Future;
use std::io;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::scheduler::stats::Stats;
use crate::scheduler::worker::{self, Core};
use crate::scheduler::Shared;
use crate::task::JoinHandle;

/// A set of worker threads running async tasks, with work stealing between them.
///
/// Dropping the runtime stops the workers and drops the future of every task that has
/// not finished (their `JoinHandle`s then report cancellation). `WEFT_STATS=1` prints
/// the scheduler statistics at that point.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let h = rt.spawn(async { 40 + 2 });
/// assert_eq!(rt.block_on(h).unwrap(), 42);
/// ```
pub struct Runtime {
    handle: Handle,
    exits: std::sync::Arc<Exits>,
    threads: Vec<std::thread::JoinHandle<()>>,
    print_stats: bool,
}

/// Count of worker threads that have not finished, for timed shutdown.
struct Exits {
    running: Mutex<usize>,
    cv: Condvar,
}

impl Runtime {
    /// A runtime with the default configuration ([`Builder::new`]).
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// assert!(rt.stats().num_workers >= 1);
    /// ```
    pub fn new() -> io::Result<Runtime> {
        Builder::new().build()
    }

    pub(crate) fn start(b: &Builder) -> io::Result<Runtime> {
        let workers = b.resolved_workers()?;
        let verbose = env::flag("WEFT_VERBOSE");
        let print_stats = env::flag("WEFT_STATS");
        if verbose {
            eprintln!(
                "weft: starting runtime: {workers} workers named {}-N, budget {} polls/tick, \
                 local queue {} slots, global batch {}",
                b.thread_name,
                crate::scheduler::worker::BUDGET,
                crate::scheduler::queue::CAPACITY,
                crate::scheduler::worker::GLOBAL_BATCH,
            );
        }
        let (shared, locals) = Shared::new(workers);
        let exits = std::sync::Arc::new(Exits {
            running: Mutex::new(0),
            cv: Condvar::new(),
        });
        let mut rt = Runtime {
            handle: Handle {
                shared: shared.clone(),
            },
            exits: exits.clone(),
            threads: Vec::with_capacity(workers),
            print_stats,
        };
        for (index, local) in locals.into_iter().enumerate() {
            let shared = shared.clone();
            let thread_exits = exits.clone();
            let start = b.on_thread_start.clone();
            let stop = b.on_thread_stop.clone();
            *exits.running.lock().unwrap() += 1;
            let spawned = std::thread::Builder::new()
                .name(format!("{}-{index}", b.thread_name))
                .spawn(move || {
                    if let Some(f) = &start {
                        f();
                    }
                    let core = Core::new(index, shared, local);
                    core.run();
                    drop(core);
                    if let Some(f) = &stop {
                        f();
                    }
                    *thread_exits.running.lock().unwrap() -= 1;
                    thread_exits.cv.notify_all();
                });
            match spawned {
                Ok(t) => rt.threads.push(t),
                Err(e) => {
                    *exits.running.lock().unwrap() -= 1;
                    // `rt` drops here and stops the workers already started; their
                    // local queue ends for the missing workers were never handed out.
                    return Err(e);
                }
            }
        }
        Ok(rt)
    }

    /// Runs `future` to completion on the current thread, with this runtime as the
    /// current one (so [`spawn`](crate::spawn) works inside). Called from a worker
    /// thread (inside a task) it helps run other tasks instead of deadlocking.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let v = rt.block_on(async { weft::spawn(async { 1 }).await.unwrap() + 1 });
    /// assert_eq!(v, 2);
    /// ```
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// Spawns a task.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// assert_eq!(rt.spawn(async { 9 }).join().unwrap(), 9);
    /// ```
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// A handle for spawning from other threads.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.handle().clone();
    /// std::thread::spawn(move || h.spawn(async {}).join().unwrap()).join().unwrap();
    /// ```
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Scheduler statistics so far.
    ///
    /// ```
    /// let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    /// rt.spawn(async {}).join().unwrap();
    /// let s = rt.stats();
    /// assert_eq!(s.num_workers, 2);
    /// assert!(s.total_spawned >= 1);
    /// ```
    pub fn stats(&self) -> Stats {
        self.handle.stats()
    }

    /// Shuts down, waiting at most `timeout` for the workers to finish the polls they
    /// are in. Tasks not running are cancelled at once; a worker stuck in a task that
    /// never returns is left behind (detached) after the timeout, and the task it runs
    /// is cancelled if it ever returns to the scheduler.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// rt.spawn(std::future::pending::<()>());
    /// rt.shutdown_timeout(std::time::Duration::from_secs(1));
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) {
        self.shutdown(Some(timeout));
    }

    fn shutdown(&mut self, timeout: Option<Duration>) {
        let shared = &self.handle.shared;
        shared.begin_shutdown();
        // Dropped from inside one of its own tasks: that worker cannot be waited for;
        // it leaves its loop when the current poll returns.
        let on_own_worker = worker::with_current(|c| c.is_some_and(|c| c.belongs_to(shared)));
        let others_left = usize::from(on_own_worker);
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut running = self.exits.running.lock().unwrap();
        while *running > others_left {
            match deadline {
                None => running = self.exits.cv.wait(running).unwrap(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break;
                    }
                    running = self.exits.cv.wait_timeout(running, d - now).unwrap().0;
                }
            }
        }
        let all_done = *running == 0;
        let stopped = *running <= others_left;
        drop(running);
        if stopped {
            let me = std::thread::current().id();
            for t in self.threads.drain(..) {
                if t.thread().id() != me {
                    let _ = t.join();
                }
            }
        } else {
            eprintln!("weft: shutdown timed out; leaving workers stuck in tasks behind");
            self.threads.clear();
        }
        // Anything spawned or woken while the workers stopped.
        shared.cancel_all();
        debug_assert!(
            !all_done || shared.owned.is_empty(),
            "weft: a task survived shutdown"
        );
        if self.print_stats {
            eprint!("{}", shared.stats());
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.handle.shared.is_shutdown() {
            self.shutdown(None);
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.handle.shared.num_workers())
            .finish_non_exhaustive()
    }
}
