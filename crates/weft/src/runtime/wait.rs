//! `wait(future)`: run a future to completion from wherever the caller stands.
//!
//! On a worker thread the worker helps: it runs other tasks (the full search order,
//! including stealing and the parking handshake) until the future's waker fires, then
//! polls the future again. Anywhere else the thread sleeps on a futex until woken.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc as StdArc;
use std::task::{Context, Poll, Wake, Waker};

use crate::scheduler::park::Parker;
use crate::scheduler::worker::{self, Core};
use crate::scheduler::Shared;
use crate::sync::Arc;

/// Wakes a helping worker: marks the wait as woken and unparks that worker.
struct WorkerSignal {
    woken: AtomicBool,
    shared: Arc<Shared>,
    index: usize,
}

impl Wake for WorkerSignal {
    fn wake(self: StdArc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &StdArc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.shared.remotes[self.index].parker.unpark();
    }
}

struct ThreadSignal(Parker);

impl Wake for ThreadSignal {
    fn wake(self: StdArc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &StdArc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion from wherever it is called, and returns its output.
///
/// * On a fiber, the fiber is suspended (not its thread) until the future's waker
///   fires; the worker runs other work meanwhile.
/// * On a worker thread outside a fiber (inside a task's poll, or a fork-join job),
///   the worker helps: it runs other tasks until the future is ready, so a worker never
///   sleeps while work waits.
/// * On any other thread, the thread sleeps until the waker fires.
///
/// Inside an async task, prefer `.await`: `wait` there occupies the worker's stack for
/// as long as it helps.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// // From a plain thread: blocks.
/// assert_eq!(weft::wait(rt.spawn(async { 3 })).unwrap(), 3);
/// // From a fiber: suspends the fiber.
/// let h = weft::fiber::spawn(|| weft::wait(weft::spawn(async { 4 })).unwrap());
/// assert_eq!(h.join().unwrap(), 4);
/// ```
pub fn wait<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    if let Some(fiber) = crate::fiber::suspendable() {
        return crate::fiber::suspend_on(fiber, future);
    }
    let helped = worker::with_current(|core| {
        let core = core?;
        if core.shared().is_shutdown() {
            return None;
        }
        // SAFETY: `core` lives for the whole worker thread, which is this thread, and
        // outlives this call; the reference does not escape it.
        let core: &'static Core = unsafe { &*(core as *const Core) };
        Some(core)
    });
    if let Some(core) = helped {
        let signal = StdArc::new(WorkerSignal {
            woken: AtomicBool::new(false),
            shared: core.shared().clone(),
            index: core.index(),
        });
        let waker = Waker::from(signal.clone());
        let mut cx = Context::from_waker(&waker);
        loop {
            signal.woken.store(false, Ordering::Relaxed);
            if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                return v;
            }
            core.run_until(&|| signal.woken.load(Ordering::Acquire));
            if core.shared().is_shutdown() && !signal.woken.load(Ordering::Acquire) {
                // The worker stops running tasks; wait for the future like a thread.
                break;
            }
        }
    }
    block_thread(future)
}

fn block_thread<F: Future>(mut future: std::pin::Pin<&mut F>) -> F::Output {
    thread_local! {
        static SIGNAL: StdArc<ThreadSignal> = StdArc::new(ThreadSignal(Parker::new()));
    }
    let signal = SIGNAL.with(|s| s.clone());
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        signal.0.park();
    }
}
