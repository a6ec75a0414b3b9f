//! Aborting tasks: before the first poll, while pending, after completion,
//! from another thread, and from inside the task itself.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::*;
use futures_channel::oneshot;
use weft::task::{self, AbortHandle};
use weft::Runtime;

#[test]
fn abort_before_first_poll() {
    with_timeout(|| {
        let rt = workers(1);
        // Keep the only worker busy so the next task cannot be polled yet.
        let blocker = block_a_worker(&rt);

        let polled = Arc::new(AtomicBool::new(false));
        let drops = counter();
        let (p, guard) = (polled.clone(), DropCounter(drops.clone()));
        let h = rt.spawn(async move {
            let _guard = guard;
            p.store(true, Ordering::SeqCst);
            5
        });
        h.abort();
        blocker.release();

        let err = h
            .join()
            .expect_err("an aborted, never-polled task returned its value");
        assert!(err.is_cancelled());
        assert!(!err.is_panic());
        assert!(!polled.load(Ordering::SeqCst), "an aborted task was polled");
        assert_eq!(
            load(&drops),
            1,
            "the aborted task's future was not dropped exactly once"
        );
    })
}

#[test]
fn abort_while_pending_drops_the_future() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let drops = counter();
        let after = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = mpsc::channel();
        let (guard, a) = (DropCounter(drops.clone()), after.clone());
        let h = rt.spawn(async move {
            let _guard = guard;
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await;
            a.store(true, Ordering::SeqCst);
        });
        started_rx.recv_timeout(TIMEOUT).unwrap();
        let id = h.id();
        h.abort();
        let err = h.join().expect_err("an aborted pending task completed");
        assert!(err.is_cancelled(), "JoinError is not cancelled: {err:?}");
        assert!(!err.is_panic());
        assert_eq!(err.id(), id);
        assert!(!err.to_string().is_empty());
        assert_eq!(
            load(&drops),
            1,
            "the aborted task's future was not dropped exactly once"
        );
        assert!(!after.load(Ordering::SeqCst));
    })
}

#[test]
fn abort_after_completion_keeps_the_result() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let h = rt.spawn(async { 9 });
        wait_until("the task is finished", || h.is_finished());
        h.abort();
        assert_eq!(h.join().unwrap(), 9);
    })
}

#[test]
fn abort_handle_from_another_thread() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let drops = counter();
        let (started_tx, started_rx) = mpsc::channel();
        let guard = DropCounter(drops.clone());
        let h = rt.spawn(async move {
            let _guard = guard;
            started_tx.send(()).unwrap();
            std::future::pending::<u8>().await
        });
        started_rx.recv_timeout(TIMEOUT).unwrap();
        let ah = h.abort_handle();
        assert_eq!(ah.id(), h.id());
        assert!(!ah.is_finished());
        let ah2 = ah.clone();
        std::thread::spawn(move || ah2.abort()).join().unwrap();
        let err = h.join().expect_err("the task survived abort()");
        assert!(err.is_cancelled());
        assert_eq!(load(&drops), 1);
        assert!(
            ah.is_finished(),
            "AbortHandle::is_finished is false after the task was cancelled"
        );
    })
}

#[test]
fn abort_self_takes_effect_at_the_next_await() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (ah_tx, ah_rx) = oneshot::channel::<AbortHandle>();
        let saw_cancelled = Arc::new(AtomicBool::new(false));
        let after = Arc::new(AtomicBool::new(false));
        let (s, a) = (saw_cancelled.clone(), after.clone());
        let h = rt.spawn(async move {
            let me = ah_rx.await.unwrap();
            me.abort();
            s.store(task::is_cancelled(), Ordering::SeqCst);
            task::yield_now().await;
            a.store(true, Ordering::SeqCst);
        });
        ah_tx.send(h.abort_handle()).ok().unwrap();
        let err = h.join().expect_err("the task survived aborting itself");
        assert!(err.is_cancelled());
        assert!(
            saw_cancelled.load(Ordering::SeqCst),
            "task::is_cancelled() was false after abort()"
        );
        assert!(
            !after.load(Ordering::SeqCst),
            "code after the next await ran after abort()"
        );
    })
}

#[test]
fn abort_many_pending_tasks() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let drops = counter();
        let started = counter();
        let handles: Vec<_> = (0..1000)
            .map(|_| {
                let (guard, started) = (DropCounter(drops.clone()), started.clone());
                rt.spawn(async move {
                    let _guard = guard;
                    started.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await
                })
            })
            .collect();
        // Abort some before they ran and some after.
        std::thread::sleep(Duration::from_millis(1));
        for h in &handles {
            h.abort();
        }
        for h in handles {
            assert!(h.join().unwrap_err().is_cancelled());
        }
        assert_eq!(load(&drops), 1000);
        assert!(load(&started) <= 1000);
    })
}

#[test]
fn awaiting_an_aborted_task_gives_cancelled() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let victim = rt.spawn(std::future::pending::<()>());
        let ah = victim.abort_handle();
        let waiter = rt.spawn(victim); // a task whose future is the JoinHandle
        std::thread::sleep(Duration::from_millis(10));
        ah.abort();
        let res = waiter.join().unwrap();
        assert!(res.expect_err("an aborted task gave Ok").is_cancelled());
    })
}
