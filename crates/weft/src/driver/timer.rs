//! The timer driver: one wheel per runtime, behind a lock, plus the hand-off that lets
//! exactly one sleeping worker wait for the next deadline.
//!
//! A worker about to park tries to become the *holder*. The holder fires what is due,
//! publishes the deadline it will sleep until (under the wheel lock) and parks with
//! that timeout; the other workers park without one, so an idle runtime with no timer
//! due makes no wakeups at all. Registering a timer earlier than the holder's deadline
//! unparks the holder so it can shorten its sleep: the registrar inserts under the
//! same lock, so it either sees the published deadline or the holder sees the new
//! entry. Busy workers fire due timers every 16 polls while any timer is pending, so
//! timers also run when nobody parks.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;
use std::task::Waker;
use std::time::{Duration, Instant};

use super::wheel::{TimerKey, Wheel};
use crate::base::park::Parker;
use crate::base::Arc;
use crate::task::waker::Prepared;

const NONE: u64 = u64::MAX;

pub(crate) struct Driver {
    start: Instant,
    wheel: Mutex<Wheel>,
    /// Earliest pending deadline (ms since `start`), `NONE` if none: a lock-free "is
    /// anything due?" for busy workers.
    next_deadline: AtomicU64,
    /// The parker of the worker sleeping with the driver.
    holder: Mutex<Option<Arc<Parker>>>,
    /// Odd while a worker holds the driver; every take and every release moves it on,
    /// so two equal even reads say nobody held it in between (sysmon's look).
    holder_taken: crate::base::AtomicUsize,
    /// The deadline the holder sleeps until (`NONE`: no timeout).
    holder_until: AtomicU64,
    fired: AtomicU64,
    /// Set (under the wheel lock) once the runtime's workers are gone: nothing fires
    /// the wheel any more, so no timer is filed on it; a sleep then waits on the
    /// process's alarm thread (`time::alarm`).
    shut: AtomicBool,
    /// The I/O driver, whose `epoll_wait` the holder sleeps in (none under loom: a
    /// model's threads cannot sleep in a real `epoll_wait`).
    io: Option<super::io::IoDriver>,
}

impl Driver {
    pub(crate) fn with_io(io: Option<super::io::IoDriver>) -> Driver {
        Driver {
            io,
            ..Driver::new()
        }
    }

    pub(crate) fn new() -> Driver {
        Driver {
            io: None,
            start: Instant::now(),
            wheel: Mutex::new(Wheel::new()),
            next_deadline: AtomicU64::new(NONE),
            holder: Mutex::new(None),
            holder_taken: crate::base::AtomicUsize::new(0),
            holder_until: AtomicU64::new(NONE),
            fired: AtomicU64::new(0),
            shut: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Wheel> {
        self.wheel.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// `t` in whole milliseconds since the start, rounded up so a timer never fires
    /// early.
    fn to_ms(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.start);
        // Saturating: a deadline 2^64 ms away wrapped (`as u64`) to one a few ms after
        // the start, which fired at once and was armed again for ever (found in review:
        // a sleep that spun a worker); the wheel clamps far deadlines anyway.
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        if d > Duration::from_millis(ms) {
            ms.saturating_add(1)
        } else {
            ms
        }
    }

    fn publish_next(&self, wheel: &Wheel) {
        self.next_deadline
            .store(wheel.next_expiration().unwrap_or(NONE), Release);
    }

    /// Files a timer; `None` once the driver is shut down (see [`Driver::shutdown_timers`]).
    pub(crate) fn register(&self, deadline: Instant, waker: &Waker) -> Option<TimerKey> {
        crate::task::diag::note_wait(waker, crate::task::diag::WaitOn::Timer);
        let ms = self.to_ms(deadline);
        // Before the guard: dropped after it (see `Prepared`).
        let mut waker = Prepared::new(waker);
        let key = {
            let mut w = self.lock();
            if self.shut.load(Relaxed) {
                return None;
            }
            let key = w.insert(ms, waker.take());
            self.publish_next(&w);
            key
        };
        self.kick(ms);
        Some(key)
    }

    /// Moves a timer to `deadline` (filing it anew if it fired); `None` once the driver
    /// is shut down, the timer then gone.
    pub(crate) fn reset(
        &self,
        key: TimerKey,
        deadline: Instant,
        waker: &Waker,
    ) -> Option<TimerKey> {
        crate::task::diag::note_wait(waker, crate::task::diag::WaitOn::Timer);
        let ms = self.to_ms(deadline);
        let mut waker = Prepared::new(waker);
        let (key, old) = {
            let mut w = self.lock();
            if self.shut.load(Relaxed) {
                (None, w.remove(key))
            } else {
                let (key, old) = w.reset(key, ms, waker.take());
                self.publish_next(&w);
                (Some(key), old)
            }
        };
        // Wakers are dropped outside the lock: a drop may run code that uses timers.
        drop(old);
        if key.is_some() {
            self.kick(ms);
        }
        key
    }

    /// The runtime's workers are gone and nothing fires the wheel any more: every
    /// pending timer's waker is woken now, and no timer is filed from now on. A sleep
    /// polled again finds its timer gone and waits out its deadline on the process's
    /// alarm thread instead (a plain thread in `block_on` of a sleep slept for ever
    /// once the runtime was dropped: found in review).
    pub(crate) fn shutdown_timers(&self) {
        let mut fired = Vec::new();
        {
            let mut w = self.lock();
            self.shut.store(true, Relaxed);
            w.drain(&mut fired);
            self.publish_next(&w);
        }
        for waker in fired {
            super::wake_guarded(waker);
        }
    }

    /// Moves the pending timer `key` to `deadline`, keeping the waker it has (a reset
    /// by a thread other than the waiter's: the waiter is woken at the new deadline, as
    /// tokio's is). `None` if it fired already (its waiter was woken, and its next poll
    /// files the new deadline) or the wheel has shut down.
    pub(crate) fn reschedule(&self, key: TimerKey, deadline: Instant) -> Option<TimerKey> {
        let ms = self.to_ms(deadline);
        // A shut wheel holds no entry (`shutdown_timers` drained them all).
        let moved = {
            let mut w = self.lock();
            let moved = !self.shut.load(Relaxed) && w.reschedule(key, ms);
            if moved {
                self.publish_next(&w);
            }
            moved
        };
        if moved {
            self.kick(ms);
        }
        moved.then_some(key)
    }

    /// Re-registers the waker; returns false if the timer already fired.
    pub(crate) fn poll_registered(&self, key: TimerKey, waker: &Waker) -> bool {
        crate::task::diag::note_wait(waker, crate::task::diag::WaitOn::Timer);
        let mut waker = Prepared::new(waker);
        let r = self.lock().set_waker(key, &mut waker);
        r.is_ok()
    }

    pub(crate) fn cancel(&self, key: TimerKey) {
        let old = {
            let mut w = self.lock();
            let old = w.remove(key);
            if old.is_some() {
                self.publish_next(&w);
            }
            old
        };
        drop(old);
    }

    /// Unparks the holder if `ms` is earlier than what it sleeps until.
    fn kick(&self, ms: u64) {
        if ms < self.holder_until.load(Acquire) {
            let holder = self
                .holder
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(p) = holder {
                p.unpark();
            }
        }
    }

    /// Fires every due timer (waking its task). Cheap when nothing is due.
    pub(crate) fn process(&self) -> usize {
        let next = self.next_deadline.load(Acquire);
        if next == NONE || next > self.now_ms() {
            return 0;
        }
        let mut fired = Vec::new();
        {
            let mut w = self.lock();
            w.advance(self.now_ms(), &mut fired);
            self.publish_next(&w);
        }
        self.fired.fetch_add(fired.len() as u64, Relaxed);
        let n = fired.len();
        for w in fired {
            super::wake_guarded(w);
        }
        n
    }

    /// A parking worker offers to hold the driver. Only one holds it at a time.
    pub(crate) fn try_acquire(&self, parker: &Arc<Parker>) -> bool {
        let free = self.holder_taken.load(Relaxed);
        if free & 1 == 1
            || self
                .holder_taken
                .compare_exchange(free, free.wrapping_add(1), AcqRel, Relaxed)
                .is_err()
        {
            return false;
        }
        *self.holder.lock().unwrap_or_else(|e| e.into_inner()) = Some(parker.clone());
        true
    }

    /// How long the holder may sleep: until the next deadline. Publishes that deadline
    /// under the wheel lock (see the module doc for why).
    pub(crate) fn holder_timeout(&self) -> Option<Duration> {
        let w = self.lock();
        let next = w.next_expiration().unwrap_or(NONE);
        self.holder_until.store(next, Release);
        drop(w);
        (next != NONE).then(|| Duration::from_millis(next.saturating_sub(self.now_ms())))
    }

    pub(crate) fn release(&self) {
        self.holder_until.store(NONE, Release);
        *self.holder.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // Only the holder writes the word while it is odd.
        let held = self.holder_taken.load(Relaxed);
        self.holder_taken.store(held.wrapping_add(1), Release);
    }

    /// The hold word (see `holder_taken`): odd while a worker holds the driver.
    pub(crate) fn hold_word(&self) -> usize {
        self.holder_taken.load(Acquire)
    }

    /// The I/O driver, if this runtime has one.
    pub(crate) fn io(&self) -> Option<&super::io::IoDriver> {
        self.io.as_ref()
    }

    /// What a worker's parker calls to interrupt the holder's `epoll_wait`.
    pub(crate) fn unparker(&self) -> Option<Waker> {
        if let Some(io) = &self.io {
            return Some(io.unparker());
        }
        None
    }

    /// The holder's sleep: in `epoll_wait` when there is an I/O driver (dispatching
    /// what it read once its parker is back from the external park, so the wakes it
    /// makes find the parker awake and cost no system call), else on the futex.
    /// Returns whether it slept (as `Parker::park_spin_timeout`).
    pub(crate) fn holder_park(
        &self,
        parker: &Parker,
        spin_ns: u64,
        timeout: Option<Duration>,
    ) -> bool {
        if let Some(io) = &self.io {
            let mut timeout = timeout;
            // A spin watches only the parker's token: readiness that comes meanwhile
            // would wait for the spin's end. With sockets registered, the holder goes
            // straight into `epoll_wait`, where both reach it at once.
            let spin_ns = if io.has_sources() { 0 } else { spin_ns };
            if parker.spin(spin_ns, &mut timeout) {
                return false;
            }
            return match parker.park_external(|| io.wait(timeout, || parker.is_notified())) {
                Some(st) => {
                    io.dispatch(st);
                    true
                }
                None => false,
            };
        }
        parker.park_spin_timeout(spin_ns, timeout)
    }

    /// A busy worker's look at the I/O driver (zero timeout), at its fairness points.
    #[inline]
    pub(crate) fn poll_io(&self) {
        if let Some(io) = &self.io {
            io.poll_now();
        }
    }

    /// Whether any socket is registered with the I/O driver.
    pub(crate) fn has_io_sources(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.has_sources())
    }

    /// Sockets registered and readiness events dispatched.
    pub(crate) fn io_stats(&self) -> (usize, u64) {
        if let Some(io) = &self.io {
            return (io.sources(), io.events());
        }
        (0, 0)
    }

    /// Ends every wait on a socket of this runtime with an error (the runtime shuts
    /// down).
    pub(crate) fn shutdown_io(&self) {
        if let Some(io) = &self.io {
            io.shutdown();
        }
    }

    /// How long until the earliest pending deadline (lock-free; `None`: no timer), for a
    /// worker that spins before it offers to hold the driver.
    pub(crate) fn until_next(&self) -> Option<Duration> {
        let next = self.next_deadline.load(Acquire);
        (next != NONE).then(|| Duration::from_millis(next.saturating_sub(self.now_ms())))
    }

    /// Whether any timer is pending (lock-free).
    pub(crate) fn has_pending(&self) -> bool {
        self.next_deadline.load(Acquire) != NONE
    }

    pub(crate) fn pending(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn fired(&self) -> u64 {
        self.fired.load(Relaxed)
    }
}
