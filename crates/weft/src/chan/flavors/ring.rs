//! Stand-in (a mutex around a deque) with the lock-free ring's API.
#![allow(dead_code)]
use crate::base::Mutex;
use std::collections::VecDeque;

pub(crate) enum PushError<T> {
    Full(T),
    Closed(T),
}
pub(crate) enum Pop<T> {
    Value(T),
    Empty,
    Busy,
}
pub(crate) struct Ring<T> {
    cap: usize,
    q: Mutex<(VecDeque<T>, bool)>,
}
impl<T> Ring<T> {
    pub(crate) fn new(cap: usize) -> Ring<T> {
        assert!(cap >= 1);
        Ring {
            cap,
            q: Mutex::new((VecDeque::with_capacity(cap), false)),
        }
    }
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }
    pub(crate) fn try_push(&self, v: T) -> Result<(), PushError<T>> {
        let mut q = self.q.lock();
        if q.1 {
            return Err(PushError::Closed(v));
        }
        if q.0.len() == self.cap {
            return Err(PushError::Full(v));
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
    pub(crate) fn is_full(&self) -> bool {
        self.q.lock().0.len() == self.cap
    }
    pub(crate) fn len(&self) -> usize {
        self.q.lock().0.len()
    }
}
