//! Adversarial review of 7b8fde1, 0e9d8fb and da88cd3: `Idle::claim_parked` returns at
//! once when no parked bit is set, the watch looks at the injection queue at every look
//! and at peers every batch, and a watching worker counts as hungry for `join`.
//!
//! The dangerous producer is a worker pushing to its OWN queue (a spawn from a task, a
//! fork-join half) while it stays busy: its claim finds no bit (the other worker is
//! watching, or between the watch and `publish_parked`), so only the other worker's
//! fenced re-check (which looks at peers only when nobody searches) or a searcher's
//! hand-off can find the work. Each test keeps the producer busy until the work ran
//! elsewhere, with a deadline far beyond any wake-up, so a lost wake-up fails the test
//! instead of being rescued by the producer itself. Every body runs under a watchdog.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{spin_for, Rng};

/// Generous: CI runs many tests on two cores, and a process may be stopped a while.
const LIMIT: Duration = Duration::from_secs(150);
/// How long a busy producer waits for its work to run elsewhere before it calls that a
/// lost wake-up: thousands of times a futex wake, and past a SIGSTOP of the lead's.
const ROUND_LIMIT: Duration = Duration::from_secs(30);

fn watchdog<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    common::with_limit(LIMIT, f)
}

/// A gap that lands the idle workers in every phase: inside the watch (a few us), at
/// its end, in the sleep transition, or asleep (a few hundred us).
fn gap(rng: &mut Rng) {
    match rng.next() % 8 {
        0..=3 => spin_for(Duration::from_nanos(rng.next() % 15_000)),
        4..=5 => spin_for(Duration::from_nanos(20_000 + rng.next() % 60_000)),
        6 => spin_for(Duration::from_nanos(100_000 + rng.next() % 300_000)),
        _ => {}
    }
}

/// Spins (busy, never yielding to the scheduler) until `flag` is set; false at the
/// deadline.
fn busy_until(flag: &AtomicBool) -> bool {
    let start = Instant::now();
    while !flag.load(SeqCst) {
        if start.elapsed() > ROUND_LIMIT {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// `producers` tasks, each on its own worker of a `workers`-worker runtime (so at
/// least one worker is left idle), spawn children onto their own queues and then stay
/// busy until a child has run on another worker. Returns the slowest round.
fn own_queue_spawns_run_elsewhere(workers: usize, producers: usize, rounds: u64) -> Duration {
    let rt = common::workers(workers);
    let started = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..producers)
        .map(|p| {
            let started = started.clone();
            rt.spawn(async move {
                // All producers busy at once, on distinct workers (each spins here
                // until all have started, so no two share a worker).
                started.fetch_add(1, SeqCst);
                let t0 = Instant::now();
                while started.load(SeqCst) < producers {
                    assert!(t0.elapsed() < ROUND_LIMIT, "producers never all started");
                    std::hint::spin_loop();
                }
                let mut rng = Rng(0x5851_f42d_4c95_7f2d ^ ((p as u64 + 1) * 0x9e37));
                let mut slowest = Duration::ZERO;
                for round in 0..rounds {
                    gap(&mut rng);
                    let ran = Arc::new(AtomicBool::new(false));
                    // Two children: the first is pushed out of the LIFO slot into the
                    // stealable queue by the second.
                    for _ in 0..2 {
                        let ran = ran.clone();
                        drop(weft::spawn(async move {
                            ran.store(true, SeqCst);
                        }));
                    }
                    let t = Instant::now();
                    assert!(
                        busy_until(&ran),
                        "{workers} workers, {producers} busy producers, round {round}: a \
                         child spawned onto a busy worker's queue never ran while another \
                         worker was idle (lost wake-up)"
                    );
                    slowest = slowest.max(t.elapsed());
                }
                slowest
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap()
}

#[test]
fn spawn_onto_a_busy_workers_own_queue_reaches_the_idle_one() {
    watchdog(|| {
        for (workers, producers, rounds) in [(2, 1, 1500), (3, 2, 600), (4, 3, 400), (4, 1, 600)] {
            let slowest = own_queue_spawns_run_elsewhere(workers, producers, rounds);
            eprintln!("{workers} workers, {producers} producers: slowest round {slowest:?}");
        }
    });
}

/// A `join` whose first half computes for a while (20 ms, joining no more) while its
/// second half is as long: with an idle peer the second half must run there, at the
/// same time (the first half watches for it and stops early when it ran). This after
/// many tiny joins have taught the joiner that its joins are short, so that a parked
/// peer gets the half only "quietly" (`Core::outermost_join`: shown on the deque, no
/// wake, the first heartbeat to wake a sleeper; but a heartbeat comes only from a
/// later join, and this first half joins no more). Counts the joins whose halves ran
/// one after the other on one thread.
fn serial_joins(workers: usize, rounds: u32, warm_up: bool) -> u32 {
    let rt = common::workers(workers);
    rt.spawn(async move {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ workers as u64);
        let mut serial = 0;
        for _ in 0..rounds {
            if warm_up {
                for _ in 0..2_000 {
                    weft::join(|| 1, || 2);
                }
            }
            gap(&mut rng);
            let b_ran = AtomicBool::new(false);
            let (overlapped, ()) = weft::join(
                || {
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_millis(20) {
                        if b_ran.load(SeqCst) {
                            return true;
                        }
                        std::hint::spin_loop();
                    }
                    false
                },
                || b_ran.store(true, SeqCst),
            );
            serial += u32::from(!overlapped);
        }
        serial
    })
    .join()
    .unwrap()
}

/// Without warm-up, for reference: joins here are long, so the peer is woken.
#[test]
fn long_join_with_an_idle_peer_is_shared() {
    watchdog(|| {
        for workers in [2, 3] {
            let serial = serial_joins(workers, 60, false);
            eprintln!("{workers} workers, no warm-up: {serial}/60 joins serial");
            assert!(
                serial <= 6,
                "{workers} workers: {serial} of 60 long joins ran serially"
            );
        }
    });
}

/// The same after tiny joins: found in review (see `serial_joins`). Predates the
/// reviewed commits: at 8191f74^ 20 of 30 such joins ran serially (2 workers, debug,
/// loaded 2 cores), at da88cd3 11 of 30 (a watching peer now counts as hungry, a parked
/// one still gets the half quietly and no heartbeat comes), 25 of 30 in release on the
/// session-30 machine. Fixed by sysmon's look at the job deques (jobs offered at two
/// looks in a row wake a sleeper): 0 of 30. The default runtime has a sysmon
/// (temporary workers are on).
#[test]
fn long_join_after_tiny_joins_with_a_parked_peer_is_shared() {
    watchdog(|| {
        for workers in [2, 3] {
            let serial = serial_joins(workers, 30, true);
            eprintln!("{workers} workers, after tiny joins: {serial}/30 joins serial");
            assert!(
                serial <= 6,
                "{workers} workers: {serial} of 30 long joins (20 ms halves, made after \
                 tiny joins) ran serially while a peer slept"
            );
        }
    });
}

/// Many plain threads inject tasks (the claim's early return is their common case)
/// while the workers go idle between bursts; every task runs and the runtime shuts
/// down with none left.
#[test]
fn many_outside_producers_against_idle_workers() {
    watchdog(|| {
        for workers in [1, 2, 4] {
            let rt = common::workers(workers);
            let count = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..4u64)
                .map(|p| {
                    let h = rt.handle().clone();
                    let count = count.clone();
                    std::thread::spawn(move || {
                        let mut rng = Rng(0xdead_beef ^ ((p + 1) * 0x1234_5677));
                        for _ in 0..1_000 {
                            gap(&mut rng);
                            let count = count.clone();
                            let (tx, rx) = mpsc::channel();
                            drop(h.spawn(async move {
                                count.fetch_add(1, SeqCst);
                                let _ = tx.send(());
                            }));
                            rx.recv_timeout(ROUND_LIMIT)
                                .expect("an injected task never ran (lost wake-up)");
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(count.load(SeqCst), 4_000);
            drop(rt);
        }
    });
}
