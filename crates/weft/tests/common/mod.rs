//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod child;
pub mod migrating;
pub mod net;
pub mod placement;
pub mod signal;
pub mod spawn;
pub mod thread_stack;

#[allow(unused_imports)] // not every test uses them
pub use spawn::{fiber_on, join_within, suspended_fiber};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use weft::{Builder, Runtime};

/// How long any single test may take before it counts as a hang.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `f` on a helper thread and returns its result, re-raising its panic.
/// Panics with "hang" if `f` takes longer than [`TIMEOUT`], so a deadlock
/// fails the test instead of hanging CI.
pub fn with_timeout<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    with_limit(TIMEOUT, f)
}

/// [`with_timeout`] with a limit of the caller's.
pub fn with_limit<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    with_limit_on(std::thread::Builder::new(), limit, f)
}

/// [`with_limit`] on a thread with a stack of `stack` bytes.
pub fn with_limit_and_stack<T: Send + 'static>(
    limit: Duration,
    stack: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    with_limit_on(std::thread::Builder::new().stack_size(stack), limit, f)
}

/// A stack with room for a debug build's copies of 64 KiB values.
pub const BIG_STACK: usize = 64 << 20;

/// Runs `f` on a thread with a [`BIG_STACK`]; panics with "hang" if it has not
/// finished after `secs` seconds, re-raises its panic otherwise.
pub fn big_watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    with_limit_and_stack(Duration::from_secs(secs), BIG_STACK, f)
}

/// `f` on a thread with a [`BIG_STACK`].
pub fn big_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .stack_size(BIG_STACK)
        .spawn(f)
        .unwrap()
}

fn with_limit_on<T: Send + 'static>(
    builder: std::thread::Builder,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let thread = builder
        .name("test-body".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    match rx.recv_timeout(limit) {
        Ok(value) => {
            thread.join().unwrap();
            value
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("hang: the test body did not finish within {limit:?}")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => unreachable!("the body neither returned nor panicked"),
        },
    }
}

/// Spins (sleeping 1 ms) until `cond` holds; panics with "hang" after [`TIMEOUT`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "hang: timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Adds one to its counter when dropped.
pub struct DropCounter(pub Arc<AtomicUsize>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

pub fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

pub fn load(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

/// Busy-waits for `d` (a gap shorter than a sleep can make).
pub fn spin_for(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// A runtime with exactly `n` workers.
pub fn workers(n: usize) -> Runtime {
    Builder::new()
        .worker_threads(n)
        .build()
        .expect("failed to build the runtime")
}

/// Runs `f` on a thread and fails if it does not finish within `secs` seconds.
pub fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    with_limit(Duration::from_secs(secs), f)
}

/// A runtime with `workers` default workers and `interactive` interactive ones.
pub fn runtime(workers: usize, interactive: usize) -> Runtime {
    Builder::new()
        .worker_threads(workers)
        .interactive_threads(interactive)
        .build()
        .expect("failed to build the runtime")
}

/// A runtime of `workers` default workers, no interactive pool, and room for as many
/// temporary workers (the drivers' rescue tests: no worker of another pool parks).
pub fn no_interactive_runtime(workers: usize) -> Runtime {
    Builder::new()
        .worker_threads(workers)
        .interactive_threads(0)
        .max_extra_workers(workers)
        .build()
        .expect("failed to build the runtime")
}

/// A runtime of `workers` default workers and no interactive pool whose threads are
/// named after `name` (tests tell runtimes apart by the names of the threads their
/// tasks run on).
pub fn named_runtime(name: &str, workers: usize) -> Runtime {
    Builder::new()
        .worker_threads(workers)
        .interactive_threads(0)
        .thread_name(name)
        .build()
        .expect("failed to build the runtime")
}

/// Runs `f` with `rt` as this thread's current runtime (inside `block_on`), so that the
/// fibers it spawns go to `rt` whatever the other tests do meanwhile (from a plain
/// thread they would go to the most recently started runtime, maybe another test's).
pub fn on<R>(rt: &Runtime, f: impl FnOnce() -> R) -> R {
    rt.block_on(async move { f() })
}

/// Rounds of `timed`, each followed by `between`, until `stop` is set: how many, and
/// the longest `timed` took (a fiber's progress and worst latency beside other work);
/// what `timed` returns is dropped.
pub fn time_rounds<R>(
    stop: &std::sync::atomic::AtomicBool,
    mut timed: impl FnMut() -> R,
    mut between: impl FnMut(),
) -> (u64, Duration) {
    let (mut n, mut worst) = (0u64, Duration::ZERO);
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        drop(timed());
        worst = worst.max(t.elapsed());
        n += 1;
        between();
    }
    (n, worst)
}

/// The panic message in a panic payload, if it is a string.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        Some(s.to_string())
    } else {
        payload.downcast_ref::<String>().cloned()
    }
}

/// fib(n) by recursive `weft::join`, no cutoff.
pub fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = weft::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

/// A task that keeps one worker of its runtime busy (blocking the thread) until
/// released, so that what is spawned next stays queued.
pub struct Blocker {
    /// Send to (or drop) to let the task finish.
    pub release: mpsc::Sender<()>,
    pub handle: weft::JoinHandle<()>,
}

/// Spawns a [`Blocker`] on `rt` and returns once it occupies a worker.
pub fn block_a_worker(rt: &Runtime) -> Blocker {
    block_workers(rt, 1, TIMEOUT)
        .expect("hang: the blocker did not start")
        .pop()
        .unwrap()
}

/// Spawns `n` [`Blocker`]s on `rt` at once and returns them once each occupies a
/// worker, or `None` if that took longer than `within`.
pub fn block_workers(rt: &Runtime, n: usize, within: Duration) -> Option<Vec<Blocker>> {
    let (started_tx, started_rx) = mpsc::channel();
    let blockers: Vec<Blocker> = (0..n)
        .map(|_| {
            let started_tx = started_tx.clone();
            let (release, release_rx) = mpsc::channel::<()>();
            let handle = rt.spawn(async move {
                started_tx.send(()).unwrap();
                let _ = release_rx.recv_timeout(TIMEOUT);
            });
            Blocker { release, handle }
        })
        .collect();
    let deadline = Instant::now() + within;
    for _ in 0..n {
        let left = deadline.saturating_duration_since(Instant::now());
        started_rx.recv_timeout(left).ok()?;
    }
    Some(blockers)
}

impl Blocker {
    /// Lets the task finish and waits for it.
    pub fn release(self) {
        let _ = self.release.send(());
        self.handle.join().unwrap();
    }
}

/// A value that counts itself live in `live` and detects a second drop.
#[derive(Debug)]
pub struct Tracked {
    pub id: usize,
    live: Arc<AtomicUsize>,
    pub alive: bool,
}

impl Tracked {
    pub fn new(id: usize, live: &Arc<AtomicUsize>) -> Tracked {
        live.fetch_add(1, Ordering::SeqCst);
        Tracked {
            id,
            live: live.clone(),
            alive: true,
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        assert!(self.alive, "double drop of value {}", self.id);
        self.alive = false;
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A fresh live count for [`Tracked`] values.
pub fn live() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// A future that never finishes and holds a [`DropCounter`] on `drops`: a task stuck
/// for ever, whose drop (by an abort or a shutdown) the counter records.
pub fn never_ending(
    drops: &Arc<AtomicUsize>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let guard = DropCounter(drops.clone());
    async move {
        let _guard = guard;
        std::future::pending::<()>().await
    }
}

/// Runs `f` in a task on a fresh runtime with `workers` workers (within
/// [`with_timeout`]), re-raising its panic.
pub fn on_runtime<R: Send + 'static>(workers: usize, f: impl FnOnce() -> R + Send + 'static) -> R {
    with_timeout(move || {
        let rt = self::workers(workers);
        let r = rt.spawn(async move { f() }).join();
        match r {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    })
}

/// xorshift64*: a small deterministic generator for test inputs (seed it non-zero).
pub struct Rng(pub u64);

impl Rng {
    /// A generator seeded from the environment variable `var` if it holds a number,
    /// else from the clock (print the seed with any failure to replay it).
    pub fn seeded(var: &str) -> (Rng, u64) {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        (Rng(seed), seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (not quite uniform; enough for test inputs).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A loopback address (port 0) that no other listener of this run binds: an address
/// of `127.0.0.0/8` made of this process's id and a count, so that neither another
/// test of this binary nor a copy of it running beside it uses the same one (Linux
/// routes the whole block to the loopback interface).
pub fn loopback() -> std::net::SocketAddr {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst) as u32;
    let pid = std::process::id();
    let part = |v: u32, m: u32| (1 + v % m) as u8;
    std::net::SocketAddr::from(([127, part(pid, 200), part(pid / 200, 250), part(n, 250)], 0))
}

/// Connects `n` plain std clients to `l`, each within `each`, before accepting any,
/// then accepts them all; returns the clients. A connect fails (the test with it)
/// when the listener's backlog cannot queue the burst: past the queue the kernel
/// drops the SYNs, and a client's retry comes a second or more later.
pub async fn queue_burst(
    l: &weft::net::TcpListener,
    n: usize,
    each: Duration,
) -> Vec<std::net::TcpStream> {
    let addr = l.local_addr().unwrap();
    let clients: Vec<_> = (0..n)
        .map(|i| {
            std::net::TcpStream::connect_timeout(&addr, each)
                .unwrap_or_else(|e| panic!("connect {i} of {n}, none accepted yet: {e}"))
        })
        .collect();
    for _ in 0..n {
        l.accept().await.unwrap();
    }
    clients
}

/// Waits for a plain thread, panicking with "hang" after `secs`.
pub fn thread_within<T: Send + 'static>(h: std::thread::JoinHandle<T>, secs: u64) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !h.is_finished() {
        assert!(
            Instant::now() < deadline,
            "hang: a plain thread did not finish"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    match h.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Drops `rt` on a helper thread; fails with "hang" if that takes longer than `limit`
/// (`what` says which drop).
pub fn drop_within(rt: Runtime, limit: Duration, what: &str) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(rt);
        let _ = tx.send(());
    });
    if rx.recv_timeout(limit).is_err() {
        panic!("hang: dropping the runtime took over {limit:?} ({what})");
    }
}

/// Runs its closure when dropped (a destructor a test controls).
pub struct OnDrop<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// A waker that runs a closure on every wake (a hand-made executor's).
struct FnWaker<F: Fn() + Send + Sync + 'static>(F);

impl<F: Fn() + Send + Sync + 'static> std::task::Wake for FnWaker<F> {
    fn wake(self: Arc<Self>) {
        (self.0)()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        (self.0)()
    }
}

/// A waker that runs `f` on every wake.
pub fn fn_waker(f: impl Fn() + Send + Sync + 'static) -> std::task::Waker {
    std::task::Waker::from(Arc::new(FnWaker(f)))
}

/// The current thread's name (`<unnamed>` if it has none).
pub fn thread_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed>")
        .to_string()
}

/// Polls `f` once with `w`.
pub fn poll_once<F: std::future::Future + ?Sized>(
    f: std::pin::Pin<&mut F>,
    w: &std::task::Waker,
) -> std::task::Poll<F::Output> {
    f.poll(&mut std::task::Context::from_waker(w))
}

/// A waker that owns something and drops it with its last clone: the shape of every
/// executor whose waker is an `Arc` of its task (the task owns its future).
struct Owning(
    #[allow(dead_code)]
    std::sync::Mutex<Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>>,
);

impl std::task::Wake for Owning {
    fn wake(self: Arc<Self>) {}
}

pub fn owning_waker(f: impl std::future::Future<Output = ()> + Send + 'static) -> std::task::Waker {
    std::task::Waker::from(Arc::new(Owning(std::sync::Mutex::new(Some(Box::pin(f))))))
}

/// Polls `f` once with a no-op waker (it must be pending), then hands it to an
/// [`owning_waker`]: a waker whose last clone drops a future that is waiting.
pub fn waker_owning_pending(
    mut f: std::pin::Pin<Box<impl std::future::Future<Output = ()> + Send + 'static>>,
) -> std::task::Waker {
    assert!(poll_once(f.as_mut(), std::task::Waker::noop()).is_pending());
    owning_waker(f)
}

/// Aborts the process with a message if it is not dropped within its time: for tests
/// whose hang could not be unwound (a worker stuck in a poll, a runtime drop that never
/// returns), so that a hang fails the run instead of stalling it.
pub struct AbortGuard(Arc<std::sync::atomic::AtomicBool>);

impl Drop for AbortGuard {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// An [`AbortGuard`] for `secs` seconds; `what` names the test in the message.
pub fn abort_after(secs: u64, what: &'static str) -> AbortGuard {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    std::thread::Builder::new()
        .name("test-abort-watchdog".into())
        .spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < deadline {
                if d.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            eprintln!("HANG: {what} did not finish within {secs} s; aborting");
            std::process::abort();
        })
        .unwrap();
    AbortGuard(done)
}

/// Spawns on `rt` a task that is suspended for ever (not running at the drop: it is
/// cancelled on the dropping thread) and runs `on_drop` when its future is dropped;
/// returns once its poll began.
pub fn pending_with_drop(
    rt: &Runtime,
    on_drop: impl FnOnce() + Send + 'static,
) -> weft::JoinHandle<()> {
    let (tx, rx) = mpsc::channel();
    let mut on_drop = Some(on_drop);
    let h = rt.spawn(async move {
        let _c = OnDrop(move || {
            if let Some(f) = on_drop.take() {
                f()
            }
        });
        tx.send(()).unwrap();
        std::future::pending::<()>().await
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the pending task ran");
    h
}

/// A runtime with `workers` default workers, `interactive` interactive ones and room for
/// `extra` temporary workers (the fork-join shutdown tests count every thread).
pub fn exact_runtime(workers: usize, interactive: usize, extra: usize) -> Runtime {
    Builder::new()
        .worker_threads(workers)
        .interactive_threads(interactive)
        .max_extra_workers(extra)
        .build()
        .expect("failed to build the runtime")
}

/// Waits (sleeping 1 ms) until `flag` is set or `limit` passed; whether it was set.
pub fn wait_flag(flag: &std::sync::atomic::AtomicBool, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while !flag.load(Ordering::SeqCst) {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Spins (no sleep) until `flag` is set or `limit` passed; whether it was set.
pub fn spin_until_set(flag: &std::sync::atomic::AtomicBool, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while !flag.load(Ordering::SeqCst) {
        if Instant::now() > end {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// The calling thread's id.
pub fn me() -> std::thread::ThreadId {
    std::thread::current().id()
}

/// Runs `f` in the `b` half of a `join` whose `a` half makes small joins of its own
/// until `b` started (a join's second half is offered to idle workers at the joins'
/// heartbeat, not while `a` only spins; so that, when a worker is idle, `b` is stolen
/// and the owner waits for its thief). Returns `f`'s result and whether `b` ran on
/// another thread.
pub fn in_stolen_b<R: Send>(f: impl FnOnce() -> R + Send) -> (R, bool) {
    let started = std::sync::atomic::AtomicBool::new(false);
    let owner = me();
    let (_, (r, stolen)) = weft::join(
        || {
            let end = Instant::now() + Duration::from_secs(1);
            while !started.load(Ordering::SeqCst) && Instant::now() < end {
                weft::join(|| spin_for(Duration::from_micros(50)), || ());
            }
        },
        || {
            started.store(true, Ordering::SeqCst);
            let stolen = me() != owner;
            (f(), stolen)
        },
    );
    (r, stolen)
}

/// A waker's shared part that counts its wakes (`.0`).
#[derive(Default)]
pub struct WakeCount(pub AtomicUsize);

impl std::task::Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A waker that counts its wakes, and its count.
pub fn counting_waker() -> (Arc<WakeCount>, std::task::Waker) {
    let c = Arc::new(WakeCount::default());
    (c.clone(), std::task::Waker::from(c))
}

/// Parks `n` fibers on `rt` (each asleep for 30 s, holding a [`DropCounter`] on the
/// returned count), and gives them 5 ms to start: fibers for a shutdown to unwind.
pub fn park_fibers(rt: &Runtime, n: usize) -> (Arc<AtomicUsize>, Vec<weft::JoinHandle<()>>) {
    let drops = counter();
    let fibers = (0..n)
        .map(|_| {
            let d = drops.clone();
            fiber_on(rt, move || {
                let _g = DropCounter(d);
                weft::fiber::sleep(Duration::from_secs(30));
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(5));
    (drops, fibers)
}

/// A runtime of `base` workers, no interactive pool, up to `extra` temporary workers
/// that retire after `keep_alive_ms` idle (the sysmon tests).
pub fn rt_with(base: usize, extra: usize, keep_alive_ms: u64) -> Runtime {
    Builder::new()
        .worker_threads(base)
        .interactive_threads(0)
        .max_extra_workers(extra)
        .extra_worker_keep_alive(Duration::from_millis(keep_alive_ms))
        .build()
        .unwrap()
}

/// Spawns a task that blocks its worker's thread for `d`; returns once it runs.
pub fn blocker(rt: &Runtime, d: Duration) -> weft::JoinHandle<()> {
    let (tx, rx) = mpsc::channel();
    let h = rt.spawn(async move {
        tx.send(()).unwrap();
        std::thread::sleep(d);
    });
    rx.recv_timeout(TIMEOUT).expect("the blocker did not start");
    h
}
