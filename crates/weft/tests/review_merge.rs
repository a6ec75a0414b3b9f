//! Adversarial review, from safe code only, of the two-ended sequential merge behind the
//! stable parallel sorts (`par_sort`, `par_sort_by`, `par_sort_by_key`), commit 79dc69d.
//!
//! With 1..3 workers the merge sort's leaves are 4,096 elements (`MERGESORT_LEAF`) and
//! merges of up to 8,192 elements run sequentially (`MERGE_SEQUENTIAL`): the lengths
//! here cross both cut-offs, so that the sequential merge runs at the top level, under
//! a parallel (split) merge, and on the small pieces a split leaves.
//!
//! Every element is tracked: an id, a per-test live count, a panic on a second drop, and
//! marks that the comparison leaves on both its arguments through an atomic (a mark
//! made on a copy that the merge later discards would be lost).

mod common;

use common::{live, on_runtime, Rng, Tracked};

use std::cmp::Ordering as CmpOrdering;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use weft::prelude::*;

/// A tracked element: key, id, the comparison's marks.
struct Elem {
    key: u32,
    id: u32,
    marks: AtomicU32,
    t: Tracked,
}

fn elems(keys: &[u32], live: &Arc<AtomicUsize>) -> Vec<Elem> {
    keys.iter()
        .enumerate()
        .map(|(i, &key)| Elem {
            key,
            id: i as u32,
            marks: AtomicU32::new(0),
            t: Tracked::new(i, live),
        })
        .collect()
}

/// Keys of length `len` in one of several shapes that make the merges interesting.
fn shaped_keys(len: usize, shape: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng(seed | 1);
    let half = len / 2;
    match shape {
        // Random, few distinct keys (many ties: stability).
        0 => (0..len).map(|_| (rng.next() % 3) as u32).collect(),
        // Random, many keys.
        1 => (0..len).map(|_| (rng.next() % 1_000_000) as u32).collect(),
        // Two ascending halves, interleaved keys: every merge step alternates runs.
        2 => (0..len)
            .map(|i| {
                if i < half {
                    2 * i as u32
                } else {
                    2 * (i - half) as u32 + 1
                }
            })
            .collect(),
        // Left half ascending; right half ascending, all larger except for 1, 2 or 3
        // small ones (runs of 1/2/3 elements on one side of some merges).
        3..=5 => {
            let few = shape - 2;
            let mut k: Vec<u32> = (0..len as u32).map(|i| i + 10).collect();
            for j in 0..few {
                k[half + j] = j as u32 * 5;
            }
            k
        }
        // Equal keys everywhere except descending blocks: not presorted.
        6 => (0..len).map(|i| ((len - i) / 1000) as u32 % 4).collect(),
        // Organ pipe with ties.
        _ => (0..len).map(|i| (i.min(len - i) / 3) as u32).collect(),
    }
}

fn assert_stable(v: &[Elem], keys: &[u32], what: &str) {
    let mut expected: Vec<(u32, u32)> = keys
        .iter()
        .enumerate()
        .map(|(i, &k)| (k, i as u32))
        .collect();
    expected.sort_by_key(|p| p.0);
    for (i, (e, x)) in v.iter().zip(&expected).enumerate() {
        assert!(
            (e.key, e.id) == *x,
            "{what}: at {i} got ({}, {}), a stable sort gives {x:?}",
            e.key,
            e.id
        );
    }
    assert_eq!(v.len(), expected.len());
}

fn assert_permutation(v: &[Elem], len: usize, what: &str) {
    let mut seen = vec![false; len];
    for e in v {
        assert!(e.t.alive, "{what}: a dead element is in the slice");
        assert!(!seen[e.id as usize], "{what}: element {} twice", e.id);
        seen[e.id as usize] = true;
    }
    assert_eq!(v.len(), len);
}

fn total_marks(v: &[Elem]) -> u64 {
    v.iter()
        .map(|e| e.marks.load(Ordering::Relaxed) as u64)
        .sum()
}

/// The stable sorts, on every shape and on lengths around both cut-offs: the result is
/// the standard stable sort's, and every mark the comparison made is in the result.
#[test]
fn stable_and_marks_kept_across_cutoffs_1_worker() {
    stable_and_marks_kept_across_cutoffs(1);
}

#[test]
fn stable_and_marks_kept_across_cutoffs_2_workers() {
    stable_and_marks_kept_across_cutoffs(2);
}

#[test]
fn stable_and_marks_kept_across_cutoffs_3_workers() {
    stable_and_marks_kept_across_cutoffs(3);
}

fn stable_and_marks_kept_across_cutoffs(workers: usize) {
    {
        on_runtime(workers, move || {
            for len in [4095usize, 4097, 5000, 8191, 8193, 12_289, 20_000] {
                for shape in 0..8 {
                    let keys = shaped_keys(len, shape, len as u64 * 8 + shape as u64);
                    let live = live();
                    let what = format!("{workers} workers, len {len}, shape {shape}");
                    let calls = AtomicUsize::new(0);
                    let mut v = elems(&keys, &live);
                    v.par_sort_by(|a, b| {
                        calls.fetch_add(1, Ordering::Relaxed);
                        a.marks.fetch_add(1, Ordering::Relaxed);
                        b.marks.fetch_add(1, Ordering::Relaxed);
                        a.key.cmp(&b.key)
                    });
                    assert_stable(&v, &keys, &what);
                    assert_eq!(
                        total_marks(&v),
                        2 * calls.load(Ordering::Relaxed) as u64,
                        "{what}: a comparison's mark was lost"
                    );
                    drop(v);
                    // The other entry point on the same data.
                    let mut v = elems(&keys, &live);
                    v.par_sort_by_key(|e| e.key);
                    assert_stable(&v, &keys, &what);
                    drop(v);
                    assert_eq!(live.load(Ordering::SeqCst), 0, "{what}");
                }
            }
        });
    }
}

/// `par_sort` on a type ordered by key only (ids tell equal elements apart).
#[test]
fn par_sort_on_ord_type_is_stable() {
    #[derive(Debug, Clone, Copy)]
    struct K(u32, u32);
    impl PartialEq for K {
        fn eq(&self, o: &Self) -> bool {
            self.0 == o.0
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
            self.0.cmp(&o.0)
        }
    }
    on_runtime(2, || {
        for len in [4097usize, 8193, 16_385] {
            for shape in [0usize, 2, 3, 5, 6] {
                let keys = shaped_keys(len, shape, 77 + len as u64);
                let mut v: Vec<K> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, &k)| K(k, i as u32))
                    .collect();
                v.par_sort();
                let mut expected = v.clone();
                expected.sort_by_key(|k| (k.0, k.1));
                assert!(
                    v.iter()
                        .zip(&expected)
                        .all(|(a, b)| a.0 == b.0 && a.1 == b.1),
                    "len {len} shape {shape}: not stably sorted"
                );
            }
        }
    });
}

/// A comparison that panics at one call, at indices spread over the whole sort and at
/// each of the last few hundred calls (the top-level merge, sequential or split):
/// afterwards the slice holds every element exactly once, alive, with every mark, and
/// dropping it drops each exactly once.
#[test]
fn panic_at_many_call_indices_keeps_a_permutation_and_marks_1_worker() {
    panic_at_many_call_indices(1);
}

#[test]
fn panic_at_many_call_indices_keeps_a_permutation_and_marks_2_workers() {
    panic_at_many_call_indices(2);
}

fn panic_at_many_call_indices(workers: usize) {
    {
        on_runtime(workers, move || {
            for (len, shape) in [(6000usize, 0usize), (9000, 2), (8193, 4), (5000, 1)] {
                let keys = shaped_keys(len, shape, 5 + len as u64);
                let live = live();
                // A clean run for the number of comparisons.
                let total = {
                    let calls = AtomicUsize::new(0);
                    let mut v = elems(&keys, &live);
                    v.par_sort_by(|a, b| {
                        calls.fetch_add(1, Ordering::Relaxed);
                        a.key.cmp(&b.key)
                    });
                    calls.into_inner()
                };
                let mut points: Vec<usize> = (0..20).map(|k| k * total / 20).collect();
                points.extend((1..=40).map(|k| total.saturating_sub(k)));
                points.extend((1..=20).map(|k| total.saturating_sub(k * 97)));
                for p in points {
                    let what = format!(
                        "{workers} workers, len {len}, shape {shape}, panic at {p}/{total}"
                    );
                    let mut v = elems(&keys, &live);
                    let calls = AtomicUsize::new(0);
                    let r = panic::catch_unwind(AssertUnwindSafe(|| {
                        v.par_sort_by(|a, b| {
                            assert!(a.t.alive && b.t.alive, "compared a dropped element");
                            a.marks.fetch_add(1, Ordering::Relaxed);
                            b.marks.fetch_add(1, Ordering::Relaxed);
                            if calls.fetch_add(1, Ordering::Relaxed) == p {
                                panic!("comparison panics on purpose");
                            }
                            a.key.cmp(&b.key)
                        })
                    }));
                    // With two workers the call order varies from run to run, and a run
                    // may make fewer comparisons than the clean one.
                    if workers == 1 {
                        assert!(r.is_err(), "{what}: the panic was lost");
                    }
                    assert_permutation(&v, len, &what);
                    assert_eq!(
                        total_marks(&v),
                        2 * calls.load(Ordering::Relaxed) as u64,
                        "{what}: a comparison's mark was lost"
                    );
                    assert_eq!(live.load(Ordering::SeqCst), len, "{what}");
                    drop(v);
                    assert_eq!(
                        live.load(Ordering::SeqCst),
                        0,
                        "{what}: leak or double drop"
                    );
                }
            }
        });
    }
}

/// Comparisons that are not a total order: random answers, always Less, always
/// Greater, always Equal, "less" both ways for some pairs, a cyclic order, and one that
/// changes the keys it compares (through atomics) as it goes. Any order may come out
/// (the standard sort in the leaves may also panic on a detected violation), but every
/// element exactly once, every mark kept, nothing dropped; always-Equal must keep the
/// input order.
#[test]
fn inconsistent_comparisons_keep_a_permutation() {
    struct Mut {
        key: AtomicU32,
        id: u32,
        marks: AtomicU32,
        t: Tracked,
    }
    for workers in [1usize, 2] {
        on_runtime(workers, move || {
            for len in [4097usize, 8193, 12_000] {
                for kind in 0..7usize {
                    let live = live();
                    let mut rng = Rng(len as u64 + kind as u64);
                    let mut v: Vec<Mut> = (0..len)
                        .map(|i| Mut {
                            key: AtomicU32::new((rng.next() % 100) as u32),
                            id: i as u32,
                            marks: AtomicU32::new(0),
                            t: Tracked::new(i, &live),
                        })
                        .collect();
                    let state = AtomicUsize::new(kind * 7 + len);
                    let calls = AtomicUsize::new(0);
                    let r = panic::catch_unwind(AssertUnwindSafe(|| {
                        v.par_sort_by(|a, b| {
                            assert!(a.t.alive && b.t.alive);
                            calls.fetch_add(1, Ordering::Relaxed);
                            a.marks.fetch_add(1, Ordering::Relaxed);
                            b.marks.fetch_add(1, Ordering::Relaxed);
                            let (ka, kb) =
                                (a.key.load(Ordering::Relaxed), b.key.load(Ordering::Relaxed));
                            match kind {
                                0 => {
                                    let s = state.fetch_add(0x9E37_79B9, Ordering::Relaxed);
                                    [CmpOrdering::Less, CmpOrdering::Equal, CmpOrdering::Greater]
                                        [(s.wrapping_mul(0x2545_F491) >> 9) % 3]
                                }
                                1 => CmpOrdering::Less,
                                2 => CmpOrdering::Greater,
                                3 => CmpOrdering::Equal,
                                // a < b and b < a whenever the ids differ in parity.
                                4 => {
                                    if (a.id ^ b.id) & 1 == 1 {
                                        CmpOrdering::Less
                                    } else {
                                        ka.cmp(&kb)
                                    }
                                }
                                5 => match (ka + 100 - kb) % 100 {
                                    0 => CmpOrdering::Equal,
                                    d if d < 50 => CmpOrdering::Greater,
                                    _ => CmpOrdering::Less,
                                },
                                // Moves the keys it compares: the order changes under
                                // the sort's feet.
                                _ => {
                                    a.key.fetch_add(1, Ordering::Relaxed);
                                    b.key.store(kb.wrapping_mul(7) % 100, Ordering::Relaxed);
                                    ka.cmp(&kb)
                                }
                            }
                        })
                    }));
                    let what = format!("{workers} workers, len {len}, comparison {kind}");
                    if kind == 3 {
                        assert!(r.is_ok(), "{what}");
                        assert!(
                            v.iter().enumerate().all(|(i, e)| e.id == i as u32),
                            "{what}: all-equal did not keep the input order"
                        );
                    }
                    let mut seen = vec![false; len];
                    for e in &v {
                        assert!(!seen[e.id as usize], "{what}: element {} twice", e.id);
                        seen[e.id as usize] = true;
                    }
                    let marks: u64 = v
                        .iter()
                        .map(|e| e.marks.load(Ordering::Relaxed) as u64)
                        .sum();
                    assert_eq!(
                        marks,
                        2 * calls.load(Ordering::Relaxed) as u64,
                        "{what}: lost mark"
                    );
                    assert_eq!(live.load(Ordering::SeqCst), len, "{what}");
                    drop(v);
                    assert_eq!(live.load(Ordering::SeqCst), 0, "{what}");
                }
            }
        });
    }
}

/// 512-byte elements: stable, and each element's payload intact (no torn or mixed
/// copies), with a clean run and with a panic late in the sort.
#[test]
fn huge_elements_are_moved_whole() {
    fn check_payload(e: &[u64; 64]) {
        for (w, &x) in e.iter().enumerate().skip(2) {
            assert_eq!(
                x,
                e[1].wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ w as u64,
                "torn element {}",
                e[1]
            );
        }
    }
    on_runtime(2, || {
        for len in [4097usize, 9000] {
            let mut rng = Rng(len as u64);
            let make = |rng: &mut Rng| -> Vec<[u64; 64]> {
                (0..len)
                    .map(|i| {
                        let mut e = [0u64; 64];
                        e[0] = rng.next() % 5;
                        e[1] = i as u64;
                        for (w, x) in e.iter_mut().enumerate().skip(2) {
                            *x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ w as u64;
                        }
                        e
                    })
                    .collect()
            };
            let mut v = make(&mut rng);
            let mut expected = v.clone();
            expected.sort_by_key(|e| e[0]);
            v.par_sort_by_key(|e| e[0]);
            assert!(v == expected, "len {len}: not the stable order");
            v.iter().for_each(check_payload);

            let mut v = make(&mut rng);
            let calls = AtomicUsize::new(0);
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                v.par_sort_by(|a, b| {
                    if calls.fetch_add(1, Ordering::Relaxed) == 60_000 {
                        panic!("late panic");
                    }
                    a[0].cmp(&b[0])
                })
            }));
            let _ = r;
            v.iter().for_each(check_payload);
            let mut ids: Vec<u64> = v.iter().map(|e| e[1]).collect();
            ids.sort_unstable();
            assert!(
                ids.iter().enumerate().all(|(i, &id)| id == i as u64),
                "len {len}: not a permutation"
            );
        }
    });
}

/// Elements whose `Drop` panics unless disarmed: the sort (clean or after a panicking
/// comparison) never drops an element, so no such panic can come out of it.
#[test]
fn sort_never_drops_an_element() {
    static ARMED: AtomicBool = AtomicBool::new(false);
    struct Bomb {
        key: u32,
        id: u32,
    }
    impl Drop for Bomb {
        fn drop(&mut self) {
            if ARMED.load(Ordering::SeqCst) {
                panic!("element {} dropped during the sort", self.id);
            }
        }
    }
    on_runtime(2, || {
        for (len, panic_at) in [
            (9000usize, None),
            (9000, Some(100_000usize)),
            (5000, Some(50_000)),
        ] {
            let mut rng = Rng(len as u64 + 3);
            let mut v: Vec<Bomb> = (0..len)
                .map(|i| Bomb {
                    key: (rng.next() % 7) as u32,
                    id: i as u32,
                })
                .collect();
            let calls = AtomicUsize::new(0);
            ARMED.store(true, Ordering::SeqCst);
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                v.par_sort_by(|a, b| {
                    if Some(calls.fetch_add(1, Ordering::Relaxed)) == panic_at {
                        panic!("comparison panics");
                    }
                    a.key.cmp(&b.key)
                })
            }));
            ARMED.store(false, Ordering::SeqCst);
            if let Err(payload) = r {
                let msg = common::panic_message(&*payload).unwrap_or_default();
                assert_eq!(msg, "comparison panics", "len {len}");
            }
            let mut ids: Vec<u32> = v.iter().map(|b| b.id).collect();
            ids.sort_unstable();
            assert!(
                ids.iter().enumerate().all(|(i, &id)| id == i as u32),
                "len {len}"
            );
            if panic_at.is_none() {
                assert!(v
                    .windows(2)
                    .all(|w| (w[0].key, w[0].id) < (w[1].key, w[1].id)));
            }
        }
    });
}

/// Zero-sized elements with a destructor through the stable sorts, every comparison
/// shape: none lost, none dropped twice.
#[test]
fn zero_sized_elements_with_drop() {
    static ZLIVE: AtomicUsize = AtomicUsize::new(0);
    struct Z;
    impl Drop for Z {
        fn drop(&mut self) {
            ZLIVE.fetch_sub(1, Ordering::SeqCst);
        }
    }
    on_runtime(2, || {
        for answer in [CmpOrdering::Less, CmpOrdering::Equal, CmpOrdering::Greater] {
            ZLIVE.fetch_add(10_000, Ordering::SeqCst);
            let mut v: Vec<Z> = (0..10_000).map(|_| Z).collect();
            let calls = AtomicUsize::new(0);
            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                v.par_sort_by(|_, _| {
                    if calls.fetch_add(1, Ordering::Relaxed) == 5000 {
                        panic!("zst");
                    }
                    answer
                })
            }));
            assert_eq!(v.len(), 10_000);
            assert_eq!(ZLIVE.load(Ordering::SeqCst), 10_000);
            drop(v);
            assert_eq!(ZLIVE.load(Ordering::SeqCst), 0);
        }
    });
}

/// Two stable sorts side by side in `weft::join`, each with a comparison that marks and
/// sometimes panics: both slices stay permutations with every mark.
#[test]
fn sorts_inside_join_both_arms() {
    on_runtime(3, || {
        let live = live();
        for p in [None, Some(30_000usize), Some(90_000)] {
            let keys_a = shaped_keys(10_000, 0, 1);
            let keys_b = shaped_keys(9_000, 2, 2);
            let mut a = elems(&keys_a, &live);
            let mut b = elems(&keys_b, &live);
            let sort = |v: &mut Vec<Elem>| {
                let calls = AtomicUsize::new(0);
                let r = panic::catch_unwind(AssertUnwindSafe(|| {
                    v.par_sort_by(|x, y| {
                        x.marks.fetch_add(1, Ordering::Relaxed);
                        y.marks.fetch_add(1, Ordering::Relaxed);
                        if Some(calls.fetch_add(1, Ordering::Relaxed)) == p {
                            panic!("arm panics");
                        }
                        x.key.cmp(&y.key)
                    })
                }));
                (r.is_ok(), calls.into_inner())
            };
            let ((ok_a, calls_a), (ok_b, calls_b)) = weft::join(|| sort(&mut a), || sort(&mut b));
            assert_permutation(&a, keys_a.len(), "arm a");
            assert_permutation(&b, keys_b.len(), "arm b");
            assert_eq!(total_marks(&a), 2 * calls_a as u64, "arm a: lost mark");
            assert_eq!(total_marks(&b), 2 * calls_b as u64, "arm b: lost mark");
            if ok_a {
                assert_stable(&a, &keys_a, "arm a");
            }
            if ok_b {
                assert_stable(&b, &keys_b, "arm b");
            }
            drop((a, b));
            assert_eq!(live.load(Ordering::SeqCst), 0);
        }
    });
}
