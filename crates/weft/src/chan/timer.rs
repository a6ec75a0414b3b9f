//! Timer receivers (`after`, `at`, `tick`, `never`): they hold a deadline, not a
//! buffer, and deliver the instant they fire at to whoever receives first after it.
//! A blocking receive sleeps until the deadline (on a runtime's timer wheel on fibers
//! and workers, a timed sleep on other threads); an async one awaits a
//! [`Sleep`](crate::time::Sleep) on the runtime's wheel.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::AcqRel;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::base::{Arc, AtomicBool, Mutex};
use crate::time::alarm::ThreadAlarm;

pub(crate) enum Timer {
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

impl Timer {
    pub(crate) fn at(deadline: Instant) -> Timer {
        Timer::At {
            deadline,
            taken: AtomicBool::new(false),
        }
    }

    pub(crate) fn tick(period: Duration) -> Timer {
        Timer::Tick {
            period,
            next: Mutex::new((after_or_far(Instant::now(), period), 0)),
        }
    }

    /// The instant it fires next (`None`: never again).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self {
            Timer::At { deadline, taken } => {
                (!taken.load(std::sync::atomic::Ordering::Acquire)).then_some(*deadline)
            }
            Timer::Tick { next, .. } => Some(next.lock().0),
        }
    }

    /// Takes the message if it is due.
    pub(crate) fn try_take(&self) -> Option<Instant> {
        self.try_take_stamped().map(|(at, _)| at)
    }

    /// [`try_take`](Self::try_take), with a stamp for [`give_back`](Self::give_back).
    pub(crate) fn try_take_stamped(&self) -> Option<(Instant, u64)> {
        let now = Instant::now();
        match self {
            Timer::At { deadline, taken } => {
                (now >= *deadline && !taken.swap(true, AcqRel)).then_some((*deadline, 0))
            }
            Timer::Tick { period, next } => {
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

    /// A message taken by a select that was not performed comes back. A tick comes
    /// back only if no later one was taken meanwhile (by a clone of the receiver):
    /// given back then, it went out again after that later one, back in time (found
    /// in review); it is dropped instead, as a tick nobody received in time is.
    pub(crate) fn give_back(&self, fired: Instant, stamp: u64) {
        match self {
            Timer::At { taken, .. } => taken.store(false, std::sync::atomic::Ordering::Release),
            Timer::Tick { next, .. } => {
                let mut next = next.lock();
                if next.1 == stamp {
                    next.0 = fired;
                }
            }
        }
    }

    /// A blocking receive (by `weft::wait`'s rule): the instant it fired at, or `None`
    /// once `deadline` passed first.
    pub(crate) fn recv_blocking(&self, deadline: Option<Instant>) -> Option<Instant> {
        let mut waited = false;
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
            match (self.deadline(), deadline) {
                (Some(a), Some(b)) => crate::fiber::wait::sleep_until(a.min(b)),
                (a, b) => match a.or(b) {
                    Some(d) => crate::fiber::wait::sleep_until(d),
                    None => crate::wait(std::future::pending::<()>()),
                },
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
        }
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<T> {
        let Some(timer) = &self.timer else {
            return Poll::Pending;
        };
        loop {
            if let Some(at) = timer.try_take() {
                self.alarm = None;
                return Poll::Ready((self.convert)(at));
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
