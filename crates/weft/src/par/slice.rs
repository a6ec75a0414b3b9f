//! Parallel iterators over slices, and the slice extension traits
//! ([`ParallelSlice`], [`ParallelSliceMut`]) with the parallel sorts.

use std::cmp::Ordering;

use super::plumbing::{bridge, Consumer, Producer, ProducerCallback};
use super::{sort, IndexedParallelIterator, IntoParallelIterator, ParallelIterator};

/// Parallel methods on shared slices.
///
/// ```
/// use weft::par::prelude::*;
///
/// let v: Vec<u32> = (0..10).collect();
/// let sums: Vec<u32> = v.par_chunks(4).map(|c| c.iter().sum()).collect();
/// assert_eq!(sums, [6, 22, 17]);
/// ```
pub trait ParallelSlice<T: Sync> {
    /// The slice itself.
    fn as_parallel_slice(&self) -> &[T];

    /// A parallel iterator over non-overlapping chunks of `chunk_size` items (the last
    /// one may be shorter), in order, like [`slice::chunks`].
    ///
    /// # Panics
    ///
    /// If `chunk_size` is 0.
    fn par_chunks(&self, chunk_size: usize) -> Chunks<'_, T> {
        assert!(chunk_size != 0, "chunk_size must not be zero");
        Chunks {
            chunk_size,
            slice: self.as_parallel_slice(),
        }
    }
}

impl<T: Sync> ParallelSlice<T> for [T] {
    fn as_parallel_slice(&self) -> &[T] {
        self
    }
}

/// Parallel methods on mutable slices: chunks and the parallel sorts.
///
/// The stable sorts (`par_sort*`) are parallel merge sorts: both halves are sorted with
/// fork-join down to pieces of a few thousand items (sorted with [`slice::sort_by`]),
/// then merged through a buffer of the slice's length, the large merges themselves
/// split in parallel. The unstable sorts (`par_sort_unstable*`) are parallel
/// quicksorts: partition around a median-of-three pivot, sort both sides with
/// fork-join, and fall back to [`slice::sort_unstable_by`] for small pieces (or when
/// the pivots keep being bad). Unstable sorts need no extra memory.
///
/// If the comparison panics, the panic propagates and the slice holds some permutation
/// of its elements (each exactly once, none dropped or duplicated).
///
/// ```
/// use weft::par::prelude::*;
///
/// let mut v = vec![(2, 'a'), (1, 'b'), (2, 'c'), (1, 'd')];
/// v.par_sort_by_key(|p| p.0); // stable: 'b' before 'd', 'a' before 'c'
/// assert_eq!(v, [(1, 'b'), (1, 'd'), (2, 'a'), (2, 'c')]);
///
/// let mut w: Vec<i32> = (0..10_000).rev().collect();
/// w.par_sort_unstable();
/// assert!(w.windows(2).all(|p| p[0] <= p[1]));
/// ```
pub trait ParallelSliceMut<T: Send> {
    /// The slice itself.
    fn as_parallel_slice_mut(&mut self) -> &mut [T];

    /// A parallel iterator over non-overlapping mutable chunks of `chunk_size` items
    /// (the last one may be shorter), in order, like [`slice::chunks_mut`].
    ///
    /// # Panics
    ///
    /// If `chunk_size` is 0.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let mut v = vec![0u8; 7];
    /// v.par_chunks_mut(3).for_each(|c| c[0] = 1);
    /// assert_eq!(v, [1, 0, 0, 1, 0, 0, 1]);
    /// ```
    fn par_chunks_mut(&mut self, chunk_size: usize) -> ChunksMut<'_, T> {
        assert!(chunk_size != 0, "chunk_size must not be zero");
        ChunksMut {
            chunk_size,
            slice: self.as_parallel_slice_mut(),
        }
    }

    /// Sorts the slice in parallel, stably (equal elements keep their order).
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let mut v = vec![5, -3, 2, 9, -3, 0];
    /// v.par_sort();
    /// assert_eq!(v, [-3, -3, 0, 2, 5, 9]);
    /// ```
    fn par_sort(&mut self)
    where
        T: Ord,
    {
        sort::par_mergesort(self.as_parallel_slice_mut(), &T::cmp);
    }

    /// Sorts the slice in parallel, stably, with the comparison `compare` (which must be
    /// a total order for the result to be sorted).
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let mut v = vec![1, 4, 2, 3];
    /// v.par_sort_by(|a, b| b.cmp(a));
    /// assert_eq!(v, [4, 3, 2, 1]);
    /// ```
    fn par_sort_by<F>(&mut self, compare: F)
    where
        F: Fn(&T, &T) -> Ordering + Sync,
    {
        sort::par_mergesort(self.as_parallel_slice_mut(), &compare);
    }

    /// Sorts the slice in parallel, stably, by the key `key` extracts. The key is
    /// computed again at every comparison.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let mut v = vec!["ccc", "a", "bb"];
    /// v.par_sort_by_key(|s| s.len());
    /// assert_eq!(v, ["a", "bb", "ccc"]);
    /// ```
    fn par_sort_by_key<K, F>(&mut self, key: F)
    where
        K: Ord,
        F: Fn(&T) -> K + Sync,
    {
        sort::par_mergesort(self.as_parallel_slice_mut(), &|a: &T, b: &T| {
            key(a).cmp(&key(b))
        });
    }

    /// Sorts the slice in parallel, without keeping the order of equal elements and
    /// without allocating.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let mut v = vec![3, 1, 2, 1];
    /// v.par_sort_unstable();
    /// assert_eq!(v, [1, 1, 2, 3]);
    /// ```
    fn par_sort_unstable(&mut self)
    where
        T: Ord,
    {
        sort::par_quicksort(self.as_parallel_slice_mut(), &T::cmp);
    }

    /// Sorts the slice in parallel, unstably, with the comparison `compare`.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let mut v = vec![1.5f64, -0.5, 3.0];
    /// v.par_sort_unstable_by(|a, b| a.total_cmp(b));
    /// assert_eq!(v, [-0.5, 1.5, 3.0]);
    /// ```
    fn par_sort_unstable_by<F>(&mut self, compare: F)
    where
        F: Fn(&T, &T) -> Ordering + Sync,
    {
        sort::par_quicksort(self.as_parallel_slice_mut(), &compare);
    }

    /// Sorts the slice in parallel, unstably, by the key `key` extracts.
    ///
    /// ```
    /// use weft::par::prelude::*;
    ///
    /// let mut v = vec![-3i32, 2, -1];
    /// v.par_sort_unstable_by_key(|x| x.abs());
    /// assert_eq!(v, [-1, 2, -3]);
    /// ```
    fn par_sort_unstable_by_key<K, F>(&mut self, key: F)
    where
        K: Ord,
        F: Fn(&T) -> K + Sync,
    {
        sort::par_quicksort(self.as_parallel_slice_mut(), &|a: &T, b: &T| {
            key(a).cmp(&key(b))
        });
    }
}

impl<T: Send> ParallelSliceMut<T> for [T] {
    fn as_parallel_slice_mut(&mut self) -> &mut [T] {
        self
    }
}

// ---- Iter: &[T] ----

/// Parallel iterator over `&T` (from `par_iter()` on a slice or vector).
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Debug)]
pub struct Iter<'data, T> {
    slice: &'data [T],
}

impl<T> Clone for Iter<'_, T> {
    fn clone(&self) -> Self {
        Iter { slice: self.slice }
    }
}

impl<'data, T: Sync> IntoParallelIterator for &'data [T] {
    type Iter = Iter<'data, T>;
    type Item = &'data T;

    fn into_par_iter(self) -> Iter<'data, T> {
        Iter { slice: self }
    }
}

impl<'data, T: Sync> IntoParallelIterator for &'data Vec<T> {
    type Iter = Iter<'data, T>;
    type Item = &'data T;

    fn into_par_iter(self) -> Iter<'data, T> {
        Iter { slice: self }
    }
}

impl<'data, T: Sync, const N: usize> IntoParallelIterator for &'data [T; N] {
    type Iter = Iter<'data, T>;
    type Item = &'data T;

    fn into_par_iter(self) -> Iter<'data, T> {
        Iter { slice: self }
    }
}

impl<'data, T: Sync> ParallelIterator for Iter<'data, T> {
    type Item = &'data T;

    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<&'data T>,
    {
        bridge(self, consumer)
    }
}

impl<'data, T: Sync> IndexedParallelIterator for Iter<'data, T> {
    fn len(&self) -> usize {
        self.slice.len()
    }

    fn with_producer<CB>(self, callback: CB) -> CB::Output
    where
        CB: ProducerCallback<&'data T>,
    {
        callback.callback(IterProducer { slice: self.slice })
    }
}

struct IterProducer<'data, T> {
    slice: &'data [T],
}

impl<'data, T: Sync> Producer for IterProducer<'data, T> {
    type Item = &'data T;
    type IntoIter = std::slice::Iter<'data, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.slice.iter()
    }

    fn split_at(self, index: usize) -> (Self, Self) {
        let (left, right) = self.slice.split_at(index);
        (IterProducer { slice: left }, IterProducer { slice: right })
    }
}

// ---- IterMut: &mut [T] ----

/// Parallel iterator over `&mut T` (from `par_iter_mut()` on a slice or vector).
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Debug)]
pub struct IterMut<'data, T> {
    slice: &'data mut [T],
}

impl<'data, T: Send> IntoParallelIterator for &'data mut [T] {
    type Iter = IterMut<'data, T>;
    type Item = &'data mut T;

    fn into_par_iter(self) -> IterMut<'data, T> {
        IterMut { slice: self }
    }
}

impl<'data, T: Send> IntoParallelIterator for &'data mut Vec<T> {
    type Iter = IterMut<'data, T>;
    type Item = &'data mut T;

    fn into_par_iter(self) -> IterMut<'data, T> {
        IterMut { slice: self }
    }
}

impl<'data, T: Send, const N: usize> IntoParallelIterator for &'data mut [T; N] {
    type Iter = IterMut<'data, T>;
    type Item = &'data mut T;

    fn into_par_iter(self) -> IterMut<'data, T> {
        IterMut { slice: self }
    }
}

impl<'data, T: Send> ParallelIterator for IterMut<'data, T> {
    type Item = &'data mut T;

    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<&'data mut T>,
    {
        bridge(self, consumer)
    }
}

impl<'data, T: Send> IndexedParallelIterator for IterMut<'data, T> {
    fn len(&self) -> usize {
        self.slice.len()
    }

    fn with_producer<CB>(self, callback: CB) -> CB::Output
    where
        CB: ProducerCallback<&'data mut T>,
    {
        callback.callback(IterMutProducer { slice: self.slice })
    }
}

struct IterMutProducer<'data, T> {
    slice: &'data mut [T],
}

impl<'data, T: Send> Producer for IterMutProducer<'data, T> {
    type Item = &'data mut T;
    type IntoIter = std::slice::IterMut<'data, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.slice.iter_mut()
    }

    fn split_at(self, index: usize) -> (Self, Self) {
        let (left, right) = self.slice.split_at_mut(index);
        (
            IterMutProducer { slice: left },
            IterMutProducer { slice: right },
        )
    }
}

// ---- Chunks ----

/// Parallel iterator over `&[T]` chunks (from [`ParallelSlice::par_chunks`]).
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Debug)]
pub struct Chunks<'data, T> {
    chunk_size: usize,
    slice: &'data [T],
}

impl<T> Clone for Chunks<'_, T> {
    fn clone(&self) -> Self {
        Chunks {
            chunk_size: self.chunk_size,
            slice: self.slice,
        }
    }
}

impl<'data, T: Sync> ParallelIterator for Chunks<'data, T> {
    type Item = &'data [T];

    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<&'data [T]>,
    {
        bridge(self, consumer)
    }
}

impl<'data, T: Sync> IndexedParallelIterator for Chunks<'data, T> {
    fn len(&self) -> usize {
        self.slice.len().div_ceil(self.chunk_size)
    }

    fn with_producer<CB>(self, callback: CB) -> CB::Output
    where
        CB: ProducerCallback<&'data [T]>,
    {
        callback.callback(ChunksProducer {
            chunk_size: self.chunk_size,
            slice: self.slice,
        })
    }
}

struct ChunksProducer<'data, T> {
    chunk_size: usize,
    slice: &'data [T],
}

impl<'data, T: Sync> Producer for ChunksProducer<'data, T> {
    type Item = &'data [T];
    type IntoIter = std::slice::Chunks<'data, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.slice.chunks(self.chunk_size)
    }

    fn split_at(self, index: usize) -> (Self, Self) {
        let at = index.saturating_mul(self.chunk_size).min(self.slice.len());
        let (left, right) = self.slice.split_at(at);
        (
            ChunksProducer {
                chunk_size: self.chunk_size,
                slice: left,
            },
            ChunksProducer {
                chunk_size: self.chunk_size,
                slice: right,
            },
        )
    }
}

// ---- ChunksMut ----

/// Parallel iterator over `&mut [T]` chunks (from [`ParallelSliceMut::par_chunks_mut`]).
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Debug)]
pub struct ChunksMut<'data, T> {
    chunk_size: usize,
    slice: &'data mut [T],
}

impl<'data, T: Send> ParallelIterator for ChunksMut<'data, T> {
    type Item = &'data mut [T];

    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<&'data mut [T]>,
    {
        bridge(self, consumer)
    }
}

impl<'data, T: Send> IndexedParallelIterator for ChunksMut<'data, T> {
    fn len(&self) -> usize {
        self.slice.len().div_ceil(self.chunk_size)
    }

    fn with_producer<CB>(self, callback: CB) -> CB::Output
    where
        CB: ProducerCallback<&'data mut [T]>,
    {
        callback.callback(ChunksMutProducer {
            chunk_size: self.chunk_size,
            slice: self.slice,
        })
    }
}

struct ChunksMutProducer<'data, T> {
    chunk_size: usize,
    slice: &'data mut [T],
}

impl<'data, T: Send> Producer for ChunksMutProducer<'data, T> {
    type Item = &'data mut [T];
    type IntoIter = std::slice::ChunksMut<'data, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.slice.chunks_mut(self.chunk_size)
    }

    fn split_at(self, index: usize) -> (Self, Self) {
        let at = index.saturating_mul(self.chunk_size).min(self.slice.len());
        let (left, right) = self.slice.split_at_mut(at);
        (
            ChunksMutProducer {
                chunk_size: self.chunk_size,
                slice: left,
            },
            ChunksMutProducer {
                chunk_size: self.chunk_size,
                slice: right,
            },
        )
    }
}
