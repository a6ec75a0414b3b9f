//! Session 40 review: an adversarial soundness audit of the public API from safe code.
//!
//! Each test either shows a property that safe code relies on (and would fail were it
//! broken), or demonstrates a hole. The comment above each test says which.

// Fibers are spawned inside `block_on` (on a worker) and their handles joined from the
// test thread: the future returning a handle is the point.
#![allow(clippy::async_yields_async)]

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex as StdMutex};
use std::thread::{self, ThreadId};
use std::time::Duration;

use common::{spin_for, wait_until, watchdog, workers};

// ---- auto traits, probed at run time ----
//
// The "inherent impl wins when its bound holds" trick (the `impls` crate): for a
// concrete type, `Probe::<T>::send()` resolves to the inherent method when `T: Send`
// and to the trait's default (false) otherwise. So these tests fail, rather than fail
// to compile, when an auto trait is wrong.

struct Probe<T: ?Sized>(std::marker::PhantomData<T>);

trait NoSend {
    fn send(&self) -> bool {
        false
    }
}
trait NoSync {
    fn sync(&self) -> bool {
        false
    }
}
trait NoUnpin {
    fn unpin(&self) -> bool {
        false
    }
}
impl<T: ?Sized> NoSend for Probe<T> {}
impl<T: ?Sized> NoSync for Probe<T> {}
impl<T: ?Sized> NoUnpin for Probe<T> {}
impl<T: ?Sized + Send> Probe<T> {
    #[allow(dead_code)]
    fn send(&self) -> bool {
        true
    }
}
impl<T: ?Sized + Sync> Probe<T> {
    #[allow(dead_code)]
    fn sync(&self) -> bool {
        true
    }
}
impl<T: ?Sized + Unpin> Probe<T> {
    #[allow(dead_code)]
    fn unpin(&self) -> bool {
        true
    }
}

macro_rules! probe {
    ($t:ty) => {
        Probe::<$t>(std::marker::PhantomData)
    };
}

type StdGuard = std::sync::MutexGuard<'static, ()>;

/// Guards and handles are `Send`/`Sync` only where what they give access to allows it.
/// Passes: a regression guard for every public `unsafe impl Send/Sync` (and the auto
/// impls beside them) that safe code could otherwise use to move a `!Send` value or
/// share a `!Sync` one.
#[test]
fn guards_and_handles_have_sound_auto_traits() {
    use weft::sync::{
        MutexGuard, OwnedMutexGuard, OwnedRwLockReadGuard, RwLockReadGuard, RwLockWriteGuard,
    };
    let mut bad = Vec::new();
    macro_rules! expect {
        ($what:literal, $got:expr, $want:expr) => {
            if $got != $want {
                bad.push(format!("{}: {} (want {})", $what, $got, $want));
            }
        };
    }
    // Mutex guards: `&mut T` to the holder (Send needs T: Send), `&T` when shared.
    expect!(
        "MutexGuard<Rc>: Send",
        probe!(MutexGuard<'static, Rc<()>>).send(),
        false
    );
    expect!(
        "MutexGuard<Cell>: Sync",
        probe!(MutexGuard<'static, Cell<u8>>).sync(),
        false
    );
    expect!(
        "MutexGuard<u8>: Send",
        probe!(MutexGuard<'static, u8>).send(),
        true
    );
    expect!(
        "OwnedMutexGuard<Rc>: Send",
        probe!(OwnedMutexGuard<Rc<()>>).send(),
        false
    );
    expect!(
        "OwnedMutexGuard<Cell>: Sync",
        probe!(OwnedMutexGuard<Cell<u8>>).sync(),
        false
    );
    expect!(
        "OwnedMutexGuard<StdGuard>: Sync",
        probe!(OwnedMutexGuard<StdGuard>).sync(),
        false
    );
    // RwLock guards.
    expect!(
        "RwLockReadGuard<Cell>: Send",
        probe!(RwLockReadGuard<'static, Cell<u8>>).send(),
        false
    );
    expect!(
        "RwLockReadGuard<Cell>: Sync",
        probe!(RwLockReadGuard<'static, Cell<u8>>).sync(),
        false
    );
    expect!(
        "RwLockReadGuard<StdGuard>: Send",
        probe!(RwLockReadGuard<'static, StdGuard>).send(),
        true
    );
    expect!(
        "RwLockWriteGuard<Cell>: Sync",
        probe!(RwLockWriteGuard<'static, Cell<u8>>).sync(),
        false
    );
    expect!(
        "RwLockWriteGuard<StdGuard>: Send",
        probe!(RwLockWriteGuard<'static, StdGuard>).send(),
        false
    );
    expect!(
        "OwnedRwLockReadGuard<Cell>: Send",
        probe!(OwnedRwLockReadGuard<Cell<u8>>).send(),
        false
    );
    // watch::Ref holds a std read guard: it must stay on its thread.
    expect!(
        "watch::Ref: Send",
        probe!(weft::sync::watch::Ref<'static, u8>).send(),
        false
    );
    // Handles.
    expect!(
        "JoinHandle<Rc>: Send",
        probe!(weft::JoinHandle<Rc<()>>).send(),
        false
    );
    expect!(
        "JoinHandle<Rc>: Sync",
        probe!(weft::JoinHandle<Rc<()>>).sync(),
        false
    );
    expect!(
        "JoinHandle<StdGuard>: Send",
        probe!(weft::JoinHandle<StdGuard>).send(),
        false
    );
    expect!(
        "EnterGuard: Send",
        probe!(weft::EnterGuard<'static>).send(),
        false
    );
    // Channels.
    expect!(
        "chan::Sender<Rc>: Send",
        probe!(weft::chan::Sender<Rc<()>>).send(),
        false
    );
    expect!(
        "chan::Receiver<Rc>: Send",
        probe!(weft::chan::Receiver<Rc<()>>).send(),
        false
    );
    expect!(
        "chan::Receiver<Rc>: Sync",
        probe!(weft::chan::Receiver<Rc<()>>).sync(),
        false
    );
    expect!(
        "SendFuture<Rc>: Send",
        probe!(weft::chan::SendFuture<'static, Rc<()>>).send(),
        false
    );
    expect!(
        "SendFuture<Rc>: Sync",
        probe!(weft::chan::SendFuture<'static, Rc<()>>).sync(),
        false
    );
    expect!(
        "RecvFuture<Rc>: Sync",
        probe!(weft::chan::RecvFuture<'static, Rc<()>>).sync(),
        false
    );
    expect!(
        "oneshot::Sender<Rc>: Send",
        probe!(weft::sync::oneshot::Sender<Rc<()>>).send(),
        false
    );
    expect!(
        "oneshot::Receiver<Rc>: Send",
        probe!(weft::sync::oneshot::Receiver<Rc<()>>).send(),
        false
    );
    expect!(
        "broadcast::Sender<Rc>: Send",
        probe!(weft::sync::broadcast::Sender<Rc<()>>).send(),
        false
    );
    expect!(
        "broadcast::Receiver<Rc>: Send",
        probe!(weft::sync::broadcast::Receiver<Rc<()>>).send(),
        false
    );
    expect!(
        "watch::Sender<Rc>: Send",
        probe!(weft::sync::watch::Sender<Rc<()>>).send(),
        false
    );
    expect!(
        "watch::Receiver<Cell>: Sync",
        probe!(weft::sync::watch::Receiver<Cell<u8>>).sync(),
        false
    );
    expect!(
        "ordered::OrderedSender<Rc>: Send",
        probe!(weft::chan::OrderedSender<Rc<()>>).send(),
        false
    );
    // Sync primitives themselves.
    expect!(
        "sync::Mutex<Rc>: Sync",
        probe!(weft::sync::Mutex<Rc<()>>).sync(),
        false
    );
    expect!(
        "sync::Mutex<Cell>: Sync",
        probe!(weft::sync::Mutex<Cell<u8>>).sync(),
        true
    );
    expect!(
        "sync::RwLock<Cell>: Sync",
        probe!(weft::sync::RwLock<Cell<u8>>).sync(),
        false
    );
    // Fork-join: a scope is shared with its jobs on other workers.
    expect!("Scope: Sync", probe!(weft::Scope<'static>).sync(), true);
    expect!(
        "Nursery<Rc>-less: Sync",
        probe!(weft::Nursery<'static, ()>).sync(),
        true
    );
    assert!(bad.is_empty(), "wrong auto traits:\n{}", bad.join("\n"));
}

/// The futures that link a wait node into a list must be `!Unpin`: an `Unpin` one
/// could be polled (node linked) and then moved or `mem::forget`-ed in place, leaving
/// the list pointing at reused memory. Passes: regression guard.
#[test]
fn futures_with_wait_nodes_are_not_unpin() {
    let mut bad = Vec::new();
    macro_rules! not_unpin {
        ($what:literal, $t:ty) => {
            if probe!($t).unpin() {
                bad.push($what);
            }
        };
    }
    not_unpin!("chan::SendFuture", weft::chan::SendFuture<'static, u8>);
    not_unpin!("chan::RecvFuture", weft::chan::RecvFuture<'static, u8>);
    not_unpin!("sync::Notified", weft::sync::Notified<'static>);
    assert!(
        bad.is_empty(),
        "Unpin futures with intrusive nodes: {bad:?}"
    );

    // The futures of `async fn`s (locks, semaphores, watch, broadcast): checked on
    // values, since their types are unnameable.
    fn unpin_of<F: std::future::Future>(_: &F) -> Probe<F> {
        Probe(std::marker::PhantomData)
    }
    let m = weft::sync::Mutex::new(0u8);
    let held = m.try_lock().unwrap();
    let f = m.lock();
    // `unpin_of` returns a `Probe<impl Future>`: the probe's method resolves on the
    // opaque type, whose auto traits leak.
    assert!(!unpin_of(&f).unpin(), "Mutex::lock future is Unpin");
    drop(f);
    drop(held);
    let s = weft::sync::Semaphore::new(0);
    let f = s.acquire();
    assert!(!unpin_of(&f).unpin(), "Semaphore::acquire future is Unpin");
}

// ---- contexts: what code run on top of a waiting fiber sees ----

weft::fiber_local! {
    static OWNER: Cell<u64> = Cell::new(0);
}

/// A task that a fiber's in-place dispatch runs (the fiber waits inside a fork-join
/// `scope`, so it may not suspend, and the worker runs other work above it) must not
/// see that fiber as current: otherwise its own waits would try to suspend the fiber
/// from a loop stack, and it would read the fiber's locals. Passes: regression guard.
#[test]
fn task_run_while_a_fiber_dispatches_in_a_scope_sees_no_fiber() {
    watchdog(10, || {
        let rt = workers(1);
        let seen = rt.block_on(async {
            weft::fiber::spawn(|| {
                OWNER.with(|o| o.set(77));
                weft::scope(|_| {
                    let t = weft::spawn(async {
                        let is_fiber = weft::fiber::is_fiber();
                        let local = OWNER.try_with(|o| o.get()).ok();
                        // A wait of the task's own, with the fiber below it.
                        weft::fiber::sleep(Duration::from_millis(2));
                        (is_fiber, local, weft::fiber::is_fiber())
                    });
                    weft::wait(t).unwrap()
                })
            })
            .await
            .unwrap()
        });
        assert_eq!(
            seen,
            (false, None, false),
            "(is_fiber, fiber-local, is_fiber after a wait)"
        );
    });
}

/// A fork-join half of fiber F that is stolen must never see another fiber's
/// `fiber_local!` values: were a fiber G waiting in its own `join` to run F's stolen
/// half on G's stack with G's context current, a job of F would read and write G's
/// locals (same thread as G, so no data race, but `fiber_local!`'s "each fiber sees its
/// own value" broken). Checked: a fiber's `join` only helps with its own half's
/// descendants (`wait_for_thief`), a `scope` only with its own jobs, so a stolen half
/// sees no fiber (`try_with` errs) or, run inline, its own fiber. Passes: guard.
#[test]
fn join_half_never_sees_another_fibers_locals() {
    let foreign = watchdog(15, || {
        let rt = workers(4);
        let foreign = Arc::new(AtomicUsize::new(0));
        let fibers: Vec<_> = (1..=8u64)
            .map(|me| {
                let foreign = foreign.clone();
                rt.block_on(async move {
                    weft::fiber::spawn(move || {
                        OWNER.with(|o| o.set(me));
                        for _ in 0..100 {
                            let probe = || {
                                spin_for(Duration::from_micros(200));
                                OWNER.try_with(|o| o.get()).ok()
                            };
                            let (a, b) = weft::join(probe, probe);
                            for seen in [a, b].into_iter().flatten() {
                                if seen != me {
                                    foreign.fetch_add(1, SeqCst);
                                }
                            }
                        }
                    })
                })
            })
            .collect();
        for f in fibers {
            f.join().unwrap();
        }
        foreign.load(SeqCst)
    });
    assert_eq!(
        foreign, 0,
        "join halves saw another fiber's fiber-local value {foreign} times"
    );
}

// ---- the thread rule: a started fiber never changes threads ----

/// Non-migrating fibers keep `!Send` values (an `Rc`, a reference into a
/// thread-local) across every kind of wait, under stealing pressure and with
/// temporary workers coming and going. Passes: regression guard of the thread rule.
#[test]
fn rc_and_thread_local_refs_held_by_fibers_stay_on_their_thread() {
    thread_local! {
        static TL: Cell<u64> = const { Cell::new(0) };
    }
    watchdog(15, || {
        let rt = weft::Builder::new()
            .worker_threads(3)
            .max_extra_workers(3)
            .extra_worker_keep_alive(Duration::from_millis(20))
            .build()
            .unwrap();
        let moved = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = weft::chan::unbounded::<()>();
        // Tasks that block their worker now and then: sysmon starts temporary workers,
        // which fibers may start on, and which retire when idle.
        let blockers: Vec<_> = (0..3)
            .map(|_| {
                rt.spawn(async {
                    for _ in 0..6 {
                        thread::sleep(Duration::from_millis(15));
                        weft::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        let fibers: Vec<_> = (0..12)
            .map(|i| {
                let moved = moved.clone();
                let rx = rx.clone();
                rt.block_on(async move {
                    weft::fiber::spawn(move || {
                        let rc = Rc::new(thread::current().id());
                        // The address of this thread's thread-local, kept across waits.
                        let tl: *const Cell<u64> = TL.with(|c| c as *const _);
                        for round in 0..60u32 {
                            match (round + i) % 4 {
                                0 => weft::fiber::yield_now(),
                                1 => weft::fiber::sleep(Duration::from_micros(300)),
                                2 => {
                                    let _ = weft::wait(weft::time::timeout(
                                        Duration::from_micros(500),
                                        rx.recv(),
                                    ));
                                }
                                _ => {
                                    weft::spawn(async {}).join().unwrap();
                                }
                            }
                            let here = TL.with(|c| c as *const _);
                            if *rc != thread::current().id() || here != tl {
                                moved.fetch_add(1, SeqCst);
                            }
                        }
                    })
                })
            })
            .collect();
        for f in fibers {
            f.join().unwrap();
        }
        for b in blockers {
            b.join().unwrap();
        }
        drop(tx);
        assert_eq!(
            moved.load(SeqCst),
            0,
            "a non-migrating fiber changed threads"
        );
    });
}

/// A `!Send` future given to `weft::wait` in an async task on a worker (the wait sets
/// the worker's loop stack aside) is only ever polled on that worker's thread.
/// Passes: regression guard.
#[test]
fn non_send_future_in_a_task_wait_stays_on_its_thread() {
    watchdog(10, || {
        let rt = workers(4);
        let moved = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let moved = moved.clone();
                rt.spawn(async move {
                    for _ in 0..20 {
                        let rc = Rc::new(thread::current().id());
                        let r2 = rc.clone();
                        let stayed = weft::wait(async move {
                            weft::time::sleep(Duration::from_micros(200)).await;
                            weft::task::yield_now().await;
                            *r2 == thread::current().id()
                        });
                        if !stayed {
                            moved.fetch_add(1, SeqCst);
                        }
                        if *rc != thread::current().id() {
                            moved.fetch_add(1, SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.join().unwrap();
        }
        assert_eq!(moved.load(SeqCst), 0);
    });
}

// ---- fiber-locals: destructors that touch fiber-locals ----

struct Recorded(ThreadId, Arc<StdMutex<Vec<bool>>>);

impl Drop for Recorded {
    fn drop(&mut self) {
        self.1
            .lock()
            .unwrap()
            .push(self.0 == thread::current().id());
    }
}

fn log() -> Arc<StdMutex<Vec<bool>>> {
    GLOBAL_LOG
        .get_or_init(|| Arc::new(StdMutex::new(Vec::new())))
        .clone()
}

static GLOBAL_LOG: std::sync::OnceLock<Arc<StdMutex<Vec<bool>>>> = std::sync::OnceLock::new();

struct TouchesLate;

impl Drop for TouchesLate {
    fn drop(&mut self) {
        // Creates another fiber-local while the fiber's locals are being dropped: its
        // value (thread-bound in general: it records its thread) outlives that drop.
        let _ = LATE.try_with(|_| ());
    }
}

weft::fiber_local! {
    static EARLY: TouchesLate = TouchesLate;
    static LATE: Recorded = Recorded(thread::current().id(), log());
}

/// A fiber-local created by another fiber-local's destructor (at the fiber's end, or
/// at its cancellation) is still dropped on the thread it was made on. Passes: guard.
#[test]
fn fiber_local_created_during_teardown_is_dropped_on_its_thread() {
    watchdog(10, || {
        let rt = workers(2);
        // Normal end.
        let h = rt.block_on(async {
            weft::fiber::spawn(|| {
                EARLY.with(|_| ());
                weft::fiber::sleep(Duration::from_millis(1));
            })
        });
        h.join().unwrap();
        // Cancelled while suspended, aborted from this (non-worker) thread.
        let h = rt.block_on(async {
            weft::fiber::spawn(|| {
                EARLY.with(|_| ());
                weft::fiber::sleep(Duration::from_secs(60));
            })
        });
        thread::sleep(Duration::from_millis(20));
        h.abort();
        assert!(h.join().unwrap_err().is_cancelled());
        drop(rt);
        let log = log();
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 2, "both late fiber-locals dropped: {log:?}");
        assert!(
            log.iter().all(|&same| same),
            "dropped on another thread: {log:?}"
        );
    });
}

// ---- lifetimes: borrows must not outlive scope/join/nursery ----

/// A scope body that panics right after spawning a job still waits for the job, which
/// borrows the caller's frame. Passes: guard.
#[test]
fn scope_waits_for_borrowing_jobs_when_its_body_panics() {
    watchdog(10, || {
        let _rt = workers(2);
        let mut data = [0u64; 4];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            weft::scope(|s| {
                s.spawn(|_| {
                    thread::sleep(Duration::from_millis(50));
                    data[0] = 42;
                });
                panic!("body");
            })
        }));
        assert!(r.is_err());
        assert_eq!(data[0], 42, "the scope returned before its job finished");
    });
}

/// `join` whose first half panics still waits for the second (stolen) half, which
/// borrows the caller's frame. Passes: guard.
#[test]
fn join_waits_for_the_other_half_when_one_panics() {
    watchdog(10, || {
        let _rt = workers(2);
        let mut data = [0u64; 2];
        let (left, right) = data.split_at_mut(1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            weft::join(
                || {
                    thread::sleep(Duration::from_millis(10));
                    panic!("a");
                },
                || {
                    thread::sleep(Duration::from_millis(60));
                    right[0] = 7;
                },
            )
        }));
        let _ = left;
        assert!(r.is_err());
        assert_eq!(data[1], 7, "join returned before its other half finished");
    });
}

/// A fiber that owns a blocking nursery is aborted while its children borrow its
/// frame: the frame must not be left (nor unwound) until the children ended.
/// Passes: guard.
#[test]
fn aborted_owner_of_a_blocking_nursery_outlives_its_borrowing_children() {
    watchdog(10, || {
        let rt = workers(2);
        let frame_left = Arc::new(AtomicBool::new(false));
        let violated = Arc::new(AtomicBool::new(false));
        let child_done = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        struct OnLeave(Arc<AtomicBool>);
        impl Drop for OnLeave {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        let (fl, vi, cd, st) = (
            frame_left.clone(),
            violated.clone(),
            child_done.clone(),
            started.clone(),
        );
        let h = rt.block_on(async move {
            weft::fiber::spawn(move || {
                let _leave = OnLeave(fl.clone());
                let mut borrowed = vec![0u64; 8];
                let _ = weft::nursery_blocking(|n| {
                    let b = &mut borrowed;
                    let (fl, vi, cd, st) = (fl.clone(), vi.clone(), cd.clone(), st.clone());
                    n.spawn_fiber(move || {
                        st.store(true, SeqCst);
                        // No wait (no cancellation point): a plain thread sleep.
                        thread::sleep(Duration::from_millis(150));
                        if fl.load(SeqCst) {
                            vi.store(true, SeqCst);
                        }
                        b[0] = 1;
                        cd.store(true, SeqCst);
                        Ok::<(), ()>(())
                    });
                    Ok(())
                });
                borrowed[0]
            })
        });
        wait_until("the child started", || started.load(SeqCst));
        h.abort();
        let _ = h.join();
        assert!(child_done.load(SeqCst), "the owner ended before its child");
        assert!(
            !violated.load(SeqCst),
            "the owner's frame was left while a child borrowed it"
        );
    });
}

/// A fiber-local whose initialiser reads its own key once (its recursion ends by
/// itself): every use in the fiber sees one value, the inner initialiser's, and the
/// outer one is dropped (before the fix: two entries, the first call saw the outer
/// value and every later call the inner one).
#[test]
fn fiber_local_initialised_through_itself_has_one_value() {
    static DEPTH: AtomicUsize = AtomicUsize::new(0);
    static MADE: AtomicUsize = AtomicUsize::new(0);
    fn make() -> usize {
        let n = MADE.fetch_add(1, SeqCst);
        if DEPTH.fetch_add(1, SeqCst) == 0 {
            SELF_READ.with(|_| ());
        }
        DEPTH.fetch_sub(1, SeqCst);
        n
    }
    weft::fiber_local!(static SELF_READ: usize = make());
    watchdog(10, || {
        let rt = workers(1);
        let _g = rt.enter();
        let seen = weft::fiber::spawn(|| {
            let first = SELF_READ.with(|v| *v);
            let later = SELF_READ.with(|v| *v);
            (first, later)
        })
        .join()
        .unwrap();
        assert_eq!(
            MADE.load(SeqCst),
            2,
            "the outer and the inner initialiser ran"
        );
        assert_eq!(
            seen.0, seen.1,
            "the first use and a later one saw different values"
        );
        assert_eq!(seen.0, 1, "the inner initialiser's value stays");
    });
}
