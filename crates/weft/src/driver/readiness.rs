//! The readiness of one registered source: a word of readiness bits, a tick and a
//! shutdown bit, and the wakers waiting on it (see [`super::io`] for how the driver
//! sets it and why the tick makes a clear safe).

use std::io;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::task::{Context, Poll, Waker};

use crate::base::{AtomicU64, Mutex, MutexGuard};
use crate::task::waker::Prepared;

/// Readiness bits of the word (bits 0..8).
pub(crate) const READABLE: u64 = 1;
pub(crate) const WRITABLE: u64 = 1 << 1;
pub(crate) const READ_CLOSED: u64 = 1 << 2;
pub(crate) const WRITE_CLOSED: u64 = 1 << 3;
pub(crate) const ERROR: u64 = 1 << 4;
const READY_MASK: u64 = 0xff;
/// The tick: bits 16..48, bumped by every event.
const TICK_SHIFT: u32 = 16;
const TICK_MASK: u64 = 0xffff_ffff << TICK_SHIFT;
/// Set when the runtime shuts down: every wait ends with an error.
const SHUTDOWN: u64 = 1 << 63;

/// Which way an operation goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Read,
    Write,
}

impl Direction {
    /// The bits that let an operation this way proceed (or fail, which also ends the
    /// wait).
    fn mask(self) -> u64 {
        match self {
            Direction::Read => READABLE | READ_CLOSED | ERROR,
            Direction::Write => WRITABLE | WRITE_CLOSED | ERROR,
        }
    }
}

/// A snapshot of a source's readiness, taken before an operation: what it may clear
/// if the operation finds the source not ready after all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadyEvent {
    tick: u64,
    pub(crate) ready: u64,
}

/// The error every wait on a source of a runtime that shut down ends with.
pub(crate) fn shutdown_error() -> io::Error {
    io::Error::other("the weft runtime this socket belongs to has shut down")
}

/// The wakers waiting on a source, under the source's lock.
///
/// No waker is dropped while the lock is held: a waker is user code, and its last
/// clone may own what it wakes (an executor whose waker is an `Arc` of its task, the
/// task owning its future); that future may hold a readiness future of this same
/// source, whose `Drop` takes this lock. Dropped under it, the thread deadlocked on
/// itself (found in review, `tests/review_s26_net.rs`, `waker_dropped_*`). A waker
/// replaced or removed is moved out and dropped after the guard.
#[derive(Default)]
struct Waiters {
    /// The `poll_read`/`poll_write` slots: the last poller of each direction.
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// Readiness futures (`readable`, `writable`, blocking waits), by id.
    list: Vec<(u64, Direction, Waker)>,
    next_id: u64,
}

/// The readiness of one registered source and who waits on it.
pub(crate) struct ScheduledIo {
    word: AtomicU64,
    waiters: Mutex<Waiters>,
}

impl ScheduledIo {
    pub(crate) fn new() -> ScheduledIo {
        ScheduledIo {
            word: AtomicU64::new(0),
            waiters: Mutex::new(Waiters::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock()
    }

    /// What the word says for `dir` now; `Err` once the runtime shut down.
    pub(crate) fn snapshot(&self, dir: Direction) -> io::Result<ReadyEvent> {
        let w = self.word.load(Acquire);
        if w & SHUTDOWN != 0 {
            return Err(shutdown_error());
        }
        Ok(ReadyEvent {
            tick: w & TICK_MASK,
            ready: w & dir.mask(),
        })
    }

    /// Records an event: ORs `ready` in and bumps the tick, then wakes who waits for
    /// it (into `wake`, to be woken by the caller after its locks are released).
    pub(crate) fn set_readiness(&self, ready: u64, wake: &mut Vec<Waker>) {
        let mut cur = self.word.load(Relaxed);
        loop {
            let tick = ((cur & TICK_MASK) >> TICK_SHIFT).wrapping_add(1) << TICK_SHIFT;
            let new = (cur & !TICK_MASK) | (tick & TICK_MASK) | ready;
            match self.word.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(w) => cur = w,
            }
        }
        self.take_wakers(ready, wake);
    }

    fn take_wakers(&self, ready: u64, wake: &mut Vec<Waker>) {
        let mut w = self.lock();
        if ready & Direction::Read.mask() != 0 {
            wake.extend(w.reader.take());
        }
        if ready & Direction::Write.mask() != 0 {
            wake.extend(w.writer.take());
        }
        let mut i = 0;
        while i < w.list.len() {
            if ready & w.list[i].1.mask() != 0 {
                wake.push(w.list.swap_remove(i).2);
            } else {
                i += 1;
            }
        }
    }

    /// Ends every wait with the shutdown error.
    pub(crate) fn shutdown(&self) {
        self.word.fetch_or(SHUTDOWN, AcqRel);
        let mut wake = Vec::new();
        self.take_wakers(READY_MASK, &mut wake);
        for w in wake {
            super::wake_guarded(w);
        }
    }

    /// After a system call said `WouldBlock`: clears everything `ev` saw, closed and
    /// error bits included, unless an event came since (the tick moved on). A closed
    /// or failed direction never says `WouldBlock` (it returns 0 or the error), so the
    /// call proves those bits stale; kept, they would make every later wait ready at
    /// once and a `WouldBlock` retry loop spin for ever. (They are stale, for example,
    /// after `EPOLLERR` for an entry on the socket's error queue, such as a transmit
    /// timestamp: mio reports `EPOLLOUT | EPOLLERR` as write-closed too.)
    pub(crate) fn clear_readiness(&self, ev: ReadyEvent) {
        self.clear_bits(ev, ev.ready);
    }

    /// After a read or write shorter than its buffer (the socket's queue drained or
    /// filled): clears the `READABLE`/`WRITABLE` bit `ev` saw, unless an event came
    /// since. Closed and error bits stay: an end of stream that came with the last
    /// data must still end the next read.
    pub(crate) fn clear_drained(&self, ev: ReadyEvent) {
        self.clear_bits(ev, ev.ready & (READABLE | WRITABLE));
    }

    fn clear_bits(&self, ev: ReadyEvent, clear: u64) {
        let mut cur = self.word.load(Relaxed);
        loop {
            if cur & TICK_MASK != ev.tick {
                return;
            }
            let new = cur & !clear;
            match self.word.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => return,
                Err(w) => cur = w,
            }
        }
    }

    /// Ready for `dir` now, or the waker stored in the direction's slot (the last
    /// poller of that direction is the one woken, as with tokio's `poll_read_ready`).
    pub(crate) fn poll_ready(
        &self,
        cx: &mut Context<'_>,
        dir: Direction,
    ) -> Poll<io::Result<ReadyEvent>> {
        let ev = self.snapshot(dir)?;
        if ev.ready != 0 {
            return Poll::Ready(Ok(ev));
        }
        // Declared before the guard, so dropped after it on every path (see
        // `Waiters`: no waker is cloned or dropped under the lock).
        let mut waker = Prepared::new(cx.waker());
        let mut _replaced = None;
        let mut w = self.lock();
        let slot = match dir {
            Direction::Read => &mut w.reader,
            Direction::Write => &mut w.writer,
        };
        _replaced = waker.store(slot);
        // Under the lock: an event either set the word before we read it here, or
        // takes the waker just stored.
        let ev = self.snapshot(dir)?;
        drop(w);
        if ev.ready != 0 {
            Poll::Ready(Ok(ev))
        } else {
            crate::task::diag::note_wait(cx.waker(), crate::task::diag::WaitOn::Socket);
            Poll::Pending
        }
    }

    /// Like [`poll_ready`](Self::poll_ready) for a waiter that may be one of many:
    /// `id` names its entry in the list (0: none yet), which [`forget`](Self::forget)
    /// removes when the waiter goes.
    pub(crate) fn poll_ready_listed(
        &self,
        cx: &mut Context<'_>,
        dir: Direction,
        id: &mut u64,
    ) -> Poll<io::Result<ReadyEvent>> {
        let ev = self.snapshot(dir)?;
        if ev.ready != 0 {
            self.forget(id);
            return Poll::Ready(Ok(ev));
        }
        // Declared before the guard, so dropped after it on every path.
        let mut waker = Prepared::new(cx.waker());
        let mut _replaced = None;
        let mut w = self.lock();
        if let Some(entry) = w.list.iter_mut().find(|e| *id != 0 && e.0 == *id) {
            if !entry.2.will_wake(cx.waker()) {
                _replaced = Some(std::mem::replace(&mut entry.2, waker.take()));
            }
        } else {
            w.next_id += 1;
            *id = w.next_id;
            let new = (*id, dir, waker.take());
            w.list.push(new);
        }
        let ev = self.snapshot(dir)?;
        drop(w);
        if ev.ready != 0 {
            self.forget(id);
            Poll::Ready(Ok(ev))
        } else {
            crate::task::diag::note_wait(cx.waker(), crate::task::diag::WaitOn::Socket);
            Poll::Pending
        }
    }

    /// (waker in the read slot, waker in the write slot, listed waiters), for the
    /// models.
    #[cfg(all(test, loom))]
    pub(crate) fn census(&self) -> (bool, bool, usize) {
        let w = self.lock();
        (w.reader.is_some(), w.writer.is_some(), w.list.len())
    }

    /// Removes the list entry `id` (if any is still there); its waker is dropped once
    /// the lock is released.
    pub(crate) fn forget(&self, id: &mut u64) {
        if *id != 0 {
            let removed = {
                let mut w = self.lock();
                let at = w.list.iter().position(|e| e.0 == *id);
                at.map(|i| w.list.swap_remove(i))
            };
            *id = 0;
            drop(removed);
        }
    }
}
