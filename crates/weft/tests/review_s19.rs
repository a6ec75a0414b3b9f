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
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use chan_common::{drop_after, fiber_on, join_within, make, watchdog, Drops, Rng, Tracked};
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
    if small() {
        (n / 20).max(2)
    } else {
        n
    }
}

fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
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

/// The timer channels' receives with an expired deadline return without yielding
/// (`Timer::recv_blocking` checks the deadline before it ever calls `wait_until`), so
/// a fiber retrying `after(..).recv_timeout(ZERO)` (say, in a loop that also
/// `try_recv`s a channel a partner feeds) keeps its worker for ever.
#[test]
#[ignore = "BUG: after()/tick() recv_timeout/recv_deadline with an expired deadline never yields the fiber (Timer::recv_blocking returns before wait_until), so a retry loop starves a fiber homed on its worker"]
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

/// `fiber::sleep(ZERO)` and a `wait` on an expired `time::timeout`: a fiber polling a
/// flag this way keeps its worker.
#[test]
#[ignore = "BUG (gap in 2745604): fiber::sleep(ZERO) and weft::wait(time::timeout(ZERO, ..)) on a fiber return without yielding, so a fiber looping on them starves a fiber homed on its worker"]
fn expired_fiber_sleeps_let_a_pinned_partner_run() {
    watchdog(120, || {
        let mut failures = Vec::new();
        for kind in [OtherExpired::FiberSleepZero, OtherExpired::WaitTimeoutZero] {
            if let Err(e) = other_expired_lets_partner_run(kind) {
                failures.push(e);
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    });
}
