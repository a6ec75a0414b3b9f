//! Stacks for fibers and worker loop stacks: one `mmap` reservation each, with a guard
//! page at the bottom, and pools so that spawning a fiber usually reuses a stack instead
//! of making three syscalls.
//!
//! A stack is exactly two kernel maps (the guard page and the rest), so about 32,000
//! stacks fit under the default `vm.max_map_count` of 65,530. Memory is reserved with
//! `MAP_NORESERVE` and only pages a fiber touches become resident; transparent huge
//! pages are turned off for stacks so a parked fiber never holds a 2 MiB page.
//!
//! Pools: each thread caches up to [`THREAD_CACHE_CAP`] stacks of the default size in
//! front of a process-wide pool of at most [`SHARED_POOL_CAP`] stacks of any size.
//! Stacks that fit in neither are unmapped.
//!
//! (Over 600 lines with its unit tests; the code is under 550.)

use std::io;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use corosensei::stack::StackPointer;

pub(crate) mod error;
pub(crate) mod overflow;

use crate::base::Mutex;
use error::SpawnError;

/// The stack size of a fiber unless its builder or `WEFT_STACK_SIZE` says otherwise.
pub(crate) const DEFAULT_STACK_SIZE: usize = 2 * 1024 * 1024;
/// The smallest stack handed out: smaller requests are rounded up to it. A panic
/// needs room to format and unwind, and with `RUST_BACKTRACE` set to print its
/// backtrace, which overflowed 16 KiB (found in review: a panicking fiber of the old
/// minimum aborted the process instead of returning its panic). Only touched pages
/// are resident, so a larger minimum costs address space.
pub(crate) const MIN_STACK_SIZE: usize = 64 * 1024;
/// The largest stack size accepted; larger requests are an error
/// ([`SpawnErrorKind::StackSize`](super::error::SpawnErrorKind::StackSize)).
pub(crate) const MAX_STACK_SIZE: usize = 1 << 30;
/// Kernel maps per stack: the guard page and the usable range.
pub(crate) const MAPS_PER_STACK: usize = 2;

/// Default-sized stacks each thread keeps for itself.
#[cfg(not(loom))]
const THREAD_CACHE_CAP: usize = 16;
/// Stacks of all sizes the process-wide pool keeps.
const SHARED_POOL_CAP: usize = 256;
/// An `ENOMEM` with the map count this close to `vm.max_map_count` is blamed on the
/// limit: other threads map and unmap concurrently, so exact equality is not expected.
const MAP_LIMIT_SLACK: usize = 64;

const _: () = assert!(MIN_STACK_SIZE >= corosensei::stack::MIN_STACK_SIZE);

// Diagnostic counters only (nothing synchronises through them), so plain std atomics
// with relaxed ordering; loom atomics would only widen loom's search.
static MAPPED: AtomicUsize = AtomicUsize::new(0);
static RESERVED: AtomicU64 = AtomicU64::new(0);
static POOLED: AtomicUsize = AtomicUsize::new(0);

/// The system page size (a power of two, so a multiple of the stack alignment).
pub(crate) use crate::base::page::size as page_size;

/// `size` raised to [`MIN_STACK_SIZE`] and rounded up to whole pages, or `None` when it
/// is above [`MAX_STACK_SIZE`].
pub(crate) fn round_size(size: usize) -> Option<usize> {
    // MAX_STACK_SIZE is a whole number of pages, so rounding cannot leave the range.
    (size <= MAX_STACK_SIZE).then(|| size.max(MIN_STACK_SIZE).next_multiple_of(page_size()))
}

/// The stack size of fibers whose builder does not set one: `WEFT_STACK_SIZE` (read
/// once; a malformed value is reported on stderr and ignored), else
/// [`DEFAULT_STACK_SIZE`]. Always a valid, rounded size.
pub(crate) fn default_size() -> usize {
    static SIZE: OnceLock<usize> = OnceLock::new();
    *SIZE.get_or_init(|| {
        let requested = size_from_env().unwrap_or(DEFAULT_STACK_SIZE);
        round_size(requested).expect("parse_size checks the range")
    })
}

/// `WEFT_STACK_SIZE` in bytes, or `None` (unset, or malformed and reported).
fn size_from_env() -> Option<usize> {
    let raw = crate::base::env_var("WEFT_STACK_SIZE")?;
    match parse_size(&raw) {
        Ok(bytes) => Some(bytes),
        Err(why) => {
            eprintln!("weft: ignoring WEFT_STACK_SIZE={raw:?}: {why}");
            None
        }
    }
}

/// A size in bytes with an optional `K`/`KiB`/`M`/`MiB`/`G`/`GiB` suffix (powers of
/// 1024, any case): `65536`, `256K`, `8 MiB`. Between 1 byte and [`MAX_STACK_SIZE`];
/// the caller rounds it.
fn parse_size(raw: &str) -> Result<usize, String> {
    const EXPECTED: &str = "expected a number of bytes with an optional K, M or G suffix \
                            (like 256K or 8M)";
    let raw = raw.trim();
    let (digits, suffix) =
        raw.split_at(raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len()));
    let unit: usize = match suffix.trim().to_ascii_lowercase().as_str() {
        "" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(EXPECTED.into()),
    };
    if digits.is_empty() {
        return Err(EXPECTED.into());
    }
    // A number too long for usize is as out of range as one that overflows when scaled.
    let bytes = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit));
    match bytes {
        Some(0) => Err("a stack size must be above 0".into()),
        Some(bytes) if bytes <= MAX_STACK_SIZE => Ok(bytes),
        _ => Err(format!(
            "the largest fiber stack size is {MAX_STACK_SIZE} bytes (1G)"
        )),
    }
}

/// Maps `len` bytes (whole pages, more than one) of private anonymous read-write memory,
/// with `flags` added to `MAP_PRIVATE | MAP_ANONYMOUS`, and turns its lowest page into a
/// `PROT_NONE` guard. The caller owns the mapping and unmaps it with `munmap`; on an
/// error nothing stays mapped. (Fiber stacks and the alternate signal stacks of
/// [`overflow`](super::overflow) are made this way.)
pub(crate) fn map_guarded(len: usize, flags: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: a new private anonymous mapping at an address the kernel picks; it cannot
    // overlap any memory that already exists.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the first page of the mapping made above; nothing points into it yet.
    if unsafe { libc::mprotect(raw, page_size(), libc::PROT_NONE) } != 0 {
        // At the map limit it is this call that fails: the split adds the second map.
        let err = io::Error::last_os_error();
        // SAFETY: the mapping made above, which nothing refers to.
        unsafe { libc::munmap(raw, len) };
        return Err(err);
    }
    Ok(NonNull::new(raw.cast::<u8>()).expect("mmap never maps page 0 unasked"))
}

/// One fiber stack: a private anonymous mapping whose lowest page is a `PROT_NONE`
/// guard, and whose other pages are readable and writable.
pub(crate) struct Stack {
    /// The lowest address of the mapping, where the guard page starts.
    low: NonNull<u8>,
    /// Bytes above the guard page; a whole number of pages.
    usable: usize,
    /// One past the highest address (`low` plus the whole mapping), kept because
    /// corosensei asks for it on every resume.
    top: StackPointer,
}

// SAFETY: a Stack is the sole owner of its mapping, which is plain memory with no tie to
// the thread that mapped it; moving the owner to another thread is like moving a Box.
// (Whoever runs code on it holds it by value or `&mut`, so it is never shared.)
unsafe impl Send for Stack {}

impl Stack {
    /// Maps a stack of `usable` bytes (already rounded) plus its guard page.
    fn map(usable: usize) -> Result<Stack, SpawnError> {
        let len = usable + page_size();
        let low = map_guarded(len, libc::MAP_NORESERVE).map_err(|e| map_error(len, e))?;
        MAPPED.fetch_add(1, Relaxed);
        RESERVED.fetch_add(len as u64, Relaxed);
        // From here on, dropping `stack` unmaps it (and undoes the counts).
        let top = low
            .addr()
            .checked_add(len)
            .expect("a mapping does not wrap around the address space");
        let stack = Stack { low, usable, top };

        // Without this, with THP set to `always` the kernel may back the top of a
        // stack with a 2 MiB page on the first touch. Failure (no THP in this
        // kernel) costs nothing, so it is ignored.
        // SAFETY: the range is exactly the mapping made above, which `stack` owns.
        unsafe { libc::madvise(low.as_ptr().cast(), len, libc::MADV_NOHUGEPAGE) };
        Ok(stack)
    }

    /// Bytes a fiber can use: the stack's size, guard page excluded.
    pub(crate) fn usable_size(&self) -> usize {
        self.usable
    }

    /// The guard page as `(start, end)` addresses: a fault in here is an overflow.
    pub(crate) fn guard_range(&self) -> (usize, usize) {
        let start = self.low.as_ptr() as usize;
        (start, start + page_size())
    }

    /// Address space the stack takes, guard page included.
    pub(crate) fn reserved_bytes(&self) -> usize {
        self.usable + page_size()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let len = self.reserved_bytes();
        // SAFETY: `low..low + len` is the mapping this Stack owns; nothing runs on it
        // (a coroutine owns or mutably borrows its stack while it can run), and
        // nothing else refers to it.
        let rc = unsafe { libc::munmap(self.low.as_ptr().cast(), len) };
        debug_assert_eq!(rc, 0, "munmap: {}", io::Error::last_os_error());
        MAPPED.fetch_sub(1, Relaxed);
        RESERVED.fetch_sub(len as u64, Relaxed);
    }
}

// SAFETY: `limit()..base()` is a mapping this Stack owns for as long as it exists. Its
// lowest page is PROT_NONE, so an overflow faults instead of corrupting memory, and it
// has at least MIN_STACK_SIZE (checked above to exceed corosensei's minimum) usable
// bytes. Both ends are page-aligned, and pages are multiples of STACK_ALIGNMENT.
unsafe impl corosensei::stack::Stack for Stack {
    #[inline]
    fn base(&self) -> StackPointer {
        self.top
    }

    fn limit(&self) -> StackPointer {
        self.low.addr()
    }
}

/// Turns an `mmap`/`mprotect` failure for a mapping of `bytes` into a [`SpawnError`],
/// blaming `vm.max_map_count` when the process is at it.
fn map_error(bytes: usize, err: io::Error) -> SpawnError {
    if err.raw_os_error() == Some(libc::ENOMEM) {
        if let (Some(limit), Some(maps)) = (max_map_count(), map_count()) {
            if near_map_limit(limit, maps) {
                return SpawnError::map_limit(limit);
            }
        }
    }
    SpawnError::out_of_memory(bytes, err)
}

fn near_map_limit(limit: usize, maps: usize) -> bool {
    maps.saturating_add(MAP_LIMIT_SLACK) >= limit
}

/// `vm.max_map_count`, if readable.
fn max_map_count() -> Option<usize> {
    use std::io::Read;
    // A stack buffer: this runs when memory is short, possibly on a small fiber stack.
    let mut buf = [0u8; 32];
    let n = std::fs::File::open("/proc/sys/vm/max_map_count")
        .and_then(|mut f| f.read(&mut buf))
        .ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// How many maps this process has: the lines of `/proc/self/maps`.
fn map_count() -> Option<usize> {
    use std::io::Read;
    let mut file = std::fs::File::open("/proc/self/maps").ok()?;
    let mut buf = [0u8; 1024];
    let mut lines = 0;
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Some(lines),
            Ok(n) => lines += buf[..n].iter().filter(|&&b| b == b'\n').count(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Fibers created and not yet dropped, in the whole process (counted by the fiber
/// layer; kept here, with the stacks, for the statistics of the layers between).
pub(crate) static LIVE_FIBERS: AtomicUsize = AtomicUsize::new(0);

/// Process-wide fiber statistics (also part of [`Stats`](crate::Stats) and of the
/// `WEFT_STATS=1` report).
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// weft::fiber::spawn(|| ()).join().unwrap();
/// let s = weft::fiber::stats();
/// assert!(s.stack_bytes_reserved >= s.pooled_stacks as u64 * 64 * 1024);
/// # drop(rt);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FiberStats {
    /// Fibers spawned and not yet finished (or dropped).
    pub live_fibers: usize,
    /// Stacks of finished fibers kept for reuse.
    pub pooled_stacks: usize,
    /// Address space reserved by all fiber stacks, live and pooled.
    pub stack_bytes_reserved: u64,
}

/// A snapshot of [`FiberStats`].
///
/// ```
/// let s = weft::fiber::stats();
/// println!("{} live fibers", s.live_fibers);
/// ```
pub fn fiber_stats() -> FiberStats {
    let st = stats();
    FiberStats {
        live_fibers: LIVE_FIBERS.load(Relaxed),
        pooled_stacks: st.pooled,
        stack_bytes_reserved: st.reserved_bytes,
    }
}

/// A stack of `size` bytes (rounded up to [`MIN_STACK_SIZE`] and whole pages): a
/// pooled one of exactly that size if there is one, else a newly mapped one.
///
/// Fails with `StackSize` above [`MAX_STACK_SIZE`], and with `MapLimit` or
/// `OutOfMemory` when the kernel refuses the mapping.
pub(crate) fn acquire(size: usize) -> Result<Stack, SpawnError> {
    let size = round_size(size).ok_or_else(|| SpawnError::stack_size(size))?;
    match take_pooled(size) {
        Some(stack) => Ok(stack),
        None => Stack::map(size),
    }
}

/// Gives `stack` back for reuse; it is unmapped if the pools are full.
///
/// Contract: the stack is quiescent. Nothing executes on it any more and nothing
/// points into it: the coroutine that ran on it has finished, or was dropped (which
/// unwinds it), or never started. Holding the `Stack` by value normally proves this,
/// since a coroutine owns its stack for as long as it can run. The next fiber sees
/// whatever the last one left in the memory.
pub(crate) fn release(stack: Stack) {
    #[cfg(not(loom))]
    let Some(stack) = thread_cache::put(stack) else {
        return;
    };
    put_shared(stack);
}

/// What the stacks are doing, for diagnostics. Counters are read one at a time, so
/// under concurrent use they need not add up exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StackStats {
    /// Stacks sitting in the pools, thread caches included.
    pub(crate) pooled: usize,
    /// Address space reserved by all mapped stacks (live and pooled), guard pages
    /// included.
    pub(crate) reserved_bytes: u64,
    /// Stacks currently mapped, live and pooled.
    pub(crate) mapped: usize,
}

pub(crate) fn stats() -> StackStats {
    StackStats {
        pooled: POOLED.load(Relaxed),
        reserved_bytes: RESERVED.load(Relaxed),
        mapped: MAPPED.load(Relaxed),
    }
}

fn take_pooled(size: usize) -> Option<Stack> {
    #[cfg(not(loom))]
    if size == default_size() {
        if let Some(stack) = thread_cache::take() {
            return Some(stack);
        }
    }
    let stack = shared().lock().take(size)?;
    POOLED.fetch_sub(1, Relaxed);
    Some(stack)
}

fn put_shared(stack: Stack) {
    let rejected = shared().lock().put(stack);
    match rejected {
        // Unmapped here, after the lock is released.
        Some(stack) => drop(stack),
        None => {
            POOLED.fetch_add(1, Relaxed);
        }
    }
}

/// The process-wide pool: stacks grouped by size.
struct SharedPool {
    /// `(size, stacks of that size)`; buckets are removed when they empty, so there
    /// are never more buckets than pooled stacks.
    buckets: Vec<(usize, Vec<Stack>)>,
    /// Stacks in all buckets.
    len: usize,
}

impl SharedPool {
    fn new() -> SharedPool {
        SharedPool {
            buckets: Vec::new(),
            len: 0,
        }
    }

    fn take(&mut self, size: usize) -> Option<Stack> {
        let i = self.buckets.iter().position(|(s, _)| *s == size)?;
        let stacks = &mut self.buckets[i].1;
        let stack = stacks.pop().expect("buckets are never empty");
        if stacks.is_empty() {
            self.buckets.swap_remove(i);
        }
        self.len -= 1;
        Some(stack)
    }

    /// Keeps `stack`, or hands it back when the pool is full.
    fn put(&mut self, stack: Stack) -> Option<Stack> {
        if self.len >= SHARED_POOL_CAP {
            return Some(stack);
        }
        let size = stack.usable_size();
        match self.buckets.iter_mut().find(|(s, _)| *s == size) {
            Some((_, stacks)) => stacks.push(stack),
            None => self.buckets.push((size, vec![stack])),
        }
        self.len += 1;
        None
    }
}

/// Only loom drops the pool (its lazy statics live for one model run); the stacks are
/// unmapped with it and must leave the count too.
impl Drop for SharedPool {
    fn drop(&mut self) {
        POOLED.fetch_sub(self.len, Relaxed);
    }
}

#[cfg(not(loom))]
fn shared() -> &'static Mutex<SharedPool> {
    static POOL: OnceLock<Mutex<SharedPool>> = OnceLock::new();
    POOL.get_or_init(|| Mutex::new(SharedPool::new()))
}

#[cfg(loom)]
fn shared() -> &'static Mutex<SharedPool> {
    // Loom's mutex must be created inside each model run; its lazy statics are.
    loom::lazy_static! {
        static ref POOL: Mutex<SharedPool> = Mutex::new(SharedPool::new());
    }
    &POOL
}

/// Each thread's cache of default-sized stacks, so a fiber spawned and finished on the
/// same worker takes no lock. Not under loom: its threads share one OS thread.
#[cfg(not(loom))]
mod thread_cache {
    use std::cell::RefCell;
    use std::sync::atomic::Ordering::Relaxed;

    use super::{default_size, put_shared, Stack, POOLED, THREAD_CACHE_CAP};

    /// On thread exit the cached stacks go to the shared pool (or are unmapped).
    struct Cache(RefCell<Vec<Stack>>);

    impl Drop for Cache {
        fn drop(&mut self) {
            for stack in self.0.get_mut().drain(..) {
                POOLED.fetch_sub(1, Relaxed);
                put_shared(stack);
            }
        }
    }

    thread_local! {
        static CACHE: Cache = const { Cache(RefCell::new(Vec::new())) };
    }

    /// A cached stack; they all have the default size.
    // Both never inlined: they read a thread-local (see
    // `scheduler::worker::current_cell`).
    #[inline(never)]
    pub(super) fn take() -> Option<Stack> {
        // `try_with` fails only while the thread is exiting: then there is no cache.
        let stack = CACHE.try_with(|c| c.0.borrow_mut().pop()).ok()??;
        POOLED.fetch_sub(1, Relaxed);
        Some(stack)
    }

    /// Caches `stack` if it has the default size and there is room, else hands it
    /// back.
    #[inline(never)]
    pub(super) fn put(stack: Stack) -> Option<Stack> {
        if stack.usable_size() != default_size() {
            return Some(stack);
        }
        let mut stack = Some(stack);
        let _ = CACHE.try_with(|c| {
            let mut cache = c.0.borrow_mut();
            if cache.len() < THREAD_CACHE_CAP {
                cache.extend(stack.take());
                POOLED.fetch_add(1, Relaxed);
            }
        });
        stack
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use corosensei::stack::{Stack as _, STACK_ALIGNMENT};

    use super::*;
    use crate::stack::error::SpawnErrorKind;
    use crate::stack::overflow::tests::{assert_passed, is_child, run_child, test_path};

    /// A size no other test uses, so the shared pool's bucket for it is this test's.
    fn unusual_size() -> usize {
        MIN_STACK_SIZE + 7 * page_size()
    }

    #[test]
    fn sizes_round_up_to_the_minimum_and_whole_pages() {
        let page = page_size();
        assert_eq!(round_size(0), Some(MIN_STACK_SIZE));
        assert_eq!(round_size(1), Some(MIN_STACK_SIZE));
        assert_eq!(round_size(MIN_STACK_SIZE), Some(MIN_STACK_SIZE));
        assert_eq!(round_size(MIN_STACK_SIZE + 1), Some(MIN_STACK_SIZE + page));
        assert_eq!(round_size(DEFAULT_STACK_SIZE), Some(DEFAULT_STACK_SIZE));
        assert_eq!(round_size(MAX_STACK_SIZE), Some(MAX_STACK_SIZE));
        assert_eq!(round_size(MAX_STACK_SIZE + 1), None);

        let s = acquire(1).unwrap();
        assert_eq!(s.usable_size(), MIN_STACK_SIZE);
        assert_eq!(s.reserved_bytes(), MIN_STACK_SIZE + page);
        let s = acquire(100_000).unwrap();
        assert_eq!(s.usable_size(), 100_000usize.next_multiple_of(page));
        // The largest size is only reserved address space, so it is cheap to map.
        let s = acquire(MAX_STACK_SIZE).unwrap();
        assert_eq!(s.usable_size(), MAX_STACK_SIZE);
    }

    #[test]
    fn oversized_requests_are_errors() {
        for size in [MAX_STACK_SIZE + 1, usize::MAX] {
            let e = acquire(size).err().expect("too large");
            assert_eq!(e.kind(), SpawnErrorKind::StackSize);
            assert!(e.to_string().contains(&size.to_string()), "{e}");
        }
    }

    #[test]
    fn released_default_stack_is_reused_by_its_thread() {
        // A fresh thread starts with an empty cache, whatever other tests do.
        std::thread::spawn(|| {
            let a = acquire(default_size()).unwrap();
            let addr = a.limit();
            release(a);
            let b = acquire(default_size()).unwrap();
            assert_eq!(b.limit(), addr, "the thread cache hands the stack back");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn released_stack_of_another_size_is_reused_through_the_shared_pool() {
        let a = acquire(unusual_size()).unwrap();
        let addr = a.limit();
        release(a);
        // Another thread: this size never goes through a thread cache anyway.
        let b = std::thread::spawn(|| acquire(unusual_size()).unwrap().limit())
            .join()
            .unwrap();
        assert_eq!(b, addr);
    }

    /// Stats are process-wide, so this runs alone in a child process where nothing
    /// else moves them.
    #[test]
    fn stats_follow_acquire_release_and_thread_exit() {
        let name = test_path(
            module_path!(),
            "stats_follow_acquire_release_and_thread_exit",
        );
        if !is_child(&name) {
            assert_passed(&run_child(&name));
            return;
        }
        let size = default_size();
        let bytes = (size + page_size()) as u64;
        let before = stats();
        assert_eq!(before.pooled, 0, "nothing else runs in this process");

        let a = acquire(size).unwrap();
        let s = stats();
        assert_eq!(s.mapped, before.mapped + 1);
        assert_eq!(s.reserved_bytes, before.reserved_bytes + bytes);
        assert_eq!(s.pooled, before.pooled);

        release(a);
        assert_eq!(stats().pooled, before.pooled + 1);
        assert_eq!(
            stats().mapped,
            before.mapped + 1,
            "pooled stacks stay mapped"
        );
        let a = acquire(size).unwrap();
        assert_eq!(stats().pooled, before.pooled);
        assert_eq!(stats().mapped, before.mapped + 1, "reused, not mapped");

        // A thread's cached stacks move to the shared pool when it exits, and are
        // handed out to other threads from there.
        let addr = std::thread::spawn(move || {
            let addr = a.limit();
            release(a);
            addr
        })
        .join()
        .unwrap();
        assert_eq!(stats().pooled, before.pooled + 1);
        let a = acquire(size).unwrap();
        assert_eq!(a.limit(), addr);
        assert_eq!(stats().pooled, before.pooled);

        drop(a);
        assert_eq!(stats(), before);

        // Beyond the caps, released stacks are unmapped.
        let many: Vec<Stack> = (0..THREAD_CACHE_CAP + SHARED_POOL_CAP + 10)
            .map(|_| acquire(size).unwrap())
            .collect();
        many.into_iter().for_each(release);
        let s = stats();
        assert_eq!(s.pooled, THREAD_CACHE_CAP + SHARED_POOL_CAP);
        assert_eq!(s.mapped, before.mapped + THREAD_CACHE_CAP + SHARED_POOL_CAP);
    }

    /// The maps covering `[start, end)` in `/proc/self/maps`: `(start, end, perms,
    /// VmFlags from smaps)`.
    fn maps_in(start: usize, end: usize) -> Vec<(usize, usize, String, String)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut found: Vec<(usize, usize, String, String)> = Vec::new();
        for line in smaps.lines() {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                if let Some(last) = found.last_mut() {
                    if last.3.is_empty() {
                        last.3 = flags.trim().to_owned();
                    }
                }
                continue;
            }
            // Map header lines look like `7f12...-7f13... rw-p 00000000 00:00 0`.
            let mut fields = line.split_whitespace();
            let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
                continue;
            };
            let Some((lo, hi)) = range.split_once('-') else {
                continue;
            };
            let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            else {
                continue;
            };
            if lo < end && hi > start {
                found.push((lo, hi, perms.to_owned(), String::new()));
            }
        }
        found
    }

    #[test]
    fn stack_is_writable_and_has_exactly_one_guard_page() {
        let page = page_size();
        let stack = acquire(DEFAULT_STACK_SIZE).unwrap();
        let (limit, base) = (stack.limit().get(), stack.base().get());
        assert_eq!(limit % STACK_ALIGNMENT, 0);
        assert_eq!(base % STACK_ALIGNMENT, 0);
        assert_eq!(base - limit, stack.reserved_bytes());
        assert_eq!(stack.guard_range(), (limit, limit + page));

        let usable = (limit + page) as *mut u8;
        // SAFETY: `usable..base` is the writable part of a mapping the test owns
        // through `stack`, and nothing else uses it.
        unsafe {
            ptr::write_bytes(usable, 0xa5, stack.usable_size());
            assert_eq!(*usable, 0xa5);
            assert_eq!(*usable.add(stack.usable_size() - 1), 0xa5);
        }

        let maps = maps_in(limit, base);
        assert_eq!(maps.len(), MAPS_PER_STACK, "{maps:?}");
        let (guard, rest) = (&maps[0], &maps[1]);
        assert_eq!(
            (guard.0, guard.1, guard.2.as_str()),
            (limit, limit + page, "---p")
        );
        assert_eq!(rest.0, limit + page);
        assert!(rest.1 >= base, "{maps:?}");
        assert_eq!(rest.2, "rw-p");
        // `nh`: MADV_NOHUGEPAGE, on both parts.
        for map in &maps {
            assert!(map.3.split_whitespace().any(|f| f == "nh"), "{maps:?}");
        }
    }

    #[test]
    fn parse_size_accepts_suffixes_and_rejects_junk() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size(" 1 "), Ok(1));
        assert_eq!(parse_size("256K"), Ok(256 << 10));
        assert_eq!(parse_size("256k"), Ok(256 << 10));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("64 kib"), Ok(64 << 10));
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("8mib"), Ok(8 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        for bad in [
            "", "K", "abc", "-1", "+5", "1.5M", "8MB", "8 M B", "0", "0K",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        for too_big in ["2G", "1073741825", "99999999999999999999999", "9999999999G"] {
            let why = parse_size(too_big).unwrap_err();
            assert!(why.contains("largest"), "{too_big:?}: {why}");
        }
    }

    #[test]
    fn enomem_is_blamed_on_the_map_limit_only_near_it() {
        assert!(near_map_limit(65530, 65530));
        assert!(near_map_limit(65530, 65500));
        assert!(!near_map_limit(65530, 60000));
        assert!(max_map_count().is_some_and(|n| n > 0));
        assert!(map_count().is_some_and(|n| n > 0));
    }

    /// Maps stacks until the kernel says no; the error must be `MapLimit`. Runs in a
    /// child process: the parent must not be left at the limit.
    #[test]
    fn running_out_of_maps_is_map_limit() {
        let name = test_path(module_path!(), "running_out_of_maps_is_map_limit");
        if !is_child(&name) {
            assert_passed(&run_child(&name));
            return;
        }
        let limit = max_map_count().unwrap();
        if limit > 300_000 {
            eprintln!("skipped: vm.max_map_count = {limit} would take too long to reach");
            return;
        }
        // Reserved up front: growing this Vec near the limit could need a new map.
        let mut stacks = Vec::with_capacity(limit / MAPS_PER_STACK + 1);
        let err = loop {
            match Stack::map(MIN_STACK_SIZE) {
                Ok(s) => stacks.push(s),
                Err(e) => break e,
            }
            assert!(
                stacks.len() <= limit / MAPS_PER_STACK,
                "no error at the limit"
            );
        };
        let mapped = stacks.len();
        drop(stacks);
        assert_eq!(err.kind(), SpawnErrorKind::MapLimit, "{err}");
        assert!(
            mapped > limit / MAPS_PER_STACK - 1000,
            "only {mapped} stacks"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("vm.max_map_count = {limit}")),
            "{msg}"
        );
    }

    /// With the address space limited, a large stack is `OutOfMemory` with the OS
    /// error as its source. In a child process because the limit is process-wide.
    #[test]
    fn running_out_of_address_space_is_out_of_memory() {
        let name = test_path(
            module_path!(),
            "running_out_of_address_space_is_out_of_memory",
        );
        if !is_child(&name) {
            assert_passed(&run_child(&name));
            return;
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        // Room for the test itself, not for a 1 GiB stack.
        let cap = (vm_kib * 1024 + (256 << 20)) as libc::rlim_t;
        let lim = libc::rlimit {
            rlim_cur: cap,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: setrlimit reads the struct it is given; lowering RLIMIT_AS in this
        // child process affects nothing else.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);

        let err = acquire(MAX_STACK_SIZE).err().expect("1 GiB does not fit");
        assert_eq!(err.kind(), SpawnErrorKind::OutOfMemory, "{err}");
        let source = std::error::Error::source(&err).expect("the OS error");
        let source = source.downcast_ref::<io::Error>().unwrap();
        assert_eq!(source.raw_os_error(), Some(libc::ENOMEM));
        assert!(err.to_string().contains("out of memory"), "{err}");
    }
}
