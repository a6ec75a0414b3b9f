//! Parallel iterators and parallel sorts, checked against their sequential results.
//!
//! Every parallel operation runs inside a task on a shared 4-worker runtime (where
//! fork-join spreads work over the workers), under the common hang timeout.

mod common;

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use proptest::prelude::*;
use weft::par::plumbing::{Consumer, Folder, Reducer};
use weft::par::prelude::*;

fn pool() -> &'static weft::Runtime {
    static RT: OnceLock<weft::Runtime> = OnceLock::new();
    RT.get_or_init(|| common::workers(4))
}

/// Runs `f` in a task on the shared runtime's workers and returns its result,
/// re-raising its panic.
fn on_pool<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    common::with_timeout(move || match pool().spawn(async move { f() }).join() {
        Ok(value) => value,
        Err(err) => panic::resume_unwind(err.into_panic()),
    })
}

fn small_i64() -> impl Strategy<Value = i64> {
    -1_000_000_000i64..1_000_000_000
}

fn vec_i64() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(small_i64(), 0..2000)
}

/// An item ordered by `key` only, to tell equal items apart by `idx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Keyed {
    key: i8,
    idx: usize,
}

impl PartialOrd for Keyed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Keyed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

/// Owns a string and counts its drops; a second drop of the same value is detected.
struct Tracked {
    idx: usize,
    s: String,
    drops: Arc<AtomicUsize>,
    dropped: bool,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        assert!(!self.dropped, "double drop of {:?}", self.s);
        self.dropped = true;
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn tracked(strings: &[String], drops: &Arc<AtomicUsize>) -> Vec<Tracked> {
    strings
        .iter()
        .enumerate()
        .map(|(idx, s)| Tracked {
            idx,
            s: s.clone(),
            drops: drops.clone(),
            dropped: false,
        })
        .collect()
}

// ---- a consumer that records the size of every sequential piece ----

struct Pieces(Arc<Mutex<Vec<usize>>>);
struct PieceFolder(Arc<Mutex<Vec<usize>>>, usize);
struct NoReduce;

impl<T> Consumer<T> for Pieces {
    type Folder = PieceFolder;
    type Reducer = NoReduce;
    type Result = ();

    fn split_at(self, _index: usize) -> (Self, Self, NoReduce) {
        (Pieces(self.0.clone()), Pieces(self.0), NoReduce)
    }

    fn into_folder(self) -> PieceFolder {
        PieceFolder(self.0, 0)
    }
}

impl<T> Folder<T> for PieceFolder {
    type Result = ();

    fn consume(self, _item: T) -> Self {
        PieceFolder(self.0, self.1 + 1)
    }

    fn complete(self) {
        self.0.lock().unwrap().push(self.1);
    }
}

impl Reducer<()> for NoReduce {
    fn reduce(self, _left: (), _right: ()) {}
}

/// The sizes of the sequential pieces `(0..len).with_min_len(min)` is cut into.
fn piece_sizes(len: usize, min: usize) -> Vec<usize> {
    on_pool(move || {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        (0..len)
            .into_par_iter()
            .with_min_len(min)
            .drive_unindexed(Pieces(sizes.clone()));
        let sizes = sizes.lock().unwrap().clone();
        sizes
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn map_sum(v in vec_i64()) {
        let expected: i64 = v.iter().map(|x| x * 3 - 1).sum();
        let got = on_pool(move || v.par_iter().map(|x| x * 3 - 1).sum::<i64>());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn float_sum(v in prop::collection::vec(-1000i32..1000, 0..2000)) {
        // Integer-valued floats: every partial sum is exact, so grouping does not matter.
        let expected: f64 = v.iter().map(|&x| f64::from(x)).sum();
        let got = on_pool(move || v.par_iter().map(|&x| f64::from(x)).sum::<f64>());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn filter_count(v in vec_i64(), m in 1i64..10) {
        let expected = v.iter().filter(|x| *x % m == 0).count();
        let got = on_pool(move || v.par_iter().filter(|x| **x % m == 0).count());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn filter_collect_keeps_order(v in vec_i64(), m in 1i64..5) {
        let expected: Vec<i64> = v.iter().copied().filter(|x| x % m != 0).collect();
        let got: Vec<i64> = on_pool(move || v.par_iter().copied().filter(|x| x % m != 0).collect());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn map_collect_keeps_order(v in vec_i64()) {
        let expected: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        let got: Vec<String> = on_pool(move || v.par_iter().map(|x| x.to_string()).collect());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn reduce_is_ordered(v in vec_i64()) {
        // Concatenation is associative but not commutative: any reordering shows.
        let expected = v.clone();
        let got = on_pool(move || {
            v.par_iter()
                .map(|&x| vec![x])
                .reduce(Vec::new, |mut a, mut b| {
                    a.append(&mut b);
                    a
                })
        });
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn reduce_sum_and_reduce_with(v in vec_i64()) {
        let expected: i64 = v.iter().sum();
        let expected_with = v.iter().copied().reduce(|a, b| a + b);
        let (got, got_with) = on_pool(move || {
            (
                v.par_iter().copied().reduce(|| 0, |a, b| a + b),
                v.par_iter().copied().reduce_with(|a, b| a + b),
            )
        });
        prop_assert_eq!(got, expected);
        prop_assert_eq!(got_with, expected_with);
    }

    #[test]
    fn min_max_match_std(keys in prop::collection::vec(-5i8..5, 0..2000)) {
        let items: Vec<Keyed> = keys.iter().enumerate().map(|(idx, &key)| Keyed { key, idx }).collect();
        // std: the first of equal minima, the last of equal maxima.
        let expected = (items.iter().copied().min(), items.iter().copied().max());
        let got = on_pool(move || {
            (items.par_iter().copied().min(), items.par_iter().copied().max())
        });
        prop_assert_eq!(got.0.map(|k| k.idx), expected.0.map(|k| k.idx));
        prop_assert_eq!(got.1.map(|k| k.idx), expected.1.map(|k| k.idx));
    }

    #[test]
    fn min_max_i64(v in vec_i64()) {
        let expected = (v.iter().min().copied(), v.iter().max().copied());
        let got = on_pool(move || (v.par_iter().min().copied(), v.par_iter().max().copied()));
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn par_iter_mut_updates_every_item(v in vec_i64()) {
        let expected: Vec<i64> = v.iter().map(|x| x / 2 + 7).collect();
        let got = on_pool(move || {
            let mut v = v;
            v.par_iter_mut().for_each(|x| *x = *x / 2 + 7);
            v
        });
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn par_iter_mut_on_slices_and_chunks(v in vec_i64(), chunk in 1usize..100) {
        let mut expected = v.clone();
        for c in expected.chunks_mut(chunk) {
            c[0] = c.len() as i64;
        }
        let sums: Vec<i64> = v.chunks(chunk).map(|c| c.iter().sum()).collect();
        let got = on_pool(move || {
            let mut v = v;
            let sums: Vec<i64> = v.par_chunks(chunk).map(|c| c.iter().sum()).collect();
            v.as_mut_slice().par_chunks_mut(chunk).for_each(|c| c[0] = c.len() as i64);
            (v, sums)
        });
        prop_assert_eq!(got.0, expected);
        prop_assert_eq!(got.1, sums);
    }

    #[test]
    fn vec_into_par_iter_moves_each_item_once(
        strings in prop::collection::vec("[a-z]{0,8}", 0..500),
        keep in 1usize..4,
    ) {
        let drops = Arc::new(AtomicUsize::new(0));
        let items = tracked(&strings, &drops);
        let expected: Vec<String> = strings
            .iter()
            .enumerate()
            .filter(|(i, _)| i % keep == 0)
            .map(|(_, s)| format!("{s}!"))
            .collect();
        let got: Vec<String> = on_pool(move || {
            items
                .into_par_iter()
                .filter(|t| t.idx % keep == 0)
                .map(|t| format!("{}!", t.s))
                .collect()
        });
        prop_assert_eq!(got, expected);
        prop_assert_eq!(drops.load(Ordering::SeqCst), strings.len());
    }

    #[test]
    fn vec_into_par_iter_panic_drops_the_rest(n in 0usize..500, at in 0usize..500) {
        let drops = Arc::new(AtomicUsize::new(0));
        let strings: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let items = tracked(&strings, &drops);
        let panicked = on_pool(move || {
            panic::catch_unwind(AssertUnwindSafe(|| {
                items.into_par_iter().for_each(|t| {
                    if t.s == at.to_string() {
                        panic!("consumer panicked on purpose");
                    }
                })
            }))
            .is_err()
        });
        prop_assert_eq!(panicked, at < n);
        prop_assert_eq!(drops.load(Ordering::SeqCst), n);
    }

    #[test]
    fn ranges_match_sequential(a in -300i64..300, b in -300i64..300) {
        let expected: Vec<i64> = (a..b).collect();
        let expected_incl: Vec<i64> = (a..=b).collect();
        let got = on_pool(move || {
            let v: Vec<i64> = (a..b).into_par_iter().collect();
            let w: Vec<i64> = (a..=b).into_par_iter().collect();
            (v, w)
        });
        prop_assert_eq!(got.0, expected);
        prop_assert_eq!(got.1, expected_incl);
    }

    #[test]
    fn ranges_of_every_type(a in 0u8..=255, b in 0u8..=255) {
        let expected: i128 = (a..b).map(i128::from).sum::<i128>() + (a..=b).map(i128::from).sum::<i128>();
        let got = on_pool(move || {
            let mut total = 0i128;
            total += (a..b).into_par_iter().map(i128::from).sum::<i128>();
            total += (a..=b).into_par_iter().map(i128::from).sum::<i128>();
            total
        });
        prop_assert_eq!(got, expected);
        let (a16, b16) = (u16::from(a) * 200, u16::from(b) * 200);
        let (a32, b32) = (i32::from(a) - 128, i32::from(b) - 128);
        let expected = (
            (a16..b16).count() + (a16..=b16).count(),
            (a32..b32).map(i64::from).sum::<i64>() + (a32..=b32).map(i64::from).sum::<i64>(),
            (u64::from(a)..u64::from(b)).sum::<u64>(),
            (usize::from(a)..=usize::from(b)).sum::<usize>(),
            (isize::from(a) - 200..isize::from(b)).map(|x| x as i64).sum::<i64>(),
            (u32::from(a)..=u32::from(b)).count(),
        );
        let got = on_pool(move || (
            (a16..b16).into_par_iter().count() + (a16..=b16).into_par_iter().count(),
            (a32..b32).into_par_iter().map(i64::from).sum::<i64>()
                + (a32..=b32).into_par_iter().map(i64::from).sum::<i64>(),
            (u64::from(a)..u64::from(b)).into_par_iter().sum::<u64>(),
            (usize::from(a)..=usize::from(b)).into_par_iter().sum::<usize>(),
            (isize::from(a) - 200..isize::from(b)).into_par_iter().map(|x| x as i64).sum::<i64>(),
            (u32::from(a)..=u32::from(b)).into_par_iter().count(),
        ));
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn par_sort_matches_std(v in vec_i64()) {
        let mut expected = v.clone();
        expected.sort();
        let got = on_pool(move || {
            let mut a = v.clone();
            a.par_sort();
            let mut b = v;
            b.par_sort_unstable();
            (a, b)
        });
        prop_assert_eq!(&got.0, &expected);
        prop_assert_eq!(&got.1, &expected);
    }

    #[test]
    fn par_sort_by_and_by_key_are_stable(keys in prop::collection::vec(-20i8..20, 0..2000)) {
        let items: Vec<Keyed> = keys.iter().enumerate().map(|(idx, &key)| Keyed { key, idx }).collect();
        let mut by_key = items.clone();
        by_key.sort_by_key(|k| k.key.unsigned_abs());
        let mut by_rev = items.clone();
        by_rev.sort_by_key(|k| std::cmp::Reverse(k.key));
        let got = on_pool(move || {
            let mut a = items.clone();
            a.par_sort_by_key(|k| k.key.unsigned_abs());
            let mut b = items;
            b.par_sort_by(|x, y| y.key.cmp(&x.key));
            (a, b)
        });
        prop_assert_eq!(got.0, by_key);
        prop_assert_eq!(got.1, by_rev);
    }

    #[test]
    fn par_sort_unstable_by_and_by_key(keys in prop::collection::vec(any::<i16>(), 0..2000)) {
        let mut by_abs: Vec<u16> = keys.iter().map(|k| k.unsigned_abs()).collect();
        by_abs.sort_unstable();
        let mut by_rev = keys.clone();
        by_rev.sort_unstable_by_key(|&k| std::cmp::Reverse(k));
        let got = on_pool(move || {
            let mut a = keys.clone();
            a.par_sort_unstable_by_key(|k| k.unsigned_abs());
            let mut b = keys;
            b.par_sort_unstable_by(|x, y| y.cmp(x));
            (a, b)
        });
        let got_abs: Vec<u16> = got.0.iter().map(|k| k.unsigned_abs()).collect();
        prop_assert_eq!(got_abs, by_abs);
        prop_assert_eq!(got.1, by_rev);
    }

    #[test]
    fn with_min_len_is_respected(len in 0usize..5000, min in 0usize..1500) {
        let sizes = piece_sizes(len, min);
        prop_assert_eq!(sizes.iter().sum::<usize>(), len);
        if len < 2 * min.max(1) {
            prop_assert_eq!(sizes, vec![len], "an input under 2 * min is never split");
        } else {
            for &s in &sizes {
                prop_assert!(s >= min, "piece of {} items under min_len {}", s, min);
            }
        }
    }
}

proptest! {
    // Long enough to go past the sequential cut-offs of both sorts and of the merge.
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn par_sort_long_inputs(v in prop::collection::vec(any::<u32>(), 0..40_000), modulus in 1u32..1000) {
        let keyed: Vec<(u32, usize)> = v.iter().enumerate().map(|(i, &x)| (x % modulus, i)).collect();
        let mut stable = keyed.clone();
        stable.sort_by_key(|p| p.0);
        let mut unstable = keyed.clone();
        unstable.sort_unstable();
        let got = on_pool(move || {
            let mut a = keyed.clone();
            a.par_sort_by_key(|p| p.0);
            let mut b = keyed;
            b.par_sort_unstable();
            (a, b)
        });
        prop_assert!(got.0 == stable, "par_sort_by_key differs from sort_by_key");
        prop_assert!(got.1 == unstable, "par_sort_unstable differs from sort_unstable");
    }
}

#[test]
fn edge_ranges() {
    let got = on_pool(|| {
        // Variables, so that clippy does not object to the empty ranges.
        let (five, nine) = (5u32, 9i32);
        (
            (0..=u8::MAX).into_par_iter().map(u32::from).sum::<u32>(),
            (i8::MIN..=i8::MAX)
                .into_par_iter()
                .map(i32::from)
                .sum::<i32>(),
            (u64::MAX - 10..=u64::MAX).into_par_iter().count(),
            (u64::MAX - 10..=u64::MAX).into_par_iter().max(),
            (i64::MIN..i64::MIN + 5).into_par_iter().min(),
            (isize::MAX - 3..=isize::MAX)
                .into_par_iter()
                .collect::<Vec<_>>(),
            (5..5u32).into_par_iter().count(),
            (five..=five - 1).into_par_iter().count(),
            (nine..nine - 6).into_par_iter().count(),
            (0..1_000_000u64).into_par_iter().sum::<u64>(),
        )
    });
    assert_eq!(got.0, 255 * 256 / 2);
    assert_eq!(got.1, -128);
    assert_eq!(got.2, 11);
    assert_eq!(got.3, Some(u64::MAX));
    assert_eq!(got.4, Some(i64::MIN));
    assert_eq!(
        got.5,
        [isize::MAX - 3, isize::MAX - 2, isize::MAX - 1, isize::MAX]
    );
    assert_eq!((got.6, got.7, got.8), (0, 0, 0));
    assert_eq!(got.9, 999_999 * 1_000_000 / 2);

    // An inclusive range that was partly iterated sequentially keeps its state.
    let mut r = 0..=3u8;
    assert_eq!(r.next(), Some(0));
    let rest: Vec<u8> = r.into_par_iter().collect();
    assert_eq!(rest, [1, 2, 3]);
    let mut r = 3..=3u8;
    assert_eq!(r.next(), Some(3));
    assert_eq!(r.into_par_iter().count(), 0);
}

#[test]
#[should_panic(expected = "more than usize::MAX")]
fn full_u64_inclusive_range_is_rejected() {
    let _ = (0..=u64::MAX).into_par_iter().count();
}

#[test]
fn empty_and_single_inputs() {
    on_pool(|| {
        let empty: Vec<i32> = Vec::new();
        assert_eq!(empty.par_iter().sum::<i32>(), 0);
        assert_eq!(empty.par_iter().count(), 0);
        assert_eq!(empty.par_iter().min(), None);
        assert_eq!(empty.par_iter().max(), None);
        assert_eq!(empty.par_iter().copied().reduce(|| 7, |a, b| a + b), 7);
        assert_eq!(empty.par_iter().copied().reduce_with(|a, b| a + b), None);
        assert!(empty.par_iter().copied().collect::<Vec<_>>().is_empty());
        let mut e = empty.clone();
        e.par_sort();
        e.par_sort_unstable();
        assert!(e.is_empty());
        assert!(empty.into_par_iter().collect::<Vec<i32>>().is_empty());

        let mut one = vec![42];
        one.par_sort();
        one.par_sort_unstable();
        assert_eq!(one, [42]);
        assert_eq!(one.par_iter().max(), Some(&42));
        let filtered: Vec<i32> = one.par_iter().copied().filter(|_| false).collect();
        assert!(filtered.is_empty());
    });
}

#[test]
fn arrays_and_cloned() {
    let got = on_pool(|| {
        let mut a = [3, 1, 2];
        a.par_iter_mut().for_each(|x| *x += 1);
        let names = vec![String::from("x"), String::from("y")];
        let cloned: Vec<String> = names.par_iter().cloned().collect();
        (a.par_iter().sum::<i32>(), cloned)
    });
    assert_eq!(got, (9, vec![String::from("x"), String::from("y")]));
}

#[test]
fn panic_in_for_each_propagates_and_the_pool_stays_usable() {
    for _ in 0..3 {
        let visited = on_pool(|| {
            let visited = AtomicUsize::new(0);
            let result = panic::catch_unwind(AssertUnwindSafe(|| {
                (0..10_000u32).into_par_iter().for_each(|i| {
                    visited.fetch_add(1, Ordering::Relaxed);
                    if i == 6_543 {
                        panic!("for_each panicked on purpose");
                    }
                });
            }));
            let payload = result.expect_err("the panic did not reach the caller");
            assert_eq!(
                payload.downcast_ref::<&str>(),
                Some(&"for_each panicked on purpose")
            );
            visited.into_inner()
        });
        assert!(visited >= 1);
        // The pool still runs parallel work.
        let sum = on_pool(|| (0..100_000u64).into_par_iter().sum::<u64>());
        assert_eq!(sum, 99_999 * 100_000 / 2);
    }

    // A panic escaping the task reaches its JoinHandle.
    let err = common::with_timeout(|| {
        pool()
            .spawn(async {
                vec![1, 2, 3].par_iter().for_each(|&x| {
                    if x == 2 {
                        panic!("escaped");
                    }
                })
            })
            .join()
            .unwrap_err()
    });
    assert!(err.is_panic());
    assert_eq!(on_pool(|| (1..=10).into_par_iter().sum::<i32>()), 55);
}

#[test]
fn panic_in_sort_comparator_keeps_every_element() {
    let (ok, mut v) = on_pool(|| {
        let mut v: Vec<String> = (0..20_000)
            .map(|i| (i * 7919 % 20_000).to_string())
            .collect();
        let calls = AtomicUsize::new(0);
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            v.par_sort_by(|a, b| {
                if calls.fetch_add(1, Ordering::Relaxed) == 150_000 {
                    panic!("comparator panicked on purpose");
                }
                a.cmp(b)
            })
        }));
        (result.is_ok(), v)
    });
    assert!(!ok);
    v.sort();
    let mut expected: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
    expected.sort();
    assert_eq!(v, expected);
}

#[test]
fn min_len_pieces_on_large_inputs() {
    for (len, min) in [
        (100_000, 1),
        (100_000, 1000),
        (100_000, 60_000),
        (1, 1),
        (0, 5),
    ] {
        let sizes = piece_sizes(len, min);
        assert_eq!(sizes.iter().sum::<usize>(), len);
        if len >= 2 * min {
            assert!(sizes.iter().all(|&s| s >= min), "{sizes:?} under {min}");
        } else {
            assert_eq!(sizes, [len]);
        }
    }
}

#[test]
fn works_from_a_thread_outside_the_runtime() {
    // Not on a worker: parallel iterators still give the right answers.
    let v: Vec<u64> = (0..10_000).collect();
    assert_eq!(v.par_iter().sum::<u64>(), 49_995_000);
    let mut w: Vec<u64> = v.iter().rev().copied().collect();
    w.par_sort_unstable();
    assert_eq!(w, v);
}

/// A piece that the split budget no longer splits is still shared when a worker is
/// hungry: every worker of a 4-worker pool takes part in one long `for_each`.
#[test]
fn hungry_workers_get_a_share_of_an_unsplit_piece() {
    common::with_timeout(|| {
        let rt = common::runtime(4, 0);
        let seen = Mutex::new(std::collections::HashSet::new());
        rt.block_on(async {
            (0..4_000u32).into_par_iter().for_each(|_| {
                seen.lock()
                    .unwrap()
                    .insert(std::thread::current().name().unwrap().to_string());
                std::thread::sleep(std::time::Duration::from_micros(50));
            });
        });
        assert_eq!(
            seen.into_inner().unwrap().len(),
            4,
            "every worker took part"
        );
    })
}
