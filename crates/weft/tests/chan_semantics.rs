//! Semantics of `weft::chan` (issue 15): closing, dropping ends, panicking drops,
//! rendezvous `try_send`/`try_recv`, and the API's shape (traits, errors, iterators,
//! `Stream`, the inspection methods).

mod chan_common;
mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe, RefUnwindSafe, UnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use chan_common::*;
use futures_core::Stream;
use weft::chan::{
    self, ReadyTimeoutError, Receiver, RecvError, RecvTimeoutError, Select, SelectTimeoutError,
    SendError, SendTimeoutError, Sender, TryReadyError, TryRecvError, TrySelectError, TrySendError,
};

// ---------------------------------------------------------------------------------
// close()
// ---------------------------------------------------------------------------------

#[test]
fn close_returns_true_exactly_once() {
    for cap in FLAVOURS {
        let (tx, rx) = make::<i32>(cap);
        assert!(!tx.is_closed() && !rx.is_closed());
        assert!(rx.clone().close(), "cap {cap:?}: the first close");
        assert!(!tx.close(), "cap {cap:?}: a second close returned true");
        assert!(!rx.close());
        assert!(!tx.clone().close());
        assert!(tx.is_closed() && rx.is_closed());
    }
}

#[test]
fn concurrent_closes_return_true_once() {
    watchdog(10, || {
        for round in 0..100 {
            let (tx, rx) = make::<i32>(FLAVOURS[round % 4]);
            let barrier = Arc::new(std::sync::Barrier::new(6));
            let hs: Vec<_> = (0..6)
                .map(|k| {
                    let (tx, rx, b) = (tx.clone(), rx.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        b.wait();
                        if k % 2 == 0 {
                            tx.close()
                        } else {
                            rx.close()
                        }
                    })
                })
                .collect();
            let trues = hs.into_iter().map(|h| h.join().unwrap());
            assert_eq!(trues.filter(|&t| t).count(), 1, "round {round}");
        }
    })
}

#[test]
fn after_close_receivers_drain_then_see_disconnected() {
    watchdog(10, || {
        let rt = rt2();
        for cap in [Some(4), Some(16), None] {
            for close_by_sender in [true, false] {
                let (tx, rx) = make::<i32>(cap);
                for i in 0..3 {
                    tx.send_blocking(i).unwrap();
                }
                assert!(if close_by_sender {
                    tx.close()
                } else {
                    rx.close()
                });
                assert!(tx.is_closed() && rx.is_closed());
                assert_eq!(rx.len(), 3, "closing dropped buffered values");
                assert_eq!(rx.try_recv(), Ok(0));
                assert_eq!(rx.recv_timeout(Duration::from_secs(1)), Ok(1));
                assert_eq!(rt.block_on(rx.recv()), Ok(2));
                assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
                assert_eq!(rx.recv_blocking(), Err(RecvError));
                assert_eq!(
                    rx.recv_timeout(Duration::from_secs(1)),
                    Err(RecvTimeoutError::Disconnected)
                );
                assert_eq!(rt.block_on(rx.recv()), Err(RecvError));
                assert_eq!(rx.iter().count(), 0);
            }
        }
    })
}

#[test]
fn after_close_senders_get_their_value_back() {
    watchdog(10, || {
        let rt = rt2();
        for cap in FLAVOURS {
            let (tx, rx) = make::<String>(cap);
            if cap == Some(1) {
                tx.send_blocking("full".into()).unwrap();
            }
            tx.close();
            assert_eq!(
                tx.send_blocking("a".into()),
                Err(SendError("a".to_string()))
            );
            assert_eq!(
                tx.try_send("b".into()),
                Err(TrySendError::Disconnected("b".to_string())),
                "cap {cap:?}: a closed channel reported Full"
            );
            assert_eq!(
                tx.send_timeout("c".into(), Duration::from_secs(1)),
                Err(SendTimeoutError::Disconnected("c".to_string()))
            );
            assert_eq!(
                rt.block_on(tx.send("d".into())),
                Err(SendError("d".to_string()))
            );
            assert_eq!(tx.send_blocking("e".into()).unwrap_err().into_inner(), "e");
            let drained: Vec<String> = rx.try_iter().collect();
            assert_eq!(drained.len(), usize::from(cap == Some(1)), "cap {cap:?}");
        }
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Disconnect {
    Close,
    DropEnds,
}

/// Every kind of waiter, on every context, wakes when the channel closes (or loses
/// its last sender/receiver), receivers with an error and senders with their value.
fn every_waiter_wakes(cap: Option<usize>, how: Disconnect) {
    watchdog(15, move || {
        let rt = rt2();
        // Receivers wait on `r`: it stays empty.
        let (r_tx, r_rx) = make::<u64>(cap);
        // Senders wait on `s`: rendezvous, or bounded(1) kept full.
        let senders = matches!(cap, Some(0) | Some(1));
        let (s_tx, s_rx) = make::<u64>(cap);
        if cap == Some(1) {
            s_tx.send_blocking(999).unwrap();
        }
        let (report, reports) = mpsc::channel::<(&'static str, Result<(), String>)>();
        let mut expected = 0;
        macro_rules! waiter {
            (thread $label:literal, $end:ident, |$e:ident| $body:expr) => {{
                let ($e, report) = ($end.clone(), report.clone());
                std::thread::spawn(move || report.send(($label, $body)).unwrap());
                expected += 1;
            }};
            (fiber $label:literal, $end:ident, |$e:ident| $body:expr) => {{
                let ($e, report) = ($end.clone(), report.clone());
                drop(fiber_on(&rt, move || report.send(($label, $body)).unwrap()));
                expected += 1;
            }};
            (task $label:literal, $end:ident, |$e:ident| $body:expr) => {{
                let ($e, report) = ($end.clone(), report.clone());
                drop(rt.spawn(async move { report.send(($label, $body)).unwrap() }));
                expected += 1;
            }};
        }
        fn check<T: std::fmt::Debug>(ok: bool, got: T) -> Result<(), String> {
            if ok {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        }

        // --- receivers ---
        waiter!(thread "thread recv_blocking", r_rx, |rx| {
            let r = rx.recv_blocking();
            check(r == Err(RecvError), r)
        });
        waiter!(thread "thread recv_timeout", r_rx, |rx| {
            let r = rx.recv_timeout(Duration::from_secs(30));
            check(r == Err(RecvTimeoutError::Disconnected), r)
        });
        waiter!(thread "thread iter", r_rx, |rx| {
            let n = rx.iter().count();
            check(n == 0, n)
        });
        waiter!(fiber "fiber recv_blocking", r_rx, |rx| {
            let r = rx.recv_blocking();
            check(r == Err(RecvError), r)
        });
        waiter!(task "task recv", r_rx, |rx| {
            let r = rx.recv().await;
            check(r == Err(RecvError), r)
        });
        waiter!(thread "thread Select::select", r_rx, |rx| {
            let never = chan::never::<u64>();
            let mut sel = Select::new();
            let i = sel.recv(&rx);
            sel.recv(&never);
            let oper = sel.select();
            let idx = oper.index();
            let r = oper.recv(&rx);
            check(idx == i && r == Err(RecvError), (idx, r))
        });
        waiter!(thread "thread select_timeout", r_rx, |rx| {
            let mut sel = Select::new();
            sel.recv(&rx);
            match sel.select_timeout(Duration::from_secs(30)) {
                Ok(oper) => {
                    let r = oper.recv(&rx);
                    check(r == Err(RecvError), r)
                }
                Err(e) => Err(format!("{e:?}")),
            }
        });
        waiter!(thread "thread select!", r_rx, |rx| {
            let never = chan::never::<u64>();
            weft::select! {
                recv(rx) -> m => check(m == Err(RecvError), m),
                recv(never) -> m => Err(format!("never delivered {m:?}")),
            }
        });
        waiter!(fiber "fiber Select::select", r_rx, |rx| {
            let mut sel = Select::new();
            sel.recv(&rx);
            let r = sel.select().recv(&rx);
            check(r == Err(RecvError), r)
        });
        waiter!(task "task select_async", r_rx, |rx| {
            let mut sel = Select::new();
            sel.recv(&rx);
            let r = sel.select_async().await.recv(&rx);
            check(r == Err(RecvError), r)
        });
        waiter!(thread "thread Select::ready", r_rx, |rx| {
            let mut sel = Select::new();
            let i = sel.recv(&rx);
            let got = sel.ready();
            check(got == i, got)
        });

        // --- senders ---
        if senders {
            waiter!(thread "thread send_blocking", s_tx, |tx| {
                let r = tx.send_blocking(1);
                check(r == Err(SendError(1)), r)
            });
            waiter!(thread "thread send_timeout", s_tx, |tx| {
                let r = tx.send_timeout(2, Duration::from_secs(30));
                check(r == Err(SendTimeoutError::Disconnected(2)), r)
            });
            waiter!(fiber "fiber send_blocking", s_tx, |tx| {
                let r = tx.send_blocking(3);
                check(r == Err(SendError(3)), r)
            });
            waiter!(task "task send", s_tx, |tx| {
                let r = tx.send(4).await;
                check(r == Err(SendError(4)), r)
            });
            waiter!(thread "thread select! send", s_tx, |tx| {
                weft::select! {
                    send(tx, 5) -> r => check(r == Err(SendError(5)), r),
                }
            });
            waiter!(task "task select_async send", s_tx, |tx| {
                let mut sel = Select::new();
                sel.send(&tx);
                let r = sel.select_async().await.send(&tx, 6);
                check(r == Err(SendError(6)), r)
            });
            waiter!(thread "thread Select::ready send", s_tx, |tx| {
                let mut sel = Select::new();
                let i = sel.send(&tx);
                let got = sel.ready();
                check(got == i, got)
            });
        }
        drop(report);

        std::thread::sleep(Duration::from_millis(100));
        if let Ok((label, r)) = reports.try_recv() {
            panic!("cap {cap:?}: {label} returned before the channel closed: {r:?}");
        }
        match how {
            Disconnect::Close => {
                assert!(r_tx.close());
                assert!(s_rx.close());
            }
            Disconnect::DropEnds => {
                drop(r_tx);
                drop(s_rx);
            }
        }
        let mut failures = vec![];
        for _ in 0..expected {
            match reports.recv_timeout(Duration::from_secs(5)) {
                Ok((label, Ok(()))) => {
                    let _ = label;
                }
                Ok((label, Err(e))) => failures.push(format!("{label}: got {e}")),
                Err(_) => {
                    failures.push("some waiters never woke (hang)".to_string());
                    break;
                }
            }
        }
        assert!(failures.is_empty(), "cap {cap:?}, {how:?}: {failures:#?}");
        drop((r_rx, s_tx));
    })
}

#[test]
fn close_wakes_every_waiter_rendezvous() {
    every_waiter_wakes(Some(0), Disconnect::Close);
}

#[test]
fn close_wakes_every_waiter_bounded_1() {
    every_waiter_wakes(Some(1), Disconnect::Close);
}

#[test]
fn close_wakes_every_waiter_unbounded() {
    every_waiter_wakes(None, Disconnect::Close);
}

#[test]
fn dropping_the_last_end_wakes_every_waiter_rendezvous() {
    every_waiter_wakes(Some(0), Disconnect::DropEnds);
}

#[test]
fn dropping_the_last_end_wakes_every_waiter_bounded_1() {
    every_waiter_wakes(Some(1), Disconnect::DropEnds);
}

#[test]
fn dropping_the_last_end_wakes_every_waiter_unbounded() {
    every_waiter_wakes(None, Disconnect::DropEnds);
}

/// A sender parked on a rendezvous channel when it closes gets its value back, and
/// the receiver then sees the channel disconnected (the value was never taken).
#[test]
fn close_hands_a_parked_rendezvous_sender_its_value() {
    watchdog(10, || {
        let (tx, rx) = chan::bounded::<i32>(0);
        let t = {
            let tx = tx.clone();
            std::thread::spawn(move || tx.send_blocking(42))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished());
        assert!(rx.close());
        assert_eq!(t.join().unwrap(), Err(SendError(42)));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        drop(tx);
    })
}

// ---------------------------------------------------------------------------------
// dropping ends
// ---------------------------------------------------------------------------------

#[test]
fn dropping_all_receivers_drops_buffered_values() {
    for cap in [Some(8), Some(16), None] {
        let drops = Drops::new(6);
        let (tx, rx) = make::<Tracked>(cap);
        for id in 0..5 {
            tx.send_blocking(drops.make(id)).unwrap();
        }
        let rx2 = rx.clone();
        drop(rx);
        assert_eq!(
            drops.total(),
            0,
            "cap {cap:?}: dropped with a receiver left"
        );
        assert!(!tx.is_closed());
        drop(rx2);
        assert_eq!(
            drops.total(),
            5,
            "cap {cap:?}: the buffered values were not dropped with the last receiver"
        );
        assert!(tx.is_closed());
        let back = tx.send_blocking(drops.make(5)).unwrap_err().into_inner();
        assert_eq!(back.id, 5);
        assert_eq!(drops.get(5), 0);
        drop(back);
        drop(tx);
        for id in 0..6 {
            assert_eq!(drops.get(id), 1, "cap {cap:?}: value {id}");
        }
    }
}

#[test]
fn dropping_all_senders_keeps_buffered_values_for_receivers() {
    for cap in [Some(8), None] {
        let drops = Drops::new(5);
        let (tx, rx) = make::<Tracked>(cap);
        for id in 0..5 {
            tx.send_blocking(drops.make(id)).unwrap();
        }
        drop(tx.clone());
        drop(tx);
        assert!(rx.is_closed());
        assert_eq!(drops.total(), 0);
        let ids: Vec<usize> = rx.iter().map(|v| v.id).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        assert_eq!(drops.total(), 5);
    }
}

/// A value whose `Drop` panics.
struct Bomb {
    id: usize,
    explode: bool,
    drops: Arc<Vec<AtomicUsize>>,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, SeqCst);
        if self.explode {
            panic!("bomb {} went off", self.id);
        }
    }
}

/// If dropping a buffered message panics while the channel is dropped, the messages
/// after it are leaked, never dropped twice (and the ones before it were dropped once).
#[test]
fn a_panicking_drop_leaks_the_rest_never_drops_twice() {
    for cap in [Some(8), None] {
        for senders_first in [true, false] {
            let drops: Arc<Vec<AtomicUsize>> =
                Arc::new((0..6).map(|_| AtomicUsize::new(0)).collect());
            let (tx, rx) = make::<Bomb>(cap);
            for id in 0..5 {
                tx.send_blocking(Bomb {
                    id,
                    explode: id == 2,
                    drops: drops.clone(),
                })
                .unwrap();
            }
            let tx = if senders_first {
                drop(tx);
                None
            } else {
                Some(tx)
            };
            let r = catch_unwind(AssertUnwindSafe(move || drop(rx)));
            assert!(r.is_err(), "the bomb's panic did not propagate");
            let counts: Vec<usize> = drops.iter().map(|c| c.load(SeqCst)).collect();
            assert_eq!(
                &counts[..5],
                &[1, 1, 1, 0, 0],
                "cap {cap:?}, senders_first {senders_first}: drop counts"
            );
            if let Some(tx) = tx {
                // The channel is disconnected and the sender still works.
                assert!(tx.is_closed());
                let back = tx
                    .send_blocking(Bomb {
                        id: 5,
                        explode: false,
                        drops: drops.clone(),
                    })
                    .unwrap_err();
                drop(back);
                drop(tx);
            }
            let counts: Vec<usize> = drops.iter().map(|c| c.load(SeqCst)).collect();
            assert!(
                counts.iter().all(|&c| c <= 1),
                "a value dropped twice: {counts:?}"
            );
            assert_eq!(
                &counts[..5],
                &[1, 1, 1, 0, 0],
                "later drops touched leaked values"
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// bounded(0): try_send / try_recv
// ---------------------------------------------------------------------------------

/// Retries `f` every millisecond, at most `tries` times, until it returns `Some`.
fn retry<T>(tries: usize, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..tries {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
fn rendezvous_without_a_partner_stores_nothing() {
    let (tx, rx) = chan::bounded::<i32>(0);
    assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(tx.len(), 0);
    assert!(rx.is_empty());
    assert!(tx.is_full() && rx.is_full());
    assert_eq!(tx.capacity(), Some(0));
    assert_eq!(
        tx.send_timeout(2, Duration::from_millis(10)),
        Err(SendTimeoutError::Timeout(2))
    );
    assert_eq!(
        rx.try_recv(),
        Err(TryRecvError::Empty),
        "a timed-out send stored its value"
    );
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(10)),
        Err(RecvTimeoutError::Timeout)
    );
    assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
}

/// `try_send` on bounded(0) succeeds when a receiver is parked, in any context.
#[test]
fn rendezvous_try_send_succeeds_with_a_parked_receiver() {
    watchdog(15, || {
        let rt = rt2();
        type Start = Box<
            dyn FnOnce(Receiver<i32>) -> Box<dyn FnOnce() -> Result<i32, RecvError> + Send> + Send,
        >;
        let thread: Start = Box::new(|rx| {
            let h = std::thread::spawn(move || rx.recv_blocking());
            Box::new(move || h.join().unwrap())
        });
        let rt_fiber = rt.handle().clone();
        let fiber: Start = Box::new(move |rx| {
            let h = rt_fiber
                .block_on(async move { Some(weft::fiber::spawn(move || rx.recv_blocking())) })
                .unwrap();
            Box::new(move || join_within(h, 5).unwrap())
        });
        let rt_task = rt.handle().clone();
        let task: Start = Box::new(move |rx| {
            let h = rt_task.spawn(async move { rx.recv().await });
            Box::new(move || join_within(h, 5).unwrap())
        });
        let select: Start = Box::new(|rx| {
            let h = std::thread::spawn(move || {
                let mut sel = Select::new();
                sel.recv(&rx);
                sel.select().recv(&rx)
            });
            Box::new(move || h.join().unwrap())
        });
        for (name, start) in [
            ("thread", thread),
            ("fiber", fiber),
            ("task", task),
            ("select", select),
        ] {
            let (tx, rx) = chan::bounded::<i32>(0);
            let join = start(rx.clone());
            let sent = retry(3000, || tx.try_send(7).ok());
            assert!(
                sent.is_some(),
                "{name}: try_send never succeeded with a parked receiver"
            );
            assert_eq!(join(), Ok(7), "{name}");
            assert_eq!(
                tx.try_send(8),
                Err(TrySendError::Full(8)),
                "{name}: no partner left"
            );
        }
    })
}

/// `try_recv` on bounded(0) succeeds when a sender is parked, in any context.
#[test]
fn rendezvous_try_recv_succeeds_with_a_parked_sender() {
    watchdog(15, || {
        let rt = rt2();
        let (tx, rx) = chan::bounded::<i32>(0);
        let t = {
            let tx = tx.clone();
            std::thread::spawn(move || tx.send_blocking(1))
        };
        let f = {
            let tx = tx.clone();
            fiber_on(&rt, move || tx.send_blocking(2))
        };
        let a = {
            let tx = tx.clone();
            rt.spawn(async move { tx.send(3).await })
        };
        let mut got = vec![];
        for _ in 0..3 {
            got.push(retry(3000, || rx.try_recv().ok()).expect("try_recv never succeeded"));
        }
        got.sort();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(t.join().unwrap(), Ok(()));
        assert_eq!(join_within(f, 5).unwrap(), Ok(()));
        assert_eq!(join_within(a, 5).unwrap(), Ok(()));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        drop(tx);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    })
}

/// A rendezvous send completes only when a receiver takes the value.
#[test]
fn rendezvous_send_waits_for_the_receiver() {
    watchdog(10, || {
        let (tx, rx) = chan::bounded::<i32>(0);
        let t = std::thread::spawn(move || tx.send_blocking(5));
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !t.is_finished(),
            "a rendezvous send completed with no receiver"
        );
        assert_eq!(rx.len(), 0);
        assert_eq!(rx.recv_blocking(), Ok(5));
        assert_eq!(t.join().unwrap(), Ok(()));
    })
}

// ---------------------------------------------------------------------------------
// API shape
// ---------------------------------------------------------------------------------

#[allow(dead_code)]
fn traits_of_the_ends<T: Send>() {
    fn ends<E: Send + Sync + Clone + UnwindSafe + RefUnwindSafe>() {}
    ends::<Sender<T>>();
    ends::<Receiver<T>>();
    fn stream<S: Stream + Unpin>() {}
    stream::<Receiver<T>>();
    fn iters<I: IntoIterator>() {}
    iters::<Receiver<T>>();
    iters::<&Receiver<T>>();
}

#[allow(dead_code)]
fn futures_are_send_and_sync<T: Send>(tx: &Sender<T>, rx: &Receiver<T>, v: T) {
    is_send_sync(&tx.send(v));
    is_send_sync(&rx.recv());
}

#[allow(dead_code)]
fn select_is_clone_send_sync(sel: &mut Select<'_>) {
    fn css<S: Clone + Send + Sync>(_: &S) {}
    css(sel);
    is_send(&sel.select_async());
}

#[allow(dead_code)]
fn errors<T: Clone + PartialEq + Send + Sync + 'static>() {
    fn e<
        E: std::fmt::Debug
            + std::fmt::Display
            + std::error::Error
            + Clone
            + PartialEq
            + Send
            + Sync
            + 'static,
    >() {
    }
    e::<SendError<T>>();
    e::<TrySendError<T>>();
    e::<SendTimeoutError<T>>();
    e::<RecvError>();
    e::<TryRecvError>();
    e::<RecvTimeoutError>();
    fn e2<E: std::fmt::Debug + std::fmt::Display + std::error::Error + Send + Sync + 'static>() {}
    e2::<TrySelectError>();
    e2::<SelectTimeoutError>();
    e2::<TryReadyError>();
    e2::<ReadyTimeoutError>();
    // Debug and Error even when `T` is neither Debug nor Clone (as crossbeam's).
    struct Opaque;
    fn d<E: std::fmt::Debug + std::error::Error + Send>() {}
    d::<SendError<Opaque>>();
    d::<TrySendError<Opaque>>();
    d::<SendTimeoutError<Opaque>>();
}

#[test]
fn errors_give_values_back_and_describe_themselves() {
    assert_eq!(SendError(1).into_inner(), 1);
    assert_eq!(TrySendError::Full(2).into_inner(), 2);
    assert_eq!(TrySendError::Disconnected(3).into_inner(), 3);
    assert_eq!(SendTimeoutError::Timeout(4).into_inner(), 4);
    assert_eq!(SendTimeoutError::Disconnected(5).into_inner(), 5);
    assert!(TrySendError::Full(0).is_full() && !TrySendError::Full(0).is_disconnected());
    assert!(TrySendError::Disconnected(0).is_disconnected());
    assert!(SendTimeoutError::Timeout(0).is_timeout());
    assert!(SendTimeoutError::Disconnected(0).is_disconnected());
    assert!(TryRecvError::Empty.is_empty() && TryRecvError::Disconnected.is_disconnected());
    assert!(RecvTimeoutError::Timeout.is_timeout());
    assert!(RecvTimeoutError::Disconnected.is_disconnected());
    assert_eq!(
        TrySendError::from(SendError(6)),
        TrySendError::Disconnected(6)
    );
    assert_eq!(
        SendTimeoutError::from(SendError(7)),
        SendTimeoutError::Disconnected(7)
    );
    assert_eq!(TryRecvError::from(RecvError), TryRecvError::Disconnected);
    assert_eq!(
        RecvTimeoutError::from(RecvError),
        RecvTimeoutError::Disconnected
    );
    let e = TrySendError::Full(String::from("x"));
    assert_eq!(e.clone(), e);
    let shown: Vec<String> = vec![
        SendError(1).to_string(),
        TrySendError::Full(1).to_string(),
        TrySendError::Disconnected(1).to_string(),
        SendTimeoutError::Timeout(1).to_string(),
        SendTimeoutError::Disconnected(1).to_string(),
        RecvError.to_string(),
        TryRecvError::Empty.to_string(),
        TryRecvError::Disconnected.to_string(),
        RecvTimeoutError::Timeout.to_string(),
        RecvTimeoutError::Disconnected.to_string(),
        TrySelectError.to_string(),
        SelectTimeoutError.to_string(),
        TryReadyError.to_string(),
        ReadyTimeoutError.to_string(),
    ];
    for s in &shown {
        assert!(!s.is_empty());
    }
    assert_ne!(
        TrySendError::Full(1).to_string(),
        TrySendError::Disconnected(1).to_string()
    );
    // Debug hides the value (crossbeam prints `Full(..)`), but names the variant.
    assert!(format!("{:?}", TrySendError::Full(1)).contains("Full"));
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(SendError(1));
    assert!(!boxed.to_string().is_empty());
}

#[test]
fn iterators() {
    let (tx, rx) = chan::unbounded::<i32>();
    for i in 0..3 {
        tx.send_blocking(i).unwrap();
    }
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(
        rx.try_iter().next(),
        None,
        "try_iter waited or made something up"
    );
    for i in 3..6 {
        tx.send_blocking(i).unwrap();
    }
    let mut seen = vec![];
    for v in &rx {
        seen.push(v);
        if v == 5 {
            break;
        }
    }
    assert_eq!(seen, [3, 4, 5]);
    let t = std::thread::spawn(move || {
        for i in 6..9 {
            tx.send_blocking(i).unwrap();
        }
    });
    let rest: Vec<i32> = rx.into_iter().collect();
    assert_eq!(rest, [6, 7, 8], "IntoIter ends when the senders are gone");
    t.join().unwrap();
}

#[test]
fn inspection_methods() {
    let (tx, rx) = chan::bounded::<i32>(2);
    assert_eq!((tx.capacity(), rx.capacity()), (Some(2), Some(2)));
    assert!(tx.is_empty() && rx.is_empty() && !tx.is_full() && !rx.is_full());
    tx.send_blocking(1).unwrap();
    assert_eq!((tx.len(), rx.len()), (1, 1));
    assert!(!tx.is_empty() && !tx.is_full());
    tx.send_blocking(2).unwrap();
    assert!(tx.is_full() && rx.is_full());
    assert_eq!(tx.len(), 2);
    rx.try_recv().unwrap();
    assert_eq!(rx.len(), 1);

    let (utx, urx) = chan::unbounded::<i32>();
    assert_eq!((utx.capacity(), urx.capacity()), (None, None));
    for i in 0..100 {
        utx.send_blocking(i).unwrap();
    }
    assert_eq!(urx.len(), 100);
    assert!(!utx.is_full());

    assert!(tx.same_channel(&tx.clone()));
    assert!(rx.same_channel(&rx.clone()));
    assert!(!tx.same_channel(&chan::bounded(2).0));
    assert!(!rx.same_channel(&chan::bounded(2).1));
    let never = chan::never::<i32>();
    assert!(never.same_channel(&never.clone()));
    assert!(!never.same_channel(&rx));
    assert_eq!(never.capacity(), Some(0));
    assert!(never.is_empty());
    let a = chan::after(Duration::from_secs(60));
    assert!(a.same_channel(&a.clone()));
    assert!(!a.same_channel(&chan::after(Duration::from_secs(60))));
    assert_eq!(a.capacity(), Some(1));
    assert!(a.is_empty() && !a.is_closed());
    assert_eq!(format!("{tx:?}"), "Sender { .. }");
    assert_eq!(format!("{rx:?}"), "Receiver { .. }");
}

// ---------------------------------------------------------------------------------
// Stream
// ---------------------------------------------------------------------------------

fn next<S: Stream + Unpin>(s: &mut S) -> impl Future<Output = Option<S::Item>> + '_ {
    std::future::poll_fn(move |cx| Pin::new(&mut *s).poll_next(cx))
}

#[test]
fn stream_yields_every_value_then_ends() {
    watchdog(10, || {
        let rt = rt2();
        for cap in FLAVOURS {
            let (tx, mut rx) = make::<u32>(cap);
            let t = std::thread::spawn(move || {
                for i in 0..500 {
                    tx.send_blocking(i).unwrap();
                }
            });
            let got = rt.block_on(async move {
                let mut got = vec![];
                while let Some(v) = next(&mut rx).await {
                    got.push(v);
                }
                got
            });
            t.join().unwrap();
            assert_eq!(got, (0..500).collect::<Vec<_>>(), "cap {cap:?}");
        }
        // On a plain thread, driven by `weft::wait`.
        let (tx, mut rx) = chan::bounded::<u32>(0);
        let t = std::thread::spawn(move || {
            for i in 0..100 {
                tx.send_blocking(i).unwrap();
            }
        });
        let mut got = vec![];
        while let Some(v) = weft::wait(next(&mut rx)) {
            got.push(v);
        }
        t.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    })
}

/// A receiver dropped while its stream has a receive registered gives a value handed
/// to that receive back to the channel.
#[test]
fn stream_receiver_dropped_mid_receive_gives_the_value_back() {
    let (tx, rx) = chan::unbounded::<u32>();
    let mut rx1 = rx.clone();
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(Pin::new(&mut rx1).poll_next(&mut cx), Poll::Pending);
    tx.send_blocking(9).unwrap();
    drop(rx1);
    assert_eq!(
        rx.try_recv(),
        Ok(9),
        "the value handed to the dropped stream was lost"
    );
}

const CHILD: &str = "WEFT_CHAN_SEMANTICS_CHILD";

/// Runs a case in a child process (it may crash the process: a crash must fail one
/// test, not the whole binary).
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "stream_repoll" => child_stream_repoll(),
        "stream_timeout_loop" => child_stream_timeout_loop(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str) {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, case)],
        Duration::from_secs(10),
    );
    out.assert_finished();
}

/// Polling the stream again while it waits (a spurious poll, as any `select!` of
/// several futures makes) must keep waiting: after a value was received through the
/// stream's registered receive, the next registered receive must not mistake the old
/// hand-over for a new one.
fn child_stream_repoll() {
    let (tx, mut rx) = chan::unbounded::<i32>();
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Pending);
    tx.send_blocking(1).unwrap();
    assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Ready(Some(1)));
    assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Pending);
    assert_eq!(
        Pin::new(&mut rx).poll_next(&mut cx),
        Poll::Pending,
        "a spurious poll"
    );
    tx.send_blocking(2).unwrap();
    assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Ready(Some(2)));
}

#[test]
fn stream_spurious_poll_after_a_value_keeps_waiting() {
    run_child("stream_repoll");
}

/// The everyday form of the same: `timeout(d, stream.next())` in a loop while a
/// sender is slow; every value arrives once.
fn child_stream_timeout_loop() {
    let rt = rt2();
    let (tx, mut rx) = chan::unbounded::<u32>();
    let t = std::thread::spawn(move || {
        for i in 0..50 {
            std::thread::sleep(Duration::from_millis(2));
            tx.send_blocking(i).unwrap();
        }
    });
    let got = rt.block_on(async move {
        let mut got = vec![];
        loop {
            match weft::time::timeout(Duration::from_millis(1), next(&mut rx)).await {
                Ok(Some(v)) => got.push(v),
                Ok(None) => break,
                Err(_) => {}
            }
        }
        got
    });
    t.join().unwrap();
    assert_eq!(got, (0..50).collect::<Vec<_>>());
}

#[test]
fn stream_next_under_a_timeout_loses_nothing() {
    run_child("stream_timeout_loop");
}

// ---------------------------------------------------------------------------------
// values dropped by the channel run their Drop outside its lock
// ---------------------------------------------------------------------------------

/// A value whose `Drop` uses the channel it travels on (takes its lock).
struct UsesChannel {
    chan: Arc<std::sync::OnceLock<Sender<UsesChannel>>>,
    drops: Arc<AtomicUsize>,
}

impl Drop for UsesChannel {
    fn drop(&mut self) {
        if let Some(tx) = self.chan.get() {
            let _ = tx.len();
            let _ = tx.is_full();
        }
        self.drops.fetch_add(1, SeqCst);
    }
}

/// Values the channel drops itself (the buffer when the last receiver goes, the value
/// of a cancelled send, a value given back by a cancelled receive with no receiver
/// left) are dropped after its lock is released: a `Drop` that uses the channel does
/// not deadlock.
#[test]
fn values_dropped_by_the_channel_may_use_it_in_their_drop() {
    watchdog(10, || {
        for cap in [Some(1), Some(4), None] {
            let cell = Arc::new(std::sync::OnceLock::new());
            let drops = Arc::new(AtomicUsize::new(0));
            let (tx, rx) = make::<UsesChannel>(cap);
            cell.set(tx.clone()).ok().unwrap();
            let v = || UsesChannel {
                chan: cell.clone(),
                drops: drops.clone(),
            };
            tx.send_blocking(v()).unwrap();
            if cap == Some(1) {
                // A send registered on the full channel, then dropped.
                let mut fut = Box::pin(tx.send(v()));
                assert!(poll_once(fut.as_mut()).is_none());
                drop(fut);
                assert_eq!(drops.load(SeqCst), 1, "cap {cap:?}: cancelled send");
            }
            let before = drops.load(SeqCst);
            drop(rx); // drops the buffered value
            assert_eq!(drops.load(SeqCst), before + 1, "cap {cap:?}: buffer");
            drop(tx);
        }
    })
}

// ---------------------------------------------------------------------------------
// timer receivers in every context
// ---------------------------------------------------------------------------------

#[test]
fn timer_receivers_in_tasks_and_fibers() {
    watchdog(10, || {
        let rt = rt2();
        let start = std::time::Instant::now();
        let (a, t1, t2, never) = rt.block_on(async {
            let a = chan::after(Duration::from_millis(20)).recv().await.unwrap();
            let tick = chan::tick(Duration::from_millis(5));
            let t1 = tick.recv().await.unwrap();
            let t2 = tick.recv().await.unwrap();
            let never = weft::time::timeout(Duration::from_millis(10), chan::never::<u8>().recv())
                .await
                .is_err();
            (a, t1, t2, never)
        });
        assert!(a >= start + Duration::from_millis(20));
        assert!(t2 > t1 && t1 > a);
        assert!(never, "never delivered");
        let f = fiber_on(&rt, || {
            let start = std::time::Instant::now();
            let a = chan::after(Duration::from_millis(20))
                .recv_blocking()
                .unwrap();
            assert!(a >= start + Duration::from_millis(20));
            let r = chan::after(Duration::from_millis(10)).recv_timeout(Duration::from_secs(5));
            assert!(r.is_ok(), "{r:?}");
            let r = chan::after(Duration::from_secs(60)).recv_timeout(Duration::from_millis(10));
            assert_eq!(r, Err(RecvTimeoutError::Timeout));
            let tick = chan::tick(Duration::from_millis(5));
            tick.iter().take(3).count()
        });
        assert_eq!(join_within(f, 5).unwrap(), 3);
    })
}

// ---------------------------------------------------------------------------------
// send and receive futures polled by hand, first poll and after
// ---------------------------------------------------------------------------------

/// A send or receive that completes at its first poll takes the fast path (no wait
/// node); one that must wait makes its node then and completes at a later poll once
/// its partner came. A send future polled again after completing panics, as tokio's
/// futures may.
#[test]
fn futures_complete_at_first_poll_or_after_waiting() {
    let mut cx = Context::from_waker(Waker::noop());
    let (tx, rx) = chan::bounded::<String>(1);
    let mut first = Box::pin(tx.send("a".to_string()));
    assert_eq!(first.as_mut().poll(&mut cx), Poll::Ready(Ok(())));
    // Full: the second send waits, holding its value.
    let mut second = Box::pin(tx.send("b".to_string()));
    assert!(second.as_mut().poll(&mut cx).is_pending());
    assert_eq!(tx.len(), 1);
    // The receive frees the slot and moves the waiting value in.
    assert_eq!(rx.try_recv().as_deref(), Ok("a"));
    assert_eq!(second.as_mut().poll(&mut cx), Poll::Ready(Ok(())));
    assert_eq!(rx.try_recv().as_deref(), Ok("b"));
    let again = catch_unwind(AssertUnwindSafe(|| first.as_mut().poll(&mut cx)));
    assert!(again.is_err(), "a completed send polled again");

    // A receive that waits gets the value sent after its first poll; one dropped
    // unpolled takes nothing.
    let mut recv = Box::pin(rx.recv());
    assert!(recv.as_mut().poll(&mut cx).is_pending());
    drop(rx.recv());
    tx.try_send("c".to_string()).unwrap();
    assert_eq!(
        recv.as_mut().poll(&mut cx),
        Poll::Ready(Ok("c".to_string()))
    );
    tx.try_send("d".to_string()).unwrap();
    drop(rx.recv());
    assert_eq!(rx.try_recv().as_deref(), Ok("d"));

    // Dropped while waiting, a send gives its value back to nobody: it is dropped,
    // never delivered.
    tx.try_send("e".to_string()).unwrap();
    let mut waiting = Box::pin(tx.send("f".to_string()));
    assert!(waiting.as_mut().poll(&mut cx).is_pending());
    drop(waiting);
    assert_eq!(rx.try_recv().as_deref(), Ok("e"));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
}
