//! Session 42: tests for what the session's reviews led to, beside the reviewers' own
//! files (`review_s42_*.rs`).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::watchdog;

/// Calls its closure when dropped.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// A cancelled task's `Drop` that sleeps by `weft::wait` while a plain thread drops
/// the runtime: it runs in the runtime's context now (`Runtime::shutdown` enters it),
/// and its sleep must neither panic nor hang the drop.
#[test]
fn a_sleep_in_a_drop_run_by_the_runtime_drop_ends() {
    watchdog(20, || {
        let rt = common::runtime(2, 0);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let started = Arc::new(AtomicUsize::new(0));
        for _ in 0..4 {
            let seen = seen.clone();
            let started = started.clone();
            rt.spawn(async move {
                let _g = OnDrop(move || {
                    let t = Instant::now();
                    let r = std::panic::catch_unwind(|| {
                        weft::wait(weft::time::sleep(Duration::from_millis(5)))
                    });
                    seen.lock().unwrap().push((r.is_ok(), t.elapsed()));
                });
                started.fetch_add(1, SeqCst);
                std::future::pending::<()>().await
            });
        }
        while started.load(SeqCst) < 4 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t = Instant::now();
        drop(rt);
        let took = t.elapsed();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 4, "every future dropped");
        assert!(seen.iter().all(|(ok, _)| *ok), "{seen:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    });
}
