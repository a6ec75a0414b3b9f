//! A bounded channel zeroes one word per slot, not its messages: the ring's stamps must
//! start zeroed, and a reused heap block handed out by `calloc` is cleared byte by byte,
//! so when the values shared the stamps' allocation a `bounded(1000)` of 32 KiB messages
//! cleared 32 MiB per channel (2 ms; tokio's bounded channel of the same shape costs
//! 15 µs, since it grows in blocks). Counted with a global allocator on this thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

thread_local! {
    /// Set on the thread under test around the measured region. `const`-initialised and
    /// without a destructor, so reading it from the allocator never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
/// Bytes asked for zeroed, and in all, while counting.
static ZEROED: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

fn counting() -> bool {
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
            TOTAL.fetch_add(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if counting() {
            TOTAL.fetch_add(layout.size(), Ordering::Relaxed);
            ZEROED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_bounded_channel_of_large_messages_zeroes_only_its_stamps() {
    const CAP: usize = 1000;
    type Big = [u8; 32 * 1024];

    COUNTING.with(|c| c.set(true));
    let (tx, rx) = weft::chan::bounded::<Box<Big>>(1);
    drop((tx, rx));
    let small = TOTAL.swap(0, Ordering::Relaxed);
    ZEROED.store(0, Ordering::Relaxed);

    let (tx, rx) = weft::chan::bounded::<Big>(CAP);
    COUNTING.with(|c| c.set(false));
    let zeroed = ZEROED.load(Ordering::Relaxed);
    let total = TOTAL.load(Ordering::Relaxed);

    // The messages' room is there (the ring holds CAP values)...
    assert!(
        total >= CAP * std::mem::size_of::<Big>(),
        "{total} bytes allocated"
    );
    // ...but what is zeroed is a word per slot, plus what any channel zeroes.
    assert!(
        zeroed <= CAP * std::mem::size_of::<usize>() + small,
        "{zeroed} bytes zeroed for a ring of {CAP} slots"
    );

    // And the channel works: a value goes through intact.
    let mut v: Big = [0; 32 * 1024];
    v[12345] = 7;
    tx.try_send(v).unwrap();
    let got = rx.try_recv().unwrap();
    assert_eq!(got[12345], 7);
    assert_eq!(got.iter().map(|&b| usize::from(b)).sum::<usize>(), 7);
}

#[test]
fn a_long_bounded_channel_gets_its_zeroed_stamps_without_the_allocator() {
    // tokio's sync benchmark makes a `channel(1_000_000)` per iteration and sends 5,000
    // values: 8 MiB of stamps that a reused heap block would have to clear each time.
    const CAP: usize = 1_000_000;
    COUNTING.with(|c| c.set(true));
    ZEROED.store(0, Ordering::Relaxed);
    let (tx, rx) = weft::chan::bounded::<usize>(CAP);
    COUNTING.with(|c| c.set(false));
    let zeroed = ZEROED.load(Ordering::Relaxed);
    assert!(zeroed < 64 * 1024, "{zeroed} bytes zeroed by the allocator");

    // Every slot starts free: the ring takes exactly CAP values, in order, and no more.
    for i in 0..CAP {
        tx.try_send(i).unwrap();
    }
    assert!(matches!(
        tx.try_send(CAP),
        Err(weft::chan::TrySendError::Full(_))
    ));
    for i in 0..CAP {
        assert_eq!(rx.try_recv().unwrap(), i);
    }
    assert!(rx.try_recv().is_err());
}
