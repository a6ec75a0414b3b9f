//! `Select`, `select!` and `select_biased!` (issue 15): exactly one operation
//! completes, fairness, bias, timeouts and defaults, reuse, closed channels, sends on
//! rendezvous channels against blocking and selecting receivers, `ready`, async
//! selects, timer receivers, control flow in arm bodies, operand forms.

mod chan_common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chan_common::*;
use weft::chan::{self, Receiver, RecvError, Select, SendError, Sender};

// ---------------------------------------------------------------------------------
// exactly one
// ---------------------------------------------------------------------------------

#[test]
fn exactly_one_ready_receive_completes() {
    let chans: Vec<(Sender<usize>, Receiver<usize>)> = (0..4).map(|_| chan::unbounded()).collect();
    for round in 0..500 {
        for (k, (tx, _)) in chans.iter().enumerate() {
            if tx.is_empty() {
                tx.send_blocking(k).unwrap();
            }
        }
        let mut sel = Select::new();
        for (_, rx) in &chans {
            sel.recv(rx);
        }
        let oper = sel.select();
        let i = oper.index();
        assert_eq!(oper.recv(&chans[i].1), Ok(i));
        let lens: Vec<usize> = chans.iter().map(|(_, rx)| rx.len()).collect();
        let mut want = vec![1; 4];
        want[i] = 0;
        assert_eq!(
            lens, want,
            "round {round}: more than one operation completed"
        );
    }
}

#[test]
fn exactly_one_ready_send_completes() {
    for round in 0..500 {
        let chans: Vec<(Sender<usize>, Receiver<usize>)> =
            (0..4).map(|_| chan::bounded(1)).collect();
        let mut sel = Select::new();
        for (tx, _) in &chans {
            sel.send(tx);
        }
        let oper = sel.select();
        let i = oper.index();
        oper.send(&chans[i].0, i).unwrap();
        let lens: Vec<usize> = chans.iter().map(|(_, rx)| rx.len()).collect();
        let mut want = vec![0; 4];
        want[i] = 1;
        assert_eq!(lens, want, "round {round}");
        // No slot stays held by the losing sends.
        for (k, (tx, _)) in chans.iter().enumerate() {
            if k != i {
                assert!(
                    tx.try_send(k).is_ok(),
                    "round {round}: a losing send held a slot"
                );
            }
        }
    }
}

/// Several threads, a fiber and a task select over two channels of one flavour while
/// senders feed them: every value is received exactly once.
fn concurrent_selects(cap: Option<usize>) {
    watchdog(25, move || {
        const N: u64 = 1500;
        let rt = rt2();
        let (tx1, rx1) = make::<u64>(cap);
        let (tx2, rx2) = make::<u64>(cap);
        let got = Arc::new(Mutex::new(Vec::new()));

        // Receives until both channels are disconnected, removing a closed one.
        fn drain_blocking(rx1: &Receiver<u64>, rx2: &Receiver<u64>) -> Vec<u64> {
            let mut out = vec![];
            let mut sel = Select::new();
            let i1 = sel.recv(rx1);
            let i2 = sel.recv(rx2);
            let mut open = 2;
            while open > 0 {
                let oper = sel.select();
                let i = oper.index();
                let r = if i == i1 {
                    oper.recv(rx1)
                } else {
                    oper.recv(rx2)
                };
                match r {
                    Ok(v) => out.push(v),
                    Err(_) => {
                        sel.remove(i);
                        open -= 1;
                    }
                }
                assert!(i == i1 || i == i2);
            }
            out
        }
        let mut threads = vec![];
        for _ in 0..2 {
            let (rx1, rx2, got) = (rx1.clone(), rx2.clone(), got.clone());
            threads.push(std::thread::spawn(move || {
                let v = drain_blocking(&rx1, &rx2);
                got.lock().unwrap().extend(v);
            }));
        }
        let fiber = {
            let (rx1, rx2, got) = (rx1.clone(), rx2.clone(), got.clone());
            fiber_on(&rt, move || {
                let v = drain_blocking(&rx1, &rx2);
                got.lock().unwrap().extend(v);
            })
        };
        let task = {
            let (rx1, rx2, got) = (rx1.clone(), rx2.clone(), got.clone());
            rt.spawn(async move {
                let mut out = vec![];
                let (mut o1, mut o2) = (true, true);
                while o1 || o2 {
                    let mut sel = Select::new();
                    let i1 = o1.then(|| sel.recv(&rx1));
                    let _i2 = o2.then(|| sel.recv(&rx2));
                    let oper = sel.select_async().await;
                    if Some(oper.index()) == i1 {
                        match oper.recv(&rx1) {
                            Ok(v) => out.push(v),
                            Err(_) => o1 = false,
                        }
                    } else {
                        match oper.recv(&rx2) {
                            Ok(v) => out.push(v),
                            Err(_) => o2 = false,
                        }
                    }
                }
                got.lock().unwrap().extend(out);
            })
        };
        drop((rx1, rx2));

        // Senders: a thread selecting over both, a fiber on one, a task on the other.
        let s0 = {
            let (tx1, tx2) = (tx1.clone(), tx2.clone());
            std::thread::spawn(move || {
                for i in 0..N {
                    weft::select! {
                        send(tx1, i) -> r => r.unwrap(),
                        send(tx2, i) -> r => r.unwrap(),
                    }
                }
            })
        };
        let s1 = {
            let tx1 = tx1.clone();
            fiber_on(&rt, move || {
                for i in N..2 * N {
                    tx1.send_blocking(i).unwrap();
                }
            })
        };
        let s2 = rt.spawn(async move {
            for i in 2 * N..3 * N {
                tx2.send(i).await.unwrap();
            }
        });
        drop(tx1);
        s0.join().unwrap();
        join_within(s1, 20).unwrap();
        join_within(s2, 20).unwrap();
        for t in threads {
            t.join().unwrap();
        }
        join_within(fiber, 20).unwrap();
        join_within(task, 20).unwrap();
        let mut all = std::mem::take(&mut *got.lock().unwrap());
        all.sort_unstable();
        let n = all.len();
        all.dedup();
        assert_eq!(n, all.len(), "cap {cap:?}: a value arrived twice");
        assert_eq!(
            all,
            (0..3 * N).collect::<Vec<_>>(),
            "cap {cap:?}: values lost"
        );
    })
}

#[test]
fn concurrent_selects_receive_each_value_once_rendezvous() {
    concurrent_selects(Some(0));
}

#[test]
fn concurrent_selects_receive_each_value_once_bounded_1() {
    concurrent_selects(Some(1));
}

#[test]
fn concurrent_selects_receive_each_value_once_bounded_16() {
    concurrent_selects(Some(16));
}

#[test]
fn concurrent_selects_receive_each_value_once_unbounded() {
    concurrent_selects(None);
}

// ---------------------------------------------------------------------------------
// fairness and bias
// ---------------------------------------------------------------------------------

#[test]
fn select_is_fair_including_duplicates_of_one_channel() {
    const RUNS: usize = 10_000;
    let (tx1, rx1) = chan::unbounded::<u32>();
    let (tx2, rx2) = chan::unbounded::<u32>();
    let (tx3, rx3) = chan::unbounded::<u32>();
    for _ in 0..RUNS {
        tx1.send_blocking(1).unwrap();
        tx2.send_blocking(2).unwrap();
        tx3.send_blocking(3).unwrap();
    }
    let mut sel = Select::new();
    let ops = [
        sel.recv(&rx1),
        sel.recv(&rx1),
        sel.recv(&rx2),
        sel.recv(&rx3),
    ];
    let rxs = [&rx1, &rx1, &rx2, &rx3];
    let mut wins = [0usize; 4];
    for _ in 0..RUNS {
        let oper = sel.select();
        let k = ops.iter().position(|&i| i == oper.index()).unwrap();
        oper.recv(rxs[k]).unwrap();
        wins[k] += 1;
    }
    // Each of the four ready operations should win about a quarter.
    for (k, &w) in wins.iter().enumerate() {
        assert!(
            (RUNS / 4 * 6 / 10..=RUNS / 4 * 14 / 10).contains(&w),
            "operation {k} won {w} of {RUNS}: {wins:?}"
        );
    }
}

/// The ready operations among empty ones (and one that only a full round can decide, a
/// rendezvous receive with no sender) each win about their share: the quick pass draws
/// its order as it walks it, and finishes the draw before a full round, so no position
/// in the select is favoured (a random rotation, for one, would favour the ready
/// operation after a run of empty ones).
#[test]
fn select_is_fair_among_ready_operations_between_empty_ones() {
    const RUNS: usize = 8000;
    let (_tx0, rx0) = chan::unbounded::<u32>();
    let (tx1, rx1) = chan::unbounded::<u32>();
    let (_tx2, rx2) = chan::unbounded::<u32>();
    let (_tx3, rx3) = chan::bounded::<u32>(0);
    let (tx4, rx4) = chan::unbounded::<u32>();
    for _ in 0..RUNS {
        tx1.send_blocking(1).unwrap();
        tx4.send_blocking(4).unwrap();
    }
    let mut sel = Select::new();
    let ops = [
        sel.recv(&rx0),
        sel.recv(&rx1),
        sel.recv(&rx2),
        sel.recv(&rx3),
        sel.recv(&rx4),
    ];
    let mut wins = [0usize; 2];
    for _ in 0..RUNS {
        let oper = sel.select();
        if oper.index() == ops[1] {
            assert_eq!(oper.recv(&rx1), Ok(1));
            wins[0] += 1;
        } else {
            assert_eq!(
                oper.index(),
                ops[4],
                "an empty channel's operation was selected"
            );
            assert_eq!(oper.recv(&rx4), Ok(4));
            wins[1] += 1;
        }
    }
    for &w in &wins {
        assert!(
            (RUNS / 2 * 8 / 10..=RUNS / 2 * 12 / 10).contains(&w),
            "unfair: {wins:?}"
        );
    }
}

#[test]
fn select_macro_is_fair() {
    const RUNS: usize = 6000;
    let (tx1, rx1) = chan::unbounded::<u32>();
    let (tx2, rx2) = chan::unbounded::<u32>();
    let (tx3, rx3) = chan::bounded::<u32>(RUNS);
    for _ in 0..RUNS {
        tx1.send_blocking(1).unwrap();
        tx2.send_blocking(2).unwrap();
    }
    let mut wins = [0usize; 3];
    for _ in 0..RUNS {
        weft::select! {
            recv(rx1) -> m => { assert_eq!(m, Ok(1)); wins[0] += 1; }
            recv(rx2) -> m => { assert_eq!(m, Ok(2)); wins[1] += 1; }
            send(tx3, 3) -> r => { r.unwrap(); wins[2] += 1; }
        }
    }
    for &w in &wins {
        assert!(
            (RUNS / 3 * 6 / 10..=RUNS / 3 * 14 / 10).contains(&w),
            "unfair: {wins:?}"
        );
    }
    assert_eq!(rx3.len(), wins[2]);
}

#[test]
fn try_select_is_fair() {
    const RUNS: usize = 6000;
    let (tx, rx) = chan::unbounded::<u32>();
    for _ in 0..RUNS {
        tx.send_blocking(0).unwrap();
    }
    let mut sel = Select::new();
    let a = sel.recv(&rx);
    let b = sel.recv(&rx);
    let mut wins = [0usize; 2];
    for _ in 0..RUNS {
        let oper = sel.try_select().unwrap();
        wins[usize::from(oper.index() == b)] += 1;
        assert!(oper.index() == a || oper.index() == b);
        oper.recv(&rx).unwrap();
    }
    assert!(
        wins.iter().all(|&w| w > RUNS / 2 * 6 / 10),
        "unfair: {wins:?}"
    );
}

#[test]
fn select_biased_picks_the_first_ready_arm() {
    let (tx1, rx1) = chan::unbounded::<u32>();
    let (tx2, rx2) = chan::unbounded::<u32>();
    for _ in 0..1000 {
        tx1.send_blocking(1).unwrap();
        tx2.send_blocking(2).unwrap();
    }
    for _ in 0..1000 {
        weft::select_biased! {
            recv(rx1) -> m => assert_eq!(m, Ok(1)),
            recv(rx2) -> _ => panic!("the second arm won while the first was ready"),
        }
    }
    // The first not ready: the second wins.
    for _ in 0..1000 {
        weft::select_biased! {
            recv(rx1) -> _ => panic!("the first arm had nothing"),
            recv(rx2) -> m => assert_eq!(m, Ok(2)),
            default => panic!("the second arm was ready"),
        }
    }
    // Select::new_biased, with a send first.
    let (stx, srx) = chan::unbounded::<u32>();
    tx2.send_blocking(2).unwrap();
    let mut sel = Select::new_biased();
    let s = sel.send(&stx);
    sel.recv(&rx2);
    for _ in 0..100 {
        let oper = sel.select();
        assert_eq!(oper.index(), s);
        oper.send(&stx, 0).unwrap();
    }
    assert_eq!(srx.len(), 100);
}

// ---------------------------------------------------------------------------------
// timeouts, defaults, reuse
// ---------------------------------------------------------------------------------

#[test]
fn try_select_select_timeout_and_deadline_fail_when_nothing_is_ready() {
    let (_tx, rx) = chan::unbounded::<i32>();
    let (_tx0, rx0) = chan::bounded::<i32>(0);
    let mut sel = Select::new();
    sel.recv(&rx);
    sel.recv(&rx0);
    assert!(sel.try_select().is_err());
    let t = Instant::now();
    assert!(sel.select_timeout(Duration::from_millis(30)).is_err());
    let e = t.elapsed();
    assert!(
        e >= Duration::from_millis(29) && e < Duration::from_secs(2),
        "select_timeout(30ms) took {e:?}"
    );
    let t = Instant::now();
    assert!(sel.select_deadline(Instant::now()).is_err());
    assert!(t.elapsed() < Duration::from_millis(500));
}

#[test]
fn default_and_default_timeout_arms() {
    let (tx, rx) = chan::unbounded::<i32>();
    let mut hits = 0;
    weft::select! {
        recv(rx) -> _ => panic!("nothing was sent"),
        default => hits += 1,
    }
    let t = Instant::now();
    weft::select! {
        recv(rx) -> _ => panic!("nothing was sent"),
        default(Duration::from_millis(30)) => hits += 1,
    }
    assert!(
        t.elapsed() >= Duration::from_millis(29),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(hits, 2);
    tx.send_blocking(1).unwrap();
    weft::select! {
        recv(rx) -> m => assert_eq!(m, Ok(1)),
        default => panic!("a ready operation lost to default"),
    }
    let t2 = {
        let tx = tx.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.send_blocking(2).unwrap();
        })
    };
    weft::select! {
        recv(rx) -> m => assert_eq!(m, Ok(2)),
        default(Duration::from_secs(10)) => panic!("timed out although a value came"),
    }
    t2.join().unwrap();
}

#[test]
fn a_select_is_reusable_after_a_failed_try_select_and_a_timeout() {
    watchdog(10, || {
        let (tx, rx) = chan::unbounded::<i32>();
        let (tx0, rx0) = chan::bounded::<i32>(0);
        let mut sel = Select::new();
        let i = sel.recv(&rx);
        let i0 = sel.recv(&rx0);
        assert!(sel.try_select().is_err());
        assert!(sel.select_timeout(Duration::from_millis(10)).is_err());
        assert!(sel.try_ready().is_err());
        assert!(sel.ready_timeout(Duration::from_millis(10)).is_err());
        assert!(sel.try_select().is_err());
        tx.send_blocking(1).unwrap();
        let oper = sel.try_select().unwrap();
        assert_eq!(oper.index(), i);
        assert_eq!(oper.recv(&rx), Ok(1));
        assert!(sel.select_timeout(Duration::from_millis(10)).is_err());
        let t = {
            let tx0 = tx0.clone();
            std::thread::spawn(move || tx0.send_blocking(7))
        };
        let oper = sel.select_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(oper.index(), i0);
        assert_eq!(oper.recv(&rx0), Ok(7));
        assert_eq!(t.join().unwrap(), Ok(()));
        tx.send_blocking(2).unwrap();
        let oper = sel.select();
        assert_eq!(oper.recv(&rx), Ok(2));
        // The clone of a select is a select of its own.
        let mut sel2 = sel.clone();
        tx.send_blocking(3).unwrap();
        assert_eq!(sel2.select().recv(&rx), Ok(3));
        drop(tx0);
    })
}

// ---------------------------------------------------------------------------------
// closed channels
// ---------------------------------------------------------------------------------

#[test]
fn closed_channels_are_selectable_and_return_their_error() {
    watchdog(10, || {
        let never = chan::never::<i32>();
        // Receive side, senders dropped.
        let (tx, rx) = chan::bounded::<i32>(0);
        drop(tx);
        let mut sel = Select::new();
        sel.recv(&never);
        let i = sel.recv(&rx);
        let oper = sel.select();
        assert_eq!(oper.index(), i);
        assert_eq!(oper.recv(&rx), Err(RecvError));
        assert_eq!(
            sel.try_select().map(|o| (o.index(), o.recv(&rx))).ok(),
            Some((i, Err(RecvError)))
        );
        assert_eq!(sel.try_ready(), Ok(i));
        assert_eq!(sel.ready(), i);
        weft::select! {
            recv(never) -> _ => panic!(),
            recv(rx) -> m => assert_eq!(m, Err(RecvError)),
        }
        // Send side, closed by close() while a value is buffered.
        let (tx, rx) = chan::bounded::<i32>(1);
        tx.send_blocking(1).unwrap();
        assert!(rx.close());
        let mut sel = Select::new();
        sel.recv(&never);
        let i = sel.send(&tx);
        let oper = sel
            .select_timeout(Duration::from_secs(5))
            .expect("a closed send is selectable");
        assert_eq!(oper.index(), i);
        assert_eq!(oper.send(&tx, 5), Err(SendError(5)));
        weft::select! {
            send(tx, 6) -> r => assert_eq!(r, Err(SendError(6))),
            default(Duration::from_secs(5)) => panic!("a closed send was not selected"),
        }
        // The receiver still drains the buffered value.
        assert_eq!(rx.try_recv(), Ok(1));
    })
}

/// A select waiting on a channel wakes when it closes.
#[test]
fn a_waiting_select_wakes_when_its_channel_closes() {
    watchdog(10, || {
        let (tx, rx) = chan::bounded::<i32>(0);
        let (_tx2, rx2) = chan::bounded::<i32>(0);
        let t = std::thread::spawn(move || {
            weft::select! {
                recv(rx) -> m => m,
                recv(rx2) -> _ => Ok(-1),
            }
        });
        std::thread::sleep(Duration::from_millis(30));
        drop(tx);
        assert_eq!(t.join().unwrap(), Err(RecvError));
    })
}

// ---------------------------------------------------------------------------------
// sends on rendezvous channels
// ---------------------------------------------------------------------------------

#[test]
fn select_send_on_rendezvous_against_blocking_receivers() {
    watchdog(15, || {
        let rt = rt2();
        const N: u32 = 1500;
        let (tx, rx) = chan::bounded::<u32>(0);
        let never_rx = chan::never::<u32>();
        // A thread, a fiber and a task receive with plain blocking/async receives.
        let r0 = {
            let rx = rx.clone();
            std::thread::spawn(move || rx.iter().collect::<Vec<_>>())
        };
        let r1 = {
            let rx = rx.clone();
            fiber_on(&rt, move || rx.iter().collect::<Vec<_>>())
        };
        let r2 = {
            let rx = rx.clone();
            rt.spawn(async move {
                let mut v = vec![];
                while let Ok(x) = rx.recv().await {
                    v.push(x);
                }
                v
            })
        };
        drop(rx);
        for i in 0..N {
            weft::select! {
                send(tx, i) -> r => r.unwrap(),
                recv(never_rx) -> _ => unreachable!(),
            }
        }
        drop(tx);
        let mut all = r0.join().unwrap();
        all.extend(join_within(r1, 10).unwrap());
        all.extend(join_within(r2, 10).unwrap());
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
    })
}

/// A selecting sender against a selecting receiver (each also waits on another
/// channel that never becomes ready): no deadlock, every value once, in order.
fn select_vs_select(cap: usize) {
    watchdog(15, move || {
        const N: u32 = 2000;
        let (tx, rx) = chan::bounded::<u32>(cap);
        let (_otx, orx) = chan::bounded::<u32>(0);
        let (otx2, _orx2) = chan::bounded::<u32>(0);
        let sender = std::thread::spawn(move || {
            for i in 0..N {
                weft::select! {
                    send(tx, i) -> r => r.unwrap(),
                    recv(orx) -> _ => unreachable!(),
                }
            }
        });
        let mut got = Vec::with_capacity(N as usize);
        for _ in 0..N {
            weft::select! {
                recv(rx) -> m => got.push(m.unwrap()),
                send(otx2, 0) -> _ => unreachable!(),
            }
        }
        sender.join().unwrap();
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "cap {cap}");
    })
}

#[test]
fn select_send_against_select_recv_rendezvous() {
    select_vs_select(0);
}

#[test]
fn select_send_against_select_recv_bounded_1() {
    select_vs_select(1);
}

/// Two threads each select between sending to the other and receiving from it, on
/// rendezvous channels (the classic case where two selects wait for each other).
#[test]
fn two_selects_each_sending_to_the_other() {
    watchdog(15, || {
        const N: u32 = 1000;
        let (ab_tx, ab_rx) = chan::bounded::<u32>(0);
        let (ba_tx, ba_rx) = chan::bounded::<u32>(0);
        fn side(tx: Sender<u32>, rx: Receiver<u32>) -> Vec<u32> {
            let (mut sent, mut got) = (0, vec![]);
            while sent < N || got.len() < N as usize {
                if sent < N {
                    weft::select! {
                        send(tx, sent) -> r => { r.unwrap(); sent += 1; }
                        recv(rx) -> m => got.push(m.unwrap()),
                    }
                } else {
                    got.push(rx.recv_blocking().unwrap());
                }
            }
            got
        }
        let a = std::thread::spawn(move || side(ab_tx, ba_rx));
        let b = side(ba_tx, ab_rx);
        let a = a.join().unwrap();
        assert_eq!(a, (0..N).collect::<Vec<_>>());
        assert_eq!(b, (0..N).collect::<Vec<_>>());
    })
}

/// A fiber selecting to send against an async task selecting to receive, on one
/// worker: each select must let the other run.
#[test]
fn fiber_select_send_against_task_select_async_recv_on_one_worker() {
    watchdog(15, || {
        let rt = weft::Builder::new().worker_threads(1).build().unwrap();
        for cap in [0usize, 1] {
            const N: u32 = 1000;
            let (tx, rx) = chan::bounded::<u32>(cap);
            let f = fiber_on(&rt, move || {
                let never = chan::never::<u32>();
                for i in 0..N {
                    let mut sel = Select::new();
                    let s = sel.send(&tx);
                    sel.recv(&never);
                    let oper = sel.select();
                    assert_eq!(oper.index(), s);
                    oper.send(&tx, i).unwrap();
                }
            });
            let t = rt.spawn(async move {
                let mut got = vec![];
                for _ in 0..N {
                    let mut sel = Select::new();
                    sel.recv(&rx);
                    got.push(sel.select_async().await.recv(&rx).unwrap());
                }
                got
            });
            join_within(f, 10).unwrap();
            assert_eq!(join_within(t, 10).unwrap(), (0..N).collect::<Vec<_>>());
        }
    })
}

// ---------------------------------------------------------------------------------
// selected operations left unperformed
// ---------------------------------------------------------------------------------

#[test]
fn an_unperformed_selected_receive_gives_its_value_back() {
    watchdog(10, || {
        let (tx, rx) = chan::unbounded::<i32>();
        tx.send_blocking(1).unwrap();
        tx.send_blocking(2).unwrap();
        let mut sel = Select::new();
        sel.recv(&rx);
        drop(sel.select());
        assert_eq!(
            rx.try_recv(),
            Ok(1),
            "a dropped selected receive lost its value"
        );
        assert_eq!(rx.try_recv(), Ok(2));

        // Rendezvous: the selected receive paired with a parked sender.
        let (tx, rx) = chan::bounded::<i32>(0);
        let t = std::thread::spawn(move || tx.send_blocking(3));
        let mut sel = Select::new();
        sel.recv(&rx);
        let oper = sel.select_timeout(Duration::from_secs(5)).unwrap();
        drop(oper);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(3),
            "a dropped selected rendezvous receive lost its value"
        );
        assert_eq!(t.join().unwrap(), Ok(()));
    })
}

#[test]
fn an_unperformed_selected_send_releases_what_it_held() {
    watchdog(10, || {
        // A held slot.
        let (tx, rx) = chan::bounded::<i32>(1);
        let mut sel = Select::new();
        sel.send(&tx);
        drop(sel.select());
        assert_eq!(
            tx.try_send(1),
            Ok(()),
            "a dropped selected send kept its slot"
        );
        assert_eq!(rx.try_recv(), Ok(1));
        // A held rendezvous receiver: it must still get the next value.
        let (tx, rx) = chan::bounded::<i32>(0);
        let t = std::thread::spawn(move || rx.recv_timeout(Duration::from_secs(5)));
        let mut sel = Select::new();
        sel.send(&tx);
        let oper = sel.select_timeout(Duration::from_secs(5)).unwrap();
        drop(oper);
        tx.send_timeout(9, Duration::from_secs(5)).unwrap();
        assert_eq!(t.join().unwrap(), Ok(9));
    })
}

#[test]
fn completing_with_the_wrong_end_panics() {
    let (tx, rx) = chan::unbounded::<i32>();
    let (_tx2, rx2) = chan::unbounded::<i32>();
    tx.send_blocking(1).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let oper = sel.select();
    let r = catch_unwind(AssertUnwindSafe(|| oper.recv(&rx2)));
    assert!(r.is_err(), "a receiver that was not selected was accepted");
    assert_eq!(
        rx.try_recv(),
        Ok(1),
        "the value is still there after the panic"
    );
}

// ---------------------------------------------------------------------------------
// ready
// ---------------------------------------------------------------------------------

#[test]
fn ready_try_ready_and_ready_timeout() {
    watchdog(10, || {
        let (tx, rx) = chan::unbounded::<i32>();
        let mut sel = Select::new();
        let i = sel.recv(&rx);
        assert!(sel.try_ready().is_err());
        let t = Instant::now();
        assert!(sel.ready_timeout(Duration::from_millis(20)).is_err());
        assert!(t.elapsed() >= Duration::from_millis(19));
        tx.send_blocking(1).unwrap();
        assert_eq!(sel.try_ready(), Ok(i));
        assert_eq!(sel.ready(), i);
        assert_eq!(rx.len(), 1, "ready performed the operation");
        assert_eq!(rx.try_recv(), Ok(1));

        // ready() wakes when a value arrives later.
        let t = {
            let tx = tx.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                tx.send_blocking(2).unwrap();
            })
        };
        assert_eq!(sel.ready(), i);
        assert_eq!(rx.try_recv(), Ok(2));
        t.join().unwrap();
        let t = {
            let tx = tx.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                tx.send_blocking(3).unwrap();
            })
        };
        assert_eq!(sel.ready_timeout(Duration::from_secs(5)), Ok(i));
        t.join().unwrap();

        // Sends: a full bounded(1) is not ready until a slot frees.
        let (tx, rx) = chan::bounded::<i32>(1);
        tx.send_blocking(0).unwrap();
        let mut sel = Select::new();
        let s = sel.send(&tx);
        assert!(sel.try_ready().is_err());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            rx.recv_blocking()
        });
        assert_eq!(sel.ready(), s);
        assert_eq!(t.join().unwrap(), Ok(0));

        // A rendezvous send is ready while a receiver is parked.
        let (tx, rx) = chan::bounded::<i32>(0);
        let mut sel = Select::new();
        let s = sel.send(&tx);
        assert!(sel.try_ready().is_err());
        let t = std::thread::spawn(move || rx.recv_timeout(Duration::from_secs(5)));
        assert_eq!(sel.ready_timeout(Duration::from_secs(5)), Ok(s));
        tx.send_blocking(4).unwrap();
        assert_eq!(t.join().unwrap(), Ok(4));

        // A rendezvous receive is ready while a sender is parked.
        let (tx, rx) = chan::bounded::<i32>(0);
        let mut sel = Select::new();
        let r = sel.recv(&rx);
        let t = std::thread::spawn(move || tx.send_blocking(5));
        assert_eq!(sel.ready_timeout(Duration::from_secs(5)), Ok(r));
        assert_eq!(rx.recv_blocking(), Ok(5));
        t.join().unwrap().unwrap();
    })
}

// ---------------------------------------------------------------------------------
// async
// ---------------------------------------------------------------------------------

#[test]
fn select_async_in_tasks() {
    watchdog(10, || {
        let rt = rt2();
        let (tx1, rx1) = chan::bounded::<u32>(0);
        let (tx2, rx2) = chan::unbounded::<u32>();
        let h = rt.spawn(async move {
            let mut got = vec![];
            let (mut o1, mut o2) = (true, true);
            while o1 || o2 {
                let mut sel = Select::new();
                let i1 = o1.then(|| sel.recv(&rx1));
                let i2 = o2.then(|| sel.recv(&rx2));
                let fut = sel.select_async();
                is_send(&fut);
                let oper = fut.await;
                if Some(oper.index()) == i1 {
                    match oper.recv(&rx1) {
                        Ok(v) => got.push(v),
                        Err(_) => o1 = false,
                    }
                } else {
                    assert_eq!(Some(oper.index()), i2);
                    match oper.recv(&rx2) {
                        Ok(v) => got.push(v),
                        Err(_) => o2 = false,
                    }
                }
            }
            got
        });
        let t = std::thread::spawn(move || {
            for i in 0..300 {
                tx1.send_blocking(i).unwrap();
            }
        });
        for i in 300..600 {
            tx2.send_blocking(i).unwrap();
        }
        drop(tx2);
        t.join().unwrap();
        let mut got = join_within(h, 5).unwrap();
        got.sort_unstable();
        assert_eq!(got, (0..600).collect::<Vec<_>>());

        // A timer in an async select.
        let start = Instant::now();
        let idx = rt.block_on(async {
            let (_tx, rx) = chan::unbounded::<u32>();
            let timer = chan::after(Duration::from_millis(30));
            let mut sel = Select::new();
            sel.recv(&rx);
            let t = sel.recv(&timer);
            let oper = sel.select_async().await;
            assert_eq!(oper.index(), t);
            let at = oper.recv(&timer).unwrap();
            assert!(at >= start + Duration::from_millis(30));
            oper_index_ok(t)
        });
        assert!(idx);
        assert!(start.elapsed() >= Duration::from_millis(29));
    })
}

fn oper_index_ok(_: usize) -> bool {
    true
}

// ---------------------------------------------------------------------------------
// timers
// ---------------------------------------------------------------------------------

fn timers_in_select_here() {
    // after
    let start = Instant::now();
    let (_tx, rx) = chan::unbounded::<u32>();
    let timer = chan::after(Duration::from_millis(30));
    let mut sel = Select::new();
    sel.recv(&rx);
    let ti = sel.recv(&timer);
    let oper = sel.select();
    assert_eq!(oper.index(), ti);
    let at = oper.recv(&timer).unwrap();
    assert!(at >= start + Duration::from_millis(30));
    assert!(start.elapsed() >= Duration::from_millis(29));
    // The one-shot timer has fired: it is not ready again.
    assert!(sel.select_timeout(Duration::from_millis(20)).is_err());

    // at
    let when = Instant::now() + Duration::from_millis(20);
    weft::select! {
        recv(rx) -> _ => panic!(),
        recv(chan::at(when)) -> m => assert_eq!(m, Ok(when)),
    }
    assert!(Instant::now() >= when);

    // tick: three increasing instants about a period apart
    let ticker = chan::tick(Duration::from_millis(10));
    let mut last = Instant::now();
    for _ in 0..3 {
        weft::select! {
            recv(rx) -> _ => panic!(),
            recv(ticker) -> m => {
                let m = m.unwrap();
                assert!(m > last, "tick went backwards");
                last = m;
            }
        }
    }
    assert!(start.elapsed() >= Duration::from_millis(29 + 20 + 29));

    // never, with a default timeout
    let never = chan::never::<u32>();
    let t = Instant::now();
    weft::select! {
        recv(never) -> _ => panic!("never delivered"),
        default(Duration::from_millis(20)) => {}
    }
    assert!(t.elapsed() >= Duration::from_millis(19));
    // tick, at and never in one (biased) Select: ticks come until `at` fires (a tick
    // taken makes the next one a period away, so `at` gets its turn), `never` never.
    let ticker = chan::tick(Duration::from_millis(10));
    let when = Instant::now() + Duration::from_millis(60);
    let at = chan::at(when);
    let never = chan::never::<u32>();
    let mut sel = Select::new_biased();
    let ti = sel.recv(&ticker);
    let ai = sel.recv(&at);
    let ni = sel.recv(&never);
    let mut ticks = 0;
    loop {
        assert!(ticks < 1000, "`at` never fired");
        let oper = sel
            .select_timeout(Duration::from_secs(5))
            .expect("a timer fires");
        let i = oper.index();
        assert_ne!(i, ni, "never delivered");
        if i == ti {
            oper.recv(&ticker).unwrap();
            ticks += 1;
        } else {
            assert_eq!(i, ai);
            assert_eq!(oper.recv(&at), Ok(when));
            assert!(Instant::now() >= when);
            break;
        }
    }
    assert!(ticks >= 1, "no tick in 60 ms of 10 ms ticks");
    // after vs an earlier ready value: the value wins.
    let (tx, rx) = chan::unbounded::<u32>();
    tx.send_blocking(1).unwrap();
    weft::select! {
        recv(rx) -> m => assert_eq!(m, Ok(1)),
        recv(chan::after(Duration::from_secs(10))) -> _ => panic!("the timer won"),
    }
}

#[test]
fn timer_receivers_in_select_on_a_thread() {
    watchdog(10, timers_in_select_here);
}

#[test]
fn timer_receivers_in_select_on_a_fiber() {
    watchdog(10, || {
        let rt = rt2();
        join_within(fiber_on(&rt, timers_in_select_here), 8).unwrap();
    })
}

// ---------------------------------------------------------------------------------
// the macro
// ---------------------------------------------------------------------------------

#[test]
fn select_macro_break_and_continue_in_arm_bodies() {
    let (tx, rx) = chan::unbounded::<u32>();
    for i in 0..10 {
        tx.send_blocking(i).unwrap();
    }
    drop(tx);
    let mut odd = vec![];
    let (mut loops, mut reached) = (0, 0);
    loop {
        loops += 1;
        assert!(loops < 100, "break did not leave the loop");
        weft::select! {
            recv(rx) -> m => {
                match m {
                    Ok(v) if v % 2 == 0 => continue,
                    Ok(v) => odd.push(v),
                    Err(_) => break,
                }
            }
            default(Duration::from_secs(5)) => panic!("timed out"),
        }
        // Reached only after the odd values (continue skips this).
        reached += 1;
    }
    assert_eq!(odd, [1, 3, 5, 7, 9]);
    assert_eq!((loops, reached), (11, 5));

    // Labelled continue out of nested loops, and `return`/`?` in arm bodies.
    #[allow(clippy::never_loop)] // the inner loop is left by `continue 'outer`
    fn first_even(rx: &Receiver<u32>) -> Result<u32, RecvError> {
        'outer: loop {
            loop {
                weft::select! {
                    recv(rx) -> m => {
                        let v = m?;
                        if v % 2 == 0 {
                            return Ok(v);
                        }
                        continue 'outer;
                    }
                }
            }
        }
    }
    let (tx, rx) = chan::unbounded::<u32>();
    for v in [1, 3, 4, 5] {
        tx.send_blocking(v).unwrap();
    }
    assert_eq!(first_even(&rx), Ok(4));
    drop(tx);
    assert_eq!(rx.try_recv(), Ok(5));
    assert_eq!(first_even(&rx), Err(RecvError));
}

#[test]
fn select_macro_operand_forms() {
    let (tx, rx) = chan::unbounded::<u32>();
    let arx = Arc::new(rx.clone());
    let brx = Box::new(rx.clone());
    let atx = Arc::new(tx.clone());
    tx.send_blocking(1).unwrap();
    weft::select! { recv(rx) -> m => assert_eq!(m, Ok(1)) }
    tx.send_blocking(2).unwrap();
    weft::select! { recv(&rx) -> m => assert_eq!(m, Ok(2)), }
    tx.send_blocking(3).unwrap();
    weft::select! { recv(arx) -> m => assert_eq!(m, Ok(3)), }
    tx.send_blocking(4).unwrap();
    weft::select! { recv(&arx) -> m => assert_eq!(m, Ok(4)) }
    tx.send_blocking(5).unwrap();
    weft::select! { recv(brx) -> m => assert_eq!(m, Ok(5)), }
    weft::select! { send(tx, 6) -> r => r.unwrap(), }
    weft::select! { send(&tx, 7) -> r => r.unwrap() }
    weft::select! { send(atx, 8) -> r => { r.unwrap(); } }
    weft::select! {
        send(&atx, 9) -> r => { r.unwrap() }
        default => panic!(),
    }
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), [6, 7, 8, 9]);
    // The operand is evaluated once, and the value expression only if it is sent?
    // (crossbeam evaluates it before selecting; we only require one evaluation.)
    let mut evaluated = 0;
    let mut make_rx = || {
        evaluated += 1;
        rx.clone()
    };
    tx.send_blocking(10).unwrap();
    weft::select! { recv(make_rx()) -> m => assert_eq!(m, Ok(10)) }
    assert_eq!(evaluated, 1);
    // The arms still see the ends (they were borrowed, not moved).
    drop((tx, rx, arx, brx, atx));
}

// ---------------------------------------------------------------------------------
// selected operations whose partner withdraws
// ---------------------------------------------------------------------------------

/// A select sends on a rendezvous channel by holding a parked receiver; that receive
/// (a `recv()` future, dropped tokio-style) is cancelled before the selected send is
/// performed. The selected send must still complete without blocking (the issue: "a
/// selected operation completes without blocking, on rendezvous channels too"), and
/// its value must not be lost.
#[test]
fn selected_send_whose_held_receiver_was_cancelled_completes_without_blocking() {
    watchdog(3, || {
        let (tx, rx) = chan::bounded::<i32>(0);
        let mut fut = Box::pin(rx.recv());
        assert!(poll_once(fut.as_mut()).is_none(), "the receive parks");
        let mut sel = Select::new();
        let s = sel.send(&tx);
        let oper = sel
            .try_select()
            .expect("a receiver is parked: the send is ready");
        assert_eq!(oper.index(), s);
        drop(fut); // the held receiver goes away
        let r = oper.send(&tx, 1); // must not block
        match r {
            Ok(()) => assert_eq!(rx.try_recv(), Ok(1), "the sent value was lost"),
            Err(e) => panic!("unexpected {e:?}"),
        }
    })
}

/// A select receives on a rendezvous channel by pairing with a selecting sender
/// (`select_async`, whose future is then dropped before it sends). The selected
/// receive must not block for ever: either the select does not return until the value
/// is there (here it times out), or `recv` on the selected operation returns at once.
#[test]
fn selected_receive_paired_with_a_withdrawn_select_send_does_not_block() {
    watchdog(3, || {
        let (tx, rx) = chan::bounded::<i32>(0);
        let (parked_tx, parked_rx) = std::sync::mpsc::channel();
        let (drop_tx, drop_rx) = std::sync::mpsc::channel::<()>();
        let tx2 = tx.clone();
        let sender = std::thread::spawn(move || {
            let mut sel = Select::new();
            sel.send(&tx2);
            let mut fut = Box::pin(sel.select_async());
            assert!(
                poll_once(fut.as_mut()).is_none(),
                "no receiver yet: the select waits"
            );
            parked_tx.send(()).unwrap();
            drop_rx.recv().unwrap();
            drop(fut); // withdrawn (a timeout, a tokio select! branch that lost)
        });
        parked_rx.recv().unwrap();
        let mut sel = Select::new();
        let r = sel.recv(&rx);
        let dropper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop_tx.send(()).unwrap();
        });
        match sel.select_timeout(Duration::from_millis(500)) {
            Err(_) => {} // it waited for the value, which never came: fine
            Ok(oper) => {
                assert_eq!(oper.index(), r);
                // Selected: completing it must not wait for another sender.
                let got = oper.recv(&rx);
                panic!("the selected receive returned {got:?} (it should not have been selected)");
            }
        }
        dropper.join().unwrap();
        sender.join().unwrap();
        drop(tx);
    })
}

/// Same, through `try_select`: a selecting sender that has not committed its value
/// is withdrawn after a `try_select` paired with it; the selected receive must not
/// block.
#[test]
fn try_select_receive_paired_with_a_withdrawn_select_send_does_not_block() {
    watchdog(3, || {
        let (tx, rx) = chan::bounded::<i32>(0);
        let mut ssel = Select::new();
        ssel.send(&tx);
        let mut fut = Box::pin(ssel.select_async());
        assert!(poll_once(fut.as_mut()).is_none());
        let mut sel = Select::new();
        sel.recv(&rx);
        let r = match sel.try_select() {
            Err(_) => {
                drop(fut);
                None
            }
            Ok(oper) => {
                drop(fut);
                // Runs on this watchdog thread: a block here is the failure.
                Some(oper.recv(&rx))
            }
        };
        if let Some(got) = r {
            panic!("completed with {got:?}, but there was never a value to receive");
        }
    })
}

/// Both sides of a rendezvous channel select with short timeouts, retrying: every
/// value the sender saw sent is received exactly once, in order, and no selected
/// operation blocks past its select.
#[test]
fn select_timeouts_on_both_sides_of_a_rendezvous_lose_nothing() {
    watchdog(20, || {
        const N: u32 = 500;
        let (tx, rx) = chan::bounded::<u32>(0);
        let sender = std::thread::spawn(move || {
            let mut r = Rng::new(11);
            let mut i = 0;
            while i < N {
                let mut sel = Select::new();
                sel.send(&tx);
                if let Ok(oper) = sel.select_timeout(Duration::from_micros(r.below(300))) {
                    oper.send(&tx, i).unwrap();
                    i += 1;
                }
            }
        });
        let mut r = Rng::new(12);
        let mut got = vec![];
        while got.len() < N as usize {
            let mut sel = Select::new();
            sel.recv(&rx);
            if let Ok(oper) = sel.select_timeout(Duration::from_micros(r.below(300))) {
                got.push(oper.recv(&rx).unwrap());
            }
        }
        sender.join().unwrap();
        assert_eq!(got, (0..N).collect::<Vec<_>>());
    })
}

/// Several threads each select both to send and to receive on one rendezvous channel,
/// with timeouts, for a while: every value sent is received exactly once.
#[test]
fn selects_sending_and_receiving_on_one_rendezvous_channel() {
    watchdog(15, || {
        let (tx, rx) = chan::bounded::<u64>(0);
        let stop = Instant::now() + Duration::from_millis(300);
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let (tx, rx) = (tx.clone(), rx.clone());
                std::thread::spawn(move || {
                    let (mut sent, mut got) = (vec![], vec![]);
                    let mut next = t << 32;
                    while Instant::now() < stop {
                        weft::select! {
                            send(tx, next) -> r => { r.unwrap(); sent.push(next); next += 1; }
                            recv(rx) -> m => got.push(m.unwrap()),
                            default(Duration::from_millis(5)) => {}
                        }
                    }
                    (sent, got)
                })
            })
            .collect();
        let (mut sent, mut got) = (vec![], vec![]);
        for h in hs {
            let (s, g) = h.join().unwrap();
            sent.extend(s);
            got.extend(g);
        }
        sent.sort_unstable();
        got.sort_unstable();
        assert!(!sent.is_empty(), "nothing was exchanged");
        assert_eq!(sent, got, "sends and receives do not match");
    })
}
