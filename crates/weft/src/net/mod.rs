//! Sockets on the runtime's workers: TCP, UDP and Unix domain sockets, for async tasks
//! and for blocking code alike.
//!
//! Each socket is registered with one runtime's I/O driver (the current runtime where
//! it is made, else the most recently started live one) and read through one
//! readiness word (see the driver). A task `.await`s it through `futures_io`'s
//! `AsyncRead`/`AsyncWrite` ([`weft::io`](crate::io) gives tokio's method names); a
//! fiber, a worker or a plain thread uses `std::io::Read`/`Write` and the `_blocking`
//! forms, which wait as [`weft::wait`](crate::wait) does: the fiber suspends, the
//! worker helps, the thread blocks. When the runtime shuts down, everyone waiting on
//! one of its sockets wakes with an error.
//!
//! The halves of a split stream ([`ReadHalf`], [`OwnedReadHalf`], ...) are generic
//! over the stream, [`TcpStream`] by default: a [`UnixStream`]'s are
//! `OwnedReadHalf<UnixStream>` and so on.
//!
//! Files have no driver here: use `weft::spawn_blocking` for them.

mod evented;
mod socket;
mod stream;
mod tcp;
mod timeouts;
mod udp;
mod unix;

pub use stream::{OwnedReadHalf, OwnedWriteHalf, ReadHalf, ReuniteError, WriteHalf};
pub use tcp::{TcpListener, TcpStream};
pub use udp::UdpSocket;
pub use unix::{UnixDatagram, UnixListener, UnixStream};

/// Resolves `host` (for example `"localhost:80"`) on the blocking pool, so the lookup
/// never stalls a worker. The pool is the current runtime's, or else (on a plain
/// thread) the most recently started live runtime's, as for sockets; with none, an
/// error.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let mut addrs = weft::net::lookup_host("127.0.0.1:80").await.unwrap();
///     assert_eq!(addrs.next().unwrap().port(), 80);
/// });
/// ```
pub async fn lookup_host<T>(host: T) -> std::io::Result<impl Iterator<Item = std::net::SocketAddr>>
where
    T: std::net::ToSocketAddrs + Send + 'static,
{
    // Not `crate::spawn_blocking`, which panics off a runtime (found in review: a
    // lookup in `weft::wait` on a plain thread panicked where a socket's `bind` worked).
    let addrs = evented::socket_runtime()?
        .spawn_blocking(move || host.to_socket_addrs().map(|a| a.collect::<Vec<_>>()))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
    Ok(addrs.into_iter())
}
