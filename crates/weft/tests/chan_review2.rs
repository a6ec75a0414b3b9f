//! Review attacks on the lock-free fast path of `weft::chan` (the ring/list buffer, the
//! `slow` flag and its settle, close marking the claim word, and `Select`'s quick
//! pass), from safe code only. Every wait is bounded by a watchdog. Tests that found a
//! real bug assert the correct behaviour and are `#[ignore = "BUG: ..."]`.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use chan_common::{
    check_exactly_once, drop_after, fiber_on, join_within, make, panicking_waker, rt2, seed,
    watchdog, Drops, Msg, Rng,
};
use weft::chan::{self, Select, TryRecvError, TrySendError};

/// Checks a consumer's log: each sender's values arrive in increasing order.
fn check_fifo(log: &[Msg], who: &str) {
    let mut last: Vec<Option<usize>> = Vec::new();
    for &(s, n) in log {
        if last.len() <= s {
            last.resize(s + 1, None);
        }
        if let Some(p) = last[s] {
            assert!(p < n, "{who}: FIFO broken for sender {s}: {p} then {n}");
        }
        last[s] = Some(n);
    }
}

// ---------------------------------------------------------------------------------
// 1. Fast and slow operations mixed, every context, tiny capacities.
// ---------------------------------------------------------------------------------

/// Producers: two threads with `try_send` (spinning on `Full`, no waits), one thread
/// with `send_blocking`, one async task with `send().await`, one fiber with
/// `send_blocking`. Consumers: a thread spinning on `try_recv`, a thread on
/// `recv_blocking`, an async task on `recv().await`, a fiber on `recv_blocking`.
/// Every value exactly once, per-sender FIFO at every consumer, no hang (a lost wakeup
/// would leave a blocking consumer asleep with values buffered).
fn mixed(cap: Option<usize>, per: usize) {
    const SENDERS: usize = 5;
    let rt = Arc::new(rt2());
    let (tx, rx) = make::<Msg>(cap);
    let logs: Vec<Vec<Msg>> = watchdog(40, move || {
        let mut ph = Vec::new();
        for s in 0..2 {
            let tx = tx.clone();
            ph.push(std::thread::spawn(move || {
                for n in 0..per {
                    let mut v = (s, n);
                    loop {
                        match tx.try_send(v) {
                            Ok(()) => break,
                            Err(TrySendError::Full(b)) => {
                                v = b;
                                std::hint::spin_loop();
                            }
                            Err(e) => panic!("try_send: {e:?}"),
                        }
                    }
                }
            }));
        }
        {
            let tx = tx.clone();
            ph.push(std::thread::spawn(move || {
                for n in 0..per {
                    tx.send_blocking((2, n)).unwrap();
                }
            }));
        }
        let mut wh = Vec::new();
        {
            let tx = tx.clone();
            wh.push(rt.spawn(async move {
                for n in 0..per {
                    tx.send((3, n)).await.unwrap();
                }
                Vec::new()
            }));
        }
        {
            let tx = tx.clone();
            wh.push(fiber_on(&rt, move || {
                for n in 0..per {
                    tx.send_blocking((4, n)).unwrap();
                }
                Vec::new()
            }));
        }
        drop(tx);
        let mut ch = Vec::new();
        {
            let rx = rx.clone();
            ch.push(std::thread::spawn(move || {
                let mut log = Vec::new();
                loop {
                    match rx.try_recv() {
                        Ok(v) => log.push(v),
                        Err(TryRecvError::Empty) => std::hint::spin_loop(),
                        Err(TryRecvError::Disconnected) => return log,
                    }
                }
            }));
        }
        {
            let rx = rx.clone();
            ch.push(std::thread::spawn(move || {
                let mut log = Vec::new();
                while let Ok(v) = rx.recv_blocking() {
                    log.push(v);
                }
                log
            }));
        }
        {
            let rx = rx.clone();
            wh.push(rt.spawn(async move {
                let mut log = Vec::new();
                while let Ok(v) = rx.recv().await {
                    log.push(v);
                }
                log
            }));
        }
        {
            let rx = rx.clone();
            wh.push(fiber_on(&rt, move || {
                let mut log = Vec::new();
                while let Ok(v) = rx.recv_blocking() {
                    log.push(v);
                }
                log
            }));
        }
        drop(rx);
        for h in ph {
            h.join().unwrap();
        }
        let mut logs: Vec<Vec<Msg>> = ch.into_iter().map(|h| h.join().unwrap()).collect();
        for h in wh {
            logs.push(join_within(h, 30).unwrap());
        }
        logs
    });
    for (i, l) in logs.iter().enumerate() {
        check_fifo(l, &format!("consumer {i}"));
    }
    check_exactly_once(&logs, SENDERS, per);
}

#[test]
fn mixed_contexts_cap1() {
    mixed(Some(1), 3000);
}

#[test]
fn mixed_contexts_cap2() {
    mixed(Some(2), 3000);
}

#[test]
fn mixed_contexts_unbounded() {
    mixed(None, 5000);
}

#[test]
fn mixed_contexts_rendezvous() {
    mixed(Some(0), 1000);
}

/// List-backed bounded channel (capacity just past the ring's maximum).
#[test]
fn mixed_contexts_list_bounded() {
    mixed(Some((1 << 20) + 1), 3000);
}

// ---------------------------------------------------------------------------------
// 2. Close racing fast sends; receivers dropped while fast sends run.
// ---------------------------------------------------------------------------------

/// Senders `try_send`/`send_blocking` as fast as they can; a receiver drains; the
/// channel is closed at a random moment. Every value a send reported `Ok` is received
/// exactly once; no receiver sees a value after it saw `Disconnected`.
fn close_race(cap: Option<usize>, trials: usize) {
    watchdog(40, move || {
        let mut rng = Rng::new(seed());
        for _ in 0..trials {
            let (tx, rx) = make::<Msg>(cap);
            let go = Arc::new(Barrier::new(5));
            let mut sh = Vec::new();
            for s in 0..2 {
                let tx = tx.clone();
                let go = go.clone();
                sh.push(std::thread::spawn(move || {
                    go.wait();
                    let mut ok = Vec::new();
                    for n in 0.. {
                        let r = if s == 0 {
                            match tx.try_send((s, n)) {
                                Ok(()) => Ok(()),
                                Err(TrySendError::Full(_)) => continue,
                                Err(TrySendError::Disconnected(_)) => Err(()),
                            }
                        } else {
                            tx.send_blocking((s, n)).map_err(|_| ())
                        };
                        match r {
                            Ok(()) => ok.push((s, n)),
                            Err(()) => return ok,
                        }
                    }
                    unreachable!()
                }));
            }
            let mut rh = Vec::new();
            for blocking in [false, true] {
                let rx = rx.clone();
                let go = go.clone();
                rh.push(std::thread::spawn(move || {
                    go.wait();
                    let mut got = Vec::new();
                    loop {
                        let r = if blocking {
                            rx.recv_blocking().map_err(|_| TryRecvError::Disconnected)
                        } else {
                            rx.try_recv()
                        };
                        match r {
                            Ok(v) => got.push(v),
                            Err(TryRecvError::Empty) => std::hint::spin_loop(),
                            Err(TryRecvError::Disconnected) => break,
                        }
                    }
                    // Once disconnected, always: nothing may turn up later.
                    for _ in 0..50 {
                        match rx.try_recv() {
                            Err(TryRecvError::Disconnected) => {}
                            r => panic!("after Disconnected: {r:?}"),
                        }
                    }
                    got
                }));
            }
            go.wait();
            let spins = rng.below(20_000);
            for _ in 0..spins {
                std::hint::spin_loop();
            }
            if rng.below(2) == 0 {
                tx.close();
            } else {
                rx.close();
            }
            drop((tx, rx));
            let sent: Vec<Msg> = sh.into_iter().flat_map(|h| h.join().unwrap()).collect();
            let got: Vec<Vec<Msg>> = rh.into_iter().map(|h| h.join().unwrap()).collect();
            for l in &got {
                check_fifo(l, "receiver");
            }
            let mut all: Vec<Msg> = got.concat();
            let n = all.len();
            all.sort();
            all.dedup();
            assert_eq!(n, all.len(), "a value received twice");
            let mut sent = sent;
            sent.sort();
            // Values sent Ok but never received: only possible if the receivers
            // stopped with values buffered, i.e. saw Disconnected too early.
            assert_eq!(all, sent, "received != sent Ok");
        }
    });
}

#[test]
fn close_races_fast_sends_cap1() {
    close_race(Some(1), 300);
}

#[test]
fn close_races_fast_sends_cap2() {
    close_race(Some(2), 300);
}

#[test]
fn close_races_fast_sends_unbounded() {
    close_race(None, 300);
}

/// Receivers dropped while fast sends run: every value made is dropped exactly once
/// (sends that failed return theirs, which the test drops).
#[test]
fn receivers_dropped_during_fast_sends_drop_each_value_once() {
    watchdog(40, || {
        for (trial, cap) in [Some(1), Some(2), Some(64), None, Some((1 << 20) + 1)]
            .into_iter()
            .cycle()
            .take(150)
            .enumerate()
        {
            const PER: usize = 2000;
            let drops = Drops::new(3 * PER);
            let (tx, rx) = make(cap);
            let mut hs = Vec::new();
            for s in 0..3 {
                let tx = tx.clone();
                let drops = drops.clone();
                hs.push(std::thread::spawn(move || {
                    for n in 0..PER {
                        let v = drops.make(s * PER + n);
                        let r = if s == 2 {
                            tx.send_blocking(v).map_err(|e| e.into_inner())
                        } else {
                            tx.try_send(v).map_err(|e| e.into_inner())
                        };
                        if r.is_err() && tx.is_closed() {
                            // The rest are made and dropped here.
                            for m in n + 1..PER {
                                drop(drops.make(s * PER + m));
                            }
                            return;
                        }
                    }
                }));
            }
            drop(tx);
            let rx2 = rx.clone();
            let taker = std::thread::spawn(move || {
                for _ in 0..(trial % 7) * 10 {
                    let _ = rx2.try_recv();
                }
            });
            for _ in 0..(trial % 5) * 50 {
                let _ = rx.try_recv();
            }
            drop(rx);
            taker.join().unwrap();
            for h in hs {
                h.join().unwrap();
            }
            let bad: Vec<_> = (0..3 * PER)
                .filter(|&i| drops.get(i) != 1)
                .map(|i| (i, drops.get(i)))
                .take(10)
                .collect();
            assert!(bad.is_empty(), "cap {cap:?}: (id, drops) {bad:?}");
        }
    });
}

// ---------------------------------------------------------------------------------
// 3. Select's quick pass.
// ---------------------------------------------------------------------------------

/// A select takes the channel's last value through the quick pass while the channel
/// closes, and its `SelectedOperation` is dropped unperformed (the value goes back).
/// Another receiver that saw `Disconnected` must never get a value afterwards.
///
/// The quick pass pops the value outside the lock and only then counts it as held
/// (`Chan::hold`, after `met_waiter` and a `settle` that takes the lock): in between,
/// the channel looks closed and drained (`in_flight == 0`, buffer empty), so a
/// receiver reports `Disconnected`; then the value is given back to `front` and the
/// same receiver receives it.
#[test]

fn quick_pass_value_given_back_after_disconnected() {
    let failures = watchdog(50, || {
        let mut failures = 0usize;
        let deadline = Instant::now() + Duration::from_secs(8);
        let mut trials = 0;
        while Instant::now() < deadline && failures == 0 {
            trials += 1;
            let (tx, rx) = chan::unbounded::<u32>();
            tx.send_blocking(1).unwrap();
            let go = Arc::new(Barrier::new(3));
            let rx_sel = rx.clone();
            let g1 = go.clone();
            let sel = std::thread::spawn(move || {
                g1.wait();
                let mut s = Select::new();
                s.recv(&rx_sel);
                if let Ok(op) = s.try_select() {
                    // Dropped unperformed: the value goes back.
                    drop(op);
                }
            });
            let g2 = go.clone();
            let rx_b = rx.clone();
            let b = std::thread::spawn(move || {
                g2.wait();
                let mut seen_disc = false;
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_millis(2) {
                    match rx_b.try_recv() {
                        Ok(_) if seen_disc => return true,
                        Ok(_) => return false,
                        Err(TryRecvError::Disconnected) => seen_disc = true,
                        Err(TryRecvError::Empty) => {}
                    }
                }
                false
            });
            go.wait();
            drop(tx);
            sel.join().unwrap();
            if b.join().unwrap() {
                failures += 1;
            }
            drop(rx);
        }
        eprintln!("{trials} trials, {failures} failures");
        failures
    });
    assert_eq!(failures, 0, "a receiver got a value after Disconnected");
}

/// Values arrive on two channels while a consumer selects over both (quick pass and
/// full rounds), sometimes dropping the selected operation unperformed: exactly one
/// operation completes per select, every value is received exactly once.
#[test]
fn select_two_channels_concurrent_arrivals_exactly_once() {
    for cap in [Some(1), Some(2), None] {
        let logs = watchdog(40, move || {
            const PER: usize = 3000;
            let (ta, ra) = make::<Msg>(cap);
            let (tb, rb) = make::<Msg>(cap);
            let mut ph = Vec::new();
            for (s, tx) in [(0, ta.clone()), (1, tb.clone()), (2, ta), (3, tb)] {
                ph.push(std::thread::spawn(move || {
                    for n in 0..PER {
                        if s < 2 {
                            tx.send_blocking((s, n)).unwrap();
                        } else {
                            let mut v = (s, n);
                            while let Err(TrySendError::Full(b)) = tx.try_send(v) {
                                v = b;
                            }
                        }
                    }
                }));
            }
            let mut ch = Vec::new();
            for c in 0..2u64 {
                let (ra, rb) = (ra.clone(), rb.clone());
                ch.push(std::thread::spawn(move || {
                    let mut rng = Rng::new(seed() ^ c);
                    let mut log = Vec::new();
                    let (mut a_open, mut b_open) = (true, true);
                    while a_open || b_open {
                        let mut s = Select::new();
                        let ia = a_open.then(|| s.recv(&ra));
                        let _ib = b_open.then(|| s.recv(&rb));
                        let op = match rng.below(3) {
                            0 => match s.try_select() {
                                Ok(op) => op,
                                Err(_) => continue,
                            },
                            1 => s.select(),
                            // A timeout is no failure: on a loaded machine the producers
                            // may not run for 50 ms. Exactly-once is what is checked.
                            _ => match s.select_timeout(Duration::from_millis(50)) {
                                Ok(op) => op,
                                Err(_) => continue,
                            },
                        };
                        if rng.below(10) == 0 {
                            drop(op); // unperformed: the value goes back
                            continue;
                        }
                        let i = op.index();
                        let r = if Some(i) == ia {
                            op.recv(&ra)
                        } else {
                            op.recv(&rb)
                        };
                        match r {
                            Ok(v) => log.push(v),
                            Err(_) if Some(i) == ia => a_open = false,
                            Err(_) => b_open = false,
                        }
                    }
                    log
                }));
            }
            drop((ra, rb));
            for h in ph {
                h.join().unwrap();
            }
            ch.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        check_exactly_once(&logs, 4, 3000);
    }
}

/// `select!` with `default` and `try_select` on channels fed concurrently: a value
/// buffered before the select starts is never missed (no spurious default), and
/// values are not lost.
#[test]
fn select_default_sees_buffered_value() {
    watchdog(40, || {
        for cap in [Some(1), Some(2), None] {
            let (tx, rx) = make::<u32>(cap);
            let (tx2, rx2) = make::<u32>(cap);
            // Noise on the second channel (keeps its slow flag flipping).
            let noise = std::thread::spawn(move || {
                for i in 0..20_000 {
                    let _ = tx2.try_send(i);
                }
            });
            let drain = std::thread::spawn(move || while rx2.recv_blocking().is_ok() {});
            for i in 0..20_000u32 {
                tx.send_blocking(i).unwrap();
                // Nobody else receives from `rx`: the value is there.
                let got = if i % 2 == 0 {
                    weft::select! {
                        recv(rx) -> v => v.ok(),
                        default => None,
                    }
                } else {
                    let mut s = Select::new();
                    s.recv(&rx);
                    s.try_select().ok().map(|op| op.recv(&rx).unwrap())
                };
                assert_eq!(
                    got,
                    Some(i),
                    "cap {cap:?}: default taken with a value buffered"
                );
            }
            noise.join().unwrap();
            drain.join().unwrap();
        }
    });
}

/// A select over a receive that is always ready and a send that always has room: the
/// quick pass must not favour the receive (it stops at the send and the full round
/// keeps its order).
#[test]
fn select_send_vs_recv_fairness() {
    watchdog(40, || {
        let (ta, ra) = chan::unbounded::<u32>();
        let (tb, rb) = chan::unbounded::<u32>();
        for _ in 0..4000 {
            ta.send_blocking(0).unwrap();
        }
        let mut counts = [0usize; 2];
        for _ in 0..4000 {
            let mut s = Select::new();
            let ir = s.recv(&ra);
            let is = s.send(&tb);
            let op = s.select();
            if op.index() == ir {
                op.recv(&ra).unwrap();
                counts[0] += 1;
            } else {
                assert_eq!(op.index(), is);
                op.send(&tb, 1).unwrap();
                counts[1] += 1;
            }
        }
        assert!(counts[0] > 1200 && counts[1] > 1200, "unfair: {counts:?}");
        drop(rb);
        // Two receives both ready: fair too.
        let (tc, rc) = chan::unbounded::<u32>();
        for _ in 0..4000 {
            ta.send_blocking(0).unwrap();
            tc.send_blocking(0).unwrap();
        }
        let mut counts = [0usize; 2];
        for _ in 0..4000 {
            let mut s = Select::new();
            let ia = s.recv(&ra);
            s.recv(&rc);
            let op = s.select();
            if op.index() == ia {
                op.recv(&ra).unwrap();
                counts[0] += 1;
            } else {
                op.recv(&rc).unwrap();
                counts[1] += 1;
            }
        }
        assert!(counts[0] > 1200 && counts[1] > 1200, "unfair: {counts:?}");
        // Biased: always the first.
        for _ in 0..100 {
            let mut s = Select::new_biased();
            let ia = s.recv(&ra);
            s.recv(&rc);
            let op = s.select();
            assert_eq!(op.index(), ia);
            op.recv(&ra).unwrap();
        }
    });
}

/// `Select::ready` with a single consumer while values arrive concurrently: a
/// receive reported ready must then succeed (no one else takes values).
#[test]
fn select_ready_then_try_recv_succeeds() {
    watchdog(40, || {
        for cap in [Some(1), Some(2), None] {
            const N: u32 = 5000;
            let (ta, ra) = make::<u32>(cap);
            let (tb, rb) = make::<u32>(cap);
            let pa = std::thread::spawn(move || {
                for i in 0..N {
                    ta.send_blocking(i).unwrap();
                }
            });
            let pb = std::thread::spawn(move || {
                for i in 0..N {
                    let mut v = i;
                    while let Err(TrySendError::Full(b)) = tb.try_send(v) {
                        v = b;
                    }
                }
            });
            let (mut na, mut nb) = (0, 0);
            let (mut a_open, mut b_open) = (true, true);
            while a_open || b_open {
                let mut s = Select::new();
                let ia = a_open.then(|| s.recv(&ra));
                b_open.then(|| s.recv(&rb));
                let i = s.ready();
                if Some(i) == ia {
                    match ra.try_recv() {
                        Ok(v) => {
                            assert_eq!(v, na);
                            na += 1;
                        }
                        Err(TryRecvError::Disconnected) => a_open = false,
                        Err(TryRecvError::Empty) => panic!("ready but empty (a)"),
                    }
                } else {
                    match rb.try_recv() {
                        Ok(v) => {
                            assert_eq!(v, nb);
                            nb += 1;
                        }
                        Err(TryRecvError::Disconnected) => b_open = false,
                        Err(TryRecvError::Empty) => panic!("ready but empty (b)"),
                    }
                }
            }
            assert_eq!((na, nb), (N, N));
            pa.join().unwrap();
            pb.join().unwrap();
        }
    });
}

// ---------------------------------------------------------------------------------
// 4. Stream and cancelled receive futures.
// ---------------------------------------------------------------------------------

/// `Stream::poll_next` polled by hand with a no-op waker (so the only way to make
/// progress is to poll again) racing fast sends: every value once, in order per
/// sender, `None` only at the end. A lost signal leaves the observer node registered
/// with values buffered: the spin would never see them (watchdog).
#[test]
fn stream_polled_by_hand_races_fast_sends() {
    use futures_core::Stream;
    for cap in [Some(1), Some(2), None] {
        let logs = watchdog(30, move || {
            const PER: usize = 4000;
            let (tx, rx) = make::<Msg>(cap);
            let mut ph = Vec::new();
            for s in 0..2 {
                let tx = tx.clone();
                ph.push(std::thread::spawn(move || {
                    for n in 0..PER {
                        if s == 0 {
                            let mut v = (s, n);
                            while let Err(TrySendError::Full(b)) = tx.try_send(v) {
                                v = b;
                            }
                        } else {
                            tx.send_blocking((s, n)).unwrap();
                        }
                    }
                }));
            }
            drop(tx);
            let mut streams = Vec::new();
            for _ in 0..2 {
                let mut rx = rx.clone();
                streams.push(std::thread::spawn(move || {
                    let mut cx = Context::from_waker(Waker::noop());
                    let mut log = Vec::new();
                    loop {
                        match Pin::new(&mut rx).poll_next(&mut cx) {
                            Poll::Ready(Some(v)) => log.push(v),
                            Poll::Ready(None) => return log,
                            Poll::Pending => std::thread::yield_now(),
                        }
                    }
                }));
            }
            drop(rx);
            for h in ph {
                h.join().unwrap();
            }
            streams
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        for l in &logs {
            check_fifo(l, "stream");
        }
        check_exactly_once(&logs, 2, 4000);
    }
}

/// Receive futures dropped after a random number of polls (the tokio `select!`
/// pattern) in tasks, while fast sends run: every value exactly once.
#[test]
fn recv_futures_dropped_at_random_points() {
    for cap in [Some(1), Some(2), None] {
        let logs = watchdog(40, move || {
            const PER: usize = 3000;
            let rt = rt2();
            let (tx, rx) = make::<Msg>(cap);
            let mut ph = Vec::new();
            for s in 0..2 {
                let tx = tx.clone();
                ph.push(std::thread::spawn(move || {
                    for n in 0..PER {
                        let mut v = (s, n);
                        loop {
                            match tx.try_send(v) {
                                Ok(()) => break,
                                Err(TrySendError::Full(b)) => {
                                    v = b;
                                    std::thread::yield_now();
                                }
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                    }
                }));
            }
            drop(tx);
            let mut hs = Vec::new();
            for c in 0..3u64 {
                let rx = rx.clone();
                hs.push(rt.spawn(async move {
                    let mut rng = Rng::new(seed() ^ (c << 32));
                    let mut log = Vec::new();
                    loop {
                        match drop_after(rng.below(4), rx.recv()).await {
                            Some(Ok(v)) => log.push(v),
                            Some(Err(_)) => return log,
                            None => {} // dropped mid-wait
                        }
                    }
                }));
            }
            // A thread consumer that drops futures polled by hand.
            let rx2 = rx.clone();
            let th = std::thread::spawn(move || {
                let mut rng = Rng::new(seed());
                let mut log = Vec::new();
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(20) {
                    let mut f = Box::pin(rx2.recv());
                    let mut cx = Context::from_waker(Waker::noop());
                    let mut done = false;
                    for _ in 0..=rng.below(3) {
                        match f.as_mut().poll(&mut cx) {
                            Poll::Ready(Ok(v)) => {
                                log.push(v);
                                done = true;
                                break;
                            }
                            Poll::Ready(Err(_)) => return log,
                            Poll::Pending => std::thread::yield_now(),
                        }
                    }
                    let _ = done;
                }
                log
            });
            drop(rx);
            for h in ph {
                h.join().unwrap();
            }
            let mut logs = vec![th.join().unwrap()];
            for h in hs {
                logs.push(join_within(h, 30).unwrap());
            }
            logs
        });
        // No per-consumer FIFO check here: a value handed to a receive that is then
        // cancelled goes back to the front after another consumer may already have
        // taken later values (as before the change); see the single-consumer test.
        check_exactly_once(&logs, 2, 3000);
    }
}

/// One consumer dropping its receive futures at random points while fast sends run:
/// per-sender FIFO holds (a given-back value is taken first) and nothing is lost.
#[test]
fn single_consumer_cancelled_recvs_keep_fifo() {
    for cap in [Some(1), Some(2), None] {
        let log = watchdog(40, move || {
            const PER: usize = 4000;
            let rt = rt2();
            let (tx, rx) = make::<Msg>(cap);
            let mut ph = Vec::new();
            for s in 0..2 {
                let tx = tx.clone();
                ph.push(std::thread::spawn(move || {
                    for n in 0..PER {
                        if s == 0 {
                            let mut v = (s, n);
                            while let Err(TrySendError::Full(b)) = tx.try_send(v) {
                                v = b;
                                std::thread::yield_now();
                            }
                        } else {
                            tx.send_blocking((s, n)).unwrap();
                        }
                    }
                }));
            }
            drop(tx);
            let h = rt.spawn(async move {
                let mut rng = Rng::new(seed());
                let mut log = Vec::new();
                loop {
                    match drop_after(rng.below(4), rx.recv()).await {
                        Some(Ok(v)) => log.push(v),
                        Some(Err(_)) => return log,
                        None => {}
                    }
                }
            });
            for h in ph {
                h.join().unwrap();
            }
            join_within(h, 30).unwrap()
        });
        check_fifo(&log, "single consumer");
        check_exactly_once(&[log], 2, 4000);
    }
}

// ---------------------------------------------------------------------------------
// 5. Panics during settle.
// ---------------------------------------------------------------------------------

/// A waiting receive whose waker panics; a fast `try_send` meets it and settles (the
/// wake panics in the sender). The value must still reach the receive (or the
/// buffer), exactly once, and the channel must stay usable.
#[test]
fn panicking_waker_in_fast_send_settle() {
    watchdog(30, || {
        for cap in [Some(1), Some(2), None] {
            for _ in 0..200 {
                let (tx, rx) = make::<u32>(cap);
                let armed = Arc::new(AtomicBool::new(true));
                let w = panicking_waker(armed.clone());
                let mut f = Box::pin(rx.recv());
                assert!(f.as_mut().poll(&mut Context::from_waker(&w)).is_pending());
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tx.try_send(7)));
                armed.store(false, SeqCst);
                if let Ok(r) = r {
                    r.unwrap();
                }
                let got = match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(v) => v.ok(),
                    Poll::Pending => None,
                };
                drop(f);
                let rest: Vec<u32> = rx.try_iter().collect();
                let mut all: Vec<u32> = got.into_iter().chain(rest).collect();
                assert_eq!(all, vec![7], "cap {cap:?}");
                tx.send_blocking(8).unwrap();
                all.clear();
                assert_eq!(rx.try_recv(), Ok(8));
                assert_eq!(rx.len(), 0);
            }
        }
    });
}

/// A waiting send (full channel) whose waker panics; a fast `try_recv` frees room,
/// settles, and the wake panics in the receiver. No value is lost or duplicated,
/// order is kept, and the channel stays usable.
#[test]
fn panicking_waker_in_fast_recv_settle() {
    watchdog(30, || {
        for cap in [1usize, 2] {
            for _ in 0..200 {
                let (tx, rx) = chan::bounded::<u32>(cap);
                for i in 0..cap as u32 {
                    tx.try_send(i).unwrap();
                }
                let armed = Arc::new(AtomicBool::new(true));
                let w = panicking_waker(armed.clone());
                let mut f = Box::pin(tx.send(100));
                assert!(f.as_mut().poll(&mut Context::from_waker(&w)).is_pending());
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rx.try_recv()));
                armed.store(false, SeqCst);
                let mut got: Vec<u32> = match r {
                    Ok(Ok(v)) => vec![v],
                    Ok(Err(e)) => panic!("{e:?}"),
                    Err(_) => vec![],
                };
                match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(Ok(())) => {}
                    r => panic!("the send was admitted: {r:?}"),
                }
                drop(f);
                got.extend(rx.try_iter());
                let want: Vec<u32> = (0..cap as u32).chain([100]).collect();
                assert_eq!(got, want, "cap {cap}");
                tx.try_send(5).unwrap();
                assert_eq!(rx.try_recv(), Ok(5));
            }
        }
    });
}

/// A value whose `Drop` panics while the last receiver's drop drains the buffer (ring
/// and list): no value is dropped twice; the rest may leak.
#[test]
fn panicking_value_drop_on_drain_never_double_drops() {
    struct P(usize, Drops, bool);
    impl Drop for P {
        fn drop(&mut self) {
            let c = &self.1 .0[self.0];
            let before = c.fetch_add(1, SeqCst);
            assert_eq!(before, 0, "double drop of {}", self.0);
            if self.2 {
                panic!("value drop panics");
            }
        }
    }
    for cap in [Some(4), None, Some((1 << 20) + 1)] {
        let drops = Drops::new(8);
        let (tx, rx) = make::<P>(cap);
        for i in 0..4 {
            tx.try_send(P(i, drops.clone(), i == 1))
                .map_err(|_| ())
                .unwrap();
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(rx)));
        assert!(r.is_err());
        assert_eq!(drops.get(0), 1);
        assert_eq!(drops.get(1), 1);
        // The channel is closed; the sender still works (fails) and drops cleanly.
        assert!(tx.try_send(P(5, drops.clone(), false)).is_err());
        drop(tx);
        for i in 0..8 {
            assert!(drops.get(i) <= 1);
        }
    }
}

// ---------------------------------------------------------------------------------
// 6. Capacity.
// ---------------------------------------------------------------------------------

fn fill_and_check(cap: usize) {
    let (tx, rx) = chan::bounded::<u32>(cap);
    for i in 0..cap {
        tx.try_send(i as u32)
            .unwrap_or_else(|e| panic!("cap {cap}: send {i}: {e:?}"));
    }
    assert!(
        matches!(tx.try_send(0), Err(TrySendError::Full(_))),
        "cap {cap}"
    );
    assert_eq!(tx.len(), cap);
    assert_eq!(rx.len(), cap);
    assert!(tx.is_full() && rx.is_full());
    assert!(!tx.is_empty());
    assert!(tx.send_timeout(0, Duration::from_millis(1)).is_err());
    assert_eq!(rx.try_recv(), Ok(0));
    assert!(!tx.is_full());
    assert_eq!(tx.len(), cap - 1);
    tx.try_send(1).unwrap();
    assert!(tx.try_send(2).is_err());
    assert_eq!(tx.len(), cap);
    let mut n = 0;
    while rx.try_recv().is_ok() {
        n += 1;
    }
    assert_eq!(n, cap);
    assert!(rx.is_empty() && !rx.is_full());
}

#[test]
fn capacity_extremes() {
    watchdog(40, || {
        fill_and_check(1);
        fill_and_check(3);
        fill_and_check(1 << 20);
        fill_and_check((1 << 20) + 1);
        let (tx, rx) = chan::bounded::<u32>(usize::MAX);
        for i in 0..10_000 {
            tx.try_send(i).unwrap();
        }
        assert!(!tx.is_full());
        assert_eq!(rx.len(), 10_000);
        assert_eq!(tx.capacity(), Some(usize::MAX));
        assert_eq!(rx.try_iter().count(), 10_000);
    });
}

/// Many `try_send` threads race to fill a list-backed bounded channel (no fast sends
/// there) and a ring-backed one: exactly `cap` succeed while nobody receives.
#[test]
fn racing_try_sends_fill_to_exactly_cap() {
    watchdog(40, || {
        for cap in [1usize, 2, 7, (1 << 20) + 1] {
            let trials = if cap > 100 { 1 } else { 200 };
            for _ in 0..trials {
                let (tx, rx) = chan::bounded::<u8>(cap);
                let ok = Arc::new(AtomicUsize::new(0));
                let hs: Vec<_> = (0..3)
                    .map(|_| {
                        let tx = tx.clone();
                        let ok = ok.clone();
                        std::thread::spawn(move || {
                            let mut fails = 0;
                            while fails < 100 {
                                match tx.try_send(0) {
                                    Ok(()) => {
                                        ok.fetch_add(1, SeqCst);
                                    }
                                    Err(_) => fails += 1,
                                }
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
                assert_eq!(ok.load(SeqCst), cap);
                assert_eq!(rx.len(), cap);
                assert!(rx.is_full());
            }
        }
    });
}

/// `len()` sampled while senders (fast and blocking) and receivers race on a tiny
/// channel: never above the capacity; after all stop, `len`/`is_full`/`is_empty`
/// agree with what is drained.
#[test]
fn len_never_exceeds_cap_and_agrees_when_quiescent() {
    for cap in [1usize, 2] {
        let (max, trials) = watchdog(40, move || {
            let mut max = 0;
            let mut trials = 0;
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(3) {
                trials += 1;
                let (tx, rx) = chan::bounded::<u32>(cap);
                let stop = Arc::new(AtomicBool::new(false));
                let mut hs = Vec::new();
                for k in 0..3 {
                    let tx = tx.clone();
                    let stop = stop.clone();
                    hs.push(std::thread::spawn(move || {
                        let mut i = 0;
                        while !stop.load(SeqCst) {
                            i += 1;
                            if k == 0 {
                                let _ = tx.send_timeout(i, Duration::from_millis(1));
                            } else {
                                let _ = tx.try_send(i);
                            }
                        }
                    }));
                }
                {
                    let rx = rx.clone();
                    let stop = stop.clone();
                    hs.push(std::thread::spawn(move || {
                        while !stop.load(SeqCst) {
                            let _ = rx.recv_timeout(Duration::from_millis(1));
                            let _ = rx.try_recv();
                        }
                    }));
                }
                let s0 = Instant::now();
                while s0.elapsed() < Duration::from_millis(20) {
                    max = max.max(tx.len());
                }
                stop.store(true, SeqCst);
                for h in hs {
                    h.join().unwrap();
                }
                let len = rx.len();
                assert!(len <= cap, "quiescent len {len} > cap {cap}");
                assert_eq!(rx.is_full(), len == cap);
                assert_eq!(rx.is_empty(), len == 0);
                let mut n = 0;
                while rx.try_recv().is_ok() {
                    n += 1;
                }
                assert_eq!(n, len, "len disagrees with the values drained");
                // Usable afterwards: exactly cap try_sends succeed.
                for _ in 0..cap {
                    tx.try_send(0).unwrap();
                }
                assert!(tx.try_send(0).is_err());
            }
            (max, trials)
        });
        eprintln!("cap {cap}: max len sampled {max} over {trials} trials");
        assert!(max <= cap, "len() {max} > cap {cap}");
    }
}

/// Many fast senders (some preempted between reading `slow` and claiming a slot), a
/// waiting sender that a receive admits, and receivers: `len()` sampled under the lock
/// must never exceed the capacity. (A stale fast send can fill the ring after the slow
/// path counted room for an admitted sender, whose value then goes to `over`.)
#[test]
fn len_under_many_stale_fast_senders() {
    let max = watchdog(30, || {
        let cap = 1usize;
        let (tx, rx) = chan::bounded::<u32>(cap);
        let stop = Arc::new(AtomicBool::new(false));
        let mut hs = Vec::new();
        for k in 0..8 {
            let tx = tx.clone();
            let stop = stop.clone();
            hs.push(std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    if k < 2 {
                        let _ = tx.send_timeout(1, Duration::from_millis(2));
                    } else {
                        let _ = tx.try_send(0);
                    }
                }
            }));
        }
        for _ in 0..2 {
            let rx = rx.clone();
            let stop = stop.clone();
            hs.push(std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    let _ = rx.recv_timeout(Duration::from_millis(2));
                }
            }));
        }
        let mut max = 0;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2) {
            max = max.max(rx.len());
        }
        stop.store(true, SeqCst);
        for h in hs {
            h.join().unwrap();
        }
        max
    });
    eprintln!("max len {max}");
    assert!(max <= 1, "len() {max} > cap 1");
}
