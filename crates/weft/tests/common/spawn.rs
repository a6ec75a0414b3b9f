//! Starting a fiber on a given runtime and joining with a time limit: shared by
//! `tests/common` and `tests/chan_common` (which includes this file by path).

use std::sync::mpsc;
use std::time::Duration;

use weft::{JoinHandle, Runtime};

/// Spawns a fiber on `rt` (entering it first, so the fiber does not go to another
/// test's runtime).
pub fn fiber_on<T: Send + 'static>(
    rt: &Runtime,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    // (In an `Option`: the block's output is not itself awaited.)
    rt.block_on(async move { Some(weft::fiber::spawn(f)) })
        .unwrap()
}

/// Spawns on `rt` a fiber that keeps `keep` and waits on `never` (notified by nobody:
/// it stays suspended until shutdown unwinds it); returns once it runs.
#[allow(dead_code)] // not every test binary that includes this file uses it
pub fn suspended_fiber<K: Send + 'static>(
    rt: &Runtime,
    never: &std::sync::Arc<weft::sync::Notify>,
    keep: K,
) -> JoinHandle<()> {
    let (tx, rx) = mpsc::channel();
    let n = never.clone();
    let h = fiber_on(rt, move || {
        let _keep = keep;
        tx.send(()).unwrap();
        n.notified_blocking();
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the fiber ran");
    h
}

/// Joins `h` from a plain thread, failing with "hang" after `secs`.
pub fn join_within<T: Send + 'static>(h: JoinHandle<T>, secs: u64) -> Result<T, weft::JoinError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.join());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("hang: a weft task or fiber did not finish in time")
}
