//! The futures of `send` and `recv`: each owns the wait node it puts on the channel's
//! list, so the node lives exactly as long as the wait and leaves the list in `Drop`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::core::Chan;
use super::error::{RecvError, SendError};
use super::timer::Timer;
use crate::base::Arc;
use crate::waitlist::Node;

/// The future of [`Sender::send`](super::Sender::send).
#[must_use = "futures do nothing unless awaited"]
pub struct SendFuture<'a, T> {
    chan: &'a Chan<T>,
    state: SendState<T>,
}

/// Where a send's value is: one place at a time, so the future is not twice the
/// value's size (a future is moved whole at least once, into `wait` or a task, and a
/// 32 KiB value cost two extra copies when the future held it beside its node).
enum SendState<T> {
    /// Not yet waited: the value (`None` once sent through the fast path). A send
    /// that finds room never makes a node: making one (and moving it into the
    /// caller's future) was a large part of a send in a task.
    Value(Held<T>),
    /// Waiting, or about to: the value in the node's slot until a receiver takes it.
    Node { node: Node<T>, registered: bool },
}

/// A send's value before it waits, at least [`COPY_GAP`] bytes into its future.
///
/// Why: `async fn put(tx: &Sender<Buf>, b: Buf) { tx.send(b).await; }` lays out `b`
/// and then the `SendFuture` it moves into, so the move copies `b` to an address
/// `size_of::<Buf>()` plus the value's offset in the future above its source. On AMD
/// Zen CPUs with fast `rep movsb` (glibc uses it for copies of a few KiB and more), a
/// copy whose destination lies 1 to 31 bytes past a multiple of 4 KiB above its source
/// runs about 18 times slower: a 32 KiB copy took 11-13 µs instead of 0.63-0.74 µs on
/// this project's machine (an AMD EPYC). With the value 16 bytes in, as it was, a
/// 32 KiB buffer sent that way paid that once per send: the sync suite's
/// `mpsc_send_large_1000` spent 37% of its time in that one copy. A buffer whose size
/// is a multiple of 4 KiB is the usual case, so the value now starts past the danger.
/// The room is in this variant only, which the node's variant outsizes anyway: the
/// future is no larger for it (a larger one cost a task's send and receive about 9
/// instructions more, moving and laying it out).
// `C`: the room stays before the value.
#[repr(C)]
struct Held<T> {
    _room: Room,
    value: Option<T>,
}

/// Never read: bytes that keep what follows them [`COPY_GAP`] bytes further on.
#[derive(Clone, Copy)]
#[allow(dead_code)] // never read: room only
struct Room([std::mem::MaybeUninit<u8>; COPY_GAP]);

/// The least offset of a send's value in its future (see [`Held`]).
const COPY_GAP: usize = 40;

impl<'a, T> SendFuture<'a, T> {
    #[inline]
    pub(crate) fn new(chan: &'a Chan<T>, value: T) -> Self {
        SendFuture {
            chan,
            state: SendState::Value(Held {
                _room: Room([std::mem::MaybeUninit::uninit(); COPY_GAP]),
                value: Some(value),
            }),
        }
    }
}

impl<T> SendFuture<'_, T> {
    /// Ends the send where it stands: the value back, or `None` if it was sent.
    pub(crate) fn take_back_inner(&mut self) -> Option<T> {
        match &mut self.state {
            SendState::Value(h) => h.value.take(),
            SendState::Node { node, registered } => {
                if !*registered {
                    // SAFETY: not registered: the node is on no list, its slot ours alone.
                    return unsafe { node.take_slot() };
                }
                *registered = false;
                self.chan.cancel_send(node)
            }
        }
    }

    /// Whether its node waits and has been completed (or told to retry) meanwhile.
    pub(crate) fn is_notified(&self) -> bool {
        matches!(&self.state, SendState::Node { node, registered: true }
            if node.reason() != crate::waitlist::Reason::Waiting)
    }
}

impl<T> Future for SendFuture<'_, T> {
    type Output = Result<(), SendError<T>>;

    // Inlined for the send that finds room at its first poll; the rest is
    // `SendFuture::poll_wait`.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing pinned is moved out of the future: the value of `Value` is
        // never pinned, and a node stays where it is once made.
        let this = unsafe { self.get_unchecked_mut() };
        if let SendState::Value(Held {
            value: v @ Some(_), ..
        }) = &mut this.state
        {
            if this.chan.send_fast_from(v) {
                return Poll::Ready(Ok(()));
            }
        }
        this.poll_wait(cx)
    }
}

impl<T> SendFuture<'_, T> {
    /// A send's poll past its fast path: waits in a node (made here at the first such
    /// poll) for room or a receiver.
    #[inline(never)]
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SendError<T>>> {
        let this = self;
        if let SendState::Value(Held { value: v, .. }) = &mut this.state {
            assert!(v.is_some(), "send polled after completion");
            // The value moves into a node made in place; from here on the node stays
            // where it is (`poll_send` tries the fast path again first).
            let value = v.take().expect("left in place by the failed fast send");
            this.state = SendState::Node {
                node: Node::holding(value),
                registered: false,
            };
        }
        let SendState::Node { node, registered } = &mut this.state else {
            unreachable!("made above")
        };
        this.chan
            .poll_send(node, registered, cx)
            .map(|r| r.map_err(SendError))
    }
}

impl<T> Drop for SendFuture<'_, T> {
    fn drop(&mut self) {
        if let SendState::Node {
            node,
            registered: true,
        } = &self.state
        {
            drop(self.chan.cancel_send(node));
        }
    }
}

impl<T> fmt::Debug for SendFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendFuture").finish_non_exhaustive()
    }
}

/// The future of [`Receiver::recv`](super::Receiver::recv).
///
/// Dropping it is always fine (a value a sender handed it goes back to the channel);
/// leaking a polled one (`mem::forget`) is not: a value handed to it counts as on its
/// way until taken, so once the channel closes its other receivers wait for that value
/// for ever instead of seeing it disconnected.
///
/// Order: a value that goes back goes to the next waiting receiver, or to the front of
/// the channel. With one receiver that keeps every sender's order. With several, the
/// others may have taken later values of the same sender while the value sat in the
/// dropped future, so one of them can then receive it after those.
#[must_use = "futures do nothing unless awaited"]
pub struct RecvFuture<'a, T> {
    inner: RecvInner<'a, T>,
}

enum RecvInner<'a, T> {
    Chan {
        chan: &'a Chan<T>,
        /// Made at the first poll that cannot take a value at once: a receive that
        /// finds one never makes it (making a node and moving it into the caller's
        /// future was about a fifth of an `unbounded` send-then-receive in a task).
        node: Option<Node<T>>,
        registered: bool,
    },
    Timer(super::timer::TimerRecv<T>),
}

impl<'a, T> RecvFuture<'a, T> {
    #[inline]
    pub(crate) fn chan(chan: &'a Chan<T>) -> Self {
        RecvFuture {
            inner: RecvInner::Chan {
                chan,
                node: None,
                registered: false,
            },
        }
    }

    pub(crate) fn timer(timer: Option<Arc<Timer>>, convert: fn(std::time::Instant) -> T) -> Self {
        RecvFuture {
            inner: RecvInner::Timer(super::timer::TimerRecv::new(timer, convert)),
        }
    }
}

impl<T> RecvFuture<'_, T> {
    /// Whether its node waits and has been completed (or told to retry) meanwhile.
    pub(crate) fn is_notified(&self) -> bool {
        matches!(&self.inner, RecvInner::Chan { node: Some(node), registered: true, .. }
            if node.reason() != crate::waitlist::Reason::Waiting)
    }

    /// Stops waiting: takes the node off the list and returns a value handed to it
    /// since its last poll (see [`Chan::withdraw_recv`]).
    pub(crate) fn withdraw(self: Pin<&mut Self>) -> Option<T> {
        // SAFETY: nothing is moved out of the pinned future.
        let this = unsafe { self.get_unchecked_mut() };
        match &mut this.inner {
            RecvInner::Chan {
                chan,
                node: Some(node),
                registered,
            } if *registered => {
                *registered = false;
                let v = chan.withdraw_recv(node);
                node.reset();
                v
            }
            _ => None,
        }
    }
}

impl<T> Future for RecvFuture<'_, T> {
    type Output = Result<T, RecvError>;

    // Inlined for the receive that finds a value at its first poll (of a value up to
    // `INLINE_VALUE_MAX` bytes); the rest is `RecvFuture::poll_wait`.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing is moved out of the pinned future; the node stays where it is.
        let this = unsafe { self.get_unchecked_mut() };
        if std::mem::size_of::<T>() > INLINE_VALUE_MAX {
            return this.poll_outlined(cx);
        }
        if let Some(v) = this.poll_fast() {
            return Poll::Ready(Ok(v));
        }
        this.poll_wait(cx)
    }
}

/// The largest value whose receive is inlined into the caller's poll. Inlined, a
/// large value's receive copied it from the receive's place to the caller's within
/// one stack frame, at whatever distance the compiler laid the two apart: a 32 KiB
/// value took 20-27 us a message against 9-13 us out of line (a fresh channel per
/// value, as the sync suite's `mpsc_send_large_1000`), a copy whose destination lies
/// a few bytes past a 4 KiB multiple above its source running many times slower on
/// this project's CPUs (see [`Held`]). Out of line, the callee's frame lies between
/// the two.
const INLINE_VALUE_MAX: usize = 1024;

impl<T> RecvFuture<'_, T> {
    /// The fast path of a receive that has not waited yet: a value if the buffer
    /// hands one over without the lock.
    #[inline(always)]
    fn poll_fast(&mut self) -> Option<T> {
        let RecvInner::Chan {
            chan, node: None, ..
        } = &self.inner
        else {
            return None;
        };
        let mut out = std::mem::MaybeUninit::uninit();
        // SAFETY: `recv_fast_into` said it moved a value into `out`.
        chan.recv_fast_into(&mut out)
            .then(|| unsafe { out.assume_init() })
    }

    /// [`poll`](Future::poll) out of line, for values above [`INLINE_VALUE_MAX`].
    #[inline(never)]
    fn poll_outlined(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RecvError>> {
        if let Some(v) = self.poll_fast() {
            return Poll::Ready(Ok(v));
        }
        self.poll_wait(cx)
    }

    /// A receive's poll past its fast path: waits in a node (made here at the first
    /// such poll) for a value.
    #[inline(never)]
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RecvError>> {
        let this = self;
        match &mut this.inner {
            RecvInner::Chan {
                chan,
                node,
                registered,
            } => {
                // The fast path (tried by `poll`) needs no node; `poll_recv` tries it
                // again first. Written in place, before it can be registered: from here
                // on the node stays where it is (the future is pinned).
                let node = node.get_or_insert_with(Node::new);
                chan.poll_recv(node, registered, cx)
            }
            RecvInner::Timer(t) => t.poll(cx).map(Ok),
        }
    }
}

impl<T> Drop for RecvFuture<'_, T> {
    fn drop(&mut self) {
        if let RecvInner::Chan {
            chan,
            node: Some(node),
            registered: true,
        } = &self.inner
        {
            chan.cancel_recv(node);
        }
    }
}

impl<T> fmt::Debug for RecvFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvFuture").finish_non_exhaustive()
    }
}

/// A receive owned by its receiver, for `Stream`: boxed, so its node keeps its address
/// while the receiver moves between polls.
pub(crate) struct StreamRecv<T> {
    node: Node<T>,
    registered: bool,
}

impl<T> StreamRecv<T> {
    pub(crate) fn new() -> Box<Self> {
        Box::new(StreamRecv {
            node: Node::with(crate::waitlist::Kind::Observe, std::ptr::null(), 0),
            registered: false,
        })
    }

    pub(crate) fn poll(&mut self, chan: &Chan<T>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        chan.poll_stream(&self.node, &mut self.registered, cx)
    }

    pub(crate) fn cancel(&mut self, chan: &Chan<T>) {
        if self.registered {
            self.registered = false;
            chan.unregister_stream(&self.node);
            self.node.reset();
        }
    }
}

// SAFETY: a future is only used through `Pin<&mut Self>` (and dropped through
// `&mut`); `&SendFuture` gives no access to the value or the node, so sharing the
// reference between threads shares nothing of `T`.
unsafe impl<T: Send> Sync for SendFuture<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for RecvFuture<'_, T> {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Where a fresh send future keeps its value, from the future's start.
    fn value_offset<T>(f: &SendFuture<'_, T>) -> usize {
        let SendState::Value(Held { value: Some(v), .. }) = &f.state else {
            unreachable!("a fresh send future holds its value")
        };
        (v as *const T as usize) - (f as *const SendFuture<'_, T> as usize)
    }

    /// The value starts at least `COPY_GAP` bytes into the future, whatever its type,
    /// so moving it into a future laid out right after it is not a copy 1 to 31 bytes
    /// past a 4 KiB multiple (see `Held`).
    #[test]
    fn a_send_future_keeps_its_value_clear_of_short_copy_distances() {
        fn check<T: Send>(v: T) {
            let (tx, _rx) = crate::chan::bounded::<T>(1);
            let f = tx.send(v);
            let at = value_offset(&f);
            assert!(
                at >= COPY_GAP,
                "{}: value at {at}",
                std::any::type_name::<T>()
            );
            assert!(
                at % 4096 >= 32,
                "{}: value at {at}",
                std::any::type_name::<T>()
            );
        }
        check([7u8; 4096]);
        check([7u8; 32 << 10]);
        check([7u64; 512]);
        check(Box::new(1u8));
        check(0u8);
        #[repr(align(64))]
        #[allow(dead_code)] // a value to send, never read
        struct Line([u8; 4096]);
        check(Line([0; 4096]));
    }
}
