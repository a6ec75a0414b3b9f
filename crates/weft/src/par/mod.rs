//! Parallel iterators over slices, vectors and ranges, and parallel sorts.
//!
//! The API follows rayon's names: `par_iter()`, `par_iter_mut()` and `into_par_iter()`
//! turn a collection into a [`ParallelIterator`]; [`map`](ParallelIterator::map) and
//! [`filter`](ParallelIterator::filter) adapt it; [`for_each`](ParallelIterator::for_each),
//! [`sum`](ParallelIterator::sum), [`reduce`](ParallelIterator::reduce),
//! [`min`](ParallelIterator::min), [`max`](ParallelIterator::max),
//! [`count`](ParallelIterator::count) and [`collect`](ParallelIterator::collect) consume
//! it. [`ParallelSliceMut`] adds `par_sort` and friends to slices. Bring everything into
//! scope with `use weft::par::prelude::*;`.
//!
//! ```
//! use weft::par::prelude::*;
//!
//! let v: Vec<u64> = (1..=1000).collect();
//! let sum_of_squares: u64 = v.par_iter().map(|&x| x * x).sum();
//! assert_eq!(sum_of_squares, 333_833_500);
//!
//! let evens: Vec<u64> = v.par_iter().copied().filter(|x| x % 2 == 0).collect();
//! assert_eq!(evens.len(), 500);
//! assert_eq!(evens[..3], [2, 4, 6]);
//!
//! let mut w = vec![5, 3, 9, 1];
//! w.par_sort();
//! assert_eq!(w, [1, 3, 5, 9]);
//! ```
//!
//! # Where the closures run
//!
//! A parallel iterator is driven by weft's fork-join `join`: the input is cut in two,
//! one half is offered to other workers of the runtime's pool (an idle worker steals
//! it) while the calling worker carries on with the other half. So the closures given
//! to `map`, `filter`, `for_each`, `reduce` and to the sorts run on weft's worker
//! threads, several at a time: they must be `Send + Sync`, and their order of execution
//! across pieces is unspecified. Results are combined in input order, so `collect`
//! keeps the order of the input (also after `filter`), and `reduce` combines items
//! in order (the operation need only be associative, not commutative).
//!
//! Called from a thread that is not one of weft's workers, the first split hands the
//! work over to the workers of a pool (as `join` does from such a thread) and the caller
//! blocks until it is done. An input too small to be split at all is processed on the
//! calling thread.
//!
//! A panic in a closure propagates to the caller of the consuming method once the other
//! pieces have finished (`join` runs both of its halves to completion, so they still
//! run); the items that the panicking piece had not yet consumed are dropped.
//!
//! # How the input is split
//!
//! Splitting is adaptive, as in rayon. A piece of `len` items is cut in half when
//! both:
//!
//! - **it is large enough**: `len >= 2 * min_len`, so neither half is smaller than
//!   `min_len` (1 unless raised with
//!   [`with_min_len`](IndexedParallelIterator::with_min_len)). Pieces are therefore never
//!   smaller than `min_len`, except when the whole input is; and
//! - **a split remains in its budget**. The budget starts at the number of workers
//!   `join` spreads over, and each split halves it for both halves, so an input that
//!   stays on one worker is cut into roughly twice as many pieces as there are
//!   workers, in about `log2(workers) + 1` levels. When a piece turns out to have been
//!   stolen by another worker (the thief's join reports it as *migrated*), its budget is
//!   reset to at least the number of workers: a steal shows that workers are idle, so
//!   the stolen piece may be spread out again.
//!
//! A piece the budget no longer splits is folded sequentially, 1,024 items (or
//! `min_len`, if larger) at a time, each chunk through the whole chain of adaptors with
//! a folder of its own (so `fold`'s identity and `collect`'s vectors are made per
//! chunk). Between chunks, if a worker of the pool is hungry and the rest is still
//! worth halving (both halves at least `min_len`), the rest is split again, budget or
//! not. Tiny inputs therefore pay for at most a few joins, and an input with
//! `len < 2 * min_len` runs with no join at all. Raise
//! `min_len` when each item is very cheap and the input is small.
//!
//! The [`plumbing`] module holds the producer and consumer traits behind this, for
//! writing new sources and sinks.

use std::cmp;
use std::iter::Sum;

pub mod plumbing;

mod collect;
mod consumers;
mod filter;
mod map;
mod min_len;
pub mod range;
pub mod slice;
mod sort;
pub mod vec;

pub use filter::Filter;
pub use map::Map;
pub use min_len::MinLen;
pub use slice::{ParallelSlice, ParallelSliceMut};

use plumbing::{Consumer, ProducerCallback};

/// The traits needed to use parallel iterators: `use weft::par::prelude::*;`.
pub mod prelude {
    pub use super::{
        FromParallelIterator, IndexedParallelIterator, IntoParallelIterator,
        IntoParallelRefIterator, IntoParallelRefMutIterator, ParallelIterator, ParallelSlice,
        ParallelSliceMut,
    };
}

/// An iterator whose items are processed in parallel on weft's workers.
///
/// Obtain one with `par_iter()`, `par_iter_mut()` or `into_par_iter()`, adapt it with
/// [`map`](Self::map) and [`filter`](Self::filter), and consume it with one of the
/// consuming methods. See the [module documentation](self) for where closures run and
/// how the input is split.
///
/// ```
/// use weft::par::prelude::*;
///
/// let words = vec!["apple", "kiwi", "banana", "fig"];
/// let long: usize = words.par_iter().filter(|w| w.len() > 3).count();
/// assert_eq!(long, 3);
///
/// let total_len = words.par_iter().map(|w| w.len()).reduce(|| 0, |a, b| a + b);
/// assert_eq!(total_len, 18);
/// ```
pub trait ParallelIterator: Sized + Send {
    /// The type of the items.
    type Item: Send;

    /// Feeds every item to `consumer` and returns its result. This is the low-level
    /// entry point every consuming method goes through; see [`plumbing`].
    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<Self::Item>;

    /// Applies `map_op` to each item.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let doubled: Vec<i32> = (0..5).into_par_iter().map(|x| x * 2).collect();
    /// assert_eq!(doubled, [0, 2, 4, 6, 8]);
    /// ```
    fn map<F, R>(self, map_op: F) -> Map<Self, F>
    where
        F: Fn(Self::Item) -> R + Sync + Send,
        R: Send,
    {
        Map::new(self, map_op)
    }

    /// Keeps only the items for which `filter_op` returns `true`. The kept items stay in
    /// input order.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let odd: Vec<u32> = (0..10u32).into_par_iter().filter(|x| x % 2 == 1).collect();
    /// assert_eq!(odd, [1, 3, 5, 7, 9]);
    /// ```
    fn filter<P>(self, filter_op: P) -> Filter<Self, P>
    where
        P: Fn(&Self::Item) -> bool + Sync + Send,
    {
        Filter::new(self, filter_op)
    }

    /// Calls `op` on each item.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use weft::par::prelude::*;
    ///
    /// let total = AtomicU64::new(0);
    /// (1..=100u64).into_par_iter().for_each(|x| {
    ///     total.fetch_add(x, Ordering::Relaxed);
    /// });
    /// assert_eq!(total.into_inner(), 5050);
    /// ```
    fn for_each<F>(self, op: F)
    where
        F: Fn(Self::Item) + Sync + Send,
    {
        consumers::for_each(self, &op)
    }

    /// Sums the items. Each piece is summed sequentially, then the partial sums are
    /// added. For floating-point items the result may differ from a sequential sum in
    /// the last bits, because the additions are grouped differently.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let s: i64 = (1..=10i64).into_par_iter().sum();
    /// assert_eq!(s, 55);
    /// let f: f64 = vec![0.5f64; 8].par_iter().sum();
    /// assert_eq!(f, 4.0);
    /// ```
    fn sum<S>(self) -> S
    where
        S: Send + Sum<Self::Item> + Sum<S>,
    {
        consumers::sum(self)
    }

    /// Combines all items with `op`, starting each piece from `identity()`. `op` must be
    /// associative and `identity()` its neutral element; items are combined in input
    /// order. Returns `identity()` for an empty iterator.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let product = (1..=10u64).into_par_iter().reduce(|| 1, |a, b| a * b);
    /// assert_eq!(product, 3_628_800);
    /// ```
    fn reduce<ID, OP>(self, identity: ID, op: OP) -> Self::Item
    where
        ID: Fn() -> Self::Item + Sync + Send,
        OP: Fn(Self::Item, Self::Item) -> Self::Item + Sync + Send,
    {
        consumers::reduce(self, &identity, &op)
    }

    /// Combines all items with `op` (associative), in input order, without an identity
    /// element. Returns `None` for an empty iterator.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let joined = vec!["a", "b", "c"]
    ///     .par_iter()
    ///     .map(|s| s.to_string())
    ///     .reduce_with(|a, b| a + &b);
    /// assert_eq!(joined.as_deref(), Some("abc"));
    /// ```
    fn reduce_with<OP>(self, op: OP) -> Option<Self::Item>
    where
        OP: Fn(Self::Item, Self::Item) -> Self::Item + Sync + Send,
    {
        consumers::reduce_with(self, &op)
    }

    /// The smallest item, or `None` if there is none. Among equal smallest items, the
    /// first one is returned (as [`Iterator::min`] does).
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// assert_eq!(vec![4, -2, 7].par_iter().min(), Some(&-2));
    /// assert_eq!((0..0).into_par_iter().min(), None);
    /// ```
    fn min(self) -> Option<Self::Item>
    where
        Self::Item: Ord,
    {
        self.reduce_with(cmp::min)
    }

    /// The largest item, or `None` if there is none. Among equal largest items, the last
    /// one is returned (as [`Iterator::max`] does).
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// assert_eq!(vec![4, -2, 7].par_iter().max(), Some(&7));
    /// ```
    fn max(self) -> Option<Self::Item>
    where
        Self::Item: Ord,
    {
        self.reduce_with(cmp::max)
    }

    /// Counts the items.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// assert_eq!((0..100).into_par_iter().filter(|x| x % 3 == 0).count(), 34);
    /// ```
    fn count(self) -> usize {
        self.map(|_| 1usize).sum()
    }

    /// Collects the items into a collection, such as a `Vec`, keeping input order.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let v: Vec<String> = (0..4u32).into_par_iter().map(|i| i.to_string()).collect();
    /// assert_eq!(v, ["0", "1", "2", "3"]);
    /// ```
    fn collect<C>(self) -> C
    where
        C: FromParallelIterator<Self::Item>,
    {
        C::from_par_iter(self)
    }

    /// Turns `&T` items into `T` by copying them.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let v: Vec<u8> = [1u8, 2, 3].par_iter().copied().collect();
    /// assert_eq!(v, [1, 2, 3]);
    /// ```
    fn copied<'a, T>(self) -> Map<Self, fn(&'a T) -> T>
    where
        T: 'a + Copy + Send + Sync,
        Self: ParallelIterator<Item = &'a T>,
    {
        fn copy<T: Copy>(x: &T) -> T {
            *x
        }
        self.map(copy as fn(&'a T) -> T)
    }

    /// Turns `&T` items into `T` by cloning them.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let names = vec![String::from("a"), String::from("b")];
    /// let copies: Vec<String> = names.par_iter().cloned().collect();
    /// assert_eq!(copies, names);
    /// ```
    fn cloned<'a, T>(self) -> Map<Self, fn(&'a T) -> T>
    where
        T: 'a + Clone + Send + Sync,
        Self: ParallelIterator<Item = &'a T>,
    {
        fn clone<T: Clone>(x: &T) -> T {
            x.clone()
        }
        self.map(clone as fn(&'a T) -> T)
    }
}

/// A parallel iterator that knows its exact length and can be cut at any index.
///
/// Slices, vectors and ranges are indexed, and so is [`map`](ParallelIterator::map) of
/// an indexed iterator; [`filter`](ParallelIterator::filter) is not (its length is
/// unknown until it runs).
///
/// ```
/// use weft::par::prelude::*;
///
/// let it = (0..1000u32).into_par_iter().map(|x| x + 1);
/// assert_eq!(it.len(), 1000);
/// // Never process fewer than 100 items in one sequential piece.
/// let s: u32 = it.with_min_len(100).sum();
/// assert_eq!(s, 500_500);
/// ```
pub trait IndexedParallelIterator: ParallelIterator {
    /// The exact number of items.
    fn len(&self) -> usize;

    /// True when there are no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands this iterator's [`Producer`](plumbing::Producer) to `callback`; see
    /// [`plumbing`].
    fn with_producer<CB>(self, callback: CB) -> CB::Output
    where
        CB: ProducerCallback<Self::Item>;

    /// Never splits the input into sequential pieces of fewer than `min` items (the
    /// whole input is one piece if it has fewer than `2 * min` items). Useful when each
    /// item is cheap, to keep the cost of a join small next to the work of a piece.
    /// `min` of 0 is taken as 1.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let v: Vec<u32> = (0..10_000).collect();
    /// let evens = v.par_iter().with_min_len(1024).filter(|&&x| x % 2 == 0).count();
    /// assert_eq!(evens, 5000);
    /// ```
    fn with_min_len(self, min: usize) -> MinLen<Self> {
        MinLen::new(self, min)
    }
}

/// Conversion into a [`ParallelIterator`]: the parallel counterpart of
/// [`IntoIterator`].
///
/// Implemented for `Vec<T>` (yields `T`, moving the items out), `&[T]`, `&Vec<T>`
/// (yield `&T`), `&mut [T]`, `&mut Vec<T>` (yield `&mut T`), integer ranges (`a..b` and
/// `a..=b`), and every parallel iterator (itself).
///
/// ```
/// use weft::par::prelude::*;
///
/// let owned = vec![String::from("x"), String::from("yy")];
/// let lens: Vec<usize> = owned.into_par_iter().map(|s| s.len()).collect();
/// assert_eq!(lens, [1, 2]);
///
/// assert_eq!((1..=4u8).into_par_iter().map(u32::from).sum::<u32>(), 10);
/// ```
pub trait IntoParallelIterator {
    /// The parallel iterator this turns into.
    type Iter: ParallelIterator<Item = Self::Item>;

    /// The type of its items.
    type Item: Send;

    /// Converts `self` into a parallel iterator.
    fn into_par_iter(self) -> Self::Iter;
}

impl<I: ParallelIterator> IntoParallelIterator for I {
    type Iter = I;
    type Item = I::Item;

    fn into_par_iter(self) -> I {
        self
    }
}

/// `par_iter()`: a parallel iterator over shared references, for every type whose
/// reference is [`IntoParallelIterator`] (slices, arrays and vectors).
///
/// ```
/// use weft::par::prelude::*;
///
/// let v = vec![1, 2, 3];
/// let max = v.par_iter().max();
/// assert_eq!(max, Some(&3));
/// assert_eq!(v.len(), 3); // still usable: only borrowed
/// ```
pub trait IntoParallelRefIterator<'data> {
    /// The parallel iterator over references.
    type Iter: ParallelIterator<Item = Self::Item>;

    /// The type of its items, usually `&'data T`.
    type Item: Send + 'data;

    /// Borrows `self` as a parallel iterator.
    fn par_iter(&'data self) -> Self::Iter;
}

impl<'data, I> IntoParallelRefIterator<'data> for I
where
    I: 'data + ?Sized,
    &'data I: IntoParallelIterator,
{
    type Iter = <&'data I as IntoParallelIterator>::Iter;
    type Item = <&'data I as IntoParallelIterator>::Item;

    fn par_iter(&'data self) -> Self::Iter {
        self.into_par_iter()
    }
}

/// `par_iter_mut()`: a parallel iterator over mutable references, for every type whose
/// mutable reference is [`IntoParallelIterator`] (slices, arrays and vectors).
///
/// ```
/// use weft::par::prelude::*;
///
/// let mut v = vec![1, 2, 3];
/// v.par_iter_mut().for_each(|x| *x *= 10);
/// assert_eq!(v, [10, 20, 30]);
/// ```
pub trait IntoParallelRefMutIterator<'data> {
    /// The parallel iterator over mutable references.
    type Iter: ParallelIterator<Item = Self::Item>;

    /// The type of its items, usually `&'data mut T`.
    type Item: Send + 'data;

    /// Mutably borrows `self` as a parallel iterator.
    fn par_iter_mut(&'data mut self) -> Self::Iter;
}

impl<'data, I> IntoParallelRefMutIterator<'data> for I
where
    I: 'data + ?Sized,
    &'data mut I: IntoParallelIterator,
{
    type Iter = <&'data mut I as IntoParallelIterator>::Iter;
    type Item = <&'data mut I as IntoParallelIterator>::Item;

    fn par_iter_mut(&'data mut self) -> Self::Iter {
        self.into_par_iter()
    }
}

/// Building a collection from a parallel iterator: the parallel counterpart of
/// [`FromIterator`], used by [`ParallelIterator::collect`].
///
/// Implemented for `Vec<T>`: each sequential piece collects into its own vector, the
/// vectors are linked in input order and concatenated once at the end.
///
/// ```
/// use weft::par::prelude::*;
///
/// let v = Vec::from_par_iter((0..5u8).into_par_iter().filter(|x| x % 2 == 0));
/// assert_eq!(v, [0, 2, 4]);
/// ```
pub trait FromParallelIterator<T: Send> {
    /// Builds `Self` from the items of `par_iter`.
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = T>;
}
