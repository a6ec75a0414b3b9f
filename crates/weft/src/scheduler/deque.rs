//! The Chase-Lev work-stealing deque (spec 002), in the C11 formulation of Lê, Pop,
//! Cohen and Zappa Nardelli (2013). The owner pushes and pops at the bottom (LIFO);
//! thieves take from the top (FIFO), so they get the oldest, largest pieces of a
//! recursive computation.
//!
//! Items are job pointers. The buffer grows by doubling; a retired buffer may still be
//! read by a thief that loaded it before the swap, so retired buffers are kept until the
//! deque is dropped (their total size is bounded by the final size).

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crossbeam_utils::CachePadded;

use crate::base::{fence, Arc, AtomicPtr, Mutex};
#[cfg(loom)]
use loom::sync::atomic::AtomicIsize;
#[cfg(not(loom))]
use std::sync::atomic::AtomicIsize;

#[cfg(not(loom))]
const MIN_CAP: usize = 64;
#[cfg(loom)]
const MIN_CAP: usize = 2;

struct Buffer<T> {
    slots: Box<[AtomicPtr<T>]>,
}

impl<T> Buffer<T> {
    fn new(cap: usize) -> Box<Self> {
        debug_assert!(cap.is_power_of_two());
        Box::new(Buffer {
            slots: (0..cap)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        })
    }

    fn cap(&self) -> isize {
        self.slots.len() as isize
    }

    fn at(&self, i: isize) -> &AtomicPtr<T> {
        &self.slots[(i & (self.cap() - 1)) as usize]
    }
}

struct Inner<T> {
    top: CachePadded<AtomicIsize>,
    bottom: CachePadded<AtomicIsize>,
    buffer: AtomicPtr<Buffer<T>>,
    /// Buffers replaced by growth; freed with the deque.
    retired: Mutex<Vec<*mut Buffer<T>>>,
}

// SAFETY: the deque moves raw `*mut T` between threads; it never dereferences them.
// Whoever pushes a pointer is responsible for what it points at being shareable.
unsafe impl<T> Send for Inner<T> {}
// SAFETY: as above; all shared state is atomic or behind the mutex.
unsafe impl<T> Sync for Inner<T> {}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        let current = self.buffer.load(Relaxed);
        // SAFETY: we are the last owner; every buffer came from `Box::into_raw` and is
        // freed exactly once (the current one here, retired ones below).
        unsafe {
            drop(Box::from_raw(current));
            for b in self.retired.lock().drain(..) {
                drop(Box::from_raw(b));
            }
        }
    }
}

/// The owner's end.
pub(crate) struct Worker<T> {
    inner: Arc<Inner<T>>,
}

/// A thief's end.
pub(crate) struct Stealer<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Stealer<T> {
    fn clone(&self) -> Self {
        Stealer {
            inner: self.inner.clone(),
        }
    }
}

/// The result of a steal attempt.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Steal<T> {
    Empty,
    Success(T),
    /// Lost a race with the owner or another thief; the deque may still hold items.
    Retry,
}

pub(crate) fn new<T>() -> (Worker<T>, Stealer<T>) {
    let inner = Arc::new(Inner {
        top: CachePadded::new(AtomicIsize::new(0)),
        bottom: CachePadded::new(AtomicIsize::new(0)),
        buffer: AtomicPtr::new(Box::into_raw(Buffer::new(MIN_CAP))),
        retired: Mutex::new(Vec::new()),
    });
    (
        Worker {
            inner: inner.clone(),
        },
        Stealer { inner },
    )
}

impl<T> Worker<T> {
    /// Pushes at the bottom. Returns true if the deque was empty before (the caller
    /// may then want to wake a thief).
    pub(crate) fn push(&self, item: *mut T) -> bool {
        let b = self.inner.bottom.load(Relaxed);
        let t = self.inner.top.load(Acquire);
        let mut buf = self.inner.buffer.load(Relaxed);
        // SAFETY: only the owner replaces the buffer, so it is live here.
        if b - t >= unsafe { (*buf).cap() } {
            buf = self.grow(b, t);
        }
        // SAFETY: as above.
        unsafe { (*buf).at(b).store(item, Relaxed) };
        // Publish the slot before the new bottom.
        fence(Release);
        self.inner.bottom.store(b + 1, Relaxed);
        b == t
    }

    #[cold]
    fn grow(&self, b: isize, t: isize) -> *mut Buffer<T> {
        let old = self.inner.buffer.load(Relaxed);
        // SAFETY: only the owner replaces the buffer; `old` is live.
        let old_ref = unsafe { &*old };
        let new = Buffer::new(old_ref.slots.len() * 2);
        for i in t..b {
            new.at(i).store(old_ref.at(i).load(Relaxed), Relaxed);
        }
        let new = Box::into_raw(new);
        self.inner.buffer.store(new, Release);
        // Thieves may still read `old`; it lives until the deque is dropped.
        self.inner.retired.lock().push(old);
        new
    }

    /// Pops at the bottom (the newest item).
    pub(crate) fn pop(&self) -> Option<*mut T> {
        // Empty at a glance: only the owner pushes and `top` only grows, so a `top` at
        // `bottom` stays there until the owner pushes again (a stale `top` is lower and
        // takes the full path). A worker with no task looks here on every turn of its
        // loop; the full path's fence and two stores of `bottom`, a line every thief
        // reads, cost both workers of a fiber ping-pong a transfer per hop.
        let bottom = self.inner.bottom.load(Relaxed);
        if self.inner.top.load(Relaxed) >= bottom {
            return None;
        }
        let b = bottom - 1;
        let buf = self.inner.buffer.load(Relaxed);
        self.inner.bottom.store(b, Relaxed);
        // The store of `bottom` must be ordered before the load of `top` against a
        // thief's load of `top` then `bottom` (store buffering): a full fence.
        fence(SeqCst);
        let t = self.inner.top.load(Relaxed);
        if t > b {
            // Empty.
            self.inner.bottom.store(b + 1, Relaxed);
            return None;
        }
        // SAFETY: only the owner replaces the buffer; it is live.
        let item = unsafe { (*buf).at(b).load(Relaxed) };
        if t == b {
            // The last item: race the thieves for it.
            let won = self
                .inner
                .top
                .compare_exchange(t, t + 1, SeqCst, Relaxed)
                .is_ok();
            self.inner.bottom.store(b + 1, Relaxed);
            return won.then_some(item);
        }
        Some(item)
    }

    /// The bottom index (owner only): items pushed later sit above it.
    pub(crate) fn bottom(&self) -> isize {
        self.inner.bottom.load(Relaxed)
    }
}

impl<T> Stealer<T> {
    /// Takes the oldest item.
    pub(crate) fn steal(&self) -> Steal<*mut T> {
        let t = self.inner.top.load(Acquire);
        fence(SeqCst);
        let b = self.inner.bottom.load(Acquire);
        if t >= b {
            return Steal::Empty;
        }
        let buf = self.inner.buffer.load(Acquire);
        // SAFETY: a buffer, once published, is never freed before the deque (retired
        // buffers are kept), and the slot at `t` was written before `bottom` passed it.
        let item = unsafe { (*buf).at(t).load(Relaxed) };
        if self
            .inner
            .top
            .compare_exchange(t, t + 1, SeqCst, Relaxed)
            .is_err()
        {
            return Steal::Retry;
        }
        Steal::Success(item)
    }

    pub(crate) fn is_empty(&self) -> bool {
        let t = self.inner.top.load(Acquire);
        let b = self.inner.bottom.load(Acquire);
        b <= t
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lifo_for_the_owner_fifo_for_thieves_and_growth() {
        let (w, s) = new::<u32>();
        let mut items: Vec<u32> = (0..1000).collect();
        let ptrs: Vec<*mut u32> = items.iter_mut().map(|x| x as *mut u32).collect();
        assert!(w.push(ptrs[0]), "first push into an empty deque");
        for p in &ptrs[1..] {
            assert!(!w.push(*p));
        }
        assert_eq!(s.steal(), Steal::Success(ptrs[0]));
        assert_eq!(w.pop(), Some(ptrs[999]));
        let mut n = 2;
        while w.pop().is_some() {
            n += 1;
        }
        assert_eq!(n, 1000);
        assert_eq!(s.steal(), Steal::Empty);
        assert!(w.pop().is_none() && s.is_empty());
    }

    #[test]
    fn concurrent_steals_take_each_item_once() {
        let (w, s) = new::<usize>();
        const N: usize = 100_000;
        let taken: Vec<_> = (0..N)
            .map(|_| std::sync::atomic::AtomicUsize::new(0))
            .collect();
        let taken = std::sync::Arc::new(taken);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thieves: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                let taken = taken.clone();
                let done = done.clone();
                std::thread::spawn(move || loop {
                    match s.steal() {
                        Steal::Success(p) => {
                            taken[p as usize - 1].fetch_add(1, Relaxed);
                        }
                        Steal::Retry => {}
                        Steal::Empty if done.load(SeqCst) => break,
                        Steal::Empty => std::hint::spin_loop(),
                    }
                })
            })
            .collect();
        for i in 1..=N {
            w.push(i as *mut usize);
            if i % 3 == 0 {
                if let Some(p) = w.pop() {
                    taken[p as usize - 1].fetch_add(1, Relaxed);
                }
            }
        }
        while let Some(p) = w.pop() {
            taken[p as usize - 1].fetch_add(1, Relaxed);
        }
        done.store(true, SeqCst);
        for t in thieves {
            t.join().unwrap();
        }
        assert!(taken.iter().all(|t| t.load(Relaxed) == 1));
    }
}
