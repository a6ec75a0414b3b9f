//! Dropping a runtime drops every unfinished task's future; handles and
//! wakers may outlive it; `shutdown_timeout` does not wait forever.

mod common;

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use common::*;
use weft::{JoinHandle, Runtime};

#[test]
fn drop_runtime_drops_tasks_stuck_on_pending() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (drops, started) = (counter(), counter());
        let mut kept = Vec::new();
        for i in 0..100 {
            let (guard, started) = (DropCounter(drops.clone()), started.clone());
            let h = rt.spawn(async move {
                let _guard = guard;
                started.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await
            });
            // Detach half of them; keep the other handles past the runtime.
            if i % 2 == 0 {
                kept.push(h);
            }
        }
        wait_until("all 100 tasks have started", || load(&started) == 100);
        assert_eq!(load(&drops), 0);
        drop(rt);
        assert_eq!(
            load(&drops),
            100,
            "dropping the runtime did not drop every pending future"
        );
        drop(kept); // dropping JoinHandles after the runtime is gone is fine
        assert_eq!(load(&drops), 100);
    })
}

#[test]
fn drop_runtime_drops_tasks_still_in_the_queue() {
    with_timeout(|| {
        let rt = workers(1);
        let release_tx = block_a_worker(&rt).release;
        // The only worker is blocked, so these stay queued.
        let drops = counter();
        let handles: Vec<_> = (0..1000).map(|_| rt.spawn(never_ending(&drops))).collect();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            release_tx.send(()).unwrap();
        });
        drop(rt); // starts while the worker is still blocked
        releaser.join().unwrap();
        assert_eq!(
            load(&drops),
            1000,
            "queued tasks were not dropped with the runtime"
        );
        drop(handles);
    })
}

static STASHED: Mutex<Vec<Waker>> = Mutex::new(Vec::new());

#[test]
fn drop_runtime_with_wakers_stashed_in_a_global() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (drops, started) = (counter(), counter());
        for _ in 0..50 {
            let (guard, started) = (DropCounter(drops.clone()), started.clone());
            drop(rt.spawn(async move {
                let _guard = guard;
                let mut first = true;
                poll_fn(|cx| {
                    STASHED.lock().unwrap().push(cx.waker().clone());
                    if std::mem::take(&mut first) {
                        started.fetch_add(1, Ordering::SeqCst);
                    }
                    Poll::<()>::Pending
                })
                .await
            }));
        }
        wait_until("all 50 tasks stashed their waker", || load(&started) == 50);
        drop(rt);
        assert_eq!(
            load(&drops),
            50,
            "futures whose wakers are still alive were not dropped"
        );
        // Waking and dropping the wakers after the runtime is gone must be harmless.
        let wakers = std::mem::take(&mut *STASHED.lock().unwrap());
        let (here, there) = wakers.split_at(wakers.len() / 2);
        for w in here {
            w.wake_by_ref();
        }
        let there = there.to_vec();
        std::thread::spawn(move || there.into_iter().for_each(Waker::wake))
            .join()
            .unwrap();
        drop(wakers);
        assert_eq!(load(&drops), 50);
    })
}

#[test]
fn drop_runtime_with_tasks_holding_each_others_handles() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let drops = counter();
        let mut prev: Option<JoinHandle<()>> = None;
        for _ in 0..100 {
            let (guard, p) = (DropCounter(drops.clone()), prev.take());
            prev = Some(rt.spawn(async move {
                let _guard = guard;
                match p {
                    Some(p) => drop(p.await),
                    None => std::future::pending().await,
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(10));
        drop(rt);
        assert_eq!(load(&drops), 100);
        drop(prev);
    })
}

#[test]
fn join_after_the_runtime_is_gone() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let done = rt.spawn(async { 3 });
        wait_until("the task is finished", || done.is_finished());
        let pending = rt.spawn(std::future::pending::<()>());
        drop(rt);
        assert_eq!(
            done.join().unwrap(),
            3,
            "a finished task's output was lost with the runtime"
        );
        let err = pending
            .join()
            .expect_err("a task that never finished gave Ok");
        assert!(
            err.is_cancelled(),
            "a task dropped by the runtime is not reported cancelled: {err:?}"
        );
    })
}

#[test]
fn shutdown_timeout_drops_pending_tasks() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (drops, started) = (counter(), counter());
        for _ in 0..10 {
            let (guard, started) = (DropCounter(drops.clone()), started.clone());
            drop(rt.spawn(async move {
                let _guard = guard;
                started.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await
            }));
        }
        wait_until("all tasks started", || load(&started) == 10);
        let t0 = Instant::now();
        rt.shutdown_timeout(Duration::from_secs(10));
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "shutdown of an idle runtime took {:?}",
            t0.elapsed()
        );
        assert_eq!(load(&drops), 10);
    })
}

#[test]
fn shutdown_timeout_gives_up_on_a_stuck_worker() {
    with_timeout(|| {
        let rt = workers(1);
        // Blocks the worker thread (badly behaved task) until released.
        let release_tx = block_a_worker(&rt).release;
        let t0 = Instant::now();
        rt.shutdown_timeout(Duration::from_millis(200));
        let elapsed = t0.elapsed();
        let _ = release_tx.send(());
        assert!(
            elapsed < Duration::from_secs(5),
            "shutdown_timeout(200ms) took {elapsed:?}"
        );
    })
}

/// A runtime dropped from inside one of its own tasks does not wait for the worker it
/// is running on (that would deadlock); the other workers stop and the task's own
/// worker leaves when the poll returns.
#[test]
fn dropping_a_runtime_inside_its_own_task_does_not_deadlock() {
    common::with_timeout(|| {
        let rt = workers(2);
        let (tx, rx) = std::sync::mpsc::channel();
        let slot = std::sync::Arc::new(std::sync::Mutex::new(None::<weft::Runtime>));
        let s2 = slot.clone();
        let h = rt.spawn(async move {
            let rt = loop {
                if let Some(rt) = s2.lock().unwrap().take() {
                    break rt;
                }
                weft::task::yield_now().await;
            };
            drop(rt);
            tx.send(()).unwrap();
        });
        *slot.lock().unwrap() = Some(rt);
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("task ran the drop");
        drop(h);
    });
}
