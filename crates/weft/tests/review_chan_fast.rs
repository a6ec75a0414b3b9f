//! Adversarial review of the channel fast paths (closed channels drained without the
//! lock, `taken`'s fence folded into its decrement, the ring's empty `try_recv`
//! without the lock and the spinning `recv_blocking`, the ring's first-lap prefault
//! and claim backoff, plain threads parking without `sched_yield`). Public API only;
//! every test is bounded and guarded by a watchdog.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use weft::chan::{self, RecvError, Select, TryRecvError};

mod chan_common;
use chan_common::{fiber_on, join_within, make, watchdog, Rng};

/// Busy-waits a pseudo-random short while (no sleep: the point is to land inside the
/// other side's spin).
fn jitter(rng: &mut Rng, max: u64) {
    for _ in 0..rng.below(max.max(1)) {
        std::hint::spin_loop();
    }
}

struct CountWake(AtomicUsize);
impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A value whose drops are counted.
struct Counted(u64, Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
    }
}

/// Marks `v` received in `seen`, failing on a duplicate.
fn mark(seen: &[AtomicBool], v: u64, what: &str) {
    assert!(
        !seen[v as usize].swap(true, SeqCst),
        "{what}: {v} received twice"
    );
}

// ---- 1. closed channels drain through the fast path ----

/// Two senders (one closes part way through, the other keeps sending and sees its
/// sends refused) and four receivers of every kind (blocking, `try_recv` polling,
/// blocking select, `try_select`) on one channel: every accepted value is received
/// exactly once, refused ones come back, and a receiver that saw `Disconnected`
/// never sees anything else afterwards.
///
/// Finding (fixed on this branch, `Chan::is_drained`): with the fast path kept on
/// closed channels, a select's quick pass counts a value in flight before its pop;
/// when another receiver takes that value first, the count lingers a moment, and a
/// receiver that had already seen `Disconnected` then got `Empty` from `try_recv`
/// (cap 1, within a few rounds).
///
/// Second finding (fixed on this branch, `Chan::won_state`): a select waiting to
/// receive that the close woke reported `Disconnected` without checking that the
/// channel was drained: a fast send could push a value just before the close (its
/// settle then found nobody on the list), so the select said `Disconnected` while a
/// value was still buffered (here: its own `try_recv` then found the channel not
/// drained, about one run in 30 after the first fix; the blocking receive re-checks
/// after a `Close` wake and never did this).
#[test]
fn closed_mpmc_drain_mixed_receivers_exactly_once() {
    watchdog(240, || {
        for cap in [Some(1), Some(2), Some(7), Some(64), Some(4096), None] {
            for round in 0..6u64 {
                let n = 6_000u64;
                let seen: Arc<Vec<AtomicBool>> =
                    Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
                let (tx, rx) = make::<u64>(cap);
                let senders: Vec<_> = (0..2u64)
                    .map(|s| {
                        let tx = tx.clone();
                        std::thread::spawn(move || {
                            let mut refused = Vec::new();
                            let mut rng = Rng::new(round * 7 + s);
                            for v in (s..n).step_by(2) {
                                if s == 0 && v == n / 2 + round * 100 {
                                    tx.close();
                                }
                                if let Err(e) = tx.send_blocking(v) {
                                    refused.push(e.0);
                                }
                                jitter(&mut rng, 50);
                            }
                            refused
                        })
                    })
                    .collect();
                drop(tx);
                let receivers: Vec<_> = (0..4u32)
                    .map(|kind| {
                        let rx = rx.clone();
                        let seen = seen.clone();
                        std::thread::spawn(move || {
                            let what = format!("cap {cap:?} round {round} kind {kind}");
                            let mut count = 0u64;
                            let mut polls = 0u64;
                            loop {
                                let r = match kind {
                                    0 => rx.recv_blocking().map_err(|_| true),
                                    1 => match rx.try_recv() {
                                        Ok(v) => Ok(v),
                                        Err(TryRecvError::Empty) => Err(false),
                                        Err(TryRecvError::Disconnected) => Err(true),
                                    },
                                    2 => {
                                        let mut sel = Select::new();
                                        sel.recv(&rx);
                                        sel.select().recv(&rx).map_err(|_| true)
                                    }
                                    _ => {
                                        let mut sel = Select::new();
                                        sel.recv(&rx);
                                        match sel.try_select() {
                                            Ok(op) => op.recv(&rx).map_err(|_| true),
                                            Err(_) => Err(false),
                                        }
                                    }
                                };
                                match r {
                                    Ok(v) => {
                                        mark(&seen, v, &what);
                                        count += 1;
                                    }
                                    Err(true) => {
                                        // Drained: stays so.
                                        for _ in 0..3 {
                                            assert_eq!(
                                                rx.try_recv(),
                                                Err(TryRecvError::Disconnected),
                                                "{what}: a value after Disconnected"
                                            );
                                        }
                                        assert!(rx.is_empty(), "{what}");
                                        return count;
                                    }
                                    Err(false) => {
                                        polls += 1;
                                        assert!(polls < 50_000_000, "{what}: polled forever");
                                        std::hint::spin_loop();
                                        if polls.is_multiple_of(64) {
                                            std::thread::yield_now();
                                        }
                                    }
                                }
                            }
                        })
                    })
                    .collect();
                drop(rx);
                let mut refused: Vec<u64> = Vec::new();
                for s in senders {
                    refused.extend(s.join().unwrap());
                }
                let got: u64 = receivers.into_iter().map(|r| r.join().unwrap()).sum();
                for v in &refused {
                    assert!(!seen[*v as usize].load(SeqCst), "{v} refused and received");
                }
                assert_eq!(
                    got + refused.len() as u64,
                    n,
                    "cap {cap:?} round {round}: values lost"
                );
            }
        }
    });
}

/// A value handed to a waiting receive future that is then dropped (cancelled) after
/// the close comes back to the channel: a receiver of the closed channel whose
/// buffer is empty must wait for it, not report `Disconnected`, and get it once it
/// is given back; only then is the channel drained.
#[test]
fn closed_channel_waits_for_a_value_given_back() {
    watchdog(120, || {
        for cap in [Some(0), Some(1), Some(4), Some(300_000), None] {
            for early in [false, true] {
                let (tx, rx) = make::<u64>(cap);
                let w = Arc::new(CountWake(AtomicUsize::new(0)));
                let waker = Waker::from(w.clone());
                let mut cx = Context::from_waker(&waker);
                let mut fut = Box::pin(rx.recv());
                assert!(fut.as_mut().poll(&mut cx).is_pending());
                // Handed to the waiting future's node (the lock's path: a receiver
                // waits, so `slow` is set).
                let sent = if cap == Some(0) {
                    // A rendezvous send waits for its partner's commit; hand over from
                    // another thread and let it finish.
                    let tx2 = tx.clone();
                    let h = std::thread::spawn(move || tx2.send_blocking(5));
                    chan_common::wait_for("the hand-over", 60, || w.0.load(SeqCst) > 0);
                    Some(h)
                } else {
                    tx.try_send(5).unwrap();
                    None
                };
                if cap != Some(0) {
                    assert!(
                        w.0.load(SeqCst) > 0,
                        "cap {cap:?}: the receiver was not woken"
                    );
                }
                if let Some(h) = sent {
                    h.join().unwrap().unwrap();
                }
                let six = early && tx.try_send(6).is_ok();
                assert!(tx.close());
                let rx2 = rx.clone();
                let blocked = std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Ok(v) = rx2.recv_blocking() {
                        got.push(v);
                    }
                    got
                });
                // Give the blocked receiver time to reach its wait (not needed for
                // correctness: it must get the value whenever it comes).
                std::thread::sleep(Duration::from_millis(20));
                drop(fut);
                let mut got = blocked.join().unwrap();
                // 6 may come first: 5 was on its way to another receiver when the
                // blocked one took 6 from the buffer (the order across receivers is
                // not FIFO once a receive is cancelled).
                got.sort_unstable();
                let want = if six { vec![5, 6] } else { vec![5] };
                assert_eq!(got, want, "cap {cap:?} early {early}");
                assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
            }
        }
    });
}

// ---- 2. close racing the last select-held value ----

/// A select's quick pass holds the only value (counted in flight) while the channel
/// closes and two more receivers (one blocking, one polling `try_recv`) look at it:
/// exactly one receiver gets the value, nobody hangs, and the pollers see
/// `Disconnected` in the end. Many rounds, with jitter, on real threads.
#[test]
fn close_races_the_last_select_held_value() {
    watchdog(240, || {
        let start = Instant::now();
        let mut rng = Rng::new(99);
        for round in 0..4000u64 {
            if start.elapsed() > Duration::from_secs(60) && round > 200 {
                break;
            }
            let cap = [1usize, 2, 64][round as usize % 3];
            let (tx, rx) = chan::bounded::<u64>(cap);
            tx.try_send(round).unwrap();
            let j = [rng.below(300), rng.below(300), rng.below(300)];
            let go = Arc::new(Barrier::new(4));
            let sel = {
                let rx = rx.clone();
                let go = go.clone();
                std::thread::spawn(move || {
                    go.wait();
                    jitter(&mut Rng::new(j[0]), j[0]);
                    let mut sel = Select::new();
                    sel.recv(&rx);
                    sel.select().recv(&rx).ok()
                })
            };
            let blocking = {
                let rx = rx.clone();
                let go = go.clone();
                std::thread::spawn(move || {
                    go.wait();
                    jitter(&mut Rng::new(j[1]), j[1]);
                    rx.recv_blocking().ok()
                })
            };
            let closer = {
                let go = go.clone();
                std::thread::spawn(move || {
                    go.wait();
                    jitter(&mut Rng::new(j[2]), j[2]);
                    tx.close()
                })
            };
            go.wait();
            let mut polled = None;
            for i in 0..10_000_000u64 {
                match rx.try_recv() {
                    Ok(v) => {
                        polled = Some(v);
                        break;
                    }
                    Err(TryRecvError::Disconnected) => break,
                    Err(TryRecvError::Empty) => {
                        assert!(i < 9_999_999, "round {round}: try_recv never settled");
                        if i % 32 == 0 {
                            std::thread::yield_now();
                        }
                    }
                }
            }
            assert!(closer.join().unwrap());
            let got: Vec<u64> = [sel.join().unwrap(), blocking.join().unwrap(), polled]
                .into_iter()
                .flatten()
                .collect();
            assert_eq!(
                got,
                vec![round],
                "round {round}: the value lost or duplicated"
            );
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        }
    });
}

// ---- 3. the spinning blocking receive ----

/// How a sender delivers in [`spinning_receive_meets_every_kind_of_send`].
#[derive(Clone, Copy, Debug)]
enum How {
    Blocking,
    Try,
    Select,
    Async,
}

/// A receiver in `recv_blocking` (spinning on the head slot before it sleeps) while
/// values arrive by every kind of send, at random moments landing inside its spin:
/// every value arrives in order, and the final close wakes it.
#[test]
fn spinning_receive_meets_every_kind_of_send() {
    watchdog(300, || {
        let rt = chan_common::rt2();
        for cap in [
            Some(0),
            Some(1),
            Some(2),
            Some(3),
            Some(64),
            Some(40_000),
            None,
        ] {
            for how in [How::Blocking, How::Try, How::Select, How::Async] {
                let n = 1_500u64;
                let t0 = Instant::now();
                let (tx, rx) = make::<u64>(cap);
                let recv = std::thread::spawn(move || {
                    let mut next = 0;
                    while let Ok(v) = rx.recv_blocking() {
                        assert_eq!(v, next, "cap {cap:?} {how:?}: out of order");
                        next += 1;
                    }
                    next
                });
                let mut rng = Rng::new(n ^ cap.unwrap_or(9) as u64);
                for v in 0..n {
                    match how {
                        How::Blocking => tx.send_blocking(v).unwrap(),
                        How::Try => {
                            let mut v = v;
                            let mut tries = 0u64;
                            loop {
                                match tx.try_send(v) {
                                    Ok(()) => break,
                                    Err(chan::TrySendError::Full(back)) => v = back,
                                    Err(e) => panic!("{e:?}"),
                                }
                                tries += 1;
                                assert!(tries < 100_000_000, "try_send never found room");
                                if cap == Some(0) || tries.is_multiple_of(16) {
                                    std::thread::yield_now();
                                }
                            }
                        }
                        How::Select => {
                            let mut sel = Select::new();
                            sel.send(&tx);
                            sel.select().send(&tx, v).unwrap();
                        }
                        How::Async => {
                            let tx = tx.clone();
                            assert!(rt.block_on(async move { tx.send(v).await.is_ok() }));
                        }
                    }
                    // Mostly short gaps (inside the receiver's spin), some long ones
                    // (past it: the receiver sleeps).
                    if rng.below(50) == 0 {
                        std::thread::sleep(Duration::from_micros(rng.below(300)));
                    } else {
                        jitter(&mut rng, 3_000);
                    }
                }
                if rng.below(2) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                tx.close();
                assert_eq!(recv.join().unwrap(), n, "cap {cap:?} {how:?}");
                eprintln!("cap {cap:?} {how:?}: {:?}", t0.elapsed());
            }
        }
    });
}

/// Fibers and tasks on a two-worker runtime block in `recv_blocking` (four of each,
/// so more blocked receivers than workers) on rings fed by plain threads: every
/// receiver gets its values in order and sees its channel's close.
#[test]
fn fibers_and_tasks_spin_in_recv_blocking_on_workers() {
    watchdog(240, || {
        let rt = chan_common::rt2();
        let n = 5_000u64;
        let mut handles = Vec::new();
        let mut senders = Vec::new();
        for i in 0..8u64 {
            let cap = [1usize, 2, 16, 300_000][i as usize % 4];
            let (tx, rx) = chan::bounded::<u64>(cap);
            let recv = move || {
                let mut next = 0;
                while let Ok(v) = rx.recv_blocking() {
                    assert_eq!(v, next, "receiver {i}: out of order");
                    next += 1;
                }
                next
            };
            handles.push(if i % 2 == 0 {
                fiber_on(&rt, recv)
            } else {
                rt.spawn(async move { recv() })
            });
            senders.push(std::thread::spawn(move || {
                let mut rng = Rng::new(i);
                for v in 0..n {
                    tx.send_blocking(v).unwrap();
                    jitter(&mut rng, 2_000);
                }
            }));
        }
        for s in senders {
            s.join().unwrap();
        }
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(join_within(h, 120).unwrap(), n, "receiver {i}");
        }
    });
}

/// `Select::ready` (a plain observer, no value taken) and then `try_recv`, with two
/// senders whose claims of consecutive ring slots may publish out of order: once
/// `ready` said so, `try_recv` never answers `Empty`.
#[test]
fn ready_then_try_recv_with_two_senders() {
    watchdog(240, || {
        for cap in [1usize, 2, 3, 64] {
            let (tx, rx) = chan::bounded::<u64>(cap);
            let n = 10_000u64;
            let senders: Vec<_> = (0..2u64)
                .map(|s| {
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        let mut rng = Rng::new(s + 5);
                        for v in 0..n {
                            tx.send_blocking(v * 2 + s).unwrap();
                            jitter(&mut rng, 200);
                        }
                    })
                })
                .collect();
            drop(tx);
            let mut next = [0u64; 2];
            loop {
                let mut sel = Select::new();
                sel.recv(&rx);
                assert_eq!(sel.ready(), 0);
                match rx.try_recv() {
                    Ok(v) => {
                        let s = (v % 2) as usize;
                        assert_eq!(v / 2, next[s], "cap {cap}: sender {s} out of order");
                        next[s] += 1;
                    }
                    Err(TryRecvError::Disconnected) => break,
                    Err(TryRecvError::Empty) => panic!("cap {cap}: ready, then Empty"),
                }
            }
            for s in senders {
                s.join().unwrap();
            }
            assert_eq!(next, [n, n], "cap {cap}");
        }
    });
}

/// An empty open ring answers `try_recv` with `Empty` without the lock; the answer
/// must still see a value sent (and completed) before, by a thread that told us so,
/// and a waiting select's send must still pair with it (bounded(0) keeps the lock's
/// path; a ring with a select parked on its full buffer has `slow` set).
#[test]
fn try_recv_after_a_completed_send_is_never_empty() {
    watchdog(240, || {
        for cap in [1usize, 2, 5, 300_000] {
            let (tx, rx) = chan::bounded::<u64>(cap);
            let (ack_tx, ack_rx) = chan::bounded::<u64>(0);
            let n = 4_000u64;
            let s = std::thread::spawn(move || {
                for v in 0..n {
                    tx.send_blocking(v).unwrap();
                    // Told only after the send returned: the value must be there.
                    ack_tx.send_blocking(v).unwrap();
                }
            });
            for v in 0..n {
                assert_eq!(ack_rx.recv_blocking(), Ok(v));
                assert_eq!(
                    rx.try_recv(),
                    Ok(v),
                    "cap {cap}: sent and acknowledged, not there"
                );
            }
            s.join().unwrap();
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        }
        // A ring kept full with a select parked to send: `try_recv` takes a value and
        // admits the select's send; the ring never reads empty while it waits.
        let (tx, rx) = chan::bounded::<u64>(1);
        tx.try_send(0).unwrap();
        let s = std::thread::spawn(move || {
            for v in 1..2_000u64 {
                let mut sel = Select::new();
                sel.send(&tx);
                sel.select().send(&tx, v).unwrap();
            }
        });
        let mut next = 0u64;
        let mut polls = 0u64;
        while next < 2_000 {
            match rx.try_recv() {
                Ok(v) => {
                    assert_eq!(v, next);
                    next += 1;
                }
                Err(TryRecvError::Empty) => {
                    polls += 1;
                    assert!(polls < 200_000_000, "never got value {next}");
                    std::thread::yield_now();
                }
                Err(TryRecvError::Disconnected) => panic!("disconnected at {next}"),
            }
        }
        s.join().unwrap();
    });
}

// ---- 4. the ring: laps, prefault sizes, drops, memory ----

/// Per-producer order and exactly-once delivery over `laps` laps of a ring of `cap`
/// values of `T` made from `u64`s, with `producers` pushers and two poppers.
fn ring_run<T: Send + 'static>(
    cap: usize,
    laps: usize,
    producers: u64,
    make: fn(u64) -> T,
    id: fn(&T) -> u64,
) {
    let (tx, rx) = chan::bounded::<T>(cap);
    let per = (cap * laps) as u64 / producers + 1;
    // Large stacks: debug builds keep several copies of a 64 KiB value on the stack.
    let spawn = |f: Box<dyn FnOnce() -> Vec<u64> + Send>| {
        std::thread::Builder::new()
            .stack_size(32 << 20)
            .spawn(f)
            .unwrap()
    };
    let senders: Vec<_> = (0..producers)
        .map(|p| {
            let tx = tx.clone();
            spawn(Box::new(move || {
                for i in 0..per {
                    tx.send_blocking(make(i * producers + p)).unwrap();
                }
                Vec::new()
            }))
        })
        .collect();
    drop(tx);
    let poppers: Vec<_> = (0..2)
        .map(|_| {
            let rx = rx.clone();
            spawn(Box::new(move || {
                let mut last = vec![None::<u64>; producers as usize];
                let mut got = Vec::new();
                while let Ok(v) = rx.recv_blocking() {
                    let v = id(&v);
                    let p = (v % producers) as usize;
                    if let Some(l) = last[p] {
                        assert!(v > l, "cap {cap}: producer {p} out of order ({l} then {v})");
                    }
                    last[p] = Some(v);
                    got.push(v);
                }
                got
            }))
        })
        .collect();
    drop(rx);
    for s in senders {
        s.join().unwrap();
    }
    let mut all: Vec<u64> = poppers
        .into_iter()
        .flat_map(|p| p.join().unwrap())
        .collect();
    all.sort_unstable();
    let want: Vec<u64> = (0..per * producers).collect();
    assert!(all == want, "cap {cap}: values lost or duplicated");
}

/// The prefault threshold is 256 KiB of stamps and values together, in steps of
/// 64 KiB of values: rings just below, at and above it, and with steps of one slot,
/// over several laps with four concurrent pushers (claims racing at step
/// boundaries) and two poppers.
#[test]
fn rings_around_the_prefault_thresholds() {
    watchdog(300, || {
        const MIN: usize = 256 << 10;
        // u64: 16 bytes a slot.
        for cap in [MIN / 16 - 1, MIN / 16, MIN / 16 + 1, 4096 * 5 + 3] {
            ring_run::<u64>(cap, 3, 4, |v| v, |v| *v);
        }
        // 4 KiB values: 4104 bytes a slot, threshold at 64 slots, 8 slots a step.
        for cap in [63usize, 64, 65, 71, 200] {
            ring_run::<[u64; 512]>(
                cap,
                4,
                4,
                |v| {
                    let mut a = [v; 512];
                    a[511] = !v;
                    a
                },
                |a| {
                    assert!(a.iter().take(511).all(|x| *x == a[0]), "torn value");
                    assert_eq!(a[511], !a[0], "torn value");
                    a[0]
                },
            );
        }
        // 64 KiB values: one slot a step, so every push after the first prefaults.
        for cap in [4usize, 5, 9] {
            ring_run::<Box<[u64; 8]>>(cap, 6, 3, |v| Box::new([v; 8]), |b| b[0]);
            ring_run::<[u64; 8192]>(
                cap,
                3,
                2,
                |v| [v; 8192],
                |a| {
                    assert!(a.iter().all(|x| *x == a[0]), "torn value");
                    a[0]
                },
            );
        }
    });
}

/// Zero-sized values over a ring big enough to be prefaulted by its stamps alone
/// (the values array has no bytes): every value arrives over several laps.
#[test]
fn zero_sized_values_over_a_large_ring() {
    watchdog(240, || {
        let cap = 40_000;
        let (tx, rx) = chan::bounded::<()>(cap);
        let s = std::thread::spawn(move || {
            for _ in 0..cap * 3 {
                tx.send_blocking(()).unwrap();
            }
        });
        let mut got = 0;
        while rx.recv_blocking().is_ok() {
            got += 1;
        }
        s.join().unwrap();
        assert_eq!(got, cap * 3);
    });
}

/// Values with `Drop` left in rings dropped mid-lap (first lap, a later lap, right
/// at a prefault step boundary, after a close): each value dropped exactly once.
#[test]
fn rings_dropped_mid_lap_drop_each_value_once() {
    watchdog(240, || {
        for cap in [1usize, 3, 64, 20_000, 300_000] {
            for (pushed, popped) in [(0usize, 0usize), (1, 0), (cap, 1), (cap + cap / 2, cap)] {
                for close_first in [false, true] {
                    let drops = Arc::new(AtomicUsize::new(0));
                    let (tx, rx) = chan::bounded::<Counted>(cap);
                    let mut sent = 0usize;
                    let mut recvd = 0usize;
                    for i in 0..pushed {
                        if tx.is_full() {
                            assert_eq!(rx.try_recv().unwrap().0, recvd as u64);
                            recvd += 1;
                        }
                        tx.try_send(Counted(i as u64, drops.clone())).ok().unwrap();
                        sent += 1;
                    }
                    for _ in 0..popped.min(sent - recvd) {
                        assert_eq!(rx.try_recv().unwrap().0, recvd as u64);
                        recvd += 1;
                    }
                    assert_eq!(drops.load(SeqCst), recvd, "cap {cap}");
                    if close_first {
                        tx.close();
                    }
                    // The receiver first (its drop drains), then the sender; and the
                    // other order on odd caps.
                    if cap % 2 == 0 {
                        drop(rx);
                        drop(tx);
                    } else {
                        drop(tx);
                        drop(rx);
                    }
                    assert_eq!(drops.load(SeqCst), sent, "cap {cap} ({pushed}, {popped})");
                }
            }
        }
    });
}

/// Resident memory of this process, in bytes.
fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Many large rings made, pushed through part of their first lap (so prefaulted
/// ahead) and dropped: the process's resident memory does not grow with their
/// number (the prefaulted pages go with the ring).
#[test]
fn many_prefaulted_rings_made_and_dropped_do_not_grow_memory() {
    watchdog(240, || {
        let cap = 200_000; // 3.2 MB of stamps and values of u64
        let round = |k: usize| {
            for _ in 0..k {
                let (tx, rx) = chan::bounded::<u64>(cap);
                for v in 0..(cap as u64 / 3) {
                    tx.try_send(v).unwrap();
                }
                assert_eq!(rx.try_recv(), Ok(0));
                drop(tx);
                drop(rx);
            }
        };
        round(5);
        let before = rss();
        round(60);
        let after = rss();
        // 60 rings of 3.2 MB would be 190 MB if kept; allow 64 MB of noise (other
        // tests of this binary run at the same time).
        assert!(
            after < before + (64 << 20),
            "resident memory grew from {before} to {after} bytes"
        );
    });
}

/// The prefault's advice covers whole pages, so it may cover bytes of neighbouring
/// allocations (while other threads write them): rings made between many small
/// allocations, pushed through their first lap while a thread keeps rewriting the
/// neighbours, change no neighbour's byte.
#[test]
fn prefault_leaves_neighbouring_allocations_alone() {
    watchdog(240, || {
        let stop = Arc::new(AtomicBool::new(false));
        // Counters in small allocations, bumped by a writer thread throughout.
        let cells: Arc<Vec<Box<AtomicUsize>>> =
            Arc::new((0..4096).map(|_| Box::new(AtomicUsize::new(0))).collect());
        let writer = {
            let cells = cells.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut bumps = 0usize;
                while !stop.load(SeqCst) {
                    for c in cells.iter() {
                        c.fetch_add(1, SeqCst);
                    }
                    bumps += 1;
                }
                bumps
            })
        };
        let mut rng = Rng::new(3);
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        for round in 0..40usize {
            // Interleave pattern-filled allocations of odd sizes with the rings.
            for k in 0..8 {
                let len = 1 + rng.below(70_000) as usize;
                patterns.push((0..len).map(|i| (i * 31 + k + round) as u8).collect());
            }
            let cap = [16_400usize, 17_000, 33_000, 70_000][round % 4];
            let (tx, rx) = chan::bounded::<u64>(cap);
            for v in 0..cap as u64 {
                tx.try_send(v).unwrap();
            }
            for v in 0..cap as u64 {
                assert_eq!(rx.try_recv(), Ok(v));
            }
            if round % 3 == 0 {
                patterns.drain(..patterns.len() / 2);
            }
        }
        stop.store(true, SeqCst);
        let bumps = writer.join().unwrap();
        for c in cells.iter() {
            let v = c.load(SeqCst);
            assert!(
                v == bumps || v == bumps + 1,
                "a counter lost writes: {v} vs {bumps}"
            );
        }
        // Each pattern still reads as written (its first byte tells its k + round).
        for p in &patterns {
            let base = p[0] as usize;
            for (i, b) in p.iter().enumerate() {
                assert_eq!(
                    *b,
                    (i * 31 + base) as u8,
                    "a neighbouring allocation changed"
                );
            }
        }
    });
}

// ---- 5. plain threads park without yielding ----

/// Eight busy threads on (at most) two cores: four pairs ping-ponging over
/// bounded(0), bounded(1), a select and `weft::sync` primitives. Every pair finishes
/// its round trips within a generous limit.
#[test]
fn more_busy_threads_than_cores_make_progress() {
    watchdog(300, || {
        let rounds = 3_000u64;
        let mut pairs = Vec::new();
        for kind in 0..4u32 {
            let (a_tx, a_rx) = chan::bounded::<u64>(if kind == 0 { 0 } else { 1 });
            let (b_tx, b_rx) = chan::bounded::<u64>(if kind == 1 { 0 } else { 1 });
            let ping = std::thread::spawn(move || {
                for v in 0..rounds {
                    if kind == 2 {
                        let mut sel = Select::new();
                        sel.send(&a_tx);
                        sel.select().send(&a_tx, v).unwrap();
                    } else {
                        a_tx.send_blocking(v).unwrap();
                    }
                    assert_eq!(b_rx.recv_blocking(), Ok(v + 1));
                }
            });
            let pong = std::thread::spawn(move || {
                for v in 0..rounds {
                    let got = if kind == 3 {
                        let mut sel = Select::new();
                        sel.recv(&a_rx);
                        sel.select().recv(&a_rx)
                    } else {
                        a_rx.recv_blocking()
                    };
                    assert_eq!(got, Ok(v));
                    b_tx.send_blocking(v + 1).unwrap();
                }
                assert_eq!(a_rx.recv_blocking(), Err(RecvError));
            });
            pairs.push((ping, pong));
        }
        // Two more busy threads on weft::sync: a mutex and a semaphore handing turns.
        let m = Arc::new(weft::sync::Mutex::new(0u64));
        let sem = Arc::new(weft::sync::Semaphore::new(1));
        let lockers: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                let sem = sem.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *m.lock_blocking() += 1;
                        let p = sem.acquire_blocking().unwrap();
                        drop(p);
                    }
                })
            })
            .collect();
        for (a, b) in pairs {
            a.join().unwrap();
            b.join().unwrap();
        }
        for l in lockers {
            l.join().unwrap();
        }
        assert_eq!(*m.lock_blocking(), 40_000);
    });
}

/// A task polling a receive future by hand with a counting waker: the close of a
/// drained ring (whose receivers now take the fast path) still wakes it.
#[test]
fn close_wakes_a_polled_receive_on_an_empty_ring() {
    watchdog(60, || {
        for cap in [1usize, 8, 300_000] {
            let (tx, rx) = chan::bounded::<u64>(cap);
            tx.try_send(1).unwrap();
            assert_eq!(rx.try_recv(), Ok(1));
            let w = Arc::new(CountWake(AtomicUsize::new(0)));
            let waker = Waker::from(w.clone());
            let mut cx = Context::from_waker(&waker);
            let mut fut = pin!(rx.recv());
            assert!(fut.as_mut().poll(&mut cx).is_pending());
            tx.close();
            assert!(w.0.load(SeqCst) > 0, "cap {cap}: the close did not wake");
            assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Err(RecvError)));
        }
    });
}

/// Sends from spawned tasks (one task per value, joined from a plain thread before
/// the next) to a plain thread spinning in `recv_blocking`: every value arrives, in
/// order.
#[test]
fn spawned_send_tasks_feed_a_spinning_receiver() {
    watchdog(240, || {
        let rt = chan_common::rt2();
        for cap in [Some(0), Some(1), Some(2), Some(64), None] {
            let n = 1_000u64;
            let t0 = Instant::now();
            let (tx, rx) = make::<u64>(cap);
            let recv = std::thread::spawn(move || {
                let mut next = 0;
                while let Ok(v) = rx.recv_blocking() {
                    assert_eq!(v, next, "cap {cap:?}: out of order");
                    next += 1;
                }
                next
            });
            let mut rng = Rng::new(5);
            for v in 0..n {
                let tx = tx.clone();
                let h = rt.spawn(async move { tx.send(v).await.is_ok() });
                assert!(join_within(h, 60).unwrap(), "cap {cap:?}: send {v}");
                jitter(&mut rng, 3_000);
            }
            tx.close();
            assert_eq!(recv.join().unwrap(), n, "cap {cap:?}");
            eprintln!("cap {cap:?}: {:?}", t0.elapsed());
        }
    });
}
