//! The packed 64-bit task state word (spec 000) and every transition on it.
//!
//! ```text
//!  63          40 39      32 31     24 23      16 15        0
//! +--------------+----------+---------+----------+-----------+
//! | refs (24)    | shield(8)| flags(8)| lifecycle| reserved  |
//! +--------------+----------+---------+----------+-----------+
//! ```
//!
//! Reference ownership: one reference for the owned-task list (released on completion),
//! one for the `JoinHandle`, one for each `Waker` clone and `AbortHandle`, and one for the
//! task's presence in a run queue or on a worker (the "notified" reference, created by
//! the IDLE -> SCHEDULED transition in the same CAS, handed from queue to worker, and
//! dropped by RUNNING -> IDLE in the same CAS). Because queue entries own a reference, a
//! queued pointer is always valid, even after the task completed by another path.

use std::fmt;

use crate::base::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

const LIFECYCLE_SHIFT: u32 = 16;
const LIFECYCLE_MASK: u64 = 0xff << LIFECYCLE_SHIFT;
const IDLE: u64 = 0;
const SCHEDULED: u64 = 1 << LIFECYCLE_SHIFT;
const RUNNING: u64 = 2 << LIFECYCLE_SHIFT;
const COMPLETE: u64 = 3 << LIFECYCLE_SHIFT;

/// A waker fired while the task was SCHEDULED or RUNNING.
const NOTIFIED: u64 = 1 << 24;
/// Cancellation was requested.
const CANCELLED: u64 = 1 << 25;
/// A `JoinHandle` still exists and will read the output (cleared when it is dropped:
/// the task is then detached).
const JOIN_INTEREST: u64 = 1 << 26;
/// The join waker slot holds a waker that the task owns (weft's use of a reserved flag
/// bit: it hands the slot between the handle and the task without a lock).
const JOIN_WAKER: u64 = 1 << 28;

const SHIELD_SHIFT: u32 = 32;
const SHIELD_ONE: u64 = 1 << SHIELD_SHIFT;
const SHIELD_MASK: u64 = 0xff << SHIELD_SHIFT;
pub(crate) const MAX_SHIELD_DEPTH: u64 = 255;

const REF_SHIFT: u32 = 40;
const REF_ONE: u64 = 1 << REF_SHIFT;
const MAX_REFS: u64 = (1 << 24) - 1;

/// A copy of the state word, with accessors.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot(u64);

impl Snapshot {
    pub(crate) fn is_idle(self) -> bool {
        self.0 & LIFECYCLE_MASK == IDLE
    }
    pub(crate) fn is_scheduled(self) -> bool {
        self.0 & LIFECYCLE_MASK == SCHEDULED
    }
    pub(crate) fn is_running(self) -> bool {
        self.0 & LIFECYCLE_MASK == RUNNING
    }
    pub(crate) fn is_complete(self) -> bool {
        self.0 & LIFECYCLE_MASK == COMPLETE
    }
    pub(crate) fn is_notified(self) -> bool {
        self.0 & NOTIFIED != 0
    }
    pub(crate) fn is_cancelled(self) -> bool {
        self.0 & CANCELLED != 0
    }
    pub(crate) fn is_join_interested(self) -> bool {
        self.0 & JOIN_INTEREST != 0
    }
    pub(crate) fn has_join_waker(self) -> bool {
        self.0 & JOIN_WAKER != 0
    }
    pub(crate) fn shield_depth(self) -> u64 {
        (self.0 & SHIELD_MASK) >> SHIELD_SHIFT
    }
    pub(crate) fn ref_count(self) -> u64 {
        self.0 >> REF_SHIFT
    }
    /// Cancellation was requested and no shield defers it.
    pub(crate) fn is_cancellation_effective(self) -> bool {
        self.is_cancelled() && self.shield_depth() == 0
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lifecycle = match self.0 & LIFECYCLE_MASK {
            IDLE => "IDLE",
            SCHEDULED => "SCHEDULED",
            RUNNING => "RUNNING",
            _ => "COMPLETE",
        };
        f.debug_struct("State")
            .field("lifecycle", &lifecycle)
            .field("notified", &self.is_notified())
            .field("cancelled", &self.is_cancelled())
            .field("join_interest", &self.is_join_interested())
            .field("detached", &!self.is_join_interested())
            .field("join_waker", &self.has_join_waker())
            .field("shield_depth", &self.shield_depth())
            .field("refs", &self.ref_count())
            .finish()
    }
}

/// What the worker must do after `transition_to_running`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Run {
    /// Poll the future.
    Poll,
    /// Cancellation is effective: drop the future and complete as cancelled.
    Cancel,
    /// The task is not SCHEDULED (shutdown completed it while it sat in a queue): drop
    /// the queue's reference and do nothing else.
    Skip,
}

/// What the worker must do after a poll returned `Pending`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Idle {
    /// The task is IDLE; the notified reference was released.
    Idle,
    /// A wake arrived during the poll: the task is SCHEDULED again and the caller must
    /// enqueue it (the notified reference moves to the new queue entry).
    Reschedule,
}

/// What `abort` must do after setting the cancelled flag.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Abort {
    /// Nothing: the task is done, already cancelled, or will see the flag at its next
    /// transition.
    Nothing,
    /// The task was IDLE and is now SCHEDULED with a new notified reference: enqueue it.
    Schedule,
}

/// The atomic state word.
pub(crate) struct State(AtomicU64);

impl State {
    /// A freshly spawned task: SCHEDULED, with references for the owned list, the
    /// `JoinHandle` and the queue entry it is about to get.
    pub(crate) fn new() -> State {
        State(AtomicU64::new(SCHEDULED | JOIN_INTEREST | (3 * REF_ONE)))
    }

    #[inline]
    pub(crate) fn load(&self) -> Snapshot {
        Snapshot(self.0.load(Acquire))
    }

    /// Runs `f` in a CAS loop until it returns `None` (no change) or the CAS succeeds.
    /// Returns the previous snapshot and `f`'s verdict.
    #[inline]
    fn fetch_update<R>(&self, mut f: impl FnMut(Snapshot) -> (Option<u64>, R)) -> (Snapshot, R) {
        let mut cur = self.0.load(Acquire);
        loop {
            let (next, r) = f(Snapshot(cur));
            let Some(next) = next else {
                return (Snapshot(cur), r);
            };
            match self.0.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => return (Snapshot(cur), r),
                Err(actual) => cur = actual,
            }
        }
    }

    /// A waker fired. Returns true when the task went IDLE -> SCHEDULED and the caller
    /// must enqueue it (the new queue reference was taken in the same CAS).
    #[inline]
    pub(crate) fn transition_to_scheduled(&self) -> bool {
        self.fetch_update(|s| match s.0 & LIFECYCLE_MASK {
            IDLE => {
                check_ref_inc(s);
                (
                    Some(((s.0 & !LIFECYCLE_MASK & !NOTIFIED) | SCHEDULED) + REF_ONE),
                    true,
                )
            }
            SCHEDULED | RUNNING if !s.is_notified() => (Some(s.0 | NOTIFIED), false),
            _ => (None, false),
        })
        .1
    }

    /// A worker took the task from a queue.
    #[inline]
    pub(crate) fn transition_to_running(&self) -> Run {
        self.fetch_update(|s| {
            if !s.is_scheduled() {
                return (None, Run::Skip);
            }
            // The poll about to happen observes whatever caused a wake while queued.
            let next = (s.0 & !LIFECYCLE_MASK & !NOTIFIED) | RUNNING;
            let verdict = if s.is_cancellation_effective() {
                Run::Cancel
            } else {
                Run::Poll
            };
            (Some(next), verdict)
        })
        .1
    }

    /// The poll returned `Pending`. Clears the notified bit and looks at it in one CAS,
    /// so a wake between the end of the poll and this call is never lost.
    #[inline]
    pub(crate) fn transition_to_idle(&self) -> Idle {
        self.fetch_update(|s| {
            debug_assert!(s.is_running(), "{s:?}");
            if s.is_notified() {
                let next = (s.0 & !LIFECYCLE_MASK & !NOTIFIED) | SCHEDULED;
                (Some(next), Idle::Reschedule)
            } else {
                debug_assert!(s.ref_count() >= 2, "{s:?}");
                let next = ((s.0 & !LIFECYCLE_MASK) | IDLE) - REF_ONE;
                (Some(next), Idle::Idle)
            }
        })
        .1
    }

    /// The future finished (or was dropped by cancellation). Returns the state before.
    pub(crate) fn transition_to_complete(&self) -> Snapshot {
        self.fetch_update(|s| {
            debug_assert!(s.is_running(), "{s:?}");
            (Some((s.0 & !LIFECYCLE_MASK & !NOTIFIED) | COMPLETE), ())
        })
        .0
    }

    /// Shutdown claims a task that no worker runs: IDLE or SCHEDULED become RUNNING
    /// with cancellation set and an extra reference for the claimant. Returns false if
    /// the task is RUNNING elsewhere or COMPLETE (only the cancelled flag is set then).
    pub(crate) fn transition_to_shutdown(&self) -> bool {
        self.fetch_update(|s| {
            if s.is_complete() {
                return (None, false);
            }
            if s.is_running() {
                return (Some(s.0 | CANCELLED | NOTIFIED), false);
            }
            check_ref_inc(s);
            let next = ((s.0 & !LIFECYCLE_MASK) | RUNNING | CANCELLED) + REF_ONE;
            (Some(next), true)
        })
        .1
    }

    /// Hands a claim of [`transition_to_shutdown`](Self::transition_to_shutdown) back:
    /// the task is SCHEDULED again (still CANCELLED), and the claim's fresh reference
    /// is now a queue reference, for another thread to claim it with (shutdown on a
    /// thread that may not cancel it: `Schedule::hand_home`).
    pub(crate) fn transition_claim_to_scheduled(&self) {
        self.fetch_update(|s| {
            debug_assert!(s.is_running() && s.is_cancelled(), "{s:?}");
            (Some((s.0 & !LIFECYCLE_MASK & !NOTIFIED) | SCHEDULED), ())
        });
    }

    /// `abort()`: sets the cancelled flag and makes sure the task will be polled so the
    /// cancellation takes effect.
    pub(crate) fn transition_to_cancelled(&self) -> Abort {
        self.fetch_update(|s| {
            if s.is_complete() || s.is_cancelled() {
                return (None, Abort::Nothing);
            }
            if s.is_idle() {
                check_ref_inc(s);
                let next = ((s.0 & !LIFECYCLE_MASK) | SCHEDULED | CANCELLED) + REF_ONE;
                (Some(next), Abort::Schedule)
            } else {
                (Some(s.0 | CANCELLED | NOTIFIED), Abort::Nothing)
            }
        })
        .1
    }

    /// Enters a shield. Returns false (and changes nothing) at the maximum depth, where
    /// the outer shields already defer cancellation.
    pub(crate) fn add_shield(&self) -> bool {
        self.fetch_update(|s| {
            if s.shield_depth() >= MAX_SHIELD_DEPTH {
                (None, false)
            } else {
                (Some(s.0 + SHIELD_ONE), true)
            }
        })
        .1
    }

    /// Enters a shield for a partner that commits to an operation of this task (a
    /// receiver taking a waiting rendezvous send's value), unless the task's
    /// cancellation is already effective: then `None`, and the partner must not
    /// commit. `Some(false)` when nothing needs raising: at the maximum depth (the
    /// outer shields already defer cancellation), or for a complete task (a waiting
    /// operation that outlived the task it was registered from, moved elsewhere: no
    /// cancellation can reach it through this task any more). One CAS: a harness that
    /// decides to cancel (`transition_to_running`) reads the same word, so either it
    /// sees the shield, or this sees its cancellation.
    pub(crate) fn add_shield_unless_cancelled(&self) -> Option<bool> {
        self.fetch_update(|s| {
            if s.is_complete() {
                (None, Some(false))
            } else if s.is_cancellation_effective() {
                (None, None)
            } else if s.shield_depth() >= MAX_SHIELD_DEPTH {
                (None, Some(false))
            } else {
                (Some(s.0 + SHIELD_ONE), Some(true))
            }
        })
        .1
    }

    /// Leaves a shield. When the last shield ends on a cancelled task, the task is made
    /// to be polled again so the cancellation takes effect then: marked notified while
    /// it is queued or running, or (a shield that outlived the task's poll, dropped
    /// elsewhere) made SCHEDULED from IDLE with a new queue reference, in which case
    /// this returns true and the caller must enqueue it.
    pub(crate) fn remove_shield(&self) -> bool {
        self.fetch_update(|s| {
            debug_assert!(s.shield_depth() > 0, "{s:?}");
            let next = s.0 - SHIELD_ONE;
            if s.shield_depth() != 1 || !s.is_cancelled() || s.is_complete() {
                return (Some(next), false);
            }
            if s.is_idle() {
                check_ref_inc(s);
                let scheduled = ((next & !LIFECYCLE_MASK & !NOTIFIED) | SCHEDULED) + REF_ONE;
                (Some(scheduled), true)
            } else {
                (Some(next | NOTIFIED), false)
            }
        })
        .1
    }

    /// The `JoinHandle` is dropped. Returns `Err(())` if the task is already complete,
    /// in which case the caller owns the output and must drop it.
    pub(crate) fn unset_join_interest(&self) -> Result<(), ()> {
        let (prev, _) = self.fetch_update(|s| {
            if s.is_complete() {
                (None, ())
            } else {
                (Some(s.0 & !JOIN_INTEREST & !JOIN_WAKER), ())
            }
        });
        if prev.is_complete() {
            Err(())
        } else {
            Ok(())
        }
    }

    /// Hands the join waker slot to the task. Fails if the task completed meanwhile.
    pub(crate) fn set_join_waker(&self) -> Result<(), Snapshot> {
        let (prev, ok) = self.fetch_update(|s| {
            debug_assert!(!s.has_join_waker());
            if s.is_complete() {
                (None, false)
            } else {
                (Some(s.0 | JOIN_WAKER), true)
            }
        });
        if ok {
            Ok(())
        } else {
            Err(prev)
        }
    }

    /// Takes the join waker slot back from the task. Fails if the task completed.
    pub(crate) fn unset_join_waker(&self) -> Result<(), Snapshot> {
        let (prev, ok) = self.fetch_update(|s| {
            if s.is_complete() {
                (None, false)
            } else {
                (Some(s.0 & !JOIN_WAKER), true)
            }
        });
        if ok {
            Ok(())
        } else {
            Err(prev)
        }
    }

    pub(crate) fn ref_inc(&self) {
        let prev = Snapshot(self.0.fetch_add(REF_ONE, Relaxed));
        check_ref_inc(prev);
    }

    /// Releases one reference. Returns true if it was the last one.
    pub(crate) fn ref_dec(&self) -> bool {
        self.ref_dec_n(1)
    }

    /// Releases `n` references. Returns true if they were the last ones.
    pub(crate) fn ref_dec_n(&self, n: u64) -> bool {
        let prev = Snapshot(self.0.fetch_sub(n * REF_ONE, AcqRel));
        debug_assert!(prev.ref_count() >= n, "{prev:?}");
        prev.ref_count() == n
    }
}

/// The 24-bit count cannot grow past its field; overflowing it would corrupt the word,
/// so a program that leaks 16 million wakers of one task is stopped.
#[inline]
fn check_ref_inc(s: Snapshot) {
    if s.ref_count() >= MAX_REFS {
        eprintln!("weft: task reference count overflow (over 16 million wakers or handles)");
        std::process::abort();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn spawn_poll_idle_wake_complete() {
        let s = State::new();
        assert!(s.load().is_scheduled());
        assert_eq!(s.load().ref_count(), 3);
        assert_eq!(s.transition_to_running(), Run::Poll);
        assert_eq!(s.transition_to_idle(), Idle::Idle);
        assert_eq!(s.load().ref_count(), 2);
        assert!(s.transition_to_scheduled());
        assert!(
            !s.transition_to_scheduled(),
            "second wake only sets notified"
        );
        assert_eq!(s.load().ref_count(), 3);
        assert_eq!(s.transition_to_running(), Run::Poll);
        assert!(!s.load().is_notified(), "running clears notified");
        let prev = s.transition_to_complete();
        assert!(prev.is_join_interested());
        assert!(s.load().is_complete());
        assert!(!s.transition_to_scheduled());
    }

    #[test]
    fn wake_while_running_reschedules() {
        let s = State::new();
        s.transition_to_running();
        assert!(!s.transition_to_scheduled());
        assert!(s.load().is_notified());
        assert_eq!(s.transition_to_idle(), Idle::Reschedule);
        assert!(s.load().is_scheduled());
        assert_eq!(s.load().ref_count(), 3);
    }

    #[test]
    fn abort_idle_schedules_and_cancels() {
        let s = State::new();
        s.transition_to_running();
        s.transition_to_idle();
        assert_eq!(s.transition_to_cancelled(), Abort::Schedule);
        assert_eq!(s.transition_to_cancelled(), Abort::Nothing);
        assert_eq!(s.transition_to_running(), Run::Cancel);
    }

    #[test]
    fn shield_defers_cancellation() {
        let s = State::new();
        assert!(s.add_shield());
        assert_eq!(s.transition_to_cancelled(), Abort::Nothing);
        assert_eq!(s.transition_to_running(), Run::Poll);
        assert!(!s.remove_shield(), "a running task is not scheduled again");
        assert!(
            s.load().is_notified(),
            "last shield re-polls a cancelled task"
        );
        assert_eq!(s.transition_to_idle(), Idle::Reschedule);
        assert_eq!(s.transition_to_running(), Run::Cancel);
    }

    /// A shield that outlived the task's poll ends while the task is IDLE: the task is
    /// scheduled (with a queue reference), or its cancellation would never take effect.
    #[test]
    fn the_last_shield_ending_on_an_idle_cancelled_task_schedules_it() {
        let s = State::new();
        s.transition_to_running();
        assert!(s.add_shield());
        s.transition_to_idle();
        // The abort polls the task, where the shield defers it; the task waits again.
        assert_eq!(s.transition_to_cancelled(), Abort::Schedule);
        assert_eq!(s.transition_to_running(), Run::Poll);
        assert_eq!(s.transition_to_idle(), Idle::Idle);
        let refs = s.load().ref_count();
        assert!(s.remove_shield());
        assert!(s.load().is_scheduled());
        assert_eq!(s.load().ref_count(), refs + 1);
        assert_eq!(s.transition_to_running(), Run::Cancel);
    }

    #[test]
    fn a_partner_shield_is_refused_once_cancellation_is_effective() {
        let s = State::new();
        assert_eq!(s.add_shield_unless_cancelled(), Some(true));
        assert!(!s.remove_shield());
        // A shielded task may still be committed for: its cancellation is deferred.
        assert!(s.add_shield());
        assert_eq!(s.transition_to_cancelled(), Abort::Nothing);
        assert_eq!(s.add_shield_unless_cancelled(), Some(true));
        assert!(!s.remove_shield());
        assert!(!s.remove_shield());
        assert_eq!(s.add_shield_unless_cancelled(), None);
    }

    #[test]
    fn shield_depth_saturates_at_255() {
        let s = State::new();
        for _ in 0..MAX_SHIELD_DEPTH {
            assert!(s.add_shield());
        }
        assert!(!s.add_shield());
        assert_eq!(s.load().shield_depth(), 255);
    }

    #[test]
    fn join_interest_and_waker() {
        let s = State::new();
        assert!(s.set_join_waker().is_ok());
        assert!(s.unset_join_waker().is_ok());
        s.transition_to_running();
        s.transition_to_complete();
        assert!(s.set_join_waker().is_err());
        assert!(s.unset_join_interest().is_err());
    }

    #[test]
    fn shutdown_claims_idle_and_scheduled() {
        let s = State::new();
        assert!(s.transition_to_shutdown());
        assert!(s.load().is_running() && s.load().is_cancelled());
        assert_eq!(s.load().ref_count(), 4);
        let r = State::new();
        r.transition_to_running();
        assert!(!r.transition_to_shutdown());
        assert!(r.load().is_cancelled());
    }

    #[test]
    fn a_shutdown_claim_handed_back_is_scheduled_and_cancelled_with_its_reference() {
        let s = State::new();
        assert!(s.transition_to_shutdown());
        s.transition_claim_to_scheduled();
        let snap = s.load();
        assert!(snap.is_scheduled() && snap.is_cancelled() && !snap.is_notified());
        assert_eq!(snap.ref_count(), 4);
        // Claimed again by the thread it was handed to.
        assert!(s.transition_to_shutdown());
        assert!(s.load().is_running());
    }
}
