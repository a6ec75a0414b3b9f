//! Synchronisation that `weft-bench` builds its weft contenders on, kept apart from
//! the harness so that it can be model-checked: the harness depends on tokio, which
//! does not build under `--cfg loom`, while this crate depends on nothing but loom.
//!
//! * [`slot`](slot::slot): a lock-free one-slot channel, as poll functions. The harness
//!   wraps them in `weft::wait` for fibers.
//!
//! Run the models with
//! `RUSTFLAGS="--cfg loom" cargo test -p weft-bench-sync --release --lib loom_`.

pub mod slot;
mod sync;
