//! A lock-free bounded multi-producer multi-consumer queue: the buffer of `bounded(cap)`
//! channels with `cap >= 1`. It only stores values; the channel keeps the wait lists and
//! does all the blocking.
//!
//! The algorithm is Dmitry Vyukov's bounded MPMC queue: pushes claim positions from a
//! `tail` counter and pops from a `head` counter, each by compare-and-swap, and every slot
//! carries a stamp saying which operation may use it next.
//!
//! # Positions
//!
//! A position names a slot and a lap: `lap * one_lap + 2 * index`, where `one_lap` is
//! twice the capacity rounded up to a power of two. Positions are even, which leaves bit
//! 0 of the tail word for the closed mark. After the last index, a position steps to
//! index 0 of the next lap, so the indices between `cap` and `one_lap / 2` are never used
//! and the capacity need not be a power of two. Position arithmetic wraps; a position
//! comes round again only after at least 2^62 operations (on 64-bit targets), and, as every
//! counter-based lock-free queue does, the ring assumes no thread stalls that long
//! between reading a position and claiming it.
//!
//! # Stamps
//!
//! The stamp of the slot at position `p` takes these values in turn:
//!
//! - `p`: the slot is free for the push that claims position `p`;
//! - `p + 1`: it holds the value that push wrote, for the pop that claims position `p`;
//! - `p + one_lap`: that pop has read it out, and the slot is free for the push one lap
//!   later (the first value of the cycle for position `p + one_lap`).
//!
//! The word stores the stamp less `2 * index`, the part every position of that slot
//! shares, so a fresh ring's stamps are all zeroes: they are allocated zeroed, apart
//! from the values, which are left uninitialised (see [`Ring`]).
//!
//! A push reads `tail = p` and the stamp; only if the stamp is `p` does it CAS `tail`
//! from `p` to the next position, write the value and store `p + 1`. A pop reads
//! `head = p` and the stamp; only if it is `p + 1` does it CAS `head` on, read the
//! value and store `p + one_lap`.
//!
//! Why a value is never overwritten unread nor read twice: the CAS on `tail` gives each
//! position to exactly one push, and the CAS on `head` to exactly one pop. A push may
//! claim `p` only after seeing the stamp `p`, which the pop of `p - one_lap` stores after
//! its read; a pop may claim `p` only after seeing `p + 1`, which the push of `p` stores
//! after its write. Each stamp value names one position and one side, and only the owner
//! of that position moves the stamp on, so the stamp a winning CAS was based on still
//! holds after the CAS. A thread whose position is stale fails its CAS (the counter
//! moved) or reads a stamp that belongs to a later operation and rereads the counter.
//!
//! # Orderings
//!
//! - Stamps: a Release store read by an Acquire load. The push's store after its write,
//!   read by the pop before its read, makes the value visible; the pop's store after its
//!   read, read by the next lap's push before its write, finishes the read before the
//!   overwrite. These two edges are the only ones the slot contents need.
//! - `head` and `tail`: every access is `SeqCst`. Claims are `SeqCst` CASes, closing is a
//!   `SeqCst` `fetch_or`, loads are `SeqCst` loads (a plain load on x86, the same `ldar`
//!   as an Acquire load on AArch64). So all accesses to the two counters lie in one total
//!   order S that agrees with happens-before. A pop claims `p` after the push of `p`
//!   claimed it (it saw that push's stamp), and a push claims `p` after the pop of
//!   `p - one_lap` did, so at every point of S `tail` is never behind `head` and at
//!   most one lap ahead of it. Hence `Empty` (the tail read equals the head read before
//!   it) held at the moment of the tail read, `Full` (the head read is a lap behind the
//!   tail read before it) at the moment of the head read, and `len` (tail, head, tail
//!   again until the two tail reads agree) counts the values at the moment of the head
//!   read.
//! - A load of a counter also acquires: every write to a counter is a read-modify-write,
//!   so reading a position synchronizes with all the claims before it, and through their
//!   stamp loads with the stamp stores those claims relied on. The stamp a thread then
//!   reads is at least that new, which leaves few cases. For a push at `tail = p`, the
//!   stamp is `p - one_lap` or `p - one_lap + 1` (the previous lap still uses the slot),
//!   `p`, or later than `p` (`tail` has moved on). For a pop at `head = p`, it is
//!   `p - one_lap + 1` (the previous lap's pop is still reading), `p` (nothing written
//!   at `p` yet), `p + 1`, or later (`head` has moved on). The code tells "behind" from
//!   "ahead" by the sign of the wrapping difference.
//!
//! # Operations in progress: `Busy`, and `Full` below capacity
//!
//! Between its CAS and its stamp store, a push owns a slot that is counted as filled
//! (`tail` is past it) but holds no value yet. A pop that finds `head` still at that
//! slot and the stamp not yet `p + 1` answers [`Pop::Busy`] instead of waiting for it:
//! the ring is not empty, but the value is not there to take. Likewise, between its CAS
//! and its stamp store, a pop owns a slot that is counted as free (`head` is past it)
//! but that no push may use yet: a push that finds `tail` at that slot answers
//! [`PushError::Full`] although [`Ring::is_full`] is false and [`Ring::len`] is below
//! the capacity. Both windows are a handful of instructions with nothing that can block
//! or panic in them. Neither `try_push` nor `try_pop` ever waits for another thread: each
//! turn of their loops either returns or follows another thread's completed claim (a
//! CAS that lost to one, or a stamp showing a newer operation), so they are lock-free.
//!
//! # Closing
//!
//! [`Ring::close`] sets bit 0 of `tail` with a `fetch_or`. A push's CAS compares the
//! whole word, so it can only succeed on an unmarked `tail`: a push that claimed its
//! slot earlier in `tail`'s modification order than the mark completes as usual and its
//! value is popped later; any other push sees the mark and fails with
//! [`PushError::Closed`], getting its value back. Pops ignore the mark, so a closed ring
//! still drains.
//!
//! # Contract with the caller
//!
//! The channel pairs ring operations with its own "someone waits" flags in the
//! store-buffering (Dekker) pattern, with the fences on its side:
//!
//! ```text
//! producer:            try_push(v) == Ok;  fence(SeqCst);  load receivers-waiting flag
//! registering receiver: store flag;         fence(SeqCst);  is_empty() / try_pop()
//! consumer:            try_pop() == Value;  fence(SeqCst);  load senders-waiting flag
//! registering sender:   store flag;         fence(SeqCst);  is_full() / try_push()
//! ```
//!
//! The two fences are ordered in S. If the producer's comes first, every store it made
//! before its fence (the claim of `tail` and the stamp `p + 1`) is visible to the loads
//! the receiver makes after its own, so `is_empty` is false and `try_pop` takes the value
//! (unless another consumer took it first). Otherwise the producer's load sees the flag.
//! The consumer side is the mirror image, and it covers the `Full`-below-capacity case
//! too: the pop's stamp store, which frees the slot, comes before its fence, so a sender
//! that saw that `Full` and went to sleep is seen by the consumer's flag load. This only
//! needs every effect of a ring operation to be an atomic store made before it returns;
//! the fences must be the caller's. A caller must treat `Busy` as "not drained": a
//! value is on its way.
//!
//! `weft::chan` keeps the fast operations fence-free: a push or pop's claim is a SeqCst
//! read-modify-write and its flag load SeqCst, which orders the claim before the load
//! as a fence would, but not the stamp store that follows the claim. So the waiting
//! side must count a claimed slot as decided: a registering receiver treats `Busy`
//! as a value on its way, and a registering sender that gets `Full` while
//! [`Ring::is_full`] is false (a pop between its claim and its stamp store) waits for
//! that store instead of sleeping (`Buffer::push_settled`; with only the pop's claim
//! ordered, its flag load could miss the sender while the sender saw the slot still
//! in use: found in review).

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crossbeam_utils::CachePadded;

use super::{move_out_of, Backoff};
use crate::base::prefault::populate;
use crate::base::zeroed::{Zeroable, Zeroed, ZeroedWords};
use crate::base::{AtomicUsize, UnsafeCell};

/// Bit 0 of the tail word: set once the ring is closed. Positions are even, so they
/// never use it.
const CLOSED: usize = 1;

/// The largest capacity: it keeps `one_lap` at most 2^(BITS-2), so that positions a lap
/// apart differ by much less than half the word and the sign of a wrapping difference
/// tells "behind" from "ahead".
const MAX_CAP: usize = 1 << (usize::BITS - 3);

/// Why [`Ring::try_push`] gave the value back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PushError<T> {
    /// No slot is free: the ring holds `capacity` values, or a pop has claimed the slot
    /// at the tail and is still reading it out.
    Full(T),
    /// The ring is closed.
    Closed(T),
}

/// What [`Ring::try_pop`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pop<T> {
    Value(T),
    /// Nothing claimed-and-unread.
    Empty,
    /// A push has claimed the head slot but not yet written it (a push in progress); the
    /// value will be there within nanoseconds.
    Busy,
}

/// Rings smaller than this (stamps and values together) are not prefaulted: their few
/// pages fault in quickly, and small rings are made often (a call per channel).
const PREFAULT_MIN_BYTES: usize = 256 << 10;

/// Joint slot arrays up to this size are faulted in whole when the ring is made: as
/// `crossbeam-channel`, which writes every stamp at creation. Faulted in as values
/// arrived instead, the first lap of a `bounded(400_000)` between four sending and
/// four receiving fibers cost 79 ns a message against 19 ns (the pushes' first writes
/// to fresh pages, and the zero pages that receivers polling a stamp had mapped,
/// twice the TLB shootdowns: `perf stat`, `/proc/interrupts`). Larger rings stay lazy:
/// a `bounded(1_000_000)` made for a few thousand values (the sync suite's
/// `mpsc_uncontended_bounded`) would pay milliseconds for pages it never uses.
const POPULATE_MAX_BYTES: usize = 8 << 20;

/// Bytes of values per prefault step: one `madvise` per this much of the first lap.
const PREFAULT_STEP_BYTES: usize = 64 << 10;

/// [`Ring::prefault_step`] for a ring of `cap` values of `T`.
fn prefault_step<T>(cap: usize) -> usize {
    // A joint slot may be larger than the two (padding: a `u8` value makes 16 bytes).
    let slot = if Ring::<T>::JOINT {
        std::mem::size_of::<Slot<T>>()
    } else {
        std::mem::size_of::<T>() + std::mem::size_of::<usize>()
    };
    if cap.saturating_mul(slot) < PREFAULT_MIN_BYTES {
        return 0;
    }
    let per_step = (PREFAULT_STEP_BYTES / slot).max(1);
    // The largest power of two not above `per_step`.
    1 << (usize::BITS - 1 - per_step.leading_zeros())
}

/// A position and its slot's stamp and value, found once for an operation
/// ([`Ring::at`]).
struct At<'a, T> {
    pos: usize,
    /// The part of a stamp that the slot's word leaves out (`2 * index`): see
    /// [`stamp`](At::stamp).
    base: usize,
    stamp: &'a AtomicUsize,
    value: &'a UnsafeCell<MaybeUninit<T>>,
}

impl<T> At<'_, T> {
    /// The slot's stamp. A slot keeps its stamp less its index part (`2 * index`, the
    /// same in every position the slot ever has), so that every slot of a fresh ring
    /// holds 0.
    #[inline]
    fn stamp(&self) -> usize {
        self.stamp.load(Acquire).wrapping_add(self.base)
    }

    /// Stores `stamp` (a position of this slot, or one past it) with Release.
    #[inline]
    fn set_stamp(&self, stamp: usize) {
        self.stamp.store(stamp.wrapping_sub(self.base), Release);
    }
}

/// Why `claim_tail` claimed nothing.
enum NoRoom {
    Full,
    Closed,
}

/// Why `claim_head` claimed nothing.
enum NoValue {
    Empty,
    Busy,
}

/// A stamp and the value it guards, side by side: an operation on a ring of small
/// values touches one line of slots, not a line of stamps and a line of values.
struct Slot<T> {
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: outside loom the stamp is a plain word (zero bytes: 0) and the value
// `MaybeUninit` (any bytes), so zero bytes are a valid slot: stamp 0, no value.
unsafe impl<T> Zeroable for Slot<T> {
    fn zero() -> Self {
        Slot {
            stamp: AtomicUsize::new(0),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

/// Slots up to this size keep stamp and value together ([`Ring::JOINT`]).
const JOINT_MAX_BYTES: usize = 64;

/// A lock-free bounded MPMC queue of `T`; see the module docs for the protocol.
///
/// The stamps must start zeroed, and zeroed memory is only free when fresh pages are
/// mapped; a reused heap block is cleared by `calloc`, which for a `bounded(1000)` of
/// 32 KiB messages was 32 MiB of writes per channel. So large values live apart from
/// their stamps: only the stamps (a word per slot, mapped when long: [`Zeroed`]) start
/// zeroed, and the values' pages are touched as values arrive. Small values share a
/// slot with their stamp ([`Ring::JOINT`]): the whole slot array starts zeroed, at
/// most a line per value, and each operation then moves one line between cores instead
/// of two (four senders into one `bounded(n)` between fibers: 75 ns a message apart,
/// 41 ns together).
pub(crate) struct Ring<T> {
    /// The next position to pop.
    head: CachePadded<AtomicUsize>,
    /// The next position to push, with the closed mark in bit 0.
    tail: CachePadded<AtomicUsize>,
    /// The slots of a [`JOINT`](Ring::JOINT) ring (else empty). In their own
    /// allocation, as the stamps below: no stamp shares a cache line with `head` or
    /// `tail`.
    slots: Zeroed<Slot<T>>,
    /// Which operation may use each slot next (see the module docs), when apart from
    /// the values (else empty).
    stamps: ZeroedWords,
    /// The slots' values, uninitialised until pushed, when apart from the stamps
    /// (else empty).
    values: Box<[UnsafeCell<MaybeUninit<T>>]>,
    cap: usize,
    /// The distance between the same slot's positions in consecutive laps.
    one_lap: usize,
    /// Slots per prefault step (a power of two), or 0 when the ring is too small to
    /// bother: see [`Ring::prefault_ahead`].
    prefault_step: usize,
    /// The first lap's positions whose push faults pages in are those that this mask
    /// clears (a step's first index, `2 * prefault_step - 1`) and `lead_pos` (the
    /// [`lead`](Ring::lead) index's): checked inline, so that the other pushes of a
    /// first lap make no call.
    prefault_pos_mask: usize,
    lead_pos: usize,
}

// SAFETY: a value enters the ring by value from one thread and leaves it by value to
// another (or is dropped with the ring), so moving the ring needs `T: Send` and no more.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: shared access moves values between threads, hence `T: Send`; no `&T` is ever
// handed out, and the stamp protocol gives each slot's contents to one thread at a time,
// so `T: Sync` is not needed.
unsafe impl<T: Send> Sync for Ring<T> {}

impl<T> Ring<T> {
    /// Whether a stamp and its value share a slot: for values small enough that
    /// starting their slots zeroed costs little more than zeroing the stamps alone.
    const JOINT: bool = std::mem::size_of::<Slot<T>>() <= JOINT_MAX_BYTES;

    /// A ring for `cap` values. Its slots are allocated here, once.
    pub(crate) fn new(cap: usize) -> Ring<T> {
        assert!(cap >= 1, "a ring holds at least one value");
        assert!(cap <= MAX_CAP, "ring capacity {cap} is too large");
        // Lap 0: every slot is free for the push of its first position, which its stamp
        // says by holding 0 (stamps are kept less their slot's index part: see
        // `stamp`), so the stamps are zeroed words: a large ring costs no writes up
        // front, and its pages are touched as values arrive.
        let (slots, stamps, values) = if Self::JOINT {
            (Zeroed::new(cap), Zeroed::default(), Box::default())
        } else {
            // The stamps first: a capacity too large for the values then panics with the
            // stamps mapped, and their unwind unmaps them (`tests/review_zeroed.rs`).
            let stamps = Zeroed::new(cap);
            // Uninitialised, never written here: a slot's value is written by the push
            // that claims it and read only by the pop of that position (the stamp
            // protocol).
            #[cfg(not(loom))]
            // SAFETY: `MaybeUninit` may hold any bytes, so uninitialised memory is a
            // valid array of `UnsafeCell<MaybeUninit<T>>`.
            let values =
                unsafe { Box::<[UnsafeCell<MaybeUninit<T>>]>::new_uninit_slice(cap).assume_init() };
            #[cfg(loom)]
            let values = (0..cap)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect();
            (Zeroed::default(), stamps, values)
        };
        let mut ring = Ring {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots,
            stamps,
            values,
            cap,
            one_lap: cap.next_power_of_two() << 1,
            prefault_step: prefault_step::<T>(cap),
            prefault_pos_mask: 0,
            lead_pos: 0,
        };
        if Self::JOINT && ring.prefault_step != 0 {
            let bytes = std::mem::size_of_val(&*ring.slots);
            if bytes <= POPULATE_MAX_BYTES {
                populate(ring.slots.as_ptr().cast(), bytes);
                ring.prefault_step = 0;
            }
        }
        if ring.prefault_step != 0 {
            // A first-lap position is twice its index.
            ring.prefault_pos_mask = 2 * ring.prefault_step - 1;
            ring.lead_pos = 2 * Self::lead(ring.prefault_step);
        }
        ring
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Appends `v`, or gives it back: `Full` when no slot is free (see [`PushError`]),
    /// `Closed` once [`close`](Self::close) has marked the ring.
    pub(crate) fn try_push(&self, v: T) -> Result<(), PushError<T>> {
        match self.claim_tail() {
            Ok(at) => {
                // SAFETY: `claim_tail` just gave this position to us alone.
                unsafe { Self::publish(&at, v) };
                self.prefault_ahead(at.pos);
            }
            Err(NoRoom::Full) => return Err(PushError::Full(v)),
            Err(NoRoom::Closed) => return Err(PushError::Closed(v)),
        }
        Ok(())
    }

    /// [`try_push`](Self::try_push) of the value in `src`, copied straight from there
    /// into its slot (`src` is then `None`); `false`, `src` untouched, when there is no
    /// room or the ring is closed. A send future keeps its value in place until it
    /// goes: taken out and handed down by value, a large value was copied at each level.
    ///
    /// Panics if `src` is `None` (before claiming anything).
    #[inline]
    pub(crate) fn try_push_from(&self, src: &mut Option<T>) -> bool {
        assert!(src.is_some(), "push of a value already gone");
        match self.claim_tail() {
            Ok(at) => {
                // SAFETY: `claim_tail` just gave this position to us alone; `src` holds
                // a value (checked above).
                unsafe { Self::publish_from(&at, src) };
                self.prefault_ahead(at.pos);
                true
            }
            Err(_) => false,
        }
    }

    /// During the first lap, the push of every `prefault_step`-th index from the
    /// first step on, once its value is published, faults in the pages of the step
    /// after the next one, and the push of the [`lead`](Self::lead) index faults in
    /// the rest of the first two steps. So the first write to each page of the ring
    /// (but the lead's first few) happens here, outside any push's claim-to-publish
    /// window, instead of inside one while a pop spins on that slot
    /// (`base/prefault.rs` has the measurements). Not at creation, nor at the first
    /// push: a channel made for a few values (the sync suite's
    /// `mpsc_send_medium_1000` makes a `bounded(1000)` of 512-byte values per
    /// message) would pay two system calls for pages it mostly never touches (850 ns
    /// an iteration became 2.8 us). Positions below `one_lap` are the first lap's;
    /// each index is pushed once there, so each step is faulted in once.
    #[inline]
    fn prefault_ahead(&self, pos: usize) {
        if self.prefault_step != 0
            && pos < self.one_lap
            && (pos & self.prefault_pos_mask == 0 || pos == self.lead_pos)
        {
            self.prefault_first_lap(pos);
        }
    }

    /// [`prefault_ahead`](Self::prefault_ahead) of a ring that prefaults, at a first-lap
    /// position that may fault pages in. Apart, so that the check before it stays
    /// inline in every push (a call made for every push of a ring populated at creation
    /// cost ten instructions, and one for every push of a first lap eighteen).
    #[inline(never)]
    fn prefault_first_lap(&self, pos: usize) {
        let step = self.prefault_step;
        let index = self.index(pos);
        if index == Self::lead(step) {
            self.prefault(index + 1, 2 * step - index - 1);
        }
        if index >= step && index & (step - 1) == 0 {
            self.prefault(index + step, step);
        }
    }

    /// The index whose push faults in the rest of the first two steps: a sixteenth of
    /// a step (4 KiB of slots), so that a ring used for a handful of values pays
    /// nothing.
    fn lead(step: usize) -> usize {
        (step / 16).max(1)
    }

    /// Faults in the stamps and values of slots `from..from + len` (clipped to the ring).
    fn prefault(&self, from: usize, len: usize) {
        let end = from.saturating_add(len).min(self.capacity());
        if from >= end {
            return;
        }
        if Self::JOINT {
            let slots = &self.slots[from..end];
            populate(slots.as_ptr().cast(), std::mem::size_of_val(slots));
        } else {
            let stamps = &self.stamps[from..end];
            populate(stamps.as_ptr().cast(), std::mem::size_of_val(stamps));
            let values = &self.values[from..end];
            populate(values.as_ptr().cast(), std::mem::size_of_val(values));
        }
    }

    /// Takes the oldest value (the tests' form of [`try_pop_into`](Self::try_pop_into)).
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
    /// now holds it, the caller's to take). One copy of the value, where handing it up
    /// through `Pop` and its callers' wrappers copied it at each level: for a 32 KiB
    /// value that copying was most of a receive (the sync suite's `mpsc_send_large`).
    pub(crate) fn try_pop_into(&self, out: &mut MaybeUninit<T>) -> Pop<()> {
        match self.claim_head() {
            Ok(at) => {
                // SAFETY: `claim_head` just gave this position to us alone.
                unsafe { self.take_into(&at, out) };
                Pop::Value(())
            }
            Err(NoValue::Empty) => Pop::Empty,
            Err(NoValue::Busy) => Pop::Busy,
        }
    }

    /// [`try_pop_into`](Self::try_pop_into) of a value already written at the head:
    /// `false` (nothing moved) when the head slot holds none, told from its stamp alone
    /// without reading `tail` (see [`head_written`](Self::head_written)). A receiver's
    /// first try: one look at the head slot, which the claim then uses, where looking
    /// first and popping after read it twice.
    #[inline]
    pub(crate) fn try_pop_written_into(&self, out: &mut MaybeUninit<T>) -> bool {
        match self.claim_head_by(false) {
            Ok(at) => {
                // SAFETY: `claim_head_by` just gave this position to us alone.
                unsafe { self.take_into(&at, out) };
                true
            }
            Err(_) => false,
        }
    }

    /// Whether the value at the head was written (a moment ago), without claiming it.
    /// It reads `head` and one stamp but not `tail`: a receiver that polls an empty
    /// ring at the sender's heels then shares only the head slot's stamp with the
    /// sender, not the word every push claims from (polling with `try_pop`, which
    /// reads `tail` to tell empty from busy, made a one-sender `bounded(n)` 2-5x
    /// slower a message).
    pub(crate) fn head_written(&self) -> bool {
        let head = self.head.load(SeqCst);
        self.stamp(head) == head.wrapping_add(1)
    }

    /// Marks the ring closed (a bit in the tail word, so a push either claimed its slot
    /// before the mark or fails with `Closed`). True for the call that marked it.
    pub(crate) fn close(&self) -> bool {
        self.tail.fetch_or(CLOSED, SeqCst) & CLOSED == 0
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tail.load(SeqCst) & CLOSED != 0
    }

    /// No slot claimed and unread (head == tail ignoring the mark): a push in progress
    /// counts as not empty.
    pub(crate) fn is_empty(&self) -> bool {
        let (head, tail) = self.snapshot();
        head == tail
    }

    /// Every slot claimed by a push and not yet claimed by a pop. A pop in progress has
    /// freed its slot for this count (while `try_push` may still answer `Full`).
    pub(crate) fn is_full(&self) -> bool {
        let (head, tail) = self.snapshot();
        head.wrapping_add(self.one_lap) == tail
    }

    /// The number of values claimed by pushes and not yet claimed by pops, at one moment.
    pub(crate) fn len(&self) -> usize {
        let (head, tail) = self.snapshot();
        let (hix, tix) = (self.index(head), self.index(tail));
        if hix < tix {
            tix - hix
        } else if hix > tix {
            self.capacity() - hix + tix
        } else if head == tail {
            0
        } else {
            self.capacity()
        }
    }

    /// `(head, tail)` as they both were at one moment (that of the head read), the mark
    /// cleared. The loop only turns again after `tail` changed: a push claimed a slot, or
    /// the ring was closed.
    fn snapshot(&self) -> (usize, usize) {
        let mut tail = self.tail.load(SeqCst);
        loop {
            let head = self.head.load(SeqCst);
            let again = self.tail.load(SeqCst);
            if again == tail {
                return (head, tail & !CLOSED);
            }
            tail = again;
        }
    }

    fn index(&self, pos: usize) -> usize {
        (pos & (self.one_lap - 1)) >> 1
    }

    /// The slot of `pos`, found once for an operation: every later look at the ring's
    /// arrays after one of the operation's atomic accesses reloaded their addresses
    /// and lengths (a claim of a `bounded(1_000_000)` and its publish computed the index
    /// and checked its bounds four times: a tenth of a push's instructions).
    #[inline]
    fn at(&self, pos: usize) -> At<'_, T> {
        let i = self.index(pos);
        let (stamp, value) = if Self::JOINT {
            let slot = &self.slots[i];
            (&slot.stamp, &slot.value)
        } else {
            (&self.stamps[i], &self.values[i])
        };
        At {
            pos,
            base: pos & (self.one_lap - 1) & !CLOSED,
            stamp,
            value,
        }
    }

    fn value(&self, pos: usize) -> &UnsafeCell<MaybeUninit<T>> {
        self.at(pos).value
    }

    /// The stamp of the slot of `pos` (see [`At::stamp`]).
    fn stamp(&self, pos: usize) -> usize {
        self.at(pos).stamp()
    }

    /// The position after `pos`: the next index, or index 0 of the next lap.
    #[inline]
    fn advance(&self, pos: usize) -> usize {
        if self.index(pos) + 1 < self.capacity() {
            // Stays below the lap bits, so it cannot overflow.
            pos + 2
        } else {
            (pos & !(self.one_lap - 1)).wrapping_add(self.one_lap)
        }
    }

    /// Claims the slot at the tail for a push, which must then be completed with
    /// [`publish`](Self::publish) before the ring is dropped.
    #[inline]
    fn claim_tail(&self) -> Result<At<'_, T>, NoRoom> {
        let mut tail = self.tail.load(SeqCst);
        let mut contention = Backoff::new();
        loop {
            if tail & CLOSED != 0 {
                return Err(NoRoom::Closed);
            }
            let at = self.at(tail);
            let ahead = at.stamp().wrapping_sub(tail) as isize;
            if ahead == 0 {
                // Free for this position: race the other pushes for it.
                match self
                    .tail
                    .compare_exchange(tail, self.advance(tail), SeqCst, SeqCst)
                {
                    Ok(_) => return Ok(at),
                    Err(now) => {
                        tail = now;
                        contention.spin();
                    }
                }
            } else if ahead < 0 {
                // The previous lap still uses the slot. A lap of values between head and
                // tail means full; if head has moved past the slot, its pop is still
                // reading, unless our tail is stale.
                let head = self.head.load(SeqCst);
                if head.wrapping_add(self.one_lap) == tail {
                    return Err(NoRoom::Full);
                }
                let now = self.tail.load(SeqCst);
                if now == tail {
                    return Err(NoRoom::Full);
                }
                tail = now;
            } else {
                // The stamp is past `tail`: the push of `tail` has claimed the slot
                // already, and having acquired the stamp, the reload sees that claim.
                // A lost race as much as a failed CAS is, so it backs off as one: four
                // senders into one `bounded(n)` that reloaded at once kept `tail`'s line
                // moving between the cores, 50-56 ns a message against 17-20 with the
                // spin (crossbeam: 24), measured on the 2-core Intel VM.
                contention.spin();
                tail = self.tail.load(SeqCst);
            }
        }
    }

    /// Writes the value of a claimed push and hands the slot to its pop.
    ///
    /// # Safety
    ///
    /// `at` was returned by [`claim_tail`](Self::claim_tail) and has not been published
    /// yet: its slot is this caller's alone and holds no value.
    unsafe fn publish(at: &At<'_, T>, v: T) {
        // SAFETY: the caller owns position `at.pos` (its CAS on `tail` was the only one
        // from it), and the claim followed an Acquire read of the stamp `at.pos` that
        // the pop of the previous lap stored after moving its value out, so nobody else
        // reads or writes the slot until the store below.
        at.value.with_mut(|p| {
            // SAFETY: as above: the slot is ours alone and holds no value.
            unsafe { p.write(MaybeUninit::new(v)) }
        });
        // Release: the pop that acquires `pos + 1` sees the value written.
        at.set_stamp(at.pos + 1);
    }

    /// [`publish`](Self::publish) of the value `src` holds, moved out of it without an
    /// intermediate copy; `src` is left `None`.
    ///
    /// # Safety
    ///
    /// As [`publish`](Self::publish), and `src` is `Some`.
    unsafe fn publish_from(at: &At<'_, T>, src: &mut Option<T>) {
        // SAFETY: the slot at `at` is ours alone and empty (as in `publish`); `src`
        // holds a value (the caller's contract) and is a distinct place.
        at.value
            .with_mut(|p| unsafe { move_out_of(src, p.cast::<T>()) });
        // Release: the pop that acquires `pos + 1` sees the value written.
        at.set_stamp(at.pos + 1);
    }

    /// Claims the oldest written value for a pop, which must then be completed with
    /// [`take`](Self::take) before the ring is dropped.
    #[inline]
    fn claim_head(&self) -> Result<At<'_, T>, NoValue> {
        self.claim_head_by(true)
    }

    /// [`claim_head`](Self::claim_head); with `read_tail` false, a head slot with no
    /// written value is answered `Busy` at once, without reading `tail` to tell an
    /// empty ring from a push in progress (see [`head_written`](Self::head_written)).
    #[inline]
    fn claim_head_by(&self, read_tail: bool) -> Result<At<'_, T>, NoValue> {
        let mut head = self.head.load(SeqCst);
        let mut contention = Backoff::new();
        loop {
            let at = self.at(head);
            let ahead = at.stamp().wrapping_sub(head + 1) as isize;
            if ahead == 0 {
                // Written for this position: race the other pops for it.
                match self
                    .head
                    .compare_exchange(head, self.advance(head), SeqCst, SeqCst)
                {
                    Ok(_) => return Ok(at),
                    Err(now) => {
                        head = now;
                        contention.spin();
                    }
                }
            } else if ahead < 0 {
                if !read_tail {
                    return Err(NoValue::Busy);
                }
                // Nothing written at `head` yet. If tail is still there, nothing is
                // claimed; otherwise a push owns the slot and is writing it, unless our
                // head is stale.
                let tail = self.tail.load(SeqCst) & !CLOSED;
                if tail == head {
                    return Err(NoValue::Empty);
                }
                let now = self.head.load(SeqCst);
                if now == head {
                    return Err(NoValue::Busy);
                }
                head = now;
            } else {
                // The stamp is past `head + 1`: the pop of `head` has claimed the slot
                // already, and having acquired the stamp, the reload sees that claim.
                // Backs off as after a failed CAS (see `claim_tail`).
                contention.spin();
                head = self.head.load(SeqCst);
            }
        }
    }

    /// Moves the value of a claimed pop out and frees the slot for the next lap's push.
    ///
    /// # Safety
    ///
    /// `at` was returned by [`claim_head`](Self::claim_head) and has not been taken yet:
    /// its slot is this caller's alone and holds the value pushed at `at.pos`.
    unsafe fn take_into(&self, at: &At<'_, T>, out: &mut MaybeUninit<T>) {
        // SAFETY: the caller owns position `at.pos` (its CAS on `head` was the only one
        // from it), and the claim followed an Acquire read of the stamp `pos + 1` that
        // the push of `pos` stored after writing the value, so the value is initialised,
        // visible, and nobody else touches the slot until the store below.
        at.value.with(|p| {
            // SAFETY: as above: the slot is ours alone and holds the value pushed at `pos`;
            // `out` is a distinct place (a `&mut`), and the slot counts as empty once the
            // stamp below is stored, so the value has exactly one owner: `out`'s.
            unsafe { std::ptr::copy_nonoverlapping(p, out, 1) }
        });
        // Release: the next lap's push, which acquires this stamp, writes after our read.
        at.set_stamp(at.pos.wrapping_add(self.one_lap));
    }
}

impl<T> Drop for Ring<T> {
    /// Drops the values left (see [`drop_values`](Ring::drop_values)), and gives the
    /// zeroed arrays back clean for the next ring of this size made on this thread
    /// ([`Zeroed::recycle`]).
    fn drop(&mut self) {
        // `&mut self`: no operation is in flight (claims are always completed before
        // their push or pop returns), so every position in head..tail holds a value.
        let pos = self.head.load(Relaxed);
        let tail = self.tail.load(Relaxed) & !CLOSED;
        // Only the slots of positions claimed so far were ever written: while `tail`
        // is still in the first lap, the indices below its own.
        let used = if tail < self.one_lap {
            self.index(tail)
        } else {
            self.cap
        };
        if std::mem::needs_drop::<T>() {
            self.drop_values(pos, tail);
        }
        // The argument below needs a tail that never wrapped: 2^62 operations on a
        // 64-bit target, but only 2^30 on a 32-bit one (found in review).
        if usize::BITS < 64 {
            return;
        }
        // A slot's stamp and value are written only by the push or pop that claimed
        // one of its positions, and claims take positions in order from 0 (`tail` from
        // 0, `head` behind it), so the slots at or above `used` hold the zero bytes
        // they started with.
        if Self::JOINT {
            // SAFETY: hence every slot outside `0..used` is all zero bytes.
            unsafe { std::mem::take(&mut self.slots).recycle(0..used) };
        } else {
            // SAFETY: as above, for the stamps kept apart.
            unsafe { std::mem::take(&mut self.stamps).recycle(0..used) };
        }
    }
}

impl<T> Ring<T> {
    /// Drops the values at positions `pos..tail`. If one value's `Drop` panics, the
    /// values after it are leaked, never dropped twice.
    fn drop_values(&mut self, mut pos: usize, tail: usize) {
        while pos != tail {
            let value = self.value(pos);
            debug_assert_eq!(self.stamp(pos), pos + 1);
            // Step past the value first: if its drop panics, unwinding leaves this loop
            // and the later values are leaked (the slots are `MaybeUninit`).
            pos = self.advance(pos);
            // SAFETY: the slot holds the value pushed at its position, which no pop has
            // taken; we have exclusive access, and each position is visited once.
            value.with_mut(|p| unsafe { (*p).assume_init_drop() });
        }
    }
}

impl<T> fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};
    use std::sync::{Arc, Mutex};
    use std::thread;
    use std::time::{Duration, Instant};

    use super::*;

    fn pop_value<T>(ring: &Ring<T>) -> T {
        match ring.try_pop() {
            Pop::Value(v) => v,
            Pop::Empty => panic!("expected a value, found Empty"),
            Pop::Busy => panic!("expected a value, found Busy"),
        }
    }

    #[test]
    fn send_and_sync_for_send_values() {
        fn shared<X: Send + Sync>() {}
        // `Cell` is `Send` but not `Sync`: the ring never shares a value.
        shared::<Ring<std::cell::Cell<u8>>>();
    }

    #[test]
    #[should_panic(expected = "at least one")]
    fn capacity_zero_is_refused() {
        let _ = Ring::<u8>::new(0);
    }

    #[test]
    fn fifo() {
        let ring = Ring::new(8);
        assert_eq!(ring.capacity(), 8);
        for i in 0..8 {
            ring.try_push(i).unwrap();
        }
        for i in 0..8 {
            assert_eq!(pop_value(&ring), i);
        }
        assert_eq!(ring.try_pop(), Pop::Empty);
    }

    /// `try_push_from` moves the value out of its `Option` only when it pushes; full
    /// or closed, the value stays where it was. Values with a heap part (a `String`),
    /// so a double drop or a leak shows under the test allocator's checks.
    #[test]
    fn push_from_moves_only_on_success() {
        let ring = Ring::new(2);
        let mut a = Some(String::from("a"));
        assert!(ring.try_push_from(&mut a));
        assert_eq!(a, None);
        let mut b = Some(String::from("b"));
        assert!(ring.try_push_from(&mut b));
        let mut c = Some(String::from("c"));
        assert!(!ring.try_push_from(&mut c), "pushed into a full ring");
        assert_eq!(c.as_deref(), Some("c"));
        assert_eq!(pop_value(&ring), "a");
        ring.close();
        assert!(!ring.try_push_from(&mut c), "pushed into a closed ring");
        assert_eq!(c.as_deref(), Some("c"));
        let mut out = MaybeUninit::uninit();
        assert_eq!(ring.try_pop_into(&mut out), Pop::Value(()));
        // SAFETY: `Value` says `out` holds the value.
        assert_eq!(unsafe { out.assume_init_read() }, "b");
        assert_eq!(ring.try_pop_into(&mut out), Pop::Empty);
    }

    #[test]
    #[should_panic(expected = "already gone")]
    fn push_from_an_empty_option_panics_before_claiming() {
        let ring = Ring::<u8>::new(1);
        let _ = ring.try_push_from(&mut None);
    }

    #[test]
    fn full_and_empty() {
        for cap in [1, 3, 4] {
            let ring = Ring::new(cap);
            assert!(ring.is_empty() && !ring.is_full());
            assert_eq!(ring.len(), 0);
            assert_eq!(ring.try_pop(), Pop::Empty);
            for i in 0..cap {
                assert!(!ring.is_full());
                ring.try_push(i).unwrap();
                assert_eq!(ring.len(), i + 1);
                assert!(!ring.is_empty());
            }
            assert!(ring.is_full());
            assert_eq!(ring.try_push(99), Err(PushError::Full(99)));
            assert_eq!(pop_value(&ring), 0);
            assert!(!ring.is_full());
            assert_eq!(ring.len(), cap - 1);
            ring.try_push(99).unwrap();
            assert!(ring.is_full());
            for i in 1..cap {
                assert_eq!(pop_value(&ring), i);
            }
            assert_eq!(pop_value(&ring), 99);
            assert!(ring.is_empty());
            assert_eq!(ring.try_pop(), Pop::Empty);
        }
    }

    #[test]
    fn wraps_around_over_many_laps() {
        for cap in [1, 2, 3, 5, 8] {
            let ring = Ring::new(cap);
            let (mut next_in, mut next_out) = (0u64, 0u64);
            // Vary the fill level so the head and tail cross the lap boundary at every
            // offset from each other.
            for round in 0..2000usize {
                let fill = round % cap + 1;
                while ring.len() < fill {
                    ring.try_push(next_in).unwrap();
                    next_in += 1;
                }
                assert_eq!(ring.len(), fill);
                assert_eq!(ring.is_full(), fill == cap);
                for _ in 0..(round % fill + 1) {
                    assert_eq!(pop_value(&ring), next_out);
                    next_out += 1;
                }
            }
            while let Pop::Value(v) = ring.try_pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert_eq!(next_out, next_in);
            // Each round pops at least one value: at least 2000 values, 250 laps.
            assert!(next_in / cap as u64 >= 250, "wrapped many laps");
            assert!(ring.is_empty());
        }
    }

    #[test]
    fn close() {
        let ring = Ring::new(4);
        ring.try_push(1).unwrap();
        ring.try_push(2).unwrap();
        assert!(!ring.is_closed());
        assert!(ring.close(), "the first close marks the ring");
        assert!(!ring.close(), "a second close finds it marked");
        assert!(ring.is_closed());
        assert_eq!(ring.try_push(3), Err(PushError::Closed(3)));
        assert_eq!(ring.len(), 2);
        assert_eq!(pop_value(&ring), 1);
        assert_eq!(pop_value(&ring), 2);
        assert_eq!(ring.try_pop(), Pop::Empty);
        assert!(ring.is_empty() && ring.is_closed());
        assert_eq!(ring.try_push(4), Err(PushError::Closed(4)));

        // A full ring that is closed reports Closed, not Full.
        let ring = Ring::new(1);
        ring.try_push(1).unwrap();
        ring.close();
        assert!(ring.is_full());
        assert_eq!(ring.try_push(2), Err(PushError::Closed(2)));
        assert_eq!(pop_value(&ring), 1);
    }

    #[test]
    fn operations_in_progress_read_as_busy_or_full() {
        let ring = Ring::new(1);
        let pos = ring.claim_tail().ok().unwrap();
        // Claimed, not yet written: counted, but not there to take.
        assert_eq!(ring.try_pop(), Pop::Busy);
        assert!(!ring.is_empty() && ring.is_full());
        assert_eq!(ring.len(), 1);
        assert_eq!(ring.try_push(9), Err(PushError::Full(9)));
        // SAFETY: `pos` is our unpublished claim.
        unsafe { Ring::publish(&pos, 5) };

        let pos = ring.claim_head().ok().unwrap();
        // Claimed by a pop, not yet read out: counted as free, but not usable yet.
        assert!(ring.is_empty() && !ring.is_full());
        assert_eq!(ring.len(), 0);
        assert_eq!(ring.try_push(9), Err(PushError::Full(9)));
        assert_eq!(ring.try_pop(), Pop::Empty);
        let mut out = MaybeUninit::uninit();
        // SAFETY: `pos` is our untaken claim; `take_into` then filled `out`.
        let v = unsafe {
            ring.take_into(&pos, &mut out);
            out.assume_init()
        };
        assert_eq!(v, 5);
        ring.try_push(9).unwrap();
        assert_eq!(pop_value(&ring), 9);
    }

    /// `head_written` sees a value only once its push has published it (a claimed,
    /// unwritten slot reads as not written, though `try_pop` calls it `Busy`), and
    /// not after it was popped, over several laps.
    #[test]
    fn head_written_only_for_published_values() {
        let ring = Ring::new(2);
        assert!(!ring.head_written());
        let pos = ring.claim_tail().ok().unwrap();
        assert!(!ring.head_written());
        assert_eq!(ring.try_pop(), Pop::Busy);
        // SAFETY: `pos` is our unpublished claim.
        unsafe { Ring::publish(&pos, 7) };
        ring.try_push(8).unwrap();
        assert!(ring.head_written());
        assert_eq!(pop_value(&ring), 7);
        assert!(ring.head_written());
        assert_eq!(pop_value(&ring), 8);
        assert!(!ring.head_written());
        for v in 0..10 {
            ring.try_push(v).unwrap();
            assert!(ring.head_written());
            assert_eq!(pop_value(&ring), v);
            assert!(!ring.head_written());
        }
        assert!(ring.is_empty());
    }

    /// `try_pop_written_into` takes published values in order and answers `false`,
    /// moving nothing, for an empty ring and for a claimed but unpublished slot; it
    /// follows the head across laps and past a closed mark.
    #[test]
    fn pop_written_takes_only_published_values() {
        let take = |ring: &Ring<u32>| {
            let mut out = MaybeUninit::uninit();
            // SAFETY: `true` says a value was moved into `out`.
            ring.try_pop_written_into(&mut out)
                .then(|| unsafe { out.assume_init() })
        };
        let ring = Ring::new(2);
        assert_eq!(take(&ring), None);
        let pos = ring.claim_tail().ok().unwrap();
        assert_eq!(take(&ring), None);
        // SAFETY: `pos` is our unpublished claim.
        unsafe { Ring::publish(&pos, 7) };
        ring.try_push(8).unwrap();
        assert_eq!(take(&ring), Some(7));
        assert_eq!(take(&ring), Some(8));
        assert_eq!(take(&ring), None);
        for v in 0..10 {
            ring.try_push(v).unwrap();
            assert_eq!(take(&ring), Some(v));
        }
        ring.try_push(11).unwrap();
        assert!(ring.close());
        assert_eq!(take(&ring), Some(11));
        assert_eq!(take(&ring), None);
        assert!(ring.is_empty());
    }

    /// Steps are powers of two of about 64 KiB of slots; small rings get none.
    #[test]
    fn prefault_steps() {
        assert_eq!(prefault_step::<u64>(1000), 0);
        assert_eq!(prefault_step::<u64>(400_000), 4096);
        assert_eq!(prefault_step::<[u8; 32 << 10]>(1000), 1);
        assert_eq!(prefault_step::<[u8; 16 << 10]>(1000), 2);
        assert_eq!(prefault_step::<[u8; 1 << 20]>(1), 1);
        assert_eq!(prefault_step::<()>(1 << 20), 8192);
        for cap in [1usize, 100, 40_000, 1 << 20] {
            let step = prefault_step::<u32>(cap);
            assert!(step == 0 || step.is_power_of_two());
        }
    }

    /// Over a large ring the first lap keeps its pages faulted in ahead of the tail
    /// (on Linux 5.14 and later, where the kernel takes the advice), and the values
    /// are untouched by it: every value arrives, in order, over several laps.
    #[test]
    fn prefaulting_keeps_values_and_runs_ahead_of_the_tail() {
        // Past `POPULATE_MAX_BYTES`: not faulted in at creation.
        let cap = 600_000;
        let ring = Ring::<u64>::new(cap);
        let step = ring.prefault_step;
        assert_ne!(step, 0);
        #[cfg(target_os = "linux")]
        let resident = |from: usize, to: usize| resident(&ring, from, to);
        for v in 0..(cap as u64 / 2) {
            ring.try_push(v).unwrap();
        }
        #[cfg(target_os = "linux")]
        if crate::base::prefault::linux_supported() {
            // Pushed up to cap / 2: the step beyond the tail is resident already.
            let next = (cap / 2).div_ceil(step) * step;
            assert!(resident(next, next + step));
        }
        for v in 0..(cap as u64 / 2) {
            assert_eq!(pop_value(&ring), v);
        }
        for lap in 0..3u64 {
            for v in 0..cap as u64 {
                ring.try_push(lap * 1_000_000 + v).unwrap();
            }
            for v in 0..cap as u64 {
                assert_eq!(pop_value(&ring), lap * 1_000_000 + v);
            }
        }
        assert!(ring.is_empty());
    }

    /// The first two steps, which no step's push runs ahead into, are faulted in by the
    /// push of the lead index, and not before: a large ring used for a handful of
    /// values pays nothing. Without it, a fresh `bounded(1_000_000)` given 5,000 values
    /// took two faults a page (a stamp read mapped the zero page, the write then
    /// copied it and flushed the other cores' TLBs): 28,109 faults in 700 such
    /// channels, 2,912 with it.
    #[test]
    fn the_first_two_steps_are_faulted_in_at_the_lead_index() {
        let cap = 600_000;
        let ring = Ring::<u64>::new(cap);
        let step = ring.prefault_step;
        let lead = Ring::<u64>::lead(step);
        assert!(lead > 1 && lead < step);
        for v in 0..lead as u64 {
            ring.try_push(v).unwrap();
        }
        #[cfg(target_os = "linux")]
        if crate::base::prefault::linux_supported() {
            assert!(!resident(&ring, 2 * step - 1, 2 * step));
            ring.try_push(lead as u64).unwrap();
            assert!(resident(&ring, 0, 2 * step));
            assert!(!resident(&ring, 2 * step, 2 * step + 1));
        }
    }

    /// Whether the pages of slots `from..to`'s stamps are resident.
    #[cfg(target_os = "linux")]
    fn resident<T>(ring: &Ring<T>, from: usize, to: usize) -> bool {
        let page = 4096usize;
        let start = std::ptr::from_ref(ring.at(2 * from).stamp) as usize & !(page - 1);
        let end = std::ptr::from_ref(ring.at(2 * (to - 1)).stamp) as usize + 8;
        let pages = (end - start).div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: the range lies within the stamps' pages; `vec` has a byte each.
        let r =
            unsafe { libc::mincore(start as *mut libc::c_void, pages * page, vec.as_mut_ptr()) };
        r == 0 && vec.iter().all(|b| b & 1 != 0)
    }

    /// A joint ring within `POPULATE_MAX_BYTES` is faulted in whole at creation (where
    /// the kernel takes the advice), and needs no prefault as values arrive.
    #[test]
    fn joint_rings_of_moderate_size_start_resident() {
        let cap = 300_000;
        let ring = Ring::<u64>::new(cap);
        const { assert!(Ring::<u64>::JOINT) };
        const { assert!(!Ring::<[u8; 512]>::JOINT) };
        assert_eq!(ring.prefault_step, 0);
        #[cfg(target_os = "linux")]
        if crate::base::prefault::linux_supported() {
            assert!(resident(&ring, 0, cap));
        }
        for v in 0..cap as u64 {
            ring.try_push(v).unwrap();
        }
        for v in 0..cap as u64 {
            assert_eq!(pop_value(&ring), v);
        }
    }

    /// Records its id in a shared log when dropped, and panics if told to.
    #[derive(Debug)]
    struct Noisy {
        id: usize,
        panics: bool,
        log: Arc<Mutex<Vec<usize>>>,
    }

    impl Drop for Noisy {
        fn drop(&mut self) {
            self.log.lock().unwrap().push(self.id);
            if self.panics {
                panic!("drop of value {}", self.id);
            }
        }
    }

    fn noisy(id: usize, panics: bool, log: &Arc<Mutex<Vec<usize>>>) -> Noisy {
        Noisy {
            id,
            panics,
            log: log.clone(),
        }
    }

    /// A ring dropped after any use gives its zeroed arrays back clean, and the next
    /// ring of its size on this thread (which takes them) behaves as a fresh one: for
    /// joint slots (`u64`) and apart stamps (`[u8; 100]`), after part of a first lap,
    /// exactly one lap, several laps, a close, and with values left in it. (Debug
    /// builds also check that a block taken from the clean cache is all zeroes.)
    #[test]
    fn a_ring_made_from_a_recycled_block_starts_fresh() {
        fn check<T: Clone + PartialEq + std::fmt::Debug>(make: impl Fn(usize) -> T) {
            const CAP: usize = 6;
            for (pushes, pops, close) in [
                (0, 0, false),
                (1, 0, false),
                (3, 2, false),
                (CAP, CAP, false),
                (CAP, 1, true),
                (4 * CAP + 3, 4 * CAP, false),
                (2 * CAP + 5, 2 * CAP + 2, true),
            ] {
                let used = Ring::new(CAP);
                for i in 0..pushes {
                    if used.try_push(make(i)).is_err() {
                        drop(pop_value(&used));
                        used.try_push(make(i)).unwrap();
                    }
                }
                for _ in 0..pops {
                    let _ = used.try_pop();
                }
                if close {
                    used.close();
                }
                drop(used);
                let fresh = Ring::new(CAP);
                assert!(fresh.is_empty() && !fresh.is_closed());
                assert!(!fresh.head_written(), "after {pushes} pushes");
                assert_eq!(fresh.try_pop(), Pop::Empty, "after {pushes} pushes");
                for lap in 0..3 {
                    for i in 0..CAP {
                        fresh.try_push(make(1000 * lap + i)).unwrap();
                    }
                    assert!(matches!(fresh.try_push(make(0)), Err(PushError::Full(_))));
                    for i in 0..CAP {
                        assert_eq!(pop_value(&fresh), make(1000 * lap + i));
                    }
                    assert_eq!(fresh.try_pop(), Pop::Empty);
                }
            }
        }
        check(|i| i as u64);
        const { assert!(Ring::<u64>::JOINT && !Ring::<[u8; 100]>::JOINT) };
        check(|i| [i as u8; 100]);
    }

    /// A ring long enough to be mapped, dropped after part of a first lap, leaves its
    /// mapping to the next ring of its size on this thread (`Zeroed::recycle`), which
    /// must start fresh: no value, no written stamp, every slot pushable in order.
    #[test]
    fn a_mapped_ring_made_from_a_recycled_mapping_starts_fresh() {
        const CAP: usize = 1 << 17; // 2 MiB of joint slots: mapped.
        for (pushes, pops) in [(1, 0), (3_000, 1_000), (5_000, 5_000)] {
            let used = Ring::<u64>::new(CAP);
            let at = used.slots.as_ptr() as usize;
            for i in 0..pushes {
                used.try_push(i as u64 + 1).unwrap();
            }
            for _ in 0..pops {
                pop_value(&used);
            }
            drop(used);
            let fresh = Ring::<u64>::new(CAP);
            assert_eq!(
                fresh.slots.as_ptr() as usize,
                at,
                "the mapping was not reused"
            );
            assert!(fresh.is_empty() && !fresh.head_written());
            assert_eq!(fresh.try_pop(), Pop::Empty, "after {pushes} pushes");
            for i in 0..2 * pushes + 7 {
                fresh.try_push(7 * i as u64).unwrap();
            }
            for i in 0..2 * pushes + 7 {
                assert_eq!(pop_value(&fresh), 7 * i as u64);
            }
            assert_eq!(fresh.try_pop(), Pop::Empty);
        }
    }

    #[test]
    fn drop_drops_what_is_left_exactly_once() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let ring = Ring::new(4);
        // Move head and tail past the lap boundary first.
        for id in 100..103 {
            ring.try_push(noisy(id, false, &log)).unwrap();
            drop(pop_value(&ring));
        }
        for id in 0..4 {
            ring.try_push(noisy(id, false, &log)).unwrap();
        }
        drop(pop_value(&ring));
        assert_eq!(*log.lock().unwrap(), [100, 101, 102, 0]);
        drop(ring);
        assert_eq!(*log.lock().unwrap(), [100, 101, 102, 0, 1, 2, 3]);
    }

    #[test]
    fn a_panicking_drop_leaks_the_rest() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let ring = Ring::new(4);
        ring.try_push(noisy(0, false, &log)).unwrap();
        ring.try_push(noisy(1, true, &log)).unwrap();
        ring.try_push(noisy(2, false, &log)).unwrap();
        let result = catch_unwind(AssertUnwindSafe(move || drop(ring)));
        assert!(result.is_err(), "the value's panic reaches the dropper");
        // 0 dropped, 1 dropped (and panicked), 2 leaked; nothing dropped twice.
        assert_eq!(*log.lock().unwrap(), [0, 1]);
    }

    /// Panics instead of hanging if a stress test stops making progress.
    fn pause(deadline: Instant, what: &str) {
        assert!(Instant::now() < deadline, "stress test stuck: {what}");
        thread::yield_now();
    }

    /// Pushes `v`, pausing while the ring is full.
    fn push_until_taken<T>(ring: &Ring<T>, mut v: T, deadline: Instant) {
        loop {
            match ring.try_push(v) {
                Ok(()) => return,
                Err(PushError::Full(back)) => v = back,
                Err(PushError::Closed(_)) => unreachable!("never closed"),
            }
            pause(deadline, "push");
        }
    }

    /// 4 producers and 4 consumers move `per_producer * 4` distinct values through a
    /// ring of `cap`; every value must arrive exactly once.
    fn stress(cap: usize, per_producer: usize) {
        const PRODUCERS: usize = 4;
        const CONSUMERS: usize = 4;
        let total = PRODUCERS * per_producer;
        let ring = Arc::new(Ring::new(cap));
        let seen: Arc<Vec<AtomicU8>> = Arc::new((0..total).map(|_| AtomicU8::new(0)).collect());
        let popped = Arc::new(AtomicUsize::new(0));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut threads = Vec::new();
        for p in 0..PRODUCERS {
            let ring = ring.clone();
            threads.push(thread::spawn(move || {
                for i in 0..per_producer {
                    push_until_taken(&ring, p * per_producer + i, deadline);
                }
            }));
        }
        for _ in 0..CONSUMERS {
            let (ring, seen, popped) = (ring.clone(), seen.clone(), popped.clone());
            threads.push(thread::spawn(move || {
                while popped.load(Relaxed) < total {
                    match ring.try_pop() {
                        Pop::Value(v) => {
                            seen[v].fetch_add(1, Relaxed);
                            popped.fetch_add(1, Relaxed);
                        }
                        Pop::Empty | Pop::Busy => pause(deadline, "pop"),
                    }
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(popped.load(Relaxed), total);
        let wrong: Vec<_> = (0..total).filter(|&v| seen[v].load(Relaxed) != 1).collect();
        assert!(wrong.is_empty(), "values not seen exactly once: {wrong:?}");
        assert!(ring.is_empty());
        assert_eq!(ring.try_pop(), Pop::Empty);
    }

    #[test]
    fn stress_cap_1() {
        stress(1, 10_000);
    }

    #[test]
    fn stress_cap_4() {
        stress(4, 25_000);
    }

    #[test]
    fn stress_cap_64() {
        stress(64, 50_000);
    }

    /// Pushes race a close: every push that succeeded is popped exactly once, every one
    /// that failed got its own value back as `Closed`.
    #[test]
    fn close_under_load() {
        let ring = Arc::new(Ring::new(4));
        let stop = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(60);
        let claimed = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..2usize)
            .map(|p| {
                let (ring, claimed) = (ring.clone(), claimed.clone());
                thread::spawn(move || {
                    let (mut pushed, mut refused) = (Vec::new(), 0);
                    for i in 0..20_000usize {
                        let v = p * 20_000 + i;
                        let mut w = v;
                        loop {
                            match ring.try_push(w) {
                                Ok(()) => {
                                    pushed.push(v);
                                    claimed.fetch_add(1, Relaxed);
                                    break;
                                }
                                Err(PushError::Full(back)) => w = back,
                                Err(PushError::Closed(back)) => {
                                    assert_eq!(back, v);
                                    refused += 1;
                                    break;
                                }
                            }
                            pause(deadline, "push");
                        }
                    }
                    (pushed, refused)
                })
            })
            .collect();
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (ring, stop) = (ring.clone(), stop.clone());
                thread::spawn(move || {
                    let mut got = Vec::new();
                    loop {
                        match ring.try_pop() {
                            Pop::Value(v) => got.push(v),
                            Pop::Busy => pause(deadline, "busy"),
                            Pop::Empty if stop.load(SeqCst) => return got,
                            Pop::Empty => pause(deadline, "pop"),
                        }
                    }
                })
            })
            .collect();
        while claimed.load(Relaxed) < 1000 {
            pause(deadline, "first values");
        }
        ring.close();
        let mut pushed = Vec::new();
        let mut refused = 0;
        for t in producers {
            let (p, r) = t.join().unwrap();
            pushed.extend(p);
            refused += r;
        }
        // Every push has returned: no claim is in progress, so Empty now means drained.
        stop.store(true, SeqCst);
        let mut got: Vec<usize> = consumers
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        got.sort_unstable();
        pushed.sort_unstable();
        assert_eq!(got, pushed);
        assert_eq!(pushed.len() + refused, 40_000);
        assert!(refused > 0, "the close came before the producers finished");
    }

    /// Shapes at the edges of the joint layout (review): over-aligned and zero-sized
    /// values included.
    #[repr(align(32))]
    struct Align32([u8; 32]);
    #[repr(align(64))]
    struct ZstAlign64;
    #[repr(align(64))]
    #[allow(dead_code)] // only its shape matters
    struct Align64([u8; 64]);
    #[repr(align(8192))]
    #[allow(dead_code)] // only its shape matters
    struct Align8192(u8);

    #[test]
    fn review_joint_for_exactly_the_small_slots() {
        const {
            assert!(Ring::<()>::JOINT);
            assert!(Ring::<u8>::JOINT);
            assert!(Ring::<[u8; 56]>::JOINT);
            assert!(!Ring::<[u8; 57]>::JOINT);
            assert!(Ring::<[u64; 7]>::JOINT);
            assert!(!Ring::<[u64; 8]>::JOINT);
            assert!(Ring::<Align32>::JOINT);
            assert!(Ring::<ZstAlign64>::JOINT);
            assert!(!Ring::<Align64>::JOINT);
            assert!(!Ring::<Align8192>::JOINT);
        }
        assert_eq!(std::mem::size_of::<Slot<Align32>>(), 64);
        assert_eq!(std::mem::size_of::<Slot<ZstAlign64>>(), 64);
    }

    /// Each layout's arrays: the used ones `cap` long, the unused ones empty, and
    /// every one (empty boxes, boxed and mapped slot arrays) aligned for its element.
    fn review_arrays<T>(cap: usize) {
        fn aligned<E>(a: &[E]) -> bool {
            (a.as_ptr() as usize).is_multiple_of(std::mem::align_of::<E>())
        }
        let ring = Ring::<T>::new(cap);
        let (slots, stamps, values) = if Ring::<T>::JOINT {
            (cap, 0, 0)
        } else {
            (0, cap, cap)
        };
        assert_eq!(ring.slots.len(), slots, "cap {cap}");
        assert_eq!(ring.stamps.len(), stamps, "cap {cap}");
        assert_eq!(ring.values.len(), values, "cap {cap}");
        assert!(aligned(&ring.slots), "cap {cap}: slots");
        assert!(aligned(&ring.stamps), "cap {cap}: stamps");
        assert!(aligned(&ring.values), "cap {cap}: values");
        for i in [0, cap / 2, cap - 1] {
            assert_eq!(
                ring.at(2 * i).stamp.load(Relaxed),
                0,
                "cap {cap}: stamp {i}"
            );
        }
    }

    #[test]
    fn review_arrays_have_their_lengths_and_alignment() {
        // Boxed; boxed and populated; mapped and populated; mapped and lazy.
        for cap in [1, 3, 5_000, 16_384, 131_072, 140_000] {
            review_arrays::<Align32>(cap);
            review_arrays::<ZstAlign64>(cap);
            review_arrays::<[u8; 56]>(cap);
        }
        for cap in [1, 3, 1 << 17] {
            review_arrays::<()>(cap);
            review_arrays::<Align64>(cap);
            review_arrays::<Align8192>(cap);
        }
    }

    /// Neighbouring joint slots (stamp, value, stamp, value...) keep their values
    /// whole while a producer and a consumer run laps over a small ring: a value write
    /// that spilled onto a neighbour's stamp, or the reverse, would tear a value or
    /// stall the ring. Small enough for Miri.
    #[test]
    fn review_joint_neighbours_stay_whole() {
        fn run<T: Send + 'static>(make: fn(usize) -> T, check: fn(&T) -> usize, n: usize) {
            let ring = Arc::new(Ring::<T>::new(3));
            let deadline = Instant::now() + Duration::from_secs(60);
            let producer = {
                let ring = ring.clone();
                thread::spawn(move || {
                    for i in 0..n {
                        push_until_taken(&ring, make(i), deadline);
                    }
                })
            };
            let mut next = 0;
            while next < n {
                match ring.try_pop() {
                    Pop::Value(v) => {
                        assert_eq!(check(&v), next % 251);
                        next += 1;
                    }
                    Pop::Empty | Pop::Busy => pause(deadline, "pop"),
                }
            }
            producer.join().unwrap();
            assert!(ring.is_empty());
        }
        let n = if cfg!(miri) { 40 } else { 20_000 };
        run(
            |i| [(i % 251) as u8; 56],
            |v| {
                assert!(v.iter().all(|&b| b == v[0]), "torn");
                v[0] as usize
            },
            n,
        );
        run(
            |i| Align32([(i % 251) as u8; 32]),
            |v| {
                assert!(v.0.iter().all(|&b| b == v.0[0]), "torn");
                v.0[0] as usize
            },
            n,
        );
        run(
            |i| ((i % 251) as u8, !((i % 251) as u64)),
            |v| {
                assert_eq!(v.1, !(v.0 as u64), "torn");
                v.0 as usize
            },
            n,
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::atomic::Ordering::SeqCst;

    use loom::sync::atomic::AtomicBool;
    use loom::thread;

    use super::*;
    use crate::base::{fence, Arc};

    /// Pushes `v`, yielding to the other threads while the ring is full.
    fn push(ring: &Ring<u32>, mut v: u32) {
        loop {
            match ring.try_push(v) {
                Ok(()) => return,
                Err(PushError::Full(back)) => v = back,
                Err(PushError::Closed(_)) => panic!("never closed"),
            }
            thread::yield_now();
        }
    }

    /// Pops one value, yielding to the other threads until there is one.
    fn pop(ring: &Ring<u32>) -> u32 {
        loop {
            match ring.try_pop() {
                Pop::Value(v) => return v,
                Pop::Busy => assert!(!ring.is_empty(), "Busy means a claimed push"),
                Pop::Empty => {}
            }
            thread::yield_now();
        }
    }

    /// Two producers race for one slot while a consumer drains it. Every thread makes a
    /// bounded number of attempts (two threads spinning on a third one that is stopped
    /// mid-operation would ping-pong for ever under loom), then the main thread drains
    /// what is left: every accepted value arrives exactly once, and every answer agrees
    /// with the state it claims.
    #[test]
    fn loom_two_producers_one_consumer_cap_1() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(1));
            let producers: Vec<_> = [1, 2]
                .into_iter()
                .map(|v| {
                    let ring = ring.clone();
                    thread::spawn(move || {
                        for _ in 0..2 {
                            match ring.try_push(v) {
                                Ok(()) => return true,
                                Err(PushError::Full(back)) => {
                                    assert_eq!(back, v);
                                    // One slot, not claimed by this push: the other
                                    // producer has claimed it.
                                    assert_ne!(ring.tail.load(SeqCst), 0, "Full before any claim");
                                }
                                Err(PushError::Closed(_)) => panic!("never closed"),
                            }
                            thread::yield_now();
                        }
                        false
                    })
                })
                .collect();
            let mut got = Vec::new();
            for _ in 0..3 {
                match ring.try_pop() {
                    Pop::Value(v) => got.push(v),
                    Pop::Busy => assert!(!ring.is_empty(), "Busy means a claimed push"),
                    Pop::Empty => {}
                }
                thread::yield_now();
            }
            let accepted: Vec<bool> = producers.into_iter().map(|p| p.join().unwrap()).collect();
            // No push is in flight any more: what is left is all there to take.
            loop {
                match ring.try_pop() {
                    Pop::Value(v) => got.push(v),
                    Pop::Empty => break,
                    Pop::Busy => panic!("Busy with no push in flight"),
                }
            }
            got.sort_unstable();
            let expected: Vec<u32> = [1, 2]
                .into_iter()
                .zip(&accepted)
                .filter_map(|(v, &ok)| ok.then_some(v))
                .collect();
            assert_eq!(got, expected, "accepted values, each exactly once");
            // A push only finds the slot taken once the other push has claimed it.
            assert!(accepted.contains(&true), "both pushes refused");
            assert!(ring.is_empty() && !ring.is_full());
            assert_eq!(ring.len(), 0);
        });
    }

    /// Two consumers take with `try_pop_written_into` (a blocking receive's first try)
    /// while a producer pushes two values: a `true` always moved a whole value, no
    /// value is taken twice, and what they leave the main thread drains afterwards.
    #[test]
    fn loom_pop_written_races_a_producer_and_a_consumer() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(2));
            let producer = {
                let ring = ring.clone();
                thread::spawn(move || {
                    push(&ring, 1);
                    push(&ring, 2);
                })
            };
            let consumer = {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..2 {
                        let mut out = MaybeUninit::uninit();
                        if ring.try_pop_written_into(&mut out) {
                            // SAFETY: `true`: `out` holds the value.
                            got.push(unsafe { out.assume_init() });
                        }
                        thread::yield_now();
                    }
                    got
                })
            };
            let mut got = Vec::new();
            let mut out = MaybeUninit::uninit();
            if ring.try_pop_written_into(&mut out) {
                // SAFETY: as above.
                got.push(unsafe { out.assume_init() });
            }
            producer.join().unwrap();
            got.extend(consumer.join().unwrap());
            while !ring.is_empty() {
                got.push(pop(&ring));
            }
            got.sort_unstable();
            assert_eq!(got, [1, 2], "each value exactly once");
        });
    }

    /// The models on `Ring<u32>` exercise the joint layout: loom's atomics and cells are
    /// larger than `std`'s, so this is not a given (review).
    #[test]
    fn loom_models_use_the_joint_layout() {
        const {
            assert!(
                Ring::<u32>::JOINT,
                "under loom a Slot<u32> is over 64 bytes"
            )
        };
    }

    /// The split layout (large values apart from their stamps) under the same
    /// protocol: a producer and a consumer over two laps of a one-slot ring.
    #[test]
    fn loom_split_layout_two_laps() {
        type Big = [u32; 32];
        const { assert!(!Ring::<Big>::JOINT) };
        loom::model(|| {
            let ring = Arc::new(Ring::<Big>::new(1));
            let producer = {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut v = 0;
                    while v < 2 {
                        match ring.try_push([v; 32]) {
                            Ok(()) => v += 1,
                            Err(PushError::Full(_)) => thread::yield_now(),
                            Err(PushError::Closed(_)) => panic!("never closed"),
                        }
                    }
                })
            };
            let mut got = Vec::new();
            while got.len() < 2 {
                match ring.try_pop() {
                    Pop::Value(b) => {
                        assert!(b.iter().all(|&x| x == b[0]), "a torn value");
                        got.push(b[0]);
                    }
                    Pop::Busy | Pop::Empty => thread::yield_now(),
                }
            }
            producer.join().unwrap();
            assert_eq!(got, [0, 1]);
        });
    }

    /// A receiver that pops only when `head_written` says so, against a producer
    /// filling two slots over two laps: `head_written` never claims a value that is
    /// not there to take, and every value arrives exactly once, in order.
    #[test]
    fn loom_head_written_against_push() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(2));
            let producer = {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut sent = 0;
                    for v in 0..3u32 {
                        for _ in 0..2 {
                            if ring.try_push(v).is_ok() {
                                sent += 1;
                                break;
                            }
                            thread::yield_now();
                        }
                        if sent as u32 != v + 1 {
                            break;
                        }
                    }
                    sent
                })
            };
            let mut got = Vec::new();
            for _ in 0..3 {
                if ring.head_written() {
                    // Only this thread pops: a written head stays until it takes it.
                    match ring.try_pop() {
                        Pop::Value(v) => got.push(v),
                        other => panic!("head_written, but {other:?}"),
                    }
                }
                thread::yield_now();
            }
            let sent = producer.join().unwrap();
            while let Pop::Value(v) = ring.try_pop() {
                got.push(v);
            }
            assert_eq!(got, (0..sent as u32).collect::<Vec<_>>());
            assert!(ring.is_empty());
        });
    }

    /// Two consumers race for the values of one producer through one slot, so their
    /// pops contend on `head` across a lap boundary: each value is taken once, and each
    /// consumer sees the values in order.
    #[test]
    fn loom_one_producer_two_consumers_cap_1() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(1));
            let producer = {
                let ring = ring.clone();
                thread::spawn(move || {
                    assert_eq!(ring.try_push(1), Ok(()));
                    match ring.try_push(2) {
                        Ok(()) => true,
                        Err(e) => {
                            assert_eq!(e, PushError::Full(2));
                            false
                        }
                    }
                })
            };
            let consumer = || {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut got = Vec::new();
                    if let Pop::Value(v) = ring.try_pop() {
                        got.push(v);
                    }
                    if let Pop::Value(v) = ring.try_pop() {
                        got.push(v);
                    }
                    got
                })
            };
            let consumers = [consumer(), consumer()];
            let pushed_2 = producer.join().unwrap();
            let mut all = Vec::new();
            for c in consumers {
                let got = c.join().unwrap();
                assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
                all.extend(got);
            }
            loop {
                match ring.try_pop() {
                    Pop::Value(v) => all.push(v),
                    Pop::Empty => break,
                    Pop::Busy => panic!("Busy with no push in flight"),
                }
            }
            all.sort_unstable();
            assert_eq!(all, if pushed_2 { vec![1, 2] } else { vec![1] });
        });
    }

    #[test]
    fn loom_one_producer_one_consumer_wrap_cap_2() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(2));
            let producer = {
                let ring = ring.clone();
                thread::spawn(move || {
                    for v in 0..3 {
                        push(&ring, v);
                    }
                })
            };
            let got = [pop(&ring), pop(&ring), pop(&ring)];
            producer.join().unwrap();
            assert_eq!(got, [0, 1, 2]);
            assert_eq!(ring.try_pop(), Pop::Empty);
        });
    }

    #[test]
    fn loom_close_races_push() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(2));
            let pusher = {
                let ring = ring.clone();
                thread::spawn(move || ring.try_push(7))
            };
            assert!(ring.close());
            // A push that claimed its slot before the mark may still be writing it.
            let early = ring.try_pop();
            let pushed = pusher.join().unwrap();
            assert!(ring.is_closed());
            assert_eq!(ring.try_push(8), Err(PushError::Closed(8)));
            match pushed {
                // The mark's `fetch_or` read the claim, so the claim happened before the
                // early pop: it finds the value or the push still writing it.
                Ok(()) => match early {
                    Pop::Value(v) => {
                        assert_eq!(v, 7);
                        assert_eq!(ring.try_pop(), Pop::Empty);
                    }
                    Pop::Busy => assert_eq!(ring.try_pop(), Pop::Value(7)),
                    Pop::Empty => panic!("a push claimed before the mark was not seen"),
                },
                Err(e) => {
                    assert_eq!(e, PushError::Closed(7));
                    assert_eq!(early, Pop::Empty);
                    assert_eq!(ring.try_pop(), Pop::Empty);
                }
            }
            assert!(ring.is_empty());
        });
    }

    /// The caller's contract: a producer's `try_push; fence; load flag` against a
    /// registering receiver's `store flag; fence; is_empty()` (and `try_pop()`): at least
    /// one of them sees the other.
    #[test]
    fn loom_dekker_push_against_waiter() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(1));
            let waiting = Arc::new(AtomicBool::new(false));
            let producer = {
                let (ring, waiting) = (ring.clone(), waiting.clone());
                thread::spawn(move || {
                    assert_eq!(ring.try_push(1), Ok(()));
                    fence(SeqCst);
                    waiting.load(Relaxed)
                })
            };
            waiting.store(true, Relaxed);
            fence(SeqCst);
            let empty = ring.is_empty();
            let popped = ring.try_pop();
            let saw_waiter = producer.join().unwrap();
            assert!(saw_waiter || !empty, "lost wakeup: is_empty");
            assert!(
                saw_waiter || popped == Pop::Value(1),
                "lost wakeup: try_pop"
            );
        });
    }

    /// The mirror image: a consumer's `try_pop; fence; load flag` against a registering
    /// sender's `store flag; fence; is_full()` (and `try_push()`), including the `Full`
    /// a push meets while the pop is still reading out the slot.
    #[test]
    fn loom_dekker_pop_against_waiting_sender() {
        loom::model(|| {
            let ring = Arc::new(Ring::new(1));
            ring.try_push(1).unwrap();
            let waiting = Arc::new(AtomicBool::new(false));
            let consumer = {
                let (ring, waiting) = (ring.clone(), waiting.clone());
                thread::spawn(move || {
                    assert_eq!(ring.try_pop(), Pop::Value(1));
                    fence(SeqCst);
                    waiting.load(Relaxed)
                })
            };
            waiting.store(true, Relaxed);
            fence(SeqCst);
            let full = ring.is_full();
            let pushed = ring.try_push(2);
            let saw_sender = consumer.join().unwrap();
            assert!(saw_sender || !full, "lost wakeup: is_full");
            assert!(saw_sender || pushed.is_ok(), "lost wakeup: try_push");
        });
    }
}
