//! Runtimes whose workers record where their own thread stack is, so that a test can
//! tell whether its code runs there or on a loop stack or a fiber's (shutdown's waits
//! behave differently on each).

use std::cell::Cell;
use std::time::Duration;

use weft::{Builder, Runtime};

thread_local! {
    /// An address near the top of this worker thread's own stack (0 off a worker).
    static STACK_TOP: Cell<usize> = const { Cell::new(0) };
}

/// A runtime of `n` workers, no interactive pool, no temporary workers and no stall
/// reports, whose workers record where their thread stack is (see [`on_thread_stack`]).
pub fn rt(n: usize) -> Runtime {
    Builder::new()
        .worker_threads(n)
        .interactive_threads(0)
        .max_extra_workers(0)
        .stall_report(None)
        .on_thread_start(|| {
            let here = 0u8;
            STACK_TOP.with(|t| t.set(std::ptr::addr_of!(here) as usize));
        })
        .build()
        .expect("runtime")
}

/// Whether the caller runs on its worker thread's own stack (not on a loop stack or a
/// fiber's): its frame lies within 256 KiB of the frame `on_thread_start` ran in.
pub fn on_thread_stack() -> bool {
    let here = 0u8;
    let here = std::ptr::addr_of!(here) as usize;
    let top = STACK_TOP.with(Cell::get);
    top != 0 && here <= top && top - here < (256 << 10)
}

/// A runtime of `n` workers for stress rounds of shutdown; with `temps`, as many
/// temporary workers, which retire after 5 ms idle.
pub fn stress_rt(n: usize, temps: bool) -> Runtime {
    Builder::new()
        .worker_threads(n)
        .interactive_threads(0)
        .max_extra_workers(if temps { n } else { 0 })
        .extra_worker_keep_alive(Duration::from_millis(5))
        .stall_report(None)
        .build()
        .expect("runtime")
}
