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

/// Joins `h` from a plain thread, failing with "hang" after `secs`.
pub fn join_within<T: Send + 'static>(h: JoinHandle<T>, secs: u64) -> Result<T, weft::JoinError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.join());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("hang: a weft task or fiber did not finish in time")
}
