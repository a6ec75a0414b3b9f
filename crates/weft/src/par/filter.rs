//! `filter`: wraps the consumer. The result is not indexed.

use std::fmt;

use super::plumbing::{Consumer, Folder};
use super::ParallelIterator;

/// The parallel iterator returned by [`ParallelIterator::filter`].
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Clone)]
pub struct Filter<I, P> {
    base: I,
    filter_op: P,
}

impl<I: fmt::Debug, P> fmt::Debug for Filter<I, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter").field("base", &self.base).finish()
    }
}

impl<I, P> Filter<I, P> {
    pub(super) fn new(base: I, filter_op: P) -> Self {
        Filter { base, filter_op }
    }
}

impl<I, P> ParallelIterator for Filter<I, P>
where
    I: ParallelIterator,
    P: Fn(&I::Item) -> bool + Sync + Send,
{
    type Item = I::Item;

    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<I::Item>,
    {
        let consumer = FilterConsumer {
            base: consumer,
            filter_op: &self.filter_op,
        };
        self.base.drive_unindexed(consumer)
    }
}

struct FilterConsumer<'p, C, P> {
    base: C,
    filter_op: &'p P,
}

impl<'p, T, C, P> Consumer<T> for FilterConsumer<'p, C, P>
where
    C: Consumer<T>,
    P: Fn(&T) -> bool + Sync,
{
    type Folder = FilterFolder<'p, C::Folder, P>;
    type Reducer = C::Reducer;
    type Result = C::Result;

    fn split_at(self, index: usize) -> (Self, Self, Self::Reducer) {
        let (left, right, reducer) = self.base.split_at(index);
        (
            FilterConsumer {
                base: left,
                filter_op: self.filter_op,
            },
            FilterConsumer {
                base: right,
                filter_op: self.filter_op,
            },
            reducer,
        )
    }

    fn into_folder(self) -> Self::Folder {
        FilterFolder {
            base: self.base.into_folder(),
            filter_op: self.filter_op,
        }
    }
}

struct FilterFolder<'p, G, P> {
    base: G,
    filter_op: &'p P,
}

impl<T, G, P> Folder<T> for FilterFolder<'_, G, P>
where
    G: Folder<T>,
    P: Fn(&T) -> bool,
{
    type Result = G::Result;

    fn consume(self, item: T) -> Self {
        if (self.filter_op)(&item) {
            FilterFolder {
                base: self.base.consume(item),
                filter_op: self.filter_op,
            }
        } else {
            self
        }
    }

    fn consume_iter<I>(self, iter: I) -> Self
    where
        I: IntoIterator<Item = T>,
    {
        let filter_op = self.filter_op;
        FilterFolder {
            base: self
                .base
                .consume_iter(iter.into_iter().filter(|item| filter_op(item))),
            filter_op,
        }
    }

    fn complete(self) -> G::Result {
        self.base.complete()
    }
}
