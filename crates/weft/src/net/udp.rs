//! UDP: [`UdpSocket`].

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

use super::socket::{addrs, datagram_api, each_addr, ip_ttl, socket_common, socket_io, Socket};

/// A UDP socket.
///
/// Every method takes `&self`, so one socket can be shared (in an `Arc`) by many
/// senders and receivers, tasks and fibers alike. The async forms (`send_to`,
/// `recv_from`, ...) are for tasks; the `_blocking` forms wait as `weft::wait` does
/// (a fiber suspends, a worker helps, a plain thread blocks) and honour the read and
/// write timeouts.
///
/// Addresses are taken as `std::net::ToSocketAddrs` and resolved where the call is
/// made (see [`lookup_host`](super::lookup_host) for names); `send_to` sends to the
/// first address only, as tokio's does.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let a = weft::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
///     let b = weft::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
///     a.send_to(b"hi", b.local_addr().unwrap()).await.unwrap();
///     let mut buf = [0; 8];
///     let (n, from) = b.recv_from(&mut buf).await.unwrap();
///     assert_eq!(&buf[..n], b"hi");
///     assert_eq!(from, a.local_addr().unwrap());
/// });
/// ```
///
/// From a fiber or a plain thread:
///
/// ```
/// let _rt = weft::Runtime::new().unwrap();
/// let a = weft::wait(weft::net::UdpSocket::bind("127.0.0.1:0")).unwrap();
/// let b = weft::wait(weft::net::UdpSocket::bind("127.0.0.1:0")).unwrap();
/// let to = b.local_addr().unwrap();
/// let f = weft::fiber::spawn(move || {
///     let mut buf = [0; 8];
///     let (n, _) = b.recv_from_blocking(&mut buf).unwrap();
///     buf[..n].to_vec()
/// });
/// a.send_to_blocking(b"ping", to).unwrap();
/// assert_eq!(f.join().unwrap(), b"ping");
/// ```
pub struct UdpSocket {
    io: Socket<mio::net::UdpSocket>,
}

socket_common!(UdpSocket, mio::net::UdpSocket, std::net::UdpSocket, new);
socket_io!(UdpSocket, SocketAddr);

/// The first address `addr` names.
fn first_addr(addr: impl ToSocketAddrs) -> io::Result<SocketAddr> {
    Ok(addrs(addr)?[0])
}

impl UdpSocket {
    /// Binds to `addr` (the first of its addresses that binds), in the current runtime
    /// (or the most recently started live one).
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        let addrs = addrs(addr)?;
        Ok(UdpSocket {
            io: Socket::make(|| each_addr(addrs, mio::net::UdpSocket::bind))?,
        })
    }

    /// Connects the socket to `addr` (the first of its addresses that connects): `send`
    /// and `recv` then go to and come from that peer only.
    pub async fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<()> {
        each_addr(addrs(addr)?, |a| self.io.get().connect(a))
    }

    datagram_api!(SocketAddr);

    /// Sends `buf` to `target` (its first address); returns how many bytes went.
    pub async fn send_to(&self, buf: &[u8], target: impl ToSocketAddrs) -> io::Result<usize> {
        let to = first_addr(target)?;
        self.io.write(|s| s.send_to(buf, to)).await
    }

    /// [`send_to`](Self::send_to), blocking as `weft::wait` does (a fiber suspends, a
    /// worker helps, a plain thread blocks), for at most the write timeout.
    pub fn send_to_blocking(&self, buf: &[u8], target: impl ToSocketAddrs) -> io::Result<usize> {
        let to = first_addr(target)?;
        self.io.write_blocking(|s| s.send_to(buf, to))
    }

    /// Sends `buf` to `target` without waiting: `WouldBlock` if the socket's buffer is
    /// full.
    pub fn try_send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        self.io.try_write(|s| s.send_to(buf, target))
    }

    /// Receives a datagram and its sender's address without taking it out of the
    /// socket's queue.
    pub async fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.io.read(|s| s.peek_from(buf)).await
    }

    /// Receives a datagram from the connected peer without taking it out of the
    /// socket's queue.
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.read(|s| s.peek(buf)).await
    }

    /// Sets `SO_BROADCAST`.
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.io.get().set_broadcast(on)
    }

    /// Gets `SO_BROADCAST`.
    pub fn broadcast(&self) -> io::Result<bool> {
        self.io.get().broadcast()
    }

    ip_ttl!();

    /// Takes the pending error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.io.get().take_error()
    }
}
