//! `weft::sync::Mutex` (issue 16): locking from tasks, fibers and threads at once, fair
//! hand-off, guards held across waits, cancellation of lock futures (also after they
//! were handed the lock), and the 1,000,000-increment stress test.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use chan_common::*;
use weft::sync::Mutex;

fn poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn basics() {
    let mut m = Mutex::new(1);
    *m.get_mut() += 1;
    {
        let g = m.try_lock().unwrap();
        assert!(m.try_lock().is_err());
        assert_eq!(*g, 2);
        assert_eq!(format!("{m:?}"), "Mutex { data: <locked> }");
    }
    assert_eq!(format!("{m:?}"), "Mutex { data: 2 }");
    assert_eq!(m.into_inner(), 2);
    // Unsized data behind an `Arc`.
    let m: Arc<Mutex<[u8]>> = Arc::new(Mutex::new([1u8, 2]));
    m.try_lock().unwrap()[0] = 7;
    assert_eq!(&*m.try_lock().unwrap(), &[7, 2]);
}

#[test]
fn types_are_send_and_sync() {
    let m = Arc::new(Mutex::new(0));
    is_send_sync(&*m);
    let f = m.lock();
    is_send(&f);
    drop(f);
    let g = m.try_lock().unwrap();
    is_send_sync(&g);
    drop(g);
    let f = m.clone().lock_owned();
    is_send(&f);
    drop(f);
    is_send_sync(&m.clone().try_lock_owned().unwrap());
}

/// Hand-polled lock futures: served in order; one dropped after it was handed the lock
/// passes it on.
#[test]
fn hand_polled_hand_off_and_cancellation() {
    let m = Mutex::new(0);
    let g = m.try_lock().unwrap();
    let mut a = Box::pin(m.lock());
    let mut b = Box::pin(m.lock());
    assert!(poll(a.as_mut()).is_pending());
    assert!(poll(b.as_mut()).is_pending());
    drop(g); // handed to `a`
    assert!(m.try_lock().is_err(), "the lock went to the first waiter");
    assert!(poll(b.as_mut()).is_pending());
    drop(a); // never saw it: handed on to `b`
    let mut gb = match poll(b.as_mut()) {
        Poll::Ready(g) => g,
        Poll::Pending => panic!("b should hold the lock"),
    };
    *gb += 1;
    drop(gb);
    drop(b);
    assert_eq!(*m.try_lock().unwrap(), 1);

    // A dropped waiter still in line just leaves it.
    let g = m.try_lock().unwrap();
    let mut c = Box::pin(m.lock());
    assert!(poll(c.as_mut()).is_pending());
    drop(c);
    drop(g);
    assert!(m.try_lock().is_ok());
}

/// A tight re-locker on one thread cannot starve a waiter on another.
#[test]
fn fair_against_a_tight_relocker() {
    watchdog(20, || {
        let m = Arc::new(Mutex::new(0u64));
        let stop = Arc::new(AtomicBool::new(false));
        let (m2, stop2) = (m.clone(), stop.clone());
        let hog = std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop2.load(SeqCst) {
                let mut g = m2.lock_blocking();
                *g += 1;
                n += 1;
                // Hold it a little so the other side has to queue.
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(20) {}
            }
            n
        });
        let t0 = Instant::now();
        for _ in 0..200 {
            *m.lock_blocking() += 1;
        }
        let took = t0.elapsed();
        stop.store(true, SeqCst);
        hog.join().unwrap();
        assert!(took < Duration::from_secs(10), "starved: {took:?}");
    });
}

/// A guard held across an `.await`, and across a fiber's blocking wait.
#[test]
fn guard_held_across_waits() {
    watchdog(20, || {
        let rt = rt2();
        let m = Arc::new(Mutex::new(Vec::new()));
        let m2 = m.clone();
        let task = rt.spawn(async move {
            let mut g = m2.lock().await;
            g.push(1);
            weft::time::sleep(Duration::from_millis(20)).await;
            g.push(2);
        });
        let m3 = m.clone();
        let fiber = fiber_on(&rt, move || {
            std::thread::sleep(Duration::from_millis(5));
            let mut g = m3.lock_blocking();
            g.push(3);
            weft::fiber::sleep(Duration::from_millis(10));
            g.push(4);
        });
        join_within(task, 10).unwrap();
        join_within(fiber, 10).unwrap();
        let v = m.lock_blocking().clone();
        assert_eq!(v.len(), 4);
        // Each critical section stayed whole.
        let p1 = v.iter().position(|&x| x == 1).unwrap();
        assert_eq!(v[p1 + 1], 2);
        let p3 = v.iter().position(|&x| x == 3).unwrap();
        assert_eq!(v[p3 + 1], 4);
    });
}

/// Lock futures dropped at random points (often just after being handed the lock):
/// the lock is never kept by a dropped future, and every increment counts.
#[test]
fn random_cancellation_never_keeps_the_lock() {
    watchdog(30, || {
        let rt = rt2();
        let m = Arc::new(Mutex::new(0u64));
        let done = Arc::new(AtomicUsize::new(0));
        let mut hs = vec![];
        for i in 0..6u64 {
            let (m, done) = (m.clone(), done.clone());
            hs.push(rt.spawn(async move {
                let mut r = Rng::new(i + 11);
                for _ in 0..2000 {
                    if let Some(mut g) = drop_after(r.below(3), m.lock()).await {
                        *g += 1;
                        done.fetch_add(1, SeqCst);
                        if r.below(3) == 0 {
                            weft::task::yield_now().await;
                        }
                    }
                }
            }));
        }
        // Threads and a fiber compete meanwhile.
        let m2 = m.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..2000 {
                *m2.lock_blocking() += 1;
            }
        });
        let m3 = m.clone();
        let f = fiber_on(&rt, move || {
            for _ in 0..2000 {
                *m3.lock_blocking() += 1;
            }
        });
        for h in hs {
            join_within(h, 25).unwrap();
        }
        t.join().unwrap();
        join_within(f, 25).unwrap();
        assert_eq!(*m.try_lock().unwrap(), done.load(SeqCst) as u64 + 4000);
    });
}

/// An async task aborted while it waits for the lock (or just after being handed it)
/// does not keep it.
#[test]
fn aborted_waiters_pass_the_lock_on() {
    watchdog(20, || {
        let rt = rt2();
        let m = Arc::new(Mutex::new(0));
        for _ in 0..50 {
            let g = m.try_lock().unwrap();
            let m2 = m.clone();
            let h = rt.spawn(async move {
                *m2.lock().await += 1;
            });
            std::thread::sleep(Duration::from_micros(200));
            drop(g);
            h.abort();
            let _ = join_within(h, 10);
            // Whatever happened, the lock is free again.
            wait_for("the lock to be free", 10, || m.try_lock().is_ok());
        }
    });
}

/// The stress test: one counter incremented 1,000,000 times by threads, fibers
/// and async tasks together ends exact.
#[test]
fn stress_one_million_increments_across_contexts() {
    const TOTAL: u64 = 1_000_000;
    // 2 threads, 2 fibers, 4 tasks.
    const SHARE: u64 = TOTAL / 8;
    watchdog(120, || {
        let rt = rt2();
        let m = Arc::new(Mutex::new(0u64));
        let t0 = Instant::now();
        let mut threads = vec![];
        for _ in 0..2 {
            let m = m.clone();
            threads.push(std::thread::spawn(move || {
                for _ in 0..SHARE {
                    *m.lock_blocking() += 1;
                }
            }));
        }
        let mut hs = vec![];
        for _ in 0..2 {
            let m = m.clone();
            hs.push(fiber_on(&rt, move || {
                for _ in 0..SHARE {
                    *m.lock_blocking() += 1;
                }
            }));
        }
        for _ in 0..4 {
            let m = m.clone();
            hs.push(rt.spawn(async move {
                for i in 0..SHARE {
                    *m.lock().await += 1;
                    if i % 64 == 0 {
                        weft::task::yield_now().await;
                    }
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        for h in hs {
            join_within(h, 110).unwrap();
        }
        assert_eq!(*m.lock_blocking(), TOTAL);
        eprintln!("1,000,000 increments in {:?}", t0.elapsed());
    });
}

/// Voluntary context switches of the calling thread so far (a thread that parks on a
/// futex makes one; a spinning or preempted thread does not).
fn voluntary_switches() -> i64 {
    // SAFETY: `rusage` is plain data, for which all-zero bytes are a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage`; RUSAGE_THREAD is Linux's.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_THREAD) failed");
    usage.ru_nvcsw
}

/// Four plain threads taking turns on the fair mutex: a waiter is handed the lock
/// within a few critical sections, inside its spin, so it should rarely have parked by
/// then. When plain threads parked after a spin of about a hundred pauses (session
/// 13), four threads on a 16-core machine took 5.3-6.8 us an increment (77-81 ns with
/// the longer spin): once one hand-off goes to a parked thread, the others queue past
/// their spin while it wakes, park too, and every later hand-off waits for a futex
/// wake. Parks are counted per thread with `getrusage(RUSAGE_THREAD)` (a thread that
/// parks makes a voluntary context switch; a spinning or preempted one does not), the
/// best of three attempts (a loaded machine preempts lock holders, and then waiters do
/// park). On a 2-core machine four threads are preempted more than they park, and the
/// short spin passed this test too; it guards machines with a core per thread.
#[test]
fn contended_plain_threads_rarely_park() {
    const THREADS: usize = 4;
    const INCREMENTS: usize = 20_000;
    let mut best = i64::MAX;
    for _ in 0..3 {
        let m = Arc::new(Mutex::new(0usize));
        let start = Arc::new(std::sync::Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (m, start) = (m.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let before = voluntary_switches();
                    for _ in 0..INCREMENTS {
                        *m.lock_blocking() += 1;
                    }
                    voluntary_switches() - before
                })
            })
            .collect();
        let parks: i64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(*m.lock_blocking(), THREADS * INCREMENTS);
        eprintln!(
            "{parks} voluntary switches for {} increments",
            THREADS * INCREMENTS
        );
        best = best.min(parks);
    }
    assert!(
        best < (THREADS * INCREMENTS / 20) as i64,
        "{best} parks for {} contended increments",
        THREADS * INCREMENTS
    );
}

/// A fiber whose lock attempt fails while its worker has other work ready yields to
/// that work and tries again instead of queueing at once, but only for a while: with the
/// lock held from a plain thread far longer, the fiber has queued by the release, so
/// the release hands it the lock and the thread cannot take it back at once. `held`:
/// the lock, taken here; `lock_on_fiber(wait)`: a blocking take, holding it over
/// `wait()`; `free_here`: whether a try from here succeeds (dropping what it took).
fn queues_in_time(
    what: &'static str,
    held: Box<dyn Send>,
    lock_on_fiber: impl FnOnce(&dyn Fn()) + Send + 'static,
    free_here: impl Fn() -> bool + Send + 'static,
) {
    watchdog(30, move || {
        let rt = weft::Builder::new().worker_threads(1).build().unwrap();
        let (stop, trying) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (release_tx, release_rx) = weft::chan::bounded::<()>(1);
        // Keeps other work ready on the one worker all along, 50 us at a time: a fiber
        // that kept trying instead of queueing would try that seldom, and the try
        // here just after the release would win.
        let busy = fiber_on(&rt, {
            let stop = stop.clone();
            move || {
                while !stop.load(SeqCst) {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(50) {}
                    weft::fiber::yield_now();
                }
            }
        });
        let locker = fiber_on(&rt, {
            let trying = trying.clone();
            move || {
                trying.store(true, SeqCst);
                lock_on_fiber(&|| release_rx.recv_blocking().unwrap());
            }
        });
        wait_for("the fiber to try the lock", 20, || trying.load(SeqCst));
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
        assert!(
            !free_here(),
            "{what}: free right after its release: the fiber had not queued in 200 ms"
        );
        release_tx.send_blocking(()).unwrap();
        join_within(locker, 20).unwrap();
        stop.store(true, SeqCst);
        join_within(busy, 20).unwrap();
        assert!(free_here(), "{what}: still held after the fiber let it go");
    });
}

#[test]
fn a_fiber_kept_out_of_a_mutex_queues_in_time() {
    let m = Arc::new(Mutex::new(()));
    let held = Box::new(m.clone().try_lock_owned().unwrap());
    let m2 = m.clone();
    queues_in_time(
        "Mutex",
        held,
        move |wait| {
            let _g = m2.lock_blocking();
            wait();
        },
        move || m.try_lock().is_ok(),
    );
}

#[test]
fn a_fiber_kept_out_of_a_rwlock_queues_in_time() {
    let l = Arc::new(weft::sync::RwLock::new(()));
    let held = Box::new(l.clone().try_write_owned().unwrap());
    let (l2, l3) = (l.clone(), l.clone());
    queues_in_time(
        "RwLock (write)",
        held,
        move |wait| {
            let _g = l2.write_blocking();
            wait();
        },
        move || l.try_write().is_ok(),
    );
    let held = Box::new(l3.clone().try_write_owned().unwrap());
    let l4 = l3.clone();
    queues_in_time(
        "RwLock (read)",
        held,
        move |wait| {
            let _g = l4.read_blocking();
            wait();
        },
        move || l3.try_write().is_ok(),
    );
}

#[test]
fn a_fiber_kept_out_of_a_semaphore_queues_in_time() {
    let sem = Arc::new(weft::sync::Semaphore::new(2));
    let held = Box::new(sem.clone().try_acquire_many_owned(2).unwrap());
    let s2 = sem.clone();
    queues_in_time(
        "Semaphore",
        held,
        move |wait| {
            let _p = s2.acquire_many_blocking(2).unwrap();
            wait();
        },
        move || sem.try_acquire().is_ok(),
    );
}
