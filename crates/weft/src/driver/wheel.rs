//! The hierarchical timer wheel behind the time driver: a plain data structure that the
//! driver keeps behind its lock, so nothing here is atomic or shared.
//!
//! Time is counted in milliseconds since the driver's epoch. There are six levels of 64
//! slots; a slot of level `L` spans `64^L` ms, so level 0 resolves single milliseconds
//! and the six levels together span `2^36` ms (about two years). A timer lives in the
//! level given by the highest bit in which its deadline differs from the wheel's current
//! time, which puts near deadlines in fine slots and far ones in coarse slots, each at a
//! cost of O(1) to file.
//!
//! The invariant everything rests on: an entry in level `L` agrees with `elapsed` on
//! every bit above level `L` and has a strictly larger level-`L` digit. The only
//! exception is the top level, which may also hold deadlines in the *next* `2^36` ms
//! block (deadlines are clamped to less than `2^36` ms ahead, so never further); those
//! sit at a digit at or below the current one and are found by searching the top level's
//! slots circularly. Two things follow:
//!
//! - every slot of a lower level ends before any slot of a higher level begins, so the
//!   earliest slot is the first occupied one (found with a bitmap) in the lowest
//!   non-empty level: O(levels);
//! - when time reaches the start of a slot of level `L > 0`, its entries differ from the
//!   new time only below level `L`, so re-filing them (cascading) moves each strictly
//!   down. An entry is therefore touched at most once per level on its way to firing.
//!
//! `advance` jumps from one occupied slot start to the next instead of walking every
//! millisecond, so an idle gap of any length costs only the slots that hold timers.
//!
//! Entries live in a slab (a `Vec` and a free list threaded through it) and are linked
//! into their slot by `u32` indices in both directions, so removal needs neither a
//! search nor a pointer. Keys carry the slot's generation, bumped whenever a slot is
//! freed, so a key kept past its timer's firing or removal is recognised as stale even
//! after the slot is reused (barring 2^32 reuses of one slot between two looks).
//!
//! (Over 600 lines with its unit tests, which are half the file.)

use std::task::Waker;

use crate::task::waker::Prepared;

/// Bits of a deadline consumed by each level.
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
const SLOT_MASK: u64 = SLOTS as u64 - 1;
const LEVELS: usize = 6;
/// How far ahead of `elapsed` a deadline may lie; the top level can tell apart only
/// this many milliseconds (its current `2^36` block and the next one, circularly).
const MAX_SPAN: u64 = 1 << (SLOT_BITS as usize * LEVELS);
/// The end of a list, and the empty free list.
const NIL: u32 = u32::MAX;

/// Identifies an entry; stale keys (entry fired or removed, slot reused) are detected by
/// the generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerKey {
    index: u32,
    generation: u32,
}

/// Which list an entry is linked into, so that unlinking it knows which head to fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// On the free list: not a timer.
    Free,
    /// Deadline already reached; fires at the next `advance`.
    Due,
    Slot {
        level: u8,
        slot: u8,
    },
}

struct Entry {
    /// Already clamped to `MAX_SPAN` past the time of insertion.
    deadline: u64,
    /// `None` only while the entry is free.
    waker: Option<Waker>,
    prev: u32,
    /// Also the free-list link while the entry is free.
    next: u32,
    generation: u32,
    place: Place,
}

pub(crate) struct Wheel {
    elapsed: u64,
    entries: Vec<Entry>,
    /// Head of the free list through `Entry::next`.
    free: u32,
    len: usize,
    /// Entries whose deadline had already passed when they were filed. They cannot go
    /// into a slot (every slot lies strictly in the future), and the caller expects them
    /// to fire at the next `advance` even if time does not move.
    due: u32,
    heads: [[u32; SLOTS]; LEVELS],
    /// Bit `s` of `occupied[L]` is set exactly when `heads[L][s]` is not `NIL`.
    occupied: [u64; LEVELS],
}

impl Wheel {
    /// The wheel's clock starts at 0, the driver's epoch: every time given to it is in ms
    /// since then, so the driver keeps the one `Instant` that converts.
    pub(crate) fn new() -> Wheel {
        Wheel {
            elapsed: 0,
            entries: Vec::new(),
            free: NIL,
            len: 0,
            due: NIL,
            heads: [[NIL; SLOTS]; LEVELS],
            occupied: [0; LEVELS],
        }
    }

    /// Current time of the wheel in ms (the last `advance` target). New deadlines are
    /// filed relative to it, so it is the origin the caller should measure from.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Registers a timer for `deadline` (ms). A deadline <= elapsed() fires at the next
    /// advance. A deadline more than `2^36 - 1` ms ahead is brought forward to that
    /// distance, because the wheel cannot represent it; such a timer fires early, but
    /// two years early is a price no caller of a runtime timer pays in practice.
    pub(crate) fn insert(&mut self, deadline: u64, waker: Waker) -> TimerKey {
        let index = self.alloc(self.clamp(deadline), waker);
        self.link(index);
        TimerKey {
            index,
            generation: self.entries[index as usize].generation,
        }
    }

    /// Cancels; returns the entry's waker if it was still pending (not fired), for the
    /// caller to drop after releasing its lock (dropping a waker can run arbitrary code,
    /// even code that cancels another timer). O(1), because the entry records its list
    /// and both neighbours.
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<Waker> {
        let index = self.lookup(key)?;
        self.unlink(index);
        self.release(index)
    }

    /// Moves a pending entry to a new deadline (O(1)) and keeps its key, so that a
    /// re-armed timer (a sleep reset by its owner) does not churn the slab. If the entry
    /// already fired or the key is stale, inserts anew. Returns the (possibly new) key.
    /// The replaced waker is returned for the caller to drop outside its lock.
    pub(crate) fn reset(
        &mut self,
        key: TimerKey,
        deadline: u64,
        waker: Waker,
    ) -> (TimerKey, Option<Waker>) {
        match self.lookup(key) {
            Some(index) => {
                self.relink(index, deadline);
                (key, self.entries[index as usize].waker.replace(waker))
            }
            None => (self.insert(deadline, waker), None),
        }
    }

    /// Moves pending entry `index` to `deadline` on the wheel.
    fn relink(&mut self, index: u32, deadline: u64) {
        self.unlink(index);
        self.entries[index as usize].deadline = self.clamp(deadline);
        self.link(index);
    }

    /// Moves a pending entry to a new deadline (O(1)), keeping its key and its waker:
    /// a sleep reset by a thread other than its waiter's, which has no waker to give.
    /// False if the entry fired already or the key is stale.
    pub(crate) fn reschedule(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(index) = self.lookup(key) else {
            return false;
        };
        self.relink(index, deadline);
        true
    }

    /// Replaces the waker of a pending entry ([`Prepared::store`]: kept when it wakes the
    /// same task). `Err(())` if fired or stale; otherwise the replaced waker, for the
    /// caller to drop outside its lock.
    pub(crate) fn set_waker(
        &mut self,
        key: TimerKey,
        waker: &mut Prepared<'_>,
    ) -> Result<Option<Waker>, ()> {
        let index = self.lookup(key).ok_or(())?;
        let stored = &mut self.entries[index as usize].waker;
        assert!(stored.is_some(), "a pending entry has a waker");
        Ok(waker.store(stored))
    }

    /// True if the entry is still pending (registered and not yet fired).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_pending(&self, key: TimerKey) -> bool {
        self.lookup(key).is_some()
    }

    /// Earliest deadline (ms) among pending entries, or a lower bound for it that is
    /// never earlier than elapsed(); None if empty.
    ///
    /// It is exact when the earliest timer is in level 0 (within 64 ms of `elapsed`).
    /// Otherwise it is the start of the earliest occupied coarse slot, which keeps this
    /// O(levels) instead of a walk over the slot's list: a caller that sleeps until then
    /// and advances cascades that slot, and the next answer is finer. That costs at most
    /// one early wake-up per level on the way to a far deadline, and never a late one.
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if self.due != NIL {
            return Some(self.elapsed);
        }
        self.next_slot().map(|(_, _, start)| start)
    }

    /// Advances time to `now` (ms, monotonic: a smaller value than elapsed() is treated
    /// as elapsed()), removing every entry whose deadline <= now and pushing its waker to
    /// `fired` (in deadline order is not required). Fired entries' slab slots are freed
    /// (generation bumped) so later calls with their keys see them as not pending.
    ///
    /// Wakers are handed back rather than woken here so that the caller can wake them
    /// after releasing the lock the wheel lives behind.
    pub(crate) fn advance(&mut self, now: u64, fired: &mut Vec<Waker>) {
        let now = now.max(self.elapsed);

        let mut index = std::mem::replace(&mut self.due, NIL);
        while index != NIL {
            let next = self.entries[index as usize].next;
            fired.extend(self.release(index));
            index = next;
        }

        // Visit occupied slots in time order, moving the clock to each slot's start so
        // that the cascaded entries are filed relative to it (and so land lower).
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now {
                break;
            }
            self.elapsed = start;
            self.occupied[level] &= !(1 << slot);
            let mut index = std::mem::replace(&mut self.heads[level][slot], NIL);
            while index != NIL {
                let next = self.entries[index as usize].next;
                if self.entries[index as usize].deadline <= start {
                    fired.extend(self.release(index));
                } else {
                    self.link(index);
                }
                index = next;
            }
        }

        self.elapsed = now;
    }

    /// Removes every pending entry, pushing its waker to `fired` (the driver shuts
    /// down: nothing will advance the wheel any more).
    pub(crate) fn drain(&mut self, fired: &mut Vec<Waker>) {
        for index in 0..self.entries.len() as u32 {
            if self.entries[index as usize].place != Place::Free {
                self.unlink(index);
                fired.extend(self.release(index));
            }
        }
    }

    /// Number of pending entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn clamp(&self, deadline: u64) -> u64 {
        deadline.min(self.elapsed.saturating_add(MAX_SPAN - 1))
    }

    fn lookup(&self, key: TimerKey) -> Option<u32> {
        let entry = self.entries.get(key.index as usize)?;
        (entry.generation == key.generation && entry.place != Place::Free).then_some(key.index)
    }

    /// The earliest occupied slot as `(level, slot, start time)`.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        let level = self.occupied.iter().position(|&bits| bits != 0)?;
        let shift = level as u32 * SLOT_BITS;
        let current = (self.elapsed >> shift) & SLOT_MASK;
        // Search from the slot after the current one, wrapping round. Only the top level
        // ever has an occupied slot at or below `current` (the next block's deadlines).
        let first = u64::from(
            self.occupied[level]
                .rotate_right(current as u32 + 1)
                .trailing_zeros(),
        );
        let slot = (current + 1 + first) & SLOT_MASK;
        let block_bits = shift + SLOT_BITS;
        let block = self.elapsed & !((1u64 << block_bits) - 1);
        let mut start = block + (slot << shift);
        if slot <= current {
            debug_assert_eq!(level, LEVELS - 1, "a lower level holds a past slot");
            // Cannot overflow: an entry is never filed past u64::MAX, so a next block
            // exists whenever one of its slots is occupied.
            start += 1u64 << block_bits;
        }
        Some((level, slot as usize, start))
    }

    /// Files an unlinked entry by its deadline relative to `elapsed`.
    fn link(&mut self, index: u32) {
        let deadline = self.entries[index as usize].deadline;
        let (head, place) = if deadline <= self.elapsed {
            (&mut self.due, Place::Due)
        } else {
            // The highest differing bit picks the level; or-ing in the slot mask maps
            // differences confined to the lowest digit to level 0.
            let differing = (deadline ^ self.elapsed) | SLOT_MASK;
            let level = ((63 - differing.leading_zeros()) / SLOT_BITS).min(LEVELS as u32 - 1);
            let slot = (deadline >> (level * SLOT_BITS)) & SLOT_MASK;
            self.occupied[level as usize] |= 1 << slot;
            let place = Place::Slot {
                level: level as u8,
                slot: slot as u8,
            };
            (&mut self.heads[level as usize][slot as usize], place)
        };
        let old = std::mem::replace(head, index);
        if old != NIL {
            self.entries[old as usize].prev = index;
        }
        let entry = &mut self.entries[index as usize];
        entry.prev = NIL;
        entry.next = old;
        entry.place = place;
    }

    /// Takes a linked entry out of its list, leaving it allocated.
    fn unlink(&mut self, index: u32) {
        let entry = &self.entries[index as usize];
        let (prev, next, place) = (entry.prev, entry.next, entry.place);
        if prev != NIL {
            self.entries[prev as usize].next = next;
        } else {
            match place {
                Place::Due => self.due = next,
                Place::Slot { level, slot } => {
                    let (level, slot) = (level as usize, slot as usize);
                    self.heads[level][slot] = next;
                    if next == NIL {
                        self.occupied[level] &= !(1 << slot);
                    }
                }
                Place::Free => unreachable!("unlinking a free entry"),
            }
        }
        if next != NIL {
            self.entries[next as usize].prev = prev;
        }
    }

    fn alloc(&mut self, deadline: u64, waker: Waker) -> u32 {
        self.len += 1;
        if self.free != NIL {
            let index = self.free;
            let entry = &mut self.entries[index as usize];
            self.free = entry.next;
            entry.deadline = deadline;
            entry.waker = Some(waker);
            return index;
        }
        let index = u32::try_from(self.entries.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("more than 2^32 - 1 timers");
        self.entries.push(Entry {
            deadline,
            waker: Some(waker),
            prev: NIL,
            next: NIL,
            generation: 0,
            place: Place::Free,
        });
        index
    }

    /// Frees an entry that is no longer linked into any timer list (its list was taken
    /// whole, or it was unlinked) and returns its waker.
    fn release(&mut self, index: u32) -> Option<Waker> {
        self.len -= 1;
        let entry = &mut self.entries[index as usize];
        entry.generation = entry.generation.wrapping_add(1);
        entry.place = Place::Free;
        entry.prev = NIL;
        entry.next = self.free;
        self.free = index;
        entry.waker.take()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Count {
        fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        (count, waker)
    }

    /// Advances and wakes what fired, returning how many fired.
    fn step(wheel: &mut Wheel, now: u64) -> usize {
        let mut fired = Vec::new();
        wheel.advance(now, &mut fired);
        let n = fired.len();
        fired.into_iter().for_each(Waker::wake);
        n
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// Spread over every level: a random magnitude, then a random value below it.
        fn spread(&mut self, max_bits: u64) -> u64 {
            let bits = self.below(max_bits + 1);
            self.next() & ((1u64 << bits) - 1)
        }
    }

    /// Checks `next_expiration` against the brute-force earliest deadline.
    fn check_next(wheel: &Wheel, pending: impl Iterator<Item = u64>) {
        let min = pending.min();
        let next = wheel.next_expiration();
        match (next, min) {
            (None, None) => {}
            (Some(next), Some(min)) => {
                assert!(
                    next >= wheel.elapsed(),
                    "{next} before elapsed {}",
                    wheel.elapsed()
                );
                // A deadline already passed is due at once, which reads as `elapsed`.
                let min = min.max(wheel.elapsed());
                assert!(
                    next <= min,
                    "next_expiration {next} past the real deadline {min}"
                );
            }
            other => panic!("next_expiration disagrees on emptiness: {other:?}"),
        }
    }

    #[test]
    fn fires_at_deadline_and_not_before() {
        let mut wheel = Wheel::new();
        let (count, waker) = counter();
        let key = wheel.insert(10, waker);
        assert_eq!(wheel.len(), 1);
        assert_eq!(wheel.next_expiration(), Some(10));
        assert_eq!(step(&mut wheel, 9), 0);
        assert!(wheel.is_pending(key));
        assert_eq!(step(&mut wheel, 10), 1);
        assert_eq!(count.get(), 1);
        assert!(!wheel.is_pending(key));
        assert_eq!(wheel.len(), 0);
        assert_eq!(wheel.next_expiration(), None);
        assert_eq!(wheel.elapsed(), 10);
    }

    #[test]
    fn ten_thousand_random_timers_fire_in_order() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut wheel = Wheel::new();
        let mut timers: Vec<(u64, Arc<Count>, TimerKey)> = (0..10_000)
            .map(|_| {
                let deadline = rng.spread(30);
                let (count, waker) = counter();
                let key = wheel.insert(deadline, waker);
                (deadline, count, key)
            })
            .collect();
        let mut now = 0;
        let mut steps = 0;
        while !timers.is_empty() {
            check_next(&wheel, timers.iter().map(|t| t.0));
            now += rng.spread(26);
            let fired = step(&mut wheel, now);
            steps += 1;
            let before = timers.len();
            timers.retain(|(deadline, count, key)| {
                let due = *deadline <= now;
                assert_eq!(
                    count.get(),
                    usize::from(due),
                    "deadline {deadline} at {now}"
                );
                assert_eq!(wheel.is_pending(*key), !due);
                !due
            });
            assert_eq!(fired, before - timers.len());
            assert_eq!(wheel.len(), timers.len());
        }
        assert!(steps > 50, "the steps should be spread out, took {steps}");
        assert_eq!(wheel.next_expiration(), None);
    }

    /// A driver that only ever sleeps until `next_expiration` must see every timer fire
    /// exactly at its deadline: a lower bound may cost extra turns, never lateness.
    #[test]
    fn sleeping_until_next_expiration_is_never_late() {
        let mut rng = Rng(12345);
        let mut wheel = Wheel::new();
        let mut timers: Vec<(u64, Arc<Count>)> = Vec::new();
        let mut fired_total = 0;
        let mut turns = 0;
        for round in 0..3_000 {
            // Keep adding timers relative to the moving clock, across every level.
            if round < 2_000 {
                for _ in 0..3 {
                    let deadline = wheel.elapsed() + rng.spread(37);
                    let (count, waker) = counter();
                    wheel.insert(deadline, waker);
                    timers.push((wheel.clamp(deadline), count));
                }
            }
            check_next(&wheel, timers.iter().map(|t| t.0));
            let Some(next) = wheel.next_expiration() else {
                break;
            };
            turns += 1;
            fired_total += step(&mut wheel, next);
            timers.retain(|(deadline, count)| {
                if count.get() == 1 {
                    assert_eq!(*deadline, next, "fired at {next}, deadline {deadline}");
                    false
                } else {
                    assert!(*deadline > next);
                    true
                }
            });
        }
        while let Some(next) = wheel.next_expiration() {
            turns += 1;
            fired_total += step(&mut wheel, next);
            timers.retain(|(deadline, count)| {
                if count.get() == 1 {
                    assert_eq!(*deadline, next);
                    false
                } else {
                    true
                }
            });
        }
        assert!(timers.is_empty());
        assert_eq!(fired_total, 6_000);
        // Each timer needs at most one turn per level.
        assert!(turns <= 6_000 * LEVELS, "{turns} turns");
    }

    #[test]
    fn removed_timers_never_fire() {
        let mut wheel = Wheel::new();
        let mut rng = Rng(7);
        let timers: Vec<_> = (0..1_000)
            .map(|_| {
                let (count, waker) = counter();
                let key = wheel.insert(rng.spread(20), waker);
                (count, key)
            })
            .collect();
        for (i, (_, key)) in timers.iter().enumerate() {
            if i % 2 == 0 {
                assert!(wheel.remove(*key).is_some());
                assert!(
                    wheel.remove(*key).is_none(),
                    "second remove of the same key"
                );
            }
        }
        assert_eq!(wheel.len(), 500);
        assert_eq!(step(&mut wheel, u64::MAX), 500);
        for (i, (count, _)) in timers.iter().enumerate() {
            assert_eq!(count.get(), i % 2, "timer {i}");
        }
    }

    /// Removal unlinks by index: removing a crowd from one slot in random order is as
    /// cheap as removing it in order (a list walk would make this quadratic), and the
    /// slot's bit is cleared with its last entry.
    #[test]
    fn remove_from_a_crowded_slot() {
        let mut wheel = Wheel::new();
        let mut keys: Vec<_> = (0..200_000)
            .map(|_| wheel.insert(5_000, counter().1))
            .collect();
        let mut rng = Rng(99);
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for key in keys {
            assert!(wheel.remove(key).is_some());
        }
        assert_eq!(wheel.len(), 0);
        assert_eq!(wheel.next_expiration(), None);
        assert_eq!(wheel.occupied, [0; LEVELS]);
    }

    #[test]
    fn reset_moves_earlier_and_later() {
        let mut wheel = Wheel::new();
        let (count, waker) = counter();
        let key = wheel.insert(100_000, waker.clone());

        let key = wheel.reset(key, 50, waker.clone()).0;
        assert_eq!(wheel.len(), 1);
        assert_eq!(wheel.next_expiration(), Some(50));
        assert_eq!(step(&mut wheel, 49), 0);
        assert!(wheel.is_pending(key));

        let same = wheel.reset(key, 5_000, waker.clone()).0;
        assert_eq!(same, key, "a pending reset keeps its key");
        assert_eq!(step(&mut wheel, 50), 0);
        assert_eq!(step(&mut wheel, 4_999), 0);
        assert_eq!(count.get(), 0);
        assert_eq!(step(&mut wheel, 5_000), 1);
        assert_eq!(count.get(), 1);

        // After firing, reset registers a fresh timer under a fresh key.
        let fresh = wheel.reset(key, 6_000, waker.clone()).0;
        assert_ne!(fresh, key);
        assert!(!wheel.is_pending(key));
        assert!(wheel.is_pending(fresh));
        // Resetting into the past makes it due at once.
        let fresh = wheel.reset(fresh, 10, waker).0;
        assert_eq!(wheel.next_expiration(), Some(5_000));
        assert_eq!(step(&mut wheel, 5_000), 1);
        assert!(!wheel.is_pending(fresh));
        assert_eq!(count.get(), 2);
    }

    #[test]
    fn stale_keys_after_fire_and_remove() {
        let mut wheel = Wheel::new();
        let (old_count, waker) = counter();
        let fired = wheel.insert(1, waker.clone());
        assert_eq!(step(&mut wheel, 1), 1);
        let removed = wheel.insert(100, waker.clone());
        assert!(wheel.remove(removed).is_some());
        // Both slots are reused by the next insertions.
        let (count, new_waker) = counter();
        let a = wheel.insert(200, new_waker.clone());
        let b = wheel.insert(300, new_waker.clone());
        assert_eq!(wheel.entries.len(), 2, "the freed slot was reused");
        assert_eq!(a.index, removed.index);
        assert_eq!(fired.index, removed.index);
        let _ = b;
        for stale in [fired, removed] {
            assert_ne!(stale, a);
            assert!(!wheel.is_pending(stale));
            assert!(wheel.remove(stale).is_none());
            assert!(wheel.set_waker(stale, &mut Prepared::new(&waker)).is_err());
        }
        assert!(wheel.is_pending(a));
        assert_eq!(wheel.len(), 2);
        // A stale reset must not disturb the slot's new owner.
        let c = wheel.reset(removed, 400, waker).0;
        assert_ne!(c, a);
        assert!(wheel.is_pending(a) && wheel.is_pending(c));
        assert_eq!(step(&mut wheel, 300), 2);
        assert_eq!(count.get(), 2);
        assert_eq!(old_count.get(), 1);
        assert_eq!(step(&mut wheel, 400), 1);
        assert_eq!(old_count.get(), 2);
    }

    #[test]
    fn level_boundaries() {
        let mut points = vec![0, 1, 2];
        for level in 1..=LEVELS as u32 {
            let edge = 1u64 << (level * SLOT_BITS);
            points.extend([edge - 1, edge, edge + 1]);
        }
        for start in [0, 1, 63, 64, 4_095, 1 << 30, (1 << 36) - 1, 5 << 36] {
            for &offset in &points {
                for deadline in [offset, start + offset] {
                    let mut wheel = Wheel::new();
                    step(&mut wheel, start);
                    let (count, waker) = counter();
                    let key = wheel.insert(deadline, waker);
                    let expect = wheel.clamp(deadline).max(start);
                    let next = wheel.next_expiration().unwrap();
                    assert!(start <= next && next <= expect);
                    if expect > start {
                        step(&mut wheel, expect - 1);
                        assert_eq!(count.get(), 0, "start {start} deadline {deadline}");
                        assert!(wheel.is_pending(key));
                    }
                    step(&mut wheel, expect);
                    assert_eq!(count.get(), 1, "start {start} deadline {deadline}");
                    assert_eq!(wheel.len(), 0);
                }
            }
        }
    }

    #[test]
    fn far_deadlines_are_clamped() {
        let mut wheel = Wheel::new();
        let (count, waker) = counter();
        wheel.insert(u64::MAX, waker.clone());
        wheel.insert(1 << 36, waker.clone());
        wheel.insert((1 << 36) - 1, waker.clone());
        assert!(wheel.next_expiration().unwrap() < (1 << 36));
        assert_eq!(step(&mut wheel, (1 << 36) - 2), 0);
        assert_eq!(step(&mut wheel, (1 << 36) - 1), 3);
        assert_eq!(count.get(), 3);

        // Near the end of a top-level block the span reaches into the next block, and
        // the top level's slots at or below the current digit stand for that block.
        let mut wheel = Wheel::new();
        let start = (3 << 36) + (40 << 30) + 12_345;
        step(&mut wheel, start);
        let deadlines = [
            start + (1 << 36) - 1,
            start + (24 << 30),
            start + (24 << 30) - 12_346,
            start + (30 << 30),
            u64::MAX,
        ];
        let counts: Vec<_> = deadlines
            .iter()
            .map(|&d| {
                let (count, waker) = counter();
                wheel.insert(d, waker);
                (wheel.clamp(d), count)
            })
            .collect();
        while let Some(next) = wheel.next_expiration() {
            check_next(
                &wheel,
                counts.iter().filter(|c| c.1.get() == 0).map(|c| c.0),
            );
            step(&mut wheel, next);
            for (deadline, count) in &counts {
                assert_eq!(
                    count.get(),
                    usize::from(*deadline <= next),
                    "{deadline} at {next}"
                );
            }
        }
        assert!(counts.iter().all(|c| c.1.get() == 1));
    }

    #[test]
    fn huge_jumps() {
        let mut wheel = Wheel::new();
        let (count, waker) = counter();
        wheel.insert(9_999_999, waker.clone());
        assert_eq!(step(&mut wheel, 10_000_000), 1);
        assert_eq!(wheel.elapsed(), 10_000_000);

        // Walking a millisecond at a time to the end of time would never finish.
        for d in [1, 20_000_000, 1 << 35, u64::MAX] {
            wheel.insert(d, waker.clone());
        }
        assert_eq!(step(&mut wheel, u64::MAX), 4);
        assert_eq!(wheel.elapsed(), u64::MAX);
        assert_eq!(step(&mut wheel, u64::MAX), 0);
        assert_eq!(count.get(), 5);

        // At the end of time everything is already due.
        let key = wheel.insert(u64::MAX, waker);
        assert_eq!(wheel.next_expiration(), Some(u64::MAX));
        assert_eq!(step(&mut wheel, 0), 1);
        assert!(!wheel.is_pending(key));
        assert_eq!(count.get(), 6);
    }

    #[test]
    fn past_deadlines_fire_at_the_next_advance() {
        let mut wheel = Wheel::new();
        step(&mut wheel, 1_000);
        let (count, waker) = counter();
        wheel.insert(1_000, waker.clone());
        wheel.insert(3, waker.clone());
        wheel.insert(1_001, waker);
        assert_eq!(wheel.next_expiration(), Some(1_000));
        // Time going backwards is read as no movement.
        assert_eq!(step(&mut wheel, 10), 2);
        assert_eq!(wheel.elapsed(), 1_000);
        assert_eq!(wheel.next_expiration(), Some(1_001));
        assert_eq!(step(&mut wheel, 1_001), 1);
        assert_eq!(count.get(), 3);
    }

    #[test]
    fn set_waker_replaces_the_waker() {
        let mut wheel = Wheel::new();
        let (first, first_waker) = counter();
        let (second, second_waker) = counter();
        let key = wheel.insert(10, first_waker.clone());
        assert!(wheel
            .set_waker(key, &mut Prepared::new(&first_waker))
            .is_ok());
        assert!(wheel
            .set_waker(key, &mut Prepared::new(&second_waker))
            .is_ok());
        assert_eq!(step(&mut wheel, 10), 1);
        assert_eq!((first.get(), second.get()), (0, 1));
        assert!(wheel
            .set_waker(key, &mut Prepared::new(&first_waker))
            .is_err());
    }

    #[test]
    fn slab_reuses_freed_slots() {
        let mut wheel = Wheel::new();
        let waker = counter().1;
        for i in 0..1_000 {
            let a = wheel.insert(i + 5, waker.clone());
            let b = wheel.insert(i + 70, waker.clone());
            assert!(wheel.remove(a).is_some());
            step(&mut wheel, i + 100);
            assert!(!wheel.is_pending(b));
        }
        assert_eq!(wheel.entries.len(), 2);
        assert_eq!(wheel.len(), 0);
    }

    /// Random inserts, removes, resets, waker swaps and advances against a simple model.
    #[test]
    fn matches_a_model() {
        let mut rng = Rng(0xdead_beef);
        let mut wheel = Wheel::new();
        // key -> (deadline, count)
        let mut model: HashMap<(u32, u32), (u64, Arc<Count>, TimerKey)> = HashMap::new();
        let mut dead: Vec<(TimerKey, Arc<Count>, usize)> = Vec::new();
        for _ in 0..50_000 {
            let pick = |rng: &mut Rng, model: &HashMap<_, (u64, Arc<Count>, TimerKey)>| {
                let n = model.len() as u64;
                (n > 0).then(|| model.values().nth(rng.below(n) as usize).unwrap().2)
            };
            match rng.below(10) {
                0..=3 => {
                    let deadline = wheel.elapsed().saturating_sub(2) + rng.spread(24);
                    let (count, waker) = counter();
                    let key = wheel.insert(deadline, waker);
                    model.insert((key.index, key.generation), (deadline, count, key));
                }
                4 => {
                    if let Some(key) = pick(&mut rng, &model) {
                        let (_, count, _) = model.remove(&(key.index, key.generation)).unwrap();
                        assert!(wheel.remove(key).is_some());
                        dead.push((key, count, 0));
                    }
                }
                5 => {
                    if let Some(key) = pick(&mut rng, &model) {
                        let deadline = wheel.elapsed() + rng.spread(24);
                        let entry = model.get_mut(&(key.index, key.generation)).unwrap();
                        let waker = Waker::from(entry.1.clone());
                        assert_eq!(wheel.reset(key, deadline, waker).0, key);
                        entry.0 = deadline;
                    }
                }
                6 => {
                    if let Some(key) = pick(&mut rng, &model) {
                        let (fresh, waker) = counter();
                        assert!(wheel.set_waker(key, &mut Prepared::new(&waker)).is_ok());
                        let entry = model.get_mut(&(key.index, key.generation)).unwrap();
                        let before = entry.1.get();
                        let old = std::mem::replace(&mut entry.1, fresh);
                        dead.push((key, old, before));
                    }
                }
                _ => {
                    check_next(&wheel, model.values().map(|v| v.0));
                    let now = wheel.elapsed() + rng.spread(16);
                    let fired = step(&mut wheel, now);
                    let before = model.len();
                    model.retain(|_, (deadline, count, key)| {
                        let due = *deadline <= now;
                        assert_eq!(count.get(), usize::from(due));
                        if due {
                            assert!(!wheel.is_pending(*key));
                        }
                        !due
                    });
                    assert_eq!(fired, before - model.len());
                }
            }
            assert_eq!(wheel.len(), model.len());
        }
        for (key, count, before) in &dead {
            assert_eq!(
                count.get(),
                *before,
                "a removed or replaced waker was woken"
            );
            let live = model.get(&(key.index, key.generation));
            assert_eq!(wheel.is_pending(*key), live.is_some());
        }
        for v in model.values() {
            assert!(wheel.is_pending(v.2));
        }
    }
}
