//! `Builder`: worker count, thread names and hooks.

use std::fmt;
use std::io;
use std::sync::Arc as StdArc;

use super::{env, Runtime};

use super::env::MAX_WORKERS;

/// How long a task may keep a worker before the stall report names it.
const DEFAULT_STALL: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) type Callback = StdArc<dyn Fn() + Send + Sync + 'static>;

/// Configures and builds a [`Runtime`].
///
/// ```
/// let rt = weft::Builder::new()
///     .worker_threads(2)
///     .thread_name("my-pool")
///     .on_thread_start(|| println!("worker up"))
///     .build()
///     .unwrap();
/// assert_eq!(rt.block_on(async { 1 + 1 }), 2);
/// ```
#[derive(Clone)]
pub struct Builder {
    pub(crate) worker_threads: Option<usize>,
    pub(crate) thread_name: String,
    pub(crate) on_thread_start: Option<Callback>,
    pub(crate) on_thread_stop: Option<Callback>,
    pub(crate) interactive_threads: Option<usize>,
    pub(crate) max_blocking_threads: usize,
    pub(crate) blocking_keep_alive: std::time::Duration,
    pub(crate) stall_report: Option<Option<std::time::Duration>>,
    pub(crate) max_extra_workers: Option<usize>,
    pub(crate) extra_worker_keep_alive: std::time::Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// A builder with the defaults: one worker per core (or `WEFT_WORKERS`), one
    /// interactive worker (or `WEFT_INTERACTIVE`), up to 512 blocking threads, threads
    /// named `weft-worker-N`, `weft-worker-interactive-N`, `weft-worker-blocking-N`.
    pub fn new() -> Builder {
        Builder {
            worker_threads: None,
            thread_name: "weft-worker".into(),
            on_thread_start: None,
            on_thread_stop: None,
            interactive_threads: None,
            max_blocking_threads: 512,
            blocking_keep_alive: std::time::Duration::from_secs(10),
            stall_report: None,
            max_extra_workers: None,
            extra_worker_keep_alive: std::time::Duration::from_secs(10),
        }
    }

    /// Caps the temporary workers sysmon may add to each pool at `n` (default: the
    /// pool's own worker count, or `WEFT_MAX_EXTRA_WORKERS`; an explicit call wins over
    /// the variable). Zero turns temporary workers off.
    ///
    /// When a worker has run one task or fiber for over 10 ms without returning to the
    /// scheduler (a blocking call, a long computation) while tasks wait for its pool,
    /// the monitor starts a temporary worker for the pool, at most one per 10 ms,
    /// until the pool has its base count plus `n` threads. A temporary worker runs
    /// like any other and exits after [`extra_worker_keep_alive`] of idleness.
    /// [`Stats::temp_workers_started`](crate::Stats::temp_workers_started) and
    /// [`Stats::temp_workers_retired`](crate::Stats::temp_workers_retired) count them;
    /// `num_workers` stays the base count.
    ///
    /// What it costs: while every worker is parked the monitor thread sleeps without a
    /// timeout (an idle runtime gets no periodic wake-ups from it); while a worker
    /// runs, the monitor looks at the workers' poll counters once per 5 ms. (tokio
    /// declines to do this: a blocking task there holds its worker until it returns,
    /// and the advice is `spawn_blocking`. That advice stands here too: a temporary
    /// worker is a safety net, not a blocking pool.)
    ///
    /// The same monitor hands the timer and socket drivers to a sleeping worker when
    /// the worker that held them woke to run a long poll: otherwise the other tasks'
    /// socket events and timers wait for that poll. With no worker asleep to hand them
    /// to (every worker inside a long poll), a short-lived thread of the monitor's
    /// fires the due timers and reads the sockets, so that sleeps and socket timeouts
    /// still end on time (a woken task then waits for a worker, or a temporary one).
    /// It also wakes a sleeping worker for fork-join work that a busy worker has
    /// offered at two of its looks in a row (5-10 ms with temporary workers on) with
    /// nobody taking it (the second half of a `join` whose first half runs long without
    /// joining again, after the computation's earlier joins were too short to be worth
    /// a wake). With temporary workers off and the [stall report](Self::stall_report)
    /// off there is no monitor: the timers and socket events wait (as on tokio), and
    /// such a half runs after the first (as on a one-worker runtime).
    ///
    /// [`extra_worker_keep_alive`]: Self::extra_worker_keep_alive
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let rt = weft::Builder::new().worker_threads(1).max_extra_workers(1).build().unwrap();
    /// // This task blocks the only worker...
    /// let blocker = rt.spawn(async { std::thread::sleep(Duration::from_millis(500)) });
    /// std::thread::sleep(Duration::from_millis(20));
    /// // ...yet this one still runs, on a temporary worker.
    /// let t = Instant::now();
    /// rt.spawn(async {}).join().unwrap();
    /// assert!(t.elapsed() < Duration::from_millis(450));
    /// blocker.join().unwrap();
    /// assert_eq!(rt.stats().temp_workers_started, 1);
    /// ```
    pub fn max_extra_workers(&mut self, n: usize) -> &mut Self {
        self.max_extra_workers = Some(n);
        self
    }

    /// How long a temporary worker (see [`max_extra_workers`](Self::max_extra_workers))
    /// stays idle before it exits (default 10 s). It does not exit while a fiber that
    /// started on it is alive (fibers stay on the worker they started on), nor while a
    /// task on it waits in a blocking call.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = weft::Builder::new()
    ///     .worker_threads(1)
    ///     .extra_worker_keep_alive(Duration::from_millis(50))
    ///     .build()
    ///     .unwrap();
    /// rt.spawn(async { std::thread::sleep(Duration::from_millis(200)) });
    /// std::thread::sleep(Duration::from_millis(20));
    /// rt.spawn(async {}).join().unwrap();
    /// // Once idle for 50 ms the temporary worker exits (allow for a slow machine).
    /// let t = std::time::Instant::now();
    /// while rt.stats().temp_workers_retired < rt.stats().temp_workers_started
    ///     && t.elapsed() < Duration::from_secs(10)
    /// {
    ///     std::thread::sleep(Duration::from_millis(10));
    /// }
    /// assert_eq!(rt.stats().temp_workers_retired, rt.stats().temp_workers_started);
    /// ```
    pub fn extra_worker_keep_alive(&mut self, d: std::time::Duration) -> &mut Self {
        self.extra_worker_keep_alive = d;
        self
    }

    /// The temporary-worker cap for a pool of `base` workers.
    pub(crate) fn resolved_extra_workers(&self, base: usize) -> usize {
        match self.max_extra_workers {
            Some(n) => n.min(MAX_WORKERS),
            None => env::count_or_zero("WEFT_MAX_EXTRA_WORKERS").unwrap_or(base),
        }
    }

    /// Sets the size of the interactive pool (default 1, or `WEFT_INTERACTIVE`); zero
    /// means none, and tasks spawned onto [`Pool::Interactive`](crate::Pool) then run on
    /// the default pool.
    pub fn interactive_threads(&mut self, n: usize) -> &mut Self {
        self.interactive_threads = Some(n);
        self
    }

    /// Reports on stderr, once, any task or fiber that keeps a worker for longer than
    /// `threshold` without returning to the scheduler (default: 5 s; `None` turns the
    /// report off). Without this call, `WEFT_DEBUG_STALL=0` turns it off. The report
    /// is made by the runtime's monitor thread, which also starts temporary workers
    /// (see [`max_extra_workers`](Self::max_extra_workers) for what it does and costs);
    /// with both off there is none.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = weft::Builder::new()
    ///     .stall_report(Some(Duration::from_millis(50)))
    ///     .build()
    ///     .unwrap();
    /// rt.spawn(async { std::thread::sleep(Duration::from_millis(300)) }).join().unwrap();
    /// assert!(rt.stats().stalls_reported >= 1);
    /// ```
    pub fn stall_report(&mut self, threshold: Option<std::time::Duration>) -> &mut Self {
        self.stall_report = Some(threshold);
        self
    }

    /// The stall threshold in effect, if the report is on.
    pub(crate) fn resolved_stall_report(&self) -> Option<std::time::Duration> {
        match self.stall_report {
            Some(t) => t,
            None if env::flag_default("WEFT_DEBUG_STALL", true) => Some(DEFAULT_STALL),
            None => None,
        }
    }

    /// Caps the blocking pool (default 512). Zero makes [`build`](Self::build) fail.
    pub fn max_blocking_threads(&mut self, n: usize) -> &mut Self {
        self.max_blocking_threads = n;
        self
    }

    /// How long an idle blocking-pool thread waits for work before it exits (default
    /// 10 s).
    pub fn thread_keep_alive(&mut self, d: std::time::Duration) -> &mut Self {
        self.blocking_keep_alive = d;
        self
    }

    /// Sets the number of worker threads. An explicit count wins over `WEFT_WORKERS`;
    /// zero makes [`build`](Self::build) fail.
    pub fn worker_threads(&mut self, n: usize) -> &mut Self {
        self.worker_threads = Some(n);
        self
    }

    /// Names the worker threads: `{name}-{index}`. A name with a NUL byte makes
    /// [`build`](Self::build) fail with `InvalidInput`.
    pub fn thread_name(&mut self, name: impl Into<String>) -> &mut Self {
        self.thread_name = name.into();
        self
    }

    /// Runs `f` on each worker thread (default and interactive pools) when it starts.
    /// If `f` panics, the panic is printed (by the panic hook) and the thread goes on
    /// to work.
    ///
    /// `f` runs outside the runtime's context (`Handle::try_current()` fails there;
    /// capture a [`Handle`](crate::Handle) to reach the runtime) and before the worker
    /// runs anything: a hook that blocks on the runtime's own timers or tasks may wait
    /// for ever, as every worker may be in its hook. (tokio enters the runtime for its
    /// hooks and refuses a `block_on` there.)
    pub fn on_thread_start<F: Fn() + Send + Sync + 'static>(&mut self, f: F) -> &mut Self {
        self.on_thread_start = Some(StdArc::new(f));
        self
    }

    /// Runs `f` on each worker thread (default and interactive pools) just before it
    /// exits, outside the runtime's context as
    /// [`on_thread_start`](Self::on_thread_start)'s; at shutdown no worker runs the
    /// runtime's timers any more, so a hook must not block on them. A hook may drop
    /// the runtime (a temporary worker's, which retires while the runtime lives):
    /// the shutdown does not wait for the hook's own thread.
    pub fn on_thread_stop<F: Fn() + Send + Sync + 'static>(&mut self, f: F) -> &mut Self {
        self.on_thread_stop = Some(StdArc::new(f));
        self
    }

    /// The worker count this builder will use.
    pub(crate) fn resolved_workers(&self) -> io::Result<usize> {
        let n = match self.worker_threads {
            Some(n) => n,
            None => env::count("WEFT_WORKERS").unwrap_or_else(default_workers),
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "weft: worker_threads must be at least 1 (got 0)",
            ));
        }
        if n > MAX_WORKERS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("weft: worker_threads must be at most {MAX_WORKERS} (got {n})"),
            ));
        }
        Ok(n)
    }

    /// The interactive pool size this builder will use.
    pub(crate) fn resolved_interactive(&self) -> io::Result<usize> {
        let n = match self.interactive_threads {
            Some(n) => n,
            None => env::count_or_zero("WEFT_INTERACTIVE").unwrap_or(1),
        };
        if n > MAX_WORKERS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("weft: interactive_threads must be at most {MAX_WORKERS} (got {n})"),
            ));
        }
        Ok(n)
    }

    /// The thread name prefix: refused if it holds a NUL byte, which no thread name may
    /// (std's `thread::Builder::spawn` panics on one: a runtime half started then waited
    /// for ever for a worker that never ran, found in review).
    pub(crate) fn check_thread_name(&self) -> io::Result<()> {
        if self.thread_name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "weft: thread_name must not contain a NUL byte",
            ));
        }
        Ok(())
    }

    /// The blocking-pool cap this builder will use.
    pub(crate) fn resolved_max_blocking_threads(&self) -> io::Result<usize> {
        if self.max_blocking_threads == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "weft: max_blocking_threads must be at least 1 (got 0)",
            ));
        }
        Ok(self.max_blocking_threads)
    }

    /// Starts the worker threads.
    ///
    /// Errors: a worker count of zero or over 4096, an interactive count over 4096, a
    /// blocking cap of zero or a thread name with a NUL byte (`InvalidInput`), or the
    /// system refusing to start a thread.
    ///
    /// ```
    /// let err = weft::Builder::new().worker_threads(0).build().unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn build(&mut self) -> io::Result<Runtime> {
        Runtime::start(self)
    }
}

fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("worker_threads", &self.worker_threads)
            .field("thread_name", &self.thread_name)
            .finish_non_exhaustive()
    }
}
