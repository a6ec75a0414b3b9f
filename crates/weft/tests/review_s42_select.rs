//! Review s42: `Select`, `select!`/`select_biased!`, `select_async` and the timer
//! channels (`after`, `at`, `tick`, `never`), tried from safe code only.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use common::{fiber_on, join_within, watchdog};
use weft::chan::{self, Select};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Polls `f` once with a no-op waker.
fn poll_noop<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

// ---------------------------------------------------------------------------------
// timers: a message given back by an unperformed select
// ---------------------------------------------------------------------------------

/// How a clone of a timer receiver waits in [`given_back_timer_message`].
#[derive(Clone, Copy, Debug)]
enum TimerWaiter {
    /// `recv_timeout` on a plain thread.
    Recv,
    /// `select_timeout` on a plain thread.
    Select,
    /// `ready_timeout` on a plain thread.
    Ready,
}

/// A select takes the one message of an `after` receiver, while a clone of that
/// receiver waits with a limit of 5 s; the selected operation is then dropped
/// unperformed, which gives the message back (`SelectedOperation`'s rustdoc). Returns
/// how long the clone waited after the give-back, and whether it got the message.
fn given_back_timer_message(waiter: TimerWaiter) -> (bool, Duration) {
    let rx = chan::after(Duration::ZERO);
    let clone = rx.clone();
    let mut sel = Select::new();
    let i = sel.recv(&rx);
    let op = sel.select();
    assert_eq!(op.index(), i);
    let (started_tx, started_rx) = mpsc::channel();
    let given_back = Arc::new(Mutex::new(None::<Instant>));
    let g = given_back.clone();
    let h = thread::spawn(move || {
        started_tx.send(()).unwrap();
        let limit = Duration::from_secs(3);
        let ok = match waiter {
            TimerWaiter::Recv => clone.recv_timeout(limit).is_ok(),
            TimerWaiter::Select => {
                let mut sel = Select::new();
                sel.recv(&clone);
                match sel.select_timeout(limit) {
                    Ok(op) => op.recv(&clone).is_ok(),
                    Err(_) => false,
                }
            }
            TimerWaiter::Ready => {
                let mut sel = Select::new();
                sel.recv(&clone);
                sel.ready_timeout(limit).is_ok()
            }
        };
        let at = g.lock().unwrap().expect("given back before the wait ended");
        (ok, at.elapsed())
    });
    started_rx.recv().unwrap();
    // The clone is waiting by now (it found the message taken).
    thread::sleep(ms(100));
    *given_back.lock().unwrap() = Some(Instant::now());
    drop(op);
    h.join().unwrap()
}

/// A one-shot timer's message given back by an unperformed select must reach a clone
/// of the receiver that is already waiting on it, as a channel's given-back value
/// reaches a waiting receiver.
///
/// Interleaving: `rx = after(0)`; a select on `rx` takes the message (`Timer::At`'s
/// `taken` set, `chan/timer.rs` `try_take_stamped`); a clone starts `recv_timeout(3 s)`
/// (or `select_timeout`, `ready_timeout`): `try_take` fails and `deadline()` is now
/// `None` (`timer.rs:46-50`), so it sleeps until its own limit (`recv_blocking`,
/// `timer.rs:112-117`; a select's `next_timer` is `None` and it registers nothing,
/// `chan/select/mod.rs:953` in `select_async`).
/// Then the selected operation is dropped: `Timer::give_back` clears `taken`
/// (`timer.rs:83-85`) and wakes nobody.
///
/// Seen: the clone gets the message only when its 3 s limit runs out (2.9 s after the
/// give-back, every run, all three waiters). In a separate run the untimed forms
/// (`recv_blocking`, `select`, an async `recv` on a runtime) had still not returned
/// 4 s after the give-back, although the message was there to take.
/// Expected: it gets the message at once after the give-back.
#[test]
fn given_back_after_message_wakes_a_waiting_clone() {
    watchdog(40, || {
        let results: Vec<_> = [TimerWaiter::Recv, TimerWaiter::Select, TimerWaiter::Ready]
            .into_iter()
            .map(|w| (w, given_back_timer_message(w)))
            .collect();
        for (waiter, (ok, took)) in &results {
            assert!(
                *ok && *took < Duration::from_secs(1),
                "{waiter:?}: the given-back message reached the waiting clone: {ok}, after {took:?} (all: {results:?})"
            );
        }
    });
}

/// How an untimed waiter waits on a clone of a timer receiver.
#[derive(Clone, Copy, Debug)]
enum UntimedWaiter {
    /// `recv_blocking` on a plain thread.
    Thread,
    /// `select()` on a plain thread.
    Select,
    /// `recv().await` in a task.
    Task,
    /// `select_async().await` in a task.
    SelectAsync,
    /// `recv_blocking` in a fiber.
    Fiber,
}

/// As [`given_back_timer_message`] with waits that have no limit of their own, on
/// `after(0)` and on a `tick` whose next delivery is far off (a given-back tick was
/// kept back until the next period): the message given back must reach the waiter
/// at once.
fn given_back_to_an_untimed_waiter(rt: &weft::Runtime, tick: bool, w: UntimedWaiter) -> Duration {
    let rx = if tick {
        let rx = chan::tick(ms(30));
        thread::sleep(ms(40));
        rx
    } else {
        chan::after(Duration::ZERO)
    };
    let clone = rx.clone();
    let mut sel = Select::new();
    let i = sel.recv(&rx);
    let op = sel.select();
    assert_eq!(op.index(), i);
    if tick {
        // The next tick is 30 ms off; the given-back one must come before that.
        thread::sleep(ms(2));
    }
    let (done_tx, done_rx) = mpsc::channel::<Instant>();
    match w {
        UntimedWaiter::Thread => {
            thread::spawn(move || {
                clone.recv_blocking().unwrap();
                done_tx.send(Instant::now()).unwrap();
            });
        }
        UntimedWaiter::Select => {
            thread::spawn(move || {
                let mut sel = Select::new();
                sel.recv(&clone);
                sel.select().recv(&clone).unwrap();
                done_tx.send(Instant::now()).unwrap();
            });
        }
        UntimedWaiter::Task => {
            rt.spawn(async move {
                clone.recv().await.unwrap();
                done_tx.send(Instant::now()).unwrap();
            });
        }
        UntimedWaiter::SelectAsync => {
            rt.spawn(async move {
                let mut sel = Select::new();
                sel.recv(&clone);
                let op = sel.select_async().await;
                op.recv(&clone).unwrap();
                done_tx.send(Instant::now()).unwrap();
            });
        }
        UntimedWaiter::Fiber => {
            drop(fiber_on(rt, move || {
                clone.recv_blocking().unwrap();
                done_tx.send(Instant::now()).unwrap();
            }));
        }
    }
    // The waiter is waiting by now (it found the message taken).
    thread::sleep(ms(if tick { 5 } else { 50 }));
    let back = Instant::now();
    drop(op);
    let got = done_rx
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("{w:?} (tick: {tick}): the given-back message never came"));
    got.saturating_duration_since(back)
}

/// Found in review (every run before the fix): a timer message given back by an
/// unperformed select reached no receive already waiting on the timer, whatever its
/// form: one waited for ever (`after`), or for the next period (`tick`). Fixed: the
/// waits arm a watch on the timer (`chan::timer::Watch`), and `Timer::give_back`
/// wakes every watcher.
#[test]
fn given_back_timer_message_reaches_untimed_waiters() {
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        for tick in [false, true] {
            for w in [
                UntimedWaiter::Thread,
                UntimedWaiter::Select,
                UntimedWaiter::Task,
                UntimedWaiter::SelectAsync,
                UntimedWaiter::Fiber,
            ] {
                // A tick's next delivery is 30 ms off: a waiter woken only by it takes
                // about 23 ms; the give-back wakes it within a millisecond or two (a
                // loaded machine gets three tries).
                let took = (0..3)
                    .map(|_| given_back_to_an_untimed_waiter(&rt, tick, w))
                    .min()
                    .unwrap();
                let limit = if tick { ms(15) } else { ms(1000) };
                assert!(
                    took < limit,
                    "{w:?} (tick: {tick}): {took:?} after the give-back"
                );
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// a pending select_async of the same thread taken as a rendezvous partner
// ---------------------------------------------------------------------------------

/// A thread holds a `select_async` future that has registered a send on a rendezvous
/// channel (polled once, to be polled again later by this same thread), then waits in
/// a blocking select over a receive on that channel and a receive on another channel,
/// which a second thread fills 50 ms later. The blocking select must return the
/// filled channel's receive.
///
/// Interleaving: the blocking select's try step pairs its rendezvous receive with the
/// pending select's send node (`Chan::try_recv_locked` with a node: `n.claim()`,
/// `chan/core.rs:987` and the pairing after it), then waits for that select's value with no other node
/// registered (`Machine::paired`, `chan/select/mod.rs:1152-1154` and `:1235`, "no other node is registered
/// meanwhile"). That value can only come from a poll of the future, which only this
/// (blocked) thread would make. crossbeam never pairs a select with an operation of
/// its own thread (`Waker::try_select` skips entries with the current thread id).
///
/// Seen: the select returns only at its 3 s deadline (`give_up` undoes the pairing and
/// then finds the other receive), every run. In a separate run, an untimed `select()`
/// on another thread, paired the same way with a future this thread held without
/// polling, had not returned 5 s after its other channel was filled, and returned
/// within a millisecond once the future was dropped (its drop lets the pairing go).
/// Expected: the ready receive is selected within about 50 ms.
#[test]
fn blocking_select_is_not_held_by_its_own_pending_select_async() {
    watchdog(20, || {
        let (tx0, rx0) = chan::bounded::<u32>(0);
        let (tx1, rx1) = chan::unbounded::<u32>();
        let mut pending = Select::new();
        pending.send(&tx0);
        let mut fut = Box::pin(pending.select_async());
        assert!(poll_noop(fut.as_mut()).is_pending(), "nobody receives yet");
        let filler = thread::spawn(move || {
            thread::sleep(ms(50));
            tx1.send_blocking(7).unwrap();
            tx1
        });
        let t = Instant::now();
        let mut sel = Select::new();
        let _r0 = sel.recv(&rx0);
        let r1 = sel.recv(&rx1);
        let op = sel.select_timeout(Duration::from_secs(3));
        let took = t.elapsed();
        let _tx1 = filler.join().unwrap();
        match op {
            Ok(op) if op.index() == r1 => assert_eq!(op.recv(&rx1), Ok(7)),
            Ok(op) => panic!("selected {} (nobody sent on rx0)", op.index()),
            Err(e) => panic!("{e:?}"),
        }
        drop(fut);
        assert!(
            took < Duration::from_secs(1),
            "the ready receive was selected only after {took:?}"
        );
    });
}

/// [`blocking_select_is_not_held_by_its_own_pending_select_async`] with no deadline,
/// on a plain thread and in a fiber: an untimed `select()` paired with a pending
/// `select_async` that its own thread (or fiber) holds waited for ever before the fix.
#[test]
fn untimed_blocking_select_is_not_held_by_its_own_pending_select_async() {
    fn case() -> Duration {
        let (tx0, rx0) = chan::bounded::<u32>(0);
        let (tx1, rx1) = chan::unbounded::<u32>();
        let mut pending = Select::new();
        pending.send(&tx0);
        let mut fut = Box::pin(pending.select_async());
        assert!(poll_noop(fut.as_mut()).is_pending(), "nobody receives yet");
        let filler = thread::spawn(move || {
            thread::sleep(ms(20));
            tx1.send_blocking(7).unwrap();
            tx1
        });
        let t = Instant::now();
        let mut sel = Select::new();
        sel.recv(&rx0);
        let r1 = sel.recv(&rx1);
        let op = sel.select();
        let took = t.elapsed();
        let _tx1 = filler.join().unwrap();
        assert_eq!(op.index(), r1, "nobody sent on rx0");
        assert_eq!(op.recv(&rx1), Ok(7));
        drop(fut);
        took
    }
    watchdog(20, || {
        let took = case();
        assert!(took < Duration::from_secs(2), "thread: {took:?}");
        let rt = common::runtime(2, 0);
        let took = join_within(fiber_on(&rt, case), 10).unwrap();
        assert!(took < Duration::from_secs(2), "fiber: {took:?}");
    });
}

/// As [`blocking_select_is_not_held_by_its_own_pending_select_async`], with a plain
/// `recv_timeout` and a plain sender: a thread holds a pending `select_async` send on a
/// rendezvous channel and then receives on that channel while another thread
/// `send_blocking`s on it 50 ms later. The receive pairs with the pending select only
/// in its first, "try" step (2 ms of patience, then undone: the pending select's group
/// is won by then, so no later step pairs with it again), and then meets the plain
/// sender. Passes.
#[test]
fn receive_is_not_held_by_its_own_pending_select_async() {
    watchdog(20, || {
        let (tx0, rx0) = chan::bounded::<u32>(0);
        let mut pending = Select::new();
        pending.send(&tx0);
        let mut fut = Box::pin(pending.select_async());
        assert!(poll_noop(fut.as_mut()).is_pending(), "nobody receives yet");
        let tx = tx0.clone();
        let sender = thread::spawn(move || {
            thread::sleep(ms(50));
            tx.send_timeout(5, Duration::from_secs(8)).is_ok()
        });
        let t = Instant::now();
        let r = rx0.recv_timeout(Duration::from_secs(3));
        let took = t.elapsed();
        drop(fut);
        // Let the sender finish whatever happened above.
        let late = if r.is_err() {
            rx0.recv_timeout(Duration::from_secs(8))
        } else {
            Err(chan::RecvTimeoutError::Timeout)
        };
        assert!(sender.join().unwrap(), "the plain send never completed");
        assert_eq!(
            r,
            Ok(5),
            "the receive missed the plain sender (took {took:?}; it came later: {late:?})"
        );
        assert!(took < Duration::from_secs(1), "took {took:?}");
    });
}

// ---------------------------------------------------------------------------------
// a selected send and the capacity
// ---------------------------------------------------------------------------------

/// Found in review: a select that chose a send for the room it saw holds no slot
/// (`Won::Room`), so another sender may take that room before the selected send is
/// performed, which then goes in beyond the capacity (`Chan::send_selected`). The
/// design keeps it (a selected operation completes without waiting, and holding a
/// slot of the lock-free ring for a caller that may drop the operation would cost
/// every send); `bounded`'s rustdoc said "at most `cap`" and now says when it may
/// hold more, and for how long. This pins the documented behaviour: both sends go
/// in, a plain send sees the channel full until it is below `cap` again, and nothing
/// is lost or reordered.
#[test]
fn a_selected_send_may_go_beyond_the_capacity_for_a_while() {
    let (tx, rx) = chan::bounded::<u32>(1);
    let mut sel = Select::new();
    let i = sel.send(&tx);
    let op = sel.try_select().expect("there is room");
    assert_eq!(op.index(), i);
    assert_eq!(tx.try_send(1), Ok(()));
    assert_eq!(op.send(&tx, 2), Ok(()));
    assert_eq!(rx.len(), 2);
    assert!(tx.is_full());
    assert_eq!(tx.try_send(3), Err(chan::TrySendError::Full(3)));
    assert_eq!(rx.try_recv(), Ok(1));
    assert_eq!(
        tx.try_send(3),
        Err(chan::TrySendError::Full(3)),
        "still at cap"
    );
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(tx.try_send(3), Ok(()));
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![3]);
}

// ---------------------------------------------------------------------------------
// timer edge cases (no runtime)
// ---------------------------------------------------------------------------------

/// Zero, past, huge and `MAX` durations and deadlines in selects on a plain thread:
/// `tick(0)` is always ready, `at(past)` delivers its instant once, `after(MAX)`,
/// `tick(MAX)` and `never()` are never ready, and `select_timeout` with zero and
/// `MAX` limits behaves as `try_select` and `select`.
#[test]
fn timer_edge_cases_in_selects_without_a_runtime() {
    watchdog(20, || {
        // tick(0): ready every time, instants in order.
        let t0 = chan::tick(Duration::ZERO);
        let mut last = None;
        for _ in 0..50 {
            let mut sel = Select::new();
            let i = sel.recv(&t0);
            let op = sel
                .select_timeout(Duration::ZERO)
                .expect("tick(0) is ready");
            assert_eq!(op.index(), i);
            let at = op.recv(&t0).unwrap();
            assert!(last.is_none_or(|l| at >= l));
            last = Some(at);
        }
        // at(past): delivers `past` once, then never again.
        let past = Instant::now() - ms(500);
        let a = chan::at(past);
        let mut sel = Select::new();
        let i = sel.recv(&a);
        let op = sel.try_select().expect("a past deadline is ready");
        assert_eq!(op.index(), i);
        assert_eq!(op.recv(&a), Ok(past));
        assert!(sel.try_select().is_err());
        assert!(sel.select_timeout(ms(20)).is_err());
        // Far and never.
        let far = chan::after(Duration::MAX);
        let far_tick = chan::tick(Duration::MAX);
        let nev = chan::never::<u8>();
        let mut sel = Select::new();
        sel.recv(&far);
        sel.recv(&far_tick);
        sel.recv(&nev);
        let t = Instant::now();
        assert!(sel.select_timeout(ms(30)).is_err());
        assert!(t.elapsed() >= ms(30));
        assert!(sel.try_select().is_err());
        assert!(sel.try_ready().is_err());
        assert!(sel.ready_timeout(ms(10)).is_err());
        // Zero and MAX limits with a ready channel.
        let (tx, rx) = chan::unbounded::<u8>();
        let r = sel.recv(&rx);
        assert!(sel.select_timeout(Duration::ZERO).is_err());
        tx.send_blocking(1).unwrap();
        let op = sel.select_timeout(Duration::ZERO).expect("ready");
        assert_eq!(op.index(), r);
        assert_eq!(op.recv(&rx), Ok(1));
        tx.send_blocking(2).unwrap();
        let op = sel.select_timeout(Duration::MAX).expect("ready");
        assert_eq!(op.recv(&rx), Ok(2));
        assert_eq!(
            sel.ready_timeout(Duration::ZERO),
            Err(chan::ReadyTimeoutError)
        );
        tx.send_blocking(3).unwrap();
        assert_eq!(sel.ready_timeout(Duration::MAX), Ok(r));
        assert_eq!(rx.try_recv(), Ok(3));
        // A deadline in the past, a value arriving later under a MAX limit.
        assert!(sel.select_deadline(Instant::now() - ms(10)).is_err());
        let h = thread::spawn(move || {
            thread::sleep(ms(20));
            tx.send_blocking(4).unwrap();
            tx
        });
        let op = sel.select_timeout(Duration::MAX).expect("the value comes");
        assert_eq!(op.recv(&rx), Ok(4));
        drop(h.join().unwrap());
    });
}

/// `select!` with only a `default` arm (crossbeam accepts it), with a timeout, and with
/// `default(Duration::MAX)` beside a ready arm.
#[test]
fn select_macro_with_only_default_arms() {
    watchdog(10, || {
        let mut hit = 0;
        weft::select! {
            default => hit += 1,
        }
        let t = Instant::now();
        weft::select! {
            default(ms(20)) => hit += 1,
        }
        assert!(t.elapsed() >= ms(20));
        let (tx, rx) = chan::bounded::<u8>(1);
        tx.send_blocking(9).unwrap();
        weft::select! {
            recv(rx) -> m => { assert_eq!(m, Ok(9)); hit += 1 }
            default(Duration::MAX) => panic!("the receive was ready"),
        }
        weft::select_biased! {
            recv(chan::never::<u8>()) -> _ => panic!("never"),
            send(tx, 10) -> r => { assert_eq!(r, Ok(())); hit += 1 }
            default => panic!("the send was ready"),
        }
        assert_eq!(rx.try_recv(), Ok(10));
        assert_eq!(hit, 4);
    });
}

/// `select_timeout(0)` (and `try_select`) meets a partner already waiting on a
/// rendezvous channel, on either side (crossbeam's zero-capacity channel does).
#[test]
fn zero_timeout_selects_meet_waiting_rendezvous_partners() {
    watchdog(20, || {
        let (tx, rx) = chan::bounded::<u32>(0);
        // A sender waits.
        let tx2 = tx.clone();
        let h = thread::spawn(move || tx2.send_blocking(1).unwrap());
        let mut got = None;
        for _ in 0..200 {
            let mut sel = Select::new();
            let i = sel.recv(&rx);
            if let Ok(op) = sel.select_timeout(Duration::ZERO) {
                assert_eq!(op.index(), i);
                got = Some(op.recv(&rx).unwrap());
                break;
            }
            thread::sleep(ms(5));
        }
        assert_eq!(got, Some(1), "a waiting sender was never met");
        h.join().unwrap();
        // A receiver waits.
        let rx2 = rx.clone();
        let h = thread::spawn(move || rx2.recv_blocking().unwrap());
        let mut sent = false;
        for _ in 0..200 {
            let mut sel = Select::new();
            let i = sel.send(&tx);
            if let Ok(op) = sel.select_timeout(Duration::ZERO) {
                assert_eq!(op.index(), i);
                op.send(&tx, 2).unwrap();
                sent = true;
                break;
            }
            thread::sleep(ms(5));
        }
        assert!(sent, "a waiting receiver was never met");
        assert_eq!(h.join().unwrap(), 2);
    });
}

/// `ready` tells which operation could proceed and performs nothing: a value stays
/// for another receiver, a waiting receiver stays waiting for a real send, a timer
/// message stays to be received.
#[test]
fn ready_without_performing_leaves_everything_in_place() {
    watchdog(20, || {
        let (tx, rx) = chan::unbounded::<u32>();
        tx.send_blocking(1).unwrap();
        let mut sel = Select::new();
        let i = sel.recv(&rx);
        assert_eq!(sel.ready(), i);
        assert_eq!(sel.try_ready(), Ok(i));
        assert_eq!(rx.len(), 1);
        let rx2 = rx.clone();
        assert_eq!(
            thread::spawn(move || rx2.recv_blocking()).join().unwrap(),
            Ok(1)
        );
        // A rendezvous send observed ready because a receiver waits.
        let (ztx, zrx) = chan::bounded::<u32>(0);
        let h = thread::spawn(move || zrx.recv_timeout(Duration::from_secs(10)));
        let mut sel = Select::new();
        let s = sel.send(&ztx);
        assert_eq!(sel.ready_timeout(Duration::from_secs(10)), Ok(s));
        thread::sleep(ms(20));
        assert!(!h.is_finished(), "observing completed the receive");
        ztx.send_blocking(5).unwrap();
        assert_eq!(h.join().unwrap(), Ok(5));
        // A due timer observed, then received.
        let t = chan::after(Duration::ZERO);
        let mut sel = Select::new();
        let k = sel.recv(&t);
        assert_eq!(sel.ready(), k);
        assert_eq!(sel.ready(), k);
        assert!(t.try_recv().is_ok());
        assert!(sel.try_ready().is_err());
    });
}

// ---------------------------------------------------------------------------------
// fairness with operations the quick pass cannot decide
// ---------------------------------------------------------------------------------

/// Three always-ready operations of different kinds: a receive on a closed, drained
/// channel (the quick pass stops there), a receive with values (the quick pass takes
/// one), `tick(0)` (a timer: a full round). Each must win about a third of the
/// selects; `select_biased` always takes the first in source order.
#[test]
fn fair_among_closed_value_and_timer_operations() {
    watchdog(30, || {
        const ROUNDS: usize = 3000;
        let (ctx, crx) = chan::unbounded::<u32>();
        drop(ctx);
        let (vtx, vrx) = chan::unbounded::<u32>();
        for i in 0..ROUNDS as u32 {
            vtx.send_blocking(i).unwrap();
        }
        let tick = chan::tick(Duration::ZERO);
        let mut wins = [0usize; 3];
        for _ in 0..ROUNDS {
            let mut sel = Select::new();
            let c = sel.recv(&crx);
            let v = sel.recv(&vrx);
            let t = sel.recv(&tick);
            let op = sel.select();
            let i = op.index();
            if i == c {
                assert!(op.recv(&crx).is_err());
            } else if i == v {
                op.recv(&vrx).unwrap();
            } else {
                assert_eq!(i, t);
                op.recv(&tick).unwrap();
            }
            wins[i] += 1;
        }
        for (i, w) in wins.iter().enumerate() {
            assert!(
                *w > ROUNDS / 5,
                "operation {i} won {w} of {ROUNDS} ({wins:?})"
            );
        }
        for first in 0..3 {
            for _ in 0..20 {
                let mut sel = Select::new_biased();
                let mut idx = [0usize; 3];
                for k in 0..3 {
                    idx[(first + k) % 3] = match (first + k) % 3 {
                        0 => sel.recv(&crx),
                        1 => sel.recv(&vrx),
                        _ => sel.recv(&tick),
                    };
                }
                let op = sel.select();
                assert_eq!(op.index(), idx[first], "biased, first {first}");
                match first {
                    0 => assert!(op.recv(&crx).is_err()),
                    1 => drop(op.recv(&vrx).unwrap()),
                    _ => drop(op.recv(&tick).unwrap()),
                }
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// one Select cloned across threads
// ---------------------------------------------------------------------------------

/// A `Select` is `Clone + Send + Sync`: clones used at once from four threads (each
/// receiving from two channels and sending to a third) move every value exactly once.
#[test]
fn one_select_cloned_across_threads_moves_every_value_once() {
    watchdog(30, || {
        const N: u32 = 4000;
        let (atx, arx) = chan::bounded::<u32>(3);
        let (btx, brx) = chan::bounded::<u32>(0);
        let (otx, orx) = chan::unbounded::<u32>();
        let done = AtomicUsize::new(0);
        let mut base = Select::new();
        let a = base.recv(&arx);
        let b = base.recv(&brx);
        let stop = chan::never::<u32>();
        base.recv(&stop);
        thread::scope(|s| {
            s.spawn(|| {
                for i in 0..N {
                    atx.send_blocking(i).unwrap();
                }
            });
            s.spawn(|| {
                for i in N..2 * N {
                    btx.send_blocking(i).unwrap();
                }
            });
            for _ in 0..4 {
                let mut sel = base.clone();
                let (otx, done) = (&otx, &done);
                let (arx, brx) = (&arx, &brx);
                s.spawn(move || {
                    while done.load(SeqCst) < 2 * N as usize {
                        let Ok(op) = sel.select_timeout(ms(20)) else {
                            continue;
                        };
                        let v = if op.index() == a {
                            op.recv(arx).unwrap()
                        } else {
                            assert_eq!(op.index(), b);
                            op.recv(brx).unwrap()
                        };
                        otx.send_blocking(v).unwrap();
                        done.fetch_add(1, SeqCst);
                    }
                });
            }
        });
        let mut all: Vec<u32> = orx.try_iter().collect();
        all.sort_unstable();
        assert_eq!(all, (0..2 * N).collect::<Vec<_>>());
    });
}

// ---------------------------------------------------------------------------------
// a rendezvous channel worked by threads, fibers and tasks at once
// ---------------------------------------------------------------------------------

/// A value that counts its drops and remembers its id.
struct Val {
    id: u32,
    drops: Arc<Vec<AtomicUsize>>,
}

impl Drop for Val {
    fn drop(&mut self) {
        self.drops[self.id as usize].fetch_add(1, SeqCst);
    }
}

/// Records a received id; panics on a duplicate.
fn note(seen: &Mutex<Vec<bool>>, v: &Val) {
    let mut s = seen.lock().unwrap();
    assert!(!s[v.id as usize], "value {} received twice", v.id);
    s[v.id as usize] = true;
}

/// A rendezvous channel worked at once by: a thread that sends with timeouts, a fiber
/// that sends through `select_timeout`, a task that sends through `select_async` under
/// a random timeout (its future dropped wherever it stands); and a thread that
/// receives through `select_timeout` beside `never()`, a fiber with `recv_timeout`, a
/// task through `select_async` under a random timeout. Every value is received once or
/// handed back to its sender, and each is dropped exactly once.
#[test]
fn rendezvous_worked_by_threads_fibers_and_tasks_conserves_values() {
    watchdog(60, || {
        const PER: u32 = 1000;
        let total = 3 * PER;
        let drops: Arc<Vec<AtomicUsize>> =
            Arc::new((0..total).map(|_| AtomicUsize::new(0)).collect());
        let seen = Arc::new(Mutex::new(vec![false; total as usize]));
        let returned = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(AtomicUsize::new(0));
        let senders_done = Arc::new(AtomicBool::new(false));
        let rt = common::workers(2);
        let (tx, rx) = chan::bounded::<Val>(0);
        let mk = |id| Val {
            id,
            drops: drops.clone(),
        };
        // Senders.
        let thread_sender = {
            let (tx, returned) = (tx.clone(), returned.clone());
            let vals: Vec<Val> = (0..PER).map(mk).collect();
            thread::spawn(move || {
                for (k, v) in vals.into_iter().enumerate() {
                    if let Err(e) = tx.send_timeout(v, Duration::from_micros(50 * (k % 7) as u64)) {
                        drop(e.into_inner());
                        returned.fetch_add(1, SeqCst);
                    }
                }
            })
        };
        let fiber_sender = {
            let (tx, returned) = (tx.clone(), returned.clone());
            let vals: Vec<Val> = (PER..2 * PER).map(mk).collect();
            fiber_on(&rt, move || {
                let nothing = chan::never::<Val>();
                for (k, v) in vals.into_iter().enumerate() {
                    let mut sel = Select::new();
                    let s = sel.send(&tx);
                    sel.recv(&nothing);
                    match sel.select_timeout(Duration::from_micros(40 * (k % 5) as u64)) {
                        Ok(op) => {
                            assert_eq!(op.index(), s);
                            if let Err(e) = op.send(&tx, v) {
                                drop(e.into_inner());
                                returned.fetch_add(1, SeqCst);
                            }
                        }
                        Err(_) => {
                            drop(v);
                            returned.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        };
        let task_sender = {
            let (tx, returned) = (tx.clone(), returned.clone());
            let vals: Vec<Val> = (2 * PER..3 * PER).map(mk).collect();
            rt.spawn(async move {
                for (k, v) in vals.into_iter().enumerate() {
                    let mut sel = Select::new();
                    sel.send(&tx);
                    let limit = Duration::from_micros(30 * (k % 9) as u64);
                    match weft::time::timeout(limit, sel.select_async()).await {
                        Ok(op) => {
                            if let Err(e) = op.send(&tx, v) {
                                drop(e.into_inner());
                                returned.fetch_add(1, SeqCst);
                            }
                        }
                        Err(_) => {
                            drop(v);
                            returned.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        };
        // Receivers.
        let thread_receiver = {
            let (rx, seen, received, stop) = (
                rx.clone(),
                seen.clone(),
                received.clone(),
                senders_done.clone(),
            );
            thread::spawn(move || {
                let nothing = chan::never::<u8>();
                let mut k = 0u64;
                while !stop.load(SeqCst) {
                    k += 1;
                    let mut sel = Select::new();
                    let r = sel.recv(&rx);
                    sel.recv(&nothing);
                    if let Ok(op) = sel.select_timeout(Duration::from_micros(60 * (k % 4))) {
                        assert_eq!(op.index(), r);
                        if let Ok(v) = op.recv(&rx) {
                            note(&seen, &v);
                            received.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        };
        let fiber_receiver = {
            let (rx, seen, received, stop) = (
                rx.clone(),
                seen.clone(),
                received.clone(),
                senders_done.clone(),
            );
            fiber_on(&rt, move || {
                let mut k = 0u64;
                while !stop.load(SeqCst) {
                    k += 1;
                    if let Ok(v) = rx.recv_timeout(Duration::from_micros(70 * (k % 3))) {
                        note(&seen, &v);
                        received.fetch_add(1, SeqCst);
                    }
                }
            })
        };
        let task_receiver = {
            let (rx, seen, received, stop) = (
                rx.clone(),
                seen.clone(),
                received.clone(),
                senders_done.clone(),
            );
            rt.spawn(async move {
                let mut k = 0u64;
                while !stop.load(SeqCst) {
                    k += 1;
                    let mut sel = Select::new();
                    sel.recv(&rx);
                    let limit = Duration::from_micros(50 * (k % 5));
                    if let Ok(op) = weft::time::timeout(limit, sel.select_async()).await {
                        if let Ok(v) = op.recv(&rx) {
                            note(&seen, &v);
                            received.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        };
        thread_sender.join().unwrap();
        join_within(fiber_sender, 30).unwrap();
        join_within(task_sender, 30).unwrap();
        // Whatever a selected send put in the channel past a receiver that went away
        // is still to be received.
        common::wait_until("the receivers drain the channel", || {
            received.load(SeqCst) + returned.load(SeqCst) == total as usize || rx.is_empty()
        });
        thread::sleep(ms(50));
        senders_done.store(true, SeqCst);
        thread_receiver.join().unwrap();
        join_within(fiber_receiver, 30).unwrap();
        join_within(task_receiver, 30).unwrap();
        drop(tx);
        let mut late = 0;
        while let Ok(v) = rx.try_recv() {
            note(&seen, &v);
            late += 1;
        }
        let (got, back) = (received.load(SeqCst) + late, returned.load(SeqCst));
        assert_eq!(
            got + back,
            total as usize,
            "received {got} + returned {back} != {total}"
        );
        drop(rx);
        drop(rt);
        for (i, d) in drops.iter().enumerate() {
            assert_eq!(
                d.load(SeqCst),
                1,
                "value {i} dropped {} times",
                d.load(SeqCst)
            );
        }
    });
}

/// A send the quick pass chose for the room it saw, on a channel closed before it is
/// performed, fails and hands its value back (nothing dropped, nothing lost).
#[test]
fn quick_selected_send_on_a_channel_closed_meanwhile_returns_its_value() {
    let drops: Arc<Vec<AtomicUsize>> = Arc::new((0..2).map(|_| AtomicUsize::new(0)).collect());
    for close_by_receiver in [false, true] {
        let (tx, rx) = chan::bounded::<Val>(4);
        let mut sel = Select::new();
        sel.send(&tx);
        let op = sel.try_select().expect("room");
        if close_by_receiver {
            drop(rx);
        } else {
            tx.close();
        }
        let id = u32::from(close_by_receiver);
        let v = Val {
            id,
            drops: drops.clone(),
        };
        let back = op.send(&tx, v).expect_err("closed").into_inner();
        assert_eq!(back.id, id);
        assert_eq!(drops[id as usize].load(SeqCst), 0);
        drop(back);
        assert_eq!(drops[id as usize].load(SeqCst), 1);
    }
}

/// A waker that counts its wakes.
fn counting_waker() -> (Arc<AtomicUsize>, Waker) {
    let n = Arc::new(AtomicUsize::new(0));
    let m = n.clone();
    (
        n,
        common::fn_waker(move || {
            m.fetch_add(1, SeqCst);
        }),
    )
}

/// A `select_async` future polled by one waker and then by another (moved to another
/// task) wakes the latest: for a value sent on one of its channels, and for a timer
/// operation off any runtime (the alarm thread) and on a runtime (the wheel).
#[test]
fn select_async_wakes_the_waker_of_its_latest_poll() {
    watchdog(20, || {
        // A channel.
        let (tx, rx) = chan::unbounded::<u32>();
        let (_tx2, rx2) = chan::bounded::<u32>(0);
        let mut sel = Select::new();
        let i = sel.recv(&rx);
        sel.recv(&rx2);
        let mut fut = Box::pin(sel.select_async());
        let (a, wa) = counting_waker();
        let (b, wb) = counting_waker();
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&wa))
            .is_pending());
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&wb))
            .is_pending());
        tx.send_blocking(3).unwrap();
        common::wait_until("the latest waker is woken", || b.load(SeqCst) > 0);
        let _ = a.load(SeqCst);
        let Poll::Ready(op) = fut.as_mut().poll(&mut Context::from_waker(&wb)) else {
            panic!("woken but not ready");
        };
        assert_eq!(op.index(), i);
        assert_eq!(op.recv(&rx), Ok(3));
        drop(fut);
        // A timer, off a runtime and on one.
        for on_runtime in [false, true] {
            let rt = common::workers(1);
            let timer = chan::after(ms(60));
            let mut sel = Select::new();
            let t = sel.recv(&timer);
            sel.recv(&rx2);
            let (a, wa) = counting_waker();
            let (b, wb) = counting_waker();
            let poll_with = |fut: Pin<&mut _>, w: &Waker| {
                if on_runtime {
                    common::on(&rt, || poll_once_with(fut, w))
                } else {
                    poll_once_with(fut, w)
                }
            };
            let mut fut = Box::pin(sel.select_async());
            assert!(poll_with(fut.as_mut(), &wa).is_pending());
            assert!(poll_with(fut.as_mut(), &wb).is_pending());
            common::wait_until("the timer wakes the latest waker", || b.load(SeqCst) > 0);
            let _ = a.load(SeqCst);
            let Poll::Ready(op) = poll_with(fut.as_mut(), &wb) else {
                panic!("woken by the timer but not ready (on a runtime: {on_runtime})");
            };
            assert_eq!(op.index(), t);
            assert!(op.recv(&timer).is_ok());
        }
    });
}

fn poll_once_with<'f, 'a>(
    fut: Pin<&mut (impl Future<Output = chan::SelectedOperation<'a>> + 'f)>,
    w: &Waker,
) -> Poll<chan::SelectedOperation<'a>> {
    fut.poll(&mut Context::from_waker(w))
}
