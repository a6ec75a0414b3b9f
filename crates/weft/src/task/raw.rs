//! The concrete task allocation (`Cell`), the poll harness and the owning pointer types
//! the scheduler moves around.

use std::alloc::Layout;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

use super::header::{Header, Id, OwnedLinks, Vtable};
use super::join::JoinError;
use super::state::{Idle, Run, State};
use super::{alloc, current, waker};
use crate::base::{AtomicU32, UnsafeCell};

/// What a task needs from the scheduler that runs it.
pub(crate) trait Schedule: Send + Sync + Sized + 'static {
    /// Enqueue a task that a waker (or abort) made SCHEDULED.
    fn schedule(&self, task: Notified);
    /// Enqueue a task that was woken during its own poll (a yield): it goes behind the
    /// work already queued, not into the LIFO slot.
    fn yield_now(&self, task: Notified);
    /// The task completed: unlink it from the owned-task list. Returns false if it was
    /// not linked (shutdown unlinked it first and holds the list's reference).
    fn release(&self, task: NonNull<Header>) -> bool;
    /// Shutdown just claimed `task` on this thread to cancel it (it is RUNNING and
    /// CANCELLED, and the claim's fresh reference is the caller's). If it may not be
    /// cancelled here (a started fiber tied to a worker this thread is not), takes the
    /// claim and that reference to hand the task to its worker, and returns true.
    fn hand_home(&self, _task: NonNull<Header>) -> bool {
        false
    }
}

/// One queue reference to a task: whoever holds it must run it or drop it.
pub(crate) struct Notified(NonNull<Header>);

// SAFETY: the value owns one counted reference (its task stays alive while it exists,
// on whichever thread holds it); a task may be run on any worker, as its future is
// `Send` (checked at spawn). A started fiber's future is not run off its home worker:
// the scheduler routes its `Notified` to that worker (see `FiberFuture`'s Send).
unsafe impl Send for Notified {}

impl Notified {
    /// # Safety
    /// `ptr` must be a live task header and the caller must own one of its references
    /// that this value takes over.
    pub(crate) unsafe fn from_raw(ptr: NonNull<Header>) -> Notified {
        Notified(ptr)
    }

    pub(crate) fn into_raw(self) -> NonNull<Header> {
        let ptr = self.0;
        std::mem::forget(self);
        ptr
    }

    pub(crate) fn header(&self) -> &Header {
        // SAFETY: we own a reference, so the header is alive.
        unsafe { self.0.as_ref() }
    }

    /// Runs one step of the task (the reference is consumed).
    pub(crate) fn run(self) {
        let ptr = self.into_raw();
        // SAFETY: `ptr` is live and we pass our reference to `poll`, which consumes it.
        unsafe { (ptr.as_ref().vtable.poll)(ptr) }
    }
}

impl Drop for Notified {
    fn drop(&mut self) {
        // SAFETY: we own one reference to a live task.
        unsafe { drop_reference(self.0) }
    }
}

/// Releases one reference and frees the task when it was the last.
///
/// # Safety
/// The caller owns one reference to the live task `ptr`.
pub(crate) unsafe fn drop_reference(ptr: NonNull<Header>) {
    // SAFETY: the caller's reference keeps the header alive until the decrement.
    unsafe {
        if ptr.as_ref().state.ref_dec() {
            (ptr.as_ref().vtable.dealloc)(ptr);
        }
    }
}

enum Stage<F: Future> {
    Running(F),
    Finished(Result<F::Output, JoinError>),
    Consumed,
}

/// The allocation behind a task: header first, so a `NonNull<Header>` casts to it.
#[repr(C)]
pub(crate) struct Cell<F: Future, S> {
    header: Header,
    scheduler: S,
    stage: UnsafeCell<Stage<F>>,
    /// Written by the `JoinHandle` while `JOIN_WAKER` is clear, read by the task while
    /// it is set; dropped with the allocation.
    join_waker: UnsafeCell<Option<Waker>>,
}

impl<F, S> Cell<F, S>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    const VTABLE: Vtable = Vtable {
        poll: poll::<F, S>,
        schedule: schedule::<F, S>,
        dealloc: dealloc::<F, S>,
        try_read_output: try_read_output::<F, S>,
        drop_output: drop_output::<F, S>,
        drop_join_waker: drop_join_waker::<F, S>,
        shutdown: shutdown::<F, S>,
    };

    /// Allocates a SCHEDULED task with three references: the owned list's, the
    /// `JoinHandle`'s and the returned `Notified`'s.
    pub(crate) fn allocate(future: F, scheduler: S, id: Id, fiber: bool) -> NonNull<Header> {
        let cell = Cell {
            header: Header {
                state: State::new(),
                vtable: &Self::VTABLE,
                queue_next: UnsafeCell::new(None),
                owned: OwnedLinks::new(),
                id,
                home: AtomicU32::new(super::header::NO_HOME),
                fiber,
                flags: std::sync::atomic::AtomicU8::new(0),
                diag: std::sync::atomic::AtomicU64::new(super::diag::fresh()),
            },
            scheduler,
            stage: UnsafeCell::new(Stage::Running(future)),
            join_waker: UnsafeCell::new(None),
        };
        // SAFETY: the block is freed only by `dealloc` below, with the same layout.
        let block = unsafe { alloc::alloc(Layout::new::<Self>()) }.cast::<Self>();
        // SAFETY: the block is fresh, sized and aligned for `Self`.
        unsafe { block.as_ptr().write(cell) };
        block.cast()
    }

    /// # Safety
    /// `ptr` must come from `allocate` with this `F` and `S`, and be alive.
    unsafe fn from_header<'a>(ptr: NonNull<Header>) -> &'a Self {
        // SAFETY: `Cell` is `repr(C)` with the header first, per the contract.
        unsafe { ptr.cast::<Self>().as_ref() }
    }

    /// Polls the future and, when it finishes (or panics), completes the task. The
    /// caller is the RUNNING owner. `Ready` means the task is complete; the output
    /// never travels back through here, so a `Pending` poll moves nothing.
    fn poll_future(&self, cx: &mut Context<'_>) -> Poll<()> {
        let res = catch_unwind(AssertUnwindSafe(|| {
            self.stage.with_mut(|stage| {
                // SAFETY: only the RUNNING owner touches the stage, and a future in a
                // heap cell never moves.
                match unsafe { &mut *stage } {
                    Stage::Running(f) => unsafe { Pin::new_unchecked(f) }.poll(cx),
                    _ => unreachable!("weft: a finished task was polled"),
                }
            })
        }));
        match res {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => {
                self.complete(Ok(out));
                Poll::Ready(())
            }
            Err(payload) => {
                self.complete(Err(JoinError::panic(self.header.id, payload)));
                Poll::Ready(())
            }
        }
    }

    /// Replaces the stage, dropping the future or output it held. A panic in that drop
    /// is caught: it must not unwind through the worker. Returns its payload.
    fn set_stage(&self, new: Stage<F>) -> Option<Box<dyn std::any::Any + Send>> {
        catch_unwind(AssertUnwindSafe(|| {
            self.stage.with_mut(|stage| {
                // SAFETY: the caller has exclusive access to the stage (RUNNING owner,
                // or the join side of a COMPLETE task).
                unsafe { *stage = new }
            })
        }))
        .err()
    }

    /// [`set_stage`](Self::set_stage) dropping a cancelled task's future, which may
    /// run on a fiber (shutdown or an abort on one): the only drop of a future that can
    /// suspend a fiber (a poll's own runs with no fiber current), so the only one
    /// that can catch that fiber's forced unwind. That unwind goes on (found in review:
    /// a runtime dropped in one of its fibers, whose cancellations waited, reported the
    /// unwind as the task's panic and went on running the fiber's code). A drop that
    /// began during such an unwind (a `Drop` on the unwinding stack cancelling a task)
    /// cannot start another one (the fiber no longer suspends): what it catches is a
    /// panic of its own (found in review: resumed, it escaped a destructor run by that
    /// unwind and aborted the process).
    fn drop_cancelled_future(&self) -> Option<Box<dyn std::any::Any + Send>> {
        let unwinding_before = super::current::fiber_force_unwinding();
        let payload = self.set_stage(Stage::Consumed)?;
        if !unwinding_before && super::current::fiber_force_unwinding() {
            std::panic::resume_unwind(payload);
        }
        Some(payload)
    }

    /// Stores the result and performs the COMPLETE transition; consumes the running
    /// reference, and the owned-list reference if the task was still linked.
    // Out of line: keeps the poll harness, which runs on every poll, small.
    #[inline(never)]
    fn complete(&self, result: Result<F::Output, JoinError>) {
        // The future is dropped before the output is published.
        let id = self.header.id;
        let result = match self.set_stage(Stage::Consumed) {
            // The usual case: `result` goes on untouched (no tuple to copy it through).
            None => result,
            Some(payload) => match result {
                // The future's drop panicked after it returned: that panic is the
                // result, and the output, unread, is dropped here under a catch (found
                // in review: an output whose `Drop` panicked killed the worker).
                Ok(out) => {
                    waker::ignore_panic(move || drop(out));
                    Err(JoinError::panic(id, payload))
                }
                // The task's own panic is the one it reports.
                Err(e) => {
                    waker::drop_payload(payload);
                    Err(e)
                }
            },
        };
        self.stage.with_mut(|stage| {
            // SAFETY: still the RUNNING owner; the stage holds nothing to drop.
            unsafe { std::ptr::write(stage, Stage::Finished(result)) }
        });
        // Unlinked before COMPLETE is published: whoever sees the task complete (a
        // join) then no longer finds it among the live tasks (`Stats::active_tasks`,
        // dumps). We still hold the running reference, so the task stays alive; a
        // shutdown that unlinked it first cancels a RUNNING task, which only flags it.
        let owned_ref = u64::from(self.scheduler.release(NonNull::from(&self.header)));
        let prev = self.header.state.transition_to_complete();
        if !prev.is_join_interested() {
            // Nobody will read it.
            if let Some(payload) = self.set_stage(Stage::Consumed) {
                waker::drop_payload(payload);
            }
        } else if prev.has_join_waker() {
            self.join_waker.with(|w| {
                // SAFETY: JOIN_WAKER was set, so the handle wrote the waker before it
                // published the bit and will not touch the slot again.
                if let Some(w) = unsafe { &*w } {
                    // The handle's poller gave this waker. A panic in it must not skip
                    // the release below (the cell would leak) nor unwind out of the
                    // worker; the waker stays in the slot and goes with the cell.
                    waker::ignore_panic(|| w.wake_by_ref());
                }
            });
        }
        if self.header.state.ref_dec_n(1 + owned_ref) {
            // SAFETY: those were the last references.
            unsafe { dealloc::<F, S>(NonNull::from(&self.header)) }
        }
    }

    #[cold]
    #[inline(never)]
    fn cancel(&self) {
        let id = self.header.id;
        let result = match self.drop_cancelled_future() {
            Some(payload) => Err(JoinError::panic(id, payload)),
            None if self.header.flags.load(std::sync::atomic::Ordering::Relaxed)
                & super::diag::REFUSED
                != 0 =>
            {
                Err(JoinError::shutdown(id))
            }
            None => Err(JoinError::cancelled(id)),
        };
        self.complete(result);
    }
}

/// # Safety (all vtable entries)
/// `ptr` is a live task created by `Cell::<F, S>::allocate`, and the caller owns the
/// reference the entry documents (see [`Vtable`]).
unsafe fn poll<F, S>(ptr: NonNull<Header>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    // SAFETY: per the vtable contract.
    let cell = unsafe { Cell::<F, S>::from_header(ptr) };
    match cell.header.state.transition_to_running() {
        Run::Skip => {
            // SAFETY: we own the queue reference.
            unsafe { drop_reference(ptr) };
        }
        Run::Cancel => cell.cancel(),
        Run::Poll => {
            // SAFETY: the running reference keeps the task alive longer than the waker
            // borrowed here, which is never dropped (ManuallyDrop).
            let waker = ManuallyDrop::new(unsafe { waker::borrowed(ptr) });
            let mut cx = Context::from_waker(&waker);
            let res = {
                let _enter = current::enter(ptr);
                cell.poll_future(&mut cx)
            };
            match res {
                Poll::Ready(()) => {}
                Poll::Pending => match cell.header.state.transition_to_idle() {
                    Idle::Idle => {}
                    Idle::Reschedule => {
                        // SAFETY: the running reference became the queue reference.
                        cell.scheduler.yield_now(unsafe { Notified::from_raw(ptr) })
                    }
                },
            }
        }
    }
}

unsafe fn schedule<F, S>(ptr: NonNull<Header>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    // SAFETY: per the vtable contract; the caller's reference moves into `Notified`.
    unsafe {
        let cell = Cell::<F, S>::from_header(ptr);
        cell.scheduler.schedule(Notified::from_raw(ptr));
    }
}

unsafe fn dealloc<F, S>(ptr: NonNull<Header>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    /// Frees the block even if a drop below panics (as a `Box` would).
    struct FreeOnDrop<T>(NonNull<T>);
    impl<T> Drop for FreeOnDrop<T> {
        fn drop(&mut self) {
            // SAFETY: the block came from `alloc::alloc` with `T`'s layout (`allocate`)
            // and its contents have been dropped (or their drop unwound) by now.
            unsafe { alloc::free(self.0.cast(), Layout::new::<T>()) }
        }
    }
    let cell = ptr.cast::<Cell<F, S>>();
    let _free = FreeOnDrop(cell);
    // The join waker is the handle's poller's and is dropped wherever the last
    // reference goes: often on a worker (a completing task, a queue entry, another
    // task dropping a waker clone), where a panic in its `Drop` would end the worker or
    // fail an unrelated task. Taken out first and dropped under `catch_unwind`; the
    // slot is left `None`, so the drop below does not see it again.
    // SAFETY: the reference count reached zero, so nothing else reads the slot.
    let join_waker = unsafe { cell.as_ref() }
        .join_waker
        // SAFETY: as above; exclusive access to the slot.
        .with_mut(|w| unsafe { (*w).take() });
    if let Some(w) = join_waker {
        waker::ignore_panic(move || drop(w));
    }
    // SAFETY: the reference count reached zero, so this is the only pointer left; the
    // cell was written by `allocate` and is dropped exactly once, here.
    unsafe { std::ptr::drop_in_place(cell.as_ptr()) };
}

unsafe fn try_read_output<F, S>(ptr: NonNull<Header>, dst: *mut (), waker: &Waker)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    // SAFETY: per the vtable contract; the JoinHandle holds a reference.
    let cell = unsafe { Cell::<F, S>::from_header(ptr) };
    if can_read_output(cell, waker) {
        let out = cell.stage.with_mut(|stage| {
            // SAFETY: the task is COMPLETE and the handle has join interest, so the
            // output belongs to the handle alone.
            match std::mem::replace(unsafe { &mut *stage }, Stage::Consumed) {
                Stage::Finished(r) => r,
                _ => panic!("weft: JoinHandle polled after it returned the output"),
            }
        });
        // SAFETY: the handle passes a `Poll<Result<F::Output, JoinError>>` slot.
        unsafe { *(dst as *mut Poll<Result<F::Output, JoinError>>) = Poll::Ready(out) };
    }
}

/// Either the task is complete (true) or `waker` is registered to be woken when it
/// completes (false).
fn can_read_output<F, S>(cell: &Cell<F, S>, waker: &Waker) -> bool
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    let state = &cell.header.state;
    let snap = state.load();
    if snap.is_complete() {
        return true;
    }
    if snap.has_join_waker() {
        // The task owns the slot; reading the stored waker is fine as it is immutable
        // while the bit is set.
        let same = cell.join_waker.with(|w| {
            // SAFETY: while JOIN_WAKER is set only reads happen.
            unsafe { &*w }.as_ref().is_some_and(|w| w.will_wake(waker))
        });
        if same {
            return false;
        }
        if state.unset_join_waker().is_err() {
            return true;
        }
    }
    cell.join_waker.with_mut(|w| {
        // SAFETY: JOIN_WAKER is clear, so the handle owns the slot.
        unsafe { *w = Some(waker.clone()) }
    });
    state.set_join_waker().is_err()
}

unsafe fn drop_output<F, S>(ptr: NonNull<Header>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    // SAFETY: per the vtable contract: COMPLETE, and the handle owned the output.
    let cell = unsafe { Cell::<F, S>::from_header(ptr) };
    cell.stage.with_mut(|stage| {
        // SAFETY: as above; the output may panic on drop, which the dropping handle sees.
        unsafe { *stage = Stage::Consumed }
    });
}

/// The handle's waker goes with the handle: kept until the cell was freed, it held
/// whatever the poller's waker holds for as long as the task lived (for ever for a
/// detached task that never ends), and a waker that holds its own task's cell (a task
/// awaiting a handle of its own, through a waker wrapping its own) made a cycle that
/// was never freed (found in review; tokio drops it here too).
unsafe fn drop_join_waker<F, S>(ptr: NonNull<Header>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    // SAFETY: per the vtable contract: the handle cleared `JOIN_WAKER` on a task not
    // complete, so `complete` will not read the slot and the handle owns it.
    let cell = unsafe { Cell::<F, S>::from_header(ptr) };
    // SAFETY: as above; exclusive access to the slot.
    let waker = cell.join_waker.with_mut(|w| unsafe { (*w).take() });
    if let Some(w) = waker {
        // As in `dealloc`: the waker is the poller's, and the handle's dropper (often
        // a worker cancelling a task) has no use for its panic.
        waker::ignore_panic(move || drop(w));
    }
}

unsafe fn shutdown<F, S>(ptr: NonNull<Header>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    // SAFETY: per the vtable contract.
    let cell = unsafe { Cell::<F, S>::from_header(ptr) };
    if cell.header.state.transition_to_shutdown() {
        // A started fiber tied to another worker is unwound only there (its home, read
        // now, after the claim, is the one its last poll left).
        if cell.scheduler.hand_home(ptr) {
            return;
        }
        // We hold a fresh running reference; `complete` releases it.
        cell.cancel();
    }
}
