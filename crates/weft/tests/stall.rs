//! The stall reporter (sysmon): a task or fiber that keeps a worker past the threshold
//! is reported once; ordinary work is not.

mod common;

use std::time::Duration;

use common::{block_workers, child, on, with_timeout};

fn runtime(threshold: Duration) -> weft::Runtime {
    weft::Builder::new()
        .worker_threads(2)
        .stall_report(Some(threshold))
        .build()
        .unwrap()
}

#[test]
fn a_task_blocking_its_worker_is_reported_once() {
    with_timeout(|| {
        let rt = runtime(Duration::from_millis(50));
        rt.spawn(async { std::thread::sleep(Duration::from_millis(400)) })
            .join()
            .unwrap();
        assert_eq!(rt.stats().stalls_reported, 1);
    })
}

#[test]
fn a_fiber_spinning_without_waiting_is_reported() {
    with_timeout(|| {
        let rt = runtime(Duration::from_millis(50));
        let h = on(&rt, || {
            weft::fiber::Builder::new()
                .name("spinner")
                .spawn(|| std::thread::sleep(Duration::from_millis(400)))
        });
        h.join().unwrap();
        assert!(rt.stats().stalls_reported >= 1);
    })
}

#[test]
fn short_tasks_and_waiting_fibers_are_not_reported() {
    with_timeout(|| {
        let rt = runtime(Duration::from_millis(100));
        let fibers: Vec<_> = on(&rt, || {
            (0..50)
                .map(|_| {
                    weft::fiber::spawn(|| {
                        for _ in 0..5 {
                            weft::fiber::sleep(Duration::from_millis(30));
                        }
                    })
                })
                .collect()
        });
        rt.block_on(async {
            for _ in 0..200 {
                weft::spawn(async { weft::time::sleep(Duration::from_millis(1)).await })
                    .await
                    .unwrap();
            }
        });
        for f in fibers {
            f.join().unwrap();
        }
        assert_eq!(rt.stats().stalls_reported, 0);
    })
}

#[test]
fn a_stall_report_names_the_fiber_on_stderr() {
    const CHILD: &str = "WEFT_STALL_CHILD";
    with_timeout(|| {
        if std::env::var_os(CHILD).is_some() {
            let rt = runtime(Duration::from_millis(50));
            on(&rt, || {
                weft::fiber::Builder::new()
                    .name("spinner")
                    .spawn(|| std::thread::sleep(Duration::from_millis(400)))
            })
            .join()
            .unwrap();
            drop(rt);
            return;
        }
        let out = child::run(
            "a_stall_report_names_the_fiber_on_stderr",
            &[(CHILD, "1")],
            child::LIMIT,
        );
        assert!(out.status.success());
        let err = &out.stderr;
        assert!(
            err.contains("weft: stall: fiber 'spinner'"),
            "stderr: {err}"
        );
        assert!(err.contains("WEFT_DEBUG_STALL=0"), "stderr: {err}");
    })
}

#[test]
fn the_report_can_be_turned_off() {
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(1)
            .stall_report(None)
            .build()
            .unwrap();
        rt.spawn(async { std::thread::sleep(Duration::from_millis(100)) })
            .join()
            .unwrap();
        assert_eq!(rt.stats().stalls_reported, 0);
    })
}

/// Tasks queued behind a worker stuck in one poll are not stranded: sysmon wakes an
/// idle worker to steal them even when the wake heuristics judged them too short to
/// be worth a wake (they had measured the earlier tasks as tiny).
#[test]
fn tasks_queued_behind_a_blocked_worker_are_taken_by_an_idle_one() {
    with_timeout(|| {
        let rt = runtime(Duration::from_secs(5));
        for _ in 0..5 {
            let tiny: Vec<_> = (0..50)
                .map(|_| rt.spawn(async { weft::task::yield_now().await }))
                .collect();
            for t in tiny {
                t.join().unwrap();
            }
            // Two tasks that block their workers (what async code should not do, but
            // does), spawned together: the second may queue behind the first.
            let blockers = block_workers(&rt, 2, Duration::from_secs(3))
                .expect("a task stayed queued behind a blocked worker");
            for b in blockers {
                b.release();
            }
        }
    })
}
