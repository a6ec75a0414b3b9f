//! Adversarial review (s19) of three changes, from safe code only:
//!
//! * 2745604, `fiber::wait::wait_until`: on a fiber, a timed wait whose deadline has
//!   passed by its first poll yields the fiber before it returns the timeout, so a
//!   retry loop lets its worker run a partner homed there.
//! * a4c3ea2, `Core::park` and `timer::Driver::until_next`: a parking worker spins
//!   before it offers to hold the timer driver (a timer registered during that spin has
//!   no holder to shorten, and fires when the spin ends).
//! * a4c3ea2, `Select::select_async`: the machine is boxed.
//!
//! Every wait is bounded (a watchdog, or a retry loop with a time cap that fails the
//! test). Values count their drops, so a lost or doubled value is seen. Meant to run
//! under valgrind too (small sizes: `REVIEW_S19_SMALL=1`).

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use chan_common::{
    count_waker, drop_after, fiber_on, join_within, make, seed, watchdog, Drops, Rng, Tracked,
};
use weft::chan::{
    after, bounded, never, tick, unbounded, Receiver, RecvTimeoutError, Select, SendTimeoutError,
    Sender,
};
use weft::Runtime;

/// Under valgrind (`REVIEW_S19_SMALL=1`): fewer iterations.
fn small() -> bool {
    std::env::var_os("REVIEW_S19_SMALL").is_some()
}

fn scale(n: usize) -> usize {
    chan_common::scale_if(small(), n)
}

fn rt_with(workers: usize) -> Runtime {
    weft::Builder::new()
        .worker_threads(workers)
        .max_extra_workers(0)
        .build()
        .unwrap()
}

/// Retries `attempt` until it gives `Some`; `None` once `limit` has passed *and* it
/// was tried at least `min_tries` times (so a process paused for a minute by the
/// machine's other users does not count as a hang: a loop that yields lets its partner
/// run within its first few tries).
fn retry<T>(limit: Duration, min_tries: u64, mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let mut tries = 0u64;
    loop {
        if let Some(v) = attempt() {
            return Some(v);
        }
        tries += 1;
        if tries >= min_tries && start.elapsed() > limit {
            return None;
        }
    }
}

// ---------------------------------------------------------------------------------
// 1. Expired timed waits on a fiber yield.

/// Every kind of timed wait a fiber can retry with an expired deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expired {
    RecvTimeout,
    RecvDeadline,
    SendTimeout,
    SendDeadline,
    SelectRecvTimeout,
    SelectRecvDeadline,
    SelectSendTimeout,
    ReadyTimeout,
    ReadyDeadline,
    /// A select over the channel and a far timer channel.
    SelectWithTimer,
    /// `never().recv_timeout(ZERO)`, until a flag is set.
    Never,
}

const CHANNEL_KINDS: [Expired; 11] = [
    Expired::RecvTimeout,
    Expired::RecvDeadline,
    Expired::SendTimeout,
    Expired::SendDeadline,
    Expired::SelectRecvTimeout,
    Expired::SelectRecvDeadline,
    Expired::SelectSendTimeout,
    Expired::ReadyTimeout,
    Expired::ReadyDeadline,
    Expired::SelectWithTimer,
    Expired::Never,
];

impl Expired {
    fn sends(self) -> bool {
        matches!(
            self,
            Expired::SendTimeout | Expired::SendDeadline | Expired::SelectSendTimeout
        )
    }
}

/// One try of `kind` with an expired deadline: `Some(value)` once it got the value
/// (receives) or placed `*value` (sends, which give it back on a timeout).
fn expired_try(
    kind: Expired,
    tx: &Sender<u32>,
    rx: &Receiver<u32>,
    value: &mut Option<u32>,
    flag: &AtomicBool,
) -> Option<u32> {
    let z = Duration::ZERO;
    match kind {
        Expired::RecvTimeout => match rx.recv_timeout(z) {
            Ok(v) => Some(v),
            Err(e) => {
                assert!(e.is_timeout());
                None
            }
        },
        Expired::RecvDeadline => rx.recv_deadline(Instant::now()).ok(),
        Expired::SendTimeout | Expired::SendDeadline => {
            let v = value.take().expect("a value to send");
            let r = if kind == Expired::SendTimeout {
                tx.send_timeout(v, z)
            } else {
                tx.send_deadline(v, Instant::now())
            };
            match r {
                Ok(()) => Some(v),
                Err(SendTimeoutError::Timeout(back)) => {
                    assert_eq!(back, v, "the timed-out send gave back another value");
                    *value = Some(back);
                    None
                }
                Err(SendTimeoutError::Disconnected(_)) => panic!("receiver gone"),
            }
        }
        Expired::SelectRecvTimeout | Expired::SelectRecvDeadline => {
            let mut sel = Select::new();
            let i = sel.recv(rx);
            let r = if kind == Expired::SelectRecvTimeout {
                sel.select_timeout(z)
            } else {
                sel.select_deadline(Instant::now())
            };
            r.ok().map(|op| {
                assert_eq!(op.index(), i);
                op.recv(rx).unwrap()
            })
        }
        Expired::SelectSendTimeout => {
            let mut sel = Select::new();
            sel.send(tx);
            match sel.select_timeout(z) {
                Ok(op) => {
                    let v = value.take().expect("a value to send");
                    op.send(tx, v).unwrap();
                    Some(v)
                }
                Err(_) => None,
            }
        }
        Expired::ReadyTimeout | Expired::ReadyDeadline => {
            let mut sel = Select::new();
            sel.recv(rx);
            let r = if kind == Expired::ReadyTimeout {
                sel.ready_timeout(z).is_ok()
            } else {
                sel.ready_deadline(Instant::now()).is_ok()
            };
            // Ready: the only receiver is this fiber, so the value is there.
            r.then(|| rx.try_recv().expect("ready, and nobody else receives"))
        }
        Expired::SelectWithTimer => {
            let far = after(Duration::from_secs(3600));
            let mut sel = Select::new();
            let i = sel.recv(rx);
            sel.recv(&far);
            sel.select_timeout(z).ok().map(|op| {
                assert_eq!(op.index(), i, "a timer an hour away was selected");
                op.recv(rx).unwrap()
            })
        }
        Expired::Never => {
            assert!(never::<u32>().recv_timeout(z).unwrap_err().is_timeout());
            flag.load(SeqCst).then_some(7)
        }
    }
}

/// The partner of [`expired_try`]: gives the looping fiber what it waits for.
fn partner(kind: Expired, tx: &Sender<u32>, rx: &Receiver<u32>, flag: &AtomicBool) -> u32 {
    if kind == Expired::Never {
        flag.store(true, SeqCst);
        return 7;
    }
    if kind.sends() {
        // The channel was full (0 in it): take it, then the looper's value.
        assert_eq!(rx.recv_blocking().unwrap(), 0);
        rx.recv_blocking().unwrap()
    } else {
        tx.send_blocking(7).unwrap();
        7
    }
}

/// A fiber that retries an expired timed wait of each kind lets a fiber homed on the
/// same (only) worker run: the partner is spawned only once the looper loops, so the
/// worker must leave the looper for it.
#[test]
fn expired_timed_waits_of_every_kind_let_a_pinned_partner_run() {
    watchdog(300, || {
        let rt = rt_with(1);
        for kind in CHANNEL_KINDS {
            let (tx, rx) = bounded::<u32>(1);
            if kind.sends() {
                tx.try_send(0).unwrap();
            }
            let flag = Arc::new(AtomicBool::new(false));
            let looping = Arc::new(AtomicBool::new(false));
            let tries = Arc::new(AtomicU64::new(0));
            let looper = {
                let (tx, rx, flag, looping, tries) = (
                    tx.clone(),
                    rx.clone(),
                    flag.clone(),
                    looping.clone(),
                    tries.clone(),
                );
                fiber_on(&rt, move || {
                    let mut value = Some(9);
                    retry(Duration::from_secs(10), 20_000, || {
                        looping.store(true, SeqCst);
                        tries.fetch_add(1, SeqCst);
                        expired_try(kind, &tx, &rx, &mut value, &flag)
                    })
                })
            };
            chan_common::wait_for("the looper to loop", 60, || looping.load(SeqCst));
            let p = fiber_on(&rt, move || partner(kind, &tx, &rx, &flag));
            let got = join_within(looper, 120).unwrap();
            assert!(
                got.is_some(),
                "{kind:?}: the looper gave up after {} tries: its partner never ran",
                tries.load(SeqCst)
            );
            let expect = if kind.sends() { 9 } else { 7 };
            assert_eq!(got, Some(expect), "{kind:?}");
            assert_eq!(join_within(p, 60).unwrap(), expect, "{kind:?}");
        }
    });
}

/// Timed waits that do not go through a channel's `wait_until`, retried by a fiber
/// with an expired deadline: the same promise ("a timed wait of any kind") would have
/// them yield too.
#[derive(Clone, Copy, Debug)]
enum OtherExpired {
    /// `after(1 h).recv_timeout(ZERO)`: a timer channel's receive.
    AfterRecvTimeout,
    /// `tick(1 h).recv_deadline(now)`.
    TickRecvDeadline,
    /// `weft::fiber::sleep(ZERO)`.
    FiberSleepZero,
    /// `weft::wait(weft::time::timeout(ZERO, pending()))`.
    WaitTimeoutZero,
}

fn other_expired_try(kind: OtherExpired, flag: &AtomicBool) -> Option<()> {
    match kind {
        OtherExpired::AfterRecvTimeout => {
            let far = after(Duration::from_secs(3600));
            assert!(far.recv_timeout(Duration::ZERO).unwrap_err().is_timeout());
        }
        OtherExpired::TickRecvDeadline => {
            let far = tick(Duration::from_secs(3600));
            assert!(far.recv_deadline(Instant::now()).unwrap_err().is_timeout());
        }
        OtherExpired::FiberSleepZero => weft::fiber::sleep(Duration::ZERO),
        OtherExpired::WaitTimeoutZero => {
            let r = weft::wait(weft::time::timeout(
                Duration::ZERO,
                std::future::pending::<()>(),
            ));
            assert!(r.is_err());
        }
    }
    flag.load(SeqCst).then_some(())
}

fn other_expired_lets_partner_run(kind: OtherExpired) -> Result<(), String> {
    let rt = rt_with(1);
    let flag = Arc::new(AtomicBool::new(false));
    let looping = Arc::new(AtomicBool::new(false));
    let tries = Arc::new(AtomicU64::new(0));
    let looper = {
        let (flag, looping, tries) = (flag.clone(), looping.clone(), tries.clone());
        fiber_on(&rt, move || {
            retry(Duration::from_secs(5), 20_000, || {
                looping.store(true, SeqCst);
                tries.fetch_add(1, SeqCst);
                other_expired_try(kind, &flag)
            })
        })
    };
    chan_common::wait_for("the looper to loop", 60, || looping.load(SeqCst));
    let p = {
        let flag = flag.clone();
        fiber_on(&rt, move || flag.store(true, SeqCst))
    };
    let got = join_within(looper, 120).unwrap();
    join_within(p, 60).unwrap();
    match got {
        Some(()) => Ok(()),
        None => Err(format!(
            "{kind:?}: the looper gave up after {} tries: its partner never ran",
            tries.load(SeqCst)
        )),
    }
}

/// The timer channels' receives with an expired deadline returned without yielding
/// (`Timer::recv_blocking` checked the deadline before it ever waited), so a fiber
/// retrying `after(..).recv_timeout(ZERO)` (say, in a loop that also `try_recv`s a
/// channel a partner feeds) kept its worker for ever. Found in this review; fixed in
/// `Timer::recv_blocking` (yields when it times out without having waited).
#[test]
fn expired_timer_channel_receives_let_a_pinned_partner_run() {
    watchdog(120, || {
        let mut failures = Vec::new();
        for kind in [
            OtherExpired::AfterRecvTimeout,
            OtherExpired::TickRecvDeadline,
        ] {
            if let Err(e) = other_expired_lets_partner_run(kind) {
                failures.push(e);
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    });
}

/// `fiber::sleep(ZERO)`: a fiber polling a flag this way kept its worker (the sleep
/// was ready at its first poll and `wait` returned without suspending). Found in this
/// review; fixed in `fiber::sleep` (yields as `wait_until` does).
#[test]
fn expired_fiber_sleeps_let_a_pinned_partner_run() {
    watchdog(120, || {
        other_expired_lets_partner_run(OtherExpired::FiberSleepZero).unwrap();
    });
}

/// `weft::wait` of a future that is ready at once (an expired `time::timeout`) does
/// not suspend (a future ready at its first poll costs no switch), so such a loop kept
/// its worker for ever. Fixed with a budget: 128 ready waits in a row make the next one
/// yield first (`fiber/future.rs`, `READY_BUDGET`).
#[test]
fn expired_wait_on_a_ready_timeout_lets_a_pinned_partner_run() {
    watchdog(120, || {
        other_expired_lets_partner_run(OtherExpired::WaitTimeoutZero).unwrap();
    });
}

/// Two workers, fibers retrying expired receives (and selects) while their partners
/// feed them from every context: a fiber spawned by the looper itself (so most likely
/// homed on the looper's worker), a task, a plain thread and a fiber spawned from
/// outside. Every looper gets its partner's values in order, within its time cap.
#[test]
fn expired_retries_on_two_workers_with_partners_in_every_context() {
    watchdog(300, || {
        let rt = rt_with(2);
        let per = scale(300) as u32;
        let mut loopers = Vec::new();
        let mut threads = Vec::new();
        for p in 0..8usize {
            let (tx, rx) = bounded::<u32>(1);
            let feed = move |tx: Sender<u32>| {
                for i in 0..per {
                    tx.send_blocking(i).unwrap();
                }
            };
            let select = p % 2 == 1;
            let ctx = p / 2;
            let tx_for_looper = (ctx == 0).then(|| tx.clone());
            let looper = fiber_on(&rt, move || {
                let _inner = tx_for_looper.map(|tx| weft::fiber::spawn(move || feed(tx)));
                let mut got = Vec::new();
                let start = Instant::now();
                let mut tries = 0u64;
                while got.len() < per as usize {
                    tries += 1;
                    assert!(
                        tries < 20_000 || start.elapsed() < Duration::from_secs(60),
                        "looper {p}: stuck at {} of {per} after {tries} tries",
                        got.len()
                    );
                    let r = if select {
                        let mut sel = Select::new();
                        sel.recv(&rx);
                        sel.select_timeout(Duration::ZERO)
                            .ok()
                            .map(|op| op.recv(&rx).unwrap())
                    } else {
                        rx.recv_timeout(Duration::ZERO).ok()
                    };
                    got.extend(r);
                }
                got
            });
            match ctx {
                0 => drop(tx),
                1 => {
                    rt.spawn(async move { weft::wait(async move { feed(tx) }) });
                }
                2 => threads.push(std::thread::spawn(move || feed(tx))),
                _ => {
                    fiber_on(&rt, move || feed(tx));
                }
            }
            loopers.push(looper);
        }
        for (p, h) in loopers.into_iter().enumerate() {
            assert_eq!(
                join_within(h, 200).unwrap(),
                (0..per).collect::<Vec<_>>(),
                "looper {p}"
            );
        }
        for t in threads {
            t.join().unwrap();
        }
    });
}

/// The fork-join case: inside `join` (or `scope`) a fiber may not suspend, so the
/// yield falls back to `std::thread::yield_now`. With a free worker a partner task runs
/// there, and the loop ends.
#[test]
fn expired_retries_inside_join_and_scope_on_a_fiber_two_workers() {
    watchdog(200, || {
        // Three: the scope's job may be stolen by a second worker, where it spins (no
        // fiber there, so no yield at all), while the fiber's worker waits in the
        // scope; the partner task needs a third (seen with two, and no temporary
        // workers: the looper gave up after 20 s).
        let rt = rt_with(3);
        for round in 0..scale(20) {
            let (tx, rx) = bounded::<u32>(1);
            let use_scope = round % 2 == 1;
            let looper = fiber_on(&rt, move || {
                let recv_loop = || {
                    retry(Duration::from_secs(20), 20_000, || {
                        rx.recv_timeout(Duration::ZERO).ok()
                    })
                };
                if use_scope {
                    let mut out = None;
                    weft::scope(|s| {
                        s.spawn(|_| out = recv_loop());
                    });
                    out
                } else {
                    weft::join(recv_loop, || ()).0
                }
            });
            let partner = rt.spawn(async move { tx.send(round as u32).await.unwrap() });
            assert_eq!(
                join_within(looper, 100).unwrap(),
                Some(round as u32),
                "round {round} (scope: {use_scope})"
            );
            join_within(partner, 100).unwrap();
        }
    });
}

/// On one worker, a fiber retrying an expired receive inside `join` waits for a fiber
/// homed on the same worker: the wait cannot suspend there and its yield is the
/// thread's, so the worker never runs the partner. (A wait that does not expire at
/// once, `recv_timeout(1 ms)`, helps and so lets it run: compared below.)
fn join_on_one_worker(timeout: Duration) -> Option<u32> {
    let rt = rt_with(1);
    let (tx, rx) = bounded::<u32>(1);
    let looping = Arc::new(AtomicBool::new(false));
    let looper = {
        let looping = looping.clone();
        fiber_on(&rt, move || {
            weft::join(
                || {
                    retry(Duration::from_secs(5), 20_000, || {
                        looping.store(true, SeqCst);
                        rx.recv_timeout(timeout).ok()
                    })
                },
                || (),
            )
            .0
        })
    };
    chan_common::wait_for("the looper to loop", 60, || looping.load(SeqCst));
    // (Its send fails if the looper gave up and dropped the receiver.)
    let partner = fiber_on(&rt, move || {
        let _ = tx.send_blocking(5);
    });
    let got = join_within(looper, 100).unwrap();
    join_within(partner, 100).unwrap();
    got
}

#[test]
fn timed_retries_inside_join_on_one_worker_that_wait_let_the_partner_run() {
    watchdog(200, || {
        assert_eq!(join_on_one_worker(Duration::from_millis(1)), Some(5));
    });
}

/// Inside a fork-join join on a fiber, an expired timed wait fell back to
/// `std::thread::yield_now`, so on one worker a retry loop never let a fiber homed
/// there run; fixed in session 28 (the worker runs other ready work first).
#[test]
fn expired_retries_inside_join_on_one_worker_let_the_partner_run() {
    watchdog(200, || {
        assert_eq!(join_on_one_worker(Duration::ZERO), Some(5));
    });
}

/// A `Drop` that retries expired receives (and then waits with a timeout) while a
/// panic unwinds the fiber: no yield may happen there (the thread is `panicking()`),
/// the value from a plain thread still arrives, and the panic reaches the handle.
#[test]
fn timed_receives_in_a_drop_during_a_panic() {
    struct Guard {
        rx: Receiver<u32>,
        started: Arc<AtomicBool>,
        got: Arc<Mutex<Vec<u32>>>,
    }
    impl Drop for Guard {
        fn drop(&mut self) {
            assert!(std::thread::panicking());
            self.started.store(true, SeqCst);
            let mut got = Vec::new();
            // Expired first (returns at once, nothing to yield to), then a real wait.
            for _ in 0..100 {
                got.extend(self.rx.recv_timeout(Duration::ZERO).ok());
            }
            while got.len() < 2 {
                match self.rx.recv_timeout(Duration::from_secs(30)) {
                    Ok(v) => got.push(v),
                    Err(e) => panic!("in a drop: {e:?}"),
                }
            }
            *self.got.lock().unwrap() = got;
        }
    }
    watchdog(200, || {
        for workers in [1, 2] {
            let rt = rt_with(workers);
            for round in 0..scale(10) {
                let (tx, rx) = bounded::<u32>(1);
                let started = Arc::new(AtomicBool::new(false));
                let got = Arc::new(Mutex::new(Vec::new()));
                let g = Guard {
                    rx,
                    started: started.clone(),
                    got: got.clone(),
                };
                let h = fiber_on(&rt, move || {
                    let _g = g;
                    if round % 2 == 0 {
                        // Suspend once first, so the unwind runs on a resumed fiber.
                        weft::fiber::sleep(Duration::from_micros(50));
                    }
                    panic!("boom {round}");
                });
                let feeder = std::thread::spawn(move || {
                    chan_common::wait_for("the drop", 60, || started.load(SeqCst));
                    tx.send_blocking(1).unwrap();
                    tx.send_timeout(2, Duration::from_secs(60)).unwrap();
                });
                let e = join_within(h, 100).unwrap_err();
                assert!(e.is_panic(), "{workers} workers, round {round}: {e:?}");
                feeder.join().unwrap();
                assert_eq!(*got.lock().unwrap(), vec![1, 2]);
            }
        }
    });
}

/// Fibers retrying expired timed waits for ever (each yield puts them back in the
/// queue) and fibers in real timed waits: dropping the runtime unwinds them all, and
/// ends in bounded time.
#[test]
fn runtime_dropped_while_fibers_retry_expired_timeouts() {
    struct Unwound(Arc<AtomicUsize>);
    impl Drop for Unwound {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    watchdog(300, || {
        for round in 0..scale(12) {
            let workers = 1 + round % 2;
            let rt = rt_with(workers);
            let unwound = Arc::new(AtomicUsize::new(0));
            let tries = Arc::new(AtomicU64::new(0));
            let (tx, _rx) = bounded::<u32>(1);
            tx.try_send(0).unwrap();
            let (_keep_tx, empty_rx) = bounded::<u32>(1);
            let n = 6;
            let mut handles = Vec::new();
            for f in 0..n {
                let (tx, empty_rx, unwound, tries) =
                    (tx.clone(), empty_rx.clone(), unwound.clone(), tries.clone());
                handles.push(fiber_on(&rt, move || {
                    let _u = Unwound(unwound);
                    // Bounded: ends (and fails the test below) if shutdown never comes.
                    for _ in 0..50_000_000u64 {
                        tries.fetch_add(1, SeqCst);
                        match f % 3 {
                            0 => assert!(empty_rx.recv_timeout(Duration::ZERO).is_err()),
                            1 => {
                                let mut sel = Select::new();
                                sel.recv(&empty_rx);
                                assert!(sel.select_deadline(Instant::now()).is_err());
                            }
                            _ => assert!(matches!(
                                tx.send_timeout(1, Duration::ZERO),
                                Err(SendTimeoutError::Timeout(1))
                            )),
                        }
                    }
                }));
            }
            // And two in real timed waits (a timer of the runtime each).
            for _ in 0..2 {
                let (empty_rx, unwound) = (empty_rx.clone(), unwound.clone());
                handles.push(fiber_on(&rt, move || {
                    let _u = Unwound(unwound);
                    let _ = empty_rx.recv_timeout(Duration::from_secs(3600));
                }));
            }
            let min_tries = if small() { 10 } else { 1000 };
            chan_common::wait_for("the fibers to loop", 120, || {
                tries.load(SeqCst) > min_tries * n as u64
            });
            let t = Instant::now();
            drop(rt);
            let took = t.elapsed();
            assert_eq!(
                unwound.load(SeqCst),
                n + 2,
                "round {round}: not all unwound"
            );
            for h in handles {
                let e = join_within(h, 60).unwrap_err();
                assert!(e.is_cancelled(), "round {round}: {e:?}");
            }
            assert!(
                took < Duration::from_secs(30),
                "round {round}: the drop took {took:?}"
            );
        }
    });
}

/// A plain thread in a timed wait on a runtime's timer (`Handle::block_on` of a
/// sleep) while the runtime is dropped: the wait must end (at its deadline, or early
/// with a panic, as tokio's "timer is shutdown"). It never did (older than the
/// commits under review): after shutdown no worker fired the wheel, and the thread
/// slept for ever. The shutdown now wakes every pending timer and the sleep waits out
/// its deadline on the alarm thread.
#[test]
fn timed_waits_on_a_runtime_dropped_meanwhile_end() {
    watchdog(200, || {
        for round in 0..scale(4) {
            let rt = rt_with(1 + round % 2);
            let h = rt.handle().clone();
            let sleeping = Arc::new(AtomicBool::new(false));
            let s2 = sleeping.clone();
            let t = std::thread::spawn(move || {
                s2.store(true, SeqCst);
                h.block_on(weft::time::sleep(Duration::from_millis(300)));
            });
            chan_common::wait_for("the sleeper", 60, || sleeping.load(SeqCst));
            std::thread::sleep(Duration::from_millis(10));
            drop(rt);
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                // Ended: returned, or panicked (either is fine).
                let _ = done_tx.send(t.join().is_ok());
            });
            done_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("hang: a sleep on a dropped runtime never ended");
        }
    });
}

/// How a receiver of [`values_racing_expired_timed_waits_arrive_exactly_once`] tries.
fn expired_recv_try(how: usize, rx: &Receiver<Tracked>) -> Result<Option<Tracked>, ()> {
    let r = match how % 3 {
        0 => rx.recv_timeout(Duration::ZERO),
        1 => rx.recv_deadline(Instant::now()),
        _ => {
            let mut sel = Select::new();
            sel.recv(rx);
            match sel.select_timeout(Duration::ZERO) {
                Ok(op) => op.recv(rx).map_err(RecvTimeoutError::from),
                Err(_) => Err(RecvTimeoutError::Timeout),
            }
        }
    };
    match r {
        Ok(v) => Ok(Some(v)),
        Err(RecvTimeoutError::Timeout) => Ok(None),
        Err(RecvTimeoutError::Disconnected) => Err(()),
    }
}

/// Expired receives (plain, deadline, select) on fibers race senders on fibers
/// (themselves retrying expired `send_timeout`s, whose value comes back each time),
/// tasks and threads, on one and two workers and every flavour. A value handed over
/// while a receive yields is returned by that receive (its last look) or stays in the
/// channel; a send that times out during its yield gives its value back or reports it
/// sent. Every value is received exactly once and dropped exactly once.
#[test]
fn values_racing_expired_timed_waits_arrive_exactly_once() {
    watchdog(600, || {
        for workers in [1, 2] {
            let rt = rt_with(workers);
            for cap in [Some(0), Some(1), Some(4), None] {
                let per = scale(300);
                let senders = 3;
                let d = Drops::new(per * senders);
                let (tx, rx) = make::<Tracked>(cap);
                let received = Arc::new(Mutex::new(Vec::new()));
                let timed_out_sends = Arc::new(AtomicU64::new(0));
                let mut fibers = Vec::new();
                let mut threads = Vec::new();
                for r in 0..3usize {
                    let (rx, received) = (rx.clone(), received.clone());
                    fibers.push(fiber_on(&rt, move || {
                        let start = Instant::now();
                        let mut tries = 0u64;
                        let mut got = Vec::new();
                        let mut rng = Rng::new(seed() ^ r as u64);
                        while let Ok(v) = expired_recv_try(r, &rx) {
                            got.extend(v.map(|v| v.id));
                            // Now and then a slow receiver, so that sends time out.
                            if rng.below(8) == 0 {
                                weft::fiber::sleep(Duration::from_micros(rng.below(300)));
                            }
                            tries += 1;
                            assert!(
                                tries < 100_000 || start.elapsed() < Duration::from_secs(200),
                                "receiver {r} stuck"
                            );
                        }
                        received.lock().unwrap().extend(got);
                    }));
                }
                if workers == 2 {
                    let (rx, received) = (rx.clone(), received.clone());
                    threads.push(std::thread::spawn(move || loop {
                        match rx.recv_timeout(Duration::from_micros(50)) {
                            Ok(v) => received.lock().unwrap().push(v.id),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    }));
                }
                drop(rx);
                for s in 0..senders {
                    let (tx, d, timed_out_sends) = (tx.clone(), d.clone(), timed_out_sends.clone());
                    let ids = s * per..(s + 1) * per;
                    match s {
                        0 => fibers.push(fiber_on(&rt, move || {
                            let start = Instant::now();
                            for i in ids {
                                let mut v = d.make(i);
                                let mut tries = 0u64;
                                loop {
                                    match tx.send_timeout(v, Duration::ZERO) {
                                        Ok(()) => break,
                                        Err(SendTimeoutError::Timeout(back)) => {
                                            assert_eq!(back.id, i, "another value came back");
                                            timed_out_sends.fetch_add(1, SeqCst);
                                            v = back;
                                        }
                                        Err(SendTimeoutError::Disconnected(_)) => {
                                            panic!("receivers gone")
                                        }
                                    }
                                    tries += 1;
                                    assert!(
                                        tries < 100_000
                                            || start.elapsed() < Duration::from_secs(200),
                                        "sender stuck on {i}"
                                    );
                                }
                            }
                        })),
                        1 => fibers.push(rt.spawn(async move {
                            for i in ids {
                                tx.send(d.make(i)).await.unwrap();
                            }
                        })),
                        _ => threads.push(std::thread::spawn(move || {
                            for i in ids {
                                tx.send_blocking(d.make(i)).unwrap();
                            }
                        })),
                    }
                }
                drop(tx);
                for h in fibers {
                    join_within(h, 300).unwrap();
                }
                for t in threads {
                    t.join().unwrap();
                }
                let mut all = received.lock().unwrap().clone();
                all.sort_unstable();
                let ctx = format!("{workers} workers, cap {cap:?}");
                assert_eq!(all, (0..per * senders).collect::<Vec<_>>(), "{ctx}");
                for i in 0..per * senders {
                    assert_eq!(d.get(i), 1, "{ctx}: value {i} dropped {} times", d.get(i));
                }
                eprintln!(
                    "{ctx}: {} expired sends gave their value back",
                    timed_out_sends.load(SeqCst)
                );
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// 2. Parking workers spin before they offer to hold the timer driver.

/// Watches for pauses of the whole process (the machine's other users may stop it
/// for a minute): a thread that sleeps 1 ms at a time and records the longest gap.
/// Lateness bounds below are that plus a generous margin, so only a timer that is late
/// while the process ran counts.
struct PauseWatch {
    stop: Arc<AtomicBool>,
    longest_us: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PauseWatch {
    fn start() -> PauseWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let longest_us = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, longest_us) = (stop.clone(), longest_us.clone());
            std::thread::spawn(move || {
                let mut last = Instant::now();
                while !stop.load(SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                    let now = Instant::now();
                    longest_us.fetch_max((now - last).as_micros() as u64, SeqCst);
                    last = now;
                }
            })
        };
        PauseWatch {
            stop,
            longest_us,
            thread: Some(thread),
        }
    }

    fn longest(&self) -> Duration {
        Duration::from_micros(self.longest_us.load(SeqCst))
    }
}

impl Drop for PauseWatch {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Lateness samples (how long after its deadline each timer's waiter resumed) and
/// timers that fired early.
#[derive(Default)]
struct Lateness {
    late_us: Mutex<Vec<u64>>,
    early: Mutex<Vec<String>>,
}

impl Lateness {
    /// `deadline` was computed after `start`-style bookkeeping by the caller: the wait
    /// must not have ended before it.
    fn record(&self, what: &str, deadline: Instant) {
        let now = Instant::now();
        if now < deadline {
            self.early
                .lock()
                .unwrap()
                .push(format!("{what}: {:?} early", deadline - now));
        } else {
            self.late_us
                .lock()
                .unwrap()
                .push((now - deadline).as_micros() as u64);
        }
    }

    /// (count, p50, p99, max) in microseconds.
    fn summary(&self) -> (usize, u64, u64, u64) {
        let mut v = self.late_us.lock().unwrap().clone();
        v.sort_unstable();
        if v.is_empty() {
            return (0, 0, 0, 0);
        }
        let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
        (v.len(), at(0.5), at(0.99), *v.last().unwrap())
    }

    fn check(&self, what: &str, expected: usize, pauses: &PauseWatch) {
        let early = self.early.lock().unwrap().clone();
        assert!(early.is_empty(), "{what}: timers fired early: {early:?}");
        let (n, p50, p99, max) = self.summary();
        eprintln!(
            "{what}: {n} timers, lateness p50 {p50} us, p99 {p99} us, max {max} us \
             (longest process pause seen {:?})",
            pauses.longest()
        );
        assert_eq!(n, expected, "{what}: timers that never fired");
        let limit = Duration::from_secs(2) + pauses.longest() * 2;
        assert!(
            Duration::from_micros(max) < limit,
            "{what}: a timer fired {max} us late (limit {limit:?})"
        );
    }
}

/// A random short duration: below the wheel's millisecond most of the time, up to
/// 3 ms, sometimes zero.
fn short(rng: &mut Rng) -> Duration {
    match rng.below(4) {
        0 => Duration::ZERO,
        1 => Duration::from_micros(rng.below(3000)),
        _ => Duration::from_micros(rng.below(200)),
    }
}

/// Keeps the workers parking and waking: trivial tasks spawned at random moments from
/// a plain thread until `stop`.
fn poker(rt: &Runtime, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let h = rt.handle().clone();
    std::thread::spawn(move || {
        let mut rng = Rng::new(seed());
        let mut n = 0u64;
        while !stop.load(SeqCst) {
            let t = h.spawn(async {});
            if rng.below(2) == 0 {
                t.join().unwrap();
            }
            n += 1;
            let pause = rng.below(400);
            let until = Instant::now() + Duration::from_micros(pause);
            if pause > 200 {
                std::thread::sleep(until - Instant::now());
            } else {
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
        }
        n
    })
}

/// Many short timers from tasks (sleep, sleep_until, timeout), fibers (fiber::sleep,
/// an empty channel's recv_timeout, a select_timeout) and plain threads (a sleep of
/// the runtime's waited on with `Handle::block_on`), while a poker keeps the workers
/// parking and waking: every timer fires, none early, lateness bounded (and printed).
#[test]
fn timer_storm_from_every_context_fires_every_timer_never_early() {
    watchdog(600, || {
        let pauses = PauseWatch::start();
        for workers in [1, 2] {
            let rt = rt_with(workers);
            let lat = Arc::new(Lateness::default());
            let stop = Arc::new(AtomicBool::new(false));
            let poke = poker(&rt, stop.clone());
            let per = scale(300);
            let (_keep_tx, empty_rx) = bounded::<u8>(1);
            let mut handles = Vec::new();
            for t in 0..3u64 {
                let lat = lat.clone();
                handles.push(rt.spawn(async move {
                    let mut rng = Rng::new(seed() ^ t);
                    for _ in 0..per {
                        let d = short(&mut rng);
                        let deadline = Instant::now() + d;
                        match rng.below(3) {
                            0 => weft::time::sleep(d).await,
                            1 => weft::time::sleep_until(deadline).await,
                            _ => {
                                let r = weft::time::timeout(d, std::future::pending::<()>());
                                assert!(r.await.is_err());
                            }
                        }
                        lat.record("task", deadline);
                    }
                }));
            }
            for f in 0..3u64 {
                let (lat, rx) = (lat.clone(), empty_rx.clone());
                handles.push(fiber_on(&rt, move || {
                    let mut rng = Rng::new(seed() ^ (f << 8));
                    for _ in 0..per {
                        let d = short(&mut rng);
                        let deadline = Instant::now() + d;
                        match rng.below(3) {
                            0 => weft::fiber::sleep(d),
                            1 => assert!(rx.recv_timeout(d).unwrap_err().is_timeout()),
                            _ => {
                                let mut sel = Select::new();
                                sel.recv(&rx);
                                assert!(sel.select_timeout(d).is_err());
                            }
                        }
                        lat.record("fiber", deadline);
                    }
                }));
            }
            let mut threads = Vec::new();
            for p in 0..2u64 {
                let (lat, h) = (lat.clone(), rt.handle().clone());
                threads.push(std::thread::spawn(move || {
                    let mut rng = Rng::new(seed() ^ (p << 16));
                    for _ in 0..per {
                        let d = short(&mut rng);
                        let deadline = Instant::now() + d;
                        h.block_on(weft::time::sleep_until(deadline));
                        lat.record("thread", deadline);
                    }
                }));
            }
            for h in handles {
                join_within(h, 300).unwrap();
            }
            for t in threads {
                t.join().unwrap();
            }
            stop.store(true, SeqCst);
            let pokes = poke.join().unwrap();
            eprintln!("{workers} workers: {pokes} pokes");
            lat.check(&format!("storm, {workers} workers"), 8 * per, &pauses);
            let st = rt.stats();
            assert_eq!(st.timers_pending, 0, "timers left in the wheel");
        }
    });
}

/// The window the change opened: on a one-worker runtime a plain thread waits for a
/// task (so the worker has just finished it and is parking: spinning, not holding the
/// driver) and at once registers a timer from outside. Nobody is there to kick; the
/// timer must fire when the spin ends (the claim: at most ~50 us late, within the
/// wheel's millisecond). The worst lateness is printed and bounded.
#[test]
fn a_timer_registered_from_outside_while_the_worker_spins_fires() {
    watchdog(600, || {
        let pauses = PauseWatch::start();
        for workers in [1, 2] {
            let rt = rt_with(workers);
            let h = rt.handle().clone();
            let lat = Lateness::default();
            let mut rng = Rng::new(seed());
            let n = scale(1500);
            for i in 0..n {
                h.spawn(async {}).join().unwrap();
                // Spin a little sometimes, to land anywhere in the worker's spin.
                let until = Instant::now() + Duration::from_micros(rng.below(60));
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                let d = if i % 2 == 0 {
                    Duration::from_micros(rng.below(1000))
                } else {
                    Duration::from_micros(1000 + rng.below(2000))
                };
                let deadline = Instant::now() + d;
                h.block_on(weft::time::sleep_until(deadline));
                lat.record("outside", deadline);
            }
            lat.check(&format!("outside timer, {workers} workers"), n, &pauses);
        }
    });
}

/// After a storm of short timers and wake-ups, an idle runtime goes quiet: no polls,
/// parks or wake calls in 300 ms, with no timer pending and with one pending an hour
/// away (the holder sleeps until it).
#[test]
fn an_idle_runtime_after_a_timer_storm_makes_no_wakeups() {
    watchdog(300, || {
        for far_timer in [false, true] {
            let rt = rt_with(2);
            let mut handles = Vec::new();
            for t in 0..4u64 {
                handles.push(rt.spawn(async move {
                    let mut rng = Rng::new(seed() ^ t);
                    for _ in 0..scale(200) {
                        weft::time::sleep(short(&mut rng)).await;
                        weft::spawn(async {}).await.unwrap();
                    }
                }));
                handles.push(fiber_on(&rt, move || {
                    let mut rng = Rng::new(seed() ^ (t << 4));
                    for _ in 0..scale(200) {
                        weft::fiber::sleep(short(&mut rng));
                    }
                }));
            }
            for h in handles {
                join_within(h, 200).unwrap();
            }
            let _far = far_timer.then(|| rt.spawn(weft::time::sleep(Duration::from_secs(3600))));
            // Quiet is reached within a few spins and sleeps; allow for a loaded machine.
            let mut quiet = false;
            for _ in 0..10 {
                std::thread::sleep(Duration::from_millis(100));
                let before = rt.stats();
                std::thread::sleep(Duration::from_millis(300));
                let after = rt.stats();
                if after.total_polled == before.total_polled
                    && after.total_parked == before.total_parked
                    && after.total_wake_calls == before.total_wake_calls
                {
                    quiet = true;
                    break;
                }
                eprintln!(
                    "far timer {far_timer}: not quiet: polls +{}, parks +{}, wake calls +{}",
                    after.total_polled - before.total_polled,
                    after.total_parked - before.total_parked,
                    after.total_wake_calls - before.total_wake_calls
                );
            }
            assert!(quiet, "far timer {far_timer}: the idle runtime kept waking");
            assert_eq!(rt.stats().timers_pending, usize::from(far_timer));
        }
    });
}

/// Temporary workers: the only base worker is stuck in a task, sysmon starts
/// temporary ones, timers run on them, then they retire (keep-alive 20 ms) while
/// timers are pending; timers keep firing throughout and after, none early.
#[test]
fn timers_fire_while_temporary_workers_come_and_retire() {
    watchdog(600, || {
        let pauses = PauseWatch::start();
        let rt = weft::Builder::new()
            .worker_threads(1)
            .max_extra_workers(2)
            .extra_worker_keep_alive(Duration::from_millis(20))
            .build()
            .unwrap();
        let lat = Arc::new(Lateness::default());
        let rounds = scale(8);
        let per = 40;
        for round in 0..rounds {
            // Stuck for 150 ms: the timers below need a temporary worker meanwhile.
            let blocker = rt.spawn(async { std::thread::sleep(Duration::from_millis(150)) });
            let mut handles = Vec::new();
            for t in 0..4u64 {
                let lat = lat.clone();
                handles.push(rt.spawn(async move {
                    let mut rng = Rng::new(seed() ^ t ^ ((round as u64) << 8));
                    for _ in 0..per / 4 {
                        let d = Duration::from_micros(rng.below(8000));
                        let deadline = Instant::now() + d;
                        weft::time::sleep_until(deadline).await;
                        lat.record("temp", deadline);
                    }
                }));
            }
            // A timer set from outside that comes due around the retirements.
            let h = rt.handle().clone();
            let outside = std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_millis(190);
                h.block_on(weft::time::sleep_until(deadline));
                deadline
            });
            for h in handles {
                join_within(h, 120).unwrap();
            }
            join_within(blocker, 120).unwrap();
            lat.record("outside", outside.join().unwrap());
        }
        let started = rt.stats().temp_workers_started;
        chan_common::wait_for("temporary workers to retire", 60, || {
            let st = rt.stats();
            st.temp_workers_retired == st.temp_workers_started
        });
        // And after every temporary worker left, timers still fire.
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_millis(2);
            rt.block_on(weft::time::sleep_until(deadline));
            lat.record("after", deadline);
        }
        eprintln!("temporary workers started: {started}");
        lat.check("temporary workers", rounds * (per + 1) + 20, &pauses);
        assert!(started > 0, "no temporary worker was started");
    });
}

/// Busy-waits `d` (to land inside a worker's ~50 us spin rather than after it).
fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Round trips between two parties on two channels, in every pairing of contexts:
/// each hand-off finds the other side's worker parking (spinning, or asleep after the
/// spin), sometimes with a short timer in between. No wake-up may be lost.
#[test]
fn hand_offs_across_contexts_lose_no_wakeup() {
    #[derive(Clone, Copy, Debug)]
    enum Side {
        Fiber,
        Task,
        Thread,
    }
    fn start<T: Send + 'static>(
        rt: &Runtime,
        side: Side,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Box<dyn FnOnce() -> T + Send> {
        match side {
            Side::Fiber => {
                let h = fiber_on(rt, f);
                Box::new(move || join_within(h, 300).unwrap())
            }
            Side::Task => {
                let h = rt.spawn(async move { weft::wait(async move { f() }) });
                Box::new(move || join_within(h, 300).unwrap())
            }
            Side::Thread => {
                let t = std::thread::spawn(f);
                Box::new(move || t.join().unwrap())
            }
        }
    }
    watchdog(600, || {
        let rounds = scale(3000) as u32;
        for workers in [1, 2] {
            let rt = rt_with(workers);
            for (a, b) in [
                (Side::Fiber, Side::Fiber),
                (Side::Task, Side::Task),
                (Side::Fiber, Side::Task),
                (Side::Thread, Side::Fiber),
                (Side::Thread, Side::Task),
            ] {
                for cap in [Some(0), Some(1)] {
                    let (ping_tx, ping_rx) = make::<u32>(cap);
                    let (pong_tx, pong_rx) = make::<u32>(cap);
                    let server = start(&rt, b, move || {
                        let mut n = 0u32;
                        while let Ok(v) = ping_rx.recv_blocking() {
                            if v % 64 == 7 {
                                weft::fiber::sleep(Duration::from_micros(u64::from(v % 300)));
                            }
                            pong_tx.send_blocking(v + 1).unwrap();
                            n += 1;
                        }
                        n
                    });
                    let client = start(&rt, a, move || {
                        let mut rng = Rng::new(seed());
                        for i in 0..rounds {
                            ping_tx.send_blocking(i * 2).unwrap();
                            assert_eq!(pong_rx.recv_blocking().unwrap(), i * 2 + 1);
                            if rng.below(16) == 0 {
                                spin_for(Duration::from_micros(rng.below(80)));
                            }
                        }
                    });
                    client();
                    assert_eq!(
                        server(),
                        rounds,
                        "{workers} workers, {a:?} -> {b:?}, {cap:?}"
                    );
                }
            }
        }
    });
}

/// A runtime dropped at random moments while its workers hand work back and forth
/// (so they keep parking, spinning and waking) and sleep on short timers: the drop
/// ends in bounded time.
#[test]
fn runtime_dropped_while_workers_spin_and_hand_off() {
    watchdog(600, || {
        let mut rng = Rng::new(seed());
        for round in 0..scale(60) {
            let rt = rt_with(1 + round % 2);
            for _ in 0..2 {
                let (a_tx, a_rx) = bounded::<u32>(0);
                let (b_tx, b_rx) = bounded::<u32>(0);
                rt.spawn(async move {
                    for i in 0..1_000_000u32 {
                        if a_tx.send(i).await.is_err() || b_rx.recv().await.is_err() {
                            break;
                        }
                    }
                });
                fiber_on(&rt, move || {
                    while let Ok(v) = a_rx.recv_blocking() {
                        if b_tx.send_blocking(v).is_err() {
                            break;
                        }
                    }
                });
            }
            for t in 0..2u64 {
                rt.spawn(async move {
                    let mut rng = Rng::new(seed() ^ t);
                    for _ in 0..100_000 {
                        weft::time::sleep(short(&mut rng)).await;
                    }
                });
            }
            match rng.below(3) {
                0 => {}
                1 => spin_for(Duration::from_micros(rng.below(100))),
                _ => std::thread::sleep(Duration::from_micros(rng.below(3000))),
            }
            let t = Instant::now();
            drop(rt);
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "round {round}: the drop took {:?}",
                t.elapsed()
            );
        }
    });
}

/// Sockets registered while workers park: by a task (its worker then parks with a
/// socket registered) and by a plain thread right after a task finished (the worker
/// is in its spin, which began with no socket registered). A datagram sent then must
/// reach the waiting receiver in bounded time; the worst latency is printed.
#[test]
fn readiness_of_sockets_registered_while_workers_park_is_seen() {
    watchdog(600, || {
        let pauses = PauseWatch::start();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for workers in [1, 2] {
            let rt = rt_with(workers);
            let h = rt.handle().clone();
            let mut rng = Rng::new(seed());
            let mut lat = Vec::new();
            for i in 0..scale(400) {
                let from_thread = i % 2 == 1;
                let (addr_tx, addr_rx) = std::sync::mpsc::channel();
                let recv = async move {
                    let s = weft::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
                    addr_tx.send(s.local_addr().unwrap()).unwrap();
                    let mut buf = [0u8; 16];
                    let (n, _) = s.recv_from(&mut buf).await.unwrap();
                    assert_eq!(&buf[..n], b"ping");
                    Instant::now()
                };
                let waiter: Box<dyn FnOnce() -> Instant> = if from_thread {
                    h.spawn(async {}).join().unwrap();
                    let h = h.clone();
                    let t = std::thread::spawn(move || h.block_on(recv));
                    Box::new(move || t.join().unwrap())
                } else {
                    let j = h.spawn(recv);
                    Box::new(move || join_within(j, 120).unwrap())
                };
                let addr = addr_rx.recv_timeout(Duration::from_secs(120)).unwrap();
                spin_for(Duration::from_micros(rng.below(120)));
                let sent = Instant::now();
                sender.send_to(b"ping", addr).unwrap();
                let got = waiter();
                lat.push(got.saturating_duration_since(sent));
            }
            lat.sort_unstable();
            let (p50, p99, max) = (
                lat[lat.len() / 2],
                lat[lat.len() * 99 / 100],
                *lat.last().unwrap(),
            );
            eprintln!(
                "udp, {workers} workers: {} datagrams, latency p50 {p50:?}, p99 {p99:?}, \
                 max {max:?} (longest pause {:?})",
                lat.len(),
                pauses.longest()
            );
            let limit = Duration::from_secs(2) + pauses.longest() * 2;
            assert!(max < limit, "a datagram waited {max:?}");
            assert_eq!(rt.stats().io_sources, 0);
        }
    });
}

// ---------------------------------------------------------------------------------
// 3. `select_async`'s boxed machine.

fn assert_unpin<T: Unpin>(_: &T) {}

/// The future is `Send`, `Unpin` (so safe code may move it between polls: nothing in
/// it may point into itself) and small (the point of the box).
#[test]
fn select_async_future_is_send_unpin_and_small() {
    let (_tx, rx) = unbounded::<u64>();
    let t = after(Duration::from_secs(1));
    let mut sel = Select::new();
    sel.recv(&rx);
    sel.recv(&t);
    let fut = sel.select_async();
    chan_common::is_send(&fut);
    assert_unpin(&fut);
    let size = std::mem::size_of_val(&fut);
    eprintln!("select_async future: {size} bytes");
    assert!(size <= 64, "the select_async future is {size} bytes");
}

/// Polls `fut` once with `waker`.
fn poll_with<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(waker))
}

/// Polled (registered) with one waker, moved (into a box, then out again), polled
/// with another: the value sent then wakes the second waker and is selected; for a
/// receive and for a send on a full channel, in every flavour.
#[test]
fn select_async_moved_and_rewoken_between_polls() {
    watchdog(200, || {
        for cap in [Some(0), Some(1), Some(3), None] {
            for send_side in [false, true] {
                if send_side && cap.is_none() {
                    continue; // an unbounded channel is never full
                }
                let (tx, rx) = make::<u64>(cap);
                for _ in 0..cap.unwrap_or(0) {
                    if send_side {
                        tx.try_send(0).unwrap();
                    }
                }
                let mut sel = Select::new();
                let i = if send_side {
                    sel.send(&tx)
                } else {
                    sel.recv(&rx)
                };
                let (a, wa) = count_waker();
                let (b, wb) = count_waker();
                let mut fut = sel.select_async();
                assert!(poll_with(&mut fut, &wa).is_pending(), "{cap:?} {send_side}");
                let mut boxed = Box::new(fut);
                assert!(poll_with(&mut *boxed, &wa).is_pending());
                let mut fut = *boxed;
                assert!(poll_with(&mut fut, &wb).is_pending());
                let partner = {
                    let (tx, rx) = (tx.clone(), rx.clone());
                    std::thread::spawn(move || {
                        if send_side {
                            // Takes one of the fillers (rendezvous: the select's value).
                            rx.recv_blocking().unwrap()
                        } else {
                            tx.send_blocking(42).unwrap();
                            42
                        }
                    })
                };
                chan_common::wait_for("the second waker", 60, || b.0.load(SeqCst) > 0);
                let op = loop {
                    if let Poll::Ready(op) = poll_with(&mut fut, &wb) {
                        break op;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                assert_eq!(op.index(), i);
                if send_side {
                    op.send(&tx, 7).unwrap();
                } else {
                    assert_eq!(op.recv(&rx).unwrap(), 42);
                }
                drop(fut);
                let got = partner.join().unwrap();
                if send_side {
                    // Rendezvous: the partner took the select's 7; else a filler (0),
                    // and the 7 queued behind the fillers.
                    let mut rest = Vec::new();
                    while let Ok(v) = rx.try_recv() {
                        rest.push(v);
                    }
                    let mut all = vec![got];
                    all.extend(rest);
                    all.sort_unstable();
                    let mut expect = vec![0; cap.unwrap()];
                    expect.push(7);
                    assert_eq!(all, expect, "{cap:?}");
                }
                // The first waker was replaced before the value came.
                drop(a);
            }
        }
    });
}

/// A select future carried from one task to another between its polls (a `'static`
/// select: its receivers and `Select` are leaked on purpose, few of them): the value
/// sent after the move wakes the second task, and is selected there exactly once.
#[test]
fn select_async_polled_from_two_tasks() {
    if small() {
        return; // leaks on purpose; the moved-future test covers the same under valgrind
    }
    watchdog(200, || {
        let rt = rt_with(2);
        for round in 0..20u64 {
            let (tx, rx) = make::<u64>(if round % 2 == 0 { Some(0) } else { None });
            let rx: &'static Receiver<u64> = Box::leak(Box::new(rx));
            let sel: &'static mut Select<'static> = Box::leak(Box::new(Select::new()));
            let i = sel.recv(rx);
            let fut = sel.select_async();
            let (hand_tx, hand_rx) = bounded(1);
            let first = rt.spawn(async move {
                let mut fut = fut;
                // One poll here (registers with this task's waker), then hand it on.
                let polled = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut fut).poll(cx)));
                assert!(polled.await.is_pending());
                hand_tx
                    .send(fut)
                    .await
                    .unwrap_or_else(|_| panic!("hand-off"));
            });
            let second = rt.spawn(async move {
                let fut = hand_rx.recv().await.unwrap();
                let op = fut.await;
                assert_eq!(op.index(), i);
                op.recv(rx).unwrap()
            });
            join_within(first, 60).unwrap();
            tx.send_blocking(round).unwrap();
            assert_eq!(join_within(second, 60).unwrap(), round);
            assert!(rx.try_recv().is_err());
        }
    });
}

/// Select futures dropped after 0..8 polls (the `select!` pattern), over two
/// channels fed from a thread, a fiber and a task, in every flavour, from a task and
/// from a fiber: a value handed to a select that is then dropped goes back to its
/// channel, so every value is received exactly once and dropped exactly once.
#[test]
fn select_async_dropped_at_every_poll_loses_no_value() {
    watchdog(600, || {
        let rt = rt_with(2);
        for cap in [Some(0), Some(1), Some(4), None] {
            for on_fiber in [false, true] {
                let per = scale(400);
                let d = Drops::new(per * 3);
                let (tx1, rx1) = make::<Tracked>(cap);
                let (tx2, rx2) = make::<Tracked>(cap);
                let mut threads = Vec::new();
                let mut handles = Vec::new();
                for s in 0..3usize {
                    let tx = if s == 1 { tx2.clone() } else { tx1.clone() };
                    let d = d.clone();
                    let ids = s * per..(s + 1) * per;
                    match s {
                        // Pauses now and then, so that selects register and wait.
                        0 => threads.push(std::thread::spawn(move || {
                            for i in ids {
                                tx.send_blocking(d.make(i)).unwrap();
                                if i % 4 == 0 {
                                    std::thread::sleep(Duration::from_micros(30));
                                }
                            }
                        })),
                        1 => handles.push(fiber_on(&rt, move || {
                            for i in ids {
                                tx.send_blocking(d.make(i)).unwrap();
                                if i % 4 == 1 {
                                    weft::fiber::sleep(Duration::from_micros(30));
                                }
                            }
                        })),
                        _ => handles.push(rt.spawn(async move {
                            for i in ids {
                                tx.send(d.make(i)).await.unwrap();
                                if i % 4 == 2 {
                                    weft::time::sleep(Duration::from_micros(30)).await;
                                }
                            }
                        })),
                    }
                }
                drop((tx1, tx2));
                let receive = async move {
                    let mut rng = Rng::new(seed());
                    let mut got = Vec::new();
                    let mut dropped = 0u64;
                    let mut open = [true, true];
                    let far = after(Duration::from_secs(3600));
                    let start = Instant::now();
                    while open.iter().any(|&o| o) {
                        assert!(start.elapsed() < Duration::from_secs(300), "receiver stuck");
                        let mut sel = Select::new();
                        let i1 = open[0].then(|| sel.recv(&rx1));
                        let i2 = open[1].then(|| sel.recv(&rx2));
                        if rng.below(2) == 0 {
                            sel.recv(&far);
                        }
                        let k = rng.below(8);
                        match drop_after(k, sel.select_async()).await {
                            None => dropped += 1,
                            Some(op) => {
                                let which = if Some(op.index()) == i1 {
                                    0
                                } else {
                                    assert_eq!(Some(op.index()), i2, "the far timer");
                                    1
                                };
                                let rx = if which == 0 { &rx1 } else { &rx2 };
                                match op.recv(rx) {
                                    Ok(v) => got.push(v.id),
                                    Err(_) => open[which] = false,
                                }
                            }
                        }
                    }
                    (got, dropped)
                };
                let (mut got, dropped) = if on_fiber {
                    join_within(fiber_on(&rt, move || weft::wait(receive)), 300).unwrap()
                } else {
                    join_within(rt.spawn(receive), 300).unwrap()
                };
                for h in handles {
                    join_within(h, 60).unwrap();
                }
                for t in threads {
                    t.join().unwrap();
                }
                got.sort_unstable();
                let ctx = format!("cap {cap:?}, fiber {on_fiber}");
                assert_eq!(got, (0..per * 3).collect::<Vec<_>>(), "{ctx}");
                for i in 0..per * 3 {
                    assert_eq!(d.get(i), 1, "{ctx}: value {i}");
                }
                eprintln!("{ctx}: {dropped} selects dropped unfinished");
            }
        }
    });
}

/// A select that a rendezvous sender paired with (its value handed to the select's
/// node, the select's waker woken) and that is then dropped unpolled: the value goes
/// back to the channel, the sender's send succeeds once, and the next receive gets it.
#[test]
fn dropped_select_async_gives_a_handed_value_back() {
    watchdog(300, || {
        let mut rng = Rng::new(seed());
        for cap in [Some(0), Some(1)] {
            for round in 0..scale(300) {
                let d = Drops::new(2);
                let (tx, rx) = make::<Tracked>(cap);
                if cap == Some(1) {
                    // Full: the sender waits, and hands over when the select registers.
                    tx.try_send(d.make(0)).unwrap();
                }
                let sender_first = rng.below(2) == 0;
                let spawn_sender = |tx: Sender<Tracked>, d: Drops| {
                    std::thread::spawn(move || tx.send_blocking(d.make(1)).is_ok())
                };
                let mut sender = sender_first.then(|| spawn_sender(tx.clone(), d.clone()));
                if sender_first {
                    std::thread::sleep(Duration::from_micros(rng.below(200)));
                }
                let (woken, waker) = count_waker();
                {
                    let mut sel = Select::new();
                    let i = sel.recv(&rx);
                    let mut fut = sel.select_async();
                    match poll_with(&mut fut, &waker) {
                        Poll::Ready(op) => {
                            // Selected at once (the filler, or the waiting sender's value):
                            // dropped unperformed, it goes back.
                            assert_eq!(op.index(), i);
                            drop(op);
                        }
                        Poll::Pending => {
                            if sender.is_none() {
                                sender = Some(spawn_sender(tx.clone(), d.clone()));
                            }
                            if rng.below(2) == 0 {
                                chan_common::wait_for("the hand-over", 60, || {
                                    woken.0.load(SeqCst) > 0
                                });
                            }
                        }
                    }
                    drop(fut);
                }
                if sender.is_none() {
                    sender = Some(spawn_sender(tx.clone(), d.clone()));
                }
                let mut got = Vec::new();
                let want = if cap == Some(1) { 2 } else { 1 };
                while got.len() < want {
                    match rx.recv_timeout(Duration::from_secs(60)) {
                        Ok(v) => got.push(v.id),
                        Err(e) => panic!("cap {cap:?}, round {round}: a value was lost: {e:?}"),
                    }
                }
                assert!(sender.unwrap().join().unwrap(), "the send failed");
                assert!(rx.try_recv().is_err(), "a value twice");
                got.sort_unstable();
                let expect: Vec<usize> = if cap == Some(1) { vec![0, 1] } else { vec![1] };
                assert_eq!(got, expect, "cap {cap:?}, round {round}");
                assert_eq!(d.get(1), 1);
                assert_eq!(d.total(), want);
            }
        }
    });
}

/// Selects over closed channels, timer channels and `never`: a closed receive is
/// selected and reports the disconnection, a closed send gives its value back, a timer
/// fires no earlier than its deadline, a select over `never` alone is ended by a
/// timeout and dropped with its alarm (no timer left in the wheel).
#[test]
fn select_async_over_closed_channels_timers_and_never() {
    watchdog(200, || {
        let rt = rt_with(2);
        rt.block_on(async {
            for _ in 0..scale(50) {
                // A closed receive next to `never`.
                let (tx, rx) = bounded::<u8>(1);
                drop(tx);
                let nv = never::<u8>();
                let mut sel = Select::new();
                sel.recv(&nv);
                let i = sel.recv(&rx);
                let op = sel.select_async().await;
                assert_eq!(op.index(), i);
                assert!(op.recv(&rx).is_err());

                // A send to a channel whose receiver is gone: the value comes back.
                let (tx, rx) = bounded::<String>(0);
                drop(rx);
                let mut sel = Select::new();
                let i = sel.send(&tx);
                let op = sel.select_async().await;
                assert_eq!(op.index(), i);
                assert_eq!(op.send(&tx, "back".to_string()).unwrap_err().0, "back");

                // A timer next to `never`.
                let start = Instant::now();
                let t = after(Duration::from_millis(3));
                let mut sel = Select::new();
                sel.recv(&nv);
                let i = sel.recv(&t);
                let op = sel.select_async().await;
                assert_eq!(op.index(), i);
                let at = op.recv(&t).unwrap();
                assert!(at >= start + Duration::from_millis(3));
                assert!(Instant::now() >= start + Duration::from_millis(3), "early");

                // `never` alone (and a far timer): only a timeout ends it.
                let far = after(Duration::from_secs(3600));
                let mut sel = Select::new();
                sel.recv(&nv);
                sel.recv(&far);
                let r = weft::time::timeout(Duration::from_millis(2), sel.select_async()).await;
                assert!(r.is_err());
            }
        });
        // Every alarm of a dropped select left the wheel.
        chan_common::wait_for("the wheel to empty", 60, || rt.stats().timers_pending == 0);
    });
}

/// Fibers unwound by the runtime's drop (a forced unwind: no fiber may suspend) whose
/// guards wait with timeouts in their `Drop`: an expired one (no yield there) and a
/// real 20 ms one (a timer that must still fire while the runtime shuts down). The
/// drop ends, and every guard saw its timeouts.
#[test]
fn timed_waits_in_drops_of_fibers_unwound_by_shutdown() {
    struct Guard {
        rx: Receiver<u8>,
        timeouts: Arc<AtomicUsize>,
    }
    impl Drop for Guard {
        fn drop(&mut self) {
            for d in [Duration::ZERO, Duration::from_millis(20)] {
                if self.rx.recv_timeout(d).unwrap_err().is_timeout() {
                    self.timeouts.fetch_add(1, SeqCst);
                }
            }
        }
    }
    watchdog(300, || {
        for round in 0..scale(6) {
            let rt = rt_with(1 + round % 2);
            let timeouts = Arc::new(AtomicUsize::new(0));
            let (_keep_tx, rx) = bounded::<u8>(1);
            let started = Arc::new(AtomicUsize::new(0));
            let n = 4;
            for f in 0..n {
                let g = Guard {
                    rx: rx.clone(),
                    timeouts: timeouts.clone(),
                };
                let (rx, started) = (rx.clone(), started.clone());
                fiber_on(&rt, move || {
                    let _g = g;
                    started.fetch_add(1, SeqCst);
                    if f % 2 == 0 {
                        let _ = rx.recv_blocking();
                    } else {
                        let _ = rx.recv_timeout(Duration::from_secs(3600));
                    }
                });
            }
            chan_common::wait_for("the fibers", 60, || started.load(SeqCst) == n);
            let t = Instant::now();
            drop(rt);
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "drop took {:?}",
                t.elapsed()
            );
            assert_eq!(timeouts.load(SeqCst), 2 * n, "round {round}");
        }
    });
}

/// Two fibers passing a token as fast as they can keep both workers waking within
/// their spins, so neither ever gets as far as holding the timer driver: timers must
/// still fire on time (busy workers fire due timers at their fairness points), from a
/// task on the same runtime and from a plain thread.
#[test]
fn timers_fire_while_a_ping_pong_keeps_both_workers_in_their_spins() {
    watchdog(300, || {
        let pauses = PauseWatch::start();
        let rt = rt_with(2);
        let stop = Arc::new(AtomicBool::new(false));
        let (a_tx, a_rx) = bounded::<u32>(1);
        let (b_tx, b_rx) = bounded::<u32>(1);
        let ping = {
            let stop = stop.clone();
            fiber_on(&rt, move || {
                let mut n = 0u64;
                while !stop.load(SeqCst) && n < 100_000_000 {
                    a_tx.send_blocking(1).unwrap();
                    b_rx.recv_blocking().unwrap();
                    n += 1;
                }
                n
            })
        };
        let pong = fiber_on(&rt, move || {
            while let Ok(v) = a_rx.recv_blocking() {
                if b_tx.send_blocking(v).is_err() {
                    break;
                }
            }
        });
        let lat = Arc::new(Lateness::default());
        let n = scale(200);
        let task = {
            let lat = lat.clone();
            rt.spawn(async move {
                let mut rng = Rng::new(seed());
                for _ in 0..n {
                    let deadline = Instant::now() + Duration::from_micros(rng.below(2000));
                    weft::time::sleep_until(deadline).await;
                    lat.record("task", deadline);
                }
            })
        };
        let h = rt.handle().clone();
        let mut rng = Rng::new(seed());
        for _ in 0..n {
            let deadline = Instant::now() + Duration::from_micros(rng.below(2000));
            h.block_on(weft::time::sleep_until(deadline));
            lat.record("thread", deadline);
        }
        join_within(task, 120).unwrap();
        stop.store(true, SeqCst);
        let round_trips = join_within(ping, 120).unwrap();
        join_within(pong, 120).unwrap();
        eprintln!("ping-pong: {round_trips} round trips meanwhile");
        lat.check("during a ping-pong", 2 * n, &pauses);
    });
}

/// The same off a fiber: a task (a worker's own stack, not a fiber) retrying a
/// blocking `recv_timeout(ZERO)` on a one-worker runtime whose partner is a fiber
/// homed there. The expired wait returned at its first poll without helping and
/// without a yield (only a suspendable fiber yielded), so the worker never ran the
/// partner; since session 28 the worker runs other ready work first.
#[test]
fn expired_retries_in_a_task_on_one_worker_let_a_fiber_partner_run() {
    watchdog(200, || {
        let rt = rt_with(1);
        let (tx, rx) = bounded::<u32>(1);
        let looping = Arc::new(AtomicBool::new(false));
        let looper = {
            let looping = looping.clone();
            rt.spawn(async move {
                retry(Duration::from_secs(5), 20_000, || {
                    looping.store(true, SeqCst);
                    rx.recv_timeout(Duration::ZERO).ok()
                })
            })
        };
        chan_common::wait_for("the looper to loop", 60, || looping.load(SeqCst));
        let partner = fiber_on(&rt, move || {
            let _ = tx.send_blocking(5);
        });
        assert_eq!(join_within(looper, 100).unwrap(), Some(5));
        join_within(partner, 100).unwrap();
    });
}
