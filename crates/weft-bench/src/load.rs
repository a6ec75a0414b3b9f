//! Background load: tasks that keep a runtime's workers busy until told to
//! stop, written once for every runtime.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::runtimes::{JoinOf, Rt};

/// Burns CPU on the calling thread for `d` (no syscalls, no sleeping).
pub fn spin(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Tasks that each alternate `spin(step)` and a yield until stopped.
pub struct Busy<R: Rt> {
    flag: Arc<AtomicBool>,
    handles: Vec<JoinOf<R, ()>>,
}

impl<R: Rt> Busy<R> {
    /// Spawns `tasks` busy tasks into `rt` from outside and gives them a few
    /// milliseconds to spread over the workers.
    pub fn start(rt: &R, tasks: usize, step: Duration) -> Busy<R> {
        let flag = Arc::new(AtomicBool::new(true));
        let handles = (0..tasks)
            .map(|_| {
                let flag = flag.clone();
                rt.spawn(async move {
                    while flag.load(Relaxed) {
                        spin(step);
                        R::yield_now().await;
                    }
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(5));
        Busy { flag, handles }
    }

    /// Stops the tasks and waits until all of them have returned.
    pub fn stop(self, rt: &R) {
        self.flag.store(false, Relaxed);
        rt.block_on(async {
            for h in self.handles {
                h.await;
            }
        });
    }
}
