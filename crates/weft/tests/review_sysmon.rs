//! Adversarial review of sysmon's temporary workers (issue 18), from safe code: workers
//! that start and retire thousands of times while remote threads spawn and wake tasks
//! and fibers, fibers parked on a temporary worker past its keep-alive, fork-join and
//! blocking waits on temporary workers, timers held by a retiring worker, shutdown
//! while temporary workers come and go, absurd caps, both pools, statistics, the
//! thread hooks, the debug log and an idle monitor.
//!
//! Runtimes live in child processes where a case counts threads, reads the environment
//! or could hang or crash; each child has a time limit.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{blocker, child, counter, load, on, rt_with, wait_until, with_timeout};

const CHILD: &str = "WEFT_REVIEW_SYSMON_CHILD";

fn is_child() -> bool {
    std::env::var(CHILD).is_ok()
}

fn run_child(test: &str, vars: &[(&str, &str)]) -> child::Output {
    let mut all = vec![(CHILD, "1")];
    all.extend_from_slice(vars);
    let out = child::run(test, &all, child::LIMIT);
    out.assert_finished();
    out
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            if let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) {
                names.push(comm.trim().to_string());
            }
        }
    }
    names
}

fn a_little_rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Many rounds, in both pools at once, with each pool's only base worker stuck for the
/// whole test: a burst of tasks and fibers (spawned, and woken from remote threads at
/// random moments) that only temporary workers can run, then idleness past a 2 ms
/// keep-alive. Temporary workers start and retire again and again (hundreds of times:
/// sysmon starts at most one per 10 ms per pool); every task and fiber completes, and
/// the statistics add up.
#[test]
fn churn_start_retire_with_remote_wakes() {
    with_timeout(|| {
        let rt = Arc::new(
            weft::Builder::new()
                .worker_threads(1)
                .interactive_threads(1)
                .max_extra_workers(2)
                .extra_worker_keep_alive(Duration::from_millis(2))
                .build()
                .unwrap(),
        );
        let release = Arc::new(AtomicBool::new(false));
        let stuck: Vec<_> = [weft::Pool::Default, weft::Pool::Interactive]
            .into_iter()
            .map(|pool| {
                let release = release.clone();
                let (tx, rx) = mpsc::channel();
                let h = rt.handle().spawn_on(pool, async move {
                    tx.send(()).unwrap();
                    while !release.load(SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
                rx.recv_timeout(common::TIMEOUT).unwrap();
                h
            })
            .collect();
        let drivers: Vec<_> = [weft::Pool::Default, weft::Pool::Interactive]
            .into_iter()
            .enumerate()
            .map(|(k, pool)| {
                let rt = rt.clone();
                std::thread::spawn(move || churn_rounds(&rt, pool, 0x1234_5678 + k as u64))
            })
            .collect();
        let rounds: u64 = drivers.into_iter().map(|d| d.join().unwrap()).sum();
        release.store(true, SeqCst);
        for h in stuck {
            h.join().unwrap();
        }
        wait_until("every temporary worker retires", || {
            let s = rt.stats();
            s.temp_workers_started == s.temp_workers_retired
        });
        let s = rt.stats();
        assert_eq!(s.num_workers, 1);
        assert!(
            s.temp_workers_started >= rounds / 4,
            "{} temporary workers in {rounds} rounds",
            s.temp_workers_started
        );
        println!(
            "rounds {rounds}, temporary workers started and retired {}",
            s.temp_workers_started
        );
    })
}

/// One driver of `churn_start_retire_with_remote_wakes`: rounds in `pool` for 2.5 s;
/// returns how many.
fn churn_rounds(rt: &weft::Runtime, pool: weft::Pool, mut seed: u64) -> u64 {
    let handle = rt.handle().clone();
    // `RSM_CHURN_MS` lengthens it for a soak run (the review ran it for 30 s).
    let ms = std::env::var("RSM_CHURN_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2500);
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut round = 0u64;
    while Instant::now() < deadline && round < ms / 8 {
        round += 1;
        let done = counter();
        let (tx, rx) = weft::chan::unbounded::<u32>();
        let (ttx, trx) = weft::chan::unbounded::<u32>();
        let n = 8 + (a_little_rng(&mut seed) % 8) as usize;
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let done = done.clone();
                let trx = trx.clone();
                handle.spawn_on(pool, async move {
                    if i % 2 == 0 {
                        trx.recv().await.unwrap();
                    } else {
                        weft::time::sleep(Duration::from_micros(500 * (i as u64 % 5))).await;
                    }
                    done.fetch_add(1, SeqCst);
                })
            })
            .collect();
        // Fibers started from a task of the pool (so on a temporary worker).
        let rx2 = rx.clone();
        let done2 = done.clone();
        let fibers = handle
            .spawn_on(pool, async move {
                (0..4)
                    .map(|i| {
                        let rx = rx2.clone();
                        let done = done2.clone();
                        weft::fiber::spawn(move || {
                            rx.recv_blocking().unwrap();
                            if i % 2 == 0 {
                                weft::fiber::sleep(Duration::from_millis(3));
                            }
                            done.fetch_add(1, SeqCst);
                        })
                    })
                    .collect::<Vec<_>>()
            })
            .join()
            .unwrap();
        let delay = a_little_rng(&mut seed) % 4000;
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_micros(delay));
            for k in 0..n {
                ttx.send_blocking(k as u32).unwrap();
            }
            std::thread::sleep(Duration::from_micros(delay / 2));
            for k in 0..4 {
                tx.send_blocking(k).unwrap();
            }
        });
        for h in hs {
            h.join().unwrap();
        }
        for f in fibers {
            f.join().unwrap();
        }
        waker.join().unwrap();
        assert_eq!(load(&done), n + 4);
        // Idle past the keep-alive (the retire path), mostly.
        if !round.is_multiple_of(4) {
            std::thread::sleep(Duration::from_millis(4));
        }
    }
    round
}

/// Every base worker stuck; a task on a temporary worker sleeps on a timer longer than
/// the keep-alive. The temporary worker parks holding the timer driver and would
/// retire; the timer must still fire long before the base worker comes back. With a
/// cap of 3, several temporary workers park and retire around the holder.
#[test]
fn a_timer_fires_after_the_driver_holder_retires() {
    with_timeout(|| {
        for extra in [1, 3] {
            let rt = rt_with(1, extra, 5);
            let stuck = blocker(&rt, Duration::from_millis(1000));
            let start = Instant::now();
            // Short blockers make sysmon start more temporary workers.
            let others: Vec<_> = (0..extra as u64 * 2)
                .map(|_| {
                    rt.spawn(async {
                        std::thread::sleep(Duration::from_millis(15));
                    })
                })
                .collect();
            // Queued behind the stuck worker: a temporary worker runs it.
            let fired = rt.spawn(async move {
                weft::time::sleep(Duration::from_millis(150)).await;
                start.elapsed()
            });
            let took = fired.join().unwrap();
            let stuck_still = !stuck.is_finished();
            for o in others {
                o.join().unwrap();
            }
            stuck.join().unwrap();
            assert!(
                stuck_still && took < Duration::from_millis(700),
                "cap {extra}: a 150 ms timer fired after {took:?} (the base worker was \
                 stuck for 1 s)"
            );
        }
    })
}

/// Fibers that start on a temporary worker and park on a channel, a sleep and a socket,
/// woken only after the keep-alive passed: they keep their worker, and all finish.
#[test]
fn fibers_parked_on_a_temporary_worker_past_its_keep_alive() {
    use std::io::{Read, Write};
    with_timeout(|| {
        let rt = rt_with(1, 1, 3);
        let stuck = blocker(&rt, Duration::from_millis(600));
        let (tx, rx) = weft::chan::bounded::<u32>(0);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let fibers: Vec<_> = on(&rt, || {
            let rx2 = rx.clone();
            vec![
                weft::fiber::spawn(move || rx2.recv_blocking().unwrap() as usize),
                weft::fiber::spawn(|| {
                    weft::fiber::sleep(Duration::from_millis(60));
                    1
                }),
                weft::fiber::spawn(move || {
                    let mut s = weft::net::TcpStream::connect_blocking(addr).unwrap();
                    let mut b = [0u8; 4];
                    s.read_exact(&mut b).unwrap();
                    s.write_all(&b).unwrap();
                    u32::from_le_bytes(b) as usize
                }),
            ]
        });
        let (mut peer, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        tx.send_blocking(5).unwrap();
        peer.write_all(&7u32.to_le_bytes()).unwrap();
        let mut back = [0u8; 4];
        peer.read_exact(&mut back).unwrap();
        let got: usize = fibers.into_iter().map(|f| f.join().unwrap()).sum();
        assert_eq!(got, 13);
        assert!(
            !stuck.is_finished(),
            "ran only once the base worker was free"
        );
        stuck.join().unwrap();
        wait_until("the temporary worker retires", || {
            let s = rt.stats();
            s.temp_workers_started >= 1 && s.temp_workers_started == s.temp_workers_retired
        });
    })
}

/// Fork-join (`join`, `scope`, `par_iter`) and blocking waits (`JoinHandle::join`,
/// `weft::wait`: set-aside stacks) run on temporary workers with a 1 ms keep-alive, so
/// they keep retiring around the work; every result is right.
#[test]
fn forkjoin_and_blocking_waits_on_temporary_workers() {
    use weft::prelude::*;
    with_timeout(|| {
        let rt = rt_with(1, 3, 1);
        for round in 0..15u64 {
            let stuck = rt.spawn(async {
                std::thread::sleep(Duration::from_millis(25));
            });
            let hs: Vec<_> = (0..6u64)
                .map(|i| {
                    rt.spawn(async move {
                        match i % 3 {
                            0 => common::fib(12 + (round % 3)),
                            1 => {
                                let mut v = vec![0u64; 64];
                                weft::scope(|s| {
                                    for (k, x) in v.iter_mut().enumerate() {
                                        s.spawn(move |_| *x = k as u64);
                                    }
                                });
                                (0..1000u64).into_par_iter().map(|x| x % 7).sum::<u64>()
                                    + v.iter().sum::<u64>()
                            }
                            _ => {
                                // A blocking join of a task that sleeps on a timer,
                                // then a `wait` on another.
                                let h = weft::spawn(async {
                                    weft::time::sleep(Duration::from_millis(4)).await;
                                    3u64
                                });
                                let a = h.join().unwrap();
                                let b = weft::wait(async {
                                    weft::time::sleep(Duration::from_millis(2)).await;
                                    4u64
                                });
                                a + b
                            }
                        }
                    })
                })
                .collect();
            for (i, h) in hs.into_iter().enumerate() {
                let want = match i % 3 {
                    0 => [144, 233, 377][(round % 3) as usize],
                    1 => (0..1000u64).map(|x| x % 7).sum::<u64>() + (0..64).sum::<u64>(),
                    _ => 7,
                };
                assert_eq!(h.join().unwrap(), want);
            }
            stuck.join().unwrap();
            std::thread::sleep(Duration::from_millis(3));
        }
        wait_until("every temporary worker retires", || {
            let s = rt.stats();
            s.temp_workers_started == s.temp_workers_retired
        });
    })
}

/// Dropping the runtime, and `shutdown_graceful`, while temporary workers run, park
/// or retire: no hang, no crash, every task's handle resolves.
#[test]
fn shutdown_while_temporary_workers_come_and_go() {
    with_timeout(|| {
        for i in 0..24u64 {
            let rt = rt_with(1, 2, i % 4);
            let _stuck = rt.spawn(async {
                std::thread::sleep(Duration::from_millis(30));
            });
            let hs: Vec<_> = (0..20u64)
                .map(|k| {
                    rt.spawn(async move {
                        weft::time::sleep(Duration::from_millis(k % 7)).await;
                    })
                })
                .collect();
            let fibers: Vec<_> = on(&rt, || {
                (0..3)
                    .map(|_| weft::fiber::spawn(|| weft::fiber::sleep(Duration::from_millis(20))))
                    .collect()
            });
            std::thread::sleep(Duration::from_millis(i % 3 * 12));
            if i % 2 == 0 {
                drop(rt);
            } else {
                let report = rt.shutdown_graceful(Duration::from_millis(200));
                let _ = report.finished + report.cancelled;
            }
            for h in hs {
                let _ = h.join();
            }
            for f in fibers {
                let _ = f.join();
            }
        }
    })
}

/// A huge cap is capped (no overflow, no absurd allocation, quick to build), and zero
/// turns temporary workers off.
#[test]
fn absurd_caps() {
    with_timeout(|| {
        for cap in [usize::MAX, 10_000, usize::MAX / 2] {
            let t = Instant::now();
            let rt = rt_with(1, cap, 10);
            rt.spawn(async {}).join().unwrap();
            let s = rt.stats();
            assert_eq!(s.num_workers, 1);
            drop(rt);
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        }
        let rt = rt_with(1, 0, 10);
        let stuck = blocker(&rt, Duration::from_millis(100));
        let h = rt.spawn(async {});
        h.join().unwrap();
        assert!(
            stuck.is_finished(),
            "with the cap at zero nothing ran beside it"
        );
        assert_eq!(rt.stats().temp_workers_started, 0);
    })
}

#[test]
fn child_env_cap_overflow() {
    if !is_child() {
        return;
    }
    let rt = weft::Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .build()
        .unwrap();
    rt.spawn(async {}).join().unwrap();
    println!("CHILD done=ok");
}

/// `WEFT_MAX_EXTRA_WORKERS` past the limit or past `usize` is refused with a message,
/// not taken.
#[test]
fn env_cap_overflow_is_refused() {
    with_timeout(|| {
        for v in ["99999999999999999999999", "1000000"] {
            let out = run_child("child_env_cap_overflow", &[("WEFT_MAX_EXTRA_WORKERS", v)]);
            assert!(
                out.stderr.contains("WEFT_MAX_EXTRA_WORKERS"),
                "{}",
                out.context()
            );
        }
    })
}

/// A storm of stuck tasks: the number of tasks running at once never exceeds base + K,
/// and the interactive pool gets temporary workers of its own.
#[test]
fn the_cap_holds_under_a_storm_in_both_pools() {
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(1)
            .interactive_threads(1)
            .max_extra_workers(2)
            .extra_worker_keep_alive(Duration::from_millis(5))
            .build()
            .unwrap();
        for pool in [weft::Pool::Default, weft::Pool::Interactive] {
            let now = Arc::new(AtomicUsize::new(0));
            let most = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..12)
                .map(|_| {
                    let (now, most) = (now.clone(), most.clone());
                    rt.handle().spawn_on(pool, async move {
                        let n = now.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(n, SeqCst);
                        std::thread::sleep(Duration::from_millis(40));
                        now.fetch_sub(1, SeqCst);
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            let most = load(&most);
            assert!(
                most <= 3,
                "{pool:?}: {most} tasks ran at once with a cap of 1 + 2"
            );
            assert!(most >= 2, "{pool:?}: no temporary worker helped");
        }
        wait_until("every temporary worker retires", || {
            let s = rt.stats();
            s.temp_workers_started == s.temp_workers_retired
        });
        let s = rt.stats();
        assert_eq!(s.num_workers, 1);
    })
}

#[test]
fn child_stats_hooks_threads() {
    if !is_child() {
        return;
    }
    thread_local! {
        static TL: std::cell::RefCell<Option<common::DropCounter>> =
            const { std::cell::RefCell::new(None) };
    }
    let starts = counter();
    let stops = counter();
    let tls_dropped = counter();
    let (s1, s2, tl) = (starts.clone(), stops.clone(), tls_dropped.clone());
    let rt = weft::Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .max_extra_workers(3)
        .extra_worker_keep_alive(Duration::from_millis(30))
        .thread_name("rsm")
        .on_thread_start(move || {
            s1.fetch_add(1, SeqCst);
            let tl = tl.clone();
            TL.with(|t| *t.borrow_mut() = Some(common::DropCounter(tl)));
        })
        .on_thread_stop(move || {
            s2.fetch_add(1, SeqCst);
        })
        .build()
        .unwrap();
    let live_temps = || {
        thread_names()
            .iter()
            .filter(|n| {
                n.strip_prefix("rsm-")
                    .and_then(|i| i.parse::<usize>().ok())
                    .is_some_and(|i| i >= 1)
            })
            .count()
    };
    let stuck = blocker(&rt, Duration::from_millis(400));
    let hs: Vec<_> = (0..4)
        .map(|_| {
            rt.spawn(async {
                std::thread::sleep(Duration::from_millis(60));
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(150));
    // While they run: started - retired is the number of live temporary threads (a
    // thread that has retired may still be on its way out: allow that one way).
    let s = rt.stats();
    let live = live_temps() as u64;
    assert!(s.temp_workers_started >= 1);
    assert!(
        s.temp_workers_started - s.temp_workers_retired <= live,
        "{} started, {} retired, {live} threads",
        s.temp_workers_started,
        s.temp_workers_retired
    );
    assert!(s.temp_workers_started - s.temp_workers_retired <= 3);
    assert_eq!(s.num_workers, 1);
    assert_eq!(s.pools[0].workers.len(), 1);
    for h in hs {
        h.join().unwrap();
    }
    stuck.join().unwrap();
    wait_until("the temporary workers retire and exit", || {
        let s = rt.stats();
        s.temp_workers_started == s.temp_workers_retired && live_temps() == 0
    });
    let s = rt.stats();
    let started = s.temp_workers_started as usize;
    // Hooks in pairs for the temporary threads (the base one is still running), and the
    // thread-locals they set were destroyed.
    wait_until("the hooks pair up", || {
        load(&starts) == 1 + started && load(&stops) == started
    });
    wait_until("thread-locals of retired workers dropped", || {
        load(&tls_dropped) == started
    });
    drop(rt);
    assert_eq!(load(&starts), load(&stops));
    println!("CHILD started={started}");
    println!("CHILD done=ok");
}

/// Statistics, thread count and hooks agree for temporary workers (child process: it
/// counts this process's threads).
#[test]
fn stats_hooks_and_threads_agree() {
    with_timeout(|| {
        let out = run_child("child_stats_hooks_threads", &[]);
        assert!(out.report("started").unwrap().parse::<u64>().unwrap() >= 1);
    })
}

#[test]
fn child_debug_sysmon() {
    if !is_child() {
        return;
    }
    let rt = rt_with(1, 1, 5);
    let stuck = blocker(&rt, Duration::from_millis(200));
    let hs: Vec<_> = (0..50).map(|_| rt.spawn(async {})).collect();
    for h in hs {
        h.join().unwrap();
    }
    stuck.join().unwrap();
    wait_until("the temporary worker retires", || {
        rt.stats().temp_workers_retired >= 1
    });
    println!("CHILD done=ok");
}

/// `WEFT_DEBUG_SYSMON=1` logs a start and a retirement.
#[test]
fn debug_sysmon_logs_start_and_retire() {
    with_timeout(|| {
        let out = run_child("child_debug_sysmon", &[("WEFT_DEBUG_SYSMON", "1")]);
        assert!(
            out.stderr.contains("starting temporary worker"),
            "{}",
            out.context()
        );
        assert!(out.stderr.contains("retired"), "{}", out.context());
    })
}

#[test]
fn child_idle_monitor_after_churn() {
    if !is_child() {
        return;
    }
    let rt = weft::Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .extra_worker_keep_alive(Duration::from_millis(5))
        .thread_name("rsidle")
        .build()
        .unwrap();
    for _ in 0..5 {
        let stuck = blocker(&rt, Duration::from_millis(30));
        let hs: Vec<_> = (0..20).map(|_| rt.spawn(async {})).collect();
        for h in hs {
            h.join().unwrap();
        }
        stuck.join().unwrap();
    }
    wait_until("the temporary workers retire", || {
        let s = rt.stats();
        s.temp_workers_started == s.temp_workers_retired
    });
    let switches = || -> Option<u64> {
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let dir = task.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            if comm.trim() == "rsidle-sysmon" {
                let status = std::fs::read_to_string(dir.join("status")).ok()?;
                return status
                    .lines()
                    .filter(|l| l.starts_with("voluntary_ctxt_switches"))
                    .find_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok());
            }
        }
        None
    };
    std::thread::sleep(Duration::from_millis(300));
    let before = switches().expect("no monitor thread");
    std::thread::sleep(Duration::from_secs(1));
    let after = switches().unwrap();
    println!("CHILD wakes={}", after - before);
    println!("CHILD done=ok");
}

/// After temporary workers came and went, an idle runtime's monitor makes no wake-ups
/// over a second.
#[test]
fn idle_monitor_after_churn_makes_no_wakeups() {
    with_timeout(|| {
        let out = run_child("child_idle_monitor_after_churn", &[]);
        let wakes: u64 = out.report("wakes").unwrap().parse().unwrap();
        assert!(wakes <= 1, "{wakes} wake-ups\n{}", out.context());
    })
}

/// A task that blocks in `JoinHandle::join` on a temporary worker for a task that
/// waits on a timer; meanwhile the keep-alive passes. The temporary worker may not
/// retire under the wait, and everything completes.
#[test]
fn a_blocked_wait_keeps_its_temporary_worker() {
    with_timeout(|| {
        let rt = rt_with(1, 1, 1);
        let stuck = blocker(&rt, Duration::from_millis(300));
        let flag = Arc::new(AtomicBool::new(false));
        let f2 = flag.clone();
        let outer = rt.spawn(async move {
            let inner = weft::spawn(async move {
                weft::time::sleep(Duration::from_millis(60)).await;
                f2.store(true, SeqCst);
                9
            });
            inner.join().unwrap()
        });
        assert_eq!(outer.join().unwrap(), 9);
        assert!(flag.load(SeqCst));
        assert!(
            !stuck.is_finished(),
            "ran only once the base worker was free"
        );
        stuck.join().unwrap();
    })
}

/// A temporary worker parks first and holds the drivers; the base worker, back from a
/// short block, parks without them. When the temporary worker retires, a socket's
/// readiness must still reach the task waiting on it (someone must take the drivers).
#[test]
fn socket_readiness_after_the_driver_holder_retires() {
    use std::io::Write;
    use weft::io::AsyncReadExt as _;
    with_timeout(|| {
        let rt = rt_with(1, 1, 150);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stuck = blocker(&rt, Duration::from_millis(60));
        // Work queued behind the stuck worker: a temporary worker starts and runs it,
        // then parks first (taking the drivers).
        let hs: Vec<_> = (0..50).map(|_| rt.spawn(async {})).collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(rt.stats().temp_workers_started >= 1);
        stuck.join().unwrap();
        let reader = rt.spawn(async move {
            let mut s = weft::net::TcpStream::connect(addr).await.unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.unwrap();
            b[0]
        });
        let (mut peer, _) = listener.accept().unwrap();
        wait_until("the temporary worker retires", || {
            rt.stats().temp_workers_retired >= 1
        });
        std::thread::sleep(Duration::from_millis(50));
        peer.write_all(&[42]).unwrap();
        let start = Instant::now();
        while !reader.is_finished() && start.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            reader.is_finished(),
            "the socket became readable but its task was not woken within 3 s"
        );
        assert_eq!(reader.join().unwrap(), 42);
    })
}

#[test]
fn child_panicking_start_hook() {
    if !is_child() {
        return;
    }
    let rt = weft::Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .max_extra_workers(1)
        .thread_name("rshook")
        .on_thread_start(|| {
            if std::thread::current().name() == Some("rshook-1") {
                panic!("the start hook refuses temporary workers");
            }
        })
        .build()
        .unwrap();
    let stuck = blocker(&rt, Duration::from_millis(300));
    let hs: Vec<_> = (0..50).map(|_| rt.spawn(async {})).collect();
    for h in hs {
        h.join().unwrap();
    }
    stuck.join().unwrap();
    // The hook's panic is caught (since session 38) and the temporary worker works on;
    // it used to die, and was then counted out.
    wait_until("a temporary worker started", || {
        rt.stats().temp_workers_started >= 1
    });
    // Work still runs afterwards.
    rt.spawn(async {}).join().unwrap();
    let t = Instant::now();
    drop(rt);
    println!("CHILD drop_ms={}", t.elapsed().as_millis());
    println!("CHILD done=ok");
}

/// A temporary worker whose `on_thread_start` hook panics: the panic is printed and
/// caught, the runtime goes on, and dropping it does not wait for ever.
#[test]
fn a_panicking_start_hook_on_a_temporary_worker() {
    with_timeout(|| {
        let out = run_child("child_panicking_start_hook", &[]);
        assert!(
            out.stderr.contains("refuses temporary workers"),
            "{}",
            out.context()
        );
    })
}

#[test]
fn child_rss_of_a_huge_cap() {
    if !is_child() {
        return;
    }
    let rss_kib = || -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap()
    };
    let extra: usize = std::env::var("RSM_EXTRA").unwrap().parse().unwrap();
    let before = rss_kib();
    let rt = rt_with(1, extra, 10);
    rt.spawn(async {}).join().unwrap();
    let after = rss_kib();
    println!("CHILD rss_kib={}", after.saturating_sub(before));
    drop(rt);
    println!("CHILD done=ok");
}

/// The memory a runtime takes for its spare slots stays modest even with the cap at
/// `usize::MAX` (capped to the worker limit).
#[test]
fn a_huge_cap_costs_little_memory() {
    with_timeout(|| {
        let zero = run_child("child_rss_of_a_huge_cap", &[("RSM_EXTRA", "0")]);
        let huge = run_child(
            "child_rss_of_a_huge_cap",
            &[("RSM_EXTRA", &usize::MAX.to_string())],
        );
        let kib = |o: &child::Output| o.report("rss_kib").unwrap().parse::<u64>().unwrap();
        println!(
            "rss: cap 0 {} KiB, cap usize::MAX {} KiB",
            kib(&zero),
            kib(&huge)
        );
        assert!(
            kib(&huge) < kib(&zero) + 64 * 1024,
            "cap 0: {} KiB, cap usize::MAX: {} KiB",
            kib(&zero),
            kib(&huge)
        );
    })
}

/// Extreme keep-alives: `Duration::MAX` (a temporary worker parks with a timeout that
/// must not overflow) and zero (it retires at its first idle moment); work still runs.
#[test]
fn extreme_keep_alives() {
    with_timeout(|| {
        for keep in [
            Duration::MAX,
            Duration::ZERO,
            Duration::from_secs(u64::MAX / 4),
        ] {
            let rt = weft::Builder::new()
                .worker_threads(1)
                .interactive_threads(0)
                .max_extra_workers(1)
                .extra_worker_keep_alive(keep)
                .build()
                .unwrap();
            let stuck = blocker(&rt, Duration::from_millis(80));
            let hs: Vec<_> = (0..30)
                .map(|i| {
                    rt.spawn(async move {
                        weft::time::sleep(Duration::from_millis(i % 3)).await;
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            assert!(!stuck.is_finished(), "{keep:?}: ran only after the blocker");
            stuck.join().unwrap();
            // Parked temporary workers (with a huge keep-alive) wake for new work.
            std::thread::sleep(Duration::from_millis(20));
            let hs: Vec<_> = (0..30).map(|_| rt.spawn(async {})).collect();
            for h in hs {
                h.join().unwrap();
            }
            assert!(rt.stats().temp_workers_started >= 1, "{keep:?}");
        }
    })
}

/// The runtime is dropped from inside a task that runs on a temporary worker (the
/// drop waits for the stuck base worker, then returns; nothing hangs).
#[test]
fn runtime_dropped_on_a_temporary_worker() {
    with_timeout(|| {
        let mut on_temp = 0;
        for _ in 0..5 {
            let rt = rt_with(1, 1, 50);
            let handle = rt.handle().clone();
            let stuck = blocker(&rt, Duration::from_millis(60));
            let slot = Arc::new(std::sync::Mutex::new(Some(rt)));
            let s2 = slot.clone();
            let (tx, rx) = mpsc::channel();
            let h = handle.spawn(async move {
                let name = std::thread::current().name().map(str::to_string);
                let rt = s2.lock().unwrap().take();
                drop(rt);
                tx.send(name).unwrap();
            });
            let name = rx.recv_timeout(Duration::from_secs(10)).expect("hang");
            on_temp += usize::from(name.as_deref() == Some("weft-worker-1"));
            let _ = h.join();
            let _ = stuck.join();
        }
        assert!(on_temp >= 1, "never ran on a temporary worker");
    })
}

/// Fibers that may migrate (soft-homed) wait on channels fed by a remote thread while
/// temporary workers start and retire (2 ms keep-alive): every fiber finishes.
#[test]
fn migrating_fibers_across_retirements() {
    with_timeout(|| {
        let rt = rt_with(1, 2, 2);
        let done = counter();
        for _ in 0..30 {
            let stuck = rt.spawn(async {
                std::thread::sleep(Duration::from_millis(15));
            });
            let (tx, rx) = weft::chan::unbounded::<u32>();
            let fibers: Vec<_> = on(&rt, || {
                (0..6)
                    .map(|_| {
                        let rx = rx.clone();
                        let done = done.clone();
                        // SAFETY: the fiber keeps only `Send` data across its waits.
                        let b = unsafe { weft::fiber::Builder::new().fiber_migration(true) };
                        b.spawn(move || {
                            for _ in 0..3 {
                                rx.recv_blocking().unwrap();
                            }
                            done.fetch_add(1, SeqCst);
                        })
                    })
                    .collect()
            });
            let feeder = std::thread::spawn(move || {
                for k in 0..18 {
                    if k % 6 == 0 {
                        std::thread::sleep(Duration::from_millis(3));
                    }
                    tx.send_blocking(k).unwrap();
                }
            });
            for f in fibers {
                f.join().unwrap();
            }
            feeder.join().unwrap();
            stuck.join().unwrap();
        }
        assert_eq!(load(&done), 30 * 6);
    })
}

/// On fresh runtimes, one task queued behind the stuck base worker runs on a temporary
/// worker well before the base worker comes back (the monitor starts with the first
/// worker and watches from the start).
#[test]
fn a_fresh_runtime_rescues_its_first_queued_task() {
    with_timeout(|| {
        let mut worst = Duration::ZERO;
        for _ in 0..10 {
            let rt = rt_with(1, 1, 20);
            let stuck = blocker(&rt, Duration::from_millis(150));
            let t = Instant::now();
            let h = rt.spawn(async move { t.elapsed() });
            let took = h.join().unwrap();
            worst = worst.max(took);
            assert!(
                !stuck.is_finished(),
                "ran only after the blocker ({took:?})"
            );
            stuck.join().unwrap();
        }
        println!("worst {worst:?}");
    })
}

/// A task spawns children (onto its worker's own queues) and then blocks its thread:
/// a temporary worker steals and runs them; only the one in the stuck worker's LIFO
/// slot may wait for it (documented: that slot is invisible to thieves).
#[test]
fn children_of_a_stuck_task_are_stolen() {
    with_timeout(|| {
        let rt = rt_with(1, 2, 10);
        let done = counter();
        let d2 = done.clone();
        let (tx, rx) = mpsc::channel();
        let parent = rt.spawn(async move {
            for _ in 0..100 {
                let d = d2.clone();
                drop(weft::spawn(async move {
                    d.fetch_add(1, SeqCst);
                }));
            }
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(600));
        });
        rx.recv_timeout(common::TIMEOUT).unwrap();
        let t = Instant::now();
        while load(&done) < 99 && t.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let ran = load(&done);
        assert!(!parent.is_finished());
        assert!(
            ran >= 99,
            "{ran} of 100 children ran beside their stuck parent"
        );
        parent.join().unwrap();
        // The one in the LIFO slot runs right after its parent's poll returns.
        wait_until("every child ran", || load(&done) == 100);
    })
}
