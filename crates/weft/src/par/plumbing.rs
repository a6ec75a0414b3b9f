//! The machinery under the parallel iterators: producers, consumers and the bridge that
//! splits them.
//!
//! Most users never need this module. It is public so that a new source or sink can be
//! written outside weft, and so that tests can observe how an input was split.
//!
//! - A [`Producer`] is a splittable source of items with a known length: a slice, a
//!   vector being drained, a range. It can be cut in two at any index, and a piece that
//!   is no longer split turns into a sequential [`Iterator`].
//! - A [`Consumer`] is a splittable sink. Cutting it in two gives a consumer for each
//!   side and a [`Reducer`] that combines their two results, left before right.
//! - A [`Folder`] is what a consumer becomes for one piece: it takes the piece's items
//!   one after another, in order, and produces that piece's result.
//! - [`bridge_producer_consumer`] connects the two. It cuts producer and consumer at the
//!   same index and hands the halves to weft's fork-join `join` while the
//!   [splitting rule](super#how-the-input-is-split) allows, then folds each piece
//!   sequentially, chunk by chunk (splitting again when a worker is hungry), and
//!   reduces the results back up the tree.
//!
//! Adaptors such as [`map`](super::ParallelIterator::map) and
//! [`filter`](super::ParallelIterator::filter) wrap the consumer (for `map`, also the
//! producer), so a chain of adaptors ends up as one sequential iterator chain in each
//! piece.
//!
//! # Example: counting the pieces
//!
//! A consumer that records how many items each sequential piece received:
//!
//! ```
//! use std::sync::Mutex;
//! use weft::par::plumbing::{Consumer, Folder, Reducer};
//! use weft::par::prelude::*;
//!
//! struct Pieces<'a>(&'a Mutex<Vec<usize>>);
//! struct PieceFolder<'a>(&'a Mutex<Vec<usize>>, usize);
//! struct NoReduce;
//!
//! impl<'a, T> Consumer<T> for Pieces<'a> {
//!     type Folder = PieceFolder<'a>;
//!     type Reducer = NoReduce;
//!     type Result = ();
//!     fn split_at(self, _index: usize) -> (Self, Self, NoReduce) {
//!         (Pieces(self.0), Pieces(self.0), NoReduce)
//!     }
//!     fn into_folder(self) -> PieceFolder<'a> {
//!         PieceFolder(self.0, 0)
//!     }
//! }
//! impl<'a, T> Folder<T> for PieceFolder<'a> {
//!     type Result = ();
//!     fn consume(self, _item: T) -> Self {
//!         PieceFolder(self.0, self.1 + 1)
//!     }
//!     fn complete(self) {
//!         self.0.lock().unwrap().push(self.1);
//!     }
//! }
//! impl Reducer<()> for NoReduce {
//!     fn reduce(self, _left: (), _right: ()) {}
//! }
//!
//! let sizes = Mutex::new(Vec::new());
//! (0..1000u32)
//!     .into_par_iter()
//!     .with_min_len(300)
//!     .drive_unindexed(Pieces(&sizes));
//! let sizes = sizes.into_inner().unwrap();
//! assert_eq!(sizes.iter().sum::<usize>(), 1000);
//! assert!(sizes.iter().all(|&n| n >= 300));
//! ```

use crate::forkjoin::{current_num_threads, join_context_shared, someone_hungry};

use super::IndexedParallelIterator;

/// A splittable source of a known number of items.
///
/// The length is not part of the trait: whoever holds a producer knows it (it is
/// [`IndexedParallelIterator::len`] at the start, then the sizes of the pieces it cut).
pub trait Producer: Send + Sized {
    /// The items produced.
    type Item;

    /// The sequential iterator a piece turns into once it is no longer split.
    type IntoIter: Iterator<Item = Self::Item>;

    /// Turns this piece into a sequential iterator over its items, in order.
    fn into_iter(self) -> Self::IntoIter;

    /// The smallest piece this producer wants to be cut into (at least 1). The bridge
    /// never cuts a piece into halves smaller than this; see
    /// [`with_min_len`](super::IndexedParallelIterator::with_min_len).
    fn min_len(&self) -> usize {
        1
    }

    /// Cuts this piece in two: the first `index` items and the rest. `index` is at most
    /// the piece's length.
    fn split_at(self, index: usize) -> (Self, Self);

    /// Feeds every item of this piece to `folder`, in order, and returns the folder.
    fn fold_with<F>(self, folder: F) -> F
    where
        F: Folder<Self::Item>,
    {
        folder.consume_iter(self.into_iter())
    }
}

/// A splittable sink of items: the consuming end of a parallel iterator.
pub trait Consumer<Item>: Send + Sized {
    /// What this consumer turns into for a piece that is consumed sequentially.
    type Folder: Folder<Item, Result = Self::Result>;

    /// Combines the results of the two halves of a split.
    type Reducer: Reducer<Self::Result>;

    /// The result of consuming the items.
    type Result: Send;

    /// Splits into a consumer for the items before the split point and one for the
    /// items after it, plus the reducer that combines their results (left, then right).
    ///
    /// `index` is where the source was cut. After a
    /// [`filter`](super::ParallelIterator::filter) the left consumer may receive fewer
    /// than `index` items, so a consumer must not rely on exact counts.
    fn split_at(self, index: usize) -> (Self, Self, Self::Reducer);

    /// Turns this consumer into a folder for one sequential piece.
    fn into_folder(self) -> Self::Folder;
}

/// Consumes the items of one sequential piece, in order.
pub trait Folder<Item>: Sized {
    /// The result of the piece.
    type Result;

    /// Takes one item.
    fn consume(self, item: Item) -> Self;

    /// Takes every item of `iter`, in order. The default calls
    /// [`consume`](Folder::consume) for each through [`Iterator::fold`], which lets
    /// iterator chains use their internal iteration.
    fn consume_iter<I>(self, iter: I) -> Self
    where
        I: IntoIterator<Item = Item>,
    {
        iter.into_iter().fold(self, Folder::consume)
    }

    /// Finishes the piece and returns its result.
    fn complete(self) -> Self::Result;
}

/// Combines the results of the two halves of a split.
pub trait Reducer<Result> {
    /// Combines `left` (the result of the earlier items) with `right`.
    fn reduce(self, left: Result, right: Result) -> Result;
}

/// Receives the producer of an [`IndexedParallelIterator`] (see
/// [`IndexedParallelIterator::with_producer`]).
///
/// A callback, rather than a return value, because an adaptor's producer may borrow
/// from the adaptor (a `map` producer holds a reference to the closure), so it only
/// exists inside the adaptor's `with_producer` call.
pub trait ProducerCallback<Item> {
    /// What the callback returns.
    type Output;

    /// Called with the producer.
    fn callback<P>(self, producer: P) -> Self::Output
    where
        P: Producer<Item = Item>;
}

/// Drives an indexed parallel iterator into a consumer: obtains its producer and hands
/// it to [`bridge_producer_consumer`].
pub fn bridge<I, C>(par_iter: I, consumer: C) -> C::Result
where
    I: IndexedParallelIterator,
    C: Consumer<I::Item>,
{
    struct Callback<C> {
        len: usize,
        consumer: C,
    }

    impl<C, T> ProducerCallback<T> for Callback<C>
    where
        C: Consumer<T>,
    {
        type Output = C::Result;

        fn callback<P>(self, producer: P) -> C::Result
        where
            P: Producer<Item = T>,
        {
            bridge_producer_consumer(self.len, producer, self.consumer)
        }
    }

    let len = par_iter.len();
    par_iter.with_producer(Callback { len, consumer })
}

/// Splits `producer` (holding `len` items) and `consumer` together, runs the pieces
/// with fork-join, and returns the reduced result.
///
/// The splitting rule is the one described in the
/// [module documentation of `par`](super#how-the-input-is-split).
pub fn bridge_producer_consumer<P, C>(len: usize, producer: P, consumer: C) -> C::Result
where
    P: Producer,
    C: Consumer<P::Item>,
{
    let splitter = Splitter::new(producer.min_len());
    bridge_helper(len, false, splitter, producer, consumer)
}

fn bridge_helper<P, C>(
    len: usize,
    migrated: bool,
    mut splitter: Splitter,
    producer: P,
    consumer: C,
) -> C::Result
where
    P: Producer,
    C: Consumer<P::Item>,
{
    if splitter.try_split(len, migrated) {
        let mid = len / 2;
        let (left_producer, right_producer) = producer.split_at(mid);
        let (left_consumer, right_consumer, reducer) = consumer.split_at(mid);
        let (left, right) = join_context_shared(
            move |ctx| bridge_helper(mid, ctx.migrated(), splitter, left_producer, left_consumer),
            move |ctx| {
                bridge_helper(
                    len - mid,
                    ctx.migrated(),
                    splitter,
                    right_producer,
                    right_consumer,
                )
            },
        );
        reducer.reduce(left, right)
    } else {
        fold_leaf(len, splitter, producer, consumer)
    }
}

/// Items folded between two looks at whether a worker is hungry.
const CHUNK: usize = 1024;

/// Folds a piece that the budget no longer splits, `CHUNK` items at a time; whenever a
/// worker of the pool is hungry and the rest is still worth halving, the rest goes back
/// to `bridge_helper` to be split and shared. Iterative, so long pieces do not recurse.
fn fold_leaf<P, C>(
    mut len: usize,
    splitter: Splitter,
    mut producer: P,
    mut consumer: C,
) -> C::Result
where
    P: Producer,
    C: Consumer<P::Item>,
{
    let chunk = CHUNK.max(splitter.min);
    // The result of the chunks folded so far, with a reducer to append the next part.
    let mut acc: Option<(C::Result, C::Reducer)> = None;
    let append = |acc: Option<(C::Result, C::Reducer)>, r: C::Result| match acc {
        None => r,
        Some((a, reducer)) => reducer.reduce(a, r),
    };
    loop {
        // Saturating: `with_min_len(usize::MAX)` ("never split") makes `chunk` that
        // large, and `2 * chunk` overflowed (found in review: a panic in debug builds,
        // a split past the end in release).
        if len >= chunk.saturating_mul(2) && len / 2 >= splitter.min && someone_hungry() {
            let rest = bridge_helper(len, false, splitter.with_one_split(), producer, consumer);
            return append(acc, rest);
        }
        // The rest after a chunk must still hold `min` items.
        if len < chunk.saturating_add(splitter.min) {
            return append(acc, producer.fold_with(consumer.into_folder()).complete());
        }
        let (head, tail) = producer.split_at(chunk);
        let (head_consumer, tail_consumer, reducer) = consumer.split_at(chunk);
        let r = head.fold_with(head_consumer.into_folder()).complete();
        acc = Some((append(acc, r), reducer));
        producer = tail;
        consumer = tail_consumer;
        len -= chunk;
    }
}

/// The adaptive splitting rule: a length floor and a split budget.
#[derive(Clone, Copy, Debug)]
struct Splitter {
    /// How many more times this branch may split without having been stolen.
    splits: usize,
    /// The smallest half a split may produce.
    min: usize,
}

impl Splitter {
    fn new(min_len: usize) -> Splitter {
        Splitter {
            splits: current_num_threads(),
            min: min_len.max(1),
        }
    }

    /// A budget of exactly one split, for a piece that a hungry worker is waiting for.
    fn with_one_split(mut self) -> Splitter {
        self.splits = 1;
        self
    }

    /// Decides whether a piece of `len` items is split in two. `migrated` says whether
    /// the piece runs on another worker than the one that cut it from its parent.
    fn try_split(&mut self, len: usize, migrated: bool) -> bool {
        // Both halves (len / 2 and len - len / 2) must hold at least `min` items.
        if len / 2 < self.min {
            return false;
        }
        if migrated {
            // Stolen: another worker was idle, so there is demand for more pieces.
            // Refill the budget so that this piece can be spread over every worker.
            self.splits = (self.splits / 2).max(current_num_threads());
            true
        } else if self.splits > 0 {
            self.splits /= 2;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Splitter;

    #[test]
    fn splitter_respects_min_len() {
        let mut s = Splitter {
            splits: 100,
            min: 10,
        };
        assert!(!s.try_split(19, false));
        assert!(!s.try_split(19, true));
        assert!(s.try_split(20, false));
    }

    #[test]
    fn splitter_budget_halves_and_resets_on_migration() {
        let mut s = Splitter { splits: 4, min: 1 };
        assert!(s.try_split(1000, false));
        assert_eq!(s.splits, 2);
        assert!(s.try_split(1000, false));
        assert!(s.try_split(1000, false));
        assert_eq!(s.splits, 0);
        assert!(!s.try_split(1000, false));
        assert!(s.try_split(1000, true));
        assert!(s.splits >= 1);
    }
}
