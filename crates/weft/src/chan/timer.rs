//! Timer receivers (`after`, `at`, `tick`, `never`): they hold a deadline, not a
//! buffer, and deliver the instant they fire at to whoever receives first after it.
//! A blocking receive sleeps until the deadline (on a runtime's timer wheel on fibers
//! and workers, a timed sleep on other threads); an async one awaits a
//! [`Sleep`](crate::time::Sleep) on the runtime's wheel.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::AcqRel;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::base::{Arc, AtomicBool, Mutex};
use crate::time::alarm::ThreadAlarm;
use crate::waitlist::{Armed, WakerSet};

pub(crate) struct Timer {
    kind: Kind,
    /// Who waits for a message that is not due, to hear of one given back.
    watchers: Mutex<WakerSet>,
}

enum Kind {
    /// Fires once, at `deadline`.
    At {
        deadline: Instant,
        taken: AtomicBool,
    },
    /// Fires every `period`; `next` is the next delivery, with the count of
    /// deliveries taken so far (see [`Timer::give_back`]).
    Tick {
        period: Duration,
        next: Mutex<(Instant, u64)>,
    },
}

/// A receive's place among a timer's watchers: a message that a select took and did
/// not perform comes back by [`Timer::give_back`], and a receive that waits for the
/// timer's next deadline (or for ever, once its message was taken) must hear of it
/// then (found in review: a clone of the receiver waited until its own timeout, or
/// for ever).
#[derive(Default)]
pub(crate) struct Watch(Armed);

impl Watch {
    /// On `timer`'s watchers with `waker` (cloned before the lock, the one replaced
    /// dropped after it). `true` if a give-back came since the last look: look again.
    pub(crate) fn arm(&mut self, timer: &Timer, waker: &Waker) -> bool {
        let waker = waker.clone();
        let (given_back, replaced) = timer.watchers.lock().arm(&mut self.0, waker);
        drop(replaced);
        given_back
    }

    /// Off `timer`'s watchers.
    pub(crate) fn disarm(&mut self, timer: &Timer) {
        let removed = timer.watchers.lock().disarm(&mut self.0);
        drop(removed);
    }
}

impl Timer {
    pub(crate) fn at(deadline: Instant) -> Timer {
        Timer::new(Kind::At {
            deadline,
            taken: AtomicBool::new(false),
        })
    }

    pub(crate) fn tick(period: Duration) -> Timer {
        Timer::new(Kind::Tick {
            period,
            next: Mutex::new((after_or_far(Instant::now(), period), 0)),
        })
    }

    fn new(kind: Kind) -> Timer {
        Timer {
            kind,
            watchers: Mutex::new(WakerSet::default()),
        }
    }

    /// The instant it fires next (`None`: never again).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match &self.kind {
            Kind::At { deadline, taken } => {
                (!taken.load(std::sync::atomic::Ordering::Acquire)).then_some(*deadline)
            }
            Kind::Tick { next, .. } => Some(next.lock().0),
        }
    }

    /// Takes the message if it is due.
    pub(crate) fn try_take(&self) -> Option<Instant> {
        self.try_take_stamped().map(|(at, _)| at)
    }

    /// [`try_take`](Self::try_take), with a stamp for [`give_back`](Self::give_back).
    pub(crate) fn try_take_stamped(&self) -> Option<(Instant, u64)> {
        let now = Instant::now();
        match &self.kind {
            Kind::At { deadline, taken } => {
                (now >= *deadline && !taken.swap(true, AcqRel)).then_some((*deadline, 0))
            }
            Kind::Tick { period, next } => {
                let mut next = next.lock();
                if now < next.0 {
                    return None;
                }
                let fired = next.0;
                *next = (after_or_far(now, *period), next.1 + 1);
                Some((fired, next.1))
            }
        }
    }

    /// A message taken by a select that was not performed comes back, and every
    /// receive waiting on the timer is woken to look. A tick comes back only if no
    /// later one was taken meanwhile (by a clone of the receiver): given back then, it
    /// went out again after that later one, back in time (found in review); it is
    /// dropped instead, as a tick nobody received in time is.
    pub(crate) fn give_back(&self, fired: Instant, stamp: u64) {
        match &self.kind {
            Kind::At { taken, .. } => taken.store(false, std::sync::atomic::Ordering::Release),
            Kind::Tick { next, .. } => {
                let mut next = next.lock();
                if next.1 == stamp {
                    next.0 = fired;
                }
            }
        }
        // After the message is back: a watcher added before this lock is woken here,
        // one added after it sees the message when it looks (`Watch::arm`'s caller
        // looks after arming).
        let woken = self.watchers.lock().take_all();
        for waker in woken {
            waker.wake();
        }
    }

    /// A blocking receive (by `weft::wait`'s rule): the instant it fired at, or `None`
    /// once `deadline` passed first.
    pub(crate) fn recv_blocking(&self, deadline: Option<Instant>) -> Option<Instant> {
        /// Off the watchers however the wait ends (a fiber aborted in it unwinds).
        struct Disarm<'a>(&'a Timer, Watch);
        impl Drop for Disarm<'_> {
            fn drop(&mut self) {
                self.1.disarm(self.0);
            }
        }
        let mut waited = false;
        let mut watch = Disarm(self, Watch::default());
        loop {
            if let Some(at) = self.try_take() {
                return Some(at);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if !waited {
                    // As every timed wait (found in review: a fiber retrying this kept
                    // its worker from a partner homed there).
                    crate::fiber::wait::expired_without_waiting();
                }
                return None;
            }
            waited = true;
            // Until the message's deadline or ours, or until a message is given back.
            let wake_at = match (self.deadline(), deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Pending until a message is given back (or, looked at once armed, is due
            // now): a give-back before the arming is seen by that look, one after it
            // wakes this waker.
            let mut fut = std::pin::pin!(std::future::poll_fn(|cx| {
                if watch.1.arm(self, cx.waker()) || self.is_ready() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }));
            match wake_at {
                Some(d) => {
                    crate::fiber::wait::wait_until(fut.as_mut(), d);
                }
                None => crate::wait(fut),
            }
        }
    }

    /// Whether a message is due now.
    pub(crate) fn is_ready(&self) -> bool {
        self.deadline().is_some_and(|d| Instant::now() >= d)
    }
}

fn after_or_far(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

/// The async receive of a timer receiver (or of `never`, with no timer).
pub(crate) struct TimerRecv<T> {
    timer: Option<Arc<Timer>>,
    convert: fn(Instant) -> T,
    alarm: Option<Alarm>,
    watch: Watch,
}

impl<T> Drop for TimerRecv<T> {
    fn drop(&mut self) {
        if let Some(timer) = &self.timer {
            self.watch.disarm(timer);
        }
    }
}

/// What wakes a timer receive at its deadline: a sleep on the wheel of the runtime the
/// caller runs in, or, anywhere else, the process's alarm thread (so the receive does
/// not depend on a runtime that may be dropped meanwhile).
pub(crate) enum Alarm {
    Wheel(Pin<Box<crate::time::Sleep>>),
    Thread(ThreadAlarm),
}

impl Alarm {
    pub(crate) fn new(deadline: Instant) -> Alarm {
        let sleep = crate::time::sleep_until(deadline);
        if sleep.is_bound() {
            return Alarm::Wheel(Box::pin(sleep));
        }
        Alarm::Thread(ThreadAlarm::default())
    }

    /// Pending until `deadline`, with `cx` woken then.
    pub(crate) fn poll(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        match self {
            Alarm::Wheel(sleep) => {
                if sleep.deadline() != deadline {
                    sleep.as_mut().reset(deadline);
                }
                sleep.as_mut().poll(cx)
            }
            Alarm::Thread(alarm) => alarm.poll(deadline, cx),
        }
    }
}

impl<T> TimerRecv<T> {
    pub(crate) fn new(timer: Option<Arc<Timer>>, convert: fn(Instant) -> T) -> Self {
        TimerRecv {
            timer,
            convert,
            alarm: None,
            watch: Watch::default(),
        }
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<T> {
        let Some(timer) = &self.timer else {
            return Poll::Pending;
        };
        loop {
            if let Some(at) = timer.try_take() {
                self.alarm = None;
                self.watch.disarm(timer);
                return Poll::Ready((self.convert)(at));
            }
            // Armed, then looked at again: a message given back before the arming is
            // due now, one given back after it wakes `cx`.
            if self.watch.arm(timer, cx.waker()) || timer.is_ready() {
                continue;
            }
            let Some(deadline) = timer.deadline() else {
                return Poll::Pending;
            };
            let alarm = self.alarm.get_or_insert_with(|| Alarm::new(deadline));
            if alarm.poll(deadline, cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}
