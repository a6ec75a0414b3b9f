//! Stand-in (a mutex around a deque) with the lock-free list's API.
#![allow(dead_code)]
use crate::base::Mutex;
use std::collections::VecDeque;

pub(crate) enum Pop<T> {
    Value(T),
    Empty,
    Busy,
}
pub(crate) struct List<T> {
    q: Mutex<(VecDeque<T>, bool)>,
}
impl<T> List<T> {
    pub(crate) fn new() -> List<T> {
        List {
            q: Mutex::new((VecDeque::new(), false)),
        }
    }
    pub(crate) fn try_push(&self, v: T) -> Result<(), T> {
        let mut q = self.q.lock();
        if q.1 {
            return Err(v);
        }
        q.0.push_back(v);
        Ok(())
    }
    pub(crate) fn try_pop(&self) -> Pop<T> {
        match self.q.lock().0.pop_front() {
            Some(v) => Pop::Value(v),
            None => Pop::Empty,
        }
    }
    pub(crate) fn close(&self) -> bool {
        !std::mem::replace(&mut self.q.lock().1, true)
    }
    pub(crate) fn is_closed(&self) -> bool {
        self.q.lock().1
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.q.lock().0.is_empty()
    }
    pub(crate) fn len(&self) -> usize {
        self.q.lock().0.len()
    }
}
