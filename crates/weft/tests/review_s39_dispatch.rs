//! Review attacks on the dispatcher's look (`Stacks::look`): a blocked wait made on a
//! worker thread's own stack (an async task calling `send_blocking`, `recv_blocking`
//! or `weft::wait` inside its poll) dispatches, resuming set-aside loop stacks whose
//! waits were woken; its own wake landing next to a set-aside wait's wake must never
//! leave it behind. From safe code only: one-shot set-aside waits woken together with
//! the own wait (from one thread in either order, and from two threads at once),
//! rendezvous mpmc traffic with many blocking forms inside tasks, closes mid-traffic,
//! and runtime drop while such waits are pending. Every wait is bounded (a hang is a
//! failure); sizes fit a debug build on a loaded 2-core machine.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fiber_on, join_within, spin_for, thread_within, wait_until, watchdog, workers, Rng};
use weft::chan::{self, Receiver, Sender};
use weft::{JoinHandle, Runtime};

/// How the task on the worker's own stack waits in [`own_wait_round`] (its sending
/// form is [`own_send_round`]).
#[derive(Clone, Copy, Debug)]
enum OwnWait {
    /// `Receiver::recv_blocking`.
    Recv,
    /// `weft::wait` on the async receive.
    WaitRecv,
}

/// One round: task `A` (spawned first, so on the worker's own stack when the worker was
/// idle) and `others` one-shot tasks each block on a rendezvous channel of their own
/// (the others' waits are set aside on loop stacks while `A`'s dispatcher runs), then
/// partner threads complete them all close together, `A`'s before or after the others
/// or from two threads at once. A one-shot task whose stack is resumed ends, and its
/// loop stack goes idle: if `A`'s wake were lost there, nothing else would wake the
/// worker and `A` would hang.
fn own_wait_round(rt: &Runtime, rng: &mut Rng, own: OwnWait, others: usize) {
    let started = Arc::new(AtomicUsize::new(0));
    let (a_tx, a_rx) = chan::bounded::<u64>(0);
    let a_val = rng.next();
    let a = {
        let started = started.clone();
        match own {
            OwnWait::Recv => rt.spawn(async move {
                started.fetch_add(1, SeqCst);
                a_rx.recv_blocking().expect("A: recv failed")
            }),
            OwnWait::WaitRecv => rt.spawn(async move {
                started.fetch_add(1, SeqCst);
                weft::wait(a_rx.recv()).expect("A: recv failed")
            }),
        }
    };
    let mut b_handles: Vec<JoinHandle<u64>> = Vec::new();
    let mut b_txs: Vec<(Sender<u64>, u64)> = Vec::new();
    for _ in 0..others {
        let (tx, rx) = chan::bounded::<u64>(0);
        let started = started.clone();
        b_handles.push(rt.spawn(async move {
            started.fetch_add(1, SeqCst);
            rx.recv_blocking().expect("B: recv failed")
        }));
        b_txs.push((tx, rng.next()));
    }
    wait_until("the waiting tasks to start", || {
        started.load(SeqCst) > others
    });
    // Let the waits register (most rounds), or not (some rounds).
    spin_for(Duration::from_nanos(rng.below(100_000)));
    let gap = Duration::from_nanos(rng.below(75_000));
    let a_first = rng.below(2) == 0;
    let two_threads = rng.below(2) == 0;
    let wake_a = move || a_tx.send_blocking(a_val).expect("send to A failed");
    let wake_bs = move || {
        for (tx, v) in b_txs {
            tx.send_blocking(v).expect("send to B failed");
        }
    };
    if two_threads {
        let go = Arc::new(AtomicBool::new(false));
        let (g1, g2) = (go.clone(), go.clone());
        let t1 = std::thread::spawn(move || {
            while !g1.load(SeqCst) {
                std::hint::spin_loop();
            }
            wake_a();
        });
        let t2 = std::thread::spawn(move || {
            while !g2.load(SeqCst) {
                std::hint::spin_loop();
            }
            spin_for(gap);
            wake_bs();
        });
        go.store(true, SeqCst);
        thread_within(t1, 10);
        thread_within(t2, 10);
    } else {
        let t = std::thread::spawn(move || {
            if a_first {
                wake_a();
                spin_for(gap);
                wake_bs();
            } else {
                wake_bs();
                spin_for(gap);
                wake_a();
            }
        });
        thread_within(t, 10);
    }
    assert_eq!(
        join_within(a, 10).expect("A failed"),
        a_val,
        "A: wrong value ({own:?})"
    );
    for h in b_handles {
        join_within(h, 10).expect("B failed");
    }
}

/// [`own_wait_round`] with `A` sending: the partner thread's receive wakes it.
fn own_send_round(rt: &Runtime, rng: &mut Rng, others: usize) {
    let started = Arc::new(AtomicUsize::new(0));
    let (a_tx, a_rx) = chan::bounded::<u64>(0);
    let a_val = rng.next();
    let a = {
        let started = started.clone();
        rt.spawn(async move {
            started.fetch_add(1, SeqCst);
            a_tx.send_blocking(a_val).expect("A: send failed");
        })
    };
    let mut b_handles = Vec::new();
    let mut b_rxs: Vec<Receiver<u64>> = Vec::new();
    let mut b_vals = Vec::new();
    for _ in 0..others {
        let (tx, rx) = chan::bounded::<u64>(0);
        let started = started.clone();
        let v = rng.next();
        b_vals.push(v);
        b_handles.push(rt.spawn(async move {
            started.fetch_add(1, SeqCst);
            tx.send_blocking(v).expect("B: send failed");
        }));
        b_rxs.push(rx);
    }
    wait_until("the waiting tasks to start", || {
        started.load(SeqCst) > others
    });
    spin_for(Duration::from_nanos(rng.below(100_000)));
    let gap = Duration::from_nanos(rng.below(75_000));
    let a_first = rng.below(2) == 0;
    let t = std::thread::spawn(move || {
        let take_bs = |rxs: Vec<Receiver<u64>>| -> Vec<u64> {
            rxs.into_iter()
                .map(|rx| rx.recv_blocking().expect("recv from B failed"))
                .collect()
        };
        if a_first {
            let a = a_rx.recv_blocking().expect("recv from A failed");
            spin_for(gap);
            (a, take_bs(b_rxs))
        } else {
            let bs = take_bs(b_rxs);
            spin_for(gap);
            (a_rx.recv_blocking().expect("recv from A failed"), bs)
        }
    });
    let (got_a, got_bs) = thread_within(t, 10);
    join_within(a, 10).expect("A failed");
    for h in b_handles {
        join_within(h, 10).expect("B failed");
    }
    assert_eq!(got_a, a_val);
    assert_eq!(got_bs, b_vals);
}

fn own_wait_rounds(workers_n: usize, rounds: usize, secs: u64) {
    let (mut rng, seed) = Rng::seeded("WEFT_REVIEW_SEED");
    eprintln!("seed {seed}");
    watchdog(secs, move || {
        let rt = workers(workers_n);
        let started = Instant::now();
        for r in 0..rounds {
            // Keep the whole test short on a slow machine.
            if started.elapsed() > Duration::from_secs(secs / 2) {
                break;
            }
            let others = 1 + r % 3;
            match r % 4 {
                0 => own_wait_round(&rt, &mut rng, OwnWait::Recv, others),
                1 => own_wait_round(&rt, &mut rng, OwnWait::WaitRecv, others),
                2 => own_send_round(&rt, &mut rng, others),
                _ => own_wait_round(&rt, &mut rng, OwnWait::Recv, 1),
            }
        }
    });
}

/// One worker: the own wait and one to three set-aside one-shot waits woken close
/// together, many times.
#[test]
fn own_wait_woken_beside_set_aside_one_worker() {
    own_wait_rounds(1, 1500, 30);
}

/// The same on two workers (the waits land on either; a worker may also steal).
#[test]
fn own_wait_woken_beside_set_aside_two_workers() {
    own_wait_rounds(2, 1000, 30);
}

/// A chain of tasks on one worker, each blocking in `recv_blocking` on its own
/// rendezvous channel; a plain thread feeds them in a random order, each value right
/// after the one before. Whichever runs on the thread's stack, the others' stacks are
/// set aside, and every wake races the dispatcher's look. Every task gets its value.
#[test]
fn many_blocking_receivers_fed_in_random_order_one_worker() {
    let (mut rng, seed) = Rng::seeded("WEFT_REVIEW_SEED");
    eprintln!("seed {seed}");
    watchdog(30, move || {
        let rt = workers(1);
        let started_at = Instant::now();
        for round in 0..400u64 {
            if started_at.elapsed() > Duration::from_secs(15) {
                break;
            }
            const N: usize = 6;
            let started = Arc::new(AtomicUsize::new(0));
            let mut txs = Vec::new();
            let mut hs = Vec::new();
            for k in 0..N {
                let (tx, rx) = chan::bounded::<u64>(0);
                let started = started.clone();
                hs.push(rt.spawn(async move {
                    started.fetch_add(1, SeqCst);
                    // Two rounds each: the second wait is made on whatever stack the
                    // task was resumed on.
                    let a = rx.recv_blocking().expect("recv 1");
                    let b = if k % 2 == 0 {
                        rx.recv_blocking().expect("recv 2")
                    } else {
                        weft::wait(rx.recv()).expect("recv 2")
                    };
                    (a, b)
                }));
                txs.push(tx);
            }
            wait_until("the waiting tasks to start", || started.load(SeqCst) >= N);
            spin_for(Duration::from_nanos(rng.below(50_000)));
            let mut order: Vec<usize> = (0..2 * N).map(|i| i % N).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let feeder = std::thread::spawn(move || {
                let mut sent = [0u64; N];
                for k in order {
                    txs[k]
                        .send_blocking(round * 1000 + k as u64 * 10 + sent[k])
                        .expect("feed");
                    sent[k] += 1;
                }
            });
            for (k, h) in hs.into_iter().enumerate() {
                let (a, b) = join_within(h, 10).expect("receiver task failed");
                let base = round * 1000 + k as u64 * 10;
                assert_eq!((a, b), (base, base + 1), "task {k}");
            }
            thread_within(feeder, 10);
        }
    });
}

/// Where one end of [`mpmc_round`] runs.
#[derive(Clone, Copy, Debug)]
enum Ctx {
    Thread,
    Fiber,
    /// An async task calling the blocking forms.
    TaskBlocking,
    /// An async task calling `weft::wait` on the async forms.
    TaskWait,
}

fn run_in<T: Send + 'static>(
    rt: &Runtime,
    ctx: Ctx,
    f: impl FnOnce() -> T + Send + 'static,
) -> Box<dyn FnOnce(u64) -> T> {
    match ctx {
        Ctx::Thread => {
            let h = std::thread::spawn(f);
            Box::new(move |secs| thread_within(h, secs))
        }
        Ctx::Fiber => {
            let h = fiber_on(rt, f);
            Box::new(move |secs| join_within(h, secs).expect("fiber failed"))
        }
        Ctx::TaskBlocking | Ctx::TaskWait => {
            let h = rt.spawn(async move { f() });
            Box::new(move |secs| join_within(h, secs).expect("task failed"))
        }
    }
}

fn send_one(tx: &Sender<usize>, ctx: Ctx, v: usize) -> Result<(), usize> {
    match ctx {
        Ctx::TaskWait => weft::wait(tx.send(v)).map_err(|e| e.0),
        _ => tx.send_blocking(v).map_err(|e| e.0),
    }
}

fn recv_one(rx: &Receiver<usize>, ctx: Ctx) -> Option<usize> {
    match ctx {
        Ctx::TaskWait => weft::wait(rx.recv()).ok(),
        _ => rx.recv_blocking().ok(),
    }
}

/// Rendezvous mpmc traffic with most ends inside tasks on `rt`; receiver 0 closes the
/// channel after `close_after` values (none: the senders finish and drop). Every value
/// is received or given back to its sender, exactly once.
fn mpmc_round(rt: &Runtime, senders: &[Ctx], receivers: &[Ctx], per: usize, close_after: usize) {
    let total = senders.len() * per;
    let got = Arc::new((0..total).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
    let back = Arc::new((0..total).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
    let (tx, rx) = chan::bounded::<usize>(0);
    let mut recvs = Vec::new();
    for (k, &ctx) in receivers.iter().enumerate() {
        let rx = rx.clone();
        let got = got.clone();
        recvs.push(run_in(rt, ctx, move || {
            let mut n = 0;
            while let Some(v) = recv_one(&rx, ctx) {
                got[v].fetch_add(1, SeqCst);
                n += 1;
                if k == 0 && n == close_after {
                    rx.close();
                }
            }
        }));
    }
    drop(rx);
    let mut sends = Vec::new();
    for (id, &ctx) in senders.iter().enumerate() {
        let tx = tx.clone();
        let back = back.clone();
        sends.push(run_in(rt, ctx, move || {
            for i in 0..per {
                if let Err(v) = send_one(&tx, ctx, id * per + i) {
                    assert_eq!(v, id * per + i, "the wrong value came back");
                    back[v].fetch_add(1, SeqCst);
                }
            }
        }));
    }
    drop(tx);
    for s in sends {
        s(20);
    }
    for r in recvs {
        r(20);
    }
    for i in 0..total {
        let (g, b) = (got[i].load(SeqCst), back[i].load(SeqCst));
        assert_eq!(g + b, 1, "value {i}: received {g}, given back {b}");
    }
    if close_after == usize::MAX {
        let received: usize = got.iter().map(|g| g.load(SeqCst)).sum();
        assert_eq!(received, total, "values lost without a close");
    }
}

/// Rendezvous mpmc with most senders and receivers blocking inside tasks, on one and
/// two workers, with and without a close mid-traffic.
#[test]
fn rendezvous_mpmc_blocking_tasks_and_closes() {
    watchdog(40, || {
        use Ctx::*;
        let senders = [
            TaskBlocking,
            TaskWait,
            Thread,
            TaskBlocking,
            Fiber,
            TaskBlocking,
        ];
        let receivers = [TaskBlocking, Fiber, TaskWait, Thread];
        let started = Instant::now();
        for round in 0..8usize {
            if started.elapsed() > Duration::from_secs(18) {
                break;
            }
            let rt = workers(1 + round % 2);
            let close_after = if round % 4 == 3 {
                usize::MAX
            } else {
                10 + round * 13
            };
            mpmc_round(&rt, &senders, &receivers, 40, close_after);
            // Receivers only in tasks (the senders on threads and fibers wake them).
            mpmc_round(
                &rt,
                &[Thread, Fiber, Thread],
                &[TaskBlocking, TaskBlocking, TaskWait],
                40,
                close_after,
            );
        }
    });
}

/// Tasks blocked in `recv_blocking` and `send_blocking` (one on the worker's own
/// stack, the others set aside) when the runtime is dropped on another thread; the
/// partner threads then finish the traffic (or close). The drop returns, and every
/// value is delivered or given back exactly once.
#[test]
fn runtime_drop_with_blocking_waits_pending() {
    let (mut rng, seed) = Rng::seeded("WEFT_REVIEW_SEED");
    eprintln!("seed {seed}");
    watchdog(40, move || {
        let started_at = Instant::now();
        for round in 0..24u64 {
            if started_at.elapsed() > Duration::from_secs(15) {
                break;
            }
            let rt = workers(1 + (round % 2) as usize);
            const TASKS: usize = 4;
            const PER: usize = 5;
            let started = Arc::new(AtomicUsize::new(0));
            let got = Arc::new(AtomicUsize::new(0));
            let mut rx_ends = Vec::new();
            let mut tx_ends = Vec::new();
            let mut hs = Vec::new();
            for k in 0..TASKS {
                let started = started.clone();
                if k % 2 == 0 {
                    // A receiving task; the test holds the sender.
                    let (tx, rx) = chan::bounded::<usize>(0);
                    let got = got.clone();
                    hs.push(rt.spawn(async move {
                        started.fetch_add(1, SeqCst);
                        while rx.recv_blocking().is_ok() {
                            got.fetch_add(1, SeqCst);
                        }
                        0usize
                    }));
                    tx_ends.push(tx);
                } else {
                    // A sending task; the test holds the receiver.
                    let (tx, rx) = chan::bounded::<usize>(0);
                    hs.push(rt.spawn(async move {
                        started.fetch_add(1, SeqCst);
                        let mut back = 0;
                        for i in 0..PER {
                            if tx.send_blocking(i).is_err() {
                                back += 1;
                            }
                        }
                        back
                    }));
                    rx_ends.push(rx);
                }
            }
            wait_until("the waiting tasks to start", || {
                started.load(SeqCst) >= TASKS
            });
            spin_for(Duration::from_nanos(rng.below(500_000)));
            let handles = hs;
            let dropper = std::thread::spawn(move || {
                drop(rt);
            });
            spin_for(Duration::from_nanos(rng.below(1_250_000)));
            // The partners: feed and drain some of the traffic, then close.
            let close_early = rng.below(2) == 0;
            let feed = std::thread::spawn(move || {
                let mut sent = 0;
                for tx in tx_ends {
                    for i in 0..PER {
                        if close_early && i == 2 {
                            break;
                        }
                        if tx.send_timeout(i, Duration::from_secs(10)).is_ok() {
                            sent += 1;
                        }
                    }
                }
                sent
            });
            let drain = std::thread::spawn(move || {
                let mut taken = 0;
                for rx in rx_ends {
                    for i in 0..PER {
                        if close_early && i == 3 {
                            rx.close();
                            break;
                        }
                        match rx.recv_timeout(Duration::from_secs(10)) {
                            Ok(_) => taken += 1,
                            Err(_) => break,
                        }
                    }
                }
                taken
            });
            let sent = thread_within(feed, 15);
            let taken = thread_within(drain, 15);
            thread_within(dropper, 15);
            // A task ended by the shutdown reports cancellation; one that finished
            // reports its count.
            let mut back = 0;
            let mut finished_senders = 0;
            for (k, h) in handles.into_iter().enumerate() {
                if let Ok(b) = join_within(h, 10) {
                    if k % 2 == 1 {
                        back += b;
                        finished_senders += 1;
                    }
                }
            }
            assert_eq!(got.load(SeqCst), sent, "round {round}: received != sent");
            if finished_senders == TASKS / 2 {
                assert_eq!(
                    taken + back,
                    TASKS / 2 * PER,
                    "round {round}: a sent value was lost or doubled"
                );
            }
        }
    });
}
