//! The type-erased task header and its vtable.

use std::fmt;
use std::ptr::NonNull;

use super::state::State;
use crate::base::{AtomicU32, UnsafeCell};

/// High bit of a tagged id (the stall reporter's `Remote::running_task`): the task is a
/// fiber.
pub(crate) const FIBER_BIT: u64 = 1 << 63;

/// The first field of every task allocation; the scheduler only sees `NonNull<Header>`.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) state: State,
    pub(crate) vtable: &'static Vtable,
    /// Link for the injection queue. Written only by whoever holds the task's queue
    /// reference and the queue lock.
    pub(crate) queue_next: UnsafeCell<Option<NonNull<Header>>>,
    /// Links of the owned-task list; guarded by the lock of the task's shard of that
    /// list (`OwnedTasks::shard`: the id masked by the shard count).
    pub(crate) owned: OwnedLinks,
    pub(crate) id: Id,
    /// The worker a started fiber is tied to ([`NO_HOME`] for async tasks and fibers
    /// that have not started), with [`SOFT_HOME`] set when the fiber may migrate; or,
    /// with [`HANDED`], the worker an unstarted fiber was handed to.
    /// Written by the RUNNING owner; read by whoever schedules the task, after the
    /// state-word transition that made it SCHEDULED (which orders the two).
    pub(crate) home: AtomicU32,
    /// The task's future is a fiber (set at spawn; the stall reporter says "fiber").
    pub(crate) fiber: bool,
    /// Graceful shutdown's marks ([`diag::ACTIVE_AT_DRAIN`](super::diag::ACTIVE_AT_DRAIN),
    /// [`diag::REFUSED`](super::diag::REFUSED)); in what was padding.
    pub(crate) flags: std::sync::atomic::AtomicU8,
    /// The diagnostics record: what the task waits on and since when (see
    /// [`diag`](super::diag)). Relaxed: read only by dumps.
    pub(crate) diag: std::sync::atomic::AtomicU64,
}

/// `Header::home` of a task that any worker may run.
pub(crate) const NO_HOME: u32 = u32::MAX;
/// Flag in `Header::home`: the worker is a preference, not a rule (fiber migration).
pub(crate) const SOFT_HOME: u32 = 1 << 31;
/// Flag in `Header::home`: a fiber that has not started, handed by a worker with more
/// fibers tied to it to the worker named (see `FiberFuture::hand_off`). It goes to that
/// worker's `handed` queue, which is not a rule either: any worker may start it.
pub(crate) const HANDED: u32 = 1 << 30;

/// The decoded `Header::home`: the worker a started fiber belongs to, and whether that
/// is a rule (`pinned`) or a preference; or the worker an unstarted fiber was handed
/// to (`handed`, never `pinned`).
#[derive(Clone, Copy)]
pub(crate) struct Home {
    pub(crate) worker: usize,
    pub(crate) pinned: bool,
    pub(crate) handed: bool,
}

impl Header {
    /// The task's home worker, if it is a started fiber. Read it after the state-word
    /// transition that gave the reader the task (see the field).
    #[inline]
    pub(crate) fn home(&self) -> Option<Home> {
        use std::sync::atomic::Ordering::Relaxed;
        let home = self.home.load(Relaxed);
        (home != NO_HOME).then_some(Home {
            worker: (home & !(SOFT_HOME | HANDED)) as usize,
            pinned: home & (SOFT_HOME | HANDED) == 0,
            handed: home & HANDED != 0,
        })
    }

    /// The id as the stall reporter stores it: with `FIBER_BIT` for a fiber.
    #[inline]
    pub(crate) fn tagged_id(&self) -> u64 {
        if self.fiber {
            self.id.0 | FIBER_BIT
        } else {
            self.id.0
        }
    }

    /// Whether the task is a started fiber that must run on its home worker.
    #[inline]
    pub(crate) fn is_pinned(&self) -> bool {
        self.home().is_some_and(|h| h.pinned)
    }
}

/// Intrusive doubly-linked-list pointers for the owned-task list.
pub(crate) struct OwnedLinks {
    pub(crate) prev: UnsafeCell<Option<NonNull<Header>>>,
    pub(crate) next: UnsafeCell<Option<NonNull<Header>>>,
    pub(crate) linked: UnsafeCell<bool>,
}

impl OwnedLinks {
    pub(crate) fn new() -> Self {
        OwnedLinks {
            prev: UnsafeCell::new(None),
            next: UnsafeCell::new(None),
            linked: UnsafeCell::new(false),
        }
    }
}

// SAFETY: every field is either atomic or an `UnsafeCell` whose accesses are serialized
// by a protocol documented at the field (queue lock, owned-list shard lock, or exclusive
// ownership through the state word).
unsafe impl Send for Header {}
// SAFETY: as above.
unsafe impl Sync for Header {}

/// Functions that know the concrete task type behind a header.
pub(crate) struct Vtable {
    /// Runs the task once; consumes the caller's queue reference.
    pub(crate) poll: unsafe fn(NonNull<Header>),
    /// Enqueues the task through its scheduler; consumes one queue reference.
    pub(crate) schedule: unsafe fn(NonNull<Header>),
    /// Frees the allocation; called once, when the reference count reaches zero.
    pub(crate) dealloc: unsafe fn(NonNull<Header>),
    /// `JoinHandle::poll`: writes `Poll<Result<T, JoinError>>` to `dst` if ready,
    /// otherwise registers the waker.
    pub(crate) try_read_output: unsafe fn(NonNull<Header>, *mut (), &std::task::Waker),
    /// `JoinHandle::drop` on a completed task: drops the unread output.
    pub(crate) drop_output: unsafe fn(NonNull<Header>),
    /// `JoinHandle::drop` on a task not complete (its `unset_join_interest` cleared
    /// `JOIN_WAKER`, so the slot is the handle's): drops the waker its last pending
    /// poll left.
    pub(crate) drop_join_waker: unsafe fn(NonNull<Header>),
    /// Runtime shutdown: cancel the task now if no worker is running it (one that is
    /// running sees the cancelled flag at its next poll). The caller holds a reference.
    pub(crate) shutdown: unsafe fn(NonNull<Header>),
}

/// A task's identity, unique for the life of the process.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let a = rt.spawn(async {});
/// let b = rt.spawn(async {});
/// assert_ne!(a.id(), b.id());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub(crate) u64);

impl Id {
    /// Never inlined: it reads a thread-local (see `scheduler::worker::current_cell`).
    #[inline(never)]
    pub(crate) fn next() -> Id {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        const BLOCK: u64 = 1024;
        // Ids are handed out in per-thread blocks so spawning threads do not contend
        // on one counter.
        thread_local! {
            static RANGE: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
        }
        RANGE.with(|r| {
            let (mut next, mut end) = r.get();
            if next == end {
                next = NEXT.fetch_add(BLOCK, Relaxed);
                end = next + BLOCK;
            }
            r.set((next + 1, end));
            Id(next)
        })
    }

    /// The number behind the id.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// assert!(rt.spawn(async {}).id().as_u64() > 0);
    /// ```
    pub fn as_u64(&self) -> u64 {
        self.0
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.0)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
