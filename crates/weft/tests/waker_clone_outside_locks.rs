//! A waker's `clone` is its owner's code, and weft runs none of it under its own locks
//! (`task::waker::Prepared`): a waker that is not a weft task's is cloned before the
//! lock of the object it is stored in. Each test here polls a wait with a waker whose
//! `clone` uses the very object the wait registers with (another wait on it, polled
//! once and dropped, which takes the same lock). Before session 27 every one of these
//! spun for ever on a lock its own thread held.

mod chan_common;
mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use chan_common::{hook_waker, poll_with, watchdog, Hooks};

/// Polls `f` once with a no-op waker and drops it: a registration with the object's
/// wait list and a withdrawal, each under its lock.
fn touch<F: Future>(f: F) {
    let mut f = pin!(f);
    let _ = poll_with(f.as_mut(), Waker::noop());
}

/// Polls `wait` (pending) with a waker whose clone runs `reenter`, then drops it.
fn pending_with_reentrant_clone<F: Future>(wait: F, reenter: impl Fn() + Send + Sync + 'static) {
    let hooks = Hooks::new(reenter, || {});
    let waker = hook_waker(&hooks);
    let mut wait = pin!(wait);
    hooks.arm(true);
    assert!(poll_with(wait.as_mut(), &waker).is_pending());
    hooks.arm(false);
}

#[test]
fn mutex_and_semaphore() {
    watchdog(10, || {
        let m = Arc::new(weft::sync::Mutex::new(0));
        let held = m.try_lock().unwrap();
        let m2 = m.clone();
        pending_with_reentrant_clone(m.lock(), move || touch(m2.lock()));
        drop(held);

        let s = Arc::new(weft::sync::Semaphore::new(0));
        let s2 = s.clone();
        pending_with_reentrant_clone(s.acquire(), move || touch(s2.acquire()));
        s.add_permits(1);
        assert!(s.try_acquire().is_ok());
    });
}

#[test]
fn rwlock_notify_and_wait_group() {
    watchdog(10, || {
        let l = Arc::new(weft::sync::RwLock::new(0));
        let w = l.try_write().unwrap();
        let l2 = l.clone();
        pending_with_reentrant_clone(l.read(), move || touch(l2.read()));
        drop(w);

        let n = Arc::new(weft::sync::Notify::new());
        let n2 = n.clone();
        pending_with_reentrant_clone(n.notified(), move || touch(n2.notified()));

        let wg = weft::sync::WaitGroup::new();
        wg.add(1);
        let wg2 = wg.clone();
        pending_with_reentrant_clone(wg.wait(), move || touch(wg2.wait()));
        wg.done();
    });
}

#[test]
fn barrier_watch_and_broadcast() {
    watchdog(10, || {
        let b = Arc::new(weft::sync::Barrier::new(3));
        let b2 = b.clone();
        pending_with_reentrant_clone(b.wait(), move || touch(b2.wait()));

        let (tx, mut rx) = weft::sync::watch::channel(0);
        let rx2 = std::sync::Mutex::new(tx.subscribe());
        pending_with_reentrant_clone(rx.changed(), move || {
            touch(rx2.lock().unwrap().changed());
        });
        tx.send(1).unwrap();

        let (tx, mut rx) = weft::sync::broadcast::channel::<u8>(4);
        let rx2 = std::sync::Mutex::new(tx.subscribe());
        pending_with_reentrant_clone(rx.recv(), move || touch(rx2.lock().unwrap().recv()));
        tx.send(1).unwrap();
        assert_eq!(rx.try_recv(), Ok(1));
    });
}

#[test]
fn channel_select_async() {
    watchdog(10, || {
        let (_tx, rx) = weft::chan::bounded::<u8>(1);
        let rx2 = rx.clone();
        let mut sel = weft::chan::Select::new();
        sel.recv(&rx);
        pending_with_reentrant_clone(sel.select_async(), move || touch(rx2.recv()));
    });
}

#[test]
fn sleep_on_a_runtime() {
    watchdog(10, || {
        let rt = weft::Runtime::new().unwrap();
        rt.block_on(async {
            pending_with_reentrant_clone(weft::time::sleep(Duration::from_secs(60)), || {
                touch(weft::time::sleep(Duration::from_secs(60)))
            });
        });
    });
}

#[test]
fn socket_readiness() {
    watchdog(10, || {
        let rt = weft::Runtime::new().unwrap();
        let (a, _b) = common::net::pair(&rt);
        let a = Arc::new(a);
        let a2 = a.clone();
        rt.block_on(async move {
            pending_with_reentrant_clone(a.readable(), move || touch(a2.readable()));
        });
    });
}
