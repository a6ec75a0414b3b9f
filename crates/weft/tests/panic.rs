//! A panicking task reports the panic through its JoinHandle and does not
//! take the runtime down.

mod common;

use std::sync::mpsc;

use common::*;
use weft::Runtime;

#[test]
fn panic_payload_reaches_the_join_handle() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let err = rt
            .spawn(async { panic!("boom in a task") })
            .join()
            .expect_err("a panicking task gave Ok");
        assert!(err.is_panic());
        assert!(!err.is_cancelled());
        assert!(!format!("{err:?}").is_empty());
        let payload = err.into_panic();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in a task"));

        let n = 7;
        let err = rt
            .spawn(async move { panic!("formatted boom {n}") })
            .join()
            .unwrap_err();
        let payload = err
            .try_into_panic()
            .expect("try_into_panic failed on a panic");
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some("formatted boom 7")
        );
    })
}

#[test]
fn try_into_panic_on_a_cancelled_task_gives_the_error_back() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let h = rt.spawn(std::future::pending::<()>());
        h.abort();
        let err = h.join().unwrap_err();
        let err = err
            .try_into_panic()
            .expect_err("a cancelled task has a panic payload");
        assert!(err.is_cancelled());
    })
}

#[test]
fn one_worker_runtime_keeps_working_after_panics() {
    with_timeout(|| {
        let rt = workers(1);
        let drops = counter();
        for i in 0..10 {
            let guard = DropCounter(drops.clone());
            let err = rt
                .spawn(async move {
                    let _guard = guard;
                    weft::task::yield_now().await;
                    panic!("panic number {i}");
                })
                .join()
                .unwrap_err();
            assert!(err.is_panic());
            assert_eq!(
                panic_message(&*err.into_panic()),
                Some(format!("panic number {i}"))
            );
        }
        assert_eq!(
            load(&drops),
            10,
            "a panicking task's locals were not dropped exactly once"
        );

        let handles: Vec<_> = (0..100u32).map(|i| rt.spawn(async move { i })).collect();
        let sum: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, 4950);
        assert_eq!(rt.stats().num_workers, 1);
    })
}

#[test]
fn awaiting_a_panicked_task_from_another_task() {
    with_timeout(|| {
        let rt = workers(1);
        let (tx, rx) = mpsc::channel();
        let victim = rt.spawn(async { panic!("victim panicked") });
        let waiter = rt.spawn(async move {
            let res = victim.await;
            tx.send(()).unwrap();
            res.map_err(|e| panic_message(&*e.into_panic()))
        });
        rx.recv_timeout(TIMEOUT).unwrap();
        assert_eq!(
            waiter.join().unwrap(),
            Err(Some("victim panicked".to_string()))
        );
    })
}

#[test]
fn panic_from_a_task_spawned_inside_a_task() {
    with_timeout(|| {
        let rt = workers(2);
        let v = rt
            .spawn(async {
                let bad = weft::spawn(async { panic!("child") });
                let good = weft::spawn(async { 11 });
                assert!(bad.await.unwrap_err().is_panic());
                good.await.unwrap()
            })
            .join()
            .unwrap();
        assert_eq!(v, 11);
    })
}
