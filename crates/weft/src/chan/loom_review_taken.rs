//! Review (rev16b) of the last `taken` of a closed channel taking the lock only when
//! it sees a waiter (`slow`): loom models of a value counted in `in_flight` (held by a
//! select's quick pass, or handed to a receive's node or a select's node) racing every
//! kind of receiver that registers on the closed channel: a plain receive (its
//! `recheck_drained`), a `Stream` poll and a `Select::ready` observer (their
//! registrations' drained check), another select. The holder either performs its
//! receive (the waiter must then see the channel disconnected, never hang) or gives
//! the value back (the waiter must then get it, never see `Disconnected` first).
//!
//! Each model accounts for the one value: received exactly once in all. A lost wakeup
//! leaves a model thread parked on the harness's `Notify`: loom reports a deadlock.

use std::future::poll_fn;
use std::pin::{pin, Pin};
use std::task::Poll;

use futures_core::Stream;
use loom::thread;

use super::{bounded, unbounded, Receiver, RecvError, Select, TryRecvError};
use crate::base::loom_harness::{block_on, model_bound2, Task};

/// How the holder ends: performing the selected receive, or dropping the
/// `SelectedOperation` (its value goes back to the channel).
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Perform,
    GiveBack,
}

/// How the waiter on the main thread receives.
#[derive(Clone, Copy)]
enum Waiter {
    Recv,
    Stream,
    Ready,
    Select,
}

/// The holder: a `try_select` (its quick pass takes the value through
/// `recv_fast_held`, counted in `in_flight`; the full round if the waiter's
/// registration set `slow` first), then the end `end`. The value it kept, if any.
fn hold(rx: Receiver<u32>, end: End) -> Option<u32> {
    let got = {
        let mut sel = Select::new();
        sel.recv(&rx);
        match sel.try_select() {
            Ok(op) if end == End::Perform => op.recv(&rx).ok(),
            Ok(op) => {
                drop(op);
                None
            }
            Err(_) => None,
        }
    };
    drop(rx);
    got
}

/// The waiter: receives until it has a value or sees the channel disconnected. A
/// `ready` may answer for a value another receiver then takes (it is a hint): it looks
/// again, at most twice more (once the holder has let go, nothing else takes it).
fn wait_for(rx: &mut Receiver<u32>, how: Waiter) -> Option<u32> {
    match how {
        Waiter::Recv => block_on(rx.recv()).ok(),
        Waiter::Stream => block_on(poll_fn(|cx| Pin::new(&mut *rx).poll_next(cx))),
        Waiter::Ready => {
            for _ in 0..3 {
                let mut sel = Select::new();
                sel.recv(&*rx);
                assert_eq!(sel.ready(), 0);
                match rx.try_recv() {
                    Ok(v) => return Some(v),
                    Err(TryRecvError::Disconnected) => return None,
                    Err(TryRecvError::Empty) => {}
                }
            }
            panic!("ready() kept answering while nothing was there");
        }
        Waiter::Select => {
            let mut sel = Select::new();
            sel.recv(&*rx);
            let op = block_on(sel.select_async());
            op.recv(rx).ok()
        }
    }
}

/// The value exactly once, and the channel disconnected at the end.
fn account(mut rx: Receiver<u32>, mine: Option<u32>, theirs: Option<u32>, end: End) {
    let got: Vec<u32> = [mine, theirs].into_iter().flatten().collect();
    assert_eq!(got, vec![1], "mine {mine:?}, theirs {theirs:?}");
    if end == End::GiveBack {
        assert_eq!(mine, Some(1), "the given-back value went to the waiter");
    }
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert!(rx.is_empty());
    assert_eq!(rx.len(), 0);
    // A stream that ended stays ended.
    let task = Task::new();
    assert_eq!(
        task.poll(pin!(poll_fn(|cx| Pin::new(&mut rx).poll_next(cx)))),
        Poll::Ready(None)
    );
}

/// One closed channel (`bounded(1)` or `unbounded()`) with its last value, a holder
/// thread against a waiter on the main thread.
fn closed_last_value(ring: bool, how: Waiter, end: End) {
    model_bound2(move || {
        let (tx, mut rx) = if ring { bounded::<u32>(1) } else { unbounded() };
        tx.try_send(1).unwrap();
        assert!(tx.close());
        let rx2 = rx.clone();
        let holder = thread::spawn(move || hold(rx2, end));
        let mine = wait_for(&mut rx, how);
        let theirs = holder.join().unwrap();
        account(rx, mine, theirs, end);
        drop(tx);
    });
}

#[test]
fn loom_chan_rev16b_ring_stream_vs_held_performed() {
    closed_last_value(true, Waiter::Stream, End::Perform);
}

#[test]
fn loom_chan_rev16b_ring_stream_vs_held_given_back() {
    closed_last_value(true, Waiter::Stream, End::GiveBack);
}

#[test]
fn loom_chan_rev16b_ring_ready_vs_held_performed() {
    closed_last_value(true, Waiter::Ready, End::Perform);
}

#[test]
fn loom_chan_rev16b_ring_ready_vs_held_given_back() {
    closed_last_value(true, Waiter::Ready, End::GiveBack);
}

#[test]
fn loom_chan_rev16b_ring_select_vs_held_performed() {
    closed_last_value(true, Waiter::Select, End::Perform);
}

#[test]
fn loom_chan_rev16b_ring_select_vs_held_given_back() {
    closed_last_value(true, Waiter::Select, End::GiveBack);
}

#[test]
fn loom_chan_rev16b_ring_recv_vs_held_given_back() {
    closed_last_value(true, Waiter::Recv, End::GiveBack);
}

#[test]
fn loom_chan_rev16b_list_recv_vs_held_performed() {
    closed_last_value(false, Waiter::Recv, End::Perform);
}

#[test]
fn loom_chan_rev16b_list_stream_vs_held_performed() {
    closed_last_value(false, Waiter::Stream, End::Perform);
}

#[test]
fn loom_chan_rev16b_list_ready_vs_held_performed() {
    closed_last_value(false, Waiter::Ready, End::Perform);
}

/// The close comes during the race (a third thread): the stream waits on an open
/// channel, is woken by the close, and registers again while the select holds the
/// value, or sees it after.
#[test]
fn loom_chan_rev16b_ring_stream_vs_held_close_during() {
    model_bound2(|| {
        let (tx, mut rx) = bounded::<u32>(1);
        tx.try_send(1).unwrap();
        let rx2 = rx.clone();
        let holder = thread::spawn(move || hold(rx2, End::Perform));
        let closer = thread::spawn(move || {
            assert!(tx.close());
            tx
        });
        let mine = wait_for(&mut rx, Waiter::Stream);
        let theirs = holder.join().unwrap();
        let _tx = closer.join().unwrap();
        account(rx, mine, theirs, End::Perform);
    });
}

/// bounded(0): the value is handed to a waiting select's node by a rendezvous send
/// (counted in `in_flight` by `try_send_locked`), then the sender closes the channel
/// and receives itself. The select performs (its `taken` the last) or gives back.
fn rendezvous_handed_to_select(end: End) {
    model_bound2(move || {
        let (tx, rx) = bounded::<u32>(0);
        let rx2 = rx.clone();
        let holder = thread::spawn(move || {
            let got = {
                let mut sel = Select::new();
                sel.recv(&rx2);
                let op = block_on(sel.select_async());
                if end == End::Perform {
                    op.recv(&rx2).ok()
                } else {
                    drop(op);
                    None
                }
            };
            drop(rx2);
            got
        });
        block_on(tx.send(1)).unwrap();
        assert!(tx.close());
        let mine = block_on(rx.recv()).ok();
        let theirs = holder.join().unwrap();
        account(rx, mine, theirs, end);
        drop(tx);
    });
}

#[test]
fn loom_chan_rev16b_rendezvous_handed_to_select_performed() {
    rendezvous_handed_to_select(End::Perform);
}

#[test]
fn loom_chan_rev16b_rendezvous_handed_to_select_given_back() {
    rendezvous_handed_to_select(End::GiveBack);
}

/// bounded(1): the value is handed to a plain receive's node (a fast send's settle,
/// or a locked send), the channel closes, and a second receive registers while the
/// first has not yet taken its value (`poll_recv`'s `taken`, without the lock) or
/// drops its future (the value goes back to the second).
fn handed_to_receive(take: bool) {
    model_bound2(move || {
        let (tx, rx) = bounded::<u32>(1);
        let rx1 = rx.clone();
        let first = thread::spawn(move || {
            let got = if take {
                block_on(rx1.recv()).ok()
            } else {
                // Cancelled after one poll: a value handed meanwhile goes back.
                let task = Task::new();
                let mut f = pin!(rx1.recv());
                match task.poll(f.as_mut()) {
                    Poll::Ready(r) => r.ok(),
                    Poll::Pending => None,
                }
            };
            drop(rx1);
            got
        });
        tx.try_send(1).unwrap();
        assert!(tx.close());
        let mine = block_on(rx.recv()).ok();
        let theirs = first.join().unwrap();
        let got: Vec<u32> = [mine, theirs].into_iter().flatten().collect();
        assert_eq!(got, vec![1], "mine {mine:?}, theirs {theirs:?}");
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(block_on(rx.recv()), Err(RecvError));
        drop(tx);
    });
}

#[test]
fn loom_chan_rev16b_handed_to_receive_taken() {
    handed_to_receive(true);
}

#[test]
fn loom_chan_rev16b_handed_to_receive_dropped() {
    handed_to_receive(false);
}
