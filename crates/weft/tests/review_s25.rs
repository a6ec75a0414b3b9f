//! Review of 7454539 (session 25): once an unbounded channel's list holds `SLAB_AFTER`
//! (16) live blocks, new blocks are carved from 32 KiB slabs (`chan/flavors/slab.rs`),
//! each slab freed by the last free of its blocks, its never-carved rest counted freed
//! when the list is dropped; blocks of large values (fewer than 8 a slab) are never
//! carved. Attacked from safe code only, through `weft::chan`: `unbounded()` and
//! `bounded(cap)` with `cap > 2^20` (which also buffers in the list).
//!
//! What could go wrong: a block carved twice (two positions sharing a slot: a value
//! lost, duplicated or torn), a slab freed while one of its blocks is still in use
//! (use after free: garbage values, crashes, valgrind), a slab never freed (a leak:
//! `review_s25_alloc.rs` counts the bytes), a carved block freed as a `Box` (a crash in
//! the allocator), a block misaligned for its values, the uncarved rest of a slab
//! counted twice or never when the list is dropped, values buffered in carved blocks
//! dropped twice or never when the channel goes.
//!
//! Every test crosses the threshold by a wide margin (a block holds 31 values: 16
//! blocks are 496 values) and most go back below it and past it again. Under valgrind
//! set `REVIEW_S25_SMALL=1`: fewer values (still well past the threshold).
//!
//! No bug of the change was found here (nor under valgrind memcheck). Checked against
//! bugs planted one at a time in 7454539 (then removed): `release` freeing the slab on
//! every call, the `slab` field left unwritten in `Blocks::alloc`, `Block::clear`
//! nulling `slab` (a recycled carved block freed as a `Box`): every test here (glibc
//! aborts); `take` handing one block out twice (the count still balanced): every test
//! (values lost, out of order, "last slot claimed before `next` was linked", hangs); the
//! slab's offset ignoring the block's alignment: `aligned_and_large_values_...` (a
//! misaligned dereference, for 32-aligned values). Leaks (`Slabs::drop` skipping its
//! release, a count of `per + 1`, `List::drop` not freeing the kept block) are for
//! `review_s25_alloc` and valgrind; `Slabs::drop` releasing a used-up slab (a read and
//! a write of the freed slab's count) for `review_s25_alloc` and, under valgrind,
//! `lists_dropped_at_every_carving_end`.

mod chan_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chan_common::*;
use weft::chan::{
    self, Receiver, RecvError, RecvTimeoutError, Select, SendError, SendTimeoutError, Sender,
    TryRecvError, TrySendError,
};

/// Values per block of the list (`list::BLOCK_CAP`).
const BLOCK: usize = 31;
/// Live blocks from which a list carves its blocks from slabs (`list::SLAB_AFTER`).
const SLAB_AFTER: usize = 16;
/// Values that take a list well past the threshold.
const PAST: usize = (SLAB_AFTER + 4) * BLOCK;
/// The channel's largest ring; larger capacities buffer in a list.
const RING_MAX: usize = 1 << 20;

/// Under valgrind: fewer values.
fn small() -> bool {
    std::env::var_os("REVIEW_S25_SMALL").is_some()
}

/// `full` values, or a twentieth of them under valgrind (never fewer than two
/// thresholds' worth).
fn size(full: usize) -> usize {
    if small() {
        (full / 20).max(2 * PAST)
    } else {
        full
    }
}

/// A value tagged with its sender and sequence number (16 bytes: 43 blocks a slab).
type Msg = (usize, usize);

/// Per receiver log, each sender's values in increasing order.
fn check_order(logs: &[Vec<Msg>], senders: usize) {
    for (r, log) in logs.iter().enumerate() {
        let mut last = vec![None::<usize>; senders];
        for &(s, i) in log {
            assert!(s < senders, "receiver {r}: bogus value ({s}, {i})");
            if let Some(p) = last[s] {
                assert!(i > p, "receiver {r}: sender {s}'s value {i} after {p}");
            }
            last[s] = Some(i);
        }
    }
}

/// A receiver in one of six ways (two threads, two fibers, two tasks), logging what it
/// got into `logs` when the channel is drained and disconnected.
fn start_receiver(
    rt: &weft::Runtime,
    how: usize,
    rx: Receiver<Msg>,
    logs: &Arc<Mutex<Vec<Vec<Msg>>>>,
) -> Box<dyn FnOnce() + Send> {
    let logs = logs.clone();
    let store = move |log: Vec<Msg>| logs.lock().unwrap().push(log);
    match how % 6 {
        0 => {
            let h = std::thread::spawn(move || {
                let mut log = vec![];
                while let Ok(m) = rx.recv_blocking() {
                    log.push(m);
                }
                store(log);
            });
            Box::new(move || h.join().unwrap())
        }
        1 => {
            // try_recv with a short recv_timeout when empty.
            let h = std::thread::spawn(move || {
                let mut log = vec![];
                loop {
                    match rx.try_recv() {
                        Ok(m) => log.push(m),
                        Err(TryRecvError::Disconnected) => break,
                        Err(TryRecvError::Empty) => {
                            match rx.recv_timeout(Duration::from_micros(200)) {
                                Ok(m) => log.push(m),
                                Err(RecvTimeoutError::Timeout) => {}
                                Err(RecvTimeoutError::Disconnected) => break,
                            }
                        }
                    }
                }
                store(log);
            });
            Box::new(move || h.join().unwrap())
        }
        2 => {
            let h = fiber_on(rt, move || store(rx.iter().collect()));
            Box::new(move || join_within(h, 60).unwrap())
        }
        3 => {
            let h = fiber_on(rt, move || {
                let mut log = vec![];
                while let Ok(m) = rx.recv_blocking() {
                    log.push(m);
                    // Drain in spurts: the list stays long for a while.
                    if log.len() % 97 == 0 {
                        weft::fiber::yield_now();
                    }
                }
                store(log);
            });
            Box::new(move || join_within(h, 60).unwrap())
        }
        4 => {
            let h = rt.spawn(async move {
                let mut log = vec![];
                while let Ok(m) = rx.recv().await {
                    log.push(m);
                }
                store(log);
            });
            Box::new(move || join_within(h, 60).unwrap())
        }
        _ => {
            let h = rt.spawn(async move {
                let mut log = vec![];
                loop {
                    match rx.try_recv() {
                        Ok(m) => log.push(m),
                        Err(TryRecvError::Disconnected) => break,
                        Err(TryRecvError::Empty) => match rx.recv().await {
                            Ok(m) => log.push(m),
                            Err(RecvError) => break,
                        },
                    }
                }
                store(log);
            });
            Box::new(move || join_within(h, 60).unwrap())
        }
    }
}

/// `senders` senders push `per` values each: half of them before any receiver runs
/// (the list grows to thousands of blocks, hundreds of slabs), the rest from threads,
/// fibers and tasks while six receivers of every kind drain it.
fn burst(cap: Option<usize>, senders: usize, per: usize) {
    watchdog(60, move || {
        let rt = rt2();
        let (tx, rx) = make::<Msg>(cap);
        let pre = per / 2;
        let preload: Vec<_> = (0..senders)
            .map(|s| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..pre {
                        tx.send_blocking((s, i)).unwrap();
                    }
                })
            })
            .collect();
        for p in preload {
            p.join().unwrap();
        }
        assert_eq!(rx.len(), senders * pre);

        let logs = Arc::new(Mutex::new(Vec::new()));
        let receivers: Vec<_> = (0..6)
            .map(|how| start_receiver(&rt, how, rx.clone(), &logs))
            .collect();
        drop(rx);

        let mut rest: Vec<Box<dyn FnOnce() + Send>> = vec![];
        for s in 0..senders {
            let tx = tx.clone();
            match s % 3 {
                0 => {
                    let h = std::thread::spawn(move || {
                        for i in pre..per {
                            tx.send_blocking((s, i)).unwrap();
                        }
                    });
                    rest.push(Box::new(move || h.join().unwrap()));
                }
                1 => {
                    let h = fiber_on(&rt, move || {
                        for i in pre..per {
                            match tx.try_send((s, i)) {
                                Ok(()) => {}
                                Err(TrySendError::Full(m)) => tx.send_blocking(m).unwrap(),
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                    });
                    rest.push(Box::new(move || join_within(h, 60).unwrap()));
                }
                _ => {
                    let h = rt.spawn(async move {
                        for i in pre..per {
                            tx.send((s, i)).await.unwrap();
                        }
                    });
                    rest.push(Box::new(move || join_within(h, 60).unwrap()));
                }
            }
        }
        drop(tx);
        for r in rest {
            r();
        }
        for r in receivers {
            r();
        }
        let logs = std::mem::take(&mut *logs.lock().unwrap());
        assert_eq!(logs.len(), 6, "every receiver reported");
        check_exactly_once(&logs, senders, per);
        check_order(&logs, senders);
    })
}

/// 100,000 values through an unbounded channel, half of them buffered at once, with
/// four, two and five senders.
#[test]
fn a_burst_far_past_the_threshold_arrives_once_and_in_order() {
    for senders in [4, 2, 5] {
        burst(None, senders, size(100_000 / senders));
    }
}

/// The same through a bounded channel whose capacity makes it a list (sends take the
/// lock there).
#[test]
fn a_burst_through_a_bounded_list_channel_arrives_once_and_in_order() {
    for senders in [3, 1] {
        burst(Some(RING_MAX + 1), senders, size(36_000 / senders));
    }
}

/// A value whose drop may panic, counting its drops per id.
struct Boom {
    id: usize,
    drops: Drops,
    panics: bool,
}

impl Drop for Boom {
    fn drop(&mut self) {
        self.drops.0[self.id].fetch_add(1, SeqCst);
        if self.panics {
            panic!("value {} panics in its drop (on purpose)", self.id);
        }
    }
}

/// Fills an unbounded (or bounded list) channel with `total` tracked values, receives
/// the first `popped`, and hands the two ends back.
fn filled(
    cap: Option<usize>,
    drops: &Drops,
    total: usize,
    popped: usize,
) -> (Sender<Tracked>, Receiver<Tracked>) {
    let (tx, rx) = make::<Tracked>(cap);
    for id in 0..total {
        tx.try_send(drops.make(id)).unwrap();
    }
    for id in 0..popped {
        assert_eq!(rx.try_recv().unwrap().id, id);
    }
    (tx, rx)
}

/// Drops `tx` and `rx` in one of five ways, all but one away from the test thread.
fn drop_ends<T: Send + 'static>(how: usize, tx: Sender<T>, rx: Receiver<T>) {
    match how % 5 {
        0 => std::thread::spawn(move || {
            drop(rx);
            drop(tx);
        })
        .join()
        .unwrap(),
        1 => std::thread::spawn(move || {
            drop(tx);
            drop(rx);
        })
        .join()
        .unwrap(),
        2 => {
            let a = std::thread::spawn(move || drop(rx));
            let b = std::thread::spawn(move || drop(tx));
            a.join().unwrap();
            b.join().unwrap();
        }
        3 => {
            drop(tx);
            std::thread::spawn(move || drop(rx)).join().unwrap();
        }
        _ => {
            drop(rx);
            std::thread::spawn(move || drop(tx)).join().unwrap();
        }
    }
}

/// Values left in carved blocks (and in the blocks allocated alone before them) are
/// dropped exactly once when both ends go, on other threads, in every order; for an
/// unbounded channel and a bounded one that buffers in a list.
#[test]
fn dropping_a_long_channel_drops_every_buffered_value_once() {
    watchdog(60, || {
        let total = size(40 * PAST) + 17;
        for cap in [None, Some(RING_MAX + 1)] {
            for how in 0..5 {
                // Nothing received; the head block allocated alone; the head block
                // carved (past the first 16 blocks); all but a few received.
                for popped in [0, 3, SLAB_AFTER * BLOCK + 5, total - 2] {
                    let drops = Drops::new(total);
                    let (tx, rx) = filled(cap, &drops, total, popped);
                    drop_ends(how, tx, rx);
                    let bad: Vec<_> = (0..total)
                        .filter(|&id| drops.get(id) != 1)
                        .take(5)
                        .collect();
                    assert!(
                        bad.is_empty(),
                        "cap {cap:?}, how {how}, popped {popped}: values not dropped once: {:?}",
                        bad.iter()
                            .map(|&id| (id, drops.get(id)))
                            .collect::<Vec<_>>()
                    );
                }
            }
        }
    })
}

/// The rule: if a buffered value's drop panics while the channel's values are
/// dropped, the values after it are leaked, never dropped twice; nothing crashes, and
/// the other end goes afterwards without dropping anything more. The panicking value
/// sits in a carved block, the first buffered one, or the last.
#[test]
fn a_panicking_drop_leaks_the_rest_and_drops_nothing_twice() {
    watchdog(60, || {
        let total = size(30 * PAST) + 9;
        let popped = (SLAB_AFTER + 2) * BLOCK + 4;
        for bad in [popped, popped + 9 * BLOCK + 4, total / 2, total - 1] {
            for receiver_first in [true, false] {
                let drops = Drops::new(total);
                let (tx, rx) = chan::unbounded::<Boom>();
                for id in 0..total {
                    tx.send_blocking(Boom {
                        id,
                        drops: drops.clone(),
                        panics: id == bad || id == bad + 3,
                    })
                    .unwrap();
                }
                for id in 0..popped {
                    assert_eq!(rx.recv_blocking().unwrap().id, id);
                }
                let tx = if receiver_first {
                    Some(tx)
                } else {
                    std::thread::spawn(move || drop(tx)).join().unwrap();
                    None
                };
                // The last receiver's drop drains the buffer and drops the values.
                let r = std::thread::spawn(move || drop(rx)).join();
                assert!(r.is_err(), "bad {bad}: the drop's panic went missing");
                std::thread::spawn(move || drop(tx)).join().unwrap();
                for id in 0..total {
                    let want = usize::from(id <= bad);
                    assert_eq!(
                        drops.get(id),
                        want,
                        "bad {bad}, receiver first {receiver_first}: drops of value {id}"
                    );
                }
            }
        }
    })
}

/// One list goes long (slabs carved), short (below the threshold: blocks allocated
/// alone again while the slab being carved is partly used), long again, many times,
/// single-threaded and so deterministic; it is closed while long, and what was sent
/// before comes out in order.
#[test]
fn long_short_long_then_closed_while_long() {
    watchdog(60, || {
        for cap in [None, Some(RING_MAX + 1)] {
            let seed = seed();
            let mut rng = Rng::new(seed);
            let (tx, rx) = make::<u64>(cap);
            let (mut sent, mut got) = (0u64, 0u64);
            let rounds = if small() { 4 } else { 12 };
            for round in 0..rounds {
                let up = PAST as u64 * (1 + rng.below(5)) + rng.below(BLOCK as u64);
                for _ in 0..up {
                    tx.try_send(sent).unwrap();
                    sent += 1;
                }
                // Down to under a block or two (or empty).
                let keep = rng.below(2 * BLOCK as u64) as usize;
                while rx.len() > keep {
                    assert_eq!(
                        rx.try_recv(),
                        Ok(got),
                        "seed {seed}, cap {cap:?}, round {round}"
                    );
                    got += 1;
                }
            }
            for _ in 0..3 * PAST {
                tx.try_send(sent).unwrap();
                sent += 1;
            }
            // Closed in the middle of a drain.
            for _ in 0..PAST {
                assert_eq!(rx.try_recv(), Ok(got));
                got += 1;
            }
            assert!(tx.close());
            assert!(!rx.close());
            assert_eq!(
                tx.try_send(u64::MAX),
                Err(TrySendError::Disconnected(u64::MAX))
            );
            assert_eq!(tx.send_blocking(7), Err(SendError(7)));
            while got < sent {
                assert_eq!(rx.recv_blocking(), Ok(got), "seed {seed}, cap {cap:?}");
                got += 1;
            }
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
            assert_eq!(rx.recv_blocking(), Err(RecvError));
        }
    })
}

/// The same with threads: waves of pushes from two threads, each drained to near
/// empty by two threads and a fiber racing, then a close from the receiving side while
/// the senders push a last wave and the receivers drain: every value sent is received
/// once, in per-sender order, and every refused one comes back to its sender.
#[test]
fn waves_with_racing_receivers_then_a_close_mid_wave() {
    watchdog(60, || {
        let rt = rt2();
        let (tx, rx) = chan::unbounded::<Msg>();
        let waves = if small() { 3 } else { 8 };
        let wave = size(4 * PAST);
        let mut logs: Vec<Vec<Msg>> = vec![vec![]; 3];
        let mut next = [0usize; 2];
        for w in 0..waves {
            let pushers: Vec<_> = (0..2)
                .map(|s| {
                    let tx = tx.clone();
                    let from = next[s];
                    std::thread::spawn(move || {
                        for i in from..from + wave {
                            tx.send_blocking((s, i)).unwrap();
                        }
                    })
                })
                .collect();
            for p in pushers {
                p.join().unwrap();
            }
            next = [next[0] + wave, next[1] + wave];
            let keep = w % 3 * BLOCK;
            let drain = |rx: Receiver<Msg>| {
                move || {
                    let mut log = vec![];
                    while rx.len() > keep {
                        match rx.try_recv() {
                            Ok(m) => log.push(m),
                            Err(TryRecvError::Empty) => break,
                            Err(TryRecvError::Disconnected) => unreachable!(),
                        }
                    }
                    log
                }
            };
            let a = std::thread::spawn(drain(rx.clone()));
            let b = std::thread::spawn(drain(rx.clone()));
            let c = fiber_on(&rt, drain(rx.clone()));
            logs[0].extend(a.join().unwrap());
            logs[1].extend(b.join().unwrap());
            logs[2].extend(join_within(c, 30).unwrap());
        }
        // The last wave: pushers run until refused (or, bounded, stop after 100 waves'
        // worth: a close that comes later finds them gone); receivers drain until
        // disconnected; the close comes while both are at it.
        let pushers: Vec<_> = (0..2)
            .map(|s| {
                let tx = tx.clone();
                let from = next[s];
                std::thread::spawn(move || {
                    for i in from..from + 100 * wave {
                        if let Err(SendError(m)) = tx.send_blocking((s, i)) {
                            assert_eq!(m, (s, i), "the refused value comes back");
                            return i;
                        }
                        if i % 64 == 0 {
                            // Lets the closer run (valgrind runs one thread at a time).
                            std::thread::yield_now();
                        }
                    }
                    from + 100 * wave
                })
            })
            .collect();
        drop(tx);
        let started = Arc::new(AtomicUsize::new(0));
        let receivers: Vec<_> = (0..3)
            .map(|_| {
                let (rx, started) = (rx.clone(), started.clone());
                std::thread::spawn(move || {
                    let mut log = vec![];
                    while let Ok(m) = rx.recv_blocking() {
                        log.push(m);
                        if log.len() == 100 {
                            started.fetch_add(1, SeqCst);
                        }
                    }
                    log
                })
            })
            .collect();
        wait_for("the receivers to get going", 30, || {
            started.load(SeqCst) > 0 || rx.len() > 10 * PAST
        });
        assert!(rx.close());
        let ends: Vec<usize> = pushers.into_iter().map(|p| p.join().unwrap()).collect();
        for (i, r) in receivers.into_iter().enumerate() {
            logs[i].extend(r.join().unwrap());
        }
        drop(rx);
        check_order(&logs, 2);
        let mut seen = [vec![0u8; ends[0]], vec![0u8; ends[1]]];
        for &(s, i) in logs.iter().flatten() {
            assert!(
                i < ends[s],
                "value ({s}, {i}) received but refused to its sender"
            );
            seen[s][i] += 1;
        }
        for (s, seen) in seen.iter().enumerate() {
            if let Some(i) = seen.iter().position(|&c| c != 1) {
                panic!("value ({s}, {i}) received {} times", seen[i]);
            }
        }
    })
}

/// One end of one of many channels.
enum End {
    Tx(Sender<Tracked>),
    Rx(Receiver<Tracked>),
}

/// Many channels alive at once, each pushed past the threshold (their slabs
/// interleaved in the allocator) and partly drained, their ends then dropped in random
/// order on four threads at once (a receiver may take a few more values first).
#[test]
fn many_long_channels_dropped_in_random_order_on_threads() {
    watchdog(60, || {
        let seed = seed();
        let mut rng = Rng::new(seed);
        let chans = if small() { 6 } else { 24 };
        let counts: Vec<usize> = (0..chans)
            .map(|_| PAST + rng.below(size(8 * PAST) as u64) as usize)
            .collect();
        let total: usize = counts.iter().sum();
        let drops = Drops::new(total);
        let mut ends = vec![];
        let mut id = 0;
        let mut pairs: Vec<_> = (0..chans).map(|_| chan::unbounded::<Tracked>()).collect();
        // Interleaved pushes: every channel grows at once.
        let mut left = counts.clone();
        let mut firsts = vec![0; chans];
        let mut base = 0;
        for (c, &n) in counts.iter().enumerate() {
            firsts[c] = base;
            base += n;
        }
        while left.iter().any(|&l| l > 0) {
            for c in 0..chans {
                for _ in 0..left[c].min(BLOCK + 2) {
                    let id = firsts[c] + counts[c] - left[c];
                    pairs[c].0.send_blocking(drops.make(id)).unwrap();
                    left[c] -= 1;
                }
            }
        }
        for (c, (tx, rx)) in pairs.drain(..).enumerate() {
            let take = rng.below(counts[c] as u64) as usize;
            for k in 0..take {
                assert_eq!(rx.try_recv().unwrap().id, firsts[c] + k, "seed {seed}");
            }
            id += counts[c];
            ends.push(End::Tx(tx));
            ends.push(End::Rx(rx));
        }
        assert_eq!(id, total);
        // Shuffle, and deal to four threads.
        for i in (1..ends.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            ends.swap(i, j);
        }
        let mut hands: Vec<Vec<End>> = (0..4).map(|_| vec![]).collect();
        for (i, e) in ends.into_iter().enumerate() {
            hands[i % 4].push(e);
        }
        let gate = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = hands
            .into_iter()
            .enumerate()
            .map(|(t, hand)| {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    gate.wait();
                    for (k, e) in hand.into_iter().enumerate() {
                        match e {
                            End::Rx(rx) => {
                                for _ in 0..(t + k) % 3 * BLOCK {
                                    drop(rx.try_recv());
                                }
                                drop(rx);
                            }
                            // A look at the list's length, racing the receivers.
                            End::Tx(tx) => {
                                let _ = tx.len();
                                drop(tx);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let bad: Vec<_> = (0..total).filter(|&i| drops.get(i) != 1).take(5).collect();
        assert!(
            bad.is_empty(),
            "seed {seed}: values not dropped once: {:?}",
            bad.iter().map(|&i| (i, drops.get(i))).collect::<Vec<_>>()
        );
    })
}

counted_zst!(Zst, ZST_MADE, ZST_DROPPED);

/// Zero-sized values (the smallest blocks: 124 a slab) across the threshold, through
/// threads, and dropped with some left: as many dropped as made.
#[test]
fn zero_sized_values_across_the_threshold() {
    watchdog(60, || {
        let n = size(30 * PAST);
        let (tx, rx) = chan::unbounded::<Zst>();
        let pusher = {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for _ in 0..n {
                    tx.send_blocking(Zst::new()).unwrap();
                }
            })
        };
        pusher.join().unwrap();
        assert_eq!(rx.len(), n);
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut k = 0;
                    while k < n / 3 {
                        rx.recv_blocking().unwrap();
                        k += 1;
                    }
                })
            })
            .collect();
        for t in takers {
            t.join().unwrap();
        }
        assert_eq!(rx.len(), n - 2 * (n / 3));
        // Long again, then dropped on another thread.
        for _ in 0..n {
            tx.try_send(Zst::new()).unwrap();
        }
        drop_ends(0, tx, rx);
        assert_eq!(ZST_MADE.load(SeqCst), 2 * n);
        assert_eq!(ZST_DROPPED.load(SeqCst), 2 * n);
        // And `()`.
        let (tx, rx) = chan::unbounded::<()>();
        for _ in 0..n {
            tx.try_send(()).unwrap();
        }
        let mut k = 0;
        while rx.try_recv().is_ok() {
            k += 1;
        }
        assert_eq!(k, n);
    })
}

/// A value with a pattern derived from its index, that checks its own alignment when
/// dropped (wherever that is) and counts its drops.
trait Probe: Send + Sized + 'static {
    fn make(i: usize) -> Self;
    fn index(&self) -> usize;
    fn intact(&self) -> bool;
}

static MISALIGNED: AtomicBool = AtomicBool::new(false);

macro_rules! probe {
    ($name:ident, $align:literal, $words:literal) => {
        #[repr(align($align))]
        struct $name {
            words: [usize; $words],
        }
        impl Probe for $name {
            fn make(i: usize) -> Self {
                let mut words = [0; $words];
                for (k, w) in words.iter_mut().enumerate() {
                    *w = i.wrapping_mul(0x9E37_79B9).wrapping_add(k);
                }
                $name { words }
            }
            fn index(&self) -> usize {
                self.words[0] / 0x9E37_79B9
            }
            fn intact(&self) -> bool {
                let i = self.index();
                self.words
                    .iter()
                    .enumerate()
                    .all(|(k, &w)| w == i.wrapping_mul(0x9E37_79B9).wrapping_add(k))
            }
        }
        impl Drop for $name {
            fn drop(&mut self) {
                if (self as *const Self as usize) % std::mem::align_of::<Self>() != 0 {
                    MISALIGNED.store(true, SeqCst);
                }
            }
        }
    };
}

// Slot sizes: 24 (43 blocks a slab), 32+8 -> 64 (16 a slab), 64+8 -> 128 (7 a slab:
// not carved), 4096+8 -> 8192 (not carved).
probe!(Align8, 8, 2);
probe!(Align32, 32, 4);
probe!(Align64, 64, 8);
probe!(Align4096, 4096, 2);

/// A byte array value type of `N` bytes with a pattern.
struct Bytes<const N: usize>([u8; N]);

impl<const N: usize> Probe for Bytes<N> {
    fn make(i: usize) -> Self {
        let mut b = [0u8; N];
        b[..8].copy_from_slice(&(i as u64).to_le_bytes());
        for (k, x) in b.iter_mut().enumerate().skip(8) {
            *x = (i + k) as u8;
        }
        Bytes(b)
    }
    fn index(&self) -> usize {
        u64::from_le_bytes(self.0[..8].try_into().unwrap()) as usize
    }
    fn intact(&self) -> bool {
        let i = self.index();
        self.0
            .iter()
            .enumerate()
            .skip(8)
            .all(|(k, &x)| x == (i + k) as u8)
    }
}

/// `n` values of `T` pushed from a thread past the threshold, received on two threads
/// in per-receiver order and intact, pushed long again and dropped with values left.
fn values_of<T: Probe>(n: usize) {
    let (tx, rx) = chan::unbounded::<T>();
    let pusher = {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for i in 0..n {
                tx.send_blocking(T::make(i)).unwrap();
            }
        })
    };
    let takers: Vec<_> = (0..2)
        .map(|_| {
            let rx = rx.clone();
            std::thread::spawn(move || {
                let mut last = None;
                let mut k = 0;
                while k < n / 2 {
                    let v = rx.recv_blocking().unwrap();
                    assert!(v.intact(), "value {} torn", v.index());
                    assert!(last < Some(v.index()), "out of order");
                    last = Some(v.index());
                    k += 1;
                }
            })
        })
        .collect();
    pusher.join().unwrap();
    for t in takers {
        t.join().unwrap();
    }
    for i in 0..n {
        tx.try_send(T::make(i)).unwrap();
    }
    for i in 0..n / 3 {
        let v = rx.try_recv().unwrap();
        assert!(v.intact() && v.index() == i);
    }
    drop_ends(2, tx, rx);
    assert!(!MISALIGNED.load(SeqCst), "a value was misaligned");
}

/// Values of alignment 8, 32, 64 and 4096, and byte arrays on either side of the
/// smallest carved block (8 a slab: `[u8; 120]`; 7: `[u8; 121]`) and far past it
/// (`[u8; 8192]`: never carved), across the threshold.
#[test]
fn aligned_and_large_values_across_the_threshold() {
    watchdog(60, || {
        let n = size(6 * PAST);
        values_of::<Align8>(n);
        values_of::<Align32>(n);
        values_of::<Align64>(n);
        values_of::<Align4096>(2 * PAST);
        values_of::<Bytes<9>>(n);
        values_of::<Bytes<120>>(n);
        values_of::<Bytes<121>>(n);
        values_of::<Bytes<8192>>(2 * PAST);
    })
}

/// Receive futures dropped at random points (the tokio `select!` pattern: polled a few
/// times, then dropped) by three tasks, while senders push in bursts with gaps (the
/// list long, then empty so that receives wait and are cancelled while waiting); a
/// value handed to a cancelled receive is given back. With `ordered`, also checks that
/// each receiver saw each sender's values in order.
fn dropped_recv_futures(ordered: bool) {
    watchdog(60, move || {
        let rt = rt2();
        let seed = seed();
        let senders = 3;
        let per = size(20 * PAST);
        let (tx, rx) = chan::unbounded::<Msg>();
        let receivers: Vec<_> = (0..3)
            .map(|r| {
                let rx = rx.clone();
                rt.spawn(async move {
                    let mut rng = Rng::new(seed.wrapping_add(r as u64));
                    let mut log = vec![];
                    loop {
                        match drop_after(rng.below(3), rx.recv()).await {
                            Some(Ok(m)) => log.push(m),
                            Some(Err(RecvError)) => break,
                            None => {}
                        }
                    }
                    log
                })
            })
            .collect();
        drop(rx);
        let pushers: Vec<_> = (0..senders)
            .map(|s| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut i = 0;
                    while i < per {
                        let burst = (2 * PAST).min(per - i);
                        for _ in 0..burst {
                            tx.send_blocking((s, i)).unwrap();
                            i += 1;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        drop(tx);
        for p in pushers {
            p.join().unwrap();
        }
        let logs: Vec<Vec<Msg>> = receivers
            .into_iter()
            .map(|r| join_within(r, 30).unwrap())
            .collect();
        check_exactly_once(&logs, senders, per);
        if ordered {
            check_order(&logs, senders);
        }
    })
}

/// Every value arrives exactly once, whatever receives are dropped.
#[test]
fn recv_futures_dropped_at_random_points_during_bursts() {
    dropped_recv_futures(false);
}

/// `recv_timeout` and `send_timeout` on long lists: receivers on threads and fibers
/// that time out while the list is empty between bursts; and a bounded channel above
/// the ring's limit filled to its capacity (33,826 blocks, hundreds of slabs), where
/// `send_timeout` times out and hands the value back, then succeeds once a value is
/// received.
#[test]
fn timeouts_on_long_lists() {
    watchdog(120, || {
        let rt = rt2();
        let senders = 2;
        let per = size(10 * PAST);
        let (tx, rx) = chan::unbounded::<Msg>();
        let take = |rx: Receiver<Msg>| {
            move || {
                let mut log = vec![];
                loop {
                    match rx.recv_timeout(Duration::from_micros(300)) {
                        Ok(m) => log.push(m),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return log,
                    }
                }
            }
        };
        let a = std::thread::spawn(take(rx.clone()));
        let b = fiber_on(&rt, take(rx.clone()));
        let c = fiber_on(&rt, take(rx.clone()));
        drop(rx);
        let pushers: Vec<_> = (0..senders)
            .map(|s| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        assert!(tx.send_timeout((s, i), Duration::from_millis(1)).is_ok());
                        if i % (3 * PAST) == 0 {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        for p in pushers {
            p.join().unwrap();
        }
        let logs = vec![
            a.join().unwrap(),
            join_within(b, 30).unwrap(),
            join_within(c, 30).unwrap(),
        ];
        check_exactly_once(&logs, senders, per);
        check_order(&logs, senders);

        if small() {
            return;
        }
        // A bounded list channel, full.
        let cap = RING_MAX + 1;
        let (tx, rx) = chan::bounded::<u32>(cap);
        for i in 0..cap as u32 {
            tx.try_send(i).unwrap();
        }
        assert_eq!(tx.try_send(u32::MAX), Err(TrySendError::Full(u32::MAX)));
        assert_eq!(
            tx.send_timeout(7, Duration::from_millis(5)),
            Err(SendTimeoutError::Timeout(7))
        );
        let pusher = std::thread::spawn(move || {
            tx.send_timeout(cap as u32, Duration::from_secs(30))
                .unwrap();
            tx
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(1)), Ok(0));
        let tx = pusher.join().unwrap();
        drop(tx);
        // Drained by two threads: each in order.
        let drainers: Vec<_> = (0..2)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut last = 0;
                    let mut k = 0usize;
                    while let Ok(v) = rx.recv_timeout(Duration::from_secs(10)) {
                        assert!(v > last, "{v} after {last}");
                        last = v;
                        k += 1;
                    }
                    k
                })
            })
            .collect();
        let got: usize = drainers.into_iter().map(|d| d.join().unwrap()).sum();
        assert_eq!(got, cap);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    })
}

/// One receiver's log over several channels: (channel, value).
type Tagged = (usize, usize);

/// Three unbounded channels, each fed by its own thread in bursts (long lists),
/// drained by `select!` on two threads, by `Select` in a fiber and on a thread
/// (removing a channel once disconnected) and by `Select::select_async` in a task
/// (with `cancel`, its select futures dropped at random points): every value once;
/// without `cancel`, each channel's values in order per receiver.
fn select_over_long_channels(cancel: bool) {
    watchdog(60, move || {
        let rt = rt2();
        let seed = seed();
        let per = size(20 * PAST);
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..3).map(|_| chan::unbounded::<usize>()).unzip();
        // Preload half: the lists are long before any receiver runs.
        for tx in &txs {
            for i in 0..per / 2 {
                tx.send_blocking(i).unwrap();
            }
        }
        let by_macro = |rxs: Vec<Receiver<usize>>| {
            move || {
                let mut log: Vec<Tagged> = vec![];
                let mut closed = [false; 3];
                while !closed.iter().all(|&c| c) {
                    weft::select! {
                        recv(rxs[0]) -> m => match m {
                            Ok(v) => log.push((0, v)),
                            Err(_) => closed[0] = true,
                        },
                        recv(rxs[1]) -> m => match m {
                            Ok(v) => log.push((1, v)),
                            Err(_) => closed[1] = true,
                        },
                        recv(rxs[2]) -> m => match m {
                            Ok(v) => log.push((2, v)),
                            Err(_) => closed[2] = true,
                        },
                    }
                }
                log
            }
        };
        let by_select = |rxs: Vec<Receiver<usize>>| {
            move || {
                let mut log: Vec<Tagged> = vec![];
                let mut sel = Select::new();
                for rx in &rxs {
                    sel.recv(rx);
                }
                let mut open = 3;
                while open > 0 {
                    let op = sel.select();
                    let i = op.index();
                    match op.recv(&rxs[i]) {
                        Ok(v) => log.push((i, v)),
                        Err(RecvError) => {
                            sel.remove(i);
                            open -= 1;
                        }
                    }
                }
                log
            }
        };
        let a = std::thread::spawn(by_macro(rxs.clone()));
        let b = std::thread::spawn(by_macro(rxs.clone()));
        let c = fiber_on(&rt, by_select(rxs.clone()));
        let d = std::thread::spawn(by_select(rxs.clone()));
        let e = {
            let rxs = rxs.clone();
            rt.spawn(async move {
                let mut rng = Rng::new(seed);
                let mut log: Vec<Tagged> = vec![];
                let mut open = [true; 3];
                while open.iter().any(|&o| o) {
                    let mut sel = Select::new();
                    for (i, rx) in rxs.iter().enumerate() {
                        if open[i] {
                            sel.recv(rx);
                        } else {
                            // Keep indices aligned with channels.
                            let k = sel.recv(rx);
                            sel.remove(k);
                        }
                    }
                    let op = if cancel {
                        drop_after(rng.below(3), sel.select_async()).await
                    } else {
                        Some(sel.select_async().await)
                    };
                    if let Some(op) = op {
                        let i = op.index();
                        match op.recv(&rxs[i]) {
                            Ok(v) => log.push((i, v)),
                            Err(RecvError) => open[i] = false,
                        }
                    }
                }
                log
            })
        };
        drop(rxs);
        let pushers: Vec<_> = txs
            .into_iter()
            .map(|tx| {
                std::thread::spawn(move || {
                    for i in per / 2..per {
                        tx.send_blocking(i).unwrap();
                        if i % (2 * PAST) == 0 {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                })
            })
            .collect();
        for p in pushers {
            p.join().unwrap();
        }
        let logs: Vec<Vec<Tagged>> = vec![
            a.join().unwrap(),
            b.join().unwrap(),
            join_within(c, 30).unwrap(),
            d.join().unwrap(),
            join_within(e, 30).unwrap(),
        ];
        check_exactly_once(&logs, 3, per);
        if !cancel {
            check_order(&logs, 3);
        }
    })
}

/// See [`select_over_long_channels`].
#[test]
fn select_over_several_long_unbounded_channels() {
    select_over_long_channels(false);
}

/// See [`select_over_long_channels`]: a value a dropped select was handed goes back
/// (order across receivers is not kept then: `recv_futures_dropped_keep_per_receiver_order`).
#[test]
fn dropped_selects_over_several_long_unbounded_channels() {
    select_over_long_channels(true);
}

/// Iterators over a long list: `try_iter` drains what is there, in order, from a list
/// past the threshold, repeatedly; `into_iter` on another thread ends at the
/// disconnect.
#[test]
fn iterators_over_a_long_list() {
    watchdog(60, || {
        let (tx, rx) = chan::unbounded::<usize>();
        let mut next = 0;
        for round in 0..4 {
            let n = size(3 * PAST) + round;
            for i in next..next + n {
                tx.try_send(i).unwrap();
            }
            let got: Vec<usize> = rx.try_iter().collect();
            assert_eq!(got, (next..next + n).collect::<Vec<_>>());
            next += n;
        }
        let n = size(5 * PAST);
        for i in next..next + n {
            tx.try_send(i).unwrap();
        }
        drop(tx);
        let all: Vec<usize> = std::thread::spawn(move || rx.into_iter().collect())
            .join()
            .unwrap();
        assert_eq!(all, (next..next + n).collect::<Vec<_>>());
    })
}

/// Lists dropped (full, or half received) after every number of blocks from the
/// threshold to 130 past it (more than a slab holds but for zero-sized values): one is
/// dropped with the slab being carved used up to its last block, one with one block of
/// it carved, one with all but one (`Slabs::drop`'s edges: a used-up slab belongs to
/// its blocks alone, and is gone by then). Values of 8, 16 and 120 bytes (63, 43 and 8
/// blocks a slab). Meant for valgrind: a slab touched after its free is an invalid
/// read there (`review_s25_alloc` catches it without).
#[test]
fn lists_dropped_at_every_carving_end() {
    fn sweep<T: Send + 'static>(make: fn(usize) -> T) {
        for extra in 0..130 {
            for half in [false, true] {
                let (tx, rx) = chan::unbounded::<T>();
                let n = (SLAB_AFTER + extra) * BLOCK;
                for i in 0..n {
                    assert!(tx.try_send(make(i)).is_ok());
                }
                if half {
                    for _ in 0..n / 2 {
                        assert!(rx.try_recv().is_ok());
                    }
                }
                drop((tx, rx));
            }
        }
    }
    watchdog(300, || {
        sweep(|i| i as u64);
        sweep(|i| (i, i));
        sweep(|i| [i as u8; 120]);
    })
}
