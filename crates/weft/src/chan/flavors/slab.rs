//! Runs of list blocks carved from one allocation (a slab), for a list that holds many
//! blocks at once.
//!
//! Why: a burst that fills an unbounded channel to thousands of blocks frees them as
//! receivers drain it, each on the thread that popped the block's last value. With one
//! `malloc` per block, each of those frees takes the lock of the allocator arena the
//! block came from: two workers draining at once collided there and slept on the
//! arena's futex (95% of the futex calls of a run of `fibers_unbounded_mpmc`, which ran
//! at half the speed of the same case on a ring; session 25 in BENCHMARKS.md).
//!
//! A slab is one zeroed allocation of `per` blocks behind a count of the blocks not yet
//! freed. Freeing a carved block is one atomic decrement; the decrement that reaches zero
//! frees the slab. A list frees its blocks in about the order it took them (FIFO), so a
//! drained burst gives its slabs back as it drains. A carved block is never kept for
//! reuse (the list's one kept block is one allocated alone), and a list that is short
//! again lets go of the uncarved rest of its slab at its next allocation: a drained
//! list keeps at most the slab of its current block and that rest (under 64 KiB) until
//! it allocates or is dropped.
//!
//! Not under loom: the models keep one allocation per block, which loom's leak and
//! use-after-free checks follow (see `list::Block::free`).

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Mutex, PoisonError};

/// A slab's header, before its blocks.
pub(crate) struct Slab {
    /// Blocks not freed yet: carved and in use, or not carved.
    live: AtomicUsize,
}

/// About the size of one slab.
const SLAB_BYTES: usize = 32 * 1024;

/// Where fewer blocks than this fit in a slab (blocks of large values), there are no
/// slabs: such a block is a large allocation of its own anyway.
const MIN_PER: usize = 8;

/// The slabs of one list, whose blocks are `B`s.
pub(crate) struct Slabs<B> {
    cursor: Mutex<Cursor>,
    /// Whether the cursor holds a slab with blocks not carved yet: `retire` looks at
    /// this before it takes the lock.
    carving: AtomicBool,
    _blocks: PhantomData<fn() -> B>,
}

/// The slab being carved (null before the first) and the index of its next block.
struct Cursor {
    slab: *mut Slab,
    next: usize,
}

// SAFETY: the pointer is followed only under the mutex that holds it (to carve) and by
// `Slabs::drop` (exclusive); a slab is not tied to a thread.
unsafe impl Send for Cursor {}

impl Cursor {
    /// Counts the blocks never carved from the slab being carved as freed, and carves
    /// nothing more from it. A used-up slab belongs to its blocks' frees alone (it may be
    /// gone already) and is not touched.
    fn let_go<B>(&mut self, per: usize) {
        if !self.slab.is_null() && self.next < per {
            let (slab, rest) = (self.slab, per - self.next);
            self.next = per;
            // SAFETY: the uncarved blocks are counted here only (the cursor moves past
            // them, under its lock or exclusively), and nobody uses them; they keep the
            // slab alive until this call.
            unsafe { Slabs::<B>::release(slab, rest) };
        }
    }
}

impl<B> Slabs<B> {
    pub(crate) fn new() -> Slabs<B> {
        Slabs {
            cursor: Mutex::new(Cursor {
                slab: ptr::null_mut(),
                next: 0,
            }),
            carving: AtomicBool::new(false),
            _blocks: PhantomData,
        }
    }

    /// A slab's layout, the offset of its first block and how many blocks it holds;
    /// `None` where fewer than [`MIN_PER`] fit.
    fn shape() -> Option<(Layout, usize, usize)> {
        let block = Layout::new::<B>();
        let per = SLAB_BYTES.saturating_sub(size_of::<Slab>()) / block.size().max(1);
        if per < MIN_PER {
            return None;
        }
        let (layout, offset) = Layout::new::<Slab>()
            .extend(Layout::array::<B>(per).ok()?)
            .ok()?;
        Some((layout.pad_to_align(), offset, per))
    }

    /// A zeroed block carved from the current slab (from a new one when that is used
    /// up), the caller's alone, and its slab, which [`release`](Self::release) must be
    /// told of its free; `None` where `B` is too large for slabs.
    pub(crate) fn take(&self) -> Option<(NonNull<B>, *mut Slab)> {
        let (layout, offset, per) = Self::shape()?;
        let mut cursor = self.cursor.lock().unwrap_or_else(PoisonError::into_inner);
        if cursor.slab.is_null() || cursor.next == per {
            // A used-up slab is left to the frees of its blocks (it may be gone
            // already): it is not touched here.
            // SAFETY: the layout holds a header: not zero-sized.
            let raw = unsafe { alloc_zeroed(layout) };
            if raw.is_null() {
                handle_alloc_error(layout);
            }
            let slab = raw.cast::<Slab>();
            // SAFETY: a fresh allocation, aligned for its header at offset 0.
            unsafe {
                slab.write(Slab {
                    live: AtomicUsize::new(per),
                })
            };
            cursor.slab = slab;
            cursor.next = 0;
            self.carving.store(true, Relaxed);
        }
        // SAFETY: `next < per`: a block inside the slab's array, at `offset` from its
        // start (the layout's `extend`); carved once (the cursor moves past it).
        let block = unsafe {
            cursor
                .slab
                .cast::<u8>()
                .add(offset)
                .cast::<B>()
                .add(cursor.next)
        };
        cursor.next += 1;
        // SAFETY: an address inside a live allocation is not null.
        Some((unsafe { NonNull::new_unchecked(block) }, cursor.slab))
    }

    /// Lets go of the rest of the slab being carved (its uncarved blocks count as freed):
    /// the list is short again, and its next blocks are allocated alone.
    pub(crate) fn retire(&self) {
        // Relaxed: a hint; a stale `false` leaves the rest to the next call or the drop.
        if !self.carving.load(Relaxed) {
            return;
        }
        let Some((_, _, per)) = Self::shape() else {
            return;
        };
        let mut cursor = self.cursor.lock().unwrap_or_else(PoisonError::into_inner);
        self.carving.store(false, Relaxed);
        cursor.let_go::<B>(per);
    }

    /// Counts `n` blocks of `slab` freed, and frees the slab with its last.
    ///
    /// # Safety
    ///
    /// `slab` came from [`take`](Self::take) of a `Slabs<B>` (the same `B`); these `n`
    /// blocks were not counted before; every access any thread made to them happens
    /// before this call, and none follows it.
    pub(crate) unsafe fn release(slab: *mut Slab, n: usize) {
        // AcqRel: every block's last use (released by each freer) happens before the
        // free of the slab (acquired by the last).
        // SAFETY: the slab is alive until its count reaches zero, which these `n` blocks
        // (not counted yet) keep from happening before this decrement.
        if unsafe { (*slab).live.fetch_sub(n, AcqRel) } == n {
            let (layout, ..) = Self::shape().expect("a slab was carved for this type");
            // SAFETY: allocated by `take` with this layout; no block of it is in use.
            unsafe { dealloc(slab.cast(), layout) };
        }
    }
}

impl<B> Drop for Slabs<B> {
    /// Counts the blocks never carved from the current slab as freed (every carved block
    /// of the list is freed by now: the list drops its blocks before this).
    fn drop(&mut self) {
        let cursor = self
            .cursor
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, _, per)) = Self::shape() {
            cursor.let_go::<B>(per);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_distinct_zeroed_and_the_slab_goes_with_the_last() {
        let slabs = Slabs::<[u64; 8]>::new();
        let (_, _, per) = Slabs::<[u64; 8]>::shape().unwrap();
        let taken: Vec<_> = (0..per + 3).map(|_| slabs.take().unwrap()).collect();
        let mut addrs: Vec<usize> = taken.iter().map(|(b, _)| b.as_ptr() as usize).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), per + 3, "a block carved twice");
        for (b, _) in &taken {
            // SAFETY: carved, zeroed, ours.
            assert_eq!(unsafe { *b.as_ptr() }, [0; 8]);
            assert_eq!(b.as_ptr() as usize % align_of::<[u64; 8]>(), 0);
        }
        assert_ne!(taken[0].1, taken[per].1, "a second slab after `per` blocks");
        for (_, slab) in taken {
            // SAFETY: each carved block released once, none used afterwards.
            unsafe { Slabs::<[u64; 8]>::release(slab, 1) };
        }
        // The second slab's uncarved blocks go with `slabs`.
    }

    #[test]
    fn large_blocks_take_no_slabs() {
        assert!(Slabs::<[u8; 8192]>::new().take().is_none());
        let (_, slab) = Slabs::<[u8; 64]>::new().take().unwrap();
        // SAFETY: the one carved block, released once (the rest went with the drop).
        unsafe { Slabs::<[u8; 64]>::release(slab, 1) };
    }
}
