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
    Value(Option<T>),
    /// Waiting, or about to: the value in the node's slot until a receiver takes it.
    Node { node: Node<T>, registered: bool },
}

impl<'a, T> SendFuture<'a, T> {
    #[inline]
    pub(crate) fn new(chan: &'a Chan<T>, value: T) -> Self {
        SendFuture {
            chan,
            state: SendState::Value(Some(value)),
        }
    }
}

impl<T> SendFuture<'_, T> {
    /// Ends the send where it stands: the value back, or `None` if it was sent.
    pub(crate) fn take_back_inner(&mut self) -> Option<T> {
        match &mut self.state {
            SendState::Value(v) => v.take(),
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

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing pinned is moved out of the future: the value of `Value` is
        // never pinned, and a node stays where it is once made.
        let this = unsafe { self.get_unchecked_mut() };
        if let SendState::Value(v) = &mut this.state {
            assert!(v.is_some(), "send polled after completion");
            if this.chan.send_fast_from(v) {
                return Poll::Ready(Ok(()));
            }
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

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing is moved out of the pinned future; the node stays where it is.
        let this = unsafe { self.get_unchecked_mut() };
        match &mut this.inner {
            RecvInner::Chan {
                chan,
                node,
                registered,
            } => {
                let node = match node {
                    Some(node) => node,
                    None => {
                        // The fast path needs no node (`poll_recv` tries it first too).
                        let mut out = std::mem::MaybeUninit::uninit();
                        if chan.recv_fast_into(&mut out) {
                            // SAFETY: `recv_fast_into` said it moved a value into `out`.
                            return Poll::Ready(Ok(unsafe { out.assume_init() }));
                        }
                        // Written in place, before it can be registered: from here on
                        // the node stays where it is (the future is pinned).
                        node.insert(Node::new())
                    }
                };
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
