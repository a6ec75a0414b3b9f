//! Review of 02f1445 (`Ring::drop`, `Zeroed::recycle`, `base::zeroed::clean`): a
//! dropped ring clears only the slots its claims wrote (indices below the tail's while
//! the tail is in its first lap, else all of them) and leaves its zeroed array (the
//! stamps, or the joint stamp-and-value slots) in a one-block cache of the thread that
//! dropped it; the next ring of the same layout made on that thread takes the block
//! instead of calling `calloc`.
//!
//! If a slot the old ring wrote were left dirty, the next channel would start with a
//! stale stamp: a send into that slot spins for ever (the stamp reads as a later lap's),
//! or a receive takes a value nobody sent (uninitialised memory). Every test here makes
//! channels through the public API, leaves them in some state, drops them (on this
//! thread, other threads, fibers, tasks, thread-local destructors), and checks that a
//! channel made next behaves exactly as a fresh one ([`check_fresh`]). A hang fails
//! through the watchdog. Debug builds also assert in `clean::take` that a block taken
//! from the cache is all zero.
//!
//! A counting global allocator ([`zeroed_allocs`]) shows which rings took a recycled
//! block (no `alloc_zeroed` of their array's size), so the checks are known to run on
//! recycled memory, including blocks that pass between element types of one layout.

mod chan_common;
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

use chan_common::{drop_after, fiber_on, join_within, poll_once, rt2, Rng};
use common::{live, load, panic_message, with_limit, Tracked};
use weft::chan::{
    self, Receiver, RecvTimeoutError, Select, SendTimeoutError, Sender, TryRecvError, TrySendError,
};

/// Each test's watchdog.
const LIMIT: Duration = Duration::from_secs(20);

// ---- A global allocator that counts this thread's zeroed allocations of one size ----

struct Watching;

thread_local! {
    /// The size (bytes) of the zeroed allocations counted on this thread; 0: none.
    /// `const` and without a destructor, so the allocator may read them at any time.
    static WATCH: Cell<usize> = const { Cell::new(0) };
    static HITS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = WATCH.try_with(|w| {
            if w.get() != 0 && w.get() == layout.size() {
                let _ = HITS.try_with(|h| h.set(h.get() + 1));
            }
        });
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Watching = Watching;

/// `f`'s result, and how many zeroed allocations of exactly `bytes` this thread made
/// while it ran.
fn zeroed_allocs<R>(bytes: usize, f: impl FnOnce() -> R) -> (R, usize) {
    WATCH.with(|w| w.set(bytes));
    HITS.with(|h| h.set(0));
    let r = f();
    WATCH.with(|w| w.set(0));
    (r, HITS.with(Cell::get))
}

/// The bytes of the zeroed array of a `bounded::<T>(cap)` ring: its joint slots (a
/// stamp word and a value) when those are at most 64 bytes, else a stamp word a slot.
fn ring_bytes<T>(cap: usize) -> usize {
    let joint = std::mem::size_of::<(usize, MaybeUninit<T>)>();
    if joint <= 64 {
        cap * joint
    } else {
        cap * std::mem::size_of::<usize>()
    }
}

/// A `bounded::<T>(cap)`, and whether its zeroed array was a recycled block (no
/// `alloc_zeroed` of its size while making it).
fn make_watched<T>(cap: usize) -> ((Sender<T>, Receiver<T>), bool) {
    let (ends, calls) = zeroed_allocs(ring_bytes::<T>(cap), || chan::bounded::<T>(cap));
    assert!(calls <= 1, "{calls} zeroed arrays for one ring");
    (ends, calls == 0)
}

// ---- Values ----

/// A value type made from a number, that tells whether it is the value of a number.
/// Values are never all zero bytes (but `()`), so one read from a slot never written
/// shows.
trait Val: Send + 'static {
    fn make(i: usize) -> Self;
    fn is(&self, i: usize) -> bool;
}

impl Val for u8 {
    fn make(i: usize) -> u8 {
        (i % 255 + 1) as u8
    }
    fn is(&self, i: usize) -> bool {
        *self == Self::make(i)
    }
}

impl Val for u64 {
    fn make(i: usize) -> u64 {
        !(i as u64)
    }
    fn is(&self, i: usize) -> bool {
        *self == Self::make(i)
    }
}

impl Val for u128 {
    fn make(i: usize) -> u128 {
        !(i as u128) ^ (1 << 100)
    }
    fn is(&self, i: usize) -> bool {
        *self == Self::make(i)
    }
}

impl Val for String {
    fn make(i: usize) -> String {
        format!("value {i}")
    }
    fn is(&self, i: usize) -> bool {
        *self == Self::make(i)
    }
}

impl<const N: usize> Val for [u8; N] {
    fn make(i: usize) -> [u8; N] {
        let b = (i as u64).to_le_bytes();
        std::array::from_fn(|k| b[k % 8] ^ (k as u8) ^ 0xA5)
    }
    fn is(&self, i: usize) -> bool {
        *self == Self::make(i)
    }
}

impl Val for () {
    fn make(_: usize) {}
    fn is(&self, _: usize) -> bool {
        true
    }
}

/// A value aligned to 32 bytes: its joint slot (64 bytes) has the size of 8 stamp
/// words, but another alignment.
#[derive(PartialEq)]
#[repr(align(32))]
struct Aligned([u8; 32]);

impl Val for Aligned {
    fn make(i: usize) -> Aligned {
        Aligned(<[u8; 32]>::make(i))
    }
    fn is(&self, i: usize) -> bool {
        *self == Self::make(i)
    }
}

/// How a test makes and recognises values of one type.
trait Maker: Send + Sync + 'static {
    type T: Send + 'static;
    fn make(&self, i: usize) -> Self::T;
    fn is(&self, v: &Self::T, i: usize) -> bool;
    /// For values that count themselves: every one made so far was dropped once.
    fn settled(&self, _what: &str) {}
}

struct Plain<T>(PhantomData<fn() -> T>);

fn plain<T>() -> Plain<T> {
    Plain(PhantomData)
}

impl<T: Val> Maker for Plain<T> {
    type T = T;
    fn make(&self, i: usize) -> T {
        T::make(i)
    }
    fn is(&self, v: &T, i: usize) -> bool {
        v.is(i)
    }
}

/// Values that count themselves live ([`Tracked`]): a value lost, or read twice out of
/// a slot (a bitwise copy, dropped twice), shows in the count. `settled` checks it
/// unless the values are shared with other threads that may hold some (`quiet`).
struct Live(Arc<AtomicUsize>, bool);

impl Live {
    fn new() -> Live {
        Live(live(), true)
    }

    /// Whose `settled` checks nothing (the test checks the count at its end).
    fn quiet() -> Live {
        Live(live(), false)
    }

    fn check(&self, what: &str) {
        assert_eq!(
            load(&self.0),
            0,
            "{what}: values live (lost, or dropped twice if huge)"
        );
    }
}

impl Maker for Live {
    type T = Tracked;
    fn make(&self, i: usize) -> Tracked {
        Tracked::new(i, &self.0)
    }
    fn is(&self, v: &Tracked, i: usize) -> bool {
        v.id == i && v.alive
    }
    fn settled(&self, what: &str) {
        if self.1 {
            self.check(what);
        }
    }
}

// ---- Driving a channel ----

fn describe<T>(e: &TrySendError<T>) -> &'static str {
    match e {
        TrySendError::Full(_) => "Full",
        TrySendError::Disconnected(_) => "Disconnected",
    }
}

fn send<M: Maker>(m: &M, tx: &Sender<M::T>, i: usize, what: &str) {
    if let Err(e) = tx.try_send(m.make(i)) {
        panic!("{what}: try_send of value {i} failed: {}", describe(&e));
    }
}

fn take<M: Maker>(m: &M, rx: &Receiver<M::T>, i: usize, what: &str) {
    match rx.try_recv() {
        Ok(v) => assert!(m.is(&v, i), "{what}: received another value than {i}"),
        Err(e) => panic!("{what}: try_recv of value {i} failed: {e:?}"),
    }
}

/// From an empty channel: `sent` sends and `recvd` receives, in order, receiving only
/// when the channel is full (so the values wrap round the ring), checking each value.
fn drive<M: Maker>(
    m: &M,
    tx: &Sender<M::T>,
    rx: &Receiver<M::T>,
    sent: usize,
    recvd: usize,
    what: &str,
) {
    let cap = tx.capacity().unwrap();
    assert!(
        recvd <= sent && sent <= recvd + cap,
        "bad state {sent}/{recvd}"
    );
    let (mut s, mut r) = (0, 0);
    while s < sent || r < recvd {
        if s < sent && s - r < cap {
            send(m, tx, s, what);
            s += 1;
        } else {
            take(m, rx, r, what);
            r += 1;
        }
    }
    assert_eq!(rx.len(), sent - recvd, "{what}");
    assert_eq!(rx.is_full(), sent - recvd == cap, "{what}");
}

/// States worth leaving a ring of `cap` in, as (sends, receives): empty and untouched,
/// partly filled in the first lap, one short of a lap, exactly a lap, just past a lap,
/// full after a wrap, several laps.
fn states(cap: usize) -> Vec<(usize, usize)> {
    let c = cap;
    let mut v = vec![
        (0, 0),
        (1, 0),
        (1, 1),
        (c - 1, 0),
        (c - 1, c - 1),
        (c, 0),
        (c, 1),
        (c, c),
        (c + 1, 1),
        (c + 1, c),
        (c + 1, c + 1),
        (2 * c - 1, c),
        (2 * c, c),
        (2 * c, 2 * c),
        (3 * c + 2, 3 * c),
        (3 * c + 2, 2 * c + 3),
        (5 * c, 5 * c),
    ];
    v.retain(|&(s, r)| r <= s && s <= r + c);
    v.sort_unstable();
    v.dedup();
    v
}

/// How the used channel goes.
#[derive(Clone, Copy, Debug)]
enum End {
    /// Both ends dropped, the senders first.
    Drop,
    CloseSender,
    CloseReceiver,
    ReceiversFirst,
    /// A clone of each end kept a while, the originals dropped in between.
    Clones,
}

const ENDS: [End; 5] = [
    End::Drop,
    End::CloseSender,
    End::CloseReceiver,
    End::ReceiversFirst,
    End::Clones,
];

fn finish<T>(tx: Sender<T>, rx: Receiver<T>, end: End) {
    match end {
        End::Drop => {
            drop(tx);
            assert!(rx.is_closed());
            drop(rx);
        }
        End::CloseSender => {
            assert!(tx.close());
            assert!(rx.is_closed());
            drop((rx, tx));
        }
        End::CloseReceiver => {
            assert!(rx.close());
            assert!(tx.is_closed());
            drop((tx, rx));
        }
        End::ReceiversFirst => {
            drop(rx);
            assert!(tx.is_closed());
            drop(tx);
        }
        End::Clones => {
            let (tx2, rx2) = (tx.clone(), rx.clone());
            drop((tx, rx));
            assert!(!tx2.is_closed());
            drop((rx2, tx2));
        }
    }
}

/// A `bounded(cap)` taken to `state`, and dropped as `end` says.
fn use_and_drop<M: Maker>(m: &M, cap: usize, state: (usize, usize), end: End, what: &str) {
    let (tx, rx) = chan::bounded::<M::T>(cap);
    drive(m, &tx, &rx, state.0, state.1, what);
    finish(tx, rx, end);
    m.settled(what);
}

/// The channel behaves as a fresh one: open, empty, no value to receive, exactly `cap`
/// sends fit (each counted in `len`), then `Full` with the value given back, the values
/// come out in order, and the same for two more laps starting at other indices.
fn check_fresh<M: Maker>(m: &M, tx: &Sender<M::T>, rx: &Receiver<M::T>, what: &str) {
    let cap = tx.capacity().unwrap();
    assert!(
        !tx.is_closed() && !rx.is_closed(),
        "{what}: new channel closed"
    );
    assert_eq!(
        (tx.len(), rx.len()),
        (0, 0),
        "{what}: new channel not empty"
    );
    assert!(tx.is_empty() && rx.is_empty(), "{what}");
    assert!(!tx.is_full() && !rx.is_full(), "{what}: new channel full");
    assert!(
        matches!(rx.try_recv(), Err(TryRecvError::Empty)),
        "{what}: a new channel had something to receive"
    );
    let laps = if cap > 2000 { 1 } else { 3 };
    let (mut next, mut first) = (0, 0);
    for lap in 0..laps {
        for j in 0..cap {
            send(m, tx, next, what);
            next += 1;
            assert_eq!(rx.len(), j + 1, "{what}: lap {lap}");
        }
        assert!(tx.is_full() && rx.is_full() && !rx.is_empty(), "{what}");
        match tx.try_send(m.make(usize::MAX)) {
            Err(TrySendError::Full(v)) => assert!(m.is(&v, usize::MAX), "{what}"),
            Err(e) => panic!("{what}: send into a full channel: {}", describe(&e)),
            Ok(()) => panic!(
                "{what}: lap {lap}: {} values fit in a bounded({cap})",
                cap + 1
            ),
        }
        for _ in 0..cap {
            take(m, rx, first, what);
            first += 1;
        }
        assert!(
            matches!(rx.try_recv(), Err(TryRecvError::Empty)),
            "{what}: lap {lap}: more than was sent"
        );
        assert!(rx.is_empty(), "{what}");
        assert_eq!(rx.len(), 0, "{what}");
        let shift = (cap / 2 + lap) % cap;
        for _ in 0..shift {
            send(m, tx, next, what);
            next += 1;
        }
        for _ in 0..shift {
            take(m, rx, first, what);
            first += 1;
        }
    }
}

/// A `bounded(cap)` made now is fresh; returns whether it took a recycled block.
fn assert_fresh<M: Maker>(m: &M, cap: usize, what: &str) -> bool {
    let ((tx, rx), recycled) = make_watched::<M::T>(cap);
    check_fresh(m, &tx, &rx, what);
    drop((tx, rx));
    m.settled(what);
    recycled
}

/// Every state and every way of ending, for one value type and capacity, each followed
/// by a fresh channel of the same capacity on this thread (which takes the block).
fn every_state<M: Maker>(m: &M, cap: usize, name: &str) {
    // A first channel, so that a ring's block is in the cache from the start.
    assert_fresh(m, cap, name);
    let small = ring_bytes::<M::T>(cap) <= 64 << 10;
    for (k, state) in states(cap).into_iter().enumerate() {
        let end = ENDS[k % ENDS.len()];
        let what = format!("{name} bounded({cap}) after {state:?}, {end:?}");
        use_and_drop(m, cap, state, end, &what);
        let recycled = assert_fresh(m, cap, &what);
        assert_eq!(recycled, small, "{what}: recycled: {recycled}");
    }
}

const CAPS: [usize; 10] = [1, 2, 3, 5, 6, 7, 8, 9, 33, 100];

/// Every state of every capacity (powers of two and not), for joint slots (`u8`,
/// `u64`, `u128`, `String`, 56-byte values, zero-sized values, counted values) and
/// stamps apart from the values (100- and 512-byte values): the next channel of that
/// capacity on the thread takes the dropped ring's block and is fresh.
#[test]
fn a_channel_made_after_any_state_of_the_last_one_is_fresh() {
    with_limit(LIMIT, || {
        for cap in CAPS {
            every_state(&plain::<u8>(), cap, "u8");
            every_state(&plain::<u64>(), cap, "u64");
            every_state(&plain::<u128>(), cap, "u128");
            every_state(&plain::<String>(), cap, "String");
            every_state(&plain::<[u8; 56]>(), cap, "[u8; 56]");
            every_state(&plain::<[u8; 100]>(), cap, "[u8; 100]");
            every_state(&plain::<()>(), cap, "()");
            every_state(&Live::new(), cap, "Tracked");
        }
    });
}

/// 512-byte values with capacities whose stamps the cache keeps (up to 8192 slots), at
/// a size where the ring prefaults its first lap (`populate` over the stamps), and
/// the sizes around the cache's limit: 64 KiB is kept, a slot more is not.
#[test]
fn large_rings_and_the_cache_limit() {
    with_limit(LIMIT, || {
        let big = plain::<[u8; 512]>();
        for cap in [1, 7, 1000] {
            every_state(&big, cap, "[u8; 512]");
        }
        for (cap, state) in [
            (8192, (8191, 0)),
            (8192, (8192 + 5, 8192)),
            (8193, (9000, 900)),
        ] {
            let what = format!("[u8; 512] bounded({cap}) after {state:?}");
            use_and_drop(&big, cap, state, End::Drop, &what);
            assert_eq!(assert_fresh(&big, cap, &what), cap <= 8192, "{what}");
        }
        let word = plain::<u64>();
        for (cap, state) in [
            (4096, (4095, 0)),
            (4096, (4100, 4096)),
            (4097, (5000, 4000)),
        ] {
            let what = format!("u64 bounded({cap}) after {state:?}");
            use_and_drop(&word, cap, state, End::CloseSender, &what);
            assert_eq!(assert_fresh(&word, cap, &what), cap <= 4096, "{what}");
        }
        // Joint slots large enough to be populated at creation (not cached), and
        // arrays long enough to be mapped (never cached): after a used one of each,
        // the next is fresh.
        let what = "u64 bounded(20000)";
        use_and_drop(&word, 20_000, (20_003, 20_000), End::Drop, what);
        assert!(!assert_fresh(&word, 20_000, what), "{what} recycled");
        let cap = 131_072;
        use_and_drop(&word, cap, (cap + 3, cap), End::Drop, "u64 mapped");
        assert_fresh(&word, cap, "u64 mapped");
        let apart = plain::<[u8; 100]>();
        use_and_drop(&apart, cap, (cap, 3), End::Drop, "[u8; 100] mapped");
        assert_fresh(&apart, cap, "[u8; 100] mapped");
    });
}

/// A dirty ring of `A`s, then a channel of `B`s whose array has the same layout (it
/// must take the block, and be fresh), then the other way round.
fn across<A: Val, B: Val>(cap_a: usize, cap_b: usize, shared: bool) {
    assert_eq!(ring_bytes::<A>(cap_a), ring_bytes::<B>(cap_b));
    let (a, b) = (plain::<A>(), plain::<B>());
    let name = format!(
        "{} x {cap_a} -> {} x {cap_b}",
        std::any::type_name::<A>(),
        std::any::type_name::<B>()
    );
    for (k, state) in [
        (cap_a - 1, 0),
        (cap_a + 2, cap_a),
        (cap_a, 1),
        (3 * cap_a, 3 * cap_a),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("{name} after {state:?}");
        use_and_drop(&a, cap_a, state, ENDS[k % ENDS.len()], &what);
        let ((tx, rx), recycled) = make_watched::<B>(cap_b);
        assert_eq!(recycled, shared, "{what}: recycled: {recycled}");
        check_fresh(&b, &tx, &rx, &what);
        drive(&b, &tx, &rx, 2 * cap_b - 1, cap_b - 1, &what);
        drop((rx, tx));
        let ((tx, rx), recycled) = make_watched::<A>(cap_a);
        assert_eq!(recycled, shared, "{what}, and back: recycled: {recycled}");
        check_fresh(&a, &tx, &rx, &what);
        drop((tx, rx));
    }
}

/// Blocks of one layout pass between rings of different element types (joint slots of
/// one type, joint slots of another, stamps of a ring apart) and each starts fresh; a
/// ring whose array has the same size but another alignment (`u128` slots) does not
/// take the block (it would be freed with the wrong layout).
#[test]
fn one_block_serves_rings_of_other_element_types_with_its_layout() {
    with_limit(LIMIT, || {
        across::<u64, [u8; 100]>(48, 96, true);
        across::<(), [u8; 512]>(40, 40, true);
        across::<u8, u64>(33, 33, true);
        across::<String, ()>(10, 40, true);
        across::<[u8; 56], u64>(8, 32, true);
        across::<[u8; 56], [u8; 100]>(5, 40, true);
        across::<String, [u8; 24]>(9, 9, true);
        across::<String, u128>(10, 10, false);
        across::<u128, [u8; 100]>(3, 12, false);
        across::<Aligned, [u8; 100]>(4, 32, false);
        across::<Aligned, u64>(4, 16, false);
    });
}

/// The clean block goes to one ring: a second ring of its layout made while the first
/// lives gets memory of its own (both fresh, neither seeing the other's values), and
/// once both are dropped the next takes the block again.
#[test]
fn a_recycled_block_is_handed_out_once() {
    with_limit(LIMIT, || {
        fn twice<M: Maker>(m: &M, cap: usize, what: &str) {
            use_and_drop(m, cap, (cap + 1, 1), End::Drop, what);
            let ((a_tx, a_rx), recycled) = make_watched::<M::T>(cap);
            assert!(recycled, "{what}: the first ring did not take the block");
            drive(m, &a_tx, &a_rx, cap, 0, what);
            let ((b_tx, b_rx), recycled) = make_watched::<M::T>(cap);
            assert!(!recycled, "{what}: the block went to a second ring");
            check_fresh(m, &b_tx, &b_rx, what);
            drive(m, &b_tx, &b_rx, 2 * cap - 1, cap, what);
            for i in 0..cap {
                take(m, &a_rx, i, what);
            }
            assert!(a_rx.is_empty(), "{what}");
            drop((a_tx, a_rx));
            drop((b_tx, b_rx));
            m.settled(what);
            assert!(assert_fresh(m, cap, what), "{what}: not recycled");
        }
        for cap in [1, 2, 5, 64] {
            twice(&plain::<u64>(), cap, "u64");
            twice(&plain::<[u8; 100]>(), cap, "[u8; 100]");
            twice(&Live::new(), cap, "Tracked");
        }
    });
}

/// Senders blocked on a full channel and receivers blocked on an empty one, woken by a
/// close from either end, by the other side going, or by room or a value: then the
/// channel goes (on this thread, which the blocked threads have left), and the next
/// one is fresh (and took its block).
#[test]
fn fresh_after_blocked_ends_woken_by_close() {
    with_limit(LIMIT, || {
        let m = Arc::new(Live::new());
        let pause = || std::thread::sleep(Duration::from_millis(5));
        for cap in [1, 3, 6] {
            for how in 0..4 {
                let what = format!("bounded({cap}), blocked senders, wake {how}");
                let (tx, rx) = chan::bounded::<Tracked>(cap);
                drive(&*m, &tx, &rx, cap + 2, 2, &what);
                let blocked: Vec<_> = (0..2)
                    .map(|k| {
                        let (tx, m) = (tx.clone(), m.clone());
                        std::thread::spawn(move || {
                            tx.send_blocking(m.make(1000 + k)).map_err(|e| e.0.id)
                        })
                    })
                    .collect();
                pause();
                let rx = match how {
                    0 => {
                        assert!(rx.close());
                        Some(rx)
                    }
                    1 => {
                        assert!(tx.close());
                        Some(rx)
                    }
                    2 => {
                        // The last receiver goes.
                        drop(rx);
                        None
                    }
                    _ => {
                        // Room: both blocked values go in, behind the others.
                        for i in 2..cap + 2 {
                            assert_eq!(rx.recv_blocking().unwrap().id, i, "{what}");
                        }
                        let mut late: Vec<_> =
                            (0..2).map(|_| rx.recv_blocking().unwrap().id).collect();
                        late.sort_unstable();
                        assert_eq!(late, [1000, 1001], "{what}");
                        Some(rx)
                    }
                };
                let mut got: Vec<_> = blocked.into_iter().map(|b| b.join().unwrap()).collect();
                got.sort_unstable();
                if how == 3 {
                    assert_eq!(got, [Ok(()), Ok(())], "{what}");
                    drive(&*m, &tx, rx.as_ref().unwrap(), cap, 1, &what);
                } else {
                    assert_eq!(got, [Err(1000), Err(1001)], "{what}");
                    // The values buffered stay until the channel goes, unless the last
                    // receiver went (it drops them).
                    let buffered = if how == 2 { 0 } else { cap };
                    assert_eq!(load(&m.0), buffered, "{what}");
                }
                drop((tx, rx));
                m.settled(&what);
                assert!(assert_fresh(&*m, cap, &what), "{what}: not recycled");

                let what = format!("bounded({cap}), blocked receivers, wake {how}");
                let (tx, rx) = chan::bounded::<Tracked>(cap);
                drive(&*m, &tx, &rx, cap + 1, cap + 1, &what);
                let blocked: Vec<_> = (0..2)
                    .map(|_| {
                        let rx = rx.clone();
                        std::thread::spawn(move || rx.recv_blocking().map(|v| v.id).ok())
                    })
                    .collect();
                pause();
                let tx = match how {
                    0 => {
                        assert!(tx.close());
                        Some(tx)
                    }
                    1 => {
                        assert!(rx.close());
                        Some(tx)
                    }
                    2 => {
                        // The last sender goes.
                        drop(tx);
                        None
                    }
                    _ => {
                        send(&*m, &tx, 7, &what);
                        send(&*m, &tx, 8, &what);
                        Some(tx)
                    }
                };
                let mut got: Vec<_> = blocked.into_iter().map(|b| b.join().unwrap()).collect();
                got.sort_unstable();
                if how == 3 {
                    assert_eq!(got, [Some(7), Some(8)], "{what}");
                    drive(&*m, tx.as_ref().unwrap(), &rx, cap + 1, 2, &what);
                } else {
                    assert_eq!(got, [None, None], "{what}");
                }
                drop((rx, tx));
                m.settled(&what);
                assert!(assert_fresh(&*m, cap, &what), "{what}: not recycled");
            }
        }
    });
}

/// Selections (`Select` with a send and a receive on the same channel, `select!`,
/// selects that time out or find nothing) and timed operations that time out, then the
/// channel goes in each state, and the next one is fresh.
#[test]
fn fresh_after_selects_and_timeouts() {
    with_limit(LIMIT, || {
        let m = Live::new();
        let short = Duration::from_millis(1);
        for cap in [1, 2, 5, 8] {
            for (k, state) in states(cap).into_iter().enumerate() {
                let what = format!("bounded({cap}) selected, then {state:?}");
                let (tx, rx) = chan::bounded::<Tracked>(cap);
                let (mut next, mut first) = (0, 0);
                // Sends and receives chosen by `Select` until a few laps went round.
                while first < 3 * cap + k {
                    let mut sel = Select::new();
                    let s = sel.send(&tx);
                    let r = sel.recv(&rx);
                    let op = sel.select_timeout(Duration::from_secs(5)).expect("hang");
                    if op.index() == s {
                        op.send(&tx, m.make(next)).unwrap();
                        next += 1;
                    } else {
                        assert_eq!(op.index(), r);
                        assert_eq!(op.recv(&rx).unwrap().id, first, "{what}");
                        first += 1;
                    }
                    assert!(next - first <= cap, "{what}");
                }
                // Drain, and the `select!` macro for a lap.
                while first < next {
                    weft::select! {
                        recv(rx) -> v => assert_eq!(v.unwrap().id, first),
                        default => panic!("{what}: a buffered value not ready"),
                    }
                    first += 1;
                }
                for i in 0..cap {
                    weft::select! {
                        send(tx, m.make(i)) -> r => r.unwrap(),
                        default => panic!("{what}: no room in an empty channel"),
                    }
                }
                let mut sel = Select::new();
                sel.send(&tx);
                assert!(sel.try_select().is_err(), "{what}: room in a full channel");
                assert!(sel.select_timeout(short).is_err(), "{what}");
                let r = tx.send_timeout(m.make(usize::MAX), short);
                assert!(
                    matches!(r, Err(SendTimeoutError::Timeout(ref v)) if v.id == usize::MAX),
                    "{what}: a send into a full channel did not time out"
                );
                drop(r);
                for i in 0..cap {
                    assert_eq!(rx.recv_timeout(short).unwrap().id, i, "{what}");
                }
                let mut sel = Select::new();
                sel.recv(&rx);
                assert!(sel.select_timeout(short).is_err(), "{what}");
                assert!(
                    matches!(rx.recv_timeout(short), Err(RecvTimeoutError::Timeout)),
                    "{what}: a receive from an empty channel did not time out"
                );
                drop(sel);
                // Now the state: the channel is empty at some index of some lap.
                drive(&m, &tx, &rx, state.0, state.1, &what);
                finish(tx, rx, ENDS[k % ENDS.len()]);
                m.settled(&what);
                assert!(assert_fresh(&m, cap, &what), "{what}: not recycled");
            }
        }
    });
}

/// Send futures cancelled on a full channel (the value goes with the future), receive
/// futures cancelled while waiting, and a receive cancelled after a value was handed
/// to it (the value goes back to the channel): the channel then goes with values in
/// its ring and beside it, each dropped once, and the next one is fresh.
#[test]
fn fresh_after_cancelled_sends_and_receives() {
    with_limit(LIMIT, || {
        let m = Live::new();
        let rt = rt2();
        for cap in [1, 2, 3, 7] {
            for (k, state) in [(cap, 0), (cap + 1, 1), (2 * cap, cap), (cap, cap)]
                .into_iter()
                .enumerate()
            {
                let what = format!("bounded({cap}) {state:?} with cancelled futures");
                let (tx, rx) = chan::bounded::<Tracked>(cap);
                drive(&m, &tx, &rx, state.0, state.1, &what);
                let full = state.0 - state.1 == cap;
                if full {
                    assert!(poll_once(tx.send(m.make(500))).is_none(), "{what}");
                    let r = rt.block_on(drop_after(3, tx.send(m.make(501))));
                    assert!(r.is_none(), "{what}: a send into a full channel finished");
                    // The values went with their futures.
                    assert_eq!(load(&m.0), cap, "{what}");
                } else {
                    // Empty: a receive waits, is cancelled, and another takes a value
                    // handed to it and is cancelled before it looks (the value goes
                    // back, before the one sent after it).
                    assert!(poll_once(rx.recv()).is_none(), "{what}");
                    let r = rt.block_on(drop_after(3, rx.recv()));
                    assert!(r.is_none(), "{what}: a receive from an empty channel");
                    let mut fut = Box::pin(rx.recv());
                    let waker = std::task::Waker::noop();
                    let mut cx = std::task::Context::from_waker(waker);
                    assert!(fut.as_mut().poll(&mut cx).is_pending());
                    send(&m, &tx, 600, &what);
                    send(&m, &tx, 601, &what);
                    drop(fut);
                    if k % 2 == 0 {
                        take(&m, &rx, 600, &what);
                        take(&m, &rx, 601, &what);
                        assert!(rx.is_empty(), "{what}");
                    }
                }
                finish(tx, rx, ENDS[k % ENDS.len()]);
                m.settled(&what);
                assert!(assert_fresh(&m, cap, &what), "{what}: not recycled");
            }
        }
    });
}

/// Values whose drop panics while the channel drops them (the last receiver's drop
/// drains the ring and drops what it took out, so the ring itself then goes empty, in
/// the unwind): the panic reaches whoever dropped the last end, no value is dropped
/// twice (those after the panicking one are leaked), and the next channel is fresh.
#[test]
fn fresh_after_a_value_panics_in_drop_while_the_channel_drops() {
    struct Bomb<const N: usize> {
        id: usize,
        armed: bool,
        live: Arc<AtomicUsize>,
        _pad: [u8; N],
    }
    impl<const N: usize> Drop for Bomb<N> {
        fn drop(&mut self) {
            self.live.fetch_sub(1, SeqCst);
            if self.armed {
                panic!("bomb {}", self.id);
            }
        }
    }
    struct Bombs<const N: usize>(Arc<AtomicUsize>, Option<usize>);
    impl<const N: usize> Maker for Bombs<N> {
        type T = Bomb<N>;
        fn make(&self, id: usize) -> Bomb<N> {
            self.0.fetch_add(1, SeqCst);
            Bomb {
                id,
                armed: self.1 == Some(id),
                live: self.0.clone(),
                _pad: [0; N],
            }
        }
        fn is(&self, v: &Bomb<N>, i: usize) -> bool {
            v.id == i
        }
        fn settled(&self, what: &str) {
            assert_eq!(load(&self.0), 0, "{what}");
        }
    }
    fn run<const N: usize>(cap: usize, on_other_thread: bool) {
        // The values left are those of sends `recvd..sent`; the second is armed.
        for (sent, recvd) in [(3, 0), (cap + 2, 2), (3 * cap, 2 * cap)] {
            if sent - recvd < 2 || sent - recvd > cap {
                continue;
            }
            let what = format!("Bomb<{N}> bounded({cap}) {sent}/{recvd}");
            let armed = recvd + 1;
            let m = Bombs::<N>(live(), Some(armed));
            let (tx, rx) = chan::bounded(cap);
            drive(&m, &tx, &rx, sent, recvd, &what);
            drop(tx);
            let dropped = if on_other_thread {
                std::thread::spawn(move || catch_unwind(AssertUnwindSafe(|| drop(rx))))
                    .join()
                    .unwrap()
            } else {
                catch_unwind(AssertUnwindSafe(|| drop(rx)))
            };
            let msg = panic_message(&*dropped.expect_err("no panic")).unwrap_or_default();
            assert_eq!(msg, format!("bomb {armed}"), "{what}");
            // Dropped: the values before the armed one, and it; leaked: the rest.
            let left = sent - recvd;
            assert_eq!(load(&m.0), left - 2, "{what}: values dropped (twice?)");
            let calm = Bombs::<N>(live(), None);
            assert_fresh(&calm, cap, &what);
            // And once more, after a quiet drop of a dirty one.
            use_and_drop(&calm, cap, (cap + 1, 1), End::Drop, &what);
            assert!(assert_fresh(&calm, cap, &what), "{what}: not recycled");
        }
    }
    with_limit(LIMIT, || {
        for cap in [2, 3, 5, 8] {
            run::<0>(cap, false);
            run::<200>(cap, false);
            run::<0>(cap, true);
        }
    });
}

/// The thread that drops a channel's last end gets its block: a channel made on one
/// thread and dropped on another, and the next channel there is fresh (and took the
/// block); the first thread's next channel is fresh too (it has no block for it).
#[test]
fn a_channel_dropped_on_another_thread_gives_that_thread_its_block() {
    with_limit(LIMIT, || {
        let (to, from) = mpsc::channel::<(Sender<Tracked>, Receiver<Tracked>, String)>();
        let (done_tx, done_rx) = mpsc::channel::<usize>();
        let m = Arc::new(Live::new());
        let dropper = {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut recycled = 0;
                for (tx, rx, what) in from {
                    let cap = tx.capacity().unwrap();
                    drop((rx, tx));
                    if assert_fresh(&*m, cap, &what) {
                        recycled += 1;
                    }
                    done_tx.send(0).unwrap();
                }
                recycled
            })
        };
        let mut sent = 0;
        for cap in [1, 3, 8, 13] {
            for (k, state) in states(cap).into_iter().enumerate() {
                let what = format!("bounded({cap}) {state:?} dropped on another thread");
                let (tx, rx) = chan::bounded::<Tracked>(cap);
                drive(&*m, &tx, &rx, state.0, state.1, &what);
                if k % 2 == 1 {
                    assert!(tx.close());
                }
                to.send((tx, rx, what.clone())).unwrap();
                sent += 1;
                done_rx.recv().unwrap();
                // This thread gave no block back: its next ring comes from the allocator.
                assert!(!assert_fresh(&*m, cap, &what), "{what}: recycled here");
                // (And that one's block, given back here, is taken by the next.)
                assert!(assert_fresh(&*m, cap, &what), "{what}: not recycled here");
                drop(chan::bounded::<u8>(1));
            }
        }
        drop(to);
        assert_eq!(dropper.join().unwrap(), sent);
        m.settled("all");
    });
}

/// Channels made, used and dropped inside fibers (thread-blocking operations that
/// suspend the fiber, between two fibers) and async tasks (`send().await`,
/// `recv().await`), and channels made on a plain thread and dropped in a fiber: each
/// next channel is fresh.
#[test]
fn fresh_in_fibers_and_tasks() {
    with_limit(LIMIT, || {
        let rt = rt2();
        let mut handles = Vec::new();
        for f in 0..2 {
            handles.push(fiber_on(&rt, move || {
                let m = Live::new();
                for cap in [1, 2, 5, 9] {
                    for (k, state) in states(cap).into_iter().enumerate() {
                        let what = format!("fiber {f}: bounded({cap}) {state:?}");
                        use_and_drop(&m, cap, state, ENDS[(k + f) % ENDS.len()], &what);
                        assert!(assert_fresh(&m, cap, &what), "{what}: not recycled");
                    }
                }
            }));
        }
        for t in 0..2 {
            handles.push(rt.spawn(async move {
                let m = Live::new();
                for cap in [1, 3, 8] {
                    for (k, (sent, recvd)) in states(cap).into_iter().enumerate() {
                        let what = format!("task {t}: bounded({cap}) {sent}/{recvd}");
                        let (tx, rx) = chan::bounded::<Tracked>(cap);
                        let (mut s, mut r) = (0, 0);
                        while s < sent || r < recvd {
                            if s < sent && s - r < cap {
                                tx.send(m.make(s)).await.unwrap();
                                s += 1;
                            } else {
                                assert_eq!(rx.recv().await.unwrap().id, r, "{what}");
                                r += 1;
                            }
                        }
                        finish(tx, rx, ENDS[(k + t) % ENDS.len()]);
                        m.settled(&what);
                        assert!(assert_fresh(&m, cap, &what), "{what}: not recycled");
                    }
                }
            }));
        }
        // Two fibers passing values through a channel, each blocking in turn; the
        // receiving one drops it last, with values in it, and makes the next.
        for cap in [1, 4] {
            let m = Arc::new(Live::quiet());
            let (tx, rx) = chan::bounded::<Tracked>(cap);
            let m1 = m.clone();
            let producer = fiber_on(&rt, move || {
                for i in 0..10 * cap {
                    tx.send_blocking(m1.make(i)).unwrap();
                }
            });
            let consumer = fiber_on(&rt, move || {
                for i in 0..9 * cap {
                    assert_eq!(rx.recv_blocking().unwrap().id, i);
                }
                let what = format!("fibers bounded({cap})");
                // The producer has sent all and gone once the channel is closed.
                while !rx.is_closed() {
                    weft::fiber::yield_now();
                }
                assert_eq!(rx.len(), cap, "{what}");
                drop(rx);
                m.check(&what);
                assert!(assert_fresh(&*m, cap, &what), "{what}: not recycled");
                m.check(&what);
            });
            handles.push(producer);
            handles.push(consumer);
        }
        // Made on this thread, dropped in a fiber, which then makes its own.
        let (to, from) = chan::unbounded::<(Sender<Tracked>, Receiver<Tracked>)>();
        handles.push(fiber_on(&rt, move || {
            let m = Live::new();
            for (tx, rx) in from.iter() {
                let cap = tx.capacity().unwrap();
                drop((tx, rx));
                assert!(assert_fresh(&m, cap, "dropped in a fiber"), "not recycled");
            }
        }));
        let m = Live::quiet();
        for cap in [1, 2, 6] {
            for state in states(cap) {
                let (tx, rx) = chan::bounded::<Tracked>(cap);
                drive(&m, &tx, &rx, state.0, state.1, "to a fiber");
                to.send_blocking((tx, rx)).unwrap();
            }
        }
        drop(to);
        for h in handles {
            join_within(h, 30).expect("a fiber or task failed");
        }
        m.check("sent to a fiber");
    });
}

/// A channel ends' holder in a thread-local, whose destructor drops the channel (with
/// values in it) and then makes, uses and drops more channels: before or after the
/// thread's clean block is torn down, depending on which thread-local came first.
struct AtExit {
    ends: Option<(Sender<Tracked>, Receiver<Tracked>)>,
    m: Arc<Live>,
    cap: usize,
    report: mpsc::Sender<Result<usize, String>>,
}

impl Drop for AtExit {
    fn drop(&mut self) {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let (m, cap) = (&*self.m, self.cap);
            let (tx, rx) = self.ends.take().unwrap();
            assert_eq!(rx.len(), cap, "the channel lost values before its drop");
            drop((tx, rx));
            m.settled("the thread-local's channel");
            let mut recycled = 0;
            for (k, state) in states(cap).into_iter().enumerate() {
                let what = format!("at thread exit, bounded({cap}) {state:?}");
                use_and_drop(m, cap, state, ENDS[k % ENDS.len()], &what);
                recycled += usize::from(assert_fresh(m, cap, &what));
            }
            recycled
        }));
        let _ = self
            .report
            .send(r.map_err(|p| panic_message(&*p).unwrap_or_default()));
    }
}

thread_local! {
    static HOLDER: RefCell<Option<AtExit>> = const { RefCell::new(None) };
}

/// Channels dropped and made in a thread-local's destructor, registered before the
/// thread first used a channel (the clean block's storage then goes first) and after
/// (it goes last): each value is dropped once and every channel starts fresh.
#[test]
fn channels_dropped_and_made_at_thread_exit() {
    with_limit(LIMIT, || {
        let m = Arc::new(Live::new());
        for (cap, holder_first) in [(3, true), (3, false), (8, true), (8, false), (1, true)] {
            let (report, result) = mpsc::channel();
            let m2 = m.clone();
            std::thread::spawn(move || {
                let hold = |ends: Option<_>| {
                    HOLDER.with(|h| {
                        let mut h = h.borrow_mut();
                        match &mut *h {
                            Some(a) => a.ends = ends,
                            None => {
                                *h = Some(AtExit {
                                    ends,
                                    m: m2.clone(),
                                    cap,
                                    report: report.clone(),
                                })
                            }
                        }
                    })
                };
                if holder_first {
                    // The holder's storage first (before any ring is made here: that
                    // touches the clean block's), its ends set below.
                    hold(None);
                }
                use_and_drop(&*m2, cap, (cap + 1, 2), End::Drop, "before exit");
                let (tx, rx) = chan::bounded::<Tracked>(cap);
                drive(&*m2, &tx, &rx, 2 * cap + 1, cap + 1, "held");
                hold(Some((tx, rx)));
            })
            .join()
            .unwrap();
            let r = result
                .recv_timeout(Duration::from_secs(20))
                .expect("the thread-local's destructor did not report");
            match r {
                Err(e) => panic!("bounded({cap}), holder first: {holder_first}: {e}"),
                // Either the clean block's storage was gone by then (nothing is
                // recycled: each ring's arrays are freed, each new one allocated), or
                // still there (every ring after a dropped one takes its block); with
                // glibc's last-registered-first order, the first when the holder came
                // first. Nothing in between (a cache half torn down).
                Ok(n) => assert!(
                    n == 0 || n == states(cap).len(),
                    "bounded({cap}), holder first: {holder_first}: {n} recycled"
                ),
            }
            m.settled("thread exit");
        }
    });
}

/// Values through a channel from two sending threads to two receiving ones over many
/// laps, stopped with a few left in it; the channel goes on this thread with them, each
/// value received or dropped exactly once, and the next channel is fresh.
#[test]
fn fresh_after_contended_traffic() {
    with_limit(LIMIT, || {
        let m = Arc::new(Live::new());
        for (cap, left) in [(1, 1), (7, 5), (7, 0), (16, 16)] {
            let what = format!("bounded({cap}), 2x2 threads, {left} left");
            const PER: usize = 600;
            let (tx, rx) = chan::bounded::<Tracked>(cap);
            let senders: Vec<_> = (0..2)
                .map(|s| {
                    let (tx, m) = (tx.clone(), m.clone());
                    std::thread::spawn(move || {
                        for i in 0..PER {
                            tx.send_blocking(m.make(s * PER + i)).unwrap();
                        }
                    })
                })
                .collect();
            let each = (2 * PER - left) / 2;
            let receivers: Vec<_> = (0..2)
                .map(|r| {
                    let rx = rx.clone();
                    let n = each + r * ((2 * PER - left) % 2);
                    std::thread::spawn(move || {
                        let mut last = [None::<usize>; 2];
                        let mut ids = Vec::with_capacity(n);
                        for _ in 0..n {
                            let v = rx.recv_blocking().unwrap();
                            // Each sender's values come out in its order.
                            let s = v.id / PER;
                            assert!(last[s] < Some(v.id), "out of order");
                            last[s] = Some(v.id);
                            ids.push(v.id);
                        }
                        ids
                    })
                })
                .collect();
            for s in senders {
                s.join().unwrap();
            }
            let mut ids: Vec<usize> = receivers
                .into_iter()
                .flat_map(|r| r.join().unwrap())
                .collect();
            assert_eq!(rx.len(), left, "{what}");
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), 2 * PER - left, "{what}: a value received twice");
            drop((tx, rx));
            m.settled(&what);
            assert!(assert_fresh(&*m, cap, &what), "{what}: not recycled");
        }
    });
}

/// Values whose drop makes, uses and drops channels whose arrays have the layout of
/// the channel they are in (so they take and give back the thread's clean block while
/// that channel receives, drains or drops them): every channel is fresh, every value
/// dropped once.
#[test]
fn values_whose_drop_makes_channels_of_the_same_layout() {
    struct Nesting<const N: usize> {
        id: usize,
        cap: usize,
        live: Arc<AtomicUsize>,
        _pad: [u8; N],
    }
    impl<const N: usize> Drop for Nesting<N> {
        fn drop(&mut self) {
            self.live.fetch_sub(1, SeqCst);
            if self.id == usize::MAX {
                return;
            }
            let what = format!("inside the drop of value {}", self.id);
            // The inner channels' arrays have the outer ring's layout.
            if N == 0 {
                let m = plain::<String>();
                use_and_drop(&m, self.cap, (self.cap + 1, 1), End::Drop, &what);
                assert_fresh(&m, self.cap, &what);
            } else {
                let m = plain::<[u8; 100]>();
                use_and_drop(&m, self.cap, (self.cap, 0), End::CloseSender, &what);
                assert_fresh(&m, self.cap, &what);
            }
        }
    }
    struct Nest<const N: usize>(Arc<AtomicUsize>, usize);
    impl<const N: usize> Maker for Nest<N> {
        type T = Nesting<N>;
        fn make(&self, id: usize) -> Nesting<N> {
            self.0.fetch_add(1, SeqCst);
            Nesting {
                id,
                cap: self.1,
                live: self.0.clone(),
                _pad: [0; N],
            }
        }
        fn is(&self, v: &Nesting<N>, i: usize) -> bool {
            v.id == i
        }
        fn settled(&self, what: &str) {
            assert_eq!(load(&self.0), 0, "{what}");
        }
    }
    fn run<const N: usize>(cap: usize) {
        let inner = if N == 0 {
            ring_bytes::<String>(cap)
        } else {
            ring_bytes::<[u8; 100]>(cap)
        };
        assert_eq!(ring_bytes::<Nesting<N>>(cap), inner);
        let m = Nest::<N>(live(), cap);
        for (k, state) in states(cap).into_iter().enumerate() {
            let what = format!("Nesting<{N}> bounded({cap}) {state:?}");
            use_and_drop(&m, cap, state, ENDS[k % ENDS.len()], &what);
            assert_fresh(&m, cap, &what);
        }
    }
    with_limit(LIMIT, || {
        for cap in [1, 2, 5] {
            run::<0>(cap);
            run::<200>(cap);
        }
    });
}

/// Threads making, using and dropping channels of several types and capacities at
/// once, some handing their channels to a neighbour to drop: every channel any of them
/// makes is fresh, and every value is dropped once.
#[test]
fn many_threads_make_and_drop_channels_at_once() {
    type Ends<T> = (Sender<T>, Receiver<T>);
    enum Handed {
        Words(Ends<u64>),
        Apart(Ends<[u8; 100]>),
        Counted(Ends<Tracked>),
    }
    fn step<M: Maker>(
        m: &M,
        rng: &mut Rng,
        cap: usize,
        what: &str,
        hand: impl FnOnce(Ends<M::T>) -> Option<Ends<M::T>>,
    ) {
        let s = states(cap);
        let state = s[rng.below(s.len() as u64) as usize];
        let (tx, rx) = chan::bounded::<M::T>(cap);
        drive(m, &tx, &rx, state.0, state.1, what);
        if rng.below(3) == 0 {
            let end = ENDS[rng.below(ENDS.len() as u64) as usize];
            if let Some((tx, rx)) = hand((tx, rx)) {
                finish(tx, rx, end);
            }
        } else {
            finish(tx, rx, ENDS[rng.below(ENDS.len() as u64) as usize]);
        }
        assert_fresh(m, cap, what);
    }
    const THREADS: usize = 4;
    with_limit(LIMIT, || {
        let barrier = Arc::new(Barrier::new(THREADS));
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<Handed>()).unzip();
        let threads: Vec<_> = rxs
            .into_iter()
            .enumerate()
            .map(|(t, inbox)| {
                let next = txs[(t + 1) % THREADS].clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    // Quiet: values of this thread's may sit in a neighbour's inbox.
                    let m = Live::quiet();
                    let mut rng = Rng::new(0x5EED + t as u64);
                    barrier.wait();
                    for i in 0..150 {
                        // Drop what the neighbour handed over, here.
                        for h in inbox.try_iter() {
                            drop(h);
                        }
                        let cap = [1, 2, 3, 5, 8, 13, 64][rng.below(7) as usize];
                        let what = format!("thread {t}, round {i}, bounded({cap})");
                        match rng.below(3) {
                            0 => step(&plain::<u64>(), &mut rng, cap, &what, |e| {
                                next.send(Handed::Words(e)).err().map(|e| match e.0 {
                                    Handed::Words(e) => e,
                                    _ => unreachable!(),
                                })
                            }),
                            1 => step(&plain::<[u8; 100]>(), &mut rng, cap, &what, |e| {
                                next.send(Handed::Apart(e)).err().map(|e| match e.0 {
                                    Handed::Apart(e) => e,
                                    _ => unreachable!(),
                                })
                            }),
                            _ => step(&m, &mut rng, cap, &what, |e| {
                                next.send(Handed::Counted(e)).err().map(|e| match e.0 {
                                    Handed::Counted(e) => e,
                                    _ => unreachable!(),
                                })
                            }),
                        }
                    }
                    barrier.wait();
                    for h in inbox.try_iter() {
                        drop(h);
                    }
                    // Every neighbour has dropped what it was handed.
                    barrier.wait();
                    m.check(&format!("thread {t}"));
                })
            })
            .collect();
        drop(txs);
        for t in threads {
            t.join().unwrap();
        }
    });
}
