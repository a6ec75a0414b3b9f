//! Time: sleeps, timeouts and intervals on a hierarchical timer wheel.
//!
//! Timers have millisecond resolution and never fire early. They are driven by the
//! runtime's workers (see `driver.rs`). A timer binds to the runtime that is current
//! where it is created (inside a task, `block_on` or a blocking closure) or, failing
//! that, where it is first polled; once bound it may be polled from any thread. A
//! sleep outlives its runtime: once the runtime has shut down, nothing fires its
//! wheel, and its pending sleeps end at their deadlines on the process's alarm thread.
//!
//! ```
//! use std::time::Duration;
//!
//! let rt = weft::Runtime::new().unwrap();
//! rt.block_on(async {
//!     let start = weft::time::Instant::now();
//!     weft::time::sleep(Duration::from_millis(20)).await;
//!     assert!(start.elapsed() >= Duration::from_millis(20));
//!
//!     let slow = weft::time::sleep(Duration::from_secs(60));
//!     assert!(weft::time::timeout(Duration::from_millis(10), slow).await.is_err());
//! });
//! ```

pub(crate) mod alarm;
mod interval;
mod sleep;
mod timeout;

use crate::driver::timer as driver;

pub use interval::{interval, interval_at, Interval, MissedTickBehavior};
pub(crate) use sleep::{far_future, sleep_on};
pub use sleep::{sleep, sleep_until, Sleep};
pub use std::time::Instant;
pub use timeout::{timeout, timeout_at, Elapsed, Timeout};

use crate::base::Arc;

fn try_current_driver() -> Option<Arc<driver::Driver>> {
    // On a worker: its pool's driver (the runtime's, shared by all its pools), without
    // upgrading the runtime's `Weak` as `Handle::try_current` does; unless what runs
    // there entered another runtime.
    if let Some(time) = crate::scheduler::worker::with_current(|c| {
        c.map(|c| crate::runtime::with_worker_pool(c, |pool| pool.time.clone()))
    }) {
        return Some(time);
    }
    crate::Handle::try_current()
        .ok()
        .map(|h| h.inner.time.clone())
}

/// The current runtime's timer driver.
#[track_caller]
fn current_driver() -> Arc<driver::Driver> {
    match try_current_driver() {
        Some(d) => d,
        None => panic!(
            "no weft runtime is running on this thread: timers need one (create them inside a \
             task, inside Runtime::block_on, or in a blocking closure)"
        ),
    }
}
