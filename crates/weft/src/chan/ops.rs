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
    /// Holds the value in its slot until it is sent: a second place for it beside the
    /// node made the future twice the value's size, and a future is moved whole at
    /// least once (into `wait`, into a task), so a 32 KiB value cost two extra copies.
    node: Node<T>,
    registered: bool,
}

impl<'a, T> SendFuture<'a, T> {
    #[inline]
    pub(crate) fn new(chan: &'a Chan<T>, value: T) -> Self {
        SendFuture {
            chan,
            node: Node::holding(value),
            registered: false,
        }
    }
}

impl<T> SendFuture<'_, T> {
    /// Ends the send where it stands: the value back, or `None` if it was sent.
    pub(crate) fn take_back_inner(&mut self) -> Option<T> {
        if !self.registered {
            // SAFETY: not registered: the node is on no list, its slot ours alone.
            return unsafe { self.node.take_slot() };
        }
        self.registered = false;
        self.chan.cancel_send(&self.node)
    }
}

impl<T> SendFuture<'_, T> {
    /// Whether its node waits and has been completed (or told to retry) meanwhile.
    pub(crate) fn is_notified(&self) -> bool {
        self.registered && self.node.reason() != crate::waitlist::Reason::Waiting
    }
}

impl<T> Future for SendFuture<'_, T> {
    type Output = Result<(), SendError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing is moved out of the pinned future; the node stays where it is.
        let this = unsafe { self.get_unchecked_mut() };
        this.chan
            .poll_send(&this.node, &mut this.registered, cx)
            .map(|r| r.map_err(SendError))
    }
}

impl<T> Drop for SendFuture<'_, T> {
    fn drop(&mut self) {
        if self.registered {
            drop(self.chan.cancel_send(&self.node));
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
        node: Node<T>,
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
                node: Node::new(),
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
        matches!(&self.inner, RecvInner::Chan { node, registered: true, .. }
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
                node,
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
            } => chan.poll_recv(node, registered, cx),
            RecvInner::Timer(t) => t.poll(cx).map(Ok),
        }
    }
}

impl<T> Drop for RecvFuture<'_, T> {
    fn drop(&mut self) {
        if let RecvInner::Chan {
            chan,
            node,
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
