//! Recycled task allocations: a per-thread cache of freed task cells over a
//! process-wide depot, by size class (a magazine allocator, after Bonwick's).
//!
//! Why: a spawn allocates one cell and its completion frees it, usually on another
//! worker (the one that stole or was woken for it). With the system allocator (glibc)
//! every such free goes back to the allocating thread's arena under that arena's lock,
//! which the allocating worker takes for each malloc: the two workers meet on one lock
//! per task (`spawn_many_local` spent much of its time in `__lll_lock_wait_private`).
//! Here a freed cell goes into the freeing thread's cache; a full magazine of
//! [`BATCH`] cells moves to the depot under one lock, and a thread whose cache is empty
//! takes a whole magazine from there. So cells flow from the freeing worker back to the
//! spawning one at one lock per [`BATCH`] tasks, and the allocator is not involved in
//! the steady state.
//!
//! What is cached: cells of at most [`MAX_SIZE`] bytes and alignment at most [`ALIGN`],
//! rounded up to a multiple of [`GRANULE`]; a block is always allocated and freed with
//! its class's layout, so a block can serve any cell type of its class. Every block is
//! an ordinary allocation of the global allocator with that layout: any thread may free
//! it, which is what the depot and thread exit do with what they cannot keep. A thread
//! caches at most two magazines per class; the depot keeps as many
//! magazines per class as fit in [`DEPOT_BYTES`] and frees the rest.
//!
//! No lock-free structure: the thread caches are thread-locals (a `RefCell`-free
//! `Cell` discipline, only their own thread touches them) and the depot is a mutex.
//! Under loom every cell goes to the global allocator (loom runs its threads on one OS
//! thread, so thread-locals would be shared between model threads).

// Under loom every cell goes to the global allocator, which leaves the caches unused.
#![cfg_attr(loom, allow(dead_code))]

use std::alloc::Layout;
use std::ptr::NonNull;

/// Block sizes are multiples of this.
pub(crate) const GRANULE: usize = 64;
/// Largest cached cell.
pub(crate) const MAX_SIZE: usize = 512;
/// Every block's alignment; cells that need more are not cached.
pub(crate) const ALIGN: usize = 16;
/// Size classes: `GRANULE`, `2 * GRANULE`, ..., `MAX_SIZE`.
const CLASSES: usize = MAX_SIZE / GRANULE;
/// Cells per magazine (the unit that moves between a thread and the depot).
pub(crate) const BATCH: usize = 64;
/// Bytes of free blocks the depot keeps per class. It must hold the backlog of a
/// spawn burst (one worker spawning thousands of tasks that another runs and frees):
/// what it cannot keep goes back to the allocator, and the spawner then allocates
/// from it again, meeting the freeing worker on the arena lock (with 1 MiB per class,
/// a burst of 10,000 spawns still spent ~8 % of its worker time in malloc and in
/// freeing the overflow). Memory is only held in classes a program uses, and what
/// glibc would keep in its arenas after such a burst is of the same order.
const DEPOT_BYTES: usize = 4 << 20;

/// The size class of `layout`, or `None` if cells of that layout are not cached.
pub(crate) const fn class_of(layout: Layout) -> Option<usize> {
    if layout.size() == 0 || layout.size() > MAX_SIZE || layout.align() > ALIGN {
        None
    } else {
        Some(layout.size().div_ceil(GRANULE) - 1)
    }
}

/// The layout every block of `class` is allocated and freed with.
fn block_layout(class: usize) -> Layout {
    // `(class + 1) * GRANULE` is at most `MAX_SIZE` and a multiple of `ALIGN`.
    match Layout::from_size_align((class + 1) * GRANULE, ALIGN) {
        Ok(l) => l,
        Err(_) => unreachable!("weft: a task size class has no layout"),
    }
}

/// A chain of free blocks of one class, linked through their first word.
struct Magazine {
    head: Option<NonNull<FreeBlock>>,
    len: usize,
}

/// The first word of a free block: the next free block of its magazine.
struct FreeBlock {
    next: Option<NonNull<FreeBlock>>,
}

// SAFETY: a magazine owns its blocks (plain memory of the global allocator, not
// referenced by anyone else while they are free), so it may move to another thread.
unsafe impl Send for Magazine {}

impl Magazine {
    const EMPTY: Magazine = Magazine { head: None, len: 0 };

    /// # Safety
    /// `block` is a free block of this magazine's class, owned by the caller (no one
    /// else references it); the magazine takes it over.
    unsafe fn push(&mut self, block: NonNull<u8>) {
        let block = block.cast::<FreeBlock>();
        // SAFETY: every block is at least `GRANULE` bytes, aligned to `ALIGN`, and ours
        // per the contract, so its first word may hold the link.
        unsafe { block.as_ptr().write(FreeBlock { next: self.head }) };
        self.head = Some(block);
        self.len += 1;
    }

    fn pop(&mut self) -> Option<NonNull<u8>> {
        let block = self.head?;
        // SAFETY: blocks in a magazine are free and owned by it; the link was written
        // by `push`.
        self.head = unsafe { block.as_ref().next };
        self.len -= 1;
        Some(block.cast())
    }

    /// Frees every block to the global allocator.
    fn free_all(&mut self, class: usize) {
        let layout = block_layout(class);
        while let Some(block) = self.pop() {
            // SAFETY: every block of `class` was allocated with `block_layout(class)`
            // and is owned by this magazine.
            unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
        }
    }
}

/// Allocates a block for a cell of `layout`.
///
/// # Safety
/// The block must be freed with [`free`] and the same `layout` (or leaked).
pub(crate) unsafe fn alloc(layout: Layout) -> NonNull<u8> {
    #[cfg(not(loom))]
    if let Some(class) = class_of(layout) {
        if let Some(block) = thread_cache::take(class) {
            return block;
        }
        return raw_alloc(block_layout(class));
    }
    raw_alloc(layout)
}

/// Frees a block from [`alloc`].
///
/// # Safety
/// `block` came from [`alloc`] with this `layout`, and nothing references it any more
/// (its contents were dropped or moved out).
pub(crate) unsafe fn free(block: NonNull<u8>, layout: Layout) {
    #[cfg(not(loom))]
    if let Some(class) = class_of(layout) {
        // SAFETY: per the contract the block is ours and of `class`.
        let Some(block) = (unsafe { thread_cache::put(class, block) }) else {
            return;
        };
        // SAFETY: allocated by `alloc` with the class layout (see `alloc`).
        unsafe { std::alloc::dealloc(block.as_ptr(), block_layout(class)) };
        return;
    }
    // SAFETY: uncached blocks come straight from the global allocator with `layout`.
    unsafe { std::alloc::dealloc(block.as_ptr(), layout) }
}

fn raw_alloc(layout: Layout) -> NonNull<u8> {
    // SAFETY: task cells are never zero-sized (the header alone is not).
    let p = unsafe { std::alloc::alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// The process-wide depot: full magazines, per class.
#[cfg(not(loom))]
mod depot {
    use super::{block_layout, Magazine, BATCH, CLASSES, DEPOT_BYTES};

    static DEPOT: [std::sync::Mutex<Vec<Magazine>>; CLASSES] =
        [const { std::sync::Mutex::new(Vec::new()) }; CLASSES];

    fn lock(class: usize) -> std::sync::MutexGuard<'static, Vec<Magazine>> {
        // Nothing panics under this lock but an allocation failure; the vector is
        // consistent at every step either way.
        DEPOT[class].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A full magazine of `class`, if the depot has one.
    pub(super) fn take(class: usize) -> Option<Magazine> {
        lock(class).pop()
    }

    /// Magazines offered to the depot, per class: only ever grows, so a test can see
    /// its own offers while other tests take from the depot or fill it.
    #[cfg(test)]
    static PUTS: [std::sync::atomic::AtomicUsize; CLASSES] =
        [const { std::sync::atomic::AtomicUsize::new(0) }; CLASSES];

    /// Keeps a full magazine of `class`, or frees its blocks when the depot is full.
    pub(super) fn put(class: usize, mag: Magazine) {
        #[cfg(test)]
        PUTS[class].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut rejected = {
            let mut depot = lock(class);
            if depot.len() < DEPOT_BYTES / (BATCH * block_layout(class).size()) {
                depot.push(mag);
                return;
            }
            mag
        };
        // Freed outside the lock.
        rejected.free_all(class);
    }

    #[cfg(test)]
    pub(super) fn puts(class: usize) -> usize {
        PUTS[class].load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Each thread's two magazines per class: `loaded` serves allocations and takes frees;
/// `spare` is a full one kept back, so a thread that alternates between allocating and
/// freeing around a magazine boundary does not go to the depot every time.
#[cfg(not(loom))]
mod thread_cache {
    use std::cell::UnsafeCell;
    use std::ptr::NonNull;

    use super::{depot, Magazine, BATCH, CLASSES};

    struct Cache {
        loaded: [Magazine; CLASSES],
        spare: [Magazine; CLASSES],
    }

    /// On thread exit the magazines go to the depot (full ones) or are freed.
    struct Owner(UnsafeCell<Cache>);

    impl Drop for Owner {
        fn drop(&mut self) {
            let cache = self.0.get_mut();
            for class in 0..CLASSES {
                for mag in [&mut cache.loaded[class], &mut cache.spare[class]] {
                    let mag = std::mem::replace(mag, Magazine::EMPTY);
                    if mag.len == BATCH {
                        depot::put(class, mag);
                    } else {
                        let mut mag = mag;
                        mag.free_all(class);
                    }
                }
            }
        }
    }

    thread_local! {
        static CACHE: Owner = const {
            Owner(UnsafeCell::new(Cache {
                loaded: [const { Magazine::EMPTY }; CLASSES],
                spare: [const { Magazine::EMPTY }; CLASSES],
            }))
        };
    }

    /// Runs `f` on this thread's cache; `None` while the thread is exiting. Never
    /// inlined: it reads a thread-local (see `scheduler::worker::current_cell`).
    #[inline(never)]
    fn with<R>(f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
        CACHE
            .try_with(|owner| {
                // SAFETY: only this thread reaches its cache, and `take` and `put` do
                // not re-enter (the depot's lock and the allocator call no task code),
                // so this is the only reference for the duration of `f`.
                f(unsafe { &mut *owner.0.get() })
            })
            .ok()
    }

    /// A free block of `class` from this thread's cache or the depot.
    pub(super) fn take(class: usize) -> Option<NonNull<u8>> {
        with(|cache| {
            if let Some(block) = cache.loaded[class].pop() {
                return Some(block);
            }
            let refill = if cache.spare[class].len > 0 {
                std::mem::replace(&mut cache.spare[class], Magazine::EMPTY)
            } else {
                depot::take(class)?
            };
            cache.loaded[class] = refill;
            cache.loaded[class].pop()
        })
        .flatten()
    }

    /// Caches `block` (of `class`); hands it back when the thread is exiting.
    ///
    /// # Safety
    /// As for [`Magazine::push`].
    pub(super) unsafe fn put(class: usize, block: NonNull<u8>) -> Option<NonNull<u8>> {
        let cached = with(|cache| {
            if cache.loaded[class].len == BATCH {
                let full = std::mem::replace(&mut cache.loaded[class], Magazine::EMPTY);
                let old_spare = std::mem::replace(&mut cache.spare[class], full);
                if old_spare.len > 0 {
                    depot::put(class, old_spare);
                }
            }
            // SAFETY: per the contract.
            unsafe { cache.loaded[class].push(block) };
        });
        match cached {
            Some(()) => None,
            None => Some(block),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_and_skip_large_or_overaligned() {
        assert_eq!(class_of(Layout::from_size_align(1, 1).unwrap()), Some(0));
        assert_eq!(class_of(Layout::from_size_align(64, 8).unwrap()), Some(0));
        assert_eq!(class_of(Layout::from_size_align(65, 8).unwrap()), Some(1));
        assert_eq!(
            class_of(Layout::from_size_align(MAX_SIZE, 16).unwrap()),
            Some(CLASSES - 1)
        );
        assert_eq!(
            class_of(Layout::from_size_align(MAX_SIZE + 1, 8).unwrap()),
            None
        );
        assert_eq!(class_of(Layout::from_size_align(64, 32).unwrap()), None);
        for class in 0..CLASSES {
            assert!(block_layout(class).size() >= GRANULE);
            assert_eq!(block_layout(class).align(), ALIGN);
        }
    }

    /// Blocks come back on this thread, and freeing more than two magazines on one
    /// thread moves full ones to the depot, where another thread picks them up. The
    /// class used (448 bytes) is one no task of the test suite has, so other tests
    /// running at once do not take these magazines.
    #[test]
    fn blocks_recycle_on_a_thread_and_through_the_depot() {
        let layout = Layout::from_size_align(440, 8).unwrap();
        let class = class_of(layout).unwrap();
        // SAFETY: every block is freed below with the same layout, written only
        // within its size.
        unsafe {
            let a = alloc(layout);
            a.as_ptr().write_bytes(0xA5, layout.size());
            free(a, layout);
            let b = alloc(layout);
            assert_eq!(a, b, "a freed block is reused by the same thread");
            free(b, layout);

            // Counted offers, not the depot's length: tests running beside this one
            // take from the depot and fill it (a CI run saw the length not grow).
            let before = depot::puts(class);
            let blocks: Vec<_> = (0..3 * BATCH + 1).map(|_| alloc(layout)).collect();
            for &b in &blocks {
                b.as_ptr().write_bytes(0x5A, layout.size());
            }
            let addrs: std::collections::HashSet<usize> =
                blocks.iter().map(|b| b.as_ptr() as usize).collect();
            assert_eq!(addrs.len(), blocks.len(), "live blocks are distinct");
            for b in blocks {
                free(b, layout);
            }
            assert!(
                depot::puts(class) > before,
                "full magazines reach the depot"
            );

            // Another thread allocates from the depot and frees what it took; its
            // exit returns full magazines.
            let got = std::thread::spawn(move || {
                let mine: Vec<_> = (0..BATCH).map(|_| alloc(layout)).collect();
                let from_here = mine
                    .iter()
                    .filter(|b| addrs.contains(&(b.as_ptr() as usize)))
                    .count();
                for b in mine {
                    free(b, layout);
                }
                from_here
            })
            .join()
            .unwrap();
            assert!(got > 0, "a depot magazine served another thread");
        }
    }

    /// Tasks of every kind of cell (cached classes, too large, over-aligned) spawned on
    /// one worker, run and freed on others, joined, detached or dropped unjoined from
    /// another thread: each returns its own output with its payload intact, and each
    /// future and output is dropped exactly once.
    #[test]
    fn runtime_tasks_of_every_cell_kind_recycle_intact() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::Arc;

        struct Payload<const N: usize> {
            bytes: [u8; N],
            drops: Arc<AtomicUsize>,
        }
        impl<const N: usize> Drop for Payload<N> {
            fn drop(&mut self) {
                self.drops.fetch_add(1, SeqCst);
            }
        }
        #[repr(align(64))]
        struct Aligned(u64);

        const N: usize = 2_000;
        let rt = crate::runtime::Builder::new()
            .worker_threads(2)
            .build()
            .unwrap();
        let drops = Arc::new(AtomicUsize::new(0));

        fn payload_task<const M: usize>(
            i: usize,
            drops: &Arc<AtomicUsize>,
        ) -> impl std::future::Future<Output = Payload<M>> + Send + 'static {
            let p = Payload::<M> {
                bytes: [i as u8; M],
                drops: drops.clone(),
            };
            async move {
                crate::task::yield_now().await;
                assert!(p.bytes.iter().all(|&b| b == i as u8), "payload changed");
                p
            }
        }

        let d = drops.clone();
        let dropped_unjoined = rt
            .block_on(rt.spawn(async move {
                let mut small = Vec::new();
                let mut large = Vec::new();
                let mut aligned = Vec::new();
                for i in 0..N {
                    small.push(crate::spawn(payload_task::<40>(i, &d)));
                    large.push(crate::spawn(payload_task::<700>(i, &d)));
                    aligned.push(crate::spawn(async move {
                        let a = Aligned(i as u64);
                        crate::task::yield_now().await;
                        assert_eq!(&a as *const Aligned as usize % 64, 0);
                        a.0
                    }));
                }
                for (i, h) in small.into_iter().enumerate() {
                    let p = h.await.unwrap();
                    assert!(p.bytes.iter().all(|&b| b == i as u8));
                }
                for (i, h) in aligned.into_iter().enumerate() {
                    assert_eq!(h.await.unwrap(), i as u64);
                }
                large
            }))
            .unwrap();
        // Half the large tasks are dropped unjoined here (off the runtime), the rest
        // joined from this thread.
        for (i, h) in dropped_unjoined.into_iter().enumerate() {
            if i % 2 == 0 {
                drop(h);
            } else {
                let p = rt.block_on(h).unwrap();
                assert!(p.bytes.iter().all(|&b| b == i as u8));
            }
        }
        drop(rt);
        assert_eq!(
            drops.load(SeqCst),
            2 * N,
            "every payload dropped exactly once"
        );
    }

    /// Many threads allocating, writing, handing over and freeing blocks of one class
    /// at once never see one block twice (each live block carries its owner's mark).
    #[test]
    fn stress_cross_thread_free() {
        use std::sync::mpsc;
        let layout = Layout::from_size_align(200, 8).unwrap();
        const PER: usize = 20_000;
        let (tx, rx) = mpsc::sync_channel::<usize>(256);
        let producers: Vec<_> = (0..2u8)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        // SAFETY: freed by the consumer with the same layout.
                        let b = unsafe { alloc(layout) };
                        // SAFETY: the block is ours and `layout.size()` long.
                        unsafe { b.as_ptr().write_bytes(t, layout.size()) };
                        // Some freed here, the rest handed to the consumer.
                        if i % 3 == 0 {
                            // SAFETY: every byte is still `t`, then it is freed.
                            unsafe {
                                assert!((0..layout.size()).all(|k| *b.as_ptr().add(k) == t));
                                free(b, layout);
                            }
                        } else {
                            tx.send(b.as_ptr() as usize | usize::from(t) << 60).unwrap();
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        for word in rx {
            let t = (word >> 60) as u8;
            let p = (word & ((1 << 60) - 1)) as *mut u8;
            // SAFETY: a live block from a producer, handed over; freed once.
            unsafe {
                assert!(
                    (0..layout.size()).all(|k| *p.add(k) == t),
                    "block reused while live"
                );
                free(NonNull::new(p).unwrap(), layout);
            }
        }
        for p in producers {
            p.join().unwrap();
        }
    }
}
