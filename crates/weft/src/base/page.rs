//! The system's memory page size, read once (fiber stacks are whole pages with a guard
//! page; the channel ring's prefault advises whole pages).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system page size (a power of two).
pub(crate) fn size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let cached = PAGE.load(Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: sysconf only reads a system constant.
    let raw = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = usize::try_from(raw)
        .ok()
        .filter(|p| p.is_power_of_two())
        .expect("the page size is a power of two");
    PAGE.store(page, Relaxed);
    page
}
