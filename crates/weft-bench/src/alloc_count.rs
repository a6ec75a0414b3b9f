//! A counting global allocator, for the `chan` suite's allocations per
//! message: [`count_allocations`] counts the allocations the calling
//! thread makes while it runs a closure. While no thread counts, an
//! allocation costs one relaxed load of a shared, never-written-to counter
//! more than the system allocator's, so the other suites are not disturbed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

/// The system allocator, counting the allocations of the threads inside
/// [`count_allocations`].
pub struct Counting;

/// Threads now inside [`count_allocations`].
static COUNTING_THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's allocations while it counts, `None` while it does not.
    /// Const-initialised and without a destructor, so reading it never
    /// allocates.
    static MINE: Cell<Option<u64>> = const { Cell::new(None) };
}

#[inline]
fn count() {
    if COUNTING_THREADS.load(Relaxed) != 0 {
        let _ = MINE.try_with(|c| {
            if let Some(n) = c.get() {
                c.set(Some(n + 1));
            }
        });
    }
}

// SAFETY: every call is passed on to `System` unchanged; counting touches
// an atomic and a thread-local cell and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller keeps `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller keeps `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller keeps `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Runs `f` and returns its result and the number of allocations
/// (reallocations included) the calling thread made meanwhile; other
/// threads' allocations are not counted. Not reentrant.
pub fn count_allocations<R>(f: impl FnOnce() -> R) -> (R, u64) {
    MINE.with(|c| {
        assert!(c.get().is_none(), "count_allocations is not reentrant");
        c.set(Some(0));
    });
    COUNTING_THREADS.fetch_add(1, Relaxed);
    let r = f();
    COUNTING_THREADS.fetch_sub(1, Relaxed);
    let n = MINE.with(|c| c.take()).unwrap_or(0);
    (r, n)
}
