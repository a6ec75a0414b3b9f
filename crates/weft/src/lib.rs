//! weft: one set of worker threads for async tasks, fork-join jobs and stackful fibers.
//!
//! The three shapes of work share the workers, their queues and their sleep/wake
//! handshake, and a blocking wait works the same from each of them:
//!
//! * **Async tasks** ([`spawn`], [`Runtime`], [`JoinHandle`], [`task`], [`time`]): a
//!   work-stealing scheduler with per-worker LIFO slots and lock-free local queues, a
//!   batched global queue, workers that wake one sleeper per insert, and tasks whose
//!   whole state is one packed atomic word.
//! * **Fork-join** ([`join`], [`scope`], [`par`] with [`prelude`]): `join` costs no
//!   allocation and no atomic operation until another worker is hungry; parallel
//!   iterators and sorts build on it.
//! * **Fibers** ([`fiber`]): plain blocking code on a stack of its own, suspended (not
//!   its thread) by [`wait`], `JoinHandle::join`, `fiber::sleep`.
//!
//! [`wait`] is the one blocking call for every context: a fiber suspends, an async task
//! on a worker sets its stack aside while the worker goes on, any other thread sleeps.
//! The channels of [`chan`] and the locks, semaphores and notifications of [`sync`]
//! are built on it: one implementation serves a thread, a fiber and a task at once.
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
//! Blocking joins work from any thread, and on a worker they do not block it:
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

// Layers, bottom up (see docs/ARCHITECTURE.md; `tests/layering.rs` checks that no
// module reaches up this order).
mod base;
pub mod chan;
mod driver;
pub mod fiber;
pub(crate) mod forkjoin;
#[cfg(feature = "hyper")]
pub mod hyper;
pub mod io;
pub mod net;
mod nursery;
pub mod par;
mod runtime;
mod scheduler;
pub mod signal;
mod stack;
pub mod sync;
pub mod task;
pub mod time;
mod waitlist;

#[cfg(all(test, loom))]
mod loom_tests;

pub use fiber::wait::wait;
pub use forkjoin::{join, scope, Scope};
pub use nursery::{nursery, nursery_blocking, Nursery, NurseryOptions};
/// The traits for parallel iterators and sorts: `use weft::prelude::*;`.
pub use par::prelude;
pub use runtime::{
    spawn, spawn_blocking, spawn_on, Builder, Dump, EnterGuard, Handle, Runtime, ShutdownReport,
    TryCurrentError,
};
pub use scheduler::blocking::BlockingStats;
pub use scheduler::stats::{PoolStats, Stats, WorkerStats};
pub use scheduler::Pool;
pub use task::{AbortHandle, JoinError, JoinHandle};
pub use weft_macros::{main, test};
