//! Unix domain sockets: [`UnixListener`], [`UnixStream`] (its halves are the shared
//! ones of `super::stream`) and [`UnixDatagram`]. Addresses are std's
//! `std::os::unix::net::SocketAddr`.

use std::io;
use std::os::unix::net::SocketAddr;
use std::path::Path;

use super::socket::{datagram_api, listener_api, socket_common, socket_io, Socket};
use super::stream::stream_api;

/// A Unix stream socket server, listening for connections on a path.
///
/// As with std's, the socket file stays after the listener is dropped: remove it
/// yourself.
///
/// ```
/// use weft::io::{AsyncReadExt, AsyncWriteExt};
/// let dir = std::env::temp_dir().join(format!("weft-doc-ul-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("echo.sock");
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let listener = weft::net::UnixListener::bind(&path).unwrap();
///     let server = weft::spawn(async move {
///         let (mut s, _) = listener.accept().await.unwrap();
///         let mut buf = [0; 5];
///         s.read_exact(&mut buf).await.unwrap();
///         s.write_all(&buf).await.unwrap();
///     });
///     let mut c = weft::net::UnixStream::connect(&path).await.unwrap();
///     c.write_all(b"hello").await.unwrap();
///     let mut buf = [0; 5];
///     c.read_exact(&mut buf).await.unwrap();
///     assert_eq!(&buf, b"hello");
///     server.await.unwrap();
/// });
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub struct UnixListener {
    io: Socket<mio::net::UnixListener>,
}

listener_api!(UnixListener, UnixStream, mio::net::UnixStream, SocketAddr);
socket_common!(
    UnixListener,
    mio::net::UnixListener,
    std::os::unix::net::UnixListener,
    listener
);

impl UnixListener {
    /// Binds to `path` and listens, in the current runtime (or the most recently
    /// started live one). Fails if the path exists.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        Ok(UnixListener {
            io: Socket::make_listener(|| mio::net::UnixListener::bind(path))?,
        })
    }
}

/// A Unix stream socket: a connection.
///
/// Used as [`TcpStream`](super::TcpStream) is: async code through
/// `futures_io::AsyncRead` and `AsyncWrite`, blocking code through `std::io::Read`
/// and `Write` (which block as `weft::wait` does and honour the read and write
/// timeouts).
///
/// One difference from a blocking std socket: a write that waits for room (the
/// peer's buffer full) while the peer shuts down only its read side, and neither
/// reads nor closes, goes on waiting until the peer closes (it then fails with
/// `BrokenPipe`) or its write timeout passes. Linux's epoll reports no event for that
/// shutdown; tokio's Unix streams wait the same way.
///
/// ```
/// use std::io::{Read, Write};
/// let _rt = weft::Runtime::new().unwrap();
/// let (mut a, mut b) = weft::net::UnixStream::pair().unwrap();
/// let echo = weft::fiber::spawn(move || {
///     let mut buf = [0; 4];
///     b.read_exact(&mut buf).unwrap();
///     b.write_all(&buf).unwrap();
/// });
/// a.write_all(b"ping").unwrap();
/// let mut buf = [0; 4];
/// a.read_exact(&mut buf).unwrap();
/// assert_eq!(&buf, b"ping");
/// echo.join().unwrap();
/// ```
pub struct UnixStream {
    io: Socket<mio::net::UnixStream>,
}

socket_common!(
    UnixStream,
    mio::net::UnixStream,
    std::os::unix::net::UnixStream,
    new
);
/// The first and the longest pause between connects to a full backlog.
const BACKLOG_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);
const BACKLOG_LAST_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

socket_io!(UnixStream, SocketAddr);
stream_api!(UnixStream, mio::net::UnixStream);

impl UnixStream {
    /// Connects to the socket at `path`. While the listener's backlog is full it
    /// waits for room, as std's blocking connect does (see [`connect_blocking`]).
    ///
    /// [`connect_blocking`]: Self::connect_blocking
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let path = path.as_ref();
        let mut pause = BACKLOG_FIRST_PAUSE;
        loop {
            match Socket::make(|| mio::net::UnixStream::connect(path)) {
                Ok(io) => {
                    io.finish_connect().await?;
                    return Ok(UnixStream { io });
                }
                // Linux answers a non-blocking connect to a full backlog with `EAGAIN`,
                // and no event says when there is room (found in review: the connect
                // failed at once with `WouldBlock`): try again after a pause.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let driver = super::evented::runtime_driver()?;
                    crate::time::sleep_on(driver, std::time::Instant::now() + pause).await;
                    pause = (pause * 2).min(BACKLOG_LAST_PAUSE);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Connects to the socket at `path`, blocking as `weft::wait` does; like std's, it
    /// waits while the listener's backlog is full.
    pub fn connect_blocking(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        crate::wait(Self::connect(path))
    }

    /// Two connected streams, in the current runtime (or the most recently started
    /// live one).
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = mio::net::UnixStream::pair()?;
        Ok((
            UnixStream {
                io: Socket::new(a)?,
            },
            UnixStream {
                io: Socket::new(b)?,
            },
        ))
    }
}

/// A Unix datagram socket.
///
/// As [`UdpSocket`](super::UdpSocket): every method takes `&self`; the async forms are
/// for tasks, the `_blocking` forms wait as `weft::wait` does and honour the read and
/// write timeouts.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("weft-doc-ud-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let server = weft::net::UnixDatagram::bind(dir.join("server.sock")).unwrap();
///     let client = weft::net::UnixDatagram::unbound().unwrap();
///     client.send_to(b"hi", dir.join("server.sock")).await.unwrap();
///     let mut buf = [0; 8];
///     let (n, _) = server.recv_from(&mut buf).await.unwrap();
///     assert_eq!(&buf[..n], b"hi");
/// });
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub struct UnixDatagram {
    io: Socket<mio::net::UnixDatagram>,
}

socket_common!(
    UnixDatagram,
    mio::net::UnixDatagram,
    std::os::unix::net::UnixDatagram,
    new
);
socket_io!(UnixDatagram, SocketAddr);

impl UnixDatagram {
    /// Binds to `path`, in the current runtime (or the most recently started live
    /// one). Fails if the path exists.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixDatagram> {
        Ok(UnixDatagram {
            io: Socket::make(|| mio::net::UnixDatagram::bind(path))?,
        })
    }

    /// A socket bound to no address (it can send, and receive replies only if its
    /// peer was connected to it or it was paired).
    pub fn unbound() -> io::Result<UnixDatagram> {
        Self::of(mio::net::UnixDatagram::unbound()?)
    }

    /// Two sockets connected to each other.
    pub fn pair() -> io::Result<(UnixDatagram, UnixDatagram)> {
        let (a, b) = mio::net::UnixDatagram::pair()?;
        Ok((Self::of(a)?, Self::of(b)?))
    }

    fn of(s: mio::net::UnixDatagram) -> io::Result<UnixDatagram> {
        Ok(UnixDatagram {
            io: Socket::new(s)?,
        })
    }

    /// Connects the socket to `path`: `send` and `recv` then go to and come from
    /// that peer only.
    pub fn connect(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.io.get().connect(path)
    }

    datagram_api!(SocketAddr);

    /// Sends `buf` to the socket at `target`; returns how many bytes went.
    pub async fn send_to(&self, buf: &[u8], target: impl AsRef<Path>) -> io::Result<usize> {
        self.io.write(|s| s.send_to(buf, target.as_ref())).await
    }

    /// [`send_to`](Self::send_to), blocking as `weft::wait` does (a fiber suspends, a
    /// worker helps, a plain thread blocks), for at most the write timeout.
    pub fn send_to_blocking(&self, buf: &[u8], target: impl AsRef<Path>) -> io::Result<usize> {
        self.io.write_blocking(|s| s.send_to(buf, target.as_ref()))
    }

    /// Sends `buf` to `target` without waiting: `WouldBlock` if the peer's queue is
    /// full.
    pub fn try_send_to(&self, buf: &[u8], target: impl AsRef<Path>) -> io::Result<usize> {
        self.io.try_write(|s| s.send_to(buf, target.as_ref()))
    }

    /// Shuts down the read side, the write side or both. Sends blocked on this socket
    /// elsewhere then fail with `BrokenPipe`, and receives with nothing queued return
    /// 0 bytes (as std's blocking ones do).
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        self.io.get().shutdown(how)?;
        self.io.shut(how);
        Ok(())
    }

    /// Takes the pending error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.io.get().take_error()
    }
}
