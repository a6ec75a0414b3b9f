//! Channels for every context: one channel serves async tasks (`.await`), fibers (they
//! suspend), worker threads (they go on with other work) and plain threads (they
//! block), all at once.
//!
//! The shape is crossbeam-channel's: [`bounded`] (capacity 0 is the rendezvous
//! channel), [`unbounded`], multi-producer multi-consumer ends that are `Clone + Send +
//! Sync`, [`Select`] and [`select!`](crate::select!), timer receivers ([`after`],
//! [`at`], [`tick`], [`never()`]). Every blocking operation has an async twin:
//! `send_blocking` / `send`, `recv_blocking` / `recv`, `Select::select` /
//! `Select::select_async`. Channels need no runtime: plain threads use them as they
//! would crossbeam's.
//!
//! ```
//! use weft::chan;
//!
//! let rt = weft::Runtime::new().unwrap();
//! let (tx, rx) = chan::bounded::<u32>(4);
//! // A plain thread sends, a fiber doubles, an async task sums.
//! let (tx2, rx2) = chan::unbounded();
//! let producer = std::thread::spawn(move || {
//!     for i in 0..10 {
//!         tx.send_blocking(i).unwrap();
//!     }
//! });
//! let doubler = weft::fiber::spawn(move || {
//!     for v in rx.iter() {
//!         tx2.send_blocking(v * 2).unwrap();
//!     }
//! });
//! let sum = rt.block_on(async move {
//!     let mut sum = 0;
//!     while let Ok(v) = rx2.recv().await {
//!         sum += v;
//!     }
//!     sum
//! });
//! producer.join().unwrap();
//! doubler.join().unwrap();
//! assert_eq!(sum, 90);
//! ```
//!
//! How it works: `chan/core.rs` (one buffer and two wait lists under one lock) on the
//! wait nodes of `waitlist`; `select.rs` waits on several channels with one group of
//! nodes.

mod core;
mod error;
mod flavors;
mod iter;
#[cfg(all(test, loom))]
mod loom_review_copies;
#[cfg(all(test, loom))]
mod loom_review_taken;
#[cfg(all(test, loom))]
mod loom_tests;
#[macro_use]
mod macros;
mod ops;
mod ordered;
mod select;
#[cfg(all(test, not(loom)))]
mod tests;
mod timer;

use std::fmt;
use std::future::Future;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use self::core::{release_end, Chan, Fail};
use self::timer::Timer;
use crate::base::Arc;
use crate::fiber::wait::spin_try;
use crate::waitlist::WakeBatch;

pub use error::{
    ReadyTimeoutError, RecvError, RecvTimeoutError, SelectTimeoutError, SendError,
    SendTimeoutError, TryReadyError, TryRecvError, TrySelectError, TrySendError,
};
pub use iter::{IntoIter, Iter, TryIter};
pub use ops::{RecvFuture, SendFuture};
pub use ordered::{ordered, OrderedReceiver, OrderedSendError, OrderedSender};
pub use select::{Select, SelectedOperation};

/// Creates a channel that holds at most `cap` messages; `bounded(0)` is the rendezvous
/// channel, where a send completes only when a receiver takes the value.
///
/// Two things may put a message beyond `cap`, and only for a while (sends that wait
/// for room still wait until the channel is below `cap`): a value given back to the
/// channel (a receive cancelled after it was handed a value, a selected receive not
/// performed), and a send that a [`Select`] chose because it saw room, completed after
/// other senders took that room. A selected operation completes without waiting, and
/// the select holds no slot while its caller decides (crossbeam's selected send holds
/// one; there, another sender's `try_send` then fails with `Full` instead).
///
/// ```
/// let (tx, rx) = weft::chan::bounded(1);
/// tx.send_blocking(1).unwrap();
/// assert!(tx.try_send(2).is_err());
/// assert_eq!(rx.recv_blocking(), Ok(1));
/// ```
pub fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    new(Some(cap))
}

/// Creates a channel with no limit on the messages it holds.
///
/// Memory: messages are held in blocks of 31, freed as they are received. While the
/// channel holds more than about 500 messages, new blocks are carved from 32 KiB
/// allocations, each freed with its last block; once drained, the channel may keep up
/// to two of them (under 64 KiB) until messages flow through it again.
///
/// ```
/// let (tx, rx) = weft::chan::unbounded();
/// for i in 0..1000 {
///     tx.send_blocking(i).unwrap();
/// }
/// assert_eq!(rx.len(), 1000);
/// ```
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    new(None)
}

fn new<T>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan::new(cap));
    (
        Sender { chan: chan.clone() },
        Receiver {
            flavor: Flavor::Chan(chan),
            stream: None,
        },
    )
}

/// A receiver that delivers the instant `duration` from now, once.
///
/// ```
/// use std::time::Duration;
/// let rx = weft::chan::after(Duration::from_millis(5));
/// let at = rx.recv_blocking().unwrap();
/// assert!(at <= std::time::Instant::now());
/// ```
pub fn after(duration: Duration) -> Receiver<Instant> {
    let now = Instant::now();
    at(now
        .checked_add(duration)
        .unwrap_or(now + Duration::from_secs(86_400 * 365 * 30)))
}

/// A receiver that delivers `when`, once, at `when`.
///
/// ```
/// use std::time::{Duration, Instant};
/// let when = Instant::now() + Duration::from_millis(5);
/// assert_eq!(weft::chan::at(when).recv_blocking(), Ok(when));
/// ```
pub fn at(when: Instant) -> Receiver<Instant> {
    timer_receiver(Timer::at(when))
}

/// A receiver that delivers an instant every `duration`.
///
/// ```
/// use std::time::Duration;
/// let rx = weft::chan::tick(Duration::from_millis(2));
/// let a = rx.recv_blocking().unwrap();
/// let b = rx.recv_blocking().unwrap();
/// assert!(b > a);
/// ```
pub fn tick(duration: Duration) -> Receiver<Instant> {
    timer_receiver(Timer::tick(duration))
}

/// A receiver that never delivers anything (useful in [`select!`](crate::select!)).
///
/// ```
/// use std::time::Duration;
/// let rx = weft::chan::never::<i32>();
/// assert!(rx.recv_timeout(Duration::from_millis(1)).is_err());
/// ```
pub fn never<T>() -> Receiver<T> {
    Receiver {
        flavor: Flavor::Never,
        stream: None,
    }
}

fn timer_receiver(t: Timer) -> Receiver<Instant> {
    Receiver {
        flavor: Flavor::Timer(Arc::new(t), |i| i),
        stream: None,
    }
}

/// The sending end of a channel.
///
/// ```
/// let (tx, rx) = weft::chan::unbounded();
/// let tx2 = tx.clone();
/// std::thread::spawn(move || tx2.send_blocking(1).unwrap()).join().unwrap();
/// tx.send_blocking(2).unwrap();
/// assert_eq!(rx.iter().take(2).sum::<i32>(), 3);
/// ```
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

/// The receiving end of a channel (or a timer receiver, or `never`).
///
/// ```
/// let (tx, rx) = weft::chan::bounded(2);
/// tx.send_blocking("a").unwrap();
/// drop(tx);
/// assert_eq!(rx.recv_blocking(), Ok("a"));
/// assert!(rx.recv_blocking().is_err());
/// ```
pub struct Receiver<T> {
    flavor: Flavor<T>,
    /// The receive in progress of the `Stream` implementation.
    stream: Option<StreamState<T>>,
}

enum StreamState<T> {
    Chan(Box<ops::StreamRecv<T>>),
    Timer(timer::TimerRecv<T>),
}

/// Makes a timer receiver's message from the instant it fired at.
type Convert<T> = fn(Instant) -> T;

enum Flavor<T> {
    Chan(Arc<Chan<T>>),
    Timer(Arc<Timer>, Convert<T>),
    Never,
}

impl<T> UnwindSafe for Sender<T> {}
impl<T> RefUnwindSafe for Sender<T> {}
impl<T> UnwindSafe for Receiver<T> {}
impl<T> RefUnwindSafe for Receiver<T> {}

/// A wait whose node, once on the list, is watched for a while before the waiter
/// sleeps: the partner that arrives meanwhile completes it straight away, and the
/// waiter sees that without a futex wake.
struct SpinThenWait<F> {
    fut: F,
    notified: fn(&F) -> bool,
}

impl<F: Future> Future for SpinThenWait<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `fut` is structurally pinned: never moved out of `self`.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: as above.
        let mut fut = unsafe { Pin::new_unchecked(&mut this.fut) };
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(v);
        }
        let mut b = crate::fiber::wait::Backoff::new();
        while b.snooze() {
            if (this.notified)(&fut) {
                return fut.poll(cx);
            }
        }
        Poll::Pending
    }
}

/// What a blocking send or receive does before it registers its node: retry while
/// backing off (a partner on the other core usually frees a slot or buffers a value
/// within that time), except on a rendezvous channel, where it goes straight to the
/// wait, whose first poll tries under the lock and registers under the same lock (a
/// try of its own first took the lock twice whenever no partner waited: about 5% of
/// the instructions of a message between two fibers).
///
/// On a rendezvous channel neither side can complete without the other *registered*
/// (`try_send` needs a waiting receiver, `try_recv` a waiting sender), so a sender and
/// a receiver that both retry before registering only watch each other fail until one
/// of them gives up: every message cost a whole spin on both cores (on two workers
/// with nothing else ready, 3,199 pauses each, tens of us; `fibers_bounded0_*` took 6-60 us a
/// message whenever the fibers were spread over both workers, 87 % of the time in
/// `Backoff::snooze`). Registering at once (as crossbeam's zero-capacity flavour does)
/// leaves exactly one of them waiting, watched by [`wait_spinning`], and the other
/// completes it on arrival.
fn try_before_waiting<T, R>(chan: &Chan<T>, attempt: impl FnMut() -> Option<R>) -> Option<R> {
    if chan.cap == Some(0) {
        None
    } else {
        spin_try(attempt)
    }
}

/// `wait` on a send or receive, watching its node a while first.
fn wait_spinning<F: Future>(fut: F, notified: fn(&F) -> bool) -> F::Output {
    crate::wait(SpinThenWait { fut, notified })
}

impl<T> Sender<T> {
    /// Sends `value`, waiting for room (or, on a rendezvous channel, for a receiver).
    /// Fails, giving the value back, once the channel is disconnected.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::bounded(0);
    /// let h = rt.spawn(async move { tx.send(5).await });
    /// assert_eq!(rx.recv_blocking(), Ok(5));
    /// assert!(h.join().unwrap().is_ok());
    /// ```
    #[inline]
    pub fn send(&self, value: T) -> SendFuture<'_, T> {
        SendFuture::new(&self.chan, value)
    }

    /// Sends `value`, blocking by `weft::wait`'s rule while there is no room: a fiber
    /// suspends, a worker goes on with other work, any other thread blocks.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::bounded(1);
    /// tx.send_blocking(1).unwrap();
    /// drop(rx);
    /// assert!(tx.send_blocking(2).is_err());
    /// ```
    pub fn send_blocking(&self, value: T) -> Result<(), SendError<T>> {
        match self.chan.send_fast(value) {
            Ok(()) => Ok(()),
            Err(v) => self.send_blocking_slow(v),
        }
    }

    #[inline(never)]
    fn send_blocking_slow(&self, value: T) -> Result<(), SendError<T>> {
        let mut value = Some(value);
        let mut attempt = || match self.try_send(value.take().expect("not sent yet")) {
            Ok(()) => Some(Ok(())),
            Err(TrySendError::Disconnected(v)) => Some(Err(SendError(v))),
            Err(TrySendError::Full(v)) => {
                value = Some(v);
                None
            }
        };
        if let Some(r) = try_before_waiting(&self.chan, &mut attempt) {
            return r;
        }
        let value = value.expect("not sent yet");
        wait_spinning(self.send(value), SendFuture::is_notified)
    }

    /// Sends `value` if that can be done now.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::bounded(0);
    /// // No receiver waits on the rendezvous channel: nothing is stored.
    /// assert!(tx.try_send(1).unwrap_err().is_full());
    /// drop(rx);
    /// assert!(tx.try_send(1).unwrap_err().is_disconnected());
    /// ```
    #[inline]
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        match self.chan.send_fast(value) {
            Ok(()) => Ok(()),
            Err(v) => self.try_send_locked(v),
        }
    }

    /// [`try_send`](Self::try_send) where the fast path could not decide.
    #[inline(never)]
    fn try_send_locked(&self, value: T) -> Result<(), TrySendError<T>> {
        let mut wakes = WakeBatch::new();
        let mut st = self.chan.lock();
        let r = self.chan.try_send_locked(&mut st, value, &mut wakes);
        drop(st);
        r.map_err(|(v, why)| match why {
            Fail::Closed => TrySendError::Disconnected(v),
            _ => TrySendError::Full(v),
        })
    }

    /// Sends `value`, waiting at most `timeout` for room.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (tx, _rx) = weft::chan::bounded(1);
    /// tx.send_timeout(1, Duration::from_secs(1)).unwrap();
    /// assert!(tx.send_timeout(2, Duration::from_millis(5)).unwrap_err().is_timeout());
    /// ```
    pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        match Instant::now().checked_add(timeout) {
            Some(d) => self.send_deadline(value, d),
            None => self.send_blocking(value).map_err(SendTimeoutError::from),
        }
    }

    /// Sends `value`, waiting until `deadline` at the latest for room.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// tx.send_deadline(1, std::time::Instant::now()).unwrap();
    /// assert_eq!(rx.try_recv(), Ok(1));
    /// ```
    pub fn send_deadline(&self, value: T, deadline: Instant) -> Result<(), SendTimeoutError<T>> {
        let value = match self.try_send(value) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Disconnected(v)) => return Err(SendTimeoutError::Disconnected(v)),
            Err(TrySendError::Full(v)) => v,
        };
        let mut fut = std::pin::pin!(self.send(value));
        match crate::fiber::wait::wait_until(fut.as_mut(), deadline) {
            Some(r) => r.map_err(|e| SendTimeoutError::Disconnected(e.0)),
            None => {
                // Take the node off the list; the value comes back unless a receiver
                // took it at the last moment.
                match fut.take_back() {
                    Some(v) => Err(SendTimeoutError::Timeout(v)),
                    None => Ok(()),
                }
            }
        }
    }

    /// Closes the channel: receivers drain what is buffered, then see it disconnected;
    /// senders fail at once. `true` only for the call that closed it.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// tx.send_blocking(1).unwrap();
    /// assert!(tx.close());
    /// assert!(!rx.close());
    /// assert!(tx.send_blocking(2).is_err());
    /// assert_eq!(rx.recv_blocking(), Ok(1));
    /// assert!(rx.recv_blocking().is_err());
    /// ```
    pub fn close(&self) -> bool {
        self.chan.close(false).0
    }

    /// Whether the channel is disconnected (closed, or one side all dropped).
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded::<()>();
    /// assert!(!tx.is_closed());
    /// drop(rx);
    /// assert!(tx.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.chan.is_closed()
    }

    /// The number of buffered messages.
    ///
    /// ```
    /// let (tx, _rx) = weft::chan::unbounded();
    /// tx.send_blocking(1).unwrap();
    /// assert_eq!(tx.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.chan.len()
    }

    /// Whether no message is buffered.
    ///
    /// ```
    /// let (tx, _rx) = weft::chan::unbounded::<i32>();
    /// assert!(tx.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a send would have to wait (always for a rendezvous channel, never for
    /// an unbounded one).
    ///
    /// ```
    /// let (tx, _rx) = weft::chan::bounded(1);
    /// tx.send_blocking(1).unwrap();
    /// assert!(tx.is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        self.chan.is_full()
    }

    /// The capacity: `None` for an unbounded channel.
    ///
    /// ```
    /// assert_eq!(weft::chan::bounded::<i32>(3).0.capacity(), Some(3));
    /// assert_eq!(weft::chan::unbounded::<i32>().0.capacity(), None);
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        self.chan.cap
    }

    /// Whether both senders belong to the same channel.
    ///
    /// ```
    /// let (tx, _rx) = weft::chan::unbounded::<i32>();
    /// assert!(tx.same_channel(&tx.clone()));
    /// assert!(!tx.same_channel(&weft::chan::unbounded().0));
    /// ```
    pub fn same_channel(&self, other: &Sender<T>) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }

    pub(crate) fn chan(&self) -> &Chan<T> {
        &self.chan
    }
}

impl<T> SendFuture<'_, T> {
    /// After a timed-out wait: takes the node off its list and returns the value, or
    /// `None` if the send completed after all.
    fn take_back(self: Pin<&mut Self>) -> Option<T> {
        // SAFETY: nothing moves out of the pinned future but the value.
        let this = unsafe { self.get_unchecked_mut() };
        this.take_back_inner()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.chan.senders.fetch_add(1, Relaxed);
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if release_end(&self.chan.senders) {
            self.chan.disconnect(false);
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Sender { .. }")
    }
}

impl<T> Receiver<T> {
    /// Receives a message, waiting for one; fails once the channel is disconnected and
    /// drained.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::unbounded();
    /// tx.send_blocking(3).unwrap();
    /// assert_eq!(rt.block_on(rx.recv()), Ok(3));
    /// ```
    #[inline]
    pub fn recv(&self) -> RecvFuture<'_, T> {
        match &self.flavor {
            Flavor::Chan(c) => RecvFuture::chan(c),
            Flavor::Timer(t, convert) => RecvFuture::timer(Some(t.clone()), *convert),
            Flavor::Never => RecvFuture::timer(None, |_| unreachable!("never delivers")),
        }
    }

    /// Receives a message, blocking by `weft::wait`'s rule while there is none: a
    /// fiber suspends, a worker goes on with other work, any other thread blocks.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::bounded(0);
    /// std::thread::spawn(move || tx.send_blocking(9).unwrap());
    /// assert_eq!(rx.recv_blocking(), Ok(9));
    /// ```
    pub fn recv_blocking(&self) -> Result<T, RecvError> {
        if let Flavor::Chan(c) = &self.flavor {
            if let Some(v) = c.recv_fast_first() {
                return Ok(v);
            }
        }
        self.recv_blocking_slow()
    }

    #[inline(never)]
    fn recv_blocking_slow(&self) -> Result<T, RecvError> {
        match &self.flavor {
            Flavor::Chan(c) => match try_before_waiting(c, || {
                // While it spins, a receive only looks (see `nothing_to_take`).
                if c.nothing_to_take() {
                    return None;
                }
                match self.try_recv() {
                    Ok(v) => Some(Ok(v)),
                    Err(TryRecvError::Disconnected) => Some(Err(RecvError)),
                    Err(TryRecvError::Empty) => None,
                }
            }) {
                Some(r) => r,
                None => wait_spinning(self.recv(), RecvFuture::is_notified),
            },
            Flavor::Timer(t, convert) => Ok(convert(t.recv_blocking(None).expect("no deadline"))),
            Flavor::Never => crate::wait(std::future::pending()),
        }
    }

    /// Receives a message if one is there now. On a rendezvous channel that takes the
    /// value of a waiting sender; a `select` waiting to send commits to its value only
    /// once paired, so then this waits for the select to send it (it was woken as the
    /// pairing was made), and reports nothing if the select withdraws instead.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// assert!(rx.try_recv().is_err());
    /// tx.send_blocking(1).unwrap();
    /// assert_eq!(rx.try_recv(), Ok(1));
    /// ```
    #[inline]
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        match &self.flavor {
            Flavor::Chan(c) => c.try_recv_now().map_err(|why| match why {
                Fail::Closed => TryRecvError::Disconnected,
                _ => TryRecvError::Empty,
            }),
            Flavor::Timer(t, convert) => t.try_take().map(convert).ok_or(TryRecvError::Empty),
            Flavor::Never => Err(TryRecvError::Empty),
        }
    }

    /// Receives a message, waiting at most `timeout` for one.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (tx, rx) = weft::chan::unbounded();
    /// assert!(rx.recv_timeout(Duration::from_millis(2)).unwrap_err().is_timeout());
    /// tx.send_blocking(1).unwrap();
    /// assert_eq!(rx.recv_timeout(Duration::from_millis(2)), Ok(1));
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        match Instant::now().checked_add(timeout) {
            Some(d) => self.recv_deadline(d),
            None => self.recv_blocking().map_err(RecvTimeoutError::from),
        }
    }

    /// Receives a message, waiting until `deadline` at the latest.
    ///
    /// ```
    /// let (_tx, rx) = weft::chan::unbounded::<i32>();
    /// assert!(rx.recv_deadline(std::time::Instant::now()).is_err());
    /// ```
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        match self.try_recv() {
            Ok(v) => return Ok(v),
            Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) => {}
        }
        match &self.flavor {
            Flavor::Chan(_) => {}
            Flavor::Timer(t, convert) => {
                return t
                    .recv_blocking(Some(deadline))
                    .map(convert)
                    .ok_or(RecvTimeoutError::Timeout)
            }
            Flavor::Never => {
                crate::fiber::wait::sleep_until(deadline);
                return Err(RecvTimeoutError::Timeout);
            }
        }
        let mut fut = std::pin::pin!(self.recv());
        match crate::fiber::wait::wait_until(fut.as_mut(), deadline) {
            Some(r) => r.map_err(RecvTimeoutError::from),
            // One last look (a value may have been handed over at the deadline), then
            // the node comes off the list, keeping a value handed over after this
            // poll (given back, it could overfill the buffer: `Chan::withdraw_recv`).
            None => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                match fut.as_mut().poll(&mut cx) {
                    Poll::Ready(r) => r.map_err(RecvTimeoutError::from),
                    Poll::Pending => fut.as_mut().withdraw().ok_or(RecvTimeoutError::Timeout),
                }
            }
        }
    }

    /// Closes the channel (see [`Sender::close`]); `true` only for the call that
    /// closed it.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded::<i32>();
    /// assert!(rx.close());
    /// assert!(tx.send_blocking(1).is_err());
    /// ```
    pub fn close(&self) -> bool {
        match &self.flavor {
            Flavor::Chan(c) => c.close(false).0,
            _ => false,
        }
    }

    /// Whether the channel is disconnected (timer receivers never are).
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded::<()>();
    /// drop(tx);
    /// assert!(rx.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        match &self.flavor {
            Flavor::Chan(c) => c.is_closed(),
            _ => false,
        }
    }

    /// The number of messages ready to receive.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::bounded(4);
    /// tx.send_blocking(1).unwrap();
    /// assert_eq!(rx.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        match &self.flavor {
            Flavor::Chan(c) => c.len(),
            Flavor::Timer(t, _) => usize::from(t.is_ready()),
            Flavor::Never => 0,
        }
    }

    /// Whether no message is ready.
    ///
    /// ```
    /// assert!(weft::chan::never::<i32>().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the buffer is full.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::bounded(1);
    /// tx.send_blocking(1).unwrap();
    /// assert!(rx.is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        match &self.flavor {
            Flavor::Chan(c) => c.is_full(),
            Flavor::Timer(t, _) => t.is_ready(),
            Flavor::Never => true,
        }
    }

    /// The capacity: `None` for an unbounded channel; timer receivers hold one
    /// message, `never` none.
    ///
    /// ```
    /// assert_eq!(weft::chan::bounded::<i32>(0).1.capacity(), Some(0));
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        match &self.flavor {
            Flavor::Chan(c) => c.cap,
            Flavor::Timer(..) => Some(1),
            Flavor::Never => Some(0),
        }
    }

    /// Whether both receivers belong to the same channel.
    ///
    /// ```
    /// let (_tx, rx) = weft::chan::unbounded::<i32>();
    /// assert!(rx.same_channel(&rx.clone()));
    /// ```
    pub fn same_channel(&self, other: &Receiver<T>) -> bool {
        match (&self.flavor, &other.flavor) {
            (Flavor::Chan(a), Flavor::Chan(b)) => Arc::ptr_eq(a, b),
            (Flavor::Timer(a, _), Flavor::Timer(b, _)) => Arc::ptr_eq(a, b),
            (Flavor::Never, Flavor::Never) => true,
            _ => false,
        }
    }

    /// A blocking iterator over the messages; it ends when the channel is
    /// disconnected and drained.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// tx.send_blocking(1).unwrap();
    /// tx.send_blocking(2).unwrap();
    /// drop(tx);
    /// assert_eq!(rx.iter().collect::<Vec<_>>(), [1, 2]);
    /// ```
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// An iterator over the messages there now; it never waits.
    ///
    /// ```
    /// let (tx, rx) = weft::chan::unbounded();
    /// tx.send_blocking(1).unwrap();
    /// assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1]);
    /// ```
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    pub(crate) fn flavor_chan(&self) -> Option<&Chan<T>> {
        match &self.flavor {
            Flavor::Chan(c) => Some(c),
            _ => None,
        }
    }

    pub(crate) fn flavor_timer(&self) -> Option<(&Timer, Convert<T>)> {
        match &self.flavor {
            Flavor::Timer(t, c) => Some((t, *c)),
            _ => None,
        }
    }

    /// The address that identifies the channel (for `SelectedOperation`).
    pub(crate) fn addr(&self) -> *const () {
        match &self.flavor {
            Flavor::Chan(c) => Arc::as_ptr(c).cast(),
            Flavor::Timer(t, _) => Arc::as_ptr(t).cast(),
            Flavor::Never => std::ptr::null(),
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        let flavor = match &self.flavor {
            Flavor::Chan(c) => {
                c.receivers.fetch_add(1, Relaxed);
                Flavor::Chan(c.clone())
            }
            Flavor::Timer(t, c) => Flavor::Timer(t.clone(), *c),
            Flavor::Never => Flavor::Never,
        };
        Receiver {
            flavor,
            stream: None,
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        if let Flavor::Chan(c) = &self.flavor {
            if let Some(StreamState::Chan(mut s)) = self.stream.take() {
                s.cancel(c);
            }
            if release_end(&c.receivers) {
                c.disconnect(true);
            }
        }
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Receiver { .. }")
    }
}

impl<T> futures_core::Stream for Receiver<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        // `Receiver` is `Unpin`: the receive in progress is boxed.
        let this = self.get_mut();
        match &this.flavor {
            Flavor::Chan(c) => {
                if !matches!(this.stream, Some(StreamState::Chan(_))) {
                    this.stream = Some(StreamState::Chan(ops::StreamRecv::new()));
                }
                let Some(StreamState::Chan(s)) = &mut this.stream else {
                    unreachable!()
                };
                s.poll(c, cx)
            }
            Flavor::Timer(t, convert) => {
                if !matches!(this.stream, Some(StreamState::Timer(_))) {
                    let r = timer::TimerRecv::new(Some(t.clone()), *convert);
                    this.stream = Some(StreamState::Timer(r));
                }
                let Some(StreamState::Timer(r)) = &mut this.stream else {
                    unreachable!()
                };
                r.poll(cx).map(Some)
            }
            Flavor::Never => Poll::Pending,
        }
    }
}

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync + Clone + UnwindSafe + RefUnwindSafe>() {}
    is::<Sender<u8>>();
    is::<Receiver<u8>>();
    let _ = AcqRel;
}
