//! What the stream sockets (TCP and Unix) share: reads and writes through their
//! [`Socket`], the methods and traits every stream has (`stream_api!`), and the halves
//! of a split stream, generic over the stream.

use std::fmt::Debug;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_io::{AsyncRead, AsyncWrite};
use mio::event::Source;

use super::socket::Socket;
use super::tcp::TcpStream;
use crate::driver::readiness::Direction;

/// A mio stream socket, as the shared code uses it.
///
/// `pub` (in a private module) only so that [`SplitStream`] can name it: outside the
/// crate it can be neither named nor implemented.
pub trait MioStream: Source + AsRawFd + Debug + Send + Sync + 'static {
    /// The stream's address type.
    type Addr: Debug;
    /// Whether a read shorter than its buffer shows that the socket's queue is drained
    /// (so the readiness it ran under is cleared, sparing the next read a futile system
    /// call). TCP: yes, but for a read that stops at an urgent (out-of-band) byte, which
    /// weft's streams do not handle (tokio's neither). A Unix stream: no, a read also
    /// stops after a message that carried file descriptors (`SCM_RIGHTS`, common on
    /// Unix sockets) or, with `SO_PASSCRED`, where the sender changes, with more data
    /// queued behind it; cleared there, the readiness would never come back for data
    /// already queued (found in review, `tests/review_s26_net.rs`).
    #[doc(hidden)]
    const SHORT_READ_DRAINS: bool;
    #[doc(hidden)]
    fn read_in(&self, buf: &mut [u8]) -> io::Result<usize>;
    #[doc(hidden)]
    fn write_out(&self, buf: &[u8]) -> io::Result<usize>;
    #[doc(hidden)]
    fn shutdown_side(&self, how: Shutdown) -> io::Result<()>;
    #[doc(hidden)]
    fn error(&self) -> io::Result<Option<io::Error>>;
    #[doc(hidden)]
    fn local(&self) -> io::Result<Self::Addr>;
    #[doc(hidden)]
    fn peer(&self) -> io::Result<Self::Addr>;
}

macro_rules! mio_stream {
    ($mio:ty, $addr:ty, $drains:expr) => {
        impl MioStream for $mio {
            type Addr = $addr;
            const SHORT_READ_DRAINS: bool = $drains;
            fn read_in(&self, buf: &mut [u8]) -> io::Result<usize> {
                (&*self).read(buf)
            }
            fn write_out(&self, buf: &[u8]) -> io::Result<usize> {
                (&*self).write(buf)
            }
            fn shutdown_side(&self, how: Shutdown) -> io::Result<()> {
                self.shutdown(how)
            }
            fn error(&self) -> io::Result<Option<io::Error>> {
                self.take_error()
            }
            fn local(&self) -> io::Result<$addr> {
                self.local_addr()
            }
            fn peer(&self) -> io::Result<$addr> {
                self.peer_addr()
            }
        }
    };
}

mio_stream!(mio::net::TcpStream, std::net::SocketAddr, true);
mio_stream!(mio::net::UnixStream, std::os::unix::net::SocketAddr, false);

impl<E: MioStream> Socket<E> {
    /// A task's read (on TCP a read shorter than `buf` clears the readiness, see
    /// `Evented::poll_read_with` and [`MioStream::SHORT_READ_DRAINS`]).
    pub(crate) fn poll_read_stream(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.evented()
            .poll_read_with(cx, buf, E::SHORT_READ_DRAINS, |s, b| s.read_in(b))
    }

    /// A task's write.
    pub(crate) fn poll_write_stream(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.evented()
            .poll_write_with(cx, buf, |s, b| s.write_out(b))
    }

    /// The blocking read, for at most the read timeout.
    pub(crate) fn read_stream_blocking(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.evented().read_blocking_with(
            buf,
            self.timeouts().read(),
            E::SHORT_READ_DRAINS,
            |s, b| s.read_in(b),
        )
    }

    /// The blocking write, for at most the write timeout.
    pub(crate) fn write_stream_blocking(&self, buf: &[u8]) -> io::Result<usize> {
        self.evented()
            .write_blocking_with(buf, self.timeouts().write(), |s, b| s.write_out(b))
    }

    /// The stream's `shutdown(how)`, then the wake of the waits it ends
    /// ([`Socket::shut`]): every shutdown goes through here (found in review:
    /// `poll_close` and a dropped write half once missed the wake).
    pub(crate) fn shutdown_stream(&self, how: Shutdown) -> io::Result<()> {
        self.get().shutdown_side(how)?;
        self.shut(how);
        Ok(())
    }

    /// Shuts the write side; a peer that already went counts as shut.
    pub(crate) fn shutdown_write(&self) -> io::Result<()> {
        match self.shutdown_stream(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            r => r,
        }
    }

    /// After a non-blocking connect: waits until the socket is writable, then says
    /// whether it connected.
    pub(crate) async fn finish_connect(&self) -> io::Result<()> {
        self.evented().ready(Direction::Write, None).await?;
        self.connected()
    }

    /// [`finish_connect`](Self::finish_connect), blocking as `weft::wait` does.
    pub(crate) fn finish_connect_blocking(&self) -> io::Result<()> {
        crate::wait(self.evented().ready(Direction::Write, None))?;
        self.connected()
    }

    /// After a non-blocking connect reported writable: whether it connected.
    fn connected(&self) -> io::Result<()> {
        let s = self.get();
        if let Some(e) = s.error()? {
            return Err(e);
        }
        match s.peer() {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                // The connect failed; the error may have been taken already.
                Err(s.error()?.unwrap_or_else(|| {
                    io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused")
                }))
            }
            Err(e) => Err(e),
        }
    }
}

/// A stream that splits into halves: [`TcpStream`] and
/// [`UnixStream`](super::UnixStream).
///
/// `pub` (in a private module) only so that the halves' bounds can name it: outside
/// the crate it can be neither named nor implemented.
pub trait SplitStream: Debug + Send + Sync + 'static {
    /// The mio stream inside.
    type Io: MioStream;
    #[doc(hidden)]
    fn socket(&self) -> &Socket<Self::Io>;
}

/// The methods and trait impls every stream type `$ty` has (its one field being
/// `io: Socket<$mio>`): `shutdown`, the `try_` forms, the halves, blocking
/// `std::io::Read`/`Write` for it and its reference, and `futures_io`'s traits.
macro_rules! stream_api {
    ($ty:ident, $mio:ty) => {
        impl $ty {
            /// Shuts down the read side, the write side or both (std's form). A reader
            /// blocked on this stream on another thread, fiber or task then reads EOF.
            pub fn shutdown(&self, how: ::std::net::Shutdown) -> ::std::io::Result<()> {
                self.io.shutdown_stream(how)
            }

            /// Reads what is there without waiting: `WouldBlock` if nothing is.
            pub fn try_read(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
                use $crate::net::stream::MioStream as _;
                self.io.try_read(|s| s.read_in(buf))
            }

            /// Writes what fits without waiting: `WouldBlock` if nothing does.
            pub fn try_write(&self, buf: &[u8]) -> ::std::io::Result<usize> {
                use $crate::net::stream::MioStream as _;
                self.io.try_write(|s| s.write_out(buf))
            }

            /// Borrowed halves, for reading and writing from two places at once.
            pub fn split(
                &mut self,
            ) -> (
                $crate::net::ReadHalf<'_, $ty>,
                $crate::net::WriteHalf<'_, $ty>,
            ) {
                $crate::net::stream::split(self)
            }

            /// Owned halves (each can move to its own task or fiber). Dropping the
            /// write half shuts the write side, as tokio's does;
            /// [`OwnedReadHalf::reunite`](crate::net::OwnedReadHalf::reunite) puts the
            /// two back together.
            pub fn into_split(
                self,
            ) -> (
                $crate::net::OwnedReadHalf<$ty>,
                $crate::net::OwnedWriteHalf<$ty>,
            ) {
                $crate::net::stream::into_split(self)
            }
        }

        impl $crate::net::stream::SplitStream for $ty {
            type Io = $mio;
            fn socket(&self) -> &$crate::net::socket::Socket<$mio> {
                &self.io
            }
        }

        impl ::std::io::Read for $ty {
            fn read(&mut self, buf: &mut [u8]) -> ::std::io::Result<usize> {
                self.io.read_stream_blocking(buf)
            }
        }

        impl ::std::io::Read for &$ty {
            fn read(&mut self, buf: &mut [u8]) -> ::std::io::Result<usize> {
                self.io.read_stream_blocking(buf)
            }
        }

        impl ::std::io::Write for $ty {
            fn write(&mut self, buf: &[u8]) -> ::std::io::Result<usize> {
                self.io.write_stream_blocking(buf)
            }

            fn flush(&mut self) -> ::std::io::Result<()> {
                Ok(())
            }
        }

        impl ::std::io::Write for &$ty {
            fn write(&mut self, buf: &[u8]) -> ::std::io::Result<usize> {
                self.io.write_stream_blocking(buf)
            }

            fn flush(&mut self) -> ::std::io::Result<()> {
                Ok(())
            }
        }

        impl ::futures_io::AsyncRead for $ty {
            fn poll_read(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &mut [u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                self.io.poll_read_stream(cx, buf)
            }
        }

        impl ::futures_io::AsyncWrite for $ty {
            fn poll_write(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                self.io.poll_write_stream(cx, buf)
            }

            fn poll_flush(
                self: ::std::pin::Pin<&mut Self>,
                _: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::task::Poll::Ready(Ok(()))
            }

            /// Shuts the write side.
            fn poll_close(
                self: ::std::pin::Pin<&mut Self>,
                _: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::task::Poll::Ready(self.io.shutdown_write())
            }
        }
    };
}

pub(crate) use stream_api;

pub(crate) fn split<S: SplitStream>(s: &mut S) -> (ReadHalf<'_, S>, WriteHalf<'_, S>) {
    (ReadHalf(s), WriteHalf(s))
}

pub(crate) fn into_split<S: SplitStream>(s: S) -> (OwnedReadHalf<S>, OwnedWriteHalf<S>) {
    let s = Arc::new(s);
    (
        OwnedReadHalf(s.clone()),
        OwnedWriteHalf {
            stream: s,
            shutdown_on_drop: true,
        },
    )
}

/// The read half of a stream's `split` ([`TcpStream::split`] or
/// [`UnixStream::split`](super::UnixStream::split)).
#[derive(Debug)]
pub struct ReadHalf<'a, S: SplitStream = TcpStream>(&'a S);

/// The write half of a stream's `split`.
#[derive(Debug)]
pub struct WriteHalf<'a, S: SplitStream = TcpStream>(&'a S);

/// The read half of a stream's `into_split` ([`TcpStream::into_split`] or
/// [`UnixStream::into_split`](super::UnixStream::into_split)).
#[derive(Debug)]
pub struct OwnedReadHalf<S: SplitStream = TcpStream>(Arc<S>);

/// The write half of a stream's `into_split`; dropping it shuts the write side.
#[derive(Debug)]
pub struct OwnedWriteHalf<S: SplitStream = TcpStream> {
    stream: Arc<S>,
    shutdown_on_drop: bool,
}

/// The halves given to [`OwnedReadHalf::reunite`] came from different streams.
#[derive(Debug)]
pub struct ReuniteError<S: SplitStream = TcpStream>(pub OwnedReadHalf<S>, pub OwnedWriteHalf<S>);

impl<S: SplitStream> std::fmt::Display for ReuniteError<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tried to reunite halves that are not from the same stream")
    }
}

impl<S: SplitStream> std::error::Error for ReuniteError<S> {}

type Addr<S> = <<S as SplitStream>::Io as MioStream>::Addr;

impl<S: SplitStream> OwnedReadHalf<S> {
    /// Puts the halves back together, if they came from the same stream.
    pub fn reunite(self, other: OwnedWriteHalf<S>) -> Result<S, ReuniteError<S>> {
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

    /// The stream the half reads from.
    pub(crate) fn stream(&self) -> &S {
        &self.0
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<Addr<S>> {
        self.0.socket().get().peer()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<Addr<S>> {
        self.0.socket().get().local()
    }

    /// Waits until the stream may be readable (then [`try_read`](Self::try_read)).
    pub async fn readable(&self) -> io::Result<()> {
        self.0.socket().ready(Direction::Read).await
    }

    /// Reads what is there without waiting: `WouldBlock` if nothing is.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.socket().try_read(|s| s.read_in(buf))
    }
}

impl<S: SplitStream> OwnedWriteHalf<S> {
    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<Addr<S>> {
        self.stream.socket().get().peer()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<Addr<S>> {
        self.stream.socket().get().local()
    }

    /// Waits until the stream may be writable (then [`try_write`](Self::try_write)).
    pub async fn writable(&self) -> io::Result<()> {
        self.stream.socket().ready(Direction::Write).await
    }

    /// Writes what fits without waiting: `WouldBlock` if nothing does.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.stream.socket().try_write(|s| s.write_out(buf))
    }
}

impl<S: SplitStream> Drop for OwnedWriteHalf<S> {
    fn drop(&mut self) {
        if self.shutdown_on_drop {
            let _ = self.stream.socket().shutdown_write();
        }
    }
}

/// The async read trait, for the read halves.
macro_rules! async_read {
    ($ty:ty, $half:ident => $get:expr) => {
        impl<S: SplitStream> AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut [u8],
            ) -> Poll<io::Result<usize>> {
                let $half = &*self;
                $get.socket().poll_read_stream(cx, buf)
            }
        }
    };
}

/// The async write trait, for the write halves.
macro_rules! async_write {
    ($ty:ty, $half:ident => $get:expr) => {
        impl<S: SplitStream> AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                let $half = &*self;
                $get.socket().poll_write_stream(cx, buf)
            }

            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            /// Shuts the write side.
            fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                let $half = &*self;
                Poll::Ready($get.socket().shutdown_write())
            }
        }
    };
}

async_read!(ReadHalf<'_, S>, h => h.0);
async_write!(WriteHalf<'_, S>, h => h.0);
async_read!(OwnedReadHalf<S>, h => h.0);
async_write!(OwnedWriteHalf<S>, h => h.stream);

impl<S: SplitStream> AsRawFd for OwnedReadHalf<S> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.socket().get().as_raw_fd()
    }
}

impl<S: SplitStream> AsRawFd for OwnedWriteHalf<S> {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.socket().get().as_raw_fd()
    }
}
