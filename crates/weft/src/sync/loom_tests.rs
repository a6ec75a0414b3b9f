//! loom models of `weft::sync` (issue 16): a mutex hand-off against a waiter's
//! cancellation, `acquire_many` against `add_permits` and `close`, `notify_one` against
//! a dropped `notified()`, a oneshot send against the receiver's drop, and watch's
//! `changed` against a send. Run by `.ci/run` with the crate's other models (the
//! `loom_` filter).
//!
//! Futures are polled by hand on loom threads, with the harness of `chan`'s models: a
//! waker that signals a loom `Notify` the thread parks on between polls, so a lost
//! wake-up leaves a thread parked for ever and loom reports a deadlock.

use std::pin::pin;
use std::task::Poll;

use loom::thread;

use super::{oneshot, watch, Mutex, Notify, Semaphore};
use crate::base::loom_harness::{block_on, Task};
use crate::base::Arc;

/// The holder unlocks while one waiter is dropped (maybe after it was handed the
/// lock) and another waits: the lock must reach the second waiter.
#[test]
fn loom_sync_mutex_handoff_vs_cancel() {
    loom::model(|| {
        let m = Arc::new(Mutex::new(0u32));
        let g = m.try_lock().unwrap();
        let m1 = m.clone();
        let t1 = thread::spawn(move || {
            let task = Task::new();
            let mut f = pin!(m1.lock());
            if let Poll::Ready(mut g) = task.poll(f.as_mut()) {
                *g += 1;
            }
            // Dropped here, registered or not, handed the lock or not.
        });
        let m2 = m.clone();
        let t2 = thread::spawn(move || {
            *block_on(m2.lock()) += 10;
        });
        drop(g);
        t1.join().unwrap();
        t2.join().unwrap();
        let v = *m.try_lock().expect("the lock is free at the end");
        assert!(v == 10 || v == 11, "{v}");
    });
}

/// `acquire_many(3)` on a semaphore of 1 races `add_permits(2)` and `close`: it gets
/// its 3 permits or the close error, and no permit is lost either way.
#[test]
fn loom_sync_semaphore_acquire_many_vs_add_and_close() {
    loom::model(|| {
        let sem = Arc::new(Semaphore::new(1));
        let s1 = sem.clone();
        let t1 = thread::spawn(move || {
            let r = block_on(s1.acquire_many(3)).map(|p| p.num_permits());
            r
        });
        let s2 = sem.clone();
        let t2 = thread::spawn(move || s2.add_permits(2));
        sem.close();
        let r = t1.join().unwrap();
        t2.join().unwrap();
        if let Ok(n) = r {
            assert_eq!(n, 3);
        }
        // The permit (if any) was dropped: all 3 are back.
        assert_eq!(sem.available_permits(), 3);
    });
}

/// Whether `n` holds a stored permit, taken by a fresh `notified()` polled once (a
/// pending one is dropped again, leaving the list as it was).
fn take_permit(n: &Notify) -> bool {
    let task = Task::new();
    let mut f = pin!(n.notified());
    task.poll(f.as_mut()).is_ready()
}

/// `notify_one` while one `notified()` is dropped (maybe after being chosen) and
/// another waits: the notification reaches the waiting one (if the first consumed it
/// outright, it notifies once more itself).
#[test]
fn loom_sync_notify_one_vs_dropped_notified() {
    loom::model(|| {
        let n = Arc::new(Notify::new());
        let n1 = n.clone();
        let t1 = thread::spawn(move || {
            let task = Task::new();
            let mut f = pin!(n1.notified());
            if task.poll(f.as_mut()).is_ready() {
                // It consumed the notification (the stored permit): hand one on, so
                // that the other waiter has one in every execution.
                n1.notify_one();
            }
            // Dropped: a notification it was chosen for but never saw goes on.
        });
        let n2 = n.clone();
        let t2 = thread::spawn(move || {
            block_on(n2.notified());
        });
        n.notify_one();
        t1.join().unwrap();
        t2.join().unwrap();
    });
}

/// A send races the receiver's drop: the value is dropped exactly once, by whichever
/// side keeps it.
#[test]
fn loom_sync_oneshot_send_vs_receiver_drop() {
    loom::model(|| {
        let value = Arc::new(());
        let (tx, rx) = oneshot::channel::<Arc<()>>();
        let v = value.clone();
        let t = thread::spawn(move || {
            let _ = tx.send(v);
        });
        drop(rx);
        t.join().unwrap();
        assert_eq!(Arc::strong_count(&value), 1);
    });
}

/// A receive that waits races the sender's send or drop: it always ends.
#[test]
fn loom_sync_oneshot_recv_vs_send() {
    loom::model(|| {
        let (tx, rx) = oneshot::channel::<u32>();
        let t = thread::spawn(move || block_on(rx));
        tx.send(7).unwrap();
        assert_eq!(t.join().unwrap(), Ok(7));
    });
}

/// `changed` waits while the sender sends: it wakes and sees the new value.
#[test]
fn loom_sync_watch_changed_vs_send() {
    loom::model(|| {
        let (tx, mut rx) = watch::channel(0u32);
        let t = thread::spawn(move || {
            block_on(rx.changed()).unwrap();
            let v = *rx.borrow_and_update();
            v
        });
        tx.send(1).unwrap();
        assert_eq!(t.join().unwrap(), 1);
        drop(tx);
    });
}

/// The lock-free permit (`notify_one` with nobody waiting: EMPTY -> NOTIFIED) races a
/// waiter registering under the lock (EMPTY -> WAITING): whichever wins, the waiter
/// ends (it consumes the permit, or it is on the list when `notify_one` looks).
#[test]
fn loom_sync_notify_lock_free_permit_vs_register() {
    loom::model(|| {
        let n = Arc::new(Notify::new());
        let n1 = n.clone();
        let t = thread::spawn(move || block_on(n1.notified()));
        n.notify_one();
        t.join().unwrap();
    });
}

/// The last waiter withdraws (WAITING -> EMPTY under the lock) while `notify_one`
/// runs: the notification is consumed by that waiter's poll or left as the permit,
/// exactly one of the two.
#[test]
fn loom_sync_notify_last_waiter_dropped_vs_notify_one() {
    loom::model(|| {
        let n = Arc::new(Notify::new());
        let n1 = n.clone();
        let t = thread::spawn(move || {
            let task = Task::new();
            let mut f = pin!(n1.notified());
            task.poll(f.as_mut()).is_ready()
        });
        n.notify_one();
        let consumed = t.join().unwrap();
        let permit_left = take_permit(&n);
        assert!(consumed != permit_left, "{consumed} {permit_left}");
    });
}

/// `notify_waiters` (a generation bump, lock-free permit moves beside it) races a
/// `notified()` made before it that registers, and a `notify_one`: the waiter ends,
/// and the `notify_one` is not lost (the waiter took it, or it is the stored permit).
#[test]
fn loom_sync_notify_waiters_vs_register_and_permit() {
    loom::model(|| {
        let n = Arc::new(Notify::new());
        let n1 = n.clone();
        let t = thread::spawn(move || n1.notify_waiters());
        let n2 = n.clone();
        let t2 = thread::spawn(move || n2.notify_one());
        block_on(n.notified());
        t.join().unwrap();
        t2.join().unwrap();
        // One notification (the `notify_waiters` or the `notify_one`) ended the wait;
        // if it was `notify_waiters`, the `notify_one` is still here as the permit, or
        // it went to the waiter and nothing is left. Never two permits.
        let _ = take_permit(&n);
        assert!(!take_permit(&n), "at most one permit");
    });
}

// Review (review-notify): interleavings the models above leave out.

/// A `notified()` made before `notify_waiters` (on another thread) registers while the
/// call runs: whichever order (the call's lock-free generation step, or the waiter's
/// EMPTY -> WAITING under the lock first), the future completes. Nothing else could
/// wake it: a miss deadlocks.
#[test]
fn loom_notify_review_waiters_reach_future_made_before() {
    loom::model(|| {
        let n = Arc::new(Notify::new());
        let f = n.notified();
        let n1 = n.clone();
        let t = thread::spawn(move || n1.notify_waiters());
        block_on(f);
        t.join().unwrap();
        assert!(!take_permit(&n), "notify_waiters stored a permit");
    });
}

/// A registered waiter `a` is dropped (never polled again) while `notify_one` runs and
/// another waiter `b` registers: if `notify_one` chose `a`, `a`'s drop passes it on (to
/// `b`, or to the permit `b` then takes). `b` always ends, and the one notification is
/// consumed exactly once: no permit is left.
#[test]
fn loom_notify_review_chosen_drop_vs_new_waiter() {
    loom::model(|| {
        let n = Arc::new(Notify::new());
        let task = Task::new();
        let mut a = Box::pin(n.notified());
        assert!(task.poll(a.as_mut()).is_pending());
        let n1 = n.clone();
        let t1 = thread::spawn(move || n1.notify_one());
        let n2 = n.clone();
        let t2 = thread::spawn(move || block_on(n2.notified()));
        drop(a);
        t1.join().unwrap();
        t2.join().unwrap();
        assert!(!take_permit(&n), "consumed twice or kept");
    });
}

/// The last registered waiter withdraws while `notify_waiters` (its slow path: it saw
/// WAITING, then the lock shows EMPTY) and a lock-free `notify_one` run: the
/// `notify_one` is never lost (chosen `a` passes it on when dropped), and
/// `notify_waiters` adds no permit: exactly one permit at the end.
#[test]
fn loom_notify_review_waiters_vs_withdraw_vs_notify_one() {
    loom::model(|| {
        let n = Arc::new(Notify::new());
        let task = Task::new();
        let mut a = Box::pin(n.notified());
        assert!(task.poll(a.as_mut()).is_pending());
        let n1 = n.clone();
        let t1 = thread::spawn(move || n1.notify_waiters());
        let n2 = n.clone();
        let t2 = thread::spawn(move || n2.notify_one());
        drop(a);
        t1.join().unwrap();
        t2.join().unwrap();
        assert!(take_permit(&n), "the notify_one was lost");
        assert!(!take_permit(&n), "two permits");
    });
}
