//! Fork-join on the runtime's workers (spec 002): `join`, `scope`, and the machinery
//! that parallel iterators ([`crate::par`]) are built on.
//!
//! `join(a, b)` on a worker makes `b` a stack-allocated job and links it into the
//! worker's *private* frame list (two plain stores), runs `a`, and unlinks `b` to run it
//! inline: with nothing promoted (shown to thieves), a join costs no allocation and no
//! atomic operation at all. Other workers cannot see private frames; a *heartbeat* makes work visible:
//!
//! * the outermost join of a computation, and then every *n*th join (adapted so that a
//!   check, a clock read, falls about every 50 µs) once 100 µs have
//!   passed since the last heartbeat, checks whether any worker of the pool is hungry
//!   (searching or parked);
//! * if one is, the oldest private frame (the largest piece of the recursion) is
//!   promoted: pushed onto the worker's Chase-Lev deque, where thieves take the oldest
//!   job first, and one parked worker is woken through the pool's sleep handshake
//!   (at the outermost join only if this worker's outermost joins have been lasting
//!   longer than a wake-up takes; otherwise the first heartbeat does it).
//!
//! At its `join` the owner pops a promoted job back from the deque if no thief took it.
//! If `b` was stolen, the worker waits on the job's latch and meanwhile *only* steals
//! from the thief that took `b` (leapfrogging): those jobs are `b`'s own descendants,
//! so helping with them cannot make the waiting frame run unrelated code that needs a
//! lock it holds (rayon's deadlock with a mutex held across a join). A worker blocked in
//! `join` therefore does not run async tasks or other workers' jobs.
//!
//! Once enough private frames are waiting (one while the computation runs alone, three
//! once the heartbeat shared work), further joins run as plain calls (no frame) except
//! every *n*th, which makes a frame and runs the heartbeat check. The countdown to that
//! join lives in a thread-local allowance while plain calls are allowed
//! (`worker::take_plain_join`), so the plain path reads and writes one thread-local word
//! and never looks at the core; the framed path hands the countdown back and forth
//! (`Core::absorb_plain` before it reads the core's frame state, `Core::grant_plain`
//! before user code runs). A join from a thread that is not a worker has no allowance.
//!
//! This is the heartbeat scheduling of Spice and chili on top of spec 002's deque and
//! latch: promotion costs are paid at most once per heartbeat, not per join.
//!
//! Called from a thread that is not a worker, `join` and `scope` run on the current
//! runtime's default pool (or a lazily started global runtime when none is current,
//! sized by `WEFT_WORKERS`) and block until done. If that pool is shutting down they
//! run sequentially on the caller.

mod scope;

pub use scope::{scope, Scope};

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use crate::base::park::Parker;
use crate::base::Arc;
use crate::scheduler::job::{FnContext, StackJob};
use crate::scheduler::worker::{self, Core};
use crate::scheduler::Shared;
use crate::task::waker::drop_payload;

/// Runs `a` and `b`, potentially in parallel, and returns both results.
///
/// On a weft worker (inside a task, a fiber, or another join) this is the fast path
/// described in the module docs; from any other thread the pair runs on the current
/// runtime's default pool, or on a global runtime started on first use.
///
/// Both closures always finish before `join` returns. If either panics, the panic is
/// resumed after both finished; if both panic, `a`'s payload wins.
///
/// ```
/// fn fib(n: u64) -> u64 {
///     if n < 2 {
///         return n;
///     }
///     let (a, b) = weft::join(|| fib(n - 1), || fib(n - 2));
///     a + b
/// }
/// assert_eq!(fib(20), 6765);
/// ```
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    join_context(|_| a(), |_| b())
}

/// [`join`] whose closures learn whether they were stolen: two plain calls when this
/// thread's allowance says so (the common case deep in a recursion), else the slow path.
#[inline]
pub(crate) fn join_context<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce(FnContext) -> RA + Send,
    B: FnOnce(FnContext) -> RB + Send,
    RA: Send,
    RB: Send,
{
    // The plain path is kept tiny so the compiler can inline a recursion through it
    // (and overlap its memory accesses), as it does for plain code.
    if worker::take_plain_join() {
        return join_plain(a, b);
    }
    join_slow(a, b, false)
}

/// [`join_context`] for splits made on purpose to share work (parallel iterators):
/// when a worker of the pool is hungry, `b` (and any older private frame) is offered to
/// thieves at once instead of at the next heartbeat.
#[inline]
pub(crate) fn join_context_shared<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce(FnContext) -> RA + Send,
    B: FnOnce(FnContext) -> RB + Send,
    RA: Send,
    RB: Send,
{
    join_slow(a, b, true)
}

/// A join that makes a frame here on a worker, or runs on the target pool from any
/// other thread.
#[inline(never)]
fn join_slow<A, B, RA, RB>(a: A, b: B, share: bool) -> (RA, RB)
where
    A: FnOnce(FnContext) -> RA + Send,
    B: FnOnce(FnContext) -> RB + Send,
    RA: Send,
    RB: Send,
{
    // SAFETY: the core lives as long as its worker thread, which is this thread.
    match unsafe { worker::current_ptr_in_join().as_ref() } {
        Some(core) => {
            core.absorb_plain();
            match crate::runtime::entered_on_worker_in_join() {
                None => join_on(core, a, b, share),
                // Inside a `block_on` of another runtime (or an enter guard): each half
                // enters it again wherever it runs, so that what it spawns, stolen or
                // not, goes where the caller's own spawns go.
                Some(entered) => {
                    let again = entered.clone();
                    join_on(
                        core,
                        move |c| {
                            let _in = entered.enter();
                            a(c)
                        },
                        move |c| {
                            let _in = again.enter();
                            b(c)
                        },
                        share,
                    )
                }
            }
        }
        None => in_worker(|core| match core {
            Some(core) => {
                core.absorb_plain();
                join_on(core, a, b, share)
            }
            // The pool no longer runs jobs: both halves here, with join's panic rules.
            None => join_plain(a, b),
        }),
    }
}

/// Whether a worker of the current worker's pool is idle (searching or parked): a hint
/// that splitting work further would be used. False off a worker.
pub(crate) fn someone_hungry() -> bool {
    worker::with_current(|c| c.is_some_and(|c| c.someone_hungry()))
}

/// The number of workers `join` would spread work over from here.
pub(crate) fn current_num_threads() -> usize {
    match worker::with_current(|c| c.map(|c| c.shared().num_workers())) {
        Some(n) => n,
        None => target_pool().num_workers(),
    }
}

/// A join with a frame for `b`. The caller has taken back the plain-join allowance
/// ([`Core::absorb_plain`]).
#[inline]
fn join_on<A, B, RA, RB>(core: &Core, a: A, b: B, share: bool) -> (RA, RB)
where
    A: FnOnce(FnContext) -> RA + Send,
    B: FnOnce(FnContext) -> RB + Send,
    RA: Send,
    RB: Send,
{
    let parker = core.parker();
    let job_b = StackJob::new(b, parker);
    // `b` starts as a private frame of this worker; the heartbeat may promote it to the
    // deque while `a` runs. It stays in this stack frame until it was either taken back
    // or executed by a thief and its latch observed set.
    core.push_frame(&job_b.frame);
    if share {
        core.share_private_frames();
    }
    // If `a` panics, the guard still finishes `b` (it borrows this frame) before the
    // panic continues; no `catch_unwind` on the fast path.
    let guard = FinishOnUnwind { core, job: &job_b };
    core.grant_plain();
    let ra = a(FnContext { migrated: false });
    std::mem::forget(guard);
    let rb = finish_b(core, &job_b);
    // Back to the caller's code, which may be a plain-call region of an outer join.
    core.grant_plain();
    (ra, rb)
}

/// A join as two plain calls (no frame). If `a` panics, `b` still runs before the panic
/// continues.
#[inline]
fn join_plain<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce(FnContext) -> RA,
    B: FnOnce(FnContext) -> RB,
{
    struct RunOnUnwind<B: FnOnce(FnContext) -> RB, RB>(Option<B>);
    impl<B: FnOnce(FnContext) -> RB, RB> Drop for RunOnUnwind<B, RB> {
        #[inline(always)]
        fn drop(&mut self) {
            if let Some(b) = self.0.take() {
                run_after_panic(b);
            }
        }
    }
    #[cold]
    fn run_after_panic<B: FnOnce(FnContext) -> RB, RB>(b: B) {
        // `a`'s panic is unwinding: `b`'s, if any, is dropped under a catch (a payload
        // whose `Drop` panicked here aborted the process).
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| b(FnContext { migrated: false }))) {
            drop_payload(p);
        }
    }
    let ctx = FnContext { migrated: false };
    let mut guard = RunOnUnwind(Some(b));
    let ra = a(ctx);
    let b = guard.0.take().expect("weft: plain join ran b twice");
    (ra, b(ctx))
}

/// Takes `b` back and runs it here, or waits for the thief that took it.
#[inline]
fn finish_b<F, R>(core: &Core, job_b: &StackJob<F, R>) -> R
where
    F: FnOnce(FnContext) -> R + Send,
    R: Send,
{
    core.absorb_plain();
    if core.pop_frame(&job_b.frame) {
        // Never promoted, or promoted and popped back before a thief took it.
        core.grant_plain();
        let rb = job_b.run_inline(FnContext { migrated: false });
        core.absorb_plain();
        return rb;
    }
    // Stolen: wait, helping the thief with `b`'s own descendants.
    core.wait_for_thief(&job_b.latch, &job_b.thief);
    job_b.take_result()
}

/// Finishes `b` when `a` unwinds; `b`'s own panic, if any, is dropped (`a`'s wins).
struct FinishOnUnwind<'c, F, R>
where
    F: FnOnce(FnContext) -> R + Send,
    R: Send,
{
    core: &'c Core,
    job: &'c StackJob<F, R>,
}

impl<F, R> Drop for FinishOnUnwind<'_, F, R>
where
    F: FnOnce(FnContext) -> R + Send,
    R: Send,
{
    fn drop(&mut self) {
        let (core, job) = (self.core, self.job);
        // As in `join_plain`: `b`'s payload is dropped under a catch while `a` unwinds.
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| finish_b(core, job))) {
            drop_payload(p);
        }
    }
}

/// Runs `op` on a worker: here if this thread is one, else on the target pool (or
/// right here when that pool no longer runs jobs).
pub(crate) fn on_worker<R, OP>(op: OP) -> R
where
    OP: FnOnce() -> R + Send,
    R: Send,
{
    if worker::with_current(|c| c.is_some()) {
        op()
    } else {
        in_worker(|_| op())
    }
}

/// The pool that work from a non-worker thread goes to.
fn target_pool() -> Arc<Shared> {
    if let Ok(h) = crate::Handle::try_current() {
        return h.inner.pools[0].clone();
    }
    static GLOBAL: OnceLock<crate::Runtime> = OnceLock::new();
    GLOBAL
        .get_or_init(|| {
            crate::Builder::new()
                .thread_name("weft-global")
                .build()
                .expect("weft: could not start the global runtime for fork-join")
        })
        .handle()
        .inner
        .pools[0]
        .clone()
}

/// This thread's parker for [`in_worker`]. Never inlined: it reads a thread-local (see
/// `worker::current_cell`).
#[inline(never)]
fn thread_parker() -> Arc<Parker> {
    thread_local! {
        static PARKER: Arc<Parker> = Arc::new(Parker::new());
    }
    PARKER.with(|p| p.clone())
}

/// Runs `op` on a worker of the target pool and blocks this thread until it is done
/// (with `None` if that pool no longer runs jobs).
fn in_worker<R, OP>(op: OP) -> R
where
    OP: FnOnce(Option<&Core>) -> R + Send,
    R: Send,
{
    let pool = target_pool();
    let parker = thread_parker();
    let job = StackJob::new(
        // SAFETY: set by `Core::run` for the core's life on this thread (null off a
        // worker); nothing suspends a job, so it stays on this thread while it runs.
        |_| op(unsafe { worker::current_ptr_in_join().as_ref() }),
        &parker,
    );
    // SAFETY: we wait for the latch below before `job` leaves this frame.
    let job_ref = unsafe { job.as_job_ref() };
    if !pool.inject_job(job_ref) {
        return job.run_inline(FnContext { migrated: false });
    }
    job.latch.wait(&parker, || false);
    job.take_result()
}
