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

pub(crate) enum Timer {
    /// Fires once, at `deadline`.
    At {
        deadline: Instant,
        taken: AtomicBool,
    },
    /// Fires every `period`; `next` is the next delivery.
    Tick {
        period: Duration,
        next: Mutex<Instant>,
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
            next: Mutex::new(after_or_far(Instant::now(), period)),
        }
    }

    /// The instant it fires next (`None`: never again).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self {
            Timer::At { deadline, taken } => {
                (!taken.load(std::sync::atomic::Ordering::Acquire)).then_some(*deadline)
            }
            Timer::Tick { next, .. } => Some(*next.lock()),
        }
    }

    /// Takes the message if it is due.
    pub(crate) fn try_take(&self) -> Option<Instant> {
        let now = Instant::now();
        match self {
            Timer::At { deadline, taken } => {
                (now >= *deadline && !taken.swap(true, AcqRel)).then_some(*deadline)
            }
            Timer::Tick { period, next } => {
                let mut next = next.lock();
                if now < *next {
                    return None;
                }
                let fired = *next;
                *next = after_or_far(now, *period);
                Some(fired)
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

/// What wakes a timer receive at its deadline: a sleep on a runtime's wheel (the
/// current runtime's, else the most recently started live one), or, in a program that
/// has no runtime, a thread that sleeps until then.
enum Alarm {
    Wheel(Pin<Box<crate::time::Sleep>>),
    Thread(Instant),
}

impl Alarm {
    fn new(deadline: Instant) -> Alarm {
        let sleep = crate::time::sleep_until(deadline);
        if sleep.is_bound() {
            return Alarm::Wheel(Box::pin(sleep));
        }
        if let Some(h) = crate::runtime::latest() {
            let _enter = crate::runtime::enter(&h);
            return Alarm::Wheel(Box::pin(crate::time::sleep_until(deadline)));
        }
        Alarm::Thread(far_instant())
    }

    /// Pending until `deadline`, with `cx` woken then.
    fn poll(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        match self {
            Alarm::Wheel(sleep) => {
                if sleep.deadline() != deadline {
                    sleep.as_mut().reset(deadline);
                }
                sleep.as_mut().poll(cx)
            }
            Alarm::Thread(armed) => {
                if Instant::now() >= deadline {
                    return Poll::Ready(());
                }
                if *armed != deadline {
                    *armed = deadline;
                    let waker = cx.waker().clone();
                    std::thread::spawn(move || {
                        let left = deadline.saturating_duration_since(Instant::now());
                        std::thread::sleep(left);
                        waker.wake();
                    });
                }
                Poll::Pending
            }
        }
    }
}

fn far_instant() -> Instant {
    after_or_far(Instant::now(), Duration::MAX)
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
