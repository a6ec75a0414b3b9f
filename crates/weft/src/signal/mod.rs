//! Process signals: waiting for Ctrl-C (`SIGINT`), from a task, a fiber or a thread.
//!
//! The first call installs a `SIGINT` handler, which stays installed for the life of
//! the process (as tokio's does): from then on Ctrl-C no longer ends the process, it
//! completes whoever waits in [`ctrl_c`] or [`ctrl_c_blocking`] (and is lost if
//! nobody does).
//!
//! How: the handler does only what a signal handler may (async-signal-safe things):
//! it bumps a process-wide counter and writes a byte to a pipe. One small thread of
//! weft's, `weft-signal`, sleeps reading that pipe; for each byte it publishes the
//! counter on a [`watch`] channel, whose receivers are the
//! waiters. A waiter notes the counter when it is first polled and completes once the
//! published value has moved past it. This needs no runtime: a plain thread can wait
//! too.

use std::fs::File;
use std::future::Future;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::task::Poll;

use crate::sync::watch;

/// `SIGINT`s received since the handler was installed (bumped by the handler).
static RECEIVED: AtomicUsize = AtomicUsize::new(0);
/// The pipe's write end, which the handler writes a byte to; -1 until installed.
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// Whether the handler is installed.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The last value of [`RECEIVED`] the reader thread saw, for the waiters.
fn published() -> &'static watch::Sender<usize> {
    static TX: OnceLock<watch::Sender<usize>> = OnceLock::new();
    TX.get_or_init(|| watch::channel(0).0)
}

/// Completes on the next Ctrl-C (`SIGINT`) the process receives after this future is
/// first polled.
///
/// The first call installs weft's `SIGINT` handler, for good: Ctrl-C then no longer
/// ends the process (see the [module](self)). Any number of waiters may wait at once;
/// one `SIGINT` completes them all. Fails if the handler cannot be installed, and when
/// the runtime the wait began on (the current one at its first poll, if any) shuts
/// down, as a socket's wait does; a wait on a plain thread outside any runtime ends
/// only with a `SIGINT`.
///
/// ```
/// use std::future::Future;
/// use std::task::Poll;
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let mut ctrl_c = std::pin::pin!(weft::signal::ctrl_c());
///     // The first poll installs the handler; nobody pressed Ctrl-C yet.
///     let first = std::future::poll_fn(|cx| Poll::Ready(ctrl_c.as_mut().poll(cx))).await;
///     assert!(first.is_pending());
///     // Ctrl-C, or the process sending itself SIGINT:
///     // SAFETY: `kill` has no memory preconditions.
///     unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
///     ctrl_c.await.unwrap();
/// });
/// ```
pub async fn ctrl_c() -> io::Result<()> {
    // Only the signal thread can end this wait: not a deadlock (`WEFT_DEBUG_DEADLOCK`).
    let _outside = crate::task::diag::OutsideWait::new();
    install()?;
    let seen = RECEIVED.load(SeqCst);
    let mut rx = published().subscribe();
    // The runtime this wait runs on, if any: its shutdown ends the wait, as it ends a
    // socket's. A task blocked in `ctrl_c_blocking` held its worker, and the runtime's
    // drop waited for the next SIGINT (found in review, `tests/review_s33.rs`).
    let mut shut_down = crate::Handle::try_current()
        .ok()
        .map(|h| crate::runtime::closing::shut_down(&h));
    loop {
        // The published value lags the counter (the reader publishes after the
        // handler's byte), so it may still be behind `seen`: wait until it is past.
        let now = *rx.borrow_and_update();
        if (now.wrapping_sub(seen) as isize) > 0 {
            return Ok(());
        }
        let mut changed = std::pin::pin!(rx.changed());
        let closed = std::future::poll_fn(|cx| {
            if let Some(s) = shut_down.as_mut() {
                if std::pin::Pin::new(s).poll(cx).is_ready() {
                    return Poll::Ready(Ok(true));
                }
            }
            changed.as_mut().poll(cx).map(|r| r.map(|()| false))
        })
        .await
        .map_err(|_| io::Error::other("the signal channel closed"))?;
        if closed {
            // A SIGINT handled before the shutdown, not yet published by the reader
            // thread, still counts (found in review: reported as the shutdown).
            if (RECEIVED.load(SeqCst).wrapping_sub(seen) as isize) > 0 {
                return Ok(());
            }
            return Err(io::Error::other(
                "the weft runtime this wait began on has shut down",
            ));
        }
    }
}

/// [`ctrl_c`], blocking as [`weft::wait`](crate::wait) does: a fiber suspends, a worker
/// helps, a plain thread blocks, until the next `SIGINT` after the call.
///
/// ```
/// use std::time::Duration;
/// let rt = weft::Runtime::new().unwrap();
/// // Any first call installs the handler (this one gives up at once).
/// let _ = rt.block_on(weft::time::timeout(Duration::ZERO, weft::signal::ctrl_c()));
/// let waiter = weft::fiber::spawn(weft::signal::ctrl_c_blocking);
/// // Ctrl-C, or the process sending itself SIGINT until the waiter has seen one:
/// for _ in 0..1000 {
///     if waiter.is_finished() {
///         break;
///     }
///     // SAFETY: `kill` has no memory preconditions.
///     unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
///     std::thread::sleep(Duration::from_millis(5));
/// }
/// waiter.join().unwrap().unwrap();
/// ```
pub fn ctrl_c_blocking() -> io::Result<()> {
    crate::wait(ctrl_c())
}

/// Installs the handler (once: the pipe, the reader thread, `sigaction`).
fn install() -> io::Result<()> {
    if INSTALLED.load(SeqCst) {
        return Ok(());
    }
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if INSTALLED.load(SeqCst) {
        return Ok(());
    }
    published();
    let (read, write) = pipe()?;
    std::thread::Builder::new()
        .name("weft-signal".into())
        .spawn(move || reader(read))?;
    PIPE_WRITE.store(write.into_raw_fd(), SeqCst);
    if let Err(e) = set_handler() {
        let fd = PIPE_WRITE.swap(-1, SeqCst);
        // SAFETY: `fd` is the write end taken out of its `OwnedFd` above; no handler
        // was installed to use it, and the swap took it out of reach: it is ours.
        // Closing it ends the reader thread (it reads end of file).
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        return Err(e);
    }
    INSTALLED.store(true, SeqCst);
    Ok(())
}

/// The reader thread: publishes the counter after each byte; ends if the pipe does.
fn reader(read: OwnedFd) {
    let mut pipe = File::from(read);
    let mut buf = [0u8; 64];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {
                // Waking the waiters runs their wakers, user code: one that panics (the
                // panic hook reported it) must not end this thread, and with it every
                // later Ctrl-C of the process (found in review, `tests/review_s33b.rs`).
                crate::task::waker::ignore_panic(|| {
                    published().send_replace(RECEIVED.load(SeqCst));
                });
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// A pipe, both ends close-on-exec, the write end non-blocking (the handler must
/// never block: when the pipe is full, a byte is already waiting).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe` writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `pipe` succeeded: both are open descriptors that nothing else owns.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    for (fd, nonblocking) in [(&r, false), (&w, true)] {
        set_flags(fd, nonblocking)?;
    }
    Ok((r, w))
}

/// Sets `FD_CLOEXEC` on `fd`, and `O_NONBLOCK` if `nonblocking`.
fn set_flags(fd: &OwnedFd, nonblocking: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = fd.as_raw_fd();
    // SAFETY: `fd` is open (borrowed from an `OwnedFd`); these `fcntl` commands only
    // read and set its flags.
    let ok = unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != -1
            && (!nonblocking || {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                fl != -1 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) != -1
            })
    };
    if ok {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Installs [`on_sigint`] for `SIGINT`.
fn set_handler() -> io::Result<()> {
    // SAFETY: all-zero is a valid `sigaction` (no flags, an empty mask on the
    // platforms libc supports); every field that matters is set below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: `act.sa_mask` is a `sigset_t` we own; `sigemptyset` initializes it.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: `act` is fully initialized and names a handler that does only
    // async-signal-safe things (`on_sigint`); the old action is not asked for.
    if unsafe { libc::sigaction(libc::SIGINT, &act, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The `SIGINT` handler: only async-signal-safe operations (lock-free atomics and
/// `write`), and `errno` left as it found it.
extern "C" fn on_sigint(_: libc::c_int) {
    let errno = errno_location();
    // SAFETY: `errno_location` gives this thread's `errno`, valid for the thread's
    // life.
    let saved = unsafe { *errno };
    RECEIVED.fetch_add(1, SeqCst);
    let fd = PIPE_WRITE.load(SeqCst);
    if fd >= 0 {
        let byte = 1u8;
        // A full pipe (`EAGAIN`) already holds a byte for the reader: nothing lost.
        // SAFETY: `fd` is the pipe's write end, open for the life of the process
        // once the handler is installed (it is closed only if installing failed,
        // after being swapped out of `PIPE_WRITE`); the buffer is one valid byte.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
}

/// This thread's `errno`.
fn errno_location() -> *mut libc::c_int {
    // SAFETY: each of these returns the calling thread's `errno` address and has no
    // precondition.
    unsafe {
        #[cfg(any(
            target_os = "linux",
            target_os = "emscripten",
            target_os = "hurd",
            target_os = "redox"
        ))]
        let p = libc::__errno_location();
        #[cfg(any(target_os = "android", target_os = "netbsd", target_os = "openbsd"))]
        let p = libc::__errno();
        #[cfg(not(any(
            target_os = "linux",
            target_os = "emscripten",
            target_os = "hurd",
            target_os = "redox",
            target_os = "android",
            target_os = "netbsd",
            target_os = "openbsd"
        )))]
        let p = libc::__error();
        p
    }
}
