//! Review attacks on two changes: blocking sends/receives on a rendezvous channel
//! (`bounded(0)`) now try once and register at once (`chan::try_before_waiting`), and
//! `Core::has_ready_work` also reports yielded (deferred) tasks, so a spinning wait
//! suspends when one exists. From safe code only: mixed contexts (plain threads,
//! fibers, async tasks, blocking forms inside tasks), mpmc value accounting, tiny and
//! zero timeouts, closes and aborts while waiters are registered, runtime drop, select
//! mixed with blocking forms, and yield loops next to spinning waits. Every wait is
//! bounded by a watchdog; sizes are small enough for a debug build on a loaded
//! 2-core machine. A test that found a real bug is `#[ignore = "BUG: ..."]`.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chan_common::{
    check_exactly_once, join_within, rt2, seed, wait_for, watchdog, Drops, Msg, Rng, Tracked,
};
use weft::chan::{self, Receiver, RecvTimeoutError, Select, SendTimeoutError, Sender};
use weft::Runtime;

fn rt1() -> Runtime {
    weft::Builder::new().worker_threads(1).build().unwrap()
}

/// Where a sender or receiver runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ctx {
    /// A plain thread, blocking forms.
    Thread,
    /// A fiber, blocking forms.
    Fiber,
    /// An async task, `.await` forms.
    Task,
    /// An async task calling the blocking forms (a wait on a worker's stack).
    TaskBlocking,
}

const CTXS: [Ctx; 4] = [Ctx::Thread, Ctx::Fiber, Ctx::Task, Ctx::TaskBlocking];

enum Joiner<T> {
    Std(std::thread::JoinHandle<T>),
    Weft(weft::JoinHandle<T>),
}

impl<T: Send + 'static> Joiner<T> {
    fn join(self, secs: u64) -> T {
        match self {
            Joiner::Std(h) => {
                let deadline = Instant::now() + Duration::from_secs(secs);
                while !h.is_finished() {
                    assert!(Instant::now() < deadline, "hang: a thread did not finish");
                    std::thread::sleep(Duration::from_millis(1));
                }
                h.join().unwrap()
            }
            Joiner::Weft(h) => join_within(h, secs).expect("task or fiber failed"),
        }
    }
}

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs `blocking` (Thread, Fiber, TaskBlocking) or `fut` (Task) in `ctx`.
fn start<T: Send + 'static>(
    rt: &Runtime,
    ctx: Ctx,
    blocking: Box<dyn FnOnce() -> T + Send>,
    fut: BoxFut<T>,
) -> Joiner<T> {
    match ctx {
        Ctx::Thread => {
            drop(fut);
            Joiner::Std(std::thread::spawn(blocking))
        }
        Ctx::Fiber => {
            drop(fut);
            let _g = rt.enter();
            Joiner::Weft(weft::fiber::spawn(blocking))
        }
        Ctx::Task => {
            drop(blocking);
            Joiner::Weft(rt.spawn(fut))
        }
        Ctx::TaskBlocking => {
            drop(fut);
            Joiner::Weft(rt.spawn(async move { blocking() }))
        }
    }
}

fn start_sender(rt: &Runtime, ctx: Ctx, tx: Sender<Msg>, id: usize, n: usize) -> Joiner<()> {
    let tx2 = tx.clone();
    start(
        rt,
        ctx,
        Box::new(move || {
            for i in 0..n {
                tx.send_blocking((id, i)).expect("send failed");
            }
        }),
        Box::pin(async move {
            for i in 0..n {
                tx2.send((id, i)).await.expect("send failed");
            }
        }),
    )
}

fn start_receiver(rt: &Runtime, ctx: Ctx, rx: Receiver<Msg>) -> Joiner<Vec<Msg>> {
    let rx2 = rx.clone();
    start(
        rt,
        ctx,
        Box::new(move || {
            let mut log = Vec::new();
            while let Ok(v) = rx.recv_blocking() {
                log.push(v);
            }
            log
        }),
        Box::pin(async move {
            let mut log = Vec::new();
            while let Ok(v) = rx2.recv().await {
                log.push(v);
            }
            log
        }),
    )
}

/// Every value of `senders x per` exactly once across `logs`; each sender's values in
/// order within each log.
fn check_exactly_once_in_order(logs: &[Vec<Msg>], senders: usize, per: usize) {
    for log in logs {
        let mut last: Vec<Option<usize>> = vec![None; senders];
        for &(s, n) in log {
            if let Some(p) = last[s] {
                assert!(p < n, "FIFO broken for sender {s}: {p} then {n}");
            }
            last[s] = Some(n);
        }
    }
    check_exactly_once(logs, senders, per);
}

/// Every pair of contexts, two senders and two receivers each, on a rendezvous
/// channel: every value exactly once, per-sender order kept per receiver, and the
/// receivers all see the disconnect once the senders finish.
#[test]
fn rendezvous_mpmc_every_context_pair() {
    watchdog(60, || {
        let rt = rt2();
        const PER: usize = 60;
        for s_ctx in CTXS {
            for r_ctx in CTXS {
                let (tx, rx) = chan::bounded::<Msg>(0);
                let recvs: Vec<_> = (0..2)
                    .map(|_| start_receiver(&rt, r_ctx, rx.clone()))
                    .collect();
                drop(rx);
                let sends: Vec<_> = (0..2)
                    .map(|id| start_sender(&rt, s_ctx, tx.clone(), id, PER))
                    .collect();
                drop(tx);
                for s in sends {
                    s.join(20);
                }
                let logs: Vec<_> = recvs.into_iter().map(|r| r.join(20)).collect();
                check_exactly_once_in_order(&logs, 2, PER);
            }
        }
    });
}

/// All contexts at once on both sides, on one and on two workers.
#[test]
fn rendezvous_mpmc_all_contexts_at_once() {
    watchdog(60, || {
        for rt in [rt1(), rt2()] {
            const PER: usize = 150;
            let (tx, rx) = chan::bounded::<Msg>(0);
            let mut recvs = Vec::new();
            for (k, ctx) in CTXS.iter().cycle().take(6).enumerate() {
                let _ = k;
                recvs.push(start_receiver(&rt, *ctx, rx.clone()));
            }
            drop(rx);
            let mut sends = Vec::new();
            for (id, ctx) in CTXS.iter().cycle().take(8).enumerate() {
                sends.push(start_sender(&rt, *ctx, tx.clone(), id, PER));
            }
            drop(tx);
            for s in sends {
                s.join(30);
            }
            let logs: Vec<_> = recvs.into_iter().map(|r| r.join(30)).collect();
            check_exactly_once_in_order(&logs, 8, PER);
        }
    });
}

/// `send_timeout` / `recv_timeout` with zero and tiny timeouts (retried), racing
/// blocking partners and each other on a rendezvous channel: every value exactly once,
/// every `Tracked` value dropped exactly once, a timed-out send gives its own value
/// back.
#[test]
fn rendezvous_tiny_timeouts_race_blocking_partners() {
    watchdog(60, || {
        let rt = rt2();
        const SENDERS: usize = 6;
        const PER: usize = 80;
        let drops = Drops::new(SENDERS * PER);
        let got = Arc::new(
            (0..SENDERS * PER)
                .map(|_| AtomicUsize::new(0))
                .collect::<Vec<_>>(),
        );
        let (tx, rx) = chan::bounded::<Tracked>(0);
        let timeouts = [0u64, 0, 1, 5, 20, 100];
        let mut sends = Vec::new();
        for id in 0..SENDERS {
            let tx = tx.clone();
            let drops = drops.clone();
            let timed = id % 2 == 0;
            let body = move || {
                let mut rng = Rng::new(seed() ^ id as u64);
                for i in 0..PER {
                    let mut v = drops.make(id * PER + i);
                    if !timed {
                        tx.send_blocking(v).expect("send failed");
                        continue;
                    }
                    let mut tries = 0u64;
                    loop {
                        let d = Duration::from_micros(timeouts[rng.below(6) as usize]);
                        match tx.send_timeout(v, d) {
                            Ok(()) => break,
                            Err(SendTimeoutError::Timeout(back)) => {
                                assert_eq!(back.id, id * PER + i, "another value came back");
                                v = back;
                                tries += 1;
                                assert!(tries < 2_000_000, "sender made no progress");
                            }
                            Err(SendTimeoutError::Disconnected(_)) => panic!("disconnected"),
                        }
                    }
                }
            };
            let ctx = [Ctx::Thread, Ctx::Fiber, Ctx::TaskBlocking][id % 3];
            sends.push(start(&rt, ctx, Box::new(body), Box::pin(async {})));
        }
        drop(tx);
        let mut recvs = Vec::new();
        for k in 0..4 {
            let rx = rx.clone();
            let got = got.clone();
            let timed = k % 2 == 1;
            let body = move || {
                let mut rng = Rng::new(seed() ^ (100 + k) as u64);
                let mut n = 0usize;
                loop {
                    let r = if timed {
                        let d = Duration::from_micros(timeouts[rng.below(6) as usize]);
                        match rx.recv_timeout(d) {
                            Ok(v) => Ok(v),
                            Err(RecvTimeoutError::Timeout) => continue,
                            Err(RecvTimeoutError::Disconnected) => Err(()),
                        }
                    } else {
                        rx.recv_blocking().map_err(|_| ())
                    };
                    match r {
                        Ok(v) => {
                            got[v.id].fetch_add(1, SeqCst);
                            n += 1;
                        }
                        Err(()) => return n,
                    }
                }
            };
            let ctx = [Ctx::Fiber, Ctx::Thread, Ctx::TaskBlocking, Ctx::Fiber][k];
            recvs.push(start(&rt, ctx, Box::new(body), Box::pin(async { 0 })));
        }
        drop(rx);
        for s in sends {
            s.join(40);
        }
        let total: usize = recvs.into_iter().map(|r| r.join(40)).sum();
        assert_eq!(total, SENDERS * PER);
        for i in 0..SENDERS * PER {
            assert_eq!(
                got[i].load(SeqCst),
                1,
                "value {i} received {} times",
                got[i].load(SeqCst)
            );
            assert_eq!(drops.get(i), 1, "value {i} dropped {} times", drops.get(i));
        }
    });
}

/// One sender blocks (`send_blocking`), its partner registers and withdraws over and
/// over (`recv_timeout` of 0..50 us) before taking each value; and the mirror image.
/// Every value arrives, in order, once.
#[test]
fn rendezvous_partner_registers_and_withdraws_repeatedly() {
    watchdog(60, || {
        let rt = rt2();
        const N: usize = 300;
        for (s_ctx, r_ctx) in [
            (Ctx::Fiber, Ctx::Fiber),
            (Ctx::Thread, Ctx::Fiber),
            (Ctx::Fiber, Ctx::Thread),
            (Ctx::TaskBlocking, Ctx::Fiber),
        ] {
            // Blocking sender, withdrawing receiver.
            let (tx, rx) = chan::bounded::<usize>(0);
            let s = start(
                &rt,
                s_ctx,
                Box::new(move || {
                    for i in 0..N {
                        tx.send_blocking(i).unwrap();
                    }
                }),
                Box::pin(async {}),
            );
            let r = start(
                &rt,
                r_ctx,
                Box::new(move || {
                    let mut rng = Rng::new(seed());
                    let mut next = 0;
                    let mut timeouts = 0u64;
                    loop {
                        let d = Duration::from_micros(rng.below(50));
                        match rx.recv_timeout(d) {
                            Ok(v) => {
                                assert_eq!(v, next, "out of order or duplicated");
                                next += 1;
                            }
                            Err(RecvTimeoutError::Timeout) => timeouts += 1,
                            Err(RecvTimeoutError::Disconnected) => return (next, timeouts),
                        }
                    }
                }),
                Box::pin(async { (0, 0) }),
            );
            s.join(30);
            let (n, _t) = r.join(30);
            assert_eq!(n, N);

            // Withdrawing sender, blocking receiver.
            let (tx, rx) = chan::bounded::<usize>(0);
            let s = start(
                &rt,
                r_ctx,
                Box::new(move || {
                    let mut rng = Rng::new(seed() ^ 7);
                    for i in 0..N {
                        let mut v = i;
                        loop {
                            let d = Duration::from_micros(rng.below(50));
                            match tx.send_timeout(v, d) {
                                Ok(()) => break,
                                Err(SendTimeoutError::Timeout(b)) => {
                                    assert_eq!(b, i);
                                    v = b;
                                }
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                    }
                }),
                Box::pin(async {}),
            );
            let r = start(
                &rt,
                s_ctx,
                Box::new(move || {
                    let mut next = 0;
                    while let Ok(v) = rx.recv_blocking() {
                        assert_eq!(v, next, "out of order or duplicated");
                        next += 1;
                    }
                    next
                }),
                Box::pin(async { 0 }),
            );
            s.join(30);
            assert_eq!(r.join(30), N);
        }
    });
}

/// Senders registered on a rendezvous channel (threads, fibers, blocking tasks), then
/// the receiving side closes (`close()`, or the last receiver dropped): each gets its
/// own value back, and every value is dropped exactly once. Mirror: receivers
/// registered, then `close()` or the last sender dropped: all see the disconnect.
#[test]
fn rendezvous_close_while_waiters_registered() {
    watchdog(60, || {
        let rt = rt2();
        for how in 0..2 {
            const K: usize = 9;
            let drops = Drops::new(K);
            let (tx, rx) = chan::bounded::<Tracked>(0);
            let mut hs = Vec::new();
            for id in 0..K {
                let tx = tx.clone();
                let v = drops.make(id);
                let ctx = [Ctx::Thread, Ctx::Fiber, Ctx::TaskBlocking][id % 3];
                hs.push(start(
                    &rt,
                    ctx,
                    Box::new(move || match tx.send_blocking(v) {
                        Ok(()) => panic!("sent with no receiver"),
                        Err(e) => {
                            assert_eq!(e.0.id, id, "another sender's value came back");
                        }
                    }),
                    Box::pin(async {}),
                ));
            }
            std::thread::sleep(Duration::from_millis(30));
            if how == 0 {
                assert!(rx.close());
                drop(rx);
            } else {
                drop(rx);
            }
            for h in hs {
                h.join(20);
            }
            drop(tx);
            for id in 0..K {
                assert_eq!(
                    drops.get(id),
                    1,
                    "value {id} dropped {} times",
                    drops.get(id)
                );
            }
        }
        for how in 0..2 {
            const K: usize = 9;
            let (tx, rx) = chan::bounded::<usize>(0);
            let mut hs = Vec::new();
            for id in 0..K {
                let rx = rx.clone();
                let ctx = CTXS[id % 4];
                let rx2 = rx.clone();
                hs.push(start(
                    &rt,
                    ctx,
                    Box::new(move || assert!(rx.recv_blocking().is_err())),
                    Box::pin(async move { assert!(rx2.recv().await.is_err()) }),
                ));
            }
            std::thread::sleep(Duration::from_millis(30));
            if how == 0 {
                assert!(tx.close());
            }
            drop(tx);
            for h in hs {
                h.join(20);
            }
            drop(rx);
        }
    });
}

/// Close racing live traffic: a receiver takes values while senders of every kind are
/// registered, and the channel is closed mid-way. Received values and values given
/// back add up to everything, each exactly once; nothing is dropped twice.
#[test]
fn rendezvous_close_races_traffic() {
    watchdog(60, || {
        let rt = rt2();
        for round in 0..6u64 {
            const SENDERS: usize = 6;
            const PER: usize = 40;
            let drops = Drops::new(SENDERS * PER);
            let back = Arc::new(
                (0..SENDERS * PER)
                    .map(|_| AtomicUsize::new(0))
                    .collect::<Vec<_>>(),
            );
            let (tx, rx) = chan::bounded::<Tracked>(0);
            let mut sends = Vec::new();
            for id in 0..SENDERS {
                let tx = tx.clone();
                let drops = drops.clone();
                let back = back.clone();
                let ctx = [Ctx::Thread, Ctx::Fiber, Ctx::TaskBlocking][id % 3];
                sends.push(start(
                    &rt,
                    ctx,
                    Box::new(move || {
                        for i in 0..PER {
                            if let Err(e) = tx.send_blocking(drops.make(id * PER + i)) {
                                assert_eq!(e.0.id, id * PER + i);
                                back[e.0.id].fetch_add(1, SeqCst);
                            }
                        }
                    }),
                    Box::pin(async {}),
                ));
            }
            drop(tx);
            let got = Arc::new(
                (0..SENDERS * PER)
                    .map(|_| AtomicUsize::new(0))
                    .collect::<Vec<_>>(),
            );
            let mut recvs = Vec::new();
            let stop_after = 20 + (round as usize * 17) % 100;
            for k in 0..2 {
                let rx = rx.clone();
                let got = got.clone();
                let ctx = [Ctx::Fiber, Ctx::Thread][k];
                recvs.push(start(
                    &rt,
                    ctx,
                    Box::new(move || {
                        let mut n = 0;
                        while let Ok(v) = rx.recv_blocking() {
                            got[v.id].fetch_add(1, SeqCst);
                            n += 1;
                            if k == 0 && n == stop_after {
                                rx.close();
                            }
                        }
                    }),
                    Box::pin(async {}),
                ));
            }
            drop(rx);
            for s in sends {
                s.join(30);
            }
            for r in recvs {
                r.join(30);
            }
            for i in 0..SENDERS * PER {
                let g = got[i].load(SeqCst);
                let b = back[i].load(SeqCst);
                assert_eq!(g + b, 1, "value {i}: received {g}, given back {b}");
                assert_eq!(drops.get(i), 1, "value {i} dropped {} times", drops.get(i));
            }
        }
    });
}

/// Fibers blocked in `send_blocking` / `recv_blocking` on a rendezvous channel are
/// aborted at the wait (some while a partner races to complete them): each value is
/// received or dropped, exactly once; the channel works afterwards.
#[test]
fn rendezvous_abort_fibers_at_the_wait() {
    watchdog(60, || {
        let rt = rt2();
        for round in 0..8u64 {
            const K: usize = 8;
            let drops = Drops::new(K);
            let got = Arc::new((0..K).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
            let (tx, rx) = chan::bounded::<Tracked>(0);
            let _g = rt.enter();
            let mut hs = Vec::new();
            for id in 0..K {
                let tx = tx.clone();
                let v = drops.make(id);
                hs.push(weft::fiber::spawn(move || {
                    let _ = tx.send_blocking(v);
                }));
            }
            // Receiving fibers that will also be aborted.
            let (tx2, rx2) = chan::bounded::<usize>(0);
            let mut rhs = Vec::new();
            for _ in 0..4 {
                let rx2 = rx2.clone();
                rhs.push(weft::fiber::spawn(move || rx2.recv_blocking().ok()));
            }
            std::thread::sleep(Duration::from_millis(5 + round % 3));
            // A racing receiver takes some values while the aborts land.
            let racer = {
                let rx = rx.clone();
                let got = got.clone();
                std::thread::spawn(move || {
                    for _ in 0..(round as usize % 5) {
                        if let Ok(v) = rx.recv_timeout(Duration::from_millis(1)) {
                            got[v.id].fetch_add(1, SeqCst);
                        }
                    }
                })
            };
            for (i, h) in hs.iter().enumerate() {
                if i % 4 != 3 {
                    h.abort();
                }
            }
            for h in &rhs {
                h.abort();
            }
            racer.join().unwrap();
            // The ones not aborted are taken here.
            let mut left = 0;
            while let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) {
                got[v.id].fetch_add(1, SeqCst);
                left += 1;
                if left > K {
                    panic!("more values than sent");
                }
            }
            for h in hs {
                let _ = join_within(h, 20);
            }
            for h in rhs {
                match join_within(h, 20) {
                    Ok(v) => assert_eq!(v, None, "a value nobody sent"),
                    Err(e) => assert!(e.is_cancelled()),
                }
            }
            for i in 0..K {
                assert!(got[i].load(SeqCst) <= 1, "value {i} received twice");
                assert_eq!(drops.get(i), 1, "value {i} dropped {} times", drops.get(i));
            }
            // The channels work afterwards (no stale node from an aborted wait).
            let t = std::thread::spawn(move || tx2.send_blocking(77));
            assert_eq!(rx2.recv_timeout(Duration::from_secs(10)), Ok(77));
            t.join().unwrap().unwrap();
            let t = std::thread::spawn(move || tx.send_blocking(drops.make(0)).is_ok());
            let v = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("channel broken after aborts");
            drop(v);
            assert!(t.join().unwrap());
        }
    });
}

/// The runtime dropped while fibers (and blocking tasks) wait on a rendezvous channel:
/// the drop ends, every value is dropped exactly once, and the channel's surviving
/// ends see it disconnected.
#[test]
fn rendezvous_runtime_dropped_while_fibers_wait() {
    watchdog(60, || {
        for workers in [1, 2] {
            const K: usize = 6;
            let drops = Drops::new(K);
            let rt = weft::Builder::new()
                .worker_threads(workers)
                .build()
                .unwrap();
            let (tx, rx) = chan::bounded::<Tracked>(0);
            let (tx2, rx2) = chan::bounded::<Tracked>(0);
            {
                let _g = rt.enter();
                for id in 0..K {
                    let tx = tx.clone();
                    let v = drops.make(id);
                    weft::fiber::spawn(move || {
                        let _ = tx.send_blocking(v);
                    });
                    let rx2 = rx2.clone();
                    weft::fiber::spawn(move || {
                        let _ = rx2.recv_blocking();
                    });
                }
            }
            drop(tx);
            drop(rx2);
            std::thread::sleep(Duration::from_millis(20));
            drop(rt);
            wait_for("every value dropped", 10, || drops.total() >= K);
            for id in 0..K {
                assert_eq!(
                    drops.get(id),
                    1,
                    "value {id} dropped {} times",
                    drops.get(id)
                );
            }
            assert!(rx.try_recv().is_err());
            assert!(rx
                .recv_timeout(Duration::from_secs(5))
                .unwrap_err()
                .is_disconnected());
            assert!(tx2
                .send_timeout(drops.make(0), Duration::from_secs(5))
                .is_err());
        }
    });
}

/// `Select` (send and receive arms over two rendezvous channels) mixed with blocking
/// sends and receives and async ones on the same channels, in every context: every
/// value exactly once.
#[test]
fn rendezvous_select_mixed_with_blocking_forms() {
    watchdog(60, || {
        for rt in [rt1(), rt2()] {
            const PER: usize = 80;
            const SENDERS: usize = 6;
            let (txa, rxa) = chan::bounded::<Msg>(0);
            let (txb, rxb) = chan::bounded::<Msg>(0);
            let mut sends = Vec::new();
            for id in 0..SENDERS {
                let (txa, txb) = (txa.clone(), txb.clone());
                let ctx = [Ctx::Thread, Ctx::Fiber, Ctx::TaskBlocking][id % 3];
                let selecting = id % 2 == 0;
                sends.push(start(
                    &rt,
                    ctx,
                    Box::new(move || {
                        for i in 0..PER {
                            if selecting {
                                let mut sel = Select::new();
                                let ia = sel.send(&txa);
                                let ib = sel.send(&txb);
                                let op = sel.select();
                                let r = if op.index() == ia {
                                    op.send(&txa, (id, i))
                                } else {
                                    assert_eq!(op.index(), ib);
                                    op.send(&txb, (id, i))
                                };
                                r.expect("select send failed");
                            } else if i % 2 == 0 {
                                txa.send_blocking((id, i)).unwrap();
                            } else {
                                txb.send_blocking((id, i)).unwrap();
                            }
                        }
                    }),
                    Box::pin(async {}),
                ));
            }
            // One async sender too.
            {
                let (txa, txb) = (txa.clone(), txb.clone());
                let id = SENDERS;
                sends.push(Joiner::Weft(rt.spawn(async move {
                    for i in 0..PER {
                        if i % 3 == 0 {
                            txa.send((id, i)).await.unwrap();
                        } else {
                            txb.send((id, i)).await.unwrap();
                        }
                    }
                })));
            }
            drop((txa, txb));
            let mut recvs = Vec::new();
            for k in 0..5 {
                let (rxa, rxb) = (rxa.clone(), rxb.clone());
                let ctx = [
                    Ctx::Fiber,
                    Ctx::Thread,
                    Ctx::TaskBlocking,
                    Ctx::Fiber,
                    Ctx::Thread,
                ][k];
                let mode = k % 3; // 0: select both, 1: blocking a, 2: blocking b
                recvs.push(start(
                    &rt,
                    ctx,
                    Box::new(move || {
                        let mut log = Vec::new();
                        match mode {
                            0 => {
                                let mut sel = Select::new();
                                let ia = sel.recv(&rxa);
                                let _ib = sel.recv(&rxb);
                                let mut open = 2;
                                while open > 0 {
                                    let op = sel.select();
                                    let i = op.index();
                                    let r = if i == ia {
                                        op.recv(&rxa)
                                    } else {
                                        op.recv(&rxb)
                                    };
                                    match r {
                                        Ok(v) => log.push(v),
                                        Err(_) => {
                                            sel.remove(i);
                                            open -= 1;
                                        }
                                    }
                                }
                            }
                            1 => {
                                while let Ok(v) = rxa.recv_blocking() {
                                    log.push(v);
                                }
                            }
                            _ => {
                                while let Ok(v) = rxb.recv_blocking() {
                                    log.push(v);
                                }
                            }
                        }
                        log
                    }),
                    Box::pin(async { Vec::new() }),
                ));
            }
            {
                let (rxa, rxb) = (rxa.clone(), rxb.clone());
                recvs.push(Joiner::Weft(rt.spawn(async move {
                    let mut log = Vec::new();
                    while let Ok(v) = rxa.recv().await {
                        log.push(v);
                    }
                    while let Ok(v) = rxb.recv().await {
                        log.push(v);
                    }
                    log
                })));
            }
            drop((rxa, rxb));
            for s in sends {
                s.join(30);
            }
            let logs: Vec<_> = recvs.into_iter().map(|r| r.join(30)).collect();
            // (Order across two channels is not kept; only exactly-once is checked.)
            let mut seen = vec![0u32; (SENDERS + 1) * PER];
            for log in &logs {
                for &(s, n) in log {
                    seen[s * PER + n] += 1;
                }
            }
            for (i, c) in seen.iter().enumerate() {
                assert_eq!(*c, 1, "value {:?} seen {c} times", (i / PER, i % PER));
            }
        }
    });
}

/// `select!` with tiny timeouts (`default(d)`) on rendezvous channels, racing blocking
/// partners: every value exactly once.
#[test]
fn rendezvous_select_timeouts_race_blocking() {
    watchdog(60, || {
        let rt = rt2();
        const PER: usize = 150;
        let (txa, rxa) = chan::bounded::<Msg>(0);
        let (txb, rxb) = chan::bounded::<Msg>(0);
        let mut sends = Vec::new();
        for id in 0..4 {
            let (txa, txb) = (txa.clone(), txb.clone());
            let ctx = [Ctx::Fiber, Ctx::Thread][id % 2];
            sends.push(start(
                &rt,
                ctx,
                Box::new(move || {
                    let mut rng = Rng::new(seed() ^ id as u64);
                    for i in 0..PER {
                        if id < 2 {
                            loop {
                                let d = Duration::from_micros(rng.below(30));
                                weft::select! {
                                    send(txa, (id, i)) -> r => { r.unwrap(); break; },
                                    send(txb, (id, i)) -> r => { r.unwrap(); break; },
                                    default(d) => {},
                                }
                            }
                        } else if i % 2 == 0 {
                            txa.send_blocking((id, i)).unwrap();
                        } else {
                            txb.send_blocking((id, i)).unwrap();
                        }
                    }
                }),
                Box::pin(async {}),
            ));
        }
        drop((txa, txb));
        let mut recvs = Vec::new();
        for k in 0..4 {
            let (rxa, rxb) = (rxa.clone(), rxb.clone());
            let ctx = [Ctx::Fiber, Ctx::Thread, Ctx::TaskBlocking, Ctx::Fiber][k];
            recvs.push(start(
                &rt,
                ctx,
                Box::new(move || {
                    let mut rng = Rng::new(seed() ^ (50 + k) as u64);
                    let mut log = Vec::new();
                    let (mut a_open, mut b_open) = (true, true);
                    while a_open || b_open {
                        if k % 2 == 0 {
                            let d = Duration::from_micros(rng.below(30));
                            let never = chan::never::<Msg>();
                            let ra = if a_open { &rxa } else { &never };
                            let rb = if b_open { &rxb } else { &never };
                            weft::select! {
                                recv(ra) -> r => match r { Ok(v) => log.push(v), Err(_) => a_open = false },
                                recv(rb) -> r => match r { Ok(v) => log.push(v), Err(_) => b_open = false },
                                default(d) => {},
                            }
                        } else if a_open {
                            match rxa.recv_blocking() {
                                Ok(v) => log.push(v),
                                Err(_) => a_open = false,
                            }
                        } else {
                            match rxb.recv_blocking() {
                                Ok(v) => log.push(v),
                                Err(_) => b_open = false,
                            }
                        }
                    }
                    log
                }),
                Box::pin(async { Vec::new() }),
            ));
        }
        drop((rxa, rxb));
        for s in sends {
            s.join(40);
        }
        let logs: Vec<_> = recvs.into_iter().map(|r| r.join(40)).collect();
        let mut seen = vec![0u32; 4 * PER];
        for log in &logs {
            for &(s, n) in log {
                seen[s * PER + n] += 1;
            }
        }
        for (i, c) in seen.iter().enumerate() {
            assert_eq!(*c, 1, "value {:?} seen {c} times", (i / PER, i % PER));
        }
    });
}

/// A fiber panics while its partners wait on a rendezvous channel (its `Sender`
/// dropped by the unwind): the waiters see the disconnect; a panic in a receiver
/// hands nothing to anyone twice.
#[test]
fn rendezvous_panic_around_the_wait() {
    watchdog(60, || {
        let rt = rt2();
        let (tx, rx) = chan::bounded::<usize>(0);
        let _g = rt.enter();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let rx = rx.clone();
                weft::fiber::spawn(move || {
                    let mut n = 0;
                    while rx.recv_blocking().is_ok() {
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        drop(rx);
        let p = weft::fiber::spawn(move || {
            for i in 0..10 {
                tx.send_blocking(i).unwrap();
            }
            panic!("boom while holding the sender");
        });
        assert!(join_within(p, 20).unwrap_err().is_panic());
        let total: usize = waiters
            .into_iter()
            .map(|h| join_within(h, 20).unwrap())
            .sum();
        assert_eq!(total, 10);

        // A receiver fiber that panics right after each receive (restarted): values
        // are each received once.
        let (tx, rx) = chan::bounded::<usize>(0);
        let seen = Arc::new((0..50).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        let sender = weft::fiber::spawn(move || {
            for i in 0..50 {
                tx.send_blocking(i).unwrap();
            }
        });
        let mut got = 0;
        while got < 50 {
            let rx = rx.clone();
            let seen = seen.clone();
            let h = weft::fiber::spawn(move || {
                let v = rx.recv_blocking().unwrap();
                seen[v].fetch_add(1, SeqCst);
                panic!("receiver panics after taking {v}");
            });
            assert!(join_within(h, 20).unwrap_err().is_panic());
            got += 1;
        }
        join_within(sender, 20).unwrap();
        for i in 0..50 {
            assert_eq!(seen[i].load(SeqCst), 1, "value {i}");
        }
    });
}

/// Tasks that yield in a loop (always something in the deferred list) next to fibers
/// ping-ponging over rendezvous channels on the same worker(s): the fibers finish, and
/// the yielders keep making progress meanwhile (no starvation either way).
#[test]
fn yield_loops_next_to_fibers_on_rendezvous() {
    watchdog(60, || {
        for workers in [1, 2] {
            let rt = weft::Builder::new()
                .worker_threads(workers)
                .build()
                .unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let spins = Arc::new(AtomicUsize::new(0));
            let yielders: Vec<_> = (0..3)
                .map(|_| {
                    let stop = stop.clone();
                    let spins = spins.clone();
                    rt.spawn(async move {
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while !stop.load(SeqCst) && Instant::now() < deadline {
                            spins.fetch_add(1, SeqCst);
                            weft::task::yield_now().await;
                        }
                    })
                })
                .collect();
            // Fiber yielders as well (a yielded fiber is a deferred task too).
            let fyielders: Vec<_> = {
                let _g = rt.enter();
                (0..2)
                    .map(|_| {
                        let stop = stop.clone();
                        let spins = spins.clone();
                        weft::fiber::spawn(move || {
                            let deadline = Instant::now() + Duration::from_secs(30);
                            while !stop.load(SeqCst) && Instant::now() < deadline {
                                spins.fetch_add(1, SeqCst);
                                weft::fiber::yield_now();
                            }
                        })
                    })
                    .collect()
            };
            const ROUNDS: usize = 400;
            let (ping_tx, ping_rx) = chan::bounded::<usize>(0);
            let (pong_tx, pong_rx) = chan::bounded::<usize>(0);
            let (a, b) = {
                let _g = rt.enter();
                let a = weft::fiber::spawn(move || {
                    for i in 0..ROUNDS {
                        ping_tx.send_blocking(i).unwrap();
                        assert_eq!(pong_rx.recv_blocking().unwrap(), i + 1);
                    }
                });
                let b = weft::fiber::spawn(move || {
                    for i in 0..ROUNDS {
                        let v = ping_rx.recv_blocking().unwrap();
                        assert_eq!(v, i);
                        pong_tx.send_blocking(v + 1).unwrap();
                    }
                });
                (a, b)
            };
            let before = spins.load(SeqCst);
            join_within(a, 30).unwrap();
            join_within(b, 30).unwrap();
            // The yielders ran meanwhile, and go on after.
            let mid = spins.load(SeqCst);
            assert!(mid > before, "yielders starved while the fibers ran");
            wait_for("yielders progress after the fibers", 10, || {
                spins.load(SeqCst) > mid + 10
            });
            stop.store(true, SeqCst);
            for y in yielders {
                join_within(y, 20).unwrap();
            }
            for y in fyielders {
                join_within(y, 20).unwrap();
            }
        }
    });
}

/// Yield loops next to fibers and blocking tasks contending on `weft::sync` primitives
/// (a mutex, a semaphore) and on a bounded(1) channel: all finish with the right
/// counts.
#[test]
fn yield_loops_next_to_sync_waits() {
    watchdog(60, || {
        for workers in [1, 2] {
            let rt = weft::Builder::new()
                .worker_threads(workers)
                .build()
                .unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let yielders: Vec<_> = (0..2)
                .map(|_| {
                    let stop = stop.clone();
                    rt.spawn(async move {
                        let deadline = Instant::now() + Duration::from_secs(30);
                        let mut n = 0u64;
                        while !stop.load(SeqCst) && Instant::now() < deadline {
                            n += 1;
                            weft::task::yield_now().await;
                        }
                        n
                    })
                })
                .collect();
            let m = Arc::new(weft::sync::Mutex::new(0usize));
            let sem = Arc::new(weft::sync::Semaphore::new(1));
            let (tx, rx) = chan::bounded::<usize>(1);
            const PER: usize = 150;
            let mut hs = Vec::new();
            {
                let _g = rt.enter();
                for k in 0..4 {
                    let m = m.clone();
                    let sem = sem.clone();
                    let tx = tx.clone();
                    let body = move || {
                        for i in 0..PER {
                            {
                                let _p = sem.acquire_blocking().unwrap();
                                let mut g = m.lock_blocking();
                                *g += 1;
                            }
                            tx.send_blocking(i).unwrap();
                        }
                    };
                    if k % 2 == 0 {
                        hs.push(weft::fiber::spawn(body));
                    } else {
                        hs.push(rt.spawn(async move { body() }));
                    }
                }
            }
            drop(tx);
            let r = {
                let _g = rt.enter();
                weft::fiber::spawn(move || {
                    let mut n = 0;
                    while rx.recv_blocking().is_ok() {
                        n += 1;
                    }
                    n
                })
            };
            for h in hs {
                join_within(h, 30).unwrap();
            }
            assert_eq!(join_within(r, 30).unwrap(), 4 * PER);
            assert_eq!(*m.lock_blocking(), 4 * PER);
            stop.store(true, SeqCst);
            for y in yielders {
                assert!(join_within(y, 20).unwrap() > 0);
            }
        }
    });
}

/// A fiber spinning in a blocking wait while its partner sits in the worker's own
/// deferred list (the partner yields right before it sends), one worker: the wait
/// must end (the spinner suspends and the partner runs), many times over.
#[test]
fn spinning_wait_while_partner_is_deferred() {
    watchdog(60, || {
        for workers in [1, 2] {
            let rt = weft::Builder::new()
                .worker_threads(workers)
                .build()
                .unwrap();
            for cap in [0usize, 1] {
                const N: usize = 300;
                let (tx, rx) = chan::bounded::<usize>(cap);
                let _g = rt.enter();
                let s = weft::fiber::spawn(move || {
                    for i in 0..N {
                        weft::fiber::yield_now();
                        tx.send_blocking(i).unwrap();
                        weft::fiber::yield_now();
                    }
                });
                let s2 = rt.spawn(async {
                    for _ in 0..N {
                        weft::task::yield_now().await;
                    }
                });
                let r = weft::fiber::spawn(move || {
                    let mut n = 0;
                    while let Ok(v) = rx.recv_blocking() {
                        assert_eq!(v, n);
                        n += 1;
                        weft::fiber::yield_now();
                    }
                    n
                });
                join_within(s, 30).unwrap();
                join_within(s2, 30).unwrap();
                assert_eq!(join_within(r, 30).unwrap(), N);
            }
        }
    });
}

/// Many fibers (more than a worker's queue would take in one go) all waiting on one
/// rendezvous channel while yielders run: drained through a single receiver, nothing
/// lost or doubled, even when the yielders' deferred list is drained into the queue.
#[test]
fn many_waiters_with_many_yielders() {
    watchdog(60, || {
        let rt = rt2();
        const FIBERS: usize = 300;
        let stop = Arc::new(AtomicBool::new(false));
        let yielders: Vec<_> = (0..300)
            .map(|_| {
                let stop = stop.clone();
                rt.spawn(async move {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while !stop.load(SeqCst) && Instant::now() < deadline {
                        weft::task::yield_now().await;
                    }
                })
            })
            .collect();
        let (tx, rx) = chan::bounded::<usize>(0);
        let hs: Vec<_> = {
            let _g = rt.enter();
            (0..FIBERS)
                .map(|i| {
                    let tx = tx.clone();
                    weft::fiber::spawn(move || tx.send_blocking(i).unwrap())
                })
                .collect()
        };
        drop(tx);
        let mut seen = vec![0u32; FIBERS];
        let mut n = 0;
        while let Ok(v) = rx.recv_timeout(Duration::from_secs(20)) {
            seen[v] += 1;
            n += 1;
        }
        assert_eq!(n, FIBERS);
        assert!(seen.iter().all(|&c| c == 1));
        for h in hs {
            join_within(h, 20).unwrap();
        }
        stop.store(true, SeqCst);
        for y in yielders {
            join_within(y, 20).unwrap();
        }
    });
}

/// Many async tasks calling the blocking forms on one rendezvous channel (each wait
/// sets a loop stack aside on its worker), senders and receivers one value each, on
/// one and two workers: every value once, nothing hangs.
#[test]
fn rendezvous_many_blocking_tasks_both_sides() {
    watchdog(60, || {
        for rt in [rt1(), rt2()] {
            const K: usize = 120;
            let (tx, rx) = chan::bounded::<usize>(0);
            let seen = Arc::new((0..K).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
            let mut hs = Vec::new();
            for i in 0..K {
                let tx = tx.clone();
                let rx = rx.clone();
                let seen = seen.clone();
                // Interleave: receivers first for even i, senders first for odd.
                let s = rt.spawn(async move { tx.send_blocking(i).unwrap() });
                let r = rt.spawn(async move {
                    let v = rx.recv_blocking().unwrap();
                    seen[v].fetch_add(1, SeqCst);
                });
                if i % 2 == 0 {
                    hs.push(r);
                    hs.push(s);
                } else {
                    hs.push(s);
                    hs.push(r);
                }
            }
            drop((tx, rx));
            for h in hs {
                join_within(h, 30).unwrap();
            }
            for i in 0..K {
                assert_eq!(seen[i].load(SeqCst), 1, "value {i}");
            }
        }
    });
}

/// Async tasks blocked in `send_blocking` / `recv_blocking` on a rendezvous channel
/// (their waits set aside on the worker) are aborted. Such a wait cannot be cancelled
/// before it returns (documented), so partners then arrive: every value exactly once,
/// the tasks end (cancelled or finished), and the channel works after.
#[test]
fn rendezvous_abort_blocking_tasks_at_the_wait() {
    watchdog(60, || {
        let rt = rt2();
        const K: usize = 8;
        let drops = Drops::new(K);
        let (tx, rx) = chan::bounded::<Tracked>(0);
        let mut hs = Vec::new();
        for id in 0..K {
            let tx = tx.clone();
            let v = drops.make(id);
            hs.push(rt.spawn(async move {
                let _ = tx.send_blocking(v);
            }));
        }
        let (tx2, rx2) = chan::bounded::<usize>(0);
        let mut rhs = Vec::new();
        for _ in 0..4 {
            let rx2 = rx2.clone();
            rhs.push(rt.spawn(async move { rx2.recv_blocking().ok() }));
        }
        std::thread::sleep(Duration::from_millis(20));
        for h in &hs {
            h.abort();
        }
        for h in &rhs {
            h.abort();
        }
        // A wait nested in a task's poll cannot be cancelled before it returns
        // (documented: ARCHITECTURE, "Rendezvous (spec 003)"), so the partners come:
        // every waiting sender's value is taken, every waiting receiver gets one.
        let mut taken = 0;
        while let Ok(v) = rx.recv_timeout(Duration::from_millis(300)) {
            assert!(v.id < K);
            taken += 1;
            assert!(taken <= K, "more values than senders");
        }
        assert_eq!(taken, K, "a blocked sender's value was lost");
        for i in 0..4 {
            tx2.send_timeout(100 + i, Duration::from_secs(10))
                .expect("a blocked receiver vanished");
        }
        for h in hs {
            match join_within(h, 20) {
                Ok(()) => {}
                Err(e) => assert!(e.is_cancelled()),
            }
        }
        for h in rhs {
            match join_within(h, 20) {
                Ok(v) => assert!(matches!(v, Some(100..=103))),
                Err(e) => assert!(e.is_cancelled()),
            }
        }
        for i in 0..K {
            assert_eq!(drops.get(i), 1, "value {i} dropped {} times", drops.get(i));
        }
        assert!(
            rx.try_recv().is_err(),
            "a value of an aborted sender is still there"
        );
        let t = std::thread::spawn(move || tx2.send_blocking(5));
        assert_eq!(rx2.recv_timeout(Duration::from_secs(10)), Ok(5));
        t.join().unwrap().unwrap();
        drop(tx);
    });
}

/// Async `Stream` receivers (observer nodes) next to blocking receivers on a
/// rendezvous channel fed by blocking senders in threads and fibers; some stream
/// receivers are dropped mid-way: every value exactly once.
#[test]
fn rendezvous_stream_receivers_with_blocking_senders() {
    use futures_core::Stream;
    watchdog(60, || {
        let rt = rt2();
        const SENDERS: usize = 4;
        const PER: usize = 100;
        let (tx, rx) = chan::bounded::<Msg>(0);
        let mut sends = Vec::new();
        for id in 0..SENDERS {
            sends.push(start_sender(
                &rt,
                [Ctx::Thread, Ctx::Fiber][id % 2],
                tx.clone(),
                id,
                PER,
            ));
        }
        drop(tx);
        let mut recvs: Vec<Joiner<Vec<Msg>>> = Vec::new();
        for k in 0..4 {
            let mut rx = rx.clone();
            // Streams 0 and 1 give up after a few values (dropped between polls).
            let limit = if k < 2 { 7 + k * 5 } else { usize::MAX };
            recvs.push(Joiner::Weft(rt.spawn(async move {
                let mut log = Vec::new();
                while log.len() < limit {
                    let next = std::future::poll_fn(|cx| Pin::new(&mut rx).poll_next(cx)).await;
                    match next {
                        Some(v) => log.push(v),
                        None => break,
                    }
                }
                log
            })));
        }
        recvs.push(start_receiver(&rt, Ctx::Fiber, rx.clone()));
        recvs.push(start_receiver(&rt, Ctx::Thread, rx.clone()));
        drop(rx);
        for s in sends {
            s.join(30);
        }
        let logs: Vec<_> = recvs.into_iter().map(|r| r.join(30)).collect();
        check_exactly_once_in_order(&logs, SENDERS, PER);
    });
}

/// `Select::ready` (observer) followed by `try_recv`, racing blocking receivers, on a
/// rendezvous channel fed by blocking senders: every value exactly once; the
/// observer-based receiver makes progress or sees the disconnect.
#[test]
fn rendezvous_select_ready_observers_race_blocking() {
    watchdog(60, || {
        let rt = rt2();
        const SENDERS: usize = 4;
        const PER: usize = 100;
        let (tx, rx) = chan::bounded::<Msg>(0);
        let mut sends = Vec::new();
        for id in 0..SENDERS {
            sends.push(start_sender(
                &rt,
                [Ctx::Fiber, Ctx::Thread][id % 2],
                tx.clone(),
                id,
                PER,
            ));
        }
        drop(tx);
        let mut recvs = Vec::new();
        for k in 0..2 {
            let rx = rx.clone();
            recvs.push(start(
                &rt,
                [Ctx::Fiber, Ctx::Thread][k],
                Box::new(move || {
                    let mut log = Vec::new();
                    let mut sel = Select::new();
                    sel.recv(&rx);
                    loop {
                        let _ = sel.ready_timeout(Duration::from_millis(50));
                        match rx.try_recv() {
                            Ok(v) => log.push(v),
                            Err(chan::TryRecvError::Disconnected) => return log,
                            Err(chan::TryRecvError::Empty) => {}
                        }
                    }
                }),
                Box::pin(async { Vec::new() }),
            ));
        }
        recvs.push(start_receiver(&rt, Ctx::Fiber, rx.clone()));
        recvs.push(start_receiver(&rt, Ctx::Thread, rx.clone()));
        drop(rx);
        for s in sends {
            s.join(30);
        }
        let logs: Vec<_> = recvs.into_iter().map(|r| r.join(30)).collect();
        check_exactly_once_in_order(&logs, SENDERS, PER);
    });
}

/// The runtime dropped while yield-looping tasks and fibers fill the deferred lists
/// and fibers wait on rendezvous channels: the drop ends and every value is dropped
/// exactly once.
#[test]
fn runtime_dropped_with_yielders_and_rendezvous_waiters() {
    watchdog(60, || {
        for workers in [1, 2] {
            const K: usize = 8;
            let drops = Drops::new(K);
            let rt = weft::Builder::new()
                .worker_threads(workers)
                .build()
                .unwrap();
            let (tx, rx) = chan::bounded::<Tracked>(0);
            {
                let _g = rt.enter();
                for _ in 0..4 {
                    rt.spawn(async {
                        loop {
                            weft::task::yield_now().await;
                        }
                    });
                    weft::fiber::spawn(|| loop {
                        weft::fiber::yield_now();
                    });
                }
                for id in 0..K {
                    let tx = tx.clone();
                    let v = drops.make(id);
                    weft::fiber::spawn(move || {
                        let _ = tx.send_blocking(v);
                    });
                }
            }
            drop(tx);
            std::thread::sleep(Duration::from_millis(20));
            // One value taken while the yielders run.
            let v = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("a waiting sender starved");
            drop(v);
            drop(rt);
            wait_for("every value dropped", 10, || drops.total() >= K);
            for id in 0..K {
                assert_eq!(
                    drops.get(id),
                    1,
                    "value {id} dropped {} times",
                    drops.get(id)
                );
            }
            assert!(rx
                .recv_timeout(Duration::from_secs(5))
                .unwrap_err()
                .is_disconnected());
        }
    });
}

/// Async sends and receives dropped mid-wait (the `select!`-style cancellation, after
/// a few polls) racing blocking partners that now register at once, on a rendezvous
/// channel: no value is received twice, every value is dropped exactly once, and the
/// blocking side finishes.
#[test]
fn rendezvous_cancelled_async_ops_race_blocking_partners() {
    use chan_common::drop_after;
    watchdog(60, || {
        let rt = rt2();
        const N: usize = 300;
        let drops = Drops::new(N);
        let got = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        let (tx, rx) = chan::bounded::<Tracked>(0);
        // Async senders that give up after 0..4 polls, and blocking senders.
        let mut sends = Vec::new();
        for k in 0..4usize {
            let tx = tx.clone();
            let drops = drops.clone();
            let ids: Vec<usize> = (k..N).step_by(4).collect();
            if k % 2 == 0 {
                sends.push(Joiner::Weft(rt.spawn(async move {
                    let mut rng = Rng::new(seed() ^ k as u64);
                    for id in ids {
                        // Given up sends drop their value (with the future).
                        let _ = drop_after(rng.below(4), tx.send(drops.make(id))).await;
                    }
                })));
            } else {
                sends.push(start(
                    &rt,
                    [Ctx::Fiber, Ctx::Thread][k / 2],
                    Box::new(move || {
                        for id in ids {
                            tx.send_blocking(drops.make(id)).unwrap();
                        }
                    }),
                    Box::pin(async {}),
                ));
            }
        }
        drop(tx);
        let mut recvs = Vec::new();
        for k in 0..4usize {
            let rx = rx.clone();
            let got = got.clone();
            if k % 2 == 0 {
                recvs.push(Joiner::Weft(rt.spawn(async move {
                    let mut rng = Rng::new(seed() ^ (9 + k) as u64);
                    loop {
                        match drop_after(rng.below(4), rx.recv()).await {
                            Some(Ok(v)) => {
                                got[v.id].fetch_add(1, SeqCst);
                            }
                            Some(Err(_)) => return,
                            None => {}
                        }
                    }
                })));
            } else {
                recvs.push(start(
                    &rt,
                    [Ctx::Fiber, Ctx::Thread][k / 2],
                    Box::new(move || {
                        while let Ok(v) = rx.recv_blocking() {
                            got[v.id].fetch_add(1, SeqCst);
                        }
                    }),
                    Box::pin(async {}),
                ));
            }
        }
        drop(rx);
        for s in sends {
            s.join(30);
        }
        for r in recvs {
            r.join(30);
        }
        for i in 0..N {
            assert!(got[i].load(SeqCst) <= 1, "value {i} received twice");
            assert_eq!(drops.get(i), 1, "value {i} dropped {} times", drops.get(i));
            if i % 4 == 1 || i % 4 == 3 {
                assert_eq!(got[i].load(SeqCst), 1, "blocking-sent value {i} lost");
            }
        }
    });
}

/// Blocking rendezvous operations inside fork-join `join` halves (their waits cannot
/// be set aside and dispatch in place), partnered by a plain thread, from a fiber, an
/// async task and a plain thread, on one and two workers. (Halves that partner each
/// other hang on one worker: `b` sits in `a`'s private frame until `a` returns, which
/// is inherent to `join`, not part of this review.)
#[test]
fn rendezvous_inside_forkjoin_join() {
    watchdog(60, || {
        for rt in [rt1(), rt2()] {
            let body = || {
                let (tx, rx) = chan::bounded::<usize>(0);
                let (btx, brx) = chan::bounded::<usize>(0);
                let partner = std::thread::spawn(move || {
                    let mut sum = 0;
                    for _ in 0..50 {
                        sum += rx.recv_blocking().unwrap();
                        sum += rx.recv_blocking().unwrap();
                        btx.send_blocking(7).unwrap();
                    }
                    sum
                });
                for _ in 0..50 {
                    let (a, b) = weft::join(
                        || tx.send_blocking(1),
                        || {
                            tx.send_blocking(2).unwrap();
                            brx.recv_blocking()
                        },
                    );
                    a.unwrap();
                    assert_eq!(b, Ok(7));
                }
                assert_eq!(partner.join().unwrap(), 150);
            };
            let f = {
                let _g = rt.enter();
                weft::fiber::spawn(body)
            };
            join_within(f, 20).unwrap();
            join_within(rt.spawn(async move { body() }), 20).unwrap();
            let _g = rt.enter();
            body();
        }
    });
}
