//! Faulting memory in ahead of its first use, so that the first write to a page does
//! not happen inside a window another thread waits on.
//!
//! A bounded channel's ring is allocated whole but touched only as values arrive
//! (`chan/flavors/ring.rs`): fresh anonymous pages cost nothing up front, which keeps
//! a `bounded(1000)` of 32 KiB messages from clearing 32 MiB at creation. The price is
//! a page fault on the first write to each page, and those writes sit between a push's
//! claim of its slot and its publication: a receiver that reaches that slot spins (and
//! yields) until the fault is served. Worse, a receiver that looked at a stamp on a
//! page nobody had written mapped the shared zero page there, and the push's write
//! then copies it and flushes the other cores' TLBs, which under a hypervisor costs
//! tens of microseconds. Measured on the 2-core VM, one sender and one receiver over
//! `bounded(400_000)`: 38-250 ns a message with thousands of `sched_yield`s in the
//! receiver's wait for such slots, against 20-40 ns once the pages were written
//! before the pushes reached them.
//!
//! [`populate`] asks the kernel to map a range writable without writing it
//! (`MADV_POPULATE_WRITE`, Linux 5.14): it changes no byte, so it may run over memory
//! other threads are using. Elsewhere, or on an older kernel, it does nothing and the
//! faults stay where they were.

/// Maps the pages spanning `len` bytes from `start` writable, if the platform can; the
/// contents are not changed. Errors are ignored (the pages then fault in on first use
/// as they would have).
pub(crate) fn populate(start: *const u8, len: usize) {
    #[cfg(all(target_os = "linux", not(loom)))]
    linux::populate(start, len);
    #[cfg(not(all(target_os = "linux", not(loom))))]
    let _ = (start, len);
}

#[cfg(all(target_os = "linux", not(loom)))]
mod linux {
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering::Relaxed;

    /// Cleared once the kernel has refused the advice as unknown (older than 5.14).
    pub(super) static SUPPORTED: AtomicBool = AtomicBool::new(true);

    pub(super) fn populate(start: *const u8, len: usize) {
        if len == 0 || !SUPPORTED.load(Relaxed) {
            return;
        }
        let page = crate::base::page::size();
        let first = start as usize & !(page - 1);
        let Some(end) = (start as usize).checked_add(len) else {
            return;
        };
        let last = end.div_ceil(page) * page;
        // The range is the caller's allocation widened to whole pages; those pages are
        // mapped (they hold part of the allocation), and if any were not the call
        // fails with `ENOMEM` and does nothing harmful.
        // SAFETY: `MADV_POPULATE_WRITE` only faults pages in (as a write would) and
        // never changes their contents, so it cannot disturb memory in use.
        let r = unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            SUPPORTED.store(false, Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::populate;

    /// The advice changes nothing it covers, including bytes of the same pages
    /// outside the range, and tolerates empty, unaligned and odd ranges.
    #[test]
    fn populating_keeps_contents() {
        let mut v: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        populate(v.as_ptr().wrapping_add(3), 50_000);
        populate(v.as_ptr(), 0);
        populate(v.as_ptr().wrapping_add(99_999), 1);
        for (i, b) in v.iter().enumerate() {
            assert_eq!(*b, (i % 251) as u8);
        }
        v[0] = 7;
        assert_eq!(v[0], 7);
    }

    /// On Linux, the pages of a fresh mapping are resident after the call, without
    /// having been written: `mincore` reports them, and they still read as zero.
    #[cfg(target_os = "linux")]
    #[test]
    fn populating_a_fresh_mapping_makes_it_resident() {
        let len = 64 * 4096;
        // SAFETY: a fresh private anonymous mapping, checked, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let resident = |p: *mut libc::c_void| {
            let mut vec = vec![0u8; len / 4096];
            // SAFETY: `p` is a mapping of `len` bytes, `vec` has a byte per page.
            assert_eq!(unsafe { libc::mincore(p, len, vec.as_mut_ptr()) }, 0);
            vec.iter().filter(|b| **b & 1 != 0).count()
        };
        let before = resident(p);
        populate(p.cast::<u8>().cast_const(), len);
        let after = resident(p);
        // SAFETY: the mapping is `len` bytes of readable memory.
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
        assert!(bytes.iter().all(|b| *b == 0));
        // SAFETY: the mapping made above, no longer borrowed.
        unsafe { libc::munmap(p, len) };
        // Kernels before 5.14 refuse the advice: nothing to check there.
        if super::linux_supported() {
            assert_eq!(before, 0);
            assert_eq!(after, len / 4096);
        }
    }
}

/// Whether the running kernel took the advice so far (for tests).
#[cfg(all(test, target_os = "linux", not(loom)))]
pub(crate) fn linux_supported() -> bool {
    linux::SUPPORTED.load(std::sync::atomic::Ordering::Relaxed)
}
