//! Session-41 adversarial review of `weft::chan` (channels, select, timers, the ordered
//! task channel) and the wait list beneath them.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use common::{counter, live, load, wait_until, watchdog, workers, DropCounter, Tracked};
use weft::chan::{self, Select};

fn noop_poll<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// Wakes a parked thread.
struct ThreadWaker(thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal executor for a plain thread (no runtime involved): polls `fut` until it
/// finishes or `limit` passes (`None`).
fn poll_until<F: Future>(fut: F, limit: Duration) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let end = Instant::now() + limit;
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= end {
            return None;
        }
        thread::park_timeout(end - now);
    }
}

// ---------------------------------------------------------------------------------
// The ordered channel
// ---------------------------------------------------------------------------------

/// Found in review (failed every run before the fix): a handle put back by a cancelled
/// receive did not reach a receive that was already waiting on the channel. Interleaving: receive A takes the handle of slow
/// work 0 and joins it; receive B (a second task sharing the receiver: `recv` takes
/// `&self` and the receiver is `Sync`) finds `head.back` empty and waits in the inner
/// channel's `recv`; A is cancelled (a timeout) and `PutBack` puts handle 0 into
/// `head.back` without waking B. B keeps waiting on the inner channel although a
/// result is there; once the last sender goes, B returns `Err(RecvError)` ("every
/// sender is gone and the queue is drained") while result 0 is still queued, and a
/// later receive returns it. Fixed
/// (`OrderedReceiver::take`): a waiting receive is registered on the head and woken by
/// a put-back, and reports the end only once no receive holds a handle.
#[test]
fn ordered_put_back_reaches_a_receive_already_waiting() {
    watchdog(10, || {
        let rt = workers(2);
        let (tx, rx) = chan::ordered::<u32>(4);
        let rx = Arc::new(rx);
        let release = Arc::new(weft::sync::Notify::new());
        let r2 = release.clone();
        rt.block_on(async {
            tx.spawn(async move {
                r2.notified().await;
                0
            })
            .unwrap();
        });
        // A: takes handle 0 and joins it, then is cancelled by its timeout.
        let ra = rx.clone();
        let a = rt.spawn(async move {
            weft::time::timeout(Duration::from_millis(150), ra.recv())
                .await
                .is_err()
        });
        thread::sleep(Duration::from_millis(40));
        // B: starts while A holds handle 0: waits on the (empty) inner channel.
        let rb = rx.clone();
        let b = rt.spawn(async move { rb.recv().await.map(|r| r.unwrap()) });
        assert!(common::join_within(a, 5).unwrap(), "A's receive timed out");
        // Handle 0 is back at the head now; its work finishes.
        release.notify_one();
        thread::sleep(Duration::from_millis(50));
        // Every sender gone: B must still get result 0 (it is queued), not RecvError.
        drop(tx);
        let got_b = common::join_within(b, 5).unwrap();
        let later = rx.recv_blocking().map(|r| r.unwrap());
        assert_eq!(
            (got_b, later),
            (Ok(0), Err(chan::RecvError)),
            "B was not woken by the put-back handle: it reported the channel drained while \
             result 0 was still queued"
        );
    });
}

/// Panicking outputs mixed with work still running: dropping the receiver cancels the
/// running work (its futures dropped), drops every finished output once, and resumes
/// exactly one panic; the senders then see the channel closed.
#[test]
fn ordered_receiver_drop_with_panicking_outputs_and_running_work() {
    struct Bomb(Arc<AtomicUsize>, bool);
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
            if self.1 {
                panic!("bomb output");
            }
        }
    }
    watchdog(10, || {
        let rt = workers(2);
        let outputs = counter();
        let futures = counter();
        let made = counter();
        let (tx, rx) = chan::ordered::<Bomb>(16);
        rt.block_on(async {
            for i in 0..12usize {
                let (o, f, m) = (outputs.clone(), futures.clone(), made.clone());
                let guard = DropCounter(f);
                tx.spawn(async move {
                    let _g = guard;
                    if i % 3 == 2 {
                        // Never finishes: cancelled by the receiver's drop.
                        std::future::pending::<()>().await;
                    }
                    m.fetch_add(1, Ordering::SeqCst);
                    Bomb(o, i % 3 == 0)
                })
                .unwrap();
            }
        });
        wait_until("the finishing work finished", || load(&made) == 8);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(rx)));
        let p = r.expect_err("a panicking output's panic goes on from the drop");
        assert_eq!(
            common::panic_message(p.as_ref()).as_deref(),
            Some("bomb output")
        );
        assert_eq!(load(&outputs), 8, "every finished output dropped once");
        wait_until("every future dropped", || load(&futures) == 12);
        assert_eq!(load(&outputs), 8);
        let back = rt.block_on(async { tx.spawn(async { Bomb(counter(), false) }) });
        assert!(back.is_err(), "the receiver is gone");
    });
}

/// Spawns from several threads (async tasks and fibers) race the receiver's drop:
/// every output is either received, handed back in the spawn's error, or dropped with
/// the receiver (never leaked, never dropped twice), and every future is dropped.
#[test]
fn ordered_spawns_racing_receiver_drop_lose_nothing() {
    watchdog(15, || {
        let rt = workers(3);
        let h = rt.handle().clone();
        for round in 0..30u64 {
            let live = live();
            let futs = counter();
            let (tx, rx) = chan::ordered::<Tracked>(2);
            let mut threads = Vec::new();
            for t in 0..3usize {
                let (tx, live, futs, h) = (tx.clone(), live.clone(), futs.clone(), h.clone());
                threads.push(thread::spawn(move || {
                    let _e = h.enter();
                    for i in 0..20usize {
                        let (l, g) = (live.clone(), DropCounter(futs.clone()));
                        let r = if (i + t) % 2 == 0 {
                            tx.spawn(async move {
                                let _g = g;
                                Tracked::new(i, &l)
                            })
                        } else {
                            tx.spawn_fiber(move || {
                                let _g = g;
                                Tracked::new(i, &l)
                            })
                        };
                        if let Err(e) = r {
                            // Joined: either the output or a cancellation.
                            drop(e.into_inner());
                        }
                    }
                }));
            }
            drop(tx);
            // Receive a few, then drop the receiver while spawns go on.
            for _ in 0..(round % 4) {
                if let Ok(r) = rx.recv_blocking() {
                    drop(r);
                }
            }
            drop(rx);
            for t in threads {
                common::thread_within(t, 10);
            }
            wait_until("every future dropped", || load(&futs) == 60);
            wait_until("no output leaked", || load(&live) == 0);
        }
    });
}

// ---------------------------------------------------------------------------------
// Rendezvous hand-offs racing cancellation
// ---------------------------------------------------------------------------------

/// Timed sends and timed receives on a rendezvous channel, from threads: every value
/// is either received or comes back to its sender, never lost or duplicated.
#[test]
fn rendezvous_timed_sends_and_receives_conserve_values() {
    watchdog(15, || {
        let (tx, rx) = chan::bounded::<u64>(0);
        let received = Arc::new(AtomicUsize::new(0));
        let returned = Arc::new(AtomicUsize::new(0));
        let sum_in = Arc::new(AtomicUsize::new(0));
        let end = Instant::now() + Duration::from_millis(700);
        let mut hs = Vec::new();
        for s in 0..3u64 {
            let (tx, returned) = (tx.clone(), returned.clone());
            hs.push(thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < end {
                    let v = s * 1_000_000 + n;
                    n += 1;
                    match tx.send_timeout(v, Duration::from_micros(50 + (n % 7) * 30)) {
                        Ok(()) => {}
                        Err(chan::SendTimeoutError::Timeout(back)) => {
                            assert_eq!(back, v, "another value came back");
                            returned.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
                n
            }));
        }
        let mut rs = Vec::new();
        for _ in 0..3 {
            let (rx, received, sum_in) = (rx.clone(), received.clone(), sum_in.clone());
            rs.push(thread::spawn(move || {
                let mut seen = std::collections::HashSet::new();
                loop {
                    match rx.recv_timeout(Duration::from_micros(80)) {
                        Ok(v) => {
                            assert!(seen.insert(v), "duplicate {v}");
                            received.fetch_add(1, Ordering::SeqCst);
                            sum_in.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(chan::RecvTimeoutError::Timeout) => {}
                        Err(chan::RecvTimeoutError::Disconnected) => return,
                    }
                }
            }));
        }
        drop(rx);
        let sent: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        drop(tx);
        for r in rs {
            r.join().unwrap();
        }
        assert_eq!(
            load(&received) + load(&returned),
            sent as usize,
            "values lost or duplicated"
        );
    });
}

/// A `select_async` over a rendezvous receive, polled once (so it waits), then dropped
/// after a sender arrived: the value goes back to the sender (or on to another
/// receiver), never lost.
#[test]
fn select_async_dropped_after_a_rendezvous_sender_arrived_loses_nothing() {
    watchdog(15, || {
        for i in 0..200u32 {
            let (tx, rx) = chan::bounded::<u32>(0);
            let (_tx2, rx2) = chan::bounded::<u32>(0);
            let mut sel = Select::new();
            sel.recv(&rx);
            sel.recv(&rx2);
            let mut fut = Box::pin(sel.select_async());
            assert!(noop_poll(fut.as_mut()).is_pending());
            let sender = thread::spawn(move || tx.send_timeout(i, Duration::from_millis(200)));
            if i % 2 == 0 {
                thread::sleep(Duration::from_micros(50 * (i as u64 % 10)));
            }
            // Dropped on another thread half the time.
            if i % 3 == 0 {
                thread::scope(|s| {
                    s.spawn(move || drop(fut));
                });
            } else {
                drop(fut);
            }
            drop(sel);
            let got = rx.recv_timeout(Duration::from_millis(300));
            let sent = sender.join().unwrap();
            match (sent, got) {
                (Ok(()), Ok(v)) => assert_eq!(v, i),
                (Err(chan::SendTimeoutError::Timeout(v)), Err(_)) => assert_eq!(v, i),
                other => panic!("round {i}: value lost or duplicated: {other:?}"),
            }
        }
    });
}

/// A fiber waiting in `recv_blocking` on a rendezvous channel is aborted while a
/// sender hands it a value: the value goes back to the sender or is received by the
/// fiber (whose result then reports it), never lost.
#[test]
fn fiber_aborted_at_a_rendezvous_receive_loses_nothing() {
    watchdog(15, || {
        let rt = workers(2);
        for i in 0..150u32 {
            let (tx, rx) = chan::bounded::<u32>(0);
            let (started_tx, started) = mpsc::channel();
            let f = common::fiber_on(&rt, move || {
                started_tx.send(()).unwrap();
                rx.recv_blocking()
            });
            started.recv().unwrap();
            thread::sleep(Duration::from_micros(200));
            let sender = thread::spawn(move || tx.send_timeout(i, Duration::from_millis(100)));
            common::spin_for(Duration::from_micros(20 * (i as u64 % 15)));
            f.abort();
            let fr = common::join_within(f, 5);
            let sent = sender.join().unwrap();
            match (sent, fr) {
                (Ok(()), Ok(Ok(v))) => assert_eq!(v, i),
                (Err(chan::SendTimeoutError::Timeout(v)), Err(e)) => {
                    assert!(e.is_cancelled());
                    assert_eq!(v, i);
                }
                (Err(chan::SendTimeoutError::Disconnected(v)), Err(e)) => {
                    // The aborted fiber dropped the receiver before the send began.
                    assert!(e.is_cancelled());
                    assert_eq!(v, i);
                }
                other => panic!("round {i}: value lost: {other:?}"),
            }
        }
    });
}

/// The runtime dropped while a task waits on a receive: the task's receiver goes with
/// it, so a rendezvous send fails at once instead of waiting for a receiver that will
/// never run.
#[test]
fn runtime_dropped_mid_wait_releases_the_waiting_receiver() {
    watchdog(10, || {
        let (tx, rx) = chan::bounded::<u32>(0);
        let rt = workers(1);
        let (started_tx, started) = mpsc::channel();
        let _h = rt.spawn(async move {
            started_tx.send(()).unwrap();
            rx.recv().await
        });
        started.recv().unwrap();
        thread::sleep(Duration::from_millis(20));
        drop(rt);
        assert_eq!(
            tx.send_timeout(1, Duration::from_secs(2)),
            Err(chan::SendTimeoutError::Disconnected(1))
        );
    });
}

/// A receive on an `after` channel polled first inside a runtime (its alarm on that
/// runtime's wheel), then finished on a plain thread after the runtime is gone: it
/// still delivers (channels need no runtime).
#[test]
fn timer_receive_outlives_the_runtime_it_first_waited_on() {
    watchdog(10, || {
        let rt = workers(1);
        let t = chan::after(Duration::from_millis(100));
        let mut fut = Box::pin(t.recv());
        let pending = rt.block_on(async {
            std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_pending())).await
        });
        assert!(pending);
        drop(rt);
        let got = poll_until(fut, Duration::from_secs(2));
        assert!(
            matches!(got, Some(Ok(_))),
            "the timer receive hung once its runtime was dropped"
        );
    });
}

/// The same for a `select_async` holding an `after` operation.
#[test]
fn select_async_timer_outlives_the_runtime_it_first_waited_on() {
    watchdog(10, || {
        let rt = workers(1);
        let t = chan::after(Duration::from_millis(100));
        let (_tx, rx) = chan::unbounded::<u8>();
        let mut sel = Select::new();
        sel.recv(&rx);
        let ti = sel.recv(&t);
        let mut fut = Box::pin(sel.select_async());
        let pending = rt.block_on(async {
            std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_pending())).await
        });
        assert!(pending);
        drop(rt);
        let got = poll_until(fut, Duration::from_secs(2)).map(|op| {
            let i = op.index();
            assert!(op.recv(&t).is_ok());
            i
        });
        assert_eq!(
            got,
            Some(ti),
            "the select hung once its runtime was dropped"
        );
    });
}

// ---------------------------------------------------------------------------------
// Select
// ---------------------------------------------------------------------------------

/// A select's send and receive on the same rendezvous channel never pair with each
/// other (crossbeam: the select times out).
#[test]
fn select_send_and_recv_on_one_rendezvous_channel_do_not_pair() {
    watchdog(10, || {
        let (tx, rx) = chan::bounded::<u8>(0);
        let mut sel = Select::new();
        sel.send(&tx);
        sel.recv(&rx);
        assert!(sel.select_timeout(Duration::from_millis(50)).is_err());
        assert!(sel.try_select().is_err());
        // A real partner arrives: the select pairs with it.
        let rx2 = rx.clone();
        let h = thread::spawn(move || rx2.recv_timeout(Duration::from_secs(2)));
        let op = sel
            .select_timeout(Duration::from_secs(2))
            .expect("selected");
        assert_eq!(op.index(), 0);
        op.send(&tx, 9).unwrap();
        assert_eq!(h.join().unwrap(), Ok(9));
    });
}

/// A select reused after several timeouts still works, and over the same receiver
/// twice plus `never` and a closed channel.
#[test]
fn select_reused_after_timeouts_and_with_closed_and_never() {
    watchdog(10, || {
        let (tx, rx) = chan::bounded::<u32>(1);
        let n = chan::never::<u32>();
        let mut sel = Select::new();
        let a = sel.recv(&rx);
        let b = sel.recv(&rx);
        sel.recv(&n);
        for _ in 0..5 {
            assert!(sel.select_timeout(Duration::from_millis(5)).is_err());
            assert!(sel.ready_timeout(Duration::from_millis(5)).is_err());
        }
        let h = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            tx.send_blocking(7).unwrap();
            tx
        });
        let op = sel
            .select_timeout(Duration::from_secs(2))
            .expect("selected");
        assert!(op.index() == a || op.index() == b);
        assert_eq!(op.recv(&rx), Ok(7));
        let tx = h.join().unwrap();
        // Closed: both receive operations are ready with the disconnect.
        drop(tx);
        for _ in 0..4 {
            let op = sel
                .select_timeout(Duration::from_secs(1))
                .expect("closed is ready");
            assert!(op.index() == a || op.index() == b);
            assert_eq!(op.recv(&rx), Err(chan::RecvError));
        }
    });
}

/// A selected receive dropped unperformed gives its value back, for buffered and
/// rendezvous channels, many times over: nothing is lost.
#[test]
fn unperformed_selected_operations_give_values_back() {
    watchdog(10, || {
        for cap in [0usize, 1, 3] {
            let (tx, rx) = chan::bounded::<u32>(cap);
            let h = thread::spawn(move || {
                for i in 0..50 {
                    tx.send_blocking(i).unwrap();
                }
            });
            let mut got = Vec::new();
            let mut sel = Select::new();
            sel.recv(&rx);
            sel.recv(&rx);
            let mut k = 0;
            while got.len() < 50 {
                let op = sel.select_timeout(Duration::from_secs(2)).expect("a value");
                k += 1;
                if k % 2 == 0 {
                    drop(op);
                } else {
                    got.push(op.recv(&rx).unwrap());
                }
            }
            h.join().unwrap();
            assert_eq!(got, (0..50).collect::<Vec<_>>(), "cap {cap}");
            assert!(rx.recv_timeout(Duration::from_millis(20)).is_err());
        }
    });
}

// ---------------------------------------------------------------------------------
// Messages whose Drop panics
// ---------------------------------------------------------------------------------

struct Noisy(Arc<AtomicUsize>, bool);
impl Drop for Noisy {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        if self.1 {
            panic!("noisy drop");
        }
    }
}

/// A send future holding a value whose Drop panics, dropped while it waits: the panic
/// reaches the dropper, and the channel stays usable (its lock released, the node off
/// the list).
#[test]
fn send_future_dropped_with_a_panicking_value_leaves_the_channel_usable() {
    watchdog(10, || {
        let drops = counter();
        let (tx, rx) = chan::bounded::<Noisy>(0);
        let mut f = Box::pin(tx.send(Noisy(drops.clone(), true)));
        assert!(noop_poll(f.as_mut()).is_pending());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(f)));
        assert!(r.is_err());
        assert_eq!(load(&drops), 1);
        let h = {
            let d = drops.clone();
            let tx = tx.clone();
            thread::spawn(move || tx.send_blocking(Noisy(d, false)).is_ok())
        };
        let v = rx
            .recv_timeout(Duration::from_secs(2))
            .expect("the channel works");
        assert!(h.join().unwrap());
        drop(v);
        assert_eq!(load(&drops), 2);
        assert!(rx.try_recv().is_err());
    });
}

/// A select whose receive of a panicking-drop value is dropped unperformed: the value
/// goes back to the channel, not dropped.
#[test]
fn unperformed_select_of_a_panicking_value_gives_it_back() {
    watchdog(10, || {
        let drops = counter();
        let (tx, rx) = chan::unbounded::<Noisy>();
        tx.send_blocking(Noisy(drops.clone(), false)).unwrap();
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.select();
        drop(op);
        assert_eq!(load(&drops), 0, "the value went back, not dropped");
        drop(rx.try_recv().unwrap());
        assert_eq!(load(&drops), 1);
    });
}

// ---------------------------------------------------------------------------------
// Mixed contexts, futures dropped on other threads
// ---------------------------------------------------------------------------------

/// One channel used at once by tasks (some receives cancelled by timeouts), fibers,
/// workers and plain threads: every value arrives once.
#[test]
fn mixed_contexts_with_cancelled_receives_lose_nothing() {
    watchdog(15, || {
        let rt = workers(3);
        const N: usize = 600;
        let (tx, rx) = chan::bounded::<usize>(2);
        let seen = Arc::new(std::sync::Mutex::new(vec![0u8; 4 * N]));
        let done = Arc::new(AtomicBool::new(false));
        let mut senders = Vec::new();
        // Plain thread sender.
        {
            let tx = tx.clone();
            senders.push(thread::spawn(move || {
                for i in 0..N {
                    tx.send_blocking(i).unwrap();
                }
            }));
        }
        // Task sender.
        let t1 = {
            let tx = tx.clone();
            rt.spawn(async move {
                for i in N..2 * N {
                    tx.send(i).await.unwrap();
                }
            })
        };
        // Fiber sender.
        let t2 = {
            let tx = tx.clone();
            common::fiber_on(&rt, move || {
                for i in 2 * N..3 * N {
                    tx.send_blocking(i).unwrap();
                }
            })
        };
        // A worker (a task blocking by wait's rule) sender.
        let t3 = {
            let tx = tx.clone();
            rt.spawn(async move {
                for i in 3 * N..4 * N {
                    tx.send_blocking(i).unwrap();
                }
            })
        };
        drop(tx);
        let mut recvs = Vec::new();
        // Task receiver with receives cancelled by short timeouts.
        {
            let (rx, seen) = (rx.clone(), seen.clone());
            recvs.push(rt.spawn(async move {
                loop {
                    match weft::time::timeout(Duration::from_micros(100), rx.recv()).await {
                        Ok(Ok(v)) => seen.lock().unwrap()[v] += 1,
                        Ok(Err(_)) => return,
                        Err(_) => {}
                    }
                }
            }));
        }
        // Fiber receiver.
        {
            let (rx, seen) = (rx.clone(), seen.clone());
            recvs.push(common::fiber_on(&rt, move || {
                while let Ok(v) = rx.recv_blocking() {
                    seen.lock().unwrap()[v] += 1;
                }
            }));
        }
        // Plain thread receiver with timed receives.
        let th = {
            let (rx, seen, done) = (rx.clone(), seen.clone(), done.clone());
            thread::spawn(move || loop {
                match rx.recv_timeout(Duration::from_micros(50)) {
                    Ok(v) => seen.lock().unwrap()[v] += 1,
                    Err(chan::RecvTimeoutError::Disconnected) => {
                        done.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(_) => {}
                }
            })
        };
        drop(rx);
        for s in senders {
            s.join().unwrap();
        }
        for h in [t1, t2, t3] {
            common::join_within(h, 10).unwrap();
        }
        for h in recvs {
            common::join_within(h, 10).unwrap();
        }
        th.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        let seen = seen.lock().unwrap();
        let bad: Vec<_> = seen
            .iter()
            .enumerate()
            .filter(|(_, &c)| c != 1)
            .take(5)
            .collect();
        assert!(bad.is_empty(), "values lost or duplicated: {bad:?}");
    });
}

// ---------------------------------------------------------------------------------
// The runtime dropped while waiters of every kind wait on a rendezvous channel
// ---------------------------------------------------------------------------------

/// How a waiter that the runtime's drop ends waits.
#[derive(Clone, Copy, Debug)]
enum Waiter {
    TaskRecv,
    TaskSelect,
    FiberRecv,
    FiberSelect,
}

/// Starts a waiter of `kind` on `rt` receiving from `rx` (a clone stays outside) and
/// returns once it is about to wait.
fn start_waiter(rt: &weft::Runtime, kind: Waiter, rx: chan::Receiver<Tracked>) {
    let (started_tx, started) = mpsc::channel();
    match kind {
        Waiter::TaskRecv => {
            let _h = rt.spawn(async move {
                started_tx.send(()).unwrap();
                drop(rx.recv().await);
            });
        }
        Waiter::TaskSelect => {
            let _h = rt.spawn(async move {
                started_tx.send(()).unwrap();
                let n = chan::never::<Tracked>();
                let mut sel = Select::new();
                sel.recv(&rx);
                sel.recv(&n);
                let op = sel.select_async().await;
                drop(op.recv(&rx));
            });
        }
        Waiter::FiberRecv => {
            let _h = common::fiber_on(rt, move || {
                started_tx.send(()).unwrap();
                drop(rx.recv_blocking());
            });
        }
        Waiter::FiberSelect => {
            let _h = common::fiber_on(rt, move || {
                started_tx.send(()).unwrap();
                let n = chan::never::<Tracked>();
                weft::select! {
                    recv(rx) -> m => drop(m),
                    recv(n) -> m => drop(m),
                }
            });
        }
    }
    started.recv().unwrap();
    thread::sleep(Duration::from_millis(30));
}

/// The runtime dropped while a task or a fiber waits to receive on a rendezvous
/// channel whose other receiver lives on: afterwards a send finds no receiver (it
/// times out with its value back) instead of handing its value to a waiter that no
/// longer exists, and nothing is leaked. (A task blocking its worker in
/// `recv_blocking` is left out: the runtime's drop waits for such a wait to complete,
/// as `weft::wait` documents.)
#[test]
fn runtime_dropped_under_waiting_receivers_strands_no_value() {
    watchdog(15, || {
        for kind in [
            Waiter::TaskRecv,
            Waiter::TaskSelect,
            Waiter::FiberRecv,
            Waiter::FiberSelect,
        ] {
            let live = live();
            let (tx, rx) = chan::bounded::<Tracked>(0);
            let rt = workers(2);
            start_waiter(&rt, kind, rx.clone());
            drop(rt);
            match tx.send_timeout(Tracked::new(1, &live), Duration::from_millis(150)) {
                Err(chan::SendTimeoutError::Timeout(v)) => drop(v),
                other => panic!(
                    "{kind:?}: the value went to a waiter the runtime's drop ended: {other:?}"
                ),
            }
            // The outside receiver still pairs with a sender.
            let h = {
                let (tx, live) = (tx.clone(), live.clone());
                thread::spawn(move || tx.send_blocking(Tracked::new(2, &live)).is_ok())
            };
            let v = rx.recv_timeout(Duration::from_secs(2)).expect("paired");
            assert_eq!(v.id, 2);
            drop(v);
            assert!(h.join().unwrap());
            drop((tx, rx));
            assert_eq!(load(&live), 0, "{kind:?}: a value leaked");
        }
    });
}

/// A fiber blocked in a rendezvous `send_blocking` when the runtime is dropped: its
/// value is dropped with it (not delivered later to a receiver), and the channel is
/// disconnected once the fiber's sender went with it.
#[test]
fn runtime_dropped_under_a_blocked_fiber_send_drops_its_value() {
    watchdog(10, || {
        let live = live();
        let (tx, rx) = chan::bounded::<Tracked>(0);
        let rt = workers(2);
        let (started_tx, started) = mpsc::channel();
        let l = live.clone();
        let _h = common::fiber_on(&rt, move || {
            started_tx.send(()).unwrap();
            let _ = tx.send_blocking(Tracked::new(1, &l));
        });
        started.recv().unwrap();
        thread::sleep(Duration::from_millis(30));
        drop(rt);
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(500)).map(|v| v.id),
            Err(chan::RecvTimeoutError::Disconnected)
        );
        assert_eq!(load(&live), 0);
    });
}

/// Found in review (failed every run before the fix): a `tick` message came again after
/// a later one was received, going back in time. Interleaving: a select takes tick T1 (`Timer::try_take` moves `next` on to
/// now + period); a clone of the receiver (clones share the timer) then receives T2;
/// the `SelectedOperation` is dropped unperformed, and `Timer::give_back`
/// (src/chan/timer.rs) sets `next = T1` unconditionally, rewinding over T2: the next
/// receive returns T1 at once, older than T2 already delivered (and a tick more than
/// the period allows). Crossbeam's tick receiver delivers increasing instants. Fixed
/// (`Timer::give_back`): a tick comes back only if no later one was taken meanwhile.
#[test]
fn tick_messages_never_go_back_in_time() {
    watchdog(10, || {
        let t = chan::tick(Duration::from_millis(20));
        let t2 = t.clone();
        let mut sel = Select::new();
        sel.recv(&t);
        let op = sel.select_timeout(Duration::from_secs(1)).expect("a tick");
        // The clone receives the next tick while the first is held by the select.
        let second = t2.recv_timeout(Duration::from_secs(1)).expect("next tick");
        drop(op);
        drop(sel);
        let third = t2
            .recv_timeout(Duration::from_secs(1))
            .expect("another tick");
        assert!(
            third > second,
            "a tick older than one already received came again: {third:?} after {second:?}"
        );
    });
}

/// A receiver's `Stream` on a rendezvous channel, racing blocking receivers on other
/// threads and timed receives in tasks: every value is delivered exactly once.
#[test]
fn stream_racing_other_receivers_on_a_rendezvous_channel_loses_nothing() {
    use std::future::poll_fn;
    watchdog(15, || {
        let rt = workers(2);
        const N: usize = 400;
        let (tx, rx) = chan::bounded::<usize>(0);
        let seen = Arc::new(std::sync::Mutex::new(vec![0u8; N]));
        let streamer = {
            let (mut rx, seen) = (rx.clone(), seen.clone());
            rt.spawn(async move {
                loop {
                    let next =
                        poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut rx), cx)).await;
                    match next {
                        Some(v) => seen.lock().unwrap()[v] += 1,
                        None => return,
                    }
                }
            })
        };
        let timed = {
            let (rx, seen) = (rx.clone(), seen.clone());
            rt.spawn(async move {
                loop {
                    match weft::time::timeout(Duration::from_micros(70), rx.recv()).await {
                        Ok(Ok(v)) => seen.lock().unwrap()[v] += 1,
                        Ok(Err(_)) => return,
                        Err(_) => {}
                    }
                }
            })
        };
        let th = {
            let (rx, seen) = (rx.clone(), seen.clone());
            thread::spawn(move || {
                while let Ok(v) = rx.recv_blocking() {
                    seen.lock().unwrap()[v] += 1;
                }
            })
        };
        drop(rx);
        let s = common::fiber_on(&rt, move || {
            for i in 0..N {
                tx.send_blocking(i).unwrap();
            }
        });
        common::join_within(s, 10).unwrap();
        common::join_within(streamer, 10).unwrap();
        common::join_within(timed, 10).unwrap();
        common::thread_within(th, 10);
        let seen = seen.lock().unwrap();
        let bad: Vec<_> = seen
            .iter()
            .enumerate()
            .filter(|(_, &c)| c != 1)
            .take(5)
            .collect();
        assert!(bad.is_empty(), "values lost or duplicated: {bad:?}");
    });
}
