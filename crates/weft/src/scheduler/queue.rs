//! The per-worker local run queue (spec 001): a fixed ring of task pointers that only
//! its owner pushes to and pops from, and that other workers steal half of at a time.
//!
//! The head word packs two positions: `real` is where the owner pops, `steal` trails it
//! while a thief is copying the slots between them. While the two differ, the slots in
//! `steal..real` still belong to the thief and the owner must not overwrite them, so
//! capacity is measured from `steal`. A steal is three steps: claim (advance `real`),
//! copy, release (bring `steal` up to `real`). Only one thief can be between claim and
//! release on one victim; others back off.

use std::ptr::NonNull;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use crossbeam_utils::CachePadded;

use super::inject::Inject;
use crate::base::{Arc, AtomicPtr, AtomicU32};
use crate::task::header::Header;
use crate::task::raw::Notified;

#[cfg(not(loom))]
pub(crate) const CAPACITY: usize = 256;
// Small enough for loom to explore overflow.
#[cfg(loom)]
pub(crate) const CAPACITY: usize = 4;
const MASK: usize = CAPACITY - 1;

fn pack(steal: u16, real: u16) -> u32 {
    ((steal as u32) << 16) | real as u32
}

fn unpack(head: u32) -> (u16, u16) {
    ((head >> 16) as u16, head as u16)
}

struct Inner {
    head: CachePadded<AtomicU32>,
    /// Written only by the owner; the u16 position lives in the low bits.
    tail: CachePadded<AtomicU32>,
    buffer: Box<[AtomicPtr<Header>]>,
}

/// The owner's end. `!Sync` in spirit: only the owning worker calls its methods.
pub(crate) struct Local {
    inner: Arc<Inner>,
}

/// A thief's end, shared by every other worker.
#[derive(Clone)]
pub(crate) struct Steal {
    inner: Arc<Inner>,
}

pub(crate) fn local() -> (Local, Steal) {
    let inner = Arc::new(Inner {
        head: CachePadded::new(AtomicU32::new(0)),
        tail: CachePadded::new(AtomicU32::new(0)),
        buffer: (0..CAPACITY)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect(),
    });
    (
        Local {
            inner: inner.clone(),
        },
        Steal { inner },
    )
}

impl Inner {
    fn len(&self) -> usize {
        let (_, real) = unpack(self.head.load(Acquire));
        let tail = self.tail.load(Acquire) as u16;
        tail.wrapping_sub(real) as usize
    }
}

impl Local {
    pub(crate) fn len(&self) -> usize {
        self.inner.len()
    }

    /// Only the owner pushes, so an empty answer stays true until it pushes.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free slots, counting slots a thief has claimed but not released as used.
    pub(crate) fn remaining(&self) -> usize {
        let (steal, _) = unpack(self.inner.head.load(Acquire));
        let tail = self.inner.tail.load(Relaxed) as u16;
        CAPACITY - tail.wrapping_sub(steal) as usize
    }

    /// Pushes at the tail; when full, moves half the ring plus `task` to `inject` in one
    /// batch. Returns true if it overflowed.
    pub(crate) fn push_back(&self, task: Notified, inject: &Inject) -> bool {
        let mut task = task;
        loop {
            let head = self.inner.head.load(Acquire);
            let (steal, real) = unpack(head);
            let tail = self.inner.tail.load(Relaxed) as u16;
            if (tail.wrapping_sub(steal) as usize) < CAPACITY {
                self.write_tail(tail, task);
                return false;
            }
            if steal != real {
                // A thief is copying; it will free room soon. Do not wait for it.
                if let Err(task) = inject.push(task) {
                    super::cancel_queued(task);
                }
                return true;
            }
            match self.push_overflow(task, real, tail, inject) {
                Ok(()) => return true,
                // A thief took tasks meanwhile, so there may be room now.
                Err(t) => task = t,
            }
        }
    }

    fn push_overflow(
        &self,
        task: Notified,
        real: u16,
        tail: u16,
        inject: &Inject,
    ) -> Result<(), Notified> {
        const HALF: u16 = (CAPACITY / 2) as u16;
        debug_assert_eq!(tail.wrapping_sub(real) as usize, CAPACITY);
        let prev = pack(real, real);
        let next = pack(real.wrapping_add(HALF), real.wrapping_add(HALF));
        if self
            .inner
            .head
            .compare_exchange(prev, next, Release, Relaxed)
            .is_err()
        {
            return Err(task);
        }
        // The claimed slots are ours: link them (oldest first) and the new task into one
        // batch and take the injection queue's lock once for all of them.
        let tasks = (0..HALF)
            .map(|i| {
                let slot = real.wrapping_add(i) as usize & MASK;
                let p = self.inner.buffer[slot].load(Relaxed);
                // SAFETY: slots between the old and new head held owned queue entries.
                unsafe { Notified::from_raw(NonNull::new_unchecked(p)) }
            })
            .chain(std::iter::once(task));
        for refused in inject.push_batch(tasks) {
            super::cancel_queued(refused);
        }
        Ok(())
    }

    /// Pushes at the tail when the caller knows there is room (it checked
    /// [`remaining`](Self::remaining); thieves only make more room).
    pub(crate) fn push_back_within_capacity(&self, task: Notified) {
        let (steal, _) = unpack(self.inner.head.load(Acquire));
        let tail = self.inner.tail.load(Relaxed) as u16;
        assert!(
            (tail.wrapping_sub(steal) as usize) < CAPACITY,
            "weft: local queue full"
        );
        self.write_tail(tail, task);
    }

    /// Stores `task` in the free slot at `tail` (the caller checked that it is free)
    /// and publishes it by advancing the tail.
    fn write_tail(&self, tail: u16, task: Notified) {
        let ptr = task.into_raw();
        self.inner.buffer[tail as usize & MASK].store(ptr.as_ptr(), Relaxed);
        self.inner.tail.store(tail.wrapping_add(1) as u32, Release);
    }

    /// Pops from the head (FIFO for the owner).
    pub(crate) fn pop(&self) -> Option<Notified> {
        let mut head = self.inner.head.load(Acquire);
        let idx = loop {
            let (steal, real) = unpack(head);
            let tail = self.inner.tail.load(Relaxed) as u16;
            if real == tail {
                return None;
            }
            let next_real = real.wrapping_add(1);
            let next = if steal == real {
                pack(next_real, next_real)
            } else {
                pack(steal, next_real)
            };
            match self
                .inner
                .head
                .compare_exchange(head, next, AcqRel, Acquire)
            {
                Ok(_) => break real as usize & MASK,
                Err(actual) => head = actual,
            }
        };
        let p = self.inner.buffer[idx].load(Relaxed);
        // SAFETY: the CAS gave us the slot, which holds an owned queue entry.
        Some(unsafe { Notified::from_raw(NonNull::new_unchecked(p)) })
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            debug_assert!(self.pop().is_none(), "weft: local queue dropped with tasks");
        }
    }
}

impl Steal {
    pub(crate) fn len(&self) -> usize {
        self.inner.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Steals half of this queue into `dst` (the caller's own queue) and returns one of
    /// the stolen tasks to run now, with the number stolen.
    pub(crate) fn steal_into(&self, dst: &Local) -> Option<(Notified, usize)> {
        let dst_tail = dst.inner.tail.load(Relaxed) as u16;
        let (dst_steal, _) = unpack(dst.inner.head.load(Acquire));
        if dst_tail.wrapping_sub(dst_steal) as usize > CAPACITY / 2 {
            // Not enough room for half of a full queue; the caller has work anyway.
            return None;
        }
        let n = self.steal_into2(dst, dst_tail);
        if n == 0 {
            return None;
        }
        // Return the newest stolen task directly; publish the rest.
        let last = dst_tail.wrapping_add(n - 1);
        let p = dst.inner.buffer[last as usize & MASK].load(Relaxed);
        if n > 1 {
            dst.inner.tail.store(last as u32, Release);
        }
        // SAFETY: the copied slot holds an owned queue entry that was moved to us.
        Some((
            unsafe { Notified::from_raw(NonNull::new_unchecked(p)) },
            n as usize,
        ))
    }

    fn steal_into2(&self, dst: &Local, dst_tail: u16) -> u16 {
        let mut prev = self.inner.head.load(Acquire);
        // Claim.
        let (first, n, claimed) = loop {
            let (steal, real) = unpack(prev);
            let tail = self.inner.tail.load(Acquire) as u16;
            if steal != real {
                return 0; // another thief is between claim and release
            }
            let avail = tail.wrapping_sub(real);
            let n = avail - avail / 2;
            if n == 0 {
                return 0;
            }
            let next = pack(steal, real.wrapping_add(n));
            match self
                .inner
                .head
                .compare_exchange(prev, next, AcqRel, Acquire)
            {
                Ok(_) => break (real, n, next),
                Err(actual) => prev = actual,
            }
        };
        // Copy.
        for i in 0..n {
            let src = first.wrapping_add(i) as usize & MASK;
            let dst_idx = dst_tail.wrapping_add(i) as usize & MASK;
            let p = self.inner.buffer[src].load(Relaxed);
            dst.inner.buffer[dst_idx].store(p, Relaxed);
        }
        // Release: `steal` catches up with `real`, which the owner may have advanced.
        let mut prev = claimed;
        loop {
            let (_, real) = unpack(prev);
            match self
                .inner
                .head
                .compare_exchange(prev, pack(real, real), AcqRel, Acquire)
            {
                Ok(_) => return n,
                Err(actual) => {
                    debug_assert_ne!(unpack(actual).0, unpack(actual).1);
                    prev = actual;
                }
            }
        }
    }
}
