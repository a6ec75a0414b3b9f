//! Adversarial review of session 37's two changes, from safe code only.
//!
//! 1. (9477475, `base/zeroed.rs` `mapped`/`kept`, `Zeroed::recycle`, `Ring`'s `Drop`)
//!    A mapped ring (>= 1 MiB of joint slots, or of stamps for values kept apart)
//!    dropped with at most 1 MiB of it written goes, cleared, to a per-thread cache
//!    for the next ring of exactly its byte size made on that thread. What could go
//!    wrong: a dirty slot or stamp not cleared (a reused ring would then answer `Full`
//!    early, or hand out a phantom value), a mapping kept that was dirtied past the
//!    limit or over a lap, the cache mixed up across element types of the same byte
//!    size (joint slots against stamps kept apart), a mapping leaked at thread exit
//!    (or kept by a ring dropped in a thread-local destructor), a mapping reused by two
//!    rings, memory growing with many short-lived threads.
//!
//! 2. (fc760b5, `fiber/wait.rs` `Handle::block_on`/`block_on_entered`) The future is
//!    a parameter after the enter guard and is pinned in place. What could go wrong:
//!    the future dropped after the guard (outside its runtime) on the return or the
//!    unwind path, dropped twice or not at all, moved between polls, a wrong runtime
//!    current after nested `block_on`s on plain threads, workers and fibers.

mod common;

use common::{big_watchdog, live, with_limit, Tracked};

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use weft::chan::{self, Receiver, Select, Sender, TryRecvError, TrySendError};
use weft::{Builder, Handle, Runtime};

const LIMIT: Duration = Duration::from_secs(9);

// ---------------------------------------------------------------------------------
// Change 1: kept mappings
// ---------------------------------------------------------------------------------

/// A capacity whose joint slots of 16 bytes (`u64`, `i64`, `(u32, u32)`, `u8`, ...)
/// are 1.6 MB: mapped (>= 1 MiB), and populated whole at creation (<= 8 MiB).
const CAP16: usize = 100_000;
/// The most slots of 16 bytes a recycle clears to keep the mapping (1 MiB).
const KEEP16: usize = (1 << 20) / 16;
/// A capacity whose stamps (8 bytes each, values of 100 bytes kept apart) are 1.6 MB,
/// as are the joint slots of `()` (8 bytes) at the same capacity.
const CAP8: usize = 200_000;
/// The most 8-byte stamps a recycle clears to keep the mapping.
const KEEP8: usize = (1 << 20) / 8;

/// Checks that a channel just made is a fresh one: no phantom value, empty, takes
/// exactly `cap` values in order, refuses the next, gives them back in order. This
/// dirties the whole ring (so the mapping is unmapped at its drop, not kept).
fn assert_fresh<T: PartialEq + std::fmt::Debug>(
    tx: &Sender<T>,
    rx: &Receiver<T>,
    cap: usize,
    make: impl Fn(usize) -> T,
    what: &str,
) {
    assert_eq!(tx.capacity(), Some(cap), "{what}");
    match rx.try_recv() {
        Err(TryRecvError::Empty) => {}
        Ok(v) => panic!("{what}: a phantom value {v:?} in a fresh channel"),
        Err(e) => panic!("{what}: {e:?}"),
    }
    assert_eq!(rx.len(), 0, "{what}");
    assert!(rx.is_empty() && !tx.is_full(), "{what}");
    for i in 0..cap {
        if let Err(e) = tx.try_send(make(i)) {
            panic!(
                "{what}: send {i} of {cap} refused ({}), len {}",
                match e {
                    TrySendError::Full(_) => "Full",
                    TrySendError::Disconnected(_) => "Disconnected",
                },
                rx.len()
            );
        }
    }
    assert_eq!(rx.len(), cap, "{what}");
    assert!(tx.is_full(), "{what}");
    assert!(
        matches!(tx.try_send(make(cap)), Err(TrySendError::Full(_))),
        "{what}: a value past the capacity was accepted"
    );
    for i in 0..cap {
        match rx.try_recv() {
            Ok(v) => assert!(v == make(i), "{what}: value {i}: got {v:?}"),
            Err(e) => panic!("{what}: recv {i} of {cap}: {e:?}"),
        }
    }
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)), "{what}");
}

/// Quick freshness check that dirties little (so the mapping stays kept): empty, no
/// phantom value, `n` values in and out in order.
fn assert_fresh_small<T: PartialEq + std::fmt::Debug>(
    tx: &Sender<T>,
    rx: &Receiver<T>,
    n: usize,
    make: impl Fn(usize) -> T,
    what: &str,
) {
    match rx.try_recv() {
        Err(TryRecvError::Empty) => {}
        Ok(v) => panic!("{what}: a phantom value {v:?} in a fresh channel"),
        Err(e) => panic!("{what}: {e:?}"),
    }
    assert_eq!(rx.len(), 0, "{what}");
    for i in 0..n {
        tx.try_send(make(i))
            .unwrap_or_else(|_| panic!("{what}: send {i} refused, len {}", rx.len()));
    }
    assert_eq!(rx.len(), n, "{what}");
    for i in 0..n {
        let v = rx
            .try_recv()
            .unwrap_or_else(|e| panic!("{what}: recv {i}: {e:?}"));
        assert!(v == make(i), "{what}: value {i}: got {v:?}");
    }
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)), "{what}");
}

/// How a victim channel is used before it is dropped.
#[derive(Clone, Copy, Debug)]
enum Use {
    /// Push `n`, pop `m` (values left behind).
    PushPop(usize, usize),
    /// Push `n`, pop `m`, then push `k` more and pop them all (wraps a lap when
    /// `n + k > cap`).
    Wrap(usize, usize, usize),
    /// Push `n`, close, pop `m`.
    Close(usize, usize),
}

const USES16: &[Use] = &[
    Use::PushPop(0, 0),
    Use::PushPop(1, 0),
    Use::PushPop(1, 1),
    Use::PushPop(3_000, 1_000),
    Use::PushPop(KEEP16 - 1, KEEP16 - 1),
    Use::PushPop(KEEP16, 0),
    Use::PushPop(KEEP16, KEEP16),
    Use::PushPop(KEEP16 + 1, 7),
    Use::PushPop(CAP16, CAP16 / 2),
    Use::Wrap(60_000, 60_000, 45_000),
    Use::Wrap(CAP16, CAP16, 5),
    Use::Close(KEEP16, 10),
    Use::Close(500, 0),
];

fn use_channel<T>(tx: &Sender<T>, rx: &Receiver<T>, u: Use, make: impl Fn(usize) -> T) {
    let mut next = 0;
    let mut push = |n: usize| {
        for _ in 0..n {
            assert!(tx.try_send(make(next)).is_ok(), "victim send {next}");
            next += 1;
        }
    };
    let pop = |m: usize| {
        for _ in 0..m {
            rx.try_recv().expect("victim recv");
        }
    };
    match u {
        Use::PushPop(n, m) => {
            push(n);
            pop(m);
        }
        Use::Wrap(n, m, k) => {
            push(n);
            pop(m);
            push(k);
            pop(n - m + k);
        }
        Use::Close(n, m) => {
            push(n);
            tx.close();
            pop(m);
        }
    }
}

/// Victims of one element type, each followed on the same thread by a checker of
/// another type of the same slot size: the checker's ring is the victim's mapping
/// whenever the victim's was kept.
#[test]
fn a_reused_mapping_starts_fresh_for_another_type_of_the_same_slot_size() {
    with_limit(LIMIT * 3, || {
        for (i, &u) in USES16.iter().enumerate() {
            {
                let (tx, rx) = chan::bounded::<u64>(CAP16);
                use_channel(&tx, &rx, u, |i| i as u64 * 3 + 1);
                // Receiver dropped first on even rounds, sender first on odd ones.
                if i % 2 == 0 {
                    drop(rx);
                    drop(tx);
                } else {
                    drop(tx);
                    drop(rx);
                }
            }
            let what = format!("(u32, u32) after u64 {u:?}");
            let (tx, rx) = chan::bounded::<(u32, u32)>(CAP16);
            assert_fresh(&tx, &rx, CAP16, |i| (i as u32, !(i as u32)), &what);
        }
        // And u8 (16-byte slots too, with padding) after i64, f64 after u8.
        let (tx, rx) = chan::bounded::<i64>(CAP16);
        use_channel(&tx, &rx, Use::PushPop(40_000, 1), |i| -(i as i64));
        drop((tx, rx));
        let (tx, rx) = chan::bounded::<u8>(CAP16);
        assert_fresh_small(&tx, &rx, 50_000, |i| i as u8, "u8 after i64");
        drop((tx, rx));
        let (tx, rx) = chan::bounded::<f64>(CAP16);
        assert_fresh(&tx, &rx, CAP16, |i| i as f64 + 0.5, "f64 after u8");
    });
}

/// A chain of rings on one thread, each made from the previous one's kept mapping
/// (all dirtied below the limit), each checked with a short use: the clears add up.
#[test]
fn a_chain_of_reused_mappings_each_start_fresh() {
    with_limit(LIMIT, || {
        for round in 0..40usize {
            let n = (round * 7919) % KEEP16 + 1;
            let (tx, rx) = chan::bounded::<u64>(CAP16);
            let what = format!("round {round}");
            // A fresh look first (dirties 3 slots of a kept mapping, at most).
            assert_fresh_small(&tx, &rx, 3, |i| (round * 1000 + i) as u64, &what);
            // Then dirty `n - 3` more slots, leaving some values in.
            for i in 0..n.saturating_sub(3) {
                tx.try_send(i as u64 | 1 << 40).unwrap();
            }
            assert_eq!(rx.len(), n.saturating_sub(3), "{what}");
            for i in 0..n.saturating_sub(3) / 2 {
                assert_eq!(rx.try_recv().unwrap(), i as u64 | 1 << 40, "{what}");
            }
        }
        let (tx, rx) = chan::bounded::<u64>(CAP16);
        assert_fresh(&tx, &rx, CAP16, |i| i as u64, "after the chain");
    });
}

/// Stamps kept apart from 100-byte values and joint slots of `()` and of `u64` are all
/// 1.6 MB at these capacities: the one cache serves them in turn.
#[test]
fn stamps_apart_and_joint_slots_of_the_same_bytes_share_the_cache_cleanly() {
    with_limit(LIMIT * 2, || {
        let big = |i: usize| {
            let mut a = [0u8; 100];
            a[0] = i as u8;
            a[50] = (i >> 8) as u8;
            a[99] = (i >> 16) as u8;
            a
        };
        for u in [
            Use::PushPop(KEEP8, 3),
            Use::PushPop(5, 5),
            Use::PushPop(KEEP8 + 1, 0),
            Use::Close(9_999, 1),
        ] {
            let (tx, rx) = chan::bounded::<[u8; 100]>(CAP8);
            use_channel(&tx, &rx, u, big);
            drop((tx, rx));
            let (tx, rx) = chan::bounded::<()>(CAP8);
            assert_fresh(&tx, &rx, CAP8, |_| (), &format!("() after [u8; 100] {u:?}"));
            drop((tx, rx));

            let (tx, rx) = chan::bounded::<u64>(CAP16);
            use_channel(&tx, &rx, Use::PushPop(KEEP16, 1), |i| i as u64 + 11);
            drop((tx, rx));
            let (tx, rx) = chan::bounded::<[u8; 100]>(CAP8);
            assert_fresh_small(&tx, &rx, 2_000, big, &format!("[u8; 100] after u64 {u:?}"));
            // Fill it then (only the stamps are checked through the value array).
            for i in 2_000..CAP8 + 2_000 {
                tx.try_send(big(i))
                    .unwrap_or_else(|_| panic!("[u8;100] send {i}"));
            }
            assert!(matches!(tx.try_send(big(0)), Err(TrySendError::Full(_))));
            for i in 2_000..CAP8 + 2_000 {
                assert_eq!(rx.try_recv().unwrap(), big(i));
            }
        }
    });
}

/// Values with a `Drop` left in a kept ring: each dropped exactly once when the ring
/// goes, and the next ring of the same bytes (another type) starts fresh.
#[test]
fn values_left_in_a_kept_ring_are_dropped_once_and_not_seen_again() {
    with_limit(LIMIT, || {
        // `Tracked` is a usize, an Arc and a bool: 24 bytes, joint slots of 32.
        let cap = 50_000; // 1.6 MB of slots.
        let live = live();
        for (n, m) in [(1usize, 0usize), (20_000, 5_000), ((1 << 20) / 32, 3)] {
            let (tx, rx) = chan::bounded::<Tracked>(cap);
            for i in 0..n {
                assert!(tx.try_send(Tracked::new(i, &live)).is_ok());
            }
            for i in 0..m {
                assert_eq!(rx.try_recv().unwrap().id, i);
            }
            assert_eq!(live.load(SeqCst), n - m);
            drop((tx, rx));
            assert_eq!(live.load(SeqCst), 0, "values left were not dropped once");
            // 32-byte slots too: (u64, u64, u64).
            let (tx, rx) = chan::bounded::<(u64, u64, u64)>(cap);
            assert_fresh(
                &tx,
                &rx,
                cap,
                |i| (i as u64, 1, !(i as u64)),
                &format!("after {n}/{m}"),
            );
        }
    });
}

/// A value whose `Drop` panics, left in a mapped ring: the panic comes out of the
/// last handle's drop; the mapping is not kept half-dropped, and the next rings of
/// that size on this thread start fresh.
#[test]
fn a_panicking_drop_left_in_a_mapped_ring_leaves_the_next_ring_fresh() {
    struct Bomb(u64, bool);
    impl Drop for Bomb {
        fn drop(&mut self) {
            if self.1 {
                panic!("bomb {}", self.0);
            }
        }
    }
    with_limit(LIMIT, || {
        let (tx, rx) = chan::bounded::<Bomb>(CAP16); // 16-byte slots
        for i in 0..10 {
            assert!(tx.try_send(Bomb(i, i == 4)).is_ok());
        }
        // The values go with the last handle (or with the last receiver): either
        // drop may be the one that panics.
        let r = catch_unwind(AssertUnwindSafe(move || {
            drop(rx);
            drop(tx);
        }));
        assert!(r.is_err(), "the bomb's panic did not come out");
        let (tx, rx) = chan::bounded::<u64>(CAP16);
        assert_fresh(&tx, &rx, CAP16, |i| i as u64, "u64 after a panicking drop");
    });
}

/// Channels made on one thread and dropped on another, which then makes a channel of
/// the same bytes from the mapping it kept: everything sent arrives once, in order,
/// and the reused ring is fresh.
#[test]
fn rings_dropped_on_another_thread_feed_that_thread_cache_cleanly() {
    with_limit(LIMIT * 2, || {
        let (to_b, from_a) = mpsc::channel::<(Sender<u64>, Receiver<u64>, usize)>();
        let b = std::thread::spawn(move || {
            let mut checked = 0;
            while let Ok((tx, rx, sent)) = from_a.recv() {
                // Whatever is left arrives in order.
                let first = (sent / 3) as u64;
                for i in first..sent as u64 {
                    assert_eq!(rx.try_recv().unwrap(), i);
                }
                assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
                drop(rx);
                drop(tx); // the ring is dropped here, on b: b keeps the mapping
                let (t2, r2) = chan::bounded::<(u32, u32)>(CAP16);
                assert_fresh_small(&t2, &r2, 100, |i| (i as u32, 7), "on b");
                for i in 0..sent {
                    t2.try_send((i as u32, 9)).unwrap();
                }
                // Dropped with `sent + 100` slots dirty: kept when that is small.
                drop((t2, r2));
                checked += 1;
            }
            checked
        });
        for round in 0..12usize {
            let sent = [1, 10, 1000, 30_000, KEEP16 - 100, KEEP16 - 99, 70_000][round % 7];
            let (tx, rx) = chan::bounded::<u64>(CAP16);
            for i in 0..sent {
                tx.try_send(i as u64).unwrap();
            }
            for i in 0..sent / 3 {
                assert_eq!(rx.try_recv().unwrap(), i as u64);
            }
            to_b.send((tx, rx, sent)).unwrap();
        }
        drop(to_b);
        assert_eq!(b.join().unwrap(), 12);
    });
}

/// Many threads make, use and drop big channels of one size at once, handing some to
/// each other (so rings are dropped off the thread that made them); a checker value
/// sequence per channel shows nothing lost, duplicated or invented.
#[test]
fn many_threads_make_and_drop_big_channels_concurrently() {
    with_limit(LIMIT * 2, || {
        const THREADS: usize = 6;
        let (hand_tx, hand_rx) = mpsc::channel::<(Receiver<u64>, u64, usize)>();
        let hand_rx = Arc::new(Mutex::new(hand_rx));
        let errors = Arc::new(Mutex::new(Vec::<String>::new()));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let hand_tx = hand_tx.clone();
                let hand_rx = hand_rx.clone();
                let errors = errors.clone();
                std::thread::spawn(move || {
                    for round in 0..25usize {
                        let n = (t * 7_777 + round * 3_331) % 20_000;
                        let tag = ((t as u64) << 48) | ((round as u64) << 32);
                        let (tx, rx) = chan::bounded::<u64>(CAP16);
                        if let Ok(v) = rx.try_recv() {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("phantom {v:#x} t{t} r{round}"));
                        }
                        for i in 0..n {
                            if tx.try_send(tag | i as u64).is_err() {
                                errors
                                    .lock()
                                    .unwrap()
                                    .push(format!("refused t{t} r{round} i{i}"));
                            }
                        }
                        drop(tx);
                        if round % 2 == 0 {
                            hand_tx.send((rx, tag, n)).unwrap();
                        } else {
                            drop(rx);
                        }
                        // Take someone's receiver, check it, drop it here.
                        let got = hand_rx.lock().unwrap().try_recv();
                        if let Ok((rx, tag, n)) = got {
                            for i in 0..n {
                                match rx.try_recv() {
                                    Ok(v) if v == tag | i as u64 => {}
                                    other => {
                                        errors
                                            .lock()
                                            .unwrap()
                                            .push(format!("tag {tag:#x} value {i}: {other:?}"));
                                        break;
                                    }
                                }
                            }
                            if !matches!(rx.try_recv(), Err(TryRecvError::Disconnected)) {
                                errors.lock().unwrap().push(format!("tag {tag:#x}: extra"));
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(hand_tx);
        // The rest, checked here.
        while let Ok((rx, tag, n)) = hand_rx.lock().unwrap().try_recv() {
            for i in 0..n {
                assert_eq!(rx.try_recv().unwrap(), tag | i as u64);
            }
            assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
        }
        let errors = errors.lock().unwrap();
        assert!(
            errors.is_empty(),
            "{} errors, first: {:?}",
            errors.len(),
            &errors[..errors.len().min(5)]
        );
    });
}

/// Big channels made and dropped by tasks and fibers on a runtime's workers (the
/// workers' caches), with the values crossing between tasks; a select over two such
/// channels; the runtime shut down with big channels still held by stuck tasks.
#[test]
fn big_channels_on_workers_fibers_and_select() {
    with_limit(LIMIT * 2, || {
        let rt = Builder::new().worker_threads(3).build().unwrap();
        let total = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for t in 0..24usize {
            let total = total.clone();
            hs.push(rt.spawn(async move {
                let n = (t * 4_999) % 30_000 + 1;
                let (tx, rx) = chan::bounded::<u64>(CAP16);
                assert!(rx.try_recv().is_err(), "phantom value in task {t}");
                let consumer = weft::spawn(async move {
                    let mut next = 0u64;
                    while let Ok(v) = rx.recv().await {
                        assert_eq!(v, next, "task {t}");
                        next += 1;
                    }
                    next as usize
                });
                for i in 0..n {
                    tx.send(i as u64).await.unwrap();
                }
                drop(tx);
                let got = consumer.await.unwrap();
                assert_eq!(got, n);
                total.fetch_add(got, SeqCst);
            }));
        }
        for t in 0..12usize {
            let total = total.clone();
            hs.push(common::fiber_on(&rt, move || {
                let n = (t * 6_007) % 30_000 + 1;
                let (tx, rx) = chan::bounded::<(u32, u32)>(CAP16);
                assert!(rx.try_recv().is_err(), "phantom value in fiber {t}");
                let consumer = weft::fiber::spawn(move || {
                    let mut next = 0u32;
                    while let Ok((a, b)) = rx.recv_blocking() {
                        assert_eq!((a, b), (next, !next), "fiber {t}");
                        next += 1;
                    }
                    next as usize
                });
                for i in 0..n as u32 {
                    tx.send_blocking((i, !i)).unwrap();
                }
                drop(tx);
                let got = consumer.join().unwrap();
                assert_eq!(got, n);
                total.fetch_add(got, SeqCst);
            }));
        }
        let want: usize = (0..24usize)
            .map(|t| (t * 4_999) % 30_000 + 1)
            .sum::<usize>()
            + (0..12usize)
                .map(|t| (t * 6_007) % 30_000 + 1)
                .sum::<usize>();
        for h in hs {
            common::join_within(h, 8).unwrap();
        }
        assert_eq!(total.load(SeqCst), want);

        // Select over two big channels made on a worker after all that.
        let r = rt.block_on(async {
            weft::spawn(async {
                let (t1, r1) = chan::bounded::<u64>(CAP16);
                let (t2, r2) = chan::bounded::<u64>(CAP16);
                assert!(r1.try_recv().is_err() && r2.try_recv().is_err());
                for i in 0..2_000u64 {
                    if i % 3 == 0 {
                        t1.try_send(i).unwrap()
                    } else {
                        t2.try_send(i).unwrap()
                    }
                }
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for _ in 0..2_000 {
                    let mut sel = Select::new();
                    let i1 = sel.recv(&r1);
                    let i2 = sel.recv(&r2);
                    let op = sel
                        .select_timeout(Duration::from_secs(2))
                        .expect("select timed out");
                    if op.index() == i1 {
                        a.push(op.recv(&r1).unwrap());
                    } else {
                        assert_eq!(op.index(), i2);
                        b.push(op.recv(&r2).unwrap());
                    }
                }
                let mut sel = Select::new();
                sel.recv(&r1);
                sel.recv(&r2);
                assert!(sel.try_select().is_err(), "select found a phantom value");
                (a, b)
            })
            .await
            .unwrap()
        });
        assert!(r.0.iter().all(|v| v % 3 == 0) && r.0.windows(2).all(|w| w[0] < w[1]));
        assert!(r.1.iter().all(|v| v % 3 != 0) && r.1.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(r.0.len() + r.1.len(), 2_000);

        // Tasks stuck on big channels when the runtime shuts down: their rings are
        // dropped by the shutdown, wherever it drops them.
        let live = live();
        for t in 0..6usize {
            let live = live.clone();
            rt.spawn(async move {
                let (tx, rx) = chan::bounded::<Tracked>(50_000);
                for i in 0..100 {
                    assert!(tx.try_send(Tracked::new(t * 1000 + i, &live)).is_ok());
                }
                let (_keep, never) = chan::bounded::<u8>(1);
                let _ = never.recv().await;
                drop((tx, rx));
            });
        }
        common::wait_until("the stuck tasks filled their channels", || {
            live.load(SeqCst) == 600
        });
        rt.shutdown_timeout(Duration::from_secs(3));
        assert_eq!(
            live.load(SeqCst),
            0,
            "values of stuck tasks' channels leaked"
        );
        // And this thread's next big channels are fresh.
        let (tx, rx) = chan::bounded::<u64>(CAP16);
        assert_fresh(
            &tx,
            &rx,
            CAP16,
            |i| i as u64,
            "after the runtime's shutdown",
        );
    });
}

/// Rings of exactly 1 MiB (the mapping threshold and the dirty limit both): a full lap,
/// even several, dirties all of it and is still kept (cleared whole). A chain of such
/// rings of types with the same bytes, each checked whole (which dirties it all
/// again), some filled through a select's send, some closed with values left.
#[test]
fn rings_of_exactly_one_mib_are_kept_after_full_laps_and_come_back_fresh() {
    with_limit(LIMIT * 2, || {
        const CAP: usize = (1 << 20) / 16; // 65,536 joint slots of 16 bytes
        for round in 0..6usize {
            let what = format!("round {round}");
            if round % 2 == 0 {
                let (tx, rx) = chan::bounded::<u64>(CAP);
                assert_fresh(&tx, &rx, CAP, |i| (i * 5 + round) as u64, &what);
                // Two more laps, part-full, ending with values left in and closed.
                for i in 0..CAP + CAP / 2 {
                    tx.try_send(i as u64).unwrap();
                    if i >= 100 {
                        rx.try_recv().unwrap();
                    }
                }
                tx.close();
            } else {
                let (tx, rx) = chan::bounded::<(u32, u32)>(CAP);
                assert_fresh_small(&tx, &rx, 5, |i| (i as u32, 1), &what);
                // Fill it through select sends, then check order and `Full`.
                for i in 0..CAP as u32 {
                    let mut sel = Select::new();
                    let k = sel.send(&tx);
                    let op = sel
                        .try_select()
                        .unwrap_or_else(|e| panic!("{what}: select send {i}: {e:?}"));
                    assert_eq!(op.index(), k);
                    op.send(&tx, (i, !i)).unwrap();
                }
                let mut sel = Select::new();
                sel.send(&tx);
                assert!(
                    sel.try_select().is_err(),
                    "{what}: a select send past the capacity"
                );
                assert_eq!(rx.len(), CAP);
                for i in 0..CAP as u32 {
                    assert_eq!(rx.try_recv().unwrap(), (i, !i), "{what}");
                }
                assert!(rx.try_recv().is_err());
            }
        }
        // `()` slots are 8 bytes: 131,072 of them make 1 MiB too, as do the stamps of
        // 100-byte values at that capacity.
        let (tx, rx) = chan::bounded::<()>(2 * CAP);
        assert_fresh(&tx, &rx, 2 * CAP, |_| (), "() after 16-byte slots");
        drop((tx, rx));
        let (tx, rx) = chan::bounded::<[u8; 100]>(2 * CAP);
        assert_fresh(
            &tx,
            &rx,
            2 * CAP,
            |i| [i as u8; 100],
            "[u8; 100] stamps after ()",
        );
        drop((tx, rx));
        // And 32-byte slots with 16-byte alignment, half as many.
        let (tx, rx) = chan::bounded::<u128>(CAP / 2);
        assert_fresh(
            &tx,
            &rx,
            CAP / 2,
            |i| (i as u128) << 70 | 3,
            "u128 after stamps",
        );
    });
}

// --- thread exit and memory: in a child process, to measure the process alone ------

const CHILD: &str = "REVIEW_S37_CHILD";

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "short_lived_threads" => child_short_lived_threads(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD done=ok");
}

fn status_kb(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

thread_local! {
    /// A big channel kept by a thread until its thread-locals are destroyed.
    static HELD: std::cell::RefCell<Option<(Sender<u64>, Receiver<u64>)>> =
        const { std::cell::RefCell::new(None) };
}

/// 60 short-lived threads (10 at a time) each keep a populated 8 MB mapping (a
/// `bounded::<u64>(500_000)` that carried a few values) when they exit, and some of
/// them drop another in a thread-local destructor (after or before the cache's own);
/// once they are gone, the process's resident and virtual sizes are back near where
/// they started.
fn child_short_lived_threads() {
    const CAP: usize = 500_000; // 8 MB of joint slots, populated at creation
                                // Warm-up: as many threads at once doing small channel work, so that glibc's
                                // per-thread malloc arenas (64 MiB of address space each, kept after the threads
                                // exit) exist before the measurement.
    for _ in 0..3 {
        let ts: Vec<_> = (0..10u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let (tx, rx) = chan::bounded::<u64>(1000);
                    tx.try_send(t).unwrap();
                    let v: Vec<u64> = (0..10_000).collect();
                    std::thread::sleep(Duration::from_millis(20));
                    assert_eq!(rx.try_recv().unwrap() + v[5], t + 5);
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
    }
    let rss0 = status_kb("VmRSS:");
    let vm0 = status_kb("VmSize:");
    let mut peak_rss = 0;
    for batch in 0..6 {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = Arc::new(Mutex::new(go_rx));
        let ts: Vec<_> = (0..10usize)
            .map(|t| {
                let ready_tx = ready_tx.clone();
                let go_rx = go_rx.clone();
                std::thread::spawn(move || {
                    if t % 3 == 0 {
                        // Held in a thread-local made before the cache is touched: its
                        // ring is dropped during thread-local destruction.
                        HELD.with(|h| *h.borrow_mut() = Some(chan::bounded::<u64>(CAP)));
                    }
                    let (tx, rx) = chan::bounded::<u64>(CAP);
                    for i in 0..1_000 {
                        tx.try_send(i).unwrap();
                    }
                    for i in 0..500 {
                        assert_eq!(rx.try_recv().unwrap(), i);
                    }
                    drop((tx, rx)); // kept by this thread
                    if t % 3 == 1 {
                        // Held past the cache's first use: dropped at exit too.
                        HELD.with(|h| {
                            let (tx, rx) = chan::bounded::<u64>(CAP);
                            tx.try_send(5).unwrap();
                            *h.borrow_mut() = Some((tx, rx));
                        });
                    }
                    ready_tx.send(()).unwrap();
                    let _ = go_rx.lock().unwrap().recv();
                })
            })
            .collect();
        for _ in 0..10 {
            ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        peak_rss = peak_rss.max(status_kb("VmRSS:"));
        drop(go_tx);
        for t in ts {
            t.join().unwrap();
        }
        let _ = batch;
    }
    let rss1 = status_kb("VmRSS:");
    let vm1 = status_kb("VmSize:");
    println!("CHILD rss0={rss0} peak={peak_rss} rss1={rss1} vm0={vm0} vm1={vm1}");
    // 60 threads x 8 MB kept = 480 MB, plus 40 held: anything like that left is a leak.
    assert!(
        rss1.saturating_sub(rss0) < 64 * 1024,
        "resident memory grew by {} KiB after the threads exited (peak {peak_rss} KiB)",
        rss1 - rss0
    );
    assert!(
        vm1.saturating_sub(vm0) < 256 * 1024,
        "virtual memory grew by {} KiB after the threads exited",
        vm1 - vm0
    );
}

#[test]
fn short_lived_threads_keeping_mappings_leave_no_memory_behind() {
    let out = common::child::run_case(CHILD, "short_lived_threads", Duration::from_secs(9));
    println!(
        "{}",
        out.report("rss0")
            .map(|_| out.stdout.clone())
            .unwrap_or_default()
    );
    out.assert_finished();
}

// ---------------------------------------------------------------------------------
// Change 2: block_on's future as a parameter
// ---------------------------------------------------------------------------------

/// What a probe saw when it was dropped: whether a runtime was current, and if so the
/// name of the worker a task spawned there (from the drop) ran on.
#[derive(Debug)]
struct Seen {
    current: bool,
    spawned: Option<weft::JoinHandle<String>>,
}

/// Reports, when dropped, what runtime is current (by spawning onto it).
struct Probe {
    drops: Arc<AtomicUsize>,
    seen: mpsc::Sender<Seen>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        let current = Handle::try_current().is_ok();
        let spawned = current.then(|| {
            weft::spawn(async { std::thread::current().name().unwrap_or("?").to_string() })
        });
        let _ = self.seen.send(Seen { current, spawned });
    }
}

fn probe() -> (Probe, Arc<AtomicUsize>, mpsc::Receiver<Seen>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    (
        Probe {
            drops: drops.clone(),
            seen: tx,
        },
        drops,
        rx,
    )
}

/// A future that holds a probe beside an inner future: the probe drops when the
/// future itself is dropped (after `block_on` got its output, or on an unwind).
struct WithProbe<F> {
    inner: Pin<Box<F>>,
    _probe: Probe,
}

impl<F: Future> Future for WithProbe<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.inner.as_mut().poll(cx)
    }
}

fn rt_named(name: &str, workers: usize) -> Runtime {
    Builder::new()
        .worker_threads(workers)
        .thread_name(name)
        .build()
        .unwrap()
}

/// Checks the probe was dropped exactly once, with the runtime named `name` current.
fn assert_dropped_on(drops: &AtomicUsize, seen: &mpsc::Receiver<Seen>, name: &str, what: &str) {
    assert_eq!(
        drops.load(SeqCst),
        1,
        "{what}: the future was dropped {} times",
        drops.load(SeqCst)
    );
    let s = seen
        .recv_timeout(Duration::from_secs(3))
        .expect("the probe reported");
    assert!(
        s.current,
        "{what}: the future was dropped with no runtime current"
    );
    let h = s.spawned.unwrap();
    let worker = common::join_within(h, 5).unwrap();
    assert!(
        worker.starts_with(name),
        "{what}: the future's drop spawned onto {worker:?}, not runtime {name:?}"
    );
}

/// A yield that really parks: the waker is woken from another thread a little later.
struct ParkOnce(bool);
impl Future for ParkOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        let w = cx.waker().clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            w.wake();
        });
        Poll::Pending
    }
}

#[test]
fn block_on_drops_the_future_with_its_runtime_current_on_return_and_unwind() {
    with_limit(LIMIT, || {
        let rt = rt_named("s37a", 2);
        // Return path, both entry points.
        let (p, drops, seen) = probe();
        let v = rt.block_on(WithProbe {
            inner: Box::pin(async {
                ParkOnce(false).await;
                41 + 1
            }),
            _probe: p,
        });
        assert_eq!(v, 42);
        assert_dropped_on(&drops, &seen, "s37a", "Runtime::block_on, return");
        assert!(
            Handle::try_current().is_err(),
            "still entered after block_on"
        );

        let (p, drops, seen) = probe();
        let v = rt.handle().block_on(WithProbe {
            inner: Box::pin(async { String::from("x") }),
            _probe: p,
        });
        assert_eq!(v, "x");
        assert_dropped_on(&drops, &seen, "s37a", "Handle::block_on, return");

        // Unwind path: a panic in a poll.
        block_on_a_panicking_poll(&rt, false, "s37a", "Runtime::block_on, unwind");
        assert!(
            Handle::try_current().is_err(),
            "still entered after a panicking block_on"
        );
        // The runtime still works.
        assert_eq!(
            rt.block_on(async { weft::spawn(async { 5 }).await.unwrap() }),
            5
        );
    });
}

fn drops_never() -> bool {
    std::hint::black_box(false)
}

/// `rt.block_on` of a probed future that parks once (then yields, if `yields`) and
/// panics in its poll: the panic comes out, and the future was dropped once with the
/// runtime named `name` current.
fn block_on_a_panicking_poll(rt: &Runtime, yields: bool, name: &str, what: &str) {
    let (p, drops, seen) = probe();
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(WithProbe {
            inner: Box::pin(async move {
                ParkOnce(false).await;
                if yields {
                    weft::task::yield_now().await;
                }
                if drops_never() {
                    return 0u8;
                }
                panic!("poll panics");
            }),
            _probe: p,
        })
    }));
    assert!(r.is_err(), "{what}: the poll's panic did not come out");
    assert_dropped_on(&drops, &seen, name, what);
}

/// Nested on a plain thread: runtime B's `block_on` inside runtime A's future. The
/// inner future drops with B current, the outer with A, and A is current again
/// between them.
#[test]
fn nested_block_on_of_two_runtimes_drops_each_future_in_its_own() {
    with_limit(LIMIT, || {
        let a = rt_named("s37na", 1);
        let b = Arc::new(rt_named("s37nb", 1));
        let (pa, da, sa) = probe();
        let b2 = b.clone();
        let name_after = a.block_on(WithProbe {
            inner: Box::pin(async move {
                let (pb, db, sb) = probe();
                let r = b2.block_on(WithProbe {
                    inner: Box::pin(async {
                        ParkOnce(false).await;
                        weft::spawn(async { std::thread::current().name().unwrap().to_string() })
                            .await
                            .unwrap()
                    }),
                    _probe: pb,
                });
                assert!(r.starts_with("s37nb"), "inner spawn went to {r}");
                assert_dropped_on(&db, &sb, "s37nb", "inner block_on");
                // A is current again.
                weft::spawn(async { std::thread::current().name().unwrap().to_string() })
                    .await
                    .unwrap()
            }),
            _probe: pa,
        });
        assert!(
            name_after.starts_with("s37na"),
            "after the inner block_on, spawn went to {name_after}"
        );
        assert_dropped_on(&da, &sa, "s37na", "outer block_on");
    });
}

/// The future's `Drop` itself uses the runtime hard: `block_on` of the same runtime
/// (nested, from the drop), `block_on` of another runtime, then a spawn that must go
/// to the first runtime again.
#[test]
fn a_future_whose_drop_blocks_on_runtimes_sees_the_right_one_current() {
    struct Heavy {
        other: Arc<Runtime>,
        out: mpsc::Sender<(String, String, String)>,
    }
    impl Drop for Heavy {
        fn drop(&mut self) {
            let name = || std::thread::current().name().unwrap_or("?").to_string();
            let same = Handle::current()
                .block_on(async move { weft::spawn(async move { name() }).await.unwrap() });
            let other = self
                .other
                .block_on(async move { weft::spawn(async move { name() }).await.unwrap() });
            let again = weft::wait(weft::spawn(async move { name() })).unwrap();
            self.out.send((same, other, again)).unwrap();
        }
    }
    struct F(#[allow(dead_code)] Heavy, bool);
    impl Future for F {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            if self.1 {
                return Poll::Ready(9);
            }
            self.1 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    with_limit(LIMIT, || {
        let a = rt_named("s37ha", 2);
        let b = Arc::new(rt_named("s37hb", 1));
        let (tx, rx) = mpsc::channel();
        let v = a.block_on(F(
            Heavy {
                other: b.clone(),
                out: tx.clone(),
            },
            false,
        ));
        assert_eq!(v, 9);
        let (same, other, again) = rx.recv_timeout(Duration::from_secs(3)).unwrap();
        assert!(same.starts_with("s37ha"), "{same}");
        assert!(other.starts_with("s37hb"), "{other}");
        assert!(
            again.starts_with("s37ha"),
            "after another runtime's block_on in the drop: {again}"
        );
        // The same from a task on a worker of A (block_on on a worker thread).
        let h = a.spawn(async move {
            let v = Handle::current().block_on(F(Heavy { other: b, out: tx }, false));
            let after = weft::spawn(async { std::thread::current().name().unwrap().to_string() })
                .await
                .unwrap();
            (v, after)
        });
        let (v, after) = common::join_within(h, 5).unwrap();
        assert_eq!(v, 9);
        assert!(after.starts_with("s37ha"), "{after}");
        let (same, other, again) = rx.recv_timeout(Duration::from_secs(3)).unwrap();
        assert!(same.starts_with("s37ha"), "worker: {same}");
        assert!(other.starts_with("s37hb"), "worker: {other}");
        assert!(again.starts_with("s37ha"), "worker: {again}");
    });
}

/// A future whose `Drop` panics, after it produced its output: the panic comes out of
/// `block_on`, the output is dropped at most once (rustc leaks it, see below), the
/// future is dropped once, and the runtime is no longer entered.
#[test]
fn a_panicking_future_drop_unwinds_out_of_block_on_cleanly() {
    struct Loud(Arc<AtomicUsize>);
    impl Drop for Loud {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
            panic!("the future's drop panics");
        }
    }
    struct F(#[allow(dead_code)] Loud, Arc<AtomicUsize>, bool);
    impl Future for F {
        type Output = common::DropCounter;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<common::DropCounter> {
            if self.2 {
                return Poll::Ready(common::DropCounter(self.1.clone()));
            }
            self.2 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    with_limit(LIMIT, || {
        let rt = rt_named("s37p", 1);
        let future_drops = Arc::new(AtomicUsize::new(0));
        let output_drops = Arc::new(AtomicUsize::new(0));
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(F(Loud(future_drops.clone()), output_drops.clone(), false))
        }));
        assert!(r.is_err(), "the drop's panic did not come out of block_on");
        assert_eq!(future_drops.load(SeqCst), 1, "future drops");
        assert!(
            Handle::try_current().is_err(),
            "the runtime stayed entered after the unwind"
        );
        // The output is leaked here (never dropped), not by weft: rustc does not drop a
        // function's return value when a later drop of a local or parameter panics
        // (rust-lang/rust#47949); the code before fc760b5 leaked it the same way.
        // Dropped twice would be weft's.
        let out = output_drops.load(SeqCst);
        println!("output drops after a panicking future drop: {out} (0 = rustc's leak)");
        assert!(out <= 1, "the output was dropped {out} times");
        // On a worker, inside a task.
        let (fd, od) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (fd2, od2) = (fd.clone(), od.clone());
        let h = rt.spawn(async move {
            let r = catch_unwind(AssertUnwindSafe(|| {
                Handle::current().block_on(F(Loud(fd2), od2, false))
            }));
            assert!(r.is_err());
            weft::spawn(async { std::thread::current().name().unwrap().to_string() })
                .await
                .unwrap()
        });
        let after = common::join_within(h, 5).unwrap();
        assert!(after.starts_with("s37p"), "{after}");
        assert_eq!(fd.load(SeqCst), 1);
        assert!(od.load(SeqCst) <= 1);
    });
}

/// A self-referential (`!Unpin`) future must stay where `block_on` pinned it: each poll
/// checks that the address of its local, which a reference it holds across awaits
/// points to, has not changed. Moved around before the call; large; parking for real.
#[test]
fn a_self_referential_future_is_never_moved_between_polls() {
    big_watchdog(9, || {
        let rt = rt_named("s37s", 2);
        let make = || async {
            let mut buf = [0u64; 4096];
            let r = &mut buf;
            let at = r.as_ptr() as usize;
            for i in 0..20 {
                r[i * 100] = i as u64 + 1;
                ParkOnce(false).await;
                weft::task::yield_now().await;
                assert_eq!(r.as_ptr() as usize, at, "the future moved between polls");
            }
            buf.iter().sum::<u64>()
        };
        let f = make();
        let moved = [f]; // moved before the call (not yet pinned)
        let [f] = moved;
        let want: u64 = (1..=20).sum();
        assert_eq!(rt.block_on(f), want);
        assert_eq!(rt.handle().clone().block_on(make()), want);
        // On a worker, a fiber, and inside another block_on.
        let h = rt.spawn(async move { Handle::current().block_on(make()) });
        assert_eq!(common::join_within(h, 5).unwrap(), want);
        let h = common::fiber_on(&rt, move || Handle::current().block_on(make()));
        assert_eq!(common::join_within(h, 5).unwrap(), want);
        let other = rt_named("s37s2", 1);
        assert_eq!(rt.block_on(async { other.block_on(make()) }), want);
    });
}

/// A large output (256 KiB) comes back whole, from a plain thread and a fiber.
#[test]
fn a_large_output_comes_back_whole() {
    big_watchdog(9, || {
        let rt = rt_named("s37l", 1);
        let fill = |seed: u8| async move {
            ParkOnce(false).await;
            let mut a = [0u8; 256 << 10];
            for (i, b) in a.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
            }
            a
        };
        let check = |a: &[u8; 256 << 10], seed: u8| {
            a.iter()
                .enumerate()
                .all(|(i, b)| *b == (i as u8).wrapping_mul(31).wrapping_add(seed))
        };
        let a = rt.block_on(fill(3));
        assert!(check(&a, 3));
        // A fiber with room for a debug build's copies of the output.
        let h = rt
            .block_on(async move {
                Some(
                    weft::fiber::Builder::new()
                        .stack_size(32 << 20)
                        .spawn(move || {
                            let a = Handle::current().block_on(fill(7));
                            check(&a, 7)
                        }),
                )
            })
            .unwrap();
        assert!(common::join_within(h, 5).unwrap());
    });
}

/// `block_on` on a fiber (of one runtime) of another runtime's future, with a poll
/// that panics: the future drops once, with the inner runtime current; the fiber's
/// spawns go to its own runtime afterwards.
#[test]
fn block_on_in_a_fiber_drops_its_future_in_the_right_runtime_on_unwind() {
    with_limit(LIMIT, || {
        let a = rt_named("s37fa", 2);
        let b = Arc::new(rt_named("s37fb", 1));
        let h = common::fiber_on(&a, move || {
            block_on_a_panicking_poll(&b, true, "s37fb", "fiber: inner block_on unwind");
            weft::wait(weft::spawn(async {
                std::thread::current().name().unwrap().to_string()
            }))
            .unwrap()
        });
        let after = common::join_within(h, 5).unwrap();
        assert!(after.starts_with("s37fa"), "{after}");
    });
}
