//! Blocking waits on this worker: setting the loop stack a wait runs on aside, and the
//! dispatcher that resumes set-aside stacks and runs spare ones (the protocol is in
//! [`super::super::stacks`]).

use super::*;

impl Core {
    /// A signal for one blocked wait on this worker (see [`super::stacks`]).
    pub(crate) fn wait_signal(&self) -> StdArc<WaitSignal> {
        self.stacks.signal(&self.parker)
    }

    /// Returns once `signal` fired or the runtime shuts down (or spuriously), having
    /// kept the worker busy meanwhile: the loop stack this runs on is set aside until
    /// then, or, where it cannot be (the thread's own stack, a fiber's, or inside a
    /// fork-join join or scope), this wait dispatches: it resumes other set-aside
    /// stacks and runs a spare loop stack (see [`super::stacks`]).
    pub(crate) fn wait_for(&self, signal: &StdArc<WaitSignal>) {
        if !self.set_stack_aside(signal) {
            self.dispatch(Some(signal));
        }
    }

    /// Sets the loop stack this wait runs on aside until `signal` fires (or the stack
    /// is resumed for another reason), if it may be (see
    /// [`loop_stack_to_set_aside`](Self::loop_stack_to_set_aside)); false if not.
    fn set_stack_aside(&self, signal: &StdArc<WaitSignal>) -> bool {
        let Some(ctx) = self.loop_stack_to_set_aside() else {
            return false;
        };
        // SAFETY: the yielder lives at the base of the loop stack this thread runs on
        // (see `loop_stack_to_set_aside`).
        let yielder = unsafe { &*ctx.yielder };
        {
            let _switch = self.switch();
            // Whatever we are resumed with, the caller's loop looks at the runtime's
            // state itself.
            let _finish = yielder.suspend(Yielded::Waiting(signal.clone()));
        }
        ctx.base_mark.set(self.join_mark());
        true
    }

    /// The loop stack this thread runs on, if a wait made here may set it aside: it
    /// runs on one, and no fork-join `join`, `scope` or job began on it since it last
    /// started or resumed its loop. Otherwise a wait dispatches in place.
    fn loop_stack_to_set_aside(&self) -> Option<&LoopCtx> {
        let ctx = current::loop_stack().cast::<LoopCtx>();
        // SAFETY: a non-null loop stack is the context of the loop stack this thread
        // runs on now, which lives at that stack's base, below the caller's frame.
        unsafe { ctx.as_ref() }.filter(|ctx| ctx.base_mark.get() == self.join_mark())
    }

    /// A blocked wait whose future keeps waking itself (a loop of `yield_now`, a retry
    /// of an expired timed wait) lets this worker run something else first: it waits
    /// on `signal` as any wait does, and the signal fires once this worker's loop has
    /// run a task or a job, or has found nothing to run (see `run_until`). Without it
    /// such a wait re-polled at once for ever, and a fiber tied to this worker, or
    /// work in its LIFO slot, never ran. Best effort: the wait may also return
    /// spuriously (as `wait_for` may), before anything ran.
    pub(crate) fn yield_wait(&self, signal: &StdArc<WaitSignal>) {
        // A wake that came during the last poll is covered: the future is polled
        // again once the signal fires.
        signal.reset();
        let mut yielders = self.yielders.take();
        yielders.push(signal.clone());
        self.yielders.set(yielders);
        self.yielding.set(true);
        self.wait_for(signal);
    }

    /// Where a wait would keep this worker (its future keeps waking itself, or a timed
    /// wait expired without waiting): yields on the signal `signal` makes
    /// ([`yield_wait`](Self::yield_wait)) if something else is ready here
    /// ([`others_ready`](Self::others_ready)), or becomes ready as it fires what came
    /// due ([`fire_due_for_a_busy_wait`](Self::fire_due_for_a_busy_wait)); while the
    /// runtime shuts down, when no task runs any more, resumes a ready set-aside wait
    /// instead, which may be what the caller waits for (found in review: a drop hung on
    /// two self-waking waits that depended on each other), or else unwinds this
    /// worker's set-aside fibers, as [`wait_shutting_down`](Self::wait_shutting_down)
    /// does. Returns whether it yielded.
    pub(crate) fn yield_to_others(&self, signal: impl FnOnce() -> StdArc<WaitSignal>) -> bool {
        if self.shared.is_shutdown() {
            // As a shutting-down wait does: what it retries for may be held by a fiber
            // of this worker (found in review: a `try_lock` loop that yielded spun for
            // ever behind one), or wait for a timer (review: a set-aside sleep that
            // would end the retries, with nobody firing timers).
            if !self.shutdown_step() {
                self.shared.time.process();
            }
            false
        } else if self.others_ready() || self.fire_due_for_a_busy_wait() {
            self.yield_wait(&signal());
            true
        } else {
            false
        }
    }

    /// A wait that keeps this worker with nothing else ready fires what came due
    /// meanwhile: the timers, and every [`IO_CHECK_YIELDS`]th time the sockets. Busy
    /// workers fire them between tasks (`next_task_slow`, by a count of polls), and
    /// parked ones while they sleep; a worker whose only work is a wait that keeps
    /// waking itself does neither (found in review: a task's self-waking `weft::wait`,
    /// `yield_now` loop or loop of expired timed waits for a flag set after a 2 ms
    /// sleep never saw it, on one worker, or on two both so busy;
    /// `tests/review_s32.rs`). Called where such a wait finds nothing to yield to, and
    /// by the loop that finds nothing to run before it lets yielded waits go on.
    /// Returns whether that made a task or a set-aside wait ready here.
    pub(super) fn fire_due_for_a_busy_wait(&self) -> bool {
        let time = &self.shared.time;
        let mut fired = time.process() > 0;
        let n = self.busy_yields.get().wrapping_add(1);
        self.busy_yields.set(n);
        if n.is_multiple_of(IO_CHECK_YIELDS) && time.has_io_sources() {
            time.poll_io();
            fired = true;
        }
        fired && (self.stacks.ready().any() || self.has_ready_work())
    }

    /// The ready-wait budget's yield ([`yield_to_others`](Self::yield_to_others)),
    /// except where a wait would dispatch in place: inside a fork-join `join`, `scope`
    /// or job of its own (the loop stack it runs on cannot be set aside, or it runs on
    /// the thread's or a fiber's stack while this worker has a fork-join computation in
    /// progress). There the yield would run the worker's loop on top of it, and that
    /// loop may take a half of the same computation from the deque which then waits
    /// for the yielding half: buried under it, the yielding half can never go on (found
    /// as a rare hang of a rendezvous inside `join` under load; `tests/worker_yield.rs`).
    /// A waiting wait is safe there, being registered where its partner finds it; a
    /// yield is not. So a loop of ready waits inside a fork-join computation keeps its
    /// worker, as a loop of plain computation does. A wait on a loop stack it can set
    /// aside still yields, whatever computation lies buried below that stack (review:
    /// a task run above another task's blocked `join` half starved a fiber).
    pub(crate) fn budget_yield(&self) {
        if !self.in_fork_join() || self.loop_stack_to_set_aside().is_some() {
            self.yield_to_others(|| self.wait_signal());
        }
    }

    /// Whether a wait that yields would let something else run here: a task or fiber
    /// ready in this worker's queues, a set-aside wait that was woken, or another wait
    /// that yielded (waits that yield to each other take turns).
    pub(crate) fn others_ready(&self) -> bool {
        self.yielding.get() || self.stacks.ready().any() || self.has_ready_work()
    }

    /// Fires the signals of the waits that yielded; false if there were none.
    #[inline]
    pub(super) fn wake_yielders(&self) -> bool {
        if !self.yielding.get() {
            return false;
        }
        self.yielding.set(false);
        let mut yielders = self.yielders.take();
        // A wake only sets the signal's flags and unparks this worker: no code runs
        // that could reach `yielders` meanwhile.
        for signal in yielders.drain(..) {
            std::task::Wake::wake(signal);
        }
        self.yielders.set(yielders);
        true
    }

    /// The dispatcher (see [`super::stacks`]): resumes the set-aside stacks whose waits
    /// were woken; with `mine` (a wait that cannot set its stack aside) also runs a
    /// spare loop stack, until `mine` fires or the runtime shuts down.
    pub(super) fn dispatch(&self, mine: Option<&WaitSignal>) {
        let stacks = &self.stacks;
        loop {
            match stacks.look(mine) {
                Look::Mine => return,
                Look::Resume(stack) => {
                    self.resume_stack(stack);
                    continue;
                }
                Look::Nothing => {}
            }
            let Some(mine) = mine else {
                return;
            };
            if mine.is_woken() || self.shared.is_shutdown() {
                return;
            }
            if stacks.ready().any() {
                continue;
            }
            match stacks
                .take_spare()
                .map_or_else(|| self.new_loop_stack(), Ok)
            {
                Ok(stack) => self.resume_stack(stack),
                // No stack to be had (the memory map limit): help on this stack, which
                // nests the tasks it runs in this wait (say so, once).
                Err(e) => {
                    report_no_loop_stack(&e);
                    self.run_until(|| stacks.ready().any())
                }
            }
        }
    }

    /// Runs `stack` until it hands the thread back, and keeps it as it says.
    pub(super) fn resume_stack(&self, mut stack: LoopStack) {
        let result = {
            let _switch = self.switch();
            stack.resume(false)
        };
        match result {
            CoroutineResult::Yield(Yielded::Waiting(signal)) => {
                self.stacks.set_aside(stack, signal);
            }
            CoroutineResult::Yield(Yielded::Idle) => {
                if let Some(extra) = self.stacks.keep_spare(stack) {
                    self.retire_stack(extra);
                }
            }
            CoroutineResult::Return(()) => crate::stack::release(stack.into_stack()),
        }
    }

    /// Makes an idle loop stack finish, and gives its memory back.
    pub(super) fn retire_stack(&self, mut stack: LoopStack) {
        let result = {
            let _switch = self.switch();
            stack.resume(true)
        };
        debug_assert!(matches!(result, CoroutineResult::Return(())));
        if stack.done() {
            crate::stack::release(stack.into_stack());
        }
    }

    /// A new loop stack: the worker loop, until the dispatcher wants the thread back.
    pub(super) fn new_loop_stack(&self) -> Result<LoopStack, crate::stack::error::SpawnError> {
        crate::stack::overflow::install();
        let stack = crate::stack::acquire(loop_stack_size())?;
        let frame =
            crate::stack::overflow::Frame::loop_stack(stack.guard_range(), stack.usable_size());
        let core: *const Core = self;
        Ok(Coroutine::with_stack(
            stack,
            move |yielder: &Yielder<bool, Yielded>, finish: bool| {
                // SAFETY: a loop stack only runs on its core's thread, resumed by that
                // core's dispatcher, and `Core::run` finishes every loop stack before
                // the core is dropped.
                let core = unsafe { &*core };
                let ctx = LoopCtx {
                    yielder,
                    base_mark: Cell::new(core.join_mark()),
                    frame,
                };
                let mut finish = finish;
                while !finish {
                    current::set_loop_stack(
                        (&ctx as *const LoopCtx).cast(),
                        (&ctx.frame as *const crate::stack::overflow::Frame).cast(),
                    );
                    ctx.base_mark.set(core.join_mark());
                    core.run_until(|| core.stacks.ready().any());
                    current::set_loop_stack(std::ptr::null(), std::ptr::null());
                    finish = yielder.suspend(Yielded::Idle);
                }
            },
        ))
    }

    /// Shutdown: lets every set-aside wait see it, then goes on resuming those that are
    /// woken, unwinding the fibers set aside for this worker, running injected
    /// fork-join jobs and firing timers while it blocks, until no wait is set aside;
    /// and finishes the loop stacks, on this thread. A wait that is still pending sets
    /// its stack aside again (`wait_shutting_down`), so this is the one place where the
    /// thread blocks for them, on all of them at once.
    pub(super) fn finish_stacks(&self) {
        self.stacks.make_all_ready();
        while self.stacks.has_set_aside() {
            if !self.exit_step() {
                self.exit_block(|| false);
            }
        }
        for stack in self.stacks.take_spares() {
            self.retire_stack(stack);
        }
    }

    /// One step of this worker's exit while something may still wait on it: runs the
    /// fork-join jobs injected meanwhile (a set-aside wait may wait for one: found in
    /// review, a `join` made from a plain thread during the drop), unwinds the fibers
    /// set aside for it, or resumes one woken set-aside wait, the fibers first (the
    /// rule of `Shared::begin_shutdown`). False if none had anything to do.
    pub(super) fn exit_step(&self) -> bool {
        self.run_injected_jobs() || self.unwind_set_aside_fibers() || self.resume_a_ready_wait()
    }

    /// Blocks this worker's thread, firing timers, until `done()` or until
    /// [`exit_step`](Self::exit_step) (or `shutdown_step`) has something to do.
    pub(super) fn exit_block(&self, done: impl Fn() -> bool) {
        self.block_until(|| {
            done()
                || self.stacks.ready().any()
                || self.shared.has_set_aside(self.index)
                || self.shared.has_injected_jobs()
        });
    }

    /// A wait on this worker while the runtime shuts down. On a loop stack that may be
    /// set aside, it is set aside as at any other time: whoever resumed the stack (the
    /// worker's exit, `finish_stacks`, or another wait here) goes on, and blocks for
    /// all such waits at once. Resuming a pending wait nested on top of another and
    /// blocking there buried the outer one (found in review: two tasks waiting on one
    /// FIFO semaphore, the permit handed to the outer wait, hung the runtime's drop).
    /// A wait that cannot be set aside (on the thread's own stack, or inside a
    /// fork-join computation) neither sets its stack aside nor runs tasks (the loop has
    /// ended), but it resumes the set-aside waits that are ready, and fires timers
    /// while it blocks (`block_until`), so that waits depending on each other, or on a
    /// timer, all end (found in review: a chain of joins, or a sleep, in progress at
    /// runtime drop hung it). It also unwinds this worker's suspended fibers that
    /// shutdown set aside for it: a wait on the thread's own stack sits below
    /// `Core::run`'s exit, where they are unwound otherwise, and a fiber may hold what
    /// it waits for (a `Mutex` guard: found in review, a task in `lock_blocking` behind
    /// a suspended fiber hung the runtime's drop). Returns when `signal` fired, or
    /// after setting its stack aside, resuming one stack or unwinding fibers.
    pub(crate) fn wait_shutting_down(&self, signal: &StdArc<WaitSignal>) {
        if self.set_stack_aside(signal) || self.shutdown_step() {
            return;
        }
        self.exit_block(|| signal.is_woken());
    }

    /// What a wait that cannot end by itself does while the runtime shuts down: runs
    /// the fork-join jobs injected meanwhile, or else resumes a ready set-aside wait of
    /// this worker, or else unwinds the fibers set aside for it (any may be what the
    /// wait needs). Returns whether it did any.
    fn shutdown_step(&self) -> bool {
        self.run_injected_jobs() || self.resume_a_ready_wait() || self.unwind_set_aside_fibers()
    }

    /// What a fork-join wait (a `join` waiting for its thief, a `scope` for its jobs)
    /// does while the runtime shuts down: unwinds the fibers set aside for this worker.
    /// Dropped inside the job this worker waits for, the runtime cancels the other
    /// tasks on the dropping thread first, and a cancelled future's `Drop` may need
    /// one of those fibers unwound (a lock it holds across its wait); this worker
    /// leaves its loop, where it would unwind them, only after the wait (found in
    /// review: each waited for the other). Returns whether it did any. Called only
    /// inside a fork-join wait; the worker does not count as blocked in it while the
    /// fibers unwind (their destructors are user code: the worker was not waited for
    /// while it ran them, found in the second review).
    pub(super) fn fork_join_shutdown_step(&self) -> bool {
        self.shared.is_routed()
            && self.shared.has_set_aside(self.index)
            && self.unblocked(|| self.unwind_set_aside_fibers())
    }

    /// Runs the fork-join jobs injected into this worker's pool; false if there were
    /// none. While the runtime shuts down nobody else may run them until every worker
    /// has left, and a wait here may be waiting for one (found in review: a `join`
    /// made from a plain thread during the drop hung it, with the wait on a loop stack
    /// and with the wait on the thread's own stack).
    pub(super) fn run_injected_jobs(&self) -> bool {
        let mut ran = false;
        while let Some(job) = self.shared.pop_injected_job() {
            self.run_job(job);
            ran = true;
        }
        ran
    }

    /// Cancels the tasks shutdown set aside for this worker (its started fibers, which
    /// only this thread may unwind), as `Core::run` does at its exit, here inside a wait;
    /// with this thread's current task put away meanwhile, as for a resumed stack.
    fn unwind_set_aside_fibers(&self) -> bool {
        if !self.shared.has_set_aside(self.index) {
            return false;
        }
        let _switch = self.switch();
        self.shared.cancel_set_aside_now(self.index)
    }

    /// Resumes one set-aside wait of this worker that is ready, if any (while the
    /// runtime shuts down: see [`wait_shutting_down`](Self::wait_shutting_down)).
    pub(crate) fn resume_a_ready_wait(&self) -> bool {
        // Waits that yielded before the shutdown began are ready now: nothing else
        // will run here before them.
        self.wake_yielders();
        match self.stacks.look(None) {
            Look::Resume(stack) => {
                self.resume_stack(stack);
                true
            }
            Look::Mine | Look::Nothing => false,
        }
    }

    /// Saves what this thread runs (the current task and stacks, the stall reporter's
    /// task) while it switches to another loop stack; restores it when dropped, back on
    /// this one.
    fn switch(&self) -> Switch<'_> {
        Switch {
            running: self.remote().running_task.load(Relaxed),
            current: Some(current::take()),
            core: self,
        }
    }
}

/// See [`Core::switch`].
struct Switch<'a> {
    core: &'a Core,
    current: Option<current::Saved>,
    running: u64,
}

impl Drop for Switch<'_> {
    fn drop(&mut self) {
        if let Some(saved) = self.current.take() {
            current::restore(saved);
        }
        self.core.remote().running_task.store(self.running, Relaxed);
    }
}

/// Says once per process that waits run without loop stacks (see [`Core::dispatch`]).
#[cold]
fn report_no_loop_stack(e: &crate::stack::error::SpawnError) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "weft: no stack for a blocking wait to set its stack aside ({e}); until stacks \
             can be had again, such waits run other tasks on top of themselves and can \
             deadlock when they wait on each other"
        );
    });
}
