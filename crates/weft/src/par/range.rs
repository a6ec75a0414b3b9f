//! Parallel iterators over integer ranges: `a..b` and `a..=b` for `u8`, `u16`, `u32`,
//! `u64`, `usize`, `i8`, `i16`, `i32`, `i64` and `isize`.
//!
//! ```
//! use weft::par::prelude::*;
//!
//! assert_eq!((0..100u32).into_par_iter().sum::<u32>(), 4950);
//! assert_eq!((-5..=5i64).into_par_iter().count(), 11);
//! assert_eq!((250..=u8::MAX).into_par_iter().max(), Some(255));
//! assert_eq!((7..3usize).into_par_iter().count(), 0);
//! ```

use std::ops::{Range, RangeInclusive};

use super::plumbing::{bridge, Consumer, Producer, ProducerCallback};
use super::{IndexedParallelIterator, IntoParallelIterator, ParallelIterator};

/// Parallel iterator over the integers of a half-open range `a..b` (from
/// `into_par_iter()`).
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Clone, Debug)]
pub struct Iter<T> {
    range: Range<T>,
}

/// Parallel iterator over the integers of an inclusive range `a..=b` (from
/// `into_par_iter()`).
///
/// # Panics
///
/// Consuming it (or asking its `len`) panics if the range holds more than `usize::MAX`
/// integers, as `0..=u64::MAX` does.
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Clone, Debug)]
pub struct IterInclusive<T> {
    range: RangeInclusive<T>,
}

// Generic over `T` (rather than one impl per type) so that an unsuffixed literal range
// such as `(0..10).into_par_iter()` still infers its integer type.
impl<T> IntoParallelIterator for Range<T>
where
    Iter<T>: ParallelIterator,
{
    type Iter = Iter<T>;
    type Item = <Iter<T> as ParallelIterator>::Item;

    fn into_par_iter(self) -> Iter<T> {
        Iter { range: self }
    }
}

impl<T> IntoParallelIterator for RangeInclusive<T>
where
    IterInclusive<T>: ParallelIterator,
{
    type Iter = IterInclusive<T>;
    type Item = <IterInclusive<T> as ParallelIterator>::Item;

    fn into_par_iter(self) -> IterInclusive<T> {
        IterInclusive { range: self }
    }
}

struct RangeProducer<T> {
    start: T,
    len: usize,
}

/// The sequential iterator of one piece: a half-open range, plus the type's maximum
/// when the piece ends there (a half-open range cannot reach it).
struct RangeIter<T> {
    range: Range<T>,
    last: Option<T>,
}

impl<T> Iterator for RangeIter<T>
where
    Range<T>: Iterator<Item = T>,
{
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self.range.next() {
            Some(x) => Some(x),
            None => self.last.take(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let extra = usize::from(self.last.is_some());
        let (lo, hi) = self.range.size_hint();
        (
            lo.saturating_add(extra),
            hi.and_then(|h| h.checked_add(extra)),
        )
    }

    fn fold<B, F>(self, init: B, mut f: F) -> B
    where
        F: FnMut(B, T) -> B,
    {
        let acc = self.range.fold(init, &mut f);
        match self.last {
            Some(x) => f(acc, x),
            None => acc,
        }
    }
}

/// The number of integers in `start..=end` (`end >= start`), as a `usize`.
fn inclusive_len(start: i128, end: i128) -> usize {
    usize::try_from(end - start + 1)
        .unwrap_or_else(|_| panic!("range {start}..={end} has more than usize::MAX items"))
}

macro_rules! range_impls {
    ($($t:ty),* $(,)?) => {$(
        impl ParallelIterator for Iter<$t> {
            type Item = $t;

            fn drive_unindexed<C>(self, consumer: C) -> C::Result
            where
                C: Consumer<$t>,
            {
                bridge(self, consumer)
            }
        }

        impl IndexedParallelIterator for Iter<$t> {
            fn len(&self) -> usize {
                if self.range.start < self.range.end {
                    inclusive_len(self.range.start as i128, self.range.end as i128 - 1)
                } else {
                    0
                }
            }

            fn with_producer<CB>(self, callback: CB) -> CB::Output
            where
                CB: ProducerCallback<$t>,
            {
                let len = self.len();
                callback.callback(RangeProducer { start: self.range.start, len })
            }
        }

        impl ParallelIterator for IterInclusive<$t> {
            type Item = $t;

            fn drive_unindexed<C>(self, consumer: C) -> C::Result
            where
                C: Consumer<$t>,
            {
                bridge(self, consumer)
            }
        }

        impl IndexedParallelIterator for IterInclusive<$t> {
            fn len(&self) -> usize {
                // `is_empty` also covers a range exhausted by sequential iteration.
                if self.range.is_empty() {
                    0
                } else {
                    inclusive_len(*self.range.start() as i128, *self.range.end() as i128)
                }
            }

            fn with_producer<CB>(self, callback: CB) -> CB::Output
            where
                CB: ProducerCallback<$t>,
            {
                let len = self.len();
                callback.callback(RangeProducer { start: *self.range.start(), len })
            }
        }

        impl Producer for RangeProducer<$t> {
            type Item = $t;
            type IntoIter = RangeIter<$t>;

            fn into_iter(self) -> RangeIter<$t> {
                if self.len == 0 {
                    return RangeIter { range: self.start..self.start, last: None };
                }
                // The piece holds start, start + 1, ..., start + (len - 1), all in the
                // type's range; adding with wrap-around on the truncated offset gives
                // the exact value because the true sum is representable.
                let last = self.start.wrapping_add((self.len - 1) as $t);
                if last < <$t>::MAX {
                    RangeIter { range: self.start..last + 1, last: None }
                } else {
                    RangeIter { range: self.start..last, last: Some(last) }
                }
            }

            fn split_at(self, index: usize) -> (Self, Self) {
                // A user's producer callback may ask past the end: refuse rather than
                // yield integers outside the range.
                assert!(index <= self.len, "split_at past the end of a range piece");
                let mid = if index < self.len {
                    self.start.wrapping_add(index as $t)
                } else {
                    // Not `start + len`, which may lie past the type's maximum; the
                    // right piece is empty, so its start does not matter.
                    self.start
                };
                (
                    RangeProducer { start: self.start, len: index },
                    RangeProducer { start: mid, len: self.len - index },
                )
            }
        }
    )*};
}

range_impls!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);
