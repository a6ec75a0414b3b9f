//! The channel itself: a buffer and two wait lists, for every capacity (0 is the
//! rendezvous channel, `None` unbounded).
//!
//! The buffer is lock-free (`flavors`: a ring for bounded channels, a list of blocks
//! for unbounded ones). The wait lists, the values given back by cancelled receivers
//! (`front`), the values beyond the capacity (`over`) and the slots held for selected
//! sends sit under one lock. While none of those is in use, `slow` is clear and a send
//! or receive is one buffer operation, with no lock (the fast path); otherwise every
//! operation goes through the lock. A closed channel keeps its fast path for the
//! values still buffered: its buffer refuses pushes itself, and a receive that finds
//! the buffer empty there takes the lock to tell drained from a value on its way
//! (draining a closed channel through the lock cost a select a full round per value).
//!
//! Invariants, under the lock:
//! * receivers (other than observers and stale select nodes) wait only while the
//!   buffer is empty: a send hands its value straight to the first waiting receiver;
//! * senders wait only while the buffer is full: a receive that frees a slot moves the
//!   first waiting sender's value into it (or reserves it for a waiting select);
//! * `len + reserved <= cap`, except for values given back by a cancelled receiver
//!   (put in `front`, whatever the capacity, so none is lost) and for selected sends
//!   whose held slot a fast send took meanwhile (put in `over`);
//! * a node that is off its list with reason `Waiting` is reserved by its partner,
//!   which will complete it (a select's send) or let it go with `Signal`.
//!
//! **Why the fast path loses no wakeup.** The first two invariants can break for a
//! moment: a fast send that read `slow` clear may push its value just after a
//! receiver registered. Both sides follow the store-buffering pattern: a registering
//! waiter publishes `slow` (SeqCst), issues a SeqCst fence and then looks at the
//! buffer again under the lock ([`Chan::settle_locked`]); a fast operation changes
//! the buffer (a SeqCst read-modify-write) and then reads `slow` (SeqCst, see
//! [`Chan::met_waiter`]), and if it is set takes the lock and settles. Of two such sequences at
//! least one sees the other's write, so either the waiter finds the value (or the
//! room) itself, or the fast operation's settle hands it over (or admits the waiting
//! sender). Closing marks the buffer in the same word a push claims, so a fast send
//! either landed before the close (and the close's drain or the receivers see it) or
//! fails and takes the slow path, which sees the channel closed.
//!
//! Values are dropped and wakers woken only after the lock is released.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::task::{Context, Poll};

use crossbeam_utils::CachePadded;

use super::error::RecvError;
use super::flavors::list::{self, List};
use super::flavors::ring::{self, PushError, Ring};
use super::flavors::Backoff;
use crate::base::{fence, AtomicBool, AtomicUsize};
use crate::task::TaskRef;
use crate::waitlist::{Kind, Lock, LockGuard, Node, Prepared, Reason, WaitList, WaitOn, WakeBatch};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release, SeqCst};

/// Capacities up to this get a ring allocated whole at creation (so a bounded channel
/// allocates nothing per message); larger ones buffer in a list of blocks.
const RING_MAX: usize = 1 << 20;

/// The most bytes of values a ring holds: a capacity whose values take more buffers
/// in a list of blocks too. A ring of `(1 << 20)` 32 KiB values asked for 32 GiB at
/// creation, and a failed allocation aborts the process (found in review).
const RING_MAX_BYTES: usize = 256 << 20;

/// Whether a bounded channel of `cap` values of type `T` gets a ring.
fn ring_fits<T>(cap: usize) -> bool {
    cap <= RING_MAX && cap.saturating_mul(std::mem::size_of::<T>()) <= RING_MAX_BYTES
}

pub(crate) struct Chan<T> {
    /// Set while the lock's state is in use (see the module doc): operations then take
    /// the lock. Read by every operation, written only when that changes.
    slow: CachePadded<AtomicBool>,
    buffer: Buffer<T>,
    /// Whether sends may skip the lock: with a ring the buffer itself keeps to the
    /// capacity; a list does only for an unbounded channel.
    fast_sends: bool,
    /// Padded, as `slow` and `in_flight` are: the fast path reads `buffer`'s fixed
    /// fields and `fast_sends` on every operation, which must not share a line with
    /// words written often.
    state: CachePadded<Lock<State<T>>>,
    /// `None`: unbounded.
    pub(crate) cap: Option<usize>,
    pub(crate) senders: AtomicUsize,
    pub(crate) receivers: AtomicUsize,
    /// Mirrors `State::closed` for lock-free `is_closed`.
    closed: AtomicBool,
    /// Values handed to receivers' nodes (or held by a selected receive) and not yet
    /// taken by their owners. While any is, a closed channel is not yet drained: a
    /// receiver waits instead of seeing it disconnected, since the owner may give the
    /// value back (a cancelled receive) rather than take it.
    in_flight: CachePadded<AtomicUsize>,
}

/// The lock-free buffer.
enum Buffer<T> {
    /// The rendezvous channel buffers nothing.
    None,
    Ring(Ring<T>),
    List(List<T>),
}

impl<T> Buffer<T> {
    fn push(&self, v: T) -> Result<(), T> {
        match self {
            Buffer::None => Err(v),
            Buffer::Ring(r) => r
                .try_push(v)
                .map_err(|(PushError::Full(v) | PushError::Closed(v))| v),
            Buffer::List(l) => l.try_push(v),
        }
    }

    /// [`push`](Self::push) of the value in `src` (left `None` if pushed, untouched if
    /// not), copied straight into its slot ([`Ring::try_push_from`],
    /// [`List::try_push_from`]).
    #[inline(always)]
    fn push_from(&self, src: &mut Option<T>) -> bool {
        match self {
            Buffer::None => false,
            Buffer::Ring(r) => r.try_push_from(src),
            Buffer::List(l) => l.try_push_from(src),
        }
    }

    /// Pops into `out`: `Ok(true)` when `out` now holds the value (the caller's to
    /// take), `Ok(false)` when empty, `Err(())` when a push has claimed the next
    /// value's place but not yet written it. The value is copied once, straight from
    /// its slot (see [`Ring::try_pop_into`], [`List::try_pop_into`]).
    #[inline(always)]
    fn pop_into(&self, out: &mut MaybeUninit<T>) -> Result<bool, ()> {
        match self {
            Buffer::None => Ok(false),
            Buffer::Ring(r) => match r.try_pop_into(out) {
                ring::Pop::Value(()) => Ok(true),
                ring::Pop::Empty => Ok(false),
                ring::Pop::Busy => Err(()),
            },
            Buffer::List(l) => match l.try_pop_into(out) {
                list::Pop::Value(()) => Ok(true),
                list::Pop::Empty => Ok(false),
                list::Pop::Busy => Err(()),
            },
        }
    }

    /// Whether a receiver may poll this buffer while it spins, and answer "empty"
    /// without the lock: only a ring, whose head slot can be looked at without
    /// reading `tail` ([`Ring::head_written`]). A list cannot look at its head slot
    /// without claiming it (the block may be freed under a look), and its emptiness
    /// check reads `tail`, which every push writes: a receiver that polled it without
    /// the lock in between made one-sender `unbounded()` go from 50 to 150 ns a
    /// message (measured), so a list's spin keeps the lock's pace.
    fn polls_head(&self) -> bool {
        matches!(self, Buffer::Ring(_))
    }

    /// Whether a pop might find a value now: `false` only when it would not (for a
    /// ring, the head slot holds no written value: [`Ring::head_written`]).
    fn may_have_written(&self) -> bool {
        match self {
            Buffer::Ring(r) => r.head_written(),
            _ => !self.is_empty(),
        }
    }

    /// Pops, waiting out a push caught between claiming its place and writing it (a
    /// few instructions of another thread).
    fn pop_settled(&self) -> Option<T> {
        let mut out = MaybeUninit::uninit();
        // SAFETY: `pop_settled_into` said it moved a value into `out`.
        self.pop_settled_into(&mut out)
            .then(|| unsafe { out.assume_init() })
    }

    /// [`pop_settled`](Self::pop_settled) into `out`: `true` when `out` now holds the
    /// value (the caller's to take).
    fn pop_settled_into(&self, out: &mut MaybeUninit<T>) -> bool {
        let mut backoff = Backoff::new();
        loop {
            match self.pop_into(out) {
                Ok(got) => return got,
                Err(()) => backoff.snooze(),
            }
        }
    }

    /// [`push`](Self::push) that waits out a pop caught between claiming its slot and
    /// freeing it (a few instructions of another thread): a ring then answers `Full`
    /// below its capacity. A sender that registers looks for room this way: the fast
    /// receive that claimed the slot read `slow` after its claim but maybe before its
    /// slot's stamp was seen free (`Chan::met_waiter`), so it may not have seen this
    /// sender, and admitting it falls to this side (found in review: a sender left
    /// waiting with the slot free, `tests/review_s18.rs`). `Err` only when the buffer is
    /// full (a fast send took the room) or closed.
    fn push_settled(&self, v: T) -> Result<(), T> {
        let Buffer::Ring(r) = self else {
            return self.push(v);
        };
        let mut backoff = Backoff::new();
        let mut v = v;
        loop {
            match r.try_push(v) {
                Ok(()) => return Ok(()),
                Err(PushError::Closed(back)) => return Err(back),
                Err(PushError::Full(back)) => {
                    // Full with a slot claimed by a pop and not yet freed: that pop is
                    // between its claim and its stamp store; else truly full.
                    if r.is_full() {
                        return Err(back);
                    }
                    v = back;
                    backoff.snooze();
                }
            }
        }
    }

    fn close(&self) {
        match self {
            Buffer::None => {}
            Buffer::Ring(r) => {
                r.close();
            }
            Buffer::List(l) => {
                l.close();
            }
        }
    }

    /// Nothing in it, not even a push in progress.
    fn is_empty(&self) -> bool {
        match self {
            Buffer::None => true,
            Buffer::Ring(r) => r.is_empty(),
            Buffer::List(l) => l.is_empty(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Buffer::None => 0,
            Buffer::Ring(r) => r.len(),
            Buffer::List(l) => l.len(),
        }
    }
}

pub(crate) struct State<T> {
    /// Values given back by receivers that will not take them: older than anything
    /// in the buffer, so taken first.
    front: VecDeque<T>,
    /// Values that found no room in the buffer although they had to go in (a selected
    /// send whose held slot a fast send took): newer than the buffer, taken after it,
    /// and while any is here, sends queue behind them.
    over: VecDeque<T>,
    /// Slots held for selected sends that have not delivered yet.
    reserved: usize,
    closed: bool,
    senders: WaitList<T>,
    receivers: WaitList<T>,
    /// Observer nodes on either list (`Select::ready`): wake them only when any wait.
    observers: usize,
    /// What `Chan::slow` was last set to.
    slow: bool,
    /// Set once the channel was seen closed and drained (see [`Chan::is_drained`]). A
    /// `Cell`: noted by readers of the state, all under the lock.
    drained: std::cell::Cell<bool>,
}

impl<T> State<T> {
    /// Whether operations must take the lock.
    fn needs_lock(&self) -> bool {
        self.reserved > 0
            || !self.front.is_empty()
            || !self.over.is_empty()
            || !self.senders.is_empty()
            || !self.receivers.is_empty()
    }
}

/// The channel's lock held: publishes `slow` as it is released.
pub(crate) struct Guard<'a, T> {
    chan: &'a Chan<T>,
    st: LockGuard<'a, State<T>>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = State<T>;
    fn deref(&self) -> &State<T> {
        &self.st
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut State<T> {
        &mut self.st
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.chan.publish(&mut self.st);
    }
}

/// Why an attempt did not complete.
pub(crate) enum Fail {
    /// Full (send) or empty (receive).
    NotReady,
    Closed,
    /// The receiver was paired with a selected send: its value will come to its node.
    Paired,
    /// Nothing to take, but a select waits to send: a receive with a node can pair
    /// with it.
    Unpaired,
}

/// A selected operation's state, decided in its node under the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Won {
    /// A receive: the value is in the node.
    Value,
    /// A receive paired with a select's send: the value will come to the node.
    Pending,
    /// A send with a slot of the buffer held for it.
    Slot,
    /// A send with a waiting receiver held for it (the node's partner).
    Partner,
    /// The channel closed.
    Closed,
    /// A send chosen by a select's quick pass for the room it saw (nothing held): see
    /// [`Chan::send_selected`].
    Room,
}

impl<T> Chan<T> {
    pub(crate) fn new(cap: Option<usize>) -> Chan<T> {
        let buffer = match cap {
            Some(0) => Buffer::None,
            Some(c) if ring_fits::<T>(c) => Buffer::Ring(Ring::new(c)),
            _ => Buffer::List(List::new()),
        };
        Chan {
            slow: CachePadded::new(AtomicBool::new(false)),
            fast_sends: match buffer {
                Buffer::None => false,
                Buffer::Ring(_) => true,
                Buffer::List(_) => cap.is_none(),
            },
            buffer,
            state: CachePadded::new(Lock::new(State {
                front: VecDeque::new(),
                over: VecDeque::new(),
                reserved: 0,
                closed: false,
                senders: WaitList::default(),
                receivers: WaitList::default(),
                observers: 0,
                slow: false,
                drained: std::cell::Cell::new(false),
            })),
            cap,
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
            closed: AtomicBool::new(false),
            in_flight: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    pub(crate) fn lock(&self) -> Guard<'_, T> {
        Guard {
            chan: self,
            st: self.state.lock(),
        }
    }

    /// Sets `slow` to what the state needs (under the lock). A waiter calls it itself
    /// before its fence; otherwise the guard does as the lock is released.
    fn publish(&self, st: &mut State<T>) {
        let want = st.needs_lock();
        if want != st.slow {
            st.slow = want;
            self.slow.store(want, SeqCst);
        }
    }

    // ---- the fast path (see the module doc) ----

    /// Sends without the lock if nothing needs it and there is room; the value back if
    /// the slow path must decide.
    #[inline]
    pub(crate) fn send_fast(&self, v: T) -> Result<(), T> {
        let mut src = Some(v);
        if self.send_fast_from(&mut src) {
            return Ok(());
        }
        Err(src.expect("left where it was"))
    }

    /// [`send_fast`](Self::send_fast) of the value in `src` (a send future's node
    /// slot): `true` when sent (`src` is then `None`), `false` with `src` untouched.
    #[inline(always)]
    pub(crate) fn send_fast_from(&self, src: &mut Option<T>) -> bool {
        if !self.fast_sends || self.slow.load(Acquire) || !self.buffer.push_from(src) {
            return false;
        }
        if self.met_waiter() {
            self.settle();
        }
        true
    }

    /// A fast operation's half of the store-buffering pair (module doc), after its
    /// claim in the buffer: whether the lock's state came into use meanwhile.
    ///
    /// The claim was a SeqCst read-modify-write and this load is SeqCst; against the
    /// waiter's SeqCst fence that is as strong as a fence here (C++'s rule for SeqCst
    /// operations and fences), and costs none. It covers the claim, not the stores
    /// after it, so the other side must count a claimed place as taken: a receiver a
    /// claimed but unwritten slot as a value on its way (`Busy`), a sender a slot
    /// whose pop has claimed it but not yet freed it as room
    /// ([`Buffer::push_settled`]). loom treats SeqCst accesses as AcqRel (weaker than
    /// the language), so its builds fence explicitly.
    fn met_waiter(&self) -> bool {
        #[cfg(loom)]
        fence(SeqCst);
        self.slow.load(SeqCst)
    }

    /// Receives without the lock if nothing needs it and a value is there: `true` when
    /// `out` now holds it (the caller's to take).
    #[inline(always)]
    pub(crate) fn recv_fast_into(&self, out: &mut MaybeUninit<T>) -> bool {
        matches!(self.recv_fast_probe_into(out), Ok(true))
    }

    /// A receive through the fast path only, for a select's first pass: `Ok(None)`
    /// when the channel is empty, `Err(())` when the fast path cannot decide (the
    /// lock's state is in use, or a value is being written).
    #[inline]
    pub(crate) fn recv_fast_probe(&self) -> Result<Option<T>, ()> {
        let mut out = MaybeUninit::uninit();
        // SAFETY: `recv_fast_probe_into` said it moved a value into `out`.
        Ok(self
            .recv_fast_probe_into(&mut out)?
            .then(|| unsafe { out.assume_init() }))
    }

    /// [`recv_fast_probe`](Self::recv_fast_probe) into `out` (`Ok(true)`: `out` holds
    /// the value, the caller's to take), so that a large value is copied once on its
    /// way from the buffer to the caller's future, not once per layer.
    #[inline(always)]
    pub(crate) fn recv_fast_probe_into(&self, out: &mut MaybeUninit<T>) -> Result<bool, ()> {
        if self.slow.load(Acquire) {
            return Err(());
        }
        if !self.buffer.pop_into(out)? {
            return self.fast_empty();
        }
        self.after_fast_pop(out);
        Ok(true)
    }

    /// A blocking receive's first try: a value from the buffer if one is there and
    /// nothing needs the lock, else `None` (the caller goes on to its full try).
    /// On a ring it reads nothing a sender writes but the head slot's stamp
    /// ([`Ring::try_pop_written_into`]).
    #[inline]
    pub(crate) fn recv_fast_first(&self) -> Option<T> {
        if self.slow.load(Acquire) {
            return None;
        }
        let mut out = MaybeUninit::uninit();
        let popped = match &self.buffer {
            Buffer::Ring(r) => r.try_pop_written_into(&mut out),
            Buffer::List(_) => matches!(self.buffer.pop_into(&mut out), Ok(true)),
            Buffer::None => false,
        };
        if !popped {
            return None;
        }
        self.after_fast_pop(&mut out);
        // SAFETY: the pop moved a value into `out`, and `after_fast_pop` leaves it there.
        Some(unsafe { out.assume_init() })
    }

    /// After a fast receive popped the value now in `out`: settles with the waiters
    /// its claim may have met, holding the value meanwhile (`out` holds it again
    /// after).
    #[inline]
    fn after_fast_pop(&self, out: &mut MaybeUninit<T>) {
        if self.met_waiter() {
            // Given back if a wake panics. Not counted in `in_flight`: the value is this
            // receiver's (its pop is the receive), as a value held while the locked
            // path's wakes run is. Counting it after the pop let a receiver that had
            // just seen the closed channel drained see it not drained (`Empty`) a
            // moment later.
            let mut hold = GiveBackOnUnwind {
                chan: self,
                // SAFETY: `pop_into` moved the value into `out`; it moves on to `hold`
                // (`out` counts as empty until written again below).
                value: Some(unsafe { out.assume_init_read() }),
            };
            self.settle();
            out.write(hold.value.take().expect("kept while the wakes ran"));
        }
    }

    /// Whether a send would find room through the fast path now: `Err(())` when the
    /// fast path cannot tell (the lock's state is in use, no fast sends here, or a
    /// full ring of a closed channel).
    pub(crate) fn send_room_fast(&self) -> Result<bool, ()> {
        if !self.fast_sends || self.slow.load(Acquire) {
            return Err(());
        }
        match &self.buffer {
            // A send on a closed channel is ready (it fails at once): "no room" would
            // have the quick pass pass it over for every ready operation after it, so
            // it never won against one (found in review: `review_s20_quick`). Read only
            // when full, off the common path; a full round reports the close.
            Buffer::Ring(r) if r.is_full() => {
                if self.closed.load(Acquire) {
                    Err(())
                } else {
                    Ok(false)
                }
            }
            _ => Ok(true),
        }
    }

    /// [`send_room_fast`](Self::send_room_fast) where the fast path cannot tell
    /// (someone waits, or a bounded list's sends take the lock): the look under the
    /// lock. `Err`: a rendezvous channel (a send there must hold a waiting receiver: a
    /// full round) or a closed one (a full round reports it).
    pub(crate) fn send_room_locked(&self) -> Result<bool, ()> {
        if self.cap == Some(0) {
            return Err(());
        }
        let st = self.lock();
        if st.closed {
            return Err(());
        }
        Ok(self.has_room(&st))
    }

    /// Completes a send a select chose for the room it saw ([`Won::Room`]): through
    /// the fast path, or, if the room went meanwhile, without waiting as any selected
    /// send does (to a waiting receiver, else beyond the capacity). The value back only
    /// if the channel closed.
    pub(crate) fn send_selected(&self, v: T) -> Result<(), T> {
        let v = match self.send_fast(v) {
            Ok(()) => return Ok(()),
            Err(v) => v,
        };
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        self.send_anyway_locked(&mut st, v, &mut wakes)
    }

    /// A selected send goes in now: to a waiting receiver, else into the buffer, else
    /// beyond the capacity (as a given-back value does). The value back only if the
    /// channel closed.
    fn send_anyway_locked(&self, st: &mut State<T>, v: T, wakes: &mut WakeBatch) -> Result<(), T> {
        if st.closed {
            return Err(v);
        }
        if let Err((v, _)) = self.try_send_locked(st, v, wakes) {
            st.over.push_back(v);
            st.wake_observers(true, wakes);
        }
        Ok(())
    }

    /// [`Chan::recv_fast_probe`] for a select's quick pass, whose node keeps the value
    /// (and may give it back): the value is counted in `in_flight` before it leaves the
    /// buffer, so no receiver sees a closed channel drained while it is on its way.
    pub(crate) fn recv_fast_held(&self) -> Result<Option<T>, ()> {
        if self.slow.load(Acquire) {
            return Err(());
        }
        if !self.buffer.may_have_written() {
            return self.fast_empty().map(|_| None);
        }
        self.handed();
        // Uncounted when no value comes out: none popped, or the settle after the pop
        // panicked (a wake), the value then given back (`GiveBackOnUnwind`, dropped
        // first, so the value is in the channel again before the count goes). A count
        // left behind kept the closed channel from ever being seen drained.
        let uncount = Uncount(self);
        match self.recv_fast_probe() {
            Ok(Some(v)) => {
                std::mem::forget(uncount);
                Ok(Some(v))
            }
            r => r,
        }
    }

    /// The quick pass's receive where the fast path cannot decide (the lock's state in
    /// use: a sender waits, or a receiver): the same try as `try_recv`'s, under the
    /// lock and without a node. `Ok(Some)`: a value, counted in `in_flight` before the
    /// lock is released (as [`recv_fast_held`](Self::recv_fast_held) counts its own:
    /// the select may still give it back); `Ok(None)`: nothing to take, the channel
    /// open; `Err`: only a full round can tell (the channel drained and closed, which
    /// a select reports as its operation's error, or a waiting select's send to pair
    /// with, which needs a node, also one queued ahead of a plain sender: see
    /// [`select_send_first`](Self::select_send_first)).
    pub(crate) fn recv_locked_held(&self) -> Result<Option<T>, ()> {
        let uncount;
        // Declared after `uncount`, so dropped first: if a wake below panics, the value
        // is back in the channel before its count goes.
        let mut hold = GiveBackOnUnwind {
            chan: self,
            value: None,
        };
        {
            let mut wakes = WakeBatch::new();
            let mut st = self.lock();
            // A select's send queued first answers `Unpaired` (see
            // `try_recv_locked`): a full round pairs with it, in the queue's order.
            match self.try_recv_locked(&mut st, None, &mut wakes) {
                Ok(v) => {
                    self.handed();
                    uncount = Uncount(self);
                    hold.value = Some(v);
                }
                Err(Fail::NotReady) => return Ok(None),
                Err(_) => return Err(()),
            }
        }
        std::mem::forget(uncount);
        Ok(hold.value.take())
    }

    /// Whether the first sender a receive could take from now is a select's send (one
    /// that needs a node to pair with), not a plain sender's value. A try without a node
    /// ([`try_recv_locked`](Self::try_recv_locked) without `pair`) that passed such
    /// sends over for the first plain sender behind them starved a select's send
    /// queued ahead of a plain sender that kept queueing again behind it (found in
    /// review, `review_s20_quick`: the select's share of a rendezvous channel went
    /// from a half to a few percent through the select's quick pass, and to 0.5%
    /// through `try_recv`, which `recv_timeout` tries first).
    fn select_send_first(&self, st: &State<T>) -> bool {
        let mut select = false;
        // SAFETY: the caller holds the lock.
        unsafe {
            st.senders.any(|n| match n.kind() {
                // As `recv_ready_locked` sees them.
                Kind::Op => n.may_commit(),
                Kind::Select if n.is_open() => {
                    select = true;
                    true
                }
                Kind::Select | Kind::Observe => false,
            });
        }
        select
    }

    /// The fast path's answer for an empty buffer: "empty" (`Ok(false)`) while the
    /// channel is open; once it is closed only the lock can tell drained from a value
    /// handed to a receiver that may still give it back (`Err`: undecided).
    fn fast_empty(&self) -> Result<bool, ()> {
        if self.closed.load(Acquire) {
            Err(())
        } else {
            Ok(false)
        }
    }

    /// Nothing a receive could take now, as far as the fast path can tell without
    /// touching what senders write (the lock's state unused, the channel open, the
    /// head not written): what a blocking receive polls while it spins before trying
    /// a receive (see [`Buffer::polls_head`]). `false` means "try".
    pub(crate) fn nothing_to_take(&self) -> bool {
        self.buffer.polls_head()
            && !self.slow.load(Acquire)
            && !self.closed.load(Acquire)
            && !self.buffer.may_have_written()
    }

    /// A fast operation met a waiter (or the lock's state in use): restore the
    /// invariants under the lock.
    fn settle(&self) {
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        self.settle_locked(&mut st, &mut wakes);
    }

    /// Hands buffered values to waiting receivers and freed room to waiting senders,
    /// and tells observers what is possible now.
    ///
    /// The receiver is claimed before the value is popped: popping first and then
    /// failing the claim (its select won elsewhere, its task cancelled, both racing
    /// this lock) left the value with nowhere to go but `front`, while a fast send
    /// could refill the slot the pop freed: a bounded channel then held `cap + 1`
    /// values (seen as `len() == 3` on `bounded(2)`, `chan_review2`).
    fn settle_locked(&self, st: &mut State<T>, wakes: &mut WakeBatch) {
        while self.has_values(st) {
            // SAFETY: under the lock.
            let Some(r) = (unsafe { take_receiver(st, ptr::null()) }) else {
                break;
            };
            match self.pop_locked(st) {
                Some(v) => {
                    self.handed();
                    // SAFETY: taken off the list under the lock: ours to complete.
                    unsafe {
                        (*r).put_slot(v);
                        (*r).notify(Reason::Data, wakes);
                    }
                }
                None => {
                    // A fast receive that read `slow` before it was set took the
                    // value meanwhile (only the ring changes without the lock). The
                    // claimed receiver tries again: a plain receive starts over, a
                    // select a new round (as when a held partner lets go).
                    // SAFETY: as above.
                    unsafe { (*r).notify(Reason::Signal, wakes) };
                    break;
                }
            }
        }
        while self.admit_sender(st, wakes) {}
        if st.observers > 0 && self.has_values(st) {
            st.wake_observers(true, wakes);
        }
    }

    // ---- the buffer under the lock ----

    /// The oldest value: given back ones, then the buffer, then those over capacity.
    fn pop_locked(&self, st: &mut State<T>) -> Option<T> {
        if let Some(v) = st.front.pop_front() {
            return Some(v);
        }
        match self.buffer.pop_settled() {
            Some(v) => {
                // A slot freed: the oldest value over the capacity takes it.
                if let Some(o) = st.over.pop_front() {
                    if let Err(o) = self.buffer.push(o) {
                        st.over.push_front(o);
                    }
                }
                Some(v)
            }
            None => st.over.pop_front(),
        }
    }

    fn buf_len(&self, st: &State<T>) -> usize {
        st.front.len() + self.buffer.len() + st.over.len()
    }

    fn has_values(&self, st: &State<T>) -> bool {
        !st.front.is_empty() || !self.buffer.is_empty() || !st.over.is_empty()
    }

    /// Drains every value (the channel closed with its receivers gone, or dropped),
    /// oldest first.
    fn drain_locked(&self, st: &mut State<T>) -> VecDeque<T> {
        let mut all = std::mem::take(&mut st.front);
        // The slot a value passes through is a local the size of `T`: only in a frame
        // of its own, entered when there are values. In this frame it overflowed a
        // small stack for every drop of a channel of big values, empty ones too
        // (found in review: a 2 MiB value type on a 1 MiB thread stack).
        if !self.buffer.is_empty() {
            self.drain_buffer_into(&mut all);
        }
        all.append(&mut st.over);
        all
    }

    #[inline(never)]
    fn drain_buffer_into(&self, all: &mut VecDeque<T>) {
        // Each value copied once, into the deque (`pop_settled` hands it up through an
        // `Option`, and a large `T` was copied even for the `None` that ends the loop).
        let mut out = MaybeUninit::uninit();
        while self.buffer.pop_settled_into(&mut out) {
            // SAFETY: `pop_settled_into` said it moved a value into `out`.
            all.push_back(unsafe { out.assume_init_read() });
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Acquire)
    }

    /// A value was put in a receiver's node (under the lock).
    fn handed(&self) {
        self.in_flight.fetch_add(1, AcqRel);
    }

    /// The owner of a receiver's node took the value handed to it (without the lock).
    /// The last one of a closed channel wakes the receivers that waited for it.
    pub(crate) fn taken(&self) {
        // Store-buffering with `close`: each side writes, then a SeqCst fence, then
        // reads the other's word. Either this sees the channel closed (and wakes the
        // waiters), or the close's fence comes later and every receiver that checks the
        // count under the lock after the close sees it at 0.
        // Only the last value's taker reads `closed`. Its fence is the decrement
        // itself: a SeqCst read-modify-write followed by a SeqCst load, against the
        // close's SeqCst fence, is ordered as a fence would order it (the argument of
        // `met_waiter`). An `mfence` here took about half of this function's
        // samples, some 5% of a select's quick receive (perf, one receiver selecting
        // over four rings). loom models SeqCst accesses as AcqRel, so its builds
        // fence explicitly.
        //
        // And it takes the lock only if someone waits (`slow`): a select draining a
        // closed channel through its quick pass took the lock once per value (the
        // senders of crossbeam's `select_rx` finish long before their receiver, so
        // nearly every value of that case was taken so). Store-buffering with a
        // receiver that registers: it publishes `slow`, fences, then looks at the
        // count (`recheck_drained`); this side's decrement comes before its read of
        // `slow`. So either it sees the receiver and wakes it, or the receiver sees
        // the count at 0 and wakes itself.
        if self.in_flight.fetch_sub(1, SeqCst) == 1 && {
            #[cfg(loom)]
            fence(SeqCst);
            self.closed.load(SeqCst) && self.slow.load(SeqCst)
        } {
            let mut wakes = WakeBatch::new();
            let mut st = self.lock();
            st.wake_closed(&mut wakes);
        }
    }

    /// A receiver's registration after its fence (see [`Chan::taken`]): a closed
    /// channel found drained wakes its receivers, as the last `taken` would have had
    /// it seen them.
    fn recheck_drained(&self, st: &mut State<T>, wakes: &mut WakeBatch) {
        if self.is_drained(st) {
            st.wake_closed(wakes);
        }
    }

    /// As [`Chan::taken`], under the lock.
    fn taken_locked(&self, st: &mut State<T>, wakes: &mut WakeBatch) {
        if self.in_flight.fetch_sub(1, AcqRel) == 1 && st.closed {
            st.wake_closed(wakes);
        }
    }

    /// Closed, and no value is on its way to a receiver.
    ///
    /// Once drained, the channel stays so, whatever `in_flight` says later: the
    /// buffer is closed to pushes and empty, `front` and `over` are empty and nothing
    /// is on its way, so no value can appear any more, but a select's quick pass on
    /// the closed channel (the fast path is open there) may still count a value it
    /// then fails to pop (another receiver took it first). Without the note, a
    /// receiver that had seen `Disconnected` would see `Empty` (or wait) during that
    /// window. The values themselves are still checked: one given back after a
    /// panicking wake (uncounted) is not hidden.
    fn is_drained(&self, st: &State<T>) -> bool {
        if !st.closed || self.has_values(st) {
            return false;
        }
        if st.drained.get() {
            return true;
        }
        // The buffer before the count: a select's quick pass counts a value before it
        // pops it, so a value seen gone from the buffer is seen counted.
        let drained = self.in_flight.load(Acquire) == 0;
        st.drained.set(drained);
        drained
    }

    pub(crate) fn len(&self) -> usize {
        if !self.slow.load(Acquire) {
            return self.buffer.len();
        }
        self.buf_len(&self.lock())
    }

    pub(crate) fn is_full(&self) -> bool {
        let st = self.lock();
        !self.has_room(&st)
    }

    fn has_room(&self, st: &State<T>) -> bool {
        match self.cap {
            None => true,
            Some(c) => self.buf_len(st) + st.reserved < c,
        }
    }

    /// Closes the channel: every waiter wakes with `Close`. `true` for the call that
    /// closed it. When the receivers are gone the buffered values are returned, to be
    /// dropped by the caller once the lock is released.
    pub(crate) fn close(&self, drain: bool) -> (bool, VecDeque<T>) {
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        let first = !st.closed;
        if first {
            st.closed = true;
            // After this no push claims a place: whatever a fast send put in the
            // buffer before is drained below or received.
            self.buffer.close();
            self.closed.store(true, Release);
            // Pairs with the fence in `taken`.
            fence(SeqCst);
            st.close_list(true, &mut wakes);
            st.close_list(false, &mut wakes);
            st.observers = 0;
        }
        let buf = if drain {
            self.drain_locked(&mut st)
        } else {
            VecDeque::new()
        };
        drop(st);
        (first, buf)
    }

    /// The last sender or receiver of its side is gone.
    pub(crate) fn disconnect(&self, receivers_side: bool) {
        let (_, buf) = self.close(receivers_side);
        drop_leaking_on_panic(buf);
    }

    // ---- the operations, under the lock ----

    /// Sends `v` now if it can: to a waiting receiver, else into the buffer.
    pub(crate) fn try_send_locked(
        &self,
        st: &mut State<T>,
        v: T,
        wakes: &mut WakeBatch,
    ) -> Result<(), (T, Fail)> {
        if st.closed {
            return Err((v, Fail::Closed));
        }
        // SAFETY: under the lock.
        if let Some(r) = unsafe { take_receiver(st, ptr::null()) } {
            self.handed();
            // SAFETY: `r` was just taken off the list under the lock: ours to complete.
            unsafe {
                (*r).put_slot(v);
                (*r).notify(Reason::Data, wakes);
            }
            return Ok(());
        }
        if self.has_room(st) {
            if !st.over.is_empty() {
                st.over.push_back(v);
            } else if let Err(v) = self.buffer.push(v) {
                // A fast send took the last slot.
                return Err((v, Fail::NotReady));
            }
            st.wake_observers(true, wakes);
            return Ok(());
        }
        Err((v, Fail::NotReady))
    }

    /// Receives now if it can: from the buffer, else from a waiting sender. With
    /// `pair`, a waiting select's send is paired with that node (the value comes
    /// later: `Fail::Paired`); without, such senders are passed over and reported
    /// (`Fail::Unpaired`).
    pub(crate) fn try_recv_locked(
        &self,
        st: &mut State<T>,
        pair: Option<&Node<T>>,
        wakes: &mut WakeBatch,
    ) -> Result<T, Fail> {
        if let Some(v) = self.pop_locked(st) {
            self.admit_sender(st, wakes);
            return Ok(v);
        }
        if pair.is_none() && self.select_send_first(st) {
            // Without a node this try could only pass that send over for a plain
            // sender queued behind it: its caller pairs with it instead (`try_recv_now`
            // with a node, a select's full round), in the queue's order.
            return Err(Fail::Unpaired);
        }
        let own = pair.map_or(ptr::null(), |n| n.group());
        let mut unpaired = false;
        // SAFETY: under the lock; nodes on the list are alive.
        let taken = unsafe {
            st.senders.take_first(|n| match n.kind() {
                // A rendezvous send whose task is already cancelled is passed over: it
                // will be withdrawn, its value never delivered (see `Node::commit`).
                Kind::Op => n.commit(),
                Kind::Select if pair.is_some() => !n.same_group(own) && n.claim(),
                Kind::Select => {
                    unpaired |= n.is_open();
                    false
                }
                Kind::Observe => false,
            })
        };
        if let Some(s) = taken {
            // SAFETY: taken off the list under the lock: ours to complete.
            let s = unsafe { &*s };
            if s.kind() == Kind::Op {
                // SAFETY: as above.
                let v = unsafe { s.take_slot() }.expect("a waiting send holds its value");
                // SAFETY: as above.
                unsafe { s.notify(Reason::Data, wakes) };
                return Ok(v);
            }
            let me = pair.expect("only paired when asked");
            // SAFETY: both nodes are held by this call under the lock: `s` was taken
            // off its list, `me` is the caller's and on no list.
            unsafe {
                s.set_partner(me);
                me.set_partner(s);
                s.notify(Reason::Data, wakes);
            }
            return Err(Fail::Paired);
        }
        Err(if self.is_drained(st) {
            Fail::Closed
        } else if unpaired {
            Fail::Unpaired
        } else {
            Fail::NotReady
        })
    }

    /// A slot was freed: the first waiting sender's value moves into it (or the slot
    /// is held for a waiting select's send); with no sender waiting, observers hear of
    /// the room. `true` if a sender was admitted.
    fn admit_sender(&self, st: &mut State<T>, wakes: &mut WakeBatch) -> bool {
        if !self.has_room(st) {
            return false;
        }
        // SAFETY: under the lock.
        let taken = unsafe {
            st.senders.take_first(|n| match n.kind() {
                Kind::Op => true,
                Kind::Select => n.claim(),
                Kind::Observe => false,
            })
        };
        match taken {
            Some(s) => {
                // SAFETY: taken off the list under the lock: ours to complete.
                let s = unsafe { &*s };
                if s.kind() == Kind::Op {
                    // SAFETY: as above.
                    let v = unsafe { s.take_slot() }.expect("a waiting send holds its value");
                    if !st.over.is_empty() {
                        st.over.push_back(v);
                    } else if let Err(v) = self.buffer.push_settled(v) {
                        // A fast send that read `slow` before this sender waited took
                        // the room: the sender keeps waiting, at the head (admitting it
                        // beyond the capacity would let a full channel take a send).
                        // SAFETY: as above; the node is back as it was.
                        unsafe {
                            s.put_slot(v);
                            st.senders.push_front(s);
                        }
                        return false;
                    }
                } else {
                    st.reserved += 1;
                    // SAFETY: as above.
                    unsafe { s.set_reserved(true) };
                }
                // SAFETY: as above.
                unsafe { s.notify(Reason::Data, wakes) };
                true
            }
            None => {
                st.wake_observers(false, wakes);
                false
            }
        }
    }

    /// A value handed to a receiver that will not take it goes back: to the next
    /// waiting receiver, else to the front of the buffer (whatever the capacity). With
    /// no receiver left it is returned, to be dropped outside the lock.
    pub(crate) fn give_back_locked(
        &self,
        st: &mut State<T>,
        v: T,
        wakes: &mut WakeBatch,
    ) -> Option<T> {
        if self.receivers.load(Acquire) == 0 {
            return Some(v);
        }
        // SAFETY: under the lock.
        if let Some(r) = unsafe { take_receiver(st, ptr::null()) } {
            self.handed();
            // SAFETY: taken off the list under the lock.
            unsafe {
                (*r).put_slot(v);
                (*r).notify(Reason::Data, wakes);
            }
            return None;
        }
        st.front.push_front(v);
        st.wake_observers(true, wakes);
        None
    }

    /// A receive that does not wait for a sender: from the buffer, a waiting sender,
    /// or a waiting select's send. The last commits to its value only once paired, so
    /// this waits for that value (as crossbeam's zero-capacity flavour does): the
    /// select was woken as the pairing was made and sends at once. If it withdraws
    /// instead, the receive reports nothing there.
    #[inline]
    pub(crate) fn try_recv_now(&self) -> Result<T, Fail> {
        match self.recv_fast_probe() {
            Ok(Some(v)) => Ok(v),
            // Empty with `slow` clear and the channel open: no sender waits, nothing
            // was given back, so the locked path could only answer the same (but a
            // list's spin keeps the lock's pace: `Buffer::polls_head`).
            Ok(None) if self.buffer.polls_head() => Err(Fail::NotReady),
            Ok(None) | Err(()) => self.try_recv_locked_now(),
        }
    }

    /// [`try_recv_now`](Self::try_recv_now) where the fast path could not decide.
    #[inline(never)]
    fn try_recv_locked_now(&self) -> Result<T, Fail> {
        // The common case needs no node: a value in the buffer or a waiting sender,
        // or nothing and no select waiting to send.
        match self.try_recv_held(None) {
            Err(Fail::Unpaired) => {}
            r => return r,
        }
        let guard = PairedRecv {
            chan: self,
            node: Node::new(),
            paired: std::cell::Cell::new(false),
        };
        match self.try_recv_held(Some(&guard.node)) {
            Err(Fail::Paired) => guard.paired.set(true),
            r => return r,
        }
        let reason = self.await_pairing(&guard.node);
        if reason == Reason::Data {
            // SAFETY: `Data` was stored after the value: the sender is done with the
            // node.
            if let Some(v) = unsafe { guard.node.take_slot() } {
                self.taken();
                return Ok(v);
            }
        }
        Err(Fail::NotReady)
    }

    /// Releases the lock and runs the wakes of a receive that took `v` under it, then
    /// returns `v`; if a wake panics, `v` goes back to the channel instead of being
    /// lost in the unwind (returned beside a live batch, it was leaked: the batch's
    /// `Drop` runs the wakes after the return value is made).
    fn unlock_holding(&self, v: T, st: Guard<'_, T>, wakes: WakeBatch) -> T {
        let mut hold = GiveBackOnUnwind {
            chan: self,
            value: Some(v),
        };
        drop(st);
        drop(wakes);
        hold.value.take().expect("kept while the wakes ran")
    }

    /// One [`Chan::try_recv_locked`], the value held while the wakes run after the
    /// lock: if a wake panics, the value goes back to the channel instead of being
    /// dropped by the unwind.
    fn try_recv_held(&self, pair: Option<&Node<T>>) -> Result<T, Fail> {
        let mut hold = GiveBackOnUnwind {
            chan: self,
            value: None,
        };
        let r = {
            let mut wakes = WakeBatch::new();
            let mut st = self.lock();
            self.try_recv_locked(&mut st, pair, &mut wakes)
                .map(|v| hold.value = Some(v))
        };
        r.map(|()| hold.value.take().expect("held"))
    }

    /// Waits a little for the value of the select `node` is paired with (a "try"
    /// operation must not wait long: a select whose future nobody polls any more never
    /// sends). `Waiting` when it did not come in time; the caller then undoes the
    /// pairing (a value arriving meanwhile is then given back).
    pub(crate) fn await_pairing(&self, node: &Node<T>) -> Reason {
        let mut fut = std::pin::pin!(std::future::poll_fn(|cx| {
            let mut waker = Prepared::new(cx.waker());
            let mut wakes = WakeBatch::new();
            let _st = self.lock();
            match node.reason() {
                Reason::Waiting => {
                    // SAFETY: under the lock; the node is held by its caller, on no
                    // list.
                    unsafe { node.set_waker(&mut waker, WaitOn::Chan, &mut wakes) };
                    Poll::Pending
                }
                r => Poll::Ready(r),
            }
        }));
        let deadline = std::time::Instant::now() + PAIRING_PATIENCE;
        crate::fiber::wait::wait_until(fut.as_mut(), deadline).unwrap_or(Reason::Waiting)
    }

    /// One poll of a receiver's `Stream`. Its node is an observer: it is only told that
    /// a value may be there (`Signal`) and is never handed one, so no value can be
    /// stranded in a receiver whose stream nobody polls any more.
    pub(crate) fn poll_stream(
        &self,
        node: &Node<T>,
        registered: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Option<T>> {
        if *registered {
            if node.reason() == Reason::Waiting {
                let mut waker = Prepared::new(cx.waker());
                let mut wakes = WakeBatch::new();
                let st = self.lock();
                if node.reason() == Reason::Waiting {
                    // SAFETY: under the lock; the node is on the receivers' list.
                    unsafe { node.set_waker(&mut waker, WaitOn::Chan, &mut wakes) };
                    drop(st);
                    return Poll::Pending;
                }
            }
            // Woken: the waker took it off the list.
            *registered = false;
            node.reset();
        }
        loop {
            let mut out = MaybeUninit::uninit();
            if self.recv_fast_into(&mut out) {
                // SAFETY: `recv_fast_into` said it moved a value into `out`.
                return Poll::Ready(Some(unsafe { out.assume_init() }));
            }
            let mut waker = Prepared::new(cx.waker());
            let mut wakes = WakeBatch::new();
            let mut st = self.lock();
            match self.try_recv_locked(&mut st, None, &mut wakes) {
                Ok(v) => return Poll::Ready(Some(self.unlock_holding(v, st, wakes))),
                Err(Fail::Closed) => return Poll::Ready(None),
                // A waiting select's send needs a pairing, which `try_recv_now` makes.
                Err(Fail::Unpaired) => {
                    drop(st);
                    drop(wakes);
                    match self.try_recv_now() {
                        Ok(v) => return Poll::Ready(Some(v)),
                        Err(Fail::Closed) => return Poll::Ready(None),
                        Err(_) => continue,
                    }
                }
                Err(_) => {}
            }
            // SAFETY: under the lock; the receiver keeps the boxed node until
            // `unregister_stream` takes it off.
            unsafe {
                node.set_waker(&mut waker, WaitOn::Chan, &mut wakes);
                st.receivers.push_back(node);
            }
            st.observers += 1;
            // Store-buffering with a fast send (module doc): a value that came
            // meanwhile is seen here, or its sender sees the node.
            self.publish(&mut st);
            fence(SeqCst);
            if self.has_values(&st) || self.is_drained(&st) {
                // SAFETY: under the lock; the node was pushed above.
                unsafe { st.receivers.remove(node) };
                st.observers -= 1;
                continue;
            }
            *registered = true;
            return Poll::Pending;
        }
    }

    /// Takes a receiver's stream node off the list.
    pub(crate) fn unregister_stream(&self, node: &Node<T>) {
        let mut st = self.lock();
        // SAFETY: under the lock; the node is on the receivers' list or on none.
        if unsafe { st.receivers.remove(node) } {
            st.observers -= 1;
        }
    }

    // ---- the waiting operations (one future each, see `ops`) ----

    /// One poll of a receive whose node is `node`.
    pub(crate) fn poll_recv(
        &self,
        node: &Node<T>,
        registered: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<T, RecvError>> {
        if *registered {
            match node.reason() {
                Reason::Data => {
                    // SAFETY: we saw `Data`: the sender is done with the node.
                    let v = unsafe { node.take_slot() }.expect("a value was handed over");
                    self.taken();
                    // Ready for another wait (a `Stream` reuses its node).
                    node.reset();
                    *registered = false;
                    // The value is ours: a cancellation deferred by the sender's commit
                    // takes effect at the task's next wait.
                    end_commit(node);
                    return Poll::Ready(Ok(v));
                }
                Reason::Waiting => {
                    let mut waker = Prepared::new(cx.waker());
                    let mut wakes = WakeBatch::new();
                    let task = self.rendezvous_task(cx);
                    let mut st = self.lock();
                    if node.reason() == Reason::Waiting {
                        // SAFETY: under the lock (a waiting receive off the list is
                        // paired with a select's send, which commits whatever the task).
                        let moved =
                            unsafe { !node.task_is(task.as_ref()) && st.receivers.remove(node) };
                        if !moved {
                            // SAFETY: under the lock.
                            unsafe { node.set_waker(&mut waker, WaitOn::Chan, &mut wakes) };
                            drop(st);
                            return Poll::Pending;
                        }
                        // Polled by another task than the one it was registered for (a
                        // boxed future moved on): a sender may have passed it over for
                        // that task's cancellation, and nothing would pair it again.
                        // Withdrawn (nothing was committed: still waiting), and
                        // registered afresh below, which pairs with a waiting sender.
                        // SAFETY: under the lock, off the list.
                        let stale = unsafe { node.end_commit() };
                        drop(st);
                        drop(stale);
                        node.reset();
                        *registered = false;
                        return self.poll_recv(node, registered, cx);
                    }
                    drop(st);
                    return self.poll_recv(node, registered, cx);
                }
                _ => {
                    *registered = false;
                    end_commit(node);
                    node.reset();
                }
            }
        }
        let mut out = MaybeUninit::uninit();
        if self.recv_fast_into(&mut out) {
            // SAFETY: `recv_fast_into` said it moved a value into `out`.
            return Poll::Ready(Ok(unsafe { out.assume_init() }));
        }
        // After the fast path: a batch costs its drop even when empty.
        let mut waker = Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        match self.try_recv_locked(&mut st, Some(node), &mut wakes) {
            Ok(v) => Poll::Ready(Ok(self.unlock_holding(v, st, wakes))),
            Err(Fail::Closed) => Poll::Ready(Err(RecvError)),
            Err(Fail::Paired) => {
                // Recorded before any user code (the waker's clone, the wakes) can
                // panic: the future's `Drop` must undo the pairing.
                *registered = true;
                // SAFETY: under the lock; the node is ours.
                unsafe { node.set_waker(&mut waker, WaitOn::Chan, &mut wakes) };
                Poll::Pending
            }
            Err(Fail::NotReady | Fail::Unpaired) => {
                // A rendezvous receive records its task, for the sender's commit (see
                // `Node::commit`).
                let task = self.rendezvous_task(cx);
                // SAFETY: under the lock; the caller keeps the node pinned until
                // `cancel_recv` (its `Drop`) takes it off.
                let stale = unsafe {
                    node.set_waker(&mut waker, WaitOn::Chan, &mut wakes);
                    st.receivers.push_back(node);
                    node.set_task(task)
                };
                *registered = true;
                // Store-buffering with a fast send (module doc): a value that came
                // meanwhile is handed to the node here (its wake re-polls us), or its
                // sender sees the node and settles.
                self.publish(&mut st);
                fence(SeqCst);
                self.settle_locked(&mut st, &mut wakes);
                self.recheck_drained(&mut st, &mut wakes);
                // A receiver waits: a rendezvous send is now possible.
                st.wake_observers(false, &mut wakes);
                drop(st);
                drop(stale);
                Poll::Pending
            }
        }
    }

    /// The task a rendezvous operation polled with `cx` records for its partner's
    /// commit: only a task that polls it with its own waker (its harness, or a fiber's
    /// suspending `wait`), since only then does the task's cancellation drop the
    /// operation. A wait nested in a task's poll (`weft::wait` on a worker, or in a
    /// fiber that may not suspend) cannot be cancelled before it returns: a partner
    /// that passed it over for its task's cancellation would leave it waiting for good.
    /// Such waits, and buffered channels, record nothing and are always committed to.
    fn rendezvous_task(&self, cx: &Context<'_>) -> Option<TaskRef> {
        if self.cap == Some(0) {
            TaskRef::current_polling(cx.waker())
        } else {
            None
        }
    }

    /// A registered receive is dropped: off the list, a reserved partner let go, a
    /// value handed to it given back.
    pub(crate) fn cancel_recv(&self, node: &Node<T>) {
        let kept = self.end_recv(node, false);
        debug_assert!(kept.is_none());
    }

    /// Ends a receive that stops waiting (a deadline passed) and keeps a value handed
    /// to it meanwhile instead of giving it back: given back, it would go to `front`,
    /// past the capacity when a fast send refilled the slot its pop freed.
    pub(crate) fn withdraw_recv(&self, node: &Node<T>) -> Option<T> {
        self.end_recv(node, true)
    }

    fn end_recv(&self, node: &Node<T>, keep: bool) -> Option<T> {
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        let mut drop_later = None;
        let mut kept = None;
        // SAFETY: under the lock, for every node access below.
        let commit = unsafe {
            if !st.receivers.remove(node) {
                match node.reason() {
                    Reason::Waiting => abandon_partner(node),
                    Reason::Data => {
                        if let Some(v) = node.take_slot() {
                            if keep {
                                kept = Some(v);
                            } else {
                                drop_later = self.give_back_locked(&mut st, v, &mut wakes);
                            }
                            self.taken_locked(&mut st, &mut wakes);
                        }
                    }
                    _ => {}
                }
            }
            node.end_commit()
        };
        drop(st);
        // A sender that handed us a value committed for us; the value went back above
        // (the receive's owner dropped it by its own hand: a cancellation was deferred)
        // or is returned.
        commit.end();
        drop(drop_later);
        kept
    }

    /// One poll of a send of `value` whose node is `node`.
    ///
    /// The value waits in the node's slot from the node's making (see `SendFuture`):
    /// while the node is on no list the slot is the future's alone.
    pub(crate) fn poll_send(
        &self,
        node: &Node<T>,
        registered: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), T>> {
        if *registered {
            match node.reason() {
                Reason::Data => {
                    node.reset();
                    *registered = false;
                    // The send is complete and its `Ok` ours: a cancellation deferred by
                    // the receiver's commit takes effect at the task's next wait.
                    end_commit(node);
                    return Poll::Ready(Ok(()));
                }
                Reason::Waiting => {
                    let mut waker = Prepared::new(cx.waker());
                    let mut wakes = WakeBatch::new();
                    let task = self.rendezvous_task(cx);
                    let mut st = self.lock();
                    if node.reason() == Reason::Waiting {
                        // SAFETY: under the lock.
                        if unsafe { node.task_is(task.as_ref()) } {
                            // SAFETY: under the lock.
                            unsafe { node.set_waker(&mut waker, WaitOn::Chan, &mut wakes) };
                            drop(st);
                            return Poll::Pending;
                        }
                        // Polled by another task than the one it was registered for (a
                        // boxed future moved on): a receiver may have passed it over for
                        // that task's cancellation, and nothing would pair it again.
                        // Withdrawn with its value, which stays in the node (nothing
                        // was committed: still waiting), and sent afresh below.
                        // SAFETY: under the lock; a waiting send is on the list.
                        let stale = unsafe {
                            let was_on = st.senders.remove(node);
                            // A plain send is taken off only as it is completed (no
                            // longer `Waiting`), or by its own future.
                            debug_assert!(was_on, "a waiting send off the list");
                            node.end_commit()
                        };
                        drop(st);
                        drop(stale);
                        node.reset();
                        *registered = false;
                        return self.poll_send(node, registered, cx);
                    }
                    drop(st);
                    return self.poll_send(node, registered, cx);
                }
                _ => {
                    // Woken with a reason other than `Data`: the value is still in
                    // the node, which is ours again.
                    *registered = false;
                    end_commit(node);
                    node.reset();
                }
            }
        }
        // SAFETY: not registered: the node is on no list, so its slot is ours alone.
        if unsafe { node.with_slot(|src| self.send_fast_from(src)) } {
            return Poll::Ready(Ok(()));
        }
        // SAFETY: as above.
        let v = unsafe { node.take_slot() }.expect("send polled after completion");
        // After the fast path: a batch costs its drop even when empty.
        let mut waker = Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        match self.try_send_locked(&mut st, v, &mut wakes) {
            Ok(()) => Poll::Ready(Ok(())),
            Err((v, Fail::Closed)) => {
                drop(st);
                Poll::Ready(Err(v))
            }
            Err((v, _)) => {
                // A rendezvous send records its task, for the receiver's commit (see
                // `Node::commit`); buffered sends need not (a send's value is then
                // delivered only into the buffer, never half-sent to a receiver).
                let task = self.rendezvous_task(cx);
                // SAFETY: under the lock; the caller keeps the node pinned until
                // `cancel_send` takes it off.
                let stale = unsafe {
                    node.set_waker(&mut waker, WaitOn::Chan, &mut wakes);
                    node.put_slot(v);
                    st.senders.push_back(node);
                    node.set_task(task)
                };
                *registered = true;
                // Store-buffering with a fast receive (module doc): room freed
                // meanwhile takes the node's value here, or its receiver settles.
                self.publish(&mut st);
                fence(SeqCst);
                self.settle_locked(&mut st, &mut wakes);
                st.wake_observers(true, &mut wakes);
                drop(st);
                drop(stale);
                Poll::Pending
            }
        }
    }

    /// A registered send ends early: its node leaves the list, and its value comes back
    /// unless a receiver took it (to be dropped by the caller, outside the lock).
    pub(crate) fn cancel_send(&self, node: &Node<T>) -> Option<T> {
        let mut st = self.lock();
        // SAFETY: under the lock.
        let (v, commit) = unsafe {
            st.senders.remove(node);
            (node.take_slot(), node.end_commit())
        };
        drop(st);
        // A receiver that took the value committed for us: the send completed, even if
        // its owner no longer looks (the shield it raised ends here).
        commit.end();
        v
    }

    // ---- select's registrations ----

    /// Whether a receive could proceed now: a value, a waiting sender (another
    /// select's too), or the channel closed and drained.
    fn recv_ready_locked(&self, st: &State<T>, own: *const crate::waitlist::Group) -> bool {
        self.is_drained(st)
            || self.has_values(st)
            // SAFETY: the caller holds the lock.
            || unsafe {
                st.senders.any(|n| match n.kind() {
                    // As `try_recv_locked` sees it: a send it would pass over (its
                    // task's cancellation is effective) does not make a receive ready.
                    Kind::Op => n.may_commit(),
                    Kind::Select => !n.same_group(own) && n.is_open(),
                    Kind::Observe => false,
                })
            }
    }

    /// Whether a send could proceed now: room, a waiting receiver (another select's
    /// too), or the channel closed.
    fn send_ready_locked(&self, st: &State<T>, own: *const crate::waitlist::Group) -> bool {
        st.closed
            || self.has_room(st)
            // SAFETY: the caller holds the lock.
            || unsafe {
                st.receivers.any(|n| match n.kind() {
                    // As `take_receiver` sees it (see `recv_ready_locked`).
                    Kind::Op => n.may_commit(),
                    Kind::Select => !n.same_group(own) && n.is_open(),
                    Kind::Observe => false,
                })
            }
    }

    /// Registers `node` (a select's or observer's) on the receivers' (`recv`) or the
    /// senders' list unless the operation could proceed now; `true` means "ready: try
    /// again instead".
    pub(crate) fn register(&self, node: &Node<T>, recv: bool, cx: &Context<'_>) -> bool {
        let mut waker = Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        let ready = if recv {
            self.recv_ready_locked(&st, node.group())
        } else {
            self.send_ready_locked(&st, node.group())
        };
        if ready {
            return true;
        }
        let st = &mut *st;
        let list = if recv {
            &mut st.receivers
        } else {
            &mut st.senders
        };
        // SAFETY: under the lock; the select keeps the node in its block until it is off.
        unsafe {
            node.set_waker(&mut waker, WaitOn::Chan, &mut wakes);
            list.push_back(node);
        }
        if node.kind() == Kind::Observe {
            st.observers += 1;
        }
        // Store-buffering with a fast operation (module doc): what it did meanwhile
        // is seen here, or it sees the node and settles.
        self.publish(st);
        fence(SeqCst);
        if if recv {
            // Drained: a closed channel's receive is selectable (see `Chan::taken`).
            self.has_values(st) || self.is_drained(st)
        } else {
            self.has_room(st)
        } {
            let list = if recv {
                &mut st.receivers
            } else {
                &mut st.senders
            };
            // SAFETY: under the lock; the node was pushed above and nobody took it
            // since (that needs this lock).
            unsafe { list.remove(node) };
            if node.kind() == Kind::Observe {
                st.observers -= 1;
            }
            return true;
        }
        if node.kind() != Kind::Observe {
            // A waiter on one side makes the other side's operation possible (on a
            // rendezvous channel).
            st.wake_observers(!recv, &mut wakes);
        }
        false
    }

    /// Takes a select's node off whichever list it is on (it may be on none).
    pub(crate) fn unregister(&self, node: &Node<T>, recv: bool) {
        let mut st = self.lock();
        let st = &mut *st;
        let list = if recv {
            &mut st.receivers
        } else {
            &mut st.senders
        };
        // SAFETY: under the lock; the node is on this list or none.
        if unsafe { list.remove(node) } && node.kind() == Kind::Observe {
            st.observers -= 1;
        }
    }

    /// Whether a receive could proceed now (for `Select::ready`).
    pub(crate) fn recv_ready(&self, own: *const crate::waitlist::Group) -> bool {
        self.recv_ready_locked(&self.lock(), own)
    }

    /// Whether a send could proceed now (for `Select::ready`).
    pub(crate) fn send_ready(&self, own: *const crate::waitlist::Group) -> bool {
        self.send_ready_locked(&self.lock(), own)
    }

    /// A select's receive tries to complete now; on success the outcome is in `node`.
    pub(crate) fn select_recv_now(&self, node: &Node<T>, pair: bool) -> Option<Won> {
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        match self.try_recv_locked(&mut st, pair.then_some(node), &mut wakes) {
            Ok(v) => {
                self.handed();
                // SAFETY: the node is ours and on no list.
                unsafe { node.put_slot(v) };
                Some(Won::Value)
            }
            Err(Fail::Closed) => Some(Won::Closed),
            Err(Fail::Paired) => Some(Won::Pending),
            Err(Fail::NotReady | Fail::Unpaired) => None,
        }
    }

    /// A select's send tries to secure a way to complete now: a waiting receiver held
    /// for it, or a slot of the buffer.
    pub(crate) fn select_send_now(&self, node: &Node<T>) -> Option<Won> {
        let mut st = self.lock();
        if st.closed {
            return Some(Won::Closed);
        }
        // SAFETY: under the lock.
        if let Some(r) = unsafe { take_receiver(&mut st, node.group()) } {
            // SAFETY: `r` is off its list and held by us; `node` is ours.
            unsafe {
                (*r).set_partner(node);
                node.set_partner(r);
            }
            return Some(Won::Partner);
        }
        if self.has_room(&st) {
            st.reserved += 1;
            // SAFETY: under the lock.
            unsafe { node.set_reserved(true) };
            return Some(Won::Slot);
        }
        None
    }

    /// What a select's node that won holds (after its wake, or while a paired receive
    /// still waits for its value); with `waker`, the node's waker is replaced under the
    /// same lock, so a delivery after this call wakes the caller.
    pub(crate) fn won_state(
        &self,
        node: &Node<T>,
        recv: bool,
        waker: Option<&std::task::Waker>,
    ) -> Option<Won> {
        let mut waker = waker.map(Prepared::new);
        let mut wakes = WakeBatch::new();
        let st = self.lock();
        // SAFETY: under the lock.
        unsafe {
            if let Some(w) = &mut waker {
                node.set_waker(w, WaitOn::Chan, &mut wakes);
            }
            match node.reason() {
                // The close woke every waiting receive, but a receive is done only
                // once the channel is drained: a fast send may have pushed a value
                // just before the close (its settle then finds no receiver on the
                // list), or a value may still be on its way to another receiver. As
                // a plain receive does after a `Close` wake, the select tries again
                // (the round starts afresh and finds the value, or waits for the
                // last `taken`).
                Reason::Close if recv && !self.is_drained(&st) => None,
                Reason::Close => Some(Won::Closed),
                Reason::Data if recv => Some(Won::Value),
                Reason::Data if !node.partner().is_null() => Some(Won::Partner),
                Reason::Data if node.is_reserved() => Some(Won::Slot),
                // A selected send whose partner went away before it delivered.
                Reason::Data => None,
                Reason::Waiting if recv && !node.partner().is_null() => Some(Won::Pending),
                _ => None,
            }
        }
    }

    /// Replaces a registered node's waker.
    pub(crate) fn refresh_waker(&self, node: &Node<T>, waker: &std::task::Waker) {
        let mut waker = Prepared::new(waker);
        let mut wakes = WakeBatch::new();
        let _st = self.lock();
        // SAFETY: under the lock.
        unsafe { node.set_waker(&mut waker, WaitOn::Chan, &mut wakes) };
    }

    /// Completes a selected send with `v`.
    pub(crate) fn complete_send(&self, node: &Node<T>, v: T) -> Result<(), T> {
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        // SAFETY: under the lock; the node is ours (it won), its partner is held by it.
        unsafe {
            let partner = node.partner();
            if !partner.is_null() {
                self.handed();
                node.set_partner(ptr::null());
                (*partner).set_partner(ptr::null());
                (*partner).put_slot(v);
                (*partner).notify(Reason::Data, &mut wakes);
                return Ok(());
            }
            if node.is_reserved() {
                node.set_reserved(false);
                st.reserved -= 1;
            }
        }
        // With a held slot the send goes in; so it does when the slot was taken by a
        // value given back meanwhile, or when the receiver held for it went away after
        // the select committed: the send still completes without waiting, its value
        // going to the next receiver or, failing one, into the buffer whatever the
        // capacity (as a given-back value does).
        self.send_anyway_locked(&mut st, v, &mut wakes)
    }

    /// A value a select's quick pass took ([`Chan::recv_fast_held`], counted in
    /// `in_flight`) goes back, its select's operation not performed: as
    /// [`Chan::release_won`] gives back a node's value.
    pub(crate) fn give_back_held(&self, v: T) {
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        let drop_later = self.give_back_locked(&mut st, v, &mut wakes);
        self.taken_locked(&mut st, &mut wakes);
        drop(st);
        drop(drop_later);
    }

    /// A selected operation that will not be performed lets go of what it holds: a
    /// value goes back, a slot or a held receiver is released, a pairing is undone.
    pub(crate) fn release_won(&self, node: &Node<T>, recv: bool) {
        let mut wakes = WakeBatch::new();
        let mut st = self.lock();
        let mut drop_later = None;
        // SAFETY: under the lock; the node is ours and on no list.
        unsafe {
            if let Some(v) = node.take_slot() {
                drop_later = self.give_back_locked(&mut st, v, &mut wakes);
                if recv {
                    self.taken_locked(&mut st, &mut wakes);
                }
            }
            let partner = node.partner();
            if !partner.is_null() {
                node.set_partner(ptr::null());
                (*partner).set_partner(ptr::null());
                if !recv {
                    // We held a waiting receiver for our send: it must try again.
                    (*partner).notify(Reason::Signal, &mut wakes);
                }
            }
            if node.is_reserved() {
                node.set_reserved(false);
                st.reserved -= 1;
                self.admit_sender(&mut st, &mut wakes);
            }
        }
        drop(st);
        drop(drop_later);
    }
}

/// What the loom models inspect: (waiting receivers, waiting senders, buffered values,
/// reserved slots), counted under the lock.
#[cfg(all(test, loom))]
impl<T> Chan<T> {
    pub(crate) fn census(&self) -> (usize, usize, usize, usize) {
        let st = self.lock();
        let (mut r, mut s) = (0, 0);
        // SAFETY: under the lock.
        unsafe {
            st.receivers.any(|_| {
                r += 1;
                false
            });
            st.senders.any(|_| {
                s += 1;
                false
            });
        }
        (r, s, self.buf_len(&st), st.reserved)
    }
}

/// A value counted in `in_flight` that did not reach its holder: uncounted on drop
/// ([`Chan::recv_fast_held`]).
struct Uncount<'a, T>(&'a Chan<T>);

impl<T> Drop for Uncount<'_, T> {
    fn drop(&mut self) {
        self.0.taken();
    }
}

/// Holds a received value while wakes run; gives it back if one of them panics.
struct GiveBackOnUnwind<'a, T> {
    chan: &'a Chan<T>,
    value: Option<T>,
}

impl<T> Drop for GiveBackOnUnwind<'_, T> {
    fn drop(&mut self) {
        if let Some(v) = self.value.take() {
            let mut wakes = WakeBatch::new();
            let mut st = self.chan.lock();
            let dropped = self.chan.give_back_locked(&mut st, v, &mut wakes);
            drop(st);
            drop(dropped);
        }
    }
}

/// How long a "try" receive, or a blocking select, waits for the value of the select it
/// paired with: the select was woken as the pairing was made and sends within
/// microseconds if anyone runs it.
pub(crate) const PAIRING_PATIENCE: std::time::Duration = std::time::Duration::from_millis(2);

/// The node of [`Chan::try_recv_now`]: if it is left while paired (a panic in the
/// wait), the pairing is undone and a value already delivered goes back.
struct PairedRecv<'a, T> {
    chan: &'a Chan<T>,
    node: Node<T>,
    paired: std::cell::Cell<bool>,
}

impl<T> Drop for PairedRecv<'_, T> {
    fn drop(&mut self) {
        // While unwinding (a waker that panicked while the pairing was made) the flag
        // may not be set yet: undo whatever the node holds.
        if !self.paired.get() && !std::thread::panicking() {
            return;
        }
        let taken = self.node.reason() == Reason::Data
            // SAFETY: after `Data` the node is ours alone.
            && !unsafe { self.node.has_value() };
        if !taken {
            self.chan.cancel_recv(&self.node);
        }
    }
}

/// The owner of a send's node that has seen it completed (or told to retry) ends the
/// receiver's commit: lowers the shield it raised and releases the task reference.
fn end_commit<T>(node: &Node<T>) {
    // SAFETY: the caller owns the node and has seen a reason other than `Waiting`: the
    // waker no longer touches it.
    unsafe { node.end_commit() }.end();
}

/// The first waiting receiver that can take a value now (claimed), off its list.
///
/// # Safety
/// The caller holds the lock of `st`.
unsafe fn take_receiver<T>(
    st: &mut State<T>,
    own: *const crate::waitlist::Group,
) -> Option<*const Node<T>> {
    // SAFETY: the contract.
    unsafe {
        // `commit` after `claim`: only plain receives record a task (a select's nodes
        // never refuse once claimed).
        st.receivers.take_first(|n| {
            n.kind() != Kind::Observe && !n.same_group(own) && n.claim() && n.commit()
        })
    }
}

/// A receiver paired with a selected send goes away: the send will find no partner.
///
/// # Safety
/// The caller holds the lock; `node` is off every list.
unsafe fn abandon_partner<T>(node: &Node<T>) {
    // SAFETY: the contract; the partner is alive until it has let go of us, which
    // takes this same lock.
    unsafe {
        let p = node.partner();
        if !p.is_null() {
            (*p).set_partner(ptr::null());
            node.set_partner(ptr::null());
        }
    }
}

impl<T> State<T> {
    /// The last value on its way to a receiver of a closed channel was taken: the
    /// receivers waiting for it see the channel disconnected now.
    fn wake_closed(&mut self, wakes: &mut WakeBatch) {
        if self.closed {
            self.close_list(true, wakes);
        }
    }

    /// Empties the receivers' (or senders') list, waking with `Close` every node whose
    /// select it can still win (the others belong to selects that completed elsewhere).
    fn close_list(&mut self, receivers: bool, wakes: &mut WakeBatch) {
        let list = if receivers {
            &mut self.receivers
        } else {
            &mut self.senders
        };
        // SAFETY: `self` is behind the lock that owns the list.
        unsafe {
            list.drain(|n| {
                if n.claim() {
                    n.notify(Reason::Close, wakes);
                }
            });
        }
    }

    /// Wakes (with `Signal`) the observer nodes of the receivers' (or senders') list
    /// whose select they can still win.
    fn wake_observers(&mut self, receivers: bool, wakes: &mut WakeBatch) {
        if self.observers == 0 {
            return;
        }
        let list = if receivers {
            &mut self.receivers
        } else {
            &mut self.senders
        };
        // SAFETY: `self` is behind the lock that owns `list`.
        unsafe {
            while let Some(n) = list.take_first(|n| n.kind() == Kind::Observe && n.claim()) {
                self.observers -= 1;
                (*n).notify(Reason::Signal, wakes);
            }
        }
    }
}

/// Drops `buf`'s values one by one, in place; if one's `Drop` panics, the rest are
/// leaked, never dropped twice. In place: a loop that moved each value into a local
/// had a frame the size of `T`, which overflowed a small stack for a channel of big
/// values even when it held none (found in review).
pub(crate) fn drop_leaking_on_panic<T>(buf: VecDeque<T>) {
    if buf.is_empty() {
        return;
    }
    let mut all = Vec::from(buf);
    let (ptr, len) = (all.as_mut_ptr(), all.len());
    // SAFETY: the vector no longer counts its values, so neither this loop's unwinding
    // nor its end drops one of them twice; its buffer is freed when it goes.
    unsafe { all.set_len(0) };
    for i in 0..len {
        // SAFETY: `i < len`: an initialised value, dropped once (the loop moves on).
        unsafe { std::ptr::drop_in_place(ptr.add(i)) };
    }
}

impl<T> Drop for Chan<T> {
    fn drop(&mut self) {
        let buf = {
            let mut st = self.lock();
            self.drain_locked(&mut st)
        };
        drop_leaking_on_panic(buf);
    }
}

/// Counts an end: `true` when it was the last of its side.
pub(crate) fn release_end(count: &AtomicUsize) -> bool {
    count.fetch_sub(1, AcqRel) == 1
}
