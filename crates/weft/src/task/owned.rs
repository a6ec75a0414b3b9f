//! The owned-task list: every live task of a runtime, so shutdown can drop the futures
//! of tasks that nothing will ever wake again. Sharded by task id so spawning and
//! completing workers rarely meet on one lock.

use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use super::header::Header;
use crate::base::Mutex;

struct Shard {
    head: Option<NonNull<Header>>,
    /// How many tasks are linked (`Stats::active_tasks`): kept under the lock that
    /// linking and unlinking hold anyway, so counting costs no atomic.
    len: usize,
    closed: bool,
}

// SAFETY: the raw pointers are only followed under the shard's lock, and every linked
// task is kept alive by the list's reference.
unsafe impl Send for Shard {}

/// Every shard of one list, locked ([`OwnedTasks::lock_all`]).
pub(crate) struct Locked<'a>(Vec<crate::base::MutexGuard<'a, Shard>>);

impl Locked<'_> {
    /// How many tasks are linked, exactly.
    pub(crate) fn len(&self) -> usize {
        self.0.iter().map(|s| s.len).sum()
    }

    /// Calls `f` on every linked task of the snapshot (see
    /// [`OwnedTasks::for_each`] for what `f` may do).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Header)) {
        for s in &self.0 {
            s.for_each(&mut f);
        }
    }
}

impl Shard {
    /// Calls `f` on every task linked here; the caller holds this shard's lock.
    fn for_each(&self, f: &mut impl FnMut(&Header)) {
        let mut next = self.head;
        while let Some(t) = next {
            // SAFETY: under the shard's lock every linked task is alive (the list
            // holds a reference to it) and its links are stable.
            let h = unsafe { t.as_ref() };
            f(h);
            // SAFETY: as above.
            next = unsafe { h.owned.next.with(|p| *p) };
        }
    }
}

pub(crate) struct OwnedTasks {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    mask: usize,
}

impl OwnedTasks {
    pub(crate) fn new(workers: usize) -> Self {
        let n = (workers * 4).next_power_of_two().max(8);
        OwnedTasks {
            shards: (0..n)
                .map(|_| {
                    CachePadded::new(Mutex::new(Shard {
                        head: None,
                        len: 0,
                        closed: false,
                    }))
                })
                .collect(),
            mask: n - 1,
        }
    }

    fn shard(&self, task: &Header) -> &Mutex<Shard> {
        &self.shards[task.id.0 as usize & self.mask]
    }

    /// Links a new task. Returns false if the list is closed (the runtime is shutting
    /// down); the caller must then cancel the task itself.
    pub(crate) fn bind(&self, task: NonNull<Header>) -> bool {
        // SAFETY: the caller owns the task's owned-list reference.
        let h = unsafe { task.as_ref() };
        let mut shard = self.shard(h).lock();
        if shard.closed {
            return false;
        }
        let old = shard.head;
        // SAFETY: links are only touched under this shard's lock.
        unsafe {
            h.owned.next.with_mut(|p| *p = old);
            h.owned.prev.with_mut(|p| *p = None);
            h.owned.linked.with_mut(|p| *p = true);
            if let Some(old) = old {
                old.as_ref().owned.prev.with_mut(|p| *p = Some(task));
            }
        }
        shard.head = Some(task);
        shard.len += 1;
        true
    }

    /// Unlinks a task, if it is linked (a task unlinked by shutdown is not). Returns
    /// whether it was linked: if so the caller now owns the list's reference.
    pub(crate) fn remove(&self, task: NonNull<Header>) -> bool {
        // SAFETY: the caller holds a reference to the task.
        let h = unsafe { task.as_ref() };
        let mut shard = self.shard(h).lock();
        // SAFETY: links are only touched under this shard's lock; neighbours are alive
        // because the list holds a reference to each linked task.
        unsafe { unlink(&mut shard, h) }
    }

    /// Closes the list to new tasks and hands every linked task to `f`, unlinked, one at
    /// a time and outside the lock (cancelling a task runs user `Drop` code). `f`
    /// receives the list's reference to the task.
    pub(crate) fn close_and_drain(&self, mut f: impl FnMut(NonNull<Header>)) {
        for shard in self.shards.iter() {
            loop {
                let task = {
                    let mut s = shard.lock();
                    s.closed = true;
                    match s.head {
                        None => break,
                        Some(t) => {
                            // SAFETY: under the lock; `t` is linked and alive.
                            unsafe { unlink(&mut s, t.as_ref()) };
                            t
                        }
                    }
                };
                f(task);
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.lock().head.is_none())
    }

    /// How many tasks are linked (live, not yet completed), summed shard by shard: an
    /// estimate (`Stats::active_tasks`). Tasks spawned and completed meanwhile may be
    /// missed or counted on either side, so it may read 0 while a task is always
    /// alive; [`lock_all`](Self::lock_all) is exact.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len).sum()
    }

    /// Every shard locked at once, in order (nobody else holds two): a snapshot.
    ///
    /// Why a sum of [`len`](Self::len)s is not one: a task that spawns its successor
    /// and then completes keeps one alive at every moment, yet the successor may be
    /// linked into a shard already read and the task unlinked from one not yet read,
    /// and the sum reads 0 (seen in a soak loop: `shutdown_graceful` returned before
    /// its timeout while such chains ran, `review_shutdown`). With every lock held
    /// that cannot be: a link waits for its shard's lock, and its spawner, still in the
    /// spawn, cannot complete meanwhile. The same holds across pools when the caller
    /// holds every pool's `Locked` at once.
    pub(crate) fn lock_all(&self) -> Locked<'_> {
        Locked(self.shards.iter().map(|s| s.lock()).collect())
    }

    /// Calls `f` on every linked task, one shard at a time under that shard's lock.
    /// Safe against tasks completing concurrently: a completing task unlinks itself
    /// under the same lock, so a task is either seen while the list's reference keeps
    /// it alive or not seen at all. `f` must be short and must not touch the list
    /// (nor anything that may complete a task: that would take the shard lock again).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Header)) {
        for shard in self.shards.iter() {
            shard.lock().for_each(&mut f);
        }
    }
}

/// # Safety
/// The caller holds the lock of the shard that owns `h`.
unsafe fn unlink(shard: &mut Shard, h: &Header) -> bool {
    // SAFETY: per the contract, the links are ours to touch, and linked neighbours are
    // alive.
    unsafe {
        if !h.owned.linked.with(|p| *p) {
            return false;
        }
        let prev = h.owned.prev.with(|p| *p);
        let next = h.owned.next.with(|p| *p);
        match prev {
            Some(p) => p.as_ref().owned.next.with_mut(|x| *x = next),
            None => shard.head = next,
        }
        if let Some(n) = next {
            n.as_ref().owned.prev.with_mut(|x| *x = prev);
        }
        h.owned.linked.with_mut(|p| *p = false);
        h.owned.prev.with_mut(|p| *p = None);
        h.owned.next.with_mut(|p| *p = None);
    }
    shard.len -= 1;
    true
}
