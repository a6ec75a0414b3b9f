//! Session 43's own fixes, attacked where the reviews' tests did not reach: a sleep of
//! a runtime gone, reset from another thread, wakes its waiter at the new deadline.

mod common;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{watchdog, workers};

const LONG: Duration = Duration::from_secs(3600);

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
