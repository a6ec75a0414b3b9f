//! TCP: [`TcpListener`], [`TcpStream`] and the stream's halves.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_io::{AsyncRead, AsyncWrite};

use super::evented::Evented;
use super::timeouts::Timeouts;
use crate::driver::readiness::Direction;

/// Every address `addr` names, or the error std gives for none.
pub(crate) fn addrs(addr: impl ToSocketAddrs) -> io::Result<Vec<SocketAddr>> {
    let v: Vec<_> = addr.to_socket_addrs()?.collect();
    if v.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any address",
        ));
    }
    Ok(v)
}

/// Tries `f` on each address in turn; the first success, or the last error.
pub(crate) fn each_addr<T>(
    addrs: Vec<SocketAddr>,
    mut f: impl FnMut(SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for a in addrs {
        match f(a) {
            Ok(t) => return Ok(t),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("addrs is never empty"))
}

/// A TCP socket server, listening for connections.
///
/// Accepted streams belong to the listener's runtime. Every method takes `&self`, so
/// one listener can be shared by many acceptors (tasks and fibers alike).
///
/// Addresses are taken as `std::net::ToSocketAddrs` and resolved where the call is
/// made; a host name lookup blocks the caller while it lasts, so resolve names first
/// with [`lookup_host`](super::lookup_host), which runs on the blocking pool.
///
/// ```
/// use weft::io::{AsyncReadExt, AsyncWriteExt};
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let listener = weft::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let addr = listener.local_addr().unwrap();
///     let server = weft::spawn(async move {
///         let (mut s, _) = listener.accept().await.unwrap();
///         let mut buf = [0; 5];
///         s.read_exact(&mut buf).await.unwrap();
///         s.write_all(&buf).await.unwrap();
///     });
///     let mut c = weft::net::TcpStream::connect(addr).await.unwrap();
///     c.write_all(b"hello").await.unwrap();
///     let mut buf = [0; 5];
///     c.read_exact(&mut buf).await.unwrap();
///     assert_eq!(&buf, b"hello");
///     server.await.unwrap();
/// });
/// ```
pub struct TcpListener {
    io: Evented<mio::net::TcpListener>,
}

impl TcpListener {
    /// Binds to `addr` (the first of its addresses that binds) and listens.
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        Self::bind_now(addr)
    }

    fn bind_now(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        let l = each_addr(addrs(addr)?, mio::net::TcpListener::bind)?;
        Ok(TcpListener {
            io: Evented::with_interest(l, mio::Interest::READABLE)?,
        })
    }

    /// Accepts a connection.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (s, a) = self.io.async_io(Direction::Read, |l| l.accept()).await?;
        Ok((TcpStream::on_driver(self, s)?, a))
    }

    /// Accepts a connection, blocking as `weft::wait` does: a fiber suspends, a
    /// worker helps, a plain thread blocks.
    pub fn accept_blocking(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (s, a) = self
            .io
            .blocking_io(Direction::Read, None, |l, _| l.accept())?;
        Ok((TcpStream::on_driver(self, s)?, a))
    }

    /// Polls for a connection (the task form of [`accept`](Self::accept)).
    ///
    /// Only the waker of the most recent call is woken when a connection comes (as
    /// with tokio's `poll_accept`): two tasks polling one listener this way leave the
    /// first asleep. To accept from several tasks or fibers at once, use
    /// [`accept`](Self::accept) or [`accept_blocking`](Self::accept_blocking).
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        match self.io.poll_io(cx, Direction::Read, |l| l.accept()) {
            Poll::Ready(Ok((s, a))) => Poll::Ready(TcpStream::on_driver(self, s).map(|s| (s, a))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The address this listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get().local_addr()
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.io.get().set_ttl(ttl)
    }

    /// Gets `IP_TTL`.
    pub fn ttl(&self) -> io::Result<u32> {
        self.io.get().ttl()
    }

    /// Takes a std listener (made non-blocking here) into the current runtime (or the
    /// most recently started live one).
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        listener.set_nonblocking(true)?;
        Ok(TcpListener {
            io: Evented::with_interest(
                mio::net::TcpListener::from_std(listener),
                mio::Interest::READABLE,
            )?,
        })
    }

    /// Deregisters the listener and returns it as a std listener, still in
    /// non-blocking mode (as tokio's).
    pub fn into_std(self) -> io::Result<std::net::TcpListener> {
        let fd = self.io.into_inner().into_raw_fd();
        // SAFETY: `fd` was just released by the mio listener, which owned it.
        Ok(unsafe { std::net::TcpListener::from_raw_fd(fd) })
    }
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("local_addr", &self.local_addr().ok())
            .finish()
    }
}

impl AsRawFd for TcpListener {
    fn as_raw_fd(&self) -> RawFd {
        self.io.get().as_raw_fd()
    }
}

impl AsFd for TcpListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.get().as_fd()
    }
}

/// A TCP connection.
///
/// Async code uses it through `futures_io::AsyncRead` and `AsyncWrite` (with
/// [`weft::io::AsyncReadExt`](crate::io::AsyncReadExt) for tokio's method names);
/// blocking code through `std::io::Read` and `Write`, which block as `weft::wait`
/// does (a fiber suspends, a worker helps, a plain thread blocks) and honour the read
/// and write timeouts.
///
/// ```
/// use std::io::{Read, Write};
/// let _rt = weft::Runtime::new().unwrap();
/// let listener = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
/// let addr = listener.local_addr().unwrap();
/// let server = weft::fiber::spawn(move || {
///     let (mut s, _) = listener.accept_blocking().unwrap();
///     let mut buf = [0; 4];
///     s.read_exact(&mut buf).unwrap();
///     s.write_all(&buf).unwrap();
/// });
/// let mut c = weft::net::TcpStream::connect_blocking(addr).unwrap();
/// c.write_all(b"ping").unwrap();
/// let mut buf = [0; 4];
/// c.read_exact(&mut buf).unwrap();
/// assert_eq!(&buf, b"ping");
/// server.join().unwrap();
/// ```
pub struct TcpStream {
    io: Evented<mio::net::TcpStream>,
    timeouts: Timeouts,
}

impl TcpStream {
    fn on_driver(listener: &TcpListener, s: mio::net::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream {
            io: Evented::on(
                listener.io.driver().clone(),
                s,
                mio::Interest::READABLE | mio::Interest::WRITABLE,
            )?,
            timeouts: Timeouts::default(),
        })
    }

    fn new(s: mio::net::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream {
            io: Evented::new(s)?,
            timeouts: Timeouts::default(),
        })
    }

    /// Connects to `addr` (each of its addresses in turn until one connects).
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let mut last = None;
        for a in addrs(addr)? {
            match Self::connect_one(a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("addrs is never empty"))
    }

    async fn connect_one(addr: SocketAddr) -> io::Result<TcpStream> {
        let s = TcpStream::new(mio::net::TcpStream::connect(addr)?)?;
        s.io.ready(Direction::Write, None).await?;
        s.connected()?;
        Ok(s)
    }

    /// Connects to `addr`, blocking as `weft::wait` does.
    pub fn connect_blocking(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        each_addr(addrs(addr)?, |a| {
            let s = TcpStream::new(mio::net::TcpStream::connect(a)?)?;
            crate::wait(s.io.ready(Direction::Write, None))?;
            s.connected()?;
            Ok(s)
        })
    }

    /// After a non-blocking connect reported writable: whether it connected.
    fn connected(&self) -> io::Result<()> {
        let s = self.io.get();
        if let Some(e) = s.take_error()? {
            return Err(e);
        }
        match s.peer_addr() {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                // The connect failed; the error may have been taken already.
                Err(s.take_error()?.unwrap_or_else(|| {
                    io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused")
                }))
            }
            Err(e) => Err(e),
        }
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.get().peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get().local_addr()
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.io.get().set_nodelay(nodelay)
    }

    /// Gets `TCP_NODELAY`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.io.get().nodelay()
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.io.get().set_ttl(ttl)
    }

    /// Gets `IP_TTL`.
    pub fn ttl(&self) -> io::Result<u32> {
        self.io.get().ttl()
    }

    /// Shuts down the read side, the write side or both (std's form). A reader
    /// blocked on this stream on another thread, fiber or task then reads EOF.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.io.get().shutdown(how)
    }

    /// Sets the timeout of the blocking reads (`std::io::Read`); `None` waits for
    /// ever. A zero duration is an error, as in std. A read that times out fails with
    /// `WouldBlock`, as std's does on Unix.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.timeouts.set_read(timeout)
    }

    /// Sets the timeout of the blocking writes (`std::io::Write`), as
    /// [`set_read_timeout`](Self::set_read_timeout).
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.timeouts.set_write(timeout)
    }

    /// The blocking reads' timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.timeouts.read())
    }

    /// The blocking writes' timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.timeouts.write())
    }

    /// Waits until the stream may be readable (then [`try_read`](Self::try_read)).
    pub async fn readable(&self) -> io::Result<()> {
        self.io.ready(Direction::Read, None).await.map(|_| ())
    }

    /// Waits until the stream may be writable (then [`try_write`](Self::try_write)).
    pub async fn writable(&self) -> io::Result<()> {
        self.io.ready(Direction::Write, None).await.map(|_| ())
    }

    /// Reads what is there without waiting: `WouldBlock` if nothing is.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.try_io(Direction::Read, |s| (&*s).read(buf))
    }

    /// Writes what fits without waiting: `WouldBlock` if nothing does.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.io.try_io(Direction::Write, |s| (&*s).write(buf))
    }

    /// Reads without taking the data out of the socket's queue.
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.async_io(Direction::Read, |s| s.peek(buf)).await
    }

    /// Borrowed halves, for reading and writing from two places at once.
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        (ReadHalf(self), WriteHalf(self))
    }

    /// Owned halves (each can move to its own task or fiber). Dropping the write
    /// half shuts the write side, as tokio's does; [`OwnedReadHalf::reunite`] puts
    /// the two back together.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        let s = Arc::new(self);
        (
            OwnedReadHalf(s.clone()),
            OwnedWriteHalf {
                stream: s,
                shutdown_on_drop: true,
            },
        )
    }

    /// Takes a connected std stream (made non-blocking here) into the current runtime
    /// (or the most recently started live one).
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        stream.set_nonblocking(true)?;
        TcpStream::new(mio::net::TcpStream::from_std(stream))
    }

    /// Deregisters the stream and returns it as a std stream, still non-blocking.
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        let fd = self.io.into_inner().into_raw_fd();
        // SAFETY: `fd` was just released by the mio stream, which owned it.
        Ok(unsafe { std::net::TcpStream::from_raw_fd(fd) })
    }

    fn poll_read_priv(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.io.poll_read_with(cx, buf, |s, b| (&*s).read(b))
    }

    fn poll_write_priv(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.io.poll_write_with(cx, buf, |s, b| (&*s).write(b))
    }

    fn read_blocking(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io
            .read_blocking_with(buf, self.timeouts.read(), |s, b| (&*s).read(b))
    }

    fn write_blocking(&self, buf: &[u8]) -> io::Result<usize> {
        self.io
            .write_blocking_with(buf, self.timeouts.write(), |s, b| (&*s).write(b))
    }
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("local_addr", &self.local_addr().ok())
            .field("peer_addr", &self.peer_addr().ok())
            .finish()
    }
}

impl AsRawFd for TcpStream {
    fn as_raw_fd(&self) -> RawFd {
        self.io.get().as_raw_fd()
    }
}

impl AsFd for TcpStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.get().as_fd()
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_blocking(buf)
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_blocking(buf)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_blocking(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_blocking(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The async read trait, shared by the stream and its read halves.
macro_rules! async_read {
    ($ty:ty, $stream:ident => $get:expr) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut [u8],
            ) -> Poll<io::Result<usize>> {
                let $stream = &*self;
                $get.poll_read_priv(cx, buf)
            }
        }
    };
}

/// The async write trait, shared by the stream and its write halves.
macro_rules! async_write {
    ($ty:ty, $stream:ident => $get:expr) => {
        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                let $stream = &*self;
                $get.poll_write_priv(cx, buf)
            }

            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            /// Shuts the write side.
            fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                let $stream = &*self;
                Poll::Ready(shutdown_write(&$get))
            }
        }
    };
}

/// Shuts the write side; a peer that already went counts as shut.
fn shutdown_write(s: &TcpStream) -> io::Result<()> {
    match s.shutdown(Shutdown::Write) {
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        r => r,
    }
}

async_read!(TcpStream, s => s);
async_write!(TcpStream, s => s);

/// The read half of [`TcpStream::split`].
#[derive(Debug)]
pub struct ReadHalf<'a>(&'a TcpStream);

/// The write half of [`TcpStream::split`].
#[derive(Debug)]
pub struct WriteHalf<'a>(&'a TcpStream);

/// The read half of [`TcpStream::into_split`].
#[derive(Debug)]
pub struct OwnedReadHalf(Arc<TcpStream>);

/// The write half of [`TcpStream::into_split`]; dropping it shuts the write side.
#[derive(Debug)]
pub struct OwnedWriteHalf {
    stream: Arc<TcpStream>,
    shutdown_on_drop: bool,
}

/// The halves given to [`OwnedReadHalf::reunite`] came from different streams.
#[derive(Debug)]
pub struct ReuniteError(pub OwnedReadHalf, pub OwnedWriteHalf);

impl std::fmt::Display for ReuniteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tried to reunite halves that are not from the same stream")
    }
}

impl std::error::Error for ReuniteError {}

impl OwnedReadHalf {
    /// Puts the halves back together, if they came from the same stream.
    pub fn reunite(self, other: OwnedWriteHalf) -> Result<TcpStream, ReuniteError> {
        if !Arc::ptr_eq(&self.0, &other.stream) {
            return Err(ReuniteError(self, other));
        }
        let mut other = other;
        other.shutdown_on_drop = false;
        let s = other.stream.clone();
        drop(other);
        drop(self);
        Ok(Arc::into_inner(s).expect("both halves were given back"))
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    /// See [`TcpStream::readable`].
    pub async fn readable(&self) -> io::Result<()> {
        self.0.readable().await
    }

    /// See [`TcpStream::try_read`].
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }

    /// See [`TcpStream::peek`].
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.peek(buf).await
    }
}

impl OwnedWriteHalf {
    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// See [`TcpStream::writable`].
    pub async fn writable(&self) -> io::Result<()> {
        self.stream.writable().await
    }

    /// See [`TcpStream::try_write`].
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.stream.try_write(buf)
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        if self.shutdown_on_drop {
            let _ = shutdown_write(&self.stream);
        }
    }
}

async_read!(ReadHalf<'_>, h => h.0);
async_write!(WriteHalf<'_>, h => h.0);
async_read!(OwnedReadHalf, h => h.0);
async_write!(OwnedWriteHalf, h => h.stream);

impl AsRawFd for OwnedReadHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl AsRawFd for OwnedWriteHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}
