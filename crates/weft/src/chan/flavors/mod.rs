//! The buffers of the buffered channels (placeholder until the lock-free ones land).

pub(crate) mod list;
pub(crate) mod ring;
