//! Session 41 review of `weft::sync`: the primitives attacked from safe code (values
//! whose `Drop` panics, futures dropped at their waits and on other threads, timeouts
//! racing wakes, waiters of every context on one primitive at once).

mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::Poll;
use std::time::Duration;

use common::{counter, fiber_on, join_within, load, panic_message, watchdog, workers};
use weft::sync::{broadcast, oneshot, watch, Barrier, Mutex, Notify, RwLock, Semaphore};

const CHILD: &str = "WEFT_REVIEW_S41_SYNC_CHILD";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn poll_noop<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    common::poll_once(f, std::task::Waker::noop())
}

/// A value that counts its live copies and may panic when dropped.
struct Bomb {
    live: Arc<AtomicUsize>,
    panics: bool,
}

impl Bomb {
    fn new(live: &Arc<AtomicUsize>, panics: bool) -> Bomb {
        live.fetch_add(1, SeqCst);
        Bomb {
            live: live.clone(),
            panics,
        }
    }
}

impl Clone for Bomb {
    fn clone(&self) -> Bomb {
        Bomb::new(&self.live, self.panics)
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.live.fetch_sub(1, SeqCst);
        if self.panics {
            panic!("bomb dropped");
        }
    }
}

// ------------------------------------------------------------------ child processes

/// Not a real test unless run as a child: runs the case named by [`CHILD`].
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "broadcast_rx_drop" => child_broadcast_rx_drop(),
        "broadcast_channel_drop" => child_broadcast_channel_drop(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str) -> common::child::Output {
    common::child::run_case(CHILD, case, common::child::LIMIT)
}

/// A receiver dropped with two unread values whose `Drop` panics.
fn child_broadcast_rx_drop() {
    let live = counter();
    let (tx, rx) = broadcast::channel::<Bomb>(4);
    let keep = tx.subscribe(); // the values are shared: the receiver holds a share
    tx.send(Bomb::new(&live, true)).unwrap();
    tx.send(Bomb::new(&live, true)).unwrap();
    drop(keep); // now `rx` holds the last share of both
    let r = catch_unwind(AssertUnwindSafe(|| drop(rx)));
    let msg = r.err().map(|p| panic_message(&*p));
    assert_eq!(msg, Some(Some("bomb dropped".to_string())));
    assert_eq!(load(&live), 0, "every value was dropped");
    drop(tx);
}

/// A channel (its last sender and receiver) dropped with two unread values whose
/// `Drop` panics.
fn child_broadcast_channel_drop() {
    let live = counter();
    let (tx, rx) = broadcast::channel::<Bomb>(4);
    tx.send(Bomb::new(&live, true)).unwrap();
    tx.send(Bomb::new(&live, true)).unwrap();
    let r = catch_unwind(AssertUnwindSafe(move || {
        drop(rx);
        drop(tx);
    }));
    assert!(r.is_err(), "the value's panic reached the dropper");
}

/// Found in review (aborted before the fix): a broadcast receiver dropped while it holds the last share of two unread
/// values whose `Drop` panics aborts the process. `Receiver::drop` collects every value
/// it was the last reader of into a `Vec` (`freed`) and drops the `Vec` after the lock:
/// the first value's panic unwinds through the `Vec`'s drop, which goes on dropping the
/// second value, and that second panic during the unwind aborts. The mpsc channels
/// (`review_s38_chan::values_whose_drop_panics_in_a_dropped_channel`) and the ordered
/// receiver (`chan_ordered`, commit e074eb3) let the first panic reach the dropper
/// instead. Fixed: `Receiver::drop` drops the freed values one at a time (`drop_each`).
#[test]
fn broadcast_receiver_dropped_with_two_panicking_values_does_not_abort() {
    watchdog(15, || {
        let out = run_child("broadcast_rx_drop");
        out.assert_finished();
    });
}

/// Found in review (aborted before the fix): the same with the whole channel dropped: its ring (`Box<[Option<Slot>]>`)
/// holds two values whose `Drop` panics, and dropping the ring drops the second during
/// the first's unwind: the process aborts. Fixed: `State`'s `Drop` drops the ring's values one at a
/// time (`drop_each`).
#[test]
fn broadcast_channel_dropped_with_two_panicking_values_does_not_abort() {
    watchdog(15, || {
        let out = run_child("broadcast_channel_drop");
        out.assert_finished();
    });
}

// ------------------------------------------------------------------ timeouts racing wakes

/// Deterministic pseudo-random pauses per participant.
fn rng(seed: u64) -> common::Rng {
    common::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
}

/// `notify_one` handed one at a time (the next only after the previous was consumed)
/// to waiters of every context, the task ones under short `timeout`s that race the
/// hand-off: a waiter chosen and then dropped by its timeout passes the notification
/// on, so none is lost (a lost one hangs the notifier's wait for consumption).
#[test]
fn notify_one_racing_timeouts_in_every_context_loses_no_token() {
    watchdog(20, || {
        let rt = workers(2);
        let n = Arc::new(Notify::new());
        let got = counter();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut hs = Vec::new();
        for k in 0..3u64 {
            let (n, got, stop) = (n.clone(), got.clone(), stop.clone());
            hs.push(rt.spawn(async move {
                let mut r = rng(k + 1);
                while !stop.load(SeqCst) {
                    let d = Duration::from_micros(r.below(300));
                    if weft::time::timeout(d, n.notified()).await.is_ok() {
                        got.fetch_add(1, SeqCst);
                    }
                }
            }));
        }
        for _ in 0..2 {
            let (n, got, stop) = (n.clone(), got.clone(), stop.clone());
            hs.push(fiber_on(&rt, move || {
                while !stop.load(SeqCst) {
                    n.notified_blocking();
                    got.fetch_add(1, SeqCst);
                }
            }));
        }
        let thread = {
            let (n, got, stop) = (n.clone(), got.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    n.notified_blocking();
                    got.fetch_add(1, SeqCst);
                }
            })
        };
        const TOKENS: usize = 600;
        for i in 0..TOKENS {
            n.notify_one();
            common::wait_until(&format!("token {i} consumed"), || load(&got) > i);
            assert_eq!(load(&got), i + 1, "one notify_one completed two waits");
        }
        stop.store(true, SeqCst);
        // Release the blocked ones: one token each for the thread and the fibers.
        for _ in 0..8 {
            n.notify_waiters();
            std::thread::sleep(ms(2));
        }
        thread.join().unwrap();
        for h in hs {
            join_within(h, 5).unwrap();
        }
    });
}

/// Permits acquired in every context, the async ones under `timeout`s racing the
/// hand-off (a permit handed to a waiter its timeout then drops goes to the next
/// one): never more holders than permits, and every permit back at the end.
#[test]
fn semaphore_timeouts_racing_hand_offs_keep_count_and_bound() {
    watchdog(20, || {
        let rt = workers(2);
        let sem = Arc::new(Semaphore::new(3));
        let inside = counter();
        let peak = counter();
        let enter = {
            let (inside, peak) = (inside.clone(), peak.clone());
            move |k: usize| {
                let now = inside.fetch_add(k, SeqCst) + k;
                peak.fetch_max(now, SeqCst);
                std::hint::spin_loop();
                inside.fetch_sub(k, SeqCst);
            }
        };
        let mut hs = Vec::new();
        for t in 0..3u64 {
            let (sem, enter) = (sem.clone(), enter.clone());
            hs.push(rt.spawn(async move {
                let mut r = rng(10 + t);
                for _ in 0..300 {
                    let k = 1 + r.below(3) as u32;
                    let d = Duration::from_micros(r.below(200));
                    if let Ok(p) = weft::time::timeout(d, sem.acquire_many(k)).await {
                        let p = p.unwrap();
                        enter(k as usize);
                        drop(p);
                    }
                }
            }));
        }
        for f in 0..2u64 {
            let (sem, enter) = (sem.clone(), enter.clone());
            hs.push(fiber_on(&rt, move || {
                let mut r = rng(20 + f);
                for _ in 0..300 {
                    let k = 1 + r.below(3) as u32;
                    let p = sem.acquire_many_blocking(k).unwrap();
                    enter(k as usize);
                    drop(p);
                }
            }));
        }
        let thread = {
            let (sem, enter) = (sem.clone(), enter.clone());
            std::thread::spawn(move || {
                for _ in 0..300 {
                    let p = sem.acquire_many_blocking(2).unwrap();
                    enter(2);
                    drop(p);
                }
            })
        };
        thread.join().unwrap();
        for h in hs {
            join_within(h, 10).unwrap();
        }
        assert!(
            load(&peak) <= 3,
            "{} permits held at once of 3",
            load(&peak)
        );
        assert_eq!(sem.available_permits(), 3);
        assert!(sem.try_acquire_many(3).is_ok());
    });
}

/// A barrier of three (a task that sleeps at random between rounds, a fiber, a
/// thread): each round exactly one leader, and nobody passes a round
/// before every peer arrived (a lost arrival hangs a round, a doubled one ends it
/// early). (Not under `timeout`: a wait released between the inner poll and the
/// timer's poll reports `Elapsed` although its arrival counted, as documented, so a
/// timed-out barrier wait cannot be retried: a documented limitation.)
#[test]
fn barrier_rounds_in_every_context_have_one_leader_each() {
    watchdog(20, || {
        let rt = workers(2);
        let b = Arc::new(Barrier::new(3));
        let leaders = counter();
        let phase = Arc::new([
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ]);
        const ROUNDS: usize = 150;
        let check = {
            let phase = phase.clone();
            move |me: usize, round: usize| {
                // Nobody may be past this round's barrier while someone has not arrived.
                phase[me].store(round + 1, SeqCst);
                for p in phase.iter() {
                    let v = p.load(SeqCst);
                    assert!(v >= round && v <= round + 2, "round {round}: a peer at {v}");
                }
            }
        };
        let task = {
            let (b, leaders, check) = (b.clone(), leaders.clone(), check.clone());
            rt.spawn(async move {
                let mut r = rng(7);
                for round in 0..ROUNDS {
                    if r.below(2) == 0 {
                        weft::time::sleep(Duration::from_micros(r.below(200))).await;
                    }
                    if b.wait().await.is_leader() {
                        leaders.fetch_add(1, SeqCst);
                    }
                    check(0, round);
                }
            })
        };
        let fiber = {
            let (b, leaders, check) = (b.clone(), leaders.clone(), check.clone());
            fiber_on(&rt, move || {
                for round in 0..ROUNDS {
                    if b.wait_blocking().is_leader() {
                        leaders.fetch_add(1, SeqCst);
                    }
                    check(1, round);
                }
            })
        };
        let thread = {
            let (b, leaders) = (b.clone(), leaders.clone());
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    if b.wait_blocking().is_leader() {
                        leaders.fetch_add(1, SeqCst);
                    }
                    check(2, round);
                }
            })
        };
        common::thread_within(thread, 15);
        join_within(task, 5).unwrap();
        join_within(fiber, 5).unwrap();
        assert_eq!(load(&leaders), ROUNDS);
    });
}

// ------------------------------------------------------------------ drops and aborts

/// A oneshot receiver awaited by a task that is aborted while a plain thread sends:
/// the value is either received or dropped, exactly once, and the sender's result
/// says which (`Err` gives it back).
#[test]
fn oneshot_receiver_task_aborted_racing_the_send_drops_the_value_once() {
    watchdog(20, || {
        let rt = workers(2);
        let live = common::live();
        let mut r = rng(3);
        for i in 0..300 {
            let (tx, rx) = oneshot::channel::<common::Tracked>();
            let got = counter();
            let g = got.clone();
            let h = rt.spawn(async move {
                if rx.await.is_ok() {
                    g.fetch_add(1, SeqCst);
                }
            });
            let pause = r.below(60);
            let v = common::Tracked::new(i, &live);
            let sender = std::thread::spawn(move || {
                common::spin_for(Duration::from_micros(pause));
                tx.send(v).is_ok()
            });
            common::spin_for(Duration::from_micros(r.below(60)));
            h.abort();
            let sent = sender.join().unwrap();
            let _ = join_within(h, 5);
            assert!(load(&got) <= 1);
            if !sent {
                assert_eq!(load(&got), 0, "round {i}: a failed send was received");
            }
            assert_eq!(load(&live), 0, "round {i}: the value was not dropped");
        }
    });
}

/// Broadcast receives in every context, the task's futures polled once and then
/// dropped on another thread while values are sent: every copy made is dropped (live
/// count back to zero), and the thread and fiber see every value in order.
#[test]
fn broadcast_recv_futures_dropped_on_other_threads_leak_no_copy() {
    watchdog(20, || {
        let rt = workers(2);
        let live = counter();
        #[derive(Debug)]
        struct V(u64, Arc<AtomicUsize>);
        impl Clone for V {
            fn clone(&self) -> V {
                self.1.fetch_add(1, SeqCst);
                V(self.0, self.1.clone())
            }
        }
        impl Drop for V {
            fn drop(&mut self) {
                self.1.fetch_sub(1, SeqCst);
            }
        }
        let (tx, rx_thread) = broadcast::channel::<V>(1024);
        let rx_fiber = tx.subscribe();
        let rx_task = tx.subscribe();
        const N: u64 = 400;
        let thread = std::thread::spawn(move || {
            let mut rx = rx_thread;
            (0..N).all(|i| rx.recv_blocking().map(|v| v.0) == Ok(i))
        });
        let fiber = fiber_on(&rt, move || {
            let mut rx = rx_fiber;
            (0..N).all(|i| rx.recv_blocking().map(|v| v.0) == Ok(i))
        });
        let (drop_tx, drop_rx) = mpsc::channel::<Box<dyn Send>>();
        let dropper = std::thread::spawn(move || {
            for f in drop_rx {
                common::spin_for(Duration::from_micros(20));
                drop(f);
            }
        });
        let sender = {
            let (tx, live) = (tx.clone(), live.clone());
            std::thread::spawn(move || {
                for i in 0..N {
                    live.fetch_add(1, SeqCst);
                    tx.send(V(i, live.clone())).unwrap();
                    if i % 8 == 0 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            })
        };
        let task_side = {
            let tx = tx.clone();
            rt.spawn(async move {
                for round in 0..300u32 {
                    let rx = tx.subscribe();
                    let mut fut: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
                        let mut rx = rx;
                        for _ in 0..round % 3 {
                            let _ = rx.recv().await;
                        }
                    });
                    let polled = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx)));
                    if polled.await.is_pending() {
                        drop_tx.send(Box::new(fut)).unwrap();
                    }
                    if round % 16 == 0 {
                        weft::time::sleep(Duration::from_micros(100)).await;
                    }
                }
                drop(drop_tx);
            })
        };
        sender.join().unwrap();
        join_within(task_side, 10).unwrap();
        dropper.join().unwrap();
        assert!(
            common::thread_within(thread, 10),
            "the thread missed a value"
        );
        assert!(join_within(fiber, 10).unwrap(), "the fiber missed a value");
        drop(rx_task);
        drop(tx);
        assert_eq!(load(&live), 0, "copies left alive");
    });
}

// ------------------------------------------------------------------ every context at once

/// `changed` waited on by a thread, a fiber and a task (under a `timeout` it retries)
/// while the sender sends a last value and is dropped: each sees the last value as a
/// change (`Ok`, with that value borrowed) and then the close (`Err`), never a hang.
#[test]
fn watch_changed_in_every_context_sees_the_last_value_then_the_close() {
    watchdog(20, || {
        let rt = workers(2);
        for round in 0..40u64 {
            let (tx, rx) = watch::channel(0u64);
            let (mut a, mut b, mut c) = (rx.clone(), rx.clone(), rx);
            let thread = std::thread::spawn(move || {
                let mut last = 0;
                while a.changed_blocking().is_ok() {
                    last = *a.borrow_and_update();
                }
                last
            });
            let fiber = fiber_on(&rt, move || {
                let mut last = 0;
                while b.changed_blocking().is_ok() {
                    last = *b.borrow_and_update();
                }
                last
            });
            let task = rt.spawn(async move {
                let mut last = 0;
                loop {
                    match weft::time::timeout(Duration::from_micros(150), c.changed()).await {
                        Ok(Ok(())) => last = *c.borrow_and_update(),
                        Ok(Err(_)) => break,
                        Err(_) => {}
                    }
                }
                last
            });
            let mut r = rng(round + 100);
            for v in 1..=5 {
                common::spin_for(Duration::from_micros(r.below(100)));
                tx.send(v).unwrap();
            }
            common::spin_for(Duration::from_micros(r.below(100)));
            drop(tx);
            assert_eq!(common::thread_within(thread, 5), 5, "round {round}: thread");
            assert_eq!(join_within(fiber, 5).unwrap(), 5, "round {round}: fiber");
            assert_eq!(join_within(task, 5).unwrap(), 5, "round {round}: task");
        }
    });
}

/// Readers and writers of every context on one `RwLock`, the async writers under
/// `timeout`s that drop them while they hold back the permits they absorbed: writers
/// exclude everyone, and once all are done the lock is free for a writer at once.
#[test]
fn rwlock_writers_timing_out_in_line_keep_exclusion_and_free_the_lock() {
    watchdog(20, || {
        let rt = workers(2);
        let lock = Arc::new(RwLock::new(0u64));
        let readers = counter();
        let writers = counter();
        let check_read = {
            let (readers, writers) = (readers.clone(), writers.clone());
            move || {
                readers.fetch_add(1, SeqCst);
                assert_eq!(load(&writers), 0, "a reader beside a writer");
                std::hint::spin_loop();
                readers.fetch_sub(1, SeqCst);
            }
        };
        let check_write = {
            let (readers, writers) = (readers.clone(), writers.clone());
            move || {
                assert_eq!(writers.fetch_add(1, SeqCst), 0, "two writers");
                assert_eq!(load(&readers), 0, "a writer beside a reader");
                std::hint::spin_loop();
                writers.fetch_sub(1, SeqCst);
            }
        };
        let mut hs = Vec::new();
        for t in 0..2u64 {
            let (lock, cw, cr) = (lock.clone(), check_write.clone(), check_read.clone());
            hs.push(rt.spawn(async move {
                let mut r = rng(30 + t);
                for _ in 0..300 {
                    let d = Duration::from_micros(r.below(150));
                    if r.below(2) == 0 {
                        if let Ok(mut g) = weft::time::timeout(d, lock.write()).await {
                            cw();
                            *g += 1;
                        }
                    } else if let Ok(_g) = weft::time::timeout(d, lock.read()).await {
                        cr();
                    }
                }
            }));
        }
        {
            let (lock, cw, cr) = (lock.clone(), check_write.clone(), check_read.clone());
            hs.push(fiber_on(&rt, move || {
                for i in 0..300 {
                    if i % 5 == 0 {
                        let mut g = lock.write_blocking();
                        cw();
                        *g += 1;
                    } else {
                        let _g = lock.read_blocking();
                        cr();
                    }
                }
            }));
        }
        let thread = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    if i % 7 == 0 {
                        let mut g = lock.write_blocking();
                        check_write();
                        *g += 1;
                    } else {
                        let _g = lock.read_blocking();
                        check_read();
                    }
                }
            })
        };
        common::thread_within(thread, 15);
        for h in hs {
            join_within(h, 10).unwrap();
        }
        assert!(lock.try_write().is_ok(), "the lock was left held or queued");
    });
}

/// Mutex lock futures polled once (queued) and then dropped on another thread while
/// the holder releases, beside a plain thread and a fiber in `lock_blocking`: a lock
/// handed to a dropped future goes on to the next waiter, so the blocked ones always
/// get it and the mutex ends free.
#[test]
fn mutex_lock_futures_dropped_on_another_thread_pass_the_lock_on() {
    watchdog(20, || {
        let rt = workers(2);
        let m = Arc::new(Mutex::new(0u64));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let blocked = {
            let (m, stop) = (m.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    *m.lock_blocking() += 1;
                    n += 1;
                }
                n
            })
        };
        let fiber = {
            let (m, stop) = (m.clone(), stop.clone());
            fiber_on(&rt, move || {
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    *m.lock_blocking() += 1;
                    n += 1;
                }
                n
            })
        };
        let mut r = rng(55);
        for _ in 0..300 {
            let holder = m.clone().try_lock_owned();
            let mut fut = Box::pin(m.clone().lock_owned());
            let _ = poll_noop(fut.as_mut());
            let pause = r.below(40);
            let dropper = std::thread::spawn(move || {
                common::spin_for(Duration::from_micros(pause));
                drop(fut);
            });
            common::spin_for(Duration::from_micros(r.below(40)));
            drop(holder);
            dropper.join().unwrap();
        }
        stop.store(true, SeqCst);
        let a = common::thread_within(blocked, 5);
        let b = join_within(fiber, 5).unwrap();
        assert_eq!(*m.try_lock().expect("the mutex ends free"), a + b);
    });
}
