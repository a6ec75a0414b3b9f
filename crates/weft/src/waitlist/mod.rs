//! Wait nodes and wait lists: the one mechanism under every blocking operation of
//! weft's channels (and of the sync primitives built beside them).
//!
//! A blocking operation that cannot complete puts a [`Node`] on the wait list of the
//! object it waits on (a channel's senders or receivers), under that object's lock.
//! That is the commit point (spec 003, "Parking"): from then on whoever changes the
//! object's state under the same lock finds the node, does the operation for it (hands
//! it a value, takes its value, or tells it the object closed), removes it from the
//! list, stores the *reason* in the node and only then wakes it, after the lock is
//! released ([`WakeBatch`]).
//!
//! The waiter is a future: an async task awaits it, a fiber or thread runs it through
//! `weft::wait`. Each poll reads the reason first; a node still marked
//! [`Reason::Waiting`] is, under the lock, either still on its list (nothing happened
//! yet: a spurious wake, or none at all) or *reserved* by a partner that has promised
//! to complete it (a `select` that chose to send to it). Nothing between those states
//! can be missed: every transition happens under the one lock, and the reason is
//! stored with `Release` before the waker runs, so a waiter that reads it with
//! `Acquire` sees everything the waker did to the node.
//!
//! Dropping a waiter (a future cancelled by a `select!`, a fiber unwound at its wait,
//! a timeout) takes the lock and takes the node off its list; a value already handed to
//! it is given back to the object by the owner (see `chan::core`), so none is lost.
//!
//! `select` waits on several lists at once: its nodes share a [`Group`], and whoever
//! wants to complete one of them must first win the group (a CAS from "none" to the
//! node's index), so exactly one operation of a select completes.

use std::marker::PhantomPinned;
use std::mem::ManuallyDrop;
use std::ptr;
use std::task::Waker;

pub(crate) use crate::task::diag::WaitOn;
pub(crate) use crate::task::waker::Prepared;

use crate::base::{AtomicUsize, UnsafeCell};
use crate::task::TaskRef;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// Why a waiter was woken: stored in its node before the wake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Reason {
    /// Not woken yet (or woken spuriously).
    Waiting = 0,
    /// The operation completed for the waiter: a value was handed to it, its value was
    /// taken, or (for a `select` send) room or a partner was reserved for it.
    Data = 1,
    /// A `select` this node belongs to completed through another node.
    Cancel = 2,
    /// The object closed while the node waited.
    Close = 3,
    /// The object's state changed: try the operation again.
    Signal = 4,
}

impl Reason {
    fn from_usize(v: usize) -> Reason {
        match v {
            0 => Reason::Waiting,
            1 => Reason::Data,
            2 => Reason::Cancel,
            3 => Reason::Close,
            _ => Reason::Signal,
        }
    }
}

/// The shared state of one `select`'s nodes: which operation won.
#[derive(Debug)]
pub(crate) struct Group {
    selected: AtomicUsize,
}

const NONE: usize = usize::MAX;
const ABORTED: usize = usize::MAX - 1;

impl Group {
    pub(crate) fn new() -> Group {
        Group {
            selected: AtomicUsize::new(NONE),
        }
    }

    /// Claims the group for operation `index`; `false` when another operation (or the
    /// owner's abort) got there first. The winner is chosen before anyone is woken
    /// (spec 003, select).
    pub(crate) fn try_win(&self, index: usize) -> bool {
        self.selected
            .compare_exchange(NONE, index, AcqRel, Acquire)
            .is_ok()
    }

    /// The owner gives up waiting (a timeout, or it saw an operation become ready while
    /// registering): `Ok` if nobody won, else the index that did.
    pub(crate) fn abort(&self) -> Result<(), usize> {
        match self
            .selected
            .compare_exchange(NONE, ABORTED, AcqRel, Acquire)
        {
            Ok(_) => Ok(()),
            Err(i) => Err(i),
        }
    }

    /// Whether nobody has won or aborted the group yet.
    pub(crate) fn is_open(&self) -> bool {
        self.selected.load(Acquire) == NONE
    }

    /// The winning index, if an operation won.
    pub(crate) fn winner(&self) -> Option<usize> {
        match self.selected.load(Acquire) {
            NONE | ABORTED => None,
            i => Some(i),
        }
    }

    /// Makes the group usable for another round (only by its owner, with none of its
    /// nodes on any list).
    pub(crate) fn reset(&self) {
        self.selected.store(NONE, Relaxed);
    }
}

/// What a waiting node wants from the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Completes the operation: a receiver takes a value, a sender gives one.
    Op,
    /// A `select` operation: completes like `Op` once it wins its group; a send one has
    /// no value yet (the value comes when the selected operation is performed).
    Select,
    /// Only wants to hear that the operation became possible (`Select::ready`): woken
    /// with [`Reason::Signal`], never handed anything.
    Observe,
}

/// The fields only touched under the lock of the object the node waits on.
struct Links<T> {
    prev: *const Node<T>,
    next: *const Node<T>,
    linked: bool,
    waker: Option<Waker>,
    /// A reservation made for this node by a partner (see `chan::core`).
    partner: *const Node<T>,
    /// For a selected send: a slot of the buffer is held for it.
    reserved: bool,
    /// For a rendezvous send or receive: the task that waits, which the partner that
    /// completes the node shields (see [`Node::commit`]).
    task: Option<TaskRef>,
    /// Whether [`Node::commit`] raised `task`'s shield depth (the owner lowers it).
    shielded: bool,
}

/// What [`Node::end_commit`] hands back: the task a rendezvous wait recorded, and
/// whether a partner's [`Node::commit`] raised its shield. Dropped without
/// [`end`](Self::end) it only releases the task reference (a withdrawn wait, where
/// nothing was committed).
pub(crate) struct Commitment {
    task: Option<TaskRef>,
    shielded: bool,
}

impl Commitment {
    /// Lowers the shield the partner's commit raised, if it did: a cancellation it
    /// deferred takes effect at the task's next wait. Outside the lock.
    pub(crate) fn end(self) {
        if let (Some(task), true) = (&self.task, self.shielded) {
            task.unshield();
        }
    }
}

/// One waiter: lives in the waiting future (pinned there) or in a `select`'s box.
///
/// The node's address is on a list while it waits, so it must not move or be freed
/// until it is off every list: the futures that own nodes are `!Unpin` and take their
/// node off in `Drop`.
pub(crate) struct Node<T> {
    reason: AtomicUsize,
    links: UnsafeCell<Links<T>>,
    /// The value handed over: a sender's value waiting to be taken, or the value a
    /// sender handed to this receiver.
    slot: UnsafeCell<Option<T>>,
    kind: Kind,
    group: *const Group,
    index: usize,
    _pin: PhantomPinned,
}

// SAFETY: the raw pointers are list links and a group pointer, only followed under the
// owning object's lock (links) or while the group's owner keeps it alive (it outlives
// the node's membership in any list); the node moves values of `T` between threads, so
// it is `Send`/`Sync` when `T: Send`.
unsafe impl<T: Send> Send for Node<T> {}
// SAFETY: as above; shared access goes through the lock or the atomic reason.
unsafe impl<T: Send> Sync for Node<T> {}

impl<T> Node<T> {
    /// A node of a plain operation.
    #[inline]
    pub(crate) fn new() -> Node<T> {
        Node::with(Kind::Op, ptr::null(), 0)
    }

    /// A plain operation's node that holds `value` in its slot (a send's, made with
    /// its value in place).
    #[inline]
    pub(crate) fn holding(value: T) -> Node<T> {
        Node::make(Kind::Op, ptr::null(), 0, Some(value))
    }

    /// A node of operation `index` of the select whose group is `group` (which must
    /// outlive the node's time on any list).
    #[inline]
    pub(crate) fn with(kind: Kind, group: *const Group, index: usize) -> Node<T> {
        Node::make(kind, group, index, None)
    }

    #[inline]
    fn make(kind: Kind, group: *const Group, index: usize, slot: Option<T>) -> Node<T> {
        Node {
            reason: AtomicUsize::new(Reason::Waiting as usize),
            links: UnsafeCell::new(Links {
                prev: ptr::null(),
                next: ptr::null(),
                linked: false,
                waker: None,
                partner: ptr::null(),
                reserved: false,
                task: None,
                shielded: false,
            }),
            slot: UnsafeCell::new(slot),
            kind,
            group,
            index,
            _pin: PhantomPinned,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn group(&self) -> *const Group {
        self.group
    }

    /// The reason it was woken (`Acquire`: what the waker did to the node is visible).
    pub(crate) fn reason(&self) -> Reason {
        Reason::from_usize(self.reason.load(Acquire))
    }

    /// Ready for another wait (by its owner, off every list and unreserved).
    pub(crate) fn reset(&self) {
        self.reason.store(Reason::Waiting as usize, Relaxed);
    }

    /// Claims this node for a completion: a plain node always, a select node only if
    /// its group is won for it. `false` means the node belongs to a select that
    /// completed elsewhere (or gave up): skip it.
    pub(crate) fn claim(&self) -> bool {
        if self.group.is_null() {
            return true;
        }
        // SAFETY: a select node's group outlives its time on any list, and the caller
        // found the node on a list under the lock.
        unsafe { (*self.group).try_win(self.index) }
    }

    /// Whether this node's select could still be won (plain nodes always can).
    pub(crate) fn is_open(&self) -> bool {
        // SAFETY: as in `claim`.
        self.group.is_null() || unsafe { (*self.group).is_open() }
    }

    /// Whether `self` and `group` belong to the same select.
    pub(crate) fn same_group(&self, group: *const Group) -> bool {
        !group.is_null() && ptr::eq(self.group, group)
    }

    /// Stores `waker` unless the stored one wakes the same task. The waker it replaces
    /// is handed to `wakes`, to be dropped once the lock is released: a waker's `Drop`
    /// may run user code (drop the last `Sender` of this very channel). Its `clone` is
    /// user code too, which [`Prepared`] made before the lock (a task's waker aside).
    ///
    /// # Safety
    /// The caller holds the lock of the object this node waits on (or owns the node
    /// and it is on no list and reserved by nobody).
    ///
    /// `on` is what the waiting task is recorded as waiting on (diagnostics: see
    /// `task::diag`).
    pub(crate) unsafe fn set_waker(
        &self,
        waker: &mut Prepared<'_>,
        on: WaitOn,
        wakes: &mut WakeBatch,
    ) {
        crate::task::diag::note_wait(waker.get(), on);
        let old = self.links.with_mut(|l| {
            // SAFETY: exclusive under the lock (the contract).
            waker.store(unsafe { &mut (*l).waker })
        });
        if let Some(old) = old {
            wakes.retire(old);
        }
    }

    /// # Safety
    /// As [`Node::set_waker`].
    pub(crate) unsafe fn partner(&self) -> *const Node<T> {
        // SAFETY: the contract.
        self.links.with(|l| unsafe { (*l).partner })
    }

    /// # Safety
    /// As [`Node::set_waker`].
    pub(crate) unsafe fn set_partner(&self, partner: *const Node<T>) {
        // SAFETY: the contract.
        self.links.with_mut(|l| unsafe { (*l).partner = partner })
    }

    /// # Safety
    /// As [`Node::set_waker`].
    pub(crate) unsafe fn is_reserved(&self) -> bool {
        // SAFETY: the contract.
        self.links.with(|l| unsafe { (*l).reserved })
    }

    /// # Safety
    /// As [`Node::set_waker`].
    pub(crate) unsafe fn set_reserved(&self, reserved: bool) {
        // SAFETY: the contract.
        self.links.with_mut(|l| unsafe { (*l).reserved = reserved })
    }

    /// # Safety
    /// The caller holds the lock; or owns the node and has seen a reason other than
    /// `Waiting` (whoever stored it no longer touches the slot); or owns a node that is
    /// on no list (never registered, or taken off under the lock since; nobody else
    /// holds a pointer to it then).
    pub(crate) unsafe fn take_slot(&self) -> Option<T> {
        // SAFETY: the contract.
        self.slot.with_mut(|s| unsafe { (*s).take() })
    }

    /// Runs `f` on the slot in place (a large value is not copied out and back).
    ///
    /// # Safety
    /// As [`Node::take_slot`].
    pub(crate) unsafe fn with_slot<R>(&self, f: impl FnOnce(&mut Option<T>) -> R) -> R {
        // SAFETY: the contract.
        self.slot.with_mut(|s| f(unsafe { &mut *s }))
    }

    /// # Safety
    /// As [`Node::take_slot`].
    pub(crate) unsafe fn put_slot(&self, value: T) {
        // SAFETY: the contract.
        self.slot.with_mut(|s| unsafe { *s = Some(value) })
    }

    /// # Safety
    /// As [`Node::take_slot`].
    pub(crate) unsafe fn has_value(&self) -> bool {
        // SAFETY: the contract.
        self.slot.with(|s| unsafe { (*s).is_some() })
    }

    /// Records the task that waits on this node (a rendezvous send), for
    /// [`commit`](Self::commit). Returns the one it replaces, to be dropped once the
    /// lock is released.
    ///
    /// # Safety
    /// As [`Node::set_waker`].
    pub(crate) unsafe fn set_task(&self, task: Option<TaskRef>) -> Option<TaskRef> {
        // SAFETY: the contract.
        self.links
            .with_mut(|l| std::mem::replace(unsafe { &mut (*l).task }, task))
    }

    /// Whether [`commit`](Self::commit) would accept this node now (it changes
    /// nothing): readiness checks must agree with it, or a select that sees a waiting
    /// partner it cannot take retries for ever.
    ///
    /// # Safety
    /// As [`Node::commit`].
    pub(crate) unsafe fn may_commit(&self) -> bool {
        self.links.with(|l| {
            // SAFETY: the contract.
            unsafe { &(*l).task }
                .as_ref()
                .is_none_or(TaskRef::may_commit)
        })
    }

    /// Whether the task recorded by [`set_task`](Self::set_task) is `task` (both
    /// `None` counts as the same).
    ///
    /// # Safety
    /// As [`Node::set_waker`].
    pub(crate) unsafe fn task_is(&self, task: Option<&TaskRef>) -> bool {
        self.links.with(|l| {
            // SAFETY: the contract.
            match unsafe { &(*l).task } {
                None => task.is_none(),
                Some(t) => t.same(task),
            }
        })
    }

    /// A partner is about to complete this node's operation (a receiver takes a
    /// waiting send's value, a sender hands its value to a waiting receive): the point
    /// of no return of a rendezvous (spec 003, "Unbuffered (rendezvous) channels"). The
    /// waiting
    /// task's cancellation is checked here, and only here: if it is already effective
    /// the partner must leave the node alone (`false`; the task will be dropped at its
    /// next poll and its node withdrawn, its value never delivered); otherwise the
    /// task's shield depth is raised in the same CAS, so a cancellation that arrives
    /// from now on waits until the owner has seen the completion (its send returns
    /// `Ok`, its receive the value) and lowered the shield again ([`end_commit`](Self::end_commit)). A node
    /// with no task (a plain thread's) always commits.
    ///
    /// # Safety
    /// The caller holds the lock of the object the node waits on, and the node is on
    /// its list.
    pub(crate) unsafe fn commit(&self) -> bool {
        self.links.with_mut(|l| {
            // SAFETY: the contract: exclusive under the lock.
            let l = unsafe { &mut *l };
            match &l.task {
                None => true,
                Some(t) => match t.shield_unless_cancelled() {
                    None => false,
                    Some(raised) => {
                        l.shielded = raised;
                        true
                    }
                },
            }
        })
    }

    /// The owner is done with a completed (or withdrawn) wait: the task recorded by
    /// [`set_task`](Self::set_task), and whether [`commit`](Self::commit) shielded it.
    /// The caller calls [`Commitment::end`] once the operation's result is its own,
    /// outside the lock.
    ///
    /// # Safety
    /// As [`Node::take_slot`].
    pub(crate) unsafe fn end_commit(&self) -> Commitment {
        self.links.with_mut(|l| {
            // SAFETY: the contract.
            let l = unsafe { &mut *l };
            Commitment {
                task: l.task.take(),
                shielded: std::mem::take(&mut l.shielded),
            }
        })
    }

    /// Stores `reason` and queues the node's waker on `wakes`: the last touch of the
    /// node by anyone but its owner.
    ///
    /// # Safety
    /// The caller holds the object's lock, and the node is off every list (or reserved
    /// by the caller).
    pub(crate) unsafe fn notify(&self, reason: Reason, wakes: &mut WakeBatch) {
        // SAFETY: the contract: exclusive under the lock.
        let waker = self.links.with_mut(|l| unsafe { (*l).waker.take() });
        self.reason.store(reason as usize, Release);
        if let Some(w) = waker {
            wakes.push(w);
        }
    }
}

/// A FIFO list of waiting nodes. It holds raw addresses: every method is called under
/// the lock of the object that owns the list, and the nodes' owners keep them pinned
/// until they are off it.
pub(crate) struct WaitList<T> {
    head: *const Node<T>,
    tail: *const Node<T>,
}

// SAFETY: the list is only touched under its owner's lock; the nodes it points to are
// `Send`/`Sync` for `T: Send`.
unsafe impl<T: Send> Send for WaitList<T> {}

impl<T> Default for WaitList<T> {
    fn default() -> Self {
        WaitList {
            head: ptr::null(),
            tail: ptr::null(),
        }
    }
}

impl<T> WaitList<T> {
    /// No node waits (the caller holds the owner's lock, which is what makes the
    /// answer current).
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// Appends `node` (the commit point of a wait).
    ///
    /// # Safety
    /// `node` is on no list, stays at its address until it is removed, and the
    /// caller holds the lock of the object that owns this list.
    pub(crate) unsafe fn push_back(&mut self, node: &Node<T>) {
        let p: *const Node<T> = node;
        let tail = self.tail;
        node.links.with_mut(|l| {
            // SAFETY: under the lock (the contract).
            let l = unsafe { &mut *l };
            debug_assert!(!l.linked);
            l.prev = tail;
            l.next = ptr::null();
            l.linked = true;
        });
        if tail.is_null() {
            self.head = p;
        } else {
            // SAFETY: `tail` is on this list, so alive; under the lock.
            unsafe { (*tail).links.with_mut(|l| (*l).next = p) };
        }
        self.tail = p;
    }

    /// Puts `node` back at the head (a waiter taken off that turned out unable to
    /// proceed keeps its place).
    ///
    /// # Safety
    /// As for [`WaitList::push_back`].
    pub(crate) unsafe fn push_front(&mut self, node: &Node<T>) {
        let p: *const Node<T> = node;
        let head = self.head;
        node.links.with_mut(|l| {
            // SAFETY: under the lock (the contract).
            let l = unsafe { &mut *l };
            debug_assert!(!l.linked);
            l.prev = ptr::null();
            l.next = head;
            l.linked = true;
        });
        if head.is_null() {
            self.tail = p;
        } else {
            // SAFETY: `head` is on this list, so alive; under the lock.
            unsafe { (*head).links.with_mut(|l| (*l).prev = p) };
        }
        self.head = p;
    }

    /// Takes `node` off the list; `false` if it was not on it.
    ///
    /// # Safety
    /// The caller holds the lock, and `node` is on this list or on none.
    pub(crate) unsafe fn remove(&mut self, node: &Node<T>) -> bool {
        // SAFETY: under the lock (the contract).
        let (linked, prev, next) = node
            .links
            .with(|l| unsafe { ((*l).linked, (*l).prev, (*l).next) });
        if !linked {
            return false;
        }
        if prev.is_null() {
            self.head = next;
        } else {
            // SAFETY: neighbours on this list are alive; under the lock.
            unsafe { (*prev).links.with_mut(|l| (*l).next = next) };
        }
        if next.is_null() {
            self.tail = prev;
        } else {
            // SAFETY: as above.
            unsafe { (*next).links.with_mut(|l| (*l).prev = prev) };
        }
        node.links.with_mut(|l| {
            // SAFETY: under the lock.
            let l = unsafe { &mut *l };
            l.linked = false;
            l.prev = ptr::null();
            l.next = ptr::null();
        });
        true
    }

    /// The first node, front to back, for which `pick` returns true, removed from the
    /// list. `pick` sees nodes still on the list and may claim them.
    ///
    /// # Safety
    /// The caller holds the lock.
    pub(crate) unsafe fn take_first(
        &mut self,
        mut pick: impl FnMut(&Node<T>) -> bool,
    ) -> Option<*const Node<T>> {
        let mut cur = self.head;
        while !cur.is_null() {
            // SAFETY: nodes on the list are alive while the lock is held.
            let node = unsafe { &*cur };
            // SAFETY: under the lock.
            let next = node.links.with(|l| unsafe { (*l).next });
            if pick(node) {
                // SAFETY: it is on this list; under the lock.
                unsafe { self.remove(node) };
                return Some(cur);
            }
            cur = next;
        }
        None
    }

    /// Whether some node satisfies `pred` (nothing is removed).
    ///
    /// # Safety
    /// The caller holds the lock.
    pub(crate) unsafe fn any(&self, mut pred: impl FnMut(&Node<T>) -> bool) -> bool {
        let mut cur = self.head;
        while !cur.is_null() {
            // SAFETY: nodes on the list are alive while the lock is held.
            let node = unsafe { &*cur };
            if pred(node) {
                return true;
            }
            // SAFETY: under the lock.
            cur = node.links.with(|l| unsafe { (*l).next });
        }
        false
    }

    /// Removes every node and hands each to `f` (the close path).
    ///
    /// # Safety
    /// The caller holds the lock.
    pub(crate) unsafe fn drain(&mut self, mut f: impl FnMut(&Node<T>)) {
        // SAFETY: under the lock (the contract), for every call below.
        while let Some(p) = unsafe { self.take_first(|_| true) } {
            f(unsafe { &*p });
        }
    }
}

/// Wakers collected under a lock, woken once it is released (spec 003: a deferred wake
/// list flushes only at lock depth 0, so a woken waiter never finds the lock still
/// held by its waker, and no waker runs user code under a weft lock).
///
/// Nearly every batch ends empty (each fast path that made one), so its drop must cost
/// a few compares: what does not fit inline is boxed (one pointer to look at, not two
/// `Vec`s), and the fields are `ManuallyDrop`, their drop glue (a call per batch, some
/// 50 instructions) skipped: `Drop` wakes and clears every one of them, so there is
/// never anything left to drop.
pub(crate) struct WakeBatch {
    inline: ManuallyDrop<[Option<Waker>; 4]>,
    len: usize,
    /// The first replaced waker, dropped (not woken) with the batch.
    retired: ManuallyDrop<Option<Waker>>,
    /// What does not fit inline.
    spill: ManuallyDrop<Option<Box<Spill>>>,
}

/// A batch's wakers beyond the inline ones.
#[derive(Default)]
struct Spill {
    more: Vec<Waker>,
    retired: Vec<Waker>,
}

impl Default for WakeBatch {
    fn default() -> Self {
        WakeBatch::new()
    }
}

impl WakeBatch {
    pub(crate) const fn new() -> WakeBatch {
        WakeBatch {
            inline: ManuallyDrop::new([None, None, None, None]),
            len: 0,
            retired: ManuallyDrop::new(None),
            spill: ManuallyDrop::new(None),
        }
    }

    pub(crate) fn push(&mut self, waker: Waker) {
        if self.len < self.inline.len() {
            self.inline[self.len] = Some(waker);
            self.len += 1;
        } else {
            self.spill.get_or_insert_default().more.push(waker);
        }
    }

    /// Keeps a replaced waker, to be dropped when the batch is, after the lock.
    pub(crate) fn retire(&mut self, waker: Waker) {
        match *self.retired {
            None => *self.retired = Some(waker),
            Some(_) => self.spill.get_or_insert_default().retired.push(waker),
        }
    }

    /// Wakes everything collected. Called with no weft wait-list lock held.
    ///
    /// A waker that panics does not keep the ones after it from waking (they were
    /// taken off their lists: nobody else would wake them, and a close's batch left its
    /// other waiters asleep for good): each wake runs under `catch_unwind`, and the
    /// first panic resumes once all have run.
    #[inline]
    pub(crate) fn flush(&mut self) {
        if self.len == 0 && self.spill.is_none() && self.retired.is_none() {
            return;
        }
        self.flush_some();
    }

    /// [`flush`](Self::flush) of a batch that holds something: out of line, so that
    /// the many batches that end empty (every fast path that made one) cost a few
    /// compares at their drop.
    #[inline(never)]
    fn flush_some(&mut self) {
        depth::check_flush();
        let mut panic = None;
        let mut wake = |w: Waker| {
            // The waker is consumed by the call: nothing it touched is looked at again.
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake())) {
                match panic {
                    None => panic = Some(p),
                    // Later ones go as `drop_each`'s do.
                    Some(_) => crate::task::waker::drop_payload(p),
                }
            }
        };
        for w in self.inline[..self.len].iter_mut() {
            if let Some(w) = w.take() {
                wake(w);
            }
        }
        self.len = 0;
        let mut spill = self.spill.take();
        if let Some(sp) = &mut spill {
            for w in sp.more.drain(..) {
                wake(w);
            }
        }
        // The replaced wakers last, once every wake is made.
        *self.retired = None;
        drop(spill);
        if let Some(p) = panic {
            if std::thread::panicking() {
                // Flushed by a drop during an unwind (a guard of a panicking thread, or
                // of a fiber being cancelled, hands its lock on): a second panic would
                // abort the process (found in review, `tests/review_s42_locks.rs`). The
                // unwind goes on; the hook printed the waker's panic.
                crate::task::waker::drop_payload(p);
            } else {
                std::panic::resume_unwind(p);
            }
        }
    }
}

impl Drop for WakeBatch {
    #[inline]
    fn drop(&mut self) {
        self.flush();
    }
}

pub(crate) mod depth;
pub(crate) use depth::{Lock, LockGuard};
mod set;
pub(crate) use set::{Armed, WakerSet};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::WakeBatch;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    /// Counts its wakes; panics on wake if asked to.
    struct Probe {
        wakes: AtomicUsize,
        panics: bool,
    }

    impl Wake for Probe {
        fn wake(self: Arc<Self>) {
            self.wakes.fetch_add(1, SeqCst);
            assert!(!self.panics, "a waker that panics");
        }
    }

    fn probe(panics: bool) -> Arc<Probe> {
        Arc::new(Probe {
            wakes: AtomicUsize::new(0),
            panics,
        })
    }

    /// Past the inline room: every pushed waker wakes once, every retired one is
    /// dropped unwoken, and no waker is left behind (each probe's count back to 1).
    #[test]
    fn a_batch_beyond_its_inline_room_wakes_and_drops_everything() {
        let pushed: Vec<_> = (0..7).map(|_| probe(false)).collect();
        let retired: Vec<_> = (0..3).map(|_| probe(false)).collect();
        let mut batch = WakeBatch::new();
        for p in &pushed {
            batch.push(Waker::from(p.clone()));
        }
        for p in &retired {
            batch.retire(Waker::from(p.clone()));
        }
        drop(batch);
        for p in &pushed {
            assert_eq!(p.wakes.load(SeqCst), 1);
            assert_eq!(Arc::strong_count(p), 1, "a woken waker kept");
        }
        for p in &retired {
            assert_eq!(p.wakes.load(SeqCst), 0, "a replaced waker woken");
            assert_eq!(Arc::strong_count(p), 1, "a replaced waker kept");
        }
    }

    /// A waker that panics (inline or spilled) leaves the others waking; the panic
    /// comes out once all have woken, and nothing is kept.
    #[test]
    fn a_panicking_waker_leaves_the_rest_of_the_batch_waking() {
        for bad in [1, 5] {
            let probes: Vec<_> = (0..7).map(|i| probe(i == bad)).collect();
            let retired = probe(false);
            let mut batch = WakeBatch::new();
            for p in &probes {
                batch.push(Waker::from(p.clone()));
            }
            batch.retire(Waker::from(retired.clone()));
            batch.retire(Waker::from(retired.clone()));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(batch)));
            assert!(r.is_err(), "the waker's panic resumes");
            for p in &probes {
                assert_eq!(p.wakes.load(SeqCst), 1);
                assert_eq!(Arc::strong_count(p), 1);
            }
            assert_eq!(Arc::strong_count(&retired), 1);
        }
    }

    /// A batch flushed early is empty again: its drop wakes nothing twice.
    #[test]
    fn a_flushed_batch_is_empty() {
        let p = probe(false);
        let mut batch = WakeBatch::new();
        batch.push(Waker::from(p.clone()));
        batch.flush();
        assert_eq!(p.wakes.load(SeqCst), 1);
        batch.push(Waker::from(p.clone()));
        drop(batch);
        assert_eq!(p.wakes.load(SeqCst), 2);
        assert_eq!(Arc::strong_count(&p), 1);
    }
}
