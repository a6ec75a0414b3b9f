//! Adversarial review of the bounded channel's ring after slots became joint (a stamp
//! and a small value side by side, `size_of::<Slot<T>>() <= 64`, the whole slot array
//! zeroed through `Zeroed<Slot<T>>`: boxed below 1 MiB, mapped from 1 MiB up, faulted
//! in at creation up to 8 MiB) or split (stamps apart, values uninitialised), from safe
//! code only: `weft::chan::bounded` with values of many shapes and capacities on both
//! sides of every threshold.
//!
//! What could go wrong: a value written over its neighbour's stamp (or the other way
//! round) when they share a line, a slot array of the wrong length or alignment (the
//! mapping is page-aligned; the box takes `Slot<T>`'s alignment), a value torn, lost,
//! duplicated, dropped twice or never (also when the array is a mapping, and when the
//! channel goes on another thread), a `len`/`is_full`/`is_empty` that disagrees with
//! what was sent, the populate advice changing bytes of a boxed array's neighbours.
//!
//! Every value with `Drop` here records its drop in a [`Ledger`] (one counter per id),
//! so a double drop is caught at the drop and a missing one at the end.

mod common;

use std::cell::{Cell, UnsafeCell};
use std::mem::{align_of, size_of, MaybeUninit};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft::chan::{self, TryRecvError, TrySendError};

/// The channel's largest ring; larger capacities buffer in a list.
const RING_MAX: usize = 1 << 20;
/// Slot arrays of at least this many bytes are mapped (`base::zeroed::MAP_AT`).
const MAP_AT: usize = 1 << 20;
/// Joint slot arrays up to this many bytes are populated at creation.
const POPULATE_MAX: usize = 8 << 20;
/// The prefault minimum (`ring::PREFAULT_MIN_BYTES`), in the ring's estimate of a slot
/// (`size_of::<T>() + 8`).
const PREFAULT_MIN: usize = 256 << 10;

/// The shape of the ring's `Slot<T>` (a stamp word and a `MaybeUninit<T>` in an
/// `UnsafeCell`); with two fields the size does not depend on their order.
#[allow(dead_code)]
struct SlotMirror<T> {
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Whether values of `T` share a slot with their stamp (`Ring::<T>::JOINT`).
fn joint<T>() -> bool {
    size_of::<SlotMirror<T>>() <= 64
}

/// The capacities just below, at and above each threshold of `T`'s layout, that a
/// channel can have as a ring.
fn thresholds<T>() -> Vec<usize> {
    let slot = size_of::<SlotMirror<T>>();
    let estimate = size_of::<T>() + size_of::<usize>();
    let mut edges = vec![PREFAULT_MIN.div_ceil(estimate)];
    if joint::<T>() {
        edges.push(MAP_AT.div_ceil(slot));
        edges.push(POPULATE_MAX / slot);
    } else {
        // The stamps are mapped from 2^17 slots.
        edges.push(MAP_AT / size_of::<usize>());
    }
    let mut caps: Vec<usize> = edges
        .iter()
        .flat_map(|&e| [e - 1, e, e + 1])
        .filter(|&c| (1..=RING_MAX).contains(&c))
        .collect();
    caps.sort_unstable();
    caps.dedup();
    caps
}

/// One counter per value id: a drop adds one, and a second drop of the same id fails
/// at once.
struct Ledger {
    drops: Vec<AtomicU8>,
    made: AtomicUsize,
}

impl Ledger {
    fn new(ids: usize) -> Arc<Ledger> {
        Arc::new(Ledger {
            drops: (0..ids).map(|_| AtomicU8::new(0)).collect(),
            made: AtomicUsize::new(0),
        })
    }

    fn made(&self) -> usize {
        self.made.load(SeqCst)
    }

    fn dropped(&self) -> usize {
        self.drops.iter().filter(|d| d.load(SeqCst) != 0).count()
    }

    fn drop_id(&self, id: usize) {
        let before = self.drops[id].fetch_add(1, SeqCst);
        assert_eq!(before, 0, "value {id} dropped twice");
    }

    /// Every value made has been dropped exactly once (double drops fail earlier).
    fn assert_all_dropped(&self, what: &str) {
        let made = self.made();
        let dropped = self.dropped();
        assert_eq!(
            dropped, made,
            "{what}: {made} values made, {dropped} dropped"
        );
    }
}

/// A value the tests can make, identify, and check for tearing.
trait Probe: Send + 'static + Sized {
    fn make(id: usize, ledger: &Arc<Ledger>) -> Self;
    /// The id, after checking that every byte still says so.
    fn id(&self) -> usize;
}

/// `id`, a ledger, and `PAD` bytes derived from the id: 16 + `PAD` bytes, aligned to 8.
struct Padded<const PAD: usize> {
    id: usize,
    ledger: Arc<Ledger>,
    pad: [u8; PAD],
}

fn pattern(id: usize, i: usize) -> u8 {
    (id.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8
}

impl<const PAD: usize> Probe for Padded<PAD> {
    fn make(id: usize, ledger: &Arc<Ledger>) -> Self {
        ledger.made.fetch_add(1, SeqCst);
        Padded {
            id,
            ledger: ledger.clone(),
            pad: std::array::from_fn(|i| pattern(id, i)),
        }
    }

    fn id(&self) -> usize {
        for (i, b) in self.pad.iter().enumerate() {
            assert_eq!(*b, pattern(self.id, i), "value {}: byte {i} torn", self.id);
        }
        self.id
    }
}

impl<const PAD: usize> Drop for Padded<PAD> {
    fn drop(&mut self) {
        let id = self.id();
        self.ledger.drop_id(id);
    }
}

/// Over-aligned values: `#[repr(align(N))]` around an id and a ledger.
macro_rules! aligned {
    ($name:ident, $align:literal) => {
        #[repr(align($align))]
        struct $name {
            id: usize,
            check: usize,
            ledger: Arc<Ledger>,
        }

        impl Probe for $name {
            fn make(id: usize, ledger: &Arc<Ledger>) -> Self {
                ledger.made.fetch_add(1, SeqCst);
                $name {
                    id,
                    check: !id,
                    ledger: ledger.clone(),
                }
            }

            fn id(&self) -> usize {
                assert!(
                    (std::ptr::from_ref(self) as usize).is_multiple_of($align),
                    "misaligned value"
                );
                assert_eq!(self.check, !self.id, "value {} torn", self.id);
                self.id
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                let id = self.id();
                self.ledger.drop_id(id);
            }
        }
    };
}

aligned!(Align32, 32);
aligned!(Align64, 64);
aligned!(Align4096, 4096);
aligned!(Align8192, 8192);

/// Exactly 57 bytes (alignment 1), no `Drop`: the smallest unaligned value whose slot
/// is split.
#[derive(Clone, Copy)]
struct Bytes57([u8; 57]);

/// Exactly 56 bytes (alignment 1): the largest unaligned value whose slot is joint.
#[derive(Clone, Copy)]
struct Bytes56([u8; 56]);

/// `len`, `is_empty`, `is_full` on both ends agree with `n` values in a channel of
/// capacity `cap`.
fn assert_count<T>(tx: &chan::Sender<T>, rx: &chan::Receiver<T>, n: usize, cap: usize) {
    assert_eq!(tx.len(), n, "cap {cap}: sender's len");
    assert_eq!(rx.len(), n, "cap {cap}: receiver's len");
    assert_eq!(tx.is_empty(), n == 0, "cap {cap}, {n} values: is_empty");
    assert_eq!(rx.is_empty(), n == 0, "cap {cap}, {n} values: is_empty");
    assert_eq!(tx.is_full(), n == cap, "cap {cap}, {n} values: is_full");
    assert_eq!(rx.is_full(), n == cap, "cap {cap}, {n} values: is_full");
}

/// Fills a `bounded(cap)` of `T` (checking the counts at a sample of points and that
/// one more is refused and given back intact), drains a little over half in order,
/// refills past the wrap, and drops both ends (on another thread if `elsewhere`) with
/// the channel full: every value made is dropped exactly once.
fn fill_wrap_drop<T: Probe>(cap: usize, elsewhere: bool) {
    let ledger = Ledger::new(2 * cap + 2);
    let (tx, rx) = chan::bounded::<T>(cap);
    assert_eq!(tx.capacity(), Some(cap));
    assert_count(&tx, &rx, 0, cap);
    let sample = |i: usize| i < 3 || i + 3 >= cap || i.is_multiple_of(4099);
    let mut next = 0;
    for i in 0..cap {
        tx.try_send(T::make(next, &ledger))
            .unwrap_or_else(|_| panic!("cap {cap}: send {i} refused"));
        next += 1;
        if sample(i) {
            assert_count(&tx, &rx, i + 1, cap);
        }
    }
    match tx.try_send(T::make(next, &ledger)) {
        Err(TrySendError::Full(v)) => assert_eq!(v.id(), next, "cap {cap}: the value given back"),
        other => panic!("cap {cap}: one past the capacity: {:?}", other.is_ok()),
    }
    next += 1;
    let taken = cap / 2 + 1;
    for i in 0..taken {
        let v = rx
            .try_recv()
            .unwrap_or_else(|e| panic!("cap {cap}: recv {i}: {e:?}"));
        assert_eq!(v.id(), i, "cap {cap}: out of order");
        if sample(i) {
            assert_count(&tx, &rx, cap - i - 1, cap);
        }
    }
    for i in 0..taken {
        tx.try_send(T::make(next, &ledger))
            .unwrap_or_else(|_| panic!("cap {cap}: refill {i} refused"));
        next += 1;
    }
    assert_count(&tx, &rx, cap, cap);
    // The head, after the wrap: the first value not yet taken (the first refill when
    // the first fill was taken whole; the refused value had the id between them).
    let head = if taken < cap { taken } else { cap + 1 };
    let v = rx.try_recv().unwrap();
    assert_eq!(v.id(), head, "cap {cap}: head after the wrap");
    drop(v);
    assert_count(&tx, &rx, cap - 1, cap);
    assert_eq!(
        ledger.dropped(),
        taken + 2,
        "cap {cap}: drops before the channel's"
    );
    if elsewhere {
        std::thread::spawn(move || drop((tx, rx))).join().unwrap();
    } else {
        drop((tx, rx));
    }
    ledger.assert_all_dropped(&format!("cap {cap}"));
}

/// Small capacities and every threshold of `T`'s layout, in both the boxed and the
/// mapped range.
fn every_capacity<T: Probe>(elsewhere: bool) {
    let mut caps = vec![1, 2, 3, 5, 64, 65];
    caps.extend(thresholds::<T>());
    for cap in caps {
        fill_wrap_drop::<T>(cap, elsewhere);
    }
}

#[test]
fn layouts_are_as_the_tests_assume() {
    // The ring's own unit test checks `Ring::<T>::JOINT` for these shapes; here the
    // mirror decides which thresholds the tests below cross.
    assert!(joint::<()>());
    assert!(joint::<u8>());
    assert!(joint::<Bytes56>());
    assert!(!joint::<Bytes57>());
    assert_eq!(size_of::<Padded<40>>(), 56);
    assert!(joint::<Padded<40>>());
    assert_eq!(size_of::<Padded<48>>(), 64);
    assert!(!joint::<Padded<48>>());
    assert_eq!(size_of::<Align32>(), 32);
    assert!(joint::<Align32>(), "an over-aligned joint slot");
    assert_eq!(size_of::<SlotMirror<Align32>>(), 64);
    assert!(!joint::<Align64>());
    assert!(!joint::<Align4096>());
    assert!(!joint::<Align8192>());
    assert!(
        joint::<ZstAlign64>(),
        "a zero-sized value with a 64-byte slot"
    );
    assert_eq!(align_of::<SlotMirror<ZstAlign64>>(), 64);
    assert!(!joint::<ZstAlign4096>());
}

#[test]
fn joint_56_byte_values_at_every_threshold() {
    every_capacity::<Padded<40>>(false);
}

#[test]
fn joint_16_byte_values_at_every_threshold_dropped_elsewhere() {
    every_capacity::<Padded<0>>(true);
}

#[test]
fn split_64_byte_values_at_every_threshold() {
    every_capacity::<Padded<48>>(true);
}

#[test]
fn over_aligned_joint_values_at_every_threshold() {
    every_capacity::<Align32>(true);
}

#[test]
fn over_aligned_split_values() {
    for cap in [1, 2, 3, 100, 1000] {
        fill_wrap_drop::<Align64>(cap, false);
        fill_wrap_drop::<Align4096>(cap, true);
    }
    // Stamps mapped; the values (8 KiB each, 1 GiB) allocated but only partly touched.
    fill_wrap_drop::<Align8192>(3, false);
    let cap = MAP_AT / size_of::<usize>();
    let ledger = Ledger::new(4);
    let (tx, rx) = chan::bounded::<Align8192>(cap);
    for id in 0..3 {
        tx.try_send(Align8192::make(id, &ledger)).ok().unwrap();
    }
    assert_eq!(rx.try_recv().unwrap().id(), 0);
    assert_eq!(rx.len(), 2);
    drop((tx, rx));
    ledger.assert_all_dropped("align 8192, mapped stamps");
}

/// Plain bytes, no `Drop`: the whole content arrives, at every threshold of both the
/// joint (56 bytes, 1-byte values) and the split (57 bytes) layouts.
#[test]
fn byte_values_keep_every_byte() {
    fn run<const N: usize, T: Copy>(wrap: impl Fn([u8; N]) -> T, unwrap: impl Fn(T) -> [u8; N]) {
        let mut caps = vec![1, 2, 3, 7];
        // Each threshold and the capacity below it (the one above adds time, unoptimised).
        caps.extend(
            thresholds::<T>()
                .into_iter()
                .enumerate()
                .filter_map(|(i, c)| (i % 3 != 2).then_some(c)),
        );
        for cap in caps {
            let (tx, rx) = chan::bounded::<T>(cap);
            let make = |i: usize| wrap(std::array::from_fn(|k| pattern(i, k)));
            let mut sent = 0;
            let mut got = 0;
            // Past the wrap, keeping the ring between half and completely full.
            while got < cap + cap / 4 + 1 {
                while !tx.is_full() {
                    tx.try_send(make(sent)).ok().unwrap();
                    sent += 1;
                }
                assert_eq!(rx.len(), cap);
                for _ in 0..cap.div_ceil(2) {
                    let v = unwrap(rx.try_recv().unwrap());
                    assert_eq!(v, std::array::from_fn(|k| pattern(got, k)), "cap {cap}");
                    got += 1;
                }
            }
            assert_eq!(rx.len(), sent - got);
        }
    }
    run::<1, u8>(|a| a[0], |v| [v]);
    run::<56, Bytes56>(Bytes56, |v| v.0);
    run::<57, Bytes57>(Bytes57, |v| v.0);
}

/// Zero-sized values with `Drop`, counted in a static: the tests that use them run one
/// at a time.
static ZST_LOCK: Mutex<()> = Mutex::new(());
static ZST_LIVE: AtomicUsize = AtomicUsize::new(0);

macro_rules! zst {
    ($name:ident, $align:literal) => {
        #[repr(align($align))]
        struct $name;

        impl $name {
            fn new() -> $name {
                ZST_LIVE.fetch_add(1, SeqCst);
                $name
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                assert!((std::ptr::from_ref(self) as usize).is_multiple_of($align));
                ZST_LIVE.fetch_sub(1, SeqCst);
            }
        }
    };
}

zst!(Zst, 1);
zst!(ZstAlign64, 64);
zst!(ZstAlign4096, 4096);

/// Fills, wraps and drops a `bounded(cap)` of a zero-sized `T`, on this thread or another.
fn zst_cycle<T: Send + 'static>(cap: usize, make: fn() -> T, elsewhere: bool) {
    let start = ZST_LIVE.load(SeqCst);
    let (tx, rx) = chan::bounded::<T>(cap);
    for _ in 0..cap {
        tx.try_send(make()).ok().unwrap();
    }
    assert!(matches!(tx.try_send(make()), Err(TrySendError::Full(_))));
    assert_count(&tx, &rx, cap, cap);
    for _ in 0..cap / 2 + 1 {
        rx.try_recv().unwrap();
    }
    for _ in 0..cap / 2 + 1 {
        tx.try_send(make()).ok().unwrap();
    }
    assert_count(&tx, &rx, cap, cap);
    assert_eq!(ZST_LIVE.load(SeqCst), start + cap, "cap {cap}");
    if elsewhere {
        std::thread::spawn(move || drop((tx, rx))).join().unwrap();
    } else {
        drop((tx, rx));
    }
    assert_eq!(
        ZST_LIVE.load(SeqCst),
        start,
        "cap {cap}: values left undropped"
    );
}

#[test]
fn zero_sized_values_at_every_threshold() {
    let _one = ZST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut caps = vec![1, 2, 3, RING_MAX];
    caps.extend(thresholds::<Zst>());
    for cap in caps {
        zst_cycle(cap, Zst::new, cap % 2 == 0);
    }
    let mut caps = vec![1, 2, 3];
    caps.extend(thresholds::<ZstAlign64>());
    for cap in caps {
        zst_cycle(cap, ZstAlign64::new, cap % 2 == 1);
    }
    for cap in [1, 2, 3, 1000, MAP_AT / size_of::<usize>()] {
        zst_cycle(cap, ZstAlign4096::new, false);
    }
}

/// The largest ring of small values, its slots mapped and left lazy (16 and 64 MiB),
/// full, wrapped, and dropped with every value in it.
#[test]
fn the_largest_joint_rings_full_and_dropped() {
    fill_wrap_drop::<Padded<40>>(RING_MAX, true);
    // Unoptimised, one is enough (16-byte values are at their thresholds elsewhere).
    if !cfg!(debug_assertions) {
        fill_wrap_drop::<Padded<0>>(RING_MAX, false);
    }
    // And the first capacity past it is a list: still bounded.
    let (tx, rx) = chan::bounded::<u8>(RING_MAX + 1);
    for i in 0..=RING_MAX {
        tx.try_send(i as u8).unwrap();
    }
    assert!(tx.is_full());
    assert!(matches!(tx.try_send(0), Err(TrySendError::Full(0))));
    assert_eq!(rx.try_recv(), Ok(0));
}

/// A value whose `Drop` panics, in a joint ring (boxed and mapped), wrapped: dropping
/// the channel panics once, the values before it are dropped exactly once, and none is
/// dropped twice (the rest are leaked). The channel drains the ring into a queue (when
/// its last receiver goes, and again in its own drop) and drops that
/// (`chan::core::drop_leaking_on_panic`), so the ring itself is
/// empty by the time it is dropped: `Ring::drop`'s loop is reached only by the ring's
/// own unit tests, never through the public API.
#[test]
fn a_panicking_drop_in_a_joint_ring() {
    struct Bomb {
        id: usize,
        ledger: Arc<Ledger>,
        panics: bool,
    }
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.ledger.drop_id(self.id);
            if self.panics {
                panic!("bomb {}", self.id);
            }
        }
    }
    assert!(joint::<Bomb>());
    for (cap, bomb) in [(8, 3), (8, 0), (40_000, 20_001)] {
        let ledger = Ledger::new(cap);
        let (tx, rx) = chan::bounded::<Bomb>(cap);
        // Wrap first, so the values left straddle the end of the slot array.
        for id in 0..cap / 2 {
            tx.try_send(Bomb {
                id,
                ledger: ledger.clone(),
                panics: false,
            })
            .ok()
            .unwrap();
            rx.try_recv().unwrap();
        }
        let first = cap / 2;
        let ledger2 = Ledger::new(cap);
        for k in 0..cap {
            tx.try_send(Bomb {
                id: k,
                ledger: ledger2.clone(),
                panics: k == bomb,
            })
            .ok()
            .unwrap();
        }
        assert_eq!(ledger.dropped(), first);
        drop(tx);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(rx)));
        let payload = r.expect_err("the panicking drop did not propagate");
        let msg = common::panic_message(payload.as_ref()).unwrap_or_default();
        assert_eq!(msg, format!("bomb {bomb}"));
        // Values 0..=bomb dropped once each; the rest leaked, never dropped.
        for k in 0..cap {
            let n = ledger2.drops[k].load(SeqCst);
            assert_eq!(n, u8::from(k <= bomb), "cap {cap}, value {k}");
        }
    }
}

/// `T` is `Send` but not `Sync` (`Cell`): values cross threads through a joint ring.
#[test]
fn not_sync_values_cross_threads() {
    common::with_timeout(|| {
        let (tx, rx) = chan::bounded::<Cell<u64>>(3);
        let producer = std::thread::spawn(move || {
            for i in 0..20_000u64 {
                tx.send_blocking(Cell::new(i)).unwrap();
            }
        });
        for i in 0..20_000u64 {
            let c = rx.recv_blocking().unwrap();
            c.set(c.get() + 1);
            assert_eq!(c.get(), i + 1);
        }
        producer.join().unwrap();
    });
}

/// Producers and consumers on threads through a ring of `T`; a monitor checks that
/// `len` never exceeds the capacity. Every value arrives once, untorn, each
/// producer's in order, and the channel ends empty with every value dropped.
fn mpmc_threads<T: Probe>(cap: usize, producers: usize, consumers: usize, per: usize) {
    let ledger = Ledger::new(producers * per);
    let (tx, rx) = chan::bounded::<T>(cap);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let monitor = {
        let (tx, done) = (tx.clone(), done.clone());
        std::thread::spawn(move || {
            let mut looks = 0usize;
            while !done.load(SeqCst) && looks < 1_000_000 {
                let n = tx.len();
                assert!(n <= cap, "len {n} above the capacity {cap}");
                looks += 1;
                std::thread::yield_now();
            }
        })
    };
    let senders: Vec<_> = (0..producers)
        .map(|p| {
            let (tx, ledger) = (tx.clone(), ledger.clone());
            std::thread::spawn(move || {
                for i in 0..per {
                    tx.send_blocking(T::make(p * per + i, &ledger))
                        .ok()
                        .unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let receivers: Vec<_> = (0..consumers)
        .map(|_| {
            let rx = rx.clone();
            std::thread::spawn(move || {
                let mut last = vec![None::<usize>; producers];
                let mut n = 0;
                while let Ok(v) = rx.recv_blocking() {
                    let id = v.id();
                    let (p, i) = (id / per, id % per);
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
    for s in senders {
        s.join().unwrap();
    }
    let n: usize = receivers.into_iter().map(|r| r.join().unwrap()).sum();
    done.store(true, SeqCst);
    monitor.join().unwrap();
    assert_eq!(n, producers * per, "cap {cap}: values received");
    assert!(rx.is_empty());
    drop(rx);
    ledger.assert_all_dropped(&format!("cap {cap}"));
}

#[test]
fn mpmc_threads_joint_small_rings() {
    common::with_timeout(|| {
        // Fewer values unoptimised (CI's `cargo test`), so each test stays short there.
        let per = if cfg!(debug_assertions) {
            8_000
        } else {
            20_000
        };
        mpmc_threads::<Padded<40>>(1, 2, 2, per);
        mpmc_threads::<Padded<0>>(7, 3, 2, per);
        mpmc_threads::<Align32>(2, 2, 3, per);
    });
}

#[test]
fn mpmc_threads_joint_populated_and_mapped_rings() {
    common::with_timeout(|| {
        // Boxed and populated; mapped and populated; mapped and lazy (prefault ahead).
        mpmc_threads::<Padded<40>>(5_000, 2, 2, 6_000);
        mpmc_threads::<Padded<40>>(20_000, 2, 2, 15_000);
        mpmc_threads::<Padded<40>>(140_000, 2, 2, 80_000);
    });
}

#[test]
fn mpmc_threads_split_rings() {
    common::with_timeout(|| {
        mpmc_threads::<Padded<48>>(3, 2, 2, 20_000);
        mpmc_threads::<Align64>(200_000, 2, 2, 110_000);
    });
}

/// Fibers on a runtime send and receive 56-byte values through a joint ring faulted in
/// at creation, wrapping it several times; a task on the same runtime receives from a
/// second joint ring of 16-byte values.
#[test]
fn fibers_and_tasks_through_joint_rings() {
    common::with_timeout(|| {
        let rt = common::workers(2);
        const PER: usize = 30_000;
        let ledger = Ledger::new(4 * PER);
        let (tx, rx) = chan::bounded::<Padded<40>>(10_000);
        let (ttx, trx) = chan::bounded::<Padded<0>>(40_000);
        let (senders, receivers, task) = common::on(&rt, || {
            let senders: Vec<_> = (0..2)
                .map(|p| {
                    let (tx, ledger) = (tx.clone(), ledger.clone());
                    weft::fiber::spawn(move || {
                        for i in 0..PER {
                            tx.send_blocking(Padded::make(p * PER + i, &ledger))
                                .ok()
                                .unwrap();
                        }
                    })
                })
                .collect::<Vec<_>>();
            let receivers: Vec<_> = (0..2)
                .map(|_| {
                    let rx = rx.clone();
                    weft::fiber::spawn(move || {
                        let mut last = [None::<usize>; 2];
                        let mut n = 0;
                        while let Ok(v) = rx.recv_blocking() {
                            let id = v.id();
                            let (p, i) = (id / PER, id % PER);
                            assert!(last[p].is_none_or(|l| i > l), "out of order");
                            last[p] = Some(i);
                            n += 1;
                        }
                        n
                    })
                })
                .collect::<Vec<_>>();
            let task = {
                let trx = trx.clone();
                weft::spawn(async move {
                    let mut n = 0;
                    while let Ok(v) = trx.recv().await {
                        assert_eq!(v.id(), 2 * PER + n);
                        n += 1;
                    }
                    n
                })
            };
            (senders, receivers, task)
        });
        drop((tx, rx, trx));
        let feeder = {
            let ledger = ledger.clone();
            rt.spawn(async move {
                for i in 0..2 * PER {
                    ttx.send(Padded::make(2 * PER + i, &ledger))
                        .await
                        .ok()
                        .unwrap();
                }
            })
        };
        for s in senders {
            s.join().unwrap();
        }
        let n: usize = receivers.into_iter().map(|r| r.join().unwrap()).sum();
        assert_eq!(n, 2 * PER);
        feeder.join().unwrap();
        assert_eq!(task.join().unwrap(), 2 * PER);
        drop(rt);
        ledger.assert_all_dropped("fibers and tasks");
    });
}

/// Rings faulted in at creation, boxed (256 KiB - 1 MiB: the advice covers whole pages
/// that the allocator shares with other blocks) and mapped, made and dropped on several
/// threads at once next to heap blocks whose bytes are checked afterwards; the address
/// space does not grow (the mappings are unmapped).
#[test]
fn populated_rings_leave_their_neighbours_alone_and_leak_no_mapping() {
    common::with_timeout(|| {
        fn vm_size_kb() -> usize {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = s.lines().find(|l| l.starts_with("VmSize:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        let before = vm_size_kb();
        let threads: Vec<_> = (0..3)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..40usize {
                        let mark = (t * 40 + round) as u8;
                        let a: Vec<u8> = vec![mark; 3000 + round * 17];
                        // Boxed and populated (5,000 slots of 64 bytes), mapped and
                        // populated (8 MiB), each with a value sent through it.
                        let (tx, rx) = chan::bounded::<Bytes56>(5_000);
                        let b: Vec<u8> = vec![mark ^ 0xff; 5000 + round];
                        let (tx2, rx2) = chan::bounded::<u8>(POPULATE_MAX / 16);
                        tx.try_send(Bytes56([mark; 56])).ok().unwrap();
                        tx2.try_send(mark).unwrap();
                        assert!(a.iter().all(|&x| x == mark));
                        assert!(b.iter().all(|&x| x == mark ^ 0xff));
                        assert_eq!(rx.try_recv().ok().unwrap().0, [mark; 56]);
                        assert_eq!(rx2.try_recv(), Ok(mark));
                        assert!(matches!(rx2.try_recv(), Err(TryRecvError::Empty)));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // 120 unmapped 8 MiB arrays would be 960 MiB.
        let grown_mib = vm_size_kb().saturating_sub(before) / 1024;
        assert!(grown_mib < 512, "VmSize grew by {grown_mib} MiB");
    });
}

/// A sender blocked on a full joint ring and a receiver blocked on an empty one, each
/// woken by the other side: `send_timeout`/`recv_timeout` hand values over exactly
/// once around the boundary, with the populated ring's first lap.
#[test]
fn timeouts_at_the_boundary_keep_values_once() {
    common::with_timeout(|| {
        let ledger = Ledger::new(40_000);
        let cap = 4_096;
        let (tx, rx) = chan::bounded::<Padded<40>>(cap);
        let consumer = std::thread::spawn(move || {
            let mut next = 0;
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                match rx.recv_timeout(Duration::from_micros(50)) {
                    Ok(v) => {
                        assert_eq!(v.id(), next);
                        next += 1;
                    }
                    Err(chan::RecvTimeoutError::Timeout) => {}
                    Err(chan::RecvTimeoutError::Disconnected) => break,
                }
            }
            next
        });
        let mut id = 0;
        let mut v = Padded::<40>::make(id, &ledger);
        let mut failures = 0usize;
        while id < 40_000 {
            match tx.send_timeout(v, Duration::from_micros(50)) {
                Ok(()) => {
                    id += 1;
                    if id == 40_000 {
                        break;
                    }
                    v = Padded::make(id, &ledger);
                }
                Err(chan::SendTimeoutError::Timeout(back)) => {
                    assert_eq!(back.id(), id);
                    failures += 1;
                    v = back;
                }
                Err(chan::SendTimeoutError::Disconnected(_)) => panic!("disconnected"),
            }
        }
        drop(tx);
        assert_eq!(consumer.join().unwrap(), 40_000, "{failures} timeouts");
        ledger.assert_all_dropped("timeouts");
    });
}
