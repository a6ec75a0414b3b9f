//! The global injection queue (spec 001): an intrusive singly-linked list through the
//! task headers behind one lock, with an atomic length so that "is it empty?" never
//! takes the lock. Tasks arrive from outside the workers and from local-queue overflow;
//! workers take them in batches.

use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Release};

use crate::base::{AtomicUsize, Mutex};
use crate::task::header::Header;
use crate::task::raw::Notified;

pub(crate) struct Inject {
    len: AtomicUsize,
    list: Mutex<List>,
}

struct List {
    head: Option<NonNull<Header>>,
    tail: Option<NonNull<Header>>,
    closed: bool,
}

// SAFETY: the list owns the queue references of the tasks it links; the pointers are
// only followed under the lock.
unsafe impl Send for List {}

impl List {
    fn push(&mut self, task: Notified) {
        let ptr = task.into_raw();
        // SAFETY: we own the task's queue reference, which grants the link field.
        unsafe { ptr.as_ref().queue_next.with_mut(|n| *n = None) };
        match self.tail {
            // SAFETY: the tail is a linked task whose link belongs to the list.
            Some(t) => unsafe { t.as_ref().queue_next.with_mut(|n| *n = Some(ptr)) },
            None => self.head = Some(ptr),
        }
        self.tail = Some(ptr);
    }

    fn pop(&mut self) -> Option<Notified> {
        let ptr = self.head?;
        // SAFETY: linked tasks are alive (the list owns their queue references).
        self.head = unsafe { ptr.as_ref().queue_next.with(|n| *n) };
        if self.head.is_none() {
            self.tail = None;
        }
        // SAFETY: the list's queue reference moves to the caller.
        Some(unsafe { Notified::from_raw(ptr) })
    }
}

impl Inject {
    pub(crate) fn new() -> Self {
        Inject {
            len: AtomicUsize::new(0),
            list: Mutex::new(List {
                head: None,
                tail: None,
                closed: false,
            }),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Acquire)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Enqueues a task; returns it back if the queue is closed (the runtime is shutting
    /// down), so the caller can cancel it.
    pub(crate) fn push(&self, task: Notified) -> Result<(), Notified> {
        let mut list = self.list.lock();
        if list.closed {
            return Err(task);
        }
        list.push(task);
        self.len.store(self.len.load(Acquire) + 1, Release);
        Ok(())
    }

    /// Enqueues a batch under one lock acquisition. Tasks refused because the queue is
    /// closed are returned.
    pub(crate) fn push_batch(&self, tasks: impl Iterator<Item = Notified>) -> Vec<Notified> {
        let mut list = self.list.lock();
        if list.closed {
            drop(list);
            return tasks.collect();
        }
        let mut n = 0;
        for t in tasks {
            list.push(t);
            n += 1;
        }
        self.len.store(self.len.load(Acquire) + n, Release);
        Vec::new()
    }

    pub(crate) fn pop(&self) -> Option<Notified> {
        let mut first = None;
        self.pop_batch(1, |t| first = Some(t));
        first
    }

    /// Takes up to `n` tasks, oldest first, handing each to `f` under the lock. `f` must
    /// not push to this queue.
    pub(crate) fn pop_batch(&self, n: usize, mut f: impl FnMut(Notified)) -> usize {
        if self.is_empty() {
            return 0;
        }
        let mut list = self.list.lock();
        let mut taken = 0;
        while taken < n {
            match list.pop() {
                Some(t) => f(t),
                None => break,
            }
            taken += 1;
        }
        self.len.store(self.len.load(Acquire) - taken, Release);
        taken
    }

    /// Refuses further pushes. Returns the tasks still queued.
    pub(crate) fn close(&self) -> Vec<Notified> {
        let mut list = self.list.lock();
        list.closed = true;
        let mut out = Vec::new();
        while let Some(t) = list.pop() {
            out.push(t);
        }
        self.len.store(0, Release);
        out
    }
}

impl Drop for Inject {
    fn drop(&mut self) {
        drop(self.close());
    }
}
