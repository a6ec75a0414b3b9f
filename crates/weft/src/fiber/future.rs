//! A fiber as a task: the future whose poll resumes the fiber's stack.
//!
//! The task state machine does the scheduling (DESIGN.md, "A fiber is a task with a
//! stack"): a wake sets the notified bit or makes the task SCHEDULED exactly as for an
//! async task, and the RUNNING owner is the only thread that resumes the stack. When
//! the fiber waits, it polls the awaited future with the task's waker and then
//! *suspends*: control returns to `poll` on the worker's own stack, which returns
//! `Pending`, and only then does the harness move the task from RUNNING to IDLE
//! (yield before commit). A wake that lands anywhere in between finds the task RUNNING
//! and sets the notified bit, so the harness reschedules instead of parking.

use std::cell::{Cell, OnceCell};
use std::future::Future;
use std::marker::PhantomPinned;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll, Waker};

use corosensei::{Coroutine, CoroutineResult, Yielder};

use super::local::Locals;
use crate::scheduler::worker;
use crate::stack::{self, overflow, Stack, LIVE_FIBERS};
use crate::task::current;
use crate::task::header::{HANDED, SOFT_HOME};

/// What a running fiber needs from the thread that resumed it, and what the fiber
/// keeps about itself. Reached through `task::current::fiber()` while the fiber runs.
pub(crate) struct FiberCtx {
    /// Set by the fiber when it starts; lives on the fiber's own stack.
    yielder: Cell<*const Yielder<(), ()>>,
    /// The fiber's task's own waker, set when the fiber starts and kept for the life of
    /// the future. Every `wait` on the fiber polls with it: a `Context` built on it may
    /// stay in use across a nested suspension (a future polled by an outer `wait` whose
    /// poll calls `wait` again resumes, after the inner one, in a later poll of the
    /// task), so it must not live in the frame of the poll that resumed the fiber.
    /// Non-owning (never dropped): the task outlives its future, which holds this.
    waker: OnceCell<ManuallyDrop<Waker>>,
    /// The fiber's task id (0 until it starts).
    pub(crate) id: Cell<u64>,
    pub(crate) name: Option<std::sync::Arc<str>>,
    pub(crate) locals: Locals,
    /// Set while the stack is being unwound after cancellation: the fiber can no
    /// longer suspend, so `wait` blocks the thread instead.
    unwinding: Cell<bool>,
    /// The worker core that resumed the fiber (null off a worker), and its join mark at
    /// that moment.
    core: Cell<*const worker::Core>,
    /// The [`uid`](worker::Core::uid) of the worker loop the fiber is tied to (0: none,
    /// or the fiber migrates): only there may its stack be unwound (see `Drop`).
    home: Cell<u64>,
    join_mark: Cell<(usize, u32)>,
    /// weft locks held by this fiber (see [`super::LockDepth`]).
    pub(crate) lock_depth: Cell<u32>,
    /// Their names, innermost last (kept while lock diagnostics are on).
    pub(crate) lock_names: std::cell::RefCell<Vec<&'static str>>,
    /// What the overflow handler reports about this fiber (set when it starts).
    frame: Cell<overflow::Frame>,
    /// How many times the fiber has come back from a suspension in [`suspend_on`]: a
    /// change during a poll says that a wait nested in that poll suspended the fiber.
    resumes: Cell<u32>,
    /// [`StackPin`]s held: frames of this stack that other tasks may borrow meanwhile
    /// (a blocking nursery waiting for its children). Dropped while any is held, the
    /// fiber's stack is leaked, never unwound (see `Drop`).
    pins: Cell<u32>,
    /// Waits in a row that [`suspend_on`] finished without suspending. A byte: it fits
    /// in the context's padding, where a word made every fiber's task larger and
    /// `spawn_join_100k` 10-20% slower (measured).
    ready_in_a_row: ReadyStreak,
}

/// How many waits in a row a fiber may finish without suspending before the next one
/// yields first. A wait whose future is ready at its first poll costs no switch, so a
/// fiber looping on such waits (`wait(time::timeout(ZERO, ..))` while it polls a flag)
/// never gave its worker back, and a fiber tied there that would have set the flag
/// never ran (found in review). Every such wait counts against a budget, as tokio's
/// tasks count ready operations against theirs, and a wait that suspends restores it.
const READY_BUDGET: u8 = 128;

/// The waits in a row that finished without suspending, against [`READY_BUDGET`]: a
/// fiber's (in its context) and a worker thread's outside fibers (`fiber::wait`'s
/// `on_worker`), one rule for both.
pub(crate) struct ReadyStreak(Cell<u8>);

impl ReadyStreak {
    pub(crate) const fn new() -> ReadyStreak {
        ReadyStreak(Cell::new(0))
    }

    /// Whether the budget is spent, and then a new streak starts: the caller yields
    /// before its next wait polls, so nothing that wait returns is held across the
    /// switch (an abort there would lose a received value).
    #[inline]
    pub(crate) fn take_spent(&self) -> bool {
        let spent = self.0.get() >= READY_BUDGET;
        if spent {
            self.0.set(0);
        }
        spent
    }

    /// Counts a finished wait: one more in the streak if it finished `at_once`
    /// (without suspending), else the streak ends. Saturating: waits nested in a poll
    /// may count past the budget before the outer wait checks it.
    #[inline]
    pub(crate) fn record(&self, at_once: bool) {
        self.0.set(if at_once {
            self.0.get().saturating_add(1)
        } else {
            0
        });
    }
}

impl FiberCtx {
    fn new(name: Option<String>) -> Self {
        FiberCtx {
            yielder: Cell::new(std::ptr::null()),
            waker: OnceCell::new(),
            id: Cell::new(0),
            name: name.map(Into::into),
            locals: Locals::default(),
            unwinding: Cell::new(false),
            core: Cell::new(std::ptr::null()),
            home: Cell::new(0),
            join_mark: Cell::new((0, 0)),
            lock_depth: Cell::new(0),
            lock_names: std::cell::RefCell::new(Vec::new()),
            frame: Cell::new(overflow::Frame::NONE),
            resumes: Cell::new(0),
            pins: Cell::new(0),
            ready_in_a_row: ReadyStreak::new(),
        }
    }

    /// The fiber's own waker (set by `start`, before the fiber first runs).
    #[inline]
    fn waker(&self) -> &Waker {
        self.waker
            .get()
            .expect("weft: a fiber waited before it started")
    }

    /// Makes this the running fiber, on its own stack (see `current::enter_fiber`).
    #[inline]
    pub(crate) fn enter(&self) -> current::EnterFiber {
        current::enter_fiber((self as *const FiberCtx).cast(), self.frame_ptr().cast())
    }

    /// [`enter`](Self::enter) for the forced unwind of the fiber's stack, which the
    /// layers below then tell from a panic (`current::fiber_force_unwinding`).
    fn enter_unwinding(&self) -> current::EnterFiber {
        current::enter_fiber_unwinding((self as *const FiberCtx).cast(), self.frame_ptr().cast())
    }

    /// What the overflow handler reports while this fiber is current (see
    /// `current::signal_frame`).
    pub(crate) fn frame_ptr(&self) -> *const overflow::Frame {
        self.frame.as_ptr()
    }
}

/// The context of the fiber running on this thread, or null.
#[inline]
pub(crate) fn current_ctx() -> *const FiberCtx {
    current::fiber().cast()
}

/// The running fiber, unless it is being unwound (by a cancellation, or by a panic on
/// this thread): the fiber that `wait` may suspend.
#[inline]
pub(crate) fn current_fiber() -> Option<NonNull<FiberCtx>> {
    let ctx = NonNull::new(current_ctx().cast_mut())?;
    if std::thread::panicking() {
        // A fiber must not suspend in the middle of a panic's unwind: the thread would
        // stay `panicking()` for whatever it ran next (see `wait_unwinding`).
        return None;
    }
    // SAFETY: a non-null current fiber is the live context of the fiber running on this
    // thread (set for the duration of its resume).
    if unsafe { ctx.as_ref() }.unwinding.get() {
        return None;
    }
    Some(ctx)
}

/// Whether the running fiber's stack is being unwound by its cancellation (`Drop`
/// forces the unwind from the fiber's wait): a payload caught meanwhile is that unwind,
/// not a panic of the fiber's code, and must be resumed.
pub(crate) fn is_force_unwinding() -> bool {
    let ctx = current_ctx();
    // SAFETY: a non-null current fiber is the live context of the fiber running on this
    // thread (set for the duration of its resume, and of its unwind).
    !ctx.is_null() && unsafe { &*ctx }.unwinding.get()
}

/// Keeps the running fiber's stack from being unwound while it lives: other tasks
/// borrow from its frames (a blocking nursery's children). A cancellation that cannot
/// be deferred (shutdown ignores shields) then leaks the stack instead, and a leaked
/// stack stays mapped, so those borrows stay valid. Dropped on the fiber.
pub(crate) struct StackPin(NonNull<FiberCtx>, std::marker::PhantomData<*const ()>);

/// Pins the running fiber's stack ([`StackPin`]); `None` off a fiber.
pub(crate) fn pin_stack() -> Option<StackPin> {
    let ctx = NonNull::new(current_ctx().cast_mut())?;
    // SAFETY: the live context of the fiber running on this thread.
    let c = unsafe { ctx.as_ref() };
    c.pins.set(c.pins.get() + 1);
    Some(StackPin(ctx, std::marker::PhantomData))
}

impl Drop for StackPin {
    fn drop(&mut self) {
        // SAFETY: the pin is `!Send` and lives in a frame of the fiber it pins, so the
        // fiber (and its context) is alive, and running on this thread, when it drops.
        let c = unsafe { self.0.as_ref() };
        c.pins.set(c.pins.get() - 1);
    }
}

/// Whether the running fiber `c` may suspend: it has not entered a fork-join `join` or
/// `scope` since it was resumed (their frames on the worker's deque must be undone in
/// order, so a fiber that suspended there could let another one pop out of turn; such
/// a fiber helps instead). Joins *below* the fiber are fine: a fiber resumed by a
/// worker that helps inside a join returns to that join's helping loop when it
/// suspends, which is proper nesting.
#[inline]
fn may_suspend(c: &FiberCtx) -> bool {
    // Nor while it drops its own runtime (`current::stay_resumed`).
    !current::fiber_stays()
        // SAFETY: `core` is set by the poll that resumed the fiber, on this worker,
        // whose core outlives the poll.
        && unsafe { c.core.get().as_ref() }
            .is_none_or(|core| core.join_mark() == c.join_mark.get())
}

/// The running fiber if `wait` on this thread may suspend it ([`current_fiber`] and
/// [`may_suspend`]).
#[inline]
pub(crate) fn suspendable() -> Option<NonNull<FiberCtx>> {
    let ctx = current_fiber()?;
    // SAFETY: as in `current_fiber`.
    may_suspend(unsafe { ctx.as_ref() }).then_some(ctx)
}

/// Runs `fut` to completion on the fiber `ctx` (from [`current_fiber`]), suspending the
/// fiber (not the thread) while it is pending. Returns `None`, without having
/// suspended, when the fiber may not suspend here ([`may_suspend`], checked only once a
/// poll is pending, so a future that is ready at once costs no check): the caller then
/// waits another way. The future has been polled with the fiber's waker by then, which
/// may wake the fiber spuriously later; fibers re-check on every resume.
///
/// Waits nest: `fut`'s poll may call `wait`, which suspends the fiber in a nested
/// `suspend_on`. Both levels share the task's waker, so the wake-up that resumed the
/// nested level may have been meant for `fut`, and the nested loop consumed it (it
/// re-polls only its own future). When the fiber was resumed during `fut`'s poll, `fut`
/// is therefore polled again instead of suspending on a wake that may never come.
#[inline]
pub(crate) fn suspend_on<F: Future + ?Sized>(
    ctx: NonNull<FiberCtx>,
    mut fut: Pin<&mut F>,
) -> Option<F::Output> {
    let (entered_at, spent) = {
        // SAFETY: the fiber is running and not unwinding (this function's contract),
        // so its context is alive and not borrowed mutably; the borrow ends here,
        // before the yield below may suspend.
        let c = unsafe { ctx.as_ref() };
        (c.resumes.get(), c.ready_in_a_row.take_spent())
    };
    if spent {
        yield_for_budget();
    }
    loop {
        // A fresh shared borrow after every suspension and every poll: between two
        // resumes the poller holds the future mutably, and a nested wait in the poll
        // may suspend.
        // SAFETY: the fiber is running and not unwinding, so its context is alive and
        // not borrowed mutably; its waker was set when it started.
        let (waker, yielder, resumes) = unsafe {
            let c = ctx.as_ref();
            (c.waker(), c.yielder.get(), c.resumes.get())
        };
        let ready = fut.as_mut().poll(&mut Context::from_waker(waker));
        // SAFETY: as above.
        let c = unsafe { ctx.as_ref() };
        if let Poll::Ready(v) = ready {
            // Only counted here: the yield a spent budget asks for comes before the
            // next wait's first poll (`ReadyStreak::take_spent`).
            c.ready_in_a_row.record(c.resumes.get() == entered_at);
            return Some(v);
        }
        if c.resumes.get() != resumes {
            // A nested wait suspended the fiber during the poll.
            continue;
        }
        if !may_suspend(c) {
            return None;
        }
        super::before_park(c);
        // SAFETY: the yielder lives at the base of this fiber's stack for as long as the
        // fiber runs, and we are running on that stack.
        unsafe { &*yielder }.suspend(());
        // SAFETY: as above (a fresh borrow: the fiber has been resumed).
        let c = unsafe { ctx.as_ref() };
        c.resumes.set(c.resumes.get().wrapping_add(1));
    }
}

/// The yield of a fiber whose waits used up [`READY_BUDGET`] without suspending:
/// [`fiber::yield_now`](super::yield_now) where the fiber may suspend; where it may not
/// (inside a fork-join `join` or `scope`) the worker's budget yield, which stays put
/// inside a fork-join computation (see `wait::budget_yield`). Its own wait starts a
/// new streak, so this does not recurse.
#[cold]
#[inline(never)]
fn yield_for_budget() {
    if suspendable().is_some() {
        super::yield_now();
    } else {
        super::wait::budget_yield();
    }
}

enum Run<F, T> {
    Unstarted(F, Stack),
    Started(Coroutine<(), (), T, Stack>),
    Done,
}

/// The future of a fiber's task.
///
/// Not `Unpin`: once the fiber has started, its stack keeps the address of `ctx`
/// (`suspend_on` holds a `NonNull<FiberCtx>` across suspensions, and the overflow
/// handler may read `ctx.frame` during a resume), so `ctx` must stay where it is until
/// the future is dropped.
pub(crate) struct FiberFuture<F, T> {
    run: Run<F, T>,
    ctx: FiberCtx,
    /// `Builder::fiber_migration(true)`: the home worker is only a preference.
    migrate: bool,
    /// The home worker's count of fibers tied to it, while this one is (a temporary
    /// worker may not retire while it is not zero).
    homed: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    _pinned: PhantomPinned,
}

// SAFETY: `F` and `T` are `Send`, and so is everything else a `FiberFuture` holds
// except what lives on a started fiber's stack and in its fiber-locals, which may be
// thread-bound (a reference into a thread-local, a `!Send` value kept across a wait).
// Those are only ever used on one thread, the fiber's home, as a thread's own stack is:
// - running it: a started fiber without migration is resumed only by its home worker
//   (`claim_home` ties it at the poll that starts it; a first poll that hands it to
//   another worker, `hand_off`, runs nothing of it and ties it to nobody; the
//   scheduler hands a task with a hard home only to that worker's queues, and the
//   RUNNING owner alone resumes it);
// - unwinding it (and dropping its fiber-locals), in `Drop`: only where
//   `worker::current_uid()` is the fiber's `home`, that is on the home worker's
//   thread, inside its worker loop (so before that thread's thread-locals are
//   destroyed), and never while another thread runs it (dropping the future needs the
//   task's RUNNING ownership, or the harness's own poll). Anywhere else the stack and
//   the fiber-locals are leaked, never touched: the stack stays mapped, so whatever
//   still points into it stays valid. Shutdown makes sure the routine case happens on
//   the home worker (each worker unwinds its own fibers as it leaves, see
//   `Shared::close_set_aside`); the leak covers a worker stuck past
//   `shutdown_timeout`, and any fiber that arrives after its worker left.
// A fiber that migrates (`fiber_migration`, an `unsafe` opt-in) or that has no home
// (never polled on a worker) is resumed and unwound on any thread: its spawner vouched
// that it keeps only `Send` data across waits.
unsafe impl<F: Send, T: Send> Send for FiberFuture<F, T> {}

/// The largest fiber closure moved onto its stack as it is (corosensei's limit for
/// what it moves there is 1 KiB); larger ones are boxed.
const INLINE_CLOSURE_MAX: usize = 512;

/// What a fiber runs on its own stack: the closure, then its fiber-locals' drops.
fn fiber_body<T>(yielder: &Yielder<(), ()>, f: impl FnOnce() -> T) -> T {
    // SAFETY: the resuming poll set this fiber's context as current.
    let ctx = unsafe { &*current_ctx() };
    ctx.yielder.set(yielder);
    let out = f();
    // Fiber-locals are dropped here, on the fiber, like thread-locals at a thread's
    // exit.
    // SAFETY: as above; the fiber is still running.
    unsafe { &*current_ctx() }.locals.drop_all();
    out
}

impl<F, T> FiberFuture<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    pub(crate) fn new(f: F, stack: Stack, name: Option<String>, migrate: bool) -> Self {
        LIVE_FIBERS.fetch_add(1, Relaxed);
        FiberFuture {
            run: Run::Unstarted(f, stack),
            ctx: FiberCtx::new(name),
            migrate,
            homed: None,
            _pinned: PhantomPinned,
        }
    }

    #[inline(never)]
    fn start(&mut self, cx: &Context<'_>) {
        let Run::Unstarted(f, stack) = std::mem::replace(&mut self.run, Run::Done) else {
            unreachable!()
        };
        let task = current::with(|h| h.map(NonNull::from));
        self.ctx
            .id
            // SAFETY: the task being polled is alive for the poll.
            .set(task.map_or(0, |h| unsafe { h.as_ref() }.id.as_u64()));
        let waker = match task {
            // SAFETY: the task polling this future owns it: the future, and the
            // context holding this waker, are dropped before the task is freed, and
            // the waker is never dropped (`ManuallyDrop`).
            Some(h) => unsafe { crate::task::waker::borrowed(h) },
            // Not polled by a task harness (it always is): an owning clone, leaked.
            None => cx.waker().clone(),
        };
        let _ = self.ctx.waker.set(ManuallyDrop::new(waker));
        self.ctx.frame.set(overflow::Frame::new(
            stack.guard_range(),
            stack.usable_size(),
            self.ctx.id.get(),
            self.ctx.name.as_deref(),
        ));
        if let Some(name) = &self.ctx.name {
            crate::task::diag::register_name(self.ctx.id.get(), name);
        }
        // corosensei moves the closure onto the new stack and refuses (panics) above
        // 1 KiB: a larger one goes over in a box.
        let co = if std::mem::size_of::<F>() <= INLINE_CLOSURE_MAX {
            Coroutine::with_stack(stack, move |yielder: &Yielder<(), ()>, ()| {
                fiber_body(yielder, f)
            })
        } else {
            let f = Box::new(f);
            Coroutine::with_stack(stack, move |yielder: &Yielder<(), ()>, ()| {
                fiber_body(yielder, *f)
            })
        };
        self.run = Run::Started(co);
    }

    /// Ties the fiber to the worker running it: for good at its first poll on a worker
    /// (from then on `ctx.core` is that worker's core), or (with migration) as a
    /// preference refreshed at every poll.
    #[inline]
    fn claim_home(&mut self) {
        if !self.ctx.core.get().is_null() && !self.migrate {
            return;
        }
        self.claim_home_now();
    }

    #[inline(never)]
    fn claim_home_now(&mut self) {
        let core = worker::current_ptr();
        self.ctx.core.set(core);
        // SAFETY: the core of this thread outlives the poll.
        let Some(core) = (unsafe { core.as_ref() }) else {
            return;
        };
        if !self.migrate {
            self.ctx.home.set(core.uid());
            match &self.homed {
                // Counted here already by the worker that handed it over.
                Some(c) if core.is_home_counter(c) => {}
                // Handed elsewhere and started here after all (sysmon's rescue).
                _ => {
                    self.unhome();
                    self.homed = Some(core.home_fiber());
                }
            }
        }
        let home = core.index() as u32 | if self.migrate { SOFT_HOME } else { 0 };
        // The task harness polls the fiber, so a task is current.
        current::with(|h| {
            if let Some(h) = h {
                h.home.store(home, Relaxed);
            }
        });
    }
}

impl<F, T> FiberFuture<F, T> {
    /// Before its first run on a worker: if [`Core::fewer_fibers_elsewhere`] names a
    /// worker with clearly fewer fibers tied to it, the fiber is offered to that worker
    /// unstarted (its task's home set to it with `HANDED`, and woken, so the scheduler
    /// puts it in that worker's `handed` queue), and `true` says so. Once only: an
    /// unstarted fiber that is counted somewhere (`homed`) was offered before, and
    /// starts wherever it is polled next.
    ///
    /// [`Core::fewer_fibers_elsewhere`]: worker::Core::fewer_fibers_elsewhere
    #[inline(never)]
    fn hand_off(&mut self, cx: &Context<'_>) -> bool {
        // SAFETY: the core of this thread outlives the poll.
        let Some(core) = (unsafe { worker::current_ptr().as_ref() }) else {
            return false;
        };
        let Some(to) = core.fewer_fibers_elsewhere() else {
            return false;
        };
        // The task harness polls the fiber, so a task is current; its RUNNING owner
        // (this poll) may write the home, which the scheduler reads after the wake's
        // transition.
        let moved = current::with(|h| {
            h.map(|h| h.home.store(to as u32 | HANDED, Relaxed))
                .is_some()
        });
        if !moved {
            return false;
        }
        self.homed = Some(core.reserve_home(to));
        cx.waker().wake_by_ref();
        true
    }

    /// The fiber no longer ties its home worker (it ended).
    fn unhome(&mut self) {
        if let Some(c) = self.homed.take() {
            c.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Whether this thread may run the fiber's code and drop its fiber-locals: it has no
    /// home (it migrates, or never ran on a worker), or this thread is inside its home
    /// worker's loop (see the `Send` impl).
    fn at_home(&self) -> bool {
        let home = self.ctx.home.get();
        home == 0 || worker::current_uid() == Some(home)
    }

    /// The fiber returned: its stack goes back to the pool.
    #[inline(never)]
    fn finish(&mut self) {
        self.unhome();
        if let Run::Started(co) = std::mem::replace(&mut self.run, Run::Done) {
            // Back on the worker's stack: the fiber's stack is quiescent.
            stack::release(co.into_stack());
        }
    }
}

impl<F, T> Future for FiberFuture<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    type Output = T;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        // `ctx` is structurally pinned: from the fiber's start until the future is
        // dropped, the fiber's stack keeps its address (see `FiberFuture`). What is
        // moved out of `run` (the closure `F` and the stack at the start, the coroutine
        // at the end) does not depend on its own address.
        // SAFETY: the pin guarantees that `ctx` stays put, and nothing here moves it.
        let this = unsafe { self.get_unchecked_mut() };
        if matches!(this.run, Run::Unstarted(..)) {
            if !this.migrate && this.homed.is_none() && this.hand_off(cx) {
                return Poll::Pending;
            }
            this.start(cx);
        }
        this.claim_home();
        let Run::Started(co) = &mut this.run else {
            panic!("weft: a fiber was polled after it finished");
        };
        // SAFETY: the core of this thread outlives the poll.
        if let Some(core) = unsafe { this.ctx.core.get().as_ref() } {
            this.ctx.join_mark.set(core.join_mark());
        }
        let res = {
            // Also what the overflow handler reads (`current::signal_frame`).
            let _fiber = this.ctx.enter();
            co.resume(())
        };
        match res {
            CoroutineResult::Yield(()) => Poll::Pending,
            CoroutineResult::Return(v) => {
                this.finish();
                Poll::Ready(v)
            }
        }
    }
}

impl<F, T> Drop for FiberFuture<F, T> {
    fn drop(&mut self) {
        LIVE_FIBERS.fetch_sub(1, Relaxed);
        self.unhome();
        if self.ctx.name.is_some() && self.ctx.id.get() != 0 {
            crate::task::diag::unregister_name(self.ctx.id.get());
        }
        match std::mem::replace(&mut self.run, Run::Done) {
            Run::Unstarted(f, stack) => {
                drop(f);
                stack::release(stack);
            }
            Run::Started(mut co) => {
                if !self.at_home() || (self.ctx.pins.get() > 0 && !co.done()) {
                    // Off the home worker's thread, or past its worker loop (shutdown
                    // gave up on a stuck worker, or the fiber arrived after its worker
                    // left): what the stack and the fiber-locals hold may be bound to
                    // that thread, so they are leaked, not unwound. The stack stays
                    // mapped: anything that still points into it stays valid. A pinned
                    // stack (`StackPin`) is leaked too: other tasks borrow from it.
                    if co.done() {
                        stack::release(co.into_stack());
                    } else {
                        std::mem::forget(co);
                    }
                    std::mem::forget(self.ctx.locals.take());
                    return;
                }
                // `wait` cannot suspend from here on: the fiber is done or unwinding.
                self.ctx.unwinding.set(true);
                if !co.done() {
                    // Cancelled while suspended: unwind the stack from its park point so
                    // its locals are dropped.
                    let _fiber = self.ctx.enter_unwinding();
                    co.force_unwind();
                }
                stack::release(co.into_stack());
                // After a panic or a cancellation the fiber-locals are still here; drop
                // them as the fiber, so their destructors may use fiber-locals too (on
                // the stack the thread is on: the fiber's is back in the pool).
                let _fiber = current::enter_fiber_here((&self.ctx as *const FiberCtx).cast());
                self.ctx.locals.drop_all();
            }
            Run::Done => {}
        }
    }
}
