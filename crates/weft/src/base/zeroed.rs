//! Arrays of atomic words that start at zero and cost no writes up front, however long.
//!
//! `calloc` gives zeroed memory for free only when it maps fresh pages; a block it
//! reuses from the heap it clears byte by byte. glibc raises its mapping threshold to
//! the size of the last large block freed, so a program that makes and drops one
//! `bounded(1_000_000)` channel after another gets heap blocks, and every channel
//! costs an 8 MiB clear however few values it carries (the sync suite's
//! `mpsc_uncontended_bounded`, 5,000 values a channel: 1.0 ms an iteration with the
//! clear, 0.4 ms without). Long arrays are therefore mapped directly: anonymous pages
//! read as zero until written, and only the pages used are ever touched.

use std::ops::Deref;

use super::AtomicUsize;

/// At least this many bytes are mapped rather than allocated: below it a clear costs
/// less than the `mmap` and `munmap` calls.
#[cfg(all(unix, not(loom)))]
const MAP_AT: usize = 1 << 20;

/// A boxed slice of `AtomicUsize`, every one 0 at first.
pub(crate) struct ZeroedWords {
    #[cfg(not(loom))]
    words: std::ptr::NonNull<[AtomicUsize]>,
    /// Whether `words` is an anonymous mapping (else a `Box` allocation).
    #[cfg(not(loom))]
    mapped: bool,
    #[cfg(loom)]
    words: Box<[AtomicUsize]>,
}

// SAFETY: `ZeroedWords` owns its words as a `Box<[AtomicUsize]>` would, and atomics are
// `Send` and `Sync`.
unsafe impl Send for ZeroedWords {}
// SAFETY: as above; shared access hands out only `&[AtomicUsize]`.
unsafe impl Sync for ZeroedWords {}

impl ZeroedWords {
    /// `len` words holding 0. Panics if `len` words do not fit in memory's addresses;
    /// aborts, as any allocation does, if no memory is left.
    pub(crate) fn new(len: usize) -> ZeroedWords {
        #[cfg(loom)]
        return ZeroedWords {
            words: (0..len).map(|_| AtomicUsize::new(0)).collect(),
        };
        #[cfg(not(loom))]
        {
            #[cfg(unix)]
            if let Some(words) = map(len) {
                return ZeroedWords {
                    words,
                    mapped: true,
                };
            }
            // SAFETY: a zeroed `AtomicUsize` is a valid one holding 0.
            let boxed = unsafe { Box::<[AtomicUsize]>::new_zeroed_slice(len).assume_init() };
            ZeroedWords {
                words: std::ptr::NonNull::from(Box::leak(boxed)),
                mapped: false,
            }
        }
    }
}

/// Maps `len` zeroed words if they are long enough to be worth it and the kernel
/// gives the pages; `None` leaves them to the allocator.
#[cfg(all(unix, not(loom)))]
fn map(len: usize) -> Option<std::ptr::NonNull<[AtomicUsize]>> {
    // `Layout::array` also refuses sizes over `isize::MAX`, which no slice may span.
    let bytes = std::alloc::Layout::array::<AtomicUsize>(len)
        .expect("capacity overflow")
        .size();
    if bytes < MAP_AT {
        return None;
    }
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing
    // touches no existing memory; the result is checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    // The mapping is page-aligned (so aligned for `AtomicUsize`), `bytes` long, reads
    // as zeroes, and is ours until `Drop` unmaps it.
    let first = std::ptr::NonNull::new(p.cast::<AtomicUsize>())?;
    Some(std::ptr::NonNull::slice_from_raw_parts(first, len))
}

impl Deref for ZeroedWords {
    type Target = [AtomicUsize];

    fn deref(&self) -> &[AtomicUsize] {
        #[cfg(loom)]
        return &self.words;
        #[cfg(not(loom))]
        // SAFETY: `words` is a live allocation or mapping of initialised (zeroed, then
        // only atomically written) words, owned by `self` and freed only in `Drop`.
        return unsafe { self.words.as_ref() };
    }
}

#[cfg(not(loom))]
impl Drop for ZeroedWords {
    fn drop(&mut self) {
        if self.mapped {
            #[cfg(unix)]
            {
                let bytes = std::mem::size_of_val(&**self);
                // `munmap` fails only when the process is at its mapping limit and the
                // hole would split a region; the pages then stay mapped (a leak, as
                // `free` would accept), which is no reason to panic in a destructor.
                // SAFETY: the mapping was made by `map` with exactly this address and
                // length, and nothing borrows it any more (`&mut self`).
                unsafe { libc::munmap(self.words.as_ptr().cast(), bytes) };
            }
        } else {
            // SAFETY: `words` came from `Box::leak` in `new` and is freed once, here.
            drop(unsafe { Box::from_raw(self.words.as_ptr()) });
        }
    }
}

#[cfg(all(test, unix, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn short_and_long_arrays_start_at_zero_and_keep_what_is_stored() {
        for len in [
            0,
            1,
            7,
            4096,
            (MAP_AT / 8) - 1,
            MAP_AT / 8,
            3 * MAP_AT / 8 + 5,
        ] {
            let w = ZeroedWords::new(len);
            assert_eq!(w.len(), len);
            assert!(w.iter().all(|x| x.load(Relaxed) == 0), "len {len}");
            for (i, x) in w.iter().enumerate().step_by(509) {
                x.store(i + 1, Relaxed);
            }
            for (i, x) in w.iter().enumerate() {
                let want = if i % 509 == 0 { i + 1 } else { 0 };
                assert_eq!(x.load(Relaxed), want, "len {len}, word {i}");
            }
            assert_eq!(w.mapped, len * 8 >= MAP_AT, "len {len}");
        }
    }

    #[test]
    fn dropped_on_another_thread() {
        let w = ZeroedWords::new(MAP_AT);
        w[5].store(9, Relaxed);
        std::thread::spawn(move || assert_eq!(w[5].load(Relaxed), 9))
            .join()
            .unwrap();
    }

    #[test]
    #[should_panic(expected = "capacity overflow")]
    fn absurd_lengths_panic() {
        let _ = ZeroedWords::new(usize::MAX / 4);
    }
}
