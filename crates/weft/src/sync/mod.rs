//! Synchronization primitives for every context (tokio's `sync`, with weft's blocking
//! forms): the same [`Mutex`], [`Semaphore`] or [`Notify`] serves async tasks
//! (`.await`), fibers (they suspend), workers (they go on with other work) and plain
//! threads (they block), all at once. A tokio user ports `tokio::sync` code by changing
//! the path; each blocking form carries weft's `_blocking` suffix and is
//! [`weft::wait`](crate::wait) of its future.
//!
//! ```
//! use std::sync::Arc;
//! use weft::sync::{Mutex, Semaphore};
//!
//! let rt = weft::Runtime::new().unwrap();
//! let counter = Arc::new(Mutex::new(0u32));
//! let gate = Arc::new(Semaphore::new(2));
//! let mut handles = Vec::new();
//! for _ in 0..4 {
//!     let (c, g) = (counter.clone(), gate.clone());
//!     handles.push(rt.spawn(async move {
//!         let _permit = g.acquire().await.unwrap();
//!         *c.lock().await += 1;
//!     }));
//! }
//! for h in handles {
//!     h.join().unwrap();
//! }
//! assert_eq!(*counter.lock_blocking(), 4);
//! ```
//!
//! How it works: every wait is a future that owns a wait node (`waitlist`) on the
//! primitive's list, under the primitive's wait-list lock; whoever completes it stores
//! the reason in the node and wakes it after the lock is released. `Mutex` and `RwLock`
//! are the semaphore's permit core (`semaphore::Sem`) beside their data.

mod barrier;
pub mod broadcast;
#[cfg(all(test, loom))]
mod loom_tests;
mod mutex;
mod notify;
pub mod oneshot;
mod rwlock;
mod semaphore;
mod wait_group;
mod waiter;
pub mod watch;

pub use barrier::{Barrier, BarrierWaitResult};
pub use mutex::{Mutex, MutexGuard, OwnedMutexGuard, TryLockError};
pub use notify::{Notified, Notify};
pub use rwlock::{
    OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
pub use semaphore::{
    AcquireError, OwnedSemaphorePermit, Semaphore, SemaphorePermit, TryAcquireError,
};
pub use wait_group::WaitGroup;
