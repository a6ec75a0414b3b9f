//! The lock-free paths of a buffered channel, pinned by behaviour: a closed channel
//! drains its buffer (and says `Disconnected` exactly when drained), `ready` agrees
//! with the receive that follows it while a send is in progress, and a receiver that
//! polls an empty ring at a sender's heels (the spin before it sleeps looks at the
//! head slot only) still gets every value, in order, whatever the context.

use std::time::Duration;

use weft::chan::{RecvError, Select, TryRecvError};

mod chan_common;
use chan_common::{fiber_on, make};

fn flavours() -> Vec<(Option<usize>, &'static str)> {
    vec![
        (Some(1), "bounded(1)"),
        (Some(64), "bounded(64)"),
        (Some(300_000), "bounded(300_000)"),
        (None, "unbounded"),
    ]
}

/// Values buffered before a close come out in order through every kind of receive,
/// then the channel reads as disconnected (not empty) at once.
#[test]
fn a_closed_channel_drains_then_disconnects() {
    for (cap, name) in flavours() {
        let n = cap.unwrap_or(1000).min(1000) as u64;
        let (tx, rx) = make::<u64>(cap);
        for v in 0..n {
            tx.try_send(v).unwrap();
        }
        assert!(tx.close(), "{name}");
        assert!(tx.try_send(99).unwrap_err().is_disconnected(), "{name}");
        let mut got = Vec::new();
        let mut k = 0;
        while got.len() < n as usize {
            // Alternate the ways of receiving over the same closed channel.
            let v = match k % 4 {
                0 => rx.try_recv().unwrap(),
                1 => rx.recv_blocking().unwrap(),
                2 => {
                    let mut sel = Select::new();
                    let i = sel.recv(&rx);
                    let op = sel.select();
                    assert_eq!(op.index(), i);
                    op.recv(&rx).unwrap()
                }
                _ => rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            };
            got.push(v);
            k += 1;
        }
        assert_eq!(got, (0..n).collect::<Vec<_>>(), "{name}");
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected), "{name}");
        assert_eq!(rx.recv_blocking(), Err(RecvError), "{name}");
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.select();
        assert_eq!(op.recv(&rx), Err(RecvError), "{name}");
        assert!(rx.is_empty() && rx.is_closed(), "{name}");
    }
}

/// A receiver blocked on an empty channel wakes with `Disconnected` when the last
/// sender goes, and one spinning on it (a value arriving just before the close) gets
/// the value first.
#[test]
fn close_wakes_a_blocked_receiver_after_the_last_value() {
    for (cap, name) in flavours() {
        for delay_ms in [0u64, 20] {
            let (tx, rx) = make::<u64>(cap);
            let r = std::thread::spawn(move || {
                let first = rx.recv_blocking();
                let second = rx.recv_blocking();
                (first, second)
            });
            std::thread::sleep(Duration::from_millis(delay_ms));
            tx.send_blocking(7).unwrap();
            drop(tx);
            let (first, second) = r.join().unwrap();
            assert_eq!(first, Ok(7), "{name}, {delay_ms} ms");
            assert_eq!(second, Err(RecvError), "{name}, {delay_ms} ms");
        }
    }
}

/// `Select::ready` on a receive, then `try_recv`, while another thread sends: once
/// `ready` has said the receive can proceed, the value is there to take (a send
/// that has claimed its slot but not yet written it counts as in the buffer).
#[test]
fn ready_then_try_recv_never_finds_it_empty() {
    for (cap, name) in flavours() {
        let (tx, rx) = make::<u64>(cap);
        let n = 20_000u64;
        let s = std::thread::spawn(move || {
            for v in 0..n {
                tx.send_blocking(v).unwrap();
            }
        });
        for want in 0..n {
            let mut sel = Select::new();
            sel.recv(&rx);
            assert_eq!(sel.ready(), 0);
            assert_eq!(rx.try_recv(), Ok(want), "{name}: ready, then empty");
        }
        s.join().unwrap();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected), "{name}");
    }
}

/// One sender and one receiver on threads, fibers and tasks over every buffered
/// flavour: every value arrives exactly once and in order, including across the
/// first lap of a large ring (whose pages are faulted in ahead of the sender).
#[test]
fn one_sender_one_receiver_in_every_context_keeps_order() {
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    for (cap, name) in flavours() {
        let n = 200_000u64;
        for ctx in ["threads", "fibers", "tasks"] {
            let (tx, rx) = make::<u64>(cap);
            let send = move || {
                for v in 0..n {
                    tx.send_blocking(v).unwrap();
                }
            };
            let recv = move || {
                let mut next = 0;
                while let Ok(v) = rx.recv_blocking() {
                    assert_eq!(v, next, "{name} in {ctx}: out of order");
                    next += 1;
                }
                next
            };
            let got = match ctx {
                "threads" => {
                    let s = std::thread::spawn(send);
                    let got = std::thread::spawn(recv).join().unwrap();
                    s.join().unwrap();
                    got
                }
                "fibers" => {
                    let s = fiber_on(&rt, send);
                    let got = fiber_on(&rt, recv).join().unwrap();
                    s.join().unwrap();
                    got
                }
                _ => {
                    let s = rt.spawn(async move { send() });
                    let got = rt.spawn(async move { recv() }).join().unwrap();
                    s.join().unwrap();
                    got
                }
            };
            assert_eq!(got, n, "{name} in {ctx}");
        }
    }
}

/// Receivers spinning on empty channels (the cheap look before a receive) while
/// senders close them at random moments: no receiver hangs, and the values received
/// are exactly those sent.
#[test]
fn spinning_receivers_see_every_close() {
    for (cap, name) in flavours() {
        for round in 0..20u64 {
            let (tx, rx) = make::<u64>(cap);
            let receivers: Vec<_> = (0..2)
                .map(|_| {
                    let rx = rx.clone();
                    std::thread::spawn(move || rx.iter().count() as u64)
                })
                .collect();
            drop(rx);
            let k = round * 37 % 101;
            for v in 0..k {
                tx.send_blocking(v).unwrap();
                if v % 16 == 0 {
                    std::thread::yield_now();
                }
            }
            drop(tx);
            let got: u64 = receivers.into_iter().map(|r| r.join().unwrap()).sum();
            assert_eq!(got, k, "{name}, round {round}");
        }
    }
}
