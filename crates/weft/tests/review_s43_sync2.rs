//! Review (session 43): the signal-style primitives and the semaphore, from every
//! context (task `.await`, fiber blocking form, a task's poll blocking on its worker,
//! fork-join halves, plain threads), against their rustdoc and tokio's semantics.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use common::{fiber_on, join_within, watchdog, workers};
use weft::sync::{broadcast, oneshot, watch, Barrier, Notify, Semaphore, WaitGroup};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn noop_poll<F: Future + ?Sized>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

/// `acquire_many(0)` / `try_acquire_many(0)`: succeed at once even with a waiter
/// queued (tokio's), fail once closed; the zero permit gives nothing back.
#[test]
fn semaphore_zero_permit_acquires_in_every_form() {
    watchdog(30, || {
        let rt = workers(2);
        let sem = Arc::new(Semaphore::new(1));
        let held = sem.try_acquire().unwrap();
        // A waiter for 3 queues (polled here, so queued for sure) and absorbs the one
        // permit when it comes back.
        let mut waiter = Box::pin(sem.acquire_many(3));
        assert!(noop_poll(waiter.as_mut()).is_pending());
        let z = sem
            .try_acquire_many(0)
            .expect("zero permits with a waiter queued");
        assert_eq!(z.num_permits(), 0);
        drop(z);
        let z = rt.block_on(sem.acquire_many(0)).unwrap();
        drop(z);
        let z = sem.acquire_many_blocking(0).unwrap();
        drop(z);
        let s = sem.clone();
        let f = fiber_on(&rt, move || {
            s.acquire_many_blocking(0).map(|p| p.num_permits())
        });
        assert_eq!(join_within(f, 10).unwrap(), Ok(0));
        drop(held);
        assert_eq!(sem.available_permits(), 0, "the waiter absorbed the permit");
        sem.add_permits(2);
        match noop_poll(waiter.as_mut()) {
            Poll::Ready(Ok(p)) => assert_eq!(p.num_permits(), 3),
            other => panic!("the waiter was not served: {:?}", other.map(|r| r.is_ok())),
        }
        drop(waiter);
        assert_eq!(sem.available_permits(), 3);
        sem.close();
        assert!(sem.try_acquire_many(0).is_err());
        assert!(rt.block_on(sem.acquire_many(0)).is_err());
        assert!(sem.acquire_many_blocking(0).is_err());
    });
}

/// Many async tasks on a one-worker runtime each block in `Barrier::wait_blocking`
/// inside their poll (the worker sets each stack aside and runs the next task): the
/// generation completes with exactly one leader, twice in a row.
#[test]
fn barrier_blocking_waits_in_task_polls_on_one_worker() {
    watchdog(30, || {
        let rt = workers(1);
        const N: usize = 24;
        let b = Arc::new(Barrier::new(N));
        for round in 0..2 {
            let hs: Vec<_> = (0..N)
                .map(|_| {
                    let b = b.clone();
                    rt.spawn(async move { b.wait_blocking().is_leader() })
                })
                .collect();
            let leaders = hs
                .into_iter()
                .map(|h| join_within(h, 20).unwrap())
                .filter(|l| *l)
                .count();
            assert_eq!(leaders, 1, "round {round}");
        }
    });
}

/// A fiber inside a fork-join half takes a semaphore permit that another fiber of the
/// same (only) worker holds while it yields and sleeps.
#[test]
fn semaphore_blocking_acquire_inside_join_on_a_fiber_of_one_worker() {
    watchdog(30, || {
        let rt = workers(1);
        for round in 0..5 {
            let sem = Arc::new(Semaphore::new(1));
            let got = Arc::new(AtomicUsize::new(0));
            let holder = {
                let (s, g) = (sem.clone(), got.clone());
                fiber_on(&rt, move || {
                    let p = s.acquire_blocking().unwrap();
                    g.fetch_add(1, SeqCst);
                    for _ in 0..5 {
                        weft::fiber::yield_now();
                    }
                    weft::fiber::sleep(ms(5));
                    drop(p);
                })
            };
            common::wait_until("the holder has it", || got.load(SeqCst) == 1);
            let joiner = {
                let s = sem.clone();
                fiber_on(&rt, move || {
                    let (a, b) = weft::join(
                        || s.acquire_blocking().map(|p| p.num_permits()),
                        || s.acquire_blocking().map(|p| p.num_permits()),
                    );
                    (a.unwrap(), b.unwrap())
                })
            };
            join_within(holder, 20).unwrap();
            assert_eq!(join_within(joiner, 20).unwrap(), (1, 1), "round {round}");
            assert_eq!(sem.available_permits(), 1);
        }
    });
}

/// A `WaitGroup` waited on by tasks blocking inside their polls on a one-worker
/// runtime, with the `done`s coming from tasks spawned after them on that worker.
#[test]
fn wait_group_blocking_waits_in_task_polls_released_by_later_tasks() {
    watchdog(30, || {
        let rt = workers(1);
        for round in 0..3 {
            let wg = WaitGroup::new();
            wg.add(4);
            let waiters: Vec<_> = (0..6)
                .map(|_| {
                    let wg = wg.clone();
                    rt.spawn(async move { wg.wait_blocking() })
                })
                .collect();
            let doers: Vec<_> = (0..4)
                .map(|_| {
                    let wg = wg.clone();
                    rt.spawn(async move { wg.done() })
                })
                .collect();
            for h in doers.into_iter().chain(waiters) {
                join_within(h, 20).unwrap_or_else(|e| panic!("round {round}: {e:?}"));
            }
            // Reusable.
            wg.add(1);
            let w = wg.clone();
            let f = fiber_on(&rt, move || w.wait_blocking());
            std::thread::sleep(ms(5));
            assert!(!f.is_finished());
            wg.done();
            join_within(f, 10).unwrap();
        }
    });
}

#[derive(Clone, Copy, Debug)]
enum Ctx {
    Task,
    TaskBlocking,
    Fiber,
    Thread,
}

const CTXS: [Ctx; 4] = [Ctx::Task, Ctx::TaskBlocking, Ctx::Fiber, Ctx::Thread];

/// Runs `make()`'s future to completion in `ctx`; returns a joiner.
fn run_in<T, Fut>(
    rt: &weft::Runtime,
    ctx: Ctx,
    make: impl FnOnce() -> Fut + Send + 'static,
) -> Box<dyn FnOnce() -> T + Send>
where
    T: Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    match ctx {
        Ctx::Task => {
            let h = rt.spawn(make());
            Box::new(move || join_within(h, 20).unwrap())
        }
        Ctx::TaskBlocking => {
            let h = rt.spawn(async move { weft::wait(make()) });
            Box::new(move || join_within(h, 20).unwrap())
        }
        Ctx::Fiber => {
            let h = fiber_on(rt, move || weft::wait(make()));
            Box::new(move || join_within(h, 20).unwrap())
        }
        Ctx::Thread => {
            let h = std::thread::spawn(move || weft::wait(make()));
            Box::new(move || common::thread_within(h, 20))
        }
    }
}

/// A oneshot receiver waiting in every context: its sender sends, or is dropped, from
/// another plain thread at a random moment.
#[test]
fn oneshot_sender_sends_or_drops_on_another_thread_in_every_context() {
    watchdog(30, || {
        let rt = workers(2);
        let mut rng = common::Rng(0x5eed_1234_abcd_0001);
        for round in 0..60 {
            for ctx in CTXS {
                let (tx, rx) = oneshot::channel::<Box<u64>>();
                let j = run_in(&rt, ctx, move || rx);
                let send = rng.next().is_multiple_of(2);
                let pause = rng.next() % 300;
                let t = std::thread::spawn(move || {
                    common::spin_for(Duration::from_micros(pause));
                    if send {
                        tx.send(Box::new(round)).unwrap();
                    } else {
                        drop(tx);
                    }
                });
                let r = j();
                t.join().unwrap();
                if send {
                    assert_eq!(r.map(|b| *b), Ok(round), "{ctx:?} round {round}");
                } else {
                    assert!(r.is_err(), "{ctx:?} round {round}");
                }
            }
        }
    });
}

/// tokio's broadcast: a receiver that lagged gets `Lagged(n)`, then the oldest value
/// kept, then the rest, and `Closed` only after every kept value, also after the last
/// sender is gone; a receiver subscribed after the sends sees none of them.
#[test]
fn broadcast_lag_then_close_reads_like_tokio() {
    let (tx, mut rx) = broadcast::channel::<String>(2);
    let tx2 = tx.clone();
    for i in 0..5 {
        tx.send(i.to_string()).unwrap();
    }
    let mut late = tx.subscribe();
    drop(tx);
    assert_eq!(
        rx.try_recv(),
        Err(broadcast::error::TryRecvError::Lagged(3))
    );
    assert_eq!(rx.try_recv().as_deref(), Ok("3"));
    drop(tx2);
    assert_eq!(rx.recv_blocking().as_deref(), Ok("4"));
    assert_eq!(rx.recv_blocking(), Err(broadcast::error::RecvError::Closed));
    assert_eq!(late.try_recv(), Err(broadcast::error::TryRecvError::Closed));
}

/// A lagging receiver that has not read is dropped while the others read: every value
/// is dropped exactly once (counted by drops of the clones and the originals).
#[test]
fn broadcast_lagging_receivers_dropped_mid_stream_leak_nothing() {
    watchdog(30, || {
        let made = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        #[derive(Debug)]
        struct V(Arc<AtomicUsize>, Arc<AtomicUsize>);
        impl Clone for V {
            fn clone(&self) -> Self {
                self.0.fetch_add(1, SeqCst);
                V(self.0.clone(), self.1.clone())
            }
        }
        impl Drop for V {
            fn drop(&mut self) {
                self.1.fetch_add(1, SeqCst);
            }
        }
        {
            let (tx, rx) = broadcast::channel::<V>(4);
            let mut rxs: Vec<_> = (0..3).map(|_| tx.subscribe()).collect();
            drop(rx);
            for i in 0..23u32 {
                made.fetch_add(1, SeqCst);
                tx.send(V(made.clone(), dropped.clone())).unwrap();
                if i.is_multiple_of(3) {
                    let _ = rxs[0].try_recv();
                }
                if i == 11 {
                    let r = rxs.remove(1);
                    drop(r);
                }
            }
            let _ = rxs[1].try_recv();
            drop(tx);
            for _ in 0..100 {
                match rxs[0].try_recv() {
                    Ok(v) => drop(v),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                    Err(_) => break,
                }
            }
        }
        assert_eq!(made.load(SeqCst), dropped.load(SeqCst));
    });
}

/// watch: the last value and then the close, in every context, with the sender
/// dropped from another thread right after its last send.
#[test]
fn watch_last_value_then_close_in_every_context() {
    watchdog(30, || {
        let rt = workers(2);
        for round in 0..30u32 {
            let (tx, rx) = watch::channel(0u32);
            let joins: Vec<_> = CTXS
                .iter()
                .map(|&ctx| {
                    let mut rx = rx.clone();
                    run_in(&rt, ctx, move || async move {
                        let mut last = 0;
                        let mut changes = 0;
                        while rx.changed().await.is_ok() {
                            last = *rx.borrow_and_update();
                            changes += 1;
                            assert!(changes < 1000, "too many changes");
                        }
                        (last, rx.has_changed().is_err())
                    })
                })
                .collect();
            drop(rx);
            let t = std::thread::spawn(move || {
                for v in 1..=20 {
                    tx.send(v).unwrap();
                    if v.is_multiple_of(7) {
                        std::thread::yield_now();
                    }
                }
                drop(tx);
            });
            for j in joins {
                assert_eq!(j(), (20, true), "round {round}");
            }
            t.join().unwrap();
        }
    });
}

/// Notify, tokio's semantics: a `Notified` made before `notify_waiters` completes
/// without taking the stored permit; `notify_one` to waiters is FIFO; a waiter chosen
/// by `notify_one` and then dropped passes it on to the next one, not to the permit.
#[test]
fn notify_permit_and_generation_semantics() {
    let n = Notify::new();
    n.notify_one();
    let a = n.notified();
    n.notify_waiters();
    let mut a = pin!(a);
    assert!(noop_poll(a.as_mut()).is_ready());
    // The permit is still there.
    let mut b = pin!(n.notified());
    assert!(noop_poll(b.as_mut()).is_ready());
    let mut c = Box::pin(n.notified());
    let mut d = Box::pin(n.notified());
    assert!(noop_poll(c.as_mut()).is_pending());
    assert!(noop_poll(d.as_mut()).is_pending());
    n.notify_one();
    drop(c); // chosen, never saw it: d gets it
    assert!(noop_poll(d.as_mut()).is_ready());
    let mut e = pin!(n.notified());
    assert!(noop_poll(e.as_mut()).is_pending(), "no permit was stored");
}

/// A semaphore whose waiters (a task, a fiber, a task blocking in its poll, a plain
/// thread, each asking for 2) are cancelled at random moments while permits arrive in
/// small pieces: at the end every permit added is back.
#[test]
fn semaphore_waiters_cancelled_racing_piecewise_grants_keep_every_permit() {
    watchdog(60, || {
        let rt = workers(2);
        let mut rng = common::Rng(0x0dd_ba11_cafe_f00d);
        for round in 0..80 {
            let sem = Arc::new(Semaphore::new(0));
            let mut task_handles = Vec::new();
            let mut abortable = Vec::new();
            // Async task: aborted via its handle.
            {
                let s = sem.clone();
                let h = rt.spawn(async move {
                    let _p = s.acquire_many(2).await;
                });
                abortable.push(h.abort_handle());
                task_handles.push(h);
            }
            // Task blocking in its poll: cancelled through a timeout inside.
            {
                let s = sem.clone();
                let d = Duration::from_micros(rng.next() % 2000);
                task_handles.push(rt.spawn(async move {
                    let _ = weft::wait(weft::time::timeout(d, s.acquire_many(2)));
                }));
            }
            // Fiber: aborted via its handle.
            let fib = {
                let s = sem.clone();
                fiber_on(&rt, move || {
                    let _p = s.acquire_many_blocking(2);
                })
            };
            // Plain thread: a timed-out wait.
            let th = {
                let s = sem.clone();
                let d = Duration::from_micros(rng.next() % 2000);
                let handle = rt.handle().clone();
                std::thread::spawn(move || {
                    let _ = handle.block_on(weft::time::timeout(d, s.acquire_many(2)));
                })
            };
            let abort_at = rng.next() % 6;
            for step in 0..6 {
                if step == abort_at {
                    for a in &abortable {
                        a.abort();
                    }
                    fib.abort();
                }
                sem.add_permits(1);
                common::spin_for(Duration::from_micros(rng.next() % 300));
            }
            for h in task_handles {
                let _ = join_within(h, 20);
            }
            let _ = join_within(fib, 20);
            common::thread_within(th, 20);
            assert_eq!(
                sem.available_permits(),
                6,
                "round {round}: permits lost or made"
            );
        }
    });
}

/// The runtime is dropped (from another thread) while a fiber that absorbed part of
/// its permits waits in `acquire_many_blocking` and a task waits behind it, with a
/// plain thread behind both: the unwound fiber's and the cancelled task's permits go
/// on to the plain thread, and a `notify_one` racing the drop reaches either the
/// unwound fiber (then passed on) or the plain thread, never nobody.
#[test]
fn runtime_dropped_under_absorbing_waiters_passes_permits_and_notifications_on() {
    watchdog(60, || {
        let mut rng = common::Rng(0x1234_5678_9abc_def1);
        for round in 0..20 {
            let rt = workers(2);
            let sem = Arc::new(Semaphore::new(0));
            let notify = Arc::new(Notify::new());
            let queued = Arc::new(AtomicUsize::new(0));
            let fib = {
                let (s, n, q) = (sem.clone(), notify.clone(), queued.clone());
                fiber_on(&rt, move || {
                    q.fetch_add(1, SeqCst);
                    let p = s.acquire_many_blocking(5);
                    n.notified_blocking();
                    drop(p);
                })
            };
            common::wait_until("the fiber queued", || queued.load(SeqCst) == 1);
            std::thread::sleep(ms(2));
            let task = {
                let s = sem.clone();
                rt.spawn(async move { s.acquire_many(2).await.map(|p| p.forget()) })
            };
            std::thread::sleep(ms(2));
            let th = {
                let s = sem.clone();
                std::thread::spawn(move || s.acquire_many_blocking(4).map(|p| p.forget()))
            };
            std::thread::sleep(ms(2));
            // The fiber absorbs 3 of its 5.
            sem.add_permits(3);
            let notifier = {
                let n = notify.clone();
                let pause = rng.next() % 500;
                std::thread::spawn(move || {
                    common::spin_for(Duration::from_micros(pause));
                    n.notify_one();
                })
            };
            common::drop_within(rt, Duration::from_secs(20), "the runtime");
            notifier.join().unwrap();
            let _ = join_within(fib, 10);
            // Under load the task may queue before the fiber and be served (2 of the
            // 3); otherwise it was cancelled with the runtime. Either way the thread,
            // for 4, gets in once what is missing is added, and nothing is left over.
            let task_got = match join_within(task, 10) {
                Ok(r) => {
                    assert_eq!(r, Ok(()), "round {round}");
                    2
                }
                Err(e) => {
                    assert!(e.is_cancelled(), "round {round}: {e:?}");
                    0
                }
            };
            sem.add_permits(1 + task_got);
            assert_eq!(
                common::thread_within(th, 10),
                Ok(()),
                "round {round}: the thread got its 4"
            );
            assert_eq!(sem.available_permits(), 0, "round {round}");
            // The notification is either stored or was consumed by the fiber (which
            // then never dropped a permit since it never got 5): in this setup the
            // fiber never got past its acquire, so the permit must be stored.
            let mut f = pin!(notify.notified());
            assert!(
                noop_poll(f.as_mut()).is_ready(),
                "round {round}: the notify_one was lost"
            );
        }
    });
}

/// `oneshot::Sender::closed` in every context ends when the receiver is dropped or
/// closed on another thread; `send` then gives the value back.
#[test]
fn oneshot_sender_closed_in_every_context_sees_the_receiver_go() {
    watchdog(30, || {
        let rt = workers(2);
        for round in 0..20u32 {
            for ctx in CTXS {
                let (mut tx, mut rx) = oneshot::channel::<u32>();
                let j = run_in(&rt, ctx, move || async move {
                    tx.closed().await;
                    tx.send(7).unwrap_err()
                });
                let close = round.is_multiple_of(2);
                let t = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_micros(200));
                    if close {
                        rx.close();
                        // A closed receiver with no value: `Closed` at once.
                        assert_eq!(rx.try_recv(), Err(oneshot::error::TryRecvError::Closed));
                    }
                    drop(rx);
                });
                assert_eq!(j(), 7, "{ctx:?} round {round}");
                t.join().unwrap();
            }
        }
    });
}
