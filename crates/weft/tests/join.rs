//! `JoinHandle::join` and `block_on` from plain threads and from inside tasks.

mod common;

use std::time::Duration;

use common::*;
use futures_channel::oneshot;
use weft::{Handle, Runtime};

#[test]
fn join_from_a_plain_thread_waits_for_the_task() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (tx, rx) = oneshot::channel::<u32>();
        let h = rt.spawn(async move { rx.await.unwrap() * 2 });
        let joiner = std::thread::spawn(move || h.join());
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !joiner.is_finished(),
            "join() returned before the task could finish"
        );
        tx.send(21).unwrap();
        assert_eq!(joiner.join().unwrap().unwrap(), 42);
    })
}

#[test]
fn join_a_finished_task() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let h = rt.spawn(async { "done" });
        wait_until("the task is finished", || h.is_finished());
        assert_eq!(h.join().unwrap(), "done");
    })
}

#[test]
fn join_inside_a_task_on_one_worker_same_task_spawned() {
    with_timeout(|| {
        let rt = workers(1);
        let outer = rt.spawn(async {
            // The only worker is busy running this task: join() must run `inner` itself.
            let inner = weft::spawn(async {
                let grandchild = weft::spawn(async { 40 });
                grandchild.join().unwrap()
            });
            inner.join().unwrap() + 2
        });
        assert_eq!(outer.join().unwrap(), 42);
    })
}

#[test]
fn join_inside_a_task_on_one_worker_spawned_from_outside() {
    with_timeout(|| {
        let rt = workers(1);
        let inner = rt.spawn(async { 5 });
        let outer = rt.spawn(async move { inner.join().unwrap() + 1 });
        assert_eq!(outer.join().unwrap(), 6);
    })
}

#[test]
fn join_inside_a_task_on_one_worker_waits_for_a_foreign_wakeup() {
    with_timeout(|| {
        let rt = workers(1);
        let (tx, rx) = oneshot::channel::<u32>();
        let inner = rt.spawn(async move { rx.await.unwrap() + 1 });
        // `outer` blocks the only worker in join(); `inner` is woken later by
        // this thread, so join() must keep running woken tasks while it waits.
        let outer = rt.spawn(async move { inner.join().unwrap() * 2 });
        std::thread::sleep(Duration::from_millis(30));
        tx.send(20).unwrap();
        assert_eq!(outer.join().unwrap(), 42);
    })
}

/// fib(n) by spawning a task for each half and blocking in `JoinHandle::join` (unlike
/// `common::fib`, which uses `weft::join`).
fn task_fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let a = weft::spawn(async move { task_fib(n - 1) });
    let b = weft::spawn(async move { task_fib(n - 2) });
    a.join().unwrap() + b.join().unwrap()
}

#[test]
fn fork_join_with_blocking_join_one_worker() {
    with_timeout(|| {
        let rt = workers(1);
        assert_eq!(rt.spawn(async { task_fib(10) }).join().unwrap(), 55);
    })
}

#[test]
fn fork_join_with_blocking_join_two_workers() {
    with_timeout(|| {
        let rt = workers(2);
        assert_eq!(rt.spawn(async { task_fib(12) }).join().unwrap(), 144);
    })
}

#[test]
fn block_on_inside_a_task_on_one_worker() {
    with_timeout(|| {
        let rt = workers(1);
        let outer = rt.spawn(async {
            let handle = Handle::current();
            handle.block_on(async {
                let a = weft::spawn(async { 1 });
                let b = weft::spawn(async { 2 });
                // Nested block_on, still on the only worker.
                let c =
                    Handle::current().block_on(async { weft::spawn(async { 4 }).await.unwrap() });
                a.await.unwrap() + b.await.unwrap() + c
            })
        });
        assert_eq!(outer.join().unwrap(), 7);
    })
}

#[test]
fn block_on_inside_a_task_waits_for_a_foreign_wakeup() {
    with_timeout(|| {
        let rt = workers(1);
        let (tx, rx) = oneshot::channel::<u32>();
        let outer = rt.spawn(async move {
            Handle::current().block_on(async move {
                let v = rx.await.unwrap();
                weft::spawn(async move { v + 1 }).await.unwrap()
            })
        });
        std::thread::sleep(Duration::from_millis(30));
        tx.send(9).unwrap();
        assert_eq!(outer.join().unwrap(), 10);
    })
}

#[test]
fn block_on_from_a_plain_thread_via_handle() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let handle = rt.handle().clone();
        let v = std::thread::spawn(move || {
            handle.block_on(async { weft::spawn(async { 3 }).await.unwrap() * 3 })
        })
        .join()
        .unwrap();
        assert_eq!(v, 9);
    })
}
