//! The consumers behind `for_each`, `sum`, `reduce` and `reduce_with` (and so `min`,
//! `max` and `count`).

use std::iter::{self, Sum};
use std::marker::PhantomData;

use super::plumbing::{Consumer, Folder, Reducer};
use super::ParallelIterator;

/// A reducer for consumers whose result is `()`.
struct NoopReducer;

impl Reducer<()> for NoopReducer {
    fn reduce(self, _left: (), _right: ()) {}
}

// ---- for_each ----

pub(super) fn for_each<I, F>(par_iter: I, op: &F)
where
    I: ParallelIterator,
    F: Fn(I::Item) + Sync,
{
    par_iter.drive_unindexed(ForEachConsumer { op })
}

struct ForEachConsumer<'f, F> {
    op: &'f F,
}

impl<'f, T, F> Consumer<T> for ForEachConsumer<'f, F>
where
    F: Fn(T) + Sync,
{
    type Folder = Self;
    type Reducer = NoopReducer;
    type Result = ();

    fn split_at(self, _index: usize) -> (Self, Self, NoopReducer) {
        (
            ForEachConsumer { op: self.op },
            ForEachConsumer { op: self.op },
            NoopReducer,
        )
    }

    fn into_folder(self) -> Self {
        self
    }
}

impl<T, F> Folder<T> for ForEachConsumer<'_, F>
where
    F: Fn(T),
{
    type Result = ();

    fn consume(self, item: T) -> Self {
        (self.op)(item);
        self
    }

    fn consume_iter<I>(self, iter: I) -> Self
    where
        I: IntoIterator<Item = T>,
    {
        iter.into_iter().for_each(self.op);
        self
    }

    fn complete(self) {}
}

// ---- sum ----

pub(super) fn sum<I, S>(par_iter: I) -> S
where
    I: ParallelIterator,
    S: Send + Sum<I::Item> + Sum<S>,
{
    par_iter.drive_unindexed(SumConsumer(PhantomData))
}

fn add<S: Sum<S>>(left: S, right: S) -> S {
    [left, right].into_iter().sum()
}

struct SumConsumer<S>(PhantomData<fn() -> S>);

impl<T, S> Consumer<T> for SumConsumer<S>
where
    S: Send + Sum<T> + Sum<S>,
{
    type Folder = SumFolder<S>;
    type Reducer = Self;
    type Result = S;

    fn split_at(self, _index: usize) -> (Self, Self, Self) {
        (
            SumConsumer(PhantomData),
            SumConsumer(PhantomData),
            SumConsumer(PhantomData),
        )
    }

    fn into_folder(self) -> SumFolder<S> {
        SumFolder {
            sum: iter::empty::<T>().sum(),
        }
    }
}

impl<S: Sum<S>> Reducer<S> for SumConsumer<S> {
    fn reduce(self, left: S, right: S) -> S {
        add(left, right)
    }
}

struct SumFolder<S> {
    sum: S,
}

impl<T, S> Folder<T> for SumFolder<S>
where
    S: Sum<T> + Sum<S>,
{
    type Result = S;

    fn consume(self, item: T) -> Self {
        SumFolder {
            sum: add(self.sum, iter::once(item).sum()),
        }
    }

    fn consume_iter<I>(self, iter: I) -> Self
    where
        I: IntoIterator<Item = T>,
    {
        SumFolder {
            sum: add(self.sum, iter.into_iter().sum()),
        }
    }

    fn complete(self) -> S {
        self.sum
    }
}

// ---- reduce ----

pub(super) fn reduce<I, ID, OP>(par_iter: I, identity: &ID, op: &OP) -> I::Item
where
    I: ParallelIterator,
    ID: Fn() -> I::Item + Sync,
    OP: Fn(I::Item, I::Item) -> I::Item + Sync,
{
    par_iter.drive_unindexed(ReduceConsumer { identity, op })
}

struct ReduceConsumer<'r, ID, OP> {
    identity: &'r ID,
    op: &'r OP,
}

impl<ID, OP> Clone for ReduceConsumer<'_, ID, OP> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<ID, OP> Copy for ReduceConsumer<'_, ID, OP> {}

impl<'r, T, ID, OP> Consumer<T> for ReduceConsumer<'r, ID, OP>
where
    T: Send,
    ID: Fn() -> T + Sync,
    OP: Fn(T, T) -> T + Sync,
{
    type Folder = ReduceFolder<'r, T, OP>;
    type Reducer = Self;
    type Result = T;

    fn split_at(self, _index: usize) -> (Self, Self, Self) {
        (self, self, self)
    }

    fn into_folder(self) -> Self::Folder {
        ReduceFolder {
            acc: (self.identity)(),
            op: self.op,
        }
    }
}

impl<T, ID, OP> Reducer<T> for ReduceConsumer<'_, ID, OP>
where
    OP: Fn(T, T) -> T,
{
    fn reduce(self, left: T, right: T) -> T {
        (self.op)(left, right)
    }
}

struct ReduceFolder<'r, T, OP> {
    acc: T,
    op: &'r OP,
}

impl<T, OP> Folder<T> for ReduceFolder<'_, T, OP>
where
    OP: Fn(T, T) -> T,
{
    type Result = T;

    fn consume(self, item: T) -> Self {
        ReduceFolder {
            acc: (self.op)(self.acc, item),
            op: self.op,
        }
    }

    fn consume_iter<I>(self, iter: I) -> Self
    where
        I: IntoIterator<Item = T>,
    {
        let op = self.op;
        ReduceFolder {
            acc: iter.into_iter().fold(self.acc, op),
            op,
        }
    }

    fn complete(self) -> T {
        self.acc
    }
}

// ---- reduce_with ----

pub(super) fn reduce_with<I, OP>(par_iter: I, op: &OP) -> Option<I::Item>
where
    I: ParallelIterator,
    OP: Fn(I::Item, I::Item) -> I::Item + Sync,
{
    par_iter.drive_unindexed(ReduceWithConsumer { op })
}

struct ReduceWithConsumer<'r, OP> {
    op: &'r OP,
}

impl<OP> Clone for ReduceWithConsumer<'_, OP> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<OP> Copy for ReduceWithConsumer<'_, OP> {}

impl<'r, T, OP> Consumer<T> for ReduceWithConsumer<'r, OP>
where
    T: Send,
    OP: Fn(T, T) -> T + Sync,
{
    type Folder = ReduceWithFolder<'r, T, OP>;
    type Reducer = Self;
    type Result = Option<T>;

    fn split_at(self, _index: usize) -> (Self, Self, Self) {
        (self, self, self)
    }

    fn into_folder(self) -> Self::Folder {
        ReduceWithFolder {
            acc: None,
            op: self.op,
        }
    }
}

impl<T, OP> Reducer<Option<T>> for ReduceWithConsumer<'_, OP>
where
    OP: Fn(T, T) -> T,
{
    fn reduce(self, left: Option<T>, right: Option<T>) -> Option<T> {
        match (left, right) {
            (Some(l), Some(r)) => Some((self.op)(l, r)),
            (l, None) => l,
            (None, r) => r,
        }
    }
}

struct ReduceWithFolder<'r, T, OP> {
    acc: Option<T>,
    op: &'r OP,
}

impl<T, OP> Folder<T> for ReduceWithFolder<'_, T, OP>
where
    OP: Fn(T, T) -> T,
{
    type Result = Option<T>;

    fn consume(self, item: T) -> Self {
        let acc = match self.acc {
            Some(acc) => (self.op)(acc, item),
            None => item,
        };
        ReduceWithFolder {
            acc: Some(acc),
            op: self.op,
        }
    }

    fn consume_iter<I>(self, iter: I) -> Self
    where
        I: IntoIterator<Item = T>,
    {
        let op = self.op;
        let mut iter = iter.into_iter();
        let acc = match self.acc {
            Some(acc) => Some(iter.fold(acc, op)),
            None => iter.next().map(|first| iter.fold(first, op)),
        };
        ReduceWithFolder { acc, op }
    }

    fn complete(self) -> Option<T> {
        self.acc
    }
}
