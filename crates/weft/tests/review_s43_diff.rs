//! Review of session 43's fixes: `Sleep::reset` moving its wheel entry or alarm with
//! the waker, `read_to_end`'s chunked zeroing, and a wait inside fork-join offering
//! its worker's private halves. (Its cases of thread hooks run with the runtime
//! entered went with that change, withdrawn.)

mod common;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{counter, load, watchdog};

// ---------------------------------------------------------------------------------
// `Sleep::reset` from a thread other than the waiter's.

type Shared = Arc<Mutex<Pin<Box<weft::time::Sleep>>>>;

/// Awaits the shared sleep, counting its polls.
struct Await(Shared, Arc<AtomicUsize>);

impl std::future::Future for Await {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.1.fetch_add(1, SeqCst);
        self.0.lock().unwrap().as_mut().poll(cx)
    }
}

fn shared_sleep(d: Duration) -> Shared {
    Arc::new(Mutex::new(Box::pin(weft::time::sleep(d))))
}

#[test]
fn a_sleep_reset_earlier_from_another_thread_wakes_its_task() {
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        for round in 0..20 {
            let s = rt.block_on(async { shared_sleep(Duration::from_secs(3600)) });
            let polls = counter();
            let h = rt.spawn(Await(s.clone(), polls.clone()));
            common::wait_until("the task polled the sleep", || load(&polls) > 0);
            let target = Instant::now() + Duration::from_millis(5 + round % 7);
            s.lock().unwrap().as_mut().reset(target);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(h.join());
            });
            let r = rx.recv_timeout(Duration::from_secs(10));
            assert!(
                r.is_ok(),
                "round {round}: the task was not woken at the new deadline"
            );
            assert!(Instant::now() >= target);
        }
    });
}

#[test]
fn a_sleep_reset_later_from_another_thread_does_not_end_early() {
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        for round in 0..5 {
            let s = rt.block_on(async { shared_sleep(Duration::from_millis(20)) });
            let polls = counter();
            let h = rt.spawn(Await(s.clone(), polls.clone()));
            common::wait_until("the task polled the sleep", || load(&polls) > 0);
            let target = Instant::now() + Duration::from_millis(150);
            s.lock().unwrap().as_mut().reset(target);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(h.join());
            });
            let r = rx.recv_timeout(Duration::from_secs(10));
            assert!(r.is_ok(), "round {round}: the task was never woken");
            assert!(
                Instant::now() >= target,
                "round {round}: the sleep ended before its new deadline"
            );
        }
    });
}

#[test]
fn resets_racing_the_firing_lose_no_wakeup() {
    // The deadline is about now: the driver fires the entry while another thread moves
    // it (to about now again, or a little later).
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        for round in 0..300u64 {
            let s = rt.block_on(async { shared_sleep(Duration::from_millis(1)) });
            let polls = counter();
            let h = rt.spawn(Await(s.clone(), polls.clone()));
            common::wait_until("the task polled the sleep", || load(&polls) > 0);
            let later = Duration::from_micros(round % 3 * 700);
            s.lock().unwrap().as_mut().reset(Instant::now() + later);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(h.join());
            });
            assert!(
                rx.recv_timeout(Duration::from_secs(10)).is_ok(),
                "round {round}: lost wakeup after a reset racing the fire"
            );
        }
    });
}

#[test]
fn a_sleep_reset_from_another_thread_after_its_runtime_is_gone() {
    // The runtime that bound the sleep is dropped: the sleep goes on the alarm
    // thread; a reset from another thread moves the alarm with the waker.
    watchdog(60, || {
        let waiter_rt = common::runtime(1, 0);
        for round in 0..10 {
            let bound = common::runtime(1, 0);
            let s = bound.block_on(async { shared_sleep(Duration::from_secs(3600)) });
            let polls = counter();
            let h = waiter_rt.spawn(Await(s.clone(), polls.clone()));
            common::wait_until("the task polled the sleep", || load(&polls) > 0);
            drop(bound);
            // Its drop woke the task, which filed an alarm.
            common::wait_until("the task polled the sleep again", || load(&polls) > 1);
            std::thread::sleep(Duration::from_millis(5));
            let target = Instant::now() + Duration::from_millis(10);
            s.lock().unwrap().as_mut().reset(target);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(h.join());
            });
            assert!(
                rx.recv_timeout(Duration::from_secs(10)).is_ok(),
                "round {round}: the task was not woken at the new deadline"
            );
            assert!(Instant::now() >= target);
        }
    });
}

#[test]
fn a_sleep_reset_while_its_runtime_shuts_down() {
    watchdog(60, || {
        let waiter_rt = common::runtime(1, 0);
        for round in 0..40u64 {
            let bound = common::runtime(1, 0);
            let s = bound.block_on(async { shared_sleep(Duration::from_secs(3600)) });
            let polls = counter();
            let h = waiter_rt.spawn(Await(s.clone(), polls.clone()));
            common::wait_until("the task polled the sleep", || load(&polls) > 0);
            let s2 = s.clone();
            let resetter = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(round % 5 * 100));
                let target = Instant::now() + Duration::from_millis(5);
                s2.lock().unwrap().as_mut().reset(target);
                target
            });
            drop(bound);
            let target = resetter.join().unwrap();
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(h.join());
            });
            assert!(
                rx.recv_timeout(Duration::from_secs(10)).is_ok(),
                "round {round}: lost wakeup for a reset racing the runtime's shutdown"
            );
            assert!(Instant::now() >= target);
        }
    });
}

#[test]
fn an_interval_reset_from_another_thread_keeps_its_task_waiting() {
    // `Interval::reset` moves the next tick a period on: the task stays pending, its
    // waker kept (cancelled by the runtime's drop, not lost).
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        let iv = rt.block_on(async {
            let mut iv = weft::time::interval(Duration::from_secs(3600));
            std::future::poll_fn(|cx| iv.poll_tick(cx)).await; // the first tick: at once
            Arc::new(Mutex::new(iv))
        });
        let polls = counter();
        let (iv2, p2) = (iv.clone(), polls.clone());
        let h = rt.spawn(std::future::poll_fn(move |cx| {
            p2.fetch_add(1, SeqCst);
            iv2.lock().unwrap().poll_tick(cx).map(|_| ())
        }));
        common::wait_until("the task polled the interval", || load(&polls) > 0);
        iv.lock().unwrap().reset();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!h.is_finished());
        common::drop_within(rt, Duration::from_secs(20), "interval task");
        assert!(h.join().is_err());
    });
}

// ---------------------------------------------------------------------------------
// Waits inside fork-join: the waiting worker's private halves are offered.

/// A gate: `open` sends, `wait` receives (blocking, a `weft::wait` inside).
fn gate<T>() -> (weft::chan::Sender<T>, weft::chan::Receiver<T>) {
    weft::chan::unbounded()
}

/// `f` inside a task of `rt`, failing the test if it does not end in 20 s.
fn in_task<R: Send + 'static>(
    rt: &weft::Runtime,
    what: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    let h = rt.spawn(async move { f() });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.join());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("hang: {what}"))
        .unwrap()
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn innermost_half_waits_for_the_outermost_sibling() {
    // The innermost `a` of three nested joins waits for what the outermost `b` does:
    // every frame below it goes to the deque, and the idle worker takes the oldest.
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        for round in 0..20 {
            let r = in_task(&rt, "innermost waits for outermost", move || {
                let (tx, rx) = gate();
                let ((x, y), z) = weft::join(
                    move || {
                        weft::join(
                            move || weft::join(move || rx.recv_blocking().unwrap(), || 1).0,
                            || 2,
                        )
                    },
                    move || {
                        tx.send_blocking(round).unwrap();
                        3
                    },
                );
                (x, y, z)
            });
            assert_eq!(r, (round, 2, 3));
        }
    });
}

#[test]
#[ignore = "finding, not fixed: a nested join run as plain calls (granularity control) has no second half to offer, so a first half waiting for it hangs"]
fn a_stolen_half_that_waits_for_a_half_left_with_its_owner() {
    // Worker 0: outer join (b_outer waits for B), inner join (b_inner opens A),
    // a_inner waits for A. Both frames go to the deque; the idle worker steals
    // b_outer (the oldest), which waits for B, and b_inner must still run somewhere
    // (on the thief, on top of its wait) for A to open, then B.
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        for round in 0..20 {
            let r = in_task(&rt, "stolen half waits", move || {
                let (a_tx, a_rx) = gate();
                let (b_tx, b_rx) = gate();
                weft::join(
                    move || {
                        weft::join(
                            move || a_rx.recv_blocking().unwrap(),
                            move || a_tx.send_blocking(()).unwrap(),
                        );
                        b_tx.send_blocking(round).unwrap();
                    },
                    move || b_rx.recv_blocking().unwrap(),
                )
                .1
            });
            assert_eq!(r, round);
        }
    });
}

#[test]
fn scope_jobs_that_wait_for_each_other_in_a_chain() {
    // Job k waits for job k + 1, which runs after it; the last one starts the chain.
    // Spawned in order, so the owner and the thief each wait with later jobs still
    // queued behind them.
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        for n in [2usize, 3, 5, 8] {
            let sum = in_task(&rt, "scope chain", move || {
                let total = AtomicUsize::new(0);
                let gates: Vec<_> = (0..n).map(|_| gate::<usize>()).collect();
                weft::scope(|s| {
                    for k in 0..n {
                        let total = &total;
                        let gates = &gates;
                        s.spawn(move |_| {
                            let got = if k + 1 < n {
                                gates[k].1.recv_blocking().unwrap()
                            } else {
                                0
                            };
                            total.fetch_add(got + k, SeqCst);
                            if k > 0 {
                                gates[k - 1].0.send_blocking(1).unwrap();
                            }
                        });
                    }
                });
                total.load(SeqCst)
            });
            assert_eq!(sum, n * (n - 1) / 2 + n - 1);
        }
    });
}

#[test]
#[ignore = "finding, not fixed (before session 43 too): a task left scheduled while one worker waits in a send and the other waits in join for its thief hangs the par_iter (about one run in four)"]
fn par_iter_items_blocking_on_a_channel_an_async_task_drains() {
    // Items send into a channel of one slot that a task of the same runtime drains.
    // A worker's send wakes the consumer into its LIFO slot; when that worker then
    // finishes its share and blocks in `join` for its thief (which runs no tasks),
    // the consumer is left there, where the other worker, blocked in a send, cannot
    // steal it. Hung in about one run in four on two workers (before session 43's
    // fix too).
    use weft::prelude::*;
    watchdog(120, || {
        let rt = common::runtime(2, 0);
        for round in 0..12 {
            let h = rt.spawn(async {
                let (tx, rx) = weft::chan::bounded::<u64>(1);
                let consumer = weft::spawn(async move {
                    let mut sum = 0u64;
                    while let Ok(v) = rx.recv().await {
                        sum += v;
                    }
                    sum
                });
                (0..2000u64)
                    .into_par_iter()
                    .for_each(|i| tx.send_blocking(i).unwrap());
                drop(tx);
                weft::wait(consumer).unwrap()
            });
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(h.join());
            });
            let Ok(got) = rx.recv_timeout(Duration::from_secs(8)) else {
                std::mem::forget(rt);
                panic!("hang: round {round}, par_iter sends into a channel a task drains");
            };
            assert_eq!(got.unwrap(), 2000 * 1999 / 2);
        }
        common::drop_within(rt, Duration::from_secs(20), "after the par_iter rounds");
    });
}

#[test]
fn par_iter_items_rendezvous_with_a_plain_thread() {
    use weft::prelude::*;
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        let (tx, rx) = weft::chan::bounded::<u64>(0);
        let feeder = std::thread::spawn(move || {
            for i in 0..400u64 {
                if tx.send_blocking(i).is_err() {
                    break;
                }
            }
        });
        let got = in_task(&rt, "par_iter receives from a plain thread", move || {
            (0..400u64)
                .into_par_iter()
                .map(|_| rx.recv_blocking().unwrap())
                .sum::<u64>()
        });
        feeder.join().unwrap();
        assert_eq!(got, 400 * 399 / 2);
    });
}

#[test]
fn one_worker_join_halves_with_waits_on_other_tasks() {
    // One worker: nobody can take the offered halves; a half that waits for another
    // task (which the waiting worker runs itself) must still end, and the halves must
    // still all run exactly once.
    watchdog(60, || {
        let rt = common::runtime(1, 0);
        let ran = Arc::new(AtomicUsize::new(0));
        let r2 = ran.clone();
        let v = in_task(&rt, "one worker", move || {
            fn rec(depth: u32, ran: &AtomicUsize) -> u64 {
                ran.fetch_add(1, SeqCst);
                if depth == 0 {
                    return weft::wait(weft::spawn(async { 1u64 })).unwrap();
                }
                let (a, b) = weft::join(|| rec(depth - 1, ran), || rec(depth - 1, ran));
                a + b
            }
            rec(6, &r2)
        });
        assert_eq!(v, 64);
        assert_eq!(load(&ran), 127);
    });
}

#[test]
#[ignore = "finding, not fixed: a join tree whose leaves wait on timers hangs now and then on four workers (about one run in three here); same family as the waits for a sibling half"]
fn many_workers_join_tree_with_timer_waits_at_the_leaves() {
    watchdog(60, || {
        let rt = common::runtime(4, 0);
        let ran = Arc::new(AtomicUsize::new(0));
        let r2 = ran.clone();
        let v = in_task(&rt, "join tree with sleeps", move || {
            fn rec(depth: u32, ran: &AtomicUsize) -> u64 {
                ran.fetch_add(1, SeqCst);
                if depth == 0 {
                    weft::wait(weft::time::sleep(Duration::from_micros(200)));
                    return 1;
                }
                let (a, b) = weft::join(|| rec(depth - 1, ran), || rec(depth - 1, ran));
                a + b
            }
            rec(8, &r2)
        });
        assert_eq!(v, 256);
        assert_eq!(load(&ran), 511);
        common::drop_within(rt, Duration::from_secs(20), "after the join tree");
    });
}

#[test]
fn a_join_half_waiting_at_the_runtime_drop() {
    // A join whose `a` waits for ever (its `b` never opens the gate): the runtime's
    // drop must still finish.
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        let (tx, rx) = gate::<()>();
        let started = Arc::new(AtomicBool::new(false));
        let s2 = started.clone();
        let h = rt.spawn(async move {
            weft::join(
                move || {
                    s2.store(true, SeqCst);
                    let _ = rx.recv_blocking();
                },
                || std::thread::sleep(Duration::from_millis(10)),
            );
        });
        assert!(common::wait_flag(&started, Duration::from_secs(20)));
        std::thread::sleep(Duration::from_millis(50));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(tx);
        });
        common::drop_within(rt, Duration::from_secs(20), "a join half in a wait");
        t.join().unwrap();
        // Its gate closed while it waited: the half ended, or the task was cancelled.
        let _ = common::thread_within(std::thread::spawn(move || h.join().is_ok()), 20);
    });
}

/// `depth` joins nested in their first halves, the innermost one's `a` waiting for
/// its own `b` (a gate `b` opens): rayon runs the pair on two threads at any depth.
fn nested_gate_join(depth: u32) -> u32 {
    if depth == 0 {
        let (tx, rx) = gate::<u32>();
        return weft::join(
            move || rx.recv_blocking().unwrap(),
            move || tx.send_blocking(7).unwrap(),
        )
        .0;
    }
    weft::join(|| nested_gate_join(depth - 1), || ()).0
}

#[test]
#[ignore = "finding, not fixed: a nested join run as plain calls (granularity control) has no second half to offer, so a first half waiting for it hangs"]
fn a_nested_join_half_waiting_for_its_sibling() {
    // Session 43's fix shows a waiting half's sibling to the idle worker, but only
    // siblings that have a frame: a join nested inside others (past the first private
    // frame, or three once shared) runs as two plain calls, `b` after `a`, seen by
    // nobody; an `a` that waits for its `b` then waits for ever, with any number of
    // idle workers.
    watchdog(60, || {
        for workers in [2usize, 4] {
            let rt = common::runtime(workers, 0);
            for depth in [1u32, 6] {
                let (tx, rx) = mpsc::channel();
                let h = rt.spawn(async move { nested_gate_join(depth) });
                std::thread::spawn(move || {
                    let _ = tx.send(h.join());
                });
                let Ok(r) = rx.recv_timeout(Duration::from_secs(10)) else {
                    // Leaked, not dropped: its drop would wait for the hung task.
                    std::mem::forget(rt);
                    panic!(
                        "hang: {workers} workers, a join nested {depth} deep whose `a` \
                         waits for its `b`"
                    );
                };
                assert_eq!(r.unwrap(), 7);
            }
            common::drop_within(rt, Duration::from_secs(20), "after the nested joins");
        }
    });
}

#[test]
#[ignore = "finding, not fixed: as a_nested_join_half_waiting_for_its_sibling (when the inner join runs as plain calls; racy here)"]
fn a_nested_join_half_waiting_for_its_sibling_from_a_plain_thread() {
    watchdog(60, || {
        let rt = common::runtime(2, 0);
        let handle = rt.handle().clone();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _in = handle.enter();
            let _ = tx.send(weft::join(|| nested_gate_join(1), || ()).0);
        });
        let Ok(r) = rx.recv_timeout(Duration::from_secs(10)) else {
            std::mem::forget(rt);
            panic!("hang: a plain thread's join, the nested `a` waiting for its `b`");
        };
        assert_eq!(r, 7);
        common::drop_within(rt, Duration::from_secs(20), "after the nested joins");
    });
}

/// `a` waits for a plain thread's message X, then sends Y; `b` waits for Y. Run in
/// order (`a`, then `b`) this ends; `b` run on top of `a`'s wait buries `a` under a
/// wait for what `a` sends after its own wait.
fn a_then_b_ordered(workers: usize, rounds: usize) -> Result<(), String> {
    let rt = common::runtime(workers, 0);
    for round in 0..rounds {
        let (x_tx, x_rx) = gate::<()>();
        let (y_tx, y_rx) = gate::<()>();
        let h = rt.spawn(async move {
            weft::join(
                move || {
                    x_rx.recv_blocking().unwrap();
                    y_tx.send_blocking(()).unwrap();
                },
                move || y_rx.recv_blocking().unwrap(),
            );
        });
        let feeder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            let _ = x_tx.send_blocking(());
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(h.join());
        });
        if rx.recv_timeout(Duration::from_secs(10)).is_err() {
            std::mem::forget(rt);
            return Err(format!(
                "hang: {workers} worker(s), round {round}: `b` ran on top of `a`'s wait"
            ));
        }
        feeder.join().unwrap();
    }
    common::drop_within(rt, Duration::from_secs(20), "after the ordered joins");
    Ok(())
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn a_join_whose_b_needs_what_a_does_after_its_wait_one_worker() {
    watchdog(60, || a_then_b_ordered(1, 5).unwrap());
}

#[test]
#[ignore = "finding, not fixed: a join or scope half that waits (weft::wait) for its sibling may hang: the sibling is a private frame never shown to an idle worker, or runs on the waiting worker above the wait"]
fn a_join_whose_b_needs_what_a_does_after_its_wait_two_workers() {
    watchdog(120, || a_then_b_ordered(2, 30).unwrap());
}

// ---------------------------------------------------------------------------------
// `read_to_end` / `read_to_string`: chunked zeroing of the spare capacity.

/// Serves `data` in pieces of `piece` bytes, `Pending` (woken at once) every other
/// poll, and claims `lie` bytes more than it wrote (clamped by the reader's room).
struct Odd {
    data: Vec<u8>,
    at: usize,
    piece: usize,
    lie: usize,
    flip: bool,
    largest_buf: usize,
}

impl weft::io::AsyncRead for Odd {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        self.flip = !self.flip;
        if self.flip {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.largest_buf = self.largest_buf.max(buf.len());
        let n = self.piece.min(buf.len()).min(self.data.len() - self.at);
        if n == 0 {
            return Poll::Ready(Ok(0));
        }
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        // Garbage past what it reports: must never show in the result.
        for b in buf[n..].iter_mut().take(8) {
            *b = 0xEE;
        }
        self.at += n;
        let lie = if n == self.piece.min(buf.len()) {
            0
        } else {
            self.lie
        };
        Poll::Ready(Ok(n + lie))
    }
}

fn odd(len: usize, piece: usize, lie: usize) -> Odd {
    Odd {
        data: (0..len).map(|i| (i * 7 % 251) as u8).collect(),
        at: 0,
        piece,
        lie,
        flip: false,
        largest_buf: 0,
    }
}

#[test]
fn read_to_end_in_odd_pieces_appends_exactly_the_data() {
    use weft::io::AsyncReadExt;
    watchdog(60, || {
        let rt = common::runtime(1, 0);
        rt.block_on(async {
            for (len, piece) in [
                (0, 1),
                (1, 1),
                (31, 1),
                (5000, 7),
                (70_000, 4096),
                (100_000, 100_000),
            ] {
                let mut r = odd(len, piece, 0);
                let mut buf = b"head".to_vec();
                let n = r.read_to_end(&mut buf).await.unwrap();
                assert_eq!(n, len);
                assert_eq!(&buf[..4], b"head");
                assert_eq!(&buf[4..], &r.data[..], "len {len} piece {piece}");
                let mut s = String::from("x");
                let mut r = odd(len, piece, 0);
                r.data.iter_mut().for_each(|b| *b = b'a' + *b % 26);
                let n = r.read_to_string(&mut s).await.unwrap();
                assert_eq!(n, len);
                assert_eq!(s.len(), len + 1);
                assert_eq!(&s.as_bytes()[1..], &r.data[..]);
            }
        });
    });
}

#[test]
fn read_to_end_with_a_reader_that_overstates_its_counts() {
    use weft::io::AsyncReadExt;
    watchdog(60, || {
        let rt = common::runtime(1, 0);
        rt.block_on(async {
            // The last, short piece of each read claims 3 bytes more than it wrote
            // (never past the room it was given).
            let mut r = odd(10_000, 3000, 3);
            let mut buf = Vec::new();
            let n = r.read_to_end(&mut buf).await.unwrap();
            assert!(n >= 10_000 && n == buf.len());
            assert_eq!(&buf[..3000], &r.data[..3000]);
        });
    });
}

#[test]
fn read_to_end_into_a_huge_capacity_zeroes_only_chunks() {
    use weft::io::AsyncReadExt;
    watchdog(60, || {
        let rt = common::runtime(1, 0);
        rt.block_on(async {
            let mut r = odd(100, 100, 0);
            let mut buf = Vec::with_capacity(1 << 30);
            let n = r.read_to_end(&mut buf).await.unwrap();
            assert_eq!(n, 100);
            assert_eq!(buf, r.data);
            assert!(
                r.largest_buf <= 64 * 1024,
                "the reader was handed {} zeroed bytes for a 100-byte read",
                r.largest_buf
            );
            assert!(buf.capacity() >= 1 << 30);
        });
    });
}

#[test]
fn read_to_end_dropped_midway_keeps_only_the_data() {
    use weft::io::AsyncReadExt;
    let mut r = odd(50_000, 999, 0);
    let mut buf = vec![1u8, 2, 3];
    {
        let mut fut = Box::pin(r.read_to_end(&mut buf));
        for _ in 0..20 {
            assert!(common::poll_once(fut.as_mut(), std::task::Waker::noop()).is_pending());
        }
    }
    // At most one read a poll after the first (each then meets a `Pending`).
    assert!(r.at > 0 && r.at <= 19 * 999);
    assert_eq!(buf.len(), 3 + r.at);
    assert_eq!(&buf[..3], &[1, 2, 3]);
    assert_eq!(&buf[3..], &r.data[..r.at]);
}
