//! Adversarial review of the unbounded channel's list of blocks after a used-up block
//! became kept for reuse (cleared by its destroyer and stored in the list's one-block
//! cache, taken again by the next push that needs a block), lost claims back off, and
//! `READ`/`DESTROY` are set by `fetch_add`. Safe code only: `weft::chan::unbounded()`
//! and `bounded(cap)` with `cap > 2^20` (which also buffers in the list).
//!
//! What could go wrong: a block reused while a thread still touches its last life (a
//! value read twice, a slot's stale `WRITE` letting a pop read an unwritten value, a
//! stale `next` sending `head` or the channel's drop into a freed block), a state bit
//! added twice (a carry into the next bit), a block kept in the cache and also freed
//! (double free) or never freed, a value lost, duplicated, torn, dropped twice or never.
//!
//! Every value with `Drop` records it in a [`Ledger`] (one counter per id): a second
//! drop of an id is counted and fails the test at the end; a missing one too. Values
//! carry a pattern derived from their id, checked on arrival (a torn or stale value).
//! Block boundaries: a block holds 31 values, so every test crosses hundreds of them.

mod chan_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chan_common::{fiber_on, join_within, rt2, watchdog, Rng};
use weft::chan::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};

/// Values per block of the list (`list::BLOCK_CAP`).
const BLOCK: usize = 31;
/// The channel's largest ring; larger capacities buffer in a list.
const RING_MAX: usize = 1 << 20;

/// Counts the allocations and frees of list blocks of [`Odd`] values (the only
/// allocations of their size in this binary), so a leaked block, a kept block never
/// freed, or a steady flow that allocates on and on shows.
struct CountBlocks;

/// A value size no other allocation of this binary has in 31 copies.
type Odd = [u8; 1003];

/// The layout of a list block of `Odd` values (`list::Block<T>`: `next`, then 31 slots
/// of a value and a state word; with two fields per struct the size does not depend
/// on their order).
#[allow(dead_code)]
struct BlockMirror {
    next: *mut u8,
    slots: [(std::mem::MaybeUninit<Odd>, AtomicUsize); BLOCK],
    /// The slab the block was carved from (null: allocated alone).
    slab: *mut u8,
}

/// A block of `Odd` values (exactly its size: nothing else in this binary has it).
fn is_block_of_odd(layout: Layout) -> bool {
    layout.size() == std::mem::size_of::<BlockMirror>()
        && layout.align() == std::mem::align_of::<BlockMirror>()
}

static BLOCKS_MADE: AtomicUsize = AtomicUsize::new(0);
/// Held by the tests that count blocks of `Odd` values (one at a time).
static ODD_BLOCKS: Mutex<()> = Mutex::new(());
static BLOCKS_FREED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to `System`, counting.
unsafe impl GlobalAlloc for CountBlocks {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_block_of_odd(layout) {
            BLOCKS_MADE.fetch_add(1, SeqCst);
        }
        // SAFETY: the caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_block_of_odd(layout) {
            BLOCKS_MADE.fetch_add(1, SeqCst);
        }
        // SAFETY: the caller's contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_block_of_odd(layout) {
            BLOCKS_FREED.fetch_add(1, SeqCst);
        }
        // SAFETY: the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: CountBlocks = CountBlocks;

/// One drop counter per id.
struct Ledger {
    drops: Vec<AtomicU8>,
    /// Drops of an id that was dropped already.
    doubles: AtomicUsize,
}

impl Ledger {
    fn new(n: usize) -> Arc<Ledger> {
        Arc::new(Ledger {
            drops: (0..n).map(|_| AtomicU8::new(0)).collect(),
            doubles: AtomicUsize::new(0),
        })
    }

    fn drop_of(&self, id: usize) {
        if self.drops[id].fetch_add(1, SeqCst) != 0 {
            self.doubles.fetch_add(1, SeqCst);
        }
    }

    /// Every id dropped exactly once.
    fn assert_all_once(&self) {
        assert_eq!(self.doubles.load(SeqCst), 0, "a value was dropped twice");
        let missing: Vec<usize> = (0..self.drops.len())
            .filter(|&i| self.drops[i].load(SeqCst) != 1)
            .take(10)
            .collect();
        assert!(
            missing.is_empty(),
            "ids not dropped exactly once: {missing:?}"
        );
    }
}

/// A value of `N` words that records its drop; its words are derived from its id, and
/// a heap box makes a duplicated value a double free the allocator may notice too.
struct Item<const N: usize> {
    id: usize,
    words: [u64; N],
    boxed: Box<usize>,
    ledger: Arc<Ledger>,
}

/// Word `i` of value `id` (of a large value, every word is word 0: it is made fast,
/// so that a producer can outpace nothing but the memory copy).
fn pattern<const N: usize>(id: usize, i: usize) -> u64 {
    let i = if N > 64 { 0 } else { i };
    (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64)
}

impl<const N: usize> Item<N> {
    fn new(id: usize, ledger: &Arc<Ledger>) -> Item<N> {
        Item {
            id,
            words: if N > 64 {
                [pattern::<N>(id, 0); N]
            } else {
                std::array::from_fn(|i| pattern::<N>(id, i))
            },
            boxed: Box::new(id),
            ledger: ledger.clone(),
        }
    }

    /// The value arrived whole: its box and its words (of a large value, one in 64
    /// and the last, so that a consumer checks faster than a producer makes values).
    fn check(&self) {
        assert_eq!(*self.boxed, self.id, "value {} torn (box)", self.id);
        let step = if N > 64 { 64 } else { 1 };
        for i in (0..N).step_by(step).chain(N.checked_sub(1)) {
            let w = self.words[i];
            assert_eq!(
                w,
                pattern::<N>(self.id, i),
                "value {} torn (word {i})",
                self.id
            );
        }
    }
}

impl<const N: usize> Drop for Item<N> {
    fn drop(&mut self) {
        self.ledger.drop_of(self.id);
    }
}

/// How a consumer waits.
#[derive(Clone, Copy)]
enum Recv {
    Blocking,
    Timeout,
    Spin,
}

/// Receives until the channel is closed and drained, checking each value, and returns
/// the ids in arrival order.
fn consume<const N: usize>(rx: &Receiver<Item<N>>, how: Recv) -> Vec<usize> {
    let mut got = Vec::new();
    // Bounded: far more rounds than values; an idle round yields or waits 1 ms.
    for _ in 0..50_000_000u64 {
        let item = match how {
            Recv::Blocking => match rx.recv_blocking() {
                Ok(v) => v,
                Err(_) => return got,
            },
            Recv::Timeout => match rx.recv_timeout(Duration::from_millis(1)) {
                Ok(v) => v,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return got,
            },
            Recv::Spin => match rx.try_recv() {
                Ok(v) => v,
                Err(TryRecvError::Empty) => {
                    std::thread::yield_now();
                    continue;
                }
                Err(TryRecvError::Disconnected) => return got,
            },
        };
        item.check();
        got.push(item.id);
    }
    panic!("consumer did not finish")
}

/// Ids: producer `p`'s `i`-th value is `p * per + i`.
fn check_arrivals(per: usize, producers: usize, got: &[Vec<usize>]) {
    let mut seen = vec![false; per * producers];
    for list in got {
        let mut last = vec![None; producers];
        for &id in list {
            let (p, i) = (id / per, id % per);
            assert!(last[p] < Some(i), "producer {p}: {i} after {:?}", last[p]);
            last[p] = Some(i);
            assert!(!seen[id], "{id} received twice");
            seen[id] = true;
        }
    }
    let lost: Vec<usize> = (0..seen.len()).filter(|&i| !seen[i]).take(10).collect();
    assert!(lost.is_empty(), "values lost: {lost:?}");
}

/// `producers` threads send `per` values each, `consumers` threads (cycling through
/// the ways of waiting) receive them; every value arrives once, whole, in each
/// producer's order, and is dropped once.
fn mpmc<const N: usize>(
    (tx, rx): (Sender<Item<N>>, Receiver<Item<N>>),
    producers: usize,
    consumers: usize,
    per: usize,
) {
    let ledger = Ledger::new(producers * per);
    let senders: Vec<_> = (0..producers)
        .map(|p| {
            let (tx, ledger) = (tx.clone(), ledger.clone());
            std::thread::spawn(move || {
                for i in 0..per {
                    let sent = tx.send_blocking(Item::new(p * per + i, &ledger));
                    assert!(sent.is_ok(), "send failed");
                }
            })
        })
        .collect();
    drop(tx);
    let hows = [Recv::Spin, Recv::Blocking, Recv::Timeout];
    let receivers: Vec<_> = (0..consumers)
        .map(|c| {
            let rx = rx.clone();
            std::thread::spawn(move || consume(&rx, hows[c % hows.len()]))
        })
        .collect();
    drop(rx);
    for s in senders {
        s.join().unwrap();
    }
    let got: Vec<Vec<usize>> = receivers.into_iter().map(|r| r.join().unwrap()).collect();
    check_arrivals(per, producers, &got);
    ledger.assert_all_once();
}

/// Many threads on an unbounded channel, values crossing about 500 blocks, nearly
/// every block being the cached one of an earlier life.
#[test]
fn mpmc_threads_unbounded_every_value_once() {
    watchdog(60, || mpmc::<4>(chan::unbounded(), 4, 4, 4_000));
}

/// The same on a bounded channel too large for a ring (it buffers in a list).
#[test]
fn mpmc_threads_huge_bounded_every_value_once() {
    watchdog(60, || mpmc::<4>(chan::bounded(RING_MAX + 1), 3, 3, 4_000));
}

/// Large values (4 KiB: a block of 124 KiB), two by two.
#[test]
fn large_values_arrive_whole() {
    watchdog(60, || mpmc::<512>(chan::unbounded(), 2, 2, 1_000));
}

/// One producer and one consumer in near lockstep: the queue stays within a block or
/// two, so every block is the cached one reused (the steady-state path the change is
/// for), thousands of times: a stale slot state or `next` in a reused block shows as
/// a duplicate, a torn value or a missing one.
#[test]
fn lockstep_reuse_thousands_of_block_lives() {
    watchdog(60, || {
        let (tx, rx) = chan::unbounded::<Item<2>>();
        const N: usize = 100 * BLOCK + 7;
        let ledger = Ledger::new(N);
        let producer = {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                for id in 0..N {
                    tx.send_blocking(Item::new(id, &ledger)).ok().unwrap();
                    // Let the consumer catch up now and then: the head chases the tail
                    // over the boundary and frees the block the next push reuses.
                    if id % 13 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        };
        for want in 0..N {
            let item = rx.recv_blocking().expect("closed early");
            item.check();
            assert_eq!(item.id, want, "out of order");
        }
        producer.join().unwrap();
        assert_eq!(rx.try_recv().err(), Some(TryRecvError::Disconnected));
        drop(rx);
        ledger.assert_all_once();
    });
}

/// Single thread, deterministic: every pattern of "k values pushed, j popped" over
/// boundaries, so the cache is filled, taken, filled while full (freed), and the
/// channel dropped with the cache full, empty, and values in one, two or more blocks.
#[test]
fn single_thread_patterns_over_boundaries() {
    watchdog(60, || {
        for (push, pop) in [(1, 1), (31, 31), (32, 31), (62, 31), (93, 62), (100, 99)] {
            for rounds in 1..4usize {
                let n = push * rounds;
                let ledger = Ledger::new(n);
                let (tx, rx) = chan::unbounded::<Item<1>>();
                let mut next_in = 0;
                let mut next_out = 0;
                for _ in 0..rounds {
                    for _ in 0..push {
                        tx.try_send(Item::new(next_in, &ledger)).ok().unwrap();
                        next_in += 1;
                    }
                    for _ in 0..pop {
                        let item = rx.try_recv().expect("value missing");
                        item.check();
                        assert_eq!(item.id, next_out);
                        next_out += 1;
                    }
                }
                assert_eq!(rx.len(), n - next_out);
                // Dropped with values left, on another thread.
                std::thread::spawn(move || drop((tx, rx))).join().unwrap();
                ledger.assert_all_once();
            }
        }
    });
}

/// Channels dropped mid-flow with values in several blocks (and a block in the
/// cache), from the last handle on another thread, after a producer and a consumer
/// raced: every value dropped exactly once.
#[test]
fn dropped_mid_flow_every_value_dropped_once() {
    watchdog(60, || {
        let mut rng = Rng::new(7);
        for round in 0..40 {
            let per = 40 + rng.below(200) as usize;
            let pops = rng.below(per as u64 * 2) as usize;
            let ledger = Ledger::new(2 * per);
            let (tx, rx) = chan::unbounded::<Item<1>>();
            let producers: Vec<_> = (0..2)
                .map(|p| {
                    let (tx, ledger) = (tx.clone(), ledger.clone());
                    std::thread::spawn(move || {
                        for i in 0..per {
                            tx.send_blocking(Item::new(p * per + i, &ledger))
                                .ok()
                                .unwrap();
                        }
                    })
                })
                .collect();
            let consumer = {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut n = 0;
                    for _ in 0..pops {
                        match rx.try_recv() {
                            Ok(item) => {
                                item.check();
                                n += 1;
                            }
                            Err(_) => std::thread::yield_now(),
                        }
                    }
                    n
                })
            };
            for p in producers {
                p.join().unwrap();
            }
            let popped = consumer.join().unwrap();
            assert_eq!(rx.len(), 2 * per - popped, "round {round}");
            std::thread::spawn(move || drop((tx, rx))).join().unwrap();
            ledger.assert_all_once();
        }
    });
}

/// Zero-sized values with a drop counter, across threads and blocks, some left in
/// the channel when it is dropped.
#[test]
fn zero_sized_values_counted() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Zst;
    impl Drop for Zst {
        fn drop(&mut self) {
            DROPS.fetch_add(1, SeqCst);
        }
    }
    assert_eq!(std::mem::size_of::<Zst>(), 0);
    watchdog(60, || {
        const PER: usize = 3_000;
        let (tx, rx) = chan::unbounded::<Zst>();
        let producers: Vec<_> = (0..3)
            .map(|_| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for _ in 0..PER {
                        tx.send_blocking(Zst).ok().unwrap();
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut n = 0;
                    while n < PER {
                        match rx.recv_timeout(Duration::from_secs(10)) {
                            Ok(_) => n += 1,
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                    n
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let received: usize = consumers.into_iter().map(|c| c.join().unwrap()).sum();
        assert_eq!(received, 2 * PER);
        assert_eq!(rx.len(), PER);
        assert_eq!(DROPS.load(SeqCst), 2 * PER);
        drop((tx, rx));
        assert_eq!(DROPS.load(SeqCst), 3 * PER);
    });
}

/// `close` racing pushes: each send either succeeds (its value is received once) or
/// fails with the value back (dropped once by the sender).
#[test]
fn close_races_pushes() {
    watchdog(60, || {
        let mut rng = Rng::new(11);
        for _ in 0..20 {
            const PER: usize = 400;
            let ledger = Ledger::new(3 * PER);
            let (tx, rx) = chan::unbounded::<Item<1>>();
            let sent = Arc::new(Mutex::new(Vec::new()));
            let producers: Vec<_> = (0..3)
                .map(|p| {
                    let (tx, ledger, sent) = (tx.clone(), ledger.clone(), sent.clone());
                    std::thread::spawn(move || {
                        let mut ok = Vec::new();
                        for i in 0..PER {
                            match tx.try_send(Item::new(p * PER + i, &ledger)) {
                                Ok(()) => ok.push(p * PER + i),
                                Err(e) => {
                                    assert!(e.is_disconnected(), "unbounded full?");
                                    // Dropped here, by the sender.
                                }
                            }
                        }
                        sent.lock().unwrap().extend(ok);
                    })
                })
                .collect();
            let consumer = {
                let rx = rx.clone();
                std::thread::spawn(move || consume(&rx, Recv::Spin))
            };
            let wait = rng.below(300);
            for _ in 0..wait {
                std::thread::yield_now();
            }
            tx.close();
            for p in producers {
                p.join().unwrap();
            }
            drop(tx);
            drop(rx);
            let mut got = consumer.join().unwrap();
            got.sort_unstable();
            let mut sent = sent.lock().unwrap().clone();
            sent.sort_unstable();
            assert_eq!(got, sent, "received differs from sent");
            ledger.assert_all_once();
        }
    });
}

/// Every receiver dropped while senders push: later sends fail with the value back;
/// nothing is dropped twice or never.
#[test]
fn receivers_dropped_mid_flow() {
    watchdog(60, || {
        for round in 0..20usize {
            const PER: usize = 500;
            let ledger = Ledger::new(3 * PER);
            let (tx, rx) = chan::unbounded::<Item<1>>();
            let stop = Arc::new(AtomicBool::new(false));
            let producers: Vec<_> = (0..3)
                .map(|p| {
                    let (tx, ledger) = (tx.clone(), ledger.clone());
                    std::thread::spawn(move || {
                        let mut failed = 0;
                        for i in 0..PER {
                            if tx.send_blocking(Item::new(p * PER + i, &ledger)).is_err() {
                                failed += 1;
                            }
                        }
                        failed
                    })
                })
                .collect();
            drop(tx);
            let consumers: Vec<_> = (0..2)
                .map(|c| {
                    let (rx, stop) = (rx.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let mut n = 0;
                        while !stop.load(SeqCst) && n < 200 * (round % 4 + c) {
                            if let Ok(item) = rx.try_recv() {
                                item.check();
                                n += 1;
                            }
                        }
                        // Dropped here, mid-flow.
                    })
                })
                .collect();
            drop(rx);
            for c in consumers {
                c.join().unwrap();
            }
            stop.store(true, SeqCst);
            for p in producers {
                p.join().unwrap();
            }
            ledger.assert_all_once();
        }
    });
}

/// Receives through `select!` over two unbounded channels and `recv_timeout`, while
/// producers on both cross many blocks.
#[test]
fn select_over_two_unbounded_channels() {
    watchdog(60, || {
        const PER: usize = 3_000;
        let ledger = Ledger::new(4 * PER);
        let (tx_a, rx_a) = chan::unbounded::<Item<1>>();
        let (tx_b, rx_b) = chan::unbounded::<Item<1>>();
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let tx = if p % 2 == 0 {
                    tx_a.clone()
                } else {
                    tx_b.clone()
                };
                let ledger = ledger.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        tx.send_blocking(Item::new(p * PER + i, &ledger))
                            .ok()
                            .unwrap();
                    }
                })
            })
            .collect();
        drop((tx_a, tx_b));
        let consumers: Vec<_> = (0..3)
            .map(|c| {
                let (rx_a, rx_b) = (rx_a.clone(), rx_b.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let (mut a_done, mut b_done) = (false, false);
                    for round in 0..10_000_000u64 {
                        if a_done && b_done {
                            return got;
                        }
                        let got_one = if c == 2 {
                            // `recv_timeout` on either, alternating, skipping a
                            // finished one.
                            let rx = if b_done || (!a_done && round % 2 == 0) {
                                &rx_a
                            } else {
                                &rx_b
                            };
                            match rx.recv_timeout(Duration::from_millis(1)) {
                                Ok(v) => Some(v),
                                Err(RecvTimeoutError::Timeout) => None,
                                Err(RecvTimeoutError::Disconnected) => {
                                    if std::ptr::eq(rx, &rx_a) {
                                        a_done = true;
                                    } else {
                                        b_done = true;
                                    }
                                    None
                                }
                            }
                        } else {
                            let mut one = None;
                            weft::select! {
                                recv(rx_a) -> m => match m {
                                    Ok(v) => one = Some(v),
                                    Err(_) => a_done = true,
                                },
                                recv(rx_b) -> m => match m {
                                    Ok(v) => one = Some(v),
                                    Err(_) => b_done = true,
                                },
                                default(Duration::from_millis(5)) => {}
                            }
                            one
                        };
                        if let Some(item) = got_one {
                            item.check();
                            got.push(item.id);
                        }
                    }
                    panic!("consumer did not finish");
                })
            })
            .collect();
        drop((rx_a, rx_b));
        for p in producers {
            p.join().unwrap();
        }
        let got: Vec<Vec<usize>> = consumers.into_iter().map(|c| c.join().unwrap()).collect();
        check_arrivals(PER, 4, &got);
        ledger.assert_all_once();
    });
}

/// Senders and receivers on fibers and async tasks of a two-worker runtime (and one
/// plain thread), values with drop records.
#[test]
fn fibers_and_tasks_every_value_once() {
    watchdog(60, || {
        const PER: usize = 2_000;
        let rt = rt2();
        let ledger = Ledger::new(4 * PER);
        let (tx, rx) = chan::unbounded::<Item<2>>();
        let mut senders = Vec::new();
        for p in 0..4 {
            let (tx, ledger) = (tx.clone(), ledger.clone());
            if p % 2 == 0 {
                senders.push(fiber_on(&rt, move || {
                    for i in 0..PER {
                        tx.send_blocking(Item::new(p * PER + i, &ledger))
                            .ok()
                            .unwrap();
                    }
                }));
            } else {
                senders.push(rt.spawn(async move {
                    for i in 0..PER {
                        tx.send(Item::new(p * PER + i, &ledger)).await.ok().unwrap();
                    }
                }));
            }
        }
        drop(tx);
        let mut receivers = Vec::new();
        for c in 0..2 {
            let rx = rx.clone();
            if c == 0 {
                receivers.push(fiber_on(&rt, move || consume(&rx, Recv::Blocking)));
            } else {
                receivers.push(rt.spawn(async move {
                    let mut got = Vec::new();
                    while let Ok(item) = rx.recv().await {
                        item.check();
                        got.push(item.id);
                    }
                    got
                }));
            }
        }
        let thread = {
            let rx = rx.clone();
            std::thread::spawn(move || consume(&rx, Recv::Timeout))
        };
        drop(rx);
        for s in senders {
            join_within(s, 50).unwrap();
        }
        let mut got: Vec<Vec<usize>> = receivers
            .into_iter()
            .map(|r| join_within(r, 50).unwrap())
            .collect();
        got.push(thread.join().unwrap());
        check_arrivals(PER, 4, &got);
        drop(rt);
        ledger.assert_all_once();
    });
}

/// A value whose drop panics, left in a channel dropped with values in several
/// blocks: the panic comes out of the last handle's drop, no value is dropped twice,
/// and those before the panicking one are dropped. Then the same channel shape is
/// used again (a fresh channel), so a block freed or kept wrongly would show.
#[test]
fn panicking_drop_when_the_channel_is_dropped() {
    struct Bomb {
        id: usize,
        ledger: Arc<Ledger>,
        boom: bool,
    }
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.ledger.drop_of(self.id);
            if self.boom {
                panic!("boom {}", self.id);
            }
        }
    }
    watchdog(60, || {
        const N: usize = 5 * BLOCK + 3;
        let bad = 2 * BLOCK + 5;
        for popped in [0, 1, BLOCK, BLOCK + 3] {
            let ledger = Ledger::new(N);
            let (tx, rx) = chan::unbounded::<Bomb>();
            for id in 0..N {
                let ledger = ledger.clone();
                tx.try_send(Bomb {
                    id,
                    ledger,
                    boom: id == bad,
                })
                .ok()
                .unwrap();
            }
            for id in 0..popped {
                assert_eq!(rx.try_recv().ok().unwrap().id, id);
            }
            let r = std::thread::spawn(move || {
                drop(tx);
                catch_unwind(AssertUnwindSafe(|| drop(rx))).is_err()
            })
            .join()
            .unwrap();
            assert!(r, "the drop's panic came out");
            assert_eq!(ledger.doubles.load(SeqCst), 0, "a value dropped twice");
            for id in 0..=bad {
                assert_eq!(ledger.drops[id].load(SeqCst), 1, "value {id}");
            }
        }
    });
}

/// A long single-producer run: tens of thousands of values through thousands of
/// block lives, consumed by two threads, each value once and in order per consumer.
#[test]
fn long_run_thousands_of_boundaries() {
    watchdog(60, || {
        const N: usize = 3_000 * BLOCK;
        let (tx, rx) = chan::unbounded::<usize>();
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Ok(v) = rx.recv_blocking() {
                        got.push(v);
                    }
                    got
                })
            })
            .collect();
        drop(rx);
        for v in 0..N {
            tx.send_blocking(v).unwrap();
        }
        drop(tx);
        let mut seen = vec![false; N];
        for c in consumers {
            let got = c.join().unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order");
            for v in got {
                assert!(!seen[v], "{v} twice");
                seen[v] = true;
            }
        }
        assert!(seen.iter().all(|&s| s), "a value was lost");
    });
}

/// The block accounting, through a global allocator that counts the blocks of one
/// value type only this test uses: a steady flow reuses the kept block (two blocks in
/// all for thousands of block lives, single-threaded and so deterministic), every
/// block is freed once the channel is dropped (the kept one included), also after
/// threads raced, and a bounded channel above the ring's limit does the same.
#[test]
fn blocks_are_reused_and_all_freed() {
    watchdog(60, || {
        let _one_at_a_time = ODD_BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        // Relative to the start: a block another test leaked would not count here.
        let blocks = || BLOCKS_MADE.load(SeqCst) - BLOCKS_FREED.load(SeqCst);
        let base = blocks();
        let live = || blocks() - base;
        let made = BLOCKS_MADE.load(SeqCst);
        // Single thread: push a block's worth, pop it, 1000 times.
        let (tx, rx) = chan::unbounded::<Odd>();
        for round in 0..1000u32 {
            for i in 0..BLOCK {
                tx.try_send([(round as usize + i) as u8; 1003]).unwrap();
            }
            for i in 0..BLOCK {
                let v = rx.try_recv().unwrap();
                assert!(v.iter().all(|&b| b == (round as usize + i) as u8));
            }
        }
        assert_eq!(
            BLOCKS_MADE.load(SeqCst) - made,
            2,
            "a steady flow allocates two blocks"
        );
        assert_eq!(live(), 2, "the current block and the kept one");
        drop((tx, rx));
        assert_eq!(live(), 0, "a block leaked or was kept after the drop");
        // Threads racing, channels dropped with values left and a block kept.
        for cap in [None, Some(RING_MAX + 1)] {
            for left in [0, 5, 3 * BLOCK] {
                let (tx, rx) = match cap {
                    None => chan::unbounded::<Odd>(),
                    Some(c) => chan::bounded::<Odd>(c),
                };
                let producers: Vec<_> = (0..2)
                    .map(|_| {
                        let tx = tx.clone();
                        std::thread::spawn(move || {
                            for _ in 0..20 * BLOCK {
                                tx.send_blocking([7; 1003]).unwrap();
                            }
                        })
                    })
                    .collect();
                let consumers: Vec<_> = (0..2)
                    .map(|_| {
                        let rx = rx.clone();
                        std::thread::spawn(move || {
                            for _ in 0..20 * BLOCK - left {
                                assert_eq!(rx.recv_blocking().unwrap(), [7; 1003]);
                            }
                        })
                    })
                    .collect();
                for h in producers.into_iter().chain(consumers) {
                    h.join().unwrap();
                }
                assert_eq!(rx.len(), 2 * left);
                std::thread::spawn(move || drop((tx, rx))).join().unwrap();
                assert_eq!(
                    live(),
                    0,
                    "blocks left after the drop ({cap:?}, {left} left)"
                );
            }
        }
    });
}

/// Large values (64 KiB) in lockstep with a spinning consumer: writing a value then
/// takes microseconds, so a pop often claims a slot while its push is still writing
/// (for a block's last slot, right after the installer stepped `tail` over the
/// boundary). A reused block whose slot kept a stale `WRITE` would let that pop read
/// the value of the block's last life (a duplicate, or a torn value) instead of
/// waiting.
#[test]
fn lockstep_large_values_pop_waits_for_the_write() {
    watchdog(60, || {
        const N: usize = 100 * BLOCK;
        let ledger = Ledger::new(N);
        let (tx, rx) = chan::unbounded::<Item<8192>>();
        // Unoptimised code keeps several copies of a value on the stack.
        let big_stack = || std::thread::Builder::new().stack_size(32 << 20);
        let producer = {
            let ledger = ledger.clone();
            big_stack()
                .spawn(move || {
                    for id in 0..N {
                        let item = Item::new(id, &ledger);
                        if id % BLOCK == BLOCK - 1 {
                            // A block's last slot (one producer: value `id` is at
                            // offset `id % 31`): let the consumer catch up and spin,
                            // so that it claims the slot while we write it.
                            for _ in 0..1_000_000 {
                                if tx.is_empty() {
                                    break;
                                }
                                std::thread::yield_now();
                            }
                        }
                        tx.send_blocking(item).ok().unwrap();
                    }
                })
                .unwrap()
        };
        let consumer = big_stack()
            .spawn(move || {
                let mut want = 0;
                for _ in 0..200_000_000u64 {
                    match rx.try_recv() {
                        Ok(item) => {
                            assert_eq!(item.id, want, "out of order (a stale value?)");
                            item.check();
                            want += 1;
                        }
                        Err(TryRecvError::Empty) => std::hint::spin_loop(),
                        Err(TryRecvError::Disconnected) => break,
                    }
                }
                want
            })
            .unwrap();
        let want = consumer.join().unwrap();
        producer.join().unwrap();
        assert_eq!(want, N, "values missing");
        ledger.assert_all_once();
    });
}

/// Pushes racing for a block's last slot, with a block kept: each takes a spare block
/// before its claim (the first the kept one, only one of them: the `swap`), the one
/// that wins installs its spare, and the others give theirs back (kept or freed).
/// Hundreds of such races: every value once, and no block left once the channels are
/// dropped (a spare not given back, or one block taken by two pushes, shows).
#[test]
fn pushes_racing_for_the_last_slot_give_spares_back() {
    watchdog(60, || {
        let _one_at_a_time = ODD_BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        // Relative to the start: a block another test leaked would not count here.
        let blocks = || BLOCKS_MADE.load(SeqCst) - BLOCKS_FREED.load(SeqCst);
        let base = blocks();
        let live = || blocks() - base;
        const RACERS: usize = 3;
        for round in 0..400u32 {
            let (tx, rx) = chan::unbounded::<Odd>();
            // The first block used up and kept; `tail` at the second one's last slot.
            for _ in 0..BLOCK {
                tx.try_send([0; 1003]).unwrap();
            }
            for _ in 0..BLOCK {
                rx.try_recv().unwrap();
            }
            for _ in 0..BLOCK - 1 {
                tx.try_send([1; 1003]).unwrap();
            }
            let ready = Arc::new(AtomicUsize::new(0));
            let racers: Vec<_> = (0..RACERS)
                .map(|r| {
                    let (tx, ready) = (tx.clone(), ready.clone());
                    std::thread::spawn(move || {
                        ready.fetch_add(1, SeqCst);
                        for spin in 0..10_000_000u64 {
                            if ready.load(SeqCst) == RACERS {
                                break;
                            }
                            if spin % 64 == 63 {
                                std::thread::yield_now();
                            }
                        }
                        for i in 0..3u8 {
                            tx.send_blocking([2 + r as u8 * 3 + i; 1003]).unwrap();
                        }
                    })
                })
                .collect();
            for r in racers {
                r.join().unwrap();
            }
            let mut got = Vec::new();
            while let Ok(v) = rx.try_recv() {
                assert!(v.iter().all(|&b| b == v[0]), "round {round}: torn value");
                got.push(v[0]);
            }
            assert_eq!(got.len(), BLOCK - 1 + 3 * RACERS, "round {round}");
            let mut mine: Vec<u8> = got.into_iter().filter(|&b| b >= 2).collect();
            mine.sort_unstable();
            assert_eq!(mine, (2..2 + 3 * RACERS as u8).collect::<Vec<_>>());
            drop((tx, rx));
            assert_eq!(live(), 0, "round {round}: a block left after the drop");
        }
    });
}
