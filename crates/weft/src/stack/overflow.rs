//! Stack-overflow reports for fibers and worker loop stacks.
//!
//! A fiber that overflows its stack touches the stack's guard page and gets `SIGSEGV`
//! (or `SIGBUS`). Without help that is a bare "Segmentation fault", or worse, nothing
//! useful at all. [`install`] puts a handler in front of whatever handled those signals
//! before: when the faulting address is in the guard page of the fiber running on the
//! faulting thread, it says so on stderr, with the fix, and aborts; any other fault is
//! passed on to the previous handler unchanged.
//!
//! The handler runs on the thread's alternate signal stack (the fiber's own stack is
//! exhausted); [`ensure_altstack`] makes sure there is one. Which fiber is running is
//! recorded by [`enter`], around every resume of a fiber.
//!
//! Everything the handler touches is async-signal-safe: a const-initialised
//! thread-local without a destructor, atomics, `write(2)`, `sigaction(2)` and `abort`.
//!
//! (Over 600 lines with its tests, which run in child processes; the code is under
//! 450.)

use std::cell::Cell;
use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use super::{map_guarded, page_size};

/// How much of a fiber's name the report keeps.
const NAME_CAP: usize = 64;
/// The smallest alternate signal stack [`ensure_altstack`] installs: the handler
/// needs little, but the kernel's signal frame grows with the CPU's register state.
const MIN_ALTSTACK: usize = 64 * 1024;

/// The fiber running on this thread, as the signal handler needs it.
#[derive(Clone, Copy)]
pub(crate) struct Frame {
    /// `[start, end)` of its guard page; `(0, 0)` when no fiber runs.
    guard: (usize, usize),
    stack_size: usize,
    id: u64,
    /// The first `name_len` bytes of the name, cut at a character boundary. Copied,
    /// not borrowed, so that the handler finds everything in the frame itself and
    /// follows no second pointer. The frame, though, is read through a raw pointer:
    /// it lives in the fiber's context, which stays put while the fiber is current.
    name: [u8; NAME_CAP],
    name_len: usize,
    named: bool,
    truncated: bool,
    /// A worker's loop stack (`scheduler::stacks`), not a fiber's.
    loop_stack: bool,
}

impl Frame {
    pub(crate) const NONE: Frame = Frame {
        guard: (0, 0),
        stack_size: 0,
        id: 0,
        name: [0; NAME_CAP],
        name_len: 0,
        named: false,
        truncated: false,
        loop_stack: false,
    };

    /// What the handler reports about a worker loop stack (`scheduler::stacks`) whose
    /// guard page is `guard` and usable size `stack_size`.
    pub(crate) fn loop_stack(guard: (usize, usize), stack_size: usize) -> Frame {
        Frame {
            guard,
            stack_size,
            loop_stack: true,
            ..Frame::NONE
        }
    }
}

impl Frame {
    /// What the handler needs to report an overflow of fiber `id` (named `name`, with a
    /// stack of `stack_size` usable bytes whose guard page is `guard`, as from
    /// `Stack::guard_range`). Up to 64 bytes of the name are copied, cut at a character
    /// boundary. Built once per fiber; [`enter`] then only swaps a pointer.
    pub(crate) fn new(
        guard: (usize, usize),
        stack_size: usize,
        id: u64,
        name: Option<&str>,
    ) -> Frame {
        let mut frame = Frame {
            guard,
            stack_size,
            id,
            named: name.is_some(),
            ..Frame::NONE
        };
        if let Some(name) = name {
            let mut len = name.len().min(NAME_CAP);
            while !name.is_char_boundary(len) {
                len -= 1;
            }
            frame.name[..len].copy_from_slice(&name.as_bytes()[..len]);
            frame.name_len = len;
            frame.truncated = len < name.len();
        }
        frame
    }
}

/// A signal's action before [`install`] replaced it: the handler address (or
/// `SIG_DFL`/`SIG_IGN`) and its `sa_flags`. Atomics, because the handler reads them.
struct Previous {
    handler: AtomicUsize,
    flags: AtomicUsize,
}

static PREV_SEGV: Previous = Previous {
    handler: AtomicUsize::new(libc::SIG_DFL),
    flags: AtomicUsize::new(0),
};
static PREV_BUS: Previous = Previous {
    handler: AtomicUsize::new(libc::SIG_DFL),
    flags: AtomicUsize::new(0),
};

/// Installs the overflow handler for `SIGSEGV` and `SIGBUS`, once per process; other
/// faults go on to the handlers that were there before (Rust's own, for one).
pub(crate) fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        install_for(libc::SIGSEGV, &PREV_SEGV);
        install_for(libc::SIGBUS, &PREV_BUS);
    });
}

fn install_for(sig: c_int, prev: &Previous) {
    // SAFETY: sigaction is a plain C struct; all zeroes is SIG_DFL with no flags.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `old`.
    if unsafe { libc::sigaction(sig, ptr::null(), &mut old) } != 0 {
        return;
    }
    // Saved before our handler goes in, so it never sees them unset. (Between the
    // two sigaction calls another thread could change the action; nothing in weft
    // does, and std installs its handler before main.)
    prev.flags.store(old.sa_flags as usize, Ordering::Relaxed);
    prev.handler.store(old.sa_sigaction, Ordering::Release);

    // SAFETY: as above.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    let handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = on_fault;
    new.sa_sigaction = handler as usize;
    // On the alternate stack: the faulting stack has no room left.
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: `new.sa_mask` is a valid sigset_t to initialise.
    unsafe { libc::sigemptyset(&mut new.sa_mask) };
    // SAFETY: `new` is fully initialised; its handler has the SA_SIGINFO signature and
    // does only async-signal-safe work.
    unsafe { libc::sigaction(sig, &new, ptr::null_mut()) };
}

extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel hands an SA_SIGINFO handler a valid siginfo_t; si_addr reads
    // the union member that fault signals fill in.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A positive si_code means the kernel raised it for a fault at `addr`; kill() and
    // friends give codes <= 0, and then si_addr holds something else.
    let fault = code > 0;
    if fault {
        let frame = crate::task::current::signal_frame().cast::<Frame>();
        // SAFETY: a non-null frame belongs to the fiber current on this thread, whose
        // context stays put while it is current (the `EnterFiber` guard is on this
        // thread's stack below us).
        let frame = unsafe { frame.as_ref() }.unwrap_or(&Frame::NONE);
        if frame.guard.0 <= addr && addr < frame.guard.1 {
            write_stderr(report(frame).as_bytes());
            // SAFETY: abort has no preconditions; it ends the process.
            unsafe { libc::abort() };
        }
    }
    // SAFETY: called from the handler for `sig` with the kernel's own arguments.
    unsafe { chain(sig, info, ctx, fault) };
}

/// Hands a signal that is not a fiber overflow to the action that was installed before.
///
/// # Safety
///
/// Only from the signal handler for `sig` (`SIGSEGV` or `SIGBUS`), with the arguments
/// the kernel passed it; `fault` says whether the kernel raised it for a memory fault.
unsafe fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, fault: bool) {
    let prev = if sig == libc::SIGBUS {
        &PREV_BUS
    } else {
        &PREV_SEGV
    };
    let handler = prev.handler.load(Ordering::Acquire);
    let flags = prev.flags.load(Ordering::Relaxed) as c_int;
    match handler {
        // An ignored signal sent by kill() stays ignored.
        libc::SIG_IGN if !fault => {}
        // A fault returns to the faulting instruction, which faults again, now under
        // the default action: the process dies of the signal as it would have
        // without weft. (The kernel cannot ignore a fault either.)
        libc::SIG_DFL | libc::SIG_IGN => {
            restore_default(sig);
            if !fault {
                // Sent by kill(): nothing re-raises it, so raise it again. It is
                // blocked in this handler and delivered when the handler returns.
                // SAFETY: raise is async-signal-safe and has no preconditions.
                unsafe { libc::raise(sig) };
            }
        }
        _ if flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous action was installed with SA_SIGINFO, so its
            // handler has this signature; it gets the arguments it would have had.
            let f = unsafe {
                std::mem::transmute::<usize, extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void)>(
                    handler,
                )
            };
            f(sig, info, ctx);
        }
        _ => {
            // SAFETY: without SA_SIGINFO, the previous handler takes only the signal.
            let f = unsafe { std::mem::transmute::<usize, extern "C" fn(c_int)>(handler) };
            f(sig);
        }
    }
}

/// Puts `sig` back to its default action.
fn restore_default(sig: c_int) {
    // SAFETY: all zeroes is SIG_DFL with no flags and an empty mask.
    let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `dfl` is a valid action; sigaction is async-signal-safe.
    unsafe { libc::sigaction(sig, &dfl, ptr::null_mut()) };
}

/// A message built without allocating, for the signal handler.
struct Message {
    bytes: [u8; 512],
    len: usize,
}

impl Message {
    fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }

    fn push_u64(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The report for an overflow of `frame`'s stack.
fn report(frame: &Frame) -> Message {
    let mut m = Message {
        bytes: [0; 512],
        len: 0,
    };
    if frame.loop_stack {
        m.push(b"\nweft: a task overflowed its stack, a worker loop stack of ");
        m.push_u64(frame.stack_size as u64);
        m.push(b" bytes (as large as a worker thread's own)\n");
        return m;
    }
    m.push(b"\nweft: fiber ");
    if frame.named {
        m.push(b"'");
        m.push(&frame.name[..frame.name_len]);
        if frame.truncated {
            m.push(b"...");
        }
        m.push(b"' ");
    }
    m.push(b"(id ");
    m.push_u64(frame.id);
    m.push(b") overflowed its stack of ");
    m.push_u64(frame.stack_size as u64);
    m.push(
        b" bytes; raise the size with weft::fiber::Builder::stack_size or the \
          WEFT_STACK_SIZE environment variable\n",
    );
    m
}

/// Writes all of `bytes` to stderr with `write(2)`, giving up on errors.
fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe `bytes`, which stays borrowed.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        match usize::try_from(n) {
            Ok(0) => return,
            Ok(n) => bytes = &bytes[n.min(bytes.len())..],
            Err(_) if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// An alternate signal stack this module mapped and installed for its thread.
struct AltStack {
    /// The mapping, starting with a guard page.
    low: NonNull<u8>,
    len: usize,
}

impl AltStack {
    /// Maps a stack with a guard page below it and makes it this thread's alternate
    /// signal stack.
    fn install() -> Option<AltStack> {
        let page = page_size();
        let size = libc::SIGSTKSZ.max(MIN_ALTSTACK).next_multiple_of(page);
        let len = size + page;
        // From here on, dropping `alt` unmaps the memory.
        let alt = AltStack {
            low: map_guarded(len, 0).ok()?,
            len,
        };
        let stack = libc::stack_t {
            ss_sp: alt.sp(),
            ss_flags: 0,
            ss_size: size,
        };
        // SAFETY: `stack` describes writable memory that `alt` keeps mapped until its
        // Drop, which uninstalls it first.
        if unsafe { libc::sigaltstack(&stack, ptr::null_mut()) } != 0 {
            return None;
        }
        Some(alt)
    }

    /// The usable bottom, just above the guard page.
    fn sp(&self) -> *mut c_void {
        self.low.as_ptr().wrapping_add(page_size()).cast()
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // Uninstall it if it is still this thread's alternate stack (something may have
        // replaced it since); if that fails, leak it rather than unmap a live one.
        if let Some(current) = altstack() {
            if current.ss_sp == self.sp() {
                let off = libc::stack_t {
                    ss_sp: ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                // SAFETY: disabling is always allowed unless a handler is running on
                // the stack, in which case it fails and we leak below.
                if unsafe { libc::sigaltstack(&off, ptr::null_mut()) } != 0 {
                    return;
                }
            }
        }
        // SAFETY: the mapping is this AltStack's, and it is no longer the alternate
        // stack, so no signal can be delivered onto it.
        unsafe { libc::munmap(self.low.as_ptr().cast(), self.len) };
    }
}

/// This thread's enabled alternate signal stack, if it has one.
fn altstack() -> Option<libc::stack_t> {
    // SAFETY: stack_t is a plain C struct; all zeroes is a valid value to overwrite.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: a null new stack only reads the current one into `current`.
    let rc = unsafe { libc::sigaltstack(ptr::null(), &mut current) };
    (rc == 0 && current.ss_flags & libc::SS_DISABLE == 0).then_some(current)
}

/// Gives this thread an alternate signal stack if it has none, so that the overflow
/// handler has somewhere to run. Threads that std spawned normally have one; this is
/// the safety net for the others. It is freed when the thread exits. Cheap after the
/// first call on a thread.
pub(crate) fn ensure_altstack() {
    thread_local! {
        static CHECKED: Cell<bool> = const { Cell::new(false) };
        static OURS: Cell<Option<AltStack>> = const { Cell::new(None) };
    }
    // Treat "thread-locals already destroyed" as checked: the thread is exiting.
    if CHECKED.try_with(|c| c.replace(true)).unwrap_or(true) || altstack().is_some() {
        return;
    }
    let Some(alt) = AltStack::install() else {
        return;
    };
    // If OURS is already destroyed, the closure is dropped unrun and `alt` with it,
    // which uninstalls and unmaps it again.
    let _ = OURS.try_with(move |ours| ours.set(Some(alt)));
}

/// Helpers for tests that must run in a child process (because they die of a signal,
/// change process-wide limits, or need process-wide counters to themselves).
#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Output};

    use corosensei::{Coroutine, Yielder};

    use super::*;
    use crate::stack::{acquire, MIN_STACK_SIZE};

    /// Set in a child process to the name of the test it is to run for real.
    const CHILD_VAR: &str = "WEFT_TEST_CHILD";

    /// The name libtest knows the test `f` of the module at `module_path` by.
    pub(crate) fn test_path(module_path: &str, f: &str) -> String {
        let module = module_path.split_once("::").map_or("", |(_, rest)| rest);
        format!("{module}::{f}")
    }

    /// Whether this process is the child started by [`run_child`] for `test`.
    pub(crate) fn is_child(test: &str) -> bool {
        std::env::var_os(CHILD_VAR).is_some_and(|v| v == test)
    }

    /// Runs just `test` in a new process of this test binary, as a child.
    pub(crate) fn run_child(test: &str) -> Output {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_VAR, test)
            .output()
            .unwrap()
    }

    /// Asserts that the child ran its one test and it passed.
    pub(crate) fn assert_passed(out: &Output) {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("test result: ok. 1 passed"),
            "child: {:?}\n--- stdout\n{stdout}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// For children that die of a signal on purpose: no core file.
    fn no_core_dump() {
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: setrlimit reads the struct; prctl(PR_SET_DUMPABLE, 0) takes plain
        // integers. Both only affect this child process.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &zero);
            libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong);
        }
    }

    /// Turns off this thread's alternate signal stack, like a thread std did not start.
    fn disable_altstack() {
        let off = libc::stack_t {
            ss_sp: ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        // SAFETY: no signal handler is running, so the alternate stack is not in use;
        // its owner (std) still unmaps it at thread exit.
        assert_eq!(unsafe { libc::sigaltstack(&off, ptr::null_mut()) }, 0);
    }

    fn stderr_of(out: &Output) -> String {
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn frame(name: Option<&str>) -> Frame {
        Frame::new((4096, 8192), 16384, 7, name)
    }

    #[test]
    fn report_names_the_fiber_and_the_fix() {
        let text = |f: &Frame| String::from_utf8(report(f).as_bytes().to_vec()).unwrap();
        assert_eq!(
            text(&frame(Some("parser"))),
            "\nweft: fiber 'parser' (id 7) overflowed its stack of 16384 bytes; raise the \
             size with weft::fiber::Builder::stack_size or the WEFT_STACK_SIZE environment \
             variable\n"
        );
        assert!(text(&frame(None)).starts_with("\nweft: fiber (id 7) overflowed its stack"));
        // Long names are cut at a character boundary and marked.
        let long = "é".repeat(40);
        let cut = text(&frame(Some(&long)));
        assert!(
            cut.contains(&format!("'{}...' (id 7)", "é".repeat(32))),
            "{cut}"
        );

        let mut m = report(&Frame::NONE);
        m.len = 0;
        m.push_u64(u64::MAX);
        assert_eq!(m.as_bytes(), u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn ensure_altstack_installs_one_where_there_is_none() {
        std::thread::spawn(|| {
            disable_altstack();
            assert!(altstack().is_none());
            ensure_altstack();
            let alt = altstack().expect("installed");
            assert!(alt.ss_size >= MIN_ALTSTACK);
            ensure_altstack();
            assert_eq!(altstack().unwrap().ss_sp, alt.ss_sp, "kept");
        })
        .join()
        .unwrap();
    }

    /// Recurses until the stack runs out; the local array keeps each frame real.
    #[inline(never)]
    fn recurse(depth: u64) -> u64 {
        let frame = std::hint::black_box([depth; 32]);
        if std::hint::black_box(depth) == u64::MAX {
            return frame[0];
        }
        recurse(depth + 1).wrapping_add(frame[1])
    }

    #[test]
    fn overflow_in_a_fiber_aborts_with_a_report() {
        let name = test_path(module_path!(), "overflow_in_a_fiber_aborts_with_a_report");
        if !is_child(&name) {
            let out = run_child(&name);
            let stderr = stderr_of(&out);
            assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
            assert!(
                stderr.contains(&format!(
                    "weft: fiber 'deep' (id 42) overflowed its stack of {MIN_STACK_SIZE} bytes"
                )),
                "{stderr}"
            );
            assert!(stderr.contains("WEFT_STACK_SIZE"), "{stderr}");
            return;
        }
        no_core_dump();
        install();
        // The handler must not depend on std having given this thread an alternate
        // stack: take it away and let ensure_altstack provide one.
        disable_altstack();
        ensure_altstack();
        let stack = acquire(MIN_STACK_SIZE).unwrap();
        let (guard, size) = (stack.guard_range(), stack.usable_size());
        let mut fiber = Coroutine::with_stack(stack, move |_: &Yielder<(), ()>, ()| {
            let frame = Frame::new(guard, size, 42, Some("deep"));
            // `frame` lives on this stack until the process ends.
            let _running = crate::task::current::enter_fiber(
                std::ptr::null(),
                (&frame as *const Frame).cast(),
            );
            recurse(0)
        });
        fiber.resume(());
        unreachable!("the overflow ends the process");
    }

    /// Faults at `addr`, in assembly: a faulting access is not something Rust code may
    /// do, even through a volatile write.
    ///
    /// # Safety
    ///
    /// `addr` must be mapped without write access, so that the store cannot change
    /// memory; the process must be meant to die of the fault.
    unsafe fn fault_at(addr: *mut u8) {
        // SAFETY: the store cannot succeed (caller's contract), so it changes no
        // memory; it raises SIGSEGV, whose default action ends the process.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("mov byte ptr [{0}], 0", in(reg) addr, options(nostack))
        };
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        unsafe {
            std::arch::asm!("strb wzr, [{0}]", in(reg) addr, options(nostack))
        };
    }

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn fault_outside_fiber_guards_keeps_its_default_action() {
        let name = test_path(
            module_path!(),
            "fault_outside_fiber_guards_keeps_its_default_action",
        );
        if !is_child(&name) {
            let out = run_child(&name);
            let stderr = stderr_of(&out);
            assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{stderr}");
            assert!(!stderr.contains("overflowed"), "{stderr}");
            return;
        }
        no_core_dump();
        install();
        // A fiber is running, so only its guard page counts as an overflow.
        let stack = acquire(MIN_STACK_SIZE).unwrap();
        let frame = Frame::new(stack.guard_range(), stack.usable_size(), 1, None);
        // `frame` outlives the guard in this scope.
        let _running =
            crate::task::current::enter_fiber(std::ptr::null(), (&frame as *const Frame).cast());
        // SAFETY: a new private anonymous mapping at an address the kernel picks.
        let page = unsafe {
            libc::mmap(
                ptr::null_mut(),
                page_size(),
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED);
        // SAFETY: the page is PROT_NONE, and this child is meant to die of the fault.
        unsafe { fault_at(page.cast()) };
        unreachable!("the fault ends the process");
    }

    #[test]
    fn sigsegv_sent_by_kill_keeps_its_default_action() {
        let name = test_path(
            module_path!(),
            "sigsegv_sent_by_kill_keeps_its_default_action",
        );
        if !is_child(&name) {
            let out = run_child(&name);
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGSEGV),
                "{}",
                stderr_of(&out)
            );
            return;
        }
        no_core_dump();
        // As in a process without Rust's own handler (which would swallow the first
        // raised SIGSEGV): the default action was in place before ours.
        restore_default(libc::SIGSEGV);
        install();
        // SAFETY: raise has no preconditions; the signal ends this child.
        unsafe { libc::raise(libc::SIGSEGV) };
        unreachable!("the signal ends the process");
    }
}
