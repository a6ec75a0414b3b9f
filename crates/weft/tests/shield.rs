//! `task::shield`: an aborted task finishes its shielded future first, and
//! the abort takes effect at the next await point after the shield.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::*;
use futures_channel::oneshot;
use weft::task;
use weft::Runtime;

fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

#[test]
fn shielded_future_finishes_after_abort() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (started_tx, started_rx) = mpsc::channel();
        let (gate_tx, gate_rx) = oneshot::channel::<u32>();
        let side_effect = Arc::new(AtomicU32::new(0));
        let (cancelled_before, cancelled_inside, after) = (flag(), flag(), flag());

        let (se, cb, ci, af) = (
            side_effect.clone(),
            cancelled_before.clone(),
            cancelled_inside.clone(),
            after.clone(),
        );
        let h = rt.spawn(async move {
            let v = task::shield(async move {
                cb.store(task::is_cancelled(), Ordering::SeqCst);
                started_tx.send(()).unwrap();
                let v = gate_rx.await.unwrap();
                ci.store(task::is_cancelled(), Ordering::SeqCst);
                se.store(v, Ordering::SeqCst);
                v
            })
            .await;
            task::yield_now().await;
            af.store(true, Ordering::SeqCst);
            v
        });

        started_rx.recv_timeout(TIMEOUT).unwrap();
        h.abort();
        std::thread::sleep(Duration::from_millis(30));
        assert!(
            !h.is_finished(),
            "the task ended while its shielded future was still pending"
        );
        assert_eq!(side_effect.load(Ordering::SeqCst), 0);
        assert!(
            gate_tx.send(7).is_ok(),
            "the shielded future was dropped by abort()"
        );

        let err = h
            .join()
            .expect_err("the abort was lost after the shield finished");
        assert!(err.is_cancelled());
        assert_eq!(
            side_effect.load(Ordering::SeqCst),
            7,
            "the shielded future did not run to completion"
        );
        assert!(
            !cancelled_before.load(Ordering::SeqCst),
            "is_cancelled() was true before abort()"
        );
        assert!(
            cancelled_inside.load(Ordering::SeqCst),
            "is_cancelled() inside the shield stayed false after abort()"
        );
        assert!(
            !after.load(Ordering::SeqCst),
            "code after the shield's next await point ran"
        );
    })
}

#[test]
fn nested_shields() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (started_tx, started_rx) = mpsc::channel();
        let (gate_tx, gate_rx) = oneshot::channel::<()>();
        let (inner_done, outer_done, after) = (flag(), flag(), flag());

        let (id, od, af) = (inner_done.clone(), outer_done.clone(), after.clone());
        let h = rt.spawn(async move {
            task::shield(async move {
                task::shield(async move {
                    started_tx.send(()).unwrap();
                    gate_rx.await.unwrap();
                    id.store(true, Ordering::SeqCst);
                })
                .await;
                // Still inside the outer shield: this await must not end the task.
                task::yield_now().await;
                od.store(task::is_cancelled(), Ordering::SeqCst);
            })
            .await;
            task::yield_now().await;
            af.store(true, Ordering::SeqCst);
        });

        started_rx.recv_timeout(TIMEOUT).unwrap();
        h.abort();
        std::thread::sleep(Duration::from_millis(10));
        assert!(
            gate_tx.send(()).is_ok(),
            "the inner shielded future was dropped by abort()"
        );
        let err = h
            .join()
            .expect_err("the abort was lost after the shields finished");
        assert!(err.is_cancelled());
        assert!(
            inner_done.load(Ordering::SeqCst),
            "the inner shield did not finish"
        );
        assert!(
            outer_done.load(Ordering::SeqCst),
            "the outer shield did not finish (or is_cancelled() was false)"
        );
        assert!(
            !after.load(Ordering::SeqCst),
            "code after the outer shield's next await point ran"
        );
    })
}

#[test]
fn shield_without_abort_is_transparent() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let h = rt.spawn(async {
            let a = task::shield(async {
                task::yield_now().await;
                20
            })
            .await;
            let b = task::shield(task::shield(async { 1 })).await;
            (a + b, task::is_cancelled())
        });
        assert_eq!(h.join().unwrap(), (21, false));
    })
}

#[test]
fn abort_before_the_shield_is_reached_skips_it() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (started_tx, started_rx) = mpsc::channel();
        let ran = flag();
        let r = ran.clone();
        let h = rt.spawn(async move {
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await;
            task::shield(async move { r.store(true, Ordering::SeqCst) }).await;
        });
        started_rx.recv_timeout(TIMEOUT).unwrap();
        h.abort();
        assert!(h.join().unwrap_err().is_cancelled());
        assert!(!ran.load(Ordering::SeqCst));
    })
}

/// Found while fixing shields that outlive their task's poll: a shield handed out of a
/// task and dropped elsewhere, after the (idle) task was aborted, must let the
/// cancellation take effect; before, the task was marked notified but never queued, and
/// its handle waited for ever.
#[test]
fn dropping_an_escaped_shield_lets_a_deferred_abort_take_effect() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (tx, rx) = mpsc::channel();
        let h = rt.spawn(async move {
            let mut shield = Box::pin(task::shield(std::future::pending::<()>()));
            // One poll enters the shield; then the shield leaves the task.
            std::future::poll_fn(|cx| {
                let _ = std::future::Future::poll(shield.as_mut(), cx);
                std::task::Poll::Ready(())
            })
            .await;
            tx.send(shield).unwrap();
            std::future::pending::<()>().await;
        });
        let shield = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        h.abort();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!h.is_finished(), "the abort was not deferred by the shield");
        drop(shield);
        let r = h.join();
        assert!(r.is_err_and(|e| e.is_cancelled()));
    })
}
