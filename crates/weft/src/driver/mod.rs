//! The drivers a parking worker runs: the timer wheel and its hand-off (and, next to
//! it, the I/O driver of a later layer, sharing the same park path).

pub(crate) mod io;
#[cfg(all(test, loom))]
mod loom_tests;
pub(crate) mod readiness;
pub(crate) mod timer;
pub(crate) mod wheel;

use std::task::Waker;

/// Wakes a waker the drivers collected (a readiness event, a fired timer, shutdown).
///
/// A waker is user code (safe code makes one with `std::task::Wake`) and may panic.
/// Here the panic has nobody to go to: it would unwind out of a worker's loop (killing
/// the worker, whose runtime's drop then waits for it for ever) or out of the
/// runtime's shutdown, and drop the rest of the batch unwoken (found in review: one
/// such waker left every other waiter of its batch asleep and hung the runtime's drop).
/// So the wake runs under `catch_unwind` (`ignore_panic`, which also survives a payload
/// that panics when dropped); the panic hook has already reported the panic, and the
/// driver goes on with the next waker.
pub(crate) fn wake_guarded(waker: Waker) {
    if crate::task::waker::ignore_panic(move || waker.wake()) {
        report_waker_panic();
    }
}

#[cold]
fn report_waker_panic() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "weft: a waker panicked when the runtime's I/O or timer driver woke it; the \
             panic was caught and the driver went on (reported once)"
        );
    });
}
