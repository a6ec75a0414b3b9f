//! Review s43, fork-join second round: halves and scope jobs that wait on each other
//! (channels, barriers, locks, wait groups, oneshots, fiber joins) in every arrangement,
//! from tasks, fibers and plain threads, and parallel iterators' results.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use weft::chan;
use weft::Runtime;

/// Where the computation under test starts.
#[derive(Clone, Copy, Debug)]
enum Ctx {
    Task,
    Fiber,
    Thread,
}

const CTXS: [Ctx; 3] = [Ctx::Task, Ctx::Fiber, Ctx::Thread];

/// A runtime of exactly `n` workers, no interactive pool, no temporary workers.
fn rt_of(n: usize) -> Runtime {
    common::exact_runtime(n, 0, 0)
}

/// Runs `f` in `ctx` on `rt`; `Err` if it did not finish within `limit` (the runtime
/// is then leaked: a hung runtime's drop would hang too).
fn run_in<R: Send + 'static>(
    rt: Runtime,
    ctx: Ctx,
    limit: Duration,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, String> {
    let (tx, rx) = mpsc::channel();
    let h = rt.handle().clone();
    let body = move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    };
    match ctx {
        Ctx::Task => drop(rt.spawn(async move { body() })),
        Ctx::Fiber => drop(common::fiber_on(&rt, body)),
        Ctx::Thread => {
            std::thread::spawn(move || {
                let _in = h.enter();
                body()
            });
        }
    }
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => {
            common::drop_within(rt, Duration::from_secs(10), "runtime after the case");
            Ok(v)
        }
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => {
            std::mem::forget(rt);
            Err(format!("hang in {ctx:?}"))
        }
    }
}

/// Runs `case` `rounds` times in every context on `workers` workers; the failures.
fn every_ctx(
    make: fn(usize) -> Runtime,
    workers: usize,
    rounds: usize,
    case: fn() -> u32,
    want: u32,
) -> Vec<String> {
    let mut bad = Vec::new();
    for ctx in CTXS {
        for round in 0..rounds {
            match run_in(make(workers), ctx, Duration::from_secs(3), case) {
                Ok(v) if v == want => {}
                Ok(v) => bad.push(format!("{ctx:?} round {round}: got {v}, want {want}")),
                Err(e) => {
                    bad.push(format!("{e} round {round} ({workers} workers)"));
                    break;
                }
            }
        }
    }
    bad
}

fn check(workers: usize, rounds: usize, case: fn() -> u32, want: u32) {
    check_with(rt_of, workers, rounds, case, want);
}

/// [`check`] on runtimes made by `make` (the default configuration: `common::workers`).
fn check_with(
    make: fn(usize) -> Runtime,
    workers: usize,
    rounds: usize,
    case: fn() -> u32,
    want: u32,
) {
    let bad = common::with_limit(Duration::from_secs(60), move || {
        every_ctx(make, workers, rounds, case, want)
    });
    assert!(bad.is_empty(), "{bad:?}");
}

// ---------------------------------------------------------------------------------
// Ping-pong between the halves of a join: each half waits for the other once, then
// the other waits for it. rayon runs these with two threads (the blocked half blocks
// its thread, the idle one steals the other half); on one thread rayon deadlocks too.
// ---------------------------------------------------------------------------------

/// `a` receives first, then sends; `b` sends, then receives.
fn join_ping_pong_a_waits_first() -> u32 {
    let (tx1, rx1) = chan::bounded::<u32>(0);
    let (tx2, rx2) = chan::bounded::<u32>(0);
    let (a, b) = weft::join(
        move || {
            let v = rx1.recv_blocking().unwrap();
            tx2.send_blocking(v + 1).unwrap();
            v
        },
        move || {
            tx1.send_blocking(1).unwrap();
            rx2.recv_blocking().unwrap()
        },
    );
    a + b
}

/// `a` sends first (waits for `b` to receive), then receives what `b` sends.
fn join_ping_pong_a_sends_first() -> u32 {
    let (tx1, rx1) = chan::bounded::<u32>(0);
    let (tx2, rx2) = chan::bounded::<u32>(0);
    let (a, b) = weft::join(
        move || {
            tx1.send_blocking(1).unwrap();
            rx2.recv_blocking().unwrap()
        },
        move || {
            let v = rx1.recv_blocking().unwrap();
            tx2.send_blocking(v + 1).unwrap();
            v
        },
    );
    a + b
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn join_ping_pong_a_waits_first_two_workers() {
    check(2, 10, join_ping_pong_a_waits_first, 3);
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn join_ping_pong_a_sends_first_two_workers() {
    check(2, 10, join_ping_pong_a_sends_first, 3);
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn join_ping_pong_a_waits_first_three_workers() {
    check(3, 10, join_ping_pong_a_waits_first, 3);
}

/// A two-phase barrier between the halves.
fn join_barrier_two_phases() -> u32 {
    let bar = weft::sync::Barrier::new(2);
    let n = AtomicUsize::new(0);
    let (x, y) = weft::join(
        || {
            bar.wait_blocking();
            n.fetch_add(1, Ordering::SeqCst);
            bar.wait_blocking().is_leader() as u32
        },
        || {
            bar.wait_blocking();
            n.fetch_add(1, Ordering::SeqCst);
            bar.wait_blocking().is_leader() as u32
        },
    );
    x + y + n.load(Ordering::SeqCst) as u32
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn join_barrier_two_phases_two_workers() {
    check(2, 10, join_barrier_two_phases, 3);
}

/// `a` holds a weft lock across a wait for `b`; `b` then takes the lock.
fn join_lock_held_across_wait() -> u32 {
    let m = weft::sync::Mutex::new(0u32);
    let (tx, rx) = chan::bounded::<()>(0);
    weft::join(
        || {
            let mut g = m.lock_blocking();
            rx.recv_blocking().unwrap();
            *g += 1;
        },
        || {
            tx.send_blocking(()).unwrap();
            *m.lock_blocking() += 1;
        },
    );
    m.into_inner()
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn join_lock_held_across_wait_two_workers() {
    check(2, 10, join_lock_held_across_wait, 2);
}

/// WaitGroups both ways.
fn join_wait_groups() -> u32 {
    let wg1 = weft::sync::WaitGroup::new();
    let wg2 = weft::sync::WaitGroup::new();
    wg1.add(1);
    wg2.add(1);
    weft::join(
        || {
            wg1.wait_blocking();
            wg2.done();
        },
        || {
            wg1.done();
            wg2.wait_blocking();
        },
    );
    7
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn join_wait_groups_two_workers() {
    check(2, 10, join_wait_groups, 7);
}

/// Oneshots both ways.
fn join_oneshots() -> u32 {
    let (tx1, rx1) = weft::sync::oneshot::channel::<u32>();
    let (tx2, rx2) = weft::sync::oneshot::channel::<u32>();
    let (a, b) = weft::join(
        move || {
            let v = rx1.recv_blocking().unwrap();
            tx2.send(v + 1).unwrap();
            v
        },
        move || {
            tx1.send(1).unwrap();
            rx2.recv_blocking().unwrap()
        },
    );
    a + b
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn join_oneshots_two_workers() {
    check(2, 10, join_oneshots, 3);
}

// ---------------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------------

/// The body waits for its job, which then waits for the body.
fn scope_body_job_ping_pong() -> u32 {
    let (tx1, rx1) = chan::bounded::<u32>(0);
    let (tx2, rx2) = chan::bounded::<u32>(0);
    let got = AtomicUsize::new(0);
    weft::scope(|s| {
        let got = &got;
        s.spawn(move |_| {
            tx1.send_blocking(1).unwrap();
            got.fetch_add(rx2.recv_blocking().unwrap() as usize, Ordering::SeqCst);
        });
        let v = rx1.recv_blocking().unwrap();
        tx2.send_blocking(v + 1).unwrap();
    });
    got.load(Ordering::SeqCst) as u32
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn scope_body_job_ping_pong_two_workers() {
    check(2, 10, scope_body_job_ping_pong, 2);
}

/// Two sibling jobs that ping-pong.
fn scope_sibling_jobs_ping_pong() -> u32 {
    let (tx1, rx1) = chan::bounded::<u32>(0);
    let (tx2, rx2) = chan::bounded::<u32>(0);
    let got = AtomicUsize::new(0);
    weft::scope(|s| {
        let got = &got;
        s.spawn(move |_| {
            let v = rx1.recv_blocking().unwrap();
            tx2.send_blocking(v + 1).unwrap();
        });
        s.spawn(move |_| {
            tx1.send_blocking(1).unwrap();
            got.fetch_add(rx2.recv_blocking().unwrap() as usize, Ordering::SeqCst);
        });
    });
    got.load(Ordering::SeqCst) as u32
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn scope_sibling_jobs_ping_pong_two_workers() {
    check(2, 10, scope_sibling_jobs_ping_pong, 2);
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn scope_sibling_jobs_ping_pong_three_workers() {
    check(3, 10, scope_sibling_jobs_ping_pong, 2);
}

/// One-way waits only (the case the last fix covers) in every arrangement, as a
/// regression check: body for job, job for body, job for sibling, a for b, b for a.
fn one_way_waits() -> u32 {
    let mut n = 0;
    // a waits for b.
    let (tx, rx) = chan::bounded::<u32>(0);
    n += weft::join(
        move || rx.recv_blocking().unwrap(),
        move || tx.send_blocking(1).unwrap(),
    )
    .0;
    // b waits for a.
    let (tx, rx) = chan::bounded::<u32>(0);
    n += weft::join(
        move || tx.send_blocking(1).unwrap(),
        move || rx.recv_blocking().unwrap(),
    )
    .1;
    // body waits for job.
    let (tx, rx) = chan::bounded::<u32>(0);
    n += weft::scope(|s| {
        s.spawn(move |_| tx.send_blocking(1).unwrap());
        rx.recv_blocking().unwrap()
    });
    // job waits for body.
    let (tx, rx) = chan::bounded::<u32>(0);
    let got = AtomicUsize::new(0);
    weft::scope(|s| {
        let got = &got;
        s.spawn(move |_| {
            got.fetch_add(rx.recv_blocking().unwrap() as usize, Ordering::SeqCst);
        });
        tx.send_blocking(1).unwrap();
    });
    n += got.load(Ordering::SeqCst) as u32;
    // job waits for a later sibling, and for an earlier one.
    for later in [true, false] {
        let (tx, rx) = chan::bounded::<u32>(0);
        let got = AtomicUsize::new(0);
        weft::scope(|s| {
            let got = &got;
            let recv = move |_: &weft::Scope<'_>| {
                got.fetch_add(rx.recv_blocking().unwrap() as usize, Ordering::SeqCst);
            };
            let send = move |_: &weft::Scope<'_>| tx.send_blocking(1).unwrap();
            if later {
                s.spawn(recv);
                s.spawn(send);
            } else {
                s.spawn(send);
                s.spawn(recv);
            }
        });
        n += got.load(Ordering::SeqCst) as u32;
    }
    n
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn one_way_waits_two_workers() {
    check(2, 5, one_way_waits, 6);
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn one_way_waits_three_workers() {
    check(3, 5, one_way_waits, 6);
}

/// One worker has no peer to take a half a waiting half waits for (rayon on one
/// thread hangs too).
#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn one_way_waits_one_worker() {
    check(1, 3, one_way_waits, 6);
}

// ---------------------------------------------------------------------------------
// A weft lock held by `a` across a wait that needs nothing from `b` (a sleep): `b`
// takes the same lock. rayon runs this on one thread too (`a` sleeps, releases, then
// `b` runs inline), and `wait`'s docs say a `weft::sync` guard across a wait is fine.
// ---------------------------------------------------------------------------------

fn lock_across_sleep_in_a() -> u32 {
    let m = weft::sync::Mutex::new(0u32);
    weft::join(
        || {
            let mut g = m.lock_blocking();
            weft::wait(weft::time::sleep(Duration::from_millis(2)));
            *g += 1;
        },
        || *m.lock_blocking() += 1,
    );
    m.into_inner()
}

/// The same with the sleep in a nested join's first half (the enclosing join's `b`
/// is an older private frame there).
fn lock_across_nested_join_sleep() -> u32 {
    let m = weft::sync::Mutex::new(0u32);
    weft::join(
        || {
            let mut g = m.lock_blocking();
            weft::join(
                || weft::wait(weft::time::sleep(Duration::from_millis(2))),
                || (),
            );
            *g += 1;
        },
        || *m.lock_blocking() += 1,
    );
    m.into_inner()
}

#[test]
fn lock_held_across_a_sleep_in_a_one_worker() {
    check(1, 5, lock_across_sleep_in_a, 2);
}

/// The same on a default runtime (interactive pool, temporary workers, sysmon).
#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn lock_held_across_a_sleep_in_a_default_runtime() {
    check_with(common::workers, 1, 3, lock_across_sleep_in_a, 2);
    check_with(common::workers, 2, 3, lock_across_sleep_in_a, 2);
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn lock_held_across_a_sleep_in_a_two_workers() {
    check(2, 5, lock_across_sleep_in_a, 2);
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn lock_held_across_a_nested_join_sleep_two_workers() {
    check(2, 5, lock_across_nested_join_sleep, 2);
}

// ---------------------------------------------------------------------------------
// A panicking half whose `Drop` waits for its sibling: the unwinding wait blocks the
// thread (documented: what it waits for must be able to run elsewhere), so `b` must
// be visible to the idle worker. rayon (two threads) runs it.
// ---------------------------------------------------------------------------------

fn unwinding_a_waits_for_b() -> u32 {
    let (tx, rx) = chan::bounded::<u32>(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        weft::join(
            move || {
                let _g = common::OnDrop(move || {
                    let _ = rx.recv_blocking();
                });
                panic!("a panics");
            },
            move || tx.send_blocking(1).unwrap(),
        )
    }));
    match r {
        Err(p) if common::panic_message(&*p).as_deref() == Some("a panics") => 5,
        Err(_) => 1,
        Ok(_) => 0,
    }
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn unwinding_half_waits_for_its_sibling_two_workers() {
    check(2, 5, unwinding_a_waits_for_b, 5);
}

// ---------------------------------------------------------------------------------
// Fibers aborted while a join half of theirs waits (the fiber cannot suspend there):
// the abort lands once the wait ends, at the fiber's next suspension; every local
// is dropped once and the handle reports the cancellation. Not a hang.
// ---------------------------------------------------------------------------------

#[test]
fn fiber_aborted_while_its_join_half_waits() {
    common::with_timeout(|| {
        for workers in [1, 2] {
            for in_b in [false, true] {
                let rt = rt_of(workers);
                let drops = common::counter();
                let (tx, rx) = chan::bounded::<()>(0);
                let (started_tx, started_rx) = mpsc::channel();
                let d = drops.clone();
                let h = common::fiber_on(&rt, move || {
                    let _outer = common::DropCounter(d.clone());
                    let wait_half = {
                        let d = d.clone();
                        move || {
                            let _inner = common::DropCounter(d);
                            started_tx.send(()).unwrap();
                            rx.recv_blocking().unwrap();
                        }
                    };
                    if in_b {
                        weft::join(|| (), wait_half);
                    } else {
                        weft::join(wait_half, || ());
                    }
                    // A suspension point after the join.
                    weft::fiber::sleep(Duration::from_millis(20));
                    1u32
                });
                started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
                std::thread::sleep(Duration::from_millis(10));
                h.abort();
                std::thread::sleep(Duration::from_millis(10));
                let _ = tx.send_blocking(());
                let r = common::join_within(h, 20);
                assert!(
                    matches!(&r, Err(e) if e.is_cancelled()) || matches!(r, Ok(1)),
                    "{workers} workers, in_b {in_b}: {r:?}"
                );
                assert_eq!(common::load(&drops), 2);
                common::drop_within(rt, Duration::from_secs(10), "after the abort");
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// A parallel iteration whose items each hold a weft lock across a sleep.
// ---------------------------------------------------------------------------------

fn par_items_lock_across_sleep() -> u32 {
    use weft::par::prelude::*;
    let m = weft::sync::Mutex::new(0u32);
    (0..8u32).into_par_iter().for_each(|_| {
        let mut g = m.lock_blocking();
        weft::wait(weft::time::sleep(Duration::from_millis(1)));
        *g += 1;
    });
    m.into_inner()
}

#[test]
fn par_items_holding_a_lock_across_a_sleep_one_worker() {
    check(1, 3, par_items_lock_across_sleep, 8);
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn par_items_holding_a_lock_across_a_sleep_two_workers() {
    check(2, 3, par_items_lock_across_sleep, 8);
}

// ---------------------------------------------------------------------------------
// More arrangements that must work (and do): an n-party barrier across scope jobs on
// fewer workers than parties (rayon deadlocks here on two threads: its scope waits
// block their threads), and a body that waits for several jobs.
// ---------------------------------------------------------------------------------

fn scope_jobs_barrier_three_parties() -> u32 {
    let bar = weft::sync::Barrier::new(3);
    let leaders = AtomicUsize::new(0);
    weft::scope(|s| {
        for _ in 0..3 {
            let (bar, leaders) = (&bar, &leaders);
            s.spawn(move |_| {
                if bar.wait_blocking().is_leader() {
                    leaders.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    leaders.load(Ordering::SeqCst) as u32
}

#[test]
fn scope_jobs_meet_at_a_barrier_one_worker() {
    check(1, 3, scope_jobs_barrier_three_parties, 1);
}

/// Three parties on two workers: whether the third job runs depends on where the
/// first two wait (rayon needs three threads).
#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn scope_jobs_meet_at_a_barrier_two_workers() {
    check(2, 5, scope_jobs_barrier_three_parties, 1);
}

fn scope_body_waits_for_a_wait_group_of_jobs() -> u32 {
    let wg = weft::sync::WaitGroup::new();
    let n = AtomicUsize::new(0);
    weft::scope(|s| {
        wg.add(4);
        for _ in 0..4 {
            let (wg, n) = (&wg, &n);
            s.spawn(move |_| {
                n.fetch_add(1, Ordering::SeqCst);
                wg.done();
            });
        }
        wg.wait_blocking();
        n.load(Ordering::SeqCst) as u32
    })
}

#[test]
fn scope_body_waits_for_a_wait_group_of_its_jobs() {
    for w in [1, 2, 3] {
        check(w, 3, scope_body_waits_for_a_wait_group_of_jobs, 4);
    }
}

// ---------------------------------------------------------------------------------
// Parallel iterators' results, with waits inside the closures (which run sibling
// pieces nested on the waiting worker): order, associativity, panics and drops.
// ---------------------------------------------------------------------------------

fn maybe_wait(i: u64) {
    if i.is_multiple_of(97) {
        weft::wait(weft::time::sleep(Duration::from_micros(200)));
    } else if i.is_multiple_of(13) {
        weft::wait(weft::task::yield_now());
    }
}

fn par_results() -> u32 {
    use weft::par::prelude::*;
    const N: u64 = 3000;
    let got: Vec<u64> = (0..N)
        .into_par_iter()
        .map(|i| {
            maybe_wait(i);
            i * 2
        })
        .filter(|x| x % 3 != 0)
        .collect();
    let want: Vec<u64> = (0..N).map(|i| i * 2).filter(|x| x % 3 != 0).collect();
    assert_eq!(got, want, "collect order");
    // Associative, not commutative: concatenation.
    let cat = (0..N)
        .into_par_iter()
        .map(|i| {
            maybe_wait(i);
            vec![i]
        })
        .reduce(Vec::new, |mut a, b| {
            a.extend(b);
            a
        });
    assert_eq!(cat, (0..N).collect::<Vec<_>>(), "reduce order");
    // 2x2 matrix products (associative, not commutative).
    type M = [u64; 4];
    fn mul(a: M, b: M) -> M {
        let m = 1_000_003;
        [
            (a[0] * b[0] + a[1] * b[2]) % m,
            (a[0] * b[1] + a[1] * b[3]) % m,
            (a[2] * b[0] + a[3] * b[2]) % m,
            (a[2] * b[1] + a[3] * b[3]) % m,
        ]
    }
    let mats: Vec<M> = (0..N)
        .map(|i| [i % 7 + 1, i % 5, i % 3, i % 11 + 1])
        .collect();
    let seq = mats.iter().copied().fold([1, 0, 0, 1], mul);
    let par = mats
        .par_iter()
        .map(|m| {
            maybe_wait(m[0] * 131 + m[3]);
            *m
        })
        .reduce(|| [1, 0, 0, 1], mul);
    assert_eq!(par, seq, "matrix product");
    1
}

#[test]
fn par_results_with_waits_in_closures() {
    for w in [1, 2, 3] {
        check(w, 2, par_results, 1);
    }
}

fn par_panic_drops_once() -> u32 {
    use weft::par::prelude::*;
    let live = common::live();
    let items: Vec<common::Tracked> = (0..2000).map(|i| common::Tracked::new(i, &live)).collect();
    let seen = AtomicUsize::new(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        items.into_par_iter().for_each(|t| {
            maybe_wait(t.id as u64);
            seen.fetch_add(1, Ordering::SeqCst);
            if t.id == 1234 {
                panic!("item 1234");
            }
        })
    }));
    let p = r.expect_err("the panic propagates");
    assert_eq!(common::panic_message(&*p).as_deref(), Some("item 1234"));
    assert_eq!(common::load(&live), 0, "every item dropped");
    assert!(common::load(&seen) >= 1);
    1
}

#[test]
fn par_panic_in_closure_drops_every_item_once() {
    for w in [1, 2] {
        check(w, 2, par_panic_drops_once, 1);
    }
}
