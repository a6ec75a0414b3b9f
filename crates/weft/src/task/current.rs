//! What the current thread is running: the task being polled (for `is_cancelled` and
//! `shield`), inside a fiber that fiber's context (for `wait` and fiber-locals), whose
//! stack the thread runs on (for the overflow handler), and whether that is a worker
//! loop stack (for `wait`, which may set such a stack aside).

use std::cell::Cell;
use std::ptr::NonNull;

use super::header::Header;

/// The record. The fiber, loop-stack and overflow-report pointers belong to higher
/// layers (`fiber`, `scheduler::stacks`, `stack::overflow`), which alone know their
/// types: this layer only keeps them, as untyped pointers, for the thread.
#[derive(Clone, Copy)]
struct Current {
    task: Option<NonNull<Header>>,
    /// Which run of a fork-join job this is (0: none), so that jobs that run one after
    /// another on one stack are told apart (see [`Owner`]).
    job: u64,
    /// The running fiber's context (a `fiber::FiberCtx`), or null; its two low bits
    /// (the context is word-aligned) hold [`FIBER_UNWINDING`] and [`FIBER_STAYS`]
    /// about it: a flag field made the record a word longer, and every poll and
    /// fiber resume copies it (a fiber ping-pong round trip 3-4% slower, measured).
    fiber: *const (),
    /// The overflow report (a `stack::overflow::Frame`) of the stack this thread runs
    /// on: a fiber's or a worker loop stack's (null: the thread's own). Unlike
    /// `fiber`, a task polled on a fiber's stack keeps it: an overflow there is still
    /// that stack's.
    stack_frame: *const (),
    /// The worker loop stack this thread runs on (a `scheduler::stacks::LoopCtx`;
    /// null: not on one): whose blocked wait may set its stack aside. Cleared while a
    /// fiber's stack runs on top of it.
    loop_stack: *const (),
}

/// The running fiber's stack is being unwound by its cancellation (the fiber layer's
/// `Drop` forces the unwind): a payload caught meanwhile is that unwind.
const FIBER_UNWINDING: usize = 1;
/// The running fiber may not suspend ([`stay_resumed`]).
const FIBER_STAYS: usize = 2;
/// The flag bits of `Current::fiber`.
const FIBER_FLAGS: usize = FIBER_UNWINDING | FIBER_STAYS;

/// `Current::fiber` without its flags.
#[inline]
fn untagged(fiber: *const ()) -> *const () {
    fiber.map_addr(|a| a & !FIBER_FLAGS)
}

const NONE: Current = Current {
    task: None,
    job: 0,
    fiber: std::ptr::null(),
    stack_frame: std::ptr::null(),
    loop_stack: std::ptr::null(),
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

/// This thread's `CURRENT`, read afresh: every access goes through here, never inlined,
/// so that no function that waits on a fiber keeps the address it computed before the
/// wait (a migrating fiber may resume on another thread; see `worker::current_cell`).
#[inline(never)]
fn cell<R>(f: impl FnOnce(&Cell<Current>) -> R) -> R {
    CURRENT.with(f)
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
        prev: cell(|c| {
            let prev = c.get();
            c.set(Current {
                task: Some(task),
                job: 0,
                fiber: std::ptr::null(),
                ..prev
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
    let job = jobs(|n| {
        let job = n.get().wrapping_add(1).max(1);
        n.set(job);
        job
    });
    Enter {
        prev: cell(|c| {
            let prev = c.get();
            c.set(Current {
                task: None,
                job,
                ..prev
            });
            prev
        }),
    }
}

thread_local! {
    /// The last job run number handed out on this thread (see `Current::job`).
    static JOBS: Cell<u64> = const { Cell::new(0) };
}

/// `JOBS.with`, never inlined (see [`cell`]).
#[inline(never)]
fn jobs<R>(f: impl FnOnce(&Cell<u64>) -> R) -> R {
    JOBS.with(f)
}

impl Drop for Enter {
    #[inline]
    fn drop(&mut self) {
        cell(|c| c.set(self.prev));
    }
}

/// Runs `f` with the header of the task being polled on this thread, if any. The header
/// is alive: the poll holds the running reference.
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(Option<&Header>) -> R) -> R {
    let task = cell(|c| c.get().task);
    // SAFETY: the pointer is set only for the duration of a poll, which holds the
    // task's running reference.
    f(task.map(|p| unsafe { p.as_ref() }))
}

/// Makes `fiber` the running fiber until the returned guard drops (around every resume
/// of its coroutine, and its unwinding), with `stack_frame` the overflow report of the
/// stack the thread then runs on: the fiber's own, or null for the thread's own stack.
#[inline]
pub(crate) fn enter_fiber(fiber: *const (), stack_frame: *const ()) -> EnterFiber {
    enter_fiber_flagged(fiber, stack_frame, 0)
}

/// [`enter_fiber`] on the stack the thread runs on now, whose overflow report stays
/// (a loop stack's too: found in review, an overflow in a cancelled fiber's local
/// destructor dropped on a loop stack was not reported, its report hidden by a null).
#[inline]
pub(crate) fn enter_fiber_here(fiber: *const ()) -> EnterFiber {
    let stack_frame = cell(|c| c.get().stack_frame);
    enter_fiber_flagged(fiber, stack_frame, 0)
}

/// [`enter_fiber`] for the forced unwind of a cancelled fiber's stack (see
/// [`fiber_force_unwinding`]).
#[inline]
pub(crate) fn enter_fiber_unwinding(fiber: *const (), stack_frame: *const ()) -> EnterFiber {
    enter_fiber_flagged(fiber, stack_frame, FIBER_UNWINDING)
}

#[inline]
fn enter_fiber_flagged(fiber: *const (), stack_frame: *const (), flags: usize) -> EnterFiber {
    debug_assert_eq!(
        fiber.addr() & FIBER_FLAGS,
        0,
        "a fiber context is word-aligned"
    );
    let prev = cell(|c| {
        let prev = c.get();
        c.set(Current {
            fiber: fiber.map_addr(|a| a | flags),
            stack_frame,
            // A fiber's stack (or the thread's own, for a finished fiber's locals) is
            // no worker loop stack: a wait there must not suspend the loop stack below.
            loop_stack: std::ptr::null(),
            ..prev
        });
        prev
    });
    EnterFiber {
        prev_fiber: prev.fiber,
        prev_stack_frame: prev.stack_frame,
        prev_loop_stack: prev.loop_stack,
    }
}

/// Whether the running fiber's stack is being unwound by its cancellation: a payload
/// caught now (by the task harness around a future's drop, say) is that unwind, not a
/// panic, and must be resumed.
pub(crate) fn fiber_force_unwinding() -> bool {
    cell(|c| c.get().fiber.addr() & FIBER_UNWINDING != 0)
}

/// Whether the running fiber may not suspend now ([`stay_resumed`]).
#[inline]
pub(crate) fn fiber_stays() -> bool {
    cell(|c| c.get().fiber.addr() & FIBER_STAYS != 0)
}

/// While the returned guard lives, a `wait` on the running fiber (if any) does not
/// suspend it but waits as a task's wait on its worker does. For a runtime dropped on
/// one of its own fibers: suspended in the middle of that drop (a cancelled task's
/// `Drop` that waits), the fiber was set aside for its worker by that very shutdown
/// and unwound there, cutting the drop short (found in review, session 31). Kept with
/// the fiber's record, so a fiber resumed meanwhile (nested) does not inherit it.
pub(crate) fn stay_resumed() -> Option<StayResumed> {
    let was = cell(|c| {
        let mut cur = c.get();
        if cur.fiber.is_null() {
            return None;
        }
        let was = cur.fiber;
        cur.fiber = was.map_addr(|a| a | FIBER_STAYS);
        c.set(cur);
        Some(was)
    })?;
    Some(StayResumed { was })
}

/// See [`stay_resumed`].
pub(crate) struct StayResumed {
    was: *const (),
}

impl Drop for StayResumed {
    fn drop(&mut self) {
        cell(|c| {
            let mut cur = c.get();
            cur.fiber = self.was;
            c.set(cur);
        });
    }
}

/// Restores the previously running fiber and stacks (null: none).
pub(crate) struct EnterFiber {
    prev_fiber: *const (),
    prev_stack_frame: *const (),
    prev_loop_stack: *const (),
}

impl Drop for EnterFiber {
    #[inline]
    fn drop(&mut self) {
        cell(|c| {
            let mut cur = c.get();
            cur.fiber = self.prev_fiber;
            cur.stack_frame = self.prev_stack_frame;
            cur.loop_stack = self.prev_loop_stack;
            c.set(cur);
        });
    }
}

/// Everything this module tracks for the current thread, taken away while the thread
/// switches to another worker loop stack (`scheduler::stacks`): what is being polled
/// belongs to the stack, not to the thread.
pub(crate) struct Saved(Current);

/// Clears the current task, fiber and stacks, returning them for [`restore`].
pub(crate) fn take() -> Saved {
    Saved(cell(|c| c.replace(NONE)))
}

/// Puts back what [`take`] returned (after a switch back to the stack that took it).
pub(crate) fn restore(saved: Saved) {
    cell(|c| c.set(saved.0));
}

/// The worker loop stack this thread runs on, or null (see `scheduler::stacks`).
pub(crate) fn loop_stack() -> *const () {
    cell(|c| c.get().loop_stack)
}

/// Records that this thread now runs on the worker loop stack `stack` (null: none),
/// whose overflow report is `stack_frame`.
pub(crate) fn set_loop_stack(stack: *const (), stack_frame: *const ()) {
    cell(|c| {
        let mut cur = c.get();
        cur.loop_stack = stack;
        cur.stack_frame = stack_frame;
        c.set(cur);
    });
}

/// Who runs on this thread now, as far as a runtime entered on a worker thread cares:
/// the task being polled (by id, which is never reused, unlike its address) or the run
/// of a fork-join job, the running fiber and the loop stack under them. It stays the same across the waits of
/// one poll or one fiber (a stack set aside is resumed with its record restored), and
/// differs for whatever the worker runs meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    task: u64,
    job: u64,
    fiber: usize,
    loop_stack: usize,
}

/// This thread's [`Owner`] now.
pub(crate) fn owner() -> Owner {
    let cur = cell(Cell::get);
    Owner {
        // SAFETY: the pointer is set only for the duration of a poll, which holds the
        // task's running reference.
        task: cur.task.map_or(0, |t| unsafe { t.as_ref() }.id.0),
        job: cur.job,
        fiber: untagged(cur.fiber).addr(),
        loop_stack: cur.loop_stack as usize,
    }
}

/// The context of the fiber running on this thread (a `fiber::FiberCtx`), or null.
#[inline]
pub(crate) fn fiber() -> *const () {
    cell(|c| untagged(c.get().fiber))
}

/// The overflow report (a `stack::overflow::Frame`) of the stack this thread is on
/// (null: its own), for the fault handler; also while a task polled on that stack runs.
/// `CURRENT` is const-initialised and has no destructor, so reading it needs no lazy
/// initialisation or registration, which a signal handler must not do.
#[cfg(not(loom))]
pub(crate) fn signal_frame() -> *const () {
    CURRENT
        .try_with(|c| c.get().stack_frame)
        .unwrap_or(std::ptr::null())
}

/// loom models never take a fault.
#[cfg(loom)]
pub(crate) fn signal_frame() -> *const () {
    std::ptr::null()
}
