//! Review of a change tried in session 23 and reverted after this review: a fiber
//! about to start on a worker with at least two more fibers tied to it than another
//! base worker was handed, unstarted, to the one with the fewest (its home written
//! into the task header, so it went to that worker's inbox, where nobody else takes
//! it). These tests stay as guards for any later placement of fibers at their start.
//!
//! - The first three tests are the bugs it had: a fiber that has not started was
//!   pinned to a worker chosen by its count of tied fibers alone, which may be stuck
//!   in one poll (a task that blocks its thread, not yet marked stalled) or blocked in
//!   a wait that runs nothing (`wait_unwinding`); the fiber then waited for that
//!   worker, for ever if that worker waited for it, where before (and again now) any
//!   free worker (or a temporary one) runs it.
//! - What must hold: a started fiber never changes thread (thread id and a
//!   thread-local's address, across yields, sleeps, channel receives and joins right
//!   at its start); no fiber is lost or run twice; every capture is dropped once
//!   (runtime drop and `shutdown_timeout` amid bursts of spawns); one-worker runtimes;
//!   bursts of 10,000 fibers from threads, tasks, fibers and `block_on` at once on 2
//!   and 4 workers, with temporary workers that must all retire.
//!
//! Every test runs under a watchdog, so a hang fails it.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{mpsc, Arc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use common::placement::*;
use common::{counter, load, on, with_timeout, workers, TIMEOUT};
use weft::fiber;

// ---------------------------------------------------------------------------------
// Bugs: a fiber handed, before it started, to a worker that cannot run it.

/// A worker that runs a task stuck in one long poll (here: waiting, thread-blocking,
/// for a message that a fiber sends) is no place to hand a fiber that has not started
/// yet: before the hand-off the fiber could start anywhere (an idle worker, or a
/// temporary one, takes it), after it the fiber is tied to the stuck worker's inbox and
/// waits for that poll to end, here for ever (a deadlock that a timeout ends).
#[test]
fn a_fiber_is_not_handed_to_a_worker_stuck_in_a_poll() {
    with_timeout(|| {
        let rt = workers(2);
        // Two fibers tied to one worker, none to the other.
        let hub = Hub::new(&rt);
        // Blocks the other worker until the fiber below sends (at most 3 s).
        let (blocker, stuck, msg_tx) = block_away_from(&rt, &hub, Duration::from_secs(3));
        // Spawned and joined by the hub: its first poll is on the hub's worker.
        let (got, took, sender_on) = hub.release_from_a_new_fiber(blocker, msg_tx);
        hub.close();
        assert!(
            got && took < ms(2_000),
            "the fiber that the stuck task waits for did not run while a worker was free \
             (got it: {got}, after {took:?}; it ran on the stuck worker: {})",
            sender_on == stuck
        );
    })
}

/// A `Drop` that waits while a panic unwinds blocks its worker without running other
/// tasks (`wait_unwinding`, `Core::block_until`), which first moves what it spawned
/// out of its LIFO slot so another worker may run it. A fiber spawned there is taken
/// by the other worker, which, having two more fibers tied to it, hands it back to the
/// blocked worker's inbox before it starts: the wait can then never end (here a 3 s
/// timeout ends it). Before the hand-off the fiber simply ran on the other worker.
#[test]
fn a_wait_in_a_drop_during_a_panic_gets_the_fiber_it_spawned() {
    with_timeout(|| {
        let rt = workers(2);
        let hub = Hub::new(&rt);
        struct WaitOnDrop(mpsc::Sender<(bool, Option<ThreadId>)>);
        impl Drop for WaitOnDrop {
            fn drop(&mut self) {
                let (tx, rx) = weft::chan::bounded(1);
                let _f = fiber::spawn(move || {
                    let _ = tx.try_send(std::thread::current().id());
                });
                let got = rx.recv_timeout(Duration::from_secs(3)).ok();
                let _ = self.0.send((std::thread::panicking(), got));
            }
        }
        let (result_tx, result_rx) = mpsc::channel();
        let (panicked, _) = spawn_away_from(&rt, &hub, async move {
            let _guard = WaitOnDrop(result_tx);
            quiet_panic();
        });
        let (unwinding, got) = result_rx.recv_timeout(TIMEOUT).unwrap();
        assert!(panicked.join().unwrap_err().is_panic());
        hub.close();
        assert!(unwinding, "the guard did not run during the unwind");
        assert!(
            got.is_some(),
            "the fiber spawned by a wait during a panic never ran: handed to the \
             worker blocked in that wait"
        );
    })
}

/// The same with temporary workers: the only base worker is stuck in a task that waits
/// for a fiber; a temporary worker starts and runs the fibers spawned meanwhile (what
/// `Builder::max_extra_workers` is for), but once two are tied to it, the next one is
/// handed to the stuck base worker (not yet marked stalled) and never starts.
#[test]
fn a_temporary_worker_does_not_hand_a_fiber_to_the_stuck_base_worker() {
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(1)
            .max_extra_workers(1)
            .build()
            .unwrap();
        let (msg_tx, msg_rx) = mpsc::channel::<()>();
        let (up_tx, up_rx) = mpsc::channel::<ThreadId>();
        let blocker = rt.spawn(async move {
            up_tx.send(std::thread::current().id()).unwrap();
            msg_rx.recv_timeout(Duration::from_secs(3)).is_ok()
        });
        let stuck = up_rx.recv_timeout(TIMEOUT).unwrap();
        let hub = Hub::new(&rt);
        assert_ne!(hub.at, stuck);
        let (got, took, sender_on) = hub.release_from_a_new_fiber(blocker, msg_tx);
        hub.close();
        assert!(
            got && took < ms(2_000),
            "the fiber that the stuck task waits for did not run on the temporary worker \
             (got it: {got}, after {took:?}; it ran on the stuck worker: {})",
            sender_on == stuck
        );
    })
}

// ---------------------------------------------------------------------------------
// What must hold whatever the hand-off does.

/// A fiber's body: waits twice right from its start (of six kinds, from `kind`) and
/// says whether it stayed on its thread (and thread-local) throughout. Returns the
/// thread it ran on.
fn stay_put(kind: usize) -> Result<ThreadId, String> {
    let start = here();
    for step in 0..2 {
        let what = match (kind + step) % 6 {
            0 => {
                fiber::yield_now();
                "yield_now"
            }
            1 => {
                fiber::sleep(Duration::ZERO);
                "sleep(0)"
            }
            2 => {
                fiber::sleep(ms(1));
                "sleep(1 ms)"
            }
            3 => {
                let (tx, rx) = weft::chan::bounded::<u8>(1);
                let _t = weft::spawn(async move { tx.send(7).await.unwrap() });
                assert_eq!(weft::wait(rx.recv()), Ok(7));
                "a channel receive"
            }
            4 => {
                weft::wait(weft::spawn(async {})).unwrap();
                "a task's join"
            }
            _ => {
                fiber::spawn(fiber::yield_now).join().unwrap();
                "a fiber's join"
            }
        };
        let now = here();
        if now != start {
            return Err(format!(
                "a fiber moved across {what} (step {step}): {start:?} -> {now:?}"
            ));
        }
    }
    Ok(start.0)
}

type Fibers = Vec<weft::JoinHandle<Result<ThreadId, String>>>;

/// `n` fibers running [`stay_put`], each holding a [`Tracked`]; after every `batch`th
/// one the spawner waits until it started (so some start one at a time, as a server's
/// do, and the rest in bursts). `batch` 0: no waits (a task must not spin on its
/// worker for a fiber queued in that worker's LIFO slot).
fn spawn_checked(n: usize, batch: usize, tracker: &Tracker, first: usize) -> Fibers {
    let started = counter();
    (0..n)
        .map(|i| {
            let (t, started2) = (tracker.make(), started.clone());
            let h = fiber::spawn(move || {
                let _t = t;
                started2.fetch_add(1, SeqCst);
                stay_put(first + i)
            });
            if batch != 0 && i % batch == 0 {
                while load(&started) <= i {
                    fiber::yield_now();
                    std::thread::yield_now();
                }
            }
            h
        })
        .collect()
}

/// Fibers spawned at once from plain threads (with the runtime entered), tasks,
/// fibers and `block_on`, `per` from each of `spawners` of each kind, all waiting
/// right at their start: every one finishes, on the thread it started on, and drops
/// its closure once.
fn storm(workers: usize, spawners: usize, per: usize) {
    let _heavy = heavy();
    with_timeout(move || {
        let rt = Arc::new(with_temps(workers));
        let tracker = Tracker::new();
        let barrier = Arc::new(std::sync::Barrier::new(spawners * 4));
        let mut threads = Vec::new();
        for s in 0..spawners * 4 {
            let (rt, tracker, barrier) = (rt.clone(), tracker.clone(), barrier.clone());
            threads.push(std::thread::spawn(move || -> Fibers {
                let first = s * per;
                let batch = 1 + s % 7;
                barrier.wait();
                match s % 4 {
                    0 => {
                        let _in = rt.handle().enter();
                        spawn_checked(per, batch, &tracker, first)
                    }
                    1 => rt
                        .spawn(async move { spawn_checked(per, 0, &tracker, first) })
                        .join()
                        .unwrap(),
                    2 => on(&rt, || {
                        fiber::spawn(move || spawn_checked(per, batch, &tracker, first))
                    })
                    .join()
                    .unwrap(),
                    _ => on(&rt, || spawn_checked(per, batch, &tracker, first)),
                }
            }));
        }
        let mut ran_on = std::collections::HashMap::<ThreadId, usize>::new();
        let mut done = 0;
        for t in threads {
            for h in t.join().unwrap() {
                let at = h.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
                *ran_on.entry(at).or_default() += 1;
                done += 1;
            }
        }
        assert_eq!(done, spawners * 4 * per);
        assert!(
            ran_on.len() >= workers,
            "{done} fibers on {workers} workers started on {} threads: {ran_on:?}",
            ran_on.len()
        );
        // Temporary workers that ran some (started while spawners kept workers busy)
        // retire once idle: none keeps a count of fibers tied to it.
        retired_all(&rt);
        drop(Arc::try_unwrap(rt).unwrap());
        tracker.check("storm");
    })
}

#[test]
fn a_storm_of_fibers_from_every_context_stays_put_on_two_workers() {
    storm(2, 2, 1_250);
}

#[test]
fn a_storm_of_fibers_from_every_context_stays_put_on_four_workers() {
    storm(4, 2, 1_250);
}

/// [`start_one_by_one`] with each fiber's start thread and that thread's name.
fn one_by_one(n: usize) -> Vec<(ThreadId, String)> {
    start_one_by_one_with(n, || {
        let t = std::thread::current();
        (t.id(), t.name().unwrap_or("").to_owned())
    })
}

/// How many of `starts` are on each thread, fewest first.
fn counts(starts: &[(ThreadId, String)]) -> Vec<usize> {
    let mut by_thread = std::collections::HashMap::<ThreadId, usize>::new();
    for (t, _) in starts {
        *by_thread.entry(*t).or_default() += 1;
    }
    let mut counts: Vec<usize> = by_thread.into_values().collect();
    counts.sort_unstable();
    counts
}

/// [`one_by_one`] from a fiber of `rt`: how many started on each thread.
fn spread(rt: &weft::Runtime, n: usize) -> Vec<usize> {
    counts(&on(rt, || {
        fiber::spawn(move || one_by_one(n)).join().unwrap()
    }))
}

/// Dropping the runtime while fibers are being spawned, handed over and parked (on two
/// workers, with temporary workers or not): the drop returns, and every fiber's
/// closure (its captures) is dropped exactly once, started or not.
#[test]
fn dropping_the_runtime_amid_hand_offs_drops_every_fiber_once() {
    let _heavy = heavy();
    with_timeout(|| {
        let tracker = Tracker::new();
        for iter in 0..12u64 {
            let rt = if iter % 2 == 0 {
                workers(2)
            } else {
                with_temps(2)
            };
            let spawners: Vec<_> = on(&rt, || {
                (0..4)
                    .map(|s| {
                        let t = tracker.clone();
                        fiber::spawn(move || {
                            let mut n = 0;
                            while n < 400 {
                                let v = t.make();
                                let parks = (n + s) % 3 != 0;
                                let spawned = fiber::try_spawn(move || {
                                    let _v = v;
                                    if parks {
                                        fiber::sleep(Duration::from_secs(3_600));
                                    }
                                });
                                if spawned.is_err() {
                                    break;
                                }
                                n += 1;
                                if n % 4 == s {
                                    fiber::yield_now();
                                }
                            }
                            fiber::sleep(Duration::from_secs(3_600));
                        })
                    })
                    .collect()
            });
            std::thread::sleep(Duration::from_micros(iter * 300));
            let t0 = Instant::now();
            drop(rt);
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the runtime's drop took {:?}",
                t0.elapsed()
            );
            for h in spawners {
                assert!(h.join().unwrap_err().is_cancelled());
            }
            assert_eq!(load(&tracker.twice), 0, "a fiber's capture dropped twice");
        }
        assert!(load(&tracker.made) > 0);
        tracker.check("runtime drop");
    })
}

/// On a runtime of one worker (no temporary ones) nothing is handed over: every fiber
/// starts, and stays, on the one worker thread.
#[test]
fn on_one_worker_every_fiber_starts_and_stays_on_it() {
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(1)
            .max_extra_workers(0)
            .build()
            .unwrap();
        let worker = rt
            .spawn(async { std::thread::current().id() })
            .join()
            .unwrap();
        assert_eq!(spread(&rt, 30), vec![30]);
        let tracker = Tracker::new();
        let t = tracker.clone();
        let fibers = on(&rt, || {
            fiber::spawn(move || spawn_checked(600, 3, &t, 0))
                .join()
                .unwrap()
        });
        for h in fibers {
            assert_eq!(h.join().unwrap(), Ok(worker));
        }
        drop(rt);
        tracker.check("one worker");
    })
}

/// `shutdown_timeout` gives up on a worker stuck in a task: the fibers handed to that
/// worker (which never started) are dropped all the same, and those parked on the other
/// worker are unwound there; every handle reports the cancellation.
#[test]
fn shutdown_timeout_drops_the_fibers_handed_to_a_stuck_worker() {
    with_timeout(|| {
        let rt = workers(2);
        let hub = Hub::new(&rt);
        let (_blocker, _stuck, release_tx) = block_away_from(&rt, &hub, TIMEOUT);
        let tracker = Tracker::new();
        let t = tracker.clone();
        let fibers = hub.run(move || {
            (0..10)
                .map(|_| {
                    let v = t.make();
                    let h = fiber::spawn(move || {
                        let _v = v;
                        fiber::sleep(Duration::from_secs(3_600));
                    });
                    fiber::yield_now();
                    h
                })
                .collect::<Vec<_>>()
        });
        rt.shutdown_timeout(ms(200));
        for h in fibers {
            assert!(h.join().unwrap_err().is_cancelled());
        }
        tracker.check("shutdown_timeout");
        drop(release_tx);
        drop(hub);
    })
}
