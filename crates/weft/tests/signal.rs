//! `weft::signal::ctrl_c`: the process sends itself `SIGINT`.
//!
//! The handler is process-wide, so these tests live in their own file (their own
//! process) and take turns (`SERIAL`). Every one of them installs the handler (a first
//! poll of `ctrl_c`) before it raises anything: an uninstalled `SIGINT` ends the
//! process.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

mod common;
use common::signal::{raise, spawn_ctrl_c};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn rt() -> weft::Runtime {
    weft::Builder::new().worker_threads(2).build().unwrap()
}

/// Runs `f` with `rt` as the current runtime (a fiber it spawns is `rt`'s).
fn on<T>(rt: &weft::Runtime, f: impl FnOnce() -> T) -> T {
    rt.block_on(async { f() })
}

fn wait_until(flag: &AtomicBool) {
    for _ in 0..2000 {
        if flag.load(SeqCst) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the future was never polled");
}

/// Waits (at most 10 s) for `h`; `None` if it did not finish.
fn finish<T: Send + 'static>(rt: &weft::Runtime, h: weft::JoinHandle<T>) -> Option<T> {
    rt.block_on(weft::time::timeout(Duration::from_secs(10), h))
        .ok()
        .map(|r| r.unwrap())
}

#[test]
fn ctrl_c_completes_on_a_sigint_after_its_first_poll() {
    let _g = serial();
    let rt = rt();
    let (h, polled) = spawn_ctrl_c(&rt);
    wait_until(&polled);
    // Polled and pending: nothing was raised since.
    std::thread::sleep(Duration::from_millis(20));
    assert!(!h.is_finished());
    raise();
    finish(&rt, h)
        .expect("ctrl_c did not complete after SIGINT")
        .unwrap();
}

#[test]
fn one_sigint_completes_every_waiter_and_later_ones_do_not_kill() {
    let _g = serial();
    let rt = rt();
    let waiters: Vec<_> = (0..4).map(|_| spawn_ctrl_c(&rt)).collect();
    for (_, polled) in &waiters {
        wait_until(polled);
    }
    raise();
    for (h, _) in waiters {
        finish(&rt, h).expect("a waiter missed the SIGINT").unwrap();
    }
    // Nobody waits now: the handler stays installed, and the process lives on.
    raise();
    raise();
    std::thread::sleep(Duration::from_millis(50));
    // A new waiter is not completed by those earlier signals.
    let (h, polled) = spawn_ctrl_c(&rt);
    wait_until(&polled);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !h.is_finished(),
        "completed by a SIGINT before its first poll"
    );
    raise();
    finish(&rt, h).expect("ctrl_c did not complete").unwrap();
}

/// Raises SIGINT every few milliseconds until `done` (a bounded number of times): a
/// blocking waiter cannot say when it has started waiting, and one raise before that
/// is not one after the call.
fn raise_until(done: impl Fn() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        raise();
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the blocking waiter never completed");
}

#[test]
fn ctrl_c_blocking_from_a_fiber() {
    let _g = serial();
    let rt = rt();
    // Install the handler first.
    let (h, polled) = spawn_ctrl_c(&rt);
    wait_until(&polled);
    let fiber = on(&rt, || weft::fiber::spawn(weft::signal::ctrl_c_blocking));
    raise_until(|| fiber.is_finished());
    fiber.join().unwrap().unwrap();
    finish(&rt, h).unwrap().unwrap();
}

#[test]
fn ctrl_c_blocking_from_a_plain_thread_and_a_worker() {
    let _g = serial();
    let rt = rt();
    let (h, polled) = spawn_ctrl_c(&rt);
    wait_until(&polled);
    let thread = std::thread::spawn(weft::signal::ctrl_c_blocking);
    raise_until(|| thread.is_finished());
    thread.join().unwrap().unwrap();
    // On a worker, inside a task: the worker helps meanwhile.
    let task = rt.spawn(async {
        weft::signal::ctrl_c_blocking()?;
        Ok::<_, std::io::Error>(weft::spawn(async { 5 }).await.unwrap())
    });
    raise_until(|| task.is_finished());
    assert_eq!(finish(&rt, task).unwrap().unwrap(), 5);
    finish(&rt, h).unwrap().unwrap();
}

#[test]
fn a_dropped_waiter_leaves_the_others_alone() {
    let _g = serial();
    let rt = rt();
    let (keep, polled) = spawn_ctrl_c(&rt);
    wait_until(&polled);
    let (dropped, polled) = spawn_ctrl_c(&rt);
    wait_until(&polled);
    dropped.abort();
    assert!(rt.block_on(dropped).unwrap_err().is_cancelled());
    raise();
    finish(&rt, keep)
        .expect("the kept waiter missed the SIGINT")
        .unwrap();
    // Polled by hand, with no runtime involved.
    let mut f = pin!(weft::signal::ctrl_c());
    let waker = std::task::Waker::noop();
    assert!(f
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
        .is_pending());
    raise();
    for _ in 0..2000 {
        if let Poll::Ready(r) = f.as_mut().poll(&mut std::task::Context::from_waker(waker)) {
            return r.unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("ctrl_c polled by hand never completed");
}
