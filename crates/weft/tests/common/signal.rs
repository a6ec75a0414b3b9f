//! Helpers of the tests that raise `SIGINT`: only ever in a child process (see
//! `common::child`), and only once weft's handler is installed (an uninstalled
//! `SIGINT` ends the process).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Installs weft's handler: polls a `ctrl_c` once (on a plain thread, no runtime).
pub fn install_handler() {
    let mut f = std::pin::pin!(weft::signal::ctrl_c());
    assert!(super::poll_once(f.as_mut(), std::task::Waker::noop()).is_pending());
}

/// Sends this process `SIGINT` (the kernel picks the thread).
pub fn raise() {
    // SAFETY: `kill` has no memory preconditions; the handler is installed first.
    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGINT) }, 0);
}

/// Raises `SIGINT` every 2 ms until `done` (at most 3,000 times, then a "hang" panic).
pub fn raise_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..3000 {
        if done() {
            return;
        }
        raise();
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("hang: {what} never completed");
}

/// `ctrl_c()` in a task of `rt`, with a flag set once the future was first polled (the
/// wait then counts SIGINTs from there on).
pub fn spawn_ctrl_c(
    rt: &weft::Runtime,
) -> (weft::JoinHandle<std::io::Result<()>>, Arc<AtomicBool>) {
    let polled = Arc::new(AtomicBool::new(false));
    let p = polled.clone();
    let h = rt.spawn(async move {
        let mut f = std::pin::pin!(weft::signal::ctrl_c());
        std::future::poll_fn(|cx| {
            let r = f.as_mut().poll(cx);
            p.store(true, SeqCst);
            r
        })
        .await
    });
    (h, polled)
}
