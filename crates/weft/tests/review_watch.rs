//! Adversarial review of commit 8191f74: an idle worker watches for work before its
//! sleep transition (`Core::watch_for_work`), a worker searches only if a peer has work
//! (`steal_work`), and blocking acquires (`wait_acquire`) spin only where a release is
//! near. Each test drives work at a watching worker from a place the watch must see
//! (another thread, a timer, a socket, an injected fork-join job, a nested wait, a
//! shutdown) or checks the blocking locks' fairness and liveness; every body runs under
//! a watchdog that fails the test instead of hanging the suite.
//!
//! The watch was later taken out again (its eager stealing of tiny tasks cost more
//! than it saved; see ARCHITECTURE.md, "Spin, then sleep"): idle workers spin inside
//! `park` again, as before it; the blocking acquires' spin is back as it was too. The
//! tests stand for those paths as they did for the changes: each drives work at an
//! idle worker from one of those places, or checks the locks.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{child, spin_for, Rng};
use weft::sync::{Mutex, RwLock, Semaphore};
use weft::Builder;

/// Generous: CI runs many tests on two cores, and a process may be stopped a while.
const LIMIT: Duration = Duration::from_secs(120);

/// Runs `f` on a thread of its own; panics with "hang" if it has not finished within
/// [`LIMIT`], re-raises its panic otherwise.
fn watchdog<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    common::with_limit(LIMIT, f)
}

/// A plain thread wakes a task (through a channel) again and again, with gaps that
/// land in the worker's watch window: every message must arrive (a wake lost while
/// the worker watched would hang the round trip).
#[test]
fn plain_thread_wakes_tasks_while_workers_watch() {
    for workers in [1, 2, 4] {
        watchdog(move || {
            let rt = common::workers(workers);
            let (to_task, from_thread) = weft::chan::bounded::<u64>(1);
            let (to_thread, from_task) = weft::chan::bounded::<u64>(1);
            let echo = rt.spawn(async move {
                while let Ok(v) = from_thread.recv().await {
                    to_thread.send(v + 1).await.unwrap();
                }
            });
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ workers as u64);
            for i in 0..3_000u64 {
                spin_for(Duration::from_nanos(rng.next() % 20_000));
                to_task.send_blocking(i).unwrap();
                assert_eq!(from_task.recv_blocking().unwrap(), i + 1);
            }
            drop(to_task);
            echo.join().unwrap();
        });
    }
}

/// Two fibers ping-pong (a fiber woken from another worker goes to its own worker's
/// inbox, which the watch looks at): every message arrives, on 1, 2 and 4 workers,
/// with random gaps on the sending side.
#[test]
fn fiber_ping_pong_across_watching_workers() {
    for workers in [1, 2, 4] {
        watchdog(move || {
            let rt = common::workers(workers);
            rt.block_on(async move {
                let (a_tx, a_rx) = weft::chan::bounded::<u32>(0);
                let (b_tx, b_rx) = weft::chan::bounded::<u32>(0);
                let n = 5_000u32;
                let ping = weft::fiber::spawn(move || {
                    let mut rng = Rng(7);
                    for i in 0..n {
                        if rng.next().is_multiple_of(4) {
                            spin_for(Duration::from_nanos(rng.next() % 10_000));
                        }
                        a_tx.send_blocking(i).unwrap();
                        assert_eq!(b_rx.recv_blocking().unwrap(), i);
                    }
                });
                let pong = weft::fiber::spawn(move || {
                    for _ in 0..n {
                        let v = a_rx.recv_blocking().unwrap();
                        b_tx.send_blocking(v).unwrap();
                    }
                });
                ping.await.unwrap();
                pong.await.unwrap();
            });
        });
    }
}

/// Timers that come due while the only worker watches (or several do) fire, and no
/// sleep ends early: short sleeps from tasks and fibers, back to back.
#[test]
fn timers_fire_while_workers_watch() {
    for workers in [1, 2, 4] {
        watchdog(move || {
            let rt = common::workers(workers);
            let fired = Arc::new(AtomicUsize::new(0));
            let mut handles = Vec::new();
            for t in 0..4u64 {
                let fired = fired.clone();
                handles.push(rt.spawn(async move {
                    for i in 0..40u64 {
                        let d = Duration::from_micros(200 + (t * 37 + i * 91) % 1_500);
                        let start = Instant::now();
                        weft::time::sleep(d).await;
                        assert!(start.elapsed() >= d, "a sleep of {d:?} ended early");
                        fired.fetch_add(1, SeqCst);
                    }
                }));
            }
            let fibers = {
                let fired = fired.clone();
                rt.block_on(async move {
                    let mut fs = Vec::new();
                    for t in 0..2u64 {
                        let fired = fired.clone();
                        fs.push(weft::fiber::spawn(move || {
                            for i in 0..40u64 {
                                let d = Duration::from_micros(300 + (t * 53 + i * 71) % 1_200);
                                let start = Instant::now();
                                weft::fiber::sleep(d);
                                assert!(start.elapsed() >= d, "a fiber sleep ended early");
                                fired.fetch_add(1, SeqCst);
                            }
                        }));
                    }
                    fs
                })
            };
            for h in handles {
                h.join().unwrap();
            }
            for f in fibers {
                f.join().unwrap();
            }
            assert_eq!(fired.load(SeqCst), 4 * 40 + 2 * 40);
        });
    }
}

/// A task on a worker blocks in `weft::wait` (a nested `run_until` whose `done` the
/// watch checks) on a timer and on a value a plain thread sends after a short gap.
#[test]
fn nested_wait_on_a_worker_sees_done_while_watching() {
    for workers in [1, 2] {
        watchdog(move || {
            let rt = common::workers(workers);
            let (tx, rx) = weft::chan::bounded::<u32>(1);
            let waiter = rt.spawn(async move {
                let mut sum = 0u64;
                for i in 0..300u32 {
                    if i % 3 == 0 {
                        let start = Instant::now();
                        weft::wait(weft::time::sleep(Duration::from_micros(300)));
                        assert!(start.elapsed() >= Duration::from_micros(300));
                    }
                    sum += weft::wait(rx.recv()).unwrap() as u64;
                }
                sum
            });
            let mut rng = Rng(99);
            for i in 0..300u32 {
                spin_for(Duration::from_nanos(rng.next() % 15_000));
                tx.send_blocking(i).unwrap();
            }
            assert_eq!(waiter.join().unwrap(), (0..300u64).sum::<u64>());
        });
    }
}

/// Fork-join work injected from plain threads (the injection queue, which a watcher
/// looks at every few batches) while the workers are idle between rounds.
#[test]
fn fork_join_injected_from_plain_threads_while_workers_watch() {
    for workers in [1, 2, 4] {
        watchdog(move || {
            let rt = Arc::new(common::workers(workers));
            let threads: Vec<_> = (0..3u64)
                .map(|t| {
                    let rt = rt.clone();
                    std::thread::spawn(move || {
                        let _g = rt.enter();
                        let mut rng = Rng(t + 11);
                        for _ in 0..150 {
                            spin_for(Duration::from_nanos(rng.next() % 30_000));
                            assert_eq!(common::fib(12), 144);
                            let (a, b) = weft::join(|| 1u32, || 2u32);
                            assert_eq!(a + b, 3);
                            let n = AtomicUsize::new(0);
                            weft::scope(|s| {
                                for _ in 0..4 {
                                    s.spawn(|_| {
                                        n.fetch_add(1, SeqCst);
                                    });
                                }
                            });
                            assert_eq!(n.load(SeqCst), 4);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        });
    }
}

/// A socket is registered, and becomes readable, while every worker is idle (so
/// watching or asleep): readiness must reach the reader each time. Loopback only.
#[test]
fn socket_readiness_reaches_a_reader_while_workers_watch() {
    for workers in [1, 2] {
        watchdog(move || {
            let rt = common::workers(workers);
            let (addr_tx, addr_rx) = mpsc::channel();
            let server = rt.spawn(async move {
                let l = weft::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(l.local_addr().unwrap()).unwrap();
                let (mut s, _) = l.accept().await.unwrap();
                let mut total = 0usize;
                let mut buf = [0u8; 64];
                loop {
                    use futures_io_ext::*;
                    let n = read_some(&mut s, &mut buf).await;
                    if n == 0 {
                        break total;
                    }
                    total += n;
                    write_all(&mut s, &buf[..n]).await;
                }
            });
            let addr = addr_rx.recv_timeout(LIMIT).unwrap();
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let mut rng = Rng(5);
            for i in 0..400u32 {
                spin_for(Duration::from_nanos(rng.next() % 40_000));
                let msg = i.to_le_bytes();
                c.write_all(&msg).unwrap();
                let mut back = [0u8; 4];
                c.read_exact(&mut back).unwrap();
                assert_eq!(back, msg);
            }
            c.shutdown(std::net::Shutdown::Write).unwrap();
            assert_eq!(server.join().unwrap(), 400 * 4);
        });
    }
}

/// Minimal async read/write helpers over `futures_io` (no extra dependency).
mod futures_io_ext {
    use std::future::poll_fn;
    use std::pin::Pin;

    pub async fn read_some<S: futures_io::AsyncRead + Unpin>(s: &mut S, buf: &mut [u8]) -> usize {
        poll_fn(|cx| Pin::new(&mut *s).poll_read(cx, buf))
            .await
            .unwrap()
    }

    pub async fn write_all<S: futures_io::AsyncWrite + Unpin>(s: &mut S, mut buf: &[u8]) {
        while !buf.is_empty() {
            let n = poll_fn(|cx| Pin::new(&mut *s).poll_write(cx, buf))
                .await
                .unwrap();
            buf = &buf[n..];
        }
    }
}

/// Runtimes dropped while their workers watch (right after a burst of small tasks, or
/// with no work at all): the drop returns.
#[test]
fn runtime_dropped_while_workers_watch() {
    watchdog(|| {
        for round in 0..60usize {
            let rt = common::workers(1 + round % 4);
            let n = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..round % 7)
                .map(|_| {
                    let n = n.clone();
                    rt.spawn(async move {
                        n.fetch_add(1, SeqCst);
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            spin_for(Duration::from_nanos((round as u64 % 5) * 3_000));
            drop(rt);
            assert_eq!(n.load(SeqCst), round % 7);
        }
    });
}

/// A temporary worker (started while the only base worker is stuck) retires after its
/// keep-alive; timers and cross-thread wakes keep working before and after.
#[test]
fn temporary_worker_retires_and_the_pool_still_wakes() {
    watchdog(|| {
        let rt = Builder::new()
            .worker_threads(1)
            .max_extra_workers(1)
            .extra_worker_keep_alive(Duration::from_millis(50))
            .build()
            .unwrap();
        let (release, release_rx) = mpsc::channel::<()>();
        let stuck = rt.spawn(async move {
            let _ = release_rx.recv_timeout(LIMIT);
        });
        // With the base worker stuck, a sleep can finish only on a temporary worker.
        rt.spawn(async {
            weft::time::sleep(Duration::from_millis(5)).await;
        })
        .join()
        .unwrap();
        release.send(()).unwrap();
        stuck.join().unwrap();
        let deadline = Instant::now() + LIMIT;
        while rt.stats().temp_workers_retired < rt.stats().temp_workers_started {
            assert!(
                Instant::now() < deadline,
                "the temporary worker never retired"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(rt.stats().temp_workers_started >= 1);
        for i in 0..50u64 {
            let v = rt
                .spawn(async move {
                    weft::time::sleep(Duration::from_micros(100 + i * 10)).await;
                    i
                })
                .join()
                .unwrap();
            assert_eq!(v, i);
        }
    });
}

/// `acquire_many_blocking` with mixed sizes from plain threads, fibers and tasks
/// (which block their worker in `weft::wait`), while `add_permits` and a late `close`
/// race them: nobody hangs, never more permits are out than exist, and once every
/// permit is back the count is whole.
#[test]
fn semaphore_mixed_blocking_acquires_with_add_and_close() {
    for workers in [1, 2, 4] {
        watchdog(move || {
            let rt = common::workers(workers);
            const BASE: usize = 6;
            let sem = Arc::new(Semaphore::new(BASE));
            let added = Arc::new(AtomicUsize::new(0));
            let out = Arc::new(AtomicUsize::new(0));
            let closed = Arc::new(AtomicBool::new(false));
            let body = {
                let (sem, added, out, closed) =
                    (sem.clone(), added.clone(), out.clone(), closed.clone());
                move |seed: u64| {
                    let mut rng = Rng(seed);
                    for _ in 0..200 {
                        let n = 1 + (rng.next() % 4) as u32;
                        match sem.acquire_many_blocking(n) {
                            Ok(p) => {
                                let now = out.fetch_add(n as usize, SeqCst) + n as usize;
                                assert!(
                                    now <= BASE + added.load(SeqCst),
                                    "{now} permits out of {}",
                                    BASE + added.load(SeqCst)
                                );
                                spin_for(Duration::from_nanos(rng.next() % 3_000));
                                out.fetch_sub(n as usize, SeqCst);
                                drop(p);
                            }
                            Err(_) => {
                                assert!(closed.load(SeqCst), "an acquire failed before close");
                                return;
                            }
                        }
                    }
                }
            };
            let threads: Vec<_> = (0..2u64)
                .map(|t| {
                    let body = body.clone();
                    std::thread::spawn(move || body(t + 1))
                })
                .collect();
            let tasks: Vec<_> = (0..2u64)
                .map(|t| {
                    let body = body.clone();
                    rt.spawn(async move { body(t + 10) })
                })
                .collect();
            let fibers = rt.block_on({
                let body = body.clone();
                async move {
                    (0..3u64)
                        .map(|t| {
                            let body = body.clone();
                            weft::fiber::spawn(move || body(t + 20))
                        })
                        .collect::<Vec<_>>()
                }
            });
            for _ in 0..20 {
                spin_for(Duration::from_nanos(50_000));
                // Count it first: the permits may be taken the moment they land.
                added.fetch_add(1, SeqCst);
                sem.add_permits(1);
            }
            for t in threads {
                t.join().unwrap();
            }
            for t in tasks {
                t.join().unwrap();
            }
            for f in fibers {
                f.join().unwrap();
            }
            assert_eq!(sem.available_permits(), BASE + 20);
            // Now a close racing fresh waiters: each returns, with Ok or Err.
            let sem2 = Arc::new(Semaphore::new(1));
            let hold = sem2.clone().try_acquire_owned().unwrap();
            let waiters: Vec<_> = (0..4u32)
                .map(|k| {
                    let sem2 = sem2.clone();
                    std::thread::spawn(move || sem2.acquire_many_blocking(1 + k % 2).is_ok())
                })
                .collect();
            let fiber_waiter = {
                let sem2 = sem2.clone();
                common::on(&rt, move || {
                    weft::fiber::spawn(move || sem2.acquire_many_blocking(2).is_ok())
                })
            };
            spin_for(Duration::from_nanos(200_000));
            closed.store(true, SeqCst);
            sem2.close();
            drop(hold);
            for w in waiters {
                assert!(
                    !w.join().unwrap(),
                    "an acquire succeeded on a closed semaphore with 1 permit held"
                );
            }
            assert!(!fiber_waiter.join().unwrap());
        });
    }
}

/// A writer queued behind blocking readers is served before a reader that came after
/// it (write preference: once the writer queued, `try_read` fails and a late blocking
/// reader queues behind it).
#[test]
fn rwlock_writer_before_late_blocking_reader() {
    for workers in [1, 2] {
        watchdog(move || {
            let rt = common::workers(workers);
            for round in 0..30 {
                let l = Arc::new(RwLock::new(0u32));
                let order = Arc::new(std::sync::Mutex::new(Vec::new()));
                let r1 = l.clone().try_read_owned().unwrap();
                let writer = {
                    let (l, order) = (l.clone(), order.clone());
                    let body = move || {
                        let mut g = l.write_blocking();
                        *g += 1;
                        order.lock().unwrap().push("w");
                    };
                    if round % 2 == 0 {
                        EitherJoin::Thread(std::thread::spawn(body))
                    } else {
                        EitherJoin::Fiber(common::on(&rt, move || weft::fiber::spawn(body)))
                    }
                };
                let deadline = Instant::now() + LIMIT;
                // The writer has queued once a read can no longer get in.
                while l.try_read().is_ok() {
                    assert!(Instant::now() < deadline, "the writer never queued");
                    std::thread::yield_now();
                }
                let reader = {
                    let (l, order) = (l.clone(), order.clone());
                    let body = move || {
                        let g = l.read_blocking();
                        assert_eq!(*g, 1, "a late reader got in before the queued writer");
                        order.lock().unwrap().push("r");
                    };
                    if round % 3 == 0 {
                        EitherJoin::Fiber(common::on(&rt, move || weft::fiber::spawn(body)))
                    } else {
                        EitherJoin::Thread(std::thread::spawn(body))
                    }
                };
                spin_for(Duration::from_nanos(20_000));
                drop(r1);
                writer.join();
                reader.join();
                assert_eq!(*order.lock().unwrap(), vec!["w", "r"]);
            }
        });
    }
}

enum EitherJoin {
    Thread(std::thread::JoinHandle<()>),
    Fiber(weft::JoinHandle<()>),
}

impl EitherJoin {
    fn join(self) {
        match self {
            EitherJoin::Thread(t) => t.join().unwrap(),
            EitherJoin::Fiber(f) => f.join().unwrap(),
        }
    }
}

/// On a one-worker runtime a fiber queues at the head of a mutex whose holder (a
/// fiber, or an async task) is suspended on that same worker: the head's spin must
/// end and let the holder run (no deadlock), and every increment lands.
#[test]
fn head_of_queue_fiber_does_not_starve_a_holder_on_its_worker() {
    watchdog(|| {
        let rt = common::workers(1);
        let m = Arc::new(Mutex::new(0u64));
        rt.block_on({
            let m = m.clone();
            async move {
                let mut fs = Vec::new();
                // Holders that suspend while holding: a fiber sleeping, a fiber yielding.
                for k in 0..4u64 {
                    let m = m.clone();
                    fs.push(weft::fiber::spawn(move || {
                        for i in 0..100u64 {
                            let mut g = m.lock_blocking();
                            *g += 1;
                            if (i + k) % 10 == 0 {
                                weft::fiber::sleep(Duration::from_micros(200));
                            } else {
                                weft::fiber::yield_now();
                            }
                            drop(g);
                        }
                    }));
                }
                // And an async holder that awaits a timer while holding.
                let m2 = m.clone();
                let task = weft::spawn(async move {
                    for _ in 0..50 {
                        let mut g = m2.lock().await;
                        *g += 1;
                        weft::time::sleep(Duration::from_micros(100)).await;
                        drop(g);
                    }
                });
                for f in fs {
                    f.await.unwrap();
                }
                task.await.unwrap();
            }
        });
        assert_eq!(*m.try_lock().unwrap(), 4 * 100 + 50);
    });
}

/// Async acquires cancelled (by a timeout) while blocking ones from threads and
/// fibers wait on the same semaphore: no permit is lost or duplicated.
#[test]
fn cancelled_async_acquires_race_blocking_ones() {
    for workers in [1, 2] {
        watchdog(move || {
            let rt = common::workers(workers);
            let sem = Arc::new(Semaphore::new(3));
            let out = Arc::new(AtomicUsize::new(0));
            let asyncs: Vec<_> = (0..3u64)
                .map(|t| {
                    let (sem, out) = (sem.clone(), out.clone());
                    rt.spawn(async move {
                        let mut rng = Rng(t + 1);
                        for _ in 0..150 {
                            let n = 1 + (rng.next() % 3) as u32;
                            let d = Duration::from_micros(rng.next() % 400);
                            if let Ok(Ok(p)) = weft::time::timeout(d, sem.acquire_many(n)).await {
                                assert!(out.fetch_add(n as usize, SeqCst) + n as usize <= 3);
                                weft::task::yield_now().await;
                                out.fetch_sub(n as usize, SeqCst);
                                drop(p);
                            }
                        }
                    })
                })
                .collect();
            let blocking = |seed: u64| {
                let (sem, out) = (sem.clone(), out.clone());
                move || {
                    let mut rng = Rng(seed);
                    for _ in 0..150 {
                        let n = 1 + (rng.next() % 3) as u32;
                        let p = sem.acquire_many_blocking(n).unwrap();
                        assert!(out.fetch_add(n as usize, SeqCst) + n as usize <= 3);
                        spin_for(Duration::from_nanos(rng.next() % 2_000));
                        out.fetch_sub(n as usize, SeqCst);
                        drop(p);
                    }
                }
            };
            let threads: Vec<_> = (0..2)
                .map(|t| std::thread::spawn(blocking(t + 40)))
                .collect();
            let fibers: Vec<_> = rt.block_on({
                let b = [blocking(50), blocking(51)];
                async move { b.into_iter().map(weft::fiber::spawn).collect() }
            });
            for h in asyncs {
                h.join().unwrap();
            }
            for t in threads {
                t.join().unwrap();
            }
            for f in fibers {
                f.join().unwrap();
            }
            assert_eq!(sem.available_permits(), 3);
        });
    }
}

/// CPU time of this process (user + system), from /proc.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 (utime, stime), counted from `pid` = 1; `after` starts at 3.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

const CHILD: &str = "REVIEW_WATCH_CHILD";

/// An idle runtime (after bursts that leave every worker watching, and with a worker
/// stuck in a blocking task whose queue a peer drains) does not keep burning a core:
/// a watch that kept finding "work" it could not take would spin for ever. Measured in
/// a child process so that other tests' CPU does not count.
#[test]
fn idle_workers_do_not_spin_for_ever() {
    if std::env::var_os(CHILD).is_some() {
        let rt = common::workers(4);
        for _ in 0..200 {
            let hs: Vec<_> = (0..8).map(|i| rt.spawn(async move { i })).collect();
            for h in hs {
                h.join().unwrap();
            }
        }
        // One worker stuck in a blocking call with tasks queued behind it.
        let (release, release_rx) = mpsc::channel::<()>();
        let stuck = rt.spawn(async move {
            let hs: Vec<_> = (0..16).map(|i| weft::spawn(async move { i })).collect();
            let _ = release_rx.recv_timeout(Duration::from_secs(60));
            let mut s = 0;
            for h in hs {
                s += h.await.unwrap();
            }
            s
        });
        std::thread::sleep(Duration::from_millis(100));
        let before = cpu_time();
        let wall = Instant::now();
        std::thread::sleep(Duration::from_millis(1_000));
        let used = cpu_time() - before;
        let wall = wall.elapsed();
        release.send(()).unwrap();
        assert_eq!(stuck.join().unwrap(), (0..16).sum::<i32>());
        println!("CHILD cpu_ms={}", used.as_millis());
        println!("CHILD wall_ms={}", wall.as_millis());
        println!("CHILD done=ok");
        return;
    }
    watchdog(|| {
        let out = child::run(
            "idle_workers_do_not_spin_for_ever",
            &[(CHILD, "1")],
            Duration::from_secs(90),
        );
        out.assert_finished();
        let cpu: u64 = out.report("cpu_ms").unwrap().parse().unwrap();
        let wall: u64 = out.report("wall_ms").unwrap().parse().unwrap();
        // A spinning worker burns about its whole wall time; idle ones a few percent.
        assert!(
            cpu * 3 < wall,
            "idle runtime used {cpu} ms of CPU in {wall} ms\n{}",
            out.context()
        );
    });
}

/// A task spawns children (onto its own worker's queues) and then blocks its thread
/// until every child has run: the children can run only if idle peers (watching, or
/// asleep) steal them, so a watch or a searcher gate that missed a peer's queue hangs.
#[test]
fn tasks_queued_behind_a_blocked_worker_are_stolen() {
    for workers in [2, 4] {
        watchdog(move || {
            let rt = common::workers(workers);
            let mut rng = Rng(31 + workers as u64);
            for round in 0..60u64 {
                spin_for(Duration::from_nanos(rng.next() % 40_000));
                let kids = 1 + round % 8;
                rt.spawn(async move {
                    let (tx, rx) = mpsc::channel::<u64>();
                    for k in 0..kids {
                        let tx = tx.clone();
                        weft::spawn(async move {
                            tx.send(k).unwrap();
                        });
                    }
                    drop(tx);
                    // The newest spawn sits in the LIFO slot, which no peer may steal:
                    // a plug that needs to run only after us pushes every child out to
                    // the stealable queue.
                    weft::spawn(async {});
                    let mut seen = 0;
                    for _ in 0..kids {
                        // Blocks this worker's thread: only a peer can run the children.
                        rx.recv_timeout(Duration::from_secs(60))
                            .expect("a child queued behind a blocked worker never ran");
                        seen += 1;
                    }
                    assert_eq!(seen, kids);
                })
                .join()
                .unwrap();
            }
        });
    }
}

/// `join(a, b)` on a worker where `a` runs long, joining as it goes (each join is a
/// heartbeat that shows private halves to a hungry peer), until `b` has run: an idle
/// peer (watching first, then asleep) must end up taking `b`. (A first half that blocks
/// without joining may legitimately keep `b` private: `outermost_join` shows it to
/// thieves only if someone is hungry, and wakes a sleeper for it only if outermost
/// joins have been lasting longer than a wake-up; so that is not tested.)
#[test]
fn join_half_is_stolen_while_the_first_half_keeps_joining() {
    for workers in [2, 4] {
        watchdog(move || {
            let rt = common::workers(workers);
            rt.spawn(async move {
                let mut rng = Rng(77);
                for round in 0..200 {
                    spin_for(Duration::from_nanos(rng.next() % 30_000));
                    let ran = AtomicBool::new(false);
                    let deadline = Instant::now() + Duration::from_secs(30);
                    weft::join(
                        || {
                            while !ran.load(SeqCst) {
                                assert!(
                                    Instant::now() < deadline,
                                    "round {round}: the other half of a join was never stolen"
                                );
                                weft::join(|| std::hint::black_box(1), || std::hint::black_box(2));
                                spin_for(Duration::from_nanos(1_000));
                            }
                        },
                        || ran.store(true, SeqCst),
                    );
                }
            })
            .join()
            .unwrap();
        });
    }
}

/// How many of `rounds` outermost joins had their second half taken by the peer that
/// had just gone idle (it ran a task for us a few microseconds before the join).
fn joins_shared_with_a_just_idle_peer(rounds: usize) -> usize {
    let rt = common::workers(2);
    rt.spawn(async move {
        let me = std::thread::current().id();
        let mut shared = 0;
        for round in 0..rounds + 5 {
            // Wake the peer for a tiny task (the plug pushes it out of our LIFO slot
            // into the stealable queue) and wait until it ran there.
            let done = Arc::new(AtomicBool::new(false));
            let d = done.clone();
            weft::spawn(async move { d.store(true, SeqCst) });
            weft::spawn(async {});
            let deadline = Instant::now() + Duration::from_secs(20);
            while !done.load(SeqCst) {
                assert!(Instant::now() < deadline, "the peer never ran the task");
                std::hint::spin_loop();
            }
            // The peer is now out of work: give it a few us to reach its idle path.
            // Delays from 2 to 20 us: the watch lasts about a futex wake (an EWMA of
            // measured wakes, at most 50 us), so some land in it whatever its length.
            spin_for(Duration::from_nanos(3_000 + (round as u64 % 10) * 1_000));
            let (_, b_thread) = weft::join(
                || spin_for(Duration::from_nanos(3_000_000)),
                || std::thread::current().id(),
            );
            // The first rounds warm the EWMA of outermost joins past a wake-up.
            if round >= 5 && b_thread != me {
                shared += 1;
            }
        }
        shared
    })
    .join()
    .unwrap()
}

/// An outermost `join` made a few microseconds after the only peer ran out of work
/// shows its second half to that peer: the peer is hungry (idle), so
/// `outermost_join` must promote the half (and, its outermost joins lasting longer
/// than a wake-up, wake the peer for it).
///
/// Found in review of 8191f74: a worker that watches (`Core::watch_for_work`) is
/// neither parked nor searching, so `someone_hungry()` is false for the whole watch
/// (up to `spin_ns`, the runtime's estimate of a futex wake, capped at 50 us); the half
/// stays private, and with a first half that joins no more (no heartbeat) it runs
/// after it on the same thread. How often depends on that estimate, which each runtime
/// settles on its own: at 8191f74 single runtimes shared 0, 1, 0, 40, 39, 18, 28, 40 of
/// 40 joins (debug, 2 cores, delays 3-12 us); at 8191f74^ 36-40 every time (8 runs).
/// So the child tries eight runtimes and needs each to share at least 25. Run in a
/// child so the other tests of this binary do not load the two workers' cores.
#[test]
fn join_right_after_a_peer_went_idle_is_shared() {
    if std::env::var_os(CHILD).is_some() {
        // Eight fresh runtimes: each settles its own estimate of a wake-up's cost,
        // which sets how long its workers watch (see the test's comment).
        let n = (0..8)
            .map(|_| joins_shared_with_a_just_idle_peer(40))
            .min()
            .unwrap();
        println!("CHILD shared={n}");
        println!("CHILD done=ok");
        return;
    }
    watchdog(|| {
        let out = child::run(
            "join_right_after_a_peer_went_idle_is_shared",
            &[(CHILD, "1")],
            Duration::from_secs(90),
        );
        out.assert_finished();
        let n: usize = out.report("shared").unwrap().parse().unwrap();
        assert!(
            n >= 25,
            "in one of eight runtimes only {n} of 40 joins made just after the peer went \
             idle were shared with it"
        );
    });
}

/// On a one-worker runtime a timer comes due while its only worker runs a long task;
/// when that task ends the worker goes idle, and the first place that sees the due
/// timer may be the watch (`watch_for_work` fires it, and the woken task lands in the
/// worker's own LIFO slot, which the sleep transition's re-check does not look at): the
/// watch must run that task rather than sleep with it queued (no other timer or wake
/// would come to rescue it here).
#[test]
fn timer_due_behind_a_long_task_on_one_worker_fires() {
    watchdog(|| {
        let rt = common::workers(1);
        for round in 0..200u64 {
            let (tx, rx) = mpsc::channel::<()>();
            rt.spawn(async move {
                weft::time::sleep(Duration::from_millis(1)).await;
                tx.send(()).unwrap();
            });
            rt.spawn(async move {
                // Runs past the sleeper's deadline without returning to the scheduler.
                spin_for(Duration::from_nanos(1_500_000 + (round % 8) * 125_000));
            });
            rx.recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("round {round}: a due timer's task never ran"));
        }
    });
}

/// On one worker, blocking acquires from a task (a nested wait that runs other work
/// meanwhile) and from fibers, while the holder (an async task or a fiber) is suspended
/// on that same worker: every acquire completes, and the lock's value counts each.
#[test]
fn blocking_rwlock_and_semaphore_on_one_worker_with_suspended_holders() {
    watchdog(|| {
        let rt = common::workers(1);
        let l = Arc::new(RwLock::new(0u64));
        let sem = Arc::new(Semaphore::new(2));
        rt.block_on({
            let (l, sem) = (l.clone(), sem.clone());
            async move {
                let mut hs = Vec::new();
                // Async writers that hold across a timer.
                for _ in 0..2 {
                    let l = l.clone();
                    hs.push(weft::spawn(async move {
                        for _ in 0..30 {
                            let mut g = l.write().await;
                            *g += 1;
                            weft::time::sleep(Duration::from_micros(200)).await;
                            drop(g);
                        }
                    }));
                }
                // Tasks that block in nested waits (`weft::wait` under `*_blocking`).
                for k in 0..2u64 {
                    let (l, sem) = (l.clone(), sem.clone());
                    hs.push(weft::spawn(async move {
                        for i in 0..30u64 {
                            if (i + k) % 2 == 0 {
                                let mut g = l.write_blocking();
                                *g += 1;
                            } else {
                                let _r = l.read_blocking();
                            }
                            let p = sem.acquire_many_blocking(1 + (i % 2) as u32).unwrap();
                            weft::task::yield_now().await;
                            drop(p);
                        }
                    }));
                }
                // Fibers that suspend while holding.
                let mut fs = Vec::new();
                for k in 0..3u64 {
                    let (l, sem) = (l.clone(), sem.clone());
                    fs.push(weft::fiber::spawn(move || {
                        for i in 0..30u64 {
                            let p = sem.acquire_many_blocking(1 + ((i + k) % 2) as u32).unwrap();
                            let mut g = l.write_blocking();
                            *g += 1;
                            weft::fiber::yield_now();
                            drop(g);
                            weft::fiber::sleep(Duration::from_micros(100));
                            drop(p);
                            let _r = l.read_blocking();
                        }
                    }));
                }
                for h in hs {
                    h.await.unwrap();
                }
                for f in fs {
                    f.await.unwrap();
                }
            }
        });
        assert_eq!(*l.try_read().unwrap(), 2 * 30 + 2 * 15 + 3 * 30);
        assert_eq!(sem.available_permits(), 2);
    });
}
