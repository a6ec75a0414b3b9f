//! Review s43, channels, third round: cancellation at the instant of completion,
//! iterators, disconnection with values queued, rendezvous in mixed contexts, select
//! over one channel twice, Send/Sync bounds.
mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{join_within, watchdog};
use weft::chan::{self, Receiver, Select, Sender};

/// A value that records every drop of its id, so a test sees a loss (never dropped)
/// or a duplicate (dropped twice).
struct Val {
    id: usize,
    drops: Arc<Mutex<Vec<usize>>>,
}

impl Drop for Val {
    fn drop(&mut self) {
        self.drops.lock().unwrap().push(self.id);
    }
}

fn drops() -> Arc<Mutex<Vec<usize>>> {
    Arc::new(Mutex::new(Vec::new()))
}

fn val(id: usize, d: &Arc<Mutex<Vec<usize>>>) -> Val {
    Val {
        id,
        drops: d.clone(),
    }
}

/// Every id in `0..n` dropped exactly once.
fn check_each_dropped_once(d: &Mutex<Vec<usize>>, n: usize, what: &str) {
    let mut v = d.lock().unwrap().clone();
    v.sort_unstable();
    let want: Vec<usize> = (0..n).collect();
    assert_eq!(v, want, "{what}: drops (sorted) are not each id once");
}

fn poll_noop<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

fn flavours() -> Vec<(&'static str, Option<usize>)> {
    vec![
        ("rendezvous", Some(0)),
        ("bounded(1)", Some(1)),
        ("bounded(3)", Some(3)),
        ("list-bounded", Some((1 << 20) + 1)),
        ("unbounded", None),
    ]
}

fn make<T>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    match cap {
        Some(c) => chan::bounded(c),
        None => chan::unbounded(),
    }
}

// ---- Send / Sync ----

/// `IMPLS` is `true` through the inherent impl when `T: Send`, else the trait's.
struct IsSend<T: ?Sized>(std::marker::PhantomData<T>);
struct IsSync<T: ?Sized>(std::marker::PhantomData<T>);
trait NotImpl {
    const IMPLS: bool = false;
}
impl<T: ?Sized> NotImpl for IsSend<T> {}
impl<T: ?Sized> NotImpl for IsSync<T> {}
impl<T: ?Sized + Send> IsSend<T> {
    const IMPLS: bool = true;
}
impl<T: ?Sized + Sync> IsSync<T> {
    const IMPLS: bool = true;
}

#[test]
fn ends_iterators_and_futures_are_send_only_for_send_values() {
    type Rc = std::rc::Rc<u8>;
    type Cell = std::cell::Cell<u8>;
    let checks = [
        // A channel of `!Send` values must not cross threads.
        (
            stringify!(IsSend::<Sender<Rc>>::IMPLS),
            IsSend::<Sender<Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSync::<Sender<Rc>>::IMPLS),
            IsSync::<Sender<Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<Receiver<Rc>>::IMPLS),
            IsSend::<Receiver<Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSync::<Receiver<Rc>>::IMPLS),
            IsSync::<Receiver<Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<chan::IntoIter<Rc>>::IMPLS),
            IsSend::<chan::IntoIter<Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<chan::Iter<'static, Rc>>::IMPLS),
            IsSend::<chan::Iter<'static, Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<chan::TryIter<'static, Rc>>::IMPLS),
            IsSend::<chan::TryIter<'static, Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<chan::SendFuture<'static, Rc>>::IMPLS),
            IsSend::<chan::SendFuture<'static, Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSync::<chan::SendFuture<'static, Rc>>::IMPLS),
            IsSync::<chan::SendFuture<'static, Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<chan::RecvFuture<'static, Rc>>::IMPLS),
            IsSend::<chan::RecvFuture<'static, Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSync::<chan::RecvFuture<'static, Rc>>::IMPLS),
            IsSync::<chan::RecvFuture<'static, Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<chan::SendError<Rc>>::IMPLS),
            IsSend::<chan::SendError<Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<chan::OrderedSender<Rc>>::IMPLS),
            IsSend::<chan::OrderedSender<Rc>>::IMPLS,
            false,
        ),
        (
            stringify!(IsSend::<chan::OrderedReceiver<Rc>>::IMPLS),
            IsSend::<chan::OrderedReceiver<Rc>>::IMPLS,
            false,
        ),
        // `Send + !Sync` values: the ends are `Send + Sync`, as crossbeam's.
        (
            stringify!(IsSend::<Sender<Cell>>::IMPLS),
            IsSend::<Sender<Cell>>::IMPLS,
            true,
        ),
        (
            stringify!(IsSync::<Sender<Cell>>::IMPLS),
            IsSync::<Sender<Cell>>::IMPLS,
            true,
        ),
        (
            stringify!(IsSend::<Receiver<Cell>>::IMPLS),
            IsSend::<Receiver<Cell>>::IMPLS,
            true,
        ),
        (
            stringify!(IsSync::<Receiver<Cell>>::IMPLS),
            IsSync::<Receiver<Cell>>::IMPLS,
            true,
        ),
        (
            stringify!(IsSend::<chan::IntoIter<Cell>>::IMPLS),
            IsSend::<chan::IntoIter<Cell>>::IMPLS,
            true,
        ),
        (
            stringify!(IsSend::<chan::Iter<'static, Cell>>::IMPLS),
            IsSend::<chan::Iter<'static, Cell>>::IMPLS,
            true,
        ),
        (
            stringify!(IsSend::<chan::SendFuture<'static, Cell>>::IMPLS),
            IsSend::<chan::SendFuture<'static, Cell>>::IMPLS,
            true,
        ),
        (
            stringify!(IsSend::<chan::RecvFuture<'static, Cell>>::IMPLS),
            IsSend::<chan::RecvFuture<'static, Cell>>::IMPLS,
            true,
        ),
    ];
    for (what, got, want) in checks {
        assert_eq!(got, want, "{what}");
    }
}

// ---- iterators ----

#[test]
fn try_iter_takes_values_of_senders_waiting_on_a_rendezvous_channel() {
    watchdog(30, || {
        let (tx, rx) = chan::bounded::<usize>(0);
        let sent = Arc::new(AtomicUsize::new(0));
        let s = sent.clone();
        let t = std::thread::spawn(move || {
            for i in 0..20 {
                tx.send_blocking(i).unwrap();
                s.fetch_add(1, SeqCst);
            }
        });
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(20);
        while got.len() < 20 {
            assert!(Instant::now() < end, "hang: got only {got:?}");
            got.extend(rx.try_iter());
            std::thread::sleep(Duration::from_millis(1));
        }
        t.join().unwrap();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
        // Everything sent and the sender gone: the iterators end at once.
        assert_eq!(rx.try_iter().next(), None);
        assert_eq!(rx.iter().next(), None);
        assert_eq!(rx.iter().next(), None);
    });
}

#[test]
fn iterators_drain_queued_values_after_disconnect_in_every_flavour() {
    watchdog(30, || {
        for (name, cap) in flavours() {
            if cap == Some(0) {
                continue;
            }
            let d = drops();
            let (tx, rx) = make::<Val>(cap);
            let n = cap.unwrap_or(3).min(3);
            for i in 0..n {
                tx.send_blocking(val(i, &d)).unwrap();
            }
            let tx2 = tx.clone();
            drop(tx);
            assert!(!rx.is_closed(), "{name}: a sender is left");
            drop(tx2);
            assert!(rx.is_closed(), "{name}");
            let ids: Vec<usize> = rx.iter().map(|v| v.id).collect();
            assert_eq!(ids, (0..n).collect::<Vec<_>>(), "{name}");
            assert!(rx.iter().next().is_none(), "{name}: iter after its end");
            assert!(rx.try_iter().next().is_none(), "{name}");
            let ids: Vec<usize> = rx.into_iter().map(|v| v.id).collect();
            assert!(ids.is_empty(), "{name}");
            check_each_dropped_once(&d, n, name);
        }
    });
}

#[test]
fn into_iter_dropped_midway_disconnects_blocked_senders_and_drops_the_rest() {
    watchdog(30, || {
        for (name, cap) in flavours() {
            if cap.is_none() {
                continue;
            }
            let d = drops();
            let (tx, rx) = make::<Val>(cap);
            let d2 = d.clone();
            let sender = std::thread::spawn(move || {
                let mut back = Vec::new();
                for i in 0..10 {
                    if let Err(e) = tx.send_blocking(val(i, &d2)) {
                        back.push(e.into_inner().id);
                    }
                }
                back
            });
            let mut it = rx.into_iter();
            let first: Vec<usize> = it.by_ref().take(2).map(|v| v.id).collect();
            assert_eq!(first, [0, 1], "{name}");
            drop(it);
            let back = sender.join().unwrap();
            if cap.is_some_and(|c| c < 8) {
                assert!(!back.is_empty(), "{name}: a send must have failed");
            }
            check_each_dropped_once(&d, 10, name);
        }
    });
}

// ---- disconnection with values queued ----

/// A value handed to a registered receive whose future is then dropped goes back to
/// the channel (`front`); when the last receiver goes, it is dropped with the rest,
/// once.
#[test]
fn values_given_back_are_dropped_once_at_the_last_receivers_drop() {
    watchdog(30, || {
        for (name, cap) in flavours() {
            if cap == Some(0) {
                continue;
            }
            let d = drops();
            let (tx, rx) = make::<Val>(cap);
            let rx2 = rx.clone();
            {
                let mut f = std::pin::pin!(rx2.recv());
                assert!(poll_noop(f.as_mut()).is_pending(), "{name}");
                // Handed to the waiting receive, which is dropped unpolled.
                tx.send_blocking(val(0, &d)).unwrap();
                tx.send_blocking(val(1, &d)).unwrap();
            }
            assert_eq!(rx.len(), 2, "{name}: the value went back");
            drop(rx2);
            assert!(d.lock().unwrap().is_empty(), "{name}: a receiver is left");
            drop(rx);
            check_each_dropped_once(&d, 2, name);
            assert!(tx.send_blocking(val(2, &d)).is_err(), "{name}");
            drop(tx);
            check_each_dropped_once(&d, 3, name);
        }
    });
}

#[test]
fn values_queued_when_every_end_goes_are_dropped_once() {
    watchdog(30, || {
        for (name, cap) in flavours() {
            if cap == Some(0) {
                continue;
            }
            // Receivers first, then senders.
            let d = drops();
            let (tx, rx) = make::<Val>(cap);
            let n = cap.unwrap_or(5).min(5);
            for i in 0..n {
                tx.send_blocking(val(i, &d)).unwrap();
            }
            drop(rx);
            check_each_dropped_once(&d, n, name);
            drop(tx);
            check_each_dropped_once(&d, n, name);
            // Senders first, then receivers.
            let d = drops();
            let (tx, rx) = make::<Val>(cap);
            for i in 0..n {
                tx.send_blocking(val(i, &d)).unwrap();
            }
            drop(tx);
            assert!(d.lock().unwrap().is_empty(), "{name}");
            assert_eq!(rx.recv_blocking().map(|v| v.id).ok(), Some(0), "{name}");
            drop(rx);
            check_each_dropped_once(&d, n, name);
        }
    });
}

// ---- timed waits that expire as a value arrives ----

/// Where a waiter runs.
#[derive(Clone, Copy, Debug)]
enum Ctx {
    Thread,
    Fiber,
    Task,
}

/// `n` values from a plain thread; one receiver in `ctx` with very short timeouts
/// (a few microseconds, so many expire as a value is being handed over). Every value
/// must be received exactly once, none dropped in the channel.
fn timed_receives_conserve(cap: Option<usize>, ctx: Ctx, n: usize) {
    let rt = common::workers(2);
    let d = drops();
    let (tx, rx) = make::<Val>(cap);
    let d2 = d.clone();
    let sender = std::thread::spawn(move || {
        for i in 0..n {
            tx.send_blocking(val(i, &d2)).unwrap();
            if i.is_multiple_of(7) {
                std::thread::yield_now();
            }
        }
    });
    let got: Vec<usize> = match ctx {
        Ctx::Thread | Ctx::Fiber => {
            let recv_loop = move || {
                let mut got = Vec::new();
                let mut k = 0u64;
                let end = Instant::now() + Duration::from_secs(20);
                loop {
                    assert!(Instant::now() < end, "hang: received {}", got.len());
                    k += 1;
                    match rx.recv_timeout(Duration::from_micros(k % 40)) {
                        Ok(v) => {
                            got.push(v.id);
                            std::mem::forget(v); // received: not a drop
                        }
                        Err(e) if e.is_timeout() => {}
                        Err(_) => break,
                    }
                }
                got
            };
            if let Ctx::Thread = ctx {
                recv_loop()
            } else {
                join_within(common::fiber_on(&rt, recv_loop), 25).unwrap()
            }
        }
        Ctx::Task => {
            let h = rt.spawn(async move {
                let mut got = Vec::new();
                let mut k = 0u64;
                let end = Instant::now() + Duration::from_secs(20);
                loop {
                    assert!(Instant::now() < end, "hang: received {}", got.len());
                    k += 1;
                    let t = Duration::from_micros(k % 40);
                    match weft::time::timeout(t, rx.recv()).await {
                        Ok(Ok(v)) => {
                            got.push(v.id);
                            std::mem::forget(v);
                        }
                        Ok(Err(_)) => break,
                        Err(_) => {}
                    }
                }
                got
            });
            join_within(h, 25).unwrap()
        }
    };
    sender.join().unwrap();
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..n).collect::<Vec<_>>(),
        "cap {cap:?} {ctx:?}: not every value received once"
    );
    assert_eq!(
        got, sorted,
        "cap {cap:?} {ctx:?}: one sender, one receiver: FIFO"
    );
    assert!(
        d.lock().unwrap().is_empty(),
        "cap {cap:?} {ctx:?}: values dropped in the channel: {:?}",
        d.lock().unwrap()
    );
}

#[test]
fn timed_receives_expiring_as_values_arrive_conserve_them() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            for ctx in [Ctx::Thread, Ctx::Fiber, Ctx::Task] {
                timed_receives_conserve(cap, ctx, 1500);
            }
        }
    });
}

/// `n` values sent with very short timeouts (a timed-out value is sent again) from
/// `ctx`, against a plain receiving thread: each received exactly once, in order.
fn timed_sends_conserve(cap: Option<usize>, ctx: Ctx, n: usize) {
    let rt = common::workers(2);
    let d = drops();
    let (tx, rx) = make::<Val>(cap);
    let d2 = d.clone();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut k = 0u32;
        while let Ok(v) = rx.recv_blocking() {
            got.push(v.id);
            std::mem::forget(v);
            k += 1;
            if k.is_multiple_of(5) {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        got
    });
    let mk = move |i| val(i, &d2);
    match ctx {
        Ctx::Thread | Ctx::Fiber => {
            let send_loop = move || {
                let end = Instant::now() + Duration::from_secs(20);
                let mut k = 0u64;
                for i in 0..n {
                    let mut v = mk(i);
                    loop {
                        assert!(Instant::now() < end, "hang at {i}");
                        k += 1;
                        match tx.send_timeout(v, Duration::from_micros(k % 40)) {
                            Ok(()) => break,
                            Err(chan::SendTimeoutError::Timeout(back)) => v = back,
                            Err(chan::SendTimeoutError::Disconnected(_)) => {
                                panic!("disconnected")
                            }
                        }
                    }
                }
            };
            if let Ctx::Thread = ctx {
                send_loop()
            } else {
                join_within(common::fiber_on(&rt, send_loop), 25).unwrap()
            }
        }
        Ctx::Task => {
            let h = rt.spawn(async move {
                let end = Instant::now() + Duration::from_secs(20);
                let mut k = 0u64;
                for i in 0..n {
                    // A send future dropped by its timeout drops its value: make
                    // the value again (same id) only if it was not delivered, which
                    // the receiver's log cannot tell here; so keep it in the send by
                    // polling by hand instead.
                    let mut f = Box::pin(tx.send(mk(i)));
                    loop {
                        assert!(Instant::now() < end, "hang at {i}");
                        k += 1;
                        let t = Duration::from_micros(k % 40);
                        match weft::time::timeout(t, f.as_mut()).await {
                            Ok(r) => {
                                r.unwrap();
                                break;
                            }
                            Err(_) => weft::task::yield_now().await,
                        }
                    }
                }
            });
            join_within(h, 25).unwrap()
        }
    }
    let got = receiver.join().unwrap();
    assert_eq!(
        got,
        (0..n).collect::<Vec<_>>(),
        "cap {cap:?} {ctx:?}: each value once, in order"
    );
    assert!(d.lock().unwrap().is_empty(), "cap {cap:?} {ctx:?}");
}

#[test]
fn timed_sends_expiring_as_receivers_arrive_conserve_values() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            for ctx in [Ctx::Thread, Ctx::Fiber, Ctx::Task] {
                timed_sends_conserve(cap, ctx, 1000);
            }
        }
    });
}

// ---- waiters aborted as their counterpart completes them ----

/// A receiver (fiber or task) waits; a plain thread sends one value and aborts it at
/// once. The value ends in exactly one place: the receiver's output, or still in the
/// channel. Never dropped, never twice.
fn abort_receiver_at_handoff(cap: Option<usize>, ctx: Ctx, via_select: bool, rounds: usize) {
    let rt = common::workers(2);
    let mut outcomes = [0usize; 2];
    for round in 0..rounds {
        let d = drops();
        let (tx, rx) = make::<Val>(cap);
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let st = started.clone();
        let rx2 = rx.clone();
        let (_other_tx, other_rx) = make::<Val>(cap);
        let h: weft::JoinHandle<Option<Val>> = match ctx {
            Ctx::Fiber if via_select => common::fiber_on(&rt, move || {
                st.store(true, SeqCst);
                let mut sel = Select::new();
                sel.recv(&other_rx);
                sel.recv(&rx2);
                sel.select().recv(&rx2).ok()
            }),
            Ctx::Task if via_select => rt.spawn(async move {
                st.store(true, SeqCst);
                let mut sel = Select::new();
                sel.recv(&other_rx);
                sel.recv(&rx2);
                let op = sel.select_async().await;
                op.recv(&rx2).ok()
            }),
            Ctx::Fiber => common::fiber_on(&rt, move || {
                st.store(true, SeqCst);
                rx2.recv_blocking().ok()
            }),
            Ctx::Task => rt.spawn(async move {
                st.store(true, SeqCst);
                rx2.recv().await.ok()
            }),
            Ctx::Thread => unreachable!(),
        };
        assert!(common::wait_flag(&started, Duration::from_secs(10)));
        // Vary the moment: sometimes before it registers, mostly after.
        common::spin_for(Duration::from_micros((round % 5) as u64 * 20));
        let sender = {
            let d = d.clone();
            std::thread::spawn(move || {
                // A rendezvous send completes only with a receiver: bounded in time.
                let r = tx.send_timeout(val(round, &d), Duration::from_millis(20));
                r.map_err(|e| e.into_inner().id)
            })
        };
        common::spin_for(Duration::from_micros((round % 3) as u64 * 5));
        h.abort();
        let got = join_within(h, 20);
        let sent = sender.join().unwrap();
        let in_chan = rx.try_recv().ok();
        let out = got.as_ref().ok().and_then(|o| o.as_ref().map(|v| v.id));
        let chan_id = in_chan.as_ref().map(|v| v.id);
        match (sent, out, chan_id) {
            // Not sent (a rendezvous with nobody left): the sender got it back.
            (Err(id), None, None) => assert_eq!(id, round),
            (Ok(()), Some(id), None) => {
                assert_eq!(id, round);
                outcomes[0] += 1;
            }
            (Ok(()), None, Some(id)) => {
                assert_eq!(id, round);
                outcomes[1] += 1;
            }
            other => panic!(
                "cap {cap:?} {ctx:?} round {round}: value in the wrong places: {other:?} \
                 (join: {:?}, drops {:?})",
                got.as_ref().map(|_| ()),
                d.lock().unwrap()
            ),
        }
        drop(got);
        drop(in_chan);
        assert_eq!(
            *d.lock().unwrap(),
            [round],
            "cap {cap:?} {ctx:?}: dropped once"
        );
    }
    if std::env::var_os("S43_VERBOSE").is_some() {
        eprintln!(
            "cap {cap:?} {ctx:?}: by the receiver {}, left in the channel {}",
            outcomes[0], outcomes[1]
        );
    }
}

#[test]
fn fibers_aborted_as_a_value_is_handed_to_them_lose_nothing() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            abort_receiver_at_handoff(cap, Ctx::Fiber, false, 150);
        }
    });
}

#[test]
fn tasks_aborted_as_a_value_is_handed_to_them_lose_nothing() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            abort_receiver_at_handoff(cap, Ctx::Task, false, 150);
        }
    });
}

/// A sender (fiber or task) waits on a full channel; a plain thread receives and
/// aborts it at once. The value is received at most once; if not received, it is
/// dropped exactly once (with the cancelled send) or still in the channel.
fn abort_sender_at_handoff(cap: Option<usize>, ctx: Ctx, rounds: usize) {
    let rt = common::workers(2);
    const MARK: usize = 1_000_000;
    for round in 0..rounds {
        let d = drops();
        let (tx, rx) = make::<Val>(cap);
        // Fill the buffer with marker values.
        let fill = cap.unwrap_or(0);
        for i in 0..fill {
            tx.send_blocking(val(MARK + i, &d)).unwrap();
        }
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let st = started.clone();
        let tx2 = tx.clone();
        let v = val(round, &d);
        let h: weft::JoinHandle<bool> = match ctx {
            Ctx::Fiber => common::fiber_on(&rt, move || {
                st.store(true, SeqCst);
                tx2.send_blocking(v).is_ok()
            }),
            Ctx::Task => rt.spawn(async move {
                st.store(true, SeqCst);
                tx2.send(v).await.is_ok()
            }),
            Ctx::Thread => unreachable!(),
        };
        assert!(common::wait_flag(&started, Duration::from_secs(10)));
        common::spin_for(Duration::from_micros((round % 5) as u64 * 20));
        let mut seen = Vec::new();
        // Take the fill and (maybe) the value.
        let end = Instant::now() + Duration::from_millis(200);
        while seen.len() < fill + 1 && Instant::now() < end {
            if let Ok(v) = rx.recv_timeout(Duration::from_millis(1)) {
                seen.push(v.id);
                std::mem::forget(v);
            }
            if seen.len() == fill {
                h.abort();
            }
        }
        h.abort();
        let r = join_within(h, 20);
        drop(tx);
        while let Ok(v) = rx.try_recv() {
            seen.push(v.id);
            std::mem::forget(v);
        }
        let received = seen.iter().filter(|&&i| i == round).count();
        let dropped = d.lock().unwrap().iter().filter(|&&i| i == round).count();
        assert_eq!(
            received + dropped,
            1,
            "cap {cap:?} {ctx:?} round {round}: received {received}, dropped {dropped}, \
             join {:?}",
            r.as_ref().ok()
        );
        if let Ok(true) = r {
            assert_eq!(
                received, 1,
                "cap {cap:?} {ctx:?}: Ok send, value not received"
            );
        }
        let fills = seen.iter().filter(|&&i| i >= MARK).count();
        assert_eq!(fills, fill, "cap {cap:?} {ctx:?}");
    }
}

#[test]
fn fibers_aborted_as_their_value_is_taken_send_it_at_most_once() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            if cap.is_some_and(|c| c > 8) {
                continue;
            }
            abort_sender_at_handoff(cap, Ctx::Fiber, 150);
        }
    });
}

#[test]
fn tasks_aborted_as_their_value_is_taken_send_it_at_most_once() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            if cap.is_some_and(|c| c > 8) {
                continue;
            }
            abort_sender_at_handoff(cap, Ctx::Task, 150);
        }
    });
}

#[test]
fn selecting_fibers_aborted_as_a_value_is_handed_to_them_lose_nothing() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            abort_receiver_at_handoff(cap, Ctx::Fiber, true, 150);
        }
    });
}

#[test]
fn selecting_tasks_aborted_as_a_value_is_handed_to_them_lose_nothing() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            abort_receiver_at_handoff(cap, Ctx::Task, true, 150);
        }
    });
}

// ---- select over one channel twice ----

/// Two producer threads; a consumer in `ctx` selects over the same receiver twice
/// (and a channel nobody sends on), with short timeouts (dropping `select_async` on
/// its timeout in a task). Every value is received exactly once.
fn select_same_receiver_twice(cap: Option<usize>, ctx: Ctx, per: usize) {
    let rt = common::workers(2);
    let d = drops();
    let (tx, rx) = make::<Val>(cap);
    let (_idle_tx, idle_rx) = make::<Val>(cap);
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let tx = tx.clone();
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    tx.send_blocking(val(p * per + i, &d)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consume = |rx: Receiver<Val>, idle_rx: Receiver<Val>| {
        let mut got = Vec::new();
        let mut k = 0u64;
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < end, "hang: received {}", got.len());
            k += 1;
            let mut sel = Select::new();
            let a = sel.recv(&rx);
            let z = sel.recv(&idle_rx);
            let b = sel.recv(&rx);
            let Ok(op) = sel.select_timeout(Duration::from_micros(k % 50)) else {
                continue;
            };
            let i = op.index();
            assert!(
                i == a || i == b,
                "selected {i}, not one of the ops on rx ({z})"
            );
            match op.recv(&rx) {
                Ok(v) => {
                    got.push(v.id);
                    std::mem::forget(v);
                }
                Err(_) => break,
            }
        }
        got
    };
    let got = match ctx {
        Ctx::Thread => consume(rx, idle_rx),
        Ctx::Fiber => join_within(common::fiber_on(&rt, move || consume(rx, idle_rx)), 25).unwrap(),
        Ctx::Task => {
            let h = rt.spawn(async move {
                let mut got = Vec::new();
                let mut k = 0u64;
                let end = Instant::now() + Duration::from_secs(20);
                loop {
                    assert!(Instant::now() < end, "hang: received {}", got.len());
                    k += 1;
                    let mut sel = Select::new();
                    sel.recv(&rx);
                    sel.recv(&idle_rx);
                    sel.recv(&rx);
                    let t = Duration::from_micros(k % 50);
                    let Ok(op) = weft::time::timeout(t, sel.select_async()).await else {
                        continue;
                    };
                    match op.recv(&rx) {
                        Ok(v) => {
                            got.push(v.id);
                            std::mem::forget(v);
                        }
                        Err(_) => break,
                    }
                }
                got
            });
            join_within(h, 25).unwrap()
        }
    };
    for p in producers {
        p.join().unwrap();
    }
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..2 * per).collect::<Vec<_>>(),
        "cap {cap:?} {ctx:?}: each value once"
    );
    assert!(
        d.lock().unwrap().is_empty(),
        "cap {cap:?} {ctx:?}: dropped in the channel"
    );
}

#[test]
fn selects_over_one_receiver_twice_receive_each_value_once() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            for ctx in [Ctx::Thread, Ctx::Fiber, Ctx::Task] {
                select_same_receiver_twice(cap, ctx, 400);
            }
        }
    });
}

/// A selector in `ctx` sends each value through a select holding the same sender
/// twice (and a send on a channel nobody receives from, kept full); receivers are a
/// plain thread with short timeouts and a fiber. Each value arrives exactly once.
fn select_same_sender_twice(cap: Option<usize>, ctx: Ctx, n: usize) {
    let rt = common::workers(2);
    let d = drops();
    let (tx, rx) = make::<Val>(cap);
    // A full channel nobody receives from: its send never proceeds.
    let (full_tx, _full_rx) = chan::bounded::<Val>(1);
    full_tx.send_blocking(val(usize::MAX, &drops())).unwrap();
    let rx2 = rx.clone();
    let thread_rx = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut k = 0u64;
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < end, "hang");
            k += 1;
            match rx2.recv_timeout(Duration::from_micros(k % 30)) {
                Ok(v) => {
                    got.push(v.id);
                    std::mem::forget(v);
                }
                Err(e) if e.is_timeout() => {}
                Err(_) => break,
            }
        }
        got
    });
    let rx3 = rx.clone();
    let fiber_rx = common::fiber_on(&rt, move || {
        let mut got = Vec::new();
        while let Ok(v) = rx3.recv_blocking() {
            got.push(v.id);
            std::mem::forget(v);
        }
        got
    });
    drop(rx);
    let d2 = d.clone();
    let produce = move || {
        // Owned by the call: the receivers see the end when it returns.
        let (tx, full_tx) = (tx, full_tx);
        let end = Instant::now() + Duration::from_secs(20);
        let mut k = 0u64;
        for i in 0..n {
            let mut v = Some(val(i, &d2));
            while v.is_some() {
                assert!(Instant::now() < end, "hang at {i}");
                k += 1;
                let mut sel = Select::new();
                let a = sel.send(&tx);
                let f = sel.send(&full_tx);
                let b = sel.send(&tx);
                if let Ok(op) = sel.select_timeout(Duration::from_micros(k % 50)) {
                    assert!(op.index() == a || op.index() == b, "{} ({f})", op.index());
                    op.send(&tx, v.take().unwrap()).unwrap();
                }
            }
        }
    };
    match ctx {
        Ctx::Thread => produce(),
        Ctx::Fiber => join_within(common::fiber_on(&rt, produce), 25).unwrap(),
        Ctx::Task => unreachable!(),
    }
    let mut got = thread_rx.join().unwrap();
    got.extend(join_within(fiber_rx, 25).unwrap());
    got.sort_unstable();
    assert_eq!(got, (0..n).collect::<Vec<_>>(), "cap {cap:?} {ctx:?}");
    assert!(d.lock().unwrap().is_empty(), "cap {cap:?} {ctx:?}");
}

#[test]
fn selects_over_one_sender_twice_deliver_each_value_once() {
    watchdog(45, || {
        for (_, cap) in flavours() {
            for ctx in [Ctx::Thread, Ctx::Fiber] {
                select_same_sender_twice(cap, ctx, 400);
            }
        }
    });
}

// ---- unusual value types ----

/// A zero-sized value whose drops are counted (in a static: it has no room).
static ZST_DROPS: AtomicUsize = AtomicUsize::new(0);
static ZST_LOCK: Mutex<()> = Mutex::new(());

struct Zst;

impl Drop for Zst {
    fn drop(&mut self) {
        ZST_DROPS.fetch_add(1, SeqCst);
    }
}

#[test]
fn zero_sized_values_with_drop_are_dropped_exactly_once() {
    watchdog(30, || {
        let _g = ZST_LOCK.lock().unwrap();
        for (name, cap) in flavours() {
            if cap == Some(0) {
                continue;
            }
            ZST_DROPS.store(0, SeqCst);
            let n = cap.unwrap_or(100).min(100);
            let (tx, rx) = make::<Zst>(cap);
            for _ in 0..n {
                tx.send_blocking(Zst).unwrap();
            }
            assert_eq!(ZST_DROPS.load(SeqCst), 0, "{name}: none dropped yet");
            assert_eq!(rx.len(), n, "{name}");
            let half = n / 2;
            for _ in 0..half {
                let z = rx.recv_blocking().unwrap();
                drop(z);
            }
            assert_eq!(ZST_DROPS.load(SeqCst), half, "{name}: received ones");
            // One given back by a dropped registered receive.
            let (tx2, rx2) = make::<Zst>(cap);
            {
                let mut f = std::pin::pin!(rx2.recv());
                assert!(poll_noop(f.as_mut()).is_pending());
                tx2.send_blocking(Zst).unwrap();
            }
            assert_eq!(rx2.len(), 1, "{name}: given back");
            drop(rx);
            assert_eq!(
                ZST_DROPS.load(SeqCst),
                n,
                "{name}: the rest at the receiver's drop"
            );
            drop(tx);
            drop(rx2);
            drop(tx2);
            assert_eq!(ZST_DROPS.load(SeqCst), n + 1, "{name}: the given-back one");
        }
    });
}

/// Over-aligned values: their address is checked as they are dropped (in the
/// channel's drain or by the receiver) and after each receive.
#[repr(C, align(256))]
struct Aligned {
    id: usize,
    bytes: [u8; 40],
    drops: Arc<AtomicUsize>,
}

impl Drop for Aligned {
    fn drop(&mut self) {
        assert_eq!(
            std::ptr::from_ref(self) as usize % 256,
            0,
            "value {} dropped at a misaligned address",
            self.id
        );
        assert!(self.bytes.iter().all(|&b| b == self.id as u8), "torn value");
        self.drops.fetch_add(1, SeqCst);
    }
}

#[test]
fn over_aligned_values_through_every_flavour_stay_intact() {
    watchdog(30, || {
        for (name, cap) in flavours() {
            let drops = Arc::new(AtomicUsize::new(0));
            let d = drops.clone();
            let mk = move |id: usize| Aligned {
                id,
                bytes: [id as u8; 40],
                drops: d.clone(),
            };
            let (tx, rx) = make::<Aligned>(cap);
            let n = 200;
            let t = {
                let tx = tx.clone();
                let mk = mk.clone();
                std::thread::spawn(move || {
                    for i in 0..n {
                        // Refused once the receiver is gone: dropped here then.
                        let _ = tx.send_blocking(mk(i));
                    }
                })
            };
            drop(tx);
            let mut k = 0;
            // A select's quick pass and full round, and plain receives.
            while k < n - 20 {
                let v = if k.is_multiple_of(2) {
                    let mut sel = Select::new();
                    sel.recv(&rx);
                    sel.select().recv(&rx).unwrap()
                } else {
                    rx.recv_blocking().unwrap()
                };
                assert_eq!(std::ptr::from_ref(&v) as usize % 256, 0, "{name}");
                assert_eq!(v.id, k, "{name}");
                k += 1;
            }
            // The rest are dropped by the channel, or refused to the sender.
            drop(rx);
            t.join().unwrap();
            assert_eq!(drops.load(SeqCst), n, "{name}: each value dropped once");
        }
    });
}

// ---- both ends of a rendezvous in one task ----

/// A task that sends and receives on one rendezvous channel, joined in its own poll
/// (both operations record the same task): every value passes, in order.
#[test]
fn one_task_sending_and_receiving_on_a_rendezvous_channel() {
    watchdog(30, || {
        let rt = common::workers(2);
        let h = rt.spawn(async move {
            let (tx, rx) = chan::bounded::<usize>(0);
            let mut got = Vec::new();
            for i in 0..200 {
                let mut s = std::pin::pin!(tx.send(i));
                let mut r = std::pin::pin!(rx.recv());
                let (mut sent, mut recv) = (false, None);
                std::future::poll_fn(|cx| {
                    // Alternate which goes first.
                    for k in 0..2 {
                        if (k + i) % 2 == 0 && !sent {
                            if let Poll::Ready(res) = s.as_mut().poll(cx) {
                                res.unwrap();
                                sent = true;
                            }
                        } else if (k + i) % 2 == 1 && recv.is_none() {
                            if let Poll::Ready(res) = r.as_mut().poll(cx) {
                                recv = Some(res.unwrap());
                            }
                        }
                    }
                    if sent && recv.is_some() {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
                got.push(recv.unwrap());
            }
            got
        });
        let got = join_within(h, 20).unwrap();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
    });
}

/// A receiver's `Stream` registered in a task that is then aborted: the receiver
/// (shared through an `Arc`) still receives every value afterwards, on a thread.
#[test]
fn a_stream_left_registered_by_an_aborted_task_loses_nothing() {
    watchdog(30, || {
        let rt = common::workers(2);
        for (name, cap) in flavours() {
            let (tx, rx) = make::<usize>(cap);
            let rx = Arc::new(Mutex::new(rx));
            let r2 = rx.clone();
            let polled = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let p2 = polled.clone();
            let h = rt.spawn(async move {
                std::future::poll_fn(|cx| {
                    let mut g = r2.lock().unwrap();
                    let r = futures_core::Stream::poll_next(Pin::new(&mut *g), cx);
                    p2.store(true, SeqCst);
                    r
                })
                .await
            });
            assert!(common::wait_flag(&polled, Duration::from_secs(10)));
            h.abort();
            let first = join_within(h, 20);
            let t = std::thread::spawn(move || {
                for i in 1..50 {
                    if tx.send_timeout(i, Duration::from_secs(10)).is_err() {
                        break;
                    }
                }
            });
            let mut got = Vec::new();
            if let Ok(Some(v)) = first {
                got.push(v);
            }
            let g = rx.lock().unwrap();
            let end = Instant::now() + Duration::from_secs(20);
            while got.len() < 49 {
                assert!(Instant::now() < end, "{name}: hang with {got:?}");
                if let Ok(v) = g.recv_timeout(Duration::from_millis(100)) {
                    got.push(v);
                }
            }
            drop(g);
            t.join().unwrap();
            assert_eq!(got, (1..50).collect::<Vec<_>>(), "{name}");
        }
    });
}
