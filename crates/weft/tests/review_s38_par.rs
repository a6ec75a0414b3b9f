//! Review (session 38) of the parallel iterators and sorts (`weft::par`), attacked from
//! safe code only: the public API, as a user calls it.
//!
//! Every owned element here is a [`Probe`]: it has an id and records each of its drops
//! in a per-test [`Log`], so a test can say that every element was dropped exactly once
//! (none lost, none twice), whether the iteration finished, a closure panicked, an
//! element's `Drop` panicked, or a custom consumer gave up. The vectors' buffers are
//! watched through a counting global allocator ([`Watch`]): each must be freed once.
//!
//! Expected panics carry the marker `s38:`; a panic hook keeps them quiet (and so fast)
//! and lets every other panic (a failing assertion, an arithmetic overflow) print.
//!
//! FOUND: `with_min_len(min)` with `min > usize::MAX / 2` (`usize::MAX` is the natural
//! "never split" value) overflows in `fold_leaf` (`2 * chunk`, `chunk + splitter.min`,
//! src/par/plumbing.rs:278 and :283): a debug build panics with "attempt to multiply with
//! overflow" on any input, even an empty one; a release build wraps, and for
//! `min` in `usize::MAX / 2 + 1 ..= usize::MAX - 1` splits the producer at `chunk > len`
//! (a slice panics "mid > len", a vector's items are leaked, a range's `split_at` only
//! `debug_assert`s and yields integers outside the range). See
//! [`with_min_len_above_half_of_usize_max_is_one_sequential_piece`].

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cmp::Ordering as CmpOrdering;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, Once, OnceLock};
use std::time::Duration;

use weft::par::plumbing::{Consumer, Folder, Producer, ProducerCallback, Reducer};
use weft::par::prelude::*;

const SEQ: Ordering = Ordering::SeqCst;

// ----------------------------------------------------------------------------- helpers

/// A global allocator that counts, for a few watched sizes, how many blocks of that
/// exact size are live (to see a vector's buffer freed exactly once).
struct Counting;

const WATCH_SLOTS: usize = 32;
static WATCH_SIZE: [AtomicUsize; WATCH_SLOTS] = [const { AtomicUsize::new(0) }; WATCH_SLOTS];
static WATCH_LIVE: [AtomicIsize; WATCH_SLOTS] = [const { AtomicIsize::new(0) }; WATCH_SLOTS];

fn note(size: usize, d: isize) {
    if size == 0 {
        return;
    }
    for i in 0..WATCH_SLOTS {
        if WATCH_SIZE[i].load(Ordering::Relaxed) == size {
            WATCH_LIVE[i].fetch_add(d, SEQ);
        }
    }
}

// SAFETY: every call is passed on to `System` unchanged; the counting has no effect on
// the blocks.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            note(l.size(), 1);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            note(l.size(), 1);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(l.size(), -1);
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as above.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            note(l.size(), -1);
            note(new, 1);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Live blocks of one watched size.
struct Watch(usize);

impl Watch {
    fn new(size: usize) -> Watch {
        for _ in 0..1000 {
            for i in 0..WATCH_SLOTS {
                // Reserve a free slot (no block has size `usize::MAX`), then clear it.
                if WATCH_SIZE[i]
                    .compare_exchange(0, usize::MAX, SEQ, SEQ)
                    .is_ok()
                {
                    WATCH_LIVE[i].store(0, SEQ);
                    WATCH_SIZE[i].store(size, SEQ);
                    return Watch(i);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("no free watch slot");
    }
    fn live(&self) -> isize {
        WATCH_LIVE[self.0].load(SEQ)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        WATCH_SIZE[self.0].store(0, SEQ);
    }
}

/// Silences the panics this file raises on purpose (their message holds `s38:`, or is
/// the standard sort's complaint about an inconsistent order); others still print.
fn quiet() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let msg = info.payload_as_str().unwrap_or_default();
            let quiet = msg.contains("s38:")
                || msg.contains("total order")
                || msg.contains("more than usize::MAX")
                || info.payload().downcast_ref::<u32>() == Some(&0x538);
            if quiet {
                return;
            }
            prev(info)
        }));
    });
}

/// Per-element drop counts.
struct Log {
    drops: Vec<AtomicUsize>,
}

impl Log {
    fn new(n: usize) -> Arc<Log> {
        Arc::new(Log {
            drops: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        })
    }

    fn count(&self, id: usize) -> usize {
        self.drops[id].load(SEQ)
    }

    /// Every element dropped exactly once.
    fn assert_each_once(&self, what: &str) {
        let bad: Vec<(usize, usize)> = (0..self.drops.len())
            .map(|i| (i, self.count(i)))
            .filter(|&(_, c)| c != 1)
            .take(8)
            .collect();
        assert!(
            bad.is_empty(),
            "{what}: (id, drops) not dropped once: {bad:?}"
        );
    }

    /// No element dropped yet.
    fn assert_none(&self, what: &str) {
        let dropped = (0..self.drops.len())
            .filter(|&i| self.count(i) != 0)
            .count();
        assert_eq!(dropped, 0, "{what}: elements dropped while still owned");
    }
}

/// An owned element that logs its drops; a `bomb` panics in its `Drop` (after logging).
/// Padded to 40 bytes, so that its vectors' buffers have sizes few others have.
struct Probe {
    id: usize,
    log: Arc<Log>,
    bomb: bool,
    _pad: [u64; 2],
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.log.drops[self.id].fetch_add(1, SEQ);
        if self.bomb {
            panic!("s38: drop bomb {}", self.id);
        }
    }
}

/// A vector of `n` probes with a watched buffer (its capacity exceeds `n`, by an amount
/// unique to this call, so that the buffer's size is unlikely to be anyone else's).
fn probes(n: usize, bombs: &[usize]) -> (Vec<Probe>, Arc<Log>, Watch) {
    static SALT: AtomicUsize = AtomicUsize::new(0);
    let cap = n + 30_011 + 2 * SALT.fetch_add(1, SEQ);
    let watch = Watch::new(cap * std::mem::size_of::<Probe>());
    let log = Log::new(n);
    let mut v = Vec::with_capacity(cap);
    v.extend((0..n).map(|id| Probe {
        id,
        log: log.clone(),
        bomb: bombs.contains(&id),
        _pad: [0; 2],
    }));
    assert_eq!(watch.live(), 1, "the buffer is watched");
    (v, log, watch)
}

fn msg(payload: &(dyn std::any::Any + Send)) -> String {
    common::panic_message(payload).unwrap_or_else(|| "<not a string>".into())
}

/// A shared 4-worker runtime, as tests/par.rs has.
fn pool() -> &'static weft::Runtime {
    static RT: OnceLock<weft::Runtime> = OnceLock::new();
    RT.get_or_init(|| common::workers(4))
}

/// `f` in a task on the shared runtime, within the common hang limit.
fn on_pool<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    quiet();
    common::with_timeout(move || match pool().spawn(async move { f() }).join() {
        Ok(v) => v,
        Err(e) => panic::resume_unwind(e.into_panic()),
    })
}

// -------------------------------------------------- 1. with_min_len near usize::MAX

/// `with_min_len(min)` promises one sequential piece for an input of fewer than
/// `2 * min` items; `usize::MAX` is the obvious way to say "never split".
///
/// FOUND: fails. `fold_leaf` (src/par/plumbing.rs:260-294) computes
/// `chunk = CHUNK.max(splitter.min)` and then `2 * chunk` (line 278) and
/// `chunk + splitter.min` (line 283), which overflow for every `min > usize::MAX / 2`:
/// a debug build panics "attempt to multiply with overflow" before the first item, for
/// every input (empty ones too). In a release build both wrap; for `min` in
/// `usize::MAX / 2 + 1 ..= usize::MAX - 1` the test `len < chunk + min` is then false and
/// `producer.split_at(chunk)` is called with `chunk > len`: a slice panics "mid > len",
/// a vector's `DrainProducer` panics after taking its slots (all its items leak), and a
/// range's `split_at` (`debug_assert` only) makes a piece of `chunk` integers running
/// past the range (`(0..10u64).with_min_len(1 << 63)` yields 10, 11, ... and does not
/// end). (The release behaviour was checked with a separate binary, not here.) Fix:
/// `chunk.saturating_mul(2)` and `chunk.saturating_add(splitter.min)` (or
/// `len / 2 >= chunk`, and `len - chunk < splitter.min` once `len >= chunk`).
#[test]
fn with_min_len_above_half_of_usize_max_is_one_sequential_piece() {
    quiet();
    let mut failures = Vec::new();
    let mut check =
        |what: &str, f: &dyn Fn() -> bool| match panic::catch_unwind(AssertUnwindSafe(f)) {
            Ok(true) => {}
            Ok(false) => failures.push(format!("{what}: wrong result")),
            Err(p) => failures.push(format!("{what}: panicked: {}", msg(&*p))),
        };
    // Ranges only with `usize::MAX`: in a release build the other two values do not end
    // on a range (see above), where a slice and a vector panic.
    check("range sum, min usize::MAX", &|| {
        (0..10u32)
            .into_par_iter()
            .with_min_len(usize::MAX)
            .sum::<u32>()
            == 45
    });
    check("empty range count, min usize::MAX", &|| {
        (0..0u32).into_par_iter().with_min_len(usize::MAX).count() == 0
    });
    for min in [usize::MAX, usize::MAX / 2 + 1, usize::MAX / 4 * 3] {
        check(&format!("slice collect, min {min:#x}"), &|| {
            let v: Vec<u32> = (0..3000).collect();
            let got: Vec<u32> = v.par_iter().with_min_len(min).copied().collect();
            got == v
        });
        check(&format!("vec into_par_iter, min {min:#x}"), &|| {
            let (v, log, watch) = probes(2000, &[]);
            let n = v
                .into_par_iter()
                .with_min_len(min)
                .map(|p| p.id)
                .sum::<usize>();
            log.assert_each_once("with_min_len huge");
            n == 1999 * 2000 / 2 && watch.live() == 0
        });
    }
    // Just below the overflow: fine.
    check("range sum, min usize::MAX / 2", &|| {
        (0..10u32)
            .into_par_iter()
            .with_min_len(usize::MAX / 2)
            .sum::<u32>()
            == 45
    });
    assert!(failures.is_empty(), "{failures:#?}");
}

// ------------------------------------------- 2. Vec::into_par_iter: drops, panics

/// The consuming operations a panic is tried in. Each takes the probes, may panic at
/// the ids `at` (in its closure), and returns the ids it saw (summed) if it finished.
fn consume(op: usize, v: Vec<Probe>, at: &[usize]) -> usize {
    let hit = |id: usize| {
        if at.contains(&id) {
            panic!("s38: closure at {id}");
        }
    };
    match op {
        0 => {
            let sum = AtomicUsize::new(0);
            v.into_par_iter().for_each(|p| {
                hit(p.id);
                sum.fetch_add(p.id, SEQ);
            });
            sum.into_inner()
        }
        1 => {
            let out: Vec<Probe> = v
                .into_par_iter()
                .map(|p| {
                    hit(p.id);
                    p
                })
                .collect();
            let s = out.iter().map(|p| p.id).sum();
            // Collected in order.
            assert!(out.windows(2).all(|w| w[0].id < w[1].id));
            s
        }
        2 => {
            let out: Vec<Probe> = v
                .into_par_iter()
                .filter(|p| {
                    hit(p.id);
                    p.id % 3 != 1
                })
                .collect();
            assert!(out.windows(2).all(|w| w[0].id < w[1].id));
            out.iter().map(|p| p.id).sum::<usize>()
        }
        3 => v
            .into_par_iter()
            .map(|p| {
                hit(p.id);
                p.id
            })
            .reduce(|| 0, |a, b| a + b),
        4 => {
            // The operation itself panics, with two probes moved into it.
            let r = v.into_par_iter().reduce_with(|a, b| {
                hit(b.id);
                // Keeps the smaller id (always `a`: items come in order).
                if a.id < b.id {
                    drop(b);
                    a
                } else {
                    drop(a);
                    b
                }
            });
            r.map_or(0, |p| p.id)
        }
        5 => v
            .into_par_iter()
            .map(|p| {
                hit(p.id);
                p.id
            })
            .sum(),
        6 => {
            // The identity panics (when a piece starts) for each id in `at` that the
            // closure meets first.
            let armed = AtomicUsize::new(0);
            v.into_par_iter()
                .map(|p| {
                    if at.contains(&p.id) {
                        armed.fetch_add(1, SEQ);
                    }
                    p.id
                })
                .reduce(
                    || {
                        if armed.load(SEQ) > 0 {
                            panic!("s38: closure at identity");
                        }
                        0
                    },
                    |a, b| a + b,
                )
        }
        _ => unreachable!(),
    }
}

/// The result `consume(op, ..)` returns when nothing panics.
fn expected(op: usize, n: usize) -> usize {
    match op {
        2 => (0..n).filter(|i| i % 3 != 1).sum(),
        4 => 0,
        _ => n * n.saturating_sub(1) / 2,
    }
}

/// A closure panics at the first, a middle and the last element, and at many elements
/// at once (several pieces panic, on several workers): the panic reaches the caller,
/// every element (taken, collected, or never reached) is dropped exactly once, and the
/// buffer is freed.
#[test]
fn into_par_iter_panics_drop_every_element_once() {
    on_pool(|| {
        for n in [1usize, 2, 1025, 9000] {
            let ats: Vec<Vec<usize>> = vec![
                vec![],
                vec![0],
                vec![n / 2],
                vec![n - 1],
                (0..n).filter(|i| i % 997 == 5).collect(),
                (0..n).collect(),
            ];
            for op in 0..7 {
                for at in &ats {
                    // reduce_with's operation never sees id 0 as `b`.
                    let effective = at.iter().any(|&i| op != 4 || i != 0);
                    // The identity panics only if a piece starts after an armed item.
                    let maybe = op == 6;
                    let what = format!("n {n} op {op} panics at {} ids", at.len());
                    let (v, log, watch) = probes(n, &[]);
                    let r = panic::catch_unwind(AssertUnwindSafe(|| consume(op, v, at)));
                    match r {
                        Ok(got) => {
                            assert!(!effective || maybe, "{what}: no panic");
                            assert_eq!(got, expected(op, n), "{what}");
                        }
                        Err(p) => {
                            assert!(effective, "{what}: {}", msg(&*p));
                            assert!(msg(&*p).starts_with("s38: closure at"), "{what}");
                        }
                    }
                    log.assert_each_once(&what);
                    assert_eq!(watch.live(), 0, "{what}: buffer not freed");
                }
            }
        }
    })
}

/// An element whose `Drop` panics (dropped by the closure, by `filter`, by `count`'s
/// `map`, or with the collected vector): the panic reaches the caller, every other
/// element is dropped once, the buffer freed.
#[test]
fn into_par_iter_with_a_panicking_drop() {
    on_pool(|| {
        for n in [1usize, 1024, 1025, 5000] {
            for bomb in [0, n / 2, n - 1] {
                for op in 0..3 {
                    let what = format!("n {n} bomb {bomb} op {op}");
                    let (v, log, watch) = probes(n, &[bomb]);
                    let r = panic::catch_unwind(AssertUnwindSafe(|| match op {
                        0 => v.into_par_iter().for_each(drop),
                        1 => {
                            let c = v.into_par_iter().filter(|p| p.id % 2 == 1).count();
                            assert_eq!(c, n / 2);
                        }
                        _ => {
                            let out: Vec<Probe> =
                                v.into_par_iter().filter(|p| p.id != usize::MAX).collect();
                            assert_eq!(out.len(), n);
                            drop(out);
                        }
                    }));
                    let p = r.expect_err(&what);
                    assert_eq!(msg(&*p), format!("s38: drop bomb {bomb}"), "{what}");
                    log.assert_each_once(&what);
                    assert_eq!(watch.live(), 0, "{what}: buffer not freed");
                }
            }
        }
    })
}

/// Zero-sized items: counted, filtered, collected, dropped once each (a static count:
/// a zero-sized value carries no id), and a vector of `usize::MAX` of them is cut into
/// chunks without overflow.
#[test]
fn zero_sized_items() {
    static ZDROPS: AtomicUsize = AtomicUsize::new(0);
    struct Z;
    impl Drop for Z {
        fn drop(&mut self) {
            ZDROPS.fetch_add(1, SEQ);
        }
    }
    on_pool(|| {
        for n in [0usize, 1, 1023, 1025, 20_000] {
            ZDROPS.store(0, SEQ);
            let v: Vec<Z> = (0..n).map(|_| Z).collect();
            let kept: Vec<Z> = v.into_par_iter().filter(|_| true).collect();
            assert_eq!(kept.len(), n);
            assert_eq!(ZDROPS.load(SEQ), 0, "n {n}: dropped before its time");
            let c = kept.into_par_iter().map(drop).count();
            assert_eq!(c, n);
            assert_eq!(ZDROPS.load(SEQ), n, "n {n}");

            // A panic half-way.
            ZDROPS.store(0, SEQ);
            let v: Vec<Z> = (0..n).map(|_| Z).collect();
            let seen = AtomicUsize::new(0);
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                v.into_par_iter().for_each(|_z| {
                    if seen.fetch_add(1, SEQ) == n / 2 {
                        panic!("s38: zst");
                    }
                })
            }));
            assert_eq!(r.is_err(), n > 0);
            assert_eq!(ZDROPS.load(SEQ), n, "n {n}: after a panic");
        }

        let huge = vec![(); usize::MAX];
        let total: usize = huge.par_chunks(1 << 62).map(|c| c.len()).sum();
        assert_eq!(total, usize::MAX);
        assert_eq!(huge.par_chunks(usize::MAX).count(), 1);
        assert_eq!(huge.par_chunks(usize::MAX / 2).len(), 3);
        let mut huge = huge;
        let total: usize = huge.par_chunks_mut(usize::MAX / 3).map(|c| c.len()).sum();
        assert_eq!(total, usize::MAX);
        // Every piece panics at its first item; the rest is dropped (no-op) at once.
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            huge.into_par_iter().for_each(|()| panic!("s38: zst huge"))
        }));
        assert!(r.is_err());
    })
}

// ---------------------------------------------------------- 3. results and order

/// filter + collect at lengths around the fold's 1,024-item chunks, with `min_len`s
/// around them too: the kept items, in input order, none twice.
#[test]
fn filter_collect_keeps_exactly_the_kept_items_in_order() {
    on_pool(|| {
        let lens = [
            0usize, 1, 2, 3, 1023, 1024, 1025, 2047, 2048, 2049, 4097, 33_333,
        ];
        type Pred = (&'static str, fn(u32) -> bool);
        let preds: [Pred; 5] = [
            ("none", |_| false),
            ("all", |_| true),
            ("first", |x| x == 0),
            ("every 7th", |x| x % 7 == 3),
            ("high", |x| x >= 1020),
        ];
        for &n in &lens {
            let v: Vec<u32> = (0..n as u32).collect();
            for (name, p) in preds {
                let expected: Vec<u32> = v.iter().copied().filter(|&x| p(x)).collect();
                for min in [1usize, 600, 1024, 1025, 5000] {
                    let what = format!("n {n} {name} min {min}");
                    let got: Vec<u32> = v
                        .par_iter()
                        .with_min_len(min)
                        .copied()
                        .filter(|&x| p(x))
                        .collect();
                    assert_eq!(got, expected, "{what}");
                    let c = (0..n as u32)
                        .into_par_iter()
                        .with_min_len(min)
                        .filter(|&x| p(x))
                        .count();
                    assert_eq!(c, expected.len(), "{what}");
                }
            }
        }
    })
}

/// `reduce` with an associative, non-commutative operation (interval concatenation)
/// over ranges, slices and filtered input: items are combined in input order. `min`
/// and `max` return the first smallest and the last largest of equal items.
#[test]
fn reduce_order_and_min_max_ties_on_large_inputs() {
    type Iv = Option<(u64, u64, bool)>;
    fn cat(a: Iv, b: Iv) -> Iv {
        match (a, b) {
            (None, x) | (x, None) => x,
            (Some((a0, a1, ok_a)), Some((b0, b1, ok_b))) => Some((a0, b1, ok_a && ok_b && a1 < b0)),
        }
    }
    #[derive(Clone, Copy, Debug)]
    struct K {
        key: u8,
        idx: usize,
    }
    impl PartialEq for K {
        fn eq(&self, o: &Self) -> bool {
            self.key == o.key
        }
    }
    impl Eq for K {}
    impl PartialOrd for K {
        fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for K {
        fn cmp(&self, o: &Self) -> CmpOrdering {
            self.key.cmp(&o.key)
        }
    }
    on_pool(|| {
        for n in [1u64, 1024, 1025, 100_000] {
            let r = (0..n)
                .into_par_iter()
                .map(|i| Some((i, i, true)))
                .reduce(|| None, cat);
            assert_eq!(r, Some((0, n - 1, true)), "n {n}");
            let r = (0..n)
                .into_par_iter()
                .filter(|i| i % 5 == 2)
                .map(|i| Some((i, i, true)))
                .reduce_with(cat)
                .flatten();
            let first = (0..n).find(|i| i % 5 == 2);
            let last = (0..n).rev().find(|i| i % 5 == 2);
            assert_eq!(
                r.map(|x| (x.0, x.1, x.2)),
                first.map(|f| (f, last.unwrap(), true))
            );

            let ks: Vec<K> = (0..n as usize)
                .map(|idx| K {
                    key: (idx % 7) as u8 % 4,
                    idx,
                })
                .collect();
            let min = ks.par_iter().min().unwrap();
            let max = ks.par_iter().max().unwrap();
            assert_eq!(
                min.idx,
                ks.iter().min().unwrap().idx,
                "n {n}: first smallest"
            );
            assert_eq!(max.idx, ks.iter().max().unwrap().idx, "n {n}: last largest");
            let min = ks.clone().into_par_iter().min().unwrap();
            assert_eq!(min.idx, 0);
        }
    })
}

/// Ranges at the edges of their types: lengths up to `usize::MAX` are computed, longer
/// ones panic as documented, and ranges reaching a type's maximum or minimum yield every
/// integer once, across the fold's chunks and the splits.
#[test]
fn ranges_at_the_edges_of_their_types() {
    on_pool(|| {
        assert_eq!((0..usize::MAX).into_par_iter().len(), usize::MAX);
        assert_eq!((isize::MIN..isize::MAX).into_par_iter().len(), usize::MAX);
        assert_eq!((0..=usize::MAX - 1).into_par_iter().len(), usize::MAX);
        assert_eq!((i64::MIN + 1..=i64::MAX).into_par_iter().len(), usize::MAX);
        for r in [
            panic::catch_unwind(|| (0..=usize::MAX).into_par_iter().len()),
            panic::catch_unwind(|| (i64::MIN..=i64::MAX).into_par_iter().len()),
            panic::catch_unwind(|| (isize::MIN..=isize::MAX).into_par_iter().count()),
        ] {
            let p = r.expect_err("a range of 2^64 integers has no usize length");
            assert!(msg(&*p).contains("more than usize::MAX"), "{}", msg(&*p));
        }

        fn same<T>(par: Vec<T>, seq: Vec<T>, what: &str)
        where
            T: PartialEq + std::fmt::Debug,
        {
            assert_eq!(par.len(), seq.len(), "{what}");
            assert!(par == seq, "{what}: differs");
        }
        same(
            (usize::MAX - 5000..=usize::MAX).into_par_iter().collect(),
            (usize::MAX - 5000..=usize::MAX).collect(),
            "usize top",
        );
        same(
            (u64::MAX - 3000..u64::MAX).into_par_iter().collect(),
            (u64::MAX - 3000..u64::MAX).collect(),
            "u64 top, half-open",
        );
        same(
            (i64::MIN..=i64::MIN + 3000).into_par_iter().collect(),
            (i64::MIN..=i64::MIN + 3000).collect(),
            "i64 bottom",
        );
        same(
            (i64::MAX - 2500..=i64::MAX).into_par_iter().collect(),
            (i64::MAX - 2500..=i64::MAX).collect(),
            "i64 top",
        );
        same(
            (isize::MIN..isize::MIN + 2050).into_par_iter().collect(),
            (isize::MIN..isize::MIN + 2050).collect(),
            "isize bottom",
        );
        same(
            (u16::MAX - 2100..=u16::MAX).into_par_iter().collect(),
            (u16::MAX - 2100..=u16::MAX).collect(),
            "u16 top",
        );
        same(
            (i16::MIN..=i16::MAX).into_par_iter().collect(),
            (i16::MIN..=i16::MAX).collect(),
            "i16 all",
        );
        same(
            (i8::MIN..=i8::MAX).into_par_iter().collect(),
            (i8::MIN..=i8::MAX).collect(),
            "i8 all",
        );
        same(
            (u8::MAX..=u8::MAX).into_par_iter().collect(),
            vec![u8::MAX],
            "u8 max alone",
        );
        same((-3i32..=-3).into_par_iter().collect(), vec![-3], "one");
        let (a, b) = (5u64, 3u64);
        assert_eq!((a..=b).into_par_iter().count(), 0);
        assert_eq!((a..b).into_par_iter().count(), 0);
        for min in [1usize, 1000, 3000] {
            let s: u128 = (u64::MAX - 4000..=u64::MAX)
                .into_par_iter()
                .with_min_len(min)
                .map(u128::from)
                .sum();
            let e: u128 = (u64::MAX - 4000..=u64::MAX).map(u128::from).sum();
            assert_eq!(s, e, "min {min}");
        }
    })
}

// ----------------------------------------------------------------------- 4. sorts

/// A sortable element: a key, an id, the drop log (a sort never drops), and the marks
/// every comparison leaves on both its arguments (through an atomic: a mark left on a
/// copy that the sort then loses, a stale copy written back, shows as a missing mark).
struct Elem {
    key: u32,
    id: usize,
    log: Arc<Log>,
    marks: AtomicUsize,
}

impl Drop for Elem {
    fn drop(&mut self) {
        self.log.drops[self.id].fetch_add(1, SEQ);
    }
}

/// `n` elements with keys of `shape`: 0 random in 0..3, 1 random `u32`s, 2 a rotated
/// run (the second half's keys all below the first half's), 3 sorted but for the last
/// two (so that most merges only check their ends).
fn elems(n: usize, shape: u64, seed: u64) -> (Vec<Elem>, Arc<Log>) {
    let log = Log::new(n);
    let mut rng = common::Rng(seed | 1);
    let key = |i: usize, rng: &mut common::Rng| -> u32 {
        match shape {
            0 => (rng.next() % 3) as u32,
            1 => rng.next() as u32,
            2 => ((i + n / 2) % n) as u32,
            _ if n >= 2 && i >= n - 2 => (2 * n - 3 - i) as u32,
            _ => i as u32,
        }
    };
    let v = (0..n)
        .map(|id| Elem {
            key: key(id, &mut rng),
            id,
            log: log.clone(),
            marks: AtomicUsize::new(0),
        })
        .collect();
    (v, log)
}

/// `v` holds each element once, none of them dropped.
fn assert_permutation(v: &[Elem], log: &Log, what: &str) {
    let mut ids: Vec<usize> = v.iter().map(|e| e.id).collect();
    ids.sort_unstable();
    assert!(
        ids.iter().copied().eq(0..v.len()),
        "{what}: not a permutation"
    );
    log.assert_none(what);
}

/// The comparisons' marks on `v` add up to two for each of `calls` comparisons.
fn assert_marks(v: &[Elem], calls: usize, what: &str) {
    let marks: usize = v.iter().map(|e| e.marks.load(SEQ)).sum();
    assert_eq!(marks, 2 * calls, "{what}: a comparison's mark was lost");
}

/// Sorts `v` with `cmp`, which is called only after both arguments were marked.
fn sort_with(stable: bool, v: &mut [Elem], cmp: &(dyn Fn(&Elem, &Elem) -> CmpOrdering + Sync)) {
    let marked = |a: &Elem, b: &Elem| {
        a.marks.fetch_add(1, SEQ);
        b.marks.fetch_add(1, SEQ);
        cmp(a, b)
    };
    if stable {
        v.par_sort_by(marked)
    } else {
        v.par_sort_unstable_by(marked)
    }
}

/// A comparison that panics at its first call, a middle one and its last one (the
/// calls counted across all workers), for both sorts, at lengths below and above their
/// parallel cut-offs: the panic reaches the caller, the slice holds a permutation of the
/// input, no element was dropped (the comparison checks it sees only live elements),
/// and each is dropped once afterwards.
#[test]
fn sorts_with_a_panicking_comparison_keep_a_permutation() {
    on_pool(|| {
        for stable in [true, false] {
            for n in [2usize, 100, 20_000] {
                for shape in 0..4u64 {
                    let seed = n as u64 * 31 + shape;
                    let (mut v, log) = elems(n, shape, seed);
                    let calls = AtomicUsize::new(0);
                    sort_with(stable, &mut v, &|a, b| {
                        calls.fetch_add(1, SEQ);
                        a.key.cmp(&b.key)
                    });
                    let total = calls.into_inner();
                    assert!(v.windows(2).all(|w| w[0].key <= w[1].key));
                    if stable {
                        assert!(v
                            .windows(2)
                            .all(|w| w[0].key < w[1].key || w[0].id < w[1].id));
                    }
                    drop(v);
                    log.assert_each_once("clean sort");
                    // The first, a few in the leaves' sequential sorts, and the last
                    // ones, where the merges (or the last partitions) are.
                    let mut points = vec![0, 1, total / 3, total / 2];
                    points.extend((1..=6).map(|k| total.saturating_sub(k * n / 4)));
                    points.extend((1..=6).map(|k| total.saturating_sub(k)));
                    points.retain(|&p| p < total);
                    points.sort_unstable();
                    points.dedup();
                    for p in points {
                        let what =
                            format!("stable {stable} n {n} shape {shape} panic at {p}/{total}");
                        let (mut v, log) = elems(n, shape, seed);
                        let calls = AtomicUsize::new(0);
                        let r = panic::catch_unwind(AssertUnwindSafe(|| {
                            sort_with(stable, &mut v, &|a, b| {
                                assert_eq!(
                                    log.count(a.id) + log.count(b.id),
                                    0,
                                    "compared a dropped element"
                                );
                                if calls.fetch_add(1, SEQ) == p {
                                    panic!("s38: comparison {p}");
                                }
                                a.key.cmp(&b.key)
                            })
                        }));
                        let payload = r.expect_err(&what);
                        assert_eq!(msg(&*payload), format!("s38: comparison {p}"), "{what}");
                        assert_permutation(&v, &log, &what);
                        assert_marks(&v, calls.load(SEQ), &what);
                        drop(v);
                        log.assert_each_once(&what);
                    }
                }
            }
        }
    })
}

/// Comparisons that are no order at all (random answers, always `Less`, always
/// `Greater`, a cycle), or that panic on every worker at once after a while, or a key
/// function that panics: the sorts end (in time), and leave a permutation.
#[test]
fn sorts_with_inconsistent_or_concurrently_panicking_comparisons() {
    on_pool(|| {
        for stable in [true, false] {
            for n in [9000usize, 20_000] {
                for kind in 0..6u64 {
                    let what = format!("stable {stable} n {n} kind {kind}");
                    let (mut v, log) = elems(n, 0, kind + n as u64);
                    let state = AtomicU64::new(0x9E37_79B9_7F4A_7C15 ^ kind);
                    let calls = AtomicUsize::new(0);
                    let r = panic::catch_unwind(AssertUnwindSafe(|| {
                        if kind == 5 {
                            let keys = AtomicUsize::new(0);
                            let key = |e: &Elem| {
                                if keys.fetch_add(1, SEQ) == 40_000 {
                                    panic!("s38: key");
                                }
                                e.key
                            };
                            if stable {
                                v.par_sort_by_key(key)
                            } else {
                                v.par_sort_unstable_by_key(key)
                            }
                            return;
                        }
                        sort_with(stable, &mut v, &|a, b| {
                            let c = calls.fetch_add(1, SEQ);
                            match kind {
                                0 => {
                                    let s = state.fetch_add(0x9E37_79B9_7F4A_7C15, SEQ);
                                    [CmpOrdering::Less, CmpOrdering::Equal, CmpOrdering::Greater]
                                        [(s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as usize % 3]
                                }
                                1 => CmpOrdering::Less,
                                2 => CmpOrdering::Greater,
                                3 => match (a.key + 10 - b.key) % 10 {
                                    0 => CmpOrdering::Equal,
                                    d if d < 5 => CmpOrdering::Greater,
                                    _ => CmpOrdering::Less,
                                },
                                _ => {
                                    // Every comparison after the first 20,000 panics, on
                                    // whichever worker makes it.
                                    if c >= 20_000 {
                                        std::thread::yield_now();
                                        panic!("s38: everywhere");
                                    }
                                    a.key.cmp(&b.key)
                                }
                            }
                        })
                    }));
                    if kind >= 4 {
                        assert!(r.is_err(), "{what}: the panic was lost");
                    }
                    assert_permutation(&v, &log, &what);
                    assert_marks(&v, calls.load(SEQ), &what);
                    drop(v);
                    log.assert_each_once(&what);
                }
            }
        }
    })
}

/// Zero-sized elements with a `Drop`: sorted by both sorts (with a comparison that
/// panics half-way, too), none dropped by the sort, each once afterwards.
#[test]
fn sorts_of_zero_sized_elements() {
    static ZD: AtomicUsize = AtomicUsize::new(0);
    struct Z;
    impl Drop for Z {
        fn drop(&mut self) {
            ZD.fetch_add(1, SEQ);
        }
    }
    on_pool(|| {
        for stable in [true, false] {
            for n in [0usize, 1, 5000, 20_000] {
                for panic_at in [None, Some(10_000usize)] {
                    ZD.store(0, SEQ);
                    let mut v: Vec<Z> = (0..n).map(|_| Z).collect();
                    let calls = AtomicUsize::new(0);
                    let cmp = |_: &Z, _: &Z| {
                        if Some(calls.fetch_add(1, SEQ)) == panic_at {
                            panic!("s38: zst sort");
                        }
                        CmpOrdering::Less
                    };
                    let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                        if stable {
                            v.par_sort_by(cmp)
                        } else {
                            v.par_sort_unstable_by(cmp)
                        }
                    }));
                    assert_eq!(v.len(), n);
                    assert_eq!(
                        ZD.load(SEQ),
                        0,
                        "stable {stable} n {n}: dropped by the sort"
                    );
                    drop(v);
                    assert_eq!(ZD.load(SEQ), n, "stable {stable} n {n}");
                }
            }
        }
    })
}

// ------------------------------------------------------------------ 5. where it runs

/// One round of checks: sums, filter + collect, a panicking collect of probes (every
/// probe dropped once, the buffer freed), both sorts.
fn battery(what: &str) {
    quiet();
    let s: u64 = (0..50_000u64).into_par_iter().map(|x| x * 3).sum();
    assert_eq!(s, 3 * 49_999 * 50_000 / 2, "{what}");
    let v: Vec<u32> = (0..6000).rev().collect();
    let kept: Vec<u32> = v.par_iter().copied().filter(|x| x % 3 == 0).collect();
    assert_eq!(
        kept,
        v.iter().copied().filter(|x| x % 3 == 0).collect::<Vec<_>>(),
        "{what}"
    );

    let (p, log, watch) = probes(3000, &[]);
    let r = panic::catch_unwind(AssertUnwindSafe(|| {
        p.into_par_iter()
            .map(|p| {
                if p.id == 1777 {
                    panic!("s38: battery");
                }
                p
            })
            .collect::<Vec<Probe>>()
    }));
    assert_eq!(msg(&*r.err().expect(what)), "s38: battery", "{what}");
    log.assert_each_once(what);
    assert_eq!(watch.live(), 0, "{what}");

    let mut rng = common::Rng(7);
    let mut a: Vec<u32> = (0..20_000).map(|_| rng.next() as u32 % 5000).collect();
    let mut b = a.clone();
    let mut expected = a.clone();
    expected.sort();
    a.par_sort();
    b.par_sort_unstable();
    assert!(a == expected && b == expected, "{what}: sort");
}

/// The battery from a plain thread with no runtime entered (the global runtime), from
/// a plain thread that entered a 1-worker runtime, inside `block_on`, in a task on a
/// 1-worker and on the 4-worker runtime, in a fiber (whose par closures also sleep
/// with `fiber::sleep`, which may not suspend there), in a `scope`'s job, and nested
/// in an outer parallel iteration.
#[test]
fn the_same_results_wherever_it_runs() {
    quiet();
    common::with_timeout(|| {
        std::thread::spawn(|| battery("plain thread, global runtime"))
            .join()
            .unwrap();
        let rt1 = common::workers(1);
        {
            let h = rt1.handle().clone();
            std::thread::spawn(move || {
                let _e = h.enter();
                battery("plain thread, 1-worker runtime entered")
            })
            .join()
            .unwrap();
        }
        rt1.block_on(async { battery("block_on") });
        rt1.spawn(async { battery("task, 1 worker") })
            .join()
            .unwrap();
        pool()
            .spawn(async { battery("task, 4 workers") })
            .join()
            .unwrap();
        pool()
            .spawn(async {
                weft::time::sleep(Duration::from_millis(1)).await;
                battery("task after an await");
            })
            .join()
            .unwrap();

        let rt2 = common::workers(2);
        let h = common::fiber_on(&rt2, || {
            battery("fiber");
            let n = AtomicUsize::new(0);
            (0..64u32).into_par_iter().for_each(|_| {
                weft::fiber::sleep(Duration::from_micros(200));
                n.fetch_add(1, SEQ);
            });
            n.into_inner()
        });
        assert_eq!(common::join_within(h, 20).unwrap(), 64);
        let h = common::fiber_on(&rt1, || battery("fiber, 1 worker"));
        common::join_within(h, 20).unwrap();

        pool()
            .spawn(async {
                weft::scope(|s| {
                    s.spawn(|_| battery("scope job a"));
                    s.spawn(|_| battery("scope job b"));
                });
                (0..3u32)
                    .into_par_iter()
                    .for_each(|i| battery(&format!("nested {i}")));
            })
            .join()
            .unwrap();
        rt1.spawn(async {
            (0..2u32)
                .into_par_iter()
                .for_each(|i| battery(&format!("nested, 1 worker, {i}")));
        })
        .join()
        .unwrap();
    })
}

/// A panic in a parallel iteration started on a plain thread (its pieces run on the
/// workers) reaches that thread, with its payload; so from a fiber and nested inside
/// another parallel iteration; the runtimes keep working.
#[test]
fn panics_reach_the_caller_from_every_context() {
    quiet();
    fn boom() -> Result<(), String> {
        panic::catch_unwind(|| {
            (0..100_000u32).into_par_iter().for_each(|i| {
                if i == 77_777 {
                    panic!("s38: boom");
                }
            })
        })
        .map_err(|p| msg(&*p))
    }
    common::with_timeout(|| {
        assert_eq!(boom(), Err("s38: boom".into()), "plain thread");
        // A payload that is not a string arrives as it was.
        let r = panic::catch_unwind(|| {
            (0..50_000u32).into_par_iter().for_each(|i| {
                if i == 33_333 {
                    panic::panic_any(0x538_u32);
                }
            })
        });
        assert_eq!(r.unwrap_err().downcast_ref::<u32>(), Some(&0x538));
        let rt = common::workers(2);
        let h = common::fiber_on(&rt, boom);
        assert_eq!(
            common::join_within(h, 20).unwrap(),
            Err("s38: boom".into()),
            "fiber"
        );
        // Uncaught in a fiber: its handle reports the panic.
        let h = common::fiber_on(&rt, || {
            (0..10_000u32).into_par_iter().for_each(|i| {
                if i == 9_999 {
                    panic!("s38: uncaught");
                }
            })
        });
        let e = common::join_within(h, 20).unwrap_err();
        assert!(e.is_panic());
        assert_eq!(msg(&*e.into_panic()), "s38: uncaught");
        // Nested: the inner panic passes through the outer iteration.
        let r = rt
            .spawn(async {
                panic::catch_unwind(|| {
                    (0..8u32).into_par_iter().for_each(|i| {
                        if i == 5 {
                            if let Err(m) = boom() {
                                panic!("{m}");
                            }
                        }
                    })
                })
                .map_err(|p| msg(&*p))
            })
            .join()
            .unwrap();
        assert_eq!(r, Err("s38: boom".into()), "nested");
        assert_eq!(
            rt.spawn(async { (0..1000u64).into_par_iter().sum::<u64>() })
                .join()
                .unwrap(),
            499_500
        );
    })
}

/// The shape of rayon's known deadlock: an outer parallel iteration whose items each
/// hold a lock while an inner parallel iteration runs. A worker waiting in the inner
/// `join` must not pick up another outer item (which would block on the lock its own
/// thread holds). Must finish with the right sum, 1 and 4 workers.
#[test]
fn a_lock_held_across_a_nested_parallel_iteration() {
    quiet();
    common::with_timeout(|| {
        for rt in [common::workers(1), common::workers(4)] {
            let total = rt
                .spawn(async {
                    let lock = std::sync::Mutex::new(0u64);
                    (0..64u64).into_par_iter().for_each(|i| {
                        let mut g = lock.lock().unwrap();
                        *g += (0..20_000u64)
                            .into_par_iter()
                            .map(|x| x % 3 + i)
                            .sum::<u64>();
                    });
                    lock.into_inner().unwrap()
                })
                .join()
                .unwrap();
            let e: u64 = (0..64u64)
                .map(|i| (0..20_000u64).map(|x| x % 3 + i).sum::<u64>())
                .sum();
            assert_eq!(total, e);
        }
    })
}

/// While a parallel iteration over a vector unwinds, the `Drop` of each remaining
/// element runs a parallel iteration of its own (a `join` during unwinding): each of
/// those gives the right answer, every element is dropped once.
#[test]
fn element_drops_run_parallel_iterations_while_unwinding() {
    struct Nested {
        id: usize,
        log: Arc<Log>,
        good: Arc<AtomicUsize>,
    }
    impl Drop for Nested {
        fn drop(&mut self) {
            let s: u64 = (0..3000u64).into_par_iter().sum();
            if s == 2999 * 3000 / 2 {
                self.good.fetch_add(1, SEQ);
            }
            self.log.drops[self.id].fetch_add(1, SEQ);
        }
    }
    on_pool(|| {
        let n = 3000;
        let log = Log::new(n);
        let good = Arc::new(AtomicUsize::new(0));
        let v: Vec<Nested> = (0..n)
            .map(|id| Nested {
                id,
                log: log.clone(),
                good: good.clone(),
            })
            .collect();
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            v.into_par_iter().for_each(|e| {
                if e.id % 1000 == 500 {
                    panic!("s38: unwinding");
                }
            })
        }));
        assert!(r.is_err());
        log.assert_each_once("nested drops");
        assert_eq!(good.load(SEQ), n);
    })
}

/// Plain threads run parallel iterations on one runtime at the same time; then the
/// runtime is dropped (from the test's thread) while one of them is half-way through a
/// long iteration over a vector of probes: it finishes with the right sum, every probe
/// is dropped once, the buffer freed; and iterations started after the drop, through
/// the dead runtime's handle, still give the right answers (on the caller).
#[test]
fn runtime_dropped_during_a_parallel_iteration_from_another_thread() {
    quiet();
    common::with_timeout(|| {
        let rt = common::workers(2);
        let threads: Vec<_> = (0..3u64)
            .map(|k| {
                let h = rt.handle().clone();
                std::thread::spawn(move || {
                    let _e = h.enter();
                    for _ in 0..5 {
                        let s: u64 = (0..40_000u64).into_par_iter().filter(|x| x % 3 == k).sum();
                        let e: u64 = (0..40_000u64).filter(|x| x % 3 == k).sum();
                        assert_eq!(s, e);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }

        let started = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let h = rt.handle().clone();
        let st = started.clone();
        let t = std::thread::spawn(move || {
            let _e = h.enter();
            let (v, log, watch) = probes(4000, &[]);
            let s: usize = v
                .into_par_iter()
                .map(|p| {
                    st.fetch_add(1, SEQ);
                    common::spin_for(Duration::from_micros(50));
                    p.id
                })
                .sum();
            log.assert_each_once("during the drop");
            let freed = watch.live() == 0;
            tx.send(()).unwrap();
            (s, freed)
        });
        common::wait_until("the iteration started", || started.load(SEQ) > 200);
        drop(rt);
        let (s, freed) = t.join().unwrap();
        rx.recv().unwrap();
        assert!(started.load(SEQ) == 4000);
        assert_eq!(s, 3999 * 4000 / 2);
        assert!(freed, "buffer not freed");

        // Through the dead runtime's handle: the work runs on the caller.
        let h2 = common::workers(1).handle().clone();
        let t = std::thread::spawn(move || {
            let _e = h2.enter();
            battery("a dropped runtime's handle");
        });
        t.join().unwrap();
    })
}

// --------------------------------------------- 6. custom consumers and producers

/// A custom consumer over a vector's items (the public plumbing) that keeps its items
/// in its folders and panics in `complete` or in its reducer for some pieces: every
/// item is dropped exactly once (the folders' items, the completed results, the pieces
/// never reached), the buffer is freed.
#[test]
fn custom_consumer_panicking_in_complete_or_reduce() {
    #[derive(Clone, Copy)]
    struct Keep {
        fail: usize, // 0: complete of a piece holding id 4321, 1: reduce, 2: none
    }
    struct KeepFolder {
        fail: usize,
        items: Vec<Probe>,
    }
    impl Consumer<Probe> for Keep {
        type Folder = KeepFolder;
        type Reducer = Keep;
        type Result = Vec<Probe>;
        fn split_at(self, _i: usize) -> (Self, Self, Self) {
            (self, self, self)
        }
        fn into_folder(self) -> KeepFolder {
            KeepFolder {
                fail: self.fail,
                items: Vec::new(),
            }
        }
    }
    impl Folder<Probe> for KeepFolder {
        type Result = Vec<Probe>;
        fn consume(mut self, p: Probe) -> Self {
            self.items.push(p);
            self
        }
        fn complete(self) -> Vec<Probe> {
            if self.fail == 0 && self.items.iter().any(|p| p.id == 4321) {
                panic!("s38: complete");
            }
            self.items
        }
    }
    impl Reducer<Vec<Probe>> for Keep {
        fn reduce(self, mut l: Vec<Probe>, r: Vec<Probe>) -> Vec<Probe> {
            if self.fail == 1 && r.iter().any(|p| p.id == 4321) {
                panic!("s38: reduce");
            }
            l.extend(r);
            l
        }
    }
    on_pool(|| {
        for fail in 0..3 {
            let (v, log, watch) = probes(9000, &[]);
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                v.into_par_iter().drive_unindexed(Keep { fail })
            }));
            match r {
                Ok(out) => {
                    assert_eq!(fail, 2);
                    assert!(out.iter().map(|p| p.id).eq(0..9000));
                }
                Err(p) => assert!(msg(&*p).starts_with("s38:") && fail < 2),
            }
            log.assert_each_once(&format!("fail {fail}"));
            assert_eq!(watch.live(), 0);
        }
    })
}

/// A custom `ProducerCallback` on a vector's producer that splits it, consumes part of
/// one piece and drops the rest unconsumed: every item is dropped exactly once.
#[test]
fn custom_producer_callback_dropping_pieces() {
    struct Partial(usize);
    impl ProducerCallback<Probe> for Partial {
        type Output = Vec<usize>;
        fn callback<P: Producer<Item = Probe>>(self, p: P) -> Vec<usize> {
            let (a, b) = p.split_at(self.0);
            let (b1, b2) = b.split_at(1);
            drop(b2);
            let mut it = a.into_iter();
            let first = it.next().map(|p| p.id);
            drop(it);
            let mut got: Vec<usize> = first.into_iter().collect();
            got.extend(b1.into_iter().map(|p| p.id));
            got
        }
    }
    on_pool(|| {
        for (n, at) in [(10usize, 3usize), (2, 1), (5000, 2500)] {
            let (v, log, watch) = probes(n, &[]);
            let got = v.into_par_iter().with_producer(Partial(at));
            assert_eq!(got, vec![0, at]);
            log.assert_each_once("partial");
            assert_eq!(watch.live(), 0);
        }
        // Through `map` and `with_min_len` too.
        let (v, log, watch) = probes(100, &[]);
        let seen = Mutex::new(Vec::new());
        struct Ids<'a>(&'a Mutex<Vec<usize>>);
        impl ProducerCallback<usize> for Ids<'_> {
            type Output = ();
            fn callback<P: Producer<Item = usize>>(self, p: P) {
                let (a, _b) = p.split_at(50);
                let (_c, d) = a.split_at(25);
                self.0.lock().unwrap().extend(d.into_iter().take(3));
            }
        }
        v.into_par_iter()
            .with_min_len(10)
            .map(|p| p.id)
            .with_producer(Ids(&seen));
        assert_eq!(seen.into_inner().unwrap(), [25, 26, 27]);
        log.assert_each_once("through map");
        assert_eq!(watch.live(), 0);
    })
}

/// A user's producer callback that splits past the end of its piece gets a panic, and
/// nothing else: a vec's items are all dropped (they leaked when the slots were taken
/// before the bounds check) and a range piece yields no integer outside the range (in
/// release builds it wrapped its length and never ended).
#[test]
fn a_split_past_the_end_panics_without_leaking_or_leaving_the_range() {
    struct PastTheEnd;
    impl<T> ProducerCallback<T> for PastTheEnd {
        type Output = usize;
        fn callback<P: Producer<Item = T>>(self, p: P) -> usize {
            let (a, b) = p.split_at(usize::MAX / 2);
            a.into_iter().take(100).count() + b.into_iter().take(100).count()
        }
    }
    on_pool(|| {
        let (v, log, watch) = probes(10, &[]);
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            v.into_par_iter().with_producer(PastTheEnd)
        }));
        assert!(r.is_err(), "a vec piece split past its end");
        log.assert_each_once("split past the end");
        assert_eq!(watch.live(), 0);
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            (0..10u64).into_par_iter().with_producer(PastTheEnd)
        }));
        assert!(r.is_err(), "a range piece split past its end");
    })
}

/// Items that are not `Sync` but `Send` are moved through the pieces (never shared):
/// `Cell`s summed and sorted by value.
#[test]
fn send_but_not_sync_items() {
    on_pool(|| {
        let v: Vec<std::cell::Cell<u32>> = (0..10_000).map(std::cell::Cell::new).collect();
        let s: u64 = v.into_par_iter().map(|c| u64::from(c.get())).sum();
        assert_eq!(s, 9_999 * 10_000 / 2);
        let mut w: Vec<std::cell::Cell<u32>> = (0..20_000u32)
            .map(|i| std::cell::Cell::new(i * 7919 % 20_000))
            .collect();
        w.par_sort_by_key(|c| c.get());
        assert!(w.iter().map(|c| c.get()).eq(0..20_000));
        w.par_sort_unstable_by(|a, b| b.get().cmp(&a.get()));
        assert!(w.iter().map(|c| c.get()).eq((0..20_000).rev()));
        w.par_iter_mut().for_each(|c| c.set(c.get() + 1));
        assert!(w.iter().map(|c| c.get()).eq((1..=20_000).rev()));
    })
}

/// The module documentation: "An input too small to be split at all is processed on the
/// calling thread" (from a plain thread, with and without a runtime entered): a single
/// item, an input under `2 * min_len`, and a sort below the cut-offs.
#[test]
fn inputs_too_small_to_split_run_on_the_calling_thread() {
    quiet();
    let rt = common::workers(2);
    let h = rt.handle().clone();
    common::with_timeout(move || {
        for entered in [false, true] {
            let h = h.clone();
            std::thread::Builder::new()
                .name("s38-caller".into())
                .spawn(move || {
                    let _e = entered.then(|| h.enter());
                    let names = Mutex::new(Vec::new());
                    let note = |_: &u32| {
                        names
                            .lock()
                            .unwrap()
                            .push(std::thread::current().name().map(str::to_owned));
                    };
                    [7u32].par_iter().for_each(note);
                    (0..50u32)
                        .into_par_iter()
                        .with_min_len(26)
                        .for_each(|x| note(&x));
                    let v: Vec<u32> = (0..100).collect();
                    v.par_iter().with_min_len(51).for_each(note);
                    let mut s: Vec<u32> = (0..1000).rev().collect();
                    s.par_sort_by(|a, b| {
                        note(a);
                        a.cmp(b)
                    });
                    s.par_sort_unstable_by(|a, b| {
                        note(a);
                        b.cmp(a)
                    });
                    let names = names.into_inner().unwrap();
                    assert!(names.len() > 151, "entered {entered}");
                    let elsewhere = names
                        .iter()
                        .filter(|n| n.as_deref() != Some("s38-caller"))
                        .count();
                    assert_eq!(elsewhere, 0, "entered {entered}: ran on another thread");
                })
                .unwrap()
                .join()
                .unwrap();
        }
    });
    drop(rt);
}

/// Closures that wait (`weft::wait`) on tasks they spawn, from a parallel iteration in
/// a task and in a fiber, on 1 and 2 workers: the worker inside the `join` helps (runs
/// the spawned tasks) instead of blocking, so the iteration finishes, in order.
#[test]
fn closures_waiting_on_spawned_tasks() {
    quiet();
    common::with_timeout(|| {
        for n in [1, 2] {
            let rt = common::workers(n);
            let work = || {
                (0..40u64)
                    .into_par_iter()
                    .map(|i| weft::wait(weft::spawn(async move { i * 2 })).unwrap())
                    .collect::<Vec<u64>>()
            };
            let expected: Vec<u64> = (0..40).map(|i| i * 2).collect();
            assert_eq!(
                rt.spawn(async move { work() }).join().unwrap(),
                expected,
                "{n} workers, task"
            );
            let h = common::fiber_on(&rt, work);
            assert_eq!(
                common::join_within(h, 20).unwrap(),
                expected,
                "{n} workers, fiber"
            );
        }
    })
}

/// Comparisons that run parallel iterations of their own (a `join` inside the sorts'
/// joins, every 64th call), one of which panics after a while: the sorts give the right
/// order when nothing panics, and a permutation with every mark when one does.
#[test]
fn sorts_whose_comparison_runs_a_parallel_iteration() {
    on_pool(|| {
        for stable in [true, false] {
            for panic_at in [None, Some(2000usize)] {
                let what = format!("stable {stable} panic at {panic_at:?}");
                let (mut v, log) = elems(20_000, 1, 5);
                let calls = AtomicUsize::new(0);
                let nested = AtomicUsize::new(0);
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    sort_with(stable, &mut v, &|a, b| {
                        if calls.fetch_add(1, SEQ) & 63 == 0 {
                            let k = nested.fetch_add(1, SEQ);
                            let s: u32 = (0..8u32)
                                .into_par_iter()
                                .map(|x| {
                                    if Some(k) == panic_at && x == 5 {
                                        panic!("s38: nested in a comparison");
                                    }
                                    x
                                })
                                .sum();
                            assert_eq!(s, 28);
                        }
                        a.key.cmp(&b.key)
                    })
                }));
                assert_eq!(r.is_err(), panic_at.is_some(), "{what}");
                assert_permutation(&v, &log, &what);
                assert_marks(&v, calls.load(SEQ), &what);
                if r.is_ok() {
                    assert!(
                        v.windows(2).all(|w| w[0].key <= w[1].key),
                        "{what}: unsorted"
                    );
                }
            }
        }
    })
}

/// `par_chunks` and `par_chunks_mut` (with and without `with_min_len`) at lengths and
/// chunk sizes around the fold's chunks: the same chunks as `slice::chunks`, in order,
/// each written by exactly one closure.
#[test]
fn chunks_match_the_sequential_chunks() {
    on_pool(|| {
        for len in [0usize, 1, 2, 1023, 1025, 3000, 70_001] {
            let v: Vec<u32> = (0..len as u32).collect();
            for size in [1usize, 2, 7, 1024, 1025, len.max(1), len + 1, usize::MAX] {
                for min in [1usize, 3, 1000] {
                    let what = format!("len {len} size {size} min {min}");
                    let seq: Vec<(u32, usize)> = v
                        .chunks(size)
                        .map(|c| (c.first().copied().unwrap_or(0), c.len()))
                        .collect();
                    let par: Vec<(u32, usize)> = v
                        .par_chunks(size)
                        .with_min_len(min)
                        .map(|c| (c.first().copied().unwrap_or(0), c.len()))
                        .collect();
                    assert_eq!(par, seq, "{what}");
                    let mut w = vec![u32::MAX; len];
                    let n = AtomicUsize::new(0);
                    w.par_chunks_mut(size).with_min_len(min).for_each(|c| {
                        n.fetch_add(1, SEQ);
                        for x in c.iter_mut() {
                            assert_eq!(*x, u32::MAX, "{what}: written twice");
                            *x = 1;
                        }
                    });
                    assert_eq!(n.into_inner(), seq.len(), "{what}");
                    assert!(w.iter().all(|&x| x == 1), "{what}: not written");
                }
            }
        }
    })
}
