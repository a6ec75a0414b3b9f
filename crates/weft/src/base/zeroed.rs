//! Arrays that start all zero bytes and cost no writes up front, however long: the
//! stamps of a channel's ring, or its slots when a stamp and a small value share one.
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

/// A type for which all-zero bytes are a valid value.
///
/// # Safety
/// Outside loom builds a value of all zero bytes must be a valid `Self`, equal to
/// [`Zeroable::zero`] (loom's atomics are not plain words: its builds call `zero`).
// Outside loom only a bound: its `zero` is loom's way in.
#[cfg_attr(not(loom), allow(dead_code))]
pub(crate) unsafe trait Zeroable {
    fn zero() -> Self;
}

// SAFETY: outside loom `AtomicUsize` is `std`'s, a plain word: zero bytes are 0.
unsafe impl Zeroable for AtomicUsize {
    fn zero() -> Self {
        AtomicUsize::new(0)
    }
}

/// The words of a ring's stamps.
pub(crate) type ZeroedWords = Zeroed<AtomicUsize>;

/// At least this many bytes are mapped rather than allocated: below it a clear costs
/// less than the `mmap` and `munmap` calls.
#[cfg(all(unix, not(loom)))]
const MAP_AT: usize = 1 << 20;

/// A boxed slice of `S`, every one all zero bytes at first.
pub(crate) struct Zeroed<S> {
    #[cfg(not(loom))]
    words: std::ptr::NonNull<[S]>,
    /// Whether `words` is an anonymous mapping (else a `Box` allocation).
    #[cfg(not(loom))]
    mapped: bool,
    #[cfg(loom)]
    words: Box<[S]>,
}

// SAFETY: `Zeroed` owns its elements as a `Box<[S]>` would.
unsafe impl<S: Send> Send for Zeroed<S> {}
// SAFETY: as above; shared access hands out only `&[S]`.
unsafe impl<S: Sync> Sync for Zeroed<S> {}

impl<S: Zeroable> Zeroed<S> {
    /// `len` zeroed elements. Panics if they do not fit in memory's addresses; aborts,
    /// as any allocation does, if no memory is left.
    pub(crate) fn new(len: usize) -> Zeroed<S> {
        #[cfg(loom)]
        return Zeroed {
            words: (0..len).map(|_| S::zero()).collect(),
        };
        #[cfg(not(loom))]
        {
            #[cfg(unix)]
            if let Some(words) = map(len) {
                return Zeroed {
                    words,
                    mapped: true,
                };
            }
            // SAFETY: all zero bytes are a valid `S` (`Zeroable`).
            let boxed = unsafe { Box::<[S]>::new_zeroed_slice(len).assume_init() };
            Zeroed {
                words: std::ptr::NonNull::from(Box::leak(boxed)),
                mapped: false,
            }
        }
    }
}

/// Maps `len` zeroed elements if they are long enough to be worth it and the kernel
/// gives the pages; `None` leaves them to the allocator.
#[cfg(all(unix, not(loom)))]
fn map<S>(len: usize) -> Option<std::ptr::NonNull<[S]>> {
    // `Layout::array` also refuses sizes over `isize::MAX`, which no slice may span.
    let bytes = std::alloc::Layout::array::<S>(len)
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
    if std::mem::align_of::<S>() > 4096 {
        // SAFETY: the mapping just made, unused.
        unsafe { libc::munmap(p, bytes) };
        return None;
    }
    // The mapping is page-aligned (so aligned for `S`, checked above), `bytes` long,
    // reads as zeroes, and is ours until `Drop` unmaps it.
    let first = std::ptr::NonNull::new(p.cast::<S>())?;
    Some(std::ptr::NonNull::slice_from_raw_parts(first, len))
}

impl<S> Deref for Zeroed<S> {
    type Target = [S];

    fn deref(&self) -> &[S] {
        #[cfg(loom)]
        return &self.words;
        #[cfg(not(loom))]
        // SAFETY: `words` is a live allocation or mapping of initialised (zeroed, so
        // valid: `Zeroable`) elements, owned by `self` and freed only in `Drop`.
        return unsafe { self.words.as_ref() };
    }
}

#[cfg(not(loom))]
impl<S> Drop for Zeroed<S> {
    fn drop(&mut self) {
        if self.mapped {
            #[cfg(unix)]
            {
                let bytes = std::mem::size_of_val(&**self);
                // SAFETY: the elements are owned here, initialised, and dropped once (the
                // `Box` branch below drops them with the box).
                unsafe { std::ptr::drop_in_place(self.words.as_ptr()) };
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
