//! `Vec<T>::into_par_iter()`: moves the items out of the vector.
//!
//! The vector's length is set to 0 and its items are handed to producers that own them:
//! every item is either moved out to the consumer or dropped by the piece that held it,
//! exactly once, also when a consumer panics. The vector (now empty) frees its buffer
//! when the iteration ends.

use std::mem::{self, MaybeUninit};
use std::ptr;

use super::plumbing::{bridge, Consumer, Producer, ProducerCallback};
use super::{IndexedParallelIterator, IntoParallelIterator, ParallelIterator};

/// Parallel iterator that moves the items out of a `Vec<T>` (from `into_par_iter()`).
///
/// Items the consumer did not take (because it panicked) are dropped.
///
/// ```
/// use weft::par::prelude::*;
///
/// let v = vec![String::from("a"), String::from("b")];
/// let upper: Vec<String> = v.into_par_iter().map(|s| s.to_uppercase()).collect();
/// assert_eq!(upper, ["A", "B"]);
/// ```
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Debug, Clone)]
pub struct IntoIter<T> {
    vec: Vec<T>,
}

impl<T: Send> IntoParallelIterator for Vec<T> {
    type Iter = IntoIter<T>;
    type Item = T;

    fn into_par_iter(self) -> IntoIter<T> {
        IntoIter { vec: self }
    }
}

impl<T: Send> ParallelIterator for IntoIter<T> {
    type Item = T;

    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<T>,
    {
        bridge(self, consumer)
    }
}

impl<T: Send> IndexedParallelIterator for IntoIter<T> {
    fn len(&self) -> usize {
        self.vec.len()
    }

    fn with_producer<CB>(mut self, callback: CB) -> CB::Output
    where
        CB: ProducerCallback<T>,
    {
        let len = self.vec.len();
        // From here on the vector does not own its first `len` items any more (it would
        // only free the buffer); ownership passes to the `DrainProducer` made below,
        // which moves out or drops each of them exactly once.
        // SAFETY: 0 is never more than the capacity, and the items are not leaked (above).
        unsafe { self.vec.set_len(0) };
        let slots = &mut self.vec.spare_capacity_mut()[..len];
        // The producer borrows `self.vec`'s buffer, so the vector (and its allocation)
        // outlives it, also when `callback` unwinds.
        callback.callback(DrainProducer { slots })
    }
}

/// Owns the items in `slots`: every slot holds an initialized `T` that nobody else
/// will read or drop. Dropping the producer drops them.
struct DrainProducer<'data, T> {
    slots: &'data mut [MaybeUninit<T>],
}

impl<'data, T: Send> Producer for DrainProducer<'data, T> {
    type Item = T;
    type IntoIter = SliceDrain<'data, T>;

    fn into_iter(mut self) -> SliceDrain<'data, T> {
        // Take the slots out so that `Drop for DrainProducer` sees none; the ownership
        // of the items moves to the iterator.
        let slots = mem::take(&mut self.slots);
        SliceDrain {
            iter: slots.iter_mut(),
        }
    }

    fn split_at(mut self, index: usize) -> (Self, Self) {
        // Checked before the slots are taken out of `self`: a panic after that would
        // leak every item left (a user's producer callback may ask past the end).
        assert!(
            index <= self.slots.len(),
            "split_at past the end of a vec piece"
        );
        // Same hand-over: the two halves own disjoint parts of the slots.
        let slots = mem::take(&mut self.slots);
        let (left, right) = slots.split_at_mut(index);
        (
            DrainProducer { slots: left },
            DrainProducer { slots: right },
        )
    }
}

impl<T> Drop for DrainProducer<'_, T> {
    fn drop(&mut self) {
        let slots: *mut [MaybeUninit<T>] = mem::take(&mut self.slots) as *mut _;
        // SAFETY: by the invariant of `DrainProducer`, every slot holds an initialized
        // `T` owned by this producer alone, and `mem::take` leaves none behind, so each
        // is dropped exactly once. `MaybeUninit<T>` has the layout of `T`.
        unsafe { ptr::drop_in_place(slots as *mut [T]) };
    }
}

/// The sequential iterator of one piece: moves the items out, in order.
///
/// Same invariant as `DrainProducer`: every slot `iter` has not yet yielded holds an
/// initialized `T` owned by this iterator.
struct SliceDrain<'data, T> {
    iter: std::slice::IterMut<'data, MaybeUninit<T>>,
}

impl<T> Iterator for SliceDrain<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let slot = self.iter.next()?;
        // SAFETY: the slot holds an initialized `T` owned by this iterator, and the
        // iterator has just moved past it, so it is read exactly once and never dropped
        // here.
        Some(unsafe { slot.assume_init_read() })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.iter.size_hint()
    }
}

impl<T> ExactSizeIterator for SliceDrain<'_, T> {}

impl<T> Drop for SliceDrain<'_, T> {
    fn drop(&mut self) {
        let rest: *mut [MaybeUninit<T>] = mem::take(&mut self.iter).into_slice() as *mut _;
        // SAFETY: the slots not yet yielded hold initialized `T`s owned by this
        // iterator; `mem::take` leaves an empty iterator behind, so each is dropped
        // exactly once.
        unsafe { ptr::drop_in_place(rest as *mut [T]) };
    }
}
