//! weft: one set of worker threads for async tasks (and, as the project grows, fork-join
//! jobs and fibers).
//!
//! This release is the async task runtime: a work-stealing scheduler with per-worker
//! LIFO slots and lock-free local queues, a batched global queue, searching and parking
//! workers that wake one sleeper per insert, and tasks whose whole state is one packed
//! atomic word.
//!
//! ```
//! let rt = weft::Runtime::new().unwrap();
//! let total = rt.block_on(async {
//!     let handles: Vec<_> = (0..100u64).map(|i| weft::spawn(async move { i })).collect();
//!     let mut total = 0;
//!     for h in handles {
//!         total += h.await.unwrap();
//!     }
//!     total
//! });
//! assert_eq!(total, 4950);
//! ```
//!
//! Blocking joins work from any thread, and on a worker they help instead of blocking:
//!
//! ```
//! let rt = weft::Builder::new().worker_threads(1).build().unwrap();
//! let v = rt.spawn(async {
//!     // Joining a task from inside a task on a one-worker runtime does not deadlock.
//!     weft::spawn(async { 21 }).join().unwrap() * 2
//! });
//! assert_eq!(v.join().unwrap(), 42);
//! ```
//!
//! See `docs/ARCHITECTURE.md` in the repository for the design.

#![warn(missing_docs)]

// Lets the attribute macros name `::weft` inside this crate's own tests.
extern crate self as weft;

pub mod fiber;
pub(crate) mod forkjoin;
pub mod par;
mod runtime;
mod scheduler;
mod sync;
pub mod task;
pub mod time;

#[cfg(all(test, loom))]
mod loom_tests;

pub use forkjoin::{join, scope, Scope};
/// The traits for parallel iterators and sorts: `use weft::prelude::*;`.
pub use par::prelude;
pub use runtime::wait::wait;
pub use runtime::{
    spawn, spawn_blocking, spawn_on, Builder, Handle, Pool, Runtime, TryCurrentError,
};
pub use scheduler::blocking::BlockingStats;
pub use scheduler::stats::{PoolStats, Stats, WorkerStats};
pub use task::{AbortHandle, JoinError, JoinHandle};
pub use weft_macros::{main, test};
