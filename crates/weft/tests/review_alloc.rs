//! Adversarial review of the recycled task-cell allocator (`task/alloc.rs`: per-thread
//! magazines by size class over a process-wide depot), from safe code only.
//!
//! Every cell carries a payload written at spawn and checked when the task runs and when
//! its output is read, and every future and output counts its drops: a block handed out
//! twice, a block of the wrong class, a lost or doubled drop all show as a wrong byte
//! or a wrong count. The attacks: every cell size around the class boundaries and
//! over-aligned cells; drops that panic; cells freed and allocated inside thread-local
//! destructors (before and after the cache's own); drops that spawn and free cells while
//! a cell is being freed (re-entrancy); cells allocated on one runtime's threads and
//! freed on another's, runtimes dropped under them; fibers; memory after bursts and
//! after many short-lived threads (in a child process, by its RSS).

mod common;

use std::cell::RefCell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{counter, load, wait_until, with_timeout};
use weft::{Builder, Handle, JoinHandle, Runtime};

fn rt(workers: usize) -> Runtime {
    Builder::new().worker_threads(workers).build().unwrap()
}

/// A payload of `N` bytes that knows what it must contain and counts its drops.
struct Pay<const N: usize> {
    bytes: [u8; N],
    tag: u8,
    drops: Arc<AtomicUsize>,
    /// Set when a check failed (a drop must not panic here).
    bad: Arc<AtomicBool>,
}

impl<const N: usize> Pay<N> {
    fn new(tag: u8, drops: &Arc<AtomicUsize>, bad: &Arc<AtomicBool>) -> Self {
        Pay {
            bytes: [tag; N],
            tag,
            drops: drops.clone(),
            bad: bad.clone(),
        }
    }
    fn intact(&self) -> bool {
        self.bytes.iter().all(|&b| b == self.tag)
    }
}

impl<const N: usize> Drop for Pay<N> {
    fn drop(&mut self) {
        if !self.intact() {
            self.bad.store(true, SeqCst);
        }
        // Poison the bytes: a block reused while still live would show it.
        self.bytes = [!self.tag; N];
        self.drops.fetch_add(1, SeqCst);
    }
}

/// Spawns 150 tasks (more than two magazines of 64) whose future holds a `Pay<N>`
/// across two yields and returns another; joins a third, drops a third unjoined, aborts
/// a third. Returns the number of `Pay`s created.
fn sized_round<const N: usize>(
    rt: &Runtime,
    drops: &Arc<AtomicUsize>,
    bad: &Arc<AtomicBool>,
) -> usize {
    const TASKS: usize = 150;
    let mut handles = Vec::with_capacity(TASKS);
    for i in 0..TASKS {
        let tag = (i as u8) ^ (N as u8);
        let held = Pay::<N>::new(tag, drops, bad);
        let out = Pay::<N>::new(tag.wrapping_add(1), drops, bad);
        let bad = bad.clone();
        handles.push(rt.spawn(async move {
            weft::task::yield_now().await;
            weft::task::yield_now().await;
            if !held.intact() {
                bad.store(true, SeqCst);
            }
            drop(held);
            out
        }));
    }
    for (i, h) in handles.into_iter().enumerate() {
        match i % 3 {
            0 => {
                let p = h.join().unwrap();
                assert!(p.intact(), "output of size {N} corrupted");
                assert_eq!(p.tag, ((i as u8) ^ (N as u8)).wrapping_add(1));
            }
            1 => drop(h),
            _ => {
                h.abort();
                // Cancelled or finished first: both fine, the drop counts tell the rest.
                let _ = h.join();
            }
        }
    }
    2 * TASKS
}

macro_rules! sweep {
    ($rt:expr, $drops:expr, $bad:expr; $($n:literal)*) => {{
        let mut made = 0;
        $( made += sized_round::<$n>($rt, $drops, $bad); )*
        made
    }};
}

/// Futures and outputs of every size from 0 to 640 bytes in steps of 8 (every cell
/// size a cell of alignment 8 can have, so every class boundary and both sides of
/// `MAX_SIZE`), spawned from a plain thread, run and freed on two workers.
#[test]
fn every_cell_size_round_trips_intact() {
    with_timeout(|| {
        let rt = rt(2);
        let drops = counter();
        let bad = Arc::new(AtomicBool::new(false));
        let made = sweep!(&rt, &drops, &bad;
            0 8 16 24 32 40 48 56 64 72 80 88 96 104 112 120 128 136 144 152 160 168 176
            184 192 200 208 216 224 232 240 248 256 264 272 280 288 296 304 312 320 328
            336 344 352 360 368 376 384 392 400 408 416 424 432 440 448 456 464 472 480
            488 496 504 512 520 528 536 544 552 560 568 576 584 592 600 608 616 624 632
            640 1024 4096);
        drop(rt);
        assert!(!bad.load(SeqCst), "a payload was corrupted");
        assert_eq!(load(&drops), made, "every payload dropped exactly once");
    });
}

macro_rules! aligned {
    ($name:ident, $align:literal) => {
        #[repr(align($align))]
        struct $name {
            bytes: [u8; 24],
            drops: Arc<AtomicUsize>,
            misaligned: Arc<AtomicBool>,
        }
        impl Drop for $name {
            fn drop(&mut self) {
                // Outputs dropped unjoined are dropped in place, inside the cell.
                if self as *const Self as usize % $align != 0 || self.bytes != [7; 24] {
                    self.misaligned.store(true, SeqCst);
                }
                self.drops.fetch_add(1, SeqCst);
            }
        }
    };
}
aligned!(A16, 16);
aligned!(A32, 32);
aligned!(A64, 64);
aligned!(A4096, 4096);

macro_rules! aligned_round {
    ($ty:ident, $align:literal, $rt:expr, $drops:expr, $bad:expr) => {{
        let mut handles = Vec::new();
        for _ in 0..100 {
            let held = $ty {
                bytes: [7; 24],
                drops: $drops.clone(),
                misaligned: $bad.clone(),
            };
            let out = $ty {
                bytes: [7; 24],
                drops: $drops.clone(),
                misaligned: $bad.clone(),
            };
            let bad = $bad.clone();
            handles.push($rt.spawn(async move {
                weft::task::yield_now().await;
                // The future lives in the cell: its state must be aligned there.
                if &held as *const $ty as usize % $align != 0 {
                    bad.store(true, SeqCst);
                }
                drop(held);
                out
            }));
        }
        for (i, h) in handles.into_iter().enumerate() {
            if i % 2 == 0 {
                drop(h.join().unwrap());
            } else {
                // Completed first, so the output is dropped inside the cell.
                wait_until("an aligned task finishes", || h.is_finished());
                drop(h);
            }
        }
        200
    }};
}

/// Over-aligned futures and outputs (16 is cached, 32/64/4096 go to the global
/// allocator): their state and their unjoined outputs sit aligned in the cell.
#[test]
fn over_aligned_cells_stay_aligned() {
    with_timeout(|| {
        let rt = rt(2);
        let drops = counter();
        let bad = Arc::new(AtomicBool::new(false));
        let mut made = 0;
        made += aligned_round!(A16, 16, rt, drops, bad);
        made += aligned_round!(A32, 32, rt, drops, bad);
        made += aligned_round!(A64, 64, rt, drops, bad);
        made += aligned_round!(A4096, 4096, rt, drops, bad);
        drop(rt);
        assert!(!bad.load(SeqCst), "an over-aligned value was misplaced");
        assert_eq!(load(&drops), made);
    });
}

/// A waker that counts how many clones of it exist (the cell keeps one as its join
/// waker until it is freed).
struct CountingWaker;
impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {}
}

/// Polls `h` once with `w` (registering it as the join waker); `Some` if ready.
fn poll_with<T>(h: &mut JoinHandle<T>, w: &Waker) -> Option<Result<T, weft::JoinError>> {
    let mut cx = Context::from_waker(w);
    match Pin::new(h).poll(&mut cx) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}

struct PanicOnDrop {
    drops: Arc<AtomicUsize>,
}
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        panic!("review_alloc: PanicOnDrop");
    }
}

/// A future whose drop panics (aborted while pending) completes its handle with a
/// panic error; an output whose drop panics and is never read is dropped by the task
/// (panic swallowed). Each is dropped once, and the cells are reused afterwards with
/// their payloads intact.
#[test]
fn drops_that_panic_are_reported_and_the_cell_freed_once() {
    with_timeout(|| {
        let rt = rt(2);
        let drops = counter();
        for _ in 0..300 {
            let guard = PanicOnDrop {
                drops: drops.clone(),
            };
            let h = rt.spawn(async move {
                let _g = guard;
                std::future::pending::<()>().await
            });
            h.abort();
            let err = h.join().unwrap_err();
            assert!(err.is_panic(), "the future's drop panic is the join error");
        }
        assert_eq!(load(&drops), 300);
        for _ in 0..300 {
            let d = drops.clone();
            // Handle dropped before completion: nobody reads the output. The task ends
            // only once `tx` is dropped, after the handle: it used to end at once, and a
            // worker that finished it before `drop(h)` left the output to the handle,
            // whose drop then panicked on this thread (seen once in CI).
            let (tx, rx) = weft::sync::oneshot::channel::<()>();
            let h = rt.spawn(async move {
                let _ = rx.await;
                PanicOnDrop { drops: d }
            });
            drop(h);
            drop(tx);
        }
        wait_until("every unread output is dropped", || load(&drops) == 600);
        // The recycled cells still work.
        let ok = counter();
        let bad = Arc::new(AtomicBool::new(false));
        let made = sized_round::<40>(&rt, &ok, &bad) + sized_round::<200>(&rt, &ok, &bad);
        drop(rt);
        assert_eq!(load(&drops), 600);
        assert!(!bad.load(SeqCst));
        assert_eq!(load(&ok), made);
    });
}

/// Finding (not the allocator's: `JoinHandle::drop` on main too; fixed). A handle
/// dropped after its task completed drops the unread output; when that drop panicked,
/// the panic reached the dropping code (as documented) but the handle's reference was
/// never released, so the cell (and everything it holds: here the join waker) leaked.
/// The output is still dropped exactly once (no second drop when the cell is freed).
#[test]
fn handle_drop_whose_output_drop_panics_still_frees_the_cell() {
    with_timeout(|| {
        let rt = rt(2);
        let drops = counter();
        let w = Arc::new(CountingWaker);
        let waker = Waker::from(w.clone());
        for _ in 0..20 {
            let (tx, rx) = futures_channel::oneshot::channel::<()>();
            let d = drops.clone();
            let mut h = rt.spawn(async move {
                // Held until the join waker is registered.
                let _ = rx.await;
                PanicOnDrop { drops: d }
            });
            assert!(poll_with(&mut h, &waker).is_none());
            tx.send(()).unwrap();
            wait_until("the task completes", || h.is_finished());
            let res = catch_unwind(AssertUnwindSafe(|| drop(h)));
            assert!(res.is_err(), "the output's drop panic reaches the dropper");
        }
        assert_eq!(load(&drops), 20);
        drop(waker);
        drop(rt);
        assert_eq!(
            Arc::strong_count(&w),
            1,
            "every cell was freed, with the join waker it held"
        );
    });
}

// ---------------------------------------------------------------------------------
// Thread-local destructors
// ---------------------------------------------------------------------------------

/// What a thread-local destructor does with the runtime: drops the handles it holds
/// (the last references to completed tasks: their cells are freed right there), spawns
/// new tasks (cells allocated there) and hands their handles out, and drops a whole
/// runtime with pending tasks (cells freed there by its shutdown).
struct DtorWork {
    handles: Vec<JoinHandle<Pay<96>>>,
    spawn_on: Option<Handle>,
    own_rt: Option<(Runtime, Vec<JoinHandle<()>>)>,
    out: mpsc::Sender<JoinHandle<Pay<96>>>,
    drops: Arc<AtomicUsize>,
    bad: Arc<AtomicBool>,
    ran: Arc<AtomicUsize>,
}

impl Drop for DtorWork {
    fn drop(&mut self) {
        self.handles.clear();
        if let Some(h) = self.spawn_on.take() {
            for i in 0..130u8 {
                let p = Pay::<96>::new(i, &self.drops, &self.bad);
                let _ = self.out.send(h.spawn(async move {
                    weft::task::yield_now().await;
                    p
                }));
            }
        }
        if let Some((rt, pending)) = self.own_rt.take() {
            drop(rt);
            for h in pending {
                assert!(h.join().unwrap_err().is_cancelled());
            }
        }
        self.ran.fetch_add(1, SeqCst);
    }
}

thread_local! {
    static EARLY: RefCell<Option<DtorWork>> = const { RefCell::new(None) };
    static LATE: RefCell<Option<DtorWork>> = const { RefCell::new(None) };
}

/// A thread touches EARLY before it ever allocates a cell (so EARLY's destructor is
/// registered before the cache's) and LATE after (registered after it): whatever order
/// the thread-local destructors run in, one of them runs with the cache destroyed and
/// the other with it alive. Each frees cells (the last handles of finished tasks),
/// allocates cells (spawns, handles sent out and joined here) and drops a runtime with
/// pending tasks there.
#[test]
fn cells_freed_and_allocated_in_thread_local_destructors() {
    with_timeout(|| {
        let drops = counter();
        let bad = Arc::new(AtomicBool::new(false));
        let ran = counter();
        let shared = rt(2);
        let (tx, rx) = mpsc::channel();
        let mut threads = Vec::new();
        for t in 0..3u8 {
            let (drops, bad, ran, tx) = (drops.clone(), bad.clone(), ran.clone(), tx.clone());
            let handle = shared.handle().clone();
            threads.push(std::thread::spawn(move || {
                let work = || DtorWork {
                    handles: Vec::new(),
                    spawn_on: Some(handle.clone()),
                    own_rt: None,
                    out: tx.clone(),
                    drops: drops.clone(),
                    bad: bad.clone(),
                    ran: ran.clone(),
                };
                EARLY.with(|e| *e.borrow_mut() = Some(work()));
                // The first cells of this thread: its cache comes to life here.
                let mut done: Vec<_> = (0..140u8)
                    .map(|i| {
                        let p = Pay::<96>::new(i ^ t, &drops, &bad);
                        handle.spawn(async move { p })
                    })
                    .collect();
                for h in &done {
                    wait_until("a task completes", || h.is_finished());
                }
                let own = rt(1);
                let pending: Vec<_> = (0..50)
                    .map(|_| own.spawn(std::future::pending::<()>()))
                    .collect();
                let late_half = done.split_off(70);
                LATE.with(|l| {
                    let mut w = work();
                    w.handles = late_half;
                    w.own_rt = Some((own, pending));
                    *l.borrow_mut() = Some(w);
                });
                EARLY.with(|e| e.borrow_mut().as_mut().unwrap().handles = done);
            }));
        }
        drop(tx);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(load(&ran), 6, "every destructor ran to its end");
        // Join what the destructors spawned, here (their cells freed on this thread).
        let mut joined = 0;
        for h in rx {
            let p = h.join().unwrap();
            assert!(p.intact());
            joined += 1;
        }
        assert_eq!(joined, 3 * 2 * 130);
        drop(shared);
        assert!(!bad.load(SeqCst), "a payload was corrupted");
        assert_eq!(load(&drops), 3 * (140 + 2 * 130));
    });
}

thread_local! {
    static HELD: RefCell<Vec<JoinHandle<Pay<96>>>> = const { RefCell::new(Vec::new()) };
}

/// Threads that never allocate or free a cell while they run: they only keep handles
/// of finished tasks (spawned elsewhere) in a thread-local, so the cache is first
/// reached from that thread-local's destructor, where the handles free their cells
/// (more than two magazines' worth, so full magazines leave the thread then). The
/// cells are freed once (drop counts) and the memory is reusable (more rounds of the
/// same; under valgrind nothing is lost).
#[test]
fn first_cell_free_of_a_thread_in_a_thread_local_destructor() {
    with_timeout(|| {
        let rt = rt(2);
        let drops = counter();
        let bad = Arc::new(AtomicBool::new(false));
        const THREADS: usize = 20;
        const PER: usize = 200;
        for _ in 0..THREADS {
            let hs: Vec<_> = (0..PER)
                .map(|i| {
                    let p = Pay::<96>::new(i as u8, &drops, &bad);
                    rt.spawn(async move { p })
                })
                .collect();
            for h in &hs {
                wait_until("a task completes", || h.is_finished());
            }
            std::thread::spawn(move || HELD.with(|h| *h.borrow_mut() = hs))
                .join()
                .unwrap();
        }
        drop(rt);
        assert!(!bad.load(SeqCst), "a payload was corrupted");
        assert_eq!(load(&drops), THREADS * PER);
    });
}

// ---------------------------------------------------------------------------------
// Re-entrancy: cells allocated and freed while a cell is being freed
// ---------------------------------------------------------------------------------

/// A join waker whose last drop (which happens while its task's cell is freed, inside
/// `dealloc`) frees another cell (the last handle of a finished task) and allocates
/// new ones (spawns, handles dropped at once).
struct ReentrantWaker {
    handle: Handle,
    hold: Mutex<Option<JoinHandle<Pay<64>>>>,
    drops: Arc<AtomicUsize>,
    bad: Arc<AtomicBool>,
    ran: Arc<AtomicUsize>,
}
impl Wake for ReentrantWaker {
    fn wake(self: Arc<Self>) {}
}
impl Drop for ReentrantWaker {
    fn drop(&mut self) {
        drop(self.hold.lock().unwrap().take());
        for i in 0..3u8 {
            let p = Pay::<200>::new(i, &self.drops, &self.bad);
            drop(self.handle.spawn(async move {
                weft::task::yield_now().await;
                p
            }));
        }
        self.ran.fetch_add(1, SeqCst);
    }
}

/// The nested frees and allocations inside a free land in the same thread cache as
/// the outer free: every payload stays intact and is dropped once.
#[test]
fn cells_allocated_and_freed_while_a_cell_is_freed() {
    with_timeout(|| {
        const ROUNDS: usize = 200;
        let rt = rt(2);
        let drops = counter();
        let bad = Arc::new(AtomicBool::new(false));
        let ran = counter();
        for r in 0..ROUNDS {
            let p = Pay::<64>::new(r as u8, &drops, &bad);
            let finished = rt.spawn(async move { p });
            wait_until("a task completes", || finished.is_finished());
            let w = Arc::new(ReentrantWaker {
                handle: rt.handle().clone(),
                hold: Mutex::new(Some(finished)),
                drops: drops.clone(),
                bad: bad.clone(),
                ran: ran.clone(),
            });
            let (go, gate) = futures_channel::oneshot::channel::<()>();
            let mut h = rt.spawn(async move {
                let _ = gate.await;
            });
            assert!(poll_with(&mut h, &Waker::from(w)).is_none());
            // The cell now holds the only clone of the waker; the task's completion
            // (on a worker) frees the cell, and with it the waker.
            drop(h);
            go.send(()).unwrap();
        }
        wait_until("every waker was dropped", || load(&ran) == ROUNDS);
        wait_until("every payload was dropped", || load(&drops) == 4 * ROUNDS);
        drop(rt);
        assert!(!bad.load(SeqCst), "a payload was corrupted");
        assert_eq!(load(&drops), 4 * ROUNDS);
    });
}

/// An output whose drop spawns two more tasks of its kind (one level less), dropping
/// their handles: the drops run on workers while they complete and free tasks.
struct Chain {
    depth: u32,
    handle: Handle,
    drops: Arc<AtomicUsize>,
}
impl Drop for Chain {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.depth > 0 {
            for _ in 0..2 {
                let c = Chain {
                    depth: self.depth - 1,
                    handle: self.handle.clone(),
                    drops: self.drops.clone(),
                };
                drop(self.handle.spawn(async move { c }));
            }
        }
    }
}

#[test]
fn output_drops_that_spawn_tasks_run_to_the_end() {
    with_timeout(|| {
        let rt = rt(2);
        let drops = counter();
        const DEPTH: u32 = 9;
        for _ in 0..4 {
            let c = Chain {
                depth: DEPTH,
                handle: rt.handle().clone(),
                drops: drops.clone(),
            };
            drop(rt.spawn(async move { c }));
        }
        let total = 4 * ((1usize << (DEPTH + 1)) - 1);
        wait_until("the chains end", || load(&drops) == total);
        drop(rt);
        assert_eq!(load(&drops), total);
    });
}

// ---------------------------------------------------------------------------------
// Threads and runtimes
// ---------------------------------------------------------------------------------

/// Plain threads spawn on runtime A and hand the handles to tasks of runtime B, which
/// await them (cells allocated by the plain threads, freed by A's or B's workers or by
/// the joiner); half the tasks never finish, and A is dropped from a third thread while
/// B's tasks still await them. Every handle gets its output or a cancellation, and
/// every payload is dropped once.
#[test]
fn cells_cross_threads_and_runtimes_and_survive_a_runtime_drop() {
    with_timeout(|| {
        let a = rt(2);
        let b = rt(1);
        let drops = counter();
        let bad = Arc::new(AtomicBool::new(false));
        let ok = counter();
        let cancelled = counter();
        const PER: usize = 300;
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let mut joiners = Vec::new();
        let spawners: Vec<_> = (0..3u8)
            .map(|t| {
                let (ah, bh) = (a.handle().clone(), b.handle().clone());
                let (drops, bad, ok, cancelled) =
                    (drops.clone(), bad.clone(), ok.clone(), cancelled.clone());
                let ready_tx = ready_tx.clone();
                std::thread::spawn(move || {
                    let mut js = Vec::new();
                    for i in 0..PER {
                        let tag = (i as u8) ^ t;
                        let small = Pay::<40>::new(tag, &drops, &bad);
                        let large = Pay::<600>::new(tag, &drops, &bad);
                        let never = i % 2 == 1;
                        let h = ah.spawn(async move {
                            weft::task::yield_now().await;
                            if never {
                                std::future::pending::<()>().await;
                            }
                            drop(small);
                            large
                        });
                        let (ok, cancelled) = (ok.clone(), cancelled.clone());
                        js.push(bh.spawn(async move {
                            match h.await {
                                Ok(p) => {
                                    assert!(p.intact() && p.tag == tag);
                                    ok.fetch_add(1, SeqCst);
                                }
                                Err(e) => {
                                    assert!(e.is_cancelled(), "{e:?}");
                                    cancelled.fetch_add(1, SeqCst);
                                }
                            }
                        }));
                    }
                    ready_tx.send(()).unwrap();
                    js
                })
            })
            .collect();
        drop(ready_tx);
        for _ in ready_rx {}
        wait_until("the finishing half completes", || load(&ok) == 3 * PER / 2);
        for s in spawners {
            joiners.extend(s.join().unwrap());
        }
        std::thread::spawn(move || drop(a)).join().unwrap();
        for j in joiners {
            j.join().unwrap();
        }
        drop(b);
        assert_eq!(load(&ok), 3 * PER / 2);
        assert_eq!(load(&cancelled), 3 * PER / 2);
        assert!(!bad.load(SeqCst), "a payload was corrupted");
        assert_eq!(load(&drops), 3 * PER * 2);
    });
}

/// Fibers spawn tasks and fibers of several sizes, free them by joining or dropping
/// their handles, and some fibers are aborted while they sleep; then the runtime is
/// dropped under fibers still asleep.
#[test]
fn fibers_allocate_and_free_cells_and_are_aborted() {
    with_timeout(|| {
        let rt = rt(2);
        let drops = counter();
        let bad = Arc::new(AtomicBool::new(false));
        let (d, b) = (drops.clone(), bad.clone());
        let sleepers = common::on(&rt, move || {
            weft::fiber::spawn(move || {
                let mut sleepers = Vec::new();
                for round in 0..20u8 {
                    let mut hs = Vec::new();
                    for i in 0..30u8 {
                        let p = Pay::<120>::new(i ^ round, &d, &b);
                        hs.push(weft::spawn(async move {
                            weft::task::yield_now().await;
                            p
                        }));
                    }
                    let (d2, b2) = (d.clone(), b.clone());
                    let f = weft::fiber::spawn(move || {
                        let p = Pay::<480>::new(round, &d2, &b2);
                        weft::fiber::yield_now();
                        p
                    });
                    // Made here, so it exists (and is dropped once) whether or not
                    // the fiber starts before it is aborted.
                    let p = Pay::<16>::new(round, &d, &b);
                    let sleeper = weft::fiber::spawn(move || {
                        let _p = p;
                        weft::fiber::sleep(Duration::from_secs(3600));
                    });
                    if round % 2 == 0 {
                        sleeper.abort();
                        assert!(sleeper.join().unwrap_err().is_cancelled());
                    } else {
                        sleepers.push(sleeper);
                    }
                    for (i, h) in hs.into_iter().enumerate() {
                        if i % 2 == 0 {
                            assert!(h.join().unwrap().intact());
                        }
                    }
                    assert!(f.join().unwrap().intact());
                }
                sleepers
            })
            .join()
            .unwrap()
        });
        assert_eq!(sleepers.len(), 10);
        drop(rt);
        for s in sleepers {
            assert!(s.join().unwrap_err().is_cancelled());
        }
        assert!(!bad.load(SeqCst), "a payload was corrupted");
        assert_eq!(load(&drops), 20 * (30 + 1 + 1));
    });
}

// ---------------------------------------------------------------------------------
// Memory after bursts (child processes: RSS is process-wide)
// ---------------------------------------------------------------------------------

const CHILD: &str = "WEFT_REVIEW_ALLOC_CHILD";

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Not a real test unless run as a child: runs the case named by [`CHILD`].
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "bursts" => child_bursts(),
        "threads" => child_threads(),
        "waker_drop_panic" => child_waker_drop_panic(),
        "waker_wake_panic" => child_waker_wake_panic(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str) -> common::child::Output {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, case)],
        Duration::from_secs(25),
    );
    out.assert_finished();
    out
}

const MIB: usize = 1 << 20;

/// Bursts of 50,000 spawns (one task spawning, two workers running and freeing), each
/// joined, then idle: the memory held afterwards stops growing after the first bursts
/// (the depot caps what it keeps; before the cap, a leak of the burst's cells would
/// add about 10 MiB a round).
fn child_bursts() {
    let rt = rt(2);
    let mut after = Vec::new();
    for _ in 0..6 {
        rt.block_on(async {
            let hs: Vec<_> = (0..50_000u64)
                .map(|i| weft::spawn(async move { [i; 8] }))
                .collect();
            for (i, h) in hs.into_iter().enumerate() {
                assert_eq!(h.await.unwrap(), [i as u64; 8]);
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        after.push(rss_bytes());
    }
    println!("CHILD rss={after:?}");
    let growth = after[5].saturating_sub(after[1]);
    assert!(
        growth < 12 * MIB,
        "memory grew by {} KiB over four idle-separated bursts: {after:?}",
        growth / 1024
    );
}

/// 2 x 150 short-lived threads, each spawning 200 tasks and freeing their cells
/// (joining: the last reference is often the handle's, on that thread): the second
/// half adds little memory (an exiting thread's magazines go to the depot or are
/// freed).
fn child_threads() {
    let rt = rt(2);
    let mut after = Vec::new();
    for _ in 0..2 {
        for _ in 0..150 {
            let h = rt.handle().clone();
            std::thread::spawn(move || {
                let hs: Vec<_> = (0..200u64)
                    .map(|i| h.spawn(async move { [i; 20] }))
                    .collect();
                for (i, j) in hs.into_iter().enumerate() {
                    assert_eq!(j.join().unwrap(), [i as u64; 20]);
                }
            })
            .join()
            .unwrap();
        }
        after.push(rss_bytes());
    }
    println!("CHILD rss={after:?}");
    let growth = after[1].saturating_sub(after[0]);
    assert!(
        growth < 8 * MIB,
        "memory grew by {} KiB: {after:?}",
        growth / 1024
    );
}

#[test]
fn memory_is_bounded_after_spawn_bursts() {
    let out = run_child("bursts");
    assert!(out.report("rss").is_some());
}

#[test]
fn memory_is_bounded_after_many_short_lived_threads() {
    let out = run_child("threads");
    assert!(out.report("rss").is_some());
}

/// Polls `cond` every 2 ms for at most `secs` seconds; whether it became true.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Drops of [`PanicOnDropWaker`]s (one per round of the child below).
static WAKER_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A join waker whose `Drop` panics: the cell keeps the waker until it is freed, and
/// the task's completion frees it on a worker.
struct PanicOnDropWaker;
impl Wake for PanicOnDropWaker {
    fn wake(self: Arc<Self>) {}
}
impl Drop for PanicOnDropWaker {
    fn drop(&mut self) {
        WAKER_DROPS.fetch_add(1, SeqCst);
        panic!("review_alloc: PanicOnDropWaker");
    }
}

/// Each round: a task registers such a waker through its (then dropped) handle,
/// spawns 50 tasks onto its worker and completes; every one of the 50 must run, the
/// waker must be dropped exactly once (the cell freed), and the runtime must shut
/// down normally at the end (no worker died).
fn child_waker_drop_panic() {
    let rt = rt(2);
    let done = counter();
    for round in 0..4 {
        let (go, gate) = futures_channel::oneshot::channel::<()>();
        let d = done.clone();
        let mut h = rt.spawn(async move {
            let _ = gate.await;
            for _ in 0..50 {
                let d = d.clone();
                drop(weft::spawn(async move {
                    d.fetch_add(1, SeqCst);
                }));
            }
        });
        assert!(poll_with(&mut h, &Waker::from(Arc::new(PanicOnDropWaker))).is_none());
        drop(h);
        go.send(()).unwrap();
        wait_for(4, || load(&done) >= 50 * (round + 1));
        println!("CHILD round{round}={}", load(&done));
        assert_eq!(load(&done), 50 * (round + 1), "tasks were stranded");
        assert!(
            wait_for(4, || WAKER_DROPS.load(SeqCst) > round),
            "the cell holding the join waker was not freed"
        );
        assert_eq!(
            WAKER_DROPS.load(SeqCst),
            round + 1,
            "a join waker dropped twice"
        );
    }
    // Every worker is still there to be joined.
    drop(rt);
}

/// The fix of the finding below: a panic in a join waker's drop at completion is
/// caught and ignored; the worker goes on, and the task's references are released
/// (the cell is freed once). It was: the panic unwound out of the worker loop and
/// ended the worker thread; the task in its LIFO slot was never run (49 of 50 in the
/// first round), and after a few such deaths no task ran at all (the runtime hung).
#[test]
fn a_join_waker_whose_drop_panics_strands_no_task() {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, "waker_drop_panic")],
        Duration::from_secs(25),
    );
    out.assert_finished();
    assert_eq!(out.report("round3"), Some("200"), "{}", out.context());
}

/// A join waker whose `wake` and `wake_by_ref` panic, counting the calls.
struct PanicOnWakeWaker {
    wakes: Arc<AtomicUsize>,
}
impl Wake for PanicOnWakeWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        panic!("review_alloc: PanicOnWakeWaker");
    }
}

/// Spawns 50 counting tasks onto the current worker when dropped (so during the
/// cancellation of the task that holds it).
struct SpawnOnDrop(Arc<AtomicUsize>);
impl Drop for SpawnOnDrop {
    fn drop(&mut self) {
        for _ in 0..50 {
            let d = self.0.clone();
            drop(weft::spawn(async move {
                d.fetch_add(1, SeqCst);
            }));
        }
    }
}

/// Each round: a task's handle is polled from this thread with a waker whose wake
/// panics, and kept; the task spawns 50 tasks onto its worker and then completes:
/// by returning (even rounds) or by being aborted (odd rounds: its future, dropped
/// by the cancellation on a worker, spawns them). The completion wakes the panicking
/// waker, once. Every one of the 50 must run, the handle must still give the
/// task's result, the cell must be freed (its clone of the waker dropped), and the
/// runtime must shut down normally at the end.
fn child_waker_wake_panic() {
    let rt = rt(2);
    let done = counter();
    let wakes = counter();
    for round in 0..6 {
        let d = done.clone();
        let aborted = round % 2 == 1;
        let (go, gate) = futures_channel::oneshot::channel::<()>();
        // Made out here: a task aborted before its first poll drops it too.
        let guard = SpawnOnDrop(d);
        let mut h = rt.spawn(async move {
            if gate.await.is_err() {
                // Not reached: the gate is sent, or the task aborted while waiting.
                std::future::pending::<()>().await;
            }
            drop(guard);
            7u32
        });
        let waker = Arc::new(PanicOnWakeWaker {
            wakes: wakes.clone(),
        });
        assert!(poll_with(&mut h, &Waker::from(waker.clone())).is_none());
        if aborted {
            h.abort();
        } else {
            go.send(()).unwrap();
        }
        let woken = wait_for(4, || load(&wakes) > round);
        wait_for(4, || load(&done) >= 50 * (round + 1));
        println!("CHILD round{round}={}", load(&done));
        assert!(woken, "the join waker was not woken at completion");
        assert_eq!(load(&wakes), round + 1, "the join waker was woken twice");
        assert_eq!(load(&done), 50 * (round + 1), "tasks were stranded");
        let res = h.join();
        if aborted {
            assert!(res.unwrap_err().is_cancelled());
        } else {
            assert_eq!(res.unwrap(), 7);
        }
        assert!(
            wait_for(4, || Arc::strong_count(&waker) == 1),
            "the cell keeping the join waker was not freed"
        );
    }
    drop(rt);
}

/// A join waker whose `wake` panics when the task completes (by returning or by
/// abort, on a worker): the panic is caught and ignored; the worker goes on running
/// the tasks queued behind, and the task's references are released (its cell is
/// freed). It was: the panic skipped the release and ended the worker.
#[test]
fn a_join_waker_whose_wake_panics_strands_no_task() {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, "waker_wake_panic")],
        Duration::from_secs(40),
    );
    out.assert_finished();
    assert_eq!(out.report("round5"), Some("300"), "{}", out.context());
}
