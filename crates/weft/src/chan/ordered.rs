//! The ordered task channel (spec 003): FIFO on task handles, not on completion
//! times. Work starts at once; its handle is queued; the receiver joins the handles in
//! queue order, so results come out in send order whatever order the work finishes in.

use std::fmt;
use std::future::Future;
use std::task::{Poll, Waker};

use super::{bounded, Receiver, RecvError, SendError, Sender};
use crate::base::Mutex;
use crate::task::waker::drop_each;
use crate::task::{JoinError, JoinHandle};
use crate::waitlist::{Armed, WakerSet};

/// Creates an ordered task channel that queues at most `cap` handles of started
/// work (a sender then waits for room).
///
/// ```
/// use std::time::Duration;
/// let rt = weft::Runtime::new().unwrap();
/// let (tx, rx) = weft::chan::ordered::<u64>(8);
/// for i in 0..4u64 {
///     // Later work finishes first; results still come out in send order.
///     tx.spawn(async move {
///         weft::time::sleep(Duration::from_millis(20 - 5 * i)).await;
///         i
///     })
///     .unwrap();
/// }
/// drop(tx);
/// let got: Vec<u64> = std::iter::from_fn(|| rx.recv_blocking().ok())
///     .map(|r| r.unwrap())
///     .collect();
/// assert_eq!(got, [0, 1, 2, 3]);
/// ```
pub fn ordered<T>(cap: usize) -> (OrderedSender<T>, OrderedReceiver<T>) {
    let (tx, rx) = bounded(cap);
    (
        OrderedSender { tx },
        OrderedReceiver {
            rx,
            head: Mutex::new(Head {
                next: 0,
                back: std::collections::VecDeque::new(),
                joining: 0,
                waiting: WakerSet::default(),
            }),
        },
    )
}

/// The error of a spawn whose handle could not be queued: the work was joined, and its
/// result comes back.
pub type OrderedSendError<T> = SendError<Result<T, JoinError>>;

/// Starts work and queues its handle (see [`ordered`]).
pub struct OrderedSender<T> {
    tx: Sender<Queued<T>>,
}

/// Yields the results of the work sent to an [`ordered`] channel, in send order.
/// Dropping it cancels the work still queued and drops the results already finished;
/// if some of those panic as they drop, every one is still dropped and the first panic
/// goes on from the receiver's drop.
pub struct OrderedReceiver<T> {
    rx: Receiver<Queued<T>>,
    /// The handle a cancelled `recv` was joining: the next receive joins it first.
    head: Mutex<Head<T>>,
}

fn handle() -> crate::Handle {
    crate::Handle::try_current()
        .ok()
        .or_else(crate::runtime::latest)
        .expect("the ordered channel needs a weft runtime: none is running")
}

impl<T: Send + 'static> OrderedSender<T> {
    /// Spawns `future` as a task and queues its handle, waiting by `weft::wait`'s rule
    /// while `cap` handles are queued. If the receiver is gone, the task is joined and
    /// its result handed back in the error.
    ///
    /// # Panics
    /// If no weft runtime is running.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::ordered(1);
    /// tx.spawn(async { 1 }).unwrap();
    /// assert_eq!(rx.recv_blocking().unwrap().unwrap(), 1);
    /// drop(rx);
    /// let back = tx.spawn(async { 2 }).unwrap_err();
    /// assert_eq!(back.into_inner().unwrap(), 2);
    /// ```
    pub fn spawn<F>(&self, future: F) -> Result<(), OrderedSendError<T>>
    where
        F: Future<Output = T> + Send + 'static,
    {
        self.queue(handle().spawn(future))
    }

    /// As [`spawn`](Self::spawn), for a closure run on a fiber.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::ordered(2);
    /// tx.spawn_fiber(|| 3).unwrap();
    /// assert_eq!(rx.recv_blocking().unwrap().unwrap(), 3);
    /// ```
    pub fn spawn_fiber<F>(&self, f: F) -> Result<(), OrderedSendError<T>>
    where
        F: FnOnce() -> T + Send + 'static,
    {
        let handle = handle();
        let _enter = crate::runtime::enter(&handle);
        self.queue(crate::fiber::spawn(f))
    }

    /// As [`spawn`](Self::spawn), waiting for room as a future (a `Send` one). The work
    /// starts at the call; if the future is dropped before the work's handle is queued
    /// (a timeout around it, say), the work is cancelled, since nobody could see its
    /// result.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::ordered(1);
    /// rt.block_on(async move {
    ///     tx.spawn_async(async { 5 }).await.unwrap();
    ///     assert_eq!(rx.recv().await.unwrap().unwrap(), 5);
    /// });
    /// ```
    pub fn spawn_async<F>(
        &self,
        future: F,
    ) -> impl Future<Output = Result<(), OrderedSendError<T>>> + Send + '_
    where
        F: Future<Output = T> + Send + 'static,
    {
        // A `Queued` handle: if this future goes before the channel took it, the work
        // is cancelled with it (found in review: the work ran on, detached, its result
        // lost unseen). Once taken, it is the channel's, whatever becomes of this
        // future.
        let h = Queued(Some(handle().spawn(future)));
        async move {
            match self.tx.send(h).await {
                Ok(()) => Ok(()),
                Err(SendError(mut h)) => {
                    // Joined through the wrapper: dropped while joining, it cancels.
                    let r = h.0.as_mut().expect("not taken yet").await;
                    drop(h.into_inner());
                    Err(SendError(r))
                }
            }
        }
    }

    fn queue(&self, h: JoinHandle<T>) -> Result<(), OrderedSendError<T>> {
        match self.tx.send_blocking(Queued(Some(h))) {
            Ok(()) => Ok(()),
            // Spec 003's send-failure rule: join the work before reporting.
            Err(SendError(h)) => Err(SendError(h.into_inner().join())),
        }
    }
}

impl<T> Clone for OrderedSender<T> {
    fn clone(&self) -> Self {
        OrderedSender {
            tx: self.tx.clone(),
        }
    }
}

impl<T: Send + 'static> OrderedReceiver<T> {
    /// The next result in send order (a `Send` future); `Err(RecvError)` once every
    /// sender is gone and the queue is drained. A receive dropped while it waits for
    /// the work loses nothing: the next one picks it up.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::ordered::<i32>(4);
    /// let r = rt.block_on(async move {
    ///     tx.spawn_async(async { 7 }).await.unwrap();
    ///     drop(tx);
    ///     (rx.recv().await, rx.recv().await)
    /// });
    /// assert_eq!(r.0.unwrap().unwrap(), 7);
    /// assert!(r.1.is_err());
    /// ```
    #[allow(clippy::manual_async_fn)] // spelled out: the future is promised `Send`
    pub fn recv(
        &self,
    ) -> impl Future<Output = Result<Result<T, JoinError>, RecvError>> + Send + '_ {
        async move {
            let (seq, h) = match self.take().await {
                Some(taken) => taken,
                None => return Err(RecvError),
            };
            let mut guard = PutBack {
                slot: &self.head,
                seq,
                h: Some(h),
            };
            let r = guard.h.as_mut().expect("held").await;
            guard.h = None;
            Ok(r)
        }
    }

    /// The next handle to join, numbered, and counted in `Head::joining` (the caller's
    /// `PutBack` counts it out); `None` once every sender is gone, the queue is drained
    /// and no receive holds a handle it could put back.
    ///
    /// A receive that waits on the inner channel also waits for a put-back: it
    /// registers in `Head::waiting` under the head's lock in the same look that found
    /// `back` empty, and a put-back (or the last join's end, for a receive waiting to
    /// report the end) wakes every registered receive after inserting under that lock.
    /// So a handle put back while another receive waits reaches it (found in review:
    /// the waiting receive slept on the empty channel, and reported the end while a
    /// result was still queued).
    async fn take(&self) -> Taken<T> {
        let mut registered = Unregister {
            slot: &self.head,
            at: Armed::default(),
        };
        let at = &mut registered.at;
        let mut inner = std::pin::pin!(self.rx.recv());
        let mut closed = false;
        std::future::poll_fn(|cx| {
            // Wakers are cloned before the head's lock and dropped after it: their
            // clone and drop are their owners' code.
            let (found, spare) = self.look(at, closed, cx.waker().clone());
            drop(spare);
            if let Some(found) = found {
                return Poll::Ready(found);
            }
            if closed {
                return Poll::Pending;
            }
            match inner.as_mut().poll(cx) {
                Poll::Ready(Ok(q)) => {
                    let h = q.into_inner();
                    let mut head = self.head.lock();
                    head.next += 1;
                    head.joining += 1;
                    Poll::Ready(Some((head.next, h)))
                }
                Poll::Ready(Err(RecvError)) => {
                    // Drained and disconnected; a handle may still come back from a
                    // receive that holds one: look again, registered.
                    closed = true;
                    let (found, spare) = self.look(at, closed, cx.waker().clone());
                    drop(spare);
                    found.map_or(Poll::Pending, Poll::Ready)
                }
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// One look under the head's lock for the receive armed at `at`: a handle put back (counted
    /// in `joining`), or, once the inner channel is drained and disconnected
    /// (`closed`), the end if no receive holds a handle. Otherwise `waker` is
    /// registered. Returns what was found, and a waker for the caller to drop after
    /// the lock (the one replaced, or `waker` if unused).
    fn look(
        &self,
        at: &mut Armed,
        closed: bool,
        waker: Waker,
    ) -> (Option<Taken<T>>, Option<Waker>) {
        let mut head = self.head.lock();
        if let Some(held) = head.back.pop_front() {
            head.joining += 1;
            return (Some(Some(held)), Some(waker));
        }
        if closed && head.joining == 0 {
            return (Some(None), Some(waker));
        }
        // Whether a put-back released it since is moot: this look found nothing.
        let (_, replaced) = head.waiting.arm(at, waker);
        (None, replaced)
    }

    /// As [`recv`](Self::recv), blocking by `weft::wait`'s rule.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::ordered(4);
    /// tx.spawn_fiber(|| "x").unwrap();
    /// drop(tx);
    /// assert_eq!(rx.recv_blocking().unwrap().unwrap(), "x");
    /// assert!(rx.recv_blocking().is_err());
    /// ```
    pub fn recv_blocking(&self) -> Result<Result<T, JoinError>, RecvError> {
        crate::wait(self.recv())
    }
}

/// Puts a handle back at the head if the receive joining it is dropped, in queue
/// order among those put back.
struct PutBack<'a, T> {
    slot: &'a Mutex<Head<T>>,
    seq: u64,
    h: Option<JoinHandle<T>>,
}

/// Handles put back by cancelled receives, in queue order (each numbered when it left
/// the channel), and the receives waiting for one (see `OrderedReceiver::take`).
struct Head<T> {
    next: u64,
    back: std::collections::VecDeque<(u64, JoinHandle<T>)>,
    /// Receives holding a handle (joining it): each may still put it back.
    joining: usize,
    /// The receives waiting, with their wakers.
    waiting: WakerSet,
}

impl<T> Drop for PutBack<'_, T> {
    fn drop(&mut self) {
        let mut head = self.slot.lock();
        head.joining -= 1;
        let put_back = self.h.take().map(|h| {
            let at = head.back.partition_point(|(s, _)| *s < self.seq);
            head.back.insert(at, (self.seq, h));
        });
        // A put-back wakes the waiting receives, and so does the last join's end (a
        // receive that found the channel disconnected waits for it to report the end).
        let wake = if put_back.is_some() || head.joining == 0 {
            head.waiting.take_all()
        } else {
            Vec::new()
        };
        drop(head);
        for w in wake {
            w.wake();
        }
    }
}

/// What a receive takes: the next handle to join, numbered; `None` at the end.
type Taken<T> = Option<(u64, JoinHandle<T>)>;

/// A receive's registration in `Head::waiting`, removed when its `take` ends.
struct Unregister<'a, T> {
    slot: &'a Mutex<Head<T>>,
    at: Armed,
}

impl<T> Drop for Unregister<'_, T> {
    fn drop(&mut self) {
        let w = self.slot.lock().waiting.disarm(&mut self.at);
        // The waker drops after the lock: a waker's drop is its owner's code.
        drop(w);
    }
}

impl<T> Drop for OrderedReceiver<T> {
    fn drop(&mut self) {
        // Close first: a spawn from now on joins its own work; then cancel what is
        // queued. All of it before any handle is dropped: dropping a handle drops a
        // finished output, whose `Drop` may panic, and the rest then went uncancelled
        // (found in review).
        self.rx.close();
        let mut queued: Vec<JoinHandle<T>> =
            self.head.lock().back.drain(..).map(|(_, h)| h).collect();
        while let Ok(h) = self.rx.try_recv() {
            queued.push(h.into_inner());
        }
        for h in &queued {
            h.abort();
        }
        // Each handle drops on its own (a finished output's `Drop` may panic; see
        // `drop_each`).
        drop_each(queued);
    }
}

/// A queued handle: dropped before a receiver took it out (by a send future dropped
/// before the channel took it, or by the channel's drain), it cancels its work, whose
/// result nobody could see any more.
struct Queued<T>(Option<JoinHandle<T>>);

impl<T> Queued<T> {
    fn into_inner(mut self) -> JoinHandle<T> {
        self.0.take().expect("a queued handle is taken once")
    }
}

impl<T> Drop for Queued<T> {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

impl<T> fmt::Debug for OrderedSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("OrderedSender { .. }")
    }
}

impl<T> fmt::Debug for OrderedReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("OrderedReceiver { .. }")
    }
}
