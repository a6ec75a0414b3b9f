//! What a worker keeps for fork-join: its private frames and their heartbeat
//! promotion, the deque marks of `scope`, and leapfrogging while it waits for a thief
//! (the protocols are in `forkjoin`).

use super::*;

impl Core {
    /// Which fork-join `join` and `scope` are in progress on this worker, and how many
    /// fork-join jobs run on it: a fiber (or a loop stack's wait) that sees a different
    /// mark than when it was resumed entered one, and must not suspend until it left
    /// (their frames and deque marks must be undone in order, and a job must finish
    /// for the join or scope that owns it, maybe lower on this thread, to go on).
    #[inline]
    pub(crate) fn join_mark(&self) -> (usize, u32) {
        (
            self.private_newest.get() as usize ^ self.outermost.get() as usize,
            self.scopes.get() + self.private_len.get() + self.jobs_running.get(),
        )
    }

    /// Whether a fork-join `join`, `scope` or job is in progress on this worker: both
    /// parts of [`Core::join_mark`] are zero otherwise (an outermost join whose frames
    /// were all promoted still shows in the first).
    #[inline]
    pub(crate) fn in_fork_join(&self) -> bool {
        self.join_mark() != (0, 0)
    }

    /// A fork-join job starts (`true`) or ends on this worker (see [`Core::join_mark`]).
    pub(crate) fn job_running(&self, running: bool) {
        let n = self.jobs_running.get();
        self.jobs_running.set(if running { n + 1 } else { n - 1 });
    }

    /// Whether a fork-join job runs on this worker (at any depth).
    pub(crate) fn in_job(&self) -> bool {
        self.jobs_running.get() > 0
    }

    /// A fork-join wait (a `join` for its thief, a `scope` for its jobs) on `latch`,
    /// which was made with this worker's parker: counted in `Remote::fork_join_waits`
    /// while it lasts (unwinding included), except while it runs user code
    /// ([`Core::unblocked`]), and unwinding this worker's set-aside fibers once the
    /// runtime is routed ([`Core::fork_join_shutdown_step`]) before `help`.
    pub(crate) fn fork_join_wait(&self, latch: &OnceLatch, mut help: impl FnMut() -> bool) {
        let waits = &self.remote().fork_join_waits;
        count(waits, true);
        let _counted = Counted(waits, false);
        latch.wait(&self.parker, || self.fork_join_shutdown_step() || help());
    }

    /// Runs `job` from inside a fork-join wait ([`Core::fork_join_wait`]): this
    /// worker does not count as blocked in that wait meanwhile (it runs code that ends
    /// by itself, or waits anew).
    pub(crate) fn helping(&self, job: JobRef) {
        self.unblocked(|| crate::scheduler::job::execute(job));
    }

    /// Runs `f`, user code run from inside a fork-join wait (a helped job, fibers
    /// unwound at shutdown), with this worker not counted as blocked in that wait.
    pub(crate) fn unblocked<R>(&self, f: impl FnOnce() -> R) -> R {
        let waits = &self.remote().fork_join_waits;
        debug_assert!(
            waits.load(Relaxed) > 0,
            "unblocked outside a fork-join wait"
        );
        count(waits, false);
        let _counted = Counted(waits, true);
        f()
    }

    /// A `scope` body starts (`true`) or ends on this worker.
    pub(crate) fn scope_entered(&self, entered: bool) {
        let n = self.scopes.get();
        self.scopes.set(if entered { n + 1 } else { n - 1 });
    }

    /// Takes the heartbeat countdown back from the plain-join allowance: the slow path
    /// of a join calls this first, and every piece of user code that ran with an
    /// allowance is followed by it.
    #[inline]
    pub(crate) fn absorb_plain(&self) {
        let n = plain_joins(|c| c.replace(0));
        if n > 0 {
            self.joins_until_check.set(n as u32);
        }
    }

    /// Before user code runs from a join: if enough private frames wait, hands the
    /// heartbeat countdown to the plain-join allowance (see [`take_plain_join`]). Every
    /// grant is followed by [`Core::absorb_plain`] before the core's frame state is
    /// read or changed again.
    #[inline]
    pub(crate) fn grant_plain(&self) {
        if self.private_len.get() >= self.frames_before_plain.get() {
            let n = self.joins_until_check.get() as i32;
            plain_joins(|c| c.set(n));
        }
    }

    /// Links a `join`'s second half as the newest private frame, then runs the
    /// heartbeat check when it is due (see `forkjoin`).
    #[inline]
    pub(crate) fn push_frame(&self, frame: &Frame) {
        self.private_len.set(self.private_len.get() + 1);
        let newest = self.private_newest.get();
        frame.prev.set(newest);
        if newest.is_null() {
            self.private_oldest.set(frame);
        } else {
            // SAFETY: private frames are live: each is unlinked by its own join before
            // its stack frame ends, newest first.
            unsafe { (*newest).next.set(frame) };
        }
        self.private_newest.set(frame);
        // Outermost: no join frame of this worker is in progress (promoted frames
        // leave the private list, so an empty list does not say that).
        if self.outermost.get().is_null() {
            self.outermost_join(frame);
        } else {
            let n = self.joins_until_check.get() - 1;
            if n == 0 {
                self.heartbeat();
            } else {
                self.joins_until_check.set(n);
            }
        }
    }

    /// The outermost join of a computation. If a worker is hungry its second half is
    /// shown to thieves at once; a *parked* worker is woken for it right away only if
    /// this worker's outermost joins have been lasting longer than a wake-up takes (an
    /// EWMA of their measured durations). Otherwise the half is shown quietly (a
    /// searching worker may still take it) and the first heartbeat wakes a sleeper if
    /// the computation is still running, so a tiny computation never pays a futex wake.
    #[cold]
    pub(super) fn outermost_join(&self, frame: &Frame) {
        let now = clock::now_ns();
        self.last_heartbeat.set(now);
        self.last_check.set(now);
        self.outermost_start.set(now);
        self.outermost.set(frame);
        self.joins_until_check.set(self.heartbeat_joins.get());
        self.frames_before_plain.set(FRAMES_WHILE_ALONE);
        if !self.someone_hungry() {
            return;
        }
        let worth_a_wake = self.shared.idle.num_searching() > 0
            || self.avg_outermost_ns.get() > self.shared.wake_latency_ns() as f64;
        if worth_a_wake {
            self.promote_oldest();
        } else {
            self.promote_oldest_quietly();
        }
    }

    /// The outermost join ended: fold its duration into the EWMA.
    #[cold]
    pub(super) fn outermost_done(&self) {
        self.outermost.set(std::ptr::null());
        let took = clock::since(clock::now_ns(), self.outermost_start.get()).as_nanos() as f64;
        let avg = self.avg_outermost_ns.get();
        self.avg_outermost_ns.set(if avg.is_finite() {
            0.75 * avg + 0.25 * took
        } else {
            took
        });
    }

    #[cold]
    pub(super) fn heartbeat(&self) {
        let now = clock::now_ns();
        let joins = adapt_heartbeat(
            self.heartbeat_joins.get(),
            clock::since(now, self.last_check.get()),
        );
        self.last_check.set(now);
        self.heartbeat_joins.set(joins);
        self.joins_until_check.set(joins);
        if clock::since(now, self.last_heartbeat.get()) >= HEARTBEAT {
            self.last_heartbeat.set(now);
            if self.someone_hungry() {
                if self.private_oldest.get().is_null() {
                    // Everything private was shown already (quietly): wake a sleeper.
                    self.shared.notify_parked();
                } else {
                    self.promote_oldest();
                }
            }
        }
    }

    /// Whether another worker would take work from this one: one searches or sleeps,
    /// or waits in `join` for a job this worker stole (and can help with its parts).
    #[inline]
    pub(crate) fn someone_hungry(&self) -> bool {
        self.shared.idle.num_searching() > 0
            || self.shared.idle.any_parked_except(self.index).is_some()
            || self.remote().leapfroggers.load(Relaxed) > 0
    }

    /// When a worker is hungry, moves every private frame to the deque (oldest first,
    /// so the deque keeps the frames' order).
    pub(crate) fn share_private_frames(&self) {
        if self.someone_hungry() {
            while !self.private_oldest.get().is_null() {
                self.promote_oldest();
            }
        }
    }

    /// Moves the oldest private frame to the deque and wakes a worker for it.
    #[cold]
    pub(super) fn promote_oldest(&self) {
        // Work is being shared from here on: keep more frames (see FRAMES_WHILE_ALONE).
        self.frames_before_plain.set(FRAMES_WHILE_SHARING);
        if self.promote_oldest_quietly() {
            self.shared.notify_parked();
        }
    }

    /// Moves the oldest private frame to the deque without waking anyone. Returns
    /// whether there was one.
    pub(super) fn promote_oldest_quietly(&self) -> bool {
        let oldest = self.private_oldest.get();
        if oldest.is_null() {
            return false;
        }
        // SAFETY: private frames are live (see `push_frame`).
        let frame = unsafe { &*oldest };
        let next = frame.next.get();
        self.private_oldest.set(next);
        if next.is_null() {
            self.private_newest.set(std::ptr::null());
        } else {
            // SAFETY: as above.
            unsafe { (*next).prev.set(std::ptr::null()) };
        }
        frame.promoted.set(true);
        self.private_len.set(self.private_len.get() - 1);
        self.offer_job(frame.job_ref());
        true
    }

    /// Moves every private frame to the deque, oldest first, without waking anyone: a
    /// `scope` calls it before it takes its mark, so that the frames of the joins
    /// around it lie below the mark. Promoted later by a heartbeat, the enclosing
    /// join's `b` landed above the mark, and the scope's wait ran it nested inside
    /// `a`, on `a`'s thread (found in review: a `b` locking what `a` holds across the
    /// scope deadlocked on its own thread).
    pub(crate) fn promote_private_frames_quietly(&self) {
        while self.promote_oldest_quietly() {}
    }

    /// Pushes a job for thieves, and wakes the workers waiting for a theft of ours.
    pub(crate) fn offer_job(&self, job: JobRef) {
        self.jobs.push(job.as_ptr());
        self.wake_leapfroggers();
    }

    /// After a push to the deque: wakes the workers that wait in `join` for a job this
    /// worker stole from them, so they take the new job instead of sleeping on.
    pub(super) fn wake_leapfroggers(&self) {
        // Pairs with the SeqCst registration in `leapfrog`: either the waiter's steal
        // after registering sees the job, or this load sees the registration.
        fence(SeqCst);
        if self.remote().leapfroggers.load(SeqCst) == 0 {
            return;
        }
        for (i, remote) in self.shared.remotes.iter().enumerate() {
            if i != self.index && remote.waiting_on.load(Relaxed) == self.index {
                remote.parker.unpark();
            }
        }
    }

    /// Waits in `join` until `latch` (of a job of ours that a thief took) is set,
    /// running only jobs stolen back from that thief (`b`'s own descendants; see
    /// `forkjoin`). Once the thief is known this worker registers as its leapfrogger,
    /// so the thief's heartbeat shares work with it (and wakes it) instead of leaving
    /// it idle until the thief is done.
    pub(crate) fn wait_for_thief(&self, latch: &OnceLatch, thief: &AtomicUsize) {
        let mut leapfrog = None;
        // Jobs pushed to our own deque while we help (a stolen scope job that spawns
        // more) lie above this mark: they are ours to run, since nobody else may be
        // free to (found in review: with the scope's owner in its own wait and this
        // worker waiting here, such a job ran only once sysmon sent a worker, or never
        // without one). Below the mark nothing is ours: this join's frame was
        // promoted, and every older one before it.
        let mark = self.jobs_mark();
        self.fork_join_wait(latch, || {
            if let Some(job) = self.pop_job_above(mark) {
                self.counters().jobs_run.bump(1);
                self.helping(job);
                return true;
            }
            let thief = thief.load(Relaxed);
            if thief == usize::MAX {
                return false;
            }
            if leapfrog.is_none() {
                // Before the steal below: see `wake_leapfroggers`.
                leapfrog = Some(self.leapfrog(thief));
            }
            self.help_thief(thief)
        });
    }

    /// Registers this worker as waiting in `join` for `thief` to finish a job it stole
    /// from us (see [`Core::wake_leapfroggers`]) until the guard drops.
    fn leapfrog(&self, thief: usize) -> Leapfrog<'_> {
        let prev = self.remote().waiting_on.swap(thief, SeqCst);
        self.shared.remotes[thief].leapfroggers.fetch_add(1, SeqCst);
        Leapfrog {
            core: self,
            thief,
            prev,
        }
    }

    /// Unlinks `frame` at the end of its `join`. Returns true if the caller may run the
    /// job itself: it was still private, or it was promoted and popped back before any
    /// thief took it.
    #[inline]
    pub(crate) fn pop_frame(&self, frame: &Frame) -> bool {
        if std::ptr::eq(self.outermost.get(), frame) {
            self.outermost_done();
        }
        if !frame.promoted.get() {
            debug_assert_eq!(self.private_newest.get(), frame as *const Frame);
            self.private_len.set(self.private_len.get() - 1);
            let prev = frame.prev.get();
            self.private_newest.set(prev);
            if prev.is_null() {
                self.private_oldest.set(std::ptr::null());
            } else {
                // SAFETY: private frames are live (see `push_frame`).
                unsafe { (*prev).next.set(std::ptr::null()) };
            }
            return true;
        }
        // Promoted frames leave the private list, oldest first; everything newer was
        // unlinked by nested joins, and everything older was promoted before it.
        debug_assert!(self.private_newest.get().is_null());
        // Above our frame the deque may hold jobs pushed while `a` ran (`scope` spawns
        // from inside `a`): they are ours, and nobody else may be left to run them, so
        // run them until our frame comes back, or the deque runs dry (a thief took it).
        loop {
            match self.pop_job() {
                Some(j) if j == frame.job_ref() => return true,
                Some(other) => crate::scheduler::job::execute(other),
                None => return false,
            }
        }
    }

    /// The deque position now; see [`Core::pop_job_above`].
    pub(crate) fn jobs_mark(&self) -> isize {
        self.jobs.bottom()
    }

    /// Pops a job only if it was pushed after `mark` was taken.
    pub(crate) fn pop_job_above(&self, mark: isize) -> Option<JobRef> {
        if self.jobs.bottom() <= mark {
            return None;
        }
        self.pop_job()
    }

    #[inline]
    pub(crate) fn pop_job(&self) -> Option<JobRef> {
        // SAFETY: this deque only holds pointers pushed by `push_job`.
        self.jobs.pop().map(|p| unsafe { JobRef::from_ptr(p) })
    }

    /// While waiting for a stolen job: steal one of its descendants from the thief and
    /// run it (leapfrogging). Returns whether it ran something.
    pub(super) fn help_thief(&self, thief: usize) -> bool {
        match self.steal_job_from(thief) {
            Some(job) => {
                self.counters().jobs_run.bump(1);
                self.helping(job);
                true
            }
            None => false,
        }
    }

    pub(super) fn steal_job_from(&self, victim: usize) -> Option<JobRef> {
        let stealer = &self.shared.remotes[victim].jobs;
        loop {
            match stealer.steal() {
                Steal::Success(p) => {
                    self.counters().jobs_stolen.bump(1);
                    // SAFETY: deques only hold pointers pushed by `push_job`.
                    return Some(unsafe { JobRef::from_ptr(p) });
                }
                Steal::Empty => return None,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
    }
}

/// A count of `Remote::fork_join_waits` undone when dropped (also by an unwind):
/// taken back (`false`) or given back (`true`).
struct Counted<'a>(&'a crate::base::AtomicUsize, bool);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        count(self.0, self.1);
    }
}

/// One more (`up`) or one fewer in a worker's `Remote::fork_join_waits`. Only the
/// worker itself writes its count, so a load and a store do (no locked instruction:
/// a `join` whose half was stolen counts twice per wait and twice per helped job,
/// and `fetch_add` there cost a small tree's sum some 15 %). The one reader, a
/// shutdown, looks again every millisecond and wants two looks that agree.
fn count(waits: &crate::base::AtomicUsize, up: bool) {
    let n = waits.load(Relaxed);
    waits.store(
        if up { n + 1 } else { n - 1 },
        std::sync::atomic::Ordering::Release,
    );
}

/// A worker's registration as a leapfrogger (see [`Core::leapfrog`]).
struct Leapfrog<'c> {
    core: &'c Core,
    thief: usize,
    prev: usize,
}

impl Drop for Leapfrog<'_> {
    fn drop(&mut self) {
        // Nested waits (helping runs joins whose halves get stolen too) restore the
        // outer wait's thief.
        self.core.remote().waiting_on.store(self.prev, Relaxed);
        self.core.shared.remotes[self.thief]
            .leapfroggers
            .fetch_sub(1, Relaxed);
    }
}
