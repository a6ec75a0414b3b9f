//! Review (rev16b) of cfa7392: the last `taken` of a closed channel takes the lock only
//! if it sees a waiter (`slow`), and a registering receiver re-checks the count after
//! its fence. Real threads, from safe code only: a select's quick pass holds the LAST
//! value of a closed channel (then performs the receive, or drops the
//! `SelectedOperation` so the value goes back) while another receiver of every kind
//! (`recv().await`, `recv_blocking`, `recv_timeout`, a `Stream` poll, `Select::ready`,
//! another select, an async task, a fiber) waits to learn the channel is drained, on
//! ring, list and rendezvous channels, closed before or during the race.
//!
//! Each round checks: the value exactly once; a given-back value reaches the waiter
//! (never `Disconnected` first); the waiter ends (bounded waits turn a hang into a
//! failure, and a watchdog bounds every test); after `Disconnected`, `len() == 0`,
//! `is_empty()`, and `try_recv` stays `Disconnected`.

mod chan_common;

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use chan_common::{fiber_on, join_within, make, rt2, seed, watchdog, Rng};
use futures_core::Stream;
use weft::chan::{self, Receiver, RecvTimeoutError, Select, TryRecvError};

/// A wait that should end within microseconds; this long means a lost wakeup (the
/// machine may be loaded and our threads paused for a minute at a time).
const PATIENCE: Duration = Duration::from_secs(90);

/// The watchdog of a whole test, in seconds.
const WATCHDOG: u64 = 600;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    Perform,
    GiveBack,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Waiter {
    RecvBlocking,
    RecvTimeout,
    RecvAsync,
    Stream,
    Ready,
    Select,
    TrySelectSpin,
}

const WAITERS: [Waiter; 7] = [
    Waiter::RecvBlocking,
    Waiter::RecvTimeout,
    Waiter::RecvAsync,
    Waiter::Stream,
    Waiter::Ready,
    Waiter::Select,
    Waiter::TrySelectSpin,
];

/// The holder: a select whose quick pass (or full round) takes the value, then ends
/// as told. `blocking`: `select_timeout` instead of `try_select`. The value it kept.
fn hold(rx: &Receiver<u32>, end: End, blocking: bool) -> Option<u32> {
    let mut sel = Select::new();
    sel.recv(rx);
    let op = if blocking {
        sel.select_timeout(PATIENCE).expect("hang: holder's select")
    } else {
        match sel.try_select() {
            Ok(op) => op,
            Err(_) => return None,
        }
    };
    match end {
        End::Perform => op.recv(rx).ok(),
        End::GiveBack => {
            drop(op);
            None
        }
    }
}

/// The waiter: a value, or `None` once it saw the channel disconnected. Every wait is
/// bounded: running out of patience is a hang.
fn wait_for(rx: &mut Receiver<u32>, how: Waiter) -> Option<u32> {
    match how {
        Waiter::RecvBlocking => rx.recv_blocking().ok(),
        Waiter::RecvTimeout => match rx.recv_timeout(PATIENCE) {
            Ok(v) => Some(v),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("hang: recv_timeout on a closed channel"),
        },
        Waiter::RecvAsync => weft::wait(rx.recv()).ok(),
        Waiter::Stream => weft::wait(poll_fn(|cx| Pin::new(&mut *rx).poll_next(cx))),
        Waiter::Ready => {
            // `ready` is a hint: the holder may take what it saw. Once the holder let
            // go, nothing else takes the value, so a few looks suffice.
            for _ in 0..1000 {
                let mut sel = Select::new();
                sel.recv(&*rx);
                sel.ready_timeout(PATIENCE).expect("hang: ready()");
                match rx.try_recv() {
                    Ok(v) => return Some(v),
                    Err(TryRecvError::Disconnected) => return None,
                    Err(TryRecvError::Empty) => std::thread::yield_now(),
                }
            }
            panic!("ready() kept answering while nothing was there");
        }
        Waiter::Select => {
            let mut sel = Select::new();
            sel.recv(&*rx);
            let op = sel.select_timeout(PATIENCE).expect("hang: waiter's select");
            op.recv(rx).ok()
        }
        Waiter::TrySelectSpin => {
            // Only `try_select`: it must not report `Disconnected` (an op whose receive
            // fails) while the holder may still give the value back.
            let deadline = std::time::Instant::now() + PATIENCE;
            loop {
                let mut sel = Select::new();
                sel.recv(&*rx);
                if let Ok(op) = sel.try_select() {
                    return op.recv(rx).ok();
                }
                assert!(std::time::Instant::now() < deadline, "hang: try_select");
                std::thread::yield_now();
            }
        }
    }
}

/// After the waiter saw the channel disconnected (or took the last value): it stays
/// disconnected and empty.
fn check_drained(rx: &mut Receiver<u32>) {
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(rx.len(), 0);
    assert!(rx.is_empty());
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Disconnected)
    );
    assert_eq!(
        weft::wait(poll_fn(|cx| Pin::new(&mut *rx).poll_next(cx))),
        None
    );
}

fn account(what: &str, mine: Option<u32>, theirs: Option<u32>, end: End) {
    let got: Vec<u32> = [mine, theirs].into_iter().flatten().collect();
    assert_eq!(got, vec![1], "{what}: mine {mine:?}, theirs {theirs:?}");
    if end == End::GiveBack {
        assert_eq!(
            mine,
            Some(1),
            "{what}: the given-back value missed the waiter"
        );
    }
}

/// Rounds of one closed buffered channel's last value: a holder thread against a
/// waiter thread, started together. `close_during`: a third thread closes as they
/// start.
fn last_value_rounds(cap: Option<usize>, rounds: usize, close_during: bool) {
    watchdog(WATCHDOG, move || {
        let mut rng = Rng::new(seed());
        for round in 0..rounds {
            let how = WAITERS[rng.below(WAITERS.len() as u64) as usize];
            let end = if rng.below(2) == 0 {
                End::Perform
            } else {
                End::GiveBack
            };
            let blocking = rng.below(4) == 0;
            let what = format!("{cap:?} round {round} {how:?} {end:?} blocking {blocking}");
            let (tx, mut rx) = make::<u32>(cap);
            tx.try_send(1).unwrap();
            if !close_during {
                assert!(tx.close());
            }
            let rx2 = rx.clone();
            let parties = if close_during { 3 } else { 2 };
            let start = Arc::new(Barrier::new(parties));
            let (s1, s2) = (start.clone(), start.clone());
            let holder = std::thread::spawn(move || {
                s1.wait();
                let got = hold(&rx2, end, blocking);
                drop(rx2);
                got
            });
            let waiter = std::thread::spawn(move || {
                s2.wait();
                let got = wait_for(&mut rx, how);
                (got, rx)
            });
            if close_during {
                start.wait();
                tx.close();
            }
            let theirs = holder.join().expect(&what);
            let (mine, mut rx) = waiter.join().expect(&what);
            account(&what, mine, theirs, end);
            check_drained(&mut rx);
        }
    });
}

#[test]
fn ring_last_value_closed_before() {
    last_value_rounds(Some(1), 4000, false);
}

#[test]
fn ring_last_value_closed_during() {
    last_value_rounds(Some(2), 2000, true);
}

#[test]
fn list_last_value_closed_before() {
    last_value_rounds(None, 4000, false);
}

#[test]
fn list_last_value_closed_during() {
    last_value_rounds(None, 2000, true);
}

/// bounded(0): a holder's select is handed the value by a rendezvous send (or takes a
/// waiting sender's), then the sender closes; the waiter registers while the holder
/// still holds it (or races it for the send).
#[test]
fn rendezvous_last_value() {
    watchdog(WATCHDOG, move || {
        let mut rng = Rng::new(seed());
        for round in 0..2000 {
            let how = WAITERS[rng.below(WAITERS.len() as u64) as usize];
            let end = if rng.below(2) == 0 {
                End::Perform
            } else {
                End::GiveBack
            };
            let what = format!("rendezvous round {round} {how:?} {end:?}");
            let (tx, mut rx) = chan::bounded::<u32>(0);
            let rx2 = rx.clone();
            let holder = std::thread::spawn(move || {
                let got = hold(&rx2, end, true);
                drop(rx2);
                got
            });
            // The send is done once the holder's select has the value (the waiter has
            // not begun): the waiter then registers while the holder holds it.
            tx.send_timeout(1, PATIENCE).expect("hang: rendezvous send");
            let waiter = std::thread::spawn(move || {
                let got = wait_for(&mut rx, how);
                (got, rx)
            });
            assert!(tx.close());
            let theirs = holder.join().expect(&what);
            let (mine, mut rx) = waiter.join().expect(&what);
            account(&what, mine, theirs, end);
            check_drained(&mut rx);
        }
    });
}

/// Many values on a closed channel, drained by a holder that selects (performing or
/// giving back at random) against waiters of every kind on the runtime (an async task,
/// a fiber) and a thread: each value exactly once, and every waiter ends.
fn drain_mixed(cap: Option<usize>, values: u32, rounds: usize) {
    let rt = Arc::new(rt2());
    watchdog(WATCHDOG, move || {
        let mut rng = Rng::new(seed());
        for round in 0..rounds {
            let what = format!("{cap:?} drain round {round}");
            let (tx, rx) = make::<u32>(cap);
            for v in 0..values {
                tx.try_send(v).unwrap();
            }
            assert!(tx.close());
            let hseed = rng.next();
            let rx_h = rx.clone();
            let holder = std::thread::spawn(move || {
                let mut rng = Rng::new(hseed);
                let mut got = Vec::new();
                for _ in 0..values * 4 {
                    let mut sel = Select::new();
                    sel.recv(&rx_h);
                    let Ok(op) = sel.try_select() else {
                        std::thread::yield_now();
                        continue;
                    };
                    if rng.below(2) == 0 {
                        match op.recv(&rx_h) {
                            Ok(v) => got.push(v),
                            Err(_) => break,
                        }
                    } else {
                        drop(op);
                    }
                }
                got
            });
            let rx_t = rx.clone();
            let task = rt.spawn(async move {
                let mut got = Vec::new();
                while let Ok(v) = rx_t.recv().await {
                    got.push(v);
                }
                assert_eq!(rx_t.try_recv(), Err(TryRecvError::Disconnected));
                got
            });
            let rx_f = rx.clone();
            let fiber = fiber_on(&rt, move || {
                let mut rx_f = rx_f;
                let mut got = Vec::new();
                while let Some(v) = weft::wait(poll_fn(|cx| Pin::new(&mut rx_f).poll_next(cx))) {
                    got.push(v);
                }
                got
            });
            let mut rx_m = rx;
            let mut got = Vec::new();
            while let Some(v) = wait_for(&mut rx_m, Waiter::RecvTimeout) {
                got.push(v);
            }
            check_drained(&mut rx_m);
            got.extend(holder.join().expect(&what));
            got.extend(join_within(task, 120).expect(&what));
            got.extend(join_within(fiber, 120).expect(&what));
            got.sort_unstable();
            assert_eq!(got, (0..values).collect::<Vec<_>>(), "{what}");
        }
    });
}

#[test]
fn ring_drain_mixed() {
    drain_mixed(Some(4), 4, 600);
}

#[test]
fn list_drain_mixed() {
    drain_mixed(None, 4, 600);
}

/// The store-buffering window itself: the holder's last `taken` (without the lock) and
/// the waiter's registration, lined up by a spin on a flag and then skewed by random
/// spins of a few hundred nanoseconds, so that over the rounds the decrement lands in
/// every spot of the waiter's locked path (its drained check, its node's push, its
/// publishing of `slow`, its re-check).
fn sb_window(cap: Option<usize>, how: Waiter, rounds: usize) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    fn spin(n: u64) {
        for _ in 0..n {
            std::hint::spin_loop();
        }
    }
    watchdog(WATCHDOG, move || {
        let mut rng = Rng::new(seed());
        for round in 0..rounds {
            let what = format!("{cap:?} window round {round} {how:?}");
            let (tx, mut rx) = make::<u32>(cap);
            tx.try_send(1).unwrap();
            assert!(tx.close());
            let rx2 = rx.clone();
            let ready = Arc::new(AtomicUsize::new(0));
            let go = Arc::new(AtomicBool::new(false));
            let (d_hold, d_wait) = (rng.below(400), rng.below(600));
            let (r1, g1, r2, g2) = (ready.clone(), go.clone(), ready.clone(), go.clone());
            let holder = std::thread::spawn(move || {
                let mut sel = Select::new();
                sel.recv(&rx2);
                r1.fetch_add(1, SeqCst);
                while !g1.load(SeqCst) {
                    // Yields: on a loaded 2-core machine two spinners starve the rest.
                    std::thread::yield_now();
                }
                let got = match sel.try_select() {
                    Ok(op) => {
                        spin(d_hold);
                        op.recv(&rx2).ok()
                    }
                    Err(_) => None,
                };
                drop(sel);
                drop(rx2);
                got
            });
            let waiter = std::thread::spawn(move || {
                r2.fetch_add(1, SeqCst);
                while !g2.load(SeqCst) {
                    std::thread::yield_now();
                }
                spin(d_wait);
                let got = wait_for(&mut rx, how);
                (got, rx)
            });
            let deadline = std::time::Instant::now() + PATIENCE;
            while ready.load(SeqCst) < 2 {
                assert!(std::time::Instant::now() < deadline, "hang: {what} start");
                std::thread::yield_now();
            }
            go.store(true, SeqCst);
            let theirs = holder.join().expect(&what);
            let (mine, mut rx) = waiter.join().expect(&what);
            account(&what, mine, theirs, End::Perform);
            check_drained(&mut rx);
        }
    });
}

#[test]
fn ring_window_recv() {
    sb_window(Some(1), Waiter::RecvAsync, 3_000);
}

#[test]
fn list_window_stream() {
    sb_window(None, Waiter::Stream, 3_000);
}

#[test]
fn ring_window_select() {
    sb_window(Some(1), Waiter::Select, 1_500);
}

#[test]
fn ring_window_ready() {
    sb_window(Some(1), Waiter::Ready, 1_500);
}
