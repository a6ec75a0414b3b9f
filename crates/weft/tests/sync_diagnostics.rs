//! Lock-depth diagnostics (issue 16, spec 003): `PARK-UNDER-LOCK` fires when a fiber
//! parks holding a `watch::Ref` (the channel's value lock), with the lock stack and the
//! fiber's name; `WAKE-FLUSH-UNDER-LOCK` fires when wakes are flushed under a weft lock
//! (a thread that notifies a `Notify` while it holds a `watch::Ref`). Both
//! run deliberately wrong programs in a child process; a workload of every primitive
//! in every context reports neither. Debug builds report always; release builds with
//! `WEFT_DEBUG_LOCKS=1` (set for every child here, so the test holds in both).

mod common;

use std::sync::Arc;
use std::time::Duration;

use weft::sync::{self, watch, Notify};

const CHILD: &str = "WEFT_SYNC_DIAG_CHILD";

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "park_under_lock" => child_park_under_lock(),
        "wake_flush_under_lock" => child_wake_flush_under_lock(),
        "silent" => child_silent(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str) -> common::child::Output {
    common::child::run_case_with_lock_checks(CHILD, case)
}

/// A fiber holds `borrow()` across a blocking wait.
fn child_park_under_lock() {
    let rt = weft::Runtime::new().unwrap();
    let (tx, rx) = watch::channel(1);
    // (In an `Option`: the block's output is not itself awaited.)
    let h = rt
        .block_on(async move {
            Some(weft::fiber::Builder::new().name("borrower").spawn(move || {
                let r = rx.borrow();
                weft::fiber::sleep(Duration::from_millis(5)); // parks under the lock
                *r
            }))
        })
        .unwrap();
    assert_eq!(h.join().unwrap(), 1);
    drop(tx);
}

#[test]
fn park_under_lock_is_reported_with_the_lock_stack() {
    let out = run_child("park_under_lock");
    assert!(out.stderr.contains("PARK-UNDER-LOCK"), "{}", out.context());
    assert!(out.stderr.contains("'borrower'"), "{}", out.context());
    assert!(
        out.stderr.contains("weft::sync::watch (value)"),
        "{}",
        out.context()
    );
}

/// A thread that notifies while it holds a `watch::Ref` (the watch's value lock, which
/// counts in the lock depth): the notification's wake is flushed under that lock. (Until
/// session 27 a waker whose `clone` notified did it too: a waker was cloned under a
/// wait-list lock. Wakers are cloned before weft's locks now.)
fn child_wake_flush_under_lock() {
    let rt = weft::Runtime::new().unwrap();
    let other = Arc::new(Notify::new());
    // Something waits on the other Notify, so its notify_one has a wake to flush.
    let o = other.clone();
    let waiting = rt.spawn(async move { o.notified().await });
    std::thread::sleep(Duration::from_millis(50));
    let (_tx, rx) = weft::sync::watch::channel(0u8);
    {
        let _value = rx.borrow();
        other.notify_one(); // wrong: wakes while holding the watch's lock
    }
    waiting.join().unwrap();
}

#[test]
fn wake_flush_under_lock_is_reported() {
    let out = run_child("wake_flush_under_lock");
    assert!(
        out.stderr.contains("WAKE-FLUSH-UNDER-LOCK"),
        "{}",
        out.context()
    );
    assert!(
        out.stderr.contains("weft::sync::watch (value)"),
        "{}",
        out.context()
    );
}

/// Every primitive, in every context, used correctly (guards held across waits too).
fn child_silent() {
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    let m = Arc::new(sync::Mutex::new(0));
    let rw = Arc::new(sync::RwLock::new(0));
    let sem = Arc::new(sync::Semaphore::new(1));
    let n = Arc::new(Notify::new());
    let b = Arc::new(sync::Barrier::new(3));
    let wg = sync::WaitGroup::new();
    let (wtx, wrx) = watch::channel(0);
    let (btx, _brx) = sync::broadcast::channel(4);
    wg.add(2);
    let (m1, rw1, s1, n1, b1, wg1, mut w1, mut br1) = (
        m.clone(),
        rw.clone(),
        sem.clone(),
        n.clone(),
        b.clone(),
        wg.clone(),
        wrx.clone(),
        btx.subscribe(),
    );
    let task = rt.spawn(async move {
        let mut g = m1.lock().await;
        weft::time::sleep(Duration::from_millis(2)).await;
        *g += 1;
        drop(g);
        *rw1.write().await += 1;
        drop(s1.acquire().await.unwrap());
        n1.notified().await;
        b1.wait().await;
        w1.changed().await.unwrap();
        br1.recv().await.unwrap();
        wg1.done();
    });
    let (m2, rw2, s2, b2, wg2, mut w2) = (
        m.clone(),
        rw.clone(),
        sem.clone(),
        b.clone(),
        wg.clone(),
        wrx.clone(),
    );
    let fiber = rt
        .block_on(async move {
            Some(weft::fiber::spawn(move || {
                let mut g = m2.lock_blocking();
                weft::fiber::sleep(Duration::from_millis(2));
                *g += 1;
                drop(g);
                drop(rw2.read_blocking());
                drop(s2.acquire_blocking().unwrap());
                b2.wait_blocking();
                w2.changed_blocking().unwrap();
                wg2.done();
            }))
        })
        .unwrap();
    let (tx, rx) = sync::oneshot::channel();
    std::thread::spawn(move || tx.send(1).unwrap());
    assert_eq!(rx.recv_blocking(), Ok(1));
    std::thread::sleep(Duration::from_millis(20));
    n.notify_one();
    b.wait_blocking();
    wtx.send(1).unwrap();
    btx.send(1).unwrap();
    wg.wait_blocking();
    task.join().unwrap();
    fiber.join().unwrap();
    assert_eq!(*m.lock_blocking(), 2);
}

#[test]
fn correct_programs_are_silent() {
    let out = run_child("silent");
    assert!(!out.stderr.contains("UNDER-LOCK"), "{}", out.context());
}
