//! Review attacks on `weft::chan` and the `waitlist` layer (issue 15), from safe code
//! only (the public API). Each test asserts the behaviour the API promises; the ones
//! that fail name a bug (see the comment above each). Cases that hang a thread for ever
//! or may crash run in a child process (this binary again, with
//! `WEFT_CHAN_REVIEW_CHILD` naming the case) under a time limit.

mod chan_common;
mod common;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use chan_common::{hook_waker, poll_with, watchdog, Drops, Hooks, Tracked};
use weft::chan::{self, Receiver, RecvTimeoutError, Select, Sender, TryRecvError};

const CHILD: &str = "WEFT_CHAN_REVIEW_CHILD";

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

fn noop_poll<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    poll_with(fut, Waker::noop())
}

fn rt(n: usize) -> weft::Runtime {
    weft::Builder::new().worker_threads(n).build().unwrap()
}

/// Polls the `Stream` of `rx` once.
fn poll_next<T>(rx: &mut Receiver<T>, w: &Waker) -> Poll<Option<T>> {
    use futures_core::Stream;
    let mut cx = Context::from_waker(w);
    Pin::new(rx).poll_next(&mut cx)
}

/// `StreamExt::next`.
fn next<T>(rx: &mut Receiver<T>) -> impl Future<Output = Option<T>> + '_ {
    use futures_core::Stream;
    poll_fn(move |cx| Pin::new(&mut *rx).poll_next(cx))
}

// ---------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------

/// Not a real test unless run as a child: runs the case named by the variable.
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "waker_drop_reenters_channel" => child_waker_drop_reenters_channel(),
        "waker_clone_reenters_channel" => child_waker_clone_reenters_channel(),
        "waker_drop_drops_last_sender" => child_waker_drop_drops_last_sender(),
        "timer_thread_alarm_new_waker" => child_timer_thread_alarm_new_waker(),
        "timer_wheel_of_dropped_runtime" => child_timer_wheel_of_dropped_runtime(),
        "select_async_timer_off_runtime" => child_select_async_timer_off_runtime(),
        "wake_panic_during_select_pairing" => child_wake_panic_during_select_pairing(),
        "clone_panic_during_recv_pairing" => child_clone_panic_during_recv_pairing(),
        "runtime_drop_mid_select" => child_runtime_drop_mid_select(false),
        "shutdown_timeout_mid_select" => child_runtime_drop_mid_select(true),
        "forgotten_futures" => child_forgotten_futures(),
        "thread_alarms_linger" => child_thread_alarms_linger(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str, secs: u64) -> common::child::Output {
    common::child::run_case(CHILD, case, Duration::from_secs(secs))
}

// ---------------------------------------------------------------------------------
// 1. A select_async future re-polled with a new waker can lose its wake-up
// ---------------------------------------------------------------------------------

/// `Machine::poll` (select.rs, the `refresh_waker` loop): when a registered select is
/// polled with a waker that differs from the one it registered with, it replaces the
/// waker of each node in turn, under each channel's lock, but it checked the group's
/// winner *before* the loop and does not check again after it. A sender that wins the
/// group in between takes the old waker from its node and wakes that one; the new
/// waker is then stored in a node that is off every list, and the poll returns
/// `Pending`. Nobody ever wakes the new waker: the select (moved to another task, or
/// polled by a combinator that uses per-poll wakers) sleeps for ever although its
/// operation completed. The slow `clone` only widens the window.
#[test]
fn select_async_repolled_with_new_waker_does_not_lose_its_wakeup() {
    watchdog(20, || {
        let (_tx0, rx0) = chan::unbounded::<u32>();
        let (tx1, rx1) = chan::unbounded::<u32>();
        let mut sel = Select::new();
        sel.recv(&rx0);
        let i1 = sel.recv(&rx1);
        let mut fut = Box::pin(sel.select_async());

        let first = Hooks::counting();
        assert!(poll_with(fut.as_mut(), &hook_waker(&first)).is_pending());

        // The second waker's clone takes a while (an allocation, a lock, a log line...).
        let second = Hooks::new(|| std::thread::sleep(Duration::from_millis(50)), || {});
        let w2 = hook_waker(&second);
        second.arm(true);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx1.send_blocking(7).unwrap();
            tx1
        });
        let r = poll_with(fut.as_mut(), &w2);
        second.arm(false);
        let _tx1 = sender.join().unwrap();
        if r.is_pending() {
            // The value was handed to the select: nothing is left in the channel.
            std::thread::sleep(Duration::from_millis(200));
            let woken = second.wakes();
            let ready = poll_with(fut.as_mut(), &w2);
            assert!(
                woken > 0,
                "lost wake-up: the select's operation completed (next poll: {}), the old \
                 waker was woken {} time(s), the current one never",
                if ready.is_ready() { "Ready" } else { "Pending" },
                first.wakes(),
            );
            if let Poll::Ready(op) = ready {
                assert_eq!(op.index(), i1);
                assert_eq!(op.recv(&rx1), Ok(7));
            }
        } else if let Poll::Ready(op) = r {
            assert_eq!(op.index(), i1);
            assert_eq!(op.recv(&rx1), Ok(7));
        }
    });
}

/// The same race without the slow clone: many rounds of a select polled by one waker,
/// then by another while a sender sends; counts the rounds where the current waker was
/// never woken although the select's operation completed.
#[test]
fn select_async_waker_swap_race_stress() {
    watchdog(60, || {
        const CHANS: usize = 32;
        let mut lost = 0;
        for round in 0..3000u32 {
            let ends: Vec<_> = (0..CHANS).map(|_| chan::unbounded::<u32>()).collect();
            let mut sel = Select::new();
            for (_, rx) in &ends {
                sel.recv(rx);
            }
            let mut fut = Box::pin(sel.select_async());
            let a = Hooks::counting();
            assert!(poll_with(fut.as_mut(), &hook_waker(&a)).is_pending());
            let b = Hooks::counting();
            let wb = hook_waker(&b);
            let tx = ends[CHANS - 1].0.clone();
            let go = Arc::new(AtomicBool::new(false));
            let go2 = go.clone();
            let spin = (round % 64) as u64;
            let t = std::thread::spawn(move || {
                while !go2.load(SeqCst) {
                    std::hint::spin_loop();
                }
                for _ in 0..spin * 20 {
                    std::hint::spin_loop();
                }
                tx.send_blocking(round).unwrap();
            });
            go.store(true, SeqCst);
            let r = poll_with(fut.as_mut(), &wb);
            t.join().unwrap();
            if r.is_pending() {
                // The send is done (joined): the select has won by now.
                if b.wakes() == 0 {
                    lost += 1;
                }
                let r2 = poll_with(fut.as_mut(), &wb);
                assert!(
                    r2.is_ready(),
                    "the send completed: the select must be ready"
                );
            }
        }
        assert_eq!(lost, 0, "{lost} rounds lost the current waker's wake-up");
    });
}

// ---------------------------------------------------------------------------------
// 2. Waker clone/drop run under the channel's lock
// ---------------------------------------------------------------------------------

/// `Node::set_waker` (waitlist/mod.rs) clones the new waker and drops the old one
/// while the channel's (non-reentrant, spinning) lock is held: user code under a weft
/// lock, which waitlist/depth.rs says never happens. A waker whose `drop` touches the
/// same channel (here `len()`; in practice: a waker that owns the last `Sender`, see
/// below) spins for ever on the lock its own thread holds.
#[test]
fn waker_drop_reenters_channel() {
    let out = run_child("waker_drop_reenters_channel", 10);
    out.assert_finished();
}

fn child_waker_drop_reenters_channel() {
    let (tx, rx) = chan::unbounded::<u32>();
    let tx2 = tx.clone();
    let hooks = Hooks::new(
        || {},
        move || {
            let _ = tx2.len();
        },
    );
    let w1 = hook_waker(&hooks);
    let mut fut = Box::pin(rx.recv());
    assert!(poll_with(fut.as_mut(), &w1).is_pending());
    hooks.arm(true);
    // Polled again with another waker: the node's old waker (a clone of `w1`) is
    // dropped under the lock.
    let w2 = Waker::noop();
    assert!(poll_with(fut.as_mut(), w2).is_pending());
    hooks.arm(false);
    drop(fut);
    drop(tx);
}

/// Until session 27 `Node::set_waker` cloned the waker under the wait-list lock, and a
/// waker whose clone used the same channel deadlocked; a waker that is not a weft
/// task's is now cloned before the lock (`task::waker::Prepared`).
#[test]
fn waker_clone_reenters_channel() {
    let out = run_child("waker_clone_reenters_channel", 10);
    out.assert_finished();
}

fn child_waker_clone_reenters_channel() {
    let (tx, rx) = chan::bounded::<u32>(0);
    let tx2 = tx.clone();
    let hooks = Hooks::new(
        move || {
            let _ = tx2.is_full();
        },
        || {},
    );
    let w = hook_waker(&hooks);
    hooks.arm(true);
    let mut fut = Box::pin(rx.recv());
    // The first poll registers the node: `cx.waker().clone()` under the lock.
    assert!(poll_with(fut.as_mut(), &w).is_pending());
    hooks.arm(false);
    drop(fut);
    drop(tx);
}

/// The realistic shape of the same bug: the last `Sender` lives in a waker's state
/// (an executor's task that owns it, a notifier that owns it). The receive future is
/// polled by one task and then another; replacing the first waker drops it under the
/// lock, which drops the last `Sender`, which disconnects the channel: `close` takes
/// the lock again on the same thread.
#[test]
fn waker_drop_drops_last_sender() {
    let out = run_child("waker_drop_drops_last_sender", 10);
    out.assert_finished();
}

fn child_waker_drop_drops_last_sender() {
    let (tx, rx) = chan::unbounded::<u32>();
    let slot = Arc::new(Mutex::new(Some(tx)));
    let slot2 = slot.clone();
    // The waker owns the last sender through `slot` (dropped with the waker's last
    // handle; here: when the hook runs on drop).
    let hooks = Hooks::new(|| {}, move || drop(slot2.lock().unwrap().take()));
    let w1 = hook_waker(&hooks);
    let mut fut = Box::pin(rx.recv());
    assert!(poll_with(fut.as_mut(), &w1).is_pending());
    drop(w1);
    hooks.arm(true);
    assert!(poll_with(fut.as_mut(), Waker::noop()).is_pending());
    hooks.arm(false);
    // The sender is gone: the receive ends with `Err`.
    assert!(matches!(noop_poll(fut.as_mut()), Poll::Ready(Err(_))));
    assert!(slot.lock().unwrap().is_none());
}

// ---------------------------------------------------------------------------------
// 3. The Stream's node keeps a value handed to it while nobody polls the stream
// ---------------------------------------------------------------------------------

/// `Receiver`'s `Stream` (chan/mod.rs `poll_next`, ops.rs `StreamRecv`) leaves its node
/// on the receivers' list after a `Pending` poll, inside the receiver, for as long as
/// the receiver lives. The tokio pattern `timeout(rx.next())` (or `select!` on
/// `rx.next()`) drops the `next()` future but not that registration: the next value
/// sent is handed to the stream's node, where neither `recv`, `try_recv`, `len`, nor
/// another receiver can see it. `recv()` then waits for a value that is already
/// there: a lost value until the stream is polled again (a hang if it never is).
#[test]
fn stream_next_dropped_then_recv_sees_the_value() {
    watchdog(20, || {
        let rt = rt(2);
        let (tx, mut rx) = chan::unbounded::<u32>();
        let got = rt.block_on(async move {
            // `next()` times out: the future is dropped, its registration stays.
            let first = weft::time::timeout(Duration::from_millis(10), next(&mut rx)).await;
            assert!(first.is_err());
            tx.send(5).await.unwrap();
            // The ordinary receive of the same receiver.
            weft::time::timeout(Duration::from_millis(500), rx.recv()).await
        });
        assert_eq!(
            got,
            Ok(Ok(5)),
            "the value sent after a timed-out `next()` is invisible to `recv()`"
        );
    });
}

#[test]
fn stream_registration_hides_value_from_try_recv_and_len() {
    let (tx, mut rx) = chan::unbounded::<u32>();
    assert!(poll_next(&mut rx, Waker::noop()).is_pending());
    tx.send_blocking(1).unwrap();
    let len = rx.len();
    let tried = rx.try_recv();
    assert_eq!(
        (len, tried),
        (1, Ok(1)),
        "a sent value is held by the idle stream node"
    );
}

#[test]
fn stream_registration_starves_a_cloned_receiver() {
    watchdog(20, || {
        let (tx, mut rx) = chan::bounded::<u32>(4);
        let rx2 = rx.clone();
        assert!(poll_next(&mut rx, Waker::noop()).is_pending());
        let t = std::thread::spawn(move || rx2.recv_timeout(Duration::from_millis(500)));
        std::thread::sleep(Duration::from_millis(50));
        tx.send_blocking(9).unwrap();
        assert_eq!(
            t.join().unwrap(),
            Ok(9),
            "the waiting clone starves while the value sits in the idle stream node"
        );
        drop(rx);
    });
}

// ---------------------------------------------------------------------------------
// 4. Ordered channel: a cancelled receive's put-back overwrites another's
// ---------------------------------------------------------------------------------

/// `PutBack::drop` (ordered.rs) stores the handle it was joining in `head` with
/// `*slot = Some(h)`, dropping (detaching) a handle another cancelled receive put
/// there first. `OrderedReceiver::recv` takes `&self`, so two receives can be in
/// progress at once (`join!`, two arms of a `select!`): when both are cancelled while
/// joining, the first handle's result is lost, and the next receive returns the second
/// result first (send order broken).
#[test]
fn ordered_two_cancelled_receives_lose_nothing() {
    watchdog(20, || {
        let rt = rt(2);
        let (tx, rx) = chan::ordered::<u32>(4);
        for i in 0..2u32 {
            rt.block_on(async {
                tx.spawn(async move {
                    weft::time::sleep(Duration::from_millis(100)).await;
                    i
                })
                .unwrap();
            });
        }
        drop(tx);
        {
            let mut a = Box::pin(rx.recv());
            let mut b = Box::pin(rx.recv());
            // Each takes a handle and starts joining it.
            assert!(noop_poll(a.as_mut()).is_pending());
            assert!(noop_poll(b.as_mut()).is_pending());
            // Both cancelled (a timeout, a select! arm that lost).
            drop(a);
            drop(b);
        }
        let first = rx.recv_blocking().map(|r| r.unwrap());
        let second = rx.recv_blocking().map(|r| r.unwrap());
        assert_eq!(
            (first, second),
            (Ok(0), Ok(1)),
            "results lost or out of send order"
        );
    });
}

// ---------------------------------------------------------------------------------
// 5. A selected timer receive dropped unperformed loses the timer's message
// ---------------------------------------------------------------------------------

/// `TimerNode::try_now` (select.rs) takes the timer's message when the select picks it,
/// and `TimerNode::release` does nothing: a `SelectedOperation` dropped unperformed
/// gives a channel's value back (documented: "Dropping it unperformed gives back what
/// it held"), but an `after`/`at` receiver's one message is gone, and every later
/// receive on it waits for ever.
#[test]
fn unperformed_selected_timer_receive_gives_its_message_back() {
    watchdog(20, || {
        let t = chan::after(Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        let mut sel = Select::new();
        let i = sel.recv(&t);
        let op = sel.select();
        assert_eq!(op.index(), i);
        drop(op);
        assert!(
            t.recv_timeout(Duration::from_millis(300)).is_ok(),
            "the `after` message was lost with the unperformed selected operation"
        );
    });
}

// ---------------------------------------------------------------------------------
// 6. Timer receivers off a runtime
// ---------------------------------------------------------------------------------

/// `Alarm::Thread` (timer.rs): with no runtime in the program, the async receive of a
/// timer receiver spawns a thread that wakes the waker of the poll that armed it; a
/// later poll with another waker for the same deadline (`*armed == deadline`) arms
/// nothing, so the current waker is never woken and the receive sleeps for ever.
#[test]
fn timer_recv_future_repolled_with_new_waker_off_runtime() {
    let out = run_child("timer_thread_alarm_new_waker", 10);
    out.assert_finished();
}

fn child_timer_thread_alarm_new_waker() {
    let t = chan::after(Duration::from_millis(100));
    let mut fut = Box::pin(t.recv());
    let a = Hooks::counting();
    assert!(poll_with(fut.as_mut(), &hook_waker(&a)).is_pending());
    let b = Hooks::counting();
    let wb = hook_waker(&b);
    assert!(poll_with(fut.as_mut(), &wb).is_pending());
    std::thread::sleep(Duration::from_millis(400));
    println!("CHILD old_wakes={} new_wakes={}", a.wakes(), b.wakes());
    assert!(
        b.wakes() > 0,
        "the current waker was never woken at the deadline"
    );
    assert!(poll_with(fut.as_mut(), &wb).is_ready());
}

/// `Alarm::new` (timer.rs) binds the async receive of a timer receiver polled outside
/// any runtime to the latest live runtime's wheel. When that runtime is dropped, its
/// wheel is never turned again: the receive, waiting in `weft::wait` on a plain
/// thread, never wakes although the deadline passed.
#[test]
fn timer_recv_bound_to_a_runtime_that_is_dropped() {
    let out = run_child("timer_wheel_of_dropped_runtime", 10);
    out.assert_finished();
}

fn child_timer_wheel_of_dropped_runtime() {
    let rt = rt(1);
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let after = chan::after(Duration::from_millis(200));
        // A plain thread, no runtime entered: the alarm goes to `rt`'s wheel.
        let mut f = Box::pin(after.recv());
        let r = weft::wait(poll_fn(|cx| {
            let _ = tx.send(());
            f.as_mut().poll(cx)
        }));
        r.is_ok()
    });
    rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    drop(rt);
    let start = Instant::now();
    while !t.is_finished() {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "hang: the timer receive never woke after its runtime was dropped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(t.join().unwrap());
}

/// `Select::select_async` with a timer operation, driven from a plain thread where no
/// runtime is current: documented to "need a weft runtime"; this shows what happens
/// (weft panics inside the select's poll).
#[test]
fn select_async_with_timer_off_runtime() {
    let out = run_child("select_async_timer_off_runtime", 10);
    out.assert_finished();
}

fn child_select_async_timer_off_runtime() {
    let t = chan::after(Duration::from_millis(20));
    let (_tx, rx) = chan::unbounded::<u32>();
    let mut sel = Select::new();
    let i = sel.recv(&t);
    sel.recv(&rx);
    let op = weft::wait(sel.select_async());
    assert_eq!(op.index(), i);
    assert!(op.recv(&t).is_ok());
}

// ---------------------------------------------------------------------------------
// 7. A panic between a pairing and its bookkeeping leaves a dangling partner (UAF)
// ---------------------------------------------------------------------------------

/// A waker whose `wake` panics: safe code (`std::task::Wake`).
struct PanicWake;

impl std::task::Wake for PanicWake {
    fn wake(self: Arc<Self>) {
        panic!("this waker panics when woken");
    }
}

/// `Chan::select_recv_now` (core.rs) pairs a select's receive node with a waiting
/// select's send (both `partner` pointers set, the sender's group won, its waker
/// queued), returns `Won::Pending`, and only then flushes its `WakeBatch` (the batch is
/// a local dropped after the return value is computed). If that wake panics, the
/// receiving select never learns that it paired: `Machine::paired` is not set, so
/// `Machine::drop` releases nothing and frees the node while the sender's node still
/// points to it. The sending select then completes (`complete_send` writes the value
/// into `(*partner)` and takes its waker) or is dropped (`release_won` writes
/// `(*partner).partner` and `reason`): a write to freed memory. The panic comes from
/// someone else's waker: 100% safe code on both sides.
#[test]
fn wake_panic_during_select_pairing_leaves_no_dangling_partner() {
    let out = run_child("wake_panic_during_select_pairing", 20);
    out.assert_finished();
}

fn child_wake_panic_during_select_pairing() {
    let (tx, rx) = chan::bounded::<String>(0);
    let mut s_sel = Select::new();
    let si = s_sel.send(&tx);
    let mut s_fut = Box::pin(s_sel.select_async());
    let pw = Waker::from(Arc::new(PanicWake));
    // The sending select waits, registered with a waker that panics.
    assert!(poll_with(s_fut.as_mut(), &pw).is_pending());
    // A receiving select pairs with it; flushing the sender's waker panics there.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.select();
        op.recv(&rx)
    }));
    assert!(
        r.is_err(),
        "the receiving select panicked with the sender's waker"
    );
    // The program goes on allocating: the freed node's memory is reused.
    let filler = fillers();
    // The sending select won its group: it completes into the receiver's (freed) node.
    // The receive that paired with the sending select is gone: the select either
    // completes into a node that is still alive or (weft's fix: the pairing is undone
    // as the receive unwinds) goes back to waiting. Either way no freed memory is
    // touched.
    match noop_poll(s_fut.as_mut()) {
        Poll::Ready(op) => {
            assert_eq!(op.index(), si);
            let r = op.send(&tx, "x".repeat(64));
            println!("CHILD send={r:?}");
        }
        Poll::Pending => println!("CHILD the sending select waits again"),
    }
    drop(s_fut);
    check_fillers(&filler);
}

/// The same with a plain `recv()` future: `Chan::poll_recv` (core.rs, the
/// `Fail::Paired` arm) clones the waker into the node after the pairing, under the
/// lock, and sets `*registered = true` only after that; a `clone` that panics leaves
/// `registered == false`, so the future's `Drop` does not call `cancel_recv`
/// (`abandon_partner`) and the sending select's node keeps a pointer to the freed node.
/// (A panicking `clone` needs a custom `RawWakerVTable`.)
#[test]
fn clone_panic_during_recv_pairing_leaves_no_dangling_partner() {
    let out = run_child("clone_panic_during_recv_pairing", 20);
    out.assert_finished();
}

fn child_clone_panic_during_recv_pairing() {
    let (tx, rx) = chan::bounded::<String>(0);
    let mut s_sel = Select::new();
    let si = s_sel.send(&tx);
    let mut s_fut = Box::pin(s_sel.select_async());
    assert!(noop_poll(s_fut.as_mut()).is_pending());
    let hooks = Hooks::new(|| panic!("this waker's clone panics"), || {});
    let w = hook_waker(&hooks);
    {
        let mut rf = Box::pin(rx.recv());
        hooks.arm(true);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            poll_with(rf.as_mut(), &w).is_pending()
        }));
        hooks.arm(false);
        assert!(r.is_err());
        // `rf` is dropped here.
    }
    let filler = fillers();
    // The receive that paired with the sending select is gone: the select either
    // completes into a node that is still alive or (weft's fix: the pairing is undone
    // as the receive unwinds) goes back to waiting. Either way no freed memory is
    // touched.
    match noop_poll(s_fut.as_mut()) {
        Poll::Ready(op) => {
            assert_eq!(op.index(), si);
            let r = op.send(&tx, "y".repeat(64));
            println!("CHILD send={r:?}");
        }
        Poll::Pending => println!("CHILD the sending select waits again"),
    }
    drop(s_fut);
    check_fillers(&filler);
}

/// Blocks of every small size, filled with 0xFF: one of them takes the memory of a node
/// freed just before (malloc reuses the last freed block of a size first).
fn fillers() -> Vec<Vec<u8>> {
    (2..=48)
        .flat_map(|k| (0..4).map(move |_| vec![0xFFu8; k * 8]))
        .collect()
}

fn check_fillers(fillers: &[Vec<u8>]) {
    let hit = fillers
        .iter()
        .filter(|f| f.iter().any(|&b| b != 0xFF))
        .count();
    assert_eq!(
        hit, 0,
        "use after free: weft wrote into {hit} block(s) freed and reused by the program"
    );
}

// ---------------------------------------------------------------------------------
// 8. A selected send holding a buffer slot blocks (and can hang for ever)
// ---------------------------------------------------------------------------------

/// `Chan::complete_send` (core.rs, the `is_reserved` arm) assumes "the slot was held,
/// so there is room" and otherwise reports the channel closed; but a value given back
/// by a cancelled receive (`give_back_locked`, pushed to the front "whatever the
/// capacity") or by an unperformed selected receive fills the buffer past its
/// capacity, so the reserved slot is no longer room. `complete_send` then returns
/// `Err(v)` on an open channel, and `SelectedOperation::send` (select.rs, the last
/// arm) falls back to `send_blocking`: the selected send blocks, although a selected
/// operation must complete without blocking. With no other receiver (here: the
/// only thread), it blocks for ever. Found by `selects_everywhere_bounded_1`, whose
/// plain threads both hung there.
#[test]
fn selected_send_with_a_held_slot_does_not_block() {
    watchdog(20, || {
        let (tx, rx) = chan::bounded::<u32>(1);
        let mut sel = Select::new();
        let i = sel.send(&tx);
        // The select holds the one slot.
        let op = sel.try_select().unwrap();
        assert_eq!(op.index(), i);
        // A receive waits; a value is handed to it; the receive is cancelled: the value
        // goes back to the buffer, which is now over its capacity.
        {
            let mut f = Box::pin(rx.recv());
            assert!(noop_poll(f.as_mut()).is_pending());
            tx.try_send(1).unwrap();
        }
        assert_eq!(rx.len(), 1);
        let done = AtomicBool::new(false);
        let blocked = std::thread::scope(|s| {
            let t = s.spawn(|| {
                let r = op.send(&tx, 2);
                done.store(true, SeqCst);
                r
            });
            let start = Instant::now();
            while !done.load(SeqCst) && start.elapsed() < Duration::from_millis(500) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let blocked = !done.load(SeqCst);
            // Unblock it, to end the test either way.
            let first = rx.recv_blocking();
            assert!(t.join().unwrap().is_ok());
            assert_eq!(first, Ok(1));
            blocked
        });
        assert_eq!(rx.try_recv(), Ok(2));
        assert!(
            !blocked,
            "the selected send blocked in send_blocking (it waited for a receiver)"
        );
    });
}

// =================================================================================
// Attacks that found nothing (they pass; kept as regression tests)
// =================================================================================

/// Ids handed out to `Tracked` values across a test.
struct Ids {
    next: AtomicUsize,
    drops: Drops,
}

impl Ids {
    fn new(n: usize) -> Arc<Ids> {
        Arc::new(Ids {
            next: AtomicUsize::new(0),
            drops: Drops::new(n),
        })
    }
    fn make(&self) -> Tracked {
        let id = self.next.fetch_add(1, SeqCst);
        self.drops.make(id)
    }
    /// Every value made was dropped exactly once.
    fn check_all_dropped_once(&self) {
        let n = self.next.load(SeqCst);
        for id in 0..n {
            assert_eq!(
                self.drops.get(id),
                1,
                "value {id} dropped {} times",
                self.drops.get(id)
            );
        }
    }
}

/// What one participant did.
#[derive(Default)]
struct Log {
    sent: Vec<usize>,
    got: Vec<usize>,
}

/// One step of a select over sends and receives on two channels (duplicates of one
/// receiver included), in the blocking form with a short timeout or as `try_select`;
/// the selected operation is sometimes dropped unperformed.
fn select_step(
    r: &mut chan_common::Rng,
    ids: &Ids,
    ends: &[(Sender<Tracked>, Receiver<Tracked>)],
    log: &mut Log,
) {
    let mut sel = Select::new();
    let mut ops = vec![];
    for (tx, rx) in ends {
        ops.push((sel.send(tx), Some(tx), None));
        ops.push((sel.recv(rx), None, Some(rx)));
        if r.below(2) == 0 {
            ops.push((sel.recv(rx), None, Some(rx)));
        }
    }
    let op = if r.below(3) == 0 {
        sel.try_select().ok()
    } else {
        sel.select_timeout(Duration::from_millis(r.below(3))).ok()
    };
    let Some(op) = op else { return };
    if r.below(5) == 0 {
        drop(op);
        return;
    }
    let (_, tx, rx) = ops.iter().find(|o| o.0 == op.index()).unwrap();
    if let Some(tx) = tx {
        let v = ids.make();
        let id = v.id;
        if op.send(tx, v).is_ok() {
            log.sent.push(id);
        }
    } else if let Ok(v) = op.recv(rx.unwrap()) {
        log.got.push(v.id);
    }
}

/// Async form of [`select_step`]: the select future is dropped at a random poll.
async fn select_step_async(
    r: &mut chan_common::Rng,
    ids: &Ids,
    ends: &[(Sender<Tracked>, Receiver<Tracked>)],
    log: &mut Log,
) {
    let mut sel = Select::new();
    let mut ops = vec![];
    for (tx, rx) in ends {
        ops.push((sel.send(tx), Some(tx), None));
        ops.push((sel.recv(rx), None, Some(rx)));
    }
    let polls = r.below(6);
    let Some(op) = chan_common::drop_after(polls, sel.select_async()).await else {
        return;
    };
    if r.below(5) == 0 {
        drop(op);
        return;
    }
    let (_, tx, rx) = ops.iter().find(|o| o.0 == op.index()).unwrap();
    if let Some(tx) = tx {
        let v = ids.make();
        let id = v.id;
        if op.send(tx, v).is_ok() {
            log.sent.push(id);
        }
    } else if let Ok(v) = op.recv(rx.unwrap()) {
        log.got.push(v.id);
    }
}

/// Threads, fibers and tasks all select over sends *and* receives on the same two
/// channels (so selects pair with selects, two selects race for one partner, a select
/// meets its own send), drop selected operations unperformed and select futures at
/// random points. Every value sent is received exactly once; every value made is
/// dropped exactly once.
fn selects_everywhere(cap: usize) {
    watchdog(60, move || {
        let rt = rt(2);
        let ids = Ids::new(200_000);
        let ends: Arc<Vec<_>> = Arc::new((0..2).map(|_| chan::bounded::<Tracked>(cap)).collect());
        let logs = Arc::new(Mutex::new(Vec::<Log>::new()));
        // Participants that finished their steps keep receiving until all have: a
        // selected send that blocks (bug 8, `selected_send_with_a_held_slot_...`) is
        // then unblocked instead of hanging the test.
        let done = Arc::new(AtomicUsize::new(0));
        const ALL: usize = 6;
        fn drain(ends: &[(Sender<Tracked>, Receiver<Tracked>)], log: &mut Log) {
            for (_, rx) in ends {
                while let Ok(v) = rx.try_recv() {
                    log.got.push(v.id);
                }
            }
        }
        const STEPS: usize = 1500;
        let mut threads = vec![];
        for k in 0..2u64 {
            let (ids, ends, logs, done) = (ids.clone(), ends.clone(), logs.clone(), done.clone());
            threads.push(std::thread::spawn(move || {
                let mut r = chan_common::Rng::new(k + 1);
                let mut log = Log::default();
                for _ in 0..STEPS {
                    select_step(&mut r, &ids, &ends, &mut log);
                }
                done.fetch_add(1, SeqCst);
                while done.load(SeqCst) < ALL {
                    drain(&ends, &mut log);
                    std::thread::yield_now();
                }
                logs.lock().unwrap().push(log);
            }));
        }
        let mut handles = vec![];
        for k in 0..2u64 {
            let (ids, ends, logs, done) = (ids.clone(), ends.clone(), logs.clone(), done.clone());
            handles.push(chan_common::fiber_on(&rt, move || {
                let mut r = chan_common::Rng::new(k + 11);
                let mut log = Log::default();
                for _ in 0..STEPS {
                    select_step(&mut r, &ids, &ends, &mut log);
                }
                done.fetch_add(1, SeqCst);
                while done.load(SeqCst) < ALL {
                    drain(&ends, &mut log);
                    weft::fiber::yield_now();
                }
                logs.lock().unwrap().push(log);
            }));
        }
        for k in 0..2u64 {
            let (ids, ends, logs, done) = (ids.clone(), ends.clone(), logs.clone(), done.clone());
            handles.push(rt.spawn(async move {
                let mut r = chan_common::Rng::new(k + 21);
                let mut log = Log::default();
                for _ in 0..STEPS {
                    // Bounded in time: a select that waits for ever is dropped.
                    let _ = weft::time::timeout(
                        Duration::from_millis(5),
                        select_step_async(&mut r, &ids, &ends, &mut log),
                    )
                    .await;
                }
                done.fetch_add(1, SeqCst);
                while done.load(SeqCst) < ALL {
                    drain(&ends, &mut log);
                    weft::time::sleep(Duration::from_micros(100)).await;
                }
                logs.lock().unwrap().push(log);
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        for h in handles {
            chan_common::join_within(h, 30).unwrap();
        }
        let mut sent = vec![];
        let mut got = vec![];
        for log in logs.lock().unwrap().drain(..) {
            sent.extend(log.sent);
            got.extend(log.got);
        }
        for (_, rx) in ends.iter() {
            while let Ok(v) = rx.try_recv() {
                got.push(v.id);
            }
        }
        sent.sort_unstable();
        got.sort_unstable();
        let n = sent.len();
        assert!(n > 100, "too little traffic: {n}");
        assert_same(&got, &sent);
        drop(ends);
        drop(rt);
        ids.check_all_dropped_once();
    });
}

#[test]
fn selects_everywhere_rendezvous() {
    selects_everywhere(0);
}

#[test]
fn selects_everywhere_bounded_1() {
    selects_everywhere(1);
}

/// Plain `recv()`/`send()` futures polled from two threads in turn, each poll with a
/// fresh waker, while the other side works at random moments: after the partner's
/// operation completes, the waker of the latest poll is woken (or the next poll is
/// ready at once). Also drops the futures on a third thread.
#[test]
fn futures_polled_from_two_threads_with_new_wakers() {
    watchdog(60, || {
        let mut lost = 0;
        for round in 0..2000u64 {
            let (tx, rx) = chan::bounded::<u64>((round % 3) as usize);
            let rx = Arc::new(rx);
            let rx2 = rx.clone();
            let (ptx, prx) =
                mpsc::channel::<(Pin<Box<dyn Future<Output = _> + Send>>, Arc<Hooks>)>();
            let fut: Pin<Box<dyn Future<Output = _> + Send>> =
                Box::pin(async move { rx2.recv().await });
            let h = Hooks::counting();
            let mut fut = fut;
            assert!(poll_with(fut.as_mut(), &hook_waker(&h)).is_pending());
            // Another thread polls it with its own waker.
            let poller = std::thread::spawn(move || {
                let (mut fut, _): (Pin<Box<dyn Future<Output = _> + Send>>, _) =
                    prx.recv().unwrap();
                let h2 = Hooks::counting();
                let r = poll_with(fut.as_mut(), &hook_waker(&h2));
                (fut, h2, r.is_ready())
            });
            let sender = std::thread::spawn(move || {
                for _ in 0..(round % 50) {
                    std::hint::spin_loop();
                }
                tx.send_blocking(round).unwrap();
                tx
            });
            ptx.send((fut, h.clone())).unwrap();
            let (mut fut, h2, ready) = poller.join().unwrap();
            let _tx = sender.join().unwrap();
            if !ready && h2.wakes() == 0 {
                lost += 1;
            }
            // Dropped (or finished) on a third thread.
            std::thread::spawn(move || {
                if !ready {
                    let r = poll_with(fut.as_mut(), Waker::noop());
                    assert_eq!(r, Poll::Ready(Ok(round)));
                }
                drop(fut);
            })
            .join()
            .unwrap();
            drop(rx);
        }
        assert_eq!(lost, 0, "{lost} rounds lost the wake-up");
    });
}

/// The stream's node holding a handed value while the receiver moves to another
/// thread and is dropped there, with a clone alive: the value goes to the clone.
#[test]
fn stream_value_given_back_when_receiver_dropped_elsewhere() {
    watchdog(20, || {
        for cap in [Some(0), Some(1), None] {
            let (tx, mut rx) = chan_common::make::<u32>(cap);
            let rx2 = rx.clone();
            assert!(poll_next(&mut rx, Waker::noop()).is_pending());
            let t = std::thread::spawn(move || tx.send_blocking(3));
            std::thread::sleep(Duration::from_millis(20));
            std::thread::spawn(move || drop(rx)).join().unwrap();
            assert_eq!(
                rx2.recv_timeout(Duration::from_secs(2)),
                Ok(3),
                "cap {cap:?}"
            );
            assert!(t.join().unwrap().is_ok());
        }
    });
}

/// A `SelectedOperation` performed with the wrong end panics (documented); the value
/// it held then goes back to its channel.
#[test]
fn wrong_end_panics_and_gives_the_value_back() {
    let (tx, rx) = chan::unbounded::<u32>();
    let (_tx2, rx2) = chan::unbounded::<u32>();
    tx.send_blocking(1).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    sel.recv(&rx2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let op = sel.select();
        // Whichever it is, use the other receiver.
        let _ = op.recv(&rx2);
    }));
    assert!(r.is_err());
    assert_eq!(rx.try_recv(), Ok(1));
    // A clone of the selected receiver is the same end.
    tx.send_blocking(2).unwrap();
    let rxc = rx.clone();
    let mut sel = Select::new();
    sel.recv(&rx);
    assert_eq!(sel.select().recv(&rxc), Ok(2));
}

/// Fibers and tasks blocked in `Select::select` / `select_async` over two channels
/// (rendezvous and bounded(1)) are aborted at random while values flow: every value
/// sent is received exactly once.
#[test]
fn aborted_selects_lose_nothing() {
    watchdog(60, || {
        let rt = rt(2);
        let (tx0, rx0) = chan::bounded::<u64>(0);
        let (tx1, rx1) = chan::bounded::<u64>(1);
        let got = Arc::new(Mutex::new(Vec::<u64>::new()));
        let spawn_one = |k: u64| -> weft::JoinHandle<()> {
            let (rx0, rx1, got) = (rx0.clone(), rx1.clone(), got.clone());
            if k.is_multiple_of(2) {
                chan_common::fiber_on(&rt, move || loop {
                    let mut sel = Select::new();
                    let a = sel.recv(&rx0);
                    sel.recv(&rx1);
                    let op = sel.select();
                    let r = if op.index() == a {
                        op.recv(&rx0)
                    } else {
                        op.recv(&rx1)
                    };
                    match r {
                        Ok(v) => got.lock().unwrap().push(v),
                        Err(_) => return,
                    }
                })
            } else {
                rt.spawn(async move {
                    loop {
                        let mut sel = Select::new();
                        let a = sel.recv(&rx0);
                        sel.recv(&rx1);
                        let op = sel.select_async().await;
                        let r = if op.index() == a {
                            op.recv(&rx0)
                        } else {
                            op.recv(&rx1)
                        };
                        match r {
                            Ok(v) => got.lock().unwrap().push(v),
                            Err(_) => return,
                        }
                    }
                })
            }
        };
        let mut hs: Vec<_> = (0..4).map(spawn_one).collect();
        let mut r = chan_common::Rng::new(5);
        let mut sent = vec![];
        for i in 0..4000u64 {
            let tx = if i % 2 == 0 { &tx0 } else { &tx1 };
            let mut v = i;
            loop {
                match tx.send_timeout(v, Duration::from_millis(20)) {
                    Ok(()) => break,
                    Err(e) => v = e.into_inner(),
                }
            }
            sent.push(i);
            if r.below(40) == 0 {
                let k = r.below(hs.len() as u64) as usize;
                hs[k].abort();
                let old = std::mem::replace(&mut hs[k], spawn_one(k as u64));
                let _ = chan_common::join_within(old, 10);
            }
        }
        drop((tx0, tx1));
        for h in hs {
            chan_common::join_within(h, 10).unwrap();
        }
        let mut got = got.lock().unwrap().clone();
        // A select returns the closed channel's operation first when one channel is
        // closed and the other still holds a value: that value is left for us.
        got.extend(rx0.try_iter());
        got.extend(rx1.try_iter());
        got.sort_unstable();
        assert_same(&got, &sent);
    });
}

/// Asserts `got == sent` (both sorted), naming what was lost and what came twice.
fn assert_same<T: Ord + Copy + std::fmt::Debug>(got: &[T], sent: &[T]) {
    if got == sent {
        return;
    }
    let missing: Vec<T> = sent
        .iter()
        .filter(|v| got.binary_search(v).is_err())
        .copied()
        .collect();
    let mut twice: Vec<T> = got
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    twice.dedup();
    let extra: Vec<T> = got
        .iter()
        .filter(|v| sent.binary_search(v).is_err())
        .copied()
        .collect();
    panic!(
        "received != sent: lost {missing:?}, received twice {twice:?}, never sent {extra:?} \
         ({} sent, {} received)",
        sent.len(),
        got.len()
    );
}

/// A buffered value whose `Drop` panics while the last receiver drops the channel:
/// the panic comes out of the receiver's drop, the values after it are leaked (never
/// dropped twice), and a sender blocked meanwhile wakes with its value back.
#[test]
fn panicking_drop_in_disconnect() {
    watchdog(20, || {
        struct Bomb(usize, Arc<Vec<AtomicUsize>>);
        impl Drop for Bomb {
            fn drop(&mut self) {
                self.1[self.0].fetch_add(1, SeqCst);
                if self.0 == 1 {
                    panic!("bomb {}", self.0);
                }
            }
        }
        let counts = Arc::new((0..5).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        let (tx, rx) = chan::bounded::<Bomb>(4);
        for i in 0..4 {
            tx.send_blocking(Bomb(i, counts.clone())).unwrap();
        }
        let tx2 = tx.clone();
        let c2 = counts.clone();
        let blocked =
            std::thread::spawn(move || tx2.send_blocking(Bomb(4, c2)).map_err(|e| e.0 .0));
        std::thread::sleep(Duration::from_millis(50));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(rx)));
        assert!(r.is_err());
        let back = blocked.join().unwrap();
        assert_eq!(back, Err(4));
        assert!(tx.is_closed());
        let c: Vec<usize> = counts.iter().map(|c| c.load(SeqCst)).collect();
        assert!(c.iter().all(|&n| n <= 1), "double drop: {c:?}");
        assert_eq!(c[0], 1);
        assert_eq!(c[1], 1);
    });
}

/// Values whose `Drop` uses the same channel (send, receive, close, len) while weft
/// drops them (the last receiver's drop, a timed-out send's value, a selected
/// operation's given-back value): no deadlock, no double drop.
#[test]
fn drop_reentering_the_channel() {
    watchdog(20, || {
        struct Re {
            tx: Option<Sender<Re>>,
            drops: Arc<AtomicUsize>,
        }
        impl Drop for Re {
            fn drop(&mut self) {
                self.drops.fetch_add(1, SeqCst);
                if let Some(tx) = self.tx.take() {
                    let _ = tx.len();
                    let _ = tx.is_full();
                    let _ = tx.try_send(Re {
                        tx: None,
                        drops: self.drops.clone(),
                    });
                    let _ = tx.send_timeout(
                        Re {
                            tx: None,
                            drops: self.drops.clone(),
                        },
                        Duration::from_millis(1),
                    );
                    tx.close();
                }
            }
        }
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::bounded::<Re>(2);
        let mk = |tx: &Sender<Re>| Re {
            tx: Some(tx.clone()),
            drops: drops.clone(),
        };
        tx.send_blocking(mk(&tx)).unwrap();
        // A selected receive dropped unperformed gives the value back.
        let mut sel = Select::new();
        sel.recv(&rx);
        drop(sel.select());
        tx.send_blocking(mk(&tx)).unwrap();
        // A timed-out send gets its value back (and drops it here).
        let r = tx.send_timeout(mk(&tx), Duration::from_millis(5));
        drop(r);
        // The first drop above closed the channel: the rest is dropped by the receiver.
        drop(rx);
        drop(tx);
        assert!(drops.load(SeqCst) >= 3);
    });
}

/// Wakers whose `wake` uses the same channel (receive, send, close): woken after the
/// lock is released, so no deadlock.
#[test]
fn wake_reentering_the_channel() {
    watchdog(20, || {
        struct W {
            tx: Sender<u32>,
            rx: Receiver<u32>,
            n: AtomicUsize,
        }
        impl std::task::Wake for W {
            fn wake(self: Arc<Self>) {
                self.wake_by_ref();
            }
            fn wake_by_ref(self: &Arc<Self>) {
                self.n.fetch_add(1, SeqCst);
                let _ = self.rx.try_recv();
                let _ = self.tx.try_send(1);
                let _ = self.tx.len();
            }
        }
        for cap in [0usize, 1, 4] {
            let (tx, rx) = chan::bounded::<u32>(cap);
            let w = Arc::new(W {
                tx: tx.clone(),
                rx: rx.clone(),
                n: AtomicUsize::new(0),
            });
            let waker = Waker::from(w.clone());
            let mut f = Box::pin(rx.recv());
            assert!(poll_with(f.as_mut(), &waker).is_pending());
            tx.send_blocking(5).unwrap();
            assert!(w.n.load(SeqCst) >= 1);
            let _ = poll_with(f.as_mut(), &waker);
            drop(f);
            // A sender waiting on a full channel.
            let (tx, rx) = chan::bounded::<u32>(cap.max(1));
            while tx.try_send(0).is_ok() {}
            let w = Arc::new(W {
                tx: tx.clone(),
                rx: rx.clone(),
                n: AtomicUsize::new(0),
            });
            let waker = Waker::from(w.clone());
            let mut f = Box::pin(tx.send(9));
            assert!(poll_with(f.as_mut(), &waker).is_pending());
            let _ = rx.try_recv();
            assert!(w.n.load(SeqCst) >= 1);
            let _ = poll_with(f.as_mut(), &waker);
            drop(f);
            w.tx.close();
        }
    });
}

/// A runtime dropped (or shut down with a timeout) while fibers and tasks wait in
/// `Select::select`, `select_async`, `recv_blocking`, `send_blocking` and `recv()`,
/// with plain threads sending and receiving: every value is dropped exactly once,
/// and the plain threads all finish (disconnected or not).
#[test]
fn runtime_drop_mid_select() {
    run_child("runtime_drop_mid_select", 20).assert_finished();
}

#[test]
fn shutdown_timeout_mid_select() {
    run_child("shutdown_timeout_mid_select", 20).assert_finished();
}

fn child_runtime_drop_mid_select(with_timeout: bool) {
    let ids = Ids::new(4_000_000);
    {
        let rt = rt(2);
        let (tx0, rx0) = chan::bounded::<Tracked>(0);
        let (tx1, rx1) = chan::bounded::<Tracked>(1);
        let mut hs = vec![];
        for k in 0..6u64 {
            let (tx0, rx0, tx1, rx1, ids) = (
                tx0.clone(),
                rx0.clone(),
                tx1.clone(),
                rx1.clone(),
                ids.clone(),
            );
            let body = {
                let (tx0, rx0, rx1, ids) = (tx0.clone(), rx0.clone(), rx1.clone(), ids.clone());
                move || loop {
                    let mut sel = Select::new();
                    let a = sel.recv(&rx0);
                    let b = sel.recv(&rx1);
                    let c = sel.send(&tx0);
                    let op = sel.select();
                    let i = op.index();
                    if i == a {
                        if op.recv(&rx0).is_err() {
                            return;
                        }
                    } else if i == b {
                        if op.recv(&rx1).is_err() {
                            return;
                        }
                    } else {
                        assert_eq!(i, c);
                        if ids.next.load(SeqCst) > 3_000_000 || op.send(&tx0, ids.make()).is_err() {
                            return;
                        }
                    }
                }
            };
            if k % 3 == 0 {
                hs.push(chan_common::fiber_on(&rt, body));
            } else if k % 3 == 1 {
                hs.push(chan_common::fiber_on(&rt, move || {
                    while let Ok(v) = rx0.recv_blocking() {
                        let _ = tx1.send_blocking(v);
                    }
                }));
            } else {
                hs.push(rt.spawn(async move {
                    loop {
                        let mut sel = Select::new();
                        let a = sel.recv(&rx1);
                        let b = sel.send(&tx1);
                        let op = sel.select_async().await;
                        if op.index() == a {
                            if op.recv(&rx1).is_err() {
                                return;
                            }
                        } else {
                            assert_eq!(op.index(), b);
                            if ids.next.load(SeqCst) > 3_000_000
                                || op.send(&tx1, ids.make()).is_err()
                            {
                                return;
                            }
                            let _ = rx0.recv().await;
                        }
                    }
                }));
            }
        }
        let mut threads = vec![];
        for k in 0..2 {
            let (tx0, rx1, ids) = (tx0.clone(), rx1.clone(), ids.clone());
            threads.push(std::thread::spawn(move || {
                for _ in 0..2000 {
                    if k == 0 {
                        if tx0
                            .send_timeout(ids.make(), Duration::from_millis(50))
                            .is_err()
                        {
                            break;
                        }
                    } else if rx1.recv_timeout(Duration::from_millis(50)).is_err() {
                        break;
                    }
                }
            }));
        }
        drop((tx0, rx0, tx1, rx1));
        std::thread::sleep(Duration::from_millis(100));
        if with_timeout {
            rt.shutdown_timeout(Duration::from_millis(200));
        } else {
            drop(rt);
        }
        for t in threads {
            t.join().unwrap();
        }
        for h in hs {
            let _ = chan_common::join_within(h, 10);
        }
    }
    println!("CHILD made={}", ids.next.load(SeqCst));
    ids.check_all_dropped_once();
}

/// `mem::forget` of registered futures (a receive, a send with its value, a select):
/// their nodes stay on the lists, leaked; the channel keeps working and is freed
/// later without touching freed memory (run under valgrind, see the report). The next
/// value is handed to the forgotten receive, and so is leaked with it: expected for a
/// forgotten waiter, noted here.
#[test]
fn forgotten_futures() {
    run_child("forgotten_futures", 20).assert_finished();
}

fn child_forgotten_futures() {
    for cap in [Some(0), Some(1), None] {
        let (tx, rx) = chan_common::make::<String>(cap);
        let mut f = Box::pin(rx.recv());
        assert!(noop_poll(f.as_mut()).is_pending());
        std::mem::forget(f);
        // The next value goes to the forgotten node.
        let _ = tx.send_timeout("lost".into(), Duration::from_millis(10));
        if cap != Some(0) {
            while tx.try_send("fill".into()).is_ok() {
                if cap.is_none() {
                    break;
                }
            }
        }
        let mut s = Box::pin(tx.send("forgotten send".into()));
        let _ = noop_poll(s.as_mut());
        std::mem::forget(s);
        let (_otx, orx) = chan::unbounded::<String>();
        let mut sel = Select::new();
        sel.recv(&rx);
        sel.recv(&orx);
        sel.send(&tx);
        let mut sf = Box::pin(sel.select_async());
        if let Poll::Ready(op) = noop_poll(sf.as_mut()) {
            drop(op);
        }
        std::mem::forget(sf);
        drop(sel);
        // The channel still works for others.
        let t = {
            let rx = rx.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while rx.recv_timeout(Duration::from_millis(100)).is_ok() {
                    n += 1;
                }
                n
            })
        };
        for i in 0..10 {
            let _ = tx.send_timeout(format!("v{i}"), Duration::from_millis(100));
        }
        drop(tx);
        let n = t.join().unwrap();
        println!("CHILD cap={cap:?} received={n}");
        drop(rx);
        drop(orx);
    }
}

/// `close()` racing sends, receives, selects and `ready` in every context: every
/// participant finishes, nothing is received twice, everything sent is received or
/// dropped with the channel.
#[test]
fn close_racing_everything() {
    watchdog(60, || {
        let rt = rt(2);
        for round in 0..60u64 {
            let ids = Ids::new(10_000);
            let cap = [0usize, 1, 3][(round % 3) as usize];
            let (tx, rx) = chan::bounded::<Tracked>(cap);
            let sent = Arc::new(Mutex::new(Vec::new()));
            let got = Arc::new(Mutex::new(Vec::new()));
            let mut hs = vec![];
            let mut ths = vec![];
            for k in 0..6u64 {
                let (tx, rx, ids, sent, got) = (
                    tx.clone(),
                    rx.clone(),
                    ids.clone(),
                    sent.clone(),
                    got.clone(),
                );
                let body = move || {
                    for _ in 0..200 {
                        match k % 3 {
                            0 => {
                                let v = ids.make();
                                let id = v.id;
                                match tx.send_blocking(v) {
                                    Ok(()) => sent.lock().unwrap().push(id),
                                    Err(_) => return,
                                }
                            }
                            1 => match rx.recv_blocking() {
                                Ok(v) => got.lock().unwrap().push(v.id),
                                Err(_) => return,
                            },
                            _ => {
                                let mut sel = Select::new();
                                let a = sel.send(&tx);
                                let b = sel.recv(&rx);
                                if k % 2 == 0 {
                                    let _ = sel.ready();
                                    continue;
                                }
                                let op = sel.select();
                                if op.index() == a {
                                    let v = ids.make();
                                    let id = v.id;
                                    match op.send(&tx, v) {
                                        Ok(()) => sent.lock().unwrap().push(id),
                                        Err(_) => return,
                                    }
                                } else {
                                    assert_eq!(op.index(), b);
                                    match op.recv(&rx) {
                                        Ok(v) => got.lock().unwrap().push(v.id),
                                        Err(_) => return,
                                    }
                                }
                            }
                        }
                    }
                };
                match k % 2 {
                    0 => hs.push(chan_common::fiber_on(&rt, body)),
                    _ => ths.push(std::thread::spawn(body)),
                }
            }
            {
                let (tx, rx, ids, sent, got) = (
                    tx.clone(),
                    rx.clone(),
                    ids.clone(),
                    sent.clone(),
                    got.clone(),
                );
                hs.push(rt.spawn(async move {
                    for i in 0..200 {
                        if i % 2 == 0 {
                            let v = ids.make();
                            let id = v.id;
                            match tx.send(v).await {
                                Ok(()) => sent.lock().unwrap().push(id),
                                Err(_) => return,
                            }
                        } else {
                            match rx.recv().await {
                                Ok(v) => got.lock().unwrap().push(v.id),
                                Err(_) => return,
                            }
                        }
                    }
                }));
            }
            std::thread::sleep(Duration::from_micros(round * 37 % 2000));
            if round % 2 == 0 {
                tx.close();
            } else {
                rx.close();
            }
            for t in ths {
                t.join().unwrap();
            }
            for h in hs {
                chan_common::join_within(h, 10).unwrap();
            }
            while let Ok(v) = rx.try_recv() {
                got.lock().unwrap().push(v.id);
            }
            let mut sent = sent.lock().unwrap().clone();
            let mut got = got.lock().unwrap().clone();
            sent.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, sent, "round {round} cap {cap}");
            drop((tx, rx));
            ids.check_all_dropped_once();
        }
    });
}

/// Timer receivers with zero and huge durations, in every form.
#[test]
fn timers_with_zero_and_huge_durations() {
    watchdog(30, || {
        let rt = rt(2);
        let far = Duration::MAX;
        let huge = Duration::from_secs(1 << 40);
        // Zero: ready at once, in every form.
        assert!(chan::after(Duration::ZERO).recv_blocking().is_ok());
        assert!(chan::after(Duration::ZERO).try_recv().is_ok());
        assert!(chan::at(Instant::now() - Duration::from_secs(1))
            .recv_timeout(Duration::ZERO)
            .is_ok());
        let t0 = chan::tick(Duration::ZERO);
        for _ in 0..100 {
            assert!(t0.recv_blocking().is_ok());
        }
        let mut t0s = chan::tick(Duration::ZERO);
        for _ in 0..10 {
            assert!(matches!(
                poll_next(&mut t0s, Waker::noop()),
                Poll::Ready(Some(_))
            ));
        }
        // Huge: never ready, timeouts still work.
        for t in [
            chan::after(far),
            chan::after(huge),
            chan::tick(far),
            chan::tick(huge),
        ] {
            assert_eq!(
                t.recv_timeout(Duration::from_millis(5)),
                Err(RecvTimeoutError::Timeout)
            );
            assert_eq!(t.try_recv(), Err(TryRecvError::Empty));
            let mut sel = Select::new();
            sel.recv(&t);
            assert!(sel.select_timeout(Duration::from_millis(5)).is_err());
            assert!(sel.ready_timeout(Duration::from_millis(5)).is_err());
            let r = rt.block_on(weft::time::timeout(Duration::from_millis(5), t.recv()));
            assert!(r.is_err());
            let r = rt.block_on(async {
                let mut sel = Select::new();
                sel.recv(&t);
                weft::time::timeout(Duration::from_millis(5), sel.select_async())
                    .await
                    .is_err()
            });
            assert!(r);
            let t2 = t.clone();
            let f = chan_common::fiber_on(&rt, move || t2.recv_timeout(Duration::from_millis(5)));
            assert_eq!(
                chan_common::join_within(f, 5).unwrap(),
                Err(RecvTimeoutError::Timeout)
            );
        }
        // A huge (representable) timeout on a channel: the value still arrives.
        let (tx, rx) = chan::unbounded::<u32>();
        let rx2 = rx.clone();
        let th = std::thread::spawn(move || rx2.recv_timeout(huge));
        let rx3 = rx.clone();
        let fb = chan_common::fiber_on(&rt, move || rx3.recv_timeout(huge));
        let rx4 = rx.clone();
        let tk = rt.spawn(async move {
            let mut sel = Select::new();
            sel.recv(&rx4);
            let r = sel.select_timeout(huge).map(|op| op.recv(&rx4));
            r.is_ok()
        });
        std::thread::sleep(Duration::from_millis(50));
        for i in 0..3 {
            tx.send_blocking(i).unwrap();
        }
        assert!(th.join().unwrap().is_ok());
        assert!(chan_common::join_within(fb, 5).unwrap().is_ok());
        assert!(chan_common::join_within(tk, 5).unwrap());
        // send_timeout with a huge timeout on a full channel.
        let (tx, rx) = chan::bounded::<u32>(1);
        tx.send_blocking(0).unwrap();
        let th = std::thread::spawn(move || tx.send_timeout(1, huge).is_ok());
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(rx.recv_blocking(), Ok(0));
        assert!(th.join().unwrap());
        assert_eq!(rx.recv_blocking(), Ok(1));
        // Timers in a select with a channel, async, on the runtime.
        let r = rt.block_on(async {
            let (_tx, rx) = chan::unbounded::<u32>();
            let t = chan::after(Duration::from_millis(10));
            let big = chan::after(far);
            let mut sel = Select::new();
            sel.recv(&rx);
            sel.recv(&big);
            let i = sel.recv(&t);
            let op = sel.select_async().await;
            (op.index() == i, op.recv(&t).is_ok())
        });
        assert_eq!(r, (true, true));
    });
}

/// Capacity extremes: `bounded(usize::MAX)` behaves as unbounded for its buffer,
/// `bounded(0)` reports readiness only with a partner waiting.
#[test]
fn capacity_extremes() {
    watchdog(30, || {
        let (tx, rx) = chan::bounded::<u64>(usize::MAX);
        assert_eq!(tx.capacity(), Some(usize::MAX));
        for i in 0..10_000 {
            tx.try_send(i).unwrap();
        }
        assert!(!tx.is_full());
        assert_eq!(rx.len(), 10_000);
        let mut sel = Select::new();
        sel.send(&tx);
        sel.select().send(&tx, 10_000).unwrap();
        assert_eq!(rx.iter().take(10_001).count(), 10_001);

        let (tx, rx) = chan::bounded::<u64>(0);
        let mut sel = Select::new();
        let s = sel.send(&tx);
        assert!(sel.try_ready().is_err());
        assert!(sel.try_select().is_err());
        let rx2 = rx.clone();
        let t = std::thread::spawn(move || rx2.recv_blocking());
        assert_eq!(sel.ready_timeout(Duration::from_secs(5)), Ok(s));
        let op = sel.select_timeout(Duration::from_secs(5)).unwrap();
        op.send(&tx, 7).unwrap();
        assert_eq!(t.join().unwrap(), Ok(7));
        let mut sel = Select::new();
        let r = sel.recv(&rx);
        let tx2 = tx.clone();
        let t = std::thread::spawn(move || tx2.send_blocking(8));
        assert_eq!(sel.ready_timeout(Duration::from_secs(5)), Ok(r));
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(8));
        assert!(t.join().unwrap().is_ok());
        // ready() on a rendezvous channel against a receiver that keeps coming and
        // going (recv_timeout): it returns, it never spins for ever.
        for _ in 0..200 {
            let rx2 = rx.clone();
            let t = std::thread::spawn(move || rx2.recv_timeout(Duration::from_micros(50)));
            let mut sel = Select::new();
            sel.send(&tx);
            let _ = sel.ready_timeout(Duration::from_millis(1));
            let _ = t.join();
        }
    });
}

/// `ready()` observers racing sends, receives and closes on one channel (the observer
/// count is adjusted on every path: an underflow would panic in debug builds).
#[test]
fn ready_observers_racing() {
    watchdog(60, || {
        for round in 0..200u64 {
            let cap = (round % 3) as usize;
            let (tx, rx) = chan::bounded::<u64>(cap);
            let mut ths = vec![];
            for k in 0..4 {
                let (tx, rx) = (tx.clone(), rx.clone());
                ths.push(std::thread::spawn(move || {
                    for _ in 0..100 {
                        let mut sel = Select::new();
                        sel.send(&tx);
                        sel.recv(&rx);
                        if k % 2 == 0 {
                            let _ = sel.ready_timeout(Duration::from_micros(200));
                        } else {
                            let _ = sel.try_ready();
                            let _ = tx.try_send(1);
                            let _ = rx.try_recv();
                        }
                    }
                }));
            }
            std::thread::sleep(Duration::from_micros(round * 13 % 500));
            rx.close();
            for t in ths {
                t.join().unwrap();
            }
        }
    });
}

/// `select_async` with no operation: `select()` panics ("no operations"), the async
/// form waits for ever.
#[test]
fn select_async_with_no_operations() {
    watchdog(10, || {
        let rt = rt(1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                let mut sel = Select::new();
                weft::time::timeout(Duration::from_millis(50), sel.select_async())
                    .await
                    .is_ok()
            })
        }));
        assert!(
            r.is_err(),
            "select_async with no operations neither panics (as select() does) nor ends: \
             it waited for ever (timed out: {r:?})"
        );
    });
}

/// A sender's waker that panics when a receive admits that sender into the buffer:
/// `Receiver::try_recv` (mod.rs) pops the value, then flushes its `WakeBatch` as a local
/// after the return value is computed; the panic drops the popped value. (Milder
/// than the use-after-free above, same root: the wakes are flushed where a panic
/// unwinds through state that is not yet handed over.)
#[test]
fn wake_panic_in_try_recv_loses_the_value() {
    let (tx, rx) = chan::bounded::<u32>(1);
    tx.send_blocking(1).unwrap();
    let mut sf = Box::pin(tx.send(2));
    let pw = Waker::from(Arc::new(PanicWake));
    assert!(poll_with(sf.as_mut(), &pw).is_pending());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rx.try_recv()));
    let mut all: Vec<u32> = r.iter().filter_map(|r| (*r).ok()).collect();
    assert!(matches!(noop_poll(sf.as_mut()), Poll::Ready(Ok(()))));
    all.extend(rx.try_iter());
    assert_eq!(all, [1, 2], "value 1 was popped and dropped by the panic");
}

/// Tasks on a one-worker runtime using the *blocking* forms (`Select::select`,
/// `send_blocking`, `recv_blocking`, the ordered channel's `spawn`/`recv_blocking`)
/// against each other: the worker sets each wait aside and runs the partner.
#[test]
fn blocking_forms_in_tasks_on_one_worker() {
    watchdog(30, || {
        let rt = rt(1);
        let (tx, rx) = chan::bounded::<u32>(0);
        let (tx2, rx2) = chan::bounded::<u32>(0);
        let a = rt.spawn(async move {
            let mut sum = 0;
            for _ in 0..100 {
                let mut sel = Select::new();
                let i = sel.recv(&rx);
                let op = sel.select();
                assert_eq!(op.index(), i);
                let v = op.recv(&rx).unwrap();
                tx2.send_blocking(v).unwrap();
                sum += v;
            }
            sum
        });
        let b = rt.spawn(async move {
            for i in 0..100 {
                tx.send_blocking(i).unwrap();
                assert_eq!(rx2.recv_blocking(), Ok(i));
            }
        });
        assert_eq!(chan_common::join_within(a, 20).unwrap(), 4950);
        chan_common::join_within(b, 20).unwrap();
        let (otx, orx) = chan::ordered::<u32>(1);
        let p = rt.spawn(async move {
            for i in 0..50 {
                otx.spawn(async move { i }).unwrap();
            }
        });
        let c = rt.spawn(async move {
            let mut v = vec![];
            while let Ok(r) = orx.recv_blocking() {
                v.push(r.unwrap());
            }
            v
        });
        chan_common::join_within(p, 20).unwrap();
        assert_eq!(
            chan_common::join_within(c, 20).unwrap(),
            (0..50).collect::<Vec<_>>()
        );
    });
}

/// With no runtime, the async receive of a timer receiver spawns a thread per
/// deadline it is polled for (`Alarm::Thread`, timer.rs), which sleeps until that
/// deadline whether or not the receive is still there: `after(1 hour)` receives
/// that are polled and dropped each leave a thread behind for an hour.
#[test]
fn thread_alarms_of_dropped_receives_do_not_linger() {
    run_child("thread_alarms_linger", 20).assert_finished();
}

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

fn child_thread_alarms_linger() {
    let before = threads_now();
    for _ in 0..50 {
        let t = chan::after(Duration::from_secs(3600));
        let mut f = Box::pin(t.recv());
        assert!(noop_poll(f.as_mut()).is_pending());
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = threads_now();
    println!("CHILD threads_before={before} threads_after={after}");
    assert!(
        after < before + 5,
        "{} threads sleep for an hour for receives that are gone",
        after - before
    );
}

/// Tasks and fibers that panic while they hold registered `recv()`/`send()` futures,
/// a pending `select_async`, or a `SelectedOperation` they have not performed: the
/// unwinding drops them, and nothing is lost or received twice.
#[test]
fn panics_while_holding_waits_and_selected_operations() {
    watchdog(30, || {
        let rt = rt(2);
        let ids = Ids::new(10_000);
        let (tx, rx) = chan::bounded::<Tracked>(1);
        let task_got = Arc::new(Mutex::new(Vec::new()));
        let mut hs = vec![];
        for k in 0..200u64 {
            let (tx, rx, ids, task_got) = (tx.clone(), rx.clone(), ids.clone(), task_got.clone());
            hs.push(rt.spawn(async move {
                match k % 4 {
                    0 => {
                        let mut f = Box::pin(rx.recv());
                        if let Poll::Ready(Ok(v)) = noop_poll(f.as_mut()) {
                            task_got.lock().unwrap().push(v.id);
                        }
                        weft::task::yield_now().await;
                        panic!("holding a recv");
                    }
                    1 => {
                        let mut f = Box::pin(tx.send(ids.make()));
                        let _ = noop_poll(f.as_mut());
                        weft::task::yield_now().await;
                        panic!("holding a send");
                    }
                    2 => {
                        let mut sel = Select::new();
                        sel.recv(&rx);
                        sel.send(&tx);
                        let op = sel.select_async().await;
                        let _keep = op;
                        panic!("holding a selected operation");
                    }
                    _ => {
                        let mut sel = Select::new();
                        sel.recv(&rx);
                        let mut f = Box::pin(sel.select_async());
                        let _ = noop_poll(f.as_mut());
                        panic!("holding a select");
                    }
                }
            }));
        }
        let sender = {
            let (tx, ids) = (tx.clone(), ids.clone());
            std::thread::spawn(move || {
                let mut sent = vec![];
                for _ in 0..300 {
                    let v = ids.make();
                    let id = v.id;
                    if tx.send_timeout(v, Duration::from_millis(20)).is_ok() {
                        sent.push(id);
                    }
                }
                sent
            })
        };
        let receiver = {
            let rx = rx.clone();
            std::thread::spawn(move || {
                let mut got = vec![];
                while let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) {
                    got.push(v.id);
                }
                got
            })
        };
        for h in hs {
            assert!(chan_common::join_within(h, 10).is_err());
        }
        let mut sent = sender.join().unwrap();
        let mut got = receiver.join().unwrap();
        got.extend(rx.try_iter().map(|v| v.id));
        got.extend(task_got.lock().unwrap().iter().copied());
        sent.sort_unstable();
        got.sort_unstable();
        // Values sent by the panicking selects' `send` arms are not counted as sent
        // (they never performed); everything the sender sent arrives once.
        for id in &sent {
            assert!(got.binary_search(id).is_ok(), "value {id} lost");
        }
        let mut dedup = got.clone();
        dedup.dedup();
        assert_eq!(dedup.len(), got.len(), "a value was received twice");
        drop((tx, rx));
        drop(rt);
        ids.check_all_dropped_once();
    });
}

/// The ordered channel's receiver dropped while work runs, with a spawner waiting for
/// room: queued work is aborted, the waiting spawner gets its own work's result back
/// (joined), later spawns fail the same way, and nothing hangs.
#[test]
fn ordered_receiver_dropped_while_work_runs() {
    watchdog(30, || {
        let rt = rt(2);
        let (tx, rx) = chan::ordered::<u32>(2);
        let started = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let mk = |i: u32, ms: u64| {
            let (started, finished) = (started.clone(), finished.clone());
            async move {
                started.fetch_add(1, SeqCst);
                weft::time::sleep(Duration::from_millis(ms)).await;
                finished.fetch_add(1, SeqCst);
                i
            }
        };
        rt.block_on(async {
            tx.spawn(mk(0, 5000)).unwrap();
            tx.spawn(mk(1, 5000)).unwrap();
        });
        let tx2 = tx.clone();
        let blocked = {
            let tx2 = tx2.clone();
            let h = rt.handle().clone();
            std::thread::spawn(move || {
                // Waits for room (two handles queued).
                h.block_on(async { tx2.spawn_async(async { 7u32 }).await })
                    .map_err(|e| e.into_inner())
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(started.load(SeqCst), 2);
        drop(rx);
        let r = blocked.join().unwrap();
        assert!(matches!(r, Err(Ok(7))), "{r:?}");
        let r = rt.block_on(async { tx.spawn(async { 8u32 }) });
        assert!(matches!(r.map_err(|e| e.into_inner()), Err(Ok(8))));
        std::thread::sleep(Duration::from_millis(100));
        // The two queued ones were aborted: they never finish.
        assert_eq!(finished.load(SeqCst), 0);
        drop(tx2);
    });
}

/// A value whose `Drop` blocks (waits on another channel) while weft drops it: the
/// last receiver's drop and a cancelled send's drop wait outside any weft lock, so
/// the channel stays usable from other threads meanwhile.
#[test]
fn drop_that_blocks() {
    watchdog(20, || {
        struct Slow(Receiver<()>);
        impl Drop for Slow {
            fn drop(&mut self) {
                let _ = self.0.recv_timeout(Duration::from_millis(200));
            }
        }
        let (gtx, grx) = chan::unbounded::<()>();
        let (tx, rx) = chan::bounded::<Slow>(1);
        tx.send_blocking(Slow(grx.clone())).unwrap();
        // A cancelled send drops its value (blocking) on this thread...
        let mut f = Box::pin(tx.send(Slow(grx.clone())));
        assert!(noop_poll(f.as_mut()).is_pending());
        let tx2 = tx.clone();
        let other = std::thread::spawn(move || {
            // ...while the channel is used from another thread.
            let start = Instant::now();
            let _ = tx2.is_full();
            let _ = tx2.len();
            start.elapsed()
        });
        drop(f);
        assert!(other.join().unwrap() < Duration::from_millis(150));
        drop(gtx);
        drop(rx);
    });
}

// =================================================================================
// Regressions in main after this review's base (0a2b487): f073a3a and 825363f
// =================================================================================

/// At f073a3a `Receiver::try_recv` (core.rs `try_recv_now`) pairs with a waiting
/// select's send on a rendezvous channel and then *waits* (`crate::wait`) for the
/// select to perform it. A select is performed only when its owner polls it again
/// and calls `SelectedOperation::send`: a `select_async` future polled once and kept
/// (or a `SelectedOperation` held), and `try_recv` blocks until then; on the thread
/// that owns that future it blocks for ever (the owner cannot poll it). A `try_`
/// operation must not wait.
#[test]
fn try_recv_does_not_wait_for_an_idle_select_send() {
    watchdog(20, || {
        let (tx, rx) = chan::bounded::<u32>(0);
        let mut sel = Select::new();
        sel.send(&tx);
        let mut sf = Box::pin(sel.select_async());
        assert!(noop_poll(sf.as_mut()).is_pending());
        let done = AtomicBool::new(false);
        let blocked = std::thread::scope(|s| {
            let t = s.spawn(|| {
                let r = rx.try_recv();
                done.store(true, SeqCst);
                r
            });
            let start = Instant::now();
            while !done.load(SeqCst) && start.elapsed() < Duration::from_millis(500) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let blocked = !done.load(SeqCst);
            // Dropping the select lets it go.
            drop(sf);
            let _ = t.join().unwrap();
            blocked
        });
        assert!(!blocked, "try_recv waited for a select that nobody polls");
    });
}

/// At 825363f a closed channel counts as drained only once every value handed to a
/// receiver's node has been taken (`in_flight`). A value handed to a node whose owner
/// never takes it (the idle `Stream` node of bug 3; a forgotten receive) keeps the
/// channel undrained for ever: after the senders are gone, every other receive waits
/// for ever instead of returning `Disconnected` (at 0a2b487 it returned
/// `Disconnected`).
#[test]
fn closed_channel_with_a_value_in_an_idle_stream_node_disconnects() {
    watchdog(20, || {
        let (tx, mut rx) = chan::unbounded::<u32>();
        let rx2 = rx.clone();
        assert!(poll_next(&mut rx, Waker::noop()).is_pending());
        tx.send_blocking(1).unwrap();
        drop(tx);
        let r = rx2.recv_timeout(Duration::from_millis(500));
        assert!(
            r != Err(RecvTimeoutError::Timeout),
            "a receive on a closed channel waits for a value held by an idle stream node"
        );
        assert!(rx2.try_recv().is_ok() || rx2.try_recv() == Err(TryRecvError::Disconnected));
        drop(rx);
    });
}

#[test]
#[ignore = "known limitation (docs/ARCHITECTURE.md, Channels, Drained): a value held by a forgotten receive keeps a closed channel undrained"]
fn closed_channel_with_a_value_in_a_forgotten_receive_disconnects() {
    watchdog(20, || {
        let (tx, rx) = chan::unbounded::<u32>();
        let mut f = Box::pin(rx.recv());
        assert!(noop_poll(f.as_mut()).is_pending());
        std::mem::forget(f);
        tx.send_blocking(1).unwrap();
        drop(tx);
        let r = rx.recv_timeout(Duration::from_millis(500));
        assert_eq!(
            r,
            Err(RecvTimeoutError::Disconnected),
            "after the senders left, a receive waits for ever for a leaked value"
        );
    });
}
