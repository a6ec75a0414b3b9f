//! `scope`: spawn jobs that borrow from the caller's stack; the scope returns when
//! every one of them has finished.

use std::any::Any;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::base::park::Parker;
use crate::base::Arc;
use crate::scheduler::job::{execute, HeapJob};
use crate::scheduler::latch::OnceLatch;
use crate::scheduler::worker::{self, Core};
use crate::task::waker::drop_payload;

/// A fork-join scope; see [`scope`].
pub struct Scope<'scope> {
    /// Jobs spawned and not yet finished, plus one for the scope body itself.
    pending: AtomicUsize,
    /// Set when `pending` reaches zero.
    done: OnceLatch,
    /// The first panic of a spawned job (boxed payload), resumed by `scope`.
    panic: AtomicPtr<Box<dyn Any + Send>>,
    /// Ties the scope to what its jobs may borrow (invariant in `'scope`).
    _marker: PhantomData<&'scope mut &'scope ()>,
}

/// Creates a scope in which `f` can spawn jobs that borrow from the enclosing stack
/// frame; returns `f`'s result once every spawned job (and the jobs they spawned) has
/// finished. Jobs run on weft's workers; on a thread outside any runtime the scope runs
/// on the default pool of the current runtime, or of a global runtime started on first
/// use.
///
/// A panic in `f` or in any spawned job is resumed from `scope` after all jobs have
/// finished (`f`'s panic first, otherwise the first job's).
///
/// ```
/// let mut left = vec![1, 2, 3];
/// let mut right = vec![4, 5, 6];
/// let total = std::sync::atomic::AtomicUsize::new(0);
/// weft::scope(|s| {
///     s.spawn(|_| left.iter_mut().for_each(|x| *x *= 10));
///     s.spawn(|_| right.iter_mut().for_each(|x| *x *= 10));
///     s.spawn(|s| {
///         // Jobs may spawn more jobs into the same scope.
///         s.spawn(|_| { total.fetch_add(1, std::sync::atomic::Ordering::SeqCst); });
///     });
/// });
/// assert_eq!(left, [10, 20, 30]);
/// assert_eq!(right, [40, 50, 60]);
/// assert_eq!(total.into_inner(), 1);
/// ```
pub fn scope<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    super::on_worker(|| run_scope(op))
}

fn run_scope<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R,
{
    // SAFETY: `on_worker` runs us on a worker, whose core outlives this call (or on the
    // caller when the pool no longer runs jobs: no core, and jobs then run inline).
    let core: Option<&Core> = unsafe { worker::current_ptr().as_ref() };
    let parker: Arc<Parker> = match core {
        Some(c) => c.parker().clone(),
        None => Arc::new(Parker::new()),
    };
    // Jobs this scope pushes sit above this mark on the worker's deque, and nothing
    // else its wait may run: the frames of enclosing joins go below it first.
    let mark = core.map(|c| {
        c.promote_private_frames_quietly();
        c.jobs_mark()
    });
    let scope = Scope {
        pending: AtomicUsize::new(1),
        done: OnceLatch::new(&parker),
        panic: AtomicPtr::new(std::ptr::null_mut()),
        _marker: PhantomData,
    };
    if let Some(c) = core {
        c.scope_entered(true);
    }
    let result = catch_unwind(AssertUnwindSafe(|| op(&scope)));
    scope.job_done();
    // Help with the scope's own jobs (they are on this worker's deque, newest first)
    // until they all finished; jobs below the mark belong to enclosing joins.
    match core {
        Some(c) => c.fork_join_wait(&scope.done, || {
            let job = mark.and_then(|m| c.pop_job_above(m));
            job.map(|job| c.helping(job)).is_some()
        }),
        None => scope.done.wait(&parker, || false),
    }
    if let Some(c) = core {
        c.scope_entered(false);
    }
    let panic = scope.panic.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: stored by `record_panic` from `Box::into_raw`, taken once.
    let job_panic = (!panic.is_null()).then(|| *unsafe { Box::from_raw(panic) });
    match (result, job_panic) {
        (Ok(r), None) => r,
        (Ok(_), Some(p)) => resume_unwind(p),
        (Err(p), job_panic) => {
            // The body's panic is the one resumed; a job's is dropped (it leaked, found
            // in review).
            if let Some(j) = job_panic {
                drop_payload(j);
            }
            resume_unwind(p)
        }
    }
}

impl<'scope> Scope<'scope> {
    /// Spawns a job into the scope. It may borrow anything that outlives the scope, and
    /// gets the scope back to spawn more.
    ///
    /// ```
    /// let data = [1, 2, 3, 4];
    /// let sum = std::sync::atomic::AtomicI32::new(0);
    /// weft::scope(|s| {
    ///     for x in &data {
    ///         let sum = &sum;
    ///         s.spawn(move |_| { sum.fetch_add(*x, std::sync::atomic::Ordering::SeqCst); });
    ///     }
    /// });
    /// assert_eq!(sum.into_inner(), 10);
    /// ```
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        self.pending.fetch_add(1, Ordering::SeqCst);
        let scope_ptr = ScopePtr(self as *const Scope<'scope>);
        // Inside a `block_on` of another runtime on a worker: the job enters it again
        // wherever it runs (as `join`'s halves do).
        let entered = crate::runtime::entered_on_worker();
        let job = HeapJob::into_job_ref(move || {
            let _in = entered.as_ref().map(crate::Handle::enter);
            let scope_ptr = scope_ptr;
            // SAFETY: the scope waits for `pending` to reach zero before it returns, and
            // this job holds one count until `job_done` below.
            let scope = unsafe { &*scope_ptr.0 };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(scope))) {
                scope.record_panic(p);
            }
            scope.job_done();
        });
        // The job borrows from the scope's frame (`'scope`); `JobRef` does not carry that
        // lifetime, and the scope keeps its promise by waiting for `pending` to reach zero.
        // SAFETY: the core outlives this call on its own thread.
        match unsafe { worker::current_ptr().as_ref() } {
            Some(core) => core.push_job(job),
            // No worker (the pool was closed): run it now.
            None => execute(job),
        }
    }

    fn record_panic(&self, p: Box<dyn Any + Send>) {
        let boxed = Box::into_raw(Box::new(p));
        if self
            .panic
            .compare_exchange(
                std::ptr::null_mut(),
                boxed,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // Dropped under a catch: a payload whose `Drop` panics unwound out of the job
            // before its `job_done`, and the scope then returned while other jobs still
            // ran on its frame (found in review, `tests/review_s38_runtime.rs`).
            // SAFETY: not published; we still own it.
            drop_payload(*unsafe { Box::from_raw(boxed) });
        }
    }

    fn job_done(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            // SAFETY: the scope (and its latch) is alive: `run_scope` waits for this
            // latch before returning, and nothing touches `self` after the set.
            unsafe { OnceLatch::set(&self.done) };
        }
    }
}

struct ScopePtr<'scope>(*const Scope<'scope>);

// SAFETY: the scope is shared with its jobs on other workers; `scope` keeps it alive
// on the caller's stack until every job signalled completion, and all its fields used
// by them are atomic (or the latch's documented protocol), so any thread may use it.
unsafe impl Send for ScopePtr<'_> {}
