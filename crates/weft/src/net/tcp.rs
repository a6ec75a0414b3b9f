//! TCP: [`TcpListener`] and [`TcpStream`] (the stream's halves are the shared ones of
//! `super::stream`).

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;

use super::socket::{addrs, each_addr, ip_ttl, listener_api, socket_common, socket_io, Socket};
use super::stream::{stream_api, OwnedReadHalf};

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
    io: Socket<mio::net::TcpListener>,
}

listener_api!(TcpListener, TcpStream, mio::net::TcpStream, SocketAddr);
socket_common!(
    TcpListener,
    mio::net::TcpListener,
    std::net::TcpListener,
    listener
);

/// The listen backlog of [`TcpListener::bind`]: tokio's. std and mio listen with 128,
/// and a burst of connects beyond the accept queue is not refused but stalls: the
/// kernel drops the SYNs it has no room for, and the clients retry after a second or
/// more (`tests/net_tcp.rs`, `a_burst_of_connects_queues_before_any_accept`). Under
/// that overflow (1,000 clients connecting to one listener at once, SYN cookies on)
/// a test server here also accepted, in 6 of about 780 runs, a connection whose
/// client side did not exist (no byte, no FIN, and `ss` showed no socket for it), and
/// a real client's connection stayed queued behind it for good: the hang of
/// `echo_with_1000_connections_*`.
const BACKLOG: libc::c_int = 1024;

impl TcpListener {
    /// Binds to `addr` (the first of its addresses that binds) and listens, with a
    /// backlog of 1,024 connections (tokio's; the kernel caps it at
    /// `net.core.somaxconn`).
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        let addrs = addrs(addr)?;
        Ok(TcpListener {
            io: Socket::make_listener(|| {
                each_addr(addrs, |a| {
                    let l = mio::net::TcpListener::bind(a)?;
                    // A second `listen` on a listening socket sets its backlog anew.
                    // SAFETY: `listen` on a socket this function owns; no memory is
                    // passed.
                    if unsafe { libc::listen(l.as_raw_fd(), BACKLOG) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(l)
                })
            })?,
        })
    }

    ip_ttl!();
}

/// A TCP connection.
///
/// Async code uses it through `futures_io::AsyncRead` and `AsyncWrite` (with
/// [`weft::io::AsyncReadExt`](crate::io::AsyncReadExt) for tokio's method names);
/// blocking code through `std::io::Read` and `Write`, which block as `weft::wait`
/// does (a fiber suspends, a worker helps, a plain thread blocks) and honour the read
/// and write timeouts.
///
/// Urgent (out-of-band, `MSG_OOB`) data is not supported: a read that returns less than
/// its buffer counts as having drained the socket, and Linux ends a read early at an
/// urgent byte, so data queued behind one is read only once more arrives (tokio's
/// streams behave the same).
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
    io: Socket<mio::net::TcpStream>,
}

socket_common!(TcpStream, mio::net::TcpStream, std::net::TcpStream, new);
socket_io!(TcpStream, SocketAddr);
stream_api!(TcpStream, mio::net::TcpStream);

impl TcpStream {
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
        let io = Socket::make(|| mio::net::TcpStream::connect(addr))?;
        io.finish_connect().await?;
        Ok(TcpStream { io })
    }

    /// Connects to `addr`, blocking as `weft::wait` does.
    pub fn connect_blocking(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        each_addr(addrs(addr)?, |a| {
            let io = Socket::make(|| mio::net::TcpStream::connect(a))?;
            io.finish_connect_blocking()?;
            Ok(TcpStream { io })
        })
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.io.get().set_nodelay(nodelay)
    }

    /// Gets `TCP_NODELAY`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.io.get().nodelay()
    }

    ip_ttl!();

    /// Reads without taking the data out of the socket's queue.
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.read(|s| s.peek(buf)).await
    }
}

impl OwnedReadHalf<TcpStream> {
    /// See [`TcpStream::peek`].
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream().peek(buf).await
    }
}
