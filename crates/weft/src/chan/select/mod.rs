//! `Select`: wait on several channel operations and complete exactly one.
//!
//! A select first makes a quick pass with no node (`Select::quick`); only if that
//! cannot decide does it make a full round. One full round is a [`Group`] and one node
//! per operation (in one block: `nodes.rs`). A round has three steps:
//!
//! 1. **Try**, in a random order (source order for `select_biased!`): each operation
//!    tries to complete, or to secure a way to complete (a send holds a buffer slot or
//!    a waiting receiver), under its channel's lock. The group is not on any list yet,
//!    so nobody else can win it meanwhile.
//! 2. **Register** every node on its channel's list. A channel where the operation
//!    could proceed now (something arrived since step 1, or another select waits
//!    there for us) answers "ready": the select aborts its group (if nobody won it in
//!    between), takes its nodes off and starts a new round, so two selects waiting
//!    for each other never both sleep.
//! 3. **Wait** until someone wins the group. The winner was chosen before the wake
//!    (spec 003), and did the operation's part under the lock (handed a value, held a
//!    slot or a receiver); the select then takes its losing nodes off every list
//!    before it returns (spec 003's cleanup rule).
//!
//! `ready` runs the same rounds with observer nodes, which are told that an operation
//! became possible and are never handed anything.

use std::alloc::Layout;
use std::future::Future;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::core::{Chan, Won};
use super::error::{
    ReadyTimeoutError, RecvError, SelectTimeoutError, SendError, TryReadyError, TrySelectError,
};
use super::timer::{Timer, Watch};
use super::{Receiver, Sender};
use crate::base::Mutex;
use crate::waitlist::{Group, Kind, Node};
use nodes::Nodes;

mod nodes;

/// One operation's side of a select: what its channel type knows how to do.
trait Handle: Send + Sync {
    /// The size and alignment of this operation's select node.
    fn node_layout(&self) -> Layout;
    /// Builds this operation's select node at `at`, for operation `index` of the select
    /// whose group is `group`.
    ///
    /// # Safety
    /// `at` is valid for writes of [`node_layout`](Handle::node_layout) and aligned
    /// for it, and is not used for anything else while the node lives; `group`
    /// outlives the node.
    unsafe fn node_in<'s>(
        &'s self,
        at: *mut u8,
        kind: Kind,
        group: *const Group,
        index: usize,
    ) -> NonNull<dyn OpNode + 's>;
    fn addr(&self) -> *const ();
    /// The first pass of a select (see [`Select::quick`]): a receive that took a value
    /// through its channel's fast path (put in `stash`), or a send that saw room.
    fn try_fast(&self, stash: &mut Stash) -> Fast;
    /// A value the quick pass put in `stash` goes back to the channel (its
    /// `SelectedOperation` was dropped unperformed).
    ///
    /// # Safety
    /// `stash` holds a value this handle's `try_fast` put there, not taken since.
    unsafe fn give_back(&self, stash: &mut Stash);
}

/// Room for the value a select's quick pass takes, inline in the `SelectedOperation`:
/// the pass used to put it in a boxed node, an allocation and a free per selected
/// message. A value that does not fit is boxed here instead (one allocation, as
/// before, for values over [`Stash::BYTES`]).
#[repr(C, align(16))]
struct Stash(std::mem::MaybeUninit<[u8; Stash::BYTES]>);

impl Stash {
    /// Covers the common messages (integers, pointers, `String`, `Vec`, small
    /// structs) without making every `SelectedOperation` large to move.
    const BYTES: usize = 32;

    fn new() -> Stash {
        Stash(std::mem::MaybeUninit::uninit())
    }

    /// Whether a `T` is kept inline (else a `Box<T>` is).
    const fn fits<T>() -> bool {
        std::mem::size_of::<T>() <= Stash::BYTES
            && std::mem::align_of::<T>() <= std::mem::align_of::<Stash>()
    }

    /// Stores `v`. Whatever was there is overwritten, never dropped: the caller knows
    /// the stash holds nothing.
    fn put<T>(&mut self, v: T) {
        let at = self.0.as_mut_ptr();
        if Stash::fits::<T>() {
            // SAFETY: the buffer is `BYTES` long and aligned to 16, and `T` fits in
            // both (`fits`).
            unsafe { at.cast::<T>().write(v) }
        } else {
            // SAFETY: a `Box` is a pointer: it fits (`BYTES >= 8`, align 16).
            unsafe { at.cast::<Box<T>>().write(Box::new(v)) }
        }
    }

    /// Moves the value out.
    ///
    /// # Safety
    /// The stash holds a `T` stored by [`put`](Stash::put) and not taken since; it is
    /// moved out, so it must not be taken again.
    unsafe fn take<T>(&mut self) -> T {
        let at = self.0.as_ptr();
        if Stash::fits::<T>() {
            // SAFETY: the contract: a `T` was written here by `put`.
            unsafe { at.cast::<T>().read() }
        } else {
            // SAFETY: the contract: `put` wrote a `Box<T>` for a `T` that does not fit.
            *unsafe { at.cast::<Box<T>>().read() }
        }
    }
}

/// A value the quick pass took, with the handle of its receiver: given back to the
/// channel if dropped (a `SelectedOperation` dropped unperformed).
struct Quick<'a> {
    stash: Stash,
    handle: &'a dyn Handle,
}

impl Quick<'_> {
    /// The value, for the selected receive.
    ///
    /// # Safety
    /// `T` is the type of the channel whose receiver's `try_fast` filled the stash.
    unsafe fn take<T>(self) -> T {
        let mut this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the contract; `this` is never dropped, so the value is taken once.
        unsafe { this.stash.take() }
    }
}

impl Drop for Quick<'_> {
    fn drop(&mut self) {
        // A `Quick` is dropped only with a stash its handle's `try_fast` filled:
        // `Select::quick` makes it around an empty stash, but writes over it, forgets
        // it, or leaves it in memory its caller never reads unless `try_fast` took a
        // value; and `take` forgets it.
        // SAFETY: so the value `try_fast` put there is still there.
        unsafe { self.handle.give_back(&mut self.stash) }
    }
}

/// The order in which a select's quick pass tried its operations (indices into the
/// select's operations, removed ones included), for the full round after it.
struct Drawn {
    order: [u8; Drawn::MAX],
    len: usize,
}

impl Drawn {
    /// Selects of more operations skip the quick pass.
    const MAX: usize = 32;

    /// Every index in its place: copied whole, where filling it in a loop cost a
    /// select some 25 instructions.
    const IDENTITY: [u8; Drawn::MAX] = {
        let mut a = [0u8; Drawn::MAX];
        let mut i = 0;
        while i < Drawn::MAX {
            a[i] = i as u8;
            i += 1;
        }
        a
    };
}

/// What a first-pass attempt found.
enum Fast {
    /// A receive took a value: it is in the stash.
    Taken,
    /// A send saw room in the buffer ([`Won::Room`]).
    Room,
    NotReady,
    /// Only a full round can tell (a timer, a closed channel, a rendezvous send, a
    /// select's send to pair with).
    Undecided,
}

/// A select's node for one operation.
trait OpNode: Send + Sync {
    /// Step 1: complete (or secure) the operation now; `pair`: a receive may pair
    /// with a waiting select's send (and then waits for its value, `Won::Pending`).
    fn try_now(&self, pair: bool) -> Option<Won>;
    /// Whether the operation could proceed now (for `ready`).
    fn ready_now(&self) -> bool;
    /// Step 2: put the node on its list; `true`: ready, start over instead.
    fn register(&self, cx: &Context<'_>) -> bool;
    fn unregister(&self);
    /// After the group was won for this node: what it holds (see `Chan::won_state`).
    fn won_state(&self, waker: Option<&Waker>) -> Option<Won>;
    /// Won, but will not be performed: give back what it holds.
    fn release(&self);
    fn refresh_waker(&self, waker: &Waker);
    /// When a timer operation fires next.
    fn deadline(&self) -> Option<Instant> {
        None
    }
    /// Whether it is a timer operation (`deadline`, `rearm`).
    fn is_timer(&self) -> bool {
        false
    }
    /// A registered timer operation, woken or not: back on its timer's watchers with
    /// `waker` (a give-back removes them all); `true` if a message was given back
    /// since it looked (look again).
    fn rearm(&self, _waker: &Waker) -> bool {
        false
    }
    /// Makes the node reusable for a new round (it is on no list).
    fn reset(&self);
    /// For a receive paired in step 1: waits a little for the value (`true` if it
    /// came).
    fn await_pairing(&self) -> bool {
        false
    }
    /// The typed node, for `SelectedOperation::recv`/`send`.
    fn as_ptr(&self) -> *const ();
}

struct RecvNode<'a, T> {
    chan: &'a Chan<T>,
    node: Node<T>,
}

struct SendNode<'a, T> {
    chan: &'a Chan<T>,
    node: Node<T>,
}

struct TimerNode<'a> {
    timer: &'a Timer,
    /// The message a select took, with its stamp (`Timer::give_back`).
    fired: Mutex<Option<(Instant, u64)>>,
    /// Its place among the timer's watchers while registered.
    watch: Mutex<Watch>,
}

struct NeverNode;

/// Writes `node` at `at` and returns it as a trait object.
///
/// # Safety
/// As [`Handle::node_in`], for `N`'s layout.
unsafe fn place<'s, N: OpNode + 's>(at: *mut u8, node: N) -> NonNull<dyn OpNode + 's> {
    let p = at.cast::<N>();
    // SAFETY: the contract: `at` is valid for an `N` and aligned for it.
    unsafe { p.write(node) };
    // SAFETY: `at` is not null (valid for writes; a zero-sized node gets an aligned,
    // non-null address inside its block).
    unsafe { NonNull::new_unchecked(p as *mut (dyn OpNode + 's)) }
}

impl<T: Send> Handle for Receiver<T> {
    fn node_layout(&self) -> Layout {
        if self.flavor_chan().is_some() {
            Layout::new::<RecvNode<'_, T>>()
        } else if self.flavor_timer().is_some() {
            Layout::new::<TimerNode<'_>>()
        } else {
            Layout::new::<NeverNode>()
        }
    }
    unsafe fn node_in<'s>(
        &'s self,
        at: *mut u8,
        kind: Kind,
        group: *const Group,
        index: usize,
    ) -> NonNull<dyn OpNode + 's> {
        // Each arm builds the node whose layout `node_layout` gave for this receiver's
        // flavour (which never changes).
        if let Some(chan) = self.flavor_chan() {
            let node = RecvNode {
                chan,
                node: Node::with(kind, group, index),
            };
            // SAFETY: the contract, for this flavour's layout.
            unsafe { place(at, node) }
        } else if let Some((timer, _)) = self.flavor_timer() {
            let node = TimerNode {
                timer,
                fired: Mutex::new(None),
                watch: Mutex::new(Watch::default()),
            };
            // SAFETY: as above.
            unsafe { place(at, node) }
        } else {
            // SAFETY: as above.
            unsafe { place(at, NeverNode) }
        }
    }
    fn addr(&self) -> *const () {
        Receiver::addr(self)
    }
    fn try_fast(&self, stash: &mut Stash) -> Fast {
        let Some(chan) = self.flavor_chan() else {
            return if self.flavor_timer().is_some() {
                Fast::Undecided
            } else {
                Fast::NotReady
            };
        };
        // Where the fast path cannot decide (someone waits), the same try under the
        // lock, still without a node: a value a waiting sender left (a full buffer
        // with its sender queued, a rendezvous sender) is taken here, where it used to
        // cost a full round (a block of nodes, every channel's lock).
        match chan.recv_fast_held().or_else(|()| chan.recv_locked_held()) {
            Ok(Some(v)) => {
                stash.put(v);
                Fast::Taken
            }
            Ok(None) => Fast::NotReady,
            Err(()) => Fast::Undecided,
        }
    }
    unsafe fn give_back(&self, stash: &mut Stash) {
        // SAFETY: the contract: our `try_fast` put a `T` there.
        let v: T = unsafe { stash.take() };
        // Only a channel's `try_fast` stores a value.
        if let Some(chan) = self.flavor_chan() {
            chan.give_back_held(v);
        }
    }
}

impl<T: Send> Handle for Sender<T> {
    fn node_layout(&self) -> Layout {
        Layout::new::<SendNode<'_, T>>()
    }
    unsafe fn node_in<'s>(
        &'s self,
        at: *mut u8,
        kind: Kind,
        group: *const Group,
        index: usize,
    ) -> NonNull<dyn OpNode + 's> {
        let node = SendNode {
            chan: self.chan(),
            node: Node::with(kind, group, index),
        };
        // SAFETY: the contract, for the `SendNode` `node_layout` gave.
        unsafe { place(at, node) }
    }
    fn addr(&self) -> *const () {
        std::ptr::from_ref(self.chan()).cast()
    }
    fn try_fast(&self, _: &mut Stash) -> Fast {
        // As a receive's: under the lock where the fast path cannot tell (a receiver
        // waiting on an empty buffer leaves room).
        let chan = self.chan();
        match chan.send_room_fast().or_else(|()| chan.send_room_locked()) {
            Ok(true) => Fast::Room,
            Ok(false) => Fast::NotReady,
            Err(()) => Fast::Undecided,
        }
    }
    unsafe fn give_back(&self, _: &mut Stash) {
        unreachable!("a send's quick pass stores no value")
    }
}

impl<T: Send> OpNode for RecvNode<'_, T> {
    fn try_now(&self, pair: bool) -> Option<Won> {
        self.chan.select_recv_now(&self.node, pair)
    }
    fn ready_now(&self) -> bool {
        self.chan.recv_ready(self.node.group())
    }
    fn register(&self, cx: &Context<'_>) -> bool {
        self.chan.register(&self.node, true, cx)
    }
    fn unregister(&self) {
        self.chan.unregister(&self.node, true)
    }
    fn won_state(&self, waker: Option<&Waker>) -> Option<Won> {
        self.chan.won_state(&self.node, true, waker)
    }
    fn await_pairing(&self) -> bool {
        self.chan.await_pairing(&self.node) == crate::waitlist::Reason::Data
    }
    fn release(&self) {
        self.chan.release_won(&self.node, true)
    }
    fn refresh_waker(&self, waker: &Waker) {
        self.chan.refresh_waker(&self.node, waker)
    }
    fn reset(&self) {
        self.node.reset()
    }
    fn as_ptr(&self) -> *const () {
        std::ptr::from_ref(self).cast()
    }
}

impl<T: Send> OpNode for SendNode<'_, T> {
    fn try_now(&self, _: bool) -> Option<Won> {
        self.chan.select_send_now(&self.node)
    }
    fn ready_now(&self) -> bool {
        self.chan.send_ready(self.node.group())
    }
    fn register(&self, cx: &Context<'_>) -> bool {
        self.chan.register(&self.node, false, cx)
    }
    fn unregister(&self) {
        self.chan.unregister(&self.node, false)
    }
    fn won_state(&self, waker: Option<&Waker>) -> Option<Won> {
        self.chan.won_state(&self.node, false, waker)
    }
    fn release(&self) {
        self.chan.release_won(&self.node, false)
    }
    fn refresh_waker(&self, waker: &Waker) {
        self.chan.refresh_waker(&self.node, waker)
    }
    fn reset(&self) {
        self.node.reset()
    }
    fn as_ptr(&self) -> *const () {
        std::ptr::from_ref(self).cast()
    }
}

impl OpNode for TimerNode<'_> {
    fn try_now(&self, _: bool) -> Option<Won> {
        let taken = self.timer.try_take_stamped()?;
        *self.fired.lock() = Some(taken);
        Some(Won::Value)
    }
    fn ready_now(&self) -> bool {
        self.timer.is_ready()
    }
    fn register(&self, cx: &Context<'_>) -> bool {
        // Armed first: a message given back after the look below wakes the select.
        self.watch.lock().arm(self.timer, cx.waker());
        self.timer.is_ready()
    }
    fn unregister(&self) {
        self.watch.lock().disarm(self.timer);
    }
    fn won_state(&self, _: Option<&Waker>) -> Option<Won> {
        None
    }
    fn release(&self) {
        if let Some((at, stamp)) = self.fired.lock().take() {
            self.timer.give_back(at, stamp);
        }
    }
    fn refresh_waker(&self, waker: &Waker) {
        self.rearm(waker);
    }
    fn is_timer(&self) -> bool {
        true
    }
    fn rearm(&self, waker: &Waker) -> bool {
        self.watch.lock().arm(self.timer, waker)
    }
    fn deadline(&self) -> Option<Instant> {
        self.timer.deadline()
    }
    fn reset(&self) {}
    fn as_ptr(&self) -> *const () {
        std::ptr::from_ref(self).cast()
    }
}

impl OpNode for NeverNode {
    fn try_now(&self, _: bool) -> Option<Won> {
        None
    }
    fn ready_now(&self) -> bool {
        false
    }
    fn register(&self, _: &Context<'_>) -> bool {
        false
    }
    fn unregister(&self) {}
    fn won_state(&self, _: Option<&Waker>) -> Option<Won> {
        None
    }
    fn release(&self) {}
    fn refresh_waker(&self, _: &Waker) {}
    fn reset(&self) {}
    fn as_ptr(&self) -> *const () {
        std::ptr::from_ref(self).cast()
    }
}

#[derive(Clone, Copy)]
struct Entry<'a> {
    handle: &'a dyn Handle,
    recv: bool,
}

/// A select's operations: inline up to [`Ops::INLINE`], so building a select of a few
/// operations (crossbeam's benchmarks build one per message) allocates nothing; more
/// move to a `Vec`.
#[derive(Clone, Default)]
struct Ops<'a> {
    inline: [Option<Entry<'a>>; Ops::INLINE],
    /// Every operation, once there are more than `INLINE`.
    spill: Vec<Option<Entry<'a>>>,
    /// How many of `inline` are in use; unused once `spill` holds the operations.
    len: u8,
    /// The select's (see [`Select::new_biased`]), kept here so that a `Select` fits
    /// in 128 bytes: one returned by value from a helper that builds it is moved with
    /// a few inline stores, not a call to `memcpy` (some 2% of a selected message).
    biased: bool,
}

impl<'a> Ops<'a> {
    const INLINE: usize = 4;

    /// Inlined: called with an `Entry` just built, which a call would pass through
    /// memory, stored in halves and loaded whole (a stalled store forwarding, about a
    /// fifth of a select's quick receive in a profile).
    #[inline]
    fn push(&mut self, e: Entry<'a>) {
        if self.spill.is_empty() && usize::from(self.len) < Ops::INLINE {
            self.inline[usize::from(self.len)] = Some(e);
            self.len += 1;
            return;
        }
        if self.spill.is_empty() {
            self.spill
                .extend_from_slice(&self.inline[..usize::from(self.len)]);
        }
        self.spill.push(Some(e));
    }
}

impl<'a> std::ops::Deref for Ops<'a> {
    type Target = [Option<Entry<'a>>];
    #[inline]
    fn deref(&self) -> &Self::Target {
        if self.spill.is_empty() {
            &self.inline[..usize::from(self.len)]
        } else {
            &self.spill
        }
    }
}

impl std::ops::DerefMut for Ops<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Self::Target {
        if self.spill.is_empty() {
            &mut self.inline[..usize::from(self.len)]
        } else {
            &mut self.spill
        }
    }
}

/// Waits on several channel operations at once and completes exactly one of them, as
/// crossbeam-channel's `Select` (with [`select_async`](Select::select_async) for async
/// code).
///
/// An operation is added with [`recv`](Select::recv) or [`send`](Select::send), which
/// return its index. A select blocks (by `weft::wait`'s rule: a fiber suspends, a
/// worker goes on with other work, a thread blocks) until one is ready, then returns
/// it as a [`SelectedOperation`] that must be completed with the same receiver or
/// sender. When several are ready, one is chosen at random.
///
/// ```
/// use weft::chan::{unbounded, Select};
/// let (tx1, rx1) = unbounded::<i32>();
/// let (_tx2, rx2) = unbounded::<i32>();
/// tx1.send_blocking(10).unwrap();
/// let mut sel = Select::new();
/// let i1 = sel.recv(&rx1);
/// let _i2 = sel.recv(&rx2);
/// let oper = sel.select();
/// assert_eq!(oper.index(), i1);
/// assert_eq!(oper.recv(&rx1), Ok(10));
/// ```
#[derive(Clone, Default)]
pub struct Select<'a> {
    ops: Ops<'a>,
}

impl std::fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad("Select { .. }")
    }
}

impl<'a> Select<'a> {
    /// An empty select.
    ///
    /// ```
    /// let sel = weft::chan::Select::new();
    /// # drop(sel);
    /// ```
    #[inline]
    pub fn new() -> Select<'a> {
        Select::default()
    }

    /// A select that completes the first ready operation in the order they were
    /// added, instead of a random one.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded::<i32>();
    /// tx.send_blocking(1).unwrap();
    /// tx.send_blocking(2).unwrap();
    /// let mut sel = weft::chan::Select::new_biased();
    /// let first = sel.recv(&rx);
    /// sel.recv(&rx);
    /// assert_eq!(sel.select().index(), first);
    /// # let _ = rx.try_recv();
    /// ```
    pub fn new_biased() -> Select<'a> {
        Select {
            ops: Ops {
                biased: true,
                ..Ops::default()
            },
        }
    }

    /// Adds a receive; returns its index.
    ///
    /// ```
    /// let (_tx, rx) = weft::chan::unbounded::<i32>();
    /// let mut sel = weft::chan::Select::new();
    /// assert_eq!(sel.recv(&rx), 0);
    /// ```
    #[inline]
    pub fn recv<T: Send>(&mut self, r: &'a Receiver<T>) -> usize {
        self.ops.push(Entry {
            handle: r,
            recv: true,
        });
        self.ops.len() - 1
    }

    /// Adds a send; returns its index.
    ///
    /// ```
    /// let (tx, _rx) = weft::chan::unbounded::<i32>();
    /// let mut sel = weft::chan::Select::new();
    /// assert_eq!(sel.send(&tx), 0);
    /// ```
    #[inline]
    pub fn send<T: Send>(&mut self, s: &'a Sender<T>) -> usize {
        self.ops.push(Entry {
            handle: s,
            recv: false,
        });
        self.ops.len() - 1
    }

    /// Removes the operation at `index` (the other indices stay as they are).
    ///
    /// # Panics
    /// If there is no operation at `index`.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded::<i32>();
    /// tx.send_blocking(1).unwrap();
    /// let mut sel = weft::chan::Select::new();
    /// let a = sel.recv(&rx);
    /// let b = sel.recv(&rx);
    /// sel.remove(a);
    /// assert_eq!(sel.select().index(), b);
    /// # let _ = rx.try_recv();
    /// ```
    pub fn remove(&mut self, index: usize) {
        let slot = self
            .ops
            .get_mut(index)
            .filter(|o| o.is_some())
            .expect("no operation has this index");
        *slot = None;
    }

    /// The first pass of a select, without a node or group: the operations in random
    /// order (source order when biased), each receive trying its channel's fast path,
    /// each send looking for room, both under the channel's lock where the fast path
    /// cannot tell (someone waits there). The first that takes a value or sees room is
    /// selected (such a send then completes without waiting whatever came meanwhile:
    /// [`Chan::send_selected`]). The pass stops, leaving the rest to a full round, at
    /// the first operation it cannot decide that way (a timer, a closed channel, a
    /// rendezvous send, a select's send to pair with), so the choice among ready
    /// operations stays as fair as the full round's: that round starts in the same
    /// order. `Err((order, true))` when every operation was found not ready.
    ///
    /// [`Chan::send_selected`]: super::core::Chan::send_selected
    fn quick(
        &self,
        out: &mut MaybeUninit<SelectedOperation<'a>>,
    ) -> Result<(), (Option<Drawn>, bool)> {
        let n = self.ops.len();
        if n > Drawn::MAX {
            return Err((None, false));
        }
        let mut order = Drawn::IDENTITY;
        // The order is drawn as it is walked (Fisher-Yates from the front: position `k`
        // gets a uniform pick among those not placed yet), so the usual select, whose
        // first operation is ready, draws one random number instead of `n - 1`. What
        // is left unplaced when the pass stops is drawn before the order goes to the
        // full round: every order stays equally likely.
        let biased = self.ops.biased;
        let place = |order: &mut [u8; Drawn::MAX], k: usize| {
            if !biased && k + 1 < n {
                order.swap(k, k + below(n - k));
            }
        };
        // The order travels inline: a blocking select repeats this pass while it backs
        // off, and a `Vec` here cost an allocation and a free per pass.
        let end = |mut order: [u8; Drawn::MAX], from: usize, none_ready: bool| {
            for k in from..n {
                place(&mut order, k);
            }
            Err((Some(Drawn { order, len: n }), none_ready))
        };
        for k in 0..n {
            place(&mut order, k);
            let i = usize::from(order[k]);
            let Some(e) = self.ops[i] else { continue };
            // Made where the caller's operation will be, and the value taken straight
            // into its stash: returned up through `Result`s, a just-written operation
            // was copied three times, each copy stalled reading back bytes written a
            // moment before (perf: some 8% of a selected message). Until `try_fast`
            // fills the stash this must not be dropped (see `Quick`'s `Drop`): it is
            // written over at the next operation, its `Quick` forgotten for a send,
            // and the caller reads `out` only on `Ok` (a `MaybeUninit` is never
            // dropped, also not when `try_fast` panics).
            let op = out.write(SelectedOperation {
                index: i,
                won: Won::Value,
                // Filled in below once selected (a virtual call per tried operation).
                addr: std::ptr::null(),
                recv: true,
                node: None,
                quick: Some(Quick {
                    stash: Stash::new(),
                    handle: e.handle,
                }),
                done: false,
            });
            let stash = &mut op.quick.as_mut().expect("made above").stash;
            match e.handle.try_fast(stash) {
                Fast::Taken => {
                    op.addr = e.handle.addr();
                    return Ok(());
                }
                Fast::Room => {
                    op.addr = e.handle.addr();
                    op.won = Won::Room;
                    op.recv = false;
                    // Its stash holds nothing: forgotten, not dropped (a `Quick`'s drop
                    // gives its value back).
                    std::mem::forget(op.quick.take());
                    return Ok(());
                }
                Fast::NotReady => {}
                Fast::Undecided => return end(order, k + 1, false),
            }
        }
        end(order, n, true)
    }

    /// The quick pass, then (if it decided nothing) a machine whose first round tries
    /// the operations in the order the pass drew. With `spin` (a blocking select),
    /// while the pass finds every operation not ready it backs off and tries again
    /// (as a blocking receive does) before the machine registers anything. `Ok`: the
    /// pass wrote the selected operation into `out`.
    // The machine goes back by value: boxing it would add an allocation to every
    // select that waits, and a large `Err` costs nothing on the quick path.
    #[allow(clippy::result_large_err)]
    fn quick_or_machine(
        &self,
        spin: bool,
        out: &mut MaybeUninit<SelectedOperation<'a>>,
    ) -> Result<(), Machine<'a>> {
        // Made at the first pass that finds nothing: `Backoff::new` looks up the
        // current worker, work a select that finds a value at once need not do.
        let mut backoff: Option<crate::fiber::wait::Backoff> = None;
        let (order, none_ready) = loop {
            match self.quick(out) {
                Ok(()) => return Ok(()),
                Err((_, true))
                    if spin
                        && backoff
                            .get_or_insert_with(crate::fiber::wait::Backoff::new)
                            .snooze() => {}
                Err(r) => break r,
            }
        };
        let mut m = Machine::new(self, Kind::Select);
        if let Some(drawn) = order {
            let nodes = m.nodes.as_mut().expect("made just now");
            nodes.set_order(drawn.order[..drawn.len].iter().map(|&i| usize::from(i)));
            m.drawn = true;
        }
        m.none_ready = none_ready;
        Err(m)
    }

    /// [`quick_or_machine`](Self::quick_or_machine) with the operation returned.
    #[allow(clippy::result_large_err)]
    #[inline]
    fn quick_op_or_machine(&self, spin: bool) -> Result<SelectedOperation<'a>, Machine<'a>> {
        let mut out = MaybeUninit::uninit();
        self.quick_or_machine(spin, &mut out)?;
        // SAFETY: `Ok`: the quick pass wrote the selected operation into `out`.
        Ok(unsafe { out.assume_init() })
    }

    /// Completes an operation that is ready now, if any.
    ///
    /// ```
    /// let (_tx, rx) = weft::chan::unbounded::<i32>();
    /// let mut sel = weft::chan::Select::new();
    /// sel.recv(&rx);
    /// assert!(sel.try_select().is_err());
    /// ```
    pub fn try_select(&mut self) -> Result<SelectedOperation<'a>, TrySelectError> {
        let mut m = match self.quick_op_or_machine(false) {
            Ok(op) => return Ok(op),
            Err(m) => m,
        };
        match m.try_phase(true) {
            Some((i, Won::Pending)) => {
                // Paired with a waiting select's send: its value comes at once if its
                // select runs (as in crossbeam); if not, the pairing is undone and the
                // other operations are tried without pairing.
                if m.node(i).await_pairing() {
                    return Ok(m.take_selected(i, Won::Value));
                }
                m.node(i).release();
                m.node(i).reset();
                match m.try_phase(false) {
                    Some((i, won)) => Ok(m.take_selected(i, won)),
                    None => m.try_registered(),
                }
            }
            Some((i, won)) => Ok(m.take_selected(i, won)),
            None => m.try_registered(),
        }
    }

    /// Waits until an operation is ready and selects it.
    ///
    /// # Panics
    /// If no operation was added (it would wait for ever).
    ///
    /// ```
    /// let (tx, rx) = weft::chan::bounded(0);
    /// std::thread::spawn(move || tx.send_blocking(1).unwrap());
    /// let mut sel = weft::chan::Select::new();
    /// let i = sel.recv(&rx);
    /// let oper = sel.select();
    /// assert_eq!(oper.index(), i);
    /// assert_eq!(oper.recv(&rx), Ok(1));
    /// ```
    #[inline]
    pub fn select(&mut self) -> SelectedOperation<'a> {
        assert!(
            self.ops.iter().any(|o| o.is_some()),
            "no operations have been added to `Select`"
        );
        let mut out = MaybeUninit::uninit();
        let mut m = match self.quick_or_machine(true, &mut out) {
            // SAFETY: `Ok`: the quick pass wrote the selected operation into `out`.
            Ok(()) => return unsafe { out.assume_init() },
            Err(m) => m,
        };
        let (i, won) = m
            .run_blocking(None)
            .expect("a select without a deadline selects");
        m.take_selected(i, won)
    }

    /// As [`select`](Select::select), giving up after `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (_tx, rx) = weft::chan::unbounded::<i32>();
    /// let mut sel = weft::chan::Select::new();
    /// sel.recv(&rx);
    /// assert!(sel.select_timeout(Duration::from_millis(5)).is_err());
    /// ```
    pub fn select_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<SelectedOperation<'a>, SelectTimeoutError> {
        match Instant::now().checked_add(timeout) {
            Some(d) => self.select_deadline(d),
            None => Ok(self.select()),
        }
    }

    /// As [`select`](Select::select), giving up at `deadline`.
    ///
    /// ```
    /// let (_tx, rx) = weft::chan::unbounded::<i32>();
    /// let mut sel = weft::chan::Select::new();
    /// sel.recv(&rx);
    /// assert!(sel.select_deadline(std::time::Instant::now()).is_err());
    /// ```
    pub fn select_deadline(
        &mut self,
        deadline: Instant,
    ) -> Result<SelectedOperation<'a>, SelectTimeoutError> {
        let mut m = match self.quick_op_or_machine(Instant::now() < deadline) {
            Ok(op) => return Ok(op),
            Err(m) => m,
        };
        match m.run_blocking(Some(deadline)) {
            Some((i, won)) => Ok(m.take_selected(i, won)),
            None => Err(SelectTimeoutError),
        }
    }

    /// Waits, as a future, until an operation is ready and selects it: the form for
    /// async code (a `Send` future).
    ///
    /// # Panics
    /// If no operation was added (it would wait for ever).
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::unbounded::<i32>();
    /// let got = rt.block_on(async move {
    ///     weft::spawn(async move { tx.send(4).await.unwrap() });
    ///     let mut sel = weft::chan::Select::new();
    ///     sel.recv(&rx);
    ///     let oper = sel.select_async().await;
    ///     oper.recv(&rx).unwrap()
    /// });
    /// assert_eq!(got, 4);
    /// ```
    #[inline]
    pub fn select_async(&mut self) -> impl Future<Output = SelectedOperation<'a>> + Send + '_ {
        assert!(
            self.ops.iter().any(|o| o.is_some()),
            "no operations have been added to `Select`"
        );
        let sel = &*self;
        // Boxed: a select that waits allocates anyway, and inline the machine made the
        // future 256 bytes, copied into the awaiting task's state on every select.
        let mut m: Option<Box<Machine<'a>>> = None;
        let mut alarm: Option<super::timer::Alarm> = None;
        std::future::poll_fn(move |cx| loop {
            let m = match &mut m {
                Some(m) => m,
                None => {
                    let mut out = MaybeUninit::uninit();
                    match sel.quick_or_machine(false, &mut out) {
                        // SAFETY: `Ok`: the quick pass wrote the selected operation.
                        Ok(()) => return Poll::Ready(unsafe { out.assume_init() }),
                        Err(machine) => m.insert(Box::new(machine)),
                    }
                }
            };
            if let Poll::Ready(r) = m.poll(cx, false) {
                let (i, won) = r.expect("a select without a deadline selects");
                return Poll::Ready(m.take_selected(i, won));
            }
            // Timer operations: an alarm (the runtime's wheel, or the alarm thread
            // off a runtime) until the next one.
            let Some(d) = m.next_timer() else {
                return Poll::Pending;
            };
            let a = alarm.get_or_insert_with(|| super::timer::Alarm::new(d));
            if a.poll(d, cx).is_pending() {
                return Poll::Pending;
            }
        })
    }

    /// Which operation is ready now, without performing it.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// let mut sel = weft::chan::Select::new();
    /// let i = sel.recv(&rx);
    /// assert!(sel.try_ready().is_err());
    /// tx.send_blocking(1).unwrap();
    /// assert_eq!(sel.try_ready(), Ok(i));
    /// ```
    pub fn try_ready(&mut self) -> Result<usize, TryReadyError> {
        let mut m = Machine::new(self, Kind::Observe);
        m.try_phase(false).map(|(i, _)| i).ok_or(TryReadyError)
    }

    /// Waits until an operation is ready and returns its index, without performing it
    /// (another thread may take it first: performing it may then wait).
    ///
    /// # Panics
    /// If no operation was added.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// tx.send_blocking(1).unwrap();
    /// let mut sel = weft::chan::Select::new();
    /// let i = sel.recv(&rx);
    /// assert_eq!(sel.ready(), i);
    /// ```
    pub fn ready(&mut self) -> usize {
        assert!(
            self.ops.iter().any(|o| o.is_some()),
            "no operations have been added to `Select`"
        );
        let mut m = Machine::new(self, Kind::Observe);
        m.run_blocking(None).expect("no deadline").0
    }

    /// As [`ready`](Select::ready), giving up after `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (_tx, rx) = weft::chan::unbounded::<i32>();
    /// let mut sel = weft::chan::Select::new();
    /// sel.recv(&rx);
    /// assert!(sel.ready_timeout(Duration::from_millis(2)).is_err());
    /// ```
    pub fn ready_timeout(&mut self, timeout: Duration) -> Result<usize, ReadyTimeoutError> {
        match Instant::now().checked_add(timeout) {
            Some(d) => self.ready_deadline(d),
            None => Ok(self.ready()),
        }
    }

    /// As [`ready`](Select::ready), giving up at `deadline`.
    ///
    /// ```
    /// let (_tx, rx) = weft::chan::unbounded::<i32>();
    /// let mut sel = weft::chan::Select::new();
    /// sel.recv(&rx);
    /// assert!(sel.ready_deadline(std::time::Instant::now()).is_err());
    /// ```
    pub fn ready_deadline(&mut self, deadline: Instant) -> Result<usize, ReadyTimeoutError> {
        let mut m = Machine::new(self, Kind::Observe);
        m.run_blocking(Some(deadline))
            .map(|(i, _)| i)
            .ok_or(ReadyTimeoutError)
    }
}

/// One select call: its group, its nodes, and where it stands.
struct Machine<'a> {
    ops: Ops<'a>,
    /// The group, the nodes and the order of the next round, in one block; `None`
    /// once handed to the selected operation (every node is then off every list).
    nodes: Option<Nodes<'a>>,
    biased: bool,
    kind: Kind,
    registered: bool,
    /// A receive paired with a waiting select's send in step 1: the select waits for
    /// that value (no other node is registered meanwhile).
    paired: Option<usize>,
    /// For a blocking select (`run_blocking`): until when it waits for a paired value
    /// before it undoes the pairing, as a "try" does (`PAIRING_PATIENCE`). The future
    /// of a paired `select_async` may be held, unpolled, by the very thread that now
    /// blocks (found in review: that select waited for ever, its other operations
    /// ready); crossbeam never pairs a thread with itself, but weft's partners may be
    /// tasks and fibers, so it bounds the wait instead. An async select waits as long
    /// as its partner (`None`): its own task polls both.
    pair_until: Option<Instant>,
    /// Some operation is a timer's (looked at on every round; a select of channels
    /// only skips them).
    timers: bool,
    waker: Option<Waker>,
    /// The order of the next round was drawn already (by the quick pass).
    drawn: bool,
    /// The quick pass just found every operation not ready: the first round registers
    /// without trying them again under their locks. What became ready since is not
    /// missed: a node whose operation could proceed answers "ready" when it registers
    /// and the round starts over, trying every operation. (A pass says "not ready" for
    /// a receive only where nothing could be taken and no select's send waits to pair
    /// with, `Chan::recv_locked_held` answering "undecided" there, and for a send only
    /// where it saw no room: a receiver the round's try could have held for it is seen
    /// at registration, as ready.)
    none_ready: bool,
}

impl<'a> Machine<'a> {
    fn new(sel: &Select<'a>, kind: Kind) -> Machine<'a> {
        let nodes = Nodes::new(&sel.ops, kind);
        let timers = nodes.each().any(|(_, n)| n.is_timer());
        Machine {
            ops: sel.ops.clone(),
            nodes: Some(nodes),
            timers,
            biased: sel.ops.biased,
            kind,
            registered: false,
            paired: None,
            pair_until: None,
            waker: None,
            drawn: false,
            none_ready: false,
        }
    }

    /// The block, while the machine has it (until `take_selected`).
    fn block(&self) -> &Nodes<'a> {
        self.nodes.as_ref().expect("the select's nodes")
    }

    fn group(&self) -> &Group {
        self.block().group()
    }

    fn each(&self) -> impl Iterator<Item = (usize, &(dyn OpNode + 'a))> + '_ {
        self.nodes.iter().flat_map(Nodes::each)
    }

    fn node(&self, i: usize) -> &(dyn OpNode + 'a) {
        self.block().node(i).expect("an operation of this select")
    }

    fn order(&self) -> &[usize] {
        self.block().order()
    }

    fn shuffle(&mut self) {
        if self.biased || std::mem::take(&mut self.drawn) {
            return;
        }
        let order = self.nodes.as_mut().expect("the select's nodes").order_mut();
        for i in (1..order.len()).rev() {
            let j = below(i + 1);
            order.swap(i, j);
        }
    }

    /// Step 1.
    fn try_phase(&mut self, pair: bool) -> Option<(usize, Won)> {
        self.shuffle();
        for k in 0..self.order().len() {
            let i = self.order()[k];
            let node = self.node(i);
            if self.kind == Kind::Observe {
                if node.ready_now() {
                    return Some((i, Won::Value));
                }
            } else {
                // A try that took a value (or paired) and then unwinds (the wake of the
                // sender it met panicked) gives back what the node holds: nothing in
                // the machine says so, and a caller that catches the panic drops the
                // machine later, not while unwinding (its drop would drop the value).
                let guard = ReleaseOnUnwind(node);
                let won = node.try_now(pair);
                std::mem::forget(guard);
                if let Some(won) = won {
                    return Some((i, won));
                }
            }
        }
        None
    }

    fn next_timer(&self) -> Option<Instant> {
        if !self.timers {
            return None;
        }
        self.each().filter_map(|(_, n)| n.deadline()).min()
    }

    /// For a registered round: re-arms the timer operations (a give-back that woke
    /// this select took them off their watchers); whether one was given back since
    /// it looked, or is due now.
    fn rearm_timers(&mut self, waker: &Waker) -> bool {
        if !self.timers {
            return false;
        }
        // Without a kept waker meanwhile: a `clone` that panics there leaves the round
        // to start over (see `cut_short` in `poll`).
        let kept = self.waker.take();
        let now = Instant::now();
        let due = self.each().fold(false, |due, (_, n)| {
            n.rearm(waker) | due || n.deadline().is_some_and(|d| now >= d)
        });
        self.waker = kept;
        due
    }

    /// Takes every node off its list and makes the group and nodes ready for a new
    /// round.
    fn unregister_all(&mut self) {
        for (_, n) in self.each() {
            n.unregister();
        }
        for (_, n) in self.each() {
            n.reset();
        }
        self.group().reset();
        self.registered = false;
    }

    /// One step of the select. `give_up`: no more waiting (a deadline passed): end the
    /// round with what is there, `None` if nothing.
    fn poll(&mut self, cx: &mut Context<'_>, give_up: bool) -> Poll<Option<(usize, Won)>> {
        loop {
            if let Some(i) = self.paired {
                let patient = self.pair_until.is_none_or(|d| Instant::now() < d);
                match self.node(i).won_state(Some(cx.waker())) {
                    Some(Won::Pending) if !give_up && patient => return Poll::Pending,
                    Some(won @ (Won::Value | Won::Closed)) => {
                        self.paired = None;
                        self.pair_until = None;
                        return Poll::Ready(Some((i, won)));
                    }
                    // The sending select withdrew (or we give up waiting for it).
                    _ => {
                        self.node(i).release();
                        self.node(i).reset();
                        self.paired = None;
                        self.pair_until = None;
                        if give_up {
                            return Poll::Ready(self.try_phase(false));
                        }
                        continue;
                    }
                }
            }
            if self.registered {
                if let Some(i) = self.group().winner() {
                    for (j, n) in self.each() {
                        if j != i {
                            n.unregister();
                        }
                    }
                    if self.kind == Kind::Observe {
                        self.node(i).unregister();
                        self.registered = false;
                        return Poll::Ready(Some((i, Won::Value)));
                    }
                    match self.node(i).won_state(Some(cx.waker())) {
                        Some(Won::Pending) if !give_up => return Poll::Pending,
                        Some(Won::Pending) | None => {
                            // Our partner let us go (or we give up waiting for it).
                            self.node(i).release();
                            self.unregister_all();
                            if give_up {
                                return Poll::Ready(self.try_phase(false));
                            }
                            continue;
                        }
                        Some(won) => {
                            self.registered = false;
                            return Poll::Ready(Some((i, won)));
                        }
                    }
                }
                let timer_due = self.rearm_timers(cx.waker());
                // No waker kept while registered: a registration or a refresh was cut
                // short by a waker's `clone` that panicked, and some nodes may be off
                // their lists or hold an older waker. The round starts again.
                let cut_short = self.waker.is_none();
                if !give_up && !timer_due && !cut_short {
                    if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        // Forgotten first: see `cut_short`.
                        self.waker = None;
                        for (_, n) in self.each() {
                            n.refresh_waker(cx.waker());
                        }
                        self.waker = Some(cx.waker().clone());
                        // A winner that claimed a node before its waker was replaced
                        // woke the old waker only: look again (a claim made after a
                        // node's refresh wakes the new one; one made before it is
                        // seen here, the refresh having taken the claimant's lock).
                        if !self.group().is_open() {
                            continue;
                        }
                    }
                    return Poll::Pending;
                }
                match self.group().abort() {
                    Ok(()) => self.unregister_all(),
                    // Won just now: take it.
                    Err(_) => continue,
                }
            }
            if std::mem::take(&mut self.none_ready) && !give_up {
                // Registered in the pass's order; a round that starts over draws anew.
                self.drawn = false;
            } else {
                match self.try_phase(!give_up) {
                    Some((i, Won::Pending)) => {
                        self.paired = Some(i);
                        continue;
                    }
                    Some(r) => return Poll::Ready(Some(r)),
                    None => {}
                }
            }
            if give_up {
                return Poll::Ready(None);
            }
            self.registered = true;
            // Kept once every node is registered (see `cut_short`).
            self.waker = None;
            let mut ready = false;
            for k in 0..self.order().len() {
                if self.node(self.order()[k]).register(cx) {
                    ready = true;
                    break;
                }
            }
            self.waker = Some(cx.waker().clone());
            if ready {
                if self.group().abort().is_ok() {
                    self.unregister_all();
                }
                continue;
            }
            if !self.group().is_open() {
                continue;
            }
            return Poll::Pending;
        }
    }

    /// The end of `try_select` when one pass found nothing: the operations are tried in
    /// turn, so one that became ready behind the pass (while another that was ready went
    /// away) would be missed. Registering every node and then giving up settles it: an
    /// operation that became ready meanwhile either answers "ready" when its node
    /// registers or wins the group, so `try_select` fails only if at one moment none
    /// was ready (crossbeam's `linearizable_try`).
    fn try_registered(&mut self) -> Result<SelectedOperation<'a>, TrySelectError> {
        let mut cx = Context::from_waker(Waker::noop());
        // A receive paired in this round would wait for its partner's value: giving up
        // undoes the pairing at once.
        let r = match self.poll(&mut cx, false) {
            Poll::Ready(r) => r,
            Poll::Pending => self.give_up(),
        };
        r.map(|(i, won)| self.take_selected(i, won))
            .ok_or(TrySelectError)
    }

    /// Ends the round without waiting (a deadline passed): what is there, if anything.
    fn give_up(&mut self) -> Option<(usize, Won)> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.poll(&mut cx, true) {
            Poll::Ready(r) => r,
            Poll::Pending => unreachable!("a select that gives up does not wait"),
        }
    }

    /// Runs rounds until an operation is selected, blocking by `weft::wait`'s rule;
    /// `None` once `deadline` passed with none.
    fn run_blocking(&mut self, deadline: Option<Instant>) -> Option<(usize, Won)> {
        loop {
            let wake_at = match (deadline, self.next_timer()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let wake_at = match (wake_at, self.pair_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // `Ready(None)`: a pairing began in this wait; the next wait is bounded by
            // its patience (`pair_until`). Not under loom, whose models have no clock
            // (a timed wait there returns at once, and the patience became a spin the
            // model could not finish): there the pairing waits as an async select's.
            let mut fut = std::pin::pin!(std::future::poll_fn(|cx| {
                match self.poll(cx, false) {
                    Poll::Ready(r) => Poll::Ready(Some(r)),
                    Poll::Pending
                        if !cfg!(loom) && self.paired.is_some() && self.pair_until.is_none() =>
                    {
                        self.pair_until = Some(Instant::now() + super::core::PAIRING_PATIENCE);
                        Poll::Ready(None)
                    }
                    Poll::Pending => Poll::Pending,
                }
            }));
            let r = match wake_at {
                None => Some(wait(fut)),
                Some(d) => crate::fiber::wait::wait_until(fut.as_mut(), d),
            };
            match r {
                Some(Some(r)) => return r,
                Some(None) => {}
                None if deadline.is_some_and(|d| Instant::now() >= d) => return self.give_up(),
                // A timer operation is due: the next round takes it.
                None => {}
            }
        }
    }

    /// The selected operation, which takes the block along (its node lives there). The
    /// machine keeps nothing of it: every node is off every list by now (the winner
    /// taken off by whoever won it, the losers by the round's cleanup, or none
    /// registered in a round won in step 1), so the machine's drop has nothing to undo.
    fn take_selected(&mut self, index: usize, won: Won) -> SelectedOperation<'a> {
        let entry = self.ops[index].expect("the selected operation");
        SelectedOperation {
            index,
            won,
            addr: entry.handle.addr(),
            recv: entry.recv,
            node: self.nodes.take(),
            quick: None,
            done: false,
        }
    }
}

impl Drop for Machine<'_> {
    fn drop(&mut self) {
        // Every node leaves its list before any node gives back what it holds: a
        // release wakes whoever it lets go (a partner held for a send, a receiver
        // handed a given-back value), and a waker may panic. Left on a list, a node
        // would be followed there after the block is freed with the machine.
        if std::thread::panicking() {
            // A waker or a clone panicked in the middle of a step: the flags below may
            // lag behind what the nodes hold (a pairing made, a value handed over).
            // Every node leaves its list and gives back what it holds.
            for (_, n) in self.each() {
                n.unregister();
            }
            if self.kind != Kind::Observe {
                for (_, n) in self.each() {
                    n.release();
                }
            }
            return;
        }
        let Some(nodes) = &self.nodes else {
            return;
        };
        let mut winner = None;
        if self.registered {
            if nodes.group().abort().is_err() {
                // Won while being dropped: let go of what the winner holds (below).
                winner = nodes.group().winner();
            }
            for (_, n) in self.each() {
                n.unregister();
            }
        }
        if let Some(i) = self.paired {
            if let Some(n) = nodes.node(i) {
                n.release();
            }
        }
        if self.kind != Kind::Observe {
            if let Some(n) = winner.and_then(|i| nodes.node(i)) {
                n.release();
            }
        }
    }
}

/// Releases a node if dropped: armed around a try whose outcome the machine has not
/// recorded yet, and forgotten once it returns.
struct ReleaseOnUnwind<'n, 'a>(&'n (dyn OpNode + 'a));

impl Drop for ReleaseOnUnwind<'_, '_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// The operation a [`Select`] chose: complete it with [`recv`](Self::recv) or
/// [`send`](Self::send), passing the same receiver or sender that was added. Dropping
/// it unperformed gives back what it held (a received value returns to its channel).
///
/// Do not leak one (`mem::forget`): a received value it holds is counted as on its way
/// to a receiver until it is taken or given back, so once the channel closes, its other
/// receivers wait for that value for ever instead of seeing it disconnected (as a
/// leaked `MutexGuard` keeps its lock).
///
/// ```
/// let (tx, rx) = weft::chan::bounded(1);
/// let mut sel = weft::chan::Select::new();
/// let i = sel.send(&tx);
/// let oper = sel.select();
/// assert_eq!(oper.index(), i);
/// oper.send(&tx, 5).unwrap();
/// assert_eq!(rx.recv_blocking(), Ok(5));
/// ```
#[must_use = "a selected operation must be completed with `recv` or `send`"]
pub struct SelectedOperation<'a> {
    index: usize,
    won: Won,
    addr: *const (),
    recv: bool,
    /// The block of the select's nodes, for an operation a full round selected (its
    /// node is the one at `index`). The group and the losing nodes come along, inert:
    /// only a node found on a wait list (under that list's lock) has its group followed
    /// (`Node::claim`, `Node::is_open`), and every node of the select is off every list
    /// before the select returns (the winner taken off by whoever won it, the losers by
    /// the select's cleanup). What the selected node still holds (a value, a held
    /// slot, a held partner's address) is its own, not the group's.
    node: Option<Nodes<'a>>,
    /// The value of a receive the quick pass selected (no node).
    quick: Option<Quick<'a>>,
    done: bool,
}

// SAFETY: `addr` is only compared, never followed; the node is `Send + Sync` (by
// `OpNode`'s bounds); the quick pass's value is a `T: Send` of a channel (its handle is
// `Send + Sync`), reached only through `&mut self` or `self` (`recv`, drop), never
// through a shared reference.
unsafe impl Send for SelectedOperation<'_> {}
// SAFETY: as above.
unsafe impl Sync for SelectedOperation<'_> {}

impl std::fmt::Debug for SelectedOperation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectedOperation")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl SelectedOperation<'_> {
    /// The index of the selected operation.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// tx.send_blocking(()).unwrap();
    /// let mut sel = weft::chan::Select::new();
    /// let i = sel.recv(&rx);
    /// let oper = sel.select();
    /// assert_eq!(oper.index(), i);
    /// oper.recv(&rx).unwrap();
    /// ```
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    fn node(&self) -> &dyn OpNode {
        self.node
            .as_ref()
            .and_then(|n| n.node(self.index))
            .expect("the selected node")
    }

    /// Completes the selected receive.
    ///
    /// # Panics
    /// If `r` is not the receiver of the selected operation.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// tx.send_blocking(3).unwrap();
    /// let mut sel = weft::chan::Select::new();
    /// sel.recv(&rx);
    /// assert_eq!(sel.select().recv(&rx), Ok(3));
    /// ```
    #[inline]
    pub fn recv<T: Send>(mut self, r: &Receiver<T>) -> Result<T, RecvError> {
        assert!(
            self.recv && r.addr() == self.addr,
            "passed a receiver that wasn't selected"
        );
        self.done = true;
        if let Some(q) = self.quick.take() {
            // The quick pass filled the stash from the channel of the receiver it was
            // selected through, with that channel's `T`. `r` may be a clone, but the
            // check above found `r`'s channel at the same address while both are alive
            // (the operation borrows its receiver for `'a`, `r` is borrowed here): the
            // same allocation. A timer's address is its own `Arc` and never fills the
            // stash; `never()`'s is null.
            // SAFETY: as just argued, the stash holds a `T` of `r`'s channel.
            let v: T = unsafe { q.take() };
            if let Some(chan) = r.flavor_chan() {
                chan.taken();
            }
            return Ok(v);
        }
        if let Some((_, convert)) = r.flavor_timer() {
            let node = self.node().as_ptr().cast::<TimerNode<'_>>();
            // SAFETY: the selected operation is a receive on this very timer receiver
            // (checked above), whose nodes are `TimerNode`s; the box lives in `self`.
            let fired = unsafe { (*node).fired.lock().take() };
            return Ok(convert(fired.expect("a selected timer fired").0));
        }
        let node = self.node().as_ptr().cast::<RecvNode<'_, T>>();
        // SAFETY: the selected operation is a receive on this very channel (checked
        // above: same kind, same channel address, so the same `T`), whose select nodes
        // are `RecvNode<T>`; the box lives in `self`.
        let node = unsafe { &*node };
        match self.won {
            Won::Closed => Err(RecvError),
            // A select waits inside itself for the value of a paired sender, and
            // `try_select` for a short while (undoing the pairing if it does not come).
            Won::Pending => unreachable!("a paired receive is selected only with its value"),
            // SAFETY: the value was handed to our node, which is ours alone now.
            _ => match unsafe { node.node.take_slot() } {
                Some(v) => {
                    node.chan.taken();
                    Ok(v)
                }
                None => Err(RecvError),
            },
        }
    }

    /// Completes the selected send with `value`.
    ///
    /// # Panics
    /// If `s` is not the sender of the selected operation.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// let mut sel = weft::chan::Select::new();
    /// sel.send(&tx);
    /// sel.select().send(&tx, 8).unwrap();
    /// assert_eq!(rx.try_recv(), Ok(8));
    /// ```
    #[inline]
    pub fn send<T: Send>(mut self, s: &Sender<T>, value: T) -> Result<(), SendError<T>> {
        assert!(
            !self.recv && std::ptr::from_ref(s.chan()).cast() == self.addr,
            "passed a sender that wasn't selected"
        );
        self.done = true;
        match self.won {
            Won::Closed => return Err(SendError(value)),
            Won::Room => return s.chan().send_selected(value).map_err(SendError),
            _ => {}
        }
        let node = self.node().as_ptr().cast::<SendNode<'_, T>>();
        // SAFETY: the selected operation is a send on this very channel (checked
        // above), whose select nodes are `SendNode<T>`; the box lives in `self`.
        let node = unsafe { &*node };
        match node.chan.complete_send(&node.node, value) {
            Ok(()) => Ok(()),
            Err(v) if s.is_closed() => Err(SendError(v)),
            // The receiver held for us went away: send the ordinary way.
            Err(v) => send_again(s, v),
        }
    }
}

impl Drop for SelectedOperation<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Some(n) = self.node.as_ref().and_then(|n| n.node(self.index)) {
                n.release();
            }
        }
    }
}

/// `weft::wait`: the select's blocking wait (an untimed select).
#[cfg(not(all(test, loom)))]
fn wait<F: Future>(f: F) -> F::Output {
    crate::wait(f)
}

/// In the loom models, which must not block a model thread on a real futex (nor keep
/// loom objects in a thread-local across executions), the models' own hand-polling.
#[cfg(all(test, loom))]
fn wait<F: Future>(f: F) -> F::Output {
    crate::base::loom_harness::block_on(f)
}

/// A selected send that lost the receiver held for it sends the ordinary way.
#[cfg(not(all(test, loom)))]
fn send_again<T>(s: &Sender<T>, v: T) -> Result<(), SendError<T>> {
    s.send_blocking(v)
}

/// As above, polled by hand in the loom models.
#[cfg(all(test, loom))]
fn send_again<T>(s: &Sender<T>, v: T) -> Result<(), SendError<T>> {
    wait(s.send(v))
}

/// A random index below `n` (`n <= 2^32`), by multiplying instead of dividing (a
/// 64-bit division costs tens of cycles, and a select shuffles on every call): the
/// high 32 bits of the generator, scaled to `n`.
fn below(n: usize) -> usize {
    (((random() >> 32) * n as u64) >> 32) as usize
}

/// Under loom every execution is replayed: the order must not depend on the clock or
/// on the OS thread (loom runs every model thread on one), so it is fixed.
#[cfg(loom)]
fn random() -> u64 {
    0x9e37_79b9_7f4a_7c15
}

/// A per-thread xorshift generator for the random order of select's operations.
#[cfg(not(loom))]
#[inline(never)] // It reads a thread-local (see `scheduler::worker::current_cell`).
fn random() -> u64 {
    thread_local! {
        static STATE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    STATE
        .try_with(|s| {
            let mut x = s.get();
            if x == 0 {
                x = (std::ptr::from_ref(s) as u64) | 1;
                x ^= std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                x |= 1;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.set(x);
            x
        })
        .unwrap_or(0x9e37_79b9_7f4a_7c15)
}
