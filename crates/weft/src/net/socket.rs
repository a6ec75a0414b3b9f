//! What every socket type shares: its registration with a runtime, the timeouts of its
//! blocking forms, and the three ways to run an operation (async, one try, blocking),
//! with the macros that give each public socket type the methods and trait impls
//! they all have in the same words.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::task::{Context, Poll};

use mio::event::Source;

use super::evented::{runtime_driver, Evented};
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

/// A registered mio socket and the timeouts of its blocking forms: the body of every
/// public socket type (each has it as its one field, `io`).
///
/// `pub` (in a private module) only so that the streams' split trait can name it.
pub struct Socket<E: Source> {
    io: Evented<E>,
    timeouts: Timeouts,
    /// Shut for reading by its own `shutdown`: a datagram receive that would block
    /// then returns 0, as a blocking one does (Linux answers a non-blocking receive on
    /// a shut, empty datagram socket with `EAGAIN`, so its waiters waited for ever).
    read_shut: std::sync::atomic::AtomicBool,
}

/// The sender address a datagram receive reports when it returns 0 for a socket shut
/// for reading (see `Socket::shut_or`).
pub(crate) trait NoPeer: Sized {
    fn no_peer() -> io::Result<Self>;
}

impl NoPeer for SocketAddr {
    fn no_peer() -> io::Result<Self> {
        Ok(SocketAddr::from(([0, 0, 0, 0], 0)))
    }
}

impl NoPeer for std::os::unix::net::SocketAddr {
    /// Unnamed, as a blocking receive on such a socket reports.
    fn no_peer() -> io::Result<Self> {
        std::os::unix::net::UnixDatagram::unbound()?.local_addr()
    }
}

impl<E: Source> Socket<E> {
    /// Registers `io` for reads and writes with the current runtime (or the most
    /// recently started live one).
    pub(crate) fn new(io: E) -> io::Result<Self> {
        Ok(Self::of(Evented::new(io)?))
    }

    /// Registers a listener (reads only).
    pub(crate) fn listener(io: E) -> io::Result<Self> {
        Ok(Self::of(Evented::with_interest(
            io,
            mio::Interest::READABLE,
        )?))
    }

    /// Registers for reads and writes the socket `make` makes, with the runtime
    /// [`new`](Self::new) would choose, found first: without a runtime `make` never
    /// runs, so a call that fails for want of one has no effect outside (no
    /// connection attempted, no port bound, no socket file left behind).
    pub(crate) fn make(make: impl FnOnce() -> io::Result<E>) -> io::Result<Self> {
        let driver = runtime_driver()?;
        let io = make()?;
        Ok(Self::of(Evented::on(
            driver,
            io,
            mio::Interest::READABLE | mio::Interest::WRITABLE,
        )?))
    }

    /// [`make`](Self::make) for a listener (reads only).
    pub(crate) fn make_listener(make: impl FnOnce() -> io::Result<E>) -> io::Result<Self> {
        let driver = runtime_driver()?;
        let io = make()?;
        Ok(Self::of(Evented::on(driver, io, mio::Interest::READABLE)?))
    }

    fn of(io: Evented<E>) -> Self {
        Socket {
            io,
            timeouts: Timeouts::default(),
            read_shut: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// After a successful `shutdown(how)` of this socket: remembers a shut read side
    /// and wakes the waits of the closed directions.
    pub(crate) fn shut(&self, how: std::net::Shutdown) {
        if how != std::net::Shutdown::Write {
            self.read_shut
                .store(true, std::sync::atomic::Ordering::Release);
        }
        self.io.closed_by_shutdown(how);
    }

    /// A datagram receive's result: on a socket shut for reading, `WouldBlock` becomes
    /// `eof` (0 bytes).
    pub(crate) fn shut_or<R>(
        &self,
        r: io::Result<R>,
        eof: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        match r {
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    && self.read_shut.load(std::sync::atomic::Ordering::Acquire) =>
            {
                eof()
            }
            r => r,
        }
    }

    /// Registers `s` (an accepted stream) with the runtime this socket belongs to.
    pub(crate) fn accepted<S: Source>(&self, s: S) -> io::Result<Socket<S>> {
        Ok(Socket::of(Evented::on(
            self.io.driver().clone(),
            s,
            mio::Interest::READABLE | mio::Interest::WRITABLE,
        )?))
    }

    /// The mio socket.
    pub(crate) fn get(&self) -> &E {
        self.io.get()
    }

    pub(crate) fn evented(&self) -> &Evented<E> {
        &self.io
    }

    pub(crate) fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Deregisters and returns the mio socket.
    pub(crate) fn into_inner(self) -> E {
        self.io.into_inner()
    }

    /// `f` until it does not say `WouldBlock`, waiting for readability in between.
    pub(crate) async fn read<R>(&self, f: impl FnMut(&E) -> io::Result<R>) -> io::Result<R> {
        self.io.async_io(Direction::Read, f).await
    }

    /// `f` until it does not say `WouldBlock`, waiting for writability in between.
    pub(crate) async fn write<R>(&self, f: impl FnMut(&E) -> io::Result<R>) -> io::Result<R> {
        self.io.async_io(Direction::Write, f).await
    }

    /// [`read`](Self::read) blocking as `weft::wait` does, for at most the read
    /// timeout.
    pub(crate) fn read_blocking<R>(&self, mut f: impl FnMut(&E) -> io::Result<R>) -> io::Result<R> {
        self.io
            .blocking_io(Direction::Read, self.timeouts.read(), |s, _| f(s))
    }

    /// [`write`](Self::write) blocking as `weft::wait` does, for at most the write
    /// timeout.
    pub(crate) fn write_blocking<R>(
        &self,
        mut f: impl FnMut(&E) -> io::Result<R>,
    ) -> io::Result<R> {
        self.io
            .blocking_io(Direction::Write, self.timeouts.write(), |s, _| f(s))
    }

    /// [`read`](Self::read) for a task's poll (the read direction's waker slot).
    pub(crate) fn poll_read<R>(
        &self,
        cx: &mut Context<'_>,
        f: impl FnMut(&E) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.io.poll_io(cx, Direction::Read, f)
    }

    /// One try of a read, without waiting.
    pub(crate) fn try_read<R>(&self, f: impl FnOnce(&E) -> io::Result<R>) -> io::Result<R> {
        self.io.try_io(Direction::Read, f)
    }

    /// One try of a write, without waiting.
    pub(crate) fn try_write<R>(&self, f: impl FnOnce(&E) -> io::Result<R>) -> io::Result<R> {
        self.io.try_io(Direction::Write, f)
    }

    /// Waits until the socket may be ready for `dir`.
    pub(crate) async fn ready(&self, dir: Direction) -> io::Result<()> {
        self.io.ready(dir, None).await.map(|_| ())
    }
}

/// `from_std`, `into_std`, `AsRawFd` and `AsFd` for `$ty`, a socket type whose one
/// field is `io: Socket<$mio>`; `$register` is the `Socket` constructor for it.
macro_rules! socket_common {
    ($ty:ident, $mio:ty, $std:ty, $register:ident) => {
        impl $ty {
            /// Takes a std socket (made non-blocking here) into the current runtime (or
            /// the most recently started live one).
            pub fn from_std(socket: $std) -> ::std::io::Result<$ty> {
                socket.set_nonblocking(true)?;
                Ok($ty {
                    io: $crate::net::socket::Socket::$register(<$mio>::from_std(socket))?,
                })
            }

            /// Deregisters the socket and returns it as a std socket, still in
            /// non-blocking mode (as tokio's).
            pub fn into_std(self) -> ::std::io::Result<$std> {
                Ok(self.io.into_inner().into())
            }
        }

        impl ::std::os::fd::AsRawFd for $ty {
            fn as_raw_fd(&self) -> ::std::os::fd::RawFd {
                self.io.get().as_raw_fd()
            }
        }

        impl ::std::os::fd::AsFd for $ty {
            fn as_fd(&self) -> ::std::os::fd::BorrowedFd<'_> {
                self.io.get().as_fd()
            }
        }
    };
}

/// The methods of `$ty`, a connection or datagram socket with addresses of type
/// `$addr`: its addresses, its blocking forms' timeouts, and its readiness; and its
/// `Debug`.
macro_rules! socket_io {
    ($ty:ident, $addr:ty) => {
        impl $ty {
            /// The local address.
            pub fn local_addr(&self) -> ::std::io::Result<$addr> {
                self.io.get().local_addr()
            }

            /// The remote address (an error if the socket is not connected).
            pub fn peer_addr(&self) -> ::std::io::Result<$addr> {
                self.io.get().peer_addr()
            }

            /// Sets the timeout of the blocking reads and receives (`std::io::Read`,
            /// the `_blocking` forms); `None` waits for ever. A zero duration is an
            /// error, as in std. A read that times out fails with `WouldBlock`, as
            /// std's does on Unix.
            pub fn set_read_timeout(
                &self,
                timeout: Option<::std::time::Duration>,
            ) -> ::std::io::Result<()> {
                self.io.timeouts().set_read(timeout)
            }

            /// Sets the timeout of the blocking writes and sends, as
            /// [`set_read_timeout`](Self::set_read_timeout).
            pub fn set_write_timeout(
                &self,
                timeout: Option<::std::time::Duration>,
            ) -> ::std::io::Result<()> {
                self.io.timeouts().set_write(timeout)
            }

            /// The blocking reads' timeout.
            pub fn read_timeout(&self) -> ::std::io::Result<Option<::std::time::Duration>> {
                Ok(self.io.timeouts().read())
            }

            /// The blocking writes' timeout.
            pub fn write_timeout(&self) -> ::std::io::Result<Option<::std::time::Duration>> {
                Ok(self.io.timeouts().write())
            }

            /// Waits until the socket may be readable (then try a `try_` read: it may
            /// still say `WouldBlock`, and then wait again).
            pub async fn readable(&self) -> ::std::io::Result<()> {
                self.io
                    .ready($crate::driver::readiness::Direction::Read)
                    .await
            }

            /// Waits until the socket may be writable (then try a `try_` write).
            pub async fn writable(&self) -> ::std::io::Result<()> {
                self.io
                    .ready($crate::driver::readiness::Direction::Write)
                    .await
            }
        }

        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("local_addr", &self.local_addr().ok())
                    .field("peer_addr", &self.peer_addr().ok())
                    .finish()
            }
        }
    };
}

/// The accepting methods of a listener whose streams are `$stream` (over
/// `$mio_stream`) and peers' addresses `$addr`, and its `local_addr` and `Debug`.
macro_rules! listener_api {
    ($ty:ident, $stream:ident, $mio_stream:ty, $addr:ty) => {
        impl $ty {
            /// Accepts a connection.
            pub async fn accept(&self) -> ::std::io::Result<($stream, $addr)> {
                let accepted = self.io.read(|l| l.accept()).await;
                self.register_accepted(accepted)
            }

            /// Accepts a connection, blocking as `weft::wait` does: a fiber suspends, a
            /// worker helps, a plain thread blocks.
            pub fn accept_blocking(&self) -> ::std::io::Result<($stream, $addr)> {
                let accepted = self.io.read_blocking(|l| l.accept());
                self.register_accepted(accepted)
            }

            /// Polls for a connection (the task form of [`accept`](Self::accept)).
            ///
            /// Only the waker of the most recent call is woken when a connection comes
            /// (as with tokio's `poll_accept`): two tasks polling one listener this way
            /// leave the first asleep. To accept from several tasks or fibers at once,
            /// use [`accept`](Self::accept) or [`accept_blocking`](Self::accept_blocking).
            pub fn poll_accept(
                &self,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<($stream, $addr)>> {
                self.io
                    .poll_read(cx, |l| l.accept())
                    .map(|accepted| self.register_accepted(accepted))
            }

            /// Registers an accepted stream with the listener's runtime.
            fn register_accepted(
                &self,
                accepted: ::std::io::Result<($mio_stream, $addr)>,
            ) -> ::std::io::Result<($stream, $addr)> {
                let (s, a) = accepted?;
                let io = self.io.accepted(s)?;
                Ok(($stream { io }, a))
            }

            /// The address this listener is bound to.
            pub fn local_addr(&self) -> ::std::io::Result<$addr> {
                self.io.get().local_addr()
            }
        }

        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("local_addr", &self.local_addr().ok())
                    .finish()
            }
        }
    };
}

/// The connected-datagram methods (`send`, `recv` and their forms) and `recv_from`'s
/// forms of a datagram socket whose peers' addresses are `$addr`.
macro_rules! datagram_api {
    ($addr:ty) => {
        /// Sends `buf` to the connected peer; returns how many bytes went.
        pub async fn send(&self, buf: &[u8]) -> ::std::io::Result<usize> {
            self.io.write(|s| s.send(buf)).await
        }

        /// Receives a datagram from the connected peer into `buf` (what does not fit
        /// is lost).
        pub async fn recv(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
            self.io
                .read(|s| self.io.shut_or(s.recv(buf), || Ok(0)))
                .await
        }

        /// Receives a datagram and the address it came from.
        pub async fn recv_from(&self, buf: &mut [u8]) -> ::std::io::Result<(usize, $addr)> {
            self.io
                .read(|s| {
                    self.io.shut_or(s.recv_from(buf), || {
                        Ok((0, <$addr as $crate::net::socket::NoPeer>::no_peer()?))
                    })
                })
                .await
        }

        /// [`send`](Self::send), blocking as `weft::wait` does (a fiber suspends, a
        /// worker helps, a plain thread blocks), for at most the write timeout.
        pub fn send_blocking(&self, buf: &[u8]) -> ::std::io::Result<usize> {
            self.io.write_blocking(|s| s.send(buf))
        }

        /// [`recv`](Self::recv), blocking as `weft::wait` does, for at most the read
        /// timeout (then `WouldBlock`).
        pub fn recv_blocking(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
            self.io
                .read_blocking(|s| self.io.shut_or(s.recv(buf), || Ok(0)))
        }

        /// [`recv_from`](Self::recv_from), blocking as `weft::wait` does, for at most
        /// the read timeout (then `WouldBlock`).
        pub fn recv_from_blocking(&self, buf: &mut [u8]) -> ::std::io::Result<(usize, $addr)> {
            self.io.read_blocking(|s| {
                self.io.shut_or(s.recv_from(buf), || {
                    Ok((0, <$addr as $crate::net::socket::NoPeer>::no_peer()?))
                })
            })
        }

        /// Sends to the connected peer without waiting: `WouldBlock` if the socket's
        /// buffer is full.
        pub fn try_send(&self, buf: &[u8]) -> ::std::io::Result<usize> {
            self.io.try_write(|s| s.send(buf))
        }

        /// Receives a datagram from the connected peer without waiting: `WouldBlock`
        /// if none is there.
        pub fn try_recv(&self, buf: &mut [u8]) -> ::std::io::Result<usize> {
            self.io.try_read(|s| self.io.shut_or(s.recv(buf), || Ok(0)))
        }

        /// Receives a datagram and its sender's address without waiting: `WouldBlock`
        /// if none is there.
        pub fn try_recv_from(&self, buf: &mut [u8]) -> ::std::io::Result<(usize, $addr)> {
            self.io.try_read(|s| {
                self.io.shut_or(s.recv_from(buf), || {
                    Ok((0, <$addr as $crate::net::socket::NoPeer>::no_peer()?))
                })
            })
        }
    };
}

/// `set_ttl` and `ttl` (`IP_TTL`), for the IP sockets.
macro_rules! ip_ttl {
    () => {
        /// Sets `IP_TTL`.
        pub fn set_ttl(&self, ttl: u32) -> ::std::io::Result<()> {
            self.io.get().set_ttl(ttl)
        }

        /// Gets `IP_TTL`.
        pub fn ttl(&self) -> ::std::io::Result<u32> {
            self.io.get().ttl()
        }
    };
}

pub(crate) use {datagram_api, ip_ttl, listener_api, socket_common, socket_io};
