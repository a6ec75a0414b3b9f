//! Adversarial review (session 43) of the runtime monitor: temporary workers started for
//! workers blocked in plain std calls (sleep, std `Mutex`, std channels) inside tasks and
//! fibers, fibers tied to a temporary worker and aborted there, the deadlock watcher
//! beside a running temporary worker, stall reports of tasks that panic, dumps and
//! statistics read from destructors during shutdown, the interactive pool's temporary
//! workers, and the blocking pool's keep-alive.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{
    blocker, child, counter, drop_within, live, load, on, rt_with, wait_until, with_timeout,
    Tracked,
};

const CHILD: &str = "WEFT_REVIEW_S43_SYSMON_CHILD";

fn is_child() -> bool {
    std::env::var(CHILD).is_ok()
}

fn run_child(test: &str, vars: &[(&str, &str)]) -> child::Output {
    let mut all = vec![(CHILD, "1")];
    all.extend_from_slice(vars);
    child::run(test, &all, Duration::from_secs(20))
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

// ---------------------------------------------------------------------------------
// 1. The deadlock watcher beside a temporary worker that is running

/// Child: the only base worker parks while a temporary worker runs one long poll (a
/// computation that ends by waking a parked task). The runtime is making progress by
/// itself; the watcher must not call it a deadlock (its doc: "every worker of every
/// pool has its parked bit published").
#[test]
fn child_deadlock_watch_with_a_running_temporary_worker() {
    if !is_child() {
        return;
    }
    let rt = weft::Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .max_extra_workers(1)
        .extra_worker_keep_alive(Duration::from_secs(10))
        .stall_report(None)
        .build()
        .unwrap();
    let (tx, rx) = weft::chan::bounded::<u32>(1);
    // Parked on a weft channel for the whole case.
    let waiter = rt.spawn(async move { rx.recv().await.unwrap() });
    // Holds the base worker for 300 ms, so that the next task goes to a temporary one.
    let stuck = blocker(&rt, Duration::from_millis(300));
    let (started_tx, started_rx) = mpsc::channel();
    let long = rt.spawn(async move {
        started_tx.send(thread_name()).unwrap();
        // A long computation on the temporary worker: 1.2 s without returning.
        common::spin_for(Duration::from_millis(1200));
        tx.send(7).await.unwrap();
    });
    let name = started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    println!("CHILD long_ran_on={name}");
    stuck.join().unwrap();
    long.join().unwrap();
    assert_eq!(waiter.join().unwrap(), 7);
    println!("CHILD temp_started={}", rt.stats().temp_workers_started);
    drop(rt);
    println!("CHILD done=ok");
}

#[test]
fn deadlock_watch_with_a_running_temporary_worker() {
    with_timeout(|| {
        let out = run_child(
            "child_deadlock_watch_with_a_running_temporary_worker",
            &[("WEFT_DEBUG_DEADLOCK", "1")],
        );
        out.assert_finished();
        let ctx = out.context();
        assert_eq!(out.report("temp_started"), Some("1"), "{ctx}");
        assert!(
            !out.stderr.contains("weft: deadlock"),
            "a false deadlock report while a temporary worker ran\n{ctx}"
        );
    })
}

/// The longest "for N" of a dump's lines, in milliseconds.
fn longest_for_ms(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.rsplit_once(" for "))
        .map(|(_, t)| {
            if let Some(ms) = t.strip_suffix(" ms") {
                ms.trim().parse::<u64>().unwrap()
            } else {
                let s = t.strip_suffix(" s").expect("a time in ms or s");
                (s.trim().parse::<f64>().unwrap() * 1000.0) as u64
            }
        })
        .max()
        .unwrap_or(0)
}

/// Child: in a fresh process, a task spawned and parked right after the runtime is
/// built, and a task that runs one long poll; a dump 300 ms later must not say that
/// either has been so for longer than the process has lived.
#[test]
fn child_dump_times_in_a_fresh_process() {
    if !is_child() {
        return;
    }
    let born = Instant::now();
    let rt = weft::Builder::new()
        .worker_threads(1)
        .interactive_threads(0)
        .build()
        .unwrap();
    let (tx, rx) = weft::chan::bounded::<u32>(1);
    let waiter = rt.spawn(async move { rx.recv().await.unwrap() });
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let long = rt.spawn(async move {
        let _ = go_rx.recv_timeout(Duration::from_secs(10));
    });
    std::thread::sleep(Duration::from_millis(300));
    let text = rt.dump().to_string();
    let lived = born.elapsed();
    println!("CHILD lived_ms={}", lived.as_millis());
    println!("CHILD longest_ms={}", longest_for_ms(&text));
    for l in text.lines() {
        println!("CHILD line={l}");
    }
    go_tx.send(()).unwrap();
    long.join().unwrap();
    tx.send_blocking(1).unwrap();
    assert_eq!(waiter.join().unwrap(), 1);
    println!("CHILD done=ok");
}

#[test]
fn dump_times_are_not_longer_than_the_process_lived() {
    with_timeout(|| {
        for _ in 0..3 {
            let out = run_child("child_dump_times_in_a_fresh_process", &[]);
            out.assert_finished();
            let ctx = out.context();
            let lived: u64 = out.report("lived_ms").unwrap().parse().unwrap();
            let longest: u64 = out.report("longest_ms").unwrap().parse().unwrap();
            assert!(
                longest <= lived + 1000,
                "a dump 300 ms after the runtime started says a task has been so for \
                 {longest} ms\n{ctx}"
            );
        }
    })
}

// ---------------------------------------------------------------------------------
// 2. Fibers tied to a temporary worker

/// Starts `n` fibers on a temporary worker (the base worker is stuck for `stuck_for`),
/// each keeping a `Tracked` value and waiting on `never`; returns their handles once
/// all run, with the names of the threads they started on.
fn fibers_on_a_temporary_worker(
    rt: &weft::Runtime,
    n: usize,
    live: &Arc<AtomicUsize>,
    never: &Arc<weft::sync::Notify>,
) -> (Vec<weft::JoinHandle<()>>, Vec<String>) {
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let keep = Tracked::new(i, live);
            let never = never.clone();
            let tx = tx.clone();
            on(rt, move || {
                weft::fiber::spawn(move || {
                    let _keep = keep;
                    tx.send(thread_name()).unwrap();
                    never.notified_blocking();
                })
            })
        })
        .collect();
    let names = (0..n)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("a fiber ran")
        })
        .collect();
    (handles, names)
}

/// Fibers started on a temporary worker, suspended past its keep-alive, then aborted
/// from a plain thread: each is unwound (its local dropped once), each handle reports
/// cancelled, and the temporary worker retires afterwards. Several rounds, so that the
/// slot restarts with new fibers tied to it.
#[test]
fn aborting_fibers_tied_to_a_temporary_worker() {
    with_timeout(|| {
        let rt = rt_with(1, 1, 5);
        let live = live();
        for round in 0..3 {
            let stuck = blocker(&rt, Duration::from_millis(250));
            let never = Arc::new(weft::sync::Notify::new());
            let (handles, names) = fibers_on_a_temporary_worker(&rt, 4, &live, &never);
            assert!(
                !stuck.is_finished(),
                "round {round}: ran on the base worker"
            );
            assert!(
                names.iter().all(|n| n.ends_with("-1")),
                "round {round}: fibers started on {names:?}"
            );
            // Past the keep-alive many times over: the fibers keep their worker.
            stuck.join().unwrap();
            std::thread::sleep(Duration::from_millis(40));
            assert_eq!(load(&live), 4, "round {round}");
            for h in &handles {
                h.abort();
            }
            for h in handles {
                let err = common::join_within(h, 10).unwrap_err();
                assert!(err.is_cancelled(), "round {round}: {err:?}");
            }
            assert_eq!(
                load(&live),
                0,
                "round {round}: a fiber's local was not dropped"
            );
            wait_until("the temporary worker retires", || {
                let s = rt.stats();
                s.temp_workers_started == s.temp_workers_retired
            });
        }
        assert!(rt.stats().temp_workers_started >= 3);
        drop_within(rt, Duration::from_secs(10), "after the rounds");
    })
}

/// A fiber tied to a temporary worker blocks that worker in `std::thread::sleep` while
/// the runtime is dropped: the drop waits for it, and the fiber and its siblings on the
/// same worker are unwound there (their locals dropped once).
#[test]
fn runtime_dropped_while_a_fiber_blocks_its_temporary_worker() {
    with_timeout(|| {
        let rt = rt_with(1, 1, 5);
        let live = live();
        let stuck = blocker(&rt, Duration::from_millis(200));
        let never = Arc::new(weft::sync::Notify::new());
        let (parked, _) = fibers_on_a_temporary_worker(&rt, 3, &live, &never);
        let (tx, rx) = mpsc::channel();
        let keep = Tracked::new(99, &live);
        let sleeper = on(&rt, move || {
            weft::fiber::spawn(move || {
                let _keep = keep;
                tx.send(thread_name()).unwrap();
                std::thread::sleep(Duration::from_millis(400));
                weft::fiber::yield_now();
            })
        });
        let name = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(!stuck.is_finished());
        assert!(name.ends_with("-1"), "{name}");
        drop(stuck);
        drop_within(
            rt,
            Duration::from_secs(15),
            "a fiber blocking a temporary worker",
        );
        assert_eq!(load(&live), 0, "a fiber's local was not dropped");
        for h in parked {
            assert!(common::join_within(h, 5).unwrap_err().is_cancelled());
        }
        let _ = common::join_within(sleeper, 5);
    })
}

// ---------------------------------------------------------------------------------
// 3. Workers blocked in plain std calls

/// A chain of tasks, each blocked on a std channel for the value of the next one,
/// spawned from outside one after the other on a one-worker runtime: only temporary
/// workers can run the later links. With a cap as long as the chain, it completes.
#[test]
fn a_chain_of_std_blocked_tasks_completes_on_temporary_workers() {
    with_timeout(|| {
        const LINKS: usize = 4;
        let rt = rt_with(1, LINKS, 20);
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..LINKS).map(|_| mpsc::channel::<usize>()).unzip();
        let mut txs: Vec<Option<mpsc::Sender<usize>>> = txs.into_iter().map(Some).collect();
        let mut handles = Vec::new();
        for (i, rx) in rxs.into_iter().enumerate() {
            // Link i waits for link i + 1 (the last for nobody), then passes its value on.
            let next_tx = if i == 0 { None } else { txs[i - 1].take() };
            let h = rt.spawn(async move {
                let v = if i + 1 < LINKS {
                    rx.recv_timeout(Duration::from_secs(20))
                        .expect("the next link never ran")
                } else {
                    0
                };
                if let Some(tx) = next_tx {
                    tx.send(v + 1).unwrap();
                }
                v
            });
            handles.push(h);
            std::thread::sleep(Duration::from_millis(5));
        }
        let got: Vec<usize> = handles
            .into_iter()
            .map(|h| common::join_within(h, 25).unwrap())
            .collect();
        assert_eq!(got, vec![3, 2, 1, 0]);
        let s = rt.stats();
        assert!(s.temp_workers_started >= 1, "{s:?}");
        assert!(s.temp_workers_started <= LINKS as u64 * 8, "{s:?}");
    })
}

/// The same chain, each link a fiber blocked in a std `Mutex` held by the next link's
/// owner until it ran: fibers blocked in std calls still let the runtime progress.
#[test]
fn fibers_blocked_in_std_mutexes_let_others_run() {
    with_timeout(|| {
        let rt = rt_with(1, 3, 20);
        let gates: Vec<_> = (0..3)
            .map(|_| Arc::new(std::sync::Mutex::new(0u32)))
            .collect();
        // Every gate locked by a plain thread until the fiber of the next gate runs.
        let (ran_tx, ran_rx) = mpsc::channel::<usize>();
        let (locked_tx, locked_rx) = mpsc::channel();
        let holders: Vec<_> = gates
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let g = g.clone();
                let locked_tx = locked_tx.clone();
                let (go_tx, go_rx) = mpsc::channel::<()>();
                let t = std::thread::spawn(move || {
                    let mut v = g.lock().unwrap();
                    locked_tx.send(()).unwrap();
                    let _ = go_rx.recv_timeout(Duration::from_secs(20));
                    *v = i as u32 + 1;
                });
                (t, go_tx)
            })
            .collect();
        for _ in 0..3 {
            locked_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        let fibers: Vec<_> = gates
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let g = g.clone();
                let ran_tx = ran_tx.clone();
                let h = on(&rt, move || {
                    weft::fiber::spawn(move || {
                        ran_tx.send(i).unwrap();
                        let v = *g.lock().unwrap();
                        v
                    })
                });
                std::thread::sleep(Duration::from_millis(5));
                h
            })
            .collect();
        // Every fiber runs (each blocks a worker, base or temporary) before any gate opens.
        let mut ran: Vec<usize> = (0..3)
            .map(|_| {
                ran_rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a fiber never ran")
            })
            .collect();
        ran.sort_unstable();
        assert_eq!(ran, vec![0, 1, 2]);
        for (t, go) in holders {
            go.send(()).unwrap();
            t.join().unwrap();
        }
        let got: Vec<u32> = fibers
            .into_iter()
            .map(|h| common::join_within(h, 10).unwrap())
            .collect();
        assert_eq!(got, vec![1, 2, 3]);
    })
}

// ---------------------------------------------------------------------------------
// 4. Stall reports

/// Tasks and a named fiber that stall past the report's threshold and then panic (a
/// task panicking right after it is reported): each is reported, each join reports the
/// panic, and the runtime goes on (the monitor keeps running: a later stall is
/// reported too).
#[test]
fn stalled_tasks_that_panic_after_their_report() {
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(2)
            .interactive_threads(0)
            .max_extra_workers(1)
            .stall_report(Some(Duration::from_millis(20)))
            .build()
            .unwrap();
        let a = rt.spawn(async {
            std::thread::sleep(Duration::from_millis(150));
            panic!("after the stall report");
        });
        let f = on(&rt, || {
            weft::fiber::Builder::new()
                .name("stall\n'name\u{0}")
                .spawn(|| {
                    std::thread::sleep(Duration::from_millis(150));
                    panic!("a fiber after its stall report");
                })
        });
        assert!(common::join_within(a, 10).unwrap_err().is_panic());
        assert!(common::join_within(f, 10).unwrap_err().is_panic());
        let first = rt.stats().stalls_reported;
        assert!(first >= 2, "{first}");
        rt.spawn(async { std::thread::sleep(Duration::from_millis(150)) })
            .join()
            .unwrap();
        assert!(rt.stats().stalls_reported > first);
        assert_eq!(rt.spawn(async { 5 }).join().unwrap(), 5);
    })
}

// ---------------------------------------------------------------------------------
// 5. Dumps and statistics from destructors during shutdown

/// Futures whose destructors, run by the runtime's drop (shutdown cancelling them),
/// read the runtime's dump and statistics through a handle, while a temporary worker
/// runs and fibers tied to it are unwound: nothing deadlocks, and every destructor runs.
#[test]
fn dump_and_stats_from_destructors_during_shutdown() {
    with_timeout(|| {
        let rt = rt_with(1, 2, 10_000);
        let handle = rt.handle().clone();
        let dropped = counter();
        let stuck = blocker(&rt, Duration::from_millis(300));
        let mut handles = Vec::new();
        for _ in 0..8 {
            let h = handle.clone();
            let d = dropped.clone();
            let guard = common::OnDrop(move || {
                let dump = h.dump();
                let _ = dump.to_string();
                let _ = h.stats();
                d.fetch_add(1, SeqCst);
            });
            handles.push(rt.spawn(async move {
                let _guard = guard;
                std::future::pending::<()>().await
            }));
        }
        let (tx, rx) = mpsc::channel();
        for _ in 0..4 {
            let h = handle.clone();
            let d = dropped.clone();
            let tx = tx.clone();
            handles.push(on(&rt, move || {
                weft::fiber::spawn(move || {
                    let _guard = common::OnDrop(move || {
                        let _ = h.dump().to_string();
                        let _ = h.stats();
                        d.fetch_add(1, SeqCst);
                    });
                    tx.send(()).unwrap();
                    weft::fiber::sleep(Duration::from_secs(3600));
                })
            }));
        }
        for _ in 0..4 {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        assert!(!stuck.is_finished());
        let text = rt.dump().to_string();
        assert!(
            text.contains("12 live") || text.contains("13 live"),
            "{text}"
        );
        drop(stuck);
        drop_within(rt, Duration::from_secs(15), "destructors reading the dump");
        assert_eq!(load(&dropped), 12);
        for h in handles {
            assert!(common::join_within(h, 5).unwrap_err().is_cancelled());
        }
        // The handle outlives the runtime: a dump of a runtime gone is empty or
        // at least does not hang.
        let _ = handle.dump().to_string();
        let _ = handle.stats();
    })
}

/// A dump taken in a loop from a plain thread while temporary workers start and retire
/// (1 ms keep-alive) and tasks run on them: the running entries name a worker of the
/// pool (a temporary slot's number included), and the loop never blocks.
#[test]
fn dumps_while_temporary_workers_come_and_go() {
    with_timeout(|| {
        let rt = rt_with(1, 2, 1);
        let stop = Arc::new(AtomicBool::new(false));
        let dumper = {
            let h = rt.handle().clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut saw_temp = false;
                while !stop.load(SeqCst) && n < 100_000 {
                    let text = h.dump().to_string();
                    saw_temp |= text.contains("running on worker 1")
                        || text.contains("running on worker 2");
                    n += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
                (n, saw_temp)
            })
        };
        for _ in 0..6 {
            let stuck = blocker(&rt, Duration::from_millis(60));
            let hs: Vec<_> = (0..20)
                .map(|_| rt.spawn(async { std::thread::sleep(Duration::from_millis(2)) }))
                .collect();
            for h in hs {
                common::join_within(h, 10).unwrap();
            }
            stuck.join().unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, SeqCst);
        let (n, _saw_temp) = common::thread_within(dumper, 10);
        assert!(n > 0);
        let s = rt.stats();
        assert!(s.temp_workers_started >= 1, "{s:?}");
    })
}

// ---------------------------------------------------------------------------------
// 6. The interactive pool

/// The interactive pool's only worker blocked in a std sleep: interactive tasks still
/// run, on a temporary worker of the interactive pool (named as its workers are), not
/// on the default pool.
#[test]
fn the_interactive_pool_gets_its_own_temporary_workers() {
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(1)
            .interactive_threads(1)
            .max_extra_workers(1)
            .thread_name("s43sm")
            .build()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let stuck = rt.spawn_on(weft::Pool::Interactive, async move {
            tx.send(thread_name()).unwrap();
            std::thread::sleep(Duration::from_millis(400));
        });
        let stuck_name = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let t = Instant::now();
        let names: Vec<String> = (0..10)
            .map(|_| rt.spawn_on(weft::Pool::Interactive, async { thread_name() }))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| common::join_within(h, 10).unwrap())
            .collect();
        let took = t.elapsed();
        assert!(!stuck.is_finished(), "took {took:?}");
        for n in &names {
            assert_ne!(n, &stuck_name);
            assert!(
                n.starts_with(stuck_name.trim_end_matches(char::is_numeric)),
                "an interactive task ran on {n} (the pool's worker is {stuck_name})"
            );
        }
        stuck.join().unwrap();
        let s = rt.stats();
        assert!(s.temp_workers_started >= 1, "{s:?}");
    })
}

// ---------------------------------------------------------------------------------
// 7. The blocking pool

/// A zero keep-alive for blocking threads: each thread leaves as soon as the queue is
/// empty. Closures submitted in bursts from tasks, plain threads and from inside other
/// closures all run, once each, and the pool ends with no thread.
#[test]
fn blocking_pool_with_a_zero_keep_alive() {
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(2)
            .interactive_threads(0)
            .max_blocking_threads(3)
            .thread_keep_alive(Duration::ZERO)
            .build()
            .unwrap();
        let ran = counter();
        for round in 0..30 {
            let hs: Vec<_> = (0..5)
                .map(|i| {
                    let r = ran.clone();
                    let h = rt.handle().clone();
                    rt.spawn(async move {
                        let inner = {
                            let r = r.clone();
                            h.spawn_blocking(move || {
                                r.fetch_add(1, SeqCst);
                                i
                            })
                        };
                        let outer = h.spawn_blocking(move || {
                            r.fetch_add(1, SeqCst);
                            if i % 2 == 0 {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            i * 10
                        });
                        inner.await.unwrap() + outer.await.unwrap()
                    })
                })
                .collect();
            let sum: usize = hs
                .into_iter()
                .map(|h| common::join_within(h, 10).unwrap())
                .sum();
            assert_eq!(sum, (0..5).map(|i| i * 11).sum::<usize>(), "round {round}");
        }
        assert_eq!(load(&ran), 300);
        wait_until("the blocking threads leave", || {
            let b = rt.stats().blocking;
            b.threads == 0 && b.queued == 0
        });
        let b = rt.stats().blocking;
        assert_eq!(b.tasks, 300, "{b:?}");
    })
}

// ---------------------------------------------------------------------------------
// 8. The runtime dropped from a temporary worker's thread hooks

/// Child: the last handle to the runtime is dropped by `on_thread_stop` on a temporary
/// worker that retires (a program that keeps its runtime in a shared slot and ends it
/// when its pool shrinks back). Dropping a runtime on one of its own workers is
/// supported inside a task; in the hook it must not wait for its own thread.
#[test]
fn child_runtime_dropped_by_a_retiring_workers_stop_hook() {
    if !is_child() {
        return;
    }
    let slot: Arc<std::sync::Mutex<Option<weft::Runtime>>> = Arc::default();
    let (dropped_tx, dropped_rx) = mpsc::channel::<String>();
    let rt = {
        let slot = slot.clone();
        weft::Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .max_extra_workers(1)
            .extra_worker_keep_alive(Duration::from_millis(5))
            .thread_name("s43hook")
            .on_thread_stop(move || {
                let me = thread_name();
                if me.ends_with("-1") {
                    let rt = slot.lock().unwrap().take();
                    if let Some(rt) = rt {
                        let _ = dropped_tx.send("dropping".into());
                        drop(rt);
                        let _ = dropped_tx.send(me);
                    }
                }
            })
            .build()
            .unwrap()
    };
    let stuck = blocker(&rt, Duration::from_millis(150));
    let h = rt.spawn(async { thread_name() });
    *slot.lock().unwrap() = Some(rt);
    let ran_on = common::join_within(h, 10).unwrap();
    println!("CHILD ran_on={ran_on}");
    stuck.join().unwrap();
    let dropping = dropped_rx.recv_timeout(Duration::from_secs(5));
    println!("CHILD hook_dropping={}", dropping.is_ok());
    match dropped_rx.recv_timeout(Duration::from_secs(5)) {
        Ok(who) => println!("CHILD dropped_by={who}"),
        Err(_) => println!("CHILD dropped_by=hang"),
    }
    println!("CHILD done=ok");
    // A hung drop leaves a worker thread behind: leave without waiting for it.
    std::process::exit(0);
}

#[test]
fn runtime_dropped_by_a_retiring_workers_stop_hook() {
    with_timeout(|| {
        let out = run_child("child_runtime_dropped_by_a_retiring_workers_stop_hook", &[]);
        out.assert_finished();
        let ctx = out.context();
        assert!(
            out.report("ran_on").is_some_and(|n| n.ends_with("-1")),
            "the task did not run on the temporary worker\n{ctx}"
        );
        assert_eq!(out.report("hook_dropping"), Some("true"), "{ctx}");
        assert_ne!(
            out.report("dropped_by"),
            Some("hang"),
            "dropping the runtime in a retiring worker's stop hook hung\n{ctx}"
        );
    })
}
