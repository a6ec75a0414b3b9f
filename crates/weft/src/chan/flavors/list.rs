//! The buffer of unbounded channels: a lock-free multi-producer multi-consumer FIFO
//! queue on a linked list of fixed-size blocks. It only stores values; waiting for
//! one, and waking whoever waits, is the channel's business.
//!
//! # Positions, blocks, index words
//!
//! Every push is given a *position* (0, 1, 2, ...), and values leave in position order.
//! Positions come in laps of `LAP`; a block holds one lap's `BLOCK_CAP = LAP - 1`
//! values, and the lap's last position (offset `BLOCK_CAP`) holds none: it is the
//! *boundary*, where an index rests while its block pointer is switched to the next
//! block. Blocks are linked oldest to newest by `next`. Positions are never reused (a
//! `usize` index does not wrap in practice).
//!
//! `head` and `tail` each pair an index word with a block pointer. The index word is
//! `position << 1 | mark`. On `tail` the mark means closed. On `head` it means "every
//! slot of the head block has been claimed by a push and its `next` is linked", which
//! lets a pop skip reading `tail` until the block is used up.
//!
//! # A claim validates the block pointer
//!
//! A push (a pop) loads the index, then the block pointer, then claims the position
//! with a CAS of the index from the value it loaded to the next one. The pointer only
//! changes while the index rests on a boundary, and the CAS fails if the index moved at
//! all, so a successful CAS proves that the pointer loaded before it is the block of
//! the claimed position. (In memory-model terms: the pointer's next store is sequenced
//! after the CAS that takes the index to the boundary, which follows ours in the
//! index's modification order and so synchronizes with it: our load happens before
//! that store and cannot read it. It cannot read an older block either: the index value
//! we acquired was published after the pointer was set.) Before its claim a thread
//! never dereferences a block: nothing keeps that block alive yet.
//!
//! # Push
//!
//! 1. Closed mark set: fail, handing the value back. A push whose claim CAS succeeded
//!    did so before the mark (the mark is set by an RMW on the same word), so it
//!    completes: that is `close`'s guarantee.
//! 2. Index on a boundary: the push that claimed the block's last slot (the
//!    *installer*) is switching `tail` to the next block. Wait for it (see Waiting).
//! 3. No block yet (`tail.block` null, the first push): allocate the first block and
//!    CAS it into `tail.block`; the winner also stores it in `head.block`.
//! 4. Claim the position. The claimer of a block's last slot is the installer: it
//!    allocated the next block *before* its claim, and after the claim links it
//!    (`block.next`), stores it in `tail.block`, and steps the index over the boundary
//!    with a `fetch_add` (an RMW, so a close mark set meanwhile survives).
//! 5. Write the value into the slot, then set the slot's `WRITE` bit (Release). That
//!    RMW is the push's last access to the block.
//!
//! A push never looks at `head` or at another slot: it never waits for a pop.
//!
//! # Pop
//!
//! 1. Index on a boundary: another pop took the block's last slot and is moving `head`
//!    to the next block. Report `Busy` if `tail` shows values past it, else `Empty`.
//! 2. Unless the head mark is set, load `tail`: no position claimed past `head` means
//!    `Empty`. If `tail` is in a later lap the block is fully claimed and linked: the
//!    claim carries the head mark. If `head` is at the block's last slot and `tail` on
//!    the boundary, the installer has not linked the next block yet: `Busy` (claiming
//!    now would leave us unable to move `head`).
//! 3. No block yet (`head.block` null while a push has claimed a position): the first
//!    push is between its two stores of step 3 above: `Busy`.
//! 4. Claim the position. The claimer of a block's last slot reads `next` (linked: step
//!    2), and moves `head` over the boundary: `head.block = next`, then the index, with
//!    the head mark if `next` is itself fully claimed and linked. Nobody else writes
//!    `head` while it rests on the boundary, so plain stores do.
//! 5. Wait for the slot's `WRITE` bit (see Waiting), move the value out, and give the
//!    slot up (next section).
//!
//! # Freeing a block: exactly once, by the last thread to use it
//!
//! Each slot has three state bits: `WRITE` (its push is done with it), `READ` (its pop
//! is done with it) and `DESTROY` (the block's destroyer is waiting for its pop).
//!
//! * The pop of a block's last slot claims it after every other slot of the block has
//!   been claimed (claims are in position order). Once it has read its value it starts
//!   destroying the block: for each other slot in order, if `READ` is set it goes on,
//!   otherwise it sets `DESTROY` with an RMW and, if `READ` still was not set, stops
//!   there, leaving the rest to that slot's pop.
//! * The pop of any other slot sets `READ` with an RMW after moving its value out. If
//!   `DESTROY` was already set, the destroyer stopped at this slot: this pop carries
//!   the destruction on from the next slot.
//!
//! On each slot the pop's `READ` RMW and the destroyer's `DESTROY` RMW are ordered, and
//! whichever comes second sees the other's bit: exactly one of the two goes on. So the
//! destruction is one chain that passes from thread to thread and ends in exactly one
//! free, after every slot's pop is done.
//!
//! Nobody touches the block after the free:
//!
//! * Pushes: a push's last access is its `WRITE` RMW; the slot's pop acquires it
//!   before `READ`, so it happens before the free. The installer's accesses (linking
//!   `next`) come before its `WRITE`. Pushes whose CAS failed never dereferenced it.
//! * Pops: each pop's last access is its `READ` RMW (or, on the last slot, the
//!   destruction itself); the destroyer acquires every `READ` it reads, and a pop that
//!   takes the chain over acquires the `DESTROY` RMW, so every pop's access happens
//!   before the free. Pops whose CAS failed never dereferenced it. The pop that moved
//!   `head` into the block read its `next` before any slot of it was claimed.
//! * `head.block` and `tail.block` have moved past the block before it is freed (its
//!   last slot's pop moved `head`; its installer moved `tail` before writing the last
//!   slot's value), and any stale copy of the pointer fails its claim CAS.
//!
//! `Drop` runs with every operation finished: the blocks before `head.block` are freed
//! already, and it frees the rest.
//!
//! # One block kept for reuse
//!
//! The destroyer of a block does not free it if the list's `cache` is empty: it clears
//! the block (a null `next`, every slot state 0: what a fresh zeroed block holds) and
//! stores it there; the next push that needs a block takes it (a `swap` to null, so one
//! taker owns it) before allocating. A steady flow of values then allocates nothing:
//! blocks were allocated by pushes and freed by pops on other threads, and four threads
//! sending and four receiving on `unbounded()` spent most of their time in the
//! allocator's arena locks (tens of thousands of futex calls a second). The destroyer
//! owns the block when it clears it (every access to it happened before: the freeing
//! argument above), its Release store into `cache` publishes the cleared block, and the
//! taker's Acquire swap receives it as a fresh allocation would be received.
//!
//! # Slabs for a long list
//!
//! A burst that fills the list to thousands of blocks has them freed, as receivers drain
//! it, by pops on every thread at once: each free took the arena lock of the thread that
//! allocated the block, and two draining workers collided there and slept. Once the
//! list holds `SLAB_AFTER` blocks, new ones are carved from 32 KiB slabs (`super::slab`),
//! where a free is one atomic decrement. Only a block allocated alone is kept in
//! `cache`: a carved one would hold its whole slab for as long as the list lives. The
//! slab a block came from is written into it before it is published, so its free (after
//! every access, as above) finds it.
//!
//! # Waiting, and `Busy`
//!
//! A thread can only look at a slot after claiming it: before, nothing keeps the block
//! alive. And a claimed position cannot be handed back (indices only move forward). So
//! where a pop finds a claimed slot not yet written it waits, and so does a push that
//! finds the tail on a boundary. Both waits are on a push that is between two adjacent
//! steps of its own, with no loop, lock, allocation or wait between them:
//!
//! * a push on a boundary waits for the installer between its claim CAS and its
//!   `fetch_add` over the boundary: two stores (`next`, `tail.block`) in between, the
//!   new block having been allocated before the claim;
//! * a pop of a claimed, unwritten slot waits for its push between its claim CAS and
//!   its `WRITE` RMW: a move of the value in between (and, for an installer, the two
//!   stores and the `fetch_add`).
//!
//! So the wait is a few instructions long unless that thread is preempted in between;
//! the backoff spins a few rounds and then yields the core, so a preempted partner can
//! finish. No wait is on a pop. Where the waited-for step is a pop's (the head on a
//! boundary), or would come before the claim, `try_pop` returns `Busy` instead of
//! waiting: the first block not yet in `head.block`, the installer not yet past the
//! boundary, another pop moving `head`.
//!
//! # Memory ordering contract
//!
//! The channel pairs each operation with a `fence(SeqCst)` against a flag of its own
//! (store buffering, Dekker's pattern): a producer does `try_push; fence(SeqCst); load
//! waiters-flag`, a waiter does `store waiters-flag; fence(SeqCst); is_empty()` (or
//! `try_pop()`). Either the producer sees the flag, or the waiter sees the push. This
//! holds because a push's claim is an RMW of `tail`'s index, sequenced before the
//! producer's fence, and `is_empty` and `try_pop` (without the head mark) load that
//! index after the waiter's fence: if the producer's fence comes first in the SeqCst
//! order, the load sees the claim or a later value. With the head mark set `try_pop`
//! does not load `tail`, but then a claimed position exists and it cannot report
//! `Empty`. A waiter must not sleep on `Busy`: the thread it waits for may be a pop,
//! or a push other than the one whose value it waits for, which has already looked at
//! the flag.
//!
//! Inside the list: index loads are Acquire, and the index RMWs and stores SeqCst (a
//! Release that publishes the block pointer and `next` stored before them; SeqCst also
//! puts them in one order with the loads of `len` and `is_empty`). Slot states: `WRITE`
//! is Release and its loads Acquire (the value is visible to the pop); `READ` and
//! `DESTROY` are AcqRel (every use happens before the free). Block pointers and `next`
//! are stored Release and loaded Acquire (the block's zeroed contents are visible).
//!
//! Under `cfg(loom)` a block holds 2 values, so the models cross boundaries and free
//! blocks within a few operations, and `Block::free` checks instead of freeing: loom
//! then fails a model that leaks a block, frees one twice, uses one after its free, or
//! frees one while another thread's access to it does not happen before the free.

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};

use crossbeam_utils::CachePadded;

#[cfg(not(loom))]
use super::slab::{Slab, Slabs};
use super::{move_out_of, Backoff};

use crate::base::{AtomicPtr, AtomicUsize, UnsafeCell};

/// Values per block.
#[cfg(not(loom))]
const BLOCK_CAP: usize = 31;
/// Small enough that loom models cross boundaries and free blocks.
#[cfg(loom)]
const BLOCK_CAP: usize = 2;
/// Positions per block: its values and the boundary.
const LAP: usize = BLOCK_CAP + 1;

/// The index word holds the position above this many bits.
const SHIFT: usize = 1;
/// One position in an index word.
const ONE: usize = 1 << SHIFT;
/// On `tail`: closed. On `head`: the head block is fully claimed and its `next` linked.
const MARK: usize = 1;

// Each state bit is set once, by one thread (the slot's push, its pop, the one
// destroyer that reaches it), so adding a bit sets it as `fetch_or` would: the RMWs
// whose old value is read add, one `lock xadd` on x86 where a `fetch_or` whose result
// is used is a CAS loop (27% of a pop's samples, four threads popping).

/// Slot state: the push is done with the slot.
const WRITE: usize = 1;
/// Slot state: the pop is done with the slot.
const READ: usize = 2;
/// Slot state: the block's destroyer stopped here; the pop carries on.
const DESTROY: usize = 4;

/// The number of value positions before `pos` (boundaries skipped): a boundary counts
/// as the start of the next block.
#[inline]
fn values_before(pos: usize) -> usize {
    pos / LAP * BLOCK_CAP + (pos % LAP).min(BLOCK_CAP)
}

/// Waits for a claimed slot's `WRITE`: its push is between its claim and its `WRITE`
/// (module doc, "Waiting").
#[cold]
#[inline(never)]
fn wait_written<T>(slot: &Slot<T>) {
    let mut backoff = Backoff::new();
    while slot.state.load(Acquire) & WRITE == 0 {
        backoff.snooze();
    }
}

/// What `try_pop` found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pop<T> {
    /// The oldest value.
    Value(T),
    /// Nothing pushed and unread.
    Empty,
    /// A push has claimed the next position but not yet written it (or is installing
    /// the next block), or another pop is moving the head to the next block; the value
    /// will be there within nanoseconds unless that thread is preempted. Not drained:
    /// retry, do not sleep on it (no push may be left to wake a sleeper).
    Busy,
}

struct Slot<T> {
    value: UnsafeCell<MaybeUninit<T>>,
    /// `WRITE | READ | DESTROY` bits.
    state: AtomicUsize,
}

struct Block<T> {
    /// The next block, linked by the installer of this block's last slot.
    next: AtomicPtr<Block<T>>,
    slots: [Slot<T>; BLOCK_CAP],
    /// The slab the block was carved from, or null for a block allocated alone. Written
    /// before the block is published, read by its free.
    #[cfg(not(loom))]
    slab: *mut Slab,
    #[cfg(loom)]
    life: Life,
}

/// Under loom, the checker's view of a block's life (see `Block::free`).
#[cfg(loom)]
struct Life {
    /// Set by `free`; every dereference asserts it unset. A `std` atomic: a detector
    /// outside the protocol, which loom does not see.
    freed: std::sync::atomic::AtomicBool,
    /// Loom's leak tracking: dropped by `free`, so loom fails a model that leaks a
    /// block.
    track: std::mem::ManuallyDrop<loom::alloc::Track<()>>,
}

impl<T> Block<T> {
    /// A new empty block, the caller's until it publishes the pointer.
    #[cfg(not(loom))]
    fn alloc() -> NonNull<Block<T>> {
        // SAFETY: all-zero bytes are a valid empty block: a null `next`, slot states 0
        // (nothing written), values that are `MaybeUninit`, and a null `slab` (allocated
        // alone). Zeroing in place keeps a block of large values off the stack.
        let block = unsafe { Box::<Block<T>>::new_zeroed().assume_init() };
        NonNull::from(Box::leak(block))
    }

    /// A new empty block, the caller's until it publishes the pointer.
    #[cfg(loom)]
    fn alloc() -> NonNull<Block<T>> {
        let block = Box::new(Block {
            next: AtomicPtr::new(ptr::null_mut()),
            slots: std::array::from_fn(|_| Slot {
                value: UnsafeCell::new(MaybeUninit::uninit()),
                state: AtomicUsize::new(0),
            }),
            life: Life {
                freed: std::sync::atomic::AtomicBool::new(false),
                track: std::mem::ManuallyDrop::new(loom::alloc::Track::new(())),
            },
        });
        NonNull::from(Box::leak(block))
    }

    /// The block behind `this`.
    ///
    /// # Safety
    ///
    /// `this` came from [`Block::alloc`] and is not freed while the reference lives.
    unsafe fn get<'a>(this: *mut Block<T>) -> &'a Block<T> {
        // SAFETY: the caller's contract.
        let block = unsafe { &*this };
        #[cfg(loom)]
        assert!(!block.life.freed.load(Relaxed), "block used after its free");
        block
    }

    /// Frees `this` without dropping any value in it.
    ///
    /// # Safety
    ///
    /// `this` came from [`Block::alloc`], is freed only this once, and every access any
    /// thread makes to it happens before this call.
    #[cfg(not(loom))]
    unsafe fn free(this: *mut Block<T>) {
        // SAFETY: the caller's contract: the block is ours alone.
        let slab = unsafe { (*this).slab };
        if slab.is_null() {
            // SAFETY: the caller's contract; `alloc` made it from a `Box`.
            drop(unsafe { Box::from_raw(this) });
        } else {
            // SAFETY: carved from `slab` by `Blocks::alloc` (a `Slabs<Block<T>>`) and
            // freed this once (the caller's contract), every use before.
            unsafe { Slabs::<Block<T>>::release(slab, 1) };
        }
    }

    /// Under loom, checks the contract instead of freeing: the block is marked freed
    /// (a second free, or a use through [`Block::get`] afterwards, fails), every
    /// location in it is accessed mutably (loom fails the model if an access by
    /// another thread does not happen before, or comes after, this), and its leak
    /// tracking ends. The memory is kept, so that a faulty protocol fails an assertion
    /// instead of reading freed memory.
    ///
    /// # Safety
    ///
    /// As for the real one.
    #[cfg(loom)]
    unsafe fn free(this: *mut Block<T>) {
        // SAFETY: the caller's contract: nobody else uses the block any more (loom
        // runs one thread at a time, so a faulty caller is caught below, not raced).
        let block = unsafe { &mut *this };
        assert!(!block.life.freed.swap(true, Relaxed), "block freed twice");
        block.next.with_mut(|_| ());
        for slot in &mut block.slots {
            slot.state.with_mut(|_| ());
            slot.value.with_mut(|_| ());
        }
        // SAFETY: dropped once: the flag above.
        unsafe { std::mem::ManuallyDrop::drop(&mut block.life.track) };
    }

    /// Makes a block nobody else uses any more empty again: a null `next`, every slot
    /// state 0, no value (as [`Block::alloc`] makes it).
    ///
    /// # Safety
    ///
    /// As for [`Block::free`]: every access any thread makes to it happens before this
    /// call, and the caller owns it.
    unsafe fn clear(this: *mut Block<T>) {
        // SAFETY: the caller's contract: ours alone.
        let block = unsafe { &mut *this };
        #[cfg(loom)]
        {
            // As `free`: loom fails the model if another thread's access to the block
            // does not happen before this one.
            assert!(
                !block.life.freed.load(Relaxed),
                "block cleared after its free"
            );
            block.next.with_mut(|_| ());
            for slot in &mut block.slots {
                // The states too: an RMW or load of a state by a thread whose access
                // is not ordered before the clearing would otherwise go unnoticed
                // (atomic accesses do not race), and its bit outlive the clearing.
                slot.state.with_mut(|_| ());
                slot.value.with_mut(|_| ());
            }
        }
        block.next.store(ptr::null_mut(), Relaxed);
        for slot in &block.slots {
            slot.state.store(0, Relaxed);
        }
    }

    /// Carries the destruction of `this` on from slot `start`: stops at the first slot
    /// whose pop is not done (leaving `DESTROY` there, so that pop carries on), and frees
    /// the block if there is none.
    ///
    /// # Safety
    ///
    /// The caller holds the destruction: it popped the block's last slot, or it set
    /// `READ` on slot `start - 1` and found `DESTROY` there. It does not touch the block
    /// afterwards.
    #[inline(never)]
    unsafe fn destroy(this: *mut Block<T>, start: usize, blocks: &Blocks<T>) {
        // The last slot is not checked: its pop started the destruction.
        for i in start..BLOCK_CAP - 1 {
            // SAFETY: the block is alive until the destruction frees it, which is this
            // call or a later one in the chain; slot `i`'s pop cannot take the chain
            // over before our `DESTROY` RMW.
            let state = unsafe { &Block::get(this).slots[i].state };
            if state.load(Acquire) & READ == 0 && state.fetch_add(DESTROY, AcqRel) & READ == 0 {
                // Slot `i`'s pop is still at it; it sees `DESTROY` and carries on.
                return;
            }
        }
        // SAFETY: every slot's pop is done and was acquired above or by those before us
        // in the chain; pushes were done before their pops; `head` and `tail` have moved
        // past the block (module doc).
        unsafe { Block::recycle(this, blocks) };
    }

    /// Whether `this` was carved from a slab (the caller owns it).
    fn is_carved(this: *mut Block<T>) -> bool {
        #[cfg(not(loom))]
        {
            // SAFETY: `recycle`'s contract: the block is the caller's alone.
            !unsafe { (*this).slab }.is_null()
        }
        #[cfg(loom)]
        {
            let _ = this;
            false
        }
    }

    /// Keeps an unused block allocated alone in the list's `cache` for the next push
    /// that needs one, or frees it if a block is kept already or it was carved.
    ///
    /// # Safety
    ///
    /// As for [`Block::free`]; the block is one of `blocks`' list.
    unsafe fn recycle(this: *mut Block<T>, blocks: &Blocks<T>) {
        // A carved block is not kept: it would keep its whole slab alive for as long as
        // the list lives (found in review: a drained list in a steady flow held two or
        // three slabs through the kept block and the tail's, swapping roles).
        if Block::is_carved(this) {
            // SAFETY: the caller's contract; not published.
            unsafe { blocks.free(this) };
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { Block::clear(this) };
        // Release: the taker sees the cleared block.
        if blocks
            .cache
            .compare_exchange(ptr::null_mut(), this, Release, Relaxed)
            .is_err()
        {
            // SAFETY: the caller's contract; not published.
            unsafe { blocks.free(this) };
        }
    }
}

/// Where a list's blocks come from and go back to: the one cleared block kept for reuse
/// (see "One block kept for reuse"), and, once the list holds [`SLAB_AFTER`] blocks,
/// blocks carved from slabs (see `super::slab`) instead of allocated one by one.
struct Blocks<T> {
    cache: AtomicPtr<Block<T>>,
    /// Blocks allocated and not freed (the kept one included).
    #[cfg(not(loom))]
    live: std::sync::atomic::AtomicUsize,
    #[cfg(not(loom))]
    slabs: Slabs<Block<T>>,
}

/// Live blocks (about 31 values each) from which a list carves its new blocks from
/// slabs: a list that stays shorter never holds a slab.
#[cfg(not(loom))]
const SLAB_AFTER: usize = 16;

impl<T> Blocks<T> {
    fn new() -> Blocks<T> {
        Blocks {
            cache: AtomicPtr::new(ptr::null_mut()),
            #[cfg(not(loom))]
            live: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(not(loom))]
            slabs: Slabs::new(),
        }
    }

    /// The kept block, else a new one: the caller's alone until it publishes it.
    fn take(&self) -> NonNull<Block<T>> {
        // Acquire: the recycler's clearing is seen; the swap makes it ours alone.
        NonNull::new(self.cache.swap(ptr::null_mut(), Acquire)).unwrap_or_else(|| self.alloc())
    }

    #[cfg(loom)]
    fn alloc(&self) -> NonNull<Block<T>> {
        Block::alloc()
    }

    #[cfg(not(loom))]
    fn alloc(&self) -> NonNull<Block<T>> {
        // Relaxed: a hint of the list's length; a stale count only moves the switch
        // to slabs by a block or two.
        if self.live.fetch_add(1, Relaxed) >= SLAB_AFTER {
            if let Some((block, slab)) = self.slabs.take() {
                // SAFETY: carved just now: zeroed (a valid empty block with a null
                // `slab`, see `Block::alloc`) and ours alone; the field is written
                // before the block is published.
                unsafe { ptr::addr_of_mut!((*block.as_ptr()).slab).write(slab) };
                return block;
            }
        } else {
            // Short again: the rest of the slab being carved is let go.
            self.slabs.retire();
        }
        Block::alloc()
    }

    /// Frees a block of this list.
    ///
    /// # Safety
    ///
    /// As for [`Block::free`].
    unsafe fn free(&self, this: *mut Block<T>) {
        #[cfg(not(loom))]
        self.live.fetch_sub(1, Relaxed);
        // SAFETY: the caller's contract.
        unsafe { Block::free(this) };
    }
}

/// An empty block taken ahead of a claim (from the list's `cache`, else allocated) and
/// not (yet) published; given back if unused.
struct Spare<'a, T> {
    block: Option<NonNull<Block<T>>>,
    blocks: &'a Blocks<T>,
}

impl<T> Spare<'_, T> {
    fn get(&mut self) -> NonNull<Block<T>> {
        let blocks = self.blocks;
        *self.block.get_or_insert_with(|| blocks.take())
    }

    /// Hands the block over to the list.
    fn publish(&mut self) -> *mut Block<T> {
        let block = self.get().as_ptr();
        self.block = None;
        block
    }
}

impl<T> Drop for Spare<'_, T> {
    fn drop(&mut self) {
        if let Some(block) = self.block {
            // SAFETY: never published: no other thread has seen it.
            unsafe { Block::recycle(block.as_ptr(), self.blocks) };
        }
    }
}

/// An index word and the block of its position.
struct Position<T> {
    index: AtomicUsize,
    block: AtomicPtr<Block<T>>,
}

/// A lock-free unbounded MPMC FIFO queue (see the module doc).
pub(crate) struct List<T> {
    head: CachePadded<Position<T>>,
    tail: CachePadded<Position<T>>,
    /// Where blocks come from: a cleared block kept for reuse, or null (see "One block
    /// kept for reuse"), and the slabs of a long list.
    blocks: CachePadded<Blocks<T>>,
    /// The list owns and drops values of `T`.
    _values: PhantomData<T>,
}

// SAFETY: values move between threads through the list (pushed on one, popped or
// dropped on another), so `T: Send` is needed and enough: the list never hands out a
// `&T`. Everything shared is atomic, or a slot that one thread owns at a time by the
// protocol of the module doc.
unsafe impl<T: Send> Send for List<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for List<T> {}

impl<T> List<T> {
    /// An empty list; the first push allocates the first block.
    pub(crate) fn new() -> List<T> {
        let position = || Position {
            index: AtomicUsize::new(0),
            block: AtomicPtr::new(ptr::null_mut()),
        };
        List {
            head: CachePadded::new(position()),
            tail: CachePadded::new(position()),
            blocks: CachePadded::new(Blocks::new()),
            _values: PhantomData,
        }
    }

    /// Appends `value`; `Err(value)` only when closed.
    pub(crate) fn try_push(&self, value: T) -> Result<(), T> {
        let mut src = Some(value);
        if self.try_push_from(&mut src) {
            Ok(())
        } else {
            Err(src.expect("left in place by a failed push"))
        }
    }

    /// [`try_push`](Self::try_push) of the value in `src`, copied straight from there
    /// into its slot (`src` is then `None`); `false`, `src` untouched, only when closed.
    /// One copy of the value: handed down by value through the inlined layers above,
    /// a large one was copied between places in one stack frame, where a copy whose
    /// destination lies a few bytes past a 4 KiB multiple above its source runs many
    /// times slower on some CPUs (see `chan/ops.rs`, `Held`).
    ///
    /// Panics if `src` is `None`.
    ///
    /// Inlined for its common case (the list open, a slot of the tail block that is not
    /// its last one, the claim won at the first try): the steps of the module doc that
    /// case skips are in [`try_push_slow`](Self::try_push_slow). Out of line, the two
    /// calls and their register saves were a third of a push's instructions.
    #[inline]
    pub(crate) fn try_push_from(&self, src: &mut Option<T>) -> bool {
        assert!(src.is_some(), "push of a value already gone");
        let tail = self.tail.index.load(Acquire);
        let block = self.tail.block.load(Acquire);
        let offset = (tail >> SHIFT) % LAP;
        if tail & MARK == 0
            && offset + 1 < BLOCK_CAP
            && !block.is_null()
            && self
                .tail
                .index
                .compare_exchange_weak(tail, tail + ONE, SeqCst, Acquire)
                .is_ok()
        {
            // SAFETY: the claim proves `block` is our position's block (module doc),
            // alive until our slot's pop is done, which is after our `WRITE`.
            unsafe { Self::write_from(block, offset, src) };
            return true;
        }
        self.try_push_slow(src)
    }

    /// Moves the value in `src` into slot `offset` of `block` (`src` is left `None`)
    /// and sets the slot's `WRITE` bit: a push's last step, and its last access to the
    /// block.
    ///
    /// # Safety
    ///
    /// The caller claimed slot `offset` of `block` (alive until that slot's pop is
    /// done, which waits for the `WRITE` set here), and `src` holds a value.
    #[inline]
    unsafe fn write_from(block: *mut Block<T>, offset: usize, src: &mut Option<T>) {
        // SAFETY: the caller's contract.
        let slot = unsafe { &Block::get(block).slots[offset] };
        // SAFETY: the slot is ours to write until our `WRITE`, and empty; `src` holds a
        // value (the caller's contract) and is a distinct place.
        slot.value
            .with_mut(|v| unsafe { move_out_of(src, v.cast::<T>()) });
        // Our last access: from here on the block may be freed.
        slot.state.fetch_or(WRITE, Release);
    }

    /// [`try_push`](Self::try_push) where its common case does not hold: the whole
    /// protocol of the module doc.
    #[inline(never)]
    fn try_push_slow(&self, src: &mut Option<T>) -> bool {
        let mut backoff = Backoff::new();
        let mut spare = Spare {
            block: None,
            blocks: &self.blocks,
        };
        let mut tail = self.tail.index.load(Acquire);
        let mut block = self.tail.block.load(Acquire);
        loop {
            if tail & MARK != 0 {
                return false;
            }
            let offset = (tail >> SHIFT) % LAP;
            if offset == BLOCK_CAP {
                // The installer is between its claim and its step over the boundary.
                backoff.snooze();
                tail = self.tail.index.load(Acquire);
                block = self.tail.block.load(Acquire);
                continue;
            }
            if offset + 1 == BLOCK_CAP {
                // We may become the installer: allocate now, so that nobody waits on
                // an allocation between our claim and our step over the boundary.
                spare.get();
            }
            if block.is_null() {
                let first = spare.publish();
                match self
                    .tail
                    .block
                    .compare_exchange(ptr::null_mut(), first, Release, Acquire)
                {
                    Ok(_) => {
                        // Pops report `Busy` until this store.
                        self.head.block.store(first, Release);
                        block = first;
                    }
                    Err(current) => {
                        // SAFETY: the CAS failed: `first` was never published.
                        spare.block = Some(unsafe { NonNull::new_unchecked(first) });
                        block = current;
                    }
                }
            }
            match self
                .tail
                .index
                .compare_exchange_weak(tail, tail + ONE, SeqCst, Acquire)
            {
                Ok(_) => {
                    if offset + 1 == BLOCK_CAP {
                        // SAFETY: the claim proves `block` is our position's block,
                        // alive until our slot's pop is done, which is after our
                        // `WRITE`.
                        let installed = unsafe { Block::get(block) };
                        let next = spare.publish();
                        installed.next.store(next, Release);
                        self.tail.block.store(next, Release);
                        self.tail.index.fetch_add(ONE, SeqCst);
                    }
                    // SAFETY: as above: we claimed slot `offset` of `block`.
                    unsafe { Self::write_from(block, offset, src) };
                    return true;
                }
                Err(current) => {
                    tail = current;
                    block = self.tail.block.load(Acquire);
                    // Another push won the line: retrying at once only pulls it back
                    // before the winner has used it.
                    backoff.spin();
                }
            }
        }
    }

    /// Takes the oldest value, if there is one to take now.
    #[cfg(test)]
    pub(crate) fn try_pop(&self) -> Pop<T> {
        let mut out = MaybeUninit::uninit();
        match self.try_pop_into(&mut out) {
            // SAFETY: `Value` says the value was moved into `out`.
            Pop::Value(()) => Pop::Value(unsafe { out.assume_init() }),
            Pop::Empty => Pop::Empty,
            Pop::Busy => Pop::Busy,
        }
    }

    /// [`try_pop`](Self::try_pop) that moves the value into `out` (`Value(())`: `out`
    /// now holds it, the caller's to take): one copy, as
    /// [`try_push_from`](Self::try_push_from).
    ///
    /// Inlined for its common case (a slot of the head block that is not its last
    /// one, the claim won at the first try), as [`try_push`](Self::try_push) is; the
    /// rest is [`try_pop_slow`](Self::try_pop_slow).
    #[inline]
    pub(crate) fn try_pop_into(&self, out: &mut MaybeUninit<T>) -> Pop<()> {
        let head = self.head.index.load(Acquire);
        let offset = (head >> SHIFT) % LAP;
        if offset + 1 < BLOCK_CAP {
            let new_head = match self.head_claim(head) {
                Ok(h) => h,
                Err(empty_or_busy) => return empty_or_busy,
            };
            let block = self.head.block.load(Acquire);
            if !block.is_null()
                && self
                    .head
                    .index
                    .compare_exchange_weak(head, new_head, SeqCst, Acquire)
                    .is_ok()
            {
                // SAFETY: we claimed `offset` of `block` (the claim validates the
                // pointer), not the block's last slot.
                unsafe { self.take_into(block, offset, new_head, out) };
                return Pop::Value(());
            }
        }
        self.try_pop_slow(out)
    }

    /// The head index a pop of `head` (not on a boundary) claims, from a look at
    /// `tail` unless the head mark makes it needless: with the mark set if `tail` has
    /// left the block. `Err` when the pop must not claim: nothing pushed (`Empty`), or
    /// the block's last slot while `next` may not be linked yet (`Busy`).
    #[inline(always)]
    fn head_claim(&self, head: usize) -> Result<usize, Pop<()>> {
        let pos = head >> SHIFT;
        let mut new_head = head + ONE;
        if head & MARK == 0 {
            let tail = self.tail.index.load(Acquire) >> SHIFT;
            // `<=`: with the head mark a pop can move `head` over the boundary before
            // the installer moves `tail`; both then mean the same.
            if values_before(tail) <= values_before(pos) {
                return Err(Pop::Empty);
            }
            if tail / LAP != pos / LAP {
                // The installer has stepped `tail` out of our block: every slot is
                // claimed and `next` is linked (stored before that step).
                new_head |= MARK;
            } else if pos % LAP + 1 == BLOCK_CAP {
                // `tail` is on the boundary: `next` may not be linked yet.
                return Err(Pop::Busy);
            }
        }
        Ok(new_head)
    }

    /// [`try_pop`](Self::try_pop) where its common case does not hold: the whole
    /// protocol of the module doc.
    #[inline(never)]
    fn try_pop_slow(&self, out: &mut MaybeUninit<T>) -> Pop<()> {
        let mut head = self.head.index.load(Acquire);
        let mut contention = Backoff::new();
        loop {
            let pos = head >> SHIFT;
            let offset = pos % LAP;
            if offset == BLOCK_CAP {
                // Another pop is moving `head` to the next block.
                let tail = self.tail.index.load(Acquire);
                return if values_before(tail >> SHIFT) > values_before(pos) {
                    Pop::Busy
                } else {
                    Pop::Empty
                };
            }
            let new_head = match self.head_claim(head) {
                Ok(h) => h,
                Err(empty_or_busy) => return empty_or_busy,
            };
            let block = self.head.block.load(Acquire);
            if block.is_null() {
                // The first push is between publishing the first block in `tail` and
                // in `head`.
                return Pop::Busy;
            }
            match self
                .head
                .index
                .compare_exchange_weak(head, new_head, SeqCst, Acquire)
            {
                Ok(_) => {
                    // SAFETY: we claimed `offset` of `block` (the claim validates the
                    // pointer) from an index in which `next` was known linked if
                    // `offset` is the last slot.
                    unsafe { self.take_into(block, offset, new_head, out) };
                    return Pop::Value(());
                }
                Err(current) => {
                    head = current;
                    // As a push's lost claim.
                    contention.spin();
                }
            }
        }
    }

    /// Finishes a pop: moves `head` over the boundary if the claimed slot is the last of
    /// its block, moves the value into `out`, and gives the slot up.
    ///
    /// # Safety
    ///
    /// The caller claimed slot `offset` of `block` with a CAS that set the head index to
    /// `new_head`, and, if that is the last slot, knew `block.next` linked (the claim
    /// acquired its store).
    #[inline]
    unsafe fn take_into(
        &self,
        block: *mut Block<T>,
        offset: usize,
        new_head: usize,
        out: &mut MaybeUninit<T>,
    ) {
        // SAFETY: the block stays alive until our slot is given up below (on the last
        // slot, until we free it).
        let slot = unsafe { &Block::get(block).slots[offset] };
        if offset + 1 == BLOCK_CAP {
            // SAFETY: the caller's contract.
            unsafe { self.move_head(block, new_head) };
        }
        if slot.state.load(Acquire) & WRITE == 0 {
            wait_written(slot);
        }
        slot.value.with_mut(|v| {
            // SAFETY: `WRITE` (acquired) says the value is there; the slot is ours to
            // read, once; `out` is a distinct place (a `&mut`), and the slot counts as
            // empty from here on, so the value has one owner: `out`'s.
            unsafe { ptr::copy_nonoverlapping(v.cast_const(), out, 1) }
        });
        if offset + 1 == BLOCK_CAP {
            // SAFETY: we popped the last slot: the destruction is ours.
            unsafe { Block::destroy(block, 0, &self.blocks) };
        } else if slot.state.fetch_add(READ, AcqRel) & DESTROY != 0 {
            // SAFETY: the destroyer stopped at our slot: the destruction is ours.
            unsafe { Block::destroy(block, offset + 1, &self.blocks) };
        }
    }

    /// Moves `head` over the boundary after `block`, whose last slot the caller
    /// claimed.
    ///
    /// # Safety
    ///
    /// As for [`take_into`](Self::take_into) of the last slot: the claim set the head
    /// index to `new_head` and acquired the link of `block.next`; `block` is alive.
    #[inline(never)]
    unsafe fn move_head(&self, block: *mut Block<T>, new_head: usize) {
        // SAFETY: the caller's contract.
        let next = unsafe { Block::get(block) }.next.load(Acquire);
        assert!(
            !next.is_null(),
            "last slot claimed before `next` was linked"
        );
        let mut index = (new_head & !MARK) + ONE;
        // SAFETY: no slot of `next` is claimed before we store the index below: it is
        // alive.
        if !unsafe { Block::get(next) }.next.load(Acquire).is_null() {
            index |= MARK;
        }
        // The index rests on the boundary: nobody else writes `head` until this store.
        self.head.block.store(next, Release);
        self.head.index.store(index, SeqCst);
    }

    /// Marks the list closed: later pushes fail; values pushed before can still be
    /// popped. `true` for the call that marked it.
    pub(crate) fn close(&self) -> bool {
        self.tail.index.fetch_or(MARK, SeqCst) & MARK == 0
    }

    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        self.tail.index.load(SeqCst) & MARK != 0
    }

    /// No position claimed and unread: a push in progress counts as not empty.
    pub(crate) fn is_empty(&self) -> bool {
        // `head` first: its count never passes `tail`'s, so if the later load of `tail`
        // shows no more, the two were equal when `head` was read.
        let head = self.head.index.load(SeqCst) >> SHIFT;
        let tail = self.tail.index.load(SeqCst) >> SHIFT;
        values_before(tail) <= values_before(head)
    }

    /// The number of positions claimed and unread (pushes in progress included), at one
    /// moment.
    pub(crate) fn len(&self) -> usize {
        loop {
            let tail = self.tail.index.load(SeqCst);
            let head = self.head.index.load(SeqCst);
            // `tail` unchanged around the load of `head`: both held when it was read.
            if self.tail.index.load(SeqCst) == tail {
                return values_before(tail >> SHIFT).saturating_sub(values_before(head >> SHIFT));
            }
        }
    }
}

/// Frees a chain of blocks from the one it holds, values left in place: on every exit
/// of `List::drop`, an unwinding one included.
struct Chain<T>(*mut Block<T>);

impl<T> Drop for Chain<T> {
    fn drop(&mut self) {
        while !self.0.is_null() {
            // SAFETY: `List::drop` hands over blocks that only it can reach now.
            unsafe {
                let next = Block::get(self.0).next.load(Relaxed);
                Block::free(self.0);
                self.0 = next;
            }
        }
    }
}

impl<T> Drop for List<T> {
    /// Drops the values left, oldest first, and frees every block. If a value's drop
    /// panics, the values after it are leaked (never dropped) and the blocks still
    /// freed.
    fn drop(&mut self) {
        // `&mut self`: every operation has finished and was acquired by whoever handed
        // us the list, so Relaxed loads see everything.
        let mut pos = self.head.index.load(Relaxed) >> SHIFT;
        let end = self.tail.index.load(Relaxed) >> SHIFT;
        // The blocks before `head.block` were freed by their pops; nothing is claimed
        // and half-done, so no destruction is in progress.
        let cached = self.blocks.cache.swap(ptr::null_mut(), Relaxed);
        if !cached.is_null() {
            // SAFETY: a cleared block nobody else can reach any more.
            unsafe { Block::free(cached) };
        }
        let mut chain = Chain(self.head.block.load(Relaxed));
        while values_before(pos) < values_before(end) {
            let offset = pos % LAP;
            if offset == BLOCK_CAP {
                // SAFETY: `chain.0` is the block of `pos`, ours alone; the next one
                // holds the next lap (linked before the installer's step, which `end`
                // is past).
                unsafe {
                    let next = Block::get(chain.0).next.load(Relaxed);
                    Block::free(chain.0);
                    chain.0 = next;
                }
            } else {
                // SAFETY: positions `head..tail` were written by finished pushes and
                // never popped; each is dropped once (a drop that unwinds ends the
                // loop, and `chain` frees the blocks without touching the values).
                unsafe {
                    Block::get(chain.0).slots[offset]
                        .value
                        .with_mut(|v| (*v).assume_init_drop());
                }
            }
            pos += 1;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A block whose values were all popped is kept, cleared, and taken again by the
    /// next push that needs a block: a steady flow allocates no block.
    #[test]
    fn a_used_up_block_is_kept_and_taken_again() {
        let list = List::new();
        for v in 0..BLOCK_CAP {
            list.try_push(v).unwrap();
        }
        assert!(list.blocks.cache.load(Relaxed).is_null());
        for v in 0..BLOCK_CAP {
            assert_eq!(list.try_pop(), Pop::Value(v));
        }
        let kept = list.blocks.cache.load(Relaxed);
        assert!(!kept.is_null(), "the first block is kept");
        // SAFETY: the kept block is alive (owned by the list) and nobody uses it.
        let block = unsafe { Block::get(kept) };
        assert!(
            block.next.load(Relaxed).is_null(),
            "kept with a stale `next`"
        );
        for (i, slot) in block.slots.iter().enumerate() {
            assert_eq!(
                slot.state.load(Relaxed),
                0,
                "slot {i} kept with a stale state"
            );
        }
        // The second block was installed with the first push past the first one's last
        // slot; the third takes the kept block.
        for v in 0..2 * BLOCK_CAP {
            list.try_push(v).unwrap();
        }
        assert!(
            list.blocks.cache.load(Relaxed).is_null(),
            "the kept block was taken"
        );
        for v in 0..2 * BLOCK_CAP {
            assert_eq!(list.try_pop(), Pop::Value(v));
        }
        assert_eq!(list.try_pop(), Pop::Empty);
    }
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Pops until a value comes, retrying on `Empty` and `Busy`.
    fn pop_wait<T>(list: &List<T>) -> T {
        loop {
            match list.try_pop() {
                Pop::Value(v) => return v,
                Pop::Empty | Pop::Busy => std::thread::yield_now(),
            }
        }
    }

    #[test]
    fn fifo_across_many_blocks() {
        let list = List::new();
        assert_eq!(list.try_pop(), Pop::Empty);
        let n = BLOCK_CAP * 10 + 7;
        for i in 0..n {
            list.try_push(i).unwrap();
        }
        for i in 0..n {
            assert_eq!(list.try_pop(), Pop::Value(i));
        }
        assert_eq!(list.try_pop(), Pop::Empty);
        // Interleaved, with the head chasing the tail over boundaries.
        let mut next_out = 0;
        for i in 0..n * 3 {
            list.try_push(i).unwrap();
            if i % 3 != 0 {
                assert_eq!(list.try_pop(), Pop::Value(next_out));
                next_out += 1;
            }
        }
        while let Pop::Value(v) = list.try_pop() {
            assert_eq!(v, next_out);
            next_out += 1;
        }
        assert_eq!(next_out, n * 3);
    }

    #[test]
    fn close_semantics() {
        let list = List::new();
        for i in 0..BLOCK_CAP + 3 {
            list.try_push(i).unwrap();
        }
        assert!(!list.is_closed());
        assert!(list.close());
        assert!(!list.close(), "only the first close marks it");
        assert!(list.is_closed());
        assert_eq!(list.try_push(99), Err(99));
        assert_eq!(list.len(), BLOCK_CAP + 3);
        for i in 0..BLOCK_CAP + 3 {
            assert_eq!(list.try_pop(), Pop::Value(i));
        }
        assert_eq!(list.try_pop(), Pop::Empty);
        assert!(list.is_empty() && list.is_closed());
        assert_eq!(list.try_push(100), Err(100));

        // Closed on a boundary: the mark survives the installer's step.
        let list = List::new();
        for i in 0..BLOCK_CAP {
            list.try_push(i).unwrap();
        }
        list.close();
        assert!(list.is_closed());
        assert_eq!(list.len(), BLOCK_CAP);

        // Closed before anything was pushed.
        let list = List::<String>::new();
        assert!(list.close());
        assert_eq!(list.try_push("x".into()), Err("x".into()));
        assert_eq!(list.try_pop(), Pop::Empty);
    }

    /// Counts its drops in a shared table.
    struct Counted {
        id: usize,
        drops: Arc<Vec<StdAtomicUsize>>,
        panic_on_drop: bool,
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.drops[self.id].fetch_add(1, Relaxed);
            if self.panic_on_drop {
                panic!("drop of {}", self.id);
            }
        }
    }

    fn table(n: usize) -> Arc<Vec<StdAtomicUsize>> {
        Arc::new((0..n).map(|_| StdAtomicUsize::new(0)).collect())
    }

    /// A list of `n` counted values (ids `0..n`, counting into `drops`); the one with
    /// id `bad` panics when dropped.
    fn counted_list(
        n: usize,
        drops: &Arc<Vec<StdAtomicUsize>>,
        bad: Option<usize>,
    ) -> List<Counted> {
        let list = List::new();
        for id in 0..n {
            let drops = drops.clone();
            assert!(list
                .try_push(Counted {
                    id,
                    drops,
                    panic_on_drop: Some(id) == bad
                })
                .is_ok());
        }
        list
    }

    #[test]
    fn drop_drops_what_is_left_exactly_once() {
        let n = BLOCK_CAP * 4 + 5;
        let drops = table(n);
        let list = counted_list(n, &drops, None);
        // Pop past the first boundary so the list starts mid-block.
        for id in 0..BLOCK_CAP + 2 {
            match list.try_pop() {
                Pop::Value(c) => assert_eq!(c.id, id),
                _ => panic!("value {id} missing"),
            }
        }
        assert!(drops
            .iter()
            .take(BLOCK_CAP + 2)
            .all(|d| d.load(Relaxed) == 1));
        assert!(drops
            .iter()
            .skip(BLOCK_CAP + 2)
            .all(|d| d.load(Relaxed) == 0));
        drop(list);
        assert!(drops.iter().all(|d| d.load(Relaxed) == 1));
        // An empty list that once held values, and one that never did.
        let list = List::new();
        list.try_push(1).unwrap();
        assert_eq!(list.try_pop(), Pop::Value(1));
        drop(list);
        drop(List::<u8>::new());
    }

    #[test]
    fn panicking_value_drop_leaks_the_rest() {
        let n = BLOCK_CAP * 3;
        let bad = BLOCK_CAP + 4;
        let drops = table(n);
        let list = counted_list(n, &drops, Some(bad));
        assert!(catch_unwind(AssertUnwindSafe(|| drop(list))).is_err());
        for (id, d) in drops.iter().enumerate() {
            let expected = usize::from(id <= bad);
            assert_eq!(d.load(Relaxed), expected, "drops of value {id}");
        }
    }

    /// The blocks from the head block on: (allocated alone, carved from a slab).
    fn block_kinds<T>(list: &List<T>) -> (usize, usize) {
        let (mut alone, mut carved) = (0, 0);
        let mut block = list.head.block.load(Acquire);
        while !block.is_null() {
            // SAFETY: the test thread is the list's only user: every block from the head
            // on is alive.
            let b = unsafe { Block::get(block) };
            if b.slab.is_null() {
                alone += 1;
            } else {
                carved += 1;
            }
            block = b.next.load(Acquire);
        }
        (alone, carved)
    }

    /// A list that grows past `SLAB_AFTER` blocks carves the rest from slabs, keeps its
    /// order across them, and once drained holds no more than the kept block.
    #[test]
    fn a_long_list_carves_its_blocks_from_slabs() {
        let list = List::new();
        let blocks = SLAB_AFTER + 150;
        let n = blocks * BLOCK_CAP;
        for v in 0..n {
            list.try_push(v).unwrap();
        }
        let (alone, carved) = block_kinds(&list);
        assert_eq!(alone, SLAB_AFTER, "the first blocks are allocated alone");
        assert!(carved >= blocks - SLAB_AFTER, "{carved} carved");
        for v in 0..n {
            assert_eq!(list.try_pop(), Pop::Value(v));
        }
        assert_eq!(list.try_pop(), Pop::Empty);
        assert!(list.blocks.live.load(Relaxed) <= 2, "blocks left alive");
        // Short again: new blocks are allocated alone; long again: carved again.
        for round in 0..2 {
            for v in 0..n {
                list.try_push(v).unwrap();
            }
            for v in 0..n / 2 {
                assert_eq!(list.try_pop(), Pop::Value(v), "round {round}");
            }
            for v in n / 2..n {
                assert_eq!(list.try_pop(), Pop::Value(v), "round {round}");
            }
        }
    }

    /// Values left in carved blocks are dropped with the list, each once; a value whose
    /// drop panics leaks the ones after it and the slabs still go.
    #[test]
    fn dropping_a_long_list_drops_its_values_once() {
        let n = (SLAB_AFTER + 80) * BLOCK_CAP + 7;
        for bad in [None, Some(n - 100)] {
            let drops = table(n);
            let list = counted_list(n, &drops, bad);
            assert!(block_kinds(&list).1 > 0, "nothing carved");
            let popped = (SLAB_AFTER + 3) * BLOCK_CAP + 1;
            for id in 0..popped {
                match list.try_pop() {
                    Pop::Value(c) => assert_eq!(c.id, id),
                    _ => panic!("value {id} missing"),
                }
            }
            let dropped = catch_unwind(AssertUnwindSafe(|| drop(list)));
            assert_eq!(dropped.is_err(), bad.is_some());
            for (id, d) in drops.iter().enumerate() {
                let expected = usize::from(bad.is_none_or(|b| id <= b));
                assert_eq!(d.load(Relaxed), expected, "drops of value {id}");
            }
        }
    }

    /// Blocks of values too large for a slab of 8 are allocated alone however long the
    /// list grows.
    #[test]
    fn blocks_of_large_values_are_never_carved() {
        let list = List::new();
        let n = (SLAB_AFTER + 4) * BLOCK_CAP;
        for v in 0..n {
            list.try_push([v as u8; 2048]).unwrap();
        }
        assert_eq!(block_kinds(&list), (SLAB_AFTER + 4 + 1, 0));
        for v in 0..n {
            assert_eq!(list.try_pop(), Pop::Value([v as u8; 2048]));
        }
    }

    #[test]
    fn len_and_is_empty() {
        let list = List::new();
        assert!(list.is_empty());
        assert_eq!(list.len(), 0);
        for i in 0..BLOCK_CAP * 3 {
            list.try_push(i).unwrap();
            assert_eq!(list.len(), i + 1);
            assert!(!list.is_empty());
        }
        for i in (0..BLOCK_CAP * 3).rev() {
            assert!(matches!(list.try_pop(), Pop::Value(_)));
            assert_eq!(list.len(), i);
            assert_eq!(list.is_empty(), i == 0);
        }
        // Zero-sized values take positions too.
        let list = List::new();
        for _ in 0..BLOCK_CAP + 1 {
            list.try_push(()).unwrap();
        }
        assert_eq!(list.len(), BLOCK_CAP + 1);
    }

    #[test]
    fn mpmc_stress_every_value_exactly_once() {
        const PRODUCERS: usize = 4;
        const CONSUMERS: usize = 4;
        const PER_PRODUCER: usize = 50_000;
        let list = Arc::new(List::new());
        let taken = Arc::new(StdAtomicUsize::new(0));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let list = list.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_PRODUCER {
                        list.try_push((p, i)).unwrap();
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|_| {
                let list = list.clone();
                let taken = taken.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while taken.load(Relaxed) < PRODUCERS * PER_PRODUCER {
                        match list.try_pop() {
                            Pop::Value(v) => {
                                got.push(v);
                                taken.fetch_add(1, Relaxed);
                            }
                            Pop::Empty | Pop::Busy => std::thread::yield_now(),
                        }
                    }
                    got
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let mut seen = vec![vec![false; PER_PRODUCER]; PRODUCERS];
        for c in consumers {
            let got = c.join().unwrap();
            // Each consumer sees each producer's values in push order.
            let mut last = [None; PRODUCERS];
            for (p, i) in got {
                assert!(last[p] < Some(i), "producer {p}: {i} after {:?}", last[p]);
                last[p] = Some(i);
                assert!(!seen[p][i], "({p}, {i}) popped twice");
                seen[p][i] = true;
            }
        }
        assert!(seen.iter().flatten().all(|&s| s), "a value was lost");
        assert_eq!(list.try_pop(), Pop::Empty);
        assert!(list.is_empty());
    }

    #[test]
    fn spsc_million() {
        const N: usize = 1_000_000;
        let start = Instant::now();
        let list = Arc::new(List::new());
        let producer = {
            let list = list.clone();
            std::thread::spawn(move || {
                for i in 0..N {
                    list.try_push(i).unwrap();
                }
                list.close();
            })
        };
        let mut expected = 0;
        loop {
            match list.try_pop() {
                Pop::Value(v) => {
                    assert_eq!(v, expected);
                    expected += 1;
                }
                Pop::Busy => std::hint::spin_loop(),
                Pop::Empty if list.is_closed() && list.is_empty() => break,
                Pop::Empty => std::thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(expected, N);
        // Generous for a loaded machine; about a third of a second here in debug.
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn send_and_sync_for_send_values() {
        fn is_send_sync<S: Send + Sync>() {}
        // `Cell` is `Send` but not `Sync`: the list never shares a value.
        is_send_sync::<List<std::cell::Cell<u8>>>();
    }

    #[test]
    fn values_move_between_threads() {
        let list = Arc::new(List::new());
        let l2 = list.clone();
        std::thread::spawn(move || {
            for i in 0..BLOCK_CAP * 2 {
                l2.try_push(vec![i; 3]).unwrap();
            }
        })
        .join()
        .unwrap();
        for i in 0..BLOCK_CAP * 2 {
            assert_eq!(pop_wait(&list), vec![i; 3]);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::atomic::{fence, AtomicUsize as LoomAtomicUsize};
    use loom::sync::Arc;
    use loom::thread;

    /// Pops once, retrying only while `Busy` (a `Busy` is always followed by progress
    /// of another thread).
    fn pop_settled<T>(list: &List<T>) -> Option<T> {
        loop {
            match list.try_pop() {
                Pop::Value(v) => return Some(v),
                Pop::Empty => return None,
                Pop::Busy => thread::yield_now(),
            }
        }
    }

    /// Pops everything left once every thread has finished.
    fn drain<T>(list: &List<T>) -> Vec<T> {
        let mut out = Vec::new();
        loop {
            match list.try_pop() {
                Pop::Value(v) => out.push(v),
                Pop::Empty => return out,
                Pop::Busy => panic!("Busy with every operation finished"),
            }
        }
    }

    /// A consumer frees (keeps) the first block while two producers fill the next
    /// ones, the third of which takes the kept block again: five values over three
    /// blocks each arrive once, each producer's in order, and the cleared block's reuse
    /// is ordered after every access of its last life.
    #[test]
    fn loom_list_reuses_a_kept_block() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(b.preemption_bound.map_or(2, |n| n.min(2)));
        b.check(|| {
            let list = Arc::new(List::new());
            let a = {
                let list = list.clone();
                thread::spawn(move || {
                    for v in 0..4 {
                        list.try_push(v).unwrap();
                    }
                })
            };
            let b = {
                let list = list.clone();
                thread::spawn(move || list.try_push(10).unwrap())
            };
            let mut got: Vec<i32> = (0..4).filter_map(|_| pop_settled(&list)).collect();
            a.join().unwrap();
            b.join().unwrap();
            got.extend(drain(&list));
            let mut sorted = got.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2, 3, 10], "{got:?}");
            got.retain(|&v| v != 10);
            assert_eq!(got, [0, 1, 2, 3], "one producer's values in order");
        });
    }

    /// Two producers and one consumer, three values over two blocks: each value arrives
    /// exactly once, and each producer's in order.
    #[test]
    fn loom_list_two_producers_one_consumer() {
        loom::model(|| {
            let list = Arc::new(List::new());
            let a = {
                let list = list.clone();
                thread::spawn(move || {
                    list.try_push(10).unwrap();
                    list.try_push(11).unwrap();
                })
            };
            let b = {
                let list = list.clone();
                thread::spawn(move || list.try_push(20).unwrap())
            };
            let mut got: Vec<i32> = (0..2).filter_map(|_| pop_settled(&list)).collect();
            a.join().unwrap();
            b.join().unwrap();
            got.extend(drain(&list));
            let pos = |v| got.iter().position(|&g| g == v).expect("value lost");
            assert_eq!(got.len(), 3, "{got:?}");
            assert!(pos(10) < pos(11), "{got:?}");
            pos(20);
        });
    }

    /// Two consumers (one of them the main thread) race for the two slots of the first
    /// block while the producer fills its last slot and installs the next block: each
    /// value exactly once, and the first block freed exactly once, by whichever
    /// consumer finishes last (loom's allocation tracking fails a double free or a
    /// leak).
    #[test]
    fn loom_list_two_consumers_one_producer() {
        loom::model(|| {
            let list = Arc::new(List::new());
            list.try_push(0).unwrap();
            let producer = {
                let list = list.clone();
                thread::spawn(move || {
                    list.try_push(1).unwrap();
                    list.try_push(2).unwrap();
                })
            };
            let consumer = {
                let list = list.clone();
                thread::spawn(move || pop_settled(&list))
            };
            let mine = pop_settled(&list);
            producer.join().unwrap();
            let theirs = consumer.join().unwrap();
            let mut all: Vec<i32> = mine.into_iter().chain(theirs).collect();
            if let (Some(a), Some(b)) = (mine, theirs) {
                assert_ne!(a, b);
            }
            all.extend(drain(&list));
            all.sort();
            assert_eq!(all, [0, 1, 2]);
        });
    }

    /// `close` racing a push that installs the next block: the push either succeeds
    /// and its value pops, or fails with the value back; the mark survives the
    /// installer's step; exactly one of two closes marks it.
    #[test]
    fn loom_list_close_races_push() {
        loom::model(|| {
            let list = Arc::new(List::new());
            list.try_push(0).unwrap();
            let pusher = {
                let list = list.clone();
                thread::spawn(move || list.try_push(1))
            };
            let closer = {
                let list = list.clone();
                thread::spawn(move || list.close())
            };
            let closed_here = list.close();
            let pushed = pusher.join().unwrap();
            let closed_there = closer.join().unwrap();
            assert!(closed_here ^ closed_there);
            assert!(list.is_closed());
            assert_eq!(list.try_push(2), Err(2));
            let left = drain(&list);
            match pushed {
                Ok(()) => assert_eq!(left, [0, 1]),
                Err(v) => {
                    assert_eq!(v, 1);
                    assert_eq!(left, [0]);
                }
            }
        });
    }

    /// The channel's contract: producers `try_push; fence; load flag` against a
    /// waiter `store flag; fence; is_empty()` (or `try_pop()`): a waiter that finds the
    /// list empty missed every push, so every producer must see the flag. `prefill`
    /// values pushed and popped first put the first push at a block's last slot.
    fn dekker(prefill: usize, producers: usize, waiter_pops: bool) {
        loom::model(move || {
            let list = Arc::new(List::new());
            for i in 0..prefill {
                list.try_push(i).unwrap();
                assert_eq!(list.try_pop(), Pop::Value(i));
            }
            let flag = Arc::new(AtomicBool::new(false));
            let producers: Vec<_> = (0..producers)
                .map(|_| {
                    let (list, flag) = (list.clone(), flag.clone());
                    thread::spawn(move || {
                        list.try_push(7).unwrap();
                        fence(SeqCst);
                        flag.load(Relaxed)
                    })
                })
                .collect();
            flag.store(true, Relaxed);
            fence(SeqCst);
            let empty = if waiter_pops {
                list.try_pop() == Pop::Empty
            } else {
                list.is_empty()
            };
            let all_saw_flag = producers.into_iter().all(|p| p.join().unwrap());
            assert!(!empty || all_saw_flag, "lost wakeup");
        });
    }

    /// The Dekker contract on a fresh list (the first block being installed).
    #[test]
    fn loom_list_dekker_first_block() {
        dekker(0, 1, false);
        dekker(0, 1, true);
    }

    /// The Dekker contract while two pushes race to install the first block (a pop
    /// can find a position claimed before `head.block` is set).
    #[test]
    fn loom_list_dekker_first_block_two_producers() {
        dekker(0, 2, false);
        dekker(0, 2, true);
    }

    /// The Dekker contract with the push at a block's last slot (the installer).
    #[test]
    fn loom_list_dekker_boundary() {
        dekker(BLOCK_CAP - 1, 1, false);
        dekker(BLOCK_CAP - 1, 1, true);
    }

    /// The Dekker contract while another pop moves `head` over a boundary: an `Empty`
    /// from the waiter is still never wrong.
    #[test]
    fn loom_list_dekker_head_on_boundary() {
        loom::model(|| {
            let list = Arc::new(List::new());
            for i in 0..BLOCK_CAP {
                list.try_push(i).unwrap();
            }
            for i in 0..BLOCK_CAP - 1 {
                assert_eq!(list.try_pop(), Pop::Value(i));
            }
            let flag = Arc::new(AtomicBool::new(false));
            let producer = {
                let (list, flag) = (list.clone(), flag.clone());
                thread::spawn(move || {
                    list.try_push(7).unwrap();
                    fence(SeqCst);
                    flag.load(Relaxed)
                })
            };
            let popper = {
                let list = list.clone();
                thread::spawn(move || pop_settled(&list))
            };
            flag.store(true, Relaxed);
            fence(SeqCst);
            let seen = list.try_pop();
            let saw_flag = producer.join().unwrap();
            let popped = popper.join().unwrap();
            assert!(seen != Pop::Empty || saw_flag, "lost wakeup");
            let mut all: Vec<usize> = popped.into_iter().chain(drain(&list)).collect();
            if let Pop::Value(v) = seen {
                all.push(v);
            }
            all.sort();
            assert_eq!(all, [BLOCK_CAP - 1, 7]);
        });
    }

    /// Runs `f` as a loom model with preemption bound `bound` (or the environment's,
    /// if lower) and, at bound `bound`, asserts it explored at least `min_runs`
    /// executions (a model with a single producer thread was seen exploring just one).
    fn explore(bound: usize, min_runs: usize, f: impl Fn() + Sync + Send + 'static) {
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut b = loom::model::Builder::new();
        let bound_here = b.preemption_bound.map_or(bound, |n| n.min(bound));
        b.preemption_bound = Some(bound_here);
        let counted = runs.clone();
        b.check(move || {
            counted.fetch_add(1, Relaxed);
            f();
        });
        let runs = runs.load(Relaxed);
        assert!(
            bound_here < bound || runs >= min_runs,
            "explored only {runs} executions"
        );
    }

    /// Review of the reuse: the kept block is reinstalled and its last slot (whose
    /// `WRITE` was set in its last life) is pushed on one thread while the main thread
    /// pops it: the pop must wait for this life's write (a stale `WRITE` would let it
    /// read the value of the last life: loom fails the unordered accesses to the
    /// value, or the value is wrong).
    #[test]
    fn loom_list_reused_last_slot_waits_for_its_push() {
        explore(3, 10, || {
            let list = Arc::new(List::new());
            list.try_push(0).unwrap();
            list.try_push(1).unwrap();
            assert_eq!(list.try_pop(), Pop::Value(0));
            assert_eq!(list.try_pop(), Pop::Value(1));
            // The first block is kept; the push of 3 installs it again, 4 goes to its
            // first slot, and `tail` rests at its last one.
            for v in 2..5 {
                list.try_push(v).unwrap();
            }
            let producer = {
                let list = list.clone();
                thread::spawn(move || list.try_push(5).unwrap())
            };
            for v in 2..5 {
                assert_eq!(pop_settled(&list), Some(v));
            }
            let raced = pop_settled(&list);
            producer.join().unwrap();
            let rest = drain(&list);
            let all: Vec<i32> = raced.into_iter().chain(rest).collect();
            assert_eq!(all, [5]);
        });
    }

    /// Review of the reuse: the first block's two pops race on two threads (so its
    /// destruction may pass from one to the other through `DESTROY`, and either may
    /// clear and keep it) while a producer on a third thread fills the second block
    /// and installs a third, which may be the kept first block, and writes into it.
    /// loom's checks in `clear` and on the slots fail the model if the producer's
    /// writes into the block's new life, or the clearing, are not ordered after every
    /// access of its last life (a Relaxed cache, a clear before the last pop is done),
    /// and its leak tracking fails a kept block never freed.
    #[test]
    fn loom_list_reuse_after_a_destruction_passed_between_pops() {
        explore(2, 1000, || {
            let list = Arc::new(List::new());
            list.try_push(0).unwrap();
            list.try_push(1).unwrap();
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    let list = list.clone();
                    thread::spawn(move || pop_settled(&list))
                })
                .collect();
            let producer = {
                let list = list.clone();
                thread::spawn(move || {
                    for v in 2..5 {
                        list.try_push(v).unwrap();
                    }
                })
            };
            let mut got: Vec<i32> = consumers
                .into_iter()
                .filter_map(|c| c.join().unwrap())
                .collect();
            producer.join().unwrap();
            got.extend(drain(&list));
            got.sort_unstable();
            assert_eq!(got, [0, 1, 2, 3, 4]);
            // The list goes on over the kept block (or a fresh one) and is dropped
            // with a value in it and maybe a block kept.
            for v in 5..8 {
                list.try_push(v).unwrap();
            }
            assert_eq!(pop_settled(&list), Some(5));
        });
    }

    /// Review of the reuse: two producers race to take the one kept block (only one
    /// may own it: the `swap`), one of them installing it while the other's claim of
    /// the same position fails and gives its own spare back to the full or empty
    /// cache; a consumer pops meanwhile. Every value once, each producer's in order,
    /// every block freed once (loom's leak and double-free checks).
    #[test]
    fn loom_list_two_producers_race_for_the_kept_block() {
        explore(2, 100, || {
            let list = Arc::new(List::new());
            // Fill and empty the first block: it is kept; the second is `tail`'s.
            for v in 0..BLOCK_CAP as i32 {
                list.try_push(v).unwrap();
            }
            for v in 0..BLOCK_CAP as i32 {
                assert_eq!(list.try_pop(), Pop::Value(v));
            }
            // `tail` now rests at the second block's first slot: the next push at its
            // last slot needs a block.
            let producers: Vec<_> = (0..2)
                .map(|p| {
                    let list = list.clone();
                    thread::spawn(move || {
                        list.try_push(10 * p + 10).unwrap();
                        list.try_push(10 * p + 11).unwrap();
                    })
                })
                .collect();
            let first = pop_settled(&list);
            for p in producers {
                p.join().unwrap();
            }
            let mut got: Vec<i32> = first.into_iter().chain(drain(&list)).collect();
            let pos = |v| got.iter().position(|&g| g == v).expect("value lost");
            assert!(pos(10) < pos(11) && pos(20) < pos(21), "{got:?}");
            got.sort_unstable();
            assert_eq!(got, [10, 11, 20, 21]);
        });
    }

    /// A value that counts its drops.
    struct Counted(usize, Arc<[LoomAtomicUsize; 3]>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.1[self.0].fetch_add(1, Relaxed);
        }
    }

    /// Dropping a list with values left in two blocks, after a pop raced the pushes:
    /// every value dropped exactly once, every block freed (loom's leak check).
    #[test]
    fn loom_list_drop_with_values_in_two_blocks() {
        loom::model(|| {
            let drops = Arc::new([
                LoomAtomicUsize::new(0),
                LoomAtomicUsize::new(0),
                LoomAtomicUsize::new(0),
            ]);
            let list = Arc::new(List::new());
            list.try_push(Counted(0, drops.clone())).ok().unwrap();
            let producer = {
                let (list, drops) = (list.clone(), drops.clone());
                thread::spawn(move || {
                    list.try_push(Counted(1, drops.clone())).ok().unwrap();
                    list.try_push(Counted(2, drops)).ok().unwrap();
                })
            };
            let consumer = {
                let list = list.clone();
                thread::spawn(move || drop(pop_settled(&list)))
            };
            producer.join().unwrap();
            consumer.join().unwrap();
            // The last reference: this drops the list.
            drop(list);
            assert!(drops.iter().all(|d| d.load(Relaxed) == 1));
        });
    }
}
