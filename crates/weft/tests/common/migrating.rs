//! Fibers spawned with `fiber_migration(true)`, for the reviews that attack migration.
//!
//! A test that uses these keeps the migration contract in every fiber it spawns so:
//! only `Send` data across its waits, and no thread-local read in a function that also
//! waits (per-fiber state in `fiber_local!`; fork-join called from helpers that do not
//! wait).

use weft::fiber::Builder as FiberBuilder;
use weft::{JoinHandle, Runtime};

/// A fiber builder with migration on.
pub fn migrating() -> FiberBuilder {
    // SAFETY: the tests that call this keep the contract in every fiber they spawn
    // with it (the module docs above, and each test file's).
    unsafe { FiberBuilder::new().fiber_migration(true) }
}

/// Spawns a migrating fiber on `rt` (entering it first).
pub fn spawn_migrating<T: Send + 'static>(
    rt: &Runtime,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    super::on(rt, move || migrating().spawn(f))
}
