//! The elastic blocking pool behind `spawn_blocking`: a plain FIFO with a condition
//! variable, threads started on demand up to a cap and retired after an idle
//! keep-alive. Not work-stealing: blocking closures are long and few, and a thread
//! that waits in one must not hold anything another thread could steal.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::base::Arc;
use crate::task::header::Header;
use crate::task::owned::OwnedTasks;
use crate::task::raw::{Notified, Schedule};

pub(crate) struct BlockingPool {
    state: Mutex<State>,
    cv: Condvar,
    /// Signalled when the last thread exits, for shutdown.
    exited: Condvar,
    pub(crate) owned: OwnedTasks,
    max_threads: usize,
    keep_alive: Duration,
    thread_name: String,
    /// Runs on each new thread (enters the runtime so `Handle::current` works there).
    on_start: Box<dyn Fn() + Send + Sync>,
}

struct State {
    queue: VecDeque<Notified>,
    threads: usize,
    idle: usize,
    /// Wake-ups handed to idle threads and not yet taken.
    notified: usize,
    shutdown: bool,
    spawned_threads: u64,
    tasks: u64,
}

/// Blocking-pool counters for `Stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockingStats {
    /// Threads alive now.
    pub threads: usize,
    /// Threads alive and waiting for work.
    pub idle_threads: usize,
    /// Threads started since the runtime began.
    pub threads_started: u64,
    /// Closures submitted with `spawn_blocking`.
    pub tasks: u64,
    /// Closures waiting for a thread.
    pub queued: usize,
}

impl BlockingPool {
    pub(crate) fn new(
        max_threads: usize,
        keep_alive: Duration,
        thread_name: String,
        on_start: Box<dyn Fn() + Send + Sync>,
    ) -> Self {
        BlockingPool {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                threads: 0,
                idle: 0,
                notified: 0,
                shutdown: false,
                spawned_threads: 0,
                tasks: 0,
            }),
            cv: Condvar::new(),
            exited: Condvar::new(),
            owned: OwnedTasks::new(1),
            max_threads,
            keep_alive,
            thread_name,
            on_start,
        }
    }

    pub(crate) fn stats(&self) -> BlockingStats {
        let s = self.state.lock().unwrap();
        BlockingStats {
            threads: s.threads,
            idle_threads: s.idle,
            threads_started: s.spawned_threads,
            tasks: s.tasks,
            queued: s.queue.len(),
        }
    }

    fn enqueue(self: &Arc<Self>, task: Notified) {
        self.enqueue_locked(self.state.lock().unwrap(), task);
    }

    /// [`enqueue`](Self::enqueue) with the state lock already taken (`s`).
    fn enqueue_locked(self: &Arc<Self>, mut s: MutexGuard<'_, State>, task: Notified) {
        if s.shutdown {
            drop(s);
            super::cancel_queued(task);
            return;
        }
        s.queue.push_back(task);
        if s.idle > s.notified {
            s.notified += 1;
            drop(s);
            self.cv.notify_one();
        } else if s.threads < self.max_threads {
            s.threads += 1;
            s.spawned_threads += 1;
            let id = s.spawned_threads;
            drop(s);
            let pool = self.clone();
            let started = std::thread::Builder::new()
                .name(format!("{}-{id}", self.thread_name))
                .spawn(move || pool.run());
            if let Err(e) = started {
                // The queued task waits for a running thread; if there is none it
                // would wait forever, so say why.
                let mut s = self.state.lock().unwrap();
                s.threads -= 1;
                let stranded = s.threads == 0;
                drop(s);
                eprintln!("weft: could not start a blocking-pool thread: {e}");
                if stranded {
                    self.cancel_queue();
                }
            }
        }
        // Otherwise every thread is busy and the cap is reached: the task waits its turn.
    }

    /// Submits a new blocking task (counted in the statistics).
    pub(crate) fn submit(self: &Arc<Self>, task: Notified) {
        let mut s = self.state.lock().unwrap();
        s.tasks += 1;
        self.enqueue_locked(s, task);
    }

    fn run(self: Arc<Self>) {
        set_on_pool(&*self as *const Self as usize);
        (self.on_start)();
        let mut s = self.state.lock().unwrap();
        loop {
            if let Some(task) = s.queue.pop_front() {
                drop(s);
                task.run();
                s = self.state.lock().unwrap();
                continue;
            }
            if s.shutdown {
                break;
            }
            s.idle += 1;
            let (guard, timeout) = self.cv.wait_timeout(s, self.keep_alive).unwrap();
            s = guard;
            s.idle -= 1;
            if s.notified > 0 {
                s.notified -= 1;
            } else if timeout.timed_out() && s.queue.is_empty() {
                break; // retire after the keep-alive
            }
        }
        s.threads -= 1;
        // Shutdown waits for none left, or for one (its own thread, see `shutdown`).
        let wanted = s.shutdown && s.threads <= 1;
        drop(s);
        if wanted {
            self.exited.notify_all();
        }
    }

    fn cancel_queue(&self) {
        let tasks: Vec<_> = self.state.lock().unwrap().queue.drain(..).collect();
        for t in tasks {
            super::cancel_queued(t);
        }
    }

    /// Refuses new work, cancels queued closures that never started, and waits up to
    /// `timeout` for running ones to return. Returns false on timeout.
    pub(crate) fn shutdown(&self, timeout: Option<Duration>) -> bool {
        self.state.lock().unwrap().shutdown = true;
        self.cv.notify_all();
        self.cancel_queue();
        self.owned.close_and_drain(|ptr| {
            // SAFETY: we hold the list's reference to the live task `ptr`; it moves to
            // `cancel_now`.
            unsafe { super::cancel_now(ptr) };
        });
        // Called on one of this pool's own threads (the runtime dropped inside a
        // `spawn_blocking` closure): that thread leaves only after this returns, so it
        // is not waited for (without a timeout that wait would never end).
        let me = usize::from(on_pool() == self as *const Self as usize);
        let s = self.state.lock().unwrap();
        let running = |s: &mut State| s.threads > me;
        let s = match timeout {
            None => self.exited.wait_while(s, running).unwrap(),
            Some(t) => self.exited.wait_timeout_while(s, t, running).unwrap().0,
        };
        s.threads <= me
    }
}

std::thread_local! {
    /// The blocking pool this thread belongs to (its address), or 0.
    static ON_POOL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

// Never inlined: they read a thread-local (see `worker::current_cell`).
#[inline(never)]
fn on_pool() -> usize {
    ON_POOL.with(|p| p.get())
}

#[inline(never)]
fn set_on_pool(pool: usize) {
    ON_POOL.with(|p| p.set(pool));
}

impl Schedule for Arc<BlockingPool> {
    fn schedule(&self, task: Notified) {
        self.enqueue(task);
    }

    fn yield_now(&self, task: Notified) {
        self.enqueue(task);
    }

    fn release(&self, task: NonNull<Header>) -> bool {
        self.owned.remove(task)
    }
}

/// A closure run as the single poll of a task.
struct BlockingTask<F>(Option<F>);

impl<F> Unpin for BlockingTask<F> {}

impl<F: FnOnce() -> R, R> std::future::Future for BlockingTask<F> {
    type Output = R;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<R> {
        let f = self
            .0
            .take()
            .expect("weft: blocking task polled after it ran");
        std::task::Poll::Ready(f())
    }
}

impl BlockingPool {
    pub(crate) fn spawn<F, R>(self: &Arc<Self>, f: F) -> crate::task::JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let (task, handle) = crate::task::new_task(BlockingTask(Some(f)), self.clone());
        if let Some(task) = super::bind_or_cancel(&self.owned, task) {
            self.submit(task);
        }
        handle
    }
}
