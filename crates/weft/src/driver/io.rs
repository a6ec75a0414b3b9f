//! The I/O driver: one `mio::Poll` (epoll) per runtime, run by the timer driver's
//! holder, and the readiness of every registered source.
//!
//! **Who polls.** The worker holding the timer driver (see [`super::timer`]) sleeps in
//! `epoll_wait` instead of on its futex, with the next timer deadline as the timeout
//! (none when no timer is pending: an idle runtime makes no wakeups). Its parker is
//! then in the `PARKED_EXT` state, and an `unpark` of it writes to mio's `Waker`
//! (an eventfd in the same epoll set) instead of waking a futex. Busy workers poll
//! with a zero timeout at their fairness points when the holder is not inside
//! `epoll_wait` ([`IoDriver::poll_now`]), so readiness is seen while every worker is
//! busy.
//!
//! **Readiness.** Each source has a [`ScheduledIo`]: one word holding its readiness
//! bits, a tick and a shutdown bit, and the wakers waiting on it. Sources are
//! registered edge-triggered, so an event means "something changed", and the word
//! accumulates what events said until an operation finds otherwise. An operation
//! snapshots the word (its [`ReadyEvent`]: bits and tick) before it tries the system
//! call; if the call says `WouldBlock` it clears those bits *only if the tick is
//! still the one it saw*. An event that arrives during the call bumps the tick, so
//! its bits survive and the operation tries again instead of sleeping with data
//! ready. The event sets the word before it takes the waiters' lock, and a waiter
//! stores its waker under that lock and then reads the word again, so a waiter
//! either sees the bits or is found by the event (the loom model
//! `loom_io_readiness_event_vs_clear` checks both).
//!
//! **Slots.** A registration's token is its slab index and the slot's generation. A
//! slot's generation changes when it is freed, and dispatch ignores an event whose
//! generation is not the slot's, so an event read by `epoll_wait` before a source
//! was deregistered cannot wake whatever reuses the slot.

use std::io;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use super::readiness::{
    shutdown_error, ScheduledIo, ERROR, READABLE, READ_CLOSED, WRITABLE, WRITE_CLOSED,
};

const WAKER_TOKEN: usize = usize::MAX;
/// Events drained per `epoll_wait`.
const EVENTS: usize = 1024;

struct Entry {
    generation: u32,
    io: Option<Arc<ScheduledIo>>,
}

#[derive(Default)]
struct Slab {
    entries: Vec<Entry>,
    free: Vec<usize>,
}

/// The poll and its events buffer, as [`IoDriver::wait`] hands them to
/// [`IoDriver::dispatch`].
pub(crate) struct PollState {
    poll: mio::Poll,
    events: mio::Events,
    /// The wakers a dispatch collects (kept to reuse its allocation).
    wake: Vec<Waker>,
}

/// The runtime's I/O driver.
pub(crate) struct IoDriver {
    state: Mutex<PollState>,
    registry: mio::Registry,
    waker: Arc<mio::Waker>,
    slab: Mutex<Slab>,
    live: AtomicUsize,
    shutdown: AtomicBool,
    /// Events dispatched, for the statistics.
    events: AtomicU64,
}

impl IoDriver {
    pub(crate) fn new() -> io::Result<IoDriver> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(WAKER_TOKEN))?);
        Ok(IoDriver {
            state: Mutex::new(PollState {
                poll,
                events: mio::Events::with_capacity(EVENTS),
                wake: Vec::new(),
            }),
            registry,
            waker,
            slab: Mutex::new(Slab::default()),
            live: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            events: AtomicU64::new(0),
        })
    }

    /// A waker that interrupts the `epoll_wait` of whoever holds the driver: given to
    /// every worker's parker for its `PARKED_EXT` state.
    pub(crate) fn unparker(&self) -> Waker {
        Waker::from(Arc::new(EpollWaker(self.waker.clone())))
    }

    fn slab(&self) -> MutexGuard<'_, Slab> {
        self.slab.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `source` (edge-triggered) and returns its readiness and token.
    pub(crate) fn register(
        &self,
        source: &mut impl mio::event::Source,
        interest: mio::Interest,
    ) -> io::Result<(Arc<ScheduledIo>, mio::Token)> {
        if self.shutdown.load(Acquire) {
            return Err(shutdown_error());
        }
        let io = Arc::new(ScheduledIo::new());
        let token = {
            let mut slab = self.slab();
            let index = match slab.free.pop() {
                Some(i) => i,
                None => {
                    slab.entries.push(Entry {
                        generation: 0,
                        io: None,
                    });
                    slab.entries.len() - 1
                }
            };
            let entry = &mut slab.entries[index];
            entry.io = Some(io.clone());
            mio::Token(((entry.generation as usize) << 32) | index)
        };
        if let Err(e) = self.registry.register(source, token, interest) {
            self.release(token);
            return Err(e);
        }
        self.live.fetch_add(1, Relaxed);
        // A shutdown that ran between the check above and the slab insert did not see
        // this entry: end its waits now.
        if self.shutdown.load(Acquire) {
            io.shutdown();
        }
        Ok((io, token))
    }

    /// Deregisters `source` and frees its slot (an event already read for it is
    /// ignored: the slot's generation moves on).
    pub(crate) fn deregister(&self, source: &mut impl mio::event::Source, token: mio::Token) {
        let _ = self.registry.deregister(source);
        self.live.fetch_sub(1, Relaxed);
        self.release(token);
    }

    fn release(&self, token: mio::Token) {
        let index = token.0 & 0xffff_ffff;
        let mut slab = self.slab();
        let entry = &mut slab.entries[index];
        entry.io = None;
        entry.generation = entry.generation.wrapping_add(1);
        slab.free.push(index);
    }

    /// Whether any source is registered: busy workers skip the zero-timeout poll if
    /// none is.
    pub(crate) fn has_sources(&self) -> bool {
        self.live.load(Relaxed) != 0
    }

    pub(crate) fn sources(&self) -> usize {
        self.live.load(Relaxed)
    }

    pub(crate) fn events(&self) -> u64 {
        self.events.load(Relaxed)
    }

    /// Waits in `epoll_wait` for at most `timeout` (none: until an event or an
    /// unpark). Returns the state with the events read, for [`dispatch`](Self::dispatch)
    /// after the caller's parker left its external park.
    ///
    /// `woken` says whether the caller's parker was unparked already: looked at once
    /// the poll is locked, and then the wait does not sleep. The unpark's eventfd edge
    /// may be gone: between the caller's `PARKED_EXT` and this lock, a busy worker's
    /// [`poll_now`](Self::poll_now) may hold the poll, and its `epoll_wait` takes the
    /// edge (and ignores it). Sleeping then would lose the wake-up for good (the token
    /// stays NOTIFIED, so later unparks make no wake either): found in review as a
    /// runtime whose drop waited for ever for its holder. An unpark after the look
    /// writes the eventfd while this thread holds the poll, so `epoll_wait` sees it.
    pub(crate) fn wait(
        &self,
        timeout: Option<Duration>,
        woken: impl FnOnce() -> bool,
    ) -> MutexGuard<'_, PollState> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let timeout = if woken() {
            Some(Duration::ZERO)
        } else {
            timeout
        };
        let PollState { poll, events, .. } = &mut *st;
        if let Err(e) = poll.poll(events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                // Nothing a worker can do about a failing epoll but say so once per
                // failure and go on with an empty batch.
                eprintln!("weft: epoll_wait failed: {e}");
            }
            events.clear();
        }
        st
    }

    /// A zero-timeout poll by a busy worker, if nobody is inside `epoll_wait` now.
    /// Returns how many tasks it woke.
    pub(crate) fn poll_now(&self) -> usize {
        if !self.has_sources() {
            return 0;
        }
        let Ok(mut st) = self.state.try_lock() else {
            return 0;
        };
        let PollState { poll, events, .. } = &mut *st;
        if poll.poll(events, Some(Duration::ZERO)).is_err() {
            events.clear();
        }
        self.dispatch(st)
    }

    /// Sets the readiness of every source in the batch and wakes its waiters.
    /// Returns how many wakers it woke.
    pub(crate) fn dispatch(&self, mut st: MutexGuard<'_, PollState>) -> usize {
        let PollState { events, wake, .. } = &mut *st;
        if events.is_empty() {
            return 0;
        }
        {
            let slab = self.slab();
            let mut n = 0u64;
            for ev in events.iter() {
                let token = ev.token().0;
                if token == WAKER_TOKEN {
                    continue;
                }
                n += 1;
                let index = token & 0xffff_ffff;
                let generation = (token >> 32) as u32;
                let Some(Entry {
                    generation: g,
                    io: Some(io),
                }) = slab.entries.get(index)
                else {
                    continue;
                };
                if *g != generation {
                    continue;
                }
                let mut ready = 0;
                if ev.is_readable() {
                    ready |= READABLE;
                }
                if ev.is_writable() {
                    ready |= WRITABLE;
                }
                if ev.is_read_closed() {
                    ready |= READ_CLOSED;
                }
                if ev.is_write_closed() {
                    ready |= WRITE_CLOSED;
                }
                if ev.is_error() {
                    ready |= ERROR;
                }
                io.set_readiness(ready, wake);
            }
            self.events.fetch_add(n, Relaxed);
        }
        // Woken with the slab and the poll state free: a waker is user code, and one
        // that took its time while the state was held kept a worker that went to park
        // (and took the drivers) blocked on this lock in `wait`, where nobody could
        // wake it (found in review with the sysmon's rescue dispatching, a waker
        // waiting for a task of the runtime: a deadlock, `tests/review_s33c.rs`). The
        // vector goes back afterwards if the state is free, to keep its allocation.
        let mut wake = std::mem::take(wake);
        drop(st);
        let n = wake.len();
        for w in wake.drain(..) {
            super::wake_guarded(w);
        }
        if let Ok(mut st) = self.state.try_lock() {
            if st.wake.capacity() < wake.capacity() {
                st.wake = wake;
            }
        }
        n
    }

    /// Ends every wait on every source with an error, and refuses new registrations:
    /// the runtime shuts down.
    pub(crate) fn shutdown(&self) {
        self.shutdown.store(true, Release);
        let all: Vec<_> = self
            .slab()
            .entries
            .iter()
            .filter_map(|e| e.io.clone())
            .collect();
        for io in all {
            io.shutdown();
        }
    }
}

struct EpollWaker(Arc<mio::Waker>);

impl std::task::Wake for EpollWaker {
    fn wake(self: Arc<Self>) {
        let _ = self.0.wake();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.0.wake();
    }
}
