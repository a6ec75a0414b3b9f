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

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll, Waker};

use corosensei::{Coroutine, CoroutineResult, Yielder};

use super::local::Locals;
use super::stack::{self, Stack};
use super::{overflow, LIVE_FIBERS};
use crate::runtime::sysmon;
use crate::scheduler::worker;
use crate::task::current;
use crate::task::header::SOFT_HOME;

/// What a running fiber needs from the thread that resumed it, and what the fiber
/// keeps about itself. Reached through `task::current::fiber()` while the fiber runs.
pub(crate) struct FiberCtx {
    /// Set by the fiber when it starts; lives on the fiber's own stack.
    yielder: Cell<*const Yielder<(), ()>>,
    /// The waker of the poll that resumed the fiber; valid until the fiber suspends.
    waker: Cell<*const Waker>,
    /// The fiber's task id (0 until it starts).
    pub(crate) id: Cell<u64>,
    pub(crate) name: Option<std::sync::Arc<str>>,
    pub(crate) locals: Locals,
    /// Set while the stack is being unwound after cancellation: the fiber can no
    /// longer suspend, so `wait` blocks the thread instead.
    unwinding: Cell<bool>,
    /// weft locks held by this fiber (see [`super::LockDepth`]).
    pub(crate) lock_depth: Cell<u32>,
    guard: Cell<(usize, usize)>,
    stack_size: Cell<usize>,
}

impl FiberCtx {
    fn new(name: Option<String>) -> Self {
        FiberCtx {
            yielder: Cell::new(std::ptr::null()),
            waker: Cell::new(std::ptr::null()),
            id: Cell::new(0),
            name: name.map(Into::into),
            locals: Locals::default(),
            unwinding: Cell::new(false),
            lock_depth: Cell::new(0),
            guard: Cell::new((0, 0)),
            stack_size: Cell::new(0),
        }
    }

    fn enter_overflow(&self) -> overflow::Running {
        overflow::enter(
            self.guard.get(),
            self.stack_size.get(),
            self.id.get(),
            self.name.as_deref(),
        )
    }
}

/// Whether `wait` on this thread may suspend a fiber: a fiber is running, it is not
/// being unwound, and its worker is not inside a fork-join `join` (the join's frames
/// on the worker's deque must be popped in order, so a fiber that suspended there
/// could let another one pop out of turn; such a fiber helps instead).
pub(crate) fn can_suspend() -> bool {
    let ctx = current::fiber();
    if ctx.is_null() {
        return false;
    }
    // SAFETY: a non-null current fiber is the live context of the fiber running on this
    // thread (set for the duration of its resume).
    if unsafe { &*ctx }.unwinding.get() {
        return false;
    }
    worker::with_current(|c| c.is_none_or(|c| !c.in_join()))
}

/// Runs `fut` to completion on the current fiber, suspending the fiber (not the
/// thread) while it is pending. The caller checked [`can_suspend`].
pub(crate) fn suspend_on<F: Future + ?Sized>(mut fut: Pin<&mut F>) -> F::Output {
    loop {
        // The context is looked up afresh after every suspension: between two
        // resumes nothing of the poller's may be held.
        // SAFETY: `can_suspend` held, and a fiber resumes only with its context set.
        let ctx = unsafe { &*current::fiber() };
        // SAFETY: the resuming poll stored its waker and is still on the stack below us.
        let waker = unsafe { &*ctx.waker.get() };
        if let Poll::Ready(v) = fut.as_mut().poll(&mut Context::from_waker(waker)) {
            return v;
        }
        super::before_park(ctx);
        let yielder = ctx.yielder.get();
        // SAFETY: the yielder lives at the base of this fiber's stack for as long as the
        // fiber runs, and we are running on that stack.
        unsafe { &*yielder }.suspend(());
    }
}

enum Run<F, T> {
    Unstarted(F, Stack),
    Started(Coroutine<(), (), T, Stack>),
    Done,
}

/// The future of a fiber's task.
pub(crate) struct FiberFuture<F, T> {
    run: Run<F, T>,
    ctx: FiberCtx,
    /// `Builder::fiber_migration(true)`: the home worker is only a preference.
    migrate: bool,
    homed: bool,
}

// SAFETY: `F` and `T` are `Send`. What lives on a suspended fiber's stack may not be:
// that is the documented thread rule of fibers (module docs of `fiber`). By default a
// started fiber only ever resumes on its home worker's thread, so its stack is used by
// one thread, as a thread's own stack is; only cancellation at shutdown may unwind it on
// another thread.
unsafe impl<F: Send, T: Send> Send for FiberFuture<F, T> {}

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
            homed: false,
        }
    }

    fn start(&mut self) {
        let Run::Unstarted(f, stack) = std::mem::replace(&mut self.run, Run::Done) else {
            unreachable!()
        };
        self.ctx.guard.set(stack.guard_range());
        self.ctx.stack_size.set(stack.usable_size());
        self.ctx
            .id
            .set(current::with(|h| h.map_or(0, |h| h.id.as_u64())));
        if let Some(name) = &self.ctx.name {
            sysmon::register_name(self.ctx.id.get(), name);
        }
        let co = Coroutine::with_stack(stack, move |yielder: &Yielder<(), ()>, ()| {
            // SAFETY: the resuming poll set this fiber's context as current.
            let ctx = unsafe { &*current::fiber() };
            ctx.yielder.set(yielder);
            let out = f();
            // Fiber-locals are dropped here, on the fiber, like thread-locals at a
            // thread's exit.
            // SAFETY: as above; the fiber is still running.
            drop(unsafe { &*current::fiber() }.locals.take());
            out
        });
        self.run = Run::Started(co);
    }

    /// Ties the fiber to the worker running it: for good at its first poll, or (with
    /// migration) as a preference refreshed at every poll.
    fn claim_home(&mut self) {
        if self.homed && !self.migrate {
            return;
        }
        let Some(index) = worker::with_current(|c| c.map(|c| c.index())) else {
            return;
        };
        let home = index as u32 | if self.migrate { SOFT_HOME } else { 0 };
        current::with(|h| {
            if let Some(h) = h {
                h.home.store(home, Relaxed);
                self.homed = true;
            }
        });
    }
}

impl<F, T> Future for FiberFuture<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        // SAFETY: no field is structurally pinned: the closure is moved out once, and
        // the context's address matters only during this call, while `self` is
        // borrowed.
        let this = unsafe { self.get_unchecked_mut() };
        if matches!(this.run, Run::Unstarted(..)) {
            this.start();
        }
        this.claim_home();
        let Run::Started(co) = &mut this.run else {
            panic!("weft: a fiber was polled after it finished");
        };
        this.ctx.waker.set(cx.waker());
        worker::with_current(|c| {
            if let Some(c) = c {
                c.mark_running_fiber(this.ctx.id.get() | sysmon::FIBER_BIT);
            }
        });
        let res = {
            let _fiber = current::enter_fiber(&this.ctx);
            let _overflow = this.ctx.enter_overflow();
            co.resume(())
        };
        match res {
            CoroutineResult::Yield(()) => Poll::Pending,
            CoroutineResult::Return(v) => {
                if let Run::Started(co) = std::mem::replace(&mut this.run, Run::Done) {
                    // Back on the worker's stack: the fiber's stack is quiescent.
                    stack::release(co.into_stack());
                }
                Poll::Ready(v)
            }
        }
    }
}

impl<F, T> Drop for FiberFuture<F, T> {
    fn drop(&mut self) {
        LIVE_FIBERS.fetch_sub(1, Relaxed);
        if self.ctx.name.is_some() && self.ctx.id.get() != 0 {
            sysmon::unregister_name(self.ctx.id.get());
        }
        match std::mem::replace(&mut self.run, Run::Done) {
            Run::Unstarted(f, stack) => {
                drop(f);
                stack::release(stack);
            }
            Run::Started(mut co) => {
                if !co.done() {
                    // Cancelled while suspended: unwind the stack from its park point so
                    // its locals are dropped. `wait` cannot suspend meanwhile.
                    self.ctx.unwinding.set(true);
                    let _fiber = current::enter_fiber(&self.ctx);
                    let _overflow = self.ctx.enter_overflow();
                    co.force_unwind();
                }
                stack::release(co.into_stack());
            }
            Run::Done => {}
        }
    }
}
