//! The sleep transition (the protocol is in [`super::super::idle`]) and the thread
//! block of a wait that may not switch stacks.

use super::*;

impl Core {
    /// The sleep transition (see [`super::idle`] for why this order is safe). The first
    /// worker to park holds the timer driver and sleeps until the next deadline.
    pub(super) fn park(&self, done: &dyn Fn() -> bool) {
        if self.woken.replace(false) {
            self.counters().spurious.bump(1);
        }
        self.transitioning_to_park.set(true);
        // With the last-searcher hand-off: work that producers left to this searcher
        // must not wait behind a busy worker while this one sleeps.
        self.leave_searching();
        let idle = &self.shared.idle;
        idle.publish_parked(self.index);
        fence(SeqCst);
        let parked_at = clock::now_ns();
        self.sample_task_time(parked_at);
        let has_work = !self.shared.inject.is_empty()
            || !self.inbox().is_empty()
            || !self.handed().is_empty()
            || (idle.num_searching() == 0 && self.shared.has_work_for(self.index));
        if has_work || done() || self.shared.is_shutdown() {
            self.unpublish();
        } else {
            self.counters().parked.bump(1);
            let parker = &self.parker;
            let time = &self.shared.time;
            let mut holds_driver = false;
            let mut spin_ns = self.shared.spin_ns();
            // The spin comes before the offer to hold the driver. Taking the driver
            // and giving it back writes its holder word, its holder's parker and the
            // wheel's published deadline, all shared: when two workers hand work to
            // each other (two fibers passing a token), each of them parked and woke
            // once per hand-off, and those lines moved between them every time. A
            // worker woken within its spin now never touches the driver. The spin
            // ends at the next deadline, as the holder's did; a timer registered
            // during it has no holder to shorten, and fires when the spin ends (at
            // most `MAX_SPIN_NS` late, within the wheel's millisecond). With sockets
            // registered the holder goes into `epoll_wait` at once, as before.
            let mut spin_first = spin_ns > 0 && !time.has_io_sources();
            loop {
                let spinning_first = std::mem::take(&mut spin_first);
                if !spinning_first && !holds_driver && time.try_acquire(parker) {
                    holds_driver = true;
                    idle.set_driver_holder(Some(self.index));
                }
                let timeout = if holds_driver {
                    // Fired timers wake their tasks through the normal path; with
                    // `transitioning_to_park` set they go to the injection queue, whose
                    // producer side claims a parked worker (maybe this one).
                    time.process();
                    time.holder_timeout()
                } else if spinning_first {
                    time.until_next()
                } else {
                    None
                };
                let mut timeout = self.keep_alive_left(parked_at, timeout, holds_driver);
                if spinning_first && !parker.spin(spin_ns, &mut timeout) {
                    // No wake-up within the spin: offer to hold the driver, and sleep.
                    spin_ns = 0;
                    continue;
                }
                let slept = if spinning_first {
                    false
                } else if holds_driver {
                    self.dispatching_io.set(true);
                    let slept = time.holder_park(parker, spin_ns, timeout);
                    self.dispatching_io.set(false);
                    slept
                } else {
                    parker.park_spin_timeout(spin_ns, timeout)
                };
                // One spin per park: a wake-up that finds no work sleeps at once.
                spin_ns = 0;
                if !slept {
                    self.counters().spin_wakeups.bump(1);
                }
                if !idle.is_parked(self.index) {
                    // A producer claimed us and counted us as a searcher.
                    if slept {
                        // Only a wake from sleep measures what a futex wake costs.
                        self.shared.record_wake(self.index);
                    }
                    self.searching.set(true);
                    self.woken.set(true);
                    break;
                }
                if !self.inbox().is_empty() || !self.handed().is_empty() {
                    // A fiber tied to this worker was woken (see `Shared::push_inbox`),
                    // or one was handed to it (`Shared::push_handed`).
                    self.unpublish();
                    break;
                }
                if holds_driver && self.has_local_work() {
                    // The I/O dispatch woke tasks onto this worker's own queues (see
                    // `dispatching_io`): run them; a second one already nudged a peer
                    // as any queued task does.
                    self.unpublish();
                    break;
                }
                if done() || self.shared.is_shutdown() {
                    self.unpublish();
                    break;
                }
                if self.keep_alive_left(parked_at, None, holds_driver) == Some(Duration::ZERO) {
                    self.try_retire();
                    break;
                }
            }
            if holds_driver {
                idle.set_driver_holder(None);
                time.release();
                // Timers that came due while we slept are fired before running tasks.
                time.process();
                // Not for sockets alone: a futex wake each time the holder wakes would
                // cost every I/O wake-up a second one. Busy workers poll I/O at their
                // fairness point, the next worker to park takes the driver, and if it
                // stays unheld with work while a worker sleeps (this one runs a long
                // poll, say), sysmon nudges a sleeper of any pool after two looks
                // (`runtime::sysmon::nudge_for_the_drivers`).
                // A retiring worker hands it on for sockets too: nobody else would
                // take it before a peer wakes for some other reason (found in review:
                // a socket's readiness waited for ever behind a retired holder).
                if time.has_pending() || self.retiring.get() {
                    // Hand the driver on: nudge a sleeping peer (without claiming it),
                    // which takes the driver and sleeps until the next deadline.
                    if let Some(peer) = idle.any_parked_except(self.index) {
                        self.shared.remotes[peer].parker.unpark();
                    }
                }
            }
            // Time asleep is not task time: sample up to the park (which also restarted
            // the poll count), restart the clock after it.
            let now = clock::now_ns();
            clock::refresh_coarse(now);
            self.tick_start.set(now);
        }
        self.transitioning_to_park.set(false);
        if !self.retiring.get() {
            // Leaving the parked set: a monitor sleeping because every worker was
            // parked must watch again (see `idle::Doorbell`).
            self.shared.doorbell.ring();
        }
    }

    /// For a temporary worker that may retire: `timeout` shortened to what is left of
    /// its keep-alive since `parked_at` (zero once it has passed). Otherwise `timeout`:
    /// a worker that may not retire yet (a fiber tied to it sleeps, say) sleeps as any
    /// other, rather than spin on a zero timeout; it parks afresh, and may retire a
    /// keep-alive later, once it has run what held it.
    ///
    /// A worker holding the drivers (`holds_driver`) while timers are pending or sockets
    /// are registered may retire only if a parked base worker can take them over (it
    /// is nudged as this one leaves the parked set): with every
    /// other worker in a task (stuck, say), nobody would fire the timers or read the
    /// sockets (found in review: a 150 ms sleep fired only when the stuck base worker
    /// came back, 1.5 s later). It looks again a keep-alive later (at least 1 ms): a
    /// base worker that parks meanwhile does not wake it, and with sockets registered
    /// and no timer it slept in `epoll_wait` with no timeout and never retired (found
    /// under a CPU burner: `review_sysmon::socket_readiness_after_the_driver_holder_retires`
    /// failed 9 runs in 30).
    fn keep_alive_left(
        &self,
        parked_at: u64,
        timeout: Option<Duration>,
        holds_driver: bool,
    ) -> Option<Duration> {
        if !self.may_retire() {
            return timeout;
        }
        let time = &self.shared.time;
        // The lowest parked slot: a base worker if any is parked. Only a base worker
        // counts, since a parked temporary one may be retiring at this very moment.
        if holds_driver
            && (time.has_pending() || time.has_io_sources())
            && self
                .shared
                .idle
                .any_parked_except(self.index)
                .is_none_or(|i| self.shared.is_temporary(i))
        {
            let again = self.shared.keep_alive.max(Duration::from_millis(1));
            return Some(timeout.map_or(again, |t| t.min(again)));
        }
        let idle_for = clock::since(clock::now_ns(), parked_at);
        let left = self.shared.keep_alive.saturating_sub(idle_for);
        Some(timeout.map_or(left, |t| t.min(left)))
    }

    /// A temporary worker idle for its keep-alive leaves the parked set for good, unless
    /// a producer claimed it or work is in sight (the protocol is in [`super::idle`],
    /// "Slots that come and go"). Sets `retiring` when it goes; otherwise it returns as
    /// a worker woken (claimed: counted as a searcher) or as one that found work.
    fn try_retire(&self) {
        let idle = &self.shared.idle;
        let remote = self.remote();
        // Before the fence: producers pushing to our inbox from now on hand it on
        // themselves (see `Shared::push_inbox`).
        remote.active.store(false, SeqCst);
        if !idle.unpublish_parked(self.index) {
            // Claimed meanwhile: the producer counted us as a searcher, and counts on us.
            remote.active.store(true, SeqCst);
            self.searching.set(true);
            self.woken.set(true);
            return;
        }
        // Store buffering against a producer's push, fence and bit load: it found our
        // bit (and its claim lost the race above) or this re-check sees its task.
        fence(SeqCst);
        let has_work = !self.shared.inject.is_empty()
            || !self.inbox().is_empty()
            || !self.handed().is_empty()
            || self.has_local_work()
            || (idle.num_searching() == 0 && self.shared.has_work_for(self.index));
        if has_work || self.shared.is_shutdown() || !self.may_retire() {
            remote.active.store(true, SeqCst);
            return;
        }
        self.retiring.set(true);
    }

    pub(super) fn unpublish(&self) {
        if !self.shared.idle.unpublish_parked(self.index) {
            // Claimed meanwhile: the producer counted us as a searcher.
            self.searching.set(true);
        }
    }

    /// Blocks this worker's thread until `done()`, running nothing else meanwhile: for a
    /// wait that may neither suspend a fiber nor help (a panic is unwinding on this
    /// thread, and no other task may run inside that unwind and see
    /// `thread::panicking()`). Wakes from this thread go to the injection queue, where
    /// the other workers find them; while it can, the thread holds the timer driver and
    /// fires what comes due, so a timer can end the wait even on a one-worker pool.
    #[cold]
    pub(crate) fn block_until(&self, done: impl Fn() -> bool) {
        let was_parking = self.transitioning_to_park.replace(true);
        // What waits in the LIFO slot (a child the waiting task just spawned, say) goes
        // where other workers can steal it; fibers tied to this worker cannot move, and a
        // wait here for one of them, or on a one-worker pool for a task, cannot end.
        if let Some(task) = self.lifo.take() {
            self.push_local(task);
            self.shared.notify_parked();
        }
        let time = &self.shared.time;
        while !done() {
            let holds_driver = time.try_acquire(&self.parker);
            let timeout = if holds_driver {
                time.process();
                time.holder_timeout()
            } else {
                // Another worker holds the driver; look again now and then, in case it
                // stops holding it while this thread still waits.
                Some(BLOCKED_DRIVER_RECHECK)
            };
            if !done() {
                if holds_driver {
                    time.holder_park(&self.parker, 0, timeout);
                } else {
                    self.parker.park_timeout(timeout);
                }
            }
            if holds_driver {
                time.release();
                time.process();
            }
        }
        self.transitioning_to_park.set(was_parking);
    }
}
