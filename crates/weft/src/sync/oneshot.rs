//! A channel for one value (tokio's `oneshot`): both ends share one state under a
//! wait-list lock; each end's waker is stored there (the receiver is the future, so it
//! cannot own a pinned node) and woken after the lock is released.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::base::Arc;
use crate::waitlist::{Lock, Prepared, WakeBatch};

/// The errors of [`oneshot`](self).
pub mod error {
    use std::fmt;

    /// The sender was dropped without sending: returned by awaiting the receiver.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::oneshot::channel::<u8>();
    /// drop(tx);
    /// assert_eq!(rx.recv_blocking(), Err(weft::sync::oneshot::error::RecvError(())));
    /// ```
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RecvError(pub ());

    /// Why [`try_recv`](super::Receiver::try_recv) returned nothing.
    ///
    /// ```
    /// use weft::sync::oneshot::{self, error::TryRecvError};
    /// let (tx, mut rx) = oneshot::channel::<u8>();
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    /// drop(tx);
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum TryRecvError {
        /// No value yet; the sender is still there.
        Empty,
        /// The sender is gone without sending, or the value was already taken.
        Closed,
    }

    impl fmt::Display for RecvError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("channel closed")
        }
    }

    impl std::error::Error for RecvError {}

    impl fmt::Display for TryRecvError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                TryRecvError::Empty => f.write_str("channel empty"),
                TryRecvError::Closed => f.write_str("channel closed"),
            }
        }
    }

    impl std::error::Error for TryRecvError {}
}

use error::{RecvError, TryRecvError};

struct State<T> {
    value: Option<T>,
    /// The sender neither sent nor was dropped.
    tx_open: bool,
    /// The receiver was neither dropped nor closed.
    rx_open: bool,
    rx_waker: Option<Waker>,
    tx_waker: Option<Waker>,
}

struct Shared<T> {
    state: Lock<State<T>>,
}

/// Sends the one value. See [`channel`].
pub struct Sender<T> {
    shared: Option<Arc<Shared<T>>>,
}

/// Receives the one value: a future of `Result<T, RecvError>`. See [`channel`].
///
/// Cancel safety: dropping the receiver before it completes drops a value already sent
/// (nothing else is waiting for it) and tells the sender ([`Sender::closed`]).
pub struct Receiver<T> {
    shared: Option<Arc<Shared<T>>>,
}

/// Makes a one-value channel: [`Sender::send`] once, await the [`Receiver`] (or
/// [`Receiver::recv_blocking`]) from any context.
///
/// ```
/// use weft::sync::oneshot;
///
/// let rt = weft::Runtime::new().unwrap();
/// let (tx, rx) = oneshot::channel();
/// let task = rt.spawn(async move { rx.await });
/// tx.send(3).unwrap();
/// assert_eq!(task.join().unwrap(), Ok(3));
/// ```
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Lock::new(State {
            value: None,
            tx_open: true,
            rx_open: true,
            rx_waker: None,
            tx_waker: None,
        }),
    });
    (
        Sender {
            shared: Some(shared.clone()),
        },
        Receiver {
            shared: Some(shared),
        },
    )
}

/// Stores `waker` (made before the lock: see [`Prepared`]) in `slot` unless the stored
/// one wakes the same task; the replaced one is dropped with `wakes`, after the lock.
fn store_waker(slot: &mut Option<Waker>, waker: &mut Prepared<'_>, wakes: &mut WakeBatch) {
    crate::task::diag::note_wait(waker.get(), crate::waitlist::WaitOn::Chan);
    if let Some(old) = waker.store(slot) {
        wakes.retire(old);
    }
}

impl<T> Sender<T> {
    /// Sends `value`; gives it back if the receiver is gone (dropped or closed).
    ///
    /// ```
    /// let (tx, rx) = weft::sync::oneshot::channel();
    /// drop(rx);
    /// assert_eq!(tx.send(1), Err(1));
    /// ```
    pub fn send(mut self, value: T) -> Result<(), T> {
        let shared = self.shared.take().expect("a sender sends once");
        let mut wakes = WakeBatch::new();
        let mut st = shared.state.lock();
        st.tx_open = false;
        if !st.rx_open {
            drop(st);
            return Err(value);
        }
        st.value = Some(value);
        if let Some(w) = st.rx_waker.take() {
            wakes.push(w);
        }
        drop(st);
        Ok(())
    }

    /// Whether the receiver is gone (dropped or closed): a send would fail.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::oneshot::channel::<u8>();
    /// assert!(!tx.is_closed());
    /// drop(rx);
    /// assert!(tx.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        let shared = self.shared.as_ref().expect("a live sender");
        !shared.state.lock().rx_open
    }

    /// Waits until the receiver is gone (dropped or closed).
    ///
    /// Cancel safety: dropping the future loses nothing.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (mut tx, rx) = weft::sync::oneshot::channel::<u8>();
    /// std::thread::spawn(move || drop(rx));
    /// rt.block_on(tx.closed());
    /// ```
    pub async fn closed(&mut self) {
        let shared = self.shared.as_ref().expect("a live sender");
        std::future::poll_fn(|cx| {
            let mut waker = Prepared::new(cx.waker());
            let mut wakes = WakeBatch::new();
            let mut st = shared.state.lock();
            if !st.rx_open {
                return Poll::Ready(());
            }
            store_waker(&mut st.tx_waker, &mut waker, &mut wakes);
            drop(st);
            Poll::Pending
        })
        .await
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let mut wakes = WakeBatch::new();
        let mut st = shared.state.lock();
        st.tx_open = false;
        if let Some(w) = st.rx_waker.take() {
            wakes.push(w);
        }
        let old = st.tx_waker.take();
        drop(st);
        drop(wakes);
        drop(old);
    }
}

impl<T> Receiver<T> {
    /// Takes the value if it was sent.
    ///
    /// ```
    /// let (tx, mut rx) = weft::sync::oneshot::channel();
    /// tx.send(7).unwrap();
    /// assert_eq!(rx.try_recv(), Ok(7));
    /// ```
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let Some(shared) = self.shared.as_ref() else {
            return Err(TryRecvError::Closed);
        };
        let mut st = shared.state.lock();
        match st.value.take() {
            Some(v) => {
                drop(st);
                self.shared = None;
                Ok(v)
            }
            // After `close` nothing can arrive any more: `Closed`, as tokio's.
            None if st.tx_open && st.rx_open => Err(TryRecvError::Empty),
            None => Err(TryRecvError::Closed),
        }
    }

    /// Waits for the value, blocking by [`weft::wait`](crate::wait)'s rule: a fiber
    /// suspends, a worker goes on with other work, a plain thread blocks.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::oneshot::channel();
    /// std::thread::spawn(move || tx.send("hi").unwrap());
    /// assert_eq!(rx.recv_blocking(), Ok("hi"));
    /// ```
    pub fn recv_blocking(self) -> Result<T, RecvError> {
        crate::wait(self)
    }

    /// Refuses the value: a later `send` fails (a value sent before stays readable
    /// with [`try_recv`](Self::try_recv), or by awaiting the receiver). With no value
    /// sent, awaiting the receiver then gives `Err` at once and `try_recv` gives
    /// `Closed`, as tokio's.
    ///
    /// ```
    /// let (tx, mut rx) = weft::sync::oneshot::channel();
    /// rx.close();
    /// assert_eq!(tx.send(1), Err(1));
    /// ```
    pub fn close(&mut self) {
        let Some(shared) = self.shared.as_ref() else {
            return;
        };
        let mut wakes = WakeBatch::new();
        let mut st = shared.state.lock();
        st.rx_open = false;
        if let Some(w) = st.tx_waker.take() {
            wakes.push(w);
        }
        drop(st);
    }
}

impl<T> Future for Receiver<T> {
    type Output = Result<T, RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let shared = self
            .shared
            .as_ref()
            .expect("a oneshot receiver polled after it completed");
        let mut waker = Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let mut st = shared.state.lock();
        if let Some(v) = st.value.take() {
            drop(st);
            self.shared = None;
            return Poll::Ready(Ok(v));
        }
        // Closed by the receiver (`close`): no value can come, and a failed `send`
        // wakes nobody, so waiting would never end (tokio's resolves to `Err` too).
        if !st.tx_open || !st.rx_open {
            drop(st);
            self.shared = None;
            return Poll::Ready(Err(RecvError(())));
        }
        store_waker(&mut st.rx_waker, &mut waker, &mut wakes);
        drop(st);
        Poll::Pending
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let mut wakes = WakeBatch::new();
        let mut st = shared.state.lock();
        st.rx_open = false;
        if let Some(w) = st.tx_waker.take() {
            wakes.push(w);
        }
        let value = st.value.take();
        let old = st.rx_waker.take();
        drop(st);
        drop(wakes);
        // User code (the value's and the waker's `Drop`) runs after the lock.
        drop(value);
        drop(old);
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Sender { .. }")
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Receiver { .. }")
    }
}
