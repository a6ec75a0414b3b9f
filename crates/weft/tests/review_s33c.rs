//! Review s33c, from safe code only, of eedbd96 (and the commits on it up to 86deaf9):
//!
//! 1. `runtime/closing.rs`: a runtime's list of waiters for its shutdown (`Closing`,
//!    `ShutDown`), which `signal::ctrl_c` polls beside the signal watch, so that a wait
//!    begun on a runtime ends with an error when that runtime shuts down.
//! 2. `runtime/sysmon.rs` `nudge_for_the_drivers`: with the drivers unheld with work,
//!    no worker parked and none polled since the last look (`all_stuck`), sysmon starts
//!    a short-lived detached `weft-drivers` thread that fires the due timers
//!    (`time.process()`) and polls the sockets (`time.poll_io()`), one at a time.
//!
//! Earlier reviews of the same code: `review_s33.rs`, `review_s33b.rs` (not repeated).
//!
//! Every test runs under a watchdog (a hang fails it with "hang"), every loop is
//! bounded, sockets use loopback addresses only. The timing tests of the drivers'
//! rescue take one lock (`serial`), so that they neither count each other's
//! `weft-drivers` threads nor share the two cores. The signal tests install weft's
//! process-wide `SIGINT` handler, and the tests that count file descriptors or end the
//! process need it to themselves: each runs in a child process (this binary's
//! `child_process_entry`, see `common::child`); the parent never raises a signal.
//!
//! Run: `cargo test -p weft --test review_s33c`.
//!
//! Findings (each failed on 86deaf9; see each test's comment for the cause). Fixed
//! since: the I/O dispatch wakes after the poll state is released; up to 4 rescues
//! run at once; `all_stuck` ignores `running_task`; `wake_guarded` (and the signal
//! reader) drop a caught payload under a second guard and leak one that panics
//! again; the list is a slab indexed by slot. The rescue thread also enters the
//! runtime now (a waker there may spawn, as on a worker).
//! * `slow_socket_waker_on_the_rescue_thread_blocks_the_worker_that_parks`,
//!   `waker_on_the_rescue_thread_waiting_for_the_runtime_deadlocks`,
//!   `runtime_dropped_by_a_waker_on_the_rescue_thread_once_the_worker_parked`
//!   (medium-high: a latency, then a deadlock and a hung drop): the rescue's socket
//!   poll dispatches, and so runs the user's wakers, with the I/O driver's poll state
//!   locked (`driver/io.rs` `poll_now` -> `dispatch`, "woken with ... the poll state
//!   still held"). A worker that then goes to park takes the drivers (unheld: the
//!   rescue does not take the hold word) and blocks on that lock in `IoDriver::wait`,
//!   inside its external park: a spawn's unpark writes the eventfd it is not reading,
//!   and sysmon counts it parked (no temporary worker, no rescue). A task spawned
//!   then waits for the user's waker on the detached thread (1.2 s instead of well
//!   under 300 ms); a waker there that waits for a task of the runtime waits for
//!   ever (3 s here; woken by a timer instead, its task runs in 0.1 ms); a waker
//!   there that drops the runtime never returns. Before eedbd96 only workers
//!   dispatched (the holder, which others wait for by design, or a busy worker).
//!   Dispatching after the poll state is released (as `process` wakes after the
//!   wheel's lock), or taking the hold word for the rescue, would avoid it
//!   (`slow_timer_waker_on_the_rescue_thread_leaves_the_worker_free` is the
//!   contrast).
//! * `one_slow_waker_on_the_rescue_thread_stops_the_rescue_for_everyone` (low-medium,
//!   design): one rescue at a time (`rescuing` flag, `sysmon.rs`
//!   `nudge_for_the_drivers`): while one user waker takes its time on `weft-drivers`,
//!   no rescue starts, and every other timer and socket of the runtime waits for the
//!   stuck workers again (a plain thread's 100 ms socket timeout took ~1.3 s).
//! * `fork_join_halves_on_every_worker_leave_the_drivers_unrescued` (medium):
//!   `all_stuck` (`sysmon.rs`, the `polls != s.polls || running == 0 || parked`
//!   branch) takes a worker whose `running_task` is 0 for one between polls; a worker
//!   running a stolen fork-join job at the top of its loop has `running_task == 0`
//!   for as long as the job runs. With every worker inside the two halves of one
//!   long `weft::join`, nothing is rescued: a plain thread's 100 ms socket timeout
//!   waited for the halves (~1.2 s), as before eedbd96.
//! * `panic_payload_that_panics_on_drop_loses_the_rest_of_the_rescue_batch` and
//!   `panic_payload_that_panics_on_drop_escapes_the_runtime_drop` (low, pre-existing
//!   in `driver/mod.rs` `wake_guarded`, now also on the two new paths):
//!   `catch_unwind(..).is_err()` drops the caught payload outside the guard; a payload
//!   whose `Drop` panics (`std::panic::panic_any`) unwinds out of `wake_guarded`. On
//!   `weft-drivers` it ends the thread and drops the rest of the fired batch unwoken
//!   (a task's sleep in that batch never wakes: a lost wakeup, the task hangs); in
//!   `Closing::close` it unwinds out of `Runtime::drop` and the other signal waiters
//!   of that runtime are never woken (a plain thread in `Handle::block_on(ctrl_c())`
//!   hangs). (86deaf9 clears the rescue flag on unwind: later rescues do run,
//!   `rescues_go_on_after_a_rescue_thread_unwound` passes.)
//! * `many_signal_waiters_make_each_poll_and_drop_linear` (low, performance): the
//!   list is a vector searched by id (`closing.rs`, `ShutDown::poll` `find`, `Drop`
//!   `position`) under one mutex per runtime: with 30,000 waiters (a `ctrl_c` in every
//!   connection's `select!`, the tokio idiom) every re-poll and every drop of one scans
//!   them all; the signal watch beside it costs the same with 30,000 or one.
//!
//! Held (the other tests): `ShutDown` with a new waker at each poll (each replaced
//! waker dropped, only the last woken, nothing kept after the close), polled after
//! the close, dropped on another thread, dropped from its own waker's wake and from a
//! replaced waker's drop, a waker that polls other waits of the same runtime in its
//! wake (no deadlock), wakers whose clone or drop panics or whose clone blocks (the
//! close does not wait for it); a wait kept after its runtime's drop holds none of its
//! threads or file descriptors, a task or a hand-made waker holding its own runtime's
//! wait is freed by the drop; the future is `Send` and `Sync`. The rescue: at most two
//! `weft-drivers` threads at once under a 1.5 s stall with 150 sockets and 400
//! timers, none left after it, none started while workers poll or one is parked;
//! the runtime dropped while a rescue runs a slow waker frees its driver's file
//! descriptors once it returns; the process exits with a rescue running; a plain
//! thread's socket timeout, sleep and read end on time behind two stuck workers with
//! many timers and sockets registered, and behind workers stuck in fibers and in
//! `weft::wait`.
//!
//! Observations, no test: a stall with work registered starts a `weft-drivers` thread
//! every two looks (every 10 ms with temporary workers on) for as long as it lasts,
//! even when nothing is due (a timer an hour away, an idle listener): 2-10 of them
//! were seen in a 1.5 s stall sampled every millisecond, most live too short to be
//! seen. The rescue thread runs no `on_thread_start` hook, carries no `thread_name` of
//! its runtime, and has no current runtime: a waker that calls `weft::spawn` or
//! `Handle::current()` works when a worker fires its timer and panics there (caught
//! by `wake_guarded`, reported once), so the spawn silently does not happen.

// A `block_on` hands a pinned future out on purpose.
#![allow(clippy::async_yields_async)]

mod common;
use common::net::weft_and_std;
use common::signal::install_handler;
use common::{fn_waker, poll_once, thread_name};

use std::future::Future;
use std::io::{self, Read, Write};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::task::{Poll, RawWaker, RawWakerVTable, Wake, Waker};
use std::time::{Duration, Instant};

use common::{join_within, thread_within, watchdog};
use weft::io::AsyncReadExt;
use weft::net::TcpStream;
use weft::{Builder, Runtime};

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn rt(workers: usize) -> Runtime {
    common::runtime(workers, 0)
}

/// The timing tests of the rescue one at a time (see the module doc).
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A task that blocks its worker's thread for `d` (a long poll, sleeping, so that it
/// costs no CPU); returns once it runs.
fn long_poll(rt: &Runtime, d: Duration) -> weft::JoinHandle<()> {
    let (tx, rx) = mpsc::channel();
    let h = rt.spawn(async move {
        tx.send(()).unwrap();
        std::thread::sleep(d);
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("hang: the long poll did not start");
    h
}

/// The ids of this process's threads named `name` (as `/proc` shows it: 15 bytes).
fn threads_named(name: &str) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == name).then(|| e.file_name().to_str()?.parse().ok())?
    })
    .collect()
}

/// The ids of this process's threads whose name starts with `prefix`.
fn threads_prefixed(prefix: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let comm = std::fs::read_to_string(e.ok()?.path().join("comm")).ok()?;
        comm.trim()
            .starts_with(prefix)
            .then(|| comm.trim().to_string())
    })
    .collect()
}

fn rescue_threads() -> usize {
    threads_named("weft-drivers").len()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// A plain thread's blocking read with a 100 ms timeout on a quiet socket of `rt`:
/// returns how long it took (it must say `WouldBlock`).
fn timed_read(quiet: TcpStream) -> std::thread::JoinHandle<Duration> {
    quiet.set_read_timeout(Some(ms(100))).unwrap();
    std::thread::spawn(move || {
        let t = Instant::now();
        let r = (&quiet).read(&mut [0u8; 4]).map_err(|e| e.kind());
        assert_eq!(r, Err(io::ErrorKind::WouldBlock));
        t.elapsed()
    })
}

/// A panic payload whose drop panics: what `catch_unwind` hands back, dropped by the
/// catcher, panics again there.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a panic payload whose drop panics (on purpose)");
    }
}

/// A waker that panics with a [`Bomb`] when woken (once; later wakes do nothing).
fn bomb_waker(woken: Arc<AtomicUsize>) -> Waker {
    fn_waker(move || {
        if woken.fetch_add(1, SeqCst) == 0 {
            std::panic::panic_any(Bomb);
        }
    })
}

/// A waker that counts wakes and clones, and reports whether it is still alive.
struct Probe {
    wakes: AtomicUsize,
}

impl Wake for Probe {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
    }
}

fn probe() -> (Arc<Probe>, Waker) {
    let p = Arc::new(Probe {
        wakes: AtomicUsize::new(0),
    });
    (p.clone(), Waker::from(p))
}

/// A raw waker whose clone, wake and drop do what the test says (a waker made with
/// `std::task::Wake` cannot panic or block in its clone).
struct Custom {
    on_clone: Box<dyn Fn() + Send + Sync>,
    on_drop: Box<dyn Fn() + Send + Sync>,
    wakes: AtomicUsize,
}

fn custom_waker(c: Arc<Custom>) -> Waker {
    fn raw(c: Arc<Custom>) -> RawWaker {
        RawWaker::new(Arc::into_raw(c).cast(), &VTABLE)
    }
    unsafe fn clone(p: *const ()) -> RawWaker {
        // SAFETY: `p` came from `Arc::into_raw` in `raw`, and this waker holds a count.
        let c = unsafe { Arc::from_raw(p.cast::<Custom>()) };
        let c2 = c.clone();
        std::mem::forget(c);
        (c2.on_clone)();
        raw(c2)
    }
    unsafe fn wake(p: *const ()) {
        // SAFETY: as in `clone`; this consumes the waker's count.
        let c = unsafe { Arc::from_raw(p.cast::<Custom>()) };
        c.wakes.fetch_add(1, SeqCst);
        (c.on_drop)();
    }
    unsafe fn wake_by_ref(p: *const ()) {
        // SAFETY: as in `clone`; the count stays with the waker.
        let c = unsafe { &*p.cast::<Custom>() };
        c.wakes.fetch_add(1, SeqCst);
    }
    unsafe fn drop(p: *const ()) {
        // SAFETY: as in `clone`; this consumes the waker's count.
        let c = unsafe { Arc::from_raw(p.cast::<Custom>()) };
        (c.on_drop)();
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop);
    // SAFETY: the vtable's functions keep the `Arc` count as `RawWaker`'s contract says.
    unsafe { Waker::from_raw(raw(c)) }
}

fn custom(
    on_clone: impl Fn() + Send + Sync + 'static,
    on_drop: impl Fn() + Send + Sync + 'static,
) -> Arc<Custom> {
    Arc::new(Custom {
        on_clone: Box::new(on_clone),
        on_drop: Box::new(on_drop),
        wakes: AtomicUsize::new(0),
    })
}

type CtrlC = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

fn ctrl_c() -> CtrlC {
    Box::pin(weft::signal::ctrl_c())
}

/// A `ctrl_c` first polled (pending) with `w` while `rt` is entered: `rt`'s waiter.
fn waiter_of(rt: &Runtime, w: &Waker) -> CtrlC {
    let _g = rt.enter();
    let mut f = ctrl_c();
    assert!(poll_once(f.as_mut(), w).is_pending());
    f
}

fn assert_shutdown_error(r: &io::Result<()>, what: &str) {
    match r {
        Err(e) => assert!(e.to_string().contains("shut down"), "{what}: {e}"),
        Ok(()) => panic!("{what}: Ok without a SIGINT"),
    }
}

fn ready_shutdown_error(f: &mut CtrlC, w: &Waker, what: &str) {
    match poll_once(f.as_mut(), w) {
        Poll::Ready(r) => assert_shutdown_error(&r, what),
        Poll::Pending => panic!("{what}: still pending after its runtime's shutdown"),
    }
}

// ---------------------------------------------------------------------------------
// 1. The shutdown waiters (each case in a child process)
// ---------------------------------------------------------------------------------

const CHILD: &str = "WEFT_S33C_CHILD";

/// Not a real test unless run as a child: runs the case named by `CHILD`.
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "changing_wakers" => child_changing_wakers(),
        "reentrant" => child_reentrant(),
        "odd_wakers" => child_odd_wakers(),
        "bomb_at_close" => child_bomb_at_close(),
        "many_waiters" => child_many_waiters(),
        "kept_after_drop" => child_kept_after_drop(),
        "drop_during_rescue" => child_drop_during_rescue(),
        "exit_during_rescue" => child_exit_during_rescue(),
        "drop_in_rescue_waker" => child_drop_in_rescue_waker(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str, secs: u64) -> common::child::Output {
    common::child::run_case(CHILD, case, Duration::from_secs(secs))
}

/// The future is `Send` and `Sync` (a tokio user moves it into `spawn`ed tasks and
/// shares `&` of it); compile-time only.
#[test]
fn ctrl_c_future_is_send_and_sync() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    let f = weft::signal::ctrl_c();
    send_sync(&f);
}

/// One wait of runtime R polled 2,000 times, each with a new waker (`will_wake`
/// false): each replaced waker is dropped at once (its `Arc` back to one count), the
/// list keeps one; then 1,000 polls with one waker keep one clone. R's drop wakes only
/// the last waker, once; a poll after the close is ready with the shutdown error and
/// registers nothing; every waker is freed.
#[test]
fn shutdown_wait_polled_with_a_new_waker_each_time() {
    run_child("changing_wakers", 30).assert_finished();
}

fn child_changing_wakers() {
    install_handler();
    let r = rt(1);
    let probes: Vec<(Arc<Probe>, Waker)> = (0..2000).map(|_| probe()).collect();
    let mut f = waiter_of(&r, &probes[0].1);
    for i in 1..probes.len() {
        assert!(poll_once(f.as_mut(), &probes[i].1).is_pending());
        assert_eq!(
            Arc::strong_count(&probes[i - 1].0),
            2,
            "poll {i}: the replaced waker was kept (ours and the waker: 2)"
        );
        // Ours, the waker, and one clone in each of the shutdown list and the watch.
        assert_eq!(
            Arc::strong_count(&probes[i].0),
            4,
            "poll {i}: one clone kept"
        );
    }
    let (same, same_w) = probe();
    for _ in 0..1000 {
        assert!(poll_once(f.as_mut(), &same_w).is_pending());
    }
    assert_eq!(
        Arc::strong_count(&same),
        4,
        "one clone of a waker polled 1,000 times"
    );
    for (p, _) in &probes {
        assert_eq!(Arc::strong_count(p), 2);
    }
    common::drop_within(r, Duration::from_secs(5), "R");
    assert_eq!(same.wakes.load(SeqCst), 1, "the last waker woken once");
    assert!(probes.iter().all(|(p, _)| p.wakes.load(SeqCst) == 0));
    assert_eq!(
        Arc::strong_count(&same),
        3,
        "the close kept its clone of the waker"
    );
    let (late, late_w) = probe();
    ready_shutdown_error(&mut f, &late_w, "polled after the close");
    assert_eq!(
        Arc::strong_count(&late),
        2,
        "a poll after the close kept its waker"
    );
    drop(f);
    assert_eq!(Arc::strong_count(&same), 2, "the wait's drop kept a waker");
    for (p, _) in &probes {
        assert_eq!(Arc::strong_count(p), 2);
    }
}

/// Re-entrancy on the list's one mutex, none of which may deadlock:
/// (a) a wait polled on one thread, dropped on another, then the runtime dropped:
///     its waker is not woken, freed;
/// (b) a hand-made waker that owns its own wait drops it when woken by the close
///     (`ShutDown::drop` locks the list inside `Closing::close`'s wakes);
/// (c) a waker that, woken by the close, polls another wait of the same runtime and
///     starts a fresh one with the runtime entered: both ready with the error;
/// (d) a waker whose drop, when a poll replaces it, drops another wait of the same
///     runtime, and then starts and polls a new one (`ShutDown::poll`'s old waker is
///     dropped after the lock).
#[test]
fn shutdown_wait_reentrancy_from_wakes_and_drops() {
    run_child("reentrant", 30).assert_finished();
}

fn child_reentrant() {
    install_handler();
    // (a)
    let r = rt(1);
    let (pa, wa) = probe();
    let f = waiter_of(&r, &wa);
    drop(wa);
    std::thread::spawn(move || drop(f)).join().unwrap();
    assert_eq!(
        Arc::strong_count(&pa),
        1,
        "(a) dropped elsewhere: the waker freed"
    );
    common::drop_within(r, Duration::from_secs(5), "(a)");
    assert_eq!(
        pa.wakes.load(SeqCst),
        0,
        "(a) a dropped wait woken by the close"
    );

    // (b)
    let r = rt(1);
    let slot: Arc<Mutex<Option<CtrlC>>> = Arc::new(Mutex::new(None));
    let s2 = slot.clone();
    let dropped_in_wake = flag();
    let d2 = dropped_in_wake.clone();
    let own = fn_waker(move || {
        let f = s2.lock().unwrap().take();
        if f.is_some() {
            drop(f);
            d2.store(true, SeqCst);
        }
    });
    *slot.lock().unwrap() = Some(waiter_of(&r, &own));
    drop(own);
    common::drop_within(r, Duration::from_secs(5), "(b) a waker that drops its wait");
    assert!(dropped_in_wake.load(SeqCst), "(b) the close woke the waker");

    // (c)
    let r = rt(1);
    let h = r.handle().clone();
    let other: Arc<Mutex<Option<CtrlC>>> = Arc::new(Mutex::new(Some(waiter_of(&r, Waker::noop()))));
    let o2 = other.clone();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let w = fn_waker(move || {
        let mut out = s2.lock().unwrap();
        if let Some(f) = o2.lock().unwrap().as_mut() {
            out.push(format!(
                "{:?}",
                poll_once(f.as_mut(), Waker::noop()).map(|r| r.is_err())
            ));
        }
        let _g = h.enter();
        let mut fresh = ctrl_c();
        out.push(format!(
            "{:?}",
            poll_once(fresh.as_mut(), Waker::noop()).map(|r| r.is_err())
        ));
    });
    let mut f = waiter_of(&r, &w);
    common::drop_within(r, Duration::from_secs(5), "(c) a waker that polls waits");
    assert_eq!(
        *seen.lock().unwrap(),
        ["Ready(true)", "Ready(true)"],
        "(c) waits polled from a close's wake"
    );
    ready_shutdown_error(&mut f, Waker::noop(), "(c)");

    // (d)
    let r = rt(1);
    let h = r.handle().clone();
    let victim: Arc<Mutex<Option<CtrlC>>> =
        Arc::new(Mutex::new(Some(waiter_of(&r, Waker::noop()))));
    let v2 = victim.clone();
    let made = Arc::new(Mutex::new(None::<CtrlC>));
    let m2 = made.clone();
    let armed = flag();
    let a2 = armed.clone();
    let dropping = custom(
        || {},
        move || {
            if !a2.load(SeqCst) {
                return;
            }
            if let Some(f) = v2.lock().unwrap().take() {
                drop(f);
                let _g = h.enter();
                let mut fresh = ctrl_c();
                assert!(poll_once(fresh.as_mut(), Waker::noop()).is_pending());
                *m2.lock().unwrap() = Some(fresh);
            }
        },
    );
    let first = custom_waker(dropping.clone());
    let mut f = waiter_of(&r, &first);
    drop(first);
    armed.store(true, SeqCst);
    let (pd, wd) = probe();
    assert!(
        poll_once(f.as_mut(), &wd).is_pending(),
        "(d) the replacing poll"
    );
    assert!(
        victim.lock().unwrap().is_none(),
        "(d) the replaced waker was dropped"
    );
    assert!(made.lock().unwrap().is_some());
    common::drop_within(r, Duration::from_secs(5), "(d)");
    assert_eq!(pd.wakes.load(SeqCst), 1);
    let mut fresh = made.lock().unwrap().take().unwrap();
    ready_shutdown_error(&mut fresh, Waker::noop(), "(d) the wait made in a drop");
    ready_shutdown_error(&mut f, Waker::noop(), "(d)");
}

/// Wakers that misbehave in their clone or drop:
/// (a) a clone that panics: the poll panics (in the caller), nothing is poisoned: a
///     poll with a good waker then registers, and the close wakes it;
/// (b) a drop that panics when a poll replaces the waker: the poll panics (after the
///     lock), the async fn's state, its registration with it, goes in the unwind:
///     the list keeps no waker, the close wakes none;
/// (c) a clone that blocks 600 ms on another thread while the runtime is dropped:
///     the drop does not wait for it, and the poll, once the clone returns, is ready
///     with the shutdown error.
#[test]
fn shutdown_wait_with_wakers_whose_clone_or_drop_panics_or_blocks() {
    run_child("odd_wakers", 30).assert_finished();
}

fn child_odd_wakers() {
    install_handler();
    let quiet_panics = || {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        prev
    };
    // (a)
    let r = rt(1);
    let c = custom(|| panic!("a waker's clone panics (on purpose)"), || {});
    let bad = custom_waker(c.clone());
    let mut f = {
        let _g = r.enter();
        ctrl_c()
    };
    let prev = quiet_panics();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _g = r.enter();
        let _ = poll_once(f.as_mut(), &bad);
    }));
    std::panic::set_hook(prev);
    assert!(res.is_err(), "(a) the clone's panic reached the poller");
    // The future panicked inside: it is not polled again (an async fn's poisoned
    // state); a new wait of the same runtime works.
    drop(f);
    let (pa, wa) = probe();
    let mut g = waiter_of(&r, &wa);
    common::drop_within(r, Duration::from_secs(5), "(a)");
    assert_eq!(
        pa.wakes.load(SeqCst),
        1,
        "(a) the good waker woken by the close"
    );
    ready_shutdown_error(&mut g, Waker::noop(), "(a)");

    // (b)
    let r = rt(1);
    let armed = flag();
    let a2 = armed.clone();
    let c = custom(
        || {},
        move || {
            if a2.swap(false, SeqCst) {
                panic!("a waker's drop panics (on purpose)");
            }
        },
    );
    let w = custom_waker(c.clone());
    let mut f = waiter_of(&r, &w);
    let (pb, wb) = probe();
    armed.store(true, SeqCst);
    let prev = quiet_panics();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_once(f.as_mut(), &wb)));
    std::panic::set_hook(prev);
    assert!(res.is_err(), "(b) the drop's panic reached the poller");
    assert_eq!(Arc::strong_count(&pb), 2, "(b) the list kept the new waker");
    drop(f);
    common::drop_within(r, Duration::from_secs(5), "(b)");
    assert_eq!(pb.wakes.load(SeqCst), 0);
    assert_eq!(c.wakes.load(SeqCst), 0, "(b) the replaced waker woken");
    drop(w);

    // (c)
    let r = rt(1);
    let mut f = waiter_of(&r, Waker::noop());
    let in_clone = flag();
    let ic = in_clone.clone();
    let slow = custom(
        move || {
            ic.store(true, SeqCst);
            std::thread::sleep(ms(600));
        },
        || {},
    );
    let sw = custom_waker(slow.clone());
    let poller = std::thread::spawn(move || {
        let r = poll_once(f.as_mut(), &sw).map(|r| r.is_err());
        (r, f)
    });
    common::wait_until("the slow clone began", || in_clone.load(SeqCst));
    let t = Instant::now();
    common::drop_within(r, Duration::from_secs(5), "(c)");
    let took = t.elapsed();
    let (res, f) = thread_within(poller, 5);
    assert!(
        took < ms(400),
        "(c) the drop waited {took:?} for a waker's clone"
    );
    assert_eq!(res, Poll::Ready(true), "(c) the poll after the slow clone");
    drop(f);
}

/// A hand-made waiter of runtime R (first polled with R entered) whose waker panics
/// with a payload whose own drop panics, registered first; then a plain thread waits
/// in `R.handle().block_on(ctrl_c())`. R is dropped.
///
/// Finding (low; pre-existing in `driver/mod.rs` `wake_guarded`, reached here by the
/// new `Closing::close`, `runtime/closing.rs`): `wake_guarded` drops the payload that
/// `catch_unwind` returned outside the guard; its drop panics, and that panic unwinds
/// out of `Closing::close`, out of `Runtime::drop` (the workers not waited for), and
/// the rest of the list is dropped unwoken: the plain thread never wakes (it would
/// wait for a SIGINT). Dropping the payload under a second `catch_unwind` (or
/// `mem::forget`ting it) would keep it in.
#[test]
fn panic_payload_that_panics_on_drop_escapes_the_runtime_drop() {
    let out = run_child("bomb_at_close", 20);
    out.assert_finished();
    let escaped = out.report("escaped");
    let other = out.report("other_ended");
    assert!(
        escaped == Some("false") && other == Some("true"),
        "a waker's panic payload that panics on drop: the panic escaped the runtime's \
         drop: {escaped:?}; the other waiter of the runtime (a plain thread in \
         block_on(ctrl_c())) ended within 3 s: {other:?}\n{}",
        out.context()
    );
}

fn child_bomb_at_close() {
    install_handler();
    std::panic::set_hook(Box::new(|_| {}));
    let r = rt(1);
    let woken = Arc::new(AtomicUsize::new(0));
    let bomb = bomb_waker(woken.clone());
    let _f = waiter_of(&r, &bomb);
    let polled = flag();
    let p2 = polled.clone();
    let h = r.handle().clone();
    let other = std::thread::spawn(move || {
        h.block_on(async move {
            let mut f = pin!(weft::signal::ctrl_c());
            std::future::poll_fn(|cx| {
                let r = f.as_mut().poll(cx);
                p2.store(true, SeqCst);
                r
            })
            .await
        })
    });
    common::wait_until("the other waiter was polled", || polled.load(SeqCst));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(r)));
        let _ = tx.send(res.is_err());
    });
    let escaped = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("hang: the runtime's drop did not return");
    println!("CHILD escaped={escaped}");
    let t = Instant::now();
    while !other.is_finished() && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(ms(5));
    }
    println!("CHILD other_ended={}", other.is_finished());
    assert_eq!(woken.load(SeqCst), 1);
    // (A thread left waiting ends with the process.)
    std::mem::forget(_f);
}

/// The cost of one wait's re-poll and of a fresh wait's poll and drop, with 30,000
/// other waits of the same runtime registered, against (a) one other wait of the
/// runtime, (b) 30,000 waits of plain threads (the signal watch alone). Re-polling a
/// pending wait is what a `select!` on a pinned `ctrl_c` does at every wake of any of
/// its branches; a fresh wait polled and dropped is what `select! { _ = ctrl_c() =>
/// .., x = conn.read(..) => .. }` in a loop does, the tokio idiom, once per message.
///
/// Finding (low, performance): both scan every waiter of the runtime under its one
/// mutex (`runtime/closing.rs`: `ShutDown::poll`'s `iter_mut().find`, `Drop`'s
/// `position`): with 30,000 waiters each costs tens of times what it costs with one,
/// while the watch's part costs the same. A slab (index kept in the future) or an
/// intrusive list would make both O(1).
#[test]
fn many_signal_waiters_make_each_poll_and_drop_linear() {
    let out = run_child("many_waiters", 60);
    out.assert_finished();
    let get = |k: &str| -> f64 {
        out.report(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k}\n{}", out.context()))
    };
    let (few, plain, many) = (
        get("repoll_few_ns"),
        get("repoll_plain_ns"),
        get("repoll_many_ns"),
    );
    let (fresh_few, fresh_many) = (get("fresh_few_ns"), get("fresh_many_ns"));
    eprintln!(
        "re-poll: {few:.0} ns with 1 other waiter of the runtime, {plain:.0} ns with 30,000 \
         plain waiters, {many:.0} ns with 30,000 of the runtime; fresh wait polled and \
         dropped: {fresh_few:.0} ns / {fresh_many:.0} ns"
    );
    assert!(
        many < 10.0 * few.max(plain) && fresh_many < 10.0 * fresh_few,
        "with 30,000 waiters of the runtime, a re-poll of a ctrl_c costs {many:.0} ns \
         (with one: {few:.0} ns; with 30,000 plain-thread waiters: {plain:.0} ns), and a \
         fresh ctrl_c polled and dropped {fresh_many:.0} ns (with one: {fresh_few:.0} \
         ns): the runtime's list of shutdown waiters is scanned at each"
    );
}

fn child_many_waiters() {
    install_handler();
    const N: usize = 30_000;
    const REPOLLS: u32 = 1000;
    const FRESH: u32 = 300;
    let r = rt(1);
    fn per(d: Duration, n: u32) -> f64 {
        d.as_nanos() as f64 / n as f64
    }
    let repoll = |f: &mut CtrlC| {
        let t = Instant::now();
        for _ in 0..REPOLLS {
            assert!(poll_once(f.as_mut(), Waker::noop()).is_pending());
        }
        per(t.elapsed(), REPOLLS)
    };
    let fresh = || {
        let t = Instant::now();
        for _ in 0..FRESH {
            let mut f = ctrl_c();
            assert!(poll_once(f.as_mut(), Waker::noop()).is_pending());
            drop(f);
        }
        per(t.elapsed(), FRESH)
    };
    // (a) One other waiter of the runtime.
    let (few, fresh_few) = {
        let _g = r.enter();
        let _other = waiter_of(&r, Waker::noop());
        let mut probe = waiter_of(&r, Waker::noop());
        (repoll(&mut probe), fresh())
    };
    // (b) 30,000 plain waiters (no runtime): the watch's part alone.
    let plain = std::thread::spawn(move || {
        let mut all: Vec<CtrlC> = Vec::with_capacity(N);
        for _ in 0..N {
            let mut f = ctrl_c();
            assert!(poll_once(f.as_mut(), Waker::noop()).is_pending());
            all.push(f);
        }
        let mut probe = ctrl_c();
        assert!(poll_once(probe.as_mut(), Waker::noop()).is_pending());
        let v = repoll(&mut probe);
        std::mem::forget(all);
        v
    })
    .join()
    .unwrap();
    // (c) 30,000 waiters of the runtime.
    let (many, fresh_many) = {
        let _g = r.enter();
        let mut all: Vec<CtrlC> = Vec::with_capacity(N);
        for _ in 0..N {
            all.push(waiter_of(&r, Waker::noop()));
        }
        let mut probe = waiter_of(&r, Waker::noop());
        let v = (repoll(&mut probe), fresh());
        // The list goes with the close; the waits are dropped after it.
        drop(probe);
        std::mem::forget(all);
        v
    };
    common::drop_within(r, Duration::from_secs(10), "with 30,000 signal waiters");
    println!("CHILD repoll_few_ns={few}");
    println!("CHILD repoll_plain_ns={plain}");
    println!("CHILD repoll_many_ns={many}");
    println!("CHILD fresh_few_ns={fresh_few}");
    println!("CHILD fresh_many_ns={fresh_many}");
}

/// A wait of runtime R kept after R's drop (in another runtime's task), and cycles
/// through R: R's threads end and its file descriptors close although the wait lives;
/// the wait, polled on another runtime's worker, is ready with the shutdown error; a
/// task of R awaiting its own runtime's wait is dropped by R's drop (its drop counter
/// fires); a hand-made waker that owns a wait of R (registered in R's list: the list
/// holds the waker, the waker the wait, the wait the list) is freed by R's drop.
#[test]
fn a_wait_kept_after_its_runtime_holds_nothing_of_it() {
    run_child("kept_after_drop", 30).assert_finished();
}

fn child_kept_after_drop() {
    install_handler();
    let s = common::named_runtime("s33c-other", 1);
    // Settle: the handler's thread, S's threads and descriptors exist already.
    std::thread::sleep(ms(50));
    let fds0 = open_fds();
    let r = Builder::new()
        .worker_threads(2)
        .interactive_threads(1)
        .thread_name("s33c-keep")
        .build()
        .unwrap();
    let (_a, _b) = weft_and_std(&r);
    let kept = waiter_of(&r, Waker::noop());
    // A task of R awaiting its own runtime's wait.
    let drops = common::counter();
    let guard = common::DropCounter(drops.clone());
    let (tx, rx) = mpsc::channel();
    let own = r.spawn(async move {
        let _g = guard;
        let mut f = pin!(weft::signal::ctrl_c());
        std::future::poll_fn(|cx| {
            let p = f.as_mut().poll(cx);
            let _ = tx.send(());
            p
        })
        .await
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    // A waker owning a wait of R, registered in R's list.
    let slot: Arc<Mutex<Option<CtrlC>>> = Arc::new(Mutex::new(None));
    let owner = Arc::new(Mutex::new(slot.clone()));
    let weak = Arc::downgrade(&owner);
    let polled_after = Arc::new(Mutex::new(None::<bool>));
    let pa = polled_after.clone();
    // An executor's waker: woken, it polls its future (the wait) and drops it once
    // done. (A waker that never polls again keeps the wait, and so itself, through
    // the signal watch's registration: a cycle of its own making, as on tokio.)
    let owning = fn_waker(move || {
        let f = owner.lock().unwrap().lock().unwrap().take();
        if let Some(mut f) = f {
            let r = poll_once(f.as_mut(), Waker::noop());
            *pa.lock().unwrap() = Some(matches!(r, Poll::Ready(Err(_))));
        }
    });
    *slot.lock().unwrap() = Some(waiter_of(&r, &owning));
    drop(owning);
    drop(slot);
    assert!(weak.upgrade().is_some(), "R's list holds the owning waker");
    // (A thread names itself once it runs.)
    common::wait_until("R's threads named", || {
        threads_prefixed("s33c-keep").len() >= 3
    });
    common::drop_within(r, Duration::from_secs(5), "R");
    drop((_a, _b));
    match join_within(own, 5) {
        Ok(r) => assert_shutdown_error(&r, "R's own task"),
        Err(e) => assert!(e.is_cancelled(), "{e:?}"),
    }
    assert_eq!(
        common::load(&drops),
        1,
        "R's task awaiting its own wait was dropped"
    );
    common::wait_until("the owning waker freed", || weak.upgrade().is_none());
    assert_eq!(
        *polled_after.lock().unwrap(),
        Some(true),
        "the owning waker's wait, polled from its wake, ready with the error"
    );
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2)
        && (open_fds() > fds0 || !threads_prefixed("s33c-keep").is_empty())
    {
        std::thread::sleep(ms(5));
    }
    let left = threads_prefixed("s33c-keep");
    assert!(left.is_empty(), "R's threads outlived its drop: {left:?}");
    assert!(
        open_fds() <= fds0,
        "R's descriptors outlived its drop while a wait of it lives: {} > {fds0}",
        open_fds()
    );
    // Polled later on S's worker: ready with the error at once.
    let t = Instant::now();
    let r2 = join_within(s.spawn(kept), 5).unwrap();
    assert_shutdown_error(&r2, "a wait kept after R's drop, awaited on S");
    assert!(t.elapsed() < Duration::from_secs(1));
    common::drop_within(s, Duration::from_secs(5), "S");
}

// ---------------------------------------------------------------------------------
// 2. The drivers' rescue
// ---------------------------------------------------------------------------------

/// One worker (temporary workers on); a hand-made executor on the test thread reads a
/// socket of the runtime, and its waker takes its time (1.5 s: it waits for
/// something, say a lock). The only worker runs a 300 ms poll; data comes meanwhile,
/// so the rescue thread reads the event and runs the waker. Once the poll is over the
/// worker has nothing to do and parks. A task spawned 50 ms later should run at once.
///
/// Finding (medium): it waits for the waker (~1.2 s). The rescue's
/// `poll_io` -> `IoDriver::poll_now` -> `dispatch` (`driver/io.rs`) wakes with the
/// poll state still locked ("to reuse the vector"); the parking worker takes the
/// drivers, which are unheld (`scheduler/worker/park.rs`, `try_acquire`), and blocks
/// on that lock in `IoDriver::wait`, inside its external park: the spawn's unpark
/// writes the eventfd that nobody reads, and sysmon counts the worker parked, so it
/// starts no temporary worker. A slow waker on the detached thread, which the change
/// meant to keep away from the runtime, holds its only worker. Before eedbd96 only a
/// worker (the holder, or a busy one at a fairness point, which holds the lock only
/// for its own wakes) dispatched.
#[test]
fn slow_socket_waker_on_the_rescue_thread_blocks_the_worker_that_parks() {
    let _s = serial();
    watchdog(30, || {
        let r = common::no_interactive_runtime(1);
        let (s, mut peer) = weft_and_std(&r);
        let release = flag();
        let returned = flag();
        let woke_on = Arc::new(Mutex::new(None::<String>));
        let (rel, ret, wo) = (release.clone(), returned.clone(), woke_on.clone());
        let waker = fn_waker(move || {
            *wo.lock().unwrap() = Some(thread_name());
            let t = Instant::now();
            while !rel.load(SeqCst) && t.elapsed() < ms(1500) {
                std::thread::sleep(ms(1));
            }
            ret.store(true, SeqCst);
        });
        let mut read = Box::pin(async move {
            let mut s = s;
            let mut b = [0u8; 4];
            let n = AsyncReadExt::read(&mut s, &mut b).await;
            (n.map(|n| b[..n].to_vec()), s)
        });
        assert!(poll_once(read.as_mut(), &waker).is_pending());
        let blocker = long_poll(&r, ms(300));
        std::thread::sleep(ms(30));
        peer.write_all(b"ping").unwrap();
        common::wait_until("the read's waker was called", || {
            woke_on.lock().unwrap().is_some()
        });
        let on = woke_on.lock().unwrap().clone().unwrap();
        join_within(blocker, 10).unwrap();
        // The worker leaves the poll, finds nothing, parks.
        std::thread::sleep(ms(50));
        let t = Instant::now();
        let q = r.spawn(async { Instant::now() });
        let ran = join_within(q, 10).unwrap();
        let late = ran.saturating_duration_since(t);
        let waker_done_first = returned.load(SeqCst);
        let temp = r.stats().temp_workers_started;
        release.store(true, SeqCst);
        common::wait_until("the waker returned", || returned.load(SeqCst));
        match poll_once(read.as_mut(), Waker::noop()) {
            Poll::Ready((Ok(d), _)) => assert_eq!(d, b"ping"),
            other => panic!("the read after its wake: {:?}", other.map(|(r, _)| r)),
        }
        assert_eq!(
            on, "weft-drivers",
            "precondition: the waker ran on the rescue thread"
        );
        assert!(
            late < ms(300),
            "a task spawned on an idle one-worker runtime waited {late:?} (the waker had \
             returned first: {waker_done_first}; temporary workers started: {temp}): the \
             worker, parking with the drivers, waits for the I/O poll state, which the \
             rescue thread holds while it runs a user's waker (woken on {on})"
        );
        common::drop_within(r, Duration::from_secs(5), "after");
    });
}

/// The same shape, with a waker that does what executors' wakers may do: waits for
/// the runtime. The only worker runs a 100 ms poll; data comes meanwhile; the rescue
/// thread runs the read's waker, which (150 ms later, once the worker has parked)
/// spawns a task on the runtime and waits up to 3 s for it to run. Woken by a timer
/// instead (the second round), the same waker gets its task run at once.
///
/// Finding (same cause as above, here a deadlock): the task never runs while the
/// waker waits. The worker parked with the drivers waits in `IoDriver::wait` for the
/// poll state, which the rescue thread holds while it runs this waker, which waits for
/// the worker. With an unbounded wait (a `JoinHandle::join`, a blocking channel) the
/// runtime is stuck for good; the same waker dropping the runtime hangs the drop
/// (`runtime_dropped_by_a_waker_on_the_rescue_thread_once_the_worker_parked`).
#[test]
fn waker_on_the_rescue_thread_waiting_for_the_runtime_deadlocks() {
    let _s = serial();
    watchdog(30, || {
        let mut results = Vec::new();
        for via_socket in [true, false] {
            let r = common::no_interactive_runtime(1);
            let (s, mut peer) = weft_and_std(&r);
            let h = r.handle().clone();
            let outcome = Arc::new(Mutex::new(None::<(String, Option<Duration>)>));
            let out = outcome.clone();
            let waker = fn_waker(move || {
                if out.lock().unwrap().is_some() {
                    return;
                }
                std::thread::sleep(ms(150));
                let (tx, rx) = mpsc::channel();
                let t = Instant::now();
                let _task = h.spawn(async move {
                    let _ = tx.send(());
                });
                let ran = rx
                    .recv_timeout(Duration::from_secs(3))
                    .ok()
                    .map(|()| t.elapsed());
                *out.lock().unwrap() = Some((thread_name(), ran));
            });
            let mut read = Box::pin(async move {
                let mut s = s;
                let mut b = [0u8; 4];
                let n = AsyncReadExt::read(&mut s, &mut b).await;
                (n, s)
            });
            let mut sleep = {
                let _g = r.enter();
                Box::pin(weft::time::sleep(if via_socket {
                    Duration::from_secs(3600)
                } else {
                    ms(30)
                }))
            };
            if via_socket {
                assert!(poll_once(read.as_mut(), &waker).is_pending());
            } else {
                assert!(poll_once(sleep.as_mut(), &waker).is_pending());
            }
            let blocker = long_poll(&r, ms(100));
            std::thread::sleep(ms(30));
            if via_socket {
                peer.write_all(b"ping").unwrap();
            }
            common::wait_until("the waker finished", || outcome.lock().unwrap().is_some());
            let _ = join_within(blocker, 10);
            results.push((via_socket, outcome.lock().unwrap().clone().unwrap()));
            drop((read, sleep));
            common::drop_within(r, Duration::from_secs(5), "after");
        }
        eprintln!("{results:?}");
        for (via_socket, (on, ran)) in &results {
            assert_eq!(
                on, "weft-drivers",
                "precondition: the waker ran on the rescue thread"
            );
            assert!(
                ran.is_some_and(|d| d < ms(500)),
                "a waker run by the rescue thread ({}) spawned a task and waited for it: \
                 {ran:?} (None: not within 3 s); the only worker, parked with the drivers, \
                 waits for the I/O poll state the rescue thread holds while it runs the \
                 waker",
                if *via_socket {
                    "a socket's event"
                } else {
                    "a timer"
                }
            );
        }
    });
}

/// The runtime dropped by a waker that the rescue thread runs for a socket event, 150
/// ms after it was woken (the only worker's 100 ms poll over by then, the worker
/// parked). The drop should return once the worker is gone (a few ms).
///
/// Finding (same cause as the two above): the drop never returns (child killed after
/// 5 s of waiting): it waits for the worker, which waits for the I/O poll state that
/// the dropping thread holds. (`review_s33b` dropped the runtime at once in the wake,
/// while the worker was still in its poll: it then sees the shutdown before it parks.)
#[test]
fn runtime_dropped_by_a_waker_on_the_rescue_thread_once_the_worker_parked() {
    let out = run_child("drop_in_rescue_waker", 20);
    out.assert_finished();
    let on = out.report("woke_on");
    let dropped = out.report("dropped");
    assert_eq!(on, Some("weft-drivers"), "precondition\n{}", out.context());
    assert_eq!(
        dropped,
        Some("true"),
        "a runtime dropped by a waker on the rescue thread (woken for a socket, the \
         worker parked meanwhile) did not return within 5 s: the drop waits for the \
         worker, the worker for the I/O poll state the rescue holds\n{}",
        out.context()
    );
}

fn child_drop_in_rescue_waker() {
    let r = common::no_interactive_runtime(1);
    let (s, mut peer) = weft_and_std(&r);
    let slot = Arc::new(Mutex::new(None::<Runtime>));
    let woke_on = Arc::new(Mutex::new(None::<String>));
    let dropped = flag();
    let (s2, wo, d2) = (slot.clone(), woke_on.clone(), dropped.clone());
    let waker = fn_waker(move || {
        let Some(rt) = s2.lock().unwrap().take() else {
            return;
        };
        *wo.lock().unwrap() = Some(thread_name());
        std::thread::sleep(ms(150));
        drop(rt);
        d2.store(true, SeqCst);
    });
    let mut read = Box::pin(async move {
        let mut s = s;
        let mut b = [0u8; 4];
        let n = AsyncReadExt::read(&mut s, &mut b).await;
        (n, s)
    });
    assert!(poll_once(read.as_mut(), &waker).is_pending());
    let blocker = long_poll(&r, ms(100));
    *slot.lock().unwrap() = Some(r);
    std::thread::sleep(ms(30));
    peer.write_all(b"ping").unwrap();
    common::wait_until("the waker was called", || woke_on.lock().unwrap().is_some());
    let t = Instant::now();
    while !dropped.load(SeqCst) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(ms(5));
    }
    println!("CHILD woke_on={}", woke_on.lock().unwrap().clone().unwrap());
    println!("CHILD dropped={}", dropped.load(SeqCst));
    // (Threads left stuck end with the process.)
    std::mem::forget((read, blocker, peer));
}

/// The contrast to the test above: the same slow waker fired by a timer (the rescue's
/// `time.process()`, which wakes after the wheel's lock) holds nothing a worker
/// needs: a task spawned once the worker parked runs at once.
#[test]
fn slow_timer_waker_on_the_rescue_thread_leaves_the_worker_free() {
    let _s = serial();
    watchdog(30, || {
        let r = common::no_interactive_runtime(1);
        let (_s, _peer) = weft_and_std(&r);
        let release = flag();
        let woke_on = Arc::new(Mutex::new(None::<String>));
        let (rel, wo) = (release.clone(), woke_on.clone());
        let waker = fn_waker(move || {
            *wo.lock().unwrap() = Some(thread_name());
            let t = Instant::now();
            while !rel.load(SeqCst) && t.elapsed() < ms(1500) {
                std::thread::sleep(ms(1));
            }
        });
        let blocker = long_poll(&r, ms(300));
        let mut sleep = {
            let _g = r.enter();
            Box::pin(weft::time::sleep(ms(20)))
        };
        assert!(poll_once(sleep.as_mut(), &waker).is_pending());
        common::wait_until("the sleep's waker was called", || {
            woke_on.lock().unwrap().is_some()
        });
        let on = woke_on.lock().unwrap().clone().unwrap();
        join_within(blocker, 10).unwrap();
        std::thread::sleep(ms(50));
        let t = Instant::now();
        let q = r.spawn(async { Instant::now() });
        let late = join_within(q, 10).unwrap().saturating_duration_since(t);
        release.store(true, SeqCst);
        drop(sleep);
        assert_eq!(
            on, "weft-drivers",
            "precondition: the waker ran on the rescue thread"
        );
        assert!(
            late < ms(300),
            "a task spawned on an idle runtime waited {late:?}"
        );
        common::drop_within(r, Duration::from_secs(5), "after");
    });
}

/// Two workers stuck in 1.5 s polls (temporary workers on); a hand-made sleep of 10
/// ms whose waker takes up to 1.4 s. The rescue thread fires the sleep and runs that
/// waker. Then a plain thread reads a quiet socket of the runtime with a 100 ms
/// timeout: it should end on time (< 800 ms, as in `review_s33`), the purpose of the
/// rescue.
///
/// Finding (low-medium, design): it waits for the waker (~1.3 s). One rescue at a
/// time (`sysmon.rs` `nudge_for_the_drivers`, the `rescuing` flag, cleared when the
/// thread ends): while one user's waker takes its time there, nobody fires the other
/// timers or polls the sockets of the runtime, exactly as before the rescue existed.
/// A second rescue once the first has run for a look or two (a bounded few), or the
/// fired wakers handed to a thread of their own, would keep the other waits served.
#[test]
fn one_slow_waker_on_the_rescue_thread_stops_the_rescue_for_everyone() {
    let _s = serial();
    watchdog(30, || {
        let r = common::no_interactive_runtime(2);
        let (quiet, _qp) = weft_and_std(&r);
        let blockers: Vec<_> = (0..2).map(|_| long_poll(&r, ms(1500))).collect();
        let t0 = Instant::now();
        let release = flag();
        let woke_on = Arc::new(Mutex::new(None::<String>));
        let (rel, wo) = (release.clone(), woke_on.clone());
        let waker = fn_waker(move || {
            *wo.lock().unwrap() = Some(thread_name());
            let t = Instant::now();
            while !rel.load(SeqCst) && t.elapsed() < ms(1400) {
                std::thread::sleep(ms(1));
            }
        });
        let mut s = {
            let _g = r.enter();
            Box::pin(weft::time::sleep(ms(10)))
        };
        assert!(poll_once(s.as_mut(), &waker).is_pending());
        common::wait_until("the sleep's waker was called", || {
            woke_on.lock().unwrap().is_some()
        });
        let on = woke_on.lock().unwrap().clone().unwrap();
        let timed = timed_read(quiet);
        let h = r.handle().clone();
        let sleeper = std::thread::spawn(move || {
            let t = Instant::now();
            h.block_on(weft::time::sleep(ms(50)));
            t.elapsed()
        });
        let took = thread_within(timed, 10);
        let slept = thread_within(sleeper, 10);
        let stuck_for = t0.elapsed();
        release.store(true, SeqCst);
        for b in blockers {
            join_within(b, 10).unwrap();
        }
        drop(s);
        assert_eq!(
            on, "weft-drivers",
            "precondition: the waker ran on the rescue thread"
        );
        assert!(
            stuck_for < ms(1500) || took < ms(800),
            "(the machine was too slow: the reads ended after the stuck polls)"
        );
        assert!(
            took < ms(800) && slept < ms(700),
            "while one user waker ran on the rescue thread, a plain thread's 100 ms socket \
             timeout took {took:?} and a 50 ms block_on sleep {slept:?}: no other rescue \
             starts meanwhile"
        );
        common::drop_within(r, Duration::from_secs(5), "after");
    });
}

/// The two halves of one long `weft::join` (1.2 s each) occupy both workers of a
/// two-worker runtime: the first inside the task's poll, the second stolen by the
/// other worker. A plain thread's 100 ms socket timeout should end on time, as it
/// does when both workers run long task polls (`review_s33`).
///
/// Finding (medium): it waits for the halves (~1.2 s). `all_stuck` (`sysmon.rs`,
/// `run`: `if polls != s.polls || running == 0 || parked { all_stuck &= parked; .. }`)
/// counts a worker whose `running_task` is 0 as one between polls; the thief runs the
/// stolen half at the top of its loop, outside any task's poll, so `running_task`
/// stays 0 for the whole half, and the rescue never starts. (Nor does a temporary
/// worker: no task waits.) A poll count that has not moved since the last look,
/// whatever `running_task` says, would tell a worker stuck in a job.
#[test]
fn fork_join_halves_on_every_worker_leave_the_drivers_unrescued() {
    let _s = serial();
    watchdog(60, || {
        // The precondition (the second half stolen within 1 s) failed in about one
        // run of the whole file in four, never with this test alone: other tests of
        // the file run beside it. A round that misses it is run again, up to 4.
        for round in 0..4 {
            let r = rt(2);
            let (quiet, _qp) = weft_and_std(&r);
            let started = Arc::new(AtomicUsize::new(0));
            let st = started.clone();
            let h = r.spawn(async move {
                let half = || {
                    st.fetch_add(1, SeqCst);
                    std::thread::sleep(ms(1200));
                    std::thread::current().id()
                };
                let (a, b) = weft::join(half, half);
                a != b
            });
            let t0 = Instant::now();
            while started.load(SeqCst) < 2 && t0.elapsed() < ms(1000) {
                std::thread::sleep(ms(1));
            }
            let both = started.load(SeqCst) == 2;
            let timed = timed_read(quiet);
            let took = thread_within(timed, 10);
            let stolen = join_within(h, 10).unwrap();
            common::drop_within(r, Duration::from_secs(5), "after");
            if !(both && stolen) {
                assert!(
                    round < 3,
                    "precondition: the halves ran at once on two workers"
                );
                continue;
            }
            assert!(
                took < ms(800),
                "with both workers inside the halves of one long join, a plain thread's \
                 100 ms socket timeout took {took:?}: the worker running the stolen half \
                 has no running task, and sysmon takes it for one between polls (no rescue)"
            );
            return;
        }
    });
}

/// Both workers stuck in other ways than a task's long poll, each round a plain
/// thread's 100 ms socket timeout must end in < 800 ms: (a) two fibers computing 1.2
/// s; (b) a task's 1.2 s poll and a fiber's; (c) a task inside `weft::wait` of a
/// future that blocks its thread 1.2 s in its poll, beside a fiber doing the same.
#[test]
fn plain_thread_timeout_behind_workers_stuck_in_fibers_and_waits() {
    let _s = serial();
    watchdog(40, || {
        for round in 0..3 {
            let r = rt(2);
            let (quiet, _qp) = weft_and_std(&r);
            let (tx, rx) = mpsc::channel::<()>();
            let fiber = |tx: mpsc::Sender<()>| {
                common::fiber_on(&r, move || {
                    tx.send(()).unwrap();
                    std::thread::sleep(ms(1200));
                })
            };
            let mut hs = vec![fiber(tx.clone())];
            match round {
                0 => hs.push(fiber(tx.clone())),
                1 => {
                    let tx = tx.clone();
                    hs.push(r.spawn(async move {
                        tx.send(()).unwrap();
                        std::thread::sleep(ms(1200));
                    }))
                }
                _ => {
                    let tx = tx.clone();
                    hs.push(r.spawn(async move {
                        weft::wait(async move {
                            tx.send(()).unwrap();
                            std::thread::sleep(ms(1200));
                        })
                    }))
                }
            }
            for _ in 0..2 {
                rx.recv_timeout(Duration::from_secs(5)).unwrap();
            }
            let took = thread_within(timed_read(quiet), 10);
            for h in hs {
                join_within(h, 10).unwrap();
            }
            eprintln!("round {round}: {took:?}");
            assert!(
                took < ms(800),
                "round {round}: behind two stuck workers, a 100 ms socket timeout took {took:?}"
            );
            common::drop_within(r, Duration::from_secs(5), "after");
        }
    });
}

/// Sets up what the two tests below share: both workers of `r` stuck for `block`, a
/// hand-made sleep due at `d` whose waker panics with a [`Bomb`], and `n` counted
/// plain sleeps and one task's sleep due at the same instant (one slot of the wheel:
/// one batch; a slot's list is LIFO and a cascade reverses it, so half of the counted
/// ones are registered before the bomb and half after, and some fire after it in any
/// order).
struct BombSetup {
    blockers: Vec<weft::JoinHandle<()>>,
    bomb_woken: Arc<AtomicUsize>,
    counts: Vec<Arc<AtomicUsize>>,
    sleeps: Vec<Pin<Box<weft::time::Sleep>>>,
    task: weft::JoinHandle<()>,
}

fn bomb_setup(r: &Runtime, block: Duration, n: usize) -> BombSetup {
    let d = Instant::now() + ms(60);
    let (tx, rx) = mpsc::channel();
    let task = r.spawn(async move {
        tx.send(()).unwrap();
        weft::time::sleep_until(d).await;
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    std::thread::sleep(ms(5));
    let blockers: Vec<_> = (0..2).map(|_| long_poll(r, block)).collect();
    let bomb_woken = Arc::new(AtomicUsize::new(0));
    let mut sleeps = Vec::new();
    let mut counts = Vec::new();
    {
        let _g = r.enter();
        let bw = bomb_waker(bomb_woken.clone());
        for i in 0..n + 1 {
            if i == n / 2 {
                let mut s = Box::pin(weft::time::sleep_until(d));
                assert!(poll_once(s.as_mut(), &bw).is_pending());
                sleeps.push(s);
            }
            if i == n {
                break;
            }
            let c = Arc::new(AtomicUsize::new(0));
            let c2 = c.clone();
            let w = fn_waker(move || {
                c2.fetch_add(1, SeqCst);
            });
            let mut s = Box::pin(weft::time::sleep_until(d));
            assert!(poll_once(s.as_mut(), &w).is_pending());
            sleeps.push(s);
            counts.push(c);
        }
    }
    BombSetup {
        blockers,
        bomb_woken,
        counts,
        sleeps,
        task,
    }
}

/// Both workers stuck 500 ms; a hand-made sleep whose waker panics with a payload
/// whose drop panics, and 40 counted sleeps and a task's sleep due with it. The
/// rescue thread fires them. Every other sleep should be woken once, and the task
/// should end, by the time the workers are back and a little after.
///
/// Finding (low; the cause is pre-existing, `driver/mod.rs` `wake_guarded`): the
/// payload is dropped outside the `catch_unwind`, its panic unwinds out of
/// `Driver::process` (`driver/timer.rs`), ends the `weft-drivers` thread and drops
/// the rest of the fired batch unwoken. Those timers are off the wheel: their wakers
/// are never woken (lost wakeups), and the task sleeping among them never runs again
/// (it hangs until the runtime's drop cancels it). On a worker the same panic ends the
/// worker thread.
#[test]
fn panic_payload_that_panics_on_drop_loses_the_rest_of_the_rescue_batch() {
    let _s = serial();
    watchdog(30, || {
        let r = common::no_interactive_runtime(2);
        let mut b = bomb_setup(&r, ms(500), 40);
        for h in b.blockers.drain(..) {
            join_within(h, 10).unwrap();
        }
        std::thread::sleep(ms(200));
        let bombed = b.bomb_woken.load(SeqCst);
        let lost = b.counts.iter().filter(|c| c.load(SeqCst) == 0).count();
        let twice = b.counts.iter().filter(|c| c.load(SeqCst) > 1).count();
        let t = Instant::now();
        while !b.task.is_finished() && t.elapsed() < ms(1500) {
            std::thread::sleep(ms(5));
        }
        let task_done = b.task.is_finished();
        drop(b.sleeps);
        common::drop_within(r, Duration::from_secs(5), "after");
        assert_eq!(bombed, 1, "precondition: the panicking waker was woken");
        assert_eq!(twice, 0);
        assert!(
            lost == 0 && task_done,
            "after a waker's panic whose payload panics on drop, {lost} of {} plain \
             sleeps due just after it were never woken, and the task sleeping among them \
             ended: {task_done}: the rest of the fired batch was dropped unwoken",
            b.counts.len()
        );
    });
}

/// After a rescue thread unwound (the payload of the test above), rescues go on: with
/// both workers stuck again, a plain thread's 100 ms socket timeout ends on time (the
/// flag is cleared on unwind since 86deaf9).
#[test]
fn rescues_go_on_after_a_rescue_thread_unwound() {
    let _s = serial();
    watchdog(30, || {
        let r = common::no_interactive_runtime(2);
        let (quiet, _qp) = weft_and_std(&r);
        let mut b = bomb_setup(&r, ms(300), 0);
        common::wait_until("the panicking waker was woken", || {
            b.bomb_woken.load(SeqCst) == 1
        });
        for h in b.blockers.drain(..) {
            join_within(h, 10).unwrap();
        }
        // (Its wake may have been lost with the batch: see the test above.)
        b.task.abort();
        std::thread::sleep(ms(50));
        let blockers: Vec<_> = (0..2).map(|_| long_poll(&r, ms(1200))).collect();
        let t0 = Instant::now();
        let took = thread_within(timed_read(quiet), 10);
        for h in blockers {
            join_within(h, 10).unwrap();
        }
        drop(b.sleeps);
        assert!(
            took < ms(800) || t0.elapsed() < took,
            "after a rescue thread unwound, a 100 ms socket timeout behind two stuck \
             workers took {took:?}"
        );
        common::drop_within(r, Duration::from_secs(5), "after");
    });
}

/// A 1.5 s stall of both workers with 150 sockets registered and 400 hand-made sleeps
/// falling due all through it: the rescue threads, sampled every millisecond, stay few
/// (one at a time, or up to sysmon's cap of four while one is held up, as a rescue
/// the scheduler keeps off the CPU is; and one more may be exiting), they fire the
/// sleeps on time, and none is left 300 ms after the stall.
#[test]
fn rescue_threads_stay_few_and_end() {
    let _s = serial();
    watchdog(30, || {
        let r = common::no_interactive_runtime(2);
        let l = std::net::TcpListener::bind(common::loopback()).unwrap();
        let addr = l.local_addr().unwrap();
        let mut pairs = Vec::new();
        for _ in 0..150 {
            let w = r.block_on(async move { TcpStream::connect(addr).await.unwrap() });
            pairs.push((w, l.accept().unwrap().0));
        }
        let stop = flag();
        let st = stop.clone();
        let sampler = std::thread::spawn(move || {
            let (mut max, mut seen) = (0usize, std::collections::HashSet::new());
            let end = Instant::now() + Duration::from_secs(10);
            while !st.load(SeqCst) && Instant::now() < end {
                let now = threads_named("weft-drivers");
                max = max.max(now.len());
                seen.extend(now);
                std::thread::sleep(ms(1));
            }
            (max, seen.len())
        });
        let blockers: Vec<_> = (0..2).map(|_| long_poll(&r, ms(1500))).collect();
        let t0 = Instant::now();
        let late = Arc::new(Mutex::new(Duration::ZERO));
        let woken = Arc::new(AtomicUsize::new(0));
        // Sleeps fired on a rescue thread, told by the firing thread's own name: a
        // rescue lives for microseconds, and the 1 ms sampler can miss every one of them
        // (CI once saw 0 in a stall whose sleeps all fired on time).
        let by_rescue = Arc::new(AtomicUsize::new(0));
        let mut sleeps = Vec::new();
        {
            let _g = r.enter();
            for i in 0..400u64 {
                let d = t0 + ms(50 + i * 3);
                let (l2, w2, r2) = (late.clone(), woken.clone(), by_rescue.clone());
                let w = fn_waker(move || {
                    let by = Instant::now().saturating_duration_since(d);
                    if thread_name() == "weft-drivers" {
                        r2.fetch_add(1, SeqCst);
                    }
                    let mut l = l2.lock().unwrap();
                    *l = (*l).max(by);
                    w2.fetch_add(1, SeqCst);
                });
                let mut s = Box::pin(weft::time::sleep_until(d));
                assert!(poll_once(s.as_mut(), &w).is_pending());
                sleeps.push(s);
            }
        }
        for h in blockers {
            join_within(h, 10).unwrap();
        }
        let stalled = t0.elapsed();
        common::wait_until("every sleep woken", || woken.load(SeqCst) == 400);
        std::thread::sleep(ms(300));
        let after = rescue_threads();
        stop.store(true, SeqCst);
        let (max, distinct) = thread_within(sampler, 10);
        let worst = *late.lock().unwrap();
        let rescued = by_rescue.load(SeqCst);
        eprintln!(
            "a {stalled:?} stall: {distinct} rescue threads seen, at most {max} at once; \
             {rescued} of 400 sleeps fired by a rescue; worst sleep lateness {worst:?}"
        );
        assert!(max <= 5, "{max} rescue threads at once");
        assert!(
            rescued >= 1,
            "no sleep fired by a rescue thread in a 1.5 s stall"
        );
        assert_eq!(after, 0, "rescue threads left 300 ms after the stall");
        assert!(
            worst < ms(300),
            "a sleep fired {worst:?} late behind stuck workers"
        );
        drop(sleeps);
        drop(pairs);
        common::drop_within(r, Duration::from_secs(5), "after");
    });
}

/// No rescue thread while any worker makes progress or sleeps: (a) two workers running
/// short polls (a spin of 200 us, then a yield) with sockets and a timer registered;
/// (b) one worker stuck in a long poll and the other parked (sysmon nudges the parked
/// one instead). 600 ms of each, sampled every millisecond.
#[test]
fn busy_or_parked_workers_start_no_rescue_thread() {
    let _s = serial();
    watchdog(30, || {
        let r = common::no_interactive_runtime(2);
        let (_a, _ap) = weft_and_std(&r);
        let far = r.spawn(async { weft::time::sleep(Duration::from_secs(3600)).await });
        let sample = |d: Duration| {
            let t = Instant::now();
            let mut n = 0;
            while t.elapsed() < d {
                n = n.max(rescue_threads());
                std::thread::sleep(ms(1));
            }
            n
        };
        // (a)
        let stop = flag();
        let busy: Vec<_> = (0..3)
            .map(|_| {
                let stop = stop.clone();
                r.spawn(async move {
                    let end = Instant::now() + Duration::from_secs(10);
                    while !stop.load(SeqCst) && Instant::now() < end {
                        common::spin_for(Duration::from_micros(200));
                        weft::task::yield_now().await;
                    }
                })
            })
            .collect();
        std::thread::sleep(ms(30));
        let seen_busy = sample(ms(600));
        stop.store(true, SeqCst);
        for h in busy {
            join_within(h, 10).unwrap();
        }
        // (b)
        std::thread::sleep(ms(50));
        let blocker = long_poll(&r, ms(700));
        std::thread::sleep(ms(30));
        let seen_one = sample(ms(600));
        join_within(blocker, 10).unwrap();
        far.abort();
        assert_eq!(
            seen_busy, 0,
            "a rescue thread while workers ran short polls"
        );
        assert_eq!(seen_one, 0, "a rescue thread while a worker was parked");
        common::drop_within(r, Duration::from_secs(5), "after");
    });
}

/// The earlier case (`review_s33`) with more registered: both workers stuck 1.2 s in
/// polls, 200 sockets registered, 500 timers pending an hour away, tasks sleeping
/// behind the stuck workers. A plain thread's 100 ms socket read timeout ends in <
/// 800 ms, a plain thread's `block_on` of a 50 ms sleep in < 600 ms, and data sent to
/// a plain thread's read 50 ms in is read within 500 ms.
#[test]
fn plain_threads_served_behind_stuck_workers_with_much_registered() {
    let _s = serial();
    watchdog(30, || {
        let r = rt(2);
        let l = std::net::TcpListener::bind(common::loopback()).unwrap();
        let addr = l.local_addr().unwrap();
        let mut pairs = Vec::new();
        for _ in 0..200 {
            let w = r.block_on(async move { TcpStream::connect(addr).await.unwrap() });
            pairs.push((w, l.accept().unwrap().0));
        }
        let far: Vec<_> = (0..500)
            .map(|_| r.spawn(async { weft::time::sleep(Duration::from_secs(3600)).await }))
            .collect();
        let (quiet, _qp) = weft_and_std(&r);
        let (fed, mut fed_peer) = weft_and_std(&r);
        std::thread::sleep(ms(30));
        let blockers: Vec<_> = (0..2).map(|_| long_poll(&r, ms(1200))).collect();
        let t0 = Instant::now();
        let timed = timed_read(quiet);
        let h = r.handle().clone();
        let sleeper = std::thread::spawn(move || {
            let t = Instant::now();
            h.block_on(weft::time::sleep(ms(50)));
            t.elapsed()
        });
        let reader = std::thread::spawn(move || {
            let mut b = [0u8; 4];
            let n = (&fed).read(&mut b).unwrap();
            (n, Instant::now())
        });
        std::thread::sleep(ms(50));
        let sent = Instant::now();
        fed_peer.write_all(b"data").unwrap();
        let took = thread_within(timed, 10);
        let slept = thread_within(sleeper, 10);
        let (n, got) = thread_within(reader, 10);
        let all = t0.elapsed();
        for b in blockers {
            join_within(b, 10).unwrap();
        }
        for f in far {
            f.abort();
        }
        drop(pairs);
        let rlate = got.saturating_duration_since(sent);
        assert_eq!(n, 4);
        eprintln!("100 ms timeout {took:?}, 50 ms sleep {slept:?}, read {rlate:?} after sent");
        assert!(
            all < ms(1200) && took < ms(800) && slept < ms(600) && rlate < ms(500),
            "behind two stuck workers: a 100 ms socket timeout took {took:?}, a 50 ms \
             sleep {slept:?}, data was read {rlate:?} after it was sent"
        );
        common::drop_within(r, Duration::from_secs(5), "after");
    });
}

/// The runtime dropped while the rescue thread runs a user's waker (600 ms): the drop
/// returns once the stuck poll ends, and once the waker returns the rescue thread
/// ends and the runtime's file descriptors (epoll, eventfd, sockets) are all closed.
#[test]
fn runtime_dropped_while_a_rescue_runs_frees_its_driver_after() {
    run_child("drop_during_rescue", 20).assert_finished();
}

fn child_drop_during_rescue() {
    std::thread::sleep(ms(20));
    let fds0 = open_fds();
    let r = common::no_interactive_runtime(1);
    let (s, peer) = weft_and_std(&r);
    let blocker = long_poll(&r, ms(250));
    let inside = flag();
    let returned = flag();
    let (i2, r2) = (inside.clone(), returned.clone());
    let waker = fn_waker(move || {
        i2.store(true, SeqCst);
        std::thread::sleep(ms(600));
        r2.store(true, SeqCst);
    });
    let mut sleep = {
        let _g = r.enter();
        Box::pin(weft::time::sleep(ms(5)))
    };
    assert!(poll_once(sleep.as_mut(), &waker).is_pending());
    drop(waker);
    common::wait_until("the waker was called", || inside.load(SeqCst));
    assert_eq!(rescue_threads(), 1);
    let t = Instant::now();
    common::drop_within(r, Duration::from_secs(5), "while a rescue runs");
    let took = t.elapsed();
    let _ = join_within(blocker, 5);
    drop(sleep);
    drop((s, peer));
    assert!(took < ms(500), "the drop waited {took:?} for the rescue");
    assert!(
        !returned.load(SeqCst),
        "(the machine was too slow for this test)"
    );
    common::wait_until("the waker returned", || returned.load(SeqCst));
    let t = Instant::now();
    while (rescue_threads() > 0 || open_fds() > fds0) && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(ms(5));
    }
    assert_eq!(
        rescue_threads(),
        0,
        "the rescue thread outlived its waker by 2 s"
    );
    assert!(
        open_fds() <= fds0,
        "descriptors left: {} > {fds0}",
        open_fds()
    );
}

/// The process ends (the test returns, libtest exits) while a rescue thread is inside
/// a user's waker that would take 5 s: the child exits at once, with success.
#[test]
fn process_exits_with_a_rescue_thread_running() {
    let out = run_child("exit_during_rescue", 20);
    out.assert_finished();
    assert!(
        out.elapsed < Duration::from_secs(4),
        "the child took {:?} to exit",
        out.elapsed
    );
}

fn child_exit_during_rescue() {
    let r = common::no_interactive_runtime(1);
    let blocker = long_poll(&r, ms(200));
    let inside = flag();
    let i2 = inside.clone();
    let waker = fn_waker(move || {
        i2.store(true, SeqCst);
        std::thread::sleep(Duration::from_secs(5));
    });
    let mut sleep = {
        let _g = r.enter();
        Box::pin(weft::time::sleep(ms(5)))
    };
    assert!(poll_once(sleep.as_mut(), &waker).is_pending());
    common::wait_until("the waker was called", || inside.load(SeqCst));
    assert_eq!(rescue_threads(), 1);
    let _ = join_within(blocker, 5);
    common::drop_within(r, Duration::from_secs(5), "while a rescue runs");
    std::mem::forget(sleep);
}
