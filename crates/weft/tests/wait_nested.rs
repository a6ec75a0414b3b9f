//! A `wait` nested inside the poll of a future that another `wait` is running.
//!
//! The outer future registers its waker and then, still inside its poll, waits on an
//! inner future; the outer future's own wake-up arrives while that inner wait runs.
//! After the inner wait returns the outer poll returns `Pending` (its waker was
//! registered, so the wake-up is owed to it), and the outer wait must still poll it
//! again: the wake must not have been consumed by the inner wait. Each case runs on a
//! plain thread, on a fiber and in a worker's task, with two kinds of inner future: one
//! that wakes the outer future from inside its own poll (deterministic), and a task
//! that does it from a worker while the inner wait joins it.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{with_timeout, workers};

/// A oneshot-like gate: `open` sets the flag, then wakes the registered waker.
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, Option<Waker>)>,
}

impl Gate {
    fn open(&self) {
        let waker = {
            let mut s = self.state.lock().unwrap();
            s.0 = true;
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Ready once its gate is open. Its first poll registers the waker, then runs `nested`
/// (which calls `weft::wait`, during which the gate opens), and returns `Pending`
/// without looking at the gate again.
struct Outer<N> {
    gate: Arc<Gate>,
    nested: Option<N>,
    polls: u32,
}

impl<N: FnOnce() + Unpin> Future for Outer<N> {
    type Output = u32;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        let this = self.get_mut();
        this.polls += 1;
        {
            let mut s = this.gate.state.lock().unwrap();
            if s.0 {
                return Poll::Ready(this.polls);
            }
            s.1 = Some(cx.waker().clone());
        }
        if let Some(nested) = this.nested.take() {
            nested();
        }
        Poll::Pending
    }
}

fn outer<N: FnOnce() + Unpin>(gate: Arc<Gate>, nested: N) -> Outer<N> {
    Outer {
        gate,
        nested: Some(nested),
        polls: 0,
    }
}

/// An inner future whose first poll opens the outer gate (waking the outer future) and
/// wakes itself; it is ready at its second poll.
struct OpenThenReady {
    gate: Arc<Gate>,
    opened: bool,
}

impl Future for OpenThenReady {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.opened {
            return Poll::Ready(());
        }
        self.opened = true;
        self.gate.open();
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The outer future whose nested wait is on an [`OpenThenReady`].
fn outer_inline() -> Outer<impl FnOnce() + Unpin> {
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    outer(gate, move || {
        weft::wait(OpenThenReady {
            gate: g,
            opened: false,
        })
    })
}

/// The outer future whose nested wait joins a task (on `handle`'s runtime) that opens
/// the gate and then sleeps a little before it finishes.
fn outer_joining_task(handle: weft::Handle) -> Outer<impl FnOnce() + Unpin> {
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    outer(gate, move || {
        let task = handle.spawn(async move {
            g.open();
            weft::time::sleep(Duration::from_millis(20)).await;
        });
        weft::wait(task).unwrap();
    })
}

/// Runs `f` on a fiber of `rt` (spawned from inside `rt`, so on its workers).
fn on_fiber<T: Send + 'static>(rt: &weft::Runtime, f: impl FnOnce() -> T + Send + 'static) -> T {
    rt.block_on(async {
        weft::fiber::spawn(move || {
            assert!(weft::fiber::is_fiber());
            f()
        })
        .await
    })
    .unwrap()
}

/// Runs `f` inside an async task of `rt` (on a worker, not on a fiber).
fn in_task<T: Send + 'static>(rt: &weft::Runtime, f: impl FnOnce() -> T + Send + 'static) -> T {
    rt.spawn(async move {
        assert!(!weft::fiber::is_fiber());
        f()
    })
    .join()
    .unwrap()
}

#[test]
fn plain_thread_keeps_the_outer_wake_across_a_nested_wait() {
    let polls = with_timeout(|| {
        assert!(!weft::fiber::is_fiber());
        weft::wait(outer_inline())
    });
    assert_eq!(polls, 2);
}

#[test]
fn plain_thread_keeps_the_outer_wake_across_a_nested_join() {
    with_timeout(|| {
        let rt = workers(2);
        let handle = rt.handle().clone();
        assert_eq!(weft::wait(outer_joining_task(handle)), 2);
    });
}

/// A plain thread's wait reuses one signal when it does not nest: a wait after a
/// nested one still sleeps and wakes as it should.
#[test]
fn plain_thread_waits_normally_after_a_nested_wait() {
    with_timeout(|| {
        let rt = workers(2);
        assert_eq!(weft::wait(outer_inline()), 2);
        for i in 0..3 {
            let h = rt.spawn(async move {
                weft::time::sleep(Duration::from_millis(5)).await;
                i
            });
            assert_eq!(weft::wait(h).unwrap(), i);
        }
        assert_eq!(weft::wait(outer_joining_task(rt.handle().clone())), 2);
    });
}

#[test]
fn fiber_keeps_the_outer_wake_across_a_nested_wait() {
    with_timeout(|| {
        let rt = workers(2);
        assert_eq!(on_fiber(&rt, || weft::wait(outer_inline())), 2);
    });
}

#[test]
fn fiber_keeps_the_outer_wake_across_a_nested_join() {
    with_timeout(|| {
        let rt = workers(2);
        let handle = rt.handle().clone();
        assert_eq!(
            on_fiber(&rt, move || weft::wait(outer_joining_task(handle))),
            2
        );
    });
}

/// Three levels on a fiber: the outermost wake arrives while the innermost wait runs.
#[test]
fn fiber_keeps_the_outer_wake_across_two_nested_waits() {
    with_timeout(|| {
        let rt = workers(2);
        let polls = on_fiber(&rt, || {
            let gate = Arc::new(Gate::default());
            let g = gate.clone();
            weft::wait(outer(gate, move || {
                // The middle level is ready at its second poll (its own gate opens in
                // the innermost wait, like the outermost one).
                let middle_gate = Arc::new(Gate::default());
                let mg = middle_gate.clone();
                let middle = outer(middle_gate, move || {
                    weft::wait(OpenThenReady {
                        gate: g,
                        opened: false,
                    });
                    mg.open();
                });
                assert_eq!(weft::wait(middle), 2);
            }))
        });
        assert_eq!(polls, 2);
    });
}

#[test]
fn worker_task_keeps_the_outer_wake_across_a_nested_wait() {
    with_timeout(|| {
        let rt = workers(2);
        assert_eq!(in_task(&rt, || weft::wait(outer_inline())), 2);
    });
}

#[test]
fn worker_task_keeps_the_outer_wake_across_a_nested_join() {
    with_timeout(|| {
        let rt = workers(2);
        let handle = rt.handle().clone();
        assert_eq!(
            in_task(&rt, move || weft::wait(outer_joining_task(handle))),
            2
        );
    });
}
