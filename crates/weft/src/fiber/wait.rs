//! `wait(future)`: run a future to completion from wherever the caller stands.
//!
//! On a fiber the fiber suspends. On a worker thread the worker keeps running other
//! work: the loop stack the wait runs on is set aside until the future's waker fires
//! (see `scheduler::stacks`), so no other task's poll ever nests inside the waiting
//! one. Anywhere else the thread sleeps on a futex until woken.
//!
//! Waits nest: a future's poll may itself call `wait`. Each level must keep its own
//! wake-ups, or a wake meant for the outer future is consumed by the inner loop (which
//! polls only the inner future) and the outer one then sleeps for ever. The worker path
//! makes a signal per call; a plain thread uses a fresh one when nested (see
//! [`block_thread`]); a fiber re-polls after a nested suspension (`fiber::suspend_on`).

use std::cell::Cell;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc as StdArc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use crate::base::park::Parker;
use crate::fiber::future::ReadyStreak;
use crate::scheduler::stacks::WaitSignal;
use crate::scheduler::worker;
use crate::task::{JoinError, JoinHandle};
use crate::{Handle, Runtime};

struct ThreadSignal(Parker);

impl Wake for ThreadSignal {
    fn wake(self: StdArc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &StdArc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion from wherever it is called, and returns its output.
///
/// * On a fiber, the fiber is suspended (not its thread) until the future's waker
///   fires; the worker runs other work meanwhile.
/// * On a worker thread outside a fiber (inside a task's poll, or a fork-join job),
///   the worker keeps running other work: the stack this wait runs on is set aside
///   until the future's waker fires, and the worker goes on on another stack, so a
///   worker never sleeps while work waits and no wait ever has to wait for another
///   task's wait to end. Inside a fork-join `join` or `scope` the stack cannot be set
///   aside; the worker then runs other work on top of it.
/// * While a panic unwinds on this thread (a `Drop` that waits), the thread blocks and
///   runs nothing else (no task may run inside another's unwind): what it waits for
///   must be able to run elsewhere. A task the waiter spawned moves where other workers
///   can take it, but on a one-worker pool, or for a fiber tied to this worker, such a
///   wait cannot end.
///
/// A wait whose future is ready at its first poll does not suspend, but 128 such
/// waits in a row on a worker (a fiber's, or a task's) make the next one yield first (a
/// cooperative budget, as tokio's), so a loop of waits that are always ready still lets
/// the other fibers and tasks of its worker run. Not inside a fork-join `join` or
/// `scope`: a yield there would run the worker's other work on top of the join half,
/// and a sibling half that then waits for this one would hang both; such a loop keeps
/// its worker, as any computation inside a join does.
///
/// A future that wakes itself on every poll (a loop of `yield_now`) lets the worker run
/// other ready work between its polls, as a fiber's yield does; so does a timed wait
/// (`recv_timeout`, `select_timeout`, ...) whose deadline had already passed, so that a
/// loop retrying one never keeps its worker from a partner tied there. A wait in
/// progress when the runtime shuts down goes on resuming the waits set aside on its
/// worker, firing timers and unwinding that worker's suspended fibers (so a lock or a
/// sender that such a fiber holds is released), until its future completes. The
/// fibers go first: a fiber whose cleanup (a `Drop` of its locals) needs what the
/// waiting code holds (a lock it took before the wait) then waits for it for ever, and
/// so does the runtime's drop.
/// * On any other thread, the thread sleeps until the waker fires.
///
/// Inside an async task, prefer `.await`: `wait` there occupies the worker's stack for
/// as long as it helps.
///
/// Locks held across a wait: a `weft::sync` guard is fine (that is what those locks
/// are for). A `std::sync::Mutex` (or any other thread-blocking lock) guard is not: on a
/// fiber the guard stays held while the fiber is suspended, and another fiber or task
/// on the same worker that then blocks on that lock blocks the worker thread itself,
/// which can deadlock the fiber that holds it. weft cannot see such a guard, so this is
/// not reported; only weft's own locks (a `weft::sync::watch::Ref`) are, as
/// `PARK-UNDER-LOCK` (debug builds, or `WEFT_DEBUG_LOCKS=1`).
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// // From a plain thread: blocks.
/// assert_eq!(weft::wait(rt.spawn(async { 3 })).unwrap(), 3);
/// // From a fiber: suspends the fiber.
/// let h = weft::fiber::spawn(|| weft::wait(weft::spawn(async { 4 })).unwrap());
/// assert_eq!(h.join().unwrap(), 4);
/// ```
#[inline]
pub fn wait<F: Future>(mut future: F) -> F::Output {
    // Pinned where the caller passed it: `pin!` moves it first, a copy of the whole
    // future (some 3% of a 32 KiB channel send's time each, measured).
    // SAFETY: `future` is this call's own and nothing but the pin touches it after
    // this line, so it is not moved again; it is dropped in place when the call ends.
    wait_pinned(unsafe { Pin::new_unchecked(&mut future) })
}

/// [`wait`] on a future pinned by its caller (which then passes it on without moving
/// it again: every by-value step copies the whole future).
pub(crate) fn wait_pinned<F: Future>(mut future: Pin<&mut F>) -> F::Output {
    if let Some(fiber) = crate::fiber::current_fiber() {
        if let Some(v) = crate::fiber::suspend_on(fiber, future.as_mut()) {
            return v;
        }
        // The fiber is inside a fork-join join or scope: it waits as its worker would.
    }
    wait_off_fiber(future)
}

/// [`wait`] where no fiber can suspend: on a worker the wait's stack is set aside (or
/// it dispatches, see `scheduler::stacks`); any other thread blocks.
fn wait_off_fiber<F: Future>(future: Pin<&mut F>) -> F::Output {
    if std::thread::panicking() {
        return wait_unwinding(future);
    }
    on_worker(future, true, |core, signal| {
        if core.shared().is_shutdown() {
            // No more tasks run, but waits set aside that are ready go on, and timers
            // fire: waits that depend on each other all end.
            core.wait_shutting_down(signal);
        } else {
            core.wait_for(signal);
        }
    })
}

/// Lets this worker run other ready work before the caller goes on (a blocked wait
/// that keeps finding itself woken, or a timed wait that expired without waiting);
/// nothing off a worker, while a panic unwinds, or when nothing else is ready here.
pub(crate) fn worker_yield() {
    on_this_worker(|core| {
        core.yield_to_others(|| core.wait_signal());
    });
}

/// The ready-wait budget's yield on a worker (a task's waits, or a fiber's where it
/// may not suspend): see `Core::budget_yield`. Nothing off a worker or while a panic
/// unwinds.
pub(crate) fn budget_yield() {
    on_this_worker(worker::Core::budget_yield);
}

/// Runs `f` with this thread's worker, if it is one and no panic unwinds here (no
/// other work may run inside an unwind).
fn on_this_worker(f: impl FnOnce(&worker::Core)) {
    // SAFETY: as in `on_worker`.
    if let Some(core) = unsafe { worker::current_ptr().as_ref() } {
        if !std::thread::panicking() {
            f(core);
        }
    }
}

/// Polls `future` with a waker of this worker's, calling `pending` each time it is
/// pending and its waker has not fired yet; off a worker, blocks the thread. With
/// `may_yield`, a future found woken by the end of two polls in a row (one that wakes
/// itself) lets the worker run other ready work before the next poll.
fn on_worker<F: Future>(
    mut future: Pin<&mut F>,
    may_yield: bool,
    pending: impl Fn(&worker::Core, &StdArc<WaitSignal>),
) -> F::Output {
    // SAFETY: the pointer is set by `Core::run` for the life of the core on this thread
    // and cleared before the core is dropped (null off a worker).
    let Some(core) = (unsafe { worker::current_ptr().as_ref() }) else {
        return block_thread(future);
    };
    // The fibers' budget of ready waits for a task or job that waits: a loop of waits
    // ready at their first poll never let the worker run anything else (found in
    // review).
    if may_yield && ready_in_a_row(ReadyStreak::take_spent) {
        core.budget_yield();
    }
    let signal = core.wait_signal();
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    // Polls in a row that ended with the future already woken: one is a partner that
    // was quick (polled again at once, the cheapest way on), two a future that wakes
    // itself, which would keep the worker for ever.
    let mut woken_in_poll = 0u32;
    let mut at_once = true;
    loop {
        signal.reset();
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            if may_yield {
                ready_in_a_row(|s| s.record(at_once));
            }
            return v;
        }
        at_once = false;
        if !signal.is_woken() {
            woken_in_poll = 0;
            pending(core, &signal);
        } else if may_yield {
            woken_in_poll += 1;
            if woken_in_poll >= 2 && core.yield_to_others(|| signal.clone()) {
                woken_in_poll = 0;
            }
        }
    }
}

/// [`wait`] while a panic unwinds on this thread (a `Drop` that waits): the thread
/// blocks, and runs nothing else meanwhile. Suspending a fiber here would leave the
/// thread `panicking()` for whatever ran next on it (spurious `Mutex` poisoning, and a
/// second panic in a destructor aborts the process), and helping would run other tasks
/// inside the unwind.
#[cold]
fn wait_unwinding<F: Future>(future: Pin<&mut F>) -> F::Output {
    on_worker(future, false, |core, signal| {
        core.block_until(|| signal.is_woken())
    })
}

thread_local! {
    /// Waits in a row on this worker thread, outside fibers, that were ready at their
    /// first poll (see `on_worker`).
    static READY_IN_A_ROW: ReadyStreak = const { ReadyStreak::new() };
    /// The signal of this thread's outermost `block_thread`, kept between calls so that
    /// a wait that does not nest allocates nothing.
    static SIGNAL: StdArc<ThreadSignal> = StdArc::new(ThreadSignal(Parker::new()));
    /// Whether a `block_thread` using [`SIGNAL`] runs on this thread.
    static SIGNAL_IN_USE: Cell<bool> = const { Cell::new(false) };
}

/// This thread's `READY_IN_A_ROW`, read afresh (never inlined: see
/// `worker::current_cell`).
#[inline(never)]
fn ready_in_a_row<R>(f: impl FnOnce(&ReadyStreak) -> R) -> R {
    READY_IN_A_ROW.with(f)
}

/// Clears [`SIGNAL_IN_USE`] when the outermost wait ends (also when a poll panics).
struct InUse;

impl Drop for InUse {
    fn drop(&mut self) {
        SIGNAL_IN_USE.with(|u| u.set(false));
    }
}

/// Polls `future` on this thread, sleeping between polls until its waker fires.
///
/// Every level of nested waits has a signal of its own: with a shared one, a wake-up
/// for the outer future would be consumed by the inner loop, which re-polls only the
/// inner future, and the outer wait would then sleep for ever. The outermost level
/// uses the thread's [`SIGNAL`]; nested levels make a fresh one.
fn block_thread<F: Future>(mut future: Pin<&mut F>) -> F::Output {
    // The loop of `block_thread_until` without a deadline, apart so that the output is
    // returned as it is: through that function's `Option` a large output (a send's
    // error holds its value) was copied twice more.
    let (_in_use, signal) = thread_signal();
    // The waker takes the signal's reference: a clone of it for the waker cost an
    // increment and a decrement (two locked instructions) on every `block_on`.
    let parker: *const Parker = &signal.0;
    let waker = Waker::from(signal);
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        // SAFETY: `waker` holds a strong reference to the signal (it took ours) and
        // lives until this function returns, so the parker is alive here.
        unsafe { (*parker).park() };
    }
}

/// The signal this level of `block_thread` parks on, and while it is the thread's own
/// [`SIGNAL`], the guard that frees it when the level ends.
fn thread_signal() -> (Option<InUse>, StdArc<ThreadSignal>) {
    let outermost = !SIGNAL_IN_USE.with(|u| u.replace(true));
    let in_use = outermost.then_some(InUse);
    let signal = outermost
        .then(|| SIGNAL.try_with(StdArc::clone).ok())
        .flatten()
        .unwrap_or_else(|| StdArc::new(ThreadSignal(Parker::new())));
    (in_use, signal)
}

/// [`block_thread`] that gives up at `deadline` (`None` then).
fn block_thread_until<F: Future>(mut future: Pin<&mut F>, deadline: Instant) -> Option<F::Output> {
    let (_in_use, signal) = thread_signal();
    // As in `block_thread`: the waker takes the signal's reference.
    let parker: *const Parker = &signal.0;
    let waker = Waker::from(signal);
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        // SAFETY: `waker` holds a strong reference to the signal and outlives this loop.
        unsafe { (*parker).park_timeout(Some(left)) };
    }
}

/// [`wait`] with a deadline: the future's output, or `None` once `deadline` has passed
/// first (the future is left as it is, for the caller to finish or drop). Off a
/// runtime the thread sleeps with a timeout; on a fiber or a worker a timer of the
/// runtime's ends the wait.
pub(crate) fn wait_until<F: Future>(
    mut future: Pin<&mut F>,
    deadline: Instant,
) -> Option<F::Output> {
    let on_runtime = crate::fiber::current_fiber().is_some() || !worker::current_ptr().is_null();
    if !on_runtime {
        return block_thread_until(future, deadline);
    }
    let mut sleep = pin!(crate::time::sleep_until(deadline));
    let polls = &Cell::new(0u32);
    let out = wait(std::future::poll_fn(move |cx| {
        polls.set(polls.get() + 1);
        if let Poll::Ready(v) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }));
    if out.is_none() && polls.get() == 1 {
        expired_without_waiting();
    }
    out
}

/// A timed wait that timed out without suspending (its deadline had passed by its
/// first look) yields its fiber, or off a fiber its worker: code that retries it in a
/// loop would otherwise never let its worker run anything else, and a partner that
/// only runs there (a fiber pinned to that worker) would never come.
pub(crate) fn expired_without_waiting() {
    if crate::fiber::current_fiber().is_some() {
        crate::fiber::yield_now();
    } else {
        worker_yield();
    }
}

/// Sleeps until `d` by `wait`'s rule (a fiber suspends, a worker helps, a thread
/// blocks); a deadline already past still yields a fiber.
pub(crate) fn sleep_until(d: Instant) {
    wait_until(pin!(std::future::pending::<()>()), d);
}

// The blocking entry points of the lower layers are `wait` on their futures; they are
// defined here, with `wait`, so that those layers do not reach up to this one.

impl<T> JoinHandle<T> {
    /// Blocks until the task finishes and returns its result.
    ///
    /// Works from any thread; it is [`wait`](crate::wait) on the handle. On a fiber it
    /// suspends the fiber. On a worker thread of a weft runtime it does not block the
    /// worker: the stack it runs on is set aside until the task completes, and the worker
    /// goes on running other tasks on another stack, so joining from inside a task on a
    /// one-worker runtime cannot deadlock, however the tasks involved wait on each other
    /// (inside a fork-join `join` or `scope` the stack stays, and the worker runs other
    /// work on top of it). On any other thread it sleeps until the task completes.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(async { "done" });
    /// assert_eq!(h.join().unwrap(), "done");
    /// ```
    pub fn join(self) -> Result<T, JoinError> {
        wait(self)
    }
}

impl Handle {
    /// Runs `future` to completion on the current thread with this runtime as the
    /// current one; it is [`wait`](crate::wait) on the future. On a worker thread the
    /// worker keeps running tasks meanwhile instead of blocking.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.handle().clone();
    /// assert_eq!(h.block_on(async { 7 }), 7);
    /// ```
    #[inline]
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        block_on_entered(crate::runtime::enter(self), future)
    }
}

/// [`Handle::block_on`] once its runtime is entered. The guard is a parameter before
/// the future because parameters are dropped in reverse order: the future's `Drop`
/// runs with the runtime still current, as its polls did, and the future is pinned
/// where the caller passed it. Moving it into a local bound after the guard did the
/// same, but copied the whole future (six joined semaphore acquires: some 16% of
/// their `block_on`, measured).
#[inline]
fn block_on_entered<F: Future>(_enter: crate::runtime::EnterGuard<'_>, mut future: F) -> F::Output {
    // SAFETY: as in `wait`: `future` is this call's own and only the pin touches it.
    wait_pinned(unsafe { Pin::new_unchecked(&mut future) })
}

impl Runtime {
    /// Runs `future` to completion on the current thread, with this runtime as the
    /// current one (so [`spawn`](crate::spawn) works inside). Called from a worker
    /// thread (inside a task) it helps run other tasks instead of deadlocking.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let v = rt.block_on(async { weft::spawn(async { 1 }).await.unwrap() + 1 });
    /// assert_eq!(v, 2);
    /// ```
    #[inline]
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle().block_on(future)
    }
}

/// How long a blocking operation keeps its core before it sleeps: a partner on
/// another core often completes it within a microsecond, far less than a futex park
/// and wake (about 40 us here). A plain thread spins (7 growing rounds, then 8 at the
/// longest), then parks. The longer tail is for hand-offs: a fair lock hands itself to
/// its first waiter, and when that waiter had parked, the others queued behind it
/// outlasted a shorter spin while it woke, parked too, and every later hand-off waited
/// for a futex wake (four threads on `sync::Mutex`, 16 cores: 5.3-6.8 us an increment
/// with the 7 rounds alone, 76-81 ns with the tail). It does not `sched_yield`: the
/// kernel (6.x, EEVDF) puts a yielding thread behind its run queue for about a slice,
/// so with more busy threads than cores a receiver that yielded while its sender kept
/// the core could wait milliseconds a message (`chan_cancel`'s rendezvous cases: 30-55
/// values a second under load, timing out; and `bounded(1)` thread cases ran 1.5-3x
/// slower than parking at once). A worker with nothing else ready spins 3,199 pauses (a started
/// fiber is woken on its own worker, through a futex when that worker sleeps), and
/// stops as soon as work becomes ready there (it looks every 8 pauses); one with
/// other work ready suspends at once.
pub(crate) struct Backoff {
    step: u32,
    limit: u32,
    /// On a worker (which stops spinning when other work becomes ready there).
    on_worker: bool,
}

impl Backoff {
    const SPINS: u32 = 7;
    /// Extra rounds of the longest spin for an idle worker: 3,199 pauses in all, 83 us
    /// on this project's AMD EPYC, where a `pause` takes 26 ns (so a round of the longest
    /// spin is 3.3 us).
    const IDLE_SPINS: u32 = 24;
    /// Extra rounds of the longest spin for a plain thread.
    const THREAD_SPINS: u32 = 8;
    /// Pauses between two looks for ready work on a worker (about 0.2 us; a look is a
    /// few loads of this worker's own queues).
    const CHUNK: u32 = 8;

    pub(crate) fn new() -> Backoff {
        let (on_worker, limit) = crate::scheduler::worker::with_current(|core| match core {
            None => (false, Self::SPINS + Self::THREAD_SPINS),
            Some(c) if c.has_ready_work() => (true, 0),
            Some(_) => (true, Self::SPINS + Self::IDLE_SPINS),
        });
        Backoff {
            step: 0,
            limit,
            on_worker,
        }
    }

    /// Waits a little; `false` once it is time to sleep instead.
    pub(crate) fn snooze(&mut self) -> bool {
        if self.step >= self.limit {
            return false;
        }
        // Work that became ready on this worker meanwhile (the fiber that holds what
        // we wait for, woken here) cannot run while we spin: suspend instead.
        if self.on_worker
            && self.step > 0
            && crate::scheduler::worker::with_current(|c| c.is_some_and(|c| c.has_ready_work()))
        {
            return false;
        }
        // Past `SPINS` rounds, the longest spin again. On a worker, a round longer than
        // `CHUNK` pauses looks for ready work between chunks: a fiber woken here while
        // another spins cannot run until the spinner gives up, and with a whole round
        // of the longest spin (3.3 us) between two looks each hand-off of a fair lock
        // between fibers on two workers waited for it (`fibers_mutex_16`'s slow runs
        // spent three quarters of their time in this loop; looking every 32 pauses took
        // their median from 522 to 442 ns an increment; every 8 took it to 335 and 405
        // ns against 483 and 1,076 for 32 in two alternated sets of session 27; every 2
        // was no better than 8).
        let pauses = 1u32 << self.step.min(Self::SPINS);
        let chunk = if self.on_worker { Self::CHUNK } else { pauses };
        let mut done = 0;
        while done < pauses {
            if done > 0
                && crate::scheduler::worker::with_current(|c| c.is_some_and(|c| c.has_ready_work()))
            {
                return false;
            }
            for _ in 0..chunk.min(pauses - done) {
                std::hint::spin_loop();
            }
            done += chunk;
        }
        self.step += 1;
        true
    }
}

/// [`spin_try`], and on a fiber whose worker has other work ready, rounds of letting
/// that work run first (a yield) and trying again, for `budget` after the first spin
/// failed; `None` once it is time to wait in line.
pub(crate) fn spin_yield_try<R>(
    mut attempt: impl FnMut() -> Option<R>,
    budget: std::time::Duration,
) -> Option<R> {
    let mut since = None;
    loop {
        if let Some(r) = spin_try(&mut attempt) {
            return Some(r);
        }
        let since = *since.get_or_insert_with(Instant::now);
        if since.elapsed() >= budget || !yield_to_ready_work() {
            return None;
        }
    }
}

/// Suspends the current fiber behind the work ready on its worker; `false` (and no
/// yield) off a fiber, where it may not suspend, or when nothing else is ready.
fn yield_to_ready_work() -> bool {
    if !worker::with_current(|c| c.is_some_and(|c| c.has_ready_work())) {
        return false;
    }
    crate::fiber::suspend_for_a_yield()
}

/// Tries `attempt` at once, then retries it while backing off; `None` once it is
/// time to sleep.
pub(crate) fn spin_try<R>(mut attempt: impl FnMut() -> Option<R>) -> Option<R> {
    if let Some(r) = attempt() {
        return Some(r);
    }
    let mut b = Backoff::new();
    while b.snooze() {
        if let Some(r) = attempt() {
            return Some(r);
        }
    }
    None
}
