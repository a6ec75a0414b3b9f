//! The read and write timeouts of a socket's blocking forms.

use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

const NONE: u64 = u64::MAX;

/// Two timeouts in nanoseconds (`NONE`: wait for ever), settable through `&self`.
#[derive(Debug)]
pub(crate) struct Timeouts {
    read: AtomicU64,
    write: AtomicU64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            read: AtomicU64::new(NONE),
            write: AtomicU64::new(NONE),
        }
    }
}

fn encode(t: Option<Duration>) -> io::Result<u64> {
    match t {
        None => Ok(NONE),
        Some(d) if d.is_zero() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        )),
        // Beyond ~584 years: the same as none.
        Some(d) => Ok(u64::try_from(d.as_nanos())
            .unwrap_or(NONE - 1)
            .min(NONE - 1)),
    }
}

fn decode(v: u64) -> Option<Duration> {
    (v != NONE).then(|| Duration::from_nanos(v))
}

impl Timeouts {
    pub(crate) fn set_read(&self, t: Option<Duration>) -> io::Result<()> {
        self.read.store(encode(t)?, Relaxed);
        Ok(())
    }

    pub(crate) fn set_write(&self, t: Option<Duration>) -> io::Result<()> {
        self.write.store(encode(t)?, Relaxed);
        Ok(())
    }

    pub(crate) fn read(&self) -> Option<Duration> {
        decode(self.read.load(Relaxed))
    }

    pub(crate) fn write(&self) -> Option<Duration> {
        decode(self.write.load(Relaxed))
    }
}
