//! The errors of channel operations, named as crossbeam-channel names them. Those of
//! sends give the value back.

use std::error::Error;
use std::fmt;

/// The channel is disconnected: the value could not be sent and comes back.
///
/// ```
/// let (tx, rx) = weft::chan::unbounded::<i32>();
/// drop(rx);
/// assert_eq!(tx.send_blocking(7).unwrap_err().into_inner(), 7);
/// ```
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

/// Why [`try_send`](super::Sender::try_send) failed.
///
/// ```
/// let (tx, _rx) = weft::chan::bounded(1);
/// tx.try_send(1).unwrap();
/// assert_eq!(tx.try_send(2), Err(weft::chan::TrySendError::Full(2)));
/// ```
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum TrySendError<T> {
    /// The channel is full (or, for a rendezvous channel, no receiver waits).
    Full(T),
    /// The channel is disconnected.
    Disconnected(T),
}

/// Why [`send_timeout`](super::Sender::send_timeout) failed.
///
/// ```
/// use std::time::Duration;
/// let (tx, _rx) = weft::chan::bounded(0);
/// let e = tx.send_timeout(1, Duration::from_millis(1)).unwrap_err();
/// assert!(e.is_timeout());
/// ```
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum SendTimeoutError<T> {
    /// No room (or no receiver) before the deadline.
    Timeout(T),
    /// The channel is disconnected.
    Disconnected(T),
}

/// The channel is empty and disconnected.
///
/// ```
/// let (tx, rx) = weft::chan::unbounded::<i32>();
/// drop(tx);
/// assert_eq!(rx.recv_blocking(), Err(weft::chan::RecvError));
/// ```
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct RecvError;

/// Why [`try_recv`](super::Receiver::try_recv) failed.
///
/// ```
/// let (_tx, rx) = weft::chan::unbounded::<i32>();
/// assert_eq!(rx.try_recv(), Err(weft::chan::TryRecvError::Empty));
/// ```
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum TryRecvError {
    /// Nothing to receive now.
    Empty,
    /// Empty and disconnected.
    Disconnected,
}

/// Why [`recv_timeout`](super::Receiver::recv_timeout) failed.
///
/// ```
/// use std::time::Duration;
/// let (_tx, rx) = weft::chan::unbounded::<i32>();
/// assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Err(weft::chan::RecvTimeoutError::Timeout));
/// ```
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum RecvTimeoutError {
    /// Nothing arrived before the deadline.
    Timeout,
    /// Empty and disconnected.
    Disconnected,
}

/// No operation of a [`Select`](super::Select) was ready.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct TrySelectError;

/// No operation of a [`Select`](super::Select) became ready before the deadline.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct SelectTimeoutError;

/// No operation of a [`Select`](super::Select) was ready.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct TryReadyError;

/// No operation of a [`Select`](super::Select) became ready before the deadline.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct ReadyTimeoutError;

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> TrySendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Disconnected(v) => v,
        }
    }
    /// Whether the channel was full.
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }
    /// Whether the channel was disconnected.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, TrySendError::Disconnected(_))
    }
}

impl<T> SendTimeoutError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            SendTimeoutError::Timeout(v) | SendTimeoutError::Disconnected(v) => v,
        }
    }
    /// Whether the deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, SendTimeoutError::Timeout(_))
    }
    /// Whether the channel was disconnected.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, SendTimeoutError::Disconnected(_))
    }
}

impl TryRecvError {
    /// Whether the channel was empty.
    pub fn is_empty(&self) -> bool {
        matches!(self, TryRecvError::Empty)
    }
    /// Whether the channel was disconnected.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, TryRecvError::Disconnected)
    }
}

impl RecvTimeoutError {
    /// Whether the deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, RecvTimeoutError::Timeout)
    }
    /// Whether the channel was disconnected.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, RecvTimeoutError::Disconnected)
    }
}

impl<T> From<SendError<T>> for TrySendError<T> {
    fn from(e: SendError<T>) -> Self {
        TrySendError::Disconnected(e.0)
    }
}

impl<T> From<SendError<T>> for SendTimeoutError<T> {
    fn from(e: SendError<T>) -> Self {
        SendTimeoutError::Disconnected(e.0)
    }
}

impl From<RecvError> for TryRecvError {
    fn from(_: RecvError) -> Self {
        TryRecvError::Disconnected
    }
}

impl From<RecvError> for RecvTimeoutError {
    fn from(_: RecvError) -> Self {
        RecvTimeoutError::Disconnected
    }
}

// The value's type need not be `Debug`: the messages name the error, not the value.
impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError { .. }")
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            SendTimeoutError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

macro_rules! display {
    ($ty:ty, $($pat:pat => $msg:expr),+ $(,)?) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $($pat => $msg),+ })
            }
        }
    };
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sending on a disconnected channel")
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrySendError::Full(_) => "sending on a full channel",
            TrySendError::Disconnected(_) => "sending on a disconnected channel",
        })
    }
}

impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendTimeoutError::Timeout(_) => "timed out waiting on send operation",
            SendTimeoutError::Disconnected(_) => "sending on a disconnected channel",
        })
    }
}

display!(RecvError, RecvError => "receiving on an empty and disconnected channel");
display!(TryRecvError,
    TryRecvError::Empty => "receiving on an empty channel",
    TryRecvError::Disconnected => "receiving on an empty and disconnected channel");
display!(RecvTimeoutError,
    RecvTimeoutError::Timeout => "timed out waiting on receive operation",
    RecvTimeoutError::Disconnected => "channel is empty and disconnected");
display!(TrySelectError, TrySelectError => "all operations in select would block");
display!(SelectTimeoutError, SelectTimeoutError => "timed out waiting on select");
display!(TryReadyError, TryReadyError => "all operations in select would block");
display!(ReadyTimeoutError, ReadyTimeoutError => "timed out waiting on ready");

impl<T> Error for SendError<T> {}
impl<T> Error for TrySendError<T> {}
impl<T> Error for SendTimeoutError<T> {}
impl Error for RecvError {}
impl Error for TryRecvError {}
impl Error for RecvTimeoutError {}
impl Error for TrySelectError {}
impl Error for SelectTimeoutError {}
impl Error for TryReadyError {}
impl Error for ReadyTimeoutError {}
