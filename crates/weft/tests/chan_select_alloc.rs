//! A select that finds a value ready allocates nothing per message (issue 15: zero
//! allocations per message on bounded channels): its quick pass keeps the value it
//! took inline in the `SelectedOperation`, not in a boxed node. Counted with a global
//! allocator on the thread under test only (the test harness's threads allocate too).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use weft::chan::{bounded, unbounded, Receiver, Select, Sender};

struct Counting;

thread_local! {
    /// Set on the thread under test around the measured region. `const`-initialised and
    /// without a destructor, so reading it from the allocator never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Allocations made on this thread while `COUNTING` was set.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> usize {
    ALLOCS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(Cell::get)
}

const MSGS: usize = 10_000;

/// Fills four channels made by `new`, then selects every message, with one `Select`
/// reused or (`fresh`) a new one per message, as crossbeam's benchmarks do (a select
/// of up to four operations keeps them inline). Returns the allocations counted while
/// selecting and receiving.
fn select_allocations(new: impl Fn() -> (Sender<u64>, Receiver<u64>), fresh: bool) -> usize {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..4).map(|_| new()).unzip();
    for (k, tx) in txs.iter().enumerate() {
        for i in 0..MSGS / 4 {
            tx.send_blocking((k * MSGS + i) as u64).unwrap();
        }
    }
    let mut sel = Select::new();
    for rx in &rxs {
        sel.recv(rx);
    }
    let mut seen = vec![0usize; 4];
    // Warm-up: whatever a first select sets up once (the generator of the random order,
    // thread-locals) is not per message.
    let op = sel.select();
    let k = op.index();
    assert!(op.recv(&rxs[k]).is_ok());
    seen[k] += 1;
    let n = allocations(|| {
        for _ in 1..MSGS {
            if fresh {
                sel = Select::new();
                for rx in &rxs {
                    sel.recv(rx);
                }
            }
            let op = sel.select();
            let k = op.index();
            let v = op.recv(&rxs[k]).expect("a buffered value");
            assert_eq!(v as usize / MSGS, k, "a value of another channel");
            seen[k] += 1;
        }
    });
    assert_eq!(seen, vec![MSGS / 4; 4], "every value selected exactly once");
    n
}

#[test]
fn selecting_a_ready_value_on_bounded_channels_allocates_nothing() {
    for fresh in [false, true] {
        let n = select_allocations(|| bounded(MSGS), fresh);
        assert_eq!(
            n, 0,
            "{n} allocations for {MSGS} selected messages (fresh: {fresh})"
        );
    }
}

#[test]
fn selecting_a_ready_value_on_unbounded_channels_allocates_nothing() {
    // An unbounded channel's blocks were allocated by the sends (and are only freed
    // here): the select adds nothing per message.
    for fresh in [false, true] {
        let n = select_allocations(unbounded, fresh);
        assert_eq!(
            n, 0,
            "{n} allocations for {MSGS} selected messages (fresh: {fresh})"
        );
    }
}

/// A select that finds nothing ready makes its group and nodes in one block: a
/// `try_select` over four empty channels (a full round: every node registered, then
/// taken off again) allocates once, whatever the channels' flavours (it was seven: the
/// group, a box per node, the node table and the order), and a selected operation's
/// node travels in that block.
#[test]
fn a_select_that_registers_allocates_one_block() {
    let (_t0, r0) = bounded::<u64>(0);
    let (_t1, r1) = bounded::<u64>(1);
    let (_t2, r2) = unbounded::<String>();
    let (t3, _r3) = bounded::<[u64; 64]>(4);
    let mut sel = Select::new();
    sel.recv(&r0);
    sel.recv(&r1);
    sel.recv(&r2);
    sel.send(&t3);
    for _ in 0..4 {
        t3.try_send([0; 64]).unwrap();
    }
    // Warm-up, as above.
    assert!(sel.try_select().is_err());
    for round in 0..3 {
        let n = allocations(|| assert!(sel.try_select().is_err()));
        assert_eq!(
            n, 1,
            "round {round}: {n} allocations for a select that registered"
        );
    }
    // Selected by a full round (the select waits; a sender comes later and hands its
    // value to the select's node), then performed: the value comes out of the block.
    let (t4, r4) = bounded::<String>(0);
    let mut sel = Select::new();
    sel.recv(&r4);
    sel.recv(&r2);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            t4.send_blocking("hello".to_string()).unwrap();
        });
        let op = sel.select();
        assert_eq!(op.index(), 0);
        assert_eq!(op.recv(&r4).as_deref(), Ok("hello"));
    });
}

/// Where a sender waits (a rendezvous sender, or one queued behind a full buffer), the
/// channel's fast path cannot decide, and the quick pass takes the value under the
/// lock, still with no node: no allocation, and the queued sender moves into the
/// freed slot.
#[test]
fn a_select_takes_a_waiting_senders_value_without_a_round() {
    for cap in [0, 1] {
        let (tx, rx) = bounded::<u64>(cap);
        let (_tx2, rx2) = unbounded::<u64>();
        if cap == 1 {
            tx.send_blocking(1).unwrap();
        }
        let mut sel = Select::new();
        let i = sel.recv(&rx);
        sel.recv(&rx2);
        std::thread::scope(|s| {
            s.spawn(|| tx.send_blocking(2).unwrap());
            // Until the sender waits (a select before that finds nothing: retried).
            let mut got = None;
            for _ in 0..400 {
                std::thread::sleep(std::time::Duration::from_millis(5));
                let mut r = None;
                let n = allocations(|| r = sel.try_select().ok().map(|op| (op.index(), op)));
                if let Some((k, op)) = r {
                    assert_eq!(
                        n, 0,
                        "bounded({cap}): a waiting sender's value cost {n} allocations"
                    );
                    assert_eq!(k, i);
                    got = Some(op.recv(&rx).unwrap());
                    break;
                }
            }
            assert_eq!(
                got,
                Some(1 + u64::from(cap == 0)),
                "bounded({cap}): the oldest value"
            );
        });
        if cap == 1 {
            assert_eq!(
                rx.try_recv(),
                Ok(2),
                "the queued sender's value moved into the slot"
            );
        }
        assert!(rx.is_empty());
    }
}

#[test]
fn a_quick_selected_value_dropped_unperformed_goes_back_inline_or_boxed() {
    // A `String` fits the inline room (its drop must run exactly once: after the
    // value comes back and is received); a large array does not, and is boxed there.
    let (tx, rx) = bounded::<String>(2);
    tx.send_blocking("a".repeat(3)).unwrap();
    tx.send_blocking("b".repeat(3)).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    drop(sel.select());
    assert_eq!(rx.len(), 2, "the value went back");
    assert_eq!(rx.recv_blocking().as_deref(), Ok("aaa"), "at the front");
    assert_eq!(sel.select().recv(&rx).as_deref(), Ok("bbb"));

    type Big = [u64; 16];
    let (tx, rx) = bounded::<Big>(2);
    let big = |k: u64| std::array::from_fn::<u64, 16, _>(|i| k * 100 + i as u64);
    tx.send_blocking(big(1)).unwrap();
    tx.send_blocking(big(2)).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    drop(sel.select());
    assert_eq!(sel.select().recv(&rx), Ok(big(1)));
    assert_eq!(sel.select().recv(&rx), Ok(big(2)));
    assert!(rx.is_empty());
}

/// As below, for a value the quick pass took under the lock from a waiting sender
/// (counted on its way as the fast path's are): while the operation holds it, the
/// channel closed by its last sender is not yet disconnected, and dropped unperformed
/// the value comes back and is received.
#[test]
fn a_value_taken_from_a_waiting_sender_and_given_back_is_still_received() {
    let (tx, rx) = bounded::<Vec<u8>>(0);
    let mut sel = Select::new();
    sel.recv(&rx);
    std::thread::scope(|s| {
        s.spawn(move || tx.send_blocking(vec![9; 2]).unwrap());
        let mut op = None;
        for _ in 0..400 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            if let Ok(o) = sel.try_select() {
                op = Some(o);
                break;
            }
        }
        let op = op.expect("the sender came");
        // The sender finished (its value was taken) and dropped its end: closed.
        for _ in 0..400 {
            if rx.is_closed() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(rx.is_closed());
        assert_eq!(rx.try_recv(), Err(weft::chan::TryRecvError::Empty));
        drop(op);
        assert_eq!(rx.try_recv(), Ok(vec![9; 2]));
        assert_eq!(rx.try_recv(), Err(weft::chan::TryRecvError::Disconnected));
    });
}

#[test]
fn a_quick_selected_value_given_back_to_a_closed_channel_is_still_received() {
    let (tx, rx) = bounded::<Vec<u8>>(1);
    tx.send_blocking(vec![7; 3]).unwrap();
    drop(tx);
    let mut sel = Select::new();
    sel.recv(&rx);
    let op = sel.select();
    // Closed, but the value is on its way: not yet disconnected.
    assert_eq!(rx.try_recv(), Err(weft::chan::TryRecvError::Empty));
    drop(op);
    assert_eq!(rx.try_recv(), Ok(vec![7; 3]));
    assert_eq!(rx.try_recv(), Err(weft::chan::TryRecvError::Disconnected));
}

#[test]
fn a_select_of_more_operations_than_fit_inline_keeps_their_indices() {
    // Seven operations: the first four inline, then all of them in a `Vec`; removed
    // ones keep their places.
    let chans: Vec<_> = (0..7).map(|_| bounded::<usize>(1)).collect();
    let mut sel = Select::new();
    for (k, (_, rx)) in chans.iter().enumerate() {
        assert_eq!(sel.recv(rx), k);
    }
    sel.remove(2);
    sel.remove(5);
    for k in [6, 0, 4, 1, 3] {
        chans[k].0.send_blocking(k).unwrap();
        let op = sel.select();
        assert_eq!(op.index(), k);
        assert_eq!(op.recv(&chans[k].1), Ok(k));
    }
    assert!(sel.try_select().is_err());
    let (tx, _rx) = bounded::<usize>(1);
    assert_eq!(sel.send(&tx), 7);
    let op = sel.select();
    assert_eq!(op.index(), 7);
    assert_eq!(op.send(&tx, 1), Ok(()));
}

/// A `Select` of a few operations is returned by value from the helper that builds it
/// (crossbeam's benchmarks do so per message): at 128 bytes or less the move is a few
/// inline stores; at 136 it was a call to `memcpy` that read back bytes just written
/// (some 2% of a selected message in a profile).
#[test]
fn a_select_fits_in_128_bytes() {
    assert!(
        std::mem::size_of::<weft::chan::Select<'static>>() <= 128,
        "size {}",
        std::mem::size_of::<weft::chan::Select<'static>>()
    );
}
