//! `with_min_len`: wraps the producer to raise its smallest piece.

use super::plumbing::{bridge, Consumer, Folder, Producer, ProducerCallback};
use super::{IndexedParallelIterator, ParallelIterator};

/// The parallel iterator returned by
/// [`IndexedParallelIterator::with_min_len`].
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Clone, Debug)]
pub struct MinLen<I> {
    base: I,
    min: usize,
}

impl<I> MinLen<I> {
    pub(super) fn new(base: I, min: usize) -> Self {
        MinLen { base, min }
    }
}

impl<I: IndexedParallelIterator> ParallelIterator for MinLen<I> {
    type Item = I::Item;

    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<I::Item>,
    {
        bridge(self, consumer)
    }
}

impl<I: IndexedParallelIterator> IndexedParallelIterator for MinLen<I> {
    fn len(&self) -> usize {
        self.base.len()
    }

    fn with_producer<CB>(self, callback: CB) -> CB::Output
    where
        CB: ProducerCallback<I::Item>,
    {
        struct Callback<CB> {
            callback: CB,
            min: usize,
        }

        impl<T, CB: ProducerCallback<T>> ProducerCallback<T> for Callback<CB> {
            type Output = CB::Output;

            fn callback<P>(self, base: P) -> CB::Output
            where
                P: Producer<Item = T>,
            {
                self.callback.callback(MinLenProducer {
                    base,
                    min: self.min,
                })
            }
        }

        self.base.with_producer(Callback {
            callback,
            min: self.min,
        })
    }
}

struct MinLenProducer<P> {
    base: P,
    min: usize,
}

impl<P: Producer> Producer for MinLenProducer<P> {
    type Item = P::Item;
    type IntoIter = P::IntoIter;

    fn into_iter(self) -> P::IntoIter {
        self.base.into_iter()
    }

    fn min_len(&self) -> usize {
        self.min.max(self.base.min_len())
    }

    fn split_at(self, index: usize) -> (Self, Self) {
        let (left, right) = self.base.split_at(index);
        (
            MinLenProducer {
                base: left,
                min: self.min,
            },
            MinLenProducer {
                base: right,
                min: self.min,
            },
        )
    }

    fn fold_with<F>(self, folder: F) -> F
    where
        F: Folder<P::Item>,
    {
        self.base.fold_with(folder)
    }
}
