//! Jobs (spec 002): an 8-byte header holding the function that runs the job, embedded
//! first in a larger struct that lives on the forking caller's stack (`StackJob`) or,
//! for scope spawns, on the heap (`HeapJob`).

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;

use super::latch::OnceLatch;
use crate::base::park::Parker;
use crate::base::{Arc, AtomicUsize};

/// Where a closure of `join_context` runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FnContext {
    pub(crate) migrated: bool,
}

impl FnContext {
    /// True when the closure runs on another thread than the one that called join (a
    /// thief took it).
    pub(crate) fn migrated(&self) -> bool {
        self.migrated
    }
}

/// Counts a job as running on this worker while it runs: a wait inside it must not set
/// its stack aside (found in review: a scope's job set aside on the scope's own worker,
/// while the scope waited for it on its latch below, never finished).
struct RunningJob(*const super::worker::Core);

impl RunningJob {
    fn enter() -> RunningJob {
        let core = super::worker::current_ptr();
        // SAFETY: the core of this thread outlives the job that runs on it.
        if let Some(c) = unsafe { core.as_ref() } {
            c.job_running(true);
        }
        RunningJob(core)
    }
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        // SAFETY: as in `enter`; the job ran on this thread.
        if let Some(c) = unsafe { self.0.as_ref() } {
            c.job_running(false);
        }
    }
}

/// Executes a job taken from a queue or deque. A job belongs to no task: it runs with
/// none current, whatever task its thread was polling or helping in.
pub(crate) fn execute(job: JobRef) {
    let _no_task = crate::task::current::enter_no_task();
    let _running = RunningJob::enter();
    // SAFETY: every job in a queue is executed exactly once, by whoever took it out,
    // and its creator keeps it alive until it completes.
    unsafe { job.execute() }
}

/// The job header: one function pointer.
#[repr(C)]
pub(crate) struct Job {
    execute: unsafe fn(*const Job),
}

const _: () = assert!(std::mem::size_of::<Job>() == 8);

/// A pointer to a job that someone may execute exactly once.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct JobRef(NonNull<Job>);

// SAFETY: a job is handed to exactly one executor, on any thread; its creator keeps it
// alive (on its stack, or boxed) until the job signals completion, and the data it
// points to is `Send` (checked where the job is created).
unsafe impl Send for JobRef {}

impl JobRef {
    pub(crate) fn as_ptr(self) -> *mut Job {
        self.0.as_ptr()
    }

    /// # Safety
    /// `ptr` came from [`JobRef::as_ptr`] of a job that has not been executed.
    pub(crate) unsafe fn from_ptr(ptr: *mut Job) -> JobRef {
        // SAFETY: job pointers are never null.
        JobRef(unsafe { NonNull::new_unchecked(ptr) })
    }

    /// Runs the job.
    ///
    /// # Safety
    /// Each job is executed at most once, and its memory is alive until it signals
    /// completion (the caller of `StackJob::new` waits for that).
    pub(crate) unsafe fn execute(self) {
        // SAFETY: per the contract.
        unsafe { ((*self.0.as_ptr()).execute)(self.0.as_ptr()) }
    }
}

pub(crate) enum JobResult<R> {
    None,
    Ok(R),
    Panic(Box<dyn Any + Send>),
}

impl<R> JobResult<R> {
    /// The value, or the panic continued on this thread.
    pub(crate) fn into_return_value(self) -> R {
        match self {
            JobResult::Ok(r) => r,
            JobResult::Panic(p) => std::panic::resume_unwind(p),
            JobResult::None => unreachable!("weft: a job's result was read before it ran"),
        }
    }
}

/// The part of a stack job the worker's private frame list uses. Only the worker that
/// forked the job touches these cells (before promotion, and at its own `join`).
#[repr(C)]
pub(crate) struct Frame {
    pub(crate) job: Job,
    /// The next older private frame.
    pub(crate) prev: Cell<*const Frame>,
    /// The next newer private frame.
    pub(crate) next: Cell<*const Frame>,
    /// Moved to the worker's deque, where thieves can see it.
    pub(crate) promoted: Cell<bool>,
}

impl Frame {
    #[inline]
    pub(crate) fn job_ref(&self) -> JobRef {
        JobRef(NonNull::from(&self.job))
    }
}

/// A job on the forking caller's stack: the frame (with the 8-byte job header first),
/// the latch that signals its completion, the closure, and the slot for its result.
#[repr(C)]
pub(crate) struct StackJob<F, R> {
    pub(crate) frame: Frame,
    pub(crate) latch: OnceLatch,
    /// The worker (index in the creator's pool) that stole and runs the job, for
    /// leapfrogging; `usize::MAX` until known.
    pub(crate) thief: AtomicUsize,
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<JobResult<R>>,
}

impl<F, R> StackJob<F, R>
where
    F: FnOnce(FnContext) -> R + Send,
    R: Send,
{
    /// `sleeper` is the parker of the thread that will wait for this job.
    #[inline]
    pub(crate) fn new(func: F, sleeper: &Arc<Parker>) -> Self {
        StackJob {
            frame: Frame {
                job: Job {
                    execute: Self::execute,
                },
                prev: Cell::new(std::ptr::null()),
                next: Cell::new(std::ptr::null()),
                promoted: Cell::new(false),
            },
            latch: OnceLatch::new(sleeper),
            thief: AtomicUsize::new(usize::MAX),
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(JobResult::None),
        }
    }

    /// # Safety
    /// The job must not be executed (or be executing) elsewhere while it is shared,
    /// and it must outlive every use of the returned reference (the creator waits for
    /// the latch or takes the job back before returning).
    pub(crate) unsafe fn as_job_ref(&self) -> JobRef {
        self.frame.job_ref()
    }

    /// Runs on a thief: the closure sees `migrated() == true`.
    unsafe fn execute(this: *const Job) {
        // SAFETY: `Job` is the first field of the `repr(C)` `Frame`, which is the first
        // field of a `repr(C)` `StackJob`, and the creator keeps it alive until the
        // latch is set.
        let this = unsafe { &*(this as *const Self) };
        // SAFETY: only the single executor touches `func` and `result` before the latch
        // is set; the creator reads `result` only after.
        let func = unsafe { (*this.func.get()).take() }.expect("weft: job executed twice");
        if let Some(i) = crate::scheduler::worker::with_current(|c| c.map(|c| c.index())) {
            this.thief.store(i, Relaxed);
        }
        let result = match catch_unwind(AssertUnwindSafe(|| func(FnContext { migrated: true }))) {
            Ok(r) => JobResult::Ok(r),
            Err(p) => JobResult::Panic(p),
        };
        // SAFETY: as above.
        unsafe { *this.result.get() = result };
        // SAFETY: the latch is live (the creator waits for it) and untouched after this.
        unsafe { OnceLatch::set(&this.latch) };
    }

    /// Runs the closure here, on the creator's thread, after taking the job back (so
    /// no one else can run it).
    #[inline]
    pub(crate) fn run_inline(&self, ctx: FnContext) -> R {
        // SAFETY: the job was taken back, so this thread is its only executor.
        let func = unsafe { (*self.func.get()).take() }.expect("weft: job taken back after it ran");
        func(ctx)
    }

    /// The result of an executed job (after its latch was observed set), with its
    /// panic.
    pub(crate) fn take_result(&self) -> R {
        // SAFETY: the executor wrote the result before setting the latch, which the
        // caller observed; nobody else reads it.
        let r = unsafe { std::mem::replace(&mut *self.result.get(), JobResult::None) };
        r.into_return_value()
    }
}

/// A boxed job for `scope` spawns: the closure owns everything it needs.
#[repr(C)]
pub(crate) struct HeapJob<F> {
    job: Job,
    func: F,
}

impl<F: FnOnce() + Send> HeapJob<F> {
    /// Boxes `func` as a job. The job frees itself when executed.
    pub(crate) fn into_job_ref(func: F) -> JobRef {
        let b = Box::new(HeapJob {
            job: Job {
                execute: Self::execute,
            },
            func,
        });
        JobRef(NonNull::from(Box::leak(b)).cast())
    }

    unsafe fn execute(this: *const Job) {
        // SAFETY: created by `into_job_ref` from a `Box<HeapJob<F>>` (`repr(C)`, job
        // first), and executed once.
        let b = unsafe { Box::from_raw(this as *mut Self) };
        (b.func)();
    }
}
