//! `map`: wraps the consumer (and, for indexed iterators, the producer).

use std::fmt;

use super::plumbing::{Consumer, Folder, Producer, ProducerCallback};
use super::{IndexedParallelIterator, ParallelIterator};

/// The parallel iterator returned by [`ParallelIterator::map`].
#[must_use = "parallel iterators are lazy and do nothing unless consumed"]
#[derive(Clone)]
pub struct Map<I, F> {
    base: I,
    map_op: F,
}

impl<I: fmt::Debug, F> fmt::Debug for Map<I, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Map").field("base", &self.base).finish()
    }
}

impl<I, F> Map<I, F> {
    pub(super) fn new(base: I, map_op: F) -> Self {
        Map { base, map_op }
    }
}

impl<I, F, R> ParallelIterator for Map<I, F>
where
    I: ParallelIterator,
    F: Fn(I::Item) -> R + Sync + Send,
    R: Send,
{
    type Item = R;

    fn drive_unindexed<C>(self, consumer: C) -> C::Result
    where
        C: Consumer<R>,
    {
        let consumer = MapConsumer {
            base: consumer,
            map_op: &self.map_op,
        };
        self.base.drive_unindexed(consumer)
    }
}

impl<I, F, R> IndexedParallelIterator for Map<I, F>
where
    I: IndexedParallelIterator,
    F: Fn(I::Item) -> R + Sync + Send,
    R: Send,
{
    fn len(&self) -> usize {
        self.base.len()
    }

    fn with_producer<CB>(self, callback: CB) -> CB::Output
    where
        CB: ProducerCallback<R>,
    {
        struct Callback<CB, F> {
            callback: CB,
            map_op: F,
        }

        impl<T, F, R, CB> ProducerCallback<T> for Callback<CB, F>
        where
            CB: ProducerCallback<R>,
            F: Fn(T) -> R + Sync,
        {
            type Output = CB::Output;

            fn callback<P>(self, base: P) -> CB::Output
            where
                P: Producer<Item = T>,
            {
                self.callback.callback(MapProducer {
                    base,
                    map_op: &self.map_op,
                })
            }
        }

        self.base.with_producer(Callback {
            callback,
            map_op: self.map_op,
        })
    }
}

struct MapProducer<'f, P, F> {
    base: P,
    map_op: &'f F,
}

impl<'f, P, F, R> Producer for MapProducer<'f, P, F>
where
    P: Producer,
    F: Fn(P::Item) -> R + Sync,
{
    type Item = R;
    type IntoIter = std::iter::Map<P::IntoIter, &'f F>;

    fn into_iter(self) -> Self::IntoIter {
        self.base.into_iter().map(self.map_op)
    }

    fn min_len(&self) -> usize {
        self.base.min_len()
    }

    fn split_at(self, index: usize) -> (Self, Self) {
        let (left, right) = self.base.split_at(index);
        (
            MapProducer {
                base: left,
                map_op: self.map_op,
            },
            MapProducer {
                base: right,
                map_op: self.map_op,
            },
        )
    }

    fn fold_with<G>(self, folder: G) -> G
    where
        G: Folder<R>,
    {
        let map_folder = MapFolder {
            base: folder,
            map_op: self.map_op,
        };
        self.base.fold_with(map_folder).base
    }
}

struct MapConsumer<'f, C, F> {
    base: C,
    map_op: &'f F,
}

impl<'f, T, R, C, F> Consumer<T> for MapConsumer<'f, C, F>
where
    C: Consumer<R>,
    F: Fn(T) -> R + Sync,
{
    type Folder = MapFolder<'f, C::Folder, F>;
    type Reducer = C::Reducer;
    type Result = C::Result;

    fn split_at(self, index: usize) -> (Self, Self, Self::Reducer) {
        let (left, right, reducer) = self.base.split_at(index);
        (
            MapConsumer {
                base: left,
                map_op: self.map_op,
            },
            MapConsumer {
                base: right,
                map_op: self.map_op,
            },
            reducer,
        )
    }

    fn into_folder(self) -> Self::Folder {
        MapFolder {
            base: self.base.into_folder(),
            map_op: self.map_op,
        }
    }
}

struct MapFolder<'f, G, F> {
    base: G,
    map_op: &'f F,
}

impl<T, R, G, F> Folder<T> for MapFolder<'_, G, F>
where
    G: Folder<R>,
    F: Fn(T) -> R,
{
    type Result = G::Result;

    fn consume(self, item: T) -> Self {
        MapFolder {
            base: self.base.consume((self.map_op)(item)),
            map_op: self.map_op,
        }
    }

    fn consume_iter<I>(self, iter: I) -> Self
    where
        I: IntoIterator<Item = T>,
    {
        MapFolder {
            base: self.base.consume_iter(iter.into_iter().map(self.map_op)),
            map_op: self.map_op,
        }
    }

    fn complete(self) -> G::Result {
        self.base.complete()
    }
}
