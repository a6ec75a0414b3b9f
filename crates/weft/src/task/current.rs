//! Which task the current thread is polling, for `is_cancelled` and `shield`.

use std::cell::Cell;
use std::ptr::NonNull;

use super::header::Header;

thread_local! {
    static CURRENT: Cell<Option<NonNull<Header>>> = const { Cell::new(None) };
}

/// Restores the previous task when dropped (polls nest when a worker helps inside a
/// blocking join).
pub(crate) struct Enter {
    prev: Option<NonNull<Header>>,
}

pub(crate) fn enter(task: NonNull<Header>) -> Enter {
    Enter {
        prev: CURRENT.with(|c| c.replace(Some(task))),
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.prev));
    }
}

/// Runs `f` with the header of the task being polled on this thread, if any. The header
/// is alive: the poll holds the running reference.
pub(crate) fn with<R>(f: impl FnOnce(Option<&Header>) -> R) -> R {
    CURRENT.with(|c| {
        // SAFETY: the pointer is set only for the duration of a poll, which holds the
        // task's running reference.
        f(c.get().map(|p| unsafe { p.as_ref() }))
    })
}
