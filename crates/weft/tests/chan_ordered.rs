//! The ordered task channel (issue 15): results in send order whatever the completion
//! order, capacity waits in each context, the end of the stream, the send-failure rule
//! (the work is joined and its result handed back), and cancellation of queued work
//! when the receiver goes.

mod chan_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use chan_common::*;
use weft::chan::{ordered, OrderedReceiver, OrderedSender, RecvError};

#[allow(dead_code)]
fn shapes<T: Send + 'static>(tx: &OrderedSender<T>, rx: &OrderedReceiver<T>) {
    fn send_clone<S: Send + Clone>(_: &S) {}
    fn send<S: Send>(_: &S) {}
    send_clone(tx);
    send(rx);
    is_send(&rx.recv());
    is_send(&tx.spawn_async(async { unreachable!() }));
}

/// Later work finishes first (it sleeps less); results still come out in send order,
/// for work started by `spawn`, `spawn_fiber` and `spawn_async`.
#[test]
fn results_come_in_send_order_whatever_the_completion_order() {
    watchdog(20, || {
        const N: u64 = 24;
        let rt = rt2();
        let (tx, rx) = ordered::<u64>(4);
        // Delays: the later, the shorter.
        let delay = |i: u64| Duration::from_millis(2 * (N - i));
        // spawn and spawn_fiber from a fiber (which waits for room by suspending).
        let tx_fiber = tx.clone();
        let feeder = fiber_on(&rt, move || {
            for i in (0..N).filter(|i| i % 3 != 2) {
                let d = delay(i);
                if i % 3 == 0 {
                    tx_fiber
                        .spawn(async move {
                            weft::time::sleep(d).await;
                            i
                        })
                        .unwrap();
                } else {
                    tx_fiber
                        .spawn_fiber(move || {
                            weft::fiber::sleep(d);
                            i
                        })
                        .unwrap();
                }
                // Let the async feeder queue its share in between (interleaving by
                // index is not guaranteed across two feeders, so the async one feeds
                // a separate ordered channel below).
            }
        });
        let got_mixed: Vec<u64> = (0..N)
            .filter(|i| i % 3 != 2)
            .map(|_| rx.recv_blocking().unwrap().unwrap())
            .collect();
        join_within(feeder, 10).unwrap();
        let want: Vec<u64> = (0..N).filter(|i| i % 3 != 2).collect();
        assert_eq!(got_mixed, want, "spawn / spawn_fiber");

        // spawn_async from a task, received by another task.
        let (atx, arx) = ordered::<u64>(3);
        let feeder = rt.spawn(async move {
            for i in 0..N {
                let d = delay(i);
                atx.spawn_async(async move {
                    weft::time::sleep(d).await;
                    i
                })
                .await
                .unwrap();
            }
        });
        let got = rt.block_on(async move {
            let mut got = vec![];
            while let Ok(r) = arx.recv().await {
                got.push(r.unwrap());
            }
            got
        });
        join_within(feeder, 10).unwrap();
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "spawn_async");
        drop(tx);
    })
}

/// With `cap` handles queued, a spawn waits for room: a plain thread blocks, a fiber
/// suspends (and its worker runs the receiver meanwhile).
#[test]
fn a_full_queue_makes_spawns_wait() {
    watchdog(15, || {
        let rt = rt2();
        let (tx, rx) = ordered::<usize>(2);
        let progress = Arc::new(AtomicUsize::new(0));
        let handle = rt.handle().clone();
        let feeder = {
            let progress = progress.clone();
            std::thread::spawn(move || {
                // Entered into the runtime, but on a plain thread: blocks for room.
                handle.block_on(async move {
                    for i in 0..5 {
                        tx.spawn(async move { i }).unwrap();
                        progress.fetch_add(1, SeqCst);
                    }
                })
            })
        };
        wait_for("two spawns", 5, || progress.load(SeqCst) >= 2);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(progress.load(SeqCst), 2, "a spawn did not wait for room");
        assert_eq!(rx.recv_blocking().unwrap().unwrap(), 0);
        wait_for("the third spawn", 5, || progress.load(SeqCst) >= 3);
        let rest: Vec<usize> = (1..5)
            .map(|_| rx.recv_blocking().unwrap().unwrap())
            .collect();
        assert_eq!(rest, [1, 2, 3, 4]);
        feeder.join().unwrap();
        assert_eq!(rx.recv_blocking().unwrap_err(), RecvError);

        // One worker: a fiber waiting for room must let the receiving task run.
        let rt1 = weft::Builder::new().worker_threads(1).build().unwrap();
        let (tx, rx) = ordered::<usize>(1);
        let f = fiber_on(&rt1, move || {
            for i in 0..10 {
                tx.spawn_fiber(move || i).unwrap();
            }
        });
        let t = rt1.spawn(async move {
            let mut got = vec![];
            while let Ok(r) = rx.recv().await {
                got.push(r.unwrap());
            }
            got
        });
        join_within(f, 10).unwrap();
        assert_eq!(join_within(t, 10).unwrap(), (0..10).collect::<Vec<_>>());
    })
}

#[test]
fn recv_fails_once_every_sender_is_gone_and_the_queue_is_drained() {
    watchdog(10, || {
        let rt = rt2();
        let (tx, rx) = ordered::<u32>(4);
        let tx2 = tx.clone();
        rt.block_on(async {
            tx.spawn(async { 1 }).unwrap();
            tx2.spawn_fiber(|| 2).unwrap();
        });
        drop(tx);
        assert_eq!(rx.recv_blocking().unwrap().unwrap(), 1);
        let late_sender = rt.spawn({
            let tx2 = tx2.clone();
            async move {
                weft::time::sleep(Duration::from_millis(20)).await;
                drop(tx2);
            }
        });
        drop(tx2);
        assert_eq!(rx.recv_blocking().unwrap().unwrap(), 2);
        join_within(late_sender, 5).unwrap();
        assert_eq!(rx.recv_blocking().unwrap_err(), RecvError);
        assert_eq!(rt.block_on(rx.recv()).unwrap_err(), RecvError);
    })
}

#[test]
fn failed_work_keeps_its_place() {
    watchdog(10, || {
        let rt = rt2();
        let (tx, rx) = ordered::<u32>(8);
        rt.block_on(async {
            tx.spawn(async {
                weft::time::sleep(Duration::from_millis(20)).await;
                1
            })
            .unwrap();
            tx.spawn(async { panic!("work 2 fails") }).unwrap();
            tx.spawn_fiber(|| 3).unwrap();
        });
        drop(tx);
        assert_eq!(rx.recv_blocking().unwrap().unwrap(), 1);
        let e = rx.recv_blocking().unwrap().unwrap_err();
        assert!(e.is_panic(), "{e:?}");
        assert_eq!(rx.recv_blocking().unwrap().unwrap(), 3);
        assert!(rx.recv_blocking().is_err());
    })
}

/// Spawning once the receiver is gone: the work still runs, is joined before the
/// error returns, and its result comes back in the error.
#[test]
fn spawn_after_the_receiver_is_gone_hands_back_the_joined_result() {
    watchdog(10, || {
        let rt = rt2();
        let (tx, rx) = ordered::<u32>(2);
        drop(rx);
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let r = rt.block_on(async {
            tx.spawn(async move {
                weft::time::sleep(Duration::from_millis(20)).await;
                d.store(true, SeqCst);
                7
            })
        });
        assert!(
            done.load(SeqCst),
            "the error returned before the work was joined"
        );
        assert_eq!(r.unwrap_err().into_inner().unwrap(), 7);

        let d = done.clone();
        done.store(false, SeqCst);
        let r = rt.block_on(async {
            tx.spawn_fiber(move || {
                weft::fiber::sleep(Duration::from_millis(20));
                d.store(true, SeqCst);
                8
            })
        });
        assert!(done.load(SeqCst));
        assert_eq!(r.unwrap_err().into_inner().unwrap(), 8);

        let r = rt.block_on(async { tx.spawn_async(async { 9 }).await });
        assert_eq!(r.unwrap_err().into_inner().unwrap(), 9);

        let r = rt.block_on(async { tx.spawn(async { panic!("boom") }) });
        assert!(r.unwrap_err().into_inner().unwrap_err().is_panic());
    })
}

/// Dropping the receiver cancels the work still queued: tasks that would set a flag
/// after a sleep never set it (tasks, fibers, and the work a dropped `recv` was
/// joining).
#[test]
fn dropping_the_receiver_cancels_queued_work() {
    watchdog(10, || {
        let rt = rt2();
        let (tx, rx) = ordered::<()>(8);
        let flags: Vec<Arc<AtomicBool>> =
            (0..5).map(|_| Arc::new(AtomicBool::new(false))).collect();
        rt.block_on(async {
            for (k, f) in flags.iter().enumerate() {
                let f = f.clone();
                if k % 2 == 0 {
                    tx.spawn(async move {
                        weft::time::sleep(Duration::from_millis(100)).await;
                        f.store(true, SeqCst);
                    })
                    .unwrap();
                } else {
                    tx.spawn_fiber(move || {
                        weft::fiber::sleep(Duration::from_millis(100));
                        f.store(true, SeqCst);
                    })
                    .unwrap();
                }
            }
        });
        // A receive that starts joining the first work, then is dropped (a timeout):
        // that handle is the receiver's again, and is cancelled with the rest.
        let timed_out = rt.block_on(async {
            weft::time::timeout(Duration::from_millis(10), rx.recv())
                .await
                .is_err()
        });
        assert!(timed_out);
        drop(rx);
        std::thread::sleep(Duration::from_millis(250));
        for (k, f) in flags.iter().enumerate() {
            assert!(
                !f.load(SeqCst),
                "queued work {k} ran to the end after the receiver was dropped"
            );
        }
        drop(tx);
    })
}

/// Finished outputs whose `Drop` panics, queued when the receiver drops: every output
/// is dropped and one panic reaches the dropper. (Dropped together, the second such
/// panic came during the first one's unwind and aborted the process.)
#[test]
fn dropping_the_receiver_with_panicking_outputs_drops_each_and_resumes_one_panic() {
    struct Bomb(Arc<AtomicUsize>);
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
            panic!("bomb");
        }
    }
    watchdog(10, || {
        let rt = rt2();
        let dropped = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = ordered::<Bomb>(8);
        for k in 0..4 {
            let (d, n) = (dropped.clone(), done.clone());
            if k % 2 == 0 {
                let _g = rt.enter();
                tx.spawn(async move {
                    n.fetch_add(1, SeqCst);
                    Bomb(d)
                })
                .unwrap();
            } else {
                let _g = rt.enter();
                tx.spawn_fiber(move || {
                    n.fetch_add(1, SeqCst);
                    Bomb(d)
                })
                .unwrap();
            }
        }
        wait_for("all four outputs", 5, || done.load(SeqCst) == 4);
        // The outputs are stored just after the counter moves; give them a moment.
        std::thread::sleep(Duration::from_millis(100));
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(rx)));
        std::panic::set_hook(quiet);
        let p = out.expect_err("a panicking output's drop reaches the dropper");
        assert_eq!(p.downcast_ref::<&str>(), Some(&"bomb"));
        assert_eq!(dropped.load(SeqCst), 4, "every output dropped once");
        drop(tx);
    })
}

/// Receives dropped while they wait (timeouts) lose nothing: the next receive picks
/// up where the dropped one was.
#[test]
fn dropped_receives_lose_nothing() {
    watchdog(15, || {
        let rt = rt2();
        let (tx, rx) = ordered::<u32>(4);
        let feeder = fiber_on(&rt, move || {
            for i in 0..40u32 {
                let d = Duration::from_millis(u64::from(i % 5));
                tx.spawn(async move {
                    weft::time::sleep(d).await;
                    i
                })
                .unwrap();
            }
        });
        let got = rt.block_on(async move {
            let mut got = vec![];
            loop {
                match weft::time::timeout(Duration::from_micros(500), rx.recv()).await {
                    Ok(Ok(r)) => got.push(r.unwrap()),
                    Ok(Err(_)) => break,
                    Err(_) => {}
                }
            }
            got
        });
        join_within(feeder, 10).unwrap();
        assert_eq!(got, (0..40).collect::<Vec<_>>());
    })
}
