//! Which workers are parked and how many are searching (spec 001 and spec 004).
//!
//! # The handshake
//!
//! Invariant: *whenever a run queue holds a task, some worker that will look at that
//! queue is not committed to sleep.* Two orders keep it:
//!
//! * **Sleep:** a worker publishes itself in the parked bitmap, issues a SeqCst fence,
//!   re-checks every queue it could be handed work through (the injection queue, its
//!   fiber inbox, its peers' local queues and deques, and fork-join jobs injected from
//!   outside), and only then sleeps.
//! * **Insert:** a producer pushes the task, issues a SeqCst fence, then reads the
//!   searching count and the bitmap; unless a worker is searching it claims one parked
//!   worker (counting it as a searcher first, then clearing its bit) and unparks it.
//!
//! This is the store-buffering pattern: with both fences, at least one side sees the
//! other's write. Either the producer sees the parked bit (and wakes that worker), or
//! the worker's re-check sees the task. A searching worker is awake by definition; when
//! the last searcher stops searching it decrements the count, fences, and looks at the
//! queues again, waking one more worker if work is left (the "last searcher must
//! notify" rule), so a producer that skipped its wake because a searcher existed is
//! covered by that searcher.
//!
//! Each insert claims at most one bit, so a burst of N inserts wakes at most N workers,
//! and a woken worker wakes another only through the last-searcher rule, when the work
//! it still sees is worth a wake (see `Core::worth_a_wake`). A worker that sleeps
//! holding the timer driver is claimed last.
//!
//! Pools: each pool has its own `Idle`, queues and bitmap, and an insert only ever
//! looks at the target pool's, so a wake is pool-local and a busy pool cannot hide a
//! sleeping one.
//!
//! `models/handshake.pml` checks this protocol with SPIN (the sound version passes,
//! the counter shortcut below is reported as a lost wakeup); the loom models in
//! `loom_tests.rs` run the real code through the same races.
//!
//! # Slots that come and go (temporary workers)
//!
//! A pool has `base + K` slots; the base workers always run, the others are started by
//! sysmon and retire after a keep-alive of idleness (see `Core::try_retire`). An
//! inactive slot's bit is clear, so producers never claim it, and its queues are empty.
//! The danger is a worker that leaves the parked set *for good*: a producer that sees
//! its bit claims it and counts on it to run the task. The retiring worker therefore
//! leaves exactly as a waking worker does, by taking its bit back with
//! [`Idle::unpublish_parked`] (an RMW on the same word the producer's claim CASes):
//!
//! * the RMW finds the bit already cleared: a producer claimed this worker and counted
//!   it as a searcher. It does not retire; it runs as a woken worker (searching).
//! * the RMW clears the bit: no claim can pick it any more. The worker then issues a
//!   SeqCst fence and re-checks every queue it re-checks before sleeping; only if all
//!   are empty does it retire. A producer that pushed meanwhile either sees the bit
//!   (and its claim fails the race above, so it did not count on this worker) or finds
//!   it cleared, in which case (store buffering, both sides fenced) the re-check sees
//!   its task and the worker stays. A producer that finds no bit to claim relies on
//!   the running workers, exactly as when every worker is busy, which the protocol
//!   already covers.
//!
//! So a retiring worker is, for the handshake, a worker that woke up and then found
//! nothing to do, except that it never sleeps again. Fibers tied to the slot and its
//! inbox: see `Shared::push_inbox`.
//!
//! # The unsound shortcut
//!
//! Deciding "nobody sleeps, skip the wake" from a running-worker *counter* that the
//! sleeper updates after its re-check (spec 004) loses wakes: between publishing and the
//! counter update the worker counts as running although it has already read its queues
//! as empty. Every decision here reads the per-worker bit, which is set *before* the
//! re-check, and bits are per pool, so a busy pool can never hide a sleeping one.

use std::sync::atomic::Ordering::{AcqRel, SeqCst};

use crate::base::{AtomicU64, AtomicUsize};

pub(crate) struct Idle {
    num_searching: AtomicUsize,
    /// The worker of this pool that sleeps holding the timer driver (`usize::MAX`:
    /// none). Producers wake it last, so timers keep their sleeper.
    driver_holder: AtomicUsize,
    /// One bit per worker: set while the worker is parked (or about to park).
    parked: Box<[AtomicU64]>,
    /// The base worker count: at most about half of it searches at once.
    num_workers: usize,
}

impl Idle {
    /// Bits for `slots` workers (base and temporary); the searcher cap follows the
    /// `num_workers` base workers.
    pub(crate) fn new(slots: usize, num_workers: usize) -> Self {
        Idle {
            num_searching: AtomicUsize::new(0),
            driver_holder: AtomicUsize::new(usize::MAX),
            parked: (0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            num_workers,
        }
    }

    pub(crate) fn num_searching(&self) -> usize {
        self.num_searching.load(SeqCst)
    }

    /// A worker out of local work asks to search (steal). At most about half of the
    /// workers search at once, so new work after an idle spell does not stampede.
    pub(crate) fn try_become_searcher(&self) -> bool {
        let n = self.num_searching.load(SeqCst);
        if 2 * n >= self.num_workers {
            return false;
        }
        self.num_searching.fetch_add(1, SeqCst);
        true
    }

    /// A searcher found work or gave up. Returns true if it was the last searcher; the
    /// caller must then fence and look for leftover work to hand on.
    pub(crate) fn stop_searching(&self) -> bool {
        self.num_searching.fetch_sub(1, SeqCst) == 1
    }

    /// Producer side, after the push and the SeqCst fence: picks a parked worker to
    /// wake, unless a searcher will find the work.
    ///
    /// The worker to be woken is counted as a searcher *before* its bit is claimed, so
    /// it cannot stop searching before it was counted (the count would wrap below zero;
    /// found by the SPIN model in `models/`), and inserts right behind this one see a
    /// searcher and do not wake a second worker for work the first will find. If no
    /// bit can be claimed, the producer was a searcher for a moment and stops like one:
    /// the last searcher looks again, and retries if a worker published its bit
    /// meanwhile (an insert that skipped its wake because of this producer's count may
    /// be invisible to that worker's re-check).
    ///
    /// With no parked bit set there is nobody to claim, and it returns at once without
    /// counting itself (store-buffering again: a worker that publishes its bit after
    /// this load fences and re-checks the queues, where it finds this insert; checked
    /// by the SPIN model). Counting and uncounting a searcher for nobody cost an insert
    /// into a pool whose workers are all busy two writes to a line every worker reads.
    pub(crate) fn claim_parked(&self) -> Option<usize> {
        loop {
            if self.num_searching.load(SeqCst) != 0 || !self.any_parked() {
                return None;
            }
            self.num_searching.fetch_add(1, SeqCst);
            if let Some(i) = self.claim_bit() {
                return Some(i);
            }
            if !self.stop_searching() || !self.any_parked() {
                return None;
            }
        }
    }

    fn claim_bit(&self) -> Option<usize> {
        let holder = self.driver_holder.load(SeqCst);
        for (w, word) in self.parked.iter().enumerate() {
            let mut bits = word.load(SeqCst);
            while bits != 0 {
                let mut pick = bits;
                if holder / 64 == w && bits != 1 << (holder % 64) {
                    pick &= !(1 << (holder % 64));
                }
                let bit = pick.trailing_zeros();
                match word.compare_exchange(bits, bits & !(1 << bit), AcqRel, SeqCst) {
                    Ok(_) => return Some(w * 64 + bit as usize),
                    Err(actual) => bits = actual,
                }
            }
        }
        None
    }

    fn any_parked(&self) -> bool {
        self.parked.iter().any(|w| w.load(SeqCst) != 0)
    }

    /// Sleep side, step 1: publish "parked". The caller then fences and re-checks.
    pub(crate) fn publish_parked(&self, index: usize) {
        self.parked[index / 64].fetch_or(1 << (index % 64), SeqCst);
    }

    /// Takes back the parked bit. Returns false if a producer claimed this worker
    /// first: an unpark is on its way, and the worker already counts as a searcher.
    pub(crate) fn unpublish_parked(&self, index: usize) -> bool {
        let bit = 1 << (index % 64);
        self.parked[index / 64].fetch_and(!bit, SeqCst) & bit != 0
    }

    pub(crate) fn set_driver_holder(&self, index: Option<usize>) {
        self.driver_holder
            .store(index.unwrap_or(usize::MAX), SeqCst);
    }

    /// Some parked worker other than `me`, without claiming it: the lowest-numbered,
    /// so a base worker if any is parked (temporary slots come after the base ones).
    pub(crate) fn any_parked_except(&self, me: usize) -> Option<usize> {
        self.parked.iter().enumerate().find_map(|(w, word)| {
            let mut bits = word.load(SeqCst);
            if me / 64 == w {
                bits &= !(1 << (me % 64));
            }
            (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
        })
    }

    pub(crate) fn is_parked(&self, index: usize) -> bool {
        self.parked[index / 64].load(SeqCst) & (1 << (index % 64)) != 0
    }
}

/// How workers wake the runtime's monitor thread (sysmon) when it sleeps without a
/// timeout because every worker was parked.
///
/// The monitor sets `asleep`, then (SeqCst) looks at every parked bit again and sleeps
/// only if all are still set. A worker leaving the parked set (its own unpublish RMW,
/// or a producer's claim that the worker observed through its SeqCst `is_parked` load)
/// then loads `asleep` (SeqCst). All four operations are SeqCst, so in their total order
/// either the monitor's bit load comes after the clear (it sees a running worker and
/// does not sleep) or the worker's load comes after `asleep` was set (it rings). The
/// worker's cost is that one load of a line that is written only when the monitor goes
/// to sleep or wakes; nothing on the producer (spawn, wake) side changes.
///
/// The first ring starts the monitor (`start`, set by the runtime), so a runtime whose
/// workers never run needs no monitor thread.
pub(crate) struct Doorbell {
    asleep: std::sync::atomic::AtomicBool,
    started: std::sync::atomic::AtomicBool,
    parker: crate::base::park::Parker,
    start: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Doorbell {
    /// A doorbell nobody listens to: `ring` is one load of `false`.
    pub(crate) fn disabled() -> Self {
        Doorbell {
            asleep: std::sync::atomic::AtomicBool::new(false),
            started: std::sync::atomic::AtomicBool::new(true),
            parker: crate::base::park::Parker::new(),
            start: std::sync::OnceLock::new(),
        }
    }

    /// A doorbell whose first ring calls `start` (the monitor is not running yet, so it
    /// counts as asleep).
    pub(crate) fn lazy() -> Self {
        Doorbell {
            asleep: std::sync::atomic::AtomicBool::new(true),
            started: std::sync::atomic::AtomicBool::new(false),
            parker: crate::base::park::Parker::new(),
            start: std::sync::OnceLock::new(),
        }
    }

    /// Installs what the first ring runs (once).
    pub(crate) fn set_start(&self, start: Box<dyn Fn() + Send + Sync>) {
        let _ = self.start.set(start);
    }

    /// Worker side: called after leaving the parked set (and when a worker starts).
    #[inline]
    pub(crate) fn ring(&self) {
        if self.asleep.load(std::sync::atomic::Ordering::SeqCst) {
            self.ring_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn ring_slow(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if !self.asleep.swap(false, SeqCst) {
            return;
        }
        if !self.started.swap(true, SeqCst) {
            if let Some(start) = self.start.get() {
                start();
            }
        } else {
            self.parker.unpark();
        }
    }

    /// Monitor side: announce the sleep; the caller then re-checks the bits.
    pub(crate) fn prepare_sleep(&self) {
        self.asleep.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Monitor side: sleep until a ring or [`wake`](Self::wake), or `timeout`.
    pub(crate) fn sleep(&self, timeout: Option<std::time::Duration>) {
        self.parker.park_timeout(timeout);
        self.asleep
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Wakes the monitor whatever its state (to stop it).
    pub(crate) fn wake(&self) {
        self.parker.unpark();
    }
}
