//! A blocked wait on a worker whose future keeps waking itself, and a timed wait
//! retried after it expired, let the worker run other ready work (`Core::yield_wait`):
//! tasks, fibers tied to the worker, and LIFO-slot work all get their turn, on one
//! worker, from every context, and through a runtime's shutdown.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::spawn::{fiber_on, join_within};
use common::{with_timeout, workers};

/// A future that wakes itself on every poll until `done` says so.
fn self_waking_until(mut done: impl FnMut() -> bool) -> impl std::future::Future<Output = ()> {
    std::future::poll_fn(move |cx| {
        if done() {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
}

/// A wait on a future that yields until a flag is set, made by a task on a one-worker
/// runtime; the flag is set by a fiber tied to that worker, or by a task spawned
/// (into the LIFO slot) from the waiting task.
#[test]
fn self_waking_waits_let_fibers_and_tasks_tied_to_the_worker_run() {
    with_timeout(|| {
        let rt = workers(1);
        for round in 0..50 {
            let flag = Arc::new(AtomicBool::new(false));
            let f = flag.clone();
            let waiter = rt.spawn(async move {
                let f2 = f.clone();
                let setter = if round % 2 == 0 {
                    weft::fiber::spawn(move || f2.store(true, SeqCst))
                } else {
                    weft::spawn(async move { f2.store(true, SeqCst) })
                };
                let mut polls = 0u64;
                weft::wait(self_waking_until(|| {
                    polls += 1;
                    f.load(SeqCst)
                }));
                setter.join().unwrap();
                polls
            });
            let polls = join_within(waiter, 30).unwrap();
            assert!(flag.load(SeqCst));
            assert!(polls >= 1);
        }
    });
}

/// `fiber::yield_now` called by a task (not a fiber) on a one-worker runtime, in a loop
/// waiting for a fiber tied to the worker: the worker runs the fiber between the
/// yields (it used to yield the thread only, so the loop never ended).
#[test]
fn fiber_yield_now_in_a_task_lets_a_fiber_tied_to_the_worker_run() {
    with_timeout(|| {
        let rt = workers(1);
        for _ in 0..50 {
            let h = rt.spawn(async {
                let done = Arc::new(AtomicBool::new(false));
                let d = done.clone();
                let f = weft::fiber::spawn(move || d.store(true, SeqCst));
                let start = Instant::now();
                let mut yields = 0u32;
                while !done.load(SeqCst) {
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "the fiber never ran ({yields} yields)"
                    );
                    weft::fiber::yield_now();
                    yields += 1;
                }
                f.join().unwrap();
            });
            join_within(h, 30).unwrap();
        }
    });
}

/// Eight tasks on one worker pass a token around a ring, each waiting for its turn
/// with a self-waking wait (and every other one with expired `recv_timeout(ZERO)`
/// retries on a channel): every task must let the others run, round after round.
#[test]
fn a_ring_of_self_waking_waits_on_one_worker_passes_its_token() {
    with_timeout(|| {
        let rt = workers(1);
        const N: usize = 8;
        const ROUNDS: usize = 50;
        let turn = Arc::new(AtomicUsize::new(0));
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..N).map(|_| weft::chan::unbounded::<usize>()).unzip();
        let mut handles = Vec::new();
        for (i, rx) in rxs.into_iter().enumerate() {
            let turn = turn.clone();
            let next = txs[(i + 1) % N].clone();
            handles.push(rt.spawn(async move {
                for r in 0..ROUNDS {
                    let mine = r * N + i;
                    if i % 2 == 0 {
                        weft::wait(self_waking_until(|| turn.load(SeqCst) == mine));
                    } else {
                        let start = Instant::now();
                        let got = loop {
                            if let Ok(v) = rx.recv_timeout(Duration::ZERO) {
                                break v;
                            }
                            assert!(start.elapsed() < Duration::from_secs(20), "stuck");
                        };
                        assert_eq!(got, mine);
                        assert_eq!(turn.load(SeqCst), mine);
                    }
                    turn.store(mine + 1, SeqCst);
                    // The next one (odd ones receive, even ones watch the counter).
                    let _ = next.send_blocking(mine + 1);
                }
            }));
        }
        for h in handles {
            join_within(h, 60).unwrap();
        }
        assert_eq!(turn.load(SeqCst), N * ROUNDS);
    });
}

/// A runtime dropped while a task on it is in a self-waking wait that only another
/// task could end: the drop returns (the wait ends with the shutdown's cancellation or
/// goes on polling until the flag, which is then set by nobody: the shutdown must not
/// wait on it for ever).
#[test]
fn dropping_a_runtime_during_self_waking_waits_returns() {
    with_timeout(|| {
        for _ in 0..20 {
            let rt = workers(1);
            let started = Arc::new(AtomicBool::new(false));
            let s = started.clone();
            let stop = Arc::new(AtomicBool::new(false));
            let st = stop.clone();
            let _h = rt.spawn(async move {
                s.store(true, SeqCst);
                weft::wait(self_waking_until(|| st.load(SeqCst)));
            });
            let other = rt.spawn(async { 7 });
            common::wait_until("the waiter to start", || started.load(SeqCst));
            assert_eq!(join_within(other, 30).unwrap(), 7);
            // The shutdown waits for the worker, whose task polls until `stop`.
            let stopper = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                stop.store(true, SeqCst);
            });
            drop(rt);
            stopper.join().unwrap();
        }
    });
}

/// A fiber inside a fork-join `join` (where it may not suspend) retrying an expired
/// receive, with the sender a fiber tied to the same, only worker.
#[test]
fn expired_retries_in_a_join_on_a_fiber_let_the_sender_run() {
    with_timeout(|| {
        let rt = workers(1);
        for _ in 0..20 {
            let (tx, rx) = weft::chan::bounded::<u32>(1);
            let h = fiber_on(&rt, move || {
                let sender = weft::fiber::spawn(move || tx.send_blocking(9).unwrap());
                let (got, ()) = weft::join(
                    || {
                        let start = Instant::now();
                        loop {
                            if let Ok(v) = rx.recv_timeout(Duration::ZERO) {
                                break v;
                            }
                            assert!(start.elapsed() < Duration::from_secs(20), "stuck");
                        }
                    },
                    || (),
                );
                sender.join().unwrap();
                got
            });
            assert_eq!(join_within(h, 30).unwrap(), 9);
        }
    });
}

/// A fiber, and a task, looping on waits that are always ready at their first poll (no
/// suspension, no self-wake), on a one-worker runtime, until a fiber or task tied to
/// that worker sets a flag: their ready waits count against a budget (the fiber's in
/// its context, the task's in the worker thread's), and the wait after the budget
/// yields first, so the setter runs. Values the waits return are all kept (the yield
/// comes before a poll, never with a result in hand). Either looper kept the worker
/// for ever before the budget.
#[test]
fn loops_of_ready_waits_in_a_fiber_or_a_task_let_the_worker_run_others() {
    with_timeout(|| {
        let rt = workers(1);
        for round in 0..40u64 {
            let flag = Arc::new(AtomicBool::new(false));
            let f = flag.clone();
            let body = move || {
                let f2 = f.clone();
                let setter = if round % 2 == 0 {
                    weft::fiber::spawn(move || f2.store(true, SeqCst))
                } else {
                    weft::spawn(async move { f2.store(true, SeqCst) })
                };
                let (mut sum, mut waits) = (0u64, 0u64);
                while !f.load(SeqCst) {
                    waits += 1;
                    assert!(waits < 10_000_000, "round {round}: the setter never ran");
                    sum += weft::wait(std::future::ready(1u64));
                }
                setter.join().unwrap();
                (sum, waits)
            };
            let looper = if round % 4 < 2 {
                fiber_on(&rt, body)
            } else {
                rt.spawn(async move { body() })
            };
            let (sum, waits) = join_within(looper, 60).unwrap();
            assert_eq!(
                sum, waits,
                "round {round}: a ready wait's value went missing"
            );
            assert!(flag.load(SeqCst));
        }
    });
}

/// Receives through `wait` on the async `recv` (each a `suspend_on` of its own), in a
/// fiber, most of them ready at their first poll, while the sender is a fiber tied to
/// the same worker that fills a bounded channel and then waits: every value arrives
/// once and in order across the budget's yields (which sit between receives, never
/// inside one).
#[test]
fn ready_receives_on_a_fiber_keep_every_value_across_budget_yields() {
    with_timeout(|| {
        let rt = workers(1);
        let (tx, rx) = weft::chan::bounded::<u64>(1000);
        let n = 100_000u64;
        let sender = fiber_on(&rt, move || {
            for i in 0..n {
                tx.send_blocking(i).unwrap();
            }
        });
        let receiver = fiber_on(&rt, move || {
            let mut next = 0u64;
            while let Ok(v) = weft::wait(rx.recv()) {
                assert_eq!(v, next);
                next += 1;
            }
            next
        });
        join_within(sender, 60).unwrap();
        assert_eq!(join_within(receiver, 60).unwrap(), n);
    });
}

/// A fork-join half that waits for its sibling, while the sibling loops on waits that
/// are ready at once, on one worker. The ready-wait budget's yield inside the join used
/// to run the worker's loop on top of the looping half, which took the waiting half
/// from the deque there: it then blocked on top of the only one who could wake it
/// (found as a rare hang of `review_fib0::rendezvous_inside_forkjoin_join` under load).
/// The budget now yields only where the yield does not run work on top of a fork-join
/// computation in progress.
#[test]
fn ready_waits_in_a_join_half_do_not_bury_it_under_its_waiting_sibling() {
    with_timeout(|| {
        let rt = workers(1);
        for how in ["scope", "join"] {
            let h = fiber_on(&rt, move || {
                // Something else ready on this worker, so that a yield would run.
                let other = weft::fiber::spawn(|| ());
                let (tx, rx) = weft::chan::bounded::<u32>(1);
                let loop_then_send = move || {
                    for i in 0..1_000u32 {
                        assert_eq!(weft::wait(std::future::ready(i)), i);
                    }
                    tx.send_blocking(7).unwrap();
                };
                let got = match how {
                    "scope" => {
                        let mut got = 0;
                        let slot = &mut got;
                        weft::scope(|s| {
                            s.spawn(move |_| *slot = rx.recv_blocking().unwrap());
                            loop_then_send();
                        });
                        got
                    }
                    _ => weft::join(loop_then_send, move || rx.recv_blocking().unwrap()).1,
                };
                other.join().unwrap();
                got
            });
            assert_eq!(join_within(h, 20).unwrap(), 7, "{how}");
        }
    });
}
