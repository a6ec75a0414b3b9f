//! What the current thread is running: the task being polled (for `is_cancelled` and
//! `shield`), inside a fiber that fiber's context (for `wait` and fiber-locals), and
//! whose stack the thread runs on (for the overflow handler).

use std::cell::Cell;
use std::ptr::NonNull;

use super::header::Header;
use crate::fiber::FiberCtx;

#[derive(Clone, Copy)]
struct Current {
    task: Option<NonNull<Header>>,
    fiber: *const FiberCtx,
    /// The fiber whose stack this thread is on (null: the thread's own). Unlike
    /// `fiber`, a task polled on a fiber's stack (a worker helping inside a fiber's
    /// `join` or `wait`) keeps it: an overflow there is still that stack's.
    stack: *const FiberCtx,
}

const NONE: Current = Current {
    task: None,
    fiber: std::ptr::null(),
    stack: std::ptr::null(),
};

#[cfg(not(loom))]
thread_local! {
    static CURRENT: Cell<Current> = const { Cell::new(NONE) };
}

// loom runs every model thread on one OS thread: the current task and fiber must be
// per model thread.
#[cfg(loom)]
loom::thread_local! {
    static CURRENT: Cell<Current> = Cell::new(NONE);
}

/// Restores the previous task and fiber when dropped (polls nest when a worker helps
/// inside a blocking join).
pub(crate) struct Enter {
    prev: Current,
}

/// Marks `task` as being polled; no fiber runs until the task's own poll resumes one,
/// so a task polled on a fiber's stack never mistakes that fiber for its own.
#[inline]
pub(crate) fn enter(task: NonNull<Header>) -> Enter {
    Enter {
        prev: CURRENT.with(|c| {
            let prev = c.get();
            c.set(Current {
                task: Some(task),
                fiber: std::ptr::null(),
                stack: prev.stack,
            });
            prev
        }),
    }
}

/// Marks that no task is being polled, for a fork-join job run by whichever thread took
/// it: a job belongs to no task, so a shield or `is_cancelled` inside it must not reach
/// the task that the worker happens to be polling or helping in (the running fiber and
/// stack stay as they are: the job runs on that stack).
#[inline]
pub(crate) fn enter_no_task() -> Enter {
    Enter {
        prev: CURRENT.with(|c| {
            let prev = c.get();
            c.set(Current { task: None, ..prev });
            prev
        }),
    }
}

impl Drop for Enter {
    #[inline]
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.prev));
    }
}

/// Runs `f` with the header of the task being polled on this thread, if any. The header
/// is alive: the poll holds the running reference.
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(Option<&Header>) -> R) -> R {
    let task = CURRENT.with(|c| c.get().task);
    // SAFETY: the pointer is set only for the duration of a poll, which holds the
    // task's running reference.
    f(task.map(|p| unsafe { p.as_ref() }))
}

/// Makes `fiber` the running fiber, on its own stack, until the returned guard drops
/// (around every resume of its coroutine, and its unwinding).
#[inline]
pub(crate) fn enter_fiber(fiber: *const FiberCtx) -> EnterFiber {
    enter_fiber_with(fiber, fiber)
}

/// Makes `fiber` the running fiber while the thread stays on its own stack (dropping a
/// finished fiber's locals after its stack went back to the pool).
pub(crate) fn enter_fiber_off_stack(fiber: *const FiberCtx) -> EnterFiber {
    enter_fiber_with(fiber, std::ptr::null())
}

#[inline]
fn enter_fiber_with(fiber: *const FiberCtx, stack: *const FiberCtx) -> EnterFiber {
    let prev = CURRENT.with(|c| {
        let mut cur = c.get();
        let prev = (cur.fiber, cur.stack);
        cur.fiber = fiber;
        cur.stack = stack;
        c.set(cur);
        prev
    });
    EnterFiber {
        prev_fiber: prev.0,
        prev_stack: prev.1,
    }
}

/// Restores the previously running fiber and stack (null: none).
pub(crate) struct EnterFiber {
    prev_fiber: *const FiberCtx,
    prev_stack: *const FiberCtx,
}

impl Drop for EnterFiber {
    #[inline]
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut cur = c.get();
            cur.fiber = self.prev_fiber;
            cur.stack = self.prev_stack;
            c.set(cur);
        });
    }
}

/// The context of the fiber running on this thread, or null.
#[inline]
pub(crate) fn fiber() -> *const FiberCtx {
    CURRENT.with(|c| c.get().fiber)
}

/// The overflow report of the fiber whose stack this thread is on (null: none), for the
/// fault handler; also while a task polled on that stack runs. `CURRENT` is
/// const-initialised and has no destructor, so reading it needs no lazy initialisation
/// or registration, which a signal handler must not do.
#[cfg(not(loom))]
pub(crate) fn signal_frame() -> *const crate::fiber::overflow::Frame {
    let fiber = CURRENT
        .try_with(|c| c.get().stack)
        .unwrap_or(std::ptr::null());
    // SAFETY: a non-null stack owner is the live context of a fiber resumed on this
    // thread: `enter_fiber`'s guard, which clears it, is on this thread's stack.
    unsafe { fiber.as_ref() }.map_or(std::ptr::null(), FiberCtx::frame_ptr)
}

/// loom models never take a fault.
#[cfg(loom)]
pub(crate) fn signal_frame() -> *const crate::fiber::overflow::Frame {
    std::ptr::null()
}
