//! Session 43's own fixes, attacked where the reviews' tests did not reach: a fiber
//! child leaked by shutdown in a blocking nursery's wait counts as ended only once its
//! own children have (they may borrow the enclosing owner's frame), and a sleep of a
//! runtime gone, reset from another thread, wakes its waiter at the new deadline.

mod common;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{watchdog, workers};
use weft::Nursery;

const LONG: Duration = Duration::from_secs(3600);

/// Sleeps in its drop, then writes to what it borrows from the plain owner's frame.
struct SlowDrop<'a>(&'a AtomicUsize);

impl Drop for SlowDrop<'_> {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(150));
        self.0.fetch_add(1, SeqCst);
    }
}

/// A plain thread owns a blocking nursery whose fiber child owns another; the
/// grandchildren (tasks) borrow a counter of the plain owner's frame and take their
/// time to drop. The runtime is dropped: shutdown leaks the pinned fiber child, which
/// must count as ended only after its children dropped, so the owner returns once
/// both drops wrote to its frame, never before. Rounds: which worker drops what, and
/// when, varies.
#[test]
fn a_leaked_fiber_child_ends_after_its_own_children() {
    watchdog(60, || {
        for round in 0..4 {
            let rt = workers(2);
            let (tx, rx) = mpsc::channel::<()>();
            let dropper = std::thread::spawn(move || {
                rx.recv().unwrap();
                std::thread::sleep(Duration::from_millis(20));
                drop(rt);
            });
            let owner = std::thread::spawn(move || {
                let written = AtomicUsize::new(0);
                let r = weft::nursery_blocking(|n: &Nursery<'_, ()>| {
                    let w = &written;
                    n.spawn_fiber(move || {
                        let _ = weft::nursery_blocking(|m: &Nursery<'_, ()>| {
                            for _ in 0..2 {
                                m.spawn(async move {
                                    let _slow = SlowDrop(w);
                                    weft::time::sleep(LONG).await;
                                    Ok(())
                                });
                            }
                            Ok(())
                        });
                        Ok(())
                    });
                    tx.send(()).unwrap();
                    Ok(())
                });
                // Read in the owner's frame, after the nursery returned: both drops
                // must be done by now.
                (r, written.load(SeqCst))
            });
            let (r, written) = common::thread_within(owner, 20);
            assert_eq!(r, Ok(()), "round {round}");
            assert_eq!(
                written, 2,
                "round {round}: the owner returned before its grandchildren dropped"
            );
            common::thread_within(dropper, 20);
        }
    });
}

/// A sleep whose runtime is gone waits on the process's alarm thread; a reset from
/// another thread than its waiter's moves the alarm with the waiter's waker, earlier
/// or later, and the waiter ends at the new deadline.
#[test]
fn a_sleep_of_a_dropped_runtime_reset_from_another_thread() {
    watchdog(30, || {
        for later in [false, true] {
            let rt = workers(1);
            let sleep = {
                let _g = rt.enter();
                weft::time::sleep(if later {
                    Duration::from_millis(30)
                } else {
                    LONG
                })
            };
            drop(rt);
            let sleep = Arc::new(Mutex::new(sleep));
            let s = sleep.clone();
            let polled = Arc::new(AtomicUsize::new(0));
            let p = polled.clone();
            let waiter = std::thread::spawn(move || {
                let mut first = true;
                let fut = poll_fn(|cx| {
                    let r = Pin::new(&mut *s.lock().unwrap()).poll(cx);
                    if first {
                        first = false;
                        p.store(1, SeqCst);
                    }
                    r
                });
                // A plain block_on of a runtime-free future: a bare executor.
                futures_block_on(fut);
                Instant::now()
            });
            while polled.load(SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let new = Instant::now() + Duration::from_millis(if later { 200 } else { 40 });
            sleep.lock().unwrap().reset(new);
            let ended = common::thread_within(waiter, 10);
            assert!(
                ended >= new,
                "ended before the new deadline (later: {later})"
            );
        }
    });
}

/// Polls `f` to completion on this thread, parking between wakes.
fn futures_block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
