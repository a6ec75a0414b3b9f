//! Review attacks (rev15) on commit 03f82ab: `Chan::settle_locked` claims a waiting
//! receiver before it pops, and tells it to retry (`Signal`) when a fast receive took the
//! value meanwhile; `recv_timeout` withdraws its node after a last poll and keeps a value
//! handed to it meanwhile (`Chan::withdraw_recv`). Safe public API only; every wait is
//! bounded by a watchdog; every test body runs about a second.
//!
//! What each test checks: no value lost or duplicated (each value's id is counted), no
//! waiter left asleep (a receiver still waiting after the close hangs the watchdog),
//! `len()` never above the capacity where no receive future was dropped nor a select
//! left unperformed, and a closed channel drains before it reports `Disconnected`.

mod chan_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chan_common::{
    drop_after, fiber_on, join_within, make, panicking_waker, rt2, seed, watchdog, Rng,
};
use weft::chan::{self, Receiver, RecvTimeoutError, Select, Sender, TryRecvError};

/// Per-value receive counts: `n` ids, each must end at exactly one.
#[derive(Clone)]
struct Seen(Arc<Vec<AtomicUsize>>);

impl Seen {
    fn new(n: usize) -> Seen {
        Seen(Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect()))
    }
    fn got(&self, v: usize) {
        self.0[v].fetch_add(1, SeqCst);
    }
    /// Every id in `sent` seen exactly once, every other id never.
    fn check(&self, sent: &[bool], what: &str) {
        let mut bad = Vec::new();
        for (i, c) in self.0.iter().enumerate() {
            let c = c.load(SeqCst);
            let want = usize::from(sent[i]);
            if c != want {
                bad.push((i, want, c));
            }
        }
        assert!(
            bad.is_empty(),
            "{what}: (id, sent, received) mismatches (lost or duplicated): {:?}",
            &bad[..bad.len().min(10)]
        );
    }
}

/// Ids sent successfully (each sender owns a disjoint range, so no lock needed for
/// correctness; a mutex keeps it simple).
#[derive(Clone)]
struct Sent(Arc<Mutex<Vec<bool>>>);

impl Sent {
    fn new(n: usize) -> Sent {
        Sent(Arc::new(Mutex::new(vec![false; n])))
    }
    fn ok(&self, v: usize) {
        self.0.lock().unwrap()[v] = true;
    }
    fn get(&self) -> Vec<bool> {
        self.0.lock().unwrap().clone()
    }
}

/// Sends ids `from..to` on `tx` in one of several ways (fast `try_send` spinning on
/// `Full`, `send_blocking`, `send_timeout` with tiny timeouts), recording those sent.
fn sender_thread(
    tx: Sender<usize>,
    from: usize,
    to: usize,
    how: usize,
    sent: Sent,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for v in from..to {
            let ok = match how % 3 {
                0 => {
                    let mut v = v;
                    loop {
                        match tx.try_send(v) {
                            Ok(()) => break true,
                            Err(chan::TrySendError::Full(b)) => {
                                v = b;
                                std::hint::spin_loop();
                            }
                            Err(chan::TrySendError::Disconnected(_)) => break false,
                        }
                    }
                }
                1 => tx.send_blocking(v).is_ok(),
                _ => match tx.send_timeout(v, Duration::from_micros(1 + (v % 7) as u64 * 20)) {
                    Ok(()) => true,
                    Err(chan::SendTimeoutError::Timeout(_)) => false,
                    Err(chan::SendTimeoutError::Disconnected(_)) => false,
                },
            };
            if ok {
                sent.ok(v);
            }
        }
    })
}

/// Receives until `Disconnected` with `try_recv` spinning (the fast receive of the
/// race: it reads `slow` clear and pops behind a registering receiver's back).
fn try_recv_spinner(rx: Receiver<usize>, seen: Seen, ended: Ended) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        loop {
            match rx.try_recv() {
                Ok(v) => seen.got(v),
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
                Err(TryRecvError::Disconnected) => break,
            }
        }
        ended.check("try_recv spinner");
    })
}

/// Set by the test just before it closes the channel: a receiver that sees it
/// disconnected earlier was told so falsely (a retry misread as the end).
#[derive(Clone)]
struct Ended(Arc<AtomicBool>);

impl Ended {
    fn new() -> Ended {
        Ended(Arc::new(AtomicBool::new(false)))
    }
    fn set(&self) {
        self.0.store(true, SeqCst);
    }
    fn check(&self, who: &str) {
        assert!(
            self.0.load(SeqCst),
            "{who}: the channel reported disconnected before it was closed"
        );
    }
}

/// The largest `len()` seen while any of `hs` runs (bounded: a hang fails).
fn sample_len_until_done(rx: &Receiver<usize>, hs: &[std::thread::JoinHandle<()>]) -> usize {
    let t0 = Instant::now();
    let mut max = 0;
    while hs.iter().any(|h| !h.is_finished()) {
        max = max.max(rx.len());
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "hang: senders did not finish"
        );
    }
    max
}

/// After `Disconnected`, the channel stays so for every way of receiving.
fn assert_stays_disconnected(rx: &Receiver<usize>) {
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(
        rx.recv_timeout(Duration::ZERO),
        Err(RecvTimeoutError::Disconnected)
    );
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Disconnected)
    );
    assert!(rx.recv_blocking().is_err());
    assert_eq!(rx.len(), 0);
}

// ---------------------------------------------------------------------------------
// 1. The retry (`Signal`) of plain receives: every context.
// ---------------------------------------------------------------------------------

/// Plain waiting receivers in every context (thread `recv_blocking`, fiber
/// `recv_blocking`, async `recv().await`, thread `recv_timeout` with tiny timeouts)
/// beside `try_recv` spinners, racing fast and blocking senders on tiny capacities.
/// A settle that claims a waiting receiver and then finds the value taken by a spinner
/// must tell it to retry: a receiver left claimed and unwoken is off the list, so the
/// close cannot reach it and the watchdog fires. Exactly once; drained before
/// `Disconnected`.
/// One round of the retry drivers: `senders` sender threads started on a fresh
/// channel, and what its receivers record.
struct Round {
    tx: Sender<usize>,
    rx: Receiver<usize>,
    seen: Seen,
    sent: Sent,
    ended: Ended,
    senders: Vec<std::thread::JoinHandle<()>>,
}

fn start_round(cap: Option<usize>, senders: usize, per: usize, mode: usize) -> Round {
    let (tx, rx) = make::<usize>(cap);
    let n = senders * per;
    let (seen, sent, ended) = (Seen::new(n), Sent::new(n), Ended::new());
    let senders = (0..senders)
        .map(|s| sender_thread(tx.clone(), s * per, (s + 1) * per, s + mode, sent.clone()))
        .collect();
    Round {
        tx,
        rx,
        seen,
        sent,
        ended,
        senders,
    }
}

/// Ends a round: `len()` never past the capacity while the senders ran (no receive
/// is dropped and no select left unperformed), every value seen once, and the closed
/// channel stays disconnected.
fn finish_round(
    r: Round,
    cap: Option<usize>,
    receivers: Vec<std::thread::JoinHandle<()>>,
    on_workers: [weft::JoinHandle<()>; 2],
    what: &str,
) {
    let max = sample_len_until_done(&r.rx, &r.senders);
    if let Some(c) = cap {
        assert!(max <= c, "len() {max} > cap {c}");
    }
    for h in r.senders {
        h.join().unwrap();
    }
    r.ended.set();
    drop(r.tx);
    for h in receivers {
        h.join().unwrap();
    }
    for h in on_workers {
        join_within(h, 20).unwrap();
    }
    r.seen.check(&r.sent.get(), what);
    assert_stays_disconnected(&r.rx);
}

fn plain_receivers_retry(cap: Option<usize>, rounds: usize, per: usize) {
    let rt = Arc::new(rt2());
    for round in 0..rounds {
        let r = start_round(cap, 3, per, round);
        let (rx, seen, ended) = (&r.rx, &r.seen, &r.ended);
        let mut rs = Vec::new();
        rs.push(try_recv_spinner(rx.clone(), seen.clone(), ended.clone()));
        {
            let (rx, seen, ended) = (rx.clone(), seen.clone(), ended.clone());
            rs.push(std::thread::spawn(move || {
                while let Ok(v) = rx.recv_blocking() {
                    seen.got(v);
                }
                ended.check("thread recv_blocking");
            }));
        }
        {
            let (rx, seen, ended) = (rx.clone(), seen.clone(), ended.clone());
            rs.push(std::thread::spawn(move || {
                let mut i = 0u32;
                loop {
                    i = i.wrapping_add(1);
                    let t = match i % 3 {
                        0 => Duration::ZERO,
                        1 => Duration::from_nanos(500),
                        _ => Duration::from_micros(30),
                    };
                    match rx.recv_timeout(t) {
                        Ok(v) => seen.got(v),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                ended.check("thread recv_timeout");
            }));
        }
        let fib = {
            let (rx, seen, ended) = (rx.clone(), seen.clone(), ended.clone());
            fiber_on(&rt, move || {
                while let Ok(v) = rx.recv_blocking() {
                    seen.got(v);
                }
                ended.check("fiber recv_blocking");
            })
        };
        let task = {
            let (rx, seen, ended) = (rx.clone(), seen.clone(), ended.clone());
            rt.spawn(async move {
                while let Ok(v) = rx.recv().await {
                    seen.got(v);
                }
                ended.check("async recv");
            })
        };
        finish_round(
            r,
            cap,
            rs,
            [fib, task],
            &format!("cap {cap:?} round {round}"),
        );
    }
}

#[test]
fn plain_receivers_retry_bounded1() {
    watchdog(60, || plain_receivers_retry(Some(1), 6, 1500));
}

#[test]
fn plain_receivers_retry_bounded2() {
    watchdog(60, || plain_receivers_retry(Some(2), 6, 1500));
}

#[test]
fn plain_receivers_retry_unbounded() {
    watchdog(60, || plain_receivers_retry(None, 4, 1500));
}

// ---------------------------------------------------------------------------------
// 2. The retry of select receives: the claim wins the select's group.
// ---------------------------------------------------------------------------------

/// Selects that receive on the same channel twice (and on an idle second channel),
/// blocking, with tiny timeouts, and async, beside `try_recv` spinners and fast
/// senders. A settle that claims one of a select's nodes wins the select's group; if it
/// then finds the value gone, the select must start a new round (a select left won and
/// unwoken waits for ever: the close cannot reach it). Every selected receive is
/// performed, so nothing is given back: exactly once, and drained before
/// `Disconnected`.
fn select_receivers_retry(cap: Option<usize>, rounds: usize, per: usize) {
    let rt = Arc::new(rt2());
    for round in 0..rounds {
        // Never sent on; kept open until the end (a select on it alone would wait).
        let (idle_tx, idle_rx) = chan::unbounded::<usize>();
        // `try_send` (fast) and `send_blocking`.
        let r = start_round(cap, 2, per, round % 2);
        let (rx, seen, ended) = (&r.rx, &r.seen, &r.ended);
        let mut rs = Vec::new();
        rs.push(try_recv_spinner(rx.clone(), seen.clone(), ended.clone()));
        // Blocking select, recv twice on `rx`.
        {
            let (rx, idle_rx, seen, ended) =
                (rx.clone(), idle_rx.clone(), seen.clone(), ended.clone());
            rs.push(std::thread::spawn(move || loop {
                let mut sel = Select::new();
                let a = sel.recv(&rx);
                let b = sel.recv(&rx);
                let c = sel.recv(&idle_rx);
                let op = sel.select();
                let i = op.index();
                assert_ne!(i, c, "the idle channel was selected");
                assert!(i == a || i == b);
                match op.recv(&rx) {
                    Ok(v) => seen.got(v),
                    Err(_) => break ended.check("blocking select"),
                }
            }));
        }
        // Select with tiny timeouts, recv twice on `rx`.
        {
            let (rx, idle_rx, seen, ended) =
                (rx.clone(), idle_rx.clone(), seen.clone(), ended.clone());
            rs.push(std::thread::spawn(move || {
                let mut i = 0u32;
                loop {
                    i = i.wrapping_add(1);
                    let mut sel = Select::new_biased();
                    sel.recv(&idle_rx);
                    sel.recv(&rx);
                    sel.recv(&rx);
                    let t = Duration::from_micros(u64::from(i % 4) * 10);
                    // A timeout: next round.
                    if let Ok(op) = sel.select_timeout(t) {
                        assert_ne!(op.index(), 0, "the idle channel was selected");
                        match op.recv(&rx) {
                            Ok(v) => seen.got(v),
                            Err(_) => break ended.check("select_timeout"),
                        }
                    }
                }
            }));
        }
        // Async select in a task, and a `select!` in a fiber.
        let task = {
            let (rx, idle_rx, seen, ended) =
                (rx.clone(), idle_rx.clone(), seen.clone(), ended.clone());
            rt.spawn(async move {
                loop {
                    let mut sel = Select::new();
                    sel.recv(&rx);
                    sel.recv(&idle_rx);
                    sel.recv(&rx);
                    let op = sel.select_async().await;
                    assert_ne!(op.index(), 1, "the idle channel was selected");
                    match op.recv(&rx) {
                        Ok(v) => seen.got(v),
                        Err(_) => break ended.check("select_async"),
                    }
                }
            })
        };
        let fib = {
            let (rx, idle_rx, seen, ended) =
                (rx.clone(), idle_rx.clone(), seen.clone(), ended.clone());
            fiber_on(&rt, move || loop {
                let done = weft::select! {
                    recv(rx) -> r => match r {
                        Ok(v) => { seen.got(v); false }
                        Err(_) => true,
                    },
                    recv(rx) -> r => match r {
                        Ok(v) => { seen.got(v); false }
                        Err(_) => true,
                    },
                    recv(idle_rx) -> _r => panic!("the idle channel was selected"),
                };
                if done {
                    break ended.check("select! in a fiber");
                }
            })
        };
        let what = format!("select cap {cap:?} round {round}");
        finish_round(r, cap, rs, [task, fib], &what);
        drop(idle_tx);
    }
}

#[test]
fn select_receivers_retry_bounded1() {
    watchdog(60, || select_receivers_retry(Some(1), 5, 1500));
}

#[test]
fn select_receivers_retry_unbounded() {
    watchdog(60, || select_receivers_retry(None, 4, 1500));
}

// ---------------------------------------------------------------------------------
// 3. recv_timeout's withdrawal: the value handed over after the last poll is kept.
// ---------------------------------------------------------------------------------

/// `recv_timeout` receivers with zero and tiny timeouts (each one registers, is
/// polled a last time and withdraws: the window the change is about) race fast
/// `try_send`s, `send_blocking` and `send_timeout` on `bounded(cap)`, while `len()` is
/// sampled. No receive future is dropped and no select is used, so no value may go
/// back to the front: `len() <= cap` throughout, and after the run every value sent
/// was received exactly once or is still buffered.
fn withdraw_len(cap: usize, trials: usize) {
    let mut max = 0;
    for trial in 0..trials {
        let (tx, rx) = chan::bounded::<usize>(cap);
        let per = 4000;
        let senders = 3;
        let n = senders * per;
        let seen = Seen::new(n);
        let sent = Sent::new(n);
        let stop = Arc::new(AtomicBool::new(false));
        let mut hs = Vec::new();
        for s in 0..senders {
            hs.push(sender_thread(
                tx.clone(),
                s * per,
                (s + 1) * per,
                if s == 0 { 0 } else { s + trial },
                sent.clone(),
            ));
        }
        let mut rs = Vec::new();
        for k in 0..2u64 {
            let (rx, seen, stop) = (rx.clone(), seen.clone(), stop.clone());
            rs.push(std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(SeqCst) {
                    i += 1;
                    let t = Duration::from_nanos((i + k) % 3 * 700);
                    if let Ok(v) = rx.recv_timeout(t) {
                        seen.got(v);
                    }
                }
            }));
        }
        let t0 = Instant::now();
        while hs.iter().any(|h| !h.is_finished()) {
            max = max.max(rx.len());
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "hang: senders did not finish"
            );
        }
        for h in hs {
            h.join().unwrap();
        }
        stop.store(true, SeqCst);
        for h in rs {
            h.join().unwrap();
        }
        let len = rx.len();
        assert!(len <= cap, "quiescent len {len} > cap {cap}");
        let mut left = 0;
        while let Ok(v) = rx.try_recv() {
            seen.got(v);
            left += 1;
        }
        assert_eq!(left, len, "len() disagrees with what was drained");
        seen.check(&sent.get(), &format!("withdraw cap {cap} trial {trial}"));
    }
    assert!(
        max <= cap,
        "len() {max} > cap {cap} with only recv_timeout receivers"
    );
}

#[test]
fn recv_timeout_withdraw_keeps_len_within_cap_bounded1() {
    watchdog(60, || withdraw_len(1, 4));
}

#[test]
fn recv_timeout_withdraw_keeps_len_within_cap_bounded2() {
    watchdog(60, || withdraw_len(2, 4));
}

/// recv_timeout with tiny timeouts racing `try_send`s and a close (by the sender or by
/// another receiver) on every flavour: values buffered at the close are all received
/// before anyone sees `Disconnected`, and the channel stays disconnected after. A
/// value kept by a withdrawal must also be counted as taken: otherwise the closed
/// channel never looks drained and these receivers spin on `Timeout` for ever.
#[test]
fn recv_timeout_vs_close_drains_then_disconnects() {
    watchdog(60, || {
        let mut rng = Rng::new(seed());
        let t0 = Instant::now();
        let mut trials = 0;
        while t0.elapsed() < Duration::from_millis(1500) || trials < 20 {
            trials += 1;
            let cap = match trials % 4 {
                0 => Some(0),
                1 => Some(1),
                2 => Some(3),
                _ => None,
            };
            let (tx, rx) = make::<usize>(cap);
            let per = 200;
            let n = 2 * per;
            let seen = Seen::new(n);
            let sent = Sent::new(n);
            let done_rx = Arc::new(AtomicUsize::new(0));
            let mut rs = Vec::new();
            for k in 0..2usize {
                let (rx, seen, done_rx) = (rx.clone(), seen.clone(), done_rx.clone());
                rs.push(std::thread::spawn(move || {
                    let t1 = Instant::now();
                    let mut i = k;
                    loop {
                        i += 1;
                        let t = Duration::from_nanos((i % 3) as u64 * 900);
                        match rx.recv_timeout(t) {
                            Ok(v) => seen.got(v),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                        assert!(
                            t1.elapsed() < Duration::from_secs(20),
                            "hang: a closed channel never reported Disconnected \
                             (len {})",
                            rx.len()
                        );
                    }
                    done_rx.fetch_add(1, SeqCst);
                    assert_stays_disconnected(&rx);
                }));
            }
            let close_at = rng.below(per as u64) as usize;
            let mut hs = Vec::new();
            for s in 0..2usize {
                let (tx, sent) = (tx.clone(), sent.clone());
                hs.push(std::thread::spawn(move || {
                    for v in s * per..(s + 1) * per {
                        if s == 0 && v == close_at {
                            tx.close();
                        }
                        let r = if s == 0 {
                            tx.try_send(v).is_ok()
                        } else {
                            tx.send_timeout(v, Duration::from_micros(50)).is_ok()
                        };
                        if r {
                            sent.ok(v);
                        }
                    }
                }));
            }
            for h in hs {
                h.join().unwrap();
            }
            // The close by a receiver, when the sender's came after all values.
            rx.close();
            drop(tx);
            for h in rs {
                h.join().unwrap();
            }
            assert_eq!(done_rx.load(SeqCst), 2);
            seen.check(&sent.get(), &format!("close cap {cap:?} trial {trials}"));
        }
    });
}

// ---------------------------------------------------------------------------------
// 4. Rendezvous: recv_timeout in fibers that are aborted; the commit holds.
// ---------------------------------------------------------------------------------

/// bounded(0): fibers receive with `recv_timeout` (tiny and longer timeouts) and log
/// each value before their next wait; they are aborted at random moments. Senders
/// (threads: `send_blocking`, `send_timeout`) count their successes. The rendezvous
/// commit: a send that returned `Ok` delivered its value to a receive that returned
/// it, so every value sent is in a fiber's log (or the plain receiver's), exactly once.
#[test]
fn rendezvous_recv_timeout_fibers_aborted_keep_the_commit() {
    watchdog(60, || {
        let rt = rt2();
        let mut rng = Rng::new(seed());
        for round in 0..6 {
            let (tx, rx) = chan::bounded::<usize>(0);
            let per = 600;
            let n = 2 * per;
            let seen = Seen::new(n);
            let sent = Sent::new(n);
            let mut fibs = Vec::new();
            for k in 0..4u64 {
                let (rx, seen) = (rx.clone(), seen.clone());
                fibs.push(fiber_on(&rt, move || {
                    let mut i = k;
                    loop {
                        i += 1;
                        let t = match i % 3 {
                            0 => Duration::ZERO,
                            1 => Duration::from_micros(20),
                            _ => Duration::from_millis(2),
                        };
                        match rx.recv_timeout(t) {
                            Ok(v) => seen.got(v),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    }
                }));
            }
            let mut hs = Vec::new();
            for s in 0..2usize {
                let (tx, sent) = (tx.clone(), sent.clone());
                hs.push(std::thread::spawn(move || {
                    for v in s * per..(s + 1) * per {
                        let ok = if s == 0 {
                            tx.send_blocking(v).is_ok()
                        } else {
                            tx.send_timeout(v, Duration::from_micros(200)).is_ok()
                        };
                        if ok {
                            sent.ok(v);
                        }
                    }
                }));
            }
            // Abort fibers at random moments; a plain receiver keeps the senders going.
            let plain = {
                let (rx, seen) = (rx.clone(), seen.clone());
                std::thread::spawn(move || {
                    while let Ok(v) = rx.recv_blocking() {
                        seen.got(v);
                    }
                })
            };
            let mut aborted = 0;
            for f in &fibs {
                std::thread::sleep(Duration::from_micros(rng.below(3000)));
                f.abort();
                aborted += 1;
            }
            for h in hs {
                h.join().unwrap();
            }
            drop(tx);
            plain.join().unwrap();
            for f in fibs {
                // Aborted: cancelled, or finished if the close came first.
                let _ = join_within(f, 20);
            }
            assert_eq!(aborted, 4);
            seen.check(&sent.get(), &format!("rendezvous round {round}"));
        }
    });
}

// ---------------------------------------------------------------------------------
// 5. Dropped receive futures and runtime drop beside the retry.
// ---------------------------------------------------------------------------------

/// Async receives dropped after 0..3 polls (boxed and moved between polls), on a
/// runtime, beside `try_recv` spinners and `recv_timeout` receivers, with fast
/// senders. Values given back by the dropped futures must not be lost or doubled.
#[test]
fn dropped_recv_futures_beside_retry_and_withdraw() {
    watchdog(60, || {
        for cap in [Some(1), Some(4), None] {
            let rt = rt2();
            let (tx, rx) = make::<usize>(cap);
            let per = 2000;
            let n = 2 * per;
            let seen = Seen::new(n);
            let sent = Sent::new(n);
            let mut tasks = Vec::new();
            for k in 0..2u64 {
                let (rx, seen) = (rx.clone(), seen.clone());
                tasks.push(rt.spawn(async move {
                    let mut r = Rng::new(seed() ^ k);
                    loop {
                        // Boxed by `drop_after`; it moves with the outer future.
                        match drop_after(r.below(4), rx.recv()).await {
                            Some(Ok(v)) => seen.got(v),
                            Some(Err(_)) => break,
                            None => {}
                        }
                    }
                }));
            }
            let rs = vec![
                try_recv_spinner(
                    rx.clone(),
                    seen.clone(),
                    Ended(Arc::new(AtomicBool::new(true))),
                ),
                {
                    let (rx, seen) = (rx.clone(), seen.clone());
                    std::thread::spawn(move || loop {
                        match rx.recv_timeout(Duration::from_micros(5)) {
                            Ok(v) => seen.got(v),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    })
                },
            ];
            let hs: Vec<_> = (0..2)
                .map(|s| sender_thread(tx.clone(), s * per, (s + 1) * per, s, sent.clone()))
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            drop(tx);
            for h in rs {
                h.join().unwrap();
            }
            for t in tasks {
                join_within(t, 20).unwrap();
            }
            seen.check(&sent.get(), &format!("dropped futures cap {cap:?}"));
        }
    });
}

/// Fibers and tasks wait in `recv_timeout`/`recv` (long timeouts) when the runtime is
/// dropped; senders keep sending (fast and blocking) meanwhile. Whatever was handed to
/// a waiter that the drop unwinds goes back: a plain thread then receives every value
/// sent, exactly once.
#[test]
fn runtime_dropped_mid_wait() {
    watchdog(60, || {
        for cap in [Some(0), Some(1), Some(2), None] {
            let rt = rt2();
            let (tx, rx) = make::<usize>(cap);
            let per = 3000;
            let n = 2 * per;
            let seen = Seen::new(n);
            let sent = Sent::new(n);
            for _ in 0..3 {
                let (rx, seen) = (rx.clone(), seen.clone());
                drop(fiber_on(&rt, move || {
                    while let Ok(v) = rx.recv_timeout(Duration::from_secs(30)) {
                        seen.got(v);
                    }
                }));
            }
            {
                let (rx, seen) = (rx.clone(), seen.clone());
                drop(rt.spawn(async move {
                    while let Ok(v) = rx.recv().await {
                        seen.got(v);
                    }
                }));
            }
            let hs: Vec<_> = (0..2)
                .map(|s| sender_thread(tx.clone(), s * per, (s + 1) * per, s, sent.clone()))
                .collect();
            std::thread::sleep(Duration::from_millis(5));
            drop(rt);
            // The plain receiver drains the rest (the senders may block until it runs).
            let plain = {
                let (rx, seen) = (rx.clone(), seen.clone());
                std::thread::spawn(move || {
                    while let Ok(v) = rx.recv_blocking() {
                        seen.got(v);
                    }
                })
            };
            for h in hs {
                h.join().unwrap();
            }
            drop(tx);
            plain.join().unwrap();
            drop(rx);
            seen.check(&sent.get(), &format!("runtime drop cap {cap:?}"));
        }
    });
}

// ---------------------------------------------------------------------------------
// 6. Many stale fast operations: the retry's race, made likely by preemption.
// ---------------------------------------------------------------------------------

/// More spinning fast senders and receivers than cores, so some are always preempted
/// between reading `slow` and touching the buffer (stale), beside plain receivers that
/// wait for good (`recv_blocking` threads, async tasks): the race where a settle
/// claims a waiting receiver and a stale fast receive takes the value first. A claimed
/// receiver left unwoken is lost for good (off the list: the close cannot reach it),
/// so the run ends with a close and every waiting receiver must return.
fn many_stale_fast_ops(cap: Option<usize>, run: Duration) {
    let rt = rt2();
    let (tx, rx) = make::<usize>(cap);
    let ended = Ended::new();
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut hs = Vec::new();
    for _ in 0..5 {
        let (tx, stop, sent) = (tx.clone(), stop.clone(), sent.clone());
        hs.push(std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                if tx.try_send(1).is_ok() {
                    sent.fetch_add(1, SeqCst);
                }
            }
        }));
    }
    let mut rs = Vec::new();
    for _ in 0..4 {
        let (rx, received) = (rx.clone(), received.clone());
        rs.push(std::thread::spawn(move || loop {
            match rx.try_recv() {
                Ok(_) => {
                    received.fetch_add(1, SeqCst);
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => break,
            }
        }));
    }
    for _ in 0..3 {
        let (rx, received, ended) = (rx.clone(), received.clone(), ended.clone());
        rs.push(std::thread::spawn(move || {
            while rx.recv_blocking().is_ok() {
                received.fetch_add(1, SeqCst);
            }
            ended.check("recv_blocking");
        }));
    }
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (rx, received, ended) = (rx.clone(), received.clone(), ended.clone());
        tasks.push(rt.spawn(async move {
            while rx.recv().await.is_ok() {
                received.fetch_add(1, SeqCst);
            }
            ended.check("async recv");
        }));
    }
    std::thread::sleep(run);
    stop.store(true, SeqCst);
    for h in hs {
        h.join().unwrap();
    }
    ended.set();
    drop(tx);
    for h in rs {
        h.join().unwrap();
    }
    for t in tasks {
        join_within(t, 20).unwrap();
    }
    assert_eq!(
        received.load(SeqCst),
        sent.load(SeqCst),
        "values lost or doubled"
    );
    assert_stays_disconnected(&rx);
}

#[test]
fn many_stale_fast_ops_bounded1() {
    watchdog(30, || {
        many_stale_fast_ops(Some(1), Duration::from_millis(1200))
    });
}

#[test]
fn many_stale_fast_ops_unbounded() {
    watchdog(30, || many_stale_fast_ops(None, Duration::from_millis(800)));
}

/// Many stale fast senders against `recv_timeout(0)` receivers on `bounded(1)`: each
/// receive registers, polls a last time and withdraws while senders hand values over
/// through the lock; a value handed over after the last poll must be kept (given back
/// to the front, it joins the value a stale fast send puts in the slot: two values in
/// a channel of capacity 1). `len()` sampled throughout.
#[test]
fn zero_timeouts_against_stale_fast_senders_len() {
    let max = watchdog(30, || {
        let (tx, rx) = chan::bounded::<u32>(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut hs = Vec::new();
        for _ in 0..8 {
            let (tx, stop) = (tx.clone(), stop.clone());
            hs.push(std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    let _ = tx.try_send(0);
                }
            }));
        }
        for k in 0..3u64 {
            let (rx, stop) = (rx.clone(), stop.clone());
            hs.push(std::thread::spawn(move || {
                let mut i = k;
                while !stop.load(SeqCst) {
                    i += 1;
                    let _ = rx.recv_timeout(Duration::from_nanos(i % 2 * 300));
                }
            }));
        }
        let mut max = 0;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(1500) && max <= 1 {
            max = max.max(rx.len());
        }
        stop.store(true, SeqCst);
        for h in hs {
            h.join().unwrap();
        }
        let len = rx.len();
        assert!(len <= 1, "quiescent len {len} > cap 1");
        max
    });
    assert!(
        max <= 1,
        "len() {max} > cap 1 with only recv_timeout receivers"
    );
}

/// bounded(0) between plain threads: senders (`send_blocking`, `send_timeout`) hand
/// their values straight to a receiver in `recv_timeout` with zero and tiny timeouts,
/// which looks at `len()` after each call.
/// With no receive dropped and no select, nothing may ever sit in the channel: a value
/// handed over after a receive's last poll is kept by it (given back, it sat in
/// `front`: `len() == 1` on a channel of capacity 0). Exactly once, too.
#[test]
fn rendezvous_zero_timeouts_never_buffer() {
    let (max, seen, sent) = watchdog(30, || {
        let (tx, rx) = chan::bounded::<usize>(0);
        let per = 20_000;
        let n = 3 * per;
        let seen = Seen::new(n);
        let sent = Sent::new(n);
        let stop = Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..3)
            .map(|s| {
                let (tx, sent, stop) = (tx.clone(), sent.clone(), stop.clone());
                std::thread::spawn(move || {
                    for v in s * per..(s + 1) * per {
                        if stop.load(SeqCst) {
                            break;
                        }
                        let ok = if s == 0 {
                            tx.send_blocking(v).is_ok()
                        } else {
                            tx.send_timeout(v, Duration::from_micros(s as u64 * 5))
                                .is_ok()
                        };
                        if ok {
                            sent.ok(v);
                        }
                    }
                })
            })
            .collect();
        // One receiver: a value given back could go to no other receiver, so it would
        // sit in the channel, where the receiver itself looks right after.
        let rs: Vec<_> = (0..1u64)
            .map(|k| {
                let (rx, seen) = (rx.clone(), seen.clone());
                std::thread::spawn(move || {
                    let mut i = k;
                    let mut max = 0;
                    loop {
                        i += 1;
                        match rx.recv_timeout(Duration::from_nanos(i % 3 * 400)) {
                            Ok(v) => seen.got(v),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                        max = max.max(rx.len());
                    }
                    max
                })
            })
            .collect();
        let mut max = 0;
        let t0 = Instant::now();
        while hs.iter().any(|h| !h.is_finished()) {
            max = max.max(rx.len());
            if t0.elapsed() > Duration::from_millis(1500) {
                stop.store(true, SeqCst);
            }
        }
        for h in hs {
            h.join().unwrap();
        }
        drop(tx);
        for h in rs {
            max = max.max(h.join().unwrap());
        }
        (max, seen, sent)
    });
    seen.check(&sent.get(), "rendezvous zero timeouts");
    assert_eq!(max, 0, "len() {max} on a rendezvous channel");
}

// ---------------------------------------------------------------------------------
// 7. Selects over two channels mixed with recv_timeout receivers on each.
// ---------------------------------------------------------------------------------

/// Receives from whichever of `chans` (not yet disconnected) a select picks, until
/// all are disconnected; `timeout`: the select's, `None` to block.
fn select_loop(chans: &[Receiver<usize>], seen: &Seen, ended: &Ended, timeout: Option<u64>) {
    let mut done = vec![false; chans.len()];
    let mut i = 0u64;
    while done.iter().any(|d| !d) {
        i += 1;
        let mut sel = Select::new();
        let mut map = Vec::new();
        for (k, rx) in chans.iter().enumerate() {
            if !done[k] {
                sel.recv(rx);
                map.push(k);
            }
        }
        let op = match timeout {
            None => sel.select(),
            Some(us) => match sel.select_timeout(Duration::from_micros(i % 2 * us)) {
                Ok(op) => op,
                Err(_) => continue,
            },
        };
        let k = map[op.index()];
        match op.recv(&chans[k]) {
            Ok(v) => seen.got(v),
            Err(_) => {
                ended.check("select over two channels");
                done[k] = true;
            }
        }
    }
}

/// Two `bounded(cap)` channels; receivers: a blocking select over both, a select with
/// tiny timeouts over both, an async task's select over both, and `recv_timeout`
/// receivers (zero and tiny timeouts) on each; senders: fast `try_send` and
/// `send_blocking` on each. Every selected operation is performed, nothing dropped:
/// `len() <= cap` on both throughout, exactly once, and every receiver ends at the close.
fn selects_mixed_with_recv_timeout(cap: usize, rounds: usize, per: usize) {
    let rt = rt2();
    for round in 0..rounds {
        let (tx_a, rx_a) = chan::bounded::<usize>(cap);
        let (tx_b, rx_b) = chan::bounded::<usize>(cap);
        let n = 4 * per;
        let seen = Seen::new(n);
        let sent = Sent::new(n);
        let ended = Ended::new();
        let mut hs = Vec::new();
        for s in 0..4 {
            let tx = if s % 2 == 0 {
                tx_a.clone()
            } else {
                tx_b.clone()
            };
            hs.push(sender_thread(
                tx,
                s * per,
                (s + 1) * per,
                s / 2 + round,
                sent.clone(),
            ));
        }
        let both = vec![rx_a.clone(), rx_b.clone()];
        let mut rs = Vec::new();
        for timeout in [None, Some(15)] {
            let (both, seen, ended) = (both.clone(), seen.clone(), ended.clone());
            rs.push(std::thread::spawn(move || {
                select_loop(&both, &seen, &ended, timeout)
            }));
        }
        for rx in [rx_a.clone(), rx_b.clone()] {
            let (seen, ended) = (seen.clone(), ended.clone());
            rs.push(std::thread::spawn(move || {
                let mut i = 0u64;
                loop {
                    i += 1;
                    match rx.recv_timeout(Duration::from_nanos(i % 3 * 600)) {
                        Ok(v) => seen.got(v),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                ended.check("recv_timeout");
            }));
        }
        let task = {
            let (both, seen, ended) = (both.clone(), seen.clone(), ended.clone());
            rt.spawn(async move {
                let mut done = [false; 2];
                while done.iter().any(|d| !d) {
                    let mut sel = Select::new();
                    let mut map = Vec::new();
                    for (k, rx) in both.iter().enumerate() {
                        if !done[k] {
                            sel.recv(rx);
                            map.push(k);
                        }
                    }
                    let op = sel.select_async().await;
                    let k = map[op.index()];
                    match op.recv(&both[k]) {
                        Ok(v) => seen.got(v),
                        Err(_) => {
                            ended.check("select_async over two channels");
                            done[k] = true;
                        }
                    }
                }
            })
        };
        let t0 = Instant::now();
        let mut max = 0;
        while hs.iter().any(|h| !h.is_finished()) {
            max = max.max(rx_a.len()).max(rx_b.len());
            assert!(t0.elapsed() < Duration::from_secs(20), "hang: senders");
        }
        assert!(max <= cap, "len() {max} > cap {cap}");
        for h in hs {
            h.join().unwrap();
        }
        ended.set();
        drop((tx_a, tx_b));
        for h in rs {
            h.join().unwrap();
        }
        join_within(task, 20).unwrap();
        seen.check(
            &sent.get(),
            &format!("two channels cap {cap} round {round}"),
        );
        assert_stays_disconnected(&rx_a);
        assert_stays_disconnected(&rx_b);
    }
}

#[test]
fn selects_mixed_with_recv_timeout_bounded1() {
    watchdog(60, || selects_mixed_with_recv_timeout(1, 4, 1000));
}

#[test]
fn selects_mixed_with_recv_timeout_bounded3() {
    watchdog(60, || selects_mixed_with_recv_timeout(3, 3, 1000));
}

// ---------------------------------------------------------------------------------
// 8. A panicking waker in a batch of wakes.
// ---------------------------------------------------------------------------------

/// Two receivers wait: first an async receive whose waker panics, then a thread in
/// `recv_blocking`. The close wakes both in one batch after the lock; the first wake
/// panics (in the closer). The second waiter must still wake and see `Disconnected`
/// (a batch that stopped at the panic dropped the later wakers unwoken: that receiver
/// slept for ever, off every list; fixed in `WakeBatch::flush`).
#[test]
fn panicking_waker_in_a_close_batch_leaves_no_sleeper() {
    use std::future::Future;
    use std::task::Context;
    watchdog(30, || {
        let (tx, rx) = chan::bounded::<u32>(1);
        let armed = Arc::new(AtomicBool::new(true));
        let w = panicking_waker(armed.clone());
        let mut f = Box::pin(rx.recv());
        assert!(f.as_mut().poll(&mut Context::from_waker(&w)).is_pending());
        let rx2 = rx.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            let r = rx2.recv_blocking();
            let _ = done_tx.send(r);
        });
        // Let the thread register behind the future (it spins a while first).
        std::thread::sleep(Duration::from_millis(100));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tx.close()));
        armed.store(false, SeqCst);
        assert!(r.is_err(), "the first wake of the batch did not panic");
        let got = done_rx.recv_timeout(Duration::from_secs(3));
        assert_eq!(
            got,
            Ok(Err(chan::RecvError)),
            "the second waiter of the close's batch was never woken"
        );
        h.join().unwrap();
        drop(f);
    });
}

// ---------------------------------------------------------------------------------
// 9. Boxed receive futures moved between threads (and wakers) while they wait.
// ---------------------------------------------------------------------------------

/// A thread starts boxed receives (one poll, its own waker) and hands each, still
/// waiting, to a second thread, which polls it with another waker until it completes
/// or drops it after a few polls; fast senders and a `try_recv` spinner race them, and
/// a `recv_timeout` receiver withdraws beside them. Every flavour; exactly once (a
/// value given back by a dropped future is received by someone else).
#[test]
fn boxed_recv_futures_moved_between_threads() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    watchdog(60, || {
        for cap in [Some(0), Some(1), Some(2), None] {
            let (tx, rx) = make::<usize>(cap);
            let per = 1500;
            let n = 2 * per;
            let seen = Seen::new(n);
            let sent = Sent::new(n);
            let ended = Ended::new();
            let stop = Arc::new(AtomicBool::new(false));
            std::thread::scope(|sc| {
                let (fut_tx, fut_rx) = std::sync::mpsc::sync_channel(4);
                let (rx1, seen1, stop1) = (&rx, seen.clone(), stop.clone());
                sc.spawn(move || {
                    let w = Waker::noop();
                    while !stop1.load(SeqCst) {
                        let mut f = Box::pin(rx1.recv());
                        match f.as_mut().poll(&mut Context::from_waker(w)) {
                            Poll::Ready(Ok(v)) => seen1.got(v),
                            Poll::Ready(Err(_)) => break,
                            Poll::Pending => {
                                if fut_tx.send(f).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
                let seen2 = seen.clone();
                sc.spawn(move || {
                    let mut k = 0u64;
                    // A waker of this thread: an unpark.
                    let me = std::thread::current();
                    let waker = Waker::from(Arc::new(Unpark(me)));
                    while let Ok(mut f) = fut_rx.recv() {
                        k += 1;
                        for _ in 0..(k % 4) {
                            match f.as_mut().poll(&mut Context::from_waker(&waker)) {
                                Poll::Ready(Ok(v)) => {
                                    seen2.got(v);
                                    break;
                                }
                                Poll::Ready(Err(_)) => break,
                                Poll::Pending => {
                                    std::thread::park_timeout(Duration::from_micros(50))
                                }
                            }
                        }
                        // Dropped here, done or not (on this thread).
                    }
                });
                let mut rs = vec![try_recv_spinner(rx.clone(), seen.clone(), ended.clone())];
                {
                    let (rx, seen, ended) = (rx.clone(), seen.clone(), ended.clone());
                    rs.push(std::thread::spawn(move || {
                        loop {
                            match rx.recv_timeout(Duration::from_micros(3)) {
                                Ok(v) => seen.got(v),
                                Err(RecvTimeoutError::Timeout) => {}
                                Err(RecvTimeoutError::Disconnected) => break,
                            }
                        }
                        ended.check("recv_timeout");
                    }));
                }
                let hs: Vec<_> = (0..2)
                    .map(|s| sender_thread(tx.clone(), s * per, (s + 1) * per, s + 1, sent.clone()))
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                stop.store(true, SeqCst);
                ended.set();
                rx.close();
                for h in rs {
                    h.join().unwrap();
                }
            });
            seen.check(&sent.get(), &format!("moved futures cap {cap:?}"));
        }
    });
}

/// A waker that unparks a thread.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}
