//! A registered source: a mio socket, its readiness and the runtime it belongs to,
//! and the three ways to wait on it (a task's poll, a readiness future, a blocking
//! wait that suspends a fiber, helps on a worker or blocks a thread).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use mio::event::Source;

use crate::driver::io::IoDriver;
use crate::driver::readiness::{Direction, ReadyEvent, ScheduledIo};
use crate::driver::timer::Driver;
use crate::time::Sleep;
use crate::Handle;

/// The runtime a new socket registers with: the current one, else the most recently
/// started live one (the rule of `weft::fiber::spawn`).
pub(crate) fn runtime_driver() -> io::Result<Arc<Driver>> {
    Ok(socket_runtime()?.inner.time.clone())
}

/// The runtime whose driver [`runtime_driver`] returns (also where `lookup_host` runs
/// its lookup): an error if there is none or it is shutting down.
pub(crate) fn socket_runtime() -> io::Result<Handle> {
    let handle = Handle::try_current()
        .ok()
        .or_else(crate::runtime::latest)
        .ok_or_else(|| {
            io::Error::other("no weft runtime is running: a socket needs one to register with")
        })?;
    if handle.inner.pools[0].is_shutdown() {
        return Err(crate::driver::readiness::shutdown_error());
    }
    Ok(handle)
}

/// A mio source registered with a runtime's I/O driver. Deregistered when dropped.
pub(crate) struct Evented<E: Source> {
    io: Option<E>,
    sched: Arc<ScheduledIo>,
    token: mio::Token,
    driver: Arc<Driver>,
}

impl<E: Source> Evented<E> {
    /// Registers `io` for reads and writes with the current runtime.
    pub(crate) fn new(io: E) -> io::Result<Self> {
        Self::with_interest(io, mio::Interest::READABLE | mio::Interest::WRITABLE)
    }

    pub(crate) fn with_interest(io: E, interest: mio::Interest) -> io::Result<Self> {
        Self::on(runtime_driver()?, io, interest)
    }

    /// Registers `io` with `driver`'s runtime (an accepted stream goes where its
    /// listener is).
    pub(crate) fn on(driver: Arc<Driver>, mut io: E, interest: mio::Interest) -> io::Result<Self> {
        let Some(driver_io) = driver.io() else {
            return Err(io::Error::other("this weft runtime has no I/O driver"));
        };
        let (sched, token) = driver_io.register(&mut io, interest)?;
        Ok(Evented {
            io: Some(io),
            sched,
            token,
            driver,
        })
    }

    /// After this socket's own `shutdown(how)`: wakes the waits of the directions it
    /// closed, which then find EOF or `BrokenPipe`. Linux sends no event for them on a
    /// Unix socket (no `EPOLLOUT` for a shut send side), so a writer blocked on a full
    /// buffer waited for ever (found in review).
    pub(crate) fn closed_by_shutdown(&self, how: std::net::Shutdown) {
        use crate::driver::readiness::{READ_CLOSED, WRITE_CLOSED};
        let bits = match how {
            std::net::Shutdown::Read => READ_CLOSED,
            std::net::Shutdown::Write => WRITE_CLOSED,
            std::net::Shutdown::Both => READ_CLOSED | WRITE_CLOSED,
        };
        let mut wake = Vec::new();
        self.sched.set_readiness(bits, &mut wake);
        for w in wake {
            crate::driver::wake_guarded(w);
        }
    }

    /// The socket.
    pub(crate) fn get(&self) -> &E {
        self.io
            .as_ref()
            .expect("a registered source is present until dropped")
    }

    /// Deregisters and returns the socket.
    pub(crate) fn into_inner(mut self) -> E {
        let mut io = self.io.take().expect("present until dropped");
        io_of(&self.driver).deregister(&mut io, self.token);
        io
    }

    /// Tries `f` when the source is ready for `dir`, until it does not say
    /// `WouldBlock` (the slot-waker form, for `poll_read`, `poll_write`, `poll_accept`).
    pub(crate) fn poll_io<R>(
        &self,
        cx: &mut Context<'_>,
        dir: Direction,
        mut f: impl FnMut(&E) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.poll_io_draining(cx, dir, |io| f(io).map(|r| (r, false)))
    }

    /// [`poll_io`](Self::poll_io) for an `f` that also says whether it drained the
    /// source (then the readiness it ran under is cleared, see
    /// [`poll_transfer`](Self::poll_transfer)).
    fn poll_io_draining<R>(
        &self,
        cx: &mut Context<'_>,
        dir: Direction,
        mut f: impl FnMut(&E) -> io::Result<(R, bool)>,
    ) -> Poll<io::Result<R>> {
        loop {
            let ev = match self.sched.poll_ready(cx, dir) {
                Poll::Ready(Ok(ev)) => ev,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            match f(self.get()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.sched.clear_readiness(ev),
                Ok((r, drained)) => {
                    if drained {
                        self.sched.clear_drained(ev);
                    }
                    return Poll::Ready(Ok(r));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// One try of `f`, whatever the readiness word says; a `WouldBlock` clears it.
    pub(crate) fn try_io<R>(
        &self,
        dir: Direction,
        f: impl FnOnce(&E) -> io::Result<R>,
    ) -> io::Result<R> {
        let ev = self.sched.snapshot(dir)?;
        match f(self.get()) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.sched.clear_readiness(ev);
                Err(e)
            }
            r => r,
        }
    }

    /// A future that is ready when the source is ready for `dir` (or fails: the
    /// runtime shut down), or at `deadline` with a `WouldBlock` error. Any number of
    /// them may wait at once.
    pub(crate) fn ready(&self, dir: Direction, deadline: Option<Instant>) -> Ready<'_> {
        Ready {
            sched: &self.sched,
            dir,
            id: 0,
            sleep: deadline.map(|d| Box::pin(crate::time::sleep_on(self.driver.clone(), d))),
        }
    }

    /// A read or write of `len` bytes for a task (the direction's waker slot): where
    /// `short_drains`, one shorter than `len` drained the socket (or filled its buffer),
    /// so it clears the readiness it ran under and the next call waits for an event
    /// instead of making a futile system call.
    fn poll_transfer(
        &self,
        cx: &mut Context<'_>,
        dir: Direction,
        len: usize,
        short_drains: bool,
        mut f: impl FnMut(&E) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        self.poll_io_draining(cx, dir, |io| {
            f(io).map(|n| (n, short_drains && n > 0 && n < len))
        })
    }

    /// Reads into `buf` for a task (see [`poll_transfer`](Self::poll_transfer));
    /// `short_drains`: whether a short read shows the queue drained (see
    /// `MioStream::SHORT_READ_DRAINS`).
    pub(crate) fn poll_read_with(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
        short_drains: bool,
        mut read: impl FnMut(&E, &mut [u8]) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let len = buf.len();
        self.poll_transfer(cx, Direction::Read, len, short_drains, |io| read(io, buf))
    }

    /// Writes `buf` for a task (see [`poll_transfer`](Self::poll_transfer)).
    pub(crate) fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
        mut write: impl FnMut(&E, &[u8]) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        self.poll_transfer(cx, Direction::Write, buf.len(), true, |io| write(io, buf))
    }

    /// The blocking read: [`blocking_io`](Self::blocking_io), clearing after a short
    /// read where `short_drains` (as [`poll_read_with`](Self::poll_read_with)).
    pub(crate) fn read_blocking_with(
        &self,
        buf: &mut [u8],
        timeout: Option<Duration>,
        short_drains: bool,
        mut read: impl FnMut(&E, &mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let len = buf.len();
        self.blocking_io(Direction::Read, timeout, |io, ev| {
            let n = read(io, buf)?;
            if short_drains && n > 0 && n < len {
                self.sched.clear_drained(ev);
            }
            Ok(n)
        })
    }

    /// The blocking write, clearing after a short write.
    pub(crate) fn write_blocking_with(
        &self,
        buf: &[u8],
        timeout: Option<Duration>,
        mut write: impl FnMut(&E, &[u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        self.blocking_io(Direction::Write, timeout, |io, ev| {
            let n = write(io, buf)?;
            if n > 0 && n < buf.len() {
                self.sched.clear_drained(ev);
            }
            Ok(n)
        })
    }

    /// The runtime's driver this source is registered with.
    pub(crate) fn driver(&self) -> &Arc<Driver> {
        &self.driver
    }

    /// `f` until it does not say `WouldBlock`, waiting for readiness between tries:
    /// the async form, any number of callers at once.
    pub(crate) async fn async_io<R>(
        &self,
        dir: Direction,
        mut f: impl FnMut(&E) -> io::Result<R>,
    ) -> io::Result<R> {
        loop {
            let ev = self.ready(dir, None).await?;
            match f(self.get()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.sched.clear_readiness(ev),
                r => return r,
            }
        }
    }

    /// `f` until it does not say `WouldBlock`, waiting in between with `weft::wait`
    /// (a fiber suspends, a worker helps, a thread blocks); after `timeout`, the
    /// `WouldBlock` error std gives for a timed-out socket read. `f` gets the
    /// readiness snapshot it runs under, to clear it after a short read.
    ///
    /// When the word says the source is not ready, no system call is tried: the
    /// registration's edge (epoll reports a source that is ready when it is added)
    /// or a later event will say when it is.
    pub(crate) fn blocking_io<R>(
        &self,
        dir: Direction,
        timeout: Option<Duration>,
        mut f: impl FnMut(&E, ReadyEvent) -> io::Result<R>,
    ) -> io::Result<R> {
        let mut deadline = None;
        loop {
            // The snapshot comes first: an event during `f` moves the tick on, so the
            // clear below leaves it and the wait ends at once.
            let ev = self.sched.snapshot(dir)?;
            if ev.ready != 0 {
                match f(self.get(), ev) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.sched.clear_readiness(ev)
                    }
                    r => return r,
                }
            }
            if deadline.is_none() {
                deadline = timeout.map(|t| {
                    Some(
                        Instant::now()
                            .checked_add(t)
                            .unwrap_or_else(crate::time::far_future),
                    )
                });
            }
            crate::wait(self.ready(dir, deadline.flatten()))?;
        }
    }
}

fn io_of(driver: &Driver) -> &IoDriver {
    driver
        .io()
        .expect("a source was registered, so its runtime has an I/O driver")
}

impl<E: Source> Drop for Evented<E> {
    fn drop(&mut self) {
        if let Some(mut io) = self.io.take() {
            io_of(&self.driver).deregister(&mut io, self.token);
        }
    }
}

impl<E: Source + std::fmt::Debug> std::fmt::Debug for Evented<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.io.fmt(f)
    }
}

/// See [`Evented::ready`].
pub(crate) struct Ready<'a> {
    sched: &'a ScheduledIo,
    dir: Direction,
    id: u64,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Future for Ready<'_> {
    type Output = io::Result<ReadyEvent>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Poll::Ready(r) = this.sched.poll_ready_listed(cx, this.dir, &mut this.id) {
            return Poll::Ready(r);
        }
        if let Some(s) = &mut this.sleep {
            if s.as_mut().poll(cx).is_ready() {
                this.sched.forget(&mut this.id);
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "the socket's timeout elapsed",
                )));
            }
        }
        Poll::Pending
    }
}

impl Drop for Ready<'_> {
    fn drop(&mut self) {
        self.sched.forget(&mut self.id);
    }
}
