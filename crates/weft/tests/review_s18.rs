//! Adversarial review of the changes since 0e2b744 (session 18): the blocking send's and
//! receive's first tries (`Chan::send_fast`, `Chan::recv_fast_first` with
//! `Ring::try_pop_written_into`, `after_fast_pop`'s settle holding the value), the wake
//! batch's inline drop, `Sem::acquire`'s try-first (mutex, rwlock, semaphore; also the
//! blocking `wait_acquire`), `block_thread`'s waker that takes the thread signal's
//! reference, and `EnterGuard::drop`'s pop. Public API only; every loop is bounded and
//! every scenario that could hang runs under a watchdog.

use std::cell::RefCell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier, Mutex as StdMutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use weft::chan::{self, RecvError, RecvTimeoutError, SendTimeoutError, TryRecvError};
use weft::sync::{Mutex, RwLock, Semaphore};
use weft::{Handle, Runtime};

mod chan_common;
use chan_common::{fiber_on, join_within, make, panicking_waker, watchdog, Drops, Rng, Tracked};

/// Busy-waits a pseudo-random short while, to land inside the other side's window.
fn jitter(rng: &mut Rng, max: u64) {
    for _ in 0..rng.below(max.max(1)) {
        std::hint::spin_loop();
    }
}

/// `n` divided by `WEFT_S18_SCALE` (at least 1): fewer rounds under valgrind.
fn scaled(n: u64) -> u64 {
    let div = std::env::var("WEFT_S18_SCALE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    (n / div).max(1)
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// Silences the "waker panics" messages of the panicking wakers (they are expected),
/// leaving every other panic's report as it was.
fn quiet_waker_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| info.payload().downcast_ref::<String>().map(|s| s.as_str()));
            if msg != Some("waker panics") {
                prev(info);
            }
        }));
    });
}

fn rt_named(name: &str) -> Runtime {
    weft::Builder::new()
        .worker_threads(2)
        .thread_name(name)
        .build()
        .unwrap()
}

// ---- 1. blocking sends and receives: exactly once, racing close, every context ----

/// How a participant runs.
#[derive(Clone, Copy, Debug)]
enum Ctx {
    Thread,
    Fiber,
    Task,
}

/// Three senders (thread, fiber, task) and three receivers (thread, fiber, task) on
/// every flavour; the thread sender closes the channel part way. Every value a send
/// accepted is received exactly once, every refused one comes back to its sender,
/// every value is dropped exactly once, and a receiver that saw `Disconnected` keeps
/// seeing it (`try_recv`, `recv_blocking`), with `len() == 0` and `is_empty()`.
#[test]
fn blocking_ops_racing_close_exactly_once_in_every_context() {
    watchdog(300, || {
        for cap in [Some(0), Some(1), Some(2), Some(16), None] {
            for round in 0..3u64 {
                one_close_race(cap, round);
            }
        }
    });
}

/// Blocking sends of ids `s * per ..`, closing after `close_at`; stops at the first
/// refusal. (accepted ids, refused ids).
fn sync_sends(
    s: usize,
    per: usize,
    close_at: Option<usize>,
    drops: &Drops,
    tx: &chan::Sender<Tracked>,
) -> (Vec<usize>, Vec<usize>) {
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    for i in 0..per {
        match tx.send_blocking(drops.make(s * per + i)) {
            Ok(()) => ok.push(s * per + i),
            Err(e) => {
                refused.push(e.0.id);
                break;
            }
        }
        if close_at == Some(i) {
            tx.close();
        }
    }
    (ok, refused)
}

fn one_close_race(cap: Option<usize>, round: u64) {
    const PER: usize = 300;
    let rt = chan_common::rt2();
    let drops = Drops::new(3 * PER);
    let (tx, rx) = make::<Tracked>(cap);
    let ctxs = [Ctx::Thread, Ctx::Fiber, Ctx::Task];
    let mut senders = Vec::new();
    for (s, &ctx) in ctxs.iter().enumerate() {
        let tx = tx.clone();
        let drops = drops.clone();
        let close_at = if s == 0 {
            Some(PER / 2 + round as usize * 37)
        } else {
            None
        };
        let h: Box<dyn FnOnce() -> (Vec<usize>, Vec<usize>) + Send> = match ctx {
            Ctx::Thread => {
                let t = std::thread::spawn(move || sync_sends(s, PER, close_at, &drops, &tx));
                Box::new(move || t.join().unwrap())
            }
            Ctx::Fiber => {
                let h = fiber_on(&rt, move || sync_sends(s, PER, close_at, &drops, &tx));
                Box::new(move || join_within(h, 120).unwrap())
            }
            Ctx::Task => {
                let h = rt.spawn(async move {
                    let (mut ok, mut refused) = (Vec::new(), Vec::new());
                    for i in 0..PER {
                        let id = s * PER + i;
                        match tx.send(drops.make(id)).await {
                            Ok(()) => ok.push(id),
                            Err(e) => {
                                refused.push(e.0.id);
                                break;
                            }
                        }
                    }
                    (ok, refused)
                });
                Box::new(move || join_within(h, 120).unwrap())
            }
        };
        senders.push(h);
    }
    drop(tx);
    let after_disconnect = |rx: &chan::Receiver<Tracked>| {
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
        assert_eq!(rx.recv_blocking().unwrap_err(), RecvError);
        assert_eq!(rx.len(), 0);
        assert!(rx.is_empty());
    };
    let mut receivers: Vec<Box<dyn FnOnce() -> Vec<usize> + Send>> = Vec::new();
    for &ctx in &ctxs {
        let rx = rx.clone();
        match ctx {
            Ctx::Thread => {
                let t = std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Ok(v) = rx.recv_blocking() {
                        got.push(v.id);
                    }
                    after_disconnect(&rx);
                    got
                });
                receivers.push(Box::new(move || t.join().unwrap()));
            }
            Ctx::Fiber => {
                let h = fiber_on(&rt, move || {
                    let mut got = Vec::new();
                    while let Ok(v) = rx.recv_blocking() {
                        got.push(v.id);
                    }
                    after_disconnect(&rx);
                    got
                });
                receivers.push(Box::new(move || join_within(h, 120).unwrap()));
            }
            Ctx::Task => {
                let h = rt.spawn(async move {
                    let mut got = Vec::new();
                    while let Ok(v) = rx.recv().await {
                        got.push(v.id);
                    }
                    assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
                    assert!(rx.is_empty());
                    got
                });
                receivers.push(Box::new(move || join_within(h, 120).unwrap()));
            }
        }
    }
    drop(rx);
    let mut sent = Vec::new();
    let mut refused = Vec::new();
    for h in senders {
        let (ok, r) = h();
        sent.extend(ok);
        refused.extend(r);
    }
    let mut got: Vec<usize> = receivers.into_iter().flat_map(|h| h()).collect();
    got.sort_unstable();
    sent.sort_unstable();
    assert_eq!(got, sent, "cap {cap:?} round {round}: received != accepted");
    for id in &refused {
        assert!(
            sent.binary_search(id).is_err(),
            "{id} both sent and refused"
        );
    }
    for id in sent.iter().chain(&refused) {
        assert_eq!(drops.get(*id), 1, "cap {cap:?}: value {id} dropped wrongly");
    }
    assert_eq!(
        drops.total(),
        sent.len() + refused.len(),
        "cap {cap:?}: extra drops"
    );
}

// ---- 2. the receiver's first try against a sender registering on a full bounded(1) ----

/// A full `bounded(1)`; a sender (thread, task or fiber) sends a second value while a
/// blocking receiver (thread or fiber) takes the first. The sender must complete
/// without any further receive: if it slept with the slot free (a lost wakeup between
/// the first try's pop and the sender's registration), the round hangs and fails.
#[test]
fn first_try_never_leaves_a_registering_sender_asleep() {
    watchdog(300, || {
        let rt = chan_common::rt2();
        let mut rng = Rng::new(18);
        for round in 0..scaled(1500) {
            let (tx, rx) = chan::bounded::<u64>(1);
            tx.try_send(1).unwrap();
            let (done_tx, done_rx) = mpsc::channel();
            let spin = rng.below(3000);
            match round % 3 {
                0 => {
                    std::thread::spawn(move || {
                        let mut r = Rng::new(round);
                        jitter(&mut r, spin);
                        tx.send_blocking(2).unwrap();
                        let _ = done_tx.send(());
                    });
                }
                1 => {
                    drop(rt.spawn(async move {
                        tx.send(2).await.unwrap();
                        let _ = done_tx.send(());
                    }));
                }
                _ => {
                    drop(fiber_on(&rt, move || {
                        let mut r = Rng::new(round);
                        jitter(&mut r, spin);
                        tx.send_blocking(2).unwrap();
                        let _ = done_tx.send(());
                    }));
                }
            }
            let first = if round % 2 == 0 {
                jitter(&mut rng, 3000);
                rx.recv_blocking().unwrap()
            } else {
                let rx2 = rx.clone();
                let spin = rng.below(3000);
                join_within(
                    fiber_on(&rt, move || {
                        let mut r = Rng::new(spin);
                        jitter(&mut r, spin);
                        rx2.recv_blocking().unwrap()
                    }),
                    60,
                )
                .unwrap()
            };
            assert_eq!(first, 1);
            done_rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("round {round}: the sender slept with the slot free"));
            assert_eq!(rx.try_recv(), Ok(2));
        }
    });
}

/// The mirror: a receiver registering on an empty channel while a blocking send's
/// first try (`send_fast`) pushes; the receiver must be woken with the value.
#[test]
fn blocking_send_first_try_wakes_a_registering_receiver() {
    watchdog(300, || {
        let mut rng = Rng::new(7);
        for cap in [Some(1), Some(4), None] {
            for round in 0..scaled(600) {
                let (tx, rx) = make::<u64>(cap);
                let (done_tx, done_rx) = mpsc::channel();
                let spin = rng.below(3000);
                std::thread::spawn(move || {
                    let mut r = Rng::new(round);
                    jitter(&mut r, spin);
                    let _ = done_tx.send(rx.recv_blocking());
                });
                jitter(&mut rng, 3000);
                tx.send_blocking(round).unwrap();
                let got = done_rx
                    .recv_timeout(Duration::from_secs(30))
                    .unwrap_or_else(|_| panic!("cap {cap:?} round {round}: receiver never woken"));
                assert_eq!(got, Ok(round));
                drop(tx);
            }
        }
    });
}

// ---- 3. a panicking wake during the settle that follows a blocking receive ----

/// A full `bounded(1)`; another thread polls a send of a second value once with a
/// waker that panics, racing a blocking receive on this thread (the first try's
/// settle, or the locked path, admits the sender and wakes it: that wake panics
/// here). Whatever the interleaving: if the receive returned, it returned the first
/// value; if it panicked, the first value went back to the channel (not lost, not
/// dropped). Afterwards the values come out in order, each is dropped exactly once,
/// and the send future completes.
#[test]
fn panicking_wake_in_a_blocking_receive_gives_the_value_back() {
    quiet_waker_panics();
    watchdog(300, || {
        let mut rng = Rng::new(99);
        let (mut panics, mut self_wakes) = (0, 0);
        for round in 0..scaled(1500) {
            let drops = Drops::new(2);
            let (tx, rx) = chan::bounded::<Tracked>(1);
            tx.try_send(drops.make(0)).unwrap();
            let armed = Arc::new(AtomicBool::new(true));
            let (polled_tx, polled_rx) = mpsc::channel();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let spin = rng.below(4000);
            let (d2, armed2) = (drops.clone(), armed.clone());
            let sender = std::thread::spawn(move || {
                let mut r = Rng::new(round ^ 0x55);
                jitter(&mut r, spin);
                let waker = panicking_waker(armed2);
                let mut cx = Context::from_waker(&waker);
                let mut fut = Box::pin(tx.send(d2.make(1)));
                // The registering poll may itself find the room freed (its settle
                // under the lock admits it) and wake its own waker, which panics here:
                // the value is in the channel then, and the future is dropped.
                let first = catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx)));
                let Ok(first) = first else {
                    drop(fut);
                    let _ = polled_tx.send(None);
                    return;
                };
                let _ = polled_tx.send(Some(first.is_ready()));
                if first.is_pending() {
                    go_rx.recv().unwrap();
                    let mut cx = noop_cx();
                    match fut.as_mut().poll(&mut cx) {
                        Poll::Ready(r) => r.map_err(|_| "send failed").unwrap(),
                        Poll::Pending => panic!("send still pending after the receive"),
                    }
                }
            });
            jitter(&mut rng, 4000);
            let r = catch_unwind(AssertUnwindSafe(|| rx.recv_blocking()));
            let polled = polled_rx.recv_timeout(Duration::from_secs(30)).unwrap();
            if polled.is_none() {
                self_wakes += 1;
            }
            let ready_at_once = polled.unwrap_or(false);
            let mut got = Vec::new();
            match r {
                Ok(v) => got.push(v.unwrap().id),
                Err(_) => {
                    panics += 1;
                    assert!(!ready_at_once, "a wake panicked but nobody waited");
                    assert_eq!(drops.get(0), 0, "round {round}: the held value was dropped");
                }
            }
            armed.store(false, SeqCst);
            let _ = go_tx.send(());
            sender.join().unwrap();
            while let Ok(v) = rx.try_recv() {
                got.push(v.id);
            }
            assert_eq!(
                got,
                [0, 1],
                "round {round}: values lost, duplicated or reordered"
            );
            assert_eq!((drops.get(0), drops.get(1)), (1, 1), "round {round}");
            assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
        }
        eprintln!(
            "panicking wakes hit: {panics} in the receive, {self_wakes} in the send's own poll, of {} rounds",
            scaled(1500)
        );
    });
}

// ---- 4. len / is_empty while blocking ops run ----

/// Two blocking senders and two blocking receivers on a bounded ring; a monitor checks
/// that `len()` never exceeds the capacity and that `is_empty()` agrees with a zero
/// `len()` when two reads around it agree. Two equal reads do not prove that nothing
/// moved between them (a value sent and received in between: this failed once in a
/// loaded CI run, "is_empty false with len 0 before and after"), so only a disagreement
/// that persists over many checks in a row fails. Every value arrives exactly once.
#[test]
fn len_stays_within_capacity_under_blocking_traffic() {
    watchdog(240, || {
        for cap in [1usize, 2, 8] {
            let per: u64 = scaled(20_000);
            let (tx, rx) = chan::bounded::<u64>(cap);
            let stop = Arc::new(AtomicBool::new(false));
            let monitor = {
                let (rx, stop) = (rx.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut checks = 0u64;
                    let mut disagreements_in_a_row = 0;
                    while !stop.load(SeqCst) && checks < 5_000_000 {
                        let a = rx.len();
                        assert!(a <= cap, "len {a} > cap {cap}");
                        let e = rx.is_empty();
                        let b = rx.len();
                        if a == b {
                            if e == (a == 0) {
                                disagreements_in_a_row = 0;
                            } else {
                                disagreements_in_a_row += 1;
                                assert!(
                                    disagreements_in_a_row < 64,
                                    "is_empty {e} with len {a} before and after, 64 times in a row"
                                );
                            }
                        }
                        checks += 1;
                    }
                })
            };
            let senders: Vec<_> = (0..2u64)
                .map(|s| {
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        for i in 0..per {
                            tx.send_blocking(s * per + i).unwrap();
                        }
                    })
                })
                .collect();
            drop(tx);
            let receivers: Vec<_> = (0..2)
                .map(|_| {
                    let rx = rx.clone();
                    std::thread::spawn(move || {
                        let mut got = Vec::new();
                        while let Ok(v) = rx.recv_blocking() {
                            got.push(v);
                        }
                        got
                    })
                })
                .collect();
            for s in senders {
                s.join().unwrap();
            }
            let mut all: Vec<u64> = receivers
                .into_iter()
                .flat_map(|r| r.join().unwrap())
                .collect();
            stop.store(true, SeqCst);
            monitor.join().unwrap();
            all.sort_unstable();
            assert_eq!(all.len() as u64, 2 * per, "cap {cap}");
            assert!(
                all.iter().enumerate().all(|(i, &v)| v == i as u64),
                "cap {cap}: lost or duplicated"
            );
        }
    });
}

// ---- 5. timed sends and receives (block_thread_until) ----

/// Threads exchange values with `send_timeout`/`recv_timeout` of short timeouts (so
/// that many time out while partners arrive): a timed-out send gets its value back and
/// retries it, and every value is received exactly once, and dropped exactly once.
#[test]
fn timed_ops_exactly_once() {
    watchdog(300, || {
        for cap in [Some(0), Some(1), Some(3), None] {
            const PER: usize = 1500;
            let drops = Drops::new(2 * PER);
            let (tx, rx) = make::<Tracked>(cap);
            let timeouts = Arc::new(AtomicUsize::new(0));
            let senders: Vec<_> = (0..2)
                .map(|s| {
                    let (tx, drops, timeouts) = (tx.clone(), drops.clone(), timeouts.clone());
                    std::thread::spawn(move || {
                        let deadline = Instant::now() + Duration::from_secs(120);
                        for i in 0..PER {
                            let mut v = drops.make(s * PER + i);
                            let mut wait = 1 + (i % 7) as u64 * 20;
                            loop {
                                assert!(Instant::now() < deadline, "hang: sender stuck");
                                match tx.send_timeout(v, Duration::from_micros(wait)) {
                                    Ok(()) => break,
                                    Err(SendTimeoutError::Timeout(back)) => {
                                        timeouts.fetch_add(1, SeqCst);
                                        v = back;
                                        wait = (wait * 2).min(5000);
                                    }
                                    Err(SendTimeoutError::Disconnected(_)) => {
                                        panic!("disconnected while receivers live")
                                    }
                                }
                            }
                        }
                    })
                })
                .collect();
            drop(tx);
            let receivers: Vec<_> = (0..2)
                .map(|r| {
                    let (rx, timeouts) = (rx.clone(), timeouts.clone());
                    std::thread::spawn(move || {
                        let deadline = Instant::now() + Duration::from_secs(120);
                        let mut got = Vec::new();
                        let mut k = r as u64;
                        loop {
                            assert!(Instant::now() < deadline, "hang: receiver stuck");
                            k += 1;
                            match rx.recv_timeout(Duration::from_micros(1 + (k % 5) * 40)) {
                                Ok(v) => got.push(v.id),
                                Err(RecvTimeoutError::Timeout) => {
                                    timeouts.fetch_add(1, SeqCst);
                                }
                                Err(RecvTimeoutError::Disconnected) => break,
                            }
                        }
                        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
                        got
                    })
                })
                .collect();
            drop(rx);
            for s in senders {
                s.join().unwrap();
            }
            let mut all: Vec<usize> = receivers
                .into_iter()
                .flat_map(|r| r.join().unwrap())
                .collect();
            all.sort_unstable();
            assert_eq!(all.len(), 2 * PER, "cap {cap:?}: lost or duplicated");
            assert!(all.iter().enumerate().all(|(i, &v)| v == i), "cap {cap:?}");
            assert!(
                (0..2 * PER).all(|i| drops.get(i) == 1),
                "cap {cap:?}: drop counts"
            );
            eprintln!("cap {cap:?}: {} timeouts", timeouts.load(SeqCst));
        }
    });
}

// ---- 6. sync: fairness and cancel-safety with the try-first acquire ----

/// A queued `lock()` is handed the mutex when its holder lets go: a fresh `lock()`,
/// `try_lock` and `lock_blocking` all wait behind it (the try-first must not barge),
/// and a waiter handed the lock but dropped before its next poll passes it on.
#[test]
fn mutex_fresh_locks_never_overtake_a_queued_one() {
    watchdog(60, || {
        let m = Arc::new(Mutex::new(0u32));
        let mut cx = noop_cx();
        let g = m.try_lock().unwrap();
        let mut a = Box::pin(m.lock());
        assert!(a.as_mut().poll(&mut cx).is_pending());
        drop(g);
        // Handed to `a`: nobody else gets it.
        assert!(m.try_lock().is_err(), "try_lock overtook a queued lock");
        let mut b = Box::pin(m.lock());
        assert!(
            b.as_mut().poll(&mut cx).is_pending(),
            "lock() overtook a queued lock"
        );
        let mut c = Box::pin(m.lock());
        assert!(c.as_mut().poll(&mut cx).is_pending());
        // `a` never polled again: its drop passes the lock to `b`.
        drop(a);
        assert!(m.try_lock().is_err());
        let Poll::Ready(mut gb) = b.as_mut().poll(&mut cx) else {
            panic!("b not handed the lock a dropped")
        };
        *gb += 1;
        // A blocking locker queues behind `c`.
        let order = Arc::new(StdMutex::new(Vec::new()));
        drop(gb);
        let Poll::Ready(mut gc) = c.as_mut().poll(&mut cx) else {
            panic!("c not handed the lock")
        };
        let t = {
            let (m, order) = (m.clone(), order.clone());
            std::thread::spawn(move || {
                let mut g = m.lock_blocking();
                *g += 10;
                order.lock().unwrap().push("thread");
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        *gc += 100;
        order.lock().unwrap().push("c");
        drop(gc);
        drop(c);
        drop(b);
        t.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["c", "thread"]);
        assert_eq!(*m.try_lock().unwrap(), 111);
    });
}

/// A writer queued behind a reader is not overtaken by fresh readers (async, try,
/// blocking); a fresh writer queues behind the first; all of them get in, in order.
#[test]
fn rwlock_fresh_readers_never_overtake_a_queued_writer() {
    watchdog(60, || {
        let l = Arc::new(RwLock::new(0u32));
        let mut cx = noop_cx();
        let r0 = l.try_read().unwrap();
        let mut w = Box::pin(l.write());
        assert!(w.as_mut().poll(&mut cx).is_pending());
        assert!(l.try_read().is_err(), "try_read overtook a queued writer");
        let mut r1 = Box::pin(l.read());
        assert!(
            r1.as_mut().poll(&mut cx).is_pending(),
            "read() overtook a queued writer"
        );
        let mut r2 = Box::pin(l.clone().read_owned());
        assert!(r2.as_mut().poll(&mut cx).is_pending());
        let mut w2 = Box::pin(l.clone().write_owned());
        assert!(w2.as_mut().poll(&mut cx).is_pending());
        drop(r0);
        let Poll::Ready(mut gw) = w.as_mut().poll(&mut cx) else {
            panic!("writer not handed the lock")
        };
        assert!(r1.as_mut().poll(&mut cx).is_pending());
        *gw = 1;
        drop(gw);
        let Poll::Ready(g1) = r1.as_mut().poll(&mut cx) else {
            panic!("r1")
        };
        let Poll::Ready(g2) = r2.as_mut().poll(&mut cx) else {
            panic!("r2")
        };
        assert_eq!((*g1, *g2), (1, 1));
        assert!(w2.as_mut().poll(&mut cx).is_pending());
        // A fresh reader behind the queued writer w2 waits.
        assert!(l.try_read().is_err(), "try_read overtook queued writer w2");
        drop((g1, g2));
        let Poll::Ready(mut g) = w2.as_mut().poll(&mut cx) else {
            panic!("w2")
        };
        *g = 2;
        drop(g);
        assert_eq!(*l.try_read().unwrap(), 2);
    });
}

/// `acquire_many` absorbs permits as they come, and nothing smaller overtakes it;
/// dropping it after it absorbed some passes them on; closing fails every waiter and
/// every later acquire, fast or not.
#[test]
fn semaphore_acquire_many_absorbs_in_order_and_cancels_cleanly() {
    watchdog(60, || {
        let s = Arc::new(Semaphore::new(3));
        let mut cx = noop_cx();
        let held = s.try_acquire_many(2).unwrap();
        let mut big = Box::pin(s.acquire_many(4));
        assert!(big.as_mut().poll(&mut cx).is_pending());
        // It took the one free permit: a fresh acquire of one must not find it.
        assert_eq!(s.available_permits(), 0);
        let mut small = Box::pin(s.acquire());
        assert!(
            small.as_mut().poll(&mut cx).is_pending(),
            "acquire overtook acquire_many"
        );
        assert!(s.try_acquire().is_err());
        drop(held);
        // 3 of 4 absorbed: still pending, and still nothing for the small one.
        assert!(big.as_mut().poll(&mut cx).is_pending());
        assert!(small.as_mut().poll(&mut cx).is_pending());
        assert_eq!(s.available_permits(), 0);
        // Dropped after absorbing three: they pass to `small` (1) and the count (2).
        drop(big);
        let Poll::Ready(Ok(p)) = small.as_mut().poll(&mut cx) else {
            panic!("small not served")
        };
        assert_eq!(s.available_permits(), 2);
        // A blocking acquire of 3 waits; the fast try must not take the 2.
        let t = {
            let s = s.clone();
            std::thread::spawn(move || s.acquire_many_blocking(3).map(|p| p.num_permits()))
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while s.available_permits() != 0 {
            assert!(
                Instant::now() < deadline,
                "hang: blocking acquire never queued"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut one = Box::pin(s.acquire());
        assert!(
            one.as_mut().poll(&mut cx).is_pending(),
            "acquire overtook a blocking acquire_many"
        );
        drop(p);
        assert_eq!(t.join().unwrap().unwrap(), 3);
        let Poll::Ready(Ok(p1)) = one.as_mut().poll(&mut cx) else {
            panic!("one")
        };
        drop(p1);
        // Close with a waiter that absorbed some permits.
        let all = s.try_acquire_many(3).unwrap();
        let mut w = Box::pin(s.clone().acquire_many_owned(2));
        assert!(w.as_mut().poll(&mut cx).is_pending());
        s.close();
        assert!(matches!(w.as_mut().poll(&mut cx), Poll::Ready(Err(_))));
        assert!(matches!(
            Box::pin(s.acquire()).as_mut().poll(&mut cx),
            Poll::Ready(Err(_))
        ));
        assert!(s.acquire_blocking().is_err());
        drop(all);
        assert!(s.try_acquire().is_err());
    });
}

/// Tasks, fibers and threads lock one mutex (async, blocking), with async lockers
/// dropped at random points (before their first poll, while queued, after being
/// handed the lock): every increment made under the lock is counted, nobody hangs,
/// and the lock is free at the end.
#[test]
fn mutex_cancellation_at_every_point_under_contention() {
    watchdog(240, || {
        let rt = chan_common::rt2();
        let m = Arc::new(Mutex::new(0u64));
        let done = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for t in 0..4u64 {
            let (m, done) = (m.clone(), done.clone());
            hs.push(rt.spawn(async move {
                let mut rng = Rng::new(t + 1);
                for _ in 0..800 {
                    let polls = rng.below(4);
                    if let Some(mut g) = chan_common::drop_after(polls, m.lock()).await {
                        *g += 1;
                        done.fetch_add(1, SeqCst);
                    }
                }
            }));
        }
        let mut fibers = Vec::new();
        for _ in 0..2 {
            let (m, done) = (m.clone(), done.clone());
            fibers.push(fiber_on(&rt, move || {
                for _ in 0..800 {
                    *m.lock_blocking() += 1;
                    done.fetch_add(1, SeqCst);
                }
            }));
        }
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (m, done) = (m.clone(), done.clone());
                std::thread::spawn(move || {
                    for _ in 0..800 {
                        *m.lock_blocking() += 1;
                        done.fetch_add(1, SeqCst);
                    }
                })
            })
            .collect();
        for h in hs.into_iter().chain(fibers) {
            join_within(h, 200).unwrap();
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            *m.try_lock().expect("lock left held") as usize,
            done.load(SeqCst)
        );
    });
}

/// The same for a semaphore of 3 with `acquire_many` of 1-3 permits, dropped at
/// random points: permits are never lost or created (all 3 are back at the end, and
/// the holders never held more than 3 at once).
#[test]
fn semaphore_cancellation_conserves_permits() {
    watchdog(240, || {
        let rt = chan_common::rt2();
        let s = Arc::new(Semaphore::new(3));
        let inside = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for t in 0..5u64 {
            let (s, inside) = (s.clone(), inside.clone());
            hs.push(rt.spawn(async move {
                let mut rng = Rng::new(t + 77);
                for _ in 0..600 {
                    let n = 1 + rng.below(3) as u32;
                    let polls = rng.below(4);
                    if let Some(p) = chan_common::drop_after(polls, s.acquire_many(n)).await {
                        let p = p.unwrap();
                        let now = inside.fetch_add(n as usize, SeqCst) + n as usize;
                        assert!(now <= 3, "{now} permits held at once");
                        weft::task::yield_now().await;
                        inside.fetch_sub(n as usize, SeqCst);
                        drop(p);
                    }
                }
            }));
        }
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (s, inside) = (s.clone(), inside.clone());
                std::thread::spawn(move || {
                    for i in 0..600u32 {
                        let n = 1 + i % 3;
                        let p = s.acquire_many_blocking(n).unwrap();
                        let now = inside.fetch_add(n as usize, SeqCst) + n as usize;
                        assert!(now <= 3, "{now} permits held at once");
                        inside.fetch_sub(n as usize, SeqCst);
                        drop(p);
                    }
                })
            })
            .collect();
        for h in hs {
            join_within(h, 200).unwrap();
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(s.available_permits(), 3);
    });
}

// ---- 7. block_on, enter guards, wakers ----

/// Which runtime a spawned task runs on, by its worker's thread name.
async fn runs_on() -> String {
    weft::spawn(async { std::thread::current().name().unwrap_or("").to_string() })
        .await
        .unwrap()
}

/// `block_on` of one runtime nested inside another's `block_on` (and inside a task of
/// the outer one via `spawn_blocking`-free nesting): the inner one is current inside,
/// the outer one again after it returns.
#[test]
fn nested_block_on_of_two_runtimes() {
    watchdog(60, || {
        let a = rt_named("s18-rt-a");
        let b = Arc::new(rt_named("s18-rt-b"));
        for _ in 0..50 {
            let b2 = b.clone();
            let (x, y, z) = a.block_on(async move {
                let x = runs_on().await;
                let y = b2.block_on(async { runs_on().await });
                let z = runs_on().await;
                (x, y, z)
            });
            assert!(x.starts_with("s18-rt-a"), "{x}");
            assert!(y.starts_with("s18-rt-b"), "{y}");
            assert!(z.starts_with("s18-rt-a"), "{z}");
        }
        // From a task and from a fiber of `a`: `b.block_on` returns its future's value
        // (which runtime is current inside is checked by the ignored test below).
        for i in 0..20u64 {
            let h = a.spawn({
                let b = b.clone();
                async move { b.block_on(async move { i * 3 }) }
            });
            assert_eq!(join_within(h, 60).unwrap(), i * 3);
            let b2 = b.clone();
            let h = fiber_on(&a, move || b2.block_on(async move { i + 1 }));
            assert_eq!(join_within(h, 60).unwrap(), i + 1);
        }
        assert!(Handle::try_current().is_err());
    });
}

/// `b.block_on` inside a task or a fiber of runtime `a`: its doc says it runs "with
/// this runtime as the current one (so `spawn` works inside)". On a worker
/// `Handle::try_current` preferred the worker's own runtime, so a `spawn` inside went to
/// `a` (found in this review; fixed in session 28: an entry made on a worker counts for
/// the task or fiber that made it).
#[test]
fn block_on_of_another_runtime_on_a_worker_makes_it_current() {
    watchdog(60, || {
        let a = rt_named("s18-rt-a");
        let b = Arc::new(rt_named("s18-rt-b"));
        for _ in 0..5 {
            let b2 = b.clone();
            let h = a.spawn(async move {
                let y = b2.block_on(async { runs_on().await });
                let z = runs_on().await;
                (y, z)
            });
            let (y, z) = join_within(h, 60).unwrap();
            assert!(y.starts_with("s18-rt-b"), "{y}");
            assert!(z.starts_with("s18-rt-a"), "{z}");
            let b2 = b.clone();
            let h = fiber_on(&a, move || {
                let y = b2.block_on(async { runs_on().await });
                let z = Handle::current().block_on(runs_on());
                (y, z)
            });
            let (y, z) = join_within(h, 60).unwrap();
            assert!(y.starts_with("s18-rt-b"), "{y}");
            assert!(z.starts_with("s18-rt-a"), "{z}");
        }
    });
}

/// Enter guards dropped in order and out of order: dropping an outer guard ends the
/// inner ones (documented), a stale inner guard's later drop is harmless, and the
/// thread ends with no runtime current; `block_on` still works afterwards.
#[test]
fn enter_guards_dropped_out_of_order() {
    watchdog(60, || {
        let a = rt_named("s18-eg-a");
        let b = rt_named("s18-eg-b");
        let name = |h: Handle| h.block_on(runs_on());
        {
            let ga = a.enter();
            let gb = b.enter();
            assert!(name(Handle::current()).starts_with("s18-eg-b"));
            drop(gb);
            assert!(name(Handle::current()).starts_with("s18-eg-a"));
            drop(ga);
            assert!(Handle::try_current().is_err());
        }
        {
            let ga = a.enter();
            let gb = b.enter();
            drop(ga);
            assert!(
                Handle::try_current().is_err(),
                "outer guard's drop ends the inner"
            );
            drop(gb);
            assert!(Handle::try_current().is_err());
        }
        {
            // Three deep, the middle one dropped first.
            let g1 = a.enter();
            let g2 = b.enter();
            let g3 = a.enter();
            drop(g2);
            assert!(name(Handle::current()).starts_with("s18-eg-a"));
            drop(g3);
            assert!(name(Handle::current()).starts_with("s18-eg-a"));
            drop(g1);
            assert!(Handle::try_current().is_err());
        }
        // block_on inside guards, returning to the guard's runtime.
        let g = a.enter();
        assert!(b.block_on(runs_on()).starts_with("s18-eg-b"));
        assert!(name(Handle::current()).starts_with("s18-eg-a"));
        drop(g);
        assert!(Handle::try_current().is_err());
    });
}

/// A stale guard (its outer guard already dropped) dropped while newer guards are
/// live must leave them alone: the runtime of the innermost live guard stays current.
/// (Found in this review: the drop truncated the thread's stack to its depth; fixed in
/// session 28, a guard removes its own entry by id.)
#[test]
fn stale_enter_guard_drop_leaves_newer_guards_alone() {
    let a = rt_named("s18-st-a");
    let b = rt_named("s18-st-b");
    let c = rt_named("s18-st-c");
    let g1 = a.enter();
    let g2 = b.enter();
    drop(g1); // ends g2 too (documented)
    let g3 = c.enter();
    let g4 = a.enter();
    drop(g2); // stale: should do nothing
    let now = Handle::current().block_on(runs_on());
    drop(g4);
    drop(g3);
    assert!(
        now.starts_with("s18-st-a"),
        "innermost live guard is g4 (a), current ran on {now}"
    );
}

/// `block_on` in a `Drop` that runs while a panic unwinds (the thread's signal and its
/// in-use flag are left right: a `block_on` after it works too).
#[test]
fn block_on_from_a_drop_during_unwinding() {
    watchdog(60, || {
        struct D(Arc<Runtime>, Arc<AtomicUsize>);
        impl Drop for D {
            fn drop(&mut self) {
                assert!(std::thread::panicking());
                let v = self
                    .0
                    .block_on(async { weft::spawn(async { 21 }).await.unwrap() * 2 });
                self.1.store(v, SeqCst);
            }
        }
        let rt = Arc::new(chan_common::rt2());
        let out = Arc::new(AtomicUsize::new(0));
        for _ in 0..20 {
            out.store(0, SeqCst);
            let r = catch_unwind(AssertUnwindSafe(|| {
                let _d = D(rt.clone(), out.clone());
                panic!("unwind through block_on");
            }));
            assert!(r.is_err());
            assert_eq!(out.load(SeqCst), 42);
            assert_eq!(rt.block_on(async { 5 }), 5);
        }
        assert!(Handle::try_current().is_err());
    });
}

/// The waker of a finished `block_on` (or `weft::wait`), cloned out and woken from
/// another thread, many times, while this thread goes on with other `block_on`s and
/// waits, and after this thread has exited: harmless (the spurious wake-ups only
/// cause extra polls), and every wait returns the right value.
#[test]
fn stale_block_on_wakers_are_harmless() {
    watchdog(120, || {
        let rt = Arc::new(chan_common::rt2());
        let stash: Arc<StdMutex<Vec<Waker>>> = Arc::new(StdMutex::new(Vec::new()));
        let grab = |stash: &Arc<StdMutex<Vec<Waker>>>| {
            let stash = stash.clone();
            std::future::poll_fn(move |cx| {
                stash.lock().unwrap().push(cx.waker().clone());
                Poll::Ready(())
            })
        };
        rt.block_on(grab(&stash));
        weft::wait(grab(&stash));
        // From a thread that then exits: its thread-local signal goes, the waker keeps it.
        {
            let (rt, stash) = (rt.clone(), stash.clone());
            std::thread::spawn(move || {
                rt.block_on(grab(&stash));
                weft::wait(grab(&stash));
            })
            .join()
            .unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let waker_thread = {
            let (stash, stop) = (stash.clone(), stop.clone());
            std::thread::spawn(move || {
                let wakers = stash.lock().unwrap().clone();
                let mut n = 0u64;
                while !stop.load(SeqCst) && n < 20_000_000 {
                    for w in &wakers {
                        w.wake_by_ref();
                        // By value too: the wake drops a reference to the signal.
                        let by_value = w.clone();
                        by_value.wake();
                    }
                    n += 1;
                }
                n
            })
        };
        for i in 0..scaled(2000) {
            // A real wait that depends on its own wake, with the stale wakes flying.
            let (tx, rx) = chan::bounded::<u64>(0);
            let h = std::thread::spawn(move || tx.send_blocking(i).unwrap());
            assert_eq!(rt.block_on(async { rx.recv().await.unwrap() }), i);
            h.join().unwrap();
        }
        stop.store(true, SeqCst);
        assert!(waker_thread.join().unwrap() > 0);
        // The wakers are dropped here, last references to two threads' signals.
        drop(stash);
    });
}

/// A future whose waker another thread fires concurrently with its completion (the
/// wake may land before, during or after `block_on` returns): every round returns,
/// on a plain thread and inside `weft::wait` nested in `block_on`.
#[test]
fn block_on_woken_concurrently_with_completion() {
    watchdog(120, || {
        let rt = chan_common::rt2();
        let mut rng = Rng::new(5);
        for round in 0..scaled(3000) {
            let flag = Arc::new(AtomicBool::new(false));
            let spin = rng.below(2000);
            let fut = {
                let flag = flag.clone();
                let mut started = None;
                std::future::poll_fn(move |cx| {
                    if flag.load(SeqCst) {
                        return Poll::Ready(round);
                    }
                    if started.is_none() {
                        let (flag, w) = (flag.clone(), cx.waker().clone());
                        started = Some(std::thread::spawn(move || {
                            let mut r = Rng::new(spin);
                            jitter(&mut r, spin);
                            flag.store(true, SeqCst);
                            w.wake_by_ref();
                            w.wake();
                        }));
                    }
                    Poll::Pending
                })
            };
            let got = match round % 3 {
                0 => rt.block_on(fut),
                1 => weft::wait(fut),
                _ => rt.block_on(async move { weft::wait(fut) }),
            };
            assert_eq!(got, round);
        }
    });
}

thread_local! {
    static AT_EXIT: RefCell<Option<AtExit>> = const { RefCell::new(None) };
}

struct AtExit(Arc<Runtime>, mpsc::Sender<Result<u32, String>>);

impl Drop for AtExit {
    fn drop(&mut self) {
        let r = catch_unwind(AssertUnwindSafe(|| self.0.block_on(async { 7u32 })));
        let _ = self.1.send(r.map_err(|p| {
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        }));
    }
}

const CHILD: &str = "WEFT_REVIEW_S18_CHILD";

/// Not a real test unless run as a child (see [`block_on_from_a_thread_local_destructor`]).
#[test]
fn child_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    let rt = Arc::new(chan_common::rt2());
    let (tx, rx) = mpsc::channel();
    let t = {
        let rt = rt.clone();
        std::thread::spawn(move || match case.as_str() {
            // Our local made after the runtime's own (the signal, the entered stack):
            // its destructor runs while they still live (reverse order on Linux).
            "tls_dtor_after" => {
                assert_eq!(rt.block_on(async { 1 }), 1);
                AT_EXIT.with(|a| *a.borrow_mut() = Some(AtExit(rt, tx)));
            }
            // Ours made first: its destructor runs after theirs were destroyed.
            "tls_dtor_before" => {
                AT_EXIT.with(|a| *a.borrow_mut() = Some(AtExit(rt.clone(), tx)));
                assert_eq!(rt.block_on(async { 1 }), 1);
            }
            other => panic!("unknown case {other}"),
        })
    };
    t.join().unwrap();
    let r = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the destructor never reported");
    println!("CHILD result={r:?}");
}

/// `block_on` from a thread-local destructor, run before and after the runtime's own
/// thread-locals are destroyed: it must return the value (or at worst panic cleanly,
/// caught there, which this test reports as a failure); the process must not abort
/// or hang.
#[test]
fn block_on_from_a_thread_local_destructor() {
    tls_dtor_cases();
}

fn tls_dtor_cases() {
    for case in ["tls_dtor_after", "tls_dtor_before"] {
        let exe = std::env::current_exe().unwrap();
        let mut child = std::process::Command::new(exe)
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD, case)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{case}: hang: block_on in a thread-local destructor");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            status.success(),
            "{case}: child failed: {status:?}\n{stdout}\n{stderr}"
        );
        let line = stdout
            .lines()
            .find(|l| l.contains("CHILD result="))
            .unwrap_or("");
        // (After the runtime's thread-locals were gone, `block_on` panicked with std's
        // "cannot access a Thread Local Storage value", found in this review; since
        // session 28 it runs its future there, with no runtime entered.)
        assert!(
            line.contains("Ok(7)"),
            "{case}: block_on in a TLS destructor: {line}\n{stderr}"
        );
    }
}

/// Many threads hammer `block_on`, nested `weft::wait`s and enter guards at once (the
/// thread signal's reuse and the enter stack's pop are per thread; this checks they
/// stay per thread).
#[test]
fn block_on_and_guards_from_many_threads() {
    watchdog(120, || {
        let rt = Arc::new(chan_common::rt2());
        let other = Arc::new(rt_named("s18-many-b"));
        let barrier = Arc::new(Barrier::new(4));
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let (rt, other, barrier) = (rt.clone(), other.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    for i in 0..500u64 {
                        let g = other.enter();
                        let v = rt.block_on(async move {
                            let inner = weft::wait(async move {
                                weft::spawn(async move { i * 2 }).await.unwrap()
                            });
                            inner + t
                        });
                        assert_eq!(v, i * 2 + t);
                        assert!(Handle::current()
                            .block_on(runs_on())
                            .starts_with("s18-many-b"));
                        drop(g);
                        assert!(Handle::try_current().is_err());
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}

// ---- 8. more channel edges of the first tries ----

/// Many short rounds of the close race (the window where a fast push lands just
/// before the close mark): blocking receivers (threads and a fiber) that saw
/// `Disconnected` keep seeing it, from `try_recv`, `recv_blocking` and
/// `recv_timeout`, and nothing accepted is lost.
#[test]
fn disconnected_is_final_for_blocking_receivers() {
    watchdog(300, || {
        let rt = chan_common::rt2();
        let mut rng = Rng::new(31);
        for cap in [Some(1), Some(2), Some(5), None] {
            for round in 0..scaled(150) {
                let (tx, rx) = make::<u64>(cap);
                let close_after = rng.below(40);
                let senders: Vec<_> = (0..2u64)
                    .map(|s| {
                        let tx = tx.clone();
                        std::thread::spawn(move || {
                            let mut ok = Vec::new();
                            for i in 0..60u64 {
                                if s == 0 && i == close_after {
                                    tx.close();
                                }
                                match tx.send_blocking(s * 1000 + i) {
                                    Ok(()) => ok.push(s * 1000 + i),
                                    Err(_) => break,
                                }
                            }
                            ok
                        })
                    })
                    .collect();
                drop(tx);
                let check_final = |rx: &chan::Receiver<u64>| {
                    for _ in 0..20 {
                        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
                    }
                    assert_eq!(rx.recv_blocking(), Err(RecvError));
                    assert_eq!(
                        rx.recv_timeout(Duration::from_millis(1)),
                        Err(RecvTimeoutError::Disconnected)
                    );
                    assert!(rx.is_empty());
                };
                let mut receivers: Vec<Box<dyn FnOnce() -> Vec<u64> + Send>> = Vec::new();
                for k in 0..3 {
                    let rx = rx.clone();
                    let body = move || {
                        let mut got = Vec::new();
                        while let Ok(v) = rx.recv_blocking() {
                            got.push(v);
                        }
                        check_final(&rx);
                        got
                    };
                    if k == 2 {
                        let h = fiber_on(&rt, body);
                        receivers.push(Box::new(move || join_within(h, 120).unwrap()));
                    } else {
                        let t = std::thread::spawn(body);
                        receivers.push(Box::new(move || t.join().unwrap()));
                    }
                }
                drop(rx);
                let mut sent: Vec<u64> = senders
                    .into_iter()
                    .flat_map(|s| s.join().unwrap())
                    .collect();
                let mut got: Vec<u64> = receivers.into_iter().flat_map(|r| r()).collect();
                sent.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, sent, "cap {cap:?} round {round}");
            }
        }
    });
}

/// All receivers dropped (on other threads) while blocking senders send: a send that
/// returned `Ok` handed its value to the channel (dropped with it, exactly once), one
/// that failed got it back; no value is dropped twice or leaked; no sender hangs.
#[test]
fn receivers_dropped_racing_blocking_senders() {
    watchdog(240, || {
        let mut rng = Rng::new(3);
        for cap in [Some(0), Some(1), Some(3), None] {
            for round in 0..scaled(200) {
                const PER: usize = 50;
                let drops = Drops::new(2 * PER);
                let (tx, rx) = make::<Tracked>(cap);
                let senders: Vec<_> = (0..2)
                    .map(|s| {
                        let (tx, drops) = (tx.clone(), drops.clone());
                        std::thread::spawn(move || {
                            let mut made = 0;
                            for i in 0..PER {
                                made += 1;
                                if let Err(e) = tx.send_blocking(drops.make(s * PER + i)) {
                                    drop(e);
                                    break;
                                }
                            }
                            made
                        })
                    })
                    .collect();
                drop(tx);
                let rx2 = rx.clone();
                let take = rng.below(20);
                let dropper = std::thread::spawn(move || {
                    for _ in 0..take {
                        if rx2.recv_blocking().is_err() {
                            break;
                        }
                    }
                    drop(rx2);
                });
                jitter(&mut rng, 2000);
                drop(rx);
                dropper.join().unwrap();
                let made: usize = senders.into_iter().map(|s| s.join().unwrap()).sum();
                // Everything made has been dropped exactly once (the channel is gone).
                let total = drops.total();
                assert_eq!(
                    total, made,
                    "cap {cap:?} round {round}: drops {total} of {made} made"
                );
                for id in 0..2 * PER {
                    assert!(drops.get(id) <= 1, "cap {cap:?}: {id} dropped twice");
                }
            }
        }
    });
}

/// A bounded channel above the ring limit (a list buffer whose sends take the lock):
/// the first try pops from the list; a blocking sender waiting on the full list is
/// admitted by those pops. Every value arrives once, in order.
#[test]
fn large_bounded_list_channel_first_tries() {
    watchdog(240, || {
        const CAP: usize = (1 << 20) + 1;
        let (tx, rx) = chan::bounded::<u32>(CAP);
        for i in 0..CAP as u32 {
            tx.try_send(i).unwrap();
        }
        assert!(tx.try_send(u32::MAX).unwrap_err().is_full());
        let extra = 2000u32;
        let t = std::thread::spawn(move || {
            for i in 0..extra {
                tx.send_blocking(CAP as u32 + i).unwrap();
            }
        });
        for i in 0..CAP as u32 + extra {
            assert_eq!(rx.recv_blocking(), Ok(i));
        }
        t.join().unwrap();
        assert_eq!(rx.recv_blocking(), Err(RecvError));
    });
}

// ---- 9. small enough for Miri (no runtime: plain threads, `block_thread`) ----

/// Plain threads only (Miri cannot run the runtime's workers): blocking sends and
/// receives on bounded(1), bounded(2) and unbounded (the first tries, the ring's
/// `try_pop_written_into`, the settle after a fast pop) and `weft::wait` /
/// `recv_timeout` (`block_thread` and `block_thread_until`, whose parker is reached
/// through a raw pointer into the waker's `Arc`), with a waker cloned out and woken
/// after its wait returned. Run under Miri with
/// `cargo +nightly miri test -p weft --test review_s18 -- small_for_miri`.
#[test]
fn blocking_exchange_small_for_miri() {
    let n: u64 = if cfg!(miri) { 12 } else { 2000 };
    for cap in [Some(1), Some(2), None] {
        let (tx, rx) = make::<Box<u64>>(cap);
        let (back_tx, back_rx) = chan::bounded::<Box<u64>>(1);
        let t = std::thread::spawn(move || {
            let mut sum = 0;
            while let Ok(v) = rx.recv_blocking() {
                sum += *v;
                back_tx.send_blocking(v).unwrap();
            }
            sum
        });
        let mut returned = 0;
        for i in 0..n {
            tx.send_blocking(Box::new(i)).unwrap();
            if i % 2 == 0 {
                returned += *back_rx.recv_blocking().unwrap();
            } else {
                match back_rx.recv_timeout(Duration::from_secs(60)) {
                    Ok(v) => returned += *v,
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
        drop(tx);
        assert_eq!(t.join().unwrap(), n * (n - 1) / 2);
        assert_eq!(returned, n * (n - 1) / 2);
        assert_eq!(back_rx.recv_blocking(), Err(RecvError));
    }
    // A waker out of a finished wait, woken and dropped on another thread.
    let mut stash = None;
    let v = weft::wait(std::future::poll_fn(|cx| {
        stash = Some(cx.waker().clone());
        Poll::Ready(3)
    }));
    assert_eq!(v, 3);
    let w = stash.take().unwrap();
    let t = std::thread::spawn(move || {
        w.wake_by_ref();
        w.wake();
    });
    // A wait that needs its own wake-up, nested in another wait.
    let (tx, rx) = chan::bounded::<u8>(0);
    let s = std::thread::spawn(move || tx.send_blocking(9).unwrap());
    let got = weft::wait(async { weft::wait(rx.recv()) });
    assert_eq!(got, Ok(9));
    s.join().unwrap();
    t.join().unwrap();
}

// ---- 10. order: one sender, one receiver of every style ----

/// Two blocking senders (a thread and a fiber), one receiver that switches between `recv_blocking` (the first
/// try), `try_recv`, `recv_timeout`, a `recv()` waited on, and a `recv()` polled once and
/// dropped (registered, perhaps handed a value that then goes back to the channel's
/// front): each sender's values come out in the order sent, none lost, none twice.
#[test]
fn fifo_with_every_receive_style_and_cancelled_receives() {
    watchdog(240, || {
        for cap in [Some(1), Some(4), None] {
            let n = scaled(10_000);
            let rt = chan_common::rt2();
            let (tx, rx) = make::<(usize, u64)>(cap);
            let tx2 = tx.clone();
            let sender = std::thread::spawn(move || {
                for i in 0..n {
                    tx.send_blocking((0, i)).unwrap();
                }
            });
            let fiber = fiber_on(&rt, move || {
                for i in 0..n {
                    tx2.send_blocking((1, i)).unwrap();
                }
            });
            let mut rng = Rng::new(cap.unwrap_or(99) as u64);
            let mut next = [0u64; 2];
            let deadline = Instant::now() + Duration::from_secs(200);
            while next[0] + next[1] < 2 * n {
                assert!(Instant::now() < deadline, "hang at {next:?}");
                let got = match rng.below(5) {
                    0 => Some(rx.recv_blocking().unwrap()),
                    1 => rx.try_recv().ok(),
                    2 => rx.recv_timeout(Duration::from_micros(50)).ok(),
                    3 => Some(weft::wait(rx.recv()).unwrap()),
                    _ => {
                        let mut f = Box::pin(rx.recv());
                        let mut cx = noop_cx();
                        let r = match f.as_mut().poll(&mut cx) {
                            Poll::Ready(v) => Some(v.unwrap()),
                            Poll::Pending => {
                                jitter(&mut rng, 500);
                                None
                            }
                        };
                        drop(f);
                        r
                    }
                };
                if let Some((s, v)) = got {
                    assert_eq!(v, next[s], "cap {cap:?}: sender {s} out of order");
                    next[s] += 1;
                }
            }
            sender.join().unwrap();
            join_within(fiber, 60).unwrap();
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        }
    });
}

// ---- 11. the pop side of the fast path's store-buffering pair ----

/// How a round's receiver takes the value.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Take {
    /// `recv_blocking`: the first try (`recv_fast_first`, new in the reviewed range).
    Blocking,
    /// `try_recv`: the older fast receive (`recv_fast_probe_into`).
    Try,
}

/// Rounds on a full `bounded(1)`: another thread polls a send once (it registers on
/// the full ring) while this thread receives the value through the fast path. Once
/// both have returned, the send must have been admitted (by the receive's settle or by
/// its own registration's look at the ring): a re-poll is `Ready`. A `Pending` there
/// means the sender waits with the slot free, and only a further receive would ever
/// admit it (a lost wakeup for a sender whose receiver waits for it).
///
/// Why it can happen (x86): the fast receive claims the head (a SeqCst CAS), frees the
/// slot with a Release store of its stamp, then reads `slow` with a SeqCst load, and
/// with no fence between that store and that load (`met_waiter` has none outside loom)
/// the load may complete while the stamp store still sits in the store buffer. The
/// registering sender stores `slow`, fences, and looks at the ring: it sees `head`
/// moved but the slot's old stamp (`claim_tail`: "the previous lap's pop is still
/// reading": `Full` below capacity), so `admit_sender` leaves it waiting, and the
/// receive read `slow` clear, so it settles nothing. The ring module's contract asks
/// the caller for a `fence(SeqCst)` after a pop; `met_waiter`'s argument (the claim's
/// SeqCst RMW is as good as a fence) covers the claim, not the stamp store that frees
/// the slot. loom cannot see it: loom builds keep the fence. Fixed on the sender's
/// side (`Buffer::push_settled`: a registering sender waits out a pop between its claim
/// and its stamp store), so fast receives stay fence-free: before the fix this failed
/// within about 0.9M rounds; after it, 6.9M rounds passed.
#[test]
fn fast_receive_never_leaves_a_registered_sender_with_a_free_slot() {
    // Seconds of rounds per receive style (longer runs: `WEFT_S18_BUDGET_SECS`).
    let secs = std::env::var("WEFT_S18_BUDGET_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(3);
    for take in [Take::Blocking, Take::Try] {
        let r = watchdog(secs + 120, move || {
            fast_receive_rounds(take, Duration::from_secs(secs))
        });
        if let Some(msg) = r {
            panic!("{take:?}: {msg}");
        }
    }
}

/// Runs rounds for at most `budget`; `Some(report)` at the first stranded sender.
fn fast_receive_rounds(take: Take, budget: Duration) -> Option<String> {
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering::{Acquire, Release};
    let (tx, rx) = chan::bounded::<u64>(1);
    tx.try_send(0).unwrap();
    let round = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let verdict = Arc::new(AtomicU64::new(0));
    let stranded = Arc::new(StdMutex::new(None::<String>));
    let stop = Arc::new(AtomicBool::new(false));
    let max_rounds = scaled(5_000_000);
    let sender = {
        let (round, received, verdict) = (round.clone(), received.clone(), verdict.clone());
        let (stranded, stop) = (stranded.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = Rng::new(11);
            let mut cx = noop_cx();
            for r in 1..=max_rounds {
                while round.load(Acquire) < r {
                    if stop.load(Acquire) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                jitter(&mut rng, 400);
                let mut fut = Box::pin(tx.send(r));
                let first = fut.as_mut().poll(&mut cx);
                while received.load(Acquire) < r {
                    std::hint::spin_loop();
                }
                // A send that registered must have been admitted by now.
                if first.is_pending() && fut.as_mut().poll(&mut cx).is_pending() {
                    *stranded.lock().unwrap() = Some(format!(
                        "round {r}: the send still waits after the receive returned, \
                         with len() = {} (the slot free)",
                        tx.len()
                    ));
                    // Withdrawn: its value comes back; the test ends here.
                    drop(fut);
                    verdict.store(r, Release);
                    return;
                }
                verdict.store(r, Release);
            }
        })
    };
    let mut rng = Rng::new(12);
    let start = Instant::now();
    let mut rounds = 0;
    for r in 1..=max_rounds {
        round.store(r, Release);
        jitter(&mut rng, 400);
        let v = match take {
            Take::Blocking => rx.recv_blocking().unwrap(),
            Take::Try => loop {
                // The ring holds a value: `try_recv` takes it (or the sender's).
                if let Ok(v) = rx.try_recv() {
                    break v;
                }
            },
        };
        assert_eq!(v, r - 1);
        received.store(r, Release);
        while verdict.load(Acquire) < r {
            std::hint::spin_loop();
        }
        rounds = r;
        if stranded.lock().unwrap().is_some() || start.elapsed() > budget {
            break;
        }
    }
    stop.store(true, Release);
    sender.join().unwrap();
    let report = stranded.lock().unwrap().take();
    eprintln!("{take:?}: {rounds} rounds, stranded: {report:?}");
    report
}
