//! `collect` into a `Vec`: every piece collects into its own vector, the vectors are
//! linked in input order, and the list is concatenated once at the end.

use std::collections::LinkedList;

use super::plumbing::{Consumer, Folder, Reducer};
use super::{FromParallelIterator, IntoParallelIterator, ParallelIterator};

impl<T: Send> FromParallelIterator<T> for Vec<T> {
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = T>,
    {
        let list = par_iter.into_par_iter().drive_unindexed(ListVecConsumer);
        concat(list)
    }
}

/// Concatenates the pieces, reusing the first piece's allocation when it can.
fn concat<T>(mut list: LinkedList<Vec<T>>) -> Vec<T> {
    let total: usize = list.iter().map(Vec::len).sum();
    let mut out = match list.pop_front() {
        Some(first) => first,
        None => return Vec::new(),
    };
    out.reserve_exact(total - out.len());
    for mut piece in list {
        out.append(&mut piece);
    }
    out
}

struct ListVecConsumer;

impl<T: Send> Consumer<T> for ListVecConsumer {
    type Folder = ListVecFolder<T>;
    type Reducer = ListReducer;
    type Result = LinkedList<Vec<T>>;

    fn split_at(self, _index: usize) -> (Self, Self, ListReducer) {
        (ListVecConsumer, ListVecConsumer, ListReducer)
    }

    fn into_folder(self) -> ListVecFolder<T> {
        ListVecFolder { vec: Vec::new() }
    }
}

struct ListVecFolder<T> {
    vec: Vec<T>,
}

impl<T> Folder<T> for ListVecFolder<T> {
    type Result = LinkedList<Vec<T>>;

    fn consume(mut self, item: T) -> Self {
        self.vec.push(item);
        self
    }

    fn consume_iter<I>(mut self, iter: I) -> Self
    where
        I: IntoIterator<Item = T>,
    {
        self.vec.extend(iter);
        self
    }

    fn complete(self) -> LinkedList<Vec<T>> {
        let mut list = LinkedList::new();
        if !self.vec.is_empty() {
            list.push_back(self.vec);
        }
        list
    }
}

struct ListReducer;

impl<T> Reducer<LinkedList<T>> for ListReducer {
    fn reduce(self, mut left: LinkedList<T>, mut right: LinkedList<T>) -> LinkedList<T> {
        left.append(&mut right);
        left
    }
}
