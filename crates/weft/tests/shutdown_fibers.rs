//! Shutdown and suspended fibers (issue 13): a fiber's stack is unwound on its home
//! worker's thread, before that thread's thread-locals are destroyed and while the
//! worker runs nothing else; where that cannot be (its worker is stuck in a task), the
//! fiber is leaked, never unwound on another thread.
//!
//! Every fiber here parks inside `thread_local!{}.with(..)` holding a reference to the
//! worker's value in a guard; the guard's `Drop` records which thread ran it, whether
//! the value it points to was still intact, and whether a task was running on the
//! worker at that moment. Each case runs in a child process (this test binary again,
//! with `WEFT_SHUTDOWN_FIBERS_CHILD` naming it): reading a dead thread's storage may
//! crash, and a stuck worker must not outlive its case.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use common::{counter, load, on, wait_until, TIMEOUT};
use futures_channel::oneshot;
use weft::fiber;
use weft::{JoinHandle, Runtime};

const CHILD: &str = "WEFT_SHUTDOWN_FIBERS_CHILD";

/// Not a real test unless run as a child: runs the case named by [`CHILD`].
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "drop" => child_drop(),
        "drop_inside_own_task" => child_drop_inside_own_task(),
        "inbox" => child_inbox(),
        "stuck" => child_stuck(false),
        "stuck_then_woken" => child_stuck(true),
        "running_on_stuck" => child_running_on_stuck(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD ok=1");
}

/// Runs the case `case` in a child process and fails with its output unless it passed.
fn run_child(case: &str) {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, case)],
        common::child::LIMIT,
    );
    assert!(
        out.status.success() && out.report("ok") == Some("1"),
        "case {case:?} failed\n{}",
        out.context()
    );
}

/// Bug 2: a runtime dropped from another thread unwinds each suspended fiber on its
/// home worker, whose thread-locals are still alive (before: on the dropping thread,
/// after the workers had exited, reading their freed storage).
#[test]
fn drop_unwinds_each_fiber_on_its_home_worker() {
    run_child("drop");
}

/// Bug 2 with the runtime dropped from inside one of its own tasks: the fibers of the
/// other worker are unwound there (before: on the dropping worker, after the other one
/// had exited), and those of the dropping task's own worker once that task's poll
/// returned.
#[test]
fn drop_inside_own_task_unwinds_each_fiber_on_its_home_worker() {
    run_child("drop_inside_own_task");
}

/// Bug 3, first path: a fiber woken into the inbox of a worker that is busy with a
/// task when shutdown begins is unwound by that worker once the task returns (before:
/// at once on the dropping thread, while the task still ran on the worker).
#[test]
fn an_inbox_entry_at_shutdown_is_unwound_by_its_worker() {
    run_child("inbox");
}

/// Bug 3, second path: `shutdown_timeout` with the fiber's worker stuck in a task
/// leaks the fiber (its handle reports cancellation) and never unwinds it, neither on
/// the shutting-down thread nor on the worker once it comes back (before: unwound on
/// the shutting-down thread while the task still ran on the worker).
#[test]
fn shutdown_timeout_leaks_the_fibers_of_a_stuck_worker() {
    run_child("stuck");
}

/// Bug 3, third path: a fiber of a stuck worker woken from another thread after
/// `shutdown_timeout` returned is not unwound on the waking thread either.
#[test]
fn a_fiber_of_a_stuck_worker_woken_after_shutdown_timeout_is_not_unwound() {
    run_child("stuck_then_woken");
}

/// A fiber that is itself what keeps its worker stuck past `shutdown_timeout` is
/// unwound by that worker once it comes back and parks.
#[test]
fn a_fiber_running_on_a_stuck_worker_is_unwound_there_when_it_parks() {
    run_child("running_on_stuck");
}

// ---------------------------------------------------------------------------------
// The thread-local and the guard.

const MAGIC: u64 = 0x5EED_F1BE_12AB_CDEF;
const WORDS: usize = 64;

fn pattern(i: usize) -> u64 {
    MAGIC ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A recognisable value; its `Drop` (run by the thread-local destructors when its
/// thread exits) poisons it before its buffer is freed.
struct Payload {
    magic: u64,
    words: Vec<u64>,
}

impl Payload {
    fn new() -> Self {
        Payload {
            magic: MAGIC,
            words: (0..WORDS).map(pattern).collect(),
        }
    }

    fn intact(&self) -> bool {
        // The magic first: once poisoned, the buffer may be gone.
        self.magic == MAGIC
            && self.words.len() == WORDS
            && self.words.iter().enumerate().all(|(i, &w)| w == pattern(i))
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.magic = 0;
        self.words.iter_mut().for_each(|w| *w = 0);
    }
}

thread_local! {
    static PAYLOAD: Payload = Payload::new();
}

/// Set while a task keeps a worker busy ([`busy_task`]).
static BUSY: AtomicBool = AtomicBool::new(false);

/// What a guard saw when it was dropped.
#[derive(Debug, Clone)]
struct Record {
    fiber: usize,
    home: (ThreadId, String),
    dropped_on: (ThreadId, String),
    intact: bool,
    busy: bool,
}

static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

fn records() -> Vec<Record> {
    RECORDS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn this_thread() -> (ThreadId, String) {
    let t = std::thread::current();
    (t.id(), t.name().unwrap_or("").to_string())
}

/// Held by a fiber across its park, pointing into its worker's [`PAYLOAD`].
struct Guard<'a> {
    fiber: usize,
    payload: &'a Payload,
    home: (ThreadId, String),
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let r = Record {
            fiber: self.fiber,
            home: self.home.clone(),
            dropped_on: this_thread(),
            intact: self.payload.intact(),
            busy: BUSY.load(SeqCst),
        };
        RECORDS.lock().unwrap_or_else(|e| e.into_inner()).push(r);
    }
}

/// Runs `park` (which must not return before shutdown) inside `PAYLOAD.with`, holding
/// a [`Guard`]; returns the home thread through `home`. Counts itself in `parked` just
/// before it parks.
fn hold_tls_and_park(
    fiber: usize,
    parked: &AtomicUsize,
    homes: &Mutex<Vec<(usize, (ThreadId, String))>>,
    park: impl FnOnce(),
) {
    PAYLOAD.with(|payload| {
        let home = this_thread();
        homes.lock().unwrap().push((fiber, home.clone()));
        let _guard = Guard {
            fiber,
            payload,
            home,
        };
        parked.fetch_add(1, SeqCst);
        park();
        panic!("fiber {fiber} resumed after shutdown");
    })
}

type Homes = Arc<Mutex<Vec<(usize, (ThreadId, String))>>>;

/// Spawns fibers `ids` from this thread (so they go to the injection queue, where any
/// free worker takes them), each parked for an hour in [`hold_tls_and_park`]; returns
/// once all of them are suspended.
fn spawn_sleepers(rt: &Runtime, ids: std::ops::Range<usize>, homes: &Homes) -> Vec<JoinHandle<()>> {
    let parked = counter();
    let n = ids.len();
    let handles = on(rt, || {
        ids.map(|i| {
            let (parked, homes) = (parked.clone(), homes.clone());
            fiber::spawn(move || {
                hold_tls_and_park(i, &parked, &homes, || {
                    fiber::sleep(Duration::from_secs(3_600))
                })
            })
        })
        .collect()
    });
    wait_until("the fibers parked", || load(&parked) == n);
    settle();
    handles
}

/// Lets fibers that counted themselves parked actually suspend.
fn settle() {
    std::thread::sleep(Duration::from_millis(50));
}

fn runtime(workers: usize, stopped: &Arc<AtomicUsize>) -> Runtime {
    let stopped = stopped.clone();
    weft::Builder::new()
        .worker_threads(workers)
        .interactive_threads(0)
        .stall_report(None)
        .on_thread_stop(move || {
            stopped.fetch_add(1, SeqCst);
        })
        .build()
        .unwrap()
}

/// Spawns a task that sets [`BUSY`] and blocks its worker until `release` gets a
/// message (or is dropped); returns once it runs, with the sender and the task's handle.
fn busy_task(rt: &Runtime) -> (mpsc::Sender<()>, JoinHandle<()>) {
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let h = rt.spawn(async move {
        BUSY.store(true, SeqCst);
        started_tx.send(()).unwrap();
        let _ = release_rx.recv_timeout(TIMEOUT);
        BUSY.store(false, SeqCst);
    });
    started_rx
        .recv_timeout(TIMEOUT)
        .expect("the busy task did not start");
    (release_tx, h)
}

/// Every fiber in `ids` was unwound exactly once, on its home thread, with the
/// thread-local intact and no task running on the worker meanwhile.
fn assert_unwound_at_home(ids: impl IntoIterator<Item = usize>) {
    let recs = records();
    for i in ids {
        let mine: Vec<_> = recs.iter().filter(|r| r.fiber == i).collect();
        assert_eq!(
            mine.len(),
            1,
            "fiber {i} unwound {} times: {recs:#?}",
            mine.len()
        );
        let r = mine[0];
        assert_eq!(
            r.dropped_on, r.home,
            "fiber {i} was unwound off its home worker: {r:#?}"
        );
        assert!(r.intact, "fiber {i} read a dead thread-local: {r:#?}");
        assert!(
            !r.busy,
            "fiber {i} was unwound while a task ran on its worker: {r:#?}"
        );
    }
}

fn assert_cancelled(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let err = h.join().expect_err("a parked fiber finished");
        assert!(err.is_cancelled(), "{err:?}");
    }
}

// ---------------------------------------------------------------------------------
// The cases.

fn child_drop() {
    let stopped = counter();
    let rt = runtime(2, &stopped);
    let homes = Homes::default();
    let handles = spawn_sleepers(&rt, 0..8, &homes);
    drop(rt);
    assert_eq!(load(&stopped), 2);
    assert_cancelled(handles);
    assert_unwound_at_home(0..8);
}

fn child_drop_inside_own_task() {
    let stopped = counter();
    let rt = runtime(2, &stopped);
    let homes = Homes::default();
    let (rt_tx, rt_rx) = mpsc::channel::<Runtime>();
    let (dropper_tx, dropper_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    // Fiber 0 spawns the dropping task into its worker's LIFO slot and parks: the task
    // runs next on that worker (the slot is not stealable) and blocks it until it gets
    // the runtime.
    let parked = counter();
    let first = {
        let (parked, homes) = (parked.clone(), homes.clone());
        on(&rt, move || {
            fiber::spawn(move || {
                hold_tls_and_park(0, &parked, &homes, move || {
                    drop(weft::spawn(async move {
                        dropper_tx.send(this_thread()).unwrap();
                        let rt = rt_rx.recv_timeout(TIMEOUT).unwrap();
                        drop(rt);
                        done_tx.send(()).unwrap();
                    }));
                    fiber::sleep(Duration::from_secs(3_600));
                })
            })
        })
    };
    let dropper = dropper_rx.recv_timeout(TIMEOUT).unwrap();
    wait_until("fiber 0 parked", || load(&parked) == 1);
    // With the dropper's worker blocked, these go to the other worker.
    let mut handles = spawn_sleepers(&rt, 1..6, &homes);
    for (i, home) in homes.lock().unwrap().iter() {
        if *i == 0 {
            assert_eq!(home, &dropper, "the dropping task left fiber 0's worker");
        } else {
            assert_ne!(home, &dropper, "fiber {i} ran on the dropper's busy worker");
        }
    }
    rt_tx.send(rt).unwrap();
    done_rx
        .recv_timeout(TIMEOUT)
        .expect("the task dropped the runtime");
    handles.push(first);
    assert_cancelled(handles);
    wait_until("both workers stopped", || load(&stopped) == 2);
    assert_unwound_at_home(0..6);
}

fn child_inbox() {
    let stopped = counter();
    let rt = runtime(1, &stopped);
    let homes = Homes::default();
    let parked = counter();
    let (wake_tx, wake_rx) = oneshot::channel::<()>();
    let h = {
        let (parked, homes) = (parked.clone(), homes.clone());
        on(&rt, move || {
            fiber::spawn(move || {
                hold_tls_and_park(0, &parked, &homes, move || {
                    let _ = weft::wait(wake_rx);
                    // Woken before shutdown, the fiber must not get to run again.
                    weft::wait(std::future::pending::<()>());
                })
            })
        })
    };
    wait_until("the fiber parked", || load(&parked) == 1);
    // One worker: once the busy task runs, the fiber has suspended.
    let (release, busy) = busy_task(&rt);
    // Woken from this thread while its worker is busy: it waits in the worker's inbox.
    wake_tx.send(()).unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let _ = release.send(());
    });
    drop(rt);
    releaser.join().unwrap();
    assert_cancelled(vec![h]);
    // The busy task finished its poll: it was not cancelled.
    busy.join().unwrap();
    assert_unwound_at_home([0]);
}

/// `woken`: after `shutdown_timeout` returned, the fiber is woken from a third thread.
fn child_stuck(woken: bool) {
    let stopped = counter();
    let rt = runtime(1, &stopped);
    let homes = Homes::default();
    let parked = counter();
    let (wake_tx, wake_rx) = oneshot::channel::<()>();
    let h = {
        let (parked, homes) = (parked.clone(), homes.clone());
        on(&rt, move || {
            fiber::spawn(move || {
                hold_tls_and_park(0, &parked, &homes, move || {
                    let _ = weft::wait(wake_rx);
                })
            })
        })
    };
    wait_until("the fiber parked", || load(&parked) == 1);
    let (release, _busy) = busy_task(&rt);
    rt.shutdown_timeout(Duration::from_millis(100));
    assert_eq!(load(&stopped), 0, "the stuck worker stopped");
    assert!(BUSY.load(SeqCst));
    // The fiber could not be unwound: its handle still completes, as cancelled.
    assert_cancelled(vec![h]);
    if woken {
        std::thread::Builder::new()
            .name("waker".into())
            .spawn(move || {
                let _ = wake_tx.send(());
            })
            .unwrap()
            .join()
            .unwrap();
    }
    assert!(
        records().is_empty(),
        "a fiber of the stuck worker was unwound: {:#?}",
        records()
    );
    // The worker comes back and leaves; the fiber stays leaked.
    release.send(()).unwrap();
    wait_until("the worker stopped", || load(&stopped) == 1);
    assert!(
        records().is_empty(),
        "a leaked fiber was unwound after all: {:#?}",
        records()
    );
}

fn child_running_on_stuck() {
    let stopped = counter();
    let rt = runtime(1, &stopped);
    let homes = Homes::default();
    let parked = counter();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let h = {
        let (parked, homes) = (parked.clone(), homes.clone());
        on(&rt, move || {
            fiber::spawn(move || {
                hold_tls_and_park(0, &parked, &homes, move || {
                    // Keeps the worker in this fiber's poll until released, then parks.
                    let _ = release_rx.recv_timeout(TIMEOUT);
                    weft::wait(std::future::pending::<()>());
                })
            })
        })
    };
    wait_until("the fiber runs", || load(&parked) == 1);
    rt.shutdown_timeout(Duration::from_millis(100));
    assert_eq!(load(&stopped), 0, "the stuck worker stopped");
    assert!(records().is_empty(), "{:#?}", records());
    release_tx.send(()).unwrap();
    assert_cancelled(vec![h]);
    wait_until("the worker stopped", || load(&stopped) == 1);
    assert_unwound_at_home([0]);
}
