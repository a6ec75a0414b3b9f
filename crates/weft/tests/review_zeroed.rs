//! Adversarial review of `base::zeroed::ZeroedWords` (the ring's stamps: an anonymous
//! mapping from 1 MiB of stamps up, i.e. 2^17 slots on 64-bit targets, a zeroed box
//! below) from safe code only, through `weft::chan::bounded`.
//!
//! What could go wrong: a mapping made for a length in bytes and used for a length in
//! words (or the other way round), a mapping that is never unmapped or unmapped twice, a
//! box freed as a mapping, stamps that do not read as zero in the pages past the first,
//! values left in a mapped ring that are dropped twice or not at all.

mod common;

use common::{live, Tracked};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use weft::chan::{self, TryRecvError, TrySendError};

/// The first capacity whose stamps are mapped (1 MiB of words).
const MAPPED: usize = (1 << 20) / std::mem::size_of::<usize>();
/// The channel's largest ring; one more buffers in a list.
const RING_MAX: usize = 1 << 20;

/// A field of /proc/self/status in kB.
fn status_kb(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn maps_lines() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

/// Fills the channel to exactly `cap`, checks `Full`, drains in order.
fn fill_and_drain(cap: usize) {
    let (tx, rx) = chan::bounded::<u32>(cap);
    assert_eq!(tx.capacity(), Some(cap));
    for i in 0..cap {
        tx.try_send(i as u32)
            .unwrap_or_else(|e| panic!("cap {cap}: send {i}: {e:?}"));
    }
    assert!(tx.is_full(), "cap {cap}");
    assert_eq!(rx.len(), cap);
    assert!(
        matches!(tx.try_send(u32::MAX), Err(TrySendError::Full(_))),
        "cap {cap}: a value past the capacity was accepted"
    );
    for i in 0..cap {
        assert_eq!(rx.try_recv().unwrap(), i as u32, "cap {cap}");
    }
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
}

/// Just below, at, and just above the mapping threshold, each slot (including the one
/// whose stamp is the first word past 1 MiB) starts free and takes exactly one value.
#[test]
fn capacities_around_the_mapping_threshold_fill_exactly() {
    for cap in [MAPPED - 1, MAPPED, MAPPED + 1] {
        fill_and_drain(cap);
    }
}

/// Goes round a mapped ring twice and a half with the ring kept part-full, so every stamp
/// (the last page's too) moves through several laps; order is kept and nothing is lost.
#[test]
fn mapped_rings_wrap_around_in_order() {
    for cap in [MAPPED + 1, MAPPED + 4093] {
        let (tx, rx) = chan::bounded::<u32>(cap);
        let mut next = 0u32;
        let mut expect = 0u32;
        // Keep about a third of the ring full while it goes round.
        for _ in 0..cap / 3 {
            tx.try_send(next).unwrap();
            next += 1;
        }
        let total = (cap * 5 / 2) as u32;
        while next < total {
            tx.try_send(next).unwrap();
            next += 1;
            assert_eq!(rx.try_recv().unwrap(), expect);
            expect += 1;
        }
        // Fill to the brim after the wraps: exactly `cap` values fit.
        while !tx.is_full() {
            tx.try_send(next).unwrap();
            next += 1;
        }
        assert_eq!((next - expect) as usize, cap);
        assert!(matches!(tx.try_send(0), Err(TrySendError::Full(_))));
        while let Ok(v) = rx.try_recv() {
            assert_eq!(v, expect);
            expect += 1;
        }
        assert_eq!(expect, next);
    }
}

/// The largest ring (8 MiB of mapped stamps) holds exactly 2^20 values; one more slot
/// goes to the list flavour, which is bounded all the same.
#[test]
fn the_largest_ring_and_the_first_list() {
    let (tx, rx) = chan::bounded::<()>(RING_MAX);
    for _ in 0..RING_MAX {
        tx.try_send(()).unwrap();
    }
    assert!(matches!(tx.try_send(()), Err(TrySendError::Full(_))));
    assert_eq!(rx.len(), RING_MAX);
    // Free one slot, far from the start, and refill it: the last stamp page works.
    rx.try_recv().unwrap();
    tx.try_send(()).unwrap();
    assert!(matches!(tx.try_send(()), Err(TrySendError::Full(_))));
    drop((tx, rx));

    let (tx, rx) = chan::bounded::<u8>(RING_MAX + 1);
    assert_eq!(tx.capacity(), Some(RING_MAX + 1));
    for i in 0..1000u32 {
        tx.try_send(i as u8).unwrap();
    }
    for i in 0..1000u32 {
        assert_eq!(rx.try_recv().unwrap(), i as u8);
    }
}

/// The tests that compare VmSize before and after run one at a time: each would see the
/// other's channels (alive for a moment) as growth.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Values of [`mapped_rings_made_and_dropped_on_many_threads_leak_no_mapping`] alive.
static ZST_LIVE: AtomicUsize = AtomicUsize::new(0);

/// A zero-sized value with `Drop`: its ring's values take no memory, so the channel's
/// only large block is its mapped stamps, and VmSize measures exactly those.
struct Zst;

impl Zst {
    fn new() -> Zst {
        ZST_LIVE.fetch_add(1, Ordering::SeqCst);
        Zst
    }
}

impl Drop for Zst {
    fn drop(&mut self) {
        ZST_LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Many mapped rings made and dropped from several threads, half of them dropped on
/// another thread, some holding values: no mapping is left behind. A leak would be 8 or
/// 1 MiB of address space per channel (about 5 GiB here), far above the noise (glibc's
/// per-thread arenas, a few hundred MiB at most). The values are zero-sized so that no
/// allocator's retention of freed blocks (valgrind's keeps GiBs of them) is measured.
#[test]
fn mapped_rings_made_and_dropped_on_many_threads_leak_no_mapping() {
    let _m = measuring();
    common::with_timeout(|| {
        const THREADS: usize = 4;
        const PER_THREAD: usize = 300;
        let vm_before = status_kb("VmSize:");
        let maps_before = maps_lines();
        // Bounded, so that few channels wait to be dropped at any moment.
        let (graveyard_tx, graveyard_rx) =
            std::sync::mpsc::sync_channel::<(chan::Sender<Zst>, chan::Receiver<Zst>)>(4);
        // Drops on its own thread whatever the makers send it.
        let undertaker = std::thread::spawn(move || {
            let mut n = 0;
            for pair in graveyard_rx {
                drop(pair);
                n += 1;
            }
            n
        });
        let makers: Vec<_> = (0..THREADS)
            .map(|_| {
                let graveyard_tx = graveyard_tx.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        // Alternate the largest ring and the smallest mapped one.
                        let cap = if i % 2 == 0 { RING_MAX } else { MAPPED };
                        let (tx, rx) = chan::bounded::<Zst>(cap);
                        for _ in 0..i % 4 {
                            tx.try_send(Zst::new()).unwrap();
                        }
                        if i % 4 != 0 {
                            drop(rx.try_recv().unwrap());
                        }
                        if i % 2 == 0 {
                            graveyard_tx.send((tx, rx)).unwrap();
                        }
                    }
                })
            })
            .collect();
        drop(graveyard_tx);
        for m in makers {
            m.join().unwrap();
        }
        assert_eq!(undertaker.join().unwrap(), THREADS * PER_THREAD / 2);
        assert_eq!(ZST_LIVE.load(Ordering::SeqCst), 0, "values left undropped");
        let vm_after = status_kb("VmSize:");
        let maps_after = maps_lines();
        let grown_mib = vm_after.saturating_sub(vm_before) / 1024;
        assert!(
            grown_mib < 2048,
            "VmSize grew by {grown_mib} MiB after {} mapped channels were dropped",
            THREADS * PER_THREAD
        );
        // Adjacent anonymous mappings may merge, so lines are a weaker check.
        assert!(
            maps_after < maps_before + 600,
            "/proc/self/maps: {maps_before} -> {maps_after} lines"
        );
    });
}

/// A mapped ring full of values with `Drop`, after a wrap, with its two ends dropped on
/// two other threads at once: every value left is dropped exactly once.
#[test]
fn a_full_mapped_ring_dropped_on_other_threads_drops_each_value_once() {
    common::with_timeout(|| {
        let live = live();
        let cap = MAPPED + 3;
        let (tx, rx) = chan::bounded::<Tracked>(cap);
        // Wrap once: fill, drain half, fill again.
        for i in 0..cap {
            tx.try_send(Tracked::new(i, &live)).unwrap();
        }
        for i in 0..cap / 2 {
            assert_eq!(rx.try_recv().unwrap().id, i);
        }
        for i in cap..cap + cap / 2 {
            tx.try_send(Tracked::new(i, &live)).unwrap();
        }
        assert!(tx.is_full());
        assert_eq!(live.load(Ordering::SeqCst), cap);
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let b = barrier.clone();
        let a = std::thread::spawn(move || {
            b.wait();
            drop(tx);
        });
        let b = barrier.clone();
        let r = std::thread::spawn(move || {
            b.wait();
            drop(rx);
        });
        a.join().unwrap();
        r.join().unwrap();
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

/// Several producers and consumers on threads through a mapped ring that wraps: every
/// value arrives once, each producer's values in order.
#[test]
fn mpmc_threads_through_a_mapped_ring() {
    common::with_timeout(|| {
        const PRODUCERS: usize = 3;
        const PER: usize = 60_000;
        let (tx, rx) = chan::bounded::<(usize, usize)>(MAPPED + 1);
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        tx.send_blocking((p, i)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut last = [None::<usize>; PRODUCERS];
                    let mut n = 0;
                    while let Ok((p, i)) = rx.recv_blocking() {
                        if let Some(l) = last[p] {
                            assert!(i > l, "producer {p}: {i} after {l}");
                        }
                        last[p] = Some(i);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        drop(rx);
        for p in producers {
            p.join().unwrap();
        }
        let n: usize = consumers.into_iter().map(|c| c.join().unwrap()).sum();
        assert_eq!(n, PRODUCERS * PER);
    });
}

/// The runtime is dropped while its tasks wait to send into a full mapped ring and to
/// receive from an empty one; then the channels go. Every value (in the ring, or held by
/// a send that never completed) is dropped exactly once.
#[test]
fn runtime_dropped_mid_wait_on_mapped_rings() {
    common::with_timeout(|| {
        let live = live();
        let cap = MAPPED;
        let (full_tx, full_rx) = chan::bounded::<Tracked>(cap);
        let (empty_tx, empty_rx) = chan::bounded::<Tracked>(RING_MAX);
        for i in 0..cap {
            full_tx.try_send(Tracked::new(i, &live)).unwrap();
        }
        let rt = common::workers(2);
        let waiting = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        for k in 0..4 {
            let tx = full_tx.clone();
            let v = Tracked::new(cap + k, &live);
            let w = waiting.clone();
            handles.push(rt.spawn(async move {
                w.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(v).await;
            }));
            let rx = empty_rx.clone();
            let w = waiting.clone();
            handles.push(rt.spawn(async move {
                w.fetch_add(1, Ordering::SeqCst);
                let _ = rx.recv().await;
            }));
        }
        common::wait_until("all tasks started", || waiting.load(Ordering::SeqCst) == 8);
        assert_eq!(live.load(Ordering::SeqCst), cap + 4);
        drop(rt);
        drop(handles);
        // The ring itself still holds its values until the channel goes.
        assert!(full_tx.is_full());
        drop((full_tx, full_rx, empty_tx, empty_rx));
        assert_eq!(live.load(Ordering::SeqCst), 0, "values leaked");
    });
}

/// Small capacities (boxed stamps) keep working next to mapped ones, including the
/// smallest ring.
#[test]
fn boxed_and_mapped_rings_side_by_side() {
    let small: Vec<_> = [1usize, 2, 3, 4096, MAPPED - 1]
        .iter()
        .map(|&c| (c, chan::bounded::<usize>(c)))
        .collect();
    let big = chan::bounded::<usize>(MAPPED);
    for (c, (tx, _)) in &small {
        tx.try_send(*c).unwrap();
        big.0.try_send(*c).unwrap();
    }
    for (c, (_, rx)) in &small {
        assert_eq!(rx.try_recv().unwrap(), *c);
        assert_eq!(big.1.try_recv().unwrap(), *c);
    }
}

/// The ring mapped its stamps before it allocated its values, and a value type so
/// large that the values' length overflowed made `bounded` panic after the mapping
/// existed (the unwinding had to unmap it). Since session 38 a ring holds at most 256
/// MiB of values and such a capacity buffers in a list: `bounded` succeeds, and 120 of
/// them, made and dropped, leave no address space behind (a leaked mapping of stamps
/// would be 960 MiB, far above the noise of the other tests running alongside).
#[test]
fn huge_values_make_no_ring_and_leave_no_mapping() {
    // 2^44 bytes a value times 2^20 values would overflow a 64-bit length.
    type Huge = [u8; 1 << 44];
    let _m = measuring();
    let vm_before = status_kb("VmSize:");
    for _ in 0..120 {
        let (tx, rx) = chan::bounded::<Huge>(RING_MAX);
        assert_eq!(tx.capacity(), Some(RING_MAX));
        drop((tx, rx));
    }
    let grown_mib = status_kb("VmSize:").saturating_sub(vm_before) / 1024;
    assert!(grown_mib < 512, "VmSize grew by {grown_mib} MiB");
}
