//! The drivers a parking worker runs: the timer wheel and its hand-off (and, next to
//! it, the I/O driver of a later layer, sharing the same park path).

pub(crate) mod io;
#[cfg(all(test, loom))]
mod loom_tests;
pub(crate) mod readiness;
pub(crate) mod timer;
pub(crate) mod wheel;
