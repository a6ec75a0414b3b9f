//! Blocked waits on a worker set their stack aside instead of nesting.
//!
//! # The rule
//!
//! A blocking wait (`weft::wait`, `JoinHandle::join`, `block_on`) made by an async task
//! on a worker cannot suspend the task: its frames are on the stack the worker runs
//! on. Helping by running other tasks *on top of* those frames (what weft did first)
//! nests every helped task's poll inside the waiting one, so the waiting task can only
//! continue once everything above it has returned: task A waits for C, the worker
//! helps and runs B, B waits for a value A sends after its wait, and neither ever
//! returns; and 10,000 such waits overflow the stack.
//!
//! So a worker runs its loop on *loop stacks* (fiber stacks that run
//! [`Core::run_until`](super::worker::Core::run_until)), and a wait made on a loop
//! stack *suspends that stack* and gives the thread back to the dispatcher, which
//! carries on with another loop stack. The waiting task's frames stay where they are,
//! and continue when its waker fires and the dispatcher resumes that stack, whatever
//! the other stacks are doing: no wait ever sits on top of another. Each stack is
//! resumed only on its worker's thread (thread-locals it refers to stay valid).
//!
//! Who dispatches: the worker's own thread stack, which cannot be suspended. In
//! [`Core::run`](super::worker::Core::run) between tasks when a set-aside wait is
//! ready, and inside a wait made on that stack (or on a stack that may not be set
//! aside: see below) for as long as the wait lasts: it resumes the ready set-aside
//! stacks, and otherwise runs a spare loop stack until some wait of this worker is
//! woken.
//!
//! A stack is set aside only when no fork-join `join` or `scope` was entered on it
//! since it was resumed (their frames on the worker's deque must be undone in order,
//! as for fibers): a wait inside one dispatches in place instead, so its stack stays
//! busy until that wait ends. A fiber's own waits suspend the fiber (they never get
//! here), except inside such a join, where they dispatch too.
//!
//! # The wake handshake
//!
//! A set-aside stack is found through its wait's [`WaitSignal`]: `wake` sets `woken`
//! and, if the stack is already set aside, pushes its slot to the worker's ready list;
//! either way it sets `any` and unparks the worker. The dispatcher stores the slot in
//! the signal *then* reads `woken`, and pushes the slot itself if it finds the wait
//! woken. Both sides use SeqCst, so (store buffering) at least one of them sees the
//! other's write and the slot is pushed at least once; a duplicate or stale slot costs
//! one spurious resume, whose wait re-polls and sets its stack aside again. `any` is
//! read by every loop stack between tasks and while parked, so a woken wait's stack is
//! resumed as soon as the running loop stack finishes its current task. The
//! dispatcher clears `any` with a swap before it looks, so a wake that lands after the
//! look leaves it set.
//!
//! A dispatcher that runs for a wait of its own (on the thread's stack) looks at that
//! wait's signal again after the clear, before it resumes anything ([`Stacks::look`]):
//! its wake sets `any` too, and a stack resumed after a clear that took it would run
//! until the next `any` with the thread's own wait woken and left behind (found as a
//! rare hang of an async task's blocking send on a rendezvous channel). If it finds
//! the wait woken, it sets `any` again (the clear may have taken a set-aside wait's
//! wake as well) and returns. Checked by loom (`loom_wait_signal_*`).

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::Arc as StdArc;
use std::task::Wake;

use corosensei::{Coroutine, Yielder};

use crate::base::park::Parker;
use crate::base::{fence, Arc, AtomicBool, AtomicUsize, Mutex};
use crate::stack::Stack;

/// The slot of a wait whose stack is not set aside (it runs, or it dispatches).
const NO_SLOT: usize = usize::MAX;

/// Idle loop stacks kept for the next wait; more are given back to the stack pool.
pub(crate) const MAX_SPARE_STACKS: usize = 4;

/// What a worker's waits share: whether any was woken, and which set-aside ones.
pub(crate) struct Ready {
    any: AtomicBool,
    slots: Mutex<Vec<usize>>,
}

impl Ready {
    fn new() -> Self {
        Ready {
            any: AtomicBool::new(false),
            slots: Mutex::new(Vec::new()),
        }
    }

    /// Whether a wait of this worker was woken since the dispatcher last looked: the
    /// running loop stack then hands the thread back between two tasks.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.any.load(Acquire)
    }
}

/// Wakes one blocked wait on a worker (the waker of the future it polls).
pub(crate) struct WaitSignal {
    woken: AtomicBool,
    /// Where the wait's stack is set aside, or [`NO_SLOT`].
    slot: AtomicUsize,
    ready: StdArc<Ready>,
    parker: Arc<Parker>,
}

impl WaitSignal {
    /// Before each poll of the waited future: a wake from then on counts.
    ///
    /// A wake this clears must be one whose effects the next poll sees: the clear is a
    /// swap that reads from that wake (Acquire against its SeqCst swap), so what the
    /// waker published before waking happens before the poll. A plain store did not
    /// order the clear before the poll's reads (on x86 it sat in the store buffer while
    /// the poll read): a wake could come after the poll's read and before the store
    /// landed, be erased by it, and the wait was set aside un-woken for ever (found as a
    /// rare hang of a wait woken from another thread; `loom_wait_signal_reset_*`).
    /// Nothing is written when the signal is clear: a wake then stays.
    #[inline]
    pub(crate) fn reset(&self) {
        if self.woken.load(Relaxed) {
            self.woken.swap(false, Acquire);
        }
    }

    pub(crate) fn is_woken(&self) -> bool {
        self.woken.load(Acquire)
    }
}

impl Wake for WaitSignal {
    fn wake(self: StdArc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &StdArc<Self>) {
        if !self.woken.swap(true, SeqCst) {
            // Store buffering against `Stacks::set_aside` (see the module doc).
            fence(SeqCst);
            let slot = self.slot.load(SeqCst);
            if slot != NO_SLOT {
                self.ready.slots.lock().push(slot);
            }
            self.ready.any.store(true, SeqCst);
        }
        self.parker.unpark();
    }
}

/// What a dispatcher's [`look`](Stacks::look) found.
pub(crate) enum Look<S> {
    /// The wait the dispatcher runs for was woken: it returns.
    Mine,
    /// A set-aside stack whose wait was woken, taken out of its slot: to resume.
    Resume(S),
    /// Nothing ready.
    Nothing,
}

/// What a loop stack hands back to the dispatcher that resumed it.
pub(crate) enum Yielded {
    /// A wait on it is pending: set it aside until this signal fires.
    Waiting(StdArc<WaitSignal>),
    /// Its loop stopped between two tasks (a wait of this worker was woken, or the
    /// runtime shuts down): a spare now.
    Idle,
}

/// A stack running the worker loop. Resumed with `true` to make it finish.
pub(crate) type LoopStack = Coroutine<bool, Yielded, (), Stack>;

/// What a running loop stack keeps about itself, on itself (reached through
/// `task::current::loop_stack`).
pub(crate) struct LoopCtx {
    pub(crate) yielder: *const Yielder<bool, Yielded>,
    /// The worker's fork-join join mark when the stack was last resumed: a wait that
    /// sees another one is inside a join or scope and must not set the stack aside.
    pub(crate) base_mark: Cell<(usize, u32)>,
    /// What the overflow handler reports if a task overflows this stack.
    pub(crate) frame: crate::stack::overflow::Frame,
}

struct SetAside<S> {
    stack: S,
    signal: StdArc<WaitSignal>,
}

/// One worker's loop stacks: the set-aside ones by slot, and the spares. (Generic over
/// the stack only for the loom models, which set plain values aside.)
pub(crate) struct Stacks<S = LoopStack> {
    ready: StdArc<Ready>,
    set_aside: RefCell<Vec<Option<SetAside<S>>>>,
    free_slots: RefCell<Vec<usize>>,
    spare: RefCell<Vec<S>>,
}

impl<S> Stacks<S> {
    pub(crate) fn new() -> Self {
        Stacks {
            ready: StdArc::new(Ready::new()),
            set_aside: RefCell::new(Vec::new()),
            free_slots: RefCell::new(Vec::new()),
            spare: RefCell::new(Vec::new()),
        }
    }

    #[inline]
    pub(crate) fn ready(&self) -> &Ready {
        &self.ready
    }

    /// A signal for one wait on this worker, which wakes it through `parker`.
    pub(crate) fn signal(&self, parker: &Arc<Parker>) -> StdArc<WaitSignal> {
        StdArc::new(WaitSignal {
            woken: AtomicBool::new(false),
            slot: AtomicUsize::new(NO_SLOT),
            ready: self.ready.clone(),
            parker: parker.clone(),
        })
    }

    /// The dispatcher's look (see the module doc): what to do next for a dispatcher
    /// that waits for `mine` (none for the worker's loop between tasks).
    pub(crate) fn look(&self, mine: Option<&WaitSignal>) -> Look<S> {
        if mine.is_some_and(WaitSignal::is_woken) {
            return Look::Mine;
        }
        self.ready.any.swap(false, SeqCst);
        if let Some(mine) = mine {
            // The look again, after the clear (see the module doc). Store buffering
            // against `WaitSignal::wake_by_ref` (its swap, fence, then `any`), as in
            // `set_aside`: either this sees the wake, or its `any` lands after the
            // clear (`loom_wait_signal_own_wait_*`).
            fence(SeqCst);
            if mine.woken.load(SeqCst) {
                self.ready.any.store(true, SeqCst);
                return Look::Mine;
            }
        }
        match self.take_ready() {
            Some(stack) => Look::Resume(stack),
            None => Look::Nothing,
        }
    }

    /// Sets `stack` aside until `signal` fires (the dispatcher's half of the wake
    /// handshake).
    pub(crate) fn set_aside(&self, stack: S, signal: StdArc<WaitSignal>) {
        let slot = self.free_slots.borrow_mut().pop().unwrap_or_else(|| {
            let mut v = self.set_aside.borrow_mut();
            v.push(None);
            v.len() - 1
        });
        signal.slot.store(slot, SeqCst);
        // Store buffering against `WaitSignal::wake_by_ref` (see the module doc).
        fence(SeqCst);
        let woken = signal.woken.load(SeqCst);
        self.set_aside.borrow_mut()[slot] = Some(SetAside { stack, signal });
        if woken {
            self.ready.slots.lock().push(slot);
        }
    }

    /// One set-aside stack whose wait was woken, taken out of its slot. When more are
    /// ready, `any` is set again: the stack resumed now hands the thread back as soon as
    /// its task's poll returns, so that none waits behind it for ever.
    fn take_ready(&self) -> Option<S> {
        let mut slots = self.ready.slots.lock();
        while let Some(slot) = slots.pop() {
            let mut v = self.set_aside.borrow_mut();
            let Some(entry) = v.get_mut(slot) else {
                continue;
            };
            // A stale or duplicate slot: empty now, or a wait that is not woken.
            if entry.as_ref().is_some_and(|e| e.signal.is_woken()) {
                let e = entry.take().expect("checked above");
                e.signal.slot.store(NO_SLOT, SeqCst);
                self.free_slots.borrow_mut().push(slot);
                if !slots.is_empty() {
                    self.ready.any.store(true, SeqCst);
                }
                return Some(e.stack);
            }
        }
        None
    }

    /// Marks every set-aside stack ready, woken or not (shutdown: each wait then looks
    /// at its future again); false if none is set aside.
    pub(crate) fn make_all_ready(&self) -> bool {
        let v = self.set_aside.borrow();
        let mut slots = self.ready.slots.lock();
        for (slot, e) in v.iter().enumerate() {
            if let Some(e) = e {
                e.signal.woken.store(true, SeqCst);
                slots.push(slot);
            }
        }
        let any = !slots.is_empty();
        if any {
            self.ready.any.store(true, SeqCst);
        }
        any
    }

    /// Whether any wait is set aside (a blocked task lives on one of its stacks).
    pub(crate) fn has_set_aside(&self) -> bool {
        self.set_aside.borrow().iter().any(Option::is_some)
    }

    pub(crate) fn take_spare(&self) -> Option<S> {
        self.spare.borrow_mut().pop()
    }

    /// Keeps an idle loop stack, or returns it when enough are kept.
    pub(crate) fn keep_spare(&self, stack: S) -> Option<S> {
        let mut spare = self.spare.borrow_mut();
        if spare.len() < MAX_SPARE_STACKS {
            spare.push(stack);
            None
        } else {
            Some(stack)
        }
    }

    pub(crate) fn take_spares(&self) -> Vec<S> {
        std::mem::take(&mut *self.spare.borrow_mut())
    }
}

impl<S> Drop for Stacks<S> {
    /// `Core::run` finishes every loop stack; any left here belong to a worker that
    /// did not get there (its thread is unwinding). Unwinding a stack would run its
    /// frames' destructors from here, through the task harness that catches panics:
    /// leak them instead.
    fn drop(&mut self) {
        for entry in self.set_aside.get_mut().drain(..).flatten() {
            std::mem::forget(entry.stack);
        }
        for stack in self.spare.get_mut().drain(..) {
            std::mem::forget(stack);
        }
    }
}
