//! The `forkjoin` suite: weft's fork-join `join`, parallel iterators and
//! parallel sort against rayon and chili, with a sequential baseline.
//!
//! Every contender runs with the same number of threads doing the work:
//!
//! * `weft` — a runtime with `--workers` default-pool workers and no
//!   interactive pool; the whole timed computation runs inside one task
//!   spawned onto it (`Runtime::spawn(..).join()`), so every `weft::join`
//!   takes the worker fast path.
//! * `rayon` — a `ThreadPool` of `--workers` threads; the computation runs
//!   inside `ThreadPool::install`. The pool is built with `build_scoped`,
//!   which waits for its threads to exit, so it is gone before the next
//!   contender starts (a plain rayon pool exits its threads in the
//!   background).
//! * `chili` — a `ThreadPool` with `thread_count = --workers`: chili starts
//!   `workers - 1` threads and the thread that opens the `Scope` (the
//!   benchmark's thread) is the last one, as in chili's own benchmarks.
//! * `seq` — plain sequential code on the benchmark's thread.
//! * `split` — large trees only: the tree cut by hand into one group of
//!   subtrees per thread, each group summed by sequential code on its own
//!   scoped thread (started inside the timing, ~0.1 ms). No scheduler at all:
//!   what this machine's cores and memory allow, the ceiling for `seq/weft`.
//!
//! Timing happens on the thread that runs the computation, so it covers the
//! computation only, not the hand-over into the pool. Each measurement
//! builds the pool, runs the computation untimed until at least [`MIN_TIME`]
//! has passed (at least once; `k` calls), then times `k` further calls and
//! reports the mean: a 1,023-node tree sum (microseconds) is repeated
//! thousands of times, a 16.7M-node one runs once untimed and once timed.
//! Results are checked (outside the timing) so a wrong sum fails loudly.
//!
//! Inputs (trees, the sort's input) are built once per case, outside timing,
//! and shared by all contenders and rounds.

use std::cell::OnceCell;
use std::hint::black_box;
use std::num::NonZero;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{Case, Check, Metric, Options, Suite, Unit};
use crate::rng::Rng;
use crate::runtimes::Weft;

/// Contenders, in the index order the measurements use.
pub const CONTENDERS: &[&str] = &["weft", "rayon", "chili", "seq", "split"];
const WEFT: usize = 0;
const RAYON: usize = 1;
const CHILI: usize = 2;
const SEQ: usize = 3;
const SPLIT: usize = 4;

/// How long the untimed calibration (and so roughly the timed part) of one
/// measurement runs at least.
pub const MIN_TIME: Duration = Duration::from_millis(20);

/// Tree sizes as layers: 2^layers - 1 nodes.
const TREE_SMALL: u32 = 10;
const TREE_MEDIUM: u32 = 24;
const TREE_LARGE: u32 = 27;
/// fib(FIB_N) by recursive join.
const FIB_N: u64 = 32;
/// Elements sorted by `sort_10M`.
pub const SORT_LEN: usize = 10_000_000;
/// Length of the range summed by `sum_100M`.
pub const SUM_LEN: u64 = 100_000_000;
const SEED: u64 = 0x5EED_F0C5;

/// What `forkjoin --help` prints above the options.
pub const HELP: &str = "\
Contenders: weft, rayon, chili, each with --workers threads, seq (sequential code) and,
for the large trees, split: the tree cut by hand into one group of subtrees per thread,
each summed by sequential code on its own thread (no scheduler; what the machine allows);
ratios weft/rayon, weft/chili, seq/weft (weft's speed-up over sequential code), weft/split.
tree_1023, tree_16M, tree_134M (only with --large): sum of a binary tree of boxed nodes
  (i64 value, Option<Box> children) of 1,023 / 16,777,215 / 134,217,727 nodes, joining
  at every node, no cutoff (chili's and Spice's benchmark). Trees are built once.
  Each contender runs the same source, join(left, right): weft, rayon and seq visit the
  left child first, chili the right one (its join runs its second closure first).
tree_16M_rf, tree_134M_rf (only with --large): the same trees, every contender visiting
  the right child first (weft and rayon get join(right, left), seq recurses right first,
  chili runs as above). The tree is allocated children before parent, left subtree
  before right, so right-first visits memory in descending address order, which the
  prefetcher follows; left-first jumps. This compares the schedulers on equal memory
  traffic.
tree_16M_pre, tree_134M_pre (only with --large): Spice's layout, each node allocated
  before its children (pre-order), every contender running join(left, right) as in
  tree_16M: now the left-first visits (weft, rayon, seq) stream memory upwards and
  chili's right-first one jumps, the mirror image of tree_16M.
fib32_1t, fib32_<workers>t: fib(32) by recursive join, no cutoff, on 1 thread and on
  --workers threads; time, and time per join (3,524,577 joins: calls with n >= 2).
  seq is the plain recursion, which the compiler partly turns into loops (a reference).
sort_10M: par_sort_unstable of 10,000,000 random u64 (seeded; a fresh copy per run, made
  outside the timing); seq: slice::sort_unstable. chili has no sort.
stable_sort_10M: the same with the stable par_sort (rayon's par_sort); seq: slice::sort.
sum_100M: (0..100_000_000u64).into_par_iter().map(|x| (x * 3) ^ 7).sum::<u64>() over the
  range itself (no slice); seq: the same with a sequential iterator. chili has none.
Each measurement runs the computation untimed for >= 20 ms (at least once, k calls),
then times k more calls: the mean per call. Targets (set for 2 threads) follow the table.";

/// The `forkjoin` suite; `tree_134M` only with `--large`.
pub fn suite(opts: &Options) -> Suite {
    let workers = opts.workers;
    let medium = Rc::new(OnceCell::new());
    let mut cases = vec![
        tree_case(TREE_SMALL, Order::AsWritten, Rc::new(OnceCell::new())),
        tree_case(TREE_MEDIUM, Order::AsWritten, medium.clone()),
        tree_case(TREE_MEDIUM, Order::RightFirst, medium),
        tree_case(TREE_MEDIUM, Order::SpiceLayout, Rc::new(OnceCell::new())),
    ];
    if opts.large {
        let large = Rc::new(OnceCell::new());
        cases.push(tree_case(TREE_LARGE, Order::AsWritten, large.clone()));
        cases.push(tree_case(TREE_LARGE, Order::RightFirst, large));
        cases.push(tree_case(
            TREE_LARGE,
            Order::SpiceLayout,
            Rc::new(OnceCell::new()),
        ));
    }
    let fib_name = format!("fib32_{workers}t");
    cases.push(fib_case("fib32_1t", Some(1)));
    if workers != 1 {
        cases.push(fib_case(&fib_name, None));
    }
    cases.push(sort_case(SortKind::Unstable));
    cases.push(sort_case(SortKind::Stable));
    cases.push(sum_case());

    let large = if opts.large { TREE_LARGE } else { TREE_MEDIUM };
    let mut checks = vec![
        Check::new(&tree_name(TREE_SMALL, Order::AsWritten), RAYON, 3.0),
        Check::new(&fib_name, RAYON, 3.0),
        Check::new("stable_sort_10M", SEQ, 1.6),
        Check::new("stable_sort_10M", RAYON, 1.5),
    ];
    for layers in [TREE_SMALL, TREE_MEDIUM, TREE_LARGE] {
        checks.push(Check::new(&tree_name(layers, Order::AsWritten), CHILI, 1.0));
    }
    for layers in [TREE_MEDIUM, TREE_LARGE] {
        checks.push(
            Check::new(&tree_name(layers, Order::RightFirst), CHILI, 1.0)
                .note("every contender visiting the right child first"),
        );
        checks.push(
            Check::new(&tree_name(layers, Order::SpiceLayout), CHILI, 1.0)
                .note("Spice's layout: nodes before their children"),
        );
    }
    let large_note = if opts.large {
        "the large tree"
    } else {
        "the large tree: 16.7M nodes, as --large is absent"
    };
    for order in [Order::AsWritten, Order::RightFirst, Order::SpiceLayout] {
        checks.push(Check::new(&tree_name(large, order), SEQ, 1.8).note(large_note));
    }

    let mut notes = vec![
        "weft runs the timed computation in one task spawned on a worker (no interactive pool); \
         rayon inside ThreadPool::install; chili in a Scope on the benchmark thread plus \
         workers - 1 pool threads; seq on the benchmark thread; mean per call over >= 20 ms"
            .to_string(),
        "'-': the contender has no such operation (chili: no iterators, no sort; seq: no joins; \
         split: large trees only)"
            .to_string(),
        "split: the tree cut by hand into one part per thread, summed sequentially on plain \
         threads (no scheduler): the most this machine gives over seq; weft/split < 1.0 = \
         weft faster"
            .to_string(),
        "seq/weft is weft's speed-up over sequential code: above 1.0 = weft faster".to_string(),
    ];
    if workers != 2 {
        notes.push(format!(
            "the targets are set for 2 threads; this run uses {workers}"
        ));
    }
    Suite {
        command: "forkjoin",
        contenders: CONTENDERS,
        cases,
        notes,
        baseline: Some(SEQ),
        checks,
    }
}

// ------------------------------------------------------------- pools ----

/// Runs `f` inside one task on a fresh weft runtime with `workers` workers
/// and returns its result; the runtime is shut down before this returns.
fn on_weft<R: Send + 'static>(workers: usize, f: impl FnOnce() -> R + Send + 'static) -> R {
    let rt = Weft::with_pools(workers, 0).expect("cannot build weft");
    let out = rt
        .runtime()
        .spawn(async move { f() })
        .join()
        .unwrap_or_else(|e| panic!("weft task failed: {e:?}"));
    drop(rt);
    out
}

/// Runs `f` inside `install` on a fresh rayon pool of `workers` threads;
/// returns after the pool's threads have exited.
fn on_rayon<R: Send>(workers: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .thread_name(|i| format!("rayon-{i}"))
        .build_scoped(|thread| thread.run(), |pool| pool.install(f))
        .expect("cannot build rayon")
}

/// Runs `f` in a scope of a fresh chili pool of `workers` threads (the
/// calling thread being one of them); the pool is dropped (its threads
/// joined) before this returns.
fn on_chili<R>(workers: usize, f: impl FnOnce(&mut chili::Scope<'_>) -> R) -> R {
    let pool = chili::ThreadPool::with_config(chili::Config {
        thread_count: Some(NonZero::new(workers).expect("workers > 0")),
        ..Default::default()
    });
    let out = {
        let mut scope = pool.scope();
        f(&mut scope)
    };
    drop(pool);
    out
}

/// Calls `f` untimed until [`MIN_TIME`] has passed (at least once), then
/// times as many calls again; returns the mean ns per call and the last
/// result.
fn per_call<T>(mut f: impl FnMut() -> T) -> (f64, T) {
    let start = Instant::now();
    let mut calls = 0u32;
    while calls == 0 || start.elapsed() < MIN_TIME {
        black_box(f());
        calls += 1;
    }
    let start = Instant::now();
    let mut last = black_box(f());
    for _ in 1..calls {
        last = black_box(f());
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(calls);
    (ns, last)
}

// -------------------------------------------------------------- tree ----

/// A node of the benchmark tree.
pub struct Node {
    val: i64,
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

impl Node {
    /// A complete tree of `layers` layers (2^layers - 1 nodes), every value 1,
    /// allocated depth-first as in chili's benchmark.
    pub fn tree(layers: u32) -> Node {
        let child = || (layers > 1).then(|| Box::new(Node::tree(layers - 1)));
        Node {
            val: 1,
            left: child(),
            right: child(),
        }
    }

    /// The same tree allocated as in Spice's benchmark: each node before its
    /// children (pre-order), so a left-first walk visits ascending addresses.
    pub fn tree_preorder(layers: u32) -> Arc<Node> {
        fn fill(node: &mut Node, layers: u32) {
            if layers > 1 {
                for child in [&mut node.left, &mut node.right] {
                    let c = child.insert(Box::new(Node::leaf()));
                    fill(c, layers - 1);
                }
            }
        }
        let mut root = Arc::new(Node::leaf());
        fill(Arc::get_mut(&mut root).expect("fresh Arc"), layers);
        root
    }

    fn leaf() -> Node {
        Node {
            val: 1,
            left: None,
            right: None,
        }
    }
}

fn nodes(layers: u32) -> u64 {
    (1u64 << layers) - 1
}

/// The order in which a tree case's contenders visit a node's children.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Every contender runs `join(left, right)` (chili's join runs `right` first).
    AsWritten,
    /// Every contender visits the right child first.
    RightFirst,
    /// As written, on a tree laid out as in Spice's benchmark (each node before its
    /// children) instead of chili's.
    SpiceLayout,
}

fn tree_name(layers: u32, order: Order) -> String {
    let base = match nodes(layers) {
        n if n >= 1_000_000 => format!("tree_{}M", n / 1_000_000),
        n => format!("tree_{n}"),
    };
    match order {
        Order::AsWritten => base,
        Order::RightFirst => format!("{base}_rf"),
        Order::SpiceLayout => format!("{base}_pre"),
    }
}

fn sum_seq(node: &Node) -> i64 {
    node.val + node.left.as_deref().map_or(0, sum_seq) + node.right.as_deref().map_or(0, sum_seq)
}

fn sum_weft(node: &Node) -> i64 {
    let (l, r) = weft::join(
        || node.left.as_deref().map_or(0, sum_weft),
        || node.right.as_deref().map_or(0, sum_weft),
    );
    node.val + l + r
}

fn sum_rayon(node: &Node) -> i64 {
    let (l, r) = rayon::join(
        || node.left.as_deref().map_or(0, sum_rayon),
        || node.right.as_deref().map_or(0, sum_rayon),
    );
    node.val + l + r
}

fn sum_seq_rf(node: &Node) -> i64 {
    let r = node.right.as_deref().map_or(0, sum_seq_rf);
    node.val + node.left.as_deref().map_or(0, sum_seq_rf) + r
}

fn sum_weft_rf(node: &Node) -> i64 {
    let (r, l) = weft::join(
        || node.right.as_deref().map_or(0, sum_weft_rf),
        || node.left.as_deref().map_or(0, sum_weft_rf),
    );
    node.val + l + r
}

fn sum_rayon_rf(node: &Node) -> i64 {
    let (r, l) = rayon::join(
        || node.right.as_deref().map_or(0, sum_rayon_rf),
        || node.left.as_deref().map_or(0, sum_rayon_rf),
    );
    node.val + l + r
}

fn sum_chili(node: &Node, s: &mut chili::Scope<'_>) -> i64 {
    let (l, r) = s.join(
        |s| node.left.as_deref().map_or(0, |n| sum_chili(n, s)),
        |s| node.right.as_deref().map_or(0, |n| sum_chili(n, s)),
    );
    node.val + l + r
}

/// The `split` contender: the smallest set of subtrees (one level of the tree) with
/// at least one per thread, dealt round-robin to `threads` scoped threads that sum
/// them with `sum`; the nodes above that level are summed here.
fn sum_split(tree: &Node, threads: usize, sum: fn(&Node) -> i64) -> i64 {
    let mut level = vec![tree];
    let mut above = 0;
    while level.len() < threads {
        let next: Vec<&Node> = level
            .iter()
            .flat_map(|n| [n.left.as_deref(), n.right.as_deref()])
            .flatten()
            .collect();
        if next.is_empty() {
            break;
        }
        above += level.iter().map(|n| n.val).sum::<i64>();
        level = next;
    }
    let share = |t: usize| -> i64 { level.iter().skip(t).step_by(threads).map(|n| sum(n)).sum() };
    std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|t| s.spawn(move || share(t))).collect();
        let mine = share(0);
        above + mine + others.into_iter().map(|h| h.join().unwrap()).sum::<i64>()
    })
}

/// A tree case; cases of one size share `tree` (built on first use).
fn tree_case(layers: u32, order: Order, tree: Rc<OnceCell<Arc<Node>>>) -> Case {
    let expected = nodes(layers) as i64;
    let rf = order == Order::RightFirst;
    let metrics = vec![Metric::new("time", "sum", Unit::Ns)];
    Case::new(&tree_name(layers, order), metrics, move |index, opts| {
        let tree = tree.get_or_init(|| {
            let start = Instant::now();
            let t = if order == Order::SpiceLayout {
                Node::tree_preorder(layers)
            } else {
                Arc::new(Node::tree(layers))
            };
            eprintln!(
                "  built the tree of {} nodes in {:.1} s",
                nodes(layers),
                start.elapsed().as_secs_f64()
            );
            t
        });
        let (ns, sum) = match index {
            WEFT => {
                let tree = tree.clone();
                let sum = if rf { sum_weft_rf } else { sum_weft };
                on_weft(opts.workers, move || per_call(|| sum(&tree)))
            }
            RAYON => {
                let sum = if rf { sum_rayon_rf } else { sum_rayon };
                on_rayon(opts.workers, || per_call(|| sum(tree)))
            }
            // chili's join runs `right` first: the same visit order either way.
            CHILI => on_chili(opts.workers, |s| per_call(|| sum_chili(tree, s))),
            SEQ => {
                let sum = if rf { sum_seq_rf } else { sum_seq };
                per_call(|| sum(black_box(tree)))
            }
            // Thread start-up would dominate a microsecond sum.
            SPLIT if layers < TREE_MEDIUM => return vec![f64::NAN],
            SPLIT => {
                let sum = if rf { sum_seq_rf } else { sum_seq };
                per_call(|| sum_split(black_box(tree), opts.workers, sum))
            }
            _ => unreachable!("no contender #{index}"),
        };
        assert_eq!(sum, expected, "wrong tree sum");
        vec![ns]
    })
}

// --------------------------------------------------------------- fib ----

fn fib_seq(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    fib_seq(n - 1) + fib_seq(n - 2)
}

fn fib_weft(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = weft::join(|| fib_weft(n - 1), || fib_weft(n - 2));
    a + b
}

fn fib_rayon(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1), || fib_rayon(n - 2));
    a + b
}

fn fib_chili(n: u64, s: &mut chili::Scope<'_>) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = s.join(|s| fib_chili(n - 1, s), |s| fib_chili(n - 2, s));
    a + b
}

/// The number of joins recursive `fib(n)` makes: one per call with `n >= 2`,
/// `joins(n) = 1 + joins(n - 1) + joins(n - 2)` (= fib(n + 1) - 1).
pub fn fib_joins(n: u64) -> u64 {
    let (mut a, mut b) = (0u64, 0u64); // joins(i), joins(i + 1), from i = 0
    for _ in 0..n {
        (a, b) = (b, 1 + a + b);
    }
    a
}

/// fib(32) on `threads` threads, or on `--workers` threads when `None`.
fn fib_case(name: &str, threads: Option<usize>) -> Case {
    let joins = fib_joins(FIB_N) as f64;
    let metrics = vec![
        Metric::new("time", "fib(32)", Unit::Ns),
        Metric::new("per join", "join", Unit::Ns),
    ];
    Case::new(name, metrics, move |index, opts| {
        let threads = threads.unwrap_or(opts.workers);
        let n = black_box(FIB_N);
        let (ns, fib) = match index {
            WEFT => on_weft(threads, move || per_call(|| fib_weft(n))),
            RAYON => on_rayon(threads, || per_call(|| fib_rayon(n))),
            CHILI => on_chili(threads, |s| per_call(|| fib_chili(n, s))),
            SEQ => per_call(|| fib_seq(n)),
            SPLIT => return vec![f64::NAN, f64::NAN],
            _ => unreachable!("no contender #{index}"),
        };
        assert_eq!(fib, FIB_32, "wrong fib(32)");
        let per_join = if index == SEQ { f64::NAN } else { ns / joins };
        vec![ns, per_join]
    })
}

/// fib(32).
const FIB_32: u64 = 2_178_309;

// -------------------------------------------------------------- sort ----

/// Sorts a fresh copy of `src` untimed, then times sorting another fresh
/// copy (copies made outside the timing); ns.
fn sort_timed(src: &[u64], sort: impl Fn(&mut [u64])) -> f64 {
    let mut v = src.to_vec();
    sort(&mut v);
    assert!(v.is_sorted(), "not sorted");
    drop(v);
    let mut v = src.to_vec();
    let start = Instant::now();
    sort(black_box(&mut v));
    let ns = start.elapsed().as_nanos() as f64;
    assert!(v.is_sorted(), "not sorted");
    ns
}

mod weft_par {
    use weft::prelude::*;

    pub fn sort(v: &mut [u64]) {
        v.par_sort_unstable();
    }

    pub fn stable_sort(v: &mut [u64]) {
        v.par_sort();
    }

    pub fn map_sum(n: u64) -> u64 {
        (0..n).into_par_iter().map(|x| (x * 3) ^ 7).sum::<u64>()
    }
}

mod rayon_par {
    use rayon::prelude::*;

    pub fn sort(v: &mut [u64]) {
        v.par_sort_unstable();
    }

    pub fn stable_sort(v: &mut [u64]) {
        v.par_sort();
    }

    pub fn map_sum(n: u64) -> u64 {
        (0..n).into_par_iter().map(|x| (x * 3) ^ 7).sum::<u64>()
    }
}

fn seq_map_sum(n: u64) -> u64 {
    (0..n).map(|x| (x * 3) ^ 7).sum::<u64>()
}

/// Which sort a sort case times.
#[derive(Clone, Copy)]
enum SortKind {
    Unstable,
    Stable,
}

/// `sort_10M` (unstable) or `stable_sort_10M`, each with its own input.
fn sort_case(kind: SortKind) -> Case {
    let input: OnceCell<Arc<Vec<u64>>> = OnceCell::new();
    let metrics = vec![Metric::new("time", "sort", Unit::Ns)];
    type Sort = fn(&mut [u64]);
    let (name, weft_sort, rayon_sort, seq_sort): (_, Sort, Sort, Sort) = match kind {
        SortKind::Unstable => (
            "sort_10M",
            weft_par::sort,
            rayon_par::sort,
            <[u64]>::sort_unstable,
        ),
        SortKind::Stable => (
            "stable_sort_10M",
            weft_par::stable_sort,
            rayon_par::stable_sort,
            <[u64]>::sort,
        ),
    };
    Case::new(name, metrics, move |index, opts| {
        let src = input.get_or_init(|| {
            let mut rng = Rng::new(SEED);
            Arc::new((0..SORT_LEN).map(|_| rng.next_u64()).collect())
        });
        let ns = match index {
            WEFT => {
                let src = src.clone();
                on_weft(opts.workers, move || sort_timed(&src, weft_sort))
            }
            RAYON => on_rayon(opts.workers, || sort_timed(src, rayon_sort)),
            CHILI => f64::NAN,
            SEQ => sort_timed(src, seq_sort),
            SPLIT => f64::NAN,
            _ => unreachable!("no contender #{index}"),
        };
        vec![ns]
    })
}

// --------------------------------------------------------------- sum ----

fn sum_case() -> Case {
    let expected: OnceCell<u64> = OnceCell::new();
    let metrics = vec![Metric::new("time", "map+sum", Unit::Ns)];
    Case::new("sum_100M", metrics, move |index, opts| {
        let expected = *expected.get_or_init(|| seq_map_sum(SUM_LEN));
        let n = black_box(SUM_LEN);
        let (ns, sum) = match index {
            WEFT => on_weft(opts.workers, move || per_call(|| weft_par::map_sum(n))),
            RAYON => on_rayon(opts.workers, || per_call(|| rayon_par::map_sum(n))),
            CHILI => return vec![f64::NAN],
            SEQ => per_call(|| seq_map_sum(black_box(n))),
            SPLIT => return vec![f64::NAN],
            _ => unreachable!("no contender #{index}"),
        };
        assert_eq!(sum, expected, "wrong sum");
        vec![ns]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_joins(n: u64) -> u64 {
        if n < 2 {
            0
        } else {
            1 + count_joins(n - 1) + count_joins(n - 2)
        }
    }

    #[test]
    fn joins_and_fib() {
        for n in 0..=20 {
            assert_eq!(fib_joins(n), count_joins(n), "n = {n}");
        }
        assert_eq!(fib_joins(32), 3_524_577);
        assert_eq!(fib_seq(32), FIB_32);
        assert_eq!(fib_seq(20), 6765);
    }

    #[test]
    fn trees_sum_alike() {
        let tree = Arc::new(Node::tree(8));
        assert_eq!(sum_seq(&tree), 255);
        assert_eq!(sum_seq_rf(&tree), 255);
        assert_eq!(on_rayon(2, || sum_rayon(&tree)), 255);
        assert_eq!(on_rayon(2, || sum_rayon_rf(&tree)), 255);
        assert_eq!(on_chili(2, |s| sum_chili(&tree, s)), 255);
        let t = tree.clone();
        assert_eq!(on_weft(2, move || sum_weft(&t)), 255);
        let t = tree.clone();
        assert_eq!(on_weft(2, move || sum_weft_rf(&t)), 255);
        for threads in 1..=5 {
            assert_eq!(sum_split(&tree, threads, sum_seq), 255, "{threads} threads");
            assert_eq!(
                sum_split(&tree, threads, sum_seq_rf),
                255,
                "{threads} threads"
            );
        }
        assert_eq!(sum_split(&Node::tree(1), 4, sum_seq), 1);
        assert_eq!(tree_name(TREE_SMALL, Order::AsWritten), "tree_1023");
        assert_eq!(tree_name(TREE_MEDIUM, Order::AsWritten), "tree_16M");
        assert_eq!(tree_name(TREE_MEDIUM, Order::RightFirst), "tree_16M_rf");
        assert_eq!(tree_name(TREE_LARGE, Order::AsWritten), "tree_134M");
        assert_eq!(tree_name(TREE_MEDIUM, Order::SpiceLayout), "tree_16M_pre");
        let pre = Node::tree_preorder(8);
        assert_eq!(sum_seq(&pre), 255);
    }

    #[test]
    fn par_cases_agree() {
        let n = 100_000;
        let seq = seq_map_sum(n);
        assert_eq!(on_weft(2, move || weft_par::map_sum(n)), seq);
        assert_eq!(on_rayon(2, || rayon_par::map_sum(n)), seq);
        let mut rng = Rng::new(1);
        let src: Vec<u64> = (0..10_000).map(|_| rng.next_u64()).collect();
        let src = Arc::new(src);
        let s = src.clone();
        assert!(on_weft(2, move || sort_timed(&s, weft_par::sort)) > 0.0);
        assert!(on_rayon(2, || sort_timed(&src, rayon_par::sort)) > 0.0);
        let s = src.clone();
        assert!(on_weft(2, move || sort_timed(&s, weft_par::stable_sort)) > 0.0);
        assert!(on_rayon(2, || sort_timed(&src, rayon_par::stable_sort)) > 0.0);
    }

    #[test]
    fn suite_cases_and_checks() {
        let mut opts = Options::for_tests();
        let names = |s: &Suite| s.cases.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        let s = suite(&opts);
        assert_eq!(
            names(&s),
            [
                "tree_1023",
                "tree_16M",
                "tree_16M_rf",
                "tree_16M_pre",
                "fib32_1t",
                "fib32_2t",
                "sort_10M",
                "stable_sort_10M",
                "sum_100M"
            ]
        );
        assert!(s.checks.iter().any(|c| c.case == "tree_16M" && c.vs == SEQ));
        assert!(s
            .checks
            .iter()
            .any(|c| c.case == "tree_16M_rf" && c.vs == CHILI));
        opts.large = true;
        let s = suite(&opts);
        assert!(names(&s).contains(&"tree_134M".to_string()));
        assert!(names(&s).contains(&"tree_134M_rf".to_string()));
        assert!(s
            .checks
            .iter()
            .any(|c| c.case == "tree_134M" && c.vs == SEQ));
        assert!(!s.checks.iter().any(|c| c.case == "tree_16M" && c.vs == SEQ));
    }
}
