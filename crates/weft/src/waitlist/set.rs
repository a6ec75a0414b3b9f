//! A set of wakers by id, released all at once: for waits that no one completes one by
//! one, but that a state change sends back to look again (a timer's message given back
//! by an unperformed select, an ordered channel's handle put back by a cancelled
//! receive). A [`Node`](super::Node) list hands each waiter its result; here every
//! waiter looks for itself, so a waker is all an entry holds.
//!
//! Nothing here clones or drops a waker under the owner's lock: the caller clones
//! before it locks and drops what [`WakerSet::arm`] and [`WakerSet::disarm`] give back
//! after it unlocks, and wakes what [`WakerSet::take_all`] gives back then (a waker's
//! clone, drop and wake are its owner's code, which may take that same lock).

use std::task::Waker;

/// The wakers, by id, and the count of [`take_all`](WakerSet::take_all)s (each one
/// removes every entry: an entry armed before it knows it was released).
#[derive(Default)]
pub(crate) struct WakerSet {
    next_id: u64,
    rounds: u64,
    list: Vec<(u64, Waker)>,
}

/// One waiter's place in a [`WakerSet`]: its id and the round it was armed in (none
/// before its first [`arm`](WakerSet::arm) and after its `disarm`).
#[derive(Default)]
pub(crate) struct Armed(Option<(u64, u64)>);

impl WakerSet {
    /// Puts `waker` in `at`'s entry, or adds an entry if it has none (first time, or a
    /// `take_all` removed it). Returns whether a `take_all` released `at` since it was
    /// armed (look again), and the waker replaced, to drop after the lock.
    pub(crate) fn arm(&mut self, at: &mut Armed, waker: Waker) -> (bool, Option<Waker>) {
        let current = at.0.filter(|&(_, round)| round == self.rounds);
        if let Some((id, _)) = current {
            if let Some(e) = self.list.iter_mut().find(|e| e.0 == id) {
                return (false, Some(std::mem::replace(&mut e.1, waker)));
            }
        }
        let released = at.0.is_some();
        let id = self.next_id;
        self.next_id += 1;
        self.list.push((id, waker));
        at.0 = Some((id, self.rounds));
        (released, None)
    }

    /// Takes `at`'s entry out, if it has one; its waker is the caller's to drop after
    /// the lock.
    pub(crate) fn disarm(&mut self, at: &mut Armed) -> Option<Waker> {
        let (id, _) = at.0.take()?;
        let i = self.list.iter().position(|e| e.0 == id)?;
        Some(self.list.swap_remove(i).1)
    }

    /// Removes every entry; the caller wakes them after the lock.
    pub(crate) fn take_all(&mut self) -> Vec<Waker> {
        self.rounds += 1;
        std::mem::take(&mut self.list)
            .into_iter()
            .map(|(_, w)| w)
            .collect()
    }
}
