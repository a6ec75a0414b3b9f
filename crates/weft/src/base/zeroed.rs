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
//!
//! Short arrays come from the allocator, which clears a reused block whole: for a
//! `bounded(1000)` of 512-byte values that is 8 KiB of stamps per channel (the sync
//! suite's `mpsc_send_medium_1000` makes one per value: 1,013 ns an iteration with the
//! clear, 726 ns without, medians of 5 alternated runs). So an owner that knows which
//! elements it wrote gives the array back clean ([`Zeroed::recycle`]: only those are
//! cleared), and each thread keeps one such block for the next array of the same size.
//!
//! A mapping is kept the same way when little of it was written: mapping, faulting
//! in and unmapping the pages of a `bounded(1_000_000)` that carried 5,000 values cost
//! about 40 % of `mpsc_uncontended_bounded`'s iteration (`perf`: `madvise` populating
//! the pages ahead of the pushes, `munmap` with its TLB flush, the faults), where
//! clearing the 80 KiB written costs a few microseconds and the next channel finds the
//! pages already there. A thread so keeps one mapping at most, until its next array of
//! that size or its exit, resident as far as it was touched: at most
//! [`MAPPED_MAX_DIRTY_BYTES`] written, and the pages faulted in ahead of the writes,
//! still zero, which for a ring of up to 8 MiB is the whole of it (such rings are
//! faulted in when made: `chan/flavors/ring.rs`, `POPULATE_MAX_BYTES`). So a thread
//! holds up to some 9 MiB for its next channel, as an allocator holds freed blocks.

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

/// The most bytes of a mapping that a recycle clears to keep it: clearing a page costs
/// less than faulting it in again (a fifth of it, about, here), but the cleared pages
/// stay resident while the thread keeps the mapping, as do those faulted in unwritten.
#[cfg(not(loom))]
const MAPPED_MAX_DIRTY_BYTES: usize = 1 << 20;

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
            if let Some(words) = mapped::take::<S>(len).or_else(|| map(len)) {
                return Zeroed {
                    words,
                    mapped: true,
                };
            }
            if let Some(words) = clean::take::<S>(len) {
                return Zeroed {
                    words,
                    mapped: false,
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

/// The empty array, made without a look at the allocator or the clean block (for an
/// array a ring does not use, or one taken out of it).
impl<S> Default for Zeroed<S> {
    fn default() -> Zeroed<S> {
        #[cfg(not(loom))]
        return Zeroed {
            words: std::ptr::NonNull::slice_from_raw_parts(std::ptr::NonNull::dangling(), 0),
            mapped: false,
        };
        #[cfg(loom)]
        return Zeroed {
            words: Box::default(),
        };
    }
}

impl<S> Zeroed<S> {
    /// Drops the array, but first clears the elements in `dirty`; then an array whose
    /// elements need no drop goes to this thread's clean block (allocated, at most
    /// [`clean::MAX_BYTES`]) or clean mapping (mapped, at most
    /// [`MAPPED_MAX_DIRTY_BYTES`] of it dirty), for the next [`new`](Zeroed::new) of
    /// its size to take without clearing or mapping it.
    ///
    /// # Safety
    /// Every element outside `dirty` is all zero bytes: it was never written, or
    /// written back to zero (a later array built on this memory trusts it to read as
    /// zero, as a ring trusts its stamps).
    pub(crate) unsafe fn recycle(self, dirty: std::ops::Range<usize>) {
        #[cfg(not(loom))]
        {
            let len = self.len();
            let bytes = std::mem::size_of_val(&*self);
            let dirty = dirty.start.min(len)..dirty.end.min(len);
            let kept = !std::mem::needs_drop::<S>()
                && bytes != 0
                && if self.mapped {
                    dirty.len() * std::mem::size_of::<S>() <= MAPPED_MAX_DIRTY_BYTES
                } else {
                    bytes <= clean::MAX_BYTES
                };
            if !kept {
                return;
            }
            let this = std::mem::ManuallyDrop::new(self);
            let first = this.words.as_ptr().cast::<S>();
            // SAFETY: `dirty` is clipped to the array, which we own (by value) and
            // whose elements need no drop; zero bytes are what `new` gave them.
            unsafe { std::ptr::write_bytes(first.add(dirty.start), 0, dirty.len()) };
            if this.mapped {
                #[cfg(unix)]
                // SAFETY: all zero now (the contract for the rest), mapped by `map` at
                // this address and length (or kept so), handed on once (`this` stays).
                unsafe {
                    mapped::put(this.words.cast::<u8>(), bytes)
                };
            } else {
                // SAFETY: all zero now (the contract for the rest), from
                // `Box::new_zeroed_slice` (or kept so), handed on once (`this` stays).
                unsafe { clean::put(this.words) };
            }
        }
        #[cfg(loom)]
        let _ = (self, dirty);
    }
}

/// A thread's one kept block of zero bytes, shared by the two caches below: where it
/// is, and the key a request must match (its layout, or its length), which also says
/// how the block is freed.
#[cfg(not(loom))]
mod kept {
    use std::cell::Cell;
    use std::ptr::NonNull;
    use std::thread::LocalKey;

    /// How a kept block is matched and freed.
    pub(super) trait Key: Copy + PartialEq + 'static {
        /// Frees the block at `at`.
        ///
        /// # Safety
        /// The block was allocated (or mapped) as this key says, is owned by the
        /// caller, and is freed once.
        unsafe fn free(self, at: NonNull<u8>);
    }

    pub(super) struct Kept<K: Key> {
        at: Cell<Option<(NonNull<u8>, K)>>,
    }

    impl<K: Key> Kept<K> {
        pub(super) const fn new() -> Kept<K> {
            Kept {
                at: Cell::new(None),
            }
        }
    }

    impl<K: Key> Drop for Kept<K> {
        fn drop(&mut self) {
            if let Some((at, key)) = self.at.take() {
                // SAFETY: `put` keeps only blocks its caller handed over as `key` says,
                // each once.
                unsafe { key.free(at) };
            }
        }
    }

    /// The block kept in `cache`, if its key is `key`; the caller's from then on.
    // Both never inlined: they read a thread-local (see
    // `scheduler::worker::current_cell`).
    #[inline(never)]
    pub(super) fn take<K: Key>(cache: &'static LocalKey<Kept<K>>, key: K) -> Option<NonNull<u8>> {
        cache
            .try_with(|c| match c.at.take() {
                Some((at, k)) if k == key => Some(at),
                other => {
                    c.at.set(other);
                    None
                }
            })
            .ok()
            .flatten()
    }

    /// Keeps the block at `at` in `cache` (freeing the one it replaces), or frees it
    /// while the thread's storage is being torn down.
    ///
    /// # Safety
    /// The block is all zero bytes, was allocated (or mapped) as `key` says, and is
    /// owned by the caller, who hands it over.
    #[inline(never)]
    pub(super) unsafe fn put<K: Key>(cache: &'static LocalKey<Kept<K>>, at: NonNull<u8>, key: K) {
        let free = match cache.try_with(|c| c.at.replace(Some((at, key)))) {
            Ok(old) => old,
            Err(_) => Some((at, key)),
        };
        if let Some((at, key)) = free {
            // SAFETY: a block handed over as `key` says (the contract, or that of the
            // `put` that kept it), no longer kept anywhere.
            unsafe { key.free(at) };
        }
    }
}

/// Each thread's one clean block: an allocated array of all zero bytes that a
/// [`Zeroed::recycle`] gave back, for the next [`Zeroed::new`] of the same layout.
#[cfg(not(loom))]
mod clean {
    use std::alloc::Layout;
    use std::ptr::NonNull;

    use super::kept::{self, Kept};

    /// The largest block kept (larger arrays are rare, and each thread keeps one).
    pub(super) const MAX_BYTES: usize = 64 << 10;

    impl kept::Key for Layout {
        unsafe fn free(self, at: NonNull<u8>) {
            // SAFETY: the global allocator gave the block with this layout (the
            // contract).
            unsafe { std::alloc::dealloc(at.as_ptr(), self) };
        }
    }

    thread_local! {
        static BLOCK: Kept<Layout> = const { Kept::new() };
    }

    /// The clean block as `len` elements of `S`, if it has exactly their layout.
    pub(super) fn take<S>(len: usize) -> Option<NonNull<[S]>> {
        let layout = Layout::array::<S>(len).ok()?;
        if layout.size() == 0 || layout.size() > MAX_BYTES {
            return None;
        }
        let at = kept::take(&BLOCK, layout)?;
        let words = NonNull::slice_from_raw_parts(at.cast::<S>(), len);
        // SAFETY: the block is `len` elements of `S` long (its layout) and ours now.
        debug_assert!(
            unsafe { std::slice::from_raw_parts(at.as_ptr(), layout.size()) }
                .iter()
                .all(|&b| b == 0)
        );
        Some(words)
    }

    /// Keeps `words` as this thread's clean block (freeing the one it replaces), or
    /// frees it while the thread's storage is being torn down.
    ///
    /// # Safety
    /// `words` is all zero bytes, was allocated by the global allocator as
    /// `Box<[S]>` (`Layout::array::<S>(len)`), is not empty, and is owned by the caller,
    /// who hands it over.
    pub(super) unsafe fn put<S>(words: NonNull<[S]>) {
        let layout = Layout::array::<S>(words.len()).expect("a live array's layout");
        // SAFETY: the contract, with the layout it was allocated with.
        unsafe { kept::put(&BLOCK, words.cast::<u8>(), layout) };
    }
}

/// Each thread's one clean mapping: a mapped array of all zero bytes that a
/// [`Zeroed::recycle`] gave back, for the next [`Zeroed::new`] of the same length in
/// bytes (a mapping is page-aligned, so it suits any element type `map` accepts).
#[cfg(all(unix, not(loom)))]
mod mapped {
    use std::ptr::NonNull;

    use super::kept::{self, Kept};

    /// A mapping's length in bytes.
    #[derive(Clone, Copy, PartialEq)]
    struct Len(usize);

    impl kept::Key for Len {
        unsafe fn free(self, at: NonNull<u8>) {
            // SAFETY: `map` made the mapping with this address and length (the
            // contract). `munmap` fails only at the process's mapping limit; the pages
            // then stay mapped, a leak, as in `Zeroed`'s `Drop`.
            unsafe { libc::munmap(at.as_ptr().cast(), self.0) };
        }
    }

    thread_local! {
        static KEPT: Kept<Len> = const { Kept::new() };
    }

    /// The clean mapping as `len` elements of `S`, if it is exactly their size.
    pub(super) fn take<S>(len: usize) -> Option<NonNull<[S]>> {
        let bytes = std::alloc::Layout::array::<S>(len).ok()?.size();
        if bytes < super::MAP_AT || std::mem::align_of::<S>() > 4096 {
            return None;
        }
        let at = kept::take(&KEPT, Len(bytes))?;
        // The mapping is page-aligned (so aligned for `S`, checked above), `bytes`
        // long, all zero bytes, and ours now.
        Some(NonNull::slice_from_raw_parts(at.cast::<S>(), len))
    }

    /// Keeps the mapping at `at` as this thread's clean mapping (unmapping the one it
    /// replaces), or unmaps it while the thread's storage is being torn down.
    ///
    /// # Safety
    /// The `bytes` bytes at `at` are all zero, were mapped by `map` with exactly this
    /// address and length, and are owned by the caller, who hands them over.
    pub(super) unsafe fn put(at: NonNull<u8>, bytes: usize) {
        // SAFETY: the contract, with the length it was mapped with.
        unsafe { kept::put(&KEPT, at, Len(bytes)) };
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

    /// A recycled array comes back, all zero, as the next array of its layout made on
    /// the same thread: only its dirty elements are cleared, so what lay outside them
    /// must have been zero (the contract). Other layouts and other threads do not get
    /// it.
    #[test]
    fn recycled_arrays_come_back_clean_for_the_same_layout_on_the_same_thread() {
        let w = ZeroedWords::new(100);
        let at = w.as_ptr();
        for x in &w[10..20] {
            x.store(7, Relaxed);
        }
        // SAFETY: only 10..20 were written.
        unsafe { w.recycle(10..20) };
        let other_thread = std::thread::spawn(|| ZeroedWords::new(100).as_ptr() as usize)
            .join()
            .unwrap();
        assert_ne!(
            other_thread, at as usize,
            "another thread took this thread's block"
        );
        let longer = ZeroedWords::new(101);
        assert_ne!(longer.as_ptr(), at, "a block taken for another length");
        let again = ZeroedWords::new(100);
        assert_eq!(again.as_ptr(), at, "the clean block was not reused");
        assert!(again.iter().all(|x| x.load(Relaxed) == 0));
        // Taken: the next array of that length is another block.
        assert_ne!(ZeroedWords::new(100).as_ptr(), at);
        drop((longer, again));
    }

    /// A mapped array comes back, cleared where it was dirty, as the next mapped array
    /// of its size in bytes made on the same thread (whatever the element type); one
    /// dirty beyond `MAPPED_MAX_DIRTY_BYTES` is unmapped instead, and no other thread
    /// gets it.
    #[test]
    fn recycled_mappings_come_back_clean_when_little_was_written() {
        let words = 2 * MAP_AT / 8;
        let big = ZeroedWords::new(words);
        let at = big.as_ptr() as usize;
        for i in [3, 700, 2000] {
            big[i].store(i, Relaxed);
        }
        // SAFETY: only elements 3..=2000 were written.
        unsafe { big.recycle(3..2001) };
        let other_thread = std::thread::spawn(move || ZeroedWords::new(words).as_ptr() as usize)
            .join()
            .unwrap();
        assert_ne!(
            other_thread, at,
            "another thread took this thread's mapping"
        );
        assert!(
            ZeroedWords::new(words + 512).as_ptr() as usize != at,
            "a mapping taken for another size"
        );
        // The same bytes as another element type (as a ring's joint slots).
        struct Pair([AtomicUsize; 2]);
        // SAFETY: two plain words.
        unsafe impl Zeroable for Pair {
            fn zero() -> Pair {
                Pair([AtomicUsize::new(0), AtomicUsize::new(0)])
            }
        }
        let again = Zeroed::<Pair>::new(words / 2);
        assert!(again.mapped);
        assert_eq!(
            again.as_ptr() as usize,
            at,
            "the clean mapping was not reused"
        );
        assert!(again
            .iter()
            .flat_map(|p| &p.0)
            .all(|x| x.load(Relaxed) == 0));
        // Dirty past the limit: unmapped, so the next array of that size is fresh.
        let dirty = MAPPED_MAX_DIRTY_BYTES / 8 + 1;
        for p in &again[..dirty / 2 + 1] {
            p.0[0].store(1, Relaxed);
            p.0[1].store(1, Relaxed);
        }
        let again_at = again.as_ptr() as usize;
        // SAFETY: only the first `dirty / 2 + 1` elements were written.
        unsafe { again.recycle(0..dirty / 2 + 1) };
        let fresh = ZeroedWords::new(words);
        assert!(fresh.mapped && fresh.iter().step_by(97).all(|x| x.load(Relaxed) == 0));
        assert!(
            mapped::take::<AtomicUsize>(words).is_none(),
            "a mapping dirty past the limit was kept (at {again_at:#x})"
        );
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
