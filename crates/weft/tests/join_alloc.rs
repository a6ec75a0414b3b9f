//! The join fast path makes no heap allocation: counted with a global allocator while a
//! worker runs a join-heavy recursion that nobody steals from (one worker).

mod common;

use common::fib;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
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
    let rt = weft::Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .build()
        .unwrap();
    let allocs = rt
        .spawn(async {
            fib(10); // warm up thread-locals
            COUNTING.store(true, Ordering::SeqCst);
            let before = ALLOCS.load(Ordering::SeqCst);
            let r = fib(25);
            let after = ALLOCS.load(Ordering::SeqCst);
            COUNTING.store(false, Ordering::SeqCst);
            assert_eq!(r, 75025);
            after - before
        })
        .join()
        .unwrap();
    assert_eq!(allocs, 0, "{allocs} allocations during 121,392 joins");
}
