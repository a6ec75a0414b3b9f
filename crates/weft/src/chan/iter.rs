//! Iterators over a receiver's messages.

use std::fmt;

use super::Receiver;

/// A blocking iterator over a receiver's messages (see [`Receiver::iter`]).
pub struct Iter<'a, T> {
    pub(super) rx: &'a Receiver<T>,
}

/// A non-blocking iterator over the messages there now (see [`Receiver::try_iter`]).
pub struct TryIter<'a, T> {
    pub(super) rx: &'a Receiver<T>,
}

/// A blocking iterator that owns its receiver.
///
/// ```
/// let (tx, rx) = weft::chan::unbounded();
/// tx.send_blocking(1).unwrap();
/// drop(tx);
/// assert_eq!(rx.into_iter().collect::<Vec<_>>(), [1]);
/// ```
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv_blocking().ok()
    }
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv_blocking().ok()
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}

impl<T> fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Iter { .. }")
    }
}

impl<T> fmt::Debug for TryIter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("TryIter { .. }")
    }
}

impl<T> fmt::Debug for IntoIter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("IntoIter { .. }")
    }
}
