//! Helpers of the tests of where fibers start (`review_s23`, `review_s24`): a hub of
//! two fibers tied to one worker, tasks placed away from it, drop tracking.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{mpsc, Arc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use super::{counter, load, on, TIMEOUT};
use weft::fiber;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A runtime of `workers` base workers and as many temporary ones, which retire after
/// 20 ms idle.
pub fn with_temps(workers: usize) -> weft::Runtime {
    weft::Builder::new()
        .worker_threads(workers)
        .max_extra_workers(workers)
        .extra_worker_keep_alive(ms(20))
        .build()
        .expect("failed to build the runtime")
}

/// Waits (at most 10 s) until every temporary worker that started has retired: a
/// temporary worker with a fiber counted as tied to it never does.
pub fn retired_all(rt: &weft::Runtime) -> u64 {
    let t0 = Instant::now();
    loop {
        let s = rt.stats();
        if s.temp_workers_retired == s.temp_workers_started {
            return s.temp_workers_started;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{} temporary workers started, {} retired: one keeps a fiber count",
            s.temp_workers_started,
            s.temp_workers_retired
        );
        std::thread::sleep(ms(5));
    }
}

/// A pair of fibers on one worker, one of which runs what it is sent (as a fiber on
/// that worker) until the hub is dropped: two fibers are tied to that worker while
/// the hub lives. (A lone fiber's first child starts beside it; a third fiber would be
/// handed to another worker.)
pub struct Hub {
    pub jobs: weft::chan::Sender<Box<dyn FnOnce() + Send>>,
    pub at: ThreadId,
    pub fiber: weft::JoinHandle<()>,
}

impl Hub {
    pub fn new(rt: &weft::Runtime) -> Hub {
        let (jobs, jobs_rx) = weft::chan::unbounded::<Box<dyn FnOnce() + Send>>();
        let (at_tx, at_rx) = mpsc::channel();
        let fiber = on(rt, || {
            fiber::spawn(move || {
                let start = here();
                let (stop, stopped) = weft::chan::bounded::<()>(1);
                let (up_tx, up_rx) = weft::chan::bounded(1);
                // Starts in this worker's LIFO slot, which no other worker takes from.
                let other = fiber::spawn(move || {
                    let start = here();
                    up_tx.try_send(start.0).unwrap();
                    let _ = weft::wait(stopped.recv());
                    (start, here())
                });
                let other_at = weft::wait(up_rx.recv()).unwrap();
                at_tx.send((start.0, other_at)).unwrap();
                while let Ok(job) = weft::wait(jobs_rx.recv()) {
                    job();
                    assert_eq!(here(), start, "the hub changed thread");
                }
                drop(stop);
                let (o_start, o_end) = other.join().unwrap();
                assert_eq!(o_start, o_end, "the hub's partner changed thread");
                assert_eq!(here(), start, "the hub changed thread");
            })
        });
        let (at, other_at) = at_rx
            .recv_timeout(TIMEOUT)
            .expect("hang: the hub did not start");
        assert_eq!(
            at, other_at,
            "a lone fiber's first child started on another worker"
        );
        Hub { jobs, at, fiber }
    }

    /// Spawns, from the hub's fiber (so its first poll is on the hub's worker), a fiber
    /// that runs `f`, and joins it; returns the thread it ran on.
    pub fn run_in_a_new_fiber(&self, f: impl FnOnce() + Send + 'static) -> ThreadId {
        self.run(move || {
            fiber::spawn(move || {
                f();
                std::thread::current().id()
            })
            .join()
            .unwrap()
        })
    }

    /// [`run_in_a_new_fiber`](Self::run_in_a_new_fiber) that sends on `tx`.
    pub fn send_from_a_new_fiber(&self, tx: mpsc::Sender<()>) -> ThreadId {
        self.run_in_a_new_fiber(move || {
            let _ = tx.send(());
        })
    }

    /// [`send_from_a_new_fiber`](Self::send_from_a_new_fiber) to `blocker`, a task
    /// that waits (blocking its thread) for that message: whether it got it, how long
    /// that took from the spawn, and the thread the sending fiber ran on.
    pub fn release_from_a_new_fiber(
        &self,
        blocker: weft::JoinHandle<bool>,
        tx: mpsc::Sender<()>,
    ) -> (bool, Duration, ThreadId) {
        let t0 = Instant::now();
        let sender_on = self.send_from_a_new_fiber(tx);
        let got = blocker.join().unwrap();
        (got, t0.elapsed(), sender_on)
    }

    /// Runs `f` on the hub's fiber and returns its result.
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .try_send(Box::new(move || {
                let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
            }))
            .unwrap();
        match rx.recv_timeout(TIMEOUT) {
            Ok(Ok(r)) => r,
            Ok(Err(payload)) => std::panic::resume_unwind(payload),
            Err(e) => panic!("hang: the hub's job did not finish ({e})"),
        }
    }

    /// Ends the hub's fibers and checks that none changed thread.
    pub fn close(self) {
        drop(self.jobs);
        self.fiber.join().unwrap();
    }
}

/// Spawns `fut` so that it runs on a worker of `rt` other than the hub's (from a task
/// found running there, into that worker's LIFO slot, which no other worker takes
/// from). Returns its handle and that worker's thread. Every tenth try the hub's worker
/// is kept busy for 3 ms first: a parked worker is claimed lowest index first, and the
/// hub's may be the one always claimed.
pub fn spawn_away_from<T: Send + 'static>(
    rt: &weft::Runtime,
    hub: &Hub,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> (weft::JoinHandle<T>, ThreadId) {
    let not = hub.at;
    let slot = Arc::new(std::sync::Mutex::new(Some(fut)));
    for i in 0..1_000 {
        if i % 10 == 9 {
            let (busy_tx, busy_rx) = mpsc::channel();
            hub.jobs
                .try_send(Box::new(move || {
                    let _ = busy_tx.send(());
                    std::thread::sleep(ms(3));
                }))
                .unwrap();
            busy_rx.recv_timeout(TIMEOUT).unwrap();
        }
        let slot = slot.clone();
        let placed = rt
            .spawn(async move {
                let here = std::thread::current().id();
                if here == not {
                    return None;
                }
                let fut = slot.lock().unwrap().take().unwrap();
                Some((weft::spawn(fut), here))
            })
            .join()
            .unwrap();
        if let Some(placed) = placed {
            return placed;
        }
    }
    panic!("no task of 1000 ran on another worker than {not:?}");
}

/// Blocks a worker other than the hub's with a task that waits, blocking its thread,
/// for a message (at most `patience`); returns once it waits, with its handle (`true`
/// if the message came), its thread, and the sender that ends the wait.
pub fn block_away_from(
    rt: &weft::Runtime,
    hub: &Hub,
    patience: Duration,
) -> (weft::JoinHandle<bool>, ThreadId, mpsc::Sender<()>) {
    let (msg_tx, msg_rx) = mpsc::channel::<()>();
    let (up_tx, up_rx) = mpsc::channel::<()>();
    let (blocker, at) = spawn_away_from(rt, hub, async move {
        up_tx.send(()).unwrap();
        msg_rx.recv_timeout(patience).is_ok()
    });
    up_rx.recv_timeout(TIMEOUT).unwrap();
    (blocker, at, msg_tx)
}

pub const PLANNED: &str = "review: planned panic";

/// Panics with [`PLANNED`], which the hook installed here does not print.
pub fn quiet_panic() -> ! {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&PLANNED) {
                prev(info);
            }
        }));
    });
    std::panic::panic_any(PLANNED)
}

/// Tests that keep thousands of fibers alive take this lock, so that two of them never
/// run at once (each fiber stack is two kernel maps, of about 65,000 a process).
pub static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    static MARK: u8 = const { 0 };
}

/// Where the caller runs: its thread, and the address of a thread-local there.
pub fn here() -> (ThreadId, usize) {
    (
        std::thread::current().id(),
        MARK.with(|m| m as *const u8 as usize),
    )
}

/// A value that records its drops in its [`Tracker`]: a second drop of one value is
/// counted in `twice`.
pub struct Tracked {
    pub id: usize,
    pub tracker: Tracker,
}

/// Counts the [`Tracked`] values made and dropped.
#[derive(Clone)]
pub struct Tracker {
    pub made: Arc<std::sync::atomic::AtomicUsize>,
    pub dropped: Arc<std::sync::Mutex<std::collections::HashSet<usize>>>,
    pub twice: Arc<std::sync::atomic::AtomicUsize>,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker {
            made: counter(),
            dropped: Arc::default(),
            twice: counter(),
        }
    }

    pub fn make(&self) -> Tracked {
        Tracked {
            id: self.made.fetch_add(1, SeqCst),
            tracker: self.clone(),
        }
    }

    /// Every value made was dropped, each once.
    pub fn check(&self, what: &str) {
        assert_eq!(load(&self.twice), 0, "{what}: values dropped twice");
        assert_eq!(
            self.dropped.lock().unwrap().len(),
            load(&self.made),
            "{what}: values made and values dropped differ"
        );
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let mut dropped = self
            .tracker
            .dropped
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !dropped.insert(self.id) {
            self.tracker.twice.fetch_add(1, SeqCst);
        }
    }
}

impl Hub {
    /// [`Hub::run`] that gives up after `limit` (`None`: the job did not finish).
    pub fn run_within<R: Send + 'static>(
        &self,
        limit: Duration,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .try_send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .unwrap();
        rx.recv_timeout(limit).ok()
    }
}

/// In a fiber: spawns `n` fibers one at a time, each started before the next is spawned
/// (as a server's accept loop starts a fiber per connection), all parked until every
/// one is up and each checking that it stayed on its thread; returns the thread each
/// started on.
pub fn start_one_by_one(n: usize) -> Vec<ThreadId> {
    start_one_by_one_with(n, || std::thread::current().id())
}

/// [`start_one_by_one`], returning what `at_start` says in each fiber as it starts.
pub fn start_one_by_one_with<R: Send + 'static>(n: usize, at_start: fn() -> R) -> Vec<R> {
    let (release, parked) = weft::chan::bounded::<()>(1);
    let up = counter();
    let fibers: Vec<_> = (0..n)
        .map(|i| {
            let (up2, parked) = (up.clone(), parked.clone());
            let h = fiber::spawn(move || {
                let start = here();
                let said = at_start();
                up2.fetch_add(1, SeqCst);
                let _ = weft::wait(parked.recv());
                assert_eq!(here(), start, "a parked fiber moved");
                said
            });
            while load(&up) <= i {
                fiber::yield_now();
            }
            h
        })
        .collect();
    drop(release);
    fibers.into_iter().map(|h| h.join().unwrap()).collect()
}
