//! What a task is doing, for `Runtime::dump` and the deadlock report: a per-task record
//! word (what it waits on, since when), the names of named fibers, and the flags that
//! graceful shutdown puts on tasks.
//!
//! The record is [`Header::diag`]: `since_ms << 8 | what`, where `what` is a [`WaitOn`]
//! and `since_ms` a [`clock::coarse_ms`] reading. Writers (each a relaxed load of the
//! coarse clock and a relaxed store to the header, which the writer is using anyway):
//!
//! - spawn: `None` (scheduled since);
//! - the worker, as a poll starts: `None` (running since);
//! - a wake that makes the task SCHEDULED: `None` (scheduled since);
//! - a weft wait as it registers the task's waker (the slow path of a channel, lock,
//!   timer, socket or join: never the fast path): what it waits on.
//!
//! So a parked (IDLE) task's record names what it waits on when weft registered the
//! wait, and otherwise dates from the start of the poll that parked it. Nothing here
//! synchronises anything: a reader may see a record a moment old, which a dump
//! tolerates.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::task::Waker;

use super::header::Header;
use crate::base::clock;

/// What a parked task waits on, as far as weft knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum WaitOn {
    /// Nothing weft registered (or the task is not parked).
    Unknown = 0,
    /// A channel (`weft::chan`, `weft::sync::{oneshot, watch, broadcast}`).
    Chan = 1,
    /// A `weft::sync` lock or semaphore.
    Lock = 2,
    /// A timer (a sleep, an interval, a timeout's deadline).
    Timer = 3,
    /// A socket's readiness.
    Socket = 4,
    /// Another task's `JoinHandle`.
    Join = 5,
    /// A `weft::sync` signal: `Notify`, `Barrier`, `WaitGroup`.
    Sync = 6,
}

impl WaitOn {
    /// The word a user greps the dump for.
    pub(crate) fn word(self) -> &'static str {
        match self {
            WaitOn::Unknown => "?",
            WaitOn::Chan => "chan",
            WaitOn::Lock => "lock",
            WaitOn::Timer => "timer",
            WaitOn::Socket => "socket",
            WaitOn::Join => "join",
            WaitOn::Sync => "sync",
        }
    }

    fn from_bits(b: u64) -> WaitOn {
        match b & 0xff {
            1 => WaitOn::Chan,
            2 => WaitOn::Lock,
            3 => WaitOn::Timer,
            4 => WaitOn::Socket,
            5 => WaitOn::Join,
            6 => WaitOn::Sync,
            _ => WaitOn::Unknown,
        }
    }
}

/// Pending waits that a thread of weft's own, outside every runtime, completes
/// ([`signal::ctrl_c`](crate::signal::ctrl_c): the signal thread wakes them). While
/// there are any, the deadlock watcher reports nothing: a task parked on one of them
/// is not stuck, whatever the workers do.
static OUTSIDE_WAITS: AtomicUsize = AtomicUsize::new(0);

/// Counts one wait that a thread outside the runtimes completes, while alive (see
/// [`outside_waits`]).
pub(crate) struct OutsideWait(());

impl OutsideWait {
    pub(crate) fn new() -> OutsideWait {
        OUTSIDE_WAITS.fetch_add(1, Relaxed);
        OutsideWait(())
    }
}

impl Drop for OutsideWait {
    fn drop(&mut self) {
        OUTSIDE_WAITS.fetch_sub(1, Relaxed);
    }
}

/// How many [`OutsideWait`]s are alive (a hint for the deadlock watcher: relaxed).
pub(crate) fn outside_waits() -> usize {
    OUTSIDE_WAITS.load(Relaxed)
}

/// `Header::flags`: the task was live when `shutdown_graceful` was called (counted in
/// its report).
pub(crate) const ACTIVE_AT_DRAIN: u8 = 1;
/// `Header::flags`: the task was refused by a shutting-down runtime (its `JoinError`
/// says so).
pub(crate) const REFUSED: u8 = 2;

/// The record of a task that has just been spawned, woken or started.
#[inline]
pub(crate) fn fresh() -> u64 {
    clock::coarse_ms() << 8
}

/// Stamps `h` as scheduled or running from now (see the module doc).
#[inline]
pub(crate) fn stamp(h: &Header) {
    h.diag.store(fresh(), Relaxed);
}

/// A weft wait registered `waker`: if it is a task's waker, record on that task what
/// it waits on. A timer is recorded only over an unknown reason, so a channel receive
/// with a timeout reads `chan`, whichever of the two registered first.
#[inline]
pub(crate) fn note_wait(waker: &Waker, on: WaitOn) {
    let Some(h) = super::waker::header_of(waker) else {
        return;
    };
    if on == WaitOn::Timer && WaitOn::from_bits(h.diag.load(Relaxed)) != WaitOn::Unknown {
        return;
    }
    h.diag.store(clock::coarse_ms() << 8 | on as u64, Relaxed);
}

/// A task's record, decoded: what it waits on and the coarse time (ms) of the event.
pub(crate) fn read(h: &Header) -> (WaitOn, u64) {
    let w = h.diag.load(Relaxed);
    (WaitOn::from_bits(w), w >> 8)
}

/// Names of named fibers by task id, for dumps and stall reports (only named fibers are listed). Filled
/// at a fiber's first poll and emptied when it finishes.
static NAMES: Mutex<Option<HashMap<u64, std::sync::Arc<str>>>> = Mutex::new(None);

pub(crate) fn register_name(id: u64, name: &std::sync::Arc<str>) {
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .get_or_insert_with(HashMap::new)
        .insert(id, name.clone());
}

pub(crate) fn unregister_name(id: u64) {
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.as_mut() {
        n.remove(&id);
    }
}

pub(crate) fn name_of(id: u64) -> Option<std::sync::Arc<str>> {
    let names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names.as_ref().and_then(|n| n.get(&id).cloned())
}
