//! The join fast path makes no heap allocation: counted with a global allocator while a
//! worker runs a join-heavy recursion that nobody steals from (one worker). Only the
//! worker's own allocations count: other threads (the stall reporter, the test
//! harness) may allocate meanwhile.

mod common;

use common::fib;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

thread_local! {
    /// Set on the thread under test around the measured region. `const`-initialised and
    /// without a destructor, so reading it from the allocator never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.try_with(Cell::get).unwrap_or(false) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn join_on_a_worker_does_not_allocate() {
    let rt = common::runtime(1, 0);
    let allocs = rt
        .spawn(async {
            fib(10); // warm up thread-locals
            let before = ALLOCS.load(Ordering::SeqCst);
            COUNTING.set(true);
            let r = fib(25);
            COUNTING.set(false);
            let after = ALLOCS.load(Ordering::SeqCst);
            assert_eq!(r, 75025);
            after - before
        })
        .join()
        .unwrap();
    assert_eq!(allocs, 0, "{allocs} allocations during 121,392 joins");
}
