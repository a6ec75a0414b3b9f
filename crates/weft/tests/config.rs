//! Configuration: Builder options, bad worker counts, the WEFT_WORKERS
//! variable (checked in a child process), and runtime context outside tasks.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use weft::{Builder, Handle, Runtime};

#[test]
fn zero_worker_threads_is_an_error() {
    match Builder::new().worker_threads(0).build() {
        Ok(_) => panic!("worker_threads(0) built a runtime"),
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            let msg = e.to_string();
            assert!(msg.contains("worker"), "unclear error message: {msg:?}");
        }
    }
}

#[test]
fn explicit_worker_count() {
    with_timeout(|| {
        let rt = workers(3);
        let stats = rt.stats();
        assert_eq!(stats.num_workers, 3);
        assert_eq!(stats.workers.len(), 3);
        assert_eq!(rt.handle().stats().num_workers, 3);
    })
}

#[test]
fn default_runtime_has_workers() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let stats = rt.stats();
        assert!(stats.num_workers >= 1);
        assert_eq!(stats.workers.len(), stats.num_workers);
    })
}

#[test]
fn thread_name_and_hooks() {
    with_timeout(|| {
        let (starts, stops) = (counter(), counter());
        let (a, b) = (starts.clone(), stops.clone());
        let rt = Builder::new()
            .worker_threads(3)
            .interactive_threads(1)
            .thread_name("cfg-test-worker")
            .on_thread_start(move || {
                a.fetch_add(1, Ordering::SeqCst);
            })
            .on_thread_stop(move || {
                b.fetch_add(1, Ordering::SeqCst);
            })
            .build()
            .unwrap();
        let name = rt
            .spawn(async { std::thread::current().name().map(String::from) })
            .join()
            .unwrap();
        let name = name.expect("worker thread has no name");
        assert!(
            name.starts_with("cfg-test-worker"),
            "worker thread is named {name:?}"
        );
        // Three default workers and one interactive worker.
        wait_until("on_thread_start ran for every worker", || {
            load(&starts) == 4
        });
        assert_eq!(load(&stops), 0);
        drop(rt);
        assert_eq!(
            load(&stops),
            4,
            "on_thread_stop did not run for every worker by the end of drop"
        );
        assert_eq!(load(&starts), 4);
    })
}

fn message(payload: Box<dyn std::any::Any + Send>) -> String {
    panic_message(&*payload).unwrap_or_else(|| "<non-string panic payload>".into())
}

#[test]
fn spawn_outside_a_runtime_panics() {
    let payload = std::panic::catch_unwind(|| drop(weft::spawn(async {})))
        .expect_err("weft::spawn outside a runtime did not panic");
    let msg = message(payload);
    assert!(msg.contains("no weft runtime"), "panic message: {msg:?}");

    let payload = std::panic::catch_unwind(|| drop(Handle::current()))
        .expect_err("Handle::current() outside a runtime did not panic");
    let msg = message(payload);
    assert!(msg.contains("no weft runtime"), "panic message: {msg:?}");
}

#[test]
fn try_current_inside_and_outside() {
    with_timeout(|| {
        assert!(Handle::try_current().is_err());
        let rt = workers(2);
        let in_task = rt
            .spawn(async { Handle::try_current().map(|h| h.stats().num_workers).ok() })
            .join()
            .unwrap();
        assert_eq!(in_task, Some(2));
        let in_block_on = rt.block_on(async { Handle::try_current().is_ok() });
        assert!(
            in_block_on,
            "Handle::try_current() fails inside Runtime::block_on"
        );
        assert!(
            Handle::try_current().is_err(),
            "the runtime context leaked out of block_on"
        );
        drop(rt);
        assert!(Handle::try_current().is_err());
    })
}

// ---- WEFT_WORKERS, tested in child processes ----

const CHILD: &str = "WEFT_TEST_CHILD";

/// Not a real test: when run as a child (WEFT_TEST_CHILD set) it builds a
/// runtime, checks that it works and prints its worker count.
#[test]
fn child_print_workers() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let rt = match mode.as_str() {
        "explicit2" => Builder::new().worker_threads(2).build(),
        _ => Runtime::new(),
    }
    .expect("the runtime failed to build");
    assert_eq!(rt.spawn(async { 20 + 1 }).join().unwrap(), 21);
    println!("CHILD num_workers={}", rt.stats().num_workers);
}

/// Runs `child_print_workers` in a child process; returns (num_workers, stderr).
fn run_child(mode: &str, weft_workers: Option<&str>) -> (usize, String) {
    let mut vars = vec![(CHILD, mode)];
    if let Some(value) = weft_workers {
        vars.push(("WEFT_WORKERS", value));
    }
    let out = child::run("child_print_workers", &vars, child::LIMIT);
    let (status, stdout, stderr) = (out.status, &out.stdout, &out.stderr);
    assert!(status.success(), "child failed ({status}) with WEFT_WORKERS={weft_workers:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let workers = out
        .report("num_workers")
        .unwrap_or_else(|| {
            panic!("child printed no worker count\nstdout:\n{stdout}\nstderr:\n{stderr}")
        })
        .parse()
        .unwrap();
    (workers, out.stderr)
}

#[test]
fn weft_workers_sets_the_default() {
    with_timeout(|| {
        assert_eq!(run_child("default", Some("3")).0, 3);
        assert_eq!(
            run_child("explicit2", Some("3")).0,
            2,
            "an explicit worker_threads() must beat WEFT_WORKERS"
        );
    })
}

#[test]
fn bad_weft_workers_is_reported_and_ignored() {
    with_timeout(|| {
        let (default, _) = run_child("default", None);
        assert!(default >= 1);
        for bad in ["abc", "0"] {
            let (n, stderr) = run_child("default", Some(bad));
            assert_eq!(n, default, "WEFT_WORKERS={bad} was not ignored");
            assert!(
                stderr.contains("WEFT_WORKERS"),
                "WEFT_WORKERS={bad} was not reported; stderr:\n{stderr}"
            );
        }
    })
}
