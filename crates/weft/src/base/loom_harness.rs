//! The harness of the loom models that poll futures by hand (`chan`, `sync`,
//! `driver`): a [`Task`] whose waker counts its wakes and signals a loom `Notify` the
//! model thread parks on between polls, so a wake that never comes leaves the thread
//! parked for ever and loom reports the execution as a deadlock: every lost wakeup
//! fails the model. Test code only; it sits in `base` so every layer may use it.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering::SeqCst;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::atomic::AtomicUsize;
use loom::sync::Notify;

use super::Arc;

/// `loom::model` with at most two preemptions (a lower `LOOM_MAX_PREEMPTIONS` still
/// applies), for models whose state space at CI's bound of 3 takes a minute or more on
/// CI's two cores: three or four parties racing over a channel's buffer and wait lists,
/// or two workers and a producer through the whole sleep transition. The scheduler's
/// two such models still deadlock at bound 2 with the park's re-check taken out, and
/// the SPIN model (`models/`) covers the sleep handshake without a bound.
pub(crate) fn model_bound2(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(2, |n| n.min(2)));
    b.check(f);
}

/// A waker for a model thread: counts wakes and unparks the thread.
struct Signal {
    wakes: AtomicUsize,
    notify: Notify,
}

impl Wake for Signal {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        self.notify.notify();
    }
}

/// One hand-polled task on a model thread.
pub(crate) struct Task {
    signal: Arc<Signal>,
    waker: Waker,
}

impl Task {
    pub(crate) fn new() -> Task {
        let signal = Arc::new(Signal {
            wakes: AtomicUsize::new(0),
            notify: Notify::new(),
        });
        let waker = Waker::from(signal.clone());
        Task { signal, waker }
    }

    pub(crate) fn poll<F: Future>(&self, f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(&self.waker))
    }

    /// Polls `f` until it is ready, parking between polls until the waker fires. A
    /// wake that never comes parks the thread for ever: loom reports a deadlock.
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        let mut f = pin!(f);
        loop {
            if let Poll::Ready(v) = self.poll(f.as_mut()) {
                return v;
            }
            self.signal.notify.wait();
        }
    }
}

pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    Task::new().block_on(f)
}
