//! MPMC stress (issue 15, "Correctness"): 4 senders and 4 receivers on one channel of
//! each flavour, mixing plain threads, fibers and async tasks on a 2-worker runtime;
//! every value arrives exactly once, and each receiver sees each sender's values in
//! the order they were sent.

mod chan_common;

use std::sync::{Arc, Mutex};

use chan_common::*;
use weft::chan::{Receiver, Sender};

const PER_SENDER: u64 = 10_000;
const SENDERS: u64 = 4;

/// A value: sender in the high bits, sequence number in the low ones.
fn val(sender: u64, i: u64) -> u64 {
    (sender << 32) | i
}

/// Runs 4 senders and 4 receivers over a channel of capacity `cap`, each kind in each
/// context, and checks what arrived.
fn mpmc_mixed(cap: Option<usize>) {
    watchdog(25, move || {
        let rt = rt2();
        let (tx, rx) = make::<u64>(cap);

        // --- receivers: a thread, a fiber (iter), an async task, a second fiber ---
        let got: Arc<Mutex<Vec<Vec<u64>>>> = Arc::new(Mutex::new(vec![]));
        let store = |v: Vec<u64>, got: &Arc<Mutex<Vec<Vec<u64>>>>| got.lock().unwrap().push(v);

        let r0 = {
            let (rx, got) = (rx.clone(), got.clone());
            std::thread::spawn(move || {
                let mut v = vec![];
                while let Ok(x) = rx.recv_blocking() {
                    v.push(x);
                }
                store(v, &got);
            })
        };
        let r1 = {
            let (rx, got) = (rx.clone(), got.clone());
            fiber_on(&rt, move || store(rx.iter().collect(), &got))
        };
        let r2 = {
            let (rx, got) = (rx.clone(), got.clone());
            rt.spawn(async move {
                let mut v = vec![];
                while let Ok(x) = rx.recv().await {
                    v.push(x);
                }
                store(v, &got);
            })
        };
        let r3 = {
            let (rx, got) = (rx.clone(), got.clone());
            fiber_on(&rt, move || {
                let mut v = vec![];
                while let Ok(x) = rx.recv_blocking() {
                    v.push(x);
                }
                store(v, &got);
            })
        };
        drop(rx);

        // --- senders: a thread, a fiber, an async task, a second async task ---
        let s0 = {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..PER_SENDER {
                    tx.send_blocking(val(0, i)).unwrap();
                }
            })
        };
        let s1 = {
            let tx = tx.clone();
            fiber_on(&rt, move || {
                for i in 0..PER_SENDER {
                    tx.send_blocking(val(1, i)).unwrap();
                }
            })
        };
        let task_sender = |tx: Sender<u64>, s: u64| async move {
            for i in 0..PER_SENDER {
                tx.send(val(s, i)).await.unwrap();
            }
        };
        let s2 = rt.spawn(task_sender(tx.clone(), 2));
        let s3 = rt.spawn(task_sender(tx.clone(), 3));
        drop(tx);

        s0.join().unwrap();
        join_within(s1, 20).unwrap();
        join_within(s2, 20).unwrap();
        join_within(s3, 20).unwrap();
        r0.join().unwrap();
        join_within(r1, 20).unwrap();
        join_within(r2, 20).unwrap();
        join_within(r3, 20).unwrap();

        let got = std::mem::take(&mut *got.lock().unwrap());
        assert_eq!(got.len(), 4, "every receiver reported");
        check(cap, &got);
    })
}

/// Every value of every sender exactly once; per receiver, each sender's values in
/// increasing order.
pub fn check(cap: Option<usize>, got: &[Vec<u64>]) {
    for (r, vals) in got.iter().enumerate() {
        let mut last = [None::<u64>; SENDERS as usize];
        for &v in vals {
            let (s, i) = ((v >> 32) as usize, v & 0xffff_ffff);
            assert!(
                s < SENDERS as usize && i < PER_SENDER,
                "cap {cap:?}: bogus value {v:#x}"
            );
            if let Some(prev) = last[s] {
                assert!(
                    i > prev,
                    "cap {cap:?}: receiver {r} saw sender {s}'s value {i} after {prev}"
                );
            }
            last[s] = Some(i);
        }
    }
    let mut all: Vec<u64> = got.iter().flatten().copied().collect();
    all.sort_unstable();
    let total = all.len();
    all.dedup();
    assert_eq!(total, all.len(), "cap {cap:?}: some value arrived twice");
    let want: Vec<u64> = (0..SENDERS)
        .flat_map(|s| (0..PER_SENDER).map(move |i| val(s, i)))
        .collect();
    assert_eq!(all.len(), want.len(), "cap {cap:?}: values lost");
    assert_eq!(all, want, "cap {cap:?}: wrong values");
}

#[test]
fn mpmc_mixed_contexts_rendezvous() {
    mpmc_mixed(Some(0));
}

#[test]
fn mpmc_mixed_contexts_bounded_1() {
    mpmc_mixed(Some(1));
}

#[test]
fn mpmc_mixed_contexts_bounded_16() {
    mpmc_mixed(Some(16));
}

#[test]
fn mpmc_mixed_contexts_unbounded() {
    mpmc_mixed(None);
}

/// All eight ends on fibers and tasks of a one-worker runtime (nothing can run in
/// parallel: every hand-over is a suspension and a resumption on the same worker).
#[test]
fn mpmc_one_worker_fibers_and_tasks() {
    watchdog(25, || {
        let rt = weft::Builder::new().worker_threads(1).build().unwrap();
        for cap in FLAVOURS {
            let (tx, rx) = make::<u64>(cap);
            let mut recv_handles = vec![];
            for r in 0..4 {
                let rx: Receiver<u64> = rx.clone();
                if r % 2 == 0 {
                    recv_handles.push(fiber_on(&rt, move || rx.iter().collect::<Vec<_>>()));
                } else {
                    recv_handles.push(rt.spawn(async move {
                        let mut v = vec![];
                        while let Ok(x) = rx.recv().await {
                            v.push(x);
                        }
                        v
                    }));
                }
            }
            drop(rx);
            let mut send_handles = vec![];
            for s in 0..SENDERS {
                let tx = tx.clone();
                if s % 2 == 0 {
                    send_handles.push(fiber_on(&rt, move || {
                        for i in 0..PER_SENDER / 3 {
                            tx.send_blocking(val(s, i)).unwrap();
                        }
                    }));
                } else {
                    send_handles.push(rt.spawn(async move {
                        for i in 0..PER_SENDER / 3 {
                            tx.send(val(s, i)).await.unwrap();
                        }
                    }));
                }
            }
            drop(tx);
            for h in send_handles {
                join_within(h, 20).unwrap();
            }
            let got: Vec<Vec<u64>> = recv_handles
                .into_iter()
                .map(|h| join_within(h, 20).unwrap())
                .collect();
            let mut all: Vec<u64> = got.iter().flatten().copied().collect();
            all.sort_unstable();
            let want: Vec<u64> = (0..SENDERS)
                .flat_map(|s| (0..PER_SENDER / 3).map(move |i| val(s, i)))
                .collect();
            assert_eq!(all, want, "cap {cap:?}");
        }
    })
}

mod common;

const CHILD: &str = "WEFT_CHAN_STRESS_CHILD";

/// Not a test unless run as a child: runs the stress with the wake-under-lock check.
#[test]
fn child_process_entry() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    mpmc_mixed(Some(0));
    mpmc_mixed(Some(1));
    println!("CHILD done=ok");
}

/// Debug builds report a wake flushed while a wait-list lock is held
/// (`WAKE-FLUSH-UNDER-LOCK`, spec 003) on stderr: the mixed stress must cause none.
#[test]
fn no_wake_is_flushed_under_a_wait_list_lock() {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, "1")],
        std::time::Duration::from_secs(25),
    );
    out.assert_finished();
    assert!(
        !out.stderr.contains("WAKE-FLUSH-UNDER-LOCK"),
        "wakes flushed under a lock:\n{}",
        out.stderr
    );
}

/// The fourth context: blocking calls (`send_blocking`, `recv_blocking`, `Select::select`)
/// made inside async tasks, where the worker goes on with other work while the call
/// waits. On one worker, the partner of each wait is another such task.
#[test]
fn blocking_calls_inside_tasks_on_one_worker() {
    watchdog(20, || {
        let rt = weft::Builder::new().worker_threads(1).build().unwrap();
        for cap in FLAVOURS {
            const N: u64 = 500;
            let (tx, rx) = make::<u64>(cap);
            let (tx2, rx2) = make::<u64>(cap);
            // task A: blocking receive on `rx`, blocking send on `tx2`.
            let a = rt.spawn(async move {
                for _ in 0..N {
                    let v = rx.recv_blocking().unwrap();
                    tx2.send_blocking(v + 1).unwrap();
                }
            });
            // task B: blocking select-send on `tx`.
            let b = rt.spawn(async move {
                for i in 0..N {
                    let mut sel = weft::chan::Select::new();
                    sel.send(&tx);
                    sel.select().send(&tx, i).unwrap();
                }
            });
            // task C: blocking select-receive on `rx2`.
            let c = rt.spawn(async move {
                let mut got = vec![];
                for _ in 0..N {
                    let mut sel = weft::chan::Select::new();
                    sel.recv(&rx2);
                    got.push(sel.select().recv(&rx2).unwrap());
                }
                got
            });
            join_within(a, 15).unwrap();
            join_within(b, 15).unwrap();
            assert_eq!(
                join_within(c, 15).unwrap(),
                (1..=N).collect::<Vec<_>>(),
                "cap {cap:?}"
            );
        }
    })
}
