//! Adversarial review of `weft::sync::Notify` (the lock-free permit word): a random
//! single-threaded model check against tokio's semantics (hand-polled futures, fresh
//! counting wakers each poll, futures moved between polls, dropped at every point,
//! re-polled after Ready), wakers that panic, drop the future inside `wake`, or notify
//! from their `Drop`, fibers aborted or their runtime dropped mid-wait, and real-thread
//! stress across threads, fibers and tasks.

mod chan_common;

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Wake, Waker};
use std::time::Duration;

use chan_common::*;
use weft::sync::{Notified, Notify};

/// A waker that counts its wakes.
struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}
fn counting() -> (Arc<Count>, Waker) {
    let c = Arc::new(Count(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

fn poll_noop<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    poll_with(f, Waker::noop())
}

// ---------------------------------------------------------------------------------
// Model check
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum M {
    /// Made at generation `gen`, not on the list.
    Init(u64),
    Registered,
    /// Chosen by `notify_one`, not yet polled.
    Chosen,
    /// Drained by `notify_waiters`, not yet polled.
    Signaled,
    Done,
}

struct Slot<'a> {
    fut: Pin<Box<Notified<'a>>>,
    m: M,
    /// The counter of the waker given at the latest poll (None: a no-op waker).
    latest: Option<Arc<Count>>,
    /// Counters of wakers replaced since: never woken.
    stale: Vec<Arc<Count>>,
}

/// Random operations on one `Notify` and up to 6 futures, compared with a model of
/// tokio's semantics (FIFO `notify_one`, one permit, `notify_waiters` reaching every
/// future made before it, a chosen future dropped passing its notification on).
fn model_run(seed: u64, steps: usize) {
    let n = Notify::new();
    let mut r = Rng::new(seed);
    let mut list: VecDeque<usize> = VecDeque::new(); // positions in `live`
    let mut permit = false;
    let mut gen: u64 = 0;
    // Model list holds slot positions; we never remove slots from `slots` (dropped
    // ones are replaced in place), so positions are stable per live future. A slot is
    // `None` when dropped.
    let mut live: Vec<Option<Slot<'_>>> = Vec::new();
    let mut log: Vec<String> = Vec::new();

    fn model_notify_one(
        live: &mut [Option<Slot<'_>>],
        list: &mut VecDeque<usize>,
        permit: &mut bool,
        log: &[String],
    ) {
        match list.pop_front() {
            Some(i) => {
                let s = live[i].as_mut().unwrap();
                assert_eq!(s.m, M::Registered);
                s.m = M::Chosen;
                if let Some(c) = &s.latest {
                    assert_eq!(
                        c.0.load(SeqCst),
                        1,
                        "chosen waiter {i} not woken once: {log:#?}"
                    );
                }
                for c in &s.stale {
                    assert_eq!(c.0.load(SeqCst), 0, "a replaced waker was woken: {log:#?}");
                }
            }
            None => *permit = true,
        }
    }

    for _ in 0..steps {
        let op = r.below(100);
        let nlive = live.iter().filter(|s| s.is_some()).count();
        if op < 20 && nlive < 6 {
            let s = Slot {
                fut: Box::pin(n.notified()),
                m: M::Init(gen),
                latest: None,
                stale: Vec::new(),
            };
            match live.iter().position(|s| s.is_none()) {
                Some(i) => {
                    log.push(format!("create {i}"));
                    live[i] = Some(s)
                }
                None => {
                    log.push(format!("create {}", live.len()));
                    live.push(Some(s))
                }
            }
        } else if op < 55 && nlive > 0 {
            // poll a random live slot, with a fresh counting waker or a no-op one; move
            // its Box first sometimes (the pinned future stays put).
            let idxs: Vec<usize> = (0..live.len()).filter(|&i| live[i].is_some()).collect();
            let i = idxs[r.below(idxs.len() as u64) as usize];
            if r.below(3) == 0 {
                let s = live[i].take().unwrap();
                let moved = Box::new(s);
                live[i] = Some(*moved);
            }
            let s = live[i].as_mut().unwrap();
            let noop = r.below(4) == 0;
            let res = if noop {
                if let Some(c) = s.latest.take() {
                    s.stale.push(c);
                }
                poll_noop(s.fut.as_mut())
            } else {
                let (c, w) = counting();
                let res = poll_with(s.fut.as_mut(), &w);
                if let Some(old) = s.latest.replace(c) {
                    s.stale.push(old);
                }
                res
            };
            let expect = match s.m {
                M::Done | M::Chosen | M::Signaled => {
                    s.m = M::Done;
                    Poll::Ready(())
                }
                M::Registered => Poll::Pending,
                M::Init(g) => {
                    if g != gen {
                        s.m = M::Done;
                        Poll::Ready(())
                    } else if permit {
                        permit = false;
                        s.m = M::Done;
                        Poll::Ready(())
                    } else {
                        s.m = M::Registered;
                        list.push_back(i);
                        Poll::Pending
                    }
                }
            };
            log.push(format!("poll {i} -> {res:?} (noop {noop})"));
            assert_eq!(res, expect, "seed {seed}: {log:#?}");
        } else if op < 70 && nlive > 0 {
            let idxs: Vec<usize> = (0..live.len()).filter(|&i| live[i].is_some()).collect();
            let i = idxs[r.below(idxs.len() as u64) as usize];
            let s = live[i].take().unwrap();
            log.push(format!("drop {i} ({:?})", s.m));
            match s.m {
                M::Registered => list.retain(|&j| j != i),
                M::Chosen => {
                    drop(s);
                    model_notify_one(&mut live, &mut list, &mut permit, &log);
                    continue;
                }
                _ => {}
            }
            drop(s);
        } else if op < 88 {
            log.push("notify_one".into());
            n.notify_one();
            model_notify_one(&mut live, &mut list, &mut permit, &log);
        } else {
            log.push("notify_waiters".into());
            n.notify_waiters();
            gen += 1;
            for i in list.drain(..) {
                let s = live[i].as_mut().unwrap();
                s.m = M::Signaled;
                if let Some(c) = &s.latest {
                    assert_eq!(
                        c.0.load(SeqCst),
                        1,
                        "signaled waiter not woken once: {log:#?}"
                    );
                }
                for c in &s.stale {
                    assert_eq!(c.0.load(SeqCst), 0, "a replaced waker was woken: {log:#?}");
                }
            }
        }
    }
    // The end: drop what is left (a chosen one passes its notification on), then the
    // permit as the model says (a fresh future, polled once).
    for i in 0..live.len() {
        if let Some(s) = live[i].take() {
            let m = s.m;
            drop(s);
            match m {
                M::Registered => list.retain(|&j| j != i),
                M::Chosen => model_notify_one(&mut live, &mut list, &mut permit, &log),
                _ => {}
            }
        }
    }
    assert!(list.is_empty());
    let mut f = Box::pin(n.notified());
    assert_eq!(
        poll_noop(f.as_mut()).is_ready(),
        permit,
        "seed {seed}: {log:#?}"
    );
}

#[test]
fn model_random_ops_match_tokio_semantics() {
    for seed in 0..3000 {
        model_run(seed, 60);
    }
}

// ---------------------------------------------------------------------------------
// Hand-polled edge cases
// ---------------------------------------------------------------------------------

#[test]
fn completed_by_notify_one_then_dropped_passes_nothing_on() {
    let n = Notify::new();
    let mut a = Box::pin(n.notified());
    assert!(poll_noop(a.as_mut()).is_pending());
    n.notify_one();
    assert!(poll_noop(a.as_mut()).is_ready());
    assert!(poll_noop(a.as_mut()).is_ready(), "re-poll after Ready");
    drop(a);
    assert!(
        poll_noop(Box::pin(n.notified()).as_mut()).is_pending(),
        "no permit made"
    );
}

#[test]
fn permit_consumed_then_dropped_makes_no_second_permit() {
    let n = Notify::new();
    n.notify_one();
    let mut a = Box::pin(n.notified());
    assert!(poll_noop(a.as_mut()).is_ready());
    drop(a);
    assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_pending());
}

#[test]
fn dropped_before_poll_takes_nothing() {
    let n = Notify::new();
    n.notify_one();
    drop(n.notified());
    let a = n.notified();
    n.notify_waiters();
    drop(a);
    assert!(
        poll_noop(Box::pin(n.notified()).as_mut()).is_ready(),
        "permit still there"
    );
    assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_pending());
}

#[test]
fn notify_waiters_keeps_a_stored_permit_and_stores_none() {
    let n = Notify::new();
    n.notify_one();
    n.notify_waiters();
    assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_ready());
    n.notify_waiters();
    assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_pending());
}

/// A future made before `notify_waiters` whose first poll finds both the new
/// generation and a stored permit completes without taking the permit (weft's order;
/// tokio's fast path would take the permit: both end the wait, weft keeps one more
/// notification).
#[test]
fn unpolled_future_after_notify_waiters_leaves_the_permit() {
    let n = Notify::new();
    let mut a = Box::pin(n.notified());
    n.notify_one();
    n.notify_waiters();
    assert!(poll_noop(a.as_mut()).is_ready());
    assert!(
        poll_noop(Box::pin(n.notified()).as_mut()).is_ready(),
        "permit kept"
    );
}

/// `notify_one` chooses `a`, then `notify_waiters` runs: `b` (registered) is signaled,
/// `a` is not on the list any more. Dropping `a` passes its `notify_one` on: with `b`
/// gone, that is the permit.
#[test]
fn notify_one_then_notify_waiters_then_drop_chosen() {
    let n = Notify::new();
    let mut a = Box::pin(n.notified());
    let mut b = Box::pin(n.notified());
    assert!(poll_noop(a.as_mut()).is_pending());
    assert!(poll_noop(b.as_mut()).is_pending());
    n.notify_one();
    n.notify_waiters();
    assert!(poll_noop(b.as_mut()).is_ready());
    drop(b);
    drop(a);
    assert!(
        poll_noop(Box::pin(n.notified()).as_mut()).is_ready(),
        "a's notification kept"
    );
    assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_pending());
}

#[test]
fn different_waker_each_poll_only_latest_woken() {
    let n = Notify::new();
    let mut a = Box::pin(n.notified());
    let (c1, w1) = counting();
    let (c2, w2) = counting();
    let (c3, w3) = counting();
    assert!(poll_with(a.as_mut(), &w1).is_pending());
    assert!(poll_with(a.as_mut(), &w2).is_pending());
    let mut a = Box::new(a); // move the box between polls
    assert!(poll_with(a.as_mut().as_mut(), &w3).is_pending());
    n.notify_one();
    assert_eq!(
        (c1.0.load(SeqCst), c2.0.load(SeqCst), c3.0.load(SeqCst)),
        (0, 0, 1)
    );
    assert!(poll_with(a.as_mut().as_mut(), &w1).is_ready());
    assert!(poll_with(a.as_mut().as_mut(), &w2).is_ready());
    drop(w1);
    drop(w2);
    drop(w3);
}

// ---------------------------------------------------------------------------------
// Hostile wakers
// ---------------------------------------------------------------------------------

struct PanicOnWake;
impl Wake for PanicOnWake {
    fn wake(self: Arc<Self>) {
        panic!("this waker panics");
    }
}

/// A waker that panics in `wake` under `notify_one`: the panic reaches the caller, the
/// chosen waiter still completes when polled, and the `Notify` keeps working (its lock
/// is not held, nothing is lost).
#[test]
fn panicking_waker_under_notify_one() {
    watchdog(20, || {
        let n = Notify::new();
        let mut a = Box::pin(n.notified());
        let w = Waker::from(Arc::new(PanicOnWake));
        assert!(poll_with(a.as_mut(), &w).is_pending());
        let r = catch_unwind(AssertUnwindSafe(|| n.notify_one()));
        assert!(r.is_err(), "the waker's panic reaches notify_one's caller");
        assert!(
            poll_noop(a.as_mut()).is_ready(),
            "the chosen waiter still completes"
        );
        drop(a);
        n.notify_one();
        assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_ready());
        assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_pending());
    });
}

/// `notify_waiters` with three waiters, the first one's waker panicking: the others'
/// futures complete when polled (their nodes were completed under the lock) and the
/// state is consistent afterwards.
#[test]
fn panicking_waker_under_notify_waiters_state_stays_consistent() {
    watchdog(20, || {
        let n = Notify::new();
        let mut a = Box::pin(n.notified());
        let mut b = Box::pin(n.notified());
        let mut c = Box::pin(n.notified());
        let wp = Waker::from(Arc::new(PanicOnWake));
        let (_cb, wb) = counting();
        let (_cc, wc) = counting();
        assert!(poll_with(a.as_mut(), &wp).is_pending());
        assert!(poll_with(b.as_mut(), &wb).is_pending());
        assert!(poll_with(c.as_mut(), &wc).is_pending());
        let r = catch_unwind(AssertUnwindSafe(|| n.notify_waiters()));
        assert!(r.is_err());
        assert!(poll_noop(a.as_mut()).is_ready());
        assert!(poll_noop(b.as_mut()).is_ready());
        assert!(poll_noop(c.as_mut()).is_ready());
        assert!(
            poll_noop(Box::pin(n.notified()).as_mut()).is_pending(),
            "no permit"
        );
        n.notify_one();
        assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_ready());
    });
}

/// A panicking waker in a `notify_waiters` batch does not keep the waiters after it
/// from waking (tokio's `WakeList` drops the rest of such a batch; weft's
/// `WakeBatch::flush` wakes them all, then resumes the panic).
#[test]
fn panicking_waker_under_notify_waiters_other_wakers_fire() {
    let n = Notify::new();
    let mut a = Box::pin(n.notified());
    let mut b = Box::pin(n.notified());
    let wp = Waker::from(Arc::new(PanicOnWake));
    let (cb, wb) = counting();
    assert!(poll_with(a.as_mut(), &wp).is_pending());
    assert!(poll_with(b.as_mut(), &wb).is_pending());
    let _ = catch_unwind(AssertUnwindSafe(|| n.notify_waiters()));
    assert_eq!(cb.0.load(SeqCst), 1, "b's waker was not woken");
}

/// The future, leaked to `'static`, dropped by its own waker from inside `wake`.
type Shared = Arc<Mutex<Option<Pin<Box<Notified<'static>>>>>>;
struct DropOnWake(Shared);
impl Wake for DropOnWake {
    fn wake(self: Arc<Self>) {
        let f = self.0.lock().unwrap().take();
        drop(f);
    }
}

/// `notify_one` chooses a future whose waker drops it: the notification goes on to
/// the next waiter, or, with none, to the permit.
#[test]
fn waker_dropping_the_future_in_wake_passes_the_notification_on() {
    watchdog(20, || {
        let n: &'static Notify = Box::leak(Box::new(Notify::new()));
        let slot: Shared = Arc::new(Mutex::new(Some(Box::pin(n.notified()))));
        let w = Waker::from(Arc::new(DropOnWake(slot.clone())));
        {
            let mut g = slot.lock().unwrap();
            assert!(poll_with(g.as_mut().unwrap().as_mut(), &w).is_pending());
        }
        let mut b = Box::pin(n.notified());
        let (cb, wb) = counting();
        assert!(poll_with(b.as_mut(), &wb).is_pending());
        n.notify_one();
        assert!(slot.lock().unwrap().is_none(), "dropped in wake");
        assert_eq!(cb.0.load(SeqCst), 1, "passed on to b");
        assert!(poll_noop(b.as_mut()).is_ready());
        drop(b);

        // With nobody behind it: the permit.
        let slot: Shared = Arc::new(Mutex::new(Some(Box::pin(n.notified()))));
        let w = Waker::from(Arc::new(DropOnWake(slot.clone())));
        {
            let mut g = slot.lock().unwrap();
            assert!(poll_with(g.as_mut().unwrap().as_mut(), &w).is_pending());
        }
        n.notify_one();
        assert!(slot.lock().unwrap().is_none());
        assert!(
            poll_noop(Box::pin(n.notified()).as_mut()).is_ready(),
            "permit"
        );
        assert!(poll_noop(Box::pin(n.notified()).as_mut()).is_pending());

        // notify_waiters: dropped in wake, nothing passed on.
        let slot: Shared = Arc::new(Mutex::new(Some(Box::pin(n.notified()))));
        let w = Waker::from(Arc::new(DropOnWake(slot.clone())));
        {
            let mut g = slot.lock().unwrap();
            assert!(poll_with(g.as_mut().unwrap().as_mut(), &w).is_pending());
        }
        n.notify_waiters();
        assert!(slot.lock().unwrap().is_none());
        assert!(
            poll_noop(Box::pin(n.notified()).as_mut()).is_pending(),
            "no permit"
        );
    });
}

/// A waker whose last reference's `Drop` calls `notify_one` on the same `Notify`: no
/// waker is dropped under the waiters' lock, so nothing deadlocks.
struct NotifyOnDrop(&'static Notify);
impl Wake for NotifyOnDrop {
    fn wake(self: Arc<Self>) {}
}
impl Drop for NotifyOnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

#[test]
fn waker_notifying_from_its_drop_does_not_deadlock() {
    watchdog(20, || {
        let n: &'static Notify = Box::leak(Box::new(Notify::new()));
        // Replaced waker (retired), chosen waker (woken and dropped), withdrawn waker.
        let mut a = Box::pin(n.notified());
        let mut b = Box::pin(n.notified());
        assert!(poll_with(a.as_mut(), &Waker::from(Arc::new(NotifyOnDrop(n)))).is_pending());
        assert!(poll_with(b.as_mut(), &Waker::from(Arc::new(NotifyOnDrop(n)))).is_pending());
        // Re-poll a with another one: the first is dropped (-> notify_one -> b? no: a
        // is first in line, so a is chosen).
        assert!(poll_with(a.as_mut(), &Waker::from(Arc::new(NotifyOnDrop(n)))).is_pending());
        n.notify_one();
        drop(a);
        drop(b);
        n.notify_waiters();
        let mut c = Box::pin(n.notified());
        let _ = poll_with(c.as_mut(), &Waker::from(Arc::new(NotifyOnDrop(n))));
        drop(c);
    });
}

// ---------------------------------------------------------------------------------
// Fibers, threads and runtimes
// ---------------------------------------------------------------------------------

/// A fiber blocked in `notified_blocking` is aborted: its node leaves the list, so a
/// later `notify_one` becomes the permit instead of going to the dead fiber.
#[test]
fn aborted_fiber_waiter_leaves_the_list() {
    watchdog(30, || {
        let rt = rt2();
        let n = Arc::new(Notify::new());
        let at = Arc::new(AtomicBool::new(false));
        let (n1, at1) = (n.clone(), at.clone());
        let h = fiber_on(&rt, move || {
            at1.store(true, SeqCst);
            n1.notified_blocking();
        });
        wait_for("the fiber to wait", 10, || at.load(SeqCst));
        std::thread::sleep(Duration::from_millis(50));
        h.abort();
        let r = join_within(h, 10);
        assert!(r.unwrap_err().is_cancelled());
        n.notify_one();
        assert_eq!(
            poll_once(n.notified()),
            Some(()),
            "the permit, not the dead fiber"
        );
        assert_eq!(poll_once(n.notified()), None);
        drop(rt);
    });
}

/// `notify_one` and `abort` back to back on a waiting fiber, many times: the
/// notification is consumed by the fiber (it completes) or stays as the permit (it
/// is cancelled), exactly one of the two.
#[test]
fn notify_one_racing_abort_of_a_fiber_is_not_lost() {
    watchdog(60, || {
        let rt = rt2();
        let n = Arc::new(Notify::new());
        for _ in 0..100 {
            let at = Arc::new(AtomicBool::new(false));
            let (n1, at1) = (n.clone(), at.clone());
            let h = fiber_on(&rt, move || {
                at1.store(true, SeqCst);
                n1.notified_blocking();
            });
            wait_for("the fiber to wait", 10, || at.load(SeqCst));
            n.notify_one();
            h.abort();
            let consumed = join_within(h, 10).is_ok();
            let permit = poll_once(n.notified()).is_some();
            assert!(consumed != permit, "consumed {consumed} permit {permit}");
        }
    });
}

/// The runtime is dropped while a fiber and a task wait (the `Notify` outlives it):
/// their nodes leave the list (a dangling node would be touched by the next
/// `notify_one`), and the notification becomes the permit.
#[test]
fn runtime_dropped_mid_wait() {
    watchdog(30, || {
        for _ in 0..10 {
            let rt = rt2();
            let n = Arc::new(Notify::new());
            let waiting = Arc::new(AtomicUsize::new(0));
            let (n1, w1) = (n.clone(), waiting.clone());
            let _f = fiber_on(&rt, move || {
                w1.fetch_add(1, SeqCst);
                n1.notified_blocking();
            });
            let (n2, w2) = (n.clone(), waiting.clone());
            let _t = rt.spawn(async move {
                let f = n2.notified();
                w2.fetch_add(1, SeqCst);
                f.await;
            });
            wait_for("both to wait", 10, || waiting.load(SeqCst) == 2);
            std::thread::sleep(Duration::from_millis(20));
            drop(rt);
            n.notify_one();
            n.notify_waiters();
            assert_eq!(poll_once(n.notified()), Some(()), "permit kept");
            assert_eq!(poll_once(n.notified()), None);
        }
    });
}

/// Plain threads blocked in `notified_blocking` are all released by one
/// `notify_waiters`, which leaves no permit.
#[test]
fn notify_waiters_releases_blocked_threads() {
    watchdog(30, || {
        let n = Arc::new(Notify::new());
        let ready = Arc::new(AtomicUsize::new(0));
        let mut hs = vec![];
        for _ in 0..4 {
            let (n, ready) = (n.clone(), ready.clone());
            hs.push(std::thread::spawn(move || {
                let f = n.notified();
                ready.fetch_add(1, SeqCst);
                weft::wait(f);
            }));
        }
        wait_for("threads", 10, || ready.load(SeqCst) == 4);
        n.notify_waiters();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(poll_once(n.notified()), None);
    });
}

// ---------------------------------------------------------------------------------
// Stress
// ---------------------------------------------------------------------------------

/// Token hand-off: producers (threads) add a token and `notify_one`; consumers
/// (threads, fibers, tasks that cancel their futures at random points) take tokens and
/// otherwise wait. A chaos thread calls `notify_waiters` meanwhile. A lost `notify_one`
/// leaves tokens with every consumer asleep: the wait for all tokens to be taken times
/// out.
#[test]
fn stress_tokens_across_threads_fibers_tasks() {
    const PRODUCERS: usize = 3;
    const PER: usize = 3000;
    const TOTAL: usize = PRODUCERS * PER;
    watchdog(120, || {
        let rt = rt2();
        let n = Arc::new(Notify::new());
        let avail = Arc::new(AtomicUsize::new(0));
        let taken = Arc::new(AtomicUsize::new(0));
        let take = |avail: &AtomicUsize| {
            avail
                .fetch_update(SeqCst, SeqCst, |v| v.checked_sub(1))
                .is_ok()
        };
        let mut threads = vec![];
        let mut handles = vec![];
        for _ in 0..2 {
            let (n, avail, taken) = (n.clone(), avail.clone(), taken.clone());
            threads.push(std::thread::spawn(move || loop {
                if taken.load(SeqCst) >= TOTAL {
                    break;
                }
                if take(&avail) {
                    taken.fetch_add(1, SeqCst);
                    continue;
                }
                let f = n.notified();
                if taken.load(SeqCst) >= TOTAL || avail.load(SeqCst) > 0 {
                    continue;
                }
                weft::wait(f);
            }));
        }
        for _ in 0..2 {
            let (n, avail, taken) = (n.clone(), avail.clone(), taken.clone());
            handles.push(fiber_on(&rt, move || loop {
                if taken.load(SeqCst) >= TOTAL {
                    break;
                }
                if take(&avail) {
                    taken.fetch_add(1, SeqCst);
                    continue;
                }
                let f = n.notified();
                if taken.load(SeqCst) >= TOTAL || avail.load(SeqCst) > 0 {
                    continue;
                }
                weft::wait(f);
            }));
        }
        for i in 0..2u64 {
            let (n, avail, taken) = (n.clone(), avail.clone(), taken.clone());
            handles.push(rt.spawn(async move {
                let mut r = Rng::new(i + 11);
                loop {
                    if taken.load(SeqCst) >= TOTAL {
                        break;
                    }
                    if take(&avail) {
                        taken.fetch_add(1, SeqCst);
                        continue;
                    }
                    let f = n.notified();
                    if taken.load(SeqCst) >= TOTAL || avail.load(SeqCst) > 0 {
                        continue;
                    }
                    // Cancelled after 0..3 pending polls (then loops and re-checks).
                    drop_after(r.below(4), f).await;
                }
            }));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let chaos = {
            let (n, stop) = (n.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    n.notify_waiters();
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        };
        let mut producers = vec![];
        for _ in 0..PRODUCERS {
            let (n, avail) = (n.clone(), avail.clone());
            producers.push(std::thread::spawn(move || {
                for k in 0..PER {
                    avail.fetch_add(1, SeqCst);
                    n.notify_one();
                    if k % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            }));
        }
        for p in producers {
            p.join().unwrap();
        }
        wait_for(
            "every token taken (a lost notify_one hangs here)",
            60,
            || taken.load(SeqCst) == TOTAL,
        );
        stop.store(true, SeqCst);
        chaos.join().unwrap();
        // Release whoever waits now.
        for _ in 0..10 {
            n.notify_waiters();
            std::thread::sleep(Duration::from_millis(5));
        }
        for t in threads {
            t.join().unwrap();
        }
        for h in handles {
            join_within(h, 20).unwrap();
        }
        assert_eq!(avail.load(SeqCst), 0);
        assert_eq!(taken.load(SeqCst), TOTAL);
    });
}

/// Exactly once: one `notify_one` at a time to a crowd of waiting threads and tasks
/// (some cancelling): each call completes exactly one `notified()` (never two: no
/// double consumption), with no permit left over.
#[test]
fn stress_each_notify_one_completes_exactly_one_waiter() {
    const ROUNDS: usize = 1500;
    watchdog(120, || {
        let rt = rt2();
        let n = Arc::new(Notify::new());
        let got = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = vec![];
        for _ in 0..3 {
            let (n, got, stop) = (n.clone(), got.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    n.notified_blocking();
                    if !stop.load(SeqCst) {
                        got.fetch_add(1, SeqCst);
                    }
                }
            }));
        }
        let mut tasks = vec![];
        for i in 0..3u64 {
            let (n, got, stop) = (n.clone(), got.clone(), stop.clone());
            tasks.push(rt.spawn(async move {
                let mut r = Rng::new(i + 99);
                while !stop.load(SeqCst) {
                    if drop_after(r.below(5), n.notified()).await.is_some() && !stop.load(SeqCst) {
                        got.fetch_add(1, SeqCst);
                    }
                }
            }));
        }
        for i in 1..=ROUNDS {
            n.notify_one();
            wait_for("the notification to be consumed", 30, || {
                got.load(SeqCst) >= i
            });
            let g = got.load(SeqCst);
            assert_eq!(g, i, "one notify_one completed {} waiters", g + 1 - i);
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(got.load(SeqCst), ROUNDS);
        stop.store(true, SeqCst);
        for _ in 0..20 {
            n.notify_waiters();
            std::thread::sleep(Duration::from_millis(5));
        }
        for t in threads {
            t.join().unwrap();
        }
        for t in tasks {
            join_within(t, 20).unwrap();
        }
    });
}

/// `notify_waiters` racing registrations with hand-polled futures on several threads:
/// every future made before a call completes on the poll after it.
#[test]
fn stress_notify_waiters_reaches_hand_polled_futures() {
    const ROUNDS: usize = 2000;
    watchdog(120, || {
        let n = Arc::new(Notify::new());
        let round = Arc::new(AtomicUsize::new(0));
        let acked = Arc::new(AtomicUsize::new(0));
        let made = Arc::new(AtomicUsize::new(0));
        let mut hs = vec![];
        const T: usize = 3;
        for t in 0..T {
            let (n, round, acked, made) = (n.clone(), round.clone(), acked.clone(), made.clone());
            hs.push(std::thread::spawn(move || {
                for r in 0..ROUNDS {
                    let mut f = Box::pin(n.notified());
                    made.fetch_add(1, SeqCst);
                    // Poll (register) or not, at random-ish.
                    if (r + t) % 3 != 0 {
                        let _ = poll_noop(f.as_mut());
                    }
                    // Wait for the notify_waiters of this round, then poll once: must
                    // be ready.
                    let deadline = std::time::Instant::now() + Duration::from_secs(30);
                    while round.load(SeqCst) <= r {
                        assert!(std::time::Instant::now() < deadline, "no round");
                        std::thread::yield_now();
                    }
                    assert!(
                        poll_noop(f.as_mut()).is_ready(),
                        "round {r}: a future made before notify_waiters missed it"
                    );
                    acked.fetch_add(1, SeqCst);
                }
            }));
        }
        for r in 0..ROUNDS {
            wait_for("futures made", 30, || made.load(SeqCst) == (r + 1) * T);
            n.notify_waiters();
            round.store(r + 1, SeqCst);
            wait_for("acks", 30, || acked.load(SeqCst) == (r + 1) * T);
        }
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(
            poll_once(n.notified()),
            None,
            "no permit from notify_waiters"
        );
    });
}

/// A plain thread hands out one `notify_one` at a time (the lock-free path whenever
/// nobody waits); another spins making a future, polling it once or twice with a no-op
/// waker and dropping it (the last waiter's withdrawal, WAITING -> EMPTY under the lock,
/// racing the lock-free store; or a chosen future dropped, passing it on). Each
/// notification must reach the spinner exactly once.
#[test]
fn stress_withdrawal_vs_lock_free_notify_one_from_threads() {
    const ROUNDS: usize = 20_000;
    watchdog(120, || {
        let n = Arc::new(Notify::new());
        let got = Arc::new(AtomicUsize::new(0));
        let (n1, got1) = (n.clone(), got.clone());
        let spinner = std::thread::spawn(move || {
            let mut r = Rng::new(7);
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            while got1.load(SeqCst) < ROUNDS {
                assert!(
                    std::time::Instant::now() < deadline,
                    "a notification was lost"
                );
                let mut f = Box::pin(n1.notified());
                let mut ready = false;
                for _ in 0..=r.below(2) {
                    if poll_noop(f.as_mut()).is_ready() {
                        ready = true;
                        break;
                    }
                }
                if ready {
                    got1.fetch_add(1, SeqCst);
                }
                drop(f);
            }
        });
        for i in 1..=ROUNDS {
            n.notify_one();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while got.load(SeqCst) < i {
                assert!(std::time::Instant::now() < deadline, "round {i}: lost");
                std::thread::yield_now();
            }
            assert_eq!(got.load(SeqCst), i, "double consumption");
        }
        spinner.join().unwrap();
        assert_eq!(poll_once(n.notified()), None, "a permit left over");
    });
}

/// `Notified` must not be `Unpin` (its node is on an intrusive list while registered;
/// an `Unpin` future could be polled through `Pin::new` and moved from safe code).
#[test]
fn notified_is_not_unpin() {
    use std::marker::PhantomData;
    struct Probe<T>(PhantomData<T>);
    trait Fallback {
        fn is_unpin(&self) -> bool {
            false
        }
    }
    impl<T> Fallback for Probe<T> {}
    impl<T: Unpin> Probe<T> {
        #[allow(dead_code)]
        fn is_unpin(&self) -> bool {
            true
        }
    }
    assert!(!Probe::<Notified<'static>>(PhantomData).is_unpin());
    // The probe works: a Box is Unpin.
    assert!(Probe::<Box<u8>>(PhantomData).is_unpin());
}

/// Real-thread version of the loom model `loom_notify_review_waiters_vs_withdraw_vs_
/// notify_one`: per round, one thread withdraws the last registered waiter, one calls
/// `notify_waiters`, one calls `notify_one`, started together; after the round exactly
/// one permit is stored (the `notify_one`, kept or passed on by the dropped waiter).
#[test]
fn stress_rounds_withdraw_vs_notify_waiters_vs_notify_one() {
    const ROUNDS: usize = 5_000;
    watchdog(120, || {
        let n = Arc::new(Notify::new());
        let start = Arc::new(std::sync::Barrier::new(4));
        let end = Arc::new(std::sync::Barrier::new(4));
        // After the main thread's check: nobody touches the Notify during it.
        let checked = Arc::new(std::sync::Barrier::new(4));
        // The waiter's future lives on the withdrawing thread, registered before each
        // round starts.
        let spin = |b: &std::sync::Barrier| {
            b.wait();
        };
        let mut hs = vec![];
        {
            let (n, start, end, checked) = (n.clone(), start.clone(), end.clone(), checked.clone());
            hs.push(std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let mut f = Box::pin(n.notified());
                    assert!(poll_noop(f.as_mut()).is_pending());
                    spin(&start);
                    drop(f);
                    spin(&end);
                    spin(&checked);
                }
            }));
        }
        {
            let (n, start, end, checked) = (n.clone(), start.clone(), end.clone(), checked.clone());
            hs.push(std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    spin(&start);
                    n.notify_waiters();
                    spin(&end);
                    spin(&checked);
                }
            }));
        }
        {
            let (n, start, end, checked) = (n.clone(), start.clone(), end.clone(), checked.clone());
            hs.push(std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    spin(&start);
                    n.notify_one();
                    spin(&end);
                    spin(&checked);
                }
            }));
        }
        for r in 0..ROUNDS {
            spin(&start);
            spin(&end);
            assert_eq!(
                poll_once(n.notified()),
                Some(()),
                "round {r}: notify_one lost"
            );
            assert_eq!(poll_once(n.notified()), None, "round {r}: two permits");
            spin(&checked);
        }
        for h in hs {
            h.join().unwrap();
        }
    });
}

/// `notified_blocking` inside a plain task on a one-worker runtime (the worker goes on
/// with other work while it waits): the task that notifies runs, and both end. Also
/// `notify_waiters` reaching a blocked task the same way.
#[test]
fn notified_blocking_in_a_task_on_one_worker() {
    watchdog(30, || {
        let rt = weft::Builder::new().worker_threads(1).build().unwrap();
        let n = Arc::new(Notify::new());
        let n1 = n.clone();
        let a = rt.spawn(async move { n1.notified_blocking() });
        let n2 = n.clone();
        let b = rt.spawn(async move {
            weft::task::yield_now().await;
            n2.notify_one();
        });
        join_within(a, 20).unwrap();
        join_within(b, 20).unwrap();
        let ready = Arc::new(AtomicBool::new(false));
        let (n3, r3) = (n.clone(), ready.clone());
        let c = rt.spawn(async move {
            let f = n3.notified();
            r3.store(true, SeqCst);
            weft::wait(f);
        });
        wait_for("c made its future", 10, || ready.load(SeqCst));
        n.notify_waiters();
        join_within(c, 20).unwrap();
        assert_eq!(poll_once(n.notified()), None);
    });
}

/// A registered future that is leaked (`mem::forget` of its box) stays on the list and
/// takes the next `notify_one` (no use-after-free: its memory is leaked too). The same
/// as tokio; a fiber leaked by a shutdown that timed out behaves so. Documented here.
#[test]
fn leaked_registered_future_swallows_one_notify_one() {
    let n = Notify::new();
    let mut f = Box::pin(n.notified());
    assert!(poll_noop(f.as_mut()).is_pending());
    std::mem::forget(f);
    n.notify_one(); // goes to the leaked waiter
    assert_eq!(poll_once(n.notified()), None);
    n.notify_one(); // nobody waits now: the permit
    assert_eq!(poll_once(n.notified()), Some(()));
}
