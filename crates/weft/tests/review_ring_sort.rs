//! Adversarial review of two changes, from safe code only: the bounded channel's ring
//! (stamps and values in two arrays, the values allocated uninitialised) and the stable
//! parallel merge sort's large leaves (`leaf_for`).
//!
//! Every value that crosses a channel or is sorted here is tracked: it has an id, it
//! panics on a second drop, and a per-test counter of live values must come back to zero.

mod common;

use common::{live, on_runtime, Rng, Tracked};

use std::cmp::Ordering as CmpOrdering;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use weft::chan::{self, Select, TrySendError};
use weft::prelude::*;

fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    f.poll(&mut cx)
}

// ---------------------------------------------------------------------------------------
// The ring.
// ---------------------------------------------------------------------------------------

/// A channel dropped while holding values, after any number of laps, at capacities 1, 2,
/// non-powers of two and larger: every value left in it is dropped exactly once, and the
/// values received come out in order.
#[test]
fn ring_drops_what_it_holds_after_wrap_around() {
    for cap in [1usize, 2, 3, 5, 7, 8, 9, 63, 64, 65, 1000] {
        for laps in [0usize, 1, 2, 5] {
            for left in [0, 1, cap / 2, cap] {
                let live = live();
                let (tx, rx) = chan::bounded::<Tracked>(cap);
                let mut next = 0;
                let mut expect = 0;
                // Go round `laps` times, keeping the ring part-full so positions move.
                for _ in 0..laps * cap {
                    if tx.is_full() {
                        assert_eq!(rx.try_recv().unwrap().id, expect);
                        expect += 1;
                    }
                    tx.try_send(Tracked::new(next, &live)).unwrap();
                    next += 1;
                    if next % 3 != 0 {
                        let v = rx.try_recv().unwrap();
                        assert_eq!(v.id, expect);
                        expect += 1;
                    }
                }
                while rx.len() > left {
                    assert_eq!(rx.try_recv().unwrap().id, expect);
                    expect += 1;
                }
                while rx.len() < left {
                    tx.try_send(Tracked::new(next, &live)).unwrap();
                    next += 1;
                }
                assert_eq!(rx.len(), left);
                if left == cap {
                    match tx.try_send(Tracked::new(usize::MAX, &live)) {
                        Err(TrySendError::Full(v)) => drop(v),
                        other => panic!("cap {cap}: a full ring took a value: {other:?}"),
                    }
                }
                assert_eq!(live.load(Ordering::SeqCst), left, "cap {cap} laps {laps}");
                if left % 2 == 1 {
                    tx.close();
                }
                drop(tx);
                drop(rx);
                assert_eq!(live.load(Ordering::SeqCst), 0, "cap {cap} laps {laps}");
            }
        }
    }
}

/// A zero-sized value with a destructor that counts.
/// Each test that counts them uses its own `K`, so that tests running at the same time
/// do not see each other's values.
struct Zst<const K: usize>;
static ZST_LIVE: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];
impl<const K: usize> Zst<K> {
    fn new() -> Zst<K> {
        ZST_LIVE[K].fetch_add(1, Ordering::SeqCst);
        Zst
    }
}
impl<const K: usize> Drop for Zst<K> {
    fn drop(&mut self) {
        ZST_LIVE[K].fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn ring_of_zero_sized_values() {
    for cap in [1usize, 2, 3, 17, 1 << 20] {
        let (tx, rx) = chan::bounded::<Zst<0>>(cap);
        assert_eq!(tx.capacity(), Some(cap));
        let fill = cap.min(5000);
        for round in 0..3 {
            for _ in 0..fill {
                tx.try_send(Zst::new()).unwrap();
            }
            if fill == cap {
                assert!(tx.try_send(Zst::new()).unwrap_err().is_full());
            }
            for _ in 0..fill - usize::from(round == 2) {
                rx.try_recv().unwrap();
            }
        }
        assert_eq!(ZST_LIVE[0].load(Ordering::SeqCst), rx.len());
        drop((tx, rx));
        assert_eq!(ZST_LIVE[0].load(Ordering::SeqCst), 0, "cap {cap}");
    }
    // Plain `()` over threads.
    let (tx, rx) = chan::bounded::<()>(2);
    let t = std::thread::spawn(move || {
        for _ in 0..10_000 {
            tx.send_blocking(()).unwrap();
        }
    });
    let mut n = 0;
    while rx.recv_blocking().is_ok() {
        n += 1;
    }
    t.join().unwrap();
    assert_eq!(n, 10_000);
}

/// Large inline values (16 KiB) through a small ring, across threads: every byte
/// arrives as written.
#[test]
fn ring_of_large_values_keeps_their_bytes() {
    const WORDS: usize = 2048;
    let (tx, rx) = chan::bounded::<[u64; WORDS]>(3);
    let t = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            for i in 0..200u64 {
                let mut v = [0u64; WORDS];
                for (j, w) in v.iter_mut().enumerate() {
                    *w = i.wrapping_mul(0x9E37_79B9) ^ j as u64;
                }
                tx.send_blocking(v).unwrap();
            }
        })
        .unwrap();
    for i in 0..200u64 {
        let v = rx.recv_blocking().unwrap();
        for (j, w) in v.iter().enumerate() {
            assert_eq!(
                *w,
                i.wrapping_mul(0x9E37_79B9) ^ j as u64,
                "value {i} word {j}"
            );
        }
    }
    t.join().unwrap();
}

/// A capacity whose values array cannot exist (2^64 or 2^63 bytes) must not misbehave.
/// It used to be a ring that panicked on the layout overflow; since session 38 a
/// capacity of more than 256 MiB of values buffers in a list of blocks instead, so the
/// channel is made, allocates nothing for its values up front, and says its capacity.
#[test]
fn ring_too_large_for_memory_is_no_ring() {
    // 2^20 slots of 2^44 bytes: 2^64 bytes, which overflows the layout.
    let (tx, _rx) = chan::bounded::<[u8; 1 << 44]>(1 << 20);
    assert_eq!(tx.capacity(), Some(1 << 20));
    // 2^20 slots of 2^43 bytes: 2^63 bytes, above isize::MAX.
    let (tx, _rx) = chan::bounded::<[u8; 1 << 43]>(1 << 20);
    assert_eq!(tx.capacity(), Some(1 << 20));
}

/// A value whose drop panics, left in a channel with others: dropping the channel panics
/// (or not) but never drops a value twice or touches an uninitialised slot.
#[test]
fn ring_drop_with_a_panicking_value_drop() {
    struct Bomb {
        id: usize,
        dropped: Arc<AtomicUsize>,
    }
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
            if self.id == 1 {
                panic!("bomb {} went off", self.id);
            }
        }
    }
    for cap in [1usize, 3, 4, 5] {
        let dropped = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::bounded::<Bomb>(cap);
        // Wrap once so the values straddle the end of the array.
        for id in 100..100 + cap / 2 {
            tx.try_send(Bomb {
                id,
                dropped: dropped.clone(),
            })
            .unwrap();
            drop(rx.try_recv().unwrap());
        }
        let base = dropped.load(Ordering::SeqCst);
        for id in 0..cap {
            tx.try_send(Bomb {
                id,
                dropped: dropped.clone(),
            })
            .unwrap();
        }
        let r = panic::catch_unwind(AssertUnwindSafe(move || drop((tx, rx))));
        let n = dropped.load(Ordering::SeqCst) - base;
        if cap >= 2 {
            assert!(r.is_err(), "cap {cap}: the bomb's panic was swallowed");
        }
        // Values before the bomb and the bomb itself are dropped; the module documents
        // that the ones after it are leaked.
        assert!(n <= cap, "cap {cap}: {n} drops of {cap} values");
        assert!(n >= cap.min(2), "cap {cap}: only {n} drops");
    }
}

/// Many producers and consumers on OS threads over many laps of small rings: every
/// value arrives exactly once, and each consumer sees each producer's values in order.
#[test]
fn ring_mpmc_threads_exactly_once_in_order() {
    const PRODUCERS: usize = 4;
    const CONSUMERS: usize = 4;
    let per = if cfg!(debug_assertions) {
        5_000
    } else {
        50_000
    };
    for cap in [1usize, 2, 3, 7] {
        let live = live();
        let (tx, rx) = chan::bounded::<Tracked>(cap);
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let tx = tx.clone();
                let live = live.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        tx.send_blocking(Tracked::new(p * per + i, &live)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut last = [None::<usize>; PRODUCERS];
                    let mut seen = Vec::new();
                    while let Ok(v) = rx.recv_blocking() {
                        let p = v.id / per;
                        if let Some(l) = last[p] {
                            assert!(v.id > l, "producer {p}'s values out of order");
                        }
                        last[p] = Some(v.id);
                        seen.push(v.id);
                    }
                    seen
                })
            })
            .collect();
        drop(rx);
        let got = common::with_timeout(move || {
            for p in producers {
                p.join().unwrap();
            }
            let mut got: Vec<usize> = Vec::new();
            for c in consumers {
                got.extend(c.join().unwrap());
            }
            got
        });
        let mut got = got;
        got.sort_unstable();
        assert_eq!(got.len(), PRODUCERS * per, "cap {cap}");
        assert!(got.iter().enumerate().all(|(i, &v)| i == v), "cap {cap}");
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }
}

/// Values sent from tasks, fibers and threads, received by fibers, tasks and threads,
/// through rings of capacity 1 and 3 on a 2-worker runtime.
#[test]
fn ring_across_tasks_fibers_threads() {
    let per = if cfg!(debug_assertions) {
        2_000
    } else {
        20_000
    };
    common::with_timeout(move || {
        let rt = common::workers(2);
        let _guard = rt.enter();
        for cap in [1usize, 3] {
            let live = live();
            let (tx, rx) = chan::bounded::<Tracked>(cap);
            let mut senders = Vec::new();
            {
                let (tx, live) = (tx.clone(), live.clone());
                senders.push(rt.spawn(async move {
                    for i in 0..per {
                        tx.send(Tracked::new(i, &live)).await.unwrap();
                    }
                }));
            }
            {
                let (tx, live) = (tx.clone(), live.clone());
                senders.push(weft::fiber::spawn(move || {
                    for i in per..2 * per {
                        tx.send_blocking(Tracked::new(i, &live)).unwrap();
                    }
                }));
            }
            let thread_sender = {
                let (tx, live) = (tx.clone(), live.clone());
                std::thread::spawn(move || {
                    for i in 2 * per..3 * per {
                        tx.send_blocking(Tracked::new(i, &live)).unwrap();
                    }
                })
            };
            drop(tx);
            let rx_task = {
                let rx = rx.clone();
                rt.spawn(async move {
                    let mut ids = Vec::new();
                    while let Ok(v) = rx.recv().await {
                        ids.push(v.id);
                    }
                    ids
                })
            };
            let rx_fiber = {
                let rx = rx.clone();
                weft::fiber::spawn(move || {
                    let mut ids = Vec::new();
                    while let Ok(v) = rx.recv_blocking() {
                        ids.push(v.id);
                    }
                    ids
                })
            };
            let mut ids = Vec::new();
            while let Ok(v) = rx.recv_blocking() {
                ids.push(v.id);
            }
            for s in senders {
                s.join().unwrap();
            }
            thread_sender.join().unwrap();
            ids.extend(rx_task.join().unwrap());
            ids.extend(rx_fiber.join().unwrap());
            ids.sort_unstable();
            assert_eq!(ids, (0..3 * per).collect::<Vec<_>>(), "cap {cap}");
            assert_eq!(live.load(Ordering::SeqCst), 0);
        }
    });
}

/// A channel full of values created on one thread and dropped on another.
#[test]
fn ring_dropped_on_another_thread() {
    let live = live();
    let (tx, rx) = chan::bounded::<Tracked>(5);
    for i in 0..12 {
        tx.try_send(Tracked::new(i, &live)).unwrap();
        if i % 2 == 0 || tx.is_full() {
            drop(rx.try_recv().unwrap());
        }
    }
    assert_eq!(live.load(Ordering::SeqCst), rx.len());
    assert!(rx.len() >= 4);
    std::thread::spawn(move || drop((tx, rx))).join().unwrap();
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

/// `try_send`, `send_timeout`, `recv_timeout` at the edges: a refused value comes back,
/// a timed-out one too, and nothing is dropped or kept behind.
#[test]
fn ring_timeouts_give_values_back() {
    let live = live();
    for cap in [1usize, 2, 3] {
        let (tx, rx) = chan::bounded::<Tracked>(cap);
        assert!(rx
            .recv_timeout(Duration::from_millis(5))
            .unwrap_err()
            .is_timeout());
        for i in 0..cap {
            tx.send_timeout(Tracked::new(i, &live), Duration::from_millis(5))
                .unwrap();
        }
        let back = tx
            .send_timeout(Tracked::new(99, &live), Duration::from_millis(5))
            .unwrap_err();
        assert!(back.is_timeout());
        assert_eq!(back.into_inner().id, 99);
        let back = tx.try_send(Tracked::new(98, &live)).unwrap_err();
        assert!(back.is_full());
        assert_eq!(back.into_inner().id, 98);
        for i in 0..cap {
            assert_eq!(rx.recv_timeout(Duration::from_millis(5)).unwrap().id, i);
        }
        assert!(rx
            .recv_timeout(Duration::from_millis(5))
            .unwrap_err()
            .is_timeout());
        tx.try_send(Tracked::new(7, &live)).unwrap();
        rx.close();
        let back = tx
            .send_timeout(Tracked::new(97, &live), Duration::from_millis(5))
            .unwrap_err();
        assert!(back.is_disconnected());
        assert_eq!(back.into_inner().id, 97);
        // Closed, but the value already in it is still received.
        assert_eq!(rx.try_recv().unwrap().id, 7);
        assert!(rx.try_recv().unwrap_err().is_disconnected());
    }
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

/// A send future parked on a full ring, then dropped at every point of the hand-off:
/// its value is dropped exactly once or received, never both, never lost, and the ring
/// keeps its full capacity afterwards.
#[test]
fn ring_cancelled_send_future_loses_and_keeps_nothing() {
    for cap in [1usize, 2, 3] {
        for make_room_first in [false, true] {
            let live = live();
            let (tx, rx) = chan::bounded::<Tracked>(cap);
            for i in 0..cap {
                tx.try_send(Tracked::new(i, &live)).unwrap();
            }
            {
                let mut fut = pin!(tx.send(Tracked::new(1000, &live)));
                assert!(poll_once(fut.as_mut()).is_pending());
                if make_room_first {
                    // A slot frees while the sender is parked: it may be held for it.
                    assert_eq!(rx.try_recv().unwrap().id, 0);
                }
                // Dropped without being polled again.
            }
            let mut got: Vec<usize> = rx.try_iter().map(|v| v.id).collect();
            let sent_1000 = got.contains(&1000);
            got.retain(|&i| i != 1000);
            let first = usize::from(make_room_first);
            assert_eq!(got, (first..cap).collect::<Vec<_>>());
            assert_eq!(live.load(Ordering::SeqCst), 0, "cap {cap}: a value leaked");
            let _ = sent_1000;
            // The full capacity is still there.
            for i in 0..cap {
                tx.try_send(Tracked::new(i, &live))
                    .unwrap_or_else(|e| panic!("cap {cap}: slot {i} lost ({e:?})"));
            }
            assert!(tx.try_send(Tracked::new(0, &live)).unwrap_err().is_full());
            drop((tx, rx));
            assert_eq!(live.load(Ordering::SeqCst), 0);
        }
    }
}

/// A receive future parked on an empty ring, a value sent (which may be handed straight
/// to it), then the future dropped unpolled: the value must still be receivable.
#[test]
fn ring_cancelled_recv_future_loses_no_value() {
    for cap in [1usize, 2, 5] {
        let live = live();
        let (tx, rx) = chan::bounded::<Tracked>(cap);
        {
            let mut fut = pin!(rx.recv());
            assert!(poll_once(fut.as_mut()).is_pending());
            tx.try_send(Tracked::new(1, &live)).unwrap();
        }
        assert_eq!(
            rx.try_recv().map(|v| v.id).ok(),
            Some(1),
            "cap {cap}: the value sent to a cancelled receive was lost"
        );
        // And with the value arriving through a blocking sender on another thread.
        {
            let mut fut = pin!(rx.recv());
            assert!(poll_once(fut.as_mut()).is_pending());
            let tx2 = tx.clone();
            let l2 = live.clone();
            std::thread::spawn(move || tx2.send_blocking(Tracked::new(2, &l2)).unwrap())
                .join()
                .unwrap();
        }
        assert_eq!(rx.try_recv().map(|v| v.id).ok(), Some(2), "cap {cap}");
        drop((tx, rx));
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }
}

/// Async senders and receivers, cancelled at random by a timeout race, over many laps:
/// the values received plus the values dropped by cancelled sends account for all.
#[test]
fn ring_random_cancellation_accounts_for_every_value() {
    let rounds = if cfg!(debug_assertions) { 300 } else { 3000 };
    common::with_timeout(move || {
        let live = live();
        let (tx, rx) = chan::bounded::<Tracked>(2);
        let created = Arc::new(AtomicUsize::new(0));
        let mut received = 0usize;
        let mut seed = 0x1234_5678_9abc_def1u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..rounds {
            // Some sends that may stay parked and get dropped.
            let n = (rand() % 4) as usize;
            let mut futs: Vec<_> = (0..n)
                .map(|_| {
                    let id = created.fetch_add(1, Ordering::SeqCst);
                    (Box::pin(tx.send(Tracked::new(id, &live))), false)
                })
                .collect();
            for (f, done) in futs.iter_mut() {
                *done = poll_once(f.as_mut()).is_ready();
            }
            // Receives that may park and get dropped.
            let m = (rand() % 4) as usize;
            let mut rfuts: Vec<_> = (0..m).map(|_| Box::pin(rx.recv())).collect();
            for f in rfuts.iter_mut() {
                if let Poll::Ready(Ok(_v)) = poll_once(f.as_mut()) {
                    received += 1;
                }
            }
            // Drop a random prefix of each, poll the rest once more.
            let keep = (rand() % 2) as usize;
            for (f, done) in futs.iter_mut().skip(keep) {
                if !*done {
                    *done = poll_once(f.as_mut()).is_ready();
                }
            }
            drop(rfuts);
            drop(futs);
            if rand() % 3 == 0 {
                while let Ok(_v) = rx.try_recv() {
                    received += 1;
                }
            }
        }
        while let Ok(_v) = rx.try_recv() {
            received += 1;
        }
        assert_eq!(live.load(Ordering::SeqCst), 0, "a value is stuck or leaked");
        assert!(received <= created.load(Ordering::SeqCst));
        // The channel still works at full capacity.
        tx.try_send(Tracked::new(0, &live)).unwrap();
        tx.try_send(Tracked::new(1, &live)).unwrap();
        assert!(tx.try_send(Tracked::new(2, &live)).unwrap_err().is_full());
        drop((tx, rx));
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

/// Select over bounded rings: sends into a full ring are not selected, receives from an
/// empty one neither; the ready operation completes with the right value.
#[test]
fn ring_select_send_and_recv() {
    let live = live();
    let (tx1, rx1) = chan::bounded::<Tracked>(1);
    let (tx2, rx2) = chan::bounded::<Tracked>(2);
    tx1.try_send(Tracked::new(0, &live)).unwrap();
    for round in 0..50usize {
        let mut sel = Select::new();
        let s1 = sel.send(&tx1);
        let r2 = sel.recv(&rx2);
        // tx1 is full and rx2 is empty: nothing is ready.
        assert!(sel.try_select().is_err(), "round {round}");
        drop(sel);
        tx2.try_send(Tracked::new(round + 1, &live)).unwrap();
        let mut sel = Select::new();
        let _s1 = sel.send(&tx1);
        let r2b = sel.recv(&rx2);
        let op = sel.select_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(op.index(), r2b);
        assert_eq!(op.recv(&rx2).unwrap().id, round + 1);
        let _ = (s1, r2);
        // Free tx1's slot; a send select must now take it.
        assert_eq!(
            rx1.try_recv().unwrap().id,
            if round == 0 { 0 } else { round }
        );
        let mut sel = Select::new();
        let s = sel.send(&tx1);
        let op = sel.select_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(op.index(), s);
        op.send(&tx1, Tracked::new(round + 1, &live)).unwrap();
        assert!(tx1.is_full());
    }
    drop((tx1, rx1, tx2, rx2));
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

/// A runtime dropped while tasks and fibers are parked sending to a full ring and
/// receiving from an empty one: every value is dropped exactly once, none is left live.
#[test]
fn ring_runtime_dropped_mid_wait() {
    common::with_timeout(|| {
        for workers in [1usize, 2] {
            let live = live();
            let (tx, rx) = chan::bounded::<Tracked>(2);
            let (etx, erx) = chan::bounded::<Tracked>(3);
            let parked = Arc::new(AtomicUsize::new(0));
            {
                let rt = common::workers(workers);
                let g = rt.enter();
                tx.try_send(Tracked::new(0, &live)).unwrap();
                tx.try_send(Tracked::new(1, &live)).unwrap();
                for i in 0..4 {
                    let (tx, live, parked) = (tx.clone(), live.clone(), parked.clone());
                    drop(rt.spawn(async move {
                        let v = Tracked::new(10 + i, &live);
                        parked.fetch_add(1, Ordering::SeqCst);
                        let _ = tx.send(v).await;
                    }));
                }
                for i in 0..2 {
                    let (tx, live, parked) = (tx.clone(), live.clone(), parked.clone());
                    drop(weft::fiber::spawn(move || {
                        let v = Tracked::new(20 + i, &live);
                        parked.fetch_add(1, Ordering::SeqCst);
                        let _ = tx.send_blocking(v);
                    }));
                }
                for _ in 0..2 {
                    let (erx, parked) = (erx.clone(), parked.clone());
                    drop(rt.spawn(async move {
                        parked.fetch_add(1, Ordering::SeqCst);
                        let _ = erx.recv().await;
                    }));
                }
                common::wait_until("all parked", || {
                    parked.load(Ordering::SeqCst) == 8 && live.load(Ordering::SeqCst) == 8
                });
                drop(g);
                rt.shutdown_timeout(Duration::from_secs(10));
            }
            // The runtime is gone; the ring still holds what it held.
            let mut ids: Vec<usize> = rx.try_iter().map(|v| v.id).collect();
            ids.sort_unstable();
            assert!(ids.starts_with(&[0, 1]), "{ids:?}");
            etx.try_send(Tracked::new(99, &live)).unwrap();
            drop((tx, rx, etx, erx));
            assert_eq!(live.load(Ordering::SeqCst), 0, "workers {workers}");
        }
    });
}

// ---------------------------------------------------------------------------------------
// The stable parallel sort.
// ---------------------------------------------------------------------------------------

/// `(key, original index)` pairs with `distinct` keys.
fn keyed(len: usize, distinct: u64, seed: u64) -> Vec<(u32, u32)> {
    let mut rng = Rng(seed | 1);
    (0..len)
        .map(|i| ((rng.next() % distinct) as u32, i as u32))
        .collect()
}

fn assert_stably_sorted(v: &[(u32, u32)], what: &str) {
    for (i, w) in v.windows(2).enumerate() {
        assert!(
            w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 < w[1].1),
            "{what}: not stably sorted at {i}: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
}

/// Stability on large inputs, from runtimes of 1, 2, 3, 4 and 7 workers and from a
/// plain thread, through all three stable entry points.
#[test]
fn sort_is_stable_on_large_inputs_for_every_worker_count() {
    let len = 150_001;
    for workers in [1usize, 2, 3, 4, 7] {
        on_runtime(workers, move || {
            for (distinct, seed) in [(3u64, 1u64), (1000, 2)] {
                let mut v = keyed(len, distinct, seed + workers as u64);
                v.par_sort_by_key(|p| p.0);
                assert_eq!(v.len(), len);
                assert_stably_sorted(&v, &format!("{workers} workers, by_key"));
                let mut v = keyed(len, distinct, seed);
                v.par_sort_by(|a, b| a.0.cmp(&b.0));
                assert_stably_sorted(&v, &format!("{workers} workers, by"));
            }
            // par_sort on a type ordered by key only.
            #[derive(PartialEq, Eq, Debug)]
            struct K(u32, u32);
            impl PartialOrd for K {
                fn partial_cmp(&self, o: &K) -> Option<CmpOrdering> {
                    Some(self.cmp(o))
                }
            }
            impl Ord for K {
                fn cmp(&self, o: &K) -> CmpOrdering {
                    self.0.cmp(&o.0)
                }
            }
            let mut v: Vec<K> = keyed(len, 7, 9).into_iter().map(|(a, b)| K(a, b)).collect();
            v.par_sort();
            let flat: Vec<(u32, u32)> = v.iter().map(|k| (k.0, k.1)).collect();
            assert_stably_sorted(&flat, &format!("{workers} workers, par_sort"));
        });
    }
    // From a plain thread.
    common::with_timeout(move || {
        let mut v = keyed(len, 5, 3);
        v.par_sort_by_key(|p| p.0);
        assert_stably_sorted(&v, "plain thread");
    });
}

/// Lengths around the leaf and piece boundaries of `leaf_for` for each worker count:
/// 4096 +- 1, 8192 +- 1, `pieces * 4096 +- 1` and `pieces * k +- 1` for larger `k`;
/// inputs random with few keys, sorted with ends swapped, descending, all equal.
#[test]
fn sort_lengths_around_leaf_boundaries_1_2_3_workers() {
    lengths_around_leaf_boundaries(&[1, 2, 3]);
}

#[test]
fn sort_lengths_around_leaf_boundaries_4_7_workers() {
    lengths_around_leaf_boundaries(&[4, 7]);
}

fn lengths_around_leaf_boundaries(worker_counts: &[usize]) {
    for &workers in worker_counts {
        on_runtime(workers, move || {
            let pieces = (workers * 2).next_power_of_two();
            let mut lens = vec![4095usize, 4096, 4097, 8191, 8192, 8193, 12_289];
            for base in [pieces * 4096, pieces * 5000] {
                lens.extend([base - 1, base, base + 1]);
            }
            for len in lens {
                let inputs: Vec<Vec<(u32, u32)>> = vec![
                    keyed(len, 4, len as u64),
                    {
                        let mut v: Vec<(u32, u32)> = (0..len as u32).map(|i| (i / 3, i)).collect();
                        v.swap(0, len - 1);
                        v
                    },
                    (0..len as u32).map(|i| ((len as u32 - i) / 2, i)).collect(),
                    (0..len as u32).map(|i| (0, i)).collect(),
                    // Ascending then descending halves.
                    (0..len as u32)
                        .map(|i| (i.min(len as u32 - i) / 2, i))
                        .collect(),
                ];
                for (k, mut v) in inputs.into_iter().enumerate() {
                    // Stability is relative to the input positions.
                    for (i, p) in v.iter_mut().enumerate() {
                        p.1 = i as u32;
                    }
                    v.par_sort_by_key(|p| p.0);
                    assert_stably_sorted(&v, &format!("{workers} workers, len {len}, input {k}"));
                }
            }
        });
    }
}

/// An element for the panic tests: counts itself live and detects double drops and
/// use of a dropped element.
struct Elem {
    key: u32,
    id: u32,
    t: Tracked,
}

/// Comparators that panic at points spread over the whole sort (in leaves, in merges,
/// in the presorted check, in the parallel merge's binary search): afterwards the slice
/// holds every element exactly once and nothing was dropped.
#[test]
fn sort_panicking_comparator_keeps_a_permutation_1_worker() {
    panicking_comparator_keeps_a_permutation(1);
}

#[test]
fn sort_panicking_comparator_keeps_a_permutation_2_workers() {
    panicking_comparator_keeps_a_permutation(2);
}

#[test]
fn sort_panicking_comparator_keeps_a_permutation_4_workers() {
    panicking_comparator_keeps_a_permutation(4);
}

fn panicking_comparator_keeps_a_permutation(workers: usize) {
    let len = if cfg!(debug_assertions) {
        40_000
    } else {
        200_000
    };
    {
        on_runtime(workers, move || {
            let live = live();
            let mut rng = Rng(77 + workers as u64);
            // Roughly 20 comparisons per element in all.
            let points: Vec<usize> = [0usize, 1, 10, len - 2, len, 2 * len, 5 * len]
                .into_iter()
                .chain((0..8).map(|_| (rng.next() % (20 * len as u64)) as usize))
                .collect();
            let mut v: Vec<Elem> = (0..len)
                .map(|i| Elem {
                    key: (rng.next() % 100) as u32,
                    id: i as u32,
                    t: Tracked::new(i, &live),
                })
                .collect();
            for (k, &at) in points.iter().enumerate() {
                let calls = AtomicUsize::new(0);
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    v.par_sort_by(|a, b| {
                        assert!(a.t.alive && b.t.alive, "compared a dead element");
                        if calls.fetch_add(1, Ordering::Relaxed) == at {
                            panic!("comparison {at} panics");
                        }
                        a.key.cmp(&b.key)
                    })
                }));
                let _ = r;
                assert_eq!(live.load(Ordering::SeqCst), len, "point {k} ({at})");
                let mut ids: Vec<u32> = v.iter().map(|e| e.id).collect();
                ids.sort_unstable();
                assert!(
                    ids.iter().enumerate().all(|(i, &id)| i as u32 == id),
                    "{workers} workers, panic at {at}: not a permutation"
                );
                assert!(v.iter().all(|e| e.t.alive));
                // Shuffle a little for the next round.
                for i in 0..len / 10 {
                    let j = (rng.next() % len as u64) as usize;
                    v.swap(i, j);
                }
            }
            // A complete sort at the end is still stable.
            for (i, e) in v.iter_mut().enumerate() {
                e.id = i as u32;
            }
            v.par_sort_by_key(|e| e.key);
            for w in v.windows(2) {
                assert!(w[0].key < w[1].key || (w[0].key == w[1].key && w[0].id < w[1].id));
            }
            drop(v);
            assert_eq!(live.load(Ordering::SeqCst), 0);
        });
    }
}

type ElemCmp<'a> = dyn Fn(&Elem, &Elem) -> CmpOrdering + Sync + 'a;

/// Inconsistent comparators (random answers, "always less", "always greater"): any
/// order may come out, but every element exactly once, and no hang.
#[test]
fn sort_inconsistent_comparator_is_safe() {
    let len = if cfg!(debug_assertions) {
        30_000
    } else {
        200_000
    };
    for workers in [1usize, 3, 4] {
        on_runtime(workers, move || {
            let live = live();
            let mut v: Vec<Elem> = (0..len)
                .map(|i| Elem {
                    key: (i % 1000) as u32,
                    id: i as u32,
                    t: Tracked::new(i, &live),
                })
                .collect();
            let state = AtomicUsize::new(12345);
            let cmps: [&ElemCmp; 4] = [
                &|a, b| {
                    let s = state.fetch_add(0x9E37_79B9, Ordering::Relaxed);
                    let h = (s ^ (a.id as usize).wrapping_mul(31) ^ b.id as usize) >> 3;
                    [CmpOrdering::Less, CmpOrdering::Equal, CmpOrdering::Greater][h % 3]
                },
                &|_, _| CmpOrdering::Less,
                &|_, _| CmpOrdering::Greater,
                // Not transitive: keys compared modulo a cycle.
                &|a, b| match (a.key + 1000 - b.key) % 1000 {
                    0 => CmpOrdering::Equal,
                    d if d < 500 => CmpOrdering::Greater,
                    _ => CmpOrdering::Less,
                },
            ];
            for (k, cmp) in cmps.iter().enumerate() {
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    v.par_sort_by(|a, b| {
                        assert!(a.t.alive && b.t.alive);
                        cmp(a, b)
                    })
                }));
                // The standard sort may panic on a detected non-total order; fine.
                let _ = r;
                let mut ids: Vec<u32> = v.iter().map(|e| e.id).collect();
                ids.sort_unstable();
                assert!(
                    ids.iter().enumerate().all(|(i, &id)| i as u32 == id),
                    "{workers} workers, comparator {k}: not a permutation"
                );
                assert_eq!(live.load(Ordering::SeqCst), len);
            }
            drop(v);
            assert_eq!(live.load(Ordering::SeqCst), 0);
        });
    }
}

/// Zero-sized elements, with and without a destructor, through the stable sort.
#[test]
fn sort_zero_sized_elements() {
    on_runtime(4, || {
        let mut v = [(); 100_000];
        v.par_sort();
        v.par_sort_by(|_, _| CmpOrdering::Greater);
        assert_eq!(v.len(), 100_000);

        let before = ZST_LIVE[1].load(Ordering::SeqCst);
        let mut z: Vec<Zst<1>> = (0..50_000).map(|_| Zst::new()).collect();
        let calls = AtomicUsize::new(0);
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            z.par_sort_by(|_, _| {
                if calls.fetch_add(1, Ordering::Relaxed) == 1000 {
                    panic!("zst comparison panics");
                }
                CmpOrdering::Less
            })
        }));
        let _ = r;
        assert_eq!(z.len(), 50_000);
        assert_eq!(ZST_LIVE[1].load(Ordering::SeqCst), before + 50_000);
        drop(z);
        assert_eq!(ZST_LIVE[1].load(Ordering::SeqCst), before);
    });
}

/// Sorts nested inside joins (both arms sorting, in further joins) and inside fibers,
/// all on one 3-worker runtime: each result sorted and stable.
#[test]
fn sort_inside_nested_joins_and_fibers() {
    let len = 60_000;
    common::with_timeout(move || {
        let rt = common::workers(3);
        let _g = rt.enter();
        let task = rt.spawn(async move {
            let mut vs: Vec<Vec<(u32, u32)>> = (0..4).map(|s| keyed(len, 50, s)).collect();
            let (a, b) = vs.split_at_mut(2);
            let (a0, a1) = a.split_at_mut(1);
            let (b0, b1) = b.split_at_mut(1);
            weft::join(
                || {
                    weft::join(
                        || a0[0].par_sort_by_key(|p| p.0),
                        || a1[0].par_sort_by_key(|p| p.0),
                    )
                },
                || {
                    weft::join(
                        || b0[0].par_sort_by(|x, y| x.0.cmp(&y.0)),
                        || {
                            weft::scope(|s| {
                                s.spawn(|_| b1[0].par_sort_by_key(|p| p.0));
                            })
                        },
                    )
                },
            );
            vs
        });
        let fibers: Vec<_> = (0..3)
            .map(|s| {
                weft::fiber::spawn(move || {
                    let mut v = keyed(len, 20, 100 + s);
                    v.par_sort_by_key(|p| p.0);
                    v
                })
            })
            .collect();
        for (k, v) in task.join().unwrap().iter().enumerate() {
            assert_stably_sorted(v, &format!("join arm {k}"));
        }
        for (k, f) in fibers.into_iter().enumerate() {
            assert_stably_sorted(&f.join().unwrap(), &format!("fiber {k}"));
        }
    });
}

/// Over-aligned values through small rings: each arrives intact (the values array is
/// allocated with the element's alignment).
#[test]
fn ring_of_over_aligned_values() {
    #[repr(align(256))]
    #[derive(Clone, Copy)]
    struct Aligned(u64, [u8; 8]);
    for cap in [1usize, 2, 3, 5] {
        let (tx, rx) = chan::bounded::<Aligned>(cap);
        let t = std::thread::spawn(move || {
            for i in 0..2000u64 {
                tx.send_blocking(Aligned(i, [i as u8; 8])).unwrap();
            }
        });
        for i in 0..2000u64 {
            let v = rx.recv_blocking().unwrap();
            assert_eq!((&v as *const Aligned as usize) % 256, 0);
            assert_eq!((v.0, v.1), (i, [i as u8; 8]));
        }
        t.join().unwrap();
    }
}

/// The largest ring (`2^20` slots): filled to the brim, drained in order past the wrap.
#[test]
fn ring_of_the_largest_capacity() {
    const CAP: usize = 1 << 20;
    let (tx, rx) = chan::bounded::<u32>(CAP);
    assert_eq!(tx.capacity(), Some(CAP));
    for i in 0..CAP as u32 {
        tx.try_send(i).unwrap();
    }
    assert!(tx.try_send(0).unwrap_err().is_full());
    for i in 0..(CAP / 2) as u32 {
        assert_eq!(rx.try_recv().unwrap(), i);
    }
    for i in CAP as u32..(CAP + CAP / 2) as u32 {
        tx.try_send(i).unwrap();
    }
    assert!(tx.is_full());
    for i in (CAP / 2) as u32..(CAP + CAP / 2) as u32 {
        assert_eq!(rx.try_recv().unwrap(), i);
    }
    assert!(rx.try_recv().unwrap_err().is_empty());
}

/// Comparators that panic on every call from some point on, so that both arms of
/// joins and both halves of split merges unwind at once: still a permutation, nothing
/// dropped or duplicated.
#[test]
fn sort_comparator_panicking_everywhere_at_once() {
    let len = if cfg!(debug_assertions) {
        40_000
    } else {
        200_000
    };
    for workers in [2usize, 4, 7] {
        on_runtime(workers, move || {
            let live = live();
            let mut rng = Rng(5 + workers as u64);
            let mut v: Vec<Elem> = (0..len)
                .map(|i| Elem {
                    key: (rng.next() % 1000) as u32,
                    id: i as u32,
                    t: Tracked::new(i, &live),
                })
                .collect();
            for from in [0usize, 3 * len, 6 * len, 9 * len, 12 * len] {
                let calls = AtomicUsize::new(0);
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    v.par_sort_by(|a, b| {
                        assert!(a.t.alive && b.t.alive, "compared a dead element");
                        if calls.fetch_add(1, Ordering::Relaxed) >= from {
                            panic!("comparison panics from {from} on");
                        }
                        a.key.cmp(&b.key)
                    })
                }));
                let _ = r;
                let mut ids: Vec<u32> = v.iter().map(|e| e.id).collect();
                ids.sort_unstable();
                assert!(
                    ids.iter().enumerate().all(|(i, &id)| i as u32 == id),
                    "{workers} workers, panics from {from}: not a permutation"
                );
                assert_eq!(live.load(Ordering::SeqCst), len);
                for i in 0..len / 4 {
                    let j = (rng.next() % len as u64) as usize;
                    v.swap(i, j);
                }
            }
            drop(v);
            assert_eq!(live.load(Ordering::SeqCst), 0);
        });
    }
}

/// Elements that are `Send` but not `Sync`, mutated by the comparator through a `Cell`:
/// no element is ever compared on two threads at once (else increments would be lost,
/// or worse), and every mutation survives the moves of the merge.
#[test]
fn sort_comparator_mutating_non_sync_elements() {
    struct C {
        key: u32,
        idx: u32,
        seen: std::cell::Cell<u64>,
    }
    let len = if cfg!(debug_assertions) {
        60_000
    } else {
        400_000
    };
    for workers in [2usize, 4] {
        on_runtime(workers, move || {
            let mut rng = Rng(11);
            let mut v: Vec<C> = (0..len)
                .map(|i| C {
                    key: (rng.next() % 500) as u32,
                    idx: i as u32,
                    seen: std::cell::Cell::new(0),
                })
                .collect();
            let calls = AtomicUsize::new(0);
            v.par_sort_by(|a, b| {
                calls.fetch_add(1, Ordering::Relaxed);
                a.seen.set(a.seen.get() + 1);
                b.seen.set(b.seen.get() + 1);
                a.key.cmp(&b.key)
            });
            let total: u64 = v.iter().map(|c| c.seen.get()).sum();
            assert_eq!(total, 2 * calls.load(Ordering::Relaxed) as u64);
            for w in v.windows(2) {
                assert!(w[0].key < w[1].key || (w[0].key == w[1].key && w[0].idx < w[1].idx));
            }
        });
    }
}

/// Sorts in flight, from a task on the runtime and from a plain thread that entered its
/// handle, while the runtime shuts down: each sort finishes (no hang) with a stably
/// sorted result, from the workers or inline.
#[test]
fn sort_while_the_runtime_shuts_down() {
    common::with_timeout(|| {
        for workers in [1usize, 3] {
            let rt = common::workers(workers);
            let handle = rt.handle().clone();
            let started = Arc::new(AtomicUsize::new(0));
            let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<usize, String>>();
            let sorter = |started: Arc<AtomicUsize>, done: std::sync::mpsc::Sender<_>| {
                move || {
                    let mut rounds = 0;
                    let mut result = Ok(0);
                    for seed in 0..3u64 {
                        let mut v = keyed(100_000, 100, seed + 1);
                        started.fetch_add(1, Ordering::SeqCst);
                        v.par_sort_by_key(|p| p.0);
                        let ok = v
                            .windows(2)
                            .all(|w| w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 < w[1].1));
                        if !ok {
                            result = Err(format!("round {seed} not stably sorted"));
                            break;
                        }
                        rounds += 1;
                        result = Ok(rounds);
                    }
                    let _ = done.send(result);
                }
            };
            let f = sorter(started.clone(), done_tx.clone());
            drop(rt.spawn(async move { f() }));
            let f = sorter(started.clone(), done_tx.clone());
            let h = handle.clone();
            let thread = std::thread::spawn(move || {
                let _g = h.enter();
                f()
            });
            drop(done_tx);
            common::wait_until("both sorters started", || {
                started.load(Ordering::SeqCst) >= 2
            });
            rt.shutdown_timeout(Duration::from_secs(20));
            thread.join().unwrap();
            // The plain thread always reports; the task reports unless it was dropped
            // unpolled at shutdown (it had started, so it ran to its end).
            let results: Vec<_> = done_rx.iter().collect();
            assert!(!results.is_empty(), "workers {workers}");
            for r in results {
                r.unwrap_or_else(|e| panic!("workers {workers}: {e}"));
            }
        }
    });
}

/// Small enough for Miri (`cargo +nightly miri test -p weft --test review_ring_sort
/// ring_small_`), which checks that no slot of the uninitialised values array is read
/// or dropped before it is written: fill, wrap, close, drop while holding values, on one
/// thread and across two, for small, odd and zero-sized values.
#[test]
fn ring_small_lifecycle_for_miri() {
    for cap in [1usize, 2, 3, 5] {
        for left in [0, 1, cap] {
            let live = live();
            let (tx, rx) = chan::bounded::<Tracked>(cap);
            let mut next = 0;
            for _ in 0..2 * cap + 1 {
                tx.try_send(Tracked::new(next, &live)).unwrap();
                next += 1;
                drop(rx.try_recv().unwrap());
            }
            for _ in 0..left {
                tx.try_send(Tracked::new(next, &live)).unwrap();
                next += 1;
            }
            if left == 1 {
                tx.close();
            }
            drop((tx, rx));
            assert_eq!(live.load(Ordering::SeqCst), 0, "cap {cap} left {left}");
        }
    }
    let (tx, rx) = chan::bounded::<(u8, u16, String)>(3);
    let t = std::thread::spawn(move || {
        for i in 0..20u8 {
            tx.send_blocking((i, 7, i.to_string())).unwrap();
        }
    });
    for i in 0..20u8 {
        assert_eq!(rx.recv_blocking().unwrap(), (i, 7, i.to_string()));
    }
    t.join().unwrap();
    let before = ZST_LIVE[2].load(Ordering::SeqCst);
    let (tx, rx) = chan::bounded::<Zst<2>>(2);
    tx.try_send(Zst::new()).unwrap();
    drop(rx.try_recv().unwrap());
    tx.try_send(Zst::new()).unwrap();
    tx.try_send(Zst::new()).unwrap();
    drop((tx, rx));
    assert_eq!(ZST_LIVE[2].load(Ordering::SeqCst), before);
}

/// 8193 elements from a plain thread (the global runtime) take the split path at every
/// level (leaves of 2048/2049/4096 elements, a parallel merge above `MERGE_SEQUENTIAL`),
/// sorted stably; then a comparison panics in the merges and the slice still holds each
/// element once. (Not under Miri: the runtime's workers call `sigaltstack`.)
#[test]
#[cfg_attr(
    miri,
    ignore = "the runtime's workers call sigaltstack, unsupported by Miri"
)]
fn sort_small_split_paths_panic_in_merge() {
    let len = 8193;
    let mut v = keyed(len, 16, 42);
    v.par_sort_by_key(|p| p.0);
    assert_stably_sorted(&v, "plain thread, 8193");
    let live = live();
    let mut v: Vec<Elem> = keyed(len, 16, 43)
        .into_iter()
        .map(|(key, id)| Elem {
            key,
            id,
            t: Tracked::new(id as usize, &live),
        })
        .collect();
    // Count the comparisons of the same sort, and panic near its end: in the merges.
    let total = AtomicUsize::new(0);
    keyed(len, 16, 43).par_sort_by(|a, b| {
        total.fetch_add(1, Ordering::Relaxed);
        a.0.cmp(&b.0)
    });
    let at = total.into_inner() * 19 / 20;
    let calls = AtomicUsize::new(0);
    let r = panic::catch_unwind(AssertUnwindSafe(|| {
        v.par_sort_by(|a, b| {
            assert!(a.t.alive && b.t.alive);
            if calls.fetch_add(1, Ordering::Relaxed) == at {
                panic!("comparison {at} panics");
            }
            a.key.cmp(&b.key)
        })
    }));
    assert!(r.is_err(), "comparison {at} did not panic");
    let mut ids: Vec<u32> = v.iter().map(|e| e.id).collect();
    ids.sort_unstable();
    assert!(ids.iter().enumerate().all(|(i, &id)| i as u32 == id));
    assert_eq!(live.load(Ordering::SeqCst), len);
    drop(v);
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

/// Stable sorts inside fibers with small stacks (64 KiB): the large leaves are sorted by
/// the standard sort on the fiber's stack, the joins add frames; no overflow, and the
/// result is stable.
#[test]
fn sort_inside_small_stack_fibers() {
    common::with_timeout(|| {
        let rt = common::workers(2);
        let _g = rt.enter();
        let fibers: Vec<_> = (0..3u64)
            .map(|s| {
                weft::fiber::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let mut v = keyed(50_000, 30, 200 + s);
                        v.par_sort_by_key(|p| p.0);
                        v
                    })
            })
            .collect();
        for (k, f) in fibers.into_iter().enumerate() {
            assert_stably_sorted(&f.join().unwrap(), &format!("fiber {k}"));
        }
    });
}
